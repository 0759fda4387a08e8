// Loads this project's kernels and launches them on the CPU; exits 0 when the numbers are
// right. `app [PLUGIN] [DEVICE]`: the plugin built next to it and "cpu" by default.
#include <cmath>
#include <cstdio>
#include <vector>

#include "compiler/dsl/registry.h"
#include "runtime/runtime.h"

using kiln::ir::ElemType;

namespace {
int fail(const kiln::Error& e) {
  std::fprintf(stderr, "app: %s\n", e.message.c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  auto plugin = kiln::load_plugin(argc > 1 ? argv[1] : MY_KERNELS);
  if (!plugin) return fail(plugin.error());
  for (const auto& n : plugin->notices) std::printf("notice: %s\n", n.c_str());
  auto rt = kiln::Runtime::open(argc > 2 ? argv[2] : "cpu");
  if (!rt) return fail(rt.error());

  // y = 2 * x + y
  const int64_t n = 10000;
  std::vector<float> hx(n), hy(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) hx[i] = static_cast<float>(i);
  auto x = rt->empty(ElemType::F32, {n});
  auto y = rt->empty(ElemType::F32, {n});
  if (!x) return fail(x.error());
  if (!y) return fail(y.error());
  if (auto st = x->upload(std::span<const float>(hx)); !st) return fail(st.error());
  if (auto st = y->upload(std::span<const float>(hy)); !st) return fail(st.error());
  auto axpy = rt->kernel("axpy");
  if (!axpy) return fail(axpy.error());
  const uint32_t cubes = static_cast<uint32_t>((n / 4 + 255) / 256);  // lines of 4
  if (auto st = rt->launch(*axpy, cubes, 256, *x, *y, 2.0f); !st) return fail(st.error());

  // Row sums of a 100 x 777 matrix of ones, 64 units per cube: `units` is an int, passed as
  // one, and the cube size the kernel requires for it.
  const int64_t rows = 100, cols = 777;
  std::vector<float> ones(rows * cols, 1.0f);
  auto in = rt->empty(ElemType::F32, {rows, cols});
  auto out = rt->empty(ElemType::F32, {rows});
  if (!in) return fail(in.error());
  if (!out) return fail(out.error());
  if (auto st = in->upload(std::span<const float>(ones)); !st) return fail(st.error());
  auto row_sum = rt->kernel("row_sum");
  if (!row_sum) return fail(row_sum.error());
  const int units = 64;
  if (auto st = rt->launch(*row_sum, static_cast<uint32_t>(rows), 64, *in, *out, units); !st)
    return fail(st.error());
  if (auto st = rt->sync(); !st) return fail(st.error());

  if (auto st = y->download(std::span<float>(hy)); !st) return fail(st.error());
  for (int64_t i = 0; i < n; ++i)
    if (hy[i] != 2.0f * static_cast<float>(i) + 1.0f) {
      std::fprintf(stderr, "app: axpy: y[%lld] = %g, want %g\n", static_cast<long long>(i), hy[i],
                   2.0f * static_cast<float>(i) + 1.0f);
      return 1;
    }
  std::vector<float> sums(rows);
  if (auto st = out->download(std::span<float>(sums)); !st) return fail(st.error());
  for (int64_t r = 0; r < rows; ++r)
    if (sums[r] != static_cast<float>(cols)) {
      std::fprintf(stderr, "app: row_sum: out[%lld] = %g, want %lld\n", static_cast<long long>(r),
                   sums[r], static_cast<long long>(cols));
      return 1;
    }
  std::printf("app: axpy and row_sum from %s are right on %s\n", plugin->path.c_str(),
              rt->device().name.c_str());
  return 0;
}
