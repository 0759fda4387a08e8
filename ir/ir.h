// The kiln IR: kernels as structured SSA in nested regions. This is the main IR header; it
// includes the types and the op list. docs/ir.md is the reference for the text form.
//
// ---------------------------------------------------------------------------------------------
// Semantics (every backend implements exactly this; tests check it)
//
// Execution. A launch runs a grid of cubes; a cube runs cube_dim.x*y*z units; units are
//   grouped in planes of plane_dim consecutive linear unit positions (32 on CUDA and on the
//   CPU backend; read plane_dim rather than assuming it). When the cube size is not a multiple
//   of plane_dim the last plane is partial and plane ops cover the units that exist. Each unit
//   runs the kernel body.
//   Builtins, with linear forms (no axis):
//     unit_pos     = x + y*cube_dim.x + z*cube_dim.x*cube_dim.y         (within the cube)
//     cube_pos     = x + y*cube_count.x + z*cube_count.x*cube_count.y   (within the grid)
//     cube_dim     = cube_dim.x*cube_dim.y*cube_dim.z (units per cube)
//     cube_count   = cube_count.x*cube_count.y*cube_count.z
//     absolute_pos = cube_pos*cube_dim + unit_pos;  absolute_pos x = cube_pos.x*cube_dim.x +
//                    unit_pos.x (likewise y and z)
//     plane_lane   = unit_pos % plane_dim
//     plane_pos    = unit_pos / plane_dim (which plane of the cube the unit is in)
//   All builtins are u32.
// Values. A value is immutable and defined once; it is visible in the rest of its region and
//   in regions nested there. Variables (var, var.read, var.write) are the only mutable state
//   besides memory; a variable is private to its unit.
// Lines. A value type is an element type times a line width of 1, 2, 4, 8 or 16 lanes. Every
//   arithmetic, comparison, math and conversion op works lane by lane; both operands of a
//   binary op have the same type (broadcast a scalar explicitly). Memory holds lines: index i of
//   a tensor or array of width W addresses elements [i*W, i*W + W) of its buffer, and `len` is
//   the number of whole lines. Shapes and strides are in elements.
// Integers. Two's complement; add, sub, mul, neg and shl wrap on overflow (signed too).
//   x / 0 == 0 and x % 0 == x; INT_MIN / -1 == INT_MIN and INT_MIN % -1 == 0. Division rounds
//   toward zero; the sign of x % y is the sign of x. abs(INT_MIN) == INT_MIN. Shift amounts are
//   taken modulo the bit width (a 32-bit x << 33 is x << 1); shr is arithmetic for signed and
//   logical for unsigned types. min, max and clamp compare by the type's signedness;
//   clamp(x, lo, hi) == min(max(x, lo), hi).
// Floats. IEEE 754 binary16/bfloat16/32/64 with round-to-nearest-even and no flush of
//   denormals; no fast-math unless a launch option asks for it. f16 and bf16 ops behave as if
//   computed in f32 and rounded once to the type. The 8-bit floats f8e4m3 (OCP FP8 "e4m3fn":
//   bias 7, no infinities, S.1111.111 the only NaN, largest 448) and f8e5m2 (IEEE-like, bias
//   15, largest finite 57344) do too, and rounding to them (op results and casts) saturates:
//   to nearest even, anything beyond the largest finite value (infinities too) becoming it
//   with its sign, NaN staying NaN (PTX's cvt.rn.satfinite). Comparisons are ordered: every
//   comparison with NaN is false except `ne`, which is true. min and max return the other operand
//   when one is NaN (IEEE minimumNumber), and NaN only when both are; which zero min(-0, +0)
//   returns is unspecified. rem is C's fmod. fma rounds once. Math functions: sqrt is correctly
//   rounded; the others are accurate to a few ULP (docs/backends.md lists each), with IEEE special
//   values (exp(-inf) = 0, log(0) = -inf, log(-1) = NaN, ...). round rounds half away from
//   zero.
// Conversions (cast). int->int truncates or extends by the source's signedness. float->int
//   rounds toward zero and saturates to the target's range; NaN becomes 0. int->float and
//   float->float round to nearest even. bool->number gives 0 or 1; number->bool is x != 0
//   (NaN != 0, so NaN is true). bitcast reinterprets bits between types of equal bit width.
// Evaluation order. Ops run in program order within a unit. Between units, memory accesses are
//   unordered except across sync_cube (cube-wide) and sync_plane (plane-wide), and for
//   atomics. A load of memory another unit writes without such ordering reads either value.
// Barriers. sync_cube: every unit of the cube must reach the same sync_cube the same number of
//   times; all global and shared memory writes of the cube before it are visible to every unit
//   of the cube after it. The verifier rejects a barrier under control flow that depends on the
//   unit (a unit-dependent if, loop bound, break, continue or return before it). Plane ops and
//   sync_plane need the same of the units of one plane.
// Memory. Tensors and arrays are global (kernel parameters); `ro` ones cannot be written.
//   Shared memory is one allocation per cube, uninitialized; local memory is per unit,
//   uninitialized. An index out of range is undefined behaviour unless the launch runs in
//   checked mode, where the access is skipped (a load gives zero) and the launch reports the
//   first violation.
// Atomics. Relaxed, on single elements (line width 1) of global or shared memory; the result
//   is the old value. atomic.cas stores `new` only if the old value equals `cmp`.
// Plane ops. plane.sum/min/max/any/all reduce the value over the units of the plane (lane by
//   lane for lines) and give every unit the result; plane.broadcast gives every unit the value
//   of lane `lane` (which must be the same for every unit); plane.shuffle gives each unit the
//   value of lane `lane` (per unit); plane.shuffle_xor reads lane plane_lane ^ mask. A lane
//   index out of range reads the unit's own value.
// Matrix fragments. A fragment (frag<USE, T, M, N, K>) is a tile of a matrix multiply owned by
//   a plane: the A operand (M x K), the B operand (K x N) or the accumulator (M x N) of
//   acc += A * B. alloc.frag gives each plane of the cube its own, uninitialized. Every unit of
//   the plane runs each fragment op together, with the same operands (plane-uniform control
//   and values; the cube holds whole planes of 32). frag.load sets element (r, c) for r < rows
//   and c < cols to mem[index + r*stride + c] (row) or mem[index + c*stride + r] (col), and the
//   others to 0; frag.store writes those elements of an accumulator the same way, and no
//   others; the indices are u32 arithmetic, and each access follows the memory rules (checked
//   mode reports an element past the memory). frag.fill sets every element. Inputs: f16, bf16,
//   f32 (read as tf32: rounded to 10 mantissa bits, ties away from zero, when loaded or
//   filled), i8, u8, f8e4m3, f8e5m2; accumulators: f32 (float inputs), i32 (integer
//   inputs), and f16/bf16/f8 as targets of frag.cast, which converts element by element as
//   `cast` does. frag.mma adds the
//   exact products over k to each accumulator element: for f32 accumulators the sum may be
//   formed in any order and with any rounding at least as accurate as f32 (backends differ in
//   the last bits); integer sums wrap. frag.plane (lowered kernels) is plane %p's copy.
//   frag.ldmatrix %f, %shared, %i, %stride is the whole-tile frag.load of A or B from a shared
//   array (16-bit inputs, or 8-bit with k contiguous; B's n a multiple of 16) that the GPU does
//   with ldmatrix: every row (col: column) of the tile must start 16-byte aligned and lie inside
//   the array, which the emulator checks and a GPU does not.
//   frag.mma_scaled (f8 inputs, f32 accumulator) adds each exact product a[r][k] b[k][c]
//   scaled by 2^(ea + eb - 254), ea and eb the u8 codes of row r of A and column c of B for the
//   k block k / 32 (a code of 255 makes it NaN), in order over k, rounding to f32 after each.
// Tensor memory and tcgen05 (cube ops). mbar.*, tmem.*, tcgen05.mma, tcgen05.commit and
//   tmem.load are reached by every unit of the cube together (uniform control flow, uniform
//   operands) and act once for the cube. A cube has 128 lanes x 512 32-bit columns of tensor
//   memory; tmem.alloc N (a power of two from 32 to 512) gives the address of N free columns
//   (lane 0 << 16 | first column); tmem.free returns them, and a cube must free all it allocated
//   before it ends. mbar.init %m, %i, C makes m[i] an mbarrier counting C arrivals per phase,
//   phase 0 pending; a phase completes when its C-th arrival comes, and the next one starts.
//   tcgen05.mma %t, %a, %b, %acc, T, N: D (128 x N 32-bit cells at %t: row r in lane r, column
//   c at the address's column + c) = A * B^T (+ D if %acc), A (128 x k) and B (N x k) K-major in
//   shared memory through their descriptors, k one instruction step of T; f32 sums as frag.mma,
//   i32 for i8/u8, wrapping. It is asynchronous: tcgen05.commit %m, %i arrives once on the
//   mbarrier when every multiply issued before it has completed, and only after a mbar.wait
//   %m, %i, %p (until the phase of parity %p has completed) may tensor memory it writes be read
//   (tmem.load) or freed, or the shared memory it reads be written. tmem.load %m, %i, %t, N copies
//   D's 128 x N cells to m[i + r N + c] (a shared array of f32, i32 or u32); every unit sees them
//   when it returns. %r = tmem.read %t, %col : T is not a cube op: unit u gets D[u % 128][%col +
//   j] in lane j of T (f32, i32 or u32, 1 to 16 lanes), under the same wait rule; the units of a
//   plane reach it together, with %t and %col the same for the plane. The cube holds a multiple
//   of 128 units.
// Control flow. `for %i = %a to %b step %s` runs %i = a, a+s, ... while i < b (step > 0)
//   or i > b (step < 0); step == 0 runs no iteration. `loop` repeats until `break`. break,
//   continue and return are the last op of their region. return ends the unit's kernel.
// Lowered kernels. The CPU backend rewrites a kernel so that its body runs once per cube:
//   `units %u = %a to %b { ... }` runs its body for each unit index u in [a, b) in turn (u is
//   the linear unit_pos). Such a kernel has no unit_pos/absolute_pos/plane_lane/plane_pos,
//   barriers or plane ops left. Inside a units body, `continue` moves to the next unit and
//   `return` ends the current unit's iteration; alloc.local may appear at the top of a body.
// Debugging. print formats each `{}` with the next operand (lines as [a, b, ...]) and
//   delivers lines to the host in order at sync; a failing assert stops nothing but is reported
//   by sync as an error naming its source line.
// ---------------------------------------------------------------------------------------------
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/ops.h"
#include "ir/result.h"
#include "ir/small_vector.h"
#include "ir/types.h"

namespace kiln::ir {

using ValueId = uint32_t;
inline constexpr ValueId kNoValue = 0xffffffffu;

// Where an op came from in the DSL source: a file of the kernel's file table (1-based; 0 is
// unknown) and a line. Printed as loc(#FILE:LINE).
struct SourceLoc {
  uint32_t file = 0;
  uint32_t line = 0;
  bool known() const { return file != 0; }
  friend bool operator==(const SourceLoc&, const SourceLoc&) = default;
};

// Where an op was in parsed .kir text (1-based); zero for ops built in memory. Not printed.
struct TextPos {
  uint32_t line = 0;
  uint32_t col = 0;
  bool known() const { return line != 0; }
};

struct Op;

// A region: the ops of an if branch, a loop body or the kernel body. `args` are values the
// region defines on entry (the induction variable of a `for`).
struct Region {
  std::vector<ValueId> args;
  std::vector<Op> ops;
};

struct Op {
  OpKind kind = OpKind::Const;
  ValueId result = kNoValue;
  SmallVector<ValueId, 4> operands;
  Attr attr;
  std::vector<Region> regions;
  SourceLoc loc;
  TextPos pos;
};

struct Param {
  std::string name;  // a C-style identifier, unique in the kernel
  ValueId value = kNoValue;
  TextPos pos;  // of its name in parsed text; not printed
};

// The portable cluster size of sm_90 and sm_100 (16 needs a non-portable opt-in per kernel).
inline constexpr uint32_t kMaxCubesPerCluster = 8;

struct Kernel {
  std::string name;
  std::vector<Param> params;
  std::array<uint32_t, 3> cube_dim{1, 1, 1};
  // The cubes of a cluster (sm_90 and later; docs/ir.md "Clusters"): {1, 1, 1} for none.
  std::array<uint32_t, 3> cluster_dim{1, 1, 1};
  std::vector<Type> value_types;   // indexed by ValueId
  std::vector<std::string> files;  // file table: loc file index i names files[i - 1]
  Region body;
  // Name of the text the kernel was parsed from, and where in it the kernel header and its
  // cube_dim stand, for error positions; not printed.
  std::string source_name;
  TextPos pos, cube_dim_pos, cluster_dim_pos;

  const Type& type_of(ValueId v) const { return value_types[v]; }
  ValueId new_value(const Type& t) {
    value_types.push_back(t);
    return static_cast<ValueId>(value_types.size() - 1);
  }
  uint32_t units_per_cube() const { return cube_dim[0] * cube_dim[1] * cube_dim[2]; }
  uint32_t cubes_per_cluster() const { return cluster_dim[0] * cluster_dim[1] * cluster_dim[2]; }
  // Index of `file` in the file table, added if absent (1-based, as SourceLoc::file).
  uint32_t file_index(const std::string& file);
  // "file:line" of a DSL location, or "" when unknown.
  std::string loc_string(const SourceLoc& loc) const;
  // Where to point an error about `op`: "source:line:col" for parsed ops, else the DSL
  // location, else the kernel's name; `(from DSL file:line)` is appended when both exist.
  std::string where(const Op& op) const;
  // "source:line:col" of a position in the parsed text, else the kernel's name.
  std::string where(TextPos pos) const;
};

// Calls f(op) for every op in pre-order (an op before the ops of its regions).
void walk(const Region& r, const std::function<void(const Op&)>& f);
void walk(Region& r, const std::function<void(Op&)>& f);

// Counts the ops in a region, recursively.
size_t count_ops(const Region& r);

}  // namespace kiln::ir
