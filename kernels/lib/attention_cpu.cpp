// The CPU's kernels of kiln::lib::attention and attention_backward (attention.h; the host side,
// which picks them on a device whose units are SIMD lanes, is in attention.cpp). The fragment
// kernels of attention.cpp and attention_backward.cpp are written for GPUs: on the CPU their
// element work on S and O (scale, mask, exp, row maxima and sums across a plane, O's rescaling)
// becomes gathers and scatters of a plane's tile. These are laid out for SIMD lanes instead: a
// cube is one vector of `lanes` queries (keys, for dK and dV) of one head, one per lane, so that
// every row operation of the softmax (maximum, sum, exp2, rescaling) is a lane-wise vector
// operation and nothing crosses lanes. The forward:
//
// - Q^T and the running O^T live in the worker's arena (shared memory on the CPU), element
//   (d, query) at d * lanes + lane: a vector per column of the head.
// - Keys are walked in blocks of `keys`, each block of K and V converted once into f32 rows in
//   the arena (contiguous vector loads of the tensors' rows).
// - S^T for the block is `keys` vector accumulators: for each column d, one vector load of Q^T
//   and `keys` FMAs with K's element broadcast (S = Q K^T, a register-blocked product).
// - O^T += V^T P^T column by column: one vector of O^T, rescaled by the lanes' alpha, and
//   `keys` FMAs with V's element broadcast against P's vectors, held in registers.
//
// The backward, FlashAttention-2's without atomics as on GPUs (attention_backward.cpp), in the
// same two shapes of product (a block's rows broadcast against the lanes' columns in the arena,
// and a column of the arena updated from the block's rows against vectors in registers):
//
//   attention_bwd_cpu       a key head per cube, a vector of keys at a time (a key per lane);
//                           over the queries that see them, in blocks: S^T, P^T =
//                           exp2(S^T - lse), dV^T += dO^T P^T, dP^T = V dO^T, dS^T = P^T (dP^T -
//                           delta), dK^T += Q^T dS^T, and dQ += dS K into f32 sums (five
//                           products: the cube owns every key of its head, so dQ needs no
//                           atomics)
//   attention_bwd_dkdv_cpu  with fewer key heads than the cores need: dK and dV as above, a
//   attention_bwd_dq_cpu    vector of keys per cube; then dQ, a vector of queries per cube, over
//                           the keys they see: S, P, dP = dO V^T, dS, dQ^T += K^T dS^T (seven
//                           products)
//
// Both ways give the same bits: every score is the same chain of FMAs over d from f32 copies of
// the inputs, scaled once, and every gradient sums its terms in the same order (dQ in key order,
// from +0, with the masked terms exact zeros), so the choice, which follows the core count, never
// shows in the results. P and dS stay in f32 (the GPUs' kernels round them to the inputs' type
// for their multiplies).
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/lib/attention_seqs.h"
#include "kernels/lib/common.h"

using namespace kiln::dsl;
using kiln::lib::detail::InOut;
using kiln::lib::detail::seen_by;

namespace {

constexpr float kLog2e = 1.4426950408889634f;

bool check_shape(int head_dim, int block) {
  if (head_dim % 16 != 0 || head_dim > 256 || block < 1 || block > 32) {
    TraceContext::current().fail(
        SrcLoc::current(), fmt::format("head_dim = {}, block = {}: head_dim a multiple of 16 up "
                                       "to 256, a block of 1 to 32 rows",
                                       head_dim, block));
    return false;
  }
  return true;
}

// Rows row0 .. row0 + block - 1 of the head at `base` of t (rows `stride` apart, `cols`
// elements each) into the arena as f32, (j, c) at j cols + c; rows from n on are zeros (read
// from row0 + n - 1, which exists when n > 0). Consecutive lanes read consecutive elements.
template <class T>
void pack_rows(const SharedArray<f32>& to, const Tensor<const T>& t, u32 base, u32 stride, u32 row0,
               u32 n, uint32_t block, uint32_t cols, uint32_t lanes) {
  u32 unit = unit_pos();
  for_range(0u, block, 1u, [&](u32 j) {
    Val<bool> in = j < n;
    u32 r = row0 + min(j, max(n, 1u) - 1u);
    for (uint32_t c0 = 0; c0 < cols; c0 += lanes) {
      u32 c = c0 + unit;
      if_(c < cols,
          [&] { to[j * cols + c] = select(in, cast<float>(t[base + r * stride + c]), 0.0f); });
    }
  });
}

// The lane's row of t at `base` (`cols` elements) into the arena as f32, a column: (c, lane) at
// c lanes + lane.
template <class T>
void pack_column(const SharedArray<f32>& to, const Tensor<const T>& t, u32 base, uint32_t cols,
                 uint32_t lanes) {
  u32 unit = unit_pos();
  for_range(0u, cols, 1u, unroll(4),
            [&](u32 c) { to[c * lanes + unit] = cast<float>(t[base + c]); });
}

// The arena's column (c, lane) at c lanes + lane, times `scale`, into the lane's row of t at
// `base`, in t's type.
template <class T>
void store_column(Tensor<T>& t, u32 base, const SharedArray<f32>& from, f32 scale, uint32_t cols,
                  uint32_t lanes) {
  u32 unit = unit_pos();
  for_range(0u, cols, 1u, unroll(4), [&](u32 c) {
    t[base + c] = cast<host_of_t<T>>(Val<float>(from[c * lanes + unit]) * scale);
  });
}

void zero_column(const SharedArray<f32>& to, uint32_t cols, uint32_t lanes) {
  u32 unit = unit_pos();
  for_range(0u, cols, 1u, unroll(4), [&](u32 c) { to[c * lanes + unit] = 0.0f; });
}

// For each of `block` rows of the arena's block (j, c) at j cols + c and each column of a,
// (c, lane) at c lanes + lane: sums[j] += block(j, c) a(c, lane), a register-blocked product
// with one vector load per column and the block's element broadcast. With b and more, likewise
// more[j] += block_b(j, c) b(c, lane) in the same walk.
void rows_times_column(std::vector<Var<f32>>& sums, const SharedArray<f32>& rows,
                       const SharedArray<f32>& a, std::vector<Var<f32>>* more,
                       const SharedArray<f32>* rows_b, const SharedArray<f32>* b, uint32_t cols,
                       uint32_t lanes) {
  u32 unit = unit_pos();
  for_range(0u, cols, 1u, unroll(2), [&](u32 c) {
    f32 av = a[c * lanes + unit];
    for (uint32_t j = 0; j < sums.size(); ++j)
      sums[j] = fma(Val<float>(rows[j * cols + c]), av, sums[j].get());
    if (more) {
      f32 bv = (*b)[c * lanes + unit];
      for (uint32_t j = 0; j < more->size(); ++j)
        (*more)[j] = fma(Val<float>((*rows_b)[j * cols + c]), bv, (*more)[j].get());
    }
  });
}

// Column update: acc(c, lane) = scale acc(c, lane) + sum_j rows(j, c) w[j] for every column c
// (scale 1 when not given), the weights w in registers and the rows' elements broadcast. Eight
// columns at a time (cols is a multiple of 16): eight independent chains of FMAs, enough to
// cover an FMA's latency.
void column_update(const SharedArray<f32>& acc, const SharedArray<f32>& rows,
                   const std::vector<f32>& w, const f32* scale, uint32_t cols, uint32_t lanes) {
  constexpr uint32_t kChains = 8;
  u32 unit = unit_pos();
  for_range(0u, cols, kChains, [&](u32 c0) {
    std::vector<f32> x;
    for (uint32_t i = 0; i < kChains; ++i) {
      x.push_back(acc[(c0 + i) * lanes + unit]);
      if (scale) x[i] = x[i] * *scale;
    }
    for (uint32_t j = 0; j < w.size(); ++j)
      for (uint32_t i = 0; i < kChains; ++i)
        x[i] = fma(Val<float>(rows[j * cols + c0 + i]), w[j], x[i]);
    for (uint32_t i = 0; i < kChains; ++i) acc[(c0 + i) * lanes + unit] = x[i];
  });
}

std::vector<Var<f32>> zeros(uint32_t n) {
  std::vector<Var<f32>> v;
  for (uint32_t j = 0; j < n; ++j) v.push_back(Var<f32>(0.0f));
  return v;
}

// O (and the log-sum-exp) of queries cube_pos_x() * lanes + lane of head cube_pos_y() % hq of
// batch item (or packed sequence) cube_pos_y() / hq; the parameters are attention_fwd's
// (attention.cpp), the masks the same: key j is seen by query i when j < seq_k and, per bound
// that is not negative, j <= i + seq_k - seq_q + right and j >= i + seq_k - seq_q - left.
template <class P>
void attention_fwd_cpu(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                       Tensor<const typename P::In> v, Tensor<typename P::Out> o,
                       Tensor<const f32> bias, Tensor<f32> lse, Tensor<const i32> cu_q,
                       Tensor<const i32> cu_k, f32 scale_log2, u32 hq, u32 group, i32 left,
                       i32 right, u32 bs0, u32 bs1, u32 bs2, u32 bs3, int head_dim, int lanes,
                       int keys, bool has_bias, bool has_lse, bool varlen) {
  if (!check_shape(head_dim, keys)) return;
  const auto D = static_cast<uint32_t>(head_dim), L = static_cast<uint32_t>(lanes),
             NK = static_cast<uint32_t>(keys);
  auto qt = shared_array<f32>(D * L);   // Q^T: (d, lane) at d L + lane
  auto ot = shared_array<f32>(D * L);   // the running O^T, likewise
  auto kb = shared_array<f32>(NK * D);  // the block's keys: (j, d) at j D + d
  auto vb = shared_array<f32>(NK * D);  // and values

  u32 b = cube_pos_y() / hq, h = cube_pos_y() % hq, kh = h / group;
  const auto qs = kiln::lib::detail::seq_rows(varlen, cu_q, b, q.shape(2));
  const auto ks = kiln::lib::detail::seq_rows(varlen, cu_k, b, k.shape(2));
  u32 seq_q = qs.len, seq_k = ks.len;
  u32 q0 = cube_pos_x() * L;
  // A cube past its sequence's queries has nothing to do (with variable lengths, the grid
  // covers the longest sequence).
  if_(q0 >= seq_q, [&] { return_(); });
  u32 qi = q0 + unit_pos();
  u32 qrow = qs.start + min(qi, seq_q - 1u);  // a lane past the queries reads the last one
  pack_column(qt, q, qs.item * q.stride(0) + h * q.stride(1) + qrow * q.stride(2), D, L);
  zero_column(ot, D, L);
  u32 kbase = ks.item * k.stride(0) + kh * k.stride(1) + ks.start * k.stride(2),
      vbase = ks.item * v.stride(0) + kh * v.stride(1) + ks.start * v.stride(2);

  // The keys the cube's queries may see, [lo, hi).
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  i32 first = cast<i32>(q0), last = cast<i32>(min(q0 + L, seq_q)) - 1, mine = cast<i32>(qi);
  i32 hi_i =
      select(right >= 0, min(cast<i32>(seq_k), max(last + shift + right + 1, 0)), cast<i32>(seq_k));
  i32 lo_i = select(left >= 0, max(first + shift - left, 0), 0);
  u32 hi = cast<uint32_t>(hi_i), lo = cast<uint32_t>(min(lo_i, hi_i));
  Var<f32> m = -INFINITY, l = 0.0f;  // each lane's running maximum (log2 units) and sum
  for_range(lo, hi, NK, [&](u32 key0) {
    u32 n = min(hi - key0, NK);
    sync_cube();  // every unit is done with the last block's rows
    pack_rows(kb, k, kbase, k.stride(2), key0, n, NK, D, L);
    pack_rows(vb, v, vbase, v.stride(2), key0, n, NK, D, L);
    sync_cube();  // and every unit's columns of these are in
    // S^T: a vector of each key's scores against the lanes' queries.
    std::vector<Var<f32>> s = zeros(NK);
    rows_times_column(s, kb, qt, nullptr, nullptr, nullptr, D, L);
    for (uint32_t j = 0; j < NK; ++j) s[j] = s[j].get() * scale_log2;
    if (has_bias) {
      u32 brow = b * bs0 + h * bs1 + min(qi, seq_q - 1u) * bs2;
      for (uint32_t j = 0; j < NK; ++j)
        s[j] = s[j].get() + bias[brow + min(key0 + j, seq_k - 1u) * bs3] * kLog2e;
    }
    // The masks, where some lane's bound (or the walk's end) falls inside the block.
    i32 k0 = cast<i32>(key0);
    Val<bool> whole = n == NK && seen_by(k0 + cast<i32>(NK) - 1, first, shift, -1, right) &&
                      seen_by(k0, last, shift, left, -1);
    if_(!whole, [&] {
      for (uint32_t j = 0; j < NK; ++j) {
        Val<bool> seen = j < n && seen_by(k0 + static_cast<int32_t>(j), mine, shift, left, right);
        s[j] = select(seen, s[j].get(), -INFINITY);
      }
    });
    // The online softmax, lane by lane; a lane that has seen no key yet keeps m = -inf and
    // takes its exponentials against 0 (every p and alpha 0).
    f32 top = s[0].get();
    for (uint32_t j = 1; j < NK; ++j) top = max(top, s[j].get());
    f32 m_new = max(m.get(), top);
    f32 base = select(m_new == -INFINITY, 0.0f, m_new);
    f32 alpha = exp2(m.get() - base);
    std::vector<f32> p;
    for (uint32_t j = 0; j < NK; ++j) p.push_back(exp2(s[j].get() - base));
    std::vector<f32> sums = p;
    for (size_t w = 1; w < sums.size(); w *= 2)
      for (size_t j = 0; j + w < sums.size(); j += 2 * w) sums[j] = sums[j] + sums[j + w];
    l = l.get() * alpha + sums[0];
    m = m_new;
    column_update(ot, vb, p, &alpha, D, L);  // O^T = alpha O^T + V^T P^T
  });
  // O / l (0 for a query that saw no key); the log-sum-exp ln(sum exp(score)) = (m + log2 l) ln 2.
  f32 lv = l.get(), mv = m.get();
  if_(qi < seq_q, [&] {
    if (has_lse)
      lse[qs.item * lse.stride(0) + h * lse.stride(1) + (qs.start + qi) * lse.stride(2)] =
          select(lv > 0.0f, (mv + log2(lv)) * 0.6931471805599453f, INFINITY);
    store_column(o, qs.item * o.stride(0) + h * o.stride(1) + (qs.start + qi) * o.stride(2), ot,
                 select(lv > 0.0f, 1.0f / lv, 0.0f), D, L);
  });
}
KILN_KERNEL_GENERIC(
    attention_fwd_cpu,
    "q: rank=4, k: rank=4, v: rank=4, o: rank=4, bias: rank=4, lse: rank=3, cu_q: rank=1, "
    "cu_k: rank=1, scale_log2, hq, group, left, right, bs0, bs1, bs2, bs3, "
    "head_dim = 64 in 16..256, lanes = 16 in 1..64, keys = 16 in 1..32, has_bias = false, "
    "has_lse = false, varlen = false",
    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>, InOut<f32, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe(
        "kiln::lib::attention: flash attention forward for SIMD lanes, a query per lane "
        "(CPU)");

// What the backward kernels over vectors of keys (a key per lane) share: their inputs, the
// arena's arrays (K^T, V^T and the gradients' sums of the lanes' keys; a block's rows of Q and
// dO) and the problem's scalars.
template <class In>
struct KeyVectors {
  const Tensor<const In>& q;
  const Tensor<const In>& dout;
  const Tensor<const f32>& lse;
  const Tensor<const f32>& delta;
  const Tensor<const f32>& bias;
  const SharedArray<f32>& kt;
  const SharedArray<f32>& vt;
  const SharedArray<f32>& dkt;
  const SharedArray<f32>& dvt;
  const SharedArray<f32>& qb;
  const SharedArray<f32>& db;
  const kiln::lib::detail::SeqRows& qs;
  const u32& b;
  const u32& kh;
  const u32& hq;
  const u32& group;
  const f32& scale_log2;
  const i32& left;
  const i32& right;
  const std::array<const u32*, 4> bs;
  uint32_t D, L, NQ;
  bool has_bias;
};

// For the lanes' keys j0 .. j0 + keys - 1 of a sequence of seq_k (their K^T and V^T in the
// arena): each head of the group and each block of queries that sees them, S^T and dP^T = V
// dO^T (a vector of the lanes' keys per query), P^T = exp2(S^T - lse), dS^T = P^T (dP^T -
// delta), then dV^T += dO^T P^T and dK^T += Q^T dS^T into the arena's sums; after_block(h, i0,
// n, ds) runs last in each block (the fused kernel adds dS K to dQ there). Both backward ways
// run this one walk, so their dK and dV are the same bits by construction.
template <class In, class After>
void key_vector_blocks(const KeyVectors<In>& w, const u32& j0, const u32& keys, const u32& seq_k,
                       After after_block) {
  const uint32_t D = w.D, L = w.L, NQ = w.NQ;
  const auto& qs = w.qs;
  u32 seq_q = qs.len, kj = j0 + unit_pos();
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  // The queries that see any of these keys: [lo, hi).
  i32 first = cast<i32>(j0), last = cast<i32>(j0 + keys) - 1, mine = cast<i32>(kj);
  i32 lo_i = select(w.right >= 0, max(first - shift - w.right, 0), 0);
  i32 hi_i = select(w.left >= 0, max(min(last - shift + w.left + 1, cast<i32>(seq_q)), 0),
                    cast<i32>(seq_q));
  u32 hi = cast<uint32_t>(hi_i), lo = cast<uint32_t>(min(lo_i, hi_i));
  for_range(0u, w.group, 1u, [&](u32 g) {
    u32 h = w.kh * w.group + g;
    u32 qbase = qs.item * w.q.stride(0) + h * w.q.stride(1) + qs.start * w.q.stride(2);
    u32 dbase = qs.item * w.dout.stride(0) + h * w.dout.stride(1) + qs.start * w.dout.stride(2);
    u32 lbase = qs.item * w.lse.stride(0) + h * w.lse.stride(1) + qs.start * w.lse.stride(2);
    u32 dlbase = (qs.item * w.hq + h) * w.q.shape(2) + qs.start;
    for_range(lo, hi, NQ, [&](u32 i0) {
      u32 n = min(hi - i0, NQ);
      sync_cube();  // every unit is done with the last block's rows
      pack_rows(w.qb, w.q, qbase, w.q.stride(2), i0, n, NQ, D, L);
      pack_rows(w.db, w.dout, dbase, w.dout.stride(2), i0, n, NQ, D, L);
      sync_cube();  // and every unit's columns of these are in
      std::vector<Var<f32>> s = zeros(NQ), dp = zeros(NQ);
      rows_times_column(s, w.qb, w.kt, &dp, &w.db, &w.vt, D, L);
      i32 i0s = cast<i32>(i0);
      Val<bool> whole = n == NQ && keys == L && seen_by(last, i0s, shift, -1, w.right) &&
                        seen_by(first, i0s + cast<i32>(NQ) - 1, shift, w.left, -1);
      std::vector<f32> p, ds;
      for (uint32_t i = 0; i < NQ; ++i) {
        u32 qi = min(i0 + i, seq_q - 1u);
        f32 y = s[i].get() * w.scale_log2;
        if (w.has_bias)
          y = y + w.bias[w.b * *w.bs[0] + h * *w.bs[1] + qi * *w.bs[2] +
                         min(kj, seq_k - 1u) * *w.bs[3]] *
                      kLog2e;
        Val<bool> seen =
            whole || (i < n && kj < seq_k &&
                      seen_by(mine, i0s + static_cast<int32_t>(i), shift, w.left, w.right));
        p.push_back(select(seen, exp2(y - w.lse[lbase + qi * w.lse.stride(2)] * kLog2e), 0.0f));
        ds.push_back(p.back() * (dp[i].get() - w.delta[dlbase + qi]));
      }
      after_block(h, i0, n, ds);
      column_update(w.dvt, w.db, p, nullptr, D, L);   // dV^T += dO^T P^T
      column_update(w.dkt, w.qb, ds, nullptr, D, L);  // dK^T += Q^T dS^T
    });
  });
}

// dK and dV of keys cube_pos_x() * lanes + lane of key head cube_pos_y() % hk of batch item (or
// packed sequence) cube_pos_y() / hk, over the queries of the group's heads that see them in
// blocks of `block`; parameters and masks as attention_bwd_dkdv's (attention_backward.cpp).
template <class P>
void attention_bwd_dkdv_cpu(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                            Tensor<const typename P::In> v, Tensor<const typename P::In> dout,
                            Tensor<const f32> lse, Tensor<const f32> delta, Tensor<const f32> bias,
                            Tensor<const i32> cu_q, Tensor<const i32> cu_k,
                            Tensor<typename P::Out> dk, Tensor<typename P::Out> dv, f32 scale_log2,
                            f32 scale, u32 hk, u32 group, i32 left, i32 right, u32 bs0, u32 bs1,
                            u32 bs2, u32 bs3, int head_dim, int lanes, int block, bool has_bias,
                            bool varlen) {
  if (!check_shape(head_dim, block)) return;
  const auto D = static_cast<uint32_t>(head_dim), L = static_cast<uint32_t>(lanes),
             NQ = static_cast<uint32_t>(block);
  auto kt = shared_array<f32>(D * L);   // K^T of the lanes' keys
  auto vt = shared_array<f32>(D * L);   // V^T
  auto dkt = shared_array<f32>(D * L);  // dK^T / scale
  auto dvt = shared_array<f32>(D * L);  // dV^T
  auto qb = shared_array<f32>(NQ * D);  // the block's queries: (i, d) at i D + d
  auto db = shared_array<f32>(NQ * D);  // and rows of dO

  u32 b = cube_pos_y() / hk, kh = cube_pos_y() % hk;
  const auto qs = kiln::lib::detail::seq_rows(varlen, cu_q, b, q.shape(2));
  const auto ks = kiln::lib::detail::seq_rows(varlen, cu_k, b, k.shape(2));
  u32 seq_k = ks.len;
  u32 j0 = cube_pos_x() * L;
  if_(j0 >= seq_k, [&] { return_(); });
  u32 kj = j0 + unit_pos();
  u32 krow = ks.start + min(kj, seq_k - 1u);
  pack_column(kt, k, ks.item * k.stride(0) + kh * k.stride(1) + krow * k.stride(2), D, L);
  pack_column(vt, v, ks.item * v.stride(0) + kh * v.stride(1) + krow * v.stride(2), D, L);
  zero_column(dkt, D, L);
  zero_column(dvt, D, L);
  u32 hq = hk * group;
  const KeyVectors<typename P::In> w{
      q,  dout, lse, delta,   bias, kt,    vt,         dkt,  dvt,   qb,
      db, qs,   b,   kh,      hq,   group, scale_log2, left, right, {&bs0, &bs1, &bs2, &bs3},
      D,  L,    NQ,  has_bias};
  key_vector_blocks(w, j0, min(seq_k - j0, L), seq_k,
                    [](const u32&, const u32&, const u32&, const std::vector<f32>&) {});
  if_(kj < seq_k, [&] {
    store_column(dk, ks.item * dk.stride(0) + kh * dk.stride(1) + (ks.start + kj) * dk.stride(2),
                 dkt, scale, D, L);
    store_column(dv, ks.item * dv.stride(0) + kh * dv.stride(1) + (ks.start + kj) * dv.stride(2),
                 dvt, 1.0f, D, L);
  });
}
KILN_KERNEL_GENERIC(
    attention_bwd_dkdv_cpu,
    "q: rank=4, k: rank=4, v: rank=4, dout: rank=4, lse: rank=3, delta: rank=3, bias: rank=4, "
    "cu_q: rank=1, cu_k: rank=1, dk: rank=4, dv: rank=4, scale_log2, scale, hk, group, left, "
    "right, bs0, bs1, bs2, bs3, head_dim = 64 in 16..256, lanes = 16 in 1..64, "
    "block = 8 in 1..32, has_bias = false, varlen = false",
    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>, InOut<f32, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe("kiln::lib::attention_backward: dK and dV for SIMD lanes, a key per lane (CPU)");

// dQ of queries cube_pos_x() * lanes + lane of head cube_pos_y() % hq of batch item (or packed
// sequence) cube_pos_y() / hq, over the keys they see in blocks of `block`; parameters and masks
// as attention_bwd_dq's.
template <class P>
void attention_bwd_dq_cpu(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                          Tensor<const typename P::In> v, Tensor<const typename P::In> dout,
                          Tensor<const f32> lse, Tensor<const f32> delta, Tensor<const f32> bias,
                          Tensor<const i32> cu_q, Tensor<const i32> cu_k,
                          Tensor<typename P::Out> dq, f32 scale_log2, f32 scale, u32 hq, u32 group,
                          i32 left, i32 right, u32 bs0, u32 bs1, u32 bs2, u32 bs3, int head_dim,
                          int lanes, int block, bool has_bias, bool varlen) {
  if (!check_shape(head_dim, block)) return;
  const auto D = static_cast<uint32_t>(head_dim), L = static_cast<uint32_t>(lanes),
             NK = static_cast<uint32_t>(block);
  auto qt = shared_array<f32>(D * L);   // Q^T of the lanes' queries
  auto dot = shared_array<f32>(D * L);  // dO^T
  auto dqt = shared_array<f32>(D * L);  // dQ^T / scale
  auto kb = shared_array<f32>(NK * D);  // the block's keys: (j, d) at j D + d
  auto vb = shared_array<f32>(NK * D);  // and values

  u32 b = cube_pos_y() / hq, h = cube_pos_y() % hq, kh = h / group;
  const auto qs = kiln::lib::detail::seq_rows(varlen, cu_q, b, q.shape(2));
  const auto ks = kiln::lib::detail::seq_rows(varlen, cu_k, b, k.shape(2));
  u32 seq_q = qs.len, seq_k = ks.len;
  u32 q0 = cube_pos_x() * L;
  if_(q0 >= seq_q, [&] { return_(); });
  u32 qi = q0 + unit_pos();
  u32 qrow = qs.start + min(qi, seq_q - 1u);
  pack_column(qt, q, qs.item * q.stride(0) + h * q.stride(1) + qrow * q.stride(2), D, L);
  pack_column(dot, dout, qs.item * dout.stride(0) + h * dout.stride(1) + qrow * dout.stride(2), D,
              L);
  zero_column(dqt, D, L);
  f32 lse_q = lse[qs.item * lse.stride(0) + h * lse.stride(1) + qrow * lse.stride(2)] * kLog2e;
  f32 delta_q = delta[(qs.item * hq + h) * q.shape(2) + qrow];
  u32 kbase = ks.item * k.stride(0) + kh * k.stride(1) + ks.start * k.stride(2),
      vbase = ks.item * v.stride(0) + kh * v.stride(1) + ks.start * v.stride(2);

  // The keys the cube's queries may see, [lo, hi), as attention_fwd_cpu's.
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  i32 first = cast<i32>(q0), last = cast<i32>(min(q0 + L, seq_q)) - 1, mine = cast<i32>(qi);
  i32 hi_i =
      select(right >= 0, min(cast<i32>(seq_k), max(last + shift + right + 1, 0)), cast<i32>(seq_k));
  i32 lo_i = select(left >= 0, max(first + shift - left, 0), 0);
  u32 hi = cast<uint32_t>(hi_i), lo = cast<uint32_t>(min(lo_i, hi_i));
  for_range(lo, hi, NK, [&](u32 key0) {
    u32 n = min(hi - key0, NK);
    sync_cube();  // every unit is done with the last block's rows
    pack_rows(kb, k, kbase, k.stride(2), key0, n, NK, D, L);
    pack_rows(vb, v, vbase, v.stride(2), key0, n, NK, D, L);
    sync_cube();  // and every unit's columns of these are in
    // S (log2 units) and dP = dO V^T: a vector of the lanes' queries per key.
    std::vector<Var<f32>> s = zeros(NK), dp = zeros(NK);
    rows_times_column(s, kb, qt, &dp, &vb, &dot, D, L);
    i32 k0 = cast<i32>(key0);
    Val<bool> whole = n == NK && seen_by(k0 + cast<i32>(NK) - 1, first, shift, -1, right) &&
                      seen_by(k0, last, shift, left, -1);
    std::vector<f32> ds;
    for (uint32_t j = 0; j < NK; ++j) {
      f32 y = s[j].get() * scale_log2;
      if (has_bias)
        y = y +
            bias[b * bs0 + h * bs1 + min(qi, seq_q - 1u) * bs2 + min(key0 + j, seq_k - 1u) * bs3] *
                kLog2e;
      Val<bool> seen =
          whole || (j < n && seen_by(k0 + static_cast<int32_t>(j), mine, shift, left, right));
      f32 p = select(seen, exp2(y - lse_q), 0.0f);
      ds.push_back(p * (dp[j].get() - delta_q));
    }
    column_update(dqt, kb, ds, nullptr, D, L);  // dQ^T += K^T dS^T
  });
  if_(qi < seq_q, [&] {
    store_column(dq, qs.item * dq.stride(0) + h * dq.stride(1) + (qs.start + qi) * dq.stride(2),
                 dqt, scale, D, L);
  });
}
KILN_KERNEL_GENERIC(
    attention_bwd_dq_cpu,
    "q: rank=4, k: rank=4, v: rank=4, dout: rank=4, lse: rank=3, delta: rank=3, bias: rank=4, "
    "cu_q: rank=1, cu_k: rank=1, dq: rank=4, scale_log2, scale, hq, group, left, right, bs0, "
    "bs1, bs2, bs3, head_dim = 64 in 16..256, lanes = 16 in 1..64, block = 8 in 1..32, "
    "has_bias = false, varlen = false",
    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>, InOut<f32, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe("kiln::lib::attention_backward: dQ for SIMD lanes, a query per lane (CPU)");

// dK, dV and dQ of key head cube_pos_y() % hk of batch item (or packed sequence)
// cube_pos_y() / hk and of its group's query heads, in one cube: FlashAttention-2's five
// products, with no atomics because the cube walks every key block of the head itself. For
// each vector of keys (a key per lane) and each block of `block` queries that sees them: S^T,
// dP^T, P^T, dS^T, dV^T and dK^T as attention_bwd_dkdv_cpu, and dQ += dS K for the block's
// rows, accumulated in f32 in dq_acc ([sequences, Hq, longest Sq, D], this cube's rows only) in
// the order of the keys; at the end dQ is scaled and stored in dq's type.
template <class P>
void attention_bwd_cpu(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                       Tensor<const typename P::In> v, Tensor<const typename P::In> dout,
                       Tensor<const f32> lse, Tensor<const f32> delta, Tensor<const f32> bias,
                       Tensor<const i32> cu_q, Tensor<const i32> cu_k, Tensor<typename P::Out> dq,
                       Tensor<typename P::Out> dk, Tensor<typename P::Out> dv, Tensor<f32> dq_acc,
                       f32 scale_log2, f32 scale, u32 hk, u32 group, i32 left, i32 right, u32 bs0,
                       u32 bs1, u32 bs2, u32 bs3, int head_dim, int lanes, int block, bool has_bias,
                       bool varlen) {
  if (!check_shape(head_dim, block)) return;
  const auto D = static_cast<uint32_t>(head_dim), L = static_cast<uint32_t>(lanes),
             NQ = static_cast<uint32_t>(block);
  auto kt = shared_array<f32>(D * L);    // K^T of the lanes' keys
  auto vt = shared_array<f32>(D * L);    // V^T
  auto dkt = shared_array<f32>(D * L);   // dK^T / scale
  auto dvt = shared_array<f32>(D * L);   // dV^T
  auto kr = shared_array<f32>(L * D);    // the lanes' keys as rows: (j, d) at j D + d
  auto qb = shared_array<f32>(NQ * D);   // the block's queries: (i, d) at i D + d
  auto db = shared_array<f32>(NQ * D);   // and rows of dO
  auto dsb = shared_array<f32>(NQ * L);  // dS^T of the block: (i, lane) at i L + lane

  u32 b = cube_pos_y() / hk, kh = cube_pos_y() % hk, hq = hk * group;
  const auto qs = kiln::lib::detail::seq_rows(varlen, cu_q, b, q.shape(2));
  const auto ks = kiln::lib::detail::seq_rows(varlen, cu_k, b, k.shape(2));
  u32 seq_q = qs.len, seq_k = ks.len;
  u32 unit = unit_pos(), rows_q = dq_acc.shape(2);
  auto acc_row = [&](const u32& h, const u32& i) { return ((b * hq + h) * rows_q + i) * D; };
  // dQ's sums start at 0: the group's rows, a vector of columns at a time.
  for_range(0u, group, 1u, [&](u32 g) {
    for_range(0u, seq_q, 1u, [&](u32 i) {
      u32 row = acc_row(kh * group + g, i);
      for (uint32_t c0 = 0; c0 < D; c0 += L)
        if_(c0 + unit < D, [&] { dq_acc[row + c0 + unit] = 0.0f; });
    });
  });
  const KeyVectors<typename P::In> w{
      q,  dout, lse, delta,   bias, kt,    vt,         dkt,  dvt,   qb,
      db, qs,   b,   kh,      hq,   group, scale_log2, left, right, {&bs0, &bs1, &bs2, &bs3},
      D,  L,    NQ,  has_bias};
  u32 kbase = ks.item * k.stride(0) + kh * k.stride(1) + ks.start * k.stride(2);
  for_range(0u, seq_k, L, [&](u32 j0) {
    u32 kj = j0 + unit, keys = min(seq_k - j0, L);
    u32 krow = ks.start + min(kj, seq_k - 1u);
    pack_column(kt, k, ks.item * k.stride(0) + kh * k.stride(1) + krow * k.stride(2), D, L);
    pack_column(vt, v, ks.item * v.stride(0) + kh * v.stride(1) + krow * v.stride(2), D, L);
    pack_rows(kr, k, kbase, k.stride(2), j0, keys, L, D, L);
    zero_column(dkt, D, L);
    zero_column(dvt, D, L);
    key_vector_blocks(w, j0, keys, seq_k,
                      [&](const u32& h, const u32& i0, const u32& n, const std::vector<f32>& ds) {
                        for (uint32_t i = 0; i < NQ; ++i) dsb[i * L + unit] = ds[i];
                        sync_cube();  // dS^T's vectors, read by every unit
                        // dQ's rows of the block += dS K: a vector of columns at a time, the
                        // keys' rows in registers and dS's elements broadcast.
                        for (uint32_t c0 = 0; c0 < D; c0 += L) {
                          u32 c = c0 + unit;
                          std::vector<f32> krows;
                          for (uint32_t j = 0; j < L; ++j)
                            krows.push_back(kr[j * D + min(c, D - 1u)]);
                          for_range(0u, n, 1u, [&](u32 i) {
                            u32 at = acc_row(h, i0 + i) + c;
                            if_(c < D, [&] {
                              f32 x = dq_acc[at];
                              for (uint32_t j = 0; j < L; ++j)
                                x = fma(Val<float>(dsb[i * L + j]), krows[j], x);
                              dq_acc[at] = x;
                            });
                          });
                        }
                      });
    if_(kj < seq_k, [&] {
      store_column(dk, ks.item * dk.stride(0) + kh * dk.stride(1) + (ks.start + kj) * dk.stride(2),
                   dkt, scale, D, L);
      store_column(dv, ks.item * dv.stride(0) + kh * dv.stride(1) + (ks.start + kj) * dv.stride(2),
                   dvt, 1.0f, D, L);
    });
  });
  // dQ = scale dS K, in dq's type.
  for_range(0u, group, 1u, [&](u32 g) {
    u32 h = kh * group + g;
    for_range(0u, seq_q, 1u, [&](u32 i) {
      u32 row = acc_row(h, i);
      u32 out = qs.item * dq.stride(0) + h * dq.stride(1) + (qs.start + i) * dq.stride(2);
      for (uint32_t c0 = 0; c0 < D; c0 += L)
        if_(c0 + unit < D, [&] {
          dq[out + c0 + unit] =
              cast<host_of_t<typename P::Out>>(Val<float>(dq_acc[row + c0 + unit]) * scale);
        });
    });
  });
}
KILN_KERNEL_GENERIC(
    attention_bwd_cpu,
    "q: rank=4, k: rank=4, v: rank=4, dout: rank=4, lse: rank=3, delta: rank=3, bias: rank=4, "
    "cu_q: rank=1, cu_k: rank=1, dq: rank=4, dk: rank=4, dv: rank=4, dq_acc: rank=4, "
    "scale_log2, scale, hk, group, left, right, bs0, bs1, bs2, bs3, head_dim = 64 in 16..256, "
    "lanes = 16 in 1..64, block = 8 in 1..32, has_bias = false, varlen = false",
    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>, InOut<f32, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe(
        "kiln::lib::attention_backward: dK, dV and dQ of a key head in one cube, five "
        "products and no atomics (CPU)");

}  // namespace
