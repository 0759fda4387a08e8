// EXPECT: write true or false for a Bool value
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x) {
  Bool b = absolute_pos() < 4u;
  if_(b == 1, [&] { x[0] = 1.0f; });
}
