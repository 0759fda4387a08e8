// CSE and dead-code elimination, tested directly on IR text: what merges, what must not, what
// goes, and that an unchanged kernel says so.
#include <catch2/catch.hpp>

#include "compiler/passes/cse.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace kiln;

namespace {

ir::Kernel parsed(const std::string& body, const std::string& params = "%y: array<f32>") {
  auto k = ir::parse("kernel @k(" + params + ") cube_dim(32, 1, 1) {\n" + body + "}\n", "t.kir");
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  REQUIRE(ir::verify(*k).ok());
  return std::move(*k);
}

size_t count(const ir::Kernel& k, ir::OpKind kind) {
  size_t n = 0;
  ir::walk(k.body, [&](const ir::Op& op) { n += op.kind == kind; });
  return n;
}

}  // namespace

TEST_CASE("cse merges repeated pure ops and renames their uses", "[passes][cse]") {
  ir::Kernel k = parsed(R"(  %0 = unit_pos x : u32
  %1 = const 2.0 : f32
  %2 = const 2.0 : f32
  %3 = add %1, %2 : f32
  %4 = add %1, %2 : f32
  %5 = mul %3, %4 : f32
  store %y, %0, %5
)");
  CHECK(passes::cse(k));
  CHECK(ir::verify(k).ok());
  CHECK(count(k, ir::OpKind::Const) == 1);
  CHECK(count(k, ir::OpKind::Add) == 1);
  CHECK(count(k, ir::OpKind::Mul) == 1);
  // Run again: nothing left to do, and it says so.
  const std::string once = ir::print(k);
  CHECK_FALSE(passes::cse(k));
  CHECK(ir::print(k) == once);
}

TEST_CASE("cse keeps what differs and what has effects", "[passes][cse]") {
  ir::Kernel k = parsed(R"(  %0 = unit_pos x : u32
  %1 = const 2.0 : f32
  %2 = const 2.0 : f64
  %3 = load %y, %0 : f32
  %4 = load %y, %0 : f32
  %5 = add %3, %4 : f32
  store %y, %0, %5
  store %y, %0, %5
  %6 = cast %2 : f32
  %7 = add %1, %6 : f32
  store %y, %0, %7
)");
  passes::cse(k);
  CHECK(ir::verify(k).ok());
  CHECK(count(k, ir::OpKind::Const) == 2);  // same text, other types
  CHECK(count(k, ir::OpKind::Load) == 2);   // memory reads are not pure: a store may intervene
  CHECK(count(k, ir::OpKind::Store) == 3);
}

TEST_CASE("cse does not merge across branches that do not dominate", "[passes][cse]") {
  ir::Kernel k = parsed(R"(  %0 = unit_pos x : u32
  %1 = const 1 : u32
  %2 = lt %0, %1 : bool
  if %2 {
    %3 = const 7.0 : f32
    store %y, %0, %3
  } else {
    %4 = const 7.0 : f32
    store %y, %0, %4
  }
)");
  passes::cse(k);
  CHECK(ir::verify(k).ok());
  CHECK(count(k, ir::OpKind::Const) == 3);  // one in each branch stays
}

TEST_CASE("cse removes unused pure ops", "[passes][cse]") {
  ir::Kernel k = parsed(R"(  %0 = unit_pos x : u32
  %1 = const 3.0 : f32
  %2 = sqrt %1 : f32
  %3 = const 4.0 : f32
  store %y, %0, %3
)");
  CHECK(passes::cse(k));
  CHECK(count(k, ir::OpKind::Sqrt) == 0);
  CHECK(count(k, ir::OpKind::Const) == 1);
  CHECK(ir::verify(k).ok());
}
