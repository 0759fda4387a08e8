// LLVM version, from LLVM's own configuration header.
#include "compiler/cpu/llvm_info.h"

#include <llvm/Config/llvm-config.h>

namespace kiln::cpu {

std::string llvm_version() {
  return LLVM_VERSION_STRING;
}

}  // namespace kiln::cpu
