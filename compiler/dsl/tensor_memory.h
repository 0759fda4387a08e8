// Tensor memory and tcgen05 (Blackwell, sm_100a) in the DSL: mbarriers, tensor-memory
// allocation, tcgen05.mma into tensor memory, its commit to an mbarrier, and the copy of a
// product from tensor memory to shared memory. docs/dsl.md "Tensor memory (tcgen05)" is the guide.
//
//   auto bar = shared_array<u64>(1);
//   mbarrier_init(bar, 0u);                       // one arrival per phase
//   u32 t = tmem_alloc(128);                      // 128 columns of the cube's tensor memory
//   tcgen05_mma<bf16>(t, tcgen05_tile_desc(as, 0u, 128, Swizzle::B128, 0u),
//                        tcgen05_tile_desc(bs, 0u, 128, Swizzle::B128, 0u), 128, false);
//   tcgen05_commit(bar, 0u);                      // the mbarrier's phase 0 completes when done
//   mbarrier_wait(bar, 0u, 0u);
//   tmem_load(cs, 0u, t, 128);                    // cs[r * 128 + c] = D[r][c], 128 x 128
//   f32 x = tmem_read<f32>(t, 8u, 4);             // or each unit's own row, into registers:
//                                                 // D[unit % 128][8 .. 11], a line of 4
//   tmem_free(t, 128);
//
// All of these but tmem_read are cube operations: every unit of the cube reaches them together
// (uniform control flow, operands the same for every unit; the verifier checks both) and they
// run once for the cube (on the GPU one unit issues the asynchronous ones). The cube has a
// multiple of 128 units, so that four whole planes cover the 128 lanes of tensor memory.
#pragma once

#include "compiler/dsl/matrix.h"

namespace kiln::dsl {

// Whether the target has tensor memory and tcgen05 (asked at trace time, like has_wgmma):
// sm_100a, the CPU and cuda-emu:sm_100a.
inline bool has_tcgen05() {
  return TraceContext::current().target().features.tcgen05;
}

namespace detail {
template <class V>
constexpr bool is_mbarrier_array = std::is_same_v<host_of_t<V>, uint64_t>;
inline bool need_tcgen05(const SrcLoc& where) {
  auto& ctx = TraceContext::current();
  if (ctx.target().features.tcgen05) return true;
  ctx.fail(where, fmt::format("tensor memory and tcgen05 are sm_100a instructions; {} has none: "
                              "ask has_tcgen05() at trace time and take another path there "
                              "(wgmma on sm_90a, mma() on fragments elsewhere)",
                              ctx.target().name));
  return false;
}
inline bool columns_ok(int columns, const SrcLoc& where) {
  if (ir::tmem_columns_valid(static_cast<uint64_t>(columns < 0 ? 0 : columns))) return true;
  TraceContext::current().fail(
      where, fmt::format("tensor memory is allocated in a power of two of columns from 32 to 512, "
                         "not {}",
                         columns));
  return false;
}
}  // namespace detail

// ---- mbarriers --------------------------------------------------------------------------------

// Initializes the mbarrier bars[index] for `count` arrivals per phase (its phase 0 is then
// pending). A cube operation: it is done, and visible to every unit, when it returns.
template <class V>
void mbarrier_init(const SharedArray<V>& bars, Arg<uint32_t> index, int count = 1) {
  static_assert(detail::is_mbarrier_array<V>, "kiln: mbarriers live in a shared array of u64");
  auto& ctx = TraceContext::current();
  if (count < 1 || count >= (1 << 20)) {
    ctx.fail(index.where(), fmt::format("an mbarrier counts 1 to {} arrivals per phase, not {}",
                                        (1 << 20) - 1, count));
    return;
  }
  ir::Attr a;
  a.i = static_cast<uint64_t>(count);
  ctx.builder().op(ir::OpKind::MbarInit, {bars.id(), index.value(1)}, index.at(), {}, a);
}

// Waits until the phase of bars[index] with parity `parity` (0 or 1: phase k has parity k % 2)
// has completed. A cube operation: every unit waits.
template <class V>
void mbarrier_wait(const SharedArray<V>& bars, Arg<uint32_t> index, Arg<uint32_t> parity) {
  static_assert(detail::is_mbarrier_array<V>, "kiln: mbarriers live in a shared array of u64");
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::MbarWait, {bars.id(), index.value(1), parity.value(1)}, index.at());
}

// ---- tensor memory ------------------------------------------------------------------------------

// Allocates `columns` (a power of two from 32 to 512) columns of all 128 lanes of the cube's
// tensor memory; the result is their address (lane 0, the first column). Free them with
// tmem_free before the kernel ends.
inline Val<uint32_t> tmem_alloc(int columns, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (!detail::need_tcgen05(where) || !detail::columns_ok(columns, where)) return Val<uint32_t>();
  ir::Attr a;
  a.i = static_cast<uint64_t>(columns);
  return Val<uint32_t>::from_id(ctx.builder().op(ir::OpKind::TmemAlloc, {}, ctx.loc(where), {}, a));
}

// Frees the `columns` columns at `address` (what tmem_alloc returned for that many). Every
// multiply into them must have completed (waited on) first.
inline void tmem_free(Arg<uint32_t> address, int columns) {
  auto& ctx = TraceContext::current();
  if (!detail::need_tcgen05(address.where()) || !detail::columns_ok(columns, address.where()))
    return;
  ir::Attr a;
  a.i = static_cast<uint64_t>(columns);
  ctx.builder().op(ir::OpKind::TmemFree, {address.value(1)}, address.at(), {}, a);
}

// ---- tcgen05 multiplies -------------------------------------------------------------------------

// The descriptor of a K-major matrix in shared memory starting at mem[index], with its leading
// and stride byte offsets and swizzle: the same layouts as wgmma_desc (docs/dsl.md "Warpgroup
// multiplies"), encoded as tcgen05 reads them.
template <class V>
Val<uint64_t> tcgen05_desc(const SharedArray<V>& mem, Arg<uint32_t> index, Arg<uint32_t> lbo,
                           Arg<uint32_t> sbo, Swizzle swizzle = Swizzle::None) {
  if (!detail::need_tcgen05(index.where())) return Val<uint64_t>();
  return detail::smem_desc(ir::OpKind::Tcgen05Desc, mem, index, lbo, sbo, swizzle);
}

// The descriptor of k-step `step` (32 bytes of k: 16 for f16/bf16, 8 for tf32, 32 for the 8-bit
// types) of a tile laid out by wgmma_tile_index at mem[base], as wgmma_tile_desc.
template <class V>
Val<uint64_t> tcgen05_tile_desc(const SharedArray<V>& mem, Val<uint32_t> base, int rows,
                                Swizzle swizzle, Val<uint32_t> step,
                                SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  return detail::k_tile_desc(mem, base, rows, swizzle, step, "tcgen05", where,
                             [](auto&&... x) { return tcgen05_desc(x...); });
}

// The same with the tile's major (Major::MN: `extent` along m or n, laid out by
// wgmma_tile_index(..., Major::MN); f16 and bf16); pass the same major to tcgen05_mma().
template <class V>
Val<uint64_t> tcgen05_tile_desc(const SharedArray<V>& mem, Val<uint32_t> base, int extent,
                                Swizzle swizzle, Val<uint32_t> step, Major major,
                                SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  if (major == Major::K) return tcgen05_tile_desc(mem, base, extent, swizzle, step, where);
  return detail::mn_tile_desc(mem, base, extent, swizzle, step, "tcgen05", where,
                              [](auto&&... x) { return tcgen05_desc(x...); });
}

// D = A * B^T (+ D when `accumulate`), D the 128 x n product at the tensor-memory address `d`
// (row r in lane r, column c in column d + c; f32, or i32 for i8/u8 inputs), A (128 x k) and B
// (n x k) in shared memory from their descriptors, K-major unless a_major / b_major say MN
// (f16 and bf16 only), k one instruction step of inputs V (f16, bf16, f32 as tf32, i8, u8,
// f8e4m3, f8e5m2). n: a multiple of 16 from 16 to 256.
// Asynchronous on the GPU: it completes with the next tcgen05_commit's mbarrier phase.
template <class V>
void tcgen05_mma(Arg<uint32_t> d, Arg<uint64_t> a, Arg<uint64_t> b, int n, Arg<bool> accumulate,
                 Major a_major = Major::K, Major b_major = Major::K) {
  auto& ctx = TraceContext::current();
  const SrcLoc& where = d.where();
  if (!detail::need_tcgen05(where) || !detail::majors_ok<V>(a_major, b_major, "tcgen05_mma", where))
    return;
  const ir::ElemType in = elem_v<host_of_t<V>>;
  if (!ir::tcgen05_n_valid(in, n)) {
    ctx.fail(where, fmt::format("a tcgen05 multiply of 128 rows has n a multiple of 16 from 16 "
                                "to 256, not {}",
                                n));
    return;
  }
  ir::Attr attr;
  attr.i = static_cast<uint64_t>(in) | static_cast<uint64_t>(n) << 8 |
           ir::mma_major_bits({a_major == Major::MN, b_major == Major::MN}, ir::kTcgen05MajorShift);
  ctx.builder().op(ir::OpKind::Tcgen05Mma,
                   {d.value(1), a.value(1), b.value(1), accumulate.value(1)}, ctx.loc(where), {},
                   attr);
}

// One arrival on bars[index] once every tcgen05_mma issued before it has completed.
template <class V>
void tcgen05_commit(const SharedArray<V>& bars, Arg<uint32_t> index) {
  static_assert(detail::is_mbarrier_array<V>, "kiln: mbarriers live in a shared array of u64");
  auto& ctx = TraceContext::current();
  if (!detail::need_tcgen05(index.where())) return;
  ctx.builder().op(ir::OpKind::Tcgen05Commit, {bars.id(), index.value(1)}, index.at());
}

// Copies the 128 x n block of tensor memory at `address` (n 32-bit columns, a multiple of 8 up to
// 512) into dst: dst[index + r * n + c] = D[r][c], f32 or i32 as the multiply wrote it (u32 for
// the bits). Every multiply into it must have completed (waited on) first; the copy is in dst,
// for every unit, when it returns.
template <class V>
void tmem_load(const SharedArray<V>& dst, Arg<uint32_t> index, Arg<uint32_t> address, int n) {
  auto& ctx = TraceContext::current();
  if (!detail::need_tcgen05(index.where())) return;
  if (n < 8 || n > 512 || n % 8 != 0) {
    ctx.fail(index.where(),
             fmt::format("tmem_load copies a multiple of 8 columns up to 512, not {}", n));
    return;
  }
  ir::Attr a;
  a.i = static_cast<uint64_t>(n);
  ctx.builder().op(ir::OpKind::TmemLoad, {dst.id(), index.value(1), address.value(1)}, index.at(),
                   {}, a);
}

// A unit's own row of tensor memory in registers: unit u reads row u % 128 (plane p the lanes
// 32 (p % 4) .. + 31, as tcgen05.ld gives them), `lanes` consecutive 32-bit columns (1, 2, 4, 8
// or 16) from the tensor-memory address + column, as f32, i32 or u32 (a line of that many lanes
// when more than 1). Every unit of a plane reads together, with the same address and column
// (the verifier checks it); every multiply into the columns must have completed (waited on).
template <class V>
Val<host_of_t<V>> tmem_read(Arg<uint32_t> address, Arg<uint32_t> column, int lanes = 1) {
  using T = host_of_t<V>;
  static_assert(
      std::is_same_v<T, float> || std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t>,
      "kiln: tmem_read reads 32-bit columns as f32, i32 or u32");
  auto& ctx = TraceContext::current();
  if (!detail::need_tcgen05(address.where())) return Val<T>();
  if (lanes != 1 && lanes != 2 && lanes != 4 && lanes != 8 && lanes != 16) {
    ctx.fail(address.where(),
             fmt::format("tmem_read reads 1, 2, 4, 8 or 16 columns at once, not {}", lanes));
    return Val<T>();
  }
  return Val<T>::from_id(ctx.builder().op(ir::OpKind::TmemRead, {address.value(1), column.value(1)},
                                          address.at(), ir::Type::value(elem_v<T>, lanes)));
}

}  // namespace kiln::dsl
