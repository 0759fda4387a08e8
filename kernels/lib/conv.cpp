// The convolutions of kiln::lib::conv (conv.h): a direct kernel for every shape and device, and
// 1 x 1 convolutions as the matrix products they are (kiln::lib::matmul, on views of x, w and y:
// no copy).
//
// Inside, every convolution is 3-d: x as [N, C, D, H, W], w as [K, C / groups, KD, KH, KW] and
// y as [N, K, OD, OH, OW] views (a 1-d or 2-d one has dimensions of 1; an NHWC layout is the
// same view with other strides).
#include "kernels/lib/conv.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"
#include "kernels/lib/elementwise.h"
#include "kernels/lib/matmul_parts.h"
#include "kernels/run.h"

using namespace kiln::dsl;
using kiln::lib::Epilogue;
using kiln::lib::matmul_parts::activate;

namespace {

template <class In_, class Out_>
struct InOut {
  using In = In_;
  using Out = Out_;
};

}  // namespace

// y = epilogue(conv(x, w) + bias + residual), directly: unit u of cube (bx, by, bz) computes the
// output position p = bx cube_dim + u (od, oh, ow flattened, ow fastest, so that neighbouring
// units read neighbouring x) of batch item bz, for `kb` output channels of one group at once
// (by: the group and its block of kb channels): each x element loaded serves kb FMAs, each
// weight is one number for the whole cube. Sums in f32, in the order c, kd, kh, kw; positions
// in the padding read as zeros (their index wraps past the dimension in 32-bit arithmetic).
template <class P>
void conv_direct(Tensor<const typename P::In> x, Tensor<const typename P::In> w,
                 Tensor<typename P::Out> y, Tensor<const f32> bias,
                 Tensor<const typename P::Out> residual, u32 groups, u32 sd, u32 sh, u32 sw, u32 pd,
                 u32 ph, u32 pw, u32 dd, u32 dh, u32 dw, int kb, Epilogue epilogue, bool has_bias,
                 bool has_residual) {
  using In = host_of_t<typename P::In>;
  using Out = host_of_t<typename P::Out>;
  const auto ukb = static_cast<uint32_t>(kb);
  u32 od_n = y.shape(2), oh_n = y.shape(3), ow_n = y.shape(4);
  u32 p = cube_pos_x() * cube_dim() + unit_pos();
  if_(p >= od_n * oh_n * ow_n, [&] { return_(); });
  u32 ow = p % ow_n, oh = p / ow_n % oh_n, od = p / (ow_n * oh_n);
  u32 cg = w.shape(1), kpg = w.shape(0) / groups;
  u32 blocks = (kpg + (ukb - 1u)) / ukb;
  u32 g = cube_pos_y() / blocks, first = cube_pos_y() % blocks * ukb;
  u32 k0 = g * kpg + first, n = cube_pos_z();
  u32 d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4);
  u32 kd_n = w.shape(2), kh_n = w.shape(3), kw_n = w.shape(4);
  u32 xn = n * x.stride(0);
  std::vector<Var<f32>> acc;
  std::vector<Val<uint32_t>> wk;  // each channel's first weight (clamped into the group)
  for (uint32_t j = 0; j < ukb; ++j) {
    acc.push_back(Var<f32>(0.0f));
    wk.push_back(min(k0 + j, g * kpg + kpg - 1u) * w.stride(0));
  }
  for_range(0u, cg, 1u, [&](u32 c) {
    u32 xc = xn + (g * cg + c) * x.stride(1);
    for_range(0u, kd_n, 1u, [&](u32 kd) {
      u32 id = od * sd + kd * dd - pd;
      for_range(0u, kh_n, 1u, [&](u32 kh) {
        u32 ih = oh * sh + kh * dh - ph;
        Val<bool> rows = id < d_n && ih < h_n;
        u32 xr = xc + select(rows, id * x.stride(2) + ih * x.stride(3), 0u);
        for_range(0u, kw_n, 1u, [&](u32 kw) {
          u32 iw = ow * sw + kw * dw - pw;
          Val<bool> inside = rows && iw < w_n;
          f32 xv = select(inside,
                          cast<float>(Val<In>(x[xr + select(inside, iw * x.stride(4), 0u)])), 0.0f);
          u32 wt = c * w.stride(1) + kd * w.stride(2) + kh * w.stride(3) + kw * w.stride(4);
          for (uint32_t j = 0; j < ukb; ++j)
            acc[j] = fma(xv, cast<float>(Val<In>(w[wk[j] + wt])), Val<float>(acc[j]));
        });
      });
    });
  });
  for (uint32_t j = 0; j < ukb; ++j) {
    if_(first + j < kpg, [&] {
      u32 k = k0 + j;
      u32 at = n * y.stride(0) + k * y.stride(1) + od * y.stride(2) + oh * y.stride(3) +
               ow * y.stride(4);
      Var<f32> v = acc[j];
      if (has_bias) v += Val<float>(bias[k]);
      if (has_residual) {
        u32 r = n * residual.stride(0) + k * residual.stride(1) + od * residual.stride(2) +
                oh * residual.stride(3) + ow * residual.stride(4);
        v += cast<float>(Val<Out>(residual[r]));
      }
      y[at] = cast<Out>(activate(v, epilogue));
    });
  }
}
KILN_KERNEL_GENERIC(conv_direct,
                    "x: rank=5, w: rank=5, y: rank=5, bias, residual: rank=5, groups, sd, sh, sw, "
                    "pd, ph, pw, dd, dh, dw, kb = 8 in 1..16, epilogue = None, has_bias = false, "
                    "has_residual = false",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>)
    .cube_dim(128)
    .describe("kiln::lib::conv: a direct convolution, kb output channels per unit");

// Rows p0 .. p0 + rows - 1 (output positions: od, oh, ow flattened) of batch item n0 + z of the
// im2col matrix of x (columns: c, kd, kh, kw, w's order) into matmul_cpu's slivers of mr rows
// (mr = cube_dim: unit r is row r of sliver cube_pos_x()): element (row s mr + r, column q) at
// ((z slivers + s) columns + q) mr + r, f32, zeros in the padding and past the rows. Each unit
// finds its position once and walks the columns with additions, so the cube's mr units store
// mr consecutive floats per column: the matrix is never built whole, only this chunk of it, in
// the form the micro-kernel reads.
template <class T>
void conv_pack_im2col(Tensor<const T> x, Tensor<f32> ap, u32 oh_n, u32 ow_n, u32 kd_n, u32 kh_n,
                      u32 kw_n, u32 sd, u32 sh, u32 sw, u32 pd, u32 ph, u32 pw, u32 dd, u32 dh,
                      u32 dw, u32 n0, u32 p0, u32 rows) {
  using In = host_of_t<T>;
  u32 mr = cube_dim(), r = unit_pos(), s = cube_pos_x(), z = cube_pos_z();
  u32 c_n = x.shape(1), d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4);
  u32 columns = c_n * kd_n * kh_n * kw_n;
  u32 slivers = (rows + (mr - 1u)) / mr;
  u32 row = s * mr + r;
  Val<bool> live = row < rows;
  u32 p = p0 + min(row, rows - 1u);
  u32 ow = p % ow_n, oh = p / ow_n % oh_n, od = p / (ow_n * oh_n);
  u32 xn = (n0 + z) * x.stride(0);
  u32 base = (z * slivers + s) * columns * mr + r;
  for_range(0u, c_n, 1u, [&](u32 c) {
    u32 xc = xn + c * x.stride(1);
    u32 qc = c * kd_n;
    for_range(0u, kd_n, 1u, [&](u32 kd) {
      u32 id = od * sd + kd * dd - pd;
      u32 qd = (qc + kd) * kh_n;
      for_range(0u, kh_n, 1u, [&](u32 kh) {
        u32 ih = oh * sh + kh * dh - ph;
        Val<bool> ok = live && id < d_n && ih < h_n;
        u32 xr = xc + select(ok, id * x.stride(2) + ih * x.stride(3), 0u);
        u32 qh = (qd + kh) * kw_n;
        for_range(0u, kw_n, 1u, [&](u32 kw) {
          u32 iw = ow * sw + kw * dw - pw;
          Val<bool> inside = ok && iw < w_n;
          ap[base + (qh + kw) * mr] = select(
              inside, cast<float>(Val<In>(x[xr + select(inside, iw * x.stride(4), 0u)])), 0.0f);
        });
      });
    });
  });
}
KILN_KERNEL_GENERIC(conv_pack_im2col,
                    "x: rank=5, ap, oh_n, ow_n, kd_n, kh_n, kw_n, sd, sh, sw, pd, ph, pw, "
                    "dd, dh, dw, n0, p0, rows",
                    f32, f16, bf16)
    .cube_dim(12)
    .describe("kiln::lib::conv on the CPU: a chunk of x's im2col matrix into matmul's slivers");

// Positions p0 .. p0 + count - 1 of batch item n of x's im2col matrix, transposed (rows: the
// columns c, kd, kh, kw; k: the positions), into matmul_cpu's slivers of mr rows (mr =
// cube_dim: unit r is row r of sliver cube_pos_x()): element (row s mr + r, position j) at
// (s count + j) mr + r, f32, zeros in the padding and past the rows. The A operand of the
// weights' gradient, dw^T = im2col(x)^T dy^T. Each unit finds its tap once; the cube walks the
// positions together.
template <class T>
void conv_pack_im2col_t(Tensor<const T> x, Tensor<f32> ap, u32 oh_n, u32 ow_n, u32 kd_n, u32 kh_n,
                        u32 kw_n, u32 sd, u32 sh, u32 sw, u32 pd, u32 ph, u32 pw, u32 dd, u32 dh,
                        u32 dw, u32 n, u32 p0, u32 count) {
  using In = host_of_t<T>;
  u32 mr = cube_dim(), r = unit_pos(), s = cube_pos_x();
  u32 d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4);
  u32 taps = kd_n * kh_n * kw_n, columns = x.shape(1) * taps;
  u32 q = s * mr + r;
  Val<bool> live = q < columns;
  u32 qq = min(q, columns - 1u);
  u32 kw = qq % kw_n, kh = qq / kw_n % kh_n, kd = qq / (kw_n * kh_n) % kd_n, c = qq / taps;
  u32 xc = n * x.stride(0) + c * x.stride(1);
  u32 base = s * count * mr + r;
  Var<u32> ow = p0 % ow_n, oh = p0 / ow_n % oh_n, od = p0 / (ow_n * oh_n);
  for_range(0u, count, 1u, [&](u32 j) {
    u32 id = Val<uint32_t>(od) * sd + kd * dd - pd, ih = Val<uint32_t>(oh) * sh + kh * dh - ph,
        iw = Val<uint32_t>(ow) * sw + kw * dw - pw;
    Val<bool> inside = live && id < d_n && ih < h_n && iw < w_n;
    u32 at = xc + select(inside, id * x.stride(2) + ih * x.stride(3) + iw * x.stride(4), 0u);
    ap[base + j * mr] = select(inside, cast<float>(Val<In>(x[at])), 0.0f);
    // The next position: ow, then oh, then od.
    u32 w1 = Val<uint32_t>(ow) + 1u;
    Val<bool> wrap_w = w1 == ow_n;
    u32 h1 = select(wrap_w, Val<uint32_t>(oh) + 1u, Val<uint32_t>(oh));
    Val<bool> wrap_h = h1 == oh_n;
    ow = select(wrap_w, 0u, w1);
    oh = select(wrap_h, 0u, h1);
    od = select(wrap_h, Val<uint32_t>(od) + 1u, Val<uint32_t>(od));
  });
}
KILN_KERNEL_GENERIC(conv_pack_im2col_t,
                    "x: rank=5, ap, oh_n, ow_n, kd_n, kh_n, kw_n, sd, sh, sw, pd, ph, pw, dd, dh, "
                    "dw, n, p0, count",
                    f32, f16, bf16)
    .cube_dim(12)
    .describe(
        "kiln::lib::conv_backward_weight on the CPU: x's im2col matrix, transposed, into "
        "matmul's slivers");

// Rows p0 .. p0 + count - 1 (output positions) of batch items n0 .. of x's im2col matrix, in
// x's type, as rows of its columns (c, kd, kh, kw): out [items, count, columns] with the columns
// contiguous, the form matmul's tensor-core paths read A in. Unit e is element e of the chunk
// (consecutive units write consecutive elements); padding is zeros.
template <class T>
void conv_im2col_rows(Tensor<const T> x, Tensor<T> out, u32 oh_n, u32 ow_n, u32 kd_n, u32 kh_n,
                      u32 kw_n, u32 sd, u32 sh, u32 sw, u32 pd, u32 ph, u32 pw, u32 dd, u32 dh,
                      u32 dw, u32 n0, u32 p0, u32 count) {
  using In = host_of_t<T>;
  u32 taps = kd_n * kh_n * kw_n, columns = x.shape(1) * taps;
  u32 e = absolute_pos();
  if_(e >= out.shape(0) * count * columns, [&] { return_(); });
  u32 q = e % columns, row = e / columns % count, z = e / (columns * count);
  u32 kw = q % kw_n, kh = q / kw_n % kh_n, kd = q / (kw_n * kh_n) % kd_n, c = q / taps;
  u32 p = p0 + row;
  u32 ow = p % ow_n, oh = p / ow_n % oh_n, od = p / (ow_n * oh_n);
  u32 id = od * sd + kd * dd - pd, ih = oh * sh + kh * dh - ph, iw = ow * sw + kw * dw - pw;
  Val<bool> inside = id < x.shape(2) && ih < x.shape(3) && iw < x.shape(4);
  u32 at = (n0 + z) * x.stride(0) + c * x.stride(1) +
           select(inside, id * x.stride(2) + ih * x.stride(3) + iw * x.stride(4), 0u);
  out[e] = select(inside, Val<In>(x[at]), T(0));
}
KILN_KERNEL_GENERIC(conv_im2col_rows,
                    "x: rank=5, out: rank=3, oh_n, ow_n, kd_n, kh_n, kw_n, sd, sh, sw, pd, ph, pw, "
                    "dd, dh, dw, n0, p0, count",
                    f32, f16, bf16)
    .cube_dim(256)
    .describe("kiln::lib::conv on GPUs: a chunk of x's im2col matrix, rows of its columns");

// dx = the gradient of sum(y dy) for y = conv(x, w) with respect to x (also conv_transpose's
// forward), directly: unit u of cube (bx, by, bz) computes input position q = bx cube_dim + u
// (id, ih, iw flattened) of batch item bz for `kb` input channels of one group (by: the group and
// its block of kb channels), summing over the group's output channels k and the taps whose window
// covers q: o = (q + pad - tap dilation) / stride, where that divides and lands inside y (the
// strides comptime, so that the divisions are multiplications). Sums in f32 in the order k, kd,
// kh, kw.
template <class P>
void conv_grad_input(Tensor<const typename P::In> dy, Tensor<const typename P::In> w,
                     Tensor<typename P::Out> dx, u32 groups, u32 pd, u32 ph, u32 pw, u32 dd, u32 dh,
                     u32 dw, int kb, int sd, int sh, int sw) {
  using In = host_of_t<typename P::In>;
  using Out = host_of_t<typename P::Out>;
  const auto ukb = static_cast<uint32_t>(kb);
  u32 d_n = dx.shape(2), h_n = dx.shape(3), w_n = dx.shape(4);
  u32 q = cube_pos_x() * cube_dim() + unit_pos();
  if_(q >= d_n * h_n * w_n, [&] { return_(); });
  u32 iw = q % w_n, ih = q / w_n % h_n, id = q / (w_n * h_n);
  u32 cg = w.shape(1), kg = w.shape(0) / groups;
  u32 blocks = (cg + (ukb - 1u)) / ukb;
  u32 g = cube_pos_y() / blocks, first = cube_pos_y() % blocks * ukb;
  u32 n = cube_pos_z();
  u32 od_n = dy.shape(2), oh_n = dy.shape(3), ow_n = dy.shape(4);
  u32 kd_n = w.shape(2), kh_n = w.shape(3), kw_n = w.shape(4);
  std::vector<Var<f32>> acc;
  std::vector<Val<uint32_t>> wc;  // each input channel's weights (clamped into the group)
  for (uint32_t j = 0; j < ukb; ++j) {
    acc.push_back(Var<f32>(0.0f));
    wc.push_back(min(first + j, cg - 1u) * w.stride(1));
  }
  // The output index along a dimension that tap t reaches from input index i, and whether it
  // exists (i + pad - t dilation >= 0, a multiple of the stride, inside the output).
  auto reach = [](const Val<uint32_t>& i, const Val<uint32_t>& t, const Val<uint32_t>& pad,
                  const Val<uint32_t>& dil, int stride,
                  const Val<uint32_t>& n_out) -> std::pair<Val<uint32_t>, Val<bool>> {
    const auto us = static_cast<uint32_t>(stride);
    u32 diff = i + pad - t * dil;  // wraps when negative
    u32 o = diff / us;
    return {o, diff < 0x80000000u && o * us == diff && o < n_out};
  };
  for_range(0u, kg, 1u, [&](u32 kk) {
    u32 k = g * kg + kk;
    u32 dyk = n * dy.stride(0) + k * dy.stride(1);
    u32 wk = k * w.stride(0);
    for_range(0u, kd_n, 1u, [&](u32 kd) {
      const auto [od, okd] = reach(id, kd, pd, dd, sd, od_n);
      for_range(0u, kh_n, 1u, [&](u32 kh) {
        const auto [oh, okh] = reach(ih, kh, ph, dh, sh, oh_n);
        for_range(0u, kw_n, 1u, [&](u32 kw) {
          const auto [ow, okw] = reach(iw, kw, pw, dw, sw, ow_n);
          Val<bool> inside = okd && okh && okw;
          u32 at =
              dyk + select(inside, od * dy.stride(2) + oh * dy.stride(3) + ow * dy.stride(4), 0u);
          f32 g_out = select(inside, cast<float>(Val<In>(dy[at])), 0.0f);
          u32 wt = wk + kd * w.stride(2) + kh * w.stride(3) + kw * w.stride(4);
          for (uint32_t j = 0; j < ukb; ++j)
            acc[j] = fma(g_out, cast<float>(Val<In>(w[wt + wc[j]])), Val<float>(acc[j]));
        });
      });
    });
  });
  for (uint32_t j = 0; j < ukb; ++j)
    if_(first + j < cg, [&] {
      u32 c = g * cg + first + j;
      dx[n * dx.stride(0) + c * dx.stride(1) + id * dx.stride(2) + ih * dx.stride(3) +
         iw * dx.stride(4)] = cast<Out>(Val<float>(acc[j]));
    });
}
KILN_KERNEL_GENERIC(conv_grad_input,
                    "dy: rank=5, w: rank=5, dx: rank=5, groups, pd, ph, pw, dd, dh, dw, "
                    "kb = 2 in 1..16, sd = 1 in 1..64, sh = 1 in 1..64, sw = 1 in 1..64",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>)
    .cube_dim(128)
    .describe("kiln::lib::conv_backward_input: the gradient of a convolution's input, directly");

// The input's gradient from a chunk of dcol = dy^T w (positions p0 .. p0 + len - 1 of one batch
// item, [len, C taps] f32): unit e, an element (c, id, ih, iw) of the item's f32 gradient `acc`
// ([C, D, H, W]), sums dcol over the taps whose window puts it at a position of the chunk,
// o = (i + pad - tap dilation) / stride where that divides, and adds it to acc (or sets it, for
// the item's first chunk). The strides are comptime, so that the divisions by them are
// multiplications.
void conv_col2im(Tensor<const f32> dcol, Tensor<f32> acc, u32 c_n, u32 d_n, u32 h_n, u32 w_n,
                 u32 od_n, u32 oh_n, u32 ow_n, u32 kd_n, u32 kh_n, u32 kw_n, u32 pd, u32 ph, u32 pw,
                 u32 dd, u32 dh, u32 dw, u32 p0, u32 len, u32 first, int sd, int sh, int sw) {
  u32 e = cube_pos_x() * cube_dim() + unit_pos();
  if_(e >= c_n * d_n * h_n * w_n, [&] { return_(); });
  u32 iw = e % w_n, ih = e / w_n % h_n, id = e / (w_n * h_n) % d_n, c = e / (w_n * h_n * d_n);
  u32 taps = kd_n * kh_n * kw_n, columns = c_n * taps;
  // The output index a tap reaches along a dimension, and whether it exists.
  auto reach = [](const Val<uint32_t>& i, const Val<uint32_t>& t, const Val<uint32_t>& pad,
                  const Val<uint32_t>& dil, int stride,
                  const Val<uint32_t>& n_out) -> std::pair<Val<uint32_t>, Val<bool>> {
    const auto us = static_cast<uint32_t>(stride);
    u32 diff = i + pad - t * dil;  // wraps when negative
    u32 o = diff / us;
    return {o, diff < 0x80000000u && o * us == diff && o < n_out};
  };
  Var<f32> sum = 0.0f;
  for_range(0u, kd_n, 1u, [&](u32 kd) {
    const auto [od, okd] = reach(id, kd, pd, dd, sd, od_n);
    for_range(0u, kh_n, 1u, [&](u32 kh) {
      const auto [oh, okh] = reach(ih, kh, ph, dh, sh, oh_n);
      for_range(0u, kw_n, 1u, [&](u32 kw) {
        const auto [ow, okw] = reach(iw, kw, pw, dw, sw, ow_n);
        u32 j = (od * oh_n + oh) * ow_n + ow - p0;  // wraps below the chunk
        Val<bool> inside = okd && okh && okw && j < len;
        u32 q = c * taps + (kd * kh_n + kh) * kw_n + kw;
        sum += select(inside, Val<float>(dcol[select(inside, j * columns + q, 0u)]), 0.0f);
      });
    });
  });
  if_(first != 0u, [&] { acc[e] = sum; }).else_([&] { acc[e] = Val<float>(acc[e]) + sum; });
}
KILN_KERNEL(conv_col2im,
            "dcol, acc, c_n, d_n, h_n, w_n, od_n, oh_n, ow_n, kd_n, kh_n, kw_n, pd, ph, pw, dd, "
            "dh, dw, p0, len, first, sd = 1 in 1..64, sh = 1 in 1..64, sw = 1 in 1..64")
    .cube_dim(128)
    .describe("kiln::lib::conv_backward_input: dy^T w's rows gathered into the input's gradient");

// dw = the gradient of sum(y dy) for y = conv(x, w) with respect to w, directly: unit e (of the
// cube's flattened weights, kw fastest) sums dy[n, k, o] x[n, c, o stride + tap dilation - pad]
// over the batch and every output position o, in that order, in f32.
template <class P>
void conv_grad_weight(Tensor<const typename P::In> x, Tensor<const typename P::In> dy,
                      Tensor<typename P::Out> dw, u32 groups, u32 sd, u32 sh, u32 sw, u32 pd,
                      u32 ph, u32 pw, u32 dd, u32 dh, u32 dw_) {
  using In = host_of_t<typename P::In>;
  using Out = host_of_t<typename P::Out>;
  u32 k_n = dw.shape(0), cg = dw.shape(1), kd_n = dw.shape(2), kh_n = dw.shape(3),
      kw_n = dw.shape(4);
  u32 e = cube_pos_x() * cube_dim() + unit_pos();
  if_(e >= k_n * cg * kd_n * kh_n * kw_n, [&] { return_(); });
  u32 kw = e % kw_n, kh = e / kw_n % kh_n, kd = e / (kw_n * kh_n) % kd_n;
  u32 c = e / (kw_n * kh_n * kd_n) % cg, k = e / (kw_n * kh_n * kd_n * cg);
  u32 g = k / (k_n / groups);
  u32 d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4);
  u32 od_n = dy.shape(2), oh_n = dy.shape(3), ow_n = dy.shape(4);
  Var<f32> acc = 0.0f;
  for_range(0u, dy.shape(0), 1u, [&](u32 n) {
    u32 xc = n * x.stride(0) + (g * cg + c) * x.stride(1);
    u32 dyk = n * dy.stride(0) + k * dy.stride(1);
    for_range(0u, od_n, 1u, [&](u32 od) {
      u32 id = od * sd + kd * dd - pd;
      for_range(0u, oh_n, 1u, [&](u32 oh) {
        u32 ih = oh * sh + kh * dh - ph;
        Val<bool> rows = id < d_n && ih < h_n;
        u32 xr = xc + select(rows, id * x.stride(2) + ih * x.stride(3), 0u);
        u32 dyr = dyk + od * dy.stride(2) + oh * dy.stride(3);
        for_range(0u, ow_n, 1u, [&](u32 ow) {
          u32 iw = ow * sw + kw * dw_ - pw;
          Val<bool> inside = rows && iw < w_n;
          f32 xv = select(inside,
                          cast<float>(Val<In>(x[xr + select(inside, iw * x.stride(4), 0u)])), 0.0f);
          acc = fma(xv, cast<float>(Val<In>(dy[dyr + ow * dy.stride(4)])), Val<float>(acc));
        });
      });
    });
  });
  dw[k * dw.stride(0) + c * dw.stride(1) + kd * dw.stride(2) + kh * dw.stride(3) +
     kw * dw.stride(4)] = cast<Out>(Val<float>(acc));
}
KILN_KERNEL_GENERIC(
    conv_grad_weight,
    "x: rank=5, dy: rank=5, dw: rank=5, groups, sd, sh, sw, pd, ph, pw, dd, dh, dw_",
    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>, InOut<bf16, bf16>)
    .cube_dim(128)
    .describe("kiln::lib::conv_backward_weight: the gradient of a convolution's weights, directly");

// dbias[k] = the sum of dy[n, k, ...] over the batch and every output position, in that order,
// in f32: a unit per output channel.
template <class T>
void conv_grad_bias(Tensor<const T> dy, Tensor<f32> dbias) {
  using In = host_of_t<T>;
  u32 k = cube_pos_x() * cube_dim() + unit_pos();
  if_(k >= dy.shape(1), [&] { return_(); });
  Var<f32> acc = 0.0f;
  for_range(0u, dy.shape(0), 1u, [&](u32 n) {
    for_range(0u, dy.shape(2), 1u, [&](u32 od) {
      for_range(0u, dy.shape(3), 1u, [&](u32 oh) {
        u32 r = n * dy.stride(0) + k * dy.stride(1) + od * dy.stride(2) + oh * dy.stride(3);
        for_range(0u, dy.shape(4), 1u,
                  [&](u32 ow) { acc += cast<float>(Val<In>(dy[r + ow * dy.stride(4)])); });
      });
    });
  });
  dbias[k] = acc;
}
KILN_KERNEL_GENERIC(conv_grad_bias, "dy: rank=5, dbias", f32, f16, bf16)
    .cube_dim(64)
    .describe("kiln::lib::conv_backward_weight: the gradient of a convolution's bias");

namespace kiln::lib {

namespace {

using ir::ElemType;

Error bad(const std::string& what) {
  return detail::bad("conv", what);
}

// The convolution's geometry per spatial dimension (1 to 3 of them), in x's order.
struct Geometry {
  int dims = 2;
  std::array<int64_t, 3> stride{1, 1, 1}, front{0, 0, 0}, back{0, 0, 0}, dilation{1, 1, 1};
};

// One option's value for each of `dims` dimensions: one value for all, or one each.
Result<std::array<int64_t, 3>> per_dim(const char* name, const std::vector<int64_t>& v, int dims,
                                       int64_t least, int64_t fallback) {
  std::array<int64_t, 3> out{fallback, fallback, fallback};
  if (v.empty()) return out;
  if (v.size() != 1 && v.size() != static_cast<size_t>(dims))
    return bad(
        fmt::format("{} has {} values; a {}-d convolution takes one (for every dimension) "
                    "or {}",
                    name, v.size(), dims, dims));
  for (int d = 0; d < dims; ++d) {
    out[static_cast<size_t>(d)] = v.size() == 1 ? v[0] : v[static_cast<size_t>(d)];
    if (out[static_cast<size_t>(d)] < least)
      return bad(fmt::format("{} is {}; it must be at least {}", name, detail::dims(v), least));
  }
  return out;
}

// x's shape as [N, C, spatial...] whatever the layout.
std::vector<int64_t> channels_first(std::span<const int64_t> s, Layout layout) {
  std::vector<int64_t> out(s.begin(), s.end());
  if (layout == Layout::Nhwc && s.size() >= 3) {
    out[1] = s.back();
    for (size_t i = 2; i < s.size(); ++i) out[i] = s[i - 1];
  }
  return out;
}

Result<Geometry> geometry(std::span<const int64_t> x, std::span<const int64_t> w,
                          const ConvOptions& o) {
  if (x.size() < 3 || x.size() > 5)
    return bad(
        fmt::format("x is {}: a convolution takes [N, C, ...] with 1 to 3 spatial "
                    "dimensions (rank 3 to 5)",
                    detail::dims(x)));
  if (w.size() != x.size())
    return bad(fmt::format("w is {} and x {}: w is [K, C / groups, kernel...], of x's rank",
                           detail::dims(w), detail::dims(x)));
  Geometry g;
  g.dims = static_cast<int>(x.size()) - 2;
  KILN_ASSIGN(g.stride, per_dim("stride", o.stride, g.dims, 1, 1));
  KILN_ASSIGN(g.dilation, per_dim("dilation", o.dilation, g.dims, 1, 1));
  if (o.same) {
    for (int d = 0; d < g.dims; ++d)
      if (g.stride[static_cast<size_t>(d)] != 1)
        return bad("'same' padding needs stride 1 (as PyTorch's padding=\"same\")");
    for (int d = 0; d < g.dims; ++d) {
      const auto i = static_cast<size_t>(d);
      const int64_t total = g.dilation[i] * (w[i + 2] - 1);
      g.front[i] = total / 2;
      g.back[i] = total - total / 2;
    }
    return g;
  }
  KILN_ASSIGN(g.front, per_dim("padding", o.padding, g.dims, 0, 0));
  g.back = g.front;
  if (!o.padding_end.empty()) {
    KILN_ASSIGN(g.back, per_dim("padding_end", o.padding_end, g.dims, 0, 0));
  }
  return g;
}

}  // namespace

Result<std::vector<int64_t>> conv_output_shape(std::span<const int64_t> x,
                                               std::span<const int64_t> w, const ConvOptions& o) {
  KILN_ASSIGN(const Geometry g, geometry(x, w, o));
  const std::vector<int64_t> xs = channels_first(x, o.layout);
  if (o.groups < 1) return bad(fmt::format("groups is {}; it must be at least 1", o.groups));
  if (xs[1] % o.groups != 0 || w[0] % o.groups != 0)
    return bad(
        fmt::format("groups is {}: x's {} channels and w's {} output channels must both "
                    "be multiples of it",
                    o.groups, xs[1], w[0]));
  if (w[1] * o.groups != xs[1])
    return bad(fmt::format("w is {}: its second dimension is C / groups = {} / {} = {}",
                           detail::dims(w), xs[1], o.groups, xs[1] / o.groups));
  std::vector<int64_t> y = {xs[0], w[0]};
  for (int d = 0; d < g.dims; ++d) {
    const auto i = static_cast<size_t>(d);
    const int64_t k = w[i + 2];
    if (k < 1)
      return bad(fmt::format("w is {}: its kernel has an empty dimension", detail::dims(w)));
    const int64_t span = g.dilation[i] * (k - 1) + 1, in = xs[i + 2] + g.front[i] + g.back[i];
    if (in < span)
      return bad(
          fmt::format("spatial dimension {} of x is {}, {} with its padding: less than the "
                      "kernel's extent of {} (dilation {} x (kernel {} - 1) + 1)",
                      d, xs[i + 2], in, span, g.dilation[i], k));
    y.push_back((in - span) / g.stride[i] + 1);
  }
  if (o.layout == Layout::Nhwc) {
    std::vector<int64_t> nhwc = {y[0]};
    for (size_t i = 2; i < y.size(); ++i) nhwc.push_back(y[i]);
    nhwc.push_back(y[1]);
    return nhwc;
  }
  return y;
}

namespace {

// `t` (x, w, y or the residual, in `layout`; w is always channels first) as a [N, C, D, H, W]
// view: spatial dimensions of 1 with stride 0 in front of 1-d and 2-d ones.
Result<Tensor> rank5(const Tensor& t, Layout layout) {
  const int r = t.rank();
  std::vector<int64_t> shape(5, 1), strides(5, 0);
  const int c = layout == Layout::Nhwc ? r - 1 : 1;
  shape[0] = t.shape(0);
  strides[0] = t.stride(0);
  shape[1] = t.shape(c);
  strides[1] = t.stride(c);
  int at = 5 - (r - 2);
  for (int d = 0; d < r; ++d) {
    if (d == 0 || d == c) continue;
    shape[static_cast<size_t>(at)] = t.shape(d);
    strides[static_cast<size_t>(at)] = t.stride(d);
    ++at;
  }
  return Tensor::make(t.device_ptr(), t.buffer(), t.dtype(), shape, strides, t.offset());
}

// The spatial dimensions of a [N, C, D, H, W] view as one of positions, when they collapse:
// its stride, or 0 when they do not.
int64_t position_stride(const Tensor& t) {
  int64_t stride = 0, extent = 1;
  for (int d = 4; d >= 2; --d) {
    if (t.shape(d) == 1) continue;
    if (stride == 0)
      stride = t.stride(d);
    else if (t.stride(d) != extent * stride)
      return 0;
    extent *= t.shape(d);
  }
  return stride == 0 ? 1 : stride;
}

// A 1 x 1 convolution with stride 1 and no padding as matmul: y^T [N, P, K] = x^T [N, P, C]
// w^T [C, K], the bias per column; the residual copied into y first and added as beta y.
Result<bool> as_matmul(Runtime& rt, const Tensor& x5, const Tensor& w5, Tensor& y5,
                       const ConvOptions& o) {
  const int64_t sx = position_stride(x5), sy = position_stride(y5);
  if (sx == 0 || sy == 0) return false;
  const int64_t n = x5.shape(0), c = x5.shape(1), k = y5.shape(1),
                p = y5.shape(2) * y5.shape(3) * y5.shape(4);
  KILN_ASSIGN(const Tensor a,
              Tensor::make(x5.device_ptr(), x5.buffer(), x5.dtype(), std::vector<int64_t>{n, p, c},
                           std::vector<int64_t>{x5.stride(0), sx, x5.stride(1)}, x5.offset()));
  KILN_ASSIGN(const Tensor b,
              Tensor::make(w5.device_ptr(), w5.buffer(), w5.dtype(), std::vector<int64_t>{k, c},
                           std::vector<int64_t>{w5.stride(0), w5.stride(1)}, w5.offset()));
  KILN_ASSIGN(Tensor out,
              Tensor::make(y5.device_ptr(), y5.buffer(), y5.dtype(), std::vector<int64_t>{n, p, k},
                           std::vector<int64_t>{y5.stride(0), sy, y5.stride(1)}, y5.offset()));
  MatmulOptions m;
  m.transpose_b = true;
  m.bias = o.bias;
  m.epilogue = o.epilogue;
  m.plan = o.plan;
  if (o.residual) {
    KILN_ASSIGN(const Tensor r5, rank5(*o.residual, o.layout));
    KILN_ASSIGN(
        const Tensor r,
        Tensor::make(r5.device_ptr(), r5.buffer(), r5.dtype(), std::vector<int64_t>{n, p, k},
                     std::vector<int64_t>{r5.stride(0), position_stride(r5), r5.stride(1)},
                     r5.offset()));
    if (position_stride(r5) == 0) return false;
    const bool same = r.buffer().data() == out.buffer().data() && r.offset() == out.offset() &&
                      r.shape().size() == out.shape().size() &&
                      std::equal(r.shape().begin(), r.shape().end(), out.shape().begin()) &&
                      r.stride(0) == out.stride(0) && r.stride(1) == out.stride(1) &&
                      r.stride(2) == out.stride(2);
    if (!same) KILN_TRY(copy(rt, r, out));
    m.beta = 1.0f;
  }
  KILN_TRY(matmul(rt, a, b, out, m));
  if (o.plan)
    o.plan->why = "a 1 x 1 convolution with stride 1 and no padding is a matrix product (" +
                  o.plan->why + ")";
  return true;
}

// The elements of w's dimensions 1 .. 4 (c, kd, kh, kw) as one dimension, when they collapse:
// its stride, or 0.
int64_t column_stride(const Tensor& w5) {
  int64_t stride = 0, extent = 1;
  for (int d = 4; d >= 1; --d) {
    if (w5.shape(d) == 1) continue;
    if (stride == 0)
      stride = w5.stride(d);
    else if (w5.stride(d) != extent * stride)
      return 0;
    extent *= w5.shape(d);
  }
  return stride == 0 ? 1 : stride;
}

// At most this many bytes of x's im2col matrix, packed, at a time: 32 MiB, or
// KILN_CONV_IM2COL_BYTES.
int64_t im2col_bytes() {
  if (const char* v = std::getenv("KILN_CONV_IM2COL_BYTES")) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (end != v && *end == '\0' && n > 0) return n;
  }
  return int64_t{32} << 20;
}

// A dense convolution on the CPU as an implicit GEMM: y^T [P, K] = im2col(x) [P, C taps] w^T
// [C taps, K] on matmul's micro-kernel, im2col's rows packed straight into its slivers by
// conv_pack_im2col a chunk at a time (batch items, or positions of one item), w packed as
// matmul's B. The bias is per column; a residual (r5: y's [N, K, D, H, W] view of it) is copied
// into y first and added as beta y.
Result<bool> implicit_gemm_cpu(Runtime& rt, const Tensor& x5, const Tensor& w5, Tensor& y5,
                               const std::array<uint32_t, 3>& s, const std::array<uint32_t, 3>& p,
                               const std::array<uint32_t, 3>& dl, const Tensor* bias,
                               const Tensor* r5, Epilogue epilogue, MatmulPlan* plan) {
  const int64_t ws = column_stride(w5), ys = position_stride(y5);
  if (ws == 0 || ys == 0) return false;
  const int64_t n = x5.shape(0), k = w5.shape(0),
                columns = w5.shape(1) * w5.shape(2) * w5.shape(3) * w5.shape(4),
                positions = y5.shape(2) * y5.shape(3) * y5.shape(4);
  if (r5) KILN_TRY(copy(rt, *r5, y5));
  KILN_ASSIGN(const Tensor b,
              Tensor::make(w5.device_ptr(), w5.buffer(), w5.dtype(),
                           std::vector<int64_t>{1, 1, 1, columns, k},
                           std::vector<int64_t>{0, 0, 0, ws, w5.stride(0)}, w5.offset()));
  // Whole batch items per chunk when one fits, else positions of one item.
  const int64_t budget = im2col_bytes(), item_bytes = positions * columns * 4;
  const int64_t items = std::clamp<int64_t>(budget / std::max<int64_t>(item_bytes, 1), 1, n);
  const int64_t rows = items > 1 || item_bytes <= budget
                           ? positions
                           : std::max<int64_t>(96, budget / (columns * 4) / 96 * 96);
  KILN_ASSIGN(const Kernel pack, rt.kernel("conv_pack_im2col"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  MatmulOptions m;
  m.bias = bias;
  m.epilogue = epilogue;
  m.beta = r5 ? 1.0f : 0.0f;
  std::string config;
  for (int64_t n0 = 0; n0 < n; n0 += items) {
    const int64_t chunk_items = std::min(items, n - n0);
    for (int64_t p0 = 0; p0 < positions; p0 += rows) {
      const int64_t chunk_rows = std::min(rows, positions - p0);
      detail::MatmulProblem q;
      q.m = chunk_rows;
      q.n = k;
      q.k = columns;
      q.batch = q.batch_a = chunk_items;
      q.batch_b = 1;
      // A's batch shape only: the packing reads x.
      KILN_ASSIGN(q.a, Tensor::make(x5.device_ptr(), x5.buffer(), x5.dtype(),
                                    std::vector<int64_t>{1, 1, chunk_items, chunk_rows, columns},
                                    std::vector<int64_t>{0, 0, 0, 0, 0}, x5.offset()));
      q.b = b;
      KILN_ASSIGN(q.c, Tensor::make(y5.device_ptr(), y5.buffer(), y5.dtype(),
                                    std::vector<int64_t>{1, 1, chunk_items, chunk_rows, k},
                                    std::vector<int64_t>{0, 0, y5.stride(0), ys, y5.stride(1)},
                                    y5.offset() + n0 * y5.stride(0) + p0 * ys));
      const detail::PackRows pack_rows = [&](Tensor& ap, int mr) -> Status {
        return rt.launch(pack, Dim3(u((chunk_rows + mr - 1) / mr), 1, u(chunk_items)), Dim3(u(mr)),
                         x5.as_read_only(), ap, u(y5.shape(3)), u(y5.shape(4)), u(w5.shape(2)),
                         u(w5.shape(3)), u(w5.shape(4)), s[0], s[1], s[2], p[0], p[1], p[2], dl[0],
                         dl[1], dl[2], u(n0), u(p0), u(chunk_rows));
      };
      KILN_TRY(detail::matmul_cpu_packed_a(rt, q, m, pack_rows, &config));
    }
  }
  if (plan)
    *plan = {"matmul_cpu",
             fmt::format("{}; im2col packed by conv_pack_im2col, {} of {} positions x {} "
                         "columns at a time",
                         config, items > 1 ? items * positions : std::min(rows, positions),
                         n * positions, columns),
             "a dense convolution on the CPU: an implicit GEMM on matmul's micro-kernel"};
  return true;
}

// A dense convolution on a GPU as GEMMs: chunks of x's im2col matrix (whole batch items while
// they fit the im2col budget, else positions of one item) written as rows of its columns by
// conv_im2col_rows, each multiplied by w^T through kiln::lib::matmul (the device's tensor-core
// path: y^T [items, P, K] = rows [items, P, C taps] w^T [C taps, K], with the bias, a residual
// copied into y first as beta y, and the activation in its epilogue).
Result<bool> im2col_gemm(Runtime& rt, const Tensor& x5, const Tensor& w5, Tensor& y5,
                         const std::array<uint32_t, 3>& s, const std::array<uint32_t, 3>& p,
                         const std::array<uint32_t, 3>& dl, const Tensor* bias, const Tensor* r5,
                         Epilogue epilogue, MatmulPlan* plan) {
  const int64_t ws = column_stride(w5), ys = position_stride(y5);
  if (ws == 0 || ys == 0) return false;
  const int64_t n = x5.shape(0), k = w5.shape(0),
                columns = w5.shape(1) * w5.shape(2) * w5.shape(3) * w5.shape(4),
                positions = y5.shape(2) * y5.shape(3) * y5.shape(4);
  if (r5) KILN_TRY(copy(rt, *r5, y5));
  KILN_ASSIGN(const Tensor wv, Tensor::make(w5.device_ptr(), w5.buffer(), w5.dtype(),
                                            std::vector<int64_t>{k, columns},
                                            std::vector<int64_t>{w5.stride(0), ws}, w5.offset()));
  const auto size = static_cast<int64_t>(x5.element_bytes());
  const int64_t budget = im2col_bytes(), item_bytes = positions * columns * size;
  const int64_t items = std::clamp<int64_t>(budget / std::max<int64_t>(item_bytes, 1), 1, n);
  const int64_t rows = items > 1 || item_bytes <= budget
                           ? positions
                           : std::max<int64_t>(128, budget / (columns * size) / 128 * 128);
  KILN_ASSIGN(Tensor chunk, rt.empty(x5.dtype(), {items, std::min(rows, positions), columns}));
  KILN_ASSIGN(const Kernel gather, rt.kernel("conv_im2col_rows"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  MatmulOptions m;
  m.transpose_b = true;
  m.bias = bias;
  m.epilogue = epilogue;
  m.beta = r5 ? 1.0f : 0.0f;
  MatmulPlan product;
  m.plan = &product;
  for (int64_t n0 = 0; n0 < n; n0 += items) {
    const int64_t chunk_items = std::min(items, n - n0);
    for (int64_t p0 = 0; p0 < positions; p0 += rows) {
      const int64_t count = std::min(rows, positions - p0);
      KILN_ASSIGN(Tensor a,
                  Tensor::make(chunk.device_ptr(), chunk.buffer(), chunk.dtype(),
                               std::vector<int64_t>{chunk_items, count, columns},
                               std::vector<int64_t>{count * columns, columns, 1}, chunk.offset()));
      const int64_t elements = chunk_items * count * columns;
      KILN_TRY(rt.launch(gather, Dim3(u((elements + 255) / 256)), Dim3(256), x5.as_read_only(), a,
                         u(y5.shape(3)), u(y5.shape(4)), u(w5.shape(2)), u(w5.shape(3)),
                         u(w5.shape(4)), s[0], s[1], s[2], p[0], p[1], p[2], dl[0], dl[1], dl[2],
                         u(n0), u(p0), u(count)));
      KILN_ASSIGN(Tensor c, Tensor::make(y5.device_ptr(), y5.buffer(), y5.dtype(),
                                         std::vector<int64_t>{chunk_items, count, k},
                                         std::vector<int64_t>{y5.stride(0), ys, y5.stride(1)},
                                         y5.offset() + n0 * y5.stride(0) + p0 * ys));
      KILN_TRY(matmul(rt, a, wv, c, m));
    }
  }
  if (plan)
    *plan = {product.kernel,
             fmt::format("{}; im2col rows by conv_im2col_rows, {} of {} positions x {} columns "
                         "at a time",
                         product.config, items > 1 ? items * positions : std::min(rows, positions),
                         n * positions, columns),
             "a dense convolution on a GPU: im2col chunks times w^T through matmul (" +
                 product.why + ")"};
  return true;
}

}  // namespace

Status conv(Runtime& rt, const Tensor& x, const Tensor& w, Tensor& y, const ConvOptions& o) {
  const std::pair<const Tensor*, const char*> all[] = {{&x, "x"}, {&w, "w"}, {&y, "y"}};
  for (const auto& [t, name] : all) {
    if (!t->valid()) return bad(fmt::format("the tensor '{}' is empty (no buffer)", name));
    if (t->device() != x.device())
      return bad(fmt::format("the tensor '{}' is on another device than x", name));
  }
  KILN_ASSIGN(const std::vector<int64_t> want, conv_output_shape(x.shape(), w.shape(), o));
  if (y.rank() != static_cast<int>(want.size()) ||
      !std::equal(want.begin(), want.end(), y.shape().begin()))
    return bad(
        fmt::format("y is {}; the convolution's output is {}", y.describe(), detail::dims(want)));
  const ElemType in = x.dtype();
  if ((in != ElemType::F32 && in != ElemType::F16 && in != ElemType::BF16) || w.dtype() != in)
    return bad(fmt::format("x is {} and w {}; both must hold the same type, f32, f16 or bf16",
                           x.describe(), w.describe()));
  if (y.dtype() != ElemType::F32 && y.dtype() != in)
    return bad(fmt::format("y is {}; the result is f32 or the inputs' type ({})", y.describe(),
                           ir::elem_name(in)));
  if (y.read_only()) return bad("the tensor 'y' is read-only");
  if (y.may_overlap()) return bad(fmt::format("y ({}) has elements that overlap", y.describe()));
  const int64_t k = w.shape(0);
  if (o.bias && (!o.bias->valid() || o.bias->dtype() != ElemType::F32 || o.bias->rank() != 1 ||
                 o.bias->shape(0) != k || o.bias->device() != x.device()))
    return bad(
        fmt::format("the bias is {}; it must be f32[{}] (one per output channel) on x's "
                    "device",
                    o.bias && o.bias->valid() ? o.bias->describe() : "empty", k));
  if (o.residual && (!o.residual->valid() || o.residual->dtype() != y.dtype() ||
                     o.residual->rank() != y.rank() || o.residual->device() != x.device() ||
                     !std::equal(want.begin(), want.end(), o.residual->shape().begin())))
    return bad(fmt::format("the residual is {}; it must be y's shape and type, {}[{}]",
                           o.residual->valid() ? o.residual->describe() : "empty",
                           ir::elem_name(y.dtype()), fmt::join(want, ", ")));
  for (const auto& [t, name] : all)
    if (!detail::fits_u32(*t))
      return bad(
          fmt::format("the tensor '{}' ({}) spans 2^32 elements or more; the kernels "
                      "index at most 2^32 - 1 (split the batch)",
                      name, t->describe()));
  int64_t numel = 1;
  for (int64_t d : want) numel *= d;
  if (numel == 0) {
    if (o.plan) *o.plan = {"none", "an empty output", "y has no elements"};
    return {};
  }
  KILN_ASSIGN(const Geometry g, geometry(x.shape(), w.shape(), o));
  KILN_ASSIGN(const Tensor x5, rank5(x, o.layout));
  KILN_ASSIGN(const Tensor w5, rank5(w, Layout::Nchw));
  KILN_ASSIGN(Tensor y5, rank5(y, o.layout));
  bool pointwise = o.groups == 1;
  for (int d = 0; d < g.dims; ++d) {
    const auto i = static_cast<size_t>(d);
    pointwise =
        pointwise && w.shape(d + 2) == 1 && g.stride[i] == 1 && g.front[i] == 0 && g.back[i] == 0;
  }
  if (pointwise) {
    KILN_ASSIGN(const bool done, as_matmul(rt, x5, w5, y5, o));
    if (done) return {};
  }
  // The direct kernel: 3-d, the missing leading dimensions of size 1 with no padding.
  std::array<uint32_t, 3> s{1, 1, 1}, p{0, 0, 0}, dl{1, 1, 1};
  for (int d = 0; d < g.dims; ++d) {
    const auto i = static_cast<size_t>(d), at = static_cast<size_t>(3 - g.dims + d);
    s[at] = static_cast<uint32_t>(g.stride[i]);
    p[at] = static_cast<uint32_t>(g.front[i]);
    dl[at] = static_cast<uint32_t>(g.dilation[i]);
  }
  const int64_t kpg = k / o.groups, cg = w.shape(1), taps = w5.shape(2) * w5.shape(3) * w5.shape(4);
  // The dense products: the CPU's implicit GEMM, a GPU's im2col chunks and matmul.
  const auto gemm = rt.device().lane_units ? implicit_gemm_cpu : im2col_gemm;
  if (o.groups == 1 || (kpg >= 8 && cg * taps >= 16)) {
    std::optional<Tensor> r5;
    if (o.residual) {
      KILN_ASSIGN(r5, rank5(*o.residual, o.layout));
    }
    if (o.groups == 1) {
      KILN_ASSIGN(const bool done,
                  gemm(rt, x5, w5, y5, s, p, dl, o.bias, r5 ? &*r5 : nullptr, o.epilogue, o.plan));
      if (done) return {};
    } else {
      // One implicit GEMM per group, on views of its channels.
      auto channels = [](const Tensor& t, int dim, int64_t first, int64_t count) {
        std::vector<int64_t> shape(t.shape().begin(), t.shape().end()),
            strides(t.strides().begin(), t.strides().end());
        shape[static_cast<size_t>(dim)] = count;
        return Tensor::make(t.device_ptr(), t.buffer(), t.dtype(), shape, strides,
                            t.offset() + first * t.stride(dim));
      };
      bool done = true;
      for (int64_t g = 0; g < o.groups && done; ++g) {
        KILN_ASSIGN(const Tensor xg, channels(x5, 1, g * cg, cg));
        KILN_ASSIGN(const Tensor wg, channels(w5, 0, g * kpg, kpg));
        KILN_ASSIGN(Tensor yg, channels(y5, 1, g * kpg, kpg));
        std::optional<Tensor> bg, rg;
        if (o.bias) {
          KILN_ASSIGN(bg, channels(*o.bias, 0, g * kpg, kpg));
        }
        if (r5) {
          KILN_ASSIGN(rg, channels(*r5, 1, g * kpg, kpg));
        }
        KILN_ASSIGN(done, gemm(rt, xg, wg, yg, s, p, dl, bg ? &*bg : nullptr, rg ? &*rg : nullptr,
                               o.epilogue, o.plan));
      }
      if (done) {
        if (o.plan) o.plan->config += fmt::format("; one product per group ({} groups)", o.groups);
        return {};
      }
    }
  }
  const int kb = kpg >= 8 ? 8 : kpg >= 4 ? 4 : kpg >= 2 ? 2 : 1;
  const int64_t positions = y5.shape(2) * y5.shape(3) * y5.shape(4);
  const int64_t by = o.groups * ((kpg + kb - 1) / kb);
  constexpr int64_t kUnits = 128;
  if (by > 65535 || x5.shape(0) > 65535 || (positions + kUnits - 1) / kUnits > (int64_t{1} << 31))
    return bad(
        fmt::format("the grid would be {} x {} x {} cubes; at most 65535 groups of {} output "
                    "channels and 65535 batch items",
                    (positions + kUnits - 1) / kUnits, by, x5.shape(0), kb));
  Tensor bias, residual;
  if (o.bias) {
    bias = o.bias->as_read_only();
  } else {
    KILN_ASSIGN(bias, rt.empty(ElemType::F32, {1}));
  }
  if (o.residual) {
    KILN_ASSIGN(residual, rank5(*o.residual, o.layout));
    residual = residual.as_read_only();
  } else {
    KILN_ASSIGN(residual, rt.empty(y.dtype(), {1, 1, 1, 1, 1}));
  }
  KILN_ASSIGN(const Kernel direct, rt.kernel("conv_direct"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  if (o.plan)
    *o.plan = {"conv_direct", fmt::format("{} output channel{} per unit", kb, kb == 1 ? "" : "s"),
               "every output position from its window, no copy of x"};
  return rt.launch(direct, Dim3(u((positions + kUnits - 1) / kUnits), u(by), u(x5.shape(0))),
                   Dim3(u(kUnits)), x5.as_read_only(), w5.as_read_only(), y5, bias, residual,
                   u(o.groups), s[0], s[1], s[2], p[0], p[1], p[2], dl[0], dl[1], dl[2], kb,
                   o.epilogue, o.bias != nullptr, o.residual != nullptr);
}

namespace {

// The checks the backward passes share: the tensors' devices and types, and that `dy`'s shape
// is the output of a convolution of `input` (x's or dx's shape) with `weights` (w's or dw's).
Status check_backward(const char* op, bool of_input, const Tensor& input, const Tensor& weights,
                      const Tensor& dy, const Tensor& out, const ConvOptions& o) {
  const std::pair<const Tensor*, const char*> all[] = {
      {&input, of_input ? "dx" : "x"}, {&weights, of_input ? "w" : "dw"}, {&dy, "dy"}};
  for (const auto& [t, name] : all) {
    if (!t->valid())
      return detail::bad(op, fmt::format("the tensor '{}' is empty (no buffer)", name));
    if (t->device() != dy.device())
      return detail::bad(op, fmt::format("the tensor '{}' is on another device than dy", name));
    if (!detail::fits_u32(*t))
      return detail::bad(
          op, fmt::format("the tensor '{}' ({}) spans 2^32 elements or more", name, t->describe()));
  }
  if (o.bias || o.residual || o.epilogue != Epilogue::None)
    return detail::bad(op,
                       "the bias, residual and epilogue are the forward pass's; the gradient "
                       "through them is the caller's (dy already holds it)");
  auto shape = conv_output_shape(input.shape(), weights.shape(), o);
  if (!shape) {
    std::string m = shape.error().message;
    const std::string from = "kiln::lib::conv: ";
    if (m.rfind(from, 0) == 0) m = m.substr(from.size());
    return detail::bad(op, m);
  }
  if (dy.rank() != static_cast<int>(shape->size()) ||
      !std::equal(shape->begin(), shape->end(), dy.shape().begin()))
    return detail::bad(op,
                       fmt::format("dy is {}; a convolution of {} by {} gives {}", dy.describe(),
                                   input.describe(), weights.describe(), detail::dims(*shape)));
  const ElemType in = dy.dtype();
  const Tensor& other = of_input ? weights : input;
  if ((in != ElemType::F32 && in != ElemType::F16 && in != ElemType::BF16) || other.dtype() != in)
    return detail::bad(op, fmt::format("dy is {} and {} {}; both must hold the same type, f32, "
                                       "f16 or bf16",
                                       dy.describe(), of_input ? "w" : "x", other.describe()));
  if (out.dtype() != ElemType::F32 && out.dtype() != in)
    return detail::bad(op, fmt::format("{} is {}; the gradient is f32 or dy's type ({})",
                                       of_input ? "dx" : "dw", out.describe(), ir::elem_name(in)));
  if (out.read_only())
    return detail::bad(op, fmt::format("the tensor '{}' is read-only", of_input ? "dx" : "dw"));
  return {};
}

// The geometry in the direct kernels' 3-d terms.
struct Geometry3 {
  std::array<uint32_t, 3> s{1, 1, 1}, p{0, 0, 0}, dl{1, 1, 1};
};
Geometry3 geometry3(const Geometry& g) {
  Geometry3 r;
  for (int d = 0; d < g.dims; ++d) {
    const auto i = static_cast<size_t>(d), at = static_cast<size_t>(3 - g.dims + d);
    r.s[at] = static_cast<uint32_t>(g.stride[i]);
    r.p[at] = static_cast<uint32_t>(g.front[i]);
    r.dl[at] = static_cast<uint32_t>(g.dilation[i]);
  }
  return r;
}

}  // namespace

namespace {

// The weights' gradient of a dense convolution on the CPU as GEMMs on matmul's micro-kernel:
// dw^T [C taps, K] = sum over the batch items n of im2col(x_n)^T [C taps, P] dy_n^T [P, K],
// im2col^T packed straight into the micro-kernel's slivers by conv_pack_im2col_t a chunk of
// positions at a time, each chunk's product added to the last (beta 1) in f32: into dw itself
// when it is f32, else into an f32 scratch copied to dw at the end.
Result<bool> weight_gemm_cpu(Runtime& rt, const Tensor& x5, const Tensor& dy5, Tensor& dw5,
                             const Geometry3& g, MatmulPlan* plan) {
  const int64_t ws = column_stride(dw5), ys = position_stride(dy5);
  if (ws == 0 || ys == 0) return false;
  const int64_t n = x5.shape(0), k = dw5.shape(0),
                columns = dw5.shape(1) * dw5.shape(2) * dw5.shape(3) * dw5.shape(4),
                positions = dy5.shape(2) * dy5.shape(3) * dy5.shape(4);
  KILN_ASSIGN(
      const Tensor dwt,
      Tensor::make(dw5.device_ptr(), dw5.buffer(), dw5.dtype(), std::vector<int64_t>{columns, k},
                   std::vector<int64_t>{ws, dw5.stride(0)}, dw5.offset()));
  Tensor target = dwt;
  if (dw5.dtype() != ElemType::F32) {
    KILN_ASSIGN(target, rt.empty(ElemType::F32, {columns, k}));
  }
  KILN_ASSIGN(const Tensor c, detail::matmul_rank5(target, false));
  const int64_t len =
      std::clamp<int64_t>(im2col_bytes() / std::max<int64_t>(columns * 4, 1), 1, positions);
  KILN_ASSIGN(const Kernel pack, rt.kernel("conv_pack_im2col_t"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  std::string config;
  bool first = true;
  for (int64_t item = 0; item < n; ++item)
    for (int64_t p0 = 0; p0 < positions; p0 += len) {
      const int64_t count = std::min(len, positions - p0);
      detail::MatmulProblem q;
      q.m = columns;
      q.n = k;
      q.k = count;
      KILN_ASSIGN(q.a, Tensor::make(x5.device_ptr(), x5.buffer(), x5.dtype(),
                                    std::vector<int64_t>{1, 1, 1, columns, count},
                                    std::vector<int64_t>{0, 0, 0, 0, 0}, x5.offset()));
      KILN_ASSIGN(q.b, Tensor::make(dy5.device_ptr(), dy5.buffer(), dy5.dtype(),
                                    std::vector<int64_t>{1, 1, 1, count, k},
                                    std::vector<int64_t>{0, 0, 0, ys, dy5.stride(1)},
                                    dy5.offset() + item * dy5.stride(0) + p0 * ys));
      q.c = c;
      MatmulOptions m;
      m.beta = first ? 0.0f : 1.0f;
      const detail::PackRows pack_rows = [&](Tensor& ap, int mr) -> Status {
        return rt.launch(pack, Dim3(u((columns + mr - 1) / mr)), Dim3(u(mr)), x5.as_read_only(), ap,
                         u(dy5.shape(3)), u(dy5.shape(4)), u(dw5.shape(2)), u(dw5.shape(3)),
                         u(dw5.shape(4)), g.s[0], g.s[1], g.s[2], g.p[0], g.p[1], g.p[2], g.dl[0],
                         g.dl[1], g.dl[2], u(item), u(p0), u(count));
      };
      KILN_TRY(detail::matmul_cpu_packed_a(rt, q, m, pack_rows, &config));
      first = false;
    }
  if (dw5.dtype() != ElemType::F32) {
    Tensor out = dwt;
    KILN_TRY(copy(rt, target, out));
  }
  if (plan)
    *plan = {"matmul_cpu",
             fmt::format("{}; im2col^T packed by conv_pack_im2col_t, {} of {} positions at a "
                         "time, {} batch item{} summed",
                         config, len, positions, n, n == 1 ? "" : "s"),
             "a dense convolution's weight gradient on the CPU: GEMMs on matmul's micro-kernel"};
  return true;
}

}  // namespace

namespace {

// The input's gradient of a dense convolution as a GEMM and a gather: per batch item, dcol
// [P, C taps] = dy_n^T [P, K] w [K, C taps] (kiln::lib::matmul on views, in chunks of positions
// within the im2col budget), then conv_col2im adds each chunk's rows into the item's f32
// gradient, which is copied into dx (converting its type) once the item is done. Strides up to
// 64 (comptime in conv_col2im).
Result<bool> input_gemm(Runtime& rt, const Tensor& dy5, const Tensor& w5, Tensor& dx5,
                        const Geometry3& g, MatmulPlan* plan) {
  const int64_t ws = column_stride(w5), ys = position_stride(dy5);
  if (ws == 0 || ys == 0 || g.s[0] > 64 || g.s[1] > 64 || g.s[2] > 64) return false;
  const int64_t n = dx5.shape(0), k = w5.shape(0), c = dx5.shape(1),
                columns = w5.shape(1) * w5.shape(2) * w5.shape(3) * w5.shape(4),
                positions = dy5.shape(2) * dy5.shape(3) * dy5.shape(4),
                inputs = c * dx5.shape(2) * dx5.shape(3) * dx5.shape(4);
  const int64_t len =
      std::clamp<int64_t>(im2col_bytes() / std::max<int64_t>(columns * 4, 1), 1, positions);
  KILN_ASSIGN(const Tensor wv, Tensor::make(w5.device_ptr(), w5.buffer(), w5.dtype(),
                                            std::vector<int64_t>{k, columns},
                                            std::vector<int64_t>{w5.stride(0), ws}, w5.offset()));
  KILN_ASSIGN(Tensor dcol, rt.empty(ElemType::F32, {len, columns}));
  KILN_ASSIGN(Tensor acc, rt.empty(ElemType::F32, {c, dx5.shape(2), dx5.shape(3), dx5.shape(4)}));
  KILN_ASSIGN(const Kernel gather, rt.kernel("conv_col2im"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  MatmulPlan product;
  for (int64_t item = 0; item < n; ++item) {
    for (int64_t p0 = 0; p0 < positions; p0 += len) {
      const int64_t count = std::min(len, positions - p0);
      KILN_ASSIGN(const Tensor a, Tensor::make(dy5.device_ptr(), dy5.buffer(), dy5.dtype(),
                                               std::vector<int64_t>{count, k},
                                               std::vector<int64_t>{ys, dy5.stride(1)},
                                               dy5.offset() + item * dy5.stride(0) + p0 * ys));
      KILN_ASSIGN(Tensor rows, dcol.slice(0, 0, count));
      MatmulOptions m;
      m.plan = &product;
      KILN_TRY(matmul(rt, a, wv, rows, m));
      KILN_TRY(rt.launch(gather, Dim3(u((inputs + 127) / 128)), Dim3(128), dcol.as_read_only(), acc,
                         u(c), u(dx5.shape(2)), u(dx5.shape(3)), u(dx5.shape(4)), u(dy5.shape(2)),
                         u(dy5.shape(3)), u(dy5.shape(4)), u(w5.shape(2)), u(w5.shape(3)),
                         u(w5.shape(4)), g.p[0], g.p[1], g.p[2], g.dl[0], g.dl[1], g.dl[2], u(p0),
                         u(count), u(p0 == 0 ? 1 : 0), static_cast<int>(g.s[0]),
                         static_cast<int>(g.s[1]), static_cast<int>(g.s[2])));
    }
    KILN_ASSIGN(Tensor out,
                Tensor::make(dx5.device_ptr(), dx5.buffer(), dx5.dtype(),
                             std::vector<int64_t>{c, dx5.shape(2), dx5.shape(3), dx5.shape(4)},
                             std::vector<int64_t>{dx5.stride(1), dx5.stride(2), dx5.stride(3),
                                                  dx5.stride(4)},
                             dx5.offset() + item * dx5.stride(0)));
    KILN_TRY(copy(rt, acc, out));
  }
  if (plan)
    *plan = {product.kernel,
             fmt::format("dy^T w by {} ({}), {} of {} positions at a time, gathered by "
                         "conv_col2im",
                         product.kernel, product.config, len, positions),
             "a dense convolution's input gradient: a GEMM and a gather"};
  return true;
}

}  // namespace

Status conv_backward_input(Runtime& rt, const Tensor& dy, const Tensor& w, Tensor& dx,
                           const ConvOptions& o) {
  KILN_TRY(check_backward("conv_backward_input", true, dx, w, dy, dx, o));
  int64_t numel = 1;
  for (int64_t d : dx.shape()) numel *= d;
  if (numel == 0) return {};
  KILN_ASSIGN(const Geometry g, geometry(dx.shape(), w.shape(), o));
  const Geometry3 g3 = geometry3(g);
  KILN_ASSIGN(const Tensor dy5, rank5(dy, o.layout));
  KILN_ASSIGN(const Tensor w5, rank5(w, Layout::Nchw));
  KILN_ASSIGN(Tensor dx5, rank5(dx, o.layout));
  if (rt.device().lane_units && o.groups == 1) {
    KILN_ASSIGN(const bool done, input_gemm(rt, dy5, w5, dx5, g3, o.plan));
    if (done) return {};
  }
  const int64_t cg = w.shape(1);
  // 2 input channels per unit at most: with 4 or 8, CUDA 13's ptxas spills a few words on some
  // targets (sm_89, sm_90a, sm_100a, by type and stride: the spill test found them), with 2 on
  // none. The CPU takes this kernel only for grouped layers (dense ones are a GEMM).
  const int kb = cg >= 2 ? 2 : 1;
  const int64_t positions = dx5.shape(2) * dx5.shape(3) * dx5.shape(4);
  const int64_t by = o.groups * ((cg + kb - 1) / kb);
  constexpr int64_t kUnits = 128;
  if (by > 65535 || dx5.shape(0) > 65535)
    return detail::bad("conv_backward_input",
                       fmt::format("the grid would be {} x {} cubes along the channels and the "
                                   "batch; at most 65535 each",
                                   by, dx5.shape(0)));
  if (std::max({g3.s[0], g3.s[1], g3.s[2]}) > 64)
    return detail::bad("conv_backward_input",
                       fmt::format("a stride of {} is past the 64 the kernels compile for",
                                   std::max({g3.s[0], g3.s[1], g3.s[2]})));
  KILN_ASSIGN(const Kernel k, rt.kernel("conv_grad_input"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  if (o.plan)
    *o.plan = {"conv_grad_input",
               fmt::format("{} input channel{} per unit", kb, kb == 1 ? "" : "s"),
               "every input position from the outputs whose windows cover it"};
  return rt.launch(k, Dim3(u((positions + kUnits - 1) / kUnits), u(by), u(dx5.shape(0))),
                   Dim3(u(kUnits)), dy5.as_read_only(), w5.as_read_only(), dx5, u(o.groups),
                   g3.p[0], g3.p[1], g3.p[2], g3.dl[0], g3.dl[1], g3.dl[2], kb,
                   static_cast<int>(g3.s[0]), static_cast<int>(g3.s[1]), static_cast<int>(g3.s[2]));
}

Status conv_backward_weight(Runtime& rt, const Tensor& x, const Tensor& dy, Tensor& dw,
                            const ConvOptions& o, Tensor* dbias) {
  KILN_TRY(check_backward("conv_backward_weight", false, x, dw, dy, dw, o));
  if (dbias &&
      (!dbias->valid() || dbias->dtype() != ElemType::F32 || dbias->rank() != 1 ||
       dbias->shape(0) != dw.shape(0) || dbias->device() != dy.device() || dbias->read_only()))
    return detail::bad("conv_backward_weight",
                       fmt::format("dbias is {}; it must be a writable f32[{}] (one per output "
                                   "channel) on dy's device",
                                   dbias->valid() ? dbias->describe() : "empty", dw.shape(0)));
  KILN_ASSIGN(const Geometry g, geometry(x.shape(), dw.shape(), o));
  const Geometry3 g3 = geometry3(g);
  KILN_ASSIGN(const Tensor x5, rank5(x, o.layout));
  KILN_ASSIGN(const Tensor dy5, rank5(dy, o.layout));
  KILN_ASSIGN(Tensor dw5, rank5(dw, Layout::Nchw));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  int64_t weights = 1;
  for (int64_t d : dw.shape()) weights *= d;
  bool done = false;
  if (weights > 0 && rt.device().lane_units && o.groups == 1) {
    KILN_ASSIGN(done, weight_gemm_cpu(rt, x5, dy5, dw5, g3, o.plan));
  }
  if (weights > 0 && !done) {
    KILN_ASSIGN(const Kernel k, rt.kernel("conv_grad_weight"));
    KILN_TRY(rt.launch(k, Dim3(u((weights + 127) / 128)), Dim3(128), x5.as_read_only(),
                       dy5.as_read_only(), dw5, u(o.groups), g3.s[0], g3.s[1], g3.s[2], g3.p[0],
                       g3.p[1], g3.p[2], g3.dl[0], g3.dl[1], g3.dl[2]));
  }
  if (o.plan && !done)
    *o.plan = {"conv_grad_weight", "a unit per weight",
               "each weight summed over the batch and every output position"};
  if (!dbias || dbias->shape(0) == 0) return {};
  KILN_ASSIGN(const Kernel kb, rt.kernel("conv_grad_bias"));
  Tensor db = *dbias;
  return rt.launch(kb, Dim3(u((dw.shape(0) + 63) / 64)), Dim3(64), dy5.as_read_only(), db);
}

}  // namespace kiln::lib

// `kiln run conv1d|conv2d|conv3d`: kiln::lib::conv on random inputs against a double reference.
// --shape x=NxCx[Dx][Hx]W (with --set channels_last=1: Nx[D]x[H]xWxC) --shape w=KxCgx[KD]x[KH]xKW;
// --set stride=, padding=, padding_end= (-1: as padding), dilation= (each for every dimension),
// same=1 (PyTorch's padding="same"), groups=, use_bias=1, use_residual=1, epilogue=0 (none),
// 1 (ReLU), 2 (GELU) or 3 (SiLU).
namespace {

using kiln::kernels::RunData;
using kiln::lib::ConvOptions;
using kiln::lib::Layout;

ConvOptions run_options(const RunData& d) {
  ConvOptions o;
  o.stride = {static_cast<int64_t>(d.scalar("stride"))};
  o.padding = {static_cast<int64_t>(d.scalar("padding"))};
  if (d.scalar("padding_end") >= 0) o.padding_end = {static_cast<int64_t>(d.scalar("padding_end"))};
  o.dilation = {static_cast<int64_t>(d.scalar("dilation"))};
  o.same = d.scalar("same") != 0;
  o.groups = static_cast<int64_t>(d.scalar("groups"));
  o.layout = d.scalar("channels_last") != 0 ? Layout::Nhwc : Layout::Nchw;
  return o;
}

std::vector<int64_t> run_y_shape(const RunData& d) {
  auto s = kiln::lib::conv_output_shape(d.shape("x"), d.shape("w"), run_options(d));
  return s ? *s : std::vector<int64_t>(d.shape("x").size(), 0);  // refused by the call
}

// Row-major strides of a tensor of shape `s` in `layout`, as [N, C, D, H, W] (1-d and 2-d ones
// with leading spatial dimensions of 1).
std::array<int64_t, 5> canonical_strides(const std::vector<int64_t>& s, Layout layout) {
  std::vector<int64_t> row(s.size(), 1);
  for (size_t i = s.size() - 1; i-- > 0;) row[i] = row[i + 1] * s[i + 1];
  std::array<int64_t, 5> out{row[0], 0, 0, 0, 0};
  const size_t c = layout == Layout::Nhwc ? s.size() - 1 : 1;
  out[1] = row[c];
  size_t at = 5 - (s.size() - 2);
  for (size_t i = 1; i < s.size(); ++i)
    if (i != c) out[at++] = row[i];
  return out;
}

std::array<int64_t, 5> canonical_shape(const std::vector<int64_t>& s, Layout layout) {
  std::array<int64_t, 5> out{s[0], 0, 1, 1, 1};
  const size_t c = layout == Layout::Nhwc ? s.size() - 1 : 1;
  out[1] = s[c];
  size_t at = 5 - (s.size() - 2);
  for (size_t i = 1; i < s.size(); ++i)
    if (i != c) out[at++] = s[i];
  return out;
}

// Every product of a convolution, in double: for each output element (n, k, o) and tap
// (c, t) whose input lies inside x (not in the padding), fn(output at, input at, weight at), the
// flat row-major indices of y, x and w (in their layouts) for a run whose input, weight and
// output tensors have these shapes.
template <class F>
void each_product(const RunData& d, const std::vector<int64_t>& xshape,
                  const std::vector<int64_t>& wshape, const std::vector<int64_t>& yshape, F&& fn) {
  const ConvOptions o = run_options(d);
  const auto X = canonical_shape(xshape, o.layout), W = canonical_shape(wshape, Layout::Nchw),
             Y = canonical_shape(yshape, o.layout);
  const auto xs = canonical_strides(xshape, o.layout), ws = canonical_strides(wshape, Layout::Nchw),
             yst = canonical_strides(yshape, o.layout);
  const int dims = static_cast<int>(xshape.size()) - 2;
  // Per canonical spatial dimension (D, H, W): stride, front padding, dilation.
  std::array<int64_t, 3> st{1, 1, 1}, pf{0, 0, 0}, dl{1, 1, 1};
  for (int i = 0; i < dims; ++i) {
    const auto at = static_cast<size_t>(3 - dims + i);
    st[at] = static_cast<int64_t>(d.scalar("stride"));
    dl[at] = static_cast<int64_t>(d.scalar("dilation"));
    pf[at] = static_cast<int64_t>(d.scalar("padding"));
    if (o.same) pf[at] = dl[at] * (W[static_cast<size_t>(2 + at)] - 1) / 2;
  }
  const int64_t cg = W[1], kpg = Y[1] / o.groups;
  for (int64_t n = 0; n < Y[0]; ++n)
    for (int64_t k = 0; k < Y[1]; ++k)
      for (int64_t od = 0; od < Y[2]; ++od)
        for (int64_t oh = 0; oh < Y[3]; ++oh)
          for (int64_t ow = 0; ow < Y[4]; ++ow) {
            const auto yat = static_cast<size_t>(n * yst[0] + k * yst[1] + od * yst[2] +
                                                 oh * yst[3] + ow * yst[4]);
            const int64_t g = k / kpg;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t kd = 0; kd < W[2]; ++kd)
                for (int64_t kh = 0; kh < W[3]; ++kh)
                  for (int64_t kw = 0; kw < W[4]; ++kw) {
                    const int64_t id = od * st[0] + kd * dl[0] - pf[0],
                                  ih = oh * st[1] + kh * dl[1] - pf[1],
                                  iw = ow * st[2] + kw * dl[2] - pf[2];
                    if (id < 0 || id >= X[2] || ih < 0 || ih >= X[3] || iw < 0 || iw >= X[4])
                      continue;
                    fn(yat,
                       static_cast<size_t>(n * xs[0] + (g * cg + c) * xs[1] + id * xs[2] +
                                           ih * xs[3] + iw * xs[4]),
                       static_cast<size_t>(k * ws[0] + c * ws[1] + kd * ws[2] + kh * ws[3] +
                                           kw * ws[4]));
                  }
          }
}

void conv_reference(RunData& d) {
  const auto ys = run_y_shape(d);
  const auto& x = d["x"];
  const auto& w = d["w"];
  const auto& bias = d["bias"];
  const auto& residual = d["residual"];
  auto& y = d["y"];
  std::vector<double> sum(y.size(), 0.0);
  each_product(d, d.shape("x"), d.shape("w"), ys,
               [&](size_t yat, size_t xat, size_t wat) { sum[yat] += x[xat] * w[wat]; });
  const bool use_bias = d.scalar("use_bias") != 0, use_residual = d.scalar("use_residual") != 0;
  const auto epilogue = static_cast<Epilogue>(static_cast<int>(d.scalar("epilogue")));
  const auto cf = canonical_shape(ys, run_options(d).layout);
  const auto yst = canonical_strides(ys, run_options(d).layout);
  for (size_t at = 0; at < y.size(); ++at) {
    double v = sum[at];
    const auto k = static_cast<int64_t>(at) / yst[1] % cf[1];
    if (use_bias) v += bias[static_cast<size_t>(k)];
    if (use_residual) v += residual[at];
    y[at] = d.round("y", kiln::lib::detail::reference_activation(v, epilogue));
  }
}

kiln::kernels::HostOp conv_op(int dims) {
  using kiln::ir::ElemType;
  kiln::kernels::HostOp op;
  op.description = fmt::format(
      "{}-d convolution, NCHW or NHWC, groups, fused epilogue: "
      "kiln::lib::conv",
      dims);
  op.kernels = {"conv_direct",   "conv_pack_im2col", "conv_im2col_rows", "matmul_pack_a",
                "matmul_pack_b", "matmul_cpu",       "matmul_gpu",       "matmul_pack_rows",
                "matmul_ring",   "matmul_sm90",      "matmul_sm100"};
  op.tensors = {{"x", true}, {"w", true}, {"bias", true}, {"residual", true}, {"y", false}};
  for (const auto& [in, out] : {std::pair{ElemType::F32, ElemType::F32},
                                {ElemType::F16, ElemType::F32},
                                {ElemType::BF16, ElemType::F32},
                                {ElemType::F16, ElemType::F16},
                                {ElemType::BF16, ElemType::BF16}})
    op.variants.push_back({in, in, ElemType::F32, out, out});
  for (const char* s : {"stride", "padding", "dilation", "groups", "epilogue"})
    op.scalars.push_back({s, ElemType::U32});
  op.scalars.push_back({"padding_end", ElemType::F32});
  for (const char* s : {"same", "channels_last", "use_bias", "use_residual"})
    op.scalars.push_back({s, ElemType::Bool});
  op.call = [dims](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
                   const RunData& d) -> kiln::Status {
    const char* name = dims == 1 ? "conv1d" : dims == 2 ? "conv2d" : "conv3d";
    if (static_cast<int>(d.shape("x").size()) != dims + 2)
      return kiln::Error(kiln::ErrorKind::InvalidArgument,
                         fmt::format("{}: x is {}; --shape x= takes {} dimensions (N, C and {} "
                                     "spatial)",
                                     name, kiln::lib::detail::dims(d.shape("x")), dims + 2, dims));
    ConvOptions o = run_options(d);
    KILN_ASSIGN(o.epilogue, kiln::lib::detail::run_epilogue(name, d.scalar("epilogue")));
    const kiln::Tensor bias = t.at("bias"), residual = t.at("residual");
    if (d.scalar("use_bias") != 0) o.bias = &bias;
    if (d.scalar("use_residual") != 0) o.residual = &residual;
    kiln::lib::MatmulPlan plan;
    o.plan = &plan;
    KILN_TRY(kiln::lib::conv(rt, t.at("x"), t.at("w"), t.at("y"), o));
    d.plan = fmt::format("{}: {} ({})", plan.kernel, plan.config, plan.why);
    return kiln::Status{};
  };
  return op;
}

kiln::kernels::RunRecipe& conv_recipe(kiln::kernels::RunRecipe& r, int dims) {
  std::vector<int64_t> x = {2, 16}, w = {24, 16};
  const int64_t side = dims == 1 ? 50 : dims == 2 ? 20 : 8;
  for (int i = 0; i < dims; ++i) {
    x.push_back(side);
    w.push_back(3);
  }
  return r.host(conv_op(dims))
      .shape("x", x)
      .shape("w", w)
      .shape("bias", [](const RunData& d) { return std::vector<int64_t>{d.dim("w", 0)}; })
      .shape("residual", run_y_shape)
      .shape("y", run_y_shape)
      .scalar("stride", 1)
      .scalar("padding", 1)
      .scalar("padding_end", -1)
      .scalar("dilation", 1)
      .scalar("groups", 1)
      .scalar("epilogue", 0)
      .scalar("same", 0)
      .scalar("channels_last", 0)
      .scalar("use_bias", 0)
      .scalar("use_residual", 0)
      .flops([](const RunData& d) {
        double taps = 1;
        for (size_t i = 1; i < d.shape("w").size(); ++i)
          taps *= static_cast<double>(d.shape("w")[i]);
        double out = 1;
        for (int64_t s : run_y_shape(d)) out *= static_cast<double>(s);
        return 2.0 * out * taps;
      })
      // f32 sums of C/groups x kernel products (inputs in [-1, 1]), then the result's rounding.
      .tolerance([](const RunData& d, std::string_view) -> std::pair<double, double> {
        double taps = 1;
        for (size_t i = 1; i < d.shape("w").size(); ++i)
          taps *= static_cast<double>(d.shape("w")[i]);
        const double sums = 2e-6 * taps + 1e-5;
        switch (d.dtype("y")) {
          case kiln::ir::ElemType::F16:
            return {4e-3, 2e-3 + sums};
          case kiln::ir::ElemType::BF16:
            return {3e-2, 1e-2 + sums};
          default:
            return {1e-5, sums};
        }
      })
      .reference(conv_reference);
}

}  // namespace

// `kiln run convNd_backward_input` (dy, w -> dx; --shape dx= is x's shape) and
// `convNd_backward_weight` (x, dy -> dw and dbias; --shape dw= is w's shape): the backward passes
// against double references built from the same products as the forward's.
std::vector<int64_t> backward_dy_shape(const RunData& d, const char* input, const char* weights) {
  auto s = kiln::lib::conv_output_shape(d.shape(input), d.shape(weights), run_options(d));
  return s ? *s : std::vector<int64_t>(d.shape(input).size(), 0);
}

kiln::kernels::RunRecipe& conv_backward_recipe(kiln::kernels::RunRecipe& r, int dims,
                                               bool of_input) {
  using kiln::ir::ElemType;
  kiln::kernels::HostOp op;
  const char* name_in = of_input ? "dx" : "x";
  const char* name_w = of_input ? "w" : "dw";
  op.description = fmt::format("{}-d convolution's gradient of the {}: kiln::lib::conv_backward_{}",
                               dims, of_input ? "input" : "weights", of_input ? "input" : "weight");
  if (of_input)
    op.kernels = {"conv_grad_input", "conv_col2im", "matmul_pack_a", "matmul_pack_b", "matmul_cpu"};
  else
    op.kernels = {"conv_grad_weight", "conv_grad_bias", "conv_pack_im2col_t", "matmul_pack_b",
                  "matmul_cpu"};
  if (of_input)
    op.tensors = {{"dy", true}, {"w", true}, {"dx", false}};
  else
    op.tensors = {{"x", true}, {"dy", true}, {"dw", false}, {"dbias", false}};
  for (const auto& [in, out] : {std::pair{ElemType::F32, ElemType::F32},
                                {ElemType::F16, ElemType::F32},
                                {ElemType::BF16, ElemType::F32},
                                {ElemType::F16, ElemType::F16},
                                {ElemType::BF16, ElemType::BF16}}) {
    if (of_input)
      op.variants.push_back({in, in, out});
    else
      op.variants.push_back({in, in, out, ElemType::F32});
  }
  for (const char* s : {"stride", "padding", "dilation", "groups"})
    op.scalars.push_back({s, ElemType::U32});
  op.scalars.push_back({"padding_end", ElemType::F32});
  for (const char* s : {"same", "channels_last"}) op.scalars.push_back({s, ElemType::Bool});
  op.call = [dims, of_input](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
                             const RunData& d) -> kiln::Status {
    const char* input = of_input ? "dx" : "x";
    if (static_cast<int>(d.shape(input).size()) != dims + 2)
      return kiln::Error(
          kiln::ErrorKind::InvalidArgument,
          fmt::format("conv{}d_backward: {} is {}; --shape {}= takes {} dimensions "
                      "(N, C and {} spatial)",
                      dims, input, kiln::lib::detail::dims(d.shape(input)), input, dims + 2, dims));
    ConvOptions o = run_options(d);
    kiln::lib::MatmulPlan plan;
    o.plan = &plan;
    if (of_input) {
      KILN_TRY(kiln::lib::conv_backward_input(rt, t.at("dy"), t.at("w"), t.at("dx"), o));
    } else {
      KILN_TRY(kiln::lib::conv_backward_weight(rt, t.at("x"), t.at("dy"), t.at("dw"), o,
                                               &t.at("dbias")));
    }
    d.plan = fmt::format("{}: {} ({})", plan.kernel, plan.config, plan.why);
    return kiln::Status{};
  };
  std::vector<int64_t> x = {2, 16}, w = {24, 16};
  const int64_t side = dims == 1 ? 50 : dims == 2 ? 20 : 8;
  for (int i = 0; i < dims; ++i) {
    x.push_back(side);
    w.push_back(3);
  }
  r.host(std::move(op))
      .shape(name_in, x)
      .shape(name_w, w)
      .scalar("stride", 1)
      .scalar("padding", 1)
      .scalar("padding_end", -1)
      .scalar("dilation", 1)
      .scalar("groups", 1)
      .scalar("same", 0)
      .scalar("channels_last", 0);
  if (of_input) {
    r.shape("dy", [](const RunData& d) { return backward_dy_shape(d, "dx", "w"); })
        .tolerance([](const RunData& d, std::string_view) -> std::pair<double, double> {
          double taps = static_cast<double>(d.dim("w", 0));
          for (size_t i = 2; i < d.shape("w").size(); ++i)
            taps *= static_cast<double>(d.shape("w")[i]);
          const double sums = 2e-6 * taps + 1e-5;
          if (d.dtype("dx") == ElemType::F16) return {4e-3, 2e-3 + sums};
          if (d.dtype("dx") == ElemType::BF16) return {3e-2, 1e-2 + sums};
          return {1e-5, sums};
        })
        .reference([](RunData& d) {
          auto& dx = d["dx"];
          std::vector<double> sum(dx.size(), 0.0);
          const auto& dy = d["dy"];
          const auto& w = d["w"];
          each_product(d, d.shape("dx"), d.shape("w"), d.shape("dy"),
                       [&](size_t yat, size_t xat, size_t wat) { sum[xat] += dy[yat] * w[wat]; });
          for (size_t i = 0; i < dx.size(); ++i) dx[i] = d.round("dx", sum[i]);
        });
  } else {
    r.shape("dy", [](const RunData& d) { return backward_dy_shape(d, "x", "dw"); })
        .shape("dbias", [](const RunData& d) { return std::vector<int64_t>{d.dim("dw", 0)}; })
        .tolerance([](const RunData& d, std::string_view name) -> std::pair<double, double> {
          double terms = 1;
          for (size_t i = 0; i < d.shape("dy").size(); ++i)
            if (i != (d.scalar("channels_last") != 0 ? d.shape("dy").size() - 1 : 1))
              terms *= static_cast<double>(d.shape("dy")[i]);
          const double sums = 2e-6 * terms + 1e-5;
          if (name == "dw" && d.dtype("dw") == ElemType::F16) return {4e-3, 2e-3 + sums};
          if (name == "dw" && d.dtype("dw") == ElemType::BF16) return {3e-2, 1e-2 + sums};
          return {1e-5, sums};
        })
        .reference([](RunData& d) {
          auto& dw = d["dw"];
          auto& dbias = d["dbias"];
          std::vector<double> sum(dw.size(), 0.0), bias(dbias.size(), 0.0);
          const auto& dy = d["dy"];
          const auto& x = d["x"];
          each_product(d, d.shape("x"), d.shape("dw"), d.shape("dy"),
                       [&](size_t yat, size_t xat, size_t wat) { sum[wat] += dy[yat] * x[xat]; });
          const auto layout = run_options(d).layout;
          const auto cf = canonical_shape(d.shape("dy"), layout);
          const auto st = canonical_strides(d.shape("dy"), layout);
          for (size_t at = 0; at < dy.size(); ++at)
            bias[static_cast<size_t>(static_cast<int64_t>(at) / st[1] % cf[1])] += dy[at];
          for (size_t i = 0; i < dw.size(); ++i) dw[i] = d.round("dw", sum[i]);
          for (size_t i = 0; i < dbias.size(); ++i) dbias[i] = bias[i];
        });
  }
  return r;
}

// (KILN_RUN's registration, with the recipe shared by the three ranks.)
[[maybe_unused]] static kiln::kernels::RunRecipe& conv1d_recipe =
    conv_recipe(kiln::kernels::run_recipe("conv1d", reinterpret_cast<const void*>(+[] {})), 1);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv2d_recipe =
    conv_recipe(kiln::kernels::run_recipe("conv2d", reinterpret_cast<const void*>(+[] {})), 2);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv3d_recipe =
    conv_recipe(kiln::kernels::run_recipe("conv3d", reinterpret_cast<const void*>(+[] {})), 3);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv1d_backward_input_recipe =
    conv_backward_recipe(
        kiln::kernels::run_recipe("conv1d_backward_input", reinterpret_cast<const void*>(+[] {})),
        1, true);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv1d_backward_weight_recipe =
    conv_backward_recipe(
        kiln::kernels::run_recipe("conv1d_backward_weight", reinterpret_cast<const void*>(+[] {})),
        1, false);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv2d_backward_input_recipe =
    conv_backward_recipe(
        kiln::kernels::run_recipe("conv2d_backward_input", reinterpret_cast<const void*>(+[] {})),
        2, true);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv2d_backward_weight_recipe =
    conv_backward_recipe(
        kiln::kernels::run_recipe("conv2d_backward_weight", reinterpret_cast<const void*>(+[] {})),
        2, false);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv3d_backward_input_recipe =
    conv_backward_recipe(
        kiln::kernels::run_recipe("conv3d_backward_input", reinterpret_cast<const void*>(+[] {})),
        3, true);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv3d_backward_weight_recipe =
    conv_backward_recipe(
        kiln::kernels::run_recipe("conv3d_backward_weight", reinterpret_cast<const void*>(+[] {})),
        3, false);
