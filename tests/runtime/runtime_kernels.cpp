// Kernels the runtime tests launch. The marker comments name lines the tests expect in errors.
#include "compiler/dsl/dsl.h"

using namespace kiln::dsl;

// Writes `value` to y[i] for i < n, with n chosen by the caller: n > len(y) writes out of
// bounds, which checked mode reports and skips.
void rt_fill_n(Tensor<f32> y, u32 n, f32 value) {
  u32 i = absolute_pos();
  if_(i < n, [&] { y[i] = value; });  // FILL_STORE
}
KILN_KERNEL(rt_fill_n, "y, n, value").cube_dim(64);

// Reads x[i + shift]: out of bounds near the end for shift > 0.
void rt_shifted_copy(Tensor<const f32> x, Tensor<f32> y, u32 shift) {
  u32 i = absolute_pos();
  if_(i < y.len(), [&] { y[i] = x[i + shift]; });  // SHIFT_LOAD
}
KILN_KERNEL(rt_shifted_copy, "x, y, shift").cube_dim(32);

// Shared-memory index past the array for unit_pos() >= size.
void rt_shared_oob(Tensor<f32> y, int size) {
  auto s = shared_array<f32>(static_cast<uint32_t>(size));
  s[unit_pos()] = 1.0f;  // SHARED_STORE
  sync_cube();
  y[absolute_pos()] = 2.0f;
}
KILN_KERNEL(rt_shared_oob, "y, size=16").cube_dim(32);

// Prints from a few units and asserts x[i] >= 0.
void rt_print_assert(Tensor<const f32> x) {
  u32 i = absolute_pos();
  if_(i < 3u, [&] { print("unit {} sees {}", i, x[i]); });                     // PRINT_LOAD
  if_(i < x.len(), [&] { assert_(x[i] >= 0.0f, "x must not be negative"); });  // ASSERT_LINE
}
KILN_KERNEL(rt_print_assert, "x").cube_dim(4);

// The tiny kernel of the launch-overhead benchmark, here for tests of the same shape.
void rt_tiny(Tensor<f32> y, f32 a, u32 k) {
  if_(absolute_pos() == 0u, [&] { y[k] = y[k] + a; });
}
KILN_KERNEL(rt_tiny, "y, a, k").cube_dim(1);

// A generic kernel with a comptime parameter: y = x * factor + offset.
template <class T>
void rt_affine(Tensor<const T> x, Tensor<T> y, T factor, int offset) {
  u32 i = absolute_pos();
  if_(i < y.len(), [&] { y[i] = x[i] * factor + offset; });
}
KILN_KERNEL_GENERIC(rt_affine, "x: line=max, y: line=max, factor, offset=0", f32, f64, i32)
    .cube_dim(64);

// Row-major 2-D copy through tensor indexing, for strided views.
void rt_copy2d(Tensor<const f32> x, Tensor<f32> y) {
  u32 r = cube_pos();
  for_range(unit_pos(), x.shape(1), cube_dim(), [&](u32 c) { y(r, c) = x(r, c); });
}
KILN_KERNEL(rt_copy2d, "x: rank=2, y: rank=2").cube_dim(32);

// y = x + 1 through each view's strides (rank 2): honors any view of either, so a launch
// refuses only an output whose elements overlap. One unit per element of y.
void rt_strided_add1(Tensor<const f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(i < y.shape(0) * y.shape(1), [&] {
    u32 r = i / y.shape(1), c = i % y.shape(1);
    y(r, c) = x(r, c) + 1.0f;
  });
}
KILN_KERNEL(rt_strided_add1, "x: rank=2, y: rank=2").cube_dim(64);

// The same, indexed flat: a launch takes only dense row-major views of x and y.
void rt_flat_add1(Tensor<const f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(i < y.len(), [&] { y[i] = x[i] + 1.0f; });
}
KILN_KERNEL(rt_flat_add1, "x, y").cube_dim(64);

// Rank 1 through t(i): the stride of the one dimension is honored.
void rt_strided_add1_1d(Tensor<const f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(i < y.shape(0), [&] { y(i) = x(i) + 1.0f; });
}
KILN_KERNEL(rt_strided_add1_1d, "x, y").cube_dim(64);

// A bug on purpose: writes y(r, c + 1), one past the row for the last column. On a strided view
// that index lands between the view's elements, inside its footprint; checked mode reports it.
void rt_strided_past_row(Tensor<const f32> x, Tensor<f32> y) {
  u32 i = absolute_pos();
  if_(i < y.shape(0) * y.shape(1), [&] {
    u32 r = i / y.shape(1), c = i % y.shape(1);
    y(r, c + 1u) = x(r, c);  // PAST_ROW
  });
}
KILN_KERNEL(rt_strided_past_row, "x: rank=2, y: rank=2").cube_dim(64);
