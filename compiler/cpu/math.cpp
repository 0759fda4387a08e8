// Vectorized math by polynomial evaluation with range reduction.
//
//   exp, exp2  x = n ln2 + r, |r| <= ln2/2; Taylor polynomial of exp(r) (degree 7 for f32,
//              13 for f64); 2^n applied in two halves so results reach the denormals with one
//              rounding.
//   log, log2  x = 2^e m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1),
//              as an odd series in s (|s| <= 0.1716).
//   sin, cos   x = j pi/2 + r by a three-part pi/2 in double precision (f32 inputs are
//              computed in f64 and rounded); Taylor polynomials on |r| <= pi/4; the quadrant
//              picks the polynomial and the sign. Full accuracy for |x| < 1.6e6.
//   tanh       |x| < 0.55: e = expm1(2|x|) by its Taylor series, tanh = e / (e + 2); otherwise
//              1 - 2 / (exp(2|x|) + 1); the sign restored at the end.
//   pow        exp2(y log2|x|) in double-double precision (f32 computed in f64), with the C99
//              special cases (pow(x, 0) = 1, pow(1, y) = 1, signs of odd integer powers, ...).
// Every function takes and returns IEEE special values as C does (exp(-inf) = 0, log(0) =
// -inf, log(-1) = NaN, sin(inf) = NaN, ...).
#include "compiler/cpu/math.h"

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>

namespace kiln::cpu {

namespace {

using llvm::Value;

double factorial(int n) {
  double f = 1;
  for (int i = 2; i <= n; ++i) f *= i;
  return f;
}

class MathGen {
 public:
  MathGen(llvm::IRBuilder<>& b, llvm::Type* t) : B(b), T(t) {
    dbl = t->getScalarType()->isDoubleTy();
    bits = dbl ? 64 : 32;
    mant = dbl ? 52 : 23;
    bias = dbl ? 1023 : 127;
    IT = t->isVectorTy() ? llvm::VectorType::getInteger(llvm::cast<llvm::VectorType>(t))
                         : static_cast<llvm::Type*>(B.getIntNTy(bits));
  }

  Value* c(double v) { return llvm::ConstantFP::get(T, v); }
  Value* ci(int64_t v) { return llvm::ConstantInt::get(IT, static_cast<uint64_t>(v), true); }
  Value* fma(Value* a, Value* b, Value* c2) {
    return B.CreateIntrinsic(llvm::Intrinsic::fma, {T}, {a, b, c2});
  }
  Value* rint(Value* x) { return B.CreateUnaryIntrinsic(llvm::Intrinsic::rint, x); }
  Value* trunc(Value* x) { return B.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, x); }
  Value* fabs(Value* x) { return B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }
  Value* copysign(Value* mag, Value* sgn) {
    return B.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sgn);
  }
  Value* to_int(Value* x) {  // NaN -> 0, saturating
    return B.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {IT, T}, {x});
  }
  // An exponent n for scale(): clamped to +-2 bias (NaN to the low end) and converted, in
  // vector instructions (fptosi.sat becomes lane-by-lane code on x86). Callers select the
  // result for arguments outside the range, so the clamp never shows.
  Value* exponent_int(Value* n) {
    const double lim = 2.0 * bias;
    n = sel(B.CreateFCmpOGT(n, c(lim)), c(lim), n);
    n = sel(B.CreateFCmpULT(n, c(-lim)), c(-lim), n);
    return B.CreateFPToSI(n, IT);
  }
  Value* is_nan(Value* x) { return B.CreateFCmpUNO(x, x); }
  Value* sel(Value* c2, Value* a, Value* b) { return B.CreateSelect(c2, a, b); }
  // Horner: coefficients from the constant term up. fmuladd: fused where the CPU has FMA,
  // a multiply and an add where it has not (fma proper would become a libm call per lane).
  // The reductions, whose exactness needs the fused form, use fma().
  Value* poly(Value* x, const std::vector<double>& k) {
    Value* r = c(k.back());
    for (size_t i = k.size() - 1; i-- > 0;)
      r = B.CreateIntrinsic(llvm::Intrinsic::fmuladd, {T}, {r, x, c(k[i])});
    return r;
  }
  // (hi, lo) <- hi + lo exactly, with |lo| at most half an ulp of hi (needs |hi| >= |lo|).
  void two_sum_fast(Value*& hi, Value*& lo) {
    Value* s = B.CreateFAdd(hi, lo);
    lo = B.CreateFSub(lo, B.CreateFSub(s, hi));
    hi = s;
  }
  // 2^n for integer n within the normal exponent range.
  Value* pow2i(Value* n) {
    Value* e = B.CreateShl(B.CreateAdd(n, ci(bias)), ci(mant));
    return B.CreateBitCast(e, T);
  }
  // p * 2^n in two halves: each half stays a normal number, the product rounds once.
  Value* scale(Value* p, Value* n) {
    Value* n1 = B.CreateAShr(n, ci(1));
    Value* n2 = B.CreateSub(n, n1);
    return B.CreateFMul(B.CreateFMul(p, pow2i(n1)), pow2i(n2));
  }

  // exp(r) for |r| <= ln2/2 by its Taylor series.
  Value* exp_poly(Value* r) {
    std::vector<double> k;
    const int degree = dbl ? 13 : 7;
    for (int i = 0; i <= degree; ++i) k.push_back(1.0 / factorial(i));
    return poly(r, k);
  }
  double ln2_hi() const { return dbl ? 6.93147180369123816490e-01 : 0.693145751953125; }
  double ln2_lo() const { return dbl ? 1.90821492927058770002e-10 : 1.428606765330187045e-06; }
  double exp_hi() const { return dbl ? 709.782712893383973096 : 88.72283935546875; }
  double exp_lo() const { return dbl ? -745.1332191019412 : -103.97208404541015625; }

  Value* exp(Value* x) {
    Value* n = rint(B.CreateFMul(x, c(M_LOG2E)));
    Value* r = fma(B.CreateFNeg(n), c(ln2_hi()), x);
    r = fma(B.CreateFNeg(n), c(ln2_lo()), r);
    Value* res = scale(exp_poly(r), exponent_int(n));
    res = sel(B.CreateFCmpOGT(x, c(exp_hi())), c(INFINITY), res);
    res = sel(B.CreateFCmpOLT(x, c(exp_lo())), c(0.0), res);
    return sel(is_nan(x), x, res);
  }

  Value* exp2(Value* x) {
    Value* n = rint(x);
    Value* r = B.CreateFSub(x, n);  // exact
    Value* res = scale(exp_poly(B.CreateFMul(r, c(M_LN2))), exponent_int(n));
    res = sel(B.CreateFCmpOGE(x, c(dbl ? 1024.0 : 128.0)), c(INFINITY), res);
    res = sel(B.CreateFCmpOLT(x, c(dbl ? -1075.0 : -150.0)), c(0.0), res);
    return sel(is_nan(x), x, res);
  }

  // log(m) for m in [sqrt(1/2), sqrt(2)) and the exponent: x = 2^e m.
  struct Split {
    Value* m;
    Value* e;  // as a float
  };
  Split split(Value* x) {
    // Denormals: scale into the normal range first.
    const double tiny = dbl ? 2.2250738585072014e-308 : 1.17549435e-38;
    const int up = dbl ? 54 : 25;
    Value* small = B.CreateFCmpOLT(x, c(tiny));
    Value* xs = sel(small, B.CreateFMul(x, c(std::ldexp(1.0, up))), x);
    Value* adj = sel(small, c(-up), c(0.0));
    Value* ib = B.CreateBitCast(xs, IT);
    Value* e = B.CreateSub(B.CreateLShr(ib, ci(mant)), ci(bias));
    Value* mb =
        B.CreateOr(B.CreateAnd(ib, ci((int64_t{1} << mant) - 1)), ci(int64_t{bias} << mant));
    Value* m = B.CreateBitCast(mb, T);
    Value* big = B.CreateFCmpOGT(m, c(M_SQRT2));
    m = sel(big, B.CreateFMul(m, c(0.5)), m);
    Value* ef = B.CreateFAdd(B.CreateSIToFP(e, T), adj);
    ef = sel(big, B.CreateFAdd(ef, c(1.0)), ef);
    return {m, ef};
  }
  // log(m) = 2s + s * R(s^2).
  Value* log_m(Value* m) {
    Value* s = B.CreateFDiv(B.CreateFSub(m, c(1.0)), B.CreateFAdd(m, c(1.0)));
    Value* z = B.CreateFMul(s, s);
    std::vector<double> k;
    const int terms = dbl ? 10 : 4;
    for (int i = 1; i <= terms; ++i) k.push_back(2.0 / (2 * i + 1));
    // R(z) = z * (2/3 + 2z/5 + ...)
    Value* r = B.CreateFMul(z, poly(z, k));
    return fma(s, r, B.CreateFMul(s, c(2.0)));
  }
  Value* log_special(Value* x, Value* res) {
    res = sel(B.CreateFCmpOEQ(x, c(0.0)), c(-INFINITY), res);
    res = sel(B.CreateFCmpOEQ(x, c(INFINITY)), x, res);
    return sel(B.CreateFCmpULT(x, c(0.0)), c(NAN), res);  // negative or NaN
  }
  Value* log(Value* x) {
    Split sp = split(x);
    Value* lm = log_m(sp.m);
    Value* res = fma(sp.e, c(ln2_hi()), fma(sp.e, c(ln2_lo()), lm));
    return log_special(x, res);
  }
  Value* log2(Value* x) {
    Split sp = split(x);
    Value* res = fma(log_m(sp.m), c(M_LOG2E), sp.e);
    return log_special(x, res);
  }

  // sin or cos in double precision (this generator's type must be double).
  Value* sincos(Value* x, bool is_cos) {
    Value* j = rint(B.CreateFMul(x, c(M_2_PI)));
    Value* nj = B.CreateFNeg(j);
    Value* r = fma(nj, c(1.57079632673412561417e+00), x);
    r = fma(nj, c(6.07710050630396597660e-11), r);
    r = fma(nj, c(2.02226624871116645580e-21), r);
    Value* z = B.CreateFMul(r, r);
    std::vector<double> ks, kc;
    for (int i = 0; i <= 8; ++i) ks.push_back((i % 2 ? -1.0 : 1.0) / factorial(2 * i + 1));
    for (int i = 0; i <= 9; ++i) kc.push_back((i % 2 ? -1.0 : 1.0) / factorial(2 * i));
    Value* s = B.CreateFMul(r, poly(z, ks));
    Value* co = poly(z, kc);
    Value* q = to_int(j);
    if (is_cos) q = B.CreateAdd(q, ci(1));
    Value* swap = B.CreateICmpNE(B.CreateAnd(q, ci(1)), ci(0));
    Value* neg = B.CreateICmpNE(B.CreateAnd(q, ci(2)), ci(0));
    Value* v = sel(swap, co, s);
    v = sel(neg, B.CreateFNeg(v), v);
    if (!is_cos) v = sel(B.CreateFCmpOEQ(x, c(0.0)), x, v);  // sin(-0) = -0
    return v;
  }

  // expm1(y) for 0 <= y < 1.1 by its Taylor series.
  Value* expm1_small(Value* y) {
    std::vector<double> k;
    const int degree = dbl ? 19 : 11;
    for (int i = 1; i <= degree; ++i) k.push_back(1.0 / factorial(i));
    return B.CreateFMul(y, poly(y, k));
  }
  Value* tanh(Value* x) {
    Value* a = fabs(x);
    Value* y = B.CreateFMul(a, c(2.0));
    Value* e = expm1_small(y);
    Value* small = B.CreateFDiv(e, B.CreateFAdd(e, c(2.0)));
    Value* big = B.CreateFSub(c(1.0), B.CreateFDiv(c(2.0), B.CreateFAdd(exp(y), c(1.0))));
    Value* t = sel(B.CreateFCmpOLT(a, c(0.55)), small, big);
    t = sel(B.CreateFCmpOGE(a, c(dbl ? 19.1 : 9.01)), c(1.0), t);
    return copysign(t, x);
  }

  // pow in double precision (this generator's type must be double).
  Value* pow(Value* x, Value* y) {
    Value* a = fabs(x);
    Split sp = split(a);
    // log m in double-double: s = f / g with its remainder.
    Value* f = B.CreateFSub(sp.m, c(1.0));  // exact
    Value* g = B.CreateFAdd(sp.m, c(1.0));
    Value* gb = B.CreateFSub(g, sp.m);
    Value* g_lo = B.CreateFAdd(B.CreateFSub(sp.m, B.CreateFSub(g, gb)), B.CreateFSub(c(1.0), gb));
    Value* s = B.CreateFDiv(f, g);
    Value* s_lo = B.CreateFDiv(B.CreateFSub(fma(B.CreateFNeg(s), g, f), B.CreateFMul(s, g_lo)), g);
    Value* z = B.CreateFMul(s, s);
    std::vector<double> k;
    for (int i = 1; i <= 10; ++i) k.push_back(2.0 / (2 * i + 1));
    Value* tail = B.CreateFMul(B.CreateFMul(s, z), poly(z, k));
    Value* l_hi = B.CreateFMul(s, c(2.0));
    Value* l_lo = fma(s_lo, c(2.0), tail);
    two_sum_fast(l_hi, l_lo);  // the series tail is not small: fold it into the high word
    // log2(m) = (l_hi + l_lo) * log2(e), then + e.
    const double log2e_hi = 1.4426950408889634, log2e_lo = 2.0355273740931033e-17;
    Value* p = B.CreateFMul(l_hi, c(log2e_hi));
    Value* p_lo = B.CreateFAdd(fma(l_hi, c(log2e_hi), B.CreateFNeg(p)),
                               fma(l_hi, c(log2e_lo), B.CreateFMul(l_lo, c(log2e_hi))));
    Value* t_hi = B.CreateFAdd(sp.e, p);
    Value* t_lo = B.CreateFAdd(B.CreateFAdd(B.CreateFSub(sp.e, t_hi), p), p_lo);
    // w = y * log2|x|
    Value* w_hi = B.CreateFMul(y, t_hi);
    Value* w_lo = fma(y, t_lo, fma(y, t_hi, B.CreateFNeg(w_hi)));
    two_sum_fast(w_hi, w_lo);  // so that w_hi - rint(w_hi) + w_lo stays within [-1/2, 1/2]
    // 2^w
    Value* n = rint(w_hi);
    Value* r = B.CreateFAdd(B.CreateFSub(w_hi, n), w_lo);
    Value* core = scale(exp_poly(B.CreateFMul(r, c(M_LN2))), exponent_int(n));
    core = sel(B.CreateFCmpOGT(w_hi, c(1024.0)), c(INFINITY), core);
    core = sel(B.CreateFCmpOLT(w_hi, c(-1080.0)), c(0.0), core);
    // log2 of 0 and inf.
    core =
        sel(B.CreateFCmpOEQ(a, c(0.0)), sel(B.CreateFCmpOLT(y, c(0.0)), c(INFINITY), c(0.0)), core);
    core = sel(B.CreateFCmpOEQ(a, c(INFINITY)),
               sel(B.CreateFCmpOLT(y, c(0.0)), c(0.0), c(INFINITY)), core);
    Value* inf_y = B.CreateFCmpOEQ(fabs(y), c(INFINITY));
    core = sel(inf_y,
               sel(B.CreateFCmpOEQ(a, c(1.0)), c(1.0),
                   sel(B.CreateXor(B.CreateFCmpOLT(a, c(1.0)), B.CreateFCmpOLT(y, c(0.0))), c(0.0),
                       c(INFINITY))),
               core);
    // The sign of x: odd integer powers keep it; non-integer powers of negatives are NaN.
    Value* finite_y = B.CreateFCmpONE(fabs(y), c(INFINITY));
    Value* is_int = B.CreateAnd(B.CreateFCmpOEQ(trunc(y), y), finite_y);
    Value* half = B.CreateFMul(y, c(0.5));
    Value* odd = B.CreateAnd(is_int, B.CreateFCmpONE(trunc(half), half));
    Value* neg_x = B.CreateICmpSLT(B.CreateBitCast(x, IT), ci(0));
    Value* res = sel(B.CreateAnd(neg_x, odd), B.CreateFNeg(core), core);
    Value* finite_neg = B.CreateAnd(B.CreateFCmpOLT(x, c(0.0)), B.CreateFCmpONE(x, c(-INFINITY)));
    res = sel(B.CreateAnd(finite_neg, B.CreateAnd(finite_y, B.CreateNot(is_int))), c(NAN), res);
    res = sel(B.CreateOr(is_nan(x), is_nan(y)), c(NAN), res);
    Value* one = B.CreateOr(B.CreateFCmpOEQ(y, c(0.0)), B.CreateFCmpOEQ(x, c(1.0)));
    return sel(one, c(1.0), res);
  }

 private:
  llvm::IRBuilder<>& B;
  llvm::Type* T;
  llvm::Type* IT;
  bool dbl;
  int bits, mant, bias;
};

std::string type_suffix(llvm::Type* t) {
  std::string s = t->getScalarType()->isDoubleTy() ? "f64" : "f32";
  if (auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t))
    s = fmt::format("v{}{}", v->getNumElements(), s);
  return s;
}

}  // namespace

llvm::Value* emit_math(llvm::IRBuilder<>& b, llvm::Module& m, ir::OpKind op, llvm::Value* x,
                       llvm::Value* y) {
  llvm::Type* t = x->getType();
  const std::string name = fmt::format("kiln.math.{}.{}", ir::op_name(op), type_suffix(t));
  llvm::Function* f = m.getFunction(name);
  if (!f) {
    const bool binary = op == ir::OpKind::Pow;
    std::vector<llvm::Type*> params(binary ? 2 : 1, t);
    f = llvm::Function::Create(llvm::FunctionType::get(t, params, false),
                               llvm::Function::InternalLinkage, name, m);
    f->addFnAttr(llvm::Attribute::AlwaysInline);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    f->setDoesNotAccessMemory();
    // Same target attributes as the kernel, so the inliner accepts it.
    if (llvm::Function* caller = b.GetInsertBlock()->getParent()) {
      for (const char* a :
           {"target-cpu", "target-features", "prefer-vector-width", "min-legal-vector-width"})
        if (caller->hasFnAttribute(a)) f->addFnAttr(caller->getFnAttribute(a));
    }
    auto* bb = llvm::BasicBlock::Create(m.getContext(), "entry", f);
    llvm::IRBuilder<> fb(bb);
    llvm::Value* a = f->getArg(0);
    llvm::Value* r = nullptr;
    const bool is_double = t->getScalarType()->isDoubleTy();
    // sin, cos and pow run in double precision; f32 converts in and out.
    auto via_double = [&](auto&& fn) -> llvm::Value* {
      if (is_double) {
        MathGen g(fb, t);
        return fn(g, a, binary ? f->getArg(1) : nullptr);
      }
      llvm::Type* dt =
          t->isVectorTy()
              ? static_cast<llvm::Type*>(llvm::VectorType::get(
                    fb.getDoubleTy(), llvm::cast<llvm::VectorType>(t)->getElementCount()))
              : fb.getDoubleTy();
      MathGen g(fb, dt);
      llvm::Value* da = fb.CreateFPExt(a, dt);
      llvm::Value* db = binary ? fb.CreateFPExt(f->getArg(1), dt) : nullptr;
      return fb.CreateFPTrunc(fn(g, da, db), t);
    };
    MathGen g(fb, t);
    switch (op) {
      case ir::OpKind::Exp:
        r = g.exp(a);
        break;
      case ir::OpKind::Exp2:
        r = g.exp2(a);
        break;
      case ir::OpKind::Log:
        r = g.log(a);
        break;
      case ir::OpKind::Log2:
        r = g.log2(a);
        break;
      case ir::OpKind::Tanh:
        r = g.tanh(a);
        break;
      case ir::OpKind::Sin:
        r = via_double(
            [](MathGen& mg, llvm::Value* p, llvm::Value*) { return mg.sincos(p, false); });
        break;
      case ir::OpKind::Cos:
        r = via_double(
            [](MathGen& mg, llvm::Value* p, llvm::Value*) { return mg.sincos(p, true); });
        break;
      case ir::OpKind::Pow:
        r = via_double([](MathGen& mg, llvm::Value* p, llvm::Value* q) { return mg.pow(p, q); });
        break;
      default:
        KILN_CHECK(false, "emit_math: not a math function");
    }
    fb.CreateRet(r);
  }
  return y ? b.CreateCall(f, {x, y}) : b.CreateCall(f, {x});
}

}  // namespace kiln::cpu
