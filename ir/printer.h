// The canonical text form of a kernel (.kir). parse(print(k)) prints back byte for byte.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace kiln::ir {

// Prints `k` in canonical form: the file table, then the kernel. Parameters are named by their
// names (%x), every other value by a number in order of definition (%0, %1, ...), two spaces
// of indent per region, and each op's DSL location as loc(#FILE:LINE) after it.
std::string print(const Kernel& k);

// The name each value prints as (%x for parameters, %N for the rest), indexed by ValueId;
// empty for values the kernel never defines.
std::vector<std::string> value_names(const Kernel& k);

// The canonical spelling of a literal: the shortest decimal that reads back as the same value
// of `t` (floats get a '.', 'e', "nan" or "inf" so they never look like integers).
std::string format_literal(ElemType t, const Attr& attr);

// A string in double quotes with \" \\ \n \t and \xHH escapes.
std::string quote(std::string_view s);

}  // namespace kiln::ir
