// GPU tests of the runtime on cuda:0 (or, as test_emu, on the emulator): every example kernel
// against its reference and against the CPU's results for the same inputs, streams and events,
// device prints, asserts and checked-mode faults, memory reuse. Built into test_gpu with the CPU's
// numeric tests.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <optional>

#include "kernels/kernels.h"
#include "kernels/lib/random.h"
#include "kernels/run.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/gpu/gpu_exec.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;

// The references are the recipes' own C++ (kernels/run.h), so this needs no CPU backend; when
// the build has one, the GPU's outputs are compared with the CPU's for the same inputs too.
TEST_CASE("every example kernel passes its reference on the GPU and agrees with the CPU", "[gpu]") {
  auto gpu = Runtime::open(test::test_device());
  REQUIRE(gpu.ok());
  auto cpu = Runtime::open("cpu");
  if (!cpu)
    WARN("GPU results are checked against the C++ references only: " << cpu.error().message);
  std::map<std::string, Runtime> emulators;  // of other architectures, for per-arch kernels
  for (const std::string& name : kernels::builtin_names()) {
    const kernels::RunRecipe* recipe = kernels::find_run_recipe(name);
    if (!recipe) continue;
    INFO(name);
    const kernels::Placement place = kernels::placement(*recipe, gpu->device());
    if (!place.skip.empty()) {
      WARN(name << " skipped: " << place.skip);
      continue;
    }
    Runtime* on = &*gpu;
    if (!place.emulator.empty()) {
      auto it = emulators.find(place.emulator);
      if (it == emulators.end()) {
        auto other = Runtime::open(place.emulator);
        REQUIRE(other.ok());
        it = emulators.emplace(place.emulator, std::move(*other)).first;
      }
      on = &it->second;
    }
    kernels::RunConfig config;
    config.repeat = test::emulated() ? 1 : 3;  // the emulator's time tells nothing
    config.seed = 12345;
    config.keep_outputs = true;
    auto g = kernels::run(*on, name, config);
    INFO((g.ok() ? std::string() : g.error().message));
    REQUIRE(g.ok());
    for (const auto& c : g->checks) {
      INFO(c.name << ": " << c.mismatches << " mismatches, first at " << c.first_bad << ": got "
                  << c.got << ", want " << c.want);
      CHECK(c.mismatches == 0);
    }
    CHECK(g->has_reference);
    CHECK(g->median_ms > 0);
    if (!cpu) continue;
    // The CPU with the same inputs. Line widths differ (16 bytes on the GPU), so the sums
    // that reduce in another order agree within the reference's tolerance.
    auto c = kernels::run(*cpu, name, config);
    REQUIRE(c.ok());
    for (const auto& [tensor, got] : g->outputs) {
      const auto& want = c->outputs.at(tensor);
      // A shape that follows the line width (sum's per-cube partials cover line * units *
      // chunk elements each) differs between the devices; each passed its reference above.
      if (got.size() != want.size()) continue;
      double tol_rel = 2e-5, tol_abs = 1e-4;
      for (const auto& chk : g->checks)
        if (chk.name == tensor) {
          tol_rel = 2 * chk.rel_tol;
          tol_abs = 2 * chk.abs_tol;
        }
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(got[i] - want[i]) <= tol_abs + tol_rel * std::fabs(want[i]))) ++bad;
      CHECK(bad == 0);
    }
  }
}

// The TMA GEMM's other protocols, which the defaults above leave out: a producer plane (warp
// specialization) and B tiles multicast to clusters of two cubes. Where the GPU has no wgmma
// (not sm_90a), the placement runs them on the emulator of sm_90a or skips them, as above.
TEST_CASE("matmul_tma with a producer plane and with clusters passes its reference", "[gpu]") {
  auto gpu = Runtime::open(test::test_device());
  REQUIRE(gpu.ok());
  const kernels::RunRecipe* recipe = kernels::find_run_recipe("matmul_tma");
  REQUIRE(recipe);
  const kernels::Placement place = kernels::placement(*recipe, gpu->device());
  if (!place.skip.empty()) {
    WARN("matmul_tma skipped: " << place.skip);
    return;
  }
  std::optional<Runtime> other;
  if (!place.emulator.empty()) {
    auto opened = Runtime::open(place.emulator);
    REQUIRE(opened.ok());
    other.emplace(std::move(*opened));
  }
  Runtime& on = other ? *other : *gpu;
  for (const char* setting : {"producer", "cluster"}) {
    INFO("matmul_tma with " << setting << " on " << on.device().name);
    kernels::RunConfig config;
    config.set[setting] = std::string(setting) == "cluster" ? "2" : "1";
    config.dtypes["a"] = "bf16";
    config.repeat = test::emulated() ? 1 : 3;
    config.seed = 12345;
    auto r = kernels::run(on, "matmul_tma", config);
    INFO((r.ok() ? std::string() : r.error().message));
    REQUIRE(r.ok());
    for (const auto& c : r->checks) {
      INFO(c.name << ": " << c.mismatches << " mismatches");
      CHECK(c.mismatches == 0);
    }
    CHECK(r->passed);
  }
}

// kiln::lib's random numbers are the same bits on the GPU as on the CPU (or, in a build
// without one, the emulator): Philox, the exact conversions and the library's own log, sin and
// cos, with NVRTC contracting nothing (--fmad=false).
TEST_CASE("uniform and normal give the GPU the same bits as the CPU", "[gpu]") {
  auto gpu = Runtime::open(test::test_device());
  REQUIRE(gpu.ok());
  auto host = Runtime::open("cpu");
  if (!host) host = Runtime::open("cuda-emu");
  if (!host) {
    WARN("no CPU backend or emulator to compare the GPU's random numbers with: "
         << host.error().message);
    return;
  }
  auto bits = [](Runtime& rt, ir::ElemType e, bool normal) {
    auto t = rt.empty(e, {100003});
    REQUIRE(t.ok());
    const lib::RandomOptions o{0xfeedfacecafebeefull, 3};
    KILN_REQUIRE_OK(normal ? lib::normal(rt, *t, o, -1.0, 3.0) : lib::uniform(rt, *t, o, 2.0, 9.0));
    KILN_REQUIRE_OK(rt.sync());
    std::vector<uint8_t> raw(static_cast<size_t>(t->numel()) * ir::elem_bytes(e));
    KILN_REQUIRE_OK(t->download(std::span<uint8_t>(raw)));
    return raw;
  };
  for (ir::ElemType e : {ir::ElemType::F32, ir::ElemType::F16, ir::ElemType::BF16})
    for (bool normal : {false, true}) {
      INFO(ir::elem_name(e) << (normal ? " normal" : " uniform") << " on " << gpu->device().name
                            << " and " << host->device().name);
      CHECK(bits(*gpu, e, normal) == bits(*host, e, normal));
    }
}

// kiln::lib::matmul on the device against the CPU (or the emulator): f32 bit for bit (the same
// FMAs in the same order), bf16 inputs on the tensor cores within f32 rounding, through the
// runner's double reference too.
TEST_CASE("kiln::lib::matmul on the GPU gives the CPU's f32 bits and bf16 on the tensor cores",
          "[gpu]") {
  auto gpu = Runtime::open(test::test_device());
  REQUIRE(gpu.ok());
  kernels::RunConfig config;
  config.repeat = 0;
  config.seed = 7;
  config.shapes = {{"a", {2, 300, 200}}, {"b", {200, 260}}};
  config.set = {{"beta", "0.5"}, {"use_bias", "true"}, {"epilogue", "1"}};
  for (const char* dtype : {"f32", "bf16"}) {
    INFO(dtype << " on " << gpu->device().name);
    config.dtypes = {{"a", dtype}};
    config.keep_outputs = true;
    auto r = kernels::run(*gpu, "matmul", config);
    KILN_REQUIRE_OK(r);
    REQUIRE(r->checks.size() == 1);
    CHECK(r->checks[0].mismatches == 0);
    auto host = Runtime::open("cpu");
    if (!host) continue;  // no CPU backend in this build: the reference is the check
    auto on_cpu = kernels::run(*host, "matmul", config);
    KILN_REQUIRE_OK(on_cpu);
    if (std::string(dtype) == "f32") CHECK(r->outputs.at("c") == on_cpu->outputs.at("c"));
  }
}

TEST_CASE("GPU prints, asserts and checked-mode faults arrive at sync", "[gpu]") {
  std::vector<std::string> lines;
  RuntimeOptions o;
  o.print = [&](const std::string& s) { lines.push_back(s); };
  auto rt = Runtime::open(test::test_device(), o);
  REQUIRE(rt.ok());
  (void)kernels::builtin_names();
  auto pa = test::kernel(*rt, "rt_print_assert");
  Tensor x = test::f32_tensor(*rt, {1.5f, 2.5f, -3.5f, 4.5f});
  KILN_REQUIRE_OK(rt->launch(pa, 1, 4, x));
  const Status st = rt->sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(
      st.error().message,
      Contains(
          "assertion failed in kernel 'rt_print_assert': x must not be negative (cube 0, unit 2)"));
  CHECK(lines ==
        std::vector<std::string>{"unit 0 sees 1.5", "unit 1 sees 2.5", "unit 2 sees -3.5"});
  // Checked mode: the out-of-bounds stores are skipped, the memory around is intact.
  Tensor whole = test::f32_tensor(*rt, std::vector<float>(128, -7.0f));
  auto y = whole.slice(0, 32, 64);
  REQUIRE(y.ok());
  LaunchOptions lo;
  lo.checked = true;
  KILN_REQUIRE_OK(rt->launch_with(lo, test::kernel(*rt, "rt_fill_n"), 1, 64, *y, 64u, 1.0f));
  const Status f = rt->sync();
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.error().message,
             Contains(test::marker_loc("tests/runtime/runtime_kernels.cpp", "FILL_STORE") +
                      ": error: out-of-bounds store of tensor 'y'") &&
                 Contains("line index 32 is not below 32 (cube 0, unit 32)"));
  const auto all = test::to_host<float>(whole);
  for (size_t i = 0; i < 128; ++i) REQUIRE(all[i] == (i >= 32 && i < 64 ? 1.0f : -7.0f));
  KILN_REQUIRE_OK(rt->sync());
}

TEST_CASE("GPU streams run in order; events time them", "[gpu]") {
  auto rt = Runtime::open(test::test_device());
  REQUIRE(rt.ok());
  (void)kernels::builtin_names();
  auto s = rt->new_stream();
  REQUIRE(s.ok());
  const int64_t n = test::emulated() ? 1 << 16 : 1 << 22;
  Tensor y = test::f32_tensor(*rt, std::vector<float>(n, 0.0f));
  auto fill = test::kernel(*rt, "rt_fill_n");
  LaunchOptions lo;
  lo.stream = &*s;
  auto a = rt->record(*s);
  REQUIRE(a.ok());
  for (int i = 1; i <= 20; ++i)
    KILN_REQUIRE_OK(rt->launch_with(lo, fill, static_cast<uint32_t>(n / 64), 64, y,
                                    static_cast<uint32_t>(n), static_cast<float>(i)));
  auto b = rt->record(*s);
  REQUIRE(b.ok());
  KILN_REQUIRE_OK(rt->sync(*s));
  auto ms = Event::elapsed_ms(*a, *b);
  REQUIRE(ms.ok());
  CHECK(*ms > 0);
  CHECK(test::to_host<float>(y)[n - 1] == 20.0f);  // the last launch wrote last
}

TEST_CASE("GPU memory is reused after the device is idle", "[gpu]") {
  auto rt = Runtime::open(test::test_device());
  REQUIRE(rt.ok());
  for (int i = 0; i < 10; ++i) {
    auto t = rt->empty(ir::ElemType::F32, {1 << 20});
    REQUIRE(t.ok());
  }
  CHECK(rt->memory_stats().reused >= 9);
  CHECK(rt->memory_stats().in_use == 0);
}

}  // namespace
}  // namespace kiln
