// The unit vectorizer: a `units` loop whose body runs V units at once, one unit per SIMD lane
// (whole-function vectorization, as ISPC and OpenCL CPU compilers do it, applied to the body of
// the loop that unit-loop fission made). docs/backends.md, "The unit vectorizer", explains it
// with an example.
//
// - Values the same for every lane (uniform: everything computed outside the loop, constants,
//   and what is computed only from those) keep their scalar form; values that differ per unit
//   (varying) become vectors of V lanes of their line, unit-major.
// - Control flow runs under a mask of active lanes. An `if` on a varying condition runs each
//   side that has an active lane with the lanes that take it; a loop with varying bounds or a
//   jump runs while any lane is active; break, continue and return take the lanes that reach
//   them out of the mask. An `if` on a uniform condition and a counted loop without jumps stay
//   ordinary branches and loops.
// - Loads and stores at an index of the form base + unit become one vector access (masked when
//   lanes are off); an index whose stride is known only at run time is tested (stride 1 gives the
//   vector access); other indices are tested for lanes one or two elements apart, and otherwise
//   become gathers and scatters. Scatters write in lane order, so colliding stores end as if
//   the units had run in turn.
// - Local arrays get one row per lane (element i of every lane side by side), so an index that
//   is the same for every unit is one vector access.
// - Atomics and prints run lane by lane, in unit order, with the scalar code.
// - Division by a uniform divisor known only at run time multiplies by its magic number.
// - Two schedules use the IR's freedom to interleave units: a units loop that ends in a
//   unit-strided loop runs that loop's iterations outermost, and a kernel with 2-D cubes of
//   independent units runs a row of cubes one row of units at a time.
#include "compiler/cpu/gen.h"

#include <algorithm>

namespace kiln::cpu::detail {

namespace {

bool is_zero_mask(Value* m) {
  auto* c = llvm::dyn_cast<llvm::Constant>(m);
  return c && c->isNullValue();
}

}  // namespace

// ---- lanes and masks -----------------------------------------------------------------------

bool Gen::is_true(Value* m) const {
  auto* c = llvm::dyn_cast<llvm::Constant>(m);
  return c && c->isAllOnesValue();
}

Value* Gen::iota(llvm::Type* elem) {
  std::vector<llvm::Constant*> lanes;
  for (int l = 0; l < V_; ++l) lanes.push_back(llvm::ConstantInt::get(elem, l));
  return llvm::ConstantVector::get(lanes);
}

Value* Gen::any(Value* m) {
  if (is_true(m)) return B.getTrue();
  if (is_zero_mask(m)) return B.getFalse();
  return B.CreateICmpNE(B.CreateBitCast(m, B.getIntNTy(V_)), B.getIntN(V_, 0), "any");
}

Value* Gen::first_lane(Value* m) {
  if (is_true(m)) return B.getInt32(0);
  Value* bits = B.CreateZExt(B.CreateBitCast(m, B.getIntNTy(V_)), B.getInt32Ty());
  return B.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, bits, B.getTrue(), nullptr, "lane");
}

Value* Gen::last_lane(Value* m) {
  if (is_true(m)) return B.getInt32(static_cast<uint32_t>(V_ - 1));
  Value* bits = B.CreateZExt(B.CreateBitCast(m, B.getIntNTy(V_)), B.getInt32Ty());
  Value* lz = B.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz, bits, B.getTrue());
  return B.CreateSub(B.getInt32(31), lz, "lane");
}

// Each element of x repeated `lanes` times: <n x T> -> <n*lanes x T>.
Value* Gen::spread(Value* x, int lanes) {
  if (lanes == 1) return x;
  const int n = static_cast<int>(llvm::cast<llvm::FixedVectorType>(x->getType())->getNumElements());
  std::vector<int> idx;
  for (int l = 0; l < n; ++l)
    for (int j = 0; j < lanes; ++j) idx.push_back(l);
  return B.CreateShuffleVector(x, idx);
}

Value* Gen::widen_mask(Value* m, int lanes) {
  return spread(m, lanes);
}

// The vector form of a value: a uniform one repeated in every lane.
Value* Gen::widen(ValueId id) {
  Value* x = v(id);
  if (vary_[id]) return x;
  const int w = K.type_of(id).lanes;
  if (w == 1) return B.CreateVectorSplat(static_cast<unsigned>(V_), x);
  std::vector<int> idx;
  for (int l = 0; l < V_; ++l)
    for (int j = 0; j < w; ++j) idx.push_back(j);
  return B.CreateShuffleVector(x, idx);
}

// Lane `lane` (an i32 value) of a value, as the scalar code sees it (a scalar or a line).
Value* Gen::lane_value(ValueId id, Value* lane) {
  if (!vary_[id]) return v(id);
  Value* x = v(id);
  const int w = K.type_of(id).lanes;
  if (w == 1) return B.CreateExtractElement(x, lane);
  Value* base = B.CreateMul(lane, B.getInt32(static_cast<uint32_t>(w)));
  Value* r = llvm::PoisonValue::get(ty(K.type_of(id)));
  for (int j = 0; j < w; ++j)
    r = B.CreateInsertElement(
        r, B.CreateExtractElement(x, B.CreateAdd(base, B.getInt32(static_cast<uint32_t>(j)))),
        static_cast<uint64_t>(j));
  return r;
}

// ---- the cube-row schedule -------------------------------------------------------------------

// A kernel whose units are independent (one units loop over the whole cube, no shared memory,
// nothing else per cube but uniform arithmetic) with 2-D or 3-D cubes: run a row of cubes one
// row of units at a time, so that memory is read in long rows as a CPU's prefetchers want
// (a 16 x 16 cube alone reads 16 rows of 64 bytes). The order of units is the IR's to choose.
bool Gen::rows_schedule() {
  if (!O.target.vectorize || K.cube_dim[1] * K.cube_dim[2] == 1) return false;
  int units = 0;
  for (const ir::Op& op : K.body.ops) {
    if (op.kind == OpKind::Units) {
      ++units;
      continue;
    }
    if (units > 0) return false;  // something after the units loop
    if (!ir::has_flag(op.kind, ir::op_flags::Pure) || !op.regions.empty()) return false;
  }
  if (units != 1) return false;
  const ir::Op& u = K.body.ops.back();
  auto bound = [&](ValueId id, uint64_t want) {
    for (const ir::Op& op : K.body.ops)
      if (op.result == id) return op.kind == OpKind::Const && op.attr.i == want;
    return false;
  };
  return bound(u.operands[0], 0) && bound(u.operands[1], K.units_per_cube());
}

void Gen::emit_cube_rows() {
  llvm::Type* i32 = B.getInt32Ty();
  const uint32_t dx = K.cube_dim[0], rows = K.cube_dim[1] * K.cube_dim[2];
  Value* end = F->getArg(2);
  auto* header = llvm::BasicBlock::Create(C, "cuberow.header", F);
  auto* setup = llvm::BasicBlock::Create(C, "cuberow.setup", F);
  auto* exit = llvm::BasicBlock::Create(C, "exit", F);
  auto* pre = B.GetInsertBlock();
  B.CreateBr(header);
  B.SetInsertPoint(header);
  auto* first = B.CreatePHI(i32, 2, "run.first");
  first->addIncoming(F->getArg(1), pre);
  B.CreateCondBr(B.CreateICmpULT(first, end), setup, exit);
  B.SetInsertPoint(setup);
  // The run: consecutive cubes of this call in the same row of the grid.
  Value* grid_row = B.CreateUDiv(first, cube_count_[1], "grid.row");
  Value* row_start = B.CreateMul(grid_row, cube_count_[1]);
  Value* row_end = B.CreateAdd(row_start, cube_count_[1]);
  // The run's cubes share y and z; x counts up (no division per cube).
  Value* cube_y = B.CreateURem(grid_row, cube_count_[2], "cube.y");
  Value* cube_z = B.CreateUDiv(grid_row, cube_count_[2], "cube.z");
  Value* last = B.CreateSelect(B.CreateICmpULT(row_end, end), row_end, end, "run.end");

  // for r in rows: for c in run: the cube's uniform code, then units [r*dx, r*dx + dx).
  auto* r_header = llvm::BasicBlock::Create(C, "unitrow.header", F);
  auto* r_body = llvm::BasicBlock::Create(C, "unitrow.body", F);
  auto* r_latch = llvm::BasicBlock::Create(C, "unitrow.latch", F);
  auto* r_exit = llvm::BasicBlock::Create(C, "unitrow.exit", F);
  B.CreateBr(r_header);
  B.SetInsertPoint(r_header);
  auto* r = B.CreatePHI(i32, 2, "unitrow");
  r->addIncoming(B.getInt32(0), setup);
  B.CreateCondBr(B.CreateICmpULT(r, B.getInt32(rows)), r_body, r_exit);
  B.SetInsertPoint(r_body);
  auto* c_header = llvm::BasicBlock::Create(C, "cube.header", F);
  auto* c_body = llvm::BasicBlock::Create(C, "cube.body", F);
  cube_latch_ = llvm::BasicBlock::Create(C, "cube.latch", F);
  B.CreateBr(c_header);
  B.SetInsertPoint(c_header);
  auto* c = B.CreatePHI(i32, 2, "cube");
  c->addIncoming(first, r_body);
  B.CreateCondBr(B.CreateICmpULT(c, last), c_body, r_latch);
  B.SetInsertPoint(c_body);
  cube_ = c;
  cube_pos_[0] = c;
  cube_pos_[1] = B.CreateSub(c, row_start, "cube.x");
  cube_pos_[2] = cube_y;
  cube_pos_[3] = cube_z;
  Value* start = B.CreateMul(r, B.getInt32(dx), "row.first");
  range_ = UnitsRange{start, B.CreateAdd(start, B.getInt32(dx))};
  region(K.body);
  range_ = UnitsRange{};
  B.CreateBr(cube_latch_);
  B.SetInsertPoint(cube_latch_);
  c->addIncoming(B.CreateAdd(c, B.getInt32(1)), cube_latch_);
  B.CreateBr(c_header);
  B.SetInsertPoint(r_latch);
  r->addIncoming(B.CreateAdd(r, B.getInt32(1)), r_latch);
  B.CreateBr(r_header);
  B.SetInsertPoint(r_exit);
  first->addIncoming(last, r_exit);
  B.CreateBr(header);
  B.SetInsertPoint(exit);
  B.CreateRetVoid();
}

// ---- the units loop --------------------------------------------------------------------------

// How many units run at once: as many lines of the widest value of the body as fill a vector
// register (a line of 4 f32 leaves room for 4 units with AVX-512; a line of 16 for none).
int Gen::units_width(const ir::Op& units) {
  if (!O.target.vectorize) return 1;
  int widest = 32;
  bool ok = true;
  ir::walk(units.regions[0], [&](const ir::Op& op) {
    if (op.result != ir::kNoValue) {
      const ir::Type& t = K.type_of(op.result);
      if (t.kind == ir::TypeKind::Value || t.kind == ir::TypeKind::Var ||
          t.kind == ir::TypeKind::Local)
        widest = std::max(widest, std::max(32, ir::elem_bits(t.elem)) * t.lanes);
    }
    // Atomics on a local array would need the rows of other lanes; run them unit by unit.
    const bool atomic = ir::op_info(op.kind).sig == ir::Sig::Atomic ||
                        ir::op_info(op.kind).sig == ir::Sig::AtomicCas;
    if (atomic && K.type_of(op.operands[0]).kind == ir::TypeKind::Local) ok = false;
    // A unit's row of tensor memory is read, and a unit's cp.async copied, by a call for that
    // unit.
    if (op.kind == OpKind::TmemRead || op.kind == OpKind::AsyncCopy ||
        op.kind == OpKind::ClusterLoad)
      ok = false;
  });
  if (!ok) return 1;
  int lanes = std::min(16, O.target.vector_bits / widest);
  int width = 1;
  while (width * 2 <= lanes) width *= 2;
  return width;
}

void Gen::emit_units_vec(const ir::Op& op, int width) {
  Value* start = v(op.operands[0]);
  Value* end = v(op.operands[1]);
  // Units loops start at 0 or at a plane's first unit (a multiple of the plane width, 32) and
  // end at the cube's end or a plane's (passes/unit_loops.h). So every vector starts at a
  // multiple of the width, and when the cube's size is a multiple of the width every vector is
  // full and needs no mask.
  auto* cs = llvm::dyn_cast<llvm::ConstantInt>(start);
  bool aligned = !cs || cs->getZExtValue() % static_cast<uint64_t>(width) == 0;
  bool full = aligned && K.units_per_cube() % static_cast<uint32_t>(width) == 0;
  if (range_.start) {  // one row of the cube (the cube-row schedule)
    start = range_.start;
    end = range_.end;
    // Rows start at multiples of the row length: aligned when it is a multiple of the width.
    aligned = K.cube_dim[0] % static_cast<uint32_t>(width) == 0;
    full = aligned;
  }

  // A units loop that ends in a unit-strided loop runs that loop's iterations outermost.
  const ir::Op* inner = interchanged_loop(op);
  llvm::AllocaInst* ran = nullptr;
  llvm::PHINode* k = nullptr;
  llvm::BasicBlock *k_header = nullptr, *k_pre = nullptr;
  // The body's uniform arithmetic runs once, before the loop (hoist_uniform).
  hoisted_ = hoist_uniform(op, !inner);
  if (inner) {
    privatize(op, width);
    ran = entry_alloca(B.getInt1Ty(), nullptr, "ran");
    k_pre = B.GetInsertBlock();
    k_header = llvm::BasicBlock::Create(C, "strided.iter", F);
    B.CreateBr(k_header);
    B.SetInsertPoint(k_header);
    k = B.CreatePHI(scalar_ty(K.type_of(inner->operands[0]).elem), 2, "k");
    k->addIncoming(llvm::ConstantInt::get(k->getType(), 0), k_pre);
    B.CreateStore(B.getFalse(), ran);
  }

  const CountedLoop loop = open_loop("units", start, "unit");
  enter_body(loop, B.CreateICmpULT(loop.k, end));
  auto* const u = loop.k;

  V_ = width;
  vu_ = u;
  units_pre_ = inner ? k_pre : loop.pre;
  outer_blocks_.clear();
  for (llvm::BasicBlock& bb : *F)
    if (&bb != loop.header && &bb != loop.body && &bb != loop.latch && &bb != loop.exit &&
        &bb != k_header)
      outer_blocks_.insert(&bb);
  magic_.clear();
  Value* lanes = B.CreateAdd(B.CreateVectorSplat(static_cast<unsigned>(width), u),
                             iota(B.getInt32Ty()), "units");
  mask_ =
      full ? llvm::Constant::getAllOnesValue(llvm::FixedVectorType::get(B.getInt1Ty(), width))
           : B.CreateICmpULT(lanes, B.CreateVectorSplat(static_cast<unsigned>(width), end), "mask");
  const ValueId arg = op.regions[0].args[0];
  vals_[arg] = lanes;
  vary_[arg] = 1;
  affine_[arg] = Affine{u, B.getInt32(1), aligned};
  loops_.push_back({loop.latch, loop.exit, true, true, nullptr, nullptr});
  if (inner) {
    strided_iteration(op, *inner, k, ran);
  } else {
    const std::vector<bool> emitted = hoisted_;  // vregion may vectorize nested units loops
    vregion(op.regions[0], &emitted);
  }
  loops_.pop_back();
  V_ = 0;
  vu_ = nullptr;
  mask_ = nullptr;

  B.CreateBr(loop.latch);
  llvm::BranchInst* br = close_loop(loop, B.getInt32(static_cast<uint32_t>(width)));
  // The body is already vector code: LLVM's loop vectorizer has nothing left to do here.
  llvm::Metadata* off[] = {llvm::MDString::get(C, "llvm.loop.vectorize.enable"),
                           llvm::ConstantAsMetadata::get(B.getFalse())};
  llvm::Metadata* md[] = {nullptr, llvm::MDNode::get(C, off)};
  auto* node = llvm::MDNode::getDistinct(C, md);
  node->replaceOperandWith(0, node);
  br->setMetadata(llvm::LLVMContext::MD_loop, node);
  if (inner) {  // the next iteration, while some lane of some vector ran this one
    k->addIncoming(B.CreateAdd(k, llvm::ConstantInt::get(k->getType(), 1)), loop.exit);
    auto* done = llvm::BasicBlock::Create(C, "strided.done", F);
    B.CreateCondBr(B.CreateLoad(B.getInt1Ty(), ran), k_header, done);
    B.SetInsertPoint(done);
    merge_private(width);
  }
}

// The loop interchange: a units body that is uniform or pure arithmetic followed by one `for`
// whose start depends on the unit (a grid- or block-stride loop, `for i = first + unit to n
// step cube_dim`), with no break out of it and no return. Run unit by unit, each vector of
// units would walk the whole range with a large stride; the IR leaves the interleaving of units
// free, so iteration k of every vector runs before iteration k + 1 of any, reading memory in
// order. Variables cannot be carried: the body before the loop has none.
const ir::Op* Gen::interchanged_loop(const ir::Op& units) {
  const auto& ops = units.regions[0].ops;
  if (ops.empty() || ops.back().kind != OpKind::For) return nullptr;
  const ir::Op& loop = ops.back();
  std::unordered_set<ValueId> varying{units.regions[0].args[0]};
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    const ir::Op& op = ops[i];
    if (!ir::has_flag(op.kind, ir::op_flags::Pure) || !op.regions.empty()) return nullptr;
    for (ValueId o : op.operands)
      if (varying.count(o) && op.result != ir::kNoValue) varying.insert(op.result);
  }
  if (!varying.count(loop.operands[0]) || has_return(loop.regions[0])) return nullptr;
  bool breaks = false;
  std::function<void(const ir::Region&)> scan = [&](const ir::Region& r) {
    for (const ir::Op& op : r.ops) {
      if (op.kind == OpKind::Break) breaks = true;
      if (op.kind == OpKind::If)
        for (const ir::Region& sub : op.regions) scan(sub);
    }
  };
  scan(loop.regions[0]);
  return breaks ? nullptr : &loop;
}

// The units loop's top-level code that is the same for every unit (arithmetic on values from
// outside the loop, no memory), emitted once, before the loop; the rest runs for each vector
// (of each iteration, when the loop is interchanged: then only the code before that loop, not
// the loop itself, `all` false). LLVM would not move it there itself: the vectors' code is
// conditional (some lane must be active), and a division by a value that is not a constant is
// never moved out of a conditional block (x86's would trap on zero; kiln's never does): a
// depthwise convolution's cube positions, divided per vector of units, cost it 4 divisions per
// 16 outputs. Which ops were emitted: the others are left to vregion or strided_iteration.
std::vector<bool> Gen::hoist_uniform(const ir::Op& units, bool all) {
  const auto& ops = units.regions[0].ops;
  std::vector<bool> done(ops.size(), false);
  std::unordered_set<ValueId> varying{units.regions[0].args[0]};
  // Values only: arithmetic, constants, the cube's position and sizes, tensor shapes. Not the
  // plane builtins or fragment planes, whose scalar code reads the unit being run.
  auto value_op = [](const ir::Op& op) {
    switch (ir::op_info(op.kind).sig) {
      case ir::Sig::Const:
      case ir::Sig::Unary:
      case ir::Sig::Binary:
      case ir::Sig::Ternary:
      case ir::Sig::Compare:
      case ir::Sig::Select:
      case ir::Sig::Cast:
      case ir::Sig::Bitcast:
      case ir::Sig::Broadcast:
      case ir::Sig::Extract:
      case ir::Sig::Insert:
      case ir::Sig::FloatTest:
      case ir::Sig::Len:
      case ir::Sig::ShapeStride:
        return op.regions.empty();
      default:
        return op.kind == OpKind::CubePos || op.kind == OpKind::CubeDim ||
               op.kind == OpKind::CubeCount;
    }
  };
  for (size_t i = 0; i + (all ? 0 : 1) < ops.size(); ++i) {
    const ir::Op& op = ops[i];
    bool vary = ir::has_flag(op.kind, ir::op_flags::Varying) ||
                ir::has_flag(op.kind, ir::op_flags::Memory) || op.result == ir::kNoValue ||
                !ir::has_flag(op.kind, ir::op_flags::Pure) || !value_op(op);
    for (ValueId o : op.operands) vary = vary || varying.count(o) > 0;
    if (vary) {
      if (op.result != ir::kNoValue) varying.insert(op.result);
      continue;
    }
    emit(op);  // scalar code: V_ is not set yet
    done[i] = true;
  }
  return done;
}

// One vector of units: the code before the loop (what hoist_uniform left), then iteration k of
// the loop for the lanes that have one.
void Gen::strided_iteration(const ir::Op& units, const ir::Op& loop, llvm::PHINode* k,
                            llvm::AllocaInst* ran) {
  const auto& ops = units.regions[0].ops;
  for (size_t i = 0; i + 1 < ops.size(); ++i)
    if (!hoisted_[i]) emit(ops[i]);
  const ir::Type t = K.type_of(loop.operands[0]);
  bool varying = false;
  for (ValueId o : loop.operands) varying = varying || vary_[o];
  Value* start = varying ? widen(loop.operands[0]) : v(loop.operands[0]);
  Value* end = varying ? widen(loop.operands[1]) : v(loop.operands[1]);
  Value* step = varying ? widen(loop.operands[2]) : v(loop.operands[2]);
  Value* trips = trip_count(start, end, step, ir::is_signed(t.elem));
  Value* kv = varying ? B.CreateVectorSplat(static_cast<unsigned>(V_), k) : static_cast<Value*>(k);
  Value* has = B.CreateICmpULT(kv, trips);
  Value* active = varying
                      ? B.CreateAnd(mask_, has)
                      : B.CreateSelect(has, mask_, llvm::Constant::getNullValue(mask_->getType()));
  auto* run = llvm::BasicBlock::Create(C, "strided.body", F);
  auto* skip = llvm::BasicBlock::Create(C, "strided.next", F);
  B.CreateCondBr(any(active), run, skip);
  B.SetInsertPoint(run);
  B.CreateStore(B.getTrue(), ran);
  mask_ = active;
  const ValueId arg = loop.regions[0].args[0];
  set(arg, B.CreateAdd(start, B.CreateMul(kv, step)));
  vary_[arg] = varying ? 1 : 0;
  auto a = affine_.find(loop.operands[0]);
  if (varying && a != affine_.end() && !vary_[loop.operands[1]] && !vary_[loop.operands[2]]) {
    Value* st = v(loop.operands[2]);
    affine_[arg] = Affine{B.CreateAdd(a->second.base, B.CreateMul(k, st)), a->second.stride,
                          a->second.aligned && multiple_of_width(st, 0)};
  }
  loops_.push_back({skip, skip, false, true, nullptr, nullptr});
  vregion(loop.regions[0]);
  loops_.pop_back();
  B.CreateBr(skip);
  B.SetInsertPoint(skip);
}

// ---- regions and control flow ----------------------------------------------------------------

// Whether lanes can leave a region other than by its end: a jump out of it, or a return.
bool Gen::escapes(const ir::Region& r) {
  if (auto it = escapes_.find(&r); it != escapes_.end()) return it->second;
  bool e = false;
  for (const ir::Op& op : r.ops) {
    if (op.kind == OpKind::Return || op.kind == OpKind::Break || op.kind == OpKind::Continue)
      e = true;
    else if (op.kind == OpKind::If)
      for (const ir::Region& sub : op.regions) e = escapes(sub) || e;
    else if (op.kind == OpKind::For || op.kind == OpKind::Loop)
      e = has_return(op.regions[0]) || e;
  }
  escapes_[&r] = e;
  return e;
}

bool Gen::has_return(const ir::Region& r) {
  if (auto it = returns_.find(&r); it != returns_.end()) return it->second;
  bool found = false;
  ir::walk(r, [&](const ir::Op& op) { found = found || op.kind == OpKind::Return; });
  returns_[&r] = found;
  return found;
}

bool Gen::loop_needs_mask(const ir::Op& op) {
  if (op.kind == OpKind::Loop) return true;
  for (ValueId o : op.operands)
    if (vary_[o]) return true;
  return escapes(op.regions[0]);
}

void Gen::vregion(const ir::Region& r, const std::vector<bool>* emitted) {
  llvm::BasicBlock* none = nullptr;  // where the region goes when no lane is left
  std::vector<llvm::BasicBlock*> emptied;
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const ir::Op& op = r.ops[i];
    if (emitted && (*emitted)[i]) continue;  // before the loop (hoist_uniform)
    emit(op);
    if (is_zero_mask(mask_)) break;  // after a jump
    const bool shrinks =
        (op.kind == OpKind::If &&
         std::any_of(op.regions.begin(), op.regions.end(),
                     [&](const ir::Region& sub) { return escapes(sub); })) ||
        ((op.kind == OpKind::For || op.kind == OpKind::Loop) && has_return(op.regions[0]));
    if (shrinks && i + 1 < r.ops.size()) {
      // Code runs only while a lane is active (a load at a uniform index must not run when no
      // unit would have run it).
      if (!none) none = llvm::BasicBlock::Create(C, "lanes.none", F);
      auto* some = llvm::BasicBlock::Create(C, "lanes.some", F);
      emptied.push_back(B.GetInsertBlock());
      B.CreateCondBr(any(mask_), some, none);
      B.SetInsertPoint(some);
    }
  }
  if (!none) return;
  auto* end = B.GetInsertBlock();
  B.CreateBr(none);
  B.SetInsertPoint(none);
  auto* phi = B.CreatePHI(mask_->getType(), static_cast<unsigned>(emptied.size() + 1), "mask");
  phi->addIncoming(mask_, end);
  for (auto* bb : emptied) phi->addIncoming(llvm::Constant::getNullValue(mask_->getType()), bb);
  mask_ = phi;
}

void Gen::vif(const ir::Op& op) {
  Value* entry = mask_;
  const bool has_else = op.regions.size() > 1 && !op.regions[1].ops.empty();
  const bool then_exits = escapes(op.regions[0]);
  const bool else_exits = has_else && escapes(op.regions[1]);
  Value* cond = v(op.operands[0]);
  auto* merge = llvm::BasicBlock::Create(C, "vendif", F);
  auto* then_bb = llvm::BasicBlock::Create(C, "vthen", F);
  Value* zero = llvm::Constant::getNullValue(entry->getType());

  if (!vary_[op.operands[0]]) {  // every lane goes the same way: a branch
    auto* pre = B.GetInsertBlock();
    auto* else_bb = has_else ? llvm::BasicBlock::Create(C, "velse", F) : merge;
    B.CreateCondBr(cond, then_bb, else_bb);
    B.SetInsertPoint(then_bb);
    region(op.regions[0]);
    Value* then_out = mask_;
    auto* then_end = B.GetInsertBlock();
    B.CreateBr(merge);
    Value* else_out = entry;
    llvm::BasicBlock* else_end = pre;
    if (has_else) {
      B.SetInsertPoint(else_bb);
      mask_ = entry;
      region(op.regions[1]);
      else_out = mask_;
      else_end = B.GetInsertBlock();
      B.CreateBr(merge);
    }
    B.SetInsertPoint(merge);
    if (!then_exits && !else_exits) {
      mask_ = entry;
      return;
    }
    auto* phi = B.CreatePHI(entry->getType(), 2, "mask");
    phi->addIncoming(then_out, then_end);
    phi->addIncoming(else_out, else_end);
    mask_ = phi;
    return;
  }

  // Varying: each side runs when one of its lanes is active, with those lanes.
  Value* taken = B.CreateAnd(entry, cond, "mask.then");
  Value* not_taken = B.CreateAnd(entry, B.CreateNot(cond), "mask.else");
  auto* pre = B.GetInsertBlock();
  auto* check_else = llvm::BasicBlock::Create(C, "vthen.end", F);
  B.CreateCondBr(any(taken), then_bb, check_else);
  B.SetInsertPoint(then_bb);
  mask_ = taken;
  region(op.regions[0]);
  Value* then_out = mask_;
  auto* then_end = B.GetInsertBlock();
  B.CreateBr(check_else);
  B.SetInsertPoint(check_else);
  if (then_exits) {
    auto* phi = B.CreatePHI(entry->getType(), 2, "mask.then.out");
    phi->addIncoming(zero, pre);
    phi->addIncoming(then_out, then_end);
    then_out = phi;
  } else {
    then_out = taken;
  }
  Value* else_out = not_taken;
  if (has_else) {
    auto* else_bb = llvm::BasicBlock::Create(C, "velse", F);
    auto* check = B.GetInsertBlock();
    B.CreateCondBr(any(not_taken), else_bb, merge);
    B.SetInsertPoint(else_bb);
    mask_ = not_taken;
    region(op.regions[1]);
    Value* out = mask_;
    auto* else_end = B.GetInsertBlock();
    B.CreateBr(merge);
    B.SetInsertPoint(merge);
    if (else_exits) {
      auto* phi = B.CreatePHI(entry->getType(), 2, "mask.else.out");
      phi->addIncoming(zero, check);
      phi->addIncoming(out, else_end);
      else_out = phi;
    }
  } else {
    B.CreateBr(merge);
    B.SetInsertPoint(merge);
  }
  mask_ = (!then_exits && !else_exits) ? entry : B.CreateOr(then_out, else_out, "mask");
}

void Gen::vfor(const ir::Op& op) {
  if (!loop_needs_mask(op)) return emit_for(op);  // uniform and no jumps: a plain loop
  Value* entry = mask_;
  const ir::Type t = K.type_of(op.operands[0]);
  const bool sgn = ir::is_signed(t.elem);
  bool varying = false;
  for (ValueId o : op.operands) varying = varying || vary_[o];
  Value* start = varying ? widen(op.operands[0]) : v(op.operands[0]);
  Value* end = varying ? widen(op.operands[1]) : v(op.operands[1]);
  Value* step = varying ? widen(op.operands[2]) : v(op.operands[2]);
  Value* trips = trip_count(start, end, step, sgn);
  llvm::Type* it = scalar_ty(t.elem);
  const bool returns = has_return(op.regions[0]);
  llvm::AllocaInst* alive = entry_alloca(entry->getType(), nullptr, "alive");
  B.CreateStore(entry, alive);
  llvm::AllocaInst* ret = returns ? entry_alloca(entry->getType(), nullptr, "returned") : nullptr;
  if (ret) B.CreateStore(llvm::Constant::getNullValue(entry->getType()), ret);

  const CountedLoop loop = open_loop("vfor", llvm::ConstantInt::get(it, 0), "k");
  auto* const k = loop.k;
  Value* active = B.CreateLoad(entry->getType(), alive);
  Value* go;
  if (varying) {
    active = B.CreateAnd(active,
                         B.CreateICmpULT(B.CreateVectorSplat(static_cast<unsigned>(V_), k), trips));
    go = any(active);
  } else {
    go = B.CreateAnd(B.CreateICmpULT(k, trips), any(active));
  }
  enter_body(loop, go);
  mask_ = active;
  const ValueId arg = op.regions[0].args[0];
  if (varying) {
    set(arg,
        B.CreateAdd(start, B.CreateMul(B.CreateVectorSplat(static_cast<unsigned>(V_), k), step)));
    vary_[arg] = 1;
    // A grid-stride loop: an affine start and a uniform step keep the index affine.
    auto a = affine_.find(op.operands[0]);
    if (a != affine_.end() && !vary_[op.operands[1]] && !vary_[op.operands[2]]) {
      Value* st = v(op.operands[2]);
      affine_[arg] = Affine{B.CreateAdd(a->second.base, B.CreateMul(k, st)), a->second.stride,
                            a->second.aligned && multiple_of_width(st, 0)};
    }
  } else {
    set(arg, B.CreateAdd(start, B.CreateMul(k, step)));
    vary_[arg] = 0;
  }
  loops_.push_back({loop.latch, loop.exit, false, true, alive, ret});
  vregion(op.regions[0]);
  loops_.pop_back();
  B.CreateBr(loop.latch);
  loop_metadata(close_loop(loop, llvm::ConstantInt::get(it, 1)), op.attr.i);
  mask_ =
      ret ? B.CreateAnd(entry, B.CreateNot(B.CreateLoad(entry->getType(), ret)), "mask") : entry;
}

void Gen::vloop(const ir::Op& op) {
  Value* entry = mask_;
  llvm::AllocaInst* alive = entry_alloca(entry->getType(), nullptr, "alive");
  B.CreateStore(entry, alive);
  llvm::AllocaInst* ret =
      has_return(op.regions[0]) ? entry_alloca(entry->getType(), nullptr, "returned") : nullptr;
  if (ret) B.CreateStore(llvm::Constant::getNullValue(entry->getType()), ret);
  auto* header = llvm::BasicBlock::Create(C, "vloop", F);
  auto* body = llvm::BasicBlock::Create(C, "vloop.body", F);
  auto* exit = llvm::BasicBlock::Create(C, "vloop.exit", F);
  B.CreateBr(header);
  B.SetInsertPoint(header);
  Value* active = B.CreateLoad(entry->getType(), alive);
  B.CreateCondBr(any(active), body, exit);
  B.SetInsertPoint(body);
  mask_ = active;
  loops_.push_back({header, exit, false, true, alive, ret});
  vregion(op.regions[0]);
  loops_.pop_back();
  B.CreateBr(header);
  B.SetInsertPoint(exit);
  mask_ =
      ret ? B.CreateAnd(entry, B.CreateNot(B.CreateLoad(entry->getType(), ret)), "mask") : entry;
}

// A jump takes the active lanes out: out of the loop for break, out of this iteration for
// continue, out of every enclosing loop and of the rest of the unit for return.
void Gen::vjump(const ir::Op& op) {
  auto clear = [&](llvm::AllocaInst* a) {
    B.CreateStore(B.CreateAnd(B.CreateLoad(mask_->getType(), a), B.CreateNot(mask_)), a);
  };
  if (op.kind == OpKind::Return) {
    for (auto it = loops_.rbegin(); !it->units; ++it) {
      KILN_CHECK(it->vec, "a return inside a loop that runs without a mask");
      clear(it->alive);
      if (it->ret)
        B.CreateStore(B.CreateOr(B.CreateLoad(mask_->getType(), it->ret), mask_), it->ret);
    }
  } else {
    KILN_CHECK(!loops_.empty() && loops_.back().vec, "a jump in a loop that runs without a mask");
    if (op.kind == OpKind::Break) {
      KILN_CHECK(!loops_.back().units, "break out of a units loop");
      clear(loops_.back().alive);
    }
  }
  mask_ = llvm::Constant::getNullValue(mask_->getType());
}

// ---- values ----------------------------------------------------------------------------------

bool Gen::vector_op(const ir::Op& op) {
  switch (op.kind) {
    case OpKind::Const:
    case OpKind::CubePos:
    case OpKind::CubeCount:
    case OpKind::CubeDim:
    case OpKind::PlaneDim:
    case OpKind::Len:
    case OpKind::Shape:
    case OpKind::Stride:
    case OpKind::AllocShared:
    case OpKind::FragMem:
      return false;  // uniform: the scalar code
    case OpKind::AllocLocal: {
      const ir::Type& t = K.type_of(op.result);
      Mem m;
      llvm::AllocaInst* rows = entry_alloca(
          mem_scalar_ty(t.elem), B.getInt32(t.count * t.lanes * static_cast<uint32_t>(V_)),
          fmt::format("local{}", op.result));
      rows->setAlignment(llvm::Align(64));
      m.base = rows;
      m.len = m.extent = B.getInt32(t.count);
      mem_[op.result] = std::move(m);
      lane_local_.insert(op.result);
      var_mask_[op.result] = mask_;
      return true;
    }
    case OpKind::Load:
      vload(op);
      return true;
    case OpKind::Store:
      vstore(op);
      return true;
    case OpKind::Var:
    case OpKind::VarRead:
    case OpKind::VarWrite:
      vvar(op);
      return true;
    case OpKind::AtomicAdd:
      if (private_.count(op.operands[0])) {
        private_add(op);
        return true;
      }
      scalarize(op);
      return true;
    case OpKind::AtomicMin:
    case OpKind::AtomicMax:
    case OpKind::AtomicExchange:
    case OpKind::AtomicCas:
    case OpKind::Print:
      scalarize(op);
      return true;
    case OpKind::Assert:
      vassert(op);
      return true;
    case OpKind::If:
      vif(op);
      return true;
    case OpKind::For:
      vfor(op);
      return true;
    case OpKind::Loop:
      vloop(op);
      return true;
    case OpKind::Break:
    case OpKind::Continue:
    case OpKind::Return:
      vjump(op);
      return true;
    case OpKind::Units:
      KILN_CHECK(false, "a units loop inside a units loop");
      return true;
    default:
      break;
  }
  bool varying = false;
  for (ValueId o : op.operands) varying = varying || vary_[o];
  if (!varying) return false;
  velementwise(op);
  return true;
}

// A pure op with a varying operand: its scalar code, on vectors V times as wide.
void Gen::velementwise(const ir::Op& op) {
  if (vdivrem_uniform(op) || vdiv_by_uniform(op)) return;
  const ValueId r = op.result;
  switch (op.kind) {
    case OpKind::Broadcast:
      set(r, spread(v(op.operands[0]), K.type_of(r).lanes));
      vary_[r] = 1;
      return;
    case OpKind::Extract: {
      const int w = K.type_of(op.operands[0]).lanes;
      if (w == 1) {
        set(r, v(op.operands[0]));
      } else {
        std::vector<int> idx;
        for (int l = 0; l < V_; ++l) idx.push_back(l * w + static_cast<int>(op.attr.i));
        set(r, B.CreateShuffleVector(v(op.operands[0]), idx));
      }
      vary_[r] = 1;
      return;
    }
    case OpKind::Insert: {
      const int w = K.type_of(op.operands[0]).lanes;
      Value* x = widen(op.operands[1]);
      if (w == 1) {
        set(r, x);
      } else {
        std::vector<llvm::Constant*> pick;
        for (int l = 0; l < V_; ++l)
          for (int j = 0; j < w; ++j) pick.push_back(B.getInt1(j == static_cast<int>(op.attr.i)));
        set(r,
            B.CreateSelect(llvm::ConstantVector::get(pick), spread(x, w), widen(op.operands[0])));
      }
      vary_[r] = 1;
      return;
    }
    default:
      break;
  }
  std::vector<std::pair<ValueId, Value*>> saved;
  auto replace = [&](ValueId o, Value* x) {
    for (auto& s : saved)
      if (s.first == o) return;
    saved.emplace_back(o, vals_[o]);
    vals_[o] = x;
  };
  const int w = r != ir::kNoValue ? K.type_of(r).lanes : 1;
  for (size_t i = 0; i < op.operands.size(); ++i) {
    const ValueId o = op.operands[i];
    const bool select_cond = op.kind == OpKind::Select && i == 0;
    if (select_cond && K.type_of(o).lanes == 1 && w > 1) {
      // One condition for a whole line: uniform stays scalar (LLVM selects whole vectors by
      // it); varying is repeated over the lanes of each unit's line.
      if (vary_[o]) replace(o, spread(v(o), w));
      continue;
    }
    if (!vary_[o]) replace(o, widen(o));
  }
  wf_ = V_;
  emit_scalar(op);
  wf_ = 1;
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) vals_[it->first] = it->second;
  vary_[r] = 1;
  vaffine(op);
}

// Integer values of the form base + lane * stride are tracked through add, sub, mul, shl and
// casts that keep or narrow the width, so that memory accesses can see consecutive indices.
void Gen::vaffine(const ir::Op& op) {
  const ir::Type& t = K.type_of(op.result);
  if (t.lanes != 1 || !ir::is_int(t.elem)) return;
  auto aff = [&](ValueId o) -> const Affine* {
    auto it = affine_.find(o);
    return it == affine_.end() ? nullptr : &it->second;
  };
  auto uniform = [&](ValueId o) { return !vary_[o]; };
  auto multiple = [&](Value* x) { return multiple_of_width(x, 0); };
  const ValueId a = op.operands[0];
  const ValueId b = op.operands.size() > 1 ? op.operands[1] : ir::kNoValue;
  Affine out;
  switch (op.kind) {
    case OpKind::Add:
      if (aff(a) && uniform(b)) {
        out = {B.CreateAdd(aff(a)->base, v(b)), aff(a)->stride, aff(a)->aligned && multiple(v(b))};
      } else if (uniform(a) && aff(b)) {
        out = {B.CreateAdd(v(a), aff(b)->base), aff(b)->stride, aff(b)->aligned && multiple(v(a))};
      } else if (aff(a) && aff(b)) {
        out = {B.CreateAdd(aff(a)->base, aff(b)->base), B.CreateAdd(aff(a)->stride, aff(b)->stride),
               false};
      }
      break;
    case OpKind::Sub:
      if (aff(a) && uniform(b)) {
        out = {B.CreateSub(aff(a)->base, v(b)), aff(a)->stride, aff(a)->aligned && multiple(v(b))};
      } else if (uniform(a) && aff(b)) {
        out = {B.CreateSub(v(a), aff(b)->base), B.CreateNeg(aff(b)->stride), false};
      } else if (aff(a) && aff(b)) {
        out = {B.CreateSub(aff(a)->base, aff(b)->base), B.CreateSub(aff(a)->stride, aff(b)->stride),
               false};
      }
      break;
    case OpKind::Mul:
      if (aff(a) && uniform(b)) {
        out = {B.CreateMul(aff(a)->base, v(b)), B.CreateMul(aff(a)->stride, v(b)), false};
      } else if (uniform(a) && aff(b)) {
        out = {B.CreateMul(v(a), aff(b)->base), B.CreateMul(v(a), aff(b)->stride), false};
      }
      break;
    case OpKind::Shl:
      if (aff(a) && uniform(b)) {
        const bool sgn = ir::is_signed(t.elem);
        out = {shift(true, sgn, aff(a)->base, v(b)), shift(true, sgn, aff(a)->stride, v(b)), false};
      }
      break;
    case OpKind::Cast: {
      const ir::Type& from = K.type_of(a);
      if (aff(a) && ir::is_int(from.elem) && ir::elem_bits(t.elem) <= ir::elem_bits(from.elem)) {
        llvm::Type* to = scalar_ty(t.elem);
        const bool same = ir::elem_bits(t.elem) == ir::elem_bits(from.elem);
        out = {B.CreateIntCast(aff(a)->base, to, false), B.CreateIntCast(aff(a)->stride, to, false),
               same && aff(a)->aligned};
      }
      break;
    }
    default:
      break;
  }
  if (!out.base) return;
  out.aligned = out.aligned && is_one(out.stride);
  affine_[op.result] = out;
}

// unit-consecutive / c and % c for a constant c that is a multiple of the width: the lanes of
// one vector share the quotient (a uniform value) and have consecutive remainders.
bool Gen::vdivrem_uniform(const ir::Op& op) {
  if (op.kind != OpKind::Div && op.kind != OpKind::Rem) return false;
  const ir::Type& t = K.type_of(op.result);
  if (t.lanes != 1 || !ir::is_int(t.elem) || ir::is_signed(t.elem)) return false;
  auto it = affine_.find(op.operands[0]);
  if (it == affine_.end() || !it->second.aligned || vary_[op.operands[1]]) return false;
  auto* c = llvm::dyn_cast<llvm::ConstantInt>(v(op.operands[1]));
  if (!c || c->isZero() || c->getZExtValue() % static_cast<uint64_t>(V_) != 0) return false;
  Value* base = it->second.base;
  if (op.kind == OpKind::Div) {
    set(op.result, B.CreateUDiv(base, c));
    vary_[op.result] = 0;
    return true;
  }
  Value* rem = B.CreateURem(base, c);
  set(op.result,
      B.CreateAdd(B.CreateVectorSplat(static_cast<unsigned>(V_), rem), iota(scalar_ty(t.elem))));
  vary_[op.result] = 1;
  affine_[op.result] = Affine{rem, llvm::ConstantInt::get(rem->getType(), 1), true};
  return true;
}

// Whether a uniform integer is a multiple of the width: constants, and products, shifts and
// sums of such (cube_pos * cube_dim with a cube of 256 units, for instance).
bool Gen::multiple_of_width(Value* x, int depth) {
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(x))
    return c->getZExtValue() % static_cast<uint64_t>(V_) == 0;
  auto* bo = llvm::dyn_cast<llvm::BinaryOperator>(x);
  if (!bo || depth > 4) return false;
  Value* a = bo->getOperand(0);
  Value* b = bo->getOperand(1);
  switch (bo->getOpcode()) {
    case llvm::Instruction::Mul:
      return multiple_of_width(a, depth + 1) || multiple_of_width(b, depth + 1);
    case llvm::Instruction::Add:
    case llvm::Instruction::Sub:
      return multiple_of_width(a, depth + 1) && multiple_of_width(b, depth + 1);
    case llvm::Instruction::Shl: {
      auto* c = llvm::dyn_cast<llvm::ConstantInt>(b);
      return multiple_of_width(a, depth + 1) ||
             (c && c->getZExtValue() < 64 && (uint64_t{1} << c->getZExtValue()) % V_ == 0);
    }
    default:
      return false;
  }
}

// x / d and x % d for a varying u32 x and a uniform d known only at run time: x86 has no vector
// division, so divide by multiplying with d's "magic number" (Granlund and Montgomery, as in
// Hacker's Delight 10-8): with l = ceil(log2 d) and m = floor(2^32 * (2^l - d) / d) + 1,
// t = mulhi(x, m) and x / d = (t + ((x - t) >> 1)) >> (l - 1), exact for every u32 x and d >= 2.
// The magic number is computed once before the units loop when d is known there.
bool Gen::vdiv_by_uniform(const ir::Op& op) {
  if (op.kind != OpKind::Div && op.kind != OpKind::Rem) return false;
  const ir::Type& t = K.type_of(op.result);
  const ValueId x = op.operands[0], d = op.operands[1];
  if (t.elem != ElemType::U32 || t.lanes != 1 || vary_[d] || !vary_[x]) return false;
  Value* dv = v(d);
  if (llvm::isa<llvm::Constant>(dv)) return false;  // LLVM divides by constants itself
  Magic& mg = magic_[dv];
  if (!mg.m) {
    auto* inst = llvm::dyn_cast<llvm::Instruction>(dv);
    const bool outside = !inst || outer_blocks_.count(inst->getParent());
    llvm::IRBuilder<> b(C);
    if (outside)
      b.SetInsertPoint(units_pre_->getTerminator());
    else
      b.SetInsertPoint(B.GetInsertBlock(), B.GetInsertPoint());
    Value* d2 = b.CreateSelect(b.CreateICmpULT(dv, b.getInt32(2)), b.getInt32(2), dv);
    Value* l = b.CreateSub(b.getInt32(32),
                           b.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz,
                                                   b.CreateSub(d2, b.getInt32(1)), b.getFalse()));
    Value* d64 = b.CreateZExt(d2, b.getInt64Ty());
    Value* top =
        b.CreateShl(b.CreateSub(b.CreateShl(b.getInt64(1), b.CreateZExt(l, b.getInt64Ty())), d64),
                    b.getInt64(32));
    mg.m = b.CreateTrunc(b.CreateAdd(b.CreateUDiv(top, d64), b.getInt64(1)), b.getInt32Ty(),
                         "magic");  // below 2^32
    mg.shift = b.CreateSub(l, b.getInt32(1), "magic.shift");
    mg.small = b.CreateICmpULT(dv, b.getInt32(2));
    if (!outside) {
      Magic keep = mg;
      magic_.erase(dv);
      return vdiv_apply(op, keep);
    }
  }
  return vdiv_apply(op, mg);
}

bool Gen::vdiv_apply(const ir::Op& op, const Magic& mg) {
  const ValueId x = op.operands[0], d = op.operands[1];
  const unsigned n = static_cast<unsigned>(V_);
  auto* v64 = llvm::FixedVectorType::get(B.getInt64Ty(), n);
  auto* v32 = llvm::FixedVectorType::get(B.getInt32Ty(), n);
  Value* xv = v(x);
  Value* prod = B.CreateMul(B.CreateZExt(xv, v64),
                            B.CreateVectorSplat(n, B.CreateZExt(mg.m, B.getInt64Ty())));
  Value* hi = B.CreateTrunc(B.CreateLShr(prod, llvm::ConstantInt::get(v64, 32)), v32);
  Value* q = B.CreateAdd(hi, B.CreateLShr(B.CreateSub(xv, hi), llvm::ConstantInt::get(v32, 1)));
  q = B.CreateLShr(q, B.CreateVectorSplat(n, mg.shift));
  // d == 1: x; d == 0: 0 (the IR's x / 0).
  Value* dv = v(d);
  Value* small_q =
      B.CreateSelect(B.CreateICmpEQ(dv, B.getInt32(0)), llvm::Constant::getNullValue(v32), xv);
  q = B.CreateSelect(mg.small, small_q, q);
  Value* r = q;
  if (op.kind == OpKind::Rem)  // x - q * d; x % 0 == x follows from q == 0
    r = B.CreateSub(xv, B.CreateMul(q, B.CreateVectorSplat(n, dv)));
  set(op.result, r);
  vary_[op.result] = 1;
  return true;
}

}  // namespace kiln::cpu::detail
