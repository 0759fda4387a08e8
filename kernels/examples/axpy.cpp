// axpy: y = a * x + y. Shows lines: each unit handles one line of x and y (4 floats by
// default, chosen per launch), and the scalar `a` broadcasts against the line.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

void axpy(Tensor<const f32> x, Tensor<f32> y, f32 a) {
  u32 i = absolute_pos();
  if_(i < y.len(), [&] { y[i] = fma(a, x[i], y[i]); });
}
KILN_KERNEL(axpy, "x: line=4, y: line=4, a").cube_dim(256).describe("y = a * x + y, by lines");
