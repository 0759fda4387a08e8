// `kiln ir FILE`: parse, verify and print a .kir file in canonical form.
#include <fmt/format.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

Command add_ir_command(CLI::App& app) {
  auto* sub = app.add_subcommand("ir", "Parse, verify and print a .kir file in canonical form");
  auto file = std::make_shared<std::string>();
  auto verify_only = std::make_shared<bool>(false);
  sub->add_option("FILE", *file, "The .kir file, or - for standard input")->required();
  sub->add_flag("--verify-only", *verify_only, "Only check the file; print nothing on success");
  sub->footer("Errors go to stderr as FILE:LINE:COL: error: ..., with exit code 1.");
  return {sub, [file, verify_only]() -> int {
            auto text = read_input(*file);
            if (!text) {
              print_error(text.error());
              return 1;
            }
            const std::string name = *file == "-" ? "<stdin>" : *file;
            auto k = ir::parse(*text, name);
            if (!k) {
              print_error(k.error());
              return 1;
            }
            if (auto st = ir::verify(*k); !st) {
              print_error(st.error());
              return 1;
            }
            if (!*verify_only) fmt::print("{}", ir::print(*k));
            return 0;
          }};
}

}  // namespace kiln::cli
