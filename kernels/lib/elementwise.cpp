// The kernels of kiln::lib::map, unary, binary and copy (elementwise.h).
// - map_chain: a unit per element of out; the chain is a comptime value, so each chain
//   compiles into straight-line code (one pass over memory for the whole chain). When every
//   view is contiguous with out's shape (`flat`) the element's index is its offset in each;
//   otherwise it is decomposed over out's five dimensions (broadcast dimensions have stride 0).
// - copy_bits: the same for a copy of one type to itself, moving the element's bits (so one
//   kernel per width serves every type).
#include "kernels/lib/elementwise.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/common.h"
#include "kernels/run.h"

using namespace kiln::dsl;
using LibArg = kiln::lib::Arg;
using kiln::lib::Op;

namespace kiln::lib {
KILN_COMPTIME_ENUM(Op, None, Neg, Abs, Square, Recip, Sqrt, Rsqrt, Exp, Exp2, Log, Log2, Sin, Cos,
                   Tanh, Sigmoid, Relu, Gelu, Silu, Floor, Ceil, Round, Trunc, Add, Sub, Mul, Div,
                   Max, Min, Pow, Eq, Ne, Lt, Le, Gt, Ge, RSub, RDiv)
KILN_COMPTIME_ENUM(Arg, None, X, Y, Z, S0, S1, S2, S3)

// The chain as a comptime value: up to eight steps.
struct Chain {
  Op op0 = Op::None, op1 = Op::None, op2 = Op::None, op3 = Op::None, op4 = Op::None, op5 = Op::None,
     op6 = Op::None, op7 = Op::None;
  Arg arg0 = Arg::None, arg1 = Arg::None, arg2 = Arg::None, arg3 = Arg::None, arg4 = Arg::None,
      arg5 = Arg::None, arg6 = Arg::None, arg7 = Arg::None;
  Step step(int i) const {
    const Op ops[] = {op0, op1, op2, op3, op4, op5, op6, op7};
    const Arg args[] = {arg0, arg1, arg2, arg3, arg4, arg5, arg6, arg7};
    return {ops[i], args[i]};
  }
};
KILN_COMPTIME_STRUCT(Chain, op0, op1, op2, op3, op4, op5, op6, op7, arg0, arg1, arg2, arg3, arg4,
                     arg5, arg6, arg7)
}  // namespace kiln::lib

using kiln::lib::Chain;

namespace {

bool is_binary(Op op) {
  return op >= Op::Add;
}

template <class In_, class Out_>
struct MapPair {
  using In = In_;
  using Out = Out_;
};

using kiln::lib::detail::convert;

// NaN if either is (PyTorch's maximum and minimum); IR max and min return the number.
f32 nan_max(const f32& a, const f32& b, bool is_max) {
  f32 r = is_max ? max(a, b) : min(a, b);
  r = select(is_nan(a), a, r);
  return select(is_nan(b), b, r);
}

f32 apply(Op op, const f32& v, const f32& o) {
  const f32 one = splat<f32>(1.0f, 1), zero = splat<f32>(0.0f, 1);
  auto flag = [&](const Val<bool>& c) { return select(c, one, zero); };
  switch (op) {
    case Op::None:
      return v;
    case Op::Neg:
      return -v;
    case Op::Abs:
      return abs(v);
    case Op::Square:
      return v * v;
    case Op::Recip:
      return 1.0f / v;
    case Op::Sqrt:
      return sqrt(v);
    case Op::Rsqrt:
      return 1.0f / sqrt(v);
    case Op::Exp:
      return exp(v);
    case Op::Exp2:
      return exp2(v);
    case Op::Log:
      return log(v);
    case Op::Log2:
      return log2(v);
    case Op::Sin:
      return sin(v);
    case Op::Cos:
      return cos(v);
    case Op::Tanh:
      return tanh(v);
    case Op::Sigmoid:
      return 1.0f / (1.0f + exp(-v));
    case Op::Relu:
      return select(!(v <= 0.0f), v, zero);  // NaN stays NaN
    case Op::Gelu:
      return 0.5f * v * (1.0f + tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    case Op::Silu:
      return v / (1.0f + exp(-v));
    case Op::Floor:
      return floor(v);
    case Op::Ceil:
      return ceil(v);
    case Op::Round:
      return round(v);
    case Op::Trunc:
      return trunc(v);
    case Op::Add:
      return v + o;
    case Op::Sub:
      return v - o;
    case Op::Mul:
      return v * o;
    case Op::Div:
      return v / o;
    case Op::Max:
      return nan_max(v, o, true);
    case Op::Min:
      return nan_max(v, o, false);
    case Op::Pow:
      return pow(v, o);
    case Op::Eq:
      return flag(v == o);
    case Op::Ne:
      return flag(v != o);
    case Op::Lt:
      return flag(v < o);
    case Op::Le:
      return flag(v <= o);
    case Op::Gt:
      return flag(v > o);
    case Op::Ge:
      return flag(v >= o);
    case Op::RSub:
      return o - v;
    case Op::RDiv:
      return o / v;
  }
  return v;
}

// The offset of out's element i in a [D0..D4] view `t` of out's shape (broadcast: stride 0).
template <class T, class O>
Val<uint32_t> offset(const Tensor<T>& t, const Tensor<O>& out, const Val<uint32_t>& i) {
  u32 rest = i;
  u32 off = 0u;
  for (int d = 4; d >= 0; --d) {
    u32 idx = d > 0 ? rest % out.shape(d) : rest;
    if (d > 0) rest = rest / out.shape(d);
    off = off + idx * t.stride(d);
  }
  return off;
}

template <class P>
void map_chain(Tensor<const typename P::In> x, Tensor<const typename P::In> y,
               Tensor<const typename P::In> z, Tensor<typename P::Out> out, f32 s0, f32 s1, f32 s2,
               f32 s3, Chain chain, bool flat) {
  using Out = typename P::Out;
  u32 i = absolute_pos();
  u32 n = out.shape(0) * out.shape(1) * out.shape(2) * out.shape(3) * out.shape(4);
  if_(i < n, [&] {
    auto at = [&](const auto& t) { return flat ? i : offset(t, out, i); };
    f32 xv = convert<f32>(x[at(x)]);
    std::optional<f32> yv, zv;
    f32 v = xv;
    for (int s = 0; s < kiln::lib::kMaxSteps; ++s) {
      const kiln::lib::Step st = chain.step(s);
      if (st.op == Op::None) continue;
      f32 o = v;
      if (is_binary(st.op)) {
        switch (st.arg) {
          case LibArg::X:
            o = xv;
            break;
          case LibArg::Y:
            if (!yv) yv = convert<f32>(y[at(y)]);
            o = *yv;
            break;
          case LibArg::Z:
            if (!zv) zv = convert<f32>(z[at(z)]);
            o = *zv;
            break;
          case LibArg::S0:
            o = s0;
            break;
          case LibArg::S1:
            o = s1;
            break;
          case LibArg::S2:
            o = s2;
            break;
          default:
            o = s3;
            break;
        }
      }
      v = apply(st.op, v, o);
    }
    out[at(out)] = convert<Out>(v);
  });
}
KILN_KERNEL_GENERIC(
    map_chain,
    "x: rank=5, y: rank=5, z: rank=5, out: rank=5, s0, s1, s2, s3, chain = {op0=None, op1=None, "
    "op2=None, op3=None, op4=None, op5=None, op6=None, op7=None, arg0=None, arg1=None, arg2=None, "
    "arg3=None, arg4=None, arg5=None, arg6=None, arg7=None}, "
    "flat = false",
    MapPair<f32, f32>, MapPair<f16, f16>, MapPair<bf16, bf16>, MapPair<f32, f16>,
    MapPair<f32, bf16>, MapPair<f16, f32>, MapPair<bf16, f32>, MapPair<f16, bf16>,
    MapPair<bf16, f16>)
    .cube_dim(256)
    .describe("kiln::lib::map: a fused chain of elementwise operations, broadcast");

template <class T>
void copy_bits(Tensor<const T> src, Tensor<T> dst, bool flat) {
  u32 i = absolute_pos();
  u32 n = dst.shape(0) * dst.shape(1) * dst.shape(2) * dst.shape(3) * dst.shape(4);
  if_(i < n, [&] {
    if (flat) {
      dst[i] = src[i];
    } else {
      dst[offset(dst, dst, i)] = src[offset(src, dst, i)];
    }
  });
}
KILN_KERNEL_GENERIC(copy_bits, "src: rank=5, dst: rank=5, flat = false", u8, u16, u32, u64)
    .cube_dim(256)
    .describe("kiln::lib::copy of a type to itself, bit for bit");

template <class Src_, class Bits_>
struct CastPair {
  using Src = Src_;
  using Bits = Bits_;
};

// v converted to D (the IR's cast: floats round to nearest even and saturate to integers, NaN
// to 0; integers wrap), as the bits of a word of D's width.
template <class D, class Bits, class V>
Bits cast_bits(const V& v) {
  if constexpr (std::is_same_v<D, Bool>) {
    return select(cast<Bool>(v), splat<Bits>(1, 1), splat<Bits>(0, 1));
  } else {
    return bitcast<Bits>(convert<D>(v));
  }
}

// The destination types of each width, in the order of cast_copy's `to`; cast_index gives a
// type's place on the host side from the same lists.
template <class... Ts>
struct CastTypes {};
template <size_t Bytes>
struct CastTargets;
template <>
struct CastTargets<1> {
  using type = CastTypes<Bool, i8, u8, f8e4m3, f8e5m2>;
};
template <>
struct CastTargets<2> {
  using type = CastTypes<i16, u16, f16, bf16>;
};
template <>
struct CastTargets<4> {
  using type = CastTypes<i32, u32, f32>;
};
template <>
struct CastTargets<8> {
  using type = CastTypes<i64, u64, f64>;
};

template <class Bits, class V, class T, class... Rest>
Bits cast_pick(int to, const V& x, CastTypes<T, Rest...>) {
  if constexpr (sizeof...(Rest) > 0)
    if (to > 0) return cast_pick<Bits>(to - 1, x, CastTypes<Rest...>{});
  return cast_bits<T, Bits>(x);
}

template <class Bits, class V>
Bits cast_to(int to, const V& x) {
  return cast_pick<Bits>(to, x, typename CastTargets<sizeof(host_of_t<Bits>)>::type{});
}

// A type's place in its width's list, or -1.
template <class... Ts>
int cast_place(kiln::ir::ElemType t, CastTypes<Ts...>) {
  int place = -1, i = 0;
  ((place = ElemOf<host_of_t<Ts>>::value == t ? i : place, ++i), ...);
  return place;
}

// `to` picks the destination type among those of dst's width (cast_to).
template <class P>
void cast_copy(Tensor<const typename P::Src> src, Tensor<typename P::Bits> dst, int to, bool flat) {
  using Bits = typename P::Bits;
  u32 i = absolute_pos();
  u32 n = dst.shape(0) * dst.shape(1) * dst.shape(2) * dst.shape(3) * dst.shape(4);
  if_(i < n, [&] {
    typename P::Src x = src[flat ? i : offset(src, dst, i)];
    Bits b = cast_to<Bits>(to, x);
    dst[flat ? i : offset(dst, dst, i)] = b;
  });
}

#define KILN_CAST_FROM(T) CastPair<T, u8>, CastPair<T, u16>, CastPair<T, u32>, CastPair<T, u64>
KILN_KERNEL_GENERIC(cast_copy, "src: rank=5, dst: rank=5, to = 0 in 0..4, flat = false",
                    KILN_CAST_FROM(Bool), KILN_CAST_FROM(i8), KILN_CAST_FROM(i16),
                    KILN_CAST_FROM(i32), KILN_CAST_FROM(i64), KILN_CAST_FROM(u8),
                    KILN_CAST_FROM(u16), KILN_CAST_FROM(u32), KILN_CAST_FROM(u64),
                    KILN_CAST_FROM(f16), KILN_CAST_FROM(bf16), KILN_CAST_FROM(f32),
                    KILN_CAST_FROM(f64), KILN_CAST_FROM(f8e4m3), KILN_CAST_FROM(f8e5m2))
    .cube_dim(256)
    .describe("kiln::lib::copy between two types (any pair), by the IR's cast");

}  // namespace

namespace kiln::lib {

namespace {

using ir::ElemType;

using detail::bad;

using detail::dims;

// `t` broadcast to `shape` (rank 5, padded in front), as a view of type `as`.
Result<Tensor> as5(const char* op, const char* name, const Tensor& t,
                   std::span<const int64_t> shape, ElemType as) {
  const int r = t.rank(), n = static_cast<int>(shape.size());
  if (r > n)
    return bad(op, fmt::format("'{}' is {}; it has more dimensions than the result {}", name,
                               t.describe(), dims(shape)));
  std::vector<int64_t> s(5, 1), st(5, 0);
  for (int d = 0; d < n; ++d) s[static_cast<size_t>(5 - n + d)] = shape[static_cast<size_t>(d)];
  for (int d = 0; d < r; ++d) {
    const int64_t want = shape[static_cast<size_t>(n - r + d)];
    if (t.shape(d) != want && t.shape(d) != 1)
      return bad(op, fmt::format("'{}' is {}, which does not broadcast to {} (dimension {} is "
                                 "{}: it must be {} or 1)",
                                 name, t.describe(), dims(shape), d, t.shape(d), want));
    st[static_cast<size_t>(5 - r + d)] = t.shape(d) == 1 ? 0 : t.stride(d);
  }
  return Tensor::make(t.device_ptr(), t.buffer(), as, s, st, t.offset());
}

Status check_views(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> ts,
                   const Tensor& out) {
  for (const auto& [t, name] : ts) {
    if (!t) continue;
    if (!t->valid()) return bad(op, fmt::format("the tensor '{}' is empty (no buffer)", name));
    if (t->device() != out.device())
      return bad(op, fmt::format("the tensor '{}' is on another device than the result", name));
    if (t->rank() > 5) return bad(op, fmt::format("'{}' is {}; rank up to 5", name, t->describe()));
    if (!detail::fits_u32(*t))
      return bad(op, fmt::format("'{}' ({}) spans more than 2^32 elements; split it", name,
                                 t->describe()));
  }
  if (out.read_only()) return bad(op, "the result tensor is read-only");
  return {};
}

bool is_float3(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F16 || t == ElemType::BF16;
}

// Contiguous with `shape` (so that element i is at offset i).
bool flat_view(const Tensor& t, std::span<const int64_t> shape) {
  return std::equal(shape.begin(), shape.end(), t.shape().begin(), t.shape().end()) &&
         t.is_contiguous();
}

uint32_t cubes_for(int64_t n) {
  return static_cast<uint32_t>((n + 255) / 256);
}

// cast_copy's `to` for a destination type (its place among the types of its width).
int cast_index(ElemType t) {
  switch (ir::elem_bytes(t)) {
    case 1:
      return cast_place(t, CastTargets<1>::type{});
    case 2:
      return cast_place(t, CastTargets<2>::type{});
    case 4:
      return cast_place(t, CastTargets<4>::type{});
    default:
      return cast_place(t, CastTargets<8>::type{});
  }
}

}  // namespace

Result<std::vector<int64_t>> broadcast_shape(std::span<const int64_t> a,
                                             std::span<const int64_t> b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> r(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t y = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (x != y && x != 1 && y != 1)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("shapes {} and {} do not broadcast: dimension {} is {} in one and "
                               "{} in the other",
                               dims(a), dims(b), i, x, y));
    r[i] = x == 1 ? y : x;
  }
  return r;
}

Status map(Runtime& rt, std::span<const Step> chain, const Tensor& x, Tensor& out,
           const MapInputs& in) {
  const char* op = "map";
  KILN_TRY(check_views(op, {{&x, "x"}, {in.y, "y"}, {in.z, "z"}, {&out, "out"}}, out));
  if (chain.size() > static_cast<size_t>(kMaxSteps))
    return bad(op, fmt::format("the chain has {} steps; at most {}", chain.size(), kMaxSteps));
  if (in.scalars.size() > 4)
    return bad(op, fmt::format("{} scalars given; at most 4 (S0 to S3)", in.scalars.size()));
  const ElemType t = x.dtype();
  if (!is_float3(t) || !is_float3(out.dtype()))
    return bad(op, fmt::format("x is {} and out {}; map computes on f32, f16 and bf16",
                               x.describe(), out.describe()));
  for (const auto& [v, name] : {std::pair{in.y, "y"}, std::pair{in.z, "z"}})
    if (v && v->dtype() != t)
      return bad(op, fmt::format("'{}' is {}; it must hold x's type ({})", name, v->describe(),
                                 ir::elem_name(t)));
  Chain c;
  Op* ops[] = {&c.op0, &c.op1, &c.op2, &c.op3, &c.op4, &c.op5, &c.op6, &c.op7};
  Arg* args[] = {&c.arg0, &c.arg1, &c.arg2, &c.arg3, &c.arg4, &c.arg5, &c.arg6, &c.arg7};
  for (size_t i = 0; i < chain.size(); ++i) {
    const Step& s = chain[i];
    const bool binary = s.op >= Op::Add;
    if (binary == (s.arg == Arg::None))
      return bad(op, fmt::format("step {}: {}", i,
                                 binary ? "a binary operation needs an operand (Arg)"
                                        : "a unary operation takes no operand"));
    if ((s.arg == Arg::Y && !in.y) || (s.arg == Arg::Z && !in.z))
      return bad(
          op, fmt::format("step {} reads {}, which was not given", i, s.arg == Arg::Y ? "y" : "z"));
    if (s.arg >= Arg::S0 && static_cast<size_t>(static_cast<int>(s.arg) -
                                                static_cast<int>(Arg::S0)) >= in.scalars.size())
      return bad(
          op, fmt::format("step {} reads scalar S{}, but {} scalars were given", i,
                          static_cast<int>(s.arg) - static_cast<int>(Arg::S0), in.scalars.size()));
    *ops[i] = s.op;
    *args[i] = s.arg;
  }
  const auto shape = out.shape();
  KILN_ASSIGN(const Tensor x5, as5(op, "x", x, shape, t));
  KILN_ASSIGN(const Tensor y5, as5(op, "y", in.y ? *in.y : x, shape, t));
  KILN_ASSIGN(const Tensor z5, as5(op, "z", in.z ? *in.z : x, shape, t));
  KILN_ASSIGN(Tensor o5, as5(op, "out", out, shape, out.dtype()));
  const int64_t n = out.numel();
  if (n == 0) return {};
  if (n >= (int64_t{1} << 32)) return bad(op, "out has 2^32 elements or more; split it");
  const bool flat = flat_view(x, shape) && (!in.y || flat_view(*in.y, shape)) &&
                    (!in.z || flat_view(*in.z, shape)) && flat_view(out, shape);
  float s[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < in.scalars.size(); ++i) s[i] = in.scalars[i];
  KILN_ASSIGN(const Kernel k, rt.kernel("map_chain"));
  return rt.launch(k, Dim3(cubes_for(n)), Dim3(256), x5.as_read_only(), y5.as_read_only(),
                   z5.as_read_only(), o5, s[0], s[1], s[2], s[3], c, flat);
}

Status unary(Runtime& rt, Op op, const Tensor& x, Tensor& out) {
  if (op == Op::None || op >= Op::Add)
    return bad("unary", "the operation is not a unary one (see Op in elementwise.h)");
  return map(rt, {Step{op}}, x, out);
}

Status binary(Runtime& rt, Op op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (op < Op::Add) return bad("binary", "the operation is not a binary one (see Op)");
  if (a.valid() && b.valid()) {
    KILN_ASSIGN(const auto shape, broadcast_shape(a.shape(), b.shape()));
    if (!std::equal(shape.begin(), shape.end(), out.shape().begin(), out.shape().end()))
      return bad("binary", fmt::format("out is {}; a {} and b {} broadcast to {}", out.describe(),
                                       dims(a.shape()), dims(b.shape()), dims(shape)));
  }
  return map(rt, {Step{op, Arg::Y}}, a, out, {.y = &b, .z = nullptr, .scalars = {}});
}

Status copy(Runtime& rt, const Tensor& src, Tensor& dst) {
  const char* op = "copy";
  KILN_TRY(check_views(op, {{&src, "src"}, {&dst, "dst"}}, dst));
  const auto shape = dst.shape();
  const int64_t n = dst.numel();
  const int bytes = ir::elem_bytes(dst.dtype());
  const ElemType bits = bytes == 1   ? ElemType::U8
                        : bytes == 2 ? ElemType::U16
                        : bytes == 4 ? ElemType::U32
                                     : ElemType::U64;
  const bool same = src.dtype() == dst.dtype();
  // The same type moves bits (one kernel per width); another goes through the IR's cast.
  KILN_ASSIGN(const Tensor s5, as5(op, "src", src, shape, same ? bits : src.dtype()));
  KILN_ASSIGN(Tensor d5, as5(op, "dst", dst, shape, bits));
  if (n == 0) return {};
  if (n >= (int64_t{1} << 32)) return bad(op, "dst has 2^32 elements or more; split it");
  const bool flat = flat_view(src, shape) && flat_view(dst, shape);
  if (same) {
    KILN_ASSIGN(const Kernel k, rt.kernel("copy_bits"));
    return rt.launch(k, Dim3(cubes_for(n)), Dim3(256), s5.as_read_only(), d5, flat);
  }
  KILN_ASSIGN(const Kernel k, rt.kernel("cast_copy"));
  return rt.launch(k, Dim3(cubes_for(n)), Dim3(256), s5.as_read_only(), d5, cast_index(dst.dtype()),
                   flat);
}

}  // namespace kiln::lib

// `kiln run elementwise --set chain=N` runs one of a few chains through kiln::lib::map against a
// double reference (x, y and z broadcast: --shape y=1x7 and so on); `kiln run copy` copies x (or
// its transpose, --set transpose=1) into a contiguous tensor, any type (--dtype src=f16
// --dtype dst=f32 converts).
namespace {

using kiln::ir::ElemType;
using kiln::kernels::RunData;
using kiln::lib::Arg;
using kiln::lib::Op;
using kiln::lib::Step;
using TensorMap = std::map<std::string, kiln::Tensor, std::less<>>;

struct Preset {
  const char* text;
  std::vector<Step> steps;
};
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"relu(exp(x * s0 + s1) * x)",
       {{Op::Mul, Arg::S0}, {Op::Add, Arg::S1}, {Op::Exp}, {Op::Mul, Arg::X}, {Op::Relu}}},
      {"x + y", {{Op::Add, Arg::Y}}},
      {"gelu(x) * y - z", {{Op::Gelu}, {Op::Mul, Arg::Y}, {Op::Sub, Arg::Z}}},
      {"min((x >= y) * x, z)", {{Op::Ge, Arg::Y}, {Op::Mul, Arg::X}, {Op::Min, Arg::Z}}},
      {"trunc(tanh(sqrt(|x|) ^ s0 + x) * s1)",
       {{Op::Abs},
        {Op::Sqrt},
        {Op::Pow, Arg::S0},
        {Op::Add, Arg::X},
        {Op::Tanh},
        {Op::Mul, Arg::S1},
        {Op::Trunc}}},
      {"log(|sigmoid(x) * s0 + y| + s1)",
       {{Op::Sigmoid},
        {Op::Mul, Arg::S0},
        {Op::Add, Arg::Y},
        {Op::Abs},
        {Op::Add, Arg::S1},
        {Op::Log}}},
  };
  return p;
}

double apply_ref(Op op, double v, double o) {
  switch (op) {
    case Op::None:
      return v;
    case Op::Neg:
      return -v;
    case Op::Abs:
      return std::fabs(v);
    case Op::Square:
      return v * v;
    case Op::Recip:
      return 1 / v;
    case Op::Sqrt:
      return std::sqrt(v);
    case Op::Rsqrt:
      return 1 / std::sqrt(v);
    case Op::Exp:
      return std::exp(v);
    case Op::Exp2:
      return std::exp2(v);
    case Op::Log:
      return std::log(v);
    case Op::Log2:
      return std::log2(v);
    case Op::Sin:
      return std::sin(v);
    case Op::Cos:
      return std::cos(v);
    case Op::Tanh:
      return std::tanh(v);
    case Op::Sigmoid:
      return 1 / (1 + std::exp(-v));
    case Op::Relu:
      return std::isnan(v) || v > 0 ? v : 0.0;
    case Op::Gelu:
      return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case Op::Silu:
      return v / (1 + std::exp(-v));
    case Op::Floor:
      return std::floor(v);
    case Op::Ceil:
      return std::ceil(v);
    case Op::Round:
      return std::round(v);
    case Op::Trunc:
      return std::trunc(v);
    case Op::Add:
      return v + o;
    case Op::Sub:
      return v - o;
    case Op::Mul:
      return v * o;
    case Op::Div:
      return v / o;
    case Op::Max:
      return std::isnan(v) || std::isnan(o) ? NAN : std::max(v, o);
    case Op::Min:
      return std::isnan(v) || std::isnan(o) ? NAN : std::min(v, o);
    case Op::Pow:
      return std::pow(v, o);
    case Op::Eq:
      return v == o;
    case Op::Ne:
      return v != o;
    case Op::Lt:
      return v < o;
    case Op::Le:
      return v <= o;
    case Op::Gt:
      return v > o;
    case Op::Ge:
      return v >= o;
    case Op::RSub:
      return o - v;
    case Op::RDiv:
      return o / v;
  }
  return v;
}

std::vector<int64_t> out_shape(const RunData& d) {
  auto s = kiln::lib::broadcast_shape(d.shape("x"), d.shape("y"));
  if (!s) return {0};
  auto t = kiln::lib::broadcast_shape(*s, d.shape("z"));
  return t ? *t : std::vector<int64_t>{0};
}

// The row-major index in a tensor of shape `s` of the element at `idx` of the broadcast shape.
size_t broadcast_index(const std::vector<int64_t>& s, const std::vector<int64_t>& idx) {
  size_t r = 0;
  const size_t off = idx.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i)
    r = r * static_cast<size_t>(s[i]) + static_cast<size_t>(s[i] == 1 ? 0 : idx[off + i]);
  return r;
}

void map_reference(RunData& d) {
  const auto p = static_cast<size_t>(d.scalar("chain"));
  if (p >= presets().size()) return;
  const auto os = out_shape(d);
  auto& out = d["out"];
  std::vector<int64_t> idx(os.size(), 0);
  const double sc[4] = {d.round("x", d.scalar("s0")), d.round("x", d.scalar("s1")), 0, 0};
  for (size_t e = 0; e < out.size(); ++e) {
    const double x = d["x"][broadcast_index(d.shape("x"), idx)];
    const double y = d["y"][broadcast_index(d.shape("y"), idx)];
    const double z = d["z"][broadcast_index(d.shape("z"), idx)];
    double v = x;
    for (const Step& s : presets()[p].steps) {
      double o = 0;
      switch (s.arg) {
        case Arg::X:
          o = x;
          break;
        case Arg::Y:
          o = y;
          break;
        case Arg::Z:
          o = z;
          break;
        case Arg::S0:
        case Arg::S1:
        case Arg::S2:
        case Arg::S3:
          o = sc[static_cast<int>(s.arg) - static_cast<int>(Arg::S0)];
          break;
        default:
          break;
      }
      // f32 arithmetic: each step's result is an f32 in the kernel.
      v = static_cast<float>(apply_ref(s.op, v, o));
    }
    out[e] = d.round("out", v);
    for (size_t i = os.size(); i-- > 0;) {
      if (++idx[i] < os[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace

KILN_RUN(elementwise)
    .host({.description = "a fused chain of elementwise operations, broadcast: kiln::lib::map",
           .kernels = {"map_chain"},
           .tensors = {{"x", true}, {"y", true}, {"z", true}, {"out", false}},
           .variants = {{ElemType::F32, ElemType::F32, ElemType::F32, ElemType::F32},
                        {ElemType::F16, ElemType::F16, ElemType::F16, ElemType::F16},
                        {ElemType::BF16, ElemType::BF16, ElemType::BF16, ElemType::BF16},
                        {ElemType::F32, ElemType::F32, ElemType::F32, ElemType::F16},
                        {ElemType::BF16, ElemType::BF16, ElemType::BF16, ElemType::F32}},
           .scalars = {{"chain", ElemType::U32}, {"s0", ElemType::F32}, {"s1", ElemType::F32}},
           .call = [](kiln::Runtime& rt, TensorMap& t, const RunData& d) -> kiln::Status {
             const auto p = static_cast<size_t>(d.scalar("chain"));
             if (p >= presets().size())
               return kiln::Error(
                   kiln::ErrorKind::InvalidArgument,
                   fmt::format("elementwise: --set chain={}: 0 to {}", p, presets().size() - 1));
             return kiln::lib::map(rt, presets()[p].steps, t.at("x"), t.at("out"),
                                   {.y = &t.at("y"),
                                    .z = &t.at("z"),
                                    .scalars = {static_cast<float>(d.scalar("s0")),
                                                static_cast<float>(d.scalar("s1"))}});
           }})
    .shape("x", {300, 77})
    .shape("y", {300, 77})
    .shape("z", {300, 77})
    .shape("out", out_shape)
    .scalar("chain", 0)
    .scalar("s0", 0.5)
    .scalar("s1", 1.0)
    .tolerance([](const RunData& d, std::string_view) -> std::pair<double, double> {
      switch (d.dtype("out")) {
        case ElemType::F16:
          return {2e-3, 2e-3};
        case ElemType::BF16:
          return {1.6e-2, 1e-2};
        default:
          return {1e-5, 1e-6};
      }
    })
    .reference(map_reference);

namespace {

// The IR's cast of v (of type `from`) to `to`: floats to integers truncate toward zero,
// saturate and take NaN to 0; integers to narrower integers wrap; to bool, v != 0; to floats,
// rounded to nearest even.
double cast_reference(const RunData& d, double v) {
  using kiln::ir::ElemClass;
  const ElemType from = d.dtype("src"), to = d.dtype("dst");
  const ElemClass c = kiln::ir::elem_class(to);
  if (c == ElemClass::Bool) return v != 0 ? 1 : 0;
  if (c == ElemClass::Float) return d.round("dst", v);
  const int bits = kiln::ir::elem_bits(to);
  const bool sgn = c == ElemClass::Signed;
  const double lo = sgn ? -std::ldexp(1.0, bits - 1) : 0.0;
  const double hi = std::ldexp(1.0, sgn ? bits - 1 : bits) - 1;
  if (kiln::ir::is_float(from)) {
    if (std::isnan(v)) return 0;
    return std::clamp(std::trunc(v), lo, hi);
  }
  // Integer (or bool) to integer: modulo 2^bits (values here are small, exact in double).
  const double m = std::ldexp(1.0, bits);
  double w = std::fmod(v, m);
  if (w < 0) w += m;
  if (sgn && w > hi) w -= m;
  return w;
}

std::vector<int64_t> copy_shape(const RunData& d) {
  auto s = d.shape("src");
  if (d.scalar("transpose") != 0 && s.size() >= 2) std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

}  // namespace

KILN_RUN(copy)
    .host({.description = "a copy of any view into another, converting f32/f16/bf16: "
                          "kiln::lib::copy",
           .kernels = {"copy_bits", "map_chain"},
           .tensors = {{"src", true}, {"dst", false}},
           .variants = {{ElemType::F32, ElemType::F32},   {ElemType::F16, ElemType::F16},
                        {ElemType::BF16, ElemType::BF16}, {ElemType::F64, ElemType::F64},
                        {ElemType::I32, ElemType::I32},   {ElemType::I64, ElemType::I64},
                        {ElemType::U8, ElemType::U8},     {ElemType::F32, ElemType::F16},
                        {ElemType::F16, ElemType::F32},   {ElemType::F32, ElemType::BF16},
                        {ElemType::BF16, ElemType::F32},  {ElemType::F16, ElemType::BF16},
                        {ElemType::F32, ElemType::I32},   {ElemType::I32, ElemType::F32},
                        {ElemType::F32, ElemType::U8},    {ElemType::I32, ElemType::I8},
                        {ElemType::I64, ElemType::F16},   {ElemType::F64, ElemType::F8E4M3},
                        {ElemType::U16, ElemType::I64},   {ElemType::F32, ElemType::Bool},
                        {ElemType::Bool, ElemType::F32},  {ElemType::F16, ElemType::U32}},
           .scalars = {{"transpose", ElemType::Bool}},
           .call = [](kiln::Runtime& rt, TensorMap& t, const RunData& d) -> kiln::Status {
             kiln::Tensor src = t.at("src");
             if (d.scalar("transpose") != 0 && src.rank() >= 2) {
               KILN_ASSIGN(src, src.transpose(src.rank() - 2, src.rank() - 1));
             }
             return kiln::lib::copy(rt, src, t.at("dst"));
           }})
    .shape("src", {3, 257, 129})
    .shape("dst", copy_shape)
    .values("src", -300, 300)
    .scalar("transpose", 1)
    .tolerance(0, 0)
    .reference([](RunData& d) {
      const auto& s = d.shape("src");
      const bool tr = d.scalar("transpose") != 0 && s.size() >= 2;
      auto& dst = d["dst"];
      const auto& src = d["src"];
      const int64_t r = s.size() >= 2 ? s[s.size() - 2] : 1, c = s.back();
      for (size_t e = 0; e < dst.size(); ++e) {
        size_t from = e;
        if (tr) {
          const int64_t plane = static_cast<int64_t>(e) / (r * c),
                        in = static_cast<int64_t>(e) % (r * c);
          const int64_t i = in / r, j = in % r;  // dst is c x r: element (i, j) is src (j, i)
          from = static_cast<size_t>(plane * r * c + j * c + i);
        }
        dst[e] = cast_reference(d, src[from]);
      }
    });
