// matmul_tma_tcgen05: C = A * B^T with Blackwell's tcgen05 multiplies into tensor memory fed by
// the Tensor Memory Accelerator, the TMA counterpart of matmul_tcgen05 (same operands: a is
// M x K, b is N x K, c is M x N; a cube of 128 units owns a 128 x tile_n tile of C). As in
// matmul_tma, one unit copies each round's A and B boxes into a ring of `stages` shared-memory
// stages, each with two mbarriers: one its copies complete on, one the multiplies that read it
// arrive on (tcgen05.commit). The multiplies run asynchronously, one round ahead of the wait that
// frees a stage:
//
//   before:   issue rounds 0 .. stages - 2 into stages 0 .. stages - 2
//   round r:  wait for stage r % stages' copies (its copy mbarrier's phase r / stages)
//             tcgen05.mma over that stage, commit to its multiply mbarrier
//             wait for round r - 1's multiplies (round r's keep the tensor cores busy), then
//             issue round r + stages - 1 into stage (r - 1) % stages
//   after:    wait for the last round's commit, which covers every multiply
//
// With producer = 1 the copies come from a producer plane of its own (pipeline_committed, docs/
// dsl.md "Warp specialization"): it refills a stage as soon as the commit of the multiplies that
// read it arrives on the stage's empty mbarrier, and the consumers' unit 0 only waits for each
// round's copies, multiplies and commits.
//
// It runs where has_tcgen05() and has_tma() hold: sm_100a, the CPU and the emulator
// (cuda-emu:sm_100a).
#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void matmul_tma_tcgen05(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, int tile_n,
                        int swizzle, int k_rows, int stages, int producer) {
  using Acc = mma_acc_t<T>;
  const Swizzle sw = static_cast<Swizzle>(swizzle);
  const auto per_row = static_cast<uint32_t>(swizzle / static_cast<int>(sizeof(host_of_t<T>)));
  const int steps = swizzle / 32 * k_rows;
  const auto kc = per_row * static_cast<uint32_t>(k_rows), un = static_cast<uint32_t>(tile_n),
             ns = static_cast<uint32_t>(stages);
  const uint32_t a_stage = 128u * kc, b_stage = un * kc;
  int columns = 32;  // tensor memory comes in powers of two of at least 32 columns
  while (columns < tile_n) columns *= 2;
  u32 m = a.shape(0), k = a.shape(1), n = b.shape(0);
  assert_(b.shape(1) == k && c.shape(0) == m && c.shape(1) == n,
          "a must be M x K, b N x K (B transposed) and c M x N");
  auto as = shared_array<T>(ns * a_stage);
  auto bs = shared_array<T>(ns * b_stage);
  auto av = tma_view(a, {128, static_cast<int>(per_row)}, sw);
  auto bv = tma_view(b, {tile_n, static_cast<int>(per_row)}, sw);
  const uint32_t stage_bytes = (av.box_bytes() + bv.box_bytes()) * uint32_t(k_rows);
  u32 m0 = cube_pos_y() * 128u, n0 = cube_pos_x() * un;
  u32 rounds = (k + (kc - 1u)) / kc;
  u32 d = tmem_alloc(columns);
  // The copies of round r into stage `stage`, completing on bars[stage].
  auto issue_into = [&](Val<uint32_t> r, Val<uint32_t> stage, const SharedArray<u64>& bars) {
    Val<uint32_t> k0 = r * kc;
    mbarrier_arrive_expect_tx(bars, stage, stage_bytes);
    for (uint32_t kb = 0; kb < uint32_t(k_rows); ++kb) {
      tma_load(as, stage * a_stage + kb * (128u * per_row), av, {m0, k0 + kb * per_row}, bars,
               stage);
      tma_load(bs, stage * b_stage + kb * (un * per_row), bv, {n0, k0 + kb * per_row}, bars, stage);
    }
  };
  // Round r's multiplies out of stage `stage`, into D.
  auto multiply = [&](Val<uint32_t> r, Val<uint32_t> stage) {
    for (int s = 0; s < steps; ++s) {
      auto adesc = tcgen05_tile_desc(as, stage * a_stage, 128, sw, static_cast<uint32_t>(s));
      auto bdesc = tcgen05_tile_desc(bs, stage * b_stage, tile_n, sw, static_cast<uint32_t>(s));
      // The first multiply of the first round writes D; every other one adds to it.
      if (s == 0)
        tcgen05_mma<T>(d, adesc, bdesc, tile_n, r > 0u);
      else
        tcgen05_mma<T>(d, adesc, bdesc, tile_n, true);
    }
  };
  if (producer) {
    // A producer plane issues the copies; unit 0 of the consumers issues each round's
    // multiplies and commits them to the stage's empty mbarrier, which releases the stage when
    // they are done.
    auto empty = pipeline_committed(
        rounds, stages,
        [&](u32 r, u32 stage, const SharedArray<u64>& full) { issue_into(r, stage, full); },
        [&](u32 r, u32 stage, const SharedArray<u64>& release) {
          multiply(r, stage);
          tcgen05_commit(release, stage);
        });
    u32 last = rounds - 1u;
    if_(rounds > 0u, [&] { mbarrier_wait(empty, last % ns, (last / ns) & 1u); });
  } else {
    // bar[s]: stage s's copies have landed; bar[stages + s]: the multiplies that read it are
    // done.
    auto bar = shared_array<u64>(2u * ns);
    for (uint32_t i = 0; i < 2u * ns; ++i) mbarrier_init(bar, i);
    auto issue = [&](Val<uint32_t> r) { issue_into(r, r % ns, bar); };
    // Until the multiplies of round p are done (the phase p / stages of its multiply mbarrier).
    auto wait_multiplies = [&](Val<uint32_t> p) { mbarrier_wait(bar, ns + p % ns, (p / ns) & 1u); };
    for (uint32_t p = 0; p + 1 < ns; ++p) if_(u32(p) < rounds, [&] { issue(Val<uint32_t>(p)); });
    for_range(0u, rounds, 1u, [&](u32 r) {
      u32 stage = r % ns;
      mbarrier_wait(bar, stage, (r / ns) & 1u);
      multiply(r, stage);
      tcgen05_commit(bar, ns + stage);
      if_(r + (ns - 1u) < rounds, [&] {
        if_(r > 0u, [&] { wait_multiplies(r - 1u); });
        issue(r + (ns - 1u));
      });
    });
    if_(rounds > 0u, [&] { wait_multiplies(rounds - 1u); });
  }
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
KILN_KERNEL_GENERIC(matmul_tma_tcgen05,
                    "a: rank=2, b: rank=2, c: rank=2, tile_n = 128 in 16..256, swizzle = 128 in "
                    "32..128, k_rows = 1 in 1..4, stages = 3 in 2..4, producer = 0 in 0..1",
                    f16, bf16, f32, i8, u8, f8e4m3, f8e5m2)
    .cube_dim([](const ComptimeArgs&) -> CubeDim {
      return {128, 1, 1};
    })
    .describe(
        "C = A * B^T with tcgen05 fed by TMA through a ring of 2 to 4 stages (sm_100a; the CPU "
        "and cuda-emu:sm_100a run it too)");

KILN_RUN(matmul_tma_tcgen05)
    .shape("a", {200, 144})
    .shape("b", {264, 144})  // N x K; K * element size a multiple of 16 bytes (TMA's rows)
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
