// Many host threads on one runtime: specializations compile once, distinct ones in parallel,
// launches and syncs stay correct. (Run under ThreadSanitizer: KILN_SANITIZE=thread.) Catch2's
// macros are not thread-safe: the threads count failures and the main thread checks them.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "runtime/thread_pool.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using test::kernel;
using test::open_cpu;
using test::to_host;

TEST_CASE("many threads launching one new specialization compile it once", "[runtime][threads]") {
  test::ScopedCache cache(false);
  auto rt = open_cpu();
  auto k = kernel(rt, "rt_affine");
  constexpr int kThreads = 8;
  std::vector<Tensor> xs, ys;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(test::f32_tensor(rt, std::vector<float>(256, static_cast<float>(t))));
    ys.push_back(test::f32_tensor(rt, std::vector<float>(256, 0.0f)));
  }
  const CacheStats before = cache_stats();
  std::atomic<int> go{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      go.fetch_add(1);
      while (go.load() < kThreads) std::this_thread::yield();
      // offset=77 is a key no other test uses.
      for (int i = 0; i < 20; ++i)
        if (!rt.launch(k, 1, 64, xs[static_cast<size_t>(t)], ys[static_cast<size_t>(t)], 2.0f, 77)
                 .ok())
          ++failures;
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  const CacheStats after = cache_stats();
  CHECK(after.compiles - before.compiles == 1);
  CHECK(after.memory_hits - before.memory_hits == kThreads * 20 - 1);
  for (int t = 0; t < kThreads; ++t)
    CHECK(to_host<float>(ys[static_cast<size_t>(t)]) ==
          std::vector<float>(256, 2.0f * static_cast<float>(t) + 77));
}

TEST_CASE("distinct specializations compile in parallel", "[runtime][threads]") {
  test::ScopedCache cache(false);
  auto rt = open_cpu();
  auto k = kernel(rt, "rt_affine");
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  const CacheStats before = cache_stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto x = rt.empty(ir::ElemType::F32, {64});
      auto y = rt.empty(ir::ElemType::F32, {64});
      if (!x || !y) return (void)++failures;
      for (int i = 0; i < 3; ++i)
        if (!rt.launch(k, 1, 64, *x, *y, 1.0f, 1000 + t * 10 + i).ok()) ++failures;
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(cache_stats().compiles - before.compiles == kThreads * 3);
}

TEST_CASE("launch, sync and allocate from many threads at once", "[runtime][threads]") {
  test::ScopedCache cache(false);
  RuntimeOptions o;
  std::atomic<int> printed{0};
  o.print = [&](const std::string&) { printed.fetch_add(1); };
  auto rt = open_cpu(o);
  auto fill = kernel(rt, "rt_fill_n");
  auto pa = kernel(rt, "rt_print_assert");
  std::atomic<int> failures{0}, faults{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      auto made = rt.new_stream();
      if (!made) return (void)++failures;
      Stream s = *made;
      LaunchOptions lo;
      lo.stream = &s;
      for (int i = 0; i < 30; ++i) {
        auto y = rt.empty(ir::ElemType::F32, {static_cast<int64_t>(64 * (1 + i % 4))});
        if (!y) return (void)++failures;
        const uint32_t cubes = static_cast<uint32_t>(1 + i % 4);
        if (!rt.launch_with(lo, fill, cubes, 64, *y, static_cast<uint32_t>(y->numel()),
                            static_cast<float>(t))
                 .ok())
          ++failures;
        std::vector<float> host(
            static_cast<size_t>(y->numel()));  // no Catch macros off the main thread
        if (!y->download(std::span<float>(host)).ok()) ++failures;
        for (float v : host)
          if (v != static_cast<float>(t)) {
            ++failures;
            break;
          }
        if (!rt.launch_with(lo, pa, 1, 4, *y).ok()) ++failures;
        if (!rt.sync(s).ok()) ++faults;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(faults == 0);
  CHECK(printed == 6 * 30 * 3);
}

TEST_CASE("the thread pool runs every index once, nested calls included", "[runtime][threads]") {
  ThreadPool& pool = ThreadPool::global();
  std::vector<std::atomic<int>> hits(10007);
  pool.parallel_for(static_cast<uint32_t>(hits.size()), 13, [&](uint32_t b, uint32_t e) {
    for (uint32_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) REQUIRE(h.load() == 1);
  // Launches from several threads share the pool.
  std::vector<std::thread> threads;
  std::atomic<uint64_t> total{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 20; ++r)
        pool.parallel_for(1000, 7, [&](uint32_t b, uint32_t e) { total.fetch_add(e - b); });
    });
  for (auto& th : threads) th.join();
  CHECK(total == 4 * 20 * 1000);
}

}  // namespace
}  // namespace kiln
