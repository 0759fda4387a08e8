// early_exit: y = max(x, 0) (ReLU). Shows early return: units past the end of the data
// return at once, so the rest of the kernel needs no bounds check.
#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

void early_exit(Tensor<const f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(i >= x.len(), [&] { return_(); });
  f32 v = x[i];
  y[i] = select(v < 0.0f, 0.0f, v);
}
KILN_KERNEL(early_exit, "x, y").cube_dim(256).describe("ReLU with an early return");

KILN_RUN(early_exit)
    .shape("x", {1 << 22})
    .same_shape("y", "x")
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::kernels::ceil_div(d.numel("x"), d.cube_dim.x);
    })
    .reference([](kiln::kernels::RunData& d) {
      const auto& x = d["x"];
      auto& y = d["y"];
      for (size_t i = 0; i < y.size(); ++i) y[i] = x[i] < 0 ? 0.0 : x[i];
    });
