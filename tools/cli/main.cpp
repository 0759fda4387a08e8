// kiln: inspect, compile and run kiln kernels from the command line.
#include <cstdio>

#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kiln: a JIT kernel compiler for CPUs and NVIDIA GPUs.\n"
      "Shows every stage of code for every target; see docs/cli.md.",
      "kiln"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  std::vector<kiln::cli::Command> commands = {
      kiln::cli::add_ir_command(app),      kiln::cli::add_version_command(app),
      kiln::cli::add_demo_command(app),    kiln::cli::add_list_command(app),
      kiln::cli::add_show_command(app),    kiln::cli::add_run_command(app),
      kiln::cli::add_tune_command(app),    kiln::cli::add_cache_command(app),
      kiln::cli::add_devices_command(app), kiln::cli::add_targets_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (auto& c : commands)
    if (c.app->parsed()) return c.run();
  return 2;
}
