// The kernels kiln ships (kernels/examples/ and the standard library), registered when this
// library loads.
#pragma once

#include <string>
#include <vector>

namespace kiln::kernels {

// The names of the kernels this library registered. Programs that list or launch kernels by
// name call it, which also keeps the library linked in.
std::vector<std::string> builtin_names();

}  // namespace kiln::kernels
