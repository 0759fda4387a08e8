// Lowered kiln IR -> LLVM IR: the entry point, and the code of each op (arithmetic,
// conversions, print and assert, atomics, the op switch). The generator's class, its regions,
// loops and memory are in compiler/cpu/gen.h; its vector mode in compiler/cpu/vectorize.cpp and
// compiler/cpu/vectorize_memory.cpp.
#include "compiler/cpu/codegen.h"

#include "compiler/cpu/gen.h"
#include "ir/printer.h"

namespace kiln::cpu {

namespace detail {

// ---- arithmetic, conversions, print and assert, atomics, and the scalar op switch ----------

Value* Gen::binary(const ir::Op& op) {
  const ir::Type& t = type(op.operands[0]);
  Value* a = v(op.operands[0]);
  Value* b = v(op.operands[1]);
  const bool fl = ir::is_float(t.elem);
  const bool sgn = ir::is_signed(t.elem);
  if (fl) {
    Value* x = promote(a, t);
    Value* y = promote(b, t);
    Value* r = nullptr;
    switch (op.kind) {
      case OpKind::Add:
        r = B.CreateFAdd(x, y);
        break;
      case OpKind::Sub:
        r = B.CreateFSub(x, y);
        break;
      case OpKind::Mul:
        r = B.CreateFMul(x, y);
        break;
      case OpKind::Div:
        r = B.CreateFDiv(x, y);
        break;
      case OpKind::Rem:
        r = B.CreateFRem(x, y);
        break;
      case OpKind::Pow:
        r = emit_math(B, M, OpKind::Pow, x, y);
        break;
      default:
        KILN_CHECK(false, "not a float binary op");
    }
    return demote(r, t);
  }
  switch (op.kind) {
    case OpKind::Add:
      return B.CreateAdd(a, b);
    case OpKind::Sub:
      return B.CreateSub(a, b);
    case OpKind::Mul:
      return B.CreateMul(a, b);
    case OpKind::Div:
      return int_div(sgn, a, b, false);
    case OpKind::Rem:
      return int_div(sgn, a, b, true);
    case OpKind::And:
      return B.CreateAnd(a, b);
    case OpKind::Or:
      return B.CreateOr(a, b);
    case OpKind::Xor:
      return B.CreateXor(a, b);
    case OpKind::Shl:
      return shift(true, sgn, a, b);
    case OpKind::Shr:
      return shift(false, sgn, a, b);
    default:
      KILN_CHECK(false, "not an integer binary op");
  }
  return nullptr;
}

Value* Gen::compare(const ir::Op& op) {
  const ir::Type& t = type(op.operands[0]);
  Value* a = v(op.operands[0]);
  Value* b = v(op.operands[1]);
  using P = llvm::CmpInst::Predicate;
  if (ir::is_float(t.elem)) {
    a = promote(a, t);
    b = promote(b, t);
    P p = P::FCMP_OEQ;
    switch (op.kind) {
      case OpKind::Eq:
        p = P::FCMP_OEQ;
        break;
      case OpKind::Ne:
        p = P::FCMP_UNE;
        break;  // true when either is NaN
      case OpKind::Lt:
        p = P::FCMP_OLT;
        break;
      case OpKind::Le:
        p = P::FCMP_OLE;
        break;
      case OpKind::Gt:
        p = P::FCMP_OGT;
        break;
      default:
        p = P::FCMP_OGE;
        break;
    }
    return B.CreateFCmp(p, a, b);
  }
  const bool sgn = ir::is_signed(t.elem);
  P p = P::ICMP_EQ;
  switch (op.kind) {
    case OpKind::Eq:
      p = P::ICMP_EQ;
      break;
    case OpKind::Ne:
      p = P::ICMP_NE;
      break;
    case OpKind::Lt:
      p = sgn ? P::ICMP_SLT : P::ICMP_ULT;
      break;
    case OpKind::Le:
      p = sgn ? P::ICMP_SLE : P::ICMP_ULE;
      break;
    case OpKind::Gt:
      p = sgn ? P::ICMP_SGT : P::ICMP_UGT;
      break;
    default:
      p = sgn ? P::ICMP_SGE : P::ICMP_UGE;
      break;
  }
  return B.CreateICmp(p, a, b);
}

Value* Gen::unary(const ir::Op& op) {
  const ir::Type& t = type(op.operands[0]);
  Value* a = v(op.operands[0]);
  if (ir::is_float(t.elem)) {
    Value* x = promote(a, t);
    Value* r = nullptr;
    switch (op.kind) {
      case OpKind::Neg:
        r = B.CreateFNeg(x);
        break;
      case OpKind::Abs:
        r = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
        break;
      case OpKind::Sqrt:
        r = B.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
        break;
      case OpKind::Rsqrt:
        r = B.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0),
                         B.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
        break;
      case OpKind::Floor:
        r = B.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
        break;
      case OpKind::Ceil:
        r = B.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
        break;
      case OpKind::Round:
        r = B.CreateUnaryIntrinsic(llvm::Intrinsic::round, x);
        break;
      case OpKind::Trunc:
        r = B.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, x);
        break;
      default:
        r = emit_math(B, M, op.kind, x, nullptr);
        break;  // exp, log, sin, ...
    }
    return demote(r, t);
  }
  switch (op.kind) {
    case OpKind::Neg:
      return B.CreateNeg(a);
    case OpKind::Abs:  // unsigned values are their own absolute value
      return ir::is_signed(t.elem) ? B.CreateBinaryIntrinsic(llvm::Intrinsic::abs, a, B.getFalse())
                                   : a;
    case OpKind::Not:
      return B.CreateNot(a);
    default:
      KILN_CHECK(false, "not an integer unary op");
  }
  return nullptr;
}

// A double rounded to f32 toward zero, with the last bit set when inexact ("round to odd").
// Rounding that to f16/bf16 then gives the correctly rounded result (f32 has more than two
// bits more than either), where plain f64 -> f32 -> 16-bit would round twice.
Value* Gen::round_to_odd_f32(Value* x, int lanes) {
  llvm::Type* f32 = vec(B.getFloatTy(), lanes);
  llvm::Type* i32 = vec(B.getInt32Ty(), lanes);
  Value* y = B.CreateFPTrunc(x, f32);
  Value* ax = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* ay = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, B.CreateFPExt(y, x->getType()));
  Value* bits = B.CreateBitCast(y, i32);
  bits = B.CreateSelect(B.CreateFCmpOGT(ay, ax), B.CreateSub(bits, llvm::ConstantInt::get(i32, 1)),
                        bits);
  Value* back = B.CreateFPExt(B.CreateBitCast(bits, f32), x->getType());
  Value* inexact = B.CreateZExt(B.CreateFCmpUNE(back, x), i32);
  return B.CreateBitCast(B.CreateOr(bits, inexact), f32);
}

// float -> int for vectors: x86 converts vectors only within the target's range, and LLVM
// expands fptosi.sat/fptoui.sat on vectors lane by lane with branches. Clamp into the range,
// convert, then put in the saturated ends and NaN -> 0 with selects.
Value* Gen::saturating_cast(Value* x, llvm::Type* dst, bool sgn) {
  const unsigned bits = dst->getScalarSizeInBits();
  llvm::Type* ft = x->getType();
  const double lo = sgn ? -std::ldexp(1.0, static_cast<int>(bits) - 1) : 0.0;
  const double hi = std::ldexp(1.0, static_cast<int>(bits) - (sgn ? 1 : 0));  // exclusive
  Value* at_hi = B.CreateFCmpOGE(x, llvm::ConstantFP::get(ft, hi));
  Value* c = B.CreateSelect(B.CreateFCmpOGT(x, llvm::ConstantFP::get(ft, lo)), x,
                            llvm::ConstantFP::get(ft, lo));  // NaN -> lo, fixed below
  c = B.CreateSelect(at_hi, llvm::ConstantFP::get(ft, 0.0), c);
  Value* r = sgn ? B.CreateFPToSI(c, dst) : B.CreateFPToUI(c, dst);
  const llvm::APInt max =
      sgn ? llvm::APInt::getSignedMaxValue(bits) : llvm::APInt::getMaxValue(bits);
  r = B.CreateSelect(at_hi, llvm::ConstantInt::get(dst, max), r);
  return B.CreateSelect(B.CreateFCmpUNO(x, x), llvm::Constant::getNullValue(dst), r);
}

Value* Gen::cast(const ir::Op& op) {
  const ir::Type& from = type(op.operands[0]);
  const ir::Type& to = type(op.result);
  Value* a = v(op.operands[0]);
  llvm::Type* dst = ty(to);
  const bool ff = ir::is_float(from.elem), tf = ir::is_float(to.elem);
  if (from.elem == to.elem) return a;
  if (to.elem == ElemType::Bool) {  // x != 0 (NaN != 0 is true)
    if (ff) {
      Value* x = promote(a, from);
      return B.CreateFCmpUNE(x, llvm::Constant::getNullValue(x->getType()));
    }
    return B.CreateICmpNE(a, llvm::Constant::getNullValue(a->getType()));
  }
  if (from.elem == ElemType::Bool) {
    if (!tf) return B.CreateZExt(a, dst);
    return demote(B.CreateUIToFP(a, compute_ty(to)), to);  // 0 and 1 are exact everywhere
  }
  if (ff && tf) {
    Value* x = a;
    if (is_half(from.elem)) x = promote(x, from);  // exact
    if (is_half(to.elem) && x->getType()->getScalarType()->isDoubleTy())
      x = round_to_odd_f32(x, from.lanes);
    if (to.elem == ElemType::BF16) return to_bf16(x, to.lanes);
    if (ir::is_f8(to.elem))
      return to_f8(B.CreateFPCast(x, vec(B.getFloatTy(), to.lanes)), to.elem, to.lanes);
    return B.CreateFPCast(x, dst);
  }
  if (ff) {  // float -> int: round toward zero, saturate, NaN -> 0
    Value* x = promote(a, from);
    if (x->getType()->isVectorTy()) return saturating_cast(x, dst, ir::is_signed(to.elem));
    return B.CreateIntrinsic(
        ir::is_signed(to.elem) ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat,
        {dst, x->getType()}, {x});
  }
  if (tf) {  // int -> float, rounded once
    const bool sgn = ir::is_signed(from.elem);
    if (to.elem == ElemType::BF16) {
      // Exact in f64 for every integer up to 2^53, then round to odd in f32.
      llvm::Type* d = vec(B.getDoubleTy(), from.lanes);
      Value* f = sgn ? B.CreateSIToFP(a, d) : B.CreateUIToFP(a, d);
      return to_bf16(round_to_odd_f32(f, from.lanes), to.lanes);
    }
    if (to.elem == ElemType::F16 || ir::is_f8(to.elem)) {
      // Through f32: exact below 2^24, and every larger integer is infinite in f16 (or
      // saturates in f8).
      llvm::Type* mid = vec(B.getFloatTy(), from.lanes);
      Value* f = sgn ? B.CreateSIToFP(a, mid) : B.CreateUIToFP(a, mid);
      return ir::is_f8(to.elem) ? to_f8(f, to.elem, to.lanes) : B.CreateFPTrunc(f, dst);
    }
    return sgn ? B.CreateSIToFP(a, dst) : B.CreateUIToFP(a, dst);
  }
  return B.CreateIntCast(a, dst, ir::is_signed(from.elem));  // int -> int
}

void Gen::emit_print(const ir::Op& op) {
  PrintSite site;
  site.format = op.attr.s;
  site.where = K.loc_string(op.loc);
  uint32_t total = 0;
  for (ValueId x : op.operands) {
    site.operands.push_back(type(x));
    total += type(x).lanes;
  }
  const uint32_t id = static_cast<uint32_t>(info_.prints.size());
  info_.prints.push_back(std::move(site));
  llvm::AllocaInst* buf =
      entry_alloca(B.getInt64Ty(), B.getInt32(std::max<uint32_t>(total, 1)), "print.buf");
  uint32_t at = 0;
  for (ValueId x : op.operands) {
    const ir::Type& t = type(x);
    Value* val = v(x);
    for (int l = 0; l < t.lanes; ++l, ++at) {
      Value* lane = t.lanes == 1 ? val : B.CreateExtractElement(val, static_cast<uint64_t>(l));
      B.CreateStore(lane_bits(lane, t.elem), B.CreateConstInBoundsGEP1_32(B.getInt64Ty(), buf, at));
    }
  }
  auto callee = M.getOrInsertFunction(
      "kiln_rt_print", llvm::FunctionType::get(B.getVoidTy(),
                                               {B.getPtrTy(), B.getInt32Ty(), B.getInt32Ty(),
                                                B.getInt32Ty(), B.getPtrTy(), B.getInt32Ty()},
                                               false));
  B.CreateCall(callee, {state_, B.getInt32(id), cube_, unit_or_zero(), buf, B.getInt32(total)});
}

void Gen::emit_assert(const ir::Op& op) {
  const uint32_t id = static_cast<uint32_t>(info_.asserts.size());
  info_.asserts.push_back(AssertSite{op.attr.s, K.loc_string(op.loc)});
  auto* fail = llvm::BasicBlock::Create(C, "assert.fail", F);
  auto* cont = llvm::BasicBlock::Create(C, "assert.ok", F);
  B.CreateCondBr(v(op.operands[0]), cont, fail);
  B.SetInsertPoint(fail);
  auto callee = M.getOrInsertFunction(
      "kiln_rt_assert_failed",
      llvm::FunctionType::get(
          B.getVoidTy(), {B.getPtrTy(), B.getInt32Ty(), B.getInt32Ty(), B.getInt32Ty()}, false));
  B.CreateCall(callee, {state_, B.getInt32(id), cube_, unit_or_zero()});
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
}

Value* Gen::atomic(const ir::Op& op) {
  const ir::Type& t = type(op.operands[0]);
  if (t.kind == ir::TypeKind::Shared || t.kind == ir::TypeKind::Local) return plain_atomic(op);
  Value* p = element_ptr(op.operands[0], v(op.operands[1]));
  const auto order = llvm::AtomicOrdering::Monotonic;
  const llvm::MaybeAlign al = align_of(t);
  if (op.kind == OpKind::AtomicCas) {
    auto* cx = B.CreateAtomicCmpXchg(p, v(op.operands[2]), v(op.operands[3]), al, order, order);
    return B.CreateExtractValue(cx, 0);
  }
  using Bin = llvm::AtomicRMWInst::BinOp;
  const bool fl = ir::is_float(t.elem), sgn = ir::is_signed(t.elem);
  Bin bop = Bin::Xchg;
  switch (op.kind) {
    case OpKind::AtomicAdd:
      bop = fl ? Bin::FAdd : Bin::Add;
      break;
    case OpKind::AtomicMin:
      bop = sgn ? Bin::Min : Bin::UMin;
      break;
    case OpKind::AtomicMax:
      bop = sgn ? Bin::Max : Bin::UMax;
      break;
    default:
      bop = Bin::Xchg;
      break;
  }
  return B.CreateAtomicRMW(bop, p, v(op.operands[2]), al, order);
}

// Shared and local memory belong to one cube, and a cube's units run one after another on
// one thread: their atomics need no atomic instructions.
Value* Gen::plain_atomic(const ir::Op& op) {
  const ir::Type& t = type(op.operands[0]);
  Value* p = element_ptr(op.operands[0], v(op.operands[1]));
  llvm::Type* et = mem_ty(t);
  Value* old = B.CreateAlignedLoad(et, p, align_of(t));
  Value* x = v(op.operands[2]);
  const bool fl = ir::is_float(t.elem), sgn = ir::is_signed(t.elem);
  Value* now = nullptr;
  switch (op.kind) {
    case OpKind::AtomicAdd:
      now = fl ? B.CreateFAdd(old, x) : B.CreateAdd(old, x);
      break;
    case OpKind::AtomicMin:
      now = fl ? B.CreateMinNum(old, x)
               : B.CreateSelect(sgn ? B.CreateICmpSLT(x, old) : B.CreateICmpULT(x, old), x, old);
      break;
    case OpKind::AtomicMax:
      now = fl ? B.CreateMaxNum(old, x)
               : B.CreateSelect(sgn ? B.CreateICmpSGT(x, old) : B.CreateICmpUGT(x, old), x, old);
      break;
    case OpKind::AtomicExchange:
      now = x;
      break;
    case OpKind::AtomicCas: {
      Value* same =
          fl ? B.CreateICmpEQ(B.CreateBitCast(old, B.getIntNTy(et->getPrimitiveSizeInBits())),
                              B.CreateBitCast(x, B.getIntNTy(et->getPrimitiveSizeInBits())))
             : B.CreateICmpEQ(old, x);
      now = B.CreateSelect(same, v(op.operands[3]), old);
      break;
    }
    default:
      KILN_CHECK(false, "not an atomic op");
  }
  B.CreateAlignedStore(now, p, align_of(t));
  return old;
}

// Ops that only compute values: constants, builtins, arithmetic, math, casts and lanes. False
// when `op` is not one of them.
bool Gen::emit_value(const ir::Op& op) {
  switch (op.kind) {
    case OpKind::Const:
      set(op.result, constant(op));
      return true;
    case OpKind::CubePos:
      set(op.result, cube_pos_[op.attr.i]);
      return true;
    case OpKind::CubeCount:
      set(op.result, cube_count_[op.attr.i]);
      return true;
    case OpKind::CubeDim: {
      const uint32_t d = op.attr.i == 0 ? K.units_per_cube() : K.cube_dim[op.attr.i - 1];
      set(op.result, B.getInt32(d));
      return true;
    }
    case OpKind::PlaneDim:
      set(op.result, B.getInt32(32));
      return true;
    case OpKind::ClusterRank: {
      // x % cx + (y % cy) cx + (z % cz) cx cy: clusters tile the grid from cube (0, 0, 0).
      const auto& d = K.cluster_dim;
      Value* r = B.getInt32(0);
      uint32_t scale = 1;
      for (int a = 0; a < 3; ++a) {
        if (d[a] > 1)
          r = B.CreateAdd(
              r, B.CreateMul(B.CreateURem(cube_pos_[a + 1], B.getInt32(d[a])), B.getInt32(scale)));
        scale *= d[a];
      }
      set(op.result, r);
      return true;
    }
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
    case OpKind::Rem:
    case OpKind::And:
    case OpKind::Or:
    case OpKind::Xor:
    case OpKind::Shl:
    case OpKind::Shr:
    case OpKind::Pow:
      set(op.result, binary(op));
      return true;
    case OpKind::Min:
    case OpKind::Max:
      set(op.result,
          minmax(op.kind == OpKind::Max, type(op.result), v(op.operands[0]), v(op.operands[1])));
      return true;
    case OpKind::Clamp: {
      const ir::Type& t = type(op.result);
      set(op.result, minmax(false, t, minmax(true, t, v(op.operands[0]), v(op.operands[1])),
                            v(op.operands[2])));
      return true;
    }
    case OpKind::Fma: {
      const ir::Type& t = type(op.result);
      Value* r = B.CreateIntrinsic(llvm::Intrinsic::fma, {compute_ty(t)},
                                   {promote(v(op.operands[0]), t), promote(v(op.operands[1]), t),
                                    promote(v(op.operands[2]), t)});
      set(op.result, demote(r, t));
      return true;
    }
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge:
      set(op.result, compare(op));
      return true;
    case OpKind::Select:
      set(op.result, B.CreateSelect(v(op.operands[0]), v(op.operands[1]), v(op.operands[2])));
      return true;
    case OpKind::Cast:
      set(op.result, cast(op));
      return true;
    case OpKind::Bitcast:
      set(op.result, B.CreateBitCast(v(op.operands[0]), ty(type(op.result))));
      return true;
    case OpKind::Broadcast:
      set(op.result, B.CreateVectorSplat(type(op.result).lanes, v(op.operands[0])));
      return true;
    case OpKind::Extract: {
      Value* x = v(op.operands[0]);
      set(op.result, type(op.operands[0]).lanes == 1 ? x : B.CreateExtractElement(x, op.attr.i));
      return true;
    }
    case OpKind::Insert: {
      Value* x = v(op.operands[0]);
      set(op.result, type(op.operands[0]).lanes == 1
                         ? v(op.operands[1])
                         : B.CreateInsertElement(x, v(op.operands[1]), op.attr.i));
      return true;
    }
    case OpKind::IsNan: {
      const ir::Type& t = type(op.operands[0]);
      Value* x = promote(v(op.operands[0]), t);
      set(op.result, B.CreateFCmpUNO(x, x));
      return true;
    }
    case OpKind::IsInf: {
      const ir::Type& t = type(op.operands[0]);
      Value* x = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, promote(v(op.operands[0]), t));
      set(op.result, B.CreateFCmpOEQ(x, llvm::ConstantFP::getInfinity(x->getType())));
      return true;
    }
    case OpKind::Neg:
    case OpKind::Abs:
    case OpKind::Not:
    case OpKind::Sqrt:
    case OpKind::Rsqrt:
    case OpKind::Exp:
    case OpKind::Exp2:
    case OpKind::Log:
    case OpKind::Log2:
    case OpKind::Sin:
    case OpKind::Cos:
    case OpKind::Tanh:
    case OpKind::Floor:
    case OpKind::Ceil:
    case OpKind::Round:
    case OpKind::Trunc:
      set(op.result, unary(op));
      return true;
    default:
      return false;
  }
}

// Ops of one unit, in scalar form: emit_value's ops, else memory, control flow and effects.
void Gen::emit_scalar(const ir::Op& op) {
  if (!emit_value(op)) emit_effect(op);
}

// Memory, variables, atomics, control flow, prints and asserts, and the ops the CPU runs once
// per cube or plane (fragments, wgmma, tcgen05, TMA).
void Gen::emit_effect(const ir::Op& op) {
  if (ir::is_cube_op(op.kind)) return cube_op(op);
  switch (op.kind) {
    case OpKind::AllocShared:
    case OpKind::AllocFrag:
      return;  // placed up front
    case OpKind::FragMem: {
      // The fragment's copies, as the shared array they are.
      Mem m;
      m.base = v(op.operands[0]);
      m.len = m.extent = B.getInt32(type(op.result).count);
      mem_[op.result] = std::move(m);
      frag_mems_.insert(op.result);
      return;
    }
    case OpKind::FragPlane:
    case OpKind::FragFill:
    case OpKind::FragLoad:
    case OpKind::FragLdmatrix:
    case OpKind::FragStore:
    case OpKind::FragMma:
    case OpKind::FragCast:
    case OpKind::FragMmaScaled:
    case OpKind::WgmmaDesc:
    case OpKind::Wgmma:
      emit_frag(op);
      return;
    case OpKind::WgmmaFence:
    case OpKind::WgmmaCommit:
    case OpKind::WgmmaWait:
      return;  // a multiply is done when it returns on the CPU
    case OpKind::Tcgen05Desc:
      tcgen05_desc(op);
      return;
    case OpKind::TmemRead:
      tmem_read(op);
      return;
    case OpKind::AsyncCopy:
      copy_async(op);
      return;
    case OpKind::AsyncCommit:
    case OpKind::AsyncWait:
      return;  // a copy is done when it is issued on the CPU
    case OpKind::AllocLocal: {
      const ir::Type& t = type(op.result);
      Mem m;
      m.base = entry_alloca(mem_scalar_ty(t.elem), B.getInt32(t.count * t.lanes),
                            fmt::format("local{}", op.result));
      m.len = m.extent = B.getInt32(t.count);
      mem_[op.result] = std::move(m);
      return;
    }
    case OpKind::Len:
      set(op.result, mem_.at(op.operands[0]).len);
      return;
    case OpKind::Shape:
      set(op.result, mem_.at(op.operands[0]).shape.at(op.attr.i));
      return;
    case OpKind::Stride:
      set(op.result, mem_.at(op.operands[0]).stride.at(op.attr.i));
      return;
    case OpKind::ClusterLoad:
      cluster_load(op);
      return;
    case OpKind::Load:
      set(op.result, checked(op, op.operands[0], v(op.operands[1]), ty(type(op.result)),
                             [&] { return load(op.operands[0], v(op.operands[1])); }));
      return;
    case OpKind::Store:
      checked(op, op.operands[0], v(op.operands[1]), nullptr, [&]() -> Value* {
        store(op.operands[0], v(op.operands[1]), v(op.operands[2]));
        return nullptr;
      });
      return;
    case OpKind::Var: {
      llvm::AllocaInst* a =
          entry_alloca(ty(type(op.operands[0])), nullptr, fmt::format("var{}", op.result));
      vars_[op.result] = a;
      B.CreateStore(v(op.operands[0]), a);
      return;
    }
    case OpKind::VarRead: {
      llvm::AllocaInst* a = vars_.at(op.operands[0]);
      set(op.result, B.CreateLoad(a->getAllocatedType(), a));
      return;
    }
    case OpKind::VarWrite:
      B.CreateStore(v(op.operands[1]), vars_.at(op.operands[0]));
      return;
    case OpKind::AtomicAdd:
    case OpKind::AtomicMin:
    case OpKind::AtomicMax:
    case OpKind::AtomicExchange:
    case OpKind::AtomicCas:
      set(op.result, checked(op, op.operands[0], v(op.operands[1]), ty(type(op.result)),
                             [&] { return atomic(op); }));
      return;
    case OpKind::If:
      emit_if(op);
      return;
    case OpKind::For:
      emit_for(op);
      return;
    case OpKind::Loop:
      emit_loop(op);
      return;
    case OpKind::Units:
      emit_units(op);
      return;
    case OpKind::Break:
    case OpKind::Continue:
    case OpKind::Return:
      emit_jump(op);
      return;
    case OpKind::Print:
      emit_print(op);
      return;
    case OpKind::Assert:
      emit_assert(op);
      return;
    // Unit-loop lowering (passes/unit_loops.h) replaces the unit ops, barriers and plane ops
    // with loops, context arrays and the plane exchange (and lower_pipeline.h a pipeline with
    // its in-order loop); a lowered kernel that still has one is a bug of those passes. Value
    // ops are emit_value's.
    default:
      KILN_CHECK(false, "unit ops, barriers and plane ops are gone after unit-loop lowering");
      return;
  }
}

}  // namespace detail

Result<GeneratedModule> generate(llvm::LLVMContext& ctx, const ir::Kernel& lowered,
                                 const CompileOptions& opts) {
  GeneratedModule g;
  g.module = std::make_unique<llvm::Module>(fmt::format("kiln.{}", lowered.name), ctx);
  g.module->setTargetTriple(llvm::Triple(opts.target.triple));
  g.info.name = lowered.name;
  g.info.cube_dim = lowered.cube_dim;
  g.info.cluster_dim = lowered.cluster_dim;
  g.info.checked = opts.checked;
  // A symbol unique per kernel text, so kernels of one name in different specializations never
  // collide in the JIT.
  const std::string text = ir::print(lowered);
  g.info.symbol = fmt::format("kiln_{}_{:016x}{}", lowered.name, std::hash<std::string>{}(text),
                              opts.checked ? "_checked" : "");
  detail::Gen gen(ctx, *g.module, lowered, opts, g.info);
  KILN_TRY(gen.run());
  return g;
}

}  // namespace kiln::cpu
