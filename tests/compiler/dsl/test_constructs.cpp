// Every DSL construct traced, with the IR it produces checked.
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "tests/compiler/dsl/dsl_test_util.h"

using namespace kiln;
using namespace kiln::dsl;
using Catch::Contains;
using kiln::test::traced_ir;

namespace {

const char* kFile = "tests/compiler/dsl/test_constructs.cpp";

// ---- arithmetic, literals, broadcasting ----
void t_arith(Tensor<f32> y, Tensor<const i32> n, f32 a, u32 k) {
  u32 i = absolute_pos();
  f32 v = y[i];
  f32 w = (v + a) * 2 - v / 4.0f + (-v);  // literals adapt to f32; the scalar a broadcasts
  y[i] = w % 3.0f;                        // MARK:rem
  i32 m = n[i];
  i32 bits = ((m & 0xff) | (m ^ 7)) << 2 >> 1;
  i32 neg = ~bits;
  Bool c = (i < k) && !(i == 3u) || (m >= 0);
  y[i + 1] = select(c, w, 0.0f);
  (void)neg;
}
KILN_KERNEL(t_arith, "y: line=4, n, a, k");

TEST_CASE("arithmetic, bitwise and logical operators", "[dsl]") {
  const std::string ir = traced_ir("t_arith");
  CHECK_THAT(ir, Contains("%y: tensor<f32x4, 1>, %n: tensor<i32, 1, ro>, %a: f32, %k: u32"));
  CHECK_THAT(ir, Contains("= broadcast %a : f32x4"));
  CHECK_THAT(ir, Contains("= const 2.0 : f32x4"));  // literal adapts to the line
  CHECK_THAT(ir, Contains("= const 4.0 : f32x4"));
  for (const char* op : {"add", "mul", "sub", "div", "neg", "rem", "and", "or", "xor", "shl", "shr",
                         "not", "lt", "eq", "ge", "select"})
    CHECK_THAT(ir, Contains(std::string(" = ") + op + " "));
  CHECK_THAT(ir, Contains("= const 255 : i32"));
  // Locations point into this file.
  CHECK_THAT(ir, Contains(std::string("file #1 \"") + kFile + "\""));
  const std::string rem_line = test::marker_loc(kFile, "MARK:rem");
  const std::string rem_at = "loc(#1:" + rem_line.substr(rem_line.rfind(':') + 1) + ")";
  const size_t rem = ir.find(" = rem ");
  REQUIRE(rem != std::string::npos);
  CHECK(ir.substr(rem, ir.find('\n', rem) - rem).find(rem_at) != std::string::npos);
}

// ---- casts, lines, math ----
void t_convert(Tensor<const f32> x, Tensor<f16> h, Tensor<u32> u) {
  u32 i = absolute_pos();
  f32 v = x[i];
  h[i] = cast<f16>(v);
  u[i] = bitcast<u32>(v) + cast<u32>(floor(abs(v)));
  f32 s = splat<f32>(1.5f, 4);
  f32 e = extract(s, 2);
  f32 t = insert(s, 0, e);
  f32 m = sqrt(v) + rsqrt(v) + exp(v) + exp2(v) + log(v) + log2(v) + sin(v) + cos(v) + tanh(v) +
          pow(v, 2.0f) + ceil(v) + round(v) + trunc(v) + min(v, 1.0f) + max(0.0f, v) +
          clamp(v, -1, 1) + fma(v, v, 1.0f);
  Bool bad = is_nan(m) || is_inf(m);
  if_(bad, [&] { u[i] = 0u; });
  f32 total = line_sum(t) + line_max(t) + line_min(t);
  u[i + 1] = cast<u32>(total);
}
KILN_KERNEL(t_convert, "x, h, u");

TEST_CASE("casts, bitcasts, lines and math functions", "[dsl]") {
  const std::string ir = traced_ir("t_convert");
  CHECK_THAT(ir, Contains("= cast %1 : f16"));
  CHECK_THAT(ir, Contains("= bitcast %1 : u32"));
  CHECK_THAT(ir, Contains("= const 1.5 : f32x4"));
  CHECK_THAT(ir, Contains("= extract "));
  CHECK_THAT(ir, Contains("= insert "));
  for (const char* op :
       {"sqrt", "rsqrt", "exp",   "exp2", "log", "log2",  "sin", "cos", "tanh",   "pow",   "floor",
        "ceil", "round", "trunc", "min",  "max", "clamp", "fma", "abs", "is_nan", "is_inf"})
    CHECK_THAT(ir, Contains(std::string(" = ") + op + " "));
  CHECK_THAT(ir, Contains("= const -1.0 : f32"));  // integer literal, exactly representable
}

// ---- builtins ----
void t_builtins(Array<u32> out) {
  u32 s = unit_pos() + unit_pos_x() + unit_pos_y() + unit_pos_z() + cube_pos() + cube_pos_x() +
          cube_pos_y() + cube_pos_z() + absolute_pos() + absolute_pos_x() + absolute_pos_y() +
          absolute_pos_z() + cube_dim() + cube_dim_x() + cube_dim_y() + cube_dim_z() +
          cube_count() + cube_count_x() + cube_count_y() + cube_count_z() + plane_dim() +
          plane_lane() + plane_pos();
  out[absolute_pos()] = s;
}
KILN_KERNEL(t_builtins, "out");

TEST_CASE("position builtins", "[dsl]") {
  const std::string ir = traced_ir("t_builtins");
  for (const char* b : {"unit_pos", "cube_pos", "absolute_pos", "cube_dim", "cube_count"}) {
    CHECK_THAT(ir, Contains(std::string("= ") + b + " : u32"));
    for (const char* axis : {" x", " y", " z"})
      CHECK_THAT(ir, Contains(std::string("= ") + b + axis + " : u32"));
  }
  CHECK_THAT(ir, Contains("= plane_dim : u32"));
  CHECK_THAT(ir, Contains("= plane_lane : u32"));
  CHECK_THAT(ir, Contains("= plane_pos : u32"));
  CHECK_THAT(ir, Contains("%out: array<u32>"));
}

// ---- control flow ----
void t_control(Tensor<i32> y, u32 n) {
  u32 i = absolute_pos();
  Var<i32> acc = 0;
  if_(i < n, [&] { acc = 1; }).else_if_(i == n, [&] { acc = 2; }).else_([&] { acc = 3; });
  for_range(0u, n, [&](u32 j) { acc += cast<i32>(j); });
  for_range(n, 0u, 2u, [&](u32 j) {
    if_(j == 4u, [&] { continue_(); });
    acc -= 1;
  });
  for_range(0, 8, 1, unroll(4), [&](i32 j) { acc *= j; });
  for_range(0u, 4u, 1u, unroll_full, [&](u32) { acc ^= 1; });
  Var<u32> k = 0u;
  while_([&] { return k < n; }, [&] { k += 1u; });
  loop([&] {
    k -= 1u;
    if_(k == 0u, [&] { break_(); });
  });
  if_(i >= n, [&] { return_(); });
  y[i] = acc;
}
KILN_KERNEL(t_control, "y, n");

TEST_CASE("if/else_if/else, for_range, while_, loop, break, continue, return", "[dsl]") {
  const std::string ir = traced_ir("t_control");
  CHECK_THAT(ir, Contains("} else {\n    %"));
  CHECK_THAT(ir, Contains("      %"));  // else_if_ nests an if inside the else
  CHECK_THAT(ir, Contains("step %"));
  CHECK_THAT(ir, Contains("unroll 4"));
  CHECK_THAT(ir, Contains("unroll full"));
  CHECK_THAT(ir, Contains("continue"));
  CHECK_THAT(ir, Contains("break"));
  CHECK_THAT(ir, Contains("return"));
  CHECK_THAT(ir, Contains("loop loc("));
  CHECK_THAT(ir, Contains(" = var.read "));
  CHECK_THAT(ir, Contains("var.write "));
  // The i32 loop counts in i32 (the lambda's parameter type).
  CHECK_THAT(ir, Contains("= const 8 : i32"));
}

// ---- memory: shared, local, tensors with rank and lines, atomics ----
void t_memory(Tensor<f32> m, Array<u32> hist, Array<f64> acc) {
  auto tile = shared_array<f32>(64, 4);
  auto priv = local_array<i32>(8);
  u32 r = cube_pos_y();
  u32 c = unit_pos_x();
  tile[c] = m(r, c);
  priv[0] = 5;
  priv[1] += priv[0];
  sync_cube();
  m(r, c) = tile[63u - c] * 2.0f;
  u32 old = atomic_add(hist[c], 1u);
  atomic_min(hist[0], old);
  atomic_max(hist[1], old);
  atomic_exchange(hist[2], old);
  atomic_cas(hist[3], 0u, old);
  atomic_add(acc[0], 0.5);
  m(r, c) += cast<f32>(m.shape(0) + m.stride(1) + m.len() + tile.len()) * 0.0f;
}
KILN_KERNEL(t_memory, "m: rank=2 line=4, hist, acc").cube_dim(64);

TEST_CASE("shared and local arrays, multi-dimensional indexing, atomics", "[dsl]") {
  const std::string ir = traced_ir("t_memory");
  CHECK_THAT(ir, Contains("= alloc.shared : shared<f32x4, 64>"));
  CHECK_THAT(ir, Contains("= alloc.local : local<i32, 8>"));
  CHECK_THAT(ir, Contains("%m: tensor<f32x4, 2>"));
  CHECK_THAT(ir, Contains("= stride %m, 0 : u32"));
  CHECK_THAT(ir, Contains("= const 4 : u32"));  // outer offset in elements / line width
  CHECK_THAT(ir, Contains("sync_cube"));
  for (const char* op : {"atomic.add", "atomic.min", "atomic.max", "atomic.exchange", "atomic.cas"})
    CHECK_THAT(ir, Contains(std::string("= ") + op + " %hist"));
  CHECK_THAT(ir, Contains("= atomic.add %acc, %"));
  CHECK_THAT(ir, Contains("= shape %m, 0 : u32"));
  CHECK_THAT(ir, Contains("= len %m : u32"));
}

// ---- plane ops, print and assert ----
void t_plane(Tensor<const f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  f32 v = x[i];
  f32 s = plane_sum(v) + plane_min(v) + plane_max(v) + plane_broadcast(v, 0u) +
          plane_shuffle(v, plane_lane()) + plane_shuffle_xor(v, 1u);
  Bool any_pos = plane_any(v > 0.0f) && plane_all(v < 100.0f);
  sync_plane();
  print("unit {} has {} (any positive: {})", i, s, any_pos);
  assert_(s == s, "no NaN in the sums");
  y[i] = s;
}
KILN_KERNEL(t_plane, "x, y");

TEST_CASE("plane operations, print and assert", "[dsl]") {
  const std::string ir = traced_ir("t_plane");
  for (const char* op : {"plane.sum", "plane.min", "plane.max", "plane.broadcast", "plane.shuffle",
                         "plane.shuffle_xor", "plane.any", "plane.all"})
    CHECK_THAT(ir, Contains(std::string("= ") + op + " "));
  CHECK_THAT(ir, Contains("sync_plane"));
  CHECK_THAT(ir, Contains("print \"unit {} has {} (any positive: {})\", %"));
  CHECK_THAT(ir, Contains("assert %"));
  CHECK_THAT(ir, Contains("\"no NaN in the sums\""));
}

// ---- helpers, templates and comptime types ----
enum class Op { Add, Mul };
KILN_COMPTIME_ENUM(Op, Add, Mul)
struct Tile {
  int m = 0;
  int n = 0;
  bool transposed = false;
};
KILN_COMPTIME_STRUCT(Tile, m, n, transposed)

template <class T>
T combine(T a, T b, Op op) {  // a helper: a plain C++ function, inlined when traced
  return op == Op::Add ? T(a + b) : T(a * b);
}

template <class T>
void t_generic(Tensor<T> x, Op op, Tile tile, int scale) {
  u32 i = absolute_pos();
  T v = x[i];
  for (int k = 0; k < tile.m; ++k) v = combine<T>(v, v, op);  // comptime loop
  if (tile.transposed) v = v * scale;
  x[i] = v;
}
KILN_KERNEL_GENERIC(t_generic, "x, op = Add, tile = {m=2, n=1, transposed=false}, scale = 3", f32,
                    f16, i64);

TEST_CASE("helpers, generic kernels and comptime enums and structs", "[dsl]") {
  std::string ir = traced_ir("t_generic");
  CHECK_THAT(ir, Contains("%x: tensor<f32, 1>"));
  CHECK(std::count(ir.begin(), ir.end(), '\n') > 0);
  CHECK_THAT(ir, Contains("= add "));
  CHECK_THAT(ir, !Contains("= mul "));

  dsl::SpecOptions o;
  o.dtype["x"] = "f16";
  o.set["op"] = "Mul";
  o.set["tile"] = "{m=3, n=1, transposed=true}";
  ir = traced_ir("t_generic", o);
  CHECK_THAT(ir, Contains("%x: tensor<f16, 1>"));
  CHECK_THAT(ir, Contains("= const 3.0 : f16"));  // the int comptime literal adapts to f16
  o.dtype["x"] = "i64";
  ir = traced_ir("t_generic", o);
  CHECK_THAT(ir, Contains("= const 3 : i64"));
}

}  // namespace
