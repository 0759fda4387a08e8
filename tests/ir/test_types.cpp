// Element types, type names and half-precision rounding.
#include <catch2/catch.hpp>

#include <cmath>

#include "ir/float16.h"
#include "ir/ops.h"
#include "ir/types.h"

using namespace kiln;
using namespace kiln::ir;

TEST_CASE("element type names round-trip", "[ir][types]") {
  for (int i = 0; i < kNumElemTypes; ++i) {
    const auto t = static_cast<ElemType>(i);
    auto parsed = parse_elem_type(elem_name(t));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == t);
  }
  CHECK_FALSE(parse_elem_type("f8").has_value());
  CHECK(elem_bits(ElemType::BF16) == 16);
  CHECK(elem_bytes(ElemType::Bool) == 1);
  CHECK(is_signed(ElemType::I8));
  CHECK_FALSE(is_signed(ElemType::U64));
}

TEST_CASE("type names", "[ir][types]") {
  CHECK(type_name(Type::value(ElemType::F32)) == "f32");
  CHECK(type_name(Type::value(ElemType::F32, 4)) == "f32x4");
  CHECK(type_name(Type::tensor(ElemType::F16, 8, 2, true)) == "tensor<f16x8, 2, ro>");
  CHECK(type_name(Type::tensor(ElemType::F16, 1, 3, false)) == "tensor<f16, 3>");
  CHECK(type_name(Type::array(ElemType::U32, 1, false)) == "array<u32>");
  CHECK(type_name(Type::shared(ElemType::I8, 16, 64)) == "shared<i8x16, 64>");
  CHECK(type_name(Type::local(ElemType::F64, 2, 3)) == "local<f64x2, 3>");
  CHECK(type_name(Type::var(ElemType::Bool, 4)) == "var<boolx4>");
  CHECK(type_name(Type::void_type()) == "void");
  CHECK(valid_lanes(16));
  CHECK_FALSE(valid_lanes(3));
  CHECK_FALSE(valid_lanes(32));
}

TEST_CASE("f16 rounding and encoding", "[ir][float16]") {
  CHECK(f16_bits(1.0) == 0x3C00);
  CHECK(f16_bits(-2.0) == 0xC000);
  CHECK(f16_bits(65504.0) == 0x7BFF);
  CHECK(f16_bits(65520.0) == 0x7C00);               // rounds up to infinity
  CHECK(f16_bits(65519.0) == 0x7BFF);               // rounds down to the largest finite
  CHECK(f16_bits(std::ldexp(1.0, -24)) == 0x0001);  // smallest subnormal
  CHECK(f16_bits(std::ldexp(1.0, -25)) == 0x0000);  // tie to even: rounds to zero
  CHECK(f16_bits(std::ldexp(3.0, -25)) == 0x0002);  // 1.5 quanta: tie to even (2)
  CHECK(f16_bits(-0.0) == 0x8000);
  CHECK((f16_bits(NAN) & 0x7C00) == 0x7C00);
  CHECK(f16_value(0x3555) == Approx(0.333251953125));
  CHECK(std::isinf(f16_value(0xFC00)));
  for (uint32_t b = 0; b < 0x10000; ++b) {  // every finite f16 decodes and re-encodes exactly
    const auto bits = static_cast<uint16_t>(b);
    const double v = f16_value(bits);
    if (std::isnan(v)) continue;
    REQUIRE(f16_bits(v) == bits);
  }
  for (uint32_t b = 0; b < 0x10000; ++b) {  // the inline conversion agrees, bit for bit
    const auto bits = static_cast<uint16_t>(b);
    const double v = f16_value(bits);
    const float f = f16_to_float(bits);
    INFO("f16 bits 0x" << std::hex << b);
    if (std::isnan(v)) {
      REQUIRE(std::isnan(f));
      continue;
    }
    REQUIRE(static_cast<double>(f) == v);
    REQUIRE(std::signbit(f) == std::signbit(v));
  }
}

TEST_CASE("bf16 rounding and encoding", "[ir][float16]") {
  CHECK(bf16_bits(1.0) == 0x3F80);
  CHECK(bf16_bits(3.140625) == 0x4049);
  CHECK(bf16_value(0x4049) == 3.140625);
  CHECK(round_to_bf16(1.0 + std::ldexp(1.0, -8)) == 1.0);  // tie to even
  CHECK(round_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)) == 1.0 + std::ldexp(1.0, -6));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const double v = bf16_value(bits);
    if (std::isnan(v)) continue;
    REQUIRE(bf16_bits(v) == bits);
  }
}

TEST_CASE("f8 rounding, saturation and encoding", "[ir][float16]") {
  // e4m3 ("fn"): bias 7, no infinities, S.1111.111 is the only NaN.
  CHECK(e4m3_bits(1.0) == 0x38);
  CHECK(e4m3_bits(448.0) == 0x7e);
  CHECK(e4m3_bits(-448.0) == 0xfe);
  CHECK(e4m3_value(0x01) == std::ldexp(1.0, -9));  // the smallest subnormal
  CHECK(e4m3_value(0x08) == std::ldexp(1.0, -6));  // the smallest normal
  CHECK(std::isnan(e4m3_value(0x7f)));
  CHECK(std::isnan(e4m3_value(0xff)));
  CHECK(e4m3_value(0x78) == 256.0);      // exponent field 15 is a normal binade
  CHECK(round_to_e4m3(1.0625) == 1.0);   // a tie, to even
  CHECK(round_to_e4m3(1.1875) == 1.25);  // a tie, to even
  CHECK(round_to_e4m3(464.0) == 448.0);  // the tie above the largest value: to even, 448
  CHECK(round_to_e4m3(1e6) == 448.0);    // saturates
  CHECK(round_to_e4m3(-INFINITY) == -448.0);
  CHECK(std::isnan(round_to_e4m3(NAN)));
  CHECK(e4m3_bits(NAN) == 0x7f);
  CHECK(round_to_e4m3(std::ldexp(1.0, -10)) == 0.0);                      // a tie, to even (zero)
  CHECK(round_to_e4m3(3 * std::ldexp(1.0, -10)) == std::ldexp(1.0, -8));  // a tie, to even
  // e5m2: the high byte of an f16, with infinities; conversions saturate all the same.
  CHECK(e5m2_bits(1.0) == 0x3c);
  CHECK(e5m2_bits(57344.0) == 0x7b);
  CHECK(e5m2_value(0x7c) == INFINITY);
  CHECK(round_to_e5m2(61439.0) == 57344.0);
  CHECK(round_to_e5m2(INFINITY) == 57344.0);
  CHECK(e5m2_value(0x01) == std::ldexp(1.0, -16));
  for (uint32_t b = 0; b < 0x100; ++b) {
    const auto bits = static_cast<uint8_t>(b);
    const double v4 = e4m3_value(bits), v5 = e5m2_value(bits);
    if (!std::isnan(v4)) REQUIRE(e4m3_bits(v4) == bits);
    if (!std::isnan(v5) && !std::isinf(v5)) REQUIRE(e5m2_bits(v5) == bits);
    if (!std::isnan(v5)) REQUIRE(v5 == f16_value(static_cast<uint16_t>(b << 8)));
  }
  // Literals beyond the largest value are out of range (infinite), never saturated.
  CHECK(ir::round_float_literal(ir::ElemType::F8E4M3, 464.0) == 448.0);
  CHECK(std::isinf(ir::round_float_literal(ir::ElemType::F8E4M3, 465.0)));
  CHECK(ir::round_float_literal(ir::ElemType::F8E5M2, 61439.0) == 57344.0);
  CHECK(std::isinf(ir::round_float_literal(ir::ElemType::F8E5M2, 61440.0)));
}
