// The pipeline test kernel (warp specialization): tests/runtime/test_pipeline.cpp runs it on the
// CPU and the emulator, the CUDA compile tests build it for every target, and the op coverage
// tests count its pipeline. The marker comments name the lines the tests expect.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

// out[u] = the sum over the rows r of x of x[r][u], for the 64 units: row r reaches shared memory
// through a ring of `stages` stages (a TMA box of one row per round) and every unit adds its
// element. bug 1: the consumers read the stage after theirs, which the producer may be
// refilling; bug 2: the producer expects more bytes than it copies.
void pipe_sum(Tensor<const f32> x, Tensor<f32> out, int stages, int lag, int bug) {
  const auto n = static_cast<uint32_t>(stages);
  auto ring = shared_array<f32>(n * 64u);
  auto view = tma_view(x, {1, 64});
  u32 rows = x.shape(0);
  Var<float> total(0.0f);
  pipeline(  // PIPE_BEGIN
      rows, stages, lag,
      [&](u32 r, u32 s, const SharedArray<u64>& full) {
        mbarrier_arrive_expect_tx(full, s, view.box_bytes() + (bug == 2 ? 4u : 0u));
        tma_load(ring, s * 64u, view, {r, 0}, full, s);
      },
      [&](u32, u32 s) {
        u32 from = bug == 1 ? (s + 1u) % n : s;
        total += ring[from * 64u + unit_pos()];  // PIPE_READ
      });
  out[unit_pos()] = total;
}
KILN_KERNEL(pipe_sum, "x: rank=2, out, stages = 3 in 1..8, lag = 0 in 0..7, bug = 0 in 0..2")
    .cube_dim(64);

// A warpgroup's 64 x 32 tile of C = A * B^T (bf16 in, f32 out; A is M x K, B is 32 x K, K a
// multiple of 64) through a pipeline of `stages`, each round one 64-wide k block of A and B
// copied by TMA (128-byte swizzle, as wgmma reads them). The consumers multiply, then wait
// until at most `pending` groups are in flight and release round r - lag's stage: with pending
// above lag a stage is released while a multiply may still read it, which the emulator must
// report (WGMMA_RACE).
void pipe_wgmma(Tensor<const bf16> a, Tensor<const bf16> b, Tensor<f32> c, int stages, int lag,
                int pending) {
  const auto ns = static_cast<uint32_t>(stages);
  auto acc = accumulator<f32>(16, 32, mma_k_step<bf16>());
  auto as = shared_array<bf16>(ns * 64u * 64u);
  auto bs = shared_array<bf16>(ns * 32u * 64u);
  auto av = tma_view(a, {64, 64}, Swizzle::B128);
  auto bv = tma_view(b, {32, 64}, Swizzle::B128);
  u32 rounds = a.shape(1) / 64u;
  u32 m0 = cube_pos() * 64u;
  fill(acc, 0.0f);
  pipeline(
      rounds, stages, lag,
      [&](u32 r, u32 s, const SharedArray<u64>& full) {
        mbarrier_arrive_expect_tx(full, s, av.box_bytes() + bv.box_bytes());
        tma_load(as, s * (64u * 64u), av, {m0, r * 64u}, full, s);
        tma_load(bs, s * (32u * 64u), bv, {0, r * 64u}, full, s);  // WGMMA_RACE
      },
      [&](u32, u32 s) {
        wgmma_fence();
        for (uint32_t k = 0; k < 4; ++k)
          wgmma<bf16>(acc, wgmma_tile_desc(as, s * (64u * 64u), 64, Swizzle::B128, k),
                      wgmma_tile_desc(bs, s * (32u * 64u), 32, Swizzle::B128, k));
        wgmma_commit();
        if (pending == 0) wgmma_wait(0);
        if (pending == 1) wgmma_wait(1);
      });
  wgmma_wait(0);
  store(c, (m0 + 16u * plane_pos()) * 32u, 32u, acc);
}
KILN_KERNEL(pipe_wgmma, "a: rank=2, b: rank=2, c, stages = 2 in 1..4, lag = 1 in 0..3, "
                        "pending = 1 in 0..1")
    .cube_dim(128);
