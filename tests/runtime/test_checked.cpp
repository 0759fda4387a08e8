// Checked mode: every access bounds-checked; the first violation of a launch reported at sync
// with its DSL line, the access skipped so that memory stays intact.
#include <catch2/catch.hpp>

#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;
using ir::ElemType;
using test::kernel;
using test::open_cpu;
using test::to_host;

const char* kKernels = "tests/runtime/runtime_kernels.cpp";

TEST_CASE("an out-of-bounds write is reported with its DSL line; memory around is untouched",
          "[runtime][checked]") {
  test::ScopedCache cache;
  RuntimeOptions o;
  o.checked = true;
  auto rt = open_cpu(o);
  // y is elements [32, 64) of a 128-element buffer full of sentinels.
  Tensor whole = test::f32_tensor(rt, std::vector<float>(128, -7.0f));
  auto y = whole.slice(0, 32, 64);
  REQUIRE(y.ok());
  KILN_REQUIRE_OK(
      rt.launch(kernel(rt, "rt_fill_n"), 1, 64, *y, 64u, 1.0f));  // 32 units write past y
  const Status st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().kind == ErrorKind::KernelFault);
  const std::string& m = st.error().message;
  CHECK_THAT(m, Contains(test::marker_loc(kKernels, "FILL_STORE") +
                         ": error: out-of-bounds store of tensor 'y'"));
  CHECK_THAT(m, Contains("in kernel 'rt_fill_n'") && Contains("line index 32 is not below 32") &&
                    Contains("(cube 0, unit 32)") && Contains("skipped"));
  const auto all = to_host<float>(whole);
  for (size_t i = 0; i < 128; ++i) {
    INFO("element " << i);
    REQUIRE(all[i] == (i >= 32 && i < 64 ? 1.0f : -7.0f));
  }
  // The error is delivered once; an in-bounds launch afterwards is clean.
  KILN_REQUIRE_OK(rt.sync());
  KILN_REQUIRE_OK(rt.launch(kernel(rt, "rt_fill_n"), 1, 64, *y, 32u, 2.0f));
  KILN_REQUIRE_OK(rt.sync());
}

TEST_CASE("the first violation is the lowest cube and unit, over many cubes on many threads",
          "[runtime][checked]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  Tensor y = test::f32_tensor(rt, std::vector<float>(1000, 0.0f));
  LaunchOptions lo;
  lo.checked = true;
  KILN_REQUIRE_OK(rt.launch_with(lo, kernel(rt, "rt_fill_n"), 64, 64, y, 4096u, 1.0f));
  const Status st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("line index 1000 is not below 1000 (cube 15, unit 40)"));
}

TEST_CASE("out-of-bounds reads give zero and are reported", "[runtime][checked]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  std::vector<float> hx(32);
  for (size_t i = 0; i < 32; ++i) hx[i] = static_cast<float>(i + 1);
  Tensor x = test::f32_tensor(rt, hx);
  Tensor y = test::f32_tensor(rt, std::vector<float>(32, -1.0f));
  LaunchOptions lo;
  lo.checked = true;
  KILN_REQUIRE_OK(rt.launch_with(lo, kernel(rt, "rt_shifted_copy"), 1, 32, x, y, 4u));
  const Status st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains(test::marker_loc(kKernels, "SHIFT_LOAD") +
                                          ": error: out-of-bounds load of tensor 'x'") &&
                                     Contains("line index 32 is not below 32 (cube 0, unit 28)"));
  const auto out = to_host<float>(y);
  for (size_t i = 0; i < 32; ++i) REQUIRE(out[i] == (i < 28 ? static_cast<float>(i + 5) : 0.0f));
}

TEST_CASE("shared-memory accesses are checked too", "[runtime][checked]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  Tensor y = test::f32_tensor(rt, std::vector<float>(32, 0.0f));
  LaunchOptions lo;
  lo.checked = true;
  KILN_REQUIRE_OK(rt.launch_with(lo, kernel(rt, "rt_shared_oob"), 1, 32, y, 16));
  const Status st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains(test::marker_loc(kKernels, "SHARED_STORE") +
                                          ": error: out-of-bounds store of a shared array") &&
                                     Contains("line index 16 is not below 16 (cube 0, unit 16)"));
  CHECK(to_host<float>(y) == std::vector<float>(32, 2.0f));  // the rest of the kernel ran
}

TEST_CASE("checked and unchecked launches are separate specializations", "[runtime][checked]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  Tensor y = test::f32_tensor(rt, std::vector<float>(64, 0.0f));
  auto k = kernel(rt, "rt_fill_n");
  const CacheStats before = cache_stats();
  KILN_REQUIRE_OK(rt.launch(k, 1, 48, y, 48u, 1.0f));  // 48 units: a size no other test uses
  LaunchOptions lo;
  lo.checked = true;
  KILN_REQUIRE_OK(rt.launch_with(lo, k, 1, 48, y, 48u, 1.0f));
  const CacheStats after = cache_stats();
  CHECK(after.compiles - before.compiles == 2);
  KILN_REQUIRE_OK(rt.sync());
}

}  // namespace
}  // namespace kiln
