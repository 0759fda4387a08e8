// dlopen-based loader for NVRTC.
#include "compiler/cuda/nvrtc.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

namespace kiln::cuda {

namespace {

std::vector<std::string> candidate_paths() {
  std::vector<std::string> paths;
  if (const char* p = std::getenv("CUDA_PATH"); p && *p) {
    paths.push_back(fmt::format("{}/lib64/libnvrtc.so", p));
    paths.push_back(fmt::format("{}/lib/libnvrtc.so", p));
  }
  paths.push_back("/usr/local/cuda/lib64/libnvrtc.so");
  for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) paths.push_back(name);
  return paths;
}

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

Result<NvrtcApi> load() {
  std::string tried;
  void* lib = nullptr;
  std::string path;
  for (const std::string& p : candidate_paths()) {
    lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      path = p;
      break;
    }
    tried += fmt::format("\n  {}: {}", p, dlerror());
  }
  if (!lib)
    return Error(ErrorKind::NotFound,
                 fmt::format("NVRTC not found (set CUDA_PATH to a CUDA toolkit); tried:{}", tried));
  NvrtcApi api;
  api.path = path;
  bool ok = bind(lib, "nvrtcVersion", api.version) &&
            bind(lib, "nvrtcGetNumSupportedArchs", api.num_supported_archs) &&
            bind(lib, "nvrtcGetSupportedArchs", api.supported_archs) &&
            bind(lib, "nvrtcCreateProgram", api.create_program) &&
            bind(lib, "nvrtcCompileProgram", api.compile_program) &&
            bind(lib, "nvrtcGetProgramLogSize", api.get_program_log_size) &&
            bind(lib, "nvrtcGetProgramLog", api.get_program_log) &&
            bind(lib, "nvrtcGetPTXSize", api.get_ptx_size) &&
            bind(lib, "nvrtcGetPTX", api.get_ptx) &&
            bind(lib, "nvrtcGetCUBINSize", api.get_cubin_size) &&
            bind(lib, "nvrtcGetCUBIN", api.get_cubin) &&
            bind(lib, "nvrtcDestroyProgram", api.destroy_program) &&
            bind(lib, "nvrtcGetErrorString", api.get_error_string);
  if (!ok)
    return Error(ErrorKind::Unsupported,
                 fmt::format("{} lacks a function kiln needs: {}", path, dlerror()));
  if (api.version(&api.major, &api.minor) != 0)
    return Error(ErrorKind::Unsupported, fmt::format("{}: nvrtcVersion failed", path));
  // The library stays loaded for the life of the process.
  return api;
}

}  // namespace

Result<const NvrtcApi*> nvrtc() {
  static std::once_flag once;
  static Result<NvrtcApi>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<NvrtcApi>(load()); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value();
}

Result<std::vector<int>> nvrtc_supported_archs() {
  KILN_ASSIGN(const NvrtcApi* api, nvrtc());
  int n = 0;
  if (api->num_supported_archs(&n) != 0 || n < 0)
    return Error(ErrorKind::Compile, "nvrtcGetNumSupportedArchs failed");
  std::vector<int> archs(static_cast<size_t>(n));
  if (n > 0 && api->supported_archs(archs.data()) != 0)
    return Error(ErrorKind::Compile, "nvrtcGetSupportedArchs failed");
  return archs;
}

}  // namespace kiln::cuda
