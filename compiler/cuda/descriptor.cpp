// The CUDA backend's entry in the backend table (compiler/backend.h): targets sm_XY[a] (CUBIN
// and PTX) and compute_XY[a] (PTX only, for a GPU newer than NVRTC), the CUDA pipeline, and the
// stages cuda, ptx and resources.

#include <fmt/format.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "compiler/backend.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/family.h"
#include "compiler/cuda/nvrtc.h"

namespace kiln::cuda {

namespace {

// What a CUDA target compiles to.
struct Arch {
  Target target;
  bool ptx_only = false;  // compute_XY: PTX for the driver to compile
  std::string nvrtc_arch() const { return ptx_only ? target.compute() : target.name(); }
};

const Arch& arch_of(const backend::Target& t) {
  return *static_cast<const Arch*>(t.impl.get());
}

std::string resources_text(const Source& src, const CompiledCuda& c, const std::string& target,
                           uint32_t units) {
  const Resources& r = c.resources;
  const uint32_t launched = src.info.cube_dim[0] * src.info.cube_dim[1] * src.info.cube_dim[2];
  std::string s =
      launched > units
          ? fmt::format("kernel {} for {} ({} units per cube and a producer {} of {}):\n",
                        src.info.symbol, target, units,
                        launched - units > 32 ? "warpgroup" : "plane", launched - units)
          : fmt::format("kernel {} for {} ({} units per cube):\n", src.info.symbol, target, units);
  const auto& cl = src.info.cluster_dim;
  if (cl[0] * cl[1] * cl[2] > 1)
    s += fmt::format("  cluster        {}x{}x{} cubes (the grid's cube counts are multiples)\n",
                     cl[0], cl[1], cl[2]);
  s += fmt::format("  registers      {} per unit\n", r.registers);
  s += fmt::format(
      "  shared memory  {} bytes per cube{}\n", src.info.shared_bytes,
      src.info.dynamic_shared_bytes ? " (dynamic: above the 48 KiB of static shared memory)" : "");
  s += fmt::format("  stack          {} bytes per unit\n", r.stack_bytes);
  s += fmt::format("  spills         {} bytes stored, {} bytes loaded\n", r.spill_store_bytes,
                   r.spill_load_bytes);
  if (!r.wgmma_serialized.empty())
    s += fmt::format(
        "  wgmma          serialized by ptxas (C7515: {}): each multiply waits for "
        "the one before\n",
        r.wgmma_serialized);
  s += fmt::format("  barriers       {}\n", r.barriers);
  s += fmt::format("  constant bank  {} bytes (parameters included)\n", r.constant_bytes);
  s += fmt::format("  NVRTC          {:.1f} ms\n", c.compile_ms);
  return s;
}

class CudaBackend final : public GpuArchBackend {
 public:
  std::string_view name() const override { return "cuda"; }
  const Target& arch(const backend::Target& t) const override { return arch_of(t).target; }
  std::string_view target_syntax() const override {
    return "sm_XY or sm_XYa (NVIDIA GPUs: sm_80, sm_89, sm_90a, sm_100a, sm_120a), compute_XY "
           "(PTX only)";
  }
  bool claims(std::string_view text) const override {
    return text.starts_with("sm_") || text.starts_with("compute_");
  }
  Result<backend::Target> parse_target(std::string_view text) const override {
    Arch a;
    std::string_view s = text;
    if (s.starts_with("compute_")) {
      a.ptx_only = true;
      s.remove_prefix(8);
    }
    auto parsed = cuda::parse_target(s);
    if (!parsed)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("'{}' is not a CUDA target; write sm_XY or sm_XYa (CUBIN), or "
                               "compute_XY or compute_XYa (PTX only), like sm_90a (see kiln "
                               "targets)",
                               text));
    a.target = *parsed;
    return make_target(a.target, a.nvrtc_arch(), a.nvrtc_arch(), std::make_shared<const Arch>(a));
  }
  std::vector<std::string> list_targets() const override {
    auto nv = nvrtc();
    if (!nv)
      return {fmt::format("cuda     not available: {}",
                          nv.error().message.substr(0, nv.error().message.find('\n')))};
    auto targets = supported_targets();
    if (!targets) return {fmt::format("cuda     {}", targets.error().message)};
    std::string list;
    for (const std::string& t : *targets) list += (list.empty() ? "" : " ") + t;
    return {fmt::format("cuda     NVRTC {}.{}: {}", (*nv)->major, (*nv)->minor, list)};
  }
  const std::vector<backend::Stage>& own_stages() const override {
    static const std::vector<backend::Stage> s = {
        {"cuda", ".cu", "the CUDA C++ kiln generates (with the kiln prelude)"},
        {"ptx", ".ptx", "PTX from NVRTC, for the target's virtual arch"},
        {"resources", ".resources.txt", "registers, shared memory, stack and spills from ptxas"},
    };
    return s;
  }
  Result<std::string> emit(const ir::Kernel& prepared, std::string_view stage,
                           const backend::Target& t, const backend::Options& o) const override {
    KILN_ASSIGN(Source src, source(prepared, t, o));
    if (stage == "cuda") return src.text;
    const Arch& a = arch_of(t);
    if (stage == "ptx") {
      KILN_ASSIGN(CompiledCuda c,
                  compile_cuda(src.text, prepared.name + ".cu", a.target.compute(), o.fast_math));
      return c.ptx;
    }
    if (a.ptx_only)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("{} is a virtual arch: ptxas does not run for it, so there is no "
                               "resource report; ask for sm_{}{}",
                               t.name, a.target.sm, a.target.arch_specific ? "a" : ""));
    KILN_ASSIGN(CompiledCuda c,
                compile_cuda(src.text, prepared.name + ".cu", a.target.name(), o.fast_math));
    if (!c.resources.known)
      return Error(ErrorKind::Compile, "NVRTC gave no ptxas report:\n" + c.log);
    return resources_text(src, c, t.name, prepared.units_per_cube());
  }
  // CUDA code is determined by the generated source (which includes everything the IR says).
  Result<std::string> key_text(const ir::Kernel& prepared, const backend::Target& t,
                               const backend::Options& o) const override {
    KILN_ASSIGN(Source src, source(prepared, t, o));
    return std::move(src.text);
  }
  Result<backend::Artifact> compile(const ir::Kernel& prepared, const backend::Target& t,
                                    const backend::Options& o) const override {
    double codegen_ms = 0;
    KILN_ASSIGN(Source src, source(prepared, t, o, &codegen_ms));
    const Arch& a = arch_of(t);
    KILN_ASSIGN(CompiledCuda c,
                compile_cuda(src.text, prepared.name + ".cu", a.nvrtc_arch(), o.fast_math));
    backend::Artifact out;
    out.image = a.ptx_only ? std::vector<char>(c.ptx.begin(), c.ptx.end()) : std::move(c.cubin);
    out.image_kind = a.ptx_only ? "ptx" : "cubin";
    out.info = std::move(src.info);
    nlohmann::json r = {{"registers", c.resources.registers},
                        {"shared_bytes", c.resources.shared_bytes},
                        {"stack_bytes", c.resources.stack_bytes},
                        {"spill_stores", c.resources.spill_store_bytes},
                        {"spill_loads", c.resources.spill_load_bytes},
                        {"known", c.resources.known}};
    if (!c.resources.wgmma_serialized.empty()) r["wgmma_serialized"] = c.resources.wgmma_serialized;
    out.extra_json = nlohmann::json{{"resources", r}}.dump();
    // NVRTC's front end, optimization and ptxas are one call: its time is the ptx stage's.
    out.timings = {{"cuda", codegen_ms}, {"ptx", c.compile_ms}};
    return out;
  }
  std::string versions() const override {
    auto nv = nvrtc();
    return fmt::format("NVRTC {} / cuda-abi 1 / prelude {:016x}",
                       nv ? fmt::format("{}.{}", (*nv)->major, (*nv)->minor) : std::string("none"),
                       XXH3_64bits(prelude().data(), prelude().size()));
  }
};

const CudaBackend g_backend;
const bool g_registered = (backend::register_backend(&g_backend), true);

}  // namespace

// ptxas resources as kept beside a CUDA artifact (Artifact::extra_json).
Resources resources_from_json(const std::string& extra_json) {
  Resources res;
  auto j = nlohmann::json::parse(extra_json, nullptr, false);
  if (!j.is_object() || !j.contains("resources") || !j["resources"].is_object()) return res;
  const auto& r = j["resources"];
  res.known = r.value("known", true);
  res.registers = r.value("registers", 0);
  res.shared_bytes = r.value("shared_bytes", 0);
  res.stack_bytes = r.value("stack_bytes", 0);
  res.spill_store_bytes = r.value("spill_stores", 0);
  res.spill_load_bytes = r.value("spill_loads", 0);
  res.wgmma_serialized = r.value("wgmma_serialized", std::string());
  return res;
}

}  // namespace kiln::cuda
