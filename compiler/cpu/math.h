// kiln's own vectorized math functions for the CPU backend (internal to compiler/cpu).
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "ir/ops.h"
#include "ir/result.h"

namespace kiln::cpu {

// Calls kiln's implementation of exp, exp2, log, log2, sin, cos, tanh or pow (y used by pow
// only) on a float or double scalar or vector. Each (function, type) pair becomes one internal
// always-inline function of the module, named kiln.math.<op>.<type>; its code is branch-free
// polynomial evaluation, so it vectorizes with the line and with unit loops. Accuracy (max ULP
// error, measured by tests/compiler/cpu/test_math.cpp) is in docs/backends.md.
llvm::Value* emit_math(llvm::IRBuilder<>& b, llvm::Module& m, ir::OpKind op, llvm::Value* x,
                       llvm::Value* y);

}  // namespace kiln::cpu
