// Plane reductions on the CPU (compiler/passes/unit_loops.cpp, plane_reduce): where every plane
// of the cube has the same width, the CPU sums in the same tree as a GPU's plane (the CUDA
// prelude's plane_reduce), so plane_sum gives the CPU, the emulator (and a GPU) the same bits;
// a cube with a partial last plane sums that plane's units in order. Checked against a double
// reference on both, and bit for bit between them, on values whose sum depends on the order.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "compiler/dsl/dsl.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

namespace {

// out[3 p + 0..2] = the sum, maximum and minimum of x over plane p of the cube (x holds one
// value per unit of the single cube).
void t_plane_reduce(Tensor<const f32> x, Tensor<f32> out) {
  f32 v = x[unit_pos()];
  f32 s = plane_sum(v), hi = plane_max(v), lo = plane_min(v);
  if_(plane_lane() == 0u, [&] {
    out[plane_pos() * 3u] = s;
    out[plane_pos() * 3u + 1u] = hi;
    out[plane_pos() * 3u + 2u] = lo;
  });
}
KILN_KERNEL(t_plane_reduce, "x, out");

}  // namespace

namespace kiln {
namespace {

TEST_CASE("plane reductions: a GPU's tree on the CPU, the same bits as the emulator", "[plane]") {
  std::vector<Runtime> devices = test::open_devices({"cpu", "cuda-emu:sm_80"});
  REQUIRE_FALSE(devices.empty());
  std::mt19937 rng(46);
  // Magnitudes from 2^-20 to 2^20: a sum in another order rounds differently.
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  for (uint32_t units : {1u, 5u, 13u, 16u, 32u, 64u, 96u, 48u}) {
    INFO(units << " units");
    const uint32_t planes = (units + 31) / 32;
    // Widths all equal (one plane, or whole planes): the tree. 48 has a partial plane.
    const bool tree = units <= 32 || units % 32 == 0;
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(units);
      for (float& v : x) v = std::ldexp(mant(rng), expo(rng));
      std::vector<std::vector<float>> got;
      for (Runtime& rt : devices) {
        INFO("on " << rt.device().name);
        Tensor tx = test::f32_tensor(rt, x);
        Tensor out = test::f32_tensor(rt, std::vector<float>(3 * planes, 0.0f));
        auto k = test::kernel(rt, "t_plane_reduce");
        KILN_REQUIRE_OK(rt.launch(k, 1, units, tx.as_read_only(), out));
        KILN_REQUIRE_OK(rt.sync());
        got.push_back(test::to_host<float>(out));
        for (uint32_t p = 0; p < planes; ++p) {
          double sum = 0, mag = 0;
          float hi = -INFINITY, lo = INFINITY;
          for (uint32_t u = p * 32; u < std::min(units, p * 32 + 32); ++u) {
            sum += x[u];
            mag += std::fabs(x[u]);
            hi = std::max(hi, x[u]);
            lo = std::min(lo, x[u]);
          }
          CHECK(std::fabs(got.back()[3 * p] - sum) <= 1e-6 * mag);
          CHECK(got.back()[3 * p + 1] == hi);
          CHECK(got.back()[3 * p + 2] == lo);
        }
      }
      if (got.size() == 2 && tree)
        REQUIRE(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4) == 0);
    }
  }
}

}  // namespace
}  // namespace kiln
