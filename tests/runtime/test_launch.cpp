// Launching registered kernels: argument checks, line widths, instantiations, comptime values,
// streams and events, errors as values.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;
using ir::ElemType;
using test::kernel;
using test::open_cpu;
using test::to_host;

std::vector<float> iota_f(size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST_CASE("axpy through the runtime, with the widest line the tensors allow", "[runtime][launch]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  const size_t n = 4096;
  Tensor x = test::f32_tensor(rt, iota_f(n));
  Tensor y = test::f32_tensor(rt, std::vector<float>(n, 1.0f));
  const int w = rt.line_width({&x, &y});
  CHECK(w == rt.device().vector_bits / 32);
  auto axpy = kernel(rt, "axpy");
  KILN_REQUIRE_OK(rt.launch(axpy, static_cast<uint32_t>(n / w / 256), 256, x, y, 2.0f));
  KILN_REQUIRE_OK(rt.sync());
  const auto out = to_host<float>(y);
  for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == 2.0f * static_cast<float>(i) + 1.0f);
}

TEST_CASE("line_width: the widest that divides the innermost dimension and the alignment",
          "[runtime][launch]") {
  auto rt = open_cpu();
  const int max32 = rt.device().vector_bits / 32;
  auto t = rt.empty(ElemType::F32, {4, 64});
  REQUIRE(t.ok());
  CHECK(rt.line_width(*t) == max32);
  auto odd = rt.empty(ElemType::F32, {4, 6});
  REQUIRE(odd.ok());
  CHECK(rt.line_width(*odd) == 2);
  auto shifted = t->slice(1, 1, 61);  // pointer 4 bytes past a 64-byte boundary
  REQUIRE(shifted.ok());
  CHECK(rt.line_width(*shifted) == 1);
  auto cols = t->slice(1, 0, 64, 2);  // strided innermost dimension
  REQUIRE(cols.ok());
  CHECK(rt.line_width(*cols) == 1);
  auto f64 = rt.empty(ElemType::F64, {64});
  REQUIRE(f64.ok());
  CHECK(rt.line_width(*f64) == rt.device().vector_bits / 64);
  CHECK(rt.line_width({&*t, &*odd}) == 2);
}

TEST_CASE("a launch picks the instantiation by element type, and comptime values",
          "[runtime][launch]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  auto affine = kernel(rt, "rt_affine");
  {
    Tensor x = test::tensor_from(rt, ElemType::F64, std::vector<double>{1, 2, 3, 4}, {4});
    Tensor y = test::tensor_from(rt, ElemType::F64, std::vector<double>(4, 0.0), {4});
    KILN_REQUIRE_OK(rt.launch(affine, 1, 64, x, y, 0.5, 10));
    CHECK(to_host<double>(y) == std::vector<double>{10.5, 11, 11.5, 12});
  }
  {
    Tensor x =
        test::tensor_from(rt, ElemType::I32, std::vector<int32_t>{1, -2, 3, 4, 5, 6, 7, 8}, {8});
    Tensor y = test::tensor_from(rt, ElemType::I32, std::vector<int32_t>(8, 0), {8});
    KILN_REQUIRE_OK(rt.launch(affine, 1, 64, x, y, 3, -1));
    CHECK(to_host<int32_t>(y) == std::vector<int32_t>{2, -7, 8, 11, 14, 17, 20, 23});
    // A comptime value of another integer type is converted when it fits.
    KILN_REQUIRE_OK(rt.launch(affine, 1, 64, x, y, 3, int64_t{0}));
    CHECK(to_host<int32_t>(y)[1] == -6);
  }
  {
    Tensor x = test::tensor_from(rt, ElemType::F16, std::vector<uint16_t>(4, 0), {4});
    Tensor y = test::tensor_from(rt, ElemType::F16, std::vector<uint16_t>(4, 0), {4});
    auto st = rt.launch(affine, 1, 64, x, y, 1.0f, 0);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains("takes no arguments of these element types (x: f16, y: f16)") &&
                   Contains("x: f32"));
  }
}

TEST_CASE("argument errors name the parameter and the fix", "[runtime][launch][errors]") {
  auto rt = open_cpu();
  auto fill = kernel(rt, "rt_fill_n");
  Tensor y = test::f32_tensor(rt, std::vector<float>(64, 0.0f));
  auto err = [](const Status& s) { return s.ok() ? std::string("(no error)") : s.error().message; };

  CHECK_THAT(err(rt.launch(fill, 1, 64, y, 8u)),
             Contains("takes 3 arguments (y, n, value), got 2"));
  CHECK_THAT(err(rt.launch(fill, 1, 64, 1.0f, 8u, 1.0f)),
             Contains("argument 'y': the kernel takes a tensor"));
  CHECK_THAT(err(rt.launch(fill, 1, 64, y, y, 1.0f)),
             Contains("argument 'n': the kernel takes a number here (u32)"));
  CHECK_THAT(err(rt.launch(fill, 1, 64, y, -1, 1.0f)),
             Contains("argument 'n': -1 does not fit in u32"));
  CHECK_THAT(err(rt.launch(fill, 1, 64, y, 8u, true)),
             Contains("argument 'value': it is f32 and takes a number, not a bool"));
  CHECK_THAT(err(rt.launch(fill, 1, 64, y, 1.5f, 1.0f)),
             Contains("argument 'n': it is u32 and takes an integer"));
  CHECK_THAT(err(rt.launch(fill, 1, 64, y, 8u, 16777217)),
             Contains("not exactly representable in f32"));
  CHECK_THAT(err(rt.launch(fill, 1, 64, y, 8u, 1e300)), Contains("out of range for f32"));
  CHECK_THAT(err(rt.launch(fill, 0, 64, y, 8u, 1.0f)), Contains("each count must be at least 1"));
  CHECK_THAT(err(rt.launch(fill, 1, Dim3(64, 64, 64), y, 8u, 1.0f)), Contains("units per cube"));
  CHECK_THAT(err(rt.launch(Kernel(), 1, 64, y, 8u, 1.0f)), Contains("empty Kernel handle"));

  // A tensor with the wrong element type or on a read-only view where the kernel writes.
  Tensor yi = test::tensor_from(rt, ElemType::I32, std::vector<int32_t>(4, 0), {4});
  CHECK_THAT(err(rt.launch(fill, 1, 64, yi, 4u, 1.0f)), Contains("y: i32"));
  const Status ro = rt.launch(fill, 1, 64, y.as_read_only(), 4u, 1.0f);
  CHECK_THAT(err(ro), Contains("tensor 'y' was passed read-only"));
  CHECK_THAT(err(ro), Contains("runtime_kernels.cpp:"));

  // Line widths that do not fit the tensor.
  auto axpy = kernel(rt, "axpy");
  Tensor x6 = test::f32_tensor(rt, std::vector<float>(6, 0.0f));
  Tensor y6 = test::f32_tensor(rt, std::vector<float>(6, 0.0f));
  LaunchOptions o;
  o.lines = {{"x", 4}, {"y", 4}};
  CHECK_THAT(
      err(rt.launch_with(o, axpy, 1, 256, x6, y6, 1.0f)),
      Contains("argument 'x': f32[6] cannot be read in lines of 4") && Contains("line_width"));
  o.lines = {{"x", 3}};
  CHECK_THAT(err(rt.launch_with(o, axpy, 1, 256, x6, y6, 1.0f)),
             Contains("line width 3 is not 1, 2, 4, 8 or 16"));
  // A width for a name that is no tensor parameter (misspelt, or a scalar's) is refused, not
  // ignored.
  for (const char* name : {"xx", "a"}) {
    o.lines = {{name, 4}};
    CHECK_THAT(err(rt.launch_with(o, axpy, 1, 256, x6, y6, 1.0f)),
               Contains(fmt::format("lines names '{}', which is not a tensor parameter", name)));
  }

  // Unknown kernels list what exists.
  auto missing = rt.kernel("axpyy");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Contains("no kernel named 'axpyy'") && Contains("axpy") &&
                                          Contains("kiln_add_kernels"));

  // A rank the kernel cannot take.
  auto copy2d = kernel(rt, "rt_copy2d");
  CHECK_THAT(err(rt.launch(copy2d, 1, 32, y, y)), Contains("rank"));
}

TEST_CASE("strided views launch with their strides", "[runtime][launch]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  std::vector<float> host = iota_f(8 * 16);
  Tensor x = test::tensor_from(rt, ElemType::F32, host, {8, 16});
  Tensor y = test::tensor_from(rt, ElemType::F32, std::vector<float>(16 * 8, -1.0f), {16, 8});
  auto xt = x.transpose(0, 1);  // 16 x 8, strides (1, 16)
  REQUIRE(xt.ok());
  KILN_REQUIRE_OK(rt.launch(kernel(rt, "rt_copy2d"), 16, 32, *xt, y));
  const auto out = to_host<float>(y);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c)
      REQUIRE(out[static_cast<size_t>(r * 8 + c)] == host[static_cast<size_t>(c * 16 + r)]);
}

TEST_CASE("prints arrive at sync in order; a failed assert is an error of sync",
          "[runtime][launch]") {
  test::ScopedCache cache;
  std::vector<std::string> lines;
  RuntimeOptions o;
  o.print = [&](const std::string& s) { lines.push_back(s); };
  auto rt = open_cpu(o);
  auto k = kernel(rt, "rt_print_assert");
  Tensor x = test::f32_tensor(rt, {1.5f, 2.5f, 3.5f, 4.5f});
  KILN_REQUIRE_OK(rt.launch(k, 1, 4, x));
  CHECK(lines.empty());  // delivered at sync, not before
  KILN_REQUIRE_OK(rt.sync());
  CHECK(lines == std::vector<std::string>{"unit 0 sees 1.5", "unit 1 sees 2.5", "unit 2 sees 3.5"});

  lines.clear();
  Tensor bad = test::f32_tensor(rt, {1.0f, 2.0f, -3.0f, 4.0f});
  KILN_REQUIRE_OK(rt.launch(k, 1, 4, bad));  // the launch itself succeeds
  const Status st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().kind == ErrorKind::KernelFault);
  CHECK_THAT(st.error().message,
             Contains("runtime_kernels.cpp:") &&
                 Contains("assertion failed in kernel 'rt_print_assert': x must not be negative") &&
                 Contains("unit 2"));
  CHECK(lines.size() == 3);    // the prints of the failing launch still arrive
  KILN_REQUIRE_OK(rt.sync());  // the error was delivered once
}

TEST_CASE("streams keep their own errors; events time what ran between them", "[runtime][launch]") {
  test::ScopedCache cache;
  RuntimeOptions o;
  o.print = [](const std::string&) {};
  auto rt = open_cpu(o);
  Stream s1 = rt.new_stream().value(), s2 = rt.new_stream().value();
  auto k = kernel(rt, "rt_print_assert");
  Tensor bad = test::f32_tensor(rt, {-1.0f, 2.0f, 3.0f, 4.0f});
  LaunchOptions lo;
  lo.stream = &s1;
  const Event e0 = rt.record(s1).value();
  KILN_REQUIRE_OK(rt.launch_with(lo, k, 1, 4, bad));
  const Event e1 = rt.record(s1).value();
  CHECK(Event::elapsed_ms(e0, e1).value() >= 0);
  KILN_REQUIRE_OK(rt.wait(s2, e1));
  CHECK_FALSE(rt.record(Stream()).ok());
  KILN_REQUIRE_OK(rt.sync(s2));
  KILN_REQUIRE_OK(rt.sync());
  CHECK_FALSE(rt.sync(s1).ok());
  CHECK(rt.sync(s1).ok());
  CHECK_FALSE(rt.sync(Stream()).ok());
  // A stream of another Runtime is refused by every call that takes one, before any work.
  auto other = open_cpu(o);
  auto synced = other.sync(s1), waited = other.wait(s1, e1);
  auto recorded = other.record(s2);
  REQUIRE_FALSE((synced.ok() || waited.ok() || recorded.ok()));
  for (const Error& e : {synced.error(), waited.error(), recorded.error()})
    CHECK_THAT(e.message, Contains("on a stream of another Runtime (cpu)"));
  lo.stream = &s2;
  Tensor fine = test::f32_tensor(other, {1.0f});
  CHECK_THAT(other.launch_with(lo, kernel(other, "rt_print_assert"), 1, 1, fine).error().message,
             Contains("launch on a stream of another Runtime"));
}

TEST_CASE("a kernel that fails to trace fails its launch with the DSL line",
          "[runtime][launch][errors]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  auto k = kernel(rt, "rt_shared_oob");
  Tensor y = test::f32_tensor(rt, std::vector<float>(32, 0.0f));
  // size=0 makes a shared array of no elements: a trace error that names the line.
  auto st = rt.launch(k, 1, 32, y, 0);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("runtime_kernels.cpp:"));
  // The same key fails the same way without tracing again; other keys still work.
  auto again = rt.launch(k, 1, 32, y, 0);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message == st.error().message);
  KILN_REQUIRE_OK(rt.launch(k, 1, 32, y, 32));
}

TEST_CASE("cache counters: one compile, then memory hits", "[runtime][launch][cache]") {
  test::ScopedCache cache;
  auto rt = open_cpu();
  auto k = kernel(rt, "rt_tiny");
  Tensor y = test::f32_tensor(rt, {0.0f, 0.0f});
  const CacheStats before = cache_stats();
  for (int i = 0; i < 10; ++i) KILN_REQUIRE_OK(rt.launch(k, 1, 1, y, 1.0f, 1u));
  const CacheStats after = cache_stats();
  CHECK(after.compiles + after.disk_hits - before.compiles - before.disk_hits == 1);
  CHECK(after.memory_hits - before.memory_hits == 9);
  CHECK(to_host<float>(y) == std::vector<float>{0.0f, 10.0f});
  // Another cube size is another specialization.
  KILN_REQUIRE_OK(rt.launch(k, 1, 2, y, 1.0f, 0u));
  CHECK(cache_stats().compiles + cache_stats().disk_hits - before.compiles - before.disk_hits == 2);
}

}  // namespace
}  // namespace kiln
