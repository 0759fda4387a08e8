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
  const int64_t kpg = k / o.groups;
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

void conv_reference(RunData& d) {
  const ConvOptions o = run_options(d);
  const auto ys = run_y_shape(d);
  const auto X = canonical_shape(d.shape("x"), o.layout),
             W = canonical_shape(d.shape("w"), Layout::Nchw), Y = canonical_shape(ys, o.layout);
  const auto xs = canonical_strides(d.shape("x"), o.layout),
             ws = canonical_strides(d.shape("w"), Layout::Nchw),
             yst = canonical_strides(ys, o.layout);
  const int dims = static_cast<int>(d.shape("x").size()) - 2;
  // Per canonical spatial dimension (D, H, W): stride, front padding, dilation.
  std::array<int64_t, 3> st{1, 1, 1}, pf{0, 0, 0}, dl{1, 1, 1};
  for (int i = 0; i < dims; ++i) {
    const auto at = static_cast<size_t>(3 - dims + i);
    st[at] = static_cast<int64_t>(d.scalar("stride"));
    dl[at] = static_cast<int64_t>(d.scalar("dilation"));
    pf[at] = static_cast<int64_t>(d.scalar("padding"));
    if (o.same) pf[at] = dl[at] * (W[static_cast<size_t>(2 + at)] - 1) / 2;
  }
  const bool use_bias = d.scalar("use_bias") != 0, use_residual = d.scalar("use_residual") != 0;
  const auto epilogue = static_cast<Epilogue>(static_cast<int>(d.scalar("epilogue")));
  const auto& x = d["x"];
  const auto& w = d["w"];
  const auto& bias = d["bias"];
  const auto& residual = d["residual"];
  auto& y = d["y"];
  const int64_t groups = o.groups, cg = W[1], kpg = Y[1] / groups;
  for (int64_t n = 0; n < Y[0]; ++n)
    for (int64_t k = 0; k < Y[1]; ++k)
      for (int64_t od = 0; od < Y[2]; ++od)
        for (int64_t oh = 0; oh < Y[3]; ++oh)
          for (int64_t ow = 0; ow < Y[4]; ++ow) {
            double sum = 0;
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
                    sum += x[static_cast<size_t>(n * xs[0] + (g * cg + c) * xs[1] + id * xs[2] +
                                                 ih * xs[3] + iw * xs[4])] *
                           w[static_cast<size_t>(k * ws[0] + c * ws[1] + kd * ws[2] + kh * ws[3] +
                                                 kw * ws[4])];
                  }
            const auto at = static_cast<size_t>(n * yst[0] + k * yst[1] + od * yst[2] +
                                                oh * yst[3] + ow * yst[4]);
            if (use_bias) sum += bias[static_cast<size_t>(k)];
            if (use_residual) sum += residual[at];
            y[at] = d.round("y", kiln::lib::detail::reference_activation(sum, epilogue));
          }
}

kiln::kernels::HostOp conv_op(int dims) {
  using kiln::ir::ElemType;
  kiln::kernels::HostOp op;
  op.description = fmt::format(
      "{}-d convolution, NCHW or NHWC, groups, fused epilogue: "
      "kiln::lib::conv",
      dims);
  op.kernels = {"conv_direct",      "matmul_pack_a", "matmul_pack_b", "matmul_cpu",  "matmul_gpu",
                "matmul_pack_rows", "matmul_ring",   "matmul_sm90",   "matmul_sm100"};
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

// (KILN_RUN's registration, with the recipe shared by the three ranks.)
[[maybe_unused]] static kiln::kernels::RunRecipe& conv1d_recipe =
    conv_recipe(kiln::kernels::run_recipe("conv1d", reinterpret_cast<const void*>(+[] {})), 1);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv2d_recipe =
    conv_recipe(kiln::kernels::run_recipe("conv2d", reinterpret_cast<const void*>(+[] {})), 2);
[[maybe_unused]] static kiln::kernels::RunRecipe& conv3d_recipe =
    conv_recipe(kiln::kernels::run_recipe("conv3d", reinterpret_cast<const void*>(+[] {})), 3);
