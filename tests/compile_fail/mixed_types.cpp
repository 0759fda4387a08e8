// EXPECT: the two operands have different element types; convert one with cast<T>\(x\)
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x, Tensor<i32> y) {
  u32 i = absolute_pos();
  f32 a = x[i];
  i32 b = y[i];
  auto c = a + b;
  (void)c;
}
