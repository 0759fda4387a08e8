// The in-order meaning of a pipeline (ir.h, docs/ir.md "pipeline"), for backends that run a
// cube's units one after another and so have no producer plane to give it: the CPU.
#pragma once

#include "ir/ir.h"

namespace kiln::passes {

// Replaces the kernel's pipeline op, if any, with what it means when the producer runs each
// round just before the consumers:
//
//   mbar.init %full, s, 1                  for each stage s
//   for %r = 0 to %rounds step 1 {
//     %s = rem %r, STAGES
//     <produce ops>                        (the consume region's round and stage are copies)
//     mbar.wait %full, %s, (%r / STAGES) & 1
//     <consume ops>
//   }
//
// The empty mbarriers are initialized for one arrival (a `commit` pipeline's consume region
// commits to them) and otherwise unused: a stage is refilled only after its consumers ran.
// Needs and gives a verified kernel in unit form; returns whether it changed the kernel.
bool lower_pipelines(ir::Kernel& k);

}  // namespace kiln::passes
