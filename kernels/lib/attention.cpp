// kiln::lib::attention (attention.h): the host side of the forward and backward passes, and the
// GPUs' forward kernel, written on matrix fragments whose elements it computes on (docs/dsl.md
// "Computing on accumulators"): each plane owns 16 queries of one head and walks the keys it may
// see in blocks of 32, keeping the running maximum and sum of each row and the running output in
// registers, FlashAttention-2's scheme. The CPU runs kernels of its own, laid out for SIMD lanes
// (attention_cpu.cpp); the decode path is attention_decode.cpp, the GPUs' backward
// attention_backward.cpp.
#include "kernels/lib/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/dsl/online_softmax.h"
#include "kernels/lib/attention_seqs.h"
#include "kernels/lib/common.h"

using namespace kiln::dsl;
using kiln::lib::detail::InOut;
using kiln::lib::detail::seen_by;

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// O (and the log-sum-exp) of 16 * planes queries of head cube_pos_y() % hq of batch item
// cube_pos_y() / hq. Scores are kept in log2 units (scale_log2 = scale * log2 e) so that the
// softmax is exp2. Masks: key j is seen by query i when j < seq_k, and, per bound that is not
// negative, j <= i + seq_k - seq_q + right and j >= i + seq_k - seq_q - left.
template <class P>
void attention_fwd(Tensor<const typename P::In> q, Tensor<const typename P::In> k,
                   Tensor<const typename P::In> v, Tensor<typename P::Out> o,
                   Tensor<const f32> bias, Tensor<f32> lse, Tensor<const i32> cu_q,
                   Tensor<const i32> cu_k, f32 scale_log2, u32 hq, u32 group, i32 left, i32 right,
                   u32 bs0, u32 bs1, u32 bs2, u32 bs3, int head_dim, int planes, int o_split,
                   bool has_bias, bool has_lse, bool varlen) {
  using In = typename P::In;
  using Out = host_of_t<typename P::Out>;
  if (head_dim % 32 != 0 || head_dim > 256) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("head_dim = {}: a multiple of 32 up to 256 (O is kept in accumulators of 32 "
                    "columns)",
                    head_dim));
    return;
  }
  if ((o_split != 1 && o_split != 2 && o_split != 4) || head_dim % (32 * o_split) != 0) {
    TraceContext::current().fail(SrcLoc::current(),
                                 fmt::format("o_split = {} with head_dim = {}: 1, 2 or 4, and "
                                             "head_dim a multiple of 32 o_split",
                                             o_split, head_dim));
    return;
  }
  // This cube's columns of O: dc accumulators of 32 from column c_off (cube_pos_z() picks the
  // part when O is split across cubes, which then each compute S again).
  const int dc = head_dim / 32 / o_split;
  u32 c_off = cube_pos_z() * static_cast<uint32_t>(32 * dc);
  // Q stays in registers for the whole walk (on the CPU, in the arena, always); on sm_80 to
  // sm_90a above head_dim 64 each of its tiles is loaded (from the cache) just before its
  // multiply instead, which keeps O and S in registers (sm_100a's and sm_120a's ptxas do better
  // with Q resident up to 128).
  // (By name, so that an emulated architecture, cuda-emu:sm_100a, runs that architecture's
  // code, and an inspection CPU target, cpu:znver4, the host's.)
  const std::string& target = target_name();
  const bool newer =
      target.find("sm_100") != std::string::npos || target.find("sm_120") != std::string::npos;
  const bool q_resident = target.rfind("cpu", 0) == 0 || head_dim <= 64 || newer;
  std::vector<Fragment<In>> qf;
  for (int i = 0; i < (q_resident ? head_dim / 16 : 1); ++i) qf.push_back(matrix_a<In>(16, 32, 16));
  auto kf = matrix_b<In>(16, 32, 16);
  auto s = accumulator<f32>(16, 32, 16);
  auto p = matrix_a<In>(16, 32, 32);
  auto vf = matrix_b<In>(16, 32, 32);
  std::vector<Fragment<f32>> of;
  for (int i = 0; i < dc; ++i) of.push_back(accumulator<f32>(16, 32, 32));
  Fragment<typename P::Out> out;
  if constexpr (!std::is_same_v<Out, float>) out = accumulator<typename P::Out>(16, 32, 32);

  u32 b = cube_pos_y() / hq, h = cube_pos_y() % hq, kh = h / group;
  // Sequence b's rows of q (and o, lse) and of k (and v): all of item b's, or with varlen its
  // part of the one packed item.
  const auto qs = kiln::lib::detail::seq_rows(varlen, cu_q, b, q.shape(2));
  const auto ks = kiln::lib::detail::seq_rows(varlen, cu_k, b, k.shape(2));
  u32 seq_q = qs.len, seq_k = ks.len;
  u32 q0 = (cube_pos_x() * static_cast<uint32_t>(planes) + plane_pos()) * 16u;
  u32 rows = select(q0 < seq_q, seq_q - q0, 0u);
  u32 qrow = q.stride(2), krow = k.stride(2), vrow = v.stride(2), orow = o.stride(2);
  u32 qfirst = qs.start + select(q0 < seq_q, q0, 0u);
  u32 qbase = qs.item * q.stride(0) + h * q.stride(1) + qfirst * qrow;
  u32 kbase = ks.item * k.stride(0) + kh * k.stride(1) + ks.start * krow,
      vbase = ks.item * v.stride(0) + kh * v.stride(1) + ks.start * vrow;
  auto load_q = [&](int i, const Fragment<In>& f) {
    load(f, q, qbase + static_cast<uint32_t>(16 * i), qrow, rows, 16u);
  };
  if (q_resident)
    for (int i = 0; i < head_dim / 16; ++i) load_q(i, qf[size_t(i)]);
  for (auto& f : of) fill(f, 0.0f);

  // The keys this plane's queries may see: [lo, hi).
  i32 shift = cast<i32>(seq_k) - cast<i32>(seq_q);
  i32 qf0 = cast<i32>(q0);
  i32 hi_i =
      select(right >= 0, min(cast<i32>(seq_k), max(qf0 + 16 + shift + right, 0)), cast<i32>(seq_k));
  hi_i = select(q0 < seq_q, hi_i, 0);
  i32 lo_i = select(left >= 0, max(qf0 + shift - left, 0), 0);
  u32 hi = cast<uint32_t>(hi_i), lo = cast<uint32_t>(min(lo_i, hi_i));
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
      i32 qi = qf0 + cast<i32>(r), kj = cast<i32>(key0 + c);
      Val<bool> seen = seen_by(c < keys, kj, qi, shift, left, right);
      f32 y = x * scale_log2;
      if (has_bias) {
        u32 bi =
            b * bs0 + h * bs1 + min(q0 + r, seq_q - 1u) * bs2 + min(key0 + c, seq_k - 1u) * bs3;
        y = y + bias[bi] * kLog2e;
      }
      return select(seen, y, -INFINITY);
    });
    auto alpha = online_softmax_step(s, st);
    convert(p, s);
    // O's rows are rescaled only by the units whose rows' maximum moved (once the maxima settle,
    // most blocks move none: the CPU then skips the loads and stores of O's elements).
    Val<bool> moved = alpha[0] != 1.0f;
    for (size_t r = 1; r < alpha.size(); ++r) moved = moved || alpha[r] != 1.0f;
    if_(moved, [&] {
      for (int i = 0; i < dc; ++i) scale_rows(of[size_t(i)], alpha);
    });
    for (int i = 0; i < dc; ++i) {
      load(vf, v, vbase + key0 * vrow + c_off + static_cast<uint32_t>(32 * i), vrow, keys, 32u);
      mma(of[size_t(i)], p, vf);
    }
  });
  // O / l (0 for a row that saw no key); the log-sum-exp ln(sum exp(score)) = (m + log2 l) ln 2.
  std::vector<f32> inv;
  for (int r = 0; r < row_count(s); ++r) {
    f32 l = st.sum[size_t(r)].get();
    inv.push_back(select(l > 0.0f, 1.0f / l, 0.0f));
    if (has_lse) {
      u32 row = q0 + slot_row(s, r);
      if_(plane_lane() % 4u == 0u && row < seq_q && cube_pos_z() == 0u, [&] {
        f32 m = st.max[size_t(r)].get();
        lse[qs.item * lse.stride(0) + h * lse.stride(1) + (qs.start + row) * lse.stride(2)] =
            select(l > 0.0f, (m + log2(l)) * 0.6931471805599453f, INFINITY);
      });
    }
  }
  u32 obase = qs.item * o.stride(0) + h * o.stride(1) + qfirst * orow;
  for (int i = 0; i < dc; ++i) {
    scale_rows(of[size_t(i)], inv);
    if constexpr (std::is_same_v<Out, float>) {
      store(o, obase + c_off + static_cast<uint32_t>(32 * i), orow, rows, 32u, of[size_t(i)]);
    } else {
      convert(out, of[size_t(i)]);
      store(o, obase + c_off + static_cast<uint32_t>(32 * i), orow, rows, 32u, out);
    }
  }
}
KILN_KERNEL_GENERIC(
    attention_fwd,
    "q: rank=4, k: rank=4, v: rank=4, o: rank=4, bias: rank=4, lse: rank=3, cu_q: rank=1, "
    "cu_k: rank=1, scale_log2, hq, group, left, right, bs0, bs1, bs2, bs3, "
    "head_dim = 64 in 32..256, planes = 4 in 1..8, o_split = 1 in 1..4, has_bias = false, "
    "has_lse = false, varlen = false",
    InOut<f16, f16>, InOut<f16, f32>, InOut<bf16, bf16>, InOut<bf16, f32>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("planes")), 1, 1};
    })
    .describe("kiln::lib::attention: flash attention forward on matrix fragments");

}  // namespace

namespace kiln::lib {

namespace {

using ir::ElemType;

Error bad(const std::string& what) {
  return detail::bad("attention", what);
}

// What the forward and backward passes share: q, k, v and the options checked, the masks'
// bounds and the bias's broadcast strides.
struct Problem {
  int64_t B = 0, hq = 0, sq = 0, D = 0, hk = 0, sk = 0;
  int64_t left = -1, right = -1;
  std::array<uint32_t, 4> bs{0, 0, 0, 0};
  Tensor bias;
  double scale = 0;
  // The sequences (B, or with varlen the offsets' count less one) and the rows of the longest
  // one in q and in k (the grids' extents); the offsets (a 1-element stand-in without varlen).
  bool varlen = false;
  int64_t seqs = 0, rows_q = 0, rows_k = 0;
  Tensor cu_q, cu_k;
};

// Variable sequence lengths: the offsets checked (i32 [n + 1], contiguous, one count), and, on
// the CPU or when no longest length is given, read to check their values (0 first,
// non-decreasing, the last at most the rows) and find the longest sequences. A GPU given
// max_seqlen_q reads nothing (no wait): the kernels clamp every offset into the tensors' rows.
Status check_varlen(Runtime& rt, const AttentionOptions& o, Problem& p) {
  if (!o.cu_seqlens_q || !o.cu_seqlens_k)
    return bad("variable lengths take both cu_seqlens_q and cu_seqlens_k");
  if (p.B != 1)
    return bad(
        fmt::format("with variable lengths q, k and v hold every sequence in one item "
                    "([1, H, total rows, D]); q's first dimension is {}",
                    p.B));
  if (o.bias)
    return bad("a bias with variable lengths is not built (its rows would be packed too)");
  const std::pair<const Tensor*, const char*> cus[] = {{o.cu_seqlens_q, "cu_seqlens_q"},
                                                       {o.cu_seqlens_k, "cu_seqlens_k"}};
  for (const auto& [t, name] : cus)
    if (t->rank() != 1 || t->dtype() != ElemType::I32 || t->shape(0) < 1 || !t->is_contiguous())
      return bad(fmt::format("{} is {} of {}; it must be contiguous i32 [sequences + 1]", name,
                             ir::elem_name(t->dtype()), detail::dims(t->shape())));
  if (o.cu_seqlens_q->shape(0) != o.cu_seqlens_k->shape(0))
    return bad(
        fmt::format("cu_seqlens_q has {} offsets and cu_seqlens_k {}: one per sequence "
                    "and one more, for both",
                    o.cu_seqlens_q->shape(0), o.cu_seqlens_k->shape(0)));
  if (o.max_seqlen_q < 0 || o.max_seqlen_k < 0)
    return bad("max_seqlen_q and max_seqlen_k are lengths (0: read them from the offsets)");
  p.varlen = true;
  p.seqs = o.cu_seqlens_q->shape(0) - 1;
  p.cu_q = o.cu_seqlens_q->as_read_only();
  p.cu_k = o.cu_seqlens_k->as_read_only();
  p.rows_q = o.max_seqlen_q;
  p.rows_k = o.max_seqlen_k;
  if (!rt.device().host_memory && o.max_seqlen_q > 0 && o.max_seqlen_k > 0) return Status{};
  KILN_TRY(rt.sync());  // the offsets may come from earlier work on the stream
  int64_t longest[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const auto& [t, name] = cus[which];
    const int64_t rows = which == 0 ? p.sq : p.sk;
    std::vector<int32_t> cu(static_cast<size_t>(t->shape(0)));
    KILN_TRY(t->download(std::span<int32_t>(cu)));
    if (cu[0] != 0) return bad(fmt::format("{}[0] is {}; the offsets start at 0", name, cu[0]));
    for (size_t i = 1; i < cu.size(); ++i) {
      if (cu[i] < cu[i - 1] || cu[i] > rows)
        return bad(
            fmt::format("{}[{}] is {} after {}: the offsets must not decrease nor pass "
                        "the {} rows of {}",
                        name, i, cu[i], cu[i - 1], rows, which == 0 ? "q" : "k"));
      longest[which] = std::max<int64_t>(longest[which], cu[i] - cu[i - 1]);
    }
  }
  const int64_t given[2] = {o.max_seqlen_q, o.max_seqlen_k};
  const char* names[2] = {"max_seqlen_q", "max_seqlen_k"};
  for (int which = 0; which < 2; ++which) {
    if (given[which] > 0 && given[which] < longest[which])
      return bad(fmt::format("{} is {}, but a sequence has {} rows", names[which], given[which],
                             longest[which]));
  }
  p.rows_q = longest[0];
  p.rows_k = longest[1];
  return Status{};
}

// Tensor t (named name) as [B, H, S, D] with rows of stride 1 that fit 32-bit indices (an
// empty tensor, whose strides are anything, has no rows to check).
Status check_rows(const Tensor& t, const char* name, bool written) {
  if (t.numel() == 0) return Status{};
  if (t.stride(3) != 1 && t.shape(3) > 1)
    return bad(
        fmt::format("{}'s last dimension has stride {}; attention reads each row of a "
                    "head contiguously (stride 1): make a contiguous copy first",
                    name, t.stride(3)));
  for (int dim = 0; dim < 3; ++dim)
    if (t.stride(dim) < 0)
      return bad(fmt::format("{} has a negative stride in dimension {}", name, dim));
  if (!detail::fits_u32(t)) return bad(fmt::format("{} reaches past 2^32 elements", name));
  if (written && t.may_overlap())
    return bad(fmt::format("{} ({}) has elements that overlap", name, t.describe()));
  return Status{};
}

// A tensor of q's (written: of k's) shape whose type is the inputs' or f32.
Status check_like(const Tensor& t, const char* name, const Tensor& like, const char* like_name,
                  bool written, bool f32_allowed) {
  using detail::dims;
  const ElemType in = like.dtype();
  if (t.rank() != 4)
    return bad(fmt::format("{} is {}; it must be [B, H, S, D] (rank 4)", name, dims(t.shape())));
  if (t.dtype() != in && !(f32_allowed && t.dtype() == ElemType::F32))
    return bad(fmt::format("{} holds {}; it must hold the inputs' {}{}", name,
                           ir::elem_name(t.dtype()), ir::elem_name(in),
                           f32_allowed && in != ElemType::F32 ? " or f32" : ""));
  for (int dim = 0; dim < 4; ++dim)
    if (t.shape(dim) != like.shape(dim))
      return bad(fmt::format("{} is {}; it must be {}'s shape {}", name, dims(t.shape()), like_name,
                             dims(like.shape())));
  return check_rows(t, name, written);
}

Result<Problem> check(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v,
                      const AttentionOptions& o) {
  using detail::dims;
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}})
    if (t->rank() != 4)
      return bad(fmt::format("{} is {}; it must be [B, H, S, D] (rank 4)", name, dims(t->shape())));
  const ElemType in = q.dtype();
  const bool cpu = rt.device().lane_units;
  if (in != ElemType::F16 && in != ElemType::BF16 && !(in == ElemType::F32 && cpu))
    return bad(
        in == ElemType::F32
            ? fmt::format("q, k and v hold f32; on {} attention takes f16 or bf16 inputs (f32 "
                          "runs on the CPU; a GPU's tensor cores would read f32 as tf32, which "
                          "is not built): convert them to bf16 or f16 first",
                          rt.device().name)
            : fmt::format("q, k and v hold {}; attention takes f16, bf16 or (on the CPU) f32 "
                          "inputs",
                          ir::elem_name(in)));
  if (k.dtype() != in || v.dtype() != in)
    return bad(fmt::format("q, k and v must hold one type; got {}, {} and {}", ir::elem_name(in),
                           ir::elem_name(k.dtype()), ir::elem_name(v.dtype())));
  Problem p;
  p.B = q.shape(0), p.hq = q.shape(1), p.sq = q.shape(2), p.D = q.shape(3);
  p.hk = k.shape(1), p.sk = k.shape(2);
  const int64_t B = p.B, hq = p.hq, sq = p.sq, D = p.D, hk = p.hk, sk = p.sk;
  if (k.shape(0) != B || k.shape(3) != D || v.shape(0) != B || v.shape(1) != hk ||
      v.shape(2) != sk || v.shape(3) != D)
    return bad(
        fmt::format("q is {}, k {} and v {}: k and v must be [B, Hk, Sk, D] for q's B and "
                    "D (v's head size equal to q's)",
                    dims(q.shape()), dims(k.shape()), dims(v.shape())));
  if (hk == 0 || hq % hk != 0)
    return bad(
        fmt::format("q has {} heads and k {}: q's heads must be a multiple of k's "
                    "(grouped-query attention)",
                    hq, hk));
  if (D <= 0 || D % 32 != 0 || D > 256)
    return bad(fmt::format("the head size is {}; it must be a multiple of 32 up to 256", D));
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}})
    KILN_TRY(check_rows(*t, name, false));
  if (o.causal && o.window_right > 0)
    return bad("causal is window_right = 0; give one of causal and window_right");
  if (o.window_left < -1 || o.window_right < -1)
    return bad(
        fmt::format("window_left = {}, window_right = {}: each -1 (unbounded) or a count "
                    "of keys",
                    o.window_left, o.window_right));
  // A bound past every key is no bound (and keeps the kernels' i32 arithmetic in range).
  p.right = o.causal ? 0 : o.window_right, p.left = o.window_left;
  if (p.right > sq + sk) p.right = -1;
  if (p.left > sq + sk) p.left = -1;
  // The bias: its strides, 0 along broadcast dimensions.
  if (o.bias) {
    const Tensor& t = *o.bias;
    const std::array<int64_t, 4> want{B, hq, sq, sk};
    bool ok = t.rank() == 4 && t.dtype() == ElemType::F32;
    for (int dim = 0; ok && dim < 4; ++dim)
      ok = t.shape(dim) == want[size_t(dim)] || (dim < 2 && t.shape(dim) == 1);
    if (!ok)
      return bad(
          fmt::format("the bias is {} of {}; it must be f32 [B or 1, Hq or 1, Sq, Sk] = "
                      "[{} or 1, {} or 1, {}, {}]",
                      ir::elem_name(t.dtype()), dims(t.shape()), B, hq, sq, sk));
    if (!detail::fits_u32(t)) return bad("the bias reaches past 2^32 elements");
    for (int dim = 0; dim < 4; ++dim) {
      if (t.stride(dim) < 0) return bad("the bias has a negative stride");
      p.bs[size_t(dim)] = t.shape(dim) == 1 ? 0u : static_cast<uint32_t>(t.stride(dim));
    }
    p.bias = t.as_read_only();
  } else {
    KILN_ASSIGN(p.bias, rt.empty(ElemType::F32, {1, 1, 1, 1}));
  }
  p.scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(D));
  if (o.cu_seqlens_q || o.cu_seqlens_k) {
    KILN_TRY(check_varlen(rt, o, p));
  } else {
    p.seqs = B, p.rows_q = sq, p.rows_k = sk;
    KILN_ASSIGN(p.cu_q, rt.empty(ElemType::I32, {1}));
    p.cu_k = p.cu_q;
  }
  return p;
}

// lse as f32 [B, Hq, Sq].
Status check_lse(const Tensor& t, const Problem& p, bool written) {
  if (t.rank() != 3 || t.dtype() != ElemType::F32 || t.shape(0) != p.B || t.shape(1) != p.hq ||
      t.shape(2) != p.sq)
    return bad(fmt::format("lse is {} of {}; it must be f32 [B, Hq, Sq] = [{}, {}, {}]",
                           ir::elem_name(t.dtype()), detail::dims(t.shape()), p.B, p.hq, p.sq));
  if (!detail::fits_u32(t)) return bad("lse reaches past 2^32 elements");
  if (written && t.may_overlap())
    return bad(fmt::format("lse ({}) has elements that overlap", t.describe()));
  return Status{};
}

// The grid's y and x extents (B x H and blocks of 16 planes rows) within the launch limits.
Status check_grid(int64_t bh, int64_t rows, int planes, const char* h, const char* s) {
  const int64_t blocks = (rows + 16 * planes - 1) / (16 * planes);
  if (bh > 65535 || blocks > 65535)
    return bad(
        fmt::format("the grid would be {} x {} cubes; at most 65535 of each (B x {} and "
                    "{} / {})",
                    blocks, bh, h, s, 16 * planes));
  return Status{};
}

bool newer_arch(const Runtime& rt) {
  const std::string& arch = rt.device().arch;
  return arch.rfind("sm_10", 0) == 0 || arch.rfind("sm_12", 0) == 0;
}

uint32_t u(int64_t x) {
  return static_cast<uint32_t>(x);
}

}  // namespace

namespace {

// The decode path: parts of about equal keys over the batch's key heads. On GPUs,
// attention_decode: a plane per part, about 4 planes per multiprocessor, parts a multiple of 32
// keys, at least 128 each. On the CPU, attention_decode_cpu: a cube of one vector of lanes per
// part, about 32 cubes per core, parts a multiple of 16 keys, at least 256 each (4 cubes per core
// measured 1.8x slower at batch 1 on a 2-core machine: a core slowed by another process left
// the other idle at the end; 64 per core gained nothing more).
Status attention_decode(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                        const Tensor& lse, const Problem& p, const AttentionOptions& o,
                        int o_split) {
  const bool cpu = rt.device().lane_units;
  const int lanes = cpu ? std::max(1, rt.max_lanes(ElemType::F32)) : 32;
  const int planes = cpu ? 1 : 4;
  const int64_t bh = p.B * p.hk, group = p.hq / p.hk;
  const int64_t cores = std::max(rt.device().cores, 1);
  const int64_t step = cpu ? lanes : 32, least = cpu ? 256 : 128;
  int64_t parts = std::clamp<int64_t>(((cpu ? 32 : 4) * cores * planes + bh - 1) / bh, 1,
                                      (p.sk + least - 1) / least);
  const int64_t chunk = ((p.sk + parts - 1) / parts + step - 1) / step * step;
  parts = (p.sk + chunk - 1) / chunk;
  const int64_t cubes = (parts + planes - 1) / planes;
  if (bh > 65535 || cubes > 65535)
    return bad(
        fmt::format("the decode grid would be {} x {} cubes; at most 65535 of each", cubes, bh));
  if (o.plan)
    *o.plan = {cpu ? "attention_decode_cpu + attention_decode_combine"
                   : "attention_decode + attention_decode_combine",
               fmt::format("{} queries of {} heads per {}, the {} keys in {} parts of {}{}", p.sq,
                           group, cpu ? "cube" : "plane", p.sk, parts, chunk,
                           o_split > 1 ? fmt::format(", O split in {} cubes", o_split) : ""),
               cpu ? "decode: a key head's queries share a cube, a key per lane for the "
                     "softmax and a column per lane for the products; the cache is walked in "
                     "parallel parts and combined"
                   : "decode: a key head's queries share the plane's rows, the cache is walked "
                     "in parallel parts and combined"};
  KILN_ASSIGN(Tensor part_o, rt.empty(ElemType::F32, {bh, parts, 16, p.D}));
  KILN_ASSIGN(Tensor part_ml, rt.empty(ElemType::F32, {bh, parts, 32}));
  const uint32_t qrs = static_cast<uint32_t>(p.sq == 1 ? q.stride(1) : q.stride(2));
  const float scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
  if (cpu) {
    KILN_ASSIGN(const Kernel walk, rt.kernel("attention_decode_cpu"));
    KILN_TRY(rt.launch(walk, Dim3(u(parts), u(bh)), Dim3(u(lanes)), q.as_read_only(),
                       k.as_read_only(), v.as_read_only(), p.bias, part_o, part_ml, scale_log2,
                       u(p.hk), u(group), qrs, static_cast<int32_t>(p.left),
                       static_cast<int32_t>(p.right), u(chunk), p.bs[0], p.bs[1], p.bs[2], p.bs[3],
                       static_cast<int>(p.D), lanes, static_cast<int>(p.sq * group),
                       o.bias != nullptr));
  } else {
    KILN_ASSIGN(const Kernel walk, rt.kernel("attention_decode"));
    KILN_TRY(rt.launch(walk, Dim3(u(cubes), u(bh), u(o_split)), Dim3(u(32 * planes)),
                       q.as_read_only(), k.as_read_only(), v.as_read_only(), p.bias, part_o,
                       part_ml, scale_log2, u(p.hk), u(group), qrs, static_cast<int32_t>(p.left),
                       static_cast<int32_t>(p.right), u(chunk), p.bs[0], p.bs[1], p.bs[2], p.bs[3],
                       static_cast<int>(p.D), planes, o_split, o.bias != nullptr));
  }
  KILN_ASSIGN(const Kernel combine, rt.kernel("attention_decode_combine"));
  return rt.launch(combine, Dim3(u((p.sq * group * p.D + 127) / 128), u(bh)), Dim3(128u),
                   part_o.as_read_only(), part_ml.as_read_only(), out, lse, u(p.hk), u(group),
                   o.lse != nullptr);
}

// The CPU's kernel (attention_cpu.cpp): a vector of queries per cube, a query per SIMD lane,
// keys in blocks of 16 (8 with 16 vector registers: the block's scores and probabilities stay
// in registers).
Status attention_cpu(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                     const Tensor& lse, const Problem& p, const AttentionOptions& o) {
  const int lanes = std::max(1, rt.max_lanes(ElemType::F32));
  const int keys = rt.device().vector_bits >= 512 ? 16 : 8;
  const int64_t blocks = (p.rows_q + lanes - 1) / lanes;
  if (p.seqs * p.hq > 65535 || blocks > 65535)
    return bad(
        fmt::format("the grid would be {} x {} cubes; at most 65535 of each (B x Hq and "
                    "Sq / {})",
                    blocks, p.seqs * p.hq, lanes));
  if (o.plan)
    *o.plan = {"attention_fwd_cpu",
               fmt::format("{} queries per cube (a query per SIMD lane), keys in blocks of {}",
                           lanes, keys),
               "flash attention for SIMD lanes: the online softmax lane by lane, S and P in "
               "vector registers, Q^T and O^T in the core's arena"};
  if (p.seqs == 0 || p.hq == 0 || p.rows_q == 0) return Status{};
  KILN_ASSIGN(const Kernel kernel, rt.kernel("attention_fwd_cpu"));
  return rt.launch(kernel, Dim3(u(blocks), u(p.seqs * p.hq)), Dim3(u(lanes)), q.as_read_only(),
                   k.as_read_only(), v.as_read_only(), out, p.bias, lse, p.cu_q, p.cu_k,
                   static_cast<float>(p.scale * 1.4426950408889634), u(p.hq), u(p.hq / p.hk),
                   static_cast<int32_t>(p.left), static_cast<int32_t>(p.right), p.bs[0], p.bs[1],
                   p.bs[2], p.bs[3], static_cast<int>(p.D), lanes, keys, o.bias != nullptr,
                   o.lse != nullptr, p.varlen);
}

// The backward pass's first step on every device: delta_i = sum_c dO_ic O_ic of each query row,
// f32 [B, Hq, max(Sq, 1)] (attention_bwd_delta).
Result<Tensor> row_sums(Runtime& rt, const Tensor& out, const Tensor& dout, const Problem& p) {
  KILN_ASSIGN(Tensor delta, rt.empty(ElemType::F32, {p.B, p.hq, std::max<int64_t>(p.sq, 1)}));
  KILN_ASSIGN(const Kernel pre, rt.kernel("attention_bwd_delta"));
  if (p.sq > 0)
    KILN_TRY(rt.launch(pre, Dim3(u((p.sq + 127) / 128), u(p.B * p.hq)), Dim3(128u),
                       out.as_read_only(), dout.as_read_only(), delta, u(p.hq)));
  return delta.as_read_only();
}

// The CPU's backward (attention_cpu.cpp), after the row sums of dO O: with enough key heads to
// keep every core busy (B Hk at least twice the cores), one cube per key head computes dK, dV
// and dQ in five products (attention_bwd_cpu); otherwise two walks spread over blocks of keys
// and of queries compute dK and dV (a key per SIMD lane) and dQ (a query per lane) in seven.
// KILN_ATTENTION_CPU_BACKWARD=fused or =walks picks one (for comparisons and tests). Blocks of
// 8 rows (6 with 16 vector registers: the block's scores and products stay in registers).
Status attention_backward_cpu(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& dout, const Tensor& lse, Tensor& dq,
                              Tensor& dk, Tensor& dv, const Problem& p, const AttentionOptions& o) {
  const int lanes = std::max(1, rt.max_lanes(ElemType::F32));
  const int block = rt.device().vector_bits >= 512 ? 8 : 6;
  bool fused = p.seqs * p.hk >= 2 * std::max(1, rt.device().cores);
  if (const char* e = std::getenv("KILN_ATTENTION_CPU_BACKWARD")) {
    const std::string_view how = e;
    if (how != "fused" && how != "walks")
      return bad(
          fmt::format("KILN_ATTENTION_CPU_BACKWARD is '{}'; it must be fused or walks "
                      "(unset: chosen by the number of key heads)",
                      how));
    fused = how == "fused";
  }
  const int64_t qblocks = (p.rows_q + lanes - 1) / lanes, kblocks = (p.rows_k + lanes - 1) / lanes;
  if (p.seqs * p.hq > 65535 || qblocks > 65535 || kblocks > 65535)
    return bad(
        fmt::format("the grid would be {} (or {}) x {} cubes; at most 65535 of each (B x "
                    "Hq and Sq / {})",
                    qblocks, kblocks, p.seqs * p.hq, lanes));
  if (o.plan && fused)
    *o.plan = {"attention_bwd_cpu",
               fmt::format("a cube per key head, {} keys at a time (a key per SIMD lane), "
                           "queries in blocks of {}",
                           lanes, block),
               "FlashAttention-2's backward in five products without atomics: each cube walks "
               "every key of its head, summing dQ in f32 in key order"};
  else if (o.plan)
    *o.plan = {"attention_bwd_dkdv_cpu + attention_bwd_dq_cpu",
               fmt::format("{} keys (queries) per cube, a key (query) per SIMD lane, queries "
                           "(keys) in blocks of {}",
                           lanes, block),
               "FlashAttention-2's backward without atomics for SIMD lanes: P recomputed from "
               "the log-sum-exp, once for dK and dV and once for dQ (fewer key heads than "
               "twice the cores)"};
  if (p.seqs == 0 || p.hq == 0) return Status{};
  KILN_ASSIGN(const Tensor delta_r, row_sums(rt, out, dout, p));
  const float scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
  const auto scale = static_cast<float>(p.scale);
  if (fused) {
    KILN_ASSIGN(Tensor dq_acc,
                rt.empty(ElemType::F32, {p.seqs, p.hq, std::max<int64_t>(p.rows_q, 1), p.D}));
    if (!detail::fits_u32(dq_acc))
      return bad(
          "dQ's f32 sums would reach past 2^32 elements (KILN_ATTENTION_CPU_BACKWARD=walks "
          "needs none)");
    KILN_ASSIGN(const Kernel all, rt.kernel("attention_bwd_cpu"));
    return rt.launch(all, Dim3(1u, u(p.seqs * p.hk)), Dim3(u(lanes)), q.as_read_only(),
                     k.as_read_only(), v.as_read_only(), dout.as_read_only(), lse.as_read_only(),
                     delta_r, p.bias, p.cu_q, p.cu_k, dq, dk, dv, dq_acc, scale_log2, scale,
                     u(p.hk), u(p.hq / p.hk), static_cast<int32_t>(p.left),
                     static_cast<int32_t>(p.right), p.bs[0], p.bs[1], p.bs[2], p.bs[3],
                     static_cast<int>(p.D), lanes, block, o.bias != nullptr, p.varlen);
  }
  if (p.rows_k > 0) {
    KILN_ASSIGN(const Kernel dkdv, rt.kernel("attention_bwd_dkdv_cpu"));
    KILN_TRY(rt.launch(dkdv, Dim3(u(kblocks), u(p.seqs * p.hk)), Dim3(u(lanes)), q.as_read_only(),
                       k.as_read_only(), v.as_read_only(), dout.as_read_only(), lse.as_read_only(),
                       delta_r, p.bias, p.cu_q, p.cu_k, dk, dv, scale_log2, scale, u(p.hk),
                       u(p.hq / p.hk), static_cast<int32_t>(p.left), static_cast<int32_t>(p.right),
                       p.bs[0], p.bs[1], p.bs[2], p.bs[3], static_cast<int>(p.D), lanes, block,
                       o.bias != nullptr, p.varlen));
  }
  if (p.rows_q == 0) return Status{};
  KILN_ASSIGN(const Kernel dqk, rt.kernel("attention_bwd_dq_cpu"));
  return rt.launch(dqk, Dim3(u(qblocks), u(p.seqs * p.hq)), Dim3(u(lanes)), q.as_read_only(),
                   k.as_read_only(), v.as_read_only(), dout.as_read_only(), lse.as_read_only(),
                   delta_r, p.bias, p.cu_q, p.cu_k, dq, scale_log2, scale, u(p.hq), u(p.hq / p.hk),
                   static_cast<int32_t>(p.left), static_cast<int32_t>(p.right), p.bs[0], p.bs[1],
                   p.bs[2], p.bs[3], static_cast<int>(p.D), lanes, block, o.bias != nullptr,
                   p.varlen);
}

}  // namespace

Status attention(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionOptions& o) {
  KILN_ASSIGN(const Problem p, check(rt, q, k, v, o));
  KILN_TRY(check_like(out, "out", q, "q", true, true));
  Tensor lse;
  if (o.lse) {
    KILN_TRY(check_lse(*o.lse, p, true));
    lse = *o.lse;
  } else {
    KILN_ASSIGN(lse, rt.empty(ElemType::F32, {1, 1, 1}));
  }
  // The decode path (attention_decode.cpp): a group's queries fill a plane's 16 rows and the
  // cache is split into parts, walked in parallel and combined: taken when the group's queries
  // fit the rows, the cache is long, and each query row of q is one stride from the last.
  const bool empty = p.seqs == 0 || p.hq == 0 || p.rows_q == 0;
  const int64_t group = p.hq / p.hk;
  const bool rows_uniform = p.sq == 1 || q.stride(1) == p.sq * q.stride(2);
  const bool decode =
      !empty && !p.varlen && p.sq * group <= 16 && p.sk >= 512 && rows_uniform &&
      (q.dtype() != ElemType::F32 || rt.device().lane_units) &&
      (!rt.device().lane_units || p.D % std::max(1, rt.max_lanes(ElemType::F32)) == 0);
  if (rt.device().lane_units && !decode) return attention_cpu(rt, q, k, v, out, lse, p, o);
  const int planes = 4;
  // On a GPU, O of head_dim 256 (128 registers per unit) is split between cubes, each computing
  // S again: in one, it spills (in two, still on sm_100a and sm_120a, which keep Q resident).
  const int o_split = rt.device().lane_units || p.D <= 128 ? 1 : newer_arch(rt) ? 4 : 2;
  if (decode) return attention_decode(rt, q, k, v, out, lse, p, o, o_split);
  KILN_TRY(check_grid(p.seqs * p.hq, p.rows_q, planes, "Hq", "Sq"));
  if (o.plan)
    *o.plan = {"attention_fwd",
               fmt::format("16 queries per plane x {} planes, keys in blocks of 32{}", planes,
                           o_split > 1 ? fmt::format(", O split in {} cubes", o_split) : ""),
               "flash attention on matrix fragments, S and P kept where the multiply leaves them"};
  if (empty) return Status{};
  KILN_ASSIGN(const Kernel kernel, rt.kernel("attention_fwd"));
  const int64_t blocks = (p.rows_q + 16 * planes - 1) / (16 * planes);
  return rt.launch(kernel, Dim3(u(blocks), u(p.seqs * p.hq), u(o_split)), Dim3(u(32 * planes)),
                   q.as_read_only(), k.as_read_only(), v.as_read_only(), out, p.bias, lse, p.cu_q,
                   p.cu_k, static_cast<float>(p.scale * 1.4426950408889634), u(p.hq),
                   u(p.hq / p.hk), static_cast<int32_t>(p.left), static_cast<int32_t>(p.right),
                   p.bs[0], p.bs[1], p.bs[2], p.bs[3], static_cast<int>(p.D), planes, o_split,
                   o.bias != nullptr, o.lse != nullptr, p.varlen);
}

namespace {

// attention_backward's work; its refusals, made by the checks it shares with the forward, say
// "kiln::lib::attention:" (the wrapper below names the backward instead).
Status backward(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                const Tensor& dout, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                const AttentionOptions& o) {
  KILN_ASSIGN(const Problem p, check(rt, q, k, v, o));
  KILN_TRY(check_like(out, "out", q, "q", false, true));
  KILN_TRY(check_like(dout, "dout", q, "q", false, false));
  KILN_TRY(check_lse(lse, p, false));
  KILN_TRY(check_like(dq, "dq", q, "q", true, true));
  KILN_TRY(check_like(dk, "dk", k, "k", true, true));
  KILN_TRY(check_like(dv, "dv", k, "k", true, true));
  if (dk.dtype() != dq.dtype() || dv.dtype() != dq.dtype())
    return bad(fmt::format("dq, dk and dv must hold one type; got {}, {} and {}",
                           ir::elem_name(dq.dtype()), ir::elem_name(dk.dtype()),
                           ir::elem_name(dv.dtype())));
  if (rt.device().lane_units)
    return attention_backward_cpu(rt, q, k, v, out, dout, lse, dq, dk, dv, p, o);
  const int planes = 4;
  const detail::AttentionBackwardShape shape =
      detail::attention_backward_shape(rt.device().arch, p.D);
  KILN_TRY(check_grid(p.seqs * p.hq, p.rows_q, planes, "Hq", "Sq"));
  KILN_TRY(check_grid(p.seqs * p.hk, p.rows_k, planes, "Hk", "Sk"));
  if (o.plan)
    *o.plan = {"attention_bwd_dkdv + attention_bwd_dq",
               fmt::format("16 keys (queries) per plane x {} planes, queries in blocks of {} "
                           "(keys of 32){}",
                           planes, shape.qblock, shape.describe()),
               "FlashAttention-2's backward without atomics: P recomputed from the log-sum-exp, "
               "once for dK and dV and once for dQ"};
  // With no queries (keys) dK and dV (dQ) are 0: the kernels store them from empty walks.
  if (p.seqs == 0 || p.hq == 0) return Status{};
  KILN_ASSIGN(const Tensor delta_r, row_sums(rt, out, dout, p));
  const float scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
  const auto scale = static_cast<float>(p.scale);
  KILN_ASSIGN(const Kernel dkdv, rt.kernel("attention_bwd_dkdv"));
  if (p.rows_k > 0)
    KILN_TRY(rt.launch(
        dkdv,
        Dim3(u((p.rows_k + 16 * planes - 1) / (16 * planes)), u(p.seqs * p.hk), u(shape.kv_split)),
        Dim3(u(32 * planes)), q.as_read_only(), k.as_read_only(), v.as_read_only(),
        dout.as_read_only(), lse.as_read_only(), delta_r, p.bias, p.cu_q, p.cu_k, dk, dv,
        scale_log2, scale, u(p.hk), u(p.hq / p.hk), static_cast<int32_t>(p.left),
        static_cast<int32_t>(p.right), p.bs[0], p.bs[1], p.bs[2], p.bs[3], static_cast<int>(p.D),
        planes, shape.kv_split, shape.qblock, shape.kv_keep, o.bias != nullptr, p.varlen));
  KILN_ASSIGN(const Kernel dqk, rt.kernel("attention_bwd_dq"));
  if (p.rows_q == 0) return Status{};
  return rt.launch(
      dqk,
      Dim3(u((p.rows_q + 16 * planes - 1) / (16 * planes)), u(p.seqs * p.hq), u(shape.q_split)),
      Dim3(u(32 * planes)), q.as_read_only(), k.as_read_only(), v.as_read_only(),
      dout.as_read_only(), lse.as_read_only(), delta_r, p.bias, p.cu_q, p.cu_k, dq, scale_log2,
      scale, u(p.hq), u(p.hq / p.hk), static_cast<int32_t>(p.left), static_cast<int32_t>(p.right),
      p.bs[0], p.bs[1], p.bs[2], p.bs[3], static_cast<int>(p.D), planes, shape.q_split,
      shape.q_keep, o.bias != nullptr, p.varlen);
}

}  // namespace

Status attention_backward(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& dout, const Tensor& lse, Tensor& dq,
                          Tensor& dk, Tensor& dv, const AttentionOptions& o) {
  Status s = backward(rt, q, k, v, out, dout, lse, dq, dk, dv, o);
  if (s.ok()) return s;
  Error e = s.error();
  const std::string_view forward = "kiln::lib::attention:";
  if (std::string_view(e.message).starts_with(forward))
    e.message = "kiln::lib::attention_backward:" + e.message.substr(forward.size());
  return e;
}

namespace detail {

AttentionBackwardShape attention_backward_shape(std::string_view arch, int64_t head_dim) {
  AttentionBackwardShape s;
  if (arch.empty()) return s;
  s.qblock = 16;
  // Per architecture and head size: dK/dV's split and keep, dQ's split and keep. Measured with
  // `kiln show --emit resources` over every split and keep (bf16 in, f32 gradients), with and
  // without a bias and with variable lengths: the first configuration, by fewest splits, that
  // assembles without spills in all three; where none does, the one without spills for fixed
  // lengths, else the fewest bytes (tests/compiler/cuda/test_cuda_compile.cpp bounds what
  // remains: sm_100a's and sm_120a's ptxas at head sizes 96 and 256, and up to 128 bytes with
  // variable lengths on some targets).
  struct Row {
    int arch;
    int64_t d;
    int kv_split;
    bool kv_keep;
    int q_split;
    bool q_keep;
  };
  static constexpr Row kRows[] = {
      {80, 32, 1, true, 1, true},    {80, 64, 1, false, 1, true},   {80, 96, 3, true, 1, false},
      {80, 128, 4, true, 2, false},  {80, 256, 8, false, 4, false}, {89, 32, 1, true, 1, true},
      {89, 64, 1, true, 1, true},    {89, 96, 1, false, 1, false},  {89, 128, 2, false, 1, false},
      {89, 256, 4, false, 2, false}, {90, 32, 1, true, 1, true},    {90, 64, 1, true, 1, true},
      {90, 96, 3, true, 3, true},    {90, 128, 2, false, 1, false}, {90, 256, 4, false, 2, false},
      {100, 32, 1, true, 1, true},   {100, 64, 1, true, 1, true},   {100, 96, 3, true, 1, true},
      {100, 128, 4, true, 1, true},  {100, 256, 8, true, 8, true},  {120, 32, 1, true, 1, false},
      {120, 64, 1, true, 2, true},   {120, 96, 1, true, 1, true},   {120, 128, 4, true, 4, true},
      {120, 256, 8, true, 8, true},
  };
  // An architecture not measured takes the rows of the nearest measured one below it
  // (sm_86: sm_80's); a head size not measured (160 to 224), the next larger one's, with the
  // split brought down to one that divides its columns.
  int number = 80;
  if (arch.starts_with("sm_")) {
    number = 0;
    for (char c : arch.substr(3)) {
      if (c < '0' || c > '9') break;
      number = number * 10 + (c - '0');
    }
  }
  int family = 80;
  for (const Row& r : kRows)
    if (r.arch <= number) family = r.arch;
  auto fit = [&](int split) {
    while (split > 1 && head_dim % (32 * split) != 0) --split;
    return split;
  };
  for (const Row& r : kRows)
    if (r.arch == family && head_dim <= r.d) {
      s.kv_split = fit(r.kv_split), s.kv_keep = r.kv_keep;
      s.q_split = fit(r.q_split), s.q_keep = r.q_keep;
      return s;
    }
  return s;
}

std::string AttentionBackwardShape::describe() const {
  std::string s;
  if (kv_split > 1) s += fmt::format(", dK and dV split in {} cubes", kv_split);
  if (q_split > 1) s += fmt::format(", dQ split in {} cubes", q_split);
  return s;
}

}  // namespace detail

}  // namespace kiln::lib
