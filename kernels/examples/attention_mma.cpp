// attention_mma: fused attention, O = softmax(Q K^T * scale) V, flash-style on matrix fragments:
// one source for the CPU, the CUDA emulator and every GPU from sm_80 (mma.sync). Each plane owns
// 16 query rows of one head; it walks K and V in blocks of 32 keys, computing S = Q K^T into an
// accumulator, and keeps the running maximum and sum of each row (online softmax) and the
// running output O in accumulators: the softmax works on S's elements where the multiply left
// them (apply, rows_max, rows_sum), O is rescaled row by row (scale_rows), and P = exp(S - max)
// becomes the A operand of P * V without leaving the registers (convert). docs/dsl.md
// "Computing on accumulators" walks through it.
//
// q: (heads, seq_q, head_dim), k and v: (heads, seq_k, head_dim), f16 or bf16; o: f32, as q.
// With causal, query i sees keys j <= i + seq_k - seq_q (PyTorch's alignment of the last query
// with the last key); a query that sees no key gets 0.
#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "compiler/dsl/online_softmax.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void attention_mma(Tensor<const T> q, Tensor<const T> k, Tensor<const T> v, Tensor<f32> o,
                   f32 scale, int head_dim, bool causal, int planes) {
  if (head_dim % 32 != 0) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("head_dim = {}: O is kept in accumulators of 32 columns, so head_dim must be "
                    "a multiple of 32 (32, 64, 96 or 128)",
                    head_dim));
    return;
  }
  const int dc = head_dim / 32;  // 32 columns of O per accumulator
  const uint32_t d = static_cast<uint32_t>(head_dim);
  // Fragments, allocated once: Q's 16 rows (head_dim / 16 tiles of k = 16), a K block as B of
  // S = Q K^T, S itself, P as the A operand of P V, a V block as B, and O.
  std::vector<Fragment<T>> qf;
  for (int i = 0; i < head_dim / 16; ++i) qf.push_back(matrix_a<T>(16, 32, 16));
  auto kf = matrix_b<T>(16, 32, 16);
  auto s = accumulator<f32>(16, 32, 16);
  auto p = matrix_a<T>(16, 32, 32);
  auto vf = matrix_b<T>(16, 32, 32);
  std::vector<Fragment<f32>> of;
  for (int i = 0; i < dc; ++i) of.push_back(accumulator<f32>(16, 32, 32));

  u32 seq_q = q.shape(1), seq_k = k.shape(1);
  assert_(q.shape(2) == d && k.shape(2) == d && v.shape(2) == d && v.shape(1) == seq_k &&
              o.shape(1) == seq_q && o.shape(2) == d && k.shape(0) == q.shape(0) &&
              v.shape(0) == q.shape(0) && o.shape(0) == q.shape(0),
          "q, o: heads x seq_q x head_dim; k, v: heads x seq_k x head_dim");
  assert_(q.stride(1) == d && k.stride(1) == d && v.stride(1) == d && o.stride(1) == d &&
              k.stride(0) == v.stride(0),
          "each head's rows must be contiguous (strides head_dim, 1), k and v alike");
  u32 head = cube_pos_y();
  u32 q0 = (cube_pos_x() * static_cast<uint32_t>(planes) + plane_pos()) * 16u;
  u32 rows = select(q0 < seq_q, seq_q - q0, 0u);
  u32 qbase = head * q.stride(0) + q0 * d, kbase = head * k.stride(0);
  for (int i = 0; i < head_dim / 16; ++i)
    load(qf[size_t(i)], q, qbase + static_cast<uint32_t>(16 * i), d, rows, 16u);
  for (auto& f : of) fill(f, 0.0f);
  // The keys this plane's queries may see: all, or (causal) up to q0 + 15 + seq_k - seq_q.
  u32 end = seq_k;
  if (causal) end = select(q0 + 16u + seq_k > seq_q, min(seq_k, q0 + 16u + seq_k - seq_q), 0u);
  // Per row the unit holds: the running maximum (in log2 units) and sum.
  OnlineSoftmax st = online_softmax(s);
  const f32 scale_log2 = scale * 1.4426950408889634f;
  for_range(0u, end, 32u, [&](u32 key0) {
    u32 keys = min(end - key0, 32u);
    // S = Q K^T: K's rows are B's columns (a column-major tile of k).
    fill(s, 0.0f);
    for (int i = 0; i < head_dim / 16; ++i) {
      load(kf, k, kbase + key0 * d + static_cast<uint32_t>(16 * i), d, 16u, keys, Layout::Col);
      mma(s, qf[size_t(i)], kf);
    }
    // Scaled to log2 units; keys past the end (and, causal, after the query) are -inf.
    apply(s, [&](f32 x, u32 r, u32 c) {
      Val<bool> seen = c < keys;
      if (causal) seen = seen && key0 + c + seq_q <= q0 + r + seq_k;
      return select(seen, x * scale_log2, -INFINITY);
    });
    // P = exp2(S - the rows' new maxima); alpha: how far each row's maximum moved.
    auto alpha = online_softmax_step(s, st);
    // O = O * alpha + P V, P straight from S's registers.
    convert(p, s);
    for (int i = 0; i < dc; ++i) {
      scale_rows(of[size_t(i)], alpha);
      load(vf, v, kbase + key0 * d + static_cast<uint32_t>(32 * i), d, keys, 32u);
      mma(of[size_t(i)], p, vf);
    }
  });
  std::vector<f32> inv;
  for (int r = 0; r < row_count(s); ++r) {
    f32 l = st.sum[size_t(r)].get();
    inv.push_back(select(l > 0.0f, 1.0f / l, 0.0f));
  }
  for (int i = 0; i < dc; ++i) {
    scale_rows(of[size_t(i)], inv);
    store(o, head * o.stride(0) + q0 * d + static_cast<uint32_t>(32 * i), d, rows, 32u,
          of[size_t(i)]);
  }
}
KILN_KERNEL_GENERIC(attention_mma,
                    "q: rank=3, k: rank=3, v: rank=3, o: rank=3, scale, head_dim = 64 in 32..128, "
                    "causal = false, planes = 4 in 1..8",
                    f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("planes")), 1, 1};
    })
    .describe("fused attention on matrix fragments: online softmax on S's elements in registers");

KILN_RUN(attention_mma)
    .shape("q", {2, 200, 64})
    .shape("k", {2, 200, 64})
    .same_shape("v", "k")
    .same_shape("o", "q")
    .values("q", -1, 1)
    .values("k", -1, 1)
    .values("v", -1, 1)
    .scalar("scale", 0.125)
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("q", 1), 16 * d.comptime("planes")),
                        static_cast<uint32_t>(d.dim("q", 0)));
    })
    .tolerance(2e-3, 2e-3)
    .flops([](const kiln::kernels::RunData& d) {
      return 4.0 *
             static_cast<double>(d.dim("q", 0) * d.dim("q", 1) * d.dim("k", 1) * d.dim("q", 2));
    })
    .reference([](kiln::kernels::RunData& d) {
      const int64_t heads = d.dim("q", 0), sq = d.dim("q", 1), sk = d.dim("k", 1),
                    hd = d.dim("q", 2);
      const bool causal = d.comptime("causal") != 0;
      const double scale = d.scalar("scale");
      const auto &q = d["q"], &k = d["k"], &v = d["v"];
      auto& o = d["o"];
      std::vector<double> w(static_cast<size_t>(sk));
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < sq; ++i) {
          double mx = -INFINITY;
          for (int64_t j = 0; j < sk; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < hd; ++c)
              dot += q[size_t((h * sq + i) * hd + c)] * k[size_t((h * sk + j) * hd + c)];
            const bool seen = !causal || j + sq <= i + sk;
            w[size_t(j)] = seen ? dot * scale : -INFINITY;
            mx = std::max(mx, w[size_t(j)]);
          }
          double sum = 0;
          for (int64_t j = 0; j < sk; ++j) {
            w[size_t(j)] = mx == -INFINITY ? 0.0 : std::exp(w[size_t(j)] - mx);
            sum += w[size_t(j)];
          }
          for (int64_t c = 0; c < hd; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < sk; ++j) acc += w[size_t(j)] * v[size_t((h * sk + j) * hd + c)];
            o[size_t((h * sq + i) * hd + c)] = sum > 0 ? acc / sum : 0.0;
          }
        }
    });
