// Hand-written C++ peers (g++ -O3 -march=native -fopenmp).
#include "tools/bench/cpu_peers.h"

namespace kiln::bench {

void peer_axpy(float a, const float* x, float* y, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

double peer_sum_naive(const float* x, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += x[i];
  return s;
}

void peer_row_sum_tree(const float* in, float* out, size_t rows, size_t cols) {
  constexpr size_t kUnits = 256;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; ++r) {
    float partial[kUnits];
    const float* row = in + r * cols;
    for (size_t u = 0; u < kUnits; ++u) {
      float acc = 0;
      for (size_t j = u; j < cols; j += kUnits) acc += row[j];
      partial[u] = acc;
    }
    for (size_t s = kUnits / 2; s > 0; s /= 2)
      for (size_t u = 0; u < s; ++u) partial[u] += partial[u + s];
    out[r] = partial[0];
  }
}

void peer_row_sum_plain(const float* in, float* out, size_t rows, size_t cols) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; ++r) {
    float s = 0;
    for (size_t j = 0; j < cols; ++j) s += in[r * cols + j];
    out[r] = s;
  }
}

}  // namespace kiln::bench
