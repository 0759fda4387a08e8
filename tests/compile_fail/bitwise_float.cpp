// EXPECT: bitwise operators need integers
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x) {
  f32 a = x[0];
  x[1] = a & a;
}
