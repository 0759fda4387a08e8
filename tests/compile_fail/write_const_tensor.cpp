// EXPECT: this memory is read-only \(declared Tensor<const T> or Array<const T>\)
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<const f32> x) {
  x[absolute_pos()] = 1.0f;
}
