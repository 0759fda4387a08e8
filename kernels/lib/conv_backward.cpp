// The host side of kiln::lib::conv_backward_input and conv_backward_weight (conv.h): which
// kernel or product computes each gradient (the kernels are in conv_backward_kernels.cpp, the
// helpers every pass shares in conv_parts.h).
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/lib/common.h"
#include "kernels/lib/conv.h"
#include "kernels/lib/conv_parts.h"
#include "kernels/lib/elementwise.h"
#include "kernels/lib/matmul_parts.h"

namespace kiln::lib {

using ir::ElemType;
using namespace conv_parts;

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
  if (out.may_overlap())
    return detail::bad(op, fmt::format("{} ({}) has elements that overlap", of_input ? "dx" : "dw",
                                       out.describe()));
  return {};
}

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
  // With dw's rows and dy's positions contiguous (a contiguous dw, NCHW) the product is
  // dw [K, C taps] = dy_n [K, P] im2col(x_n) [P, C taps], im2col packed as B: every operand
  // row-major. Otherwise dw^T = im2col^T dy^T, im2col^T packed as A.
  const bool rows_of_dw = ws == 1 && ys == 1;
  KILN_ASSIGN(const Tensor dwt, Tensor::make(dw5.device_ptr(), dw5.buffer(), dw5.dtype(),
                                             rows_of_dw ? std::vector<int64_t>{k, columns}
                                                        : std::vector<int64_t>{columns, k},
                                             rows_of_dw ? std::vector<int64_t>{dw5.stride(0), ws}
                                                        : std::vector<int64_t>{ws, dw5.stride(0)},
                                             dw5.offset()));
  Tensor target = dwt;
  if (dw5.dtype() != ElemType::F32) {
    KILN_ASSIGN(target, rt.empty(ElemType::F32, {dwt.shape(0), dwt.shape(1)}));
  }
  KILN_ASSIGN(const Tensor c, detail::matmul_rank5(target, false));
  KILN_ASSIGN(const Chunks chunks, im2col_chunks(1, positions, columns * 4, 1));
  const int64_t len = chunks.rows;
  KILN_ASSIGN(const Kernel pack, rt.kernel("conv_pack_im2col_t"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  std::string config;
  bool first = true;
  for (int64_t item = 0; item < n; ++item)
    for (int64_t p0 = 0; p0 < positions; p0 += len) {
      const int64_t count = std::min(len, positions - p0);
      MatmulOptions m;
      m.beta = first ? 0.0f : 1.0f;
      first = false;
      // Slivers of `width` columns of the chunk's im2col^T (A's for dw^T, B's for dw).
      const detail::PackRows pack_rows = [&](Tensor& packed, int width) -> Status {
        return rt.launch(pack, Dim3(u((columns + width - 1) / width)), Dim3(u(width)),
                         x5.as_read_only(), packed, u(dy5.shape(3)), u(dy5.shape(4)),
                         u(dw5.shape(2)), u(dw5.shape(3)), u(dw5.shape(4)), g.s[0], g.s[1], g.s[2],
                         g.p[0], g.p[1], g.p[2], g.dl[0], g.dl[1], g.dl[2], u(item), u(p0),
                         u(count));
      };
      if (rows_of_dw) {
        detail::MatmulProblem q;
        q.m = k;
        q.n = columns;
        q.k = count;
        KILN_ASSIGN(q.a, Tensor::make(dy5.device_ptr(), dy5.buffer(), dy5.dtype(),
                                      std::vector<int64_t>{1, 1, 1, k, count},
                                      std::vector<int64_t>{0, 0, 0, dy5.stride(1), 1},
                                      dy5.offset() + item * dy5.stride(0) + p0));
        // B's batch shape only: the packing reads x.
        KILN_ASSIGN(q.b, Tensor::make(x5.device_ptr(), x5.buffer(), x5.dtype(),
                                      std::vector<int64_t>{1, 1, 1, count, columns},
                                      std::vector<int64_t>{0, 0, 0, 0, 0}, x5.offset()));
        q.c = c;
        KILN_TRY(detail::matmul_cpu_packed_b(rt, q, m, pack_rows, &config));
        continue;
      }
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
      KILN_TRY(detail::matmul_cpu_packed_a(rt, q, m, pack_rows, &config));
    }
  if (dw5.dtype() != ElemType::F32) {
    Tensor out = dwt;
    KILN_TRY(copy(rt, target, out));
  }
  if (plan)
    *plan = {"matmul_cpu",
             fmt::format("{}; im2col^T packed by conv_pack_im2col_t, {} of {} positions at a "
                         "time, {} batch item{} summed{}",
                         config, len, positions, n, n == 1 ? "" : "s",
                         rows_of_dw ? ", as B of dw = dy im2col" : ""),
             "a dense convolution's weight gradient on the CPU: GEMMs on matmul's micro-kernel"};
  return true;
}

// The most the per-item products of conv_weight_dots and conv_weight_taps may take (f32); a
// larger batch takes the GEMMs, which need no such buffer.
constexpr int64_t kPartBytes = int64_t{64} << 20;

// The weights' gradient of a dense stride-1 convolution on the CPU by conv_weight_taps (each
// tap as dot products along shifted rows of x: nothing packed, no im2col), where x's and dy's
// rows are contiguous, dw is dense, there are at least 2048 output positions per item, x_n
// fits in kLimit bytes (each cube sweeps it once per tap) and the items' products in
// kPartBytes.
Result<bool> weight_taps_cpu(Runtime& rt, const Tensor& x5, const Tensor& dy5, Tensor& dw5,
                             const Geometry3& g, MatmulPlan* plan) {
  constexpr int64_t kLimit = int64_t{4} << 20;
  const int64_t items = x5.shape(0), k = dw5.shape(0), c = dw5.shape(1),
                taps = dw5.shape(2) * dw5.shape(3) * dw5.shape(4),
                positions = dy5.shape(2) * dy5.shape(3) * dy5.shape(4),
                x_bytes = c * x5.shape(2) * x5.shape(3) * x5.shape(4) * ir::elem_bytes(x5.dtype());
  if (g.s != std::array<uint32_t, 3>{1, 1, 1} || x5.stride(4) != 1 || dy5.stride(4) != 1 ||
      column_stride(dw5) != 1 || positions < 2048 || x_bytes > kLimit ||
      items * k * c * taps * 4 > kPartBytes)
    return false;
  const int lanes = std::max(1, rt.max_lanes(ElemType::F32));
  const int rk = lanes >= 16 ? 4 : 3, rc = lanes >= 16 ? 4 : 3;
  KILN_ASSIGN(Tensor part, rt.empty(ElemType::F32, {items, k, c * taps}));
  KILN_ASSIGN(Tensor dwv, Tensor::make(dw5.device_ptr(), dw5.buffer(), dw5.dtype(),
                                       std::vector<int64_t>{k, c * taps},
                                       std::vector<int64_t>{dw5.stride(0), 1}, dw5.offset()));
  KILN_ASSIGN(const Kernel taps_k, rt.kernel("conv_weight_taps"));
  KILN_ASSIGN(const Kernel sum, rt.kernel("conv_weight_items"));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  KILN_TRY(rt.launch(taps_k, Dim3(u((k + rk - 1) / rk), u(items)), Dim3(u(lanes)),
                     x5.as_read_only(), dy5.as_read_only(), part, u(dw5.shape(2)), u(dw5.shape(3)),
                     u(dw5.shape(4)), g.p[0], g.p[1], g.p[2], g.dl[0], g.dl[1], g.dl[2], rk, rc,
                     lanes));
  KILN_TRY(rt.launch(sum, Dim3(u((k * c * taps + 63) / 64)), Dim3(64), part.as_read_only(), dwv,
                     u(items)));
  if (plan)
    *plan = {"conv_weight_taps",
             fmt::format("{} x {} dot products at a time along shifted rows, {} lanes, {} taps; "
                         "{} batch item{} summed by conv_weight_items",
                         rk, rc, lanes, taps, items, items == 1 ? "" : "s"),
             "a dense stride-1 convolution's weight gradient: each tap a product of dy and x "
             "shifted, both read as they lie"};
  return true;
}

// The input's gradient of a dense stride-1 convolution on the CPU as the convolution it is:
// dx = dy convolved with w transposed (w^T [C, K taps], copied once) and its taps reversed,
// padded by (k - 1) d - p in front (which must not be negative), by conv_gemm_cpu: no dcol
// matrix and no gather. dx's positions must be contiguous (its rows are what the micro-kernel
// stores).
Result<bool> input_as_conv(Runtime& rt, const Tensor& dy5, const Tensor& w5, Tensor& dx5,
                           const Geometry3& g, MatmulPlan* plan) {
  if (g.s != std::array<uint32_t, 3>{1, 1, 1} || position_stride(dx5) != 1) return false;
  std::array<uint32_t, 3> pad{};
  for (int d = 0; d < 3; ++d) {
    const int64_t front = (w5.shape(d + 2) - 1) * int64_t{g.dl[static_cast<size_t>(d)]} -
                          int64_t{g.p[static_cast<size_t>(d)]};
    if (front < 0) return false;
    pad[static_cast<size_t>(d)] = static_cast<uint32_t>(front);
  }
  const int64_t k = w5.shape(0), c = w5.shape(1), taps = w5.shape(2) * w5.shape(3) * w5.shape(4);
  KILN_ASSIGN(const Tensor swapped, w5.transpose(0, 1));
  KILN_ASSIGN(Tensor wt, rt.empty(w5.dtype(), {c, k, w5.shape(2), w5.shape(3), w5.shape(4)}));
  KILN_TRY(copy(rt, swapped, wt));
  KILN_ASSIGN(const Tensor a,
              Tensor::make(wt.device_ptr(), wt.buffer(), wt.dtype(),
                           std::vector<int64_t>{1, 1, 1, c, k * taps},
                           std::vector<int64_t>{0, 0, 0, k * taps, 1}, wt.offset()));
  KILN_ASSIGN(const std::string config,
              gemm_cpu(rt, dy5, a, {w5.shape(2), w5.shape(3), w5.shape(4)}, dx5, g.s, pad, g.dl,
                       0.0f, Epilogue::None, true));
  if (plan)
    *plan = {"conv_gemm_cpu", config + ", as B of dx = w^T im2col(dy)^T, the taps reversed",
             "a dense stride-1 convolution's input gradient: dy convolved with the transposed, "
             "flipped weights"};
  return true;
}

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
  KILN_ASSIGN(const Chunks chunks, im2col_chunks(1, positions, columns * 4, 1));
  const int64_t len = chunks.rows;
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
      KILN_ASSIGN(const Tensor dyt, Tensor::make(dy5.device_ptr(), dy5.buffer(), dy5.dtype(),
                                                 std::vector<int64_t>{count, k},
                                                 std::vector<int64_t>{ys, dy5.stride(1)},
                                                 dy5.offset() + item * dy5.stride(0) + p0 * ys));
      MatmulOptions m;
      m.plan = &product;
      if (ys == 1) {
        // Positions contiguous in dy (NCHW): dcol^T [C taps, P] = w^T dy_n, dy read by rows.
        KILN_ASSIGN(const Tensor wt, wv.transpose(0, 1));
        KILN_ASSIGN(const Tensor dyn, dyt.transpose(0, 1));
        KILN_ASSIGN(Tensor cols, Tensor::make(dcol.device_ptr(), dcol.buffer(), dcol.dtype(),
                                              std::vector<int64_t>{columns, count},
                                              std::vector<int64_t>{len, 1}, dcol.offset()));
        KILN_TRY(matmul(rt, wt, dyn, cols, m));
      } else {
        KILN_ASSIGN(Tensor rows, dcol.slice(0, 0, count));
        KILN_TRY(matmul(rt, dyt, wv, rows, m));
      }
      KILN_TRY(rt.launch(gather, Dim3(u((inputs + 127) / 128)), Dim3(128), dcol.as_read_only(), acc,
                         u(c), u(dx5.shape(2)), u(dx5.shape(3)), u(dx5.shape(4)), u(dy5.shape(2)),
                         u(dy5.shape(3)), u(dy5.shape(4)), u(w5.shape(2)), u(w5.shape(3)),
                         u(w5.shape(4)), g.p[0], g.p[1], g.p[2], g.dl[0], g.dl[1], g.dl[2], u(p0),
                         u(count), u(p0 == 0 ? 1 : 0), u(ys == 1 ? 1 : columns),
                         u(ys == 1 ? len : 1), static_cast<int>(g.s[0]), static_cast<int>(g.s[1]),
                         static_cast<int>(g.s[2])));
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
    *plan = {
        product.kernel,
        fmt::format("{} by {} ({}), {} of {} positions at a time, gathered by "
                    "conv_col2im",
                    ys == 1 ? "w^T dy" : "dy^T w", product.kernel, product.config, len, positions),
        "a dense convolution's input gradient: a GEMM and a gather"};
  return true;
}

// A view of t's channels (dimension `channel`) by its positions (dimensions 2 to 4, which
// must merge into one stride) for each batch item: [N, channels, P], or [N, P, channels] with
// `positions_first`; nullopt when the positions do not merge.
Result<std::optional<Tensor>> by_positions(const Tensor& t, int channel, bool positions_first) {
  const int64_t s = position_stride(t);
  if (s == 0) return std::optional<Tensor>();
  const int64_t p = t.shape(2) * t.shape(3) * t.shape(4);
  std::vector<int64_t> shape{t.shape(0), t.shape(channel), p},
      strides{t.stride(0), t.stride(channel), s};
  if (positions_first) {
    std::swap(shape[1], shape[2]);
    std::swap(strides[1], strides[2]);
  }
  KILN_ASSIGN(Tensor v,
              Tensor::make(t.device_ptr(), t.buffer(), t.dtype(), shape, strides, t.offset()));
  return std::optional<Tensor>(std::move(v));
}

// The input's gradient of a 1 x 1 convolution (stride 1, no padding) on every device: one
// batched product, dx_n = w^T dy_n with positions contiguous in dy (NCHW), else
// dx_n^T = dy_n^T w.
Result<bool> pointwise_input(Runtime& rt, const Tensor& dy5, const Tensor& w5, Tensor& dx5,
                             MatmulPlan* plan) {
  const bool rows = position_stride(dy5) == 1;
  KILN_ASSIGN(const auto dyv, by_positions(dy5, 1, !rows));
  KILN_ASSIGN(auto dxv, by_positions(dx5, 1, !rows));
  if (!dyv || !dxv) return false;
  KILN_ASSIGN(const Tensor wv,
              Tensor::make(w5.device_ptr(), w5.buffer(), w5.dtype(),
                           std::vector<int64_t>{w5.shape(0), w5.shape(1)},
                           std::vector<int64_t>{w5.stride(0), w5.stride(1)}, w5.offset()));
  MatmulOptions m;
  m.plan = plan;
  if (rows) {
    KILN_ASSIGN(const Tensor wt, wv.transpose(0, 1));
    KILN_TRY(matmul(rt, wt, *dyv, *dxv, m));
  } else {
    KILN_TRY(matmul(rt, *dyv, wv, *dxv, m));
  }
  if (plan)
    plan->why = fmt::format("a 1 x 1 convolution's input gradient is a matrix product, {} ({})",
                            rows ? "dx = w^T dy per batch item" : "dx^T = dy^T w per batch item",
                            plan->why);
  return true;
}

// The weights' gradient of a 1 x 1 convolution (stride 1, no padding) on every device:
// dw [K, C] = the sum over batch items of dy_n [K, P] x_n^T [P, C], one product per item added
// to the last in f32 (into dw when it is f32, else into an f32 scratch rounded once).
Result<bool> pointwise_weight(Runtime& rt, const Tensor& x5, const Tensor& dy5, Tensor& dw5,
                              MatmulPlan* plan) {
  KILN_ASSIGN(const auto xv, by_positions(x5, 1, true));
  KILN_ASSIGN(const auto dyv, by_positions(dy5, 1, false));
  if (!xv || !dyv) return false;
  const int64_t k = dw5.shape(0), c = dw5.shape(1);
  KILN_ASSIGN(Tensor dwv,
              Tensor::make(dw5.device_ptr(), dw5.buffer(), dw5.dtype(), std::vector<int64_t>{k, c},
                           std::vector<int64_t>{dw5.stride(0), dw5.stride(1)}, dw5.offset()));
  // On the CPU with the positions contiguous in x and dy (NCHW) and at least 2048 of them: dot
  // products along the positions, no operand packed transposed, each cube sweeping every row
  // of one operand (b) for its rows of the other: b is the smaller of x_n and dy_n, and at most
  // 1 MiB, so that the sweeps stay in the L2 cache. Measured on an Ice Lake Xeon at batch 8
  // against the products: 64 channels of 56 x 56 in and out 7.0 -> 2.0 ms, 64 in and 256 out
  // 14.9 -> 8.8 ms; but 512 in and 128 out of 28 x 28 (784 positions: short dots, each cube's
  // sums added across the lanes more often) 9.9 -> 11.7 ms, so that one stays a product.
  KILN_ASSIGN(const auto xr, by_positions(x5, 1, false));  // [N, C, P]
  const int64_t items = x5.shape(0), positions = (*xr).shape(2);
  const bool swap = c > k;  // a = x, b = dy
  const int64_t b_bytes = std::min(c, k) * positions * ir::elem_bytes(x5.dtype());
  if (rt.device().lane_units && (*xr).stride(2) == 1 && (*dyv).stride(2) == 1 &&
      positions >= 2048 && b_bytes <= (int64_t{1} << 20) && items * k * c * 4 <= kPartBytes) {
    const int lanes = std::max(1, rt.max_lanes(ElemType::F32));
    // rk rc sums, rk loads of a and one of b in registers (LLVM hoists them all: 24 of
    // AVX-512's 32 at 4 x 4; 4 x 6 spilled), 13 of AVX2's 16 at 3 x 3.
    const int rk = lanes >= 16 ? 4 : 3, rc = lanes >= 16 ? 4 : 3;
    KILN_ASSIGN(Tensor part, rt.empty(ElemType::F32, {items, k, c}));
    KILN_ASSIGN(const Kernel dots, rt.kernel("conv_weight_dots"));
    KILN_ASSIGN(const Kernel sum, rt.kernel("conv_weight_items"));
    auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    const Tensor a = (swap ? *xr : *dyv).as_read_only(), b = (swap ? *dyv : *xr).as_read_only();
    KILN_TRY(rt.launch(dots, Dim3(u((a.shape(1) + rk - 1) / rk), u(items)), Dim3(u(lanes)), a, b,
                       part, rk, rc, lanes, swap));
    KILN_TRY(
        rt.launch(sum, Dim3(u((k * c + 63) / 64)), Dim3(64), part.as_read_only(), dwv, u(items)));
    if (plan)
      *plan = {
          "conv_weight_dots",
          fmt::format("{} x {} dot products at a time along {} positions, {} lanes, each "
                      "cube sweeping {}; {} batch item{} summed by conv_weight_items",
                      rk, rc, positions, lanes, swap ? "dy" : "x", items, items == 1 ? "" : "s"),
          "a 1 x 1 convolution's weight gradient, dw = dy x^T summed over the batch: both "
          "operands hold the positions contiguously, so dot products along them read both "
          "as they lie"};
    return true;
  }
  Tensor target = dwv;
  if (dw5.dtype() != ElemType::F32) {
    KILN_ASSIGN(target, rt.empty(ElemType::F32, {k, c}));
  }
  auto item_of = [](const Tensor& t, int64_t item) {
    return Tensor::make(
        t.device_ptr(), t.buffer(), t.dtype(), std::vector<int64_t>{t.shape(1), t.shape(2)},
        std::vector<int64_t>{t.stride(1), t.stride(2)}, t.offset() + item * t.stride(0));
  };
  for (int64_t item = 0; item < x5.shape(0); ++item) {
    KILN_ASSIGN(const Tensor a, item_of(*dyv, item));
    KILN_ASSIGN(const Tensor b, item_of(*xv, item));
    MatmulOptions m;
    m.beta = item == 0 ? 0.0f : 1.0f;
    m.plan = plan;
    KILN_TRY(matmul(rt, a, b, target, m));
  }
  if (dw5.dtype() != ElemType::F32) {
    Tensor out = dwv;
    KILN_TRY(copy(rt, target, out));
  }
  if (plan)
    plan->why = fmt::format(
        "a 1 x 1 convolution's weight gradient is a matrix product, dw = dy x^T summed over {} "
        "batch item{} ({})",
        x5.shape(0), x5.shape(0) == 1 ? "" : "s", plan->why);
  return true;
}

}  // namespace

Status conv_backward_input(Runtime& rt, const Tensor& dy, const Tensor& w, Tensor& dx,
                           const ConvOptions& o) {
  KILN_TRY(check_backward("conv_backward_input", true, dx, w, dy, dx, o));
  int64_t numel = 1;
  for (int64_t d : dx.shape()) numel *= d;
  if (numel == 0) {
    if (o.plan) *o.plan = {"none", "an empty gradient", "dx has no elements"};
    return {};
  }
  KILN_ASSIGN(const Geometry g, geometry(dx.shape(), w.shape(), o));
  const Geometry3 g3 = geometry3(g);
  KILN_ASSIGN(const Tensor dy5, rank5(dy, o.layout));
  KILN_ASSIGN(const Tensor w5, rank5(w, Layout::Nchw));
  KILN_ASSIGN(Tensor dx5, rank5(dx, o.layout));
  // A 1 x 1 layer's input gradient is a product on views, except on the CPU with at most 264
  // input channels and 128 positions per item, where conv_gemm_cpu takes it (measured on an
  // Ice Lake Xeon at batch 8: 0.5 of the product's time with 64 input channels, the same with
  // 512, slower with 1024 or more).
  const int64_t positions = dx5.shape(2) * dx5.shape(3) * dx5.shape(4);
  const bool own_gemm = rt.device().lane_units && o.groups == 1 && position_stride(dx5) == 1 &&
                        w5.shape(1) <= 264 && positions >= 128;
  if (pointwise(g, w.shape(), o.groups) && !own_gemm) {
    KILN_ASSIGN(const bool done, pointwise_input(rt, dy5, w5, dx5, o.plan));
    if (done) return {};
  }
  if (rt.device().lane_units && o.groups == 1) {
    KILN_ASSIGN(bool done, input_as_conv(rt, dy5, w5, dx5, g3, o.plan));
    if (done) return {};
    KILN_ASSIGN(done, input_gemm(rt, dy5, w5, dx5, g3, o.plan));
    if (done) return {};
  }
  const int64_t cg = w.shape(1);
  // On a GPU only with every axis's taps unrolled (at most 8): its loop form spills on sm_80.
  const bool unrolled = w5.shape(2) <= 8 && w5.shape(3) <= 8 && w5.shape(4) <= 8;
  if (cg == 1 && w.shape(0) == o.groups && g3.s == std::array<uint32_t, 3>{1, 1, 1} &&
      (rt.device().lane_units || unrolled)) {
    // Depthwise, stride 1: dx is dy convolved with the flipped taps, padded by (k - 1) d - p
    // in front (which may be negative: the arithmetic is modulo 2^32, as the kernel's).
    Geometry3 t = g3;
    for (size_t d = 0; d < 3; ++d)
      t.p[d] = static_cast<uint32_t>(w5.shape(static_cast<int>(d) + 2) - 1) * t.dl[d] - t.p[d];
    return depthwise(rt, dy5, w5, dx5, t, nullptr, nullptr, Epilogue::None, true, o.plan);
  }
  // 2 input channels per unit at most: with 4 or 8, CUDA 13's ptxas spills a few words on some
  // targets (sm_89, sm_90a, sm_100a, by type and stride: the spill test found them), with 2 on
  // none. The CPU takes this kernel only for grouped layers (dense ones are a GEMM).
  const int kb = cg >= 2 ? 2 : 1;
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
  const int64_t taps = dw5.shape(2) * dw5.shape(3) * dw5.shape(4);
  if (weights > 0 && dw.shape(1) == 1 && taps <= 32 && dw.shape(0) <= 65535) {
    // Depthwise: a cube per channel, the bias's gradient with the weights'.
    const bool gpu = !rt.device().lane_units;
    const int units =
        static_cast<int>(std::clamp<int64_t>((dy5.shape(4) + 15) / 16 * 16, 16, gpu ? 128 : 256));
    // Rows of x and dy contiguous, a small stride: the column index is visibly unit-strided.
    const bool rows = x5.stride(4) == 1 && dy5.stride(4) == 1 && g3.s[2] <= 4;
    // Stride and dilation 1 along the height: a block of output rows shares its input rows;
    // the block divides the rows of a plane (4, 3 or 2 of them, else 1).
    const bool unit_rows = g3.s[1] == 1 && g3.dl[1] == 1;
    int block = 1;
    for (int b = 4; unit_rows && b > 1 && block == 1; --b)
      if (dy5.shape(3) % b == 0) block = b;
    Tensor db;
    if (dbias && dbias->shape(0) > 0) {
      db = *dbias;
    } else {
      KILN_ASSIGN(db, rt.empty(ElemType::F32, {1}));
    }
    KILN_ASSIGN(const Kernel k, rt.kernel("conv_depthwise_grad_weight"));
    if (o.plan)
      *o.plan = {"conv_depthwise_grad_weight",
                 fmt::format("a cube of {} units per channel, {} taps, {} row{} at a time", units,
                             taps, block, block == 1 ? "" : "s"),
                 "a depthwise convolution's weights (and bias) summed over the batch and every "
                 "output position"};
    auto i = [](int64_t v) { return static_cast<int>(v); };
    return rt.launch(k, Dim3(u(dw.shape(0))), Dim3(u(units)), x5.as_read_only(), dy5.as_read_only(),
                     dw5, db, g3.s[0], g3.s[1], g3.s[2], g3.p[0], g3.p[1], g3.p[2], g3.dl[0],
                     g3.dl[1], g3.dl[2], units, i(dw5.shape(2)), i(dw5.shape(3)), i(dw5.shape(4)),
                     block, rows ? i(g3.s[2]) : 0, unit_rows, dy5.shape(4) <= units,
                     dbias != nullptr && dbias->shape(0) > 0);
  }
  bool done = false;
  // No batch items or no output positions: dw is zero, which conv_grad_weight writes (a sum of
  // nothing); the products below would launch no cubes, or leave dw as it was.
  const bool empty = dy5.shape(0) * dy5.shape(2) * dy5.shape(3) * dy5.shape(4) == 0;
  if (weights > 0 && !empty && pointwise(g, dw.shape(), o.groups)) {
    KILN_ASSIGN(done, pointwise_weight(rt, x5, dy5, dw5, o.plan));
  }
  if (weights > 0 && !empty && !done && rt.device().lane_units && o.groups == 1) {
    KILN_ASSIGN(done, weight_taps_cpu(rt, x5, dy5, dw5, g3, o.plan));
  }
  if (weights > 0 && !empty && !done && rt.device().lane_units && o.groups == 1) {
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
  // Channels contiguous: a unit per channel; else a cube per channel, its units along the
  // positions (all of an item's at once where they are dense).
  if (dy5.stride(1) == 1)
    return rt.launch(kb, Dim3(u((dw.shape(0) + 63) / 64)), Dim3(64), dy5.as_read_only(), db, 64,
                     false, false);
  const bool flat = dy5.stride(4) == 1 && dy5.stride(3) == dy5.shape(4) &&
                    dy5.stride(2) == dy5.shape(3) * dy5.shape(4);
  // On the CPU one vector of 16 units walking the channel in order (4 vectors, each striding
  // over the others' columns, took twice as long under perf); on a GPU up to 256 threads.
  const int64_t along = flat ? dy5.shape(2) * dy5.shape(3) * dy5.shape(4) : dy5.shape(4);
  const int units = rt.device().lane_units
                        ? 16
                        : static_cast<int>(std::clamp<int64_t>((along + 15) / 16 * 16, 16, 256));
  return rt.launch(kb, Dim3(u(dw.shape(0))), Dim3(u(units)), dy5.as_read_only(), db, units, true,
                   flat);
}

}  // namespace kiln::lib
