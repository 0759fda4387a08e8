// The cuda-emu backend (backend.h): CUDA C++ from the CUDA code generator, compiled for the host.
#include "compiler/cuda/emu/backend.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <fmt/format.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "compiler/cuda/emu/abi.h"
#include "compiler/cuda/family.h"

extern char** environ;

namespace kiln::cuda {

extern const char* const kEmuHostText;  // host.h, embedded by the build
extern const char* const kEmuAbiText;   // abi.h

namespace emu {

namespace {

std::string temp_root() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// The build folders and logs of compiles are named kiln-emu-<pid>-XXXXXX and
// kiln-emu-log-<pid>-XXXXXX. A process killed mid-compile cannot remove its own, so the first
// compile of each process removes those of this user whose process no longer exists.
void remove_orphans(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::string_view rest = name;
    if (rest.starts_with("kiln-emu-log-"))
      rest.remove_prefix(13);
    else if (rest.starts_with("kiln-emu-"))
      rest.remove_prefix(9);
    else
      continue;
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string_view::npos || dash > 9 ||
        rest.substr(0, dash).find_first_not_of("0123456789") != std::string_view::npos)
      continue;
    const auto pid = static_cast<pid_t>(std::stol(std::string(rest.substr(0, dash))));
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);
  }
}

// Runs a program (found on PATH) and waits for it; its exit status, with stdout and stderr in
// `output`. -1 when it could not be started.
int run_program(const std::vector<std::string>& argv, std::string& output) {
  std::string log_path = fmt::format("{}/kiln-emu-log-{}-XXXXXX", temp_root(), ::getpid());
  int log = ::mkstemp(log_path.data());
  if (log < 0) {
    output = fmt::format("cannot create a log file in {}: {}", temp_root(), std::strerror(errno));
    return -1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, log, 1);
  posix_spawn_file_actions_adddup2(&actions, log, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = -1;
  if (spawned == 0) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  std::ifstream in(log_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  output = ss.str();
  ::close(log);
  ::unlink(log_path.c_str());
  if (spawned != 0) {
    output = std::strerror(spawned);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Per-cube shared memory an arch allows at most (the opt-in limit of its GPUs).

std::string host_machine() {
  struct utsname u {};
  return ::uname(&u) == 0 ? std::string(u.machine) : std::string("unknown");
}

// Whether the kernel has barriers or plane operations (the multiply of matrix fragments
// among them): then its units must run as fibers.
bool needs_fibers(const ir::Kernel& k) {
  bool any = false;
  ir::walk(k.body, [&](const ir::Op& op) {
    switch (op.kind) {
      case ir::OpKind::SyncCube:
      case ir::OpKind::SyncPlane:
      case ir::OpKind::PlaneSum:
      case ir::OpKind::PlaneMin:
      case ir::OpKind::PlaneMax:
      case ir::OpKind::PlaneAny:
      case ir::OpKind::PlaneAll:
      case ir::OpKind::PlaneBroadcast:
      case ir::OpKind::PlaneShuffle:
      case ir::OpKind::PlaneShuffleXor:
      case ir::OpKind::FragMma:  // its emulation gathers operands from other lanes
      case ir::OpKind::FragMmaScaled:
        any = true;
        break;
      default:
        any = any || ir::is_cube_op(op.kind);  // they synchronize the cube, or wait on it
        break;
    }
  });
  return any;
}

// The translation unit the host compiler builds: the CUDA C++ exactly as NVRTC gets it, after
// kiln_emu.h, and the module's entry points (compiler/cuda/emu/abi.h).
//
// The code generator writes `#line L "file"` where the DSL line changes, meaning "what follows
// comes from L" for every line up to the next one; the preprocessor instead counts the lines
// after it. So that each statement reports its own DSL line to the emulator, the directive in
// effect is repeated before every line here (the "cuda" stage keeps the readable form).
std::string host_unit(const Source& src, const std::string& target) {
  std::string s = fmt::format(
      "// kernel '{}' for {}: the CUDA backend's CUDA C++, built for the host after kiln_emu.h.\n"
      "#include \"kiln_emu.h\"\n",
      src.info.name, target);
  std::string directive;
  size_t at = 0;
  while (at < src.text.size()) {
    size_t end = src.text.find('\n', at);
    if (end == std::string::npos) end = src.text.size();
    const std::string_view line(src.text.data() + at, end - at);
    if (line.starts_with("#line ")) {
      directive = line;
    } else {
      if (!directive.empty() && !line.empty()) s += directive + "\n";
      s += line;
      s += '\n';
    }
    at = end + 1;
  }
  s += fmt::format(
      "\n#line 1 \"kiln-emu-entry\"\n"
      "#define KILN_EMU_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n"
      "KILN_EMU_EXPORT uint32_t kiln_emu_abi() {{ return ::kiln::emu::kAbiVersion; }}\n"
      "KILN_EMU_EXPORT void kiln_emu_bind(const ::kiln::emu::Api* api) {{ "
      "::kiln::emu::g_api = api; }}\n"
      "KILN_EMU_EXPORT void kiln_emu_unit(const void* slots) {{\n"
      "  {}(*static_cast<const {}_args*>(slots));\n"
      "}}\n",
      src.info.symbol, src.info.symbol);
  return s;
}

const std::vector<std::string>& compile_flags() {
  // -ffp-contract=off: no fused multiply-adds the kernel did not ask for (exact IR semantics);
  // -fwrapv as a safety net under the prelude's wrapping arithmetic.
  static const std::vector<std::string> f = {"-std=c++20",
                                             "-O1",
                                             "-fPIC",
                                             "-shared",
                                             "-w",
                                             "-fwrapv",
                                             "-fno-strict-aliasing",
                                             "-ffp-contract=off",
                                             "-fvisibility=hidden",
                                             "-fno-exceptions",
                                             "-x",
                                             "c++"};
  return f;
}

// A temporary folder, removed with everything in it.
struct TempDir {
  std::string path;
  ~TempDir() {
    if (path.empty()) return;
    for (const char* f :
         {"kiln_emu.h", "kiln_emu_abi.h", "kiln_prelude.cuh", "kernel.cpp", "kernel.so"})
      ::unlink((path + "/" + f).c_str());
    ::rmdir(path.c_str());
  }
};

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out)
    return Error(ErrorKind::Io,
                 fmt::format("cuda-emu: cannot write {}: {}", path, std::strerror(errno)));
  return {};
}

class EmuBackend final : public GpuArchBackend {
 public:
  std::string_view name() const override { return "cuda-emu"; }
  const cuda::Target& arch(const backend::Target& t) const override { return arch_of(t).target; }
  std::string_view target_syntax() const override {
    return "cuda-emu (sm_90a) or cuda-emu:sm_XY[a] (the CUDA backend's code, run on the host)";
  }
  bool claims(std::string_view text) const override { return text.starts_with("cuda-emu"); }
  Result<backend::Target> parse_target(std::string_view text) const override {
    std::string_view arch = "sm_90a";
    if (text != "cuda-emu") {
      if (!text.starts_with("cuda-emu:"))
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("'{}' is not an emulator target; write cuda-emu or "
                                 "cuda-emu:sm_XY[a], like cuda-emu:sm_80",
                                 text));
      arch = text.substr(9);
    }
    auto t = cuda::parse_target(arch);
    if (!t)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("'{}' is not an emulator target: {}", text, t.error().message));
    Arch a;
    a.target = *t;
    a.max_shared_bytes = max_shared_optin(*t);
    const std::string name = fmt::format("cuda-emu:{}", t->name());
    return make_target(a.target, name, fmt::format("{}:{}", name, host_machine()),
                       std::make_shared<const Arch>(a));
  }
  std::vector<std::string> list_targets() const override {
    auto cxx = host_compiler();
    if (!cxx) return {fmt::format("cuda-emu not available: {}", cxx.error().message)};
    return {
        fmt::format("cuda-emu cuda-emu:sm_XY[a] (cuda-emu is sm_90a): CUDA C++ run on the "
                    "host by emulation, built with {}",
                    cxx->version)};
  }
  const std::vector<backend::Stage>& own_stages() const override {
    static const std::vector<backend::Stage> s = {
        {"cuda", ".cu", "the CUDA C++ the CUDA backend generates for the emulated arch"},
        {"host", ".emu.cpp", "the translation unit the host C++ compiler builds for cuda-emu"},
    };
    return s;
  }
  Result<std::string> emit(const ir::Kernel& prepared, std::string_view stage,
                           const backend::Target& t, const backend::Options& o) const override {
    KILN_ASSIGN(Source src, source(prepared, t, o));
    if (stage == "cuda") return std::move(src.text);
    return host_unit(src, t.name);
  }
  Result<std::string> key_text(const ir::Kernel& prepared, const backend::Target& t,
                               const backend::Options& o) const override {
    KILN_ASSIGN(Source src, source(prepared, t, o));
    return host_unit(src, t.name);
  }
  Result<backend::Artifact> compile(const ir::Kernel& prepared, const backend::Target& t,
                                    const backend::Options& o) const override {
    double codegen_ms = 0;
    KILN_ASSIGN(Source src, source(prepared, t, o, &codegen_ms));
    KILN_ASSIGN(backend::Artifact out, compile_source(src, t, needs_fibers(prepared)));
    out.timings.insert(out.timings.begin(), {"cuda", codegen_ms});
    return out;
  }
  std::string versions() const override {
    auto cxx = host_compiler();
    const std::string host = std::string(kEmuHostText) + kEmuAbiText;
    std::string flags;
    for (const std::string& f : compile_flags()) flags += " " + f;
    return fmt::format("host c++ {} /{} / emu-abi {} / prelude {:016x} / emu {:016x}",
                       cxx ? cxx->version : std::string("none"), flags, ::kiln::emu::kAbiVersion,
                       XXH3_64bits(prelude().data(), prelude().size()),
                       XXH3_64bits(host.data(), host.size()));
  }
};

const EmuBackend g_backend;
const bool g_registered = (backend::register_backend(&g_backend), true);

}  // namespace

const Arch& arch_of(const backend::Target& t) {
  return *static_cast<const Arch*>(t.impl.get());
}

Result<backend::Artifact> compile_source(const Source& src, const backend::Target& t, bool fibers) {
  using Clock = std::chrono::steady_clock;
  KILN_ASSIGN(HostCompiler cxx, host_compiler());
  const std::string unit = host_unit(src, t.name);
  TempDir dir;
  const std::string root = temp_root();
  static std::once_flag swept;
  std::call_once(swept, [&] { remove_orphans(root); });
  std::string templ = fmt::format("{}/kiln-emu-{}-XXXXXX", root, ::getpid());
  if (!::mkdtemp(templ.data()))
    return Error(ErrorKind::Io, fmt::format("cuda-emu: cannot create a folder in {}: {}", root,
                                            std::strerror(errno)));
  dir.path = templ;
  KILN_TRY(write_file(dir.path + "/kiln_emu.h", kEmuHostText));
  KILN_TRY(write_file(dir.path + "/kiln_emu_abi.h", kEmuAbiText));
  KILN_TRY(write_file(dir.path + "/kiln_prelude.cuh", prelude()));
  KILN_TRY(write_file(dir.path + "/kernel.cpp", unit));
  std::vector<std::string> argv = {cxx.command};
  for (const std::string& f : compile_flags()) argv.push_back(f);
  argv.insert(argv.end(), {dir.path + "/kernel.cpp", "-o", dir.path + "/kernel.so"});
  std::string log;
  const auto t1 = Clock::now();
  const int rc = run_program(argv, log);
  const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  if (rc != 0)
    return Error(ErrorKind::Compile,
                 fmt::format("cuda-emu: {} could not build kernel '{}' for the host (exit {}); "
                             "see `kiln show {} --target {} --emit host`:\n{}",
                             cxx.command, src.info.name, rc, src.info.name, t.name, log));
  std::ifstream in(dir.path + "/kernel.so", std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.empty())
    return Error(ErrorKind::Compile, fmt::format("cuda-emu: {} produced no module for kernel '{}'",
                                                 cxx.command, src.info.name));
  backend::Artifact out;
  out.image = std::move(image);
  out.image_kind = "host-shared-object";
  out.info = src.info;
  out.extra_json = nlohmann::json{{"fibers", fibers}}.dump();
  out.timings = {{"host", compile_ms}};
  return out;
}

Result<HostCompiler> host_compiler() {
  static std::once_flag once;
  static Result<HostCompiler> found = Error(ErrorKind::NotFound, "");
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("KILN_EMU_CXX"); env && *env)
      candidates = {env};
    else
      candidates = {"c++", "g++", "clang++"};
    std::string tried;
    for (const std::string& c : candidates) {
      std::string out;
      const int rc = run_program({c, "--version"}, out);
      if (rc == 0) {
        found = HostCompiler{c, out.substr(0, out.find('\n'))};
        return;
      }
      tried += fmt::format("{}{} ({})", tried.empty() ? "" : ", ", c,
                           rc < 0 ? out : fmt::format("exit {}", rc));
    }
    found = Error(ErrorKind::NotFound,
                  fmt::format("the CUDA emulator needs a host C++ compiler with C++20 and found "
                              "none: tried {}; install g++ or set KILN_EMU_CXX",
                              tried));
  });
  return found;
}

}  // namespace emu

}  // namespace kiln::cuda
