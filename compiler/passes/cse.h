// Common-subexpression and dead-code elimination of pure ops.
#pragma once

#include "ir/ir.h"

namespace kiln::passes {

// Needs: a verified kernel. Gives: the same kernel where a pure op that repeats an earlier
// visible one (same kind, operands, attribute and type) is removed and its uses renamed, and
// pure ops whose results are unused (and empty units loops) are removed. Returns whether
// anything changed.
bool cse(ir::Kernel& k);

}  // namespace kiln::passes
