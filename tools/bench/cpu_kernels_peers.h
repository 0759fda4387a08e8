// Peers of cpu_kernels_bench: the same jobs as its GPU-style kernels, written the way a C++
// programmer would write them for a CPU (g++ -O3 -march=native -fopenmp, all threads).
#pragma once

#include <cstdint>

namespace kiln::bench {

// max_pool2d over (planes, h, w) with padding (padding never wins: -inf).
void peer_max_pool(const float* in, float* out, int64_t planes, int64_t h, int64_t w, int k,
                   int stride, int pad, int64_t oh, int64_t ow);
// c = a * b, n x n, the i-k-j loop.
void peer_gemm(const float* a, const float* b, float* c, int64_t n);
// out = in^T, n x n, in blocks of 32 x 32.
void peer_transpose(const float* in, float* out, int64_t n);
// The softmax of each row.
void peer_softmax(const float* in, float* out, int64_t rows, int64_t cols);
// The stencil2d example: out = up + down + left + right - 4 centre inside, a copy on the border.
void peer_stencil(const float* in, float* out, int64_t h, int64_t w);
// Counts of [0, 1) values in `bins` buckets, as the histogram example bins them (in f32).
void peer_histogram(const float* data, int64_t n, uint32_t* hist, int bins);
// kiln::lib::uniform's numbers (Philox 4x32-10 blocks, the top 24 bits of a word), in a plain
// OpenMP loop over blocks.
void peer_uniform(float* out, int64_t n, uint64_t seed, uint64_t offset, float low, float scale);
// kiln::lib::normal's, by Box-Muller with the C library's logf, sqrtf, sinf and cosf.
void peer_normal(float* out, int64_t n, uint64_t seed, uint64_t offset, float mean, float stddev);
// Layer normalization of each row (f32 sums), with weight w and bias b.
void peer_layernorm(const float* in, float* out, const float* w, const float* b, int64_t rows,
                    int64_t cols, float eps);
// The sum of an (a, n, c) tensor over `axis`.
void peer_sum_axis(const float* in, float* out, int64_t a, int64_t n, int64_t c, int axis);
// max(exp(x * 0.5 + 1) * x, 0): lib_bench's elementwise chain.
void peer_chain(const float* x, float* out, int64_t n);
// The STREAM triad a = b + s * c: the machine's memory bandwidth reference.
void peer_triad(float* a, const float* b, const float* c, float s, int64_t n);

}  // namespace kiln::bench
