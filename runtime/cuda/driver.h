// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1") through a typed table of
// the functions kiln uses (declared here after cuda.h's ABI, so kiln builds without a CUDA
// toolkit). `KILN_CUDA_DRIVER` names another library to load instead (a driver in an unusual
// place; the tests' fake drivers). No driver, an old driver or no device makes CUDA absent
// with the reason; nothing else is affected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ir/result.h"

namespace kiln::cuda_driver {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
// Device attributes.
inline constexpr int ATTR_MAX_GRID_DIM_Y = 6;
inline constexpr int ATTR_MAX_GRID_DIM_Z = 7;
inline constexpr int ATTR_MULTIPROCESSOR_COUNT = 16;
inline constexpr int ATTR_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int ATTR_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
// Function attributes.
inline constexpr int FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// Stream and event flags.
inline constexpr unsigned STREAM_DEFAULT = 0;  // synchronizes with the legacy default stream
inline constexpr unsigned EVENT_DEFAULT = 0;
inline constexpr unsigned EVENT_DISABLE_TIMING = 2;

struct Api {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetName)(char* name, int len, CUdevice device);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*cuDeviceTotalMem_v2)(size_t* bytes, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc_v2)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*cuMemFree_v2)(CUdeviceptr ptr);
  CUresult (*cuMemGetInfo_v2)(size_t* free, size_t* total);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*cuMemcpyDtoH_v2)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemcpyDtoD_v2)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
  CUresult (*cuMemsetD8_v2)(CUdeviceptr dst, unsigned char value, size_t bytes);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy_v2)(CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventDestroy_v2)(CUevent event);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end);
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule module, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction fn, int attribute, int value);
  CUresult (*cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared_bytes, CUstream stream,
                             void** params, void** extra);
  // Optional (null in a driver older than CUDA 12): encodes a TMA tensor map; the enums are the
  // driver's CUtensorMapDataType, ...Interleave, ...Swizzle, ...L2promotion, ...FloatOOBfill.
  CUresult (*cuTensorMapEncodeTiled)(void* map, int data_type, uint32_t rank, void* address,
                                     const uint64_t* dims, const uint64_t* strides,
                                     const uint32_t* box, const uint32_t* element_strides,
                                     int interleave, int swizzle, int l2_promotion, int oob_fill);
  // Optional too: an im2col tensor map (corners innermost spatial dimension first).
  CUresult (*cuTensorMapEncodeIm2col)(void* map, int data_type, uint32_t rank, void* address,
                                      const uint64_t* dims, const uint64_t* strides,
                                      const int* lower, const int* upper, uint32_t channels,
                                      uint32_t pixels, const uint32_t* element_strides,
                                      int interleave, int swizzle, int l2_promotion, int oob_fill);

  std::string path;        // the library loaded
  int driver_version = 0;  // e.g. 13000
  int device_count = 0;
};

// Loads and initializes the driver once (thread-safe): the table, or why CUDA is absent
// ("no CUDA driver (libcuda.so.1: cannot open shared object file ...)", "the CUDA driver has
// no device", ...).
Result<const Api*> driver();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a result code.
std::string error_text(const Api& api, CUresult r);

// Turns a driver call's result into a Status: "<what>: CUDA_ERROR_... (text)". Out of memory
// is ErrorKind::OutOfMemory, everything else ErrorKind::Device.
Status check(const Api& api, CUresult r, const std::string& what);

}  // namespace kiln::cuda_driver
