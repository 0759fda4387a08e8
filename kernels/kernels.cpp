// The names of the kernels registered from kernels/.
#include "kernels/kernels.h"

#include "compiler/dsl/registry.h"

namespace kiln::kernels {

std::vector<std::string> builtin_names() {
  std::vector<std::string> names;
  for (const dsl::KernelDef* d : dsl::Registry::global().all())
    if (d->file.rfind("kernels/", 0) == 0) names.push_back(d->name);
  return names;
}

}  // namespace kiln::kernels
