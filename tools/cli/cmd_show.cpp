// `kiln show KERNEL`: every stage of code for a registered kernel, for any target.
#include <optional>

#include <fmt/format.h>

#include "compiler/cpu/backend.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/dsl/registry.h"
#include "compiler/passes/pipeline.h"
#include "ir/printer.h"
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
  bool checked = false, fast_math = false;
};

// `--emit cuda|ptx|resources` and the IR stages for an NVIDIA target.
int show_cuda(const ShowOptions& o, const cuda::Target& target, ir::Kernel traced) {
  auto fail = [](const Error& e) {
    print_error(e);
    return 1;
  };
  if (o.emit == "ir") {
    fmt::print("{}", ir::print(traced));
    return 0;
  }
  const bool known =
      o.emit == "ir-opt" || o.emit == "cuda" || o.emit == "ptx" || o.emit == "resources";
  if (!known)
    return fail(
        Error(ErrorKind::InvalidArgument,
              fmt::format(
                  "--emit {} is not a stage of --target {}; choose one of: ir, ir-opt, cuda, ptx, "
                  "resources (llvm, llvm-opt and asm are for --target cpu)",
                  o.emit, target.name())));
  auto prepared = passes::prepare_for_cuda(std::move(traced));
  if (!prepared) return fail(prepared.error());
  if (o.emit == "ir-opt") {
    fmt::print("{}", ir::print(*prepared));
    return 0;
  }
  cuda::CodegenOptions copts;
  copts.checked = o.checked;
  copts.fast_math = o.fast_math;
  auto src = cuda::generate(*prepared, copts);
  if (!src) return fail(src.error());
  if (o.emit == "cuda") {
    fmt::print("{}", src->text);
    return 0;
  }
  auto compiled = cuda::compile_cuda(src->text, prepared->name + ".cu", target.name(), o.fast_math);
  if (!compiled) return fail(compiled.error());
  if (o.emit == "ptx") {
    fmt::print("{}", compiled->ptx);
    return 0;
  }
  const cuda::Resources& r = compiled->resources;
  if (!r.known)
    return fail(Error(ErrorKind::Compile, "NVRTC gave no ptxas report:\n" + compiled->log));
  fmt::print("kernel {} for {} ({} units per cube):\n", src->info.symbol, target.name(),
             prepared->units_per_cube());
  fmt::print("  registers      {} per unit\n", r.registers);
  fmt::print(
      "  shared memory  {} bytes per cube{}\n", src->info.shared_bytes,
      src->info.dynamic_shared_bytes ? " (dynamic: above the 48 KiB of static shared memory)" : "");
  fmt::print("  stack          {} bytes per unit\n", r.stack_bytes);
  fmt::print("  spills         {} bytes stored, {} bytes loaded\n", r.spill_store_bytes,
             r.spill_load_bytes);
  fmt::print("  barriers       {}\n", r.barriers);
  fmt::print("  constant bank  {} bytes (parameters included)\n", r.constant_bytes);
  fmt::print("  NVRTC          {:.1f} ms\n", compiled->compile_ms);
  return 0;
}

Result<const dsl::KernelDef*> find_kernel(const std::string& name) {
  if (const dsl::KernelDef* d = dsl::Registry::global().find(name)) return d;
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
  std::optional<cuda::Target> gpu;
  if (o.target != "cpu") {
    auto t = cuda::parse_target(o.target);
    if (!t)
      return fail(Error(
          ErrorKind::InvalidArgument,
          fmt::format("unknown --target '{}'; choose cpu, or a CUDA target such as sm_80, sm_89, "
                      "sm_90a, sm_100a, sm_120a (see kiln targets)",
                      o.target)));
    gpu = *t;
  }
  if (auto st = load_kernels(o.plugins); !st) return fail(st.error());
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
  auto k = dsl::trace(**def, *sel->inst, sel->request);
  if (!k) return fail(k.error());
  if (gpu) return show_cuda(o, *gpu, std::move(*k));
  if (o.emit == "ir") {
    fmt::print("{}", ir::print(*k));
    return 0;
  }
  const bool known =
      o.emit == "ir-opt" || o.emit == "llvm" || o.emit == "llvm-opt" || o.emit == "asm";
  if (!known)
    return fail(Error(ErrorKind::InvalidArgument,
                      fmt::format("unknown --emit '{}'; choose one of: ir, ir-opt, llvm, llvm-opt, "
                                  "asm",
                                  o.emit)));
  auto lowered = passes::lower_for_cpu(std::move(*k));
  if (!lowered) return fail(lowered.error());
  if (o.emit == "ir-opt") {
    fmt::print("{}", ir::print(*lowered));
    return 0;
  }
  cpu::CompileOptions copts;
  copts.checked = o.checked;
  copts.fast_math = o.fast_math;
  auto target = o.cpu.empty() && o.features.empty()
                    ? cpu::host_target()
                    : cpu::make_target(o.cpu.empty() ? "x86-64" : o.cpu, o.features);
  if (!target) return fail(target.error());
  copts.target = *target;
  auto text = o.emit == "asm" ? cpu::emit_asm(*lowered, copts)
                              : cpu::emit_llvm(*lowered, copts, o.emit == "llvm-opt");
  if (!text) return fail(text.error());
  fmt::print("{}", *text);
  return 0;
}

}  // namespace

Command add_show_command(CLI::App& app) {
  auto* sub = app.add_subcommand("show", "Show the code of a registered kernel at any stage");
  auto o = std::make_shared<ShowOptions>();
  sub->add_option("KERNEL", o->kernel, "A registered kernel (see kiln list)")->required();
  sub->add_option(
         "--emit", o->emit,
         "What to print: ir (traced), ir-opt (after the target's passes); for cpu: llvm (before "
         "LLVM optimization), llvm-opt, asm; for CUDA: cuda (the CUDA C++), ptx, resources "
         "(registers, shared memory, spills)")
      ->capture_default_str();
  sub->add_option("--target", o->target,
                  "cpu (the host), or an NVIDIA GPU: sm_80, sm_89, sm_90a, sm_100a, sm_120a, ...")
      ->capture_default_str();
  sub->add_flag("--checked", o->checked,
                "Show the checked-mode code (every access bounds-checked)");
  sub->add_flag("--fast-math", o->fast_math, "Show the code with fast math");
  sub->add_option("--cpu", o->cpu,
                  "Another x86 CPU for inspection (e.g. skylake, znver4, x86-64-v3)");
  sub->add_option("--features", o->features, "CPU features for inspection (e.g. +avx2,-avx512f)");
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
