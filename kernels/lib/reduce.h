// Reductions from the host: kiln::lib::reduce picks the kernel (by the layout of the reduced
// axes), its configuration and the grid on any device. docs/kernels.md "Reductions".
//
//   KILN_ASSIGN(auto shape, kiln::lib::reduce_output_shape(x.shape(), {.axes = {1}}));
//   KILN_ASSIGN(Tensor s, rt.empty(x.dtype(), shape));
//   KILN_TRY(kiln::lib::reduce(rt, kiln::lib::ReduceOp::Sum, x, s, {.axes = {1}}));
//
// x has rank 1 to 5 and any strides; `axes` (negative counts from the end; empty: every axis)
// are reduced, and `out` holds the rest in order (with keepdim, the reduced axes stay as 1).
// Types and semantics follow PyTorch (torch.sum, mean, amax, amin, prod, argmax, argmin, var):
//
// | op | x | out | accumulates in |
// | --- | --- | --- | --- |
// | Sum, Prod | f32, f16, bf16 / i32 | x's type / i64 | f32 / i64 (wrapping) |
// | Mean, Var | f32, f16, bf16 | x's type | f32 |
// | Max, Min | f32, f16, bf16, i32 | x's type | exact |
// | ArgMax, ArgMin | f32, f16, bf16, i32 | i64 | exact |
//
// - A NaN makes Sum, Mean, Prod, Var, Max and Min NaN; ArgMax and ArgMin return the index of the
//   first NaN (PyTorch's rule: NaN is larger and smaller than everything). Ties: the first index.
// - ArgMax/ArgMin take one axis (or none: the index into the flattened tensor, in row-major
//   order); the index counts along that axis.
// - Var divides by N - correction (1 by default: the unbiased estimate); N - correction <= 0
//   gives NaN or inf as PyTorch does. The variance is computed around the mean (two passes).
// - An empty reduction gives 0 (Sum), 1 (Prod), NaN (Mean, Var); Max, Min, ArgMax and ArgMin
//   of nothing are errors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/result.h"
#include "runtime/runtime.h"

namespace kiln::lib {

enum class ReduceOp { Sum, Mean, Max, Min, Prod, ArgMax, ArgMin, Var };

struct ReduceOptions {
  std::vector<int> axes;  // empty: all
  bool keepdim = false;
  int64_t correction = 1;  // Var only
};

// The shape of the result of reducing a tensor of shape `in`.
Result<std::vector<int64_t>> reduce_output_shape(std::span<const int64_t> in,
                                                 const ReduceOptions& options);
// The element type of the result for `op` on `in` (the table above), or why it is refused.
Result<ir::ElemType> reduce_output_type(ReduceOp op, ir::ElemType in);

Status reduce(Runtime& rt, ReduceOp op, const Tensor& x, Tensor& out,
              const ReduceOptions& options = {});

}  // namespace kiln::lib
