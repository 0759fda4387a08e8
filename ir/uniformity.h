// Uniformity analysis: which values and which control flow may differ between the units of a
// cube. The verifier uses it to reject barriers and plane ops under unit-dependent control; the
// CPU backend uses it to run uniform control flow once per cube.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace kiln::ir {

// Ordered: a larger level is less uniform.
enum class Uniformity : uint8_t {
  Uniform = 0,  // the same for every unit of the cube
  Plane = 1,    // the same for every unit of a plane, may differ between planes
  Varying = 2,  // may differ between any two units
};

struct UniformityInfo {
  std::vector<Uniformity> values;  // per ValueId
  // Per op, in pre-order (the order of ir::walk): the uniformity of the control flow the op
  // runs under, and for a varying one the op that made it so (an if, a for, or a jump).
  struct Control {
    Uniformity level = Uniformity::Uniform;
    const Op* cause = nullptr;
  };
  std::vector<Control> control;

  Uniformity of(ValueId v) const { return v < values.size() ? values[v] : Uniformity::Varying; }
};

// Assumes a structurally valid kernel (the verifier checks structure first). Memory read at a
// uniform index counts as uniform: that holds whenever the writes were ordered by a barrier,
// which the IR's semantics require of a correct kernel.
UniformityInfo analyze_uniformity(const Kernel& k);

}  // namespace kiln::ir
