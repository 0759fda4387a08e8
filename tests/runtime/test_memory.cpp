// The caching memory pool and reference-counted buffers.
#include <catch2/catch.hpp>

#include <cstring>
#include <thread>
#include <vector>

#include "runtime/memory.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

std::shared_ptr<MemoryPool> host_pool(uint64_t cap = 0) {
  return std::make_shared<MemoryPool>(make_host_allocator(), cap);
}

TEST_CASE("size classes round up to powers of two, then to 2 MiB steps", "[runtime][memory]") {
  CHECK(MemoryPool::size_class(0) == 256);
  CHECK(MemoryPool::size_class(1) == 256);
  CHECK(MemoryPool::size_class(256) == 256);
  CHECK(MemoryPool::size_class(257) == 512);
  CHECK(MemoryPool::size_class(1000) == 1024);
  CHECK(MemoryPool::size_class(32u << 20) == 32u << 20);
  CHECK(MemoryPool::size_class((32u << 20) + 1) == (34u << 20));
  CHECK(MemoryPool::size_class(100u << 20) == 100u << 20);
}

TEST_CASE("buffers are aligned, reused after release, and counted", "[runtime][memory]") {
  auto pool = host_pool();
  CHECK(pool->alignment() >= 64);
  void* first = nullptr;
  {
    auto b = Buffer::allocate(pool, 1000);
    REQUIRE(b.ok());
    first = b->data();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    CHECK(b->size() == 1000);
    std::memset(b->data(), 0xab, b->size());  // the whole size is writable
    const MemoryStats s = pool->stats();
    CHECK(s.in_use == 1024);
    CHECK(s.reserved == 1024);
    CHECK(s.peak == 1024);
    // Copies share the memory.
    Buffer copy = *b;
    CHECK(copy.use_count() == 2);
    CHECK(copy.data() == first);
  }
  CHECK(pool->stats().in_use == 0);
  CHECK(pool->stats().reserved == 1024);     // cached
  auto again = Buffer::allocate(pool, 900);  // same size class
  REQUIRE(again.ok());
  CHECK(again->data() == first);
  CHECK(pool->stats().reused == 1);
  CHECK(pool->stats().allocations == 2);
}

TEST_CASE("trim returns cached memory and keeps live buffers", "[runtime][memory]") {
  auto pool = host_pool();
  auto live = Buffer::allocate(pool, 4096);
  REQUIRE(live.ok());
  {
    auto dead = Buffer::allocate(pool, 1 << 20);
    REQUIRE(dead.ok());
  }
  CHECK(pool->stats().reserved == 4096 + (1 << 20));
  pool->trim();
  CHECK(pool->stats().reserved == 4096);
  CHECK(pool->stats().in_use == 4096);
  CHECK(pool->stats().peak == 4096 + (1 << 20));
}

TEST_CASE("a capped pool fails with out-of-memory and keeps working", "[runtime][memory]") {
  auto pool = host_pool(1 << 20);
  auto a = Buffer::allocate(pool, 512 << 10);
  REQUIRE(a.ok());
  auto b = Buffer::allocate(pool, 768 << 10);  // 1 MiB class: over the cap with `a` alive
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().kind == ErrorKind::OutOfMemory);
  CHECK_THAT(b.error().message, Catch::Contains("cap"));
  // Still usable: a small buffer works, and freeing `a` makes room for the big one.
  {
    auto c = Buffer::allocate(pool, 1024);
    REQUIRE(c.ok());
  }
  *a = Buffer();
  {
    auto cached = Buffer::allocate(pool, 100 << 10);
    REQUIRE(cached.ok());
  }                                            // leaves a cached block
  auto d = Buffer::allocate(pool, 768 << 10);  // succeeds once the cache is trimmed
  KILN_REQUIRE_OK(d);
  CHECK(pool->stats().reserved <= (1 << 20));
}

TEST_CASE("an impossible allocation is an error, not a crash", "[runtime][memory]") {
  auto pool = host_pool();
  auto huge = Buffer::allocate(pool, size_t{1} << 62);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().kind == ErrorKind::OutOfMemory);
  auto fine = Buffer::allocate(pool, 64);
  CHECK(fine.ok());
}

TEST_CASE("wrapped memory runs its release once, when the last reference goes",
          "[runtime][memory]") {
  int released = 0;
  std::vector<float> host(16);
  {
    Buffer b = Buffer::wrap(host.data(), host.size() * 4, [&] { ++released; });
    Buffer c = b;
    CHECK(b.data() == host.data());
    b = Buffer();
    CHECK(released == 0);
  }
  CHECK(released == 1);
}

TEST_CASE("buffers keep their pool alive", "[runtime][memory]") {
  Buffer b;
  {
    auto pool = host_pool();
    auto r = Buffer::allocate(pool, 100);
    REQUIRE(r.ok());
    b = *r;
  }
  std::memset(b.data(), 1, 100);  // the pool is gone from here; the buffer still works
  b = Buffer();
}

TEST_CASE("many threads allocate and free at once", "[runtime][memory][threads]") {
  auto pool = host_pool(64 << 20);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto b = Buffer::allocate(pool, static_cast<size_t>(256 << ((i + t) % 12)));
        if (!b.ok()) {
          ++failures;
          continue;
        }
        std::memset(b->data(), t, 64);
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(pool->stats().in_use == 0);
}

}  // namespace
}  // namespace kiln
