// sum: partial[c] = the sum of cube c's block of x (a standard library kernel).
// Each unit adds `chunk` consecutive lines with `accumulators` independent running sums, so the
// additions pipeline instead of waiting on each other; the units of a cube then combine their
// sums in shared memory. Summing the per-cube partials is left to the caller (or a second
// launch). Launch with cube_dim == units and ceil(len / (units * chunk)) cubes.
#include <algorithm>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

void sum(Tensor<const f32> x, Tensor<f32> partial, int units, int chunk, int accumulators) {
  auto sums = shared_array<f32>(static_cast<uint32_t>(units));
  const int line = x.line_size();
  u32 n = x.len();
  u32 begin = min((cube_pos() * units + unit_pos()) * chunk, n);
  u32 end = min(begin + chunk, n);
  u32 full_end = begin + (end - begin) / accumulators * accumulators;
  std::vector<Var<f32>> acc;
  acc.reserve(static_cast<size_t>(accumulators));
  for (int k = 0; k < accumulators; ++k) acc.push_back(Var<f32>(splat<f32>(0.0f, line)));
  for_range(begin, full_end, static_cast<uint32_t>(accumulators), [&](u32 j) {
    for (int k = 0; k < accumulators; ++k) acc[static_cast<size_t>(k)] += x[j + k];
  });
  for_range(full_end, end, [&](u32 j) { acc[0] += x[j]; });
  f32 total = acc[0];
  for (int k = 1; k < accumulators; ++k) total = total + acc[static_cast<size_t>(k)];
  sums[unit_pos()] = line_sum(total);
  sync_cube();
  int width = 1;
  while (width < units) width *= 2;
  for (int s = width / 2; s > 0; s /= 2) {
    if_(unit_pos() < s && unit_pos() + s < units,
        [&] { sums[unit_pos()] += sums[unit_pos() + s]; });
    sync_cube();
  }
  if_(unit_pos() == 0, [&] { partial[cube_pos()] = sums[0]; });
}
KILN_KERNEL(sum,
            "x: line=max, partial, units = 1 in 1..1024, chunk = 4096 in 1..1048576, "
            "accumulators = 4 in 1..64")
    .cube_dim(1)
    .describe("per-cube sums of a tensor, several accumulators per unit");

// Each cube sums units * chunk lines.
KILN_RUN(sum)
    .shape("x", {1 << 24})
    .shape("partial",
           [](const kiln::kernels::RunData& d) {
             const int64_t block = d.comptime("units") * d.comptime("chunk") * d.line("x");
             return std::vector<int64_t>{kiln::kernels::ceil_div(d.numel("x"), block)};
           })
    .cube_dim([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(static_cast<uint32_t>(d.comptime("units")));
    })
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(static_cast<uint32_t>(d.numel("partial")));
    })
    .tolerance(1e-4, 1e-2)
    .reference([](kiln::kernels::RunData& d) {
      const auto block =
          static_cast<size_t>(d.comptime("units") * d.comptime("chunk") * d.line("x"));
      const auto& x = d["x"];
      for (size_t c = 0; c < d["partial"].size(); ++c) {
        double s = 0;
        for (size_t i = c * block; i < std::min(x.size(), (c + 1) * block); ++i) s += x[i];
        d["partial"][c] = s;
      }
    });
