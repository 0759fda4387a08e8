// A CUDA GPU as a kiln device (internal to the runtime): its context, memory pool, copies,
// loaded kernels, streams with their report buffers, and launches. Everything goes through the
// driver table of driver.h; every failure is a Result naming the CUDA error and what kiln
// was doing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/abi.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "runtime/cuda/driver.h"
#include "runtime/device.h"
#include "runtime/tma.h"

namespace kiln::detail {

// The device's primary context, shared by everything that must outlive it (pool, kernels,
// streams, events).
struct CudaContext {
  const cuda_driver::Api* api = nullptr;
  cuda_driver::CUdevice device = 0;
  cuda_driver::CUcontext ctx = nullptr;
  int ordinal = 0;
  mutable TensorMapCache tensor_maps;  // encoded for this context's launches (thread-safe)
  ~CudaContext();
  // Makes the context current on the calling thread (cheap when it already is).
  Status bind() const;
  Status check(cuda_driver::CUresult r, const std::string& what) const {
    return cuda_driver::check(*api, r, what);
  }
};

class CudaDevice : public Device {
 public:
  static Result<std::shared_ptr<CudaDevice>> open(int ordinal, uint64_t memory_cap);
  // What CUDA device `ordinal` is, without opening a runtime on it.
  static Result<DeviceInfo> describe(int ordinal);

  const DeviceInfo& info() const override { return info_; }
  bool host_accessible() const override { return false; }
  Status upload(void* dst, const void* host, size_t bytes) override;
  Status download(void* host, const void* src, size_t bytes) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  const backend::Target& target() const override { return backend_target_; }
  int max_lanes(int bytes) const override { return bytes >= 16 ? 1 : 16 / bytes; }
  std::string line_problem(const Tensor& t, int line) const override;
  std::string grid_problem(const std::array<uint32_t, 3>& cubes) const override;
  Result<std::shared_ptr<const LoadedKernel>> load(const backend::Artifact& a) override;
  Result<std::unique_ptr<DeviceStream>> new_stream() override;
  Result<std::unique_ptr<DeviceStream>> wrap_stream(void* native) override;

  const std::shared_ptr<CudaContext>& context() const { return ctx_; }
  // What kiln compiles for: sm_XY[a] when NVRTC supports the device's arch (CUBIN), else the
  // newest virtual arch it has (PTX, compiled by the driver).
  const cuda::Target& compile_target() const { return target_; }
  bool cubin() const { return cubin_; }
  uint32_t max_grid_y() const { return max_grid_y_; }
  uint32_t max_grid_z() const { return max_grid_z_; }
  uint32_t max_shared_bytes() const { return max_shared_; }

 private:
  std::shared_ptr<CudaContext> ctx_;
  DeviceInfo info_;
  cuda::Target target_;
  backend::Target backend_target_;
  bool cubin_ = true;
  uint32_t max_grid_y_ = 65535, max_grid_z_ = 65535, max_shared_ = 48 * 1024;
};

// Why a tensor cannot be read in lines of `line` elements on a CUDA device (or the emulator):
// vector loads need the pointer aligned to the line, up to 16 bytes.
std::string cuda_line_problem(const Tensor& t, int line, const std::string& device);

// A specialization loaded into a device's context.
struct CudaKernel {
  std::shared_ptr<CudaContext> ctx;
  cuda_driver::CUmodule module = nullptr;
  cuda_driver::CUfunction function = nullptr;
  abi::KernelInfo info;
  cuda::Resources resources;
  bool has_reports = false;  // prints, asserts or checked accesses
  ~CudaKernel();
};

// Loads a CUBIN or PTX image; sets the kernel's dynamic shared memory when it needs it.
Result<std::shared_ptr<CudaKernel>> load_cuda_kernel(const CudaDevice& dev,
                                                     const std::vector<char>& image,
                                                     abi::KernelInfo info,
                                                     cuda::Resources resources);

// A stream and its report buffer (prints, failed asserts and checked-mode faults of the
// launches since the last sync).
class CudaStream {
 public:
  static Result<std::unique_ptr<CudaStream>> create(const CudaDevice& dev);
  // Over a stream the caller owns (0 is the legacy default stream): never destroyed here.
  static Result<std::unique_ptr<CudaStream>> wrap(const CudaDevice& dev,
                                                  cuda_driver::CUstream external);
  ~CudaStream();
  cuda_driver::CUstream handle() const { return stream_; }

  // Launches with packed slots (the report slots are filled here).
  // `slots` must have room for the kernel's slots plus cuda::kReportSlots.
  Status launch(const std::shared_ptr<const CudaKernel>& k, const std::array<uint32_t, 3>& cubes,
                std::span<uint64_t> slots);
  // Waits for the stream; returns its prints in order and the first fault of its launches.
  Status sync(std::vector<std::string>& prints, std::optional<Error>& fault);

 private:
  std::shared_ptr<CudaContext> ctx_;
  cuda_driver::CUstream stream_ = nullptr;
  bool owned_ = true;  // false: a caller's stream, which kiln does not destroy
  cuda_driver::CUdeviceptr report_ = 0;
  uint32_t seq_ = 0;
  // The launches since the last sync that can report (prints, asserts, checked mode), by
  // sequence number.
  std::vector<std::pair<uint32_t, std::shared_ptr<const CudaKernel>>> launched_;
  bool reports_pending_ = false;
  Status reset_report();
};

// An event recorded on a CUDA stream.
struct CudaEvent {
  std::shared_ptr<CudaContext> ctx;
  cuda_driver::CUevent event = nullptr;
  ~CudaEvent();
};
Result<std::shared_ptr<CudaEvent>> record_event(const CudaDevice& dev,
                                                cuda_driver::CUstream stream);

}  // namespace kiln::detail
