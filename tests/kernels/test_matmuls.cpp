// matmul_tcgen05 (tcgen05 multiplies into tensor memory, docs/dsl.md "Tensor memory and
// tcgen05") against its double-precision reference on the CPU and the emulator
// (cuda-emu:sm_100a): every input type, every swizzle of kiln's tile layout, n from 16 to 256,
// several rounds of k (so the mbarrier's phases alternate), edges of the matrices that are no
// multiple of a tile, and K = 0. Fresh random inputs, the output poisoned, through the kernel's
// run recipe.
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
};

void run_cases(const char* device, const std::vector<Case>& cases) {
  (void)kernels::builtin_names();
  auto rt = Runtime::open(device);
  if (!rt) {
    std::printf("skipped on %s: %s\n", device, rt.error().message.c_str());
    return;
  }
  for (const Case& c : cases) {
    INFO(device << ": " << c.dtype << ", swizzle " << c.swizzle << ", tile_n " << c.tile_n
                << ", k_rows " << c.k_rows << ", " << c.m << " x " << c.n << " x " << c.k);
    kernels::RunConfig config;
    config.dtypes["a"] = c.dtype;
    config.set["swizzle"] = std::to_string(c.swizzle);
    config.set["tile_n"] = std::to_string(c.tile_n);
    config.set["k_rows"] = std::to_string(c.k_rows);
    config.shapes["a"] = {c.m, c.k};
    config.shapes["b"] = {c.n, c.k};
    config.repeat = 0;
    auto r = kernels::run(*rt, "matmul_tcgen05", config);
    INFO((r.ok() ? std::string() : r.error().message));
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
  run_cases("cpu", cases);
}

TEST_CASE("matmul_tcgen05: every input type and swizzle on the emulator", "[tcgen05][emulator]") {
  // Smaller: the emulator checks every access.
  std::vector<Case> cases;
  const char* types[] = {"f16", "bf16", "f32", "i8", "u8", "f8e4m3", "f8e5m2"};
  const int swizzles[] = {0, 32, 64, 128};
  for (int i = 0; i < 7; ++i) cases.push_back({types[i], swizzles[i % 4], 32, 1, 130, 40, 70});
  cases.push_back({"bf16", 128, 16, 1, 20, 17, 130});
  cases.push_back({"u8", 64, 256, 1, 10, 257, 64});
  run_cases("cuda-emu:sm_100a", cases);
}

}  // namespace
}  // namespace kiln
