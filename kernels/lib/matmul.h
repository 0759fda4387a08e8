// Matrix products from the host: kiln::lib::matmul computes C = alpha op(A) op(B) + beta C on any
// device, picking the kernels, their configuration and the grid. docs/kernels.md "Matmul".
//
//   KILN_TRY(kiln::lib::matmul(rt, a, b, c));                          // C = A B
//   KILN_TRY(kiln::lib::matmul(rt, x, w, y, {.transpose_b = true, .bias = &bias,
//                                            .epilogue = kiln::lib::Epilogue::Relu}));
//
// A is [..., M, K], B [..., K, N] (with transposes: [..., K, M] and [..., N, K]), C [..., M, N].
// The batch dimensions (at most three) broadcast as NumPy's do: each of A's and B's is 1 or
// C's. Any strides: a transposed or sliced view is read as it is. A and B hold the same type,
// f32, f16, bf16, f8e4m3 or f8e5m2; C holds f32 or that type (f32, f16 or bf16 for 8-bit
// inputs, which come with per-tensor scales). Products and sums are f32 (16- and 8-bit inputs
// are exact in f32), rounded once to C's type at the end.
#pragma once

#include <string>

#include "ir/result.h"
#include "runtime/runtime.h"

namespace kiln::lib {

// What is applied to each element of alpha A B + beta C (+ bias) before it is stored.
enum class Epilogue {
  None,
  Relu,  // max(x, 0)
  Gelu,  // GELU's tanh form: x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
  Silu,  // x sigmoid(x) = x / (1 + exp(-x))
};

// Which kernel a call ran, with what configuration and why: MatmulOptions::plan receives it
// (`kiln run matmul` prints it).
struct MatmulPlan {
  std::string kernel;  // "matmul_sm90"
  std::string config;  // "128x128x64 tiles, 4 stages, a producer plane"
  std::string why;     // "the device has TMA and wgmma (sm_90a)"
};

struct MatmulOptions {
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: C is only written (NaN in C does not propagate), as BLAS does
  // Per-tensor scales of A and B (the dequantization factors of 8-bit inputs, as
  // torch._scaled_mm's): C = alpha scale_a scale_b op(A) op(B) + beta C. Any input type.
  float scale_a = 1.0f;
  float scale_b = 1.0f;
  bool transpose_a = false;
  bool transpose_b = false;
  const Tensor* bias = nullptr;  // f32 [N], added to every row before the epilogue
  Epilogue epilogue = Epilogue::None;
  // On a GPU, f32 inputs multiplied on the tensor cores as tf32 (10-bit mantissas, as
  // PyTorch's allow_tf32); otherwise f32 FMAs. The CPU always multiplies f32 exactly.
  bool allow_tf32 = false;
  // On a GPU's tensor-core paths, a product of few tiles may have its K split into parts
  // computed in parallel and summed (in a fixed order) before the epilogue: 0 lets the library
  // decide (when one product leaves more than half of the SMs idle), 1 never splits, N splits
  // into N parts (at most one per 64 of K). One product only: a batch is never split. The CPU
  // does not split.
  int split_k = 0;
  // When set, receives the kernel the call chose (after tuning) and its configuration.
  MatmulPlan* plan = nullptr;
};

// Asynchronous on the runtime's stream, as launches are; the packed copies of A and B it makes
// on the device are freed when the launches are done.
Status matmul(Runtime& rt, const Tensor& a, const Tensor& b, Tensor& c,
              const MatmulOptions& options = {});

// Products of different sizes in one call, as a mixture-of-experts layer makes them: A's and
// C's rows come in G groups, and group g's rows are multiplied by B's item g:
//
//   C[s_g : e_g] = alpha scale_a scale_b A[s_g : e_g] op(B[g]) + beta C[s_g : e_g]   (+ bias)
//
// with e_g = offsets[g] and s_g = e_{g-1} (s_0 = 0): `offsets` holds the groups' cumulative
// ends (i32 [G] on A's device, as torch._grouped_mm's offs), so a group may be empty. A is
// [T, K], B [G, K, N] ([G, N, K] with transpose_b), C [T, N], any strides; the bias f32 [N] or
// [G, N] (a row per group). Rows of C past offsets[G - 1] are not written. Types, alpha, beta,
// the scales, the epilogue and allow_tf32 as matmul's; transpose_a and split_k do not apply.
//
// On a GPU, one launch (the offsets stay on the device, nothing waits for them) with the
// path matmul takes there (docs/kernels.md "Grouped products"); a GPU cannot check the offsets
// without waiting, so each end is clamped into [the end before, T]: bad offsets never read or
// write outside the tensors, but their groups are not what was meant. On the CPU, one product
// per group, after the offsets are read and checked (an error names a bad one).
Status grouped_matmul(Runtime& rt, const Tensor& a, const Tensor& b, const Tensor& offsets,
                      Tensor& c, const MatmulOptions& options = {});

}  // namespace kiln::lib
