// Helpers shared by the subcommands.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "compiler/dsl/registry.h"
#include "kernels/kernels.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

Result<std::string> read_input(const std::string& path) {
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error(ErrorKind::Io, fmt::format("error: cannot open '{}'", path));
  ss << f.rdbuf();
  if (f.bad()) return Error(ErrorKind::Io, fmt::format("error: cannot read '{}'", path));
  return ss.str();
}

Status load_kernels(const std::vector<std::string>& plugins) {
  (void)kernels::builtin_names();  // links the built-in kernel library
  for (const std::string& p : plugins) {
    auto added = dsl::load_plugin(p);
    if (!added) return added.error();
    for (const std::string& n : added->notices) fmt::print(stderr, "notice: {}\n", n);
  }
  return {};
}

Result<std::map<std::string, std::string>> parse_assignments(const std::vector<std::string>& items,
                                                             const std::string& what) {
  std::map<std::string, std::string> out;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("{} takes NAME=VALUE, got '{}'", what, item));
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

Result<std::array<uint32_t, 3>> parse_dims(const std::string& s, const std::string& what,
                                           uint32_t max) {
  std::array<uint32_t, 3> d{1, 1, 1};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t comma = s.find_first_of(",x", start);
    const std::string part =
        s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    unsigned long v = 0;
    try {
      size_t used = 0;
      v = std::stoul(part, &used);
      if (used != part.size()) throw std::invalid_argument("");
    } catch (...) {
      return Error(
          ErrorKind::InvalidArgument,
          fmt::format("{} takes X[,Y[,Z]] (or AxBxC) with positive integers, got '{}'", what, s));
    }
    if (v == 0 || v > max)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("{}: {} is out of range (1 to {})", what, v, max));
    d[i] = static_cast<uint32_t>(v);
    if (comma == std::string::npos) return d;
    start = comma + 1;
  }
  return Error(ErrorKind::InvalidArgument,
               fmt::format("{} takes at most 3 values, got '{}'", what, s));
}

Result<std::map<std::string, int>> parse_int_map(const std::vector<std::string>& items,
                                                 const std::string& what) {
  KILN_ASSIGN(auto raw, parse_assignments(items, what));
  std::map<std::string, int> out;
  for (const auto& [k, v] : raw) {
    try {
      size_t used = 0;
      out[k] = std::stoi(v, &used);
      if (used != v.size()) throw std::invalid_argument("");
    } catch (...) {
      return Error(ErrorKind::InvalidArgument, fmt::format("{} {}={}: not an integer", what, k, v));
    }
  }
  return out;
}

void print_error(const Error& e) {
  const bool located = e.message.find("error:") != std::string::npos;
  if (located)
    fmt::print(stderr, "{}\n", e.message);
  else
    fmt::print(stderr, "error: {}\n", e.message);
}

}  // namespace kiln::cli
