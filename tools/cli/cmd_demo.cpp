// `kiln demo`: the main job, end to end on a sample kernel.
#include <fmt/format.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

namespace {

constexpr const char* kSample = R"(file #1 "demo/axpy.cpp"
kernel @axpy(%x: tensor<f32x4, 1, ro>, %y: tensor<f32x4, 1>, %a: f32) cube_dim(256, 1, 1) {
  %0 = absolute_pos : u32                             loc(#1:3)
  %1 = len %y : u32                                   loc(#1:4)
  %2 = lt %0, %1 : bool                               loc(#1:4)
  if %2 loc(#1:4) {
    %3 = load %x, %0 : f32x4                          loc(#1:5)
    %4 = load %y, %0 : f32x4                          loc(#1:5)
    %5 = broadcast %a : f32x4                         loc(#1:5)
    %6 = fma %5, %3, %4 : f32x4                       loc(#1:5)
    store %y, %0, %6                                  loc(#1:5)
  }
}
)";

}  // namespace

Command add_demo_command(CLI::App& app) {
  auto* sub = app.add_subcommand("demo", "Run the demo: parse, verify and print a sample kernel");
  return {sub, []() -> int {
            auto k = ir::parse(kSample, "demo.kir");
            if (!k) {
              print_error(k.error());
              return 1;
            }
            if (auto st = ir::verify(*k); !st) {
              print_error(st.error());
              return 1;
            }
            fmt::print("Parsed and verified kernel '{}' ({} ops):\n\n{}", k->name,
                       ir::count_ops(k->body), ir::print(*k));
            return 0;
          }};
}

}  // namespace kiln::cli
