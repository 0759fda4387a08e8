// Loading the CUDA driver.
#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

namespace kiln::cuda_driver {

namespace {

template <class F>
bool bind(void* lib, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return fn != nullptr;
}

Result<Api> load() {
  const char* env = std::getenv("KILN_CUDA_DRIVER");
  const std::string path = env && *env ? env : "libcuda.so.1";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return Error(ErrorKind::NotFound, fmt::format("no CUDA driver ({})", dlerror()));
  Api api{};
  api.path = path;
  std::string missing;
#define KILN_BIND(name) bind(lib, #name, api.name, missing)
  KILN_BIND(cuInit);
  KILN_BIND(cuDriverGetVersion);
  KILN_BIND(cuGetErrorName);
  KILN_BIND(cuGetErrorString);
  KILN_BIND(cuDeviceGetCount);
  KILN_BIND(cuDeviceGet);
  KILN_BIND(cuDeviceGetName);
  KILN_BIND(cuDeviceGetAttribute);
  KILN_BIND(cuDeviceTotalMem_v2);
  KILN_BIND(cuDevicePrimaryCtxRetain);
  KILN_BIND(cuDevicePrimaryCtxRelease_v2);
  KILN_BIND(cuCtxSetCurrent);
  KILN_BIND(cuCtxSynchronize);
  KILN_BIND(cuMemAlloc_v2);
  KILN_BIND(cuMemFree_v2);
  KILN_BIND(cuMemGetInfo_v2);
  KILN_BIND(cuMemcpyHtoD_v2);
  KILN_BIND(cuMemcpyDtoH_v2);
  KILN_BIND(cuMemcpyDtoD_v2);
  KILN_BIND(cuMemcpyHtoDAsync_v2);
  KILN_BIND(cuMemsetD8_v2);
  KILN_BIND(cuStreamCreate);
  KILN_BIND(cuStreamDestroy_v2);
  KILN_BIND(cuStreamSynchronize);
  KILN_BIND(cuStreamWaitEvent);
  KILN_BIND(cuEventCreate);
  KILN_BIND(cuEventDestroy_v2);
  KILN_BIND(cuEventRecord);
  KILN_BIND(cuEventSynchronize);
  KILN_BIND(cuEventElapsedTime);
  KILN_BIND(cuModuleLoadData);
  KILN_BIND(cuModuleUnload);
  KILN_BIND(cuModuleGetFunction);
  KILN_BIND(cuFuncSetAttribute);
  KILN_BIND(cuLaunchKernel);
#undef KILN_BIND
  std::string optional;
  bind(lib, "cuTensorMapEncodeTiled", api.cuTensorMapEncodeTiled, optional);
  bind(lib, "cuTensorMapEncodeIm2col", api.cuTensorMapEncodeIm2col, optional);
  if (!missing.empty())
    return Error(
        ErrorKind::Unsupported,
        fmt::format(
            "the CUDA driver {} is too old: it lacks {} (kiln needs a driver for CUDA 12 or newer)",
            path, missing));
  if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NO_DEVICE)
      return Error(ErrorKind::NotFound, "the CUDA driver found no device");
    return Error(ErrorKind::Device,
                 fmt::format("the CUDA driver failed to start: {}", error_text(api, r)));
  }
  api.cuDriverGetVersion(&api.driver_version);
  if (CUresult r = api.cuDeviceGetCount(&api.device_count); r != CUDA_SUCCESS)
    return Error(ErrorKind::Device,
                 fmt::format("cannot count CUDA devices: {}", error_text(api, r)));
  if (api.device_count == 0) return Error(ErrorKind::NotFound, "the CUDA driver found no device");
  // The library stays loaded for the life of the process.
  return api;
}

}  // namespace

Result<const Api*> driver() {
  static std::once_flag once;
  static Result<Api>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<Api>(load()); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value();
}

std::string error_text(const Api& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &text);
  if (!name) return fmt::format("CUDA error {}", r);
  return text ? fmt::format("{} ({})", name, text) : std::string(name);
}

Status check(const Api& api, CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return {};
  return Error(r == CUDA_ERROR_OUT_OF_MEMORY ? ErrorKind::OutOfMemory : ErrorKind::Device,
               fmt::format("{}: {}", what, error_text(api, r)));
}

}  // namespace kiln::cuda_driver
