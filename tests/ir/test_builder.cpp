// Builder: builds valid kernels and reports misuse at the op's source location.
#include <catch2/catch.hpp>

#include "ir/builder.h"
#include "ir/printer.h"

using namespace kiln;
using namespace kiln::ir;

TEST_CASE("build axpy and print it", "[ir][builder]") {
  Builder b("axpy");
  const SourceLoc at = b.loc("axpy.cpp", 3);
  const ValueId x = b.param("x", Type::tensor(ElemType::F32, 4, 1, true));
  const ValueId y = b.param("y", Type::tensor(ElemType::F32, 4, 1, false));
  const ValueId a = b.param("a", Type::value(ElemType::F32));
  b.set_cube_dim(64, 1, 1);
  const ValueId i = b.op(OpKind::AbsolutePos, {}, at);
  const ValueId n = b.op(OpKind::Len, {y}, at);
  const ValueId c = b.op(OpKind::Lt, {i, n}, at);
  b.begin_if(c, b.loc("axpy.cpp", 4));
  const ValueId xv = b.op(OpKind::Load, {x, i}, at);
  const ValueId yv = b.op(OpKind::Load, {y, i}, at);
  const ValueId av = b.op(OpKind::Broadcast, {a}, at, Type::value(ElemType::F32, 4));
  const ValueId r = b.op(OpKind::Fma, {av, xv, yv}, at);
  b.op(OpKind::Store, {y, i, r}, at);
  b.end_if();
  auto k = std::move(b).finish();
  REQUIRE(k.ok());
  CHECK(
      print(*k) ==
      "file #1 \"axpy.cpp\"\n"
      "kernel @axpy(%x: tensor<f32x4, 1, ro>, %y: tensor<f32x4, 1>, %a: f32) cube_dim(64, 1, 1) {\n"
      "  %0 = absolute_pos : u32                               loc(#1:3)\n"
      "  %1 = len %y : u32                                     loc(#1:3)\n"
      "  %2 = lt %0, %1 : bool                                 loc(#1:3)\n"
      "  if %2 loc(#1:4) {\n"
      "    %3 = load %x, %0 : f32x4                            loc(#1:3)\n"
      "    %4 = load %y, %0 : f32x4                            loc(#1:3)\n"
      "    %5 = broadcast %a : f32x4                           loc(#1:3)\n"
      "    %6 = fma %5, %3, %4 : f32x4                         loc(#1:3)\n"
      "    store %y, %0, %6                                    loc(#1:3)\n"
      "  }\n"
      "}\n");
}

TEST_CASE("builder errors name the source line", "[ir][builder]") {
  SECTION("type mismatch") {
    Builder b("k");
    const ValueId f = b.param("f", Type::value(ElemType::F32));
    const ValueId i = b.param("i", Type::value(ElemType::I32));
    CHECK(b.op(OpKind::Add, {f, i}, b.loc("k.cpp", 12)) == kNoValue);
    CHECK_FALSE(b.ok());
    // Later ops are ignored; the first error is the one reported.
    CHECK(b.op(OpKind::Neg, {f}, b.loc("k.cpp", 13)) == kNoValue);
    auto k = std::move(b).finish();
    REQUIRE_FALSE(k.ok());
    CHECK(k.error().message ==
          "k.cpp:12: error: the operands of 'add' must have the same type, got f32 and i32; "
          "insert a cast or broadcast");
  }
  SECTION("a value used outside its region") {
    Builder b("k");
    const ValueId c = b.param("c", Type::value(ElemType::Bool));
    b.begin_if(c, b.loc("k.cpp", 1));
    const ValueId p = b.op(OpKind::UnitPos, {}, b.loc("k.cpp", 2));
    b.end_if();
    b.op(OpKind::Neg, {p}, b.loc("k.cpp", 4));
    auto k = std::move(b).finish();
    REQUIRE_FALSE(k.ok());
    CHECK_THAT(k.error().message,
               Catch::StartsWith("k.cpp:4: error: 'neg' uses a value outside the region"));
  }
  SECTION("code after a jump") {
    Builder b("k");
    b.begin_loop(b.loc("k.cpp", 1));
    b.op(OpKind::Break, {}, b.loc("k.cpp", 2));
    b.op(OpKind::SyncCube, {}, b.loc("k.cpp", 3));
    b.end_loop();
    auto k = std::move(b).finish();
    REQUIRE_FALSE(k.ok());
    CHECK(k.error().message ==
          "k.cpp:3: error: this code comes after a 'break' in the same "
          "block and would never run; remove it or move it before the "
          "'break'");
  }
  SECTION("break outside a loop") {
    Builder b("k");
    b.op(OpKind::Break, {}, b.loc("k.cpp", 7));
    auto k = std::move(b).finish();
    REQUIRE_FALSE(k.ok());
    CHECK_THAT(k.error().message, Catch::StartsWith("k.cpp:7: error: 'break' outside a loop"));
  }
  SECTION("shared memory inside control flow") {
    Builder b("k");
    const ValueId c = b.param("c", Type::value(ElemType::Bool));
    b.begin_if(c, b.loc("k.cpp", 1));
    b.op(OpKind::AllocShared, {}, b.loc("k.cpp", 2), Type::shared(ElemType::F32, 1, 32));
    b.end_if();
    auto k = std::move(b).finish();
    REQUIRE_FALSE(k.ok());
    CHECK_THAT(k.error().message, Catch::Contains("k.cpp:2: error: 'shared_array' must be at the "
                                                  "top level"));
  }
  SECTION("unclosed regions") {
    Builder b("k");
    b.begin_loop(b.loc("k.cpp", 1));
    auto k = std::move(b).finish();
    REQUIRE_FALSE(k.ok());
    CHECK_THAT(k.error().message, Catch::Contains("never closed"));
  }
  SECTION("a barrier under unit-dependent control is caught when finishing") {
    Builder b("k");
    const ValueId n = b.param("n", Type::value(ElemType::U32));
    const ValueId p = b.op(OpKind::UnitPos, {}, b.loc("k.cpp", 1));
    const ValueId c = b.op(OpKind::Lt, {p, n}, b.loc("k.cpp", 2));
    b.begin_if(c, b.loc("k.cpp", 3));
    b.op(OpKind::SyncCube, {}, b.loc("k.cpp", 4));
    b.end_if();
    auto k = std::move(b).finish();
    REQUIRE_FALSE(k.ok());
    CHECK_THAT(k.error().message,
               Catch::StartsWith("k.cpp:4: error: 'sync_cube' is under control flow that differs "
                                 "between the units of the cube: the condition of the 'if' at "
                                 "k.cpp:3 depends on the unit"));
  }
}

TEST_CASE("constants are checked and rounded", "[ir][builder]") {
  Builder b("k");
  const SourceLoc at = b.loc("k.cpp", 1);
  const ValueId h = b.const_float(Type::value(ElemType::F16), 0.1, at);
  REQUIRE(b.ok());
  CHECK(b.kernel().body.ops[0].attr.f == 0.0999755859375);
  CHECK(b.type_of(h) == Type::value(ElemType::F16));
  b.const_int(Type::value(ElemType::I8), 200, at);
  CHECK_FALSE(b.ok());
  CHECK_THAT(b.error()->message, Catch::Contains("constant 200 is out of range for i8"));
}

TEST_CASE("for loops define their induction variable", "[ir][builder]") {
  Builder b("k");
  const SourceLoc at = b.loc("k.cpp", 1);
  const ValueId out = b.param("out", Type::array(ElemType::U32, 1, false));
  const ValueId z = b.const_uint(Type::value(ElemType::U32), 0, at);
  const ValueId one = b.const_uint(Type::value(ElemType::U32), 1, at);
  const ValueId n = b.op(OpKind::Len, {out}, at);
  const ValueId i = b.begin_for(z, n, one, 4, at);
  CHECK(b.loop_depth() == 1);
  b.op(OpKind::Store, {out, i, i}, at);
  b.end_for();
  auto k = std::move(b).finish();
  REQUIRE(k.ok());
  CHECK_THAT(print(*k), Catch::Contains("for %3 = %0 to %2 step %1 unroll 4 loc(#1:1) {\n"
                                        "    store %out, %3, %3"));
}
