// Parser: accepted syntax and the position and wording of its errors.
#include <catch2/catch.hpp>

#include <string>

#include "ir/parser.h"
#include "ir/printer.h"

using namespace kiln;
using namespace kiln::ir;

namespace {

std::string parse_error(const std::string& text) {
  auto k = parse(text, "t.kir");
  if (k.ok()) return "(parsed)";
  CHECK(k.error().kind == ErrorKind::Parse);
  return k.error().message;
}

}  // namespace

TEST_CASE("parse a kernel with comments and free layout", "[ir][parser]") {
  auto k = parse(R"(// a comment
kernel @k(%x: array<f32>,
          %n: u32)   // parameters may span lines
{
  %a = const 1.0 : f32   %b = unit_pos : u32
  store %x, %b, %a
})",
                 "t.kir");
  REQUIRE(k.ok());
  CHECK(k->name == "k");
  CHECK(k->params.size() == 2);
  CHECK(k->cube_dim == std::array<uint32_t, 3>{1, 1, 1});  // defaults when not written
  CHECK(k->body.ops.size() == 3);
  CHECK(k->body.ops[0].pos.line == 5);
  CHECK(k->body.ops[0].pos.col == 3);
  // Canonical form renumbers named values and adds cube_dim.
  CHECK(print(*k) ==
        "kernel @k(%x: array<f32>, %n: u32) cube_dim(1, 1, 1) {\n"
        "  %0 = const 1.0 : f32\n"
        "  %1 = unit_pos : u32\n"
        "  store %x, %1, %0\n"
        "}\n");
}

TEST_CASE("literals are parsed by the declared type", "[ir][parser]") {
  auto k = parse(R"(kernel @k() {
  %0 = const 0x10 : u8
  %1 = const -1 : i64
  %2 = const 0.1 : f16
  %3 = const 1e-3 : f32
  %4 = const 7 : f64
})");
  REQUIRE(k.ok());
  CHECK(k->body.ops[0].attr.i == 16);
  CHECK(k->body.ops[1].attr.i == ~uint64_t{0});
  CHECK(k->body.ops[2].attr.f == 0.0999755859375);  // rounded to f16
  CHECK(k->body.ops[3].attr.f == static_cast<double>(1e-3f));
  CHECK(k->body.ops[4].attr.f == 7.0);
}

TEST_CASE("a float literal that is not a value of its type is an error", "[ir][parser]") {
  auto one = [](const std::string& lit, const std::string& type) {
    return parse_error("kernel @k() {\n  %0 = const " + lit + " : " + type + "\n}");
  };
  // Accepted: the type's value written to as many digits as the literal has.
  for (const char* ok : {"0.1", "1e-45", "16777216", "-0.0", "3.14159274", "1.17549435e-38",
                         "0.100000001490116119384765625"}) {
    INFO(ok);
    CHECK(one(ok, "f32") == "(parsed)");
  }
  CHECK(one("0.1", "f16") == "(parsed)");
  CHECK(one("65504", "f16") == "(parsed)");
  CHECK(one("0.10000000000000001", "f64") == "(parsed)");
  // Rejected, with the value to write instead.
  CHECK(one("16777217", "f32") ==
        "t.kir:2:14: error: constant 16777217 is not a f32 value: the nearest f32 is "
        "16777216.0; write that (a float literal must be its type's value to as many digits as "
        "it has)");
  CHECK_THAT(one("1e-50", "f32"), Catch::Contains("the nearest f32 is 0.0"));
  CHECK_THAT(one("2049", "f16"), Catch::Contains("the nearest f16 is 2048.0"));
  CHECK_THAT(one("257", "bf16"), Catch::Contains("the nearest bf16 is 256.0"));
  CHECK_THAT(one("0.10000000000000001", "f32"), Catch::Contains("the nearest f32 is 0.1"));
  CHECK_THAT(one("1e-8", "f16"), Catch::Contains("the nearest f16 is 0.0"));
}

TEST_CASE("parse errors name line, column, what was expected and what was found", "[ir][parser]") {
  CHECK(parse_error("") == "t.kir:1:1: error: expected 'kernel', found end of input");
  CHECK(parse_error("kernel @k() {\n  %0 = frobnicate : u32\n}") ==
        "t.kir:2:8: error: unknown op 'frobnicate'");
  CHECK(parse_error("kernel @k() {\n  %0 = neg %9 : u32\n}") ==
        "t.kir:2:12: error: use of undefined value %9");
  CHECK(parse_error("kernel @k() {\n  %0 = unit_pos : u32\n") ==
        "t.kir:3:1: error: expected '}', found end of input");
  CHECK(parse_error("kernel @k() {\n  %0 = unit_pos : q32\n}") ==
        "t.kir:2:19: error: expected an element type such as f32 or f32x4, found 'q32'");
  CHECK(parse_error("kernel @k(%v: f32, %v: f32) {\n}\n") ==
        "t.kir:1:20: error: value %v is defined twice; every value is defined once");
  CHECK(parse_error("kernel @k() {\n  %0 = unit_pos : f32x3\n}") ==
        "t.kir:2:19: error: line width 3 is not allowed: use 1, 2, 4, 8 or 16");
  CHECK(parse_error("kernel @k() {\n  %0 = unit_pos : u32\n  %0 = unit_pos : u32\n}") ==
        "t.kir:3:3: error: value %0 is defined twice; every value is defined once");
  CHECK(parse_error("kernel @k() {\n  print \"abc\n}") ==
        "t.kir:2:9: error: unterminated string (a string ends with '\"' on its line)");
  CHECK(parse_error("kernel @k() {\n  print \"a\\qb\"\n}") ==
        "t.kir:2:11: error: unknown escape '\\q' (use \\n \\t \\\" \\\\ or \\xHH)");
  CHECK(parse_error("kernel @k() {\n  unit_pos : u32\n}") ==
        "t.kir:2:3: error: 'unit_pos' produces a value; write '%N = unit_pos ...'");
  CHECK(parse_error("kernel @k() {\n  %1 = sync_cube\n}") ==
        "t.kir:2:3: error: 'sync_cube' produces no value; remove '%1 ='");
  CHECK(parse_error("kernel @k() {\n  %0 = const 300000000000000000000 : u64\n}") ==
        "t.kir:2:14: error: integer literal 300000000000000000000 does not fit in 64 bits");
  CHECK(parse_error("kernel @k() {\n  %0 = const -1 : u8\n}") ==
        "t.kir:2:14: error: constant -1 is negative but u8 is unsigned");
  CHECK(parse_error("kernel @k() {\n  %0 = const 1.5 : i32\n}") ==
        "t.kir:2:14: error: expected an integer literal for i32, found '1.5'");
  CHECK(parse_error("kernel @k() {\n  %0 = const maybe : bool\n}") ==
        "t.kir:2:14: error: expected true or false, found 'maybe'");
  CHECK(parse_error("kernel @k(%0: u32) {\n}") ==
        "t.kir:1:11: error: parameters are named: write %x, not %0");
  CHECK(parse_error("kernel @k() {\n  %0 = unit_pos : u32 loc(#2:4)\n}") ==
        "t.kir:2:27: error: unknown file #2: declare it first with `file #N \"path\"`");
  CHECK(parse_error("file #2 \"a.cpp\"\nkernel @k() {\n}") ==
        "t.kir:1:6: error: files are numbered in order: expected #1, found #2");
  CHECK(parse_error("kernel @k() {\n  %0 = unit_pos : u32 $\n}") ==
        "t.kir:2:23: error: unexpected character '$'");
  CHECK(parse_error("kernel @k() {\n}\nkernel") ==
        "t.kir:3:1: error: expected end of input after the kernel, found 'kernel'");
  CHECK(parse_error("kernel @k() {\n  store %x : u32\n}") ==
        "t.kir:2:9: error: use of undefined value %x");
  CHECK(parse_error("kernel @k(%m: array<f32>) {\n  %0 = unit_pos : u32\n  store %m, %0, %0 : "
                    "f32\n}") == "t.kir:3:20: error: 'store' produces no value, so it has no type");
}

TEST_CASE("deep nesting is rejected with an error, not a crash", "[ir][parser]") {
  std::string text = "kernel @k() {\n  %c = const true : bool\n";
  for (int i = 0; i < 300; ++i) text += "if %c {\n";
  for (int i = 0; i < 300; ++i) text += "}\n";
  text += "}\n";
  const std::string e = parse_error(text);
  CHECK_THAT(e, Catch::Contains("regions nested deeper than 200"));
}
