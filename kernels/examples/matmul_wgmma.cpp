// matmul_wgmma: C = A * B^T with Hopper's warpgroup multiplies (wgmma, sm_90a), the per-
// architecture counterpart of matmul_mma. a is M x K and b is N x K (B transposed: both
// operands K-major, as wgmma reads every input type), c is M x N. A cube of `warpgroups`
// warpgroups owns a (64 warpgroups) x tile_n tile of C; per round of k it stages its A tiles
// and its B tile in shared memory, in kiln's K-major layout for `swizzle` (what TMA writes, so
// the TMA issue can feed these same descriptors), and each warpgroup issues one wgmma per
// k step, commits them as a group and waits. Each plane holds its 16 rows of its warpgroup's
// 64 x tile_n product in an ordinary accumulator and stores them at the end.
// It runs where has_wgmma() holds: sm_90a, the CPU (kiln_rt_wgmma, once per plane) and the
// emulator (cuda-emu, sm_90a); on other targets tracing it is an error naming the target.
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void matmul_wgmma(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, int tile_n,
                  int warpgroups, int swizzle, int k_rows) {
  using Acc = mma_acc_t<T>;
  const Swizzle sw = static_cast<Swizzle>(swizzle);
  // k per round: k_rows rows of the swizzle (W bytes each), or of 64 bytes without one.
  const int row_bytes = swizzle ? swizzle : 64, steps = row_bytes / 32 * k_rows;
  const auto kc = static_cast<uint32_t>(mma_k_step<T>() * steps),
             un = static_cast<uint32_t>(tile_n), wgs = static_cast<uint32_t>(warpgroups);
  u32 m = a.shape(0), k = a.shape(1), n = b.shape(0);
  assert_(b.shape(1) == k && c.shape(0) == m && c.shape(1) == n,
          "a must be M x K, b N x K (B transposed) and c M x N");
  auto acc = accumulator<Acc>(16, tile_n, mma_k_step<T>());
  auto as = shared_array<T>(wgs * 64u * kc);
  auto bs = shared_array<T>(un * kc);
  u32 wg = plane_pos() / 4u;
  u32 m0 = cube_pos_y() * (64u * wgs), n0 = cube_pos_x() * un;
  fill(acc, Acc(0));
  for_range(0u, k, kc, [&](u32 k0) {
    // The cube's A rows and B rows of this round, zero outside the matrices.
    for_range(unit_pos(), wgs * 64u * kc, 128u * wgs, [&](u32 e) {
      u32 r = e / kc, kk = e % kc, row = m0 + r, col = k0 + kk;
      as[(r / 64u) * (64u * kc) + wgmma_tile_index<T>(sw, 64, r % 64u, kk)] =
          select(row < m && col < k, a[min(row * k + col, a.len() - 1u)], T(0));
    });
    for_range(unit_pos(), un * kc, 128u * wgs, [&](u32 e) {
      u32 r = e / kc, kk = e % kc, row = n0 + r, col = k0 + kk;
      bs[wgmma_tile_index<T>(sw, tile_n, r, kk)] =
          select(row < n && col < k, b[min(row * k + col, b.len() - 1u)], T(0));
    });
    sync_cube();
    wgmma_fence();
    for (int s = 0; s < steps; ++s)
      wgmma<T>(acc, wgmma_tile_desc(as, wg * (64u * kc), 64, sw, static_cast<uint32_t>(s)),
               wgmma_tile_desc(bs, 0u, tile_n, sw, static_cast<uint32_t>(s)));
    wgmma_commit();
    wgmma_wait(0);
    sync_cube();  // the tiles are read before the next round overwrites them
  });
  u32 row0 = m0 + wg * 64u + 16u * (plane_pos() % 4u);
  store(c, row0 * n + n0, n, select(row0 < m, m - row0, 0u), select(n0 < n, n - n0, 0u), acc);
}
KILN_KERNEL_GENERIC(matmul_wgmma,
                    "a: rank=2, b: rank=2, c: rank=2, tile_n = 128 in 8..256, warpgroups = 2 in "
                    "1..2, swizzle = 128 in 0..128, k_rows = 1 in 1..4",
                    f16, bf16, f32, i8, u8, f8e4m3, f8e5m2)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(128 * c.integer("warpgroups")), 1, 1};
    })
    .describe("C = A * B^T with wgmma (sm_90a; the CPU and cuda-emu run it too)");

KILN_RUN(matmul_wgmma)
    .shape("a", {200, 136})
    .shape("b", {264, 136})  // N x K
    .shape("c", kiln::kernels::abt_c_shape)
    .values("a", 0, 7)
    .values("b", 0, 7)
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("c", 1), d.comptime("tile_n")),
                        kiln::kernels::ceil_div(d.dim("c", 0), 64 * d.comptime("warpgroups")));
    })
    .gpu_arch("sm_90a")
    .tolerance(1e-5, 1e-3)
    .flops(kiln::kernels::matmul_flops)
    .reference(kiln::kernels::abt_reference);
