// Kernels from a plugin, as a new user writes them (tests/plugin/user_kernels.cpp): loading it
// from C++, a plugin kernel named like a built-in one, comptime values across the library
// boundary, a cube size that follows a comptime value, rank errors, recipes that know the
// element types. A test program of its own: the plugin replaces the built-in `axpy` for the
// rest of the process.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "compiler/dsl/registry.h"
#include "kernels/run.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;
using ir::ElemType;

const Plugin& user_plugin() {
  (void)kernels::builtin_names();  // the built-in kernels first, as in the kiln CLI
  static const Plugin p = [] {
    auto r = load_plugin(KILN_USER_PLUGIN);
    INFO((r.ok() ? std::string() : r.error().message));
    REQUIRE(r.ok());
    return *r;
  }();
  return p;
}

TEST_CASE("load_plugin registers the plugin's kernels and names the built-in one it replaces",
          "[plugin]") {
  const Plugin& p = user_plugin();
  CHECK(p.kernels == std::vector<std::string>{"axpy", "tile_transpose", "third"});
  REQUIRE(p.notices.size() == 1);
  CHECK_THAT(p.notices[0], Contains("kernel 'axpy' of " KILN_USER_PLUGIN
                                    " replaces the built-in kernel at kernels/examples/axpy.cpp:"));
  const dsl::KernelDef* d = dsl::Registry::global().find("axpy");
  REQUIRE(d);
  CHECK(d->origin == KILN_USER_PLUGIN);
  CHECK(d->problem.empty());
  // The listing shows each name once: the plugin's axpy.
  int axpys = 0;
  for (const dsl::KernelDef* k : dsl::Registry::global().all()) axpys += k->name == "axpy";
  CHECK(axpys == 1);
  // Loading it again changes nothing and reports the same.
  const size_t before = dsl::Registry::global().size();
  auto again = load_plugin(KILN_USER_PLUGIN);
  REQUIRE(again.ok());
  CHECK(again->kernels == p.kernels);
  CHECK(dsl::Registry::global().size() == before);
}

TEST_CASE("a plugin's axpy is the one a launch runs", "[plugin]") {
  user_plugin();
  test::ScopedCache cache;
  auto rt = test::open_cpu();
  Tensor x = test::f32_tensor(rt, std::vector<float>(100, 3.0f));
  Tensor y = test::f32_tensor(rt, std::vector<float>(100, 1.0f));
  auto k = test::kernel(rt, "axpy");
  KILN_REQUIRE_OK(rt.launch(k, 2, 64, x, y, 2.0f));
  KILN_REQUIRE_OK(rt.sync());
  for (float v : test::to_host<float>(y)) REQUIRE(v == 5.0f);  // 2 * 3 - 1, not 2 * 3 + 1
}

TEST_CASE("a comptime int passed from the program reaches a plugin's kernel", "[plugin]") {
  user_plugin();
  test::ScopedCache cache;
  auto rt = test::open_cpu();
  const int64_t rows = 20, cols = 13;
  std::vector<float> host(static_cast<size_t>(rows * cols));
  std::iota(host.begin(), host.end(), 0.0f);
  Tensor in = test::tensor_from(rt, ElemType::F32, host, {rows, cols});
  auto out = rt.empty(ElemType::F32, {cols, rows});
  REQUIRE(out.ok());
  auto k = test::kernel(rt, "tile_transpose");
  const int tile = 8;  // an int, as the registration declares (once failed: "needs an int")
  KILN_REQUIRE_OK(rt.launch(k, {2, 3, 1}, {8, 8, 1}, in, *out, tile));
  KILN_REQUIRE_OK(rt.sync());
  const auto got = test::to_host<float>(*out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      REQUIRE(got[static_cast<size_t>(c * rows + r)] == host[static_cast<size_t>(r * cols + c)]);

  SECTION("a cube size the kernel does not take is an error naming both") {
    auto st = rt.launch(k, {2, 3, 1}, {16, 16, 1}, in, *out, tile);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains("kernel 'tile_transpose' needs a 8x8x1 cube for tile=8 (its "
                        "registration at tests/plugin/user_kernels.cpp:"));
    CHECK_THAT(st.error().message, Contains("but the launch asks for 16x16x1"));
  }
  SECTION("a number of another type converts; one outside the declared range is an error") {
    KILN_REQUIRE_OK(rt.launch(k, {2, 3, 1}, {8, 8, 1}, in, *out, 8u));
    KILN_REQUIRE_OK(rt.sync());
    auto st = rt.launch(k, {1, 1, 1}, {8, 8, 1}, in, *out, 64);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains("comptime parameter 'tile' is 64, outside the values it accepts, 1..32"));
  }
  SECTION("a rank-1 tensor for a rank-2 parameter is an argument error naming it") {
    Tensor flat = test::f32_tensor(rt, host);
    auto st = rt.launch(k, {2, 3, 1}, {8, 8, 1}, flat, *out, tile);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains("argument 'in' is a rank-1 tensor, but the kernel takes rank 2 there"));
  }
}

TEST_CASE("the CLI's selection takes a kernel's cube size from its comptime values", "[plugin]") {
  user_plugin();
  const dsl::KernelDef* d = dsl::Registry::global().find("tile_transpose");
  REQUIRE(d);
  dsl::SpecOptions o;
  o.set["tile"] = "32";
  auto sel = dsl::select(*d, o);
  REQUIRE(sel.ok());
  CHECK(sel->request.cube_dim == dsl::CubeDim{32, 32, 1});
  o.cube_dim = dsl::CubeDim{16, 16, 1};  // --cube-dim against the kernel's rule
  auto mismatch = dsl::select(*d, o);
  REQUIRE(mismatch.ok());
  auto traced = dsl::trace(*d, *mismatch->inst, mismatch->request);
  REQUIRE_FALSE(traced.ok());
  CHECK_THAT(traced.error().message, Contains("needs a 32x32x1 cube for tile=32"));
}

TEST_CASE("a recipe rounds its reference to each instantiation's element type", "[plugin]") {
  user_plugin();
  test::ScopedCache cache;
  auto rt = test::open_cpu();
  for (const char* dtype : {"f32", "f16"}) {
    INFO(dtype);
    kernels::RunConfig config;
    config.dtypes["x"] = dtype;
    config.repeat = 0;
    auto r = kernels::run(rt, "third", config);
    INFO((r.ok() ? std::string() : r.error().message));
    REQUIRE(r.ok());
    CHECK(r->has_reference);
    CHECK(r->passed);
  }
  kernels::RunConfig transpose;
  transpose.repeat = 0;
  transpose.set["tile"] = "4";
  auto r = kernels::run(rt, "tile_transpose", transpose);
  INFO((r.ok() ? std::string() : r.error().message));
  REQUIRE(r.ok());
  CHECK(r->cube_dim.array() == Dim3(4, 4, 1).array());
  CHECK(r->passed);
}

TEST_CASE("a plugin that cannot be loaded is an error that says why", "[plugin]") {
  auto missing = load_plugin("/no/such/libkernels.so");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Contains("cannot load plugin '/no/such/libkernels.so'"));
  CHECK_THAT(missing.error().message, Contains("No such file"));
}

}  // namespace
}  // namespace kiln
