// kiln::lib::matmul's GPU paths on the emulator of each architecture: the path the target's
// features pick (the tcgen05 kernel on sm_100a, wgmma on sm_90a, the cp.async ring on sm_80,
// sm_89 and sm_120a), against a double reference, with the types, epilogues, transposes, batch
// broadcasting and edges each path must handle; operands used in place when they already are
// rows of K, copied first when not. The products are small: the emulator runs every unit.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lib/matmul.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;

struct GpuCase {
  const char* what;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::string> set, dtypes;
  bool operands_in_place = false;  // A and B are rows of K already: nothing is copied
};

const GpuCase kCases[] = {
    {"bf16 to f32, B row-major (copied), alpha, beta, bias, GELU",
     {{"a", {70, 40}}, {"b", {40, 50}}},
     {{"alpha", "1.5"}, {"beta", "0.5"}, {"use_bias", "true"}, {"epilogue", "2"}},
     {{"a", "bf16"}},
     false},
    {"f16 to f16, B transposed (in place), batches broadcast, ReLU",
     {{"a", {2, 1, 33, 24}}, {"b", {3, 40, 24}}},
     {{"transpose_b", "true"}, {"epilogue", "1"}},
     {{"a", "f16"}, {"c", "f16"}},
     true},
    {"f32 as tf32, odd K (both copied), A transposed",
     {{"a", {37, 20}}, {"b", {37, 36}}},
     {{"allow_tf32", "true"}, {"transpose_a", "true"}},
     {},
     false},
};

// Runs `matmul` with `config` on `rt`: it must take `kernel` and agree with the double
// reference; returns the plan it printed.
std::string run_checked(Runtime& rt, const kernels::RunConfig& config, const std::string& kernel) {
  auto r = kernels::run(rt, "matmul", config);
  KILN_REQUIRE_OK(r);
  INFO("plan: " << r->plan);
  CHECK_THAT(r->plan, Contains(kernel + ":"));
  REQUIRE(r->checks.size() == 1);
  const auto& check = r->checks.front();
  INFO("first bad " << check.first_bad << ": got " << check.got << ", want " << check.want);
  CHECK(check.mismatches == 0);
  return r->plan;
}

TEST_CASE("kiln::lib::matmul takes each architecture's path on its emulator",
          "[matmul][gpu-paths]") {
  (void)kernels::builtin_names();
  const std::pair<const char*, const char*> archs[] = {
      {"cuda-emu:sm_80", "matmul_ring"},   {"cuda-emu:sm_89", "matmul_ring"},
      {"cuda-emu:sm_90a", "matmul_sm90"},  {"cuda-emu:sm_100a", "matmul_sm100"},
      {"cuda-emu:sm_120a", "matmul_ring"},
  };
  for (const auto& [device, kernel] : archs) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    Runtime& rt = opened.front();
    for (const GpuCase& c : kCases) {
      INFO(c.what << " on " << device);
      kernels::RunConfig config;
      config.shapes = c.shapes;
      config.set = c.set;
      config.dtypes = c.dtypes;
      config.repeat = 0;
      config.seed = 20261205;
      const std::string plan = run_checked(rt, config, kernel);
      INFO("plan: " << plan);
      if (c.operands_in_place)
        CHECK_THAT(plan, !Contains("copied"));
      else
        CHECK_THAT(plan, Contains("copied into rows of K"));
    }
  }
}

TEST_CASE("kiln::lib::matmul multiplies 8-bit floats with scales on each architecture",
          "[matmul][gpu-paths]") {
  (void)kernels::builtin_names();
  // sm_80 has no 8-bit tensor-core multiply: the portable kernel's f32 FMAs.
  const std::pair<const char*, const char*> archs[] = {
      {"cuda-emu:sm_80", "matmul_gpu"},    {"cuda-emu:sm_89", "matmul_ring"},
      {"cuda-emu:sm_90a", "matmul_sm90"},  {"cuda-emu:sm_100a", "matmul_sm100"},
      {"cuda-emu:sm_120a", "matmul_ring"},
  };
  for (const auto& [device, kernel] : archs) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    Runtime& rt = opened.front();
    for (const char* type : {"f8e4m3", "f8e5m2"}) {
      INFO(type << " on " << device);
      kernels::RunConfig config;
      config.shapes = {{"a", {2, 40, 64}}, {"b", {2, 72, 64}}};
      config.set = {
          {"transpose_b", "true"}, {"scale_a", "0.5"}, {"scale_b", "4"}, {"epilogue", "1"}};
      config.dtypes = {{"a", type}, {"c", "bf16"}};
      config.repeat = 0;
      config.seed = 20261207;
      const std::string plan = run_checked(rt, config, kernel);
      INFO("plan: " << plan);
      CHECK_THAT(plan, !Contains("copied"));  // K = 64 rows of K, in place
    }
  }
}

TEST_CASE("kiln::lib::matmul splits a long K into parts on every tensor-core path",
          "[matmul][gpu-paths]") {
  (void)kernels::builtin_names();
  const std::pair<const char*, const char*> archs[] = {
      {"cuda-emu:sm_89", "matmul_ring"},
      {"cuda-emu:sm_90a", "matmul_sm90"},
      {"cuda-emu:sm_100a", "matmul_sm100"},
  };
  for (const auto& [device, kernel] : archs) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    Runtime& rt = opened.front();
    // K = 300 in 3 parts of 128 (the last one short, padded with zeros), then the sum with
    // beta, bias and GELU; the output in the input type.
    kernels::RunConfig config;
    config.shapes = {{"a", {40, 300}}, {"b", {300, 30}}};
    config.set = {{"split_k", "3"}, {"beta", "0.5"}, {"use_bias", "true"}, {"epilogue", "2"}};
    config.dtypes = {{"a", "bf16"}, {"c", "bf16"}};
    config.repeat = 0;
    config.seed = 20261206;
    INFO(device);
    const std::string plan = run_checked(rt, config, kernel);
    INFO("plan: " << plan);
    CHECK_THAT(plan, Contains("K in 3 parts of 128 summed by matmul_split_sum"));
  }
  // A negative number of parts is refused, by name.
  auto opened = test::open_devices({"cuda-emu:sm_90a"});
  if (opened.empty()) return;
  Runtime& rt = opened.front();
  Tensor a = test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(64, 1.0f), {8, 8});
  auto c = rt.empty(ir::ElemType::F32, {8, 8});
  REQUIRE(c.ok());
  auto bad = lib::matmul(rt, a, a, *c, {.split_k = -2});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Contains("split_k"));
}

TEST_CASE("kiln::lib::matmul on a GPU reports the portable kernel where tensor cores do not apply",
          "[matmul][gpu-paths]") {
  (void)kernels::builtin_names();
  auto opened = test::open_devices({"cuda-emu:sm_90a"});
  if (opened.empty()) {
    WARN("skipped: cuda-emu:sm_90a is not available here");
    return;
  }
  Runtime& rt = opened.front();
  Tensor a = test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(45, 1.0f), {9, 5});
  Tensor b = test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(35, 2.0f), {5, 7});
  auto c = rt.empty(ir::ElemType::F32, {9, 7});
  REQUIRE(c.ok());
  lib::MatmulPlan plan;
  // f32 without allow_tf32: f32 FMAs, which no tensor-core path offers.
  KILN_REQUIRE_OK(lib::matmul(rt, a, b, *c, {.plan = &plan}));
  CHECK(plan.kernel == "matmul_gpu");
  CHECK_THAT(plan.why, Contains("allow_tf32"));
  // K = 0: nothing to multiply.
  auto a0 = rt.empty(ir::ElemType::BF16, {9, 0});
  auto b0 = rt.empty(ir::ElemType::BF16, {0, 7});
  REQUIRE(a0.ok());
  REQUIRE(b0.ok());
  KILN_REQUIRE_OK(lib::matmul(rt, *a0, *b0, *c, {.plan = &plan}));
  CHECK(plan.kernel == "matmul_gpu");
  CHECK_THAT(plan.why, Contains("K = 0"));
  KILN_REQUIRE_OK(rt.sync());
  std::vector<float> out(63);
  KILN_REQUIRE_OK(c->download(std::span<float>(out)));
  for (float x : out) CHECK(x == 0.0f);  // K = 0 and beta 0: zeros
}

// grouped_matmul: every group in one launch of the path's kernel (the ring's, wgmma's and
// tcgen05's tiles, the portable kernel for f32 FMAs), a group's rows starting anywhere in a
// tile, an empty group, rows past the last group left as they were; and offsets the device
// cannot check (decreasing, past the rows) clamped, never read or written outside the tensors.
TEST_CASE("kiln::lib::grouped_matmul runs every group in one launch on each architecture",
          "[matmul][gpu-paths][grouped]") {
  (void)kernels::builtin_names();
  const std::pair<const char*, const char*> archs[] = {
      {"cuda-emu:sm_80", "matmul_ring"},   {"cuda-emu:sm_89", "matmul_ring"},
      {"cuda-emu:sm_90a", "matmul_sm90"},  {"cuda-emu:sm_100a", "matmul_sm100"},
      {"cuda-emu:sm_120a", "matmul_ring"},
  };
  for (const auto& [device, kernel] : archs) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    Runtime& rt = opened.front();
    struct GroupedCase {
      const char* what;
      std::map<std::string, std::vector<int64_t>> shapes;
      std::map<std::string, std::string> set, dtypes;
      std::string kernel;
    };
    const GroupedCase cases[] = {
        {"bf16, B transposed (in place), a bias row per group, GELU, beta, a tail",
         {{"a", {150, 64}}, {"b", {7, 72, 64}}},
         {{"transpose_b", "true"},
          {"use_bias", "true"},
          {"group_bias", "true"},
          {"epilogue", "2"},
          {"beta", "0.5"},
          {"tail", "17"}},
         {{"a", "bf16"}, {"c", "bf16"}},
         kernel},
        {"f32 without tf32: the portable kernel",
         {{"a", {90, 24}}, {"b", {3, 24, 40}}},
         {},
         {},
         "matmul_gpu"},
    };
    for (const GroupedCase& c : cases) {
      INFO(c.what << " on " << device);
      kernels::RunConfig config;
      config.shapes = c.shapes;
      config.set = c.set;
      config.dtypes = c.dtypes;
      config.repeat = 0;
      config.seed = 20261206;
      auto r = kernels::run(rt, "grouped_matmul", config);
      KILN_REQUIRE_OK(r);
      INFO("plan: " << r->plan);
      CHECK_THAT(r->plan, Contains(c.kernel + ":") && Contains("groups in one launch"));
      REQUIRE(r->checks.size() == 1);
      INFO("first bad " << r->checks[0].first_bad << ": got " << r->checks[0].got << ", want "
                        << r->checks[0].want);
      CHECK(r->checks[0].mismatches == 0);
    }
  }
}

TEST_CASE("kiln::lib::grouped_matmul on a GPU clamps offsets it cannot check",
          "[matmul][gpu-paths][grouped]") {
  (void)kernels::builtin_names();
  auto opened = test::open_devices({"cuda-emu:sm_80"});
  if (opened.empty()) {
    WARN("skipped: cuda-emu:sm_80 is not available here");
    return;
  }
  Runtime& rt = opened.front();
  const int64_t t = 40, k = 16, n = 8;
  // C's rows 40 .. 47 sit past the product's view: nothing may write them.
  auto all = rt.empty(ir::ElemType::F32, {t + 8, n});
  auto a = rt.empty(ir::ElemType::F16, {t, k});
  auto b = rt.empty(ir::ElemType::F16, {3, k, n});
  auto ends = rt.empty(ir::ElemType::I32, {3});
  REQUIRE((all.ok() && a.ok() && b.ok() && ends.ok()));
  std::vector<uint16_t> ones(static_cast<size_t>(t * k), 0x3c00);  // 1.0 in f16
  REQUIRE(a->upload(std::span<const uint16_t>(ones)).ok());
  std::vector<uint16_t> bs(static_cast<size_t>(3 * k * n), 0x3c00);
  REQUIRE(b->upload(std::span<const uint16_t>(bs)).ok());
  std::vector<float> sentinel(static_cast<size_t>((t + 8) * n), -7.0f);
  REQUIRE(all->upload(std::span<const float>(sentinel)).ok());
  // 30, then 10 (less than 30: clamped to 30, an empty group), then 1000 (past T: clamped to 40).
  const std::vector<int32_t> bad = {30, 10, 1000};
  REQUIRE(ends->upload(std::span<const int32_t>(bad)).ok());
  auto c = all->slice(0, 0, t);
  REQUIRE(c.ok());
  KILN_REQUIRE_OK(lib::grouped_matmul(rt, *a, *b, *ends, *c));
  std::vector<float> got(static_cast<size_t>((t + 8) * n));
  REQUIRE(rt.sync().ok());
  REQUIRE(all->download(std::span<float>(got)).ok());
  for (int64_t i = 0; i < t + 8; ++i)
    for (int64_t j = 0; j < n; ++j) {
      INFO("row " << i << ", column " << j);
      CHECK(got[static_cast<size_t>(i * n + j)] == (i < t ? float(k) : -7.0f));
    }
}

}  // namespace
}  // namespace kiln
