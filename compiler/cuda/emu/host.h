// CUDA on the host, for the emulation device (cuda-emu): what a kernel's CUDA C++ and kiln's
// prelude use of CUDA (qualifiers, threadIdx and friends, barriers, warp collectives, atomics,
// bit-casting and rounding intrinsics), implemented for the host after the CUDA programming
// guide and the PTX ISA. Collectives, barriers and memory checks call the emulator through
// kiln_emu_abi.h; the rest is plain C++. The emulation backend compiles it, as
// "kiln_emu.h", before the prelude and the kernel (compiler/cuda/emu/backend.cpp).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <source_location>

#include "kiln_emu_abi.h"

namespace kiln::emu {

// The emulator's entry points; set by kiln_emu_bind. Internal linkage: each module has its own.
static const Api* g_api = nullptr;

using Site = std::source_location;

inline Unit* unit() {
  return g_api->current();
}
inline void* scratch() {
  return unit()->scratch;
}
inline bool access(const void* p, uint64_t bytes, uint32_t how, const Site& s) {
  return g_api->access(p, bytes, how, s.file_name(), s.line());
}
inline void out_of_bounds(uint32_t space, uint32_t how, uint64_t index, uint64_t count,
                          const Site& s) {
  g_api->out_of_bounds(space, how, index, count, s.file_name(), s.line());
}
// A misuse of a CUDA feature the emulator checks (wgmma fences and waits): reported like a fault.
inline void misuse(const char* what, const Site& s) {
  g_api->misuse(what, s.file_name(), s.line());
}
inline void spin(const char* what, const Site& s) {
  g_api->spin(what, s.file_name(), s.line());
}
inline void order(const void* bar, uint32_t what, uint32_t parity) {
  g_api->order(bar, what, parity);
}
inline void retire() {
  g_api->retire();
}
inline void sync_cluster(const Site& s) {
  g_api->cluster_barrier(s.file_name(), s.line());
}
inline void* map_shared(const void* p, uint32_t rank, const Site& s) {
  return g_api->map_shared(p, rank, s.file_name(), s.line());
}
inline void sync_threads(const Site& s = Site::current()) {
  g_api->barrier(s.file_name(), s.line());
}
inline uint64_t collective(uint32_t kind, uint32_t mask, uint64_t value, uint32_t operand,
                           const Site& s) {
  return g_api->collective(kind, mask, value, operand, s.file_name(), s.line());
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// cvt.f32.f16: exact.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 31u, mant = h & 0x3ffu;
  if (exp == 0) {
    const float m = (float)mant * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return sign ? -m : m;
  }
  if (exp == 31) return f32_of_bits(sign | 0x7f800000u | (mant << 13));
  return f32_of_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}
// cvt.rn.f16.f32: to nearest even; overflow to infinity; NaN to the canonical 0x7fff.
inline uint16_t f32_to_f16_rn(float f) {
  const uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fff;
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half (or zero); 1024 is the smallest normal
    const float scaled = nearbyintf(f32_of_bits(ax) * 16777216.0f);  // exact scaling, then RNE
    return (uint16_t)(sign | (uint32_t)scaled);
  }
  const uint32_t mant = ax & 0x7fffffu, rest = mant & 0x1fffu;
  uint32_t h = ((((ax >> 23) - 112u) << 10) | (mant >> 13));
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return (uint16_t)(sign | h);
}
// cvt.rn.bf16.f32: to nearest even; NaN to the canonical 0x7fff.
inline uint16_t f32_to_bf16_rn(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
// min.f32/min.f64 and max (PTX): a NaN operand, quiet or signaling, is ignored; two NaNs give
// the canonical NaN. (The host's fmin returns NaN for a signaling NaN.)
template <class F>
inline F min_num(F a, F b) {
  if (a != a) return b != b ? (F)__builtin_nan("") : b;
  return b != b ? a : fmin(a, b);
}
template <class F>
inline F max_num(F a, F b) {
  if (a != a) return b != b ? (F)__builtin_nan("") : b;
  return b != b ? a : fmax(a, b);
}
// Flushes a subnormal to a zero of its sign (the .ftz of atom.add.f32).
inline float flush(float x) {
  return (f32_bits(x) & 0x7f800000u) == 0 ? f32_of_bits(f32_bits(x) & 0x80000000u) : x;
}

}  // namespace kiln::emu

// ---- the CUDA surface ---------------------------------------------------------------------------

#define KILN_EMULATION 1
#define KILN_WHERE , const ::std::source_location& where = ::std::source_location::current()
#define KILN_AT , where
// Shared arrays live in the cube's arena (static and dynamic alike), local arrays on the unit's
// fiber stack; both know their length.
#define KILN_SHARED(T, name, count, offset)                                                     \
  const ::kiln::bounded<T> name {                                                               \
    reinterpret_cast<T*>(::kiln::emu::unit()->shared + (offset)), (count), ::kiln::emu::kShared \
  }
#define KILN_SHARED_DYNAMIC(T, name, count, offset) KILN_SHARED(T, name, count, offset)
#define KILN_SHARED_ALIGNED(T, name, count, offset, align) KILN_SHARED(T, name, count, offset)
#define KILN_DYNAMIC_SHARED_BASE() static_assert(true, "")
#define KILN_LOCAL(T, name, count)               \
  T name##_storage[count];                       \
  const ::kiln::bounded<T> name {                \
    name##_storage, (count), ::kiln::emu::kLocal \
  }

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __grid_constant__
#define threadIdx (::kiln::emu::unit()->thread_idx)
#define blockIdx (::kiln::emu::unit()->block_idx)
#define blockDim (::kiln::emu::unit()->block_dim)
#define gridDim (::kiln::emu::unit()->grid_dim)
#define warpSize 32
#define __syncthreads() ::kiln::emu::sync_threads()

struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline float rsqrt(float x) {
  return 1.0f / sqrtf(x);
}
inline double rsqrt(double x) {
  return 1.0 / sqrt(x);
}

inline float __uint_as_float(unsigned u) {
  return ::kiln::emu::f32_of_bits(u);
}
inline unsigned __float_as_uint(float f) {
  return ::kiln::emu::f32_bits(f);
}
inline double __longlong_as_double(long long x) {
  double d;
  memcpy(&d, &x, 8);
  return d;
}
inline long long __double_as_longlong(double d) {
  long long x;
  memcpy(&x, &d, 8);
  return x;
}
// Conversions rounding toward zero (cvt.rz): round to nearest, then step toward zero when
// that went past the value.
inline float __double2float_rz(double x) {
  float f = (float)x;
  if (fabs((double)f) > fabs(x)) f = nextafterf(f, 0.0f);
  return f;
}
inline float __ll2float_rz(long long x) {
  float f = (float)x;
  const __int128 back = (__int128)f;
  if (x >= 0 ? back > x : back < x) f = nextafterf(f, 0.0f);
  return f;
}
inline float __ull2float_rz(unsigned long long x) {
  float f = (float)x;
  if ((unsigned __int128)f > x) f = nextafterf(f, 0.0f);
  return f;
}

// ---- atomics: relaxed, as atom.* (f32 addition flushes subnormals, as atom.add.f32 does) ----

#define KILN_EMU_INT_ATOMICS(T)                                                                \
  inline T atomicAdd(T* p, T v) {                                                              \
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);                                         \
  }                                                                                            \
  inline T atomicExch(T* p, T v) {                                                             \
    return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);                                        \
  }                                                                                            \
  inline T atomicCAS(T* p, T c, T v) {                                                         \
    __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);          \
    return c;                                                                                  \
  }                                                                                            \
  inline T atomicMin(T* p, T v) {                                                              \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                              \
    while (v < old &&                                                                          \
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                        \
    return old;                                                                                \
  }                                                                                            \
  inline T atomicMax(T* p, T v) {                                                              \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                              \
    while (old < v &&                                                                          \
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                        \
    return old;                                                                                \
  }
KILN_EMU_INT_ATOMICS(int)
KILN_EMU_INT_ATOMICS(unsigned)
KILN_EMU_INT_ATOMICS(long long)
KILN_EMU_INT_ATOMICS(unsigned long long)
#undef KILN_EMU_INT_ATOMICS

inline float atomicAdd(float* p, float v) {
  uint32_t* q = reinterpret_cast<uint32_t*>(p);
  uint32_t old = __atomic_load_n(q, __ATOMIC_RELAXED);
  for (;;) {
    const float r = ::kiln::emu::flush(::kiln::emu::flush(::kiln::emu::f32_of_bits(old)) +
                                       ::kiln::emu::flush(v));
    if (__atomic_compare_exchange_n(q, &old, ::kiln::emu::f32_bits(r), true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return ::kiln::emu::f32_of_bits(old);
  }
}
inline double atomicAdd(double* p, double v) {
  uint64_t* q = reinterpret_cast<uint64_t*>(p);
  uint64_t old = __atomic_load_n(q, __ATOMIC_RELAXED);
  for (;;) {
    double a, r;
    memcpy(&a, &old, 8);
    r = a + v;
    uint64_t bits;
    memcpy(&bits, &r, 8);
    if (__atomic_compare_exchange_n(q, &old, bits, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return a;
  }
}
inline float atomicExch(float* p, float v) {
  return ::kiln::emu::f32_of_bits(__atomic_exchange_n(reinterpret_cast<uint32_t*>(p),
                                                      ::kiln::emu::f32_bits(v), __ATOMIC_RELAXED));
}

// ---- warp collectives: they run when every lane of `mask` has arrived ---------------------------

inline unsigned __shfl_sync(unsigned mask, unsigned v, int src,
                            const ::std::source_location& w = ::std::source_location::current()) {
  return (unsigned)::kiln::emu::collective(::kiln::emu::kShuffle, mask, v, (uint32_t)src, w);
}
inline unsigned long long __shfl_sync(
    unsigned mask, unsigned long long v, int src,
    const ::std::source_location& w = ::std::source_location::current()) {
  return ::kiln::emu::collective(::kiln::emu::kShuffle, mask, v, (uint32_t)src, w);
}
inline int __any_sync(unsigned mask, int pred,
                      const ::std::source_location& w = ::std::source_location::current()) {
  return (int)::kiln::emu::collective(::kiln::emu::kAny, mask, pred != 0, 0, w);
}
inline int __all_sync(unsigned mask, int pred,
                      const ::std::source_location& w = ::std::source_location::current()) {
  return (int)::kiln::emu::collective(::kiln::emu::kAll, mask, pred != 0, 0, w);
}
inline unsigned __ballot_sync(unsigned mask, int pred,
                              const ::std::source_location& w = ::std::source_location::current()) {
  return (unsigned)::kiln::emu::collective(::kiln::emu::kBallot, mask, pred != 0, 0, w);
}
// __reduce_*_sync (sm_80): every lane of the mask gets the reduction of their values.
#define KILN_EMU_REDUCE(name, T, kind)                                                           \
  inline T name(unsigned mask, T value,                                                          \
                const ::std::source_location& w = ::std::source_location::current()) {           \
    return (T)(uint32_t)::kiln::emu::collective(::kiln::emu::kind, mask, (uint32_t)value, 0, w); \
  }
KILN_EMU_REDUCE(__reduce_add_sync, unsigned, kReduceAdd)
KILN_EMU_REDUCE(__reduce_add_sync, int, kReduceAdd)
KILN_EMU_REDUCE(__reduce_min_sync, unsigned, kReduceMinU)
KILN_EMU_REDUCE(__reduce_min_sync, int, kReduceMinS)
KILN_EMU_REDUCE(__reduce_max_sync, unsigned, kReduceMaxU)
KILN_EMU_REDUCE(__reduce_max_sync, int, kReduceMaxS)
KILN_EMU_REDUCE(__reduce_and_sync, unsigned, kReduceAnd)
KILN_EMU_REDUCE(__reduce_or_sync, unsigned, kReduceOr)
KILN_EMU_REDUCE(__reduce_xor_sync, unsigned, kReduceXor)
#undef KILN_EMU_REDUCE
inline void __syncwarp(unsigned mask = 0xffffffffu,
                       const ::std::source_location& w = ::std::source_location::current()) {
  ::kiln::emu::collective(::kiln::emu::kSyncWarp, mask, 0, 0, w);
}
