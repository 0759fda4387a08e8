// tcgen05 on the CPU (docs/dsl.md "Tensor memory and tcgen05"): a kernel that uses every
// tensor-memory op (mbarrier, allocation, descriptors, multiplies that write and accumulate,
// commit, wait on alternating phases, the copy out, the free) gives the exact product of small
// integers. matmul_tcgen05 is tested on the CPU and the emulator in tests/kernels/test_tcgen05.cpp.
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "tests/compiler/cpu/cpu_test_util.h"

using namespace kiln::dsl;
namespace test = kiln::test;
using kiln::HostArg;
using kiln::TensorView;

namespace {

// C (128 x 32) = A (128 x 64) * B^T (B: 32 x 64), in `rounds` rounds of k through one tile of
// shared memory each, swizzle 64 (one k step of 16 is 32 bytes: two steps per 64-byte row).
void t_tcgen05(Tensor<const bf16> a, Tensor<const bf16> b, Tensor<f32> c, int rounds) {
  const uint32_t kc = 64 / static_cast<uint32_t>(rounds);
  auto as = shared_array<bf16>(128 * 64);
  auto bs = shared_array<bf16>(32 * 64);
  auto cs = shared_array<f32>(128 * 32);
  auto bar = shared_array<u64>(2);
  mbarrier_init(bar, 1u);
  u32 d = tmem_alloc(64);
  u32 col = d + 32u;  // the upper 32 of the 64 columns
  for (int r = 0; r < rounds; ++r) {
    const uint32_t k0 = kc * static_cast<uint32_t>(r);
    for_range(unit_pos(), 128u * kc, 128u, [&](u32 e) {
      u32 row = e / kc, kk = e % kc;
      as[wgmma_tile_index<bf16>(Swizzle::B64, 128, row, kk)] = a[row * 64u + k0 + kk];
    });
    for_range(unit_pos(), 32u * kc, 128u, [&](u32 e) {
      u32 row = e / kc, kk = e % kc;
      bs[wgmma_tile_index<bf16>(Swizzle::B64, 32, row, kk)] = b[row * 64u + k0 + kk];
    });
    sync_cube();
    for (uint32_t s = 0; s < kc / 16; ++s) {
      auto ad = tcgen05_tile_desc(as, 0u, 128, Swizzle::B64, u32(s));
      auto bd = tcgen05_tile_desc(bs, 0u, 32, Swizzle::B64, u32(s));
      tcgen05_mma<bf16>(col, ad, bd, 32, r > 0 || s > 0);
    }
    tcgen05_commit(bar, 1u);
    mbarrier_wait(bar, 1u, static_cast<uint32_t>(r % 2));
  }
  tmem_load(cs, 0u, col, 32);
  tmem_free(d, 64);
  for_range(unit_pos(), 128u * 32u, 128u, [&](u32 e) { c[e] = cs[e]; });
}
KILN_KERNEL(t_tcgen05, "a: rank=2, b: rank=2, c: rank=2, rounds = 1").cube_dim(128);

}  // namespace

TEST_CASE("tcgen05 on the CPU: every tensor-memory op, one to four rounds of k",
          "[cpu][matrix][tcgen05]") {
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<uint16_t> a(128 * 64), b(32 * 64);
  std::vector<int> av(a.size()), bv(b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = kiln::bf16_bits(av[i] = d(test::rng()));
  for (size_t i = 0; i < b.size(); ++i) b[i] = kiln::bf16_bits(bv[i] = d(test::rng()));
  for (int rounds : {1, 2, 4}) {
    INFO(rounds << " rounds");
    kiln::dsl::SpecOptions o;
    o.set["rounds"] = std::to_string(rounds);
    auto k = test::compile_kernel("t_tcgen05", o);
    std::vector<float> c(128 * 32, -1.0f);
    std::vector<HostArg> args{TensorView(a.data(), {128, 64}), TensorView(b.data(), {32, 64}),
                              TensorView(c.data(), {128, 32})};
    test::run(*k, {1, 1, 1}, args);
    for (int i = 0; i < 128; ++i)
      for (int j = 0; j < 32; ++j) {
        int want = 0;
        for (int kk = 0; kk < 64; ++kk) want += av[i * 64 + kk] * bv[j * 64 + kk];
        INFO("C(" << i << ", " << j << ")");
        REQUIRE(c[i * 32 + j] == static_cast<float>(want));
      }
  }
}

namespace {

// tmem_read: C (two copies of 128 x 32, one per half of a 256-unit cube) = A (128 x 64) * B^T (B:
// 32 x 64) read from tensor memory into registers, `lanes` columns at a time; unit u reads row
// u % 128, at the address of the allocation plus the column.
void t_tmem_read(Tensor<const bf16> a, Tensor<const bf16> b, Tensor<f32> c, int lanes) {
  auto as = shared_array<bf16>(128 * 64);
  auto bs = shared_array<bf16>(32 * 64);
  auto bar = shared_array<u64>(1);
  mbarrier_init(bar, 0u);
  u32 d = tmem_alloc(64);
  for_range(unit_pos(), 128u * 64u, 256u, [&](u32 e) {
    as[wgmma_tile_index<bf16>(Swizzle::B128, 128, e / 64u, e % 64u)] = a[e];
  });
  for_range(unit_pos(), 32u * 64u, 256u,
            [&](u32 e) { bs[wgmma_tile_index<bf16>(Swizzle::B128, 32, e / 64u, e % 64u)] = b[e]; });
  sync_cube();
  for (uint32_t s = 0; s < 4; ++s)
    tcgen05_mma<bf16>(d + 32u, tcgen05_tile_desc(as, 0u, 128, Swizzle::B128, u32(s)),
                      tcgen05_tile_desc(bs, 0u, 32, Swizzle::B128, u32(s)), 32, s > 0);
  tcgen05_commit(bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  for (int col = 0; col < 32; col += lanes) {
    f32 x = tmem_read<f32>(d, u32(32 + col), lanes);
    for (int j = 0; j < lanes; ++j)
      c[unit_pos() * 32u + u32(col + j)] = lanes == 1 ? x : extract(x, j);
  }
  tmem_free(d, 64);
}
KILN_KERNEL(t_tmem_read, "a: rank=2, b: rank=2, c: rank=2, lanes = 1").cube_dim(256);

}  // namespace

TEST_CASE("tcgen05 on the CPU: tmem_read gives each unit its row, 1 to 16 columns at a time",
          "[cpu][matrix][tcgen05]") {
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<uint16_t> a(128 * 64), b(32 * 64);
  std::vector<int> av(a.size()), bv(b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = kiln::bf16_bits(av[i] = d(test::rng()));
  for (size_t i = 0; i < b.size(); ++i) b[i] = kiln::bf16_bits(bv[i] = d(test::rng()));
  for (int lanes : {1, 2, 4, 8, 16}) {
    INFO(lanes << " lanes");
    kiln::dsl::SpecOptions o;
    o.set["lanes"] = std::to_string(lanes);
    auto k = test::compile_kernel("t_tmem_read", o);
    std::vector<float> c(256 * 32, -1.0f);
    std::vector<HostArg> args{TensorView(a.data(), {128, 64}), TensorView(b.data(), {32, 64}),
                              TensorView(c.data(), {256, 32})};
    test::run(*k, {1, 1, 1}, args);
    for (int u = 0; u < 256; ++u)
      for (int j = 0; j < 32; ++j) {
        const int i = u % 128;
        int want = 0;
        for (int kk = 0; kk < 64; ++kk) want += av[i * 64 + kk] * bv[j * 64 + kk];
        INFO("unit " << u << ", column " << j);
        REQUIRE(c[u * 32 + j] == static_cast<float>(want));
      }
  }
}
