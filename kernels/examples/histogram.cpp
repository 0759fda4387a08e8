// histogram: counts values of [0, 1) into `bins` buckets. Shows atomics: each cube counts into
// a histogram in shared memory with atomic adds, then adds it into the global histogram with
// atomic adds (values outside [0, 1) land in the first or last bucket; NaN in the first).
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

void histogram(Tensor<const f32> data, Tensor<u32> hist, int bins) {
  auto counts = shared_array<u32>(static_cast<uint32_t>(bins));
  for_range(unit_pos(), bins, cube_dim(), [&](u32 b) { counts[b] = 0u; });
  sync_cube();
  u32 i = absolute_pos();
  if_(i < data.len(), [&] {
    f32 v = data[i];
    u32 b = cast<u32>(clamp(v * bins, 0.0f, bins - 1));
    atomic_add(counts[b], 1u);
  });
  sync_cube();
  for_range(unit_pos(), bins, cube_dim(), [&](u32 b) { atomic_add(hist[b], counts[b]); });
}
KILN_KERNEL(histogram, "data, hist, bins = 64")
    .cube_dim(256)
    .describe("histogram with shared and global atomics");
