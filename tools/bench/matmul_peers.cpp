// Peers of matmul_mma_bench: OpenBLAS sgemm (when the build found it) and the machine's peak
// f32 FMA rate, both on all threads (compiled -O3 -march=native -fopenmp).
#include "tools/bench/matmul_peers.h"

#include <omp.h>

#include <immintrin.h>

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

// Twelve independent chains of FMAs as wide as the host's vector registers per thread (enough to
// cover the FMA latency on two pipes), in GCC's vector extension. The width follows the
// compiler's -march=native: a vector wider than a register would be split in two, and the empty
// asm that keeps the loop from being folded needs the value in one register.
double peak_fma_gflops() {
#if defined(__AVX512F__)
  constexpr int kLanes = 16;
#elif defined(__AVX__)
  constexpr int kLanes = 8;
#else
  constexpr int kLanes = 4;
#endif
  typedef float vec __attribute__((vector_size(4 * kLanes)));
  constexpr int kChains = 12;
  constexpr long kIters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
      vec acc[kChains];
      vec x, y;
      for (int l = 0; l < kLanes; ++l) {
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
        for (int l = 0; l < kLanes; ++l) sink += acc[c][l];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flops =
        2.0 * kLanes * kChains * static_cast<double>(kIters) * omp_get_max_threads();
    if (sink == 12345.0f) best += 1e-30;  // use sink
    best = std::max(best, flops / s / 1e9);
  }
  return best;
}

namespace {

// Runs `body` (a tight loop of kIters steps on all threads) three times; the best rate of
// `ops_per_step` operations per step per thread, in G/s.
template <class Body>
double best_rate(double ops_per_step, long iters, Body body) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    int sink = 0;
#pragma omp parallel reduction(+ : sink)
    sink += body(iters);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sink == 12345) best += 1e-30;  // use sink
    best =
        std::max(best, ops_per_step * static_cast<double>(iters) * omp_get_max_threads() / s / 1e9);
  }
  return best;
}

// 24 chains: on Emerald Rapids these instructions have a long latency (about 12 chains reach
// only half the rate of 24).
constexpr int kDotChains = 24;

__attribute__((target("avx512f,avx512bw,avx512vnni"))) int dot_i8_loop(long iters) {
  __m512i acc[kDotChains];
  for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_set1_epi32(c);
  __m512i a = _mm512_set1_epi32(0x01020304), b = _mm512_set1_epi32(0x01ff01ff);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
    asm volatile("" : "+v"(a));
  }
  int s = 0;
  for (int c = 0; c < kDotChains; ++c) s += _mm512_reduce_add_epi32(acc[c]);
  return s;
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) int dot_bf16_loop(long iters) {
  __m512 acc[kDotChains];
  for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    asm volatile("" : "+v"(a));
  }
  float s = 0;
  for (int c = 0; c < kDotChains; ++c) s += _mm512_reduce_add_ps(acc[c]);
  return static_cast<int>(s);
}

}  // namespace

double peak_dot_i8_gops() {
  if (!__builtin_cpu_supports("avx512vnni")) return 0;
  return best_rate(128.0 * kDotChains, 10'000'000, dot_i8_loop);
}

double peak_dot_bf16_gflops() {
  if (!__builtin_cpu_supports("avx512bf16")) return 0;
  return best_rate(64.0 * kDotChains, 10'000'000, dot_bf16_loop);
}

}  // namespace kiln::bench
