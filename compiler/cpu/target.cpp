// CPU targets: the facts about a Target that need no LLVM (the backend's build may have none).
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "compiler/cpu/backend.h"

namespace kiln::cpu {

Result<bool> vectorize_from_environment() {
  const char* e = std::getenv("KILN_CPU_VECTORIZE");
  const std::string_view v = e ? e : "";
  if (v.empty() || v == "1") return true;
  if (v == "0") return false;
  return Error(ErrorKind::InvalidArgument,
               fmt::format("KILN_CPU_VECTORIZE='{}': write 0 (units one at a time) or 1 (units in "
                           "SIMD lanes, the default), or unset it",
                           v));
}

int Target::max_lanes(int bytes) const {
  int lanes = vector_bits / 8 / std::max(bytes, 1);
  return std::clamp(lanes, 1, 16);
}

std::string Target::describe() const {
  std::string isa = vector_bits >= 512 ? "AVX-512" : vector_bits >= 256 ? "AVX2/AVX" : "SSE";
  return fmt::format("{} ({}, {}-bit vectors{}{})", cpu, isa, vector_bits, host ? ", host" : "",
                     vectorize ? "" : ", unit vectorizer off");
}

}  // namespace kiln::cpu
