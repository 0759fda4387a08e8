// Matrix fragments on the CPU. The unit-loop lowering keeps fragment ops at plane level (once per
// plane, on the plane's copy from frag.plane); here each becomes SIMD code over the fragment's
// rows: loads and stores move rows as vectors, and frag.mma is a register-blocked micro-kernel:
// a block of accumulator rows stays in vector registers while k runs, each step loading one row
// of B and broadcasting one element of A per accumulator row into a fused multiply-add (8-bit
// inputs on a VNNI CPU: four k per step, in one vpdpbusd).
#include <llvm/IR/IntrinsicsX86.h>

#include "compiler/cpu/gen.h"

namespace kiln::cpu::detail {

namespace {

constexpr uint32_t kPlaneWidth = 32;  // plane_dim on the CPU (ir/ir.h)

bool int_frag(const ir::Type& t) {
  return ir::is_int(t.elem);
}

// Bytes of one plane's copy of a fragment: rows x cols 4-byte elements.
uint64_t frag_bytes(const ir::Type& t) {
  return uint64_t{static_cast<uint64_t>(t.frag_rows())} * t.frag_cols() * 4;
}

// Elements moved per vector: whole rows up to 16.
int frag_width(const ir::Type& t) {
  return std::min(t.frag_cols(), 16);
}

}  // namespace

// How a plane's copy of a fragment is laid out. Wide: row-major, one f32 or i32 per element. On
// a CPU with vpdpbusd (AVX-512 VNNI, or AVX-VNNI on 256-bit CPUs), 8-bit inputs stay bytes, in the
// order vpdpbusd multiplies them four k at a time: Bytes (an A fragment: row-major, each byte XOR
// 0x80, see frag_mma_vnni) and Quads (a B fragment: k / 4 groups of n columns x 4 bytes, the four k
// of a column side by side).
Gen::FragForm Gen::frag_form(const ir::Type& t) const {
  if (!O.target.vnni || t.use == ir::FragUse::Acc ||
      (t.elem != ElemType::I8 && t.elem != ElemType::U8))
    return FragForm::Wide;
  return t.use == ir::FragUse::A ? FragForm::Bytes : FragForm::Quads;
}

void Gen::place_frag(const ir::Op& op) {
  const ir::Type& t = type(op.result);
  const uint32_t planes = (K.units_per_cube() + kPlaneWidth - 1) / kPlaneWidth;
  const uint64_t bytes = frag_bytes(t) * planes;
  const uint32_t offset = shared_bytes_;
  shared_bytes_ += static_cast<uint32_t>((bytes + 63) / 64 * 64);
  info_.shared_bytes = shared_bytes_;
  vals_[op.result] = B.CreateConstInBoundsGEP1_32(B.getInt8Ty(), shared_, offset,
                                                  fmt::format("frag{}", op.result));
}

// A memory element converted to what the fragment holds: f32 (f16, bf16, f8 and f32 inputs, the
// latter rounded to tf32 as a tensor core reads them) or i32.
Value* Gen::frag_to_compute(Value* x, const ir::Type& frag, ElemType from) {
  const int lanes =
      x->getType()->isVectorTy()
          ? static_cast<int>(llvm::cast<llvm::FixedVectorType>(x->getType())->getNumElements())
          : 1;
  ir::Type lt = ir::Type::value(from, lanes);
  switch (from) {
    case ElemType::F16:
    case ElemType::BF16:
    case ElemType::F8E4M3:
    case ElemType::F8E5M2:
      return promote(x, lt);
    case ElemType::F32: {
      if (frag.use == ir::FragUse::Acc) return x;
      // cvt.rna.tf32.f32: round the 13 low mantissa bits away, ties away from zero; infinities
      // and NaN keep their bits.
      llvm::Type* it = vec(B.getInt32Ty(), lanes);
      auto k = [&](uint32_t c) { return llvm::ConstantInt::get(it, c); };
      Value* bits = B.CreateBitCast(x, it);
      Value* rounded = B.CreateAnd(B.CreateAdd(bits, k(0x1000)), k(0xffffe000u));
      Value* special = B.CreateICmpEQ(B.CreateAnd(bits, k(0x7f800000u)), k(0x7f800000u));
      return B.CreateBitCast(B.CreateSelect(special, bits, rounded), x->getType());
    }
    case ElemType::I8:
      return B.CreateSExt(x, vec(B.getInt32Ty(), lanes));
    case ElemType::U8:
      return B.CreateZExt(x, vec(B.getInt32Ty(), lanes));
    default:
      return x;  // i32 accumulators
  }
}

// A fragment's f32/i32 value as an element of type `to`, for stores.
Value* Gen::frag_from_compute(Value* x, ElemType to, int lanes) {
  const ir::Type t = ir::Type::value(to, lanes);
  if (to == ElemType::F16 || to == ElemType::BF16 || ir::is_f8(to)) return demote(x, t);
  return x;
}

// Rounds an f32/i32 fragment value to what an accumulator of type `to` holds (frag.cast).
Value* Gen::frag_round(Value* x, ElemType to) {
  llvm::Type* xt = x->getType();
  const int lanes = static_cast<int>(llvm::cast<llvm::FixedVectorType>(xt)->getNumElements());
  llvm::Type* f32 = vec(B.getFloatTy(), lanes);
  const bool from_int = xt->getScalarType()->isIntegerTy();
  switch (to) {
    case ElemType::I32:
      return from_int ? x : saturating_cast(x, vec(B.getInt32Ty(), lanes), true);
    case ElemType::F32:
      return from_int ? B.CreateSIToFP(x, f32) : x;
    case ElemType::F16:
    case ElemType::BF16: {
      // Through f64 from integers (exact), so the value is rounded once.
      Value* f = from_int ? B.CreateSIToFP(x, vec(B.getDoubleTy(), lanes)) : x;
      const ir::Type t = ir::Type::value(to, lanes);
      if (to == ElemType::F16) return promote(B.CreateFPTrunc(f, ty(t)), t);
      if (from_int) f = round_to_odd_f32(f, lanes);
      return promote(to_bf16(f, lanes), t);
    }
    case ElemType::F8E4M3:
    case ElemType::F8E5M2: {
      // From integers through f32: exact up to 2^24, and larger ones saturate either way.
      const ir::Type t = ir::Type::value(to, lanes);
      return promote(to_f8(from_int ? B.CreateSIToFP(x, f32) : x, to, lanes), t);
    }
    default:
      KILN_CHECK(false, "frag.cast to an element type the verifier rejects");
      return x;
  }
}

void Gen::emit_frag(const ir::Op& op) {
  switch (op.kind) {
    case OpKind::FragPlane: {
      const ir::Type& t = type(op.result);
      Value* offset =
          B.CreateMul(B.CreateZExt(v(op.operands[1]), B.getInt64Ty()), B.getInt64(frag_bytes(t)));
      set(op.result, B.CreateInBoundsGEP(B.getInt8Ty(), v(op.operands[0]), offset));
      frag_plane_of_[op.result] = v(op.operands[1]);
      return;
    }
    case OpKind::WgmmaDesc:
      wgmma_desc(op);
      return;
    case OpKind::Wgmma:
      wgmma(op);
      return;
    case OpKind::FragFill: {
      const ir::Type& t = type(op.operands[0]);
      if (const FragForm form = frag_form(t); form != FragForm::Wide) {
        Value* x = v(op.operands[1]);
        if (form == FragForm::Bytes) x = B.CreateXor(x, B.getInt8(0x80));
        B.CreateMemSet(v(op.operands[0]), x, uint64_t(t.frag_rows()) * t.frag_cols(),
                       llvm::MaybeAlign(4));
        return;
      }
      const int w = frag_width(t);
      Value* x = frag_to_compute(v(op.operands[1]), t, t.elem);
      Value* line = B.CreateVectorSplat(static_cast<unsigned>(w), x);
      const uint64_t count = static_cast<uint64_t>(t.frag_rows()) * t.frag_cols() / w;
      for (uint64_t i = 0; i < count; ++i)
        B.CreateAlignedStore(line,
                             B.CreateConstInBoundsGEP1_64(line->getType(), v(op.operands[0]), i),
                             llvm::Align(4));
      return;
    }
    case OpKind::FragLoad:
    case OpKind::FragLdmatrix:
      frag_load(op);
      return;
    case OpKind::FragStore:
      frag_store(op);
      return;
    case OpKind::FragMma:
      frag_mma(op);
      return;
    case OpKind::FragMmaScaled:
      frag_mma_scaled(op);
      return;
    case OpKind::FragCast: {
      const ir::Type& d = type(op.operands[0]);
      const ir::Type& src = type(op.operands[1]);
      const int w = frag_width(d);
      llvm::Type* st = vec(int_frag(src) ? B.getInt32Ty() : B.getFloatTy(), w);
      const uint64_t count = static_cast<uint64_t>(d.frag_rows()) * d.frag_cols() / w;
      for (uint64_t i = 0; i < count; ++i) {
        Value* x = B.CreateAlignedLoad(st, B.CreateConstInBoundsGEP1_64(st, v(op.operands[1]), i),
                                       llvm::Align(4));
        Value* r = frag_round(x, d.elem);
        B.CreateAlignedStore(r, B.CreateConstInBoundsGEP1_64(r->getType(), v(op.operands[0]), i),
                             llvm::Align(4));
      }
      return;
    }
    default:
      KILN_CHECK(false, "emit_frag called for another op");
  }
}

// The element indices of row r, columns [c0, c0 + w) of a tile at `index` (u32 arithmetic, as
// the IR computes indices): index + r * stride + c (row-major) or index + c * stride + r.
Value* Gen::frag_indices(Value* index, Value* stride, int r, int c0, int w, bool col_major) {
  std::vector<llvm::Constant*> cs;
  for (int c = 0; c < w; ++c) cs.push_back(B.getInt32(static_cast<uint32_t>(c0 + c)));
  Value* cols = llvm::ConstantVector::get(cs);
  Value* s = B.CreateVectorSplat(static_cast<unsigned>(w), stride);
  Value* base = B.CreateVectorSplat(static_cast<unsigned>(w), index);
  Value* rr = B.CreateVectorSplat(static_cast<unsigned>(w), B.getInt32(static_cast<uint32_t>(r)));
  return B.CreateAdd(base, col_major ? B.CreateAdd(B.CreateMul(cols, s), rr)
                                     : B.CreateAdd(B.CreateMul(rr, s), cols));
}

// Which lanes of the vector for columns [c0, c0 + w) of row r are inside rows x cols.
Value* Gen::frag_mask(int r, int c0, int w, Value* rows, Value* cols) {
  Value* row_ok = B.CreateICmpULT(B.getInt32(static_cast<uint32_t>(r)), rows);
  std::vector<llvm::Constant*> idx;
  for (int c = 0; c < w; ++c) idx.push_back(B.getInt32(static_cast<uint32_t>(c0 + c)));
  Value* lanes = B.CreateICmpULT(llvm::ConstantVector::get(idx),
                                 B.CreateVectorSplat(static_cast<unsigned>(w), cols));
  return B.CreateAnd(lanes, B.CreateVectorSplat(static_cast<unsigned>(w), row_ok));
}

// Checked launches: the lanes of `mask` whose index is past the memory's extent are reported
// (the first of them, once per row) and dropped from the mask.
Value* Gen::frag_check(const ir::Op& op, ValueId mem, Value* idx, Value* mask, uint32_t site) {
  if (!O.checked) return mask;
  const auto w =
      static_cast<unsigned>(llvm::cast<llvm::FixedVectorType>(idx->getType())->getNumElements());
  Value* extent = B.CreateVectorSplat(w, mem_.at(mem).extent);
  Value* inside = B.CreateICmpULT(idx, extent);
  Value* bad = B.CreateAnd(mask, B.CreateNot(inside));
  auto* fault_bb = llvm::BasicBlock::Create(C, "frag.fault", F);
  auto* cont = llvm::BasicBlock::Create(C, "frag.checked", F);
  B.CreateCondBr(B.CreateOrReduce(bad), fault_bb, cont);
  B.SetInsertPoint(fault_bb);
  Value* bits = B.CreateZExt(B.CreateBitCast(bad, B.getIntNTy(w)), B.getInt32Ty());
  Value* first = B.CreateIntrinsic(llvm::Intrinsic::cttz, {B.getInt32Ty()}, {bits, B.getTrue()});
  call_fault(site, B.CreateExtractElement(idx, first), mem_.at(mem).extent, unit_or_zero());
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
  (void)op;
  return B.CreateAnd(mask, inside);
}

// What a frag.load or frag.store addresses: the memory, the tile's placement and valid extent.
struct Gen::FragAccess {
  ValueId mem;
  ir::Type mt, t;  // the memory and the fragment
  int w, rows, cols;
  bool col_major;
  Value *index, *stride, *valid_rows, *valid_cols;
  uint32_t site;
};

// frag.load %f, %m, %i, %stride, %rows, %cols and frag.store %m, %i, %stride, %rows, %cols, %f;
// frag.ldmatrix %f, %m, %i, %stride is a frag.load of the whole tile (alignment does not matter
// on the CPU).
Gen::FragAccess Gen::frag_access(const ir::Op& op) {
  const bool load = op.kind == OpKind::FragLoad || op.kind == OpKind::FragLdmatrix;
  const size_t m = load ? 1 : 0, first = load ? 2 : 1;
  FragAccess a;
  a.mem = op.operands[m];
  a.mt = type(a.mem);
  a.t = type(op.operands[load ? 0 : 5]);
  a.w = frag_width(a.t);
  a.rows = a.t.frag_rows();
  a.cols = a.t.frag_cols();
  a.col_major = op.attr.i == 1;
  a.index = v(op.operands[first]);
  a.stride = v(op.operands[first + 1]);
  const bool whole = op.kind == OpKind::FragLdmatrix;
  a.valid_rows = whole ? B.getInt32(static_cast<uint32_t>(a.rows)) : v(op.operands[first + 2]);
  a.valid_cols = whole ? B.getInt32(static_cast<uint32_t>(a.cols)) : v(op.operands[first + 3]);
  a.site = O.checked ? access_site(op, a.mem) : 0;
  return a;
}

// The lanes of row r, columns [c0, c0 + w) that are inside the tile's extent (and, checked, the
// memory), and where they are: one pointer for a row-major row (contiguous), else a vector of
// pointers for a gather or scatter.
std::pair<Value*, Value*> Gen::frag_row(const ir::Op& op, const FragAccess& a, int r, int c0) {
  Value* idx = frag_indices(a.index, a.stride, r, c0, a.w, a.col_major);
  Value* mask =
      frag_check(op, a.mem, idx, frag_mask(r, c0, a.w, a.valid_rows, a.valid_cols), a.site);
  if (!a.col_major) return {element_ptr(a.mem, B.CreateExtractElement(idx, uint64_t{0})), mask};
  return {B.CreateInBoundsGEP(mem_scalar_ty(a.mt.elem), mem_.at(a.mem).base,
                              B.CreateZExt(idx, vec(B.getInt64Ty(), a.w))),
          mask};
}

// A column-major tile of a wide fragment moves in square blocks of b x b (b = 8 or 16): each
// column of a block is contiguous in memory (one masked vector access), and the block is
// transposed in registers to or from the fragment's rows. (Gathering a row instead takes one
// scalar load per element, and a masked gather of 16-bit elements becomes a branch per lane.)
// 0: the tile takes the gathers.
int Gen::transpose_block(const FragAccess& a) const {
  if (!a.col_major || frag_form(a.t) != FragForm::Wide) return 0;
  const int b = std::min({16, a.rows, a.cols});
  return b >= 8 && a.rows % b == 0 && a.cols % b == 0 ? b : 0;
}

// x[i][l] -> y[l][i] for b vectors of b lanes: the off-diagonal halves of each pair of rows s
// apart swap, for s = b/2, b/4, ..., 1 (two-source shuffles, log2(b) rounds of b).
std::vector<Value*> Gen::transpose(std::vector<Value*> x) {
  const int b = static_cast<int>(x.size());
  for (int s = b / 2; s >= 1; s /= 2) {
    std::vector<int> lo, hi;
    for (int l = 0; l < b; ++l) {
      lo.push_back((l & s) ? b + l - s : l);
      hi.push_back((l & s) ? b + l : l + s);
    }
    for (int i = 0; i < b; ++i) {
      if (i & s) continue;
      Value* a = B.CreateShuffleVector(x[size_t(i)], x[size_t(i + s)], lo);
      Value* c = B.CreateShuffleVector(x[size_t(i)], x[size_t(i + s)], hi);
      x[size_t(i)] = a;
      x[size_t(i + s)] = c;
    }
  }
  return x;
}

// Column c, rows [r0, r0 + b) of a column-major tile: where it starts (contiguous) and which of
// its lanes are inside the tile's extent (and, checked, the memory).
std::pair<Value*, Value*> Gen::frag_column(const ir::Op& op, const FragAccess& a, int c, int r0,
                                           int b) {
  // index + c * stride + r0 + i: a column of the tile is a row of the transposed layout.
  Value* idx = frag_indices(a.index, a.stride, c, r0, b, false);
  Value* mask = frag_check(op, a.mem, idx, frag_mask(c, r0, b, a.valid_cols, a.valid_rows), a.site);
  return {element_ptr(a.mem, B.CreateExtractElement(idx, uint64_t{0})), mask};
}

void Gen::frag_load_columns(const ir::Op& op, const FragAccess& a, int b) {
  llvm::Type* lt = vec(mem_scalar_ty(a.mt.elem), b);
  llvm::Type* ct = int_frag(a.t) ? B.getInt32Ty() : B.getFloatTy();
  Value* zero = llvm::Constant::getNullValue(lt);
  for (int r0 = 0; r0 < a.rows; r0 += b)
    for (int c0 = 0; c0 < a.cols; c0 += b) {
      std::vector<Value*> cols;
      for (int j = 0; j < b; ++j) {
        auto [ptr, mask] = frag_column(op, a, c0 + j, r0, b);
        cols.push_back(frag_to_compute(B.CreateMaskedLoad(lt, ptr, align_of(a.mt), mask, zero), a.t,
                                       a.mt.elem));
      }
      const std::vector<Value*> rows = transpose(std::move(cols));
      for (int i = 0; i < b; ++i)
        B.CreateAlignedStore(
            rows[size_t(i)],
            B.CreateConstInBoundsGEP1_64(ct, v(op.operands[0]), uint64_t(r0 + i) * a.cols + c0),
            llvm::Align(4));
    }
}

void Gen::frag_store_columns(const ir::Op& op, const FragAccess& a, int b) {
  llvm::Type* ct = vec(int_frag(a.t) ? B.getInt32Ty() : B.getFloatTy(), b);
  for (int r0 = 0; r0 < a.rows; r0 += b)
    for (int c0 = 0; c0 < a.cols; c0 += b) {
      std::vector<Value*> rows;
      for (int i = 0; i < b; ++i)
        rows.push_back(
            B.CreateAlignedLoad(ct,
                                B.CreateConstInBoundsGEP1_64(ct->getScalarType(), v(op.operands[5]),
                                                             uint64_t(r0 + i) * a.cols + c0),
                                llvm::Align(4)));
      const std::vector<Value*> cols = transpose(std::move(rows));
      for (int j = 0; j < b; ++j) {
        auto [ptr, mask] = frag_column(op, a, c0 + j, r0, b);
        B.CreateMaskedStore(frag_from_compute(cols[size_t(j)], a.mt.elem, b), ptr, align_of(a.mt),
                            mask);
      }
    }
}

// Rows of the tile move as vectors of up to 16 elements: a row-major tile's rows are contiguous
// and use masked loads and stores; a column-major tile moves in transposed blocks
// (transpose_block) or, for the byte forms, its rows are gathered and scattered. Elements outside
// rows x cols read zero and are not written.
void Gen::frag_load(const ir::Op& op) {
  const FragAccess a = frag_access(op);
  if (const FragForm form = frag_form(a.t); form != FragForm::Wide)
    return frag_load_bytes(op, a, form);
  if (const int b = transpose_block(a)) return frag_load_columns(op, a, b);
  llvm::Type* lt = vec(mem_scalar_ty(a.mt.elem), a.w);
  llvm::Type* ct = int_frag(a.t) ? B.getInt32Ty() : B.getFloatTy();
  Value* zero = llvm::Constant::getNullValue(lt);
  for (int r = 0; r < a.rows; ++r) {
    for (int c0 = 0; c0 < a.cols; c0 += a.w) {
      auto [ptr, mask] = frag_row(op, a, r, c0);
      Value* line = a.col_major ? B.CreateMaskedGather(lt, ptr, align_of(a.mt), mask, zero)
                                : B.CreateMaskedLoad(lt, ptr, align_of(a.mt), mask, zero);
      B.CreateAlignedStore(
          frag_to_compute(line, a.t, a.mt.elem),
          B.CreateConstInBoundsGEP1_64(ct, v(op.operands[0]), uint64_t(r) * a.cols + c0),
          llvm::Align(4));
    }
  }
}

// 8-bit A and B fragments on a VNNI CPU (frag_form): A's rows are stored XOR 0x80; B's rows
// are loaded four at a time and interleaved, so that the four k of each column sit together.
void Gen::frag_load_bytes(const ir::Op& op, const FragAccess& a, FragForm form) {
  KILN_CHECK(ir::elem_bytes(a.mt.elem) == 1, "an 8-bit fragment loaded from wider memory");
  llvm::Type* lt = vec(B.getInt8Ty(), a.w);
  Value* zero = llvm::Constant::getNullValue(lt);
  const int group = form == FragForm::Quads ? 4 : 1;
  std::vector<int> concat, interleave;
  for (int i = 0; i < 2 * a.w; ++i) concat.push_back(i);
  for (int c = 0; c < a.w; ++c)
    for (int g = 0; g < 4; ++g) interleave.push_back(g * a.w + c);
  for (int r0 = 0; r0 < a.rows; r0 += group) {
    for (int c0 = 0; c0 < a.cols; c0 += a.w) {
      std::vector<Value*> lines;
      for (int g = 0; g < group; ++g) {
        auto [ptr, mask] = frag_row(op, a, r0 + g, c0);
        lines.push_back(a.col_major ? B.CreateMaskedGather(lt, ptr, align_of(a.mt), mask, zero)
                                    : B.CreateMaskedLoad(lt, ptr, align_of(a.mt), mask, zero));
      }
      Value* out;
      uint64_t at;
      if (form == FragForm::Bytes) {
        out = B.CreateXor(lines[0], llvm::ConstantInt::get(lt, 0x80));
        at = uint64_t(r0) * a.cols + c0;
      } else {
        out = B.CreateShuffleVector(B.CreateShuffleVector(lines[0], lines[1], concat),
                                    B.CreateShuffleVector(lines[2], lines[3], concat), interleave);
        at = (uint64_t(r0 / 4) * a.cols + c0) * 4;
      }
      B.CreateAlignedStore(out, B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), v(op.operands[0]), at),
                           llvm::Align(4));
    }
  }
}

void Gen::frag_store(const ir::Op& op) {
  const FragAccess a = frag_access(op);
  if (const int b = transpose_block(a)) return frag_store_columns(op, a, b);
  llvm::Type* ct = vec(int_frag(a.t) ? B.getInt32Ty() : B.getFloatTy(), a.w);
  for (int r = 0; r < a.rows; ++r) {
    for (int c0 = 0; c0 < a.cols; c0 += a.w) {
      Value* x =
          B.CreateAlignedLoad(ct,
                              B.CreateConstInBoundsGEP1_64(ct->getScalarType(), v(op.operands[5]),
                                                           uint64_t(r) * a.cols + c0),
                              llvm::Align(4));
      Value* line = frag_from_compute(x, a.mt.elem, a.w);
      auto [ptr, mask] = frag_row(op, a, r, c0);
      if (a.col_major)
        B.CreateMaskedScatter(line, ptr, align_of(a.mt), mask);
      else
        B.CreateMaskedStore(line, ptr, align_of(a.mt), mask);
    }
  }
}

// One multiply's loop over k, as mma_blocks runs it for each block of accumulator rows.
struct Gen::MmaSteps {
  int steps = 0;                 // iterations: k, or k / 4 for 8-bit inputs on VNNI
  llvm::Type* word = nullptr;    // the 4-byte word A and B hold per step: f32, i32, or 4 bytes
  std::vector<Value*> subtract;  // per accumulator vector, taken off before the loop (or none)
  std::function<Value*(Value* c, Value* a, Value* b)> madd;  // c + a * b
};

// B's vector j (w words) at a step: B holds `steps` rows of n words.
Value* Gen::mma_b(const ir::Op& op, const MmaSteps& s, Value* step, int j) {
  const int n = type(op.operands[0]).n, w = std::min(n, 16);
  return B.CreateAlignedLoad(
      vec(s.word, w),
      B.CreateInBoundsGEP(
          s.word, v(op.operands[2]),
          B.CreateAdd(B.CreateMul(step, B.getInt64(uint64_t(n))), B.getInt64(uint64_t(j * w)))),
      llvm::Align(4));
}

// acc (m x n) += a (m x k) * b (k x n). Blocks of accumulator rows (at most 16 vectors) stay in
// registers across the loop over k; each step loads B's vectors once and, per accumulator row,
// multiplies them by a broadcast of A.
void Gen::mma_blocks(const ir::Op& op, const MmaSteps& s) {
  const ir::Type& ct = type(op.operands[0]);
  const int m = ct.m, n = ct.n;
  const int w = std::min(n, 16), nv = n / w;
  const int block = std::max(1, 16 / nv);
  llvm::Type* st = int_frag(ct) ? B.getInt32Ty() : B.getFloatTy();
  llvm::Type* vt = vec(st, w);
  Value* acc_p = v(op.operands[0]);
  for (int m0 = 0; m0 < m; m0 += block) {
    const int rows = std::min(block, m - m0);
    std::vector<Value*> acc;
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < nv; ++j) {
        Value* c = B.CreateAlignedLoad(
            vt, B.CreateConstInBoundsGEP1_64(st, acc_p, uint64_t(m0 + r) * n + j * w),
            llvm::Align(4));
        acc.push_back(s.subtract.empty() ? c : B.CreateSub(c, s.subtract[size_t(j)]));
      }
    // for step in [0, steps): the accumulators are phis.
    auto* pre = B.GetInsertBlock();
    auto* body = llvm::BasicBlock::Create(C, "mma.k", F);
    auto* exit = llvm::BasicBlock::Create(C, "mma.done", F);
    B.CreateBr(body);
    B.SetInsertPoint(body);
    auto* step = B.CreatePHI(B.getInt64Ty(), 2, "kk");
    step->addIncoming(B.getInt64(0), pre);
    std::vector<llvm::PHINode*> phis;
    for (Value* a : acc) {
      auto* p = B.CreatePHI(vt, 2);
      p->addIncoming(a, pre);
      phis.push_back(p);
    }
    std::vector<Value*> brow;
    for (int j = 0; j < nv; ++j) brow.push_back(mma_b(op, s, step, j));
    std::vector<Value*> next;
    for (int r = 0; r < rows; ++r) {
      // A holds m rows of `steps` words; one is broadcast per accumulator row.
      Value* a = B.CreateVectorSplat(
          static_cast<unsigned>(w),
          B.CreateAlignedLoad(
              s.word,
              B.CreateInBoundsGEP(s.word, v(op.operands[1]),
                                  B.CreateAdd(B.getInt64(uint64_t(m0 + r) * s.steps), step)),
              llvm::Align(4)));
      for (int j = 0; j < nv; ++j)
        next.push_back(s.madd(phis[size_t(r * nv + j)], a, brow[size_t(j)]));
    }
    Value* after = B.CreateAdd(step, B.getInt64(1));
    auto* latch = B.GetInsertBlock();
    step->addIncoming(after, latch);
    for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
    loop_metadata(B.CreateCondBr(B.CreateICmpULT(after, B.getInt64(uint64_t(s.steps))), body, exit),
                  static_cast<uint64_t>(std::min(s.steps, 8)));
    B.SetInsertPoint(exit);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < nv; ++j)
        B.CreateAlignedStore(next[size_t(r * nv + j)],
                             B.CreateConstInBoundsGEP1_64(st, acc_p, uint64_t(m0 + r) * n + j * w),
                             llvm::Align(4));
  }
}

// Wide fragments: each step is one k; floats add with one fused multiply-add per step (the sum
// runs over k in order), integers wrap.
void Gen::frag_mma(const ir::Op& op) {
  if (frag_form(type(op.operands[1])) != FragForm::Wide) return frag_mma_vnni(op);
  const ir::Type& ct = type(op.operands[0]);
  const int n = ct.n, k = ct.k, w = std::min(n, 16);
  const bool ints = int_frag(ct);
  llvm::Type* st = ints ? B.getInt32Ty() : B.getFloatTy();
  llvm::Type* vt = vec(st, w);
  MmaSteps s;
  s.steps = k;
  s.word = st;
  s.madd = [&](Value* c, Value* a, Value* b) {
    return ints ? B.CreateAdd(c, B.CreateMul(a, b))
                : B.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {a, b, c});
  };
  mma_blocks(op, s);
}

// 8-bit inputs on a VNNI CPU: vpdpbusd adds four products of unsigned and signed bytes into each
// i32 lane, so a step is four k. A's bytes were stored XOR 0x80 (frag_form):
//   i8: sum a b = sum (a + 128) b - 128 sum b, the shifted a on dpbusd's unsigned side;
//   u8: sum a b = sum b (a - 128) + 128 sum b, b on the unsigned side and the shifted a signed.
// Either way the correction is one dpbusd of B against 0x80 bytes, taken off the accumulators
// before the loop. The arithmetic wraps as i32 sums do, so the result is exact.
void Gen::frag_mma_vnni(const ir::Op& op) {
  const ir::Type& ct = type(op.operands[0]);
  const bool signed_in = type(op.operands[1]).elem == ElemType::I8;
  const int n = ct.n, k = ct.k, w = std::min(n, 16), nv = n / w;
  llvm::Type* i32 = B.getInt32Ty();
  llvm::Type* vt = vec(i32, w);
  // 16 lanes in one zmm instruction with AVX-512 VNNI; else (AVX-VNNI on a 256-bit CPU, or
  // 8-column tiles) 8 lanes per ymm instruction, two per 16-lane vector.
  const bool wide = w == 16 && O.target.vector_bits >= 512;
  llvm::Function* fn =
      llvm::Intrinsic::getOrInsertDeclaration(&M, wide ? llvm::Intrinsic::x86_avx512_vpdpbusd_512
                                                       : llvm::Intrinsic::x86_avx512_vpdpbusd_256);
  llvm::FunctionType* ft = fn->getFunctionType();
  auto dot8 = [&](Value* c, Value* u, Value* s) -> Value* {
    return B.CreateCall(
        fn, {c, B.CreateBitCast(u, ft->getParamType(1)), B.CreateBitCast(s, ft->getParamType(2))});
  };
  auto dot = [&](Value* c, Value* u, Value* s) -> Value* {
    if (wide || w == 8) return dot8(c, u, s);
    // 16 i32 lanes (64 bytes of each operand) as two halves of 8.
    llvm::Type* b64 = vec(B.getInt8Ty(), 64);
    u = B.CreateBitCast(u, b64);
    s = B.CreateBitCast(s, b64);
    std::vector<int> lo8, hi8, lo32, hi32, all;
    for (int i = 0; i < 8; ++i) lo8.push_back(i), hi8.push_back(8 + i);
    for (int i = 0; i < 32; ++i) lo32.push_back(i), hi32.push_back(32 + i);
    for (int i = 0; i < 16; ++i) all.push_back(i);
    Value* lo = dot8(B.CreateShuffleVector(c, lo8), B.CreateShuffleVector(u, lo32),
                     B.CreateShuffleVector(s, lo32));
    Value* hi = dot8(B.CreateShuffleVector(c, hi8), B.CreateShuffleVector(u, hi32),
                     B.CreateShuffleVector(s, hi32));
    return B.CreateShuffleVector(lo, hi, all);
  };
  auto madd = [&, signed_in](Value* c, Value* a, Value* b) {
    return signed_in ? dot(c, a, b) : dot(c, b, a);
  };
  MmaSteps s;
  s.steps = k / 4;
  s.word = i32;
  s.madd = madd;
  Value* x80 = llvm::ConstantInt::get(vt, 0x80808080u);
  for (int j = 0; j < nv; ++j) {
    Value* corr = llvm::Constant::getNullValue(vt);
    for (int q = 0; q < k / 4; ++q)
      corr = madd(corr, x80, mma_b(op, s, B.getInt64(uint64_t(q)), j));
    s.subtract.push_back(corr);
  }
  mma_blocks(op, s);
}

}  // namespace kiln::cpu::detail

namespace kiln::cpu::detail {

// A shared-memory matrix descriptor as the GPU encodes it (PTX ISA, "Matrix Descriptor
// Format"), with the address taken from the start of the cube's arena.
void Gen::wgmma_desc(const ir::Op& op) {
  const ir::Type& t = type(op.operands[0]);
  Value* at =
      B.CreatePtrDiff(B.getInt8Ty(), element_ptr(op.operands[0], v(op.operands[1])), shared_);
  (void)t;
  auto field = [&](Value* x, uint64_t mask, uint64_t shift) {
    Value* f = B.CreateAnd(B.CreateLShr(B.CreateZExt(x, B.getInt64Ty()), 4), mask);
    return B.CreateShl(f, shift);
  };
  const uint64_t mode = op.attr.i == 128 ? 1 : op.attr.i == 64 ? 2 : op.attr.i == 32 ? 3 : 0;
  Value* d = B.CreateLShr(B.CreateAnd(at, B.getInt64(0x3ffff)), 4);
  d = B.CreateOr(d, field(v(op.operands[2]), 0x3fff, 16));
  d = B.CreateOr(d, field(v(op.operands[3]), 0x3fff, 32));
  d = B.CreateOr(d, B.getInt64(mode << 62));
  set(op.result, d);
}

// wgmma.mma runs in kiln_rt_wgmma (compiler/cpu/abi.cpp), once per plane: the 16 rows of the
// plane's accumulator. A descriptor that reaches past the arena reads zeros; checked launches
// report it.
void Gen::wgmma(const ir::Op& op) {
  const ir::Type& acc = type(op.operands[0]);
  auto plane = frag_plane_of_.find(op.operands[0]);
  KILN_CHECK(plane != frag_plane_of_.end(), "wgmma.mma on a fragment that is not a plane's copy");
  auto callee = M.getOrInsertFunction(
      "kiln_rt_wgmma",
      llvm::FunctionType::get(B.getInt32Ty(),
                              {B.getPtrTy(), B.getInt32Ty(), B.getPtrTy(), B.getInt32Ty(),
                               B.getInt64Ty(), B.getInt64Ty(), B.getInt32Ty(), B.getInt32Ty()},
                              false));
  Value* bad = B.CreateCall(
      callee, {v(op.operands[0]), plane->second, shared_, B.getInt32(info_.shared_bytes),
               v(op.operands[1]), v(op.operands[2]), B.getInt32(static_cast<uint32_t>(op.attr.i)),
               B.getInt32(static_cast<uint32_t>(acc.n))});
  if (!O.checked) return;
  const auto site = static_cast<uint32_t>(info_.accesses.size());
  info_.accesses.push_back(
      AccessSite{"wgmma.mma", "the cube's shared memory (in bytes)", K.loc_string(op.loc)});
  auto* fault_bb = llvm::BasicBlock::Create(C, "wgmma.fault", F);
  auto* cont = llvm::BasicBlock::Create(C, "wgmma.checked", F);
  B.CreateCondBr(B.CreateICmpNE(bad, B.getInt32(0)), fault_bb, cont);
  B.SetInsertPoint(fault_bb);
  call_fault(site, B.CreateSub(bad, B.getInt32(1)), B.getInt32(info_.shared_bytes), B.getInt32(0));
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
}

}  // namespace kiln::cpu::detail

namespace kiln::cpu::detail {

// A block-scaled multiply runs in kiln_rt_mma_scaled (compiler/cpu/abi.cpp) on the plane's
// copies of the fragments (f8 inputs are widened to f32 when loaded). A scale index past its
// memory reads a scale of 1; checked launches report it.
void Gen::frag_mma_scaled(const ir::Op& op) {
  const ir::Type& c = type(op.operands[0]);
  llvm::Type* i32 = B.getInt32Ty();
  llvm::Type* ptr = B.getPtrTy();
  auto callee = M.getOrInsertFunction(
      "kiln_rt_mma_scaled",
      llvm::FunctionType::get(
          i32, {ptr, ptr, ptr, i32, i32, i32, ptr, i32, i32, i32, ptr, i32, i32, i32}, false));
  auto scales = [&](size_t m) {
    return std::array<Value*, 4>{element_ptr(op.operands[m], B.getInt32(0)),
                                 mem_.at(op.operands[m]).len, v(op.operands[m + 1]),
                                 v(op.operands[m + 2])};
  };
  const auto sa = scales(3), sb = scales(6);
  Value* bad = B.CreateCall(callee, {v(op.operands[0]), v(op.operands[1]), v(op.operands[2]),
                                     B.getInt32(c.m), B.getInt32(c.n), B.getInt32(c.k), sa[0],
                                     sa[1], sa[2], sa[3], sb[0], sb[1], sb[2], sb[3]});
  if (!O.checked) return;
  // bad: 0, or 1 + the index past the memory, + 2^31 when it was in B's scales.
  const auto site = static_cast<uint32_t>(info_.accesses.size());
  info_.accesses.push_back(AccessSite{"frag.mma_scaled", "the A scales", K.loc_string(op.loc)});
  info_.accesses.push_back(AccessSite{"frag.mma_scaled", "the B scales", K.loc_string(op.loc)});
  auto* fault_bb = llvm::BasicBlock::Create(C, "scales.fault", F);
  auto* cont = llvm::BasicBlock::Create(C, "scales.checked", F);
  B.CreateCondBr(B.CreateICmpNE(bad, B.getInt32(0)), fault_bb, cont);
  B.SetInsertPoint(fault_bb);
  Value* in_b = B.CreateLShr(bad, 31);
  Value* index = B.CreateSub(B.CreateAnd(bad, 0x7fffffff), B.getInt32(1));
  call_fault(0, index, B.CreateSelect(B.CreateICmpNE(in_b, B.getInt32(0)), sb[1], sa[1]),
             B.getInt32(0), B.CreateAdd(B.getInt32(site), in_b));
  B.CreateBr(cont);
  B.SetInsertPoint(cont);
}

}  // namespace kiln::cpu::detail
