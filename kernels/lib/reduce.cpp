// The kernels of kiln::lib::reduce (reduce.h). The host merges adjacent axes where the strides
// allow and passes x as a [kept..., reduced...] view of rank 5 (`red` reduced dimensions at the
// end, the kept ones before them, padded with 1s) and out as a [kept...] view of rank 4. Output
// o and reduction step k are linear indices over those dimensions, row-major.
// - reduce_rows, when the reduced elements are close together (the last axis, stride 1): a cube
//   per output, `units` units striding over k (consecutive units on consecutive elements), then
//   the units' partials combined in shared memory in a fixed order.
// - reduce_cols, when they are far apart but the outputs are close (an axis other than the
//   last): a unit per output, consecutive units on consecutive outputs (vector loads on the
//   CPU, coalesced on a GPU), each looping over k.
// Both accumulate in f32 (i64 for integers) and compute Var around the mean, in two passes.
#include "kernels/lib/reduce.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"
#include "kernels/run.h"

using namespace kiln::dsl;
using kiln::lib::ReduceOp;

namespace kiln::lib {
KILN_COMPTIME_ENUM(ReduceOp, Sum, Mean, Max, Min, Prod, ArgMax, ArgMin, Var)
}  // namespace kiln::lib

namespace {

// The input and result types of one instantiation.
template <class In_, class Out_>
struct ReducePair {
  using In = In_;
  using Out = Out_;
};

constexpr uint32_t kNone = 0xffffffffu;

template <class T>
constexpr bool is_float_v =
    std::is_same_v<T, f32> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

// What a reduction of In accumulates in: f32 for floats, i64 for integers.
template <class In>
using acc_t = std::conditional_t<is_float_v<In>, f32, i64>;

using kiln::lib::detail::convert;

bool is_arg(ReduceOp op) {
  return op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
}

// A running reduction of values of type A (with the position of the best one for ArgMax/Min).
template <class A>
struct Running {
  ReduceOp op;
  Var<A> value;
  Var<u32> where;  // ArgMax/ArgMin: the position of the best so far (kNone: none yet)
  Var<Bool> nan;   // Max/Min of floats: whether a NaN was seen

  static A start(ReduceOp op) {
    using H = host_of_t<A>;
    switch (op) {
      case ReduceOp::Prod:
        return A(splat<A>(H(1), 1));
      case ReduceOp::Max:
        if constexpr (is_float_v<A>)
          return splat<A>(-INFINITY, 1);
        else
          return splat<A>(std::numeric_limits<H>::lowest(), 1);
      case ReduceOp::Min:
        if constexpr (is_float_v<A>)
          return splat<A>(INFINITY, 1);
        else
          return splat<A>(std::numeric_limits<H>::max(), 1);
      default:
        return splat<A>(H(0), 1);
    }
  }
  explicit Running(ReduceOp o) : op(o), value(start(o)), where(kNone), nan(false) {}

  // Whether (v, at) replaces the best so far: larger (smaller), or NaN where the best is not;
  // on ties and between NaNs the smaller position.
  Val<bool> better(const A& v, const Val<uint32_t>& at) {
    A m = value;
    u32 w = where;
    Bool beats = op == ReduceOp::ArgMax ? v > m : v < m;
    Bool tie = v == m;
    if constexpr (is_float_v<A>) {
      Bool vn = is_nan(v), mn = is_nan(m);
      beats = beats || (vn && !mn);
      tie = tie || (vn && mn);
    }
    // A unit that saw no element (at == kNone) never wins the combination of partials.
    return at != kNone && (w == kNone || beats || (tie && at < w));
  }

  void add(const A& v, const Val<uint32_t>& at) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean:
      case ReduceOp::Var:
        value += v;
        return;
      case ReduceOp::Prod:
        value *= v;
        return;
      case ReduceOp::Max:
      case ReduceOp::Min: {
        // The running value first: max()'s NaN test is then on the new value, off the chain.
        A m = value;
        value = op == ReduceOp::Max ? max(m, v) : min(m, v);
        if constexpr (is_float_v<A>) nan = nan || is_nan(v);
        return;
      }
      default: {
        Bool take = better(v, at);
        A m = value;
        u32 w = where;
        value = select(take, v, m);
        where = select(take, at, w);
      }
    }
  }

  A result() {
    if constexpr (is_float_v<A>) {
      if (op == ReduceOp::Max || op == ReduceOp::Min)
        return select(nan.get(), splat<A>(NAN, 1), value.get());
    }
    return value;
  }
};

// Offsets of output o: in x (its kept dimensions, the first 5 - red of x's) and in out.
// Only out's last `kept` dimensions are not 1 (the host merges what it can): one kept
// dimension needs no division.
template <class X, class O>
std::pair<Val<uint32_t>, Val<uint32_t>> kept_offsets(const Tensor<X>& x, const Tensor<O>& out,
                                                     const Val<uint32_t>& o, int red, int kept) {
  u32 rest = o;
  u32 xo = 0u, oo = 0u;
  for (int d = 3; d >= 4 - kept; --d) {
    u32 dim = out.shape(d);
    u32 i = d > 4 - kept ? rest % dim : rest;
    if (d > 4 - kept) rest = rest / dim;
    oo = oo + i * out.stride(d);
    const int xd = d - red + 1;  // x's kept dimension for out's d
    if (xd >= 0) xo = xo + i * x.stride(xd);
  }
  return {xo, oo};
}

// The offset in x of reduction step k (over x's last `red` dimensions).
template <class X>
Val<uint32_t> reduced_offset(const Tensor<X>& x, const Val<uint32_t>& k, int red) {
  if (red == 1) return k * x.stride(4);
  u32 rest = k;
  u32 off = 0u;
  for (int d = 4; d >= 5 - red; --d) {
    u32 dim = x.shape(d);
    u32 i = d > 5 - red ? rest % dim : rest;
    if (d > 5 - red) rest = rest / dim;
    off = off + i * x.stride(d);
  }
  return off;
}

template <class P>
void store_result(Tensor<typename P::Out>& out, const Val<uint32_t>& at,
                  Running<acc_t<typename P::In>>& r, ReduceOp op, const Val<float>& divisor) {
  using Out = typename P::Out;
  using A = acc_t<typename P::In>;
  if (is_arg(op)) {
    out[at] = convert<Out>(cast<i64>(r.where.get()));
  } else if (op == ReduceOp::Mean) {
    if constexpr (is_float_v<A>) out[at] = convert<Out>(r.result() / divisor);
  } else if (op == ReduceOp::Var) {
    if constexpr (is_float_v<A>) out[at] = convert<Out>(r.result() / divisor);
  } else {
    out[at] = convert<Out>(r.result());
  }
}

// One output per cube.
template <class P>
void reduce_rows(Tensor<const typename P::In> x, Tensor<typename P::Out> out, f32 divisor,
                 ReduceOp op, int red, int kept, int units) {
  using A = acc_t<typename P::In>;
  auto vals = shared_array<A>(static_cast<uint32_t>(units));
  auto where = shared_array<u32>(is_arg(op) ? static_cast<uint32_t>(units) : 1u);
  const auto step = static_cast<uint32_t>(units);
  u32 n = 1u;
  for (int d = 5 - red; d < 5; ++d) n = n * x.shape(d);
  // Each unit's partial, then every unit combines the partials in order (the same result in
  // each; one barrier instead of a tree's).
  auto combine = [&](Running<A>& mine, ReduceOp how) {
    vals[unit_pos()] = mine.result();
    if (is_arg(how)) where[unit_pos()] = mine.where.get();
    sync_cube();
    Running<A> all(how);
    for_range(0u, step, [&](u32 p) {
      A v = vals[p];
      if (is_arg(how)) {
        u32 w = where[p];
        all.add(v, w);
      } else {
        all.add(v, p);
      }
    });
    sync_cube();
    return all;
  };
  u32 o = cube_pos();
  auto [xo0, oo0] = kept_offsets(x, out, o, red, kept);
  u32 xo = xo0;
  ReduceOp first = op == ReduceOp::Var ? ReduceOp::Sum : op;
  Running<A> mine(first);
  for_range(unit_pos(), n, step,
            [&](u32 k) { mine.add(convert<A>(x[xo + reduced_offset(x, k, red)]), k); });
  Running<A> all = combine(mine, first);
  auto store = [&](Running<A>& r) {
    if_(unit_pos() == 0u, [&] {
      u32 oo = kept_offsets(x, out, cube_pos(), red, kept).second;
      store_result<P>(out, oo, r, op, divisor);
    });
  };
  if (op != ReduceOp::Var) return store(all);
  if constexpr (is_float_v<A>) {
    // The squared distances from the mean, from the row again (in cache).
    f32 mean = all.result() / cast<f32>(n);
    Running<A> dev(ReduceOp::Sum);
    u32 xo2 = kept_offsets(x, out, cube_pos(), red, kept).first;
    for_range(unit_pos(), n, step, [&](u32 k) {
      f32 d = convert<A>(x[xo2 + reduced_offset(x, k, red)]) - mean;
      dev.add(d * d, k);
    });
    Running<A> total = combine(dev, ReduceOp::Sum);
    store(total);
  }
}

// One output per unit. With `lockstep` (the CPU) a barrier after each step of k makes every
// unit of the cube take step k before any takes k + 1: the cube reads a run of `units`
// consecutive elements of each reduced row in turn instead of each vector of units walking all
// the rows on its own (a page apart).
template <class P>
void reduce_cols(Tensor<const typename P::In> x, Tensor<typename P::Out> out, f32 divisor,
                 ReduceOp op, int red, int kept, bool lockstep, int units) {
  (void)units;  // the cube size
  using A = acc_t<typename P::In>;
  u32 o = absolute_pos();
  u32 outputs = out.shape(0) * out.shape(1) * out.shape(2) * out.shape(3);
  u32 n = 1u;
  for (int d = 5 - red; d < 5; ++d) n = n * x.shape(d);
  // Units past the last output compute the last one again (barriers need every unit).
  auto [xo, oo] = kept_offsets(x, out, min(o, outputs - 1u), red, kept);
  // One pass over k: the values, or their squared distances from `mean` (Var).
  auto pass = [&](Running<A>& r, const A* mean) {
    auto step = [&](const Val<uint32_t>& k) {
      A v = convert<A>(x[xo + reduced_offset(x, k, red)]);
      if (mean) {
        A d = v - *mean;
        r.add(d * d, k);
      } else {
        r.add(v, k);
      }
    };
    if (!lockstep) {
      for_range(0u, n, [&](u32 k) { step(k); });
      return;
    }
    // Eight steps of k between barriers: eight runs of the reduced rows in flight.
    u32 n8 = n / 8u * 8u;
    for_range(0u, n8, 8u, [&](u32 k) {
      for (uint32_t j = 0; j < 8; ++j) step(k + j);
      sync_cube();
    });
    for_range(n8, n, [&](u32 k) {
      step(k);
      sync_cube();
    });
  };
  ReduceOp first = op == ReduceOp::Var ? ReduceOp::Sum : op;
  Running<A> r(first);
  pass(r, nullptr);
  if (op != ReduceOp::Var) {
    if_(o < outputs, [&] { store_result<P>(out, oo, r, op, divisor); });
    return;
  }
  if constexpr (is_float_v<A>) {
    f32 mean = r.result() / cast<f32>(n);
    Running<A> dev(ReduceOp::Sum);
    pass(dev, &mean);
    if_(o < outputs, [&] { store_result<P>(out, oo, dev, op, divisor); });
  }
}

#define KILN_REDUCE_PAIRS                                                                      \
  ReducePair<f32, f32>, ReducePair<f16, f16>, ReducePair<bf16, bf16>, ReducePair<f32, i64>,    \
      ReducePair<f16, i64>, ReducePair<bf16, i64>, ReducePair<i32, i32>, ReducePair<i32, i64>, \
      /* the two passes of a long axis: */ ReducePair<f16, f32>, ReducePair<bf16, f32>,        \
      ReducePair<f32, f16>, ReducePair<f32, bf16>, ReducePair<i64, i64>

KILN_KERNEL_GENERIC(reduce_rows,
                    "x: rank=5, out: rank=4, divisor, op = Sum, red = 1 in 1..5, kept = 1 in 0..4, "
                    "units = 16 in 1..1024",
                    KILN_REDUCE_PAIRS)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("kiln::lib::reduce over close elements: a cube per output");

KILN_KERNEL_GENERIC(reduce_cols,
                    "x: rank=5, out: rank=4, divisor, op = Sum, red = 1 in 1..5, kept = 1 in 0..4, "
                    "lockstep = false, units = 256 in 1..1024",
                    KILN_REDUCE_PAIRS)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("kiln::lib::reduce over far-apart elements: a unit per output");

}  // namespace

namespace kiln::lib {

namespace {

using ir::ElemType;

Error bad(const std::string& what) {
  return Error(ErrorKind::InvalidArgument, fmt::format("kiln::lib::reduce: {}", what));
}

const char* op_name(ReduceOp op) {
  static const char* names[] = {"Sum", "Mean", "Max", "Min", "Prod", "ArgMax", "ArgMin", "Var"};
  return names[static_cast<int>(op)];
}

// The reduced axes as a mask over x's dimensions, or why they are wrong.
Result<std::vector<bool>> axis_mask(int rank, const std::vector<int>& axes) {
  std::vector<bool> m(static_cast<size_t>(rank), axes.empty());
  for (int a : axes) {
    const int d = a < 0 ? a + rank : a;
    if (d < 0 || d >= rank)
      return bad(fmt::format("axis {} is out of range for a tensor of rank {} ({} to {})", a, rank,
                             -rank, rank - 1));
    if (m[static_cast<size_t>(d)]) return bad(fmt::format("axis {} is given twice", a));
    m[static_cast<size_t>(d)] = true;
  }
  return m;
}

struct Dim {
  int64_t size, x_stride, out_stride;
};

// Adjacent dimensions that step through memory as one (outer stride = inner stride x size, in
// x and, for kept ones, in out) become one; dimensions of size 1 disappear.
std::vector<Dim> merged(const std::vector<Dim>& dims, bool with_out) {
  std::vector<Dim> r;
  for (const Dim& d : dims) {
    if (d.size == 1) continue;
    if (!r.empty()) {
      Dim& inner = r.back();
      // `d` is inner to r.back(): dims are listed outer to inner.
      if (inner.x_stride == d.x_stride * d.size &&
          (!with_out || inner.out_stride == d.out_stride * d.size)) {
        inner.size *= d.size;
        inner.x_stride = d.x_stride;
        inner.out_stride = d.out_stride;
        continue;
      }
    }
    r.push_back(d);
  }
  return r;
}

}  // namespace

Result<std::vector<int64_t>> reduce_output_shape(std::span<const int64_t> in,
                                                 const ReduceOptions& o) {
  KILN_ASSIGN(const auto mask, axis_mask(static_cast<int>(in.size()), o.axes));
  std::vector<int64_t> out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!mask[d])
      out.push_back(in[d]);
    else if (o.keepdim)
      out.push_back(1);
  }
  return out;
}

Result<ElemType> reduce_output_type(ReduceOp op, ElemType in) {
  const bool fl = in == ElemType::F32 || in == ElemType::F16 || in == ElemType::BF16;
  if (!fl && in != ElemType::I32)
    return bad(fmt::format("{} of {}: kiln reduces f32, f16, bf16 and i32", op_name(op),
                           ir::elem_name(in)));
  switch (op) {
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      return ElemType::I64;
    case ReduceOp::Sum:
    case ReduceOp::Prod:
      return fl ? in : ElemType::I64;
    case ReduceOp::Mean:
    case ReduceOp::Var:
      if (!fl)
        return bad(fmt::format("{} of {}: it takes floating-point tensors (cast first)",
                               op_name(op), ir::elem_name(in)));
      return in;
    default:
      return in;
  }
}

Status reduce(Runtime& rt, ReduceOp op, const Tensor& x, Tensor& out, const ReduceOptions& o) {
  const std::pair<const Tensor*, const char*> all[] = {{&x, "x"}, {&out, "out"}};
  for (const auto& [t, name] : all) {
    if (!t->valid()) return bad(fmt::format("the tensor '{}' is empty (no buffer)", name));
    if (t->device() != x.device())
      return bad(fmt::format("the tensor '{}' is on another device than 'x'", name));
    if (!detail::fits_u32(*t))
      return bad(
          fmt::format("'{}' ({}) spans more than 2^32 elements; split it", name, t->describe()));
  }
  if (x.rank() < 1 || x.rank() > 5) return bad(fmt::format("x is {}; rank 1 to 5", x.describe()));
  KILN_ASSIGN(const ElemType want_type, reduce_output_type(op, x.dtype()));
  if (out.dtype() != want_type)
    return bad(fmt::format("out is {}; {} of {} gives {}", out.describe(), op_name(op),
                           ir::elem_name(x.dtype()), ir::elem_name(want_type)));
  if (out.read_only()) return bad("the tensor 'out' is read-only");
  KILN_ASSIGN(const auto mask, axis_mask(x.rank(), o.axes));
  KILN_ASSIGN(const auto want_shape, reduce_output_shape(x.shape(), o));
  if (!std::equal(want_shape.begin(), want_shape.end(), out.shape().begin(), out.shape().end()))
    return bad(fmt::format("out is {}; reducing {} over these axes gives {}", out.describe(),
                           x.describe(), detail::dims(want_shape)));
  if (is_arg(op) && o.axes.size() > 1)
    return bad(fmt::format("{} takes one axis or none (the flattened tensor), not {}", op_name(op),
                           o.axes.size()));
  if (op == ReduceOp::Var && o.correction < 0)
    return bad(fmt::format("correction is {}; it must be 0 or more", o.correction));
  // Kept and reduced dimensions, with out's strides for the kept ones (keepdim's 1s skipped).
  std::vector<Dim> kept, red;
  int od = 0;
  for (int d = 0; d < x.rank(); ++d) {
    if (mask[static_cast<size_t>(d)]) {
      red.push_back({x.shape(d), x.stride(d), 0});
      if (o.keepdim) ++od;
    } else {
      kept.push_back({x.shape(d), x.stride(d), out.stride(od++)});
    }
  }
  int64_t n = 1, outputs = 1;
  for (const Dim& d : red) n *= d.size;
  for (const Dim& d : kept) outputs *= d.size;
  if (outputs == 0) return {};
  if (n == 0 && (op == ReduceOp::Max || op == ReduceOp::Min || is_arg(op)))
    return bad(
        fmt::format("{} over no elements (x is {}) has no answer", op_name(op), x.describe()));
  if (n >= (int64_t{1} << 32) || outputs >= (int64_t{1} << 32))
    return bad("more than 2^32 - 1 outputs or reduced elements; split the tensor");
  // ArgMax/ArgMin count along the axis (or the flattened tensor) in row-major order, so their
  // reduced dimensions stay as they are; the others may be merged.
  if (!is_arg(op)) red = merged(red, false);
  kept = merged(kept, true);
  if (red.empty()) red.push_back({1, 0, 0});
  if (kept.size() > 4 || kept.size() + red.size() > 5)
    return bad("internal: too many dimensions after merging");  // rank <= 5 prevents this
  // x: [1.., kept..., red...] (rank 5); out: [1.., kept...] (rank 4).
  std::vector<int64_t> xs(5, 1), xst(5, 0), os(4, 1), ost(4, 0);
  const int nr = static_cast<int>(red.size());
  for (int i = 0; i < nr; ++i) {
    xs[static_cast<size_t>(5 - nr + i)] = red[static_cast<size_t>(i)].size;
    xst[static_cast<size_t>(5 - nr + i)] = red[static_cast<size_t>(i)].x_stride;
  }
  const int nk = static_cast<int>(kept.size());
  for (int i = 0; i < nk; ++i) {
    const Dim& d = kept[static_cast<size_t>(i)];
    xs[static_cast<size_t>(5 - nr - nk + i)] = d.size;
    xst[static_cast<size_t>(5 - nr - nk + i)] = d.x_stride;
    os[static_cast<size_t>(4 - nk + i)] = d.size;
    ost[static_cast<size_t>(4 - nk + i)] = d.out_stride;
  }
  KILN_ASSIGN(const Tensor xv,
              Tensor::make(x.device_ptr(), x.buffer(), x.dtype(), xs, xst, x.offset()));
  KILN_ASSIGN(Tensor ov,
              Tensor::make(out.device_ptr(), out.buffer(), out.dtype(), os, ost, out.offset()));
  // PyTorch clamps var's divisor at zero (a correction past the count gives inf or NaN, never a
  // negative variance).
  const float divisor =
      static_cast<float>(op == ReduceOp::Mean ? n : std::max<int64_t>(n - o.correction, 0));
  const bool gpu = !rt.device().lane_units;
  // A long axis with few outputs: two passes, so that every thread (or multiprocessor) takes a
  // part. The axis is cut into `split` chunks (a divisor of its length, each of 4096 elements
  // or more); the first pass reduces each chunk into a partial (f32 for floats, i64 for
  // integer sums and products), the second the partials of each output.
  const bool assoc = op == ReduceOp::Sum || op == ReduceOp::Mean || op == ReduceOp::Max ||
                     op == ReduceOp::Min || op == ReduceOp::Prod;
  int64_t split = 0;
  if (assoc && nr == 1 && nk <= 3 && outputs <= 16 && n >= (int64_t{1} << 16))
    for (int64_t c = 256; c >= 8 && !split; --c)
      if (n % c == 0 && n / c >= 4096) split = c;
  if (split) {
    const bool minmax = op == ReduceOp::Max || op == ReduceOp::Min;
    const ElemType ptype = minmax                    ? x.dtype()
                           : ir::is_float(x.dtype()) ? ElemType::F32
                                                     : ElemType::I64;
    const int64_t chunk = n / split;
    // x as [kept..., split, chunk] and the partials as a contiguous [kept..., split].
    std::vector<int64_t> x1s(5, 1), x1st(5, 0), ps(5, 1), pst(5, 0);
    x1s[4] = chunk;
    x1st[4] = red[0].x_stride;
    x1s[3] = split;
    x1st[3] = red[0].x_stride * chunk;
    ps[4] = split;
    pst[4] = 1;
    int64_t inner = split;
    for (int i = nk - 1; i >= 0; --i) {
      const Dim& d = kept[static_cast<size_t>(i)];
      x1s[static_cast<size_t>(3 - nk + i)] = d.size;
      x1st[static_cast<size_t>(3 - nk + i)] = d.x_stride;
      ps[static_cast<size_t>(4 - nk + i)] = d.size;
      pst[static_cast<size_t>(4 - nk + i)] = inner;
      inner *= d.size;
    }
    KILN_ASSIGN(Tensor part, rt.empty(ptype, {outputs * split}));
    KILN_ASSIGN(const Tensor x1,
                Tensor::make(x.device_ptr(), x.buffer(), x.dtype(), x1s, x1st, x.offset()));
    // The partials as the first pass's output (rank 4: [kept..., split]) and the second's input.
    const std::vector<int64_t> p4s(ps.begin() + 1, ps.end()), p4st(pst.begin() + 1, pst.end());
    KILN_ASSIGN(Tensor p_out, Tensor::make(part.device_ptr(), part.buffer(), ptype, p4s, p4st, 0));
    KILN_ASSIGN(const Tensor p_in,
                Tensor::make(part.device_ptr(), part.buffer(), ptype, ps, pst, 0));
    const int units = gpu ? 256 : 16;
    KILN_ASSIGN(const Kernel k, rt.kernel("reduce_rows"));
    const ReduceOp first = op == ReduceOp::Mean ? ReduceOp::Sum : op;
    KILN_TRY(rt.launch(k, Dim3(static_cast<uint32_t>(outputs * split)),
                       Dim3(static_cast<uint32_t>(units)), x1.as_read_only(), p_out, 0.0f, first, 1,
                       nk + 1, units));
    return rt.launch(k, Dim3(static_cast<uint32_t>(outputs)), Dim3(static_cast<uint32_t>(units)),
                     p_in.as_read_only(), ov, divisor, op == ReduceOp::Mean ? op : first, 1, nk,
                     units);
  }
  // The reduced elements one after the other (the innermost reduced stride 1) and more of them
  // than a few vectors: a cube per output. Otherwise, with enough outputs, a unit per output.
  const bool close = red.back().x_stride == 1 || red.back().size == 1;
  const bool rows = (close && n >= 64) || outputs < 256 || nk == 0;
  if (rows) {
    const int units = gpu ? (n >= 4096 ? 256 : 64) : 16;
    KILN_ASSIGN(const Kernel k, rt.kernel("reduce_rows"));
    return rt.launch(k, Dim3(static_cast<uint32_t>(outputs)), Dim3(static_cast<uint32_t>(units)),
                     xv.as_read_only(), ov, divisor, op, nr, nk, units);
  }
  // On the CPU a cube takes 1024 consecutive outputs (4 KiB runs of each reduced row).
  const int units = gpu ? 256 : 1024;
  KILN_ASSIGN(const Kernel k, rt.kernel("reduce_cols"));
  return rt.launch(k, Dim3(static_cast<uint32_t>((outputs + units - 1) / units)),
                   Dim3(static_cast<uint32_t>(units)), xv.as_read_only(), ov, divisor, op, nr, nk,
                   !gpu, units);
}

}  // namespace kiln::lib

// `kiln run reduce_sum --shape x=AxBxC --set axis=D` (and reduce_mean, _max, _min, _prod,
// _argmax, _argmin, _var): kiln::lib::reduce on random inputs against a double reference.
// --set axis= (negative from the end), axis2= for a second axis (99: none), all=1 for every
// axis, keepdim=1, correction= (var).
namespace {

using kiln::kernels::RunData;
using kiln::lib::ReduceOptions;

ReduceOptions run_options(const RunData& d) {
  ReduceOptions o;
  if (d.scalar("all") == 0) {
    o.axes.push_back(static_cast<int>(d.scalar("axis")));
    const auto a2 = static_cast<int>(d.scalar("axis2"));
    if (a2 != 99) o.axes.push_back(a2);
  }
  o.keepdim = d.scalar("keepdim") != 0;
  if (d.scalars.count("correction")) o.correction = static_cast<int64_t>(d.scalar("correction"));
  return o;
}

std::vector<int64_t> run_out_shape(const RunData& d) {
  auto s = kiln::lib::reduce_output_shape(d.shape("x"), run_options(d));
  return s ? *s : std::vector<int64_t>{0};  // the entry point reports the error
}

void reduce_reference(RunData& d, ReduceOp op) {
  const ReduceOptions o = run_options(d);
  const auto& shape = d.shape("x");
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> mask(shape.size(), o.axes.empty());
  for (int a : o.axes) {
    const int ax = a < 0 ? a + rank : a;
    if (ax < 0 || ax >= rank) return;
    mask[static_cast<size_t>(ax)] = true;
  }
  auto& out = d["out"];
  std::vector<std::vector<double>> groups(out.size());
  const auto& x = d["x"];
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t e = 0; e < x.size(); ++e) {
    size_t oi = 0;
    for (size_t i = 0; i < shape.size(); ++i)
      if (!mask[i]) oi = oi * static_cast<size_t>(shape[i]) + static_cast<size_t>(idx[i]);
    if (oi < groups.size()) groups[oi].push_back(x[e]);  // in row-major order of the reduced axes
    for (size_t i = shape.size(); i-- > 0;) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& v = groups[g];
    const double n = static_cast<double>(v.size());
    double r = 0;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean:
        for (double a : v) r += a;
        if (op == ReduceOp::Mean) r /= n;
        break;
      case ReduceOp::Prod:
        r = 1;
        for (double a : v) r *= a;
        break;
      case ReduceOp::Max:
      case ReduceOp::Min: {
        r = op == ReduceOp::Max ? -INFINITY : INFINITY;
        for (double a : v)
          r = std::isnan(a) || std::isnan(r) ? NAN
              : op == ReduceOp::Max          ? std::max(r, a)
                                             : std::min(r, a);
        break;
      }
      case ReduceOp::ArgMax:
      case ReduceOp::ArgMin: {
        size_t best = 0;
        for (size_t i = 1; i < v.size(); ++i) {
          if (std::isnan(v[best])) break;
          if (std::isnan(v[i]) || (op == ReduceOp::ArgMax ? v[i] > v[best] : v[i] < v[best]))
            best = i;
        }
        r = static_cast<double>(best);
        break;
      }
      case ReduceOp::Var: {
        double mean = 0, sq = 0;
        for (double a : v) mean += a;
        mean /= n;
        for (double a : v) sq += (a - mean) * (a - mean);
        r = sq / std::max(n - static_cast<double>(o.correction), 0.0);
        break;
      }
    }
    out[g] = d.round("out", r);
  }
}

using kiln::ir::ElemType;
using TensorMap = std::map<std::string, kiln::Tensor, std::less<>>;

kiln::kernels::RunRecipe& reduce_recipe(const char* name, ReduceOp op, const char* what) {
  kiln::kernels::HostOp h;
  h.description = fmt::format("{} over any axes: kiln::lib::reduce", what);
  h.kernels = {"reduce_rows", "reduce_cols"};
  h.tensors = {{"x", true}, {"out", false}};
  for (ElemType t : {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32}) {
    auto out = kiln::lib::reduce_output_type(op, t);
    if (out) h.variants.push_back({t, *out});
  }
  h.scalars = {{"axis", ElemType::I32},
               {"axis2", ElemType::I32},
               {"all", ElemType::Bool},
               {"keepdim", ElemType::Bool}};
  if (op == ReduceOp::Var) h.scalars.push_back({"correction", ElemType::I32});
  h.call = [op](kiln::Runtime& rt, TensorMap& t, const RunData& d) {
    return kiln::lib::reduce(rt, op, t.at("x"), t.at("out"), run_options(d));
  };
  auto& r = kiln::kernels::run_recipe(name)
                .host(std::move(h))
                .shape("x", {24, 50, 37})
                .shape("out", run_out_shape)
                .scalar("axis", -1)
                .scalar("axis2", 99)
                .scalar("all", 0)
                .scalar("keepdim", 0)
                .reference([op](RunData& d) { reduce_reference(d, op); })
                .tolerance([op](const RunData& d, std::string_view) -> std::pair<double, double> {
                  if (op == ReduceOp::Max || op == ReduceOp::Min || op == ReduceOp::ArgMax ||
                      op == ReduceOp::ArgMin)
                    return {0, 0};
                  const double n = static_cast<double>(
                      std::max<int64_t>(1, d.numel("x") / std::max<int64_t>(1, d.numel("out"))));
                  switch (d.dtype("out")) {
                    case ElemType::F16:
                      return {2e-3, 2e-3};
                    case ElemType::BF16:
                      return {1.6e-2, 1e-2};
                    case ElemType::I64:
                    case ElemType::I32:
                      return {0, 0};
                    default:
                      return {1e-6 * std::sqrt(n) + 1e-6, 1e-7 * n + 1e-6};
                  }
                });
  if (op == ReduceOp::Var) r.scalar("correction", 1);
  if (op == ReduceOp::Prod) r.values("x", 0.5, 1.5).shape("x", {24, 50, 7});
  return r;
}

[[maybe_unused]] const bool kRecipes = [] {
  reduce_recipe("reduce_sum", ReduceOp::Sum, "sum");
  reduce_recipe("reduce_mean", ReduceOp::Mean, "mean");
  reduce_recipe("reduce_max", ReduceOp::Max, "maximum");
  reduce_recipe("reduce_min", ReduceOp::Min, "minimum");
  reduce_recipe("reduce_prod", ReduceOp::Prod, "product");
  reduce_recipe("reduce_argmax", ReduceOp::ArgMax, "position of the maximum");
  reduce_recipe("reduce_argmin", ReduceOp::ArgMin, "position of the minimum");
  reduce_recipe("reduce_var", ReduceOp::Var, "variance");
  return true;
}();

}  // namespace
