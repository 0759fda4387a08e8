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

void print_error(const Error& e) {
  const bool located = e.message.find("error:") != std::string::npos;
  if (located)
    fmt::print(stderr, "{}\n", e.message);
  else
    fmt::print(stderr, "error: {}\n", e.message);
}

}  // namespace kiln::cli
