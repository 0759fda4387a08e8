// The disk cache's folders: <dir>/v2/<kind>/<first two hex digits>/<hash>.kc (format in
// cache_entry.cpp).
//
// Everything below <dir> is reached through open folder descriptors with O_NOFOLLOW, one level
// at a time, so a symbolic link planted anywhere below the user's folder is never followed, and
// every folder and file is checked for its owner and mode before it is trusted. Deleting needs
// three things to agree: an entry's name pattern, a regular file of this user's, and the magic
// bytes in its header; anything else in the cache's folders is left in place.
#include "runtime/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "runtime/log.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

// The folder of the current format; clear() also removes entries of the versions before it.
const std::string kVersionDir = fmt::format("v{}", cache_entry::kFormatVersion);
const char* const kAllVersionDirs[] = {"v1", "v2"};

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Why a folder or file may not be trusted by this process, or empty.
std::string distrust(const struct stat& st) {
  if (st.st_uid != ::geteuid())
    return fmt::format("it belongs to user id {}, not to this user (id {})", st.st_uid,
                       ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("other users can write to it (mode {:o}; `chmod go-w` fixes that)",
                       st.st_mode & 07777);
  return {};
}

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
bool is_entry_name(std::string_view n) {
  return n.size() == 35 && n.ends_with(".kc") && is_hex(n.substr(0, 32));
}
bool is_temp_name(std::string_view n) {
  return n.size() > 43 && n.substr(32, 8) == ".kc.tmp." && is_hex(n.substr(0, 32));
}
bool is_shard_name(std::string_view n) {
  return n.size() == 2 && is_hex(n);
}
bool is_kind_name(std::string_view n) {
  return !n.empty() && n.size() <= 16 && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

// A folder below the root: opened without following a link, created 0700 when asked, and
// checked. An invalid Fd without an error: it does not exist.
Result<Fd> open_folder(int parent, const std::string& name, bool create, const std::string& path) {
  int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST)
      return Error(ErrorKind::Io, fmt::format("cannot create {}: {}", path, std::strerror(errno)));
    fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ENOENT) return Fd();
    if (errno == ELOOP || errno == ENOTDIR)
      return Error(ErrorKind::Io,
                   fmt::format("{} is a symbolic link or not a folder; the cache does not follow "
                               "links it did not make (remove it)",
                               path));
    return Error(ErrorKind::Io, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  Fd folder(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return Error(ErrorKind::Io, fmt::format("cannot inspect {}: {}", path, std::strerror(errno)));
  if (std::string why = distrust(st); !why.empty())
    return Error(ErrorKind::Io, fmt::format("{} is not used: {}", path, why));
  return folder;
}

// The user's folder itself (a link there is the user's choice and is followed), created 0700
// with its missing parents when asked.
Result<Fd> open_root(const std::string& dir, bool create) {
  if (dir.empty()) return Error(ErrorKind::NotFound, "there is no disk cache folder");
  if (create) {
    fs::path at;
    for (const fs::path& part : fs::path(dir)) {
      at /= part;
      if (part == "/" || part.empty()) continue;
      if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST)
        return Error(ErrorKind::Io, fmt::format("cannot create the cache folder {}: {}",
                                                at.string(), std::strerror(errno)));
    }
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Fd();
    return Error(ErrorKind::Io,
                 fmt::format("cannot open the cache folder {}: {}", dir, std::strerror(errno)));
  }
  Fd root(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return Error(ErrorKind::Io, fmt::format("cannot inspect {}: {}", dir, std::strerror(errno)));
  if (std::string why = distrust(st); !why.empty())
    return Error(ErrorKind::Io,
                 fmt::format("the cache folder {} is not used: {}. Point KILN_CACHE_DIR at a "
                             "folder of your own",
                             dir, why));
  return root;
}

// The folder <dir>/<version>/<kind>/<shard>, opened (and created) one level at a time.
Result<Fd> open_shard(const std::string& dir, const std::string& version, std::string_view kind,
                      std::string_view shard, bool create) {
  KILN_ASSIGN(Fd at, open_root(dir, create));
  std::string path = dir;
  for (std::string_view part : {std::string_view(version), kind, shard}) {
    if (!at) return at;
    path += '/';
    path += part;
    KILN_ASSIGN(Fd next, open_folder(at.get(), std::string(part), create, path));
    at = std::move(next);
  }
  return at;
}

// One file in a shard folder, opened for reading without following a link and without blocking
// (a FIFO in its place must not hang the process). `foreign` says why it is not a kiln entry of
// this user's, when it is not; `bytes` holds the whole file, or its first bytes when it is larger
// than any entry or `head_only`.
struct OpenedFile {
  Fd fd;
  struct stat st {};
  std::string foreign;
  bool missing = false;
  std::vector<char> bytes;
};
OpenedFile open_file(int shard, const std::string& name, bool head_only) {
  OpenedFile f;
  const int fd = ::openat(shard, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    f.missing = errno == ENOENT;
    f.foreign = errno == ELOOP ? "a symbolic link (not followed; kiln never makes one)"
                               : fmt::format("cannot be opened: {}", std::strerror(errno));
    return f;
  }
  f.fd = Fd(fd);
  if (::fstat(fd, &f.st) != 0) {
    f.foreign = fmt::format("cannot be inspected: {}", std::strerror(errno));
    return f;
  }
  if (!S_ISREG(f.st.st_mode)) {
    f.foreign = "not a regular file";
    return f;
  }
  if (std::string why = distrust(f.st); !why.empty()) {
    f.foreign = why;
    return f;
  }
  const auto size = static_cast<uint64_t>(f.st.st_size);
  const size_t want = head_only || size > cache_entry::kMaxBytes
                          ? std::min<size_t>(size, cache_entry::kMagic.size())
                          : static_cast<size_t>(size);
  f.bytes.resize(want);
  size_t done = 0;
  while (done < want) {
    const ssize_t n = ::pread(fd, f.bytes.data() + done, want - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  f.bytes.resize(done);  // shorter than fstat said: a truncated entry
  // Shorter than the header and a start of it (an empty file too: what a power cut leaves of a
  // write renamed into place before it reached the disk) is a damaged entry of ours, which the
  // parser then refuses, and load, verify --remove and clear remove.
  if (f.bytes.size() < cache_entry::kMagic.size() &&
      (f.bytes.empty() ||
       std::memcmp(f.bytes.data(), cache_entry::kMagic.data(), f.bytes.size()) == 0))
    return f;
  if (f.bytes.size() < cache_entry::kMagic.size() ||
      std::memcmp(f.bytes.data(), cache_entry::kMagic.data(), cache_entry::kMagic.size()) != 0)
    f.foreign = "not a kiln cache entry (no kiln header)";
  return f;
}

// The names in an open folder, sorted (the folder's descriptor stays open).
std::vector<std::string> names_in(int fd) {
  std::vector<std::string> names;
  const int copy = ::dup(fd);
  DIR* d = copy >= 0 ? ::fdopendir(copy) : nullptr;
  if (!d) {
    if (copy >= 0) ::close(copy);
    return names;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Calls `fn(shard folder, kind, name)` for every file in the shard folders of one version, and
// `problem(path, why)` for what it will not enter (links, folders it cannot trust).
void walk(const std::string& dir, const std::string& version,
          const std::function<void(int, const std::string&, const std::string&)>& fn,
          const std::function<void(const std::string&, const std::string&)>& problem) {
  auto root = open_root(dir, false);
  if (!root || !*root) return;
  auto top = open_folder(root->get(), version, false, dir + "/" + version);
  if (!top) problem(dir + "/" + version, top.error().message);
  if (!top || !*top) return;
  for (const std::string& kind : names_in(top->get())) {
    if (!is_kind_name(kind)) continue;
    const std::string kind_path = fmt::format("{}/{}/{}", dir, version, kind);
    auto kf = open_folder(top->get(), kind, false, kind_path);
    if (!kf) problem(kind_path, kf.error().message);
    if (!kf || !*kf) continue;
    for (const std::string& shard : names_in(kf->get())) {
      if (!is_shard_name(shard)) continue;
      const std::string shard_path = kind_path + "/" + shard;
      auto sf = open_folder(kf->get(), shard, false, shard_path);
      if (!sf) problem(shard_path, sf.error().message);
      if (!sf || !*sf) continue;
      for (const std::string& name : names_in(sf->get())) fn(sf->get(), kind, name);
    }
  }
}

// Deletes a file of a shard folder if it is a kiln entry (or temporary) of this user's.
std::string remove_if_ours(int shard, const std::string& name) {
  if (!is_entry_name(name) && !is_temp_name(name)) return "not named like a kiln entry";
  OpenedFile f = open_file(shard, name, true);
  // A temporary file of a writer that died before it wrote anything is empty.
  if (!f.foreign.empty() && !(is_temp_name(name) && f.bytes.empty() && f.fd &&
                              S_ISREG(f.st.st_mode) && distrust(f.st).empty()))
    return f.foreign;
  if (::unlinkat(shard, name.c_str(), 0) != 0 && errno != ENOENT)
    return fmt::format("cannot be removed: {}", std::strerror(errno));
  return {};
}

void remove_empty_folders(const std::string& dir, const std::string& version) {
  auto root = open_root(dir, false);
  if (!root || !*root) return;
  auto top = open_folder(root->get(), version, false, version);
  if (!top || !*top) return;
  // AT_REMOVEDIR removes only an empty folder, and never follows a link.
  for (const std::string& kind : names_in(top->get())) {
    if (!is_kind_name(kind)) continue;
    auto kf = open_folder(top->get(), kind, false, kind);
    if (!kf || !*kf) continue;
    for (const std::string& shard : names_in(kf->get()))
      if (is_shard_name(shard)) ::unlinkat(kf->get(), shard.c_str(), AT_REMOVEDIR);
    ::unlinkat(top->get(), kind.c_str(), AT_REMOVEDIR);
  }
  ::unlinkat(root->get(), version.c_str(), AT_REMOVEDIR);
}

}  // namespace

std::optional<uint64_t> DiskCache::parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int shift = 0;
  switch (text.back()) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    case 't':
    case 'T':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift) text.remove_suffix(1);
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  if (v > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return v << shift;
}

DiskCache::Config DiskCache::config_from_env() {
  Config c;
  if (const char* off = std::getenv("KILN_CACHE");
      off && (std::string(off) == "off" || std::string(off) == "0"))
    c.enabled = false;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) {
    std::error_code ec;
    c.dir = fs::absolute(d, ec).lexically_normal().string();
    if (ec) c.dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x && x[0] == '/') {
    c.dir = std::string(x) + "/kiln";
  } else if (const char* h = std::getenv("HOME"); h && *h && h[0] == '/') {
    c.dir = std::string(h) + "/.cache/kiln";
  }
  if (c.dir.empty()) c.enabled = false;  // nowhere to put it: no cache at all
  if (const char* m = std::getenv("KILN_CACHE_MAX"); m && *m) {
    if (auto v = parse_size(m))
      c.max_bytes = *v;
    else
      log_warning(
          fmt::format("KILN_CACHE_MAX='{}' is not a size: give whole bytes, or a whole "
                      "number with K, M, G or T (e.g. 512M); the cap stays at 1G",
                      m));
  }
  return c;
}

DiskCache::DiskCache(Config config) : config_(std::move(config)) {
  if (config_.dir.empty()) config_.enabled = false;
}

namespace {
std::mutex g_cache_mu;
std::shared_ptr<DiskCache>& global_slot() {
  static auto* slot = new std::shared_ptr<DiskCache>();
  return *slot;
}
}  // namespace

std::shared_ptr<DiskCache> DiskCache::global() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  auto& slot = global_slot();
  if (!slot) slot = std::make_shared<DiskCache>(config_from_env());
  return slot;
}

void DiskCache::set_global(Config config) {
  auto cache = std::make_shared<DiskCache>(std::move(config));
  std::lock_guard<std::mutex> lock(g_cache_mu);
  global_slot() = std::move(cache);
}

std::string DiskCache::refusal() const {
  auto root = open_root(config_.dir, false);
  return root ? std::string() : root.error().message;
}

std::optional<DiskCache::Entry> DiskCache::load(std::string_view kind, const Hash128& key,
                                                std::string_view material) {
  if (!config_.enabled) return std::nullopt;
  const std::string hex = key.hex();
  auto shard =
      open_shard(config_.dir, kVersionDir, kind, std::string_view(hex).substr(0, 2), false);
  if (!shard) {
    log_warning_once(shard.error().message,
                     fmt::format("the disk cache is not used: {}", shard.error().message));
    return std::nullopt;
  }
  if (!*shard) return std::nullopt;
  const std::string name = hex + ".kc";
  const std::string path =
      fmt::format("{}/{}/{}/{}/{}", config_.dir, kVersionDir, kind, hex.substr(0, 2), name);
  OpenedFile f = open_file(shard->get(), name, false);
  if (f.missing) return std::nullopt;
  if (!f.foreign.empty()) {
    log_warning_once(
        path, fmt::format("disk cache: {} is {}; it is left alone and the kernel is compiled", path,
                          f.foreign));
    return std::nullopt;
  }
  cache_entry::Parsed parsed;
  std::string problem = cache_entry::parse(f.bytes, &parsed);
  if (problem.empty() && (parsed.kind != kind || parsed.material != material))
    problem = fmt::format("it records the key of another specialization{}",
                          parsed.kind != kind ? fmt::format(" (kind '{}')", parsed.kind) : "");
  if (!problem.empty()) {
    const std::string fate = ::unlinkat(shard->get(), name.c_str(), 0) == 0 || errno == ENOENT
                                 ? "removed"
                                 : fmt::format("could not be removed ({})", std::strerror(errno));
    log_warning_once(path,
                     fmt::format("cache entry {} is damaged ({}); {}, {}", path, problem, fate,
                                 kind == "tune" ? "the candidates are measured again"
                                                : "the kernel is recompiled"));
    return std::nullopt;
  }
  ::futimens(f.fd.get(), nullptr);  // mark as recently used (LRU), through the opened file
  return Entry{std::move(parsed.meta), std::move(parsed.blob)};
}

DiskCache::Lock::~Lock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

DiskCache::Lock DiskCache::lock(std::string_view kind, const Hash128& key) {
  if (!config_.enabled || !is_kind_name(kind)) return Lock();
  const std::string hex = key.hex();
  auto shard = open_shard(config_.dir, kVersionDir, kind, std::string_view(hex).substr(0, 2), true);
  if (!shard || !*shard) return Lock();
  // flock on the folder itself: no lock file to leave behind, and the lock goes with the
  // process if it dies.
  while (::flock(shard->get(), LOCK_EX) != 0)
    if (errno != EINTR) return Lock();
  Fd held = std::move(*shard);
  return Lock(held.release());
}

Status DiskCache::store(std::string_view kind, const Hash128& key, std::string_view material,
                        std::string_view meta, std::span<const char> blob) {
  if (!config_.enabled) return {};
  KILN_CHECK(strong_hash(material) == key, "a cache key is the hash of its material");
  if (!is_kind_name(kind)) return Error(ErrorKind::InvalidArgument, "bad cache entry kind");
  const std::string hex = key.hex();
  auto shard = open_shard(config_.dir, kVersionDir, kind, std::string_view(hex).substr(0, 2), true);
  if (!shard) return std::move(shard).take_error();
  const std::string name = hex + ".kc";
  const std::string path =
      fmt::format("{}/{}/{}/{}/{}", config_.dir, kVersionDir, kind, hex.substr(0, 2), name);
  // A file in the entry's place that kiln did not write is not replaced.
  if (struct stat st{}; ::fstatat(shard->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    OpenedFile existing = open_file(shard->get(), name, true);
    if (!existing.foreign.empty()) {
      return Error(ErrorKind::Io, fmt::format("{} is {}; it is left alone and not replaced", path,
                                              existing.foreign));
    }
  }
  const std::vector<char> data = cache_entry::encode(kind, key, material, meta, blob);
  // A name no other writer uses, then an atomic rename over the final name.
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string tmp = fmt::format("{}.tmp.{}.{}.{:x}", name, ::getpid(), counter++, rng());
  const int fd = ::openat(shard->get(), tmp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return Error(ErrorKind::Io,
                 fmt::format("cannot write {}/{}: {}", fs::path(path).parent_path().string(), tmp,
                             std::strerror(errno)));
  size_t done = 0;
  int err = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  // On the disk before it has its name, so that a power cut leaves the old entry or the new
  // one, never an empty file under the entry's name.
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::renameat(shard->get(), tmp.c_str(), shard->get(), name.c_str()) != 0) err = errno;
  if (!err) ::fsync(shard->get());  // the rename itself
  if (err) {
    ::unlinkat(shard->get(), tmp.c_str(), 0);
    return Error(ErrorKind::Io,
                 fmt::format("cannot write the cache entry {}: {}", path, std::strerror(err)));
  }
  int64_t estimate = estimate_.load();
  if (estimate < 0) {
    estimate = static_cast<int64_t>(total_bytes());
    estimate_.store(estimate);
  } else {
    estimate =
        estimate_.fetch_add(static_cast<int64_t>(data.size())) + static_cast<int64_t>(data.size());
  }
  if (static_cast<uint64_t>(estimate) > config_.max_bytes) evict();
  return {};
}

Result<std::vector<DiskCache::Listing>> DiskCache::list(bool verify) const {
  if (config_.dir.empty())
    return Error(ErrorKind::NotFound,
                 "there is no disk cache: none of KILN_CACHE_DIR, XDG_CACHE_HOME and HOME is set");
  if (auto root = open_root(config_.dir, false); !root) return std::move(root).take_error();
  std::vector<Listing> out;
  auto on_file = [&](int shard, const std::string& kind, const std::string& name) {
    Listing l;
    l.kind = kind;
    l.name = name;
    l.path = fmt::format("{}/{}/{}/{}/{}", config_.dir, kVersionDir, kind, name.substr(0, 2), name);
    if (is_temp_name(name)) return;  // a writer at work, or one that died: eviction's business
    if (!is_entry_name(name)) {
      if (!verify) return;
      l.problem = "not named like a kiln entry; left alone";
      l.ours = false;
      out.push_back(std::move(l));
      return;
    }
    OpenedFile f = open_file(shard, name, false);
    l.bytes = static_cast<uint64_t>(f.st.st_size);
    l.last_used = f.st.st_mtime;
    if (!f.foreign.empty()) {
      if (!verify) return;
      l.problem = f.foreign + "; left alone";
      l.ours = false;
      out.push_back(std::move(l));
      return;
    }
    cache_entry::Parsed parsed;
    l.problem = cache_entry::parse(f.bytes, &parsed);
    if (l.problem.empty()) {
      l.meta = parsed.meta;
      if (parsed.key.hex() + ".kc" != name)
        l.problem =
            fmt::format("it records the key {}, not the one it is named by", parsed.key.hex());
      else if (parsed.kind != kind)
        l.problem = fmt::format("it is a '{}' entry in the '{}' folder", parsed.kind, kind);
    }
    if (!verify) l.problem.clear();
    out.push_back(std::move(l));
  };
  auto on_problem = [&](const std::string& path, const std::string& why) {
    if (!verify) return;
    Listing l;
    l.path = path;
    l.problem = why;
    l.ours = false;
    out.push_back(std::move(l));
  };
  walk(config_.dir, kVersionDir, on_file, on_problem);
  std::sort(out.begin(), out.end(),
            [](const Listing& a, const Listing& b) { return a.path < b.path; });
  return out;
}

uint64_t DiskCache::total_bytes() const {
  uint64_t total = 0;
  walk(
      config_.dir, kVersionDir,
      [&](int shard, const std::string&, const std::string& name) {
        struct stat st {};
        if (is_entry_name(name) && ::fstatat(shard, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
          total += static_cast<uint64_t>(st.st_size);
      },
      [](const std::string&, const std::string&) {});
  return total;
}

Status DiskCache::remove(const Listing& entry) const {
  if (!entry.ours || !is_entry_name(entry.name))
    return Error(
        ErrorKind::InvalidArgument,
        fmt::format("{} is not a kiln entry ({}); it is left alone", entry.path, entry.problem));
  KILN_ASSIGN(Fd shard, open_shard(config_.dir, kVersionDir, entry.kind,
                                   std::string_view(entry.name).substr(0, 2), false));
  if (!shard) return {};
  if (std::string why = remove_if_ours(shard.get(), entry.name); !why.empty())
    return Error(ErrorKind::Io, fmt::format("{} is {}", entry.path, why));
  return {};
}

void DiskCache::evict() {
  struct Candidate {
    std::string kind, name;
    uint64_t bytes;
    int64_t used;
  };
  std::vector<Candidate> all;
  uint64_t total = 0;
  const int64_t stale = static_cast<int64_t>(::time(nullptr)) - 3600;
  walk(
      config_.dir, kVersionDir,
      [&](int shard, const std::string& kind, const std::string& name) {
        struct stat st {};
        if (::fstatat(shard, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
          return;
        // Temporary files of writers that died: gone after an hour.
        if (is_temp_name(name)) {
          if (st.st_mtime < stale) remove_if_ours(shard, name);
          return;
        }
        if (!is_entry_name(name) || !distrust(st).empty()) return;
        all.push_back({kind, name, static_cast<uint64_t>(st.st_size), st.st_mtime});
        total += static_cast<uint64_t>(st.st_size);
      },
      [](const std::string&, const std::string&) {});
  std::sort(all.begin(), all.end(),
            [](const Candidate& a, const Candidate& b) { return a.used < b.used; });
  const uint64_t target = config_.max_bytes / 10 * 9;  // leave room: evict in batches
  for (const Candidate& c : all) {
    if (total <= target) break;
    auto shard =
        open_shard(config_.dir, kVersionDir, c.kind, std::string_view(c.name).substr(0, 2), false);
    if (shard && *shard && remove_if_ours(shard->get(), c.name).empty()) total -= c.bytes;
  }
  estimate_.store(static_cast<int64_t>(total));
}

Result<DiskCache::Cleared> DiskCache::clear() {
  if (config_.dir.empty())
    return Error(ErrorKind::NotFound,
                 "there is no disk cache to clear: none of KILN_CACHE_DIR, XDG_CACHE_HOME and "
                 "HOME is set");
  if (auto root = open_root(config_.dir, false); !root) return std::move(root).take_error();
  Cleared done;
  std::string first_problem;
  for (const char* version : kAllVersionDirs) {
    walk(
        config_.dir, version,
        [&](int shard, const std::string&, const std::string& name) {
          if (!is_entry_name(name) && !is_temp_name(name)) {
            ++done.kept;
            return;
          }
          struct stat st {};
          ::fstatat(shard, name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
          if (remove_if_ours(shard, name).empty()) {
            if (is_entry_name(name)) {
              ++done.entries;
              done.bytes += static_cast<uint64_t>(st.st_size);
            }
          } else {
            ++done.kept;
          }
        },
        [&](const std::string&, const std::string&) { ++done.kept; });
    remove_empty_folders(config_.dir, version);
  }
  estimate_.store(-1);
  return done;
}

}  // namespace kiln
