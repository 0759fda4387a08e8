// 2-d pooling from the host: kiln::lib::max_pool2d and avg_pool2d pick the kernel, its
// configuration and the grid on any device. docs/kernels.md "Pooling".
//
//   kiln::lib::Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
//   KILN_ASSIGN(auto shape, kiln::lib::pool2d_output_shape(in.shape(), o));
//   KILN_ASSIGN(Tensor out, rt.empty(in.dtype(), shape));
//   KILN_TRY(kiln::lib::max_pool2d(rt, in, out, o));                     // values only
//   KILN_TRY(kiln::lib::max_pool2d(rt, in, out, o, &indices));           // and i64 argmax
//
// `in` is [N, C, H, W] (Layout::Nchw) or [N, H, W, C] (Layout::Nhwc), or the same without N;
// `out` (and `indices`) the same with the output's height and width. Any strides: a view is read
// and written where it is. f32, f16 and bf16; max pooling is exact and average pooling sums in
// f32, rounding once. The semantics are PyTorch's (torch.nn.functional.max_pool2d/avg_pool2d):
// - output size floor((H + 2 padding - dilation (kernel - 1) - 1) / stride) + 1, or with
//   ceil_mode rounded up, dropping a last window that would start in the right padding;
// - padding at most half the kernel; padded positions never win a max and, for averages, count
//   toward the divisor only with count_include_pad;
// - a NaN in a window makes the maximum NaN; indices[...] = iy * W + ix of the maximum within its
//   plane, the first one in row-major order on ties and the last NaN when there are NaNs.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "ir/result.h"
#include "runtime/runtime.h"

namespace kiln::lib {

enum class Layout {
  Nchw,  // [N, C, H, W]: rows along W contiguous (PyTorch's default)
  Nhwc,  // [N, H, W, C]: channels contiguous (PyTorch's channels_last)
};

struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2};  // height, width
  std::array<int64_t, 2> stride{0, 0};  // 0: the kernel's size
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // max pooling only
  bool ceil_mode = false;
  Layout layout = Layout::Nchw;
  bool count_include_pad = true;  // average pooling: padded positions count in the divisor
  int64_t divisor = 0;            // average pooling: nonzero replaces the divisor
};

// The shape of the output for an input of shape `in` (rank 3 or 4, in the options' layout), or
// an error naming the option that does not fit.
Result<std::vector<int64_t>> pool2d_output_shape(std::span<const int64_t> in,
                                                 const Pool2dOptions& options);

// out = the maximum of each window; with `indices` (i64, out's shape) also where it is.
Status max_pool2d(Runtime& rt, const Tensor& in, Tensor& out, const Pool2dOptions& options,
                  Tensor* indices = nullptr);
// out = the mean of each window (see count_include_pad and divisor).
Status avg_pool2d(Runtime& rt, const Tensor& in, Tensor& out, const Pool2dOptions& options);

}  // namespace kiln::lib
