// Device memory: a caching pool per device, and reference-counted buffers from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ir/result.h"

namespace kiln {

struct MemoryStats {
  uint64_t in_use = 0;       // bytes in live buffers (rounded to their size class)
  uint64_t reserved = 0;     // bytes held from the device: in use plus cached for reuse
  uint64_t peak = 0;         // the most ever in use
  uint64_t cap = 0;          // the pool's limit on `reserved`; 0 when unlimited
  uint64_t allocations = 0;  // buffers handed out
  uint64_t reused = 0;       // ... of which came from the cache
};

// Raw device memory, under the pool.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual Result<void*> allocate(size_t bytes) = 0;
  virtual void free(void* p, size_t bytes) = 0;
  virtual size_t alignment() const = 0;
};

// A caching pool: freed blocks are kept by size class and reused. Sizes round up to a power of
// two from 256 bytes to 32 MiB, and to a multiple of 2 MiB above. Asking for more than the cap
// allows first returns cached blocks to the device, then fails with an out-of-memory error;
// the pool stays usable. Thread-safe.
class MemoryPool : public std::enable_shared_from_this<MemoryPool> {
 public:
  MemoryPool(std::unique_ptr<DeviceAllocator> allocator, uint64_t cap);
  ~MemoryPool();

  struct Block {
    void* ptr = nullptr;
    size_t size = 0;  // the size class
  };
  Result<Block> allocate(size_t bytes);
  void release(Block b);
  // Returns every cached block to the device.
  void trim();
  MemoryStats stats() const;
  void set_cap(uint64_t cap);
  size_t alignment() const { return allocator_->alignment(); }

  // For devices that run asynchronously: a released block is reused only after `fence` (which
  // waits for all the device's work) has run since its release, so that a kernel still reading
  // it cannot see it reused. The pool runs the fence when it would otherwise need new memory.
  void set_reuse_fence(std::function<void()> fence);

  static size_t size_class(size_t bytes);

 private:
  void trim_locked();
  std::unique_ptr<DeviceAllocator> allocator_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cache_;
  std::vector<Block> pending_;  // released, waiting for the fence
  std::function<void()> fence_;
  MemoryStats stats_;
  void recycle_locked();
};

// 64-byte aligned host memory: the CPU device's allocator.
std::unique_ptr<DeviceAllocator> make_host_allocator();

// Device memory shared by tensors: reference-counted, returned to its pool (or to its owner's
// deleter, for wrapped external memory) when the last reference goes.
class Buffer {
 public:
  Buffer() = default;
  static Result<Buffer> allocate(const std::shared_ptr<MemoryPool>& pool, size_t bytes);
  // Memory kiln does not own: `release` (if any) runs when the last reference goes.
  static Buffer wrap(void* ptr, size_t bytes, std::function<void()> release = {});

  void* data() const { return impl_ ? impl_->ptr : nullptr; }
  size_t size() const { return impl_ ? impl_->bytes : 0; }
  bool valid() const { return impl_ != nullptr; }
  long use_count() const { return impl_.use_count(); }

 private:
  struct Impl {
    void* ptr = nullptr;
    size_t bytes = 0;
    std::shared_ptr<MemoryPool> pool;  // keeps the pool alive as long as its buffers
    MemoryPool::Block block;
    std::function<void()> release;
    ~Impl();
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
