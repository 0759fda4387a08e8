// stencil2d: a 5-point Laplacian on a 2-D grid, out = up + down + left + right - 4 * centre
// on interior points, a copy of the input on the border. Shows 2-D cubes (16 x 16 units) and
// 2-D tensor indexing, in(row, column).
#include <algorithm>
#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

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

KILN_RUN(stencil2d)
    .shape("in", {2048, 2048})
    .same_shape("out", "in")
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("in", 1), d.cube_dim.x),
                        kiln::kernels::ceil_div(d.dim("in", 0), d.cube_dim.y));
    })
    .reference([](kiln::kernels::RunData& d) {
      const auto h = static_cast<size_t>(d.dim("in", 0)), w = static_cast<size_t>(d.dim("in", 1));
      const auto& in = d["in"];
      auto& out = d["out"];
      for (size_t y = 0; y < h; ++y)
        for (size_t x = 0; x < w; ++x) {
          const size_t i = y * w + x;
          out[i] = x > 0 && y > 0 && x + 1 < w && y + 1 < h
                       ? in[i - w] + in[i + w] + in[i - 1] + in[i + 1] - 4.0 * in[i]
                       : in[i];
        }
    });
