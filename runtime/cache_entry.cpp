// Disk cache entries, format version 2 (little-endian):
//   0  "KILNCACH"       magic (the same in every version)
//   8  u32 version      kFormatVersion; other versions are not read (they live in v1/, v3/...)
//  12  u32 kind bytes
//  16  u32 material bytes
//  20  u32 meta bytes
//  24  u64 blob bytes
//  32  u64 checksum     XXH3-64 of every byte from offset 40 on, seeded with kChecksumSeed
//  40  u64 key hi, u64 key lo   XXH3-128 of the material: the name of the file
//  56  kind, material, meta, blob
// The checksum uses its own seed so that it can never equal the content hash the file is named
// by: a checksum that happened to equal the name would prove nothing about the bytes. The
// material is recorded whole so that a loader can compare it with what it asked for: a file
// copied or planted under another key is rejected instead of run.
#include "runtime/cache_entry.h"

#include <cstring>

#include <fmt/format.h>
#include <xxhash.h>

namespace kiln {

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", hi, lo);
}

Hash128 strong_hash(std::string_view data) {
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return Hash128{h.high64, h.low64};
}

namespace cache_entry {

namespace {

constexpr uint64_t kChecksumSeed = 0x6b696c6e2d636b73ull;  // "kiln-cks"
constexpr size_t kHeader = 56;

template <typename T>
void put(std::vector<char>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(std::span<const char> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

}  // namespace

uint64_t checksum(std::span<const char> data) {
  if (data.size() < 40) return 0;
  return XXH3_64bits_withSeed(data.data() + 40, data.size() - 40, kChecksumSeed);
}

std::vector<char> encode(std::string_view kind, const Hash128& key, std::string_view material,
                         std::string_view meta, std::span<const char> blob) {
  std::vector<char> out(kHeader + kind.size() + material.size() + meta.size() + blob.size());
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  put<uint32_t>(out, 8, kFormatVersion);
  put<uint32_t>(out, 12, static_cast<uint32_t>(kind.size()));
  put<uint32_t>(out, 16, static_cast<uint32_t>(material.size()));
  put<uint32_t>(out, 20, static_cast<uint32_t>(meta.size()));
  put<uint64_t>(out, 24, blob.size());
  put<uint64_t>(out, 40, key.hi);
  put<uint64_t>(out, 48, key.lo);
  size_t at = kHeader;
  for (std::string_view part : {kind, material, meta}) {
    if (!part.empty()) std::memcpy(out.data() + at, part.data(), part.size());
    at += part.size();
  }
  if (!blob.empty()) std::memcpy(out.data() + at, blob.data(), blob.size());
  put<uint64_t>(out, 32, checksum(out));
  return out;
}

std::string parse(std::span<const char> data, Parsed* out) {
  if (data.size() < kMagic.size() || std::memcmp(data.data(), kMagic.data(), kMagic.size()) != 0)
    return "not a kiln cache entry";
  if (data.size() < kHeader) return fmt::format("truncated header: {} bytes", data.size());
  if (data.size() > kMaxBytes) return fmt::format("{} bytes, more than any entry", data.size());
  const auto version = get<uint32_t>(data, 8);
  if (version != kFormatVersion)
    return fmt::format("format version {}, expected {}", version, kFormatVersion);
  // Each size is checked against what is left of the file before the next is added, so no sum
  // can wrap around.
  uint64_t left = data.size() - kHeader;
  const uint64_t sizes[4] = {get<uint32_t>(data, 12), get<uint32_t>(data, 16),
                             get<uint32_t>(data, 20), get<uint64_t>(data, 24)};
  for (uint64_t s : sizes) {
    if (s > left)
      return fmt::format("truncated: the header claims more than the {} bytes of the file",
                         data.size());
    left -= s;
  }
  if (left != 0) return fmt::format("{} bytes past the end the header gives", left);
  if (checksum(data) != get<uint64_t>(data, 32)) return "checksum mismatch";
  const Hash128 key{get<uint64_t>(data, 40), get<uint64_t>(data, 48)};
  const size_t kind_at = kHeader, material_at = kind_at + sizes[0],
               meta_at = material_at + sizes[1], blob_at = meta_at + sizes[2];
  const std::string_view material(data.data() + material_at, sizes[1]);
  if (strong_hash(material) != key) return "its recorded key is not the hash of its material";
  if (out) {
    out->key = key;
    out->kind.assign(data.data() + kind_at, sizes[0]);
    out->material.assign(material);
    out->meta.assign(data.data() + meta_at, sizes[2]);
    out->blob.assign(data.data() + blob_at, data.data() + data.size());
  }
  return {};
}

}  // namespace cache_entry
}  // namespace kiln
