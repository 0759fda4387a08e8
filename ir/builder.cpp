// Builder implementation: a stack of open regions; each op is type-checked and scope-checked
// when added, with the same rules the verifier applies (check_op_types), so both agree.
#include "ir/builder.h"

#include <algorithm>

#include <fmt/format.h>

#include "ir/verifier.h"

namespace kiln::ir {

Builder::Builder(std::string kernel_name) {
  k_.name = std::move(kernel_name);
  frames_.emplace_back();
}

SourceLoc Builder::loc(const std::string& file, uint32_t line) {
  return SourceLoc{k_.file_index(file), line};
}

void Builder::fail(SourceLoc at, const std::string& message, ErrorKind kind) {
  if (error_) return;
  const std::string where = k_.loc_string(at);
  error_ = Error(kind,
                 fmt::format("{}: error: {}",
                             where.empty() ? fmt::format("kernel '{}'", k_.name) : where, message));
}

const Type& Builder::type_of(ValueId v) const {
  static const Type kVoid;
  return v < k_.value_types.size() ? k_.value_types[v] : kVoid;
}

Region& Builder::current() {
  if (frames_.size() == 1) return k_.body;
  return top().op.regions[static_cast<size_t>(top().region)];
}

int Builder::loop_depth() const {
  int n = 0;
  for (size_t i = 1; i < frames_.size(); ++i)
    if (frames_[i].op.kind == OpKind::For || frames_[i].op.kind == OpKind::Loop) ++n;
  return n;
}

bool Builder::block_terminated() const {
  return frames_.back().terminated;
}

void Builder::define(ValueId v) {
  if (v >= visible_.size()) visible_.resize(v + 1, 0);
  visible_[v] = 1;
  top().defined.push_back(v);
}

ValueId Builder::param(const std::string& name, const Type& t) {
  const ValueId v = k_.new_value(t);
  k_.params.push_back(Param{name, v, {}});
  if (v >= visible_.size()) visible_.resize(v + 1, 0);
  visible_[v] = 1;
  return v;
}

std::string Builder::dead_code_message() const {
  const std::string_view jump = op_name(frames_.back().terminator);
  return fmt::format(
      "this code comes after a '{}' in the same block and would never run; "
      "remove it or move it before the '{}'",
      jump, jump);
}

void Builder::set_cube_dim(uint32_t x, uint32_t y, uint32_t z) {
  k_.cube_dim = {x, y, z};
}

void Builder::set_cluster_dim(uint32_t x, uint32_t y, uint32_t z) {
  k_.cluster_dim = {x, y, z};
}

bool Builder::check_operands(std::span<const ValueId> operands, SourceLoc at,
                             std::string_view what) {
  for (ValueId v : operands) {
    if (v == kNoValue) {
      // Only after an earlier failure; that error is the one to report.
      if (ok()) fail(at, fmt::format("'{}' uses a value that was never built", what));
      return false;
    }
    if (v >= k_.value_types.size()) {
      fail(at, fmt::format("'{}' uses a value that does not belong to this kernel", what));
      return false;
    }
    if (v >= visible_.size() || !visible_[v]) {
      fail(at, fmt::format("'{}' uses a value outside the region (if/loop body) that defines "
                           "it; carry it out in a variable (Var) instead",
                           what));
      return false;
    }
  }
  return true;
}

bool Builder::add_op(Op op) {
  if (top().terminated) {
    fail(op.loc, dead_code_message());
    return false;
  }
  current().ops.push_back(std::move(op));
  ++ops_added_;
  return true;
}

ValueId Builder::op(OpKind kind, std::span<const ValueId> operands, SourceLoc at, const Type& type,
                    Attr attr) {
  if (!ok()) return kNoValue;
  const OpInfo& info = op_info(kind);
  KILN_CHECK(sig_region_count(info.sig) == 0, "use begin_if/begin_for/begin_loop for regions");
  if (!check_operands(operands, at, info.name)) return kNoValue;
  SmallVector<Type, 4> types;
  for (ValueId v : operands) types.push_back(k_.value_types[v]);
  Type result = sig_result_is_explicit(info.sig) ? type : Type::void_type();
  const std::string e = check_op_types(kind, {types.data(), types.size()}, attr, result);
  if (!e.empty()) {
    fail(at, e);
    return kNoValue;
  }
  if ((kind == OpKind::AllocShared || kind == OpKind::AllocLocal) && depth() != 0) {
    fail(at, fmt::format("'{}' must be at the top level of the kernel, not inside if/loop "
                         "bodies: memory is allocated once per {}",
                         kind == OpKind::AllocShared ? "shared_array" : "local_array",
                         kind == OpKind::AllocShared ? "cube" : "unit"));
    return kNoValue;
  }
  if (kind == OpKind::AllocFrag && depth() != 0) {
    fail(at,
         "a matrix fragment must be declared at the top level of the kernel, not inside "
         "if/loop bodies: it is allocated once per plane");
    return kNoValue;
  }
  if ((kind == OpKind::Break || kind == OpKind::Continue) && loop_depth() == 0) {
    fail(at, fmt::format("'{}' outside a loop; it must be inside a for/while/loop body",
                         kind == OpKind::Break ? "break" : "continue"));
    return kNoValue;
  }
  Op o;
  o.kind = kind;
  o.operands.assign(operands.begin(), operands.end());
  o.attr = std::move(attr);
  o.loc = at;
  if (sig_has_result(info.sig)) o.result = k_.new_value(result);
  const ValueId r = o.result;
  if (!add_op(std::move(o))) return kNoValue;
  if (r != kNoValue) define(r);
  if (has_flag(kind, op_flags::Terminator)) {
    top().terminated = true;
    top().terminator = kind;
  }
  return r;
}

ValueId Builder::const_int(const Type& t, int64_t v, SourceLoc at) {
  Attr a;
  a.i = static_cast<uint64_t>(v);
  return op(OpKind::Const, {}, at, t, std::move(a));
}

ValueId Builder::const_uint(const Type& t, uint64_t v, SourceLoc at) {
  Attr a;
  a.i = v;
  return op(OpKind::Const, {}, at, t, std::move(a));
}

ValueId Builder::const_float(const Type& t, double v, SourceLoc at) {
  Attr a;
  a.f = is_float(t.elem) ? round_float_literal(t.elem, v) : v;
  return op(OpKind::Const, {}, at, t, std::move(a));
}

ValueId Builder::const_bool(bool v, SourceLoc at, int lanes) {
  Attr a;
  a.i = v ? 1 : 0;
  return op(OpKind::Const, {}, at, Type::value(ElemType::Bool, lanes), std::move(a));
}

void Builder::push(Op op) {
  Frame f;
  f.op = std::move(op);
  frames_.push_back(std::move(f));
}

void Builder::begin_if(ValueId cond, SourceLoc at) {
  Op o;
  o.kind = OpKind::If;
  o.loc = at;
  o.regions.resize(2);
  if (ok() && check_operands({&cond, 1}, at, "if")) {
    if (!(k_.value_types[cond] == Type::value(ElemType::Bool)))
      fail(at, fmt::format("the condition of an if must be a bool scalar, got {}",
                           type_name(k_.value_types[cond])));
    else if (top().terminated)
      fail(at, dead_code_message());
    o.operands.push_back(cond);
  }
  push(std::move(o));  // pushed even after an error, so begin/end stay paired
}

void Builder::close_region() {
  for (ValueId v : top().defined) visible_[v] = 0;
  top().defined.clear();
  top().terminated = false;
}

void Builder::begin_else() {
  if (frames_.size() < 2 || top().op.kind != OpKind::If || top().region != 0) {
    fail(SourceLoc{}, "else without a matching if", ErrorKind::Trace);
    return;
  }
  close_region();
  top().region = 1;
}

void Builder::end_region_of(OpKind kind, const char* what) {
  if (frames_.size() < 2 || top().op.kind != kind) {
    fail(SourceLoc{}, fmt::format("end of {} without a matching begin", what));
    return;
  }
  close_region();
  Op o = std::move(top().op);
  frames_.pop_back();
  if (!ok()) return;
  add_op(std::move(o));
}

void Builder::end_if() {
  end_region_of(OpKind::If, "if");
}

bool Builder::reopen_else(uint64_t marker, bool take_trailing) {
  if (!ok() || marker > ops_added_) return false;
  const uint64_t trailing = ops_added_ - marker;
  if (trailing != 0 && !take_trailing) return false;
  Region& r = current();
  if (r.ops.size() < trailing + 1) return false;
  const size_t if_index = r.ops.size() - 1 - trailing;
  Op& iff = r.ops[if_index];
  if (iff.kind != OpKind::If || iff.regions.size() != 2 || !iff.regions[1].ops.empty())
    return false;
  for (size_t i = if_index + 1; i < r.ops.size(); ++i) {
    const OpKind k = r.ops[i].kind;
    const bool movable = has_flag(k, op_flags::Pure) || k == OpKind::Load || k == OpKind::VarRead;
    if (!movable) return false;
  }
  // Take the if and the ops after it out of the region; the if becomes the open frame and the
  // trailing ops (and the values they define) go into its else branch.
  std::vector<Op> moved(std::make_move_iterator(r.ops.begin() + static_cast<long>(if_index) + 1),
                        std::make_move_iterator(r.ops.end()));
  Op o = std::move(iff);
  r.ops.resize(if_index);
  ops_added_ -= trailing + 1;
  std::vector<ValueId> moved_values;
  for (const Op& m : moved)
    if (m.result != kNoValue) moved_values.push_back(m.result);
  auto& parent_defined = top().defined;
  std::erase_if(parent_defined, [&](ValueId v) {
    return std::find(moved_values.begin(), moved_values.end(), v) != moved_values.end();
  });
  push(std::move(o));
  top().region = 1;
  for (Op& m : moved) {
    current().ops.push_back(std::move(m));
    ++ops_added_;
  }
  top().defined = std::move(moved_values);
  return true;
}

ValueId Builder::begin_for(ValueId start, ValueId end, ValueId step, uint64_t unroll,
                           SourceLoc at) {
  Op o;
  o.kind = OpKind::For;
  o.loc = at;
  o.attr.i = unroll;
  o.regions.resize(1);
  ValueId iv = kNoValue;
  const ValueId bounds[3] = {start, end, step};
  if (ok() && check_operands(bounds, at, "for")) {
    std::vector<Type> types{k_.value_types[start], k_.value_types[end], k_.value_types[step]};
    Type none;
    const std::string e = check_op_types(OpKind::For, types, o.attr, none);
    if (!e.empty()) {
      fail(at, e);
    } else if (top().terminated) {
      fail(at, dead_code_message());
    } else {
      o.operands = {start, end, step};
      iv = k_.new_value(types[0]);
      o.regions[0].args.push_back(iv);
    }
  }
  push(std::move(o));
  if (iv != kNoValue) define(iv);
  return iv;
}

void Builder::end_for() {
  end_region_of(OpKind::For, "for");
}

std::pair<ValueId, ValueId> Builder::begin_pipeline(ValueId rounds, ValueId full, ValueId empty,
                                                    uint32_t stages, uint32_t lag, bool commit,
                                                    SourceLoc at, PipelineRegisters regs) {
  Op o;
  o.kind = OpKind::Pipeline;
  o.loc = at;
  o.attr.i = pipeline_attr(stages, lag, commit, regs);
  o.regions.resize(2);
  std::pair<ValueId, ValueId> rs{kNoValue, kNoValue};
  const ValueId operands[3] = {rounds, full, empty};
  if (ok() && check_operands(operands, at, "pipeline")) {
    std::vector<Type> types{k_.value_types[rounds], k_.value_types[full], k_.value_types[empty]};
    Type none;
    const std::string e = check_op_types(OpKind::Pipeline, types, o.attr, none);
    if (!e.empty()) {
      fail(at, e);
    } else if (frames_.size() != 1) {
      fail(at, "a pipeline must be at the top level of the kernel, not inside control flow");
    } else if (top().terminated) {
      fail(at, dead_code_message());
    } else {
      o.operands = {rounds, full, empty};
      for (Region& r : o.regions)
        for (int i = 0; i < 2; ++i) r.args.push_back(k_.new_value(Type::value(ElemType::U32)));
      rs = {o.regions[0].args[0], o.regions[0].args[1]};
    }
  }
  push(std::move(o));
  if (rs.first != kNoValue) {
    define(rs.first);
    define(rs.second);
  }
  return rs;
}

std::pair<ValueId, ValueId> Builder::begin_consume() {
  if (frames_.size() < 2 || top().op.kind != OpKind::Pipeline || top().region != 0) {
    fail(SourceLoc{}, "a consume region without a matching pipeline", ErrorKind::Trace);
    return {kNoValue, kNoValue};
  }
  close_region();
  top().region = 1;
  const Region& r = top().op.regions[1];
  if (r.args.size() != 2) return {kNoValue, kNoValue};
  define(r.args[0]);
  define(r.args[1]);
  return {r.args[0], r.args[1]};
}

void Builder::end_pipeline() {
  end_region_of(OpKind::Pipeline, "pipeline");
}

void Builder::begin_loop(SourceLoc at) {
  Op o;
  o.kind = OpKind::Loop;
  o.loc = at;
  o.regions.resize(1);
  if (ok() && top().terminated) fail(at, dead_code_message());
  push(std::move(o));
}

void Builder::end_loop() {
  end_region_of(OpKind::Loop, "loop");
}

Result<Kernel> Builder::finish() && {
  if (error_) return *error_;
  if (frames_.size() != 1)
    return Error(ErrorKind::Trace,
                 fmt::format("kernel '{}': {} region(s) were opened and never closed", k_.name,
                             frames_.size() - 1));
  KILN_TRY(verify(k_));
  return std::move(k_);
}

}  // namespace kiln::ir
