// plane_sum: out[c] = sum of the cube_dim() elements of cube c. Shows plane (warp)
// reductions: each plane sums its values with plane_sum, lane 0 of each plane writes the
// plane's sum to shared memory, and the first plane reduces those partial sums the same way.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

void plane_sum_kernel(Tensor<const f32> in, Tensor<f32> out, int max_planes) {
  auto partial = shared_array<f32>(static_cast<uint32_t>(max_planes));
  u32 i = absolute_pos();
  Var<f32> x = 0.0f;
  if_(i < in.len(), [&] { x = in[i]; });
  f32 s = plane_sum(x);
  if_(plane_lane() == 0, [&] { partial[plane_pos()] = s; });
  sync_cube();
  if_(plane_pos() == 0, [&] {
    u32 planes = (cube_dim() + plane_dim() - 1) / plane_dim();
    Var<f32> p = 0.0f;
    if_(plane_lane() < planes, [&] { p = partial[plane_lane()]; });
    f32 total = plane_sum(p);
    if_(plane_lane() == 0, [&] { out[cube_pos()] = total; });
  });
}
KILN_KERNEL_AS("plane_sum", plane_sum_kernel, "in, out, max_planes = 32 in 1..1024")
    .cube_dim(256)
    .describe("per-cube sums with plane (warp) reductions");

KILN_RUN(plane_sum)
    .shape("in", {1 << 22})
    .shape("out",
           [](const kiln::kernels::RunData& d) {
             return std::vector<int64_t>{kiln::kernels::ceil_div(d.numel("in"), d.cube_dim.x)};
           })
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::kernels::ceil_div(d.numel("in"), d.cube_dim.x);
    })
    .reference([](kiln::kernels::RunData& d) {
      const size_t block = d.cube_dim.x;
      const auto& in = d["in"];
      for (size_t c = 0; c < d["out"].size(); ++c) {
        double s = 0;
        for (size_t i = c * block; i < std::min(in.size(), (c + 1) * block); ++i) s += in[i];
        d["out"][c] = s;
      }
    });
