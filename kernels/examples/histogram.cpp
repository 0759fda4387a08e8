// histogram: counts values of [0, 1) into `bins` buckets. Shows atomics: each cube counts into
// a histogram in shared memory with atomic adds, then adds it into the global histogram with
// atomic adds (values outside [0, 1) land in the first or last bucket; NaN in the first). Each
// cube counts a contiguous chunk of the data, so that a few hundred cubes cover any size and the
// global atomics stay few (one per bin and cube), on a GPU as on the CPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

void histogram(Tensor<const f32> data, Tensor<u32> hist, int bins) {
  auto counts = shared_array<u32>(static_cast<uint32_t>(bins));
  for_range(unit_pos(), bins, cube_dim(), [&](u32 b) { counts[b] = 0u; });
  sync_cube();
  // Cube c counts the c-th of cube_count() contiguous chunks of the data (a whole number of
  // cube_dim() elements), its units side by side as they step through it.
  u32 n = data.len(), units = cube_dim();
  u32 chunk = (n / units + cube_count()) / cube_count() * units;
  u32 begin = cube_pos() * chunk;
  for_range(begin + unit_pos(), min(begin + chunk, n), units, [&](u32 i) {
    f32 v = data[i];
    u32 b = cast<u32>(clamp(v * bins, 0.0f, bins - 1));
    atomic_add(counts[b], 1u);
  });
  sync_cube();
  for_range(unit_pos(), bins, cube_dim(), [&](u32 b) { atomic_add(hist[b], counts[b]); });
}
KILN_KERNEL(histogram, "data, hist, bins = 64 in 1..32768")
    .cube_dim(256)
    .describe("histogram with shared and global atomics");

KILN_RUN(histogram)
    .shape("data", {1 << 22})
    .values("data", 0.0, 1.0)
    .shape("hist",
           [](const kiln::kernels::RunData& d) { return std::vector<int64_t>{d.comptime("bins")}; })
    .zeros("hist")
    .cubes([](const kiln::kernels::RunData& d) {
      return std::min<uint32_t>(kiln::kernels::ceil_div(d.numel("data"), d.cube_dim.x), 256);
    })
    .reference([](kiln::kernels::RunData& d) {
      // The bin as the kernel computes it, in f32.
      const auto bins = static_cast<float>(d.comptime("bins"));
      auto& hist = d["hist"];
      for (double v : d["data"]) {
        const float b = std::clamp(static_cast<float>(v) * bins, 0.0f, bins - 1);
        hist[static_cast<size_t>(b)] += 1;
      }
    });
