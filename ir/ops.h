// Op kinds, generated from ops.def, with the signature table that drives printing, parsing,
// type inference and verification.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/types.h"

namespace kiln::ir {

enum class OpKind : uint8_t {
#define KILN_OP(e, s, sig, cls, flags) e,
#include "ir/ops.def"
#undef KILN_OP
};

inline constexpr int kNumOpKinds = 0
#define KILN_OP(e, s, sig, cls, flags) +1
#include "ir/ops.def"
#undef KILN_OP
    ;

// The shape of an op: its operands, result rule, attribute and regions. The text form of each
// shape is given here once; the printer and parser follow it.
enum class Sig : uint8_t {
  Const,          // %r = const LIT : T                      attr: literal
  Builtin,        // %r = NAME [x|y|z] : u32                 attr: axis (0 = linear)
  BuiltinScalar,  // %r = NAME : u32
  Unary,          // %r = NAME %a : T                        result: T
  Binary,         // %r = NAME %a, %b : T                    both T; result T
  Ternary,        // %r = NAME %a, %b, %c : T                all T; result T
  Compare,        // %r = NAME %a, %b : boolxN               both T (N lanes)
  Select,         // %r = select %c, %a, %b : T              c: bool x (1 or N)
  Cast,           // %r = cast %a : U                        same lanes; value conversion
  Bitcast,        // %r = bitcast %a : U                     same lanes and element bits
  Broadcast,      // %r = broadcast %a : TxN                 a: T (scalar)
  Extract,        // %r = extract %a, LANE : T               a: TxN
  Insert,         // %r = insert %a, %s, LANE : TxN          s: T
  FloatTest,      // %r = NAME %a : boolxN                   a: float xN
  AllocShared,    // %r = alloc.shared : shared<T, COUNT>
  AllocLocal,     // %r = alloc.local : local<T, COUNT>
  Len,            // %r = len %m : u32                       m: any memory
  ShapeStride,    // %r = NAME %t, DIM : u32                 t: tensor
  Load,           // %r = load %m, %i : T                    i: u32 line index
  Store,          // store %m, %i, %v
  Var,            // %r = var %init : var<T>
  VarRead,        // %r = var.read %v : T
  VarWrite,       // var.write %v, %x
  Atomic,         // %r = NAME %m, %i, %v : T                old value
  AtomicCas,      // %r = atomic.cas %m, %i, %cmp, %new : T  old value
  Nullary,        // NAME
  PlaneReduce,    // %r = NAME %a : T
  PlaneLane,      // %r = NAME %a, %lane : T                 lane: u32
  AllocFrag,      // %r = alloc.frag : frag<USE, T, M, N, K>
  FragFill,       // frag.fill %f, %v                         v: scalar of f's element type
  FragLoad,       // frag.load %f, %m, %i, %stride, %rows, %cols, row|col   m: global or shared
  FragStore,      // frag.store %m, %i, %stride, %rows, %cols, %f, row|col  f: an accumulator
  FragLdmatrix,   // frag.ldmatrix %f, %m, %i, %stride, row|col   m: shared; the whole tile
  FragMma,        // frag.mma %acc, %a, %b                   acc += a * b
  FragCast,       // frag.cast %dst, %src                    accumulators of one shape
  FragMmaScaled,  // frag.mma_scaled %acc, %a, %b, %sa, %sai, %sas, %sb, %sbi, %sbs
                  //   acc += (A * SA) (B * SB); SA(r, j) = sa[sai + r sas + j] (u8 ue8m0 codes)
  FragPlane,      // %r = frag.plane %f, %p : frag<...>      (lowered kernels only)
  FragGet,        // %r = frag.get %f, E : T                 element E of this unit's part
  FragSet,        // frag.set %f, %v, E                       v: scalar of f's element type
  FragMem,        // %r = frag.mem %f : shared<T, COUNT>     (lowered kernels only)
  WgmmaDesc,      // %r = wgmma.desc %m, %i, %lbo, %sbo, SWIZZLE : u64   m: shared memory
  Wgmma,          // wgmma.mma %acc, %adesc, %bdesc, T[, MA, MB]  acc += A * B (T: the input
                  //   type; MA, MB: k or mn, the majors of A and B, printed when not k, k)
  WgmmaWait,      // wgmma.wait N, async.wait N               N: groups left in flight
  MbarInit,       // mbar.init %m, %i, COUNT                  m: shared u64 (the mbarrier m[i])
  MbarWait,       // mbar.wait %m, %i, %parity                until that phase has completed
  MbarRef,        // NAME %m, %i                              m: shared u64
  TmemAlloc,      // %r = tmem.alloc COLUMNS : u32            the tensor-memory address
  TmemFree,       // tmem.free %t, COLUMNS
  Tcgen05Mma,     // tcgen05.mma %t, %adesc, %bdesc, %acc, T, N[, MA, MB]  D (128 x N) [+]= A * B
  TmemLoad,       // tmem.load %m, %i, %t, N                  m[i + r N + c] = D[r][c], 128 x N
  TmemRead,       // %r = tmem.read %t, %col : T             unit u: D[u % 128][col + j] (lane j)
  TmaLoad,        // tma.load %m, %i, %t, %bar, %bi, %c..., box B..., swizzle W[, fill nan]
                  //   the box of tensor t at coordinates c (one i32 per dim, outermost first)
                  //   into m[i...], completing on the mbarrier bar[bi]; attr: tma_attr()
  TmaStore,       // tma.store %t, %m, %i, %c..., box B..., swizzle W[, reduce add|min|max]
                  //   m[i...] into t's box (or combined with it)
  TmaPrefetch,    // tma.prefetch %t, %c..., box B..., swizzle W   t's box towards the L2 cache
                  // (tma.load_multicast: tma.load's operands, then %mask before the coordinates)
  ClusterLoad,    // %r = cluster.load %m, %rank, %i : T     m: shared; rank, i: u32
  AsyncCopy,      // async.copy %m, %i, %g, %j, %valid     16 bytes of g from element j to m[i...]
  If,             // if %c { ... } [else { ... }]
  For,            // for %i = %a to %b step %s [unroll N|full] { ... }
  Loop,           // loop { ... }
  Pipeline,       // pipeline %rounds, %full, %empty, stages S, lag L produce(%r, %s) { ... }
                  //   consume(%r, %s) { ... }    full, empty: shared u64 (S mbarriers each)
  Units,          // units %u = %a to %b { ... }          a, b: u32 (lowered kernels only)
  Jump,           // break | continue | return
  Print,          // print "FORMAT"[, %a]...
  Assert,         // assert %c, "MESSAGE"
};

// What element types an op's operands may have.
enum class OperandClass : uint8_t {
  Any,
  Numeric,    // integers and floats
  Int,        // integers
  Float,      // floats
  IntOrBool,  // integers and bool
  Bool,
  AtomicAdd,  // i32 u32 i64 u64 f32 f64
  AtomicInt,  // i32 u32 i64 u64
  AtomicAny,  // i32 u32 i64 u64 f32 f64
};

namespace op_flags {
enum : uint32_t {
  None = 0,
  Pure = 1u << 0,        // no side effects: may be removed if unused, or merged
  Varying = 1u << 1,     // the result may differ between the units of a cube
  Barrier = 1u << 2,     // every unit of the cube must reach it together
  PlaneOp = 1u << 3,     // every unit of the plane must reach it together
  Memory = 1u << 4,      // reads or writes memory objects
  Control = 1u << 5,     // owns regions
  Terminator = 1u << 6,  // leaves its region; must be the region's last op
  SideEffect = 1u << 7,  // observable effect besides its result
};
}  // namespace op_flags

struct OpInfo {
  std::string_view name;
  Sig sig;
  OperandClass operand_class;
  uint32_t flags;
};

const OpInfo& op_info(OpKind kind);
inline std::string_view op_name(OpKind kind) {
  return op_info(kind).name;
}
std::optional<OpKind> parse_op_name(std::string_view name);
inline bool has_flag(OpKind kind, uint32_t flag) {
  return (op_info(kind).flags & flag) != 0;
}

// Number of value operands an op of this signature takes, or -1 for variadic (print).
int sig_operand_count(Sig sig);
// Whether an op of this signature defines a result value.
bool sig_has_result(Sig sig);
// Whether the result type is written by the author (cast, const, alloc...) rather than
// inferred from the operands.
bool sig_result_is_explicit(Sig sig);
// Number of regions an op of this signature owns.
int sig_region_count(Sig sig);

// Op attributes: one immediate integer (literal bits, axis, lane, dim, unroll), one float
// literal and one string (print format, assert message). Unused fields stay zero/empty.
struct Attr {
  uint64_t i = 0;
  double f = 0.0;
  std::string s;
  friend bool operator==(const Attr&, const Attr&) = default;
};

inline constexpr uint64_t kUnrollFull = 0xffffffffu;  // `unroll full`

// A pipeline's attribute: its stages (1 to kMaxPipelineStages) in bits 0-7, its release lag
// (below the stages: consume(r) is followed by the release of round r - lag's stage) in 8-15,
// and bit 16 when the consume region releases each stage itself, with a tcgen05.commit on the
// empty mbarrier (`, commit`: the lag is then 0 and unused). Bits 17-24 and 25-32: the
// registers per unit of the producer and of the consumers, in eights (0: as compiled), which
// makes the producer a whole warpgroup that gives its registers to the consumers (setmaxnreg;
// `, registers P C`).
inline constexpr uint32_t kMaxPipelineStages = 8;
inline constexpr uint64_t kPipelineCommit = uint64_t{1} << 16;
struct PipelineRegisters {
  uint32_t producer = 0, consumers = 0;  // per unit, multiples of 8 from 24 to 256; 0: as compiled
  bool set() const { return producer != 0 || consumers != 0; }
  friend bool operator==(const PipelineRegisters&, const PipelineRegisters&) = default;
};
inline uint64_t pipeline_attr(uint32_t stages, uint32_t lag, bool commit = false,
                              PipelineRegisters regs = {}) {
  return uint64_t{stages} | uint64_t{lag} << 8 | (commit ? kPipelineCommit : 0) |
         uint64_t{regs.producer / 8} << 17 | uint64_t{regs.consumers / 8} << 25;
}
inline PipelineRegisters pipeline_registers(uint64_t attr) {
  return {static_cast<uint32_t>((attr >> 17) & 0xffu) * 8,
          static_cast<uint32_t>((attr >> 25) & 0xffu) * 8};
}
// Why a register split is not one setmaxnreg can make, or "".
std::string pipeline_registers_error(PipelineRegisters regs);
// The units of a pipeline's producer: a warpgroup when it sets registers, else one plane.
inline uint32_t pipeline_producer_units(uint64_t attr) {
  return pipeline_registers(attr).set() ? 128 : 32;
}
inline bool pipeline_commit(uint64_t attr) {
  return (attr & kPipelineCommit) != 0;
}
inline uint32_t pipeline_stages(uint64_t attr) {
  return static_cast<uint32_t>(attr & 0xffu);
}
inline uint32_t pipeline_lag(uint64_t attr) {
  return static_cast<uint32_t>((attr >> 8) & 0xffu);
}

// Checks the operand types and attribute of one op and computes its result type. `result`
// holds the declared type on entry (required when sig_result_is_explicit) and the result type
// on success. Returns an empty string on success, else what is wrong, in plain words, without
// a location (callers add it).
std::string check_op_types(OpKind kind, std::span<const Type> operands, const Attr& attr,
                           Type& result);

// One matrix multiply a target runs on fragments: inputs, accumulator and shape m x n x k.
struct MatrixConfig {
  ElemType input = ElemType::F16;
  ElemType acc = ElemType::F32;
  int m = 16, n = 16, k = 16;
  friend bool operator==(const MatrixConfig&, const MatrixConfig&) = default;
};
// Every multiply the IR accepts (frag_type_error's rules), in a fixed order.
const std::vector<MatrixConfig>& matrix_configs();

// The ops a target runs beyond those every backend takes, as one set the target carries
// (backend::Target::features): kernels ask at trace time (dsl::has_wgmma() ...), the library
// picks its strategies from them, backends refuse what their target lacks. Everything by
// default: the CPU runs every op. Which fragment multiplies: Backend::matrix_configs.
struct Features {
  bool wgmma = true;       // warpgroup multiplies (wgmma.*): sm_90a among the GPUs
  bool tcgen05 = true;     // tensor memory and tcgen05 (tmem.*, tcgen05.*): sm_100a
  bool tma = true;         // the Tensor Memory Accelerator and clusters (tma.*): sm_90 and later
  bool multicast = true;   // TMA boxes multicast to a cluster's cubes: sm_90a and sm_100a
  bool cp_async = true;    // per-unit asynchronous copies (async.*, cp.async): sm_80 and later
  bool mma_scaled = true;  // block-scaled multiplies (frag.mma_scaled): sm_120a
  // A pipeline's register split between its producer and its consumers (setmaxnreg): sm_90a,
  // sm_100a, sm_120a
  bool setmaxnreg = true;
  friend bool operator==(const Features&, const Features&) = default;
};

// Why a fragment type is not one kiln supports, or "" (the shapes and element types of
// docs/dsl.md "Matrices": m 16 or 32, n 8, 16 or 32, k one or two instruction steps).
std::string frag_type_error(const Type& t);
// The k of one multiply instruction for inputs of element type `e` (0 if not an input type).
int frag_k_step(ElemType e);
// The accumulator element type of a multiply with inputs of type `e`.
ElemType frag_acc_elem(ElemType e);

// Ops a plane runs together on fragments (once per plane after the CPU's unit-loop lowering):
// the frag.* ops but frag.plane, and the wgmma ops but wgmma.desc.
bool is_frag_op(OpKind k);
// Whether a warpgroup multiply (wgmma.mma) of inputs `e` has an n x 64 product of n columns:
// 8..256 in steps of 8 (i8/u8: 8, 16, 24, then steps of 16 up to 256).
bool wgmma_n_valid(ElemType e, int n);
// The swizzle modes of a shared-memory matrix descriptor, in bytes (0: none).
bool wgmma_swizzle_valid(uint64_t bytes);
// Whether a tcgen05.mma (M = 128, cta_group::1) of inputs `e` has an N of `n` columns: a
// multiple of 16 from 16 to 256.
bool tcgen05_n_valid(ElemType e, int n);
// The attribute of wgmma.mma: the input type in bits 0-7, then whether A and B are MN-major
// (their mn elements contiguous in 16-byte chunks) rather than K-major. tcgen05.mma: the input
// type in bits 0-7, N in bits 8-23, the majors in bits 24 and 25. MN-major operands are f16 or
// bf16 (the inputs both instructions can transpose).
struct MmaMajors {
  bool a_mn = false, b_mn = false;
};
inline constexpr uint64_t kWgmmaMajorShift = 8, kTcgen05MajorShift = 24;
inline MmaMajors mma_majors(uint64_t attr, uint64_t shift) {
  return {((attr >> shift) & 1u) != 0, ((attr >> shift) & 2u) != 0};
}
inline uint64_t mma_major_bits(MmaMajors m, uint64_t shift) {
  return (uint64_t{m.a_mn} | uint64_t{m.b_mn} << 1) << shift;
}
// Whether inputs `e` may be MN-major.
inline bool mma_mn_major_valid(ElemType e) {
  return e == ElemType::F16 || e == ElemType::BF16;
}
// Whether `columns` is a tensor-memory allocation size: a power of two from 32 to 512.
bool tmem_columns_valid(uint64_t columns);
// The cube-level ops of tensor memory, tcgen05 and TMA (every unit reaches them together; they
// run once per cube).
bool is_cube_op(OpKind k);

// A TMA box (tma.load's attribute): the tensor's rank (1 to 5), the box's extent in each
// dimension, outermost first as the tensor's shape (1 to 256 each), the shared-memory swizzle
// in bytes (0, 32, 64 or 128), and what a load writes for elements outside the tensor (zeros,
// or NaN for floating-point tensors: `fill nan`). Encoded in the attribute as: bits 0-1 the
// swizzle (0 none, 1 32 B, 2 64 B, 3 128 B), bits 2-4 the rank, bit 5 the NaN fill, then 9
// bits per dimension from bit 8.
//
// An im2col box (`im2col P, C, lower L..., upper U...`; bit 63 set) reads a tensor of rank 3 to 5
// laid out N[D][H]W C (channels innermost) the way a convolution reads it: `pixels` rows of
// `channels` elements, one row per filter origin, the origins walked through a bounding box of
// the spatial dimensions (from lower[s] to shape[s] + upper[s], exclusive; outermost first) and
// on through the batch, each row read at origin + the load's offsets. Encoded as: bits 0-5 as
// above, bits 8-16 the channels (1 to 256), bits 17-27 the pixels (1 to 1024), then from bit 28
// the lower and then the upper corners as two's-complement fields of 16 bits (rank 3), 8 bits
// (rank 4) or 5 bits (rank 5), the precision the GPU's tensor map has.
struct TmaBox {
  uint32_t rank = 0;
  uint32_t box[5] = {0, 0, 0, 0, 0};
  uint32_t swizzle = 0;
  bool fill_nan = false;
  bool im2col = false;
  uint32_t pixels = 0, channels = 0;                   // im2col: the rows and their elements
  int32_t lower[3] = {0, 0, 0}, upper[3] = {0, 0, 0};  // im2col: per spatial dimension
  friend bool operator==(const TmaBox&, const TmaBox&) = default;
};
inline constexpr uint32_t kTmaIm2colBit = 63, kTmaMaxPixels = 1024, kTmaMaxChannels = 256;
// The spatial dimensions of an im2col box (rank - 2), and the range of its corners.
inline uint32_t tma_spatial(const TmaBox& b) {
  return b.rank >= 3 ? b.rank - 2 : 0;
}
inline int32_t tma_corner_max(uint32_t rank) {
  return rank == 3 ? 32767 : rank == 4 ? 127 : 15;
}
// What is wrong with an im2col box's rank, rows, channels or corners, in plain words (the rules
// that do not depend on the element type); empty when they are valid.
std::string tma_im2col_shape_error(const TmaBox& b);
// Whether TMA can fill a box of `e` with NaN (the driver's float tensor-map types).
bool tma_nan_fill_allowed(ElemType e);
// What a tma.store does with each element: writes it, or combines it with the tensor's element
// atomically (cp.reduce.async.bulk.tensor): add, min or max. Bits 6-7 of tma.store's attribute,
// beside its box (tma_attr); the box alone (tma_box_attr) names the tensor map.
// Bit 62: the store is asynchronous (`, async`): it returns once issued, and its shared memory
// may be written again only after a tma.store_wait that covers it.
enum class TmaReduce : uint32_t { None = 0, Add = 1, Min = 2, Max = 3 };
inline constexpr uint32_t kTmaReduceShift = 6, kTmaAsyncBit = 62;
inline TmaReduce tma_reduce(uint64_t attr) {
  return static_cast<TmaReduce>((attr >> kTmaReduceShift) & 3u);
}
inline bool tma_async(uint64_t attr) {
  return (attr >> kTmaAsyncBit) & 1u;
}
inline uint64_t tma_box_attr(uint64_t attr) {
  return attr & ~(uint64_t{3} << kTmaReduceShift | uint64_t{1} << kTmaAsyncBit);
}
const char* tma_reduce_name(TmaReduce r);  // "add", "min", "max" ("" for None)
// Whether a reduction of `r` exists for elements of `e` (the PTX ISA's table for
// cp.reduce.async.bulk.tensor): add for f16, bf16, f32, i32, u32, u64; min and max for f16,
// bf16, i32, u32, i64, u64.
bool tma_reduce_allowed(TmaReduce r, ElemType e);
inline constexpr uint32_t kTmaMaxRank = 5, kTmaMaxBox = 256;
uint64_t tma_attr(const TmaBox& b);
TmaBox tma_box(uint64_t attr);
// What is wrong with a box of elements of `elem_bytes` bytes, in plain words; empty when it is
// valid: rank, extents, a swizzle whose span holds the innermost extent, 16-byte rows.
std::string tma_box_error(const TmaBox& b, uint32_t elem_bytes);
// The bytes a box copies into shared memory.
uint64_t tma_box_bytes(const TmaBox& b, uint32_t elem_bytes);
// The operands of tma.load, tma.store and tma.prefetch: where the tensor, the shared array, its
// index and the first coordinate are (kNoOperand: none).
struct TmaOperands {
  size_t tensor, shared, index, coords;
};
inline constexpr size_t kNoOperand = ~size_t{0};
// tma.load of an im2col box: after the rank coordinates, rank - 2 u16 offsets (the filter
// position, outermost first) from operand coords + rank on.
inline TmaOperands tma_operands(OpKind k) {
  if (k == OpKind::TmaPrefetch) return TmaOperands{0, kNoOperand, kNoOperand, 1};
  if (k == OpKind::TmaLoadMulticast) return TmaOperands{2, 0, 1, 6};  // %mask: operand 5
  return k == OpKind::TmaStore ? TmaOperands{0, 1, 2, 3} : TmaOperands{2, 0, 1, 5};
}

// Whether `bits` (an integer literal stored as two's complement in 64 bits) fits in `t`.
bool int_literal_fits(ElemType t, uint64_t bits);
// Rounds a float literal to the precision of `t` (f16, bf16, f32, f64, f8e4m3, f8e5m2); one
// beyond the largest finite value is infinite (never saturated).
double round_float_literal(ElemType t, double v);

}  // namespace kiln::ir
