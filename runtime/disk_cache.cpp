// Disk cache entries.
//
// File layout (little-endian), at <dir>/v1/<kind>/<first two hex digits>/<hash>.kc:
//   0  "KILNCACH"       magic
//   8  u32 version      kFormatVersion; a newer kiln bumps it and ignores older files
//  12  u32 meta bytes
//  16  u64 blob bytes
//  24  u64 checksum     XXH3-64 of meta + blob, seeded with kChecksumSeed
//  32  meta, then blob
// The checksum uses its own seed so that it can never equal the content hash the file is named
// by: a checksum that happened to equal the name would prove nothing about the bytes.
#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

#include <fmt/format.h>
#include <xxhash.h>

#include "runtime/log.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kChecksumSeed = 0x6b696c6e2d636b73ull;  // "kiln-cks"
constexpr size_t kHeader = 32;

uint64_t parse_size(const char* s, uint64_t fallback) {
  if (!s || !*s) return fallback;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || v < 0) return fallback;
  uint64_t mult = 1;
  switch (*end) {
    case 'k':
    case 'K':
      mult = uint64_t{1} << 10;
      break;
    case 'm':
    case 'M':
      mult = uint64_t{1} << 20;
      break;
    case 'g':
    case 'G':
      mult = uint64_t{1} << 30;
      break;
    case '\0':
      break;
    default:
      return fallback;
  }
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}

// Reports each damaged path once per process.
void report_damage(const std::string& path, const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(path).second) return;
  log_warning(
      fmt::format("cache entry {} is damaged ({}); removed, the kernel is recompiled", path, why));
}

// Checks a whole entry file; on success fills `entry`.
std::string check_entry(const std::vector<char>& data, DiskCache::Entry* entry) {
  if (data.size() < kHeader) return "truncated header";
  if (std::memcmp(data.data(), kMagic, 8) != 0) return "not a kiln cache entry";
  uint32_t version, meta_bytes;
  uint64_t blob_bytes, checksum;
  std::memcpy(&version, data.data() + 8, 4);
  std::memcpy(&meta_bytes, data.data() + 12, 4);
  std::memcpy(&blob_bytes, data.data() + 16, 8);
  std::memcpy(&checksum, data.data() + 24, 8);
  if (version != kFormatVersion)
    return fmt::format("format version {}, expected {}", version, kFormatVersion);
  if (kHeader + uint64_t{meta_bytes} + blob_bytes != data.size())
    return fmt::format("truncated: {} bytes, expected {}", data.size(),
                       kHeader + uint64_t{meta_bytes} + blob_bytes);
  if (XXH3_64bits_withSeed(data.data() + kHeader, data.size() - kHeader, kChecksumSeed) != checksum)
    return "checksum mismatch";
  if (entry) {
    entry->meta.assign(data.data() + kHeader, meta_bytes);
    entry->blob.assign(data.begin() + static_cast<long>(kHeader + meta_bytes), data.end());
  }
  return {};
}

bool read_file(const std::string& path, std::vector<char>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && st.st_size >= 0;
  if (ok) {
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (ok && done < out.size()) {
      const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        out.resize(done);  // shorter than fstat said: checked as a truncated entry
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", hi, lo);
}

Hash128 strong_hash(std::string_view data) {
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return Hash128{h.high64, h.low64};
}

DiskCache::Config DiskCache::config_from_env() {
  Config c;
  if (const char* off = std::getenv("KILN_CACHE");
      off && (std::string(off) == "off" || std::string(off) == "0"))
    c.enabled = false;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) {
    c.dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    c.dir = std::string(x) + "/kiln";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    c.dir = std::string(h) + "/.cache/kiln";
  } else {
    c.enabled = false;  // nowhere to put it
  }
  c.max_bytes = parse_size(std::getenv("KILN_CACHE_MAX"), c.max_bytes);
  return c;
}

DiskCache::DiskCache(Config config) : config_(std::move(config)) {}

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

std::string DiskCache::path_of(std::string_view kind, const Hash128& key) const {
  const std::string hex = key.hex();
  return fmt::format("{}/v1/{}/{}/{}.kc", config_.dir, kind, hex.substr(0, 2), hex);
}

std::optional<DiskCache::Entry> DiskCache::load(std::string_view kind, const Hash128& key) {
  if (!config_.enabled) return std::nullopt;
  const std::string path = path_of(kind, key);
  std::vector<char> data;
  if (!read_file(path, data)) return std::nullopt;
  Entry e;
  const std::string problem = check_entry(data, &e);
  if (!problem.empty()) {
    report_damage(path, problem);
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // mark as recently used (LRU)
  return e;
}

Status DiskCache::store(std::string_view kind, const Hash128& key, std::string_view meta,
                        std::span<const char> blob) {
  if (!config_.enabled) return {};
  const std::string path = path_of(kind, key);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec)
    return Error(ErrorKind::Io,
                 fmt::format("cannot create the cache directory for {}: {}", path, ec.message()));
  std::vector<char> data(kHeader + meta.size() + blob.size());
  const uint32_t version = kFormatVersion, meta_bytes = static_cast<uint32_t>(meta.size());
  const uint64_t blob_bytes = blob.size();
  std::memcpy(data.data(), kMagic, 8);
  std::memcpy(data.data() + 8, &version, 4);
  std::memcpy(data.data() + 12, &meta_bytes, 4);
  std::memcpy(data.data() + 16, &blob_bytes, 8);
  std::memcpy(data.data() + kHeader, meta.data(), meta.size());
  if (!blob.empty()) std::memcpy(data.data() + kHeader + meta.size(), blob.data(), blob.size());
  const uint64_t checksum =
      XXH3_64bits_withSeed(data.data() + kHeader, data.size() - kHeader, kChecksumSeed);
  std::memcpy(data.data() + 24, &checksum, 8);
  // A name no other writer uses, then an atomic rename over the final name.
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string tmp = fmt::format("{}.tmp.{}.{}.{:x}", path, ::getpid(), counter++, rng());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.flush();
    if (!f) {
      fs::remove(tmp, ec);
      return Error(ErrorKind::Io, fmt::format("cannot write {} (disk full or not writable?)", tmp));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    fs::remove(tmp, ec);
    return Error(ErrorKind::Io, fmt::format("cannot publish {}: {}", path, std::strerror(err)));
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

std::vector<DiskCache::Listing> DiskCache::list(bool verify) const {
  std::vector<Listing> out;
  std::error_code ec;
  const fs::path root = fs::path(config_.dir) / "v1";
  if (!fs::exists(root, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().extension() != ".kc") continue;
    Listing l;
    l.path = it->path().string();
    l.bytes = it->file_size(ec);
    struct stat st {};
    if (::stat(l.path.c_str(), &st) == 0) l.last_used = st.st_mtime;
    std::vector<char> data;
    if (read_file(l.path, data)) {
      Entry e;
      const std::string problem = check_entry(data, verify ? &e : nullptr);
      if (verify) l.problem = problem;
      if (problem.empty() && data.size() >= kHeader) {
        uint32_t meta_bytes;
        std::memcpy(&meta_bytes, data.data() + 12, 4);
        if (kHeader + meta_bytes <= data.size()) l.meta.assign(data.data() + kHeader, meta_bytes);
      }
    } else if (verify) {
      l.problem = "unreadable";
    }
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(),
            [](const Listing& a, const Listing& b) { return a.path < b.path; });
  return out;
}

uint64_t DiskCache::total_bytes() const {
  uint64_t total = 0;
  std::error_code ec;
  const fs::path root = fs::path(config_.dir) / "v1";
  if (!fs::exists(root, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec) && it->path().extension() == ".kc") total += it->file_size(ec);
  return total;
}

void DiskCache::evict() {
  // Temporary files left by writers that died: gone after an hour.
  std::error_code ec;
  const auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  const fs::path root = fs::path(config_.dir) / "v1";
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2) &&
        it->path().filename().string().find(".kc.tmp.") != std::string::npos &&
        it->last_write_time(e2) < stale)
      fs::remove(it->path(), e2);
  }
  std::vector<Listing> all = list(false);
  std::sort(all.begin(), all.end(),
            [](const Listing& a, const Listing& b) { return a.last_used < b.last_used; });
  uint64_t total = 0;
  for (const Listing& l : all) total += l.bytes;
  const uint64_t target = config_.max_bytes / 10 * 9;  // leave room: evict in batches
  for (const Listing& l : all) {
    if (total <= target) break;
    if (fs::remove(l.path, ec)) total -= l.bytes;
  }
  estimate_.store(static_cast<int64_t>(total));
}

Status DiskCache::clear() {
  std::error_code ec;
  fs::remove_all(fs::path(config_.dir) / "v1", ec);
  estimate_.store(0);
  if (ec)
    return Error(ErrorKind::Io, fmt::format("cannot clear {}: {}", config_.dir, ec.message()));
  return {};
}

}  // namespace kiln
