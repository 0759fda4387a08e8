// The device interface behind a Runtime: memory, copies and kernel execution for one device.
// Backends implement it (cpu_device.cpp; CUDA adds its own); users see Runtime and Tensor.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "runtime/memory.h"

namespace kiln {

enum class DeviceKind { Cpu, Cuda };

struct DeviceInfo {
  std::string name;  // "cpu", "cuda:0"
  DeviceKind kind = DeviceKind::Cpu;
  std::string description;  // the processor or GPU model
  int cores = 0;            // CPU threads kiln uses, or streaming multiprocessors
  int vector_bits = 0;      // CPU: the widest SIMD register
  std::string arch;         // CUDA: "sm_90"; CPU: the LLVM CPU name
  uint64_t memory_bytes = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  const std::shared_ptr<MemoryPool>& pool() const { return pool_; }
  // Host memory the CPU reads directly (a CPU device).
  virtual bool host_accessible() const = 0;
  virtual Status upload(void* dst, const void* host, size_t bytes) = 0;
  virtual Status download(void* host, const void* src, size_t bytes) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;

  // What the specialization key and the disk cache know the device's code by: "cpu" + the
  // CPU name and features, or the SM arch. Equal strings mean interchangeable code.
  virtual const std::string& target_key() const = 0;
  // The widest line width useful for elements of `bytes` bytes.
  virtual int max_lanes(int bytes) const = 0;

 protected:
  std::shared_ptr<MemoryPool> pool_;
};

}  // namespace kiln
