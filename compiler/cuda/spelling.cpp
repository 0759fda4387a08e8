// How kiln IR is spelled in CUDA C++ (spelling.h).
#include "compiler/cuda/spelling.h"

#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "ir/float16.h"

namespace kiln::cuda {

using ir::ElemType;
using ir::OpKind;
using ir::Type;
using ir::TypeKind;

std::string elem_c(ElemType e) {
  if (e == ElemType::Bool) return "bool";
  return fmt::format("kiln::{}", ir::elem_name(e));
}
// A value's C++ type: kiln::f32, kiln::f32x4, bool, kiln::boolx4.
std::string value_c(const Type& t) {
  if (t.lanes == 1) return elem_c(t.elem);
  return fmt::format("kiln::{}x{}",
                     t.elem == ElemType::Bool ? "bool" : std::string(ir::elem_name(t.elem)),
                     t.lanes);
}
// What memory holds per line: bools as kiln::mbool bytes.
std::string mem_line_c(const Type& t) {
  const std::string e = t.elem == ElemType::Bool ? "mbool" : std::string(ir::elem_name(t.elem));
  return t.lanes == 1 ? "kiln::" + e : fmt::format("kiln::{}x{}", e, t.lanes);
}
// A fragment's C++ type: kiln::frag_acc<kiln::f32, 16, 16, 16>.
std::string frag_c(const Type& t) {
  const char* use = t.use == ir::FragUse::A ? "a" : t.use == ir::FragUse::B ? "b" : "acc";
  return fmt::format("kiln::frag_{}<{}, {}, {}, {}>", use, elem_c(t.elem), t.m, t.n, t.k);
}
std::string uint_c(ElemType e) {
  switch (ir::elem_bits(e)) {
    case 8:
      return "kiln::u8";
    case 16:
      return "kiln::u16";
    case 64:
      return "kiln::u64";
    default:
      return "kiln::u32";
  }
}

bool is_keyword(const std::string& s) {
  static const std::set<std::string> k = {
      "alignas",   "alignof",  "and",      "asm",      "auto",     "bool",      "break",
      "case",      "catch",    "char",     "class",    "const",    "constexpr", "continue",
      "decltype",  "default",  "delete",   "do",       "double",   "else",      "enum",
      "explicit",  "export",   "extern",   "false",    "float",    "for",       "friend",
      "goto",      "if",       "inline",   "int",      "long",     "mutable",   "namespace",
      "new",       "noexcept", "not",      "nullptr",  "operator", "or",        "private",
      "protected", "public",   "register", "return",   "short",    "signed",    "sizeof",
      "static",    "struct",   "switch",   "template", "this",     "throw",     "true",
      "try",       "typedef",  "typeid",   "typename", "union",    "unsigned",  "using",
      "virtual",   "void",     "volatile", "while",    "xor",      "threadIdx", "blockIdx",
      "blockDim",  "gridDim",  "warpSize", "kiln",     "args",     "bits",      "main"};
  return k.count(s) > 0;
}

// A C++ literal for a constant of element type `e`.
std::string literal(ElemType e, const ir::Attr& a) {
  switch (e) {
    case ElemType::Bool:
      return a.i ? "true" : "false";
    case ElemType::I8:
      return fmt::format("(kiln::i8){}", static_cast<int8_t>(a.i));
    case ElemType::I16:
      return fmt::format("(kiln::i16){}", static_cast<int16_t>(a.i));
    case ElemType::I32: {
      const auto v = static_cast<int32_t>(a.i);
      return v == INT32_MIN ? "(-2147483647 - 1)" : fmt::format("{}", v);
    }
    case ElemType::I64: {
      const auto v = static_cast<int64_t>(a.i);
      return v == INT64_MIN ? "(-9223372036854775807LL - 1)" : fmt::format("{}LL", v);
    }
    case ElemType::U8:
      return fmt::format("(kiln::u8){}u", static_cast<uint8_t>(a.i));
    case ElemType::U16:
      return fmt::format("(kiln::u16){}u", static_cast<uint16_t>(a.i));
    case ElemType::U32:
      return fmt::format("{}u", static_cast<uint32_t>(a.i));
    case ElemType::U64:
      return fmt::format("{}ull", a.i);
    case ElemType::F16:
      return fmt::format("kiln::f16{{0x{:04x}}} /* {} */", f16_bits(a.f), a.f);
    case ElemType::BF16:
      return fmt::format("kiln::bf16{{0x{:04x}}} /* {} */", bf16_bits(a.f), a.f);
    case ElemType::F8E4M3:
      return fmt::format("kiln::f8e4m3{{0x{:02x}}} /* {} */", e4m3_bits(a.f), a.f);
    case ElemType::F8E5M2:
      return fmt::format("kiln::f8e5m2{{0x{:02x}}} /* {} */", e5m2_bits(a.f), a.f);
    case ElemType::F32: {
      const auto f = static_cast<float>(a.f);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (!std::isfinite(f)) return fmt::format("__uint_as_float(0x{:08x}u) /* {} */", bits, f);
      std::string s = fmt::format("{}", f);
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s + "f";
    }
    case ElemType::F64: {
      uint64_t bits;
      std::memcpy(&bits, &a.f, 8);
      if (!std::isfinite(a.f))
        return fmt::format("__longlong_as_double(0x{:016x}LL) /* {} */", bits, a.f);
      std::string s = fmt::format("{}", a.f);
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s;
    }
  }
  return "0";
}

const char* func_name(OpKind k) {
  switch (k) {
    case OpKind::Add:
      return "add";
    case OpKind::Sub:
      return "sub";
    case OpKind::Mul:
      return "mul";
    case OpKind::Div:
      return "div";
    case OpKind::Rem:
      return "rem";
    case OpKind::Min:
      return "min";
    case OpKind::Max:
      return "max";
    case OpKind::Neg:
      return "neg";
    case OpKind::Abs:
      return "abs";
    case OpKind::Fma:
      return "fma";
    case OpKind::Clamp:
      return "clamp";
    case OpKind::And:
      return "band";
    case OpKind::Or:
      return "bor";
    case OpKind::Xor:
      return "bxor";
    case OpKind::Not:
      return "bnot";
    case OpKind::Shl:
      return "shl";
    case OpKind::Shr:
      return "shr";
    case OpKind::Eq:
      return "eq";
    case OpKind::Ne:
      return "ne";
    case OpKind::Lt:
      return "lt";
    case OpKind::Le:
      return "le";
    case OpKind::Gt:
      return "gt";
    case OpKind::Ge:
      return "ge";
    case OpKind::Select:
      return "select";
    case OpKind::Sqrt:
      return "sqrt";
    case OpKind::Rsqrt:
      return "rsqrt";
    case OpKind::Exp:
      return "exp";
    case OpKind::Exp2:
      return "exp2";
    case OpKind::Log:
      return "log";
    case OpKind::Log2:
      return "log2";
    case OpKind::Sin:
      return "sin";
    case OpKind::Cos:
      return "cos";
    case OpKind::Tanh:
      return "tanh";
    case OpKind::Pow:
      return "pow";
    case OpKind::Floor:
      return "floor";
    case OpKind::Ceil:
      return "ceil";
    case OpKind::Round:
      return "round";
    case OpKind::Trunc:
      return "trunc";
    case OpKind::IsNan:
      return "is_nan";
    case OpKind::IsInf:
      return "is_inf";
    case OpKind::PlaneSum:
      return "plane_sum";
    case OpKind::PlaneMin:
      return "plane_min";
    case OpKind::PlaneMax:
      return "plane_max";
    case OpKind::PlaneAny:
      return "plane_any";
    case OpKind::PlaneAll:
      return "plane_all";
    case OpKind::AtomicAdd:
      return "atomic_add";
    case OpKind::AtomicMin:
      return "atomic_min";
    case OpKind::AtomicMax:
      return "atomic_max";
    case OpKind::AtomicExchange:
      return "atomic_exchange";
    case OpKind::AtomicCas:
      return "atomic_cas";
    default:
      return nullptr;
  }
}

}  // namespace kiln::cuda
