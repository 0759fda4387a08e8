// distributive: lhs = (a + b) * c and rhs = a * c + b * c, element by element. Equal in real
// numbers, not in floating point: every add and multiply rounds its result to the nearest f32
// (ir/ir.h; no backend fuses or reorders them), and the two orders round at different points.
// `kiln demo` counts how many elements differ and by how much.
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

void distributive(Tensor<const f32> a, Tensor<const f32> b, Tensor<const f32> c, Tensor<f32> lhs,
                  Tensor<f32> rhs) {
  u32 i = absolute_pos();
  if_(i < a.len(), [&] {
    f32 x = a[i], y = b[i], z = c[i];
    lhs[i] = (x + y) * z;
    rhs[i] = x * z + y * z;
  });
}
KILN_KERNEL(distributive, "a: line=1, b: line=1, c: line=1, lhs: line=1, rhs: line=1")
    .cube_dim(256)
    .describe("(a + b) * c and a * c + b * c, which floating point tells apart");

KILN_RUN(distributive)
    .shape("a", {1 << 22})
    .same_shape("b", "a")
    .same_shape("c", "a")
    .same_shape("lhs", "a")
    .same_shape("rhs", "a")
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(static_cast<uint32_t>(kiln::kernels::ceil_div(d.numel("a"), 256)));
    })
    .tolerance(0, 0)
    .reference([](kiln::kernels::RunData& d) {
      // In f32, as the kernel rounds: the exact results of each order.
      const auto& a = d["a"];
      const auto& b = d["b"];
      const auto& c = d["c"];
      for (size_t i = 0; i < a.size(); ++i) {
        const auto x = static_cast<float>(a[i]), y = static_cast<float>(b[i]),
                   z = static_cast<float>(c[i]);
        const float sum = x + y, xz = x * z, yz = y * z;
        d["lhs"][i] = sum * z;
        d["rhs"][i] = xz + yz;
      }
    });
