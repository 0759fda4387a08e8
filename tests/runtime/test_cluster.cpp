// Clusters (docs/dsl.md "Clusters") on the two devices that run them without a GPU: the CPU, which
// runs a cluster's cubes as fibers of one thread, and the emulator (cuda-emu:sm_90a), which runs
// every unit of the cluster as a fiber and checks the cluster's shared-memory accesses. The
// kernels are in tests/compiler/cpu/cluster_kernels.cpp.
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;

std::string loc(const char* marker) {
  return test::marker_loc("tests/compiler/cpu/cluster_kernels.cpp", marker);
}

Status run(Runtime& rt, const Kernel& k, uint32_t cubes, Tensor& x, Tensor& out, int size,
           int bug) {
  Status st = rt.launch(k, cubes, 64, x, out, size, bug);
  if (st.ok()) st = rt.sync();
  return st;
}

TEST_CASE("the cubes of a cluster read each other's shared memory", "[cluster]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "cluster_sum");
    for (int size : {1, 2, 4, 8}) {
      const auto cubes = static_cast<uint32_t>(size * 3);  // three clusters
      const std::vector<float> host = test::rows_of_64(cubes);
      Tensor x = test::f32_tensor(rt, host);
      Tensor out = test::f32_tensor(rt, std::vector<float>(host.size(), -1.0f));
      INFO("clusters of " << size);
      KILN_REQUIRE_OK(run(rt, k, cubes, x, out, size, 0));
      const auto got = test::to_host<float>(out);
      for (uint32_t c = 0; c < cubes; ++c)
        for (uint32_t u = 0; u < 64; ++u) {
          const uint32_t first = c / static_cast<uint32_t>(size) * static_cast<uint32_t>(size);
          float want = 0.0f;  // in rank order, as the kernel adds: exact
          for (uint32_t r = 0; r < static_cast<uint32_t>(size); ++r)
            want += host[(first + r) * 64 + u];
          REQUIRE(got[c * 64 + u] == want);
        }
    }
  }
}

TEST_CASE("a grid that is not a whole number of clusters is refused at launch", "[cluster]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "cluster_sum");
    Tensor x = test::f32_tensor(rt, test::rows_of_64(3));
    Tensor out = test::f32_tensor(rt, test::rows_of_64(3));
    const Status st = run(rt, k, 3, x, out, 2, 0);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("not a whole number of its 2x1x1 clusters"));
  }
}

TEST_CASE("a read of a rank outside the cluster is a fault, not a crash", "[cluster]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "cluster_sum");
    Tensor x = test::f32_tensor(rt, test::rows_of_64(4));
    Tensor out = test::f32_tensor(rt, test::rows_of_64(4));
    const Status st = run(rt, k, 4, x, out, 2, 3);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("CLUSTER_READ")));
    CHECK_THAT(st.error().message, Contains("2"));
  }
}

TEST_CASE("a cube that leaves before a sync_cluster stops its cluster with a report", "[cluster]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "cluster_sum");
    Tensor x = test::f32_tensor(rt, test::rows_of_64(2));
    Tensor out = test::f32_tensor(rt, test::rows_of_64(2));
    const Status st = run(rt, k, 2, x, out, 2, 4);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("CLUSTER_SYNC")));
    CHECK_THAT(st.error().message, Contains("sync_cluster"));
  }
}

TEST_CASE("the emulator finds cluster_loads that no sync_cluster orders", "[cluster]") {
  (void)kernels::builtin_names();
  auto opened = Runtime::open("cuda-emu:sm_90a");
  if (!opened) {
    WARN("skipped: " << opened.error().message);
    return;
  }
  Runtime& rt = *opened;
  auto k = test::kernel(rt, "cluster_sum");
  Tensor x = test::f32_tensor(rt, test::rows_of_64(2));
  Tensor out = test::f32_tensor(rt, test::rows_of_64(2));
  // Reads of the other cube's memory before it is known to be written.
  Status st = run(rt, k, 2, x, out, 2, 1);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains(loc("CLUSTER_READ")));
  // A cube that may leave while the other still reads its memory.
  st = run(rt, k, 2, x, out, 2, 2);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains(loc("CLUSTER_READ")));
  CHECK_THAT(st.error().message, Contains("returned"));
}

TEST_CASE("a multicast TMA box lands in every cube of the mask", "[cluster][tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "cluster_bcast");
    for (int size : {1, 2, 4}) {
      const auto cubes = static_cast<uint32_t>(size * 2);
      const std::vector<float> host = test::rows_of_64(cubes);
      auto xs = rt.empty(ir::ElemType::F32, {cubes, 64});
      REQUIRE(xs.ok());
      REQUIRE(xs->upload(std::span<const float>(host)).ok());
      Tensor out = test::f32_tensor(
          rt, std::vector<float>(size_t{cubes} * static_cast<size_t>(size) * 64, -1.0f));
      INFO("clusters of " << size);
      KILN_REQUIRE_OK(run(rt, k, cubes, *xs, out, size, 0));
      const auto got = test::to_host<float>(out);
      const auto n = static_cast<uint32_t>(size);
      for (uint32_t c = 0; c < cubes; ++c)
        for (uint32_t r = 0; r < n; ++r)
          for (uint32_t u = 0; u < 64; ++u)
            REQUIRE(got[(c * n + r) * 64 + u] == host[(c / n * n + r) * 64 + u]);
    }
  }
}

TEST_CASE("a multicast before the other cubes initialize their mbarriers is reported",
          "[cluster][tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "cluster_bcast");
    auto xs = rt.empty(ir::ElemType::F32, {2, 64});
    REQUIRE(xs.ok());
    REQUIRE(xs->upload(std::span<const float>(test::rows_of_64(2))).ok());
    Tensor out = test::f32_tensor(rt, std::vector<float>(4 * 64, 0.0f));
    Status st = run(rt, k, 2, *xs, out, 2, 1);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("CLUSTER_CAST")));
    CHECK_THAT(st.error().message, Contains("mbarrier_init"));
    // A mask naming a rank outside the cluster.
    st = run(rt, k, 2, *xs, out, 2, 2);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("CLUSTER_CAST")));
  }
}

}  // namespace
}  // namespace kiln
