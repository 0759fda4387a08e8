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
// The machine's 8-bit dot-product throughput (vpdpbusd: 64 multiplies and adds per instruction,
// counted as 128 operations) on all threads; 0 on a CPU without AVX-512 VNNI.
double peak_dot_i8_gops();
// The same for bf16 pairs (vdpbf16ps: 32 multiplies and adds, 64 flops); 0 without AVX512_BF16.
double peak_dot_bf16_gflops();

}  // namespace kiln::bench
