// A plugin written the way a new user writes one from docs/dsl.md: a kernel named like a
// shipped example (`axpy`), a comptime `int` (which once failed across the library boundary)
// with a cube size that follows it, and a recipe that reads the element types (so it links
// kiln_kernels as well as kiln_compiler).
#include <cstdint>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

// y = a * x - y: not the built-in axpy, so a test can tell which one ran.
void axpy(Tensor<const f32> x, Tensor<f32> y, f32 a) {
  u32 i = absolute_pos();
  if_(i < y.len(), [&] { y[i] = a * x[i] - y[i]; });
}
KILN_KERNEL(axpy, "x, y, a").cube_dim(64).describe("y = a * x - y, the plugin's own axpy");

// Transposes a rank-2 tensor through a tile x tile block of shared memory; the cube is tile x
// tile units, and no other cube size works.
void tile_transpose(Tensor<const f32> in, Tensor<f32> out, int tile) {
  const auto t = static_cast<uint32_t>(tile);
  auto block = shared_array<f32>(t * t);
  u32 r = cube_pos_y() * t + unit_pos_y(), c = cube_pos_x() * t + unit_pos_x();
  if_(r < in.shape(0) && c < in.shape(1),
      [&] { block[unit_pos_y() * t + unit_pos_x()] = in(r, c); });
  sync_cube();
  u32 orow = cube_pos_x() * t + unit_pos_y(), ocol = cube_pos_y() * t + unit_pos_x();
  if_(orow < out.shape(0) && ocol < out.shape(1),
      [&] { out(orow, ocol) = block[unit_pos_x() * t + unit_pos_y()]; });
}
KILN_KERNEL(tile_transpose, "in: rank=2, out: rank=2, tile = 16 in 1..32")
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      const auto t = static_cast<uint32_t>(c.integer("tile"));
      return {t, t, 1};
    })
    .describe("out = transpose(in), through a tile in shared memory");

// A generic kernel whose reference depends on the element type: the result is rounded to it.
template <class T>
void third(Tensor<T> x) {
  u32 i = absolute_pos();
  if_(i < x.len(), [&] { x[i] = x[i] / 3.0f; });
}
KILN_KERNEL_GENERIC(third, "x", f32, f16).cube_dim(128).describe("x = x / 3 in its own type");

KILN_RUN(tile_transpose)
    .shape("in", {100, 70})
    .shape("out",
           [](const kiln::kernels::RunData& d) {
             return std::vector<int64_t>{d.dim("in", 1), d.dim("in", 0)};
           })
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(kiln::kernels::ceil_div(d.dim("in", 1), d.cube_dim.x),
                        kiln::kernels::ceil_div(d.dim("in", 0), d.cube_dim.y));
    })
    .reference([](kiln::kernels::RunData& d) {
      const auto rows = static_cast<size_t>(d.dim("in", 0)),
                 cols = static_cast<size_t>(d.dim("in", 1));
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) d["out"][c * rows + r] = d["in"][r * cols + c];
    });

KILN_RUN(third)
    .shape("x", {1000})
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::kernels::ceil_div(d.numel("x"), d.cube_dim.x);
    })
    .tolerance(0, 0)
    .reference([](kiln::kernels::RunData& d) {
      // The kernel divides in the element type (f16 computes in f32 and rounds once).
      for (double& v : d["x"]) v = d.round("x", static_cast<double>(static_cast<float>(v) / 3.0f));
    });
