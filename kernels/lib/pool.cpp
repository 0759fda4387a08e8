// The pooling kernels of kiln::lib::max_pool2d and avg_pool2d (pool.h).
//
// Both read a logical [N, C, H, W] view with any strides (the host permutes an NHWC tensor into
// one) and work in padded coordinates: padded row py = iy + padding, so every index is a u32.
//
// - pool2d_rows, for rows along W contiguous (NCHW): a cube owns `units` output columns of one
//   plane and a band of `rows` output rows. It first reduces each input row of the band across
//   the window's width, one output column per unit (consecutive units read consecutive or
//   stride-apart elements: vector loads on the CPU, coalesced on a GPU), into a shared tile of
//   `band` rows; then it reduces kernel-height rows of that tile for each output row. A k x k
//   window costs about 2k operations per output instead of k^2, and the input is read once.
//   Reducing across the width first keeps PyTorch's choice on ties (the first maximum in
//   row-major order) and NaNs (the last NaN): each row's choice is its first maximum, and the
//   rows are then taken in order by the same rule.
// - pool2d_channels, for channels contiguous (NHWC): a unit per channel, consecutive units on
//   consecutive channels, each visiting its window's taps in row-major order; a cube covers a
//   run of output columns of one output row.
#include "kernels/lib/pool.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"
#include "kernels/run.h"

using namespace kiln::dsl;

namespace kiln::lib {
enum class PoolOp { Max, Avg };
KILN_COMPTIME_ENUM(PoolOp, Max, Avg)
}  // namespace kiln::lib

using kiln::lib::PoolOp;

namespace {

constexpr uint32_t kNone = 0xffffffffu;  // no tap taken yet

using kiln::lib::detail::convert;

// The window's geometry, run-time values shared by both kernels.
struct Window {
  u32 kh, kw, sh, sw, ph, pw, dh, dw;
};

// A running maximum (with where it is) or sum over taps.
struct Acc {
  PoolOp op;
  bool indices;
  Var<f32> value;
  Var<u32> where;  // with indices: the winning tap's position (kNone before the first)
  Var<Bool> nan;   // without indices: whether a tap was NaN
  Acc(PoolOp o, bool with_indices)
      : op(o),
        indices(with_indices),
        value(o == PoolOp::Max ? -INFINITY : 0.0f),
        where(kNone),
        nan(false) {}
  // PyTorch's rule: a tap replaces the maximum if it is larger or NaN.
  void add(const Val<float>& v, const Val<uint32_t>& at) {
    if (op == PoolOp::Avg) {
      value += v;
      return;
    }
    f32 m = value;
    if (!indices) {
      // The same maximum as a short dependency chain: max() with the running value first (its
      // NaN test is on the tap, off the chain), and NaNs noted on the side (result()).
      value = max(m, v);
      nan = nan || is_nan(v);
      return;
    }
    u32 w = where;
    Bool take = w == kNone || v > m || is_nan(v);
    value = select(take, v, m);
    where = select(take, at, w);
  }
  // The maximum (NaN if a tap was) or the sum.
  Val<float> result() {
    if (op == PoolOp::Max && !indices) return select(nan.get(), splat<f32>(NAN, 1), value.get());
    return value;
  }
};

// The maximum (NaN if any is) or the sum of taps known at trace time, as a tree: a dependency
// chain of log2(taps) operations instead of taps.
Val<float> tap_tree(std::vector<Val<float>> v, PoolOp op) {
  std::vector<Val<bool>> nan;
  if (op == PoolOp::Max)
    for (const auto& x : v) nan.push_back(is_nan(x));
  while (v.size() > 1) {
    std::vector<Val<float>> next;
    std::vector<Val<bool>> next_nan;
    for (size_t i = 0; i + 1 < v.size(); i += 2) {
      next.push_back(op == PoolOp::Max ? max(v[i], v[i + 1]) : v[i] + v[i + 1]);
      if (op == PoolOp::Max) next_nan.push_back(nan[i] || nan[i + 1]);
    }
    if (v.size() % 2) {
      next.push_back(v.back());
      if (op == PoolOp::Max) next_nan.push_back(nan.back());
    }
    v = std::move(next);
    nan = std::move(next_nan);
  }
  if (op == PoolOp::Avg) return v[0];
  return select(nan[0], splat<f32>(NAN, 1), v[0]);
}

// Average pooling's divisor for the output at padded position (py, px) (PyTorch's).
Val<float> avg_divisor(const Val<uint32_t>& py, const Val<uint32_t>& px, const Val<uint32_t>& h,
                       const Val<uint32_t>& w, const Window& win, const Val<uint32_t>& divisor,
                       const Val<uint32_t>& include_pad) {
  u32 he = min(py + win.kh, h + win.ph * 2u), we = min(px + win.kw, w + win.pw * 2u);
  u32 padded = (he - py) * (we - px);
  u32 hs_in = max(py, win.ph), ws_in = max(px, win.pw);
  u32 he_in = min(he, h + win.ph), we_in = min(we, w + win.pw);
  u32 inside = (he_in - hs_in) * (we_in - ws_in);
  u32 count = select(divisor != 0u, divisor, select(include_pad != 0u, padded, inside));
  return cast<f32>(count);
}

template <class T>
void pool2d_rows(Tensor<const T> in, Tensor<T> out, Tensor<i64> idx, u32 kh, u32 kw, u32 sh, u32 sw,
                 u32 ph, u32 pw, u32 dh, u32 dw, u32 rows, u32 divisor, u32 include_pad, PoolOp op,
                 bool indices, int units, int band, int taps_h, int taps_w) {
  const auto tile = static_cast<uint32_t>(units * band);
  auto hval = shared_array<f32>(tile);
  auto hcol = shared_array<u32>(indices ? tile : 1u);
  const Window win{kh, kw, sh, sw, ph, pw, dh, dw};
  u32 u = unit_pos();
  u32 ox = cube_pos_x() * units + u;
  u32 oy0 = cube_pos_y() * rows;
  u32 channels = in.shape(1);
  u32 n = cube_pos_z() / channels, c = cube_pos_z() % channels;
  u32 h = in.shape(2), w = in.shape(3);
  u32 oh = out.shape(2), ow = out.shape(3);
  u32 py0 = oy0 * sh;
  u32 px0 = ox * sw;
  // The input rows the band's windows cover (the host keeps this within `band`).
  u32 last = min(oy0 + rows, oh);
  u32 need = select(last > oy0, (last - oy0 - 1u) * sh + (kh - 1u) * dh + 1u, 0u);
  // The output columns whose windows lie inside the row: [ox_lo, ox_hi).
  u32 reach_w = (kw - 1u) * dw + 1u;
  u32 ox_lo = (pw + sw - 1u) / sw;
  u32 ox_hi = select(w + pw >= reach_w, (w + pw - reach_w) / sw + 1u, 0u);
  // Across the width: one reduced row per input row of the band.
  // (A unit-strided loop over the tile: on the CPU its iterations run outermost, so the band's
  // rows are read one after the other, each by all the units.)
  for_range(u, need * units, static_cast<uint32_t>(units), [&](u32 i) {
    u32 r = i / static_cast<uint32_t>(units);
    Acc acc(op, indices);
    u32 py = py0 + r;
    if_(py >= ph && py < h + ph, [&] {
      u32 iy = py - ph;
      // A window inside the row needs no test per tap (on the CPU, a vector of such units
      // skips the other branch).
      if_(ox >= ox_lo && ox < ox_hi, [&] {
        if (taps_w > 0 && !indices) {
          std::vector<Val<float>> v;
          for (int dx = 0; dx < taps_w; ++dx)
            v.push_back(cast<f32>(in(n, c, iy, px0 + static_cast<uint32_t>(dx) * dw - pw)));
          acc.value = tap_tree(std::move(v), op);
          return;
        }
        for_range(0u, kw, [&](u32 dx) {
          u32 ix = px0 + dx * dw - pw;
          acc.add(cast<f32>(in(n, c, iy, ix)), ix);
        });
      }).else_([&] {
        for_range(0u, kw, [&](u32 dx) {
          u32 px = px0 + dx * dw;
          if_(px >= pw && px < w + pw, [&] {
            u32 ix = px - pw;
            acc.add(cast<f32>(in(n, c, iy, ix)), ix);
          });
        });
      });
    });
    hval[i] = acc.result();
    if (indices) hcol[i] = acc.where;
  });
  sync_cube();
  // Down the height: kernel-height reduced rows per output row.
  for_range(u, (last - oy0) * units, static_cast<uint32_t>(units), [&](u32 i) {
    u32 j = i / static_cast<uint32_t>(units);
    u32 oy = oy0 + j;
    if_(ox < ow, [&] {
      Acc acc(op, indices);
      Var<u32> col = 0u;
      if (taps_h > 0 && !indices) {
        // Every row of the window inside the input (the same for every unit): a tree.
        u32 py_first = py0 + j * sh;
        u32 py_last = py_first + static_cast<uint32_t>(taps_h - 1) * dh;
        if_(py_first >= ph && py_last < h + ph, [&] {
          std::vector<Val<float>> v;
          for (int dy = 0; dy < taps_h; ++dy)
            v.push_back(hval[(j * sh + static_cast<uint32_t>(dy) * dh) * units + u]);
          f32 t = tap_tree(std::move(v), op);
          if (op == PoolOp::Avg) {
            out(n, c, oy, ox) =
                convert<T>(t / avg_divisor(oy * sh, px0, h, w, win, divisor, include_pad));
          } else {
            out(n, c, oy, ox) = convert<T>(t);
          }
          continue_();
        });
      }
      for_range(0u, kh, [&](u32 dy) {
        u32 r = j * sh + dy * dh;
        u32 py = py0 + r;
        if_(py >= ph && py < h + ph, [&] {
          f32 v = hval[r * units + u];
          if (!indices) {
            acc.add(v, r);
            return;
          }
          u32 before = acc.where;
          acc.add(v, py - ph);
          u32 after = acc.where;
          col = select(after != before, hcol[r * units + u], col.get());
        });
      });
      f32 m = acc.result();
      if (op == PoolOp::Avg) {
        out(n, c, oy, ox) =
            convert<T>(m / avg_divisor(oy * sh, px0, h, w, win, divisor, include_pad));
      } else {
        out(n, c, oy, ox) = convert<T>(m);
      }
      if (indices) {
        u32 iy = acc.where;
        idx(n, c, oy, ox) = cast<i64>(iy) * cast<i64>(w) + cast<i64>(col.get());
      }
    });
  });
}
KILN_KERNEL_GENERIC(pool2d_rows,
                    "in: rank=4, out: rank=4, idx: rank=4, kh, kw, sh, sw, ph, pw, dh, dw, rows, "
                    "divisor, include_pad, op = Max, indices = false, units = 64 in 16..1024, "
                    "band = 32 in 1..256, taps_h = 0 in 0..8, taps_w = 0 in 0..8",
                    f32, f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("kiln::lib pooling with rows contiguous: across the width, then down the height");

template <class T>
void pool2d_channels(Tensor<const T> in, Tensor<T> out, Tensor<i64> idx, u32 kh, u32 kw, u32 sh,
                     u32 sw, u32 ph, u32 pw, u32 dh, u32 dw, u32 cols, u32 divisor, u32 include_pad,
                     PoolOp op, bool indices, int units) {
  const Window win{kh, kw, sh, sw, ph, pw, dh, dw};
  u32 c = cube_pos_x() * units + unit_pos();
  u32 ox0 = cube_pos_y() * cols;
  u32 oh = out.shape(2), ow = out.shape(3);
  u32 n = cube_pos_z() / oh, oy = cube_pos_z() % oh;
  u32 h = in.shape(2), w = in.shape(3);
  u32 py = oy * sh;
  for_range(ox0, min(ox0 + cols, ow), [&](u32 ox) {
    if_(c < in.shape(1), [&] {
      Acc acc(op, indices);
      u32 px = ox * sw;
      for_range(0u, kh, [&](u32 dy) {
        u32 ty = py + dy * dh;
        if_(ty >= ph && ty < h + ph, [&] {
          u32 iy = ty - ph;
          for_range(0u, kw, [&](u32 dx) {
            u32 tx = px + dx * dw;
            if_(tx >= pw && tx < w + pw, [&] {
              u32 ix = tx - pw;
              acc.add(cast<f32>(in(n, c, iy, ix)), iy * w + ix);
            });
          });
        });
      });
      f32 m = acc.result();
      if (op == PoolOp::Avg) {
        out(n, c, oy, ox) = convert<T>(m / avg_divisor(py, px, h, w, win, divisor, include_pad));
      } else {
        out(n, c, oy, ox) = convert<T>(m);
      }
      if (indices) idx(n, c, oy, ox) = cast<i64>(acc.where.get());
    });
  });
}
KILN_KERNEL_GENERIC(pool2d_channels,
                    "in: rank=4, out: rank=4, idx: rank=4, kh, kw, sh, sw, ph, pw, dh, dw, cols, "
                    "divisor, include_pad, op = Max, indices = false, units = 64 in 16..1024",
                    f32, f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("kiln::lib pooling with channels contiguous: a unit per channel");

}  // namespace

namespace kiln::lib {

namespace {

using ir::ElemType;

using detail::bad;

using detail::dims;

// The window's numbers, checked.
struct Geometry {
  int64_t k[2], s[2], p[2], d[2];
};

Result<Geometry> geometry(const char* op, const Pool2dOptions& o) {
  Geometry g{};
  const char* axis[2] = {"height", "width"};
  for (int i = 0; i < 2; ++i) {
    g.k[i] = o.kernel[static_cast<size_t>(i)];
    g.s[i] = o.stride[static_cast<size_t>(i)] == 0 ? g.k[i] : o.stride[static_cast<size_t>(i)];
    g.p[i] = o.padding[static_cast<size_t>(i)];
    g.d[i] = o.dilation[static_cast<size_t>(i)];
    if (g.k[i] < 1 || g.k[i] > 65535)
      return bad(op, fmt::format("kernel {} is {}; it must be 1 to 65535", axis[i], g.k[i]));
    if (g.s[i] < 1 || g.s[i] > 65535)
      return bad(op, fmt::format("stride {} is {}; it must be 1 to 65535 (0: the kernel's)",
                                 axis[i], g.s[i]));
    if (g.d[i] < 1 || g.d[i] > 65535)
      return bad(op, fmt::format("dilation {} is {}; it must be 1 to 65535", axis[i], g.d[i]));
    if (g.p[i] < 0 || g.p[i] > g.k[i] / 2)
      return bad(op, fmt::format("padding {} is {}; it must be 0 to half the kernel ({}), as "
                                 "PyTorch requires",
                                 axis[i], g.p[i], g.k[i] / 2));
  }
  return g;
}

int64_t output_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // A last window may not start in the right padding.
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// [N, C, H, W] of a shape in the layout (N = 1 when absent).
Result<std::array<int64_t, 4>> nchw(const char* op, const char* name, std::span<const int64_t> s,
                                    Layout layout) {
  if (s.size() != 3 && s.size() != 4)
    return bad(op, fmt::format("'{}' has shape {}; pooling takes [N, C, H, W] or [C, H, W] ({})",
                               name, dims(s),
                               layout == Layout::Nchw ? "NCHW"
                                                      : "NHWC, as "
                                                        "[N, H, W, C] or [H, W, C]"));
  std::array<int64_t, 4> r{1, 0, 0, 0};
  const size_t b = s.size() - 3;
  if (b) r[0] = s[0];
  if (layout == Layout::Nchw) {
    r[1] = s[b];
    r[2] = s[b + 1];
    r[3] = s[b + 2];
  } else {
    r[2] = s[b];
    r[3] = s[b + 1];
    r[1] = s[b + 2];
  }
  return r;
}

// A tensor as its logical [N, C, H, W] view.
Result<Tensor> as_nchw(const Tensor& t, Layout layout) {
  std::vector<int64_t> shape, strides;
  const int b = t.rank() - 3;
  auto add = [&](int d) {
    shape.push_back(d < 0 ? 1 : t.shape(d));
    strides.push_back(d < 0 ? 0 : t.stride(d));
  };
  add(b ? 0 : -1);
  if (layout == Layout::Nchw) {
    add(b);
    add(b + 1);
    add(b + 2);
  } else {
    add(b + 2);
    add(b);
    add(b + 1);
  }
  return Tensor::make(t.device_ptr(), t.buffer(), t.dtype(), shape, strides, t.offset());
}

Status pool(Runtime& rt, const char* op_name, PoolOp op, const Tensor& in, Tensor& out,
            const Pool2dOptions& o, Tensor* indices) {
  KILN_ASSIGN(const Geometry g, geometry(op_name, o));
  if (op == PoolOp::Avg && (g.d[0] != 1 || g.d[1] != 1))
    return bad(op_name, "dilation must be 1 for average pooling (as in PyTorch)");
  if (op == PoolOp::Avg && o.divisor < 0)
    return bad(op_name, fmt::format("divisor is {}; 0 (none) or positive", o.divisor));
  const std::pair<const Tensor*, const char*> all[] = {
      {&in, "in"}, {&out, "out"}, {indices, "indices"}};
  for (const auto& [t, name] : all) {
    if (!t) continue;
    if (!t->valid()) return bad(op_name, fmt::format("the tensor '{}' is empty (no buffer)", name));
    if (t->device() != in.device())
      return bad(op_name, fmt::format("the tensor '{}' is on another device than 'in'", name));
    if (!detail::fits_u32(*t))
      return bad(op_name, fmt::format("'{}' ({}) spans more than 2^32 elements; split it", name,
                                      t->describe()));
  }
  const ElemType type = in.dtype();
  if (type != ElemType::F32 && type != ElemType::F16 && type != ElemType::BF16)
    return bad(op_name, fmt::format("'in' is {}; pooling takes f32, f16 or bf16", in.describe()));
  if (out.dtype() != type)
    return bad(op_name, fmt::format("'out' is {}; it must hold the input's type, {}",
                                    out.describe(), ir::elem_name(type)));
  if (out.read_only()) return bad(op_name, "the tensor 'out' is read-only");
  KILN_ASSIGN(const auto want, pool2d_output_shape(in.shape(), o));
  if (!std::equal(want.begin(), want.end(), out.shape().begin(), out.shape().end()))
    return bad(op_name, fmt::format("'out' has shape {}; for 'in' {} and these options it must "
                                    "be {}",
                                    dims(out.shape()), dims(in.shape()), dims(want)));
  if (indices) {
    if (indices->dtype() != ElemType::I64)
      return bad(op_name, fmt::format("'indices' is {}; it holds i64", indices->describe()));
    if (indices->read_only()) return bad(op_name, "the tensor 'indices' is read-only");
    if (!std::equal(want.begin(), want.end(), indices->shape().begin(), indices->shape().end()))
      return bad(op_name, fmt::format("'indices' has shape {}; it must be out's, {}",
                                      dims(indices->shape()), dims(want)));
  }
  KILN_ASSIGN(const Tensor x, as_nchw(in, o.layout));
  KILN_ASSIGN(Tensor y, as_nchw(out, o.layout));
  Tensor idx;
  if (indices) {
    KILN_ASSIGN(idx, as_nchw(*indices, o.layout));
  } else {
    KILN_ASSIGN(idx, rt.empty(ElemType::I64, {1, 1, 1, 1}));
  }
  const int64_t planes = x.shape(0) * x.shape(1), oh = y.shape(2), ow = y.shape(3);
  if (planes == 0 || oh == 0 || ow == 0) return {};
  if (x.shape(3) * x.stride(3) > (int64_t{1} << 31) ||
      x.shape(2) * x.shape(3) >= (int64_t{1} << 32))
    return bad(op_name, "a plane of 'in' holds 2^32 elements or more; split it");
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const bool gpu = !rt.device().lane_units;
  const uint32_t divisor = u(o.divisor), include_pad = o.count_include_pad ? 1u : 0u;
  constexpr int64_t kMaxCubes = 65535;
  // `units` output columns per cube (a power of two near the output width) and a band of
  // output rows whose input rows fit `band`; channels contiguous and rows not, or windows taller
  // than a band: a unit per channel, visiting each tap.
  // On the CPU a cube covers whole output rows up to 512 columns, so that the band's input rows
  // are read as one stream each (narrower tiles measured 2-3x slower at stride 2).
  int units = gpu ? 128 : 512;
  const int band = gpu ? 16 : 32;
  const int64_t window = (g.k[0] - 1) * g.d[0] + 1;
  const bool channels = (x.stride(1) == 1 && x.stride(3) != 1 && x.shape(1) > 1) || window > band;
  if (channels) {
    // A unit per channel: as many units as channels, in whole vectors (16 lanes), up to 128.
    units = static_cast<int>(std::clamp<int64_t>((x.shape(1) + 15) / 16 * 16, 16, 128));
    const int64_t cols = std::min<int64_t>(ow, 8);
    const int64_t z = x.shape(0) * oh;
    if (z > kMaxCubes)
      return bad(op_name, fmt::format("N x output height is {}; at most {} (split the batch)", z,
                                      kMaxCubes));
    KILN_ASSIGN(const Kernel k, rt.kernel("pool2d_channels"));
    return rt.launch(k, Dim3(u((x.shape(1) + units - 1) / units), u((ow + cols - 1) / cols), u(z)),
                     Dim3(u(units)), x.as_read_only(), y, idx, u(g.k[0]), u(g.k[1]), u(g.s[0]),
                     u(g.s[1]), u(g.p[0]), u(g.p[1]), u(g.d[0]), u(g.d[1]), u(cols), divisor,
                     include_pad, op, indices != nullptr, units);
  }
  if (planes > kMaxCubes)
    return bad(op_name,
               fmt::format("N x C is {}; at most {} (split the batch)", planes, kMaxCubes));
  while (units > 32 && units / 2 >= ow) units /= 2;
  const int64_t rows = std::min((band - window) / g.s[0] + 1, oh);
  // Windows of up to 8 taps a side are unrolled (a tree per output) on the CPU.
  auto taps = [&](int64_t k) { return !gpu && k <= 8 ? static_cast<int>(k) : 0; };
  KILN_ASSIGN(const Kernel k, rt.kernel("pool2d_rows"));
  return rt.launch(k, Dim3(u((ow + units - 1) / units), u((oh + rows - 1) / rows), u(planes)),
                   Dim3(u(units)), x.as_read_only(), y, idx, u(g.k[0]), u(g.k[1]), u(g.s[0]),
                   u(g.s[1]), u(g.p[0]), u(g.p[1]), u(g.d[0]), u(g.d[1]), u(rows), divisor,
                   include_pad, op, indices != nullptr, units, band, taps(g.k[0]), taps(g.k[1]));
}

}  // namespace

Result<std::vector<int64_t>> pool2d_output_shape(std::span<const int64_t> in,
                                                 const Pool2dOptions& o) {
  KILN_ASSIGN(const Geometry g, geometry("pool2d", o));
  KILN_ASSIGN(const auto s, nchw("pool2d", "in", in, o.layout));
  const int64_t oh = output_size(s[2], g.k[0], g.s[0], g.p[0], g.d[0], o.ceil_mode);
  const int64_t ow = output_size(s[3], g.k[1], g.s[1], g.p[1], g.d[1], o.ceil_mode);
  std::vector<int64_t> out(in.begin(), in.end());
  const size_t b = in.size() - 3;
  if (o.layout == Layout::Nchw) {
    out[b + 1] = oh;
    out[b + 2] = ow;
  } else {
    out[b] = oh;
    out[b + 1] = ow;
  }
  return out;
}

Status max_pool2d(Runtime& rt, const Tensor& in, Tensor& out, const Pool2dOptions& o,
                  Tensor* indices) {
  return pool(rt, "max_pool2d", PoolOp::Max, in, out, o, indices);
}

Status avg_pool2d(Runtime& rt, const Tensor& in, Tensor& out, const Pool2dOptions& o) {
  return pool(rt, "avg_pool2d", PoolOp::Avg, in, out, o, nullptr);
}

}  // namespace kiln::lib

// `kiln run max_pool2d` / `kiln run avg_pool2d`: the entry points on random inputs against a
// double reference. --shape in=NxCxHxW (with --set channels_last=1: NxHxWxC); --set kernel=,
// stride= (0: the kernel), padding=, dilation=, ceil_mode=, and kernel_w=, stride_w=,
// padding_w=, dilation_w= for a width that differs (-1: as the height); max_pool2d
// with_indices=0 for its values from the kernels' form without indices; avg_pool2d also
// count_include_pad= and divisor=.
namespace {

using kiln::kernels::RunData;
using kiln::lib::Layout;
using kiln::lib::Pool2dOptions;

Pool2dOptions run_options(const RunData& d) {
  Pool2dOptions o;
  auto pair = [&](const char* name, const std::string& wide, std::array<int64_t, 2>& v) {
    v[0] = static_cast<int64_t>(d.scalar(name));
    const auto w = static_cast<int64_t>(d.scalar(wide));
    v[1] = w < 0 ? v[0] : w;
  };
  pair("kernel", "kernel_w", o.kernel);
  pair("stride", "stride_w", o.stride);
  pair("padding", "padding_w", o.padding);
  pair("dilation", "dilation_w", o.dilation);
  o.ceil_mode = d.scalar("ceil_mode") != 0;
  o.layout = d.scalar("channels_last") != 0 ? Layout::Nhwc : Layout::Nchw;
  if (d.scalars.count("count_include_pad"))
    o.count_include_pad = d.scalar("count_include_pad") != 0;
  if (d.scalars.count("divisor")) o.divisor = static_cast<int64_t>(d.scalar("divisor"));
  return o;
}

std::vector<int64_t> run_out_shape(const RunData& d) {
  auto s = kiln::lib::pool2d_output_shape(d.shape("in"), run_options(d));
  return s ? *s : std::vector<int64_t>{0};  // the entry point reports the error
}

// PyTorch's pooling in double, on row-major tensors in the run's layout.
void pool_reference(RunData& d, bool is_max) {
  const Pool2dOptions o = run_options(d);
  const auto& is = d.shape("in");
  const auto os = run_out_shape(d);
  if (os.size() != is.size()) return;
  const bool nhwc = o.layout == Layout::Nhwc;
  const size_t b = is.size() - 3;
  const int64_t n = b ? is[0] : 1;
  const int64_t c = nhwc ? is[b + 2] : is[b], h = nhwc ? is[b] : is[b + 1],
                w = nhwc ? is[b + 1] : is[b + 2];
  const int64_t oh = nhwc ? os[b] : os[b + 1], ow = nhwc ? os[b + 1] : os[b + 2];
  const int64_t kh = o.kernel[0], kw = o.kernel[1];
  const int64_t sh = o.stride[0] ? o.stride[0] : kh, sw = o.stride[1] ? o.stride[1] : kw;
  const int64_t ph = o.padding[0], pw = o.padding[1], dh = o.dilation[0], dw = o.dilation[1];
  auto at = [&](int64_t ni, int64_t ci, int64_t y, int64_t x, int64_t hh, int64_t ww) {
    return nhwc ? ((ni * hh + y) * ww + x) * c + ci : ((ni * c + ci) * hh + y) * ww + x;
  };
  const auto& in = d["in"];
  auto& out = d["out"];
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const size_t o_at = static_cast<size_t>(at(ni, ci, oy, ox, oh, ow));
          const int64_t y0 = oy * sh - ph, x0 = ox * sw - pw;
          if (is_max) {
            double m = -INFINITY;
            int64_t where = -1;
            for (int64_t dy = 0; dy < kh; ++dy)
              for (int64_t dx = 0; dx < kw; ++dx) {
                const int64_t y = y0 + dy * dh, x = x0 + dx * dw;
                if (y < 0 || y >= h || x < 0 || x >= w) continue;
                const double v = in[static_cast<size_t>(at(ni, ci, y, x, h, w))];
                if (where < 0 || v > m || std::isnan(v)) {
                  m = v;
                  where = y * w + x;
                }
              }
            out[o_at] = m;
            d["indices"][o_at] = static_cast<double>(where);
          } else {
            const int64_t y1 = std::min(y0 + kh, h + ph), x1 = std::min(x0 + kw, w + pw);
            const int64_t padded = (y1 - y0) * (x1 - x0);
            double sum = 0;
            int64_t inside = 0;
            for (int64_t y = std::max<int64_t>(y0, 0); y < std::min(y1, h); ++y)
              for (int64_t x = std::max<int64_t>(x0, 0); x < std::min(x1, w); ++x) {
                sum += in[static_cast<size_t>(at(ni, ci, y, x, h, w))];
                ++inside;
              }
            const int64_t div = o.divisor ? o.divisor : o.count_include_pad ? padded : inside;
            out[o_at] = d.round("out", sum / static_cast<double>(div));
          }
        }
}

kiln::Status run_pool(kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
                      const RunData& d, bool is_max) {
  const Pool2dOptions o = run_options(d);
  if (is_max && d.scalar("with_indices") == 0) {
    // The values from a call without indices; the indices from one with them, into a scratch
    // output (both kernels' forms are checked).
    KILN_ASSIGN(kiln::Tensor scratch, rt.empty(t.at("out").dtype(), t.at("out").shape()));
    KILN_TRY(kiln::lib::max_pool2d(rt, t.at("in"), scratch, o, &t.at("indices")));
    return kiln::lib::max_pool2d(rt, t.at("in"), t.at("out"), o);
  }
  if (is_max) return kiln::lib::max_pool2d(rt, t.at("in"), t.at("out"), o, &t.at("indices"));
  return kiln::lib::avg_pool2d(rt, t.at("in"), t.at("out"), o);
}

std::vector<std::pair<std::string, kiln::ir::ElemType>> pool_scalars(bool is_max) {
  using kiln::ir::ElemType;
  std::vector<std::pair<std::string, ElemType>> s = {
      {"kernel", ElemType::I32},     {"stride", ElemType::I32},
      {"padding", ElemType::I32},    {"dilation", ElemType::I32},
      {"kernel_w", ElemType::I32},   {"stride_w", ElemType::I32},
      {"padding_w", ElemType::I32},  {"dilation_w", ElemType::I32},
      {"ceil_mode", ElemType::Bool}, {"channels_last", ElemType::Bool}};
  if (is_max) s.push_back({"with_indices", ElemType::Bool});
  if (!is_max) {
    s.push_back({"count_include_pad", ElemType::Bool});
    s.push_back({"divisor", ElemType::I32});
  }
  return s;
}

kiln::kernels::RunRecipe& pool_recipe(kiln::kernels::RunRecipe& r) {
  return r.shape("in", {2, 8, 67, 45})
      .scalar("kernel", 3)
      .scalar("stride", 2)
      .scalar("padding", 1)
      .scalar("dilation", 1)
      .scalar("kernel_w", -1)
      .scalar("stride_w", -1)
      .scalar("padding_w", -1)
      .scalar("dilation_w", -1)
      .scalar("ceil_mode", 0)
      .scalar("channels_last", 0);
}

}  // namespace

KILN_RUN(max_pool2d)
    .host({.description = "max pooling with argmax indices, NCHW or NHWC: kiln::lib::max_pool2d",
           .kernels = {"pool2d_rows", "pool2d_channels"},
           .tensors = {{"in", true}, {"out", false}, {"indices", false}},
           .variants = {{kiln::ir::ElemType::F32, kiln::ir::ElemType::F32, kiln::ir::ElemType::I64},
                        {kiln::ir::ElemType::F16, kiln::ir::ElemType::F16, kiln::ir::ElemType::I64},
                        {kiln::ir::ElemType::BF16, kiln::ir::ElemType::BF16,
                         kiln::ir::ElemType::I64}},
           .scalars = pool_scalars(true),
           .call = [](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
                      const RunData& d) { return run_pool(rt, t, d, true); }})
    .shape("out", run_out_shape)
    .shape("indices", run_out_shape)
    .scalar("with_indices", 1)
    .tolerance(0, 0)
    .reference([](RunData& d) { pool_reference(d, true); });
[[maybe_unused]] static auto& kiln_run_max_pool2d_defaults =
    pool_recipe(kiln::kernels::run_recipe("max_pool2d"));

KILN_RUN(avg_pool2d)
    .host({.description = "average pooling, NCHW or NHWC: kiln::lib::avg_pool2d",
           .kernels = {"pool2d_rows", "pool2d_channels"},
           .tensors = {{"in", true}, {"out", false}},
           .variants = {{kiln::ir::ElemType::F32, kiln::ir::ElemType::F32},
                        {kiln::ir::ElemType::F16, kiln::ir::ElemType::F16},
                        {kiln::ir::ElemType::BF16, kiln::ir::ElemType::BF16}},
           .scalars = pool_scalars(false),
           .call = [](kiln::Runtime& rt, std::map<std::string, kiln::Tensor, std::less<>>& t,
                      const RunData& d) { return run_pool(rt, t, d, false); }})
    .shape("out", run_out_shape)
    .scalar("count_include_pad", 1)
    .scalar("divisor", 0)
    .reference([](RunData& d) { pool_reference(d, false); });
[[maybe_unused]] static auto& kiln_run_avg_pool2d_defaults =
    pool_recipe(kiln::kernels::run_recipe("avg_pool2d"));
