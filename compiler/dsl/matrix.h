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
// of one instruction step (16 for f16/bf16, 8 for f32 multiplied as tf32, 32 for i8/u8): a
// fragment's k is one or two steps.
template <class V>
using mma_acc_t = std::conditional_t<std::is_integral_v<host_of_t<V>>, int32_t, float>;
template <class V>
constexpr int mma_k_step() {
  if constexpr (std::is_integral_v<host_of_t<V>>) return 32;
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
  const auto in_range = [](int x) { return x > 0 && x < 256; };
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
  return detail::alloc_frag<V>(ir::FragUse::A, m, n, k, where);
}
// The B operand (k x n).
template <class V>
Fragment<V> matrix_b(int m, int n, int k, SrcLoc where = SrcLoc::current()) {
  return detail::alloc_frag<V>(ir::FragUse::B, m, n, k, where);
}
// The accumulator (m x n).
template <class V>
Fragment<V> accumulator(int m, int n, int k, SrcLoc where = SrcLoc::current()) {
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
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::FragMma, {acc.id(), a.id(), b.id()}, ctx.loc(where));
}

// dst = src converted element by element (accumulators of one shape, e.g. f32 to f16).
template <class D, class S>
void convert(const Fragment<D>& dst, const Fragment<S>& src, SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::FragCast, {dst.id(), src.id()}, ctx.loc(where));
}

}  // namespace kiln::dsl
