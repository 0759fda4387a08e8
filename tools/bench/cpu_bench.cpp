// CPU backend benchmarks, each against a peer measured in the same run:
//   axpy     2^26 f32 on all cores vs an OpenMP loop (g++ -O3 -march=native -fopenmp)
//   sum      2^26 f32 vs the best hand-written loop (OpenMP, SIMD, reassociated) and a naive loop
//   row_sum  4096 x 4096, 256 units per cube, vs the same algorithm in C++ and a plain loop
//   compile  JIT compile time per example kernel, split into kiln's passes, LLVM optimization
//            and code generation
// Usage: cpu_bench [--quick]   (--quick: smaller sizes, for a smoke run)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/backend.h"
#include "compiler/cpu/backend.h"
#include "compiler/dsl/registry.h"
#include "compiler/passes/pipeline.h"
#include "kernels/kernels.h"
#include "runtime/cpu/exec.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/cpu_peers.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

using kiln::bench::die;
using kiln::bench::must;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Compiled {
  std::unique_ptr<cpu::CompiledKernel> kernel;
  double passes_ms = 0;
  cpu::CompileTimings timings;
};

Compiled compile(const std::string& name, const dsl::SpecOptions& opts) {
  const dsl::KernelDef* def = dsl::Registry::global().find(name);
  if (!def) die("no kernel " + name);
  Compiled c;
  const auto t0 = Clock::now();
  auto sel = dsl::select(*def, opts);
  if (!sel) die(sel.error().message);
  auto k = dsl::trace(*def, *sel->inst, sel->request);
  if (!k) die(k.error().message);
  auto lowered = backend::find("cpu")->prepare(std::move(*k));
  if (!lowered) die(lowered.error().message);
  c.passes_ms = ms_since(t0);
  cpu::CompileOptions o;
  o.target = *cpu::host_target();
  auto ck = cpu::compile(*lowered, o, &c.timings);
  if (!ck) die(ck.error().message);
  c.kernel = std::move(*ck);
  return c;
}

std::vector<float> random_floats(size_t n) {
  std::mt19937 r(42);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(r);
  return v;
}

ScalarBits f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return ScalarBits{b};
}

std::vector<uint64_t> pack(const cpu::CompiledKernel& k, std::array<uint32_t, 3> cubes,
                           const std::vector<HostArg>& args) {
  auto p = pack_cpu_args(k, cubes, args);
  if (!p) die(p.error().message);
  return std::move(*p);
}

void launch(const cpu::CompiledKernel& k, const std::vector<uint64_t>& packed, uint32_t cubes) {
  auto r = run_cpu_packed(k, packed.data(), cubes);
  if (r.fault) die(r.fault->message);
}

void bench_axpy(size_t n) {
  auto x = random_floats(n), y = random_floats(n);
  const float a = 1e-7f;
  const int line = cpu::host_target()->max_lanes(4);
  dsl::SpecOptions o;
  o.line["x"] = line;
  o.line["y"] = line;
  auto c = compile("axpy", o);
  const uint32_t cubes = static_cast<uint32_t>((n / line + 255) / 256);
  const auto packed =
      pack(*c.kernel, {cubes, 1, 1},
           {TensorView(x.data(), {int64_t(n)}), TensorView(y.data(), {int64_t(n)}), f32_bits(a)});
  const double t_kiln = bench::median_seconds([&] { launch(*c.kernel, packed, cubes); }, 3, 11);
  const double t_peer =
      bench::median_seconds([&] { bench::peer_axpy(a, x.data(), y.data(), n); }, 3, 11);
  const double gb = 3.0 * 4 * n / 1e9;
  std::printf(
      "axpy     n=2^%d f32, line %d: kiln %7.2f ms (%5.1f GB/s)  OpenMP loop %7.2f ms (%5.1f GB/s) "
      " ratio %.2fx\n",
      int(std::log2(n)), line, t_kiln * 1e3, gb / t_kiln, t_peer * 1e3, gb / t_peer,
      t_peer / t_kiln);
}

void bench_sum(size_t n) {
  auto x = random_floats(n);
  // The line width is chosen here, from the host, and the grid follows from it: one cube sums
  // `chunk` (4096, the kernel's default) lines of one unit. (The grid once assumed 16 lanes
  // while the kernel was compiled with the default 4: it summed a quarter of x.)
  const int line = cpu::host_target()->max_lanes(4);
  dsl::SpecOptions o;
  o.line["x"] = line;
  auto c = compile("sum", o);
  const uint32_t per_cube = static_cast<uint32_t>(line) * 4096;
  const uint32_t cubes = static_cast<uint32_t>((n + per_cube - 1) / per_cube);
  std::vector<float> partial(cubes);
  const auto packed =
      pack(*c.kernel, {cubes, 1, 1},
           {TensorView(x.data(), {int64_t(n)}), TensorView(partial.data(), {int64_t(cubes)})});
  double kiln_sum = 0;
  auto kiln = [&] {
    launch(*c.kernel, packed, cubes);
    float s = 0;
    for (float p : partial) s += p;
    kiln_sum = s;
  };
  double best = 0, naive = 0;
  const double t_kiln = bench::median_seconds(kiln, 3, 11);
  const double t_best =
      bench::median_seconds([&] { best = bench::peer_sum_best(x.data(), n); }, 3, 11);
  const double t_naive =
      bench::median_seconds([&] { naive = bench::peer_sum_naive(x.data(), n); }, 1, 5);
  if (std::fabs(kiln_sum - best) > 1e-3 * std::sqrt(double(n)))
    die("sum results disagree: kiln " + std::to_string(kiln_sum) + ", best C++ loop " +
        std::to_string(best));
  const double gb = 4.0 * n / 1e9;
  std::printf(
      "sum      n=2^%d f32, line %2d: kiln %7.2f ms (%5.1f GB/s)  best C++ %7.2f ms  ratio %.2fx;  "
      "naive loop %7.2f ms  ratio %.2fx\n",
      int(std::log2(n)), line, t_kiln * 1e3, gb / t_kiln, t_best * 1e3, t_best / t_kiln,
      t_naive * 1e3, t_naive / t_kiln);
  (void)naive;
}

void bench_row_sum(size_t rows, size_t cols) {
  auto in = random_floats(rows * cols);
  std::vector<float> out(rows), ref(rows);
  dsl::SpecOptions o;
  o.set["units"] = "256";
  o.cube_dim = std::array<uint32_t, 3>{256, 1, 1};
  auto c = compile("row_sum", o);
  const uint32_t cubes = static_cast<uint32_t>(rows);
  const auto packed = pack(*c.kernel, {cubes, 1, 1},
                           {TensorView(in.data(), {int64_t(rows), int64_t(cols)}),
                            TensorView(out.data(), {int64_t(rows)})});
  const double t_kiln = bench::median_seconds([&] { launch(*c.kernel, packed, cubes); }, 3, 11);
  const double t_tree = bench::median_seconds(
      [&] { bench::peer_row_sum_tree(in.data(), ref.data(), rows, cols); }, 3, 11);
  const double t_plain = bench::median_seconds(
      [&] { bench::peer_row_sum_plain(in.data(), ref.data(), rows, cols); }, 3, 11);
  for (size_t r = 0; r < rows; ++r)
    if (std::fabs(out[r] - ref[r]) > 1e-2f) die("row_sum results disagree");
  std::printf(
      "row_sum  %zux%zu, 256 units: kiln %7.2f ms  same algorithm in C++ %7.2f ms  ratio %.2fx;  "
      "plain loop %7.2f ms  ratio %.2fx\n",
      rows, cols, t_kiln * 1e3, t_tree * 1e3, t_tree / t_kiln, t_plain * 1e3, t_plain / t_kiln);
}

void bench_compile() {
  std::vector<double> totals;
  std::printf("compile  (ms)            passes  LLVM-opt  codegen  link   total\n");
  double sum_p = 0, sum_o = 0, sum_c = 0;
  for (const std::string& name : kernels::builtin_names()) {
    // Median of three compiles (the first one also warms LLVM up).
    std::vector<Compiled> runs;
    for (int i = 0; i < 3; ++i) runs.push_back(compile(name, {}));
    std::sort(runs.begin(), runs.end(), [](const Compiled& a, const Compiled& b) {
      auto tot = [](const Compiled& c) {
        return c.passes_ms + c.timings.optimize_ms + c.timings.codegen_ms + c.timings.machine_ms +
               c.timings.link_ms;
      };
      return tot(a) < tot(b);
    });
    const Compiled& m = runs[1];
    const double total = m.passes_ms + m.timings.codegen_ms + m.timings.optimize_ms +
                         m.timings.machine_ms + m.timings.link_ms;
    totals.push_back(total);
    sum_p += m.passes_ms;
    sum_o += m.timings.optimize_ms;
    sum_c += m.timings.machine_ms + m.timings.codegen_ms;
    std::printf("  %-20s %7.2f %9.2f %8.2f %5.2f %7.2f\n", name.c_str(), m.passes_ms,
                m.timings.optimize_ms, m.timings.codegen_ms + m.timings.machine_ms,
                m.timings.link_ms, total);
  }
  std::sort(totals.begin(), totals.end());
  const double median = totals[totals.size() / 2];
  const double all = sum_p + sum_o + sum_c;
  std::printf(
      "compile  median %.1f ms, max %.1f ms per kernel (target: median under 30 ms); split: passes "
      "%.0f%%, LLVM optimization %.0f%%, code generation %.0f%%\n",
      median, totals.back(), 100 * sum_p / all, 100 * sum_o / all, 100 * sum_c / all);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  (void)kernels::builtin_names();
  auto target = cpu::host_target();
  if (!target) die(target.error().message);
  std::printf("cpu_bench: %s, %d threads\n", target->describe().c_str(),
              ThreadPool::global().threads());
  bench_axpy(quick ? size_t{1} << 20 : size_t{1} << 26);
  bench_sum(quick ? size_t{1} << 20 : size_t{1} << 26);
  bench_row_sum(quick ? 256 : 4096, quick ? 512 : 4096);
  bench_compile();
  return 0;
}
