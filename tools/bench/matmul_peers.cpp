// Peers of matmul_mma_bench: OpenBLAS sgemm (when the build found it) and the machine's peak
// f32 FMA rate, both on all threads (compiled -O3 -march=native -fopenmp).
#include "tools/bench/matmul_peers.h"

#include <omp.h>

#include <chrono>

#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace kiln::bench {

const char* openblas_core() {
#ifdef KILN_HAVE_OPENBLAS
  return openblas_get_corename();
#else
  return "";
#endif
}

bool have_openblas() {
#ifdef KILN_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

void peer_sgemm(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k) {
#ifdef KILN_HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
#else
  (void)a, (void)b, (void)c, (void)m, (void)n, (void)k;
#endif
}

// Twelve independent chains of 16-lane FMAs per thread (enough to cover the FMA latency on two
// pipes), in GCC's vector extension so the compiler emits the widest FMA the host has.
double peak_fma_gflops() {
  typedef float v16 __attribute__((vector_size(64)));
  constexpr int kChains = 12;
  constexpr long kIters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
      v16 acc[kChains];
      v16 x, y;
      for (int l = 0; l < 16; ++l) {
        x[l] = 1.0f + 1e-7f * static_cast<float>(l);
        y[l] = 0.999999f;
      }
      for (int c = 0; c < kChains; ++c) acc[c] = x * static_cast<float>(c);
      for (long i = 0; i < kIters; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * y + x;
        asm volatile("" : "+v"(y));  // keep the loop from being folded
      }
      for (int c = 0; c < kChains; ++c)
        for (int l = 0; l < 16; ++l) sink += acc[c][l];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flops = 2.0 * 16 * kChains * static_cast<double>(kIters) * omp_get_max_threads();
    if (sink == 12345.0f) best += 1e-30;  // use sink
    best = std::max(best, flops / s / 1e9);
  }
  return best;
}

}  // namespace kiln::bench
