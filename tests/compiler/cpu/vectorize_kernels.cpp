// Kernels of the unit-vectorizer tests (test_vectorize.cpp): divergent control flow, gathers
// and scatters, colliding atomics, local arrays, lines, checked mode. Registered for the CPU
// tests and compiled for every CUDA target by the CUDA tests.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

// Nested varying ifs, a loop with a varying trip count and break/continue inside, a while_ with
// a varying condition, and early returns at several depths.
void v_divergent(Tensor<const f32> in, Tensor<f32> out, Tensor<u32> steps) {
  u32 i = absolute_pos();
  if_(i >= in.len(), [&] { return_(); });
  f32 x = in[i];
  Var<f32> acc = 0.0f;
  Var<u32> n = 0u;
  for_range(0u, i % 13u, [&](u32 j) {
    if_(j % 3u == 1u, [&] { continue_(); });
    if_(acc > 2.0f, [&] { break_(); });
    if_(x < -0.9f && j == 5u, [&] {
      out[i] = -7.0f;
      steps[i] = 99u;
      return_();
    });
    acc += x * cast<f32>(j);
    n += 1u;
  });
  while_([&] { return n < i % 7u; },
         [&] {
           n += 1u;
           if_(x > 0.8f, [&] {
             acc = acc * 0.5f;
           }).else_if_(x < 0.0f, [&] {
               acc -= 1.0f;
             }).else_([&] { acc += 0.25f; });
         });
  if_(x < -0.5f, [&] {
    out[i] = acc - 100.0f;
    steps[i] = n;
    return_();
  });
  out[i] = acc;
  steps[i] = n;
}
KILN_KERNEL(v_divergent, "in, out, steps").cube_dim(64);

// A permuted gather, a strided gather, and colliding scatters (several units store to one
// element; the IR leaves the winner open, the two CPU modes agree on the last unit).
void v_gather_scatter(Tensor<const f32> in, Tensor<const u32> perm, Tensor<f32> out,
                      Tensor<f32> coll) {
  u32 i = absolute_pos();
  u32 n = in.len();
  if_(i < n, [&] {
    out[perm[i]] = in[(i * 7u) % n] + in[n - 1u - i];
    coll[i / 3u] = in[i];
  });
}
KILN_KERNEL(v_gather_scatter, "in, perm, out, coll").cube_dim(128);

// Shared and global atomics at colliding addresses, with the old values kept.
void v_atomics(Tensor<const u32> keys, Tensor<u32> hist, Tensor<u32> old, Tensor<i32> minmax) {
  auto local = shared_array<u32>(8);
  u32 u = unit_pos(), i = absolute_pos();
  if_(u < 8u, [&] { local[u] = 0u; });
  sync_cube();
  if_(i < keys.len(), [&] {
    u32 k = keys[i];
    old[i] = atomic_add(local[k % 8u], 1u) + atomic_add(hist[k % 5u], 2u) * 1000u;
    atomic_max(minmax[0], cast<i32>(k) - 50);
    atomic_min(minmax[1], cast<i32>(k) - 50);
  });
  sync_cube();
  if_(u < 8u, [&] { atomic_add(hist[5u + u], local[u]); });
}
KILN_KERNEL(v_atomics, "keys, hist, old, minmax").cube_dim(100);

// A local array indexed by a uniform and by a varying index, written under a varying if.
void v_local(Tensor<const f32> in, Tensor<f32> out) {
  auto row = local_array<f32>(8);
  u32 i = absolute_pos();
  f32 x = in[i];
  for_range(0u, 8u, [&](u32 k) { row[k] = x * cast<f32>(k); });
  if_(x > 0.0f, [&] { row[i % 8u] = -x; });
  out[i] = row[3] + row[(i * 5u) % 8u];
}
KILN_KERNEL(v_local, "in, out").cube_dim(48);

// Lines of 4 per unit: line loads at consecutive and permuted indices, lanes extracted and
// inserted per unit, a scalar condition selecting whole lines.
void v_lines(Tensor<const f32> in, Tensor<f32> out) {
  u32 i = absolute_pos();
  auto a = in[i];
  auto b = in[(i * 3u) % in.len()];
  f32 s = extract(a, 0) + extract(b, 3);
  auto c = insert(a * b, 2, s);
  out[i] = select(s > 0.0f, c, a - b);
}
KILN_KERNEL(v_lines, "in: line=4, out: line=4").cube_dim(32);

// A 2-D cube whose x extent is not a multiple of the vector: unit_pos_x/y are computed per lane.
void v_cube2d(Tensor<const f32> in, Tensor<f32> out) {
  u32 x = absolute_pos_x(), y = absolute_pos_y();
  u32 h = in.shape(0), w = in.shape(1);
  if_(y < h && x < w,
      [&] { out(y, x) = in(y, x) * 2.0f + select(x > 0u, in(y, max(x, 1u) - 1u), 0.0f); });
}
KILN_KERNEL(v_cube2d, "in: rank=2, out: rank=2").cube_dim(12, 5);

// Checked mode: some units read past the end; the first of them is reported, loads give zero.
void v_checked(Tensor<const f32> in, Tensor<f32> out) {
  u32 i = absolute_pos();
  if_(i < out.len(), [&] { out[i] = in[i * 2u] + 1.0f; });
}
KILN_KERNEL(v_checked, "in, out").cube_dim(64);

// Division and remainder of varying values by a divisor known only at run time (multiplication
// by a magic number in vector code).
void v_divmod(Tensor<const u32> x, Tensor<u32> q, Tensor<u32> r, u32 d) {
  u32 i = absolute_pos();
  if_(i < x.len(), [&] {
    q[i] = x[i] / d;
    r[i] = x[i] % d;
  });
}
KILN_KERNEL(v_divmod, "x, q, r, d").cube_dim(64);

// A block-stride loop (each unit steps through its cube's chunk by cube_dim): run with its
// iterations outermost. A continue inside, chunks of uneven length, a varying if.
void v_strided(Tensor<const f32> in, Tensor<f32> out, Tensor<u32> count) {
  auto local = shared_array<u32>(4);
  if_(unit_pos() < 4u, [&] { local[unit_pos()] = 0u; });
  sync_cube();
  u32 n = in.len();
  u32 chunk = (n + cube_count() - 1u) / cube_count();
  u32 begin = cube_pos() * chunk;
  for_range(begin + unit_pos(), min(begin + chunk, n), cube_dim(), [&](u32 i) {
    f32 x = in[i];
    if_(x < -0.8f, [&] { continue_(); });
    out[i] = x * 2.0f + cast<f32>(i % 7u);
    if_(x > 0.5f, [&] { atomic_add(local[i % 4u], 1u); });
  });
  sync_cube();
  if_(unit_pos() < 4u, [&] { atomic_add(count[unit_pos()], local[unit_pos()]); });
}
KILN_KERNEL(v_strided, "in, out, count").cube_dim(48);

// Rows of 24 units (not a multiple of the vector) under the cube-row schedule, with a remainder
// and a quotient by 32 (a multiple of the vector): lanes of one vector cross a multiple of 32.
void v_rows24(Tensor<u32> out) {
  u32 u = unit_pos();
  out[absolute_pos()] = (u % 32u) * 1000u + u / 32u;
}
KILN_KERNEL(v_rows24, "out").cube_dim(24, 3);

// Indices the vectorizer cannot see as affine (through a division by a run-time value) that are
// consecutive or every other element at run time, under a mask: the window loads.
void v_windows(Tensor<const f32> in, Tensor<f32> out, u32 w) {
  u32 i = absolute_pos();
  u32 row = i / w, col = i % w;
  if_(i < out.len() && col % 5u != 3u,
      [&] { out[i] = in[row * 2u * w + 2u * col] - in[row * 2u * w + col] * 0.5f; });
}
KILN_KERNEL(v_windows, "in, out, w").cube_dim(64);

// A local array kept across a barrier (fission stores it per unit, index-major) read at an
// index from memory: checked mode must report an index past its end, even one whose product
// with the cube size wraps around 2^32.
void v_local_barrier(Tensor<const u32> idx, Tensor<f32> out) {
  auto row = local_array<f32>(4);
  u32 i = absolute_pos();
  for_range(0u, 4u, [&](u32 k) { row[k] = cast<f32>(i * 10u + k); });
  sync_cube();
  out[i] = row[idx[i]];
}
KILN_KERNEL(v_local_barrier, "idx, out").cube_dim(32);

// Loads and stores at unit + a - b (a difference: the vectorizer tests and addresses its terms
// summed in 64 bits), with a and b such that unit + a wraps around 2^32 on purpose (the 64-bit
// sum is then out of range and the 32-bit test must take the access), and lanes whose index
// is out of the tensors skipped.
void v_shifted(Tensor<const f32> in, Tensor<f32> out, Tensor<f32> moved, u32 a, u32 b) {
  u32 i = absolute_pos();
  u32 j = i + a - b;
  if_(i < out.len() && j < in.len(), [&] {
    out[i] = in[j];
    moved[j] = in[i];
  });
}
KILN_KERNEL(v_shifted, "in, out, moved, a, b").cube_dim(64);
