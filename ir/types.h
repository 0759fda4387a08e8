// Types of the kiln IR: element types, lines (element x width) and memory objects.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::ir {

// Element types: enum name, text name, bit width, class.
#define KILN_FOR_EACH_ELEM_TYPE(X) \
  X(Bool, "bool", 1, Bool)         \
  X(I8, "i8", 8, Signed)           \
  X(I16, "i16", 16, Signed)        \
  X(I32, "i32", 32, Signed)        \
  X(I64, "i64", 64, Signed)        \
  X(U8, "u8", 8, Unsigned)         \
  X(U16, "u16", 16, Unsigned)      \
  X(U32, "u32", 32, Unsigned)      \
  X(U64, "u64", 64, Unsigned)      \
  X(F16, "f16", 16, Float)         \
  X(BF16, "bf16", 16, Float)       \
  X(F32, "f32", 32, Float)         \
  X(F64, "f64", 64, Float)         \
  X(F8E4M3, "f8e4m3", 8, Float)    \
  X(F8E5M2, "f8e5m2", 8, Float)

enum class ElemType : uint8_t {
#define X(e, s, b, c) e,
  KILN_FOR_EACH_ELEM_TYPE(X)
#undef X
};
inline constexpr int kNumElemTypes = 15;

enum class ElemClass : uint8_t { Bool, Signed, Unsigned, Float };

std::string_view elem_name(ElemType t);
std::optional<ElemType> parse_elem_type(std::string_view name);
int elem_bits(ElemType t);   // bool counts as 1
int elem_bytes(ElemType t);  // storage size; bool is 1 byte in memory
ElemClass elem_class(ElemType t);
inline bool is_float(ElemType t) {
  return elem_class(t) == ElemClass::Float;
}
inline bool is_int(ElemType t) {
  return elem_class(t) == ElemClass::Signed || elem_class(t) == ElemClass::Unsigned;
}
inline bool is_signed(ElemType t) {
  return elem_class(t) == ElemClass::Signed;
}
// The 8-bit floats (OCP FP8): e4m3 (the "fn" variant: no infinities, one NaN, up to 448) and
// e5m2 (IEEE-like, up to 57344).
inline bool is_f8(ElemType t) {
  return t == ElemType::F8E4M3 || t == ElemType::F8E5M2;
}
inline bool is_bool(ElemType t) {
  return t == ElemType::Bool;
}

// The widest line is 16 lanes (a 512-bit vector of f32); widths are powers of two.
inline constexpr int kMaxLanes = 16;
inline bool valid_lanes(int lanes) {
  return lanes >= 1 && lanes <= kMaxLanes && (lanes & (lanes - 1)) == 0;
}

enum class TypeKind : uint8_t {
  Void,    // ops without a result
  Value,   // a line: elem x lanes (lanes == 1 is a scalar)
  Tensor,  // global memory with rank, runtime shape and strides (a kernel parameter)
  Array,   // global 1-D memory with a runtime length (a kernel parameter)
  Shared,  // cube-shared memory of a fixed number of lines
  Local,   // unit-private memory of a fixed number of lines
  Var,     // a mutable variable holding one line
  Frag,    // a matrix fragment owned by a plane (use, element type, shape m x n x k)
};

// What a matrix fragment is for: the left (m x k) or right (k x n) operand of a matrix
// multiply-accumulate, or its accumulator (m x n).
enum class FragUse : uint8_t { A = 0, B = 1, Acc = 2 };
std::string_view frag_use_name(FragUse u);  // "a", "b", "acc"

// The memory layout of a fragment load or store (an op attribute): element (r, c) of the tile
// is at index + r * stride + c (row) or index + c * stride + r (col).
enum class FragLayout : uint8_t { Row = 0, Col = 1 };

// One value type. Memory and var types carry the line they hold in elem/lanes.
struct Type {
  TypeKind kind = TypeKind::Void;
  ElemType elem = ElemType::Bool;
  uint8_t lanes = 1;
  uint8_t rank = 0;          // Tensor only
  bool read_only = false;    // Tensor and Array only
  uint32_t count = 0;        // Shared and Local: number of lines
  FragUse use = FragUse::A;  // Frag only, with the shape m x n x k of the multiply it is for
  uint16_t m = 0, n = 0, k = 0;

  static Type void_type() { return Type{}; }
  static Type value(ElemType e, int lanes = 1) {
    Type t;
    t.kind = TypeKind::Value;
    t.elem = e;
    t.lanes = static_cast<uint8_t>(lanes);
    return t;
  }
  static Type tensor(ElemType e, int lanes, int rank, bool read_only) {
    Type t = value(e, lanes);
    t.kind = TypeKind::Tensor;
    t.rank = static_cast<uint8_t>(rank);
    t.read_only = read_only;
    return t;
  }
  static Type array(ElemType e, int lanes, bool read_only) {
    Type t = value(e, lanes);
    t.kind = TypeKind::Array;
    t.read_only = read_only;
    return t;
  }
  static Type shared(ElemType e, int lanes, uint32_t count) {
    Type t = value(e, lanes);
    t.kind = TypeKind::Shared;
    t.count = count;
    return t;
  }
  static Type local(ElemType e, int lanes, uint32_t count) {
    Type t = shared(e, lanes, count);
    t.kind = TypeKind::Local;
    return t;
  }
  static Type frag(FragUse use, ElemType e, int m, int n, int k) {
    Type t = value(e, 1);
    t.kind = TypeKind::Frag;
    t.use = use;
    t.m = static_cast<uint16_t>(m);
    t.n = static_cast<uint16_t>(n);
    t.k = static_cast<uint16_t>(k);
    return t;
  }
  static Type var(ElemType e, int lanes) {
    Type t = value(e, lanes);
    t.kind = TypeKind::Var;
    return t;
  }

  bool is_void() const { return kind == TypeKind::Void; }
  bool is_value() const { return kind == TypeKind::Value; }
  bool is_memory() const {
    return kind == TypeKind::Tensor || kind == TypeKind::Array || kind == TypeKind::Shared ||
           kind == TypeKind::Local;
  }
  bool is_global() const { return kind == TypeKind::Tensor || kind == TypeKind::Array; }
  bool is_var() const { return kind == TypeKind::Var; }
  bool is_frag() const { return kind == TypeKind::Frag; }
  // A fragment's rows and columns: m x k (A), k x n (B), m x n (accumulator).
  int frag_rows() const { return use == FragUse::B ? k : m; }
  int frag_cols() const { return use == FragUse::A ? k : n; }
  // The line a memory object or variable holds, or the value type itself.
  Type line() const { return value(elem, lanes); }
  Type scalar() const { return value(elem, 1); }
  Type with_elem(ElemType e) const {
    Type t = *this;
    t.elem = e;
    return t;
  }
  Type with_lanes(int n) const {
    Type t = *this;
    t.lanes = static_cast<uint8_t>(n);
    return t;
  }

  friend bool operator==(const Type& a, const Type& b) {
    return a.kind == b.kind && a.elem == b.elem && a.lanes == b.lanes && a.rank == b.rank &&
           a.read_only == b.read_only && a.count == b.count && a.use == b.use && a.m == b.m &&
           a.n == b.n && a.k == b.k;
  }
};

// Canonical text: f32, f32x4, tensor<f32x4, 2, ro>, array<u32>, shared<f32, 256>,
// local<i32x2, 8>, var<f32x4>, frag<acc, f32, 16, 16, 16>, void.
std::string type_name(const Type& t);

}  // namespace kiln::ir
