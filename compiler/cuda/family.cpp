// What the CUDA backend and the emulator's backend share (family.h).
#include "compiler/cuda/family.h"

#include <chrono>

#include "compiler/passes/pipeline.h"

namespace kiln::cuda {

ir::Features features(const Target& arch) {
  ir::Features f;
  f.wgmma = has_wgmma(arch);
  f.tcgen05 = has_tcgen05(arch);
  f.tma = has_tma(arch);
  f.multicast = has_multicast(arch);
  f.cp_async = arch.sm >= 80;
  f.mma_scaled = has_mma_scaled(arch);
  f.setmaxnreg = arch.arch_specific && arch.sm >= 90;
  return f;
}

std::vector<ir::MatrixConfig> GpuArchBackend::matrix_configs(const backend::Target& t) const {
  return cuda::matrix_configs(arch(t));
}

std::string GpuArchBackend::unsupported(const ir::Kernel& k, const ir::Op& op,
                                        const backend::Target& t) const {
  return unsupported_fragment(op, k, arch(t));
}

Result<ir::Kernel> GpuArchBackend::prepare(ir::Kernel traced, const DumpFn& dump) const {
  return passes::prepare_for_cuda(std::move(traced), dump);
}

Result<Source> GpuArchBackend::source(const ir::Kernel& prepared, const backend::Target& t,
                                      const backend::Options& o, double* ms) const {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  CodegenOptions c;
  c.target = arch(t);
  c.plane_width = 32;
  c.checked = o.checked;
  c.fast_math = o.fast_math;
  Result<Source> src = generate(prepared, c);
  if (ms) *ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return src;
}

backend::Target GpuArchBackend::make_target(const Target& a, std::string name, std::string key,
                                            std::shared_ptr<const void> impl) const {
  backend::Target out;
  out.backend = this;
  out.name = std::move(name);
  out.key = std::move(key);
  out.features = features(a);
  out.impl = std::move(impl);
  return out;
}

}  // namespace kiln::cuda
