// Every value op on every element type it accepts, at line widths 1 and 8, run on the CPU
// backend and checked against a C++ reference of the semantics in ir/ir.h, on fresh random
// inputs mixed with edge values: NaN, infinities, denormals, signed zeros, INT_MIN / -1,
// division by zero and shifts by the width or more.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "ir/builder.h"
#include "tests/compiler/cpu/cpu_test_util.h"
#include "tests/compiler/op_kernels.h"

using namespace kiln;
using namespace kiln::test::ops;
using ir::ElemType;
using ir::OpKind;
using ir::Type;

namespace {

// A scalar of any element type: floats in `f`, integers and bools in `i` (two's complement,
// sign-extended for signed types).
struct V {
  double f = 0;
  uint64_t i = 0;
};

int bits(ElemType t) {
  return ir::elem_bits(t);
}
uint64_t mask(ElemType t) {
  return bits(t) >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits(t)) - 1;
}
uint64_t norm(ElemType t, uint64_t v) {  // to the type's width, sign-extended when signed
  if (t == ElemType::Bool) return v & 1;
  v &= mask(t);
  if (ir::is_signed(t) && bits(t) < 64 && (v >> (bits(t) - 1)) & 1) v |= ~mask(t);
  return v;
}
// A value rounded to the type as a cast or an op result is (f8: saturating, not infinite).
double round_t(ElemType t, double x) {
  if (t == ElemType::F8E4M3) return round_to_e4m3(x);
  if (t == ElemType::F8E5M2) return round_to_e5m2(x);
  return ir::round_float_literal(t, x);
}

V load(ElemType t, const uint8_t* p) {
  V v;
  switch (t) {
    case ElemType::F16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      v.f = f16_value(b);
      break;
    }
    case ElemType::BF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      v.f = bf16_value(b);
      break;
    }
    case ElemType::F8E4M3:
      v.f = e4m3_value(*p);
      break;
    case ElemType::F8E5M2:
      v.f = e5m2_value(*p);
      break;
    case ElemType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      v.f = f;
      break;
    }
    case ElemType::F64:
      std::memcpy(&v.f, p, 8);
      break;
    default: {
      uint64_t b = 0;
      std::memcpy(&b, p, static_cast<size_t>(ir::elem_bytes(t)));
      v.i = norm(t, b);
    }
  }
  return v;
}

void store(ElemType t, uint8_t* p, V v) {
  switch (t) {
    case ElemType::F16: {
      const uint16_t b = f16_bits(v.f);
      std::memcpy(p, &b, 2);
      break;
    }
    case ElemType::BF16: {
      const uint16_t b = bf16_bits(v.f);
      std::memcpy(p, &b, 2);
      break;
    }
    case ElemType::F8E4M3:
      *p = e4m3_bits(v.f);
      break;
    case ElemType::F8E5M2:
      *p = e5m2_bits(v.f);
      break;
    case ElemType::F32: {
      const float f = static_cast<float>(v.f);
      std::memcpy(p, &f, 4);
      break;
    }
    case ElemType::F64:
      std::memcpy(p, &v.f, 8);
      break;
    default:
      std::memcpy(p, &v.i, static_cast<size_t>(ir::elem_bytes(t)));
  }
}

std::string show(ElemType t, V v) {
  if (ir::is_float(t)) return fmt::format("{}", v.f);
  if (ir::is_signed(t)) return fmt::format("{}", static_cast<int64_t>(v.i));
  return fmt::format("{}", v.i);
}

// ---- inputs
// --------------------------------------------------------------------------------------

std::vector<V> edges(ElemType t) {
  std::vector<V> e;
  if (t == ElemType::Bool) return {V{0, 0}, V{0, 1}};
  if (ir::is_float(t)) {
    const double max = t == ElemType::F8E4M3   ? 448.0
                       : t == ElemType::F8E5M2 ? 57344.0
                       : t == ElemType::F16    ? 65504.0
                       : t == ElemType::BF16   ? 3.3895313892515355e38
                       : t == ElemType::F32    ? 3.4028234663852886e38
                                               : std::numeric_limits<double>::max();
    const double tiny = t == ElemType::F8E4M3   ? std::ldexp(1.0, -9)
                        : t == ElemType::F8E5M2 ? std::ldexp(1.0, -16)
                        : t == ElemType::F16    ? std::ldexp(1.0, -24)
                        : t == ElemType::BF16   ? std::ldexp(1.0, -133)
                        : t == ElemType::F32    ? std::ldexp(1.0, -149)
                                                : std::numeric_limits<double>::denorm_min();
    const double min_normal = t == ElemType::F8E4M3   ? std::ldexp(1.0, -6)
                              : t == ElemType::F8E5M2 ? std::ldexp(1.0, -14)
                              : t == ElemType::F16    ? std::ldexp(1.0, -14)
                              : t == ElemType::F64    ? 2.2250738585072014e-308
                                                      : std::ldexp(1.0, -126);
    for (double x : std::initializer_list<double>{0.0,
                                                  -0.0,
                                                  1.0,
                                                  -1.0,
                                                  0.5,
                                                  -0.5,
                                                  1.5,
                                                  2.5,
                                                  -2.5,
                                                  3.0,
                                                  0.1,
                                                  100.0,
                                                  -7.0,
                                                  max,
                                                  -max,
                                                  tiny,
                                                  -tiny,
                                                  tiny * 3,
                                                  min_normal,
                                                  -min_normal,
                                                  min_normal - tiny,
                                                  double(INFINITY),
                                                  -double(INFINITY),
                                                  double(NAN)})
      e.push_back(V{round_t(t, x), 0});
    return e;
  }
  const int w = bits(t);
  const uint64_t mn = ir::is_signed(t) ? (uint64_t{1} << (w - 1)) : 0;
  const uint64_t mx = ir::is_signed(t) ? mn - 1 : mask(t);
  for (uint64_t x :
       {uint64_t{0}, uint64_t{1}, ~uint64_t{0}, uint64_t{2}, uint64_t{3}, uint64_t{7}, mn, mx,
        mn + 1, mx - 1, uint64_t(w), uint64_t(w + 1), uint64_t(2 * w + 3), uint64_t{100}})
    e.push_back(V{0, norm(t, x)});
  return e;
}

V random_value(ElemType t) {
  auto& r = test::rng();
  if (t == ElemType::Bool) return V{0, r() & 1};
  if (!ir::is_float(t)) {
    // Half the time small numbers (the interesting range for division and shifts).
    if (r() & 1) return V{0, norm(t, r() % 64 - 32)};
    return V{0, norm(t, r())};
  }
  // Random bit patterns reach every exponent; uniform values exercise ordinary arithmetic.
  if (r() & 1) return V{round_t(t, std::uniform_real_distribution<double>(-20, 20)(r)), 0};
  uint8_t b[8];
  const uint64_t x = r();
  std::memcpy(b, &x, 8);
  return load(t, b);
}

// ---- reference semantics (ir/ir.h)
// ------------------------------------------------------------------

// Float arithmetic "as if in f32 and rounded once" for f16/bf16; natively for f32 and f64.
double farith(ElemType t, OpKind op, double a, double b, double c) {
  if (t == ElemType::F64) {
    switch (op) {
      case OpKind::Add:
        return a + b;
      case OpKind::Sub:
        return a - b;
      case OpKind::Mul:
        return a * b;
      case OpKind::Div:
        return a / b;
      case OpKind::Rem:
        return std::fmod(a, b);
      case OpKind::Fma:
        return std::fma(a, b, c);
      case OpKind::Sqrt:
        return std::sqrt(a);
      case OpKind::Rsqrt:
        return 1.0 / std::sqrt(a);
      default:
        break;
    }
  }
  const float x = static_cast<float>(a), y = static_cast<float>(b), z = static_cast<float>(c);
  float r = 0;
  switch (op) {
    case OpKind::Add:
      r = x + y;
      break;
    case OpKind::Sub:
      r = x - y;
      break;
    case OpKind::Mul:
      r = x * y;
      break;
    case OpKind::Div:
      r = x / y;
      break;
    case OpKind::Rem:
      r = std::fmod(x, y);
      break;
    case OpKind::Fma:
      r = std::fma(x, y, z);
      break;
    case OpKind::Sqrt:
      r = std::sqrt(x);
      break;
    case OpKind::Rsqrt:
      r = 1.0f / std::sqrt(x);
      break;
    default:
      break;
  }
  return round_t(t, r);
}

// IEEE minimumNumber / maximumNumber: NaN only when both are NaN.
double fminmax(bool is_max, double a, double b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return is_max ? (a > b ? a : b) : (a < b ? a : b);
}

V cast_ref(ElemType from, ElemType to, V a) {
  V r;
  if (to == ElemType::Bool) {
    r.i = ir::is_float(from) ? (a.f != 0.0 || std::isnan(a.f)) : (a.i != 0);
    return r;
  }
  if (ir::is_float(to)) {
    if (ir::is_float(from))
      r.f = round_t(to, a.f);
    else if (from == ElemType::Bool)
      r.f = static_cast<double>(a.i);
    else if (ir::is_signed(from)) {
      const auto v = static_cast<int64_t>(a.i);
      r.f = to == ElemType::F32 ? static_cast<double>(static_cast<float>(v))
                                : round_t(to, static_cast<double>(v));
    } else {
      r.f = to == ElemType::F32 ? static_cast<double>(static_cast<float>(a.i))
                                : round_t(to, static_cast<double>(a.i));
    }
    return r;
  }
  if (ir::is_float(from)) {  // saturate toward zero, NaN -> 0
    if (std::isnan(a.f)) return r;
    const double t = std::trunc(a.f);
    const int w = bits(to);
    if (ir::is_signed(to)) {
      const double lo = -std::ldexp(1.0, w - 1), hi = std::ldexp(1.0, w - 1);
      const int64_t v = t <= lo   ? static_cast<int64_t>(norm(to, uint64_t{1} << (w - 1)))
                        : t >= hi ? static_cast<int64_t>(norm(to, (uint64_t{1} << (w - 1)) - 1))
                                  : static_cast<int64_t>(t);
      r.i = norm(to, static_cast<uint64_t>(v));
    } else {
      const double hi = std::ldexp(1.0, w);
      r.i = t <= 0 ? 0 : t >= hi ? mask(to) : static_cast<uint64_t>(t);
    }
    return r;
  }
  r.i = norm(to, a.i);  // int -> int: a.i already extended by the source's signedness
  return r;
}

V ref(OpKind op, ElemType t, ElemType rt, V a, V b, V c) {
  V r;
  const bool fl = ir::is_float(t), sg = ir::is_signed(t);
  const int w = bits(t);
  auto s = [&](V v) { return static_cast<int64_t>(v.i); };
  auto cmp = [&](V x, V y) {  // -1, 0, 1 by the type's order
    if (sg) return s(x) < s(y) ? -1 : s(x) > s(y) ? 1 : 0;
    return x.i < y.i ? -1 : x.i > y.i ? 1 : 0;
  };
  switch (op) {
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
      if (fl)
        r.f = farith(t, op, a.f, b.f, 0);
      else
        r.i = norm(t, op == OpKind::Add ? a.i + b.i : op == OpKind::Sub ? a.i - b.i : a.i * b.i);
      return r;
    case OpKind::Div:
    case OpKind::Rem: {
      const bool rem = op == OpKind::Rem;
      if (fl) {
        r.f = farith(t, op, a.f, b.f, 0);
      } else if (b.i == 0) {
        r.i = rem ? a.i : 0;
      } else if (sg && s(b) == -1) {
        r.i = rem ? 0 : norm(t, 0 - a.i);
      } else if (sg) {
        r.i = norm(t, static_cast<uint64_t>(rem ? s(a) % s(b) : s(a) / s(b)));
      } else {
        r.i = rem ? a.i % b.i : a.i / b.i;
      }
      return r;
    }
    case OpKind::Min:
    case OpKind::Max:
      if (fl)
        r.f = fminmax(op == OpKind::Max, a.f, b.f);
      else
        r = (cmp(a, b) < 0) == (op == OpKind::Min) ? a : b;
      return r;
    case OpKind::Clamp:
      r = ref(OpKind::Min, t, t, ref(OpKind::Max, t, t, a, b, {}), c, {});
      return r;
    case OpKind::Neg:
      if (fl)
        r.f = -a.f;
      else
        r.i = norm(t, 0 - a.i);
      return r;
    case OpKind::Abs:
      if (fl)
        r.f = std::fabs(a.f);
      else
        r.i = sg && s(a) < 0 ? norm(t, 0 - a.i) : a.i;
      return r;
    case OpKind::Fma:
    case OpKind::Sqrt:
    case OpKind::Rsqrt:
      r.f = farith(t, op, a.f, b.f, c.f);
      return r;
    case OpKind::Floor:
      r.f = std::floor(a.f);
      return r;
    case OpKind::Ceil:
      r.f = std::ceil(a.f);
      return r;
    case OpKind::Round:
      r.f = std::round(a.f);
      return r;
    case OpKind::Trunc:
      r.f = std::trunc(a.f);
      return r;
    case OpKind::And:
      r.i = norm(t, a.i & b.i);
      return r;
    case OpKind::Or:
      r.i = norm(t, a.i | b.i);
      return r;
    case OpKind::Xor:
      r.i = norm(t, a.i ^ b.i);
      return r;
    case OpKind::Not:
      r.i = norm(t, ~a.i);
      return r;
    case OpKind::Shl:
      r.i = norm(t, a.i << (b.i & static_cast<uint64_t>(w - 1)));
      return r;
    case OpKind::Shr: {
      const uint64_t n = b.i & static_cast<uint64_t>(w - 1);
      r.i = sg ? norm(t, static_cast<uint64_t>(s(a) >> n)) : (a.i & mask(t)) >> n;
      return r;
    }
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge: {
      bool v;
      if (fl) {
        const double x = a.f, y = b.f;
        v = op == OpKind::Eq   ? x == y
            : op == OpKind::Ne ? !(x == y)
            : op == OpKind::Lt ? x < y
            : op == OpKind::Le ? x <= y
            : op == OpKind::Gt ? x > y
                               : x >= y;
      } else {
        const int c2 = cmp(a, b);
        v = op == OpKind::Eq   ? c2 == 0
            : op == OpKind::Ne ? c2 != 0
            : op == OpKind::Lt ? c2 < 0
            : op == OpKind::Le ? c2 <= 0
            : op == OpKind::Gt ? c2 > 0
                               : c2 >= 0;
      }
      r.i = v;
      return r;
    }
    case OpKind::IsNan:
      r.i = std::isnan(a.f);
      return r;
    case OpKind::IsInf:
      r.i = std::isinf(a.f);
      return r;
    case OpKind::Cast:
      return cast_ref(t, rt, a);
    default:
      break;
  }
  FAIL("no reference for " << ir::op_name(op));
  return r;
}

bool same(ElemType t, V want, V got, OpKind op) {
  if (!ir::is_float(t)) return norm(t, want.i) == norm(t, got.i);
  if (std::isnan(want.f) || std::isnan(got.f)) return std::isnan(want.f) && std::isnan(got.f);
  if (want.f == 0 && got.f == 0 && (op == OpKind::Min || op == OpKind::Max || op == OpKind::Clamp))
    return true;  // which zero min(-0, +0) gives is unspecified
  return want.f == got.f && std::signbit(want.f) == std::signbit(got.f);
}

void check(ElemType t, int lanes, const std::vector<Case>& cases) {
  INFO("type " << ir::elem_name(t) << ", line width " << lanes);
  const ir::Kernel k = build(t, lanes, cases);
  auto compiled = test::compile_ir(k);
  const size_t n = kLines * static_cast<size_t>(lanes);
  const size_t es = static_cast<size_t>(ir::elem_bytes(t));
  const std::vector<V> e = edges(t);
  std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(n * es));
  std::vector<std::vector<V>> vin(3, std::vector<V>(n));
  for (size_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) {
      // Every pair of edge values meets; the rest is random.
      const size_t idx = a == 0 ? i : a == 1 ? i / e.size() : i * 7 + 3;
      V v = (i < e.size() * e.size() || (a == 0 && i < 2 * e.size())) ? e[idx % e.size()]
                                                                      : random_value(t);
      store(t, in[a].data() + i * es, v);
      vin[a][i] = load(t, in[a].data() + i * es);  // exactly what the kernel sees
    }
  std::vector<std::vector<uint8_t>> out;
  std::vector<HostArg> args;
  for (auto& buf : in) args.push_back(ArrayView{buf.data(), n});
  for (const Case& c : cases) {
    // Poisoned, so an unwritten element cannot pass.
    out.emplace_back(n * static_cast<size_t>(ir::elem_bytes(c.result)), uint8_t{0xA5});
    args.push_back(ArrayView{out.back().data(), n});
  }
  test::run(*compiled, {kLines / kCubeDim, 1, 1}, args);
  for (size_t j = 0; j < cases.size(); ++j) {
    const Case& c = cases[j];
    const size_t rs = static_cast<size_t>(ir::elem_bytes(c.result));
    int failures = 0;
    for (size_t i = 0; i < n && failures < 5 && c.op != OpKind::Select; ++i) {
      const V want = ref(c.op, t, c.result, vin[0][i], vin[1][i], vin[2][i]);
      const V got = load(c.result, out[j].data() + i * rs);
      if (!same(c.result, want, got, c.op)) {
        ++failures;
        FAIL_CHECK(ir::op_name(c.op)
                   << " -> " << ir::elem_name(c.result) << " of (" << show(t, vin[0][i]) << ", "
                   << show(t, vin[1][i]) << ", " << show(t, vin[2][i]) << "): want "
                   << show(c.result, want) << ", got " << show(c.result, got));
      }
    }
    if (c.op == OpKind::Select)
      for (size_t i = 0; i < n; ++i) {
        const bool cond = t == ElemType::Bool
                              ? vin[0][i].i != 0
                              : ref(OpKind::Lt, t, ElemType::Bool, vin[0][i], vin[1][i], {}).i != 0;
        const V want = cond ? vin[1][i] : vin[2][i];
        const V got = load(t, out[j].data() + i * rs);
        if (!same(t, want, got, OpKind::Select)) {
          FAIL_CHECK("select at " << i);
          break;
        }
      }
  }
}

}  // namespace

TEST_CASE("every arithmetic, bitwise, comparison and selection op on every type", "[cpu][ops]") {
  for (ElemType t : kAll)
    for (int lanes : {1, 8}) check(t, lanes, cases_for(t));
}

TEST_CASE("casts between every pair of types", "[cpu][ops][cast]") {
  for (ElemType from : kAll) {
    std::vector<Case> cases;
    for (ElemType to : kAll)
      if (to != from) cases.push_back({OpKind::Cast, to, 1});
    for (int lanes : {1, 4}) check(from, lanes, cases);
  }
}

TEST_CASE("bitcasts keep the bits", "[cpu][ops][cast]") {
  for (auto [from, to] : test::kBitcastPairs) {
    const ir::Kernel k = build(from, 4, {{OpKind::Bitcast, to, 1}});
    auto c = test::compile_ir(k);
    const size_t n = kLines * 4, es = static_cast<size_t>(ir::elem_bytes(from));
    std::vector<uint8_t> a(n * es), b2(n * es), c2(n * es), out(n * es, 0xA5);
    for (auto& x : a) x = static_cast<uint8_t>(test::rng()());
    std::vector<HostArg> args;
    for (auto* buf : {&a, &b2, &c2, &out}) args.push_back(ArrayView{buf->data(), n});
    test::run(*c, {kLines / kCubeDim, 1, 1}, args);
    CHECK(out == a);
  }
}
