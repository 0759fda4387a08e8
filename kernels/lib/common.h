// Helpers shared by the kernel library's sources (internal, not part of the documented API):
// converting DSL values between element types, how far a tensor view reaches in its buffer, a
// shape as text, and the error of a refused argument.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/dsl/dsl.h"
#include "runtime/runtime.h"

namespace kiln::lib::detail {

// v as the DSL type To: itself when it already is, else the IR's cast.
template <class To, class From>
To convert(const From& v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else {
    return dsl::cast<To>(v);
  }
}

// The input and result types of one instantiation of a generic kernel (KILN_KERNEL_GENERIC's
// type list: InOut<f16, f32>, ...).
template <class In_, class Out_>
struct InOut {
  using In = In_;
  using Out = Out_;
};

// The largest element index a view reaches from its first element, plus one.
inline int64_t reach(const Tensor& t) {
  int64_t r = 1;
  for (int d = 0; d < t.rank(); ++d)
    if (t.shape(d) > 0) r += (t.shape(d) - 1) * std::abs(t.stride(d));
  return r;
}

// A shape as text: "[2, 3, 4]".
inline std::string dims(std::span<const int64_t> s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// The error of a refused argument: "kiln::lib::OP: WHAT".
inline Error bad(const char* op, const std::string& what) {
  return Error(ErrorKind::InvalidArgument, fmt::format("kiln::lib::{}: {}", op, what));
}

// Whether the elements a view reaches, from its offset, fit 32-bit indices (the kernels'
// index type).
inline bool fits_u32(const Tensor& t) {
  return reach(t) + t.offset() <= (int64_t{1} << 32);
}

}  // namespace kiln::lib::detail
