// Verifier: one rejected use of every op kind, scoping and structure rules, and the
// uniformity rules for barriers and plane ops (accepted and rejected cases).
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ir/parser.h"
#include "ir/verifier.h"

using namespace kiln;
using namespace kiln::ir;

namespace {

const char* kHead =
    "kernel @k(%f: f32, %i: i32, %u: u32, %b: bool, %t: tensor<f32, 2>, %ro: tensor<f32, 1, ro>, "
    "%a: array<u32>, %af: array<f32x4>, %ai: array<i32, ro>, %w: tensor<u8, 1>) cube_dim(32, 1, "
    "1) {\n";

// Parses `body` inside a kernel with handy parameters and returns the verifier's message, or
// "(ok)" when the kernel verifies.
std::string verify_body(const std::string& body) {
  auto k = parse(std::string(kHead) + body + "}\n", "t.kir");
  if (!k.ok()) return "parse error: " + k.error().message;
  auto st = verify(*k);
  if (st.ok()) return "(ok)";
  CHECK(st.error().kind == ErrorKind::Verify);
  return st.error().message;
}

struct Case {
  OpKind kind;
  std::string body;
  std::string expected;  // a substring of the message, which starts with t.kir:LINE:COL
};

const std::string kAcc = "  %0 = alloc.frag : frag<acc, f32, 16, 16, 16>\n";
const std::string kVaryingIf = "  %p = unit_pos : u32\n  %c = lt %p, %u : bool\n  if %c {\n";

std::vector<Case> cases() {
  return {
      {OpKind::Const, "  %0 = const 256 : u8\n",
       "t.kir:2:3: error: constant 256 is out of range for u8"},
      {OpKind::UnitPos, "  %0 = unit_pos : f32\n",
       "'unit_pos' produces u32, but its type is written as f32"},
      {OpKind::CubePos, "  %0 = cube_pos x : i32\n", "'cube_pos' produces u32"},
      {OpKind::AbsolutePos, "  %0 = absolute_pos : u64\n", "'absolute_pos' produces u32"},
      {OpKind::CubeDim, "  %0 = cube_dim z : u32x2\n", "'cube_dim' produces u32"},
      {OpKind::CubeCount, "  %0 = cube_count : bool\n", "'cube_count' produces u32"},
      {OpKind::PlaneDim, "  %0 = plane_dim : i32\n", "'plane_dim' produces u32"},
      {OpKind::PlaneLane, "  %0 = plane_lane : f16\n", "'plane_lane' produces u32"},
      {OpKind::PlanePos, "  %0 = plane_pos x : u32\n", "parse error"},  // takes no axis
      {OpKind::Add, "  %0 = add %f, %i : f32\n",
       "the operands of 'add' must have the same type, got f32 and i32"},
      {OpKind::Sub, "  %0 = sub %b, %b : bool\n",
       "'sub' takes integers or floats, but its first operand is bool"},
      {OpKind::Mul, "  %0 = mul %u, %i : u32\n", "the operands of 'mul' must have the same type"},
      {OpKind::Div, "  %0 = div %i, %i : u32\n",
       "'div' produces i32, but its type is written as u32"},
      {OpKind::Rem, "  %0 = rem %t, %t : f32\n",
       "the first operand of 'rem' must be a value, not tensor<f32, 2>"},
      {OpKind::Min, "  %0 = min %f : f32\n", "parse error"},  // operand count is syntax
      {OpKind::Max, "  %0 = max %b, %b : bool\n", "'max' takes integers or floats"},
      {OpKind::Neg, "  %0 = neg %b : bool\n",
       "'neg' takes integers or floats, but its first operand is bool"},
      {OpKind::Abs, "  %0 = abs %a : u32\n", "must be a value, not array<u32>"},
      {OpKind::Fma, "  %0 = fma %i, %i, %i : i32\n",
       "'fma' takes floats (f16, bf16, f32, f64, f8e4m3, f8e5m2), but its first operand is i32"},
      {OpKind::Clamp, "  %0 = clamp %f, %f, %i : f32\n",
       "the operands of 'clamp' must have the same type"},
      {OpKind::And, "  %0 = and %f, %f : f32\n", "'and' takes integers or bool"},
      {OpKind::Or, "  %0 = or %b, %i : bool\n", "must have the same type"},
      {OpKind::Xor, "  %0 = xor %f, %f : f32\n", "'xor' takes integers or bool"},
      {OpKind::Not, "  %0 = not %f : f32\n", "'not' takes integers or bool"},
      {OpKind::Shl, "  %0 = shl %f, %f : f32\n", "'shl' takes integers"},
      {OpKind::Shr, "  %0 = shr %b, %b : bool\n", "'shr' takes integers"},
      {OpKind::Eq, "  %0 = eq %f, %i : bool\n", "the operands of 'eq' must have the same type"},
      {OpKind::Ne, "  %0 = ne %f, %f : f32\n",
       "'ne' produces bool, but its type is written as f32"},
      {OpKind::Lt, "  %0 = lt %b, %b : bool\n", "'lt' takes integers or floats"},
      {OpKind::Le, "  %0 = le %u, %i : bool\n", "must have the same type"},
      {OpKind::Gt, "  %0 = gt %b, %b : bool\n", "'gt' takes integers or floats"},
      {OpKind::Ge, "  %0 = ge %f, %u : bool\n", "must have the same type"},
      {OpKind::Select, "  %0 = select %f, %i, %i : i32\n",
       "'select' takes bool, but its first operand is f32"},
      {OpKind::Cast, "  %0 = cast %f : f32x4\n",
       "'cast' keeps the line width: f32 cannot become f32x4"},
      {OpKind::Bitcast, "  %0 = bitcast %f : f64\n",
       "'bitcast' needs element types of the same bit width"},
      {OpKind::Broadcast, "  %0 = broadcast %f : i32x4\n",
       "'broadcast' of f32 must produce a line of f32, not i32x4"},
      {OpKind::Extract, "  %0 = broadcast %f : f32x4\n  %1 = extract %0, 4 : f32\n",
       "t.kir:3:3: error: lane 4 is out of range for f32x4"},
      {OpKind::Insert, "  %0 = broadcast %f : f32x4\n  %1 = insert %0, %i, 0 : f32x4\n",
       "'insert' into f32x4 needs a f32 scalar, got i32"},
      {OpKind::Sqrt, "  %0 = sqrt %i : i32\n", "'sqrt' takes floats"},
      {OpKind::Rsqrt, "  %0 = rsqrt %u : u32\n", "'rsqrt' takes floats"},
      {OpKind::Exp, "  %0 = exp %i : i32\n", "'exp' takes floats"},
      {OpKind::Exp2, "  %0 = exp2 %b : bool\n", "'exp2' takes floats"},
      {OpKind::Log, "  %0 = log %i : i32\n", "'log' takes floats"},
      {OpKind::Log2, "  %0 = log2 %i : i32\n", "'log2' takes floats"},
      {OpKind::Sin, "  %0 = sin %i : i32\n", "'sin' takes floats"},
      {OpKind::Cos, "  %0 = cos %i : i32\n", "'cos' takes floats"},
      {OpKind::Tanh, "  %0 = tanh %i : i32\n", "'tanh' takes floats"},
      {OpKind::Pow, "  %0 = pow %f, %i : f32\n",
       "'pow' takes floats (f16, bf16, f32, f64, f8e4m3, f8e5m2), but its second operand is i32"},
      {OpKind::Floor, "  %0 = floor %i : i32\n", "'floor' takes floats"},
      {OpKind::Ceil, "  %0 = ceil %i : i32\n", "'ceil' takes floats"},
      {OpKind::Round, "  %0 = round %i : i32\n", "'round' takes floats"},
      {OpKind::Trunc, "  %0 = trunc %i : i32\n", "'trunc' takes floats"},
      {OpKind::IsNan, "  %0 = is_nan %i : bool\n", "'is_nan' takes floats"},
      {OpKind::IsInf, "  %0 = is_inf %f : f32\n",
       "'is_inf' produces bool, but its type is written as f32"},
      {OpKind::AllocShared, "  if %b {\n    %0 = alloc.shared : shared<f32, 4>\n  }\n",
       "t.kir:3:5: error: 'alloc.shared' must be at the top level of the kernel"},
      {OpKind::AllocLocal, "  %0 = alloc.local : local<f32, 0>\n",
       "'alloc.local' needs at least one line"},
      {OpKind::Len, "  %0 = len %f : u32\n", "'len' takes a memory object, got f32"},
      {OpKind::Shape, "  %0 = shape %t, 2 : u32\n",
       "dimension 2 is out of range for a tensor of rank 2"},
      {OpKind::Stride, "  %0 = stride %a, 0 : u32\n", "'stride' takes a tensor, got array<u32>"},
      {OpKind::Load, "  %0 = load %t, %f : f32\n", "the index of 'load' must be u32, got f32"},
      {OpKind::Store, "  store %ro, %u, %f\n",
       "'store' writes to %ro, which is read-only (tensor<f32, 1, ro>); declare it writable"},
      {OpKind::Var, "  %0 = var %t : var<f32>\n",
       "the first operand of 'var' must be a value, not tensor<f32, 2>"},
      {OpKind::VarRead, "  %0 = var.read %f : f32\n", "'var.read' takes a variable, got f32"},
      {OpKind::VarWrite, "  %0 = var %f : var<f32>\n  var.write %0, %i\n",
       "writing i32 into var<f32>: types differ"},
      {OpKind::AtomicAdd, "  %0 = broadcast %f : f32x4\n  %1 = atomic.add %af, %u, %0 : f32x4\n",
       "the memory's line width must be 1, got array<f32x4>"},
      {OpKind::AtomicMin, "  %0 = atomic.min %t, %u, %f : f32\n",
       "'atomic.min' supports 32- or 64-bit integers, not f32"},
      {OpKind::AtomicMax, "  %0 = atomic.max %ai, %u, %i : i32\n",
       "'atomic.max' writes to %ai, which is read-only"},
      {OpKind::AtomicExchange,
       "  %0 = alloc.local : local<u32, 4>\n  %1 = atomic.exchange %0, %u, %u : u32\n",
       "'atomic.exchange' needs global or shared memory, got local<u32, 4>"},
      {OpKind::AtomicCas, "  %0 = atomic.cas %a, %u, %i, %u : u32\n",
       "the third operand of 'atomic.cas' must be u32, got i32"},
      {OpKind::SyncCube, kVaryingIf + "    sync_cube\n  }\n",
       "t.kir:5:5: error: 'sync_cube' is under control flow that differs between the units of the "
       "cube: the condition of the 'if' at t.kir:4:3 depends on the unit"},
      {OpKind::SyncPlane, kVaryingIf + "    sync_plane\n  }\n",
       "t.kir:5:5: error: 'sync_plane' is under control flow that differs between the units of a "
       "plane"},
      {OpKind::PlaneSum, kVaryingIf + "    %0 = plane.sum %f : f32\n  }\n",
       "'plane.sum' is under control flow that differs"},
      {OpKind::PlaneMin, kVaryingIf + "    %0 = plane.min %f : f32\n  }\n",
       "'plane.min' is under control flow that differs"},
      {OpKind::PlaneMax, "  %0 = plane.max %b : bool\n", "'plane.max' takes integers or floats"},
      {OpKind::PlaneAny, "  %0 = plane.any %f : f32\n", "'plane.any' takes bool"},
      {OpKind::PlaneAll, kVaryingIf + "    %0 = plane.all %b : bool\n  }\n",
       "'plane.all' is under control flow that differs"},
      {OpKind::PlaneBroadcast, "  %0 = plane_lane : u32\n  %1 = plane.broadcast %f, %0 : f32\n",
       "the lane of 'plane.broadcast' differs between units"},
      {OpKind::PlaneShuffle, "  %0 = plane.shuffle %f, %f : f32\n",
       "the lane of 'plane.shuffle' must be u32, got f32"},
      {OpKind::PlaneShuffleXor, kVaryingIf + "    %0 = plane.shuffle_xor %f, %u : f32\n  }\n",
       "'plane.shuffle_xor' is under control flow"},
      {OpKind::If, "  if %i {\n  }\n", "the condition of 'if' must be a bool scalar, got i32"},
      {OpKind::For, "  for %0 = %f to %f step %f {\n  }\n",
       "'for' takes integers, but its first operand is f32"},
      {OpKind::Loop,
       kVaryingIf.substr(0, kVaryingIf.size() - 10) +
           "  loop {\n    if %c {\n      break\n    }\n    sync_cube\n  }\n",
       "the 'break' at t.kir:6:7 runs for some units only"},
      {OpKind::Units, "  units %0 = %f to %u {\n  }\n",
       "the start of 'units' must be u32, got f32"},
      {OpKind::Break, "  break\n",
       "t.kir:2:3: error: 'break' outside a loop; it must be inside a 'for' or 'loop'"},
      {OpKind::Continue, "  if %b {\n    continue\n  }\n",
       "t.kir:3:5: error: 'continue' outside a loop"},
      {OpKind::Return, "  return\n  %0 = unit_pos : u32\n",
       "t.kir:3:3: error: this op follows 'return' in the same block and would never run"},
      {OpKind::Print, "  print \"{} and {}\", %f\n",
       "the 'print' format has 2 placeholders but 1 value is given"},
      {OpKind::Assert, "  assert %f, \"positive\"\n",
       "the condition of 'assert' must be a bool scalar, got f32"},
      {OpKind::AllocFrag, "  %0 = alloc.frag : frag<a, f64, 16, 16, 16>\n",
       "matrix inputs are f16, bf16, f32 (multiplied as tf32), i8, u8, f8e4m3 or f8e5m2, not f64"},
      {OpKind::FragFill, kAcc + "  frag.fill %0, %i\n",
       "'frag.fill' of frag<acc, f32, 16, 16, 16> needs a f32 scalar, got i32"},
      {OpKind::FragLoad, kAcc + "  frag.load %0, %af, %u, %u, %u, %u, row\n",
       "the memory's line width must be 1, got array<f32x4>"},
      {OpKind::FragStore, kAcc + "  frag.store %ro, %u, %u, %u, %u, %0, row\n",
       "cannot store to read-only memory"},
      {OpKind::FragMma,
       kAcc + "  %1 = alloc.frag : frag<a, f16, 16, 16, 16>\n"
              "  %2 = alloc.frag : frag<b, bf16, 16, 16, 16>\n  frag.mma %0, %1, %2\n",
       "'frag.mma' needs A and B of one element type, got f16 and bf16"},
      {OpKind::FragCast,
       kAcc + "  %1 = alloc.frag : frag<acc, f16, 16, 8, 16>\n  frag.cast %1, %0\n",
       "'frag.cast' needs fragments of one shape m x n x k"},
      {OpKind::FragCast, kAcc + "  %1 = alloc.frag : frag<a, f32, 16, 16, 8>\n  frag.cast %1, %0\n",
       "'frag.cast' makes A fragments of f16 or bf16 from accumulators"},
      {OpKind::FragCast,
       kAcc + "  %1 = alloc.frag : frag<a, f16, 16, 16, 32>\n  frag.cast %1, %0\n",
       "'frag.cast' to an A fragment needs the accumulator's rows and columns as the A tile's m "
       "x k: frag<acc, f32, 16, 16, 16> has 16 x 16, frag<a, f16, 16, 16, 32> is 16 x 32"},
      {OpKind::FragPlane, kAcc + "  %1 = frag.plane %0, %f : frag<acc, f32, 16, 16, 16>\n",
       "the plane of 'frag.plane' must be u32, got f32"},
      {OpKind::FragGet, kAcc + "  %1 = frag.get %0, 8 : f32\n",
       "'frag.get' element 8 is out of range: each unit holds 8 elements of frag<acc, f32, 16, "
       "16, 16>"},
      {OpKind::FragGet,
       "  %0 = alloc.frag : frag<a, f16, 16, 16, 16>\n  %1 = frag.get %0, 0 : f16\n",
       "'frag.get' reads and writes the elements of accumulators, not frag<a, f16, 16, 16, 16>"},
      {OpKind::FragSet, kAcc + "  frag.set %0, %i, 0\n",
       "'frag.set' of frag<acc, f32, 16, 16, 16> needs a f32 scalar, got i32"},
      {OpKind::FragMem, kAcc + "  %1 = frag.mem %0 : shared<f16, 256>\n",
       "'frag.mem' of frag<acc, f32, 16, 16, 16> is a shared array of f32 holding whole "
       "256-element tiles, not shared<f16, 256>"},
      {OpKind::FragLdmatrix, kAcc + "  frag.ldmatrix %0, %af, %u, %u, row\n",
       "'frag.ldmatrix' loads A and B fragments of 16- or 8-bit inputs (ldmatrix moves 16-bit "
       "halves), not frag<acc, f32, 16, 16, 16>; use 'frag.load'"},
      {OpKind::FragMmaScaled,
       kAcc + "  %1 = alloc.frag : frag<a, f16, 16, 16, 16>\n"
              "  %2 = alloc.frag : frag<b, f16, 16, 16, 16>\n"
              "  frag.mma_scaled %0, %1, %2, %a, %u, %u, %a, %u, %u\n",
       "'frag.mma_scaled' multiplies f8e4m3 or f8e5m2 inputs (kind::mxf8f6f4), not f16"},
      {OpKind::WgmmaDesc, "  %0 = wgmma.desc %t, %u, %u, %u, 128 : u64\n",
       "'wgmma.desc' describes a matrix in shared memory, not tensor<f32, 2>"},
      {OpKind::Wgmma, kAcc + "  wgmma.mma %0, %u, %u, bf16\n",
       "the A descriptor of 'wgmma.mma' must be a u64 from 'wgmma.desc', got u32"},
      {OpKind::WgmmaFence, kVaryingIf + "    wgmma.fence\n  }\n",
       "'wgmma.fence' is under control flow that differs between the units of a plane"},
      {OpKind::WgmmaCommit, kVaryingIf + "    wgmma.commit\n  }\n",
       "'wgmma.commit' is under control flow that differs between the units of a plane"},
      {OpKind::WgmmaWait, "  wgmma.wait 9\n", "'wgmma.wait' leaves 0 to 7 groups in flight, not 9"},
      {OpKind::MbarInit, "  %0 = alloc.shared : shared<u32, 1>\n  mbar.init %0, %u, 1\n",
       "'mbar.init' needs an mbarrier, an element of a shared array of u64, not shared<u32, 1>"},
      {OpKind::MbarWait,
       "  %0 = alloc.shared : shared<u64, 1>\n" + kVaryingIf + "    mbar.wait %0, %u, %u\n  }\n",
       "'mbar.wait' is under control flow that differs between the units of the cube"},
      {OpKind::TmemAlloc, "  %0 = tmem.alloc 1024 : u32\n",
       "'tmem.alloc' of 1024 columns: tensor memory is allocated in a power of two"},
      {OpKind::TmemFree, "  tmem.free %f, 32\n",
       "the tensor-memory address of 'tmem.free' must be u32, got f32"},
      {OpKind::Tcgen05Desc, "  %0 = tcgen05.desc %t, %u, %u, %u, 64 : u64\n",
       "'tcgen05.desc' describes a matrix in shared memory, not tensor<f32, 2>"},
      {OpKind::Tcgen05Mma, "  tcgen05.mma %u, %u, %u, %b, bf16, 128\n",
       "the A descriptor of 'tcgen05.mma' must be a u64 from 'tcgen05.desc', got u32"},
      {OpKind::Tcgen05Commit,
       "  %0 = alloc.shared : shared<u64, 1>\n  %1 = unit_pos : u32\n  tcgen05.commit %0, %1\n",
       "operand %1 of 'tcgen05.commit' differs between the units of the cube"},
      {OpKind::TmemLoad, "  %0 = alloc.shared : shared<f16, 4096>\n  tmem.load %0, %u, %u, 16\n",
       "'tmem.load' copies 32-bit columns into a shared array of f32, i32 or u32"},
      {OpKind::TmemRead, "  %0 = unit_pos : u32\n  %1 = tmem.read %u, %0 : f32x4\n",
       "operand %0 of 'tmem.read' differs between the units of a plane"},
      {OpKind::MbarArriveTx,
       "  %0 = alloc.shared : shared<u64, 1>\n  mbar.arrive_expect_tx %0, %u, 1048576\n",
       "'mbar.arrive_expect_tx' counts 1 to 1048575 bytes, not 1048576"},
      {OpKind::TmaLoad,
       "  %0 = alloc.shared : shared<f32, 1024>\n  %1 = alloc.shared : shared<u64, 1>\n"
       "  %2 = const 0 : i32\n  tma.load %0, %u, %t, %1, %u, %2, %2, box 8, 64, swizzle 128\n",
       "with a 128-byte swizzle the innermost extent of a TMA box is at most 128 bytes"},
      {OpKind::TmaLoad,
       "  %0 = alloc.shared : shared<u8, 1024>\n  %1 = alloc.shared : shared<u64, 1>\n"
       "  %2 = const 0 : i32\n  tma.load %0, %u, %w, %1, %u, %2, box 64, swizzle 0, fill nan\n",
       "'tma.load': a NaN fill is for f16, bf16, f32 and f64 tensors, not u8"},
      {OpKind::ClusterRank, "  %0 = cluster_rank : i32\n", "'cluster_rank' produces u32"},
      {OpKind::SyncCluster, kVaryingIf + "    sync_cluster\n  }\n",
       "t.kir:5:5: error: 'sync_cluster' is under control flow that differs between the units of "
       "the cube"},
      {OpKind::TmaLoadMulticast,
       "  %0 = alloc.shared : shared<f32, 1024>\n  %1 = alloc.shared : shared<u64, 1>\n"
       "  %2 = const 0 : i32\n"
       "  tma.load_multicast %0, %u, %t, %1, %u, %u, %2, %2, box 8, 32, swizzle 128\n",
       "the mask of 'tma.load_multicast' (bit r: the cube of rank r in the cluster) is a u16 "
       "scalar, got u32"},
      {OpKind::ClusterLoad, "  %0 = cluster.load %t, %u, %u : f32\n",
       "'cluster.load' reads a shared array of another cube of the cluster, not tensor<f32, 2>"},
      {OpKind::TmaStoreWait, "  tma.store_wait 8\n",
       "'tma.store_wait' leaves 0 to 7 groups in flight, not 8"},
      {OpKind::Pipeline,
       "  %0 = alloc.shared : shared<u64, 2>\n"
       "  pipeline %u, %0, %0, stages 3, lag 0 produce(%1, %2) {\n  } consume(%3, %4) {\n  }\n",
       "the full mbarriers of a pipeline of 3 stages need 3 elements; the array has 2"},
      {OpKind::TmaPrefetch,
       "  %0 = const 0 : u32\n  tma.prefetch %t, %0, %0, box 8, 32, swizzle 128\n",
       "the coordinates of 'tma.prefetch' are i32 scalars, got u32"},
      {OpKind::AsyncCopy,
       "  %0 = alloc.shared : shared<f16, 64>\n  async.copy %0, %u, %t, %u, %b\n",
       "'async.copy' copies between f32 elements and a shared array of f16"},
      {OpKind::AsyncCommit, "  %0 = async.commit\n", "parse error"},  // nothing else is wrong
      {OpKind::AsyncWait, "  async.wait 8\n", "'async.wait' leaves 0 to 7 groups in flight, not 8"},
      {OpKind::TmaStore,
       "  %0 = alloc.shared : shared<f32, 1024>\n  %1 = const 0 : i32\n"
       "  tma.store %ro, %0, %u, %1, box 64, swizzle 0\n",
       "'tma.store' writes to a read-only tensor (tensor<f32, 1, ro>); declare it writable"},
      {OpKind::TmaStore,
       "  %0 = alloc.shared : shared<f32, 1024>\n  %1 = const 0 : i32\n"
       "  tma.store %t, %0, %u, %1, %1, box 4, 16, swizzle 0, reduce min\n",
       "'tma.store': TMA has no min reduction of f32 elements"},
  };
}

}  // namespace

TEST_CASE("the verifier rejects a wrong use of every op kind", "[ir][verifier]") {
  std::set<OpKind> covered;
  for (const Case& c : cases()) {
    covered.insert(c.kind);
    INFO("op " << op_name(c.kind) << ":\n" << c.body);
    const std::string msg = verify_body(c.body);
    CHECK_THAT(msg, Catch::Contains(c.expected));
    if (c.expected != "parse error") CHECK_THAT(msg, Catch::StartsWith("t.kir:"));
  }
  for (int i = 0; i < kNumOpKinds; ++i) {
    INFO("no verifier case for " << op_name(static_cast<OpKind>(i)));
    CHECK(covered.count(static_cast<OpKind>(i)) == 1);
  }
}

// A pipeline's ring of two stages, with `before`, `produce` and `consume` in its places.
std::string pipeline_body(const std::string& before, const std::string& produce,
                          const std::string& consume, const char* rest = "") {
  return "  %0 = alloc.shared : shared<u64, 2>\n  %1 = alloc.shared : shared<u64, 2>\n" + before +
         "  pipeline %u, %0, %1, stages 2, lag 1 produce(%2, %3) {\n" + produce +
         "  } consume(%4, %5) {\n" + consume + "  }\n" + rest;
}

TEST_CASE("a pipeline's rules: placement, what comes before it and what its regions hold",
          "[ir][verifier]") {
  CHECK(verify_body(pipeline_body("", "    %6 = add %2, %3 : u32\n",
                                  "    %7 = unit_pos : u32\n    sync_plane\n")) == "(ok)");
  CHECK_THAT(verify_body(pipeline_body("", "    %6 = unit_pos : u32\n", "")),
             Catch::Contains("t.kir:5:5: error: 'unit_pos' in a pipeline's produce region"));
  CHECK_THAT(verify_body(pipeline_body("", "", "    sync_cube\n")),
             Catch::Contains("'sync_cube' in a pipeline's consume region"));
  CHECK_THAT(verify_body(pipeline_body("", "", "    return\n")),
             Catch::Contains("a unit that returns never releases its stages"));
  CHECK_THAT(verify_body(pipeline_body("  store %a, %u, %u\n", "", "")),
             Catch::Contains("t.kir:4:3: error: 'store' before a pipeline"));
  CHECK_THAT(verify_body(pipeline_body("  mbar.arrive_expect_tx %0, %u, 64\n", "", "")),
             Catch::Contains("'mbar.arrive_expect_tx' before a pipeline: the producer plane runs "
                             "it too"));
  // Cube barriers and ops that unit 0 issues are fine before it: the producer plane takes part.
  CHECK(verify_body(pipeline_body("  sync_cube\n  mbar.init %0, %u, 1\n", "", "")) == "(ok)");
  // A commit pipeline's consume region issues tcgen05 multiplies and commits.
  CHECK(verify_body("  %0 = alloc.shared : shared<u64, 2>\n  %1 = alloc.shared : shared<u64, 2>\n"
                    "  pipeline %u, %0, %1, stages 2, commit produce(%2, %3) {\n  } consume(%4, "
                    "%5) {\n    tcgen05.commit %1, %5\n  }\n") == "(ok)");
  CHECK_THAT(verify_body(pipeline_body(
                 "", "", "",
                 "  pipeline %u, %0, %1, stages 2, lag 0 produce(%6, %7) {\n  } consume(%8, %9) "
                 "{\n  }\n")),
             Catch::Contains("a kernel has one pipeline; another one is at t.kir:4:3"));
  CHECK_THAT(verify_body("  %0 = alloc.shared : shared<u64, 2>\n  pipeline %u, %0, %0, stages 2, "
                         "lag 2 produce(%1, %2) {\n  } consume(%3, %4) {\n  }\n"),
             Catch::Contains("a pipeline's release lag must be below its stages (2), not 2"));
  CHECK_THAT(verify_body("  %0 = alloc.shared : shared<u64, 2>\n  if %b {\n    pipeline %u, %0, "
                         "%0, stages 2, lag 0 produce(%1, %2) {\n    } consume(%3, %4) {\n    "
                         "}\n  }\n"),
             Catch::Contains("'pipeline' must be at the top level of the kernel"));
  // The producer plane needs room: a cube of 1000 units has none.
  auto k = parse("kernel @k(%u: u32) cube_dim(1000, 1, 1) {\n" +
                     pipeline_body("", "", "").replace(0, 0, "") + "}\n",
                 "t.kir");
  REQUIRE(k.ok());
  auto st = verify(*k);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("a one-dimensional cube of whole planes"));
}

TEST_CASE("values are scoped to their region", "[ir][verifier]") {
  CHECK_THAT(verify_body("  if %b {\n    %0 = neg %f : f32\n  }\n  %1 = neg %0 : f32\n"),
             Catch::Contains("t.kir:5:3: error: 'neg' uses %0 outside the region that defines it"));
  CHECK_THAT(
      verify_body("  %0 = const 0 : u32\n  %1 = const 1 : u32\n  for %2 = %0 to %u step %1 {\n  }\n"
                  "  %3 = add %2, %1 : u32\n"),
      Catch::Contains("'add' uses %2 outside the region"));
  CHECK(verify_body("  %0 = neg %f : f32\n  if %b {\n    %1 = neg %0 : f32\n  }\n") == "(ok)");
}

TEST_CASE("lowered kernels keep unit-level ops inside units loops", "[ir][verifier]") {
  CHECK_THAT(
      verify_body("  %0 = const 0 : u32\n  units %1 = %0 to %u {\n    %2 = unit_pos : u32\n  }\n"),
      Catch::Contains("t.kir:4:5: error: 'unit_pos' cannot appear in a lowered kernel"));
  CHECK_THAT(
      verify_body(
          "  %0 = const 0 : u32\n  units %1 = %0 to %u {\n    units %2 = %0 to %u {\n    }\n  }\n"),
      Catch::Contains("'units' loops do not nest"));
  CHECK_THAT(verify_body("  %0 = const 0 : u32\n  units %1 = %0 to %u {\n    break\n  }\n"),
             Catch::Contains("'break' cannot leave a units loop"));
  CHECK_THAT(verify_body("  %0 = const 0 : u32\n  units %1 = %0 to %u {\n  }\n  sync_cube\n"),
             Catch::Contains("'sync_cube' cannot appear in a lowered kernel"));
  CHECK(verify_body(
            "  %0 = const 0 : u32\n  units %1 = %0 to %u {\n    %2 = alloc.local : local<f32, 2>\n"
            "    continue\n  }\n") == "(ok)");
}

TEST_CASE("matrix fragments: shapes, types, placement and plane uniformity", "[ir][verifier]") {
  CHECK_THAT(verify_body("  %0 = alloc.frag : frag<a, f16, 16, 16, 8>\n"),
             Catch::Contains("k must be 16 or 32 for f16 inputs, got 8"));
  CHECK_THAT(verify_body("  %0 = alloc.frag : frag<acc, f32, 8, 16, 16>\n"),
             Catch::Contains("m must be 16 or 32, got 8"));
  CHECK_THAT(verify_body("  %0 = alloc.frag : frag<acc, i8, 16, 16, 32>\n"),
             Catch::Contains("an accumulator holds f32, f16, bf16, f8e4m3, f8e5m2 or i32, not i8"));
  CHECK_THAT(verify_body(kAcc + "  %1 = alloc.frag : frag<a, i8, 16, 16, 32>\n"
                                "  %2 = alloc.frag : frag<b, i8, 16, 16, 32>\n"
                                "  %3 = alloc.frag : frag<acc, f32, 16, 16, 32>\n"
                                "  frag.mma %3, %1, %2\n"),
             Catch::Contains("'frag.mma' of i8 inputs accumulates in i32, not f32"));
  CHECK_THAT(verify_body("  %0 = alloc.frag : frag<a, f32, 16, 16, 8>\n"
                         "  frag.store %t, %u, %u, %u, %u, %0, row\n"),
             Catch::Contains("'frag.store' stores accumulators"));
  CHECK_THAT(verify_body("  %0 = alloc.frag : frag<acc, f32, 16, 16, 16>\n"
                         "  frag.load %0, %t, %u, %u, %u, %u, diagonal\n"),
             Catch::Contains("the memory layout, row or col"));
  CHECK_THAT(verify_body("  if %b {\n  " + kAcc + "  }\n"),
             Catch::Contains("'alloc.frag' must be at the top level of the kernel"));
  // A plane works on its fragment together: no unit-dependent control flow or operands.
  CHECK_THAT(verify_body(kAcc + kVaryingIf + "    frag.fill %0, %f\n  }\n"),
             Catch::Contains("'frag.fill' is under control flow that differs between the units "
                             "of a plane"));
  CHECK_THAT(verify_body(kAcc + "  %1 = unit_pos : u32\n"
                                "  frag.store %t, %1, %u, %u, %u, %0, row\n"),
             Catch::Contains("operand %1 of 'frag.store' differs between the units of a plane"));
  CHECK(verify_body(kAcc + "  %1 = plane_pos : u32\n  frag.store %t, %1, %u, %u, %u, %0, col\n") ==
        "(ok)");
  // Fragments in a lowered kernel run once per plane, never inside a units loop.
  CHECK_THAT(verify_body(kAcc + "  units %1 = %u to %u {\n"
                                "    %2 = frag.plane %0, %1 : frag<acc, f32, 16, 16, 16>\n"
                                "    frag.fill %2, %f\n  }\n"),
             Catch::Contains("'frag.fill' runs once per plane and cannot be inside a units loop"));
  auto k = parse("kernel @k(%f: f32) cube_dim(48, 1, 1) {\n" + kAcc + "  frag.fill %0, %f\n}\n",
                 "t.kir");
  REQUIRE(k.ok());
  auto st = verify(*k);
  REQUIRE(!st.ok());
  CHECK_THAT(st.error().message,
             Catch::Contains("'frag.fill' needs whole planes, but the cube has 48 units"));
}

TEST_CASE("wgmma: descriptors from shared memory, shapes and whole warpgroups", "[ir][verifier]") {
  auto msg = [](const std::string& body, int units = 128) {
    auto k = parse(fmt::format("kernel @k(%u: u32, %d: u64) cube_dim({}, 1, 1) {{\n"
                               "  %s = alloc.shared : shared<bf16, 8192>\n{}}}\n",
                               units, body),
                   "t.kir");
    REQUIRE(k.ok());
    auto st = verify(*k);
    return st.ok() ? std::string("(ok)") : st.error().message;
  };
  const std::string desc = "  %a = wgmma.desc %s, %u, %u, %u, 128 : u64\n";
  const std::string ok = "  %0 = alloc.frag : frag<acc, f32, 16, 64, 16>\n" + desc +
                         "  wgmma.fence\n  wgmma.mma %0, %a, %a, bf16\n  wgmma.commit\n"
                         "  wgmma.wait 0\n";
  CHECK(msg(ok) == "(ok)");
  CHECK_THAT(msg(ok, 64), Catch::Contains("'wgmma.mma' needs whole warpgroups (4 planes, 128 "
                                          "units), but the cube has 64 units"));
  // Descriptors come from wgmma.desc on shared memory, not from other values.
  CHECK_THAT(msg("  %0 = alloc.frag : frag<acc, f32, 16, 64, 16>\n" + desc +
                 "  wgmma.mma %0, %a, %d, bf16\n"),
             Catch::Contains("the B descriptor %d of 'wgmma.mma' does not come from 'wgmma.desc'"));
  CHECK_THAT(msg("  %0 = wgmma.desc %s, %u, %u, %u, 48 : u64\n"),
             Catch::Contains("it must be 0 (none), 32, 64 or 128 bytes"));
  // MN-major operands are f16 or bf16, for wgmma and tcgen05 alike.
  CHECK(msg("  %0 = alloc.frag : frag<acc, f32, 16, 64, 16>\n" + desc +
            "  wgmma.fence\n  wgmma.mma %0, %a, %a, bf16, mn, k\n") == "(ok)");
  CHECK_THAT(msg("  %0 = alloc.frag : frag<acc, i32, 16, 64, 32>\n" + desc +
                 "  wgmma.fence\n  wgmma.mma %0, %a, %a, i8, k, mn\n"),
             Catch::Contains("'wgmma.mma' of i8 inputs reads K-major operands only (MN-major "
                             "operands are f16 or bf16)"));
  CHECK_THAT(msg("  %0 = tcgen05.desc %s, %u, %u, %u, 128 : u64\n  %b = const true : bool\n"
                 "  tcgen05.mma %u, %0, %0, %b, f32, 64, mn, mn\n"),
             Catch::Contains("'tcgen05.mma' of f32 inputs reads K-major operands only"));
  // The accumulator is a plane's 16 rows of the product, of the input type's k and n.
  CHECK_THAT(msg("  %0 = alloc.frag : frag<acc, f32, 32, 64, 16>\n" + desc +
                 "  wgmma.mma %0, %a, %a, bf16\n"),
             Catch::Contains("accumulates into a plane's 16 rows of the warpgroup's product, "
                             "frag<acc, f32, 16, N, 16>; got frag<acc, f32, 32, 64, 16>"));
  CHECK_THAT(msg("  %0 = alloc.frag : frag<acc, i32, 16, 40, 32>\n" + desc +
                 "  wgmma.mma %0, %a, %a, i8\n"),
             Catch::Contains("'wgmma.mma' of i8 inputs has no n = 40"));
  CHECK_THAT(msg("  %0 = alloc.frag : frag<acc, f32, 16, 64, 32>\n" + desc +
                 "  wgmma.mma %0, %a, %a, u8\n"),
             Catch::Contains("'wgmma.mma' of u8 inputs accumulates in i32, not f32"));
  CHECK_THAT(msg("  %0 = alloc.frag : frag<acc, f32, 16, 264, 16>\n"),
             Catch::Contains("n must be a multiple of 8 up to 256 for an accumulator, got 264"));
  // Descriptors are the plane's: no unit-dependent start.
  CHECK_THAT(msg("  %0 = alloc.frag : frag<acc, f32, 16, 64, 16>\n  %p = unit_pos : u32\n"
                 "  %a = wgmma.desc %s, %p, %u, %u, 0 : u64\n  wgmma.mma %0, %a, %a, f16\n"),
             Catch::Contains("operand %3 of 'wgmma.mma' differs between the units of a plane; a "
                             "plane works on a fragment together, so its index, stride, fill "
                             "value and descriptors must be the same for the whole plane"));
}

TEST_CASE("kernel-level rules", "[ir][verifier]") {
  auto msg = [](const std::string& text) {
    auto k = parse(text, "t.kir");
    REQUIRE(k.ok());
    auto st = verify(*k);
    return st.ok() ? std::string("(ok)") : st.error().message;
  };
  CHECK_THAT(msg("kernel @k() cube_dim(64, 32, 1) {\n}\n"),
             Catch::Contains("a cube of 2048 units is too large: at most 1024"));
  CHECK_THAT(msg("kernel @k() cube_dim(0, 1, 1) {\n}\n"),
             Catch::Contains("every cube dimension must be at least 1"));
  CHECK_THAT(msg("kernel @k(%v: var<f32>) {\n}\n"),
             Catch::Contains(
                 "parameter 'v' has type var<f32>: parameters are tensors, arrays or scalars"));
  CHECK_THAT(msg("kernel @k(%v: f32x4) {\n}\n"), Catch::Contains("parameters are tensors"));
  // Every problem is reported, each on its own line.
  const std::string two =
      msg("kernel @k(%f: f32) {\n  %0 = not %f : f32\n  %1 = sqrt %0 : bool\n}\n");
  CHECK_THAT(two, Catch::Contains("t.kir:2:3: error:"));
  CHECK_THAT(two, Catch::Contains("\nt.kir:3:3: error:"));
}

TEST_CASE("uniformity: barriers and plane ops", "[ir][verifier][uniformity]") {
  // Control flow over the cube position, parameters and constants is uniform.
  CHECK(verify_body(
            "  %0 = cube_pos : u32\n  %1 = lt %0, %u : bool\n  if %1 {\n    sync_cube\n  }\n") ==
        "(ok)");
  // A loop with uniform bounds may hold barriers (the tiled-matmul shape).
  CHECK(verify_body("  %0 = const 0 : u32\n  %1 = const 1 : u32\n  for %2 = %0 to %u step %1 {\n"
                    "    sync_cube\n    %3 = unit_pos : u32\n    %4 = load %t, %3 : f32\n    "
                    "sync_cube\n  }\n") == "(ok)");
  // Loop bounds that depend on the unit are not.
  CHECK_THAT(verify_body("  %0 = const 0 : u32\n  %1 = const 1 : u32\n  %2 = unit_pos : u32\n"
                         "  for %3 = %0 to %2 step %1 {\n    sync_cube\n  }\n"),
             Catch::Contains("the bounds of the 'for' at t.kir:5:3 depend on the unit"));
  // An early return for some units makes every later barrier an error.
  CHECK_THAT(verify_body(kVaryingIf + "    return\n  }\n  sync_cube\n"),
             Catch::Contains("t.kir:7:3: error: 'sync_cube' is under control flow that differs "
                             "between the units of the cube: the 'return' at t.kir:5:5 ends the "
                             "kernel for some units only"));
  // ...but a return in one branch does not affect the other branch.
  CHECK(verify_body(
            "  %0 = unit_pos : u32\n  %1 = lt %0, %u : bool\n  if %b {\n    if %1 {\n      return\n"
            "    }\n  } else {\n    sync_cube\n  }\n") == "(ok)");
  // A variable written under unit-dependent control flow is unit-dependent.
  CHECK_THAT(
      verify_body(
          "  %0 = var %b : var<bool>\n" + kVaryingIf +
          "    var.write %0, %b\n  }\n  %1 = var.read %0 : bool\n  if %1 {\n    sync_cube\n  }\n"),
      Catch::Contains("'sync_cube' is under control flow"));
  // A variable carried around a loop becomes unit-dependent on the second iteration.
  CHECK_THAT(
      verify_body(
          "  %v = var %u : var<u32>\n  %0 = const 0 : u32\n  %1 = const 1 : u32\n"
          "  for %2 = %0 to %u step %1 {\n    %3 = var.read %v : u32\n    %4 = gt %3, %1 : bool\n"
          "    if %4 {\n      sync_cube\n    }\n    %5 = unit_pos : u32\n    var.write %v, %5\n  "
          "}\n"),
      Catch::Contains("'sync_cube' is under control flow"));
  // Local memory written with unit-dependent values is unit-dependent when read.
  CHECK_THAT(verify_body(
                 "  %l = alloc.local : local<u32, 2>\n  %0 = const 0 : u32\n  %1 = unit_pos : u32\n"
                 "  store %l, %0, %1\n  %2 = load %l, %0 : u32\n  %3 = eq %2, %0 : bool\n  if %3 "
                 "{\n    sync_cube\n  }\n"),
             Catch::Contains("'sync_cube' is under control flow"));
  // A plane reduction is uniform within a plane: plane ops may depend on it, barriers may not.
  CHECK(verify_body("  %0 = plane.any %b : bool\n  if %0 {\n    %1 = plane.sum %f : f32\n  }\n") ==
        "(ok)");
  CHECK_THAT(verify_body("  %0 = plane.any %b : bool\n  if %0 {\n    sync_cube\n  }\n"),
             Catch::Contains("'sync_cube' is under control flow"));
  // Atomic results differ per unit.
  CHECK_THAT(
      verify_body(
          "  %0 = const 0 : u32\n  %1 = atomic.add %a, %0, %u : u32\n  %2 = eq %1, %0 : bool\n"
          "  if %2 {\n    sync_cube\n  }\n"),
      Catch::Contains("'sync_cube' is under control flow"));
}
