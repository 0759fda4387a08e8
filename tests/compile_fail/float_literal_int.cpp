// EXPECT: a floating-point literal cannot stand for an integer value
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<u32> y) {
  u32 i = absolute_pos();
  y[i] = i + 1.5;
}
