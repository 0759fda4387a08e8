// Facts about the LLVM kiln was built with and the host it runs on, without LLVM headers.
#pragma once

#include <string>

namespace kiln::cpu {

std::string llvm_version();  // e.g. "22.1.8"

}  // namespace kiln::cpu
