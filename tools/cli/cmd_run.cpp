// `kiln run KERNEL`: runs a registered kernel on random inputs, checks it against its C++
// reference and times it. `kiln demo`: the same for every example kernel on every device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "compiler/dsl/registry.h"
#include "kernels/kernels.h"
#include "kernels/lib/matmul.h"
#include "kernels/lib/random.h"
#include "kernels/run.h"
#include "runtime/autotune.h"
#include "runtime/runtime.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

namespace {

struct RunOptions {
  std::string kernel, device = "cpu", cubes, cube_dim;
  std::vector<std::string> set, shape, dtype, line, plugins;
  bool checked = false;
  int repeat = 20;
  uint64_t seed = 0;
};

Result<std::vector<int64_t>> parse_shape(const std::string& name, const std::string& text) {
  std::vector<int64_t> dims;
  size_t start = 0;
  while (true) {
    const size_t x = text.find('x', start);
    const std::string part =
        text.substr(start, x == std::string::npos ? std::string::npos : x - start);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0)
      return Error(
          ErrorKind::InvalidArgument,
          fmt::format("--shape {}={}: a shape is sizes joined by 'x', like 1024x512", name, text));
    dims.push_back(v);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  if (dims.size() > 8)
    return Error(ErrorKind::InvalidArgument, fmt::format("--shape {}: at most 8 dimensions", name));
  return dims;
}

std::string compile_summary(const kernels::RunResult& r) {
  if (!r.compiled) return "already compiled";
  const CompileReport& c = r.compile;
  if (c.from_disk)
    return fmt::format("from the disk cache: trace {:.2f} + passes {:.2f} + load {:.2f} ms",
                       c.trace_ms, c.passes_ms, c.load_ms);
  // The backend's stages, as it names them (llvm, llvm-opt, asm on the CPU; cuda, ptx on CUDA).
  std::string stages;
  for (const backend::StageTime& s : c.stages) stages += fmt::format(" + {} {:.2f}", s.stage, s.ms);
  return fmt::format("compiled: trace {:.2f} + passes {:.2f}{} + load {:.2f} ms", c.trace_ms,
                     c.passes_ms, stages, c.load_ms);
}

std::string check_summary(const kernels::TensorCheck& c) {
  if (c.mismatches == 0)
    return fmt::format("{}: max error {:.3g} (relative {:.3g}), within rel {:.0e} abs {:.0e}",
                       c.name, c.max_abs_error, c.max_rel_error, c.rel_tol, c.abs_tol);
  return fmt::format(
      "{}: {} elements differ; first at {}: got {}, expected {} (rel {:.0e}, abs {:.0e})", c.name,
      c.mismatches, c.first_bad, c.got, c.want, c.rel_tol, c.abs_tol);
}

std::string dim3_text(const Dim3& d) {
  if (d.z != 1) return fmt::format("{}x{}x{}", d.x, d.y, d.z);
  if (d.y != 1) return fmt::format("{}x{}", d.x, d.y);
  return fmt::format("{}", d.x);
}

double gb_per_s(const kernels::RunResult& r) {
  return r.median_ms > 0 ? static_cast<double>(r.bytes) / (r.median_ms * 1e-3) / 1e9 : 0;
}

// The run's configuration from the command line's options.
Result<kernels::RunConfig> make_config(const RunOptions& o) {
  KILN_TRY(load_kernels(o.plugins));
  kernels::RunConfig config;
  KILN_ASSIGN(config.set, parse_assignments(o.set, "--set"));
  KILN_ASSIGN(config.dtypes, parse_assignments(o.dtype, "--dtype"));
  KILN_ASSIGN(config.lines, parse_int_map(o.line, "--line"));
  KILN_ASSIGN(auto shapes, parse_assignments(o.shape, "--shape"));
  for (const auto& [n, text] : shapes) {
    KILN_ASSIGN(config.shapes[n], parse_shape(n, text));
  }
  if (!o.cubes.empty()) {
    KILN_ASSIGN(auto d, parse_dims(o.cubes, "--cubes", 0xffffffffu));
    config.cubes = Dim3(d[0], d[1], d[2]);
  }
  if (!o.cube_dim.empty()) {
    KILN_ASSIGN(auto d, parse_dims(o.cube_dim, "--cube-dim", 1024));
    config.cube_dim = Dim3(d[0], d[1], d[2]);
  }
  if (o.repeat < 0) return Error(ErrorKind::InvalidArgument, "--repeat takes a count of 0 or more");
  config.repeat = o.repeat;
  config.checked = o.checked;
  config.seed = o.seed;
  return config;
}

int run_one(const RunOptions& o) {
  auto fail = [](const Error& e) {
    print_error(e);
    return 1;
  };
  auto made = make_config(o);
  if (!made) return fail(made.error());
  kernels::RunConfig& config = *made;
  // A library operation's launches are checked through the runtime's own option.
  RuntimeOptions options;
  const kernels::RunRecipe* recipe = kernels::find_run_recipe(o.kernel);
  if (recipe && recipe->host_op()) {
    options.checked = config.checked;
    config.checked = false;
  }
  auto rt = Runtime::open(o.device, options);
  if (!rt) return fail(rt.error());
  auto r = kernels::run(*rt, o.kernel, config);
  if (!r) return fail(r.error());
  if (r->host_op)
    fmt::print("{} on {}: through its host entry point, which picks the kernels and grids{}\n",
               r->kernel, r->device, o.checked ? ", checked mode" : "");
  else
    fmt::print("{} on {}: {} cubes of {} units{}\n", r->kernel, r->device, dim3_text(r->cubes),
               dim3_text(r->cube_dim), o.checked ? ", checked mode" : "");
  if (!r->plan.empty()) fmt::print("  kernel      {}\n", r->plan);
  fmt::print("  arguments   {}\n", r->arguments);
  fmt::print("  inputs      random, seed {} (--seed {} repeats them)\n", r->seed, r->seed);
  fmt::print(
      "  first run   {:.2f} ms ({}){}\n", r->first_ms, compile_summary(*r),
      r->validated ? "; checked mode, since the grid, a line width or a shape was given" : "");
  if (!r->has_reference) {
    fmt::print("  reference   none declared: the results were not checked\n");
  } else {
    for (const auto& c : r->checks)
      fmt::print("  reference   {}: {}\n", check_summary(c), c.mismatches ? "FAILED" : "passed");
  }
  if (!r->times_ms.empty()) {
    fmt::print(
        "  time        median {:.4g} ms, min {:.4g} ms over {} runs; {:.3g} GB/s of tensor "
        "data",
        r->median_ms, r->min_ms, r->times_ms.size(), gb_per_s(*r));
    if (r->flops > 0 && r->median_ms > 0)
      fmt::print("; {:.4g} GFLOP/s", r->flops / (r->median_ms * 1e-3) / 1e9);
    fmt::print("\n");
  }
  return r->passed ? 0 : 1;
}

// The seed's demo: the same random matrices on every device, one product on each, its time,
// and how far the devices' results are apart. Returns false when a device failed.
bool product_on_every_device(int repeat) {
  constexpr int64_t M = 2048, K = 4096, N = 2048;
  const double flops = 2.0 * M * K * N;
  fmt::print(
      "\nOne product on every device: C = A B, A {}x{} and B {}x{} drawn from N(0, 1) by "
      "kiln::lib::normal\n(seed 42: the same bits on every device), in f32 by kiln::lib::matmul "
      "(tuned on its first call); the median of {} runs.\n",
      M, K, K, N, std::max(repeat, 1));
  struct Product {
    std::string device;
    std::vector<float> c;
  };
  std::vector<Product> done;
  bool ok = true;
  for (const DeviceEntry& d : devices()) {
    if (!d.available) continue;  // said above
    if (d.info.emulated) {
      fmt::print(
          "  {:<10} skipped: an emulator runs every unit on the host (34 GFLOP would take "
          "hours)\n",
          d.name);
      continue;
    }
    auto fail = [&](const Error& e) {
      fmt::print("  {:<10} failed: {}\n", d.name, e.message);
      ok = false;
    };
    auto rt = Runtime::open(d.name);
    if (!rt) {
      fail(rt.error());
      continue;
    }
    auto a = rt->empty(ir::ElemType::F32, {M, K});
    auto b = rt->empty(ir::ElemType::F32, {K, N});
    auto c = rt->empty(ir::ElemType::F32, {M, N});
    if (!a || !b || !c) {
      fail(!a ? a.error() : !b ? b.error() : c.error());
      continue;
    }
    auto launch = [&]() -> Status { return lib::matmul(*rt, *a, *b, *c); };
    Status st = lib::normal(*rt, *a, {42, 0});
    if (st) st = lib::normal(*rt, *b, {42, 1});
    if (st) st = launch();  // compiles
    if (st) st = rt->sync();
    std::vector<double> ms;
    for (int r = 0; st && r < std::max(repeat, 1); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      st = launch();
      if (st) st = rt->sync();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    Product p{d.name, std::vector<float>(static_cast<size_t>(M * N))};
    if (st) st = c->download(std::span<float>(p.c));
    if (!st) {
      fail(st.error());
      continue;
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    fmt::print("  {:<10} {:9.2f} ms {:9.1f} GFLOP/s\n", d.name, median,
               flops / (median * 1e-3) / 1e9);
    done.push_back(std::move(p));
  }
  if (done.size() < 2) {
    fmt::print(
        "  one device ran it here: nothing to compare (with a GPU, the largest difference "
        "between its C and the CPU's)\n");
    return ok;
  }
  for (size_t i = 1; i < done.size(); ++i) {
    double diff = 0, largest = 0;
    for (size_t j = 0; j < done[0].c.size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(done[i].c[j] - done[0].c[j])));
      largest = std::max(largest, static_cast<double>(std::fabs(done[0].c[j])));
    }
    fmt::print(
        "  largest difference between {} and {}: {:.3g} (the largest |C| is {:.3g}): the "
        "devices add the {} products of each element in different orders\n",
        done[0].device, done[i].device, diff, largest, K);
  }
  return ok;
}

// (a + b) * c against a * c + b * c on the CPU, with numbers from N(0, 1).
bool distributive_on_cpu() {
  constexpr int64_t n = int64_t{1} << 22;
  auto rt = Runtime::open("cpu");
  auto fail = [](const Error& e) {
    fmt::print("  distributive failed: {}\n", e.message);
    return false;
  };
  if (!rt) return fail(rt.error());
  std::vector<Tensor> t;
  for (int i = 0; i < 5; ++i) {
    auto x = rt->empty(ir::ElemType::F32, {n});
    if (!x) return fail(x.error());
    t.push_back(std::move(*x));
  }
  for (uint64_t i = 0; i < 3; ++i)
    if (Status st = lib::normal(*rt, t[i], {42, 2 + i}); !st) return fail(st.error());
  auto k = rt->kernel("distributive");
  if (!k) return fail(k.error());
  Status st =
      rt->launch(*k, Dim3(static_cast<uint32_t>(n / 256)), Dim3(256), t[0], t[1], t[2], t[3], t[4]);
  if (st) st = rt->sync();
  std::vector<float> lhs(static_cast<size_t>(n)), rhs(lhs.size());
  if (st) st = t[3].download(std::span<float>(lhs));
  if (st) st = t[4].download(std::span<float>(rhs));
  if (!st) return fail(st.error());
  int64_t differ = 0;
  double largest = 0;
  for (size_t i = 0; i < lhs.size(); ++i)
    if (lhs[i] != rhs[i]) {
      ++differ;
      largest = std::max(largest, static_cast<double>(std::fabs(lhs[i] - rhs[i])));
    }
  fmt::print(
      "\nFloating point is not associative: with a, b, c from N(0, 1) (2^22 each, on the CPU), "
      "(a + b) * c and\na * c + b * c differ in {} of {} elements ({:.1f}%), by at most {:.3g}: "
      "every add and multiply rounds\nto the nearest float, and the two orders round at different "
      "points.\n",
      differ, n, 100.0 * static_cast<double>(differ) / static_cast<double>(n), largest);
  return true;
}

int run_demo(int repeat) {
  if (auto st = load_kernels({}); !st) {
    print_error(st.error());
    return 1;
  }
  fmt::print(
      "kiln demo: the example kernels on every device, each checked against its C++ reference.\n");
  bool all_passed = true;
  for (const DeviceEntry& d : devices()) {
    if (!d.available) {
      fmt::print("\n{}: absent ({})\n", d.name, d.reason);
      continue;
    }
    const bool emulated = d.info.emulated;
    fmt::print("\n{}: {}{}\n", d.name, d.info.description,
               emulated ? " (checks the generated CUDA; its times are the emulator's, 2 runs at "
                          "most)"
                        : "");
    auto rt = Runtime::open(d.name);
    if (!rt) {
      print_error(rt.error());
      all_passed = false;
      continue;
    }
    fmt::print("  {:<14} {:>12} {:>11} {:>10}  {}\n", "kernel", "first run", "median", "GB/s",
               "check");
    std::map<std::string, Runtime> other_emulators;  // for per-architecture kernels
    for (const std::string& name : kernels::builtin_names()) {
      const kernels::RunRecipe* recipe = kernels::find_run_recipe(name);
      if (!recipe) continue;
      // A per-architecture kernel runs on an emulator of its architecture, and is skipped on
      // GPUs of another.
      Runtime* on = &*rt;
      std::string where;
      const kernels::Placement place = kernels::placement(*recipe, d.info);
      if (!place.skip.empty()) {
        fmt::print("  {:<14} skipped: {}\n", name, place.skip);
        continue;
      }
      if (!place.emulator.empty()) {
        auto it = other_emulators.find(place.emulator);
        if (it == other_emulators.end()) {
          auto other = Runtime::open(place.emulator);
          if (!other) {
            fmt::print("  {:<14} failed: {}\n", name, other.error().message);
            all_passed = false;
            continue;
          }
          it = other_emulators.emplace(place.emulator, std::move(*other)).first;
        }
        on = &it->second;
        where = " on " + place.emulator;
      }
      kernels::RunConfig config;
      config.repeat = emulated ? std::min(repeat, 2) : repeat;
      auto r = kernels::run(*on, name, config);
      if (!r) {
        fmt::print("  {:<14} failed: {}\n", name, r.error().message);
        all_passed = false;
        continue;
      }
      std::string check = r->passed ? "passed" : "FAILED";
      double worst = 0;
      for (const auto& c : r->checks) worst = std::max(worst, c.max_abs_error);
      if (r->passed) check += fmt::format(" (max error {:.2g})", worst);
      check += where;
      for (const auto& c : r->checks)
        if (c.mismatches) check += "; " + check_summary(c);
      all_passed = all_passed && r->passed;
      fmt::print("  {:<14} {:>9.2f} ms {:>8.3f} ms {:>10.1f}  {}\n", name, r->first_ms,
                 r->median_ms, gb_per_s(*r), check);
    }
  }
  all_passed = product_on_every_device(repeat) && all_passed;
  all_passed = distributive_on_cpu() && all_passed;
  const CacheStats s = cache_stats();
  fmt::print("\ncompiled {} kernels in {:.0f} ms, loaded {} from the disk cache in {:.1f} ms\n",
             s.compiles, s.compile_ms, s.disk_hits, s.disk_load_ms);
  fmt::print(
      "Next: `kiln run axpy --shape x=1000000 --shape y=1000000`, `kiln show axpy --emit asm`, "
      "`kiln list`.\n");
  return all_passed ? 0 : 1;
}

// `kiln tune`: the operation once with the tuner in full mode (or the one asked for), then what
// it measured and kept.
int tune_one(const RunOptions& o, const std::string& mode_text) {
  auto fail = [](const Error& e) {
    print_error(e);
    return 1;
  };
  const auto mode = parse_autotune_mode(mode_text);
  if (!mode || *mode == AutotuneMode::Off)
    return fail(
        Error(ErrorKind::InvalidArgument, fmt::format("--mode {}: fast or full", mode_text)));
  auto made = make_config(o);
  if (!made) return fail(made.error());
  kernels::RunConfig config = *made;
  config.repeat = 0;
  auto rt = Runtime::open(o.device);
  if (!rt) return fail(rt.error());
  set_autotune_mode(*mode);
  auto r = kernels::run(*rt, o.kernel, config);
  set_autotune_mode(std::nullopt);
  if (!r) return fail(r.error());
  const auto report = last_tune_report();
  const kernels::RunRecipe* recipe = kernels::find_run_recipe(o.kernel);
  if ((!report || report->op != o.kernel) && recipe && recipe->host_op())
    return fail(Error(ErrorKind::InvalidArgument,
                      fmt::format("{} had nothing to tune for these shapes: an empty product or "
                                  "one with K = 0 is computed one way only",
                                  o.kernel)));
  if (!report || report->op != o.kernel)
    return fail(Error(ErrorKind::InvalidArgument,
                      fmt::format("'{}' has nothing to tune: only library operations that "
                                  "declare candidates do (kiln list shows them)",
                                  o.kernel)));
  const TuneOutcome& out = report->outcome;
  fmt::print("{} on {}: tuned for {}\n", report->op, rt->device().name, report->key);
  if (out.source == TuneOutcome::Source::Measured) {
    for (size_t i = 0; i < report->candidates.size(); ++i)
      fmt::print("  {} {:<28} {}\n", i == out.index ? "*" : " ", report->candidates[i],
                 out.ms[i] >= 0 ? fmt::format("{:.3f} ms", out.ms[i]) : std::string("not run"));
    fmt::print("kept {} in the disk cache (kiln cache ls); later runs take it without measuring\n",
               report->candidates[out.index]);
  } else {
    fmt::print("already tuned: {} (from the {}); `kiln cache clear` forgets it\n",
               report->candidates[out.index],
               out.source == TuneOutcome::Source::Disk ? "disk cache" : "tuning in memory");
  }
  for (const auto& c : r->checks)
    if (c.mismatches) {
      fmt::print("  reference   {}: FAILED\n", check_summary(c));
      return 1;
    }
  return 0;
}

}  // namespace

Command add_tune_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "tune", "Tune a library operation for some shapes ahead of time; the winner is kept on disk");
  auto o = std::make_shared<RunOptions>();
  auto mode = std::make_shared<std::string>("full");
  sub->add_option("OPERATION", o->kernel, "A library operation (see kiln list), e.g. matmul")
      ->required();
  sub->add_option("--device", o->device, "cpu, cuda:N, or cuda-emu[:sm_XY[a]]")
      ->capture_default_str();
  sub->add_option("--shape", o->shape, "Shape NAME=AxB... of a tensor (repeatable)");
  sub->add_option("--dtype", o->dtype, "Element type NAME=TYPE");
  sub->add_option("--set", o->set, "Scalar value NAME=VALUE (repeatable)");
  sub->add_option("--mode", *mode, "full (every candidate) or fast (the short list)")
      ->capture_default_str();
  sub->add_option("--plugin", o->plugins, "Load kernels from a shared library first (repeatable)");
  sub->footer(
      "The tuning's key is the device, the types and the shapes rounded up to powers of two; "
      "KILN_AUTOTUNE=off|fast|full sets what a program's first call does (docs/runtime.md).");
  return {sub, [o, mode]() -> int { return tune_one(*o, *mode); }};
}

Command add_run_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("run", "Run a registered kernel on random inputs, check it, time it");
  auto o = std::make_shared<RunOptions>();
  sub->add_option("KERNEL", o->kernel, "A registered kernel (see kiln list)")->required();
  sub->add_option(
         "--device", o->device,
         "cpu, cpu:NAME[:FEATURES] (another x86-64 CPU's code this one can run, e.g. "
         "cpu:x86-64-v3), cuda:N, or the CUDA emulator cuda-emu[:sm_XY[a]] (see kiln devices)")
      ->capture_default_str();
  sub->add_option("--set", o->set, "Comptime or scalar value NAME=VALUE (repeatable)");
  sub->add_option("--shape", o->shape, "Shape NAME=AxB... of a tensor (repeatable)");
  sub->add_option("--dtype", o->dtype,
                  "Element type NAME=TYPE, picking an instantiation of a generic kernel");
  sub->add_option("--line", o->line, "Line width NAME=WIDTH of a tensor (repeatable)");
  sub->add_option(
      "--cubes", o->cubes,
      "Cube count X[,Y[,Z]] (default: what the kernel declares; a given grid is validated by "
      "running the first launch in checked mode)");
  sub->add_option("--cube-dim", o->cube_dim,
                  "Units per cube X[,Y[,Z]] (default: the registered size)");
  sub->add_flag("--checked", o->checked, "Bounds-check every memory access");
  sub->add_option("--repeat", o->repeat, "Timed runs after the first")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the random inputs (default: a fresh one, printed)");
  sub->add_option("--plugin", o->plugins, "Load kernels from a shared library first (repeatable)");
  sub->footer("Exit status 1 when the results differ from the kernel's reference.");
  return {sub, [o]() -> int { return run_one(*o); }};
}

Command add_demo_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("demo", "Run every example kernel on every device, check and time them");
  auto repeat = std::make_shared<int>(10);
  sub->add_option("--repeat", *repeat, "Timed runs per kernel")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  return {sub, [repeat]() -> int { return run_demo(*repeat); }};
}

}  // namespace kiln::cli
