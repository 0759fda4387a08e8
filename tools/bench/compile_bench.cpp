// Cold compile time of every registered kernel, stage by stage (issue 44's measurement): for
// the host CPU and for NVRTC at sm_90a (or the kernel's own architecture), with the kernel's
// registered defaults, compiled directly (no cache of any kind is consulted):
//
//   CPU:  trace (the DSL to kiln IR, for the CPU), passes (the backend's IR pipeline), llvm
//         (kiln IR to LLVM IR), opt (LLVM's optimizer), asm (code generation to object code),
//         load (into the JIT)
//   CUDA: trace (for the GPU), cuda (passes and CUDA C++ generation), nvrtc (NVRTC and ptxas
//         to a CUBIN)
//
// Each time is the median of three compiles in this process (the first compile of a process
// also pays for starting LLVM and NVRTC, which `kiln run` on an empty cache shows). Then the
// medians and maxima of the totals, how many kernels pass 10 and 50 ms on the CPU, and the
// slowest. Without NVRTC the CUDA columns say why and the CPU's are still measured.
//   build/bin/compile_bench [NAME...]     (default: every registered kernel)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/backend.h"
#include "compiler/cpu/backend.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/dsl/registry.h"
#include "kernels/kernels.h"
#include "kernels/run.h"
#include "tools/bench/bench_util.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

using kiln::bench::must;

std::string today() {
  char buf[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&now));
  return buf;
}

double ms_since(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Stage times (ms) of one compile; a failed compile leaves `error` set.
struct Stages {
  std::vector<double> t;
  std::string error;
  double total() const {
    double s = 0;
    for (double x : t) s += x;
    return s;
  }
};

// The median of three runs of `once`, stage by stage (each stage's own median).
Stages median_of_three(const std::function<Stages()>& once) {
  std::vector<Stages> runs;
  for (int i = 0; i < 3; ++i) {
    runs.push_back(once());
    if (!runs.back().error.empty()) return runs.back();
  }
  Stages m;
  for (size_t s = 0; s < runs[0].t.size(); ++s) {
    std::vector<double> v;
    for (const Stages& r : runs) v.push_back(r.t[s]);
    m.t.push_back(median(v));
  }
  return m;
}

std::string first_line(const std::string& s) {
  return s.substr(0, std::min(s.find('\n'), size_t{90}));
}

Result<ir::Kernel> trace_for(const dsl::KernelDef& def, const backend::Target& target) {
  KILN_ASSIGN(dsl::Selection sel, dsl::select(def, {}));
  sel.request.target = backend::trace_target(target);
  return dsl::trace(def, *sel.inst, sel.request);
}

Stages cpu_compile(const dsl::KernelDef& def, const backend::Target& target,
                   const cpu::CompileOptions& opts) {
  Stages st;
  auto a = Clock::now();
  auto traced = trace_for(def, target);
  st.t.push_back(ms_since(a));
  if (!traced) return {{}, traced.error().message};
  a = Clock::now();
  auto prepared = target.backend->prepare(std::move(*traced));
  st.t.push_back(ms_since(a));
  if (!prepared) return {{}, prepared.error().message};
  cpu::CompileTimings timings;
  auto obj = cpu::compile_object(*prepared, opts, &timings);
  if (!obj) return {{}, obj.error().message};
  auto loaded = cpu::load_object(std::move(*obj), &timings);
  if (!loaded) return {{}, loaded.error().message};
  st.t.insert(st.t.end(),
              {timings.codegen_ms, timings.optimize_ms, timings.machine_ms, timings.link_ms});
  return st;
}

Stages cuda_compile(const dsl::KernelDef& def, const std::string& arch) {
  Stages st;
  auto target = backend::parse_target(arch);
  if (!target) return {{}, target.error().message};
  auto a = Clock::now();
  auto traced = trace_for(def, *target);
  st.t.push_back(ms_since(a));
  if (!traced) return {{}, traced.error().message};
  a = Clock::now();
  auto prepared = target->backend->prepare(std::move(*traced));
  if (!prepared) return {{}, prepared.error().message};
  auto src = cuda::generate(*prepared, {});
  st.t.push_back(ms_since(a));
  if (!src) return {{}, src.error().message};
  a = Clock::now();
  auto bin = cuda::compile_cuda(src->text, def.name + ".cu", arch, false);
  st.t.push_back(ms_since(a));
  if (!bin) return {{}, bin.error().message};
  return st;
}

void summary(const char* what, const std::vector<std::pair<double, std::string>>& totals) {
  if (totals.empty()) return;
  std::vector<double> v;
  for (const auto& [t, n] : totals) v.push_back(t);
  auto worst = *std::max_element(totals.begin(), totals.end());
  const auto over = [&](double limit) {
    return std::count_if(v.begin(), v.end(), [&](double t) { return t > limit; });
  };
  std::printf(
      "%s: %zu kernels, median %.1f ms, max %.1f ms (%s); over 10 ms: %ld, over 50 ms: %ld\n", what,
      v.size(), median(v), worst.first, worst.second.c_str(), static_cast<long>(over(10)),
      static_cast<long>(over(50)));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) names.emplace_back(argv[i]);
  if (names.empty()) names = kernels::builtin_names();
  (void)kernels::builtin_names();
  const backend::Target host = must(backend::parse_target("cpu"));
  cpu::CompileOptions copts;
  copts.target = must(cpu::host_target());
  must(cpu::start_jit());
  auto nv = cuda::nvrtc();
  std::printf("cold compiles, the median of three in one process (%s); CPU: %s; CUDA: %s\n",
              today().c_str(), copts.target.describe().c_str(),
              nv ? fmt::format("NVRTC {}.{}, sm_90a unless the kernel has its own architecture",
                               (*nv)->major, (*nv)->minor)
                       .c_str()
                 : ("absent: " + nv.error().message).c_str());
  std::printf("%-26s | %6s %6s %6s %6s %6s %6s %7s | %6s %6s %7s %7s\n", "kernel", "trace",
              "passes", "llvm", "opt", "asm", "load", "CPU ms", "trace", "cuda", "nvrtc",
              "CUDA ms");
  std::vector<std::pair<double, std::string>> cpu_totals, cuda_totals;
  for (const std::string& name : names) {
    const dsl::KernelDef* def = dsl::Registry::global().find(name);
    if (!def) {
      std::printf("%-26s | not a registered kernel\n", name.c_str());
      continue;
    }
    const Stages c = median_of_three([&] { return cpu_compile(*def, host, copts); });
    std::string line = fmt::format("{:<26} |", name);
    if (c.error.empty()) {
      for (double t : c.t) line += fmt::format(" {:6.1f}", t);
      line += fmt::format(" {:7.1f} |", c.total());
      cpu_totals.emplace_back(c.total(), name);
    } else {
      line += fmt::format(" CPU: {} |", first_line(c.error));
    }
    if (nv) {
      // The recipe's architecture, else sm_90a, else the first newer one the kernel traces for
      // (a kernel of one architecture's instructions refuses the others).
      const kernels::RunRecipe* recipe = kernels::find_run_recipe(name);
      std::vector<std::string> archs = {"sm_90a", "sm_100a", "sm_120a"};
      if (recipe && !recipe->gpu_arch().empty()) archs = {recipe->gpu_arch()};
      std::string arch;
      Stages g;
      for (const std::string& a : archs) {
        arch = a;
        g = median_of_three([&] { return cuda_compile(*def, a); });
        if (g.error.empty()) break;
      }
      if (g.error.empty()) {
        for (double t : g.t) line += fmt::format(" {:6.1f}", t);
        line += fmt::format(" {:7.1f}{}", g.total(), arch == "sm_90a" ? "" : " " + arch);
        cuda_totals.emplace_back(g.total(), name);
      } else {
        line += fmt::format(" CUDA: {}", first_line(g.error));
      }
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  summary("CPU", cpu_totals);
  summary("CUDA", cuda_totals);
  return 0;
}
