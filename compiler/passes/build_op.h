// Building the ops a pass inserts.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/ir.h"

namespace kiln::passes {

// A new op of `kind` at `at`, its operand types checked as the verifier would (a pass that builds
// an ill-typed op is a bug: the check aborts). Its result, if the op has one, is `result` (a value
// the pass gives a new definition) or else a new value of the op's type; `declared` is the type
// of ops whose result type is written out (const, cast, ...).
inline ir::Op build_op(ir::Kernel& k, ir::OpKind kind, std::span<const ir::ValueId> operands,
                       ir::Attr attr, const ir::Type& declared, ir::SourceLoc at,
                       ir::ValueId result = ir::kNoValue) {
  ir::Op op;
  op.kind = kind;
  op.operands.assign(operands.begin(), operands.end());
  op.attr = std::move(attr);
  op.loc = at;
  std::vector<ir::Type> types;
  for (ir::ValueId v : operands) types.push_back(k.type_of(v));
  ir::Type t = ir::sig_result_is_explicit(ir::op_info(kind).sig) ? declared : ir::Type::void_type();
  const std::string e = ir::check_op_types(kind, types, op.attr, t);
  KILN_CHECK(e.empty(), "a pass built an ill-typed op");
  if (ir::sig_has_result(ir::op_info(kind).sig))
    op.result = result != ir::kNoValue ? result : k.new_value(t);
  return op;
}

}  // namespace kiln::passes
