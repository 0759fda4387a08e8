// Fused attention from the host: kiln::lib::attention computes
// O = softmax(Q K^T * scale + bias, masked) V on any device, flash-style (no S or P in memory),
// with PyTorch's scaled_dot_product_attention semantics. docs/kernels.md "Attention".
//
//   kiln::lib::AttentionOptions o{.causal = true};
//   KILN_TRY(kiln::lib::attention(rt, q, k, v, out, o));
//
// q is [B, Hq, Sq, D], k [B, Hk, Sk, D] and v [B, Hk, Sk, D], in any strides whose last one is 1
// (BHSD, or BSHD as a permuted view); Hq a multiple of Hk (grouped-query and multi-query
// attention: query head h reads key/value head h / (Hq / Hk)); D a multiple of 32 up to 256
// (32, 64, 96, 128, 256). q, k and v hold f16 or bf16 (the same), or on the CPU f32; out
// [B, Hq, Sq, D] holds their type or f32. Products and sums in f32 (on GPUs P rounded to the
// input type before P V, as FlashAttention does; the CPU keeps it in f32).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/lib/matmul.h"
#include "runtime/runtime.h"

namespace kiln::lib {

struct AttentionOptions {
  double scale = 0;  // of Q K^T; 0: 1 / sqrt(D)
  // Masks, with the last query aligned to the last key (PyTorch's and FlashAttention's
  // convention when Sq != Sk): query i sees key j when j <= i + Sk - Sq (causal) and, with a
  // window, when i + Sk - Sq - window_left <= j <= i + Sk - Sq + window_right (-1: no bound on
  // that side). causal is window_right = 0.
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
  // An additive bias (or mask, -inf where a key is not seen), f32 [B or 1, Hq or 1, Sq, Sk]:
  // added to the scaled scores; size-1 dimensions are broadcast.
  const Tensor* bias = nullptr;
  // Receives the natural log-sum-exp of each row of scaled scores, f32 [B, Hq, Sq] (what the
  // backward pass recomputes the probabilities from); +inf for a row that sees no key (whose
  // output is 0).
  Tensor* lse = nullptr;
  // Variable sequence lengths (FlashAttention's varlen, as packed training batches use): every
  // sequence in q's, k's and v's one item ([1, H, total rows, D]; THD data [total, H, D] as the
  // view permute(1, 0, 2) with a leading 1), sequence b in rows cu_seqlens_q[b] ..
  // cu_seqlens_q[b + 1] - 1 of q (and out, lse) and cu_seqlens_k[b] .. of k and v: i32
  // [sequences + 1], starting at 0, non-decreasing; a sequence may be empty; rows after the last
  // offset are not written. max_seqlen_q/k: the longest sequences (0: read from the offsets).
  // The offsets are read and checked on the CPU, and on a GPU when a longest length is not
  // given (a wait for the stream); a GPU given both reads nothing and clamps each offset into
  // the tensors' rows. No bias with variable lengths.
  const Tensor* cu_seqlens_q = nullptr;
  const Tensor* cu_seqlens_k = nullptr;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  MatmulPlan* plan = nullptr;  // receives the kernel the call chose
};

// out = attention(q, k, v), asynchronous on the runtime's stream.
Status attention(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionOptions& options = {});

// The backward pass: given the forward's q, k, v, its out and log-sum-exp (options.lse of the
// forward call) and dout, the gradient of a loss with respect to out, computes the gradients dq,
// dk and dv of the loss with respect to q, k and v (FlashAttention-2's algorithm: the
// probabilities recomputed from lse, no S or P in memory; deterministic: no atomics, dK and dV
// of a key head summed over its query heads in a fixed order). The options must be the
// forward's (options.lse is not read). dout holds the inputs' type, out the inputs' type or
// f32; dq (q's shape), dk and dv (k's shape) hold one type, the inputs' or f32. A bias gets no
// gradient. Asynchronous on the runtime's stream.
Status attention_backward(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& dout, const Tensor& lse, Tensor& dq,
                          Tensor& dk, Tensor& dv, const AttentionOptions& options = {});

namespace detail {

// How attention_backward's fragment kernels hold their operands on a GPU target (the CPU runs
// kernels of its own; arch "" gives the unsplit shape): the largest configuration whose registers
// ptxas assembles without spills, measured per architecture (docs/kernels.md "Attention"): the
// gradients' columns split between cubes (each computing S and dP again) where the accumulators
// alone would not fit, Q, K, V and dO kept in registers for a whole walk (keep) or loaded again at
// each multiply, and blocks of qblock queries per step of the dK/dV walk. sm_100a's and sm_120a's
// ptxas spill heavily when the fragments are loaded again, so there they are kept and the columns
// split instead.
struct AttentionBackwardShape {
  int kv_split = 1, q_split = 1, qblock = 32;
  bool kv_keep = true, q_keep = true;
  std::string describe() const;
};
AttentionBackwardShape attention_backward_shape(std::string_view arch, int64_t head_dim);

}  // namespace detail

}  // namespace kiln::lib
