// Running test kernels on cuda:0 with host-memory arguments, so that the CPU backend's numeric
// tests run unchanged on a GPU (cpu_test_util.h switches to these under KILN_TEST_CUDA): each
// tensor or array is copied to the device (its whole footprint), the kernel runs, and every
// buffer is copied back.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backend.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/passes/pipeline.h"
#include "runtime/cpu_exec.h"
#include "runtime/cuda_device.h"

namespace kiln::test {

struct Gpu {
  std::shared_ptr<detail::CudaDevice> device;
  std::unique_ptr<detail::CudaStream> stream;
  std::mutex mu;
};

// cuda:0, opened once; null (with the reason) when there is none.
inline Gpu* gpu(std::string* why = nullptr) {
  static Gpu* g = nullptr;
  static std::string reason;
  static std::once_flag once;
  std::call_once(once, [] {
    auto dev = detail::CudaDevice::open(0, 0);
    if (!dev) {
      reason = dev.error().message;
      return;
    }
    auto s = detail::CudaStream::create(**dev);
    if (!s) {
      reason = s.error().message;
      return;
    }
    g = new Gpu{*dev, std::move(*s), {}};
  });
  if (!g && why) *why = reason;
  return g;
}

struct GpuKernel {
  std::shared_ptr<const detail::CudaKernel> kernel;
  const abi::KernelInfo& info() const { return kernel->info; }
};

inline std::unique_ptr<GpuKernel> compile_gpu(const ir::Kernel& k) {
  Gpu* g = gpu();
  REQUIRE(g);
  auto prepared = backend::find("cuda")->prepare(k);
  REQUIRE(prepared.ok());
  auto src = cuda::generate(*prepared, {});
  INFO((src.ok() ? std::string() : src.error().message));
  REQUIRE(src.ok());
  const auto& t = g->device->compile_target();
  auto compiled = cuda::compile_cuda(src->text, k.name + ".cu",
                                     g->device->cubin() ? t.name() : t.compute(), false);
  INFO((compiled.ok() ? std::string() : compiled.error().message));
  REQUIRE(compiled.ok());
  std::vector<char> image = g->device->cubin()
                                ? compiled->cubin
                                : std::vector<char>(compiled->ptx.begin(), compiled->ptx.end());
  auto loaded = detail::load_cuda_kernel(*g->device, image, src->info, compiled->resources);
  INFO((loaded.ok() ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  return std::make_unique<GpuKernel>(GpuKernel{*loaded});
}

// Copies the arguments to the device, runs, copies them back. A fault or failed assert is an
// error, as from run_cpu.
inline Result<CpuRunReport> run_gpu(const GpuKernel& k, const std::array<uint32_t, 3>& cubes,
                                    std::span<const HostArg> args) {
  Gpu* g = gpu();
  if (!g) return Error(ErrorKind::NotFound, "no GPU");
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
  std::vector<uint64_t> slots(info.layout.slot_count + cuda::kReportSlots);
  KILN_TRY(pack_args_into(info, cubes, device_args, slots));
  KILN_TRY(g->stream->launch(k.kernel, cubes, slots));
  CpuRunReport report;
  std::optional<Error> fault;
  KILN_TRY(g->stream->sync(report.prints, fault));
  for (const Copy& c : copies) KILN_TRY(g->device->download(c.host, c.buffer.data(), c.bytes));
  if (fault) return *fault;
  return report;
}

}  // namespace kiln::test
