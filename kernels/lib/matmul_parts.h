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

// `kiln run`'s --set epilogue=N (0 none, 1 ReLU, 2 GELU, 3 SiLU) for operation `op`, or an error.
Result<Epilogue> run_epilogue(const char* op, double value);
// The epilogue's activation in double, for the references.
double reference_activation(double v, Epilogue epilogue);

// Rounds up to a power of two (tuning buckets).
int64_t matmul_bucket(int64_t v);

}  // namespace kiln::lib::detail
