// The unit vectorizer (compiler/cpu/vectorize.cpp): every kernel here is compiled twice, with
// units in SIMD lanes and one unit at a time, run on the same inputs, and the results compared
// bit for bit (the kernels' semantics are exact). Cube sizes that are not multiples of the
// vector test the partial last vector. Every other CPU test also runs in both modes: ctest runs
// test_cpu, test_kernels and test_runtime again with KILN_CPU_VECTORIZE=0.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "compiler/cpu/backend.h"
#include "runtime/thread_pool.h"
#include "tests/compiler/cpu/cpu_test_util.h"

using namespace kiln;

namespace {

uint32_t div_up(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

ir::Kernel traced(const std::string& name, std::array<uint32_t, 3> cube) {
  const dsl::KernelDef* def = dsl::Registry::global().find(name);
  REQUIRE(def);
  dsl::SpecOptions o;
  o.cube_dim = cube;
  auto sel = dsl::select(*def, o);
  REQUIRE(sel.ok());
  auto k = dsl::trace(*def, *sel->inst, sel->request);
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  return std::move(*k);
}

struct Pair {
  std::unique_ptr<cpu::CompiledKernel> vec, scalar;
  std::string vec_llvm;  // the vectorized kernel's LLVM IR before optimization
};

// The vectorized side's target: the host, or with KILN_TEST_AVX2=1 the host without AVX-512
// (ctest runs these tests again so: AVX2, 8 units per vector, ymm masks and gathers).
cpu::Target vector_target() {
  cpu::Target t = test::host();
  const char* avx2 = std::getenv("KILN_TEST_AVX2");
  if (avx2 && std::string(avx2) == "1") {
    t.features += ",-avx512f";
    t.vector_bits = 256;
  }
  return t;
}

Pair compile_both(const std::string& name, std::array<uint32_t, 3> cube, bool checked = false) {
  const ir::Kernel k = traced(name, cube);
  auto lowered = backend::find("cpu")->prepare(k);
  REQUIRE(lowered.ok());
  Pair p;
  for (bool vec : {true, false}) {
    cpu::CompileOptions o;
    o.target = vec ? vector_target() : test::host();
    o.target.vectorize = vec;
    o.checked = checked;
    auto c = cpu::compile(*lowered, o);
    INFO((c.ok() ? std::string() : c.error().message));
    REQUIRE(c.ok());
    (vec ? p.vec : p.scalar) = std::move(*c);
    if (vec) {
      auto text = cpu::emit_llvm(*lowered, o, false);
      REQUIRE(text.ok());
      p.vec_llvm = *text;
    }
  }
  return p;
}

// The host vectorizes when it has vectors of more than one f32 (every x86-64 CPU does).
void require_vector_code(const Pair& p) {
  INFO(p.vec_llvm.substr(0, 4000));
  REQUIRE(p.vec_llvm.find("units.body") != std::string::npos);
  REQUIRE(p.vec_llvm.find(" x i32> ") != std::string::npos);
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("vectorized: divergent control flow agrees with unit-by-unit", "[vectorize]") {
  for (uint32_t cd : {64u, 7u, 33u, 100u}) {
    INFO("cube_dim " << cd);
    Pair p = compile_both("v_divergent", {cd, 1, 1});
    require_vector_code(p);
    const size_t n = 1000;
    auto in = test::random_floats(n);
    for (size_t i = 0; i < n; i += 17) in[i] = -0.95f;  // some reach the return in the loop
    std::vector<float> out_v(n, 0), out_s(n, 0);
    std::vector<uint32_t> st_v(n, 0), st_s(n, 0);
    test::run(*p.vec, {div_up(n + 5, cd), 1, 1},
              {test::tensor(in), test::tensor(out_v), test::tensor(st_v)});
    test::run(*p.scalar, {div_up(n + 5, cd), 1, 1},
              {test::tensor(in), test::tensor(out_s), test::tensor(st_s)});
    REQUIRE(same_bits(out_v, out_s));
    REQUIRE(same_bits(st_v, st_s));
    // And the scalar result is what the kernel says (spot check of one unit's path).
    const size_t i = 40;  // i % 13 == 1: one iteration (j = 0, adds 0); then the while_
    float acc = 0;
    uint32_t steps = 1;
    while (steps < i % 7) {
      ++steps;
      acc = in[i] > 0.8f ? acc * 0.5f : in[i] < 0.0f ? acc - 1.0f : acc + 0.25f;
    }
    REQUIRE(st_s[i] == (in[i] < -0.9f ? st_s[i] : steps));
    if (in[i] >= -0.5f) REQUIRE(out_s[i] == acc);
  }
}

TEST_CASE("vectorized: gathers, scatters and colliding stores", "[vectorize]") {
  for (uint32_t cd : {128u, 24u}) {
    INFO("cube_dim " << cd);
    Pair p = compile_both("v_gather_scatter", {cd, 1, 1});
    require_vector_code(p);
    const size_t n = 777;
    auto in = test::random_floats(n);
    std::vector<uint32_t> perm(n);
    for (size_t i = 0; i < n; ++i) perm[i] = static_cast<uint32_t>((i * 389) % n);
    std::vector<float> out_v(n, 0), out_s(n, 0), c_v(n, 0), c_s(n, 0);
    ThreadPool one(1);  // colliding stores across cubes would race; within a cube they agree
    for (auto* k : {p.vec.get(), p.scalar.get()}) {
      const bool v = k == p.vec.get();
      test::run(*k, {div_up(n, cd), 1, 1},
                {test::tensor(in), test::tensor(perm), test::tensor(v ? out_v : out_s),
                 test::tensor(v ? c_v : c_s)},
                &one);
    }
    REQUIRE(same_bits(out_v, out_s));
    REQUIRE(same_bits(c_v, c_s));
    for (size_t i = 0; i < n; ++i) REQUIRE(out_s[perm[i]] == in[(i * 7) % n] + in[n - 1 - i]);
    // The last unit of each group of three wins when units run in order.
    REQUIRE(c_s[0] == in[2]);
  }
}

TEST_CASE("vectorized: atomics at colliding addresses run lane by lane", "[vectorize]") {
  Pair p = compile_both("v_atomics", {100, 1, 1});
  const size_t n = 950;
  std::vector<uint32_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = static_cast<uint32_t>((i * 31 + 7) % 97);
  std::vector<uint32_t> h_v(13, 0), h_s(13, 0), o_v(n, 0), o_s(n, 0);
  std::vector<int32_t> mm_v{-1000, 1000}, mm_s{-1000, 1000};
  ThreadPool one(1);  // old values of global atomics depend on the order of the cubes
  test::run(*p.vec, {div_up(n, 100), 1, 1},
            {test::tensor(keys), test::tensor(h_v), test::tensor(o_v), test::tensor(mm_v)}, &one);
  test::run(*p.scalar, {div_up(n, 100), 1, 1},
            {test::tensor(keys), test::tensor(h_s), test::tensor(o_s), test::tensor(mm_s)}, &one);
  REQUIRE(same_bits(h_v, h_s));
  REQUIRE(same_bits(o_v, o_s));
  REQUIRE(same_bits(mm_v, mm_s));
  uint32_t total = 0;
  for (size_t b = 0; b < 5; ++b) total += h_s[b];
  REQUIRE(total == 2 * n);
  total = 0;
  for (size_t b = 5; b < 13; ++b) total += h_s[b];
  REQUIRE(total == n);
  REQUIRE(mm_s[0] == 96 - 50);
  REQUIRE(mm_s[1] == -50);
}

TEST_CASE("vectorized: local arrays with a row per lane", "[vectorize]") {
  for (uint32_t cd : {48u, 16u, 5u}) {
    INFO("cube_dim " << cd);
    Pair p = compile_both("v_local", {cd, 1, 1});
    require_vector_code(p);
    const size_t n = 48 * 5;
    auto in = test::random_floats(n);
    std::vector<float> out_v(n, 0), out_s(n, 0);
    test::run(*p.vec, {div_up(n, cd), 1, 1}, {test::tensor(in), test::tensor(out_v)});
    test::run(*p.scalar, {div_up(n, cd), 1, 1}, {test::tensor(in), test::tensor(out_s)});
    REQUIRE(same_bits(out_v, out_s));
    for (size_t i = 0; i < n; ++i) {
      float row[8];
      for (int k = 0; k < 8; ++k) row[k] = in[i] * static_cast<float>(k);
      if (in[i] > 0) row[i % 8] = -in[i];
      REQUIRE(out_s[i] == row[3] + row[(i * 5) % 8]);
    }
  }
}

TEST_CASE("vectorized: lines per unit", "[vectorize]") {
  for (uint32_t cd : {32u, 3u}) {
    INFO("cube_dim " << cd);
    Pair p = compile_both("v_lines", {cd, 1, 1});
    require_vector_code(p);
    const size_t lines = 96;
    auto in = test::random_floats(lines * 4);
    std::vector<float> out_v(lines * 4, 0), out_s(lines * 4, 0);
    test::run(*p.vec, {div_up(lines, cd), 1, 1}, {test::tensor(in), test::tensor(out_v)});
    test::run(*p.scalar, {div_up(lines, cd), 1, 1}, {test::tensor(in), test::tensor(out_s)});
    REQUIRE(same_bits(out_v, out_s));
    for (size_t i = 0; i < lines; ++i) {
      const size_t j = (i * 3) % lines;
      const float s = in[i * 4] + in[j * 4 + 3];
      for (size_t l = 0; l < 4; ++l) {
        const float a = in[i * 4 + l], b = in[j * 4 + l];
        const float want = s > 0 ? (l == 2 ? s : a * b) : a - b;
        REQUIRE(out_s[i * 4 + l] == want);
      }
    }
  }
}

TEST_CASE("vectorized: 2-D cubes", "[vectorize]") {
  Pair p = compile_both("v_cube2d", {12, 5, 1});
  require_vector_code(p);
  const int64_t h = 23, w = 50;
  auto in = test::random_floats(static_cast<size_t>(h * w));
  std::vector<float> out_v(in.size(), 0), out_s(in.size(), 0);
  test::run(*p.vec, {div_up(w, 12), div_up(h, 5), 1},
            {test::tensor(in, {h, w}), test::tensor(out_v, {h, w})});
  test::run(*p.scalar, {div_up(w, 12), div_up(h, 5), 1},
            {test::tensor(in, {h, w}), test::tensor(out_s, {h, w})});
  REQUIRE(same_bits(out_v, out_s));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const size_t i = static_cast<size_t>(y * w + x);
      REQUIRE(out_s[i] == in[i] * 2.0f + (x > 0 ? in[i - 1] : 0.0f));
    }
}

TEST_CASE("vectorized: checked mode reports the first unit out of bounds", "[vectorize]") {
  Pair p = compile_both("v_checked", {64, 1, 1}, true);
  const size_t n = 100;
  auto in = test::random_floats(150);  // units 75.. read past the end
  std::vector<float> out_v(n, -1), out_s(n, -1);
  auto rv = test::try_run(*p.vec, {2, 1, 1}, {test::tensor(in), test::tensor(out_v)});
  auto rs = test::try_run(*p.scalar, {2, 1, 1}, {test::tensor(in), test::tensor(out_s)});
  REQUIRE(!rv.ok());
  REQUIRE(!rs.ok());
  INFO(rs.error().message);
  REQUIRE(rv.error().message == rs.error().message);
  REQUIRE(rs.error().message.find("line index 150 is not below 150 (cube 1, unit 11)") !=
          std::string::npos);  // absolute unit 75 reads in[150], the first past the end
  REQUIRE(same_bits(out_v, out_s));
  REQUIRE(out_s[80] == 1.0f);  // the load was skipped and gave zero
}

TEST_CASE("vectorized: division by a divisor known at run time", "[vectorize]") {
  Pair p = compile_both("v_divmod", {64, 1, 1});
  require_vector_code(p);
  REQUIRE(p.vec_llvm.find("magic") != std::string::npos);
  std::vector<uint32_t> x;
  for (uint32_t v : {0u, 1u, 2u, 3u, 6u, 7u, 8u, 100u, 65535u, 65536u, 0x7fffffffu, 0x80000000u,
                     0x80000001u, 0xfffffffeu, 0xffffffffu})
    x.push_back(v);
  std::mt19937 g(5);
  while (x.size() < 1000) x.push_back(static_cast<uint32_t>(g()) >> (g() % 32));
  const size_t n = x.size();
  for (uint32_t d : {0u, 1u, 2u, 3u, 5u, 7u, 10u, 16u, 641u, 65537u, 0x7fffffffu, 0x80000000u,
                     0x80000001u, 0xfffffffeu, 0xffffffffu, static_cast<uint32_t>(g())}) {
    INFO("d = " << d);
    std::vector<uint32_t> q(n), r(n);
    test::run(*p.vec, {div_up(n, 64), 1, 1},
              {test::tensor(x), test::tensor(q), test::tensor(r), test::scalar_u32(d)});
    for (size_t i = 0; i < n; ++i) {
      INFO("x = " << x[i]);
      REQUIRE(q[i] == (d ? x[i] / d : 0u));
      REQUIRE(r[i] == (d ? x[i] % d : x[i]));
    }
  }
}

TEST_CASE("vectorized: a block-stride loop runs iteration-major", "[vectorize]") {
  for (uint32_t cubes : {1u, 3u, 7u}) {
    INFO("cubes " << cubes);
    Pair p = compile_both("v_strided", {48, 1, 1});
    require_vector_code(p);
    REQUIRE(p.vec_llvm.find("strided.iter") != std::string::npos);
    const size_t n = 1001;
    auto in = test::random_floats(n);
    std::vector<float> out_v(n, -5), out_s(n, -5);
    std::vector<uint32_t> c_v(4, 0), c_s(4, 0);
    test::run(*p.vec, {cubes, 1, 1}, {test::tensor(in), test::tensor(out_v), test::tensor(c_v)});
    test::run(*p.scalar, {cubes, 1, 1}, {test::tensor(in), test::tensor(out_s), test::tensor(c_s)});
    REQUIRE(same_bits(out_v, out_s));
    REQUIRE(c_v == c_s);
    std::vector<uint32_t> want(4, 0);
    for (size_t i = 0; i < n; ++i) {
      if (in[i] < -0.8f) {
        REQUIRE(out_s[i] == -5.0f);
        continue;
      }
      REQUIRE(out_s[i] == in[i] * 2.0f + static_cast<float>(i % 7));
      if (in[i] > 0.5f) ++want[i % 4];
    }
    REQUIRE(c_s == want);
  }
}

TEST_CASE("vectorized: rows of a cube that are not a multiple of the vector", "[vectorize]") {
  Pair p = compile_both("v_rows24", {24, 3, 1});
  require_vector_code(p);
  const size_t units = 72, cubes = 5;
  std::vector<uint32_t> out_v(units * cubes), out_s(units * cubes);
  test::run(*p.vec, {static_cast<uint32_t>(cubes), 1, 1}, {test::tensor(out_v)});
  test::run(*p.scalar, {static_cast<uint32_t>(cubes), 1, 1}, {test::tensor(out_s)});
  for (size_t i = 0; i < out_s.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(i % units);
    REQUIRE(out_s[i] == (u % 32) * 1000 + u / 32);
  }
  REQUIRE(out_v == out_s);
}

TEST_CASE("vectorized: accesses at unit + a - b, including sums that wrap on purpose",
          "[vectorize]") {
  Pair p = compile_both("v_shifted", {64, 1, 1});
  require_vector_code(p);
  const size_t n = 333;
  const std::pair<uint32_t, uint32_t> cases[] = {
      {5, 2}, {0, 3}, {40, 0}, {0xfffffff0u, 0xffffffecu}, {0xfffffff0u, 0xfffffff3u}};
  for (auto [a, b] : cases) {
    INFO("a = " << a << ", b = " << b);
    auto in = test::random_floats(n);
    std::vector<float> out_v(n, -9), out_s(n, -9), m_v(n, -9), m_s(n, -9);
    test::run(*p.vec, {div_up(n, 64), 1, 1},
              {test::tensor(in), test::tensor(out_v), test::tensor(m_v), test::scalar_u32(a),
               test::scalar_u32(b)});
    test::run(*p.scalar, {div_up(n, 64), 1, 1},
              {test::tensor(in), test::tensor(out_s), test::tensor(m_s), test::scalar_u32(a),
               test::scalar_u32(b)});
    REQUIRE(same_bits(out_v, out_s));
    REQUIRE(same_bits(m_v, m_s));
    const uint32_t shift = a - b;  // modulo 2^32, as the kernel computes it
    for (size_t i = 0; i < n; ++i) {
      const uint32_t j = static_cast<uint32_t>(i) + shift;
      REQUIRE(out_s[i] == (j < n ? in[j] : -9.0f));
    }
  }
}

TEST_CASE("vectorized: run-time consecutive and stride-2 windows", "[vectorize]") {
  Pair p = compile_both("v_windows", {64, 1, 1});
  require_vector_code(p);
  for (uint32_t w : {1u, 7u, 16u, 40u, 100u}) {
    INFO("w = " << w);
    const size_t n = 600;
    auto in = test::random_floats(2 * n + 2 * w);
    std::vector<float> out_v(n, -9), out_s(n, -9);
    test::run(*p.vec, {div_up(n, 64), 1, 1},
              {test::tensor(in), test::tensor(out_v), test::scalar_u32(w)});
    test::run(*p.scalar, {div_up(n, 64), 1, 1},
              {test::tensor(in), test::tensor(out_s), test::scalar_u32(w)});
    REQUIRE(same_bits(out_v, out_s));
    for (size_t i = 0; i < n; ++i) {
      const size_t row = i / w, col = i % w;
      if (col % 5 == 3) {
        REQUIRE(out_s[i] == -9.0f);
        continue;
      }
      REQUIRE(out_s[i] == in[row * 2 * w + 2 * col] - in[row * 2 * w + col] * 0.5f);
    }
  }
}

TEST_CASE("vectorized: a local array across a barrier, checked", "[vectorize]") {
  Pair p = compile_both("v_local_barrier", {32, 1, 1}, true);
  for (uint32_t bad : {4u, 134217728u}) {  // one past the end; 2^27 * 32 units wraps to 0
    INFO("bad index " << bad);
    std::vector<uint32_t> idx(64);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint32_t>(i % 4);
    idx[37] = bad;
    std::vector<float> out_v(64, -1), out_s(64, -1);
    auto rv = test::try_run(*p.vec, {2, 1, 1}, {test::tensor(idx), test::tensor(out_v)});
    auto rs = test::try_run(*p.scalar, {2, 1, 1}, {test::tensor(idx), test::tensor(out_s)});
    REQUIRE(!rv.ok());
    REQUIRE(!rs.ok());
    INFO(rs.error().message);
    REQUIRE(rv.error().message == rs.error().message);
    REQUIRE(rs.error().message.find("(cube 1, unit 5)") != std::string::npos);
    REQUIRE(same_bits(out_v, out_s));
    for (size_t i = 0; i < 64; ++i)
      if (i != 37) REQUIRE(out_s[i] == static_cast<float>(i * 10 + i % 4));
  }
}
