// What the CUDA backend and the CUDA emulator's backend share. Both take the CUDA C++ kiln
// generates for a GPU architecture, so they answer every question about that architecture the
// same way, here, once: its features, plane width, limits, fragment multiplies, and the CUDA
// pass pipeline. Each says which architecture a target of its own stands for (`arch`).
#pragma once

#include <memory>
#include <string>

#include "compiler/backend.h"
#include "compiler/cuda/codegen.h"

namespace kiln::cuda {

// The features of an architecture (backend::Target::features).
ir::Features features(const Target& arch);

class GpuArchBackend : public backend::Backend {
 public:
  int plane_width(const backend::Target&) const final { return 32; }  // a warp
  backend::Limits limits(const backend::Target& t) const final { return cuda::limits(arch(t)); }
  std::vector<ir::MatrixConfig> matrix_configs(const backend::Target& t) const final;
  std::string unsupported(const ir::Kernel& k, const ir::Op& op,
                          const backend::Target& t) const final;
  Result<ir::Kernel> prepare(ir::Kernel traced, const DumpFn& dump) const final;

 protected:
  // The architecture a target of this backend stands for.
  virtual const Target& arch(const backend::Target& t) const = 0;
  // The CUDA C++ for a prepared kernel on `t`; `ms`, when given, gets the time it took.
  Result<Source> source(const ir::Kernel& prepared, const backend::Target& t,
                        const backend::Options& o, double* ms = nullptr) const;
  // A target of this backend for `arch` (its features filled in), described by `impl`.
  backend::Target make_target(const Target& arch, std::string name, std::string key,
                              std::shared_ptr<const void> impl) const;
};

}  // namespace kiln::cuda
