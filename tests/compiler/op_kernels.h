// The op-kind test kernels: every value op on every element type it accepts, in one kernel
// per element type and line width. The CPU tests run them against a C++ reference
// (compiler/cpu/test_ops.cpp); the CUDA tests compile them for every target.
#pragma once

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ir/builder.h"

namespace kiln::test::ops {

using ir::ElemType;
using ir::OpKind;
using ir::Type;

// ---- kernels -----------------------------------------------------------------------------------

struct Case {
  OpKind op;
  ElemType result;
  int arity;
};

inline constexpr uint32_t kCubeDim = 64;
inline constexpr uint32_t kLines = kCubeDim * 8;

// out_j[i] = op_j(a[i], b[i], c[i]) for every case j, each unit one line.
inline ir::Kernel build(ElemType t, int lanes, const std::vector<Case>& cases) {
  ir::Builder b(fmt::format("ops_{}", ir::elem_name(t)));
  const ir::SourceLoc at = b.loc("test_ops", 1);
  std::vector<ir::ValueId> in, out;
  for (const char* n : {"a", "b", "c"}) in.push_back(b.param(n, Type::array(t, lanes, true)));
  for (size_t j = 0; j < cases.size(); ++j)
    out.push_back(b.param(fmt::format("out{}", j), Type::array(cases[j].result, lanes, false)));
  b.set_cube_dim(kCubeDim, 1, 1);
  const auto i = b.op(OpKind::AbsolutePos, {}, at);
  b.begin_if(b.op(OpKind::Lt, {i, b.op(OpKind::Len, {in[0]}, at)}, at), at);
  const auto x = b.op(OpKind::Load, {in[0], i}, at);
  const auto y = b.op(OpKind::Load, {in[1], i}, at);
  const auto z = b.op(OpKind::Load, {in[2], i}, at);
  for (size_t j = 0; j < cases.size(); ++j) {
    const Case& c = cases[j];
    ir::ValueId r;
    if (c.op == OpKind::Cast || c.op == OpKind::Bitcast)
      r = b.op(c.op, {x}, at, Type::value(c.result, lanes));
    else if (c.op == OpKind::Select)
      r = b.op(OpKind::Select, {t == ElemType::Bool ? x : b.op(OpKind::Lt, {x, y}, at), y, z}, at);
    else if (c.arity == 1)
      r = b.op(c.op, {x}, at);
    else if (c.arity == 2)
      r = b.op(c.op, {x, y}, at);
    else
      r = b.op(c.op, {x, y, z}, at);
    b.op(OpKind::Store, {out[j], i, r}, at);
  }
  b.end_if();
  auto k = std::move(b).finish();
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  return std::move(*k);
}

inline const ElemType kAll[] = {ElemType::Bool, ElemType::I8,     ElemType::I16,   ElemType::I32,
                                ElemType::I64,  ElemType::U8,     ElemType::U16,   ElemType::U32,
                                ElemType::U64,  ElemType::F16,    ElemType::BF16,  ElemType::F32,
                                ElemType::F64,  ElemType::F8E4M3, ElemType::F8E5M2};

inline std::vector<Case> cases_for(ElemType t) {
  std::vector<Case> c;
  auto add = [&](OpKind op, int arity, ElemType r) { c.push_back({op, r, arity}); };
  const ElemType b = ElemType::Bool;
  for (OpKind op : {OpKind::Eq, OpKind::Ne}) add(op, 2, b);
  add(OpKind::Select, 3, t);
  if (t == ElemType::Bool) {
    for (OpKind op : {OpKind::And, OpKind::Or, OpKind::Xor}) add(op, 2, t);
    add(OpKind::Not, 1, t);
    return c;
  }
  for (OpKind op :
       {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Rem, OpKind::Min, OpKind::Max})
    add(op, 2, t);
  for (OpKind op : {OpKind::Neg, OpKind::Abs}) add(op, 1, t);
  add(OpKind::Clamp, 3, t);
  for (OpKind op : {OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge}) add(op, 2, b);
  if (ir::is_float(t)) {
    add(OpKind::Fma, 3, t);
    for (OpKind op :
         {OpKind::Sqrt, OpKind::Rsqrt, OpKind::Floor, OpKind::Ceil, OpKind::Round, OpKind::Trunc})
      add(op, 1, t);
    add(OpKind::IsNan, 1, b);
    add(OpKind::IsInf, 1, b);
  } else {
    for (OpKind op : {OpKind::And, OpKind::Or, OpKind::Xor, OpKind::Shl, OpKind::Shr})
      add(op, 2, t);
    add(OpKind::Not, 1, t);
  }
  return c;
}

}  // namespace kiln::test::ops

namespace kiln::test {
inline const std::pair<ir::ElemType, ir::ElemType> kBitcastPairs[] = {
    {ir::ElemType::F32, ir::ElemType::U32},   {ir::ElemType::I32, ir::ElemType::F32},
    {ir::ElemType::F64, ir::ElemType::I64},   {ir::ElemType::F16, ir::ElemType::U16},
    {ir::ElemType::BF16, ir::ElemType::I16},  {ir::ElemType::F16, ir::ElemType::BF16},
    {ir::ElemType::U8, ir::ElemType::I8},     {ir::ElemType::F8E4M3, ir::ElemType::U8},
    {ir::ElemType::I8, ir::ElemType::F8E5M2}, {ir::ElemType::F8E5M2, ir::ElemType::F8E4M3}};
}  // namespace kiln::test
