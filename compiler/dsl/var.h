// Var<T>: a mutable variable of a kernel, private to each unit. The one way to carry a value
// out of an if_ or loop body, or from one loop iteration to the next.
#pragma once

#include "compiler/dsl/value.h"

namespace kiln::dsl {

template <class V>
class Var : public Ops<host_of_t<V>> {
 public:
  using elem_type = host_of_t<V>;
  using T = elem_type;

  template <Literal L>
  Var(L init, SrcLoc where = SrcLoc::current()) {
    create(Arg<T>(init, where));
  }
  Var(const Val<T>& init, SrcLoc where = SrcLoc::current()) { create(Arg<T>(init, where)); }
  template <DslExpr E>
  requires std::same_as<typename E::elem_type, T> &&
      (!std::same_as<E, Val<T>>)Var(const E& init, SrcLoc where = SrcLoc::current()) {
    create(Arg<T>(init, where));
  }
  // Copying a Var makes a new variable holding the other's current value.
  Var(const Var& other, SrcLoc where = SrcLoc::current()) {
    create(Arg<T>(other.read(where), where));
  }
  // Moving a Var hands over the same variable (containers of Vars grow without new variables).
  Var(Var&& other) noexcept : id_(other.id_), lanes_(other.lanes_) { other.id_ = ir::kNoValue; }

  Var& operator=(Arg<T> v) {
    write(v);
    return *this;
  }
  // Copy assignment takes a non-const reference on purpose: it suppresses the implicit
  // operator=(const Var&), which would make `v = x[i]` ambiguous with operator=(Arg<T>). A
  // const Var on the right goes through Arg<T> instead.
  Var& operator=(Var& other) {
    auto& ctx = TraceContext::current();
    const SrcLoc here = SrcLoc::current();  // C++ gives no call site here; use the latest one
    write_at(Arg<T>(other.read(here), here), ctx.last_loc());
    return *this;
  }

#define KILN_DSL_COMPOUND(op, kind)                                                               \
  Var& operator op##=(Arg<T> v) {                                                                 \
    write(                                                                                        \
        Arg<T>(detail::emit<T>(ir::OpKind::kind, #op "=", Arg<T>(read(v.where()), v.where()), v), \
               v.where()));                                                                       \
    return *this;                                                                                 \
  }
  KILN_DSL_COMPOUND(+, Add)
  KILN_DSL_COMPOUND(-, Sub)
  KILN_DSL_COMPOUND(*, Mul)
  KILN_DSL_COMPOUND(/, Div)
  KILN_DSL_COMPOUND(%, Rem)
  KILN_DSL_COMPOUND(&, And)
  KILN_DSL_COMPOUND(|, Or)
  KILN_DSL_COMPOUND(^, Xor)
  KILN_DSL_COMPOUND(<<, Shl)
  KILN_DSL_COMPOUND(>>, Shr)
#undef KILN_DSL_COMPOUND

  Val<T> read(const SrcLoc& where) const {
    auto& ctx = TraceContext::current();
    if (id_ == ir::kNoValue) return Val<T>{};
    return Val<T>::from_id(ctx.builder().op(ir::OpKind::VarRead, {id_}, ctx.loc(where)));
  }
  // The current value, read here.
  Val<T> get(SrcLoc where = SrcLoc::current()) const {
    return read(where);
  }
  int line_size() const {
    return lanes_;
  }
  ir::ValueId id() const {
    return id_;
  }

 private:
  void create(const Arg<T>& init) {
    auto& ctx = TraceContext::current();
    const ir::ValueId v = init.value();
    lanes_ = std::max(init.lanes(), 1);
    id_ = ctx.builder().op(ir::OpKind::Var, {v}, init.at());
  }
  void write(const Arg<T>& v) {
    write_at(v, v.at());
  }
  void write_at(const Arg<T>& v, ir::SourceLoc at) {
    auto& ctx = TraceContext::current();
    if (id_ == ir::kNoValue) return;
    const int l = v.lanes();
    if (l > 1 && l != lanes_) {
      ctx.fail(at, fmt::format("writing a line of {} lanes into a Var<{}> of {} lane{}; "
                               "initialise the Var with a line of that width (splat)",
                               l, elem_name_of<T>(), lanes_, lanes_ == 1 ? "" : "s"));
      return;
    }
    ctx.builder().op(ir::OpKind::VarWrite, {id_, v.value(lanes_)}, at);
  }

  ir::ValueId id_ = ir::kNoValue;
  int lanes_ = 1;
};

}  // namespace kiln::dsl
