// NVRTC in a worker process (nvrtc.h, NvrtcMode::Worker): the request and answer travel over a
// socket pair as length-prefixed fields; a worker that dies (a crash inside NVRTC) is a
// compile error naming the signal, and the host program goes on.
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/cuda/nvrtc.h"

extern char** environ;

namespace kiln::cuda {

namespace {

constexpr uint32_t kRequestMagic = 0x4b4e5651;  // "KNVQ"
constexpr uint32_t kAnswerMagic = 0x4b4e5641;   // "KNVA"
constexpr const char* kWorkerName = "kiln-nvrtc-worker";

// ---- framing --------------------------------------------------------------------------------

void put_u32(std::string& b, uint32_t v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_bytes(std::string& b, const void* p, size_t n) {
  const uint64_t len = n;
  b.append(reinterpret_cast<const char*>(&len), sizeof len);
  b.append(static_cast<const char*>(p), n);
}
void put_text(std::string& b, const std::string& s) {
  put_bytes(b, s.data(), s.size());
}

struct Reader {
  const std::string& b;
  size_t at = 0;
  bool ok = true;
  uint32_t u32() {
    uint32_t v = 0;
    if (at + sizeof v > b.size()) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, b.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string text() {
    uint64_t n = 0;
    if (at + sizeof n > b.size()) {
      ok = false;
      return {};
    }
    std::memcpy(&n, b.data() + at, sizeof n);
    at += sizeof n;
    if (n > b.size() - at) {
      ok = false;
      return {};
    }
    std::string s = b.substr(at, n);
    at += n;
    return s;
  }
};

// A point after which the parent gives up on its worker (none on the worker's side).
using Deadline = std::optional<std::chrono::steady_clock::time_point>;

// Waits until `fd` is ready for `events`; false when the deadline passes first.
bool wait_ready(int fd, short events, const Deadline& deadline) {
  if (!deadline) return true;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          *deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (r > 0 || (r < 0 && errno != EINTR)) return true;  // ready, or an error the I/O reports
  }
}

// Writes all of `data` (no SIGPIPE: a worker that died is an error here, not a signal).
bool send_all(int fd, const std::string& data, const Deadline& deadline = {},
              bool* timed_out = nullptr) {
  size_t done = 0;
  while (done < data.size()) {
    if (!wait_ready(fd, POLLOUT, deadline)) {
      if (timed_out) *timed_out = true;
      return false;
    }
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done,
                             MSG_NOSIGNAL | (deadline ? MSG_DONTWAIT : 0));
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}
bool read_all(int fd, std::string& out, const Deadline& deadline = {}, bool* timed_out = nullptr) {
  char buf[65536];
  for (;;) {
    if (!wait_ready(fd, POLLIN, deadline)) {
      if (timed_out) *timed_out = true;
      return false;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, deadline ? MSG_DONTWAIT : 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

// How long a worker may take: KILN_NVRTC_TIMEOUT seconds, 300 by default.
Result<std::chrono::milliseconds> worker_timeout() {
  const char* v = std::getenv("KILN_NVRTC_TIMEOUT");
  if (!v || !*v) return std::chrono::milliseconds(300 * 1000);
  char* end = nullptr;
  const double secs = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(secs > 0) || secs > 86400)
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("KILN_NVRTC_TIMEOUT={}: give the seconds a compile in the NVRTC "
                             "worker may take (more than 0, at most 86400)",
                             v));
  return std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
}

// The worker program: KILN_NVRTC_WORKER, else beside kiln's libraries (build/bin next to
// build/lib, PREFIX/bin next to PREFIX/lib).
Result<std::string> worker_path() {
  if (const char* p = std::getenv("KILN_NVRTC_WORKER"); p && *p) return std::string(p);
  Dl_info info{};
  if (!dladdr(reinterpret_cast<const void*>(&nvrtc_worker_main), &info) || !info.dli_fname)
    return Error(ErrorKind::NotFound, "cannot tell where libkiln_compiler is, to find " +
                                          std::string(kWorkerName) + "; set KILN_NVRTC_WORKER");
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/'));
  if (dir.empty()) dir = ".";
  std::string tried;
  for (const std::string& p : {dir + "/../bin/" + kWorkerName, dir + "/" + kWorkerName,
                               dir + "/../libexec/" + kWorkerName}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0)
      return p;
    tried += "\n  " + p;
  }
  return Error(ErrorKind::NotFound,
               fmt::format("the NVRTC worker program ({}) is not installed next to kiln's "
                           "libraries; tried:{}\nset KILN_NVRTC_WORKER to its path, or compile "
                           "in process (KILN_NVRTC=inprocess)",
                           kWorkerName, tried));
}

}  // namespace

Result<NvrtcMode> nvrtc_mode_from_env() {
  const char* v = std::getenv("KILN_NVRTC");
  if (!v || !*v || std::strcmp(v, "inprocess") == 0) return NvrtcMode::InProcess;
  if (std::strcmp(v, "worker") == 0) return NvrtcMode::Worker;
  return Error(ErrorKind::InvalidArgument,
               fmt::format("KILN_NVRTC={}: use 'inprocess' (the default) or 'worker' (NVRTC in "
                           "a process of its own)",
                           v));
}

Result<CompiledCuda> compile_cuda(const std::string& source, const std::string& name,
                                  const std::string& arch, bool fast_math) {
  KILN_ASSIGN(const NvrtcMode mode, nvrtc_mode_from_env());
  return compile_cuda(source, name, arch, fast_math, mode);
}

#if defined(__SANITIZE_ADDRESS__)
#define KILN_WORKER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_WORKER_ASAN 1
#endif
#endif

namespace {

// The worker's environment: this process's. In a build under AddressSanitizer the worker is
// instrumented too, and ASan would turn a crash inside NVRTC (which it cannot see into) into a
// report and exit 1; the worker leaves the fatal signals to the kernel instead, so that the
// parent reports the crash as it does in any other build.
std::vector<std::string> worker_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
#if KILN_WORKER_ASAN
  constexpr const char* kSignals = "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_abort=0";
  auto it = std::find_if(env.begin(), env.end(),
                         [](const std::string& v) { return v.starts_with("ASAN_OPTIONS="); });
  if (it == env.end())
    env.push_back(std::string("ASAN_OPTIONS=") + kSignals);
  else
    *it += std::string(":") + kSignals;
#endif
  return env;
}

}  // namespace

Result<CompiledCuda> compile_cuda(const std::string& source, const std::string& name,
                                  const std::string& arch, bool fast_math, NvrtcMode mode) {
  if (mode == NvrtcMode::InProcess) return compile_in_process(source, name, arch, fast_math);
  const auto t0 = std::chrono::steady_clock::now();
  KILN_ASSIGN(const std::string worker, worker_path());
  KILN_ASSIGN(const std::chrono::milliseconds timeout, worker_timeout());
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return Error(ErrorKind::Io,
                 fmt::format("starting {}: socketpair: {}", kWorkerName, std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  char* const argv[] = {const_cast<char*>(worker.c_str()), nullptr};
  const std::vector<std::string> env = worker_environment();
  std::vector<char*> envp;
  for (const std::string& v : env) envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, worker.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return Error(ErrorKind::Io, fmt::format("starting {}: {}", worker, std::strerror(spawned)));
  }
  std::string request;
  put_u32(request, kRequestMagic);
  put_u32(request, fast_math ? 1 : 0);
  put_text(request, arch);
  put_text(request, name);
  put_text(request, source);
  // Bounded in time: a worker that hangs (or never reads) is killed and reported.
  const Deadline deadline = t0 + timeout;
  bool timed_out = false;
  const bool sent = send_all(fds[0], request, deadline, &timed_out);
  ::shutdown(fds[0], SHUT_WR);
  std::string answer;
  const bool got = !timed_out && read_all(fds[0], answer, deadline, &timed_out);
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return Error(ErrorKind::Compile,
                 fmt::format("the NVRTC worker ({}) did not answer within {:g} s compiling {} for "
                             "{}, and was stopped; raise KILN_NVRTC_TIMEOUT (seconds) if the "
                             "kernel is that large",
                             worker, static_cast<double>(timeout.count()) / 1000, name, arch));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return Error(ErrorKind::Compile,
                 fmt::format("NVRTC crashed (signal {}: {}) compiling {} for {} in its worker "
                             "process ({}); the program goes on. NVRTC's embedded ptxas has "
                             "been seen to crash on code that the standalone ptxas accepts",
                             sig, strsignal(sig), name, arch, worker));
  }
  Reader r{answer};
  if (!sent || !got || r.u32() != kAnswerMagic)
    return Error(ErrorKind::Compile,
                 fmt::format("the NVRTC worker ({}) gave no answer compiling {} for {} (exit "
                             "status {})",
                             worker, name, arch, WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  const uint32_t ok = r.u32();
  const uint32_t kind = r.u32();
  std::string message = r.text();
  CompiledCuda out;
  out.ptx = r.text();
  const std::string cubin = r.text();
  if (!r.ok)
    return Error(ErrorKind::Compile,
                 fmt::format("the NVRTC worker's answer for {} is truncated", name));
  if (!ok) return Error(static_cast<ErrorKind>(kind), std::move(message));
  out.log = std::move(message);
  out.cubin.assign(cubin.begin(), cubin.end());
  out.resources = parse_resources(out.log);
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

int nvrtc_worker_main(int in, int out) {
  std::string request;
  if (!read_all(in, request)) return 2;
  Reader r{request};
  if (r.u32() != kRequestMagic) return 2;
  const bool fast_math = r.u32() != 0;
  const std::string arch = r.text(), name = r.text(), source = r.text();
  if (!r.ok) return 2;
  auto compiled = compile_in_process(source, name, arch, fast_math);
  std::string answer;
  put_u32(answer, kAnswerMagic);
  put_u32(answer, compiled.ok() ? 1 : 0);
  put_u32(answer, compiled.ok() ? 0 : static_cast<uint32_t>(compiled.error().kind));
  if (compiled.ok()) {
    put_text(answer, compiled->log);
    put_text(answer, compiled->ptx);
    put_bytes(answer, compiled->cubin.data(), compiled->cubin.size());
  } else {
    put_text(answer, compiled.error().message);
    put_text(answer, "");
    put_text(answer, "");
  }
  return send_all(out, answer) ? 0 : 2;
}

}  // namespace kiln::cuda
