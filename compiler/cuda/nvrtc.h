// NVRTC, loaded at run time with dlopen: kiln builds and runs without the CUDA toolkit, and
// compiles CUDA kernels wherever libnvrtc.so is found ($CUDA_PATH, /usr/local/cuda, or the
// loader's path). The function table below is typed after nvrtc.h's ABI.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ir/result.h"

namespace kiln::cuda {

struct NvrtcApi {
  using Program = struct _nvrtcProgram*;
  int (*version)(int* major, int* minor) = nullptr;
  int (*num_supported_archs)(int* n) = nullptr;
  int (*supported_archs)(int* archs) = nullptr;
  int (*create_program)(Program* prog, const char* src, const char* name, int num_headers,
                        const char* const* headers, const char* const* include_names) = nullptr;
  int (*compile_program)(Program prog, int num_options, const char* const* options) = nullptr;
  int (*get_program_log_size)(Program prog, size_t* size) = nullptr;
  int (*get_program_log)(Program prog, char* log) = nullptr;
  int (*get_ptx_size)(Program prog, size_t* size) = nullptr;
  int (*get_ptx)(Program prog, char* ptx) = nullptr;
  int (*get_cubin_size)(Program prog, size_t* size) = nullptr;
  int (*get_cubin)(Program prog, char* cubin) = nullptr;
  int (*destroy_program)(Program* prog) = nullptr;
  const char* (*get_error_string)(int result) = nullptr;

  std::string path;  // the library that was loaded
  int major = 0, minor = 0;
};

// Loads NVRTC once (thread-safe) and returns its table, or why it is unavailable.
Result<const NvrtcApi*> nvrtc();

// The SM architectures the loaded NVRTC can compile for (e.g. 75, 80, ..., 120).
Result<std::vector<int>> nvrtc_supported_archs();

}  // namespace kiln::cuda
