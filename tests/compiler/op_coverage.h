// Which op kinds a test binary's kernels exercise: the op-kind kernels of every type, the
// traced (and, for the CPU, lowered) IR of every registered kernel with its defaults, and any
// extra ops a binary measures on its own. The coverage tests compare that with ir/ops.def, so an
// op added without tests fails them.
#pragma once

#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "compiler/backend.h"
#include "compiler/dsl/registry.h"
#include "ir/ops.h"
#include "tests/compiler/op_kernels.h"

namespace kiln::test {

inline void collect_ops(const ir::Kernel& k, std::set<ir::OpKind>& out) {
  ir::walk(k.body, [&](const ir::Op& op) { out.insert(op.kind); });
}

// The ops of every registered kernel (every instantiation, with its registered defaults), as
// traced and as `backend` prepares them.
inline std::set<ir::OpKind> registered_kernel_ops(const backend::Backend& b) {
  std::set<ir::OpKind> ops;
  for (const dsl::KernelDef* def : dsl::Registry::global().all()) {
    if (!def->problem.empty()) continue;
    for (const dsl::Instantiation& inst : def->instantiations) {
      dsl::SpecOptions o;
      for (const dsl::ParamInfo& p : inst.params)
        if (p.runtime()) o.dtype[p.name] = ir::elem_name(p.dtype);
      auto sel = dsl::select(*def, o);
      if (!sel) continue;
      auto k = dsl::trace(*def, *sel->inst, sel->request);
      if (!k) continue;  // kernels that must fail to trace (error tests)
      collect_ops(*k, ops);
      if (auto prepared = b.prepare(*k)) collect_ops(*prepared, ops);
    }
  }
  return ops;
}

// The op kinds of ir/ops.def missing from `covered`, by name.
inline std::string missing_ops(const std::set<ir::OpKind>& covered,
                               const std::set<ir::OpKind>& exempt = {}) {
  std::string missing;
  for (int i = 0; i < ir::kNumOpKinds; ++i) {
    const auto kind = static_cast<ir::OpKind>(i);
    if (!covered.count(kind) && !exempt.count(kind))
      missing += (missing.empty() ? "" : ", ") + std::string(ir::op_name(kind));
  }
  return missing;
}

}  // namespace kiln::test
