// The arguments of a launch as every device takes them: host views of tensors, arrays and scalar
// bits, checked against a compiled kernel and packed into its argument slots (compiler/abi.h).
// The neutral floor under runtime/device.h: no device family's header is needed to name them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <variant>
#include <vector>

#include "compiler/abi.h"
#include "ir/result.h"

namespace kiln {

// Host views of a kernel's runtime arguments, in parameter order. Fixed-size, so building
// them allocates nothing.
inline constexpr int kMaxRank = 8;
struct TensorView {
  void* data = nullptr;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  // in elements

  TensorView() = default;
  // A view with the given shape and strides (row-major contiguous when strides are empty).
  TensorView(void* d, std::span<const int64_t> shp, std::span<const int64_t> str = {});
  TensorView(void* d, std::initializer_list<int64_t> shp, std::initializer_list<int64_t> str = {})
      : TensorView(d, std::span<const int64_t>(shp.begin(), shp.size()),
                   std::span<const int64_t>(str.begin(), str.size())) {}
};
struct ArrayView {
  void* data = nullptr;
  uint64_t elements = 0;
};
struct ScalarBits {
  uint64_t bits = 0;  // the value's bit pattern, zero-extended
};
using HostArg = std::variant<TensorView, ArrayView, ScalarBits>;

// Row-major strides for a shape.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

// Checks the arguments against a kernel of any backend (count, kinds, ranks, shapes and strides
// compatible with the line widths, sizes that fit the IR's u32 indices) and packs them into a
// caller's buffer of KernelInfo::layout.slot_count slots (compiler/abi.h), allocating nothing.
// CUDA packs device pointers the same way.
Status pack_args_into(const abi::KernelInfo& info, const std::array<uint32_t, 3>& cube_count,
                      std::span<const HostArg> args, std::span<uint64_t> slots);

}  // namespace kiln
