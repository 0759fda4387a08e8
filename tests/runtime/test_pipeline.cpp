// Warp specialization (pipeline, docs/dsl.md "Warp specialization") on the two backends that run
// it without a GPU: the CPU (produce, then consume, round after round) and the emulator
// (cuda-emu:sm_90a), which runs the producer plane as the GPU would and orders shared memory by
// the ring's mbarrier phases. A consumer that reads a stage the producer may be refilling is a
// race there, a producer that copies fewer bytes than it expects never completes its phase, and
// what a pipeline's regions may hold is checked when the kernel is traced.
#include <catch2/catch.hpp>

#include <tuple>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

// pipe_sum is in tests/compiler/cpu/pipeline_kernels.cpp, which the CPU and CUDA compile tests
// build too (their op coverage needs a pipeline). pipe_wgmma here serves the emulator's checks
// only (ptxas notes its multiplies as serialized, which the compile tests refuse).

// A warpgroup's 64 x 32 tile of C = A * B^T (bf16 in, f32 out; A is M x K, B is 32 x K, K a
// multiple of 64) through a pipeline of `stages`, each round one 64-wide k block of A and B
// copied by TMA (128-byte swizzle, as wgmma reads them). The consumers multiply, then wait
// until at most `pending` groups are in flight and release round r - lag's stage: with pending
// above lag a stage is released while a multiply may still read it, which the emulator must
// report.
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
        tma_load(bs, s * (32u * 64u), bv, {0, r * 64u}, full, s);
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
KILN_KERNEL(pipe_wgmma,
            "a: rank=2, b: rank=2, c, stages = 2 in 1..4, lag = 1 in 0..3, "
            "pending = 1 in 0..1")
    .cube_dim(128);

// A pipeline_committed ring whose consume region releases each stage with a tcgen05_commit
// (no multiplies before it: it arrives at once); with `bug` it never commits, so the producer
// waits for the release of round r - stages forever.
void pipe_commit(Tensor<const f32> x, Tensor<f32> out, int bug) {
  auto ring = shared_array<f32>(2 * 64u);
  auto view = tma_view(x, {1, 64});
  u32 rows = x.shape(0);
  auto empty = pipeline_committed(
      rows, 2,
      [&](u32 r, u32 s, const SharedArray<u64>& full) {
        mbarrier_arrive_expect_tx(full, s, view.box_bytes());
        tma_load(ring, s * 64u, view, {r, 0}, full, s);
      },
      [&](u32, u32 s, const SharedArray<u64>& release) {
        if (!bug) tcgen05_commit(release, s);
      });
  u32 last = rows - 1u;
  if (!bug) mbarrier_wait(empty, last % 2u, (last / 2u) & 1u);
  out[unit_pos()] = ring[(last % 2u) * 64u + unit_pos()];
}
KILN_KERNEL(pipe_commit, "x: rank=2, out, bug = 0 in 0..1").cube_dim(64);

// What a pipeline may not hold, by mode: 1 a store before it, 2 a sync_cube in its consume
// region, 3 a per-unit value in its produce region, 4 a lag of as many rounds as stages, 5 a
// pipeline inside an if, 6 two pipelines.
void pipe_misuse(Tensor<const f32> x, Tensor<f32> out, int mode) {
  auto ring = shared_array<f32>(2 * 64u);
  auto view = tma_view(x, {1, 64});
  u32 rows = x.shape(0);
  if (mode == 1) out[unit_pos()] = 0.0f;  // PIPE_STORE
  auto produce = [&](u32 r, u32 s, const SharedArray<u64>& full) {
    mbarrier_arrive_expect_tx(full, s, view.box_bytes());
    TmaCoord column = mode == 3 ? TmaCoord(cast<int32_t>(unit_pos())) : TmaCoord(0);  // PIPE_UNIT
    tma_load(ring, s * 64u, view, {r, column}, full, s);
  };
  auto consume = [&](u32, u32 s) {
    out[unit_pos()] = ring[s * 64u + unit_pos()];
    if (mode == 2) sync_cube();  // PIPE_SYNC
  };
  if (mode == 5) {
    if_(rows > 0u, [&] { pipeline(rows, 2, 0, produce, consume); });  // PIPE_IF
    return;
  }
  pipeline(rows, 2, mode == 4 ? 2 : 0, produce, consume);  // PIPE_LAG
  if (mode == 6) pipeline(rows, 2, 0, produce, consume);   // PIPE_TWICE
}
KILN_KERNEL(pipe_misuse, "x: rank=2, out, mode = 0 in 0..6").cube_dim(64);

// pipe_sum with the registers split (setmaxnreg): 128 consumer units (a warpgroup), each the sum
// of its column over the rows; `producer` and `consumers` are the split (0 0: none), `units` the
// cube's consumers (not a whole warpgroup: refused).
void pipe_split(Tensor<const f32> x, Tensor<f32> out, int producer, int consumers) {
  auto ring = shared_array<f32>(2u * 128u);
  auto view = tma_view(x, {1, 128});
  u32 rows = x.shape(0);
  Var<float> total(0.0f);
  pipeline(  // PIPE_SPLIT
      rows, 2, 0,
      PipelineRegisters{static_cast<uint32_t>(producer), static_cast<uint32_t>(consumers)},
      [&](u32 r, u32 s, const SharedArray<u64>& full) {
        mbarrier_arrive_expect_tx(full, s, view.box_bytes());
        tma_load(ring, s * 128u, view, {r, 0}, full, s);
      },
      [&](u32, u32 s) { total += ring[s * 128u + unit_pos() % 128u]; });
  out[unit_pos()] = total;
}
KILN_KERNEL(pipe_split, "x: rank=2, out, producer = 40 in 0..512, consumers = 232 in 0..512")
    .cube_dim(128);

namespace kiln {
namespace {

using Catch::Contains;

std::string loc(const char* marker) {
  return test::marker_loc("tests/runtime/test_pipeline.cpp", marker);
}
std::string kernel_loc(const char* marker) {
  return test::marker_loc("tests/compiler/cpu/pipeline_kernels.cpp", marker);
}

TEST_CASE("a pipeline feeds every round through its ring, at every depth and lag", "[pipeline]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "pipe_sum");
    // Fewer rounds than stages, as many, and many times as many (the phases alternate).
    for (int64_t rows : {1, 3, 17}) {
      const std::vector<float> host = test::rows_of_64(rows);
      Tensor x = test::tensor_from(rt, ir::ElemType::F32, host, {rows, 64});
      for (int stages : {1, 2, 3, 8})
        for (int lag = 0; lag < stages && lag < 3; ++lag) {
          INFO(rows << " rows, " << stages << " stages, lag " << lag);
          Tensor out = test::f32_tensor(rt, std::vector<float>(64, -1.0f));
          KILN_REQUIRE_OK(rt.launch(k, 1, 64, x, out, stages, lag, 0));
          KILN_REQUIRE_OK(rt.sync());
          const auto got = test::to_host<float>(out);
          for (uint32_t u = 0; u < 64; ++u) {
            float want = 0.0f;  // in the kernel's order: exact
            for (int64_t r = 0; r < rows; ++r) want += host[static_cast<size_t>(r) * 64 + u];
            REQUIRE(got[u] == want);
          }
        }
    }
  }
}

TEST_CASE("the emulator finds a consumer reading a stage the producer may refill", "[pipeline]") {
  (void)kernels::builtin_names();
  auto opened = Runtime::open("cuda-emu:sm_90a");
  if (!opened) {
    WARN("skipped: " << opened.error().message);
    return;
  }
  Runtime& rt = *opened;
  auto k = test::kernel(rt, "pipe_sum");
  Tensor x = test::tensor_from(rt, ir::ElemType::F32, test::rows_of_64(9), {9, 64});
  Tensor out = test::f32_tensor(rt, std::vector<float>(64, 0.0f));
  Status st = rt.launch(k, 1, 64, x, out, 3, 0, 1);
  if (st.ok()) st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains(kernel_loc("PIPE_READ")));
  CHECK_THAT(st.error().message, Contains("shared"));
  // The producer expects 4 bytes more than it copies: the consumers' wait never completes.
  st = rt.launch(k, 1, 64, x, out, 3, 0, 2);
  if (st.ok()) st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains(kernel_loc("PIPE_BEGIN")));
  CHECK_THAT(st.error().message, Contains("can never complete"));
}

TEST_CASE("a stage released while a wgmma may still read it is a race on the emulator",
          "[pipeline][wgmma]") {
  (void)kernels::builtin_names();
  const int64_t M = 128, K = 256;  // two cubes, four rounds
  std::vector<uint16_t> a(M * K), b(32 * K);
  std::vector<double> av(a.size()), bv(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    av[i] = static_cast<double>(static_cast<int>(i * 7 % 11) - 5);
    a[i] = bf16_bits(av[i]);
  }
  for (size_t i = 0; i < b.size(); ++i) {
    bv[i] = static_cast<double>(static_cast<int>(i * 5 % 9) - 4);
    b[i] = bf16_bits(bv[i]);
  }
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "pipe_wgmma");
    Tensor at = test::tensor_from(rt, ir::ElemType::BF16, a, {M, K});
    Tensor bt = test::tensor_from(rt, ir::ElemType::BF16, b, {32, K});
    struct Run {
      int stages, lag, pending;
      bool race;
    };
    const bool emulator = rt.device().name.rfind("cuda-emu", 0) == 0;
    for (const Run& run : {Run{2, 1, 1, false}, Run{3, 0, 0, false}, Run{1, 0, 0, false},
                           Run{2, 0, 1, true}, Run{3, 0, 1, true}}) {
      if (run.race && !emulator) continue;  // the CPU's multiplies are done when they return
      INFO(run.stages << " stages, lag " << run.lag << ", " << run.pending << " pending");
      Tensor c = test::f32_tensor(rt, std::vector<float>(M * 32, -1.0f));
      Status st = rt.launch(k, 2, 128, at, bt, c, run.stages, run.lag, run.pending);
      if (st.ok()) st = rt.sync();
      if (run.race) {
        REQUIRE_FALSE(st.ok());
        CHECK_THAT(st.error().message, Contains("shared-memory race in kernel 'pipe_wgmma'"));
        continue;
      }
      KILN_REQUIRE_OK(st);
      const auto got = test::to_host<float>(c);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < 32; ++j) {
          double want = 0;
          for (int64_t x = 0; x < K; ++x) want += av[i * K + x] * bv[j * K + x];
          REQUIRE(got[i * 32 + j] == static_cast<float>(want));
        }
    }
  }
}

TEST_CASE("a committed pipeline with a round that never commits is a wait that never ends",
          "[pipeline]") {
  (void)kernels::builtin_names();
  auto opened = Runtime::open("cuda-emu:sm_100a");
  if (!opened) {
    WARN("skipped: " << opened.error().message);
    return;
  }
  Runtime& rt = *opened;
  auto k = test::kernel(rt, "pipe_commit");
  const std::vector<float> host = test::rows_of_64(5);
  Tensor x = test::tensor_from(rt, ir::ElemType::F32, host, {5, 64});
  Tensor out = test::f32_tensor(rt, std::vector<float>(64, 0.0f));
  KILN_REQUIRE_OK(rt.launch(k, 1, 64, x, out, 0));
  KILN_REQUIRE_OK(rt.sync());
  const auto got = test::to_host<float>(out);
  for (uint32_t u = 0; u < 64; ++u) REQUIRE(got[u] == host[4 * 64 + u]);
  Status st = rt.launch(k, 1, 64, x, out, 1);
  if (st.ok()) st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("can never complete"));
  CHECK_THAT(st.error().message, Contains("pipeline_committed"));
}

TEST_CASE("a pipeline may split the registers between its producer and its consumers",
          "[pipeline]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "pipe_split");
    const int64_t rows = 9;
    std::vector<float> host(static_cast<size_t>(rows * 128));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 37) * 0.25f;
    Tensor x = test::tensor_from(rt, ir::ElemType::F32, host, {rows, 128});
    Tensor out = test::f32_tensor(rt, std::vector<float>(128, -1.0f));
    KILN_REQUIRE_OK(rt.launch(k, 1, 128, x, out, 40, 232));
    KILN_REQUIRE_OK(rt.sync());
    const auto got = test::to_host<float>(out);
    for (uint32_t u = 0; u < 128; ++u) {
      float want = 0.0f;
      for (int64_t r = 0; r < rows; ++r) want += host[static_cast<size_t>(r) * 128 + u];
      REQUIRE(got[u] == want);
    }
  }
  // What setmaxnreg cannot set is refused where the pipeline is written.
  for (const auto& [producer, consumers, says] :
       {std::tuple{20, 232, "24 to 256 registers per unit in steps of 8"},
        std::tuple{40, 230, "in steps of 8 (what setmaxnreg sets), not 230"},
        std::tuple{240, 232, "240 for the producer is more than the consumers' 232"}}) {
    dsl::SpecOptions o;
    o.set["producer"] = std::to_string(producer);
    o.set["consumers"] = std::to_string(consumers);
    const std::string e = test::trace_error("pipe_split", o);
    INFO(e);
    CHECK_THAT(e, Contains(loc("PIPE_SPLIT")) && Contains(says));
  }
  // sm_90 without the "a" has TMA but not setmaxnreg; a cube of 64 consumers is not a warpgroup.
  if (auto rt = Runtime::open("cuda-emu:sm_90"); rt.ok()) {
    auto k = rt->kernel("pipe_split");
    REQUIRE(k.ok());
    Tensor x = test::tensor_from(*rt, ir::ElemType::F32, std::vector<float>(128, 1.0f), {1, 128});
    Tensor out = test::f32_tensor(*rt, std::vector<float>(128, 0.0f));
    const Status s = rt->launch(*k, 1, 128, x, out, 40, 232);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Contains("has_setmaxnreg()") && Contains("cuda-emu:sm_90"));
  }
  if (auto rt = Runtime::open("cuda-emu:sm_90a"); rt.ok()) {
    auto k = rt->kernel("pipe_split");
    REQUIRE(k.ok());
    Tensor x = test::tensor_from(*rt, ir::ElemType::F32, std::vector<float>(128, 1.0f), {1, 128});
    Tensor out = test::f32_tensor(*rt, std::vector<float>(128, 0.0f));
    const Status s = rt->launch(*k, 1, 64, x, out, 40, 232);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Contains("whole warpgroups of consumers"));
  }
}

TEST_CASE("what a pipeline may hold is checked at trace time", "[pipeline]") {
  struct Bad {
    int mode;
    const char* marker;
    const char* says;
  };
  for (const Bad& b : {Bad{1, "PIPE_STORE", "'store' before a pipeline"},
                       Bad{2, "PIPE_SYNC", "'sync_cube' in a pipeline's consume region"},
                       Bad{3, "PIPE_UNIT", "in a pipeline's produce region"},
                       Bad{4, "PIPE_LAG", "a release lag below them, not 2 stages and lag 2"},
                       Bad{5, "PIPE_IF", "a pipeline must be at the top level of the kernel"},
                       Bad{6, "PIPE_TWICE", "a kernel has one pipeline"}}) {
    dsl::SpecOptions o;
    o.set["mode"] = std::to_string(b.mode);
    const std::string e = test::trace_error("pipe_misuse", o);
    INFO("mode " << b.mode << ": " << e);
    CHECK_THAT(e, Contains(loc(b.marker)) && Contains(b.says));
  }
  // A correct one traces, and the CPU's in-order form replaces it before unit loops.
  auto ok = test::trace_kernel("pipe_misuse");
  REQUIRE(ok.ok());
}

}  // namespace
}  // namespace kiln
