// The CUDA emulator as a kiln device: `cuda-emu` (sm_90a) and `cuda-emu:sm_XY[a]`. Kernels are
// the CUDA backend's CUDA C++ for that arch, compiled for the host by the cuda-emu backend
// (compiler/cuda/emu/backend.cpp) and run by the engine (exec.cpp). Its memory is host memory, but
// reached only through uploads and downloads, as a GPU's; its streams run each launch when it is
// enqueued (as the CPU's do) and report prints, asserts and checked-mode faults through the same
// report buffer as a GPU, plus the faults only the emulator sees.
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compiler/cuda/emu/backend.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/report.h"
#include "runtime/device.h"
#include "runtime/emu/exec.h"
#include "runtime/thread_pool.h"
#include "runtime/tma.h"

namespace kiln {

namespace {

using detail::ReportHeader;

class EmuAllocator final : public DeviceAllocator {
 public:
  Result<void*> allocate(size_t bytes) override {
    void* p = detail::emu::allocate(bytes);
    if (!p)
      return Error(ErrorKind::OutOfMemory,
                   fmt::format("allocating {} bytes on cuda-emu: out of host memory", bytes));
    return p;
  }
  void free(void* p, size_t) override { detail::emu::release(p); }
  size_t alignment() const override { return 256; }
};

class EmuKernel final : public LoadedKernel {
 public:
  std::shared_ptr<detail::emu::Module> module;
  abi::KernelInfo kernel_info;
  bool fibers = true;
  bool has_reports = false;
  const abi::KernelInfo& info() const override { return kernel_info; }
};

class EmuStream final : public HostStream {
 public:
  EmuStream(const void* device, std::string name)
      : HostStream(device),
        name_(std::move(name)),
        report_((sizeof(ReportHeader) + detail::kPrintCapacity) / 8) {
    reset();
  }
  Status launch(const LoadedKernel& k, const std::array<uint32_t, 3>& cubes,
                std::span<const HostArg> args) override {
    const auto& ek = static_cast<const EmuKernel&>(k);
    const abi::KernelInfo& info = ek.kernel_info;
    // The slots, then the tensor maps (cuda::tensor_map_offset), as the kernel's args struct.
    alignas(128) std::array<uint64_t, 256 + 16 * cuda::kMaxTensorMaps> slots{};
    if (info.layout.slot_count + cuda::kReportSlots > 256)
      return Error(ErrorKind::Unsupported,
                   fmt::format("kernel '{}' has too many argument slots", info.name));
    KILN_TRY(pack_args_into(info, cubes, args, slots));
    for (size_t i = 0; i < info.tensor_maps.size(); ++i) {
      KILN_ASSIGN(const TmaTensor t, tma_tensor(info, info.tensor_maps[i], slots));
      encode_emu_tensor_map(t, reinterpret_cast<uint8_t*>(slots.data()) +
                                   cuda::tensor_map_offset(info) + cuda::kTensorMapBytes * i);
    }
    slots[info.layout.slot_count] = reinterpret_cast<uint64_t>(report_.data());
    slots[info.layout.slot_count + 1] = seq_;
    detail::emu::Launch l;
    l.module = ek.module;
    l.kernel = info.name;
    l.device = name_;
    l.cubes = {cubes[0], cubes[1], cubes[2]};
    l.cube_dim = {info.cube_dim[0], info.cube_dim[1], info.cube_dim[2]};
    l.cluster_dim = {info.cluster_dim[0], info.cluster_dim[1], info.cluster_dim[2]};
    l.shared_bytes = info.shared_bytes;
    // A cluster's cubes interleave: their units are fibers even without barriers.
    l.fibers = ek.fibers || info.cluster_dim != std::array<uint32_t, 3>{1, 1, 1};
    l.slots = slots.data();
    if (auto f = detail::emu::run(l)) {
      const uint64_t key = detail::report_key(seq_, f->cube, f->unit);
      if (key < emu_fault_key_) {
        emu_fault_key_ = key;
        emu_fault_ = Error(ErrorKind::KernelFault, std::move(f->message));
      }
    }
    if (ek.has_reports) {
      reports_pending_ = true;
      launched_.emplace_back(seq_, info);
    }
    if (seq_ < detail::kMaxSeq) ++seq_;
    return {};
  }
  Status sync(std::vector<std::string>& prints, std::optional<Error>& fault) override {
    if (reports_pending_) {
      const auto& h = *reinterpret_cast<const ReportHeader*>(report_.data());
      const auto* arena = reinterpret_cast<const unsigned char*>(report_.data()) + sizeof h;
      auto kernel_of = [&](uint32_t seq) -> const abi::KernelInfo* {
        for (const auto& [s, info] : launched_)
          if (s == seq) return &info;
        return nullptr;
      };
      std::optional<Error> reported;
      uint64_t key = ~uint64_t{0};
      detail::read_report(h, {arena, detail::kPrintCapacity}, kernel_of, prints, reported, key);
      if (reported && key < emu_fault_key_) {
        emu_fault_ = std::move(reported);
        emu_fault_key_ = key;
      }
    }
    if (emu_fault_ && !fault) fault = std::move(emu_fault_);
    reset();
    return {};
  }

 private:
  void reset() {
    const ReportHeader h = detail::empty_report();
    std::memcpy(report_.data(), &h, sizeof h);
    seq_ = 0;
    launched_.clear();
    reports_pending_ = false;
    emu_fault_.reset();
    emu_fault_key_ = ~uint64_t{0};
  }

  std::string name_;
  std::vector<uint64_t> report_;  // the report buffer: header, then the print arena
  uint32_t seq_ = 0;
  std::vector<std::pair<uint32_t, abi::KernelInfo>> launched_;
  bool reports_pending_ = false;
  std::optional<Error> emu_fault_;  // the first fault the emulator found (not the kernel)
  uint64_t emu_fault_key_ = ~uint64_t{0};
};

class EmuDevice final : public HostMemoryDevice {
 public:
  EmuDevice(std::string name, backend::Target target, const cuda::emu::Arch& arch, uint64_t cap)
      : target_(std::move(target)), max_shared_(arch.max_shared_bytes) {
    pool_ = std::make_shared<MemoryPool>(std::make_unique<EmuAllocator>(), cap);
    info_.name = std::move(name);
    info_.description = fmt::format("CUDA {} emulated on the host", arch.target.name());
    info_.cores = ThreadPool::global().threads();
    info_.vector_bits = 128;
    info_.arch = arch.target.name();
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    info_.memory_bytes =
        pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
    info_.host_memory = true;
    info_.emulated = true;
    info_.retarget = "cuda-emu:{}";
    info_.dlpack_refusal = "the CUDA emulator checks every access against its own allocations";
    info_.details = fmt::format("{} on {} host threads; units are fibers, every access checked",
                                arch.target.name(), info_.cores);
    describe_target(info_, target_);
  }
  const DeviceInfo& info() const override { return info_; }
  bool host_accessible() const override { return false; }  // as a GPU's: copies only
  const backend::Target& target() const override { return target_; }
  int max_lanes(int bytes) const override { return bytes >= 16 ? 1 : 16 / bytes; }
  std::string line_problem(const Tensor& t, int line) const override {
    return detail::cuda_line_problem(t, line, info_.name);
  }
  std::string grid_problem(const std::array<uint32_t, 3>& cubes) const override {
    if (cubes[0] <= 0x7fffffffu && cubes[1] <= 65535 && cubes[2] <= 65535) return {};
    return fmt::format(
        "{}x{}x{} cubes; {} allows at most 2^31-1 in x, 65535 in y and 65535 in z (put the large "
        "count in x)",
        cubes[0], cubes[1], cubes[2], info_.name);
  }
  Result<std::shared_ptr<const LoadedKernel>> load(const backend::Artifact& a) override {
    if (a.info.shared_bytes > max_shared_)
      return Error(
          ErrorKind::Unsupported,
          fmt::format("kernel '{}' needs {} bytes of shared memory per cube; {} ({}) "
                      "allows {}",
                      a.info.name, a.info.shared_bytes, info_.name, info_.arch, max_shared_));
    auto k = std::make_shared<EmuKernel>();
    KILN_ASSIGN(k->module, detail::emu::load_module(a.image, a.info.name));
    k->kernel_info = a.info;
    auto j = nlohmann::json::parse(a.extra_json, nullptr, false);
    k->fibers = !j.is_object() || j.value("fibers", true);
    k->has_reports = a.info.checked || !a.info.prints.empty() || !a.info.asserts.empty();
    return std::shared_ptr<const LoadedKernel>(std::move(k));
  }
  Result<std::unique_ptr<DeviceStream>> new_stream() override {
    return std::unique_ptr<DeviceStream>(std::make_unique<EmuStream>(this, info_.name));
  }

 private:
  backend::Target target_;
  uint32_t max_shared_;
  DeviceInfo info_;
};

Result<std::shared_ptr<Device>> open_emu(std::string_view name, uint64_t cap) {
  const backend::Backend* b = backend::find("cuda-emu");
  KILN_CHECK(b, "the cuda-emu backend is registered");
  KILN_ASSIGN(backend::Target t, b->parse_target(name));
  KILN_TRY(cuda::emu::host_compiler());  // why the device is absent, when it is
  const cuda::emu::Arch& arch = cuda::emu::arch_of(t);
  return std::shared_ptr<Device>(
      std::make_shared<EmuDevice>(std::string(name), std::move(t), arch, cap));
}

const bool g_registered = [] {
  DeviceFamily f;
  f.name = "cuda-emu";
  f.syntax = "cuda-emu[:sm_XY[a]]";
  f.claims = [](std::string_view n) { return n.starts_with("cuda-emu"); };
  f.list = [] {
    auto dev = open_emu("cuda-emu", 0);
    return std::vector<DeviceEntry>{
        device_entry("cuda-emu", dev ? Result<DeviceInfo>((*dev)->info()) : dev.error())};
  };
  f.open = [](std::string_view name, uint64_t cap) -> Result<std::shared_ptr<Device>> {
    auto dev = open_emu(name, cap);
    if (!dev)
      return Error(dev.error().kind,
                   fmt::format("device '{}' is not available: {}", name, dev.error().message));
    return dev;
  };
  register_device_family(std::move(f));
  return true;
}();

}  // namespace

}  // namespace kiln
