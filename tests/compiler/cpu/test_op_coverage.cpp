// Coverage driven by the op list: every op kind of ir/ops.def runs numerically in the CPU tests
// (the op-kind kernels, the math tests, the registered kernels traced and lowered), so an op
// added without a test fails here, naming it.
#include <catch2/catch.hpp>

#include "tests/compiler/op_coverage.h"

namespace kiln::test {
std::vector<ir::OpKind> math_measured_ops();  // tests/compiler/cpu/test_math.cpp
}

TEST_CASE("every op kind has a numeric case in the CPU tests", "[cpu][ops][coverage]") {
  const kiln::backend::Backend* cpu = kiln::backend::find("cpu");
  REQUIRE(cpu);
  using namespace kiln;
  auto ops = test::registered_kernel_ops(*cpu);
  // The kernels of test_ops.cpp: every op-kind case of every type, every cast, the bitcasts.
  for (ir::ElemType t : test::ops::kAll) {
    const auto cases = test::ops::cases_for(t);
    if (!cases.empty()) test::collect_ops(test::ops::build(t, 1, cases), ops);
    for (ir::ElemType to : test::ops::kAll)
      test::collect_ops(test::ops::build(t, 1, {{ir::OpKind::Cast, to, 1}}), ops);
  }
  for (auto [from, to] : test::kBitcastPairs)
    test::collect_ops(test::ops::build(from, 4, {{ir::OpKind::Bitcast, to, 1}}), ops);
  for (ir::OpKind op : test::math_measured_ops()) ops.insert(op);
  CHECK(kiln::test::missing_ops(ops) == "");
}
