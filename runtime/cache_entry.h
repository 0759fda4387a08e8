// The file format of one disk cache entry: encoding, and a parser that trusts nothing in the
// file (every size is checked against the file's length before use; it is fuzzed).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct Hash128 {
  uint64_t hi = 0, lo = 0;
  std::string hex() const;
  friend bool operator==(const Hash128&, const Hash128&) = default;
};
// XXH3-128 of `data`.
Hash128 strong_hash(std::string_view data);

namespace cache_entry {

// The first bytes of every entry of every format version: how the cache recognizes its own files
// (together with their names) before it deletes anything.
inline constexpr std::string_view kMagic = "KILNCACH";
inline constexpr uint32_t kFormatVersion = 2;
// An entry larger than this is not one kiln wrote (object code and PTX are far smaller).
inline constexpr uint64_t kMaxBytes = uint64_t{1} << 30;

struct Parsed {
  Hash128 key;           // the content address recorded inside; the file is named after it
  std::string kind;      // "cpu", "cuda": the folder it belongs in
  std::string material;  // the full key: everything that determined the code
  std::string meta;      // JSON describing the entry
  std::vector<char> blob;
};

std::vector<char> encode(std::string_view kind, const Hash128& key, std::string_view material,
                         std::string_view meta, std::span<const char> blob);
// The checksum stored at offset 32: of every byte from offset 40 on (tests craft entries with it).
uint64_t checksum(std::span<const char> data);
// Empty when `data` is a sound entry (then `out`, if given, is filled); otherwise what is wrong.
// Never reads outside `data`, whatever its header claims.
std::string parse(std::span<const char> data, Parsed* out);

}  // namespace cache_entry
}  // namespace kiln
