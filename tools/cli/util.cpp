// Helpers shared by the subcommands.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

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

void print_error(const Error& e) {
  const bool located = e.message.find("error:") != std::string::npos;
  if (located)
    fmt::print(stderr, "{}\n", e.message);
  else
    fmt::print(stderr, "error: {}\n", e.message);
}

}  // namespace kiln::cli
