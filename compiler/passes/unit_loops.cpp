// Unit-loop fission (see unit_loops.h for what it needs and gives).
//
// The kernel body is walked at three levels. At cube level, sync_cube splits the body into
// segments (and so does each cube op, such as tcgen05.mma, which stays between them, once per
// cube), and control flow that contains a barrier (or a break out of such a loop, or a
// return under a uniform condition) is kept and runs once per cube. A segment without plane
// ops becomes one `units` loop over the cube; a segment with plane ops becomes a loop over the
// cube's planes, inside which plane ops and sync_plane split the segment into `units` loops
// over the plane and plane reductions run once per plane.
//
// Values crossing from one loop to another are recomputed when cheap (pure ops over values
// available there) or stored to a per-unit context array (a shared allocation of one line per
// unit) and loaded back. Which values need context arrays, which variables and local arrays
// outlive their loop, and whether units that returned must be skipped by later loops are found
// by a first run and applied by a second (the walk is deterministic, so both runs agree).
#include "compiler/passes/unit_loops.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/passes/build_op.h"
#include "compiler/passes/unit_loops_analysis.h"
#include "ir/uniformity.h"
#include "ir/verifier.h"

namespace kiln::passes {

namespace {

using namespace ir;
using namespace unit_loops_analysis;

enum class Level { Cube, Plane, Unit };

struct Scope {
  Level level = Level::Cube;
  Scope* parent = nullptr;
  Region* target = nullptr;
  std::unordered_map<ValueId, ValueId> map;  // input value -> value available here
  ValueId unit = kNoValue;                   // the unit index (unit scopes)
  ValueId plane = kNoValue;                  // the plane index (plane scopes and below)
  ValueId plane_first = kNoValue, plane_end = kNoValue;
  int segment = -1;
  bool in_lifted_loop = false;
};

class Lowering {
 public:
  Lowering(const Kernel& in, uint32_t plane_width, const UniformityInfo& u,
           const std::unordered_map<const Op*, OpFacts>& of, const Plan& plan, Facts& facts)
      : in_(in), u_(u), of_(of), plan_(plan), facts_(facts), plane_width_(plane_width) {
    units_ = in.units_per_cube();
    planes_ = (units_ + plane_width_ - 1) / plane_width_;
    size_t i = 0;
    walk(in.body, [&](const Op& op) {
      if (op.result != kNoValue) {
        def_[op.result] = &op;
        // Every unit computes a uniform value defined under uniform control flow, unit 0 too.
        if (i < u.control.size() && u.control[i].level == Uniformity::Uniform &&
            u.of(op.result) == Uniformity::Uniform)
          everywhere_.insert(op.result);
      }
      ++i;
    });
  }

  Kernel run() {
    out_.name = in_.name;
    out_.cube_dim = in_.cube_dim;
    out_.cluster_dim = in_.cluster_dim;
    out_.files = in_.files;
    out_.source_name = in_.source_name;
    Region body;
    Scope root;
    root.target = &body;
    root_ = &root;
    for (const Param& p : in_.params) {
      const ValueId v = out_.new_value(in_.type_of(p.value));
      out_.params.push_back(Param{p.name, v, p.pos});
      root.map[p.value] = v;
    }
    if (plan_.done_flags) {
      done_ = prologue(OpKind::AllocShared, Type::shared(ElemType::Bool, 1, units_));
      // Every unit starts not done.
      Op init = units_op(cu32(root, 0), cu32(root, units_));
      Scope us = unit_scope(root, init, -1);
      emit(us, OpKind::Store, {done_, us.unit, emit_const_bool(us, false)});
      body.ops.push_back(std::move(init));
    }
    lower_cube_region(in_.body, root);
    flush_cube(root);
    out_.body.ops = std::move(prologue_ops_);
    for (Op& op : body.ops) out_.body.ops.push_back(std::move(op));
    return std::move(out_);
  }

 private:
  // ---- emitting -------------------------------------------------------------------------------

  ValueId emit(Scope& s, OpKind kind, std::initializer_list<ValueId> operands,
               const Type& type = Type::void_type(), Attr attr = {}) {
    s.target->ops.push_back(
        build_op(out_, kind, {operands.begin(), operands.size()}, std::move(attr), type, at_));
    return s.target->ops.back().result;
  }
  ValueId cu32(Scope& s, uint32_t v) {
    Attr a;
    a.i = v;
    return emit(s, OpKind::Const, {}, Type::value(ElemType::U32), a);
  }
  ValueId emit_const_bool(Scope& s, bool v) {
    Attr a;
    a.i = v ? 1 : 0;
    return emit(s, OpKind::Const, {}, Type::value(ElemType::Bool), a);
  }
  ValueId prologue(OpKind kind, const Type& t) {
    Op op;
    op.kind = kind;
    op.result = out_.new_value(t);
    prologue_ops_.push_back(std::move(op));
    return prologue_ops_.back().result;
  }
  // The storage of fragment f's copies as a shared array (frag.mem), made once.
  ValueId frag_mem(ValueId f) {
    auto it = frag_mems_.find(f);
    if (it != frag_mems_.end()) return it->second;
    const Type t = in_.type_of(f);
    const uint32_t planes = (units_ + plane_width_ - 1) / plane_width_;
    Op op;
    op.kind = OpKind::FragMem;
    op.operands = {get(*root_, f)};  // an alloc.frag: top level, in the prologue already
    op.result =
        out_.new_value(Type::shared(ir::is_int(t.elem) ? ElemType::I32 : ElemType::F32, 1,
                                    static_cast<uint32_t>(t.frag_rows() * t.frag_cols()) * planes));
    prologue_ops_.push_back(std::move(op));
    return frag_mems_[f] = prologue_ops_.back().result;
  }
  // frag.get and frag.set of unit u: a load or store of the plane's copy (rows x cols, row-major)
  // at the row and column mma.sync's accumulator layout gives element e of lane u % 32:
  // tile e / 4 (tiles of 16 x 8, row-major), row g + 8 (e & 2) / 2, column 2 t + (e & 1), with
  // g = lane / 4 and t = lane % 4.
  void frag_element(const Op& op, Scope& s) {
    const ValueId f = op.operands[0];
    const Type t = in_.type_of(f);
    const ValueId mem = frag_mem(f);
    const ElemType stored = out_.type_of(mem).elem;
    const uint32_t cols = static_cast<uint32_t>(t.frag_cols());
    const uint32_t e = static_cast<uint32_t>(op.attr.i), tile = e / 4, n_tiles = cols / 8;
    const uint32_t row0 = tile / n_tiles * 16 + 8 * ((e >> 1) & 1),
                   col0 = tile % n_tiles * 8 + (e & 1);
    const ValueId u = unit_of(&s);
    const ValueId lane = emit(s, OpKind::Rem, {u, cu32(s, plane_width_)});
    const ValueId plane = emit(s, OpKind::Div, {u, cu32(s, plane_width_)});
    const ValueId g = emit(s, OpKind::Shr, {lane, cu32(s, 2)});
    const ValueId tl = emit(s, OpKind::And, {lane, cu32(s, 3)});
    // plane * rows * cols + (row0 + g) * cols + col0 + 2 t
    const ValueId base =
        emit(s, OpKind::Mul, {plane, cu32(s, static_cast<uint32_t>(t.frag_rows()) * cols)});
    const ValueId r =
        emit(s, OpKind::Mul, {emit(s, OpKind::Add, {g, cu32(s, row0)}), cu32(s, cols)});
    const ValueId c = emit(s, OpKind::Add, {emit(s, OpKind::Shl, {tl, cu32(s, 1)}), cu32(s, col0)});
    const ValueId idx = emit(s, OpKind::Add, {emit(s, OpKind::Add, {base, r}), c});
    if (op.kind == OpKind::FragGet) {
      ValueId x = emit(s, OpKind::Load, {mem, idx});
      if (stored != t.elem) x = emit(s, OpKind::Cast, {x}, Type::value(t.elem));
      s.map[op.result] = x;
    } else {
      ValueId x = get(s, op.operands[1]);
      if (stored != t.elem) x = emit(s, OpKind::Cast, {x}, Type::value(stored));
      emit(s, OpKind::Store, {mem, idx, x});
    }
  }

  // A clone of an input op with its operands mapped into scope s.
  ValueId clone(Scope& s, const Op& op) {
    Op c;
    c.kind = op.kind;
    for (ValueId v : op.operands) c.operands.push_back(get(s, v));
    c.attr = op.attr;
    c.loc = op.loc;
    if (op.result != kNoValue) c.result = out_.new_value(in_.type_of(op.result));
    const ValueId r = c.result;
    s.target->ops.push_back(std::move(c));
    if (r != kNoValue) s.map[op.result] = r;
    return r;
  }

  // ---- values across scopes -------------------------------------------------------------------

  static ValueId lookup(const Scope* s, ValueId v) {
    for (; s; s = s->parent) {
      auto it = s->map.find(v);
      if (it != s->map.end()) return it->second;
    }
    return kNoValue;
  }
  static ValueId unit_of(const Scope* s) {
    for (; s; s = s->parent)
      if (s->unit != kNoValue) return s->unit;
    return kNoValue;
  }

  bool can_remat(const Scope& s, ValueId v, int& budget) const {
    if (lookup(&s, v) != kNoValue) return true;
    auto it = def_.find(v);
    if (it == def_.end()) return false;
    const Op& op = *it->second;
    if (!has_flag(op.kind, op_flags::Pure) || !op.regions.empty()) return false;
    const bool unit_builtin = op.kind == OpKind::UnitPos || op.kind == OpKind::AbsolutePos ||
                              op.kind == OpKind::PlaneLane;
    if (unit_builtin && unit_of(&s) == kNoValue) return false;
    if (op.kind == OpKind::PlanePos && unit_of(&s) == kNoValue && s.plane == kNoValue) return false;
    const bool costly =
        op_info(op.kind).operand_class == OperandClass::Float && op_info(op.kind).sig == Sig::Unary;
    budget -= costly ? 8 : 1;
    if (budget < 0) return false;
    for (ValueId o : op.operands)
      if (!can_remat(s, o, budget)) return false;
    return true;
  }

  ValueId remat(Scope& s, ValueId v) {
    if (ValueId r = lookup(&s, v); r != kNoValue) return r;
    const Op& op = *def_.at(v);
    const SourceLoc saved = at_;
    at_ = op.loc;
    ValueId r;
    if (is_builtin(op.kind)) {
      r = builtin(s, op);
      s.map[v] = r;
    } else {
      for (ValueId o : op.operands) remat(s, o);
      r = clone(s, op);
    }
    at_ = saved;
    return r;
  }

  // The value of input value v in scope s.
  ValueId get(Scope& s, ValueId v) {
    if (ValueId r = lookup(&s, v); r != kNoValue) return r;
    int budget = 16;
    if (can_remat(s, v, budget)) return remat(s, v);
    // From the context array: this unit's entry in a unit scope, else the first unit's (the
    // value is the same for every unit there).
    facts_.ctx.insert(v);
    const ValueId arr = ctx_array(v);
    // A value the same in every unit is read from unit 0's entry even in a unit scope: a scalar
    // load, so that the CPU vectorizer still sees `base + unit` in the indices built on it.
    ValueId index = everywhere_.count(v) ? kNoValue : unit_of(&s);
    if (index == kNoValue) index = s.plane_first != kNoValue ? s.plane_first : cu32(s, 0);
    const ValueId r = emit(s, OpKind::Load, {arr, index});
    s.map[v] = r;
    return r;
  }

  ValueId ctx_array(ValueId v) {
    auto it = ctx_.find(v);
    if (it != ctx_.end()) return it->second;
    const Type t = in_.type_of(v);
    const ValueId arr = prologue(OpKind::AllocShared, Type::shared(t.elem, t.lanes, units_));
    ctx_[v] = arr;
    return arr;
  }

  // After the op defining input value v was lowered at unit level: keep it for later loops.
  void keep(Scope& s, ValueId v) {
    if (v == kNoValue || !plan_.ctx.count(v)) return;
    const ValueId u = unit_of(&s);
    const ValueId nv = lookup(&s, v);
    if (u == kNoValue || nv == kNoValue) return;
    emit(s, OpKind::Store, {ctx_array(v), u, nv});
  }

  // ---- builtins in a scope --------------------------------------------------------------------

  static bool is_builtin(OpKind k) {
    const Sig sig = op_info(k).sig;
    return sig == Sig::Builtin || sig == Sig::BuiltinScalar;
  }

  ValueId unit_axis(Scope& s, ValueId u, int axis) {
    const uint32_t dx = in_.cube_dim[0], dy = in_.cube_dim[1], dz = in_.cube_dim[2];
    switch (axis) {
      case 0:
        return u;
      case 1:
        return dx == units_ ? u : emit(s, OpKind::Rem, {u, cu32(s, dx)});
      case 2: {
        if (dy == 1) return cu32(s, 0);
        const ValueId q = emit(s, OpKind::Div, {u, cu32(s, dx)});
        return dz == 1 ? q : emit(s, OpKind::Rem, {q, cu32(s, dy)});
      }
      default:
        return dz == 1 ? cu32(s, 0) : emit(s, OpKind::Div, {u, cu32(s, dx * dy)});
    }
  }

  ValueId builtin(Scope& s, const Op& op) {
    const int axis = static_cast<int>(op.attr.i);
    const ValueId u = unit_of(&s);
    switch (op.kind) {
      case OpKind::UnitPos:
        return unit_axis(s, u, axis);
      case OpKind::AbsolutePos: {
        Attr a;
        a.i = op.attr.i;
        const ValueId cube = emit(s, OpKind::CubePos, {}, {}, a);
        const uint32_t dim = axis == 0 ? units_ : in_.cube_dim[axis - 1];
        return emit(s, OpKind::Add,
                    {emit(s, OpKind::Mul, {cube, cu32(s, dim)}), unit_axis(s, u, axis)});
      }
      case OpKind::PlaneLane:
        return emit(s, OpKind::Rem, {u, cu32(s, plane_width_)});
      case OpKind::PlanePos:
        return u != kNoValue ? emit(s, OpKind::Div, {u, cu32(s, plane_width_)}) : s.plane;
      case OpKind::PlaneDim:
        return cu32(s, plane_width_);
      default: {  // cube_pos, cube_dim, cube_count: cube-level builtins, kept
        Attr a;
        a.i = op.attr.i;
        return emit(s, op.kind, {}, {}, a);
      }
    }
  }

  // ---- cube level -------------------------------------------------------------------------------

  bool lift_at_cube(const Op& op, const Scope& s) const {
    if (!is_control(op.kind)) return false;
    const OpFacts& f = of_.at(&op);
    if (f.barrier) return true;
    if (s.in_lifted_loop && f.escaping) return true;
    return op.kind == OpKind::If && f.returns && u_.of(op.operands[0]) == Uniformity::Uniform;
  }

  void lower_cube_region(const Region& r, Scope& s) {
    for (const Op& op : r.ops) {
      if (op.kind == OpKind::SyncCube) {
        flush_cube(s);
      } else if (is_cube_op(op.kind)) {
        // Once per cube, after the units before it and before those after it; its operands
        // are the cube's (the verifier checks), so the first unit's serve.
        flush_cube(s);
        at_ = op.loc;
        clone(s, op);
      } else if (op.kind == OpKind::AllocShared || op.kind == OpKind::AllocFrag) {
        root_->map[op.result] = prologue(op.kind, in_.type_of(op.result));
      } else if (is_jump(op.kind)) {
        flush_cube(s);
        at_ = op.loc;
        emit(s, op.kind, {});
      } else if (lift_at_cube(op, s)) {
        flush_cube(s);
        lift(op, s, Level::Cube);
      } else {
        pending_[&s].push_back(&op);
      }
    }
  }

  void flush_cube(Scope& s) {
    std::vector<const Op*> seg = std::move(pending_[&s]);
    pending_.erase(&s);
    if (seg.empty()) return;
    bool planes = false;
    for (const Op* op : seg)
      planes = planes || is_plane_op(op->kind) || op->kind == OpKind::SyncPlane || of_.at(op).plane;
    at_ = seg.front()->loc;
    if (!planes) {
      units_loop(s, seg, cu32(s, 0), cu32(s, units_));
      return;
    }
    // One iteration per plane: first = p * 32, end = min(first + 32, units).
    Op loop = counted_loop(s, cu32(s, 0), cu32(s, planes_));
    const ValueId p = loop.regions[0].args[0];
    Scope ps = plane_body(s, loop);
    ps.plane = p;
    ps.plane_first = emit(ps, OpKind::Mul, {p, cu32(ps, plane_width_)});
    ps.plane_end =
        emit(ps, OpKind::Min,
             {emit(ps, OpKind::Add, {ps.plane_first, cu32(ps, plane_width_)}), cu32(ps, units_)});
    ps.in_lifted_loop = false;  // jumps here target loops inside the plane block
    plane_depth_++;
    lower_plane_ops(seg, ps);
    flush_plane(ps);
    plane_depth_--;
    s.target->ops.push_back(std::move(loop));
  }

  // Keeps a control op at cube or plane level: its condition or bounds come to this level and
  // its regions are lowered at the same level.
  void lift(const Op& op, Scope& s, Level level) {
    at_ = op.loc;
    Op c;
    c.kind = op.kind;
    c.attr = op.attr;
    c.loc = op.loc;
    for (ValueId v : op.operands) c.operands.push_back(get(s, v));
    c.regions.resize(op.regions.size());
    std::vector<Scope> subs(op.regions.size());
    for (size_t i = 0; i < op.regions.size(); ++i) {
      Scope& sub = subs[i];
      sub.level = level;
      sub.parent = &s;
      sub.target = &c.regions[i];
      sub.plane = s.plane;
      sub.plane_first = s.plane_first;
      sub.plane_end = s.plane_end;
      sub.in_lifted_loop = s.in_lifted_loop || op.kind != OpKind::If;
      for (ValueId a : op.regions[i].args) {
        const ValueId na = out_.new_value(in_.type_of(a));
        c.regions[i].args.push_back(na);
        sub.map[a] = na;
      }
      if (level == Level::Cube) {
        lower_cube_region(op.regions[i], sub);
        flush_cube(sub);
      } else {
        std::vector<const Op*> ops;
        for (const Op& o : op.regions[i].ops) ops.push_back(&o);
        lower_plane_ops(ops, sub);
        flush_plane(sub);
      }
    }
    s.target->ops.push_back(std::move(c));
  }

  // ---- plane level
  // --------------------------------------------------------------------------------

  bool lift_at_plane(const Op& op, const Scope& s) const {
    if (!is_control(op.kind)) return false;
    const OpFacts& f = of_.at(&op);
    return f.plane || (s.in_lifted_loop && f.escaping);
  }

  void lower_plane_ops(const std::vector<const Op*>& ops, Scope& s) {
    for (const Op* op : ops) {
      if (op->kind == OpKind::SyncPlane) {
        flush_plane(s);
      } else if (op->kind == OpKind::PlaneSum || op->kind == OpKind::PlaneMin ||
                 op->kind == OpKind::PlaneMax || op->kind == OpKind::PlaneAny ||
                 op->kind == OpKind::PlaneAll) {
        flush_plane(s);
        plane_reduce(*op, s);
      } else if (is_frag_op(op->kind)) {
        flush_plane(s);
        frag_op(*op, s);
      } else if (is_plane_op(op->kind)) {  // shuffles: the first op of the next loop
        flush_plane(s);
        pending_[&s].push_back(op);
      } else if ((op->kind == OpKind::Break || op->kind == OpKind::Continue) && s.in_lifted_loop) {
        flush_plane(s);
        at_ = op->loc;
        emit(s, op->kind, {});
      } else if (lift_at_plane(*op, s)) {
        flush_plane(s);
        lift(*op, s, Level::Plane);
      } else {
        pending_[&s].push_back(op);
      }
    }
  }

  void flush_plane(Scope& s) {
    std::vector<const Op*> seg = std::move(pending_[&s]);
    pending_.erase(&s);
    if (seg.empty()) return;
    units_loop(s, seg, s.plane_first, s.plane_end);
  }

  // The value unit `l` holds for input value x, at plane level.
  ValueId value_of_unit(Scope& s, ValueId x, ValueId l) {
    if (lookup(&s, x) != kNoValue) return lookup(&s, x);
    facts_.ctx.insert(x);
    return emit(s, OpKind::Load, {ctx_array(x), l});
  }

  // plane.sum/min/max/any/all over the units of the plane, once per plane. When every plane
  // has the same known width (a cube of at most one plane's units, or of whole planes), the
  // same tree as a GPU's plane (the CUDA prelude's plane_reduce: at offsets 16, 8, 4, 2, 1,
  // lane l takes lane l + off while l + off is inside the plane), unrolled: the same bits as
  // the emulator and a GPU, and a few steps of latency rather than one per unit. Otherwise a
  // loop over the plane's units in order.
  void plane_reduce(const Op& op, Scope& s) {
    at_ = op.loc;
    const ValueId x = op.operands[0];
    const OpKind combine = op.kind == OpKind::PlaneSum   ? OpKind::Add
                           : op.kind == OpKind::PlaneMin ? OpKind::Min
                           : op.kind == OpKind::PlaneMax ? OpKind::Max
                           : op.kind == OpKind::PlaneAny ? OpKind::Or
                                                         : OpKind::And;
    const ValueId shared = lookup(&s, x);
    ValueId r = kNoValue;
    const uint32_t width = units_ <= plane_width_       ? units_
                           : units_ % plane_width_ == 0 ? plane_width_
                                                        : 0;
    if (width > 0 && width <= 32 && plane_width_ == 32) {
      if (shared == kNoValue) facts_.ctx.insert(x);  // each unit's value, from its loop
      std::vector<ValueId> lane(width);
      for (uint32_t l = 0; l < width; ++l)
        lane[l] = shared != kNoValue
                      ? shared
                      : emit(s, OpKind::Load,
                             {ctx_array(x), emit(s, OpKind::Add, {s.plane_first, cu32(s, l)})});
      // Only the lanes lane 0's result depends on: below 2 off at offset off.
      for (uint32_t off = 16; off > 0; off >>= 1)
        for (uint32_t l = 0; l < std::min(width, 2 * off); ++l)
          if (l + off < width) lane[l] = emit(s, combine, {lane[l], lane[l + off]});
      r = lane[0];
    } else {
      const ValueId acc = emit(s, OpKind::Var, {value_of_unit(s, x, s.plane_first)});
      Op loop = counted_loop(s, emit(s, OpKind::Add, {s.plane_first, cu32(s, 1)}), s.plane_end);
      const ValueId l = loop.regions[0].args[0];
      Scope body = plane_body(s, loop);
      const ValueId xv = shared != kNoValue ? shared : emit(body, OpKind::Load, {ctx_array(x), l});
      emit(body, OpKind::VarWrite,
           {acc, emit(body, combine, {emit(body, OpKind::VarRead, {acc}), xv})});
      s.target->ops.push_back(std::move(loop));
      r = emit(s, OpKind::VarRead, {acc});
    }
    s.map[op.result] = r;
    if (plan_.ctx.count(op.result)) {  // needed after this plane loop: every unit gets it
      Op store_loop = counted_loop(s, s.plane_first, s.plane_end);
      const ValueId w = store_loop.regions[0].args[0];
      Scope sb = plane_body(s, store_loop);
      emit(sb, OpKind::Store, {ctx_array(op.result), w, r});
      s.target->ops.push_back(std::move(store_loop));
    }
  }

  // A fragment op runs once per plane on the plane's copy of each fragment; its other operands
  // are the same for every unit of the plane (the verifier checks), so the first unit's serve.
  // After a return (the verifier allows only returns the whole plane takes together) it runs
  // only for planes whose units are still running.
  void frag_op(const Op& op, Scope& s) {
    at_ = op.loc;
    ++facts_.frag_ops;
    Op guard;
    Scope gs;
    Scope* at = &s;
    if (plan_.done_flags) {
      const ValueId done = emit(s, OpKind::Load, {done_, s.plane_first});
      guard.kind = OpKind::If;
      guard.loc = op.loc;
      guard.operands = {emit(s, OpKind::Not, {done})};
      guard.regions.resize(2);
      gs.level = s.level;
      gs.parent = &s;
      gs.target = &guard.regions[0];
      gs.plane = s.plane;
      gs.plane_first = s.plane_first;
      gs.plane_end = s.plane_end;
      gs.in_lifted_loop = s.in_lifted_loop;
      at = &gs;
    }
    Op c;
    c.kind = op.kind;
    c.attr = op.attr;
    c.loc = op.loc;
    for (ValueId x : op.operands)
      c.operands.push_back(in_.type_of(x).is_frag()
                               ? emit(*at, OpKind::FragPlane, {get(*at, x), at->plane})
                               : get(*at, x));
    at->target->ops.push_back(std::move(c));
    if (plan_.done_flags) s.target->ops.push_back(std::move(guard));
  }

  // `for i = start to end step 1`, not unrolled (one copy of a plane's code, or a few dozen
  // iterations of a load and an add, gain nothing from it); its index is regions[0].args[0].
  Op counted_loop(Scope& s, ValueId start, ValueId end) {
    Op loop;
    loop.kind = OpKind::For;
    loop.loc = at_;
    loop.attr.i = 1;
    loop.operands = {start, end, cu32(s, 1)};
    loop.regions.resize(1);
    loop.regions[0].args.push_back(out_.new_value(Type::value(ElemType::U32)));
    return loop;
  }
  // The plane-level scope of a loop's body.
  static Scope plane_body(Scope& parent, Op& loop) {
    Scope b;
    b.level = Level::Plane;
    b.parent = &parent;
    b.target = &loop.regions[0];
    return b;
  }

  // ---- unit level ------------------------------------------------------------------------------

  Op units_op(ValueId start, ValueId end) {
    Op op;
    op.kind = OpKind::Units;
    op.loc = at_;
    op.operands = {start, end};
    op.regions.resize(1);
    op.regions[0].args.push_back(out_.new_value(Type::value(ElemType::U32)));
    return op;
  }
  Scope unit_scope(Scope& parent, Op& units, int segment) {
    Scope us;
    us.level = Level::Unit;
    us.parent = &parent;
    us.target = &units.regions[0];
    us.unit = units.regions[0].args[0];
    us.plane = parent.plane;
    us.plane_first = parent.plane_first;
    us.plane_end = parent.plane_end;
    us.segment = segment;
    return us;
  }

  void units_loop(Scope& s, const std::vector<const Op*>& ops, ValueId start, ValueId end) {
    const int segment = next_segment_++;
    ++facts_.units_loops;
    if (s.in_lifted_loop || plane_depth_ > 0 || in_loop_depth(s)) facts_.loop_in_loop = true;
    Op units = units_op(start, end);
    Scope us = unit_scope(s, units, segment);
    if (plan_.done_flags) {  // skip units that returned in an earlier loop
      const ValueId d = emit(us, OpKind::Load, {done_, us.unit});
      Op skip;
      skip.kind = OpKind::If;
      skip.operands = {d};
      skip.regions.resize(2);
      Scope ss;
      ss.parent = &us;
      ss.target = &skip.regions[0];
      emit(ss, OpKind::Continue, {});
      us.target->ops.push_back(std::move(skip));
    }
    for (const Op* op : ops) lower_unit_op(*op, us);
    s.target->ops.push_back(std::move(units));
  }

  static bool in_loop_depth(const Scope& s) {
    for (const Scope* p = &s; p; p = p->parent)
      if (p->in_lifted_loop) return true;
    return false;
  }

  // Variables and local arrays: uniform variables live once per cube; those touched by one
  // loop stay inside it; the rest get a per-unit context array.
  enum class Storage { Cube, Local, PerUnit };
  Storage storage_of(ValueId mem_or_var) const {
    const bool is_var = in_.type_of(mem_or_var).kind == TypeKind::Var;
    if (is_var && u_.of(mem_or_var) == Uniformity::Uniform) return Storage::Cube;
    return plan_.ctx_vars.count(mem_or_var) ? Storage::PerUnit : Storage::Local;
  }
  ValueId storage_array(ValueId v) {
    auto it = var_arrays_.find(v);
    if (it != var_arrays_.end()) return it->second;
    const Type t = in_.type_of(v);
    const uint32_t count = t.kind == TypeKind::Local ? t.count * units_ : units_;
    const ValueId arr = prologue(OpKind::AllocShared, Type::shared(t.elem, t.lanes, count));
    var_arrays_[v] = arr;
    return arr;
  }
  ValueId cube_var(ValueId v) {
    auto it = var_arrays_.find(v);
    if (it != var_arrays_.end()) return it->second;
    const Type t = in_.type_of(v);
    Op zero;
    zero.kind = OpKind::Const;
    zero.result = out_.new_value(t.line());
    prologue_ops_.push_back(std::move(zero));
    const ValueId z = prologue_ops_.back().result;
    Op var;
    var.kind = OpKind::Var;
    var.operands = {z};
    var.result = out_.new_value(t);
    prologue_ops_.push_back(std::move(var));
    var_arrays_[v] = prologue_ops_.back().result;
    return var_arrays_[v];
  }
  // The element index of line `index` of a per-unit local array for unit u: index * units + u,
  // so that the units' lines of one index lie side by side (consecutive units read consecutive
  // lines: one vector access on the CPU). The index is first limited to the array's length, so
  // that one past the end (or any larger, even one whose product would wrap) stays past the
  // storage's end: checked mode reports it instead of reading another unit's line.
  ValueId local_index(Scope& s, ValueId mem, ValueId index) {
    const ValueId limited = emit(s, OpKind::Min, {index, cu32(s, in_.type_of(mem).count)});
    return emit(s, OpKind::Add, {emit(s, OpKind::Mul, {limited, cu32(s, units_)}), unit_of(&s)});
  }

  void lower_unit_region(const Region& r, Scope& s) {
    for (const Op& op : r.ops) lower_unit_op(op, s);
  }

  void lower_unit_op(const Op& op, Scope& s) {
    at_ = op.loc;
    auto touch = [&](ValueId v) { facts_.segments[v].insert(s.segment); };
    switch (op.kind) {
      case OpKind::UnitPos:
      case OpKind::AbsolutePos:
      case OpKind::PlaneLane:
      case OpKind::PlanePos:
      case OpKind::PlaneDim:
        s.map[op.result] = builtin(s, op);
        break;
      case OpKind::AllocLocal:
        touch(op.result);
        if (storage_of(op.result) == Storage::Local) clone(s, op);
        break;
      case OpKind::FragGet:
      case OpKind::FragSet:
        frag_element(op, s);
        break;
      case OpKind::Var: {
        touch(op.result);
        const Storage st = storage_of(op.result);
        if (st == Storage::Cube) {
          emit(s, OpKind::VarWrite, {cube_var(op.result), get(s, op.operands[0])});
        } else if (st == Storage::PerUnit) {
          emit(s, OpKind::Store, {storage_array(op.result), unit_of(&s), get(s, op.operands[0])});
        } else {
          clone(s, op);
        }
        break;
      }
      case OpKind::VarRead:
      case OpKind::VarWrite: {
        const ValueId var = op.operands[0];
        touch(var);
        const Storage st = storage_of(var);
        if (st == Storage::Local) {
          clone(s, op);
        } else if (op.kind == OpKind::VarRead) {
          s.map[op.result] = st == Storage::Cube
                                 ? emit(s, OpKind::VarRead, {cube_var(var)})
                                 : emit(s, OpKind::Load, {storage_array(var), unit_of(&s)});
        } else if (st == Storage::Cube) {
          emit(s, OpKind::VarWrite, {cube_var(var), get(s, op.operands[1])});
        } else {
          emit(s, OpKind::Store, {storage_array(var), unit_of(&s), get(s, op.operands[1])});
        }
        break;
      }
      case OpKind::Load:
      case OpKind::Store: {
        const ValueId mem = op.operands[0];
        if (in_.type_of(mem).kind == TypeKind::Local) {
          touch(mem);
          if (storage_of(mem) == Storage::PerUnit) {
            const ValueId arr = storage_array(mem);
            const ValueId idx = local_index(s, mem, get(s, op.operands[1]));
            if (op.kind == OpKind::Load)
              s.map[op.result] = emit(s, OpKind::Load, {arr, idx});
            else
              emit(s, OpKind::Store, {arr, idx, get(s, op.operands[2])});
            break;
          }
        }
        clone(s, op);
        break;
      }
      case OpKind::If:
      case OpKind::For:
      case OpKind::Loop: {
        Op c;
        c.kind = op.kind;
        c.attr = op.attr;
        c.loc = op.loc;
        for (ValueId v : op.operands) c.operands.push_back(get(s, v));
        c.regions.resize(op.regions.size());
        for (size_t i = 0; i < op.regions.size(); ++i) {
          Scope sub;
          sub.level = Level::Unit;
          sub.parent = &s;
          sub.target = &c.regions[i];
          sub.segment = s.segment;
          sub.plane = s.plane;
          sub.plane_first = s.plane_first;
          sub.plane_end = s.plane_end;
          for (ValueId a : op.regions[i].args) {
            const ValueId na = out_.new_value(in_.type_of(a));
            c.regions[i].args.push_back(na);
            sub.map[a] = na;
          }
          lower_unit_region(op.regions[i], sub);
        }
        s.target->ops.push_back(std::move(c));
        break;
      }
      case OpKind::Return:
        facts_.unit_return = true;
        if (plan_.done_flags)
          emit(s, OpKind::Store, {done_, unit_of(&s), emit_const_bool(s, true)});
        emit(s, OpKind::Return, {});
        break;
      case OpKind::PlaneBroadcast:
      case OpKind::PlaneShuffle:
      case OpKind::PlaneShuffleXor:
        s.map[op.result] = shuffle(op, s);
        break;
      default:
        clone(s, op);
        break;
    }
    if (op.result != kNoValue) keep(s, op.result);
  }

  // plane.broadcast/shuffle/shuffle_xor: read the other unit's entry of the operand's context
  // array (the operand was computed in the previous loop).
  ValueId shuffle(const Op& op, Scope& s) {
    const ValueId x = op.operands[0];
    for (const Scope* p = &s; p; p = p->parent) {
      if (p->level == Level::Unit) continue;
      if (p->map.count(x)) return p->map.at(x);  // the same in every unit
    }
    facts_.ctx.insert(x);
    const ValueId arr = ctx_array(x);
    const ValueId u = unit_of(&s);
    const ValueId count = emit(s, OpKind::Sub, {s.plane_end, s.plane_first});
    const ValueId lane = get(s, op.operands[1]);
    const ValueId l = op.kind == OpKind::PlaneShuffleXor
                          ? emit(s, OpKind::Xor, {emit(s, OpKind::Sub, {u, s.plane_first}), lane})
                          : lane;
    const ValueId inside = emit(s, OpKind::Lt, {l, count});
    const ValueId index =
        emit(s, OpKind::Select, {inside, emit(s, OpKind::Add, {s.plane_first, l}), u});
    return emit(s, OpKind::Load, {arr, index});
  }

  const Kernel& in_;
  const UniformityInfo& u_;
  const std::unordered_map<const Op*, OpFacts>& of_;
  const Plan& plan_;
  Facts& facts_;
  Kernel out_;
  Scope* root_ = nullptr;
  uint32_t units_ = 1, planes_ = 1;
  uint32_t plane_width_;
  std::unordered_map<ValueId, const Op*> def_;
  std::vector<Op> prologue_ops_;
  std::map<ValueId, ValueId> ctx_;         // input value -> its context array
  std::map<ValueId, ValueId> var_arrays_;  // input variable/local array -> its storage
  std::map<ValueId, ValueId> frag_mems_;   // input fragment -> frag.mem of its storage
  std::unordered_map<const Scope*, std::vector<const Op*>> pending_;  // ops awaiting a loop
  ValueId done_ = kNoValue;
  std::unordered_set<ValueId> everywhere_;  // uniform values every unit computes
  int next_segment_ = 0;
  int plane_depth_ = 0;
  SourceLoc at_;
};

}  // namespace

Result<ir::Kernel> lower_unit_loops(const ir::Kernel& k, uint32_t plane_width) {
  KILN_CHECK(plane_width >= 1, "a plane has at least one unit");
  std::unordered_map<const Op*, OpFacts> of;
  for (const Op& op : k.body.ops) scan(op, of);
  const UniformityInfo u = analyze_uniformity(k);

  // Run until the plan a run applies is the plan it discovers (two runs in practice).
  Plan plan;
  Kernel out;
  bool stable = false;
  for (int attempt = 0; attempt < 4 && !stable; ++attempt) {
    Facts facts;
    out = Lowering(k, plane_width, u, of, plan, facts).run();
    Plan next = plan;
    next.ctx.insert(facts.ctx.begin(), facts.ctx.end());
    for (const auto& [v, segs] : facts.segments)
      if (segs.size() > 1) next.ctx_vars.insert(v);
    next.done_flags =
        plan.done_flags ||
        (facts.unit_return && (facts.units_loops + facts.frag_ops > 1 || facts.loop_in_loop));
    stable = next.ctx == plan.ctx && next.ctx_vars == plan.ctx_vars &&
             next.done_flags == plan.done_flags;
    plan = std::move(next);
  }
  if (!stable)
    return Error(ErrorKind::Compile,
                 fmt::format("internal error: unit-loop lowering of '{}' did not settle", k.name));
  if (auto st = verify(out); !st)
    return Error(ErrorKind::Compile,
                 fmt::format("internal error: unit-loop lowering of '{}' produced invalid IR:\n{}",
                             k.name, st.error().message));
  return out;
}

}  // namespace kiln::passes
