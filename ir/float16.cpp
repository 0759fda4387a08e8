// Rounding and encoding of f16, bf16 and f8 values, done with exact double arithmetic.
#include "ir/float16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln {

double round_to_format(double v, int mant_bits, int exp_bits) {
  if (std::isnan(v) || std::isinf(v) || v == 0.0) return v;
  const int emax = (1 << (exp_bits - 1)) - 1;
  const int emin = 1 - emax;
  int e = 0;
  std::frexp(std::fabs(v), &e);  // |v| = f * 2^e, f in [0.5, 1): the leading bit is 2^(e-1)
  int exp = e - 1;
  if (exp < emin) exp = emin;  // subnormal range: fixed quantum
  const double quantum = std::ldexp(1.0, exp - mant_bits);
  // Division by a power of two is exact; nearbyint rounds ties to even.
  double r = std::nearbyint(std::fabs(v) / quantum) * quantum;
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -mant_bits), emax);
  if (r > max_finite) r = INFINITY;
  return std::copysign(r, v);
}

namespace {

// Encodes an already-rounded value of a (mant_bits, exp_bits) format into its bits.
uint32_t encode(double r, int mant_bits, int exp_bits) {
  const uint32_t sign = std::signbit(r) ? 1u : 0u;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_all = (1u << exp_bits) - 1;
  uint32_t exp_field = 0, mant = 0;
  const double a = std::fabs(r);
  if (std::isnan(r)) {
    exp_field = exp_all;
    mant = 1u << (mant_bits - 1);  // quiet NaN
  } else if (std::isinf(r)) {
    exp_field = exp_all;
  } else if (a != 0.0) {
    int e = 0;
    std::frexp(a, &e);
    int exp = e - 1;
    if (exp < 1 - bias) {  // subnormal
      mant = static_cast<uint32_t>(std::ldexp(a, bias - 1 + mant_bits));
    } else {
      exp_field = static_cast<uint32_t>(exp + bias);
      mant = static_cast<uint32_t>(std::ldexp(a, mant_bits - exp)) - (1u << mant_bits);
    }
  }
  return (sign << (mant_bits + exp_bits)) | (exp_field << mant_bits) | mant;
}

double decode(uint32_t bits, int mant_bits, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_all = (1u << exp_bits) - 1;
  const bool neg = (bits >> (mant_bits + exp_bits)) & 1u;
  const uint32_t exp_field = (bits >> mant_bits) & exp_all;
  const uint32_t mant = bits & ((1u << mant_bits) - 1);
  double v;
  if (exp_field == exp_all)
    v = mant ? NAN : INFINITY;
  else if (exp_field == 0)
    v = std::ldexp(static_cast<double>(mant), 1 - bias - mant_bits);
  else
    v = std::ldexp(static_cast<double>(mant | (1u << mant_bits)),
                   static_cast<int>(exp_field) - bias - mant_bits);
  return neg ? -v : v;
}

}  // namespace

uint16_t f16_bits(double v) {
  return static_cast<uint16_t>(encode(round_to_f16(v), 10, 5));
}
double f16_value(uint16_t bits) {
  return decode(bits, 10, 5);
}
uint16_t bf16_bits(double v) {
  return static_cast<uint16_t>(encode(round_to_bf16(v), 7, 8));
}
double bf16_value(uint16_t bits) {
  return decode(bits, 7, 8);
}

namespace {

// Round to nearest even on a grid of mant_bits stored bits with the smallest normal exponent
// emin, saturating at max_finite (infinities too); NaN stays.
double round_saturating(double v, int mant_bits, int emin, double max_finite) {
  if (std::isnan(v) || v == 0.0) return v;
  if (std::isinf(v)) return std::copysign(max_finite, v);
  int e = 0;
  std::frexp(std::fabs(v), &e);
  const int exp = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, exp - mant_bits);
  const double r = std::min(std::nearbyint(std::fabs(v) / quantum) * quantum, max_finite);
  return std::copysign(r, v);
}

}  // namespace

double round_to_e4m3(double v) {
  return round_saturating(v, 3, -6, 448.0);
}
double round_to_e5m2(double v) {
  return round_saturating(v, 2, -14, 57344.0);
}

uint8_t e4m3_bits(double v) {
  const double r = round_to_e4m3(v);
  if (std::isnan(r)) return 0x7f;
  // Encoded like a 4-bit-exponent IEEE format whose all-ones exponent is still a normal binade.
  const uint32_t sign = std::signbit(r) ? 0x80u : 0u;
  const double a = std::fabs(r);
  if (a < 0x1p-6) return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::ldexp(a, 9)));
  int e = 0;
  std::frexp(a, &e);
  const int exp = e - 1;
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(a, 3 - exp)) - 8u;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(exp + 7) << 3 | mant);
}
double e4m3_value(uint8_t bits) {
  const uint32_t em = bits & 0x7fu;
  if (em == 0x7f) return NAN;
  const uint32_t exp = em >> 3, mant = em & 7u;
  const double v = exp == 0
                       ? std::ldexp(static_cast<double>(mant), -9)
                       : std::ldexp(static_cast<double>(mant | 8u), static_cast<int>(exp) - 10);
  return (bits & 0x80u) ? -v : v;
}
uint8_t e5m2_bits(double v) {
  const double r = round_to_e5m2(v);
  return std::isnan(r) ? 0x7f : static_cast<uint8_t>(encode(r, 2, 5));
}
double e5m2_value(uint8_t bits) {
  return decode(bits, 2, 5);
}

double round_to(FloatFormat f, double v) {
  switch (f) {
    case FloatFormat::F16:
      return round_to_f16(v);
    case FloatFormat::BF16:
      return round_to_bf16(v);
    case FloatFormat::F32:
      return static_cast<double>(static_cast<float>(v));
    case FloatFormat::F64:
      return v;
  }
  return v;
}

double round_to_tf32(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace kiln
