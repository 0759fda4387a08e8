// What kiln::lib::conv's sources share (internal, not part of the documented API): the checked
// geometry of a convolution, its tensors as [N, C, D, H, W] views, the im2col budget and the
// depthwise kernel's host side. conv.cpp holds the forward pass, conv_backward.cpp the two
// backward passes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/lib/common.h"
#include "kernels/lib/conv.h"
#include "kernels/lib/matmul_parts.h"

namespace kiln::lib::conv_parts {

inline Error bad(const std::string& what) {
  return detail::bad("conv", what);
}

// The convolution's geometry per spatial dimension (1 to 3 of them), in x's order.
struct Geometry {
  int dims = 2;
  std::array<int64_t, 3> stride{1, 1, 1}, front{0, 0, 0}, back{0, 0, 0}, dilation{1, 1, 1};
};

Result<Geometry> geometry(std::span<const int64_t> x, std::span<const int64_t> w,
                          const ConvOptions& o);

// A 1 x 1 convolution with stride 1 and no padding: a matrix product over the channels.
bool pointwise(const Geometry& g, std::span<const int64_t> w, int64_t groups);

// `t` (x, w, y or the residual, in `layout`; w is always channels first) as a [N, C, D, H, W]
// view: spatial dimensions of 1 with stride 0 in front of 1-d and 2-d ones.
Result<Tensor> rank5(const Tensor& t, Layout layout);

// The spatial dimensions of a [N, C, D, H, W] view as one of positions, when they collapse:
// its stride, or 0 when they do not.
int64_t position_stride(const Tensor& t);

// The elements of w's dimensions 1 .. 4 (c, kd, kh, kw) as one dimension, when they collapse:
// its stride, or 0.
int64_t column_stride(const Tensor& w5);

// y5 (positions contiguous; y_n [M, P]) = epilogue(a [M, Q] im2col(x5_n)^T [Q, P] + beta y5) on
// the CPU by conv_gemm_cpu (a: a [1, 1, 1, M, Q] view whose columns are x5's channels times
// `taps` (kd, kh, kw), in that order; stride s, padding p in front, dilation dl; `flip`: the
// taps read reversed, the input's gradient as a convolution of dy). Returns the blocking's text.
Result<std::string> gemm_cpu(Runtime& rt, const Tensor& x5, const Tensor& a,
                             const std::array<int64_t, 3>& taps, Tensor& y5,
                             const std::array<uint32_t, 3>& s, const std::array<uint32_t, 3>& p,
                             const std::array<uint32_t, 3>& dl, float beta, Epilogue epilogue,
                             bool flip);

// How the GEMM paths walk x's im2col matrix (n batch items of `positions` rows of `row_bytes`)
// so that at most 32 MiB of it (or KILN_CONV_IM2COL_BYTES) is held at a time: whole batch items
// per chunk when one fits, else `rows` positions of one item (a multiple of `round`).
struct Chunks {
  int64_t items = 1, rows = 1;
};
Result<Chunks> im2col_chunks(int64_t n, int64_t positions, int64_t row_bytes, int64_t round);

// The geometry in the direct kernels' 3-d terms.
struct Geometry3 {
  std::array<uint32_t, 3> s{1, 1, 1}, p{0, 0, 0}, dl{1, 1, 1};
};
Geometry3 geometry3(const Geometry& g);

// The depthwise kernel (each output channel reads one input channel; `flip`: the input's
// gradient of a stride-1 one, x being dy and y dx): `units` output columns per cube, the
// smallest multiple of 16 lanes covering a row (up to 256, then several cubes along the row),
// bands of rows giving each core a few hundred cubes.
Status depthwise(Runtime& rt, const Tensor& x5, const Tensor& w5, Tensor& y5, const Geometry3& g,
                 const Tensor* bias, const Tensor* residual5, Epilogue epilogue, bool flip,
                 MatmulPlan* plan);

}  // namespace kiln::lib::conv_parts
