// Tracing speed: how long it takes to trace a 100-op kernel through the DSL (with verification),
// against building the same IR directly with ir::Builder (the peer: what the DSL adds).
// Target: under 50 microseconds per 100-op kernel.
#include <cstdio>

#include "compiler/dsl/dsl.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "tools/bench/bench_util.h"

using namespace kiln;
using namespace kiln::dsl;

namespace {

// Loads, a comptime-unrolled Horner polynomial, a guarded store: 100 IR ops with 30 terms.
void bench_poly(Tensor<const f32> x, Tensor<f32> y, int terms) {
  u32 i = absolute_pos();
  if_(i < x.len(), [&] {
    f32 v = x[i];
    f32 acc = 0.5f;
    for (int k = 0; k < terms; ++k) acc = fma(acc, v, 1.0f / static_cast<float>(k + 2));
    y[i] = acc;
  });
}
KILN_KERNEL(bench_poly, "x: line=4, y: line=4, terms = 46").cube_dim(256);

// The same kernel, built op by op with the IR builder.
Result<ir::Kernel> build_directly(int terms) {
  using ir::ElemType;
  using ir::OpKind;
  using ir::Type;
  ir::Builder b("bench_poly");
  const ir::SourceLoc at = b.loc("tools/bench/trace_bench.cpp", 20);
  const auto x = b.param("x", Type::tensor(ElemType::F32, 4, 1, true));
  const auto y = b.param("y", Type::tensor(ElemType::F32, 4, 1, false));
  b.set_cube_dim(256, 1, 1);
  const auto i = b.op(OpKind::AbsolutePos, {}, at);
  const auto n = b.op(OpKind::Len, {x}, at);
  b.begin_if(b.op(OpKind::Lt, {i, n}, at), at);
  const auto v = b.op(OpKind::Load, {x, i}, at);
  const Type line = Type::value(ElemType::F32, 4);
  auto acc = b.const_float(line, 0.5, at);
  for (int k = 0; k < terms; ++k)
    acc = b.op(OpKind::Fma, {acc, v, b.const_float(line, 1.0 / (k + 2), at)}, at);
  b.op(OpKind::Store, {y, i, acc}, at);
  b.end_if();
  return std::move(b).finish();
}

}  // namespace

int main() {
  const KernelDef* def = Registry::global().find("bench_poly");
  auto sel = select(*def, {});
  if (!sel) {
    std::fprintf(stderr, "%s\n", sel.error().message.c_str());
    return 1;
  }
  auto k = trace(*def, *sel->inst, sel->request);
  auto direct = build_directly(46);
  if (!k || !direct) {
    std::fprintf(stderr, "tracing failed\n");
    return 1;
  }
  const size_t ops = ir::count_ops(k->body);
  const double t_dsl =
      bench::median_seconds([&] { (void)trace(*def, *sel->inst, sel->request); }, 200);
  const double t_builder = bench::median_seconds([&] { (void)build_directly(46); }, 200);
  std::printf("trace_bench: kernel with %zu IR ops (the builder peer builds %zu)\n", ops,
              ir::count_ops(direct->body));
  std::printf("  DSL trace + verify      %8.2f us  (%.3f us per op)\n", t_dsl * 1e6,
              t_dsl * 1e6 / ops);
  std::printf("  ir::Builder + verify    %8.2f us\n", t_builder * 1e6);
  std::printf("  ratio DSL / builder     %8.2fx\n", t_dsl / t_builder);
  std::printf("  per 100 ops             %8.2f us  (target: under 50 us)\n",
              t_dsl * 1e6 * 100 / ops);
  return 0;
}
