// Warpgroup multiplies (wgmma, docs/dsl.md "Warpgroup multiplies") against a double-precision
// reference: every input type, every swizzle of kiln's shared-memory tile layout, n from 8 to
// 256, two warpgroups per cube, edges of the matrices that are no multiple of a tile. Built into
// test_cpu (the CPU runs each plane's multiply in kiln_rt_wgmma) and test_gpu (the CUDA emulator
// runs wgmma as the PTX ISA defines it, reading shared memory through the descriptors; an
// sm_90a GPU runs the instruction).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "tests/compiler/cpu/cpu_test_util.h"

using namespace kiln::dsl;
namespace ir = kiln::ir;
namespace test = kiln::test;
namespace dsl = kiln::dsl;
using kiln::HostArg;
using kiln::TensorView;

namespace {

constexpr int kGroups = 2;  // warpgroups per cube, stacked in m

// C (M x N) = A (M x K) * B^T, b holding B^T (N x K): both operands K-major, as wgmma reads them.
// Each warpgroup owns a 64 x n tile of C; per round of k, the cube stages its A tiles and the B
// tile in shared memory (kiln's layout for `swizzle`), then each warpgroup multiplies k-step by
// k-step. With `pending`, a round's multiplies are waited for one round later.
template <class T>
void t_wgmma(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, int n, int swizzle,
             int rounds_per_row) {
  using Acc = mma_acc_t<T>;
  const int ks = mma_k_step<T>();
  const Swizzle sw = static_cast<Swizzle>(swizzle);
  // k columns per round: a whole swizzle row (W bytes), or two steps without swizzle.
  const int steps = swizzle ? swizzle / 32 * rounds_per_row : 2 * rounds_per_row;
  const auto kc = static_cast<uint32_t>(ks * steps), un = static_cast<uint32_t>(n);
  auto acc = accumulator<Acc>(16, n, ks);
  auto as = shared_array<T>(kGroups * 64 * kc);
  auto bs = shared_array<T>(un * kc);
  u32 M = a.shape(0), K = a.shape(1), N = b.shape(0);
  u32 wg = plane_pos() / 4u, p4 = plane_pos() % 4u;
  u32 mrow0 = cube_pos_y() * (64u * kGroups), col0 = cube_pos_x() * un;
  fill(acc, Acc(0));
  for_range(0u, K, kc, [&](u32 k0) {
    for_range(unit_pos(), kGroups * 64u * kc, 128u * kGroups, [&](u32 e) {
      u32 r = e / kc, kk = e % kc, row = mrow0 + r, col = k0 + kk;
      u32 g = r / 64u;
      as[g * (64u * kc) + wgmma_tile_index<T>(sw, 64, r % 64u, kk)] =
          select(row < M && col < K, a[min(row * K + col, a.len() - 1u)], T(0));
    });
    for_range(unit_pos(), un * kc, 128u * kGroups, [&](u32 e) {
      u32 r = e / kc, kk = e % kc, row = col0 + r, col = k0 + kk;
      bs[wgmma_tile_index<T>(sw, n, r, kk)] =
          select(row < N && col < K, b[min(row * K + col, b.len() - 1u)], T(0));
    });
    sync_cube();
    wgmma_fence();
    for (int s = 0; s < steps; ++s)
      wgmma<T>(acc, wgmma_tile_desc(as, wg * (64u * kc), 64, sw, static_cast<uint32_t>(s)),
               wgmma_tile_desc(bs, 0u, n, sw, static_cast<uint32_t>(s)));
    wgmma_commit();
    wgmma_wait(0);
    sync_cube();
  });
  u32 row0 = mrow0 + wg * 64u + 16u * p4;
  u32 rows = select(row0 < M, M - row0, 0u), cols = select(col0 < N, N - col0, 0u);
  store(c, row0 * N + col0, N, rows, cols, acc);
}
KILN_KERNEL_GENERIC(t_wgmma,
                    "a: rank=2, b: rank=2, c: rank=2, n = 64, swizzle = 128, rounds_per_row = 1",
                    f16, bf16, f32, i8, u8, f8e4m3, f8e5m2)
    .cube_dim(128 * kGroups);

// Host storage of an element type, filled from doubles and read back as doubles.
struct Buffer {
  ir::ElemType type;
  std::vector<uint8_t> bytes;
  size_t n;
  Buffer(ir::ElemType t, size_t count) : type(t), bytes(count * ir::elem_bytes(t)), n(count) {}
  void set(size_t i, double v) {
    if (type == ir::ElemType::F16 || type == ir::ElemType::BF16) {
      const uint16_t h = type == ir::ElemType::F16 ? kiln::f16_bits(v) : kiln::bf16_bits(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else if (type == ir::ElemType::F32) {
      const float f = static_cast<float>(v);
      std::memcpy(&bytes[i * 4], &f, 4);
    } else if (type == ir::ElemType::I32) {
      const auto x = static_cast<int32_t>(v);
      std::memcpy(&bytes[i * 4], &x, 4);
    } else if (type == ir::ElemType::F8E4M3) {
      bytes[i] = kiln::e4m3_bits(v);
    } else if (type == ir::ElemType::F8E5M2) {
      bytes[i] = kiln::e5m2_bits(v);
    } else {
      bytes[i] = static_cast<uint8_t>(static_cast<int>(v));
    }
  }
  // What the tensor core multiplies: tf32 ignores the 13 low mantissa bits of an f32.
  double get(size_t i) const {
    if (type == ir::ElemType::F16 || type == ir::ElemType::BF16) {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      return type == ir::ElemType::F16 ? kiln::f16_value(h) : kiln::bf16_value(h);
    }
    if (type == ir::ElemType::F32 || type == ir::ElemType::I32) {
      uint32_t u;
      std::memcpy(&u, &bytes[i * 4], 4);
      if (type == ir::ElemType::I32) return static_cast<int32_t>(u);
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    if (type == ir::ElemType::F8E4M3) return kiln::e4m3_value(bytes[i]);
    if (type == ir::ElemType::F8E5M2) return kiln::e5m2_value(bytes[i]);
    return type == ir::ElemType::I8 ? static_cast<int8_t>(bytes[i]) : bytes[i];
  }
  double as_tf32(size_t i) const {
    uint32_t u;
    std::memcpy(&u, &bytes[i * 4], 4);
    u &= 0xffffe000u;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  TensorView view(int64_t rows, int64_t cols) { return TensorView(bytes.data(), {rows, cols}); }
};

void check_wgmma(const char* dtype, int n, int swizzle, int rounds, int64_t M, int64_t N,
                 int64_t K) {
  const ir::ElemType t = *ir::parse_elem_type(dtype);
  const bool ints = ir::is_int(t);
  const ir::ElemType ct = ints ? ir::ElemType::I32 : ir::ElemType::F32;
  INFO(dtype << " n " << n << " swizzle " << swizzle << " rounds " << rounds << ", M " << M << " N "
             << N << " K " << K);
  dsl::SpecOptions o;
  o.dtype["a"] = dtype;
  o.dtype["b"] = dtype;
  o.set["n"] = std::to_string(n);
  o.set["swizzle"] = std::to_string(swizzle);
  o.set["rounds_per_row"] = std::to_string(rounds);
  auto kern = test::compile_kernel("t_wgmma", o);
  Buffer a(t, static_cast<size_t>(M * K)), b(t, static_cast<size_t>(N * K)),
      c(ct, static_cast<size_t>(M * N));
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::uniform_int_distribution<int> di(t == ir::ElemType::U8 ? 0 : -128,
                                        t == ir::ElemType::U8 ? 255 : 127);
  for (Buffer* x : {&a, &b})
    for (size_t i = 0; i < x->n; ++i) x->set(i, ints ? di(test::rng()) : d(test::rng()));
  for (size_t i = 0; i < c.n; ++i) c.set(i, 1000);  // every element is written
  auto el = [&](const Buffer& x, size_t i) {
    return t == ir::ElemType::F32 ? x.as_tf32(i) : x.get(i);
  };
  std::vector<HostArg> args{a.view(M, K), b.view(N, K), c.view(M, N)};
  const auto cubes_n = static_cast<uint32_t>((N + n - 1) / n);
  const auto cubes_m = static_cast<uint32_t>((M + 64 * kGroups - 1) / (64 * kGroups));
  test::run(*kern, {cubes_n, cubes_m, 1}, args);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p =
            el(a, static_cast<size_t>(i * K + k)) * el(b, static_cast<size_t>(j * K + k));
        want += p;
        mag += std::fabs(p);
      }
      if (ints) want = static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(want)));
      const double got = c.get(static_cast<size_t>(i * N + j));
      INFO("C(" << i << ", " << j << ") = " << got << ", want " << want);
      REQUIRE(std::fabs(got - want) <= (ints ? 0.0 : 1e-5 * mag + 1e-6));
    }
}

}  // namespace

TEST_CASE("wgmma: every input type and swizzle against a double reference",
          "[cpu][matrix][wgmma]") {
  for (const char* dtype : {"bf16", "f16", "f32", "i8", "u8", "f8e4m3", "f8e5m2"})
    for (int swizzle : {0, 32, 64, 128}) {
      // Edges that are no multiple of a tile; K over several rounds.
      const int n = std::string(dtype) == "i8" ? 48 : 32;
      check_wgmma(dtype, n, swizzle, 1, 64 * kGroups + 37, 2 * n - 5, 150);
    }
}

TEST_CASE("wgmma: n from 8 to 256", "[cpu][matrix][wgmma]") {
  for (int n : {8, 24, 64, 256}) check_wgmma("bf16", n, 128, 1, 100, n + 3, 64);
  check_wgmma("u8", 16, 64, 2, 70, 40, 300);
}

#ifndef KILN_TEST_CUDA
namespace {
// A B descriptor `b_base` elements into the last shared array: past the cube's shared memory
// when b_base is large enough.
void t_wgmma_past(Tensor<f32> c, u32 b_base) {
  auto acc = accumulator<f32>(16, 16, 16);
  auto as = shared_array<bf16>(64u * 16u);
  auto bs = shared_array<bf16>(16u * 16u);
  for_range(unit_pos(), 64u * 16u, 128u, [&](u32 e) { as[e] = bf16(1.0f); });
  for_range(unit_pos(), 16u * 16u, 128u, [&](u32 e) { bs[e] = bf16(2.0f); });
  sync_cube();
  fill(acc, 0.0f);
  wgmma_fence();
  wgmma<bf16>(acc, wgmma_tile_desc(as, 0u, 64, Swizzle::None, 0u),
              wgmma_tile_desc(bs, b_base, 16, Swizzle::None, 0u));
  wgmma_commit();
  wgmma_wait(0);
  store(c, (16u * plane_pos()) * 16u, 16u, acc);
}
KILN_KERNEL(t_wgmma_past, "c, b_base").cube_dim(128);
}  // namespace

TEST_CASE("wgmma: checked mode reports a descriptor past the shared memory",
          "[cpu][matrix][wgmma]") {
  const dsl::KernelDef* def = dsl::Registry::global().find("t_wgmma_past");
  REQUIRE(def);
  auto sel = dsl::select(*def, {});
  REQUIRE(sel.ok());
  auto k = dsl::trace(*def, *sel->inst, sel->request);
  REQUIRE(k.ok());
  auto lowered = kiln::backend::find("cpu")->prepare(*k);
  REQUIRE(lowered.ok());
  for (const bool checked : {false, true}) {
    kiln::cpu::CompileOptions o;
    o.target = test::host();
    o.checked = checked;
    auto kern = kiln::cpu::compile(*lowered, o);
    REQUIRE(kern.ok());
    // In bounds: every element is 16 products of 1 * 2.
    std::vector<float> c(64 * 16, -1.0f);
    auto ok = test::try_run(**kern, {1, 1, 1}, {test::tensor(c), test::scalar_u32(0)});
    INFO((ok.ok() ? std::string() : ok.error().message));
    REQUIRE(ok.ok());
    for (float x : c) REQUIRE(x == 32.0f);
    // 128 elements in, B's second column of core matrices starts where B's array, the last of
    // the arena, ends: it reads as zero, and a checked launch reports its first byte.
    auto past = test::try_run(**kern, {1, 1, 1}, {test::tensor(c), test::scalar_u32(128)});
    if (!checked) {
      REQUIRE(past.ok());
      continue;
    }
    REQUIRE(!past.ok());
    INFO(past.error().message);
    CHECK_THAT(past.error().message, Catch::Contains("wgmma.mma") &&
                                         Catch::Contains("shared memory") &&
                                         Catch::Matches(".*index ([0-9]+) is not below \\1 .*") &&
                                         Catch::Contains("tests/compiler/cpu/test_wgmma.cpp:"));
  }
}
#endif
