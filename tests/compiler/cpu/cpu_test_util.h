// Helpers for CPU backend tests: compile IR or registered kernels for the host and run them.
// Built with KILN_TEST_CUDA (the test_gpu and test_emu programs), the same tests compile for
// the environment's KILN_TEST_DEVICE (cuda:0, or the emulator cuda-emu) and run there instead
// (tests/gpu/gpu_exec.h): the CPU's numeric tests, unchanged, on a GPU.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "compiler/backend.h"
#include "compiler/cpu/backend.h"
#include "compiler/dsl/registry.h"
#include "compiler/passes/pipeline.h"
#include "ir/float16.h"
#include "ir/printer.h"
#include "runtime/cpu/exec.h"
#ifdef KILN_TEST_CUDA
#include "tests/gpu/gpu_exec.h"
#endif

namespace kiln::test {

inline const cpu::Target& host() {
  static const cpu::Target t = *cpu::host_target();
  return t;
}

#ifdef KILN_TEST_CUDA
using TestKernel = GpuKernel;
inline const char* device_name() {
  return test_device();
}
inline std::unique_ptr<TestKernel> compile_ir(const ir::Kernel& k) {
  return compile_gpu(k);
}
#else
using TestKernel = cpu::CompiledKernel;
inline const char* device_name() {
  return "cpu";
}

// The target compile_ir compiles for: the host, or another (a variant of the host's features)
// while a TargetScope lives.
inline const cpu::Target*& scoped_target() {
  static const cpu::Target* t = nullptr;
  return t;
}
struct TargetScope {
  explicit TargetScope(const cpu::Target& t) { scoped_target() = &t; }
  ~TargetScope() { scoped_target() = nullptr; }
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;
};

// Lowers and compiles a verified kernel for the host; fails the test on error.
inline std::unique_ptr<cpu::CompiledKernel> compile_ir(const ir::Kernel& k) {
  auto lowered = backend::find("cpu")->prepare(k);
  INFO((lowered.ok() ? std::string() : lowered.error().message));
  REQUIRE(lowered.ok());
  cpu::CompileOptions o;
  o.target = scoped_target() ? *scoped_target() : host();
  auto c = cpu::compile(*lowered, o);
  INFO((c.ok() ? std::string() : c.error().message));
  REQUIRE(c.ok());
  return std::move(*c);
}
#endif

// Traces a registered kernel and compiles it for the test's device.
inline std::unique_ptr<TestKernel> compile_kernel(const std::string& name,
                                                  const dsl::SpecOptions& opts = {}) {
  const dsl::KernelDef* def = dsl::Registry::global().find(name);
  REQUIRE(def);
  auto sel = dsl::select(*def, opts);
  INFO((sel.ok() ? std::string() : sel.error().message));
  REQUIRE(sel.ok());
  auto k = dsl::trace(*def, *sel->inst, sel->request);
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  return compile_ir(*k);
}

// Runs; a fault or a failed assert is an error (`pool`: the CPU's worker pool, or the global one).
inline Result<CpuRunReport> try_run(const TestKernel& k, std::array<uint32_t, 3> cubes,
                                    const std::vector<HostArg>& args, ThreadPool* pool = nullptr) {
#ifdef KILN_TEST_CUDA
  (void)pool;
  return run_gpu(k, cubes, args);
#else
  return run_cpu(k, cubes, args, pool);
#endif
}

// Runs and fails the test on error.
inline CpuRunReport run(const TestKernel& k, std::array<uint32_t, 3> cubes,
                        const std::vector<HostArg>& args, ThreadPool* pool = nullptr) {
  auto r = try_run(k, cubes, args, pool);
  INFO((r.ok() ? std::string() : r.error().message));
  REQUIRE(r.ok());
  return std::move(*r);
}

template <class T>
TensorView tensor(std::vector<T>& v, std::initializer_list<int64_t> shape) {
  return TensorView(v.data(), shape);
}
template <class T>
TensorView tensor(std::vector<T>& v) {
  return TensorView(v.data(), {static_cast<int64_t>(v.size())});
}
template <class T>
ArrayView array(std::vector<T>& v) {
  return ArrayView{v.data(), v.size()};
}
inline ScalarBits scalar_f32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return ScalarBits{b};
}
inline ScalarBits scalar_u32(uint32_t v) {
  return ScalarBits{v};
}

// Fresh random inputs for each run; set KILN_TEST_SEED to repeat a run (the seed is printed).
inline std::mt19937_64& rng() {
  static std::mt19937_64 r([] {
    uint64_t seed = std::random_device{}();
    if (const char* env = std::getenv("KILN_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
    std::fprintf(stderr, "KILN_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
    return seed;
  }());
  return r;
}
inline std::vector<float> random_floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

}  // namespace kiln::test
