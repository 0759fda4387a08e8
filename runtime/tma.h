// TMA tensor maps on the host. A launch of a kernel that copies through TMA (tma.load) checks
// each of its TMA tensors against the rules the GPU's Tensor Memory Accelerator sets (on every
// device, so that a kernel that runs on the CPU runs on a GPU too), and for CUDA devices writes
// one tensor map per site after the argument slots (cuda::tensor_map_offset): the driver's
// encoding on a GPU, the emulator's description (prelude.cuh, tma_desc) on cuda-emu.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>

#include "compiler/abi.h"
#include "ir/result.h"

namespace kiln {

// One tensor map's parameters, innermost dimension first as the driver takes them.
struct TmaTensor {
  ir::ElemType elem = ir::ElemType::F32;
  uint32_t rank = 0;
  uint64_t address = 0;      // the tensor's element 0 (a device address on a GPU)
  uint64_t dims[5] = {};     // elements per dimension
  uint64_t strides[5] = {};  // bytes between consecutive indices of dimension d (d >= 1 used)
  uint32_t box[5] = {};
  uint32_t swizzle = 0;   // bytes: 0, 32, 64, 128
  bool fill_nan = false;  // loads fill outside the tensor with NaN (else zeros)
  // An im2col map (cuTensorMapEncodeIm2col) has no box but rows of pixels x channels, and the
  // corners of its bounding box, innermost spatial dimension first (W, H, D) as the driver
  // takes them.
  bool im2col = false;
  uint32_t pixels = 0, channels = 0;
  int32_t lower[3] = {}, upper[3] = {};
};

// The parameters of tensor-map site `site` from packed argument slots, or an error naming the
// argument and the TMA rule it breaks: its address 16-byte aligned, the innermost dimension
// contiguous, the other strides multiples of 16 bytes below 2^40, no empty dimension, and for
// an im2col view a bounding box that is not empty.
Result<TmaTensor> tma_tensor(const abi::KernelInfo& info, const abi::TensorMapSite& site,
                             std::span<const uint64_t> slots);

// Checks every site of the kernel (pack_args_into calls it for every backend).
Status check_tensor_maps(const abi::KernelInfo& info, std::span<const uint64_t> slots);

// The emulator's tensor map for a tensor: 128 bytes at `out`.
void encode_emu_tensor_map(const TmaTensor& t, void* out);

// Encoded tensor maps by what they encode, so that launching a kernel again on the same tensors
// costs a lookup instead of a driver call. A map is a function of its parameters alone (the
// address, not what lives there), so an entry never goes stale. Thread-safe; bounded (cleared
// when full).
class TensorMapCache {
 public:
  static constexpr size_t kMaxEntries = 4096;
  // Copies the 128-byte map of `t` to `out` if it is cached.
  bool find(const TmaTensor& t, void* out) const;
  void insert(const TmaTensor& t, const void* map);
  size_t size() const;

 private:
  using Key = std::array<uint64_t, 17>;  // TmaTensor's fields, packed
  struct Hash {
    size_t operator()(const Key& k) const;
  };
  static Key key(const TmaTensor& t);
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::array<unsigned char, 128>, Hash> maps_;
};

}  // namespace kiln
