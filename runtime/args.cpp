// The arguments of a launch as every device takes them (runtime/args.h).
#include "runtime/args.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/tma.h"

namespace kiln {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

TensorView::TensorView(void* d, std::span<const int64_t> shp, std::span<const int64_t> str)
    : data(d), rank(static_cast<int>(std::min<size_t>(shp.size(), kMaxRank + 1))) {
  // A rank above kMaxRank is kept as kMaxRank + 1 so that packing reports it.
  for (int i = 0; i < std::min(rank, kMaxRank); ++i) shape[i] = shp[static_cast<size_t>(i)];
  if (str.empty()) {
    int64_t s = 1;
    for (int i = std::min(rank, kMaxRank); i-- > 0;) {
      strides[i] = s;
      s *= shape[i];
    }
  } else {
    for (int i = 0; i < std::min(rank, kMaxRank) && i < static_cast<int>(str.size()); ++i)
      strides[i] = str[static_cast<size_t>(i)];
    if (str.size() != shp.size()) rank = -1;  // mismatched strides: reported when packing
  }
}

namespace {

constexpr uint64_t kMaxIndex = 0xffffffffu;  // IR indices, shapes and strides are u32

// The index width is a limit of the IR, named as such (docs/ir.md, "Index width").
std::string index_width_message(uint64_t lines, int lanes) {
  return fmt::format(
      "it spans {} lines of {}, more than kiln's 32-bit line indices reach (2^32 - 1; "
      "docs/ir.md, \"Index width\"); launch on a slice of at most 2^32 - 1 lines, or read it in "
      "wider lines",
      lines, lanes);
}

const char* kind_words(const ir::Type& t) {
  switch (t.kind) {
    case ir::TypeKind::Tensor:
      return "a tensor";
    case ir::TypeKind::Array:
      return "an array";
    default:
      return "a scalar";
  }
}

Error arg_error(const abi::KernelInfo& info, const abi::ParamSlots& p, const std::string& what) {
  return Error(ErrorKind::InvalidArgument,
               fmt::format("kernel '{}', argument '{}': {}", info.name, p.name, what));
}

}  // namespace

Status pack_args_into(const abi::KernelInfo& info, const std::array<uint32_t, 3>& cube_count,
                      std::span<const HostArg> args, std::span<uint64_t> slots) {
  if (slots.size() < info.layout.slot_count)
    return Error(ErrorKind::Unsupported, fmt::format("kernel '{}' needs {} argument slots",
                                                     info.name, info.layout.slot_count));
  const auto& params = info.layout.params;
  if (args.size() != params.size())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kernel '{}' takes {} argument{}, got {}", info.name, params.size(),
                             params.size() == 1 ? "" : "s", args.size()));
  for (int d = 0; d < 3; ++d)
    if (cube_count[d] == 0)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("kernel '{}': cube count {}x{}x{} has a zero dimension", info.name,
                               cube_count[0], cube_count[1], cube_count[2]));
  if (uint64_t{cube_count[0]} * cube_count[1] * cube_count[2] > kMaxIndex)
    return Error(ErrorKind::InvalidArgument, fmt::format("kernel '{}': too many cubes", info.name));
  const auto& cl = info.cluster_dim;
  for (int d = 0; d < 3; ++d)
    if (cube_count[d] % cl[d] != 0)
      return Error(
          ErrorKind::InvalidArgument,
          fmt::format("kernel '{}': cube count {}x{}x{} is not a whole number of its "
                      "{}x{}x{} clusters; launch a multiple of the cluster shape in "
                      "each dimension",
                      info.name, cube_count[0], cube_count[1], cube_count[2], cl[0], cl[1], cl[2]));
  slots[0] = cube_count[0];
  slots[1] = cube_count[1];
  slots[2] = cube_count[2];
  for (size_t i = 0; i < params.size(); ++i) {
    const abi::ParamSlots& p = params[i];
    const ir::Type& t = p.type;
    const uint32_t s = p.first;
    const int lanes = t.lanes;
    const size_t esize = static_cast<size_t>(ir::elem_bytes(t.elem));
    if (t.kind == ir::TypeKind::Tensor) {
      const auto* v = std::get_if<TensorView>(&args[i]);
      if (!v) return arg_error(info, p, fmt::format("the kernel takes {} here", kind_words(t)));
      if (v->rank < 0)
        return arg_error(info, p, "the shape and the strides have different lengths");
      if (v->rank != t.rank)
        return arg_error(info, p,
                         fmt::format("the kernel was specialized for rank {}, got a tensor "
                                     "of rank {}",
                                     t.rank, v->rank));
      if (!v->data) return arg_error(info, p, "null data pointer");
      uint64_t elements = 1;
      for (int d = 0; d < t.rank; ++d) {
        if (v->shape[d] < 0 || v->strides[d] < 0)
          return arg_error(info, p, "negative shapes and strides are not supported");
        if (static_cast<uint64_t>(v->shape[d]) > kMaxIndex ||
            static_cast<uint64_t>(v->strides[d]) > kMaxIndex)
          return arg_error(info, p, "a dimension or stride does not fit in 32 bits");
        elements *= static_cast<uint64_t>(v->shape[d]);
      }
      if (lanes > 1) {
        const int last = t.rank - 1;
        if (v->shape[last] % lanes != 0 || (v->shape[last] > 1 && v->strides[last] != 1))
          return arg_error(info, p,
                           fmt::format("line width {} needs a contiguous innermost "
                                       "dimension whose size is a multiple of {} (shape[{}] "
                                       "= {}, stride {})",
                                       lanes, lanes, last, v->shape[last], v->strides[last]));
        for (int d = 0; d < last; ++d)
          if (v->strides[d] % lanes != 0)
            return arg_error(info, p,
                             fmt::format("line width {} needs outer strides that are "
                                         "multiples of {} (stride[{}] = {})",
                                         lanes, lanes, d, v->strides[d]));
      }
      if (reinterpret_cast<uintptr_t>(v->data) % esize != 0)
        return arg_error(info, p,
                         fmt::format("data is not aligned to its element size ({} bytes)", esize));
      const uint64_t lines = elements / static_cast<uint64_t>(lanes);
      // The view's footprint: 1 + the last element it reaches, in lines (0 when empty).
      uint64_t last = 0;
      for (int d = 0; d < t.rank; ++d)
        last += static_cast<uint64_t>(std::max<int64_t>(v->shape[d] - 1, 0)) *
                static_cast<uint64_t>(v->strides[d]);
      const uint64_t extent = elements == 0 ? 0 : last / static_cast<uint64_t>(lanes) + 1;
      if (lines > kMaxIndex || extent > kMaxIndex)
        return arg_error(info, p, index_width_message(std::max(lines, extent), lanes));
      slots[s + abi::slot::kData] = reinterpret_cast<uint64_t>(v->data);
      slots[s + abi::slot::kLen] = lines;
      slots[s + abi::slot::kExtent] = extent;
      const uint32_t rank = static_cast<uint32_t>(t.rank);
      for (uint32_t d = 0; d < rank; ++d) {
        slots[s + abi::slot::shape(d)] = static_cast<uint64_t>(v->shape[d]);
        slots[s + abi::slot::stride(rank, d)] = static_cast<uint64_t>(v->strides[d]);
      }
    } else if (t.kind == ir::TypeKind::Array) {
      const auto* v = std::get_if<ArrayView>(&args[i]);
      if (!v) return arg_error(info, p, fmt::format("the kernel takes {} here", kind_words(t)));
      if (!v->data && v->elements) return arg_error(info, p, "null data pointer");
      if (v->elements % static_cast<uint64_t>(lanes) != 0)
        return arg_error(
            info, p,
            fmt::format("{} elements are not a whole number of lines of {}", v->elements, lanes));
      if (v->elements / static_cast<uint64_t>(lanes) > kMaxIndex)
        return arg_error(info, p,
                         index_width_message(v->elements / static_cast<uint64_t>(lanes), lanes));
      slots[s + abi::slot::kData] = reinterpret_cast<uint64_t>(v->data);
      slots[s + abi::slot::kLen] = v->elements / static_cast<uint64_t>(lanes);
    } else {
      const auto* v = std::get_if<ScalarBits>(&args[i]);
      if (!v) return arg_error(info, p, fmt::format("the kernel takes {} here", kind_words(t)));
      slots[s + abi::slot::kData] = v->bits;
    }
  }
  if (!info.tensor_maps.empty()) KILN_TRY(check_tensor_maps(info, slots));
  return {};
}

}  // namespace kiln
