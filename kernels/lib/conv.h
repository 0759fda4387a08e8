// Convolutions from the host: kiln::lib::conv computes a 1-, 2- or 3-d convolution (PyTorch's
// torch.nn.functional.conv1d/2d/3d) on any device, picking the kernel and the grid.
// docs/kernels.md "Convolution".
//
//   kiln::lib::ConvOptions o{.stride = {2}, .padding = {3}, .bias = &b,
//                            .epilogue = kiln::lib::Epilogue::Relu};
//   KILN_ASSIGN(auto shape, kiln::lib::conv_output_shape(x.shape(), w.shape(), o));
//   KILN_ASSIGN(Tensor y, rt.empty(x.dtype(), shape));
//   KILN_TRY(kiln::lib::conv(rt, x, w, y, o));
//
// x is [N, C, spatial...] (Layout::Nchw) or [N, spatial..., C] (Layout::Nhwc), with 1 to 3
// spatial dimensions; w is [K, C / groups, kernel...] in PyTorch's order whatever the layout;
// y is [N, K, out...] (or [N, out..., K]). Any strides: views are read and written where they
// are. x and w hold f32, f16 or bf16 (the same); y f32 or their type; products and sums in
// f32, rounded once. Output size per dimension, as PyTorch's:
//   floor((in + pad_front + pad_back - dilation (kernel - 1) - 1) / stride) + 1.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/result.h"
#include "kernels/lib/matmul.h"
#include "kernels/lib/pool.h"
#include "runtime/runtime.h"

namespace kiln::lib {

struct ConvOptions {
  // Per spatial dimension, or one value for all of them.
  std::vector<int64_t> stride{1};
  std::vector<int64_t> padding{0};     // before each dimension (and after, unless padding_end)
  std::vector<int64_t> padding_end{};  // after each dimension; empty: as padding (symmetric)
  std::vector<int64_t> dilation{1};
  bool same = false;   // PyTorch's padding="same": y as large as x (stride 1), the extra at the end
  int64_t groups = 1;  // C and K both multiples: 1 (dense), C (depthwise), anything between
  Layout layout = Layout::Nchw;
  const Tensor* bias = nullptr;      // f32 [K]
  const Tensor* residual = nullptr;  // y's shape and type: added before the activation
  Epilogue epilogue = Epilogue::None;
  MatmulPlan* plan = nullptr;  // receives the kernel the call chose and why
};

// The shape of y for x and w of these shapes (in the options' layout), or an error naming the
// option or dimension that does not fit.
Result<std::vector<int64_t>> conv_output_shape(std::span<const int64_t> x,
                                               std::span<const int64_t> w,
                                               const ConvOptions& options);

// y = epilogue(conv(x, w) + bias + residual), asynchronous on the runtime's stream.
Status conv(Runtime& rt, const Tensor& x, const Tensor& w, Tensor& y,
            const ConvOptions& options = {});

// The backward passes of y = conv(x, w) with the same options (geometry, groups, layout; the
// bias, residual and epilogue are the forward's and are refused here: dy is the gradient that
// reaches the convolution itself). dy has y's shape.
//
// dx = d sum(y dy) / dx: the transposed convolution of dy (also conv_transpose's forward). dx's
// shape is x's, which says what a stride cannot (several inputs give one output size).
Status conv_backward_input(Runtime& rt, const Tensor& dy, const Tensor& w, Tensor& dx,
                           const ConvOptions& options = {});
// dw = d sum(y dy) / dw (w's shape) and, when given, dbias (f32 [K]) = the sum of dy over
// everything but its channels.
Status conv_backward_weight(Runtime& rt, const Tensor& x, const Tensor& dy, Tensor& dw,
                            const ConvOptions& options = {}, Tensor* dbias = nullptr);

}  // namespace kiln::lib
