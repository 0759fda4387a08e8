// Misuse of the DSL caught at trace time: each bad kernel below marks its faulty line with
// `ERR:name`, and the test checks both the message and that it points at that line.
// (Misuse the C++ type system can see is a compile error: tests/compile_fail/.)
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "tests/compiler/dsl/dsl_test_util.h"

using namespace kiln;
using namespace kiln::dsl;
using Catch::Contains;
using Catch::StartsWith;

namespace {

const char* kFile = "tests/compiler/dsl/test_errors.cpp";

std::string at(const char* marker) {
  return test::marker_loc(kFile, marker) + ": error: ";
}

void e_width(Tensor<f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  y[i] = x[i] + y[i];  // ERR:width
}
KILN_KERNEL(e_width, "x: line=4, y: line=8");

void e_scope(Tensor<f32> y, u32 n) {
  u32 i = absolute_pos();
  u32 j;
  if_(i < n, [&] { j = i + 1u; });
  y[j] = 1.0f;  // ERR:scope
}
KILN_KERNEL(e_scope, "y, n");

void e_barrier(Tensor<f32> y) {
  if_(unit_pos() < 16u, [&] {  // ERR:divergent-if
    sync_cube();               // ERR:barrier
  });
  y[0] = 0.0f;
}
KILN_KERNEL(e_barrier, "y");

void e_plane(Tensor<f32> y) {
  u32 i = absolute_pos();
  Var<f32> v = 0.0f;
  if_(i < 5u, [&] { return_(); });  // ERR:early-return
  v = plane_sum(y[i]);              // ERR:plane
  y[i] = v;
}
KILN_KERNEL(e_plane, "y");

void e_read_only(Tensor<f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  x[i] = y[i];  // ERR:read-only
}
KILN_KERNEL(e_read_only, "x, y");

void e_break(Tensor<f32> y) {
  y[0] = 1.0f;
  break_();  // ERR:break
}
KILN_KERNEL(e_break, "y");

void e_literal(Tensor<u8> y, Tensor<f32> z) {
  u32 i = absolute_pos();
  u8 v = y[i];
  y[i] = v + 300;          // ERR:literal
  z[i] = z[i] * 16777217;  // not reached: the first error wins
}
KILN_KERNEL(e_literal, "y, z");

void e_inexact(Tensor<f32> z) {
  u32 i = absolute_pos();
  z[i] = z[i] * 16777217;  // ERR:inexact
}
KILN_KERNEL(e_inexact, "z");

void e_shared_in_if(Tensor<f32> y) {
  if_(cube_pos() == 0u, [&] {
    auto s = shared_array<f32>(32);  // ERR:shared
    s[0] = 1.0f;
  });
  y[0] = 0.0f;
}
KILN_KERNEL(e_shared_in_if, "y");

void e_else(Tensor<f32> y) {
  u32 i = absolute_pos();
  ElseChain c = if_(i < 4u, [&] { y[i] = 1.0f; });
  y[i + 1u] = 2.0f;
  c.else_([&] { y[i] = 3.0f; });  // ERR:else
}
KILN_KERNEL(e_else, "y");

void e_after_return(Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(i > 3u, [&] {
    return_();
    y[i] = 0.0f;  // ERR:dead
  });
}
KILN_KERNEL(e_after_return, "y");

void e_rank(Tensor<f32> y) {
  u32 i = absolute_pos();
  y(i, i) = 0.0f;  // ERR:rank
}
KILN_KERNEL(e_rank, "y");

void e_unset(Tensor<f32> y) {
  f32 v;
  y[0] = v;  // ERR:unset
}
KILN_KERNEL(e_unset, "y");

void e_line_condition(Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(y[i] > 0.0f, [&] { y[i] = 0.0f; });  // ERR:line-cond
}
KILN_KERNEL(e_line_condition, "y: line=4");

void e_var_width(Tensor<f32> y) {
  u32 i = absolute_pos();
  Var<f32> acc = 0.0f;
  acc = y[i];  // ERR:var-width
  y[i] = acc;
}
KILN_KERNEL(e_var_width, "y: line=4");

void e_dim(Tensor<f32> y) {
  y[0] = cast<f32>(y.shape(2));  // ERR:dim
}
KILN_KERNEL(e_dim, "y");

void e_store_width(Tensor<f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  y[i] = x[i];  // ERR:store-width
}
KILN_KERNEL(e_store_width, "x: line=8, y: line=4");

void e_comptime(Tensor<f32> y, int n) {
  y[0] = cast<f32>(cast<u32>(n));
}
KILN_KERNEL(e_comptime, "y, n = 4");

}  // namespace

void e_cluster_twice(Tensor<f32> y) {
  cluster_dims(2);
  cluster_dims(4);  // ERR:cluster-twice
  y[0] = 0.0f;
}
KILN_KERNEL(e_cluster_twice, "y");

void e_cluster_size(Tensor<f32> y) {
  cluster_dims(4, 4);  // ERR:cluster-size
  y[0] = 0.0f;
}
KILN_KERNEL(e_cluster_size, "y");

TEST_CASE("trace errors say what, where and how to fix it", "[dsl][errors]") {
  SECTION("line widths") {
    CHECK(test::trace_error("e_width") ==
          at("ERR:width") +
              "'+' mixes a line of 4 lanes with a line of 8 lanes; the lines of "
              "one operation must have the same width (a scalar is broadcast)");
  }
  SECTION("a value used outside its region") {
    CHECK_THAT(test::trace_error("e_scope"),
               StartsWith(at("ERR:scope") + "'load' uses a value outside the region") ||
                   StartsWith(at("ERR:scope") + "'store' uses a value outside the region"));
    CHECK_THAT(test::trace_error("e_scope"), Contains("carry it out in a variable (Var)"));
  }
  SECTION("a barrier under unit-dependent control flow") {
    const std::string if_loc = test::marker_loc(kFile, "ERR:divergent-if");
    CHECK(test::trace_error("e_barrier") ==
          at("ERR:barrier") +
              "'sync_cube' is under control flow that differs between the units "
              "of the cube: the condition of the 'if' at " +
              if_loc +
              " depends on the unit. Every unit must reach the same barrier; move it out of that "
              "control flow or make the condition the same for all units");
  }
  SECTION("a plane op after an early return of some units") {
    CHECK_THAT(test::trace_error("e_plane"),
               StartsWith(at("ERR:plane") +
                          "'plane.sum' is under control flow that differs "
                          "between the units of a plane: the 'return' at " +
                          test::marker_loc(kFile, "ERR:early-return")));
  }
  SECTION("writing a tensor passed read-only") {
    dsl::SpecOptions o;
    o.read_only["x"] = true;
    CHECK(test::trace_error("e_read_only", o) ==
          at("ERR:read-only") +
              "tensor 'x' was passed read-only, so it cannot be written; pass "
              "it writable or do not store to it");
    CHECK_THAT(test::trace_error("e_read_only"), StartsWith("(traced)"));
  }
  SECTION("break outside a loop") {
    CHECK(test::trace_error("e_break") ==
          at("ERR:break") + "'break' outside a loop; it must be inside a for/while/loop body");
  }
  SECTION("cluster shapes") {
    CHECK(test::trace_error("e_cluster_twice") ==
          at("ERR:cluster-twice") + "the cluster shape is already 2x1x1; call cluster_dims once");
    CHECK(test::trace_error("e_cluster_size") ==
          at("ERR:cluster-size") + "a cluster of 4x4x1 cubes; use 1 to 8 cubes per cluster");
  }
  SECTION("literals that do not fit") {
    CHECK(test::trace_error("e_literal") == at("ERR:literal") + "literal 300 does not fit in u8");
    CHECK(test::trace_error("e_inexact") ==
          at("ERR:inexact") +
              "integer literal 16777217 is not exactly representable in f32; "
              "write a floating-point literal if rounding is intended");
  }
  SECTION("shared memory inside control flow") {
    CHECK_THAT(test::trace_error("e_shared_in_if"),
               StartsWith(at("ERR:shared") + "'shared_array' must be at the top level"));
  }
  SECTION("else_ not right after its if_") {
    CHECK_THAT(test::trace_error("e_else"),
               StartsWith(at("ERR:else") + "else_ must directly follow its if_"));
  }
  SECTION("code after return_") {
    CHECK_THAT(test::trace_error("e_after_return"),
               StartsWith(at("ERR:dead") + "this code comes after a 'return' in the same block"));
  }
  SECTION("indexing with the wrong number of indices") {
    CHECK(test::trace_error("e_rank") ==
          at("ERR:rank") + "tensor 'y' has rank 1 but is indexed with 2 indices");
  }
  SECTION("a value never assigned") {
    CHECK(test::trace_error("e_unset") ==
          at("ERR:unset") + "a f32 value is used before anything was assigned to it");
  }
  SECTION("a line as a condition") {
    CHECK(test::trace_error("e_line_condition") ==
          at("ERR:line-cond") +
              "if_ needs a single Bool, got a line of 4 lanes; reduce it with "
              "any(c) or all(c)");
  }
  SECTION("a line written into a scalar variable") {
    CHECK(test::trace_error("e_var_width") ==
          at("ERR:var-width") +
              "writing a line of 4 lanes into a Var<f32> of 1 lane; initialise "
              "the Var with a line of that width (splat)");
  }
  SECTION("a tensor dimension out of range") {
    CHECK(test::trace_error("e_dim") ==
          at("ERR:dim") + "dimension 2 is out of range for tensor 'y' of rank 1");
  }
  SECTION("a line stored into memory of another width") {
    CHECK(test::trace_error("e_store_width") ==
          at("ERR:store-width") +
              "storing a line of 8 lanes into tensor 'y', whose lines have 4 "
              "lanes");
  }
}

TEST_CASE("wrong descriptors and comptime values are errors naming the parameter",
          "[dsl][errors]") {
  const dsl::KernelDef* def = dsl::Registry::global().find("e_comptime");
  REQUIRE(def);
  const dsl::Instantiation& inst = def->instantiations[0];
  dsl::TraceRequest req;
  req.args = {dsl::ArgDesc{}};
  req.comptime = {dsl::ComptimeValue::of(4), dsl::ComptimeValue::of(5)};
  auto r = dsl::trace(*def, inst, req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "kernel 'e_comptime' takes 1 comptime value (n), got 2");

  req.comptime = {dsl::ComptimeValue::of(true)};
  r = dsl::trace(*def, inst, req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "kernel 'e_comptime': comptime parameter 'n' takes a int, got bool");

  req.comptime = {dsl::ComptimeValue::of(4)};
  req.args[0].dtype = ir::ElemType::F16;
  r = dsl::trace(*def, inst, req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "kernel 'e_comptime': argument 'y' is f16, but the kernel takes f32");

  req.args[0] = dsl::ArgDesc{};
  req.args[0].line = 3;
  r = dsl::trace(*def, inst, req);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Contains("argument 'y' has line width 3; use 1, 2, 4, 8 or 16"));

  req.args.clear();
  r = dsl::trace(*def, inst, req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "kernel 'e_comptime' takes 1 runtime argument, got 0 descriptors");

  // Options by name: unknown names list the valid ones.
  dsl::SpecOptions o;
  o.set["m"] = "3";
  CHECK(
      test::trace_error("e_comptime", o) ==
      "kernel 'e_comptime' has no comptime parameter 'm' (given a value); its comptime parameters "
      "are: n");
  o = {};
  o.set["n"] = "three";
  CHECK(test::trace_error("e_comptime", o) == "comptime value n=three: 'three' is not a valid int");
  o = {};
  o.line["q"] = 4;
  CHECK(test::trace_error("e_comptime", o) ==
        "kernel 'e_comptime' has no runtime parameter 'q' (given a line width); its runtime "
        "parameters "
        "are: y");
  o = {};
  o.dtype["y"] = "f16";
  CHECK_THAT(test::trace_error("e_comptime", o),
             StartsWith("kernel 'e_comptime' takes no arguments of these element types (y: "
                        "f16); it takes:\n  (y: f32)"));
}
