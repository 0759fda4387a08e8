// A separate program for the disk-cache tests: launches three example kernels through the
// runtime (with whatever KILN_CACHE_* and KILN_DUMP* the environment sets), checks their
// results, and prints the cache counters as `compiles=N disk_hits=N`. Exit status 0 when every
// launch succeeded with the right result.
// `cache_probe tune`: two calls of kiln::lib::matmul on one shape instead (checked), then the
// autotuner's counters and the winner: `measured=N runs=N disk_hits=N memory_hits=N winner=W`.
// `cache_probe pipeline`: kiln::lib::matmul on the sm_90a emulator (matmul_sm90: a pipeline,
// whose code launches a producer warpgroup beyond the kernel's units), checked, then the cache
// counters as above; `unavailable` when the emulator is not.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ir/float16.h"
#include "kernels/kernels.h"
#include "kernels/lib/matmul.h"
#include "runtime/autotune.h"
#include "runtime/runtime.h"

namespace {

int fail(const kiln::Error& e) {
  std::fprintf(stderr, "cache_probe: %s\n", e.message.c_str());
  return 1;
}

}  // namespace

int tune(kiln::Runtime& rt) {
  using kiln::ir::ElemType;
  const int64_t m = 200, n = 96, k = 150;
  std::vector<float> ha(m * k), hb(k * n), hc(m * n);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = static_cast<float>(i % 5) - 2.0f;
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = static_cast<float>(i % 3) - 1.0f;
  auto a = rt.empty(ElemType::F32, {m, k});
  auto b = rt.empty(ElemType::F32, {k, n});
  auto c = rt.empty(ElemType::F32, {m, n});
  if (!a || !b || !c) return fail(kiln::Error(kiln::ErrorKind::OutOfMemory, "tensors"));
  if (auto s = a->upload(std::span<const float>(ha)); !s) return fail(s.error());
  if (auto s = b->upload(std::span<const float>(hb)); !s) return fail(s.error());
  for (int call = 0; call < 2; ++call)
    if (auto s = kiln::lib::matmul(rt, *a, *b, *c); !s) return fail(s.error());
  if (auto s = rt.sync(); !s) return fail(s.error());
  if (auto s = c->download(std::span<float>(hc)); !s) return fail(s.error());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float want = 0;  // small integers: exact in any order
      for (int64_t l = 0; l < k; ++l)
        want += ha[static_cast<size_t>(i * k + l)] * hb[static_cast<size_t>(l * n + j)];
      if (hc[static_cast<size_t>(i * n + j)] != want) {
        std::fprintf(stderr, "cache_probe: c[%lld, %lld] = %g, expected %g\n",
                     static_cast<long long>(i), static_cast<long long>(j),
                     hc[static_cast<size_t>(i * n + j)], want);
        return 1;
      }
    }
  const kiln::AutotuneStats s = kiln::autotune_stats();
  const auto report = kiln::last_tune_report();
  std::string winner = report ? report->candidates[report->outcome.index] : "none";
  std::replace(winner.begin(), winner.end(), ' ', '/');
  std::printf("measured=%llu runs=%llu disk_hits=%llu memory_hits=%llu winner=%s\n",
              static_cast<unsigned long long>(s.measured), static_cast<unsigned long long>(s.runs),
              static_cast<unsigned long long>(s.disk_hits),
              static_cast<unsigned long long>(s.memory_hits), winner.c_str());
  return 0;
}

int pipeline() {
  using kiln::ir::ElemType;
  auto rt = kiln::Runtime::open("cuda-emu:sm_90a");
  if (!rt) {
    std::printf("unavailable: %s\n", rt.error().message.c_str());
    return 0;
  }
  const int64_t m = 64, n = 64, k = 64;  // A [M, K] and B [N, K]: read in place, one kernel
  std::vector<float> ha(m * k), hb(n * k), hc(m * n);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = static_cast<float>(i % 5) - 2.0f;
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = static_cast<float>(i % 3) - 1.0f;
  auto a32 = rt->empty(ElemType::F32, {m, k});
  auto b32 = rt->empty(ElemType::F32, {n, k});
  auto a = rt->empty(ElemType::BF16, {m, k});
  auto b = rt->empty(ElemType::BF16, {n, k});
  auto c = rt->empty(ElemType::F32, {m, n});
  if (!a32 || !b32 || !a || !b || !c)
    return fail(kiln::Error(kiln::ErrorKind::OutOfMemory, "tensors"));
  if (auto s = a32->upload(std::span<const float>(ha)); !s) return fail(s.error());
  if (auto s = b32->upload(std::span<const float>(hb)); !s) return fail(s.error());
  // Small integers: exact in bf16 and in any order of the sums.
  std::vector<uint16_t> bits(ha.size());
  for (size_t i = 0; i < ha.size(); ++i) bits[i] = kiln::bf16_bits(ha[i]);
  if (auto s = a->upload(std::span<const uint16_t>(bits)); !s) return fail(s.error());
  for (size_t i = 0; i < hb.size(); ++i) bits[i] = kiln::bf16_bits(hb[i]);
  if (auto s = b->upload(std::span<const uint16_t>(bits)); !s) return fail(s.error());
  kiln::lib::MatmulPlan plan;
  if (auto s = kiln::lib::matmul(*rt, *a, *b, *c, {.transpose_b = true, .plan = &plan}); !s)
    return fail(s.error());
  if (plan.kernel != "matmul_sm90" || plan.config.find("copied") != std::string::npos)
    return fail(
        kiln::Error(kiln::ErrorKind::Unsupported, "took " + plan.kernel + ": " + plan.config));
  if (auto s = rt->sync(); !s) return fail(s.error());
  if (auto s = c->download(std::span<float>(hc)); !s) return fail(s.error());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float want = 0;
      for (int64_t l = 0; l < k; ++l)
        want += ha[static_cast<size_t>(i * k + l)] * hb[static_cast<size_t>(j * k + l)];
      if (hc[static_cast<size_t>(i * n + j)] != want) {
        std::fprintf(stderr, "cache_probe: c[%lld, %lld] = %g, expected %g\n",
                     static_cast<long long>(i), static_cast<long long>(j),
                     hc[static_cast<size_t>(i * n + j)], want);
        return 1;
      }
    }
  const kiln::CacheStats s = kiln::cache_stats();
  std::printf("compiles=%llu disk_hits=%llu\n", static_cast<unsigned long long>(s.compiles),
              static_cast<unsigned long long>(s.disk_hits));
  return 0;
}

int main(int argc, char** argv) {
  using kiln::ir::ElemType;
  (void)kiln::kernels::builtin_names();
  if (argc > 1 && std::string(argv[1]) == "pipeline") return pipeline();
  auto rt = kiln::Runtime::open("cpu");
  if (!rt) return fail(rt.error());
  if (argc > 1 && std::string(argv[1]) == "tune") return tune(*rt);
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
