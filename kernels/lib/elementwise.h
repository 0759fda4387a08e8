// Elementwise operations from the host: a chain of up to eight operations fused into one kernel,
// NumPy broadcasting over strided views, and copies of any view into any other (with any types
// converted). docs/kernels.md "Elementwise".
//
//   using kiln::lib::Op; using kiln::lib::Arg;
//   // out = relu(exp(x * 0.5 + 1) * x): five operations, one pass over memory.
//   KILN_TRY(kiln::lib::map(rt, {{Op::Mul, Arg::S0}, {Op::Add, Arg::S1}, {Op::Exp},
//                                {Op::Mul, Arg::X}, {Op::Relu}},
//                           x, out, {.scalars = {0.5f, 1.0f}}));
//   KILN_TRY(kiln::lib::binary(rt, Op::Add, a, b, out));   // a + b, broadcast
//   KILN_TRY(kiln::lib::copy(rt, x.permute({1, 0}).value(), xt));  // a transpose
//
// The chain starts from x's element and applies each step to the running value v: a unary step
// (Exp, Relu, ...) maps v, a binary step combines v with its operand (Arg): x's element again,
// y's or z's (two more inputs), or one of four scalars. Arithmetic is f32 (f16 and bf16 inputs
// are exact in f32) and out is rounded once, at the end. Comparisons give 1 or 0.
// x, y and z broadcast against out's shape as NumPy's rules say (dimensions aligned from the
// right; each is out's or 1); out may be x itself (in place). Rank up to 5, any strides, up to
// 2^32 elements per view.
#pragma once

#include <initializer_list>
#include <span>
#include <vector>

#include "ir/result.h"
#include "runtime/runtime.h"

namespace kiln::lib {

enum class Op {
  None,
  // unary (the running value alone)
  Neg,
  Abs,
  Square,
  Recip,
  Sqrt,
  Rsqrt,
  Exp,
  Exp2,
  Log,
  Log2,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Relu,
  Gelu,  // tanh form, as MatmulOptions's epilogue
  Silu,
  Floor,
  Ceil,
  Round,
  Trunc,
  // binary (the running value and the step's operand)
  Add,
  Sub,
  Mul,
  Div,
  Max,
  Min,
  Pow,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  RSub,
  RDiv,  // operand - v, operand / v
};

// A binary step's operand.
enum class Arg { None, X, Y, Z, S0, S1, S2, S3 };

struct Step {
  Op op = Op::None;
  Arg arg = Arg::None;  // binary steps only
};

struct MapInputs {
  const Tensor* y = nullptr;
  const Tensor* z = nullptr;
  std::vector<float> scalars;  // S0..S3
};

constexpr int kMaxSteps = 8;

// out = the chain applied to x (and y, z, scalars), elementwise.
Status map(Runtime& rt, std::span<const Step> chain, const Tensor& x, Tensor& out,
           const MapInputs& inputs = {});
inline Status map(Runtime& rt, std::initializer_list<Step> chain, const Tensor& x, Tensor& out,
                  const MapInputs& inputs = {}) {
  return map(rt, std::span<const Step>(chain.begin(), chain.size()), x, out, inputs);
}
// out = op(x).
Status unary(Runtime& rt, Op op, const Tensor& x, Tensor& out);
// out = op(a, b), broadcast.
Status binary(Runtime& rt, Op op, const Tensor& a, const Tensor& b, Tensor& out);
// dst = src, element by element in the same positions (shapes equal, or src broadcast to dst's):
// any strides; the same type bit for bit, or any other type converted as the IR's cast does
// (floats round to nearest even; to integers they truncate toward zero, saturate, NaN to 0;
// integers wrap into narrower ones; to bool, x != 0).
Status copy(Runtime& rt, const Tensor& src, Tensor& dst);
// The broadcast shape of two shapes, or why they do not broadcast.
Result<std::vector<int64_t>> broadcast_shape(std::span<const int64_t> a,
                                             std::span<const int64_t> b);

}  // namespace kiln::lib
