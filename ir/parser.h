// Parser for the .kir text form. Errors read `name:line:col: error: expected X, found Y`.
#pragma once

#include <string_view>

#include "ir/ir.h"

namespace kiln::ir {

// Parses one kernel. `source_name` names the text in error messages and in the kernel's
// later verifier errors. The parser checks syntax and names; types and every other rule are
// the verifier's (ir/verifier.h), so a parsed kernel should be verified before use.
// Never crashes, whatever the input.
Result<Kernel> parse(std::string_view text, std::string_view source_name = "<input>");

}  // namespace kiln::ir
