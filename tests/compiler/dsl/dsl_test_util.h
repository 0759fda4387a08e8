// Helpers for DSL tests: trace a registered kernel with options, find marker lines in sources.
#pragma once

#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "compiler/dsl/registry.h"
#include "ir/printer.h"
#include "tests/test_util.h"

namespace kiln::test {

inline Result<ir::Kernel> trace_kernel(const std::string& name, const dsl::SpecOptions& opts = {}) {
  const dsl::KernelDef* def = dsl::Registry::global().find(name);
  if (!def) return Error(ErrorKind::NotFound, "no kernel " + name);
  KILN_ASSIGN(auto sel, dsl::select(*def, opts));
  return dsl::trace(*def, *sel.inst, sel.request);
}

// The IR text of a kernel that must trace.
inline std::string traced_ir(const std::string& name, const dsl::SpecOptions& opts = {}) {
  auto k = trace_kernel(name, opts);
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  return ir::print(*k);
}

// The error of a kernel that must fail to trace.
inline std::string trace_error(const std::string& name, const dsl::SpecOptions& opts = {}) {
  auto k = trace_kernel(name, opts);
  if (k.ok()) return "(traced)\n" + ir::print(*k);
  return k.error().message;
}

// "file:line" of the line of a source file (relative to the repository) holding `marker`.
inline std::string marker_loc(const std::string& rel_path, const std::string& marker) {
  std::istringstream in(read_file(source_path(rel_path)));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos && line.find("marker_loc") == std::string::npos)
      return rel_path + ":" + std::to_string(n);
  return "(marker " + marker + " not found)";
}

}  // namespace kiln::test
