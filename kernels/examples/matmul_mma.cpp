// matmul_mma: C = A * B (or C += A * B) on matrix fragments: one source for the CPU (register-
// blocked SIMD), the CUDA emulator and every GPU target (mma.sync tensor cores). Each plane owns
// an accumulator tile of frag_m x frag_n; a cube holds planes_m x planes_n planes; the k loop
// loads a tile of A and of B per step (k_steps instruction steps of k: 16 for f16/bf16, 8 for
// f32 multiplied as tf32, 32 for i8/u8 and the f8 types) and multiplies them into the
// accumulator (f32 for float inputs, i32 for integer ones). Tiles at the matrix edges load and
// store only the elements inside the matrix, so any M, N and K work.
// On a target without these multiplies (has_mma, asked at trace time) it takes a plain path.
// With b_transposed, b holds B^T (N x K, row-major), read through a column-major tile. With
// stage_shared, each step's tiles of the cube go through shared memory first, where the planes
// share them (on a GPU, ldmatrix() loads 16- and 8-bit fragments from there). With stages of 2
// to 4 as well, the tiles reach shared memory through a ring of that many stages filled by
// per-unit asynchronous copies (cp.async, sm_80 and later): the copies of step r + stages - 1
// are issued while step r multiplies. cp.async moves 16 bytes at a time, so the ring needs rows
// (K and N, and both row strides) of a multiple of 16 bytes and B not transposed; other shapes
// take the synchronous staging at run time.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "kernels/run.h"

using namespace kiln::dsl;

// Longer than 150 lines on purpose: a kernel is one algorithm read from top to bottom (tiles,
// the copy ring, the multiply loop, the store), each phase marked; its helpers would be traced
// inline anyway.
template <class T>
void matmul_mma(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, int frag_m,
                int frag_n, int k_steps, int planes_m, int planes_n, bool b_transposed,
                bool accumulate, bool stage_shared, int stages) {
  using Acc = mma_acc_t<T>;
  const int ks = mma_k_step<T>() * k_steps;
  if (stages > 1 && !stage_shared) {
    TraceContext::current().fail(SrcLoc::current(),
                                 fmt::format("stages = {} rings tiles through shared memory; set "
                                             "stage_shared = true too (or leave stages at 1)",
                                             stages));
    return;
  }
  u32 m = a.shape(0), k = a.shape(1), n = c.shape(1);
  u32 lda = a.stride(0), ldb = b.stride(0), ldc = c.stride(0);
  // Shapes that do not fit together are an error at sync that names this line.
  assert_(
      b.shape(b_transposed ? 1 : 0) == k && b.shape(b_transposed ? 0 : 1) == n && c.shape(0) == m,
      "a must be M x K, b K x N (N x K with b_transposed) and c M x N");
  if (!has_mma<T>(frag_m, frag_n, ks)) {
    // The target has no such matrix multiply (a GPU before sm_80): each unit computes elements
    // of the cube's tile with plain multiply-adds, reading f32 inputs as tf32 as a tensor core
    // would, so both paths compute the same products.
    const uint32_t tm = static_cast<uint32_t>(planes_m * frag_m),
                   tn = static_cast<uint32_t>(planes_n * frag_n),
                   units = static_cast<uint32_t>(32 * planes_m * planes_n);
    auto input = [](const Val<host_of_t<T>>& x) -> Val<Acc> {
      if constexpr (std::is_same_v<host_of_t<T>, float>) {
        u32 bits = bitcast<uint32_t>(x);
        u32 rounded = (bits + 0x1000u) & 0xffffe000u;
        return bitcast<float>(select((bits & 0x7f800000u) == 0x7f800000u, bits, rounded));
      } else {
        return cast<Acc>(x);
      }
    };
    for_range(unit_pos(), tm * tn, units, [&](u32 e) {
      u32 row = cube_pos_y() * tm + e / tn, col = cube_pos_x() * tn + e % tn;
      if_(row < m && col < n, [&] {
        Var<Acc> sum = Acc(0);
        if (accumulate) sum = c[row * ldc + col];
        for_range(0u, k, 1u, [&](u32 kk) {
          Val<host_of_t<T>> x = a[row * lda + kk];
          Val<host_of_t<T>> y = b_transposed ? b[col * ldb + kk] : b[kk * ldb + col];
          sum += input(x) * input(y);
        });
        c[row * ldc + col] = sum;
      });
    });
    return;
  }
  auto fa = matrix_a<T>(frag_m, frag_n, ks);
  auto fb = matrix_b<T>(frag_m, frag_n, ks);
  auto acc = accumulator<Acc>(frag_m, frag_n, ks);
  u32 p = plane_pos();
  u32 row0 = (cube_pos_y() * planes_m + p / planes_n) * frag_m;
  u32 col0 = (cube_pos_x() * planes_n + p % planes_n) * frag_n;
  // How many rows and columns of this plane's tile are inside C (none past the edge).
  u32 rows = select(row0 < m, m - row0, 0u), cols = select(col0 < n, n - col0, 0u);
  if (accumulate)
    load(acc, c, row0 * ldc + col0, ldc, rows, cols);
  else
    fill(acc, Acc(0));
  if (!stage_shared) {
    // Each plane reads its tiles straight from the matrices.
    for_range(0u, k, static_cast<uint32_t>(ks), [&](u32 k0) {
      u32 left = k - k0;
      load(fa, a, row0 * lda + k0, lda, rows, left);
      if (b_transposed)
        load(fb, b, col0 * ldb + k0, ldb, left, cols, Layout::Col);
      else
        load(fb, b, k0 * ldb + col0, ldb, left, cols);
      mma(acc, fa, fb);
    });
  } else {
    // The cube's rows of A and columns of B for each step go through shared memory, copied by
    // all its units (zero outside the matrices); the planes load their tiles from there (on a
    // GPU, 16-bit tiles with ldmatrix).
    const uint32_t tm = static_cast<uint32_t>(planes_m * frag_m),
                   tn = static_cast<uint32_t>(planes_n * frag_n), uks = static_cast<uint32_t>(ks),
                   units = static_cast<uint32_t>(32 * planes_m * planes_n);
    // cp.async's 16 bytes are `chunk` elements, which the tiles' rows must hold whole.
    const uint32_t chunk = 16u / static_cast<uint32_t>(sizeof(host_of_t<T>));
    const bool ring =
        stages > 1 && has_cp_async() && !b_transposed && uks % chunk == 0 && tn % chunk == 0;
    const uint32_t ns = ring ? static_cast<uint32_t>(stages) : 1u;
    auto as = shared_array<T>(ns * tm * uks);
    auto bs = shared_array<T>(ns * uks * tn);
    u32 crow = cube_pos_y() * tm, ccol = cube_pos_x() * tn;
    // The planes' multiply of one step, from the tiles in stage `st`. Whole tiles whose rows
    // start on 16 bytes (shared arrays and stages do, and a row holds a multiple of 16 elements
    // of A, of frag_n of B): ldmatrix() takes them without the run-time test load() makes, where
    // it can (8-bit B tiles here have n, not k, contiguous).
    auto multiply = [&](Val<uint32_t> st) {
      const u32 ai = st * (tm * uks) + (p / planes_n) * static_cast<uint32_t>(frag_m) * uks,
                bi = st * (uks * tn) + (p % planes_n) * static_cast<uint32_t>(frag_n);
      constexpr bool narrow = sizeof(host_of_t<T>) <= 2;
      if (narrow)
        ldmatrix(fa, as, ai, uks);
      else
        load(fa, as, ai, uks);
      if (sizeof(host_of_t<T>) == 2 && frag_n % 16 == 0)
        ldmatrix(fb, bs, bi, tn);
      else
        load(fb, bs, bi, tn);
      mma(acc, fa, fb);
    };
    // Synchronous staging into stage 0: loads, stores and two barriers a step.
    auto staged = [&] {
      for_range(0u, k, uks, [&](u32 k0) {
        for_range(unit_pos(), tm * uks, units, [&](u32 e) {
          u32 r = e / uks, kk = e % uks;
          u32 idx = (crow + r) * lda + k0 + kk;
          as[e] = select(crow + r < m && k0 + kk < k, a[min(idx, a.len() - 1u)], T(0));
        });
        for_range(unit_pos(), uks * tn, units, [&](u32 e) {
          u32 kk = e / tn, j = e % tn;
          u32 idx = b_transposed ? (ccol + j) * ldb + k0 + kk : (k0 + kk) * ldb + ccol + j;
          bs[e] = select(k0 + kk < k && ccol + j < n, b[min(idx, b.len() - 1u)], T(0));
        });
        sync_cube();
        multiply(Val<uint32_t>(0u));
        sync_cube();
      });
    };
    if (!ring) {
      staged();
    } else {
      // Step q's tiles into stage st, 16 bytes per copy, zeros outside the matrices.
      auto issue = [&](Val<uint32_t> q, Val<uint32_t> st) {
        u32 k0 = q * uks;
        const uint32_t a_chunks = uks / chunk, b_chunks = tn / chunk;
        for_range(unit_pos(), tm * a_chunks, units, [&](u32 e) {
          u32 r = e / a_chunks, kk = (e % a_chunks) * chunk;
          Val<bool> inside = crow + r < m && k0 + kk < k;
          copy_async(as, st * (tm * uks) + r * uks + kk, a,
                     select(inside, (crow + r) * lda + k0 + kk, 0u), inside);
        });
        for_range(unit_pos(), uks * b_chunks, units, [&](u32 e) {
          u32 kk = e / b_chunks, j = (e % b_chunks) * chunk;
          Val<bool> inside = k0 + kk < k && ccol + j < n;
          copy_async(bs, st * (uks * tn) + kk * tn + j, b,
                     select(inside, (k0 + kk) * ldb + ccol + j, 0u), inside);
        });
      };
      // Whole 16-byte rows, starting on 16 bytes: K, N and the row strides a multiple of chunk.
      Val<bool> whole =
          k % chunk == 0u && n % chunk == 0u && lda % chunk == 0u && ldb % chunk == 0u;
      if_(whole, [&] {
        u32 steps = (k + (uks - 1u)) / uks;
        // Steps 0 .. stages - 2 first, a group each (empty past the last step).
        for (uint32_t q = 0; q + 1 < ns; ++q) {
          if_(u32(q) < steps, [&] { issue(Val<uint32_t>(q), Val<uint32_t>(q)); });
          copy_async_commit();
        }
        for_range(0u, steps, 1u, [&](u32 r) {
          // This unit's copies of step r have landed (one group a step), and every unit's
          // after the barrier, which also means every plane is done with step r - 1's stage.
          copy_async_wait(static_cast<int>(ns) - 2);
          sync_cube();
          multiply(r % ns);
          u32 q = r + (ns - 1u);
          if_(q < steps, [&] { issue(q, q % ns); });
          copy_async_commit();
        });
      }).else_([&] { staged(); });
    }
  }
  store(c, row0 * ldc + col0, ldc, rows, cols, acc);
}
KILN_KERNEL_GENERIC(
    matmul_mma,
    "a: rank=2, b: rank=2, c: rank=2, frag_m = 32 in 16..32, "
    "frag_n = 32 in 8..32, k_steps = 2 in 1..2, planes_m = 2 in 1..8, planes_n = 2 in 1..8, "
    "b_transposed = false, accumulate = false, stage_shared = false, stages = 1 in 1..4",
    f16, bf16, f32, i8, u8, f8e4m3, f8e5m2)
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(32 * c.integer("planes_m") * c.integer("planes_n")), 1, 1};
    })
    .describe("C = A * B on matrix fragments (tensor cores on the GPU, SIMD on the CPU)");

KILN_RUN(matmul_mma)
    .shape("a", {200, 72})
    .shape("b", {72, 136})  // K x N, or N x K with b_transposed
    .shape("c",
           [](const kiln::kernels::RunData& d) {
             return std::vector<int64_t>{d.dim("a", 0),
                                         d.dim("b", d.comptime("b_transposed") ? 0 : 1)};
           })
    .values("a", 0, 7)
    .values("b", 0, 7)
    .cubes([](const kiln::kernels::RunData& d) {
      const int64_t tm = d.comptime("frag_m") * d.comptime("planes_m");
      const int64_t tn = d.comptime("frag_n") * d.comptime("planes_n");
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("c", 1), tn),
                        kiln::kernels::ceil_div(d.dim("c", 0), tm));
    })
    .tolerance(1e-5, 1e-3)
    .flops(kiln::kernels::matmul_flops)
    .reference([](kiln::kernels::RunData& d) {
      const auto m = static_cast<size_t>(d.dim("c", 0)), n = static_cast<size_t>(d.dim("c", 1));
      const auto k = static_cast<size_t>(d.dim("a", 1));
      const bool bt = d.comptime("b_transposed") != 0, acc = d.comptime("accumulate") != 0;
      const bool is_tf32 = d.dtype("a") == kiln::ir::ElemType::F32;
      auto in = [&](double x) { return is_tf32 ? kiln::round_to_tf32(x) : x; };
      const auto& a = d["a"];
      const auto& b = d["b"];
      auto& c = d["c"];
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
          double s = acc ? c[i * n + j] : 0.0;
          for (size_t kk = 0; kk < k; ++kk)
            s += in(a[i * k + kk]) * in(bt ? b[j * k + kk] : b[kk * n + j]);
          c[i * n + j] = s;
        }
    });
