// The functions CPU kernels call to report prints, failed asserts and checked-mode faults.
#include "compiler/cpu/abi.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ir/float16.h"
#include "ir/result.h"
#include "ir/types.h"

extern "C" void kiln_rt_print(void* state, uint32_t site, uint32_t cube, uint32_t unit,
                              const uint64_t* bits, uint32_t count) {
  auto* s = static_cast<kiln::abi::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  s->prints.push_back({cube, unit, site, std::vector<uint64_t>(bits, bits + count)});
}

extern "C" void kiln_rt_assert_failed(void* state, uint32_t site, uint32_t cube, uint32_t unit) {
  auto* s = static_cast<kiln::abi::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  // Cubes run in parallel; reporting the failure of the lowest (cube, unit) keeps it repeatable.
  if (s->assert_failed &&
      (s->assert_cube < cube || (s->assert_cube == cube && s->assert_unit <= unit)))
    return;
  s->assert_failed = true;
  s->assert_site = site;
  s->assert_cube = cube;
  s->assert_unit = unit;
}

extern "C" void kiln_rt_fault(void* state, uint32_t site, uint32_t index, uint32_t bound,
                              uint32_t cube, uint32_t unit) {
  auto* s = static_cast<kiln::abi::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->fault && (s->fault_cube < cube || (s->fault_cube == cube && s->fault_unit <= unit)))
    return;
  s->fault = true;
  s->fault_site = site;
  s->fault_index = index;
  s->fault_bound = bound;
  s->fault_cube = cube;
  s->fault_unit = unit;
}

namespace {

// The arena byte of element (mn, k) of a K-major operand under descriptor d, as the PTX ISA
// lays it out (the same rule as the CUDA prelude's wgmma_kmajor_byte, which the emulator uses).
// Elements k .. k + 16 / size - 1 of a row (k a multiple of 16 / size) are the 16 bytes from
// there, in order, in every layout: swizzling permutes whole 16-byte chunks.
inline uint32_t kmajor_byte(uint64_t d, uint32_t mn, uint32_t k, uint32_t size) {
  const auto start = static_cast<uint32_t>(d & 0x3fffu) << 4;
  const auto lbo = static_cast<uint32_t>((d >> 16) & 0x3fffu) << 4;
  const auto sbo = static_cast<uint32_t>((d >> 32) & 0x3fffu) << 4;
  const auto mode = static_cast<uint32_t>(d >> 62), per16 = 16u / size;
  if (mode == 0) return start + mn / 8 * sbo + mn % 8 * 16 + k / per16 * lbo + k % per16 * size;
  const uint32_t w = mode == 1 ? 128u : mode == 2 ? 64u : 32u;
  const uint32_t byte = start + mn / 8 * sbo + mn % 8 * w + k * size;
  return byte ^ (((byte >> 7) & (w / 16 - 1)) << 4);
}

float bits_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KILN_WGMMA_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KILN_WGMMA_CLONES
#endif

// The bytes of one element of a wgmma input type.
template <kiln::ir::ElemType E>
constexpr uint32_t kInputBytes =
    E == kiln::ir::ElemType::F32                                    ? 4
    : E == kiln::ir::ElemType::F16 || E == kiln::ir::ElemType::BF16 ? 2
                                                                    : 1;

// Element i of a 16-byte chunk of E as what the tensor core multiplies (T: float or the i32
// accumulator's bits): f16/bf16/f8 exactly, f32 as tf32 (the low 13 mantissa bits ignored),
// i8/u8 as integers.
template <kiln::ir::ElemType E, class T>
T element(const uint8_t* p) {
  using kiln::ir::ElemType;
  if constexpr (E == ElemType::I8) {
    return static_cast<T>(static_cast<int32_t>(static_cast<int8_t>(*p)));
  } else if constexpr (E == ElemType::U8) {
    return static_cast<T>(*p);
  } else if constexpr (E == ElemType::F8E5M2) {  // the high byte of an f16
    return kiln::f16_to_float(static_cast<uint16_t>(*p << 8));
  } else if constexpr (E == ElemType::F8E4M3) {
    // As compiler/cpu/gen.h widens it: normals rescaled by 2^120, subnormals converted.
    const uint32_t em = *p & 0x7fu;
    const float a = em == 0x7f ? bits_float(0x7fc00000u)
                    : em < 8   ? static_cast<float>(em) * 0x1p-9f
                               : bits_float(em << 20) * 0x1p120f;
    return (*p & 0x80u) ? -a : a;
  } else if constexpr (E == ElemType::F32) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    return bits_float(w & 0xffffe000u);
  } else if constexpr (E == ElemType::F16) {
#ifdef __FLT16_MAX__
    // The compiler's conversion: vcvtph2ps in the clones that have F16C; exact in every clone
    // (NaNs stay NaN).
    _Float16 x;
    std::memcpy(&x, p, 2);
    return static_cast<float>(x);
#else
    uint16_t h;
    std::memcpy(&h, p, 2);
    return kiln::f16_to_float(h);
#endif
  } else {  // bf16: the high half of an f32
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bits_float(static_cast<uint32_t>(h) << 16);
  }
}

// One operand of a plane's multiply (16 rows of A, or n rows of B), read row by row from the
// arena into `out` (row mn's k_step values at out[mn * row_stride + k * col_stride]).
// Returns 1 + the first byte offset past the arena (read as zero), or 0.
template <kiln::ir::ElemType E, class T>
KILN_WGMMA_CLONES uint32_t read_operand(const uint8_t* shared, uint32_t bytes, uint64_t d,
                                        uint32_t row0, uint32_t rows, uint32_t k_step, T* out,
                                        size_t row_stride, size_t col_stride) {
  constexpr uint32_t size = kInputBytes<E>, per16 = 16 / size;
  uint32_t bad = 0;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t k0 = 0; k0 < k_step; k0 += per16) {
      const uint32_t at = kmajor_byte(d, row0 + r, k0, size);
      T* o = out + r * row_stride + k0 * col_stride;
      if (at + 16 <= bytes) {
        const uint8_t* p = shared + at;
        T chunk[per16];  // converted in one (vectorizable) loop, then stored
        for (uint32_t i = 0; i < per16; ++i) chunk[i] = element<E, T>(p + i * size);
        for (uint32_t i = 0; i < per16; ++i) o[i * col_stride] = chunk[i];
        continue;
      }
      for (uint32_t i = 0; i < per16; ++i) {  // at the arena's end: element by element
        const uint32_t at_i = at + i * size;
        if (at_i + size > bytes) {
          if (!bad) bad = at_i + 1;
          o[i * col_stride] = T(0);
        } else {
          o[i * col_stride] = element<E, T>(shared + at_i);
        }
      }
    }
  return bad;
}

// acc (16 x n, row-major) += a (16 x k_step, row-major) * b (k_step x n, row-major), in order
// over k for each element with one rounding per step (fma), as the emulator computes it;
// integers wrap. The loop over n is the vector loop; the clones give it FMA and wide vectors
// where the host has them (the result is the same in every clone).
template <class T>
KILN_WGMMA_CLONES void multiply(T* __restrict acc, const T* __restrict a, const T* __restrict b,
                                uint32_t n, uint32_t k_step) {
  for (uint32_t r = 0; r < 16; ++r) {
    T* __restrict d = acc + static_cast<size_t>(r) * n;
    for (uint32_t k = 0; k < k_step; ++k) {
      const T x = a[r * k_step + k];
      const T* __restrict bk = b + static_cast<size_t>(k) * n;
      for (uint32_t c = 0; c < n; ++c) {
        if constexpr (std::is_integral_v<T>)
          d[c] += x * bk[c];
        else
          d[c] = std::fma(x, bk[c], d[c]);
      }
    }
  }
}

template <kiln::ir::ElemType E, class T>
uint32_t plane_wgmma(T* acc, uint32_t plane, const uint8_t* shared, uint32_t bytes, uint64_t adesc,
                     uint64_t bdesc, uint32_t n) {
  constexpr uint32_t k_step = 32 / kInputBytes<E>;  // 32 bytes of k per instruction
  // At most 16 x 32 of A and 32 x 256 of B (k_step * element size is 32 bytes).
  alignas(64) T a[16 * k_step];
  alignas(64) T b[k_step * 256];
  const uint32_t bad_a =
      read_operand<E>(shared, bytes, adesc, 16 * (plane % 4), 16, k_step, a, k_step, 1);
  const uint32_t bad_b = read_operand<E>(shared, bytes, bdesc, 0, n, k_step, b, 1, n);
  multiply(acc, a, b, n, k_step);
  return bad_a ? bad_a : bad_b;
}

}  // namespace

extern "C" uint32_t kiln_rt_wgmma(void* acc, uint32_t plane, const void* shared,
                                  uint32_t shared_bytes, uint64_t adesc, uint64_t bdesc,
                                  uint32_t elem, uint32_t n) {
  using kiln::ir::ElemType;
  const auto* s = static_cast<const uint8_t*>(shared);
  auto* f = static_cast<float*>(acc);
  auto* i = static_cast<uint32_t*>(acc);
  switch (static_cast<ElemType>(elem)) {
    case ElemType::F16:
      return plane_wgmma<ElemType::F16>(f, plane, s, shared_bytes, adesc, bdesc, n);
    case ElemType::BF16:
      return plane_wgmma<ElemType::BF16>(f, plane, s, shared_bytes, adesc, bdesc, n);
    case ElemType::F32:
      return plane_wgmma<ElemType::F32>(f, plane, s, shared_bytes, adesc, bdesc, n);
    case ElemType::I8:
      return plane_wgmma<ElemType::I8>(i, plane, s, shared_bytes, adesc, bdesc, n);
    case ElemType::U8:
      return plane_wgmma<ElemType::U8>(i, plane, s, shared_bytes, adesc, bdesc, n);
    case ElemType::F8E4M3:
      return plane_wgmma<ElemType::F8E4M3>(f, plane, s, shared_bytes, adesc, bdesc, n);
    case ElemType::F8E5M2:
      return plane_wgmma<ElemType::F8E5M2>(f, plane, s, shared_bytes, adesc, bdesc, n);
    default:
      KILN_CHECK(false, "kiln_rt_wgmma of an element type the verifier refuses");
      return 0;
  }
}
