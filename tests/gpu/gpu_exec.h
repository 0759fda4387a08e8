// Running test kernels on a CUDA device with host-memory arguments, so that the CPU backend's
// numeric tests run unchanged on a GPU (cpu_test_util.h switches to these under KILN_TEST_CUDA):
// each tensor or array is copied to the device (its whole footprint), the kernel runs, and every
// buffer is copied back. The device is the environment's KILN_TEST_DEVICE, cuda:0 by default:
// ctest runs the program as test_gpu on cuda:0 and as test_emu on the emulator (cuda-emu).
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backend.h"
#include "runtime/cpu/exec.h"
#include "runtime/device.h"

#include <cstdlib>

namespace kiln::test {

inline const char* test_device() {
  const char* d = std::getenv("KILN_TEST_DEVICE");
  return d && *d ? d : "cuda:0";
}
inline bool emulated() {
  return std::string(test_device()).starts_with("cuda-emu");
}

struct Gpu {
  std::shared_ptr<Device> device;
  std::unique_ptr<DeviceStream> stream;
  std::mutex mu;
};

// The test device, opened once; null (with the reason) when there is none.
inline Gpu* gpu(std::string* why = nullptr) {
  static Gpu* g = nullptr;
  static std::string reason;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string name = test_device();
    for (const DeviceFamily& f : device_families()) {
      if (!f.claims(name)) continue;
      auto dev = f.open(name, 0);
      if (!dev) {
        reason = dev.error().message;
        return;
      }
      auto s = (*dev)->new_stream();
      if (!s) {
        reason = s.error().message;
        return;
      }
      g = new Gpu{*dev, std::move(*s), {}};
      return;
    }
    reason = "no device family claims " + name;
  });
  if (!g && why) *why = reason;
  return g;
}

struct GpuKernel {
  std::shared_ptr<const LoadedKernel> kernel;
  const abi::KernelInfo& info() const { return kernel->info(); }
};

inline std::unique_ptr<GpuKernel> compile_gpu(const ir::Kernel& k) {
  Gpu* g = gpu();
  REQUIRE(g);
  const backend::Target& t = g->device->target();
  auto prepared = t.backend->prepare(k);
  INFO((prepared.ok() ? std::string() : prepared.error().message));
  REQUIRE(prepared.ok());
  auto compiled = t.backend->compile(*prepared, t, {});
  INFO((compiled.ok() ? std::string() : compiled.error().message));
  REQUIRE(compiled.ok());
  auto loaded = g->device->load(*compiled);
  INFO((loaded.ok() ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  return std::make_unique<GpuKernel>(GpuKernel{*loaded});
}

// Copies the arguments to the device, runs, copies them back. A fault or failed assert is an
// error, as from run_cpu.
inline Result<CpuRunReport> run_gpu(const GpuKernel& k, const std::array<uint32_t, 3>& cubes,
                                    std::span<const HostArg> args) {
  Gpu* g = gpu();
  if (!g) return Error(ErrorKind::NotFound, std::string("no ") + test_device());
  std::lock_guard<std::mutex> lock(g->mu);
  const abi::KernelInfo& info = k.info();
  struct Copy {
    void* host;
    Buffer buffer;
    size_t bytes;
  };
  std::vector<Copy> copies;
  std::vector<HostArg> device_args(args.begin(), args.end());
  for (size_t i = 0; i < args.size() && i < info.layout.params.size(); ++i) {
    const ir::Type& t = info.layout.params[i].type;
    const size_t es = static_cast<size_t>(ir::elem_bytes(t.elem));
    void* host = nullptr;
    size_t elements = 0;
    if (auto* v = std::get_if<TensorView>(&device_args[i])) {
      uint64_t last = 0, n = 1;
      for (int d = 0; d < v->rank; ++d) {
        n *= static_cast<uint64_t>(v->shape[d]);
        last += static_cast<uint64_t>(std::max<int64_t>(v->shape[d] - 1, 0)) *
                static_cast<uint64_t>(v->strides[d]);
      }
      host = v->data;
      elements = n == 0 ? 0 : last + 1;
    } else if (auto* a = std::get_if<ArrayView>(&device_args[i])) {
      host = a->data;
      elements = a->elements;
    } else {
      continue;
    }
    KILN_ASSIGN(Buffer b, Buffer::allocate(g->device->pool(), std::max<size_t>(elements * es, 1)));
    KILN_TRY(g->device->upload(b.data(), host, elements * es));
    if (auto* v = std::get_if<TensorView>(&device_args[i])) v->data = b.data();
    if (auto* a = std::get_if<ArrayView>(&device_args[i])) a->data = b.data();
    copies.push_back({host, std::move(b), elements * es});
  }
  KILN_TRY(g->stream->launch(*k.kernel, cubes, device_args));
  CpuRunReport report;
  std::optional<Error> fault;
  KILN_TRY(g->stream->sync(report.prints, fault));
  for (const Copy& c : copies) KILN_TRY(g->device->download(c.host, c.buffer.data(), c.bytes));
  if (fault) return *fault;
  return report;
}

}  // namespace kiln::test
