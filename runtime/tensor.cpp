// Tensors, views and host transfers.
#include "runtime/tensor.h"

#include <cstring>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln {

namespace {

Error bad(const std::string& what) {
  return Error(ErrorKind::InvalidArgument, what);
}

}  // namespace

Result<Tensor> Tensor::make(std::shared_ptr<Device> device, Buffer buffer, ir::ElemType dtype,
                            std::span<const int64_t> shape, std::span<const int64_t> strides,
                            int64_t offset) {
  if (shape.size() > kMaxTensorRank)
    return bad(
        fmt::format("a tensor has at most {} dimensions, got {}", kMaxTensorRank, shape.size()));
  if (!strides.empty() && strides.size() != shape.size())
    return bad(fmt::format("{} strides for {} dimensions", strides.size(), shape.size()));
  if (offset < 0) return bad("a negative offset");
  Tensor t;
  t.device_ = std::move(device);
  t.buffer_ = std::move(buffer);
  t.dtype_ = dtype;
  t.rank_ = static_cast<int>(shape.size());
  t.offset_ = offset;
  int64_t s = 1;
  for (int d = t.rank_; d-- > 0;) {
    if (shape[static_cast<size_t>(d)] < 0) return bad(fmt::format("dimension {} is negative", d));
    t.shape_[static_cast<size_t>(d)] = shape[static_cast<size_t>(d)];
    if (strides.empty()) {
      t.strides_[static_cast<size_t>(d)] = s;
      if (__builtin_mul_overflow(s, shape[static_cast<size_t>(d)], &s))
        return bad(fmt::format("the row-major strides of shape {} overflow 64 bits",
                               fmt::join(shape, "x")));
    } else {
      if (strides[static_cast<size_t>(d)] < 0) return bad("negative strides are not supported");
      t.strides_[static_cast<size_t>(d)] = strides[static_cast<size_t>(d)];
    }
  }
  // Every element the view reaches must lie inside the buffer.
  int64_t count = 1;
  for (int d = 0; d < t.rank_; ++d)
    if (__builtin_mul_overflow(count, t.shape_[static_cast<size_t>(d)], &count))
      return bad(fmt::format("the view's element count overflows 64 bits ({})", t.describe()));
  if (count > 0) {
    int64_t last = offset;
    for (int d = 0; d < t.rank_; ++d) {
      int64_t step = 0;
      if (__builtin_mul_overflow(t.shape_[static_cast<size_t>(d)] - 1,
                                 t.strides_[static_cast<size_t>(d)], &step) ||
          __builtin_add_overflow(last, step, &last))
        return bad(fmt::format("the view's reach overflows 64 bits (dimension {}, stride {})", d,
                               t.strides_[static_cast<size_t>(d)]));
    }
    const int64_t capacity = static_cast<int64_t>(t.buffer_.size() / t.element_bytes());
    if (last >= capacity)
      return bad(fmt::format("the view reaches element {} but the buffer holds {} elements", last,
                             capacity));
  }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank_; ++d) n *= shape_[static_cast<size_t>(d)];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int d = rank_; d-- > 0;) {
    if (shape_[static_cast<size_t>(d)] != 1 && strides_[static_cast<size_t>(d)] != s) return false;
    s *= shape_[static_cast<size_t>(d)];
  }
  return true;
}

bool Tensor::may_overlap() const {
  if (numel() == 0) return false;
  std::array<std::pair<int64_t, int64_t>, kMaxTensorRank> dims{};  // (stride, size)
  size_t n = 0;
  for (int d = 0; d < rank_; ++d)
    if (shape_[static_cast<size_t>(d)] > 1)
      dims[n++] = {strides_[static_cast<size_t>(d)], shape_[static_cast<size_t>(d)]};
  for (size_t i = 1; i < n; ++i)  // insertion sort by stride (at most 8 entries)
    for (size_t j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  // Each stride must step past everything the smaller strides reach.
  int64_t reach = 1;
  for (size_t i = 0; i < n; ++i) {
    if (dims[i].first < reach) return true;
    reach += dims[i].first * (dims[i].second - 1);
  }
  return false;
}

std::string Tensor::strides_text() const {
  std::string s = "[";
  for (int d = 0; d < rank_; ++d)
    s += fmt::format("{}{}", d ? ", " : "", strides_[static_cast<size_t>(d)]);
  return s + "]";
}

void* Tensor::data() const {
  return static_cast<char*>(buffer_.data()) + offset_ * static_cast<int64_t>(element_bytes());
}

std::string Tensor::describe() const {
  std::string s = fmt::format("{}[", ir::elem_name(dtype_));
  for (int d = 0; d < rank_; ++d)
    s += fmt::format("{}{}", d ? ", " : "", shape_[static_cast<size_t>(d)]);
  return s + "]";
}

Result<Tensor> Tensor::slice(int dim, int64_t begin, int64_t end, int64_t step) const {
  if (dim < 0 || dim >= rank_)
    return bad(fmt::format("slice: dimension {} of a rank-{} tensor", dim, rank_));
  const int64_t n = shape_[static_cast<size_t>(dim)];
  if (begin < 0 || end > n || begin > end || step < 1)
    return bad(
        fmt::format("slice [{}, {}) step {} of a dimension of size {}", begin, end, step, n));
  Tensor t = *this;
  t.offset_ += begin * strides_[static_cast<size_t>(dim)];
  t.shape_[static_cast<size_t>(dim)] = (end - begin + step - 1) / step;
  t.strides_[static_cast<size_t>(dim)] *= step;
  return t;
}

Result<Tensor> Tensor::permute(std::span<const int> dims) const {
  if (static_cast<int>(dims.size()) != rank_)
    return bad(fmt::format("permute of a rank-{} tensor needs {} dimensions, got {}", rank_, rank_,
                           dims.size()));
  std::array<bool, kMaxTensorRank> seen{};
  Tensor t = *this;
  for (int i = 0; i < rank_; ++i) {
    const int d = dims[static_cast<size_t>(i)];
    if (d < 0 || d >= rank_ || seen[static_cast<size_t>(d)])
      return bad("permute needs each dimension exactly once");
    seen[static_cast<size_t>(d)] = true;
    t.shape_[static_cast<size_t>(i)] = shape_[static_cast<size_t>(d)];
    t.strides_[static_cast<size_t>(i)] = strides_[static_cast<size_t>(d)];
  }
  return t;
}

Result<Tensor> Tensor::transpose(int a, int b) const {
  if (a < 0 || b < 0 || a >= rank_ || b >= rank_)
    return bad(fmt::format("transpose({}, {}) of a rank-{} tensor", a, b, rank_));
  std::array<int, kMaxTensorRank> dims{};
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<size_t>(a)], dims[static_cast<size_t>(b)]);
  return permute(std::span<const int>(dims.data(), static_cast<size_t>(rank_)));
}

Result<Tensor> Tensor::reshape(std::span<const int64_t> shape) const {
  if (!is_contiguous()) return bad("reshape needs a contiguous tensor; this view is strided");
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n != numel())
    return bad(fmt::format("reshape of {} ({} elements) to {} elements", describe(), numel(), n));
  KILN_ASSIGN(Tensor t, make(device_, buffer_, dtype_, shape, {}, offset_));
  t.read_only_ = read_only_;
  return t;
}

Tensor Tensor::as_read_only() const {
  Tensor t = *this;
  t.read_only_ = true;
  return t;
}

Status Tensor::check_host_size(size_t bytes, const char* what) const {
  const size_t want = static_cast<size_t>(numel()) * element_bytes();
  if (bytes != want)
    return bad(fmt::format("{} of {}: the host buffer has {} bytes, the tensor {} bytes", what,
                           describe(), bytes, want));
  return {};
}

namespace {

// Calls f(element offset) for every element of a view in row-major order.
template <class F>
void for_each_offset(int rank, const int64_t* shape, const int64_t* strides, F&& f) {
  std::array<int64_t, kMaxTensorRank> idx{};
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) total *= shape[d];
  for (int64_t n = 0; n < total; ++n) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += idx[static_cast<size_t>(d)] * strides[d];
    f(off);
    for (int d = rank; d-- > 0;) {
      if (++idx[static_cast<size_t>(d)] < shape[d]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace

Status Tensor::upload(const void* host, size_t bytes) {
  if (!valid()) return bad("upload to an empty tensor");
  KILN_TRY(check_host_size(bytes, "upload"));
  if (is_contiguous()) return device_->upload(data(), host, bytes);
  if (!device_->host_accessible())
    return bad(fmt::format("upload to a strided view on {}: upload to a contiguous tensor",
                           device_->info().name));
  const size_t es = element_bytes();
  const char* src = static_cast<const char*>(host);
  char* base = static_cast<char*>(data());
  for_each_offset(rank_, shape_.data(), strides_.data(), [&](int64_t off) {
    std::memcpy(base + off * static_cast<int64_t>(es), src, es);
    src += es;
  });
  return {};
}

Status Tensor::download(void* host, size_t bytes) const {
  if (!valid()) return bad("download from an empty tensor");
  KILN_TRY(check_host_size(bytes, "download"));
  if (is_contiguous()) return device_->download(host, data(), bytes);
  if (!device_->host_accessible())
    return bad(fmt::format("download of a strided view on {}: copy it to a contiguous tensor first",
                           device_->info().name));
  const size_t es = element_bytes();
  char* dst = static_cast<char*>(host);
  const char* base = static_cast<const char*>(data());
  for_each_offset(rank_, shape_.data(), strides_.data(), [&](int64_t off) {
    std::memcpy(dst, base + off * static_cast<int64_t>(es), es);
    dst += es;
  });
  return {};
}

}  // namespace kiln
