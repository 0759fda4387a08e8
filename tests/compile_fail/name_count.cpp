// EXPECT: the parameter string must name every parameter of the kernel function
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x, f32 a) {
  x[0] = a;
}
KILN_KERNEL(k, "x");
