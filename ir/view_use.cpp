// The view-use analysis: a forward data-flow of "depends on the strides of parameter p" masks
// through values, variables and loop arguments, to a fixed point; then every memory access is
// classified by whether its index (or the leading dimension of a fragment access) carries the
// mask bit of the memory it reaches.
#include "ir/view_use.h"

#include <unordered_map>

namespace kiln::ir {

namespace {

constexpr int kMaxTracked = 64;  // parameters beyond this are treated as honoring strides

// The memory operand and the operands that form its index, for each access to a tensor, and
// whether the access writes that memory.
struct Access {
  size_t mem;
  size_t index;
  size_t ld = SIZE_MAX;  // a fragment access's leading dimension, which may carry the stride
  bool writes = false;
};

void accesses(const Op& op, SmallVector<Access, 2>& out) {
  switch (op.kind) {
    case OpKind::Load:
      out.push_back({0, 1});
      return;
    case OpKind::Store:
    case OpKind::AtomicAdd:
    case OpKind::AtomicMin:
    case OpKind::AtomicMax:
    case OpKind::AtomicExchange:
    case OpKind::AtomicCas:
      out.push_back({0, 1, SIZE_MAX, true});
      return;
    case OpKind::FragLoad:
      out.push_back({1, 2, 3});
      return;
    case OpKind::FragStore:
      out.push_back({0, 1, 2, true});
      return;
    case OpKind::FragMmaScaled:
      out.push_back({3, 4, 5});
      out.push_back({6, 7, 8});
      return;
    case OpKind::AsyncCopy:
      out.push_back({2, 3});
      return;
    default:
      return;
  }
}

}  // namespace

std::vector<ParamViewUse> view_use(const Kernel& k) {
  std::vector<ParamViewUse> use(k.params.size());
  std::unordered_map<ValueId, int> param_of;
  for (size_t i = 0; i < k.params.size(); ++i)
    if (k.type_of(k.params[i].value).kind == TypeKind::Tensor)
      param_of.emplace(k.params[i].value, static_cast<int>(i));
  auto bit = [&](ValueId v) -> uint64_t {
    auto it = param_of.find(v);
    if (it == param_of.end()) return 0;
    return it->second < kMaxTracked ? uint64_t{1} << it->second : 0;
  };

  // mask[v]: the parameters whose strides value v depends on.
  std::vector<uint64_t> mask(k.value_types.size(), 0);
  auto m = [&](ValueId v) { return v < mask.size() ? mask[v] : 0; };
  bool changed = true;
  while (changed) {
    changed = false;
    auto merge = [&](ValueId v, uint64_t bits) {
      if (v >= mask.size() || (mask[v] | bits) == mask[v]) return;
      mask[v] |= bits;
      changed = true;
    };
    walk(k.body, [&](const Op& op) {
      uint64_t in = 0;
      for (ValueId o : op.operands) in |= m(o);
      if (op.kind == OpKind::Stride) in |= bit(op.operands[0]);
      if (op.kind == OpKind::VarWrite && op.operands.size() == 2)
        merge(op.operands[0], m(op.operands[1]));
      if (op.result != kNoValue) merge(op.result, in);
      for (const Region& r : op.regions)
        for (ValueId a : r.args) merge(a, in);
    });
  }

  walk(k.body, [&](const Op& op) {
    if (op.kind == OpKind::TmaLoad || op.kind == OpKind::TmaLoadMulticast ||
        op.kind == OpKind::TmaStore || op.kind == OpKind::TmaPrefetch) {
      // A tensor map is encoded from the view's shape and strides.
      const TmaOperands t = tma_operands(op.kind);
      auto it = param_of.find(op.operands[t.tensor]);
      if (it != param_of.end()) {
        use[static_cast<size_t>(it->second)].strided = true;
        if (op.kind == OpKind::TmaStore) use[static_cast<size_t>(it->second)].written = true;
      }
      return;
    }
    SmallVector<Access, 2> list;
    accesses(op, list);
    for (const Access& a : list) {
      auto it = param_of.find(op.operands[a.mem]);
      if (it == param_of.end()) continue;
      ParamViewUse& u = use[static_cast<size_t>(it->second)];
      const uint64_t b = it->second < kMaxTracked ? uint64_t{1} << it->second : ~uint64_t{0};
      uint64_t idx = m(op.operands[a.index]);
      if (a.ld != SIZE_MAX) idx |= m(op.operands[a.ld]);
      (idx & b ? u.strided : u.flat) = true;
      if (a.writes) u.written = true;
    }
  });
  return use;
}

}  // namespace kiln::ir
