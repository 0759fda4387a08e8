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
