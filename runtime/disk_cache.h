// The disk cache of compiled kernels: content-addressed by a strong hash of what determines the
// code (canonical IR, target, options, compiler versions), so it never serves stale code.
//
// Location: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; with none of them
// set there is no disk cache. KILN_CACHE=off turns it off; KILN_CACHE_MAX caps its size (bytes,
// or with K/M/G/T; 1G by default). Entries are versioned and checksummed, written to a temporary
// file and published with rename (safe with many processes at once); a damaged entry is reported
// once, removed and recompiled; when the cache grows past its cap the least recently used
// entries go.
//
// Safety (docs/runtime.md, "What the disk cache trusts"): the folder is created 0700 and used
// only when it belongs to this user and no one else can write to it; below it no symbolic link
// is followed; an entry is loaded only when the full key recorded inside matches the key asked
// for; clear and eviction delete only files that are kiln entries by name and by header.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/result.h"
#include "runtime/cache_entry.h"

namespace kiln {

class DiskCache {
 public:
  struct Config {
    bool enabled = true;
    std::string dir;  // empty: there is no cache (and nothing to list or clear)
    uint64_t max_bytes = uint64_t{1} << 30;
  };
  // Reads KILN_CACHE, KILN_CACHE_DIR, XDG_CACHE_HOME, HOME and KILN_CACHE_MAX; a value it cannot
  // use is reported with log_warning and the default is kept.
  static Config config_from_env();
  // Parses a KILN_CACHE_MAX value: whole bytes, or with a K, M, G or T suffix (powers of 1024).
  static std::optional<uint64_t> parse_size(std::string_view text);
  explicit DiskCache(Config config);
  // The process's cache, configured from the environment when first used.
  static std::shared_ptr<DiskCache> global();
  // Replaces the process's cache (an embedding program's own location or cap; tests).
  static void set_global(Config config);

  bool enabled() const { return config_.enabled; }
  const std::string& dir() const { return config_.dir; }
  uint64_t max_bytes() const { return config_.max_bytes; }
  // Why the folder cannot be used (not this user's, writable by others, a file...), or empty.
  // Checked on every use; a refused folder is reported once and then acts as no cache.
  std::string refusal() const;

  struct Entry {
    std::string meta;        // JSON describing the entry
    std::vector<char> blob;  // object code, PTX, ...
  };
  // The entry of a kind ("cpu", "cuda") for `key` = strong_hash(material), or nothing. An entry
  // that is damaged, or that records another key than `material`, is reported (once per
  // process), removed, and counts as a miss. A hit marks the entry used.
  std::optional<Entry> load(std::string_view kind, const Hash128& key, std::string_view material);
  // Publishes an entry atomically, then evicts least recently used entries over the cap.
  Status store(std::string_view kind, const Hash128& key, std::string_view material,
               std::string_view meta, std::span<const char> blob);

  // An exclusive lock on the folder where the entry of `key` lives, held until the object goes:
  // processes (and threads) that would make the same entry wait for each other, so that the
  // second finds the first's entry instead of making its own (an autotuner's measurements).
  // With no usable cache there is nothing to lock: a lock that holds nothing.
  class Lock {
   public:
    Lock() = default;
    explicit Lock(int fd) : fd_(fd) {}
    Lock(Lock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Lock& operator=(Lock&& o) noexcept {
      std::swap(fd_, o.fd_);
      return *this;
    }
    ~Lock();
    bool held() const { return fd_ >= 0; }

   private:
    int fd_ = -1;
  };
  Lock lock(std::string_view kind, const Hash128& key);

  struct Listing {
    std::string path;
    std::string kind;  // the folder it is in
    std::string name;  // the file name
    uint64_t bytes = 0;
    int64_t last_used = 0;  // seconds since the epoch
    std::string meta;
    // Empty when the entry is sound (checked fully with verify). Otherwise what is wrong, and
    // `ours` says whether it is a kiln entry that kiln may delete (a damaged one) or a file kiln
    // did not write (a link, another user's file, an unknown format), which it leaves alone.
    std::string problem;
    bool ours = true;
  };
  // Entries of the current format, sorted by path; foreign files in entry folders are listed
  // (with their problem) only by verify.
  Result<std::vector<Listing>> list(bool verify) const;
  uint64_t total_bytes() const;
  // Deletes one listed entry, if it is still a kiln entry of this user's.
  Status remove(const Listing& entry) const;
  // Deletes every kiln entry (of any format version) and the folders kiln made that are left
  // empty; anything else stays. Returns how many entries and bytes went.
  struct Cleared {
    uint64_t entries = 0, bytes = 0, kept = 0;
  };
  Result<Cleared> clear();

 private:
  void evict();
  Config config_;
  // This process's estimate of the cache's size (-1: not measured yet), so that a store walks
  // the directory only when the estimate crosses the cap.
  std::atomic<int64_t> estimate_{-1};
};

}  // namespace kiln
