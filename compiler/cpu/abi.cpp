// The functions CPU kernels call to report prints, failed asserts and checked-mode faults.
#include "compiler/cpu/abi.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "ir/float16.h"
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
uint32_t kmajor_byte(uint64_t d, uint32_t mn, uint32_t k, uint32_t size) {
  const auto start = static_cast<uint32_t>(d & 0x3fffu) << 4;
  const auto lbo = static_cast<uint32_t>((d >> 16) & 0x3fffu) << 4;
  const auto sbo = static_cast<uint32_t>((d >> 32) & 0x3fffu) << 4;
  const auto mode = static_cast<uint32_t>(d >> 62), per16 = 16u / size;
  if (mode == 0) return start + mn / 8 * sbo + mn % 8 * 16 + k / per16 * lbo + k % per16 * size;
  const uint32_t w = mode == 1 ? 128u : mode == 2 ? 64u : 32u;
  const uint32_t byte = start + mn / 8 * sbo + mn % 8 * w + k * size;
  return byte ^ (((byte >> 7) & (w / 16 - 1)) << 4);
}

struct Operand {
  const uint8_t* shared;
  uint32_t bytes, size;
  kiln::ir::ElemType elem;
  uint32_t bad = 0;  // 1 + the first offset past the arena
  // Element (mn, k) as what the tensor core multiplies: f16/bf16 exactly, f32 as tf32 (the
  // low 13 mantissa bits ignored), i8/u8 as integers.
  double get(uint64_t d, uint32_t mn, uint32_t k) {
    const uint32_t at = kmajor_byte(d, mn, k, size);
    if (at + size > bytes) {
      if (!bad) bad = at + 1;
      return 0;
    }
    const uint8_t* p = shared + at;
    using kiln::ir::ElemType;
    switch (elem) {
      case ElemType::F16: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return kiln::f16_value(b);
      }
      case ElemType::BF16: {
        uint16_t b;
        std::memcpy(&b, p, 2);
        return kiln::bf16_value(b);
      }
      case ElemType::F32: {
        uint32_t b;
        std::memcpy(&b, p, 4);
        b &= 0xffffe000u;
        float f;
        std::memcpy(&f, &b, 4);
        return f;
      }
      case ElemType::I8:
        return static_cast<int8_t>(*p);
      default:
        return *p;
    }
  }
};

}  // namespace

extern "C" uint32_t kiln_rt_wgmma(void* acc, uint32_t plane, const void* shared,
                                  uint32_t shared_bytes, uint64_t adesc, uint64_t bdesc,
                                  uint32_t elem, uint32_t n) {
  using kiln::ir::ElemType;
  const auto e = static_cast<ElemType>(elem);
  const uint32_t size = static_cast<uint32_t>(kiln::ir::elem_bytes(e)),
                 k_step = e == ElemType::F32 ? 8u : size == 1 ? 32u : 16u;
  Operand op{static_cast<const uint8_t*>(shared), shared_bytes, size, e};
  const uint32_t row0 = 16 * (plane % 4);
  std::vector<double> a(16 * k_step), b(static_cast<size_t>(n) * k_step);
  for (uint32_t r = 0; r < 16; ++r)
    for (uint32_t k = 0; k < k_step; ++k) a[r * k_step + k] = op.get(adesc, row0 + r, k);
  for (uint32_t c = 0; c < n; ++c)
    for (uint32_t k = 0; k < k_step; ++k) b[c * k_step + k] = op.get(bdesc, c, k);
  // In order over k, each product exact and added in the accumulator's type (as the emulator
  // does); integers wrap.
  for (uint32_t r = 0; r < 16; ++r)
    for (uint32_t c = 0; c < n; ++c) {
      const double* ar = &a[r * k_step];
      const double* bc = &b[c * k_step];
      if (size == 1) {
        auto* d = static_cast<int32_t*>(acc) + r * n + c;
        uint32_t sum = static_cast<uint32_t>(*d);
        for (uint32_t k = 0; k < k_step; ++k)
          sum += static_cast<uint32_t>(static_cast<int32_t>(ar[k] * bc[k]));
        *d = static_cast<int32_t>(sum);
      } else {
        auto* d = static_cast<float*>(acc) + r * n + c;
        float sum = *d;
        for (uint32_t k = 0; k < k_step; ++k)
          sum = std::fma(static_cast<float>(ar[k]), static_cast<float>(bc[k]), sum);
        *d = sum;
      }
    }
  return op.bad;
}
