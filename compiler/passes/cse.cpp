// CSE with a scoped table (an op is available in its region after its definition and in the
// regions nested there), then DCE by use counts until nothing more goes.
#include "compiler/passes/cse.h"

#include <cstring>
#include <map>
#include <tuple>
#include <vector>

namespace kiln::passes {

namespace {

using namespace ir;

struct Key {
  OpKind kind;
  std::vector<ValueId> operands;
  uint64_t i;
  uint64_t f_bits;
  Type type;
  bool operator<(const Key& o) const {
    auto t = [](const Key& k) {
      return std::tie(k.kind, k.operands, k.i, k.f_bits, k.type.kind, k.type.elem, k.type.lanes,
                      k.type.rank, k.type.read_only, k.type.count);
    };
    return t(*this) < t(o);
  }
};

bool cse_candidate(const Op& op) {
  return has_flag(op.kind, op_flags::Pure) && op.result != kNoValue && op.regions.empty();
}

class Cse {
 public:
  explicit Cse(Kernel& k) : k_(k), rename_(k.value_types.size(), kNoValue) {}

  bool run() {
    std::vector<std::map<Key, ValueId>> scopes;
    region(k_.body, scopes);
    bool dce_changed = dce();
    return changed_ || dce_changed;
  }

 private:
  ValueId renamed(ValueId v) const {
    while (v < rename_.size() && rename_[v] != kNoValue) v = rename_[v];
    return v;
  }

  void region(Region& r, std::vector<std::map<Key, ValueId>>& scopes) {
    scopes.emplace_back();
    std::vector<Op> kept;
    kept.reserve(r.ops.size());
    for (Op& op : r.ops) {
      for (ValueId& v : op.operands) v = renamed(v);
      if (cse_candidate(op)) {
        uint64_t fb;
        std::memcpy(&fb, &op.attr.f, sizeof fb);
        Key key{op.kind,
                {op.operands.begin(), op.operands.end()},
                op.attr.i,
                fb,
                k_.type_of(op.result)};
        ValueId found = kNoValue;
        for (auto s = scopes.rbegin(); s != scopes.rend() && found == kNoValue; ++s) {
          auto it = s->find(key);
          if (it != s->end()) found = it->second;
        }
        if (found != kNoValue) {
          rename_[op.result] = found;
          changed_ = true;
          continue;
        }
        scopes.back().emplace(std::move(key), op.result);
      }
      for (Region& sub : op.regions) region(sub, scopes);
      kept.push_back(std::move(op));
    }
    r.ops = std::move(kept);
    scopes.pop_back();
  }

  bool dce() {
    bool any = false;
    for (;;) {
      std::vector<uint32_t> uses(k_.value_types.size(), 0);
      walk(k_.body, [&](const Op& op) {
        for (ValueId v : op.operands)
          if (v < uses.size()) ++uses[v];
      });
      bool removed = false;
      remove_unused(k_.body, uses, removed);
      if (!removed) break;
      any = true;
    }
    return any;
  }

  void remove_unused(Region& r, const std::vector<uint32_t>& uses, bool& removed) {
    std::vector<Op> kept;
    kept.reserve(r.ops.size());
    for (Op& op : r.ops) {
      if (cse_candidate(op) && uses[op.result] == 0) {
        removed = true;
        continue;
      }
      for (Region& sub : op.regions) remove_unused(sub, uses, removed);
      // A units loop with nothing left in it does nothing.
      if (op.kind == OpKind::Units && op.regions[0].ops.empty()) {
        removed = true;
        continue;
      }
      kept.push_back(std::move(op));
    }
    r.ops = std::move(kept);
  }

  Kernel& k_;
  std::vector<ValueId> rename_;
  bool changed_ = false;
};

}  // namespace

bool cse(ir::Kernel& k) {
  return Cse(k).run();
}

}  // namespace kiln::passes
