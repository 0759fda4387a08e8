// Names and sizes of IR types.
#include "ir/types.h"

#include <fmt/format.h>

#include "ir/result.h"

namespace kiln::ir {

namespace {

struct ElemInfo {
  std::string_view name;
  int bits;
  ElemClass cls;
};

constexpr ElemInfo kElemInfo[] = {
#define X(e, s, b, c) {s, b, ElemClass::c},
    KILN_FOR_EACH_ELEM_TYPE(X)
#undef X
};

}  // namespace

std::string_view elem_name(ElemType t) {
  return kElemInfo[static_cast<int>(t)].name;
}

std::optional<ElemType> parse_elem_type(std::string_view name) {
  for (int i = 0; i < kNumElemTypes; ++i)
    if (kElemInfo[i].name == name) return static_cast<ElemType>(i);
  return std::nullopt;
}

int elem_bits(ElemType t) {
  return kElemInfo[static_cast<int>(t)].bits;
}
int elem_bytes(ElemType t) {
  return t == ElemType::Bool ? 1 : elem_bits(t) / 8;
}
ElemClass elem_class(ElemType t) {
  return kElemInfo[static_cast<int>(t)].cls;
}

std::string_view frag_use_name(FragUse u) {
  switch (u) {
    case FragUse::A:
      return "a";
    case FragUse::B:
      return "b";
    case FragUse::Acc:
      return "acc";
  }
  return "?";
}

namespace {
std::string line_name(const Type& t) {
  if (t.lanes == 1) return std::string(elem_name(t.elem));
  return fmt::format("{}x{}", elem_name(t.elem), t.lanes);
}
}  // namespace

std::string type_name(const Type& t) {
  switch (t.kind) {
    case TypeKind::Void:
      return "void";
    case TypeKind::Value:
      return line_name(t);
    case TypeKind::Tensor:
      return fmt::format("tensor<{}, {}{}>", line_name(t), t.rank, t.read_only ? ", ro" : "");
    case TypeKind::Array:
      return fmt::format("array<{}{}>", line_name(t), t.read_only ? ", ro" : "");
    case TypeKind::Shared:
      return fmt::format("shared<{}, {}>", line_name(t), t.count);
    case TypeKind::Local:
      return fmt::format("local<{}, {}>", line_name(t), t.count);
    case TypeKind::Var:
      return fmt::format("var<{}>", line_name(t));
    case TypeKind::Frag:
      return fmt::format("frag<{}, {}, {}, {}, {}>", frag_use_name(t.use), elem_name(t.elem), t.m,
                         t.n, t.k);
  }
  KILN_CHECK(false, "unknown type kind");
  return {};
}

}  // namespace kiln::ir
