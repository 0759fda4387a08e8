// Uniformity analysis by fixpoint iteration over the whole kernel. Levels only grow: values,
// variable contents, local-array contents and the divergence of loops (a break, continue or
// return under varying control makes every iteration of the loop varying). A pass is repeated
// until nothing grows, so loops that carry variables converge.
#include "ir/uniformity.h"

#include <algorithm>

namespace kiln::ir {

namespace {

using U = Uniformity;
using Control = UniformityInfo::Control;

U umax(U a, U b) {
  return a > b ? a : b;
}

Control cmax(Control a, Control b) {
  return b.level > a.level ? b : a;
}

class Analysis {
 public:
  explicit Analysis(const Kernel& k) : k_(k) {
    info_.values.assign(k.value_types.size(), U::Uniform);
  }

  UniformityInfo run() {
    // Each pass can only raise levels, and there are finitely many; the bound is a safety net.
    const size_t max_passes = 2 * (info_.values.size() + 8);
    for (size_t pass = 0; pass < max_passes; ++pass) {
      changed_ = false;
      returned_ = Control{};
      info_.control.clear();
      walk_region(k_.body, Control{});
      if (!changed_) break;
    }
    return std::move(info_);
  }

 private:
  U get(ValueId v) const { return v < info_.values.size() ? info_.values[v] : U::Varying; }
  void raise(ValueId v, U level) {
    if (v >= info_.values.size()) return;
    if (level > info_.values[v]) {
      info_.values[v] = level;
      changed_ = true;
    }
  }
  Control& loop_div(const Op* loop) {
    for (auto& [op, c] : loop_div_)
      if (op == loop) return c;
    loop_div_.emplace_back(loop, Control{});
    return loop_div_.back().second;
  }
  void raise_loop(const Op* loop, Control c) {
    Control& d = loop_div(loop);
    if (c.level > d.level) {
      d = c;
      changed_ = true;
    }
  }
  U operands_level(const Op& op, size_t from = 0) const {
    U u = U::Uniform;
    for (size_t i = from; i < op.operands.size(); ++i) u = umax(u, get(op.operands[i]));
    return u;
  }

  void walk_region(const Region& r, Control ctl) {
    for (const Op& op : r.ops) walk_op(op, ctl);
  }

  void walk_op(const Op& op, Control ctl) {
    const Control eff = cmax(ctl, returned_);
    info_.control.push_back(eff);
    const OpInfo& info = op_info(op.kind);
    auto opnd = [&](size_t i) { return i < op.operands.size() ? op.operands[i] : kNoValue; };
    switch (op.kind) {
      case OpKind::PlanePos:  // unit_pos / plane_dim: one value per plane
      case OpKind::PlaneSum:
      case OpKind::PlaneMin:
      case OpKind::PlaneMax:
      case OpKind::PlaneAny:
      case OpKind::PlaneAll:
      case OpKind::PlaneBroadcast:
        raise(op.result, U::Plane);
        return;
      case OpKind::Load: {
        U u = get(opnd(1));
        const ValueId m = opnd(0);
        if (m < k_.value_types.size() && k_.type_of(m).kind == TypeKind::Local) u = umax(u, get(m));
        raise(op.result, u);
        return;
      }
      case OpKind::Store: {
        const ValueId m = opnd(0);
        if (m < k_.value_types.size() && k_.type_of(m).kind == TypeKind::Local)
          raise(m, umax(eff.level, operands_level(op, 1)));
        return;
      }
      case OpKind::Var:
        raise(op.result, umax(get(opnd(0)), eff.level));
        return;
      case OpKind::VarRead:
        raise(op.result, get(opnd(0)));
        return;
      case OpKind::VarWrite:
        raise(opnd(0), umax(get(opnd(1)), eff.level));
        return;
      case OpKind::If: {
        Control inner = eff;
        const U c = get(opnd(0));
        if (c > inner.level) inner = Control{c, &op};
        // A return in one branch does not reach the other branch, only what follows the if.
        const Control before = returned_;
        Control after = before;
        for (const Region& sub : op.regions) {
          returned_ = before;
          walk_region(sub, inner);
          after = cmax(after, returned_);
        }
        returned_ = after;
        return;
      }
      case OpKind::Units:  // a lowered kernel's loop over units: its index differs per unit
        if (!op.regions.empty()) {
          for (ValueId a : op.regions[0].args) raise(a, U::Varying);
          walk_region(op.regions[0], Control{U::Varying, &op});
        }
        return;
      case OpKind::For:
      case OpKind::Loop: {
        Control inner = eff;
        const U b = operands_level(op);
        if (b > inner.level) inner = Control{b, &op};
        inner = cmax(inner, loop_div(&op));
        if (!op.regions.empty()) {
          for (ValueId a : op.regions[0].args) raise(a, b);
          loops_.push_back(&op);
          walk_region(op.regions[0], inner);
          loops_.pop_back();
        }
        return;
      }
      case OpKind::Pipeline: {
        // Like a loop over rounds whose bounds are its round count; both regions see the round
        // and stage as uniform as that count.
        Control inner = eff;
        const U b = get(opnd(0));
        if (b > inner.level) inner = Control{b, &op};
        for (const Region& sub : op.regions) {
          for (ValueId a : sub.args) raise(a, b);
          walk_region(sub, inner);
        }
        return;
      }
      case OpKind::Break:
      case OpKind::Continue:
        if (!loops_.empty()) raise_loop(loops_.back(), Control{eff.level, &op});
        return;
      case OpKind::Return:
        for (const Op* l : loops_) raise_loop(l, Control{eff.level, &op});
        if (eff.level > returned_.level) returned_ = Control{eff.level, &op};
        return;
      default:
        break;
    }
    if (op.result == kNoValue) return;
    if (info.flags & op_flags::Varying) {
      raise(op.result, U::Varying);
    } else {
      raise(op.result, operands_level(op));
    }
  }

  const Kernel& k_;
  UniformityInfo info_;
  std::vector<std::pair<const Op*, Control>> loop_div_;  // few loops: a list is fastest
  std::vector<const Op*> loops_;
  Control returned_;
  bool changed_ = false;
};

}  // namespace

UniformityInfo analyze_uniformity(const Kernel& k) {
  return Analysis(k).run();
}

}  // namespace kiln::ir
