// EXPECT: indices are u32; convert with cast<u32>\(i\)
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x, i32 j) {
  x[j] = 1.0f;
}
