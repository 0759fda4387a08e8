// A traced value cannot drive C++ control flow: the compiler refuses the conversion to bool.
// EXPECT: (could not convert|no viable conversion|cannot be contextually converted|no conversion)
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x, u32 n) {
  if (absolute_pos() < n) x[0] = 1.0f;
}
