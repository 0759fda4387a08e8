// row_sum: out[r] = sum of row r of a matrix; one cube per row. Shows shared memory and
// barriers: each unit sums a strided part of the row, then the cube combines the partial sums
// with a tree in shared memory. `units` is comptime, so the C++ loop over the tree runs at trace
// time and the IR has one step per level. The cube has `units` units: the registration says so,
// so launches and the CLI take the cube size from `units`, and any other is an error.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

void row_sum(Tensor<const f32> in, Tensor<f32> out, int units) {
  auto partial = shared_array<f32>(static_cast<uint32_t>(units));
  u32 row = cube_pos();
  u32 lines = in.shape(1) / in.line_size();
  Var<f32> acc = splat<f32>(0.0f, in.line_size());
  for_range(unit_pos(), lines, units, [&](u32 j) { acc += in(row, j); });
  partial[unit_pos()] = line_sum(acc);
  sync_cube();
  // Halve the number of partial sums until one is left (any cube size, not only powers of 2).
  int width = 1;
  while (width < units) width *= 2;
  for (int s = width / 2; s > 0; s /= 2) {
    if_(unit_pos() < s && unit_pos() + s < units,
        [&] { partial[unit_pos()] += partial[unit_pos() + s]; });
    sync_cube();
  }
  if_(unit_pos() == 0, [&] { out[row] = partial[0]; });
}
KILN_KERNEL(row_sum, "in: rank=2, out, units = 256 in 1..1024")
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    })
    .describe("sum of each row, a tree reduction in shared memory");

KILN_RUN(row_sum)
    .shape("in", {2048, 2048})
    .shape("out",
           [](const kiln::kernels::RunData& d) { return std::vector<int64_t>{d.dim("in", 0)}; })
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(static_cast<uint32_t>(d.dim("in", 0)));
    })
    .tolerance(1e-5, 1e-4)
    .reference([](kiln::kernels::RunData& d) {
      const auto cols = static_cast<size_t>(d.dim("in", 1));
      const auto& in = d["in"];
      auto& out = d["out"];
      for (size_t r = 0; r < out.size(); ++r) {
        double s = 0;
        for (size_t c = 0; c < cols; ++c) s += in[r * cols + c];
        out[r] = s;
      }
    });
