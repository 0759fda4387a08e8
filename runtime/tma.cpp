// TMA tensor maps on the host (tma.h): the rules of cuTensorMapEncodeTiled and
// cuTensorMapEncodeIm2col, checked before the driver sees them, and the emulator's encoding.
#include "runtime/tma.h"

#include <cstring>

#include <fmt/format.h>

namespace kiln {

namespace {

Error tma_error(const abi::KernelInfo& info, const abi::TensorMapSite& site,
                const std::string& what) {
  return Error(ErrorKind::InvalidArgument,
               fmt::format("kernel '{}', argument '{}' (copied by TMA at {}): {}", info.name,
                           info.layout.params[site.param].name, site.where, what));
}

}  // namespace

Result<TmaTensor> tma_tensor(const abi::KernelInfo& info, const abi::TensorMapSite& site,
                             std::span<const uint64_t> slots) {
  KILN_CHECK(site.param < info.layout.params.size(), "a tensor-map site past the parameters");
  const abi::ParamSlots& p = info.layout.params[site.param];
  const ir::TmaBox box = ir::tma_box(site.box);
  const auto esize = static_cast<uint64_t>(ir::elem_bytes(p.type.elem));
  const uint32_t rank = p.type.rank;
  KILN_CHECK(rank == box.rank && rank >= 1 && rank <= ir::kTmaMaxRank,
             "a tensor-map site whose box is not of its tensor's rank");
  TmaTensor t;
  t.elem = p.type.elem;
  t.rank = rank;
  t.swizzle = box.swizzle;
  t.fill_nan = box.fill_nan;
  t.im2col = box.im2col;
  t.pixels = box.pixels;
  t.channels = box.channels;
  t.address = slots[p.first + abi::slot::kData];
  if (t.address % 16 != 0)
    return tma_error(info, site,
                     fmt::format("TMA reads tensors whose data starts on 16 bytes; this one "
                                 "starts at 0x{:x} (view a 16-byte aligned offset)",
                                 t.address));
  for (uint32_t d = 0; d < rank; ++d) {
    const uint32_t in = rank - 1 - d;  // the driver's dimension d is kiln's dimension `in`
    const uint64_t extent = slots[p.first + abi::slot::shape(in)];
    const uint64_t stride = slots[p.first + abi::slot::stride(rank, in)];
    if (extent == 0)
      return tma_error(info, site,
                       fmt::format("TMA copies from tensors with no empty dimension; shape[{}] is "
                                   "0 (skip the launch, or copy without TMA)",
                                   in));
    t.dims[d] = extent;
    t.box[d] = box.im2col ? 0 : box.box[in];
    if (d == 0) {
      if (stride != 1 && extent > 1)
        return tma_error(info, site,
                         fmt::format("TMA reads the innermost dimension contiguously; its stride "
                                     "is {} elements, not 1 (copy the tensor contiguous first)",
                                     stride));
      t.strides[0] = esize;
      continue;
    }
    t.strides[d] = stride * esize;
    if (t.strides[d] % 16 != 0 || t.strides[d] >= (uint64_t{1} << 40))
      return tma_error(info, site,
                       fmt::format("TMA needs every outer stride to be a multiple of 16 bytes "
                                   "below 2^40; stride[{}] is {} elements ({} bytes): pad the "
                                   "rows to a multiple of {} elements",
                                   in, stride, t.strides[d], 16 / std::min<uint64_t>(esize, 16)));
  }
  if (box.im2col) {
    // Spatial dimension s (kiln's dimension 1 + s, outermost first) is the driver's corner
    // spatial - 1 - s and its dimension rank - 2 - s (the driver counts innermost first).
    const uint32_t spatial = ir::tma_spatial(box);
    for (uint32_t s = 0; s < spatial; ++s) {
      const uint32_t driver = spatial - 1 - s;
      t.lower[driver] = box.lower[s];
      t.upper[driver] = box.upper[s];
      const auto extent = static_cast<int64_t>(t.dims[rank - 2 - s]);
      if (extent + box.upper[s] - box.lower[s] <= 0)
        return tma_error(
            info, site,
            fmt::format("the im2col bounding box of dimension {} is empty: from lower {} to "
                        "shape[{}] + upper = {} + {} (the filter is larger than the padded "
                        "image)",
                        1 + s, box.lower[s], 1 + s, extent, box.upper[s]));
    }
  }
  return t;
}

Status check_tensor_maps(const abi::KernelInfo& info, std::span<const uint64_t> slots) {
  for (const abi::TensorMapSite& site : info.tensor_maps) KILN_TRY(tma_tensor(info, site, slots));
  return {};
}

void encode_emu_tensor_map(const TmaTensor& t, void* out) {
  // prelude.cuh, tma_desc: outermost first.
  struct {
    uint64_t base;
    uint32_t rank, elem_bytes;
    uint32_t fill_nan, im2col;
    uint64_t dims[5], strides[5];
    int32_t lower[3], upper[3];
  } d{};
  static_assert(sizeof d <= 128);
  const auto esize = static_cast<uint64_t>(ir::elem_bytes(t.elem));
  d.base = t.address;
  d.rank = t.rank;
  d.elem_bytes = static_cast<uint32_t>(esize);
  d.fill_nan = t.fill_nan;
  d.im2col = t.im2col;
  if (t.im2col)
    for (uint32_t s = 0, n = t.rank - 2; s < n; ++s) {
      d.lower[s] = t.lower[n - 1 - s];
      d.upper[s] = t.upper[n - 1 - s];
    }
  for (uint32_t i = 0; i < t.rank; ++i) {
    d.dims[t.rank - 1 - i] = t.dims[i];
    d.strides[t.rank - 1 - i] = t.strides[i] / esize;
  }
  std::memset(out, 0, 128);
  std::memcpy(out, &d, sizeof d);
}

TensorMapCache::Key TensorMapCache::key(const TmaTensor& t) {
  Key k{};
  k[0] = static_cast<uint64_t>(t.elem) | uint64_t{t.rank} << 8 | uint64_t{t.swizzle} << 16 |
         uint64_t{t.fill_nan} << 32;
  k[1] = t.address;
  for (int d = 0; d < 5; ++d) {
    k[2 + d] = t.dims[d];
    k[7 + d] = t.strides[d];
  }
  k[12] = uint64_t{t.box[0]} | uint64_t{t.box[1]} << 16 | uint64_t{t.box[2]} << 32 |
          uint64_t{t.box[3]} << 48;
  k[13] = t.box[4];
  k[14] = uint64_t{t.im2col} | uint64_t{t.pixels} << 8 | uint64_t{t.channels} << 24;
  for (int s = 0; s < 3; ++s) {
    k[15] |= uint64_t{static_cast<uint16_t>(t.lower[s])} << (16 * s);
    k[16] |= uint64_t{static_cast<uint16_t>(t.upper[s])} << (16 * s);
  }
  return k;
}

size_t TensorMapCache::Hash::operator()(const Key& k) const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t x : k) h = (h ^ x) * 0x100000001b3ull + (h >> 29);
  return static_cast<size_t>(h);
}

bool TensorMapCache::find(const TmaTensor& t, void* out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = maps_.find(key(t));
  if (it == maps_.end()) return false;
  std::memcpy(out, it->second.data(), it->second.size());
  return true;
}

void TensorMapCache::insert(const TmaTensor& t, const void* map) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (maps_.size() >= kMaxEntries) maps_.clear();
  std::array<unsigned char, 128> m;
  std::memcpy(m.data(), map, m.size());
  maps_[key(t)] = m;
}

size_t TensorMapCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return maps_.size();
}

}  // namespace kiln
