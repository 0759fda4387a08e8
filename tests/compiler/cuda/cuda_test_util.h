// Helpers for CUDA compile tests: generate and compile a kernel for a target, and assemble its
// PTX with ptxas when the toolkit has it. No GPU needed.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/backend.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/dsl/registry.h"
#include "compiler/passes/pipeline.h"

namespace kiln::test {

// The targets every kernel must compile for.
inline const char* const kCudaTargets[] = {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120a"};

// ptxas from $CUDA_PATH or /usr/local/cuda, or empty.
inline std::string ptxas_path() {
  for (std::string dir : {std::string(std::getenv("CUDA_PATH") ? std::getenv("CUDA_PATH") : ""),
                          std::string("/usr/local/cuda")}) {
    if (dir.empty()) continue;
    const std::string p = dir + "/bin/ptxas";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

// Runs ptxas on `ptx` for `arch`; returns its output, empty on success. Without ptxas the test
// is reported skipped (ctest matches the line printed here), never passed.
inline std::string ptxas_problem(const std::string& ptx, const std::string& arch) {
  static const std::string ptxas = ptxas_path();
  if (ptxas.empty()) {
    static const bool said = [] {
      std::printf(
          "skipped: ptxas not found in $CUDA_PATH/bin or /usr/local/cuda/bin; the PTX was "
          "compiled but not assembled\n");
      std::fflush(stdout);
      return true;
    }();
    (void)said;
    return {};
  }
  const auto dir = std::filesystem::temp_directory_path();
  const std::string base = (dir / ("kiln-ptx-" + std::to_string(::getpid()))).string();
  {
    std::ofstream f(base + ".ptx");
    f << ptx;
  }
  const std::string cmd = ptxas + " -arch=" + arch + " " + base + ".ptx -o " + base + ".cubin 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    if (::pclose(p) != 0 && out.empty()) out = "ptxas failed";
  } else {
    out = "cannot run ptxas";
  }
  std::remove((base + ".ptx").c_str());
  std::remove((base + ".cubin").c_str());
  return out;
}

struct CudaBuild {
  cuda::Source source;
  cuda::CompiledCuda compiled;
};

// Prepares, generates and compiles `k` for `arch`; fails the test with NVRTC's log on error.
// With `assemble`, ptxas must accept the PTX too.
inline CudaBuild cuda_build(const ir::Kernel& k, const std::string& arch, bool checked = false,
                            bool assemble = true) {
  auto prepared = backend::find("cuda")->prepare(k);
  REQUIRE(prepared.ok());
  auto target = cuda::parse_target(arch);
  REQUIRE(target.ok());
  cuda::CodegenOptions o;
  o.target = *target;
  o.checked = checked;
  auto src = cuda::generate(*prepared, o);
  INFO((src.ok() ? std::string() : src.error().message));
  REQUIRE(src.ok());
  auto compiled = cuda::compile_cuda(src->text, k.name + ".cu", arch, false);
  INFO((compiled.ok() ? std::string() : compiled.error().message));
  REQUIRE(compiled.ok());
  CHECK(!compiled->ptx.empty());
  CHECK(!compiled->cubin.empty());
  CHECK(compiled->resources.known);
  if (assemble) {
    std::string problem = ptxas_problem(compiled->ptx, arch);
    // Checked mode's bounds tests sit inside pipelined wgmma loops, where ptxas may serialize
    // the multiplies (note C7515): slower, still right, and checked mode is for finding bugs.
    if (checked) {
      std::string kept, line;
      std::istringstream lines(problem);
      while (std::getline(lines, line))
        if (line.find("(C7515) Potential Performance Loss") == std::string::npos &&
            line.find_first_not_of(" \t") != std::string::npos)
          kept += line + "\n";
      problem = kept;
    }
    INFO(problem);
    CHECK(problem.empty());
  }
  return CudaBuild{std::move(*src), std::move(*compiled)};
}

// Traces a registered kernel with options.
// `checked`: traced as a checked launch is (each index of t(i, j) checked against its view).
inline ir::Kernel traced(const dsl::KernelDef& def, const dsl::SpecOptions& opts = {},
                         bool checked = false) {
  auto sel = dsl::select(def, opts);
  INFO((sel.ok() ? std::string() : sel.error().message));
  REQUIRE(sel.ok());
  dsl::TraceRequest request = sel->request;
  request.checked = checked;
  auto k = dsl::trace(def, *sel->inst, request);
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  return std::move(*k);
}

// Whether a trace error is a per-architecture kernel refusing `arch`: wgmma off sm_90a, tensor
// memory and tcgen05 off sm_100a, block-scaled mma off sm_120a.
inline bool refused_arch(const std::string& message, const std::string& arch) {
  const bool mx = message.find("(kind::mxf8f6f4) is an sm_120a instruction") != std::string::npos;
  const bool tma = message.find("are sm_90 features") != std::string::npos ||
                   message.find("are sm_90 instructions") != std::string::npos;
  const bool multicast =
      message.find("TMA multicast is for sm_90a and sm_100a") != std::string::npos;
  return (tma && (arch == "sm_80" || arch == "sm_89")) ||
         (multicast && arch != "sm_90a" && arch != "sm_100a") ||
         (!mx && message.find("is an sm_90a instruction") != std::string::npos &&
          arch != "sm_90a") ||
         (message.find("are sm_100a instructions") != std::string::npos && arch != "sm_100a") ||
         (mx && arch != "sm_120a");
}

// Traces a registered kernel for a CUDA target (which it may ask about: has_mma, has_wgmma);
// the trace's error when the kernel refuses the target.
inline Result<ir::Kernel> traced_for(const dsl::KernelDef& def, const std::string& arch,
                                     const dsl::SpecOptions& opts = {}) {
  auto sel = dsl::select(def, opts);
  INFO((sel.ok() ? std::string() : sel.error().message));
  REQUIRE(sel.ok());
  auto target = backend::find("cuda")->parse_target(arch);
  REQUIRE(target.ok());
  dsl::TraceRequest request = sel->request;
  request.target = backend::trace_target(*target);
  return dsl::trace(def, *sel->inst, request);
}

}  // namespace kiln::test
