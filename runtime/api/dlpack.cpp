// DLPack import and export (dlpack.h): kiln tensors over other frameworks' memory and the
// reverse, without copies.
#include "runtime/api/dlpack.h"

#include <array>
#include <cstdlib>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "runtime/runtime.h"

namespace kiln {
namespace {

Error bad(std::string what) {
  return Error(ErrorKind::InvalidArgument, "DLPack: " + std::move(what));
}

std::string dtype_text(DLDataType t) {
  static const char* const names[] = {"int",    "uint",    "float", "opaque",
                                      "bfloat", "complex", "bool"};
  const std::string lanes = t.lanes == 1 ? "" : fmt::format("x{}", t.lanes);
  if (t.code < 7) return fmt::format("{}{}{}", names[t.code], t.bits, lanes);
  if (t.code == kDLFloat8_e4m3fn) return "float8_e4m3fn" + lanes;
  if (t.code == kDLFloat8_e5m2) return "float8_e5m2" + lanes;
  return fmt::format("type code {} of {} bits{}", t.code, t.bits, lanes);
}

Result<ir::ElemType> elem_of(DLDataType t) {
  using ir::ElemType;
  if (t.lanes == 1) {
    switch (t.code) {
      case kDLFloat:
        if (t.bits == 16) return ElemType::F16;
        if (t.bits == 32) return ElemType::F32;
        if (t.bits == 64) return ElemType::F64;
        break;
      case kDLBfloat:
        if (t.bits == 16) return ElemType::BF16;
        break;
      case kDLFloat8_e4m3fn:
        if (t.bits == 8) return ElemType::F8E4M3;
        break;
      case kDLFloat8_e5m2:
        if (t.bits == 8) return ElemType::F8E5M2;
        break;
      case kDLInt:
        if (t.bits == 8) return ElemType::I8;
        if (t.bits == 16) return ElemType::I16;
        if (t.bits == 32) return ElemType::I32;
        if (t.bits == 64) return ElemType::I64;
        break;
      case kDLUInt:
        if (t.bits == 8) return ElemType::U8;
        if (t.bits == 16) return ElemType::U16;
        if (t.bits == 32) return ElemType::U32;
        if (t.bits == 64) return ElemType::U64;
        break;
      case kDLBool:
        if (t.bits == 8) return ElemType::Bool;
        break;
      default:
        break;
    }
  }
  return bad(
      fmt::format("element type {} has no kiln type (kiln has bool, i8-i64, u8-u64, f16, "
                  "bf16, f32, f64, f8e4m3 (float8_e4m3fn), f8e5m2, one lane each)",
                  dtype_text(t)));
}

std::string device_text(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
      return "CPU memory";
    case kDLCUDA:
      return fmt::format("CUDA memory of device {}", d.device_id);
    case kDLCUDAHost:
      return "CUDA pinned host memory";
    case kDLCUDAManaged:
      return "CUDA managed memory";
    default:
      return fmt::format("memory of DLPack device type {}", static_cast<int>(d.device_type));
  }
}

// Whether `rt` can use memory of `d` directly; otherwise why not.
std::string device_problem(const Runtime& rt, DLDevice d) {
  const DeviceInfo& info = rt.device();
  if (info.dlpack_type == 0 && !info.dlpack_refusal.empty())
    return fmt::format("{}, so it cannot wrap {}; allocate a kiln tensor on {} and upload the data",
                       info.dlpack_refusal, device_text(d), info.name);
  // Host memory serves a device whose memory is the host's; a GPU's own memory (or managed
  // memory) serves that GPU.
  const bool host = d.device_type == kDLCPU || d.device_type == kDLCUDAHost;
  if (info.dlpack_type == kDLCPU && info.host_memory && host) return {};
  if (info.dlpack_type == kDLCUDA && d.device_type == kDLCUDA && d.device_id == info.dlpack_id)
    return {};
  if (info.dlpack_type == kDLCUDA && d.device_type == kDLCUDAManaged) return {};
  return fmt::format(
      "{} cannot be used by a runtime on {}; open the runtime on the device the "
      "memory belongs to",
      device_text(d), info.name);
}

// Checks and wraps one DLTensor; `release` runs once the memory is no longer used (or at once
// when this fails).
Result<Tensor> wrap_dl(Runtime& rt, const DLTensor& t, bool read_only,
                       std::function<void()> release) {
  struct Guard {  // runs release on every error path before the buffer owns it
    std::function<void()>* r;
    ~Guard() {
      if (r && *r) (*r)();
    }
  } guard{&release};
  if (t.ndim < 0 || t.ndim > static_cast<int32_t>(kMaxTensorRank))
    return bad(fmt::format("{} dimensions; kiln tensors have 0 to {}", t.ndim, kMaxTensorRank));
  if (t.ndim > 0 && !t.shape) return bad(fmt::format("{} dimensions but no shape", t.ndim));
  KILN_ASSIGN(const ir::ElemType dtype, elem_of(t.dtype));
  if (std::string p = device_problem(rt, t.device); !p.empty()) return bad(p);
  if (!t.data && t.ndim > 0) {
    bool empty = false;
    for (int32_t d = 0; d < t.ndim; ++d) empty |= t.shape[d] == 0;
    if (!empty) return bad("a null data pointer");
  }
  const int64_t es = ir::elem_bytes(dtype);
  if (t.byte_offset % static_cast<uint64_t>(es) != 0)
    return bad(
        fmt::format("byte_offset {} is not a multiple of the element size {}", t.byte_offset, es));
  std::array<int64_t, kMaxTensorRank> shape{}, strides{};
  for (int32_t d = 0; d < t.ndim; ++d) {
    shape[static_cast<size_t>(d)] = t.shape[d];
    if (t.shape[d] < 0) return bad(fmt::format("dimension {} is {}", d, t.shape[d]));
  }
  if (t.strides) {
    for (int32_t d = 0; d < t.ndim; ++d) {
      if (t.strides[d] < 0 && t.shape[d] > 1)
        return bad(
            fmt::format("stride {} of dimension {} is negative; kiln tensors have "
                        "non-negative strides (copy the view into a contiguous one)",
                        t.strides[d], d));
      strides[static_cast<size_t>(d)] = t.shape[d] <= 1 ? 0 : t.strides[d];
    }
  } else {
    int64_t s = 1;
    for (int32_t d = t.ndim; d-- > 0;) {
      strides[static_cast<size_t>(d)] = s;
      s *= shape[static_cast<size_t>(d)];
    }
  }
  alignas(16) static char no_elements[16];  // where an empty tensor without data points
  void* base = t.data ? static_cast<void*>(static_cast<char*>(t.data) + t.byte_offset)
                      : static_cast<void*>(no_elements);
  if (reinterpret_cast<uintptr_t>(base) % static_cast<uintptr_t>(es) != 0)
    return bad(fmt::format("the data pointer {} is not aligned to the element size {}", base, es));
  const auto n = static_cast<size_t>(t.ndim);
  // wrap takes `release` only when it succeeds (then the buffer runs it); on an error the
  // guard runs it.
  KILN_ASSIGN(Tensor out, rt.wrap(base, dtype, std::span<const int64_t>(shape.data(), n),
                                  std::span<const int64_t>(strides.data(), n), release));
  guard.r = nullptr;
  return read_only ? out.as_read_only() : out;
}

// The exporter's side: a copy of the tensor (its buffer stays alive) and the arrays the
// DLTensor points into.
struct Exported {
  Tensor tensor;
  std::array<int64_t, kMaxTensorRank> shape{}, strides{};
};

Result<std::unique_ptr<Exported>> export_common(const Tensor& t, DLTensor& dl) {
  if (!t.valid()) return bad("export of an empty tensor handle");
  const DeviceInfo& info = t.device()->info();
  DLDevice dev{};
  if (info.dlpack_type == 0)
    return Error(
        ErrorKind::Unsupported,
        fmt::format("DLPack: tensors of {} cannot be exported: {} (download the data)", info.name,
                    info.dlpack_refusal.empty() ? "its memory is reached only through copies"
                                                : info.dlpack_refusal));
  dev.device_type = static_cast<DLDeviceType>(info.dlpack_type);
  dev.device_id = info.dlpack_id;
  auto e = std::make_unique<Exported>();
  e->tensor = t;
  for (int d = 0; d < t.rank(); ++d) {
    e->shape[static_cast<size_t>(d)] = t.shape(d);
    e->strides[static_cast<size_t>(d)] = t.stride(d);
  }
  dl.data = t.data();
  dl.device = dev;
  dl.ndim = t.rank();
  dl.dtype = dlpack_type(t.dtype());
  dl.shape = e->shape.data();
  dl.strides = e->strides.data();
  dl.byte_offset = 0;
  return e;
}

}  // namespace

DLDataType dlpack_type(ir::ElemType t) {
  using ir::ElemType;
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(ir::elem_bytes(t) * 8);
  switch (ir::elem_class(t)) {
    case ir::ElemClass::Bool:
      d.code = kDLBool;
      break;
    case ir::ElemClass::Signed:
      d.code = kDLInt;
      break;
    case ir::ElemClass::Unsigned:
      d.code = kDLUInt;
      break;
    case ir::ElemClass::Float:
      d.code = t == ElemType::BF16     ? kDLBfloat
               : t == ElemType::F8E4M3 ? kDLFloat8_e4m3fn
               : t == ElemType::F8E5M2 ? kDLFloat8_e5m2
                                       : kDLFloat;
      break;
  }
  return d;
}

Result<Tensor> from_dlpack(Runtime& rt, DLManagedTensorVersioned* m) {
  if (!m) return bad("a null managed tensor");
  auto release = [m] {
    if (m->deleter) m->deleter(m);
  };
  if (m->version.major != DLPACK_MAJOR_VERSION) {
    const DLPackVersion v = m->version;  // the deleter frees `m`
    release();
    return bad(fmt::format("version {}.{}; kiln reads major version {}", v.major, v.minor,
                           DLPACK_MAJOR_VERSION));
  }
  return wrap_dl(rt, m->dl_tensor, (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0, release);
}

Result<Tensor> from_dlpack(Runtime& rt, DLManagedTensor* m) {
  if (!m) return bad("a null managed tensor");
  return wrap_dl(rt, m->dl_tensor, false, [m] {
    if (m->deleter) m->deleter(m);
  });
}

Result<Tensor> from_dlpack_borrowed(Runtime& rt, const DLTensor& t, bool read_only) {
  return wrap_dl(rt, t, read_only, {});
}

Result<DLManagedTensorVersioned*> to_dlpack_versioned(const Tensor& t) {
  auto m = std::make_unique<DLManagedTensorVersioned>();
  KILN_ASSIGN(auto e, export_common(t, m->dl_tensor));
  m->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m->flags = t.read_only() ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  m->manager_ctx = e.release();
  m->deleter = [](DLManagedTensorVersioned* self) {
    delete static_cast<Exported*>(self->manager_ctx);
    delete self;
  };
  return m.release();
}

Result<DLManagedTensor*> to_dlpack(const Tensor& t) {
  if (t.read_only())
    return bad(
        "a read-only tensor cannot be exported in the unversioned form, which has no "
        "read-only flag; use the versioned form (to_dlpack_versioned)");
  auto m = std::make_unique<DLManagedTensor>();
  KILN_ASSIGN(auto e, export_common(t, m->dl_tensor));
  m->manager_ctx = e.release();
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<Exported*>(self->manager_ctx);
    delete self;
  };
  return m.release();
}

}  // namespace kiln
