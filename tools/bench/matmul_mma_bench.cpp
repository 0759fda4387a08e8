// matmul_mma (kernels/examples/matmul_mma.cpp: the portable tensor-core matmul over matrix
// fragments) on the CPU, against OpenBLAS sgemm and against the machine's peak FMA rate, both
// measured in the same run on all threads. f32 inputs are multiplied as tf32 (as a tensor core
// does), bf16 inputs as bf16; both accumulate in f32, so every variant does 2*M*N*K flops of
// f32 FMA work. Ratios above 1 mean kiln is faster. Results are checked against OpenBLAS first.
//   matmul_mma_bench [--quick]
// Run it without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE set: they make OpenBLAS pick slower kernels.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ir/float16.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/matmul_peers.h"

using namespace kiln;
using bench::must;

namespace {

struct Timing {
  double ms, gflops;
};

// kiln's matmul_mma on `rt`'s device: c = a * b with a M x K, b K x N of element type `t`.
Timing run_kiln(Runtime& rt, ir::ElemType t, const void* a, const void* b, void* c, int64_t n,
                int reps) {
  Tensor ta = must(rt.wrap(const_cast<void*>(a), t, std::vector<int64_t>{n, n}));
  Tensor tb = must(rt.wrap(const_cast<void*>(b), t, std::vector<int64_t>{n, n}));
  const ir::ElemType ct = ir::is_int(t) ? ir::ElemType::I32 : ir::ElemType::F32;
  Tensor tc = must(rt.wrap(c, ct, std::vector<int64_t>{n, n}));
  auto kern = must(rt.kernel("matmul_mma"));
  const auto tiles = static_cast<uint32_t>((n + 63) / 64);  // 2 x 2 planes of 32 x 32
  auto once = [&] {
    must(rt.launch(kern, Dim3(tiles, tiles), Dim3(128), ta, tb, tc, 32, 32, 2, 2, 2, false, false,
                   false, 1));
    must(rt.sync());
  };
  once();  // compiles
  const double s = bench::median_seconds(once, reps, 7);
  return {s * 1e3, 2.0 * static_cast<double>(n) * n * n / s / 1e9};
}

// kiln's matmul_wgmma (kernels/examples/matmul_wgmma.cpp) on the CPU: c = a * bt^T, bt holding
// B transposed (both operands K-major, as wgmma reads them); 128 x 128 tiles, two warpgroups.
Timing run_wgmma(Runtime& rt, ir::ElemType t, const void* a, const void* bt, float* c, int64_t n,
                 int reps) {
  Tensor ta = must(rt.wrap(const_cast<void*>(a), t, std::vector<int64_t>{n, n}));
  Tensor tb = must(rt.wrap(const_cast<void*>(bt), t, std::vector<int64_t>{n, n}));
  Tensor tc = must(rt.wrap(c, ir::ElemType::F32, std::vector<int64_t>{n, n}));
  auto kern = must(rt.kernel("matmul_wgmma"));
  const auto tiles = static_cast<uint32_t>((n + 127) / 128);
  auto once = [&] {
    must(rt.launch(kern, Dim3(tiles, tiles), Dim3(256), ta, tb, tc, 128, 2, 128, 1));
    must(rt.sync());
  };
  once();  // compiles
  const double s = bench::median_seconds(once, reps, 7);
  return {s * 1e3, 2.0 * static_cast<double>(n) * n * n / s / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  (void)kernels::builtin_names();
  Runtime rt = must(Runtime::open("cpu"));
  std::printf("matmul_mma_bench: %s, %d threads%s\n", rt.device().description.c_str(),
              rt.device().cores, quick ? " (quick sizes)" : "");
  const double peak = bench::peak_fma_gflops();
  std::printf("peak f32 FMA rate (a tight loop of independent FMAs, all threads): %.0f GFLOP/s\n",
              peak);
  const double peak_i8 = bench::peak_dot_i8_gops(), peak_bf16 = bench::peak_dot_bf16_gflops();
  if (peak_i8 > 0)
    std::printf("peak int8 dot rate (vpdpbusd, all threads): %.0f GOP/s\n", peak_i8);
  else
    std::printf("peak int8 dot rate: this CPU has no AVX-512 VNNI\n");
  if (peak_bf16 > 0)
    std::printf("peak bf16 dot rate (vdpbf16ps, all threads; kiln does not use it): %.0f GFLOP/s\n",
                peak_bf16);
  if (!bench::have_openblas()) {
    std::printf("OpenBLAS: not found at build time (install libopenblas-dev); no sgemm ratios\n");
  } else {
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    std::printf("OpenBLAS: %s kernels%s%s\n", bench::openblas_core(),
                env ? ", chosen by OPENBLAS_CORETYPE=" : " (its own choice)", env ? env : "");
    if (std::string(bench::openblas_core()) == "Prescott")
      std::printf(
          "  (OpenBLAS's generic kernels: it did not recognize this CPU; compare with "
          "OPENBLAS_CORETYPE=SkylakeX or Cooperlake on an AVX-512 host)\n");
  }
  std::printf("\n%6s  %10s %10s  %10s %10s  %9s %9s  %9s %9s  %8s %8s %8s\n", "n", "sgemm", "",
              "kiln tf32", "", "kiln bf16", "", "wgmma", "bf16", "tf32/", "bf16/", "wgmma/");
  std::printf("%6s  %10s %10s  %10s %10s  %9s %9s  %9s %9s  %8s %8s %8s\n", "", "ms", "GFLOP/s",
              "ms", "GFLOP/s", "ms", "GFLOP/s", "ms", "GFLOP/s", "sgemm", "peak", "peak");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t n :
       quick ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{256, 512, 1024, 2048}) {
    const size_t nn = static_cast<size_t>(n * n);
    std::vector<float> a(nn), b(nn), c(nn), ref(nn);
    for (float& x : a) x = d(rng);
    for (float& x : b) x = d(rng);
    std::vector<uint16_t> a16(nn), b16(nn), bt16(nn);
    for (size_t i = 0; i < nn; ++i) {
      a16[i] = bf16_bits(a[i]);
      b16[i] = bf16_bits(b[i]);
      bt16[(i % static_cast<size_t>(n)) * static_cast<size_t>(n) + i / static_cast<size_t>(n)] =
          b16[i];
    }
    const int reps = n <= 512 ? 10 : 1;
    // kiln first, then OpenBLAS, then a pause: OpenBLAS's threads keep spinning for a while
    // after a call, which would slow whatever runs next on this 2-core machine.
    const Timing tf = run_kiln(rt, ir::ElemType::F32, a.data(), b.data(), c.data(), n, reps);
    std::vector<float> c_tf = c;
    const Timing wg = run_wgmma(rt, ir::ElemType::BF16, a16.data(), bt16.data(), c.data(), n, reps);
    std::vector<float> c_wg = c;
    const Timing bf = run_kiln(rt, ir::ElemType::BF16, a16.data(), b16.data(), c.data(), n, reps);
    double blas_ms = 0, blas_gf = 0;
    if (bench::have_openblas()) {
      auto sgemm = [&] { bench::peer_sgemm(a.data(), b.data(), ref.data(), n, n, n); };
      sgemm();
      const double s = bench::median_seconds(sgemm, reps, 7);
      blas_ms = s * 1e3;
      blas_gf = 2.0 * static_cast<double>(n) * n * n / s / 1e9;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      // tf32 inputs: about 2^-11 relative per product; bf16 2^-8.
      const double et = bench::max_rel_error(c_tf, ref), eb = bench::max_rel_error(c, ref);
      if (et > 2e-2) bench::die("kiln's tf32 matmul differs from sgemm by " + std::to_string(et));
      if (eb > 5e-2) bench::die("kiln's bf16 matmul differs from sgemm by " + std::to_string(eb));
      const double ew = bench::max_rel_error(c_wg, ref);
      if (ew > 5e-2) bench::die("kiln's wgmma matmul differs from sgemm by " + std::to_string(ew));
    }
    std::printf(
        "%6lld  %10.3f %10.1f  %10.3f %10.1f  %9.3f %9.1f  %9.3f %9.1f  %8.2f %8.2f %8.2f\n",
        static_cast<long long>(n), blas_ms, blas_gf, tf.ms, tf.gflops, bf.ms, bf.gflops, wg.ms,
        wg.gflops, blas_gf > 0 ? tf.gflops / blas_gf : 0.0, bf.gflops / peak, wg.gflops / peak);
  }
  // 8-bit inputs: i8 with i32 sums, against the dot-product peak (or the FMA peak without
  // VNNI); f8e4m3 with f32 sums (widened to f32 and multiplied with FMAs), against the FMA peak.
  std::printf("\n%6s  %10s %10s  %8s  %10s %10s  %8s\n", "n", "kiln i8", "", "i8/", "kiln e4m3", "",
              "e4m3/");
  std::printf("%6s  %10s %10s  %8s  %10s %10s  %8s\n", "", "ms", "GOP/s",
              peak_i8 > 0 ? "dotpeak" : "fmapeak", "ms", "GFLOP/s", "fmapeak");
  for (int64_t n :
       quick ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{256, 512, 1024, 2048}) {
    const size_t nn = static_cast<size_t>(n * n);
    std::vector<int8_t> a(nn), b(nn);
    std::vector<int32_t> c(nn);
    std::uniform_int_distribution<int> di(-128, 127);
    for (int8_t& x : a) x = static_cast<int8_t>(di(rng));
    for (int8_t& x : b) x = static_cast<int8_t>(di(rng));
    const Timing t =
        run_kiln(rt, ir::ElemType::I8, a.data(), b.data(), c.data(), n, n <= 512 ? 10 : 1);
    for (int s = 0; s < 64; ++s) {  // exact sums at sampled places
      const size_t i = static_cast<size_t>(rng() % static_cast<uint32_t>(n)),
                   j = static_cast<size_t>(rng() % static_cast<uint32_t>(n)), un = size_t(n);
      int64_t want = 0;
      for (size_t k = 0; k < un; ++k) want += int64_t{a[i * un + k]} * b[k * un + j];
      if (c[i * un + j] != want)
        bench::die("kiln's i8 matmul: C(" + std::to_string(i) + ", " + std::to_string(j) +
                   ") = " + std::to_string(c[i * un + j]) + ", want " + std::to_string(want));
    }
    // The same sizes in f8e4m3 (values of the form x/16, |x| < 16: exact in e4m3 and in
    // every f32 partial sum, so the check can be exact too).
    std::vector<uint8_t> a8(nn), b8(nn);
    std::vector<float> c8(nn);
    std::uniform_int_distribution<int> d8(-15, 15);
    for (size_t i = 0; i < nn; ++i) {
      a8[i] = e4m3_bits(d8(rng) / 16.0);
      b8[i] = e4m3_bits(d8(rng) / 16.0);
    }
    const Timing t8 =
        run_kiln(rt, ir::ElemType::F8E4M3, a8.data(), b8.data(), c8.data(), n, n <= 512 ? 10 : 1);
    for (int s = 0; s < 64; ++s) {
      const size_t i = static_cast<size_t>(rng() % static_cast<uint32_t>(n)),
                   j = static_cast<size_t>(rng() % static_cast<uint32_t>(n)), un = size_t(n);
      double want = 0;
      for (size_t k = 0; k < un; ++k)
        want += e4m3_value(a8[i * un + k]) * e4m3_value(b8[k * un + j]);
      if (c8[i * un + j] != want)
        bench::die("kiln's f8e4m3 matmul: C(" + std::to_string(i) + ", " + std::to_string(j) +
                   ") = " + std::to_string(c8[i * un + j]) + ", want " + std::to_string(want));
    }
    std::printf("%6lld  %10.3f %10.1f  %8.2f  %10.3f %10.1f  %8.2f\n", static_cast<long long>(n),
                t.ms, t.gflops, t.gflops / (peak_i8 > 0 ? peak_i8 : peak), t8.ms, t8.gflops,
                t8.gflops / peak);
  }
  std::printf(
      "\ntf32/sgemm: kiln's f32 (as tf32) throughput over OpenBLAS sgemm's; bf16/peak: "
      "kiln's bf16 throughput as a fraction of the peak FMA rate; wgmma: matmul_wgmma (bf16,\n"
      "B transposed), whose multiplies run in kiln_rt_wgmma, once per plane and k step; i8: i8\n"
      "inputs, i32 sums (vpdpbusd where the CPU has AVX-512 VNNI), checked exactly at 64 "
      "places;\ne4m3: f8e4m3 inputs, f32 sums, checked exactly at 64 places.\n");
  return 0;
}
