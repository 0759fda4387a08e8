// Tensor memory, tcgen05 and mbarriers on the CPU. The unit-loop lowering keeps these cube ops
// at cube level, once per cube; each becomes a call to its kiln_rt_ function (compiler/cpu/abi.cpp)
// with the cube's TmemBlock, which lives at the end of the shared arena. A multiply runs when it
// is issued, so a commit completes its mbarrier phase at once and a wait only checks that the
// phase it names has completed. A misuse the function reports becomes a failed assert naming
// the op's DSL line, as the emulator reports it.
#include "compiler/cpu/gen.h"

namespace kiln::cpu::detail {

namespace {

// The misuse codes each op can return: consecutive, from first to last.
std::pair<uint32_t, uint32_t> misuse_codes(OpKind k) {
  switch (k) {
    case OpKind::MbarWait:
      return {kMbarNotInitialized, kMbarNeverCompletes};
    case OpKind::Tcgen05Commit:
      return {kMbarNotInitialized, kMbarNotInitialized};
    case OpKind::TmemAlloc:
      return {kTmemFull, kTmemFull};
    case OpKind::TmemFree:
      return {kTmemFreeNotAllocated, kTmemFreeInFlight};
    case OpKind::Tcgen05Mma:
      return {kMmaNotAllocated, kMmaPastArena};
    case OpKind::TmemLoad:
      return {kLoadNotAllocated, kLoadPastEnd};
    case OpKind::MbarArriveTx:
      return {kMbarNotInitialized, kMbarNotInitialized};
    case OpKind::TmaLoad:
      return {kMbarNotInitialized, kTmaIm2colOutside};
    case OpKind::TmaLoadMulticast:
      return {kMbarNotInitialized, kMulticastOutside};
    case OpKind::SyncCluster:
      return {kClusterStuck, kClusterStuck};
    case OpKind::TmaStore:
      return {kTmaMisaligned, kTmaPastEnd};
    default:
      return {0, 0};
  }
}

}  // namespace

void Gen::place_tmem() {
  bool uses = false;
  ir::walk(K.body, [&](const ir::Op& op) {
    uses = uses || ir::is_cube_op(op.kind) || op.kind == OpKind::TmemRead;
    if (op.kind == OpKind::TmemAlloc && tmem_alloc_at_.empty())
      tmem_alloc_at_ = K.loc_string(op.loc);
  });
  if (!uses) return;
  shared_bytes_ = (shared_bytes_ + 63) / 64 * 64;
  tmem_offset_ = shared_bytes_;
  tmem_ = B.CreateConstInBoundsGEP1_32(B.getInt8Ty(), shared_, shared_bytes_, "tmem");
  shared_bytes_ += static_cast<uint32_t>(sizeof(TmemBlock));
  info_.shared_bytes = shared_bytes_;
}

void Gen::tmem_cube_start() {
  if (tmem_) B.CreateMemSet(tmem_, B.getInt8(0), 64, llvm::MaybeAlign(64));
}

void Gen::tmem_cube_end() {
  if (!tmem_) return;
  auto callee = M.getOrInsertFunction(
      "kiln_rt_tmem_end", llvm::FunctionType::get(B.getInt32Ty(), {B.getPtrTy()}, false));
  report_misuse(B.CreateCall(callee, {tmem_}), kTmemNotFreed, kTmemNotFreed, tmem_alloc_at_);
}

// code (0 or one of first..last) -> a failed assert at the site of that code's message.
void Gen::report_misuse(Value* code, uint32_t first, uint32_t last, const std::string& where,
                        Value* unit) {
  const auto base = static_cast<uint32_t>(info_.asserts.size());
  for (uint32_t c = first; c <= last; ++c)
    info_.asserts.push_back(AssertSite{tmem_misuse_message(c), where});
  auto* fail = llvm::BasicBlock::Create(C, "tmem.misuse", F);
  auto* cont = llvm::BasicBlock::Create(C, "tmem.ok", F);
  B.CreateCondBr(B.CreateICmpEQ(code, B.getInt32(0)), cont, fail);
  B.SetInsertPoint(fail);
  auto callee = M.getOrInsertFunction(
      "kiln_rt_assert_failed",
      llvm::FunctionType::get(
          B.getVoidTy(), {B.getPtrTy(), B.getInt32Ty(), B.getInt32Ty(), B.getInt32Ty()}, false));
  B.CreateCall(callee, {state_, B.CreateAdd(B.getInt32(base - first), code), cube_,
                        unit ? unit : B.getInt32(0)});
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
}

// A tcgen05 shared-memory descriptor as the GPU encodes it (compiler/cuda/prelude.cuh,
// tcgen05_desc_bits), with the address taken from the start of the cube's arena.
void Gen::tcgen05_desc(const ir::Op& op) {
  Value* at =
      B.CreatePtrDiff(B.getInt8Ty(), element_ptr(op.operands[0], v(op.operands[1])), shared_);
  auto field = [&](Value* x, uint64_t shift) {
    Value* f = B.CreateAnd(B.CreateLShr(B.CreateZExt(x, B.getInt64Ty()), 4), 0x3fff);
    return B.CreateShl(f, shift);
  };
  const uint64_t mode = op.attr.i == 128 ? 2 : op.attr.i == 64 ? 4 : op.attr.i == 32 ? 6 : 0;
  Value* d = B.CreateLShr(B.CreateAnd(at, B.getInt64(0x3ffff)), 4);
  d = B.CreateOr(d, field(v(op.operands[2]), 16));
  d = B.CreateOr(d, field(v(op.operands[3]), 32));
  d = B.CreateOr(d, B.getInt64(uint64_t{1} << 46 | mode << 61));
  set(op.result, d);
}

void Gen::cube_op(const ir::Op& op) {
  // A prefetch is a hint for the GPU's L2; the CPU's stores are done when they return.
  if (op.kind == OpKind::TmaPrefetch || op.kind == OpKind::TmaStoreWait) return;
  KILN_CHECK(tmem_, "a cube op in a kernel without a tensor-memory block");
  llvm::Type* i32 = B.getInt32Ty();
  llvm::Type* i64 = B.getInt64Ty();
  llvm::Type* ptr = B.getPtrTy();
  auto call = [&](const char* name, std::vector<llvm::Type*> types, std::vector<Value*> args) {
    auto callee = M.getOrInsertFunction(name, llvm::FunctionType::get(i32, types, false));
    return B.CreateCall(callee, args);
  };
  auto bar = [&] { return element_ptr(op.operands[0], v(op.operands[1])); };
  Value* code = nullptr;
  switch (op.kind) {
    case OpKind::MbarInit:
      call("kiln_rt_mbar_init", {ptr, i32}, {bar(), B.getInt32(static_cast<uint32_t>(op.attr.i))});
      return;
    case OpKind::MbarWait:
      code = call("kiln_rt_mbar_wait", {ptr, ptr, i32}, {tmem_, bar(), v(op.operands[2])});
      break;
    case OpKind::MbarArriveTx:
      code = call("kiln_rt_mbar_arrive_tx", {ptr, i32},
                  {bar(), B.getInt32(static_cast<uint32_t>(op.attr.i))});
      break;
    case OpKind::SyncCluster:
      // Unit-loop fission has made it a cube barrier; the other cubes of the cluster run until
      // they reach it too.
      if (K.cubes_per_cluster() == 1) return;
      code = call("kiln_rt_cluster_sync", {}, {});
      break;
    case OpKind::TmaLoad:
    case OpKind::TmaLoadMulticast:
    case OpKind::TmaStore: {
      // The tensor's shape and strides, and the coordinates, in arrays on the entry's stack.
      const ir::TmaOperands at = ir::tma_operands(op.kind);
      const Mem& t = mem_.at(op.operands[at.tensor]);
      const auto rank = static_cast<uint32_t>(t.shape.size());
      llvm::AllocaInst* dims = entry_alloca(i32, B.getInt32(2 * rank),
                                            fmt::format("tma.dims{}", op.operands[at.tensor]));
      // An im2col box's offsets (u16) follow its coordinates, widened.
      const auto offsets = static_cast<uint32_t>(op.operands.size() - at.coords - rank);
      llvm::AllocaInst* coords = entry_alloca(i32, B.getInt32(rank + offsets),
                                              fmt::format("tma.coords{}", op.operands[at.tensor]));
      for (uint32_t d = 0; d < rank; ++d) {
        B.CreateStore(t.shape[d], B.CreateConstInBoundsGEP1_32(i32, dims, d));
        B.CreateStore(t.stride[d], B.CreateConstInBoundsGEP1_32(i32, dims, rank + d));
        B.CreateStore(v(op.operands[at.coords + d]), B.CreateConstInBoundsGEP1_32(i32, coords, d));
      }
      for (uint32_t o = 0; o < offsets; ++o)
        B.CreateStore(B.CreateZExt(v(op.operands[at.coords + rank + o]), i32),
                      B.CreateConstInBoundsGEP1_32(i32, coords, rank + o));
      const ir::Type& st = type(op.operands[at.shared]);
      Value* shared = element_ptr(op.operands[at.shared], B.getInt32(0));
      Value* esize = B.getInt32(static_cast<uint32_t>(ir::elem_bytes(st.elem)));
      if (op.kind == OpKind::TmaLoad)
        code = call("kiln_rt_tma_load", {ptr, ptr, i32, i32, ptr, ptr, ptr, i64, i32},
                    {element_ptr(op.operands[3], v(op.operands[4])), shared, B.getInt32(st.count),
                     v(op.operands[at.index]), t.base, dims, coords, B.getInt64(op.attr.i), esize});
      else if (op.kind == OpKind::TmaLoadMulticast)
        code = call("kiln_rt_tma_load_multicast",
                    {ptr, ptr, i32, i32, ptr, ptr, ptr, i64, i32, i32, ptr},
                    {element_ptr(op.operands[3], v(op.operands[4])), shared, B.getInt32(st.count),
                     v(op.operands[at.index]), t.base, dims, coords, B.getInt64(op.attr.i), esize,
                     B.CreateZExt(v(op.operands[5]), i32), shared_});
      else if (ir::tma_reduce(op.attr.i) != ir::TmaReduce::None)
        code = call("kiln_rt_tma_reduce", {ptr, ptr, i32, i32, ptr, ptr, i64, i32},
                    {t.base, shared, B.getInt32(st.count), v(op.operands[at.index]), dims, coords,
                     B.getInt64(op.attr.i), B.getInt32(static_cast<uint32_t>(st.elem))});
      else
        code = call("kiln_rt_tma_store", {ptr, ptr, i32, i32, ptr, ptr, i64, i32},
                    {t.base, shared, B.getInt32(st.count), v(op.operands[at.index]), dims, coords,
                     B.getInt64(op.attr.i), esize});
      break;
    }
    case OpKind::Tcgen05Commit:
      code = call("kiln_rt_tcgen05_commit", {ptr, ptr}, {tmem_, bar()});
      break;
    case OpKind::TmemAlloc: {
      Value* slot = entry_alloca(i32, nullptr, fmt::format("tmem.slot{}", op.result));
      code = call("kiln_rt_tmem_alloc", {ptr, i32, ptr},
                  {tmem_, B.getInt32(static_cast<uint32_t>(op.attr.i)), slot});
      set(op.result, B.CreateLoad(i32, slot));
      break;
    }
    case OpKind::TmemFree:
      code = call("kiln_rt_tmem_free", {ptr, i32, i32},
                  {tmem_, v(op.operands[0]), B.getInt32(static_cast<uint32_t>(op.attr.i))});
      break;
    case OpKind::Tcgen05Mma:
      code = call("kiln_rt_tcgen05_mma", {ptr, ptr, i32, i32, i64, i64, i32, i32, i32},
                  {tmem_, shared_, B.getInt32(tmem_offset_), v(op.operands[0]), v(op.operands[1]),
                   v(op.operands[2]), B.CreateZExt(v(op.operands[3]), i32),
                   // the input type, and the majors in bits 8 and 9
                   B.getInt32(static_cast<uint32_t>(
                       (op.attr.i & 0xff) | ((op.attr.i >> ir::kTcgen05MajorShift) & 3) << 8)),
                   B.getInt32(static_cast<uint32_t>((op.attr.i >> 8) & 0xffff))});
      break;
    case OpKind::TmemLoad:
      code = call(
          "kiln_rt_tmem_load", {ptr, ptr, i32, i32, i32, i32},
          {tmem_, element_ptr(op.operands[0], B.getInt32(0)), mem_.at(op.operands[0]).len,
           v(op.operands[1]), v(op.operands[2]), B.getInt32(static_cast<uint32_t>(op.attr.i))});
      break;
    default:
      KILN_CHECK(false, "cube_op of an op that is not a cube op");
  }
  const auto [first, last] = misuse_codes(op.kind);
  report_misuse(code, first, last, K.loc_string(op.loc));
}

// A unit's row of tensor memory: kiln_rt_tmem_read copies the lanes into a slot of the
// function's entry (zeros after a misuse, which fails an assert at the op's line). The units
// loop around it runs unit by unit (units_width).
void Gen::tmem_read(const ir::Op& op) {
  KILN_CHECK(tmem_ && unit_, "tmem.read outside a units loop or without a tensor-memory block");
  const ir::Type& t = type(op.result);
  llvm::Type* i32 = B.getInt32Ty();
  // The slot has the result's type, so it has that type's alignment for the load below.
  llvm::AllocaInst* slot = entry_alloca(ty(t), nullptr, fmt::format("tmem.read{}", op.result));
  auto callee = M.getOrInsertFunction(
      "kiln_rt_tmem_read",
      llvm::FunctionType::get(i32, {B.getPtrTy(), i32, i32, i32, i32, B.getPtrTy()}, false));
  Value* code = B.CreateCall(callee, {tmem_, v(op.operands[0]), v(op.operands[1]), unit_,
                                      B.getInt32(static_cast<uint32_t>(t.lanes)), slot});
  report_misuse(code, kReadNotAllocated, kReadInFlight, K.loc_string(op.loc), unit_);
  set(op.result, B.CreateLoad(ty(t), slot));
}

// A unit's read of another cube's shared memory: kiln_rt_cluster_shared gives that cube's arena
// (null for a rank outside the cluster: a fault, whether checked or not, and zero), where the
// array sits at the offset it has in this cube's. The index is checked in checked mode.
void Gen::cluster_load(const ir::Op& op) {
  KILN_CHECK(unit_, "cluster.load outside a units loop");
  const ir::Type& rt = type(op.result);
  llvm::Type* vt = ty(rt);
  auto callee = M.getOrInsertFunction(
      "kiln_rt_cluster_shared",
      llvm::FunctionType::get(B.getPtrTy(), {B.getInt32Ty(), B.getPtrTy()}, false));
  Value* rank = v(op.operands[1]);
  Value* base = B.CreateCall(callee, {rank, shared_});
  const auto rank_site = static_cast<uint32_t>(info_.accesses.size());
  info_.accesses.push_back(AccessSite{
      "cluster.load", fmt::format("the cube ranks of a cluster of {}", K.cubes_per_cluster()),
      K.loc_string(op.loc)});
  auto* bad = llvm::BasicBlock::Create(C, "cluster.rank.bad", F);
  auto* ok = llvm::BasicBlock::Create(C, "cluster.rank.ok", F);
  auto* cont = llvm::BasicBlock::Create(C, "cluster.load", F);
  B.CreateCondBr(B.CreateIsNull(base), bad, ok);
  B.SetInsertPoint(bad);
  call_fault(rank_site, rank, B.getInt32(K.cubes_per_cluster()), unit_);
  B.CreateBr(cont);
  B.SetInsertPoint(ok);
  Value* x = checked(op, op.operands[0], v(op.operands[2]), vt, [&]() -> Value* {
    const ir::Type& mt = type(op.operands[0]);
    Value* at =
        B.CreatePtrDiff(B.getInt8Ty(), element_ptr(op.operands[0], v(op.operands[2])), shared_);
    Value* y =
        B.CreateAlignedLoad(mem_ty(mt), B.CreateInBoundsGEP(B.getInt8Ty(), base, at), align_of(mt));
    if (mt.elem == ElemType::Bool) y = B.CreateICmpNE(y, llvm::Constant::getNullValue(mem_ty(mt)));
    return y;
  });
  auto* ok_end = B.GetInsertBlock();
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
  auto* phi = B.CreatePHI(vt, 2);
  phi->addIncoming(x, ok_end);
  phi->addIncoming(llvm::Constant::getNullValue(vt), bad);
  set(op.result, phi);
}

// A unit's cp.async: kiln_rt_copy_async copies its 16 bytes when it is issued (so commits and
// waits have nothing to do on the CPU); the units loop around it runs unit by unit
// (units_width).
void Gen::copy_async(const ir::Op& op) {
  KILN_CHECK(unit_, "async.copy outside a units loop");
  llvm::Type* i32 = B.getInt32Ty();
  const ir::Type& st = type(op.operands[0]);
  const Mem& src = mem_.at(op.operands[2]);
  auto callee = M.getOrInsertFunction(
      "kiln_rt_copy_async",
      llvm::FunctionType::get(i32, {B.getPtrTy(), i32, i32, B.getPtrTy(), i32, i32, i32, i32},
                              false));
  Value* code = B.CreateCall(
      callee, {element_ptr(op.operands[0], B.getInt32(0)), B.getInt32(st.count), v(op.operands[1]),
               src.base, src.len, v(op.operands[3]), B.CreateZExt(v(op.operands[4]), i32),
               B.getInt32(static_cast<uint32_t>(ir::elem_bytes(st.elem)))});
  report_misuse(code, kCopyMisaligned, kCopyPastEnd, K.loc_string(op.loc), unit_);
}

}  // namespace kiln::cpu::detail
