// The Tensor Memory Accelerator (TMA, sm_90 and later) in the DSL: a TMA view of a tensor
// parameter (its box and swizzle), box copies from global into shared memory that complete on an
// mbarrier, the mbarrier's expected transaction count, and box copies back to the tensor.
// docs/dsl.md "TMA" is the guide.
//
//   auto bar = shared_array<u64>(1);
//   auto as = shared_array<bf16>(128 * 64);
//   mbarrier_init(bar, 0u);
//   auto av = tma_view(a, {128, 64}, Swizzle::B128);  // boxes of 128 rows x 64 columns of a
//   mbarrier_arrive_expect_tx(bar, 0u, av.box_bytes());
//   tma_load(as, 0u, av, {m0, k0}, bar, 0u);          // as = a[m0 .. +128][k0 .. +64], zero
//   mbarrier_wait(bar, 0u, 0u);                        //   outside a; swizzled as wgmma reads it
//
// Both are cube operations, like the tcgen05 ones (tensor_memory.h): every unit reaches them
// together with the same operands, and one unit issues them on the GPU. Nothing orders a copy
// after earlier reads of its destination but the kernel: a sync_cube (or the wait of the
// multiply that read it) between them. On the CPU a copy is done when it returns; the emulator
// (cuda-emu) checks the destination for races as it checks stores.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "compiler/dsl/tensor_memory.h"

namespace kiln::dsl {

// Whether the target has TMA (asked at trace time, like has_wgmma): sm_90 and later, the CPU
// and the emulator of those architectures.
inline bool has_tma() {
  return TraceContext::current().target().features.tma;
}

// What a load writes for the elements of a box outside the tensor: zeros, or NaN (f16, bf16, f32
// and f64 tensors; the driver's CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA), which makes
// a product that reads past an edge visibly wrong instead of silently zero.
enum class TmaFill { Zero, Nan };

namespace detail {
// What both kinds of TMA view hold: the tensor and its box (ir::TmaBox).
template <class V>
class TmaViewBase {
 public:
  using T = host_of_t<V>;
  TmaViewBase(const Tensor<V>& t, ir::TmaBox box) : tensor_(t), box_(box) {}
  const Tensor<V>& tensor() const { return tensor_; }
  const ir::TmaBox& box() const { return box_; }
  // The bytes one box copies: what mbarrier_arrive_expect_tx expects per copy.
  uint32_t box_bytes() const { return static_cast<uint32_t>(ir::tma_box_bytes(box_, sizeof(T))); }
  // The elements of one box.
  uint32_t box_elements() const { return box_bytes() / static_cast<uint32_t>(sizeof(T)); }

 private:
  Tensor<V> tensor_;
  ir::TmaBox box_;
};

// The checks every view of a tensor of T takes after its shape's own: lines of 1, the box's
// rules, a NaN fill only of floats. False after a trace error.
template <class T>
bool tma_view_valid(int line_size, const ir::TmaBox& b, SrcLoc where) {
  auto& ctx = TraceContext::current();
  if (line_size != 1) {
    ctx.fail(where, fmt::format("TMA copies elements: the tensor has lines of {}; launch it with "
                                "a line size of 1",
                                line_size));
    return false;
  }
  if (std::string e = ir::tma_box_error(b, sizeof(T)); !e.empty()) {
    ctx.fail(where, e);
    return false;
  }
  if (b.fill_nan && !ir::tma_nan_fill_allowed(elem_v<T>)) {
    ctx.fail(where, fmt::format("a TMA view of {} elements cannot fill with NaN (f16, bf16, f32 "
                                "and f64 can); use TmaFill::Zero",
                                ir::elem_name(elem_v<T>)));
    return false;
  }
  return true;
}
}  // namespace detail

// A TMA view of a tensor parameter: boxes of `box` elements (one extent per dimension,
// outermost first, as the tensor's shape), written into shared memory with `swizzle`, elements
// outside the tensor filled as `fill` says. A trace-time object: its box, swizzle and fill are
// part of the kernel's code (and so of its specialization key); on the GPU the runtime encodes
// a tensor map for it at launch.
template <class V>
class TmaView : public detail::TmaViewBase<V> {
 public:
  using detail::TmaViewBase<V>::TmaViewBase;
};

template <class V>
TmaView<V> tma_view(const Tensor<V>& t, std::initializer_list<int> box,
                    Swizzle swizzle = Swizzle::None, TmaFill fill = TmaFill::Zero,
                    SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  static_assert(!std::is_same_v<host_of_t<V>, bool>, "kiln: TMA copies numbers, not bools");
  auto& ctx = TraceContext::current();
  ir::TmaBox b;
  b.swizzle = static_cast<uint32_t>(swizzle);
  b.fill_nan = fill == TmaFill::Nan;
  for (int x : box) {
    if (b.rank < ir::kTmaMaxRank) b.box[b.rank] = x < 0 ? 0u : static_cast<uint32_t>(x);
    ++b.rank;
  }
  if (b.rank != static_cast<uint32_t>(t.rank()))
    ctx.fail(where, fmt::format("a TMA view of a rank-{} tensor has a box of {} extents, one per "
                                "dimension, not {}",
                                t.rank(), t.rank(), b.rank));
  else
    detail::tma_view_valid<host_of_t<V>>(t.line_size(), b, where);
  return TmaView<V>(t, b);
}

// One coordinate of a box: an i32 (a box may start before the tensor: those elements read as
// zero), a u32 (converted), or an integer literal.
class TmaCoord {
 public:
  template <DslExpr E>
  requires(std::same_as<typename E::elem_type, int32_t> ||
           std::same_as<typename E::elem_type, uint32_t>)
      TmaCoord(const E& e, SrcLoc where = SrcLoc::current()) {
    const CallSite site(where);
    if constexpr (std::same_as<typename E::elem_type, int32_t>)
      id_ = Arg<int32_t>(e, where).value(1);
    else
      id_ = cast<int32_t>(e, where).id();
  }
  TmaCoord(int32_t lit, SrcLoc where = SrcLoc::current())
      : id_(Arg<int32_t>(lit, where).value(1)) {}
  ir::ValueId id() const { return id_; }

 private:
  ir::ValueId id_ = ir::kNoValue;
};

// ---- im2col boxes -------------------------------------------------------------------------

// An im2col TMA view of a tensor of rank 3 to 5 laid out N [D] [H] W C (the channels innermost,
// contiguous): the rows a convolution multiplies, read straight from the image (docs/dsl.md
// "im2col"). A load copies `pixels` rows of `channels` elements into shared memory, row-major
// and swizzled like a tiled box of pixels x channels. Row p is the pixel of the p-th filter
// origin, counting from the load's coordinates through the bounding box of origins (per spatial
// dimension s, outermost first: lower[s] <= origin < shape[s] + upper[s]; past its end the walk
// goes on at the next row of the box, then the next image), read at origin + the load's offsets.
// A convolution with padding P and a filter of K (dilation 1, stride 1) uses lower = -P and
// upper = P - (K - 1): the origins are then exactly its output pixels, and the offsets are the
// filter position (0 .. K - 1). Elements outside the tensor (the padding, channels past C,
// images past N) are filled as `fill` says.
template <class V>
class TmaIm2colView : public detail::TmaViewBase<V> {
 public:
  using detail::TmaViewBase<V>::TmaViewBase;
};

template <class V>
TmaIm2colView<V> tma_im2col_view(const Tensor<V>& t, int pixels, int channels,
                                 std::initializer_list<int> lower, std::initializer_list<int> upper,
                                 Swizzle swizzle = Swizzle::None, TmaFill fill = TmaFill::Zero,
                                 SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  static_assert(!std::is_same_v<host_of_t<V>, bool>, "kiln: TMA copies numbers, not bools");
  auto& ctx = TraceContext::current();
  ir::TmaBox b;
  b.im2col = true;
  b.rank = static_cast<uint32_t>(t.rank());
  b.swizzle = static_cast<uint32_t>(swizzle);
  b.fill_nan = fill == TmaFill::Nan;
  b.pixels = pixels < 0 ? 0u : static_cast<uint32_t>(pixels);
  b.channels = channels < 0 ? 0u : static_cast<uint32_t>(channels);
  const size_t spatial = ir::tma_spatial(b);
  std::copy_n(lower.begin(), std::min<size_t>(lower.size(), 3), b.lower);
  std::copy_n(upper.begin(), std::min<size_t>(upper.size(), 3), b.upper);
  if (t.rank() < 3 || t.rank() > 5)
    ctx.fail(where, fmt::format("an im2col TMA view reads a tensor of rank 3 to 5 (N, the "
                                "spatial dimensions, the channels), not rank {}",
                                t.rank()));
  else if (lower.size() != spatial || upper.size() != spatial)
    ctx.fail(where, fmt::format("an im2col view of a rank-{} tensor has {} lower and {} upper "
                                "corners (one per spatial dimension), not {} and {}",
                                t.rank(), spatial, spatial, lower.size(), upper.size()));
  else
    detail::tma_view_valid<host_of_t<V>>(t.line_size(), b, where);
  return TmaIm2colView<V>(t, b);
}

// One offset of an im2col load (a filter position): a u32 or i32 value, taken as the GPU's
// 16-bit operand (its low 16 bits), or an integer literal from 0 to 65535.
class TmaOffset {
 public:
  template <DslExpr E>
  requires(std::same_as<typename E::elem_type, int32_t> ||
           std::same_as<typename E::elem_type, uint32_t>)
      TmaOffset(const E& e, SrcLoc where = SrcLoc::current()) {
    const CallSite site(where);
    id_ = cast<uint16_t>(e, where).id();
  }
  TmaOffset(int32_t lit, SrcLoc where = SrcLoc::current())
      : id_(Arg<uint16_t>(lit, where).value(1)) {}
  ir::ValueId id() const { return id_; }

 private:
  ir::ValueId id_ = ir::kNoValue;
};

// Adds `bytes` to the transaction count the current phase of bars[index] waits for, and arrives
// on it once (mbarrier.arrive.expect_tx): the phase completes when its arrivals have all come
// and as many bytes as expected have landed. A cube operation.
template <class V>
void mbarrier_arrive_expect_tx(const SharedArray<V>& bars, Arg<uint32_t> index, uint32_t bytes) {
  static_assert(detail::is_mbarrier_array<V>, "kiln: mbarriers live in a shared array of u64");
  auto& ctx = TraceContext::current();
  if (!has_tma()) {
    ctx.fail(index.where(),
             fmt::format("mbarrier transaction counts are sm_90 features; {} has none: ask "
                         "has_tma() at trace time",
                         ctx.target().name));
    return;
  }
  if (bytes == 0 || bytes >= (1u << 20)) {
    ctx.fail(index.where(), fmt::format("an mbarrier expects 1 to {} bytes per phase, not {}",
                                        (1u << 20) - 1, bytes));
    return;
  }
  ir::Attr a;
  a.i = bytes;
  ctx.builder().op(ir::OpKind::MbarArriveTx, {bars.id(), index.value(1)}, index.at(), {}, a);
}

namespace detail {
// tma.load of `box` of tensor t into dst[index ...], completing on bars[bar_index], at `coords`
// (and an im2col box's `offsets`), once the target has TMA; both views' loads end here.
template <class V, class W, class B>
void emit_tma_load(const SharedArray<W>& dst, Arg<uint32_t> index, const Tensor<V>& t,
                   const ir::TmaBox& box, std::initializer_list<TmaCoord> coords,
                   std::initializer_list<TmaOffset> offsets, const SharedArray<B>& bars,
                   Arg<uint32_t> bar_index) {
  static_assert(std::is_same_v<host_of_t<V>, host_of_t<W>>,
                "kiln: tma_load copies into a shared array of the tensor's element type");
  static_assert(is_mbarrier_array<B>, "kiln: mbarriers live in a shared array of u64");
  std::vector<ir::ValueId> ops = {dst.id(), index.value(1), t.id(), bars.id(), bar_index.value(1)};
  for (const TmaCoord& c : coords) ops.push_back(c.id());
  for (const TmaOffset& o : offsets) ops.push_back(o.id());
  ir::Attr a;
  a.i = ir::tma_attr(box);
  TraceContext::current().builder().op(ir::OpKind::TmaLoad, ops, index.at(), {}, a);
}
// Whether the target has TMA copies; a trace error at `where` if not.
inline bool tma_copies_allowed(const SrcLoc& where) {
  if (has_tma()) return true;
  auto& ctx = TraceContext::current();
  ctx.fail(where, fmt::format("TMA copies are sm_90 instructions; {} has none: ask has_tma() at "
                              "trace time and copy with loads there",
                              ctx.target().name));
  return false;
}
}  // namespace detail

// Copies the box of `view` that starts at `coords` (one per dimension, outermost first) into
// dst[index ...]: row-major, the innermost extent contiguous, swizzled as the view says (a
// K-major tile of wgmma_tile_index for a box of `rows` x (swizzle / element size)); elements
// outside the tensor are zero. Its bytes complete on bars[bar_index] (expect them there with
// mbarrier_arrive_expect_tx). A cube operation.
template <class V, class W, class B>
void tma_load(const SharedArray<W>& dst, Arg<uint32_t> index, const TmaView<V>& view,
              std::initializer_list<TmaCoord> coords, const SharedArray<B>& bars,
              Arg<uint32_t> bar_index) {
  if (!detail::tma_copies_allowed(index.where())) return;
  if (coords.size() != view.box().rank) {
    TraceContext::current().fail(
        index.where(), fmt::format("tma_load of a rank-{} view takes {} coordinates, not {}",
                                   view.box().rank, view.box().rank, coords.size()));
    return;
  }
  detail::emit_tma_load(dst, index, view.tensor(), view.box(), coords, {}, bars, bar_index);
}

// The im2col box of `view` whose first row is the filter origin at `coords` (one per dimension
// of the tensor, outermost first: the image, the origin's spatial position, the first channel),
// each row read at origin + `offsets` (one per spatial dimension, outermost first), into
// dst[index ...] as pixels x channels, completing on bars[bar_index]. The origin at `coords` must
// lie inside the bounding box (a fault on the CPU and the emulator). A cube operation.
template <class V, class W, class B>
void tma_load(const SharedArray<W>& dst, Arg<uint32_t> index, const TmaIm2colView<V>& view,
              std::initializer_list<TmaCoord> coords, std::initializer_list<TmaOffset> offsets,
              const SharedArray<B>& bars, Arg<uint32_t> bar_index) {
  if (!detail::tma_copies_allowed(index.where())) return;
  const ir::TmaBox& box = view.box();
  if (coords.size() != box.rank || offsets.size() != ir::tma_spatial(box)) {
    TraceContext::current().fail(
        index.where(),
        fmt::format("an im2col tma_load of a rank-{} view takes {} coordinates and {} offsets, "
                    "not {} and {}",
                    box.rank, box.rank, ir::tma_spatial(box), coords.size(), offsets.size()));
    return;
  }
  detail::emit_tma_load(dst, index, view.tensor(), box, coords, offsets, bars, bar_index);
}

using TmaReduce = ir::TmaReduce;

namespace detail {
// tma.store with `op` (None: a plain store; a reduction's entry points pass reduce = true and
// must name one) and `async`.
template <class V, class W>
void tma_store_op(const TmaView<V>& view, std::initializer_list<TmaCoord> coords,
                  const SharedArray<W>& src, Arg<uint32_t> index, TmaReduce op, bool reduce,
                  bool async) {
  static_assert(!std::is_const_v<V>,
                "kiln: a TMA store writes the tensor; declare it writable (Tensor<T>, not "
                "Tensor<const T>)");
  static_assert(std::is_same_v<host_of_t<V>, host_of_t<W>>,
                "kiln: a TMA store copies from a shared array of the tensor's element type");
  auto& ctx = TraceContext::current();
  const char* what = !reduce ? (async ? "tma_store_async" : "tma_store")
                             : (async ? "tma_reduce_async" : "tma_reduce");
  if (reduce && op == TmaReduce::None) {
    ctx.fail(index.where(), fmt::format("{} takes TmaReduce::Add, Min or Max", what));
    return;
  }
  if (!has_tma()) {
    ctx.fail(index.where(),
             fmt::format("TMA stores are sm_90 instructions; {} has none: ask "
                         "has_tma() at trace time and use {} there",
                         ctx.target().name, op == TmaReduce::None ? "stores" : "atomics"));
    return;
  }
  if (!ir::tma_reduce_allowed(op, elem_v<host_of_t<V>>)) {
    ctx.fail(index.where(),
             fmt::format("TMA has no {} reduction of {} elements (add: f16, bf16, f32, i32, u32, "
                         "u64; min and max: f16, bf16, i32, u32, i64, u64)",
                         ir::tma_reduce_name(op), ir::elem_name(elem_v<host_of_t<V>>)));
    return;
  }
  if (coords.size() != view.box().rank) {
    ctx.fail(index.where(), fmt::format("{} of a rank-{} view takes {} coordinates, not {}", what,
                                        view.box().rank, view.box().rank, coords.size()));
    return;
  }
  std::vector<ir::ValueId> ops = {view.tensor().id(), src.id(), index.value(1)};
  for (const TmaCoord& c : coords) ops.push_back(c.id());
  ir::Attr a;
  a.i = ir::tma_attr(view.box()) | uint64_t{static_cast<uint32_t>(op)} << ir::kTmaReduceShift |
        uint64_t{async} << ir::kTmaAsyncBit;
  ctx.builder().op(ir::OpKind::TmaStore, ops, index.at(), {}, a);
}
}  // namespace detail

// The other way: the box of `view` at `coords` from src[index ...] (laid out as tma_load writes
// it) into the tensor; elements of the box outside the tensor are not written. A cube operation,
// done when it returns: every unit's stores to src before it are in the copy, and src may be
// written again after it (on the GPU: the async proxy fence, a cube barrier, one unit's
// cp.async.bulk.tensor and its wait, a cube barrier). Reading the tensor's written elements
// back in the same kernel is not ordered with the copy: do it in the next kernel.
template <class V, class W>
void tma_store(const TmaView<V>& view, std::initializer_list<TmaCoord> coords,
               const SharedArray<W>& src, Arg<uint32_t> index) {
  detail::tma_store_op(view, coords, src, index, TmaReduce::None, false, false);
}

// With a reduction: each element of the box combined with the tensor's element, atomically per
// element as atomics are (so several cubes may reduce into the same elements: split-K sums, for
// one): TmaReduce::Add (f16, bf16, f32, i32, u32, u64; integer sums wrap), Min or Max (f16,
// bf16, i32, u32, i64, u64; a NaN loses to a number). Otherwise as tma_store. On the GPU:
// cp.reduce.async.bulk.tensor.
template <class V, class W>
void tma_reduce(const TmaView<V>& view, std::initializer_list<TmaCoord> coords,
                const SharedArray<W>& src, Arg<uint32_t> index, TmaReduce op) {
  detail::tma_store_op(view, coords, src, index, op, true, false);
}

// Asynchronous forms: the copy is issued (after the same fence and barrier) and the call
// returns; src counts as read by the copy until a tma_store_wait(n) leaves at most n of the
// cube's asynchronous stores pending, so the next tile can be computed while the last one goes
// out. Every asynchronous store must be waited for before the kernel ends. The emulator reports
// a store into src before its wait, and a kernel that ends without one; the CPU's stores are
// done when they return.
template <class V, class W>
void tma_store_async(const TmaView<V>& view, std::initializer_list<TmaCoord> coords,
                     const SharedArray<W>& src, Arg<uint32_t> index) {
  detail::tma_store_op(view, coords, src, index, TmaReduce::None, false, true);
}
template <class V, class W>
void tma_reduce_async(const TmaView<V>& view, std::initializer_list<TmaCoord> coords,
                      const SharedArray<W>& src, Arg<uint32_t> index, TmaReduce op) {
  detail::tma_store_op(view, coords, src, index, op, true, true);
}
// Until at most `pending` (0 to 7) of the cube's asynchronous stores still read their shared
// memory; then every unit may write it again (a cube operation; on the GPU one unit's
// cp.async.bulk.wait_group.read and a cube barrier).
inline void tma_store_wait(int pending = 0, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (pending < 0 || pending > 7) {
    ctx.fail(where, fmt::format("tma_store_wait leaves 0 to 7 stores pending, not {}", pending));
    return;
  }
  if (!has_tma()) {
    ctx.fail(where, fmt::format("TMA stores are sm_90 instructions; {} has none: ask has_tma() at "
                                "trace time",
                                ctx.target().name));
    return;
  }
  ir::Attr a;
  a.i = static_cast<uint64_t>(pending);
  ctx.builder().op(ir::OpKind::TmaStoreWait, {}, ctx.loc(where), {}, a);
}

// A hint: start bringing the box of `view` at `coords` into the GPU's L2 cache, so that a later
// tma_load of it (by this cube or another) finds it there. It changes no result and nothing
// waits for it; the CPU and the emulator do nothing. A cube operation (issued by one unit).
template <class V>
void tma_prefetch(const TmaView<V>& view, std::initializer_list<TmaCoord> coords,
                  SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (!has_tma()) {
    ctx.fail(where, fmt::format("TMA prefetches are sm_90 instructions; {} has none: ask has_tma() "
                                "at trace time",
                                ctx.target().name));
    return;
  }
  if (coords.size() != view.box().rank) {
    ctx.fail(where, fmt::format("tma_prefetch of a rank-{} view takes {} coordinates, not {}",
                                view.box().rank, view.box().rank, coords.size()));
    return;
  }
  std::vector<ir::ValueId> ops = {view.tensor().id()};
  for (const TmaCoord& c : coords) ops.push_back(c.id());
  ir::Attr a;
  a.i = ir::tma_attr(view.box());
  ctx.builder().op(ir::OpKind::TmaPrefetch, ops, ctx.loc(where), {}, a);
}

// ---- warp specialization -------------------------------------------------------------------

// A ring of `stages` shared-memory stages, filled by a producer and read by the consumers,
// `rounds` rounds long (docs/dsl.md "Warp specialization"). For round r, stage s = r % stages:
//
//   produce(r, s, full)  one unit of the cube issues the copies of round r into stage s:
//                        mbarrier_arrive_expect_tx(full, s, bytes) and tma_loads completing on
//                        full[s] (and tma_prefetch). It waits first until the consumers have
//                        released the round that used stage s before, r - stages.
//   consume(r, s)        every unit (the consumer planes) once stage s holds round r: it may
//                        read the stage and do anything per unit or per plane, and issue
//                        tcgen05_mma and tcgen05_commit, but nothing the whole cube waits for
//                        (sync_cube, other cube operations).
//   release              after consume(r), the consumers release round r - lag's stage: its
//                        reads must be done by then (for wgmma: wgmma_wait(lag) in consume).
//
// On a GPU the cube gets a producer plane of its own (cube_dim + 32 units), which runs the
// produce regions ahead of the consumers, as far as the ring allows; the full and empty
// mbarriers of the protocol are the pipeline's. The CPU runs produce(r) then consume(r) for
// each round. A cube operation at the kernel's top level, at most one per kernel; before it no
// unit writes memory or issues TMA copies (the producer plane runs that code too).
//
// With a PipelineRegisters split, the producer is a whole warpgroup (128 units, of which one
// issues the copies) that lowers its registers per unit to `producer` while the consumers raise
// theirs to `consumers` (setmaxnreg.dec / .inc), so that the consumers' accumulators fit: e.g.
// {40, 232} for two consumer warpgroups (2 x 128 x 232 + 128 x 40 <= 65536 registers of an
// SM). Both are multiples of 8 from 24 to 256, the producer's at most the consumers'; the
// consumers are whole warpgroups; has_setmaxnreg() says where (sm_90a, sm_100a, sm_120a, the
// CPU and their emulators, where it changes nothing).
using PipelineRegisters = ir::PipelineRegisters;

// Whether the target can split a pipeline's registers (asked at trace time).
inline bool has_setmaxnreg() {
  return TraceContext::current().target().features.setmaxnreg;
}

namespace detail {
// Both forms of pipeline; `commit`: the consume region releases each stage itself.
template <class P, class C>
SharedArray<u64> pipeline(Arg<uint32_t> rounds, int stages, int lag, bool commit,
                          PipelineRegisters regs, P&& produce, C&& consume, SrcLoc where) {
  auto& ctx = TraceContext::current();
  if (std::string e = ir::pipeline_registers_error(regs); !e.empty()) {
    ctx.fail(where, e);
    return SharedArray<u64>();
  }
  if (regs.set() && !has_setmaxnreg()) {
    ctx.fail(where, fmt::format("a pipeline's register split is setmaxnreg, an sm_90a, sm_100a "
                                "and sm_120a instruction; {} has none: ask has_setmaxnreg() at "
                                "trace time",
                                ctx.target().name));
    return SharedArray<u64>();
  }
  if (!has_tma()) {
    ctx.fail(where, fmt::format("a pipeline's stages are filled by TMA and counted by mbarrier "
                                "transactions, which are sm_90 features; {} has none: ask "
                                "has_tma() at trace time",
                                ctx.target().name));
    return SharedArray<u64>();
  }
  if (stages < 1 || stages > static_cast<int>(ir::kMaxPipelineStages) || lag < 0 || lag >= stages) {
    ctx.fail(where, fmt::format("a pipeline has 1 to {} stages and a release lag below them, "
                                "not {} stages and lag {}",
                                ir::kMaxPipelineStages, stages, lag));
    return SharedArray<u64>();
  }
  if (ctx.builder().depth() != 0) {
    ctx.fail(where,
             "a pipeline must be at the top level of the kernel, not inside if/loop "
             "bodies: the producer plane leaves the kernel where it ends");
    return SharedArray<u64>();
  }
  const auto n = static_cast<uint32_t>(stages);
  auto full = shared_array<u64>(n, 1, where);
  auto empty = shared_array<u64>(n, 1, where);
  auto& b = ctx.builder();
  const auto [r, s] = b.begin_pipeline(rounds.value(1), full.id(), empty.id(), n,
                                       static_cast<uint32_t>(lag), commit, ctx.loc(where), regs);
  if (r != ir::kNoValue) produce(Val<uint32_t>::from_id(r), Val<uint32_t>::from_id(s), full);
  const auto [cr, cs] = b.begin_consume();
  if (cr != ir::kNoValue) {
    if constexpr (std::is_invocable_v<C, Val<uint32_t>, Val<uint32_t>, const SharedArray<u64>&>)
      consume(Val<uint32_t>::from_id(cr), Val<uint32_t>::from_id(cs), empty);
    else
      consume(Val<uint32_t>::from_id(cr), Val<uint32_t>::from_id(cs));
  }
  b.end_pipeline();
  return empty;
}
}  // namespace detail

template <class P, class C>
void pipeline(Arg<uint32_t> rounds, int stages, int lag, P&& produce, C&& consume,
              SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  static_assert(std::is_invocable_v<C, Val<uint32_t>, Val<uint32_t>>,
                "kiln: a pipeline's consume region takes the round and the stage");
  detail::pipeline(rounds, stages, lag, false, PipelineRegisters{}, std::forward<P>(produce),
                   std::forward<C>(consume), where);
}
// The same with the producer's and the consumers' registers split (above).
template <class P, class C>
void pipeline(Arg<uint32_t> rounds, int stages, int lag, PipelineRegisters regs, P&& produce,
              C&& consume, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  static_assert(std::is_invocable_v<C, Val<uint32_t>, Val<uint32_t>>,
                "kiln: a pipeline's consume region takes the round and the stage");
  detail::pipeline(rounds, stages, lag, false, regs, std::forward<P>(produce),
                   std::forward<C>(consume), where);
}

// The same for consumers whose work finishes asynchronously, tcgen05 multiplies: the consume
// region gets the empty mbarriers too and releases stage s itself, once per round, with
// tcgen05_commit(empty, s), which arrives when its multiplies are done; nothing else releases
// it. Returns the empty mbarriers: after the pipeline, waiting for the last round's phase,
// mbarrier_wait(empty, (rounds - 1) % stages, ((rounds - 1) / stages) % 2), waits for every
// multiply.
template <class P, class C>
SharedArray<u64> pipeline_committed(Arg<uint32_t> rounds, int stages, P&& produce, C&& consume,
                                    SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  static_assert(
      std::is_invocable_v<C, Val<uint32_t>, Val<uint32_t>, const SharedArray<u64>&>,
      "kiln: pipeline_committed's consume region takes the round, the stage and the empty "
      "mbarriers");
  return detail::pipeline(rounds, stages, 0, true, PipelineRegisters{}, std::forward<P>(produce),
                          std::forward<C>(consume), where);
}
template <class P, class C>
SharedArray<u64> pipeline_committed(Arg<uint32_t> rounds, int stages, PipelineRegisters regs,
                                    P&& produce, C&& consume, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  static_assert(
      std::is_invocable_v<C, Val<uint32_t>, Val<uint32_t>, const SharedArray<u64>&>,
      "kiln: pipeline_committed's consume region takes the round, the stage and the empty "
      "mbarriers");
  return detail::pipeline(rounds, stages, 0, true, regs, std::forward<P>(produce),
                          std::forward<C>(consume), where);
}

}  // namespace kiln::dsl
