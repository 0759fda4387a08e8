// CUDA devices, kernels, streams and reports.
#include "runtime/cuda/device.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "runtime/cuda/report.h"
#include "runtime/log.h"
#include "runtime/tensor.h"
#include "runtime/tma.h"

namespace kiln::detail {

using namespace cuda_driver;

namespace {

class CudaAllocator : public DeviceAllocator {
 public:
  explicit CudaAllocator(std::shared_ptr<CudaContext> ctx) : ctx_(std::move(ctx)) {}
  Result<void*> allocate(size_t bytes) override {
    KILN_TRY(ctx_->bind());
    CUdeviceptr p = 0;
    KILN_TRY(ctx_->check(ctx_->api->cuMemAlloc_v2(&p, bytes),
                         fmt::format("allocating {} bytes on cuda:{}", bytes, ctx_->ordinal)));
    return reinterpret_cast<void*>(p);
  }
  void free(void* p, size_t) override {
    if (ctx_->bind()) ctx_->api->cuMemFree_v2(reinterpret_cast<CUdeviceptr>(p));
  }
  size_t alignment() const override { return 256; }

 private:
  std::shared_ptr<CudaContext> ctx_;
};

}  // namespace

// ---- context and device ------------------------------------------------------------------------

CudaContext::~CudaContext() {
  if (ctx && api) api->cuDevicePrimaryCtxRelease_v2(device);
}

Status CudaContext::bind() const {
  thread_local CUcontext current = nullptr;
  if (current == ctx) return {};
  KILN_TRY(check(api->cuCtxSetCurrent(ctx),
                 fmt::format("making the context of cuda:{} current", ordinal)));
  current = ctx;
  return {};
}

Result<DeviceInfo> CudaDevice::describe(int ordinal) {
  KILN_ASSIGN(const Api* api, driver());
  if (ordinal < 0 || ordinal >= api->device_count)
    return Error(
        ErrorKind::NotFound,
        fmt::format(
            "there is no cuda:{}; this machine has {} CUDA device{} (cuda:0{})", ordinal,
            api->device_count, api->device_count == 1 ? "" : "s",
            api->device_count > 1 ? fmt::format(" to cuda:{}", api->device_count - 1) : ""));
  CUdevice dev = 0;
  KILN_TRY(check(*api, api->cuDeviceGet(&dev, ordinal), fmt::format("opening cuda:{}", ordinal)));
  char name[256] = {};
  KILN_TRY(
      check(*api, api->cuDeviceGetName(name, sizeof name - 1, dev), "reading the device name"));
  int major = 0, minor = 0, sms = 0;
  KILN_TRY(check(*api, api->cuDeviceGetAttribute(&major, ATTR_COMPUTE_CAPABILITY_MAJOR, dev),
                 "reading the compute capability"));
  KILN_TRY(check(*api, api->cuDeviceGetAttribute(&minor, ATTR_COMPUTE_CAPABILITY_MINOR, dev),
                 "reading the compute capability"));
  KILN_TRY(check(*api, api->cuDeviceGetAttribute(&sms, ATTR_MULTIPROCESSOR_COUNT, dev),
                 "reading the SM count"));
  size_t mem = 0;
  KILN_TRY(check(*api, api->cuDeviceTotalMem_v2(&mem, dev), "reading the device memory"));
  DeviceInfo info;
  info.name = fmt::format("cuda:{}", ordinal);
  info.description = name;
  info.cores = sms;
  info.vector_bits = 128;  // 16-byte loads and stores
  const int sm = major * 10 + minor;
  info.arch = fmt::format("sm_{}{}", sm, sm >= 90 ? "a" : "");
  info.memory_bytes = mem;
  info.dlpack_type = 2;  // kDLCUDA
  info.dlpack_id = ordinal;
  info.details = fmt::format("{}, {} SMs", info.arch, sms);
  return info;
}

Result<std::shared_ptr<CudaDevice>> CudaDevice::open(int ordinal, uint64_t memory_cap) {
  KILN_ASSIGN(DeviceInfo info, describe(ordinal));
  KILN_ASSIGN(const Api* api, driver());
  auto ctx = std::make_shared<CudaContext>();
  ctx->api = api;
  ctx->ordinal = ordinal;
  KILN_TRY(
      ctx->check(api->cuDeviceGet(&ctx->device, ordinal), fmt::format("opening cuda:{}", ordinal)));
  CUcontext c = nullptr;
  KILN_TRY(ctx->check(api->cuDevicePrimaryCtxRetain(&c, ctx->device),
                      fmt::format("creating a context on cuda:{}", ordinal)));
  ctx->ctx = c;
  KILN_TRY(ctx->bind());
  auto dev = std::shared_ptr<CudaDevice>(new CudaDevice);
  dev->ctx_ = ctx;
  dev->info_ = info;
  int v = 0;
  if (api->cuDeviceGetAttribute(&v, ATTR_MAX_GRID_DIM_Y, ctx->device) == CUDA_SUCCESS && v > 0)
    dev->max_grid_y_ = static_cast<uint32_t>(v);
  if (api->cuDeviceGetAttribute(&v, ATTR_MAX_GRID_DIM_Z, ctx->device) == CUDA_SUCCESS && v > 0)
    dev->max_grid_z_ = static_cast<uint32_t>(v);
  if (api->cuDeviceGetAttribute(&v, ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ctx->device) ==
          CUDA_SUCCESS &&
      v > 0)
    dev->max_shared_ = static_cast<uint32_t>(v);
  // The compile target: the device's own arch when NVRTC has it, else PTX for the newest
  // virtual arch NVRTC has that the device can run.
  KILN_ASSIGN(dev->target_, cuda::parse_target(info.arch));
  auto supported = cuda::supported_targets();
  if (!supported)
    return Error(ErrorKind::NotFound, fmt::format("cuda:{} needs NVRTC to compile kernels: {}",
                                                  ordinal, supported.error().message));
  if (std::find(supported->begin(), supported->end(), dev->target_.name()) == supported->end()) {
    dev->cubin_ = false;
    int best = 0;
    for (const std::string& t : *supported)
      if (auto p = cuda::parse_target(t); p && !p->arch_specific && p->sm <= dev->target_.sm)
        best = std::max(best, p->sm);
    if (best == 0)
      return Error(ErrorKind::Unsupported,
                   fmt::format("cuda:{} is {}, older than anything this NVRTC compiles for",
                               ordinal, info.arch));
    dev->target_ = cuda::Target{best, false};
  }
  const backend::Backend* b = backend::find("cuda");
  KILN_CHECK(b, "the CUDA backend is registered");
  KILN_ASSIGN(dev->backend_target_,
              b->parse_target(dev->cubin_ ? dev->target_.name() : dev->target_.compute()));
  describe_target(dev->info_, dev->backend_target_);
  dev->info_.shared_optin_bytes = dev->max_shared_;  // the driver's word over the table's
  dev->pool_ = std::make_shared<MemoryPool>(std::make_unique<CudaAllocator>(ctx), memory_cap);
  dev->pool_->set_reuse_fence([ctx] {
    if (ctx->bind()) ctx->api->cuCtxSynchronize();
  });
  return dev;
}

Status CudaDevice::upload(void* dst, const void* host, size_t bytes) {
  if (!bytes) return {};
  KILN_TRY(ctx_->bind());
  return ctx_->check(ctx_->api->cuMemcpyHtoD_v2(reinterpret_cast<CUdeviceptr>(dst), host, bytes),
                     fmt::format("copying {} bytes to {}", bytes, info_.name));
}
Status CudaDevice::download(void* host, const void* src, size_t bytes) {
  if (!bytes) return {};
  KILN_TRY(ctx_->bind());
  return ctx_->check(ctx_->api->cuMemcpyDtoH_v2(host, reinterpret_cast<CUdeviceptr>(src), bytes),
                     fmt::format("copying {} bytes from {}", bytes, info_.name));
}
Status CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes) return {};
  KILN_TRY(ctx_->bind());
  return ctx_->check(ctx_->api->cuMemcpyDtoD_v2(reinterpret_cast<CUdeviceptr>(dst),
                                                reinterpret_cast<CUdeviceptr>(src), bytes),
                     fmt::format("copying {} bytes on {}", bytes, info_.name));
}

// ---- kernels
// --------------------------------------------------------------------------------------

CudaKernel::~CudaKernel() {
  if (module && ctx && ctx->bind()) ctx->api->cuModuleUnload(module);
}

Result<std::shared_ptr<CudaKernel>> load_cuda_kernel(const CudaDevice& dev,
                                                     const std::vector<char>& image,
                                                     abi::KernelInfo info,
                                                     cuda::Resources resources) {
  const auto& ctx = dev.context();
  KILN_TRY(ctx->bind());
  if (info.shared_bytes > dev.max_shared_bytes())
    return Error(
        ErrorKind::Unsupported,
        fmt::format("kernel '{}' needs {} bytes of shared memory per cube; {} allows {}", info.name,
                    info.shared_bytes, dev.info().name, dev.max_shared_bytes()));
  auto k = std::make_shared<CudaKernel>();
  k->ctx = ctx;
  // PTX must end with a NUL for the driver; a CUBIN is used as it is.
  std::vector<char> img = image;
  if (!dev.cubin() && (img.empty() || img.back() != '\0')) img.push_back('\0');
  KILN_TRY(ctx->check(ctx->api->cuModuleLoadData(&k->module, img.data()),
                      fmt::format("loading kernel '{}' ({}) on {}", info.name,
                                  dev.cubin() ? "CUBIN" : "PTX", dev.info().name)));
  KILN_TRY(ctx->check(ctx->api->cuModuleGetFunction(&k->function, k->module, info.symbol.c_str()),
                      fmt::format("finding {} in its module", info.symbol)));
  if (info.dynamic_shared_bytes)
    KILN_TRY(ctx->check(
        ctx->api->cuFuncSetAttribute(k->function, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(info.dynamic_shared_bytes)),
        fmt::format("allowing kernel '{}' {} bytes of shared memory", info.name,
                    info.dynamic_shared_bytes)));
  k->has_reports = info.checked || !info.prints.empty() || !info.asserts.empty();
  k->info = std::move(info);
  k->resources = resources;
  return k;
}

// ---- TMA tensor maps ---------------------------------------------------------------------------

namespace {

// The driver's CUtensorMapDataType for an element type: its bits, for the 8-bit types.
int tensor_map_type(ir::ElemType e) {
  using ir::ElemType;
  switch (e) {
    case ElemType::Bool:
    case ElemType::I8:
    case ElemType::U8:
    case ElemType::F8E4M3:
    case ElemType::F8E5M2:
      return 0;  // UINT8
    case ElemType::I16:
    case ElemType::U16:
      return 1;  // UINT16
    case ElemType::U32:
      return 2;
    case ElemType::I32:
      return 3;
    case ElemType::U64:
      return 4;
    case ElemType::I64:
      return 5;
    case ElemType::F16:
      return 6;
    case ElemType::F32:
      return 7;
    case ElemType::F64:
      return 8;
    case ElemType::BF16:
      return 9;
  }
  return 0;
}

Status encode_tensor_maps(const CudaContext& ctx, const abi::KernelInfo& info,
                          std::span<uint64_t> slots) {
  if (info.tensor_maps.empty()) return {};
  const Api& api = *ctx.api;
  if (!api.cuTensorMapEncodeTiled)
    return Error(ErrorKind::Unsupported,
                 fmt::format("kernel '{}' copies through TMA, and the CUDA driver {} has no "
                             "cuTensorMapEncodeTiled (TMA needs a driver for CUDA 12 or newer)",
                             info.name, api.path));
  KILN_CHECK(cuda::tensor_map_offset(info) + cuda::kTensorMapBytes * info.tensor_maps.size() <=
                 slots.size() * 8,
             "encode_tensor_maps: no room for the tensor maps");
  auto* maps = reinterpret_cast<uint8_t*>(slots.data()) + cuda::tensor_map_offset(info);
  for (size_t i = 0; i < info.tensor_maps.size(); ++i) {
    const abi::TensorMapSite& site = info.tensor_maps[i];
    KILN_ASSIGN(const TmaTensor t, tma_tensor(info, site, slots));
    uint8_t* map = maps + cuda::kTensorMapBytes * i;
    if (ctx.tensor_maps.find(t, map)) continue;
    const uint32_t element_strides[5] = {1, 1, 1, 1, 1};
    const int swizzle = t.swizzle == 128 ? 3 : t.swizzle == 64 ? 2 : t.swizzle == 32 ? 1 : 0;
    if (t.im2col && !api.cuTensorMapEncodeIm2col)
      return Error(ErrorKind::Unsupported,
                   fmt::format("kernel '{}' loads im2col boxes, and the CUDA driver {} has no "
                               "cuTensorMapEncodeIm2col (a driver for CUDA 12 or newer has it)",
                               info.name, api.path));
    // Interleave none, L2 promotion of 128 bytes, zeros (0) or NaN (1: NAN_REQUEST_ZERO_FMA)
    // outside the tensor.
    const CUresult r =
        t.im2col
            ? api.cuTensorMapEncodeIm2col(map, tensor_map_type(t.elem), t.rank,
                                          reinterpret_cast<void*>(t.address), t.dims, t.strides + 1,
                                          t.lower, t.upper, t.channels, t.pixels, element_strides,
                                          0, swizzle, 2, t.fill_nan ? 1 : 0)
            : api.cuTensorMapEncodeTiled(map, tensor_map_type(t.elem), t.rank,
                                         reinterpret_cast<void*>(t.address), t.dims, t.strides + 1,
                                         t.box, element_strides, 0, swizzle, 2, t.fill_nan ? 1 : 0);
    KILN_TRY(check(api, r,
                   fmt::format("encoding the TMA tensor map of argument '{}' of kernel '{}' ({})",
                               info.layout.params[site.param].name, info.name, site.where)));
    ctx.tensor_maps.insert(t, map);
  }
  return {};
}

}  // namespace

// ---- streams and reports
// -----------------------------------------------------------------------------

Result<std::unique_ptr<CudaStream>> CudaStream::create(const CudaDevice& dev) {
  std::unique_ptr<CudaStream> s(new CudaStream);
  s->ctx_ = dev.context();
  KILN_TRY(s->ctx_->bind());
  const Api& api = *s->ctx_->api;
  KILN_TRY(s->ctx_->check(api.cuStreamCreate(&s->stream_, STREAM_DEFAULT),
                          fmt::format("creating a stream on {}", dev.info().name)));
  KILN_TRY(
      s->ctx_->check(api.cuMemAlloc_v2(&s->report_, sizeof(ReportHeader) + kPrintCapacity),
                     fmt::format("allocating a stream's report buffer on {}", dev.info().name)));
  KILN_TRY(s->reset_report());
  return s;
}

Result<std::unique_ptr<CudaStream>> CudaStream::wrap(const CudaDevice& dev,
                                                     cuda_driver::CUstream external) {
  std::unique_ptr<CudaStream> s(new CudaStream);
  s->ctx_ = dev.context();
  s->stream_ = external;
  s->owned_ = false;
  KILN_TRY(s->ctx_->bind());
  const Api& api = *s->ctx_->api;
  KILN_TRY(
      s->ctx_->check(api.cuMemAlloc_v2(&s->report_, sizeof(ReportHeader) + kPrintCapacity),
                     fmt::format("allocating a stream's report buffer on {}", dev.info().name)));
  KILN_TRY(s->reset_report());
  return s;
}

CudaStream::~CudaStream() {
  if (!ctx_ || !ctx_->bind()) return;
  // Launches still running write the report buffer: wait for them (on a caller's stream too)
  // before freeing it.
  if (stream_ || !owned_) ctx_->api->cuStreamSynchronize(stream_);
  if (stream_ && owned_) ctx_->api->cuStreamDestroy_v2(stream_);
  if (report_) ctx_->api->cuMemFree_v2(report_);
}

Status CudaStream::reset_report() {
  const ReportHeader h = empty_report();
  KILN_TRY(ctx_->check(ctx_->api->cuMemcpyHtoD_v2(report_, &h, sizeof h),
                       "resetting a stream's report buffer"));
  seq_ = 0;
  launched_.clear();
  reports_pending_ = false;
  return {};
}

Status CudaStream::launch(const std::shared_ptr<const CudaKernel>& k,
                          const std::array<uint32_t, 3>& cubes, std::span<uint64_t> slots) {
  KILN_TRY(ctx_->bind());
  const abi::KernelInfo& info = k->info;
  const uint32_t n = info.layout.slot_count;
  KILN_CHECK(slots.size() >= n + cuda::kReportSlots, "CudaStream::launch: too few argument slots");
  slots[n] = report_;
  slots[n + 1] = seq_;
  KILN_TRY(encode_tensor_maps(*ctx_, info, slots));
  void* params[] = {slots.data()};
  KILN_TRY(
      ctx_->check(ctx_->api->cuLaunchKernel(k->function, cubes[0], cubes[1], cubes[2],
                                            info.cube_dim[0], info.cube_dim[1], info.cube_dim[2],
                                            info.dynamic_shared_bytes, stream_, params, nullptr),
                  fmt::format("launching kernel '{}' on cuda:{}", info.name, ctx_->ordinal)));
  if (k->has_reports) {
    reports_pending_ = true;
    launched_.emplace_back(seq_, k);
  }
  if (seq_ < kMaxSeq) ++seq_;
  return {};
}

Status CudaStream::sync(std::vector<std::string>& prints, std::optional<Error>& fault) {
  KILN_TRY(ctx_->bind());
  const Api& api = *ctx_->api;
  KILN_TRY(ctx_->check(api.cuStreamSynchronize(stream_),
                       fmt::format("running kernels on cuda:{}", ctx_->ordinal)));
  if (!reports_pending_) {
    seq_ = 0;
    launched_.clear();
    return {};
  }
  ReportHeader h;
  KILN_TRY(
      ctx_->check(api.cuMemcpyDtoH_v2(&h, report_, sizeof h), "reading a stream's report buffer"));
  std::vector<unsigned char> arena(std::min(h.print_bytes, kPrintCapacity));
  if (!arena.empty())
    KILN_TRY(
        ctx_->check(api.cuMemcpyDtoH_v2(arena.data(), report_ + sizeof(ReportHeader), arena.size()),
                    "reading device prints"));
  auto kernel_of = [&](uint32_t seq) -> const abi::KernelInfo* {
    auto it = std::lower_bound(launched_.begin(), launched_.end(), seq,
                               [](const auto& e, uint32_t s) { return e.first < s; });
    return it != launched_.end() && it->first == seq ? &it->second->info : nullptr;
  };
  uint64_t key = 0;
  read_report(h, arena, kernel_of, prints, fault, key);
  return reset_report();
}

// ---- events
// -----------------------------------------------------------------------------------------

CudaEvent::~CudaEvent() {
  if (event && ctx && ctx->bind()) ctx->api->cuEventDestroy_v2(event);
}

Result<std::shared_ptr<CudaEvent>> record_event(const CudaDevice& dev, CUstream stream) {
  const auto& ctx = dev.context();
  KILN_TRY(ctx->bind());
  auto e = std::make_shared<CudaEvent>();
  e->ctx = ctx;
  KILN_TRY(ctx->check(ctx->api->cuEventCreate(&e->event, EVENT_DEFAULT), "creating an event"));
  KILN_TRY(ctx->check(ctx->api->cuEventRecord(e->event, stream), "recording an event"));
  return e;
}

// ---- the device interface (runtime/device.h)
// ------------------------------------------------------------------------

namespace {

class CudaLoaded final : public LoadedKernel {
 public:
  explicit CudaLoaded(std::shared_ptr<const CudaKernel> k) : k_(std::move(k)) {}
  const abi::KernelInfo& info() const override { return k_->info; }
  const std::shared_ptr<const CudaKernel>& kernel() const { return k_; }

 private:
  std::shared_ptr<const CudaKernel> k_;
};

class CudaDeviceEvent final : public DeviceEvent {
 public:
  std::shared_ptr<CudaEvent> e;
  Result<double> since(const DeviceEvent& earlier) const override {
    const auto* a = dynamic_cast<const CudaDeviceEvent*>(&earlier);
    if (!a || earlier.device != device)
      return Error(ErrorKind::InvalidArgument,
                   "elapsed_ms: the events come from different devices");
    const auto& ctx = e->ctx;
    KILN_TRY(ctx->bind());
    KILN_TRY(ctx->check(ctx->api->cuEventSynchronize(e->event), "waiting for an event"));
    float ms = 0;
    KILN_TRY(
        ctx->check(ctx->api->cuEventElapsedTime(&ms, a->e->event, e->event), "timing two events"));
    return static_cast<double>(ms);
  }
};

class CudaDeviceStream final : public DeviceStream {
 public:
  CudaDeviceStream(const CudaDevice& dev, std::unique_ptr<CudaStream> s)
      : dev_(dev), s_(std::move(s)) {}
  Status launch(const LoadedKernel& k, const std::array<uint32_t, 3>& cubes,
                std::span<const HostArg> args) override {
    const auto& ck = static_cast<const CudaLoaded&>(k).kernel();
    // The slots, then the tensor maps (cuda::tensor_map_offset): the kernel's args struct.
    alignas(128) std::array<uint64_t, 256 + 16 * cuda::kMaxTensorMaps> slots;
    if (ck->info.layout.slot_count + cuda::kReportSlots > 256)
      return Error(ErrorKind::Unsupported,
                   fmt::format("kernel '{}' has too many argument slots", ck->info.name));
    KILN_TRY(pack_args_into(ck->info, cubes, args, slots));
    return s_->launch(ck, cubes, slots);
  }
  Status sync(std::vector<std::string>& prints, std::optional<Error>& fault) override {
    return s_->sync(prints, fault);
  }
  Result<std::shared_ptr<DeviceEvent>> record() override {
    auto e = std::make_shared<CudaDeviceEvent>();
    KILN_ASSIGN(e->e, record_event(dev_, s_->handle()));
    e->device = &dev_;
    return std::shared_ptr<DeviceEvent>(std::move(e));
  }
  Status wait(const DeviceEvent& event) override {
    const auto* e = dynamic_cast<const CudaDeviceEvent*>(&event);
    if (!e || event.device != &dev_)
      return Error(ErrorKind::InvalidArgument, "wait: the event was not recorded on this GPU");
    const auto& ctx = e->e->ctx;
    KILN_TRY(ctx->bind());
    return ctx->check(ctx->api->cuStreamWaitEvent(s_->handle(), e->e->event, 0),
                      "making a stream wait for an event");
  }

 private:
  const CudaDevice& dev_;
  std::unique_ptr<CudaStream> s_;
};

// "cuda:3" -> 3; "cuda" is cuda:0.
std::optional<int> cuda_ordinal(std::string_view name) {
  if (name == "cuda") return 0;
  if (name.rfind("cuda:", 0) != 0 || name.size() == 5 || name.size() > 8) return std::nullopt;
  int v = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

const bool g_registered = [] {
  DeviceFamily f;
  f.name = "cuda";
  f.syntax = "cuda:N";
  // "cuda", "cuda:N" and misspellings of them ("cuda3"), not the emulator ("cuda-emu").
  f.claims = [](std::string_view n) { return n.starts_with("cuda") && !n.starts_with("cuda-"); };
  f.list = [] {
    std::vector<DeviceEntry> out;
    auto drv = driver();
    if (!drv) {
      DeviceEntry e;
      e.name = "cuda";
      e.reason = drv.error().message;
      out.push_back(std::move(e));
      return out;
    }
    for (int i = 0; i < (*drv)->device_count; ++i) {
      out.push_back(device_entry(fmt::format("cuda:{}", i), CudaDevice::describe(i)));
    }
    return out;
  };
  f.open = [](std::string_view name, uint64_t cap) -> Result<std::shared_ptr<Device>> {
    auto ordinal = cuda_ordinal(name);
    if (!ordinal)
      return Error(ErrorKind::NotFound,
                   fmt::format("'{}' is not a device name; write cuda:N, like cuda:0", name));
    auto drv = driver();
    if (!drv)
      return Error(ErrorKind::NotFound,
                   fmt::format("device '{}' is not available: {}", name, drv.error().message));
    auto dev = CudaDevice::open(*ordinal, cap);
    if (!dev)
      return Error(dev.error().kind,
                   fmt::format("device '{}' is not available: {}", name, dev.error().message));
    return std::shared_ptr<Device>(*dev);
  };
  register_device_family(std::move(f));
  return true;
}();

}  // namespace

std::string cuda_line_problem(const Tensor& t, int line, const std::string& device) {
  // GPUs read lines with vector loads, which need the pointer aligned to the line (up to 16
  // bytes).
  const uintptr_t align = std::min<uintptr_t>(16, static_cast<uintptr_t>(line) * t.element_bytes());
  const uintptr_t off = reinterpret_cast<uintptr_t>(t.data()) % align;
  if (off == 0) return {};
  return fmt::format(
      "{} starts {} bytes past a {}-byte boundary, but lines of {} need it aligned on {}; use a "
      "narrower line (Runtime::line_width picks one)",
      t.describe(), off, align, line, device);
}

std::string CudaDevice::line_problem(const Tensor& t, int line) const {
  return cuda_line_problem(t, line, info_.name);
}

std::string CudaDevice::grid_problem(const std::array<uint32_t, 3>& cubes) const {
  if (cubes[0] <= 0x7fffffffu && cubes[1] <= max_grid_y_ && cubes[2] <= max_grid_z_) return {};
  return fmt::format(
      "{}x{}x{} cubes; {} allows at most 2^31-1 in x, {} in y and {} in z (put the large count "
      "in x)",
      cubes[0], cubes[1], cubes[2], info_.name, max_grid_y_, max_grid_z_);
}

Result<std::shared_ptr<const LoadedKernel>> CudaDevice::load(const backend::Artifact& a) {
  KILN_ASSIGN(auto k,
              load_cuda_kernel(*this, a.image, a.info, cuda::resources_from_json(a.extra_json)));
  return std::shared_ptr<const LoadedKernel>(std::make_shared<CudaLoaded>(std::move(k)));
}

Result<std::unique_ptr<DeviceStream>> CudaDevice::new_stream() {
  KILN_ASSIGN(auto s, CudaStream::create(*this));
  return std::unique_ptr<DeviceStream>(std::make_unique<CudaDeviceStream>(*this, std::move(s)));
}

Result<std::unique_ptr<DeviceStream>> CudaDevice::wrap_stream(void* native) {
  KILN_ASSIGN(auto s, CudaStream::wrap(*this, static_cast<cuda_driver::CUstream>(native)));
  return std::unique_ptr<DeviceStream>(std::make_unique<CudaDeviceStream>(*this, std::move(s)));
}

}  // namespace kiln::detail
