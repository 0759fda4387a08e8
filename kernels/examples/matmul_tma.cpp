// matmul_tma: C = A * B^T with Hopper's warpgroup multiplies (wgmma) fed by the Tensor Memory
// Accelerator, the TMA counterpart of matmul_wgmma (same operands: a is M x K, b is N x K, c is
// M x N; same tiles). Its A and B tiles are not staged by the units: per round of k one unit
// issues TMA box copies of them into one of `stages` shared-memory stages (a ring), which
// complete on that stage's mbarrier. The copies run up to stages - 1 rounds ahead of the
// multiplies, and the multiplies of one round overlap the wait for the next:
//
//   before:   issue rounds 0 .. stages - 2 into stages 0 .. stages - 2
//   round r:  wait for stage r % stages (its mbarrier's phase r / stages)
//             wgmma over that stage, commit; wait until round r - 1's multiplies are done
//             sync_cube (every warpgroup is past round r - 1)
//             issue round r + stages - 1 into stage (r - 1) % stages, which round r - 1 read
//             (prefetch = 1: and ask L2 for round r + stages's boxes, a round before their copy)
//
// With producer = 1 the copies come from a producer plane of their own instead (warp
// specialization, docs/dsl.md): a pipeline whose produce region issues round r's boxes as soon
// as the consumers have released the stage, and whose consume region is the multiplies of
// round r; the consumers release round r - 1's stage once wgmma_wait(1) says its multiplies
// are done. No sync_cube in the loop: the warpgroups and the copies meet only at mbarriers.
//
// With cluster = 2 two cubes that compute the same columns of C (cubes (x, 2j) and (x, 2j + 1))
// form a cluster and share their B tiles: each copies half of a B tile's rows and multicasts it
// to both (tma_load_multicast), so B is read from global memory once per cluster, not per cube.
// Since a round's copies now fill a stage of both cubes, the per-round sync_cube becomes a
// sync_cluster: both cubes are past round r - 1 before either refills its stage. (Not with
// producer = 1: the ring's empty mbarriers would have to count both cubes' releases.)
//
// The boxes land swizzled exactly as wgmma_tile_index lays a K-major tile out (one box per
// warpgroup and k block of `swizzle` bytes), and elements outside A and B arrive as zeros; the
// product goes out through shared memory and an asynchronous TMA store per warpgroup (one wait
// for all of them at the end), which leaves out what is past C's edges, so the edges need no
// code. TMA's rules apply to all three tensors: rows of a multiple of 16 bytes (K a multiple of 8
// for 16-bit inputs, 16 for 8-bit ones; N of 4). It runs where has_wgmma() and has_tma() hold:
// sm_90a, the CPU (copies are synchronous there) and the emulator (cuda-emu:sm_90a).
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void matmul_tma(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, int tile_n,
                int warpgroups, int swizzle, int k_rows, int stages, int prefetch, int producer,
                int cluster) {
  using Acc = mma_acc_t<T>;
  if (cluster == 2 && (producer || tile_n % 16 != 0)) {
    TraceContext::current().fail(SrcLoc::current(),
                                 "matmul_tma: cluster = 2 needs producer = 0 (a producer plane's "
                                 "ring would have to count the releases of both cubes) and a "
                                 "tile_n that is a multiple of 16 (each cube copies half the "
                                 "rows of a B tile)");
    return;
  }
  if (cluster == 2) cluster_dims(1, 2);  // two cubes along y: the same columns of C
  const Swizzle sw = static_cast<Swizzle>(swizzle);
  // A box is `swizzle` bytes of k wide: one k block of a tile; a round is k_rows blocks.
  const auto per_row = static_cast<uint32_t>(swizzle / static_cast<int>(sizeof(host_of_t<T>)));
  const int steps = swizzle / 32 * k_rows;
  const auto kc = per_row * static_cast<uint32_t>(k_rows), un = static_cast<uint32_t>(tile_n),
             wgs = static_cast<uint32_t>(warpgroups), ns = static_cast<uint32_t>(stages);
  const uint32_t a_stage = wgs * 64u * kc, b_stage = un * kc;
  u32 m = a.shape(0), k = a.shape(1), n = b.shape(0);
  assert_(b.shape(1) == k && c.shape(0) == m && c.shape(1) == n,
          "a must be M x K, b N x K (B transposed) and c M x N");
  auto acc = accumulator<Acc>(16, tile_n, mma_k_step<T>());
  auto as = shared_array<T>(ns * a_stage);
  auto bs = shared_array<T>(ns * b_stage);
  auto av = tma_view(a, {64, static_cast<int>(per_row)}, sw);
  // With a cluster each cube copies half of a B tile's rows (its rank's), for both cubes.
  const auto halves = static_cast<uint32_t>(cluster);
  const uint32_t b_rows = un / halves;
  auto bv = tma_view(b, {static_cast<int>(b_rows), static_cast<int>(per_row)}, sw);
  const uint32_t stage_bytes = (wgs * av.box_bytes() + halves * bv.box_bytes()) * uint32_t(k_rows);
  u32 half = cluster == 2 ? cluster_rank() : u32(0u);
  u32 wg = plane_pos() / 4u;
  u32 m0 = cube_pos_y() * (64u * wgs), n0 = cube_pos_x() * un;
  u32 rounds = (k + (kc - 1u)) / kc;
  // The copies of round r into its stage, r % stages, completing on bar[stage].
  auto issue_into = [&](Val<uint32_t> r, Val<uint32_t> stage, const SharedArray<u64>& bar) {
    Val<uint32_t> k0 = r * kc;
    mbarrier_arrive_expect_tx(bar, stage, stage_bytes);
    for (uint32_t kb = 0; kb < uint32_t(k_rows); ++kb) {
      for (uint32_t g = 0; g < wgs; ++g)
        tma_load(as, stage * a_stage + g * (64u * kc) + kb * (64u * per_row), av,
                 {m0 + g * 64u, k0 + kb * per_row}, bar, stage);
      if (cluster == 2)
        tma_load_multicast(bs, stage * b_stage + kb * (un * per_row) + half * (b_rows * per_row),
                           bv, {n0 + half * b_rows, k0 + kb * per_row}, bar, stage, 3u);
      else
        tma_load(bs, stage * b_stage + kb * (un * per_row), bv, {n0, k0 + kb * per_row}, bar,
                 stage);
    }
  };
  // Round r's boxes towards L2 only (a hint: no shared memory, no mbarrier).
  auto warm = [&](Val<uint32_t> r) {
    Val<uint32_t> k0 = r * kc;
    for (uint32_t kb = 0; kb < uint32_t(k_rows); ++kb) {
      for (uint32_t g = 0; g < wgs; ++g) tma_prefetch(av, {m0 + g * 64u, k0 + kb * per_row});
      tma_prefetch(bv, {n0 + half * b_rows, k0 + kb * per_row});
    }
  };
  // Round r's multiplies, out of stage `stage`.
  auto multiply = [&](Val<uint32_t> stage) {
    wgmma_fence();
    for (int s = 0; s < steps; ++s)
      wgmma<T>(
          acc,
          wgmma_tile_desc(as, stage * a_stage + wg * (64u * kc), 64, sw, static_cast<uint32_t>(s)),
          wgmma_tile_desc(bs, stage * b_stage, tile_n, sw, static_cast<uint32_t>(s)));
    wgmma_commit();
  };
  fill(acc, Acc(0));
  if (producer) {
    pipeline(
        rounds, stages, 1,
        [&](u32 r, u32 stage, const SharedArray<u64>& full) {
          issue_into(r, stage, full);
          if (prefetch) if_(r + ns < rounds, [&] { warm(r + ns); });
        },
        [&](u32, u32 stage) {
          multiply(stage);
          wgmma_wait(1);  // round r - 1's multiplies are done: the pipeline releases its stage
        });
  } else {
    // The ring run by the consumers themselves: the copies of the first stages - 1 rounds go
    // first, then each round refills the stage the round before it read.
    auto bar = shared_array<u64>(ns);
    for (uint32_t s = 0; s < ns; ++s) mbarrier_init(bar, s);
    if (cluster == 2) sync_cluster();  // both cubes' mbarriers are ready for the other's copies
    auto issue = [&](Val<uint32_t> r) { issue_into(r, r % ns, bar); };
    for (uint32_t p = 0; p + 1 < ns; ++p) if_(u32(p) < rounds, [&] { issue(Val<uint32_t>(p)); });
    for_range(0u, rounds, 1u, [&](u32 r) {
      u32 stage = r % ns;
      mbarrier_wait(bar, stage, (r / ns) & 1u);
      multiply(stage);
      wgmma_wait(1);  // round r - 1's multiplies are done; round r's may still run
      // Every warpgroup (of both cubes, with a cluster) is past round r - 1, so its stage can
      // be refilled.
      if (cluster == 2)
        sync_cluster();
      else
        sync_cube();
      if_(r + (ns - 1u) < rounds, [&] { issue(r + (ns - 1u)); });
      if (prefetch) if_(r + ns < rounds, [&] { warm(r + ns); });
    });
  }
  wgmma_wait(0);
  if (cluster == 2) sync_cluster();  // no cube leaves while its copies may land in the other
  // The epilogue through TMA too: each plane stores its 16 rows into its warpgroup's 64 x tile_n
  // block of shared memory (row-major), and one box copy per warpgroup writes the block to C,
  // the parts past C's edges left out.
  auto cs = shared_array<Acc>(wgs * 64u * un);
  auto cv = tma_view(c, {64, tile_n});
  store(cs, wg * (64u * un) + 16u * (plane_pos() % 4u) * un, un, 16u, un, acc);
  // Both warpgroups' boxes go out without waiting for each other; one wait before the end.
  for (uint32_t g = 0; g < wgs; ++g) tma_store_async(cv, {m0 + g * 64u, n0}, cs, g * (64u * un));
  tma_store_wait(0);
}
KILN_KERNEL_GENERIC(matmul_tma,
                    "a: rank=2, b: rank=2, c: rank=2, tile_n = 128 in 8..256, warpgroups = 2 in "
                    "1..2, swizzle = 128 in 32..128, k_rows = 1 in 1..4, stages = 3 in 2..4, "
                    "prefetch = 1 in 0..1, producer = 0 in 0..1, cluster = 1 in 1..2",
                    f16, bf16, f32, i8, u8, f8e4m3, f8e5m2)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(128 * c.integer("warpgroups")), 1, 1};
    })
    .describe(
        "C = A * B^T with wgmma fed by TMA through a ring of 2 to 4 stages (sm_90a; the CPU and "
        "cuda-emu run it too)");

KILN_RUN(matmul_tma)
    .shape("a", {200, 144})
    .shape("b", {264, 144})  // N x K; K * element size a multiple of 16 bytes (TMA's rows)
    .shape("c", kiln::kernels::abt_c_shape)
    .values("a", 0, 7)
    .values("b", 0, 7)
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("c", 1), d.comptime("tile_n")),
                        // whole clusters of cubes along y
                        kiln::kernels::ceil_div(
                            kiln::kernels::ceil_div(d.dim("c", 0), 64 * d.comptime("warpgroups")),
                            d.comptime("cluster")) *
                            d.comptime("cluster"));
    })
    .gpu_arch("sm_90a")
    .tolerance(1e-5, 1e-3)
    .flops(kiln::kernels::matmul_flops)
    .reference(kiln::kernels::abt_reference);
