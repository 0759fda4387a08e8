// The functions CPU kernels call to report prints, failed asserts and checked-mode faults.
#include "compiler/cpu/abi.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ir/float16.h"
#include "ir/ops.h"
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

extern "C" float kiln_rt_truncsfbf2(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  // A NaN keeps its high bits (quieted only where they alone would read as infinity): LLVM calls
  // this to narrow bf16 values it widened itself, and a bitcast's NaN must come back unchanged.
  uint32_t bf = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  if (std::isnan(x)) bf = (u >> 16) & 0x7fu ? u >> 16 : (u >> 16) | 0x40u;
  float r;
  std::memcpy(&r, &bf, 4);  // bf16 bits in the low half, zeros above
  return r;
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

// The same for an MN-major operand (mn contiguous; the CUDA prelude's wgmma_mnmajor_byte).
// Without swizzle, core matrices of 8 k-rows of 16 bytes of mn: SBO separates them along mn,
// LBO along k. With a swizzle of W bytes, rows of W bytes of mn, one per k: LBO separates the
// W-byte columns along mn, SBO the groups of 8 rows along k. Elements mn .. mn + 16 / size - 1
// (mn a multiple of 16 / size) are the 16 bytes from there.
inline uint32_t mnmajor_byte(uint64_t d, uint32_t mn, uint32_t k, uint32_t size) {
  const auto start = static_cast<uint32_t>(d & 0x3fffu) << 4;
  const auto lbo = static_cast<uint32_t>((d >> 16) & 0x3fffu) << 4;
  const auto sbo = static_cast<uint32_t>((d >> 32) & 0x3fffu) << 4;
  const auto mode = static_cast<uint32_t>(d >> 62), per16 = 16u / size;
  if (mode == 0) return start + mn / per16 * sbo + mn % per16 * size + k / 8 * lbo + k % 8 * 16;
  const uint32_t w = mode == 1 ? 128u : mode == 2 ? 64u : 32u, per_row = w / size;
  const uint32_t byte = start + mn / per_row * lbo + mn % per_row * size + k / 8 * sbo + k % 8 * w;
  return byte ^ (((byte >> 7) & (w / 16 - 1)) << 4);
}

float bits_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Not under ThreadSanitizer: GCC instruments the clones' resolver, which the dynamic loader
// runs while it relocates the library, before TSan has set itself up (a crash before main).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
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

// One operand of a plane's multiply (16 rows of A, or n rows of B), read 16-byte chunk by chunk
// from the arena into `out` (row mn's k_step values at out[mn * row_stride + k * col_stride]):
// chunks of k of a row when K-major, of mn at one k when MN-major (rows and row0 are then
// multiples of 16 / size). Returns 1 + the first byte offset past the arena (read as zero), or 0.
template <kiln::ir::ElemType E, class T>
KILN_WGMMA_CLONES uint32_t read_operand(const uint8_t* shared, uint32_t bytes, uint64_t d,
                                        uint32_t row0, uint32_t rows, uint32_t k_step, T* out,
                                        size_t row_stride, size_t col_stride, bool mn_major) {
  constexpr uint32_t size = kInputBytes<E>, per16 = 16 / size;
  // One step from an element of a chunk to the next, in `out`.
  const size_t along = mn_major ? row_stride : col_stride;
  uint32_t bad = 0;
  for (uint32_t r = 0; r < rows; r += mn_major ? per16 : 1)
    for (uint32_t k0 = 0; k0 < k_step; k0 += mn_major ? 1 : per16) {
      const uint32_t at =
          mn_major ? mnmajor_byte(d, row0 + r, k0, size) : kmajor_byte(d, row0 + r, k0, size);
      T* o = out + r * row_stride + k0 * col_stride;
      if (at + 16 <= bytes) {
        const uint8_t* p = shared + at;
        T chunk[per16];  // converted in one (vectorizable) loop, then stored
        for (uint32_t i = 0; i < per16; ++i) chunk[i] = element<E, T>(p + i * size);
        for (uint32_t i = 0; i < per16; ++i) o[i * along] = chunk[i];
        continue;
      }
      for (uint32_t i = 0; i < per16; ++i) {  // at the arena's end: element by element
        const uint32_t at_i = at + i * size;
        if (at_i + size > bytes) {
          if (!bad) bad = at_i + 1;
          o[i * along] = T(0);
        } else {
          o[i * along] = element<E, T>(shared + at_i);
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
                     uint64_t bdesc, uint32_t n, kiln::ir::MmaMajors mj) {
  constexpr uint32_t k_step = 32 / kInputBytes<E>;  // 32 bytes of k per instruction
  // At most 16 x 32 of A and 32 x 256 of B (k_step * element size is 32 bytes).
  alignas(64) T a[16 * k_step];
  alignas(64) T b[k_step * 256];
  const uint32_t bad_a =
      read_operand<E>(shared, bytes, adesc, 16 * (plane % 4), 16, k_step, a, k_step, 1, mj.a_mn);
  const uint32_t bad_b = read_operand<E>(shared, bytes, bdesc, 0, n, k_step, b, 1, n, mj.b_mn);
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
  const kiln::ir::MmaMajors mj = kiln::ir::mma_majors(elem, kiln::ir::kWgmmaMajorShift);
  switch (static_cast<ElemType>(elem & 0xffu)) {
    case ElemType::F16:
      return plane_wgmma<ElemType::F16>(f, plane, s, shared_bytes, adesc, bdesc, n, mj);
    case ElemType::BF16:
      return plane_wgmma<ElemType::BF16>(f, plane, s, shared_bytes, adesc, bdesc, n, mj);
    case ElemType::F32:
      return plane_wgmma<ElemType::F32>(f, plane, s, shared_bytes, adesc, bdesc, n, mj);
    case ElemType::I8:
      return plane_wgmma<ElemType::I8>(i, plane, s, shared_bytes, adesc, bdesc, n, mj);
    case ElemType::U8:
      return plane_wgmma<ElemType::U8>(i, plane, s, shared_bytes, adesc, bdesc, n, mj);
    case ElemType::F8E4M3:
      return plane_wgmma<ElemType::F8E4M3>(f, plane, s, shared_bytes, adesc, bdesc, n, mj);
    case ElemType::F8E5M2:
      return plane_wgmma<ElemType::F8E5M2>(f, plane, s, shared_bytes, adesc, bdesc, n, mj);
    default:
      KILN_CHECK(false, "kiln_rt_wgmma of an element type the verifier refuses");
      return 0;
  }
}

// ---- block-scaled multiplies --------------------------------------------------------------------

extern "C" uint32_t kiln_rt_mma_scaled(float* acc, const float* a, const float* b, uint32_t m,
                                       uint32_t n, uint32_t k, const uint8_t* sa, uint32_t sa_len,
                                       uint32_t sai, uint32_t sas, const uint8_t* sb,
                                       uint32_t sb_len, uint32_t sbi, uint32_t sbs) {
  uint32_t bad = 0;
  auto code = [&](const uint8_t* s, uint32_t len, uint32_t i, uint32_t tag) -> uint32_t {
    if (i < len) return s[i];
    if (!bad) bad = (i + 1) | tag;
    return 127;
  };
  // As the emulator: each exact product scaled by 2^(ea + eb - 254), added in order over k.
  for (uint32_t r = 0; r < m; ++r)
    for (uint32_t c = 0; c < n; ++c) {
      float sum = acc[r * n + c];
      for (uint32_t j = 0; j < k / 32; ++j) {
        const uint32_t ea = code(sa, sa_len, sai + r * sas + j, 0);
        const uint32_t eb = code(sb, sb_len, sbi + c * sbs + j, 0x80000000u);
        for (uint32_t kk = 32 * j; kk < 32 * j + 32; ++kk) {
          const float p = a[r * k + kk] * b[kk * n + c];
          sum += ea == 255 || eb == 255 ? bits_float(0x7fc00000u)
                                        : std::ldexp(p, static_cast<int>(ea + eb) - 254);
        }
      }
      acc[r * n + c] = sum;
    }
  return bad;
}

// ---- tensor memory and tcgen05 -----------------------------------------------------------------

namespace {

using kiln::cpu::TmemBlock;
namespace tm = kiln::cpu;

// The mbarrier word, as the emulator lays it out (compiler/cuda/prelude.cuh, mbar_word): bit 63
// set once initialized, the count at bits 0-19, the arrivals pending at 20-39, the phase's parity
// at bit 40, the transaction count (bytes still expected, 21-bit two's complement) at 41-61.
constexpr uint64_t kMbarInit = uint64_t{1} << 63;
constexpr int64_t kMbarTxLimit = (int64_t{1} << 20) - 1;

// `arrivals` arrivals and `tx` more bytes expected (negative: bytes landed); the phase completes
// when no arrival and no byte is pending. False when the transaction count leaves its range.
bool mbar_update(uint64_t* bar, uint32_t arrivals, int64_t tx) {
  const uint64_t x = *bar;
  const uint64_t count = x & 0xfffffu, phase = (x >> 40) & 1u;
  uint64_t pending = (x >> 20) & 0xfffffu;
  int64_t now = static_cast<int64_t>((x >> 41) & 0x1fffffu);
  if (now >= (int64_t{1} << 20)) now -= int64_t{1} << 21;
  now += tx;
  if (now > kMbarTxLimit || now < -kMbarTxLimit) return false;
  pending = arrivals > pending ? 0 : pending - arrivals;
  if (tm::ClusterHooks* h = tm::cluster_hooks()) ++h->progress;  // a waiting cube looks again
  if (pending == 0 && now == 0) {
    *bar = kMbarInit | (phase ^ 1u) << 40 | count << 20 | count;
    return true;
  }
  *bar = kMbarInit | (static_cast<uint64_t>(now) & 0x1fffffu) << 41 | phase << 40 | pending << 20 |
         count;
  return true;
}

bool tmem_allocated(const TmemBlock* b, uint32_t col, uint32_t n) {
  for (uint32_t x = col / 32; x < (col + n + 31) / 32; ++x)
    if (x >= 16 || !(b->allocated >> x & 1u)) return false;
  return true;
}

// A tcgen05 shared-memory descriptor in wgmma's form (the same layouts; only the swizzle field
// moves), for kmajor_byte.
uint64_t tcgen05_as_wgmma(uint64_t d) {
  const auto mode = static_cast<uint32_t>(d >> 61);
  const uint64_t wg = mode == 2 ? 1 : mode == 4 ? 2 : mode == 6 ? 3 : 0;
  return (d & 0x3fff3fff3fffull) | wg << 62;
}

// D (128 x n at column col) = A * B^T (+ D), 16 rows at a time through the wgmma path's
// operand reads and multiply.
template <kiln::ir::ElemType E, class T>
uint32_t tcgen05_multiply(TmemBlock* b, const uint8_t* shared, uint32_t bytes, uint32_t col,
                          uint64_t adesc, uint64_t bdesc, bool accumulate, uint32_t n,
                          kiln::ir::MmaMajors mj) {
  constexpr uint32_t k_step = 32 / kInputBytes<E>;
  alignas(64) T a[16 * k_step];
  alignas(64) T bm[k_step * 256];
  alignas(64) T acc[16 * 256];
  const uint64_t ad = tcgen05_as_wgmma(adesc), bd = tcgen05_as_wgmma(bdesc);
  uint32_t bad = read_operand<E>(shared, bytes, bd, 0, n, k_step, bm, 1, n, mj.b_mn);
  for (uint32_t r0 = 0; r0 < 128; r0 += 16) {
    const uint32_t bad_a =
        read_operand<E>(shared, bytes, ad, r0, 16, k_step, a, k_step, 1, mj.a_mn);
    if (!bad) bad = bad_a;
    for (uint32_t r = 0; r < 16; ++r) {
      uint32_t* cells = b->cells + (r0 + r) * 512 + col;
      if (accumulate)
        std::memcpy(acc + r * n, cells, 4 * n);
      else
        std::memset(acc + r * n, 0, 4 * n);
    }
    multiply(acc, a, bm, n, k_step);
    for (uint32_t r = 0; r < 16; ++r)
      std::memcpy(b->cells + (r0 + r) * 512 + col, acc + r * n, 4 * n);
  }
  return bad;
}

}  // namespace

namespace kiln::cpu {

const char* tmem_misuse_message(uint32_t code) {
  switch (code) {
    case kMbarNotInitialized:
      return "an mbarrier used before mbarrier_init()";
    case kMbarNeverCompletes:
      return "an mbarrier wait that can never complete: on the CPU every arrival and copy before "
             "the wait has happened, and the phase it waits for still has arrivals or bytes "
             "pending (a tcgen05_commit or mbarrier_arrive_expect_tx on it before the wait, "
             "as many bytes expected as the tma_loads on it copy, or the parity of a phase "
             "that has not completed: phase k has parity k % 2)";
    case kTmemFull:
      return "tmem_alloc() of more tensor-memory columns than are free (512 in all)";
    case kTmemFreeNotAllocated:
      return "tmem_free() of columns that are not allocated (free what tmem_alloc returned, with "
             "the same number of columns)";
    case kTmemFreeInFlight:
      return "tmem_free() while a tcgen05_mma is not yet waited for; tcgen05_commit() and "
             "mbarrier_wait() first";
    case kMmaNotAllocated:
      return "a tcgen05_mma into tensor-memory columns that are not allocated";
    case kMmaPastArena:
      return "a tcgen05_mma descriptor reaches past the cube's shared memory (read as zeros)";
    case kLoadNotAllocated:
      return "tmem_load() of tensor-memory columns that are not allocated";
    case kLoadInFlight:
      return "tmem_load() while a tcgen05_mma is not yet committed and waited for; "
             "tcgen05_commit() and mbarrier_wait() first";
    case kLoadPastEnd:
      return "tmem_load() of 128 x n columns past the end of its destination array";
    case kReadNotAllocated:
      return "tmem_read() of tensor-memory columns that are not allocated (the address must be "
             "what tmem_alloc returned, and the columns read inside the allocation)";
    case kReadInFlight:
      return "tmem_read() while a tcgen05_mma is not yet committed and waited for; "
             "tcgen05_commit() and mbarrier_wait() first";
    case kMbarTxOverflow:
      return "an mbarrier's transaction count left its range (at most 2^20 - 1 bytes pending "
             "either way): expect the bytes of a phase before its copies outrun them";
    case kTmaMisaligned:
      return "a tma_load or tma_store at a shared-array index that is no multiple of 128 bytes "
             "(TMA moves whole 128-byte aligned lines)";
    case kTmaPastEnd:
      return "a tma_load or tma_store whose box reaches past the end of its shared array";
    case kTmaIm2colOutside:
      return "an im2col tma_load whose coordinates put its first filter origin outside the "
             "view's bounding box (per spatial dimension: lower <= origin < extent + upper); "
             "start each load at an output pixel";
    case kCopyMisaligned:
      return "a copy_async whose shared or global address is not 16-byte aligned (its indices "
             "must be multiples of 16 bytes, and the tensor's data start on 16 bytes)";
    case kCopyPastEnd:
      return "a copy_async whose 16 bytes reach past the end of its shared array or of the "
             "memory it reads";
    case kClusterStuck:
      return "a sync_cluster that can never complete: another cube of the cluster has returned "
             "without reaching it, or waits for something no cube will do (every cube of a "
             "cluster must reach the same sync_clusters)";
    case kMulticastOutside:
      return "a tma_load_multicast whose mask names a cube rank outside the cluster (bit r is "
             "the cube of rank r; the cluster's cubes are its cluster_dims)";
    case kTmemNotFreed:
      return "tensor memory still allocated when the cube ended; tmem_free() it before the "
             "kernel returns";
    default:
      return "tensor-memory misuse";
  }
}

}  // namespace kiln::cpu

extern "C" uint32_t kiln_rt_mbar_init(uint64_t* bar, uint32_t count) {
  *bar = kMbarInit | uint64_t{count} << 20 | count;
  return 0;
}

namespace kiln::cpu {

ClusterHooks*& cluster_hooks() {
  static thread_local ClusterHooks* hooks = nullptr;
  return hooks;
}

}  // namespace kiln::cpu

// In a cluster, a phase another cube completes (a multicast copy landing) is waited for: the
// other cubes run until it completes, or until none can go on.
extern "C" uint32_t kiln_rt_mbar_wait(void* t, const uint64_t* bar, uint32_t parity) {
  auto* b = static_cast<TmemBlock*>(t);
  for (;;) {
    if (!(*bar & kMbarInit)) return tm::kMbarNotInitialized;
    if (((*bar >> 40) & 1u) != (parity & 1u)) break;
    tm::ClusterHooks* h = tm::cluster_hooks();
    if (!h || !h->wait(h->ctx)) return tm::kMbarNeverCompletes;
  }
  b->waited = b->committed;
  return 0;
}

extern "C" uint32_t kiln_rt_cluster_sync() {
  tm::ClusterHooks* h = tm::cluster_hooks();
  if (!h) return 0;
  return h->sync(h->ctx) ? 0u : uint32_t{tm::kClusterStuck};
}

extern "C" uint8_t* kiln_rt_cluster_shared(uint32_t rank, uint8_t* arena) {
  tm::ClusterHooks* h = tm::cluster_hooks();
  if (!h) return rank == 0 ? arena : nullptr;
  if (rank >= h->size) return nullptr;
  return h->shared(h->ctx, rank);
}

extern "C" uint32_t kiln_rt_tmem_alloc(void* t, uint32_t columns, uint32_t* address) {
  auto* b = static_cast<TmemBlock*>(t);
  const uint32_t chunks = columns / 32, mask = (1u << chunks) - 1;
  for (uint32_t x = 0; x + chunks <= 16; x += chunks)
    if (((b->allocated >> x) & mask) == 0) {
      b->allocated |= mask << x;
      *address = x * 32;
      return 0;
    }
  *address = 0;
  return tm::kTmemFull;
}

extern "C" uint32_t kiln_rt_tmem_free(void* t, uint32_t address, uint32_t columns) {
  auto* b = static_cast<TmemBlock*>(t);
  const uint32_t col = address & 0xffffu;
  if ((address >> 16) != 0 || col % columns != 0 || !tmem_allocated(b, col, columns))
    return tm::kTmemFreeNotAllocated;
  if (b->issued > b->waited) return tm::kTmemFreeInFlight;
  b->allocated &= ~(((1u << (columns / 32)) - 1) << (col / 32));
  return 0;
}

extern "C" uint32_t kiln_rt_tcgen05_mma(void* t, const void* shared, uint32_t shared_bytes,
                                        uint32_t d, uint64_t adesc, uint64_t bdesc,
                                        uint32_t accumulate, uint32_t elem, uint32_t n) {
  using kiln::ir::ElemType;
  auto* b = static_cast<TmemBlock*>(t);
  const uint32_t col = d & 0xffffu;
  if ((d >> 16) != 0 || !tmem_allocated(b, col, n)) return tm::kMmaNotAllocated;
  ++b->issued;
  const auto* s = static_cast<const uint8_t*>(shared);
  const bool acc = accumulate != 0;
  const kiln::ir::MmaMajors mj = kiln::ir::mma_majors(elem, 8);
  uint32_t bad = 0;
  switch (static_cast<ElemType>(elem & 0xffu)) {
    case ElemType::F16:
      bad =
          tcgen05_multiply<ElemType::F16, float>(b, s, shared_bytes, col, adesc, bdesc, acc, n, mj);
      break;
    case ElemType::BF16:
      bad = tcgen05_multiply<ElemType::BF16, float>(b, s, shared_bytes, col, adesc, bdesc, acc, n,
                                                    mj);
      break;
    case ElemType::F32:
      bad =
          tcgen05_multiply<ElemType::F32, float>(b, s, shared_bytes, col, adesc, bdesc, acc, n, mj);
      break;
    case ElemType::F8E4M3:
      bad = tcgen05_multiply<ElemType::F8E4M3, float>(b, s, shared_bytes, col, adesc, bdesc, acc, n,
                                                      mj);
      break;
    case ElemType::F8E5M2:
      bad = tcgen05_multiply<ElemType::F8E5M2, float>(b, s, shared_bytes, col, adesc, bdesc, acc, n,
                                                      mj);
      break;
    case ElemType::I8:
      bad = tcgen05_multiply<ElemType::I8, uint32_t>(b, s, shared_bytes, col, adesc, bdesc, acc, n,
                                                     mj);
      break;
    case ElemType::U8:
      bad = tcgen05_multiply<ElemType::U8, uint32_t>(b, s, shared_bytes, col, adesc, bdesc, acc, n,
                                                     mj);
      break;
    default:
      KILN_CHECK(false, "kiln_rt_tcgen05_mma of an element type the verifier refuses");
  }
  return bad ? uint32_t{tm::kMmaPastArena} : 0u;
}

extern "C" uint32_t kiln_rt_tcgen05_commit(void* t, uint64_t* bar) {
  auto* b = static_cast<TmemBlock*>(t);
  const uint64_t x = *bar;
  if (!(x & kMbarInit)) return tm::kMbarNotInitialized;
  b->committed = b->issued;  // a multiply is done when it returns on the CPU
  mbar_update(bar, 1, 0);
  return 0;
}

extern "C" uint32_t kiln_rt_tmem_load(void* t, void* dst, uint32_t dst_count, uint32_t index,
                                      uint32_t address, uint32_t n) {
  auto* b = static_cast<TmemBlock*>(t);
  const uint32_t col = address & 0xffffu;
  if ((address >> 16) != 0 || !tmem_allocated(b, col, n)) return tm::kLoadNotAllocated;
  if (b->issued > b->waited) return tm::kLoadInFlight;
  if (uint64_t{index} + 128ull * n > dst_count) return tm::kLoadPastEnd;
  auto* out = static_cast<uint32_t*>(dst) + index;
  for (uint32_t r = 0; r < 128; ++r) std::memcpy(out + r * n, b->cells + r * 512 + col, 4 * n);
  return 0;
}

extern "C" uint32_t kiln_rt_tmem_read(void* t, uint32_t address, uint32_t column, uint32_t unit,
                                      uint32_t lanes, uint32_t* out) {
  auto* b = static_cast<TmemBlock*>(t);
  const uint64_t col = uint64_t{address & 0xffffu} + column;
  if ((address >> 16) != 0 || col + lanes > 512 ||
      !tmem_allocated(b, static_cast<uint32_t>(col), lanes)) {
    std::memset(out, 0, 4 * lanes);
    return tm::kReadNotAllocated;
  }
  if (b->issued > b->waited) {
    std::memset(out, 0, 4 * lanes);
    return tm::kReadInFlight;
  }
  std::memcpy(out, b->cells + (unit % 128) * 512 + col, 4 * lanes);
  return 0;
}

extern "C" uint32_t kiln_rt_tmem_end(void* t) {
  auto* b = static_cast<TmemBlock*>(t);
  const uint32_t r = b->allocated ? uint32_t{tm::kTmemNotFreed} : 0u;
  b->allocated = b->issued = b->committed = b->waited = 0;
  return r;
}

extern "C" uint32_t kiln_rt_mbar_arrive_tx(uint64_t* bar, uint32_t bytes) {
  if (!(*bar & kMbarInit)) return tm::kMbarNotInitialized;
  return mbar_update(bar, 1, bytes) ? 0u : uint32_t{tm::kMbarTxOverflow};
}

namespace {

// The elements of an im2col box (ir/ops.h) in row order, visited as tma_box_walk visits a tiled
// box's: row p is the pixel of the p-th filter origin from `coords` on, read at origin + the
// offsets (`coords` holds the rank coordinates, then the rank - 2 offsets). 0, or
// kTmaIm2colOutside when the first origin is outside the bounding box.
template <class Visit>
uint32_t tma_im2col_walk(const kiln::ir::TmaBox& box, uint32_t elem_bytes, uint64_t start,
                         const uint32_t* dims, const int32_t* coords, Visit visit) {
  const uint32_t rank = box.rank, spatial = rank - 2;
  const uint64_t mask = box.swizzle ? box.swizzle / 16 - 1 : 0;
  int64_t origin[kiln::ir::kTmaMaxRank] = {};  // the image, then the spatial origin
  for (uint32_t d = 0; d + 1 < rank; ++d) origin[d] = coords[d];
  for (uint32_t s = 0; s < spatial; ++s) {
    const int64_t lo = box.lower[s], hi = int64_t{dims[1 + s]} + box.upper[s];
    if (origin[1 + s] < lo || origin[1 + s] >= hi) return tm::kTmaIm2colOutside;
  }
  const auto* offsets = reinterpret_cast<const uint32_t*>(coords + rank);
  for (uint32_t p = 0; p < box.pixels; ++p) {
    bool pixel_inside = origin[0] >= 0 && origin[0] < int64_t{dims[0]};
    uint64_t at = pixel_inside ? static_cast<uint64_t>(origin[0]) * dims[rank] : 0;
    for (uint32_t s = 0; s < spatial && pixel_inside; ++s) {
      const int64_t g = origin[1 + s] + (offsets[s] & 0xffffu);
      pixel_inside = g >= 0 && g < int64_t{dims[1 + s]};
      at += static_cast<uint64_t>(g) * dims[rank + 1 + s];
    }
    for (uint32_t c = 0; c < box.channels; ++c) {
      const int64_t g = int64_t{coords[rank - 1]} + c;
      const bool inside = pixel_inside && g >= 0 && g < int64_t{dims[rank - 1]};
      uint64_t byte = start + (uint64_t{p} * box.channels + c) * elem_bytes;
      byte ^= ((byte >> 7) & mask) << 4;
      visit(byte, inside, inside ? at + static_cast<uint64_t>(g) * dims[2 * rank - 1] : 0);
    }
    // The next origin: innermost spatial dimension fastest, wrapping inside the bounding box,
    // then on to the next image.
    uint32_t s = spatial;
    for (; s-- > 0;) {
      if (++origin[1 + s] < int64_t{dims[1 + s]} + box.upper[s]) break;
      origin[1 + s] = box.lower[s];
    }
    if (s == ~0u) ++origin[0];
  }
  return 0;
}

// The elements of a TMA box at `coords` of a tensor (dims: shape, then strides, in elements), in
// box order: visit(shared byte offset, swizzled, from `start`; whether inside the tensor; the
// element's offset in the tensor). 0, or the misuse of the shared side: misaligned, or past the
// `bytes` of the array.
template <class Visit>
uint32_t tma_box_walk(uint64_t attr, uint32_t elem_bytes, uint64_t start, uint64_t bytes,
                      const uint32_t* dims, const int32_t* coords, Visit visit) {
  const kiln::ir::TmaBox box = kiln::ir::tma_box(attr);
  if (start % 128 != 0) return tm::kTmaMisaligned;
  const uint64_t total = kiln::ir::tma_box_bytes(box, elem_bytes);
  // A swizzle moves 16-byte chunks within their 128-byte line: the lines the box touches must
  // be inside the array.
  const uint64_t reach = box.swizzle ? (total + 127) / 128 * 128 : total;
  if (start + reach > bytes) return tm::kTmaPastEnd;
  if (box.im2col) return tma_im2col_walk(box, elem_bytes, start, dims, coords, visit);
  const uint32_t rank = box.rank;
  const uint64_t mask = box.swizzle ? box.swizzle / 16 - 1 : 0;
  uint32_t at[kiln::ir::kTmaMaxRank] = {};  // the element's position in the box
  for (uint64_t e = 0, n = total / elem_bytes; e < n; ++e) {
    bool inside = true;
    uint64_t offset = 0;
    for (uint32_t d = 0; d < rank; ++d) {
      const int64_t g = int64_t{coords[d]} + at[d];
      inside = inside && g >= 0 && g < int64_t{dims[d]};
      if (inside) offset += static_cast<uint64_t>(g) * dims[rank + d];
    }
    uint64_t byte = start + e * elem_bytes;
    byte ^= ((byte >> 7) & mask) << 4;
    visit(byte, inside, offset);
    for (uint32_t d = rank; d-- > 0;) {  // the next position, innermost fastest
      if (++at[d] < box.box[d]) break;
      at[d] = 0;
    }
  }
  return 0;
}

}  // namespace

extern "C" uint32_t kiln_rt_tma_load(uint64_t* bar, void* dst, uint32_t dst_count, uint32_t index,
                                     const void* src, const uint32_t* dims, const int32_t* coords,
                                     uint64_t attr, uint32_t elem_bytes) {
  if (!(*bar & kMbarInit)) return tm::kMbarNotInitialized;
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  const bool nan = kiln::ir::tma_box(attr).fill_nan;
  const uint32_t bad =
      tma_box_walk(attr, elem_bytes, uint64_t{index} * elem_bytes, uint64_t{dst_count} * elem_bytes,
                   dims, coords, [&](uint64_t byte, bool inside, uint64_t offset) {
                     if (inside) {
                       std::memcpy(out + byte, in + offset * elem_bytes, elem_bytes);
                     } else {
                       // NaN: every bit but the sign set (a NaN in every IEEE format).
                       std::memset(out + byte, nan ? 0xff : 0, elem_bytes);
                       if (nan) out[byte + elem_bytes - 1] = 0x7f;
                     }
                   });
  if (bad) return bad;
  const auto total =
      static_cast<int64_t>(kiln::ir::tma_box_bytes(kiln::ir::tma_box(attr), elem_bytes));
  return mbar_update(bar, 0, -total) ? 0u : uint32_t{tm::kMbarTxOverflow};
}

extern "C" uint32_t kiln_rt_tma_load_multicast(uint64_t* bar, void* dst, uint32_t dst_count,
                                               uint32_t index, const void* src,
                                               const uint32_t* dims, const int32_t* coords,
                                               uint64_t attr, uint32_t elem_bytes, uint32_t mask,
                                               uint8_t* arena) {
  tm::ClusterHooks* h = tm::cluster_hooks();
  const uint32_t size = h ? h->size : 1;
  if (size < 16 && (mask >> size) != 0) return tm::kMulticastOutside;
  const auto bar_at = reinterpret_cast<uint8_t*>(bar) - arena;
  const auto dst_at = static_cast<uint8_t*>(dst) - arena;
  for (uint32_t r = 0; r < size; ++r) {
    if (!(mask >> r & 1u)) continue;
    uint8_t* base = h ? h->shared(h->ctx, r) : arena;
    if (const uint32_t bad =
            kiln_rt_tma_load(reinterpret_cast<uint64_t*>(base + bar_at), base + dst_at, dst_count,
                             index, src, dims, coords, attr, elem_bytes))
      return bad;
  }
  return 0;
}

extern "C" uint32_t kiln_rt_tma_store(void* dst, const void* src, uint32_t src_count,
                                      uint32_t index, const uint32_t* dims, const int32_t* coords,
                                      uint64_t attr, uint32_t elem_bytes) {
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  return tma_box_walk(attr, elem_bytes, uint64_t{index} * elem_bytes,
                      uint64_t{src_count} * elem_bytes, dims, coords,
                      [&](uint64_t byte, bool inside, uint64_t offset) {
                        if (inside) std::memcpy(out + offset * elem_bytes, in + byte, elem_bytes);
                      });
}

namespace {

// One element of a TMA reduction: old `op` v, of element type E (bits in U), rounded as the GPU
// does (f16 and bf16 sums of two values are exact in double, so rounding once from there is
// rounding the exact sum). min and max of a NaN and a number give the number.
template <class U>
U tma_combine(kiln::ir::TmaReduce op, kiln::ir::ElemType e, U old, U v) {
  using kiln::ir::ElemType;
  using kiln::ir::TmaReduce;
  if (e == ElemType::F16 || e == ElemType::BF16 || e == ElemType::F32) {
    auto value = [&](U bits) -> double {
      if (e == ElemType::F16) return kiln::f16_value(static_cast<uint16_t>(bits));
      if (e == ElemType::BF16) return kiln::bf16_value(static_cast<uint16_t>(bits));
      float f;
      const auto b32 = static_cast<uint32_t>(bits);
      std::memcpy(&f, &b32, 4);
      return f;
    };
    const double a = value(old), b = value(v);
    const double r = op == TmaReduce::Add   ? a + b
                     : op == TmaReduce::Min ? std::fmin(a, b)
                                            : std::fmax(a, b);
    if (e == ElemType::F16) return static_cast<U>(kiln::f16_bits(r));
    if (e == ElemType::BF16) return static_cast<U>(kiln::bf16_bits(r));
    const auto f = static_cast<float>(r);
    uint32_t b32;
    std::memcpy(&b32, &f, 4);
    return static_cast<U>(b32);
  }
  if (op == TmaReduce::Add) return static_cast<U>(old + v);  // wraps
  if (e == ElemType::I32 || e == ElemType::I64) {
    using S = std::make_signed_t<U>;
    const auto a = static_cast<S>(old), b = static_cast<S>(v);
    return static_cast<U>(op == TmaReduce::Min ? std::min(a, b) : std::max(a, b));
  }
  return op == TmaReduce::Min ? std::min(old, v) : std::max(old, v);
}

template <class U>
void tma_reduce_element(uint8_t* at, const uint8_t* from, kiln::ir::TmaReduce op,
                        kiln::ir::ElemType e) {
  U v;
  std::memcpy(&v, from, sizeof v);
  // Cubes run on several threads: each element is combined atomically, as on the GPU.
  std::atomic_ref<U> cell(*reinterpret_cast<U*>(at));
  U old = cell.load(std::memory_order_relaxed);
  while (!cell.compare_exchange_weak(old, tma_combine(op, e, old, v), std::memory_order_relaxed)) {
  }
}

}  // namespace

extern "C" uint32_t kiln_rt_tma_reduce(void* dst, const void* src, uint32_t src_count,
                                       uint32_t index, const uint32_t* dims, const int32_t* coords,
                                       uint64_t attr, uint32_t elem) {
  const auto e = static_cast<kiln::ir::ElemType>(elem);
  const auto op = kiln::ir::tma_reduce(attr);
  const auto elem_bytes = static_cast<uint32_t>(kiln::ir::elem_bytes(e));
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  return tma_box_walk(attr, elem_bytes, uint64_t{index} * elem_bytes,
                      uint64_t{src_count} * elem_bytes, dims, coords,
                      [&](uint64_t byte, bool inside, uint64_t offset) {
                        if (!inside) return;
                        uint8_t* at = out + offset * elem_bytes;
                        if (elem_bytes == 2)
                          tma_reduce_element<uint16_t>(at, in + byte, op, e);
                        else if (elem_bytes == 4)
                          tma_reduce_element<uint32_t>(at, in + byte, op, e);
                        else
                          tma_reduce_element<uint64_t>(at, in + byte, op, e);
                      });
}

extern "C" uint32_t kiln_rt_copy_async(void* dst, uint32_t dst_count, uint32_t si, const void* src,
                                       uint32_t src_count, uint32_t gi, uint32_t valid,
                                       uint32_t elem_bytes) {
  const uint32_t n = 16 / elem_bytes;
  const auto* from = static_cast<const uint8_t*>(src) + uint64_t{gi} * elem_bytes;
  if (si % n != 0 || (valid && reinterpret_cast<uintptr_t>(from) % 16 != 0))
    return tm::kCopyMisaligned;
  if (uint64_t{si} + n > dst_count || (valid && uint64_t{gi} + n > src_count))
    return tm::kCopyPastEnd;
  auto* to = static_cast<uint8_t*>(dst) + uint64_t{si} * elem_bytes;
  if (valid)
    std::memcpy(to, from, 16);
  else
    std::memset(to, 0, 16);
  return 0;
}
