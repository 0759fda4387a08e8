// Unit-loop fission's analysis (internal to compiler/passes/unit_loops.cpp): what each op of
// the input contains (barriers, plane ops, escaping jumps, returns), and what a lowering run
// discovers about values and variables that must outlive their loop (the plan the next run
// applies). The rewriting and the transport of values between loops are in unit_loops.cpp.
#pragma once

#include <map>
#include <set>
#include <unordered_map>

#include "ir/ir.h"

namespace kiln::passes::unit_loops_analysis {

// What a run discovers, and what the next run applies.
struct Plan {
  std::set<ir::ValueId> ctx;       // values kept in per-unit context arrays
  std::set<ir::ValueId> ctx_vars;  // variables and local arrays kept per unit across loops
  bool done_flags = false;         // units that returned are skipped by later loops
};
struct Facts {
  std::set<ir::ValueId> ctx;
  std::map<ir::ValueId, std::set<int>> segments;  // variable or local array -> loops touching it
  bool unit_return = false;
  int units_loops = 0;
  int frag_ops = 0;  // fragment ops, which run per plane and must skip planes that returned
  bool loop_in_loop = false;  // a units loop runs repeatedly (in a lifted loop or per plane)
};

// Per op of the input: what its regions contain.
struct OpFacts {
  bool barrier = false;   // a sync_cube or a cube op (tensor memory, tcgen05) inside
  bool plane = false;     // a plane op or sync_plane inside (or the op is one)
  bool escaping = false;  // a break/continue inside that leaves the op
  bool returns = false;   // a return inside
};

inline bool is_plane_op(ir::OpKind k) {
  return ir::has_flag(k, ir::op_flags::PlaneOp);
}
using ir::is_frag_op;
inline bool is_jump(ir::OpKind k) {
  return k == ir::OpKind::Break || k == ir::OpKind::Continue || k == ir::OpKind::Return;
}
inline bool is_control(ir::OpKind k) {
  return k == ir::OpKind::If || k == ir::OpKind::For || k == ir::OpKind::Loop;
}

// Facts of an op about its own regions, for every op (memoized by address in `out`).
OpFacts scan(const ir::Op& op, std::unordered_map<const ir::Op*, OpFacts>& out);

}  // namespace kiln::passes::unit_loops_analysis
