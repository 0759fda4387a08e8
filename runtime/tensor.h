// Tensors: a buffer on a device with an element type, a shape, strides (in elements) and an
// offset. Views share the buffer; transfers move data between host memory and the device.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "runtime/device.h"

namespace kiln {

inline constexpr int kMaxTensorRank = 8;

class Tensor {
 public:
  Tensor() = default;

  // A tensor over `buffer`. Shapes and strides are checked against the buffer's size.
  static Result<Tensor> make(std::shared_ptr<Device> device, Buffer buffer, ir::ElemType dtype,
                             std::span<const int64_t> shape, std::span<const int64_t> strides = {},
                             int64_t offset = 0);

  bool valid() const { return buffer_.valid(); }
  ir::ElemType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  std::span<const int64_t> shape() const { return {shape_.data(), static_cast<size_t>(rank_)}; }
  std::span<const int64_t> strides() const { return {strides_.data(), static_cast<size_t>(rank_)}; }
  int64_t shape(int d) const { return shape_[static_cast<size_t>(d)]; }
  int64_t stride(int d) const { return strides_[static_cast<size_t>(d)]; }
  int64_t offset() const { return offset_; }
  int64_t numel() const;
  size_t element_bytes() const { return static_cast<size_t>(ir::elem_bytes(dtype_)); }
  // Row-major with no gaps (the strides of dimensions of size 1 do not matter).
  bool is_contiguous() const;
  // Whether two different indices may reach the same element: a stride of 0 over a dimension
  // of more than one element, or strides that interleave. Such a view cannot be written.
  // Conservative: a view this calls overlapping may, in rare hand-made cases, not be.
  bool may_overlap() const;
  std::string strides_text() const;  // "[8, 2]"
  bool read_only() const { return read_only_; }
  // Device pointer of element 0 of the view.
  void* data() const;
  const Buffer& buffer() const { return buffer_; }
  Device* device() const { return device_.get(); }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  std::string describe() const;  // "f32[4096, 4096]"

  // ---- views (share the buffer) ----
  // Elements [begin, end) of dimension `dim`, every `step`-th.
  Result<Tensor> slice(int dim, int64_t begin, int64_t end, int64_t step = 1) const;
  // Dimensions reordered: dims[i] is the old dimension that becomes dimension i.
  Result<Tensor> permute(std::span<const int> dims) const;
  Result<Tensor> permute(std::initializer_list<int> dims) const {
    return permute(std::span<const int>(dims.begin(), dims.size()));
  }
  Result<Tensor> transpose(int a, int b) const;
  // The same elements in another shape; needs a contiguous tensor.
  Result<Tensor> reshape(std::span<const int64_t> shape) const;
  Result<Tensor> reshape(std::initializer_list<int64_t> shape) const {
    return reshape(std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // The same view, passed read-only to kernels (writing it is an error at trace time).
  Tensor as_read_only() const;

  // ---- host transfers: the host side is the view's elements in row-major order ----
  Status upload(const void* host, size_t bytes);
  Status download(void* host, size_t bytes) const;
  template <class T>
  Status upload(std::span<const T> host) {
    return upload(host.data(), host.size_bytes());
  }
  template <class T>
  Status download(std::span<T> host) const {
    return download(host.data(), host.size_bytes());
  }

 private:
  Status check_host_size(size_t bytes, const char* what) const;
  std::shared_ptr<Device> device_;
  Buffer buffer_;
  ir::ElemType dtype_ = ir::ElemType::F32;
  int rank_ = 0;
  std::array<int64_t, kMaxTensorRank> shape_{};
  std::array<int64_t, kMaxTensorRank> strides_{};
  int64_t offset_ = 0;
  bool read_only_ = false;
};

}  // namespace kiln
