// The IR verifier: structure, types, scoping, memory spaces, constants and barrier uniformity.
#pragma once

#include "ir/ir.h"

namespace kiln::ir {

// Checks every rule of the IR (see ir.h and docs/ir.md). On failure the error lists each
// problem on its own line as `where: error: what`, where `where` is the .kir line:column for
// parsed kernels and the DSL file:line for traced ones. Never crashes, whatever the kernel.
Status verify(const Kernel& k);

// The largest cube (units per cube) a kernel may declare: the CUDA block limit, kept on every
// target so a kernel runs everywhere.
inline constexpr uint32_t kMaxUnitsPerCube = 1024;

}  // namespace kiln::ir
