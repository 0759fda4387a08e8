// Per-unit asynchronous copies (cp.async, sm_80 and later) in the DSL: each unit copies 16 bytes
// of a tensor or array into shared memory without waiting, closes its copies into groups, and
// waits for all but the last N groups. docs/dsl.md "Asynchronous copies" is the guide.
//
//   auto tile = shared_array<f16>(64 * 64);
//   for_range(unit_pos() * 8u, 64u * 64u, cube_dim() * 8u, [&](u32 e) {  // 8 f16 = 16 bytes
//     u32 r = e / 64u, col = e % 64u;
//     copy_async(tile, e, a, (r0 + r) * k + k0 + col, r0 + r < m);   // zeros past row m
//   });
//   copy_async_commit();
//   copy_async_wait(0);   // this unit's copies have landed
//   sync_cube();          // and every unit's, for every unit
#pragma once

#include "compiler/dsl/memory.h"

namespace kiln::dsl {

// Whether the target has cp.async (asked at trace time): sm_80 and later, the CPU and cuda-emu.
inline bool has_cp_async() {
  return TraceContext::current().target().features.cp_async;
}

namespace detail {
inline bool need_cp_async(const SrcLoc& where) {
  auto& ctx = TraceContext::current();
  if (ctx.target().features.cp_async) return true;
  ctx.fail(where, fmt::format("cp.async is an sm_80 instruction; {} has none: ask "
                              "has_cp_async() at trace time and copy with loads and stores there",
                              ctx.target().name));
  return false;
}
}  // namespace detail

// Copies the 16 bytes of `src` (a tensor or array of scalars) from element `src_index` on into
// dst from element `dst_index` on, asynchronously; when `valid` is false, 16 zero bytes (src is
// not read). Both indices are multiples of 16 bytes' worth of elements, and src's data starts on
// 16 bytes. The copy is in dst for this unit after a copy_async_wait that covers its group, and
// for the other units after that and a sync_cube.
template <class W, class M>
void copy_async(const SharedArray<W>& dst, Arg<uint32_t> dst_index, const M& src,
                Arg<uint32_t> src_index, Arg<bool> valid = Arg<bool>(true)) {
  static_assert(std::is_same_v<host_of_t<W>, typename M::T>,
                "kiln: copy_async copies between memories of one element type");
  auto& ctx = TraceContext::current();
  if (!detail::need_cp_async(dst_index.where())) return;
  ctx.builder().op(ir::OpKind::AsyncCopy,
                   {dst.id(), dst_index.value(1), src.id(), src_index.value(1), valid.value(1)},
                   dst_index.at());
}

// Closes this unit's copies issued since the last commit into a group.
inline void copy_async_commit(SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (!detail::need_cp_async(where)) return;
  ctx.builder().op(ir::OpKind::AsyncCommit, {}, ctx.loc(where));
}

// Waits until at most `pending` (0 to 7) of this unit's committed groups are still in flight.
inline void copy_async_wait(int pending, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (!detail::need_cp_async(where)) return;
  if (pending < 0 || pending > 7) {
    ctx.fail(where, fmt::format("copy_async_wait leaves 0 to 7 groups in flight, not {}", pending));
    return;
  }
  ir::Attr a;
  a.i = static_cast<uint64_t>(pending);
  ctx.builder().op(ir::OpKind::AsyncWait, {}, ctx.loc(where), {}, a);
}

}  // namespace kiln::dsl
