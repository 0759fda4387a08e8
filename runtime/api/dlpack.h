/* DLPack, the tensor exchange ABI of NumPy, PyTorch, JAX, CuPy and others: the structures of
 * its specification (v1.0 versioned managed tensors and the older unversioned form), written
 * here from the specification so kiln needs no copy of anyone's header, and usable from C.
 * In C++, kiln::from_dlpack and kiln::to_dlpack wrap and export tensors without copies
 * (docs/embedding.md#dlpack). */
#ifndef KILN_RUNTIME_DLPACK_H
#define KILN_RUNTIME_DLPACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DLPACK_MAJOR_VERSION
/* Defined only when no other DLPack header came first: the layouts are the ABI, identical. */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
  kDLFloat8_e4m3fn = 10, /* DLPack 1.1: the FP8 codes kiln has */
  kDLFloat8_e5m2 = 12,
} DLDataTypeCode;

typedef struct {
  uint8_t code; /* DLDataTypeCode */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data; /* with byte_offset, the first element */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides; /* in elements; NULL: compact row-major */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif

#ifdef __cplusplus
}  // extern "C"

#include "ir/result.h"
#include "runtime/tensor.h"

namespace kiln {

class Runtime;

// Wraps a DLPack tensor as a kiln tensor of `rt`'s device, without a copy. kiln owns the
// managed tensor from here on, whether this succeeds or not: its deleter runs exactly once,
// when the last kiln tensor using the memory goes (or at once, on an error). CPU memory goes
// to the CPU device, CUDA memory of device N to cuda:N; the versioned form's read-only flag
// makes the tensor read-only. Errors name what does not fit: the device, the element type
// (lanes, sub-byte and complex types have no kiln type), negative strides.
Result<Tensor> from_dlpack(Runtime& rt, DLManagedTensorVersioned* managed);
Result<Tensor> from_dlpack(Runtime& rt, DLManagedTensor* managed);
// Wraps a DLPack tensor that the caller keeps alive and unchanged for as long as kiln uses it
// (one call that waits for its launches: what DLPack's exchange API calls a non-owning,
// temporary exchange), without taking ownership: nothing is released. The same checks as
// from_dlpack.
Result<Tensor> from_dlpack_borrowed(Runtime& rt, const DLTensor& t, bool read_only = false);

// Exports a tensor (its view: shape, strides, offset) as a managed tensor that keeps the
// memory alive until the consumer calls its deleter. CPU tensors export as kDLCPU, GPU
// tensors as kDLCUDA; read-only tensors carry DLPACK_FLAG_BITMASK_READ_ONLY (the unversioned
// form has no flags, and refuses read-only tensors).
Result<DLManagedTensorVersioned*> to_dlpack_versioned(const Tensor& t);
Result<DLManagedTensor*> to_dlpack(const Tensor& t);

// The DLPack type of a kiln element type (one lane).
DLDataType dlpack_type(ir::ElemType t);

}  // namespace kiln
#endif  // __cplusplus

#endif  // KILN_RUNTIME_DLPACK_H
