// Memory in the DSL: Tensor<T> and Array<T> kernel parameters, shared and local arrays, and
// the element references that indexing returns (reading one loads a line, assigning stores).
#pragma once

#include <array>
#include <span>

#include "compiler/dsl/value.h"

namespace kiln::dsl {

namespace detail {

// The parameter name of a memory value, for messages ("tensor 'x'"), or its kind.
std::string describe_memory(ir::ValueId mem);

}  // namespace detail

// A reference to one line of memory. Converting it to a value loads; assigning stores.
// Keep `f32 v = x[i];` (not `auto`) to load once: an `auto` reference loads at every use.
template <Element T, bool ReadOnly>
class MemElem : public Ops<T> {
 public:
  using elem_type = T;

  MemElem(ir::ValueId mem, ir::ValueId index) : mem_(mem), index_(index) {}

  Val<T> read(const SrcLoc& where) const {
    auto& ctx = TraceContext::current();
    return Val<T>::from_id(ctx.builder().op(ir::OpKind::Load, {mem_, index_}, ctx.loc(where)));
  }

  MemElem& operator=(Arg<T> v) {
    store(v, v.at());
    return *this;
  }
  // A non-const reference, as for Var: `y[i] = x[i]` (a temporary) goes through Arg<T> and
  // keeps its call site; only an lvalue reference to another element lands here.
  MemElem& operator=(MemElem& other) {
    const SrcLoc here = SrcLoc::current();  // C++ gives no call site here; use the latest one
    auto& ctx = TraceContext::current();
    const ir::SourceLoc at = ctx.last_loc();
    store(Arg<T>(other.read(here), here), at);
    return *this;
  }
  template <Element U, bool R>
  requires(!std::same_as<U, T>) MemElem& operator=(const MemElem<U, R>&) {
    static_assert(dependent_false<U>,
                  "kiln: cannot store a value of another element type; use cast<T>(x)");
    return *this;
  }

#define KILN_DSL_COMPOUND(op, kind)                                                               \
  MemElem& operator op##=(Arg<T> v) {                                                             \
    store(                                                                                        \
        Arg<T>(detail::emit<T>(ir::OpKind::kind, #op "=", Arg<T>(read(v.where()), v.where()), v), \
               v.where()),                                                                        \
        v.at());                                                                                  \
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

  ir::ValueId memory() const {
    return mem_;
  }
  ir::ValueId index() const {
    return index_;
  }

 private:
  void store(const Arg<T>& v, ir::SourceLoc at) {
    static_assert(!ReadOnly,
                  "kiln: this memory is read-only (declared Tensor<const T> or Array<const T>); "
                  "declare it without const to write it");
    auto& ctx = TraceContext::current();
    auto& b = ctx.builder();
    if (mem_ == ir::kNoValue || index_ == ir::kNoValue) return;
    const ir::Type& mt = b.type_of(mem_);
    if (mt.read_only) {
      ctx.fail(at, fmt::format("{} was passed read-only, so it cannot be written; pass it "
                               "writable or do not store to it",
                               detail::describe_memory(mem_)));
      return;
    }
    const int l = v.lanes();
    if (l > 1 && l != mt.lanes) {
      ctx.fail(at, fmt::format("storing a line of {} lanes into {}, whose lines have {} lane{}", l,
                               detail::describe_memory(mem_), mt.lanes, mt.lanes == 1 ? "" : "s"));
      return;
    }
    b.op(ir::OpKind::Store, {mem_, index_, v.value(mt.lanes)}, at);
  }

  ir::ValueId mem_;
  ir::ValueId index_;
};

namespace detail {

// Shared by every memory kind: indexing, len() and the element-type checks of indices.
template <class V>
class MemoryBase {
 public:
  using T = host_of_t<V>;
  static constexpr bool kReadOnly = std::is_const_v<V>;
  using Elem = MemElem<T, kReadOnly>;

  MemoryBase() = default;
  explicit MemoryBase(ir::ValueId id) : id_(id) {}

  // Line i (a line index: element i * line_size()).
  Elem operator[](Arg<uint32_t> i) const { return Elem(id_, i.value(1)); }
  template <DslExpr E>
  requires(!std::same_as<typename E::elem_type, uint32_t>) Elem operator[](const E&) const {
    static_assert(dependent_false<E>, "kiln: indices are u32; convert with cast<u32>(i)");
    return Elem(ir::kNoValue, ir::kNoValue);
  }

  // The number of lines.
  Val<uint32_t> len(SrcLoc where = SrcLoc::current()) const {
    auto& ctx = TraceContext::current();
    return Val<uint32_t>::from_id(ctx.builder().op(ir::OpKind::Len, {id_}, ctx.loc(where)));
  }
  int line_size() const {
    return id_ == ir::kNoValue ? 1 : TraceContext::current().builder().type_of(id_).lanes;
  }
  ir::ValueId id() const { return id_; }

 protected:
  ir::ValueId id_ = ir::kNoValue;
};

}  // namespace detail

// A tensor parameter: global memory with a rank fixed per specialization and runtime shape and
// strides (in elements). Tensor<const T> is read-only.
template <class V>
class Tensor : public detail::MemoryBase<V> {
  using Base = detail::MemoryBase<V>;

 public:
  using Base::Base;
  using typename Base::Elem;
  using typename Base::T;

  int rank() const {
    return this->id_ == ir::kNoValue ? 0
                                     : TraceContext::current().builder().type_of(this->id_).rank;
  }
  Val<uint32_t> shape(int dim, SrcLoc where = SrcLoc::current()) const {
    return meta(ir::OpKind::Shape, dim, where);
  }
  Val<uint32_t> stride(int dim, SrcLoc where = SrcLoc::current()) const {
    return meta(ir::OpKind::Stride, dim, where);
  }

  // Multi-dimensional indexing: t(i, j) is row i, line j of a rank-2 tensor. The last index
  // counts lines along the innermost dimension (elements when line_size() is 1); the others
  // count elements of their dimension.
  Elem operator()(Arg<uint32_t> i0) const {
    const Arg<uint32_t>* is[] = {&i0};
    return index(is);
  }
  Elem operator()(Arg<uint32_t> i0, Arg<uint32_t> i1) const {
    const Arg<uint32_t>* is[] = {&i0, &i1};
    return index(is);
  }
  Elem operator()(Arg<uint32_t> i0, Arg<uint32_t> i1, Arg<uint32_t> i2) const {
    const Arg<uint32_t>* is[] = {&i0, &i1, &i2};
    return index(is);
  }
  Elem operator()(Arg<uint32_t> i0, Arg<uint32_t> i1, Arg<uint32_t> i2, Arg<uint32_t> i3) const {
    const Arg<uint32_t>* is[] = {&i0, &i1, &i2, &i3};
    return index(is);
  }

 private:
  Val<uint32_t> meta(ir::OpKind kind, int dim, const SrcLoc& where) const {
    auto& ctx = TraceContext::current();
    if (dim < 0 || dim >= rank()) {
      ctx.fail(where, fmt::format("dimension {} is out of range for {} of rank {}", dim,
                                  detail::describe_memory(this->id_), rank()));
      return Val<uint32_t>{};
    }
    ir::Attr a;
    a.i = static_cast<uint64_t>(dim);
    return Val<uint32_t>::from_id(ctx.builder().op(kind, {this->id_}, ctx.loc(where), {}, a));
  }
  Elem index(std::span<const Arg<uint32_t>* const> is) const;
};

template <class V>
typename Tensor<V>::Elem Tensor<V>::index(std::span<const Arg<uint32_t>* const> is) const {
  auto& ctx = TraceContext::current();
  auto& b = ctx.builder();
  const SrcLoc& where = is[0]->where();
  const int r = rank();
  if (static_cast<int>(is.size()) != r) {
    ctx.fail(where, fmt::format("{} has rank {} but is indexed with {} ind{}",
                                detail::describe_memory(this->id_), r, is.size(),
                                is.size() == 1 ? "ex" : "ices"));
    return Elem(ir::kNoValue, ir::kNoValue);
  }
  // All arithmetic is emitted here with the caller's location (not through the operators,
  // which would record this header's lines).
  const ir::SourceLoc at = is[0]->at();
  const int line = this->line_size();
  auto stride_of = [&](int d) { return stride(d, where).id(); };
  auto add = [&](ir::ValueId a, ir::ValueId x) {
    return a == ir::kNoValue ? x : b.op(ir::OpKind::Add, {a, x}, at);
  };
  // The outer indices count elements; the last counts lines along the innermost dimension.
  // The launch guarantees that with a line width above 1 the innermost stride is 1 and the
  // outer strides are multiples of the width.
  ir::ValueId offset = ir::kNoValue;
  for (int d = 0; d + 1 < r; ++d)
    offset = add(offset, b.op(ir::OpKind::Mul, {is[d]->value(1), stride_of(d)}, at));
  const ir::ValueId last = is[r - 1]->value(1);
  ir::ValueId lines;
  if (line == 1) {
    lines = add(offset, b.op(ir::OpKind::Mul, {last, stride_of(r - 1)}, at));
  } else if (offset == ir::kNoValue) {
    lines = last;
  } else {
    const ir::ValueId width = b.const_uint(ir::Type::value(ir::ElemType::U32), line, at);
    lines = b.op(ir::OpKind::Add, {b.op(ir::OpKind::Div, {offset, width}, at), last}, at);
  }
  if (ctx.checked()) {
    // Every index below its dimension (the last in lines), or the access is reported here
    // and sent outside the footprint, where checked mode skips it: an index past one dimension
    // lands between a strided view's elements, which the footprint alone does not catch.
    ir::ValueId inside = ir::kNoValue;
    for (int d = 0; d < r; ++d) {
      ir::ValueId bound = shape(d, where).id();
      if (d + 1 == r && line > 1)
        bound = b.op(ir::OpKind::Div,
                     {bound, b.const_uint(ir::Type::value(ir::ElemType::U32), line, at)}, at);
      const ir::ValueId below = b.op(ir::OpKind::Lt, {is[d]->value(1), bound}, at);
      ir::Attr a;
      a.s = fmt::format("index {} of {} is not below {} (checked mode: the access is skipped)", d,
                        detail::describe_memory(this->id_),
                        d + 1 == r && line > 1 ? fmt::format("shape({}) / {}", d, line)
                                               : fmt::format("shape({})", d));
      b.op(ir::OpKind::Assert, {below}, at, {}, std::move(a));
      inside = inside == ir::kNoValue ? below : b.op(ir::OpKind::And, {inside, below}, at);
    }
    lines = b.op(ir::OpKind::Select,
                 {inside, lines, b.const_uint(ir::Type::value(ir::ElemType::U32), ~0u, at)}, at);
  }
  return Elem(this->id_, lines);
}

// A 1-D array parameter with a runtime length. Array<const T> is read-only.
template <class V>
class Array : public detail::MemoryBase<V> {
  using Base = detail::MemoryBase<V>;

 public:
  using Base::Base;
};

// Memory shared by the units of a cube (shared_array) or private to a unit (local_array),
// with a size fixed at trace time.
template <class V>
class SharedArray : public detail::MemoryBase<V> {
  using Base = detail::MemoryBase<V>;

 public:
  using Base::Base;
};

template <class V>
class LocalArray : public detail::MemoryBase<V> {
  using Base = detail::MemoryBase<V>;

 public:
  using Base::Base;
};

// `count` lines of `line` lanes, allocated once per cube. Call at the top level of the kernel.
template <class V>
SharedArray<V> shared_array(uint32_t count, int line = 1, SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  using T = host_of_t<V>;
  if (!ir::valid_lanes(line)) {
    ctx.fail(where, fmt::format("line width {} is not 1, 2, 4, 8 or 16", line));
    return SharedArray<V>();
  }
  return SharedArray<V>(ctx.builder().op(ir::OpKind::AllocShared, {}, ctx.loc(where),
                                         ir::Type::shared(elem_v<T>, line, count)));
}

// `count` lines of `line` lanes, private to each unit. Call at the top level of the kernel.
template <class V>
LocalArray<V> local_array(uint32_t count, int line = 1, SrcLoc where = SrcLoc::current()) {
  auto& ctx = TraceContext::current();
  using T = host_of_t<V>;
  if (!ir::valid_lanes(line)) {
    ctx.fail(where, fmt::format("line width {} is not 1, 2, 4, 8 or 16", line));
    return LocalArray<V>();
  }
  return LocalArray<V>(ctx.builder().op(ir::OpKind::AllocLocal, {}, ctx.loc(where),
                                        ir::Type::local(elem_v<T>, line, count)));
}

}  // namespace kiln::dsl
