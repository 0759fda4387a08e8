// The kiln DSL: include this to write kernels.
//
//   #include "compiler/dsl/dsl.h"
//   using namespace kiln::dsl;
//
//   void axpy(Tensor<const f32> x, Tensor<f32> y, f32 a) {
//     u32 i = absolute_pos();
//     if_(i < y.len(), [&] { y[i] = fma(a, x[i], y[i]); });
//   }
//   KILN_KERNEL(axpy, "x: line=4, y: line=4, a");
//
// docs/dsl.md is the tutorial and the reference.
#pragma once

#include "compiler/dsl/async_copy.h"
#include "compiler/dsl/builtins.h"
#include "compiler/dsl/cluster.h"
#include "compiler/dsl/comptime.h"
#include "compiler/dsl/context.h"
#include "compiler/dsl/control.h"
#include "compiler/dsl/fragment_elements.h"
#include "compiler/dsl/matrix.h"
#include "compiler/dsl/memory.h"
#include "compiler/dsl/online_softmax.h"
#include "compiler/dsl/registry.h"
#include "compiler/dsl/tensor_memory.h"
#include "compiler/dsl/tma.h"
#include "compiler/dsl/value.h"
#include "compiler/dsl/var.h"
