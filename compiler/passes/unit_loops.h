// Unit-loop fission: turns a kernel whose body runs once per unit into one whose body runs once
// per cube, with `units` loops over the cube's units split at every barrier and plane op.
#pragma once

#include "ir/ir.h"

namespace kiln::passes {

// Needs: a verified kernel in unit form (no `units` ops). Gives: a verified lowered kernel
// (ir.h, "Lowered kernels"): uniform control flow that contains barriers runs once per cube,
// segments between barriers become `units` loops (or, when they hold plane ops, a loop over the
// cube's planes with `units` loops over each plane), values live across loops go through
// per-unit context arrays in shared memory unless they are cheap to recompute, variables and
// local arrays live across loops the same way, and plane ops read those arrays. Planes are
// `plane_width` consecutive units (the backend's plane width).
Result<ir::Kernel> lower_unit_loops(const ir::Kernel& k, uint32_t plane_width);

}  // namespace kiln::passes
