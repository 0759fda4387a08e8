// The host CPU as a kiln device: host memory, kernels loaded into the ORC JIT, and streams that
// run each launch when it is enqueued (the caller's thread takes part in the work). Ordering,
// errors-at-sync and events keep the asynchronous contract; a worker per stream would cost the
// launch budget (well under a microsecond) for no gain on a host with few cores.
#include <unistd.h>

#include <chrono>

#include <fmt/format.h>

#include "compiler/cpu/backend.h"
#include "runtime/cpu/exec.h"
#include "runtime/device.h"

namespace kiln {

namespace {

class CpuKernel final : public LoadedKernel {
 public:
  explicit CpuKernel(std::unique_ptr<cpu::CompiledKernel> k) : k_(std::move(k)) {}
  const abi::KernelInfo& info() const override { return k_->info(); }
  const cpu::CompiledKernel& code() const { return *k_; }

 private:
  std::unique_ptr<cpu::CompiledKernel> k_;
};

class CpuStream final : public HostStream {
 public:
  explicit CpuStream(const void* device) : HostStream(device) {}
  Status launch(const LoadedKernel& k, const std::array<uint32_t, 3>& cubes,
                std::span<const HostArg> args) override {
    const cpu::CompiledKernel& code = static_cast<const CpuKernel&>(k).code();
    std::array<uint64_t, 256> packed;
    if (code.info().layout.slot_count > packed.size())
      return Error(ErrorKind::Unsupported,
                   fmt::format("kernel '{}' has too many argument slots", code.info().name));
    KILN_TRY(pack_cpu_args_into(code, cubes, args, packed));
    CpuRunReport r = run_cpu_packed(code, packed.data(), cubes[0] * cubes[1] * cubes[2]);
    for (std::string& line : r.prints) prints_.push_back(std::move(line));
    if (r.fault && !fault_) fault_ = std::move(r.fault);
    return {};
  }
  Status sync(std::vector<std::string>& prints, std::optional<Error>& fault) override {
    for (std::string& line : prints_) prints.push_back(std::move(line));
    prints_.clear();
    if (fault_ && !fault) fault = std::move(fault_);
    fault_.reset();
    return {};
  }

 private:
  std::vector<std::string> prints_;
  std::optional<Error> fault_;
};

class CpuDevice final : public HostMemoryDevice {
 public:
  explicit CpuDevice(backend::Target target, uint64_t cap) : target_(std::move(target)) {
    const auto& t = *static_cast<const cpu::Target*>(target_.impl.get());
    cpu_ = t;
    pool_ = std::make_shared<MemoryPool>(make_host_allocator(), cap);
    info_.name = target_.name;  // "cpu", or "cpu:x86-64-v3" for another CPU's code
    info_.description = t.describe();
    info_.cores = ThreadPool::global().threads();
    info_.vector_bits = t.vector_bits;
    info_.arch = t.cpu;
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    info_.memory_bytes =
        pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
    info_.host_memory = true;
    info_.lane_units = true;
    info_.any_arch = true;
    info_.dlpack_type = 1;  // kDLCPU
    info_.details = fmt::format("{} threads, {}-bit vectors", info_.cores, info_.vector_bits);
    describe_target(info_, target_);
  }
  const DeviceInfo& info() const override { return info_; }
  bool host_accessible() const override { return true; }
  const backend::Target& target() const override { return target_; }
  int max_lanes(int bytes) const override { return cpu_.max_lanes(bytes); }
  std::string line_problem(const Tensor&, int) const override { return {}; }  // any alignment
  std::string grid_problem(const std::array<uint32_t, 3>&) const override { return {}; }
  Result<std::shared_ptr<const LoadedKernel>> load(const backend::Artifact& a) override {
    KILN_ASSIGN(auto k, cpu::load_object(cpu::ObjectCode{a.image, a.info}));
    return std::shared_ptr<const LoadedKernel>(std::make_shared<CpuKernel>(std::move(k)));
  }
  Result<std::unique_ptr<DeviceStream>> new_stream() override {
    return std::unique_ptr<DeviceStream>(std::make_unique<CpuStream>(this));
  }

 private:
  backend::Target target_;
  cpu::Target cpu_;
  DeviceInfo info_;
};

// `cpu` (the host) or `cpu:NAME[:FEATURES]`: code for another x86-64 CPU whose features this
// one has, e.g. cpu:x86-64-v3 to run the AVX2 code (8 lanes of f32) on an AVX-512 machine.
Result<std::shared_ptr<Device>> open_cpu(uint64_t cap, std::string_view name = "cpu") {
  const backend::Backend* b = backend::find("cpu");
  if (!b)
    return Error(ErrorKind::Unsupported,
                 "this kiln was built without the CPU backend (-DKILN_CPU=OFF, no LLVM); "
                 "configure with -DKILN_CPU=ON and LLVM 22 to run kernels on the CPU");
  KILN_ASSIGN(backend::Target t, b->parse_target(name));
  KILN_TRY(cpu::runs_on_host(*static_cast<const cpu::Target*>(t.impl.get())));
  KILN_TRY(cpu::start_jit());  // once per process, so that no launch pays for it
  return std::shared_ptr<Device>(std::make_shared<CpuDevice>(std::move(t), cap));
}

const bool g_registered = [] {
  DeviceFamily f;
  f.name = "cpu";
  f.syntax = "cpu[:NAME[:FEATURES]]";
  f.claims = [](std::string_view n) { return n == "cpu" || n.rfind("cpu:", 0) == 0; };
  f.list = [] {
    auto dev = open_cpu(0);
    return std::vector<DeviceEntry>{
        device_entry("cpu", dev ? Result<DeviceInfo>((*dev)->info()) : dev.error())};
  };
  f.open = [](std::string_view n, uint64_t cap) { return open_cpu(cap, n); };
  register_device_family(std::move(f));
  return true;
}();

}  // namespace

}  // namespace kiln
