// The kernels of the unit-loop tests (barriers in loops and uniform ifs, plane ops, atomics,
// builtins, print and assert), registered for the CPU tests (test_unit_loops.cpp) and compiled
// for every CUDA target by the CUDA tests.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

// C = A * B with square tiles in shared memory: two barriers inside a loop (the tiled-matmul
// shape), cube (tile, tile), tile comptime.
void u_matmul(Tensor<const f32> a, Tensor<const f32> b, Tensor<f32> c, int tile) {
  auto as = shared_array<f32>(static_cast<uint32_t>(tile * tile));
  auto bs = shared_array<f32>(static_cast<uint32_t>(tile * tile));
  u32 tx = unit_pos_x(), ty = unit_pos_y();
  u32 row = cube_pos_y() * tile + ty, col = cube_pos_x() * tile + tx;
  u32 m = a.shape(0), k = a.shape(1), n = b.shape(1);
  Var<f32> acc = 0.0f;
  for_range(0u, k, static_cast<uint32_t>(tile), [&](u32 k0) {
    as[ty * tile + tx] =
        select(row < m && k0 + tx < k, a(min(row, m - 1u), min(k0 + tx, k - 1u)), 0.0f);
    bs[ty * tile + tx] =
        select(k0 + ty < k && col < n, b(min(k0 + ty, k - 1u), min(col, n - 1u)), 0.0f);
    sync_cube();
    for (int kk = 0; kk < tile; ++kk) acc += as[ty * tile + kk] * bs[kk * tile + tx];
    sync_cube();
  });
  if_(row < m && col < n, [&] { c(row, col) = acc; });
}
KILN_KERNEL(u_matmul, "a: rank=2, b: rank=2, c: rank=2, tile = 8").cube_dim(8, 8);

// Per cube: reverse a block through shared memory, but only in even cubes (a barrier inside a
// uniform if), and a variable and a local array carried across the barriers.
void u_uniform_if(Tensor<const f32> in, Tensor<f32> out) {
  auto s = shared_array<f32>(1024);
  auto keep = local_array<f32>(2);
  u32 i = absolute_pos(), u = unit_pos(), n = cube_dim();
  Var<f32> v = in[i];
  keep[1] = v * 2.0f;
  if_(cube_pos() % 2u == 0u, [&] {
    s[u] = v;
    sync_cube();
    v = s[n - 1u - u];
    sync_cube();
  }).else_([&] { v = -v; });
  out[i] = v + keep[1];
}
KILN_KERNEL(u_uniform_if, "in, out").cube_dim(64);

// while_ with a barrier in its body and a uniform counter: repeated halving of shared data.
void u_while(Tensor<const f32> in, Tensor<f32> out) {
  auto s = shared_array<f32>(1024);
  u32 u = unit_pos();
  s[u] = in[absolute_pos()];
  sync_cube();
  Var<u32> width = cube_dim();
  while_([&] { return width > 1u; },
         [&] {
           u32 half = (width + 1u) / 2u;
           if_(u < width / 2u, [&] { s[u] += s[u + half]; });
           sync_cube();
           width = half;
         });
  if_(u == 0u, [&] { out[cube_pos()] = s[0]; });
}
KILN_KERNEL(u_while, "in, out").cube_dim(64);

// Every plane op, on each unit's value.
void u_plane(Tensor<const f32> in, Tensor<f32> out, Tensor<u32> flags) {
  u32 i = absolute_pos();
  f32 v = in[i];
  u32 lane = plane_lane();
  out(i, 0u) = plane_sum(v);
  out(i, 1u) = plane_min(v);
  out(i, 2u) = plane_max(v);
  out(i, 3u) = plane_broadcast(v, 3u);
  out(i, 4u) = plane_shuffle(v, (lane + 1u) % plane_dim());
  out(i, 5u) = plane_shuffle_xor(v, 5u);
  flags(i, 0u) = cast<u32>(plane_any(v > 0.9f));
  flags(i, 1u) = cast<u32>(plane_all(v > -2.0f));
  flags(i, 2u) = plane_pos();
}
KILN_KERNEL(u_plane, "in, out: rank=2, flags: rank=2").cube_dim(100);

// Plane ops under a plane-uniform if, after some planes returned early, then more unit code.
void u_plane_return(Tensor<const f32> in, Tensor<f32> out) {
  u32 i = absolute_pos();
  if_(plane_pos() == 1u, [&] { return_(); });
  f32 v = in[i];
  f32 s = 0.0f;
  Var<f32> r = 0.0f;
  if_(plane_pos() % 2u == 0u, [&] { r = plane_sum(v); }).else_([&] { r = plane_max(v); });
  s = r;
  out[i] = s + 1.0f;
}
KILN_KERNEL(u_plane_return, "in, out").cube_dim(128);

// Atomics from every unit of every cube, on several worker threads.
void u_atomics(Tensor<u32> counters, Tensor<f64> sums, Tensor<u32> ticket, Tensor<const f32> vals) {
  u32 i = absolute_pos();
  f32 v = vals[i];
  atomic_add(counters[0], 1u);
  atomic_max(counters[1], i);
  atomic_min(counters[2], i);
  atomic_add(sums[0], cast<f64>(v));
  // A lock-free increment by compare-exchange.
  Var<u32> done = 0u;
  while_([&] { return done == 0u; },
         [&] {
           u32 old = ticket[0];
           u32 seen = atomic_cas(ticket[0], old, old + 1u);
           if_(seen == old, [&] { done = 1u; });
         });
  atomic_exchange(counters[3], 7u);
}
KILN_KERNEL(u_atomics, "counters, sums, ticket, vals").cube_dim(96);

void u_builtins(Tensor<u32> out) {
  u32 i = absolute_pos();
  out(i, 0u) = unit_pos_x();
  out(i, 1u) = unit_pos_y();
  out(i, 2u) = unit_pos_z();
  out(i, 3u) = cube_pos_x();
  out(i, 4u) = cube_pos_y();
  out(i, 5u) = cube_pos_z();
  out(i, 6u) = absolute_pos_x();
  out(i, 7u) = absolute_pos_y();
  out(i, 8u) = absolute_pos_z();
  out(i, 9u) = unit_pos();
  out(i, 10u) = cube_pos();
  out(i, 11u) = cube_dim() * 1000u + cube_count();
  out(i, 12u) = plane_lane() + plane_pos() * 100u + plane_dim() * 10000u;
}
KILN_KERNEL(u_builtins, "out: rank=2").cube_dim(5, 3, 2);

void u_print(Tensor<const i32> x) {
  u32 u = unit_pos();
  if_(u < 2u, [&] { print("cube {} unit {} x={}", cube_pos(), u, x[absolute_pos()]); });
  assert_(x[absolute_pos()] >= 0, "x is never negative");
}
KILN_KERNEL(u_print, "x").cube_dim(4);

// Lanes of a line (a splat, lane reads and writes) and a plane barrier between writing shared
// memory and reading a neighbour's value in the same plane.
void u_lanes(Tensor<const f32> in, Tensor<f32> out, int units) {
  auto sh = shared_array<f32>(static_cast<uint32_t>(units));
  u32 u = unit_pos();
  u32 i = absolute_pos();
  f32 v = in[i];
  f32 w = insert(splat<f32>(extract(v, 0), 4), 2, extract(v, 3));
  sh[u] = extract(v, 1);
  sync_plane();
  u32 partner = u ^ 1u;
  Var<f32> other = 0.0f;
  if_(partner < cube_dim(), [&] { other = sh[partner]; });
  out[i] = insert(w, 3, other);
}
KILN_KERNEL(u_lanes, "in: line=4, out: line=4, units = 64 in 1..1024").cube_dim(64);

// A varying loop with continue and break: out[i] = the sum of in[i * 8 + j] over the j < 8 whose
// value is positive, stopping at the first value above 0.9.
void u_continue(Tensor<const f32> in, Tensor<f32> out) {
  u32 i = absolute_pos();
  Var<f32> s = 0.0f;
  for_range(0u, 8u, [&](u32 j) {
    f32 v = in[i * 8u + j];
    if_(v > 0.9f, [&] { break_(); });
    if_(v <= 0.0f, [&] { continue_(); });
    s += v;
  });
  out[i] = s;
}
KILN_KERNEL(u_continue, "in, out").cube_dim(64);
