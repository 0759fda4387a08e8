// The device interface behind a Runtime (ggml's ggml_backend_i is the model): one narrow table
// of memory, copies, loading a compiled artifact, streams with launch, sync and events. Each
// device family implements it in its own folder (runtime/cpu/, runtime/cuda/, runtime/emu/) and
// registers a DeviceFamily; Runtime, the specialization cache and the CLI never ask which device
// they hold.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/backend.h"
#include "runtime/args.h"
#include "runtime/memory.h"

namespace kiln {

class Tensor;

// What a device is, in the facts code chooses by: the library picks its strategies, `kiln run`
// its placement and DLPack its device type from these, never from which family the device is
// of, so that a new family gets the right behaviour by stating its facts.
struct DeviceInfo {
  std::string name;         // "cpu", "cuda:0", "cuda-emu"
  std::string description;  // the processor or GPU model
  int cores = 0;            // CPU threads kiln uses, or streaming multiprocessors
  int vector_bits = 0;      // the widest vector load: a CPU's SIMD register, 128 on a GPU
  std::string arch;         // CUDA: "sm_90"; CPU: the LLVM CPU name
  uint64_t memory_bytes = 0;
  bool host_memory = false;  // its memory is the host's: the CPU reads it directly
  // A cube's units are the SIMD lanes of one core (the CPU backend's model), so a cube is cheap
  // and a few units per cube are best; otherwise each unit is a thread of a GPU (or of its
  // emulation), and a cube of hundreds of units is the norm.
  bool lane_units = false;
  // It runs a GPU's code unit by unit on the host's cores: every result exact, every access
  // checked, but thousands of times slower than the GPU (benchmarks and huge jobs skip it).
  bool emulated = false;
  // It runs kernels written for any GPU architecture as they are (the CPU: its target has every
  // feature), so a kernel written for one needs no other device.
  bool any_arch = false;
  // How to open a device of this kind for another GPU architecture, with {} for it
  // ("cuda-emu:{}"); empty when it cannot.
  std::string retarget;
  // DLPack's device type and id for its memory (kDLCPU 1, kDLCUDA 2), or type 0 when other
  // frameworks cannot share it, and then why not ("the CUDA emulator checks every access...").
  int dlpack_type = 0, dlpack_id = 0;
  std::string dlpack_refusal;
  // From its compile target (describe_target): what it runs beyond every backend's ops
  // (wgmma, tcgen05, TMA...), units per plane, and the shared memory a cube gets by default.
  ir::Features features;
  // The fragment multiplies it runs (input type, accumulator, m x n x k): which input types its
  // tensor cores take (f8 from sm_89 on, for example).
  std::vector<ir::MatrixConfig> matrix;
  int plane_width = 1;
  uint64_t shared_bytes = 0;
  // The most shared memory one cube may use (a GPU's opt-in limit; launches ask for it): what
  // the library sizes its tiles by.
  uint64_t shared_optin_bytes = 0;
  std::string details;  // one line for `kiln devices`: "2 threads, 512-bit vectors"
};
// Fills the facts of `info` that its compile target gives (features, plane width, shared
// memory); each device calls it once its target is known.
void describe_target(DeviceInfo& info, const backend::Target& target);

// A compiled specialization loaded on a device, ready to launch.
class LoadedKernel {
 public:
  virtual ~LoadedKernel() = default;
  virtual const abi::KernelInfo& info() const = 0;
};

// A point in a device stream.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  // Milliseconds from `earlier` to this event, waiting for this one; both of this device.
  virtual Result<double> since(const DeviceEvent& earlier) const = 0;
  const void* device = nullptr;  // the Device that recorded it
};

// An event of a device whose launches finish before launch() returns (the CPU, the CUDA
// emulator): the host time at which it was recorded.
class HostEvent final : public DeviceEvent {
 public:
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  Result<double> since(const DeviceEvent& earlier) const override {
    const auto* e = dynamic_cast<const HostEvent*>(&earlier);
    if (!e || earlier.device != device)
      return Error(ErrorKind::InvalidArgument,
                   "elapsed_ms: the events come from different devices");
    return std::chrono::duration<double, std::milli>(at - e->at).count();
  }
};

// A queue of launches that run in order on one device. Not thread-safe: the runtime locks.
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  // Enqueues a launch. Faults, failed asserts and prints of the launch are kept until sync;
  // an error here is one of the launch itself (the driver refused it).
  virtual Status launch(const LoadedKernel& k, const std::array<uint32_t, 3>& cubes,
                        std::span<const HostArg> args) = 0;
  // Waits for everything enqueued; appends the prints in order and gives the first fault.
  virtual Status sync(std::vector<std::string>& prints, std::optional<Error>& fault) = 0;
  virtual Result<std::shared_ptr<DeviceEvent>> record() = 0;
  // Makes later launches on this stream wait for `event` (of the same device).
  virtual Status wait(const DeviceEvent& event) = 0;
};

// A stream of a device whose launches finish before launch() returns (the CPU, the CUDA
// emulator): an event is the host time it was recorded at, and waiting for one is free.
class HostStream : public DeviceStream {
 public:
  explicit HostStream(const void* device) : device_(device) {}
  Result<std::shared_ptr<DeviceEvent>> record() override;
  Status wait(const DeviceEvent& event) override;

 protected:
  const void* device_;  // the Device whose stream it is
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

  // What kernels for this device are compiled for. Its key is part of every specialization
  // and disk-cache key: equal keys mean interchangeable code.
  virtual const backend::Target& target() const = 0;
  const std::string& target_key() const { return target().key; }
  // The widest line width useful for elements of `bytes` bytes.
  virtual int max_lanes(int bytes) const = 0;
  // Why a tensor cannot be read in lines of `line` elements on this device beyond what every
  // device requires (e.g. a GPU's vector loads need the pointer aligned), or empty.
  virtual std::string line_problem(const Tensor& t, int line) const = 0;
  // Why this grid cannot be launched here, or empty.
  virtual std::string grid_problem(const std::array<uint32_t, 3>& cubes) const = 0;

  // Makes a compiled artifact (from the backend or the disk cache) launchable here.
  virtual Result<std::shared_ptr<const LoadedKernel>> load(const backend::Artifact& a) = 0;
  virtual Result<std::unique_ptr<DeviceStream>> new_stream() = 0;
  // A stream over a native stream the caller owns (a CUstream on CUDA), for launches that must
  // order with another framework's work; kiln neither creates nor destroys it.
  virtual Result<std::unique_ptr<DeviceStream>> wrap_stream(void* native);

 protected:
  std::shared_ptr<MemoryPool> pool_;
};

// A device whose memory lives in this process (the CPU, the emulator): copies are memcpy.
class HostMemoryDevice : public Device {
 public:
  Status upload(void* dst, const void* host, size_t bytes) override;
  Status download(void* host, const void* src, size_t bytes) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
};

// A family of devices ("cpu", "cuda"): how to list them and open one by name. Each family
// registers one (register_device_family, from its own file).
struct DeviceEntry {
  std::string name;  // "cpu", "cuda:0"; for an absent family, its name ("cuda")
  bool available = false;
  std::string reason;  // why not, when not available
  DeviceInfo info;
};
struct DeviceFamily {
  std::string name;  // "cpu", "cuda"
  // Whether a device name belongs to this family ("cuda:3").
  std::function<bool(std::string_view)> claims;
  std::function<std::vector<DeviceEntry>()> list;
  std::function<Result<std::shared_ptr<Device>>(std::string_view name, uint64_t memory_cap)> open;
  std::string syntax;  // how its devices are named, for messages: "cuda:N"
};
// The entry of a device named `name`: its facts when it opened, else why not.
DeviceEntry device_entry(std::string name, const Result<DeviceInfo>& info);
void register_device_family(DeviceFamily family);
std::vector<DeviceFamily> device_families();

}  // namespace kiln
