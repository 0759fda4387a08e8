// Caching memory pool and buffers.
#include "runtime/memory.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

namespace kiln {

namespace {

constexpr size_t kMinClass = 256;
constexpr size_t kLargeClass = size_t{32} << 20;
constexpr size_t kLargeStep = size_t{2} << 20;

std::string human(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30))
    return fmt::format("{:.2f} GiB", bytes / double(uint64_t{1} << 30));
  if (bytes >= (uint64_t{1} << 20))
    return fmt::format("{:.2f} MiB", bytes / double(uint64_t{1} << 20));
  if (bytes >= 1024) return fmt::format("{:.2f} KiB", bytes / 1024.0);
  return fmt::format("{} bytes", bytes);
}

uint64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                               : UINT64_MAX;
}

class HostAllocator : public DeviceAllocator {
 public:
  Result<void*> allocate(size_t bytes) override {
    // More than the machine has cannot succeed; asking would only trouble the system allocator.
    static const uint64_t total = host_memory_bytes();
    if (bytes > total)
      return Error(
          ErrorKind::OutOfMemory,
          fmt::format("out of memory: {} requested, the host has {}", human(bytes), human(total)));
    void* p = std::aligned_alloc(64, bytes);  // bytes is a multiple of 64: a size class
    if (!p)
      return Error(ErrorKind::OutOfMemory,
                   fmt::format("the host has no memory left for {}", human(bytes)));
    return p;
  }
  void free(void* p, size_t) override { std::free(p); }
  size_t alignment() const override { return 64; }
};

}  // namespace

std::unique_ptr<DeviceAllocator> make_host_allocator() {
  return std::make_unique<HostAllocator>();
}

size_t MemoryPool::size_class(size_t bytes) {
  if (bytes <= kMinClass) return kMinClass;
  if (bytes > SIZE_MAX - kLargeStep)
    return SIZE_MAX / kLargeStep * kLargeStep;  // fails to allocate
  if (bytes > kLargeClass) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t c = kMinClass;
  while (c < bytes) c *= 2;
  return c;
}

MemoryPool::MemoryPool(std::unique_ptr<DeviceAllocator> allocator, uint64_t cap)
    : allocator_(std::move(allocator)) {
  stats_.cap = cap;
}

MemoryPool::~MemoryPool() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked();
}

Result<MemoryPool::Block> MemoryPool::allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocations;
  auto it = cache_.find(cls);
  if ((it == cache_.end() || it->second.empty()) && !pending_.empty()) {
    recycle_locked();  // waits for the device, then the released blocks are free to reuse
    it = cache_.find(cls);
  }
  if (it != cache_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    ++stats_.reused;
    stats_.in_use += cls;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    return Block{p, cls};
  }
  if (stats_.cap && stats_.reserved + cls > stats_.cap) {
    trim_locked();  // give cached blocks back first
    if (stats_.reserved + cls > stats_.cap)
      return Error(ErrorKind::OutOfMemory,
                   fmt::format("out of memory: {} requested, {} of the pool's cap of {} in use; "
                               "free buffers or raise the cap",
                               human(bytes), human(stats_.in_use), human(stats_.cap)));
  }
  auto p = allocator_->allocate(cls);
  if (!p) {
    trim_locked();
    p = allocator_->allocate(cls);
    if (!p) return p.error();
  }
  stats_.reserved += cls;
  stats_.in_use += cls;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return Block{*p, cls};
}

void MemoryPool::release(Block b) {
  if (!b.ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.in_use -= b.size;
  if (fence_)
    pending_.push_back(b);
  else
    cache_[b.size].push_back(b.ptr);
}

void MemoryPool::recycle_locked() {
  if (pending_.empty()) return;
  if (fence_) fence_();
  for (const Block& b : pending_) cache_[b.size].push_back(b.ptr);
  pending_.clear();
}

void MemoryPool::set_reuse_fence(std::function<void()> fence) {
  std::lock_guard<std::mutex> lock(mu_);
  recycle_locked();
  fence_ = std::move(fence);
}

void MemoryPool::trim_locked() {
  recycle_locked();
  for (auto& [cls, blocks] : cache_) {
    for (void* p : blocks) {
      allocator_->free(p, cls);
      stats_.reserved -= cls;
    }
    blocks.clear();
  }
  cache_.clear();
}

void MemoryPool::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked();
}

MemoryStats MemoryPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void MemoryPool::set_cap(uint64_t cap) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.cap = cap;
}

Buffer::Impl::~Impl() {
  if (pool) pool->release(block);
  if (release) release();
}

Result<Buffer> Buffer::allocate(const std::shared_ptr<MemoryPool>& pool, size_t bytes) {
  KILN_ASSIGN(MemoryPool::Block block, pool->allocate(bytes));
  Buffer b;
  b.impl_ = std::make_shared<Impl>();
  b.impl_->ptr = block.ptr;
  b.impl_->bytes = bytes;
  b.impl_->pool = pool;
  b.impl_->block = block;
  return b;
}

Buffer Buffer::wrap(void* ptr, size_t bytes, std::function<void()> release) {
  Buffer b;
  b.impl_ = std::make_shared<Impl>();
  b.impl_->ptr = ptr;
  b.impl_->bytes = bytes;
  b.impl_->release = std::move(release);
  return b;
}

}  // namespace kiln
