// Every example kernel run on the CPU backend and checked against a C++ reference, with cube
// sizes 1, 7, 32, 256 and 1024 and several line widths, on fresh random inputs with the output
// poisoned first.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>

#include "kernels/kernels.h"
#include "kernels/run.h"
#include "tests/compiler/cpu/cpu_test_util.h"

using namespace kiln;
using test::compile_kernel;

namespace {

const uint32_t kCubeDims[] = {1, 7, 32, 256, 1024};
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

uint32_t div_up(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

dsl::SpecOptions opts(std::initializer_list<std::pair<const char*, int>> lines,
                      std::initializer_list<std::pair<const char*, std::string>> set,
                      std::array<uint32_t, 3> cube) {
  dsl::SpecOptions o;
  for (auto [n, l] : lines) o.line[n] = l;
  for (auto [n, v] : set) o.set[n] = v;
  o.cube_dim = cube;
  return o;
}

}  // namespace

TEST_CASE("axpy", "[examples]") {
  (void)kernels::builtin_names();
  for (int line : {1, 4, 16})
    for (uint32_t cd : kCubeDims) {
      INFO("line " << line << ", cube_dim " << cd);
      auto k = compile_kernel("axpy", opts({{"x", line}, {"y", line}}, {}, {cd, 1, 1}));
      const size_t lines = 1013, n = lines * static_cast<size_t>(line);
      auto x = test::random_floats(n), y0 = test::random_floats(n);
      auto y = y0;
      const float a = test::random_floats(1)[0];
      std::vector<HostArg> args{test::tensor(x), test::tensor(y), test::scalar_f32(a)};
      test::run(*k, {div_up(lines, cd), 1, 1}, args);
      for (size_t i = 0; i < n; ++i) REQUIRE(y[i] == std::fma(a, x[i], y0[i]));
    }
}

TEST_CASE("row_sum", "[examples]") {
  for (int line : {1, 4})
    for (uint32_t cd : kCubeDims) {
      INFO("line " << line << ", units " << cd);
      auto k = compile_kernel("row_sum",
                              opts({{"in", line}}, {{"units", std::to_string(cd)}}, {cd, 1, 1}));
      const int64_t rows = 37, cols = 1000;
      auto in = test::random_floats(static_cast<size_t>(rows * cols));
      std::vector<float> out(rows, kPoison);
      std::vector<HostArg> args{test::tensor(in, {rows, cols}), test::tensor(out)};
      test::run(*k, {static_cast<uint32_t>(rows), 1, 1}, args);
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          want += in[static_cast<size_t>(r * cols + c)];
          mag += std::fabs(in[static_cast<size_t>(r * cols + c)]);
        }
        REQUIRE(std::fabs(out[static_cast<size_t>(r)] - want) <= 1e-5 * mag);
      }
    }
}

TEST_CASE("plane_sum", "[examples]") {
  for (uint32_t cd : kCubeDims) {
    INFO("cube_dim " << cd);
    auto k = compile_kernel("plane_sum", opts({}, {}, {cd, 1, 1}));
    const size_t n = 5000;
    auto in = test::random_floats(n);
    const uint32_t cubes = div_up(n, cd);
    std::vector<float> out(cubes, kPoison);
    std::vector<HostArg> args{test::tensor(in), test::tensor(out)};
    test::run(*k, {cubes, 1, 1}, args);
    for (uint32_t c = 0; c < cubes; ++c) {
      double want = 0, mag = 0;
      for (size_t i = c * size_t{cd}; i < std::min(n, (c + 1) * size_t{cd}); ++i) {
        want += in[i];
        mag += std::fabs(in[i]);
      }
      REQUIRE(std::fabs(out[c] - want) <= 1e-5 * mag + 1e-30);
    }
  }
}

TEST_CASE("histogram", "[examples]") {
  for (int bins : {64, 13})
    for (uint32_t cd : kCubeDims) {
      INFO("bins " << bins << ", cube_dim " << cd);
      auto k = compile_kernel("histogram", opts({}, {{"bins", std::to_string(bins)}}, {cd, 1, 1}));
      const size_t n = 20011;
      auto data = test::random_floats(n, -0.1f, 1.1f);  // some outside [0, 1)
      data[0] = std::numeric_limits<float>::quiet_NaN();
      std::vector<uint32_t> hist(static_cast<size_t>(bins), 0);
      std::vector<HostArg> args{test::tensor(data), test::tensor(hist)};
      test::run(*k, {div_up(n, cd), 1, 1}, args);
      std::vector<uint32_t> want(static_cast<size_t>(bins), 0);
      for (float v : data) {
        float b = std::clamp(v * static_cast<float>(bins), 0.0f, static_cast<float>(bins - 1));
        if (std::isnan(v)) b = 0;  // clamp keeps the non-NaN bound; cast of NaN is 0
        ++want[static_cast<size_t>(b)];
      }
      REQUIRE(hist == want);
    }
}

TEST_CASE("stencil2d", "[examples]") {
  const std::array<uint32_t, 3> cubes[] = {{1, 1, 1},   {7, 1, 1},   {32, 1, 1},
                                           {16, 16, 1}, {32, 32, 1}, {1, 7, 1}};
  for (auto cd : cubes) {
    INFO("cube_dim " << cd[0] << "x" << cd[1]);
    auto k = compile_kernel("stencil2d", opts({}, {}, cd));
    const int64_t h = 45, w = 77;
    auto in = test::random_floats(static_cast<size_t>(h * w));
    std::vector<float> out(in.size(), kPoison);
    std::vector<HostArg> args{test::tensor(in, {h, w}), test::tensor(out, {h, w})};
    test::run(*k, {div_up(w, cd[0]), div_up(h, cd[1]), 1}, args);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        auto at = [&](int64_t yy, int64_t xx) { return in[static_cast<size_t>(yy * w + xx)]; };
        const bool interior = x > 0 && y > 0 && x + 1 < w && y + 1 < h;
        const float want =
            interior ? at(y - 1, x) + at(y + 1, x) + at(y, x - 1) + at(y, x + 1) - 4.0f * at(y, x)
                     : at(y, x);
        REQUIRE(std::fabs(out[static_cast<size_t>(y * w + x)] - want) <= 1e-5f);
      }
  }
}

TEST_CASE("scale_generic in every element type", "[examples]") {
  for (int line : {1, 4, 8})
    for (uint32_t cd : {7u, 256u}) {
      INFO("line " << line << ", cube_dim " << cd);
      const size_t lines = 333, n = lines * static_cast<size_t>(line);
      {
        auto k = compile_kernel("scale_generic", opts({{"x", line}}, {}, {cd, 1, 1}));
        auto x = test::random_floats(n);
        auto x0 = x;
        std::vector<HostArg> args{test::tensor(x), test::scalar_f32(1.5f)};
        test::run(*k, {div_up(lines, cd), 1, 1}, args);
        for (size_t i = 0; i < n; ++i) REQUIRE(x[i] == x0[i] * 1.5f);
      }
      {
        dsl::SpecOptions o = opts({{"x", line}}, {}, {cd, 1, 1});
        o.dtype["x"] = "f64";
        auto k = compile_kernel("scale_generic", o);
        std::vector<double> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = test::random_floats(1)[0];
        auto x0 = x;
        double f = -0.25;
        uint64_t fb;
        std::memcpy(&fb, &f, 8);
        std::vector<HostArg> args{test::tensor(x), ScalarBits{fb}};
        test::run(*k, {div_up(lines, cd), 1, 1}, args);
        for (size_t i = 0; i < n; ++i) REQUIRE(x[i] == x0[i] * f);
      }
      for (const char* half : {"f16", "bf16"}) {
        dsl::SpecOptions o = opts({{"x", line}}, {}, {cd, 1, 1});
        o.dtype["x"] = half;
        const bool is_f16 = std::string(half) == "f16";
        auto k = compile_kernel("scale_generic", o);
        std::vector<uint16_t> x(n);
        std::vector<double> x0(n);
        for (size_t i = 0; i < n; ++i) {
          const double v = test::random_floats(1, -8, 8)[0];
          x[i] = is_f16 ? f16_bits(v) : bf16_bits(v);
          x0[i] = is_f16 ? f16_value(x[i]) : bf16_value(x[i]);
        }
        const double factor = 3.0;
        std::vector<HostArg> args{test::tensor(x),
                                  ScalarBits{is_f16 ? f16_bits(factor) : bf16_bits(factor)}};
        test::run(*k, {div_up(lines, cd), 1, 1}, args);
        for (size_t i = 0; i < n; ++i) {
          const double want = is_f16 ? round_to_f16(static_cast<float>(x0[i] * factor))
                                     : round_to_bf16(static_cast<float>(x0[i] * factor));
          REQUIRE((is_f16 ? f16_value(x[i]) : bf16_value(x[i])) == want);
        }
      }
    }
}

TEST_CASE("poly_unrolled", "[examples]") {
  for (int degree : {0, 3, 12})
    for (int line : {1, 4, 16}) {
      INFO("degree " << degree << ", line " << line);
      auto k = compile_kernel(
          "poly_unrolled",
          opts({{"x", line}, {"y", line}}, {{"degree", std::to_string(degree)}}, {256, 1, 1}));
      const size_t lines = 777, n = lines * static_cast<size_t>(line);
      auto x = test::random_floats(n);
      std::vector<float> y(n, kPoison);
      std::vector<HostArg> args{test::tensor(x), test::tensor(y)};
      test::run(*k, {div_up(lines, 256), 1, 1}, args);
      for (size_t i = 0; i < n; ++i) {
        float acc = 1.0f / static_cast<float>(degree + 1);
        for (int d = degree - 1; d >= 0; --d)
          acc = std::fma(acc, x[i], 1.0f / static_cast<float>(d + 1));
        REQUIRE(y[i] == acc);
      }
    }
}

TEST_CASE("early_exit", "[examples]") {
  for (int line : {1, 4})
    for (uint32_t cd : kCubeDims) {
      INFO("line " << line << ", cube_dim " << cd);
      auto k = compile_kernel("early_exit", opts({{"x", line}, {"y", line}}, {}, {cd, 1, 1}));
      const size_t lines = 1001, n = lines * static_cast<size_t>(line);
      auto x = test::random_floats(n);
      std::vector<float> y(n + 16, kPoison);  // beyond the tensor: must stay poisoned
      TensorView yv(y.data(), {static_cast<int64_t>(n)});
      std::vector<HostArg> args{test::tensor(x), yv};
      test::run(*k, {div_up(lines, cd) + 1, 1, 1}, args);  // more units than data
      for (size_t i = 0; i < n; ++i) REQUIRE(y[i] == (x[i] < 0 ? 0.0f : x[i]));
      for (size_t i = n; i < y.size(); ++i) REQUIRE(std::isnan(y[i]));
    }
}

// Every kernel that declares how to run it (KILN_RUN) passes its reference through the runtime,
// in checked mode: no example reads or writes out of bounds at its declared sizes.
TEST_CASE("every kernel with a run recipe passes its reference in checked mode",
          "[examples][runtime]") {
  auto rt = Runtime::open(test::device_name());
  REQUIRE(rt.ok());
  int ran = 0;
  std::map<std::string, Runtime> emulators;  // of other architectures, for per-arch kernels
  for (const std::string& name : kernels::builtin_names()) {
    const kernels::RunRecipe* recipe = kernels::find_run_recipe(name);
    if (!recipe) continue;
    INFO(name);
    const kernels::Placement place = kernels::placement(*recipe, rt->device());
    if (!place.skip.empty()) {
      WARN(name << " skipped: " << place.skip);
      continue;
    }
    Runtime* on = &*rt;
    if (!place.emulator.empty()) {
      auto it = emulators.find(place.emulator);
      if (it == emulators.end()) {
        auto other = Runtime::open(place.emulator);
        REQUIRE(other.ok());
        it = emulators.emplace(place.emulator, std::move(*other)).first;
      }
      on = &it->second;
    }
    kernels::RunConfig config;
    config.checked = true;
    config.repeat = 0;
    config.seed = test::rng()() % 1000000007 + 1;
    auto r = kernels::run(*on, name, config);
    INFO((r.ok() ? std::string() : r.error().message));
    REQUIRE(r.ok());
    CHECK(r->has_reference);
    for (const auto& c : r->checks) {
      INFO(c.name << ": " << c.mismatches << " mismatches, first at " << c.first_bad << ": got "
                  << c.got << ", expected " << c.want);
      CHECK(c.mismatches == 0);
    }
    ++ran;
  }
  CHECK(ran >= 9);
}

// `kiln run` holds the tensors, their initial and expected outputs, and (for the reference)
// doubles of them; its peak must stay under three times the tensors' size (issue 9: it was 7x).
// Measured in a child process, whose peak resident size starts at its own baseline.
TEST_CASE("the runner's host memory stays under three times the tensors", "[runtime][memory]") {
  if (std::string(test::device_name()) != "cpu") {
    std::printf("skipped: a property of the host runner, measured on the cpu device\n");
    return;
  }
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  std::printf("skipped: a sanitizer's shadow memory makes the resident size meaningless\n");
  return;
#endif
  const int64_t n = int64_t{1} << 25;  // x and y: 2 x 128 MiB of f32
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto rt = Runtime::open("cpu");
    struct rusage before {};
    ::getrusage(RUSAGE_SELF, &before);
    kernels::RunConfig config;
    config.repeat = 1;
    config.seed = 5;
    config.shapes = {{"x", {n}}, {"y", {n}}};
    auto r = rt ? kernels::run(*rt, "axpy", config) : Result<kernels::RunResult>(rt.error());
    struct rusage after {};
    ::getrusage(RUSAGE_SELF, &after);
    const double grown = static_cast<double>(after.ru_maxrss - before.ru_maxrss) * 1024;
    const double tensors = static_cast<double>(2 * n * 4);
    std::fprintf(stderr, "runner peak: %.2f x the tensors\n", grown / tensors);
    ::_exit(!r || !r->passed ? 2 : grown < 3 * tensors ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
