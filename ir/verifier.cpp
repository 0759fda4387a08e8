// The verifier. First a structural pass (ids, definitions, scoping, regions, types, memory
// spaces, placement), then, if the structure is sound, the uniformity rules for barriers and
// plane ops. Errors are collected (up to a limit) so one run reports every problem.
#include "ir/verifier.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/printer.h"
#include "ir/uniformity.h"

namespace kiln::ir {

namespace {

constexpr size_t kMaxErrors = 50;
constexpr int kMaxDepth = 256;

bool is_identifier(const std::string& s) {
  if (s.empty()) return false;
  auto start = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!start(s[0])) return false;
  for (char c : s)
    if (!start(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

class Verifier {
 public:
  explicit Verifier(const Kernel& k)
      : k_(k), defined_(k.value_types.size(), 0), visible_(k.value_types.size(), 0) {}

  Status run() {
    check_kernel();
    walk(k_.body, [&](const Op& op) {
      if (op.kind == OpKind::Units || op.kind == OpKind::FragPlane) lowered_ = true;
      if (is_frag_op(op.kind)) frag_op_ = &op;
      if (op.kind == OpKind::Wgmma) wgmma_op_ = &op;
      if (op.kind == OpKind::Tcgen05Mma || op.kind == OpKind::TmemLoad ||
          op.kind == OpKind::TmemRead)
        tcgen05_op_ = &op;
      if (op.result != kNoValue && op.result < k_.value_types.size())
        def_kind_[op.result] = op.kind;
    });
    if (errors_.empty()) region(k_.body, 0, 0, false);
    if (errors_.empty()) check_pipelines();
    // A lowered kernel has no barriers left to check.
    if (errors_.empty() && !lowered_) check_uniformity();
    if (errors_.empty()) return {};
    std::string msg;
    for (size_t i = 0; i < errors_.size(); ++i) msg += (i ? "\n" : "") + errors_[i];
    if (truncated_) msg += fmt::format("\n(more errors not shown)");
    return Error(ErrorKind::Verify, std::move(msg));
  }

 private:
  void error(const std::string& where, const std::string& what) {
    if (errors_.size() >= kMaxErrors) {
      truncated_ = true;
      return;
    }
    errors_.push_back(fmt::format("{}: error: {}", where, what));
  }
  void op_error(const Op& op, const std::string& what) { error(k_.where(op), what); }

  std::string vname(ValueId v) const {
    if (names_.empty()) names_ = value_names(k_);  // only on the error path
    if (v < names_.size() && !names_[v].empty()) return names_[v];
    return fmt::format("value #{}", v);
  }

  bool type_well_formed(const Type& t) const {
    if (t.kind == TypeKind::Void) return true;
    if (static_cast<int>(t.elem) >= kNumElemTypes || !valid_lanes(t.lanes)) return false;
    if (t.kind == TypeKind::Tensor && (t.rank < 1 || t.rank > 8)) return false;
    return true;
  }

  void check_kernel() {
    const std::string where = k_.where(k_.pos);
    const std::string dims_where = k_.where(k_.cube_dim_pos.known() ? k_.cube_dim_pos : k_.pos);
    if (!is_identifier(k_.name))
      error(where, fmt::format("kernel name '{}' must be an identifier", k_.name));
    for (int i = 0; i < 3; ++i)
      if (k_.cube_dim[i] == 0) error(dims_where, "every cube dimension must be at least 1");
    const uint64_t units = uint64_t{k_.cube_dim[0]} * k_.cube_dim[1] * k_.cube_dim[2];
    if (units > kMaxUnitsPerCube)
      error(dims_where, fmt::format("a cube of {} units is too large: at most {} units per cube "
                                    "(cube_dim x*y*z)",
                                    units, kMaxUnitsPerCube));
    const std::string cluster_where =
        k_.where(k_.cluster_dim_pos.known() ? k_.cluster_dim_pos : k_.pos);
    for (int i = 0; i < 3; ++i)
      if (k_.cluster_dim[i] == 0)
        error(cluster_where, "every cluster dimension must be at least 1");
    const uint64_t cluster = uint64_t{k_.cluster_dim[0]} * k_.cluster_dim[1] * k_.cluster_dim[2];
    if (cluster > kMaxCubesPerCluster)
      error(cluster_where,
            fmt::format("a cluster of {} cubes is too large: at most {} cubes per cluster (the "
                        "portable cluster size of sm_90 and sm_100; cluster_dim x*y*z)",
                        cluster, kMaxCubesPerCluster));
    // Malformed types of values defined by ops are reported at their op (define()).
    std::unordered_set<std::string_view> names;
    names.reserve(k_.params.size());
    for (const Param& p : k_.params) {
      const std::string at = k_.where(p.pos.known() ? p.pos : k_.pos);
      if (!is_identifier(p.name))
        error(at, fmt::format("parameter name '{}' must be an identifier", p.name));
      if (!names.insert(p.name).second)
        error(at, fmt::format("two parameters are named '{}'", p.name));
      if (p.value >= k_.value_types.size()) {
        error(at, fmt::format("parameter '{}' has no value", p.name));
        continue;
      }
      if (defined_[p.value]) {
        error(at, fmt::format("parameter '{}' reuses another parameter's value", p.name));
        continue;
      }
      defined_[p.value] = visible_[p.value] = 1;
      const Type& t = k_.type_of(p.value);
      if (!type_well_formed(t)) {
        error(at, fmt::format("parameter '{}' has a malformed type", p.name));
        continue;
      }
      const bool ok_kind = t.kind == TypeKind::Tensor || t.kind == TypeKind::Array ||
                           (t.kind == TypeKind::Value && t.lanes == 1);
      if (!ok_kind)
        error(at, fmt::format("parameter '{}' has type {}: parameters are tensors, arrays "
                              "or scalars",
                              p.name, type_name(t)));
    }
  }

  void define(ValueId v, const Op& op) {
    if (v >= k_.value_types.size()) {
      op_error(op,
               fmt::format("'{}' defines value #{}, which does not exist", op_name(op.kind), v));
      return;
    }
    if (defined_[v]) {
      op_error(op, fmt::format("{} is defined twice; every value is defined once", vname(v)));
      return;
    }
    defined_[v] = visible_[v] = 1;
    if (!type_well_formed(k_.type_of(v)))
      op_error(op, fmt::format("{} has a malformed type", vname(v)));
  }

  // `loops` counts enclosing loops; `in_units` says whether the innermost one is a units loop
  // (a lowered kernel's loop over units, which `break` cannot leave).
  void region(const Region& r, int depth, int loops, bool in_units, bool units_body = false) {
    if (depth > kMaxDepth) {
      error(k_.where(k_.pos), fmt::format("regions are nested deeper than {}", kMaxDepth));
      return;
    }
    std::vector<ValueId> defined_here;
    for (size_t i = 0; i < r.ops.size(); ++i) {
      const Op& op = r.ops[i];
      check_op(op, depth, loops, in_units, units_body);
      if (static_cast<int>(op.kind) >= kNumOpKinds) continue;
      if (has_flag(op.kind, op_flags::Terminator) && i + 1 != r.ops.size())
        op_error(r.ops[i + 1], fmt::format("this op follows '{}' in the same block and would "
                                           "never run; remove it",
                                           op_name(op.kind)));
      const bool is_loop =
          op.kind == OpKind::For || op.kind == OpKind::Loop || op.kind == OpKind::Units;
      for (const Region& sub : op.regions) {
        std::vector<ValueId> args_here;
        for (ValueId a : sub.args) {
          define(a, op);
          if (a < visible_.size()) args_here.push_back(a);
        }
        region(sub, depth + 1, loops + (is_loop ? 1 : 0),
               is_loop ? op.kind == OpKind::Units : in_units, op.kind == OpKind::Units);
        for (ValueId a : args_here) visible_[a] = 0;
      }
      if (op.result != kNoValue) {
        define(op.result, op);
        if (op.result < visible_.size()) defined_here.push_back(op.result);
      }
    }
    for (ValueId v : defined_here) visible_[v] = 0;
  }

  void check_op(const Op& op, int depth, int loops, bool in_units, bool units_body) {
    if (static_cast<int>(op.kind) >= kNumOpKinds) {
      op_error(op, "an op has an invalid kind");
      return;
    }
    const OpInfo& info = op_info(op.kind);
    if (op.loc.file > k_.files.size())
      op_error(op, fmt::format("source location refers to file #{}, but the kernel lists {} "
                               "file{}",
                               op.loc.file, k_.files.size(), k_.files.size() == 1 ? "" : "s"));
    // Operands: exist, defined, in scope.
    bool operands_ok = true;
    SmallVector<Type, 4> types;
    for (ValueId v : op.operands) {
      if (v >= k_.value_types.size()) {
        op_error(op, fmt::format("'{}' uses value #{}, which does not exist", info.name, v));
        operands_ok = false;
        continue;
      }
      if (!defined_[v]) {
        op_error(op, fmt::format("'{}' uses {} before it is defined", info.name, vname(v)));
        operands_ok = false;
      } else if (!visible_[v]) {
        op_error(op, fmt::format("'{}' uses {} outside the region that defines it; keep the "
                                 "value in a variable to carry it out of the region",
                                 info.name, vname(v)));
        operands_ok = false;
      }
      types.push_back(k_.type_of(v));
    }
    // Result presence.
    if (sig_has_result(info.sig) && op.result == kNoValue) {
      op_error(op, fmt::format("'{}' must define a result", info.name));
      return;
    }
    if (!sig_has_result(info.sig) && op.result != kNoValue) {
      op_error(op, fmt::format("'{}' defines no result", info.name));
      return;
    }
    // Regions.
    const int want_regions = sig_region_count(info.sig);
    if (static_cast<int>(op.regions.size()) != want_regions) {
      op_error(op, fmt::format("'{}' must have {} region{}, has {}", info.name, want_regions,
                               want_regions == 1 ? "" : "s", op.regions.size()));
      return;
    }
    for (size_t i = 0; i < op.regions.size(); ++i) {
      const size_t want_args = op.kind == OpKind::Pipeline                          ? 2
                               : op.kind == OpKind::For || op.kind == OpKind::Units ? 1
                                                                                    : 0;
      if (op.regions[i].args.size() != want_args) {
        op_error(op, fmt::format("a '{}' region must define {} value{}", info.name, want_args,
                                 want_args == 1 ? "" : "s"));
        return;
      }
    }
    // Types.
    if (operands_ok) {
      Type result = op.result < k_.value_types.size() ? k_.type_of(op.result) : Type{};
      if (op.result != kNoValue && op.result >= k_.value_types.size()) return;  // define() reports
      const std::string e = check_op_types(op.kind, {types.data(), types.size()}, op.attr, result);
      if (!e.empty()) {
        std::string msg = e;
        // Name the parameter when a store or atomic hits read-only memory.
        if (!op.operands.empty() && op.operands[0] < k_.value_types.size() &&
            k_.type_of(op.operands[0]).read_only &&
            (op.kind == OpKind::Store || info.sig == Sig::Atomic || info.sig == Sig::AtomicCas))
          msg = fmt::format("'{}' writes to {}, which is read-only ({}); declare it writable",
                            info.name, vname(op.operands[0]), type_name(types[0]));
        op_error(op, msg);
      }
      if (op.kind == OpKind::For && e.empty() && op.regions[0].args[0] < k_.value_types.size() &&
          !(k_.type_of(op.regions[0].args[0]) == types[0]))
        op_error(op, fmt::format("the induction variable of 'for' must have the bounds' type {}",
                                 type_name(types[0])));
    }
    if (op.kind == OpKind::Pipeline)
      for (const Region& r : op.regions)
        for (ValueId a : r.args)
          if (a < k_.value_types.size() && !(k_.type_of(a) == Type::value(ElemType::U32)))
            op_error(op, "the round and stage of a pipeline region are u32");
    if (op.kind == OpKind::Units && op.regions[0].args[0] < k_.value_types.size() &&
        !(k_.type_of(op.regions[0].args[0]) == Type::value(ElemType::U32)))
      op_error(op, "the unit index of 'units' must be u32");
    // Lowered kernels (with units loops) run their body once per cube: what refers to one
    // unit must be inside a units loop, and barriers and plane ops are gone.
    if (lowered_) {
      if (op.kind == OpKind::Units && in_units) op_error(op, "'units' loops do not nest");
      // Fragment ops stay, once per plane, on the plane's copy (frag.plane).
      if (is_frag_op(op.kind) && in_units)
        op_error(op, fmt::format("'{}' runs once per plane and cannot be inside a units loop",
                                 info.name));
      // Cube-level ops (tensor memory, tcgen05, mbarriers) stay, once per cube.
      if (is_cube_op(op.kind) && in_units)
        op_error(op, fmt::format("'{}' runs once per cube and cannot be inside a units loop",
                                 info.name));
      if (op.kind == OpKind::UnitPos || op.kind == OpKind::AbsolutePos ||
          op.kind == OpKind::PlaneLane || op.kind == OpKind::PlanePos ||
          (has_flag(op.kind, op_flags::Barrier) && !is_cube_op(op.kind)) ||
          (has_flag(op.kind, op_flags::PlaneOp) && !is_frag_op(op.kind)))
        op_error(op, fmt::format("'{}' cannot appear in a lowered kernel (one with units "
                                 "loops); compute it from the unit index",
                                 info.name));
      if (op.kind == OpKind::Break && in_units) op_error(op, "'break' cannot leave a units loop");
    }
    // Placement.
    if (op.kind == OpKind::AllocFrag && depth != 0)
      op_error(op,
               "'alloc.frag' must be at the top level of the kernel, not inside control "
               "flow: a fragment is allocated once per plane");
    if (op.kind == OpKind::AllocLocal && units_body) {
      // per-unit memory of a lowered kernel, allocated for each unit
    } else if ((op.kind == OpKind::AllocShared || op.kind == OpKind::AllocLocal) && depth != 0)
      op_error(op, fmt::format("'{}' must be at the top level of the kernel, not inside control "
                               "flow: memory is allocated once per {}",
                               info.name, op.kind == OpKind::AllocShared ? "cube" : "unit"));
    if ((op.kind == OpKind::Break || op.kind == OpKind::Continue) && loops == 0)
      op_error(op,
               fmt::format("'{}' outside a loop; it must be inside a 'for' or 'loop'", info.name));
  }

  // Where a pipeline may stand and what its regions may hold (docs/ir.md "pipeline"). On a GPU
  // the cube gets a producer plane of its own: it runs the ops before the pipeline with the
  // consumers, then only the produce region (one unit of it), and leaves the kernel at the
  // pipeline's end. So the ops before it must not write memory or issue what the producer's
  // unit issues (it would issue it twice), the produce region holds only what one unit can do
  // for the cube, and the consume region nothing that waits for the producer plane.
  void check_pipelines() {
    const Op* first = nullptr;
    walk(k_.body, [&](const Op& op) {
      if (op.kind != OpKind::Pipeline) return;
      if (first) {
        op_error(op,
                 fmt::format("a kernel has one pipeline; another one is at {}", k_.where(*first)));
        return;
      }
      first = &op;
    });
    if (!first) return;
    const Op& p = *first;
    if (lowered_) {
      op_error(p, "'pipeline' cannot appear in a lowered kernel (one with units loops)");
      return;
    }
    size_t at = k_.body.ops.size();
    for (size_t i = 0; i < k_.body.ops.size(); ++i)
      if (&k_.body.ops[i] == first) at = i;
    if (at == k_.body.ops.size()) {
      op_error(p,
               "'pipeline' must be at the top level of the kernel, not inside control flow: "
               "the producer plane leaves the kernel where it ends");
      return;
    }
    const auto& d = k_.cube_dim;
    if (d[1] != 1 || d[2] != 1 || d[0] % 32 != 0 || d[0] + 32 > kMaxUnitsPerCube)
      op_error(p, fmt::format("a pipeline needs a one-dimensional cube of whole planes (at most "
                              "{} units, leaving room for the producer plane), not {}x{}x{}",
                              kMaxUnitsPerCube - 32, d[0], d[1], d[2]));
    for (size_t i = 0; i < at; ++i)
      walk_op(k_.body.ops[i], [&](const Op& op) {
        if (const char* why = before_pipeline_error(op.kind))
          op_error(op, fmt::format("'{}' before a pipeline: {}; move it after the pipeline or "
                                   "into its consume region",
                                   op_name(op.kind), why));
      });
    for (const Op& op : p.regions[0].ops)
      walk_op(op, [&](const Op& o) {
        if (!produce_allowed(o.kind))
          op_error(o, fmt::format("'{}' in a pipeline's produce region, which one unit of the "
                                  "producer plane runs for the cube: it may compute uniform "
                                  "values, branch and loop on them, read memory and issue "
                                  "tma.load, tma.prefetch and mbar.arrive_expect_tx",
                                  op_name(o.kind)));
      });
    for (size_t i = at + 1; i < k_.body.ops.size(); ++i)
      walk_op(k_.body.ops[i], [&](const Op& op) {
        if (op.kind == OpKind::SyncCluster)
          op_error(op,
                   "'sync_cluster' after a pipeline: the producer plane has left the kernel "
                   "and a cluster barrier would wait for it; synchronize the cluster before "
                   "the pipeline");
      });
    for (const Op& op : p.regions[1].ops)
      walk_op(op, [&](const Op& o) {
        // tcgen05 multiplies and commits are issued by unit 0, a consumer, and wait for no one.
        const bool issued = o.kind == OpKind::Tcgen05Mma || o.kind == OpKind::Tcgen05Commit;
        if (o.kind == OpKind::Return || (has_flag(o.kind, op_flags::Barrier) && !issued))
          op_error(o, fmt::format("'{}' in a pipeline's consume region, which the consumer "
                                  "planes run while the producer plane runs its own loop: {}",
                                  op_name(o.kind),
                                  o.kind == OpKind::Return
                                      ? "a unit that returns never releases its stages"
                                      : "it would wait for the producer plane too; move it "
                                        "after the pipeline"));
      });
  }

  static void walk_op(const Op& op, const std::function<void(const Op&)>& f) {
    f(op);
    for (const Region& r : op.regions) walk(r, f);
  }

  static const char* before_pipeline_error(OpKind k) {
    if (k == OpKind::Return) return "the producer plane would return too";
    if (k == OpKind::Print) return "the producer plane would print too";
    if (k == OpKind::TmaLoad || k == OpKind::TmaLoadMulticast || k == OpKind::TmaPrefetch ||
        k == OpKind::MbarArriveTx)
      return "the producer plane runs it too, and its first unit issues these ops (for the "
             "produce region), so it would issue it a second time";
    switch (op_info(k).sig) {
      case Sig::Store:
      case Sig::Atomic:
      case Sig::AtomicCas:
      case Sig::AsyncCopy:
      case Sig::FragStore:
        return "the producer plane runs these ops too, and must not write memory";
      default:
        return nullptr;
    }
  }

  static bool produce_allowed(OpKind k) {
    if (has_flag(k, op_flags::Pure)) return !has_flag(k, op_flags::Varying);
    switch (k) {
      case OpKind::If:
      case OpKind::For:
      case OpKind::Loop:
      case OpKind::Break:
      case OpKind::Continue:
      case OpKind::Var:
      case OpKind::VarRead:
      case OpKind::VarWrite:
      case OpKind::Load:
      case OpKind::Assert:
      case OpKind::TmaLoad:
      case OpKind::TmaPrefetch:
      case OpKind::MbarArriveTx:
        return true;
      default:
        return false;
    }
  }

  std::string cause_words(const Op* cause) const {
    if (!cause) return "control flow that depends on the unit";
    const std::string at = k_.where(*cause);
    switch (cause->kind) {
      case OpKind::If:
        return fmt::format("the condition of the 'if' at {} depends on the unit", at);
      case OpKind::For:
        return fmt::format("the bounds of the 'for' at {} depend on the unit", at);
      case OpKind::Return:
        return fmt::format("the 'return' at {} ends the kernel for some units only", at);
      default:
        return fmt::format("the '{}' at {} runs for some units only", op_name(cause->kind), at);
    }
  }

  void check_uniformity() {
    const UniformityInfo u = analyze_uniformity(k_);
    if (frag_op_ && k_.units_per_cube() % 32 != 0)
      op_error(*frag_op_,
               fmt::format("'{}' needs whole planes, but the cube has {} units, not a multiple of "
                           "32; make the cube size a multiple of 32",
                           op_name(frag_op_->kind), k_.units_per_cube()));
    if (wgmma_op_ && k_.units_per_cube() % 128 != 0)
      op_error(*wgmma_op_,
               fmt::format("'wgmma.mma' needs whole warpgroups (4 planes, 128 units), but the "
                           "cube has {} units; make the cube size a multiple of 128",
                           k_.units_per_cube()));
    if (tcgen05_op_ && k_.units_per_cube() % 128 != 0)
      op_error(*tcgen05_op_,
               fmt::format("'{}' needs the 128 lanes of tensor memory covered by 4 whole planes "
                           "(128 units), but the cube has {} units; make the cube size a "
                           "multiple of 128",
                           op_name(tcgen05_op_->kind), k_.units_per_cube()));
    size_t index = 0;  // control is in pre-order, as walk visits
    walk(k_.body, [&](const Op& op) {
      const auto ctl = u.control[index++];
      const std::string name(op_name(op.kind));
      if (has_flag(op.kind, op_flags::Barrier) && ctl.level != Uniformity::Uniform) {
        op_error(op, fmt::format("'{}' is under control flow that differs between the units of "
                                 "the cube: {}. Every unit must reach the same barrier; move it "
                                 "out of that control flow or make the condition the same for "
                                 "all units",
                                 name, cause_words(ctl.cause)));
      } else if ((has_flag(op.kind, op_flags::PlaneOp) || op.kind == OpKind::TmemRead) &&
                 ctl.level == Uniformity::Varying) {
        op_error(op, fmt::format("'{}' is under control flow that differs between the units of "
                                 "a plane: {}. Every unit of the plane must reach it; compute "
                                 "it before the branch and use the result inside",
                                 name, cause_words(ctl.cause)));
      }
      // What a plane's fragment op reads besides fragments is the plane's (one index, one
      // stride, one fill value for the whole plane).
      if (is_frag_op(op.kind))
        for (size_t i = 0; i < op.operands.size(); ++i) {
          const ValueId x = op.operands[i];
          const bool seen =
              std::find(op.operands.begin(), op.operands.begin() + i, x) != op.operands.begin() + i;
          if (!seen && !k_.type_of(x).is_frag() && !k_.type_of(x).is_memory() &&
              u.of(x) == Uniformity::Varying)
            op_error(op, fmt::format("operand {} of '{}' differs between the units of a plane; "
                                     "a plane works on a fragment together, so its index, stride, "
                                     "fill value and descriptors must be the same for the whole "
                                     "plane (compute them from plane_pos(), cube_pos() or "
                                     "uniform values)",
                                     vname(x), name));
        }
      // A multiply's descriptors describe shared memory: they come from wgmma.desc itself, not
      // from arithmetic on other values.
      if (op.kind == OpKind::Wgmma)
        for (size_t i : {size_t{1}, size_t{2}}) {
          const auto d = def_kind_.find(op.operands[i]);
          if (d == def_kind_.end() || d->second != OpKind::WgmmaDesc)
            op_error(op, fmt::format("the {} descriptor {} of 'wgmma.mma' does not come from "
                                     "'wgmma.desc'; build each descriptor with wgmma.desc from "
                                     "its shared array",
                                     i == 1 ? "A" : "B", vname(op.operands[i])));
        }
      // A cube-level op runs once for the cube: what it reads is the cube's.
      if (is_cube_op(op.kind))
        for (ValueId x : op.operands)
          if (!k_.type_of(x).is_memory() && u.of(x) != Uniformity::Uniform)
            op_error(op, fmt::format("operand {} of '{}' differs between the units of the cube; "
                                     "the op runs once for the whole cube, so its addresses, "
                                     "descriptors, indices and flags must be the same for every "
                                     "unit (compute them from cube_pos() or uniform values)",
                                     vname(x), name));
      // tcgen05.ld is a plane's instruction: one address for the whole plane.
      if (op.kind == OpKind::TmemRead)
        for (ValueId x : op.operands)
          if (u.of(x) == Uniformity::Varying)
            op_error(op, fmt::format("operand {} of 'tmem.read' differs between the units of a "
                                     "plane; the plane reads tensor memory together (each unit "
                                     "its own row), so the address and column must be the same "
                                     "for the whole plane",
                                     vname(x)));
      if (op.kind == OpKind::Tcgen05Mma)
        for (size_t i : {size_t{1}, size_t{2}}) {
          const auto d = def_kind_.find(op.operands[i]);
          if (d == def_kind_.end() || d->second != OpKind::Tcgen05Desc)
            op_error(op, fmt::format("the {} descriptor {} of 'tcgen05.mma' does not come from "
                                     "'tcgen05.desc'; build each descriptor with tcgen05.desc "
                                     "from its shared array",
                                     i == 1 ? "A" : "B", vname(op.operands[i])));
        }
      if (op.kind == OpKind::PlaneBroadcast && op.operands.size() == 2 &&
          u.of(op.operands[1]) == Uniformity::Varying)
        op_error(op,
                 "the lane of 'plane.broadcast' differs between units; it must be the same "
                 "for the whole plane (use 'plane.shuffle' for a per-unit lane)");
    });
  }

  const Kernel& k_;
  mutable std::vector<std::string> names_;
  std::vector<uint8_t> defined_, visible_;
  std::vector<std::string> errors_;
  bool truncated_ = false;
  bool lowered_ = false;
  const Op* frag_op_ = nullptr;                   // one fragment op of the kernel, if any
  const Op* wgmma_op_ = nullptr;                  // one warpgroup multiply, if any
  const Op* tcgen05_op_ = nullptr;                // one tcgen05.mma, tmem.load or tmem.read
  std::unordered_map<ValueId, OpKind> def_kind_;  // what defines each op result
};

}  // namespace

Status verify(const Kernel& k) {
  return Verifier(k).run();
}

}  // namespace kiln::ir
