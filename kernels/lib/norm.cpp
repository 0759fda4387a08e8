// The kernel of kiln::lib::softmax, log_softmax, layer_norm and rms_norm (norm.h): a cube per
// row, `units` units striding along it (consecutive units on consecutive elements: vector
// accesses on the CPU, coalesced on a GPU). Each statistic is a per-unit partial in registers,
// then in shared memory, summed by every unit in the same order after one barrier (the row's
// statistics are identical in every unit, and on the CPU one barrier is cheaper than a tree).
// The row is read two or three times; it stays in L1/L2 between the passes.
#include "kernels/lib/norm.h"

#include <cmath>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"
#include "kernels/run.h"

using namespace kiln::dsl;

namespace kiln::lib {
enum class RowOp { Softmax, LogSoftmax, LayerNorm, RmsNorm };
KILN_COMPTIME_ENUM(RowOp, Softmax, LogSoftmax, LayerNorm, RmsNorm)
}  // namespace kiln::lib

using kiln::lib::RowOp;

namespace {

using kiln::lib::detail::convert;

// The flat index of the first element of row r of a [D0, D1, D2, D3, C] view whose last `lead`
// leading dimensions are not 1 (the host merges what it can, so that usually one remains and no
// division is needed).
template <class T>
Val<uint32_t> row_offset(const Tensor<T>& t, const Val<uint32_t>& r, int lead) {
  if (lead <= 1) return r * t.stride(3);
  u32 rest = r;
  u32 off = 0u;
  for (int d = 3; d >= 4 - lead; --d) {
    u32 i = d > 4 - lead ? rest % t.shape(d) : rest;
    if (d > 4 - lead) rest = rest / t.shape(d);
    off = off + i * t.stride(d);
  }
  return off;
}

// The cube's total of every unit's `v` (sum or max), the same in every unit.
template <class Shared>
Val<float> cube_total(Shared& part, const Val<float>& v, int units, bool is_max) {
  part[unit_pos()] = v;
  sync_cube();
  Var<f32> total = part[0u];
  for_range(1u, static_cast<uint32_t>(units), [&](u32 p) {
    f32 t = total;
    f32 x = part[p];
    total = is_max ? max(t, x) : t + x;
  });
  f32 result = total;
  sync_cube();  // before `part` is written again
  return result;
}

template <class T>
void norm_rows(Tensor<const T> x, Tensor<T> y, Tensor<const T> weight, Tensor<const T> bias,
               f32 eps, RowOp op, bool has_weight, bool has_bias, bool stash, int lead, int units) {
  auto part = shared_array<f32>(static_cast<uint32_t>(units));
  const auto step = static_cast<uint32_t>(units);
  u32 r = cube_pos();
  u32 n = x.shape(4);
  u32 xs = x.stride(4), ys = y.stride(4);
  u32 xo = row_offset(x, r, lead), yo = row_offset(y, r, lead);
  auto at = [&](const Val<uint32_t>& j) { return cast<f32>(x[xo + j * xs]); };
  // A unit's partial over its elements of the row, in two accumulators taking turns (two
  // dependency chains instead of one).
  auto partial = [&](float init, bool is_max, const std::function<void(Var<f32>&, u32)>& body) {
    Var<f32> a0 = init;
    Var<f32> a1 = init;
    u32 n2 = n / (2u * step) * (2u * step);
    for_range(unit_pos(), n2, 2u * step, [&](u32 j) {
      body(a0, j);
      body(a1, j + step);
    });
    for_range(n2 + unit_pos(), n, step, [&](u32 j) { body(a0, j); });
    f32 v0 = a0, v1 = a1;
    return is_max ? max(v0, v1) : v0 + v1;
  };
  // The per-unit partials: NaN-free maxima (IR max ignores NaN; a NaN reaches the sums).
  if (op == RowOp::Softmax || op == RowOp::LogSoftmax) {
    f32 m = partial(-INFINITY, true, [&](Var<f32>& a, u32 j) { a = max(a.get(), at(j)); });
    f32 row_max = cube_total(part, m, units, true);
    f32 s = partial(0.0f, false, [&](Var<f32>& a, u32 j) {
      f32 e = exp(at(j) - row_max);
      if (stash) y[yo + j * ys] = convert<T>(e);
      a += e;
    });
    f32 sum = cube_total(part, s, units, false);
    if (op == RowOp::Softmax) {
      f32 inv = 1.0f / sum;
      for_range(unit_pos(), n, step, [&](u32 j) {
        f32 e = stash ? cast<f32>(y[yo + j * ys]) : exp(at(j) - row_max);
        y[yo + j * ys] = convert<T>(e * inv);
      });
    } else {
      f32 shift = row_max + log(sum);
      for_range(unit_pos(), n, step, [&](u32 j) { y[yo + j * ys] = convert<T>(at(j) - shift); });
    }
    return;
  }
  // (A variable per pass: one that lived across a barrier would be kept in memory.)
  f32 count = cast<f32>(n);
  f32 mean = 0.0f;
  if (op == RowOp::LayerNorm) {
    f32 s = partial(0.0f, false, [&](Var<f32>& a, u32 j) { a += at(j); });
    mean = cube_total(part, s, units, false) / count;
  }
  f32 sq = partial(0.0f, false, [&](Var<f32>& a, u32 j) {
    f32 d = at(j) - mean;
    a += d * d;
  });
  f32 rstd = 1.0f / sqrt(cube_total(part, sq, units, false) / count + eps);
  for_range(unit_pos(), n, step, [&](u32 j) {
    f32 v = (at(j) - mean) * rstd;
    if (has_weight) v = v * cast<f32>(weight[j]);
    if (has_bias) v = v + cast<f32>(bias[j]);
    y[yo + j * ys] = convert<T>(v);
  });
}
KILN_KERNEL_GENERIC(norm_rows,
                    "x: rank=5, y: rank=5, weight, bias, eps, op = Softmax, has_weight = false, "
                    "has_bias = false, stash = false, lead = 1 in 0..4, units = 16 in 1..1024",
                    f32, f16, bf16)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("kiln::lib softmax, log_softmax, layer_norm and rms_norm: a cube per row");

}  // namespace

namespace kiln::lib {

namespace {

using ir::ElemType;

using detail::bad;

// x and y as [D0, D1, D2, D3, C] views whose leading dimensions are merged where both step
// through memory as one (dimensions of 1 dropped), padded in front with 1s; and how many leading
// dimensions remain.
Status rank5(const Tensor& x, const Tensor& y, Tensor& x5, Tensor& y5, int& lead) {
  struct Lead {
    int64_t size, xs, ys;
  };
  std::vector<Lead> dims;
  for (int d = 0; d + 1 < x.rank(); ++d) {
    if (x.shape(d) == 1) continue;
    if (!dims.empty() && dims.back().xs == x.stride(d) * x.shape(d) &&
        dims.back().ys == y.stride(d) * x.shape(d)) {
      dims.back().size *= x.shape(d);
      dims.back().xs = x.stride(d);
      dims.back().ys = y.stride(d);
      continue;
    }
    dims.push_back({x.shape(d), x.stride(d), y.stride(d)});
  }
  lead = static_cast<int>(dims.size());
  std::vector<int64_t> shape(5, 1), xs(5, 0), ys(5, 0);
  for (int i = 0; i < lead; ++i) {
    const size_t at = static_cast<size_t>(4 - lead + i);
    shape[at] = dims[static_cast<size_t>(i)].size;
    xs[at] = dims[static_cast<size_t>(i)].xs;
    ys[at] = dims[static_cast<size_t>(i)].ys;
  }
  shape[4] = x.shape(x.rank() - 1);
  xs[4] = x.stride(x.rank() - 1);
  ys[4] = y.stride(y.rank() - 1);
  KILN_ASSIGN(x5, Tensor::make(x.device_ptr(), x.buffer(), x.dtype(), shape, xs, x.offset()));
  KILN_ASSIGN(y5, Tensor::make(y.device_ptr(), y.buffer(), y.dtype(), shape, ys, y.offset()));
  return {};
}

Status rows(Runtime& rt, const char* name, RowOp op, const Tensor& x, Tensor& y,
            const NormOptions& o) {
  const std::pair<const Tensor*, const char*> all[] = {
      {&x, "x"}, {&y, "y"}, {o.weight, "weight"}, {o.bias, "bias"}};
  for (const auto& [t, what] : all) {
    if (!t) continue;
    if (!t->valid()) return bad(name, fmt::format("the tensor '{}' is empty (no buffer)", what));
    if (t->device() != x.device())
      return bad(name, fmt::format("the tensor '{}' is on another device than 'x'", what));
    if (t->dtype() != x.dtype())
      return bad(name, fmt::format("'{}' is {}; it must hold x's type ({})", what, t->describe(),
                                   ir::elem_name(x.dtype())));
    if (!detail::fits_u32(*t))
      return bad(name, fmt::format("'{}' ({}) spans more than 2^32 elements; split it", what,
                                   t->describe()));
  }
  const ElemType type = x.dtype();
  if (type != ElemType::F32 && type != ElemType::F16 && type != ElemType::BF16)
    return bad(name, fmt::format("'x' is {}; it must hold f32, f16 or bf16", x.describe()));
  if (x.rank() < 1 || x.rank() > 5)
    return bad(name, fmt::format("'x' is {}; rank 1 to 5", x.describe()));
  if (!std::equal(x.shape().begin(), x.shape().end(), y.shape().begin(), y.shape().end()))
    return bad(name,
               fmt::format("'y' is {}; it must have x's shape ({})", y.describe(), x.describe()));
  if (y.read_only()) return bad(name, "the tensor 'y' is read-only");
  const int64_t c = x.shape(x.rank() - 1);
  for (const auto& [t, what] : {std::pair{o.weight, "weight"}, std::pair{o.bias, "bias"}})
    if (t && (t->rank() != 1 || t->shape(0) != c))
      return bad(name, fmt::format("'{}' is {}; it must be [{}], the last dimension of x", what,
                                   t->describe(), c));
  if (!std::isfinite(o.eps) || o.eps < 0)
    return bad(name, fmt::format("eps is {}; it must be finite and not negative", o.eps));
  const int64_t n_rows = c == 0 ? 0 : x.numel() / c;
  if (n_rows == 0 || c == 0) return {};
  if (n_rows > 0x7fffffff) return bad(name, fmt::format("x has {} rows; at most 2^31 - 1", n_rows));
  Tensor x5, y5;
  int lead = 0;
  KILN_TRY(rank5(x, y, x5, y5, lead));
  // Placeholders for an absent weight or bias (never read).
  Tensor w, b;
  if (o.weight) {
    w = o.weight->as_read_only();
  } else {
    KILN_ASSIGN(w, rt.empty(type, {1}));
  }
  if (o.bias) {
    b = o.bias->as_read_only();
  } else {
    KILN_ASSIGN(b, rt.empty(type, {1}));
  }
  const bool gpu = !rt.device().lane_units;
  // On the CPU one vector of 16 units walks the row in order (more units measured slower: each
  // vector walks the row on its own with a stride); on a GPU up to 256, fewer for short rows.
  int units = 16;
  if (gpu) {
    units = 256;
    while (units > 32 && units / 2 >= c) units /= 2;
  }
  // f32 softmax keeps exp(x - max) in y between the passes instead of computing it twice.
  const bool stash = type == ElemType::F32 && op == RowOp::Softmax;
  KILN_ASSIGN(const Kernel k, rt.kernel("norm_rows"));
  return rt.launch(k, Dim3(static_cast<uint32_t>(n_rows)), Dim3(static_cast<uint32_t>(units)),
                   x5.as_read_only(), y5, w, b, o.eps, op, o.weight != nullptr, o.bias != nullptr,
                   stash, lead, units);
}

}  // namespace

Status softmax(Runtime& rt, const Tensor& x, Tensor& y) {
  return rows(rt, "softmax", RowOp::Softmax, x, y, {});
}
Status log_softmax(Runtime& rt, const Tensor& x, Tensor& y) {
  return rows(rt, "log_softmax", RowOp::LogSoftmax, x, y, {});
}
Status layer_norm(Runtime& rt, const Tensor& x, Tensor& y, const NormOptions& o) {
  return rows(rt, "layer_norm", RowOp::LayerNorm, x, y, o);
}
Status rms_norm(Runtime& rt, const Tensor& x, Tensor& y, const NormOptions& o) {
  if (o.bias) return bad("rms_norm", "takes no bias (only a weight)");
  return rows(rt, "rms_norm", RowOp::RmsNorm, x, y, o);
}

}  // namespace kiln::lib

// `kiln run softmax|log_softmax|layernorm|rmsnorm --shape x=RxC` (any rank up to 5): the entry
// points on random inputs against a double reference; --set eps=, use_weight=, use_bias=.
namespace {

using kiln::kernels::RunData;
using kiln::lib::RowOp;

void rows_reference(RunData& d, RowOp op) {
  const auto& s = d.shape("x");
  const int64_t c = s.empty() ? 0 : s.back();
  if (c == 0) return;
  const int64_t rows = d.numel("x") / c;
  const auto& x = d["x"];
  auto& y = d["y"];
  const bool use_w = d.scalars.count("use_weight") && d.scalar("use_weight") != 0;
  const bool use_b = d.scalars.count("use_bias") && d.scalar("use_bias") != 0;
  const double eps = d.scalars.count("eps") ? d.round("eps", d.scalar("eps")) : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * c;
    double* yr = y.data() + r * c;
    if (op == RowOp::Softmax || op == RowOp::LogSoftmax) {
      double m = -INFINITY;
      bool nan = false;
      for (int64_t j = 0; j < c; ++j) {
        m = std::max(m, xr[j]);
        nan = nan || std::isnan(xr[j]);
      }
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += std::exp(xr[j] - m);
      for (int64_t j = 0; j < c; ++j) {
        const double v = op == RowOp::Softmax ? std::exp(xr[j] - m) / s : xr[j] - m - std::log(s);
        yr[j] = d.round("y", nan ? NAN : v);
      }
      continue;
    }
    double mean = 0, sq = 0;
    if (op == RowOp::LayerNorm) {
      for (int64_t j = 0; j < c; ++j) mean += xr[j];
      mean /= static_cast<double>(c);
    }
    for (int64_t j = 0; j < c; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
    const double rstd = 1 / std::sqrt(sq / static_cast<double>(c) + eps);
    for (int64_t j = 0; j < c; ++j) {
      double v = (xr[j] - mean) * rstd;
      if (use_w) v *= d["weight"][static_cast<size_t>(j)];
      if (use_b) v += d["bias"][static_cast<size_t>(j)];
      yr[j] = d.round("y", v);
    }
  }
}

std::vector<int64_t> last_dim(const RunData& d) {
  const auto& s = d.shape("x");
  return {s.empty() ? 0 : s.back()};
}

using kiln::ir::ElemType;
using TensorMap = std::map<std::string, kiln::Tensor, std::less<>>;

// f32 arithmetic over a row of C: exp and log to a few ulp, sums of C terms; then y's rounding.
std::pair<double, double> rows_tolerance(const RunData& d, std::string_view) {
  const double c = static_cast<double>(last_dim(d)[0]);
  switch (d.dtype("y")) {
    case ElemType::F16:
      return {2e-3, 2e-3};
    case ElemType::BF16:
      return {1.6e-2, 1e-2};
    default:
      return {2e-6 + 2e-7 * std::sqrt(c), 1e-6 + 1e-7 * std::sqrt(c)};
  }
}

kiln::kernels::HostOp rows_op(const char* description, RowOp op, bool norm) {
  kiln::kernels::HostOp h;
  h.description = description;
  h.kernels = {"norm_rows"};
  h.tensors = {{"x", true}, {"y", false}};
  h.variants = {{ElemType::F32, ElemType::F32},
                {ElemType::F16, ElemType::F16},
                {ElemType::BF16, ElemType::BF16}};
  if (norm) {
    h.tensors = {{"x", true}, {"weight", true}, {"bias", true}, {"y", false}};
    h.variants = {{ElemType::F32, ElemType::F32, ElemType::F32, ElemType::F32},
                  {ElemType::F16, ElemType::F16, ElemType::F16, ElemType::F16},
                  {ElemType::BF16, ElemType::BF16, ElemType::BF16, ElemType::BF16}};
    h.scalars = {{"eps", ElemType::F32}, {"use_weight", ElemType::Bool}};
    if (op == RowOp::LayerNorm) h.scalars.push_back({"use_bias", ElemType::Bool});
  }
  h.call = [op](kiln::Runtime& rt, TensorMap& t, const RunData& d) -> kiln::Status {
    switch (op) {
      case RowOp::Softmax:
        return kiln::lib::softmax(rt, t.at("x"), t.at("y"));
      case RowOp::LogSoftmax:
        return kiln::lib::log_softmax(rt, t.at("x"), t.at("y"));
      default:
        break;
    }
    kiln::lib::NormOptions o;
    o.eps = static_cast<float>(d.scalar("eps"));
    const kiln::Tensor w = t.at("weight"), b = t.at("bias");
    if (d.scalar("use_weight") != 0) o.weight = &w;
    if (op == RowOp::LayerNorm) {
      if (d.scalar("use_bias") != 0) o.bias = &b;
      return kiln::lib::layer_norm(rt, t.at("x"), t.at("y"), o);
    }
    return kiln::lib::rms_norm(rt, t.at("x"), t.at("y"), o);
  };
  return h;
}

}  // namespace

KILN_RUN(softmax)
    .host(rows_op("softmax along the last axis: kiln::lib::softmax", RowOp::Softmax, false))
    .shape("x", {512, 1000})
    .same_shape("y", "x")
    .values("x", -8, 8)
    .tolerance(rows_tolerance)
    .reference([](RunData& d) { rows_reference(d, RowOp::Softmax); });

KILN_RUN(log_softmax)
    .host(rows_op("log-softmax along the last axis: kiln::lib::log_softmax", RowOp::LogSoftmax,
                  false))
    .shape("x", {512, 1000})
    .same_shape("y", "x")
    .values("x", -8, 8)
    .tolerance(rows_tolerance)
    .reference([](RunData& d) { rows_reference(d, RowOp::LogSoftmax); });

KILN_RUN(layernorm)
    .host(rows_op("layer normalization along the last axis: kiln::lib::layer_norm",
                  RowOp::LayerNorm, true))
    .shape("x", {512, 1000})
    .shape("weight", last_dim)
    .shape("bias", last_dim)
    .same_shape("y", "x")
    .scalar("eps", 1e-5)
    .scalar("use_weight", 1)
    .scalar("use_bias", 1)
    .tolerance(rows_tolerance)
    .reference([](RunData& d) { rows_reference(d, RowOp::LayerNorm); });

KILN_RUN(rmsnorm)
    .host(rows_op("RMS normalization along the last axis: kiln::lib::rms_norm", RowOp::RmsNorm,
                  true))
    .shape("x", {512, 1000})
    .shape("weight", last_dim)
    .shape("bias", last_dim)
    .same_shape("y", "x")
    .scalar("eps", 1e-5)
    .scalar("use_weight", 1)
    .tolerance(rows_tolerance)
    .reference([](RunData& d) { rows_reference(d, RowOp::RmsNorm); });
