// Counter-based random numbers for kernels: Philox 4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11), and the conversions to uniform and normal floats that
// kiln::lib::uniform and kiln::lib::normal use (kernels/lib/random.h). docs/kernels.md
// "Random numbers" is the guide.
//
//   auto r = kiln::lib::philox4x32(block, 0u, offset_lo, offset_hi, seed_lo, seed_hi);
//   f32 u = kiln::lib::uniform01(r[0]);           // [0, 1), 24 random bits
//   auto [z0, z1] = kiln::lib::box_muller(r[0], r[1]);  // two standard normals
//
// A block is a pure function of its counter and key: any unit may compute any block, in any
// order, on any device. Every operation below is one the IR rounds exactly the same way on
// every backend (integer arithmetic, +, *, fma, sqrt, exact conversions; no library log or
// sin, whose last bits differ between the CPU and a GPU), so the same seed gives the same bits
// on the CPU, the emulator and a GPU.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "compiler/dsl/dsl.h"

namespace kiln::lib {

// Philox's constants: the multipliers and the key's Weyl increments.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// The four words of Philox 4x32-10 for counter (c0, c1, c2, c3) and key (k0, k1).
inline std::array<dsl::Val<uint32_t>, 4> philox4x32(dsl::Val<uint32_t> c0, dsl::Val<uint32_t> c1,
                                                    dsl::Val<uint32_t> c2, dsl::Val<uint32_t> c3,
                                                    dsl::Val<uint32_t> k0, dsl::Val<uint32_t> k1) {
  using dsl::cast;
  std::array<dsl::Val<uint32_t>, 4> c = {c0, c1, c2, c3};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = k0 + kPhiloxW0;
      k1 = k1 + kPhiloxW1;
    }
    dsl::Val<uint64_t> p0 = cast<uint64_t>(c[0]) * uint64_t{kPhiloxM0};
    dsl::Val<uint64_t> p1 = cast<uint64_t>(c[2]) * uint64_t{kPhiloxM1};
    dsl::Val<uint32_t> hi0 = cast<uint32_t>(p0 >> uint64_t{32}), lo0 = cast<uint32_t>(p0);
    dsl::Val<uint32_t> hi1 = cast<uint32_t>(p1 >> uint64_t{32}), lo1 = cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
  }
  return c;
}

// The top 24 bits of a word as a float in [0, 1): a multiple of 2^-24, exact.
inline dsl::Val<float> uniform01(dsl::Val<uint32_t> bits) {
  return dsl::cast<float>(bits >> 8u) * 5.9604644775390625e-08f;
}

namespace detail {

// log(x) for x in (0, 1] of the form k 2^-24 (k >= 1): Cephes' logf polynomial (about 1 ulp),
// in operations every backend rounds alike.
inline dsl::Val<float> portable_log(dsl::Val<float> x) {
  using dsl::bitcast;
  using dsl::cast;
  using dsl::fma;
  using dsl::select;
  dsl::Val<uint32_t> bits = bitcast<uint32_t>(x);
  dsl::Val<int32_t> e = cast<int32_t>(bits >> 23u) - 127;
  dsl::Val<float> m = bitcast<float>((bits & 0x7fffffu) | 0x3f800000u);  // [1, 2)
  dsl::Val<bool> big = m > 1.41421356f;
  m = select(big, m * 0.5f, m);  // [sqrt(1/2), sqrt(2)]
  e = select(big, e + 1, e);
  dsl::Val<float> f = m - 1.0f;  // exact
  dsl::Val<float> z = f * f;
  dsl::Val<float> p = fma(f, 7.0376836292e-2f, -1.1514610310e-1f);
  for (float c : {1.1676998740e-1f, -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                  2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f})
    p = fma(p, f, c);
  dsl::Val<float> fe = cast<float>(e);
  dsl::Val<float> y = (f * z) * p;
  y = fma(fe, -2.12194440e-4f, y);
  y = fma(z, -0.5f, y);
  return fma(fe, 0.693359375f, f + y);
}

}  // namespace detail

// Two independent standard normals from two words (Box-Muller): radius sqrt(-2 log u1) with u1
// in (0, 1], angle 2 pi u2 with u2 in [0, 1). The angle is reduced exactly (in integers) to
// [0, pi/4] and the sine and cosine are Cephes' sinf/cosf polynomials there.
inline std::pair<dsl::Val<float>, dsl::Val<float>> box_muller(dsl::Val<uint32_t> a,
                                                              dsl::Val<uint32_t> b) {
  using dsl::cast;
  using dsl::fma;
  using dsl::select;
  dsl::Val<float> u1 = dsl::cast<float>((a >> 8u) + 1u) * 5.9604644775390625e-08f;  // (0, 1]
  dsl::Val<float> radius = dsl::sqrt(detail::portable_log(u1) * -2.0f);
  // The angle in 2^-24 turns: a quadrant (2^22 of them) and the position in it, folded to the
  // first half of the quadrant.
  dsl::Val<uint32_t> k = b >> 8u;
  dsl::Val<uint32_t> q = k >> 22u, rem = k & 0x3fffffu;
  dsl::Val<bool> upper = rem > 0x200000u;
  dsl::Val<uint32_t> folded = select(upper, 0x400000u - rem, rem);  // 0 .. 2^21: [0, pi/4]
  dsl::Val<float> y = cast<float>(folded) * 3.7450702e-07f;         // 2 pi 2^-24
  dsl::Val<float> z = y * y;
  dsl::Val<float> sp = fma(z, -1.9515295891e-4f, 8.3321608736e-3f);
  sp = fma(sp, z, -1.6666654611e-1f);
  dsl::Val<float> s = fma(y * z, sp, y);
  dsl::Val<float> cp = fma(z, 2.443315711809948e-5f, -1.388731625493765e-3f);
  cp = fma(cp, z, 4.166664568298827e-2f);
  dsl::Val<float> c = fma(z * z, cp, fma(z, -0.5f, 1.0f));
  // sin and cos of the angle within its quadrant, then of the whole angle.
  dsl::Val<float> sq = select(upper, c, s), cq = select(upper, s, c);
  dsl::Val<float> sn = select(q == 0u, sq, select(q == 1u, cq, select(q == 2u, -sq, -cq)));
  dsl::Val<float> cs = select(q == 0u, cq, select(q == 1u, -sq, select(q == 2u, -cq, sq)));
  return {radius * cs, radius * sn};
}

// The same on the host, for references and tests.
namespace host {

inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const uint64_t p0 = uint64_t{c[0]} * kPhiloxM0, p1 = uint64_t{c[2]} * kPhiloxM1;
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
  }
  return c;
}
inline float uniform01(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 5.9604644775390625e-08f;
}
// Box-Muller in double precision: what box_muller approximates.
inline std::pair<double, double> box_muller(uint32_t a, uint32_t b) {
  const double u1 = static_cast<double>((a >> 8) + 1) * 0x1p-24;
  const double u2 = static_cast<double>(b >> 8) * 0x1p-24;
  const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * M_PI * u2;
  return {r * std::cos(t), r * std::sin(t)};
}

}  // namespace host

}  // namespace kiln::lib
