// kiln::lib::attention against a double reference through `kiln run attention`'s runner (the
// output and the log-sum-exp): sequence lengths that are no multiple of a tile (1, 7, 200, 1000),
// Sq != Sk with causal masks (the last query aligned to the last key), rows that see no key
// (output 0, log-sum-exp +inf, no NaN), sliding windows, an additive bias broadcast over the
// batch, grouped- and multi-query heads, BSHD views, every head size, f16 and bf16 inputs with
// outputs of their type or f32; the same on the emulator (sm_80's and sm_90a's CUDA, O split
// across cubes at head size 256); and the errors of the host API. The backward pass likewise
// (`kiln run attention_backward`'s analytic double reference), and against central finite
// differences of a double forward.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ir/float16.h"
#include "kernels/kernels.h"
#include "kernels/lib/attention.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;

struct AttnCase {
  std::vector<int64_t> q, k;  // B x H x S x D (with bshd: B x S x H x D)
  std::map<std::string, std::string> set;
  const char* in;   // input type
  const char* out;  // output type
};

void run_case(Runtime& rt, const AttnCase& c, const char* op = "attention",
              const char* plan = nullptr) {
  const bool backward = std::string(op) == "attention_backward";
  // The CPU runs kernels of its own, a query (key) per SIMD lane; GPUs, fragment kernels.
  const bool cpu = rt.device().lane_units;
  if (!plan && backward)
    plan = cpu ? "attention_bwd_dkdv_cpu + attention_bwd_dq_cpu:"
               : "attention_bwd_dkdv + attention_bwd_dq:";
  if (!plan) plan = cpu ? "attention_fwd_cpu:" : "attention_fwd:";
  INFO("q " << fmt::format("{}", fmt::join(c.q, "x")) << " k "
            << fmt::format("{}", fmt::join(c.k, "x")) << " " << c.in << " -> " << c.out);
  for (const auto& [k, v] : c.set) INFO(k << " = " << v);
  kernels::RunConfig config;
  config.shapes = {{"q", c.q}, {"k", c.k}};
  config.set = c.set;
  if (backward)
    config.dtypes = {{"q", c.in},   {"k", c.in},   {"v", c.in},  {"dout", c.in},
                     {"dq", c.out}, {"dk", c.out}, {"dv", c.out}};
  else
    config.dtypes = {{"q", c.in}, {"k", c.in}, {"v", c.in}, {"out", c.out}};
  config.repeat = 0;
  config.seed = 20261206;
  auto r = kernels::run(rt, op, config);
  KILN_REQUIRE_OK(r);
  INFO("plan: " << r->plan);
  CHECK_THAT(r->plan, Contains(plan));
  REQUIRE(r->checks.size() == (backward ? 3 : 2));
  for (const auto& check : r->checks) {
    INFO(check.name << ": first bad " << check.first_bad << ": got " << check.got << ", want "
                    << check.want);
    CHECK(check.mismatches == 0);
  }
}

const AttnCase kCases[] = {
    {{2, 4, 200, 64}, {2, 2, 200, 64}, {}, "bf16", "bf16"},
    {{1, 2, 1, 64}, {1, 2, 7, 64}, {}, "f16", "f32"},
    {{1, 3, 7, 32}, {1, 1, 1, 32}, {{"causal", "1"}}, "bf16", "f32"},
    // Causal with Sq > Sk: the first 30 queries see no key.
    {{1, 2, 40, 32}, {1, 2, 10, 32}, {{"causal", "1"}}, "f16", "f16"},
    {{1, 4, 77, 96}, {1, 2, 150, 96}, {{"causal", "1"}, {"use_bias", "1"}}, "bf16", "bf16"},
    {{2, 2, 100, 128},
     {2, 2, 100, 128},
     {{"window_left", "20"}, {"window_right", "5"}, {"scale", "0.2"}},
     "f16",
     "f32"},
    // A window of one key (the diagonal), and BSHD views with 4 query heads per key head.
    {{1, 2, 30, 32}, {1, 2, 30, 32}, {{"window_left", "0"}, {"window_right", "0"}}, "bf16", "f32"},
    {{1, 33, 8, 256}, {1, 50, 2, 256}, {{"bshd", "1"}, {"use_bias", "1"}}, "bf16", "bf16"},
    {{1, 1, 1000, 64}, {1, 1, 1000, 64}, {{"causal", "1"}}, "bf16", "f32"},
    // Windows wider than the sequences: no bound.
    {{1, 1, 50, 32},
     {1, 1, 40, 32},
     {{"window_left", "1000000000"}, {"window_right", "1000000000"}},
     "f16",
     "f32"},
    // f32 inputs (the CPU), also one query per head against a cache too short for the decode
    // path (under 512 keys).
    {{1, 3, 50, 64}, {1, 1, 70, 64}, {{"causal", "1"}, {"use_bias", "1"}}, "f32", "f32"},
    {{1, 8, 1, 128}, {1, 2, 500, 128}, {}, "f32", "f32"},
    {{1, 33, 6, 96}, {1, 40, 2, 96}, {{"bshd", "1"}, {"window_left", "7"}}, "f32", "f32"},
    // Variable lengths (kiln run's sequences=N: q's and k's rows cut into N sequences).
    {{1, 4, 300, 64}, {1, 2, 420, 64}, {{"sequences", "6"}, {"causal", "1"}}, "bf16", "f32"},
};

TEST_CASE("kiln::lib::attention matches a double reference", "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  for (const AttnCase& c : kCases) run_case(*rt, c);
}

TEST_CASE("kiln::lib::attention on the emulator", "[attention][gpu-paths]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cuda-emu:sm_80", "cuda-emu:sm_90a"}) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    INFO(device);
    run_case(
        opened.front(),
        {{1, 4, 77, 64}, {1, 2, 90, 64}, {{"causal", "1"}, {"use_bias", "1"}}, "bf16", "bf16"});
    run_case(
        opened.front(),
        {{1, 20, 2, 128}, {1, 30, 1, 128}, {{"bshd", "1"}, {"window_left", "10"}}, "f16", "f16"});
    // Head size 256: O split across two cubes on a GPU.
    run_case(opened.front(), {{1, 1, 40, 256}, {1, 1, 33, 256}, {}, "bf16", "f32"});
    // f32 inputs run on the CPU only: refused, saying so.
    auto q32 = opened.front().empty(ir::ElemType::F32, {1, 1, 16, 64});
    KILN_REQUIRE_OK(q32);
    auto o32 = opened.front().empty(ir::ElemType::F32, {1, 1, 16, 64});
    KILN_REQUIRE_OK(o32);
    const Status s = lib::attention(opened.front(), *q32, *q32, *q32, *o32);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Contains("f32 runs on the CPU"));
  }
}

// The decode path (a group's queries in one cube (CPU) or one plane's rows (GPUs), the cache in
// parts combined): one query and a few, grouped heads, masks, a bias, BSHD, every head size,
// both output types.
const AttnCase kDecodeCases[] = {
    {{1, 8, 1, 64}, {1, 2, 3000, 64}, {{"causal", "1"}, {"use_bias", "1"}}, "bf16", "bf16"},
    {{2, 16, 2, 128},
     {2, 2, 700, 128},
     {{"window_left", "300"}, {"window_right", "0"}},
     "f16",
     "f32"},
    {{1, 1, 4, 256}, {1, 1, 1000, 256}, {{"causal", "1"}}, "bf16", "f32"},
    {{2, 1, 8, 96}, {2, 600, 2, 96}, {{"bshd", "1"}, {"scale", "0.3"}}, "f16", "f16"},
    // One key per query (a window of 0 on both sides), 16 queries of one head.
    {{1, 1, 16, 32}, {1, 1, 512, 32}, {{"window_left", "0"}, {"window_right", "0"}}, "bf16", "f32"},
};

TEST_CASE("kiln::lib::attention's decode path matches a double reference", "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  for (const AttnCase& c : kDecodeCases)
    run_case(*rt, c, "attention", "attention_decode_cpu + attention_decode_combine:");
  // f32 inputs (the CPU's kernel takes them) and eight queries of two heads, 12 of 16 rows.
  run_case(*rt, {{1, 4, 1, 64}, {1, 1, 1500, 64}, {{"causal", "1"}}, "f32", "f32"}, "attention",
           "attention_decode_cpu + attention_decode_combine:");
  run_case(*rt,
           {{1, 4, 3, 128},
            {1, 1, 900, 128},
            {{"use_bias", "1"}, {"window_left", "500"}},
            "bf16",
            "bf16"},
           "attention", "attention_decode_cpu + attention_decode_combine:");
  for (const char* device : {"cuda-emu:sm_80", "cuda-emu:sm_90a", "cuda-emu:sm_100a"}) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    INFO(device);
    run_case(opened.front(),
             {{1, 8, 1, 64}, {1, 2, 600, 64}, {{"causal", "1"}, {"use_bias", "1"}}, "bf16", "bf16"},
             "attention", "attention_decode + attention_decode_combine:");
    run_case(opened.front(), {{1, 1, 2, 256}, {1, 1, 520, 256}, {}, "bf16", "f32"}, "attention",
             "attention_decode + attention_decode_combine:");
  }
}

// The CPU kernels' configuration for AVX2 machines (8 lanes, blocks of 8 keys, backward blocks
// of 6), run on this machine as cpu:x86-64-v3's code: forward, both backward ways and decode.
TEST_CASE("kiln::lib::attention's CPU kernels in their AVX2 configuration (cpu:x86-64-v3)",
          "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu:x86-64-v3");
  if (!rt.ok()) {
    WARN("skipped: " << rt.error().message);
    return;
  }
  REQUIRE(rt->max_lanes(ir::ElemType::F32) == 8);
  run_case(*rt,
           {{1, 4, 77, 64}, {1, 2, 90, 64}, {{"causal", "1"}, {"use_bias", "1"}}, "bf16", "bf16"});
  run_case(*rt, {{1, 3, 50, 96}, {1, 1, 70, 96}, {{"window_left", "9"}}, "f32", "f32"});
  for (const char* how : {"fused", "walks"}) {
    INFO("KILN_ATTENTION_CPU_BACKWARD=" << how);
    ::setenv("KILN_ATTENTION_CPU_BACKWARD", how, 1);
    const bool fused = std::string(how) == "fused";
    run_case(*rt, {{1, 4, 45, 64}, {1, 2, 60, 64}, {{"causal", "1"}}, "f16", "f32"},
             "attention_backward", fused ? "attention_bwd_cpu:" : nullptr);
    run_case(*rt, {{2, 4, 40, 32}, {2, 2, 33, 32}, {{"use_bias", "1"}}, "bf16", "f32"},
             "attention_backward", fused ? "attention_bwd_cpu:" : nullptr);
  }
  ::unsetenv("KILN_ATTENTION_CPU_BACKWARD");
  run_case(*rt, {{1, 8, 1, 128}, {1, 2, 1500, 128}, {{"causal", "1"}}, "bf16", "bf16"}, "attention",
           "attention_decode_cpu + attention_decode_combine:");
}

// The backward pass: f32 gradients (whose tolerance, 1e-3 (f16) or 4e-3 (bf16) of the largest,
// sees a wrong term that the inputs' type's rounding would hide) and some of the inputs' type.
const AttnCase kBackwardCases[] = {
    {{1, 2, 1, 64}, {1, 2, 7, 64}, {}, "f16", "f32"},
    {{1, 3, 7, 32}, {1, 1, 1, 32}, {{"causal", "1"}}, "bf16", "f32"},
    // Causal with Sq > Sk (the first 30 queries see no key: no gradient) and Sq < Sk.
    {{1, 2, 40, 32}, {1, 2, 10, 32}, {{"causal", "1"}}, "f16", "f32"},
    {{1, 4, 77, 96}, {1, 2, 150, 96}, {{"causal", "1"}, {"use_bias", "1"}}, "f16", "f32"},
    {{2, 2, 100, 128},
     {2, 2, 100, 128},
     {{"window_left", "20"}, {"window_right", "5"}, {"scale", "0.2"}},
     "f16",
     "f32"},
    {{1, 33, 8, 64}, {1, 45, 2, 64}, {{"bshd", "1"}, {"use_bias", "1"}}, "bf16", "f32"},
    {{1, 2, 40, 256}, {1, 1, 33, 256}, {}, "f16", "f32"},
    {{2, 4, 200, 64}, {2, 2, 200, 64}, {}, "bf16", "bf16"},
    {{1, 1, 200, 64}, {1, 1, 200, 64}, {{"causal", "1"}}, "f16", "f16"},
    // f32 inputs (the CPU).
    {{1, 4, 45, 64}, {1, 2, 60, 64}, {{"causal", "1"}, {"use_bias", "1"}}, "f32", "f32"},
    {{1, 17, 6, 32}, {1, 30, 3, 32}, {{"bshd", "1"}, {"window_right", "4"}}, "f32", "f32"},
    {{1, 4, 150, 64}, {1, 2, 90, 64}, {{"sequences", "5"}, {"window_left", "9"}}, "f16", "f32"},
};

TEST_CASE("kiln::lib::attention_backward matches a double reference", "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  // Both of the CPU's ways: one cube per key head (five products), and two walks (seven).
  for (const char* how : {"fused", "walks"}) {
    INFO("KILN_ATTENTION_CPU_BACKWARD=" << how);
    ::setenv("KILN_ATTENTION_CPU_BACKWARD", how, 1);
    const std::string fused = "attention_bwd_cpu:";
    for (const AttnCase& c : kBackwardCases)
      run_case(*rt, c, "attention_backward", std::string(how) == "fused" ? fused.c_str() : nullptr);
  }
  ::setenv("KILN_ATTENTION_CPU_BACKWARD", "sometimes", 1);
  kernels::RunConfig config;
  config.repeat = 0;
  auto r = kernels::run(*rt, "attention_backward", config);
  ::unsetenv("KILN_ATTENTION_CPU_BACKWARD");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Contains("KILN_ATTENTION_CPU_BACKWARD is 'sometimes'"));
  // kiln run's sequences=N: a count, in one batch item.
  for (const char* n : {"-1", "2.5", "100000"}) {
    config.set = {{"sequences", n}};
    config.shapes = {{"q", {1, 2, 20, 32}}, {"k", {1, 2, 20, 32}}};
    auto bad = kernels::run(*rt, "attention", config);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message, Contains("a count of sequences from 1 to 65535"));
  }
  config.set = {{"sequences", "3"}};
  config.shapes = {{"q", {2, 2, 20, 32}}, {"k", {2, 2, 20, 32}}};
  auto two = kernels::run(*rt, "attention", config);
  REQUIRE_FALSE(two.ok());
  CHECK_THAT(two.error().message, Contains("packs the sequences in one batch item"));
}

// The CPU's two ways (one cube per key head, or two walks) give the same bits, so that the
// choice, which follows the core count, never shows in the results.
TEST_CASE("kiln::lib::attention_backward's two CPU ways give the same bits", "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  using ir::ElemType;
  struct Shape {
    int64_t hq, hk, sq, sk, d;
    lib::AttentionOptions o;
  };
  lib::AttentionOptions causal, window;
  causal.causal = true;
  window.window_left = 9;
  window.window_right = 2;
  for (const auto& [hq, hk, sq, sk, d, o] :
       {Shape{4, 2, 37, 50, 64, causal}, Shape{2, 1, 70, 33, 32, window},
        Shape{1, 1, 19, 19, 128, {}}, Shape{3, 3, 40, 10, 96, causal}}) {
    INFO(hq << " heads (" << hk << "), " << sq << " x " << sk << " x " << d);
    uint64_t state = static_cast<uint64_t>(sq * 1000 + sk);
    auto random = [&](std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t x : shape) n *= x;
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      for (auto& x : bits) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x = bf16_bits(static_cast<double>(state >> 11) / 9007199254740992.0 * 2 - 1);
      }
      return test::tensor_from(*rt, ElemType::BF16, bits, shape);
    };
    auto empty = [&](ElemType t, std::vector<int64_t> shape) {
      auto r = rt->empty(t, std::span<const int64_t>(shape));
      REQUIRE(r.ok());
      return std::move(*r);
    };
    const Tensor q = random({2, hq, sq, d}), k = random({2, hk, sk, d}), v = random({2, hk, sk, d}),
                 dout = random({2, hq, sq, d});
    Tensor out = empty(ElemType::BF16, {2, hq, sq, d}), lse = empty(ElemType::F32, {2, hq, sq});
    lib::AttentionOptions fwd = o;
    fwd.lse = &lse;
    KILN_REQUIRE_OK(lib::attention(*rt, q, k, v, out, fwd));
    std::vector<std::vector<float>> got[2];
    for (int way = 0; way < 2; ++way) {
      ::setenv("KILN_ATTENTION_CPU_BACKWARD", way == 0 ? "fused" : "walks", 1);
      Tensor dq = empty(ElemType::F32, {2, hq, sq, d}), dk = empty(ElemType::F32, {2, hk, sk, d}),
             dv = empty(ElemType::F32, {2, hk, sk, d});
      const Status s = lib::attention_backward(*rt, q, k, v, out, dout, lse, dq, dk, dv, o);
      ::unsetenv("KILN_ATTENTION_CPU_BACKWARD");
      KILN_REQUIRE_OK(s);
      for (const Tensor* t : {&dq, &dk, &dv}) got[way].push_back(test::to_host<float>(*t));
    }
    for (size_t i = 0; i < 3; ++i) {
      INFO((std::array{"dq", "dk", "dv"}[i]));
      REQUIRE(got[0][i].size() == got[1][i].size());
      size_t differ = 0;
      for (size_t e = 0; e < got[0][i].size(); ++e)
        if (std::memcmp(&got[0][i][e], &got[1][i][e], sizeof(float)) != 0) ++differ;
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("kiln::lib::attention_backward on the emulator", "[attention][gpu-paths]") {
  (void)kernels::builtin_names();
  // sm_80 and sm_90a reload Q, K, V and dO above head size 64 and split the gradients' columns
  // at 256; sm_100a keeps them and splits from 96.
  for (const char* device : {"cuda-emu:sm_80", "cuda-emu:sm_90a", "cuda-emu:sm_100a"}) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    INFO(device);
    run_case(opened.front(),
             {{1, 4, 37, 64}, {1, 2, 50, 64}, {{"causal", "1"}, {"use_bias", "1"}}, "bf16", "f32"},
             "attention_backward");
    run_case(
        opened.front(),
        {{1, 2, 6, 128}, {1, 40, 3, 128}, {{"bshd", "1"}, {"window_left", "10"}}, "f16", "f32"},
        "attention_backward");
    run_case(opened.front(), {{1, 1, 20, 256}, {1, 1, 33, 256}, {}, "bf16", "f32"},
             "attention_backward");
  }
}

// The loss L = sum(out * dout), out = attention(q, k, v) in double, from f16 inputs: L's
// central differences along every element of q, k and v against the kernel's f32 gradients.
TEST_CASE("kiln::lib::attention_backward against finite differences", "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  const int64_t hq = 2, hk = 1, sq = 9, sk = 13, D = 32;
  const double scale = 0.3;
  std::vector<double> q(size_t(hq * sq * D)), k(size_t(hk * sk * D)), v(k.size()), dout(q.size());
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return round_to_f16(static_cast<double>(state >> 11) / 9007199254740992.0 * 2 - 1);
  };
  for (auto* t : {&q, &k, &v, &dout})
    for (double& x : *t) x = next();
  // Causal, Sq < Sk: query i sees keys up to i + 4.
  auto loss = [&] {
    double l = 0;
    std::vector<double> w(static_cast<size_t>(sk));
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i + sk - sq; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < D; ++c)
            dot += q[size_t((h * sq + i) * D + c)] * k[size_t(j * D + c)];
          w[size_t(j)] = dot * scale;
          mx = std::max(mx, w[size_t(j)]);
        }
        for (int64_t j = 0; j <= i + sk - sq; ++j)
          sum += w[size_t(j)] = std::exp(w[size_t(j)] - mx);
        for (int64_t c = 0; c < D; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i + sk - sq; ++j) o += w[size_t(j)] * v[size_t(j * D + c)];
          l += o / sum * dout[size_t((h * sq + i) * D + c)];
        }
      }
    return l;
  };
  auto upload = [&](const std::vector<double>& x, std::vector<int64_t> shape) {
    std::vector<uint16_t> bits;
    for (double e : x) bits.push_back(f16_bits(e));
    return test::tensor_from(*rt, ir::ElemType::F16, bits, shape);
  };
  const Tensor tq = upload(q, {1, hq, sq, D}), tk = upload(k, {1, hk, sk, D}),
               tv = upload(v, {1, hk, sk, D}), tdo = upload(dout, {1, hq, sq, D});
  auto make = [&](ir::ElemType t, std::vector<int64_t> shape) {
    auto r = rt->empty(t, std::span<const int64_t>(shape));
    REQUIRE(r.ok());
    return std::move(*r);
  };
  Tensor out = make(ir::ElemType::F16, {1, hq, sq, D}), lse = make(ir::ElemType::F32, {1, hq, sq});
  Tensor dq = make(ir::ElemType::F32, {1, hq, sq, D}), dk = make(ir::ElemType::F32, {1, hk, sk, D}),
         dv = make(ir::ElemType::F32, {1, hk, sk, D});
  lib::AttentionOptions o;
  o.causal = true;
  o.scale = scale;
  o.lse = &lse;
  KILN_REQUIRE_OK(lib::attention(*rt, tq, tk, tv, out, o));
  KILN_REQUIRE_OK(lib::attention_backward(*rt, tq, tk, tv, out, tdo, lse, dq, dk, dv, o));
  KILN_REQUIRE_OK(rt->sync());
  for (const auto& [name, x, g] : {std::tuple{"dq", &q, &dq}, {"dk", &k, &dk}, {"dv", &v, &dv}}) {
    const std::vector<float> got = test::to_host<float>(*g);
    std::vector<double> want(x->size());
    double largest = 0;
    for (size_t e = 0; e < x->size(); ++e) {
      const double keep = (*x)[e], eps = 1e-4;
      (*x)[e] = keep + eps;
      const double up = loss();
      (*x)[e] = keep - eps;
      want[e] = (up - loss()) / (2 * eps);
      (*x)[e] = keep;
      largest = std::max(largest, std::fabs(want[e]));
    }
    INFO(name << ": largest gradient " << largest);
    REQUIRE(largest > 0.01);
    for (size_t e = 0; e < x->size(); ++e) {
      INFO(name << "[" << e << "]: got " << got[e] << ", finite differences " << want[e]);
      CHECK(std::fabs(got[e] - want[e]) <= 1e-3 * largest + 1e-3 * std::fabs(want[e]));
    }
  }
}

// Variable lengths: the sequences packed in one item give, bit for bit, what each sequence gives
// alone (the same blocks from each sequence's first row), forward and backward; empty
// sequences on either side among them.
void check_varlen(Runtime& rt, const std::vector<int32_t>& lq, const std::vector<int32_t>& lk,
                  lib::AttentionOptions o, int64_t hq, int64_t hk, int64_t D) {
  using ir::ElemType;
  std::vector<int32_t> cq{0}, ck{0};
  for (size_t b = 0; b < lq.size(); ++b) {
    cq.push_back(cq.back() + lq[b]);
    ck.push_back(ck.back() + lk[b]);
  }
  const int64_t tq = cq.back(), tk = ck.back();
  uint64_t state = 99;
  auto random = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    for (auto& x : bits) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = bf16_bits(static_cast<double>(state >> 11) / 9007199254740992.0 * 2 - 1);
    }
    return test::tensor_from(rt, ElemType::BF16, bits, shape);
  };
  auto zeros = [&](ElemType t, std::vector<int64_t> shape) {
    auto r = rt.empty(t, std::span<const int64_t>(shape));
    REQUIRE(r.ok());
    const std::vector<unsigned char> z(static_cast<size_t>(r->numel()) * r->element_bytes(), 0);
    REQUIRE(r->upload(z.data(), z.size()).ok());
    return std::move(*r);
  };
  const Tensor q = random({1, hq, tq, D}), k = random({1, hk, tk, D}), v = random({1, hk, tk, D}),
               dout = random({1, hq, tq, D});
  const Tensor cu_q = test::tensor_from(rt, ElemType::I32, cq, {int64_t(cq.size())});
  const Tensor cu_k = test::tensor_from(rt, ElemType::I32, ck, {int64_t(ck.size())});
  // Packed, then each sequence alone into slices of the same shapes.
  Tensor out[2] = {zeros(ElemType::F32, {1, hq, tq, D}), zeros(ElemType::F32, {1, hq, tq, D})};
  Tensor lse[2] = {zeros(ElemType::F32, {1, hq, tq}), zeros(ElemType::F32, {1, hq, tq})};
  Tensor dq[2] = {zeros(ElemType::F32, {1, hq, tq, D}), zeros(ElemType::F32, {1, hq, tq, D})};
  Tensor dk[2] = {zeros(ElemType::F32, {1, hk, tk, D}), zeros(ElemType::F32, {1, hk, tk, D})};
  Tensor dv[2] = {zeros(ElemType::F32, {1, hk, tk, D}), zeros(ElemType::F32, {1, hk, tk, D})};
  // The backward pass reads out in the inputs' type.
  Tensor out16[2] = {zeros(ElemType::BF16, {1, hq, tq, D}), zeros(ElemType::BF16, {1, hq, tq, D})};
  lib::AttentionOptions packed = o;
  packed.cu_seqlens_q = &cu_q;
  packed.cu_seqlens_k = &cu_k;
  packed.lse = &lse[0];
  KILN_REQUIRE_OK(lib::attention(rt, q, k, v, out[0], packed));
  KILN_REQUIRE_OK(lib::attention(rt, q, k, v, out16[0], packed));
  KILN_REQUIRE_OK(
      lib::attention_backward(rt, q, k, v, out16[0], dout, lse[0], dq[0], dk[0], dv[0], packed));
  for (size_t b = 0; b < lq.size(); ++b) {
    auto rows_q = [&](const Tensor& t) { return *t.slice(2, cq[b], cq[b + 1]); };
    auto rows_k = [&](const Tensor& t) { return *t.slice(2, ck[b], ck[b + 1]); };
    lib::AttentionOptions alone = o;
    Tensor l = rows_q(lse[1]), ob = rows_q(out[1]), o16 = rows_q(out16[1]);
    alone.lse = &l;
    const Tensor qb = rows_q(q), kb = rows_k(k), vb = rows_k(v), db = rows_q(dout);
    KILN_REQUIRE_OK(lib::attention(rt, qb, kb, vb, ob, alone));
    KILN_REQUIRE_OK(lib::attention(rt, qb, kb, vb, o16, alone));
    Tensor gq = rows_q(dq[1]), gk = rows_k(dk[1]), gv = rows_k(dv[1]);
    KILN_REQUIRE_OK(lib::attention_backward(rt, qb, kb, vb, o16, db, l, gq, gk, gv, alone));
  }
  KILN_REQUIRE_OK(rt.sync());
  for (const auto& [name, t] :
       {std::pair{"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}}) {
    const auto got = test::to_host<float>(t[0]), want = test::to_host<float>(t[1]);
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) ++differ;
    INFO(name << ": " << differ << " of " << got.size() << " elements differ");
    CHECK(differ == 0);
  }
}

TEST_CASE("kiln::lib::attention with variable lengths matches each sequence alone", "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  lib::AttentionOptions causal;
  causal.causal = true;
  check_varlen(*rt, {5, 0, 70, 33, 16}, {9, 4, 70, 0, 100}, causal, 4, 2, 64);
  lib::AttentionOptions window;
  window.window_left = 7;
  window.window_right = 3;
  check_varlen(*rt, {1, 40}, {30, 17}, window, 2, 2, 128);
  check_varlen(*rt, {0, 0}, {3, 5}, {}, 1, 1, 32);
}

TEST_CASE("kiln::lib::attention with variable lengths on the emulator", "[attention][gpu-paths]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cuda-emu:sm_80", "cuda-emu:sm_100a"}) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    INFO(device);
    lib::AttentionOptions causal;
    causal.causal = true;
    check_varlen(opened.front(), {5, 0, 20}, {9, 4, 20}, causal, 2, 1, 64);
  }
}

TEST_CASE("kiln::lib::attention refuses what it cannot compute, naming it", "[attention]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  auto make = [&](ir::ElemType t, std::initializer_list<int64_t> shape) {
    auto r = rt->empty(t, shape);
    REQUIRE(r.ok());
    return std::move(*r);
  };
  using ir::ElemType;
  const Tensor q = make(ElemType::BF16, {1, 4, 16, 64}), k = make(ElemType::BF16, {1, 2, 16, 64});
  Tensor out = make(ElemType::BF16, {1, 4, 16, 64});
  auto refused = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, Tensor& oo,
                     const lib::AttentionOptions& o, const std::string& what) {
    const Status s = lib::attention(*rt, qq, kk, vv, oo, o);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Contains(what));
    CHECK_THAT(s.error().message, Catch::StartsWith("kiln::lib::attention: "));
  };
  const Tensor q32 = make(ElemType::F32, {1, 4, 16, 64});
  refused(q32, k, k, out, {}, "q, k and v must hold one type; got f32, bf16 and bf16");
  Tensor o16 = make(ElemType::F16, {1, 4, 16, 64});
  refused(q, k, k, o16, {}, "out holds f16; it must hold the inputs' bf16 or f32");
  const Tensor k32 = make(ElemType::F32, {1, 2, 16, 64});
  const Status f32_out = lib::attention(*rt, q32, k32, k32, out);
  REQUIRE_FALSE(f32_out.ok());
  CHECK_THAT(f32_out.error().message,
             Catch::EndsWith("out holds bf16; it must hold the inputs' f32"));
  const Tensor qi = make(ElemType::I32, {1, 4, 16, 64});
  refused(qi, qi, qi, out, {},
          "q, k and v hold i32; attention takes f16, bf16 or (on the CPU) f32");
  const Tensor k3 = make(ElemType::BF16, {1, 3, 16, 64});
  refused(q, k3, k3, out, {}, "q's heads must be a multiple of k's");
  const Tensor q48 = make(ElemType::BF16, {1, 4, 16, 48}),
               k48 = make(ElemType::BF16, {1, 2, 16, 48});
  Tensor o48 = make(ElemType::BF16, {1, 4, 16, 48});
  refused(q48, k48, k48, o48, {}, "a multiple of 32 up to 256");
  Tensor o8 = make(ElemType::BF16, {1, 4, 8, 64});
  refused(q, k, k, o8, {}, "it must be q's shape");
  lib::AttentionOptions both;
  both.causal = true;
  both.window_right = 3;
  refused(q, k, k, out, both, "causal is window_right = 0");
  lib::AttentionOptions negative;
  negative.window_left = -2;
  refused(q, k, k, out, negative, "window_left = -2, window_right = -1");
  const Tensor bias = make(ElemType::F32, {2, 4, 16, 16});
  lib::AttentionOptions with_bias;
  with_bias.bias = &bias;
  refused(q, k, k, out, with_bias, "the bias is f32 of [2, 4, 16, 16]");
  auto qt = make(ElemType::BF16, {1, 4, 64, 16}).transpose(2, 3);
  REQUIRE(qt.ok());
  refused(*qt, k, k, out, {}, "q's last dimension has stride 16");
  // A head size of 0, and an output whose rows overlap (stride 0 along the sequence).
  const Tensor q0 = make(ElemType::BF16, {1, 4, 16, 0}), k0 = make(ElemType::BF16, {1, 2, 16, 0});
  Tensor o0 = make(ElemType::BF16, {1, 4, 16, 0});
  refused(q0, k0, k0, o0, {}, "the head size is 0");
  auto small = make(ElemType::BF16, {1, 4, 1, 64});
  const std::vector<int64_t> shape{1, 4, 16, 64}, strides{256, 64, 0, 1};
  auto spread = Tensor::make(small.device_ptr(), small.buffer(), ElemType::BF16, shape, strides);
  KILN_REQUIRE_OK(spread);
  refused(q, k, k, *spread, {}, "out (bf16[1, 4, 16, 64]) has elements that overlap");

  // The backward pass's own arguments.
  const Tensor lse = make(ElemType::F32, {1, 4, 16});
  Tensor dq = make(ElemType::F32, {1, 4, 16, 64}), dk = make(ElemType::F32, {1, 2, 16, 64}),
         dv = make(ElemType::F32, {1, 2, 16, 64});
  auto refused_bwd = [&](const Tensor& oo, const Tensor& dout, const Tensor& l, Tensor& gq,
                         Tensor& gk, Tensor& gv, const std::string& what) {
    const Status s = lib::attention_backward(*rt, q, k, k, oo, dout, l, gq, gk, gv);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Contains(what));
    CHECK_THAT(s.error().message, Catch::StartsWith("kiln::lib::attention_backward: "));
  };
  const Tensor dout32 = make(ElemType::F32, {1, 4, 16, 64});
  refused_bwd(out, dout32, lse, dq, dk, dv, "dout holds f32; it must hold the inputs' bf16");
  const Tensor lse8 = make(ElemType::F32, {1, 4, 8});
  refused_bwd(out, out, lse8, dq, dk, dv, "lse is f32 of [1, 4, 8]; it must be f32 [B, Hq, Sq]");
  refused_bwd(out, out, lse, dq, dq, dv, "dk is [1, 4, 16, 64]; it must be k's shape");
  Tensor dk16 = make(ElemType::BF16, {1, 2, 16, 64});
  refused_bwd(out, out, lse, dq, dk16, dv, "dq, dk and dv must hold one type");
  auto spread_dq = Tensor::make(dq.device_ptr(), dq.buffer(), ElemType::F32, shape, strides);
  KILN_REQUIRE_OK(spread_dq);
  refused_bwd(out, out, lse, *spread_dq, dk, dv,
              "dq (f32[1, 4, 16, 64]) has elements that overlap");
  KILN_REQUIRE_OK(lib::attention_backward(*rt, q, k, k, out, out, lse, dq, dk, dv));

  // Variable lengths: offsets that decrease or pass the rows, counts that differ, a bias.
  const Tensor q1 = make(ElemType::BF16, {1, 4, 16, 64}), k1 = make(ElemType::BF16, {1, 2, 16, 64});
  Tensor o1 = make(ElemType::BF16, {1, 4, 16, 64});
  auto offsets = [&](std::vector<int32_t> v) {
    return test::tensor_from(*rt, ElemType::I32, v, {int64_t(v.size())});
  };
  const Tensor good = offsets({0, 10, 16}), falling = offsets({0, 12, 9}),
               past = offsets({0, 17, 17}), three = offsets({0, 16});
  auto varlen = [&](const Tensor& cq, const Tensor& ck) {
    lib::AttentionOptions o;
    o.cu_seqlens_q = &cq;
    o.cu_seqlens_k = &ck;
    return o;
  };
  refused(q1, k1, k1, o1, varlen(falling, good), "cu_seqlens_q[2] is 9 after 12");
  refused(q1, k1, k1, o1, varlen(good, past), "cu_seqlens_k[1] is 17 after 0");
  refused(q1, k1, k1, o1, varlen(good, three), "cu_seqlens_q has 3 offsets and cu_seqlens_k 2");
  lib::AttentionOptions vb = varlen(good, good);
  vb.max_seqlen_q = 5;
  refused(q1, k1, k1, o1, vb, "max_seqlen_q is 5, but a sequence has 10 rows");
  const Tensor b1 = make(ElemType::F32, {1, 4, 16, 16});
  vb = varlen(good, good);
  vb.bias = &b1;
  refused(q1, k1, k1, o1, vb, "a bias with variable lengths is not built");
  const Tensor q2 = make(ElemType::BF16, {2, 4, 8, 64}), k2 = make(ElemType::BF16, {2, 2, 8, 64});
  Tensor o2 = make(ElemType::BF16, {2, 4, 8, 64});
  refused(q2, k2, k2, o2, varlen(good, good), "q's first dimension is 2");
}

}  // namespace
}  // namespace kiln
