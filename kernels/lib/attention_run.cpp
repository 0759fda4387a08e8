// `kiln run attention`: kiln::lib::attention (attention.h) through its entry point on random
// inputs against a double reference, out and the log-sum-exp both checked.
// --shape q=BxHqxSqxD --shape k=BxHkxSkxD (v as k; out as q); --set causal=1, window_left=N,
// window_right=N (-1: unbounded), scale=X (0: 1/sqrt(D)), use_bias=1 (an f32 [1, Hq, Sq, Sk]
// bias, broadcast over B), bshd=1 (q, k, v and out as BSHD buffers, passed as permuted views),
// sequences=N (variable lengths: q's and k's rows, of one batch item, cut into N sequences at
// fixed pseudo-random places, some of them empty, passed as cu_seqlens_q and cu_seqlens_k).
// `kiln run attention_backward`: the forward (for out and the log-sum-exp), then
// kiln::lib::attention_backward, with the same shapes and settings; dq, dk and dv checked
// against the gradients of a double reference (dout random).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "kernels/lib/attention.h"
#include "kernels/lib/common.h"
#include "kernels/run.h"

namespace {

using kiln::kernels::RunData;

std::array<int64_t, 4> bhsd(const RunData& d, const char* t);

// With sequences=N, the offsets of the N sequences packed into `total` rows: N - 1 cuts at
// pseudo-random places (the same for a given N, total and salt; equal cuts make empty
// sequences), from 0 to total.
std::vector<int32_t> offsets(int64_t total, int64_t n, uint64_t salt) {
  uint64_t state = salt * 1000003u + static_cast<uint64_t>(n * 7919 + total);
  std::vector<int32_t> cu{0};
  for (int64_t s = 1; s < n; ++s) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    cu.push_back(static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(total + 1)));
  }
  std::sort(cu.begin() + 1, cu.end());
  cu.push_back(static_cast<int32_t>(total));
  return cu;
}

// The rows of q and of k of the sequence query row i belongs to (every row without sequences).
struct Seq {
  int64_t q0, q1, k0, k1;
};
Seq sequence_of(const RunData& d, int64_t i) {
  const int64_t sq = bhsd(d, "q")[2], sk = bhsd(d, "k")[2];
  const auto n = static_cast<int64_t>(d.scalar("sequences"));
  if (n <= 0) return {0, sq, 0, sk};
  const auto cq = offsets(sq, n, 1), ck = offsets(sk, n, 2);
  const auto s = static_cast<size_t>(std::upper_bound(cq.begin(), cq.end(), i) - cq.begin() - 1);
  return {cq[s], cq[s + 1], ck[s], ck[s + 1]};
}

// Whether query i sees key j (indices in their sequence of sq queries and sk keys), with the
// options of the run.
bool seen(const RunData& d, int64_t i, int64_t j, int64_t sq, int64_t sk) {
  const int64_t right =
      d.scalar("causal") != 0 ? 0 : static_cast<int64_t>(d.scalar("window_right"));
  const auto left = static_cast<int64_t>(d.scalar("window_left"));
  const int64_t diag = i + sk - sq;
  return (right < 0 || j <= diag + right) && (left < 0 || j >= diag - left);
}

// The runner's buffers are row-major in their shapes; with bshd, q's buffer is B x Sq x Hq x D
// and so on, and the element (b, h, s, c) of the BHSD view is at this flat index.
size_t at(const RunData& d, const char* t, int64_t b, int64_t h, int64_t s, int64_t c) {
  const auto& sh = d.shape(t);
  if (d.scalar("bshd") != 0) return static_cast<size_t>(((b * sh[1] + s) * sh[2] + h) * sh[3] + c);
  return static_cast<size_t>(((b * sh[1] + h) * sh[2] + s) * sh[3] + c);
}

// The BHSD dimensions of tensor t (its buffer's shape with bshd swaps S and H).
std::array<int64_t, 4> bhsd(const RunData& d, const char* t) {
  const auto& s = d.shape(t);
  if (d.scalar("bshd") != 0) return {s[0], s[2], s[1], s[3]};
  return {s[0], s[1], s[2], s[3]};
}

// The probabilities of query i of head h of item b over every key (0 where masked; all 0 for a
// row that sees no key), in double, into w; returns the row's log-sum-exp (+inf: no key).
double probabilities(const RunData& d, int64_t b, int64_t h, int64_t i, std::vector<double>& w) {
  const auto Q = bhsd(d, "q"), K = bhsd(d, "k");
  const int64_t hq = Q[1], sq = Q[2], D = Q[3], hk = K[1], sk = K[2];
  const int64_t kh = h / (hq / hk);
  const double scale =
      d.scalar("scale") != 0 ? d.scalar("scale") : 1.0 / std::sqrt(static_cast<double>(D));
  const bool use_bias = d.scalar("use_bias") != 0;
  const auto &q = d["q"], &k = d["k"], &bias = d["bias"];
  const Seq r = sequence_of(d, i);
  w.assign(static_cast<size_t>(sk), 0.0);
  double mx = -INFINITY;
  for (int64_t j = 0; j < sk; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < D; ++c) dot += q[at(d, "q", b, h, i, c)] * k[at(d, "k", b, kh, j, c)];
    double s = dot * scale;
    if (use_bias) s += bias[static_cast<size_t>((h * sq + i) * sk + j)];
    const bool mine = j >= r.k0 && j < r.k1;
    w[size_t(j)] = mine && seen(d, i - r.q0, j - r.k0, r.q1 - r.q0, r.k1 - r.k0) ? s : -INFINITY;
    mx = std::max(mx, w[size_t(j)]);
  }
  double sum = 0;
  for (int64_t j = 0; j < sk; ++j) {
    w[size_t(j)] = mx == -INFINITY ? 0.0 : std::exp(w[size_t(j)] - mx);
    sum += w[size_t(j)];
  }
  if (sum > 0)
    for (double& x : w) x /= sum;
  return sum > 0 ? mx + std::log(sum) : INFINITY;
}

// dq, dk and dv of sum(out * dout): with P the probabilities, dP = dout V^T, delta_i =
// sum_j P_ij dP_ij, dS = P (dP - delta): dq = scale dS K, dk = scale dS^T Q, dv = P^T dout (dk
// and dv summed over the query heads that share a key head).
void backward_reference(RunData& d) {
  const auto Q = bhsd(d, "q"), K = bhsd(d, "k");
  const int64_t B = Q[0], hq = Q[1], sq = Q[2], D = Q[3], hk = K[1], sk = K[2];
  const double scale =
      d.scalar("scale") != 0 ? d.scalar("scale") : 1.0 / std::sqrt(static_cast<double>(D));
  const auto &q = d["q"], &k = d["k"], &v = d["v"], &dout = d["dout"];
  std::vector<double> dq(d["dq"].size(), 0.0), dk(d["dk"].size(), 0.0), dv(d["dv"].size(), 0.0);
  std::vector<double> w, dp(static_cast<size_t>(sk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hk);
      for (int64_t i = 0; i < sq; ++i) {
        probabilities(d, b, h, i, w);
        double delta = 0;
        for (int64_t j = 0; j < sk; ++j) {
          double x = 0;
          for (int64_t c = 0; c < D; ++c)
            x += dout[at(d, "dout", b, h, i, c)] * v[at(d, "v", b, kh, j, c)];
          dp[size_t(j)] = x;
          delta += w[size_t(j)] * x;
        }
        for (int64_t j = 0; j < sk; ++j) {
          const double p = w[size_t(j)];
          if (p == 0) continue;
          const double ds = p * (dp[size_t(j)] - delta) * scale;
          for (int64_t c = 0; c < D; ++c) {
            dq[at(d, "dq", b, h, i, c)] += ds * k[at(d, "k", b, kh, j, c)];
            dk[at(d, "dk", b, kh, j, c)] += ds * q[at(d, "q", b, h, i, c)];
            dv[at(d, "dv", b, kh, j, c)] += p * dout[at(d, "dout", b, h, i, c)];
          }
        }
      }
    }
  for (const auto& [name, g] : {std::pair{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}) {
    auto& t = d[name];
    for (size_t e = 0; e < t.size(); ++e) t[e] = d.round(name, (*g)[e]);
  }
}

// out and the log-sum-exp, from the probabilities.
void reference(RunData& d) {
  const auto Q = bhsd(d, "q"), K = bhsd(d, "k");
  const int64_t B = Q[0], hq = Q[1], sq = Q[2], D = Q[3], hk = K[1], sk = K[2];
  const auto& v = d["v"];
  auto& out = d["out"];
  auto& lse = d["lse"];
  std::vector<double> w;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hk);
      for (int64_t i = 0; i < sq; ++i) {
        lse[static_cast<size_t>((b * hq + h) * sq + i)] = probabilities(d, b, h, i, w);
        for (int64_t c = 0; c < D; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < sk; ++j) acc += w[size_t(j)] * v[at(d, "v", b, kh, j, c)];
          out[at(d, "out", b, h, i, c)] = d.round("out", acc);
        }
      }
    }
}

// A BSHD buffer as the BHSD view attention takes.
kiln::Result<kiln::Tensor> as_bhsd(const kiln::Tensor& t, bool bshd) {
  if (!bshd) return t;
  return t.transpose(1, 2);
}

kiln::lib::AttentionOptions options(const RunData& d, const kiln::Tensor& bias) {
  kiln::lib::AttentionOptions o;
  o.scale = d.scalar("scale");
  o.causal = d.scalar("causal") != 0;
  o.window_left = static_cast<int64_t>(d.scalar("window_left"));
  o.window_right = static_cast<int64_t>(d.scalar("window_right"));
  if (d.scalar("use_bias") != 0) o.bias = &bias;  // [1, Hq, Sq, Sk]: broadcast over the batch
  return o;
}

// What both operations take: the (input, output) types (the inputs' type or f32 out; f32 in on
// the CPU), their scalars, and 4-d shapes.
void add_types_and_scalars(kiln::kernels::HostOp& op, int inputs) {
  using kiln::ir::ElemType;
  for (const auto& [in, out] : {std::pair{ElemType::BF16, ElemType::BF16},
                                {ElemType::F16, ElemType::F16},
                                {ElemType::BF16, ElemType::F32},
                                {ElemType::F16, ElemType::F32},
                                {ElemType::F32, ElemType::F32}}) {
    std::vector<ElemType> types(static_cast<size_t>(inputs), in);
    types.push_back(ElemType::F32);  // the bias
    if (inputs == 3) {
      types.insert(types.end(), {out, ElemType::F32});  // out, lse
    } else {
      types.insert(types.end(), {out, out, out});  // dq, dk, dv
    }
    op.variants.push_back(types);
  }
  for (const char* s : {"causal", "use_bias", "bshd"}) op.scalars.push_back({s, ElemType::Bool});
  for (const char* s : {"window_left", "window_right", "scale", "sequences"})
    op.scalars.push_back({s, ElemType::F32});
}

// With sequences=N: the offsets of q's and k's sequences (offsets()) as i32 tensors, into o.
kiln::Status pack_sequences(kiln::Runtime& rt, const RunData& d, const kiln::Tensor& q,
                            const kiln::Tensor& k, kiln::Tensor& cu_q, kiln::Tensor& cu_k,
                            kiln::lib::AttentionOptions& o) {
  const double given = d.scalar("sequences");
  if (given != std::floor(given) || given < 0 || given > 65535)
    return kiln::Error(kiln::ErrorKind::InvalidArgument,
                       fmt::format("sequences={}: a count of sequences from 1 to 65535 (0: one "
                                   "sequence per batch item, no offsets)",
                                   given));
  const auto n = static_cast<int64_t>(given);
  if (n == 0) return kiln::Status{};
  if (q.shape(0) != 1)
    return kiln::Error(kiln::ErrorKind::InvalidArgument,
                       fmt::format("sequences={} packs the sequences in one batch item; q's "
                                   "batch is {} (--shape q=1xHxROWSxD)",
                                   n, q.shape(0)));
  for (auto [t, cu, rows, salt] : {std::tuple{&cu_q, &o.cu_seqlens_q, q.shape(2), 1},
                                   std::tuple{&cu_k, &o.cu_seqlens_k, k.shape(2), 2}}) {
    const std::vector<int32_t> host = offsets(rows, n, static_cast<uint64_t>(salt));
    KILN_ASSIGN(*t, rt.empty(kiln::ir::ElemType::I32, {n + 1}));
    KILN_TRY(t->upload(std::span<const int32_t>(host)));
    *cu = t;
  }
  return kiln::Status{};
}

kiln::Status check_dims(const RunData& d, std::initializer_list<const char*> names,
                        const char* op) {
  const bool bshd = d.scalar("bshd") != 0;
  for (const char* name : names)
    if (d.shape(name).size() != 4)
      return kiln::Error(kiln::ErrorKind::InvalidArgument,
                         fmt::format("{}: {} is {}; --shape {}= takes 4 dimensions (B, H, S, D{})",
                                     op, name, kiln::lib::detail::dims(d.shape(name)), name,
                                     bshd ? "; with bshd=1: B, S, H, D" : ""));
  return kiln::Status{};
}

kiln::kernels::HostOp attention_op() {
  kiln::kernels::HostOp op;
  op.description =
      "fused attention (flash: matrix fragments on GPUs, a query per SIMD lane on the CPU): "
      "kiln::lib::attention";
  op.kernels = {"attention_fwd", "attention_fwd_cpu", "attention_decode", "attention_decode_cpu",
                "attention_decode_combine"};
  op.tensors = {{"q", true},    {"k", true},    {"v", true},
                {"bias", true}, {"out", false}, {"lse", false}};
  add_types_and_scalars(op, 3);
  op.call = [](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
               const RunData& d) -> kiln::Status {
    KILN_TRY(check_dims(d, {"q", "k", "v", "out"}, "attention"));
    const bool bshd = d.scalar("bshd") != 0;
    const kiln::Tensor bias = t.at("bias");
    kiln::lib::AttentionOptions o = options(d, bias);
    kiln::Tensor lse = t.at("lse");
    o.lse = &lse;
    kiln::lib::MatmulPlan plan;
    o.plan = &plan;
    KILN_ASSIGN(kiln::Tensor out, as_bhsd(t.at("out"), bshd));
    KILN_ASSIGN(const kiln::Tensor q, as_bhsd(t.at("q"), bshd));
    KILN_ASSIGN(const kiln::Tensor k, as_bhsd(t.at("k"), bshd));
    KILN_ASSIGN(const kiln::Tensor v, as_bhsd(t.at("v"), bshd));
    kiln::Tensor cu_q, cu_k;
    KILN_TRY(pack_sequences(rt, d, q, k, cu_q, cu_k, o));
    KILN_TRY(kiln::lib::attention(rt, q, k, v, out, o));
    d.plan = fmt::format("{}: {} ({})", plan.kernel, plan.config, plan.why);
    return kiln::Status{};
  };
  return op;
}

kiln::kernels::HostOp attention_backward_op() {
  kiln::kernels::HostOp op;
  op.description =
      "fused attention's backward (FlashAttention-2, no atomics): kiln::lib::attention, then "
      "kiln::lib::attention_backward";
  op.kernels = {"attention_fwd",          "attention_fwd_cpu",   "attention_bwd_delta",
                "attention_bwd_dkdv",     "attention_bwd_dq",    "attention_bwd_cpu",
                "attention_bwd_dkdv_cpu", "attention_bwd_dq_cpu"};
  op.tensors = {{"q", true},    {"k", true},   {"v", true},   {"dout", true},
                {"bias", true}, {"dq", false}, {"dk", false}, {"dv", false}};
  add_types_and_scalars(op, 4);
  op.call = [](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
               const RunData& d) -> kiln::Status {
    using kiln::ir::ElemType;
    KILN_TRY(check_dims(d, {"q", "k", "v", "dout", "dq", "dk", "dv"}, "attention_backward"));
    const bool bshd = d.scalar("bshd") != 0;
    const kiln::Tensor bias = t.at("bias");
    kiln::lib::AttentionOptions o = options(d, bias);
    KILN_ASSIGN(const kiln::Tensor q, as_bhsd(t.at("q"), bshd));
    KILN_ASSIGN(const kiln::Tensor k, as_bhsd(t.at("k"), bshd));
    KILN_ASSIGN(const kiln::Tensor v, as_bhsd(t.at("v"), bshd));
    KILN_ASSIGN(const kiln::Tensor dout, as_bhsd(t.at("dout"), bshd));
    kiln::Tensor cu_q, cu_k;
    KILN_TRY(pack_sequences(rt, d, q, k, cu_q, cu_k, o));
    KILN_ASSIGN(kiln::Tensor out, rt.empty(q.dtype(), q.shape()));
    KILN_ASSIGN(kiln::Tensor lse, rt.empty(ElemType::F32, {q.shape(0), q.shape(1), q.shape(2)}));
    o.lse = &lse;
    KILN_TRY(kiln::lib::attention(rt, q, k, v, out, o));
    kiln::lib::MatmulPlan plan;
    o.plan = &plan;
    KILN_ASSIGN(kiln::Tensor dq, as_bhsd(t.at("dq"), bshd));
    KILN_ASSIGN(kiln::Tensor dk, as_bhsd(t.at("dk"), bshd));
    KILN_ASSIGN(kiln::Tensor dv, as_bhsd(t.at("dv"), bshd));
    KILN_TRY(kiln::lib::attention_backward(rt, q, k, v, out, dout, lse, dq, dk, dv, o));
    d.plan = fmt::format("{}: {} ({})", plan.kernel, plan.config, plan.why);
    return kiln::Status{};
  };
  return op;
}

// B H D times the (query, key) pairs of each sequence (Sq Sk without sequences): the
// multiply-adds of one product of the pass.
double score_flops(const RunData& d) {
  const auto Q = bhsd(d, "q"), K = bhsd(d, "k");
  const auto n = static_cast<int64_t>(d.scalar("sequences"));
  double pairs = static_cast<double>(Q[2] * K[2]);
  if (n > 0) {
    const auto cq = offsets(Q[2], n, 1), ck = offsets(K[2], n, 2);
    pairs = 0;
    for (size_t s = 0; s + 1 < cq.size(); ++s)
      pairs += static_cast<double>(cq[s + 1] - cq[s]) * (ck[s + 1] - ck[s]);
  }
  return static_cast<double>(Q[0] * Q[1] * Q[3]) * pairs;
}

std::vector<int64_t> bias_shape(const RunData& d) {
  const auto Q = bhsd(d, "q"), K = bhsd(d, "k");
  return {1, Q[1], Q[2], K[2]};
}

}  // namespace

KILN_RUN(attention_backward)
    .host(attention_backward_op())
    .shape("q", {2, 4, 200, 64})
    .shape("k", {2, 2, 200, 64})
    .same_shape("v", "k")
    .same_shape("dout", "q")
    .shape("bias", bias_shape)
    .same_shape("dq", "q")
    .same_shape("dk", "k")
    .same_shape("dv", "k")
    .values("q", -1, 1)
    .values("k", -1, 1)
    .values("v", -1, 1)
    .values("dout", -1, 1)
    .values("bias", -2, 0)
    .scalar("causal", 0)
    .scalar("window_left", -1)
    .scalar("window_right", -1)
    .scalar("scale", 0)
    .scalar("use_bias", 0)
    .scalar("bshd", 0)
    .scalar("sequences", 0)
    // Both passes each call runs: the forward (4 B H Sq Sk D, per sequence) and the backward
    // (10 B H Sq Sk D: five products, the convention FlashAttention's benchmarks use; the GPUs'
    // kernels and the CPU's two walks compute seven, S and dP twice).
    .flops([](const RunData& d) { return 14.0 * score_flops(d); })
    // On GPUs P and dS are rounded to the inputs' type before their products (a relative error
    // of 2^-11 for f16, 2^-8 for bf16 in each term; the CPU keeps them in f32), out too before
    // delta, then the result's rounding: errors relative to the gradient's largest element (its
    // elements near 0 are sums that cancel). f32 inputs (the CPU) are f32 throughout.
    .tolerance([](const RunData& d, std::string_view name) -> std::pair<double, double> {
      const bool bf = d.dtype("q") == kiln::ir::ElemType::BF16;
      const bool f32 = d.dtype(name) == kiln::ir::ElemType::F32;
      double largest = 0;
      for (double x : d[name]) largest = std::max(largest, std::fabs(x));
      const double t = d.dtype("q") == kiln::ir::ElemType::F32 ? 1e-4
                       : f32                                   ? (bf ? 4e-3 : 1e-3)
                                                               : (bf ? 1e-2 : 2e-3);
      return {t, t * largest};
    })
    .reference(backward_reference);

KILN_RUN(attention)
    .host(attention_op())
    .shape("q", {2, 4, 200, 64})
    .shape("k", {2, 2, 200, 64})
    .same_shape("v", "k")
    .same_shape("out", "q")
    .shape("bias", bias_shape)
    .shape("lse",
           [](const RunData& d) {
             const auto Q = bhsd(d, "q");
             return std::vector<int64_t>{Q[0], Q[1], Q[2]};
           })
    .values("q", -1, 1)
    .values("k", -1, 1)
    .values("v", -1, 1)
    .values("bias", -2, 0)
    .scalar("causal", 0)
    .scalar("window_left", -1)
    .scalar("window_right", -1)
    .scalar("scale", 0)
    .scalar("use_bias", 0)
    .scalar("bshd", 0)
    .scalar("sequences", 0)
    .flops([](const RunData& d) { return 4.0 * score_flops(d); })
    // On GPUs P is rounded to the inputs' type before P V (a relative error of 2^-11 for f16,
    // 2^-8 for bf16 in each weight; the CPU keeps it in f32), then the output's rounding; the
    // log-sum-exp is f32 throughout, and so is everything with f32 inputs (the CPU).
    .tolerance([](const RunData& d, std::string_view name) -> std::pair<double, double> {
      if (name == "lse") return {1e-5, 1e-4};
      if (d.dtype("q") == kiln::ir::ElemType::F32) return {1e-4, 1e-5};
      const bool bf = d.dtype("q") == kiln::ir::ElemType::BF16;
      return {bf ? 2e-2 : 4e-3, bf ? 1e-2 : 2e-3};
    })
    .reference(reference);
