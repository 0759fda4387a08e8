// matmul_mx: C = (A * SA) (B * SB)^T for MX fp8 (OCP microscaling) matrices with sm_120a's
// block-scaled tensor-core multiply (mma.sync kind::mxf8f6f4.block_scale). a is M x K and b is
// N x K (B transposed), both f8e4m3 or f8e5m2; sa (M x K/32) and sb (N x K/32) hold one ue8m0
// scale code per 32 elements of a row (e: 2^(e - 127)); c is M x N f32. Each cube is one plane
// and owns a 32 x 32 tile of C; per 64 k it loads the tiles of A and B into fragments and
// multiplies them with their scales. M and N are multiples of 32 and K of 64 (the scale
// matrices cover whole tiles).
// It runs where has_mma_scaled() holds: sm_120a, the CPU and the emulator as cuda-emu:sm_120a.
#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

template <class T>
void matmul_mx(Tensor<const T> a, Tensor<const T> b, Tensor<const u8> sa, Tensor<const u8> sb,
               Tensor<f32> c) {
  if (!require_mma_scaled()) return;  // sm_120a, the CPU, cuda-emu:sm_120a
  u32 m = a.shape(0), k = a.shape(1), n = b.shape(0), kb = k / 32u;
  assert_(b.shape(1) == k && c.shape(0) == m && c.shape(1) == n && sa.shape(0) == m &&
              sb.shape(0) == n && sa.shape(1) == kb && sb.shape(1) == kb,
          "a must be M x K, b N x K, sa M x K/32, sb N x K/32 and c M x N");
  assert_(m % 32u == 0u && n % 32u == 0u && k % 64u == 0u,
          "M and N must be multiples of 32 and K of 64");
  auto fa = matrix_a<T>(32, 32, 64);
  auto fb = matrix_b<T>(32, 32, 64);
  auto acc = accumulator<f32>(32, 32, 64);
  u32 row0 = cube_pos_y() * 32u, col0 = cube_pos_x() * 32u;
  fill(acc, 0.0f);
  for_range(0u, k, 64u, [&](u32 k0) {
    load(fa, a, row0 * k + k0, k);
    load(fb, b, col0 * k + k0, k, Layout::Col);  // element (kk, j) of B is b[j][kk]
    mma_scaled(acc, fa, fb, sa, row0 * kb + k0 / 32u, kb, sb, col0 * kb + k0 / 32u, kb);
  });
  store(c, row0 * n + col0, n, acc);
}
KILN_KERNEL_GENERIC(matmul_mx, "a: rank=2, b: rank=2, sa: rank=2, sb: rank=2, c: rank=2", f8e4m3,
                    f8e5m2)
    .cube_dim(32)
    .describe(
        "C = (A * SA) (B * SB)^T for MX fp8 with block-scaled mma (sm_120a; the CPU and "
        "cuda-emu:sm_120a run it too)");

KILN_RUN(matmul_mx)
    .shape("a", {160, 256})
    .shape("b", {96, 256})  // N x K
    .shape("sa",
           [](const kiln::kernels::RunData& d) {
             return std::vector<int64_t>{d.dim("a", 0), d.dim("a", 1) / 32};
           })
    .shape("sb",
           [](const kiln::kernels::RunData& d) {
             return std::vector<int64_t>{d.dim("b", 0), d.dim("b", 1) / 32};
           })
    .shape("c",
           [](const kiln::kernels::RunData& d) {
             return std::vector<int64_t>{d.dim("a", 0), d.dim("b", 0)};
           })
    .values("a", 0, 3)
    .values("b", 0, 3)
    .values("sa", 120, 134)  // scales 2^-7 .. 2^7
    .values("sb", 120, 134)
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("c", 1), 32),
                        kiln::kernels::ceil_div(d.dim("c", 0), 32));
    })
    .gpu_arch("sm_120a")
    .tolerance(1e-5, 1e-3)
    .flops(kiln::kernels::matmul_flops)
    .reference([](kiln::kernels::RunData& d) {
      const auto m = static_cast<size_t>(d.dim("c", 0)), n = static_cast<size_t>(d.dim("c", 1));
      const auto k = static_cast<size_t>(d.dim("a", 1)), kb = k / 32;
      const auto& a = d["a"];
      const auto& b = d["b"];
      const auto& sa = d["sa"];
      const auto& sb = d["sb"];
      auto& c = d["c"];
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (size_t kk = 0; kk < k; ++kk)
            s += a[i * k + kk] * std::ldexp(1.0, static_cast<int>(sa[i * kb + kk / 32]) - 127) *
                 b[j * k + kk] * std::ldexp(1.0, static_cast<int>(sb[j * kb + kk / 32]) - 127);
          c[i * n + j] = s;
        }
    });
