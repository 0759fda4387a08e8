// DSL functions: positions, barriers, plane ops, atomics, math, conversions, lines,
// print and assert. Each takes its call site as a defaulted last argument.
#pragma once

#include <string_view>

#include "compiler/dsl/memory.h"

namespace kiln::dsl {

// ---- positions (all u32; see the semantics in ir/ir.h) ---------------------------------------

namespace detail {
inline Val<uint32_t> builtin(ir::OpKind kind, uint64_t axis, const SrcLoc& where) {
  auto& ctx = TraceContext::current();
  ir::Attr a;
  a.i = axis;
  return Val<uint32_t>::from_id(ctx.builder().op(kind, {}, ctx.loc(where), {}, a));
}
}  // namespace detail

#define KILN_DSL_POSITION(name, kind)                           \
  inline Val<uint32_t> name(SrcLoc w = SrcLoc::current()) {     \
    return detail::builtin(ir::OpKind::kind, 0, w);             \
  }                                                             \
  inline Val<uint32_t> name##_x(SrcLoc w = SrcLoc::current()) { \
    return detail::builtin(ir::OpKind::kind, 1, w);             \
  }                                                             \
  inline Val<uint32_t> name##_y(SrcLoc w = SrcLoc::current()) { \
    return detail::builtin(ir::OpKind::kind, 2, w);             \
  }                                                             \
  inline Val<uint32_t> name##_z(SrcLoc w = SrcLoc::current()) { \
    return detail::builtin(ir::OpKind::kind, 3, w);             \
  }
KILN_DSL_POSITION(unit_pos, UnitPos)
KILN_DSL_POSITION(cube_pos, CubePos)
KILN_DSL_POSITION(absolute_pos, AbsolutePos)
KILN_DSL_POSITION(cube_dim, CubeDim)
KILN_DSL_POSITION(cube_count, CubeCount)
#undef KILN_DSL_POSITION

inline Val<uint32_t> plane_dim(SrcLoc w = SrcLoc::current()) {
  return detail::builtin(ir::OpKind::PlaneDim, 0, w);
}
inline Val<uint32_t> plane_lane(SrcLoc w = SrcLoc::current()) {
  return detail::builtin(ir::OpKind::PlaneLane, 0, w);
}
// Which plane of the cube this unit is in (unit_pos() / plane_dim(), the same for the plane).
inline Val<uint32_t> plane_pos(SrcLoc w = SrcLoc::current()) {
  return detail::builtin(ir::OpKind::PlanePos, 0, w);
}

// ---- barriers ---------------------------------------------------------------------------------

// Waits until every unit of the cube arrives; memory written before is visible after.
inline void sync_cube(SrcLoc w = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::SyncCube, {}, ctx.loc(w));
}
// Waits until every unit of the plane arrives.
inline void sync_plane(SrcLoc w = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::SyncPlane, {}, ctx.loc(w));
}

// ---- helpers for functions over expressions ------------------------------------------------

namespace detail {

template <class... As>
concept AnyExpr = (DslExpr<std::remove_cvref_t<As>> || ...);

template <Element R, class T, class... As>
Val<R> call(ir::OpKind kind, const char* what, const SrcLoc& w, const As&... as) {
  return emit<R>(kind, what, Arg<T>(as, w)...);
}

}  // namespace detail

// ---- math -------------------------------------------------------------------------------------

#define KILN_DSL_FLOAT_UNARY(name, kind)                                                    \
  template <DslExpr E>                                                                      \
  Val<typename E::elem_type> name(const E& x, SrcLoc w = SrcLoc::current()) {               \
    using T = typename E::elem_type;                                                        \
    static_assert(is_float_elem_v<T>,                                                       \
                  "kiln: " #name "() takes a float (f16, bf16, f32, f64, f8e4m3, f8e5m2)"); \
    return detail::call<T, T>(ir::OpKind::kind, #name, w, x);                               \
  }
KILN_DSL_FLOAT_UNARY(sqrt, Sqrt)
KILN_DSL_FLOAT_UNARY(rsqrt, Rsqrt)
KILN_DSL_FLOAT_UNARY(exp, Exp)
KILN_DSL_FLOAT_UNARY(exp2, Exp2)
KILN_DSL_FLOAT_UNARY(log, Log)
KILN_DSL_FLOAT_UNARY(log2, Log2)
KILN_DSL_FLOAT_UNARY(sin, Sin)
KILN_DSL_FLOAT_UNARY(cos, Cos)
KILN_DSL_FLOAT_UNARY(tanh, Tanh)
KILN_DSL_FLOAT_UNARY(floor, Floor)
KILN_DSL_FLOAT_UNARY(ceil, Ceil)
KILN_DSL_FLOAT_UNARY(round, Round)
KILN_DSL_FLOAT_UNARY(trunc, Trunc)
#undef KILN_DSL_FLOAT_UNARY

template <DslExpr E>
Val<typename E::elem_type> abs(const E& x, SrcLoc w = SrcLoc::current()) {
  using T = typename E::elem_type;
  static_assert(!std::is_same_v<T, bool>, "kiln: abs() takes a number");
  return detail::call<T, T>(ir::OpKind::Abs, "abs", w, x);
}

template <DslExpr E>
Val<bool> is_nan(const E& x, SrcLoc w = SrcLoc::current()) {
  using T = typename E::elem_type;
  static_assert(is_float_elem_v<T>, "kiln: is_nan() takes a float");
  return detail::call<bool, T>(ir::OpKind::IsNan, "is_nan", w, x);
}
template <DslExpr E>
Val<bool> is_inf(const E& x, SrcLoc w = SrcLoc::current()) {
  using T = typename E::elem_type;
  static_assert(is_float_elem_v<T>, "kiln: is_inf() takes a float");
  return detail::call<bool, T>(ir::OpKind::IsInf, "is_inf", w, x);
}

#define KILN_DSL_BINARY_FN(name, kind, check, msg)                                             \
  template <class A, class B>                                                                  \
  requires detail::AnyExpr<A, B> Val<common_elem_t<A, B>> name(const A& a, const B& b,         \
                                                               SrcLoc w = SrcLoc::current()) { \
    using T = common_elem_t<A, B>;                                                             \
    static_assert(check, "kiln: " msg);                                                        \
    return detail::call<T, T>(ir::OpKind::kind, #name, w, a, b);                               \
  }
KILN_DSL_BINARY_FN(min, Min, (!std::is_same_v<T, bool>), "min() takes numbers")
KILN_DSL_BINARY_FN(max, Max, (!std::is_same_v<T, bool>), "max() takes numbers")
KILN_DSL_BINARY_FN(pow, Pow, is_float_elem_v<T>, "pow() takes floats")
#undef KILN_DSL_BINARY_FN

// a * b + c, rounded once.
template <class A, class B, class C>
requires detail::AnyExpr<A, B, C> Val<common_elem_t<A, B, C>> fma(const A& a, const B& b,
                                                                  const C& c,
                                                                  SrcLoc w = SrcLoc::current()) {
  using T = common_elem_t<A, B, C>;
  static_assert(is_float_elem_v<T>, "kiln: fma() takes floats");
  return detail::call<T, T>(ir::OpKind::Fma, "fma", w, a, b, c);
}

// min(max(x, lo), hi).
template <class A, class B, class C>
requires detail::AnyExpr<A, B, C> Val<common_elem_t<A, B, C>> clamp(const A& x, const B& lo,
                                                                    const C& hi,
                                                                    SrcLoc w = SrcLoc::current()) {
  using T = common_elem_t<A, B, C>;
  static_assert(!std::is_same_v<T, bool>, "kiln: clamp() takes numbers");
  return detail::call<T, T>(ir::OpKind::Clamp, "clamp", w, x, lo, hi);
}

// cond ? a : b, lane by lane (cond may be a single Bool or a line of the same width).
template <class A, class B>
requires detail::AnyExpr<A, B> Val<common_elem_t<A, B>> select(Arg<bool> cond, const A& a,
                                                               const B& b) {
  using T = common_elem_t<A, B>;
  const SrcLoc& w = cond.where();
  const Arg<T> x(a, w), y(b, w);
  const int lanes = detail::common_lanes("select", w, x, y);
  if (lanes < 0) return Val<T>{};
  const int cl = cond.lanes();
  if (cl > 1 && cl != lanes) {
    TraceContext::current().fail(w, fmt::format("select() has a condition of {} lanes for "
                                                "values of {} lanes",
                                                cl, lanes));
    return Val<T>{};
  }
  auto& b2 = TraceContext::current().builder();
  const ir::ValueId c = cl > 1 ? cond.value(cl) : cond.value(1);
  return Val<T>::from_id(b2.op(ir::OpKind::Select, {c, x.value(lanes), y.value(lanes)}, cond.at()));
}

// ---- conversions and lines -------------------------------------------------------------------

// Value conversion, lane by lane (rounding and saturation as in ir/ir.h): cast<f32>(i).
template <class U, DslExpr E>
Val<host_of_t<U>> cast(const E& x, SrcLoc w = SrcLoc::current()) {
  using R = host_of_t<U>;
  static_assert(Element<R>, "kiln: cast<T> needs a DSL type such as f32 or u32");
  auto& ctx = TraceContext::current();
  const Arg<typename E::elem_type> a(x, w);
  return Val<R>::from_id(ctx.builder().op(ir::OpKind::Cast, {a.value()}, a.at(),
                                          ir::Type::value(elem_v<R>, std::max(a.lanes(), 1))));
}

namespace detail {
// The DSL element type a C++ literal has on its own (int -> i32, double -> f64, ...).
template <Literal L>
using natural_elem_t = std::conditional_t<
    std::is_same_v<L, bool>, bool,
    std::conditional_t<std::is_floating_point_v<L>,
                       std::conditional_t<sizeof(L) == 4, float, double>,
                       std::conditional_t<std::is_signed_v<L>,
                                          std::conditional_t<sizeof(L) <= 4, int32_t, int64_t>,
                                          std::conditional_t<sizeof(L) <= 4, uint32_t, uint64_t>>>>;
}  // namespace detail

// cast<T> of a C++ value (a comptime parameter, say): the value as its own type, converted
// with the same rules as a traced value.
template <class U, Literal L>
Val<host_of_t<U>> cast(L v, SrcLoc w = SrcLoc::current()) {
  using N = detail::natural_elem_t<L>;
  return cast<U>(Val<N>(static_cast<N>(v), w), w);
}

// Reinterprets the bits as another type of the same size: bitcast<u32>(f).
template <class U, DslExpr E>
Val<host_of_t<U>> bitcast(const E& x, SrcLoc w = SrcLoc::current()) {
  using R = host_of_t<U>;
  using T = typename E::elem_type;
  static_assert(Element<R>, "kiln: bitcast<T> needs a DSL type such as u32");
  static_assert(sizeof(R) == sizeof(T) && !std::is_same_v<R, bool> && !std::is_same_v<T, bool>,
                "kiln: bitcast<T> needs types of the same size (and not Bool)");
  auto& ctx = TraceContext::current();
  const Arg<T> a(x, w);
  return Val<R>::from_id(ctx.builder().op(ir::OpKind::Bitcast, {a.value()}, a.at(),
                                          ir::Type::value(elem_v<R>, std::max(a.lanes(), 1))));
}

// A line of `lanes` copies of a scalar (or literal): splat<f32>(0.0f, x.line_size()).
template <class U>
Val<host_of_t<U>> splat(Arg<host_of_t<U>> v, int lanes) {
  using T = host_of_t<U>;
  auto& ctx = TraceContext::current();
  if (!ir::valid_lanes(lanes)) {
    ctx.fail(v.where(), fmt::format("line width {} is not 1, 2, 4, 8 or 16", lanes));
    return Val<T>{};
  }
  if (v.lanes() > 1) {
    ctx.fail(v.where(), fmt::format("splat() takes a scalar, got a line of {} lanes", v.lanes()));
    return Val<T>{};
  }
  return Val<T>::from_id(v.value(lanes));
}

// Lane `lane` of a line.
template <DslExpr E>
Val<typename E::elem_type> extract(const E& x, int lane, SrcLoc w = SrcLoc::current()) {
  using T = typename E::elem_type;
  auto& ctx = TraceContext::current();
  const Arg<T> a(x, w);
  ir::Attr at;
  at.i = static_cast<uint64_t>(lane < 0 ? 64 : lane);
  return Val<T>::from_id(ctx.builder().op(ir::OpKind::Extract, {a.value()}, a.at(), {}, at));
}

// The line `x` with lane `lane` replaced by `s`.
template <DslExpr E>
Val<typename E::elem_type> insert(const E& x, int lane, Arg<typename E::elem_type> s,
                                  SrcLoc w = SrcLoc::current()) {
  using T = typename E::elem_type;
  auto& ctx = TraceContext::current();
  const Arg<T> a(x, w);
  ir::Attr at;
  at.i = static_cast<uint64_t>(lane < 0 ? 64 : lane);
  return Val<T>::from_id(
      ctx.builder().op(ir::OpKind::Insert, {a.value(), s.value(1)}, a.at(), {}, at));
}

// Reductions across the lanes of one line (helpers built from extract).
namespace detail {
template <DslExpr E>
Val<typename E::elem_type> line_reduce(ir::OpKind op, const char* name, const E& x, SrcLoc w) {
  using T = typename E::elem_type;
  const Val<T> v = x.read(w);
  Val<T> acc = extract(v, 0, w);
  for (int i = 1; i < v.line_size(); ++i) acc = call<T, T>(op, name, w, acc, extract(v, i, w));
  return acc;
}
}  // namespace detail
template <DslExpr E>
Val<typename E::elem_type> line_sum(const E& x, SrcLoc w = SrcLoc::current()) {
  return detail::line_reduce(ir::OpKind::Add, "line_sum", x, w);
}
template <DslExpr E>
Val<typename E::elem_type> line_max(const E& x, SrcLoc w = SrcLoc::current()) {
  return detail::line_reduce(ir::OpKind::Max, "line_max", x, w);
}
template <DslExpr E>
Val<typename E::elem_type> line_min(const E& x, SrcLoc w = SrcLoc::current()) {
  return detail::line_reduce(ir::OpKind::Min, "line_min", x, w);
}
// Whether any / every lane of a Bool line is true.
inline Val<bool> any(Arg<bool> c) {
  const Val<bool> v = Val<bool>::from_id(c.value());
  Val<bool> acc = extract(v, 0, c.where());
  for (int i = 1; i < v.line_size(); ++i)
    acc = detail::call<bool, bool>(ir::OpKind::Or, "any", c.where(), acc, extract(v, i, c.where()));
  return acc;
}
inline Val<bool> all(Arg<bool> c) {
  const Val<bool> v = Val<bool>::from_id(c.value());
  Val<bool> acc = extract(v, 0, c.where());
  for (int i = 1; i < v.line_size(); ++i)
    acc =
        detail::call<bool, bool>(ir::OpKind::And, "all", c.where(), acc, extract(v, i, c.where()));
  return acc;
}

// ---- plane (warp) operations -------------------------------------------------------------------

#define KILN_DSL_PLANE_REDUCE(name, kind, check, msg)                         \
  template <DslExpr E>                                                        \
  Val<typename E::elem_type> name(const E& x, SrcLoc w = SrcLoc::current()) { \
    using T = typename E::elem_type;                                          \
    static_assert(check, "kiln: " msg);                                       \
    return detail::call<T, T>(ir::OpKind::kind, #name, w, x);                 \
  }
KILN_DSL_PLANE_REDUCE(plane_sum, PlaneSum, (!std::is_same_v<T, bool>), "plane_sum() takes numbers")
KILN_DSL_PLANE_REDUCE(plane_min, PlaneMin, (!std::is_same_v<T, bool>), "plane_min() takes numbers")
KILN_DSL_PLANE_REDUCE(plane_max, PlaneMax, (!std::is_same_v<T, bool>), "plane_max() takes numbers")
KILN_DSL_PLANE_REDUCE(plane_any, PlaneAny, (std::is_same_v<T, bool>), "plane_any() takes a Bool")
KILN_DSL_PLANE_REDUCE(plane_all, PlaneAll, (std::is_same_v<T, bool>), "plane_all() takes a Bool")
#undef KILN_DSL_PLANE_REDUCE

#define KILN_DSL_PLANE_LANE(name, kind)                                                           \
  template <DslExpr E>                                                                            \
  Val<typename E::elem_type> name(const E& x, Arg<uint32_t> lane, SrcLoc w = SrcLoc::current()) { \
    using T = typename E::elem_type;                                                              \
    auto& ctx = TraceContext::current();                                                          \
    const Arg<T> a(x, w);                                                                         \
    return Val<T>::from_id(                                                                       \
        ctx.builder().op(ir::OpKind::kind, {a.value(), lane.value(1)}, a.at()));                  \
  }
// The value of lane `lane` (the same for the whole plane) in every unit.
KILN_DSL_PLANE_LANE(plane_broadcast, PlaneBroadcast)
// Each unit reads the value of lane `lane` (per unit).
KILN_DSL_PLANE_LANE(plane_shuffle, PlaneShuffle)
// Each unit reads the value of lane plane_lane() ^ mask.
KILN_DSL_PLANE_LANE(plane_shuffle_xor, PlaneShuffleXor)
#undef KILN_DSL_PLANE_LANE

// ---- atomics (on one element of global or shared memory; the result is the old value) --------

namespace detail {
template <Element T, bool RO>
Val<T> atomic(ir::OpKind kind, const MemElem<T, RO>& ref, std::initializer_list<const Arg<T>*> vs) {
  static_assert(!RO, "kiln: atomics modify memory; this memory is read-only (const)");
  auto& ctx = TraceContext::current();
  const Arg<T>& first = **vs.begin();
  std::vector<ir::ValueId> ops{ref.memory(), ref.index()};
  for (const Arg<T>* v : vs) {
    if (v->lanes() > 1) {
      ctx.fail(first.where(), "atomics work on single elements, not lines");
      return Val<T>{};
    }
    ops.push_back(v->value(1));
  }
  return Val<T>::from_id(ctx.builder().op(kind, ops, first.at()));
}
}  // namespace detail

template <Element T, bool RO>
Val<T> atomic_add(const MemElem<T, RO>& ref, std::type_identity_t<Arg<T>> v) {
  return detail::atomic(ir::OpKind::AtomicAdd, ref, {&v});
}
template <Element T, bool RO>
Val<T> atomic_min(const MemElem<T, RO>& ref, std::type_identity_t<Arg<T>> v) {
  return detail::atomic(ir::OpKind::AtomicMin, ref, {&v});
}
template <Element T, bool RO>
Val<T> atomic_max(const MemElem<T, RO>& ref, std::type_identity_t<Arg<T>> v) {
  return detail::atomic(ir::OpKind::AtomicMax, ref, {&v});
}
template <Element T, bool RO>
Val<T> atomic_exchange(const MemElem<T, RO>& ref, std::type_identity_t<Arg<T>> v) {
  return detail::atomic(ir::OpKind::AtomicExchange, ref, {&v});
}
// Stores `desired` if the element equals `expected`; returns the old value.
template <Element T, bool RO>
Val<T> atomic_cas(const MemElem<T, RO>& ref, std::type_identity_t<Arg<T>> expected,
                  std::type_identity_t<Arg<T>> desired) {
  return detail::atomic(ir::OpKind::AtomicCas, ref, {&expected, &desired});
}

// ---- print and assert ---------------------------------------------------------------------------

// A print format with its call site: "x = {}, y = {}" ({{ and }} are literal braces).
struct Format {
  std::string_view text;
  SrcLoc where;
  Format(const char* s, SrcLoc w = SrcLoc::current()) : text(s), where(w) {}  // NOLINT
};

namespace detail {
template <class A>
ir::ValueId print_operand(const A& a, const SrcLoc& w) {
  if constexpr (DslExpr<A>) {
    return a.read(w).id();
  } else {
    static_assert(Literal<A>, "kiln: print() takes DSL values and C++ numbers");
    using H = std::conditional_t<
        std::is_same_v<A, bool>, bool,
        std::conditional_t<std::is_floating_point_v<A>,
                           std::conditional_t<sizeof(A) == 4, float, double>,
                           std::conditional_t<std::is_signed_v<A>, int64_t, uint64_t>>>;
    return Arg<H>(static_cast<H>(a), w).value(1);
  }
}
}  // namespace detail

// Prints from every unit that reaches it; the host receives the lines in order at sync.
template <class... As>
void print(Format f, const As&... args) {
  auto& ctx = TraceContext::current();
  std::vector<ir::ValueId> ops{detail::print_operand(args, f.where)...};
  ir::Attr a;
  a.s = std::string(f.text);
  ctx.builder().op(ir::OpKind::Print, ops, ctx.loc(f.where), {}, std::move(a));
}

// Reports `message` (with this source line) at sync when `cond` is false for some unit.
inline void assert_(Arg<bool> cond, const char* message) {
  auto& ctx = TraceContext::current();
  ir::Attr a;
  a.s = message;
  ctx.builder().op(ir::OpKind::Assert, {cond.value(1)}, cond.at(), {}, std::move(a));
}

}  // namespace kiln::dsl
