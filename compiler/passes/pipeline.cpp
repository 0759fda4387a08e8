// The IR pipelines.
#include "compiler/passes/pipeline.h"

#include "compiler/passes/cse.h"
#include "compiler/passes/lower_pipeline.h"
#include "compiler/passes/unit_loops.h"

namespace kiln::passes {

Result<ir::Kernel> lower_for_cpu(ir::Kernel k, uint32_t plane_width, const DumpFn& dump) {
  auto note = [&](const char* name, const ir::Kernel& kk, bool changed) {
    if (dump) dump(name, kk, changed);
  };
  bool changed = lower_pipelines(k);
  if (changed) note("pipeline", k, changed);
  changed = cse(k);
  note("cse", k, changed);
  KILN_ASSIGN(ir::Kernel lowered, lower_unit_loops(k, plane_width));
  note("unit-loops", lowered, true);
  changed = cse(lowered);
  note("cse", lowered, changed);
  return lowered;
}

Result<ir::Kernel> prepare_for_cuda(ir::Kernel k, const DumpFn& dump) {
  const bool changed = cse(k);
  if (dump) dump("cse", k, changed);
  return k;
}

}  // namespace kiln::passes
