// The kiln command-line tool: each subcommand registers itself on the CLI11 app and returns
// its exit code when run (0 success, 1 a user-facing error, 2 bad usage).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ir/result.h"

namespace kiln::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_ir_command(CLI::App& app);
Command add_version_command(CLI::App& app);
Command add_demo_command(CLI::App& app);

// Reads a whole file, or standard input for "-".
Result<std::string> read_input(const std::string& path);

// Prints an error to stderr: messages that already carry a location stand as they are,
// others get an "error: " prefix.
void print_error(const Error& e);

}  // namespace kiln::cli
