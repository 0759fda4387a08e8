// The elements of an accumulator fragment, for kernels that compute on a multiply's result in
// registers (flash attention: scale, mask, a softmax along each row, then P * V). docs/dsl.md
// "Computing on accumulators" is the guide.
//
//   auto s = accumulator<f32>(16, 32, 16);       // S = Q K^T, 16 queries x 32 keys per plane
//   ...                                         // mma(s, q, k)
//   apply(s, [&](f32 x, u32 row, u32 col) {      // every element this unit holds
//     return select(col <= row + q0, x * scale, -INFINITY);
//   });
//   auto m = rows_max(s);                         // one value per row this unit holds
//   apply(s, [&](f32 x, int slot) { return exp(x - m[slot]); });
//   auto p = matrix_a<f16>(16, 64, 32);
//   convert(p, s);                               // P as the A operand of P * V, in registers
//
// Each unit holds m * n / 32 elements of an m x n accumulator, laid out as mma.sync lays out
// its accumulator on every backend (16 x 8 tiles, row-major; in a tile lane l holds row l / 4
// and l / 4 + 8, columns 2 (l % 4) and 2 (l % 4) + 1), so the row and column of each element are
// the same on the CPU, the emulator and a GPU. The four lanes l / 4 * 4 .. + 3 share each row:
// rows_max and rows_sum combine them with two plane shuffles, so they are plane operations (every
// unit of the plane reaches them together); element, set_element and apply are the unit's own.
#pragma once

#include <vector>

#include "compiler/dsl/builtins.h"
#include "compiler/dsl/matrix.h"

namespace kiln::dsl {

namespace detail {

inline const ir::Type& acc_type(ir::ValueId f) {
  return TraceContext::current().builder().type_of(f);
}

}  // namespace detail

// Elements of accumulator f each unit holds: rows x cols / 32.
template <class V>
int element_count(const Fragment<V>& f) {
  return f.rows() * f.cols() / 32;
}
// Rows of f each unit holds elements of: two per 16 rows (the unit's g and g + 8).
template <class V>
int row_count(const Fragment<V>& f) {
  return f.rows() / 8;
}
// Which of the unit's rows element e is in (0 .. row_count(f) - 1), known at trace time.
template <class V>
int row_slot(const Fragment<V>& f, int e) {
  const int n_tiles = f.cols() / 8, tile = e / 4;
  return tile / n_tiles * 2 + ((e >> 1) & 1);
}

// Element e (0 .. element_count(f) - 1) of this unit's part of accumulator f.
template <class V>
Val<host_of_t<V>> element(const Fragment<V>& f, int e, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto& ctx = TraceContext::current();
  ir::Attr a;
  a.i = static_cast<uint64_t>(e);
  return Val<host_of_t<V>>::from_id(
      ctx.builder().op(ir::OpKind::FragGet, {f.id()}, ctx.loc(where), ir::Type::void_type(), a));
}
// Sets element e of this unit's part of accumulator f to v.
template <class V>
void set_element(const Fragment<V>& f, int e, Arg<host_of_t<V>> v) {
  auto& ctx = TraceContext::current();
  ir::Attr a;
  a.i = static_cast<uint64_t>(e);
  ctx.builder().op(ir::OpKind::FragSet, {f.id(), v.value(1)}, v.at(), ir::Type::void_type(), a);
}

// The row of the tile (0 .. rows - 1) the unit's slot-th row is.
template <class V>
Val<uint32_t> slot_row(const Fragment<V>& f, int slot, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  (void)f;
  return plane_lane(where) / 4u + static_cast<uint32_t>(slot / 2 * 16 + slot % 2 * 8);
}
// The row and column of the tile element e of this unit is.
template <class V>
Val<uint32_t> element_row(const Fragment<V>& f, int e, SrcLoc where = SrcLoc::current()) {
  return slot_row(f, row_slot(f, e), where);
}
template <class V>
Val<uint32_t> element_col(const Fragment<V>& f, int e, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  const int n_tiles = f.cols() / 8;
  return (plane_lane(where) % 4u) * 2u + static_cast<uint32_t>(e / 4 % n_tiles * 8 + (e & 1));
}

// Replaces every element x of the unit's part of f by fn(...): fn(x), fn(x, slot) (the
// element's row slot, an int known at trace time, to index row values), or fn(x, row, col).
template <class V, class Fn>
void apply(const Fragment<V>& f, Fn&& fn, SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  using T = host_of_t<V>;
  for (int e = 0; e < element_count(f); ++e) {
    Val<T> x = element(f, e, where);
    if constexpr (std::is_invocable_v<Fn&, Val<T>, Val<uint32_t>, Val<uint32_t>>)
      set_element(f, e, Arg<T>(fn(x, element_row(f, e, where), element_col(f, e, where)), where));
    else if constexpr (std::is_invocable_v<Fn&, Val<T>, int>)
      set_element(f, e, Arg<T>(fn(x, row_slot(f, e)), where));
    else
      set_element(f, e, Arg<T>(fn(x), where));
  }
}

namespace detail {

// Combines each row's elements across the plane: within the unit, then with the lanes l ^ 1 and
// l ^ 2 that hold the rest of the row. Every unit of the plane gets each of its rows' result.
template <class V, class Combine>
std::vector<Val<host_of_t<V>>> row_reduce(const Fragment<V>& f, Combine&& combine,
                                          const SrcLoc& where) {
  const CallSite site(where);
  using T = host_of_t<V>;
  std::vector<Val<T>> r(static_cast<size_t>(row_count(f)));
  std::vector<bool> seen(r.size(), false);
  for (int e = 0; e < element_count(f); ++e) {
    const size_t s = static_cast<size_t>(row_slot(f, e));
    Val<T> x = element(f, e, where);
    r[s] = seen[s] ? combine(r[s], x) : x;
    seen[s] = true;
  }
  for (Val<T>& x : r) {
    x = combine(x, plane_shuffle_xor(x, 1u, where));
    x = combine(x, plane_shuffle_xor(x, 2u, where));
  }
  return r;
}

}  // namespace detail

// The largest element of each of the unit's rows of f (index: row_slot), over all the row's
// columns: a plane operation.
template <class V>
std::vector<Val<host_of_t<V>>> rows_max(const Fragment<V>& f, SrcLoc where = SrcLoc::current()) {
  return detail::row_reduce(
      f, [&](const auto& a, const auto& b) { return kiln::dsl::max(a, b, where); }, where);
}
// The sum of each of the unit's rows of f: a plane operation.
template <class V>
std::vector<Val<host_of_t<V>>> rows_sum(const Fragment<V>& f, SrcLoc where = SrcLoc::current()) {
  return detail::row_reduce(
      f, [&](const auto& a, const auto& b) { return a + b; }, where);
}
// Multiplies every element of f by its row's value (s[row_slot], values or variables).
template <class V, class R>
void scale_rows(const Fragment<V>& f, const std::vector<R>& s, SrcLoc where = SrcLoc::current()) {
  using T = host_of_t<V>;
  const CallSite site(where);
  if (s.size() != static_cast<size_t>(row_count(f))) {
    TraceContext::current().fail(
        where, fmt::format("scale_rows needs one value per row the unit holds ({}), got {}",
                           row_count(f), s.size()));
    return;
  }
  apply(
      f, [&](Val<T> x, int slot) { return x * s[static_cast<size_t>(slot)]; }, where);
}

}  // namespace kiln::dsl
