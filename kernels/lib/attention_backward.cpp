// The kernels of kiln::lib::attention_backward (attention.h; the host side is in attention.cpp):
// FlashAttention-2's backward on matrix fragments, split in two walks so that no gradient is
// accumulated with atomics (deterministic, and the same sums on every device):
//
//   attention_bwd_delta  delta_i = sum_c dO_ic O_ic                 (one unit per query row)
//   attention_bwd_dkdv   per plane, 16 keys of one key head; over the queries that see them,
//                        in blocks of 32 (and over the query heads that share the key head):
//                          S^T = K Q^T, P^T = exp(S^T - lse) (masked), dV += P^T dO,
//                          dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q
//   attention_bwd_dq     per plane, 16 queries; over the keys they see, in blocks of 32:
//                          S = Q K^T, P = exp(S - lse), dP = dO V^T, dS = P (dP - delta),
//                          dQ += dS K
//
// Computing S^T (keys as rows) rather than S makes P^T and dS^T accumulators whose rows are the
// keys dK and dV accumulate over: both go into the next multiply as A fragments in registers
// (frag.cast), with no transposition through memory. The probabilities are recomputed from the
// forward's log-sum-exp (in the accumulators, as P rounded to the inputs' type, like the
// forward's P V, and dS rounded likewise before its multiplies).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/dsl/fragment_elements.h"
#include "kernels/lib/attention_seqs.h"
#include "kernels/lib/common.h"

using namespace kiln::dsl;
using kiln::lib::detail::InOut;
using kiln::lib::detail::seen_by;

namespace {

constexpr float kLog2e = 1.4426950408889634f;

bool check_head_dim(int head_dim, int split) {
  if (head_dim % 32 != 0 || head_dim > 256) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("head_dim = {}: a multiple of 32 up to 256 (gradients are kept in "
                    "accumulators of 32 columns)",
                    head_dim));
    return false;
  }
  if (split < 1 || split > 8 || head_dim % (32 * split) != 0) {
    TraceContext::current().fail(SrcLoc::current(),
                                 fmt::format("split = {} with head_dim = {}: 1 to 8, and head_dim "
                                             "a multiple of 32 split",
                                             split, head_dim));
    return false;
  }
  return true;
}

// The unit's columns of a 16 x n accumulator: n / 4, indexed by column slot
// (e / 4 % (n / 8)) * 2 + (e & 1) of element e.
int col_slot(int e, int n) {
  return e / 4 % (n / 8) * 2 + (e & 1);
}

// delta[b, h, i] = sum_c dout[b, h, i, c] out[b, h, i, c], in f32.
template <class P>
void attention_bwd_delta(Tensor<const typename P::Out> o, Tensor<const typename P::In> dout,
                         Tensor<f32> delta, u32 hq) {
  u32 seq_q = o.shape(2), d = o.shape(3);
  u32 i = cube_pos_x() * cube_dim() + unit_pos();
  if_(i >= seq_q, [&] { return_(); });
  u32 b = cube_pos_y() / hq, h = cube_pos_y() % hq;
  u32 ob = b * o.stride(0) + h * o.stride(1) + i * o.stride(2);
  u32 db = b * dout.stride(0) + h * dout.stride(1) + i * dout.stride(2);
  Var<f32> acc = 0.0f;
  for_range(0u, d, 1u, [&](u32 c) {
    acc = acc.get() + cast<f32>(dout[db + c]) * kiln::lib::detail::convert<f32>(o[ob + c]);
  });
  delta[(b * hq + h) * seq_q + i] = acc.get();
}
KILN_KERNEL_GENERIC(attention_bwd_delta, "o: rank=4, dout: rank=4, delta: rank=3, hq",
                    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>,
                    InOut<f32, f32>)
    .cube_dim(128)
    .describe("kiln::lib::attention_backward: each query row's sum of dO O");

// dK and dV of 16 * planes keys of key head cube_pos_y() % hk of batch item cube_pos_y() / hk,
// columns cube_pos_z() * head_dim / split onwards. Masks as attention_fwd's: key j is seen by
// query i when j <= i + seq_k - seq_q + right and j >= i + seq_k - seq_q - left (per bound that
// is not negative).
template <class P>
void attention_bwd_dkdv(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                        Tensor<const typename P::In> v, Tensor<const typename P::In> dout,
                        Tensor<const f32> lse, Tensor<const f32> delta, Tensor<const f32> bias,
                        Tensor<const i32> cu_q, Tensor<const i32> cu_k, Tensor<typename P::Out> dk,
                        Tensor<typename P::Out> dv, f32 scale_log2, f32 scale, u32 hk, u32 group,
                        i32 left, i32 right, u32 bs0, u32 bs1, u32 bs2, u32 bs3, int head_dim,
                        int planes, int split, int qblock, bool keep, bool has_bias, bool varlen) {
  using In = typename P::In;
  using Out = host_of_t<typename P::Out>;
  if (!check_head_dim(head_dim, split)) return;
  if (qblock != 16 && qblock != 32) {
    TraceContext::current().fail(SrcLoc::current(),
                                 fmt::format("qblock = {}: 16 or 32 queries per block", qblock));
    return;
  }
  const auto nb = static_cast<uint32_t>(qblock);
  const int dc = head_dim / 32 / split;
  u32 c_off = cube_pos_z() * static_cast<uint32_t>(32 * dc);
  const bool res = keep;
  const int chunks = head_dim / 16;
  std::vector<Fragment<In>> kf, vf;
  for (int i = 0; i < (res ? chunks : 1); ++i) {
    kf.push_back(matrix_a<In>(16, qblock, 16));
    vf.push_back(matrix_a<In>(16, qblock, 16));
  }
  auto qt = matrix_b<In>(16, qblock, 16);   // Q^T: 16 columns of a block of queries
  auto dot = matrix_b<In>(16, qblock, 16);  // dO^T likewise
  auto st = accumulator<f32>(16, qblock, 16);
  auto dpt = accumulator<f32>(16, qblock, 16);
  auto pa = matrix_a<In>(16, 32, qblock);    // P^T, then dS^T, as the A operand
  auto rows = matrix_b<In>(16, 32, qblock);  // a block's rows of dO, then of Q
  std::vector<Fragment<f32>> dkf, dvf;
  for (int i = 0; i < dc; ++i) {
    dkf.push_back(accumulator<f32>(16, 32, qblock));
    dvf.push_back(accumulator<f32>(16, 32, qblock));
  }
  Fragment<typename P::Out> out;
  if constexpr (!std::is_same_v<Out, float>) out = accumulator<typename P::Out>(16, 32, qblock);

  u32 b = cube_pos_y() / hk, kh = cube_pos_y() % hk;
  const auto qs = kiln::lib::detail::seq_rows(varlen, cu_q, b, q.shape(2));
  const auto ks = kiln::lib::detail::seq_rows(varlen, cu_k, b, k.shape(2));
  u32 seq_q = qs.len, seq_k = ks.len;
  u32 j0 = (cube_pos_x() * static_cast<uint32_t>(planes) + plane_pos()) * 16u;
  u32 keys = select(j0 < seq_k, seq_k - j0, 0u);
  u32 jfirst = ks.start + select(j0 < seq_k, j0, 0u);
  u32 krow = k.stride(2), vrow = v.stride(2), qrow = q.stride(2), drow = dout.stride(2);
  u32 kbase = ks.item * k.stride(0) + kh * k.stride(1) + jfirst * krow;
  u32 vbase = ks.item * v.stride(0) + kh * v.stride(1) + jfirst * vrow;
  auto load_k = [&](int i, const Fragment<In>& f) {
    load(f, k, kbase + static_cast<uint32_t>(16 * i), krow, keys, 16u);
  };
  auto load_v = [&](int i, const Fragment<In>& f) {
    load(f, v, vbase + static_cast<uint32_t>(16 * i), vrow, keys, 16u);
  };
  if (res)
    for (int i = 0; i < chunks; ++i) {
      load_k(i, kf[size_t(i)]);
      load_v(i, vf[size_t(i)]);
    }
  for (auto& f : dkf) fill(f, 0.0f);
  for (auto& f : dvf) fill(f, 0.0f);

  // The queries that see any of this plane's keys: [lo, hi) (none past the last key).
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  i32 jf0 = cast<i32>(j0);
  i32 lo_i = select(right >= 0, max(jf0 - shift - right, 0), 0);
  i32 hi_i = select(left >= 0, min(jf0 + 16 - shift + left, cast<i32>(seq_q)), cast<i32>(seq_q));
  hi_i = select(j0 < seq_k, max(hi_i, 0), 0);
  u32 hi = cast<uint32_t>(hi_i), lo = cast<uint32_t>(min(lo_i, hi_i));
  // This unit's qblock / 4 columns of S^T (queries), by column slot.
  const int slots = qblock / 4;
  std::vector<u32> cols;
  for (int cs = 0; cs < slots; ++cs) cols.push_back(element_col(st, cs / 2 * 4 + cs % 2));
  for_range(0u, group, 1u, [&](u32 g) {
    u32 h = kh * group + g;
    u32 qbase = qs.item * q.stride(0) + h * q.stride(1) + qs.start * qrow;
    u32 dbase = qs.item * dout.stride(0) + h * dout.stride(1) + qs.start * drow;
    u32 lbase = qs.item * lse.stride(0) + h * lse.stride(1) + qs.start * lse.stride(2);
    u32 dlbase = (qs.item * hk * group + h) * q.shape(2) + qs.start;
    for_range(lo, hi, nb, [&](u32 i0) {
      u32 n = min(hi - i0, nb);
      fill(st, 0.0f);
      for (int i = 0; i < chunks; ++i) {
        const size_t ki = res ? size_t(i) : 0;
        if (!res) load_k(i, kf[ki]);
        load(qt, q, qbase + i0 * qrow + static_cast<uint32_t>(16 * i), qrow, 16u, n, Layout::Col);
        mma(st, kf[ki], qt);
      }
      // Each column's log-sum-exp (log2 units) and delta.
      std::vector<f32> lse_c, delta_c;
      for (int cs = 0; cs < slots; ++cs) {
        u32 qi = min(i0 + cols[size_t(cs)], seq_q - 1u);
        lse_c.push_back(lse[lbase + qi * lse.stride(2)] * kLog2e);
        delta_c.push_back(f32(delta[dlbase + qi]));
      }
      for (int e = 0; e < element_count(st); ++e) {
        u32 r = element_row(st, e), c = cols[size_t(col_slot(e, qblock))];
        i32 kj = jf0 + cast<i32>(r), qi = cast<i32>(i0 + c);
        Val<bool> seen = seen_by(c < n && r < keys, kj, qi, shift, left, right);
        f32 y = element(st, e) * scale_log2;
        if (has_bias) {
          u32 bi =
              b * bs0 + h * bs1 + min(i0 + c, seq_q - 1u) * bs2 + min(j0 + r, seq_k - 1u) * bs3;
          y = y + bias[bi] * kLog2e;
        }
        set_element(st, e, select(seen, exp2(y - lse_c[size_t(col_slot(e, qblock))]), 0.0f));
      }
      convert(pa, st);
      for (int i = 0; i < dc; ++i) {
        load(rows, dout, dbase + i0 * drow + c_off + static_cast<uint32_t>(32 * i), drow, n, 32u);
        mma(dvf[size_t(i)], pa, rows);
      }
      fill(dpt, 0.0f);
      for (int i = 0; i < chunks; ++i) {
        const size_t vi = res ? size_t(i) : 0;
        if (!res) load_v(i, vf[vi]);
        load(dot, dout, dbase + i0 * drow + static_cast<uint32_t>(16 * i), drow, 16u, n,
             Layout::Col);
        mma(dpt, vf[vi], dot);
      }
      for (int e = 0; e < element_count(dpt); ++e)
        set_element(dpt, e,
                    element(st, e) * (element(dpt, e) - delta_c[size_t(col_slot(e, qblock))]));
      convert(pa, dpt);
      for (int i = 0; i < dc; ++i) {
        load(rows, q, qbase + i0 * qrow + c_off + static_cast<uint32_t>(32 * i), qrow, n, 32u);
        mma(dkf[size_t(i)], pa, rows);
      }
    });
  });
  u32 kout = ks.item * dk.stride(0) + kh * dk.stride(1) + jfirst * dk.stride(2);
  u32 vout = ks.item * dv.stride(0) + kh * dv.stride(1) + jfirst * dv.stride(2);
  for (int i = 0; i < dc; ++i) {
    apply(dkf[size_t(i)], [&](f32 x) { return x * scale; });
    const uint32_t col = static_cast<uint32_t>(32 * i);
    if constexpr (std::is_same_v<Out, float>) {
      store(dk, kout + c_off + col, dk.stride(2), keys, 32u, dkf[size_t(i)]);
      store(dv, vout + c_off + col, dv.stride(2), keys, 32u, dvf[size_t(i)]);
    } else {
      convert(out, dkf[size_t(i)]);
      store(dk, kout + c_off + col, dk.stride(2), keys, 32u, out);
      convert(out, dvf[size_t(i)]);
      store(dv, vout + c_off + col, dv.stride(2), keys, 32u, out);
    }
  }
}
KILN_KERNEL_GENERIC(
    attention_bwd_dkdv,
    "q: rank=4, k: rank=4, v: rank=4, dout: rank=4, lse: rank=3, delta: rank=3, bias: rank=4, "
    "cu_q: rank=1, cu_k: rank=1, dk: rank=4, dv: rank=4, scale_log2, scale, hk, group, left, "
    "right, bs0, bs1, bs2, bs3, head_dim = 64 in 32..256, planes = 4 in 1..8, "
    "split = 1 in 1..8, qblock = 32 in 16..32, keep = true, has_bias = false, varlen = false",
    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("planes")), 1, 1};
    })
    .describe("kiln::lib::attention_backward: dK and dV, P^T and dS^T recomputed per key block");

// dQ of 16 * planes queries of head cube_pos_y() % hq of batch item cube_pos_y() / hq, columns
// cube_pos_z() * head_dim / split onwards.
template <class P>
void attention_bwd_dq(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                      Tensor<const typename P::In> v, Tensor<const typename P::In> dout,
                      Tensor<const f32> lse, Tensor<const f32> delta, Tensor<const f32> bias,
                      Tensor<const i32> cu_q, Tensor<const i32> cu_k, Tensor<typename P::Out> dq,
                      f32 scale_log2, f32 scale, u32 hq, u32 group, i32 left, i32 right, u32 bs0,
                      u32 bs1, u32 bs2, u32 bs3, int head_dim, int planes, int split, bool keep,
                      bool has_bias, bool varlen) {
  using In = typename P::In;
  using Out = host_of_t<typename P::Out>;
  if (!check_head_dim(head_dim, split)) return;
  const int dc = head_dim / 32 / split;
  u32 c_off = cube_pos_z() * static_cast<uint32_t>(32 * dc);
  const bool res = keep;
  const int chunks = head_dim / 16;
  std::vector<Fragment<In>> qf, df;
  for (int i = 0; i < (res ? chunks : 1); ++i) {
    qf.push_back(matrix_a<In>(16, 32, 16));
    df.push_back(matrix_a<In>(16, 32, 16));
  }
  auto kt = matrix_b<In>(16, 32, 16);  // K^T (V^T): 16 columns of 32 keys
  auto s = accumulator<f32>(16, 32, 16);
  auto dp = accumulator<f32>(16, 32, 16);
  auto pa = matrix_a<In>(16, 32, 32);
  auto kr = matrix_b<In>(16, 32, 32);  // 32 rows of K
  std::vector<Fragment<f32>> dqf;
  for (int i = 0; i < dc; ++i) dqf.push_back(accumulator<f32>(16, 32, 32));
  Fragment<typename P::Out> out;
  if constexpr (!std::is_same_v<Out, float>) out = accumulator<typename P::Out>(16, 32, 32);

  u32 b = cube_pos_y() / hq, h = cube_pos_y() % hq, kh = h / group;
  const auto qs = kiln::lib::detail::seq_rows(varlen, cu_q, b, q.shape(2));
  const auto ks = kiln::lib::detail::seq_rows(varlen, cu_k, b, k.shape(2));
  u32 seq_q = qs.len, seq_k = ks.len;
  u32 q0 = (cube_pos_x() * static_cast<uint32_t>(planes) + plane_pos()) * 16u;
  u32 rows = select(q0 < seq_q, seq_q - q0, 0u);
  u32 qfirst = qs.start + select(q0 < seq_q, q0, 0u);
  u32 qrow = q.stride(2), drow = dout.stride(2), krow = k.stride(2), vrow = v.stride(2);
  u32 qbase = qs.item * q.stride(0) + h * q.stride(1) + qfirst * qrow;
  u32 dbase = qs.item * dout.stride(0) + h * dout.stride(1) + qfirst * drow;
  u32 kbase = ks.item * k.stride(0) + kh * k.stride(1) + ks.start * krow,
      vbase = ks.item * v.stride(0) + kh * v.stride(1) + ks.start * vrow;
  auto load_q = [&](int i, const Fragment<In>& f) {
    load(f, q, qbase + static_cast<uint32_t>(16 * i), qrow, rows, 16u);
  };
  auto load_do = [&](int i, const Fragment<In>& f) {
    load(f, dout, dbase + static_cast<uint32_t>(16 * i), drow, rows, 16u);
  };
  if (res)
    for (int i = 0; i < chunks; ++i) {
      load_q(i, qf[size_t(i)]);
      load_do(i, df[size_t(i)]);
    }
  for (auto& f : dqf) fill(f, 0.0f);
  // Each of the unit's rows' log-sum-exp (log2 units) and delta.
  std::vector<f32> lse_r, delta_r;
  for (int r = 0; r < row_count(s); ++r) {
    u32 qi = qs.start + min(q0 + slot_row(s, r), max(seq_q, 1u) - 1u);
    lse_r.push_back(lse[qs.item * lse.stride(0) + h * lse.stride(1) + qi * lse.stride(2)] * kLog2e);
    delta_r.push_back(f32(delta[(qs.item * hq + h) * q.shape(2) + qi]));
  }

  // The keys this plane's queries may see: [lo, hi), as attention_fwd's.
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  i32 qf0 = cast<i32>(q0);
  i32 hi_i =
      select(right >= 0, min(cast<i32>(seq_k), max(qf0 + 16 + shift + right, 0)), cast<i32>(seq_k));
  hi_i = select(q0 < seq_q, hi_i, 0);
  i32 lo_i = select(left >= 0, max(qf0 + shift - left, 0), 0);
  u32 hi = cast<uint32_t>(hi_i), lo = cast<uint32_t>(min(lo_i, hi_i));
  for_range(lo, hi, 32u, [&](u32 key0) {
    u32 n = min(hi - key0, 32u);
    fill(s, 0.0f);
    fill(dp, 0.0f);
    for (int i = 0; i < chunks; ++i) {
      const size_t qi = res ? size_t(i) : 0;
      if (!res) {
        load_q(i, qf[qi]);
        load_do(i, df[qi]);
      }
      load(kt, k, kbase + key0 * krow + static_cast<uint32_t>(16 * i), krow, 16u, n, Layout::Col);
      mma(s, qf[qi], kt);
      load(kt, v, vbase + key0 * vrow + static_cast<uint32_t>(16 * i), vrow, 16u, n, Layout::Col);
      mma(dp, df[qi], kt);
    }
    for (int e = 0; e < element_count(s); ++e) {
      const int slot = row_slot(s, e);
      u32 r = element_row(s, e), c = element_col(s, e);
      i32 qi = qf0 + cast<i32>(r), kj = cast<i32>(key0 + c);
      Val<bool> seen = seen_by(c < n, kj, qi, shift, left, right);
      f32 y = element(s, e) * scale_log2;
      if (has_bias) {
        u32 bi =
            b * bs0 + h * bs1 + min(q0 + r, seq_q - 1u) * bs2 + min(key0 + c, seq_k - 1u) * bs3;
        y = y + bias[bi] * kLog2e;
      }
      f32 p = select(seen, exp2(y - lse_r[size_t(slot)]), 0.0f);
      set_element(dp, e, p * (element(dp, e) - delta_r[size_t(slot)]));
    }
    convert(pa, dp);
    for (int i = 0; i < dc; ++i) {
      load(kr, k, kbase + key0 * krow + c_off + static_cast<uint32_t>(32 * i), krow, n, 32u);
      mma(dqf[size_t(i)], pa, kr);
    }
  });
  u32 obase = qs.item * dq.stride(0) + h * dq.stride(1) + qfirst * dq.stride(2);
  for (int i = 0; i < dc; ++i) {
    apply(dqf[size_t(i)], [&](f32 x) { return x * scale; });
    const uint32_t col = static_cast<uint32_t>(32 * i);
    if constexpr (std::is_same_v<Out, float>) {
      store(dq, obase + c_off + col, dq.stride(2), rows, 32u, dqf[size_t(i)]);
    } else {
      convert(out, dqf[size_t(i)]);
      store(dq, obase + c_off + col, dq.stride(2), rows, 32u, out);
    }
  }
}
KILN_KERNEL_GENERIC(
    attention_bwd_dq,
    "q: rank=4, k: rank=4, v: rank=4, dout: rank=4, lse: rank=3, delta: rank=3, bias: rank=4, "
    "cu_q: rank=1, cu_k: rank=1, dq: rank=4, scale_log2, scale, hq, group, left, right, bs0, "
    "bs1, bs2, bs3, head_dim = 64 in 32..256, planes = 4 in 1..8, split = 1 in 1..8, "
    "keep = true, has_bias = false, varlen = false",
    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("planes")), 1, 1};
    })
    .describe("kiln::lib::attention_backward: dQ, P and dS recomputed per key block");

}  // namespace
