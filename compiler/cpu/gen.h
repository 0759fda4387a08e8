// The code generator's class (internal to compiler/cpu): lowered kiln IR -> LLVM IR. Its
// arguments, memory, regions and loops are here, the code of each op in codegen.cpp, and the
// vector mode that runs the units of a `units` loop in SIMD lanes in vectorize.cpp and
// vectorize_memory.cpp (docs/backends.md, "The unit vectorizer").
//
// Layout of the emitted function `kiln_<kernel>_<hash>(args, cube_begin, cube_end, shared,
// state)`: the entry block loads every argument slot and holds the allocas of variables and
// local arrays; a loop over the cubes [cube_begin, cube_end) computes the cube position and runs
// the kernel body once per cube. `units` loops, `for` loops (counted by their trip count, so
// LLVM sees it) and `loop`s become ordinary LLVM loops. A line is an LLVM vector (a scalar when
// it has one lane); bool values are i1 and bytes in memory. f16 and bf16 arithmetic is done in
// f32 and rounded back. Value names in the output follow the kiln value numbers (%v12).
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "compiler/cpu/codegen.h"
#include "compiler/cpu/math.h"
#include "ir/float16.h"

namespace kiln::cpu::detail {

inline bool is_one(llvm::Value* x) {
  auto* c = llvm::dyn_cast<llvm::ConstantInt>(x);
  return c && c->isOne();
}

using ir::ElemType;
using ir::OpKind;
using ir::ValueId;
using llvm::Value;

class Gen {
 public:
  Gen(llvm::LLVMContext& c, llvm::Module& m, const ir::Kernel& k, const CompileOptions& o,
      KernelInfo& info)
      : C(c), M(m), K(k), O(o), info_(info), B(c), vals_(k.value_types.size(), nullptr) {}

  Status run() {
    info_.layout = arg_layout(K);
    info_.tensor_maps = abi::tensor_map_sites(K);
    auto* i32 = llvm::Type::getInt32Ty(C);
    auto* ptr = llvm::PointerType::getUnqual(C);
    auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(C), {ptr, i32, i32, ptr, ptr}, false);
    F = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, info_.symbol, M);
    F->addFnAttr(llvm::Attribute::NoUnwind);
    F->addFnAttr("target-cpu", O.target.cpu);
    F->addFnAttr("target-features", O.target.features);
    const std::string width = std::to_string(O.target.vector_bits);
    F->addFnAttr("prefer-vector-width", width);
    F->addFnAttr("min-legal-vector-width", width);
    if (O.fast_math) F->addFnAttr("unsafe-fp-math", "true");
    // The argument block and the shared arena alias nothing the kernel writes through tensors.
    F->addParamAttr(0, llvm::Attribute::NoAlias);
    F->addParamAttr(0, llvm::Attribute::ReadOnly);
    F->addParamAttr(3, llvm::Attribute::NoAlias);
    args_ = F->getArg(0);
    args_->setName("args");
    F->getArg(1)->setName("cube_begin");
    F->getArg(2)->setName("cube_end");
    shared_ = F->getArg(3);
    shared_->setName("shared");
    state_ = F->getArg(4);
    state_->setName("state");

    entry_ = llvm::BasicBlock::Create(C, "entry", F);
    B.SetInsertPoint(entry_);
    load_arguments();
    // Shared allocations (including context arrays) get fixed offsets in the arena.
    ir::walk(K.body, [&](const ir::Op& op) {
      if (op.kind == OpKind::WgmmaDesc || op.kind == OpKind::Tcgen05Desc)
        wgmma_arrays_.insert(op.operands[0]);
    });
    for (const ir::Op& op : K.body.ops) {
      if (op.kind == OpKind::AllocShared) place_shared(op);
      if (op.kind == OpKind::AllocFrag) place_frag(op);
    }
    place_tmem();

    if (rows_schedule()) {
      emit_cube_rows();
      return verified();
    }
    auto* header = llvm::BasicBlock::Create(C, "cube.header", F);
    auto* body = llvm::BasicBlock::Create(C, "cube.body", F);
    cube_latch_ = llvm::BasicBlock::Create(C, "cube.latch", F);
    auto* exit = llvm::BasicBlock::Create(C, "exit", F);
    B.CreateBr(header);
    B.SetInsertPoint(header);
    auto* c = B.CreatePHI(i32, 2, "cube");
    c->addIncoming(F->getArg(1), entry_);
    B.CreateCondBr(B.CreateICmpULT(c, F->getArg(2)), body, exit);
    B.SetInsertPoint(body);
    set_cube(c);
    tmem_cube_start();
    region(K.body);
    if (!B.GetInsertBlock()->getTerminator()) B.CreateBr(cube_latch_);
    B.SetInsertPoint(cube_latch_);
    tmem_cube_end();
    auto* next = B.CreateAdd(c, B.getInt32(1), "cube.next");
    c->addIncoming(next, B.GetInsertBlock());  // the latch, or the end of its tmem check
    B.CreateBr(header);
    B.SetInsertPoint(exit);
    B.CreateRetVoid();
    return verified();
  }

  void set_cube(Value* c) {
    cube_ = c;
    cube_pos_[0] = c;
    cube_pos_[1] = B.CreateURem(c, cube_count_[1], "cube.x");
    cube_pos_[2] = B.CreateURem(B.CreateUDiv(c, cube_count_[1]), cube_count_[2], "cube.y");
    cube_pos_[3] = B.CreateUDiv(c, B.CreateMul(cube_count_[1], cube_count_[2]), "cube.z");
  }

  Status verified() {
    std::string err;
    llvm::raw_string_ostream es(err);
    if (llvm::verifyFunction(*F, &es))
      return Error(ErrorKind::Compile,
                   fmt::format("internal error: invalid LLVM IR for kernel '{}': {}", K.name, err));
    return {};
  }

 private:
  // ---- types ----------------------------------------------------------------------------------

  llvm::Type* scalar_ty(ElemType e) const {
    switch (e) {
      case ElemType::Bool:
        return llvm::Type::getInt1Ty(C);
      case ElemType::I8:
      case ElemType::U8:
        return llvm::Type::getInt8Ty(C);
      case ElemType::I16:
      case ElemType::U16:
        return llvm::Type::getInt16Ty(C);
      case ElemType::I32:
      case ElemType::U32:
        return llvm::Type::getInt32Ty(C);
      case ElemType::I64:
      case ElemType::U64:
        return llvm::Type::getInt64Ty(C);
      case ElemType::F16:
        return llvm::Type::getHalfTy(C);
      case ElemType::BF16:
        return llvm::Type::getBFloatTy(C);
      case ElemType::F32:
        return llvm::Type::getFloatTy(C);
      case ElemType::F64:
        return llvm::Type::getDoubleTy(C);
      case ElemType::F8E4M3:  // LLVM IR has no 8-bit float: the bits, converted by gen.h
      case ElemType::F8E5M2:
        return llvm::Type::getInt8Ty(C);
    }
    return nullptr;
  }
  llvm::Type* vec(llvm::Type* s, int lanes) const {
    return lanes == 1 ? s : llvm::FixedVectorType::get(s, static_cast<unsigned>(lanes));
  }
  llvm::Type* ty(const ir::Type& t) const { return vec(scalar_ty(t.elem), t.lanes); }
  llvm::Type* mem_scalar_ty(ElemType e) const {
    return e == ElemType::Bool ? llvm::Type::getInt8Ty(C) : scalar_ty(e);
  }
  llvm::Type* mem_ty(const ir::Type& t) const { return vec(mem_scalar_ty(t.elem), t.lanes); }
  // f16, bf16 and the f8 types compute in f32.
  bool is_half(ElemType e) const {
    return e == ElemType::F16 || e == ElemType::BF16 || ir::is_f8(e);
  }
  llvm::Type* compute_ty(const ir::Type& t) const {
    return is_half(t.elem) ? vec(llvm::Type::getFloatTy(C), t.lanes) : ty(t);
  }

  // ---- values
  // ------------------------------------------------------------------------------------

  Value* v(ValueId id) const {
    KILN_CHECK(id < vals_.size() && vals_[id], "use of a value with no LLVM counterpart");
    return vals_[id];
  }
  void set(ValueId id, Value* x) {
    if (id == ir::kNoValue) return;
    if (!x->hasName() && !llvm::isa<llvm::Constant>(x)) x->setName(fmt::format("v{}", id));
    vals_[id] = x;
  }
  // A value's type; in vector mode (wf_ > 1) a line of a varying value is wf_ units wide.
  ir::Type type(ValueId id) const {
    ir::Type t = K.type_of(id);
    if (wf_ > 1 && t.kind == ir::TypeKind::Value) t.lanes = static_cast<uint8_t>(t.lanes * wf_);
    return t;
  }

  Value* promote(Value* x, const ir::Type& t) {
    if (t.elem == ElemType::BF16) return from_bf16(x, t.lanes);
    if (t.elem == ElemType::F8E4M3) return from_e4m3(x, t.lanes);
    if (t.elem == ElemType::F8E5M2) return from_e5m2(x, t.lanes);
    return t.elem == ElemType::F16 ? B.CreateFPExt(x, compute_ty(t)) : x;
  }
  // e4m3 -> f32 exactly: a normal's exponent and mantissa, placed where an f32 keeps its own,
  // read 2^120 times too small; one multiply rescales them. Subnormals are their mantissa times
  // 2^-9 (converted, so no f32 subnormal is involved and a flush-to-zero mode cannot lose
  // them). S.1111.111 is NaN; the sign is put back as a bit.
  Value* from_e4m3(Value* x, int lanes) {
    llvm::Type* i32 = vec(B.getInt32Ty(), lanes);
    llvm::Type* f32 = vec(B.getFloatTy(), lanes);
    auto k = [&](uint32_t c) { return llvm::ConstantInt::get(i32, c); };
    Value* b = B.CreateZExt(x, i32);
    Value* em = B.CreateAnd(b, k(0x7f));
    Value* normal = B.CreateFMul(B.CreateBitCast(B.CreateShl(em, k(20)), f32),
                                 llvm::ConstantFP::get(f32, 0x1p120));
    Value* sub = B.CreateFMul(B.CreateUIToFP(em, f32), llvm::ConstantFP::get(f32, 0x1p-9));
    Value* mag = B.CreateSelect(B.CreateICmpULT(em, k(8)), sub, normal);
    Value* bits =
        B.CreateOr(B.CreateBitCast(mag, i32), B.CreateShl(B.CreateAnd(b, k(0x80)), k(24)));
    return B.CreateSelect(B.CreateICmpEQ(em, k(0x7f)), llvm::ConstantFP::getNaN(f32),
                          B.CreateBitCast(bits, f32));
  }
  // e5m2 -> f32 exactly: e5m2 is the high byte of an f16.
  Value* from_e5m2(Value* x, int lanes) {
    llvm::Type* i16 = vec(B.getInt16Ty(), lanes);
    Value* h = B.CreateShl(B.CreateZExt(x, i16), llvm::ConstantInt::get(i16, 8));
    return B.CreateFPExt(B.CreateBitCast(h, vec(B.getHalfTy(), lanes)), vec(B.getFloatTy(), lanes));
  }
  // f32 -> f8 to nearest even, saturating at the largest finite value (infinities too), NaN to
  // 0x7f (ir/ir.h; PTX's cvt.rn.satfinite). Below the smallest normal f8, adding `magic` (whose
  // f32 quantum is the f8 subnormals' quantum: 2^14 for e4m3's 2^-9, 2^7 for e5m2's 2^-16)
  // makes the float add round; above it, the f32 bits are rounded at the f8 mantissa and
  // rebiased.
  Value* to_f8(Value* x, ElemType e, int lanes) {
    const bool e4 = e == ElemType::F8E4M3;
    const uint32_t shift = e4 ? 20 : 21;  // 23 - mantissa bits
    const uint32_t rebias = e4 ? (127 - 7) << 3 : (127 - 15) << 2;
    const uint32_t max_finite = e4 ? 0x7e : 0x7b;              // 448, 57344
    const uint32_t min_normal = e4 ? 0x3c800000 : 0x38800000;  // 2^-6, 2^-14
    const float magic = e4 ? 16384.0f : 128.0f;                // 2^14, 2^7
    llvm::Type* i32 = vec(B.getInt32Ty(), lanes);
    llvm::Type* f32 = vec(B.getFloatTy(), lanes);
    auto k = [&](uint32_t c) { return llvm::ConstantInt::get(i32, c); };
    Value* u = B.CreateBitCast(x, i32);
    Value* a = B.CreateAnd(u, k(0x7fffffff));
    Value* sign = B.CreateAnd(B.CreateLShr(u, k(24)), k(0x80));
    uint32_t magic_bits;
    std::memcpy(&magic_bits, &magic, 4);
    Value* sub = B.CreateSub(
        B.CreateBitCast(B.CreateFAdd(B.CreateBitCast(a, f32), llvm::ConstantFP::get(f32, magic)),
                        i32),
        k(magic_bits));
    Value* odd = B.CreateAnd(B.CreateLShr(a, k(shift)), k(1));
    Value* up =
        B.CreateLShr(B.CreateAdd(a, B.CreateAdd(k((1u << (shift - 1)) - 1), odd)), k(shift));
    Value* normal = B.CreateSub(
        B.CreateBinaryIntrinsic(llvm::Intrinsic::umin, up, k(rebias + max_finite)), k(rebias));
    Value* m = B.CreateSelect(B.CreateICmpULT(a, k(min_normal)), sub, normal);
    m = B.CreateSelect(B.CreateICmpUGT(a, k(0x7f800000)), k(0x7f), m);
    return B.CreateTrunc(B.CreateOr(sign, m), vec(B.getInt8Ty(), lanes));
  }
  // bf16 -> f32 exactly, by a shift: LLVM's scalar lowering of the conversion on x86 flushed
  // denormals (found when the scalar tests first ran without the vectorizer).
  Value* from_bf16(Value* x, int lanes) {
    Value* bits =
        B.CreateZExt(B.CreateBitCast(x, vec(B.getInt16Ty(), lanes)), vec(B.getInt32Ty(), lanes));
    return B.CreateBitCast(B.CreateShl(bits, llvm::ConstantInt::get(bits->getType(), 16)),
                           vec(B.getFloatTy(), lanes));
  }
  Value* demote(Value* x, const ir::Type& t) {
    if (t.elem == ElemType::BF16) return to_bf16(x, t.lanes);
    if (ir::is_f8(t.elem)) return to_f8(x, t.elem, t.lanes);
    return t.elem == ElemType::F16 ? B.CreateFPTrunc(x, ty(t)) : x;
  }
  // f32 -> bf16 rounded to nearest even, by integer arithmetic: x86's vcvtneps2bf16 (what LLVM
  // selects on AVX512-BF16) flushes denormals, which the IR's semantics forbid.
  Value* to_bf16(Value* x, int lanes) {
    llvm::Type* i32 = vec(B.getInt32Ty(), lanes);
    auto k = [&](uint32_t c) { return llvm::ConstantInt::get(i32, c); };
    Value* bits = B.CreateBitCast(x, i32);
    Value* lsb = B.CreateAnd(B.CreateLShr(bits, k(16)), k(1));
    Value* rounded = B.CreateLShr(B.CreateAdd(bits, B.CreateAdd(k(0x7FFF), lsb)), k(16));
    Value* quiet_nan = B.CreateOr(B.CreateLShr(bits, k(16)), k(0x40));
    Value* r = B.CreateSelect(B.CreateFCmpUNO(x, x), quiet_nan, rounded);
    return B.CreateBitCast(B.CreateTrunc(r, vec(B.getInt16Ty(), lanes)),
                           vec(B.getBFloatTy(), lanes));
  }

  // ---- arguments and memory --------------------------------------------------------------------

  struct Mem {
    Value* base = nullptr;    // pointer to element 0
    Value* len = nullptr;     // lines (u32)
    Value* extent = nullptr;  // bound of valid line indices (checked mode)
    std::vector<Value*> shape, stride;
  };

  Value* slot(uint32_t i, const char* name) {
    auto* p = B.CreateConstInBoundsGEP1_32(B.getInt64Ty(), args_, i);
    return B.CreateLoad(B.getInt64Ty(), p, name);
  }

  void load_arguments() {
    for (int a = 1; a <= 3; ++a)
      cube_count_[a] = B.CreateTrunc(slot(static_cast<uint32_t>(a - 1), "count"), B.getInt32Ty());
    cube_count_[0] =
        B.CreateMul(B.CreateMul(cube_count_[1], cube_count_[2]), cube_count_[3], "cubes");
    for (size_t i = 0; i < K.params.size(); ++i) {
      const ir::Param& p = K.params[i];
      const ir::Type& t = type(p.value);
      uint32_t s = info_.layout.params[i].first;
      if (t.kind == ir::TypeKind::Tensor || t.kind == ir::TypeKind::Array) {
        Mem m;
        m.base = B.CreateIntToPtr(slot(s + abi::slot::kData, ""), B.getPtrTy(), p.name);
        m.len = B.CreateTrunc(slot(s + abi::slot::kLen, ""), B.getInt32Ty(), p.name + ".len");
        m.extent = m.len;
        if (t.kind == ir::TypeKind::Tensor) {
          m.extent =
              B.CreateTrunc(slot(s + abi::slot::kExtent, ""), B.getInt32Ty(), p.name + ".extent");
          const uint32_t rank = static_cast<uint32_t>(t.rank);
          for (uint32_t d = 0; d < rank; ++d)
            m.shape.push_back(B.CreateTrunc(slot(s + abi::slot::shape(d), ""), B.getInt32Ty(),
                                            fmt::format("{}.shape{}", p.name, d)));
          for (uint32_t d = 0; d < rank; ++d)
            m.stride.push_back(B.CreateTrunc(slot(s + abi::slot::stride(rank, d), ""),
                                             B.getInt32Ty(),
                                             fmt::format("{}.stride{}", p.name, d)));
        }
        mem_[p.value] = std::move(m);
      } else {
        Value* bits = slot(s, "");
        llvm::Type* st = scalar_ty(t.elem);
        const unsigned w = st->getPrimitiveSizeInBits();
        Value* x = B.CreateTrunc(bits, B.getIntNTy(w == 1 ? 1 : w));
        if (st->isFloatingPointTy()) x = B.CreateBitCast(x, st);
        x->setName(p.name);
        vals_[p.value] = x;
      }
    }
  }

  void place_shared(const ir::Op& op) {
    const ir::Type& t = type(op.result);
    const uint64_t bytes = uint64_t{t.count} * t.lanes * ir::elem_bytes(t.elem);
    // wgmma operands start on 1024 bytes of the arena, where a swizzle's pattern starts.
    if (wgmma_arrays_.count(op.result)) shared_bytes_ = (shared_bytes_ + 1023) / 1024 * 1024;
    const uint32_t offset = shared_bytes_;
    shared_bytes_ += static_cast<uint32_t>((bytes + 63) / 64 * 64);
    info_.shared_bytes = shared_bytes_;
    Mem m;
    m.base = B.CreateConstInBoundsGEP1_32(B.getInt8Ty(), shared_, offset,
                                          fmt::format("shared{}", op.result));
    m.len = m.extent = B.getInt32(t.count);
    mem_[op.result] = std::move(m);
  }

  Value* element_ptr(ValueId mem, Value* index) {
    const ir::Type& t = type(mem);
    const Mem& m = mem_.at(mem);
    Value* i = B.CreateZExt(index, B.getInt64Ty());
    if (t.lanes > 1) i = B.CreateMul(i, B.getInt64(static_cast<uint64_t>(t.lanes)));
    return B.CreateInBoundsGEP(mem_scalar_ty(t.elem), m.base, i);
  }
  llvm::Align align_of(const ir::Type& t) const {
    return llvm::Align(static_cast<uint64_t>(ir::elem_bytes(t.elem)));
  }
  Value* load(ValueId mem, Value* index) {
    const ir::Type& t = type(mem);
    Value* x = B.CreateAlignedLoad(mem_ty(t), element_ptr(mem, index), align_of(t));
    if (t.elem == ElemType::Bool) x = B.CreateICmpNE(x, llvm::Constant::getNullValue(mem_ty(t)));
    return x;
  }
  void store(ValueId mem, Value* index, Value* x) {
    const ir::Type& t = type(mem);
    if (t.elem == ElemType::Bool) x = B.CreateZExt(x, mem_ty(t));
    B.CreateAlignedStore(x, element_ptr(mem, index), align_of(t));
  }

  // Checked mode: runs `access` only when index < the memory's extent; otherwise reports the
  // fault (kiln_rt_fault) and gives `fallback` (zero) for the access's value.
  template <class Access>
  Value* checked(const ir::Op& op, ValueId mem, Value* index, llvm::Type* value_ty,
                 Access&& access) {
    if (!O.checked) return access();
    const uint32_t site = access_site(op, mem);
    Value* bound = mem_.at(mem).extent;
    auto* ok_bb = llvm::BasicBlock::Create(C, "inbounds", F);
    auto* bad_bb = llvm::BasicBlock::Create(C, "outofbounds", F);
    auto* cont = llvm::BasicBlock::Create(C, "checked", F);
    B.CreateCondBr(B.CreateICmpULT(index, bound), ok_bb, bad_bb);
    B.SetInsertPoint(bad_bb);
    call_fault(site, index, bound, unit_or_zero());
    B.CreateBr(cont);
    B.SetInsertPoint(ok_bb);
    Value* v = access();
    auto* ok_end = B.GetInsertBlock();
    B.CreateBr(cont);
    B.SetInsertPoint(cont);
    if (!value_ty) return nullptr;
    auto* phi = B.CreatePHI(value_ty, 2);
    phi->addIncoming(v, ok_end);
    phi->addIncoming(llvm::Constant::getNullValue(value_ty), bad_bb);
    return phi;
  }

  // Registers a checked access of `mem` by `op` (what a fault report names); its site number.
  uint32_t access_site(const ir::Op& op, ValueId mem) {
    const uint32_t site = static_cast<uint32_t>(info_.accesses.size());
    std::string memory;
    for (const ir::Param& p : K.params)
      if (p.value == mem)
        memory = fmt::format("{} '{}'", type(mem).kind == ir::TypeKind::Tensor ? "tensor" : "array",
                             p.name);
    if (memory.empty())
      memory = type(mem).kind == ir::TypeKind::Local ? "a local array" : "a shared array";
    info_.accesses.push_back(
        AccessSite{std::string(ir::op_name(op.kind)), memory, K.loc_string(op.loc)});
    return site;
  }

  void call_fault(uint32_t site, Value* index, Value* bound, Value* unit,
                  Value* site_value = nullptr) {
    auto callee = M.getOrInsertFunction(
        "kiln_rt_fault", llvm::FunctionType::get(B.getVoidTy(),
                                                 {B.getPtrTy(), B.getInt32Ty(), B.getInt32Ty(),
                                                  B.getInt32Ty(), B.getInt32Ty(), B.getInt32Ty()},
                                                 false));
    B.CreateCall(callee,
                 {state_, site_value ? site_value : B.getInt32(site), index, bound, cube_, unit});
  }

  llvm::AllocaInst* entry_alloca(llvm::Type* t, Value* count, const std::string& name) {
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    return eb.CreateAlloca(t, count, name);
  }

  // ---- control flow
  // -------------------------------------------------------------------------------

  struct LoopCtx {
    llvm::BasicBlock* cont;
    llvm::BasicBlock* brk;
    bool units;
    // Vector mode: lanes still in the loop, and lanes that returned inside it (or null).
    bool vec = false;
    llvm::AllocaInst* alive = nullptr;
    llvm::AllocaInst* ret = nullptr;
  };

  void region(const ir::Region& r) {
    if (V_) return vregion(r);
    for (const ir::Op& op : r.ops) {
      if (B.GetInsertBlock()->getTerminator()) break;  // after a jump
      emit(op);
    }
  }

  void branch_to_if_open(llvm::BasicBlock* bb) {
    if (!B.GetInsertBlock()->getTerminator()) B.CreateBr(bb);
  }

  void emit_if(const ir::Op& op) {
    auto* then_bb = llvm::BasicBlock::Create(C, "then", F);
    auto* merge = llvm::BasicBlock::Create(C, "endif", F);
    const bool has_else = op.regions.size() > 1 && !op.regions[1].ops.empty();
    auto* else_bb = has_else ? llvm::BasicBlock::Create(C, "else", F) : merge;
    B.CreateCondBr(v(op.operands[0]), then_bb, else_bb);
    B.SetInsertPoint(then_bb);
    region(op.regions[0]);
    branch_to_if_open(merge);
    if (has_else) {
      B.SetInsertPoint(else_bb);
      region(op.regions[1]);
      branch_to_if_open(merge);
    }
    B.SetInsertPoint(merge);
  }

  void loop_metadata(llvm::BranchInst* latch, uint64_t unroll) {
    if (unroll == 0) return;
    llvm::SmallVector<llvm::Metadata*, 3> md;
    md.push_back(nullptr);  // self reference, set below
    if (unroll == ir::kUnrollFull) {
      md.push_back(llvm::MDNode::get(C, llvm::MDString::get(C, "llvm.loop.unroll.full")));
    } else if (unroll == 1) {
      md.push_back(llvm::MDNode::get(C, llvm::MDString::get(C, "llvm.loop.unroll.disable")));
    } else {
      md.push_back(llvm::MDNode::get(
          C, {llvm::MDString::get(C, "llvm.loop.unroll.count"),
              llvm::ConstantAsMetadata::get(B.getInt32(static_cast<uint32_t>(unroll)))}));
    }
    auto* node = llvm::MDNode::getDistinct(C, md);
    node->replaceOperandWith(0, node);
    latch->setMetadata(llvm::LLVMContext::MD_loop, node);
  }

  // The number of iterations of `for i = start to end step step` (scalars or vectors).
  Value* trip_count(Value* start, Value* end, Value* step, bool sgn) {
    llvm::Type* it = start->getType();
    Value* zero = llvm::ConstantInt::get(it, 0);
    Value* one = llvm::ConstantInt::get(it, 1);
    auto count_up = [&](Value* lo, Value* hi, Value* s) {  // (hi - lo - 1) / s + 1 if lo < hi
      Value* safe = B.CreateSelect(B.CreateICmpEQ(s, zero), one, s);
      Value* n = B.CreateAdd(B.CreateUDiv(B.CreateSub(B.CreateSub(hi, lo), one), safe), one);
      return B.CreateSelect(
          B.CreateICmp(sgn ? llvm::CmpInst::ICMP_SLT : llvm::CmpInst::ICMP_ULT, lo, hi), n, zero);
    };
    Value* trips;
    if (sgn) {
      Value* up = count_up(start, end, step);
      Value* down = count_up(end, start, B.CreateNeg(step));
      trips = B.CreateSelect(B.CreateICmpSGT(step, zero), up,
                             B.CreateSelect(B.CreateICmpSLT(step, zero), down, zero));
    } else {
      trips = B.CreateSelect(B.CreateICmpEQ(step, zero), zero, count_up(start, end, step));
    }
    trips->setName("trips");
    return trips;
  }

  // for i = start, start+step, ... while i < end (step > 0) or i > end (step < 0): counted by
  // its trip count so that i never overflows and LLVM knows the count.
  void emit_for(const ir::Op& op) {
    const ir::Type& t = type(op.operands[0]);
    const bool sgn = ir::is_signed(t.elem);
    Value* start = v(op.operands[0]);
    Value* end = v(op.operands[1]);
    Value* step = v(op.operands[2]);
    Value* trips = trip_count(start, end, step, sgn);
    llvm::Type* it = start->getType();
    const CountedLoop loop = open_loop("for", llvm::ConstantInt::get(it, 0), "k");
    enter_body(loop, B.CreateICmpULT(loop.k, trips));
    set(op.regions[0].args[0], B.CreateAdd(start, B.CreateMul(loop.k, step)));
    loops_.push_back({loop.latch, loop.exit, false});
    region(op.regions[0]);
    loops_.pop_back();
    branch_to_if_open(loop.latch);
    loop_metadata(close_loop(loop, llvm::ConstantInt::get(it, 1)), op.attr.i);
  }

  void emit_loop(const ir::Op& op) {
    auto* header = llvm::BasicBlock::Create(C, "loop", F);
    auto* exit = llvm::BasicBlock::Create(C, "loop.exit", F);
    B.CreateBr(header);
    B.SetInsertPoint(header);
    loops_.push_back({header, exit, false});
    region(op.regions[0]);
    loops_.pop_back();
    branch_to_if_open(header);
    B.SetInsertPoint(exit);
  }

  // The blocks of a counted loop (a units loop, scalar or over vectors of units, or a `for`):
  // open_loop leaves the builder in the header after the counter (from `first`), enter_body
  // branches to the body or the exit, and close_loop (called once the body has branched to the
  // latch) steps the counter and leaves the builder in the exit.
  struct CountedLoop {
    llvm::BasicBlock *pre, *header, *body, *latch, *exit;
    llvm::PHINode* k;
  };
  CountedLoop open_loop(const std::string& name, Value* first, const char* counter) {
    CountedLoop l;
    l.pre = B.GetInsertBlock();
    l.header = llvm::BasicBlock::Create(C, name + ".header", F);
    l.body = llvm::BasicBlock::Create(C, name + ".body", F);
    l.latch = llvm::BasicBlock::Create(C, name + ".latch", F);
    l.exit = llvm::BasicBlock::Create(C, name + ".exit", F);
    B.CreateBr(l.header);
    B.SetInsertPoint(l.header);
    l.k = B.CreatePHI(first->getType(), 2, counter);
    l.k->addIncoming(first, l.pre);
    return l;
  }
  void enter_body(const CountedLoop& l, Value* go) {
    B.CreateCondBr(go, l.body, l.exit);
    B.SetInsertPoint(l.body);
  }
  llvm::BranchInst* close_loop(const CountedLoop& l, Value* step) {
    B.SetInsertPoint(l.latch);
    l.k->addIncoming(B.CreateAdd(l.k, step, l.k->getName() + ".next"), l.latch);
    llvm::BranchInst* back = B.CreateBr(l.header);
    B.SetInsertPoint(l.exit);
    return back;
  }

  void emit_units(const ir::Op& op) {
    if (const int width = units_width(op); width > 1) return emit_units_vec(op, width);
    Value* start = range_.start ? range_.start : v(op.operands[0]);
    Value* end = range_.end ? range_.end : v(op.operands[1]);
    const CountedLoop loop = open_loop("units", start, "unit");
    enter_body(loop, B.CreateICmpULT(loop.k, end));
    Value* saved = unit_;
    unit_ = loop.k;
    vals_[op.regions[0].args[0]] = loop.k;
    loops_.push_back({loop.latch, loop.exit, true});
    region(op.regions[0]);
    loops_.pop_back();
    unit_ = saved;
    branch_to_if_open(loop.latch);
    close_loop(loop, B.getInt32(1));
  }

  void emit_jump(const ir::Op& op) {
    if (op.kind == OpKind::Return) {
      // Inside a units loop: this unit is done; at cube level: the cube is done.
      for (auto it = loops_.rbegin(); it != loops_.rend(); ++it)
        if (it->units) {
          B.CreateBr(it->cont);
          return;
        }
      B.CreateBr(cube_latch_);
      return;
    }
    KILN_CHECK(!loops_.empty(), "break/continue outside a loop");
    B.CreateBr(op.kind == OpKind::Break ? loops_.back().brk : loops_.back().cont);
  }

  // ---- arithmetic
  // -----------------------------------------------------------------------------------

  Value* int_div(bool sgn, Value* a, Value* b, bool rem) {
    llvm::Type* t = a->getType();
    Value* zero = llvm::Constant::getNullValue(t);
    Value* one = llvm::ConstantInt::get(t, 1);
    Value* is_zero = B.CreateICmpEQ(b, zero);
    if (!sgn) {
      Value* safe = B.CreateSelect(is_zero, one, b);
      Value* r = rem ? B.CreateURem(a, safe) : B.CreateUDiv(a, safe);
      return B.CreateSelect(is_zero, rem ? a : zero, r);  // x / 0 == 0, x % 0 == x
    }
    Value* minus_one = llvm::Constant::getAllOnesValue(t);
    Value* is_m1 = B.CreateICmpEQ(b, minus_one);
    Value* safe = B.CreateSelect(B.CreateOr(is_zero, is_m1), one, b);
    Value* r = rem ? B.CreateSRem(a, safe) : B.CreateSDiv(a, safe);
    // x / -1 == -x (wrapping: INT_MIN / -1 == INT_MIN), x % -1 == 0.
    r = B.CreateSelect(is_m1, rem ? zero : B.CreateNeg(a), r);
    return B.CreateSelect(is_zero, rem ? a : zero, r);
  }

  Value* shift(bool left, bool sgn, Value* a, Value* b) {
    const unsigned bits = a->getType()->getScalarSizeInBits();
    Value* amount = B.CreateAnd(b, llvm::ConstantInt::get(b->getType(), bits - 1));
    if (left) return B.CreateShl(a, amount);
    return sgn ? B.CreateAShr(a, amount) : B.CreateLShr(a, amount);
  }

  Value* minmax(bool is_max, const ir::Type& t, Value* a, Value* b) {
    if (ir::is_float(t.elem)) {
      // The IR leaves the order of -0 and +0 open, so this is x86's maxps/minps (a > b ? a : b,
      // b when either is NaN) and one fix for a NaN b: the other operand, NaN only if both are.
      // LLVM's maximumnum would also order the zeros: a chain of three more instructions.
      Value* x = promote(a, t);
      Value* y = promote(b, t);
      Value* pick = B.CreateSelect(is_max ? B.CreateFCmpOGT(x, y) : B.CreateFCmpOLT(x, y), x, y);
      return demote(B.CreateSelect(B.CreateFCmpUNO(y, y), x, pick), t);
    }
    const bool sgn = ir::is_signed(t.elem);
    llvm::Intrinsic::ID id = is_max ? (sgn ? llvm::Intrinsic::smax : llvm::Intrinsic::umax)
                                    : (sgn ? llvm::Intrinsic::smin : llvm::Intrinsic::umin);
    if (t.elem == ElemType::Bool) id = is_max ? llvm::Intrinsic::umax : llvm::Intrinsic::umin;
    return B.CreateBinaryIntrinsic(id, a, b);
  }

  Value* binary(const ir::Op& op);

  Value* compare(const ir::Op& op);

  Value* unary(const ir::Op& op);

  // A double rounded to f32 toward zero, with the last bit set when inexact ("round to odd").
  // Rounding that to f16/bf16 then gives the correctly rounded result (f32 has more than two
  // bits more than either), where plain f64 -> f32 -> 16-bit would round twice.
  Value* round_to_odd_f32(Value* x, int lanes);

  // float -> int for vectors: x86 converts vectors only within the target's range, and LLVM
  // expands fptosi.sat/fptoui.sat on vectors lane by lane with branches. Clamp into the range,
  // convert, then put in the saturated ends and NaN -> 0 with selects.
  Value* saturating_cast(Value* x, llvm::Type* dst, bool sgn);

  Value* cast(const ir::Op& op);

  // ---- print and assert
  // ---------------------------------------------------------------------------

  Value* unit_or_zero() {
    if (unit_) return unit_;
    return V_ ? B.CreateAdd(vu_, first_lane(mask_)) : B.getInt32(0);
  }

  Value* lane_bits(Value* x, ElemType e) {
    llvm::Type* st = x->getType();
    if (st->isFloatingPointTy()) x = B.CreateBitCast(x, B.getIntNTy(st->getPrimitiveSizeInBits()));
    (void)e;
    return B.CreateZExt(x, B.getInt64Ty());
  }

  void emit_print(const ir::Op& op);

  void emit_assert(const ir::Op& op);

  // ---- ops
  // ------------------------------------------------------------------------------------------

  Value* constant(const ir::Op& op) {
    const ir::Type& t = type(op.result);
    llvm::Type* lt = ty(t);
    if (t.elem == ElemType::F8E4M3) return llvm::ConstantInt::get(lt, e4m3_bits(op.attr.f));
    if (t.elem == ElemType::F8E5M2) return llvm::ConstantInt::get(lt, e5m2_bits(op.attr.f));
    if (ir::is_float(t.elem)) return llvm::ConstantFP::get(lt, op.attr.f);
    return llvm::ConstantInt::get(lt, op.attr.i);
  }

  Value* atomic(const ir::Op& op);

  // Shared and local memory belong to one cube, and a cube's units run one after another on
  // one thread: their atomics need no atomic instructions.
  Value* plain_atomic(const ir::Op& op);

  void emit(const ir::Op& op) {
    if (V_ && vector_op(op)) return;
    emit_scalar(op);
  }

  void emit_scalar(const ir::Op& op);
  bool emit_value(const ir::Op& op);  // false when op is not a pure value op
  void emit_effect(const ir::Op& op);

  // ---- matrix fragments (fragments.cpp)
  // ---------------------------------------------------------- A fragment is a tile of 4-byte
  // slots per element per plane in the shared arena; frag.plane points at one plane's copy. It
  // is row-major f32 (float fragments) or i32 (integer ones), except 8-bit A and B fragments on
  // a VNNI CPU, which keep bytes in the order vpdpbusd reads them (FragForm).
  enum class FragForm { Wide, Bytes, Quads };
  FragForm frag_form(const ir::Type& t) const;
  void place_frag(const ir::Op& op);
  void emit_frag(const ir::Op& op);
  Value* frag_to_compute(Value* x, const ir::Type& frag, ElemType from);
  Value* frag_from_compute(Value* x, ElemType to, int lanes);
  Value* frag_round(Value* x, ElemType to);
  Value* frag_indices(Value* index, Value* stride, int r, int c0, int w, bool col_major);
  Value* frag_mask(int r, int c0, int w, Value* rows, Value* cols);
  Value* frag_check(const ir::Op& op, ValueId mem, Value* idx, Value* mask, uint32_t site);
  struct FragAccess;
  FragAccess frag_access(const ir::Op& op);
  std::pair<Value*, Value*> frag_row(const ir::Op& op, const FragAccess& a, int r, int c0);
  void frag_load(const ir::Op& op);
  void frag_load_bytes(const ir::Op& op, const FragAccess& a, FragForm form);
  int transpose_block(const FragAccess& a) const;
  std::vector<Value*> transpose(std::vector<Value*> x);
  std::pair<Value*, Value*> frag_column(const ir::Op& op, const FragAccess& a, int c, int r0,
                                        int b);
  void frag_load_columns(const ir::Op& op, const FragAccess& a, int b);
  void frag_store_columns(const ir::Op& op, const FragAccess& a, int b);
  void frag_store(const ir::Op& op);
  struct MmaSteps;
  void frag_mma(const ir::Op& op);
  void frag_mma_vnni(const ir::Op& op);
  void frag_mma_scaled(const ir::Op& op);
  void mma_blocks(const ir::Op& op, const MmaSteps& s);
  Value* mma_b(const ir::Op& op, const MmaSteps& s, Value* step, int j);
  void wgmma_desc(const ir::Op& op);
  void wgmma(const ir::Op& op);

  // ---- tensor memory, tcgen05 and mbarriers (tensor_memory.cpp) --------------------------------
  // Kernels with cube ops keep the cube's TmemBlock at the end of the arena (tmem_).
  void place_tmem();
  void tmem_cube_start();
  void tmem_cube_end();
  void report_misuse(Value* code, uint32_t first, uint32_t last, const std::string& where,
                     Value* unit = nullptr);
  void tcgen05_desc(const ir::Op& op);
  void cube_op(const ir::Op& op);
  void cluster_load(const ir::Op& op);
  void tmem_read(const ir::Op& op);
  void copy_async(const ir::Op& op);

  llvm::LLVMContext& C;
  llvm::Module& M;
  const ir::Kernel& K;
  const CompileOptions& O;
  KernelInfo& info_;
  llvm::IRBuilder<> B;
  llvm::Function* F = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::BasicBlock* cube_latch_ = nullptr;
  Value* args_ = nullptr;
  Value* shared_ = nullptr;
  Value* state_ = nullptr;
  Value* cube_ = nullptr;
  Value* unit_ = nullptr;
  Value* cube_pos_[4] = {};
  Value* cube_count_[4] = {};
  uint32_t shared_bytes_ = 0;
  std::set<ValueId> wgmma_arrays_;           // shared arrays wgmma.desc describes
  Value* tmem_ = nullptr;                    // the cube's TmemBlock, in kernels with cube ops
  uint32_t tmem_offset_ = 0;                 // its offset in the arena
  std::string tmem_alloc_at_;                // where it is first allocated (for a leak)
  std::map<ValueId, Value*> frag_plane_of_;  // frag.plane results: the plane they belong to
  std::vector<Value*> vals_;
  std::unordered_map<ValueId, Mem> mem_;
  std::unordered_map<ValueId, llvm::AllocaInst*> vars_;
  std::vector<LoopCtx> loops_;

  // ---- vector mode (vectorize.cpp) -------------------------------------------------------------
  // Inside a vectorized `units` loop, V_ consecutive units run in the lanes of one vector. A
  // varying value of line width W is an LLVM vector of V_ * W elements, unit-major (unit l's
  // line is elements [l*W, l*W + W)); a uniform one keeps its scalar form. mask_ holds the
  // lanes that run the current code; code runs only while at least one lane is active.

  // value = base + lane * stride, base and stride scalars of the value's type.
  struct Affine {
    Value* base = nullptr;
    Value* stride = nullptr;
    bool aligned = false;  // stride 1 and base a multiple of V_
  };

  bool rows_schedule();
  void emit_cube_rows();
  int units_width(const ir::Op& units);
  void emit_units_vec(const ir::Op& op, int width);
  const ir::Op* interchanged_loop(const ir::Op& units);
  void privatize(const ir::Op& units, int width);
  void merge_private(int width);
  void private_add(const ir::Op& op);
  void strided_iteration(const ir::Op& units, const ir::Op& loop, llvm::PHINode* k,
                         llvm::AllocaInst* ran);
  std::vector<bool> hoist_uniform(const ir::Op& units, bool all);
  std::vector<bool> hoisted_;  // the units loop's top-level ops emitted before it
  bool vector_op(const ir::Op& op);
  void vregion(const ir::Region& r, const std::vector<bool>* emitted = nullptr);
  void vif(const ir::Op& op);
  void vfor(const ir::Op& op);
  void vloop(const ir::Op& op);
  void vjump(const ir::Op& op);
  void velementwise(const ir::Op& op);
  void vaffine(const ir::Op& op);
  bool vdivrem_uniform(const ir::Op& op);
  struct Magic {
    Value* m = nullptr;      // i32 magic multiplier
    Value* shift = nullptr;  // i32
    Value* small = nullptr;  // i1: d < 2
  };
  bool vdiv_by_uniform(const ir::Op& op);
  bool vdiv_apply(const ir::Op& op, const Magic& mg);
  bool multiple_of_width(Value* x, int depth);
  struct Path {
    std::function<Value*()> cond, emit;
  };
  Value* first_path(const std::vector<Path>& paths, const std::function<Value*()>& otherwise);
  Value* wide_sum(Value* base, int depth);
  std::vector<Path> consecutive_paths(Value* base, Value* stride,
                                      const std::function<Value*(Value*)>& access);
  Value* stride_test(Value* index, Value* mask, int s, Value** base);
  Value* window_test(Value* index, Value* mask, Value** base, Value** unit_stride);
  Value* window_load(ValueId mem, Value* base, Value* mask, Value* unit_stride);
  void vload(const ir::Op& op);
  void vstore(const ir::Op& op);
  void vlocal_access(const ir::Op& op);
  void vvar(const ir::Op& op);
  void vassert(const ir::Op& op);
  void scalarize(const ir::Op& op);
  Value* gather(ValueId mem, Value* index, Value* mask);
  void scatter(ValueId mem, Value* index, Value* x, Value* mask);
  Value* contiguous_load(ValueId mem, Value* base, Value* mask);
  void contiguous_store(ValueId mem, Value* base, Value* x, Value* mask);
  Value* vchecked_mask(const ir::Op& op, ValueId mem, ValueId index, Value* bound);
  template <class Fn>
  void for_each_lane(Value* mask, Fn&& fn);
  template <class Fn>
  void for_each_lane_unrolled(Value* mask, Fn&& fn);
  template <class Fn>
  void for_active_lanes(Value* mask, Fn&& fn);
  Value* widen(ValueId id);
  Value* widen_mask(Value* m, int lanes);
  Value* spread(Value* x, int lanes);
  Value* lane_value(ValueId id, Value* lane);
  Value* any(Value* m);
  Value* first_lane(Value* m);
  Value* last_lane(Value* m);
  Value* iota(llvm::Type* elem);
  bool is_true(Value* m) const;
  bool escapes(const ir::Region& r);
  bool has_return(const ir::Region& r);
  bool loop_needs_mask(const ir::Op& op);

  // The cube-row schedule: the units loop runs over [start, end) of the cube, not all of it.
  struct UnitsRange {
    Value* start = nullptr;  // a multiple of cube_dim.x
    Value* end = nullptr;
  };
  UnitsRange range_;
  int V_ = 0;  // lanes of the vectorized units loop being emitted; 0 outside one
  int wf_ = 1;
  Value* vu_ = nullptr;    // the unit index of lane 0
  Value* mask_ = nullptr;  // <V_ x i1>: the active lanes
  std::vector<uint8_t> vary_ = std::vector<uint8_t>(K.value_types.size(), 0);
  std::unordered_map<ValueId, Affine> affine_;
  std::unordered_map<ValueId, Value*> var_mask_;  // vectorized variables -> mask at declaration
  std::unordered_set<ValueId> lane_local_;        // local arrays with a row per lane
  // frag.mem arrays: a unit's elements of an accumulator, at indices the unit-loop pass computes
  // from the unit (inside the array, never the same for two units, never consecutive ones).
  std::unordered_set<ValueId> frag_mems_;
  std::unordered_map<const ir::Region*, bool> escapes_, returns_;
  llvm::BasicBlock* units_pre_ = nullptr;                   // the block before the units loop
  std::unordered_set<llvm::BasicBlock*> outer_blocks_;      // blocks before the units loop
  std::unordered_map<Value*, Magic> magic_;                 // divisors known before the loop
  std::unordered_map<ValueId, llvm::AllocaInst*> private_;  // shared counters -> lane copies
};

// ---- lane loops (templates of the vector mode) ------------------------------------------

// Runs fn(lane) for each set lane of `mask`, lowest first, in a loop over the mask's bits.
template <class Fn>
void Gen::for_each_lane(Value* mask, Fn&& fn) {
  auto* pre = B.GetInsertBlock();
  Value* bits = B.CreateZExt(B.CreateBitCast(mask, B.getIntNTy(V_)), B.getInt64Ty());
  auto* header = llvm::BasicBlock::Create(C, "lane.header", F);
  auto* body = llvm::BasicBlock::Create(C, "lane.body", F);
  auto* exit = llvm::BasicBlock::Create(C, "lane.exit", F);
  B.CreateBr(header);
  B.SetInsertPoint(header);
  auto* b = B.CreatePHI(B.getInt64Ty(), 2, "lanes.left");
  b->addIncoming(bits, pre);
  B.CreateCondBr(B.CreateICmpNE(b, B.getInt64(0)), body, exit);
  B.SetInsertPoint(body);
  Value* lane = B.CreateTrunc(B.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, b, B.getTrue()),
                              B.getInt32Ty(), "lane");
  fn(lane);
  b->addIncoming(B.CreateAnd(b, B.CreateSub(b, B.getInt64(1))), B.GetInsertBlock());
  B.CreateBr(header);
  B.SetInsertPoint(exit);
}

// The same, unrolled: one block per lane with a constant lane number.
template <class Fn>
void Gen::for_each_lane_unrolled(Value* mask, Fn&& fn) {
  for (int l = 0; l < V_; ++l) {
    Value* lane = B.getInt32(static_cast<uint32_t>(l));
    if (is_true(mask)) {
      fn(lane);
      continue;
    }
    auto* run = llvm::BasicBlock::Create(C, "lane.on", F);
    auto* next = llvm::BasicBlock::Create(C, "lane.next", F);
    B.CreateCondBr(B.CreateExtractElement(mask, static_cast<uint64_t>(l)), run, next);
    B.SetInsertPoint(run);
    fn(lane);
    B.CreateBr(next);
    B.SetInsertPoint(next);
  }
}

// fn(lane) for each active lane, in lane order: straight-line code with constant lane numbers
// when every lane is active (the common case: cheap extracts, no branches), else the loop.
template <class Fn>
void Gen::for_active_lanes(Value* mask, Fn&& fn) {
  if (is_true(mask)) return for_each_lane_unrolled(mask, fn);
  auto* all = llvm::BasicBlock::Create(C, "lanes.all", F);
  auto* some = llvm::BasicBlock::Create(C, "lanes.some", F);
  auto* done = llvm::BasicBlock::Create(C, "lanes.done", F);
  B.CreateCondBr(B.CreateICmpEQ(B.CreateBitCast(mask, B.getIntNTy(V_)),
                                llvm::ConstantInt::getAllOnesValue(B.getIntNTy(V_))),
                 all, some);
  B.SetInsertPoint(all);
  for_each_lane_unrolled(llvm::Constant::getAllOnesValue(mask->getType()), fn);
  B.CreateBr(done);
  B.SetInsertPoint(some);
  for_each_lane(mask, fn);
  B.CreateBr(done);
  B.SetInsertPoint(done);
}

}  // namespace kiln::cpu::detail
