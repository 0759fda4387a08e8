// Control flow on traced values: if_/else_, for_range, while_, loop, break_, continue_,
// return_. Bodies are C++ lambdas run once at trace time; what they record becomes the body
// of the IR construct. Plain C++ if/for over comptime values simply runs at trace time.
#pragma once

#include <functional>
#include <string_view>
#include <type_traits>

#include "compiler/dsl/value.h"

namespace kiln::dsl {

// The result of if_: lets an else_ or else_if_ follow directly.
//   if_(a < b, [&] { ... }).else_if_(a == b, [&] { ... }).else_([&] { ... });
class ElseChain {
 public:
  ElseChain(uint64_t marker, int outer) : marker_(marker), outer_(outer) {}
  ElseChain(const ElseChain&) = delete;
  ElseChain& operator=(const ElseChain&) = delete;
  ElseChain(ElseChain&& o) noexcept : marker_(o.marker_), outer_(o.outer_) { o.outer_ = 0; }
  ~ElseChain() { close_outer(); }

  template <class F>
  void else_(F&& body, SrcLoc where = SrcLoc::current()) {
    auto& ctx = TraceContext::current();
    if (!reopen(ctx, where, "else_")) return close_outer();
    body();
    ctx.builder().end_if();
    close_outer();
  }

  template <class F>
  ElseChain else_if_(Arg<bool> cond, F&& body);

 private:
  bool reopen(TraceContext& ctx, const SrcLoc& where, const char* what) {
    // else_if_'s condition was evaluated before the call: its ops belong to the else branch.
    const bool condition_first = std::string_view(what) == "else_if_";
    if (ctx.builder().reopen_else(marker_, condition_first)) return true;
    if (ctx.ok())
      ctx.fail(where, fmt::format("{} must directly follow its if_ (or else_if_), in the same "
                                  "expression: if_(c, [&] {{ ... }}).{}(...)",
                                  what, what));
    return false;
  }
  void close_outer() {
    for (; outer_ > 0; --outer_) TraceContext::current().builder().end_if();
  }
  uint64_t marker_;
  int outer_;  // enclosing ifs opened by else_if_ that close with this chain
};

namespace detail {
inline bool scalar_condition(const Arg<bool>& c, const char* what) {
  if (c.lanes() > 1) {
    TraceContext::current().fail(
        c.where(), fmt::format("{} needs a single Bool, got a line of {} lanes; reduce it with "
                               "any(c) or all(c)",
                               what, c.lanes()));
    return false;
  }
  return true;
}
}  // namespace detail

// Runs `then` where `cond` holds.
template <class F>
ElseChain if_(Arg<bool> cond, F&& then) {
  auto& b = TraceContext::current().builder();
  const ir::ValueId c = detail::scalar_condition(cond, "if_") ? cond.value(1) : ir::kNoValue;
  b.begin_if(c, cond.at());
  then();
  b.end_if();
  return ElseChain(b.op_count(), 0);
}

template <class F>
ElseChain ElseChain::else_if_(Arg<bool> cond, F&& body) {
  auto& ctx = TraceContext::current();
  if (!reopen(ctx, cond.where(), "else_if_")) {
    close_outer();
    return ElseChain(0, 0);
  }
  const int outer = outer_ + 1;
  outer_ = 0;
  ElseChain inner = if_(cond, std::forward<F>(body));
  return ElseChain(inner.marker_, outer);
}

// An unroll hint for for_range: unroll(4), or unroll_full for the whole trip count.
struct Unroll {
  uint64_t factor;
};
constexpr Unroll unroll(uint32_t n) {
  return Unroll{n};
}
inline constexpr Unroll unroll_full{ir::kUnrollFull};

namespace detail {

template <class F>
struct LoopIndex {
  using type = uint32_t;  // generic lambdas count in u32
};
template <class C, class R, class A>
A first_param(R (C::*)(A) const);
template <class C, class R, class A>
A first_param(R (C::*)(A));
template <class F>
requires requires {
  &std::remove_cvref_t<F>::operator();
}
struct LoopIndex<F> {
  using type =
      host_of_t<std::remove_cvref_t<decltype(first_param(&std::remove_cvref_t<F>::operator()))>>;
};
template <class F>
using loop_index_t = typename LoopIndex<F>::type;

template <Element I, class F>
void for_loop(const Arg<I>& start, const Arg<I>& end, const Arg<I>& step, uint64_t unroll,
              F&& body) {
  static_assert(is_int_elem_v<I>, "kiln: for_range counts with an integer type");
  auto& b = TraceContext::current().builder();
  const ir::SourceLoc at = start.at();
  const ir::ValueId iv = b.begin_for(start.value(1), end.value(1), step.value(1), unroll, at);
  body(Val<I>::from_id(iv));
  b.end_for();
}

}  // namespace detail

// for (i = start; i < end; i += step) body(i). The index type is the body's parameter type
// (u32 for a generic lambda). A negative step counts down while i > end.
template <class F, class I = detail::loop_index_t<F>>
void for_range(std::type_identity_t<Arg<I>> start, std::type_identity_t<Arg<I>> end, F&& body) {
  detail::for_loop<I>(start, end, Arg<I>(1, start.where()), 0, std::forward<F>(body));
}
template <class F, class I = detail::loop_index_t<F>>
void for_range(std::type_identity_t<Arg<I>> start, std::type_identity_t<Arg<I>> end,
               std::type_identity_t<Arg<I>> step, F&& body) {
  detail::for_loop<I>(start, end, step, 0, std::forward<F>(body));
}
template <class F, class I = detail::loop_index_t<F>>
void for_range(std::type_identity_t<Arg<I>> start, std::type_identity_t<Arg<I>> end,
               std::type_identity_t<Arg<I>> step, Unroll u, F&& body) {
  detail::for_loop<I>(start, end, step, u.factor, std::forward<F>(body));
}

// Repeats `body` until break_() (or return_()).
template <class F>
void loop(F&& body, SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  ctx.builder().begin_loop(ctx.loc(where));
  body();
  ctx.builder().end_loop();
}

// while (cond()) body(); the condition is a lambda, traced at the top of every iteration.
template <class C, class F>
void while_(C&& cond, F&& body, SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  auto& b = ctx.builder();
  const ir::SourceLoc at = ctx.loc(where);
  b.begin_loop(at);
  const Arg<bool> c(cond(), where);
  if (detail::scalar_condition(c, "while_")) {
    b.begin_if(b.op(ir::OpKind::Not, {c.value(1)}, at), at);
    b.op(ir::OpKind::Break, {}, at);
    b.end_if();
  }
  body();
  b.end_loop();
}

inline void break_(SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::Break, {}, ctx.loc(where));
}
inline void continue_(SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::Continue, {}, ctx.loc(where));
}
// Ends the kernel for this unit.
inline void return_(SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  ctx.builder().op(ir::OpKind::Return, {}, ctx.loc(where));
}

}  // namespace kiln::dsl
