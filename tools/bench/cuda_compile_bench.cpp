// CUDA compile time (no GPU needed), against peers measured in the same run:
//   per example kernel: code generation + NVRTC to a CUBIN for sm_90a, against the CPU
//   backend's compile of the same traced kernel (passes + LLVM to object code)
//   the prelude: NVRTC on an empty kernel that includes kiln_prelude.cuh, against the same
//   empty kernel without it
// Each time is the median of three. Without NVRTC it says why and exits 77.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "compiler/backend.h"
#include "compiler/cpu/backend.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/dsl/registry.h"
#include "compiler/passes/pipeline.h"
#include "kernels/kernels.h"
#include "kernels/run.h"
#include "tools/bench/bench_util.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

using kiln::bench::die;
using kiln::bench::must;

template <class F>
double median_ms(F&& f) {
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) {
    const auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[1];
}

}  // namespace

int main() {
  (void)kernels::builtin_names();
  auto nv = cuda::nvrtc();
  if (!nv) {
    std::printf("cuda_compile_bench skipped: %s\n", nv.error().message.c_str());
    return 77;
  }
  cpu::CompileOptions copts;
  copts.target = must(cpu::host_target());
  std::printf("NVRTC %d.%d, sm_90a (a per-architecture kernel: its own); CPU %s\n", (*nv)->major,
              (*nv)->minor, copts.target.describe().c_str());
  std::printf("  %-14s %12s %12s %7s %10s\n", "kernel", "CUDA ms", "CPU ms", "ratio", "registers");
  for (const std::string& name : kernels::builtin_names()) {
    const kernels::RunRecipe* recipe = kernels::find_run_recipe(name);
    if (!recipe) continue;
    const std::string arch = recipe->gpu_arch().empty() ? "sm_90a" : recipe->gpu_arch();
    const dsl::KernelDef* def = dsl::Registry::global().find(name);
    auto sel = must(dsl::select(*def, {}));
    const ir::Kernel traced = must(dsl::trace(*def, *sel.inst, sel.request));
    int registers = 0;
    const double t_cuda = median_ms([&] {
      auto src = must(cuda::generate(must(backend::find("cuda")->prepare(traced)), {}));
      registers = must(cuda::compile_cuda(src.text, name + ".cu", arch, false)).resources.registers;
    });
    const double t_cpu = median_ms(
        [&] { must(cpu::compile_object(must(backend::find("cpu")->prepare(traced)), copts)); });
    std::printf("  %-14s %12.1f %12.1f %6.1fx %10d\n", name.c_str(), t_cuda, t_cpu, t_cuda / t_cpu,
                registers);
  }
  const std::string empty = "extern \"C\" __global__ void k() {}\n";
  const double with = median_ms([&] {
    must(cuda::compile_cuda(std::string("#include \"") + cuda::kPreludeName + "\"\n" + empty,
                            "p.cu", "sm_90a", false));
  });
  const double without =
      median_ms([&] { must(cuda::compile_cuda(empty, "e.cu", "sm_90a", false)); });
  std::printf(
      "  an empty kernel: %.1f ms with the prelude, %.1f ms without (the prelude costs %.1f ms, "
      "%.1fx)\n",
      with, without, with - without, with / without);
  return 0;
}
