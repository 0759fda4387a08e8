// TMA boxes (ir/ops.h, "A TMA box"): the attribute's encoding, and the rules a box, a NaN fill
// and a reduction follow.
#include <algorithm>

#include <fmt/format.h>

#include "ir/ops.h"

namespace kiln::ir {

namespace {

// The width of an im2col corner's field for a tensor of `rank`.
uint32_t corner_bits(uint32_t rank) {
  return rank == 3 ? 16 : rank == 4 ? 8 : 5;
}

}  // namespace

uint64_t tma_attr(const TmaBox& b) {
  const uint64_t sw = b.swizzle == 32 ? 1 : b.swizzle == 64 ? 2 : b.swizzle == 128 ? 3 : 0;
  uint64_t a = sw | uint64_t{b.rank & 7u} << 2 | uint64_t{b.fill_nan} << 5;
  if (b.im2col) {
    a |= uint64_t{1} << kTmaIm2colBit | uint64_t{b.channels & 0x1ffu} << 8 |
         uint64_t{b.pixels & 0x7ffu} << 17;
    const uint32_t w = corner_bits(b.rank), n = std::min(tma_spatial(b), 3u);
    const uint64_t mask = (uint64_t{1} << w) - 1;
    for (uint32_t s = 0; s < n; ++s) {
      a |= (static_cast<uint64_t>(b.lower[s]) & mask) << (28 + w * s);
      a |= (static_cast<uint64_t>(b.upper[s]) & mask) << (28 + w * (n + s));
    }
    return a;
  }
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
  if ((attr >> kTmaIm2colBit) & 1u) {
    b.im2col = true;
    b.channels = static_cast<uint32_t>((attr >> 8) & 0x1ffu);
    b.pixels = static_cast<uint32_t>((attr >> 17) & 0x7ffu);
    const uint32_t w = corner_bits(b.rank), n = std::min(tma_spatial(b), 3u);
    auto field = [&](uint32_t at) {  // sign-extended
      const uint64_t x = (attr >> at) & ((uint64_t{1} << w) - 1);
      return static_cast<int32_t>(static_cast<int64_t>(x << (64 - w)) >> (64 - w));
    };
    for (uint32_t s = 0; s < n; ++s) {
      b.lower[s] = field(28 + w * s);
      b.upper[s] = field(28 + w * (n + s));
    }
    return b;
  }
  for (uint32_t d = 0; d < b.rank && d < kTmaMaxRank; ++d)
    b.box[d] = static_cast<uint32_t>((attr >> (8 + 9 * d)) & 0x1ffu);
  return b;
}

std::string tma_im2col_shape_error(const TmaBox& b) {
  if (b.rank < 3 || b.rank > kTmaMaxRank)
    return fmt::format(
        "an im2col TMA view reads a tensor of rank 3 to 5 (N, the spatial dimensions, the "
        "channels), not rank {}",
        b.rank);
  if (b.pixels < 1 || b.pixels > kTmaMaxPixels)
    return fmt::format("an im2col TMA box has 1 to {} pixels (rows), not {}", kTmaMaxPixels,
                       b.pixels);
  if (b.channels < 1 || b.channels > kTmaMaxChannels)
    return fmt::format("an im2col TMA box has 1 to {} channels per pixel, not {}", kTmaMaxChannels,
                       b.channels);
  const int32_t hi = tma_corner_max(b.rank), lo = -hi - 1;
  for (uint32_t s = 0; s < tma_spatial(b); ++s)
    for (const int32_t x : {b.lower[s], b.upper[s]})
      if (x < lo || x > hi)
        return fmt::format(
            "the corners of an im2col box of a rank-{} tensor are {} to {} (the precision of "
            "the GPU's tensor map), not {}",
            b.rank, lo, hi, x);
  return {};
}

std::string tma_box_error(const TmaBox& b, uint32_t elem_bytes) {
  if (b.im2col) {
    if (std::string e = tma_im2col_shape_error(b); !e.empty()) return e;
    if (!wgmma_swizzle_valid(b.swizzle))
      return fmt::format("a TMA swizzle is 0, 32, 64 or 128 bytes, not {}", b.swizzle);
    const uint64_t row = uint64_t{b.channels} * elem_bytes;
    if (row % 16 != 0)
      return fmt::format(
          "the channels of an im2col TMA box are a multiple of 16 bytes; {} elements of {} bytes "
          "are {}",
          b.channels, elem_bytes, row);
    if (b.swizzle != 0 && row > b.swizzle)
      return fmt::format(
          "with a {}-byte swizzle an im2col box reads at most {} bytes of channels per pixel; {} "
          "elements of {} bytes are {} (load the channels in several boxes)",
          b.swizzle, b.swizzle, b.channels, elem_bytes, row);
    return {};
  }
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
  if (b.im2col) return uint64_t{b.pixels} * b.channels * elem_bytes;
  uint64_t n = elem_bytes;
  for (uint32_t d = 0; d < b.rank; ++d) n *= b.box[d];
  return n;
}

}  // namespace kiln::ir
