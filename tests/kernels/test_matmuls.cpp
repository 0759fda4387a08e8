// The tensor-core matmul examples against their double-precision reference on the CPU and the
// emulator: matmul_tcgen05 (docs/dsl.md "Tensor memory and tcgen05") and the TMA pipelines
// matmul_tma (wgmma, sm_90a) and matmul_tma_tcgen05 (sm_100a) (docs/dsl.md "TMA"): every input
// type, every swizzle of kiln's tile layout, n from 16 to 256, rounds of k enough to wrap the
// ring of stages several times (so the mbarriers' phases alternate), edges of the matrices
// that are no multiple of a tile, and K = 0. Fresh random inputs, the output poisoned, through
// the kernel's run recipe.
#include <catch2/catch.hpp>

#include "kernels/kernels.h"
#include "kernels/run.h"
#include "runtime/runtime.h"

namespace kiln {
namespace {

struct Case {
  const char* dtype;
  int swizzle, tile_n, k_rows;
  int64_t m, n, k;
  int stages = 0;               // the TMA kernels' ring (0: the kernel's default)
  const char* error = nullptr;  // what the launch's error says, for a launch that must fail
  int prefetch = -1;            // matmul_tma's L2 prefetches (-1: the kernel's default)
  int producer = -1;            // matmul_tma's producer plane (-1: the kernel's default)
  int cluster = 0;              // matmul_tma's cluster (0: the kernel's default)
};

void run_cases(const char* kernel, const char* device, const std::vector<Case>& cases) {
  (void)kernels::builtin_names();
  auto rt = Runtime::open(device);
  if (!rt) {
    std::printf("skipped on %s: %s\n", device, rt.error().message.c_str());
    return;
  }
  for (const Case& c : cases) {
    INFO(kernel << " on " << device << ": " << c.dtype << ", swizzle " << c.swizzle << ", tile_n "
                << c.tile_n << ", k_rows " << c.k_rows << ", stages " << c.stages << ", producer "
                << c.producer << ", cluster " << c.cluster << ", " << c.m << " x " << c.n << " x "
                << c.k);
    kernels::RunConfig config;
    config.dtypes["a"] = c.dtype;
    config.set["swizzle"] = std::to_string(c.swizzle);
    config.set["tile_n"] = std::to_string(c.tile_n);
    config.set["k_rows"] = std::to_string(c.k_rows);
    if (c.stages) config.set["stages"] = std::to_string(c.stages);
    if (c.prefetch >= 0) config.set["prefetch"] = std::to_string(c.prefetch);
    if (c.producer >= 0) config.set["producer"] = std::to_string(c.producer);
    if (c.cluster) config.set["cluster"] = std::to_string(c.cluster);
    config.shapes["a"] = {c.m, c.k};
    config.shapes["b"] = {c.n, c.k};
    config.repeat = 0;
    auto r = kernels::run(*rt, kernel, config);
    INFO((r.ok() ? std::string() : r.error().message));
    if (c.error) {
      REQUIRE_FALSE(r.ok());
      CHECK_THAT(r.error().message, Catch::Contains(c.error));
      continue;
    }
    REQUIRE(r.ok());
    REQUIRE(r->has_reference);
    for (const auto& check : r->checks) {
      INFO(check.name << ": " << check.mismatches << " mismatches, first at " << check.first_bad
                      << " (got " << check.got << ", want " << check.want << ")");
      CHECK(check.mismatches == 0);
    }
    CHECK(r->passed);
  }
}

TEST_CASE("matmul_tcgen05: every input type and swizzle on the CPU", "[tcgen05][cpu]") {
  std::vector<Case> cases;
  for (const char* t : {"f16", "bf16", "f32", "i8", "u8", "f8e4m3", "f8e5m2"})
    for (int sw : {0, 32, 64, 128}) cases.push_back({t, sw, 64, 1, 150, 100, 200});
  // n from 16 to 256, more rounds of k, a tile that is all edge, K = 0.
  cases.push_back({"bf16", 128, 16, 2, 130, 17, 300});
  cases.push_back({"bf16", 64, 256, 1, 257, 300, 96});
  cases.push_back({"i8", 0, 48, 4, 129, 49, 512});
  cases.push_back({"f16", 32, 80, 3, 5, 7, 9});
  cases.push_back({"f32", 128, 128, 1, 64, 64, 0});
  run_cases("matmul_tcgen05", "cpu", cases);
}

TEST_CASE("matmul_tcgen05: every input type and swizzle on the emulator", "[tcgen05][emulator]") {
  // Smaller: the emulator checks every access.
  std::vector<Case> cases;
  const char* types[] = {"f16", "bf16", "f32", "i8", "u8", "f8e4m3", "f8e5m2"};
  const int swizzles[] = {0, 32, 64, 128};
  for (int i = 0; i < 7; ++i) cases.push_back({types[i], swizzles[i % 4], 32, 1, 130, 40, 70});
  cases.push_back({"bf16", 128, 16, 1, 20, 17, 130});
  cases.push_back({"u8", 64, 256, 1, 10, 257, 64});
  run_cases("matmul_tcgen05", "cuda-emu:sm_100a", cases);
}

// TMA rows are multiples of 16 bytes: K a multiple of 8 for 16-bit inputs, 16 for 8-bit ones,
// 4 for f32; C's rows (f32 or i32) need N a multiple of 4.
std::vector<Case> tma_cpu_cases() {
  std::vector<Case> cases;
  const char* types[] = {"f16", "bf16", "f32", "i8", "u8", "f8e4m3", "f8e5m2"};
  const int swizzles[] = {128, 64, 32};
  // Every type and swizzle, each ring depth, k wrapping the ring (k_rows 1 or 2).
  for (int i = 0; i < 7; ++i)
    for (int stages = 2; stages <= 4; ++stages)
      cases.push_back(
          {types[i], swizzles[(i + stages) % 3], 64, 1 + (i + stages) % 2, 150, 100, 704, stages});
  cases.push_back({"bf16", 128, 16, 4, 130, 20, 1056, 3});  // n 16, four k blocks a round
  cases.push_back({"f16", 32, 256, 1, 70, 260, 48, 4});     // fewer rounds than stages
  cases.push_back({"i8", 64, 32, 1, 5, 8, 16, 2});          // one round, a tile that is all edge
  // K = 0: TMA cannot describe an empty tensor, and the launch says so.
  cases.push_back({"f32", 128, 64, 1, 64, 64, 0, 3, "shape[1] is 0"});
  return cases;
}

std::vector<Case> tma_emulator_cases() {
  // Smaller: the emulator checks every access and the ordering of every copy and multiply.
  std::vector<Case> cases;
  const char* types[] = {"f16", "bf16", "f32", "i8", "u8", "f8e4m3", "f8e5m2"};
  const int swizzles[] = {128, 64, 32};
  for (int i = 0; i < 7; ++i)
    cases.push_back({types[i], swizzles[i % 3], 32, 1, 70, 36, 352, 2 + i % 3});
  cases.push_back({"bf16", 128, 16, 2, 20, 20, 520, 4});
  cases.push_back({"f16", 64, 32, 1, 10, 12, 0, 2, "no empty dimension"});
  return cases;
}

TEST_CASE("matmul_tma: every input type, swizzle and ring depth on the CPU", "[tma][cpu]") {
  run_cases("matmul_tma", "cpu", tma_cpu_cases());
  // Without the L2 prefetches (a hint: the same product).
  run_cases("matmul_tma", "cpu", {{"bf16", 128, 64, 1, 150, 100, 704, 3, nullptr, 0}});
}

TEST_CASE("matmul_tma: every input type, swizzle and ring depth on the emulator",
          "[tma][emulator]") {
  run_cases("matmul_tma", "cuda-emu:sm_90a", tma_emulator_cases());
}

// The same cases with clusters of two cubes, which share their B tiles through multicast copies.
std::vector<Case> with_cluster(std::vector<Case> cases) {
  for (Case& c : cases) c.cluster = 2;
  return cases;
}

TEST_CASE(
    "matmul_tma with clusters multicasting B: every input type, swizzle and ring depth on "
    "the CPU",
    "[tma][cluster][cpu]") {
  run_cases("matmul_tma", "cpu", with_cluster(tma_cpu_cases()));
}

TEST_CASE(
    "matmul_tma with clusters multicasting B: every input type, swizzle and ring depth on "
    "the emulator",
    "[tma][cluster][emulator]") {
  run_cases("matmul_tma", "cuda-emu:sm_90a", with_cluster(tma_emulator_cases()));
}

// The same cases with a producer plane (warp specialization: a pipeline; docs/dsl.md).
std::vector<Case> with_producer(std::vector<Case> cases) {
  for (Case& c : cases) c.producer = 1;
  return cases;
}

TEST_CASE("matmul_tma with a producer plane: every input type, swizzle and ring depth on the CPU",
          "[tma][pipeline][cpu]") {
  run_cases("matmul_tma", "cpu", with_producer(tma_cpu_cases()));
  run_cases("matmul_tma", "cpu", {{"bf16", 128, 64, 1, 150, 100, 704, 3, nullptr, 0, 1}});
}

TEST_CASE(
    "matmul_tma with a producer plane: every input type, swizzle and ring depth on the "
    "emulator",
    "[tma][pipeline][emulator]") {
  run_cases("matmul_tma", "cuda-emu:sm_90a", with_producer(tma_emulator_cases()));
}

TEST_CASE("matmul_tma_tcgen05: every input type, swizzle and ring depth on the CPU",
          "[tma][tcgen05][cpu]") {
  run_cases("matmul_tma_tcgen05", "cpu", tma_cpu_cases());
}

TEST_CASE("matmul_tma_tcgen05: every input type, swizzle and ring depth on the emulator",
          "[tma][tcgen05][emulator]") {
  run_cases("matmul_tma_tcgen05", "cuda-emu:sm_100a", tma_emulator_cases());
}

TEST_CASE("matmul_tma_tcgen05 with a producer plane on the CPU", "[tma][tcgen05][pipeline][cpu]") {
  run_cases("matmul_tma_tcgen05", "cpu", with_producer(tma_cpu_cases()));
}

TEST_CASE("matmul_tma_tcgen05 with a producer plane on the emulator",
          "[tma][tcgen05][pipeline][emulator]") {
  run_cases("matmul_tma_tcgen05", "cuda-emu:sm_100a", with_producer(tma_emulator_cases()));
}

// matmul_mma with its tiles staged through a ring of cp.async stages (stage_shared, stages 2 to
// 4): shapes whose rows are whole 16-byte copies take the ring, the others (K, N or a stride
// not a multiple of 16 bytes) the synchronous staging, in the same kernel.
struct MmaCase {
  const char* dtype;
  int stages;
  int64_t m, n, k;
};

void run_mma_ring(const char* device, const std::vector<MmaCase>& cases) {
  (void)kernels::builtin_names();
  auto rt = Runtime::open(device);
  if (!rt) {
    std::printf("skipped on %s: %s\n", device, rt.error().message.c_str());
    return;
  }
  for (const MmaCase& c : cases) {
    INFO("matmul_mma on " << device << ": " << c.dtype << ", " << c.stages << " stages, " << c.m
                          << " x " << c.n << " x " << c.k);
    kernels::RunConfig config;
    config.dtypes["a"] = c.dtype;
    config.set["stage_shared"] = "true";
    config.set["stages"] = std::to_string(c.stages);
    config.shapes["a"] = {c.m, c.k};
    config.shapes["b"] = {c.k, c.n};
    config.repeat = 0;
    auto r = kernels::run(*rt, "matmul_mma", config);
    INFO((r.ok() ? std::string() : r.error().message));
    REQUIRE(r.ok());
    REQUIRE(r->has_reference);
    CHECK(r->passed);
  }
}

std::vector<MmaCase> mma_ring_cases() {
  std::vector<MmaCase> cases;
  for (const char* t : {"f16", "bf16", "f32", "i8", "f8e4m3"})
    for (int stages = 2; stages <= 4; ++stages) cases.push_back({t, stages, 100, 80, 320});
  cases.push_back({"f16", 3, 64, 64, 32});    // one step: fewer steps than stages
  cases.push_back({"bf16", 2, 130, 72, 96});  // edges of both tiles
  cases.push_back({"f16", 3, 70, 68, 84});    // N and K not whole copies: synchronous staging
  cases.push_back({"i8", 4, 40, 48, 72});     // K not whole 16-byte copies of i8
  return cases;
}

TEST_CASE("matmul_mma through a ring of cp.async stages on the CPU", "[mma][async][cpu]") {
  run_mma_ring("cpu", mma_ring_cases());
}

TEST_CASE("matmul_mma through a ring of cp.async stages on the emulator (sm_80, sm_89)",
          "[mma][async][emulator]") {
  run_mma_ring("cuda-emu:sm_80", mma_ring_cases());
  run_mma_ring("cuda-emu:sm_89", {{"f8e5m2", 3, 64, 80, 256}, {"f16", 2, 33, 40, 48}});
}

}  // namespace
}  // namespace kiln
