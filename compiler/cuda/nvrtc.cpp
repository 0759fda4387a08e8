// dlopen-based loader for NVRTC.
#include "compiler/cuda/nvrtc.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "compiler/cuda/codegen.h"

namespace kiln::cuda {

namespace {

std::vector<std::string> candidate_paths() {
  std::vector<std::string> paths;
  // A particular library first (a test's stand-in, another toolkit's NVRTC).
  if (const char* p = std::getenv("KILN_NVRTC_LIBRARY"); p && *p) paths.push_back(p);
  if (const char* p = std::getenv("CUDA_PATH"); p && *p) {
    paths.push_back(fmt::format("{}/lib64/libnvrtc.so", p));
    paths.push_back(fmt::format("{}/lib/libnvrtc.so", p));
  }
  paths.push_back("/usr/local/cuda/lib64/libnvrtc.so");
  for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
    paths.push_back(name);
  return paths;
}

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

Result<NvrtcApi> load() {
  // A library named on purpose is that library or an error, never a silent fall back to
  // another; and it must be a regular file (dlopen blocks on a FIFO).
  if (const char* p = std::getenv("KILN_NVRTC_LIBRARY"); p && *p) {
    struct stat st {};
    if (::stat(p, &st) != 0)
      return Error(ErrorKind::NotFound,
                   fmt::format("KILN_NVRTC_LIBRARY={}: {}", p, std::strerror(errno)));
    if (!S_ISREG(st.st_mode))
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("KILN_NVRTC_LIBRARY={}: not a regular file (name libnvrtc.so)", p));
  }
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
    if (const char* named = std::getenv("KILN_NVRTC_LIBRARY"); named && *named && p == named)
      return Error(ErrorKind::NotFound,
                   fmt::format("KILN_NVRTC_LIBRARY={} cannot be loaded:{}", named, tried));
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

namespace {
Result<std::vector<std::string>> probe_targets() {
  KILN_ASSIGN(std::vector<int> archs, nvrtc_supported_archs());
  KILN_ASSIGN(const NvrtcApi* api, nvrtc());
  std::vector<std::string> out;
  for (int sm : archs) {
    out.push_back(fmt::format("sm_{}", sm));
    if (sm < 90) continue;  // arch-specific variants start with Hopper
    NvrtcApi::Program prog = nullptr;
    if (api->create_program(&prog, "extern \"C\" __global__ void k() {}", "probe.cu", 0, nullptr,
                            nullptr) != 0)
      continue;
    const std::string opt = fmt::format("--gpu-architecture=compute_{}a", sm);
    const char* argv[] = {opt.c_str()};
    if (api->compile_program(prog, 1, argv) == 0) out.push_back(fmt::format("sm_{}a", sm));
    api->destroy_program(&prog);
  }
  return out;
}
}  // namespace

Result<std::vector<std::string>> supported_targets() {
  // Probing compiles a dozen tiny programs: once per process, not per runtime opened.
  static std::once_flag once;
  static Result<std::vector<std::string>>* targets = nullptr;
  std::call_once(once, [] { targets = new Result<std::vector<std::string>>(probe_targets()); });
  return *targets;
}

// The integer just before the first `suffix` in `log` that follows one (as in "Used 40
// registers"), if any: ptxas notes may use the same words without a number ("accumulator
// registers of a wgmma" in a C7515 performance note).
static bool number_before(const std::string& log, const std::string& suffix, int& out) {
  for (size_t at = log.find(suffix); at != std::string::npos; at = log.find(suffix, at + 1)) {
    size_t end = at;
    while (end > 0 && log[end - 1] == ' ') --end;
    size_t start = end;
    while (start > 0 && log[start - 1] >= '0' && log[start - 1] <= '9') --start;
    if (start == end) continue;
    out = std::stoi(log.substr(start, end - start));
    return true;
  }
  return false;
}

Resources parse_resources(const std::string& log) {
  Resources r;
  r.known = number_before(log, " registers", r.registers);
  number_before(log, " barriers", r.barriers);
  number_before(log, " bytes smem", r.shared_bytes);
  number_before(log, " bytes cmem[0]", r.constant_bytes);
  number_before(log, " bytes stack frame", r.stack_bytes);
  number_before(log, " bytes spill stores", r.spill_store_bytes);
  number_before(log, " bytes spill loads", r.spill_load_bytes);
  if (size_t at = log.find("(C7515)"); at != std::string::npos) {
    // "... wgmma.mma_async instructions are serialized due to <reason> in the function 'f'"
    const size_t eol = std::min(log.find('\n', at), log.size());
    std::string note = log.substr(at, eol - at);
    const size_t due = note.find("due to ");
    const size_t in_fn = note.rfind(" in the function");
    r.wgmma_serialized =
        due == std::string::npos
            ? note
            : note.substr(
                  due + 7,
                  (in_fn == std::string::npos || in_fn < due ? note.size() : in_fn) - (due + 7));
  }
  return r;
}

Result<CompiledCuda> compile_in_process(const std::string& source, const std::string& name,
                                        const std::string& arch, bool fast_math) {
  KILN_ASSIGN(const NvrtcApi* api, nvrtc());
  const auto t0 = std::chrono::steady_clock::now();
  NvrtcApi::Program prog = nullptr;
  const char* headers[] = {prelude().c_str()};
  const char* header_names[] = {kPreludeName};
  if (int rc = api->create_program(&prog, source.c_str(), name.c_str(), 1, headers, header_names);
      rc != 0)
    return Error(ErrorKind::Compile,
                 fmt::format("NVRTC cannot create a program: {}", api->get_error_string(rc)));
  const bool real = arch.rfind("sm_", 0) == 0;
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "-lineinfo", "-std=c++17",
                                   "-default-device"};
  if (real) opts.push_back("-Xptxas=-v");
  // The IR rounds every add and multiply on its own (ir/ir.h; a fused one is an explicit fma),
  // as the CPU and the emulator (-ffp-contract=off) do: NVRTC must not contract them into FMAs
  // either, or a GPU's results would differ from theirs in the last bits (fast math allows it).
  opts.push_back(fast_math ? "--use_fast_math" : "--fmad=false");
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  const int rc = api->compile_program(prog, static_cast<int>(argv.size()), argv.data());
  CompiledCuda out;
  size_t n = 0;
  if (api->get_program_log_size(prog, &n) == 0 && n > 1) {
    out.log.resize(n);
    api->get_program_log(prog, out.log.data());
    out.log.resize(n - 1);
  }
  if (rc != 0) {
    api->destroy_program(&prog);
    std::string numbered;
    int line_no = 1;
    size_t start = 0;
    while (start < source.size()) {
      const size_t end = source.find('\n', start);
      numbered += fmt::format("{:4}  {}\n", line_no++,
                              source.substr(start, end == std::string::npos ? end : end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return Error(
        ErrorKind::Compile,
        fmt::format("NVRTC failed to compile {} for {} ({}):\n{}\n-- the generated CUDA C++ --\n{}",
                    name, arch, api->get_error_string(rc), out.log, numbered));
  }
  if (api->get_ptx_size(prog, &n) == 0 && n > 0) {
    out.ptx.resize(n);
    api->get_ptx(prog, out.ptx.data());
    if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  if (real && api->get_cubin_size(prog, &n) == 0 && n > 0) {
    out.cubin.resize(n);
    api->get_cubin(prog, out.cubin.data());
  }
  api->destroy_program(&prog);
  out.resources = parse_resources(out.log);
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kiln::cuda
