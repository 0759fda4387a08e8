// The two kernels of docs/dsl.md's tutorial, as a user writes them in a project of their own.
#include <cstdint>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "kernels/run.h"

using namespace kiln::dsl;

// y = a * x + y. kiln ships an example of the same name: this one takes the name over (kiln
// prints a notice), and -Bsymbolic-functions (kiln_add_kernels) keeps it this library's own.
void axpy(Tensor<const f32> x, Tensor<f32> y, f32 a) {
  u32 i = absolute_pos();
  if_(i < y.len(), [&] { y[i] = fma(a, x[i], y[i]); });
}
KILN_KERNEL(axpy, "x: line=4, y: line=4, a").cube_dim(256);

// out[r] = sum of row r; one cube of `units` units per row.
void row_sum(Tensor<const f32> in, Tensor<f32> out, int units) {
  auto partial = shared_array<f32>(static_cast<uint32_t>(units));
  u32 row = cube_pos();
  Var<f32> acc = 0.0f;
  for_range(unit_pos(), in.shape(1), units, [&](u32 j) { acc += in(row, j); });
  partial[unit_pos()] = acc;
  sync_cube();
  for (int s = units / 2; s > 0; s /= 2) {
    if_(unit_pos() < s, [&] { partial[unit_pos()] += partial[unit_pos() + s]; });
    sync_cube();
  }
  if_(unit_pos() == 0, [&] { out[row] = partial[0]; });
}
KILN_KERNEL(row_sum, "in: rank=2, out, units = 256 in 1..1024")
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("units")), 1, 1};
    });

// How `kiln run row_sum --plugin libmy_kernels.so` runs it.
KILN_RUN(row_sum)
    .shape("in", {1000, 3000})
    .shape("out",
           [](const kiln::kernels::RunData& d) { return std::vector<int64_t>{d.dim("in", 0)}; })
    .cubes([](const kiln::kernels::RunData& d) {
      return kiln::Dim3(static_cast<uint32_t>(d.dim("in", 0)));
    })
    .tolerance(1e-5, 1e-4)
    .flops([](const kiln::kernels::RunData& d) { return static_cast<double>(d.numel("in")); })
    .reference([](kiln::kernels::RunData& d) {
      const auto cols = static_cast<size_t>(d.dim("in", 1));
      for (size_t r = 0; r < d["out"].size(); ++r) {
        double s = 0;
        for (size_t c = 0; c < cols; ++c) s += d["in"][r * cols + c];
        d["out"][r] = s;
      }
    });
