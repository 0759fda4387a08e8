// GPU benchmarks on cuda:0, each against a peer measured in the same run:
//   axpy     2^26 f32 through kiln (f32x4 lines) against a device-to-device copy of the same
//            data (cuMemcpyDtoD), both as bandwidth: bytes read and written per second
//   launch   a cached tiny kernel (1 cube, 1 unit, 3 arguments) launched through kiln against
//            a raw cuLaunchKernel of the same compiled function, per launch (enqueue), then sync
//   matmul   kernels/examples/matmul_mma (mma.sync on tensor cores) on bf16 n x n x n, tiles
//            straight from global memory and staged in shared memory (ldmatrix), in TFLOP/s;
//            its peer, torch.matmul, is measured by tools/gpu-check.sh in the same run;
//            then kernels/examples/matmul_wgmma (wgmma, sm_90a devices only) on the same data,
//            and kernels/examples/matmul_tma (the same multiplies fed by a ring of TMA stages)
// Without a GPU it says why and exits 77. Usage: gpu_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/backend.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/dsl/dsl.h"
#include "compiler/passes/pipeline.h"
#include "ir/float16.h"
#include "kernels/kernels.h"
#include "runtime/cpu/exec.h"
#include "runtime/cuda/device.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

using kiln::bench::die;
using kiln::bench::must;

void gpu_tiny(dsl::Tensor<dsl::f32> y, dsl::f32 a, dsl::u32 k) {
  dsl::if_(dsl::absolute_pos() == 0u, [&] { y[k] = y[k] + a; });
}
KILN_KERNEL(gpu_tiny, "y, a, k").cube_dim(1);

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench_axpy(Runtime& rt, bool quick) {
  const int64_t n = quick ? (1 << 22) : (1 << 26);
  auto x = must(rt.empty(ir::ElemType::F32, {n}));
  auto y = must(rt.empty(ir::ElemType::F32, {n}));
  auto z = must(rt.empty(ir::ElemType::F32, {n}));
  std::vector<float> host(static_cast<size_t>(n), 1.0f);
  must(x.upload(std::span<const float>(host)));
  must(y.upload(std::span<const float>(host)));
  auto axpy = must(rt.kernel("axpy"));
  const int w = rt.line_width({&x, &y});
  const auto cubes = static_cast<uint32_t>((n / w + 255) / 256);
  must(rt.launch(axpy, cubes, 256, x, y, 1e-7f));  // compiles
  must(rt.sync());
  std::vector<double> t_kiln, t_copy;
  for (int r = 0; r < (quick ? 5 : 21); ++r) {
    auto t = Clock::now();
    must(rt.launch(axpy, cubes, 256, x, y, 1e-7f));
    must(rt.sync());
    t_kiln.push_back(seconds_since(t));
    t = Clock::now();
    must(x.device()->copy(z.data(), x.data(), static_cast<size_t>(n) * 4));
    t_copy.push_back(seconds_since(t));
  }
  const double kiln_gbs =
      12.0 * static_cast<double>(n) / median(t_kiln) / 1e9;  // read x, y; write y
  const double copy_gbs = 8.0 * static_cast<double>(n) / median(t_copy) / 1e9;  // read and write
  std::printf(
      "axpy    n=%lld f32, lines of %d: kiln %.3f ms = %.0f GB/s; device-to-device copy %.3f ms = "
      "%.0f GB/s; "
      "ratio %.2f\n",
      static_cast<long long>(n), w, median(t_kiln) * 1e3, kiln_gbs, median(t_copy) * 1e3, copy_gbs,
      kiln_gbs / copy_gbs);
}

void bench_launch(Runtime& rt, bool quick) {
  auto k = must(rt.kernel("gpu_tiny"));
  auto y = must(rt.empty(ir::ElemType::F32, {16}));
  const std::vector<float> zeros(16, 0.0f);
  must(y.upload(std::span<const float>(zeros)));
  must(rt.launch(k, 1, 1, y, 1.0f, 3u));
  must(rt.sync());
  // The peer: the same kernel, compiled and loaded on its own, launched with cuLaunchKernel.
  auto dev = must(detail::CudaDevice::open(0, 0));
  const dsl::KernelDef* def = dsl::Registry::global().find("gpu_tiny");
  auto sel = must(dsl::select(*def, {}));
  auto traced = must(dsl::trace(*def, *sel.inst, sel.request));
  auto src = must(cuda::generate(must(backend::find("cuda")->prepare(traced)), {}));
  const auto& target = dev->compile_target();
  auto compiled = must(cuda::compile_cuda(src.text, "gpu_tiny.cu",
                                          dev->cubin() ? target.name() : target.compute(), false));
  auto loaded = must(detail::load_cuda_kernel(
      *dev,
      dev->cubin() ? compiled.cubin : std::vector<char>(compiled.ptx.begin(), compiled.ptx.end()),
      src.info, compiled.resources));
  auto stream = must(detail::CudaStream::create(*dev));
  std::vector<uint64_t> slots(src.info.layout.slot_count + cuda::kReportSlots);
  uint32_t one_bits;
  const float one = 1.0f;
  std::memcpy(&one_bits, &one, 4);
  const std::vector<HostArg> args{TensorView(y.data(), {16}), ScalarBits{one_bits}, ScalarBits{3}};
  must(pack_args_into(src.info, {1, 1, 1}, args, slots));
  const auto& api = *dev->context()->api;
  void* params[] = {slots.data()};
  const int reps = quick ? 2000 : 20000;
  std::vector<double> t_raw, t_kiln;
  int failures = 0;  // counted, so the loops time only the launches
  for (int r = 0; r < (quick ? 3 : 11); ++r) {
    auto t = Clock::now();
    for (int i = 0; i < reps; ++i)
      failures += api.cuLaunchKernel(loaded->function, 1, 1, 1, 1, 1, 1, 0, stream->handle(),
                                     params, nullptr) != 0;
    failures += api.cuStreamSynchronize(stream->handle()) != 0;
    t_raw.push_back(seconds_since(t) / reps);
    t = Clock::now();
    for (int i = 0; i < reps; ++i) failures += !rt.launch(k, 1, 1, y, 1.0f, 3u).ok();
    must(rt.sync());
    t_kiln.push_back(seconds_since(t) / reps);
  }
  if (failures) die(std::to_string(failures) + " launches failed");
  std::printf(
      "launch  1 cube, 1 unit, 3 arguments, %d launches then sync: kiln %.2f us per launch; raw "
      "cuLaunchKernel %.2f us; ratio %.2f\n",
      reps, median(t_kiln) * 1e6, median(t_raw) * 1e6, median(t_kiln) / median(t_raw));
}

// The worst error of 16 elements of c = a * b (bf16 n x n, f32 result) against a double-precision
// dot product, relative to the sum of the products' magnitudes.
double spot_check(const std::vector<uint16_t>& ha, const std::vector<uint16_t>& hb,
                  const std::vector<float>& hc, int64_t n) {
  double worst = 0;
  for (int s = 0; s < 16; ++s) {
    const int64_t i = (s * 7919) % n, j = (s * 104729) % n;
    double want = 0, mag = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double p = bf16_value(ha[static_cast<size_t>(i * n + k)]) *
                       bf16_value(hb[static_cast<size_t>(k * n + j)]);
      want += p;
      mag += std::abs(p);
    }
    worst = std::max(worst, std::abs(hc[static_cast<size_t>(i * n + j)] - want) / mag);
  }
  return worst;
}

// kernels/examples/matmul_wgmma (wgmma.mma_async from shared memory, sm_90a only) on the same
// bf16 matrices as matmul_mma: B is uploaded transposed (both operands K-major); 64-row
// warpgroup tiles, two warpgroups per cube, a 128-byte swizzle, one wait per round of k (tiles
// staged by the units, no pipelining: wgmma's floor, not its ceiling). Then matmul_tma, the same
// arguments and multiplies with its tiles copied by TMA into a ring of three stages (the copies
// run two rounds ahead of the multiplies), issued by the units' cube operations, then by a
// producer plane of its own (producer=1: warp specialization), then with the B tiles multicast
// to clusters of two cubes (cluster=2). Not on other architectures.
void bench_wgmma(Runtime& rt, int64_t n, const std::vector<uint16_t>& ha,
                 const std::vector<uint16_t>& hb, Tensor& a, Tensor& c, bool quick) {
  if (rt.device().arch != "sm_90a") {
    std::printf("matmul_wgmma, matmul_tma: skipped (wgmma needs sm_90a; this device is %s)\n",
                rt.device().arch.c_str());
    return;
  }
  const size_t nn = static_cast<size_t>(n * n);
  std::vector<uint16_t> hbt(nn);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < n; ++j)
      hbt[static_cast<size_t>(j * n + k)] = hb[static_cast<size_t>(k * n + j)];
  auto bt = must(rt.empty(ir::ElemType::BF16, {n, n}));
  must(bt.upload(std::span<const uint16_t>(hbt)));
  struct Variant {
    const char* name;
    int producer;  // matmul_tma's producer plane; -1: matmul_wgmma
    int cluster;   // matmul_tma's cluster
  };
  for (const Variant& v : {Variant{"matmul_wgmma", -1, 1}, Variant{"matmul_tma", 0, 1},
                           Variant{"matmul_tma", 1, 1}, Variant{"matmul_tma", 0, 2}}) {
    auto kern = must(rt.kernel(v.name));
    const std::string name = v.producer < 0  ? v.name
                             : v.producer    ? std::string(v.name) + " (producer plane)"
                             : v.cluster > 1 ? std::string(v.name) + " (clusters of 2, multicast)"
                                             : std::string(v.name);
    for (int tile_n : {128, 256}) {
      const auto cubes_n = static_cast<uint32_t>((n + tile_n - 1) / tile_n),
                 cubes_m = static_cast<uint32_t>((n + 127) / 128 + v.cluster - 1) /
                           static_cast<uint32_t>(v.cluster) * static_cast<uint32_t>(v.cluster);
      auto once = [&]() -> Status {
        if (v.producer < 0)
          return rt.launch(kern, Dim3(cubes_n, cubes_m), Dim3(256), a, bt, c, tile_n, 2, 128, 1);
        // tile_n, 2 warpgroups, 128-byte swizzle, k_rows 1, 3 stages, L2 prefetch, producer,
        // cluster.
        return rt.launch(kern, Dim3(cubes_n, cubes_m), Dim3(256), a, bt, c, tile_n, 2, 128, 1, 3, 1,
                         v.producer, v.cluster);
      };
      // The first launch compiles; a failure here (the first wgmma kernels ever run on a GPU) is
      // reported, and the benchmark goes on.
      auto first = once();
      if (first) first = rt.sync();
      if (!first) {
        std::printf("%s tile_n %d: FAILED: %s\n", name.c_str(), tile_n,
                    first.error().message.c_str());
        continue;
      }
      std::vector<double> t;
      for (int i = 0; i < (quick ? 3 : 5); ++i) {
        const auto t0 = Clock::now();
        must(once());
        must(rt.sync());
        t.push_back(seconds_since(t0));
      }
      std::vector<float> hc(nn);
      must(c.download(std::span<float>(hc)));
      const double worst = spot_check(ha, hb, hc, n);
      const double s = median(t);
      std::printf(
          "%s bf16 %lldx%lldx%lld, 128 x %d tiles: %.3f ms, %.1f TFLOP/s (spot check: "
          "worst error %.2g of the sum of |products|)%s\n",
          name.c_str(), static_cast<long long>(n), static_cast<long long>(n),
          static_cast<long long>(n), tile_n, s * 1e3,
          2.0 * static_cast<double>(n) * n * n / s / 1e12, worst, worst > 1e-3 ? "  WRONG" : "");
    }
  }
}

void bench_matmul(Runtime& rt, bool quick) {
  const int64_t n = quick ? 2048 : 8192;
  const size_t nn = static_cast<size_t>(n * n);
  std::vector<uint16_t> ha(nn), hb(nn);
  uint32_t seed = 12345;
  auto rnd = [&] {  // uniform in [-1, 1), as bf16
    seed = seed * 1664525u + 1013904223u;
    return bf16_bits(static_cast<double>(seed >> 8) / 8388608.0 - 1.0);
  };
  for (auto& x : ha) x = rnd();
  for (auto& x : hb) x = rnd();
  auto a = must(rt.empty(ir::ElemType::BF16, {n, n}));
  auto b = must(rt.empty(ir::ElemType::BF16, {n, n}));
  auto c = must(rt.empty(ir::ElemType::F32, {n, n}));
  must(a.upload(std::span<const uint16_t>(ha)));
  must(b.upload(std::span<const uint16_t>(hb)));
  auto kern = must(rt.kernel("matmul_mma"));
  const auto tiles = static_cast<uint32_t>((n + 63) / 64);  // 2 x 2 planes of 32 x 32
  // From global memory; staged in shared memory with loads and stores; staged through a ring
  // of three cp.async stages.
  for (int stages : {0, 1, 3}) {
    const bool staged = stages > 0;
    auto once = [&] {
      must(rt.launch(kern, Dim3(tiles, tiles), Dim3(128), a, b, c, 32, 32, 2, 2, 2, false, false,
                     staged, std::max(stages, 1)));
    };
    once();  // compiles
    must(rt.sync());
    std::vector<double> t;
    for (int i = 0; i < (quick ? 3 : 5); ++i) {
      const auto t0 = Clock::now();
      once();
      must(rt.sync());
      t.push_back(seconds_since(t0));
    }
    std::vector<float> hc(nn);
    must(c.download(std::span<float>(hc)));
    const double worst = spot_check(ha, hb, hc, n);
    const double s = median(t);
    std::printf(
        "matmul  bf16 %lldx%lldx%lld%s: %.3f ms, %.1f TFLOP/s (spot check: worst error "
        "%.2g of the sum of |products|)\n",
        static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n),
        stages == 3   ? ", tiles through a ring of 3 cp.async stages"
        : stages == 1 ? ", tiles staged in shared memory"
                      : ", tiles from global memory",
        s * 1e3, 2.0 * static_cast<double>(n) * n * n / s / 1e12, worst);
    if (worst > 1e-3) die("matmul_mma's result is wrong on the GPU");
  }
  bench_wgmma(rt, n, ha, hb, a, c, quick);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cuda:0");
  if (!rt) {
    std::printf("gpu_bench skipped: %s\n", rt.error().message.c_str());
    return 77;
  }
  std::printf("gpu_bench on %s: %s (%s, %d SMs)\n", rt->device().name.c_str(),
              rt->device().description.c_str(), rt->device().arch.c_str(), rt->device().cores);
  bench_axpy(*rt, quick);
  bench_launch(*rt, quick);
  bench_matmul(*rt, quick);
  return 0;
}
