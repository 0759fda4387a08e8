// Peers of the CPU benchmarks: the same work written directly in C++, compiled with
// g++ -O3 -march=native -fopenmp (cpu_peers.cpp) or additionally -ffast-math so the compiler may
// reassociate a reduction (cpu_peers_fast.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::bench {

void peer_axpy(float a, const float* x, float* y, size_t n);  // OpenMP, all cores
double peer_sum_naive(const float* x, size_t n);              // one thread, in order
double peer_sum_best(const float* x, size_t n);               // OpenMP + SIMD, reassociated
// The row_sum example's algorithm: 256 strided partial sums per row, then a tree.
void peer_row_sum_tree(const float* in, float* out, size_t rows, size_t cols);
void peer_row_sum_plain(const float* in, float* out, size_t rows, size_t cols);  // a plain loop

}  // namespace kiln::bench
