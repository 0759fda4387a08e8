// scale_generic: x = x * factor. Shows one source for several element types: a function
// template registered once per type; a launch (or `kiln show --dtype x=f16`) picks the
// instantiation from the argument types.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

template <class T>
void scale_generic(Tensor<T> x, T factor) {
  u32 i = absolute_pos();
  if_(i < x.len(), [&] { x[i] = x[i] * factor; });
}
KILN_KERNEL_GENERIC(scale_generic, "x: line=4, factor", f32, f64, f16, bf16)
    .cube_dim(256)
    .describe("x *= factor for f32, f64, f16 and bf16");
