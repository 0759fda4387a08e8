// `kiln show KERNEL`: every stage of code for a registered kernel, for any target.
#include <optional>

#include <fmt/format.h>

#include "compiler/backend.h"
#include "compiler/dsl/registry.h"
#include "ir/printer.h"
#include "kernels/run.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

namespace {

struct ShowOptions {
  std::string kernel;
  std::string emit = "ir";
  std::string target = "cpu";
  std::string cpu;       // another x86 CPU, for inspection
  std::string features;  // extra features, for inspection
  std::vector<std::string> set, line, dtype, rank, read_only, plugins;
  std::string cube_dim;
  std::string after;  // a pass of the target's pipeline: print the IR after it
  bool checked = false, fast_math = false;
};

Result<const dsl::KernelDef*> find_kernel(const std::string& name) {
  if (const dsl::KernelDef* d = dsl::Registry::global().find(name)) return d;
  if (const kernels::RunRecipe* r = kernels::find_run_recipe(name); r && r->host_op()) {
    std::string ks;
    for (const std::string& k : r->host_op()->kernels) ks += (ks.empty() ? "" : ", ") + k;
    return Error(ErrorKind::NotFound,
                 fmt::format("'{}' is a library operation, not one kernel: `kiln run {}` runs it; "
                             "show its kernels by name ({})",
                             name, name, ks));
  }
  std::string names;
  for (const dsl::KernelDef* d : dsl::Registry::global().all())
    names += (names.empty() ? "" : ", ") + d->name;
  return Error(ErrorKind::NotFound,
               fmt::format("no kernel named '{}'; registered kernels: {}", name, names));
}

int run_show(const ShowOptions& o) {
  auto fail = [](const Error& e) {
    print_error(e);
    return 1;
  };
  // Plugins first: a plugin may register kernels, and backends too.
  if (auto st = load_kernels(o.plugins); !st) return fail(st.error());
  // --cpu and --features only spell a CPU target: cpu:NAME[:FEATURES].
  std::string target_text = o.target;
  if (!o.cpu.empty() || !o.features.empty()) {
    if (o.target != "cpu")
      return fail(Error(ErrorKind::InvalidArgument,
                        fmt::format("--cpu and --features choose a CPU; they do not go with "
                                    "--target {}",
                                    o.target)));
    target_text = fmt::format("cpu:{}{}", o.cpu.empty() ? "x86-64" : o.cpu,
                              o.features.empty() ? "" : ":" + o.features);
  }
  auto target = backend::parse_target(target_text);
  if (!target) return fail(target.error());
  auto def = find_kernel(o.kernel);
  if (!def) return fail(def.error());

  dsl::SpecOptions spec;
  auto set = parse_assignments(o.set, "--set");
  if (!set) return fail(set.error());
  spec.set = *set;
  auto dtype = parse_assignments(o.dtype, "--dtype");
  if (!dtype) return fail(dtype.error());
  spec.dtype = *dtype;
  auto line = parse_int_map(o.line, "--line");
  if (!line) return fail(line.error());
  spec.line = *line;
  auto rank = parse_int_map(o.rank, "--rank");
  if (!rank) return fail(rank.error());
  spec.rank = *rank;
  for (const std::string& n : o.read_only) spec.read_only[n] = true;
  if (!o.cube_dim.empty()) {
    auto cd = parse_dims(o.cube_dim, "--cube-dim", 1024);
    if (!cd) return fail(cd.error());
    spec.cube_dim = *cd;
  }
  auto sel = dsl::select(**def, spec);
  if (!sel) return fail(sel.error());
  sel->request.target = backend::trace_target(*target);
  sel->request.checked = o.checked;
  auto k = dsl::trace(**def, *sel->inst, sel->request);
  if (!k) return fail(k.error());
  if (!o.after.empty()) {
    // The IR after each run of that pass, in pipeline order (a pass may run twice).
    std::string out, passes;
    int n = 0;
    auto prepared = target->backend->prepare(
        std::move(*k), [&](const std::string& pass, const ir::Kernel& kk, bool changed) {
          passes += (passes.empty() ? "" : ", ") + pass;
          if (pass != o.after) return;
          out += fmt::format("// after pass {} ({}), run {}\n{}", pass,
                             changed ? "changed" : "unchanged", ++n, ir::print(kk));
        });
    if (!prepared) return fail(prepared.error());
    if (n == 0)
      return fail(Error(ErrorKind::InvalidArgument,
                        fmt::format("--after {}: no such pass in the pipeline of {}; its passes "
                                    "are, in order: {}",
                                    o.after, target->name, passes)));
    fmt::print("{}", out);
    return 0;
  }
  backend::Options bo;
  bo.checked = o.checked;
  bo.fast_math = o.fast_math;
  auto text = backend::emit_stage(*target->backend, *k, o.emit, *target, bo);
  if (!text) return fail(text.error());
  fmt::print("{}", *text);
  return 0;
}

// The --emit help: every backend's stages, from the table.
std::string emit_help() {
  std::string s = "What to print: a stage of the target's backend:";
  for (const backend::Backend* b : backend::all()) {
    s += fmt::format(" {}:", b->name());
    std::string names;
    for (const backend::Stage& st : backend::stages(*b))
      names += fmt::format("{}{} ({})", names.empty() ? " " : ", ", st.name, st.description);
    s += names + ";";
  }
  return s;
}

std::string target_help() {
  std::string s;
  for (const backend::Backend* b : backend::all())
    s += fmt::format("{}{}", s.empty() ? "" : "; ", b->target_syntax());
  return s;
}

}  // namespace

Command add_show_command(CLI::App& app) {
  auto* sub = app.add_subcommand("show", "Show the code of a registered kernel at any stage");
  auto o = std::make_shared<ShowOptions>();
  sub->add_option("KERNEL", o->kernel, "A registered kernel (see kiln list)")->required();
  sub->add_option("--emit", o->emit, emit_help())->capture_default_str();
  sub->add_option("--target", o->target, target_help())->capture_default_str();
  sub->add_option("--after", o->after,
                  "Print the IR after this pass of the target's pipeline (each run of it), "
                  "instead of --emit; an unknown name lists the passes");
  sub->add_flag("--checked", o->checked,
                "Show the checked-mode code (every access bounds-checked)");
  sub->add_flag("--fast-math", o->fast_math, "Show the code with fast math");
  sub->add_option("--cpu", o->cpu,
                  "Another x86 CPU for inspection (e.g. skylake, znver4, x86-64-v3): the same as "
                  "--target cpu:NAME");
  sub->add_option("--features", o->features,
                  "CPU features for inspection (e.g. +avx2,-avx512f): the same as "
                  "--target cpu:NAME:FEATURES");
  sub->add_option("--set", o->set, "Comptime value NAME=VALUE (repeatable)");
  sub->add_option("--line", o->line, "Line width NAME=WIDTH of a tensor or array (repeatable)");
  sub->add_option("--dtype", o->dtype,
                  "Element type NAME=TYPE, picking an instantiation of a generic kernel");
  sub->add_option("--rank", o->rank, "Rank NAME=R of a tensor (repeatable)");
  sub->add_option("--read-only", o->read_only, "Pass tensor or array NAME read-only (repeatable)");
  sub->add_option("--cube-dim", o->cube_dim, "Units per cube X[,Y[,Z]]");
  sub->add_option("--plugin", o->plugins, "Load kernels from a shared library first (repeatable)");
  sub->footer(
      "Without options the kernel's registered defaults are used. The IR printed by "
      "--emit ir is valid input to `kiln ir`.");
  return {sub, [o]() -> int { return run_show(*o); }};
}

}  // namespace kiln::cli
