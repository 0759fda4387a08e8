// Peers of matmul_mma_bench (tools/bench/matmul_peers.cpp).
#pragma once

#include <cstdint>

namespace kiln::bench {

// Whether the build linked OpenBLAS (Debian's libopenblas-dev); without it peer_sgemm does nothing.
bool have_openblas();
// The kernels OpenBLAS chose for this CPU ("Prescott" is its generic fallback).
const char* openblas_core();
// C = A * B, row-major f32, m x k times k x n, on OpenBLAS's threads.
void peer_sgemm(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k);
// The machine's f32 FMA throughput on all threads, from a tight loop of independent FMAs.
double peak_fma_gflops();

}  // namespace kiln::bench
