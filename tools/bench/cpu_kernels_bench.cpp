// GPU-style kernels on the CPU, written as a user writes them from docs/dsl.md (one unit per
// output element, shared-memory tiles, barriers, atomics), each against the best plain C++ loop
// for the same job (g++ -O3 -march=native -fopenmp, all threads;
// tools/bench/cpu_kernels_peers.cpp), measured in the same run. Ratios are peer time over kiln
// time: above 1, kiln is faster. The baseline for the unit-loop vectorizer (issue 12); PyTorch CPU
// is the peer of tools/bench/torch_cpu_peers.py. Every result is checked against the peer's before
// timing.
//   cpu_kernels_bench [--quick]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/kernels.h"
#include "kernels/lib/random.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/cpu_kernels_peers.h"

// The kernels, as a user writes them.
namespace user_kernels {

using namespace kiln::dsl;

// max_pool2d over NCHW (viewed as (N*C, H, W)), one unit per output element.
void ub_max_pool(Tensor<const f32> in, Tensor<f32> out, int k, int stride, int pad) {
  u32 i = absolute_pos();
  u32 ow = out.shape(2), oh = out.shape(1);
  u32 h = in.shape(1), w = in.shape(2);
  if_(i < out.shape(0) * oh * ow, [&] {
    u32 x = i % ow, y = (i / ow) % oh, p = i / (ow * oh);
    Var<f32> m = -INFINITY;
    for (int dy = 0; dy < k; ++dy)
      for (int dx = 0; dx < k; ++dx) {
        u32 yy = y * static_cast<uint32_t>(stride) + static_cast<uint32_t>(dy);
        u32 xx = x * static_cast<uint32_t>(stride) + static_cast<uint32_t>(dx);
        u32 pu = static_cast<uint32_t>(pad);
        if_(yy >= pu && yy < h + pu && xx >= pu && xx < w + pu,
            [&] { m = max(m, in(p, yy - pu, xx - pu)); });
      }
    out(p, y, x) = m;
  });
}
KILN_KERNEL(ub_max_pool,
            "in: rank=3, out: rank=3, k = 3 in 1..16, stride = 2 in 1..16, "
            "pad = 1 in 0..8")
    .cube_dim(256);

// C = A * B with 16 x 16 tiles in shared memory (the CUDA textbook kernel).
void ub_gemm(Tensor<const f32> a, Tensor<const f32> b, Tensor<f32> c, int tile) {
  auto as = shared_array<f32>(static_cast<uint32_t>(tile * tile));
  auto bs = shared_array<f32>(static_cast<uint32_t>(tile * tile));
  u32 tx = unit_pos_x(), ty = unit_pos_y();
  u32 row = cube_pos_y() * tile + ty, col = cube_pos_x() * tile + tx;
  u32 k = a.shape(1);
  Var<f32> acc = 0.0f;
  for_range(0u, k, static_cast<uint32_t>(tile), [&](u32 k0) {
    as[ty * tile + tx] = a(row, k0 + tx);
    bs[ty * tile + tx] = b(k0 + ty, col);
    sync_cube();
    for (int kk = 0; kk < tile; ++kk) acc = fma(as[ty * tile + kk], bs[kk * tile + tx], acc);
    sync_cube();
  });
  c(row, col) = acc;
}
KILN_KERNEL(ub_gemm, "a: rank=2, b: rank=2, c: rank=2, tile = 16 in 1..32").cube_dim(16, 16);

// out = in^T through a 32 x 32 shared tile (coalesced reads and writes on a GPU).
void ub_transpose(Tensor<const f32> in, Tensor<f32> out) {
  auto t = shared_array<f32>(32 * 33);
  u32 tx = unit_pos_x(), ty = unit_pos_y();
  u32 x = cube_pos_x() * 32u + tx, y = cube_pos_y() * 32u + ty;
  t[ty * 33u + tx] = in(y, x);
  sync_cube();
  u32 ox = cube_pos_y() * 32u + tx, oy = cube_pos_x() * 32u + ty;
  out(oy, ox) = t[tx * 33u + ty];
}
KILN_KERNEL(ub_transpose, "in: rank=2, out: rank=2").cube_dim(32, 32);

// Softmax of each row, one cube of 32 units per row, reductions with plane ops.
void ub_softmax(Tensor<const f32> in, Tensor<f32> out) {
  u32 r = cube_pos(), u = unit_pos();
  u32 n = in.shape(1);
  Var<f32> m = -INFINITY;
  for_range(u, n, 32u, [&](u32 j) { m = max(m, in(r, j)); });
  f32 rowmax = plane_max(m);
  Var<f32> s = 0.0f;
  for_range(u, n, 32u, [&](u32 j) { s += exp(in(r, j) - rowmax); });
  f32 total = plane_sum(s);
  for_range(u, n, 32u, [&](u32 j) { out(r, j) = exp(in(r, j) - rowmax) / total; });
}
KILN_KERNEL(ub_softmax, "in: rank=2, out: rank=2").cube_dim(32);

}  // namespace user_kernels

namespace {

using kiln::bench::die;
using kiln::bench::must;

using namespace kiln;

std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 r(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(r);
  return v;
}

Tensor wrap(Runtime& rt, std::vector<float>& v, std::vector<int64_t> shape) {
  return must(rt.wrap(v.data(), ir::ElemType::F32, shape));
}

void check(const char* what, const std::vector<float>& got, const std::vector<float>& want,
           float tol) {
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i]))))
      die(fmt::format("{}: element {} is {}, the C++ peer gives {}", what, i, got[i], want[i]));
}

void report(const char* name, const std::string& shape, double t_kiln, double t_peer) {
  std::printf("%-12s %-24s kiln %8.2f ms  plain C++ %8.2f ms  ratio %.2fx\n", name, shape.c_str(),
              t_kiln * 1e3, t_peer * 1e3, t_peer / t_kiln);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  (void)kernels::builtin_names();
  Runtime rt = must(Runtime::open("cpu"));
  std::printf("cpu_kernels_bench: %s, %d threads%s\n", rt.device().description.c_str(),
              rt.device().cores, quick ? " (quick sizes)" : "");
  const int reps = quick ? 1 : 3, samples = quick ? 3 : 7;

  {  // max_pool2d k3 s2 p1 and k5 s1 p2 on (2, 32, 512, 512) NCHW
    const int64_t nc = quick ? 8 : 64, h = quick ? 64 : 512, w = h;
    for (auto [k, s, p] : {std::tuple{3, 2, 1}, std::tuple{5, 1, 2}}) {
      const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
      auto in = random_floats(static_cast<size_t>(nc * h * w), -1, 1, 1);
      std::vector<float> out(static_cast<size_t>(nc * oh * ow)), ref(out.size());
      Tensor ti = wrap(rt, in, {nc, h, w}), to = wrap(rt, out, {nc, oh, ow});
      auto kern = must(rt.kernel("ub_max_pool"));
      auto launch = [&] {
        LaunchOptions o;
        must(rt.launch_with(o, kern, kernels::ceil_div(nc * oh * ow, 256), 256, ti, to, k, s, p));
        must(rt.sync());
      };
      auto peer = [&] { bench::peer_max_pool(in.data(), ref.data(), nc, h, w, k, s, p, oh, ow); };
      launch();
      peer();
      check("max_pool2d", out, ref, 0);
      const double tk = bench::median_seconds(launch, reps, samples);
      const double tp = bench::median_seconds(peer, reps, samples);
      report("max_pool2d", fmt::format("(2,{},{},{}) k{} s{} p{}", nc / 2, h, w, k, s, p), tk, tp);
    }
  }
  {  // gemm 512^3, 16 x 16 shared-memory tiles
    const int64_t n = quick ? 128 : 512;
    auto a = random_floats(static_cast<size_t>(n * n), -1, 1, 2);
    auto b = random_floats(static_cast<size_t>(n * n), -1, 1, 3);
    std::vector<float> c(a.size()), ref(a.size());
    Tensor ta = wrap(rt, a, {n, n}), tb = wrap(rt, b, {n, n}), tc = wrap(rt, c, {n, n});
    auto kern = must(rt.kernel("ub_gemm"));
    const uint32_t tiles = static_cast<uint32_t>(n / 16);
    auto launch = [&] {
      must(rt.launch(kern, Dim3(tiles, tiles), Dim3(16, 16), ta, tb, tc, 16));
      must(rt.sync());
    };
    auto peer = [&] { bench::peer_gemm(a.data(), b.data(), ref.data(), n); };
    launch();
    peer();
    check("gemm", c, ref, 1e-3f);
    report("gemm", fmt::format("{}^3, 16x16 tiles", n),
           bench::median_seconds(launch, reps, samples),
           bench::median_seconds(peer, reps, samples));
  }
  {  // transpose through a shared tile
    const int64_t n = quick ? 256 : 4096;
    auto in = random_floats(static_cast<size_t>(n * n), -1, 1, 4);
    std::vector<float> out(in.size()), ref(in.size());
    Tensor ti = wrap(rt, in, {n, n}), to = wrap(rt, out, {n, n});
    auto kern = must(rt.kernel("ub_transpose"));
    const uint32_t tiles = static_cast<uint32_t>(n / 32);
    auto launch = [&] {
      must(rt.launch(kern, Dim3(tiles, tiles), Dim3(32, 32), ti, to));
      must(rt.sync());
    };
    auto peer = [&] { bench::peer_transpose(in.data(), ref.data(), n); };
    launch();
    peer();
    check("transpose", out, ref, 0);
    report("transpose", fmt::format("{}x{}, 32x32 tiles", n, n),
           bench::median_seconds(launch, reps, samples),
           bench::median_seconds(peer, reps, samples));
  }
  {  // row softmax with plane reductions
    const int64_t rows = quick ? 256 : 4096, cols = 1024;
    auto in = random_floats(static_cast<size_t>(rows * cols), -4, 4, 5);
    std::vector<float> out(in.size()), ref(in.size());
    Tensor ti = wrap(rt, in, {rows, cols}), to = wrap(rt, out, {rows, cols});
    auto kern = must(rt.kernel("ub_softmax"));
    auto launch = [&] {
      must(rt.launch(kern, Dim3(static_cast<uint32_t>(rows)), Dim3(32), ti, to));
      must(rt.sync());
    };
    auto peer = [&] { bench::peer_softmax(in.data(), ref.data(), rows, cols); };
    launch();
    peer();
    check("softmax", out, ref, 1e-5f);
    report("softmax", fmt::format("{}x{} rows", rows, cols),
           bench::median_seconds(launch, reps, samples),
           bench::median_seconds(peer, reps, samples));
  }
  {  // the examples: 5-point stencil and histogram with atomics
    const int64_t n = quick ? 512 : 4096;
    auto in = random_floats(static_cast<size_t>(n * n), -1, 1, 6);
    std::vector<float> out(in.size()), ref(in.size());
    Tensor ti = wrap(rt, in, {n, n}), to = wrap(rt, out, {n, n});
    auto kern = must(rt.kernel("stencil2d"));
    const uint32_t tiles = static_cast<uint32_t>(n / 16);
    auto launch = [&] {
      must(rt.launch(kern, Dim3(tiles, tiles), Dim3(16, 16), ti, to));
      must(rt.sync());
    };
    auto peer = [&] { bench::peer_stencil(in.data(), ref.data(), n, n); };
    launch();
    peer();
    check("stencil2d", out, ref, 1e-6f);
    report("stencil2d", fmt::format("{}x{}", n, n), bench::median_seconds(launch, reps, samples),
           bench::median_seconds(peer, reps, samples));
  }
  {
    const int64_t n = quick ? (1 << 18) : (1 << 24);
    const int bins = 256;
    auto data = random_floats(static_cast<size_t>(n), 0, 1, 7);
    std::vector<uint32_t> hist(bins), ref(bins);
    Tensor td = wrap(rt, data, {n});
    Tensor th = must(rt.wrap(hist.data(), ir::ElemType::U32, std::vector<int64_t>{bins}));
    auto kern = must(rt.kernel("histogram"));
    auto launch = [&] {
      std::fill(hist.begin(), hist.end(), 0u);
      must(rt.launch(kern, Dim3(256), Dim3(256), td, th, bins));  // a chunk per cube
      must(rt.sync());
    };
    auto peer = [&] { bench::peer_histogram(data.data(), n, ref.data(), bins); };
    launch();
    peer();
    if (hist != ref) die("histogram: the counts differ from the C++ peer's");
    report("histogram", fmt::format("2^{}, {} bins", int(std::log2(double(n))), bins),
           bench::median_seconds(launch, reps, samples),
           bench::median_seconds(peer, reps, samples));
  }
  {  // kiln::lib's random numbers against the same generator in a plain OpenMP loop
    const int64_t n = quick ? (1 << 18) : (1 << 24);
    std::vector<float> out(static_cast<size_t>(n)), ref(out.size());
    Tensor to = wrap(rt, out, {n});
    const lib::RandomOptions o{20261203, 0};
    for (bool normal : {false, true}) {
      auto launch = [&] {
        must(normal ? lib::normal(rt, to, o, 0.0, 1.0) : lib::uniform(rt, to, o, -1.0, 1.0));
        must(rt.sync());
      };
      auto peer = [&] {
        if (normal)
          bench::peer_normal(ref.data(), n, o.seed, o.offset, 0.0f, 1.0f);
        else
          bench::peer_uniform(ref.data(), n, o.seed, o.offset, -1.0f, 2.0f);
      };
      launch();
      peer();
      // The same bits for uniform; the C library's log and sin/cos for normal.
      check(normal ? "normal" : "uniform", out, ref, normal ? 1e-5f : 0.0f);
      report(normal ? "normal" : "uniform",
             fmt::format("2^{} f32 (Philox)", int(std::log2(double(n)))),
             bench::median_seconds(launch, reps, samples),
             bench::median_seconds(peer, reps, samples));
    }
  }
  {  // kiln demo's stencil2d and histogram (its sizes) against the memory bandwidth
    const int64_t tn = quick ? (1 << 20) : (1 << 25);
    std::vector<float> a(static_cast<size_t>(tn)), b = random_floats(a.size(), 0, 1, 8),
                                                   c = random_floats(a.size(), 0, 1, 9);
    const double t_triad = bench::median_seconds(
        [&] { bench::peer_triad(a.data(), b.data(), c.data(), 3.0f, tn); }, reps, samples);
    const double triad = 3.0 * 4.0 * static_cast<double>(tn) / t_triad / 1e9;
    std::printf("memory       triad 3 x 2^%d f32 (STREAM, OpenMP)  %.1f GB/s\n",
                int(std::log2(double(tn))), triad);
    const int64_t n = quick ? 512 : 2048;
    auto in = random_floats(static_cast<size_t>(n * n), -1, 1, 10);
    std::vector<float> out(in.size());
    Tensor ti = wrap(rt, in, {n, n}), to = wrap(rt, out, {n, n});
    auto stencil = must(rt.kernel("stencil2d"));
    const double t_st = bench::median_seconds(
        [&] {
          must(rt.launch(stencil, Dim3(n / 16, n / 16), Dim3(16, 16), ti, to));
          must(rt.sync());
        },
        reps, samples);
    const double gb_st = 2.0 * 4.0 * static_cast<double>(n * n) / t_st / 1e9;
    std::printf("stencil2d    %ldx%ld (kiln demo)        kiln %8.2f ms  %.1f GB/s  %.2fx triad\n",
                static_cast<long>(n), static_cast<long>(n), t_st * 1e3, gb_st, gb_st / triad);
    const int64_t hn = quick ? (1 << 18) : (1 << 22);
    auto data = random_floats(static_cast<size_t>(hn), 0, 1, 11);
    std::vector<uint32_t> hist(64);
    Tensor td = wrap(rt, data, {hn});
    Tensor th = must(rt.wrap(hist.data(), ir::ElemType::U32, std::vector<int64_t>{64}));
    auto histogram = must(rt.kernel("histogram"));
    const double t_h = bench::median_seconds(
        [&] {
          std::fill(hist.begin(), hist.end(), 0u);
          must(rt.launch(histogram, Dim3(256), Dim3(256), td, th, 64));
          must(rt.sync());
        },
        reps, samples);
    const double gb_h = 4.0 * static_cast<double>(hn) / t_h / 1e9;
    std::vector<uint32_t> ref(64);
    const double t_hp = bench::median_seconds(
        [&] { bench::peer_histogram(data.data(), hn, ref.data(), 64); }, reps, samples);
    if (hist != ref) die("histogram (demo size): the counts differ from the C++ peer's");
    const double gb_hp = 4.0 * static_cast<double>(hn) / t_hp / 1e9;
    std::printf(
        "histogram    2^%d, 64 bins (kiln demo)   kiln %8.2f ms  %.1f GB/s  %.2fx triad"
        "  (plain C++ %.1f GB/s, %.2fx triad)\n",
        int(std::log2(double(hn))), t_h * 1e3, gb_h, gb_h / triad, gb_hp, gb_hp / triad);
  }
  return 0;
}
