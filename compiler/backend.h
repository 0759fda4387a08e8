// Backends: the one interface every code generator implements, and the table of them.
//
// A backend turns a traced, verified kernel into something a device runs, for one of its
// targets. It declares (ggml's ggml_backend_i is the model: narrow, documented, optional parts
// marked): the targets it accepts; its plane width and limits; which ops and types it supports;
// its ordered stages, each with a name and an emit function (what `kiln show --emit`, KILN_DUMP,
// the compile report and `kiln run` read: nobody else keeps a list of stages); and compile().
// The runtime, the specialization cache and the CLI speak only to this interface; adding a
// backend is a folder under compiler/, one device file under runtime/, and one registration
// (docs/architecture.md, "How to add a backend").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/abi.h"
#include "ir/ir.h"

namespace kiln::dsl {
struct TraceTarget;
}

namespace kiln::backend {

class Backend;

// A target of one backend, resolved: what code is compiled for.
struct Target {
  const Backend* backend = nullptr;
  std::string name;  // canonical text: "cpu", "cpu:skylake", "sm_90a"
  // Everything about the target that changes the code (the CPU's features): part of cache keys.
  std::string key;
  // What it runs beyond the ops every backend takes (ir/ops.h); parse_target fills it.
  ir::Features features;
  std::shared_ptr<const void> impl;  // the backend's own description of it
};

struct Options {
  bool checked = false;    // bounds-check every memory access (docs/runtime.md)
  bool fast_math = false;  // allow reassociation and approximate math
};

// Limits of a target that a kernel or a launch must respect.
struct Limits {
  uint32_t max_units_per_cube = 1024;
  uint64_t max_shared_bytes = 48 * 1024;  // per cube, the default a launch gets
  // Per cube, the most a kernel may use (a GPU's opt-in limit, which kiln's launches ask for):
  // what the library sizes its tiles by.
  uint64_t max_shared_optin = 48 * 1024;
  int max_line = 16;                      // widest line width, in elements
  int index_bits = 32;                    // width of line indices (docs/ir.md, "Index width")
};

// One stage of a backend's output, in order: "ir" (traced) and "ir-opt" (after the target's
// passes) come first for every backend; then the backend's own.
struct Stage {
  std::string name;         // "llvm", "ptx", ...: `kiln show --emit NAME`, KILN_DUMP=NAME
  std::string extension;    // of its KILN_DUMP file: ".ll", ".ptx"
  std::string description;  // one line, for --help
};

// Time spent in one stage of a compile (named as the backend's stages are).
struct StageTime {
  std::string stage;
  double ms = 0;
};

// What compile() gives: the image a device loads, and what the runtime needs to launch it.
struct Artifact {
  std::vector<char> image;  // relocatable object code, CUBIN, PTX...
  std::string image_kind;   // "object", "cubin", "ptx"
  abi::KernelInfo info;
  std::string extra_json;  // backend facts kept with the image (CUDA: ptxas resources); "{}"
  std::vector<StageTime> timings;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cuda": the family, in messages and disk-cache folders.
  virtual std::string_view name() const = 0;
  // How its targets are written, for messages: "cpu, cpu:NAME[:FEATURES]".
  virtual std::string_view target_syntax() const = 0;
  // Whether `text` names one of its targets (by form; validity comes with parse_target).
  virtual bool claims(std::string_view text) const = 0;
  virtual Result<Target> parse_target(std::string_view text) const = 0;
  // The lines `kiln targets` prints for this backend.
  virtual std::vector<std::string> list_targets() const = 0;

  // Units per plane (warp) on the target.
  virtual int plane_width(const Target& t) const = 0;
  virtual Limits limits(const Target& t) const = 0;
  // Empty when the target supports `op` with its operand and result types; otherwise why not.
  // Optional: the default supports every op.
  virtual std::string unsupported(const ir::Kernel& k, const ir::Op& op, const Target& t) const;
  // The matrix multiplies (fragment shapes and types) the target runs; every one the IR
  // accepts unless the backend says otherwise. Kernels ask at trace time (dsl::has_mma).
  virtual std::vector<ir::MatrixConfig> matrix_configs(const Target& t) const;

  // Stages after "ir" and "ir-opt", in order.
  virtual const std::vector<Stage>& own_stages() const = 0;
  // The target's IR passes ("ir-opt"); `dump` sees the kernel after each pass.
  using DumpFn = std::function<void(const std::string& pass, const ir::Kernel&, bool changed)>;
  virtual Result<ir::Kernel> prepare(ir::Kernel traced, const DumpFn& dump = {}) const = 0;
  // The text of one of own_stages() for a prepared kernel.
  virtual Result<std::string> emit(const ir::Kernel& prepared, std::string_view stage,
                                   const Target& t, const Options& o) const = 0;
  // The text of the prepared kernel that determines its code, for the cache key: the printed
  // IR, or the generated source. Defaults to the printed IR.
  virtual Result<std::string> key_text(const ir::Kernel& prepared, const Target& t,
                                       const Options& o) const;
  virtual Result<Artifact> compile(const ir::Kernel& prepared, const Target& t,
                                   const Options& o) const = 0;
  // The compilers behind it and their versions: part of every cache key.
  virtual std::string versions() const = 0;
};

// All the stages of a backend, "ir" and "ir-opt" first.
std::vector<Stage> stages(const Backend& b);
// The text of any stage, from the traced kernel (runs prepare for the later ones).
Result<std::string> emit_stage(const Backend& b, const ir::Kernel& traced, std::string_view stage,
                               const Target& t, const Options& o);
// Checks a prepared kernel against the target: its cube size and line widths against the
// target's limits, and every op (Backend::unsupported; the error names the op, the target and
// the DSL line).
Status check_supported(const Backend& b, const ir::Kernel& k, const Target& t);

// ---- the table ----------------------------------------------------------------------------

// Adds a backend (kiln's own register when the compiler library loads; a test or a plugin may
// add more). The backend must live as long as the process.
void register_backend(const Backend* b);

// What a trace for `t` tells the kernel about its target (dsl::target_name(), dsl::has_mma).
std::shared_ptr<const dsl::TraceTarget> trace_target(const Target& t);
std::vector<const Backend*> all();
const Backend* find(std::string_view name);
// The backend whose target `text` is, parsed; the error lists the targets every backend takes.
// An identity of the compiler's own code: a hash of the kiln_compiler library file, so that
// a rebuilt or upgraded kiln never loads code an older build cached (part of every cache key).
const std::string& code_id();

Result<Target> parse_target(std::string_view text);

}  // namespace kiln::backend
