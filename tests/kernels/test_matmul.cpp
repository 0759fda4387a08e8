// kiln::lib::matmul against a double reference: through `kiln run matmul`'s runner (types,
// transposes, batch broadcasting, edges that are no multiple of any block, alpha and beta, bias
// and epilogues, K = 0 and K past one chunk) on the CPU and the emulator; strided views in and
// out; beta = 0 ignoring NaN in C; and the errors of the host API.
#include <catch2/catch.hpp>

#include <limits>

#include <cmath>
#include <random>

#include "kernels/kernels.h"
#include "kernels/lib/matmul.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;

struct Case {
  const char* what;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::string> set, dtypes;
  bool emulator = false;  // small enough for cuda-emu too
};

TEST_CASE("kiln::lib::matmul matches a double reference", "[matmul]") {
  (void)kernels::builtin_names();
  const Case cases[] = {
      {"f32, edges, alpha and beta",
       {{"a", {37, 53}}, {"b", {53, 29}}},
       {{"alpha", "1.5"}, {"beta", "0.5"}},
       {},
       true},
      {"bf16 to bf16, both transposed, bias, GELU",
       {{"a", {45, 33}}, {"b", {70, 45}}},
       {{"transpose_a", "true"}, {"transpose_b", "true"}, {"use_bias", "true"}, {"epilogue", "2"}},
       {{"a", "bf16"}, {"c", "bf16"}},
       true},
      {"f16 to f32, batches broadcast, ReLU",
       {{"a", {3, 1, 20, 30}}, {"b", {4, 30, 25}}},
       {{"epilogue", "1"}},
       {{"a", "f16"}},
       true},
      {"K = 0: C = beta C", {{"a", {5, 0}}, {"b", {0, 7}}}, {{"beta", "2"}}, {}, true},
      {"f16 to f16, tiles past the edges, a batch of B",
       {{"a", {130, 40}}, {"b", {3, 40, 70}}},
       {{"alpha", "0.5"}},
       {{"a", "f16"}, {"c", "f16"}},
       true},
      {"f32 as tf32 where tensor cores may take it",
       {{"a", {33, 48}}, {"b", {48, 65}}},
       {{"allow_tf32", "true"}},
       {},
       true},
      {"K over several chunks, beta, bias",
       {{"a", {50, 1000}}, {"b", {1000, 40}}},
       {{"beta", "-1"}, {"use_bias", "true"}},
       {}},
      {"blocks that do not divide M or N, f16 out",
       {{"a", {200, 150}}, {"b", {150, 530}}},
       {},
       {{"a", "f16"}, {"c", "f16"}}},
      {"f8e4m3 to bf16 with per-tensor scales, B transposed, bias",
       {{"a", {45, 72}}, {"b", {38, 72}}},
       {{"scale_a", "0.25"}, {"scale_b", "3"}, {"transpose_b", "true"}, {"use_bias", "true"}},
       {{"a", "f8e4m3"}, {"c", "bf16"}},
       true},
      {"f8e5m2 to f32, odd K, alpha, beta",
       {{"a", {30, 37}}, {"b", {37, 41}}},
       {{"scale_b", "0.5"}, {"alpha", "2"}, {"beta", "0.5"}},
       {{"a", "f8e5m2"}},
       true},
      {"one row, one column", {{"a", {1, 300}}, {"b", {300, 1}}}, {}, {}},
      {"a batch of one-row products", {{"a", {7, 1, 64}}, {"b", {7, 64, 100}}}, {}, {}},
  };
  for (Runtime& rt : test::open_devices({"cpu", "cuda-emu"})) {
    const bool emu = rt.device().emulated;
    for (const Case& c : cases) {
      if (emu && !c.emulator) continue;
      INFO(c.what << " on " << rt.device().name);
      kernels::RunConfig config;
      config.shapes = c.shapes;
      config.set = c.set;
      config.dtypes = c.dtypes;
      config.repeat = 0;
      config.seed = 20261203;
      auto r = kernels::run(rt, "matmul", config);
      KILN_REQUIRE_OK(r);
      REQUIRE(r->has_reference);
      REQUIRE(r->checks.size() == 1);
      const auto& check = r->checks.front();
      INFO("first bad " << check.first_bad << ": got " << check.got << ", want " << check.want);
      CHECK(check.mismatches == 0);
    }
  }
}

// C = A B in double, row-major host matrices.
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                            int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l)
        s += static_cast<double>(a[static_cast<size_t>(i * k + l)]) *
             b[static_cast<size_t>(l * n + j)];
      c[static_cast<size_t>(i * n + j)] = s;
    }
  return c;
}

TEST_CASE("kiln::lib::matmul reads and writes strided views; beta = 0 ignores NaN in C",
          "[matmul]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  const int64_t m = 19, n = 41, k = 23;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (float& x : a) x = d(rng);
  for (float& x : b) x = d(rng);
  const std::vector<double> want = product(a, b, m, n, k);
  // A as the transpose of a K x M tensor (a permuted view, no transpose option); B every
  // other row of a 2K x N tensor; C every third column of an M x 3N tensor full of NaN.
  std::vector<float> at(static_cast<size_t>(k * m)), b2(static_cast<size_t>(2 * k * n), 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      at[static_cast<size_t>(l * m + i)] = a[static_cast<size_t>(i * k + l)];
  for (int64_t l = 0; l < k; ++l)
    for (int64_t j = 0; j < n; ++j)
      b2[static_cast<size_t>(2 * l * n + j)] = b[static_cast<size_t>(l * n + j)];
  Tensor ta = test::tensor_from(*rt, ir::ElemType::F32, at, {k, m});
  Tensor tb = test::tensor_from(*rt, ir::ElemType::F32, b2, {2 * k, n});
  std::vector<float> c3(static_cast<size_t>(m * 3 * n), std::nanf(""));
  Tensor tc = test::tensor_from(*rt, ir::ElemType::F32, c3, {m, 3 * n});
  auto av = ta.permute({1, 0});
  auto bv = tb.slice(0, 0, 2 * k, 2);
  auto cv = tc.slice(1, 1, 3 * n, 3);
  REQUIRE(av.ok());
  REQUIRE(bv.ok());
  REQUIRE(cv.ok());
  KILN_REQUIRE_OK(lib::matmul(*rt, *av, *bv, *cv));
  KILN_REQUIRE_OK(rt->sync());
  KILN_REQUIRE_OK(tc.download(std::span<float>(c3)));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < 3 * n; ++j) {
      const float got = c3[static_cast<size_t>(i * 3 * n + j)];
      INFO("c[" << i << ", " << j << "]");
      if (j % 3 != 1) {
        CHECK(std::isnan(got));  // not part of the view: untouched
      } else {
        CHECK(std::abs(got - want[static_cast<size_t>(i * n + j / 3)]) < 1e-5);
      }
    }
}

TEST_CASE("kiln::lib::matmul in f32: the emulator's bits are the CPU's; tf32 is asked for",
          "[matmul]") {
  (void)kernels::builtin_names();
  auto devs = test::open_devices({"cpu", "cuda-emu"});
  if (devs.size() < 2) {
    WARN("skipped: the emulator is not available here");
    return;
  }
  const int64_t m = 40, n = 72, k = 100;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (float& x : a) x = d(rng);
  for (float& x : b) x = d(rng);
  auto product = [&](Runtime& rt, bool tf32) {
    Tensor ta = test::tensor_from(rt, ir::ElemType::F32, a, {m, k});
    Tensor tb = test::tensor_from(rt, ir::ElemType::F32, b, {k, n});
    auto tc = rt.empty(ir::ElemType::F32, {m, n});
    REQUIRE(tc.ok());
    KILN_REQUIRE_OK(lib::matmul(rt, ta, tb, *tc, {.alpha = 1.5f, .allow_tf32 = tf32}));
    KILN_REQUIRE_OK(rt.sync());
    std::vector<float> out(static_cast<size_t>(m * n));
    KILN_REQUIRE_OK(tc->download(std::span<float>(out)));
    return out;
  };
  // The same FMAs in the same order (along k from 0) on both: the same bits.
  const std::vector<float> cpu = product(devs[0], false), emu = product(devs[1], false);
  CHECK(emu == cpu);
  // The CPU has no tf32 path (it multiplies f32 exactly); the emulator's tensor cores round.
  CHECK(product(devs[0], true) == cpu);
  const std::vector<float> tf32 = product(devs[1], true);
  size_t differ = 0;
  for (size_t i = 0; i < tf32.size(); ++i) {
    differ += tf32[i] != cpu[i];
    CHECK(std::abs(tf32[i] - cpu[i]) < 2e-2);
  }
  CHECK(differ > tf32.size() / 2);
}

TEST_CASE("kiln::lib::matmul refuses what it cannot compute, naming it", "[matmul]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  auto make = [&](ir::ElemType t, std::initializer_list<int64_t> shape) {
    auto x = rt->empty(t, shape);
    REQUIRE(x.ok());
    return *x;
  };
  const auto F32 = ir::ElemType::F32;
  Tensor a = make(F32, {4, 5}), b = make(F32, {5, 6}), c = make(F32, {4, 6});
  auto fails = [&](const Tensor& x, const Tensor& y, Tensor& z, const lib::MatmulOptions& o,
                   const std::string& says) {
    const Status st = lib::matmul(*rt, x, y, z, o);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("kiln::lib::matmul: ") && Contains(says));
  };
  Tensor c46 = c;
  fails(a, make(F32, {6, 6}), c46, {}, "a is 4 x 5 and b is 6 x 6");
  fails(a, b, c46, {.transpose_b = true}, "b^T is 6 x 5");
  Tensor c_wrong = make(F32, {4, 7});
  fails(a, b, c_wrong, {}, "c is f32[4, 7]; the product is 4 x 6");
  Tensor c_i32 = make(ir::ElemType::I32, {4, 6});
  fails(a, b, c_i32, {}, "the result is f32 or the inputs' type");
  fails(make(ir::ElemType::F16, {4, 5}), b, c46, {}, "both must hold the same type");
  fails(make(ir::ElemType::I8, {4, 5}), make(ir::ElemType::I8, {5, 6}), c46, {},
        "f32, f16, bf16, f8e4m3 or f8e5m2");
  Tensor c_f8 = make(ir::ElemType::F8E4M3, {4, 6});
  fails(make(ir::ElemType::F8E4M3, {4, 5}), make(ir::ElemType::F8E4M3, {5, 6}), c_f8, {},
        "the product of f8e4m3 inputs is f32, f16 or bf16");
  fails(make(ir::ElemType::F8E4M3, {4, 5}), make(ir::ElemType::F8E5M2, {5, 6}), c46, {},
        "both must hold the same type");
  fails(a, b, c46, {.scale_a = std::numeric_limits<float>::infinity()}, "scale_a (inf)");
  fails(a, b, c46, {.alpha = 1e30f, .scale_a = 1e10f}, "alpha times both");
  fails(make(F32, {5}), b, c46, {}, "matrices are rank 2 to 5");
  Tensor c_batched = make(F32, {3, 4, 6});
  fails(make(F32, {2, 4, 5}), b, c_batched, {}, "batch dimension -1 of a is 2 where c's is 3");
  Tensor c_flat = make(F32, {4, 6});
  fails(make(F32, {3, 4, 5}), b, c_flat, {}, "fewer batch dimensions");
  Tensor bias = make(F32, {5});
  fails(a, b, c46, {.bias = &bias}, "the bias is f32[5]; it must be f32[6]");
  fails(a, b, c46, {.alpha = std::nanf("")}, "must be finite");
  Tensor ro = c.as_read_only();
  fails(a, b, ro, {}, "'c' is read-only");
}

TEST_CASE("kiln::lib::grouped_matmul multiplies each group's rows by its B", "[matmul][grouped]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  const Case cases[] = {
      {"f32, uneven groups, one empty", {{"a", {300, 40}}, {"b", {7, 40, 33}}}, {}, {}},
      {"bf16 to bf16, B transposed, a bias row per group, GELU, beta, the last rows in no group",
       {{"a", {129, 64}}, {"b", {5, 48, 64}}},
       {{"transpose_b", "true"},
        {"use_bias", "true"},
        {"group_bias", "true"},
        {"epilogue", "2"},
        {"beta", "0.5"},
        {"tail", "20"}},
       {{"a", "bf16"}, {"c", "bf16"}}},
      {"f8e4m3 with scales, one bias for every group",
       {{"a", {64, 32}}, {"b", {3, 32, 24}}},
       {{"scale_a", "0.5"}, {"scale_b", "3"}, {"use_bias", "true"}, {"epilogue", "1"}},
       {{"a", "f8e4m3"}, {"c", "bf16"}}},
      {"every row outside the groups", {{"a", {16, 8}}, {"b", {2, 8, 8}}}, {{"tail", "16"}}, {}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    kernels::RunConfig config;
    config.shapes = c.shapes;
    config.set = c.set;
    config.dtypes = c.dtypes;
    config.repeat = 0;
    config.seed = 20261206;
    auto r = kernels::run(*rt, "grouped_matmul", config);
    KILN_REQUIRE_OK(r);
    INFO("plan: " << r->plan);
    CHECK_THAT(r->plan, Contains("groups)"));
    REQUIRE(r->checks.size() == 1);
    INFO("first bad " << r->checks[0].first_bad << ": got " << r->checks[0].got << ", want "
                      << r->checks[0].want);
    CHECK(r->checks[0].mismatches == 0);
  }
}

TEST_CASE("kiln::lib::grouped_matmul refuses what it cannot compute, naming it",
          "[matmul][grouped]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  auto make = [&](ir::ElemType t, std::initializer_list<int64_t> shape) {
    auto x = rt->empty(t, shape);
    REQUIRE(x.ok());
    return *x;
  };
  auto ends = [&](std::initializer_list<int32_t> v) {
    Tensor t = make(ir::ElemType::I32, {static_cast<int64_t>(v.size())});
    REQUIRE(t.upload(std::span<const int32_t>(v.begin(), v.size())).ok());
    return t;
  };
  const auto F32 = ir::ElemType::F32;
  Tensor a = make(F32, {10, 4}), b = make(F32, {3, 4, 6}), c = make(F32, {10, 6});
  auto fails = [&](const Tensor& x, const Tensor& y, const Tensor& offs, Tensor& z,
                   const lib::MatmulOptions& o, const std::string& says) {
    const Status st = lib::grouped_matmul(*rt, x, y, offs, z, o);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("kiln::lib::grouped_matmul: ") && Contains(says));
  };
  const Tensor good = ends({2, 2, 10});
  REQUIRE(lib::grouped_matmul(*rt, a, b, good, c).ok());
  fails(a, b, ends({3, 2, 10}), c, {},
        "offsets[1] is 2: the groups' ends must not decrease and lie in 0 .. 10 (a's rows); "
        "offsets[0] is 3");
  fails(a, b, ends({3, 5, 11}), c, {}, "offsets[2] is 11");
  fails(a, b, ends({-1, 5, 10}), c, {}, "offsets[0] is -1");
  fails(a, b, ends({5, 10}), c, {}, "one end per group");
  fails(a, b, make(ir::ElemType::I64, {3}), c, {}, "it must be i32[G]");
  fails(a, make(F32, {4, 6}), good, c, {}, "the tensor 'b' is f32[4, 6]; it must be [G, K, N]");
  fails(a, make(F32, {3, 5, 6}), good, c, {},
        "the columns of a must be the rows of each group's B");
  Tensor c_wrong = make(F32, {10, 5});
  fails(a, b, good, c_wrong, {}, "c is f32[10, 5]; the product is 10 x 6");
  fails(a, b, good, c, {.transpose_a = true}, "transpose_a does not apply");
  fails(a, b, good, c, {.split_k = 2}, "a grouped product is not split");
  Tensor bias = make(F32, {2, 6});
  fails(a, b, good, c, {.bias = &bias}, "f32[6] (one per column) or f32[3, 6]");
  fails(make(ir::ElemType::F16, {10, 4}), b, good, c, {}, "both must hold the same type");
}

}  // namespace
}  // namespace kiln
