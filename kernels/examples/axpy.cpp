// axpy: y = a * x + y. Shows lines: each unit handles one line of x and y (4 floats by
// default, chosen per launch), and the scalar `a` broadcasts against the line.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

void axpy(Tensor<const f32> x, Tensor<f32> y, f32 a) {
  u32 i = absolute_pos();
  if_(i < y.len(), [&] { y[i] = fma(a, x[i], y[i]); });
}
KILN_KERNEL(axpy, "x: line=max, y: line=max, a").cube_dim(256).describe("y = a * x + y, by lines");

// How `kiln run` and `kiln demo` run it, and what it must compute.
KILN_RUN(axpy)
    .shape("x", {1 << 22})
    .same_shape("y", "x")
    .scalar("a", 2.0)
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::kernels::ceil_div(d.numel("y") / d.line("y"), d.cube_dim.x);
    })
    .reference([](kiln::kernels::RunData& d) {
      auto& y = d["y"];
      const auto& x = d["x"];
      for (size_t i = 0; i < y.size(); ++i)
        y[i] = static_cast<double>(std::fma(static_cast<float>(d.scalar("a")),
                                            static_cast<float>(x[i]), static_cast<float>(y[i])));
    });
