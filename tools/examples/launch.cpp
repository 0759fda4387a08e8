// Embedding kiln: open the CPU, make tensors, launch kernels by name, read the results.
// Built as build/bin/example_launch and run by the tests; docs/runtime.md walks through it.
#include <cstdio>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/runtime.h"

using kiln::ir::ElemType;

namespace {

int fail(const kiln::Error& e) {
  std::fprintf(stderr, "example_launch: %s\n", e.message.c_str());
  return 1;
}

}  // namespace

int main() {
  (void)kiln::kernels::builtin_names();  // links kiln's own kernels
  auto rt = kiln::Runtime::open("cpu");
  if (!rt) return fail(rt.error());

  // y = 3 * x + y over a million floats.
  const int64_t n = 1 << 20;
  std::vector<float> hx(n, 1.0f), hy(n, 2.0f);
  auto x = rt->empty(ElemType::F32, {n});
  auto y = rt->empty(ElemType::F32, {n});
  if (!x) return fail(x.error());
  if (!y) return fail(y.error());
  if (auto st = x->upload(std::span<const float>(hx)); !st) return fail(st.error());
  if (auto st = y->upload(std::span<const float>(hy)); !st) return fail(st.error());
  auto axpy = rt->kernel("axpy");
  if (!axpy) return fail(axpy.error());
  const int w = rt->line_width({&*x, &*y});  // the widest line both tensors allow
  const auto cubes = static_cast<uint32_t>((n / w + 255) / 256);
  if (auto st = rt->launch(*axpy, cubes, 256, *x, *y, 3.0f); !st) return fail(st.error());
  if (auto st = rt->sync(); !st) return fail(st.error());
  if (auto st = y->download(std::span<float>(hy)); !st) return fail(st.error());
  std::printf("axpy: y[0] = %g, y[%lld] = %g (lines of %d)\n", hy[0], static_cast<long long>(n - 1),
              hy[n - 1], w);

  // The sums of the rows of a 3 x 4 matrix, seen through a transposed view: columns of 4 x 3.
  std::vector<float> hm = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto m = rt->empty(ElemType::F32, {4, 3});
  auto sums = rt->empty(ElemType::F32, {3});
  if (!m || !sums) return fail(m ? sums.error() : m.error());
  if (auto st = m->upload(std::span<const float>(hm)); !st) return fail(st.error());
  auto mt = m->transpose(0, 1);  // 3 x 4, strided
  if (!mt) return fail(mt.error());
  auto row_sum = rt->kernel("row_sum");
  if (!row_sum) return fail(row_sum.error());
  if (auto st = rt->launch(*row_sum, 3, 32, *mt, *sums, 32); !st) return fail(st.error());
  if (auto st = rt->sync(); !st) return fail(st.error());
  std::vector<float> hs(3);
  if (auto st = sums->download(std::span<float>(hs)); !st) return fail(st.error());
  std::printf("row_sum of the transpose: %g %g %g\n", hs[0], hs[1], hs[2]);

  // A mistake is an error value that names the parameter.
  auto st = rt->launch(*axpy, cubes, 256, *x, *y);
  std::printf("a launch with a missing argument: %s\n",
              st ? "accepted?" : st.error().message.c_str());

  const kiln::CacheStats cs = kiln::cache_stats();
  std::printf("specializations: %llu compiled, %llu from the disk cache\n",
              static_cast<unsigned long long>(cs.compiles),
              static_cast<unsigned long long>(cs.disk_hits));
  return hy[0] == 5.0f && hs[0] == 22.0f && hs[1] == 26.0f && hs[2] == 30.0f && !st ? 0 : 1;
}
