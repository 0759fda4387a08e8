// Narrow float formats on the host: rounding to f16/bf16/f8 and their bit encodings.
// Used for literals in the IR, for host-side tensors and for reference computations in tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln {

// Host storage of the 16-bit float types (the bits, nothing more): element types of host
// buffers and the tags of the DSL's f16 and bf16.
struct f16_t {
  uint16_t bits = 0;
  friend bool operator==(f16_t, f16_t) = default;
};
struct bf16_t {
  uint16_t bits = 0;
  friend bool operator==(bf16_t, bf16_t) = default;
};
// Host storage of the 8-bit floats (OCP FP8): e4m3 is the "fn" variant (bias 7, no infinities,
// S.1111.111 is NaN, the largest value 448) and e5m2 is IEEE-like (bias 15, infinities, the
// largest finite value 57344).
struct f8e4m3_t {
  uint8_t bits = 0;
  friend bool operator==(f8e4m3_t, f8e4m3_t) = default;
};
struct f8e5m2_t {
  uint8_t bits = 0;
  friend bool operator==(f8e5m2_t, f8e5m2_t) = default;
};

// Rounds v to the nearest value of a binary format with `mant_bits` stored mantissa bits and
// `exp_bits` exponent bits (ties to even), keeping subnormals; overflow gives infinity.
double round_to_format(double v, int mant_bits, int exp_bits);

inline double round_to_f16(double v) {
  return round_to_format(v, 10, 5);
}
inline double round_to_bf16(double v) {
  return round_to_format(v, 7, 8);
}

uint16_t f16_bits(double v);  // rounds, then encodes
double f16_value(uint16_t bits);

// f16 bits to float, exactly and inline, without branches (loops that convert many
// vectorize): normal numbers move their exponent bias from 15 to 127, subnormals are their
// mantissa times 2^-24 (a normal float, so a flush-to-zero mode cannot lose them), infinities
// and NaN keep their mantissa. Equal to f16_value for every non-NaN input.
inline float f16_to_float(uint16_t h) {
  const uint32_t em = h & 0x7fffu;
  const uint32_t wide = em >= 0x7c00u ? 0x7f800000u | (em & 0x3ffu) << 13 : (em + 0x1c000u) << 13;
  float f;
  std::memcpy(&f, &wide, 4);
  if (em < 0x400u) f = static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= static_cast<uint32_t>(h & 0x8000u) << 16;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t bf16_bits(double v);
double bf16_value(uint16_t bits);

// Rounding to the 8-bit floats is to nearest even and saturates: every value beyond the
// largest finite one, infinities included, becomes that value with its sign (the only rounding
// PTX's cvt has, cvt.rn.satfinite); NaN stays NaN. Encoded NaN: 0x7f for both.
double round_to_e4m3(double v);
double round_to_e5m2(double v);
uint8_t e4m3_bits(double v);  // rounds, then encodes
double e4m3_value(uint8_t bits);
uint8_t e5m2_bits(double v);
double e5m2_value(uint8_t bits);

// What a tensor core reads of an f32 input: v as f32, then rounded to tf32 (10 stored mantissa
// bits) to nearest with ties away from zero, as cvt.rna.tf32.f32 does; infinities and NaN stay.
double round_to_tf32(double v);

// The four IEEE-style float formats of the IR, and rounding of a double to each (the f8 types
// round with round_to_e4m3 / round_to_e5m2, above).
enum class FloatFormat { F16, BF16, F32, F64 };
double round_to(FloatFormat f, double v);

}  // namespace kiln
