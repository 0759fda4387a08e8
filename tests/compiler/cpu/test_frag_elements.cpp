// Computing on accumulator fragments (docs/dsl.md "Computing on accumulators"): the element
// layout (element, set_element, element_row/col agree with store), apply, rows_max and rows_sum
// across the lanes that share a row, scale_rows, and an accumulator converted to the A operand
// of the next multiply, against a double reference. Built into test_cpu (the CPU backend) and
// into test_gpu, which runs it on the CUDA emulator and on a GPU when there is one.
#include <catch2/catch.hpp>

#include <cmath>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "tests/compiler/cpu/cpu_test_util.h"

using namespace kiln::dsl;
namespace ir = kiln::ir;
namespace test = kiln::test;
namespace dsl = kiln::dsl;
using kiln::HostArg;
using kiln::TensorView;

namespace {

// One plane: S = A (fm x 16) * B (16 x fn); S' = 2 S + row - col / 2 (apply with positions);
// s_out gets S' element by element through element_row/col; stats gets each row's max and sum as
// every one of the four lanes holding the row sees them (row r, lane t: stats[(r * 4 + t) * 2]);
// then each row is scaled by 1 / (row + 1), converted to the A operand P (fm x fn) and
// multiplied by V (fn x 16) into o. With `masked`, the units of odd lanes skip the apply (a
// unit's own elements, under control flow that differs between units).
template <class T>
void t_frag_elems(Tensor<const T> a, Tensor<const T> b, Tensor<const T> v, Tensor<f32> s_out,
                  Tensor<f32> stats, Tensor<f32> o, int fm, int fn, bool masked) {
  auto fa = matrix_a<T>(fm, fn, 16);
  auto fb = matrix_b<T>(fm, fn, 16);
  auto s = accumulator<f32>(fm, fn, 16);
  auto p = matrix_a<T>(fm, 16, fn);
  auto fv = matrix_b<T>(fm, 16, fn);
  auto acc = accumulator<f32>(fm, 16, fn);
  const uint32_t ufn = static_cast<uint32_t>(fn);
  fill(s, 0.0f);
  load(fa, a, 0u, 16u);
  load(fb, b, 0u, ufn);
  mma(s, fa, fb);
  auto shift = [&](f32 x, u32 r, u32 c) { return x * 2.0f + cast<f32>(r) - cast<f32>(c) * 0.5f; };
  if (masked) {
    if_(plane_lane() % 2u == 0u, [&] { apply(s, shift); });
    if_(plane_lane() % 2u == 1u, [&] {
      for (int e = 0; e < element_count(s); ++e)
        set_element(s, e, shift(element(s, e), element_row(s, e), element_col(s, e)));
    });
  } else {
    apply(s, shift);
  }
  for (int e = 0; e < element_count(s); ++e)
    s_out[element_row(s, e) * ufn + element_col(s, e)] = element(s, e);
  auto mx = rows_max(s);
  auto sum = rows_sum(s);
  std::vector<f32> inv;
  for (int slot = 0; slot < row_count(s); ++slot) {
    u32 r = slot_row(s, slot);
    stats[(r * 4u + plane_lane() % 4u) * 2u] = mx[static_cast<size_t>(slot)];
    stats[(r * 4u + plane_lane() % 4u) * 2u + 1u] = sum[static_cast<size_t>(slot)];
    inv.push_back(1.0f / (cast<f32>(r) + 1.0f));
  }
  scale_rows(s, inv);
  convert(p, s);
  fill(acc, 0.0f);
  load(fv, v, 0u, 16u);
  mma(acc, p, fv);
  store(o, 0u, 16u, acc);
}
KILN_KERNEL_GENERIC(t_frag_elems,
                    "a: rank=2, b: rank=2, v: rank=2, s_out: rank=2, stats: rank=1, o: rank=2, "
                    "fm = 16, fn = 16, masked = false",
                    f16, bf16)
    .cube_dim(32);

// An i32 accumulator's elements: each becomes its row * 1000 + its column, then stored.
void t_frag_elems_i32(Tensor<i32> c) {
  auto acc = accumulator<i32>(32, 32, 32);
  fill(acc, 0);
  apply(acc, [&](i32 x, u32 r, u32 col) { return x + cast<i32>(r * 1000u + col); });
  store(c, 0u, 32u, acc);
}
KILN_KERNEL(t_frag_elems_i32, "c: rank=2").cube_dim(32);

double round_to(ir::ElemType t, double x) {
  return t == ir::ElemType::F16 ? kiln::f16_value(kiln::f16_bits(x))
                                : kiln::bf16_value(kiln::bf16_bits(x));
}
uint16_t bits_of(ir::ElemType t, double x) {
  return t == ir::ElemType::F16 ? kiln::f16_bits(x) : kiln::bf16_bits(x);
}

void check_elems(const char* dtype, int fm, int fn, bool masked) {
  INFO(dtype << " fm " << fm << " fn " << fn << " masked " << masked);
  const ir::ElemType t = *ir::parse_elem_type(dtype);
  dsl::SpecOptions o;
  o.dtype["a"] = dtype;
  o.set["fm"] = std::to_string(fm);
  o.set["fn"] = std::to_string(fn);
  o.set["masked"] = masked ? "true" : "false";
  auto kern = test::compile_kernel("t_frag_elems", o);
  // Quarters in [-8, 8]: the products and sums of S are exact in f32.
  std::uniform_int_distribution<int> d(-32, 32);
  auto fill_half = [&](std::vector<uint16_t>& h, std::vector<double>& x, size_t n) {
    h.resize(n);
    x.resize(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = d(test::rng()) / 4.0;
      h[i] = bits_of(t, x[i]);
    }
  };
  std::vector<uint16_t> ah, bh, vh;
  std::vector<double> ax, bx, vx;
  fill_half(ah, ax, size_t(fm) * 16);
  fill_half(bh, bx, size_t(16) * fn);
  fill_half(vh, vx, size_t(fn) * 16);
  std::vector<float> s_out(size_t(fm) * fn, -1e30f), stats(size_t(fm) * 8, -1e30f),
      out(size_t(fm) * 16, -1e30f);
  std::vector<HostArg> args{TensorView(ah.data(), {fm, 16}),    TensorView(bh.data(), {16, fn}),
                            TensorView(vh.data(), {fn, 16}),    TensorView(s_out.data(), {fm, fn}),
                            TensorView(stats.data(), {fm * 8}), TensorView(out.data(), {fm, 16})};
  test::run(*kern, {1, 1, 1}, args);
  for (int r = 0; r < fm; ++r) {
    std::vector<double> row(size_t(fn), 0.0);
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < fn; ++c) {
      for (int k = 0; k < 16; ++k)
        row[size_t(c)] += ax[size_t(r * 16 + k)] * bx[size_t(k * fn + c)];
      row[size_t(c)] = 2 * row[size_t(c)] + r - c * 0.5;
      INFO("S'(" << r << ", " << c << ")");
      REQUIRE(s_out[size_t(r * fn + c)] == row[size_t(c)]);
      mx = std::max(mx, row[size_t(c)]);
      sum += row[size_t(c)];
    }
    for (int lane = 0; lane < 4; ++lane) {
      INFO("row " << r << ", lane " << lane);
      REQUIRE(stats[size_t((r * 4 + lane) * 2)] == mx);
      REQUIRE(stats[size_t((r * 4 + lane) * 2 + 1)] == sum);
    }
    // P is f32 S' times f32 1 / (row + 1), rounded to the input type.
    const float inv = 1.0f / (static_cast<float>(r) + 1.0f);
    for (int j = 0; j < 16; ++j) {
      double want = 0, mag = 0;
      for (int c = 0; c < fn; ++c) {
        const double pv = round_to(t, static_cast<float>(row[size_t(c)]) * inv);
        want += pv * vx[size_t(c * 16 + j)];
        mag += std::fabs(pv * vx[size_t(c * 16 + j)]);
      }
      INFO("O(" << r << ", " << j << ") = " << out[size_t(r * 16 + j)] << ", want " << want);
      REQUIRE(std::fabs(out[size_t(r * 16 + j)] - want) <= 1e-5 * mag + 1e-6);
    }
  }
}

}  // namespace

TEST_CASE("fragment elements: layout, apply, row reductions, row scaling, accumulator to A",
          "[cpu][matrix]") {
  for (const char* dtype : {"f16", "bf16"})
    for (int fm : {16, 32})
      for (int fn : {16, 32}) check_elems(dtype, fm, fn, false);
  check_elems("f16", 32, 32, true);
  check_elems("bf16", 16, 16, true);
}

TEST_CASE("fragment elements: an i32 accumulator's rows and columns", "[cpu][matrix]") {
  auto kern = test::compile_kernel("t_frag_elems_i32");
  std::vector<int32_t> c(32 * 32, -1);
  test::run(*kern, {1, 1, 1}, {TensorView(c.data(), {32, 32})});
  for (int r = 0; r < 32; ++r)
    for (int col = 0; col < 32; ++col) REQUIRE(c[size_t(r * 32 + col)] == r * 1000 + col);
}
