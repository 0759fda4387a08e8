// Running a compiled CPU kernel over host memory: its arguments packed (runtime/args.h), per-
// thread shared-memory arenas, and the cubes spread over the thread pool.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/cpu/backend.h"
#include "runtime/args.h"
#include "runtime/thread_pool.h"

namespace kiln {

// What a launch reported.
struct CpuRunReport {
  std::vector<std::string> prints;  // in order: by cube, then unit, then program order
  std::optional<Error> fault;       // the launch's first checked-mode fault or failed assert
};

// Checks the arguments against the kernel (count, kinds, ranks, shapes and strides compatible
// with the line widths, sizes that fit the IR's u32 indices) and packs them (cpu/abi.h).
Result<std::vector<uint64_t>> pack_cpu_args(const cpu::CompiledKernel& k,
                                            const std::array<uint32_t, 3>& cube_count,
                                            std::span<const HostArg> args);

// The same, into a caller's buffer (the launch fast path: no allocation). The buffer must hold
// KernelInfo::layout.slot_count slots.
Status pack_cpu_args_into(const cpu::CompiledKernel& k, const std::array<uint32_t, 3>& cube_count,
                          std::span<const HostArg> args, std::span<uint64_t> slots);
// Runs the kernel over a grid of cubes, spread over `pool` (the global pool when null). A
// failed device-side assert comes back as an error naming its source line.
Result<CpuRunReport> run_cpu(const cpu::CompiledKernel& k,
                             const std::array<uint32_t, 3>& cube_count,
                             std::span<const HostArg> args, ThreadPool* pool = nullptr);

// Runs already-packed arguments (the launch fast path). Faults come back in the report, with
// the prints made before and after them.
CpuRunReport run_cpu_packed(const cpu::CompiledKernel& k, const uint64_t* packed, uint32_t cubes,
                            ThreadPool* pool = nullptr);

}  // namespace kiln
