// The cp.async test kernel: test_async_copy.cpp runs it on the CPU and the emulator, the CUDA
// compile tests build it for every target. The marker comment names the line the test expects.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

// 16 rows of 32 f32 of src from row r0 into shared memory, four elements (16 bytes) per copy,
// rows past the end as zeros; then out = the tile. mode 1: every shared index one element off.
void async_tile(Tensor<const f32> src, Tensor<f32> out, u32 r0, int mode) {
  auto s = shared_array<f32>(16 * 32 + 4);
  u32 rows = src.shape(0);
  for_range(unit_pos() * 4u, 16u * 32u, cube_dim() * 4u, [&](u32 e) {
    u32 r = e / 32u, c = e % 32u;
    u32 from = min(r0 + r, rows - 1u) * 32u + c;
    copy_async(s, e + (mode == 1 ? 1u : 0u), src, from, r0 + r < rows);  // ASYNC_COPY
  });
  copy_async_commit();
  copy_async_wait(0);
  sync_cube();
  for_range(unit_pos(), 512u, cube_dim(), [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(async_tile, "src: rank=2, out, r0, mode = 0").cube_dim(32);
