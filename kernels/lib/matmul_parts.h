// What kiln::lib::matmul's sources share (internal, not part of the documented API): the DSL
// helpers every matmul kernel uses for batches and the epilogue, and the host's view of one
// checked product, whose GPU strategies live in matmul_gpu.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/matmul.h"
#include "runtime/runtime.h"

namespace kiln::lib {
KILN_COMPTIME_ENUM(Epilogue, None, Relu, Gelu, Silu)
}  // namespace kiln::lib

namespace kiln::lib::matmul_parts {

using namespace kiln::dsl;  // the helpers are DSL code
using kiln::lib::Epilogue;

// The flat index of the first element of batch item z of a [B0, B1, B2, R, C] tensor.
template <class T>
Val<uint32_t> item_offset(const dsl::Tensor<T>& t, const Val<uint32_t>& z) {
  u32 s1 = t.shape(1), s2 = t.shape(2);
  return z / (s1 * s2) * t.stride(0) + (z / s2) % s1 * t.stride(1) + z % s2 * t.stride(2);
}

// C's batch item z as indices along its three batch dimensions.
struct BatchIndex {
  Val<uint32_t> i0, i1, i2;
};
template <class T>
BatchIndex batch_index(const dsl::Tensor<T>& c, const Val<uint32_t>& z) {
  u32 s1 = c.shape(1), s2 = c.shape(2);
  return {z / (s1 * s2), (z / s2) % s1, z % s2};
}

// The item of an operand of batch shape (d0, d1, d2) that C's item `i` reads, counted in items:
// the index along a dimension of size 1 is 0 (NumPy's broadcasting).
inline Val<uint32_t> broadcast_item(const BatchIndex& i, const Val<uint32_t>& d0,
                                    const Val<uint32_t>& d1, const Val<uint32_t>& d2) {
  return ((i.i0 % d0) * d1 + i.i1 % d1) * d2 + i.i2 % d2;
}

// The same item of a tensor, as the flat index of its first element.
template <class T>
Val<uint32_t> broadcast_offset(const BatchIndex& i, const dsl::Tensor<T>& t) {
  return (i.i0 % t.shape(0)) * t.stride(0) + (i.i1 % t.shape(1)) * t.stride(1) +
         (i.i2 % t.shape(2)) * t.stride(2);
}

// The activation of the epilogues (matmul's and convolution's), in f32.
inline Val<float> activate(const Val<float>& x, Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::Relu:
      return max(x, 0.0f);
    case Epilogue::Gelu:
      return 0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    case Epilogue::Silu:
      return x / (1.0f + exp(-x));
    default:
      return x;
  }
}

// What the epilogue makes of the sum s of element idx (column col) of C: alpha s + beta C
// (C not read when beta is 0) + the bias, then ReLU or GELU; in f32, in this order on every
// device.
template <class TC>
Val<float> finish_value(const dsl::Tensor<TC>& c, const Val<uint32_t>& idx,
                        const Val<uint32_t>& col, const Val<float>& s, const Val<float>& alpha,
                        const Val<float>& beta, const dsl::Tensor<const f32>& bias, bool has_bias,
                        Epilogue epilogue) {
  Var<f32> v = alpha * s;
  if_(beta != 0.0f, [&] { v += beta * cast<float>(Val<host_of_t<TC>>(c[idx])); });
  if (has_bias) v += Val<float>(bias[col]);
  return activate(v, epilogue);
}

// The CPU product's blocks (matmul_cpu, and conv_gemm_cpu, which packs B itself): the block of
// C of mc rows from row0 and nb columns from col0 (c_item: the first element of C's item), its
// `lanes` units a vector of columns each. For each chunk of kc along K, `start_chunk(pc, depth)`
// (where a kernel that packs B per block does it), then for each sliver of A in the block (its
// mr x kc numbers stay in L1), for each sliver of B: mr x `vectors` accumulators in registers,
// per k `vectors` values of B from `sliver_b(jr, pc)(kk, q)` (jr: the sliver's first column in
// the block, kk: the step in the chunk, q: the vector) and mr broadcasts of A into mr x vectors
// FMAs. Between chunks the block's sums wait in `tile_sums` (in L2); after the last chunk the
// epilogue finishes them into C, rounded to its type once.
template <class TC, class StartChunk, class SliverB>
void cpu_gemm_blocks(const dsl::Tensor<const f32>& ap, const dsl::Tensor<TC>& c,
                     const dsl::Tensor<const f32>& bias, const Val<uint32_t>& k,
                     const Val<uint32_t>& za, const Val<uint32_t>& c_item, const Val<float>& alpha,
                     const Val<float>& beta, const Val<uint32_t>& mc, const Val<uint32_t>& nb,
                     const Val<uint32_t>& kc, int mr, int vectors, int lanes,
                     dsl::SharedArray<f32>& tile_sums, Epilogue epilogue, bool has_bias,
                     StartChunk start_chunk, SliverB sliver_b) {
  const auto umr = static_cast<uint32_t>(mr), ulanes = static_cast<uint32_t>(lanes),
             unr = static_cast<uint32_t>(vectors * lanes);
  u32 m = c.shape(3), n = c.shape(4);
  u32 slivers_m = (m + (umr - 1u)) / umr, slivers_n = (n + (unr - 1u)) / unr;
  u32 row0 = cube_pos_y() * mc, col0 = cube_pos_x() * nb;
  // The rows and columns of the block that slivers cover (whole slivers, zeros past M and N).
  u32 rows = min(mc, slivers_m * umr - min(row0, slivers_m * umr));
  u32 cols = min(nb, slivers_n * unr - min(col0, slivers_n * unr));
  u32 unit = unit_pos();
  // One vector of a row: what the epilogue makes of the sum s of (row, col), stored in C.
  auto finish = [&](const Val<uint32_t>& row, const Val<uint32_t>& col, const Val<float>& s) {
    if_(col < n, [&] {
      u32 idx = c_item + row * c.stride(3) + col * c.stride(4);
      c[idx] =
          cast<host_of_t<TC>>(finish_value(c, idx, col, s, alpha, beta, bias, has_bias, epilogue));
    });
  };
  u32 kt = max(k, 1u);  // K = 0 still writes alpha 0 + beta C
  for_range(0u, kt, kc, [&](u32 pc) {
    u32 depth = min(kc, k - min(pc, k));
    Val<bool> first = pc == 0u, last = pc + kc >= kt;
    start_chunk(pc, depth, col0, cols);
    for_range(0u, rows, umr, [&](u32 ir) {
      u32 abase = ((za * slivers_m + (row0 + ir) / umr) * k + pc) * umr;
      for_range(0u, cols, unr, [&](u32 jr) {
        auto load_b = sliver_b(jr, pc);
        u32 tbase = ir * nb + jr + unit;
        std::vector<Var<f32>> acc;
        acc.reserve(static_cast<size_t>(mr * vectors));
        for (int i = 0; i < mr * vectors; ++i) acc.push_back(Var<f32>(0.0f));
        if_(!first, [&] {
          for (uint32_t r = 0; r < umr; ++r)
            for (uint32_t q = 0; q < static_cast<uint32_t>(vectors); ++q)
              acc[r * vectors + q] = tile_sums[tbase + r * nb + q * ulanes];
        });
        for_range(0u, depth, 1u, [&](u32 kk) {
          std::vector<Val<float>> bv;
          for (uint32_t q = 0; q < static_cast<uint32_t>(vectors); ++q) bv.push_back(load_b(kk, q));
          for (uint32_t r = 0; r < umr; ++r) {
            f32 av = ap[abase + kk * umr + r];
            for (uint32_t q = 0; q < static_cast<uint32_t>(vectors); ++q) {
              auto& s = acc[r * vectors + q];
              s = fma(av, bv[q], Val<float>(s));
            }
          }
        });
        if_(last, [&] {
          for (uint32_t r = 0; r < umr; ++r) {
            u32 row = row0 + ir + r;
            if_(row < m, [&] {
              for (uint32_t q = 0; q < static_cast<uint32_t>(vectors); ++q)
                finish(row, col0 + jr + q * ulanes + unit, acc[r * vectors + q]);
            });
          }
        }).else_([&] {
          for (uint32_t r = 0; r < umr; ++r)
            for (uint32_t q = 0; q < static_cast<uint32_t>(vectors); ++q)
              tile_sums[tbase + r * nb + q * ulanes] = acc[r * vectors + q];
        });
      });
    });
  });
}

}  // namespace kiln::lib::matmul_parts

namespace kiln::lib::detail {

// One product, checked and in the kernels' terms.
struct MatmulProblem {
  Tensor a, b, c;  // [B0, B1, B2, rows, columns] views, A and B as op(A) and op(B)
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1, batch_a = 1, batch_b = 1;  // items of C, of A, of B
};

// The error of a refused product: "kiln::lib::matmul: WHAT".
Error matmul_error(const std::string& what);

// `t` as a [B0, B1, B2, R, C] view (leading dimensions of 1 added; the last two swapped when
// `transpose`): no copy.
Result<Tensor> matmul_rank5(const Tensor& t, bool transpose);

// Candidates' texts, one run of each, and the chosen index, with the caller's product
// untouched: the tuner's protocol for the matmul paths (a scratch C when beta is not 0).
using MatmulRunner = std::function<Status(const MatmulProblem&, const MatmulOptions&, size_t)>;
size_t matmul_tune(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o, std::string key,
                   const std::vector<std::string>& candidates, size_t fast,
                   const MatmulRunner& run);

// The product on a GPU or its emulator: the path its target's features allow (matmul_gpu.cpp).
Status matmul_on_gpu(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o);

// A grouped product (grouped_matmul) on a GPU or its emulator, in one launch: p.a is A as
// [1, 1, 1, T, K], p.b op(B) as [1, 1, G, K, N], p.c C as [1, 1, 1, T, N]; `ends` the groups'
// cumulative ends (i32 [G]) on the device.
Status grouped_matmul_on_gpu(Runtime& rt, const MatmulProblem& p, const Tensor& ends,
                             const MatmulOptions& o);

// A GPU kernel kiln::lib::matmul may launch, with its comptime values: every candidate of the
// path a device with `dev`'s features and shared memory takes for inputs of `in`, for products
// of any shape (what the tests assemble and check for spills).
struct MatmulSpecialization {
  std::string kernel;
  std::map<std::string, std::string> set;
};
std::vector<MatmulSpecialization> matmul_gpu_specializations(const DeviceInfo& dev, ir::ElemType in,
                                                             bool allow_tf32);

// A product on the CPU whose A its caller packs (convolution's im2col): `pack_a` fills `ap` (f32,
// p.batch_a items of ceil(M / mr) slivers of mr rows: element (row s mr + r, k) at
// (s K + k) mr + r, zeros past M) for the mr it is given; B is packed from p.b as matmul packs
// it, then matmul_cpu multiplies. p.a gives only A's batch shape. The heuristic blocking (not
// tuned); `config` receives its text.
using PackRows = std::function<Status(Tensor& ap, int mr)>;
Status matmul_cpu_packed_a(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o,
                           const PackRows& pack_a, std::string* config = nullptr);
// The same with B packed by its caller (im2col^T, for a convolution whose positions are
// contiguous in y): `pack_b` fills `bp` (p.batch_b items of ceil(N / nr) slivers of nr columns:
// element (k, column s nr + l) at (s K + k) nr + l, zeros past N) for the nr it is given; p.b
// gives only B's batch shape, A is packed from p.a.
Status matmul_cpu_packed_b(Runtime& rt, const MatmulProblem& p, const MatmulOptions& o,
                           const PackRows& pack_b, std::string* config = nullptr);

// The heuristic blocking matmul_cpu would use for `p` (its comptime register blocking, its
// cache blocking), and A packed for it from p.a (the first batch item only: for kernels that
// multiply one A by many Bs of their own), for a kernel that runs cpu_gemm_blocks itself.
struct CpuBlocking {
  int mr = 12, vectors = 2, lanes = 16, tile = 1 << 17;
  int64_t mc = 96, nb = 512, kc = 256;
  std::string text() const;
};
CpuBlocking matmul_cpu_blocking(const Runtime& rt, const MatmulProblem& p);
Result<Tensor> matmul_cpu_pack_a(Runtime& rt, const MatmulProblem& p, const CpuBlocking& b);

// `kiln run`'s --set epilogue=N (0 none, 1 ReLU, 2 GELU, 3 SiLU) for operation `op`, or an error.
Result<Epilogue> run_epilogue(const char* op, double value);
// The epilogue's activation in double, for the references.
double reference_activation(double v, Epilogue epilogue);

// Rounds up to a power of two (tuning buckets).
int64_t matmul_bucket(int64_t v);

}  // namespace kiln::lib::detail
