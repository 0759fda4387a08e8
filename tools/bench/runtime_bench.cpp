// Runtime benchmarks, each against a peer measured in the same run:
//   launch   a cached tiny kernel (1 cube, 1 unit, 3 arguments) launched through the runtime,
//            against a direct call of the same compiled function through a pointer
//   first    the first launch of each example kernel in a fresh process, split into trace,
//            passes, LLVM IR, optimization, machine code and loading; then the same launch in
//            a second process that finds it in the disk cache, and the ratio of the two
// Usage: runtime_bench [--quick]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/backend.h"
#include "compiler/cpu/backend.h"
#include "compiler/dsl/dsl.h"
#include "compiler/passes/pipeline.h"
#include "kernels/kernels.h"
#include "kernels/run.h"
#include "runtime/cpu/exec.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"

using namespace kiln;

namespace {

using kiln::bench::die;
using kiln::bench::must;

// The tiny kernel: one unit adds `a` to y[k].
void bench_tiny(dsl::Tensor<dsl::f32> y, dsl::f32 a, dsl::u32 k) {
  dsl::if_(dsl::absolute_pos() == 0u, [&] { y[k] = y[k] + a; });
}
KILN_KERNEL(bench_tiny, "y, a, k").cube_dim(1);

void bench_launch(bool quick) {
  auto rt = must(Runtime::open("cpu"));
  auto k = must(rt.kernel("bench_tiny"));
  auto y = must(rt.empty(ir::ElemType::F32, {16}));
  const std::vector<float> zeros(16, 0.0f);
  if (!y.upload(std::span<const float>(zeros))) die("upload");
  if (auto st = rt.launch(k, 1, 1, y, 1.0f, 3u); !st) die(st.error().message);  // compiles

  // The peer: the same kernel compiled on its own, called through its entry pointer with
  // arguments packed once.
  const dsl::KernelDef* def = dsl::Registry::global().find("bench_tiny");
  auto sel = must(dsl::select(*def, {}));
  auto traced = must(dsl::trace(*def, *sel.inst, sel.request));
  auto lowered = must(backend::find("cpu")->prepare(traced));
  cpu::CompileOptions o;
  o.target = must(cpu::host_target());
  auto compiled = must(cpu::compile(lowered, o));
  uint32_t bits;
  const float one = 1.0f;
  std::memcpy(&bits, &one, 4);
  const std::vector<HostArg> args{TensorView(y.data(), {16}), ScalarBits{bits}, ScalarBits{3}};
  const auto packed = must(pack_cpu_args(*compiled, {1, 1, 1}, args));
  const cpu::EntryFn entry = compiled->entry();
  alignas(64) static uint8_t arena[64];
  abi::LaunchState state;
  volatile cpu::EntryFn call = entry;  // through a pointer the compiler cannot see through

  const int reps = quick ? 2000 : 20000, samples = quick ? 5 : 31;
  const double t_direct =
      bench::median_seconds([&] { call(packed.data(), 0, 1, arena, &state); }, reps, samples);
  // Failures are counted, not checked one by one, so the loop times only the launch.
  int failures = 0;
  const double t_launch = bench::median_seconds(
      [&] { failures += !rt.launch(k, 1, 1, y, 1.0f, 3u).ok(); }, reps, samples);
  const double t_sync = bench::median_seconds(
      [&] {
        failures += !rt.launch(k, 1, 1, y, 1.0f, 3u).ok();
        failures += !rt.sync().ok();
      },
      reps, samples);
  if (failures) die(fmt::format("{} launches failed", failures));
  std::printf("launch overhead: 1 cube, 1 unit, 3 arguments; median of %d batches of %d\n", samples,
              reps);
  std::printf("  direct call of the compiled function   %7.3f us\n", t_direct * 1e6);
  std::printf("  kiln launch (to completion)            %7.3f us   %.1fx the direct call\n",
              t_launch * 1e6, t_launch / t_direct);
  std::printf("  kiln launch + sync                     %7.3f us   %.1fx the direct call\n",
              t_sync * 1e6, t_sync / t_direct);
}

// ---- first launches, in child processes ------------------------------------------------------

// Child: launch every example kernel once on small inputs and print each compile report.
int first_launch_child() {
  auto rt = must(Runtime::open("cpu"));
  for (const std::string& name : kernels::builtin_names()) {
    if (!kernels::find_run_recipe(name)) continue;
    kernels::RunConfig config;
    config.repeat = 0;
    config.seed = 1;
    auto r = must(kernels::run(rt, name, config));
    const CompileReport& c = r.compile;
    auto stage_ms = [&](const char* stage) {
      for (const backend::StageTime& s : c.stages)
        if (s.stage == stage) return s.ms;
      return 0.0;
    };
    std::printf("%s %d %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f\n", name.c_str(),
                c.from_disk ? 1 : 0, c.trace_ms, c.passes_ms, c.hash_ms, c.read_ms,
                stage_ms("llvm"), stage_ms("llvm-opt"), stage_ms("asm"), c.load_ms, c.total_ms);
  }
  return 0;
}

struct Report {
  bool from_disk = false;
  double trace = 0, passes = 0, hash = 0, read = 0, codegen = 0, optimize = 0, machine = 0,
         load = 0, total = 0;
};

std::map<std::string, Report> run_child(const std::string& cache_dir) {
  const std::string cmd =
      "KILN_CACHE_DIR=" + cache_dir + " /proc/" + std::to_string(::getpid()) + "/exe --child";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) die("cannot start a child process");
  std::map<std::string, Report> out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    std::istringstream in(line);
    std::string name;
    Report r;
    int disk = 0;
    in >> name >> disk >> r.trace >> r.passes >> r.hash >> r.read >> r.codegen >> r.optimize >>
        r.machine >> r.load >> r.total;
    r.from_disk = disk != 0;
    out[name] = r;
  }
  if (::pclose(p) != 0) die("the child process failed");
  return out;
}

void bench_first_launch() {
  char tmpl[] = "/tmp/kiln-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) die("mkdtemp");
  const std::string dir = tmpl;
  const auto cold = run_child(dir);
  const auto warm = run_child(dir);
  std::filesystem::remove_all(dir);
  std::printf(
      "\nfirst launch of each example kernel in a fresh process (ms): compiled | from the disk "
      "cache\n");
  std::printf("  %-14s %5s %6s %7s %8s %7s %5s %8s | %5s %6s %5s %5s %5s %8s %6s\n", "kernel",
              "trace", "passes", "LLVM IR", "optimize", "machine", "load", "compile", "trace",
              "passes", "hash", "read", "load", "disk hit", "ratio");
  std::vector<double> hits;
  for (const auto& [name, c] : cold) {
    auto it = warm.find(name);
    if (it == warm.end() || c.from_disk || !it->second.from_disk)
      die("unexpected cache state for " + name);
    const Report& w = it->second;
    hits.push_back(w.total);
    std::printf(
        "  %-14s %5.2f %6.2f %7.2f %8.2f %7.2f %5.2f %8.2f | %5.2f %6.2f %5.2f %5.2f %5.2f %8.3f "
        "%5.0fx\n",
        name.c_str(), c.trace, c.passes, c.codegen, c.optimize, c.machine, c.load, c.total, w.trace,
        w.passes, w.hash, w.read, w.load, w.total, c.total / w.total);
  }
  std::sort(hits.begin(), hits.end());
  std::printf("  disk hit (trace + passes + hash + load): median %.3f ms, max %.3f ms\n",
              hits[hits.size() / 2], hits.back());
}

}  // namespace

int main(int argc, char** argv) {
  (void)kernels::builtin_names();
  if (argc > 1 && std::strcmp(argv[1], "--child") == 0) return first_launch_child();
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  bench_launch(quick);
  bench_first_launch();
  return 0;
}
