// The decode path of kiln::lib::attention (attention.h; the host side, which chooses it, is in
// attention.cpp): a few queries against a long key/value cache, what serving spends its time
// on. The forward kernel gives each plane 16 queries of one head, so one query would leave 15
// of its 16 rows idle and the whole walk over the cache to one plane. Here (FlashDecoding's
// scheme) a plane's 16 rows are the queries of every head that shares a key/value head
// (grouped-query attention: Hq / Hk heads x Sq queries, at most 16), and the cache is split into
// parts walked by separate planes and cubes, each leaving its unnormalized output and its rows'
// running maximum and sum; a second kernel combines the parts.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/dsl/online_softmax.h"
#include "kernels/lib/attention_seqs.h"
#include "kernels/lib/common.h"

using namespace kiln::dsl;
using kiln::lib::detail::InOut;
using kiln::lib::detail::seen_by;

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// Part cube_pos_x() * planes + plane_pos() (keys [part * chunk, (part + 1) * chunk)) of key head
// cube_pos_y() % hk of item cube_pos_y() / hk, for the group's rows: row r is query r % seq_q of
// head kh * group + r / seq_q, at q + r * qrs from the group's first (the host passes q's head
// stride when seq_q is 1, else its row stride, with heads a whole sequence apart). Writes the
// part's O (not divided by the sum; columns cube_pos_z() * head_dim / o_split onwards) to
// part_o[bh, part] and each row's maximum (log2 units) and sum to part_ml[bh, part, row] and
// [bh, part, 16 + row].
template <class P>
void attention_decode(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                      Tensor<const typename P::In> v, Tensor<const f32> bias, Tensor<f32> part_o,
                      Tensor<f32> part_ml, f32 scale_log2, u32 hk, u32 group, u32 qrs, i32 left,
                      i32 right, u32 chunk, u32 bs0, u32 bs1, u32 bs2, u32 bs3, int head_dim,
                      int planes, int o_split, bool has_bias) {
  using In = typename P::In;
  if (head_dim % 32 != 0 || head_dim > 256 || (o_split != 1 && o_split != 2 && o_split != 4) ||
      head_dim % (32 * o_split) != 0) {
    TraceContext::current().fail(
        SrcLoc::current(), fmt::format("head_dim = {}, o_split = {}: head_dim a multiple of 32 "
                                       "o_split up to 256, o_split 1, 2 or 4",
                                       head_dim, o_split));
    return;
  }
  const int dc = head_dim / 32 / o_split;
  u32 c_off = cube_pos_z() * static_cast<uint32_t>(32 * dc);
  // Q stays in registers on the CPU (the arena), up to head size 64, and always on sm_100a and
  // sm_120a, whose ptxas spills hundreds of bytes when it is loaded again inside the walk (at
  // 256, 12 bytes remain on sm_100a: recorded in the compile test).
  const bool newer = target_name().find("sm_100") != std::string::npos ||
                     target_name().find("sm_120") != std::string::npos;
  const bool q_resident = target_name().rfind("cpu", 0) == 0 || head_dim <= 64 || newer;
  std::vector<Fragment<In>> qf;
  for (int i = 0; i < (q_resident ? head_dim / 16 : 1); ++i) qf.push_back(matrix_a<In>(16, 32, 16));
  auto kf = matrix_b<In>(16, 32, 16);
  auto s = accumulator<f32>(16, 32, 16);
  auto p = matrix_a<In>(16, 32, 32);
  auto vf = matrix_b<In>(16, 32, 32);
  std::vector<Fragment<f32>> of;
  for (int i = 0; i < dc; ++i) of.push_back(accumulator<f32>(16, 32, 32));

  u32 seq_q = q.shape(2), seq_k = k.shape(2);
  u32 b = cube_pos_y() / hk, kh = cube_pos_y() % hk;
  u32 rows = group * seq_q;  // at most 16 (the host's condition)
  u32 part = cube_pos_x() * static_cast<uint32_t>(planes) + plane_pos();
  u32 parts = part_o.shape(1);
  u32 qbase = b * q.stride(0) + kh * group * q.stride(1);
  u32 krow = k.stride(2), vrow = v.stride(2);
  u32 kbase = b * k.stride(0) + kh * k.stride(1), vbase = b * v.stride(0) + kh * v.stride(1);
  auto load_q = [&](int i, const Fragment<In>& f) {
    load(f, q, qbase + static_cast<uint32_t>(16 * i), qrs, rows, 16u);
  };
  if (q_resident)
    for (int i = 0; i < head_dim / 16; ++i) load_q(i, qf[size_t(i)]);
  for (auto& f : of) fill(f, 0.0f);

  // The part's keys, within those some row may see: the first query's window starts first and
  // the last query's ends last.
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  i32 end = min(cast<i32>(min((part + 1u) * chunk, seq_k)),
                select(right >= 0, max(cast<i32>(seq_q) + shift + right, 0), cast<i32>(seq_k)));
  i32 start = max(cast<i32>(min(part * chunk, seq_k)), select(left >= 0, max(shift - left, 0), 0));
  end = select(part < parts, end, 0);
  u32 hi = cast<uint32_t>(max(end, 0)), lo = cast<uint32_t>(min(start, max(end, 0)));
  OnlineSoftmax st = online_softmax(s);
  for_range(lo, hi, 32u, [&](u32 key0) {
    u32 keys = min(hi - key0, 32u);
    fill(s, 0.0f);
    for (int i = 0; i < head_dim / 16; ++i) {
      const size_t qi = q_resident ? size_t(i) : 0;
      if (!q_resident) load_q(i, qf[qi]);
      load(kf, k, kbase + key0 * krow + static_cast<uint32_t>(16 * i), krow, 16u, keys,
           Layout::Col);
      mma(s, qf[qi], kf);
    }
    apply(s, [&](f32 x, u32 r, u32 c) {
      u32 i = r % seq_q;
      i32 qi = cast<i32>(i), kj = cast<i32>(key0 + c);
      Val<bool> seen = seen_by(c < keys && r < rows, kj, qi, shift, left, right);
      f32 y = x * scale_log2;
      if (has_bias) {
        u32 h = kh * group + min(r, rows - 1u) / seq_q;
        u32 bi = b * bs0 + h * bs1 + i * bs2 + min(key0 + c, seq_k - 1u) * bs3;
        y = y + bias[bi] * kLog2e;
      }
      return select(seen, y, -INFINITY);
    });
    auto alpha = online_softmax_step(s, st);
    convert(p, s);
    for (int i = 0; i < dc; ++i) {
      scale_rows(of[size_t(i)], alpha);
      load(vf, v, vbase + key0 * vrow + c_off + static_cast<uint32_t>(32 * i), vrow, keys, 32u);
      mma(of[size_t(i)], p, vf);
    }
  });
  u32 slot = cube_pos_y() * parts + min(part, parts - 1u);
  Val<bool> mine = part < parts;
  for (int r = 0; r < row_count(s); ++r) {
    u32 row = slot_row(s, r);
    if_(mine && plane_lane() % 4u == 0u && cube_pos_z() == 0u, [&] {
      part_ml[slot * 32u + row] = st.max[size_t(r)].get();
      part_ml[slot * 32u + 16u + row] = st.sum[size_t(r)].get();
    });
  }
  // Every part stores its 16 rows (the combine reads only the group's); a cube's planes past
  // the last part store nothing.
  u32 obase = slot * 16u * part_o.stride(2);
  for (int i = 0; i < dc; ++i)
    store(part_o, obase + c_off + static_cast<uint32_t>(32 * i), part_o.stride(2),
          select(mine, u32(16u), u32(0u)), 32u, of[size_t(i)]);
}
KILN_KERNEL_GENERIC(
    attention_decode,
    "q: rank=4, k: rank=4, v: rank=4, bias: rank=4, part_o: rank=4, part_ml: rank=3, "
    "scale_log2, hk, group, qrs, left, right, chunk, bs0, bs1, bs2, bs3, "
    "head_dim = 64 in 32..256, planes = 4 in 1..8, o_split = 1 in 1..4, has_bias = false",
    InOut<f16, f32>, InOut<bf16, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("planes")), 1, 1};
    })
    .describe("kiln::lib::attention's decode path: one part of the key/value cache for a group");

// The CPU's decode kernel: part cube_pos_x() (keys [part * chunk, (part + 1) * chunk)) of key
// head cube_pos_y() % hk of item cube_pos_y() / hk, for the group's `rows` query rows (row r is
// query r % seq_q of head kh * group + r / seq_q, at q + r * qrs from the group's first, as in
// attention_decode). The fragment kernel above, run on the CPU, fills `rows` of a tile's 16 and
// spends its time on the tile's element work; here a cube is one vector of `lanes` units and
// every key is read once, in contiguous vectors, for all the rows. Per block of `lanes` keys:
//
// - the lanes take columns: for each key j and row r, a vector of partial dot products over
//   the head's column groups (one vector load of K's row per group, shared by every row, and
//   FMAs with Q's rows from the arena), left in the arena at (r, j, lane);
// - the lanes take keys: each key's partials are summed (as values every lane computes alike,
//   scalar loads of the arena, then each lane picks its key's), scaled and masked, and the
//   online softmax runs with one block maximum per row across the lanes; each lane keeps its
//   own part of the row's sum, and the block's probabilities go to the arena;
// - the lanes take columns again: O's rows (in the arena) are rescaled and take the block's
//   values, V's rows read as contiguous vectors against the probabilities broadcast.
//
// Writes what attention_decode writes (the part's unnormalized O rows and each row's maximum
// and sum), so attention_decode_combine finishes both.
template <class P>
void attention_decode_cpu(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                          Tensor<const typename P::In> v, Tensor<const f32> bias,
                          Tensor<f32> part_o, Tensor<f32> part_ml, f32 scale_log2, u32 hk,
                          u32 group, u32 qrs, i32 left, i32 right, u32 chunk, u32 bs0, u32 bs1,
                          u32 bs2, u32 bs3, int head_dim, int lanes, int rows, bool has_bias) {
  if (lanes < 1 || head_dim % lanes != 0 || head_dim > 256 || rows < 1 || rows > 16) {
    TraceContext::current().fail(SrcLoc::current(),
                                 fmt::format("head_dim = {}, lanes = {}, rows = {}: head_dim a "
                                             "multiple of lanes up to 256, 1 to 16 rows",
                                             head_dim, lanes, rows));
    return;
  }
  const auto D = static_cast<uint32_t>(head_dim), L = static_cast<uint32_t>(lanes),
             R = static_cast<uint32_t>(rows), G = D / L;
  auto qa = shared_array<f32>(R * D);      // the rows of Q: (r, d) at r D + d
  auto oa = shared_array<f32>(R * D);      // the running O, likewise
  auto ta = shared_array<f32>(R * L * L);  // partial scores: (r, key, lane) at (r L + key) L + lane
  auto pa = shared_array<f32>(R * L);      // the block's probabilities: (r, key) at r L + key

  u32 seq_q = q.shape(2), seq_k = k.shape(2);
  u32 b = cube_pos_y() / hk, kh = cube_pos_y() % hk;
  u32 part = cube_pos_x(), parts = part_o.shape(1);
  u32 unit = unit_pos();
  u32 qbase = b * q.stride(0) + kh * group * q.stride(1);
  u32 krow = k.stride(2), vrow = v.stride(2);
  u32 kbase = b * k.stride(0) + kh * k.stride(1), vbase = b * v.stride(0) + kh * v.stride(1);
  for (uint32_t r = 0; r < R; ++r)
    for (uint32_t g = 0; g < G; ++g) {
      qa[r * D + g * L + unit] = cast<float>(q[qbase + r * qrs + g * L + unit]);
      oa[r * D + g * L + unit] = 0.0f;
    }

  // The part's keys, within those some row may see (attention_decode's bounds).
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  i32 end = min(cast<i32>(min((part + 1u) * chunk, seq_k)),
                select(right >= 0, max(cast<i32>(seq_q) + shift + right, 0), cast<i32>(seq_k)));
  i32 start = max(cast<i32>(min(part * chunk, seq_k)), select(left >= 0, max(shift - left, 0), 0));
  u32 hi = cast<uint32_t>(max(end, 0)), lo = cast<uint32_t>(min(start, max(end, 0)));
  // Each row's running maximum (log2 units), and each lane's part of its sum.
  std::vector<Var<f32>> m, l;
  for (uint32_t r = 0; r < R; ++r) {
    m.push_back(Var<f32>(-INFINITY));
    l.push_back(Var<f32>(0.0f));
  }
  for_range(lo, hi, L, [&](u32 key0) {
    u32 n = min(hi - key0, L);
    // Lanes across columns: the partial scores (the block's keys past n read key n - 1).
    for_range(0u, L, 1u, [&](u32 j) {
      u32 kr = kbase + (key0 + min(j, n - 1u)) * krow;
      std::vector<f32> kv;
      for (uint32_t g = 0; g < G; ++g) kv.push_back(cast<float>(k[kr + g * L + unit]));
      for (uint32_t r = 0; r < R; ++r) {
        f32 t = Val<float>(qa[r * D + unit]) * kv[0];
        for (uint32_t g = 1; g < G; ++g) t = fma(Val<float>(qa[r * D + g * L + unit]), kv[g], t);
        ta[(r * L + j) * L + unit] = t;
      }
    });
    sync_cube();
    // Lanes across keys: scores, masks and the online softmax.
    u32 kj = key0 + unit;
    std::vector<f32> alpha;
    for (uint32_t r = 0; r < R; ++r) {
      // Each key's partials summed as uniform values (the same in every lane: scalar loads,
      // cheaper here than gathering the arena transposed), the lane's key picked.
      f32 s = 0.0f;
      for (uint32_t j = 0; j < L; ++j) {
        std::vector<f32> sums;
        for (uint32_t i = 0; i < L; ++i) sums.push_back(ta[(r * L + j) * L + i]);
        for (size_t w = 1; w < sums.size(); w *= 2)
          for (size_t i = 0; i + w < sums.size(); i += 2 * w) sums[i] = sums[i] + sums[i + w];
        s = j == 0 ? sums[0] : select(unit == j, sums[0], s);
      }
      s = s * scale_log2;
      u32 qi = u32(r) % seq_q;
      if (has_bias) {
        u32 h = kh * group + u32(r) / seq_q;
        s = s + bias[b * bs0 + h * bs1 + qi * bs2 + min(kj, seq_k - 1u) * bs3] * kLog2e;
      }
      i32 kji = cast<i32>(kj), qii = cast<i32>(qi);
      Val<bool> seen = unit < n && seen_by(kji, qii, shift, left, right);
      s = select(seen, s, -INFINITY);
      f32 m_new = max(m[r].get(), plane_max(s));
      // A row that has seen no key yet keeps m = -inf and takes its exponentials against 0.
      f32 base = select(m_new == -INFINITY, 0.0f, m_new);
      alpha.push_back(exp2(m[r].get() - base));
      f32 p = exp2(s - base);
      l[r] = l[r].get() * alpha[r] + p;
      m[r] = m_new;
      pa[r * L + unit] = p;
    }
    sync_cube();
    // Lanes across columns: O = alpha O + P V, a key's row of V shared by every row of O.
    for_range(0u, G, 1u, [&](u32 g) {
      u32 col = g * L + unit;
      // Two chains of FMAs per row (even and odd keys), to cover an FMA's latency with few rows.
      std::vector<f32> acc, odd;
      for (uint32_t r = 0; r < R; ++r) {
        acc.push_back(Val<float>(oa[r * D + col]) * alpha[r]);
        odd.push_back(f32(0.0f));
      }
      for (uint32_t j = 0; j < L; ++j) {
        f32 vv = cast<float>(v[vbase + (key0 + min(u32(j), n - 1u)) * vrow + col]);
        for (uint32_t r = 0; r < R; ++r) {
          f32& x = j % 2 == 0 ? acc[r] : odd[r];
          x = fma(Val<float>(pa[r * L + j]), vv, x);
        }
      }
      for (uint32_t r = 0; r < R; ++r) oa[r * D + col] = acc[r] + odd[r];
    });
    // (No barrier here: the next block writes the partials, which no unit reads any more, and
    // its probabilities only after the barrier that every unit passes when done with these.)
  });
  u32 slot = cube_pos_y() * parts + part;
  for (uint32_t r = 0; r < R; ++r) {
    f32 sum = plane_sum(l[r].get());
    if_(unit == 0u, [&] {
      part_ml[slot * 32u + r] = m[r].get();
      part_ml[slot * 32u + 16u + r] = sum;
    });
    for (uint32_t g = 0; g < G; ++g)
      part_o[(slot * 16u + r) * part_o.stride(2) + g * L + unit] = oa[r * D + g * L + unit];
  }
}
KILN_KERNEL_GENERIC(
    attention_decode_cpu,
    "q: rank=4, k: rank=4, v: rank=4, bias: rank=4, part_o: rank=4, part_ml: rank=3, "
    "scale_log2, hk, group, qrs, left, right, chunk, bs0, bs1, bs2, bs3, "
    "head_dim = 64 in 16..256, lanes = 16 in 1..64, rows = 4 in 1..16, has_bias = false",
    InOut<f16, f32>, InOut<bf16, f32>, InOut<f32, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe(
        "kiln::lib::attention's decode path on the CPU: one part of the cache for a group's "
        "rows, a key per lane for the softmax, a column per lane for the products");

// One element (row r, column c) of the output per unit: the parts' outputs rescaled to the
// largest maximum and divided by the sum of their sums; the log-sum-exp from column 0's unit.
template <class P>
void attention_decode_combine(Tensor<const f32> part_o, Tensor<const f32> part_ml,
                              Tensor<typename P::Out> o, Tensor<f32> lse, u32 hk, u32 group,
                              bool has_lse) {
  u32 seq_q = o.shape(2), d = o.shape(3), parts = part_o.shape(1);
  u32 rows = group * seq_q;
  u32 e = cube_pos_x() * cube_dim() + unit_pos();
  if_(e >= rows * d, [&] { return_(); });
  u32 r = e / d, c = e % d;
  u32 b = cube_pos_y() / hk, kh = cube_pos_y() % hk;
  u32 base = cube_pos_y() * parts;
  Var<f32> m = -INFINITY;
  for_range(0u, parts, 1u, [&](u32 p) { m = max(m.get(), f32(part_ml[(base + p) * 32u + r])); });
  f32 mu = select(m.get() == -INFINITY, 0.0f, m.get());
  Var<f32> l = 0.0f, acc = 0.0f;
  for_range(0u, parts, 1u, [&](u32 p) {
    f32 w = exp2(f32(part_ml[(base + p) * 32u + r]) - mu);
    l = l.get() + f32(part_ml[(base + p) * 32u + 16u + r]) * w;
    acc = acc.get() + f32(part_o[((base + p) * 16u + r) * part_o.stride(2) + c]) * w;
  });
  u32 h = kh * group + r / seq_q, i = r % seq_q;
  f32 y = select(l.get() > 0.0f, acc.get() / l.get(), 0.0f);
  o[b * o.stride(0) + h * o.stride(1) + i * o.stride(2) + c] = cast<host_of_t<typename P::Out>>(y);
  if (has_lse)
    if_(c == 0u, [&] {
      lse[b * lse.stride(0) + h * lse.stride(1) + i * lse.stride(2)] =
          select(l.get() > 0.0f, (m.get() + log2(l.get())) * 0.6931471805599453f, INFINITY);
    });
}
KILN_KERNEL_GENERIC(attention_decode_combine,
                    "part_o: rank=4, part_ml: rank=3, o: rank=4, lse: rank=3, hk, group, "
                    "has_lse = false",
                    InOut<f32, f16>, InOut<f32, bf16>, InOut<f32, f32>)
    .cube_dim(128)
    .describe("kiln::lib::attention's decode path: the parts combined into the output");

}  // namespace
