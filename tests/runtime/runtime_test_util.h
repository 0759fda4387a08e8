// Helpers for runtime tests: temporary folders, a private disk cache, host <-> tensor copies.
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"

namespace kiln::test {

// A fresh folder under $TMPDIR, removed with everything in it at the end of the scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Points the process's disk cache at a private folder for the scope (or turns it off).
class ScopedCache {
 public:
  explicit ScopedCache(bool enabled = true, uint64_t max_bytes = uint64_t{1} << 30) {
    DiskCache::Config c;
    c.enabled = enabled;
    c.dir = dir_.path();
    c.max_bytes = max_bytes;
    DiskCache::set_global(c);
  }
  ~ScopedCache() { DiskCache::set_global(DiskCache::config_from_env()); }
  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
};

inline Runtime open_cpu(RuntimeOptions o = {}) {
  (void)kernels::builtin_names();  // keeps the example kernels' library loaded
  auto rt = Runtime::open("cpu", std::move(o));
  INFO((rt.ok() ? std::string() : rt.error().message));
  REQUIRE(rt.ok());
  return std::move(*rt);
}

// The devices of `names` that open here; the others are skipped with a warning that says why.
inline std::vector<Runtime> open_devices(std::initializer_list<const char*> names) {
  std::vector<Runtime> out;
  for (const char* device : names) {
    auto opened = Runtime::open(device);
    if (!opened) {
      WARN("skipped on " << device << ": " << opened.error().message);
      continue;
    }
    out.push_back(std::move(*opened));
  }
  return out;
}
// The TMA devices that run without a GPU: the CPU and the emulator of sm_90a.
inline std::vector<Runtime> tma_devices() {
  return open_devices({"cpu", "cuda-emu:sm_90a"});
}

// `rows` rows of 64 f32 values, different in each row: small multiples of 0.25, so that sums of
// them are exact in any order.
inline std::vector<float> rows_of_64(int64_t rows) {
  std::vector<float> host(static_cast<size_t>(rows) * 64);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<float>((i * 37) % 101) * 0.25f - 12.0f;
  return host;
}

inline Kernel kernel(const Runtime& rt, const std::string& name) {
  auto k = rt.kernel(name);
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  return *k;
}

template <class T>
Tensor tensor_from(Runtime& rt, ir::ElemType dtype, const std::vector<T>& host,
                   std::initializer_list<int64_t> shape) {
  auto t = rt.empty(dtype, shape);
  REQUIRE(t.ok());
  REQUIRE(t->upload(std::span<const T>(host)).ok());
  return std::move(*t);
}
template <class T>
Tensor tensor_from(Runtime& rt, ir::ElemType dtype, const std::vector<T>& host,
                   const std::vector<int64_t>& shape) {
  auto t = rt.empty(dtype, std::span<const int64_t>(shape));
  REQUIRE(t.ok());
  REQUIRE(t->upload(std::span<const T>(host)).ok());
  return std::move(*t);
}
inline Tensor f32_tensor(Runtime& rt, const std::vector<float>& host) {
  return tensor_from(rt, ir::ElemType::F32, host, {static_cast<int64_t>(host.size())});
}

template <class T>
std::vector<T> to_host(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  auto st = t.download(std::span<T>(out));
  INFO((st.ok() ? std::string() : st.error().message));
  REQUIRE(st.ok());
  return out;
}

// Fails the test with the error's message when `s` is an error.
#define KILN_REQUIRE_OK(expr)                                         \
  do {                                                                \
    const auto& kiln_st_ = (expr);                                    \
    INFO((kiln_st_.ok() ? std::string() : kiln_st_.error().message)); \
    REQUIRE(kiln_st_.ok());                                           \
  } while (0)

}  // namespace kiln::test
