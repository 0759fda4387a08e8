// The IR pipelines, one readable list per target: each pass in order, with an optional dump
// after each (what `kiln show --emit ir-opt` and KILN_DUMP print).
#pragma once

#include <functional>
#include <string>

#include "ir/ir.h"

namespace kiln::passes {

// Called after each pass with its name, the kernel, and whether the pass changed it.
using DumpFn = std::function<void(const std::string& pass, const ir::Kernel& k, bool changed)>;

// The CPU pipeline: the in-order meaning of a pipeline op (lower_pipeline.h), cse, then
// unit-loop fission with planes of `plane_width` units, then cse of
// the lowered kernel. Needs a verified kernel; gives a verified lowered kernel. (Callers reach
// it through the CPU backend, which knows its plane width: backend::find("cpu")->prepare.)
Result<ir::Kernel> lower_for_cpu(ir::Kernel k, uint32_t plane_width, const DumpFn& dump = {});

// The CUDA pipeline: cse. Units stay units (threads); needs and gives a verified kernel.
Result<ir::Kernel> prepare_for_cuda(ir::Kernel k, const DumpFn& dump = {});

}  // namespace kiln::passes
