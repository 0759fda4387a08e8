// EXPECT: sqrt\(\) takes a float
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<i32> x) {
  x[0] = sqrt(x[1]);
}
