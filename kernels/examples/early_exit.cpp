// early_exit: y = max(x, 0) (ReLU). Shows early return: units past the end of the data
// return at once, so the rest of the kernel needs no bounds check.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

void early_exit(Tensor<const f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(i >= x.len(), [&] { return_(); });
  f32 v = x[i];
  y[i] = select(v < 0.0f, 0.0f, v);
}
KILN_KERNEL(early_exit, "x, y").cube_dim(256).describe("ReLU with an early return");
