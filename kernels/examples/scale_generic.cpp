// scale_generic: x = x * factor. Shows one source for several element types: a function
// template registered once per type; a launch (or `kiln show --dtype x=f16`) picks the
// instantiation from the argument types.
#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void scale_generic(Tensor<T> x, T factor) {
  u32 i = absolute_pos();
  if_(i < x.len(), [&] { x[i] = x[i] * factor; });
}
KILN_KERNEL_GENERIC(scale_generic, "x: line=max, factor", f32, f64, f16, bf16, f8e4m3, f8e5m2)
    .cube_dim(256)
    .describe("x *= factor for f32, f64, f16, bf16 and the f8 types");

KILN_RUN(scale_generic)
    .shape("x", {1 << 22})
    .scalar("factor", 0.5)
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::kernels::ceil_div(d.numel("x") / d.line("x"), d.cube_dim.x);
    })
    .reference([](kiln::kernels::RunData& d) {
      const double factor = d.scalar("factor");
      for (double& v : d["x"]) v *= factor;
    });
