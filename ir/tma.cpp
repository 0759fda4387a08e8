// TMA boxes (ir/ops.h, "A TMA box"): the attribute's encoding, and the rules a box, a NaN fill
// and a reduction follow.
#include <fmt/format.h>

#include "ir/ops.h"

namespace kiln::ir {

uint64_t tma_attr(const TmaBox& b) {
  const uint64_t sw = b.swizzle == 32 ? 1 : b.swizzle == 64 ? 2 : b.swizzle == 128 ? 3 : 0;
  uint64_t a = sw | uint64_t{b.rank & 7u} << 2 | uint64_t{b.fill_nan} << 5;
  for (uint32_t d = 0; d < b.rank && d < kTmaMaxRank; ++d)
    a |= uint64_t{b.box[d] & 0x1ffu} << (8 + 9 * d);
  return a;
}

const char* tma_reduce_name(TmaReduce r) {
  switch (r) {
    case TmaReduce::None:
      return "";
    case TmaReduce::Add:
      return "add";
    case TmaReduce::Min:
      return "min";
    case TmaReduce::Max:
      return "max";
  }
  return "";
}

bool tma_reduce_allowed(TmaReduce r, ElemType e) {
  switch (r) {
    case TmaReduce::None:
      return true;
    case TmaReduce::Add:
      return e == ElemType::F16 || e == ElemType::BF16 || e == ElemType::F32 ||
             e == ElemType::I32 || e == ElemType::U32 || e == ElemType::U64;
    case TmaReduce::Min:
    case TmaReduce::Max:
      return e == ElemType::F16 || e == ElemType::BF16 || e == ElemType::I32 ||
             e == ElemType::U32 || e == ElemType::I64 || e == ElemType::U64;
  }
  return false;
}

bool tma_nan_fill_allowed(ElemType e) {
  return e == ElemType::F16 || e == ElemType::BF16 || e == ElemType::F32 || e == ElemType::F64;
}

TmaBox tma_box(uint64_t attr) {
  TmaBox b;
  static constexpr uint32_t kSwizzle[4] = {0, 32, 64, 128};
  b.swizzle = kSwizzle[attr & 3u];
  b.rank = static_cast<uint32_t>((attr >> 2) & 7u);
  b.fill_nan = (attr >> 5) & 1u;
  for (uint32_t d = 0; d < b.rank && d < kTmaMaxRank; ++d)
    b.box[d] = static_cast<uint32_t>((attr >> (8 + 9 * d)) & 0x1ffu);
  return b;
}

std::string tma_box_error(const TmaBox& b, uint32_t elem_bytes) {
  if (b.rank < 1 || b.rank > kTmaMaxRank)
    return fmt::format("a TMA box has 1 to {} dimensions, not {}", kTmaMaxRank, b.rank);
  for (uint32_t d = 0; d < b.rank; ++d)
    if (b.box[d] < 1 || b.box[d] > kTmaMaxBox)
      return fmt::format(
          "a TMA box spans 1 to {} elements in each dimension, not {} (dimension "
          "{})",
          kTmaMaxBox, b.box[d], d);
  if (!wgmma_swizzle_valid(b.swizzle))
    return fmt::format("a TMA swizzle is 0, 32, 64 or 128 bytes, not {}", b.swizzle);
  const uint64_t row = uint64_t{b.box[b.rank - 1]} * elem_bytes;
  if (row % 16 != 0)
    return fmt::format(
        "the innermost extent of a TMA box is a multiple of 16 bytes; {} elements "
        "of {} bytes are {}",
        b.box[b.rank - 1], elem_bytes, row);
  if (b.swizzle != 0 && row > b.swizzle)
    return fmt::format(
        "with a {}-byte swizzle the innermost extent of a TMA box is at most {} "
        "bytes; {} elements of {} bytes are {} (split the box along that "
        "dimension)",
        b.swizzle, b.swizzle, b.box[b.rank - 1], elem_bytes, row);
  return {};
}

uint64_t tma_box_bytes(const TmaBox& b, uint32_t elem_bytes) {
  uint64_t n = elem_bytes;
  for (uint32_t d = 0; d < b.rank; ++d) n *= b.box[d];
  return n;
}

}  // namespace kiln::ir
