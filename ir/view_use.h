// How a kernel uses the views of its tensor parameters: which it indexes flat (an access whose
// index owes nothing to the parameter's strides, so only a dense row-major view is read as the
// caller means it) and which it writes. The runtime refuses, per launch, what a kernel would
// read or write outside a view (docs/runtime.md "Views").
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.h"

namespace kiln::ir {

struct ParamViewUse {
  bool strided = false;  // some access honors the view's strides (t(i, j), tma, stride-built index)
  bool flat = false;     // some access's index does not depend on the parameter's strides
  bool written = false;  // stored to (store, atomics, frag.store, tma.store)
};

// One entry per kernel parameter, in parameter order (non-tensor parameters stay all false).
std::vector<ParamViewUse> view_use(const Kernel& k);

}  // namespace kiln::ir
