// EXPECT: atomics modify memory; this memory is read-only
#include "compiler/dsl/dsl.h"
using namespace kiln::dsl;
void k(Tensor<const u32> h) {
  atomic_add(h[0], 1u);
}
