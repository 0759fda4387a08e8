// Block-scaled fragment multiplies (mma_scaled, docs/dsl.md "Block-scaled multiplies") on the CPU
// and the emulator (cuda-emu:sm_120a): every fragment shape with k = 32 and 64 and both f8 types
// against a double reference, accumulating into a loaded accumulator, with scales from 2^-127
// to 2^93 and a NaN code; the two backends agree bit for bit. matmul_mx, the example over it,
// runs against its recipe's reference on both.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "kernels/kernels.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

namespace {

// c (m x n) += (A * SA) (B * SB) for one tile: a m x k row-major, b n x k (B column-major),
// sa m x k/32, sb n x k/32.
template <class T>
void t_mma_scaled(Tensor<const T> a, Tensor<const T> b, Tensor<const u8> sa, Tensor<const u8> sb,
                  Tensor<f32> c, int m, int n, int k) {
  auto fa = matrix_a<T>(m, n, k);
  auto fb = matrix_b<T>(m, n, k);
  auto acc = accumulator<f32>(m, n, k);
  const auto un = static_cast<uint32_t>(n), uk = static_cast<uint32_t>(k);
  load(acc, c, 0u, un);
  load(fa, a, 0u, uk);
  load(fb, b, 0u, uk, Layout::Col);
  mma_scaled(acc, fa, fb, sa, 0u, uk / 32u, sb, 0u, uk / 32u);
  store(c, 0u, un, acc);
}
KILN_KERNEL_GENERIC(t_mma_scaled,
                    "a: rank=2, b: rank=2, sa: rank=2, sb: rank=2, c: rank=2, m = 16, n = 8, "
                    "k = 32",
                    f8e4m3, f8e5m2)
    .cube_dim(32);

}  // namespace

namespace kiln {
namespace {

TEST_CASE("mma_scaled: every shape and scale against a double reference, CPU = emulator",
          "[block_scaled]") {
  (void)kernels::builtin_names();
  std::vector<std::pair<std::string, Runtime>> devices;
  for (const char* name : {"cpu", "cuda-emu:sm_120a"}) {
    auto rt = Runtime::open(name);
    if (rt)
      devices.emplace_back(name, std::move(*rt));
    else
      std::printf("skipped on %s: %s\n", name, rt.error().message.c_str());
  }
  std::uniform_int_distribution<int> values(-6, 6), codes(100, 154);
  std::mt19937 rng(7);
  for (ir::ElemType t : {ir::ElemType::F8E4M3, ir::ElemType::F8E5M2})
    for (int m : {16, 32})
      for (int n : {8, 16, 32})
        for (int k : {32, 64}) {
          INFO(ir::elem_name(t) << " " << m << " x " << n << " x " << k);
          const int kb = k / 32;
          std::vector<uint8_t> a(m * k), b(n * k), sa(m * kb), sb(n * kb);
          std::vector<double> av(a.size()), bv(b.size());
          auto f8 = [&](double v) {
            return t == ir::ElemType::F8E4M3 ? kiln::e4m3_bits(v) : kiln::e5m2_bits(v);
          };
          for (size_t i = 0; i < a.size(); ++i) a[i] = f8(av[i] = values(rng) * 0.5);
          for (size_t i = 0; i < b.size(); ++i) b[i] = f8(bv[i] = values(rng) * 0.5);
          for (auto& s : sa) s = static_cast<uint8_t>(codes(rng));
          for (auto& s : sb) s = static_cast<uint8_t>(codes(rng));
          sa[0] = 0;              // 2^-127: row 0's first block
          sa[kb * 1] = 220;       // 2^93: row 1's first block
          sa[kb * (m - 1)] = 255;  // NaN: the last row
          std::vector<float> c0(m * n);
          for (size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>(i % 7) - 3.0f;
          std::vector<std::vector<float>> got;
          for (auto& [name, rt] : devices) {
            INFO("on " << name);
            auto ta = test::tensor_from(rt, t, a, {m, k});
            auto tb = test::tensor_from(rt, t, b, {n, k});
            auto tsa = test::tensor_from(rt, ir::ElemType::U8, sa, {m, kb});
            auto tsb = test::tensor_from(rt, ir::ElemType::U8, sb, {n, kb});
            auto tc = test::tensor_from(rt, ir::ElemType::F32, c0, {m, n});
            auto kern = test::kernel(rt, "t_mma_scaled");
            KILN_REQUIRE_OK(rt.launch(kern, 1, 32, ta, tb, tsa, tsb, tc, m, n, k));
            KILN_REQUIRE_OK(rt.sync());
            got.push_back(test::to_host<float>(tc));
            const auto& c = got.back();
            for (int i = 0; i < m; ++i)
              for (int j = 0; j < n; ++j) {
                double want = c0[i * n + j], mag = std::fabs(want);
                bool nan = false;
                for (int kk = 0; kk < k; ++kk) {
                  const int ea = sa[i * kb + kk / 32], eb = sb[j * kb + kk / 32];
                  nan = nan || ea == 255 || eb == 255;
                  const double p = av[i * k + kk] * bv[j * k + kk] * std::ldexp(1.0, ea + eb - 254);
                  want += p;
                  mag += std::fabs(p);
                }
                INFO("C(" << i << ", " << j << ") = " << c[i * n + j] << ", want " << want);
                if (nan)
                  REQUIRE(std::isnan(c[i * n + j]));
                else
                  REQUIRE(std::fabs(c[i * n + j] - want) <= 1e-6 * mag + 1e-30);
              }
          }
          if (got.size() == 2)  // the same sums in the same order: the same bits
            REQUIRE(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4) == 0);
        }
}

TEST_CASE("matmul_mx against its reference on the CPU and the emulator", "[block_scaled]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu:sm_120a"}) {
    auto rt = Runtime::open(device);
    if (!rt) {
      std::printf("skipped on %s: %s\n", device, rt.error().message.c_str());
      continue;
    }
    for (const char* dtype : {"f8e4m3", "f8e5m2"}) {
      INFO(device << ", " << dtype);
      kernels::RunConfig config;
      config.dtypes["a"] = dtype;
      config.shapes["a"] = {64, 128};
      config.shapes["b"] = {96, 128};
      config.repeat = 0;
      auto r = kernels::run(*rt, "matmul_mx", config);
      INFO((r.ok() ? std::string() : r.error().message));
      REQUIRE(r.ok());
      CHECK(r->passed);
    }
  }
}

}  // namespace
}  // namespace kiln
