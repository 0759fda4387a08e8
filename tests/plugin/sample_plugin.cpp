// A shared library of user kernels, as a user would build one: it links kiln_compiler and
// registers its kernels when loaded (`kiln list --plugin libkiln_sample_plugin.so`).
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

// Squares every element: a kernel the kiln CLI was not built with.
void plugin_square(Tensor<f32> x) {
  u32 i = absolute_pos();
  if_(i < x.len(), [&] { x[i] = x[i] * x[i]; });
}
KILN_KERNEL(plugin_square, "x: line=2").cube_dim(128).describe("x = x * x, from a plugin");
