// Softmax and normalizations along the last axis, from the host: each picks the kernel's
// configuration and grid on any device. docs/kernels.md "Softmax and norms".
//
//   KILN_TRY(kiln::lib::softmax(rt, x, y));
//   KILN_TRY(kiln::lib::layer_norm(rt, x, y, {.weight = &gamma, .bias = &beta, .eps = 1e-5f}));
//
// x and y have the same shape (rank 1 to 5; the rows are every index of the leading dimensions)
// and type, f32, f16 or bf16; any strides (a view is read and written where it is; y may be x
// for an in-place update). Sums, maxima and the arithmetic are f32; y is rounded once. The
// semantics are PyTorch's (torch.softmax, log_softmax, layer_norm, rms_norm):
// - softmax(x)_j = exp(x_j - max x) / sum_k exp(x_k - max x); log_softmax = x_j - max x -
//   log(sum ...). A row holding NaN, or +inf, or only -inf, gives NaN throughout.
// - layer_norm: (x - mean) / sqrt(var + eps) * weight + bias, var the biased (population)
//   variance; rms_norm: x / sqrt(mean(x^2) + eps) * weight. weight and bias are [C] (the last
//   dimension), of x's type, optional. NaN or inf in a row gives NaN throughout.
#pragma once

#include "ir/result.h"
#include "runtime/runtime.h"

namespace kiln::lib {

Status softmax(Runtime& rt, const Tensor& x, Tensor& y);
Status log_softmax(Runtime& rt, const Tensor& x, Tensor& y);

struct NormOptions {
  const Tensor* weight = nullptr;  // [C], multiplies each row; none: 1
  const Tensor* bias = nullptr;    // [C], added (layer_norm only); none: 0
  float eps = 1e-5f;               // added to the variance (or mean square) before the root
};

Status layer_norm(Runtime& rt, const Tensor& x, Tensor& y, const NormOptions& options = {});
Status rms_norm(Runtime& rt, const Tensor& x, Tensor& y, const NormOptions& options = {});

}  // namespace kiln::lib
