// A separate program for the disk-cache tests: launches three example kernels through the
// runtime (with whatever KILN_CACHE_* and KILN_DUMP* the environment sets), checks their
// results, and prints the cache counters as `compiles=N disk_hits=N`. Exit status 0 when every
// launch succeeded with the right result.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/runtime.h"

namespace {

int fail(const kiln::Error& e) {
  std::fprintf(stderr, "cache_probe: %s\n", e.message.c_str());
  return 1;
}

}  // namespace

int main() {
  using kiln::ir::ElemType;
  (void)kiln::kernels::builtin_names();
  auto rt = kiln::Runtime::open("cpu");
  if (!rt) return fail(rt.error());
  const int n = 1024;
  std::vector<float> hx(n), hy(n, 1.0f);
  for (int i = 0; i < n; ++i) hx[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
  auto x = rt->empty(ElemType::F32, {n});
  auto y = rt->empty(ElemType::F32, {n});
  if (!x || !y) return fail(x ? y.error() : x.error());
  if (auto s = x->upload(std::span<const float>(hx)); !s) return fail(s.error());
  if (auto s = y->upload(std::span<const float>(hy)); !s) return fail(s.error());
  for (const char* name : {"axpy", "early_exit", "scale_generic"}) {
    auto k = rt->kernel(name);
    if (!k) return fail(k.error());
    kiln::Status st;
    if (std::string(name) == "axpy") st = rt->launch(*k, n / 4 / 256 + 1, 256, *x, *y, 2.0f);
    if (std::string(name) == "early_exit") st = rt->launch(*k, n / 256, 256, *y, *y);
    if (std::string(name) == "scale_generic") st = rt->launch(*k, n / 4 / 256 + 1, 256, *y, 0.5f);
    if (!st) return fail(st.error());
  }
  if (auto s = rt->sync(); !s) return fail(s.error());
  std::vector<float> out(n);
  if (auto s = y->download(std::span<float>(out)); !s) return fail(s.error());
  for (int i = 0; i < n; ++i) {
    const float want = std::max(2.0f * hx[static_cast<size_t>(i)] + 1.0f, 0.0f) * 0.5f;
    if (out[static_cast<size_t>(i)] != want) {
      std::fprintf(stderr, "cache_probe: y[%d] = %g, expected %g\n", i, out[static_cast<size_t>(i)],
                   want);
      return 1;
    }
  }
  const kiln::CacheStats s = kiln::cache_stats();
  std::printf("compiles=%llu disk_hits=%llu\n", static_cast<unsigned long long>(s.compiles),
              static_cast<unsigned long long>(s.disk_hits));
  return 0;
}
