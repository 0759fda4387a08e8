// The unit vectorizer's memory accesses (see vectorize.cpp): vector loads and stores at
// `base + unit`, run-time tests for consecutive and stride-2 indices, gathers and scatters,
// local arrays with a row per lane, variables with a line per lane, checked mode and asserts,
// atomics and prints lane by lane, and private per-lane copies of shared counters.
#include <memory>

#include "compiler/cpu/gen.h"

namespace kiln::cpu::detail {

// ---- memory ----------------------------------------------------------------------------------

// Checked mode, varying index: the lanes in bounds; the first lane out of bounds is reported.
Value* Gen::vchecked_mask(const ir::Op& op, ValueId mem, ValueId index, Value* bound) {
  const uint32_t site = access_site(op, mem);
  Value* idx = v(index);
  Value* in = B.CreateICmpULT(idx, B.CreateVectorSplat(static_cast<unsigned>(V_), bound));
  Value* bad = B.CreateAnd(mask_, B.CreateNot(in));
  auto* report = llvm::BasicBlock::Create(C, "outofbounds", F);
  auto* cont = llvm::BasicBlock::Create(C, "checked", F);
  B.CreateCondBr(any(bad), report, cont);
  B.SetInsertPoint(report);
  Value* lane = first_lane(bad);
  call_fault(site, B.CreateExtractElement(idx, lane), bound, B.CreateAdd(vu_, lane));
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
  return B.CreateAnd(mask_, in);
}

Value* Gen::contiguous_load(ValueId mem, Value* base, Value* mask) {
  const ir::Type& t = K.type_of(mem);
  llvm::Type* vt = vec(mem_scalar_ty(t.elem), V_ * t.lanes);
  Value* p = element_ptr(mem, base);
  Value* x = is_true(mask) ? static_cast<Value*>(B.CreateAlignedLoad(vt, p, align_of(t)))
                           : B.CreateMaskedLoad(vt, p, align_of(t), widen_mask(mask, t.lanes),
                                                llvm::Constant::getNullValue(vt));
  if (t.elem == ElemType::Bool) x = B.CreateICmpNE(x, llvm::Constant::getNullValue(vt));
  return x;
}

void Gen::contiguous_store(ValueId mem, Value* base, Value* x, Value* mask) {
  const ir::Type& t = K.type_of(mem);
  llvm::Type* vt = vec(mem_scalar_ty(t.elem), V_ * t.lanes);
  if (t.elem == ElemType::Bool) x = B.CreateZExt(x, vt);
  Value* p = element_ptr(mem, base);
  if (is_true(mask))
    B.CreateAlignedStore(x, p, align_of(t));
  else
    B.CreateMaskedStore(x, p, align_of(t), widen_mask(mask, t.lanes));
}

// Pointers to the elements of line index[l] for every lane l.
static Value* element_ptrs(llvm::IRBuilder<>& b, llvm::Type* elem, Value* base, Value* index,
                           int lanes, int v) {
  llvm::Type* i64 = b.getInt64Ty();
  Value* i = b.CreateZExt(index, llvm::FixedVectorType::get(i64, static_cast<unsigned>(v)));
  if (lanes > 1) {
    std::vector<int> rep;
    std::vector<llvm::Constant*> within;
    for (int l = 0; l < v; ++l)
      for (int j = 0; j < lanes; ++j) {
        rep.push_back(l);
        within.push_back(llvm::ConstantInt::get(i64, static_cast<uint64_t>(j)));
      }
    i = b.CreateShuffleVector(i, rep);
    i = b.CreateAdd(
        b.CreateMul(i, llvm::ConstantVector::getSplat(
                           llvm::ElementCount::getFixed(static_cast<unsigned>(v * lanes)),
                           llvm::ConstantInt::get(i64, static_cast<uint64_t>(lanes)))),
        llvm::ConstantVector::get(within));
  }
  return b.CreateInBoundsGEP(elem, base, i);
}

Value* Gen::gather(ValueId mem, Value* index, Value* mask) {
  const ir::Type& t = K.type_of(mem);
  llvm::Type* vt = vec(mem_scalar_ty(t.elem), V_ * t.lanes);
  Value* ptrs = element_ptrs(B, mem_scalar_ty(t.elem), mem_.at(mem).base, index, t.lanes, V_);
  Value* x = B.CreateMaskedGather(vt, ptrs, align_of(t), widen_mask(mask, t.lanes),
                                  llvm::Constant::getNullValue(vt));
  if (t.elem == ElemType::Bool) x = B.CreateICmpNE(x, llvm::Constant::getNullValue(vt));
  return x;
}

void Gen::scatter(ValueId mem, Value* index, Value* x, Value* mask) {
  const ir::Type& t = K.type_of(mem);
  llvm::Type* vt = vec(mem_scalar_ty(t.elem), V_ * t.lanes);
  if (t.elem == ElemType::Bool) x = B.CreateZExt(x, vt);
  Value* ptrs = element_ptrs(B, mem_scalar_ty(t.elem), mem_.at(mem).base, index, t.lanes, V_);
  B.CreateMaskedScatter(x, ptrs, align_of(t), widen_mask(mask, t.lanes));
}

// Emits each path whose condition holds, in order, else the last one; merges their values.
// The paths are marked likely, so that LLVM lays the general one (a gather) out of line.
Value* Gen::first_path(const std::vector<Path>& paths, const std::function<Value*()>& otherwise) {
  auto* merge = llvm::BasicBlock::Create(C, "access.done", F);
  std::vector<std::pair<Value*, llvm::BasicBlock*>> in;
  llvm::MDNode* likely = llvm::MDBuilder(C).createLikelyBranchWeights();
  for (const Path& p : paths) {
    Value* ok = p.cond();
    auto* yes = llvm::BasicBlock::Create(C, "access.fast", F);
    auto* no = llvm::BasicBlock::Create(C, "access.next", F);
    B.CreateCondBr(ok, yes, no, likely);
    B.SetInsertPoint(yes);
    Value* x = p.emit();
    in.emplace_back(x, B.GetInsertBlock());
    B.CreateBr(merge);
    B.SetInsertPoint(no);
  }
  Value* x = otherwise();
  in.emplace_back(x, B.GetInsertBlock());
  B.CreateBr(merge);
  B.SetInsertPoint(merge);
  if (!x) return nullptr;
  auto* phi = B.CreatePHI(x->getType(), static_cast<unsigned>(in.size()));
  for (auto& [val, bb] : in) phi->addIncoming(val, bb);
  return phi;
}

// `base` (an i32 index) as an i64 expression of its add, sub and mul terms, down to `depth`
// levels, the other terms widened (a constant with its sign, so that `i - 1` stays a
// difference). Every step is a ring operation, so the result equals base modulo 2^32 whatever
// the leaves hold, and equals base itself when it lies in [0, 2^32). The point is the address:
// the terms of a u32 sum cannot be taken apart (zext(a + c) is not zext(a) + c), so LLVM gives
// each distinct index of a loop its own induction variable (a depthwise convolution's 36 taps:
// 36 of them, spilled, stepped on every row); as an i64 sum the constant and loop-invariant
// terms become offsets in the address and the taps share one.
Value* Gen::wide_sum(Value* base, int depth) {
  llvm::Type* i64 = B.getInt64Ty();
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(base)) return B.CreateSExt(c, i64);
  auto* bo = llvm::dyn_cast<llvm::BinaryOperator>(base);
  if (depth > 0 && bo) {
    const auto code = bo->getOpcode();
    if (code == llvm::Instruction::Add || code == llvm::Instruction::Sub ||
        code == llvm::Instruction::Mul) {
      Value* a = wide_sum(bo->getOperand(0), depth - 1);
      Value* b = wide_sum(bo->getOperand(1), depth - 1);
      return code == llvm::Instruction::Add   ? B.CreateAdd(a, b)
             : code == llvm::Instruction::Sub ? B.CreateSub(a, b)
                                              : B.CreateMul(a, b);
    }
  }
  return B.CreateZExt(base, i64);
}

// The paths of an access at base + lane (times `stride`, when not null, tested to be 1): V
// consecutive indices without a wrap around 2^32, `access` given the index to start at.
// When base has a difference in it (an offset such as `- padding`, or a negative constant),
// first its wide sum (wide_sum) tested to lie in [0, 2^32 - V], then, for the indices whose
// terms wrap on purpose, base itself; other sums are one induction variable already and
// keep the one test (as i64 sums they would keep their terms live: matmul's packed rows).
std::vector<Gen::Path> Gen::consecutive_paths(Value* base, Value* stride,
                                              const std::function<Value*(Value*)>& access) {
  std::function<bool(Value*, int)> has_sub = [&](Value* x, int depth) {
    if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(x)) return c->isNegative();
    auto* bo = llvm::dyn_cast<llvm::BinaryOperator>(x);
    if (depth == 0 || !bo) return false;
    const auto code = bo->getOpcode();
    if (code == llvm::Instruction::Sub) return true;
    return (code == llvm::Instruction::Add || code == llvm::Instruction::Mul) &&
           (has_sub(bo->getOperand(0), depth - 1) || has_sub(bo->getOperand(1), depth - 1));
  };
  auto unit = [this, stride](Value* fits) {
    return stride ? B.CreateAnd(
                        B.CreateICmpEQ(stride, llvm::ConstantInt::get(stride->getType(), 1)), fits)
                  : fits;
  };
  std::vector<Path> paths;
  if (has_sub(base, 3)) {
    auto wide = std::make_shared<Value*>(nullptr);
    paths.push_back({[this, base, wide, unit] {
                       *wide = wide_sum(base, 3);
                       return unit(B.CreateICmpULE(
                           *wide, B.getInt64((uint64_t{1} << 32) - static_cast<uint64_t>(V_))));
                     },
                     [wide, access] { return access(*wide); }});
  }
  paths.push_back({[this, base, unit] {
                     return unit(B.CreateICmpULE(
                         base, B.getInt32(0xffffffffu - static_cast<uint32_t>(V_ - 1))));
                   },
                   [base, access] { return access(base); }});
  return paths;
}

// Whether the active lanes of `index` are base + lane * s for base = index[0] (returned), not
// wrapping around 2^32 over the vector: one compare of the whole vector.
Value* Gen::stride_test(Value* index, Value* mask, int s, Value** base) {
  // From lane 0 (one move out of the vector); when lane 0 is off and does not fit, the caller's
  // general path runs.
  *base = B.CreateExtractElement(index, uint64_t{0});
  Value* want = B.CreateAdd(
      B.CreateVectorSplat(static_cast<unsigned>(V_), *base),
      B.CreateMul(iota(B.getInt32Ty()), B.CreateVectorSplat(static_cast<unsigned>(V_),
                                                            B.getInt32(static_cast<uint32_t>(s)))));
  Value* wrong = B.CreateAnd(mask, B.CreateICmpNE(index, want));
  Value* none_wrong = B.CreateICmpEQ(B.CreateBitCast(wrong, B.getIntNTy(V_)), B.getIntN(V_, 0));
  Value* no_wrap =
      B.CreateICmpULE(*base, B.getInt32(0xffffffffu - static_cast<uint32_t>(s * (V_ - 1))));
  return B.CreateAnd(none_wrong, no_wrap, "stride.ok");
}

// Whether the active lanes of `index` are base + lane * s with s = index[1] - index[0] either 1
// or 2 (a row, or every other element of one: a pooling window), without wrapping around 2^32.
// One test for both, so that each load has one fast path besides the gather.
Value* Gen::window_test(Value* index, Value* mask, Value** base, Value** unit_stride) {
  *base = B.CreateExtractElement(index, uint64_t{0});
  Value* s = B.CreateSub(B.CreateExtractElement(index, uint64_t{1}), *base);
  *unit_stride = B.CreateICmpEQ(s, B.getInt32(1));
  Value* want = B.CreateAdd(
      B.CreateVectorSplat(static_cast<unsigned>(V_), *base),
      B.CreateMul(iota(B.getInt32Ty()), B.CreateVectorSplat(static_cast<unsigned>(V_), s)));
  Value* wrong = B.CreateAnd(mask, B.CreateICmpNE(index, want));
  Value* fits = B.CreateICmpEQ(B.CreateBitCast(wrong, B.getIntNTy(V_)), B.getIntN(V_, 0));
  Value* small = B.CreateOr(*unit_stride, B.CreateICmpEQ(s, B.getInt32(2)));
  Value* no_wrap =
      B.CreateICmpULE(*base, B.getInt32(0xffffffffu - static_cast<uint32_t>(2 * (V_ - 1))));
  return B.CreateAnd(B.CreateAnd(fits, small), no_wrap, "window.ok");
}

// Lanes at base + lane * s for s = 1 or 2: one masked load of twice the width (only the
// elements the active lanes need), then the first half or the even elements.
Value* Gen::window_load(ValueId mem, Value* base, Value* mask, Value* unit_stride) {
  const ir::Type& t = K.type_of(mem);
  llvm::Type* et = mem_scalar_ty(t.elem);
  llvm::Type* wide = vec(et, 2 * V_);
  std::vector<int> first_half, spread_even, pick_first, pick_even;
  for (int l = 0; l < 2 * V_; ++l) {
    first_half.push_back(l < V_ ? l : V_);
    spread_even.push_back(l % 2 == 0 ? l / 2 : V_);
  }
  for (int l = 0; l < V_; ++l) {
    pick_first.push_back(l);
    pick_even.push_back(2 * l);
  }
  Value* none = llvm::Constant::getNullValue(mask->getType());
  Value* m2 = B.CreateSelect(unit_stride, B.CreateShuffleVector(mask, none, first_half),
                             B.CreateShuffleVector(mask, none, spread_even));
  Value* x2 = B.CreateMaskedLoad(wide, element_ptr(mem, base), align_of(t), m2,
                                 llvm::Constant::getNullValue(wide));
  Value* x = B.CreateSelect(unit_stride, B.CreateShuffleVector(x2, pick_first),
                            B.CreateShuffleVector(x2, pick_even));
  if (t.elem == ElemType::Bool) x = B.CreateICmpNE(x, llvm::Constant::getNullValue(x->getType()));
  return x;
}

void Gen::vload(const ir::Op& op) {
  const ValueId mem = op.operands[0], index = op.operands[1];
  if (lane_local_.count(mem)) return vlocal_access(op);
  if (!vary_[index]) return emit_scalar(op);  // one address: a scalar load, a uniform value
  if (frag_mems_.count(mem)) {  // an accumulator's elements: one gather, no test to make
    set(op.result, gather(mem, v(index), mask_));
    vary_[op.result] = 1;
    return;
  }
  Value* mask = O.checked ? vchecked_mask(op, mem, index, mem_.at(mem).extent) : mask_;
  Value* idx = v(index);
  auto gathered = [&] { return gather(mem, idx, mask); };
  Value* r = nullptr;
  auto it = affine_.find(index);
  if (it != affine_.end() && is_one(it->second.stride)) {
    // base + unit: consecutive unless base + lane wraps around 2^32.
    const Affine a = it->second;
    if (a.aligned) {
      r = contiguous_load(mem, a.base, mask);
    } else {
      r = first_path(consecutive_paths(a.base, nullptr,
                                       [&](Value* i) { return contiguous_load(mem, i, mask); }),
                     gathered);
    }
  } else if (it != affine_.end()) {
    // base + unit * stride with a stride known at run time (a tensor's, or a pooling window's
    // step times it): scalar tests for 1 (a vector load) and, for single elements, 2 (one load
    // of twice the width, its even elements).
    const Affine a = it->second;
    auto stride_is = [&](uint64_t s) {
      return B.CreateAnd(
          B.CreateICmpEQ(a.stride, llvm::ConstantInt::get(a.stride->getType(), s)),
          B.CreateICmpULE(a.base, B.getInt32(0xffffffffu - static_cast<uint32_t>(s * (V_ - 1)))));
    };
    std::vector<Path> paths = consecutive_paths(
        a.base, a.stride, [&](Value* i) { return contiguous_load(mem, i, mask); });
    if (K.type_of(mem).lanes == 1)
      paths.push_back({[&] { return stride_is(2); },
                       [&] { return window_load(mem, a.base, mask, B.getFalse()); }});
    r = first_path(paths, gathered);
  } else if (K.type_of(mem).lanes == 1) {
    // Test at run time for the common shapes (a row of a tensor whose strides are parameters,
    // every other element of one).
    Value *base = nullptr, *unit_stride = nullptr;
    r = first_path({{[&] { return window_test(idx, mask, &base, &unit_stride); },
                     [&] { return window_load(mem, base, mask, unit_stride); }}},
                   gathered);
  } else {
    r = gathered();
  }
  set(op.result, r);
  vary_[op.result] = 1;
}

void Gen::vstore(const ir::Op& op) {
  const ValueId mem = op.operands[0], index = op.operands[1], value = op.operands[2];
  if (lane_local_.count(mem)) return vlocal_access(op);
  if (!vary_[index]) {
    if (!vary_[value]) return emit_scalar(op);
    // Every active lane stores to one address: the last one's value stays, as if the units had
    // run in turn.
    Value* saved = vals_[value];
    vals_[value] = lane_value(value, last_lane(mask_));
    emit_scalar(op);
    vals_[value] = saved;
    return;
  }
  if (frag_mems_.count(mem)) return scatter(mem, v(index), widen(value), mask_);
  Value* mask = O.checked ? vchecked_mask(op, mem, index, mem_.at(mem).extent) : mask_;
  Value* x = widen(value);
  Value* idx = v(index);
  auto scattered = [&]() -> Value* {
    scatter(mem, idx, x, mask);
    return nullptr;
  };
  auto it = affine_.find(index);
  if (it != affine_.end() && is_one(it->second.stride)) {
    const Affine a = it->second;
    if (a.aligned) return contiguous_store(mem, a.base, x, mask);
    first_path(consecutive_paths(a.base, nullptr,
                                 [&](Value* i) -> Value* {
                                   contiguous_store(mem, i, x, mask);
                                   return nullptr;
                                 }),
               scattered);
    return;
  }
  if (it != affine_.end()) {
    const Affine a = it->second;
    first_path(consecutive_paths(a.base, a.stride,
                                 [&](Value* i) -> Value* {
                                   contiguous_store(mem, i, x, mask);
                                   return nullptr;
                                 }),
               scattered);
    return;
  }
  if (K.type_of(mem).lanes != 1) {
    scattered();
    return;
  }
  Value* base = nullptr;
  first_path({{[&] { return stride_test(idx, mask, 1, &base); },
               [&]() -> Value* {
                 contiguous_store(mem, base, x, mask);
                 return nullptr;
               }}},
             scattered);
}

// A local array with a row per lane: line i of lane l is at element (i * V + l) * W.
void Gen::vlocal_access(const ir::Op& op) {
  const ValueId mem = op.operands[0], index = op.operands[1];
  const ir::Type& t = K.type_of(mem);
  const int w = t.lanes;
  llvm::Type* et = mem_scalar_ty(t.elem);
  llvm::Type* vt = vec(et, V_ * w);
  const Mem& m = mem_.at(mem);
  const bool is_load = op.kind == OpKind::Load;
  // Lanes outside the mask keep their rows, unless the mask is the one the array was made under.
  Value* mask = mask_;
  const bool whole = is_true(mask_) || var_mask_.at(mem) == mask_;
  if (!vary_[index]) {
    auto access = [&]() -> Value* {
      Value* row = B.CreateMul(B.CreateZExt(v(index), B.getInt64Ty()),
                               B.getInt64(static_cast<uint64_t>(V_ * w)));
      Value* p = B.CreateInBoundsGEP(et, m.base, row);
      if (is_load) {
        Value* x = B.CreateAlignedLoad(vt, p, align_of(t));
        if (t.elem == ElemType::Bool) x = B.CreateICmpNE(x, llvm::Constant::getNullValue(vt));
        return x;
      }
      Value* x = widen(op.operands[2]);
      if (t.elem == ElemType::Bool) x = B.CreateZExt(x, vt);
      if (whole)
        B.CreateAlignedStore(x, p, align_of(t));
      else
        B.CreateMaskedStore(x, p, align_of(t), widen_mask(mask, w));
      return nullptr;
    };
    Value* r = checked(op, mem, v(index),
                       is_load ? ty(K.type_of(op.result).with_lanes(V_ * w)) : nullptr, access);
    if (is_load) {
      set(op.result, r);
      vary_[op.result] = 1;
    }
    return;
  }
  if (O.checked) mask = vchecked_mask(op, mem, index, m.extent);
  // Row index * V + lane, then the line's elements.
  Value* idx =
      B.CreateAdd(B.CreateMul(v(index), B.CreateVectorSplat(static_cast<unsigned>(V_),
                                                            B.getInt32(static_cast<uint32_t>(V_)))),
                  iota(B.getInt32Ty()));
  Value* ptrs = element_ptrs(B, et, m.base, idx, w, V_);
  if (is_load) {
    Value* x = B.CreateMaskedGather(vt, ptrs, align_of(t), widen_mask(mask, w),
                                    llvm::Constant::getNullValue(vt));
    if (t.elem == ElemType::Bool) x = B.CreateICmpNE(x, llvm::Constant::getNullValue(vt));
    set(op.result, x);
    vary_[op.result] = 1;
    return;
  }
  Value* x = widen(op.operands[2]);
  if (t.elem == ElemType::Bool) x = B.CreateZExt(x, vt);
  B.CreateMaskedScatter(x, ptrs, align_of(t), widen_mask(mask, w));
}

// Variables declared in the loop hold a vector (one line per lane); a write under a narrower
// mask than the declaration's keeps the other lanes' values. Variables of the cube (uniform)
// stay scalar.
void Gen::vvar(const ir::Op& op) {
  switch (op.kind) {
    case OpKind::Var: {
      const ir::Type line = K.type_of(op.operands[0]);
      llvm::Type* vt = ty(line.with_lanes(V_ * line.lanes));
      llvm::AllocaInst* a = entry_alloca(vt, nullptr, fmt::format("var{}", op.result));
      vars_[op.result] = a;
      var_mask_[op.result] = mask_;
      B.CreateStore(widen(op.operands[0]), a);
      return;
    }
    case OpKind::VarRead: {
      llvm::AllocaInst* a = vars_.at(op.operands[0]);
      set(op.result, B.CreateLoad(a->getAllocatedType(), a));
      vary_[op.result] = var_mask_.count(op.operands[0]) ? 1 : 0;
      return;
    }
    default: {
      const ValueId var = op.operands[0], value = op.operands[1];
      llvm::AllocaInst* a = vars_.at(var);
      auto vm = var_mask_.find(var);
      if (vm == var_mask_.end()) {
        // A uniform variable: every active lane writes the same value.
        B.CreateStore(vary_[value] ? lane_value(value, first_lane(mask_)) : v(value), a);
        return;
      }
      Value* x = widen(value);
      if (!is_true(mask_) && vm->second != mask_)
        x = B.CreateSelect(widen_mask(mask_, K.type_of(value).lanes), x,
                           B.CreateLoad(a->getAllocatedType(), a));
      B.CreateStore(x, a);
      return;
    }
  }
}

void Gen::vassert(const ir::Op& op) {
  if (!vary_[op.operands[0]]) return emit_scalar(op);
  const uint32_t id = static_cast<uint32_t>(info_.asserts.size());
  info_.asserts.push_back(AssertSite{op.attr.s, K.loc_string(op.loc)});
  Value* failed = B.CreateAnd(mask_, B.CreateNot(v(op.operands[0])));
  auto* fail = llvm::BasicBlock::Create(C, "assert.fail", F);
  auto* cont = llvm::BasicBlock::Create(C, "assert.ok", F);
  B.CreateCondBr(any(failed), fail, cont);
  B.SetInsertPoint(fail);
  auto callee = M.getOrInsertFunction(
      "kiln_rt_assert_failed",
      llvm::FunctionType::get(
          B.getVoidTy(), {B.getPtrTy(), B.getInt32Ty(), B.getInt32Ty(), B.getInt32Ty()}, false));
  B.CreateCall(callee, {state_, B.getInt32(id), cube_, B.CreateAdd(vu_, first_lane(failed))});
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
}

// Shared-memory counters: a shared integer array that the units loop only adds to atomically,
// ignoring the old values (a histogram's bins), gets a private copy per lane for the loop, laid
// out bin-major (bin b of lane l at b * V + l): the lanes of a vector never update one address,
// so their increments do not wait for each other. The copies start at zero and are added into
// the shared array when the loop ends, before any other loop can read it. Only where the adds
// are many (inside a unit-strided loop), the array small (64 KiB of copies at most), and not in
// checked mode (which reports each access).
void Gen::privatize(const ir::Op& units, int width) {
  private_.clear();
  if (O.checked) return;
  std::unordered_map<ValueId, bool> candidate;  // shared array -> only unused atomic adds
  std::unordered_set<ValueId> used;
  ir::walk(units.regions[0], [&](const ir::Op& op) {
    for (ValueId o : op.operands) used.insert(o);
  });
  ir::walk(units.regions[0], [&](const ir::Op& op) {
    if (op.operands.empty()) return;
    const ValueId m = op.operands[0];
    if (K.type_of(m).kind != ir::TypeKind::Shared) return;
    if (op.kind == OpKind::Len) return;
    const ir::Type& t = K.type_of(m);
    const bool adds = op.kind == OpKind::AtomicAdd && ir::is_int(t.elem) && t.lanes == 1 &&
                      !used.count(op.result);
    auto it = candidate.find(m);
    candidate[m] = (it == candidate.end() || it->second) && adds;
  });
  for (const auto& [m, ok] : candidate) {
    const ir::Type& t = K.type_of(m);
    const uint64_t bytes =
        uint64_t{t.count} * static_cast<uint64_t>(width) * ir::elem_bytes(t.elem);
    if (!ok || bytes > 64 * 1024) continue;
    llvm::Type* et = mem_scalar_ty(t.elem);
    llvm::AllocaInst* copies = entry_alloca(et, B.getInt32(t.count * static_cast<uint32_t>(width)),
                                            fmt::format("private{}", m));
    copies->setAlignment(llvm::Align(64));
    B.CreateMemSet(copies, B.getInt8(0), B.getInt64(bytes), llvm::Align(64));
    private_[m] = copies;
  }
}

void Gen::merge_private(int width) {
  for (const auto& [m, copies] : private_) {
    const ir::Type& t = K.type_of(m);
    llvm::Type* et = mem_scalar_ty(t.elem);
    llvm::Type* vt = vec(et, width);
    auto* pre = B.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(C, "merge.header", F);
    auto* body = llvm::BasicBlock::Create(C, "merge.body", F);
    auto* exit = llvm::BasicBlock::Create(C, "merge.exit", F);
    B.CreateBr(header);
    B.SetInsertPoint(header);
    auto* b = B.CreatePHI(B.getInt32Ty(), 2, "bin");
    b->addIncoming(B.getInt32(0), pre);
    B.CreateCondBr(B.CreateICmpULT(b, B.getInt32(t.count)), body, exit);
    B.SetInsertPoint(body);
    Value* lanes = B.CreateAlignedLoad(
        vt,
        B.CreateInBoundsGEP(
            et, copies,
            B.CreateMul(B.CreateZExt(b, B.getInt64Ty()), B.getInt64(static_cast<uint64_t>(width)))),
        align_of(t));
    Value* p = element_ptr(m, b);
    B.CreateAlignedStore(
        B.CreateAdd(B.CreateAlignedLoad(et, p, align_of(t)), B.CreateAddReduce(lanes)), p,
        align_of(t));
    b->addIncoming(B.CreateAdd(b, B.getInt32(1)), body);
    B.CreateBr(header);
    B.SetInsertPoint(exit);
  }
  private_.clear();
}

// An add to a lane's private copy: bin b of lane l is at b * V + l, so the lanes never collide.
void Gen::private_add(const ir::Op& op) {
  const ValueId m = op.operands[0];
  const ir::Type& t = K.type_of(m);
  llvm::Type* et = mem_scalar_ty(t.elem);
  llvm::AllocaInst* copies = private_.at(m);
  auto one_lane = [&](Value* lane) {
    Value* bin = lane_value(op.operands[1], lane);
    Value* at = B.CreateAdd(
        B.CreateMul(B.CreateZExt(bin, B.getInt64Ty()), B.getInt64(static_cast<uint64_t>(V_))),
        B.CreateZExt(lane, B.getInt64Ty()));
    Value* p = B.CreateInBoundsGEP(et, copies, at);
    B.CreateAlignedStore(
        B.CreateAdd(B.CreateAlignedLoad(et, p, align_of(t)), lane_value(op.operands[2], lane)), p,
        align_of(t));
  };
  for_active_lanes(mask_, one_lane);
}

// Atomics and prints: the scalar code once per active lane, in unit order.
void Gen::scalarize(const ir::Op& op) {
  const ValueId r = op.result;
  llvm::AllocaInst* out = nullptr;
  int w = 1;
  llvm::Type* et = nullptr;
  if (r != ir::kNoValue) {
    const ir::Type& t = K.type_of(r);
    w = t.lanes;
    et = mem_scalar_ty(t.elem);
    out = entry_alloca(et, B.getInt32(static_cast<uint32_t>(V_ * w)), fmt::format("lanes{}", r));
    out->setAlignment(llvm::Align(64));  // read back as one vector
  }
  auto one_lane = [&](Value* lane) {
    std::vector<std::pair<ValueId, Value*>> saved;
    for (ValueId o : op.operands) {
      bool seen = false;
      for (auto& s : saved) seen = seen || s.first == o;
      if (seen || !vary_[o]) continue;
      saved.emplace_back(o, vals_[o]);
      vals_[o] = lane_value(o, lane);
    }
    unit_ = B.CreateAdd(vu_, lane, "unit");
    emit_scalar(op);
    unit_ = nullptr;
    if (out) {
      Value* x = vals_[r];
      const ir::Type& t = K.type_of(r);
      if (t.elem == ElemType::Bool) x = B.CreateZExt(x, vec(et, w));
      Value* at = B.CreateMul(lane, B.getInt32(static_cast<uint32_t>(w)));
      B.CreateStore(x, B.CreateInBoundsGEP(et, out, at));
    }
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) vals_[it->first] = it->second;
  };
  // Prints, rarer and larger, always in a loop over the active lanes.
  if (op.kind == OpKind::Print)
    for_each_lane(mask_, one_lane);
  else
    for_active_lanes(mask_, one_lane);
  if (!out) return;
  llvm::Type* vt = vec(et, V_ * w);
  Value* x = B.CreateLoad(vt, out);
  if (K.type_of(r).elem == ElemType::Bool) x = B.CreateICmpNE(x, llvm::Constant::getNullValue(vt));
  set(r, x);
  vary_[r] = 1;
}

}  // namespace kiln::cpu::detail
