// kiln's vectorized math functions: accuracy in ULP against long double references over wide
// random ranges, IEEE special values, and that the generated code calls no libm function.
// The measured worst cases are printed; docs/backends.md lists them.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>

#include "ir/builder.h"
#include "tests/compiler/cpu/cpu_test_util.h"

using namespace kiln;
using ir::ElemType;
using ir::OpKind;
using ir::Type;

namespace {

constexpr uint32_t kCubeDim = 64;

// out[i] = f(a[i], b[i]) over arrays of `lanes`-wide lines.
ir::Kernel math_kernel(OpKind op, ElemType t, int lanes) {
  ir::Builder b("math");
  const ir::SourceLoc at = b.loc("test_math", 1);
  const auto a = b.param("a", Type::array(t, lanes, true));
  const auto bb = b.param("b", Type::array(t, lanes, true));
  const auto out = b.param("out", Type::array(t, lanes, false));
  b.set_cube_dim(kCubeDim, 1, 1);
  const auto i = b.op(OpKind::AbsolutePos, {}, at);
  b.begin_if(b.op(OpKind::Lt, {i, b.op(OpKind::Len, {a}, at)}, at), at);
  const auto x = b.op(OpKind::Load, {a, i}, at);
  const auto r =
      op == OpKind::Pow ? b.op(op, {x, b.op(OpKind::Load, {bb, i}, at)}, at) : b.op(op, {x}, at);
  b.op(OpKind::Store, {out, i, r}, at);
  b.end_if();
  auto k = std::move(b).finish();
  REQUIRE(k.ok());
  return std::move(*k);
}

long double ref(OpKind op, long double x, long double y) {
  switch (op) {
    case OpKind::Exp:
      return std::exp(x);
    case OpKind::Exp2:
      return std::exp2(x);
    case OpKind::Log:
      return std::log(x);
    case OpKind::Log2:
      return std::log2(x);
    case OpKind::Sin:
      return std::sin(x);
    case OpKind::Cos:
      return std::cos(x);
    case OpKind::Tanh:
      return std::tanh(x);
    case OpKind::Pow:
      return std::pow(x, y);
    default:
      return 0;
  }
}

// The error of `got` in units in the last place of the type at the reference value.
double ulp_error(bool is_double, double got, long double want) {
  if (std::isnan(static_cast<double>(want))) return std::isnan(got) ? 0 : 1e30;
  if (std::isinf(got) || std::isinf(static_cast<double>(want))) {
    // Overflow at the edge: compare in the type's range.
    const long double max = is_double ? 1.7976931348623157e308L : 3.4028234663852886e38L;
    if (std::isinf(got) && std::fabs(want) > max * (1 - (is_double ? 1e-16L : 6e-8L))) return 0;
    return got == static_cast<double>(want) ? 0 : 1e30;
  }
  const int mant = is_double ? 52 : 23;
  const int min_exp = is_double ? -1022 : -126;
  int e = 0;
  std::frexp(static_cast<double>(want), &e);
  const long double ulp = std::ldexp(1.0L, std::max(e - 1, min_exp) - mant);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

struct Measure {
  double max_ulp = 0;
  double worst_x = 0, worst_y = 0;
};

Measure measure(OpKind op, ElemType t, const std::vector<double>& xs,
                const std::vector<double>& ys) {
  const bool dbl = t == ElemType::F64;
  const int lanes = dbl ? 8 : 16;
  const size_t n = (xs.size() + lanes * kCubeDim - 1) / (lanes * kCubeDim) * lanes * kCubeDim;
  auto k = test::compile_ir(math_kernel(op, t, lanes));
  Measure m;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> a(n, T(1)), b(n, T(1)), out(n, T(0));
    for (size_t i = 0; i < xs.size(); ++i) {
      a[i] = static_cast<T>(xs[i]);
      b[i] = static_cast<T>(ys.empty() ? 0 : ys[i]);
    }
    std::vector<HostArg> args{test::array(a), test::array(b), test::array(out)};
    test::run(*k, {static_cast<uint32_t>(n / lanes / kCubeDim), 1, 1}, args);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double err = ulp_error(dbl, out[i], ref(op, a[i], b[i]));
      if (err > m.max_ulp) m = {err, static_cast<double>(a[i]), static_cast<double>(b[i])};
    }
  };
  if (dbl)
    run(double{});
  else
    run(float{});
  return m;
}

std::vector<double> uniform(size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(test::rng());
  return v;
}
// Positive numbers of every exponent, denormals included.
std::vector<double> positive_bits(size_t n, bool dbl) {
  std::vector<double> v(n);
  for (double& x : v) {
    if (dbl) {
      uint64_t b = test::rng()() & 0x7fefffffffffffffull;
      std::memcpy(&x, &b, 8);
    } else {
      uint32_t b = static_cast<uint32_t>(test::rng()()) & 0x7f7fffffu;
      float f;
      std::memcpy(&f, &b, 4);
      x = f;
    }
  }
  return v;
}

// The bound a test checks: kiln's own (the CPU's polynomials), or on a GPU the maximum error
// CUDA documents for its math library (CUDA C++ Programming Guide, "Mathematical Functions"),
// plus half an ULP for measuring against a long double rather than a rounded reference.
double bound(OpKind op, bool dbl, double cpu_bound) {
#ifdef KILN_TEST_CUDA
  double cuda = 2;
  switch (op) {
    case OpKind::Exp:
    case OpKind::Exp2:
      cuda = dbl ? 1 : 2;
      break;
    case OpKind::Log:
    case OpKind::Log2:
      cuda = 1;
      break;
    case OpKind::Sin:
    case OpKind::Cos:
    case OpKind::Tanh:
      cuda = 2;
      break;
    case OpKind::Pow:
      cuda = dbl ? 2 : 4;
      break;
    default:
      break;
  }
  return std::max(cpu_bound, cuda + 0.5);
#else
  (void)op;
  (void)dbl;
  return cpu_bound;
#endif
}

}  // namespace

namespace kiln::test {
// The ops this file measures against a reference (read by the op-coverage test).
std::vector<OpKind> math_measured_ops() {
  return {OpKind::Exp, OpKind::Exp2, OpKind::Log,  OpKind::Log2,
          OpKind::Sin, OpKind::Cos,  OpKind::Tanh, OpKind::Pow};
}
}  // namespace kiln::test

TEST_CASE("math functions are accurate to a few ULP over their range", "[cpu][math]") {
  struct Case {
    OpKind op;
    double lo, hi;  // x range (uniform), unless `bits`
    bool bits;
    double bound_f32, bound_f64;
  };
  const Case cases[] = {
      // Bounds leave margin over the worst errors seen in many runs (docs/backends.md).
      {OpKind::Exp, -110, 90, false, 1.5, 1.5},   {OpKind::Exp, -750, 710, false, 1.5, 1.5},
      {OpKind::Exp2, -155, 130, false, 1.5, 1.5}, {OpKind::Exp2, -1080, 1025, false, 1.5, 1.5},
      {OpKind::Log, 0, 0, true, 2.5, 2.5},        {OpKind::Log2, 0, 0, true, 3.5, 3.5},
      {OpKind::Log, 0.5, 2, false, 2.5, 2.5},     {OpKind::Log2, 0.5, 2, false, 3.5, 3.5},
      {OpKind::Sin, -10, 10, false, 1, 3.5},      {OpKind::Cos, -10, 10, false, 1, 3.5},
      {OpKind::Sin, -1e6, 1e6, false, 1, 3.5},    {OpKind::Cos, -1e6, 1e6, false, 1, 3.5},
      {OpKind::Tanh, -20, 20, false, 3.5, 3.5},   {OpKind::Tanh, -0.6, 0.6, false, 3.5, 3.5},
  };
  std::map<std::string, double> worst;
  for (const Case& c : cases)
    for (ElemType t : {ElemType::F32, ElemType::F64}) {
      const bool dbl = t == ElemType::F64;
      if (!dbl && c.op == OpKind::Exp && c.hi > 100) continue;  // f64 ranges
      if (!dbl && c.op == OpKind::Exp2 && c.hi > 200) continue;
      if (dbl && c.op == OpKind::Exp && c.hi < 100) continue;
      if (dbl && c.op == OpKind::Exp2 && c.hi < 200) continue;
      const auto xs = c.bits ? positive_bits(20000, dbl) : uniform(20000, c.lo, c.hi);
      const Measure m = measure(c.op, t, xs, {});
      const std::string key = fmt::format("{} {}", ir::op_name(c.op), ir::elem_name(t));
      worst[key] = std::max(worst[key], m.max_ulp);
      INFO(key << " on [" << c.lo << ", " << c.hi << "]: max " << m.max_ulp
               << " ULP at x = " << m.worst_x);
      CHECK(m.max_ulp <= bound(c.op, dbl, dbl ? c.bound_f64 : c.bound_f32));
    }
  // pow: positive bases over a wide range of results, and negative bases with integer powers.
  for (ElemType t : {ElemType::F32, ElemType::F64}) {
    const bool dbl = t == ElemType::F64;
    auto xs = uniform(20000, 0, 50);
    auto ys = uniform(20000, dbl ? -180 : -22, dbl ? 180 : 22);
    for (size_t i = 0; i < 2000; ++i) {
      xs[i] = -xs[i];
      ys[i] = std::round(ys[i]);
    }
    const Measure m = measure(OpKind::Pow, t, xs, ys);
    worst[fmt::format("pow {}", ir::elem_name(t))] = m.max_ulp;
    INFO("pow " << ir::elem_name(t) << ": max " << m.max_ulp << " ULP at " << m.worst_x << ", "
                << m.worst_y);
    CHECK(m.max_ulp <= bound(OpKind::Pow, dbl, dbl ? 5 : 1));
  }
  for (const auto& [k, v] : worst)
    std::fprintf(stderr, "  max error %-12s %.3f ULP\n", k.c_str(), v);
}

TEST_CASE("math functions give IEEE special values", "[cpu][math]") {
  const double inf = INFINITY, nan = NAN;
  struct Special {
    OpKind op;
    double x, y, want;
  };
  const Special specials[] = {
      {OpKind::Exp, -inf, 0, 0},     {OpKind::Exp, inf, 0, inf},    {OpKind::Exp, nan, 0, nan},
      {OpKind::Exp, 0, 0, 1},        {OpKind::Exp, 1000, 0, inf},   {OpKind::Exp, -1000, 0, 0},
      {OpKind::Exp2, -inf, 0, 0},    {OpKind::Exp2, 3, 0, 8},       {OpKind::Exp2, -1, 0, 0.5},
      {OpKind::Log, 0, 0, -inf},     {OpKind::Log, -0.0, 0, -inf},  {OpKind::Log, -1, 0, nan},
      {OpKind::Log, inf, 0, inf},    {OpKind::Log, 1, 0, 0},        {OpKind::Log, nan, 0, nan},
      {OpKind::Log2, 8, 0, 3},       {OpKind::Log2, 0, 0, -inf},    {OpKind::Log2, -inf, 0, nan},
      {OpKind::Sin, inf, 0, nan},    {OpKind::Sin, -0.0, 0, -0.0},  {OpKind::Sin, 0, 0, 0},
      {OpKind::Cos, inf, 0, nan},    {OpKind::Cos, 0, 0, 1},        {OpKind::Tanh, inf, 0, 1},
      {OpKind::Tanh, -inf, 0, -1},   {OpKind::Tanh, -0.0, 0, -0.0}, {OpKind::Tanh, nan, 0, nan},
      {OpKind::Pow, nan, 0, 1},      {OpKind::Pow, 1, nan, 1},      {OpKind::Pow, -2, 3, -8},
      {OpKind::Pow, -2, 0.5, nan},   {OpKind::Pow, 0, -1, inf},     {OpKind::Pow, -0.0, -3, -inf},
      {OpKind::Pow, -0.0, 3, -0.0},  {OpKind::Pow, 0, 2, 0},        {OpKind::Pow, -1, inf, 1},
      {OpKind::Pow, 0.5, inf, 0},    {OpKind::Pow, 2, inf, inf},    {OpKind::Pow, 0.5, -inf, inf},
      {OpKind::Pow, -inf, -3, -0.0}, {OpKind::Pow, -inf, 3, -inf},  {OpKind::Pow, -inf, 2, inf},
      {OpKind::Pow, inf, -1, 0},     {OpKind::Pow, 2, 10, 1024},    {OpKind::Pow, nan, 1, nan},
  };
  for (ElemType t : {ElemType::F32, ElemType::F64}) {
    std::map<OpKind, std::vector<const Special*>> by_op;
    for (const Special& s : specials) by_op[s.op].push_back(&s);
    for (const auto& [op, list] : by_op) {
      std::vector<double> xs, ys;
      for (const Special* s : list) {
        xs.push_back(s->x);
        ys.push_back(s->y);
      }
      auto k = test::compile_ir(math_kernel(op, t, 1));
      const size_t n = kCubeDim;
      std::vector<double> got(xs.size());
      if (t == ElemType::F64) {
        std::vector<double> a(n, 1), b(n, 1), out(n, 0);
        std::copy(xs.begin(), xs.end(), a.begin());
        std::copy(ys.begin(), ys.end(), b.begin());
        std::vector<HostArg> args{test::array(a), test::array(b), test::array(out)};
        test::run(*k, {1, 1, 1}, args);
        std::copy(out.begin(), out.begin() + static_cast<long>(xs.size()), got.begin());
      } else {
        std::vector<float> a(n, 1), b(n, 1), out(n, 0);
        for (size_t i = 0; i < xs.size(); ++i) {
          a[i] = static_cast<float>(xs[i]);
          b[i] = static_cast<float>(ys[i]);
        }
        std::vector<HostArg> args{test::array(a), test::array(b), test::array(out)};
        test::run(*k, {1, 1, 1}, args);
        for (size_t i = 0; i < xs.size(); ++i) got[i] = out[i];
      }
      for (size_t i = 0; i < list.size(); ++i) {
        const double want = t == ElemType::F32 ? static_cast<float>(list[i]->want) : list[i]->want;
        INFO(ir::op_name(op) << " " << ir::elem_name(t) << "(" << list[i]->x << ", " << list[i]->y
                             << ") = " << got[i] << ", want " << want);
        if (std::isnan(want))
          CHECK(std::isnan(got[i]));
        else
          CHECK((got[i] == want && std::signbit(got[i]) == std::signbit(want)));
      }
    }
  }
}

#ifndef KILN_TEST_CUDA  // CPU code generation only
TEST_CASE("math on lines is vector code without libm calls", "[cpu][math]") {
  for (OpKind op : {OpKind::Exp, OpKind::Log, OpKind::Sin, OpKind::Tanh, OpKind::Pow}) {
    auto lowered = backend::find("cpu")->prepare(math_kernel(op, ElemType::F32, 16));
    REQUIRE(lowered.ok());
    cpu::CompileOptions o;
    o.target = test::host();
    auto text = cpu::emit_asm(*lowered, o);
    REQUIRE(text.ok());
    INFO(ir::op_name(op));
    CHECK(text->find("call") == std::string::npos);
    if (test::host().vector_bits >= 512) CHECK(text->find("zmm") != std::string::npos);
  }
}
#endif
