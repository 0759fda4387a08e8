// EXPECT: a kernel parameter is either a DSL type
#include <string>
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<f32> x, std::string name) {
  x[0] = 1.0f;
  (void)name;
}
KILN_KERNEL(k, "x, name = a");
