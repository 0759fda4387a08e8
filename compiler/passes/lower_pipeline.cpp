// The in-order meaning of a pipeline (lower_pipeline.h).
#include "compiler/passes/lower_pipeline.h"

#include <utility>
#include <vector>

#include "compiler/passes/build_op.h"
#include "ir/ops.h"

namespace kiln::passes {

using namespace ir;

namespace {

// Builds the ops that replace one pipeline, all with its source location.
class Lowering {
 public:
  Lowering(Kernel& k, SourceLoc at) : k_(k), at_(at) {}

  // An op of `kind` defining `result` (kNoValue: a new value of the op's type, if it has one).
  ValueId emit(std::vector<Op>& to, OpKind kind, std::vector<ValueId> operands, Attr attr = {},
               Type type = Type::void_type(), ValueId result = kNoValue) {
    to.push_back(build_op(k_, kind, operands, std::move(attr), type, at_, result));
    return to.back().result;
  }
  ValueId u32(std::vector<Op>& to, uint32_t v) {
    Attr a;
    a.i = v;
    return emit(to, OpKind::Const, {}, a, Type::value(ElemType::U32));
  }

  // The ops that replace pipeline `p`.
  std::vector<Op> lower(Op& p) {
    const ValueId rounds = p.operands[0], full = p.operands[1], empty = p.operands[2];
    const uint32_t stages = pipeline_stages(p.attr.i);
    Region& produce = p.regions[0];
    Region& consume = p.regions[1];
    std::vector<Op> out;
    for (uint32_t s = 0; s < stages; ++s) {
      Attr one;
      one.i = 1;
      emit(out, OpKind::MbarInit, {full, u32(out, s)}, one);
      // A consume region's tcgen05.commit arrives on the empty mbarriers (`, commit`).
      emit(out, OpKind::MbarInit, {empty, u32(out, s)}, one);
    }
    const ValueId zero = u32(out, 0), step = u32(out, 1);
    Op loop;
    loop.kind = OpKind::For;
    loop.loc = at_;
    loop.operands = {zero, rounds, step};
    loop.regions.resize(1);
    // The loop's index is the produce region's round; its stage and the consume region's
    // round and stage are computed from it.
    const ValueId r = produce.args[0];
    loop.regions[0].args.push_back(r);
    std::vector<Op>& body = loop.regions[0].ops;
    const ValueId n = u32(body, stages);
    const ValueId s = emit(body, OpKind::Rem, {r, n}, {}, {}, produce.args[1]);
    const ValueId z = u32(body, 0);
    emit(body, OpKind::Add, {r, z}, {}, {}, consume.args[0]);
    emit(body, OpKind::Add, {s, z}, {}, {}, consume.args[1]);
    for (Op& op : produce.ops) body.push_back(std::move(op));
    const ValueId phase = emit(body, OpKind::Div, {r, n});
    const ValueId parity = emit(body, OpKind::And, {phase, u32(body, 1)});
    emit(body, OpKind::MbarWait, {full, s, parity});
    for (Op& op : consume.ops) body.push_back(std::move(op));
    out.push_back(std::move(loop));
    return out;
  }

 private:
  Kernel& k_;
  SourceLoc at_;
};

}  // namespace

bool lower_pipelines(Kernel& k) {
  std::vector<Op>& ops = k.body.ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::Pipeline) continue;
    Op p = std::move(ops[i]);
    std::vector<Op> lowered = Lowering(k, p.loc).lower(p);
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i));
    ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(i),
               std::make_move_iterator(lowered.begin()), std::make_move_iterator(lowered.end()));
    return true;  // a kernel has at most one (the verifier's rule)
  }
  return false;
}

}  // namespace kiln::passes
