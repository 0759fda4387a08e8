// MN-major operands of wgmma and tcgen05 (docs/dsl.md "Warpgroup multiplies"): A stored m-
// contiguous and B n-contiguous (the usual row-major K x N), laid out by
// wgmma_tile_index(..., Major::MN) for every swizzle, give the exact product on the CPU and the
// emulator, alone and mixed with K-major operands; MN-major 8-bit or tf32 inputs are a trace
// error at the line of the multiply.
#include <catch2/catch.hpp>

#include <random>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

namespace {

constexpr uint32_t kK = 32;  // two k-steps of 16

// Stages A (rows x 32, row-major in global memory) and B (32 x n, row-major) in shared memory,
// each in the major asked for.
template <class T>
void stage(Tensor<const T> a, Tensor<const T> b, const SharedArray<T>& as, const SharedArray<T>& bs,
           int rows, int n, Swizzle sw, Major am, Major bm, uint32_t units) {
  const auto ur = static_cast<uint32_t>(rows), un = static_cast<uint32_t>(n);
  for_range(unit_pos(), ur * kK, units, [&](u32 e) {
    u32 r = e / kK, kk = e % kK;
    as[wgmma_tile_index<T>(sw, rows, r, kk, am)] = a[e];
  });
  for_range(unit_pos(), kK * un, units, [&](u32 e) {
    u32 kk = e / un, c = e % un;
    bs[wgmma_tile_index<T>(sw, n, c, kk, bm)] = b[e];
  });
  sync_cube();
}

// c (64 x 64) = a (64 x 32) * b (32 x 64) by one warpgroup.
template <class T>
void t_wgmma_mn(Tensor<const T> a, Tensor<const T> b, Tensor<f32> c, int swizzle, bool a_mn,
                bool b_mn) {
  const Swizzle sw = static_cast<Swizzle>(swizzle);
  const Major am = a_mn ? Major::MN : Major::K, bm = b_mn ? Major::MN : Major::K;
  auto acc = accumulator<f32>(16, 64, 16);
  // A K-major tile with a swizzle of W bytes spans W / 2 of k: room for 64.
  auto as = shared_array<T>(64 * 64);
  auto bs = shared_array<T>(64 * 64);
  stage(a, b, as, bs, 64, 64, sw, am, bm, 128u);
  fill(acc, 0.0f);
  wgmma_fence();
  for (uint32_t s = 0; s < kK / 16; ++s)
    wgmma<T>(acc, wgmma_tile_desc(as, 0u, 64, sw, u32(s), am),
             wgmma_tile_desc(bs, 0u, 64, sw, u32(s), bm), am, bm);
  wgmma_commit();
  wgmma_wait(0);
  store(c, (16u * plane_pos()) * 64u, 64u, acc);
}
KILN_KERNEL_GENERIC(t_wgmma_mn,
                    "a: rank=2, b: rank=2, c: rank=2, swizzle = 128, a_mn = true, b_mn = true", f16,
                    bf16)
    .cube_dim(128);

// c (128 x 64) = a (128 x 32) * b (32 x 64) through tensor memory.
template <class T>
void t_tcgen05_mn(Tensor<const T> a, Tensor<const T> b, Tensor<f32> c, int swizzle, bool a_mn,
                  bool b_mn) {
  const Swizzle sw = static_cast<Swizzle>(swizzle);
  const Major am = a_mn ? Major::MN : Major::K, bm = b_mn ? Major::MN : Major::K;
  auto as = shared_array<T>(128 * 64);
  auto bs = shared_array<T>(64 * 64);
  auto cs = shared_array<f32>(128 * 64);
  auto bar = shared_array<u64>(1);
  mbarrier_init(bar, 0u);
  u32 d = tmem_alloc(64);
  stage(a, b, as, bs, 128, 64, sw, am, bm, 128u);
  for (uint32_t s = 0; s < kK / 16; ++s)
    tcgen05_mma<T>(d, tcgen05_tile_desc(as, 0u, 128, sw, u32(s), am),
                   tcgen05_tile_desc(bs, 0u, 64, sw, u32(s), bm), 64, s > 0, am, bm);
  tcgen05_commit(bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  tmem_load(cs, 0u, d, 64);
  tmem_free(d, 64);
  for_range(unit_pos(), 128u * 64u, 128u, [&](u32 e) { c[e] = cs[e]; });
}
KILN_KERNEL_GENERIC(t_tcgen05_mn,
                    "a: rank=2, b: rank=2, c: rank=2, swizzle = 128, a_mn = true, b_mn = true", f16,
                    bf16)
    .cube_dim(128);

// An 8-bit MN-major multiply: refused at trace time.
void t_wgmma_mn_i8(Tensor<i32> c) {
  auto acc = accumulator<i32>(16, 64, 32);
  auto bs = shared_array<i8>(64 * 32);
  fill(acc, 0);
  auto desc = wgmma_tile_desc(bs, 0u, 64, Swizzle::B128, 0u);
  wgmma<i8>(acc, desc, desc, Major::K, Major::MN);  // MN_I8
  store(c, 0u, 64u, acc);
}
KILN_KERNEL(t_wgmma_mn_i8, "c").cube_dim(128);

// An MN-major tile of 48 elements along n under a 128-byte swizzle (atoms of 64): refused.
void t_mn_extent(Tensor<f32> c) {
  auto acc = accumulator<f32>(16, 48, 16);
  auto bs = shared_array<bf16>(64 * 64);
  fill(acc, 0.0f);
  auto desc = wgmma_tile_desc(bs, 0u, 48, Swizzle::B128, 0u, Major::MN);  // MN_EXTENT
  wgmma<bf16>(acc, desc, desc, Major::MN, Major::MN);
  store(c, 0u, 48u, acc);
}
KILN_KERNEL(t_mn_extent, "c").cube_dim(128);

}  // namespace

namespace kiln {
namespace {

void check_mn(const char* device, const char* kernel, int rows) {
  auto rt = Runtime::open(device);
  if (!rt) {
    std::printf("skipped on %s: %s\n", device, rt.error().message.c_str());
    return;
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> d(-3, 3);
  for (ir::ElemType t : {ir::ElemType::BF16, ir::ElemType::F16})
    for (int swizzle : {0, 32, 64, 128})
      for (int majors : {1, 2, 3}) {
        const bool a_mn = majors & 1, b_mn = majors & 2;
        INFO(device << ", " << kernel << ", " << ir::elem_name(t) << ", swizzle " << swizzle
                    << ", A " << (a_mn ? "MN" : "K") << "-major, B " << (b_mn ? "MN" : "K")
                    << "-major");
        std::vector<int> av(static_cast<size_t>(rows) * kK), bv(kK * 64);
        for (auto& x : av) x = d(rng);
        for (auto& x : bv) x = d(rng);
        auto encode = [&](const std::vector<int>& v) {
          std::vector<uint8_t> out(v.size() * 2);
          for (size_t i = 0; i < v.size(); ++i) {
            const uint16_t h =
                t == ir::ElemType::F16 ? kiln::f16_bits(v[i]) : kiln::bf16_bits(v[i]);
            std::memcpy(&out[2 * i], &h, 2);
          }
          return out;
        };
        auto ta = test::tensor_from(*rt, t, encode(av), {rows, static_cast<int64_t>(kK)});
        auto tb = test::tensor_from(*rt, t, encode(bv), {static_cast<int64_t>(kK), 64});
        auto tc = rt->empty(ir::ElemType::F32, {rows, 64});
        REQUIRE(tc.ok());
        auto kern = test::kernel(*rt, kernel);
        KILN_REQUIRE_OK(rt->launch(kern, 1, 128, ta, tb, *tc, swizzle, a_mn, b_mn));
        KILN_REQUIRE_OK(rt->sync());
        auto got = test::to_host<float>(*tc);
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < 64; ++j) {
            int want = 0;
            for (uint32_t kk = 0; kk < kK; ++kk) want += av[i * kK + kk] * bv[kk * 64 + j];
            INFO("C(" << i << ", " << j << ")");
            REQUIRE(got[static_cast<size_t>(i * 64 + j)] == static_cast<float>(want));
          }
      }
}

TEST_CASE("MN-major wgmma operands, every swizzle, on the CPU and the emulator",
          "[matrix][wgmma]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu"}) check_mn(device, "t_wgmma_mn", 64);
}

TEST_CASE("MN-major tcgen05 operands, every swizzle, on the CPU and the emulator",
          "[matrix][tcgen05]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu:sm_100a"}) check_mn(device, "t_tcgen05_mn", 128);
}

TEST_CASE("an MN-major operand of 8-bit inputs is a trace error at its line", "[matrix][wgmma]") {
  auto r = test::trace_error("t_wgmma_mn_i8");
  CHECK_THAT(r, Catch::Contains(test::marker_loc("tests/compiler/cpu/test_mn_major.cpp", "MN_I8") +
                                ": error: wgmma reads MN-major operands of f16 or bf16 only, "
                                "not i8"));
}

TEST_CASE("an MN-major tile that is no whole number of atoms is a trace error at its line",
          "[matrix][wgmma]") {
  CHECK_THAT(test::trace_error("t_mn_extent"),
             Catch::Contains(test::marker_loc("tests/compiler/cpu/test_mn_major.cpp", "MN_EXTENT") +
                             ": error: an MN-major wgmma tile with swizzle 128 spans a multiple "
                             "of 64 elements along m or n, not 48"));
}

}  // namespace
}  // namespace kiln
