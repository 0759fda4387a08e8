// The op table and the queries on it; the type rules of each signature are in op_types.cpp.
#include "ir/ops.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/float16.h"
#include "ir/result.h"

namespace kiln::ir {

namespace {

using namespace op_flags;

constexpr OpInfo kOpInfo[] = {
#define KILN_OP(e, s, sig, cls, flags) {s, Sig::sig, OperandClass::cls, flags},
#include "ir/ops.def"
#undef KILN_OP
};

}  // namespace

const OpInfo& op_info(OpKind kind) {
  return kOpInfo[static_cast<int>(kind)];
}

std::optional<OpKind> parse_op_name(std::string_view name) {
  for (int i = 0; i < kNumOpKinds; ++i)
    if (kOpInfo[i].name == name) return static_cast<OpKind>(i);
  return std::nullopt;
}

int sig_operand_count(Sig sig) {
  switch (sig) {
    case Sig::Const:
    case Sig::Builtin:
    case Sig::BuiltinScalar:
    case Sig::AllocShared:
    case Sig::AllocLocal:
    case Sig::Nullary:
    case Sig::Loop:
    case Sig::Jump:
    case Sig::AllocFrag:
    case Sig::WgmmaWait:
    case Sig::TmemAlloc:
      return 0;
    case Sig::Unary:
    case Sig::Cast:
    case Sig::Bitcast:
    case Sig::Broadcast:
    case Sig::Extract:
    case Sig::FloatTest:
    case Sig::Len:
    case Sig::ShapeStride:
    case Sig::Var:
    case Sig::VarRead:
    case Sig::PlaneReduce:
    case Sig::If:
    case Sig::Assert:
    case Sig::TmemFree:
    case Sig::FragGet:
    case Sig::FragMem:
      return 1;
    case Sig::Binary:
    case Sig::Compare:
    case Sig::Insert:
    case Sig::Load:
    case Sig::VarWrite:
    case Sig::PlaneLane:
    case Sig::TmemRead:
    case Sig::Units:
    case Sig::FragFill:
    case Sig::FragCast:
    case Sig::FragPlane:
    case Sig::FragSet:
    case Sig::MbarInit:
    case Sig::MbarRef:
      return 2;
    case Sig::Ternary:
    case Sig::Select:
    case Sig::Store:
    case Sig::Atomic:
    case Sig::For:
    case Sig::Pipeline:
    case Sig::FragMma:
    case Sig::Wgmma:
    case Sig::MbarWait:
    case Sig::TmemLoad:
    case Sig::ClusterLoad:
      return 3;
    case Sig::FragLdmatrix:
      return 4;
    case Sig::AtomicCas:
    case Sig::WgmmaDesc:
    case Sig::Tcgen05Mma:
      return 4;
    case Sig::FragLoad:
    case Sig::FragStore:
      return 6;
    case Sig::AsyncCopy:
      return 5;
    case Sig::FragMmaScaled:
      return 9;
    case Sig::Print:
    case Sig::TmaLoad:  // five (tma.store: three; tma.prefetch: one), then a coordinate per
                        // dimension
    case Sig::TmaStore:
    case Sig::TmaPrefetch:
      return -1;
  }
  return 0;
}

bool sig_has_result(Sig sig) {
  switch (sig) {
    case Sig::Store:
    case Sig::VarWrite:
    case Sig::Nullary:
    case Sig::If:
    case Sig::For:
    case Sig::Loop:
    case Sig::Pipeline:
    case Sig::Units:
    case Sig::Jump:
    case Sig::Print:
    case Sig::Assert:
    case Sig::FragFill:
    case Sig::FragLoad:
    case Sig::FragStore:
    case Sig::FragMma:
    case Sig::FragCast:
    case Sig::FragSet:
    case Sig::FragMmaScaled:
    case Sig::FragLdmatrix:
    case Sig::Wgmma:
    case Sig::WgmmaWait:
    case Sig::MbarInit:
    case Sig::MbarWait:
    case Sig::MbarRef:
    case Sig::TmemFree:
    case Sig::Tcgen05Mma:
    case Sig::TmemLoad:
    case Sig::TmaLoad:
    case Sig::TmaStore:
    case Sig::TmaPrefetch:
    case Sig::AsyncCopy:
      return false;
    default:
      return true;
  }
}

bool sig_result_is_explicit(Sig sig) {
  switch (sig) {
    case Sig::Const:
    case Sig::Cast:
    case Sig::Bitcast:
    case Sig::Broadcast:
    case Sig::AllocShared:
    case Sig::AllocLocal:
    case Sig::AllocFrag:
    case Sig::TmemRead:
    case Sig::FragMem:
      return true;
    default:
      return false;
  }
}

int sig_region_count(Sig sig) {
  switch (sig) {
    case Sig::If:
    case Sig::Pipeline:
      return 2;
    case Sig::For:
    case Sig::Loop:
    case Sig::Units:
      return 1;
    default:
      return 0;
  }
}

int frag_k_step(ElemType e) {
  switch (e) {
    case ElemType::F16:
    case ElemType::BF16:
      return 16;
    case ElemType::F32:  // tf32
      return 8;
    case ElemType::I8:
    case ElemType::U8:
    case ElemType::F8E4M3:
    case ElemType::F8E5M2:
      return 32;
    default:
      return 0;
  }
}

ElemType frag_acc_elem(ElemType e) {
  return is_int(e) ? ElemType::I32 : ElemType::F32;
}

bool is_frag_op(OpKind k) {
  switch (k) {
    case OpKind::FragFill:
    case OpKind::FragLoad:
    case OpKind::FragStore:
    case OpKind::FragMma:
    case OpKind::FragCast:
    case OpKind::FragMmaScaled:
    case OpKind::FragLdmatrix:
    case OpKind::Wgmma:
    case OpKind::WgmmaFence:
    case OpKind::WgmmaCommit:
    case OpKind::WgmmaWait:
      return true;
    default:
      return false;
  }
}

std::string pipeline_registers_error(PipelineRegisters regs) {
  if (!regs.set()) return {};
  for (const auto& [v, who] :
       {std::pair{regs.producer, "producer"}, std::pair{regs.consumers, "consumers"}})
    if (v < 24 || v > 256 || v % 8 != 0)
      return fmt::format(
          "a pipeline's {} take 24 to 256 registers per unit in steps of 8 (what "
          "setmaxnreg sets), not {}",
          who, v);
  if (regs.producer > regs.consumers)
    return fmt::format(
        "a pipeline's producer gives registers to its consumers: {} for the "
        "producer is more than the consumers' {}",
        regs.producer, regs.consumers);
  return {};
}

bool wgmma_n_valid(ElemType e, int n) {
  if (frag_k_step(e) == 0 || n < 8 || n > 256 || n % 8 != 0) return false;
  return !is_int(e) || n <= 24 || n % 16 == 0;
}

bool wgmma_swizzle_valid(uint64_t bytes) {
  return bytes == 0 || bytes == 32 || bytes == 64 || bytes == 128;
}

bool tcgen05_n_valid(ElemType e, int n) {
  return frag_k_step(e) != 0 && n >= 16 && n <= 256 && n % 16 == 0;
}

bool tmem_columns_valid(uint64_t columns) {
  return columns >= 32 && columns <= 512 && (columns & (columns - 1)) == 0;
}

bool is_cube_op(OpKind k) {
  switch (k) {
    case OpKind::MbarInit:
    case OpKind::MbarWait:
    case OpKind::TmemAlloc:
    case OpKind::TmemFree:
    case OpKind::Tcgen05Mma:
    case OpKind::Tcgen05Commit:
    case OpKind::TmemLoad:
    case OpKind::MbarArriveTx:
    case OpKind::TmaLoad:
    case OpKind::TmaLoadMulticast:
    case OpKind::TmaStore:
    case OpKind::TmaPrefetch:
    case OpKind::TmaStoreWait:
    case OpKind::SyncCluster:
      return true;
    default:
      return false;
  }
}

const std::vector<MatrixConfig>& matrix_configs() {
  static const std::vector<MatrixConfig> all = [] {
    std::vector<MatrixConfig> v;
    for (ElemType in : {ElemType::F16, ElemType::BF16, ElemType::F32, ElemType::I8, ElemType::U8,
                        ElemType::F8E4M3, ElemType::F8E5M2})
      for (int m : {16, 32})
        for (int n : {8, 16, 32})
          for (int steps : {1, 2})
            v.push_back({in, frag_acc_elem(in), m, n, frag_k_step(in) * steps});
    return v;
  }();
  return all;
}

std::string frag_type_error(const Type& t) {
  if (t.kind != TypeKind::Frag) return fmt::format("{} is not a fragment", type_name(t));
  if (t.m != 16 && t.m != 32)
    return fmt::format("{}: m must be 16 or 32, got {}", type_name(t), t.m);
  if (t.use == FragUse::Acc) {
    // Accumulators of warpgroup multiplies (wgmma.mma) are up to 256 columns wide.
    if (t.n < 8 || t.n > 256 || t.n % 8 != 0)
      return fmt::format("{}: n must be a multiple of 8 up to 256 for an accumulator, got {}",
                         type_name(t), t.n);
    if (t.elem != ElemType::F32 && t.elem != ElemType::F16 && t.elem != ElemType::BF16 &&
        t.elem != ElemType::I32 && !is_f8(t.elem))
      return fmt::format("{}: an accumulator holds f32, f16, bf16, f8e4m3, f8e5m2 or i32, not {}",
                         type_name(t), elem_name(t.elem));
    if (t.k != 8 && t.k != 16 && t.k != 32 && t.k != 64)
      return fmt::format("{}: k must be 8, 16, 32 or 64, got {}", type_name(t), t.k);
    return {};
  }
  if (t.n != 8 && t.n != 16 && t.n != 32)
    return fmt::format("{}: n must be 8, 16 or 32, got {}", type_name(t), t.n);
  const int step = frag_k_step(t.elem);
  if (step == 0)
    return fmt::format(
        "{}: matrix inputs are f16, bf16, f32 (multiplied as tf32), i8, u8, f8e4m3 or f8e5m2, "
        "not {}",
        type_name(t), elem_name(t.elem));
  if (t.k != step && t.k != 2 * step)
    return fmt::format("{}: k must be {} or {} for {} inputs, got {}", type_name(t), step, 2 * step,
                       elem_name(t.elem), t.k);
  return {};
}

bool int_literal_fits(ElemType t, uint64_t bits) {
  const int w = elem_bits(t);
  if (t == ElemType::Bool) return bits <= 1;
  if (w == 64) return true;
  if (is_signed(t)) {
    const auto v = static_cast<int64_t>(bits);
    const int64_t lo = -(int64_t{1} << (w - 1)), hi = (int64_t{1} << (w - 1)) - 1;
    return v >= lo && v <= hi;
  }
  return bits < (uint64_t{1} << w);
}

double round_float_literal(ElemType t, double v) {
  switch (t) {
    case ElemType::F16:
      return round_to(FloatFormat::F16, v);
    case ElemType::BF16:
      return round_to(FloatFormat::BF16, v);
    case ElemType::F32:
      return round_to(FloatFormat::F32, v);
    // A literal past the largest finite value (what rounds beyond it) is infinite, as for the
    // other formats, so that it is reported out of range instead of saturated.
    case ElemType::F8E4M3:
      return std::fabs(v) > 464.0 ? std::copysign(INFINITY, v) : round_to_e4m3(v);
    case ElemType::F8E5M2:
      return std::fabs(v) >= 61440.0 ? std::copysign(INFINITY, v) : round_to_e5m2(v);
    default:
      return v;
  }
}

}  // namespace kiln::ir
