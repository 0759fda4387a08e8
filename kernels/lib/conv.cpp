// The convolutions of kiln::lib::conv (conv.h): the forward kernels and the forward pass's host
// side, with the helpers every pass shares (conv_parts.h; the backward passes' host side is in
// conv_backward.cpp, their kernels in conv_backward_kernels.cpp, `kiln run`'s recipes in
// conv_run.cpp). 1 x 1 convolutions run as the matrix products they are (kiln::lib::matmul, on
// views of x, w and y: no copy); other dense ones as GEMMs on im2col chunks; the rest directly.
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
#include "kernels/lib/conv_parts.h"
#include "kernels/lib/elementwise.h"
#include "kernels/lib/matmul_parts.h"

using namespace kiln::dsl;
using kiln::lib::Epilogue;
using kiln::lib::matmul_parts::activate;
using kiln::lib::matmul_parts::batch_index;
using kiln::lib::matmul_parts::BatchIndex;
using kiln::lib::matmul_parts::broadcast_offset;
using kiln::lib::matmul_parts::cpu_gemm_blocks;

using kiln::lib::detail::InOut;

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

// A depthwise convolution (each output channel k reads one input channel, c = k / (K / C)):
// cube (bx, by, bz) computes output columns ow = bx units + u of channel k = bz % K of batch
// item bz / K, in output plane od = by / bands and its rows oh = (by % bands) rows .. + rows - 1
// (bands = ceil(OH / rows), given). Each weight is one number for the cube and each tap reads a
// segment of one input row: on the CPU a vector load per tap for 16 outputs (masked at the
// edges), no gathers. The taps are unrolled (`taps_d`, `taps_h`, `taps_w`; 0: a loop), and
// when there are at most 32 of them their weights and the column tests are loaded and made
// once per cube, before the rows. Sums in f32, in the order kd, kh, kw. With `flip` the taps are
// read reversed: the gradient of a stride-1 depthwise convolution with respect to its input is
// this convolution of dy by the flipped weights, with padding (k - 1) d - p.
template <class P>
void conv_depthwise(Tensor<const typename P::In> x, Tensor<const typename P::In> w,
                    Tensor<typename P::Out> y, Tensor<const f32> bias,
                    Tensor<const typename P::Out> residual, u32 sd, u32 sh, u32 sw, u32 pd, u32 ph,
                    u32 pw, u32 dd, u32 dh, u32 dw, u32 rows, u32 bands, int units, int block,
                    int taps_d, int taps_h, int taps_w, int step_w, bool unit_rows, bool flip,
                    Epilogue epilogue, bool has_bias, bool has_residual) {
  using In = host_of_t<typename P::In>;
  using Out = host_of_t<typename P::Out>;
  u32 k_n = y.shape(1), oh_n = y.shape(3), ow_n = y.shape(4);
  u32 n = cube_pos_z() / k_n, k = cube_pos_z() % k_n;
  u32 c = k / (k_n / x.shape(1));
  u32 ow = cube_pos_x() * static_cast<uint32_t>(units) + unit_pos();
  if_(ow >= ow_n, [&] { return_(); });
  u32 d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4);
  u32 kd_n = w.shape(2), kh_n = w.shape(3), kw_n = w.shape(4);
  u32 xc = n * x.stride(0) + c * x.stride(1), wk = k * w.stride(0);
  u32 iw0 = ow * sw - pw;  // the input column of tap 0 (tap kw: + kw dw)
  // The tap index into w (reversed with `flip`).
  auto tap = [&](const Val<uint32_t>& i, const Val<uint32_t>& count) -> Val<uint32_t> {
    return flip ? count - 1u - i : i;
  };
  // Tap (kd, kh, kw)'s weight, from the start of its row of w (wr).
  auto weight_row = [&](const Val<uint32_t>& kd, const Val<uint32_t>& kh) -> Val<uint32_t> {
    return wk + tap(kd, kd_n) * w.stride(2) + tap(kh, kh_n) * w.stride(3);
  };
  auto weight_at = [&](const Val<uint32_t>& wr, const Val<uint32_t>& kw) -> Val<float> {
    return cast<float>(Val<In>(w[wr + tap(kw, kw_n) * w.stride(4)]));
  };
  auto weight = [&](const Val<uint32_t>& kd, const Val<uint32_t>& kh,
                    const Val<uint32_t>& kw) -> Val<float> {
    return weight_at(weight_row(kd, kh), kw);
  };
  auto constant = [](int t) { return u32(static_cast<uint32_t>(t)); };
  u32 od = cube_pos_y() / bands;
  u32 q0 = cube_pos_y() % bands * rows;
  u32 q_end = min(q0 + rows, oh_n);
  u32 id0 = od * sd - pd;  // the input plane of tap 0 (tap kd: + kd dd)
  u32 y0 = n * y.stride(0) + k * y.stride(1) + od * y.stride(2);
  // With every tap unrolled and at most 32 of them, their weights and the tests of their
  // columns are made once, before the rows (loop-invariant, in registers).
  const bool ahead = taps_d > 0 && taps_h > 0 && taps_w > 0 && taps_d * taps_h * taps_w <= 32;
  const bool shared_rows = ahead && unit_rows;
  std::vector<Val<float>> w_ahead;
  std::vector<Val<bool>> col_ok;
  if (ahead) {
    for (int a = 0; a < taps_d; ++a)
      for (int b = 0; b < taps_h; ++b)
        for (int t = 0; t < taps_w; ++t)
          w_ahead.push_back(weight(constant(a), constant(b), constant(t)));
  }
  if (taps_w > 0)
    for (int t = 0; t < taps_w; ++t) col_ok.push_back(iw0 + constant(t) * dw < w_n);
  const auto nb = static_cast<uint32_t>(block);
  // `block` output rows at a time: `block` independent sums.
  for_range(q0, q_end, nb, [&](u32 q) {
    std::vector<Var<f32>> acc;
    for (uint32_t r = 0; r < nb; ++r) acc.push_back(Var<f32>(0.0f));
    // Taps (kd, kh, *) of the rows: `index` numbers the unrolled (kd, kh) pairs, -1 in a loop.
    auto taps = [&](const Val<uint32_t>& kd, const Val<uint32_t>& kh, int index) {
      u32 id = id0 + kd * dd;
      std::vector<Val<float>> wv;
      if (taps_w > 0 && !ahead) {
        u32 wr = weight_row(kd, kh);
        for (int t = 0; t < taps_w; ++t) wv.push_back(weight_at(wr, constant(t)));
      }
      for (uint32_t r = 0; r < nb; ++r) {
        u32 ih = (q + r) * sh + kh * dh - ph;
        if_(q + r < q_end && id < d_n && ih < h_n, [&] {
          u32 xr = xc + id * x.stride(2) + ih * x.stride(3);
          auto at = [&](const Val<uint32_t>& kw) -> Val<uint32_t> {
            // With `step_w`, x's rows are contiguous and sw is step_w: the index is visibly
            // unit-strided (consecutive for step_w 1), with no test of the strides at run time.
            return step_w > 0 ? xr + ow * static_cast<uint32_t>(step_w) + (kw * dw - pw)
                              : xr + (iw0 + kw * dw) * x.stride(4);
          };
          if (taps_w > 0) {
            for (int t = 0; t < taps_w; ++t) {
              Val<float> wt = ahead ? w_ahead[static_cast<size_t>(index * taps_w + t)]
                                    : wv[static_cast<size_t>(t)];
              if_(col_ok[static_cast<size_t>(t)], [&] {
                acc[r] = fma(cast<float>(Val<In>(x[at(constant(t))])), wt, Val<float>(acc[r]));
              });
            }
          } else {
            u32 wr = weight_row(kd, kh);
            for_range(0u, kw_n, 1u, [&](u32 kw) {
              if_(iw0 + kw * dw < w_n, [&] {
                acc[r] =
                    fma(cast<float>(Val<In>(x[at(kw)])), weight_at(wr, kw), Val<float>(acc[r]));
              });
            });
          }
        });
      }
    };
    auto rows_of = [&](const Val<uint32_t>& kd, int a) {
      if (taps_h > 0) {
        for (int b = 0; b < taps_h; ++b) taps(kd, constant(b), a < 0 ? -1 : a * taps_h + b);
      } else {
        for_range(0u, kh_n, 1u, [&](u32 kh) { taps(kd, kh, -1); });
      }
    };
    if (shared_rows) {
      // Stride and dilation 1 along the height: output row q + r, tap kh reads input row
      // q + r + kh - ph, so the block's rows read nb + kh_n - 1 input rows, each segment
      // loaded once for every output row that uses it. A row past q_end sums what is never
      // stored (the loads stay inside x: each tests its row).
      for (int a = 0; a < taps_d; ++a) {
        u32 id = id0 + constant(a) * dd;
        for (int j = 0; j < static_cast<int>(nb) + taps_h - 1; ++j) {
          u32 ih = q + constant(j) - ph;
          if_(id < d_n && ih < h_n, [&] {
            u32 xr = xc + id * x.stride(2) + ih * x.stride(3);
            for (int t = 0; t < taps_w; ++t) {
              if_(col_ok[static_cast<size_t>(t)], [&] {
                u32 at = step_w > 0
                             ? xr + ow * static_cast<uint32_t>(step_w) + (constant(t) * dw - pw)
                             : xr + (iw0 + constant(t) * dw) * x.stride(4);
                Val<float> xv = cast<float>(Val<In>(x[at]));
                for (int r = 0; r < static_cast<int>(nb); ++r) {
                  const int b = j - r;  // the tap along the height
                  if (b < 0 || b >= taps_h) continue;
                  const auto i = static_cast<size_t>((a * taps_h + b) * taps_w + t);
                  acc[static_cast<size_t>(r)] =
                      fma(xv, w_ahead[i], Val<float>(acc[static_cast<size_t>(r)]));
                }
              });
            }
          });
        }
      }
    } else if (taps_d > 0) {
      for (int a = 0; a < taps_d; ++a) rows_of(constant(a), a);
    } else {
      for_range(0u, kd_n, 1u, [&](u32 kd) { rows_of(kd, -1); });
    }
    for (uint32_t r = 0; r < nb; ++r) {
      if_(q + r < q_end, [&] {
        Var<f32> v = acc[r];
        if (has_bias) v += Val<float>(bias[k]);
        if (has_residual)
          v += cast<float>(Val<Out>(
              residual[n * residual.stride(0) + k * residual.stride(1) + od * residual.stride(2) +
                       (q + r) * residual.stride(3) + ow * residual.stride(4)]));
        y[y0 + (q + r) * y.stride(3) + ow * y.stride(4)] = cast<Out>(activate(v, epilogue));
      });
    }
  });
}
KILN_KERNEL_GENERIC(
    conv_depthwise,
    "x: rank=5, w: rank=5, y: rank=5, bias, residual: rank=5, sd, sh, sw, pd, ph, "
    "pw, dd, dh, dw, rows, bands, units = 64 in 16..1024, block = 2 in 1..4, "
    "taps_d = 0 in 0..8, "
    "taps_h = 0 in 0..8, taps_w = 0 in 0..8, step_w = 0 in 0..4, unit_rows = false, flip = false, "
    "epilogue = None, has_bias = false, has_residual = false",
    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>, InOut<bf16, bf16>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("kiln::lib::conv: a depthwise convolution, output rows along the units");

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

// y_n [K, P] = epilogue(w [K, Q] im2col(x_n)^T [Q, P] + beta y_n) for a dense convolution whose
// positions are contiguous in y (NCHW): matmul_cpu's blocks (cpu_gemm_blocks), w packed as its
// A by matmul_pack_a, but B packed by each cube itself, for its own block of positions and one
// chunk of kc columns (c, kd, kh, kw) at a time, into its shared memory: the im2col matrix is
// never written to memory, not even in chunks. Cube (x, y, z) computes the block of mc output
// channels from y mc and nb positions from x nb of batch item z. Each unit packs, and later
// reads, only its own lanes of the block, so no barrier is needed. The output position of each
// of the block's columns (od, oh, ow) is found once per cube; per column of the chunk, a tap's
// offsets are uniform. With `flat` (stride 1, y's positions as many as x's in every dimension,
// x's positions contiguous: a "same" layer such as ResNet's 3 x 3 ones) the value of position p
// for a tap is x's element p + the tap's shift, so consecutive lanes read consecutive floats
// even where their positions cross a row: one masked vector load per vector of positions (the
// padding's lanes off), not a gather.
template <class P>
void conv_gemm_cpu(Tensor<const f32> ap, Tensor<const typename P::In> x, Tensor<typename P::Out> c,
                   Tensor<const f32> bias, u32 oh_n, u32 ow_n, u32 kd_n, u32 kh_n, u32 kw_n, u32 sd,
                   u32 sh, u32 sw, u32 pd, u32 ph, u32 pw, u32 dd, u32 dh, u32 dw, f32 beta, u32 mc,
                   u32 nb, u32 kc, int mr, int vectors, int lanes, int tile, int block, bool flat,
                   bool flip, Epilogue epilogue) {
  using In = host_of_t<typename P::In>;
  const auto umr = static_cast<uint32_t>(mr), ulanes = static_cast<uint32_t>(lanes),
             unr = static_cast<uint32_t>(vectors * lanes);
  assert_(mc % umr == 0u && nb % unr == 0u && mc * nb <= static_cast<uint32_t>(tile) &&
              kc * nb <= static_cast<uint32_t>(block) && kc > 0u,
          "mc must be a multiple of mr, nb of vectors * lanes, mc * nb at most tile, kc * nb at "
          "most block, kc above 0");
  auto tile_sums = shared_array<f32>(static_cast<uint32_t>(tile));
  auto packed = shared_array<f32>(static_cast<uint32_t>(block));
  const auto most = static_cast<uint32_t>(tile / mr);  // nb's largest value
  auto pos_d = shared_array<u32>(most), pos_h = shared_array<u32>(most),
       pos_w = shared_array<u32>(most);
  u32 z = cube_pos_z(), unit = unit_pos();
  u32 n = c.shape(4), k = x.shape(1) * kd_n * kh_n * kw_n;
  u32 d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4), plane = h_n * w_n;
  u32 col0 = cube_pos_x() * nb;
  u32 cols = min(nb, (n + (unr - 1u)) / unr * unr - min(col0, (n + (unr - 1u)) / unr * unr));
  u32 xn = z * x.stride(0);
  // The output position of each of the block's columns (the unit's lanes only).
  for_range(0u, cols, ulanes, [&](u32 e0) {
    u32 e = e0 + unit;
    u32 p = min(col0 + e, n - 1u);
    pos_w[e] = p % ow_n;
    pos_h[e] = p / ow_n % oh_n;
    pos_d[e] = p / (ow_n * oh_n);
  });
  // Columns pc .. pc + depth - 1 of the block's im2col^T rows into `packed`: sliver j (of unr
  // positions) holds column kk's values at (j kc + kk) unr.
  auto pack = [&](const Val<uint32_t>& pc, const Val<uint32_t>& depth, const Val<uint32_t>&,
                  const Val<uint32_t>&) {
    // The chunk's first column as (ch, td, th, tw), then one step at a time (divisions per
    // column cost as much as packing it where a block has few positions).
    u32 t1 = pc / kw_n, t2 = t1 / kh_n;
    Var<u32> tw = pc % kw_n, th = t1 % kh_n, td = t2 % kd_n, ch = t2 / kd_n;
    for_range(0u, depth, 1u, [&](u32 kk) {
      // With `flip` the taps are read reversed.
      u32 cw = tw, chh = th, cd = td;
      u32 kw = flip ? kw_n - 1u - cw : cw, kh = flip ? kh_n - 1u - chh : chh,
          kd = flip ? kd_n - 1u - cd : cd;
      u32 doff = kd * dd - pd, hoff = kh * dh - ph, woff = kw * dw - pw;
      u32 xc = xn + Val<uint32_t>(ch) * x.stride(1);
      u32 xq = xc + doff * plane + hoff * w_n + woff;
      for_range(0u, cols, unr, [&](u32 j) {
        u32 slot = (j / unr * kc + kk) * unr + unit;
        for (uint32_t v = 0; v < static_cast<uint32_t>(vectors); ++v) {
          u32 e = j + v * ulanes + unit;
          u32 p = col0 + e;
          Var<f32> value(0.0f);
          if (flat) {
            Val<bool> ok =
                p < n && pos_d[e] + doff < d_n && pos_h[e] + hoff < h_n && pos_w[e] + woff < w_n;
            if_(ok, [&] { value = cast<float>(Val<In>(x[xq + p])); });
          } else {
            u32 id = pos_d[e] * sd + doff, ih = pos_h[e] * sh + hoff, iw = pos_w[e] * sw + woff;
            Val<bool> ok = p < n && id < d_n && ih < h_n && iw < w_n;
            if_(ok, [&] {
              value = cast<float>(
                  Val<In>(x[xc + id * x.stride(2) + ih * x.stride(3) + iw * x.stride(4)]));
            });
          }
          packed[slot + v * ulanes] = value;
        }
      });
      // The next column: tw, then th, then td, then the channel.
      u32 w1 = Val<uint32_t>(tw) + 1u;
      Val<bool> wrap_w = w1 == kw_n;
      u32 h1 = select(wrap_w, Val<uint32_t>(th) + 1u, Val<uint32_t>(th));
      Val<bool> wrap_h = h1 == kh_n;
      u32 d1 = select(wrap_h, Val<uint32_t>(td) + 1u, Val<uint32_t>(td));
      Val<bool> wrap_d = d1 == kd_n;
      tw = select(wrap_w, 0u, w1);
      th = select(wrap_h, 0u, h1);
      td = select(wrap_d, 0u, d1);
      ch = select(wrap_d, Val<uint32_t>(ch) + 1u, Val<uint32_t>(ch));
    });
  };
  const BatchIndex item = batch_index(c, z);
  cpu_gemm_blocks(ap, c, bias, k, u32(0u), broadcast_offset(item, c), f32(1.0f), beta, mc, nb, kc,
                  mr, vectors, lanes, tile_sums, epilogue, false, pack,
                  [&](const Val<uint32_t>& jr, const Val<uint32_t>&) {
                    u32 base = jr / unr * kc * unr + unit;
                    return [&, base](const Val<uint32_t>& kk, uint32_t q) -> Val<float> {
                      return packed[base + kk * unr + q * ulanes];
                    };
                  });
}
KILN_KERNEL_GENERIC(conv_gemm_cpu,
                    "ap, x: rank=5, c: rank=5, bias, oh_n, ow_n, kd_n, kh_n, kw_n, sd, sh, sw, "
                    "pd, ph, pw, dd, dh, dw, beta, mc, nb, kc, mr = 12 in 1..32, "
                    "vectors = 2 in 1..4, lanes = 16 in 1..64, tile = 131072 in 1..16777216, "
                    "block = 131072 in 1..16777216, flat = false, flip = false, epilogue = None",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe("kiln::lib::conv on the CPU: an implicit GEMM packing its own blocks of im2col");

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

namespace kiln::lib {

using ir::ElemType;
using namespace conv_parts;

namespace {

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

}  // namespace

namespace conv_parts {

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

bool pointwise(const Geometry& g, std::span<const int64_t> w, int64_t groups) {
  bool yes = groups == 1;
  for (int d = 0; d < g.dims; ++d) {
    const auto i = static_cast<size_t>(d);
    yes = yes && w[i + 2] == 1 && g.stride[i] == 1 && g.front[i] == 0 && g.back[i] == 0;
  }
  return yes;
}

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

Result<Chunks> im2col_chunks(int64_t n, int64_t positions, int64_t row_bytes, int64_t round) {
  int64_t budget = int64_t{32} << 20;
  if (const char* v = std::getenv("KILN_CONV_IM2COL_BYTES")) {
    char* end = nullptr;
    const long long b = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0' || b <= 0)
      return bad(
          fmt::format("KILN_CONV_IM2COL_BYTES is '{}'; it must be a positive number of "
                      "bytes (unset: 32 MiB)",
                      v));
    budget = b;
  }
  const int64_t item_bytes = positions * std::max<int64_t>(row_bytes, 1);
  Chunks c;
  c.items = std::clamp<int64_t>(budget / std::max<int64_t>(item_bytes, 1), 1, n);
  c.rows = c.items > 1 || item_bytes <= budget
               ? positions
               : std::min(positions, std::max(round, budget / std::max<int64_t>(row_bytes, 1) /
                                                         round * round));
  return c;
}

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

Status depthwise(Runtime& rt, const Tensor& x5, const Tensor& w5, Tensor& y5, const Geometry3& g,
                 const Tensor* bias, const Tensor* residual5, Epilogue epilogue, bool flip,
                 MatmulPlan* plan) {
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const int64_t ow = y5.shape(4), od_n = y5.shape(2), oh_n = y5.shape(3);
  const int64_t planes = y5.shape(0) * y5.shape(1);
  const bool gpu = !rt.device().lane_units;
  const int units = static_cast<int>(std::clamp<int64_t>((ow + 15) / 16 * 16, 16, gpu ? 128 : 256));
  const int64_t along = (ow + units - 1) / units;
  // Rows per cube: about 1024 cubes' worth of work split, at most 4 (GPUs) or 16 rows, whole
  // blocks of 4 on the CPU.
  int64_t rows = std::clamp<int64_t>(along * od_n * oh_n * planes / 1024, 1, gpu ? 4 : 16);
  if (!gpu) rows = std::min((rows + 3) / 4 * 4, oh_n);
  const int64_t bands = od_n * ((oh_n + rows - 1) / rows);
  if (planes > 65535 || bands > 65535)
    return bad(
        fmt::format("the grid would be {} x {} x {} cubes; at most 65535 batch items x "
                    "channels and 65535 bands of rows",
                    along, bands, planes));
  Tensor b, r;
  if (bias) {
    b = bias->as_read_only();
  } else {
    KILN_ASSIGN(b, rt.empty(ElemType::F32, {1}));
  }
  if (residual5) {
    r = residual5->as_read_only();
  } else {
    KILN_ASSIGN(r, rt.empty(y5.dtype(), {1, 1, 1, 1, 1}));
  }
  const int block = gpu ? 1 : static_cast<int>(std::min<int64_t>(rows, 4));
  const int taps_d = w5.shape(2) <= 8 ? static_cast<int>(w5.shape(2)) : 0;
  const int taps_h = w5.shape(3) <= 8 ? static_cast<int>(w5.shape(3)) : 0;
  const int taps_w = w5.shape(4) <= 8 ? static_cast<int>(w5.shape(4)) : 0;
  const int step_w = x5.stride(4) == 1 && g.s[2] <= 4 ? static_cast<int>(g.s[2]) : 0;
  // Height stride and dilation 1: the kernel loads each input row segment once per block.
  const bool unit_rows = !gpu && g.s[1] == 1 && g.dl[1] == 1;
  KILN_ASSIGN(const Kernel k, rt.kernel("conv_depthwise"));
  if (plan)
    *plan = {"conv_depthwise",
             fmt::format("{} columns x {} row{} per cube", units, rows, rows == 1 ? "" : "s"),
             flip ? "the input's gradient as a depthwise convolution of dy by the flipped weights"
                  : "a depthwise convolution, each tap a row segment"};
  return rt.launch(k, Dim3(u(along), u(bands), u(planes)), Dim3(u(units)), x5.as_read_only(),
                   w5.as_read_only(), y5, b, r, g.s[0], g.s[1], g.s[2], g.p[0], g.p[1], g.p[2],
                   g.dl[0], g.dl[1], g.dl[2], u(rows), u((oh_n + rows - 1) / rows), units, block,
                   taps_d, taps_h, taps_w, step_w, unit_rows, flip, epilogue, bias != nullptr,
                   residual5 != nullptr);
}

}  // namespace conv_parts

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

// A 1 x 1 convolution with stride 1 and no padding as matmul: y^T [N, P, K] = x^T [N, P, C]
// w^T [C, K], the bias per column; the residual copied into y first and added as beta y.
Result<bool> as_matmul(Runtime& rt, const Tensor& x5, const Tensor& w5, Tensor& y5,
                       const ConvOptions& o) {
  const int64_t sx = position_stride(x5), sy = position_stride(y5);
  if (sx == 0 || sy == 0) return false;
  const int64_t n = x5.shape(0), c = x5.shape(1), k = y5.shape(1),
                p = y5.shape(2) * y5.shape(3) * y5.shape(4);
  // Positions contiguous in y (NCHW): y_n [K, P] = w [K, C] x_n [C, P], every operand
  // row-major (the other form would store C column by column). The bias, per row there, is
  // put into y first with the residual, added by the product as beta y; with a 16-bit y that
  // would round the bias before the sum, so such a y takes the other form.
  if (sy == 1 && (!o.bias || y5.dtype() == ElemType::F32)) {
    auto view = [](const Tensor& t, std::vector<int64_t> shape, std::vector<int64_t> strides) {
      return Tensor::make(t.device_ptr(), t.buffer(), t.dtype(), std::move(shape),
                          std::move(strides), t.offset());
    };
    KILN_ASSIGN(const Tensor a, view(w5, {k, c}, {w5.stride(0), w5.stride(1)}));
    KILN_ASSIGN(const Tensor b, view(x5, {n, c, p}, {x5.stride(0), x5.stride(1), sx}));
    KILN_ASSIGN(Tensor out, view(y5, {n, k, p}, {y5.stride(0), y5.stride(1), sy}));
    MatmulOptions m;
    m.epilogue = o.epilogue;
    m.plan = o.plan;
    std::optional<Tensor> r;
    if (o.residual) {
      KILN_ASSIGN(const Tensor r5, rank5(*o.residual, o.layout));
      if (position_stride(r5) == 0) return false;
      KILN_ASSIGN(r, view(r5, {n, k, p}, {r5.stride(0), r5.stride(1), position_stride(r5)}));
    }
    if (o.bias) {
      KILN_ASSIGN(const Tensor rows, view(*o.bias, {n, k, p}, {0, o.bias->stride(0), 0}));
      KILN_TRY(copy(rt, rows, out));
      if (r) KILN_TRY(binary(rt, Op::Add, out, *r, out));
      m.beta = 1.0f;
    } else if (r) {
      KILN_TRY(copy(rt, *r, out));
      m.beta = 1.0f;
    }
    KILN_TRY(matmul(rt, a, b, out, m));
    if (o.plan)
      o.plan->why =
          "a 1 x 1 convolution with stride 1 and no padding is a matrix product, y = w x "
          "per batch item (" +
          o.plan->why + ")";
    return true;
  }
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

}  // namespace

namespace conv_parts {

Result<std::string> gemm_cpu(Runtime& rt, const Tensor& x5, const Tensor& a,
                             const std::array<int64_t, 3>& taps, Tensor& y5,
                             const std::array<uint32_t, 3>& s, const std::array<uint32_t, 3>& p,
                             const std::array<uint32_t, 3>& dl, float beta, Epilogue epilogue,
                             bool flip) {
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const int64_t n = x5.shape(0), m = a.shape(3), columns = a.shape(4),
                positions = y5.shape(2) * y5.shape(3) * y5.shape(4);
  detail::MatmulProblem q;
  q.m = m;
  q.n = positions;
  q.k = columns;
  q.batch = q.batch_b = n;
  q.a = a;
  KILN_ASSIGN(q.c,
              Tensor::make(y5.device_ptr(), y5.buffer(), y5.dtype(),
                           std::vector<int64_t>{1, 1, n, m, positions},
                           std::vector<int64_t>{0, 0, y5.stride(0), y5.stride(1), 1}, y5.offset()));
  detail::CpuBlocking bl = detail::matmul_cpu_blocking(rt, q);
  // Each block packs its columns of im2col^T once per chunk of K for all its rows: blocks of
  // rows as tall as A's block allows in L2 (11 slivers: 132 rows with AVX-512; measured on a
  // 2-core Ice Lake Xeon, a 128-channel 3 x 3 layer at batch 8 took 8.4 ms with 132 rows
  // against 10.6 ms with matmul's 96), the output channels split into equal blocks of at most
  // that.
  const int64_t tall = 11 * bl.mr, parts = (m + tall - 1) / tall;
  bl.mc = std::min<int64_t>(((m + parts - 1) / parts + bl.mr - 1) / bl.mr * bl.mr,
                            bl.tile / bl.nb / bl.mr * bl.mr);
  // The block of packed columns (kc x nb floats) in the kernel's `block` floats of shared
  // memory, as the tile of sums takes `tile` (nb at most block / 16, so that kc is at least 16).
  const int64_t block = bl.tile, nr = int64_t{bl.vectors} * bl.lanes;
  bl.nb = std::min<int64_t>(bl.nb, std::max<int64_t>(nr, block / 16 / nr * nr));
  if (bl.kc * bl.nb > block) bl.kc = std::max<int64_t>(16, block / bl.nb / 16 * 16);
  KILN_ASSIGN(const Tensor ap, detail::matmul_cpu_pack_a(rt, q, bl));
  KILN_ASSIGN(const Kernel gemm, rt.kernel("conv_gemm_cpu"));
  // Stride 1, y's positions as many as x's in every dimension and x's contiguous: each tap's
  // column of im2col^T is x shifted (conv_gemm_cpu's `flat` form).
  const bool flat = s == std::array<uint32_t, 3>{1, 1, 1} && y5.shape(2) == x5.shape(2) &&
                    y5.shape(3) == x5.shape(3) && y5.shape(4) == x5.shape(4) &&
                    (x5.shape(4) == 1 || x5.stride(4) == 1) &&
                    (x5.shape(3) == 1 || x5.stride(3) == x5.shape(4)) &&
                    (x5.shape(2) == 1 || x5.stride(2) == x5.shape(3) * x5.shape(4));
  KILN_ASSIGN(const Tensor unused, rt.empty(ElemType::F32, {1}));
  Tensor c = q.c;
  KILN_TRY(rt.launch(
      gemm, Dim3(u((positions + bl.nb - 1) / bl.nb), u((m + bl.mc - 1) / bl.mc), u(n)),
      Dim3(u(bl.lanes)), ap.as_read_only(), x5.as_read_only(), c, unused.as_read_only(),
      u(y5.shape(3)), u(y5.shape(4)), u(taps[0]), u(taps[1]), u(taps[2]), s[0], s[1], s[2], p[0],
      p[1], p[2], dl[0], dl[1], dl[2], beta, u(bl.mc), u(bl.nb), u(bl.kc), bl.mr, bl.vectors,
      bl.lanes, bl.tile, static_cast<int>(block), flat, flip, epilogue));
  return fmt::format(
      "{}; im2col^T packed by each block for itself ({} positions x {} columns "
      "per item{})",
      bl.text(), positions, columns, flat ? ", each tap's column x shifted" : "");
}

}  // namespace conv_parts

namespace {

// A dense convolution on the CPU as an implicit GEMM on matmul's micro-kernel. With positions
// contiguous in y (NCHW): y_n [K, P] = w [K, C taps] im2col(x_n)^T [C taps, P] by conv_gemm_cpu,
// which packs its own blocks of im2col^T (every row of C the micro-kernel stores is then
// contiguous); the bias, per row there, goes into y first (with the residual) and is added as
// beta y. Otherwise (NHWC, or a 16-bit y with a bias, which would be rounded before the sum):
// y^T [P, K] = im2col(x) [P, C taps] w^T [C taps, K], im2col's rows packed straight into the
// micro-kernel's slivers by conv_pack_im2col a chunk at a time (batch items, or positions of
// one item) and multiplied by matmul_cpu, w packed as its B, the bias per column, a residual
// (r5: y's [N, K, D, H, W] view of it) copied into y first and added as beta y.
Result<bool> implicit_gemm_cpu(Runtime& rt, const Tensor& x5, const Tensor& w5, Tensor& y5,
                               const std::array<uint32_t, 3>& s, const std::array<uint32_t, 3>& p,
                               const std::array<uint32_t, 3>& dl, const Tensor* bias,
                               const Tensor* r5, Epilogue epilogue, MatmulPlan* plan) {
  const int64_t ws = column_stride(w5), ys = position_stride(y5);
  if (ws == 0 || ys == 0) return false;
  const int64_t n = x5.shape(0), k = w5.shape(0),
                columns = w5.shape(1) * w5.shape(2) * w5.shape(3) * w5.shape(4),
                positions = y5.shape(2) * y5.shape(3) * y5.shape(4);
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const bool rows_of_y = ys == 1 && (!bias || y5.dtype() == ElemType::F32);
  if (rows_of_y && bias) {
    KILN_ASSIGN(const Tensor per_row,
                Tensor::make(bias->device_ptr(), bias->buffer(), bias->dtype(),
                             std::vector<int64_t>(y5.shape().begin(), y5.shape().end()),
                             std::vector<int64_t>{0, bias->stride(0), 0, 0, 0}, bias->offset()));
    KILN_TRY(copy(rt, per_row, y5));
    if (r5) KILN_TRY(binary(rt, Op::Add, y5, *r5, y5));
  } else if (r5) {
    KILN_TRY(copy(rt, *r5, y5));
  }
  if (rows_of_y) {
    KILN_ASSIGN(const Tensor a,
                Tensor::make(w5.device_ptr(), w5.buffer(), w5.dtype(),
                             std::vector<int64_t>{1, 1, 1, k, columns},
                             std::vector<int64_t>{0, 0, 0, w5.stride(0), ws}, w5.offset()));
    const std::array<int64_t, 3> taps{w5.shape(2), w5.shape(3), w5.shape(4)};
    KILN_ASSIGN(const std::string config,
                gemm_cpu(rt, x5, a, taps, y5, s, p, dl, r5 || bias ? 1.0f : 0.0f, epilogue, false));
    if (plan)
      *plan = {"conv_gemm_cpu", config + ", as B of y = w im2col^T",
               "a dense convolution on the CPU: an implicit GEMM on matmul's micro-kernel"};
    return true;
  }
  KILN_ASSIGN(const Tensor b,
              Tensor::make(w5.device_ptr(), w5.buffer(), w5.dtype(),
                           std::vector<int64_t>{1, 1, 1, columns, k},
                           std::vector<int64_t>{0, 0, 0, ws, w5.stride(0)}, w5.offset()));
  // Whole batch items per chunk when one fits, else positions of one item.
  KILN_ASSIGN(const Chunks chunks, im2col_chunks(n, positions, columns * 4, 96));
  const int64_t items = chunks.items, rows = chunks.rows;
  KILN_ASSIGN(const Kernel pack, rt.kernel("conv_pack_im2col"));
  MatmulOptions m;
  m.bias = bias;
  m.epilogue = epilogue;
  m.beta = r5 ? 1.0f : 0.0f;
  std::string config;
  for (int64_t n0 = 0; n0 < n; n0 += items) {
    const int64_t chunk_items = std::min(items, n - n0);
    for (int64_t p0 = 0; p0 < positions; p0 += rows) {
      const int64_t chunk_rows = std::min(rows, positions - p0);
      // Slivers of mr positions of the chunk's im2col rows, A's of y^T.
      auto pack_im2col = [&](Tensor& packed, int width) -> Status {
        return rt.launch(pack, Dim3(u((chunk_rows + width - 1) / width), 1, u(chunk_items)),
                         Dim3(u(width)), x5.as_read_only(), packed, u(y5.shape(3)), u(y5.shape(4)),
                         u(w5.shape(2)), u(w5.shape(3)), u(w5.shape(4)), s[0], s[1], s[2], p[0],
                         p[1], p[2], dl[0], dl[1], dl[2], u(n0), u(p0), u(chunk_rows));
      };
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
      KILN_TRY(detail::matmul_cpu_packed_a(rt, q, m, pack_im2col, &config));
    }
  }
  if (plan)
    *plan = {"matmul_cpu",
             fmt::format("{}; im2col packed by conv_pack_im2col, {} of {} positions x {} "
                         "columns at a time",
                         config, items > 1 ? items * positions : rows, n * positions, columns),
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
  KILN_ASSIGN(const Chunks chunks, im2col_chunks(n, positions, columns * size, 128));
  const int64_t items = chunks.items, rows = chunks.rows;
  KILN_ASSIGN(Tensor chunk, rt.empty(x5.dtype(), {items, rows, columns}));
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
    *plan = {
        product.kernel,
        fmt::format("{}; im2col rows by conv_im2col_rows, {} of {} positions x {} columns "
                    "at a time",
                    product.config, items > 1 ? items * positions : rows, n * positions, columns),
        "a dense convolution on a GPU: im2col chunks times w^T through matmul (" + product.why +
            ")"};
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
  // A 1 x 1 layer is the product on views, except on the CPU where conv_gemm_cpu takes it (its
  // blocks of 132 output channels, x's columns packed per block): measured on an Ice Lake Xeon
  // at batch 8, ResNet-50's 1 x 1 layers took 0.58-0.83 of the product's time with 196 or more
  // positions per item, the same with 49 (where its blocks of 32 positions waste lanes).
  const int64_t positions = y5.shape(2) * y5.shape(3) * y5.shape(4);
  const bool own_gemm = rt.device().lane_units && o.groups == 1 && position_stride(y5) == 1 &&
                        column_stride(w5) != 0 && (!o.bias || y5.dtype() == ElemType::F32) &&
                        positions >= 128;
  if (pointwise(g, w.shape(), o.groups) && !own_gemm) {
    KILN_ASSIGN(const bool done, as_matmul(rt, x5, w5, y5, o));
    if (done) return {};
  }
  // The kernels are 3-d: the missing leading dimensions of size 1 with no padding.
  const Geometry3 g3 = geometry3(g);
  const auto& s = g3.s;
  const auto& p = g3.p;
  const auto& dl = g3.dl;
  const int64_t kpg = k / o.groups, cg = w.shape(1), taps = w5.shape(2) * w5.shape(3) * w5.shape(4);
  // The dense products: the CPU's implicit GEMM, a GPU's im2col chunks and matmul.
  const auto gemm = rt.device().lane_units ? implicit_gemm_cpu : im2col_gemm;
  std::optional<Tensor> r5;
  if (o.residual) {
    KILN_ASSIGN(r5, rank5(*o.residual, o.layout));
  }
  if (o.groups == 1 || (kpg >= 8 && cg * taps >= 16)) {
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
  if (cg == 1)
    return depthwise(rt, x5, w5, y5, g3, o.bias, r5 ? &*r5 : nullptr, o.epilogue, false, o.plan);
  const int kb = kpg >= 8 ? 8 : kpg >= 4 ? 4 : kpg >= 2 ? 2 : 1;
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
  if (r5) {
    residual = r5->as_read_only();
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

}  // namespace kiln::lib
