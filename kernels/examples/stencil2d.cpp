// stencil2d: a 5-point Laplacian on a 2-D grid, out = up + down + left + right - 4 * centre
// on interior points, a copy of the input on the border. Shows 2-D cubes (16 x 16 units) and
// 2-D tensor indexing, in(row, column).
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

void stencil2d(Tensor<const f32> in, Tensor<f32> out) {
  u32 x = absolute_pos_x();
  u32 y = absolute_pos_y();
  u32 h = in.shape(0);
  u32 w = in.shape(1);
  if_(y < h && x < w, [&] {
    if_(x > 0 && y > 0 && x + 1 < w && y + 1 < h, [&] {
      out(y, x) = in(y - 1, x) + in(y + 1, x) + in(y, x - 1) + in(y, x + 1) - 4.0f * in(y, x);
    }).else_([&] { out(y, x) = in(y, x); });
  });
}
KILN_KERNEL(stencil2d, "in: rank=2, out: rank=2")
    .cube_dim(16, 16)
    .describe("5-point stencil on a 2-D grid");
