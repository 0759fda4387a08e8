// A test backend and device, registered from outside compiler/ and runtime/ through the same
// tables kiln's own use (compiler/backend.h, runtime/device.h): it proves the seam. Loaded as a
// plugin (`kiln show --plugin`, dsl::load_plugin), it adds
//   - the backend "mirror": target "mirror", the CPU's passes and code under its own name and
//     cache folder, a stage of its own, "summary" (how many ops of each kind the prepared
//     kernel has), and one op it does not support (print);
//   - the device family "mirror": a device that runs those kernels on the host CPU through the
//     CPU device's memory and streams.
// Nothing in runtime/ or tools/ knows it exists.
#include <map>

#include <fmt/format.h>

#include "compiler/backend.h"
#include "ir/ops.h"
#include "runtime/device.h"

namespace kiln::test {

namespace {

const backend::Backend& cpu_backend() {
  const backend::Backend* b = backend::find("cpu");
  KILN_CHECK(b, "the mirror backend needs the CPU backend");
  return *b;
}

// The CPU target the mirror target stands for.
const backend::Target& cpu_target_of(const backend::Target& t) {
  return *static_cast<const backend::Target*>(t.impl.get());
}

class MirrorBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return "mirror"; }
  std::string_view target_syntax() const override { return "mirror (the test backend)"; }
  bool claims(std::string_view text) const override { return text == "mirror"; }
  Result<backend::Target> parse_target(std::string_view) const override {
    KILN_ASSIGN(backend::Target cpu, cpu_backend().parse_target("cpu"));
    backend::Target t;
    t.backend = this;
    t.name = "mirror";
    t.key = "mirror/" + cpu.key;
    t.impl = std::make_shared<const backend::Target>(std::move(cpu));
    return t;
  }
  std::vector<std::string> list_targets() const override {
    return {"mirror   the host CPU under the test backend's name"};
  }
  int plane_width(const backend::Target& t) const override {
    return cpu_backend().plane_width(cpu_target_of(t));
  }
  // Smaller cubes than the CPU's, so the seam's limit check is tested.
  backend::Limits limits(const backend::Target& t) const override {
    backend::Limits l = cpu_backend().limits(cpu_target_of(t));
    l.max_units_per_cube = 256;
    return l;
  }
  // It lacks one op on purpose, so the seam's "unsupported op" error is tested.
  std::string unsupported(const ir::Kernel&, const ir::Op& op,
                          const backend::Target&) const override {
    return op.kind == ir::OpKind::Print ? "the mirror backend has no device-side print" : "";
  }
  const std::vector<backend::Stage>& own_stages() const override {
    static const std::vector<backend::Stage> s = {
        {"summary", ".summary.txt", "how many ops of each kind the prepared kernel has"}};
    return s;
  }
  Result<ir::Kernel> prepare(ir::Kernel traced, const DumpFn& dump) const override {
    return cpu_backend().prepare(std::move(traced), dump);
  }
  Result<std::string> emit(const ir::Kernel& prepared, std::string_view, const backend::Target&,
                           const backend::Options&) const override {
    std::map<std::string, int> counts;
    ir::walk(prepared.body, [&](const ir::Op& op) { ++counts[std::string(ir::op_name(op.kind))]; });
    std::string s = fmt::format("kernel {}: {} ops\n", prepared.name, ir::count_ops(prepared.body));
    for (const auto& [op, n] : counts) s += fmt::format("  {:<16} {}\n", op, n);
    return s;
  }
  Result<backend::Artifact> compile(const ir::Kernel& prepared, const backend::Target& t,
                                    const backend::Options& o) const override {
    KILN_ASSIGN(backend::Artifact a, cpu_backend().compile(prepared, cpu_target_of(t), o));
    a.timings.push_back({"summary", 0.0});
    return a;
  }
  std::string versions() const override { return "mirror 1 / " + cpu_backend().versions(); }
};

// A device that keeps the mirror target and lends everything else from a CPU device.
class MirrorDevice final : public Device {
 public:
  MirrorDevice(std::shared_ptr<Device> cpu, backend::Target target)
      : cpu_(std::move(cpu)), target_(std::move(target)) {
    pool_ = cpu_->pool();
    info_ = cpu_->info();
    info_.name = "mirror";
    info_.description = "the host CPU, through the test backend";
  }
  const DeviceInfo& info() const override { return info_; }
  bool host_accessible() const override { return true; }
  Status upload(void* d, const void* h, size_t n) override { return cpu_->upload(d, h, n); }
  Status download(void* h, const void* s, size_t n) override { return cpu_->download(h, s, n); }
  Status copy(void* d, const void* s, size_t n) override { return cpu_->copy(d, s, n); }
  const backend::Target& target() const override { return target_; }
  int max_lanes(int bytes) const override { return cpu_->max_lanes(bytes); }
  std::string line_problem(const Tensor& t, int line) const override {
    return cpu_->line_problem(t, line);
  }
  std::string grid_problem(const std::array<uint32_t, 3>& c) const override {
    return cpu_->grid_problem(c);
  }
  Result<std::shared_ptr<const LoadedKernel>> load(const backend::Artifact& a) override {
    return cpu_->load(a);
  }
  Result<std::unique_ptr<DeviceStream>> new_stream() override { return cpu_->new_stream(); }

 private:
  std::shared_ptr<Device> cpu_;
  backend::Target target_;
  DeviceInfo info_;
};

Result<std::shared_ptr<Device>> open_mirror(uint64_t cap) {
  for (const DeviceFamily& f : device_families())
    if (f.name == "cpu") {
      KILN_ASSIGN(std::shared_ptr<Device> cpu, f.open("cpu", cap));
      KILN_ASSIGN(backend::Target t, backend::find("mirror")->parse_target("mirror"));
      return std::shared_ptr<Device>(std::make_shared<MirrorDevice>(std::move(cpu), std::move(t)));
    }
  return Error(ErrorKind::NotFound, "the mirror device needs the CPU device");
}

const MirrorBackend g_backend;
const bool g_registered = [] {
  backend::register_backend(&g_backend);
  DeviceFamily f;
  f.name = "mirror";
  f.syntax = "mirror";
  f.claims = [](std::string_view n) { return n == "mirror"; };
  f.list = [] {
    DeviceEntry e;
    e.name = "mirror";
    if (auto d = open_mirror(0)) {
      e.available = true;
      e.info = (*d)->info();
    } else {
      e.reason = d.error().message;
    }
    return std::vector<DeviceEntry>{e};
  };
  f.open = [](std::string_view, uint64_t cap) { return open_mirror(cap); };
  register_device_family(std::move(f));
  return true;
}();

}  // namespace

}  // namespace kiln::test
