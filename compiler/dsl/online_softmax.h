// The online softmax of flash attention on an accumulator's rows (docs/dsl.md "Computing on
// accumulators"): a softmax along rows whose columns arrive a block at a time, keeping each
// row's running maximum and sum, so that the scores of a whole row never exist at once.
//
//   OnlineSoftmax st = online_softmax(s);             // before the loop over key blocks
//   for_range(...) {
//     ...                                             // S = Q K^T, scaled to log2 units
//     auto alpha = online_softmax_step(s, st);        // S's elements become P = exp2(S - max)
//     scale_rows(o, alpha);                           // the running output follows the max
//     ...                                             // O += P V
//   }
//   // O / st.sum; the log-sum-exp is st.max + log2(st.sum) (log2 units)
#pragma once

#include <cmath>
#include <vector>

#include "compiler/dsl/fragment_elements.h"
#include "compiler/dsl/var.h"

namespace kiln::dsl {

// Per row slot of the accumulator (row_slot): the running maximum of the row's elements seen so
// far (-inf before any) and the running sum of exp2(element - maximum).
struct OnlineSoftmax {
  std::vector<Var<float>> max, sum;
};

// The state for the rows of s, before any block.
template <class V>
OnlineSoftmax online_softmax(const Fragment<V>& s, SrcLoc where = SrcLoc::current()) {
  OnlineSoftmax st;
  for (int r = 0; r < row_count(s); ++r) {
    st.max.emplace_back(-INFINITY, where);
    st.sum.emplace_back(0.0f, where);
  }
  return st;
}

// One block of columns: s holds the block's scores in log2 units (-inf where masked); they
// become exp2(score - new maximum), the row maxima and sums are updated, and the factor each
// row's earlier results must be multiplied by, exp2(old maximum - new maximum), is returned per
// slot. A row that has seen only -inf keeps maximum -inf and subtracts 0 instead, so its
// elements and factor are 0 and 1 rather than NaN. rows_max and rows_sum make it a plane
// operation: every unit of the plane must reach it.
template <class V>
std::vector<Val<float>> online_softmax_step(const Fragment<V>& s, OnlineSoftmax& st,
                                            SrcLoc where = SrcLoc::current()) {
  const CallSite site(where);
  auto mx = rows_max(s, where);
  std::vector<Val<float>> alpha, m_use;
  for (size_t i = 0; i < st.max.size(); ++i) {
    Val<float> m_old = st.max[i].get(where);
    Val<float> m_new = kiln::dsl::max(m_old, mx[i], where);
    m_use.push_back(select(m_new == -INFINITY, 0.0f, m_new));
    alpha.push_back(exp2(m_old - m_use.back(), where));
    st.max[i] = m_new;
  }
  apply(
      s, [&](Val<float> x, int slot) { return exp2(x - m_use[static_cast<size_t>(slot)], where); },
      where);
  auto sum = rows_sum(s, where);
  for (size_t i = 0; i < st.sum.size(); ++i) st.sum[i] = st.sum[i].get(where) * alpha[i] + sum[i];
  return alpha;
}

}  // namespace kiln::dsl
