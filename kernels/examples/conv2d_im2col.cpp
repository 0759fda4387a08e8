// conv2d_im2col: a 2-D convolution as an implicit GEMM whose image rows come from TMA im2col
// loads (docs/dsl.md "im2col"): y[n, oh, ow, co] = sum over r, s, c of
// x[n, oh + r - pad, ow + s - pad, c] * w[co, r, s, c], NHWC image and output, the filter
// [Co, K, K, C], stride 1, dilation 1, zero padding `pad`.
//
// A cube computes `pixels` consecutive output pixels (counting n, oh, ow row-major, so a tile may
// run across rows and images) by 32 output channels. Per round (filter position r, s and a block
// of `channels` input channels) one unit issues two TMA copies completing on one mbarrier:
//   - the image rows: an im2col box of `pixels` rows x `channels` channels. The view's bounding
//     box (lower = -pad, upper = pad - (K - 1)) holds exactly the output pixels as filter
//     origins, so the tile's first output pixel (n, oh, ow) is the origin (n, oh - pad,
//     ow - pad); the load's offsets (r, s) pick the filter position. The padding and the pixels
//     past the last image arrive as zeros: no edge code;
//   - the filter rows: a tiled box of 32 output channels x 1 x 1 x `channels` at (co, r, s, c).
// Then every unit accumulates its 16 outputs from shared memory with plain multiply-adds (no
// tensor cores, one stage: this kernel shows the im2col path, it is not a fast convolution).
// TMA's rules: C a multiple of 16 bytes of elements, pad and K within the corners' range
// (-128 .. 127 for an image of rank 4). Runs where has_tma() holds: sm_90a, sm_100a, the CPU,
// cuda-emu.
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void conv2d_im2col(Tensor<const T> x, Tensor<const T> w, Tensor<f32> y, int kernel, int pad,
                   int channels, int pixels) {
  constexpr uint32_t kCo = 32, kUnits = 128;
  if (kUnits % static_cast<uint32_t>(pixels) != 0) {
    TraceContext::current().fail(SrcLoc::current(),
                                 "conv2d_im2col: pixels is 32, 64 or 128 (each of the cube's 128 "
                                 "units computes one pixel of the tile)");
    return;
  }
  const auto ch = static_cast<uint32_t>(channels), px = static_cast<uint32_t>(pixels);
  const uint32_t per_unit = px * kCo / kUnits;  // outputs per unit: one pixel, per_unit channels
  u32 n = x.shape(0), h = x.shape(1), wd = x.shape(2), c = x.shape(3), co = w.shape(0);
  u32 oh = h + u32(2u * static_cast<uint32_t>(pad)) - u32(static_cast<uint32_t>(kernel) - 1u);
  u32 ow = wd + u32(2u * static_cast<uint32_t>(pad)) - u32(static_cast<uint32_t>(kernel) - 1u);
  assert_(w.shape(1) == static_cast<uint32_t>(kernel) &&
              w.shape(2) == static_cast<uint32_t>(kernel) && w.shape(3) == c,
          "w must be Co x kernel x kernel x C");
  assert_(y.shape(0) == n && y.shape(1) == oh && y.shape(2) == ow && y.shape(3) == co,
          "y must be N x OH x OW x Co (OH = H + 2 pad - kernel + 1)");
  const int upper = pad - (kernel - 1);
  auto xv = tma_im2col_view(x, pixels, channels, {-pad, -pad}, {upper, upper});
  auto wv = tma_view(w, {static_cast<int>(kCo), 1, 1, channels});
  auto xs = shared_array<T>(px * ch);
  auto ws = shared_array<T>(kCo * ch);
  auto bar = shared_array<u64>(1);
  auto acc = local_array<f32>(per_unit);
  for (uint32_t j = 0; j < per_unit; ++j) acc[j] = 0.0f;
  mbarrier_init(bar, 0u);
  // The tile's first output pixel, and this unit's pixel and output channels.
  u32 m0 = cube_pos_x() * px, co0 = cube_pos_y() * kCo;
  u32 n0 = m0 / (oh * ow), oh0 = (m0 % (oh * ow)) / ow, ow0 = m0 % ow;
  u32 p = unit_pos() % px, cg = (unit_pos() / px) * per_unit;
  u32 blocks = (c + (ch - 1u)) / ch;
  u32 rounds = static_cast<uint32_t>(kernel * kernel) * blocks;
  for_range(0u, rounds, 1u, [&](u32 round) {
    u32 rs = round / blocks, c0 = (round % blocks) * ch;
    u32 r = rs / static_cast<uint32_t>(kernel), s = rs % static_cast<uint32_t>(kernel);
    mbarrier_arrive_expect_tx(bar, 0u, xv.box_bytes() + wv.box_bytes());
    tma_load(xs, 0u, xv,
             {n0, oh0 - static_cast<uint32_t>(pad), ow0 - static_cast<uint32_t>(pad), c0}, {r, s},
             bar, 0u);
    tma_load(ws, 0u, wv, {co0, r, s, c0}, bar, 0u);
    mbarrier_wait(bar, 0u, round & 1u);
    for_range(0u, ch, 1u, [&](u32 k) {
      f32 a = cast<f32>(xs[p * ch + k]);
      for (uint32_t j = 0; j < per_unit; ++j)
        acc[j] = acc[j] + a * cast<f32>(ws[(cg + j) * ch + k]);
    });
    sync_cube();  // every unit has read the stage before the next round's copies overwrite it
  });
  // Store the outputs inside y (the tile may end past the last pixel or output channel).
  u32 m = m0 + p;
  if_(m < n * oh * ow, [&] {
    u32 in = m / (oh * ow), ih = (m % (oh * ow)) / ow, iw = m % ow;
    for (uint32_t j = 0; j < per_unit; ++j)
      if_(co0 + cg + j < co, [&] { y(in, ih, iw, co0 + cg + j) = acc[j]; });
  });
}
KILN_KERNEL_GENERIC(conv2d_im2col,
                    "x: rank=4, w: rank=4, y: rank=4, kernel = 3 in 1..9, pad = 1 in 0..8, "
                    "channels = 32 in 8..64, pixels = 64 in 32..128",
                    f32, f16, bf16)
    .cube_dim(128)
    .describe(
        "2-D convolution (NHWC, stride 1) as an implicit GEMM fed by TMA im2col loads (sm_90a, "
        "sm_100a; the CPU and cuda-emu run it too)");
KILN_RUN(conv2d_im2col)
    .shape("x", {2, 9, 11, 48})
    .shape("w",
           [](const kiln::kernels::RunData& d) -> std::vector<int64_t> {
             const int64_t k = d.comptime("kernel");
             return {40, k, k, d.dim("x", 3)};
           })
    .shape("y",
           [](const kiln::kernels::RunData& d) -> std::vector<int64_t> {
             const int64_t grow = 2 * d.comptime("pad") - (d.comptime("kernel") - 1);
             return {d.dim("x", 0), d.dim("x", 1) + grow, d.dim("x", 2) + grow, d.dim("w", 0)};
           })
    .cubes([](const kiln::kernels::RunData& d) {
      const int64_t m = d.dim("y", 0) * d.dim("y", 1) * d.dim("y", 2);
      return kiln::Dim3(kiln::kernels::ceil_div(m, d.comptime("pixels")),
                        kiln::kernels::ceil_div(d.dim("y", 3), 32));
    })
    .gpu_arch("sm_90a")
    .tolerance(1e-5, 1e-3)
    .flops([](const kiln::kernels::RunData& d) {
      return 2.0 * static_cast<double>(d.numel("y")) * static_cast<double>(d.dim("w", 1)) *
             static_cast<double>(d.dim("w", 2)) * static_cast<double>(d.dim("w", 3));
    })
    .reference([](kiln::kernels::RunData& d) {
      const int64_t n = d.dim("x", 0), h = d.dim("x", 1), wd = d.dim("x", 2), c = d.dim("x", 3);
      const int64_t co = d.dim("w", 0), k = d.dim("w", 1), pad = d.comptime("pad");
      const int64_t oh = d.dim("y", 1), ow = d.dim("y", 2);
      const auto& x = d["x"];
      const auto& w = d["w"];
      auto& y = d["y"];
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j)
            for (int64_t o = 0; o < co; ++o) {
              double sum = 0;
              for (int64_t r = 0; r < k; ++r)
                for (int64_t s = 0; s < k; ++s) {
                  const int64_t ih = i + r - pad, iw = j + s - pad;
                  if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                  for (int64_t q = 0; q < c; ++q)
                    sum += x[static_cast<size_t>(((b * h + ih) * wd + iw) * c + q)] *
                           w[static_cast<size_t>(((o * k + r) * k + s) * c + q)];
                }
              y[static_cast<size_t>(((b * oh + i) * ow + j) * co + o)] = sum;
            }
    });
