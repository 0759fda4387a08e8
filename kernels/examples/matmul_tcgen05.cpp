// matmul_tcgen05: C = A * B^T with Blackwell's tcgen05 multiplies into tensor memory (sm_100a),
// the per-architecture counterpart of matmul_wgmma. a is M x K and b is N x K (B transposed:
// both operands K-major), c is M x N. A cube of 128 units owns a 128 x tile_n tile of C, whose
// product lives in tile_n columns of tensor memory. Per round of k it stages its A and B tiles in
// shared memory in kiln's K-major layout for `swizzle` (what TMA writes), one unit issues a
// tcgen05.mma per k step and commits them to an mbarrier, and every unit waits on the round's
// phase before the tiles are overwritten. At the end each unit reads its row of the product
// from tensor memory into registers, 8 columns at a time (tmem_read: tcgen05.ld), and stores it.
// It runs where has_tcgen05() holds: sm_100a, the CPU (kiln_rt_tcgen05_mma, once per cube) and
// the emulator as cuda-emu:sm_100a; on other targets tracing it is an error naming the target.
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void matmul_tcgen05(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, int tile_n,
                    int swizzle, int k_rows) {
  using Acc = mma_acc_t<T>;
  const Swizzle sw = static_cast<Swizzle>(swizzle);
  // k per round: k_rows rows of the swizzle (W bytes each), or of 64 bytes without one.
  const int row_bytes = swizzle ? swizzle : 64, steps = row_bytes / 32 * k_rows;
  const auto kc = static_cast<uint32_t>(mma_k_step<T>() * steps),
             un = static_cast<uint32_t>(tile_n);
  // Tensor memory comes in powers of two of at least 32 columns.
  int columns = 32;
  while (columns < tile_n) columns *= 2;
  u32 m = a.shape(0), k = a.shape(1), n = b.shape(0);
  assert_(b.shape(1) == k && c.shape(0) == m && c.shape(1) == n,
          "a must be M x K, b N x K (B transposed) and c M x N");
  auto as = shared_array<T>(128u * kc);
  auto bs = shared_array<T>(un * kc);
  auto bar = shared_array<u64>(1);
  u32 m0 = cube_pos_y() * 128u, n0 = cube_pos_x() * un;
  mbarrier_init(bar, 0u);
  u32 d = tmem_alloc(columns);
  for_range(0u, k, kc, [&](u32 k0) {
    // The cube's A rows and B rows of this round, zero outside the matrices.
    for_range(unit_pos(), 128u * kc, 128u, [&](u32 e) {
      u32 r = e / kc, kk = e % kc, row = m0 + r, col = k0 + kk;
      as[wgmma_tile_index<T>(sw, 128, r, kk)] =
          select(row < m && col < k, a[min(row * k + col, a.len() - 1u)], T(0));
    });
    for_range(unit_pos(), un * kc, 128u, [&](u32 e) {
      u32 r = e / kc, kk = e % kc, row = n0 + r, col = k0 + kk;
      bs[wgmma_tile_index<T>(sw, tile_n, r, kk)] =
          select(row < n && col < k, b[min(row * k + col, b.len() - 1u)], T(0));
    });
    sync_cube();
    // The first multiply of the first round writes D; every other one adds to it.
    for (int s = 0; s < steps; ++s) {
      auto adesc = tcgen05_tile_desc(as, 0u, 128, sw, static_cast<uint32_t>(s));
      auto bdesc = tcgen05_tile_desc(bs, 0u, tile_n, sw, static_cast<uint32_t>(s));
      if (s == 0)
        tcgen05_mma<T>(d, adesc, bdesc, tile_n, k0 > 0u);
      else
        tcgen05_mma<T>(d, adesc, bdesc, tile_n, true);
    }
    tcgen05_commit(bar, 0u);
    mbarrier_wait(bar, 0u, (k0 / kc) & 1u);  // round r completes phase r
  });
  // Unit r's row of the product; K = 0 leaves it unwritten: it is zero.
  u32 row = m0 + unit_pos();
  for (int col = 0; col < tile_n; col += 8) {
    Val<Acc> x = tmem_read<Acc>(d, static_cast<uint32_t>(col), 8);
    for (int j = 0; j < 8; ++j) {
      u32 cc = n0 + static_cast<uint32_t>(col + j);
      if_(row < m && cc < n, [&] { c[row * n + cc] = select(k > 0u, extract(x, j), Acc(0)); });
    }
  }
  tmem_free(d, columns);
}
KILN_KERNEL_GENERIC(matmul_tcgen05,
                    "a: rank=2, b: rank=2, c: rank=2, tile_n = 128 in 16..256, swizzle = 128 in "
                    "0..128, k_rows = 1 in 1..4",
                    f16, bf16, f32, i8, u8, f8e4m3, f8e5m2)
    .cube_dim([](const ComptimeArgs&) -> CubeDim {
      return {128, 1, 1};
    })
    .describe(
        "C = A * B^T with tcgen05 and tensor memory (sm_100a; the CPU and "
        "cuda-emu:sm_100a run it too)");

KILN_RUN(matmul_tcgen05)
    .shape("a", {200, 136})
    .shape("b", {264, 136})  // N x K
    .shape("c", kiln::kernels::abt_c_shape)
    .values("a", 0, 7)
    .values("b", 0, 7)
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("c", 1), d.comptime("tile_n")),
                        kiln::kernels::ceil_div(d.dim("c", 0), 128));
    })
    .gpu_arch("sm_100a")
    .tolerance(1e-5, 1e-3)
    .flops(kiln::kernels::matmul_flops)
    .reference(kiln::kernels::abt_reference);
