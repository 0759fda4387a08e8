// How kiln IR is spelled in the CUDA C++ the backend generates (compiler/cuda/codegen.cpp): the
// prelude's names of element, line, memory and fragment types, literals of every element type
// exactly, the prelude function of each op, and the names CUDA C++ reserves.
#pragma once

#include <string>

#include "ir/ir.h"

namespace kiln::cuda {

// kiln::f32, ..., bool.
std::string elem_c(ir::ElemType e);
// A value's C++ type: the element, or kiln::line<T, N>.
std::string value_c(const ir::Type& t);
// How a line of memory of `t` is stored (bools as one byte each: kiln::mbool).
std::string mem_line_c(const ir::Type& t);
// A fragment's C++ type.
std::string frag_c(const ir::Type& t);
// The unsigned integer of an element's width.
std::string uint_c(ir::ElemType e);
// Whether `s` is a C++ or CUDA keyword (a parameter named so is renamed).
bool is_keyword(const std::string& s);
// A constant of element type e, exactly (floats through their bits where decimal would round).
std::string literal(ir::ElemType e, const ir::Attr& a);
// The prelude function of an elementwise op (kiln::add, ...); null for other ops.
const char* func_name(ir::OpKind k);

}  // namespace kiln::cuda
