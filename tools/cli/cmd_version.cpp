// `kiln version` and `kiln targets`: what each backend in the table says about itself.
#include <fmt/format.h>

#include "compiler/backend.h"
#include "tools/cli/commands.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

namespace kiln::cli {

Command add_version_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "version", "Print the versions of kiln and of the compilers behind each backend");
  return {sub, []() -> int {
            fmt::print("kiln  {}\n", KILN_VERSION);
            for (const backend::Backend* b : backend::all())
              fmt::print("{:<5} {}\n", b->name(), b->versions());
            return 0;
          }};
}

Command add_targets_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "targets", "List the targets kiln compiles for, backend by backend (--target of kiln show)");
  return {sub, []() -> int {
            for (const backend::Backend* b : backend::all()) {
              for (const std::string& line : b->list_targets()) fmt::print("{}\n", line);
              fmt::print("         written: {}\n", b->target_syntax());
            }
            return 0;
          }};
}

}  // namespace kiln::cli
