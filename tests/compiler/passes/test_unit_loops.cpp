// Unit-loop fission, run on the CPU: barriers inside loops and uniform ifs, variables and local
// arrays that live across barriers, every plane op (partial planes too), early returns,
// atomics across worker threads, builtins, print and assert; and a stress run.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <thread>

#include "compiler/dsl/dsl.h"
#include "tests/compiler/cpu/cpu_test_util.h"
#include "tests/compiler/dsl/dsl_test_util.h"

using namespace kiln;
using namespace kiln::dsl;
using test::compile_kernel;

namespace {

uint32_t div_up(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

dsl::SpecOptions with(std::array<uint32_t, 3> cube,
                      std::initializer_list<std::pair<const char*, std::string>> set = {}) {
  dsl::SpecOptions o;
  o.cube_dim = cube;
  for (auto [n, v] : set) o.set[n] = v;
  return o;
}

}  // namespace

TEST_CASE("tiled matmul: barriers inside a loop", "[unit-loops]") {
  for (int tile : {4, 8, 16}) {
    INFO("tile " << tile);
    const uint32_t t = static_cast<uint32_t>(tile);
    auto k = compile_kernel("u_matmul", with({t, t, 1}, {{"tile", std::to_string(tile)}}));
    const int64_t m = 37, kk = 29, n = 45;
    auto a = test::random_floats(static_cast<size_t>(m * kk));
    auto b = test::random_floats(static_cast<size_t>(kk * n));
    std::vector<float> c(static_cast<size_t>(m * n), NAN);
    std::vector<HostArg> args{test::tensor(a, {m, kk}), test::tensor(b, {kk, n}),
                              test::tensor(c, {m, n})};
    test::run(*k, {div_up(n, t), div_up(m, t), 1}, args);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t l = 0; l < kk; ++l)
          want += double(a[size_t(i * kk + l)]) * b[size_t(l * n + j)];
        REQUIRE(std::fabs(c[size_t(i * n + j)] - want) <= 1e-4);
      }
  }
}

TEST_CASE("a barrier in a uniform if, with a variable and a local array across it",
          "[unit-loops]") {
  for (uint32_t cd : {1u, 7u, 64u, 1024u}) {
    INFO("cube_dim " << cd);
    auto k = compile_kernel("u_uniform_if", with({cd, 1, 1}));
    const uint32_t cubes = 9;
    auto in = test::random_floats(size_t{cd} * cubes);
    std::vector<float> out(in.size(), NAN);
    std::vector<HostArg> args{test::tensor(in), test::tensor(out)};
    test::run(*k, {cubes, 1, 1}, args);
    for (uint32_t c = 0; c < cubes; ++c)
      for (uint32_t u = 0; u < cd; ++u) {
        const float x = in[c * cd + u];
        const float v = c % 2 == 0 ? in[c * cd + (cd - 1 - u)] : -x;
        REQUIRE(out[c * cd + u] == v + x * 2.0f);
      }
  }
}

TEST_CASE("while_ with a barrier and a uniform counter", "[unit-loops]") {
  for (uint32_t cd : {1u, 7u, 64u, 100u, 1024u}) {
    INFO("cube_dim " << cd);
    auto k = compile_kernel("u_while", with({cd, 1, 1}));
    const uint32_t cubes = 5;
    auto in = test::random_floats(size_t{cd} * cubes);
    std::vector<float> out(cubes, NAN);
    std::vector<HostArg> args{test::tensor(in), test::tensor(out)};
    test::run(*k, {cubes, 1, 1}, args);
    for (uint32_t c = 0; c < cubes; ++c) {
      double want = 0, mag = 0;
      for (uint32_t u = 0; u < cd; ++u) {
        want += in[c * cd + u];
        mag += std::fabs(in[c * cd + u]);
      }
      REQUIRE(std::fabs(out[c] - want) <= 1e-5 * mag + 1e-30);
    }
  }
}

TEST_CASE("plane operations, full and partial planes", "[unit-loops][plane]") {
  for (uint32_t cd : {1u, 7u, 32u, 33u, 100u, 1024u}) {
    INFO("cube_dim " << cd);
    auto k = compile_kernel("u_plane", with({cd, 1, 1}));
    const uint32_t cubes = 3;
    const size_t n = size_t{cd} * cubes;
    auto in = test::random_floats(n);
    std::vector<float> out(n * 6, NAN);
    std::vector<uint32_t> flags(n * 3, 0xdeadbeef);
    std::vector<HostArg> args{test::tensor(in), test::tensor(out, {int64_t(n), 6}),
                              test::tensor(flags, {int64_t(n), 3})};
    test::run(*k, {cubes, 1, 1}, args);
    for (uint32_t c = 0; c < cubes; ++c)
      for (uint32_t u = 0; u < cd; ++u) {
        const size_t i = size_t{c} * cd + u;
        const uint32_t first = u / 32 * 32, count = std::min(cd - first, 32u), lane = u % 32;
        auto val = [&](uint32_t l) { return in[size_t{c} * cd + first + l]; };
        float sum = 0, mn = INFINITY, mx = -INFINITY;
        bool any = false, all = true;
        for (uint32_t l = 0; l < count; ++l) {
          sum += val(l);
          mn = std::min(mn, val(l));
          mx = std::max(mx, val(l));
          any = any || val(l) > 0.9f;
          all = all && val(l) > -2.0f;
        }
        auto lane_or_own = [&](uint32_t l) { return l < count ? val(l) : in[i]; };
        INFO("unit " << u);
        REQUIRE(std::fabs(out[i * 6 + 0] - sum) <= 1e-5f * 32);
        REQUIRE(out[i * 6 + 1] == mn);
        REQUIRE(out[i * 6 + 2] == mx);
        REQUIRE(out[i * 6 + 3] == lane_or_own(3));
        REQUIRE(out[i * 6 + 4] == lane_or_own((lane + 1) % 32));
        REQUIRE(out[i * 6 + 5] == lane_or_own(lane ^ 5));
        REQUIRE(flags[i * 3 + 0] == uint32_t(any));
        REQUIRE(flags[i * 3 + 1] == uint32_t(all));
        REQUIRE(flags[i * 3 + 2] == u / 32);
      }
  }
}

TEST_CASE("lanes of a line and a plane barrier", "[unit-loops][plane]") {
  for (uint32_t cd : {1u, 2u, 33u, 64u}) {
    INFO("cube_dim " << cd);
    auto k = compile_kernel("u_lanes", with({cd, 1, 1}, {{"units", std::to_string(cd)}}));
    const uint32_t cubes = 3;
    const size_t n = size_t{cd} * cubes;  // lines of 4
    auto in = test::random_floats(n * 4);
    std::vector<float> out(n * 4, NAN);
    std::vector<HostArg> args{test::tensor(in), test::tensor(out)};
    test::run(*k, {cubes, 1, 1}, args);
    for (uint32_t c = 0; c < cubes; ++c)
      for (uint32_t u = 0; u < cd; ++u) {
        INFO("cube " << c << ", unit " << u);
        const size_t i = size_t{c} * cd + u, partner = size_t{c} * cd + (u ^ 1u);
        REQUIRE(out[i * 4 + 0] == in[i * 4 + 0]);
        REQUIRE(out[i * 4 + 1] == in[i * 4 + 0]);
        REQUIRE(out[i * 4 + 2] == in[i * 4 + 3]);
        REQUIRE(out[i * 4 + 3] == ((u ^ 1u) < cd ? in[partner * 4 + 1] : 0.0f));
      }
  }
}

TEST_CASE("continue and break in a varying loop", "[unit-loops]") {
  auto k = compile_kernel("u_continue", with({64, 1, 1}));
  const size_t n = 64 * 5;
  auto in = test::random_floats(n * 8);
  std::vector<float> out(n, NAN);
  std::vector<HostArg> args{test::tensor(in), test::tensor(out)};
  test::run(*k, {5, 1, 1}, args);
  for (size_t i = 0; i < n; ++i) {
    float s = 0;
    for (size_t j = 0; j < 8; ++j) {
      const float v = in[i * 8 + j];
      if (v > 0.9f) break;
      if (v <= 0.0f) continue;
      s += v;
    }
    INFO("unit " << i);
    REQUIRE(out[i] == s);
  }
}

TEST_CASE("plane ops after some planes returned, then more unit code", "[unit-loops][plane]") {
  for (uint32_t cd : {40u, 128u, 300u}) {
    INFO("cube_dim " << cd);
    auto k = compile_kernel("u_plane_return", with({cd, 1, 1}));
    const uint32_t cubes = 2;
    auto in = test::random_floats(size_t{cd} * cubes);
    std::vector<float> out(in.size(), NAN);
    std::vector<HostArg> args{test::tensor(in), test::tensor(out)};
    test::run(*k, {cubes, 1, 1}, args);
    for (uint32_t c = 0; c < cubes; ++c)
      for (uint32_t u = 0; u < cd; ++u) {
        const size_t i = size_t{c} * cd + u;
        const uint32_t plane = u / 32, first = plane * 32, count = std::min(cd - first, 32u);
        if (plane == 1) {
          REQUIRE(std::isnan(out[i]));  // returned: untouched
          continue;
        }
        float r = plane % 2 == 0 ? 0.0f : -INFINITY;
        for (uint32_t l = 0; l < count; ++l) {
          const float x = in[size_t{c} * cd + first + l];
          r = plane % 2 == 0 ? r + x : std::max(r, x);
        }
        REQUIRE(std::fabs(out[i] - (r + 1.0f)) <= 1e-4f);
      }
  }
}

TEST_CASE("atomics are exact across worker threads", "[unit-loops][atomics]") {
  auto k = compile_kernel("u_atomics");
  const uint32_t cubes = 400, units = 96, n = cubes * units;
  std::vector<float> vals(n);
  for (uint32_t i = 0; i < n; ++i) vals[i] = static_cast<float>(i % 7) * 0.25f;  // exact sums
  for (int round = 0; round < 3; ++round) {
    std::vector<uint32_t> counters{0, 0, 0xffffffffu, 0};
    std::vector<double> sums{0};
    std::vector<uint32_t> ticket{0};
    std::vector<HostArg> args{test::tensor(counters), test::tensor(sums), test::tensor(ticket),
                              test::tensor(vals)};
    test::run(*k, {cubes, 1, 1}, args);
    double want = 0;
    for (float v : vals) want += v;
    REQUIRE(counters[0] == n);
    REQUIRE(counters[1] == n - 1);
    REQUIRE(counters[2] == 0);
    REQUIRE(counters[3] == 7);
    REQUIRE(sums[0] == want);
    REQUIRE(ticket[0] == n);
  }
}

TEST_CASE("builtins in 3-D cubes and grids", "[unit-loops]") {
  auto k = compile_kernel("u_builtins");
  const uint32_t dx = 5, dy = 3, dz = 2, cx = 4, cy = 3, cz = 2;
  const size_t units = dx * dy * dz, cubes = cx * cy * cz, n = units * cubes;
  std::vector<uint32_t> out(n * 13, 0xdeadbeef);
  std::vector<HostArg> args{test::tensor(out, {int64_t(n), 13})};
  test::run(*k, {cx, cy, cz}, args);
  for (uint32_t c = 0; c < cubes; ++c)
    for (uint32_t u = 0; u < units; ++u) {
      const uint32_t x = u % dx, y = u / dx % dy, z = u / (dx * dy);
      const uint32_t px = c % cx, py = c / cx % cy, pz = c / (cx * cy);
      const size_t i = size_t{c} * units + u;
      const uint32_t* o = &out[i * 13];
      INFO("cube " << c << " unit " << u);
      REQUIRE(o[0] == x);
      REQUIRE(o[1] == y);
      REQUIRE(o[2] == z);
      REQUIRE(o[3] == px);
      REQUIRE(o[4] == py);
      REQUIRE(o[5] == pz);
      REQUIRE(o[6] == px * dx + x);
      REQUIRE(o[7] == py * dy + y);
      REQUIRE(o[8] == pz * dz + z);
      REQUIRE(o[9] == u);
      REQUIRE(o[10] == c);
      REQUIRE(o[11] == units * 1000 + cubes);
      REQUIRE(o[12] == u % 32 + (u / 32) * 100 + 32 * 10000);
    }
}

TEST_CASE("print output arrives in order and a failed assert names its line", "[unit-loops]") {
  auto k = compile_kernel("u_print");
  std::vector<int32_t> x{5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<HostArg> args{test::tensor(x)};
  auto report = test::run(*k, {2, 1, 1}, args);
  REQUIRE(report.prints == std::vector<std::string>{"cube 0 unit 0 x=5", "cube 0 unit 1 x=6",
                                                    "cube 1 unit 0 x=9", "cube 1 unit 1 x=10"});
  x[6] = -1;
  auto r = test::try_run(*k, {2, 1, 1}, args);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().kind == ErrorKind::KernelFault);
  CHECK_THAT(r.error().message,
             Catch::StartsWith(test::marker_loc("tests/compiler/passes/unit_loop_kernels.cpp",
                                                "assert_(x[absolute_pos()] >= 0") +
                               ": error: assertion failed in kernel 'u_print': x is never negative "
                               "(cube 1, unit 2)"));
}

TEST_CASE("stress: barrier and atomic kernels many times on all threads", "[unit-loops][stress]") {
  ThreadPool pool(std::max(4u, std::thread::hardware_concurrency()));
  auto mm = compile_kernel("u_matmul", with({8, 8, 1}));
  auto at = compile_kernel("u_atomics");
  const int64_t m = 64, kk = 48, n = 72;
  auto a = test::random_floats(size_t(m * kk)), b = test::random_floats(size_t(kk * n));
  std::vector<float> want(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < kk; ++l) s += double(a[size_t(i * kk + l)]) * b[size_t(l * n + j)];
      want[size_t(i * n + j)] = float(s);
    }
  std::vector<float> vals(200 * 96, 0.5f);
  // Launches from two host threads at once share the pool (or run inline when it is busy).
  auto worker = [&](int iterations, std::atomic<int>& failures) {
    for (int it = 0; it < iterations; ++it) {
      std::vector<float> c(size_t(m * n), NAN);
      std::vector<HostArg> args{test::tensor(a, {m, kk}), test::tensor(b, {kk, n}),
                                test::tensor(c, {m, n})};
      if (!test::try_run(*mm, {div_up(n, 8), div_up(m, 8), 1}, args, &pool).ok()) ++failures;
      for (size_t i = 0; i < c.size(); ++i)
        if (!(std::fabs(c[i] - want[i]) <= 1e-4f)) {
          ++failures;
          break;
        }
      std::vector<uint32_t> counters{0, 0, 0xffffffffu, 0}, ticket{0};
      std::vector<double> sums{0};
      std::vector<HostArg> aargs{test::tensor(counters), test::tensor(sums), test::tensor(ticket),
                                 test::tensor(vals)};
      if (!test::try_run(*at, {200, 1, 1}, aargs, &pool).ok()) ++failures;
      if (counters[0] != 200 * 96 || ticket[0] != 200 * 96 || sums[0] != 200 * 96 * 0.5) ++failures;
    }
  };
  std::atomic<int> failures{0};
  std::thread t1(worker, 60, std::ref(failures));
  std::thread t2(worker, 60, std::ref(failures));
  t1.join();
  t2.join();
  REQUIRE(failures.load() == 0);
}
