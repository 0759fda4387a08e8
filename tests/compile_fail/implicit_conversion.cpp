// EXPECT: cannot convert between DSL element types implicitly; use cast<T>\(x\)
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x, i32 n) {
  f32 v = n;
  x[0] = v;
}
