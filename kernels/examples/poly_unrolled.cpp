// poly_unrolled: y = p(x) with p(v) = sum over k <= degree of v^k / (k + 1), by Horner's rule.
// Shows a comptime-unrolled loop: `degree` is comptime, so the C++ for loop runs at trace time
// and the IR holds one fma per coefficient, with no loop.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

void poly_unrolled(Tensor<const f32> x, Tensor<f32> y, int degree) {
  u32 i = absolute_pos();
  if_(i < x.len(), [&] {
    f32 v = x[i];
    f32 acc = splat<f32>(1.0f / static_cast<float>(degree + 1), v.line_size());
    for (int k = degree - 1; k >= 0; --k) acc = fma(acc, v, 1.0f / static_cast<float>(k + 1));
    y[i] = acc;
  });
}
KILN_KERNEL(poly_unrolled, "x: line=4, y: line=4, degree = 8")
    .cube_dim(256)
    .describe("polynomial by Horner's rule, unrolled at trace time");
