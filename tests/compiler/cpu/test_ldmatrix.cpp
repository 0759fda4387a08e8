// ldmatrix() (docs/dsl.md "Matrices"): fragments loaded from shared memory through ldmatrix give
// the same product as load() on the CPU and the emulator, for 16-bit inputs in both layouts and
// 8-bit ones with k contiguous; a tile whose rows are off 16 bytes is reported by the emulator at
// its line (a GPU would fault) and still loaded right.
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

// c (16 x 16) = A (16 x k) * B (k x 16), k = 32 (64 for 8-bit types), staged in shared memory:
// A row-major (stride k + 16 elements), B column-major when `b_col` (the same stride along k),
// else row-major (stride 32); `skew` moves both tiles one element off their 16-byte rows.
template <class T>
void t_ldmatrix(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, bool b_col,
                int skew) {
  using Acc = mma_acc_t<T>;
  constexpr int k = mma_k_step<T>() * 2 > 32 ? 64 : 32;
  auto fa = matrix_a<T>(16, 16, k);
  auto fb = matrix_b<T>(16, 16, k);
  auto acc = accumulator<Acc>(16, 16, k);
  const uint32_t as_stride = static_cast<uint32_t>(k) + 16u, bs_stride = b_col ? as_stride : 32u;
  auto as = shared_array<T>(16 * as_stride + 16);
  auto bs = shared_array<T>((b_col ? 16 : k) * bs_stride + 16);
  const auto off = static_cast<uint32_t>(skew);
  for_range(unit_pos(), 16u * static_cast<uint32_t>(k), 32u, [&](u32 e) {
    u32 r = e / static_cast<uint32_t>(k), kk = e % static_cast<uint32_t>(k);
    as[off + r * as_stride + kk] = a[e];
  });
  for_range(unit_pos(), 16u * static_cast<uint32_t>(k), 32u, [&](u32 e) {
    u32 kk = e / 16u, col = e % 16u;  // b is k x 16, row-major
    bs[off + (b_col ? col * bs_stride + kk : kk * bs_stride + col)] = b[e];
  });
  sync_cube();
  fill(acc, Acc(0));
  ldmatrix(fa, as, off, as_stride);  // LDMATRIX_A
  ldmatrix(fb, bs, off, bs_stride, b_col ? Layout::Col : Layout::Row);
  mma(acc, fa, fb);
  store(c, 0u, 16u, acc);
}
KILN_KERNEL_GENERIC(t_ldmatrix, "a: rank=2, b: rank=2, c: rank=2, b_col = true, skew = 0", f16,
                    bf16, i8, f8e4m3)
    .cube_dim(32);

}  // namespace

namespace kiln {
namespace {

using Catch::Contains;

TEST_CASE("ldmatrix() loads what load() does, on the CPU and the emulator", "[matrix][ldmatrix]") {
  (void)kernels::builtin_names();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> d(-3, 3);
  for (const char* device : {"cpu", "cuda-emu"}) {
    auto rt = Runtime::open(device);
    if (!rt) {
      std::printf("skipped on %s: %s\n", device, rt.error().message.c_str());
      continue;
    }
    for (ir::ElemType t : {ir::ElemType::F16, ir::ElemType::BF16, ir::ElemType::I8,
                           ir::ElemType::F8E4M3})
      for (bool b_col : {true, false}) {
        const bool bytes = ir::elem_bytes(t) == 1;
        if (bytes && !b_col) continue;  // 8-bit B must have k contiguous
        for (int skew : {0, 1}) {
          INFO(device << ", " << ir::elem_name(t) << (b_col ? ", B col" : ", B row") << ", skew "
                      << skew);
          const int k = bytes ? 64 : 32;
          std::vector<int> av(16 * k), bv(k * 16);
          for (auto& x : av) x = d(rng);
          for (auto& x : bv) x = d(rng);
          auto encode = [&](const std::vector<int>& v) {
            std::vector<uint8_t> out(v.size() * ir::elem_bytes(t));
            for (size_t i = 0; i < v.size(); ++i) {
              if (t == ir::ElemType::F16 || t == ir::ElemType::BF16) {
                const uint16_t h = t == ir::ElemType::F16 ? kiln::f16_bits(v[i]) : kiln::bf16_bits(v[i]);
                std::memcpy(&out[2 * i], &h, 2);
              } else {
                out[i] = t == ir::ElemType::I8 ? static_cast<uint8_t>(static_cast<int8_t>(v[i]))
                                               : kiln::e4m3_bits(v[i]);
              }
            }
            return out;
          };
          auto ta = test::tensor_from(*rt, t, encode(av), {16, k});
          auto tb = test::tensor_from(*rt, t, encode(bv), {k, 16});
          const ir::ElemType ct = t == ir::ElemType::I8 ? ir::ElemType::I32 : ir::ElemType::F32;
          auto tc = rt->empty(ct, {16, 16});
          REQUIRE(tc.ok());
          auto kern = test::kernel(*rt, "t_ldmatrix");
          KILN_REQUIRE_OK(rt->launch(kern, 1, 32, ta, tb, *tc, b_col, skew));
          Status st = rt->sync();
          const bool emu = std::string(device) == "cuda-emu";
          if (emu && skew) {
            REQUIRE_FALSE(st.ok());
            CHECK_THAT(st.error().message,
                       Contains(test::marker_loc("tests/compiler/cpu/test_ldmatrix.cpp",
                                                 "LDMATRIX_A") +
                                ": error: ldmatrix() of a tile whose rows"));
          } else {
            KILN_REQUIRE_OK(st);
          }
          std::vector<double> got(256);
          if (ct == ir::ElemType::I32) {
            auto h = test::to_host<int32_t>(*tc);
            for (int i = 0; i < 256; ++i) got[i] = h[i];
          } else {
            auto h = test::to_host<float>(*tc);
            for (int i = 0; i < 256; ++i) got[i] = h[i];
          }
          for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 16; ++j) {
              int want = 0;
              for (int kk = 0; kk < k; ++kk) want += av[i * k + kk] * bv[kk * 16 + j];
              INFO("C(" << i << ", " << j << ")");
              REQUIRE(got[i * 16 + j] == want);  // loaded right even when reported
            }
        }
      }
  }
}

}  // namespace
}  // namespace kiln
