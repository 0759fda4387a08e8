// kiln::lib's pooling, softmax, norms and reductions (issue 18) on the CPU, each against a plain
// C++ loop for the same job (g++ -O3 -march=native -fopenmp, all threads;
// tools/bench/cpu_kernels_peers.cpp) and the memory bandwidth: the STREAM triad measured in the
// same run, and the bytes each operation must move (read the input once, write the output once).
// PyTorch CPU is the peer of tools/bench/torch_lib.py; tools/bench/lib_vs_torch.sh runs both and
// prints the ratios. Every result is checked against the plain loop's before timing.
//   lib_bench [--quick] [--only NAME] [--csv]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/kernels.h"
#include "kernels/lib/elementwise.h"
#include "kernels/lib/norm.h"
#include "kernels/lib/pool.h"
#include "kernels/lib/reduce.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/cpu_kernels_peers.h"

namespace {

using kiln::bench::die;
using kiln::bench::must;
using namespace kiln;

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 r(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(r);
  return v;
}

void check(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
           float tol) {
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i]))))
      die(fmt::format("{}: element {} is {}, the C++ peer gives {}", what, i, got[i], want[i]));
}

struct Bench {
  Runtime& rt;
  bool quick, csv;
  std::string only;
  double triad = 0;  // GB/s

  int reps(double bytes) const { return quick ? 1 : std::max(1, static_cast<int>(2e8 / bytes)); }
  int samples() const { return quick ? 3 : 11; }

  // Times kiln (synchronized) and the peer, and prints one row.
  void row(const std::string& op, const std::string& shape, double bytes,
           const std::function<void()>& kiln, const std::function<void()>& peer) {
    const int r = reps(bytes);
    const double tk = bench::median_seconds(
        [&] {
          kiln();
          must(rt.sync());
        },
        r, samples());
    const double tp = bench::median_seconds(peer, r, samples());
    const double limit = bytes / (triad * 1e9);  // the triad's bandwidth for these bytes
    if (csv) {
      std::printf("%s,\"%s\",%.4f,%.4f,%.4f\n", op.c_str(), shape.c_str(), tk * 1e3, tp * 1e3,
                  limit * 1e3);
    } else {
      std::printf(
          "%-12s %-28s kiln %8.2f ms  plain C++ %8.2f ms (%.2fx)  bandwidth limit %6.2f ms "
          "(kiln at %3.0f%%)\n",
          op.c_str(), shape.c_str(), tk * 1e3, tp * 1e3, tp / tk, limit * 1e3, 100 * limit / tk);
    }
    std::fflush(stdout);
  }
  bool wants(const char* name) const { return only.empty() || only == name; }
};

void bench_pool(Bench& b) {
  const int64_t n = 2, c = 32, h = b.quick ? 128 : 512, w = h;
  std::vector<float> in = random_floats(static_cast<size_t>(n * c * h * w), 1);
  const std::vector<int64_t> in_shape{n, c, h, w};
  Tensor tin = must(b.rt.wrap(in.data(), ir::ElemType::F32, in_shape));
  struct Case {
    int k, s, p;
  };
  for (const Case cs : {Case{5, 1, 2}, Case{3, 2, 1}, Case{2, 2, 0}}) {
    lib::Pool2dOptions o;
    o.kernel = {cs.k, cs.k};
    o.stride = {cs.s, cs.s};
    o.padding = {cs.p, cs.p};
    const auto shape = must(lib::pool2d_output_shape(tin.shape(), o));
    const int64_t oh = shape[2], ow = shape[3];
    std::vector<float> out(static_cast<size_t>(n * c * oh * ow)), ref(out.size());
    Tensor tout = must(b.rt.wrap(out.data(), ir::ElemType::F32, shape));
    auto kiln = [&] { must(lib::max_pool2d(b.rt, tin, tout, o)); };
    auto peer = [&] {
      bench::peer_max_pool(in.data(), ref.data(), n * c, h, w, cs.k, cs.s, cs.p, oh, ow);
    };
    kiln();
    must(b.rt.sync());
    peer();
    check("max_pool2d", out, ref, 0);
    b.row("max_pool2d", fmt::format("({},{},{},{}) k{} s{} p{}", n, c, h, w, cs.k, cs.s, cs.p),
          4.0 * static_cast<double>(in.size() + out.size()), kiln, peer);
  }
}

void bench_rows(Bench& b) {
  using Shape = std::vector<int64_t>;
  for (const Shape& shape : {Shape{4096, 4096}, Shape{32, 128, 1024}}) {
    Shape sh = shape;
    if (b.quick) sh[0] /= 16;
    int64_t numel = 1;
    for (int64_t d : sh) numel *= d;
    const int64_t cols = sh.back(), rows = numel / cols;
    std::vector<float> x = random_floats(static_cast<size_t>(numel), 2), y(x.size()), ref(x.size());
    for (float& v : x) v *= 4;
    std::vector<float> w = random_floats(static_cast<size_t>(cols), 3),
                       bias = random_floats(static_cast<size_t>(cols), 4);
    Tensor tx = must(b.rt.wrap(x.data(), ir::ElemType::F32, sh));
    Tensor ty = must(b.rt.wrap(y.data(), ir::ElemType::F32, sh));
    const std::vector<int64_t> wshape{cols};
    Tensor tw = must(b.rt.wrap(w.data(), ir::ElemType::F32, wshape));
    Tensor tb = must(b.rt.wrap(bias.data(), ir::ElemType::F32, wshape));
    std::string name;
    for (size_t i = 0; i < sh.size(); ++i) name += (i ? "," : "(") + std::to_string(sh[i]);
    name += ")";
    const double bytes = 8.0 * static_cast<double>(numel);
    if (b.wants("softmax")) {
      auto kiln = [&] { must(lib::softmax(b.rt, tx, ty)); };
      auto peer = [&] { bench::peer_softmax(x.data(), ref.data(), rows, cols); };
      kiln();
      must(b.rt.sync());
      peer();
      check("softmax", y, ref, 1e-5f);
      b.row("softmax", name, bytes, kiln, peer);
    }
    if (b.wants("layernorm")) {
      const lib::NormOptions o{.weight = &tw, .bias = &tb};
      auto kiln = [&] { must(lib::layer_norm(b.rt, tx, ty, o)); };
      auto peer = [&] {
        bench::peer_layernorm(x.data(), ref.data(), w.data(), bias.data(), rows, cols, 1e-5f);
      };
      kiln();
      must(b.rt.sync());
      peer();
      check("layernorm", y, ref, 1e-4f);
      b.row("layernorm", name, bytes, kiln, peer);
    }
  }
}

void bench_sum(Bench& b) {
  const int64_t a = b.quick ? 8 : 64, n = 1024, c = 1024;
  std::vector<float> x = random_floats(static_cast<size_t>(a * n * c), 5);
  const std::vector<int64_t> shape{a, n, c};
  Tensor tx = must(b.rt.wrap(x.data(), ir::ElemType::F32, shape));
  for (int axis = 0; axis < 3; ++axis) {
    lib::ReduceOptions o{.axes = {axis}};
    const auto os = must(lib::reduce_output_shape(tx.shape(), o));
    std::vector<float> out(static_cast<size_t>(a * n * c / shape[static_cast<size_t>(axis)])),
        ref(out.size());
    Tensor tout = must(b.rt.wrap(out.data(), ir::ElemType::F32, os));
    auto kiln = [&] { must(lib::reduce(b.rt, lib::ReduceOp::Sum, tx, tout, o)); };
    auto peer = [&] { bench::peer_sum_axis(x.data(), ref.data(), a, n, c, axis); };
    kiln();
    must(b.rt.sync());
    peer();
    check("sum", out, ref, 1e-3f);
    b.row("sum", fmt::format("({},{},{}) axis {}", a, n, c, axis),
          4.0 * static_cast<double>(x.size() + out.size()), kiln, peer);
  }
}

void bench_chain(Bench& b) {
  const int lg = b.quick ? 22 : 26;
  const int64_t n = int64_t{1} << lg;
  std::vector<float> x = random_floats(static_cast<size_t>(n), 6), out(x.size()), ref(x.size());
  const std::vector<int64_t> shape{n};
  Tensor tx = must(b.rt.wrap(x.data(), ir::ElemType::F32, shape));
  Tensor tout = must(b.rt.wrap(out.data(), ir::ElemType::F32, shape));
  using lib::Arg;
  using lib::Op;
  const lib::Step chain[] = {
      {Op::Mul, Arg::S0}, {Op::Add, Arg::S1}, {Op::Exp}, {Op::Mul, Arg::X}, {Op::Relu}};
  const lib::MapInputs in{.y = nullptr, .z = nullptr, .scalars = {0.5f, 1.0f}};
  auto kiln = [&] { must(lib::map(b.rt, chain, tx, tout, in)); };
  auto peer = [&] { bench::peer_chain(x.data(), ref.data(), n); };
  kiln();
  must(b.rt.sync());
  peer();
  check("elementwise", out, ref, 1e-5f);
  b.row("elementwise", fmt::format("chain of 5 on 2^{}", lg), 8.0 * static_cast<double>(n), kiln,
        peer);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, csv = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--csv") == 0) {
      csv = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      die(fmt::format("unknown argument '{}'; usage: lib_bench [--quick] [--only NAME] [--csv]",
                      argv[i]));
    }
  }
  (void)kernels::builtin_names();
  Runtime rt = must(Runtime::open("cpu"));
  Bench b{rt, quick, csv, only};
  {  // the triad: the machine's bandwidth in this run
    const int64_t tn = quick ? int64_t{1} << 22 : int64_t{1} << 25;
    std::vector<float> x(static_cast<size_t>(tn), 1), y(x.size(), 2), z(x.size(), 0);
    const double t = bench::median_seconds(
        [&] { bench::peer_triad(z.data(), x.data(), y.data(), 3.0f, tn); }, 3, b.samples());
    b.triad = 12.0 * static_cast<double>(tn) / t / 1e9;
  }
  if (csv) {
    std::printf("# %s, %d threads, triad %.1f GB/s\n", rt.device().description.c_str(),
                rt.device().cores, b.triad);
    std::printf("op,shape,kiln_ms,plain_ms,bandwidth_limit_ms\n");
  } else {
    std::printf("lib_bench: %s, %d threads, triad (3 x 2^25 f32, OpenMP) %.1f GB/s%s\n",
                rt.device().description.c_str(), rt.device().cores, b.triad,
                quick ? " (quick sizes)" : "");
  }
  if (b.wants("max_pool2d")) bench_pool(b);
  bench_rows(b);
  if (b.wants("sum")) bench_sum(b);
  if (b.wants("elementwise")) bench_chain(b);
  return 0;
}
