// Peers of cpu_kernels_bench (cpu_kernels_peers.h), compiled like cpu_peers.cpp.
#include "tools/bench/cpu_kernels_peers.h"

#include "kernels/lib/philox.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace kiln::bench {

void peer_max_pool(const float* in, float* out, int64_t planes, int64_t h, int64_t w, int k,
                   int stride, int pad, int64_t oh, int64_t ow) {
#pragma omp parallel for collapse(2)
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y) {
      const float* plane = in + p * h * w;
      float* row = out + (p * oh + y) * ow;
      for (int64_t x = 0; x < ow; ++x) {
        float m = -INFINITY;
        for (int dy = 0; dy < k; ++dy) {
          const int64_t yy = y * stride + dy - pad;
          if (yy < 0 || yy >= h) continue;
          for (int dx = 0; dx < k; ++dx) {
            const int64_t xx = x * stride + dx - pad;
            if (xx >= 0 && xx < w) m = std::max(m, plane[yy * w + xx]);
          }
        }
        row[x] = m;
      }
    }
}

void peer_gemm(const float* a, const float* b, float* c, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    float* ci = c + i * n;
    std::fill(ci, ci + n, 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      const float aik = a[i * n + k];
      const float* bk = b + k * n;
      for (int64_t j = 0; j < n; ++j) ci[j] += aik * bk[j];
    }
  }
}

void peer_transpose(const float* in, float* out, int64_t n) {
#pragma omp parallel for collapse(2)
  for (int64_t bi = 0; bi < n; bi += 32)
    for (int64_t bj = 0; bj < n; bj += 32)
      for (int64_t i = bi; i < std::min(bi + 32, n); ++i)
        for (int64_t j = bj; j < std::min(bj + 32, n); ++j) out[j * n + i] = in[i * n + j];
}

void peer_softmax(const float* in, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    float* y = out + r * cols;
    float m = -INFINITY;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, x[j]);
    float s = 0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[j] - m);
    const float inv = 1.0f / s;
    for (int64_t j = 0; j < cols; ++j) y[j] = std::exp(x[j] - m) * inv;
  }
}

void peer_stencil(const float* in, float* out, int64_t h, int64_t w) {
#pragma omp parallel for
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const int64_t i = y * w + x;
      out[i] = (x > 0 && y > 0 && x + 1 < w && y + 1 < h)
                   ? in[i - w] + in[i + w] + in[i - 1] + in[i + 1] - 4.0f * in[i]
                   : in[i];
    }
}

void peer_histogram(const float* data, int64_t n, uint32_t* hist, int bins) {
  std::fill(hist, hist + bins, 0u);
#pragma omp parallel
  {
    std::vector<uint32_t> local(static_cast<size_t>(bins), 0u);
#pragma omp for nowait
    for (int64_t i = 0; i < n; ++i) {
      const float b =
          std::clamp(data[i] * static_cast<float>(bins), 0.0f, static_cast<float>(bins - 1));
      ++local[static_cast<size_t>(b)];
    }
#pragma omp critical
    for (int b = 0; b < bins; ++b) hist[b] += local[static_cast<size_t>(b)];
  }
}

namespace {

std::array<uint32_t, 4> block(int64_t b, uint64_t seed, uint64_t offset) {
  return lib::host::philox4x32({static_cast<uint32_t>(b), 0u, static_cast<uint32_t>(offset),
                                static_cast<uint32_t>(offset >> 32)},
                               static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

}  // namespace

void peer_uniform(float* out, int64_t n, uint64_t seed, uint64_t offset, float low, float scale) {
#pragma omp parallel for
  for (int64_t b = 0; b < (n + 3) / 4; ++b) {
    const auto w = block(b, seed, offset);
    for (int64_t j = 0; j < 4 && 4 * b + j < n; ++j)
      out[4 * b + j] = std::fma(lib::host::uniform01(w[static_cast<size_t>(j)]), scale, low);
  }
}

void peer_normal(float* out, int64_t n, uint64_t seed, uint64_t offset, float mean, float stddev) {
#pragma omp parallel for
  for (int64_t b = 0; b < (n + 3) / 4; ++b) {
    const auto w = block(b, seed, offset);
    for (int64_t pair = 0; pair < 2; ++pair) {
      const float u1 = static_cast<float>((w[2 * pair] >> 8) + 1) * 0x1p-24f;
      const float t = static_cast<float>(w[2 * pair + 1] >> 8) * (0x1p-24f * 6.2831853f);
      const float r = std::sqrt(-2.0f * std::log(u1));
      const int64_t i = 4 * b + 2 * pair;
      if (i < n) out[i] = std::fma(r * std::cos(t), stddev, mean);
      if (i + 1 < n) out[i + 1] = std::fma(r * std::sin(t), stddev, mean);
    }
  }
}

void peer_triad(float* a, const float* b, const float* c, float s, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace kiln::bench

namespace kiln::bench {

void peer_layernorm(const float* in, float* out, const float* w, const float* b, int64_t rows,
                    int64_t cols, float eps) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * cols;
    float* y = out + r * cols;
    float s = 0;
    for (int64_t j = 0; j < cols; ++j) s += x[j];
    const float mean = s / static_cast<float>(cols);
    float q = 0;
    for (int64_t j = 0; j < cols; ++j) q += (x[j] - mean) * (x[j] - mean);
    const float rstd = 1.0f / std::sqrt(q / static_cast<float>(cols) + eps);
    for (int64_t j = 0; j < cols; ++j) y[j] = (x[j] - mean) * rstd * w[j] + b[j];
  }
}

void peer_sum_axis(const float* in, float* out, int64_t a, int64_t n, int64_t c, int axis) {
  // (a, n, c) summed over axis 0, 1 or 2, with the loop orders a C++ programmer picks: rows
  // added into the output for the outer axes, a dot-style loop for the last.
  if (axis == 2) {
#pragma omp parallel for
    for (int64_t i = 0; i < a * n; ++i) {
      float s = 0;
      for (int64_t j = 0; j < c; ++j) s += in[i * c + j];
      out[i] = s;
    }
  } else if (axis == 1) {
#pragma omp parallel for
    for (int64_t i = 0; i < a; ++i) {
      float* o = out + i * c;
      std::fill(o, o + c, 0.0f);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < c; ++j) o[j] += in[(i * n + k) * c + j];
    }
  } else {
    const int64_t m = n * c;
#pragma omp parallel for
    for (int64_t j0 = 0; j0 < m; j0 += 4096) {
      const int64_t j1 = std::min(j0 + 4096, m);
      std::fill(out + j0, out + j1, 0.0f);
      for (int64_t k = 0; k < a; ++k)
        for (int64_t j = j0; j < j1; ++j) out[j] += in[k * m + j];
    }
  }
}

}  // namespace kiln::bench

namespace kiln::bench {

void peer_chain(const float* x, float* out, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = std::max(std::exp(x[i] * 0.5f + 1.0f) * x[i], 0.0f);
}

}  // namespace kiln::bench
