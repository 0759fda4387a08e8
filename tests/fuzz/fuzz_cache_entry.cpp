// Fuzz target for the disk cache's entry reader (runtime/cache_entry.cpp). With libFuzzer
// (KILN_FUZZ=ON, clang):  build-fuzz/bin/fuzz_cache_entry -max_total_time=60
// Without it, the same target is built with a small mutating driver (KILN_FUZZ_STANDALONE) that
// the test suite runs for a bounded time: `fuzz_cache_entry_run SECONDS`.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/cache_entry.h"

namespace {

// A sound entry must encode back to exactly its bytes.
void check(std::span<const char> bytes) {
  kiln::cache_entry::Parsed p;
  if (!kiln::cache_entry::parse(bytes, &p).empty()) return;
  const auto again = kiln::cache_entry::encode(p.kind, p.key, p.material, p.meta, p.blob);
  if (again.size() != bytes.size() || std::memcmp(again.data(), bytes.data(), bytes.size()) != 0)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const char> raw(reinterpret_cast<const char*>(data), size);
  check(raw);
  // The same bytes with a correct checksum, so the size fields are explored past it.
  if (size >= 40) {
    std::vector<char> fixed(raw.begin(), raw.end());
    const uint64_t sum = kiln::cache_entry::checksum(fixed);
    std::memcpy(fixed.data() + 32, &sum, 8);
    check(fixed);
  }
  return 0;
}

#ifdef KILN_FUZZ_STANDALONE
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  std::mt19937_64 rng(20261130);
  std::vector<std::vector<char>> seeds;
  for (int i = 0; i < 4; ++i) {
    const std::string material(static_cast<size_t>(i * 37), 'm');
    seeds.push_back(kiln::cache_entry::encode(
        i % 2 ? "cuda" : "cpu", kiln::strong_hash(material), material, R"({"kernel":"k"})",
        std::vector<char>(static_cast<size_t>(i * 100), 'b')));
  }
  const uint64_t interesting[] = {0,          1,          55,    56,         0x7fffffff, 0xffffffff,
                                  1ull << 32, 1ull << 63, ~0ull, ~0ull - 55, ~0ull - 7};
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int batch = 0; batch < 1000; ++batch, ++runs) {
      std::vector<char> in = seeds[rng() % seeds.size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !in.empty(); ++e) {
        switch (rng() % 5) {
          case 0:  // flip a bit
            in[rng() % in.size()] ^= static_cast<char>(1 << (rng() % 8));
            break;
          case 1:  // an interesting value in a header field
            if (in.size() >= 56) {
              const size_t at = 8 + 4 * (rng() % 12);
              const uint64_t v = interesting[rng() % std::size(interesting)];
              std::memcpy(in.data() + at, &v, rng() % 2 ? 4 : 8);
            }
            break;
          case 2:  // truncate
            in.resize(rng() % (in.size() + 1));
            break;
          case 3:  // extend
            in.resize(in.size() + rng() % 64, static_cast<char>(rng()));
            break;
          default:  // a random byte
            in[rng() % in.size()] = static_cast<char>(rng());
        }
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    }
  }
  std::printf("fuzz_cache_entry: %llu inputs in %.1f s, no crash\n",
              static_cast<unsigned long long>(runs), seconds);
  return 0;
}
#endif
