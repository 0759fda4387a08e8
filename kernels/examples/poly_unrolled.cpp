// poly_unrolled: y = p(x) with p(v) = sum over k <= degree of v^k / (k + 1), by Horner's rule.
// Shows a comptime-unrolled loop: `degree` is comptime, so the C++ for loop runs at trace time
// and the IR holds one fma per coefficient, with no loop.
#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

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
KILN_KERNEL(poly_unrolled, "x: line=max, y: line=max, degree = 8 in 0..256")
    .cube_dim(256)
    .describe("polynomial by Horner's rule, unrolled at trace time");

KILN_RUN(poly_unrolled)
    .shape("x", {1 << 22})
    .same_shape("y", "x")
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::kernels::ceil_div(d.numel("x") / d.line("x"), d.cube_dim.x);
    })
    // One fma (two operations) per coefficient and element: compute-bound for high degrees,
    // where `kiln run` reports GFLOP/s next to GB/s.
    .flops([](const kiln::kernels::RunData& d) {
      return 2.0 * static_cast<double>(d.comptime("degree")) * static_cast<double>(d.numel("x"));
    })
    .reference([](kiln::kernels::RunData& d) {
      // sum over k <= degree of x^k / (k + 1), by Horner's rule in double.
      const int64_t degree = d.comptime("degree");
      const auto& x = d["x"];
      auto& y = d["y"];
      for (size_t i = 0; i < y.size(); ++i) {
        const double v = x[i];
        double acc = 1.0 / static_cast<double>(degree + 1);
        for (int64_t k = degree - 1; k >= 0; --k) acc = acc * v + 1.0 / static_cast<double>(k + 1);
        y[i] = acc;
      }
    });
