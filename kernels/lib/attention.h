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
// (32, 64, 96, 128, 256). q, k and v hold f16 or bf16 (the same); out [B, Hq, Sq, D] holds
// their type or f32. Products and sums in f32 (P rounded to the input type before P V, as
// FlashAttention does).
#pragma once

#include <cstdint>

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
  MatmulPlan* plan = nullptr;  // receives the kernel the call chose
};

// out = attention(q, k, v), asynchronous on the runtime's stream.
Status attention(Runtime& rt, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionOptions& options = {});

}  // namespace kiln::lib
