// `kiln list`: the registered kernels with their parameters and comptime defaults, and the
// library operations `kiln run` runs through their host entry points.
#include <fmt/format.h>

#include "compiler/dsl/registry.h"
#include "kernels/run.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

namespace {

// "max" means: the widest line the target and the launched tensor allow.
std::string line_text(int line) {
  return line == 0 ? "max" : std::to_string(line);
}

std::string describe_param(const dsl::ParamInfo& p) {
  using dsl::ParamKind;
  switch (p.kind) {
    case ParamKind::Tensor:
      return fmt::format("{}: tensor<{}>{}  ({}rank {}, line {})", p.name, ir::elem_name(p.dtype),
                         p.const_qualified ? " read-only" : "", p.rank_fixed ? "" : "default ",
                         p.default_rank, line_text(p.default_line));
    case ParamKind::Array:
      return fmt::format("{}: array<{}>{}  (default line {})", p.name, ir::elem_name(p.dtype),
                         p.const_qualified ? " read-only" : "", line_text(p.default_line));
    case ParamKind::Scalar:
      return fmt::format("{}: {}", p.name, ir::elem_name(p.dtype));
    case ParamKind::Comptime:
      return fmt::format(
          "{}: {} = {}{}  (comptime)", p.name, p.comptime_type,
          p.default_value ? p.default_value->format() : "?",
          p.min_value ? fmt::format(" in {}..{}", p.min_value->format(), p.max_value->format())
                      : std::string());
  }
  return p.name;
}

}  // namespace

Command add_list_command(CLI::App& app) {
  auto* sub = app.add_subcommand("list", "List the registered kernels and their parameters");
  auto names_only = std::make_shared<bool>(false);
  auto plugins = std::make_shared<std::vector<std::string>>();
  sub->add_flag("--names", *names_only, "Print only the kernel names, one per line");
  sub->add_option("--plugin", *plugins, "Load kernels from a shared library first (repeatable)");
  return {sub, [=]() -> int {
            if (auto st = load_kernels(*plugins); !st) {
              print_error(st.error());
              return 1;
            }
            for (const dsl::KernelDef* d : dsl::Registry::global().all()) {
              if (*names_only) {
                fmt::print("{}\n", d->name);
                continue;
              }
              std::string types;
              if (d->instantiations.size() > 1) {
                for (const auto& inst : d->instantiations)
                  types += (types.empty() ? "" : " | ") + inst.dtype_summary();
              }
              fmt::print("{}{}{}\n", d->name, d->description.empty() ? "" : "  -  ",
                         d->description);
              // A kernel whose cube size follows its comptime values: the defaults' one.
              std::array<uint32_t, 3> cube = d->default_cube_dim;
              std::string follows;
              if (d->required_cube_dim) {
                follows = " (follows the comptime values)";
                if (auto sel = dsl::select(*d, {}); sel.ok()) cube = sel->request.cube_dim;
              }
              fmt::print("  cube_dim {}x{}x{}{}, from {}:{}{}\n", cube[0], cube[1], cube[2],
                         follows, d->file, d->line,
                         d->origin == "built in" ? "" : " (plugin " + d->origin + ")");
              if (!d->replaces.empty()) fmt::print("  replaces {}\n", d->replaces);
              if (!d->problem.empty()) fmt::print("  PROBLEM: {}\n", d->problem);
              for (const auto& p : d->instantiations.front().params)
                fmt::print("  {}\n", describe_param(p));
              if (!types.empty()) fmt::print("  instantiations: {}\n", types);
            }
            if (*names_only) return 0;
            // Library operations: not kernels, but `kiln run` runs them (docs/kernels.md).
            const auto ops = kernels::host_op_names();
            if (!ops.empty())
              fmt::print("\nlibrary operations (kiln run NAME runs them through kiln::lib):\n");
            for (const std::string& name : ops) {
              const kernels::HostOp* op = kernels::find_run_recipe(name)->host_op();
              fmt::print("{}  -  {}\n", name, op->description);
            }
            return 0;
          }};
}

}  // namespace kiln::cli
