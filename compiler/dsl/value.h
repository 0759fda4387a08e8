// Traced values: Val<T> (an immutable IR value of element type T and some line width), Arg<T>
// (an operand together with its call site), the element types, and the operators.
//
// How call sites are captured: every operator takes Arg<T> operands, and Arg's converting
// constructors have a `std::source_location = current()` default argument, which C++ evaluates
// at the expression being converted, i.e. in the kernel's source. Functions (sqrt, min, ...)
// take the location as their own default argument.
//
// Type rules (docs/dsl.md): operands of one operation have the same element type, or a
// compile error says to cast. C++ literals adapt to the other operand's type and width when
// the value fits (trace-time check); a floating-point literal never adapts to an integer type.
// A scalar broadcasts against a line; two different line widths are a trace-time error.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <source_location>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "compiler/dsl/context.h"
#include "ir/float16.h"

namespace kiln::dsl {

using SrcLoc = std::source_location;

// ---- element types -------------------------------------------------------------------------

template <class T>
struct ElemOf;
#define KILN_DSL_ELEM(host, e)                             \
  template <>                                              \
  struct ElemOf<host> {                                    \
    static constexpr ir::ElemType value = ir::ElemType::e; \
  };
KILN_DSL_ELEM(bool, Bool)
KILN_DSL_ELEM(int8_t, I8)
KILN_DSL_ELEM(int16_t, I16)
KILN_DSL_ELEM(int32_t, I32)
KILN_DSL_ELEM(int64_t, I64)
KILN_DSL_ELEM(uint8_t, U8)
KILN_DSL_ELEM(uint16_t, U16)
KILN_DSL_ELEM(uint32_t, U32)
KILN_DSL_ELEM(uint64_t, U64)
KILN_DSL_ELEM(kiln::f16_t, F16)
KILN_DSL_ELEM(kiln::bf16_t, BF16)
KILN_DSL_ELEM(float, F32)
KILN_DSL_ELEM(double, F64)
KILN_DSL_ELEM(kiln::f8e4m3_t, F8E4M3)
KILN_DSL_ELEM(kiln::f8e5m2_t, F8E5M2)
#undef KILN_DSL_ELEM

template <class T>
concept Element = requires {
  ElemOf<T>::value;
};
template <Element T>
inline constexpr ir::ElemType elem_v = ElemOf<T>::value;

template <class T>
inline constexpr bool is_float_elem_v =
    std::is_floating_point_v<T> || std::is_same_v<T, kiln::f16_t> ||
    std::is_same_v<T, kiln::bf16_t> || std::is_same_v<T, kiln::f8e4m3_t> ||
    std::is_same_v<T, kiln::f8e5m2_t>;
template <class T>
inline constexpr bool is_int_elem_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <class>
inline constexpr bool dependent_false = false;

// C++ arithmetic values usable as literals.
template <class L>
concept Literal = std::is_arithmetic_v<L>;

template <Element T>
class Val;

// ---- what counts as a DSL expression ------------------------------------------------------

// A DSL expression of element type T: a value, a variable or a memory element. It names its
// element type and can be read as a value at a call site.
template <class E>
concept DslExpr = requires(const E& e, const SrcLoc& l) {
  typename E::elem_type;
  { e.read(l) } -> std::same_as<Val<typename E::elem_type>>;
};

template <class E>
struct ExprElem {
  using type = void;
};
template <DslExpr E>
struct ExprElem<E> {
  using type = typename E::elem_type;
};

// The element type of the expression operands among As (all must agree, or void).
template <class... As>
struct CommonElem;
template <>
struct CommonElem<> {
  using type = void;
};
template <class A, class... Rest>
struct CommonElem<A, Rest...> {
  using first = typename ExprElem<std::remove_cvref_t<A>>::type;
  using rest = typename CommonElem<Rest...>::type;
  using type = std::conditional_t<std::is_void_v<first>, rest, first>;
  static constexpr bool consistent =
      std::is_void_v<first> || std::is_void_v<rest> || std::is_same_v<first, rest>;
  static_assert(consistent,
                "kiln: the operands of this operation have different element types; convert one "
                "with cast<T>(x) (kiln never converts between DSL types implicitly)");
};
template <class... As>
using common_elem_t = typename CommonElem<As...>::type;

// ---- naming types in messages ---------------------------------------------------------------

template <Element T>
std::string_view elem_name_of() {
  return ir::elem_name(elem_v<T>);
}

namespace detail {

// Checks that a literal can stand for a value of T and returns the IR constant's attribute.
template <Element T, Literal L>
bool literal_attr(L lit, ir::Attr& out, std::string& why) {
  if constexpr (std::is_same_v<T, bool>) {
    out.i = lit ? 1 : 0;
    return true;
  } else if constexpr (is_int_elem_v<T>) {
    static_assert(!std::is_floating_point_v<L>,
                  "kiln: a floating-point literal cannot stand for an integer value; write an "
                  "integer literal or cast<T>(x) explicitly");
    using Lim = std::numeric_limits<T>;
    bool fits;
    if constexpr (std::is_signed_v<L>)
      fits = static_cast<long long>(lit) >= static_cast<long long>(Lim::min()) &&
             (lit < 0 ||
              static_cast<unsigned long long>(lit) <= static_cast<unsigned long long>(Lim::max()));
    else
      fits = static_cast<unsigned long long>(lit) <= static_cast<unsigned long long>(Lim::max());
    if (!fits) {
      why = fmt::format("literal {} does not fit in {}", lit, elem_name_of<T>());
      return false;
    }
    out.i = std::is_signed_v<T> ? static_cast<uint64_t>(static_cast<int64_t>(lit))
                                : static_cast<uint64_t>(lit);
    return true;
  } else {
    const double v = static_cast<double>(lit);
    const double r = ir::round_float_literal(elem_v<T>, v);
    if (std::isinf(r) && !std::isinf(v)) {
      why = fmt::format("literal {} is out of range for {}", v, elem_name_of<T>());
      return false;
    }
    if constexpr (std::is_integral_v<L>) {
      if (r != v || static_cast<L>(v) != lit) {
        why = fmt::format(
            "integer literal {} is not exactly representable in {}; write a "
            "floating-point literal if rounding is intended",
            lit, elem_name_of<T>());
        return false;
      }
    }
    out.f = r;
    return true;
  }
}

inline int lanes_of(ir::ValueId id) {
  return TraceContext::current().builder().type_of(id).lanes;
}

}  // namespace detail

// ---- Arg: an operand with its call site ------------------------------------------------------

template <Element T>
class Arg {
 public:
  Arg(const Val<T>& v, SrcLoc where = SrcLoc::current());
  template <DslExpr E>
  requires std::same_as<typename E::elem_type, T> &&
      (!std::same_as<E, Val<T>>)Arg(const E& e, SrcLoc where = SrcLoc::current())
      : where_(where) {
    set_value(e.read(where));
  }
  template <Literal L>
  Arg(L lit, SrcLoc where = SrcLoc::current()) : literal_(true), where_(where) {
    if constexpr (is_int_elem_v<T>)
      static_assert(!std::is_floating_point_v<L>,
                    "kiln: a floating-point literal cannot stand for an integer value; write an "
                    "integer literal or cast<T>(x) explicitly");
    if constexpr (std::is_same_v<T, bool>)
      static_assert(std::is_same_v<L, bool>, "kiln: write true or false for a Bool value");
    std::string why;
    if (!detail::literal_attr<T>(lit, attr_, why)) {
      TraceContext::current().fail(where, why);
      failed_ = true;
    }
  }

  const SrcLoc& where() const { return where_; }
  ir::SourceLoc at() const { return TraceContext::current().loc(where_); }
  bool is_literal() const { return literal_; }
  // The line width of a value operand; 0 for a literal, which adapts.
  int lanes() const { return literal_ || id_ == ir::kNoValue ? 0 : detail::lanes_of(id_); }
  // The operand as an IR value of `lanes` lanes: literals become constants, scalars are
  // broadcast. `lanes` must be this operand's width, or it must be a scalar or literal.
  ir::ValueId value(int lanes) const {
    auto& b = TraceContext::current().builder();
    if (failed_) return ir::kNoValue;
    if (literal_)
      return b.op(ir::OpKind::Const, {}, at(), ir::Type::value(elem_v<T>, lanes), attr_);
    if (id_ == ir::kNoValue) return ir::kNoValue;
    if (lanes > 1 && detail::lanes_of(id_) == 1)
      return b.op(ir::OpKind::Broadcast, {id_}, at(), ir::Type::value(elem_v<T>, lanes));
    return id_;
  }
  // The operand at its own width (literals as scalars).
  ir::ValueId value() const { return value(std::max(lanes(), 1)); }

 private:
  void set_value(const Val<T>& v);
  ir::ValueId id_ = ir::kNoValue;
  ir::Attr attr_;
  bool literal_ = false;
  bool failed_ = false;
  SrcLoc where_;
};

// ---- the operators ---------------------------------------------------------------------------

namespace detail {

// The common width of operands (0 = all literals, treated as scalars), or -1 after reporting
// a mismatch of two different line widths.
template <class... Args>
int common_lanes(const char* what, const SrcLoc& where, const Args&... args) {
  int lanes = 1;
  bool bad = false;
  int first = 0, second = 0;
  auto take = [&](int l) {
    if (l <= 1) return;
    if (lanes > 1 && l != lanes) {
      bad = true;
      first = lanes;
      second = l;
    }
    if (lanes <= 1) lanes = l;
  };
  (take(args.lanes()), ...);
  if (bad) {
    TraceContext::current().fail(
        where, fmt::format("'{}' mixes a line of {} lanes with a line of {} lanes; the lines "
                           "of one operation must have the same width (a scalar is broadcast)",
                           what, first, second));
    return -1;
  }
  return lanes;
}

template <Element R, Element T, class... Args>
Val<R> emit(ir::OpKind kind, const char* what, const Arg<T>& first, const Args&... rest);

}  // namespace detail

// Every DSL expression of element type T derives from Ops<T>, so that argument-dependent lookup
// finds these operators for values, variables and memory elements alike.
template <Element T>
struct Ops {
#define KILN_DSL_BINARY(op, kind, name)                   \
  friend auto operator op(Arg<T> a, Arg<T> b) {           \
    return detail::emit<T>(ir::OpKind::kind, name, a, b); \
  }
  KILN_DSL_BINARY(+, Add, "+")
  KILN_DSL_BINARY(-, Sub, "-")
  KILN_DSL_BINARY(*, Mul, "*")
  KILN_DSL_BINARY(/, Div, "/")
#undef KILN_DSL_BINARY

  friend auto operator%(Arg<T> a, Arg<T> b) {
    return detail::emit<T>(ir::OpKind::Rem, "%", a, b);
  }

#define KILN_DSL_BITWISE(op, kind, name)                                                        \
  friend auto operator op(Arg<T> a, Arg<T> b) {                                                 \
    static_assert(!is_float_elem_v<T>,                                                          \
                  "kiln: bitwise operators need integers (or Bool for & | ^); cast or bitcast " \
                  "floats first");                                                              \
    return detail::emit<T>(ir::OpKind::kind, name, a, b);                                       \
  }
  KILN_DSL_BITWISE(&, And, "&")
  KILN_DSL_BITWISE(|, Or, "|")
  KILN_DSL_BITWISE(^, Xor, "^")
#undef KILN_DSL_BITWISE

#define KILN_DSL_SHIFT(op, kind, name)                                     \
  friend auto operator op(Arg<T> a, Arg<T> b) {                            \
    static_assert(is_int_elem_v<T>, "kiln: shifts need integer operands"); \
    return detail::emit<T>(ir::OpKind::kind, name, a, b);                  \
  }
  KILN_DSL_SHIFT(<<, Shl, "<<")
  KILN_DSL_SHIFT(>>, Shr, ">>")
#undef KILN_DSL_SHIFT

#define KILN_DSL_COMPARE(op, kind, name)                     \
  friend auto operator op(Arg<T> a, Arg<T> b) {              \
    return detail::emit<bool>(ir::OpKind::kind, name, a, b); \
  }
  KILN_DSL_COMPARE(==, Eq, "==")
  KILN_DSL_COMPARE(!=, Ne, "!=")
  KILN_DSL_COMPARE(<, Lt, "<")
  KILN_DSL_COMPARE(<=, Le, "<=")
  KILN_DSL_COMPARE(>, Gt, ">")
  KILN_DSL_COMPARE(>=, Ge, ">=")
#undef KILN_DSL_COMPARE

  friend auto operator&&(Arg<T> a, Arg<T> b) {
    static_assert(std::is_same_v<T, bool>, "kiln: && needs Bool operands");
    return detail::emit<T>(ir::OpKind::And, "&&", a, b);
  }
  friend auto operator||(Arg<T> a, Arg<T> b) {
    static_assert(std::is_same_v<T, bool>, "kiln: || needs Bool operands");
    return detail::emit<T>(ir::OpKind::Or, "||", a, b);
  }
  friend auto operator!(Arg<T> a) {
    static_assert(std::is_same_v<T, bool>, "kiln: ! needs a Bool operand; use ~ for integers");
    return detail::emit<T>(ir::OpKind::Not, "!", a);
  }
  friend auto operator~(Arg<T> a) {
    static_assert(!is_float_elem_v<T>, "kiln: ~ needs an integer or Bool operand");
    return detail::emit<T>(ir::OpKind::Not, "~", a);
  }
  friend auto operator-(Arg<T> a) {
    static_assert(!std::is_same_v<T, bool>, "kiln: unary - needs a number");
    return detail::emit<T>(ir::OpKind::Neg, "-", a);
  }
};

// Operands of two different element types: a compile error that says what to do.
#define KILN_DSL_MIXED(op)                                                                 \
  template <DslExpr A, DslExpr B>                                                          \
  requires(!std::same_as<typename A::elem_type, typename B::elem_type>) void operator op(  \
      const A&, const B&) {                                                                \
    static_assert(dependent_false<A>,                                                      \
                  "kiln: the two operands have different element types; convert one with " \
                  "cast<T>(x) (kiln never converts between DSL types implicitly)");        \
  }
KILN_DSL_MIXED(+)
KILN_DSL_MIXED(-)
KILN_DSL_MIXED(*)
KILN_DSL_MIXED(/)
KILN_DSL_MIXED(%)
KILN_DSL_MIXED(&)
KILN_DSL_MIXED(|)
KILN_DSL_MIXED(^)
KILN_DSL_MIXED(<<)
KILN_DSL_MIXED(>>)
KILN_DSL_MIXED(==)
KILN_DSL_MIXED(!=)
KILN_DSL_MIXED(<)
KILN_DSL_MIXED(<=)
KILN_DSL_MIXED(>)
KILN_DSL_MIXED(>=)
KILN_DSL_MIXED(&&)
KILN_DSL_MIXED(||)
#undef KILN_DSL_MIXED

// ---- Val --------------------------------------------------------------------------------------

// An immutable traced value of element type T; its line width is known at trace time
// (line_size()). Assigning to a Val variable rebinds the C++ name to another value; to carry a
// value out of an if_/loop body, use a Var.
template <Element T>
class Val : public Ops<T> {
 public:
  using elem_type = T;

  Val() = default;  // unset; using it is a trace error
  template <Literal L>
  Val(L lit, SrcLoc where = SrcLoc::current()) {
    id_ = Arg<T>(lit, where).value(1);
  }
  template <DslExpr E>
  requires std::same_as<typename E::elem_type, T> &&
      (!std::same_as<E, Val<T>>)Val(const E& e, SrcLoc where = SrcLoc::current())
      : id_(e.read(where).id()) {}
  template <DslExpr E>
  requires(!std::same_as<typename E::elem_type, T>) Val(const E&) {
    static_assert(dependent_false<E>,
                  "kiln: cannot convert between DSL element types implicitly; use cast<T>(x)");
  }

  static Val from_id(ir::ValueId id) {
    Val v;
    v.id_ = id;
    return v;
  }
  ir::ValueId id() const { return id_; }
  bool valid() const { return id_ != ir::kNoValue; }
  // The line width (1 for a scalar), known at trace time.
  int line_size() const { return id_ == ir::kNoValue ? 1 : detail::lanes_of(id_); }
  Val read(const SrcLoc&) const { return *this; }

  // No conversion to bool: a traced value cannot drive C++ control flow (`if (x < n)` does
  // not compile); use if_(cond, [&] { ... }), while_ or select(cond, a, b). (A conversion,
  // even an explicit one, would also make `a && b` ambiguous with the built-in &&.)

 private:
  ir::ValueId id_ = ir::kNoValue;
};

template <Element T>
Arg<T>::Arg(const Val<T>& v, SrcLoc where) : where_(where) {
  set_value(v);
}

template <Element T>
void Arg<T>::set_value(const Val<T>& v) {
  id_ = v.id();
  if (id_ == ir::kNoValue) {
    auto& ctx = TraceContext::current();
    failed_ = true;
    if (ctx.ok())
      ctx.fail(where_, fmt::format("a {} value is used before anything was assigned to it",
                                   elem_name_of<T>()));
  }
}

namespace detail {

template <Element R, Element T, class... Args>
Val<R> emit(ir::OpKind kind, const char* what, const Arg<T>& first, const Args&... rest) {
  const int lanes = common_lanes(what, first.where(), first, rest...);
  if (lanes < 0) return Val<R>{};
  const ir::ValueId ops[] = {first.value(lanes), rest.value(lanes)...};
  auto& b = TraceContext::current().builder();
  return Val<R>::from_id(b.op(kind, ops, first.at()));
}

}  // namespace detail

// The DSL's scalar (and line) types.
using Bool = Val<bool>;
using i8 = Val<int8_t>;
using i16 = Val<int16_t>;
using i32 = Val<int32_t>;
using i64 = Val<int64_t>;
using u8 = Val<uint8_t>;
using u16 = Val<uint16_t>;
using u32 = Val<uint32_t>;
using u64 = Val<uint64_t>;
using f16 = Val<kiln::f16_t>;
using bf16 = Val<kiln::bf16_t>;
using f8e4m3 = Val<kiln::f8e4m3_t>;
using f8e5m2 = Val<kiln::f8e5m2_t>;
using f32 = Val<float>;
using f64 = Val<double>;

// The host element type of a DSL type name (f32 -> float), or the type itself.
template <class U>
struct HostOf {
  using type = U;
};
template <Element T>
struct HostOf<Val<T>> {
  using type = T;
};
template <class U>
using host_of_t = typename HostOf<std::remove_cv_t<U>>::type;

}  // namespace kiln::dsl
