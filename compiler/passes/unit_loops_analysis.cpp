// Unit-loop fission's analysis (unit_loops_analysis.h).
#include "compiler/passes/unit_loops_analysis.h"

namespace kiln::passes::unit_loops_analysis {

using namespace ir;

// Facts of an op about its own regions, for every op (memoized by address). A break or
// continue leaves an op unless the op is the loop it belongs to or contains that loop.
OpFacts scan(const Op& op, std::unordered_map<const Op*, OpFacts>& out) {
  OpFacts f;
  f.barrier = op.kind == OpKind::SyncCube || is_cube_op(op.kind);
  f.plane = is_plane_op(op.kind) || op.kind == OpKind::SyncPlane;
  f.returns = op.kind == OpKind::Return;
  f.escaping = op.kind == OpKind::Break || op.kind == OpKind::Continue;
  const bool loop = op.kind == OpKind::For || op.kind == OpKind::Loop;
  for (const Region& r : op.regions)
    for (const Op& sub : r.ops) {
      const OpFacts sf = scan(sub, out);
      f.barrier |= sf.barrier;
      f.plane |= sf.plane;
      f.returns |= sf.returns;
      if (!loop) f.escaping |= sf.escaping;
    }
  out[&op] = f;
  return f;
}

}  // namespace kiln::passes::unit_loops_analysis
