// Matrix fragments in the DSL: tiles of a matrix multiply owned by a plane, for tensor cores on
// the GPU (mma.sync) and register-blocked SIMD on the CPU. docs/dsl.md "Matrices" is the guide.
//
//   auto a = matrix_a<f16>(16, 16, 16);        // 16 x 16 of A, for m16 n16 k16 multiplies
//   auto b = matrix_b<f16>(16, 16, 16);        // 16 x 16 of B
//   auto c = accumulator<f32>(16, 16, 16);     // 16 x 16 of C
//   fill(c, 0.0f);
//   for_range(0u, k, 16u, [&](u32 kk) {
//     load(a, x, row * k + kk, k);             // element (r, c) at x[index + r * stride + c]
//     load(b, y, kk * n + col, n);
//     mma(c, a, b);                            // c += a * b
//   });
//   store(out, row * n + col, n, c);
//
// Every unit of a plane runs each fragment operation together, with the same operands (the
// verifier checks this), and the cube must hold whole planes.
#pragma once

#include <type_traits>

#include "compiler/dsl/memory.h"

namespace kiln::dsl {

enum class Layout { Row, Col };

// The accumulator type of a multiply with inputs V (f32, or i32 for i8 and u8 inputs), and the k
// of one instruction step (16 for f16/bf16, 8 for f32 multiplied as tf32, 32 for i8/u8 and the
// f8 types): a fragment's k is one or two steps.
template <class V>
using mma_acc_t = std::conditional_t<std::is_integral_v<host_of_t<V>>, int32_t, float>;
template <class V>
constexpr int mma_k_step() {
  if constexpr (std::is_integral_v<host_of_t<V>> || sizeof(host_of_t<V>) == 1) return 32;
  if constexpr (std::is_same_v<host_of_t<V>, float>) return 8;
  return 16;
}

// A plane's fragment of element type V (a DSL type such as f16, or its host type).
template <class V>
class Fragment {
 public:
  using T = host_of_t<V>;
  Fragment() = default;
  explicit Fragment(ir::ValueId id) : id_(id) {}
  ir::ValueId id() const { return id_; }
  // The shape m x n x k of the multiply it belongs to, and its rows and columns.
  int m() const { return type().m; }
  int n() const { return type().n; }
  int k() const { return type().k; }
  int rows() const { return type().frag_rows(); }
  int cols() const { return type().frag_cols(); }

 private:
  ir::Type type() const {
    return id_ == ir::kNoValue ? ir::Type{} : TraceContext::current().builder().type_of(id_);
  }
  ir::ValueId id_ = ir::kNoValue;
};

// ---- the target's multiplies, asked at trace time -------------------------------------------

// The target the kernel is being traced for: "cpu", "sm_90a", "cuda-emu", ..., or "any" when
// the trace is for no particular target.
inline const std::string& target_name() {
  return TraceContext::current().target().name;
}
// The matrix multiplies the target runs (inputs, accumulator, m x n x k).
inline const std::vector<ir::MatrixConfig>& mma_configs() {
  return TraceContext::current().target().matrix;
}
// Whether the target multiplies fragments of inputs V in shape m x n x k: a kernel picks its
// tile configuration per target with it, at trace time.
template <class V>
bool has_mma(int m, int n, int k) {
  for (const ir::MatrixConfig& c : mma_configs())
    if (c.input == elem_v<host_of_t<V>> && c.m == m && c.n == n && c.k == k) return true;
  return false;
}

namespace detail {

template <class V>
Fragment<V> alloc_frag(ir::FragUse use, int m, int n, int k, const SrcLoc& where) {
  auto& ctx = TraceContext::current();
  using T = host_of_t<V>;
  const auto in_range = [](int x) { return x > 0 && x <= 1024; };
  if (!in_range(m) || !in_range(n) || !in_range(k)) {
    ctx.fail(where, fmt::format("fragment shape {}x{}x{} is out of range; see docs/dsl.md "
                                "\"Matrices\" for the shapes",
                                m, n, k));
    return Fragment<V>();
  }
  const ir::Type t = ir::Type::frag(use, elem_v<T>, m, n, k);
  if (use != ir::FragUse::Acc && ir::frag_type_error(t).empty()) {
    // A valid operand of a multiply the target does not run: say which target, and what it has.
    bool found = false;
    for (const ir::MatrixConfig& c : mma_configs())
      found = found || (c.input == elem_v<T> && c.m == m && c.n == n && c.k == k);
    if (!found) {
      std::string shapes;  // what the target has for this input type
      for (const ir::MatrixConfig& c : mma_configs())
        if (c.input == elem_v<T>)
          shapes += fmt::format("{}{}x{}x{}", shapes.empty() ? "" : ", ", c.m, c.n, c.k);
      ctx.fail(where, fmt::format("{} is not available on {}: it multiplies {} fragments {}; ask "
                                  "has_mma<T>(m, n, k) at trace time and choose another path there",
                                  ir::type_name(t), ctx.target().name, ir::elem_name(elem_v<T>),
                                  shapes.empty() ? std::string("in no shape") : "of " + shapes));
      return Fragment<V>();
    }
  }
  return Fragment<V>(ctx.builder().op(ir::OpKind::AllocFrag, {}, ctx.loc(where), t));
}

inline uint64_t layout_attr(Layout l) {
  return l == Layout::Col ? 1 : 0;
}

}  // namespace detail

// The A operand (m x k) of an m x n x k multiply.
template <class V>
Fragment<V> matrix_a(int m, int n, int k, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  return detail::alloc_frag<V>(ir::FragUse::A, m, n, k, where);
}
// The B operand (k x n).
template <class V>
Fragment<V> matrix_b(int m, int n, int k, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  return detail::alloc_frag<V>(ir::FragUse::B, m, n, k, where);
}
// The accumulator (m x n).
template <class V>
Fragment<V> accumulator(int m, int n, int k, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  return detail::alloc_frag<V>(ir::FragUse::Acc, m, n, k, where);
}

// Sets every element of the fragment to v.
template <class V>
void fill(const Fragment<V>& f, Arg<host_of_t<V>> v) {
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::FragFill, {f.id(), v.value(1)}, v.at());
}

// Loads the tile at `index` of global or shared memory: element (r, c) is
// mem[index + r * stride + c] (Layout::Row) or mem[index + c * stride + r] (Layout::Col).
template <class V, class Mem>
void load(const Fragment<V>& f, const Mem& mem, Arg<uint32_t> index, Arg<uint32_t> stride,
          Layout layout = Layout::Row) {
  const uint32_t r = static_cast<uint32_t>(f.rows()), c = static_cast<uint32_t>(f.cols());
  load(f, mem, index, stride, Arg<uint32_t>(r, index.where()), Arg<uint32_t>(c, index.where()),
       layout);
}
// The same, reading only the first `rows` x `cols` elements of the tile (the rest are zero):
// the partial tiles at a matrix's edges.
template <class V, class Mem>
void load(const Fragment<V>& f, const Mem& mem, Arg<uint32_t> index, Arg<uint32_t> stride,
          Arg<uint32_t> rows, Arg<uint32_t> cols, Layout layout = Layout::Row) {
  auto& ctx = TraceContext::current();
  ir::Attr a;
  a.i = detail::layout_attr(layout);
  ctx.builder().op(
      ir::OpKind::FragLoad,
      {f.id(), mem.id(), index.value(1), stride.value(1), rows.value(1), cols.value(1)}, index.at(),
      {}, a);
}

// Loads the whole tile at `index` of a shared array as load() does, through ldmatrix on the GPU
// (load() picks it by itself where it can; this says it must): A and B fragments of 16-bit
// inputs in either layout, or of 8-bit ones with k contiguous (A Layout::Row, B Layout::Col), B
// with n a multiple of 16. Each row of the tile (each column, Layout::Col) must start on 16
// bytes: the emulator reports one that does not (then loads it element by element), a GPU
// faults or reads wrong data.
template <class V>
void ldmatrix(const Fragment<V>& f, const SharedArray<V>& mem, Arg<uint32_t> index,
              Arg<uint32_t> stride, Layout layout = Layout::Row) {
  auto& ctx = TraceContext::current();
  ir::Attr a;
  a.i = detail::layout_attr(layout);
  ctx.builder().op(ir::OpKind::FragLdmatrix, {f.id(), mem.id(), index.value(1), stride.value(1)},
                   index.at(), {}, a);
}

// Stores an accumulator to the tile at `index`, addressed as load() does.
template <class Mem, class V>
void store(const Mem& mem, Arg<uint32_t> index, Arg<uint32_t> stride, const Fragment<V>& f,
           Layout layout = Layout::Row) {
  const uint32_t r = static_cast<uint32_t>(f.rows()), c = static_cast<uint32_t>(f.cols());
  store(mem, index, stride, Arg<uint32_t>(r, index.where()), Arg<uint32_t>(c, index.where()), f,
        layout);
}
// The same, writing only the first `rows` x `cols` elements.
template <class Mem, class V>
void store(const Mem& mem, Arg<uint32_t> index, Arg<uint32_t> stride, Arg<uint32_t> rows,
           Arg<uint32_t> cols, const Fragment<V>& f, Layout layout = Layout::Row) {
  auto& ctx = TraceContext::current();
  ir::Attr a;
  a.i = detail::layout_attr(layout);
  ctx.builder().op(
      ir::OpKind::FragStore,
      {mem.id(), index.value(1), stride.value(1), rows.value(1), cols.value(1), f.id()}, index.at(),
      {}, a);
}

// acc += a * b.
template <class C, class V>
void mma(const Fragment<C>& acc, const Fragment<V>& a, const Fragment<V>& b,
         SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::FragMma, {acc.id(), a.id(), b.id()}, ctx.loc(where));
}

// Whether the target runs block-scaled multiplies (mma_scaled): sm_120a, the CPU and
// cuda-emu:sm_120a (asked at trace time, like has_mma).
inline bool has_mma_scaled() {
  return TraceContext::current().target().features.mma_scaled;
}

// acc += (A * SA) (B * SB), the block-scaled multiply of MX formats (mma.sync
// kind::mxf8f6f4.block_scale, sm_120a): a and b hold f8e4m3 or f8e5m2, and each row r of A and
// column c of B has one scale per 32 k, a ue8m0 code e meaning 2^(e - 127) (255: NaN), read
// from u8 memory (global or shared) at sa[sa_index + r * sa_stride + j] and
// sb[sb_index + c * sb_stride + j] for k block j (0, or 0 and 1 for k = 64): the layout of MX
// scale matrices, M x K/32 and N x K/32.
// Fails the trace, at the caller's line, on a target without block-scaled multiplies; true where
// they run. A kernel written for them alone calls it first, before allocating f8 fragments
// that such a target may not have either.
inline bool require_mma_scaled(SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (ctx.target().features.mma_scaled) return true;
  ctx.fail(where, fmt::format("block-scaled mma (kind::mxf8f6f4) is an sm_120a instruction; {} "
                              "has none: ask has_mma_scaled() at trace time and scale the "
                              "inputs before mma() there",
                              ctx.target().name));
  return false;
}
template <class C, class V, class MA, class MB>
void mma_scaled(const Fragment<C>& acc, const Fragment<V>& a, const Fragment<V>& b, const MA& sa,
                Arg<uint32_t> sa_index, Arg<uint32_t> sa_stride, const MB& sb,
                Arg<uint32_t> sb_index, Arg<uint32_t> sb_stride) {
  auto& ctx = TraceContext::current();
  static_assert(sizeof(host_of_t<V>) == 1 && !std::is_integral_v<host_of_t<V>>,
                "kiln: block-scaled multiplies take f8e4m3 or f8e5m2 fragments");
  if (!require_mma_scaled(sa_index.where())) return;
  ctx.builder().op(ir::OpKind::FragMmaScaled,
                   {acc.id(), a.id(), b.id(), sa.id(), sa_index.value(1), sa_stride.value(1),
                    sb.id(), sb_index.value(1), sb_stride.value(1)},
                   sa_index.at());
}

// dst = src converted element by element (accumulators of one shape, e.g. f32 to f16).
template <class D, class S>
void convert(const Fragment<D>& dst, const Fragment<S>& src, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::FragCast, {dst.id(), src.id()}, ctx.loc(where));
}

// ---- warpgroup multiplies: wgmma (sm_90a) ----------------------------------------------------
//
// A warpgroup (4 planes, 128 units: planes 4g..4g+3) multiplies a 64 x k tile of A by a k x n
// tile of B, both in shared memory, read through descriptors; each plane accumulates its 16
// rows of the 64 x n product (plane p % 4 holds rows 16 (p % 4) .. 16 (p % 4) + 15) in an
// ordinary accumulator, accumulator<f32>(16, n, k), so fill, store and convert work as before:
//
//   auto acc = accumulator<f32>(16, 128, 16);         // this plane's rows of a 64 x 128 tile
//   fill(acc, 0.0f);
//   wgmma_fence();                                    // before the first multiply
//   wgmma<bf16>(acc, wgmma_tile_desc(a_s, 0u, 64, Swizzle::B128, 0u),
//                    wgmma_tile_desc(b_s, 0u, 128, Swizzle::B128, 0u));
//   wgmma_commit();
//   wgmma_wait(0);                                    // before reading acc
//   store(c, (16u * (plane_pos() % 4u)) * 128u, 128u, acc);
//
// Operands are K-major by default (A: m rows of k; B: n rows of k, i.e. B transposed), as wgmma
// reads tf32 and 8-bit inputs. f16 and bf16 operands may also be MN-major (A m x k with m
// contiguous, i.e. A stored transposed; B k x n with n contiguous, the usual row-major B):
// pass Major::MN to the tile helpers and to the multiply. docs/dsl.md "Warpgroup multiplies"
// shows the shared-memory layouts.
// The target must have wgmma (has_wgmma()): sm_90a, the CPU and cuda-emu (sm_90a).

// The swizzle of a shared-memory matrix layout: none, or the 16-byte chunks of each row of 32,
// 64 or 128 bytes permuted by the row's position (the layouts TMA writes).
enum class Swizzle : uint32_t { None = 0, B32 = 32, B64 = 64, B128 = 128 };

// Which index of a wgmma or tcgen05 operand is contiguous in shared memory: k (K-major, every
// input type) or m / n (MN-major, f16 and bf16 inputs).
enum class Major : uint32_t { K = 0, MN = 1 };

// Whether the target runs warpgroup multiplies (asked at trace time, like has_mma).
inline bool has_wgmma() {
  return TraceContext::current().target().features.wgmma;
}

namespace detail {
inline bool need_wgmma(const SrcLoc& where) {
  auto& ctx = TraceContext::current();
  if (ctx.target().features.wgmma) return true;
  ctx.fail(where, fmt::format("wgmma is an sm_90a instruction; {} has none: ask has_wgmma() at "
                              "trace time and take another path (mma() on fragments) there",
                              ctx.target().name));
  return false;
}
}  // namespace detail

// The descriptor of a matrix in shared memory starting at mem[index]: its leading and stride
// byte offsets (multiples of 16) and swizzle, as the PTX ISA defines them for K-major operands:
// without swizzle, core matrices of 8 rows x 16 bytes, LBO bytes apart along k and SBO bytes
// apart along the rows; with a swizzle of W bytes, rows of W bytes, groups of 8 rows SBO apart.
namespace detail {
// The descriptor op of a matrix in shared memory (wgmma.desc, tcgen05.desc).
template <class V>
Val<uint64_t> smem_desc(ir::OpKind kind, const SharedArray<V>& mem, Arg<uint32_t> index,
                        Arg<uint32_t> lbo, Arg<uint32_t> sbo, Swizzle swizzle) {
  ir::Attr a;
  a.i = static_cast<uint64_t>(swizzle);
  return Val<uint64_t>::from_id(TraceContext::current().builder().op(
      kind, {mem.id(), index.value(1), lbo.value(1), sbo.value(1)}, index.at(), {}, a));
}
}  // namespace detail

template <class V>
Val<uint64_t> wgmma_desc(const SharedArray<V>& mem, Arg<uint32_t> index, Arg<uint32_t> lbo,
                         Arg<uint32_t> sbo, Swizzle swizzle = Swizzle::None) {
  if (!detail::need_wgmma(index.where())) return Val<uint64_t>();
  return detail::smem_desc(ir::OpKind::WgmmaDesc, mem, index, lbo, sbo, swizzle);
}

// kiln's layout of a K-major tile of `rows` rows (a multiple of 8) and any number of k columns
// in shared memory: the element index of (r, k) from the tile's start. With a swizzle of W
// bytes: atoms of 8 rows x W bytes, stacked along the rows, then along k; without: core
// matrices of 8 rows x 16 bytes, stacked the same way. The tile's start must be 1024-byte
// aligned in the array (index 0 is: arrays used by wgmma_desc start on 1024 bytes).
template <class V>
Val<uint32_t> wgmma_tile_index(Swizzle swizzle, int rows, Val<uint32_t> r, Val<uint32_t> k) {
  const uint32_t size = sizeof(host_of_t<V>), groups = static_cast<uint32_t>(rows) / 8;
  const uint32_t w = static_cast<uint32_t>(swizzle);
  if (w == 0) {
    const uint32_t per16 = 16 / size;
    const Val<uint32_t> byte =
        ((k / per16) * groups + r / 8u) * 128u + (r % 8u) * 16u + (k % per16) * size;
    return byte / size;
  }
  const uint32_t per_row = w / size;
  const Val<uint32_t> byte =
      ((k / per_row) * groups + r / 8u) * (8u * w) + (r % 8u) * w + (k % per_row) * size;
  return (byte ^ (((byte >> 7u) & (w / 16 - 1)) << 4u)) / size;
}

namespace detail {
// The mn elements of an atom of an MN-major tile: 16 bytes without swizzle, else W bytes.
template <class V>
constexpr uint32_t mn_atom(Swizzle swizzle) {
  const uint32_t w = static_cast<uint32_t>(swizzle);
  return (w == 0 ? 16u : w) / static_cast<uint32_t>(sizeof(host_of_t<V>));
}
template <class V>
bool mn_tile_ok(Swizzle swizzle, int extent, const char* who, const SrcLoc& where) {
  auto& ctx = TraceContext::current();
  if (sizeof(host_of_t<V>) != 2) {
    ctx.fail(where, fmt::format("an MN-major {} tile holds f16 or bf16; lay out other input "
                                "types K-major",
                                who));
    return false;
  }
  const auto atom = static_cast<int>(mn_atom<V>(swizzle));
  if (extent <= 0 || extent % atom != 0) {
    ctx.fail(where, fmt::format("an MN-major {} tile with swizzle {} spans a multiple of {} "
                                "elements along m or n, not {}",
                                who, static_cast<uint32_t>(swizzle), atom, extent));
    return false;
  }
  return true;
}
}  // namespace detail

// The same with the tile's major: Major::K is the layout above (`rows` of k); Major::MN lays
// out a tile of `extent` elements along mn (a multiple of 8 without swizzle, W / 2 with a swizzle
// of W bytes) by any multiple of 8 of k: atoms of 8 k-rows of 16 bytes of mn (without swizzle)
// or of W bytes (with), stacked along mn, then along k; the element index of (mn, k) = (r, k).
// A TMA box of a row-major K x N matrix has this layout when its inner dimension is W bytes.
template <class V>
Val<uint32_t> wgmma_tile_index(Swizzle swizzle, int extent, Val<uint32_t> r, Val<uint32_t> k,
                               Major major, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  if (major == Major::K) return wgmma_tile_index<V>(swizzle, extent, r, k);
  if (!detail::mn_tile_ok<V>(swizzle, extent, "wgmma", where)) return Val<uint32_t>();
  const uint32_t size = sizeof(host_of_t<V>), w = static_cast<uint32_t>(swizzle);
  const uint32_t atom = detail::mn_atom<V>(swizzle), atoms = static_cast<uint32_t>(extent) / atom;
  const uint32_t atom_bytes = w == 0 ? 128u : 8u * w, row_bytes = w == 0 ? 16u : w;
  const Val<uint32_t> byte =
      ((k / 8u) * atoms + r / atom) * atom_bytes + (k % 8u) * row_bytes + (r % atom) * size;
  if (w == 0) return byte / size;
  return (byte ^ (((byte >> 7u) & (w / 16 - 1)) << 4u)) / size;
}

namespace detail {

// The descriptor of k-step `step` (32 bytes of k) of a K-major tile of `rows` rows laid out by
// wgmma_tile_index at mem[base], made by `describe` (wgmma_desc or tcgen05_desc). Without
// swizzle: core-matrix columns 2 step and 2 step + 1, LBO between them, SBO down the rows.
template <class V, class Describe>
Val<uint64_t> k_tile_desc(const SharedArray<V>& mem, Val<uint32_t> base, int rows, Swizzle swizzle,
                          Val<uint32_t> step, const char* who, const SrcLoc& where,
                          Describe describe) {
  const uint32_t size = sizeof(host_of_t<V>), groups = static_cast<uint32_t>(rows) / 8;
  const uint32_t w = static_cast<uint32_t>(swizzle);
  if (rows <= 0 || rows % 8 != 0) {
    TraceContext::current().fail(
        where, fmt::format("a {} tile has a multiple of 8 rows, not {}", who, rows));
    return Val<uint64_t>();
  }
  if (w == 0)
    return describe(mem, Arg<uint32_t>(base + step * (2u * groups * 128u / size), where),
                    Arg<uint32_t>(groups * 128u, where), Arg<uint32_t>(128u, where), swizzle);
  const uint32_t steps_per_row = w / 32;  // 32 bytes of k per step
  const Val<uint32_t> index = base + (step / steps_per_row) * (groups * 8u * w / size) +
                              (step % steps_per_row) * (32u / size);
  return describe(mem, Arg<uint32_t>(index, where), Arg<uint32_t>(16u, where),
                  Arg<uint32_t>(8u * w, where), swizzle);
}

// The descriptor of k-step `step` (32 bytes of k: 16 elements, two groups of 8 k-rows) of an
// MN-major tile laid out by wgmma_tile_index(..., Major::MN) at mem[base], made by `describe`
// (wgmma_desc or tcgen05_desc: the same layouts, encoded for each instruction).
template <class V, class Describe>
Val<uint64_t> mn_tile_desc(const SharedArray<V>& mem, Val<uint32_t> base, int extent,
                           Swizzle swizzle, Val<uint32_t> step, const char* who,
                           const SrcLoc& where, Describe describe) {
  if (!mn_tile_ok<V>(swizzle, extent, who, where)) return Val<uint64_t>();
  const uint32_t size = sizeof(host_of_t<V>), w = static_cast<uint32_t>(swizzle);
  const uint32_t atoms = static_cast<uint32_t>(extent) / mn_atom<V>(swizzle);
  const uint32_t atom_bytes = w == 0 ? 128u : 8u * w, group = atoms * atom_bytes;
  // Without swizzle: LBO along k (between groups of 8 k-rows), SBO along mn; with: LBO along mn
  // (between atoms), SBO along k.
  const uint32_t lbo = w == 0 ? group : atom_bytes, sbo = w == 0 ? atom_bytes : group;
  return describe(mem, Arg<uint32_t>(base + step * (2u * group / size), where),
                  Arg<uint32_t>(lbo, where), Arg<uint32_t>(sbo, where), swizzle);
}
}  // namespace detail

// The descriptor of k-step `step` (the instruction's k columns: 16 for f16/bf16, 8 for tf32,
// 32 for i8/u8; 32 bytes) of a tile laid out by wgmma_tile_index at mem[base].
template <class V>
Val<uint64_t> wgmma_tile_desc(const SharedArray<V>& mem, Val<uint32_t> base, int rows,
                              Swizzle swizzle, Val<uint32_t> step,
                              SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  return detail::k_tile_desc(mem, base, rows, swizzle, step, "wgmma", where,
                             [](auto&&... x) { return wgmma_desc(x...); });
}

// The same with the tile's major (Major::MN: `extent` along mn, laid out by
// wgmma_tile_index(..., Major::MN)); pass the same major to wgmma().
template <class V>
Val<uint64_t> wgmma_tile_desc(const SharedArray<V>& mem, Val<uint32_t> base, int extent,
                              Swizzle swizzle, Val<uint32_t> step, Major major,
                              SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  if (major == Major::K) return wgmma_tile_desc(mem, base, extent, swizzle, step, where);
  return detail::mn_tile_desc(mem, base, extent, swizzle, step, "wgmma", where,
                              [](auto&&... x) { return wgmma_desc(x...); });
}

namespace detail {
// The attribute bits of the operand majors of a multiply of inputs V, or a trace error.
template <class V>
bool majors_ok(Major a, Major b, const char* who, const SrcLoc& where) {
  if ((a == Major::MN || b == Major::MN) && !ir::mma_mn_major_valid(elem_v<host_of_t<V>>)) {
    TraceContext::current().fail(
        where, fmt::format("{} reads MN-major operands of f16 or bf16 only, not {}; lay the "
                           "tile out K-major",
                           who, ir::elem_name(elem_v<host_of_t<V>>)));
    return false;
  }
  return true;
}
}  // namespace detail

// acc += A * B for the warpgroup: A (64 x k) and B (n x k) from their descriptors, K-major
// unless a_major / b_major say MN (f16 and bf16 only), inputs of type V (f16, bf16, f32 as
// tf32, i8, u8, f8e4m3, f8e5m2); acc is this plane's accumulator<mma_acc_t<V>>(16, n,
// mma_k_step<V>()). Asynchronous on the GPU: fence before, commit and wait before the
// accumulator is read.
template <class V, class C>
void wgmma(const Fragment<C>& acc, Arg<uint64_t> a, Arg<uint64_t> b, Major a_major = Major::K,
           Major b_major = Major::K, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (!detail::need_wgmma(where) || !detail::majors_ok<V>(a_major, b_major, "wgmma", where)) return;
  ir::Attr attr;
  attr.i = static_cast<uint64_t>(elem_v<host_of_t<V>>) |
           ir::mma_major_bits({a_major == Major::MN, b_major == Major::MN}, ir::kWgmmaMajorShift);
  ctx.builder().op(ir::OpKind::Wgmma, {acc.id(), a.value(1), b.value(1)}, ctx.loc(where), {}, attr);
}
// Orders earlier accesses to accumulators before the multiplies after it (wgmma.fence).
inline void wgmma_fence(SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (detail::need_wgmma(where)) ctx.builder().op(ir::OpKind::WgmmaFence, {}, ctx.loc(where));
}
// Closes the group of multiplies issued since the last commit (wgmma.commit_group).
inline void wgmma_commit(SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (detail::need_wgmma(where)) ctx.builder().op(ir::OpKind::WgmmaCommit, {}, ctx.loc(where));
}
// Waits until at most `pending` (0..7) committed groups are still running (wgmma.wait_group):
// the accumulators of the others may then be read.
inline void wgmma_wait(int pending, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  if (pending < 0 || pending > 7) {
    ctx.fail(where, fmt::format("wgmma_wait leaves 0 to 7 groups pending, not {}", pending));
    return;
  }
  if (!detail::need_wgmma(where)) return;
  ir::Attr a;
  a.i = static_cast<uint64_t>(pending);
  ctx.builder().op(ir::OpKind::WgmmaWait, {}, ctx.loc(where), {}, a);
}

}  // namespace kiln::dsl
