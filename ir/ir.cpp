// Kernel helpers: file table, locations for messages, walking regions.
#include "ir/ir.h"

#include <fmt/format.h>

namespace kiln::ir {

uint32_t Kernel::file_index(const std::string& file) {
  for (size_t i = 0; i < files.size(); ++i)
    if (files[i] == file) return static_cast<uint32_t>(i + 1);
  files.push_back(file);
  return static_cast<uint32_t>(files.size());
}

std::string Kernel::loc_string(const SourceLoc& loc) const {
  if (!loc.known() || loc.file > files.size()) return {};
  return fmt::format("{}:{}", files[loc.file - 1], loc.line);
}

std::string Kernel::where(const Op& op) const {
  const std::string dsl = loc_string(op.loc);
  if (op.pos.known()) {
    std::string s = fmt::format("{}:{}:{}", source_name.empty() ? "<input>" : source_name,
                                op.pos.line, op.pos.col);
    if (!dsl.empty()) s += fmt::format(" (from DSL {})", dsl);
    return s;
  }
  if (!dsl.empty()) return dsl;
  return fmt::format("kernel '{}'", name);
}

std::string Kernel::where(TextPos at) const {
  if (at.known())
    return fmt::format("{}:{}:{}", source_name.empty() ? "<input>" : source_name, at.line, at.col);
  if (!source_name.empty()) return fmt::format("{}: kernel '{}'", source_name, name);
  return fmt::format("kernel '{}'", name);
}

void walk(const Region& r, const std::function<void(const Op&)>& f) {
  for (const Op& op : r.ops) {
    f(op);
    for (const Region& sub : op.regions) walk(sub, f);
  }
}

void walk(Region& r, const std::function<void(Op&)>& f) {
  for (Op& op : r.ops) {
    f(op);
    for (Region& sub : op.regions) walk(sub, f);
  }
}

size_t count_ops(const Region& r) {
  size_t n = 0;
  walk(r, [&](const Op&) { ++n; });
  return n;
}

}  // namespace kiln::ir
