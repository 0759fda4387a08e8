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

// The targets the loaded NVRTC compiles for: sm_XY for each supported arch, and the
// arch-specific sm_XYa it accepts (probed with a tiny program, once per process).
Result<std::vector<std::string>> supported_targets();

// What ptxas reports for a kernel (NVRTC's log with -Xptxas=-v).
struct Resources {
  bool known = false;  // the report was found and parsed
  int registers = 0;   // per thread
  int barriers = 0;
  int shared_bytes = 0;  // static shared memory per cube
  int stack_bytes = 0;   // stack frame per thread
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int constant_bytes = 0;  // cmem[0]: parameters and constants
  // ptxas serialized the kernel's wgmma (its C7515 note): each waits for the one before, which
  // costs most of the tensor cores' rate. Its reason, as ptxas gave it, or empty.
  std::string wgmma_serialized;
};
// Parses the ptxas report in an NVRTC log.
Resources parse_resources(const std::string& log);
// The resources kept beside a compiled CUDA kernel (backend::Artifact::extra_json).
Resources resources_from_json(const std::string& extra_json);

struct CompiledCuda {
  std::string ptx;          // for the target's virtual arch (compute_XY[a])
  std::vector<char> cubin;  // for the target itself (sm_XY[a]); empty when only PTX was asked
  Resources resources;      // from the CUBIN compile
  std::string log;          // NVRTC's log (warnings, the ptxas report)
  double compile_ms = 0;
};

// Where NVRTC runs. In this process (the default: no process start, about 1 ms), or in a
// worker process of its own (kiln-nvrtc-worker, next to kiln's libraries), so that a crash
// inside NVRTC (its embedded ptxas has been seen to crash on some wgmma code that the
// standalone ptxas accepts) is a compile error instead of the end of the host program.
enum class NvrtcMode { InProcess, Worker };
// KILN_NVRTC=inprocess|worker chooses for every compile; any other value is an error naming
// the variable.
Result<NvrtcMode> nvrtc_mode_from_env();

// Compiles CUDA C++ (with the kiln prelude available to #include) for `arch` ("sm_90a" gives
// PTX and CUBIN; "compute_90a" only PTX), with -lineinfo and, if asked, fast math. A failure
// is an error holding the compiler's log and the source it compiled. Without a mode,
// KILN_NVRTC decides (in process by default).
Result<CompiledCuda> compile_cuda(const std::string& source, const std::string& name,
                                  const std::string& arch, bool fast_math);
Result<CompiledCuda> compile_cuda(const std::string& source, const std::string& name,
                                  const std::string& arch, bool fast_math, NvrtcMode mode);

// The worker's side (kiln-nvrtc-worker): reads one request from `in`, compiles it in this
// process, writes the answer to `out`; returns the process's exit status.
int nvrtc_worker_main(int in, int out);

// In this process, whatever KILN_NVRTC says (the worker's own compile).
Result<CompiledCuda> compile_in_process(const std::string& source, const std::string& name,
                                        const std::string& arch, bool fast_math);

}  // namespace kiln::cuda
