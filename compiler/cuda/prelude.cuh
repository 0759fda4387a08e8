// kiln's CUDA prelude: the types and functions generated kernels are written with. It gives
// every op of kiln's IR exactly the semantics ir/ir.h promises (wrapping signed integers,
// division by zero, saturating float->int casts, f16/bf16/f8 computed in f32 and rounded once,
// IEEE min/max, ...), lines of 1 to 16 lanes with 16-byte vector loads and stores, plane
// (warp) operations on partial planes, and the report buffer through which prints, failed
// asserts and checked-mode faults reach the host. NVRTC compiles it with each kernel; it
// includes no header, so kernels build wherever libnvrtc is.
#pragma once

// The emulation device (cuda-emu) compiles this prelude and the kernel for the host, after
// kiln_emu.h (compiler/cuda/emu/host.h): there every `#ifdef KILN_EMULATION` block gives the host
// implementation of the device code beside it, and KILN_WHERE adds the caller's source position
// (the kernel's DSL line) to the operations the emulator checks. On the GPU both are empty.
#ifndef KILN_EMULATION
#define KILN_WHERE
#define KILN_AT
// Shared arrays, static or placed in the dynamic allocation; local arrays. Every shared array
// starts on 16 bytes, as in the emulator's arena: ldmatrix needs it of a tile's rows.
#define KILN_SHARED(T, name, count, offset) __shared__ __align__(16) T name[count]
#define KILN_SHARED_DYNAMIC(T, name, count, offset) \
  T* const name = reinterpret_cast<T*>(kiln_dynamic_shared + (offset))
#define KILN_SHARED_ALIGNED(T, name, count, offset, align) \
  __shared__ __align__(align)                              \
  T name[count]
#define KILN_DYNAMIC_SHARED_BASE() \
  extern __shared__ __align__(1024) unsigned char kiln_dynamic_shared[]
#define KILN_LOCAL(T, name, count) T name[count]
#endif

namespace kiln {

typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef float f32;
typedef double f64;
struct f16 {
  u16 bits;
};
struct bf16 {
  u16 bits;
};
// OCP FP8: e4m3 ("fn": no infinities, S.1111.111 is NaN, largest 448) and e5m2 (IEEE-like).
struct f8e4m3 {
  u8 bits;
};
struct f8e5m2 {
  u8 bits;
};

// ---- traits ---------------------------------------------------------------------------------

template <class T>
struct traits;
#define KILN_INT_TRAITS(T, U, S, BITS, LO, HI)         \
  template <>                                          \
  struct traits<T> {                                   \
    typedef U uint;                                    \
    static const bool is_float = false, is_signed = S; \
    static const int bits = BITS;                      \
    __device__ static T lowest() { return LO; }        \
    __device__ static T highest() { return HI; }       \
  };
KILN_INT_TRAITS(i8, u8, true, 8, (i8)-128, (i8)127)
KILN_INT_TRAITS(i16, u16, true, 16, (i16)-32768, (i16)32767)
KILN_INT_TRAITS(i32, u32, true, 32, (i32)(-2147483647 - 1), 2147483647)
KILN_INT_TRAITS(i64, u64, true, 64, (i64)(-9223372036854775807LL - 1), 9223372036854775807LL)
KILN_INT_TRAITS(u8, u8, false, 8, 0, 255)
KILN_INT_TRAITS(u16, u16, false, 16, 0, 65535)
KILN_INT_TRAITS(u32, u32, false, 32, 0u, 4294967295u)
KILN_INT_TRAITS(u64, u64, false, 64, 0ull, 18446744073709551615ull)
#undef KILN_INT_TRAITS
template <>
struct traits<bool> {
  static const bool is_float = false, is_signed = false;
  static const int bits = 1;
};
template <>
struct traits<f16> {
  static const bool is_float = true, is_signed = true;
  static const int bits = 16;
};
template <>
struct traits<bf16> {
  static const bool is_float = true, is_signed = true;
  static const int bits = 16;
};
template <>
struct traits<f8e4m3> {
  static const bool is_float = true, is_signed = true;
  static const int bits = 8;
};
template <>
struct traits<f8e5m2> {
  static const bool is_float = true, is_signed = true;
  static const int bits = 8;
};
template <>
struct traits<f32> {
  static const bool is_float = true, is_signed = true;
  static const int bits = 32;
};
template <>
struct traits<f64> {
  static const bool is_float = true, is_signed = true;
  static const int bits = 64;
};

template <bool B, class T = void>
struct enable_if {};
template <class T>
struct enable_if<true, T> {
  typedef T type;
};

// ---- bits and half floats ---------------------------------------------------------------------

// Reinterprets the bits of a value as another type of the same size.
template <class To, class From>
__device__ __forceinline__ To bitcast(const From& x) {
  static_assert(sizeof(To) == sizeof(From), "bitcast needs types of the same size");
  To r;
  memcpy(&r, &x, sizeof(To));
  return r;
}

// cvt.f32.f16 (exact), cvt.rn.f16.f32 and cvt.rn.bf16.f32 (to nearest even; a NaN becomes
// the canonical NaN 0x7fff, as the PTX ISA specifies for half-precision results).
__device__ __forceinline__ f32 to_f32(f16 h) {
#ifdef KILN_EMULATION
  return emu::f16_to_f32(h.bits);
#else
  f32 f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#endif
}
__device__ __forceinline__ f32 to_f32(bf16 b) {
  return __uint_as_float((u32)b.bits << 16);
}
__device__ __forceinline__ f16 f16_of(f32 f) {
  f16 h;
#ifdef KILN_EMULATION
  h.bits = emu::f32_to_f16_rn(f);
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#endif
  return h;
}
__device__ __forceinline__ bf16 bf16_of(f32 f) {
  bf16 b;
#ifdef KILN_EMULATION
  b.bits = emu::f32_to_bf16_rn(f);
#else
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
#endif
  return b;
}
// f64 -> f32 rounded to odd: rounding that again to f16 or bf16 gives the correctly rounded
// result (a direct f64 -> f32 -> f16 would round twice).
__device__ __forceinline__ f32 f32_round_odd(f64 x) {
  f32 r = __double2float_rz(x);
  if ((f64)r != x && x == x) r = __uint_as_float(__float_as_uint(r) | 1u);
  return r;
}

// f8 -> f32, exactly. e5m2 is the high byte of an f16. A normal e4m3's exponent and mantissa,
// placed where an f32 keeps its own, read 2^120 times too small: one multiply rescales them; a
// subnormal is its mantissa times 2^-9 (no f32 subnormal involved, so --ftz cannot lose it).
__device__ __forceinline__ f32 to_f32(f8e5m2 x) {
  return to_f32(f16{(u16)((u32)x.bits << 8)});
}
__device__ __forceinline__ f32 to_f32(f8e4m3 x) {
  const u32 em = x.bits & 0x7fu;
  const f32 a = em == 0x7fu ? __uint_as_float(0x7fc00000u)
                : em < 8u   ? (f32)em * 0x1p-9f
                            : __uint_as_float(em << 20) * 0x1p120f;
  return (x.bits & 0x80u) ? -a : a;
}
// f32 -> f8: to nearest even, saturating at the largest finite value (infinities too), NaN
// to NaN: PTX's cvt.rn.satfinite (sm_89 and later), done with integer arithmetic elsewhere
// (as compiler/cpu/gen.h does): below the smallest normal the float add of a constant rounds,
// above it the f32's bits are rounded at the f8 mantissa and rebiased. f8_bits is that, for
// `mant` mantissa bits, exponent bias `bias` and the largest finite encoding `max_bits`.
__device__ __forceinline__ u8 f8_bits(f32 f, u32 mant, u32 bias, u32 max_bits) {
  const u32 u = __float_as_uint(f), a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
  const u32 shift = 23u - mant, rebias = (127u - bias) << mant;
  u32 m;
  if (a > 0x7f800000u) {
    m = 0x7fu;
  } else if (a < (128u - bias) << 23) {  // below the smallest normal, 2^(1 - bias)
    // 2^(24 - bias - mant), an f32 whose quantum is the f8 subnormals' 2^(1 - bias - mant):
    // adding it makes the f32 adder round there.
    const u32 magic = (151u - bias - mant) << 23;
    m = __float_as_uint(__uint_as_float(a) + __uint_as_float(magic)) - magic;
  } else {
    m = (a + (1u << (shift - 1)) - 1u + ((a >> shift) & 1u)) >> shift;
    m = m < rebias + max_bits ? m - rebias : max_bits;
  }
  return (u8)(sign | m);
}
// f8e4m3_of and f8e5m2_of.
#if !defined(KILN_EMULATION) && __CUDA_ARCH__ >= 890
#define KILN_F8_OF(T, PTX, MANT, BIAS, MAX)                                            \
  __device__ __forceinline__ T T##_of(f32 f) {                                         \
    u16 two;                                                                           \
    asm("cvt.rn.satfinite." PTX "x2.f32 %0, %1, %2;" : "=h"(two) : "f"(0.0f), "f"(f)); \
    T r;                                                                               \
    r.bits = (u8)two;                                                                  \
    return r;                                                                          \
  }
#else
#define KILN_F8_OF(T, PTX, MANT, BIAS, MAX)    \
  __device__ __forceinline__ T T##_of(f32 f) { \
    T r;                                       \
    r.bits = f8_bits(f, MANT, BIAS, MAX);      \
    return r;                                  \
  }
#endif
KILN_F8_OF(f8e4m3, "e4m3", 3, 7, 0x7e)
KILN_F8_OF(f8e5m2, "e5m2", 2, 15, 0x7b)
#undef KILN_F8_OF

// The type arithmetic runs in: f16, bf16 and f8 compute in f32 and round once (ir/ir.h).
template <class T>
struct calc {
  typedef T type;
};
template <>
struct calc<f16> {
  typedef f32 type;
};
template <>
struct calc<bf16> {
  typedef f32 type;
};
template <>
struct calc<f8e4m3> {
  typedef f32 type;
};
template <>
struct calc<f8e5m2> {
  typedef f32 type;
};
template <class T>
__device__ __forceinline__ T up(T x) {
  return x;
}
__device__ __forceinline__ f32 up(f16 x) {
  return to_f32(x);
}
__device__ __forceinline__ f32 up(bf16 x) {
  return to_f32(x);
}
__device__ __forceinline__ f32 up(f8e4m3 x) {
  return to_f32(x);
}
__device__ __forceinline__ f32 up(f8e5m2 x) {
  return to_f32(x);
}
template <class T>
__device__ __forceinline__ T down(typename calc<T>::type x) {
  return x;
}
template <>
__device__ __forceinline__ f16 down<f16>(f32 x) {
  return f16_of(x);
}
template <>
__device__ __forceinline__ bf16 down<bf16>(f32 x) {
  return bf16_of(x);
}
template <>
__device__ __forceinline__ f8e4m3 down<f8e4m3>(f32 x) {
  return f8e4m3_of(x);
}
template <>
__device__ __forceinline__ f8e5m2 down<f8e5m2>(f32 x) {
  return f8e5m2_of(x);
}

// ---- lines ----------------------------------------------------------------------------------

template <int B>
struct line_align {
  static const int value = B >= 16 ? 16 : B;
};

// N lanes of T. Memory holds lines back to back; loads and stores move them in 16-, 8- or
// 4-byte pieces, so an f32x4 is one 128-bit access.
template <class T, int N>
struct alignas(line_align<sizeof(T) * N>::value) line {
  T v[N];
  __device__ T& operator[](int i) { return v[i]; }
  __device__ const T& operator[](int i) const { return v[i]; }
};

template <class T>
struct lanes_of {
  static const int value = 1;
  typedef T elem;
};
template <class T, int N>
struct lanes_of<line<T, N> > {
  static const int value = N;
  typedef T elem;
};

// The moves themselves (memory_load/memory_store); `load` and `store` below are what kernels
// call.
template <class L>
__device__ __forceinline__ L memory_load(const L* p, u32 i) {
  if constexpr (sizeof(L) % 16 == 0) {
    L r;
    const uint4* s = reinterpret_cast<const uint4*>(p + i);
    uint4* d = reinterpret_cast<uint4*>(&r);
#pragma unroll
    for (int k = 0; k < (int)(sizeof(L) / 16); ++k) d[k] = s[k];
    return r;
  } else if constexpr (sizeof(L) == 8) {
    return bitcast<L>(*reinterpret_cast<const uint2*>(p + i));
  } else {
    return p[i];
  }
}
template <class L>
__device__ __forceinline__ void memory_store(L* p, u32 i, const L& x) {
  if constexpr (sizeof(L) % 16 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(&x);
    uint4* d = reinterpret_cast<uint4*>(p + i);
#pragma unroll
    for (int k = 0; k < (int)(sizeof(L) / 16); ++k) d[k] = s[k];
  } else if constexpr (sizeof(L) == 8) {
    *reinterpret_cast<uint2*>(p + i) = bitcast<uint2>(x);
  } else {
    p[i] = x;
  }
}
// Bools live in memory as one byte each (0 or 1); any nonzero byte reads as true.
struct mbool {
  u8 v;
};
__device__ __forceinline__ bool memory_load(const mbool* p, u32 i) {
  return p[i].v != 0;
}
__device__ __forceinline__ void memory_store(mbool* p, u32 i, bool x) {
  p[i].v = x ? 1 : 0;
}
template <int N>
__device__ __forceinline__ line<bool, N> memory_load(const line<mbool, N>* p, u32 i) {
  const line<mbool, N> b = memory_load<line<mbool, N> >(p, i);
  line<bool, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = b[k].v != 0;
  return r;
}
template <int N>
__device__ __forceinline__ void memory_store(line<mbool, N>* p, u32 i, const line<bool, N>& x) {
  line<mbool, N> b;
#pragma unroll
  for (int k = 0; k < N; ++k) b[k].v = x[k] ? 1 : 0;
  memory_store<line<mbool, N> >(p, i, b);
}

// Loads and stores of global memory (and, on the GPU, of shared and local arrays). The emulator
// checks each against the device's allocations: an access outside every one is reported as the
// GPU's illegal-address error would be, and skipped (a load gives zero).
template <class L>
__device__ __forceinline__ auto load(const L* p, u32 i KILN_WHERE) -> decltype(memory_load(p, i)) {
#ifdef KILN_EMULATION
  if (!emu::access(p + i, sizeof(L), emu::kLoad, where)) return {};
#endif
  return memory_load(p, i);
}
template <class L, class V>
__device__ __forceinline__ void store(L* p, u32 i, const V& x KILN_WHERE) {
#ifdef KILN_EMULATION
  if (!emu::access(p + i, sizeof(L), emu::kStore, where)) return;
#endif
  memory_store(p, i, x);
}

#ifdef KILN_EMULATION
// On the host, shared and local arrays know their length: an index past it is reported with
// the kernel's line (unchecked code included) and the access skipped; shared accesses also go
// to the emulator's race detector.
template <class T>
struct bounded {
  T* p;
  u32 n;
  u32 space;
  // An element, for atomics (&shared[i]); an index past the end gets the unit's scratch slot.
  T& at(u32 i, const emu::Site& where) const {
    if (i < n) return p[i];
    emu::out_of_bounds(space, emu::kAtomic, i, n, where);
    return *reinterpret_cast<T*>(emu::scratch());
  }
};
template <class L>
__device__ __forceinline__ auto load(const bounded<L>& a, u32 i KILN_WHERE)
    -> decltype(memory_load(a.p, i)) {
  if (i >= a.n) {
    emu::out_of_bounds(a.space, emu::kLoad, i, a.n, where);
    return {};
  }
  if (a.space == emu::kShared)
    emu::access(a.p + i, sizeof(L), emu::kLoad | emu::kSharedSpace, where);
  return memory_load(a.p, i);
}
template <class L, class V>
__device__ __forceinline__ void store(const bounded<L>& a, u32 i, const V& x KILN_WHERE) {
  if (i >= a.n) {
    emu::out_of_bounds(a.space, emu::kStore, i, a.n, where);
    return;
  }
  if (a.space == emu::kShared)
    emu::access(a.p + i, sizeof(L), emu::kStore | emu::kSharedSpace, where);
  memory_store(a.p, i, x);
}
#endif

// Short names for lines: f32x4 is line<f32, 4>.
#define KILN_LINE_NAMES(T)  \
  typedef line<T, 2> T##x2; \
  typedef line<T, 4> T##x4; \
  typedef line<T, 8> T##x8; \
  typedef line<T, 16> T##x16;
KILN_LINE_NAMES(i8)
KILN_LINE_NAMES(i16) KILN_LINE_NAMES(i32) KILN_LINE_NAMES(i64) KILN_LINE_NAMES(u8)
    KILN_LINE_NAMES(u16) KILN_LINE_NAMES(u32) KILN_LINE_NAMES(u64) KILN_LINE_NAMES(f16)
        KILN_LINE_NAMES(bf16) KILN_LINE_NAMES(f32) KILN_LINE_NAMES(f64) KILN_LINE_NAMES(f8e4m3)
            KILN_LINE_NAMES(f8e5m2) KILN_LINE_NAMES(mbool) typedef line<bool, 2> boolx2;
typedef line<bool, 4> boolx4;
typedef line<bool, 8> boolx8;
typedef line<bool, 16> boolx16;
#undef KILN_LINE_NAMES

template <class T, int N>
__device__ __forceinline__ line<T, N> broadcast(T x) {
  line<T, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = x;
  return r;
}
template <class T, int N>
__device__ __forceinline__ T extract(const line<T, N>& x, int lane) {
  return x[lane];
}
template <class T, int N>
__device__ __forceinline__ line<T, N> insert(line<T, N> x, int lane, T v) {
  x[lane] = v;
  return x;
}

// Lane-by-lane versions of every scalar function below.
#define KILN_LINE1(name)                                             \
  template <class T, int N>                                          \
  __device__ __forceinline__ line<T, N> name(const line<T, N>& a) {  \
    line<T, N> r;                                                    \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r[k] = name(a[k]); \
    return r;                                                        \
  }
#define KILN_LINE2(name)                                                                 \
  template <class T, int N>                                                              \
  __device__ __forceinline__ line<T, N> name(const line<T, N>& a, const line<T, N>& b) { \
    line<T, N> r;                                                                        \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r[k] = name(a[k], b[k]);               \
    return r;                                                                            \
  }
#define KILN_LINE3(name)                                                               \
  template <class T, int N>                                                            \
  __device__ __forceinline__ line<T, N> name(const line<T, N>& a, const line<T, N>& b, \
                                             const line<T, N>& c) {                    \
    line<T, N> r;                                                                      \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r[k] = name(a[k], b[k], c[k]);       \
    return r;                                                                          \
  }
#define KILN_LINE_CMP(name)                                                                 \
  template <class T, int N>                                                                 \
  __device__ __forceinline__ line<bool, N> name(const line<T, N>& a, const line<T, N>& b) { \
    line<bool, N> r;                                                                        \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r[k] = name(a[k], b[k]);                  \
    return r;                                                                               \
  }
#define KILN_LINE_TEST(name)                                           \
  template <class T, int N>                                            \
  __device__ __forceinline__ line<bool, N> name(const line<T, N>& a) { \
    line<bool, N> r;                                                   \
    _Pragma("unroll") for (int k = 0; k < N; ++k) r[k] = name(a[k]);   \
    return r;                                                          \
  }

// ---- arithmetic ---------------------------------------------------------------------------------

// Integers wrap: signed arithmetic runs in the unsigned type of the same width.
#define KILN_INT_OP(name, expr)                                                                 \
  template <class T>                                                                            \
  __device__ __forceinline__ typename enable_if<!traits<T>::is_float, T>::type name(T a, T b) { \
    typedef typename traits<T>::uint U;                                                         \
    return (T)(U)(expr);                                                                        \
  }
KILN_INT_OP(add, (U)a + (U)b)
KILN_INT_OP(sub, (U)a - (U)b)
KILN_INT_OP(mul, (U)a*(U)b)
#undef KILN_INT_OP
// Floats: in f32 for f16/bf16, rounded once.
#define KILN_FLOAT_OP(name, expr)                                                                \
  template <class T>                                                                             \
  __device__ __forceinline__ typename enable_if<traits<T>::is_float, T>::type name(T a_, T b_) { \
    const typename calc<T>::type a = up(a_), b = up(b_);                                         \
    return down<T>(expr);                                                                        \
  }
KILN_FLOAT_OP(add, a + b)
KILN_FLOAT_OP(sub, a - b)
KILN_FLOAT_OP(mul, a* b)
KILN_FLOAT_OP(div, a / b)
KILN_FLOAT_OP(rem, ::fmod(a, b))
#ifdef KILN_EMULATION  // min.f32/f64 and max: a NaN operand, even a signaling one, is ignored
KILN_FLOAT_OP(min, emu::min_num(a, b))
KILN_FLOAT_OP(max, emu::max_num(a, b))
#else
KILN_FLOAT_OP(min, ::fmin(a, b))
KILN_FLOAT_OP(max, ::fmax(a, b))
#endif
KILN_FLOAT_OP(pow, ::pow(a, b))
#undef KILN_FLOAT_OP

// x / 0 == 0, x % 0 == x, MIN / -1 == MIN, MIN % -1 == 0; division rounds toward zero.
template <class T>
__device__ __forceinline__ typename enable_if<!traits<T>::is_float, T>::type div(T a, T b) {
  if (b == 0) return 0;
  if (traits<T>::is_signed && b == (T)-1) return (T)(0 - (typename traits<T>::uint)a);
  return (T)(a / b);
}
template <class T>
__device__ __forceinline__ typename enable_if<!traits<T>::is_float, T>::type rem(T a, T b) {
  if (b == 0) return a;
  if (traits<T>::is_signed && b == (T)-1) return 0;
  return (T)(a % b);
}
template <class T>
__device__ __forceinline__ typename enable_if<!traits<T>::is_float, T>::type min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
__device__ __forceinline__ typename enable_if<!traits<T>::is_float, T>::type max(T a, T b) {
  return a < b ? b : a;
}
template <class T>
__device__ __forceinline__ typename enable_if<!traits<T>::is_float, T>::type neg(T a) {
  return (T)(0 - (typename traits<T>::uint)a);
}
template <class T>
__device__ __forceinline__ typename enable_if<traits<T>::is_float, T>::type neg(T a) {
  return down<T>(-up(a));
}
template <class T>
__device__ __forceinline__ typename enable_if<!traits<T>::is_float, T>::type abs(T a) {
  return traits<T>::is_signed && a < (T)0 ? neg(a) : a;
}
template <class T>
__device__ __forceinline__ typename enable_if<traits<T>::is_float, T>::type abs(T a) {
  return down<T>(::fabs(up(a)));
}
template <class T>
__device__ __forceinline__ T clamp(T x, T lo, T hi) {
  return min(max(x, lo), hi);
}
// fma rounds once (for f16 and bf16: once to f32, then to the type).
template <class T>
__device__ __forceinline__ typename enable_if<traits<T>::is_float, T>::type fma(T a, T b, T c) {
  return down<T>(::fma(up(a), up(b), up(c)));
}

// Shift amounts are taken modulo the bit width; shr is arithmetic for signed types.
template <class T>
__device__ __forceinline__ T shl(T a, T b) {
  typedef typename traits<T>::uint U;
  return (T)(U)((U)a << ((U)b & (U)(traits<T>::bits - 1)));
}
template <class T>
__device__ __forceinline__ T shr(T a, T b) {
  typedef typename traits<T>::uint U;
  return (T)(a >> ((U)b & (U)(traits<T>::bits - 1)));
}
template <class T>
__device__ __forceinline__ T band(T a, T b) {
  return (T)(a & b);
}
template <class T>
__device__ __forceinline__ T bor(T a, T b) {
  return (T)(a | b);
}
template <class T>
__device__ __forceinline__ T bxor(T a, T b) {
  return (T)(a ^ b);
}
template <class T>
__device__ __forceinline__ T bnot(T a) {
  return (T)~a;
}
__device__ __forceinline__ bool band(bool a, bool b) {
  return a && b;
}
__device__ __forceinline__ bool bor(bool a, bool b) {
  return a || b;
}
__device__ __forceinline__ bool bxor(bool a, bool b) {
  return a != b;
}
__device__ __forceinline__ bool bnot(bool a) {
  return !a;
}

// Comparisons are ordered: false with NaN, except ne.
template <class T>
__device__ __forceinline__ bool eq(T a, T b) {
  return up(a) == up(b);
}
template <class T>
__device__ __forceinline__ bool ne(T a, T b) {
  return !(up(a) == up(b));
}
template <class T>
__device__ __forceinline__ bool lt(T a, T b) {
  return up(a) < up(b);
}
template <class T>
__device__ __forceinline__ bool le(T a, T b) {
  return up(a) <= up(b);
}
template <class T>
__device__ __forceinline__ bool gt(T a, T b) {
  return up(a) > up(b);
}
template <class T>
__device__ __forceinline__ bool ge(T a, T b) {
  return up(a) >= up(b);
}

template <class T>
__device__ __forceinline__ T select(bool c, T a, T b) {
  return c ? a : b;
}
template <class T, int N>
__device__ __forceinline__ line<T, N> select(const line<bool, N>& c, const line<T, N>& a,
                                             const line<T, N>& b) {
  line<T, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = c[k] ? a[k] : b[k];
  return r;
}

// ---- math (floats) ------------------------------------------------------------------------------

#define KILN_MATH1(name, expr)                                                             \
  template <class T>                                                                       \
  __device__ __forceinline__ typename enable_if<traits<T>::is_float, T>::type name(T a_) { \
    const typename calc<T>::type a = up(a_);                                               \
    return down<T>(expr);                                                                  \
  }
KILN_MATH1(sqrt, ::sqrt(a))
KILN_MATH1(rsqrt, ::rsqrt(a))
KILN_MATH1(exp, ::exp(a))
KILN_MATH1(exp2, ::exp2(a))
KILN_MATH1(log, ::log(a))
KILN_MATH1(log2, ::log2(a))
KILN_MATH1(sin, ::sin(a))
KILN_MATH1(cos, ::cos(a))
KILN_MATH1(tanh, ::tanh(a))
KILN_MATH1(floor, ::floor(a))
KILN_MATH1(ceil, ::ceil(a))
KILN_MATH1(round, ::round(a))
KILN_MATH1(trunc, ::trunc(a))
#undef KILN_MATH1
template <class T>
__device__ __forceinline__ bool is_nan(T a) {
  return ::isnan(up(a));
}
template <class T>
__device__ __forceinline__ bool is_inf(T a) {
  return ::isinf(up(a));
}

KILN_LINE2(add)
KILN_LINE2(sub) KILN_LINE2(mul) KILN_LINE2(div) KILN_LINE2(rem) KILN_LINE2(min) KILN_LINE2(max)
    KILN_LINE2(pow) KILN_LINE1(neg) KILN_LINE1(abs) KILN_LINE3(clamp) KILN_LINE3(fma)
        KILN_LINE2(shl) KILN_LINE2(shr) KILN_LINE2(band) KILN_LINE2(bor) KILN_LINE2(bxor)
            KILN_LINE1(bnot) KILN_LINE1(sqrt) KILN_LINE1(rsqrt) KILN_LINE1(exp) KILN_LINE1(exp2)
                KILN_LINE1(log) KILN_LINE1(log2) KILN_LINE1(sin) KILN_LINE1(cos) KILN_LINE1(tanh)
                    KILN_LINE1(floor) KILN_LINE1(ceil) KILN_LINE1(round) KILN_LINE1(trunc)
                        KILN_LINE_CMP(eq) KILN_LINE_CMP(ne) KILN_LINE_CMP(lt) KILN_LINE_CMP(le)
                            KILN_LINE_CMP(gt) KILN_LINE_CMP(ge) KILN_LINE_TEST(is_nan)
                                KILN_LINE_TEST(is_inf)

    // ---- conversions
    // ---------------------------------------------------------------------------------

    // Float -> integer: toward zero, saturating, NaN -> 0. `x` is exact (f32 or f64).
    template <class I, class F>
    __device__ __forceinline__ I float_to_int(F x) {
  if (x != x) return 0;
  const F lo = traits<I>::is_signed ? -(F)((u64)1 << (traits<I>::bits - 1)) : (F)0;
  const F hi = (F)((u64)1 << (traits<I>::bits - 1 - (traits<I>::is_signed ? 1 : 0))) *
               (F)2;  // 2^(bits-1) or 2^bits
  if (x <= lo) return traits<I>::lowest();
  if (x >= hi) return traits<I>::highest();
  return (I)x;
}
// Integer -> bf16: toward zero into f32, the lost bits kept as a sticky lowest bit (rounding
// to odd), then rounded once to bf16.
template <class I>
__device__ __forceinline__ bf16 int_to_bf16(I x) {
  f32 r;
  if (traits<I>::is_signed)
    r = __ll2float_rz((i64)x);
  else
    r = __ull2float_rz((u64)x);
  const bool exact = traits<I>::is_signed ? (i64)x == (i64)r || r >= 9.2233720368547758e18f
                                          : (u64)x == (u64)r || r >= 1.8446744073709552e19f;
  if (!exact) r = __uint_as_float(__float_as_uint(r) | 1u);
  return bf16_of(r);
}

template <class To>
struct convert;
// To an integer type: from integers by truncation or extension (by the source's sign).
template <class To>
struct convert {
  template <class From>
  __device__ static To from(From x) {
    return (To)x;
  }
  __device__ static To from(bool x) { return x ? 1 : 0; }
  __device__ static To from(f16 x) { return float_to_int<To>(to_f32(x)); }
  __device__ static To from(bf16 x) { return float_to_int<To>(to_f32(x)); }
  __device__ static To from(f8e4m3 x) { return float_to_int<To>(to_f32(x)); }
  __device__ static To from(f8e5m2 x) { return float_to_int<To>(to_f32(x)); }
  __device__ static To from(f32 x) { return float_to_int<To>(x); }
  __device__ static To from(f64 x) { return float_to_int<To>(x); }
};
template <>
struct convert<bool> {
  template <class From>
  __device__ static bool from(From x) {
    return !(up(x) == 0);
  }
};
template <>
struct convert<f32> {
  template <class From>
  __device__ static f32 from(From x) {
    return (f32)up(x);
  }
  __device__ static f32 from(bool x) { return x ? 1.0f : 0.0f; }
};
template <>
struct convert<f64> {
  template <class From>
  __device__ static f64 from(From x) {
    return (f64)up(x);
  }
  __device__ static f64 from(bool x) { return x ? 1.0 : 0.0; }
};
template <>
struct convert<f16> {
  // Integers: exact in f32 up to 2^24, and anything larger overflows f16 either way.
  template <class From>
  __device__ static f16 from(From x) {
    return f16_of((f32)x);
  }
  __device__ static f16 from(bool x) { return f16_of(x ? 1.0f : 0.0f); }
  __device__ static f16 from(f16 x) { return x; }
  __device__ static f16 from(bf16 x) { return f16_of(to_f32(x)); }
  __device__ static f16 from(f8e4m3 x) { return f16_of(to_f32(x)); }
  __device__ static f16 from(f8e5m2 x) { return f16_of(to_f32(x)); }
  __device__ static f16 from(f32 x) { return f16_of(x); }
  __device__ static f16 from(f64 x) { return f16_of(f32_round_odd(x)); }
};
template <>
struct convert<bf16> {
  template <class From>
  __device__ static bf16 from(From x) {
    return int_to_bf16(x);
  }
  __device__ static bf16 from(bool x) { return bf16_of(x ? 1.0f : 0.0f); }
  __device__ static bf16 from(f16 x) { return bf16_of(to_f32(x)); }
  __device__ static bf16 from(bf16 x) { return x; }
  __device__ static bf16 from(f8e4m3 x) { return bf16_of(to_f32(x)); }
  __device__ static bf16 from(f8e5m2 x) { return bf16_of(to_f32(x)); }
  __device__ static bf16 from(f32 x) { return bf16_of(x); }
  __device__ static bf16 from(f64 x) { return bf16_of(f32_round_odd(x)); }
};
// To f8: integers through f32 (exact up to 2^24, and larger ones saturate either way), floats
// through f32 (f64 rounded to odd first, so that the value is rounded once).
#define KILN_F8_CONVERT(T)                                               \
  template <>                                                            \
  struct convert<T> {                                                    \
    template <class From>                                                \
    __device__ static T from(From x) {                                   \
      return T##_of((f32)x);                                             \
    }                                                                    \
    __device__ static T from(bool x) { return T##_of(x ? 1.0f : 0.0f); } \
    __device__ static T from(f16 x) { return T##_of(to_f32(x)); }        \
    __device__ static T from(bf16 x) { return T##_of(to_f32(x)); }       \
    __device__ static T from(f8e4m3 x) { return T##_of(to_f32(x)); }     \
    __device__ static T from(f8e5m2 x) { return T##_of(to_f32(x)); }     \
    __device__ static T from(f32 x) { return T##_of(x); }                \
    __device__ static T from(f64 x) { return T##_of(f32_round_odd(x)); } \
  };
KILN_F8_CONVERT(f8e4m3)
KILN_F8_CONVERT(f8e5m2)
#undef KILN_F8_CONVERT
template <class To, class From>
__device__ __forceinline__ To cast(From x) {
  return convert<To>::from(x);
}
template <class To, class From, int N>
__device__ __forceinline__ line<To, N> cast(const line<From, N>& x) {
  line<To, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = convert<To>::from(x[k]);
  return r;
}

// ---- builtins and planes -----------------------------------------------------------------------

// Linear positions (ir/ir.h); the cube size is a constant of each kernel.
__device__ __forceinline__ u32 cube_linear() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
__device__ __forceinline__ u32 cube_count_linear() {
  return gridDim.x * gridDim.y * gridDim.z;
}
__device__ __forceinline__ u32 unit_linear() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
// The unit that issues a cube operation: unit 0, or in a pipeline's produce region (which only
// the first unit of the producer plane runs) that unit, KILN_PRODUCER: the kernel defines it as
// its consumer units' count when it has a pipeline (nothing before a pipeline issues cube
// operations, and the producer plane leaves at its end).
#ifndef KILN_PRODUCER
#define KILN_PRODUCER 0xffffffffu
#endif
__device__ __forceinline__ bool issues() {
  const u32 u = unit_linear();
  return u == 0 || u == KILN_PRODUCER;
}

// The units of this unit's plane that exist (the last plane of a cube may be partial).
__device__ __forceinline__ u32 plane_width(u32 units) {
  const u32 first = unit_linear() & ~31u;
  return units - first >= 32u ? 32u : units - first;
}
__device__ __forceinline__ u32 plane_mask(u32 units) {
  const u32 w = plane_width(units);
  return w == 32u ? 0xffffffffu : (1u << w) - 1u;
}

// Shuffles of any type, as 32- or 64-bit words.
template <class T>
__device__ __forceinline__ T shfl(u32 mask, T x, u32 src KILN_WHERE) {
  if constexpr (sizeof(T) == 8) {
    return bitcast<T>(__shfl_sync(mask, bitcast<u64>(x), (int)src KILN_AT));
  } else if constexpr (sizeof(T) == 4) {
    return bitcast<T>(__shfl_sync(mask, bitcast<u32>(x), (int)src KILN_AT));
  } else {
    u32 w = 0;
    memcpy(&w, &x, sizeof(T));
    w = __shfl_sync(mask, w, (int)src KILN_AT);
    T r;
    memcpy(&r, &w, sizeof(T));
    return r;
  }
}
template <class T, int N>
__device__ __forceinline__ line<T, N> shfl(u32 mask, const line<T, N>& x, u32 src KILN_WHERE) {
  line<T, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = shfl(mask, x[k], src KILN_AT);
  return r;
}

// plane.broadcast / plane.shuffle: the value of lane `src`; a lane that does not exist reads
// the unit's own value.
template <class T>
__device__ __forceinline__ T plane_shuffle(u32 units, const T& x, u32 src KILN_WHERE) {
  const u32 lane = unit_linear() & 31u;
  return shfl(plane_mask(units), x, src < plane_width(units) ? src : lane KILN_AT);
}
template <class T>
__device__ __forceinline__ T plane_shuffle_xor(u32 units, const T& x, u32 m KILN_WHERE) {
  const u32 lane = unit_linear() & 31u;
  const u32 src = lane ^ m;
  return shfl(plane_mask(units), x, src < plane_width(units) ? src : lane KILN_AT);
}

// Tree reductions over the lanes that exist; every unit gets the result.
struct op_add {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return add(a, b);
  }
};
struct op_min {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return min(a, b);
  }
};
struct op_max {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return max(a, b);
  }
};
template <class T, class Op>
__device__ __forceinline__ T plane_reduce(u32 units, T x, Op op KILN_WHERE) {
  const u32 mask = plane_mask(units), w = plane_width(units), lane = unit_linear() & 31u;
#pragma unroll
  for (u32 off = 16; off > 0; off >>= 1) {
    const T other = shfl(mask, x, lane + off < w ? lane + off : lane KILN_AT);
    if (lane + off < w) x = op(x, other);
  }
  return shfl(mask, x, 0u KILN_AT);
}
template <class T>
__device__ __forceinline__ T plane_sum(u32 units, T x KILN_WHERE) {
  return plane_reduce(units, x, op_add() KILN_AT);
}
template <class T>
__device__ __forceinline__ T plane_min(u32 units, T x KILN_WHERE) {
  return plane_reduce(units, x, op_min() KILN_AT);
}
template <class T>
__device__ __forceinline__ T plane_max(u32 units, T x KILN_WHERE) {
  return plane_reduce(units, x, op_max() KILN_AT);
}
__device__ __forceinline__ bool plane_any(u32 units, bool x KILN_WHERE) {
  return __any_sync(plane_mask(units), x KILN_AT) != 0;
}
__device__ __forceinline__ bool plane_all(u32 units, bool x KILN_WHERE) {
  return __all_sync(plane_mask(units), x KILN_AT) != 0;
}
template <int N>
__device__ __forceinline__ line<bool, N> plane_any(u32 units, const line<bool, N>& x KILN_WHERE) {
  line<bool, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = plane_any(units, x[k] KILN_AT);
  return r;
}
template <int N>
__device__ __forceinline__ line<bool, N> plane_all(u32 units, const line<bool, N>& x KILN_WHERE) {
  line<bool, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = plane_all(units, x[k] KILN_AT);
  return r;
}
__device__ __forceinline__ void sync_plane(u32 units KILN_WHERE) {
  __syncwarp(plane_mask(units) KILN_AT);
}

// ---- atomics (32- and 64-bit, relaxed)
// ------------------------------------------------------------

// The address of element i of an array, for atomics (on the host: checked against its length).
template <class T>
__device__ __forceinline__ T* element(T* p, u32 i) {
  return p + i;
}
#ifdef KILN_EMULATION
template <class T>
T* element(const bounded<T>& a, u32 i KILN_WHERE) {
  return &a.at(i, where);
}
#define KILN_EMU_ATOMIC(p)                                       \
  if (!emu::access(p, sizeof(*p), emu::kAtomic, where)) return { \
    }
#else
#define KILN_EMU_ATOMIC(p)
#endif

__device__ __forceinline__ i32 atomic_add(i32* p, i32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicAdd(p, v);
}
__device__ __forceinline__ u32 atomic_add(u32* p, u32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicAdd(p, v);
}
__device__ __forceinline__ i64 atomic_add(i64* p, i64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return (i64)atomicAdd((u64*)p, (u64)v);
}
__device__ __forceinline__ u64 atomic_add(u64* p, u64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicAdd(p, v);
}
__device__ __forceinline__ f32 atomic_add(f32* p, f32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicAdd(p, v);
}
__device__ __forceinline__ f64 atomic_add(f64* p, f64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicAdd(p, v);
}
__device__ __forceinline__ i32 atomic_min(i32* p, i32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMin(p, v);
}
__device__ __forceinline__ u32 atomic_min(u32* p, u32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMin(p, v);
}
__device__ __forceinline__ i64 atomic_min(i64* p, i64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMin((long long*)p, (long long)v);
}
__device__ __forceinline__ u64 atomic_min(u64* p, u64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMin(p, v);
}
__device__ __forceinline__ i32 atomic_max(i32* p, i32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMax(p, v);
}
__device__ __forceinline__ u32 atomic_max(u32* p, u32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMax(p, v);
}
__device__ __forceinline__ i64 atomic_max(i64* p, i64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMax((long long*)p, (long long)v);
}
__device__ __forceinline__ u64 atomic_max(u64* p, u64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicMax(p, v);
}
__device__ __forceinline__ i32 atomic_exchange(i32* p, i32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicExch(p, v);
}
__device__ __forceinline__ u32 atomic_exchange(u32* p, u32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicExch(p, v);
}
__device__ __forceinline__ i64 atomic_exchange(i64* p, i64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return (i64)atomicExch((u64*)p, (u64)v);
}
__device__ __forceinline__ u64 atomic_exchange(u64* p, u64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicExch(p, v);
}
__device__ __forceinline__ f32 atomic_exchange(f32* p, f32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicExch(p, v);
}
__device__ __forceinline__ f64 atomic_exchange(f64* p, f64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return __longlong_as_double((long long)atomicExch((u64*)p, (u64)__double_as_longlong(v)));
}
__device__ __forceinline__ i32 atomic_cas(i32* p, i32 c, i32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicCAS(p, c, v);
}
__device__ __forceinline__ u32 atomic_cas(u32* p, u32 c, u32 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicCAS(p, c, v);
}
__device__ __forceinline__ i64 atomic_cas(i64* p, i64 c, i64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return (i64)atomicCAS((u64*)p, (u64)c, (u64)v);
}
__device__ __forceinline__ u64 atomic_cas(u64* p, u64 c, u64 v KILN_WHERE) {
  KILN_EMU_ATOMIC(p);
  return atomicCAS(p, c, v);
}

// ---- loops
// -----------------------------------------------------------------------------------------

// `for i = a to b step s` runs i = a, a+s, ... while i < b (s > 0) or i > b (s < 0); s == 0
// runs nothing. The trip count is found first, so the index never overflows.
template <class T>
__device__ __forceinline__ typename traits<T>::uint trip_count(T a, T b, T s) {
  typedef typename traits<T>::uint U;
  if (s > (T)0 && a < b) return (U)((U)((U)b - (U)a - 1u) / (U)s + 1u);
  if (traits<T>::is_signed && s < (T)0 && b < a)
    return (U)((U)((U)a - (U)b - 1u) / (U)(0 - (U)s) + 1u);
  return 0;
}
template <class T>
__device__ __forceinline__ T for_index(T a, typename traits<T>::uint k, T s) {
  typedef typename traits<T>::uint U;
  return (T)(U)((U)a + k * (U)s);
}

// ---- reports: prints, failed asserts, checked-mode faults
// ------------------------------------------

// The report buffer of a stream (runtime/cuda/report.h reads it at sync). Faults and asserts
// keep the smallest key (launch, cube, unit) so the host reports the first one; prints are
// records appended to an arena.
struct fault_entry {
  u64 key;
  u32 site, index, bound, pad;
};
struct report {
  u64 fault_key;  // the smallest key of a fault so far (~0: none)
  u64 assert_key;
  u32 fault_count, assert_count;
  u32 print_bytes, prints_dropped;
  u32 print_capacity, pad;
  fault_entry faults[32];
  fault_entry asserts[32];
  // then print_capacity bytes of records: u32 size (bit 31: dropped), u32 site, u64 key, bits
};

__device__ __forceinline__ u64 report_key(u32 launch, u32 cube, u32 unit) {
  return ((u64)launch << 42) | ((u64)cube << 10) | (u64)(unit & 1023u);
}
__device__ __forceinline__ void record(u64* min_key, u32* count, fault_entry* list, u64 key,
                                       u32 site, u32 index, u32 bound) {
  // Only a key that lowers the minimum is recorded, so the smallest is always among them.
  if (atomicMin((unsigned long long*)min_key, (unsigned long long)key) <= key) return;
  const u32 at = atomicAdd(count, 1u);
  if (at < 32u) {
    fault_entry e;
    e.key = key;
    e.site = site;
    e.index = index;
    e.bound = bound;
    e.pad = 0;
    list[at] = e;
  }
}
template <class T>
__device__ __noinline__ T fault(report* r, u64 key, u32 site, u32 index, u32 bound) {
  record(&r->fault_key, &r->fault_count, r->faults, key, site, index, bound);
  T zero;
  memset(&zero, 0, sizeof zero);
  return zero;
}
__device__ __noinline__ void fault_store(report* r, u64 key, u32 site, u32 index, u32 bound) {
  record(&r->fault_key, &r->fault_count, r->faults, key, site, index, bound);
}
__device__ __noinline__ void assert_failed(report* r, u64 key, u32 site) {
  record(&r->assert_key, &r->assert_count, r->asserts, key, site, 0, 0);
}
__device__ __noinline__ void print(report* r, u64 key, u32 site, const u64* bits, u32 count) {
  const u32 size = 16u + 8u * count;
  const u32 at = atomicAdd(&r->print_bytes, size);
  unsigned char* arena = reinterpret_cast<unsigned char*>(r + 1);
  if (at + size > r->print_capacity) {
    atomicAdd(&r->prints_dropped, 1u);
    if (at + 4u <= r->print_capacity) *reinterpret_cast<u32*>(arena + at) = 0x80000000u;
    return;
  }
  u32* head = reinterpret_cast<u32*>(arena + at);
  head[1] = site;
  *reinterpret_cast<u64*>(arena + at + 8) = key;
  for (u32 i = 0; i < count; ++i) *reinterpret_cast<u64*>(arena + at + 16 + 8 * i) = bits[i];
  head[0] = size;
}
template <class T>
__device__ __forceinline__ u64 print_bits(T x) {
  u64 b = 0;
  memcpy(&b, &x, sizeof(T));
  return b;
}

// ---- matrix fragments: mma.sync (sm_80 and later)
// ------------------------------------------------

// A plane's fragment is spread over its 32 lanes as the PTX ISA lays out the operands of
// mma.sync ("Matrix Fragments for mma.m16n8k16 / m16n8k8 / m16n8k32"): a fragment of shape
// m x n x k is a grid of instruction tiles (A: 16 x ks, B: ks x 8, accumulator: 16 x 8, where ks
// is 16 for f16/bf16, 8 for tf32 and 32 for i8/u8 and the f8 types: m16n8k32 lays out 8-bit
// floats as it does 8-bit integers), tile after tile in each lane's registers.
// With g = lane / 4 and t = lane % 4, P elements packed per 32-bit register (2, 1, 4) and
// register r holding elements h = 0..P-1:
//   A   row g + 8 * (r & 1),            col P * t + h + ks/2 * (r >> 1)
//   B   row P * t + h + ks/2 * r,       col g
//   acc row g + 8 * (e >> 1),           col 2 * t + (e & 1)      (element e = 0..3)
template <class T>
struct mma_input;
template <>
struct mma_input<f16> {
  static const int ks = 16, pack = 2;
};
template <>
struct mma_input<bf16> {
  static const int ks = 16, pack = 2;
};
template <>
struct mma_input<f32> {
  static const int ks = 8, pack = 1;
};  // tf32
template <>
struct mma_input<i8> {
  static const int ks = 32, pack = 4;
};
template <>
struct mma_input<u8> {
  static const int ks = 32, pack = 4;
};
template <>
struct mma_input<f8e4m3> {
  static const int ks = 32, pack = 4;
};  // sm_89 and later
template <>
struct mma_input<f8e5m2> {
  static const int ks = 32, pack = 4;
};

template <class T, int M, int N, int K>
struct alignas(4) frag_a {
  typedef T elem;
  static const int ks = mma_input<T>::ks, pack = mma_input<T>::pack, per_tile = ks / 2,
                   k_tiles = K / ks, count = (M / 16) * k_tiles * per_tile;
  T x[count];
  __device__ static void at(int e, u32 lane, u32& row, u32& col) {
    const int tile = e / per_tile, w = e % per_tile, r = w / pack, h = w % pack;
    row = (u32)(tile / k_tiles * 16) + (lane >> 2) + 8u * (u32)(r & 1);
    col = (u32)(tile % k_tiles * ks) + (u32)pack * (lane & 3u) + (u32)h + (u32)(ks / 2 * (r >> 1));
  }
};
template <class T, int M, int N, int K>
struct alignas(4) frag_b {
  typedef T elem;
  static const int ks = mma_input<T>::ks, pack = mma_input<T>::pack, per_tile = ks / 4,
                   n_tiles = N / 8, count = (K / ks) * n_tiles * per_tile;
  T x[count];
  __device__ static void at(int e, u32 lane, u32& row, u32& col) {
    const int tile = e / per_tile, w = e % per_tile, r = w / pack, h = w % pack;
    row = (u32)(tile / n_tiles * ks) + (u32)pack * (lane & 3u) + (u32)h + (u32)(ks / 2 * r);
    col = (u32)(tile % n_tiles * 8) + (lane >> 2);
  }
};
template <class T, int M, int N, int K>
struct frag_acc {
  typedef T elem;
  static const int n_tiles = N / 8, count = (M / 16) * n_tiles * 4;
  T x[count];
  __device__ static void at(int e, u32 lane, u32& row, u32& col) {
    const int tile = e / 4, w = e % 4;
    row = (u32)(tile / n_tiles * 16) + (lane >> 2) + 8u * (u32)(w >> 1);
    col = (u32)(tile % n_tiles * 8) + 2u * (lane & 3u) + (u32)(w & 1);
  }
};

// The rows and columns of a fragment's tile (A: m x k, B: k x n, accumulator: m x n).
template <class F>
struct frag_dims;
template <class T, int M, int N, int K>
struct frag_dims<frag_a<T, M, N, K> > {
  static const u32 rows = M, cols = K;
};
template <class T, int M, int N, int K>
struct frag_dims<frag_b<T, M, N, K> > {
  static const u32 rows = K, cols = N;
};
template <class T, int M, int N, int K>
struct frag_dims<frag_acc<T, M, N, K> > {
  static const u32 rows = M, cols = N;
};

// cvt.rna.tf32.f32: to the nearest tf32 (10 mantissa bits), ties away from zero, kept in an f32.
__device__ __forceinline__ f32 tf32_round(f32 x) {
#ifdef KILN_EMULATION
  const u32 b = __float_as_uint(x);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;  // infinities and NaN keep their bits
  return __uint_as_float((b + 0x1000u) & 0xffffe000u);
#else
  u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
#endif
}
template <class T>
__device__ __forceinline__ T frag_in(T x) {
  return x;
}
__device__ __forceinline__ f32 frag_in(f32 x) {
  return tf32_round(x);
}
template <class F>
struct frag_is_input {
  static const bool value = true;
};
template <class T, int M, int N, int K>
struct frag_is_input<frag_acc<T, M, N, K> > {
  static const bool value = false;
};

// Every element of the fragment is `v`.
template <class F, class T>
__device__ __forceinline__ void frag_fill(F& f, T v) {
  for (int e = 0; e < F::count; ++e) f.x[e] = frag_is_input<F>::value ? frag_in(v) : v;
}
// Element (r, c) of the tile is mem[index + r * stride + c] (row) or mem[index + c * stride + r]
// (col); only r < rows and c < cols are read (the others are zero) or written. Checked launches
// pass the memory's bound and the report; an element past the bound reads zero and is reported.
template <class F, class Mem>
__device__ __forceinline__ void frag_load(F& f, const Mem& mem, u32 index, u32 stride, u32 rows,
                                          u32 cols, u32 col_major, u32 bound, report* rep, u64 key,
                                          u32 site KILN_WHERE) {
  const u32 lane = unit_linear() & 31u;
  for (int e = 0; e < F::count; ++e) {
    u32 r, c;
    F::at(e, lane, r, c);
    const u32 i = index + (col_major ? c * stride + r : r * stride + c);
    if (r >= rows || c >= cols) {
      f.x[e] = typename F::elem();
    } else if (rep && i >= bound) {
      f.x[e] = fault<typename F::elem>(rep, key, site, i, bound);
    } else {
      f.x[e] = frag_is_input<F>::value ? frag_in(load(mem, i KILN_AT)) : load(mem, i KILN_AT);
    }
  }
}
// ldmatrix (sm_75 and later): four 8 x 8 matrices of 16-bit elements from shared memory, the
// rows of matrix i addressed by lanes 8i..8i+7 (16 bytes each, 16-byte aligned). Lane t gets,
// of each matrix, row t/4 and columns 2(t%4), 2(t%4)+1 in one register (.trans: rows 2(t%4),
// 2(t%4)+1 of column t/4), which is mma.sync's layout of A (and, transposed, of B).
#ifdef KILN_EMULATION
inline u32 ldmatrix_pair(const u16* p0, const u16* p1 KILN_WHERE) {
  emu::access(p0, 2, emu::kLoad | emu::kSharedSpace, where);
  emu::access(p1, 2, emu::kLoad | emu::kSharedSpace, where);
  return (u32)*p0 | ((u32)*p1 << 16);
}
inline void ldmatrix_x4(u32* r, const void* row, bool trans KILN_WHERE) {
  const u32 lane = unit_linear() & 31u;
  const unsigned long long mine = (unsigned long long)(uintptr_t)row;
  for (u32 i = 0; i < 4; ++i) {
    if (!trans) {
      const u16* p =
          (const u16*)(uintptr_t)__shfl_sync(0xffffffffu, mine, (int)(8 * i + lane / 4) KILN_AT);
      r[i] = ldmatrix_pair(p + 2 * (lane % 4), p + 2 * (lane % 4) + 1 KILN_AT);
    } else {
      const u16* p0 = (const u16*)(uintptr_t)__shfl_sync(0xffffffffu, mine,
                                                         (int)(8 * i + 2 * (lane % 4)) KILN_AT);
      const u16* p1 = (const u16*)(uintptr_t)__shfl_sync(0xffffffffu, mine,
                                                         (int)(8 * i + 2 * (lane % 4) + 1) KILN_AT);
      r[i] = ldmatrix_pair(p0 + lane / 4, p1 + lane / 4 KILN_AT);
    }
  }
}
template <class T>
inline const T* shared_base(const bounded<T>& a) {
  return a.p;
}
template <class T>
inline u32 shared_count(const bounded<T>& a, u32) {
  return a.n;
}
#else
__device__ __forceinline__ void ldmatrix_x4(u32* r, const void* row, bool trans) {
  const u32 a = (u32)__cvta_generic_to_shared(row);
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
template <class T>
__device__ __forceinline__ const T* shared_base(const T* p) {
  return p;
}
template <class T>
__device__ __forceinline__ u32 shared_count(const T*, u32 bound) {
  return bound;
}
#endif

// Whether a fragment of 16- or 8-bit inputs can come from shared memory through ldmatrix: the
// whole tile inside the valid extents (and inside the array, when its length is known), every
// row 16-byte aligned. The same for every lane, since the operands are the plane's.
template <class T>
__device__ __forceinline__ bool ldmatrix_fits(const T* base, u32 index, u32 stride, u32 rows,
                                              u32 cols, u32 col_major, u32 frag_rows, u32 frag_cols,
                                              u32 count) {
  if (rows < frag_rows || cols < frag_cols) return false;
  if ((reinterpret_cast<u64>(base + index) & 15u) != 0 || ((stride * (u32)sizeof(T)) & 15u) != 0)
    return false;
  const unsigned long long last =
      (unsigned long long)index +
      (col_major ? (unsigned long long)(frag_cols - 1) * stride + (frag_rows - 1)
                 : (unsigned long long)(frag_rows - 1) * stride + (frag_cols - 1));
  return last < count;
}
template <class T, int M, int N, int K>
__device__ __forceinline__ void frag_ldmatrix(frag_a<T, M, N, K>& f, const T* base, u32 index,
                                              u32 stride, u32 col_major KILN_WHERE) {
  typedef frag_a<T, M, N, K> F;
  const u32 lane = unit_linear() & 31u, mi = lane / 8, r8 = lane % 8;
  // A 16 x 16 tile of 16-bit elements, or 16 x 32 of 8-bit ones (row-major only: the same bytes
  // as 16 x 16 b16, where a lane's register holds four consecutive k, as m16n8k32 wants).
  const u32 half = sizeof(T) == 1 ? 16u : 8u;
  for (int tm = 0; tm < M / 16; ++tm)
    for (int tk = 0; tk < F::k_tiles; ++tk) {
      const u32 row = tm * 16 + 8 * (mi & 1), col = tk * F::ks + half * (mi >> 1);
      // Row-major: lane gives row `row + r8` of the tile at column `col`; column-major: memory
      // row `col + r8` (a column of A) at element `row`, transposed on the way.
      const u32 at = col_major ? (col + r8) * stride + row : (row + r8) * stride + col;
      u32 r[4];
      ldmatrix_x4(r, base + index + at, col_major != 0 KILN_AT);
      memcpy(&f.x[(tm * F::k_tiles + tk) * F::per_tile], r, sizeof r);
    }
}
template <class T, int M, int N, int K>
__device__ __forceinline__ void frag_ldmatrix(frag_b<T, M, N, K>& f, const T* base, u32 index,
                                              u32 stride, u32 col_major KILN_WHERE) {
  typedef frag_b<T, M, N, K> F;
  const u32 lane = unit_linear() & 31u, mi = lane / 8, r8 = lane % 8;
  // 8-bit B comes column-major only: memory row n holds 32 k, as 16 b16, and a lane's register
  // gets four consecutive k of its column, as m16n8k32 wants.
  const u32 half = sizeof(T) == 1 ? 16u : 8u;
  for (int tk = 0; tk < K / F::ks; ++tk)
    for (int tn = 0; tn < F::n_tiles; tn += 2) {  // two 8-column tiles per ldmatrix.x4
      const u32 k = tk * F::ks + half * (mi & 1), n = tn * 8 + 8 * (mi >> 1);
      // Row-major (k rows): lane gives row `k + r8` at column `n`, transposed into mma's B
      // layout; column-major: memory row `n + r8` (a column of B) at element `k`.
      const u32 at = col_major ? (n + r8) * stride + k : (k + r8) * stride + n;
      u32 r[4];
      ldmatrix_x4(r, base + index + at, col_major == 0 KILN_AT);
      memcpy(&f.x[(tk * F::n_tiles + tn) * F::per_tile], r, 2 * sizeof(u32));
      memcpy(&f.x[(tk * F::n_tiles + tn + 1) * F::per_tile], r + 2, 2 * sizeof(u32));
    }
}
template <class F>
struct frag_ldmatrix_kind {
  static const bool value = false;
};
template <int M, int N, int K>
struct frag_ldmatrix_kind<frag_a<f16, M, N, K> > {
  static const bool value = true;
};
template <int M, int N, int K>
struct frag_ldmatrix_kind<frag_a<bf16, M, N, K> > {
  static const bool value = true;
};
template <int M, int N, int K>
struct frag_ldmatrix_kind<frag_b<f16, M, N, K> > {
  static const bool value = N % 16 == 0;
};
template <int M, int N, int K>
struct frag_ldmatrix_kind<frag_b<bf16, M, N, K> > {
  static const bool value = N % 16 == 0;
};
#define KILN_LDMATRIX_8BIT(T)                      \
  template <int M, int N, int K>                   \
  struct frag_ldmatrix_kind<frag_a<T, M, N, K> > { \
    static const bool value = true;                \
  };                                               \
  template <int M, int N, int K>                   \
  struct frag_ldmatrix_kind<frag_b<T, M, N, K> > { \
    static const bool value = N % 16 == 0;         \
  };
KILN_LDMATRIX_8BIT(i8)
KILN_LDMATRIX_8BIT(u8) KILN_LDMATRIX_8BIT(f8e4m3) KILN_LDMATRIX_8BIT(f8e5m2)
#undef KILN_LDMATRIX_8BIT
    // The layouts ldmatrix serves: any for 16-bit elements (.trans transposes them); for 8-bit
    // ones, A row-major and B column-major (k contiguous), since a transpose moves 16-bit halves.
    template <class T, int M, int N, int K>
    __device__ __forceinline__ bool ldmatrix_layout(const frag_a<T, M, N, K>&, u32 col_major) {
  return sizeof(T) == 2 || col_major == 0;
}
template <class T, int M, int N, int K>
__device__ __forceinline__ bool ldmatrix_layout(const frag_b<T, M, N, K>&, u32 col_major) {
  return sizeof(T) == 2 || col_major != 0;
}
template <bool Use>
struct frag_shared_loader {
  template <class F, class Mem>
  __device__ static bool run(F&, const Mem&, u32, u32, u32, u32, u32, u32 KILN_WHERE) {
    return false;
  }
};
template <>
struct frag_shared_loader<true> {
  template <class F, class Mem>
  __device__ static bool run(F& f, const Mem& mem, u32 index, u32 stride, u32 rows, u32 cols,
                             u32 col_major, u32 bound KILN_WHERE) {
    const typename F::elem* base = shared_base(mem);
    if (!ldmatrix_layout(f, col_major)) return false;
    if (!ldmatrix_fits(base, index, stride, rows, cols, col_major, frag_dims<F>::rows,
                       frag_dims<F>::cols, shared_count(mem, bound)))
      return false;
    frag_ldmatrix(f, base, index, stride, col_major KILN_AT);
    return true;
  }
};
// A fragment load from shared memory: through ldmatrix where it fits, else element by element.
template <class F, class Mem>
__device__ __forceinline__ void frag_load_shared(F& f, const Mem& mem, u32 index, u32 stride,
                                                 u32 rows, u32 cols, u32 col_major, u32 bound,
                                                 report* rep, u64 key, u32 site KILN_WHERE) {
  if (frag_shared_loader<frag_ldmatrix_kind<F>::value>::run(f, mem, index, stride, rows, cols,
                                                            col_major, bound KILN_AT))
    return;
  frag_load(f, mem, index, stride, rows, cols, col_major, bound, rep, key, site KILN_AT);
}

// frag.ldmatrix: the whole tile through ldmatrix. The emulator reports a tile that ldmatrix
// cannot read (a row off 16 bytes, or past the array) and loads it element by element; a
// checked launch loads such a tile element by element, reporting what is out of bounds.
template <class F, class Mem>
__device__ __forceinline__ void frag_load_ldmatrix(F& f, const Mem& mem, u32 index, u32 stride,
                                                   u32 col_major, u32 bound, report* rep, u64 key,
                                                   u32 site KILN_WHERE) {
  const typename F::elem* base = shared_base(mem);
  const u32 rows = frag_dims<F>::rows, cols = frag_dims<F>::cols;
#ifdef KILN_EMULATION
  if (!ldmatrix_fits(base, index, stride, rows, cols, col_major, rows, cols,
                     shared_count(mem, bound))) {
    emu::misuse(
        "ldmatrix() of a tile whose rows (columns, col layout) do not all start on 16 "
        "bytes, or that reaches past its shared array (the index and the stride in bytes "
        "must be multiples of 16); on a GPU a misaligned ldmatrix faults",
        where);
    frag_load(f, mem, index, stride, rows, cols, col_major, bound, rep, key, site KILN_AT);
    return;
  }
#else
  if (rep && !ldmatrix_fits(base, index, stride, rows, cols, col_major, rows, cols, bound)) {
    frag_load(f, mem, index, stride, rows, cols, col_major, bound, rep, key, site);
    return;
  }
#endif
  frag_ldmatrix(f, base, index, stride, col_major KILN_AT);
}

// `mem` by forwarding reference: a shared array is written through it (a const reference would
// make it an array of const elements).
template <class F, class Mem>
__device__ __forceinline__ void frag_store(Mem&& mem, u32 index, u32 stride, u32 rows, u32 cols,
                                           const F& f, u32 col_major, u32 bound, report* rep,
                                           u64 key, u32 site KILN_WHERE) {
  const u32 lane = unit_linear() & 31u;
  for (int e = 0; e < F::count; ++e) {
    u32 r, c;
    F::at(e, lane, r, c);
    const u32 i = index + (col_major ? c * stride + r : r * stride + c);
    if (r >= rows || c >= cols)
      continue;
    else if (rep && i >= bound)
      fault_store(rep, key, site, i, bound);
    else
      store(mem, i, f.x[e] KILN_AT);
  }
}
template <class D, class S, int M, int N, int K>
__device__ __forceinline__ void frag_cast(frag_acc<D, M, N, K>& d, const frag_acc<S, M, N, K>& s) {
  for (int e = 0; e < frag_acc<D, M, N, K>::count; ++e) d.x[e] = cast<D>(s.x[e]);
}
// An accumulator (M x N) as the A operand (M x K, K = N) of the next multiply, f16 or bf16: A's
// element (register r, half h) of tile (mt, kt) is at row g + 8 (r & 1), column 16 kt + 2 t + h
// + 8 (r >> 1), which this lane holds as element 2 (r & 1) + h of accumulator tile (mt, 2 kt +
// (r >> 1)): no data moves between lanes (FlashAttention-2 keeps P in registers this way).
template <class D, int M, int N2, int K, class S, int N, int K2>
__device__ __forceinline__ void frag_cast(frag_a<D, M, N2, K>& d, const frag_acc<S, M, N, K2>& s) {
  typedef frag_a<D, M, N2, K> FA;
  typedef frag_acc<S, M, N, K2> FC;
  static_assert(K == N && FA::pack == 2, "an accumulator becomes a 16-bit A fragment of k = n");
  for (int e = 0; e < FA::count; ++e) {
    const int tile = e / FA::per_tile, w = e % FA::per_tile, r = w / 2, h = w % 2;
    const int mt = tile / FA::k_tiles, kt = tile % FA::k_tiles;
    d.x[e] = cast<D>(s.x[(mt * FC::n_tiles + 2 * kt + (r >> 1)) * 4 + 2 * (r & 1) + h]);
  }
}

// One mma.sync instruction: d (4 accumulators of a 16 x 8 tile) += a (4 registers) * b (2).
#ifdef KILN_EMULATION
// The host runs it as the ISA defines it: each lane gathers the rows of A and columns of B its
// four results need from the lanes that hold them (shuffles), then accumulates in order over k.
// The products are exact; each is added in f32 (tf32 inputs use their top 19 bits).
inline f32 mma_madd(f32 acc, f16 a, f16 b) {
  return fmaf(to_f32(a), to_f32(b), acc);
}
inline f32 mma_madd(f32 acc, bf16 a, bf16 b) {
  return fmaf(to_f32(a), to_f32(b), acc);
}
inline f32 mma_madd(f32 acc, f8e4m3 a, f8e4m3 b) {
  return fmaf(to_f32(a), to_f32(b), acc);
}
inline f32 mma_madd(f32 acc, f8e5m2 a, f8e5m2 b) {
  return fmaf(to_f32(a), to_f32(b), acc);
}
inline f32 mma_madd(f32 acc, f32 a, f32 b) {
  return fmaf(__uint_as_float(__float_as_uint(a) & 0xffffe000u),
              __uint_as_float(__float_as_uint(b) & 0xffffe000u), acc);
}
inline i32 mma_madd(i32 acc, i8 a, i8 b) {
  return (i32)((u32)acc + (u32)((i32)a * (i32)b));
}
inline i32 mma_madd(i32 acc, u8 a, u8 b) {
  return (i32)((u32)acc + (u32)a * (u32)b);
}
// Rows g and g + 8 of A and columns 2t and 2t + 1 of B (lane 4g + t), from the lanes that
// hold them.
template <class T>
inline void mma_gather(const u32* a, const u32* b, T (&arow)[2][32], T (&bcol)[2][32] KILN_WHERE) {
  const int ks = mma_input<T>::ks, pack = mma_input<T>::pack;
  const u32 lane = unit_linear() & 31u, g = lane >> 2, t = lane & 3u;
  for (u32 src_t = 0; src_t < 4; ++src_t) {
    u32 ar[4], br[2][2];
    for (int r = 0; r < 4; ++r)
      ar[r] = __shfl_sync(0xffffffffu, a[r], (int)(4 * g + src_t) KILN_AT);
    for (int n = 0; n < 2; ++n)
      for (int r = 0; r < 2; ++r)
        br[n][r] = __shfl_sync(0xffffffffu, b[r], (int)(4 * (2 * t + n) + src_t) KILN_AT);
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < pack; ++h) {
        T x;
        memcpy(&x, reinterpret_cast<const unsigned char*>(&ar[r]) + h * sizeof(T), sizeof(T));
        arow[r & 1][pack * src_t + h + ks / 2 * (r >> 1)] = x;
      }
    for (int n = 0; n < 2; ++n)
      for (int r = 0; r < 2; ++r)
        for (int h = 0; h < pack; ++h) {
          T x;
          memcpy(&x, reinterpret_cast<const unsigned char*>(&br[n][r]) + h * sizeof(T), sizeof(T));
          bcol[n][pack * src_t + h + ks / 2 * r] = x;
        }
  }
}
template <class T, class C>
inline void mma_tile(C* d, const u32* a, const u32* b KILN_WHERE) {
  const int ks = mma_input<T>::ks;
  T arow[2][32], bcol[2][32];
  mma_gather<T>(a, b, arow, bcol KILN_AT);
  for (int e = 0; e < 4; ++e) {
    C acc = d[e];
    for (int k = 0; k < ks; ++k) acc = mma_madd(acc, arow[e >> 1][k], bcol[e & 1][k]);
    d[e] = acc;
  }
}
#else
template <class T, class C>
__device__ __forceinline__ void mma_tile(C* d, const u32* a, const u32* b);
#define KILN_MMA_F32(T, SHAPE, PTYPE)                                                     \
  template <>                                                                             \
  __device__ __forceinline__ void mma_tile<T, f32>(f32 * d, const u32* a, const u32* b) { \
    asm volatile("mma.sync.aligned." SHAPE ".row.col.f32." PTYPE "." PTYPE                \
                 ".f32 {%0, %1, %2, %3}, "                                                \
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                          \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));     \
  }
KILN_MMA_F32(f16, "m16n8k16", "f16")
KILN_MMA_F32(bf16, "m16n8k16", "bf16")
KILN_MMA_F32(f32, "m16n8k8", "tf32")
#if __CUDA_ARCH__ >= 890
KILN_MMA_F32(f8e4m3, "m16n8k32", "e4m3")
KILN_MMA_F32(f8e5m2, "m16n8k32", "e5m2")
#endif
#undef KILN_MMA_F32
#define KILN_MMA_I32(T, PTYPE)                                                            \
  template <>                                                                             \
  __device__ __forceinline__ void mma_tile<T, i32>(i32 * d, const u32* a, const u32* b) { \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." PTYPE "." PTYPE                 \
                 ".s32 {%0, %1, %2, %3}, "                                                \
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                          \
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));     \
  }
KILN_MMA_I32(i8, "s8")
KILN_MMA_I32(u8, "u8")
#undef KILN_MMA_I32
#endif

// ---- block-scaled multiplies: mma.sync kind::mxf8f6f4 (sm_120a) --------------------------------
// D (16 x 8) += (A * SA) (B * SB) for one k block of 32: sa and sb are each lane's scale code
// (ue8m0) register, read by the instruction at byte 0 (byte-id 0, thread-id 0): lane
// 4 (r % 8) + r / 8 holds row r's of A, lane 4 c column c's of B; the others are ignored.
#ifdef KILN_EMULATION
// The host gathers each result's two scales from the lanes that hold them and adds each exact
// product, scaled by 2^(sa + sb - 254) (NaN for a code of 255), in order over k, in f32.
template <class T>
inline void mma_tile_scaled(f32* d, const u32* a, const u32* b, u32 sa, u32 sb KILN_WHERE) {
  const u32 lane = unit_linear() & 31u, g = lane >> 2, t = lane & 3u;
  T arow[2][32], bcol[2][32];
  mma_gather<T>(a, b, arow, bcol KILN_AT);
  u32 srow[2], scol[2];
  for (int h = 0; h < 2; ++h) {
    srow[h] = __shfl_sync(0xffffffffu, sa, (int)(4 * g + h) KILN_AT) & 0xffu;
    scol[h] = __shfl_sync(0xffffffffu, sb, (int)(4 * (2 * t + h)) KILN_AT) & 0xffu;
  }
  for (int e = 0; e < 4; ++e) {
    const u32 ea = srow[e >> 1], eb = scol[e & 1];
    f32 acc = d[e];
    for (int k = 0; k < 32; ++k) {
      const f32 p = to_f32(arow[e >> 1][k]) * to_f32(bcol[e & 1][k]);
      acc += ea == 255u || eb == 255u ? __uint_as_float(0x7fc00000u)
                                      : ldexpf(p, (int)ea + (int)eb - 254);
    }
    d[e] = acc;
  }
}
#else
template <class T>
__device__ __forceinline__ void mma_tile_scaled(f32* d, const u32* a, const u32* b, u32 sa, u32 sb);
#if __CUDA_ARCH__ >= 1200
#define KILN_MMA_SCALED(T, PTYPE)                                                                 \
  template <>                                                                                     \
  __device__ __forceinline__ void mma_tile_scaled<T>(f32 * d, const u32* a, const u32* b, u32 sa, \
                                                     u32 sb) {                                    \
    asm volatile(                                                                                 \
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32." PTYPE   \
        "." PTYPE                                                                                 \
        ".f32.ue8m0 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "                               \
        "{%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};"                                             \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sa), "r"(sb));    \
  }
KILN_MMA_SCALED(f8e4m3, "e4m3")
KILN_MMA_SCALED(f8e5m2, "e5m2")
#undef KILN_MMA_SCALED
#endif
#endif

// One scale code of u8 memory; past a checked launch's bound, 127 (a scale of 1), reported.
template <class Mem>
__device__ __forceinline__ u32 scale_code(const Mem& mem, u32 i, u32 bound, u32 site, report* rep,
                                          u64 key KILN_WHERE) {
  if (rep && i >= bound) {
    (void)fault<u8>(rep, key, site, i, bound);
    return 127u;
  }
  return (u32)load(mem, i KILN_AT);
}
// acc += (A * SA) (B * SB), tile by tile and k block by k block: SA(r, j) = sa[sai + r sas + j],
// SB(c, j) = sb[sbi + c sbs + j]. Each lane reads the scales its register must hold.
template <class T, int M, int N, int K, class MA, class MB>
__device__ __forceinline__ void frag_mma_scaled(frag_acc<f32, M, N, K>& acc,
                                                const frag_a<T, M, N, K>& a,
                                                const frag_b<T, M, N, K>& b, const MA& sa, u32 sai,
                                                u32 sas, u32 sa_bound, u32 sa_site, const MB& sb,
                                                u32 sbi, u32 sbs, u32 sb_bound, u32 sb_site,
                                                report* rep, u64 key KILN_WHERE) {
  typedef frag_a<T, M, N, K> FA;
  typedef frag_b<T, M, N, K> FB;
  const u32 lane = unit_linear() & 31u;
  for (int tm = 0; tm < M / 16; ++tm)
    for (int tn = 0; tn < N / 8; ++tn)
      for (int tk = 0; tk < FA::k_tiles; ++tk) {
        u32 ar[4], br[2], sca = 127u, scb = 127u;
        memcpy(ar, &a.x[(tm * FA::k_tiles + tk) * FA::per_tile], sizeof ar);
        memcpy(br, &b.x[(tk * FB::n_tiles + tn) * FB::per_tile], sizeof br);
        if ((lane & 3u) < 2u) {
          const u32 r = 16u * tm + (lane >> 2) + 8u * (lane & 1u);
          sca = scale_code(sa, sai + r * sas + tk, sa_bound, sa_site, rep, key KILN_AT);
        }
        if ((lane & 3u) == 0u) {
          const u32 c = 8u * tn + (lane >> 2);
          scb = scale_code(sb, sbi + c * sbs + tk, sb_bound, sb_site, rep, key KILN_AT);
        }
        mma_tile_scaled<T>(&acc.x[(tm * (N / 8) + tn) * 4], ar, br, sca, scb KILN_AT);
      }
}

// acc += a * b, tile by tile.
template <class C, class T, int M, int N, int K>
__device__ __forceinline__ void frag_mma(frag_acc<C, M, N, K>& acc, const frag_a<T, M, N, K>& a,
                                         const frag_b<T, M, N, K>& b KILN_WHERE) {
  typedef frag_a<T, M, N, K> FA;
  typedef frag_b<T, M, N, K> FB;
  for (int tm = 0; tm < M / 16; ++tm)
    for (int tn = 0; tn < N / 8; ++tn)
      for (int tk = 0; tk < FA::k_tiles; ++tk) {
        u32 ar[4], br[2];
        memcpy(ar, &a.x[(tm * FA::k_tiles + tk) * FA::per_tile], sizeof ar);
        memcpy(br, &b.x[(tk * FB::n_tiles + tn) * FB::per_tile], sizeof br);
        mma_tile<T>(&acc.x[(tm * (N / 8) + tn) * 4], ar, br KILN_AT);
      }
}

// ---- warpgroup multiplies: wgmma (sm_90a)
// ---------------------------------------------------------

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start
// address in the shared window >> 4, 16-29 the leading byte offset >> 4, 32-45 the stride byte
// offset >> 4, 62-63 the swizzle (0 none, 1 128 B, 2 64 B, 3 32 B).
__device__ __forceinline__ u64 wgmma_desc_bits(u32 address, u32 lbo, u32 sbo, u32 swizzle) {
  const u64 mode = swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
  return (u64)((address & 0x3ffffu) >> 4) | ((u64)((lbo >> 4) & 0x3fffu) << 16) |
         ((u64)((sbo >> 4) & 0x3fffu) << 32) | (mode << 62);
}

// The shared-window byte of element (mn, k) of a K-major operand (rows mn of A, or columns n of
// B, with k contiguous) under descriptor d. Without swizzle the matrix is made of core matrices
// of 8 rows of 16 bytes: LBO separates core matrices along k, SBO along mn. With a swizzle of W
// bytes, rows are W bytes long and SBO separates groups of 8 rows; the 16-byte chunks of a row
// are permuted by XOR with address bits 7 and up (Swizzle<log2(W/16), 4, 3>, the pattern TMA
// writes), so the pattern follows the absolute address.
__device__ __forceinline__ u32 wgmma_kmajor_byte(u64 d, u32 mn, u32 k, u32 size) {
  const u32 start = (u32)(d & 0x3fffu) << 4, lbo = (u32)((d >> 16) & 0x3fffu) << 4,
            sbo = (u32)((d >> 32) & 0x3fffu) << 4, mode = (u32)(d >> 62), per16 = 16u / size;
  if (mode == 0) return start + mn / 8 * sbo + mn % 8 * 16 + k / per16 * lbo + k % per16 * size;
  const u32 w = mode == 1 ? 128u : mode == 2 ? 64u : 32u;
  const u32 byte = start + mn / 8 * sbo + mn % 8 * w + k * size;
  return byte ^ (((byte >> 7) & (w / 16 - 1)) << 4);
}
// The same for an MN-major operand (mn contiguous). Without swizzle, core matrices of 8 k-rows
// of 16 bytes of mn: SBO separates them along mn, LBO along k. With a swizzle of W bytes, rows
// of W bytes of mn, one per k: LBO separates the W-byte columns along mn, SBO the groups of 8
// rows along k (the PTX ISA's canonical MN-major layouts).
__device__ __forceinline__ u32 wgmma_mnmajor_byte(u64 d, u32 mn, u32 k, u32 size) {
  const u32 start = (u32)(d & 0x3fffu) << 4, lbo = (u32)((d >> 16) & 0x3fffu) << 4,
            sbo = (u32)((d >> 32) & 0x3fffu) << 4, mode = (u32)(d >> 62), per16 = 16u / size;
  if (mode == 0) return start + mn / per16 * sbo + mn % per16 * size + k / 8 * lbo + k % 8 * 16;
  const u32 w = mode == 1 ? 128u : mode == 2 ? 64u : 32u, per_row = w / size;
  const u32 byte = start + mn / per_row * lbo + mn % per_row * size + k / 8 * sbo + k % 8 * w;
  return byte ^ (((byte >> 7) & (w / 16 - 1)) << 4);
}

#ifdef KILN_EMULATION
template <class T>
inline u64 wgmma_desc(const bounded<T>& mem, u32 index, u32 lbo, u32 sbo, u32 swizzle) {
  const u32 address =
      (u32)(reinterpret_cast<const unsigned char*>(mem.p + index) - emu::unit()->shared);
  return wgmma_desc_bits(address, lbo, sbo, swizzle);
}
// What the emulator checks of a unit's wgmma use (PTX ISA, wgmma.fence and wgmma.wait_group):
// a wgmma.fence before the first multiply and between any other access to an accumulator and
// the next multiply into it; no access to an accumulator while a multiply into it is in flight
// (issued, and not yet completed by a wait that leaves fewer groups pending). And its reads of
// shared memory: a multiply reads A and B until its group completes, so the emulator checks
// them against earlier stores when it is issued (and computes the product then), but keeps
// them as this unit's reads only when a wgmma_wait completes the group (`reads`, replayed
// there): a store into a stage that an unfinished multiply reads races with them.
struct wgmma_state {
  struct slot {
    const void* acc;
    u32 group;    // the group of the last multiply into it (0: none)
    u32 touched;  // fences before its last access by another op + 1 (0: never accessed)
  };
  struct reads {
    u32 group;
    void (*replay)(u64 adesc, u64 bdesc, const emu::Site& where);
    u64 adesc, bdesc;
  };
  slot slots[32];
  int count = 0;
  reads pending[64];
  int pending_count = 0;
  u32 open = 1, done = 0, fences = 0;  // the group being filled; groups completed
  slot* find(const void* acc) {
    for (int i = 0; i < count; ++i)
      if (slots[i].acc == acc) return &slots[i];
    if (count == 32) return &slots[31];
    slots[count] = slot{acc, 0, 0};
    return &slots[count++];
  }
};
inline void wgmma_touch(wgmma_state& s, const void* acc KILN_WHERE) {
  wgmma_state::slot* t = s.find(acc);
  if (t->group > s.done)
    emu::misuse(
        "a fragment op uses an accumulator while a wgmma.mma into it is in flight; "
        "wgmma_commit() and wgmma_wait(0) first (or wait with fewer groups pending)",
        where);
  t->touched = s.fences + 1;
}
inline void wgmma_fence(wgmma_state& s KILN_WHERE) {
  (void)where;
  ++s.fences;
}
inline void wgmma_commit(wgmma_state& s KILN_WHERE) {
  (void)where;
  ++s.open;
}
// The reads of the multiplies whose groups are complete become this unit's reads, now.
inline void wgmma_retire_reads(wgmma_state& s, u32 upto KILN_WHERE) {
  int kept = 0;
  for (int i = 0; i < s.pending_count; ++i) {
    const wgmma_state::reads r = s.pending[i];
    if (r.group <= upto)
      r.replay(r.adesc, r.bdesc, where);
    else
      s.pending[kept++] = r;
  }
  s.pending_count = kept;
}
template <int N>
inline void wgmma_wait(wgmma_state& s KILN_WHERE) {
  if (s.open - 1 >= (u32)N && s.open - 1 - (u32)N > s.done) s.done = s.open - 1 - (u32)N;
  wgmma_retire_reads(s, s.done KILN_AT);
}
template <class F>
inline void wgmma_fence_operand(F&) {}
// `how`: kLoad, or kLoad | kAsync for a tcgen05 read, which an mbarrier wait orders before
// later stores.
template <class T>
inline T wgmma_read(u64 d, u32 mn, u32 k, u32 how, bool mn_major KILN_WHERE) {
  const unsigned char* p =
      emu::unit()->shared +
      (mn_major ? wgmma_mnmajor_byte(d, mn, k, sizeof(T)) : wgmma_kmajor_byte(d, mn, k, sizeof(T)));
  T x = T();
  if (emu::access(p, sizeof(T), how, where)) memcpy(&x, p, sizeof(T));
  return x;
}
// The shared-memory bytes a unit's multiply reads, as reads of that unit (`how`).
template <class T, int MJ, class C, int N, int K>
inline void wgmma_reads(u64 adesc, u64 bdesc, const emu::Site& where) {
  typedef frag_acc<C, 16, N, K> F;
  const u32 lane = unit_linear() & 31u, w = (unit_linear() >> 5) & 3u;
  for (int e = 0; e < F::count; ++e) {
    u32 r, c;
    F::at(e, lane, r, c);
    for (u32 k = 0; k < (u32)K; ++k) {
      (void)wgmma_read<T>(adesc, 16 * w + r, k, emu::kLoad, MJ & 1 KILN_AT);
      (void)wgmma_read<T>(bdesc, c, k, emu::kLoad, (MJ & 2) != 0 KILN_AT);
    }
  }
}
// The host runs a multiply as the ISA defines it: each unit computes its own accumulator
// elements (rows 16w..16w+15 of the product for warp w of the warpgroup, in mma.sync's
// accumulator layout) from A and B in shared memory, in order over k. MJ: bit 0 set when A is
// MN-major, bit 1 when B is. Its reads are checked now and kept at its group's wait.
template <class T, int MJ, class C, int N, int K>
inline void wgmma(wgmma_state& s, frag_acc<C, 16, N, K>& acc, u64 adesc, u64 bdesc KILN_WHERE) {
  wgmma_state::slot* t = s.find(&acc);
  if (s.fences == 0)
    emu::misuse(
        "wgmma.mma before any wgmma_fence(); a warpgroup fences before its first "
        "multiply",
        where);
  else if (t->touched == s.fences + 1)
    emu::misuse(
        "wgmma.mma into an accumulator that another fragment op used after the last "
        "wgmma_fence(); fence between them",
        where);
  t->group = s.open;
  typedef frag_acc<C, 16, N, K> F;
  const u32 lane = unit_linear() & 31u, w = (unit_linear() >> 5) & 3u;
  for (int e = 0; e < F::count; ++e) {
    u32 r, c;
    F::at(e, lane, r, c);
    C sum = acc.x[e];
    for (u32 k = 0; k < (u32)K; ++k)
      sum = mma_madd(sum,
                     wgmma_read<T>(adesc, 16 * w + r, k, emu::kLoad | emu::kUnkept, MJ & 1 KILN_AT),
                     wgmma_read<T>(bdesc, c, k, emu::kLoad | emu::kUnkept, (MJ & 2) != 0 KILN_AT));
    acc.x[e] = sum;
  }
  // At most 64 multiplies' reads wait for their groups; past that the oldest is kept now.
  if (s.pending_count == 64) {
    s.pending[0].replay(s.pending[0].adesc, s.pending[0].bdesc, where);
    for (int i = 1; i < 64; ++i) s.pending[i - 1] = s.pending[i];
    --s.pending_count;
  }
  s.pending[s.pending_count++] = {s.open, &wgmma_reads<T, MJ, C, N, K>, adesc, bdesc};
}
#else
template <class T>
__device__ __forceinline__ u64 wgmma_desc(const T* mem, u32 index, u32 lbo, u32 sbo, u32 swizzle) {
  return wgmma_desc_bits((u32)__cvta_generic_to_shared(mem + index), lbo, sbo, swizzle);
}
struct wgmma_state {};
__device__ __forceinline__ void wgmma_touch(wgmma_state&, const void*) {}
__device__ __forceinline__ void wgmma_fence(wgmma_state&) {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit(wgmma_state&) {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait(wgmma_state&) {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses to an accumulator across a wait: the registers are
// written by the tensor cores until the wait returns.
__device__ __forceinline__ void wgmma_reg_fence(f32& x) {
  asm volatile("" : "+f"(x)::"memory");
}
__device__ __forceinline__ void wgmma_reg_fence(i32& x) {
  asm volatile("" : "+r"(x)::"memory");
}
template <class F>
__device__ __forceinline__ void wgmma_fence_operand(F& f) {
  for (int e = 0; e < F::count; ++e) wgmma_reg_fence(f.x[e]);
}
// One wgmma.mma_async per (input type, n): the kernel's code defines those it uses (their
// operand lists are n/2 registers long; MJ sets the transposes of MN-major operands).
template <class T, int N, int MJ>
struct wgmma_op;
template <class T, int MJ, class C, int N, int K>
__device__ __forceinline__ void wgmma(wgmma_state&, frag_acc<C, 16, N, K>& acc, u64 adesc,
                                      u64 bdesc) {
  wgmma_op<T, N, MJ>::run(acc.x, adesc, bdesc);
}
#endif

// ---- mbarriers, tensor memory and tcgen05 (sm_100a) -------------------------------------------
//
// kiln's tcgen05 ops are cube operations: every unit calls these functions together, and one
// unit (unit 0; warp 0 for the warp-wide alloc and free, warps 0-3 for tcgen05.ld) issues the
// instructions. Tensor-memory addresses are (lane << 16) | column.

// A tcgen05 shared-memory matrix descriptor (PTX ISA, "Shared memory descriptor"): bits 0-13
// the start address >> 4, 16-29 the leading byte offset >> 4, 32-45 the stride byte offset >> 4,
// 46-48 the fixed 0b001, 61-63 the swizzle (0 none, 2 128 B, 4 64 B, 6 32 B). The layouts are
// wgmma's: the emulator reads them through the wgmma form.
__device__ __forceinline__ u64 tcgen05_desc_bits(u32 address, u32 lbo, u32 sbo, u32 swizzle) {
  const u64 mode = swizzle == 128 ? 2 : swizzle == 64 ? 4 : swizzle == 32 ? 6 : 0;
  return (u64)((address & 0x3ffffu) >> 4) | ((u64)((lbo >> 4) & 0x3fffu) << 16) |
         ((u64)((sbo >> 4) & 0x3fffu) << 32) | (1ull << 46) | (mode << 61);
}
// The instruction descriptor of tcgen05.mma (PTX ISA, "Instruction descriptor", kinds tf32,
// f16, f8f6f4 and i8): D type at bits 4-5 (1 f32, 2 s32), A and B types at 7-9 and 10-12, A and
// B MN-major ("transposed") at bits 15 and 16 (MJ's bits 0 and 1), N >> 3 at 17-22 and M >> 4
// at 24-28; M is 128.
template <class T>
struct tcgen05_kind;
template <>
struct tcgen05_kind<f16> {
  enum : u32 { kind = 0, type = 0, d = 1 };
};
template <>
struct tcgen05_kind<bf16> {
  enum : u32 { kind = 0, type = 1, d = 1 };
};
template <>
struct tcgen05_kind<f32> {
  enum : u32 { kind = 1, type = 2, d = 1 };
};
template <>
struct tcgen05_kind<f8e4m3> {
  enum : u32 { kind = 2, type = 0, d = 1 };
};
template <>
struct tcgen05_kind<f8e5m2> {
  enum : u32 { kind = 2, type = 1, d = 1 };
};
template <>
struct tcgen05_kind<u8> {
  enum : u32 { kind = 3, type = 0, d = 2 };
};
template <>
struct tcgen05_kind<i8> {
  enum : u32 { kind = 3, type = 1, d = 2 };
};
template <class T, int N, int MJ>
__device__ __forceinline__ constexpr u32 tcgen05_idesc() {
  typedef tcgen05_kind<T> K;
  return K::d << 4 | K::type << 7 | K::type << 10 | (u32)(MJ & 1) << 15 |
         (u32)((MJ >> 1) & 1) << 16 | (u32)(N >> 3) << 17 | (128u >> 4) << 24;
}

// The accumulator of a multiply of T and the k of one instruction (32 bytes of k).
// (Enumerators, not static members: those would be globals in every kernel's PTX.)
template <class T>
struct tcgen05_acc {
  typedef f32 type;
  enum : int { k = 32 / (int)sizeof(T) };
};
template <>
struct tcgen05_acc<i8> {
  typedef i32 type;
  enum : int { k = 32 };
};
template <>
struct tcgen05_acc<u8> {
  typedef i32 type;
  enum : int { k = 32 };
};
// A tensor-memory cell as the element type of the array it is copied into.
template <class T>
__device__ __forceinline__ T tmem_cell(u32 bits);
template <>
__device__ __forceinline__ f32 tmem_cell<f32>(u32 bits) {
  return __uint_as_float(bits);
}
template <>
__device__ __forceinline__ i32 tmem_cell<i32>(u32 bits) {
  return (i32)bits;
}
template <>
__device__ __forceinline__ u32 tmem_cell<u32>(u32 bits) {
  return bits;
}
// N cells as a value of L (T, or a line of N T).
template <class L>
__device__ __forceinline__ L tmem_lanes(const u32* r) {
  typedef typename lanes_of<L>::elem T;
  if constexpr (lanes_of<L>::value == 1) {
    return tmem_cell<T>(r[0]);
  } else {
    L out;
    for (int i = 0; i < lanes_of<L>::value; ++i) out.v[i] = tmem_cell<T>(r[i]);
    return out;
  }
}

#ifdef KILN_EMULATION
// The emulator's mbarrier, one u64 in shared memory: bit 63 set once initialized, the arrival
// count at bits 0-19, the arrivals still pending in this phase at 20-39, the phase's parity at
// bit 40, the transaction count (bytes still expected, 21-bit two's complement) at 41-61. The
// CPU backend keeps the same word (compiler/cpu/abi.cpp, mbar_update).
inline u64* mbar_word(const bounded<u64>& bars, u32 i KILN_WHERE) {
  if (i >= bars.n) {
    emu::out_of_bounds(bars.space, emu::kAtomic, i, bars.n, where);
    return nullptr;
  }
  return bars.p + i;
}
inline void mbar_init(const bounded<u64>& bars, u32 i, u32 count KILN_WHERE) {
  u64* w = mbar_word(bars, i KILN_AT);
  if (w && unit_linear() == 0 && emu::access(w, 8, emu::kStore, where))
    *w = 1ull << 63 | (u64)count << 20 | count;
  emu::sync_threads(where);
}
// `arrivals` arrivals and `tx` more bytes expected (negative: bytes that landed): the phase
// completes when no arrival and no byte is pending.
inline void mbar_update(u64* w, u32 arrivals, long long tx KILN_WHERE) {
  if (!emu::access(w, 8, emu::kAtomic, where)) return;
  const u64 x = *w;
  if (!(x >> 63)) {
    emu::misuse(
        "an arrival or a copy on an mbarrier that was never initialized; "
        "mbarrier_init() it first",
        where);
    return;
  }
  const u64 count = x & 0xfffffu, phase = (x >> 40) & 1u;
  u64 pending = (x >> 20) & 0xfffffu;
  long long now = (long long)((x >> 41) & 0x1fffffu);
  if (now >= (1ll << 20)) now -= 1ll << 21;
  now += tx;
  if (now >= (1ll << 20) || now <= -(1ll << 20)) {
    emu::misuse(
        "an mbarrier's transaction count left its range (at most 2^20 - 1 bytes pending "
        "either way): expect the bytes of a phase before its copies outrun them",
        where);
    return;
  }
  pending = arrivals > pending ? 0 : pending - arrivals;
  // An arrival, or bytes landing, orders the unit's plane's accesses before the phase's end.
  if (arrivals || tx < 0) emu::order(w, emu::kRelease, (u32)phase);
  if (pending == 0 && now == 0) {
    *w = 1ull << 63 | (phase ^ 1u) << 40 | count << 20 | count;
    emu::order(w, emu::kPhaseDone, (u32)phase);
  } else {
    *w = 1ull << 63 | ((u64)now & 0x1fffffu) << 41 | phase << 40 | pending << 20 | count;
  }
}
// One arrival (tcgen05.commit's).
inline void mbar_arrive(u64* w KILN_WHERE) {
  mbar_update(w, 1, 0 KILN_AT);
}
// A wait for the phase of mbarrier w with this parity has succeeded: the tcgen05 commits that
// arrived in that phase are complete, and with them the multiplies they cover (a wait on
// another mbarrier or phase completes none).
inline void tmem_commits_done(const u64* w, u32 parity) {
  emu::TmemState* st = emu::unit()->tmem_state;
  u32 kept = 0;
  for (u32 c = 0; c < st->pending; ++c) {
    const emu::TmemCommit e = st->commits[c];
    if (e.bar == w && e.parity == (parity & 1u)) {
      if (e.issued > st->waited) st->waited = e.issued;
    } else {
      st->commits[kept++] = e;
    }
  }
  st->pending = kept;
}
// One unit waits until the phase of mbarrier bars[i] with parity `parity` has completed (`stuck`:
// the report when it never can), then acquires what the phase released and completes the
// tcgen05 commits that arrived in it. False when the wait was abandoned (reported).
inline bool mbar_wait_unit(const bounded<u64>& bars, u32 i, u32 parity,
                           const char* stuck KILN_WHERE) {
  u64* w = mbar_word(bars, i KILN_AT);
  if (!w) return false;
  for (;;) {
    if (!emu::access(w, 8, emu::kAtomic, where)) return false;
    const u64 x = *w;
    if (!(x >> 63)) {
      emu::misuse("a wait on an mbarrier that was never initialized; mbarrier_init() it first",
                  where);
      return false;
    }
    if ((((x >> 40) & 1u) != (parity & 1u))) break;  // the phase of that parity is complete
    emu::spin(stuck, where);
  }
  emu::order(w, emu::kAcquire, parity & 1u);
  tmem_commits_done(w, parity);
  return true;
}
inline void mbar_wait(const bounded<u64>& bars, u32 i, u32 parity KILN_WHERE) {
  if (!mbar_wait_unit(bars, i, parity,
                      "an mbarrier wait that can never complete: the phase it waits for has "
                      "arrivals or bytes pending that nothing will make (a tcgen05_commit or "
                      "mbarrier_arrive_expect_tx on it before the wait, as many bytes expected "
                      "as the tma_loads on it copy, or the parity of a phase that has completed: "
                      "phase k has parity k % 2)" KILN_AT))
    return;
  // What completed the phase (a TMA copy's stores by unit 0) is ordered before every unit's
  // accesses after the wait, as the race detector sees it.
  emu::sync_threads(where);
}

// ---- a pipeline's protocol (warp specialization) ---------------------------------------------
// pipe_begin: every unit, the producer plane's too: unit 0 initializes the ring's full (one
// arrival: the producer's expect_tx) and empty (one arrival per consumer plane) mbarriers, and
// the race detector starts ordering shared memory by mbarrier phases. pipe_wait: one unit waits
// for a phase (no barrier: the planes go on independently). pipe_release: a consumer plane is
// done with a stage; its first unit arrives once all of its units are there. pipe_retire: the
// producer plane leaves the cube.
inline void pipe_begin(const bounded<u64>& full, const bounded<u64>& empty, u32 stages,
                       u32 consumer_planes KILN_WHERE) {
  emu::order(nullptr, emu::kOrderBegin, 0);
  for (u32 s = 0; s < stages; ++s) {
    mbar_init(full, s, 1 KILN_AT);
    mbar_init(empty, s, consumer_planes KILN_AT);
  }
}
inline void pipe_wait(const bounded<u64>& bars, u32 i, u32 parity KILN_WHERE) {
  mbar_wait_unit(bars, i, parity,
                 "a pipeline's wait that can never complete: fewer bytes of a stage's copies "
                 "land than its mbarrier_arrive_expect_tx expects (or it has none), or, with "
                 "pipeline_committed, a round's consume region does not tcgen05_commit to the "
                 "stage's empty mbarrier" KILN_AT);
}
inline void pipe_release(const bounded<u64>& bars, u32 i KILN_WHERE) {
  __syncwarp(0xffffffffu, where);
  if ((unit_linear() & 31u) != 0) return;
  u64* w = mbar_word(bars, i KILN_AT);
  if (w) mbar_update(w, 1, 0 KILN_AT);
}
inline void pipe_retire() {
  emu::retire();
}
// setmaxnreg moves registers between a cube's warpgroups on the GPU; the emulator's units have
// what they need.
template <u32 N>
inline void setmaxnreg_dec() {}
template <u32 N>
inline void setmaxnreg_inc() {}
// The shared-memory descriptor in wgmma's form (the same layouts), for wgmma_read.
inline u64 tcgen05_as_wgmma(u64 d) {
  const u32 mode = (u32)(d >> 61);
  const u64 wg = mode == 2 ? 1 : mode == 4 ? 2 : mode == 6 ? 3 : 0;
  return (d & 0x3fff3fff3fffull) | wg << 62;
}
template <class T>
inline u64 tcgen05_desc(const bounded<T>& mem, u32 index, u32 lbo, u32 sbo, u32 swizzle) {
  const u32 address =
      (u32)(reinterpret_cast<const unsigned char*>(mem.p + index) - emu::unit()->shared);
  return tcgen05_desc_bits(address, lbo, sbo, swizzle);
}
// Columns [c, c + n) of an allocation: each 32-column chunk allocated.
inline bool tmem_allocated(u32 c, u32 n) {
  const u32 mask = emu::unit()->tmem_state->allocated;
  for (u32 x = c / 32; x < (c + n + 31) / 32; ++x)
    if (x >= 16 || !(mask >> x & 1u)) return false;
  return true;
}
template <u32 C>
inline u32 tmem_alloc(const bounded<u32>& slot KILN_WHERE) {
  emu::TmemState* st = emu::unit()->tmem_state;
  emu::sync_threads(where);  // the others wait while the first unit allocates, as on a GPU
  if (unit_linear() == 0) {
    u32 chunks = C / 32, at = 16;
    for (u32 x = 0; x + chunks <= 16; x += chunks)
      if (((st->allocated >> x) & ((1u << chunks) - 1)) == 0) {
        at = x;
        break;
      }
    if (at == 16) {
      emu::misuse(
          "tmem_alloc() of more tensor-memory columns than are free (512 in all; on a "
          "GPU it waits until another cube frees some, here forever)",
          where);
      slot.p[0] = 0;
    } else {
      st->allocated |= ((1u << chunks) - 1) << at;
      st->file = where.file_name();
      st->line = where.line();
      slot.p[0] = at * 32;
    }
  }
  emu::sync_threads(where);
  return slot.p[0];
}
template <u32 C>
inline void tmem_free(u32 t KILN_WHERE) {
  emu::TmemState* st = emu::unit()->tmem_state;
  emu::sync_threads(where);
  if (unit_linear() == 0) {
    const u32 c = t & 0xffffu;
    if ((t >> 16) != 0 || c % C != 0 || !tmem_allocated(c, C))
      emu::misuse(
          "tmem_free() of columns that are not allocated (free what tmem_alloc returned, "
          "with the same number of columns)",
          where);
    else if (st->issued > st->waited)
      emu::misuse(
          "tmem_free() while a tcgen05_mma may still write tensor memory; "
          "tcgen05_commit() and mbarrier_wait() first",
          where);
    else
      st->allocated &= ~(((1u << (C / 32)) - 1) << (c / 32));
  }
}
// The host runs the multiply when it is issued, as the ISA defines its result: D (128 x N at
// the address's columns) = A * B^T (+ D), in order over k for each element.
template <class T, int N, int MJ>
inline void tcgen05_mma(u32 d, u64 adesc, u64 bdesc, bool accumulate KILN_WHERE) {
  if (unit_linear() != 0) return;
  typedef typename tcgen05_acc<T>::type C;
  emu::TmemState* st = emu::unit()->tmem_state;
  const u32 col = d & 0xffffu;
  if ((d >> 16) != 0 || !tmem_allocated(col, N)) {
    emu::misuse(
        "a tcgen05_mma into tensor-memory columns that are not allocated (the "
        "address must be what tmem_alloc returned, plus columns inside the allocation)",
        where);
    return;
  }
  ++st->issued;
  const u64 a = tcgen05_as_wgmma(adesc), b = tcgen05_as_wgmma(bdesc);
  const int K = tcgen05_acc<T>::k;
  uint32_t* tm = emu::unit()->tmem;
  for (u32 r = 0; r < 128; ++r) {
    T arow[32];
    for (int k = 0; k < K; ++k)
      arow[k] = wgmma_read<T>(a, r, (u32)k, emu::kLoad | emu::kAsync, MJ & 1 KILN_AT);
    for (u32 c = 0; c < (u32)N; ++c) {
      uint32_t* cell = tm + r * 512 + col + c;
      C sum = C(0);
      if (accumulate) memcpy(&sum, cell, 4);
      for (int k = 0; k < K; ++k)
        sum =
            mma_madd(sum, arow[k],
                     wgmma_read<T>(b, c, (u32)k, emu::kLoad | emu::kAsync, (MJ & 2) != 0 KILN_AT));
      memcpy(cell, &sum, 4);
    }
  }
}
inline void tcgen05_commit(const bounded<u64>& bars, u32 i KILN_WHERE) {
  if (unit_linear() != 0) return;
  u64* w = mbar_word(bars, i KILN_AT);
  if (!w) return;
  emu::TmemState* st = emu::unit()->tmem_state;
  // The multiplies ran when issued, but a GPU may still be running them (and reading their
  // shared memory) until a wait sees this arrival's phase complete.
  if (st->pending == emu::kMaxPendingCommits) {
    emu::misuse(
        "more than 16 tcgen05_commit()s pending with no mbarrier_wait() that completes "
        "them (the emulator tracks 16; wait for earlier commits first)",
        where);
    return;
  }
  st->committed = st->issued;
  st->commits[st->pending++] = emu::TmemCommit{w, (u32)((*w >> 40) & 1u), st->issued};
  mbar_arrive(w KILN_AT);
}
template <u32 N, class T>
inline void tmem_load(const bounded<T>& dst, u32 index, u32 t KILN_WHERE) {
  emu::sync_threads(where);
  if (unit_linear() == 0) {
    emu::TmemState* st = emu::unit()->tmem_state;
    const u32 col = t & 0xffffu;
    if ((t >> 16) != 0 || !tmem_allocated(col, N)) {
      emu::misuse("tmem_load() of tensor-memory columns that are not allocated", where);
    } else if (st->issued > st->waited) {
      emu::misuse(
          "tmem_load() while a tcgen05_mma may still write tensor memory (the multiply "
          "issued last has not been committed and waited for): tcgen05_commit() and "
          "mbarrier_wait() first",
          where);
    } else if ((u64)index + 128ull * N > dst.n) {
      emu::out_of_bounds(dst.space, emu::kStore, index + 128u * N - 1u, dst.n, where);
    } else {
      const uint32_t* tm = emu::unit()->tmem;
      for (u32 r = 0; r < 128; ++r) {
        T* row = dst.p + index + r * N;
        if (!emu::access(row, sizeof(T) * N, emu::kStore, where)) break;
        memcpy(row, tm + r * 512 + col, 4 * N);
      }
    }
  }
  emu::sync_threads(where);
}
// tcgen05.ld for one unit: its row (unit % 128) of the N columns at the address's column + col.
template <class L>
inline L tmem_read(u32 t, u32 col KILN_WHERE) {
  typedef typename lanes_of<L>::elem T;
  enum : u32 { N = lanes_of<L>::value };
  emu::TmemState* st = emu::unit()->tmem_state;
  const u64 c = (u64)(t & 0xffffu) + col;
  u32 r[N] = {};
  if ((t >> 16) != 0 || c + N > 512 || !tmem_allocated((u32)c, N))
    emu::misuse(
        "tmem_read() of tensor-memory columns that are not allocated (the address must be "
        "what tmem_alloc returned, and the columns read inside the allocation)",
        where);
  else if (st->issued > st->waited)
    emu::misuse(
        "tmem_read() while a tcgen05_mma may still write tensor memory (the multiply "
        "issued last has not been committed and waited for): tcgen05_commit() and "
        "mbarrier_wait() first",
        where);
  else
    memcpy(r, emu::unit()->tmem + (unit_linear() % 128u) * 512u + c, 4 * N);
  return tmem_lanes<L>(r);
}
#else
__device__ __forceinline__ u32 shared_address(const void* p) {
  return (u32)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(u64* bars, u32 i, u32 count) {
  if (unit_linear() == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bars + i)),
                 "r"(count)
                 : "memory");
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
  }
  __syncthreads();
}
__device__ __forceinline__ void mbar_wait(u64* bars, u32 i, u32 parity) {
  const u32 a = shared_address(bars + i);
  u32 done = 0;
  while (!done) {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
#endif
  }
}
// A pipeline's protocol (the emulator's versions say what each does).
__device__ __forceinline__ void pipe_begin(u64* full, u64* empty, u32 stages, u32 consumer_planes) {
  if (unit_linear() == 0) {
    for (u32 s = 0; s < stages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(full + s))
                   : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(empty + s)),
                   "r"(consumer_planes)
                   : "memory");
    }
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
  }
  __syncthreads();
}
__device__ __forceinline__ void pipe_wait(u64* bars, u32 i, u32 parity) {
  mbar_wait(bars, i, parity);
}
__device__ __forceinline__ void pipe_release(u64* bars, u32 i) {
  __syncwarp();
  if ((unit_linear() & 31u) == 0)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bars + i))
                 : "memory");
}
__device__ __forceinline__ void pipe_retire() {}
// A pipeline's register split: the producer warpgroup gives registers back, the consumers take
// them (every warp of a warpgroup executes it; the arch-specific targets have it).
template <u32 N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <u32 N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <class T>
__device__ __forceinline__ u64 tcgen05_desc(const T* mem, u32 index, u32 lbo, u32 sbo,
                                            u32 swizzle) {
  return tcgen05_desc_bits(shared_address(mem + index), lbo, sbo, swizzle);
}
template <u32 C>
__device__ __forceinline__ u32 tmem_alloc(u32* slot) {
  if ((unit_linear() >> 5) == 0)
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(
                     shared_address(slot)),
                 "n"(C)
                 : "memory");
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  const u32 t = *(volatile u32*)slot;
  __syncthreads();  // read by every unit before another allocation writes the slot
  return t;
}
template <u32 C>
__device__ __forceinline__ void tmem_free(u32 t) {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  if ((unit_linear() >> 5) == 0)
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(t), "n"(C)
                 : "memory");
}
template <class T, int N, int MJ>
__device__ __forceinline__ void tcgen05_mma(u32 d, u64 adesc, u64 bdesc, bool accumulate) {
  if (unit_linear() != 0) return;
  constexpr u32 idesc = tcgen05_idesc<T, N, MJ>();
  const u32 acc = accumulate ? 1u : 0u;
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
#define KILN_TCGEN05_MMA(KIND)                                                      \
  asm volatile(                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"                                   \
      "tcgen05.mma.cta_group::1.kind::" KIND " [%0], %1, %2, %3, p;\n}\n" ::"r"(d), \
      "l"(adesc), "l"(bdesc), "r"(idesc), "r"(acc)                                  \
      : "memory")
  if constexpr (tcgen05_kind<T>::kind == 0)
    KILN_TCGEN05_MMA("f16");
  else if constexpr (tcgen05_kind<T>::kind == 1)
    KILN_TCGEN05_MMA("tf32");
  else if constexpr (tcgen05_kind<T>::kind == 2)
    KILN_TCGEN05_MMA("f8f6f4");
  else
    KILN_TCGEN05_MMA("i8");
#undef KILN_TCGEN05_MMA
}
__device__ __forceinline__ void tcgen05_commit(u64* bars, u32 i) {
  if (unit_linear() != 0) return;
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(
                   shared_address(bars + i))
               : "memory");
}
// Warps 0-3 read their 32 lanes of tensor memory (warp w: lanes 32w .. 32w + 31; a unit's lane
// is its row) 8 columns at a time, and write the rows to dst.
template <u32 N, class T>
__device__ __forceinline__ void tmem_load(T* dst, u32 index, u32 t) {
  const u32 w = unit_linear() >> 5, lane = unit_linear() & 31u;
  if (w < 4) {
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    T* row = dst + index + (w * 32u + lane) * N;
    for (u32 c = 0; c < N; c += 8) {
      u32 r[8];
      asm volatile(
          "tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];\n"
          "tcgen05.wait::ld.sync.aligned;\n"
          : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
            "=r"(r[7])
          : "r"(t + ((w * 32u) << 16) + c)
          : "memory");
      for (int e = 0; e < 8; ++e) row[c + e] = tmem_cell<T>(r[e]);
    }
  }
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  __syncthreads();
}
// tcgen05.ld.32x32b for one plane: unit u gets its row (u % 128; plane p reads lanes 32 (p % 4)
// .. + 31) of N columns, and waits for them.
template <class L>
__device__ __forceinline__ L tmem_read(u32 t, u32 col) {
  enum : u32 { N = lanes_of<L>::value };
  const u32 a = t + ((((unit_linear() >> 5) & 3u) * 32u) << 16) + col;
  u32 r[N];
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
  if constexpr (N == 1) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];\n"
        "tcgen05.wait::ld.sync.aligned;\n"
        : "=r"(r[0])
        : "r"(a)
        : "memory");
  } else if constexpr (N == 2) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x2.b32 {%0, %1}, [%2];\n"
        "tcgen05.wait::ld.sync.aligned;\n"
        : "=r"(r[0]), "=r"(r[1])
        : "r"(a)
        : "memory");
  } else if constexpr (N == 4) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x4.b32 {%0, %1, %2, %3}, [%4];\n"
        "tcgen05.wait::ld.sync.aligned;\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(a)
        : "memory");
  } else if constexpr (N == 8) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];\n"
        "tcgen05.wait::ld.sync.aligned;\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7])
        : "r"(a)
        : "memory");
  } else {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
        "%9, %10, %11, %12, %13, %14, %15}, [%16];\n"
        "tcgen05.wait::ld.sync.aligned;\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
          "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),
          "=r"(r[14]), "=r"(r[15])
        : "r"(a)
        : "memory");
  }
  return tmem_lanes<L>(r);
}
#endif
// ---- TMA (sm_90 and later) --------------------------------------------------------------------
//
// tma_store<SWIZZLE, BOX...>(map, src, index, {coordinates}): the other way, from shared memory
// laid out the same into the tensor (elements outside it not written), done when it returns.
// tma_load<SWIZZLE, BOX...>(dst, index, map, bars, bar index, {coordinates}): one unit copies the
// box (extents outermost first) at the coordinates (outermost first; elements outside the tensor
// are zero) into dst from element `index` on, row-major and swizzled, and the box's bytes
// complete on the mbarrier. mbar_arrive_expect_tx: one unit adds bytes to the transaction count
// of the mbarrier's phase and arrives on it. The map is a kernel parameter in param space
// (__grid_constant__), encoded by the runtime: the driver's CUtensorMap on a GPU, a tma_desc in
// the emulator.
struct alignas(128) tensor_map {
  u64 bits[16];
};
#ifdef KILN_EMULATION
// The emulator's tensor map (runtime/tma.cpp writes it): the tensor's address, rank, element
// size, whether a load fills outside the tensor with NaN (else zeros), and its shape and strides
// in elements, outermost first.
// An im2col map (im2col = 1) has its bounding box's corners too, per spatial dimension,
// outermost first.
struct tma_desc {
  u64 base;
  u32 rank, elem_bytes;
  u32 fill_nan, im2col;
  u64 dims[5], strides[5];
  i32 lower[3], upper[3];
};
inline void mbar_arrive_expect_tx(const bounded<u64>& bars, u32 i, u32 bytes KILN_WHERE) {
  if (!issues()) return;
  u64* w = mbar_word(bars, i KILN_AT);
  if (w) mbar_update(w, 1, (long long)bytes KILN_AT);
}
// The elements of a box in box order: visit(shared byte offset from the array's start,
// swizzled; whether inside the tensor; its offset in the tensor in elements). False after a
// misuse of the shared side (misaligned, or the box past the array), reported.
template <u32 SW, class T, int R, class Visit>
inline bool tma_walk(const tma_desc& m, const u32 (&box)[R], const bounded<T>& mem, u32 index,
                     const i32 (&c)[R], Visit visit KILN_WHERE) {
  u64 total = sizeof(T);
  for (int d = 0; d < R; ++d) total *= box[d];
  const u64 start = (u64)index * sizeof(T);
  if (m.rank != (u32)R || m.elem_bytes != sizeof(T)) {
    emu::misuse("a TMA copy through a tensor map that does not describe its tensor", where);
    return false;
  }
  if (start % 128 != 0) {
    emu::misuse(
        "a tma_load or tma_store at a shared-array index that is no multiple of 128 "
        "bytes (TMA moves whole 128-byte aligned lines)",
        where);
    return false;
  }
  // A swizzle moves 16-byte chunks within their 128-byte line: every line the box touches
  // must be inside the array.
  const u64 reach = SW ? (total + 127) / 128 * 128 : total;
  if (start + reach > (u64)mem.n * sizeof(T)) {
    emu::out_of_bounds(mem.space, emu::kStore, (u32)((start + reach) / sizeof(T) - 1), mem.n,
                       where);
    return false;
  }
  const u64 mask = SW ? SW / 16 - 1 : 0;
  u32 at[R] = {};
  for (u64 e = 0, n = total / sizeof(T); e < n; ++e) {
    bool inside = true;
    u64 offset = 0;
    for (int d = 0; d < R; ++d) {
      const long long g = (long long)c[d] + at[d];
      inside = inside && g >= 0 && g < (long long)m.dims[d];
      if (inside) offset += (u64)g * m.strides[d];
    }
    u64 byte = start + e * sizeof(T);
    byte ^= ((byte >> 7) & mask) << 4;
    if (!visit(byte, inside, offset)) return false;
    for (int d = R; d-- > 0;) {
      if (++at[d] < box[d]) break;
      at[d] = 0;
    }
  }
  return true;
}
template <u32 SW, u32... BOX, class T, int R>
inline void tma_load(const bounded<T>& dst, u32 index, const tensor_map& map,
                     const bounded<u64>& bars, u32 bi, const i32 (&c)[R] KILN_WHERE) {
  static_assert(sizeof...(BOX) == R, "one coordinate per dimension of the box");
  if (!issues()) return;
  u64* w = mbar_word(bars, bi KILN_AT);
  if (!w) return;
  tma_desc m;
  memcpy(&m, &map, sizeof m);
  const u32 box[R] = {BOX...};
  unsigned char* out = (unsigned char*)dst.p;
  const unsigned char* in = (const unsigned char*)(uintptr_t)m.base;
  const bool done = tma_walk<SW>(m, box, dst, index, c, [&](u64 byte, bool inside, u64 offset) {
    if (!emu::access(out + byte, sizeof(T), emu::kStore | emu::kSharedSpace, where)) return false;
    if (inside) {
      memcpy(out + byte, in + offset * sizeof(T), sizeof(T));
    } else {
      // NaN: every bit but the sign set, a NaN in every IEEE format (the GPU's canonical
      // f32 NaN, 0x7fffffff).
      memset(out + byte, m.fill_nan ? 0xff : 0, sizeof(T));
      if (m.fill_nan) out[byte + sizeof(T) - 1] = 0x7f;
    }
    return true;
  } KILN_AT);
  u64 total = sizeof(T);
  for (int d = 0; d < R; ++d) total *= box[d];
  if (done) mbar_update(w, 0, -(long long)total KILN_AT);
}
// An im2col box (runtime/tma.h): P rows of C elements, row p the pixel of the p-th filter
// origin from the coordinates on (walking the bounding box, then the images) read at origin +
// the offsets, the elements outside the tensor filled.
template <u32 SW, u32 P, u32 C, class T, int R, int S>
inline void tma_load_im2col(const bounded<T>& dst, u32 index, const tensor_map& map,
                            const bounded<u64>& bars, u32 bi, const i32 (&c)[R],
                            const u16 (&o)[S] KILN_WHERE) {
  static_assert(R >= 3 && R <= 5 && S == R - 2, "an im2col box: rank 3 to 5, an offset per "
                                                "spatial dimension");
  if (!issues()) return;
  u64* w = mbar_word(bars, bi KILN_AT);
  if (!w) return;
  tma_desc m;
  memcpy(&m, &map, sizeof m);
  if (m.rank != (u32)R || m.elem_bytes != sizeof(T) || !m.im2col) {
    emu::misuse("an im2col TMA load through a tensor map that does not describe its view", where);
    return;
  }
  const u64 total = (u64)P * C * sizeof(T), start = (u64)index * sizeof(T);
  if (start % 128 != 0) {
    emu::misuse(
        "a tma_load at a shared-array index that is no multiple of 128 bytes (TMA moves whole "
        "128-byte aligned lines)",
        where);
    return;
  }
  const u64 reach = SW ? (total + 127) / 128 * 128 : total;
  if (start + reach > (u64)dst.n * sizeof(T)) {
    emu::out_of_bounds(dst.space, emu::kStore, (u32)((start + reach) / sizeof(T) - 1), dst.n,
                       where);
    return;
  }
  long long origin[R - 1];
  for (int d = 0; d < R - 1; ++d) origin[d] = c[d];
  for (int s = 0; s < S; ++s)
    if (origin[1 + s] < m.lower[s] || origin[1 + s] >= (long long)m.dims[1 + s] + m.upper[s]) {
      emu::misuse(
          "an im2col tma_load whose coordinates put its first filter origin outside the view's "
          "bounding box (per spatial dimension: lower <= origin < extent + upper); start each "
          "load at an output pixel",
          where);
      return;
    }
  const u64 mask = SW ? SW / 16 - 1 : 0;
  unsigned char* out = (unsigned char*)dst.p;
  const unsigned char* in = (const unsigned char*)(uintptr_t)m.base;
  for (u32 p = 0; p < P; ++p) {
    bool pixel = origin[0] >= 0 && origin[0] < (long long)m.dims[0];
    u64 at = pixel ? (u64)origin[0] * m.strides[0] : 0;
    for (int s = 0; s < S && pixel; ++s) {
      const long long g = origin[1 + s] + o[s];
      pixel = g >= 0 && g < (long long)m.dims[1 + s];
      at += (u64)g * m.strides[1 + s];
    }
    for (u32 e = 0; e < C; ++e) {
      const long long g = (long long)c[R - 1] + e;
      const bool inside = pixel && g >= 0 && g < (long long)m.dims[R - 1];
      u64 byte = start + ((u64)p * C + e) * sizeof(T);
      byte ^= ((byte >> 7) & mask) << 4;
      if (!emu::access(out + byte, sizeof(T), emu::kStore | emu::kSharedSpace, where)) return;
      if (inside) {
        memcpy(out + byte, in + (at + (u64)g * m.strides[R - 1]) * sizeof(T), sizeof(T));
      } else {
        memset(out + byte, m.fill_nan ? 0xff : 0, sizeof(T));
        if (m.fill_nan) out[byte + sizeof(T) - 1] = 0x7f;
      }
    }
    int s = S;
    while (s-- > 0) {
      if (++origin[1 + s] < (long long)m.dims[1 + s] + m.upper[s]) break;
      origin[1 + s] = m.lower[s];
    }
    if (s < 0) ++origin[0];
  }
  mbar_update(w, 0, -(long long)total KILN_AT);
}
// tma_load into the cubes of the cluster in `mask` (bit r: rank r), each at the same shared
// offsets and completing on its own mbarrier; the box is read once per destination here.
template <u32 SW, u32... BOX, class T, int R>
inline void tma_load_multicast(const bounded<T>& dst, u32 index, const tensor_map& map,
                               const bounded<u64>& bars, u32 bi, u16 mask,
                               const i32 (&c)[R] KILN_WHERE) {
  if (!issues()) return;
  for (u32 r = 0; r < 16; ++r) {
    if (!(mask >> r & 1u)) continue;
    T* p = (T*)emu::map_shared(dst.p, r, where);
    u64* b = (u64*)emu::map_shared(bars.p, r, where);
    if (!p || !b) return;
    tma_load<SW, BOX...>(bounded<T>{p, dst.n, dst.space}, index, map,
                         bounded<u64>{b, bars.n, bars.space}, bi, c KILN_AT);
  }
}
// ---- clusters ---------------------------------------------------------------------------------
inline u32 cluster_rank() {
  return emu::unit()->cluster_rank;
}
inline void sync_cluster(const ::std::source_location& where = ::std::source_location::current()) {
  emu::sync_cluster(where);
}
template <class L>
inline auto cluster_load(const bounded<L>& a, u32 rank, u32 i KILN_WHERE)
    -> decltype(memory_load(a.p, i)) {
  if (i >= a.n) {
    emu::out_of_bounds(a.space, emu::kLoad, i, a.n, where);
    return {};
  }
  const L* p = (const L*)emu::map_shared(a.p + i, rank, where);
  if (!p || !emu::access(p, sizeof(L), emu::kLoad | emu::kSharedSpace, where)) return {};
  return memory_load(p, 0);
}
// cp.async: the unit's 16 bytes land at once (the emulator orders them as the unit's own store:
// other units read them after a sync_cube, as on the GPU after the wait and a barrier).
template <class T, class S>
inline void copy_async(const bounded<T>& dst, u32 si, const S* src, u32 gi, bool valid KILN_WHERE) {
  enum : u32 { N = 16 / sizeof(T) };
  if (si % N != 0 || ((uintptr_t)(src + gi) % 16 != 0 && valid)) {
    emu::misuse(
        "a copy_async whose shared or global address is not 16-byte aligned (its "
        "indices must be multiples of 16 bytes, and the tensor's data start on 16 bytes)",
        where);
    return;
  }
  if (si + N > dst.n) {
    emu::out_of_bounds(dst.space, emu::kStore, si + N - 1, dst.n, where);
    return;
  }
  if (valid && !emu::access(src + gi, 16, emu::kLoad, where)) return;
  if (!emu::access(dst.p + si, 16, emu::kStore | emu::kSharedSpace, where)) return;
  if (valid)
    memcpy(dst.p + si, src + gi, 16);
  else
    memset(dst.p + si, 0, 16);
}
inline void copy_async_commit() {}
template <int N>
inline void copy_async_wait() {}
// A reduction: each element of the box inside the tensor combined with the tensor's element
// atomically (cubes run on several host threads), rounded once as the GPU does: f16 and bf16
// through f32 (exact enough that rounding the f32 result rounds the exact one), min and max of a
// NaN and a number giving the number.
inline f32 tma_min(f32 x, f32 y) {
  return x != x ? y : y != y ? x : x < y ? x : y;
}
inline f32 tma_max(f32 x, f32 y) {
  return x != x ? y : y != y ? x : x < y ? y : x;
}
template <u32 RED, class T>  // integers: sums wrap
inline T tma_combine(T a, T b) {
  if (RED == 1) return (T)((u64)a + (u64)b);
  return RED == 2 ? (a < b ? a : b) : (a < b ? b : a);
}
template <u32 RED>
inline f32 tma_combine(f32 a, f32 b) {
  return a + b;
}  // add only
template <u32 RED>
inline f16 tma_combine(f16 a, f16 b) {
  const f32 x = to_f32(a), y = to_f32(b);
  return cast<f16>(RED == 1 ? x + y : RED == 2 ? tma_min(x, y) : tma_max(x, y));
}
template <u32 RED>
inline bf16 tma_combine(bf16 a, bf16 b) {
  const f32 x = to_f32(a), y = to_f32(b);
  return cast<bf16>(RED == 1 ? x + y : RED == 2 ? tma_min(x, y) : tma_max(x, y));
}
template <int B>
struct tma_bits;
template <>
struct tma_bits<2> {
  typedef u16 type;
};
template <>
struct tma_bits<4> {
  typedef u32 type;
};
template <>
struct tma_bits<8> {
  typedef u64 type;
};
// A store (RED 0) or reduction (RED 1 add, 2 min, 3 max) of a box from shared memory, by unit 0
// between two barriers, the tensor written when it returns. A synchronous one frees the shared
// memory at once; an asynchronous one (ASYNC) counts as reading it until a tma_store_wait that
// covers its group, and the race detector holds every unit's stores to those bytes to that.
template <u32 RED, bool ASYNC, u32 SW, u32... BOX, class T, int R>
inline void tma_store_impl(const tensor_map& map, const bounded<T>& src, u32 index,
                           const i32 (&c)[R] KILN_WHERE) {
  static_assert(sizeof...(BOX) == R, "one coordinate per dimension of the box");
  emu::sync_threads(where);
  if (unit_linear() == 0) {
    emu::TmemState* st = emu::unit()->tmem_state;
    ++st->bulk_issued;  // this store's group
    if (ASYNC) {
      st->bulk_file = where.file_name();
      st->bulk_line = where.line();
    }
    tma_desc m;
    memcpy(&m, &map, sizeof m);
    const u32 box[R] = {BOX...};
    const unsigned char* in = (const unsigned char*)src.p;
    T* out = (T*)(uintptr_t)m.base;
    typedef typename tma_bits<sizeof(T)>::type U;
    tma_walk<SW>(m, box, src, index, c, [&](u64 byte, bool inside, u64 offset) {
      if (!emu::access(in + byte, sizeof(T),
                       emu::kLoad | emu::kSharedSpace | (ASYNC ? emu::kBulk : 0u), where))
        return false;
      if (!inside) return true;
      if (RED == 0) {
        memcpy(out + offset, in + byte, sizeof(T));
        return true;
      }
      T v;
      memcpy(&v, in + byte, sizeof(T));
      U* cell = (U*)(out + offset);
      U old = __atomic_load_n(cell, __ATOMIC_RELAXED), next;
      do {
        T cur;
        memcpy(&cur, &old, sizeof(T));
        const T r = tma_combine<RED>(cur, v);
        memcpy(&next, &r, sizeof(T));
      } while (
          !__atomic_compare_exchange_n(cell, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
      return true;
    } KILN_AT);
    if (!ASYNC) st->bulk_waited = st->bulk_issued;  // wait_group 0: every group is done
  }
  if (!ASYNC) emu::sync_threads(where);
}
template <u32 SW, u32... BOX, class T, int R>
inline void tma_store(const tensor_map& map, const bounded<T>& src, u32 index,
                      const i32 (&c)[R] KILN_WHERE) {
  tma_store_impl<0, false, SW, BOX...>(map, src, index, c KILN_AT);
}
template <u32 SW, u32... BOX, class T, int R>
inline void tma_store_async(const tensor_map& map, const bounded<T>& src, u32 index,
                            const i32 (&c)[R] KILN_WHERE) {
  tma_store_impl<0, true, SW, BOX...>(map, src, index, c KILN_AT);
}
template <u32 RED, u32 SW, u32... BOX, class T, int R>
inline void tma_reduce(const tensor_map& map, const bounded<T>& src, u32 index,
                       const i32 (&c)[R] KILN_WHERE) {
  tma_store_impl<RED, false, SW, BOX...>(map, src, index, c KILN_AT);
}
template <u32 RED, u32 SW, u32... BOX, class T, int R>
inline void tma_reduce_async(const tensor_map& map, const bounded<T>& src, u32 index,
                             const i32 (&c)[R] KILN_WHERE) {
  tma_store_impl<RED, true, SW, BOX...>(map, src, index, c KILN_AT);
}
template <int N>
inline void tma_store_wait(
    const ::std::source_location& where = ::std::source_location::current()) {
  if (unit_linear() == 0) {
    emu::TmemState* st = emu::unit()->tmem_state;
    if (st->bulk_issued > st->bulk_waited + (u32)N) st->bulk_waited = st->bulk_issued - (u32)N;
  }
  emu::sync_threads(where);
}
// A prefetch changes no result: the emulator checks only that the map is the tensor's.
template <u32 SW, u32... BOX, int R>
inline void tma_prefetch(const tensor_map& map, const i32 (&c)[R] KILN_WHERE) {
  static_assert(sizeof...(BOX) == R, "one coordinate per dimension of the box");
  (void)c;
  if (!issues()) return;
  tma_desc m;
  memcpy(&m, &map, sizeof m);
  if (m.rank != (u32)R)
    emu::misuse("a TMA prefetch through a tensor map that does not describe its tensor", where);
}
#else
__device__ __forceinline__ void mbar_arrive_expect_tx(u64* bars, u32 i, u32 bytes) {
#if __CUDA_ARCH__ >= 900
  if (issues())
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bars + i)),
        "r"(bytes)
        : "memory");
#endif
}
// cp.async.bulk.tensor takes the coordinates innermost first. MC: multicast to the cubes of
// the cluster in `mask`, at the same shared offsets, each completing on its own mbarrier.
template <bool MC, u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_load_impl(T* dst, u32 index, const tensor_map& map, u64* bars,
                                              u32 bi, u16 mask, const i32 (&c)[R]) {
  static_assert(sizeof...(BOX) == R, "one coordinate per dimension of the box");
#if __CUDA_ARCH__ >= 900
  if (!issues()) return;
  const u32 d = shared_address(dst + index), b = shared_address(bars + bi);
  const u64 m = (u64)&map;
#define KILN_TMA_FORM(N, MCAST, MASK, ...)                                                      \
  "cp.async.bulk.tensor." #N "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" MCAST \
  " [%0], [%1, {" __VA_ARGS__ "}], [%2]" MASK ";"
#define KILN_TMA(N, ...)                                                                       \
  if constexpr (MC)                                                                            \
    asm volatile(KILN_TMA_FORM(N, ".multicast::cluster", ", %3", __VA_ARGS__)::"r"(d), "l"(m), \
                 "r"(b), "h"(mask), KILN_TMA_COORDS_##N                                        \
                 : "memory");                                                                  \
  else                                                                                         \
    asm volatile(KILN_TMA_FORM(N, "", "", __VA_ARGS__)::"r"(d), "l"(m), "r"(b), "h"(mask),     \
                 KILN_TMA_COORDS_##N                                                           \
                 : "memory");
#define KILN_TMA_COORDS_1 "r"(c[0])
#define KILN_TMA_COORDS_2 "r"(c[1]), "r"(c[0])
#define KILN_TMA_COORDS_3 "r"(c[2]), "r"(c[1]), "r"(c[0])
#define KILN_TMA_COORDS_4 "r"(c[3]), "r"(c[2]), "r"(c[1]), "r"(c[0])
#define KILN_TMA_COORDS_5 "r"(c[4]), "r"(c[3]), "r"(c[2]), "r"(c[1]), "r"(c[0])
  if constexpr (R == 1) {
    KILN_TMA(1, "%4")
  } else if constexpr (R == 2) {
    KILN_TMA(2, "%4, %5")
  } else if constexpr (R == 3) {
    KILN_TMA(3, "%4, %5, %6")
  } else if constexpr (R == 4) {
    KILN_TMA(4, "%4, %5, %6, %7")
  } else {
    KILN_TMA(5, "%4, %5, %6, %7, %8")
  }
#undef KILN_TMA_COORDS_1
#undef KILN_TMA_COORDS_2
#undef KILN_TMA_COORDS_3
#undef KILN_TMA_COORDS_4
#undef KILN_TMA_COORDS_5
#undef KILN_TMA
#undef KILN_TMA_FORM
#endif
}
template <u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_load(T* dst, u32 index, const tensor_map& map, u64* bars,
                                         u32 bi, const i32 (&c)[R]) {
  tma_load_impl<false, SW, BOX...>(dst, index, map, bars, bi, 0, c);
}
template <u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_load_multicast(T* dst, u32 index, const tensor_map& map,
                                                   u64* bars, u32 bi, u16 mask, const i32 (&c)[R]) {
  tma_load_impl<true, SW, BOX...>(dst, index, map, bars, bi, mask, c);
}
// An im2col box: the coordinates and then the offsets, each innermost first.
template <u32 SW, u32 P, u32 C, class T, int R, int S>
__device__ __forceinline__ void tma_load_im2col(T* dst, u32 index, const tensor_map& map,
                                                u64* bars, u32 bi, const i32 (&c)[R],
                                                const u16 (&o)[S]) {
  static_assert(R >= 3 && R <= 5 && S == R - 2, "an im2col box: rank 3 to 5, an offset per "
                                                "spatial dimension");
#if __CUDA_ARCH__ >= 900
  if (!issues()) return;
  const u32 d = shared_address(dst + index), b = shared_address(bars + bi);
  const u64 m = (u64)&map;
#define KILN_TMA_IM2COL(N, COORDS, OFFSETS)                                                 \
  "cp.async.bulk.tensor." #N "d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes" \
  " [%0], [%1, {" COORDS "}], [%2], {" OFFSETS "};"
  if constexpr (R == 3) {
    asm volatile(KILN_TMA_IM2COL(3, "%3, %4, %5", "%6")::"r"(d), "l"(m), "r"(b), "r"(c[2]),
                 "r"(c[1]), "r"(c[0]), "h"(o[0])
                 : "memory");
  } else if constexpr (R == 4) {
    asm volatile(KILN_TMA_IM2COL(4, "%3, %4, %5, %6", "%7, %8")::"r"(d), "l"(m), "r"(b),
                 "r"(c[3]), "r"(c[2]), "r"(c[1]), "r"(c[0]), "h"(o[1]), "h"(o[0])
                 : "memory");
  } else {
    asm volatile(KILN_TMA_IM2COL(5, "%3, %4, %5, %6, %7", "%8, %9, %10")::"r"(d), "l"(m),
                 "r"(b), "r"(c[4]), "r"(c[3]), "r"(c[2]), "r"(c[1]), "r"(c[0]), "h"(o[2]),
                 "h"(o[1]), "h"(o[0])
                 : "memory");
  }
#undef KILN_TMA_IM2COL
#endif
}
// ---- clusters (sm_90 and later) -----------------------------------------------------------------
// cluster_rank: %cluster_ctarank. sync_cluster: the cluster barrier, releasing the units' writes
// to every cube of the cluster (mbar_init fences its initialization for the cluster, so a
// multicast from another cube after a sync_cluster completes on it). cluster_load: mapa gives the
// generic address of the same shared element in the cube of that rank; a generic load reads it.
__device__ __forceinline__ u32 cluster_rank() {
#if __CUDA_ARCH__ >= 900
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  return 0;
#endif
}
__device__ __forceinline__ void sync_cluster() {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n\t"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
#else
  __syncthreads();
#endif
}
template <class L>
__device__ __forceinline__ auto cluster_load(L* p, u32 rank, u32 i) -> decltype(memory_load(p, i)) {
  u64 a = (u64)(p + i);
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(a) : "l"(a), "r"(rank));
#endif
  return memory_load(reinterpret_cast<const L*>(a), 0);
}
// cp.async.cg: 16 bytes, L2 only; a source size of 0 writes 16 zero bytes and reads nothing.
template <class T, class S>
__device__ __forceinline__ void copy_async(T* dst, u32 si, const S* src, u32 gi, bool valid) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst + si)),
               "l"(src + gi), "r"(valid ? 16u : 0u)
               : "memory");
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void copy_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
// cp.async.bulk.prefetch.tensor: the box towards L2, by one unit; nothing waits for it.
template <u32 SW, u32... BOX, int R>
__device__ __forceinline__ void tma_prefetch(const tensor_map& map, const i32 (&c)[R]) {
  static_assert(sizeof...(BOX) == R, "one coordinate per dimension of the box");
#if __CUDA_ARCH__ >= 900
  if (!issues()) return;
  const u64 m = (u64)&map;
#define KILN_TMA(N, ...) \
  asm volatile("cp.async.bulk.prefetch.tensor." #N "d.L2.global.tile [%0, {" __VA_ARGS__ "}];"
  if constexpr (R == 1)
    KILN_TMA(1, "%1") ::"l"(m), "r"(c[0]) : "memory");
  else if constexpr (R == 2)
    KILN_TMA(2, "%1, %2") ::"l"(m), "r"(c[1]), "r"(c[0]) : "memory");
  else if constexpr (R == 3)
    KILN_TMA(3, "%1, %2, %3") ::"l"(m), "r"(c[2]), "r"(c[1]), "r"(c[0]) : "memory");
  else if constexpr (R == 4)
    KILN_TMA(4, "%1, %2, %3, %4") ::"l"(m), "r"(c[3]), "r"(c[2]), "r"(c[1]), "r"(c[0])
        : "memory");
  else
    KILN_TMA(5, "%1, %2, %3, %4, %5") ::"l"(m), "r"(c[4]), "r"(c[3]), "r"(c[2]), "r"(c[1]),
        "r"(c[0]) : "memory");
#undef KILN_TMA
#endif
}
// A store (RED 0: cp.async.bulk.tensor) or reduction (RED 1 add, 2 min, 3 max:
// cp.reduce.async.bulk.tensor, the element type the tensor map's) of a box from shared memory:
// every unit's stores to the box made visible to the async proxy, a cube barrier, unit 0's copy
// in a bulk group of its own. A synchronous one then waits for its writes and ends with a
// barrier (the shared memory free again); an asynchronous one returns, and tma_store_wait frees
// the shared memory.
template <u32 RED, bool ASYNC, u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_store_impl(const tensor_map& map, T* src, u32 index,
                                               const i32 (&c)[R]) {
  static_assert(sizeof...(BOX) == R, "one coordinate per dimension of the box");
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (unit_linear() == 0) {
    const u32 s = shared_address(src + index);
    const u64 m = (u64)&map;
#define KILN_TMA(OP, N, ...) \
  asm volatile(OP "." #N "d.global.shared::cta" __VA_ARGS__ "}], [%1];"
#define KILN_TMA_RANKS(OP, KIND)                                                                   \
  if constexpr (R == 1)                                                                            \
    KILN_TMA(OP, 1, KIND ".tile.bulk_group [%0, {%2") ::"l"(m), "r"(s), "r"(c[0]) : "memory");     \
  else if constexpr (R == 2)                                                                       \
    KILN_TMA(OP, 2, KIND ".tile.bulk_group [%0, {%2, %3") ::"l"(m), "r"(s), "r"(c[1]), "r"(c[0])  \
        : "memory");                                                                               \
  else if constexpr (R == 3)                                                                       \
    KILN_TMA(OP, 3, KIND ".tile.bulk_group [%0, {%2, %3, %4") ::"l"(m), "r"(s), "r"(c[2]),        \
        "r"(c[1]), "r"(c[0]) : "memory");                                                          \
  else if constexpr (R == 4)                                                                       \
    KILN_TMA(OP, 4, KIND ".tile.bulk_group [%0, {%2, %3, %4, %5") ::"l"(m), "r"(s), "r"(c[3]),    \
        "r"(c[2]), "r"(c[1]), "r"(c[0]) : "memory");                                               \
  else                                                                                             \
    KILN_TMA(OP, 5, KIND ".tile.bulk_group [%0, {%2, %3, %4, %5, %6") ::"l"(m), "r"(s), "r"(c[4]), \
        "r"(c[3]), "r"(c[2]), "r"(c[1]), "r"(c[0]) : "memory");
    if constexpr (RED == 0) {
      KILN_TMA_RANKS("cp.async.bulk.tensor", "")
    } else if constexpr (RED == 1) {
      KILN_TMA_RANKS("cp.reduce.async.bulk.tensor", ".add")
    } else if constexpr (RED == 2) {
      KILN_TMA_RANKS("cp.reduce.async.bulk.tensor", ".min")
    } else {
      KILN_TMA_RANKS("cp.reduce.async.bulk.tensor", ".max")
    }
#undef KILN_TMA_RANKS
#undef KILN_TMA
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (!ASYNC) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // the writes are done
  }
  if (!ASYNC) __syncthreads();  // and the shared memory is free again
#endif
}
// Until at most N of unit 0's bulk groups still read shared memory; then every unit may write
// it again.
template <int N>
__device__ __forceinline__ void tma_store_wait() {
#if __CUDA_ARCH__ >= 900
  if (unit_linear() == 0) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
  __syncthreads();
#endif
}
template <u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_store(const tensor_map& map, T* src, u32 index,
                                          const i32 (&c)[R]) {
  tma_store_impl<0, false, SW, BOX...>(map, src, index, c);
}
template <u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_store_async(const tensor_map& map, T* src, u32 index,
                                                const i32 (&c)[R]) {
  tma_store_impl<0, true, SW, BOX...>(map, src, index, c);
}
template <u32 RED, u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_reduce(const tensor_map& map, T* src, u32 index,
                                           const i32 (&c)[R]) {
  tma_store_impl<RED, false, SW, BOX...>(map, src, index, c);
}
template <u32 RED, u32 SW, u32... BOX, class T, int R>
__device__ __forceinline__ void tma_reduce_async(const tensor_map& map, T* src, u32 index,
                                                 const i32 (&c)[R]) {
  tma_store_impl<RED, true, SW, BOX...>(map, src, index, c);
}
#endif

// Shared arrays of wgmma or tcgen05 operands are read by the async proxy: a sync_cube in such
// a kernel orders the units' own stores to them before the multiplies after it.
__device__ __forceinline__ void fence_async_shared() {
#if !defined(KILN_EMULATION) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

}  // namespace kiln
