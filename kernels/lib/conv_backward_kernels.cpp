// The DSL kernels of kiln::lib::conv_backward_input and conv_backward_weight (conv.h); their
// host side, which picks them, is in conv.cpp.
#include <utility>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"

using namespace kiln::dsl;
using kiln::lib::detail::InOut;

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
// item, [len, C taps] f32; element (position j, column q) at j js + q qs): unit e, an element (c,
// id, ih, iw) of the item's f32 gradient `acc`
// ([C, D, H, W]), sums dcol over the taps whose window puts it at a position of the chunk,
// o = (i + pad - tap dilation) / stride where that divides, and adds it to acc (or sets it, for
// the item's first chunk). The strides are comptime, so that the divisions by them are
// multiplications.
void conv_col2im(Tensor<const f32> dcol, Tensor<f32> acc, u32 c_n, u32 d_n, u32 h_n, u32 w_n,
                 u32 od_n, u32 oh_n, u32 ow_n, u32 kd_n, u32 kh_n, u32 kw_n, u32 pd, u32 ph, u32 pw,
                 u32 dd, u32 dh, u32 dw, u32 p0, u32 len, u32 first, u32 js, u32 qs, int sd, int sh,
                 int sw) {
  u32 e = cube_pos_x() * cube_dim() + unit_pos();
  if_(e >= c_n * d_n * h_n * w_n, [&] { return_(); });
  u32 iw = e % w_n, ih = e / w_n % h_n, id = e / (w_n * h_n) % d_n, c = e / (w_n * h_n * d_n);
  u32 taps = kd_n * kh_n * kw_n;
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
        sum += select(inside, Val<float>(dcol[select(inside, j * js + q * qs, 0u)]), 0.0f);
      });
    });
  });
  if_(first != 0u, [&] { acc[e] = sum; }).else_([&] { acc[e] = Val<float>(acc[e]) + sum; });
}
KILN_KERNEL(conv_col2im,
            "dcol, acc, c_n, d_n, h_n, w_n, od_n, oh_n, ow_n, kd_n, kh_n, kw_n, pd, ph, pw, dd, "
            "dh, dw, p0, len, first, js, qs, sd = 1 in 1..64, sh = 1 in 1..64, sw = 1 in 1..64")
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

// One step of rk x rc dot products (conv_weight_dots, conv_weight_taps): the rows of a and b
// starting at a_at and b_at, at column p; acc[i rc + j] += a[a_at[i] + p] b[b_at[j] + p].
template <class In, class T>
void dot_step(const Tensor<const T>& a, const std::vector<Val<uint32_t>>& a_at,
              const Tensor<const T>& b, const std::vector<Val<uint32_t>>& b_at,
              const Val<uint32_t>& p, std::vector<Var<f32>>& acc) {
  const size_t nc = b_at.size();
  std::vector<Val<float>> av;
  for (const Val<uint32_t>& r : a_at) av.push_back(cast<float>(Val<In>(a[r + p])));
  for (size_t j = 0; j < nc; ++j) {
    Val<float> bv = cast<float>(Val<In>(b[b_at[j] + p]));
    for (size_t i = 0; i < av.size(); ++i)
      acc[i * nc + j] = fma(av[i], bv, Val<float>(acc[i * nc + j]));
  }
}

// Each of acc's sums added across the cube's `un` units (one SIMD vector) in lane order, through
// shared memory (a plane reduction would keep the sums in memory during the loop that makes
// them on the CPU: they outlive the segment it ends): unit e adds up sum e and hands it to
// store(e, sum).
template <class Store>
void lane_totals(SharedArray<f32>& sums, std::vector<Var<f32>>& acc, const Val<uint32_t>& u,
                 uint32_t un, Store store) {
  const auto count = static_cast<uint32_t>(acc.size());
  for (uint32_t e = 0; e < count; ++e) sums[e * un + u] = Val<float>(acc[e]);
  sync_cube();
  for_range(u, count, un, [&](u32 e) {
    Var<f32> sum = 0.0f;
    for_range(0u, un, 1u, [&](u32 l) { sum += Val<float>(sums[e * un + l]); });
    store(e, Val<float>(sum));
  });
  sync_cube();
}

// Item n's share of a 1 x 1 convolution's weight gradient on the CPU, dw_n [K, C] = dy_n [K, P]
// x_n [C, P]^T: both operands hold the positions (the sum) contiguously, so instead of packing
// them transposed for matmul's micro-kernel, the units are the SIMD lanes walking the
// positions (a cube of `lanes` units, one vector), `rk` x `rc` dot products held in registers
// at a time (rk loads of a and rc of b per vector of positions for rk rc FMAs), each summed
// across the lanes at the end, in lane order. a and b are dy and x, or with `swap` x and dy
// (b, swept whole by every cube of an item, is the one that stays in the cache). Cube (ab, n)
// computes rows ab rk .. ab rk + rk - 1 of a against every block of rc rows of b; part[n, k, c]
// holds the item's product, summed over the items by conv_weight_items.
template <class T>
void conv_weight_dots(Tensor<const T> a, Tensor<const T> b, Tensor<f32> part, int rk, int rc,
                      int lanes, bool swap) {
  using In = host_of_t<T>;
  const auto nk = static_cast<uint32_t>(rk), nc = static_cast<uint32_t>(rc);
  u32 ab = cube_pos_x() * nk, n = cube_pos_y(), u = unit_pos();
  u32 a_n = a.shape(1), b_n = b.shape(1), p_n = a.shape(2);
  const auto un = static_cast<uint32_t>(lanes);
  auto lane_sums = shared_array<f32>(nk * nc * un);
  // The rows of a and b (past the end: the last row again, its sums never stored).
  std::vector<Val<uint32_t>> a_row;
  for (uint32_t i = 0; i < nk; ++i)
    a_row.push_back(n * a.stride(0) + min(ab + i, a_n - 1u) * a.stride(1));
  for_range(0u, b_n, nc, [&](u32 bb) {
    std::vector<Val<uint32_t>> b_row;
    for (uint32_t j = 0; j < nc; ++j)
      b_row.push_back(n * b.stride(0) + min(bb + j, b_n - 1u) * b.stride(1));
    std::vector<Var<f32>> acc;
    for (uint32_t e = 0; e < nk * nc; ++e) acc.push_back(Var<f32>(0.0f));
    for_range(u, p_n, un, [&](u32 p) { dot_step<In>(a, a_row, b, b_row, p, acc); });
    lane_totals(lane_sums, acc, u, un, [&](const Val<uint32_t>& e, const Val<float>& sum) {
      u32 i = ab + e / nc, j = bb + e % nc;
      if_(i < a_n && j < b_n, [&] {
        if (swap)
          part[(n * b_n + j) * a_n + i] = sum;
        else
          part[(n * a_n + i) * b_n + j] = sum;
      });
    });
  });
}
KILN_KERNEL_GENERIC(conv_weight_dots,
                    "a: rank=3, b: rank=3, part, rk = 4 in 1..8, rc = 4 in 1..8, "
                    "lanes = 16 in 1..64, swap = false",
                    f32, f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe(
        "kiln::lib::conv_backward_weight on the CPU: a 1 x 1 convolution's weight gradient per "
        "batch item, as dot products along the positions");

// Item n's share of a dense stride-1 convolution's weight gradient on the CPU, the taps as
// shifted planes: dw_n[k, c, tap] = the sum over the output positions o of dy[n, k, o]
// x[n, c, o + tap dilation - pad], dot products along the output rows as conv_weight_dots
// computes them (a cube of `lanes` units walking each row's columns, `rk` x `rc` sums in
// registers, rk rows of dy against rc rows of x; a tap's column test is one per vector, its
// plane and row tests uniform). Cube (kb, n) takes output channels kb rk .. for every tap and
// block of input channels, sweeping x_n once per tap; part[n, k, c, tap] holds the item's
// gradient, summed over the items by conv_weight_items.
template <class T>
void conv_weight_taps(Tensor<const T> x, Tensor<const T> dy, Tensor<f32> part, u32 kd_n, u32 kh_n,
                      u32 kw_n, u32 pd, u32 ph, u32 pw, u32 dd, u32 dh, u32 dw_, int rk, int rc,
                      int lanes) {
  using In = host_of_t<T>;
  const auto nk = static_cast<uint32_t>(rk), nc = static_cast<uint32_t>(rc);
  const auto un = static_cast<uint32_t>(lanes);
  u32 kb = cube_pos_x() * nk, n = cube_pos_y(), u = unit_pos();
  u32 k_n = dy.shape(1), c_n = x.shape(1);
  u32 d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4);
  u32 od_n = dy.shape(2), oh_n = dy.shape(3), ow_n = dy.shape(4);
  u32 taps = kd_n * kh_n * kw_n;
  auto lane_sums = shared_array<f32>(nk * nc * un);
  std::vector<Val<uint32_t>> a_row;
  for (uint32_t i = 0; i < nk; ++i)
    a_row.push_back(n * dy.stride(0) + min(kb + i, k_n - 1u) * dy.stride(1));
  for_range(0u, taps, 1u, [&](u32 t) {
    u32 kw = t % kw_n, kh = t / kw_n % kh_n, kd = t / (kw_n * kh_n);
    u32 sd = kd * dd - pd, sh = kh * dh - ph, sw = kw * dw_ - pw;  // the tap's shift
    for_range(0u, c_n, nc, [&](u32 cb) {
      std::vector<Val<uint32_t>> b_row;
      for (uint32_t j = 0; j < nc; ++j)
        b_row.push_back(n * x.stride(0) + min(cb + j, c_n - 1u) * x.stride(1));
      std::vector<Var<f32>> acc;
      for (uint32_t e = 0; e < nk * nc; ++e) acc.push_back(Var<f32>(0.0f));
      for_range(0u, od_n, 1u, [&](u32 od) {
        u32 id = od + sd;
        if_(id < d_n, [&] {
          for_range(0u, oh_n, 1u, [&](u32 oh) {
            u32 ih = oh + sh;
            if_(ih < h_n, [&] {
              u32 ao = od * dy.stride(2) + oh * dy.stride(3);
              u32 bo = id * x.stride(2) + ih * x.stride(3) + sw;
              std::vector<Val<uint32_t>> a_at, b_at;
              for (const Val<uint32_t>& r : a_row) a_at.push_back(r + ao);
              for (const Val<uint32_t>& r : b_row) b_at.push_back(r + bo);
              for_range(u, ow_n, un, [&](u32 ow) {
                if_(ow + sw < w_n, [&] { dot_step<In>(dy, a_at, x, b_at, ow, acc); });
              });
            });
          });
        });
      });
      lane_totals(lane_sums, acc, u, un, [&](const Val<uint32_t>& e, const Val<float>& sum) {
        u32 k = kb + e / nc, c = cb + e % nc;
        if_(k < k_n && c < c_n, [&] { part[((n * k_n + k) * c_n + c) * taps + t] = sum; });
      });
    });
  });
}
KILN_KERNEL_GENERIC(conv_weight_taps,
                    "x: rank=5, dy: rank=5, part, kd_n, kh_n, kw_n, pd, ph, pw, dd, dh, dw_, "
                    "rk = 4 in 1..8, rc = 4 in 1..8, lanes = 16 in 1..64",
                    f32, f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("lanes")), 1, 1};
    })
    .describe(
        "kiln::lib::conv_backward_weight on the CPU: a dense stride-1 convolution's weight "
        "gradient per batch item, each tap as dot products along shifted rows");

// dw[k, c] = the sum over the batch items n of part[n, k, c] (conv_weight_dots'), in order, in
// f32, rounded to dw's type once: a unit per weight.
template <class T>
void conv_weight_items(Tensor<const f32> part, Tensor<T> dw, u32 items) {
  using Out = host_of_t<T>;
  u32 e = absolute_pos();
  u32 k_n = dw.shape(0), c_n = dw.shape(1);
  if_(e >= k_n * c_n, [&] { return_(); });
  Var<f32> sum = 0.0f;
  for_range(0u, items, 1u, [&](u32 n) { sum += Val<float>(part[n * k_n * c_n + e]); });
  dw[e / c_n * dw.stride(0) + e % c_n * dw.stride(1)] = cast<Out>(Val<float>(sum));
}
KILN_KERNEL_GENERIC(conv_weight_items, "part, dw: rank=2, items", f32, f16, bf16)
    .cube_dim(64)
    .describe("kiln::lib::conv_backward_weight on the CPU: conv_weight_dots' items summed into dw");

// dw (and dbias) of a depthwise convolution (each output channel k reads input channel
// c = k / (K / C)): cube k sums, for each of its taps (kd, kh, kw; kw fastest; taps_d x taps_h x
// taps_w of them, all unrolled), dy[n, k, o] x[n, c, o stride + tap dilation - pad] over the
// batch and every output position. The units walk the output columns (on the CPU 16 to a
// vector: each tap reads a segment of an input row, no gathers), each keeping a partial sum per
// tap (and one of dy for the bias) in registers; the tests of each tap's column are made once,
// before the rows. `block` output rows at a time (it divides the rows of a plane; a larger one
// is safe, the rows past the end adding zeros): with `unit_rows` (stride and dilation 1 along
// the height) the block's rows read block + taps_h - 1 input rows, each segment loaded once for
// every (row, tap) that uses it. Each tap's partial sum takes its rows in order n, od, oh (then
// the next columns of the unit); the cube then adds the units' partials in unit order.
template <class P>
void conv_depthwise_grad_weight(Tensor<const typename P::In> x, Tensor<const typename P::In> dy,
                                Tensor<typename P::Out> dw, Tensor<f32> dbias, u32 sd, u32 sh,
                                u32 sw, u32 pd, u32 ph, u32 pw, u32 dd, u32 dh, u32 dw_, int units,
                                int taps_d, int taps_h, int taps_w, int block, int step_w,
                                bool unit_rows, bool whole_rows, bool has_bias) {
  using In = host_of_t<typename P::In>;
  using Out = host_of_t<typename P::Out>;
  const auto un = static_cast<uint32_t>(units);
  const int tn = taps_d * taps_h * taps_w;
  if (tn > 32) {
    TraceContext::current().fail(
        SrcLoc::current(),
        fmt::format("conv_depthwise_grad_weight: taps_d x taps_h x taps_w is {}; at most 32 "
                    "taps (each holds a partial sum per unit in registers); larger kernels take "
                    "conv_grad_weight",
                    tn));
    return;
  }
  const auto nb = static_cast<uint32_t>(block);
  auto part = shared_array<f32>(un * (static_cast<uint32_t>(tn) + 1u));
  u32 u = unit_pos(), k = cube_pos_x();
  u32 k_n = dy.shape(1), c = k / (k_n / x.shape(1));
  u32 kh_n = dw.shape(3), kw_n = dw.shape(4);
  u32 d_n = x.shape(2), h_n = x.shape(3), w_n = x.shape(4);
  u32 oh_n = dy.shape(3), ow_n = dy.shape(4);
  auto constant = [](int t) { return u32(static_cast<uint32_t>(t)); };
  std::vector<Var<f32>> acc;
  for (int t = 0; t < tn; ++t) acc.push_back(Var<f32>(0.0f));
  Var<f32> total = 0.0f;
  // Output column ow of every row (live: the unit has one).
  auto columns = [&](const Val<uint32_t>& ow, const Val<bool>& live) {
    std::vector<Val<bool>> col_ok;
    for (int t = 0; t < taps_w; ++t)
      col_ok.push_back(live && ow * sw + constant(t) * dw_ - pw < w_n);
    // Tap column t of input row xr; with `step_w`, x's and dy's rows are contiguous and sw is
    // step_w: the index is visibly unit-strided, with no test of the strides at run time.
    auto at = [&](const Val<uint32_t>& xr, int t) -> Val<uint32_t> {
      return step_w > 0 ? xr + ow * static_cast<uint32_t>(step_w) + (constant(t) * dw_ - pw)
                        : xr + (ow * sw + constant(t) * dw_ - pw) * x.stride(4);
    };
    for_range(0u, dy.shape(0), 1u, [&](u32 n) {
      u32 xc = n * x.stride(0) + c * x.stride(1);
      u32 dyk = n * dy.stride(0) + k * dy.stride(1);
      for_range(0u, dy.shape(2), 1u, [&](u32 od) {
        u32 dyp = dyk + od * dy.stride(2) + (step_w > 0 ? ow : ow * dy.stride(4));
        u32 id0 = od * sd - pd;
        for_range(0u, oh_n, nb, [&](u32 oh) {
          std::vector<Val<float>> g;  // dy of the block's rows (0 past the end)
          for (uint32_t r = 0; r < nb; ++r) {
            Var<f32> gv = 0.0f;
            if_(live && oh + r < oh_n,
                [&] { gv = cast<float>(Val<In>(dy[dyp + (oh + r) * dy.stride(3)])); });
            g.push_back(gv);
            if (has_bias) total += g.back();
          }
          auto add = [&](int a, int b, int t, int r, const Val<float>& xv) {
            const auto i = static_cast<size_t>((a * taps_h + b) * taps_w + t);
            acc[i] = fma(xv, g[static_cast<size_t>(r)], Val<float>(acc[i]));
          };
          for (int a = 0; a < taps_d; ++a) {
            u32 id = id0 + constant(a) * dd;
            if (unit_rows) {
              for (int j = 0; j < static_cast<int>(nb) + taps_h - 1; ++j) {
                u32 ih = oh + constant(j) - ph;
                if_(id < d_n && ih < h_n, [&] {
                  u32 xr = xc + id * x.stride(2) + ih * x.stride(3);
                  for (int t = 0; t < taps_w; ++t) {
                    if_(col_ok[static_cast<size_t>(t)], [&] {
                      Val<float> xv = cast<float>(Val<In>(x[at(xr, t)]));
                      for (int r = 0; r < static_cast<int>(nb); ++r)
                        if (j - r >= 0 && j - r < taps_h) add(a, j - r, t, r, xv);
                    });
                  }
                });
              }
            } else {
              for (int r = 0; r < static_cast<int>(nb); ++r) {
                for (int b = 0; b < taps_h; ++b) {
                  u32 ih = (oh + static_cast<uint32_t>(r)) * sh + constant(b) * dh - ph;
                  if_(id < d_n && ih < h_n, [&] {
                    u32 xr = xc + id * x.stride(2) + ih * x.stride(3);
                    for (int t = 0; t < taps_w; ++t) {
                      if_(col_ok[static_cast<size_t>(t)],
                          [&] { add(a, b, t, r, cast<float>(Val<In>(x[at(xr, t)]))); });
                    }
                  });
                }
              }
            }
          }
        });
      });
    });
  };
  // A row no wider than the cube: one column per unit, no loop.
  if (whole_rows) {
    columns(u, u < ow_n);
  } else {
    for_range(u, ow_n, un, [&](u32 ow) { columns(ow, ow < ow_n); });
  }
  const auto taps = static_cast<uint32_t>(tn);
  for (uint32_t t = 0; t < taps; ++t) part[t * un + u] = Val<float>(acc[t]);
  part[taps * un + u] = Val<float>(total);
  sync_cube();
  for_range(u, taps + (has_bias ? 1u : 0u), un, [&](u32 t) {
    Var<f32> sum = 0.0f;
    for_range(0u, un, 1u, [&](u32 p) { sum += Val<float>(part[t * un + p]); });
    if_(t < taps, [&] {
      u32 kw = t % kw_n, kh = t / kw_n % kh_n, kd = t / (kw_n * kh_n);
      dw[k * dw.stride(0) + kd * dw.stride(2) + kh * dw.stride(3) + kw * dw.stride(4)] =
          cast<Out>(Val<float>(sum));
    }).else_([&] { dbias[k] = sum; });
  });
}
KILN_KERNEL_GENERIC(conv_depthwise_grad_weight,
                    "x: rank=5, dy: rank=5, dw: rank=5, dbias, sd, sh, sw, pd, ph, pw, dd, dh, "
                    "dw_, units = 64 in 16..1024, taps_d = 1 in 1..32, taps_h = 3 in 1..32, "
                    "taps_w = 3 in 1..32, block = 1 in 1..4, step_w = 0 in 0..4, "
                    "unit_rows = false, whole_rows = false, has_bias = false",
                    InOut<f32, f32>, InOut<f16, f32>, InOut<bf16, f32>, InOut<f16, f16>,
                    InOut<bf16, bf16>)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe(
        "kiln::lib::conv_backward_weight: a depthwise convolution's weight (and bias) gradient, "
        "a cube per channel");

// dbias[k] = the sum of dy[n, k, ...] over the batch and every output position, in f32 (a cube
// of `units`). With channels contiguous (NHWC): a unit per output channel, in the order n, od, oh,
// ow. Else
// (`per_channel`) a cube per channel whose units walk the positions (all of an item's at once
// when they are dense, `flat`; else each row's columns), each keeping a partial sum, added in unit
// order at the end: on the CPU the positions are read as vectors, not gathered across channels.
template <class T>
void conv_grad_bias(Tensor<const T> dy, Tensor<f32> dbias, int units, bool per_channel, bool flat) {
  using In = host_of_t<T>;
  auto value = [&](const Val<uint32_t>& at) { return cast<float>(Val<In>(dy[at])); };
  if (!per_channel) {
    u32 k = cube_pos_x() * cube_dim() + unit_pos();
    if_(k >= dy.shape(1), [&] { return_(); });
    Var<f32> acc = 0.0f;
    for_range(0u, dy.shape(0), 1u, [&](u32 n) {
      for_range(0u, dy.shape(2), 1u, [&](u32 od) {
        for_range(0u, dy.shape(3), 1u, [&](u32 oh) {
          u32 r = n * dy.stride(0) + k * dy.stride(1) + od * dy.stride(2) + oh * dy.stride(3);
          for_range(0u, dy.shape(4), 1u, [&](u32 ow) { acc += value(r + ow * dy.stride(4)); });
        });
      });
    });
    dbias[k] = acc;
    return;
  }
  const auto un = static_cast<uint32_t>(units);
  auto part = shared_array<f32>(un);
  u32 u = unit_pos(), k = cube_pos_x();
  Var<f32> acc = 0.0f;
  for_range(0u, dy.shape(0), 1u, [&](u32 n) {
    u32 base = n * dy.stride(0) + k * dy.stride(1);
    if (flat) {
      for_range(u, dy.shape(2) * dy.shape(3) * dy.shape(4), un,
                [&](u32 p) { acc += value(base + p); });
    } else {
      for_range(0u, dy.shape(2), 1u, [&](u32 od) {
        for_range(0u, dy.shape(3), 1u, [&](u32 oh) {
          u32 r = base + od * dy.stride(2) + oh * dy.stride(3);
          for_range(u, dy.shape(4), un, [&](u32 ow) { acc += value(r + ow * dy.stride(4)); });
        });
      });
    }
  });
  part[u] = Val<float>(acc);
  sync_cube();
  if_(u == 0u, [&] {
    Var<f32> sum = 0.0f;
    for_range(0u, un, 1u, [&](u32 q) { sum += Val<float>(part[q]); });
    dbias[k] = sum;
  });
}
KILN_KERNEL_GENERIC(conv_grad_bias,
                    "dy: rank=5, dbias, units = 64 in 16..1024, per_channel = false, flat = false",
                    f32, f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("kiln::lib::conv_backward_weight: the gradient of a convolution's bias");
