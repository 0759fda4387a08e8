// The disk cache of compiled kernels: content-addressed by a strong hash of what determines the
// code (canonical IR, target, options, compiler versions), so it never serves stale code.
//
// Location: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; KILN_CACHE=off
// turns it off; KILN_CACHE_MAX caps its size (bytes, or with K/M/G; 1G by default). Entries
// are versioned and checksummed, written to a temporary file and published with rename (safe
// with many processes at once); a damaged entry is reported once, removed and recompiled; when
// the cache grows past its cap the least recently used entries go.
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

namespace kiln {

struct Hash128 {
  uint64_t hi = 0, lo = 0;
  std::string hex() const;
  friend bool operator==(const Hash128&, const Hash128&) = default;
};
// XXH3-128 of `data`.
Hash128 strong_hash(std::string_view data);

class DiskCache {
 public:
  struct Config {
    bool enabled = true;
    std::string dir;
    uint64_t max_bytes = uint64_t{1} << 30;
  };
  static Config config_from_env();
  explicit DiskCache(Config config);
  // The process's cache, configured from the environment when first used.
  static std::shared_ptr<DiskCache> global();
  // Replaces the process's cache (an embedding program's own location or cap; tests).
  static void set_global(Config config);

  bool enabled() const { return config_.enabled; }
  const std::string& dir() const { return config_.dir; }
  uint64_t max_bytes() const { return config_.max_bytes; }

  struct Entry {
    std::string meta;        // JSON describing the entry
    std::vector<char> blob;  // object code, PTX, ...
  };
  // The entry for `key` of a kind ("cpu", "cuda"), or nothing. A damaged or truncated entry is
  // reported (once per process), removed, and counts as a miss. A hit marks the entry used.
  std::optional<Entry> load(std::string_view kind, const Hash128& key);
  // Publishes an entry atomically, then evicts least recently used entries over the cap.
  Status store(std::string_view kind, const Hash128& key, std::string_view meta,
               std::span<const char> blob);

  struct Listing {
    std::string path;
    uint64_t bytes = 0;
    int64_t last_used = 0;  // seconds since the epoch
    std::string meta;
    std::string problem;  // empty when the entry is sound (with verify)
  };
  std::vector<Listing> list(bool verify) const;
  uint64_t total_bytes() const;
  Status clear();

 private:
  std::string path_of(std::string_view kind, const Hash128& key) const;
  void evict();
  Config config_;
  // This process's estimate of the cache's size (-1: not measured yet), so that a store walks
  // the directory only when the estimate crosses the cap.
  std::atomic<int64_t> estimate_{-1};
};

}  // namespace kiln
