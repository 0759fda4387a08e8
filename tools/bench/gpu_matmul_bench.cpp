// kiln::lib::matmul on cuda:0 against cuBLAS (cublasGemmEx, loaded at run time from the CUDA
// toolkit's libcublas) in the same run, on the shapes a model uses: squares from 1024 to 16384,
// 4096 x 4096 x 4096, a decode product (16 x 8192 by 8192 x 8192, where split-K matters) and a
// short-K one; f16 and bf16 inputs with outputs of the same type and f32 sums, as
// torch.matmul computes them. Each shape twice: B as [N, K] (transpose_b: both operands K-major,
// which the tensor-core paths read in place) and B as [K, N] (row-major: kiln copies it into
// rows of K on every call, cuBLAS reads it as it is). Prints the path kiln took (MatmulPlan), the
// TFLOP/s of both, their ratio, and the largest difference between the two results relative to
// the largest magnitude of the result. Then grouped products (kiln::lib::grouped_matmul, a
// mixture-of-experts layer's tokens routed unevenly to 8 or 64 experts) against cuBLAS called
// once per group. Without a GPU it says why and exits 77; without cuBLAS it measures kiln alone
// and says why.
//
// Usage: gpu_matmul_bench [--quick] [--device D]
//   --device D  another device (cuda:1; an emulator, cuda-emu:sm_90a, with two small shapes and
//               no cuBLAS: the test suite's smoke run of this program)
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ir/float16.h"
#include "kernels/kernels.h"
#include "kernels/lib/matmul.h"
#include "runtime/cuda/driver.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;
using kiln::bench::die;
using kiln::bench::must;

namespace {

// The few cuBLAS entry points used, declared after cublas_api.h's ABI (kiln builds without the
// toolkit's headers).
struct Cublas {
  using Handle = struct cublasContext*;
  int (*create)(Handle*) = nullptr;
  int (*destroy)(Handle) = nullptr;
  int (*gemm_ex)(Handle, int transa, int transb, int m, int n, int k, const void* alpha,
                 const void* a, int a_type, int lda, const void* b, int b_type, int ldb,
                 const void* beta, void* c, int c_type, int ldc, int compute, int algo) = nullptr;
  Handle handle = nullptr;
  std::string why_not;  // empty when loaded
  static constexpr int kOpN = 0, kOpT = 1;
  static constexpr int kR16F = 2, kR16BF = 14;
  static constexpr int kCompute32F = 68;
  static constexpr int kGemmDefault = -1;
};

Cublas load_cublas() {
  Cublas c;
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                           "/usr/local/cuda/lib64/libcublas.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
  }
  if (!lib) {
    c.why_not = std::string("no libcublas to load (") + dlerror() + ")";
    return c;
  }
  c.create = reinterpret_cast<decltype(c.create)>(dlsym(lib, "cublasCreate_v2"));
  c.destroy = reinterpret_cast<decltype(c.destroy)>(dlsym(lib, "cublasDestroy_v2"));
  c.gemm_ex = reinterpret_cast<decltype(c.gemm_ex)>(dlsym(lib, "cublasGemmEx"));
  if (!c.create || !c.destroy || !c.gemm_ex) {
    c.why_not = "libcublas lacks cublasCreate_v2, cublasDestroy_v2 or cublasGemmEx";
    return c;
  }
  if (int rc = c.create(&c.handle); rc != 0)
    c.why_not = "cublasCreate failed with status " + std::to_string(rc);
  return c;
}

struct Shape {
  int64_t m, n, k;
  const char* what;
};

// Seconds per call of `f`, which enqueues work that `sync` waits for: calls repeated until a
// sample takes about 20 ms, the median of 5 samples (`once`: one call after the first).
template <class F, class S>
double time_calls(F&& f, S&& sync, bool once = false) {
  f();
  sync();
  if (once) {
    const auto t0 = Clock::now();
    f();
    sync();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  int reps = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    sync();
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 0.02 || reps >= 1024) break;
    reps *= 2;
  }
  std::vector<double> t;
  for (int s = 0; s < 5; ++s) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    sync();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<uint16_t> random_half(size_t n, ir::ElemType dt, uint32_t seed) {
  std::vector<uint16_t> out(n);
  for (auto& x : out) {
    seed = seed * 1664525u + 1013904223u;
    const double v = static_cast<double>(seed >> 8) / 8388608.0 - 1.0;  // [-1, 1)
    x = dt == ir::ElemType::BF16 ? bf16_bits(v) : f16_bits(v);
  }
  return out;
}

double half_value(uint16_t bits, ir::ElemType dt) {
  return dt == ir::ElemType::BF16 ? bf16_value(bits) : f16_value(bits);
}

// The largest difference between two 16-bit results, relative to the largest magnitude of the
// second.
double relative_difference(const Tensor& got, const Tensor& want, ir::ElemType dt) {
  std::vector<uint16_t> hg(static_cast<size_t>(got.numel())), hw(hg.size());
  must(got.download(std::span<uint16_t>(hg)));
  must(want.download(std::span<uint16_t>(hw)));
  double worst = 0, mag = 0;
  for (size_t i = 0; i < hg.size(); ++i) {
    worst = std::max(worst, std::abs(half_value(hg[i], dt) - half_value(hw[i], dt)));
    mag = std::max(mag, std::abs(half_value(hw[i], dt)));
  }
  return mag > 0 ? worst / mag : worst;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string device = "cuda:0";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      device = argv[++i];
    else
      die(std::string("unknown argument '") + argv[i] +
          "'; usage: gpu_matmul_bench [--quick] "
          "[--device D]");
  }
  (void)kernels::builtin_names();
  auto rt = Runtime::open(device);
  if (!rt) {
    std::printf("gpu_matmul_bench skipped: %s\n", rt.error().message.c_str());
    return 77;
  }
  const DeviceInfo& dev = rt->device();
  std::printf("gpu_matmul_bench on %s: %s (%s, %d SMs, %zu bytes of shared memory per cube)\n",
              dev.name.c_str(), dev.description.c_str(), dev.arch.c_str(), dev.cores,
              static_cast<size_t>(dev.shared_optin_bytes));
  Cublas blas;
  if (dev.emulated)
    blas.why_not = "the device is an emulator";
  else
    blas = load_cublas();
  if (!blas.why_not.empty())
    std::printf("cuBLAS: skipped (%s); kiln alone\n", blas.why_not.c_str());
  const cuda_driver::Api* api = dev.emulated ? nullptr : must(cuda_driver::driver());

  std::vector<Shape> shapes = {{1024, 1024, 1024, "square"},   {2048, 2048, 2048, "square"},
                               {4096, 4096, 4096, "square"},   {8192, 8192, 8192, "square"},
                               {16, 8192, 8192, "decode"},     {8192, 8192, 1024, "short K"},
                               {16384, 16384, 16384, "square"}};
  if (quick)
    shapes = {
        {1024, 1024, 1024, "square"}, {4096, 4096, 4096, "square"}, {16, 8192, 8192, "decode"}};
  if (dev.emulated) shapes = {{130, 96, 128, "small"}, {16, 64, 2048, "decode"}};
  std::printf("%-6s %-22s %-8s %10s %10s %7s %9s  %s\n", "type", "M x N x K", "B", "kiln TF/s",
              "cuBLAS", "ratio", "max diff", "kiln's path");
  std::vector<ir::ElemType> types = {ir::ElemType::BF16, ir::ElemType::F16};
  if (dev.emulated) types.pop_back();
  for (const ir::ElemType dt : types) {
    for (const Shape& s : shapes) {
      auto a = must(rt->empty(dt, {s.m, s.k}));
      must(a.upload(std::span<const uint16_t>(random_half(static_cast<size_t>(s.m * s.k), dt, 7))));
      for (const bool b_nk : {true, false}) {
        const std::vector<int64_t> b_shape =
            b_nk ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n};
        auto b = must(rt->empty(dt, std::span<const int64_t>(b_shape)));
        must(b.upload(
            std::span<const uint16_t>(random_half(static_cast<size_t>(s.n * s.k), dt, 11))));
        auto c = must(rt->empty(dt, {s.m, s.n}));
        auto c_ref = must(rt->empty(dt, {s.m, s.n}));
        lib::MatmulPlan plan;
        lib::MatmulOptions o;
        o.transpose_b = b_nk;
        o.plan = &plan;
        auto run_kiln = [&] { must(lib::matmul(*rt, a, b, c, o)); };
        const double t_kiln = time_calls(
            run_kiln, [&] { must(rt->sync()); }, dev.emulated);
        double t_blas = 0, diff = -1;
        if (blas.why_not.empty()) {
          // Row-major C = A op(B) is column-major C^T = op(B)^T A^T.
          const float one = 1.0f, zero = 0.0f;
          const int type = dt == ir::ElemType::BF16 ? Cublas::kR16BF : Cublas::kR16F;
          const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
          int status = 0;
          auto run_blas = [&] {
            status |=
                blas.gemm_ex(blas.handle, b_nk ? Cublas::kOpT : Cublas::kOpN, Cublas::kOpN, n, m, k,
                             &one, b.data(), type, b_nk ? k : n, a.data(), type, k, &zero,
                             c_ref.data(), type, n, Cublas::kCompute32F, Cublas::kGemmDefault);
          };
          // kiln's stream synchronizes with the legacy default stream, which cuBLAS uses here.
          must(rt->sync());
          t_blas = time_calls(run_blas, [&] {
            if (api->cuCtxSynchronize() != 0) die("cuCtxSynchronize failed after cuBLAS");
          });
          if (status != 0) die("cublasGemmEx failed with status " + std::to_string(status));
          diff = relative_difference(c, c_ref, dt);
        }
        const double flop = 2.0 * static_cast<double>(s.m) * s.n * s.k;
        const std::string mnk = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                std::to_string(s.k) + " " + s.what;
        if (blas.why_not.empty())
          std::printf("%-6s %-22s %-8s %10.1f %10.1f %6.2fx %9.2g  %s: %s\n",
                      std::string(ir::elem_name(dt)).c_str(), mnk.c_str(), b_nk ? "[N,K]" : "[K,N]",
                      flop / t_kiln / 1e12, flop / t_blas / 1e12, t_blas / t_kiln, diff,
                      plan.kernel.c_str(), plan.config.c_str());
        else
          std::printf("%-6s %-22s %-8s %10.1f %10s %7s %9s  %s: %s\n",
                      std::string(ir::elem_name(dt)).c_str(), mnk.c_str(), b_nk ? "[N,K]" : "[K,N]",
                      flop / t_kiln / 1e12, "-", "-", "-", plan.kernel.c_str(),
                      plan.config.c_str());
        if (diff > 2e-2) std::printf("  WRONG: kiln and cuBLAS differ by %.3g\n", diff);
      }
    }
  }
  // Grouped products (grouped_matmul): a mixture-of-experts layer's up projection, tokens routed
  // unevenly to its experts, in one launch; the peer is cuBLAS called once per expert (what a
  // framework without a grouped GEMM does), on the same stream.
  struct Moe {
    int64_t tokens, experts, k, n;
  };
  std::vector<Moe> moes = {{16384, 8, 4096, 14336}, {4096, 64, 2048, 1408}};
  if (quick) moes.resize(1);
  if (dev.emulated) moes = {{300, 4, 64, 96}};
  std::printf("\n%-6s %-30s %10s %10s %7s %9s  %s\n", "type", "grouped: T x N x K, G", "kiln TF/s",
              "cuBLAS", "ratio", "max diff", "kiln's path");
  const ir::ElemType dt = ir::ElemType::BF16;
  for (const Moe& e : moes) {
    // Expert g gets a share of (5 g + 3) % 7 + 1 of the tokens: uneven, none empty.
    std::vector<int32_t> ends;
    int64_t total = 0, sum = 0;
    for (int64_t g = 0; g < e.experts; ++g) total += (5 * g + 3) % 7 + 1;
    for (int64_t g = 0; g < e.experts; ++g) {
      sum += (5 * g + 3) % 7 + 1;
      ends.push_back(static_cast<int32_t>(e.tokens * sum / total));
    }
    auto a = must(rt->empty(dt, {e.tokens, e.k}));
    must(a.upload(
        std::span<const uint16_t>(random_half(static_cast<size_t>(e.tokens * e.k), dt, 5))));
    auto b = must(rt->empty(dt, {e.experts, e.n, e.k}));
    must(b.upload(
        std::span<const uint16_t>(random_half(static_cast<size_t>(e.experts * e.n * e.k), dt, 6))));
    auto offs = must(rt->empty(ir::ElemType::I32, {e.experts}));
    must(offs.upload(std::span<const int32_t>(ends)));
    auto c = must(rt->empty(dt, {e.tokens, e.n}));
    auto c_ref = must(rt->empty(dt, {e.tokens, e.n}));
    lib::MatmulPlan plan;
    lib::MatmulOptions o;
    o.transpose_b = true;
    o.plan = &plan;
    const double t_kiln = time_calls([&] { must(lib::grouped_matmul(*rt, a, b, offs, c, o)); },
                                     [&] { must(rt->sync()); }, dev.emulated);
    double t_blas = 0, diff = -1;
    if (blas.why_not.empty()) {
      const float one = 1.0f, zero = 0.0f;
      const int k = static_cast<int>(e.k), n = static_cast<int>(e.n);
      const size_t es = 2;
      int status = 0;
      auto run_blas = [&] {
        int64_t start = 0;
        for (int64_t g = 0; g < e.experts; ++g) {
          const int rows = static_cast<int>(ends[static_cast<size_t>(g)] - start);
          if (rows > 0)
            status |= blas.gemm_ex(
                blas.handle, Cublas::kOpT, Cublas::kOpN, n, rows, k, &one,
                static_cast<char*>(b.data()) + static_cast<size_t>(g * e.n * e.k) * es,
                Cublas::kR16BF, k,
                static_cast<char*>(a.data()) + static_cast<size_t>(start * e.k) * es,
                Cublas::kR16BF, k, &zero,
                static_cast<char*>(c_ref.data()) + static_cast<size_t>(start * e.n) * es,
                Cublas::kR16BF, n, Cublas::kCompute32F, Cublas::kGemmDefault);
          start = ends[static_cast<size_t>(g)];
        }
      };
      must(rt->sync());
      t_blas = time_calls(run_blas, [&] {
        if (api->cuCtxSynchronize() != 0) die("cuCtxSynchronize failed after cuBLAS");
      });
      if (status != 0) die("cublasGemmEx failed with status " + std::to_string(status));
      diff = relative_difference(c, c_ref, dt);
    }
    const double flop = 2.0 * static_cast<double>(e.tokens) * e.n * e.k;
    const std::string what = std::to_string(e.tokens) + "x" + std::to_string(e.n) + "x" +
                             std::to_string(e.k) + ", " + std::to_string(e.experts) + " groups";
    if (blas.why_not.empty())
      std::printf("%-6s %-30s %10.1f %10.1f %6.2fx %9.2g  %s: %s\n", "bf16", what.c_str(),
                  flop / t_kiln / 1e12, flop / t_blas / 1e12, t_blas / t_kiln, diff,
                  plan.kernel.c_str(), plan.config.c_str());
    else
      std::printf("%-6s %-30s %10.1f %10s %7s %9s  %s: %s\n", "bf16", what.c_str(),
                  flop / t_kiln / 1e12, "-", "-", "-", plan.kernel.c_str(), plan.config.c_str());
    if (diff > 2e-2) std::printf("  WRONG: kiln and cuBLAS differ by %.3g\n", diff);
  }
  if (blas.handle) blas.destroy(blas.handle);
  return 0;
}
