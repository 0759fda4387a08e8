// The cluster test kernels: tests/runtime/test_cluster.cpp runs them on the CPU and the emulator,
// the CUDA compile tests build them for every target with clusters, and the op coverage tests
// count their cluster ops. The marker comments name the lines the tests expect.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

// Clusters of `size` cubes along x exchange partial results through distributed shared memory:
// cube c of the grid puts row c of x (64 values) in its shared memory, and writes to row c of out
// the sum of its cluster's rows, read through cluster_load in rank order (so every cube of a
// cluster computes the same sums, exactly). bug 1: no sync_cluster between the writes and the
// reads; bug 2: none after the reads (a cube may leave while another reads its memory); bug 3: a
// read of rank `size`, outside the cluster; bug 4: rank 1 returns before the first sync_cluster.
void cluster_sum(Tensor<const f32> x, Tensor<f32> out, int size, int bug) {
  cluster_dims(static_cast<uint32_t>(size));
  auto part = shared_array<f32>(64);
  u32 row = cube_pos() * 64u + unit_pos();
  part[unit_pos()] = x[row];
  if (bug == 4) if_(cluster_rank() == 1u, [&] { return_(); });  // CLUSTER_RETURN
  if (bug != 1) sync_cluster();                                 // CLUSTER_SYNC
  Var<float> total(0.0f);
  const uint32_t ranks = static_cast<uint32_t>(size) + (bug == 3 ? 1u : 0u);
  for (uint32_t r = 0; r < ranks; ++r) total += cluster_load(part, r, unit_pos());  // CLUSTER_READ
  out[row] = total;
  if (bug != 2) sync_cluster();
}
KILN_KERNEL(cluster_sum, "x, out, size = 2 in 1..8, bug = 0 in 0..4").cube_dim(64);

// Multicast: clusters of `size` cubes along x; rank r of cluster k copies row k * size + r of x
// (64 values, one TMA box) into slot r of every cube of its cluster at once, so each cube ends up
// with all of its cluster's rows, which it writes to its own `size` rows of out. bug 1: no
// sync_cluster between the mbarrier initializations and the multicasts; bug 2: a mask with a bit
// beyond the cluster.
void cluster_bcast(Tensor<const f32> x, Tensor<f32> out, int size, int bug) {
  const auto n = static_cast<uint32_t>(size);
  cluster_dims(n);
  auto bar = shared_array<u64>(1);
  auto rows = shared_array<f32>(n * 64u);
  auto view = tma_view(x, {1, 64});
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, n * view.box_bytes());
  if (bug != 1) sync_cluster();  // every cube's mbarrier is ready for the copies
  u32 rank = cluster_rank();
  u32 first = cube_pos() - rank;  // the cluster's first cube
  const uint32_t mask = bug == 2 ? (2u << n) - 1u : (1u << n) - 1u;
  tma_load_multicast(rows, rank * 64u, view, {first + rank, 0}, bar, 0u, mask);  // CLUSTER_CAST
  mbarrier_wait(bar, 0u, 0u);
  for (uint32_t r = 0; r < n; ++r)
    out[(cube_pos() * n + r) * 64u + unit_pos()] = rows[r * 64u + unit_pos()];
  sync_cluster();  // no cube leaves while a copy of its may still land elsewhere
}
KILN_KERNEL(cluster_bcast, "x: rank=2, out, size = 2 in 1..8, bug = 0 in 0..2").cube_dim(64);
