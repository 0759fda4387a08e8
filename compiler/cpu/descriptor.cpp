// The CPU backend's entry in the backend table (compiler/backend.h): targets "cpu" (the host)
// and "cpu:NAME[:FEATURES]" (another x86-64 CPU, for inspection), the unit-loop pipeline, and
// the stages llvm, llvm-opt and asm.
#include <algorithm>

#include <fmt/format.h>

#include "compiler/backend.h"
#include "compiler/cpu/backend.h"
#include "compiler/cpu/llvm_info.h"
#include "compiler/passes/pipeline.h"
#include "ir/verifier.h"

namespace kiln::cpu {

namespace {

const Target& target_of(const backend::Target& t) {
  return *static_cast<const Target*>(t.impl.get());
}

CompileOptions options_of(const backend::Target& t, const backend::Options& o) {
  CompileOptions c;
  c.target = target_of(t);
  c.checked = o.checked;
  c.fast_math = o.fast_math;
  return c;
}

class CpuBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string_view target_syntax() const override {
    return "cpu (the host), cpu:NAME[:FEATURES] (another x86-64 CPU, for inspection)";
  }
  bool claims(std::string_view text) const override {
    return text == "cpu" || text.starts_with("cpu:");
  }
  Result<backend::Target> parse_target(std::string_view text) const override {
    Result<Target> t = Error();
    if (text == "cpu") {
      t = host_target();
    } else {
      std::string_view rest = text.substr(4);
      const size_t colon = rest.find(':');
      t = make_target(
          std::string(rest.substr(0, colon)),
          colon == std::string_view::npos ? std::string() : std::string(rest.substr(colon + 1)));
    }
    if (!t) return t.error();
    backend::Target out;
    out.backend = this;
    out.name = std::string(text);
    out.key = fmt::format("cpu:{}:{}{}", t->cpu, t->features, t->vectorize ? "" : ":novec");
    out.impl = std::make_shared<const Target>(std::move(*t));
    return out;
  }
  std::vector<std::string> list_targets() const override {
    auto host = host_target();
    return {fmt::format("cpu      {}; other x86-64 CPUs for inspection with cpu:NAME[:FEATURES]",
                        host ? host->describe() : host.error().message)};
  }
  // On the CPU a plane is a group of 32 units of the cube's unit loops, as wide as a CUDA warp,
  // so that kernels written for warps of 32 behave the same.
  int plane_width(const backend::Target&) const override { return 32; }
  backend::Limits limits(const backend::Target& t) const override {
    backend::Limits l;
    l.max_units_per_cube = ir::kMaxUnitsPerCube;
    l.max_shared_bytes = uint64_t{1} << 30;  // a per-worker arena in host memory
    l.max_shared_optin = l.max_shared_bytes;
    l.max_line = std::max(16, target_of(t).max_lanes(1));
    l.index_bits = 32;
    return l;
  }
  const std::vector<backend::Stage>& own_stages() const override {
    static const std::vector<backend::Stage> s = {
        {"llvm", ".ll", "LLVM IR, before LLVM's optimization"},
        {"llvm-opt", ".opt.ll", "LLVM IR after LLVM's O3 pipeline"},
        {"asm", ".s", "the target's assembly"},
    };
    return s;
  }
  Result<ir::Kernel> prepare(ir::Kernel traced, const DumpFn& dump) const override {
    return passes::lower_for_cpu(std::move(traced), plane_width({}), dump);
  }
  Result<std::string> emit(const ir::Kernel& prepared, std::string_view stage,
                           const backend::Target& t, const backend::Options& o) const override {
    const CompileOptions c = options_of(t, o);
    if (stage == "asm") return emit_asm(prepared, c);
    return emit_llvm(prepared, c, stage == "llvm-opt");
  }
  Result<backend::Artifact> compile(const ir::Kernel& prepared, const backend::Target& t,
                                    const backend::Options& o) const override {
    CompileTimings timings;
    KILN_ASSIGN(ObjectCode obj, compile_object(prepared, options_of(t, o), &timings));
    backend::Artifact a;
    a.image = std::move(obj.bytes);
    a.image_kind = "object";
    a.info = std::move(obj.info);
    a.extra_json = "{}";
    a.timings = {{"llvm", timings.codegen_ms},
                 {"llvm-opt", timings.optimize_ms},
                 {"asm", timings.machine_ms}};
    return a;
  }
  std::string versions() const override {
    return fmt::format("LLVM {} / cpu-abi 2 / cpu-codegen 3", llvm_version());
  }
};

const CpuBackend g_backend;
const bool g_registered = (backend::register_backend(&g_backend), true);

}  // namespace

}  // namespace kiln::cpu
