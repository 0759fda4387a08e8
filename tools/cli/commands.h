// The kiln command-line tool: each subcommand registers itself on the CLI11 app and returns
// its exit code when run (0 success, 1 a user-facing error, 2 bad usage).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
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
Command add_list_command(CLI::App& app);
Command add_show_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_tune_command(CLI::App& app);
Command add_cache_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_targets_command(CLI::App& app);

// Reads a whole file, or standard input for "-".
Result<std::string> read_input(const std::string& path);

// Loads the plugins (shared libraries of kernels) and makes sure the built-in kernels are
// registered.
Status load_kernels(const std::vector<std::string>& plugins);

// Splits NAME=VALUE options; `what` names the option in errors.
Result<std::map<std::string, std::string>> parse_assignments(const std::vector<std::string>& items,
                                                             const std::string& what);

// "X[,Y[,Z]]" or "XxYxZ", each 1 to `max`; `what` names the option in errors.
Result<std::array<uint32_t, 3>> parse_dims(const std::string& s, const std::string& what,
                                           uint32_t max);

// NAME=INTEGER options.
Result<std::map<std::string, int>> parse_int_map(const std::vector<std::string>& items,
                                                 const std::string& what);

// Prints an error to stderr: messages that already carry a location stand as they are,
// others get an "error: " prefix.
void print_error(const Error& e);

}  // namespace kiln::cli
