// The CPU kernel ABI: how a compiled kernel is called, how its arguments are packed, and how
// it reports prints, failed asserts and checked-mode faults back to the host. Shared by the
// code generator and the runtime; no LLVM types.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace kiln::cpu {

// One entry point per kernel. It runs cubes [cube_begin, cube_end) (linear cube indices) with
// `shared` pointing at a per-worker arena of KernelInfo::shared_bytes (64-byte aligned) and
// `state` at the launch's LaunchState.
using EntryFn = void (*)(const uint64_t* args, uint32_t cube_begin, uint32_t cube_end,
                         uint8_t* shared, void* state);

// Packed arguments: an array of 64-bit slots.
//   slots 0..2   cube_count x, y, z
//   then, per runtime parameter in order:
//     tensor     data pointer, length in lines, extent in lines (1 + the largest line index the
//                view reaches: the bound of checked mode), shape[0..rank), stride[0..rank)
//                (elements)
//     array      data pointer, length in lines
//     scalar     the value's bits, zero-extended (f16/bf16 in the low 16 bits)
inline constexpr uint32_t kHeaderSlots = 3;

struct ParamSlots {
  std::string name;
  uint32_t first = 0;  // the parameter's first slot
  ir::Type type;
};

struct ArgLayout {
  std::vector<ParamSlots> params;  // in parameter order
  uint32_t slot_count = kHeaderSlots;
};

ArgLayout arg_layout(const ir::Kernel& k);

// Where a print or assert of a kernel came from, and what it prints.
struct PrintSite {
  std::string format;
  std::vector<ir::Type> operands;
  std::string where;  // DSL file:line, if known
};
struct AssertSite {
  std::string message;
  std::string where;
};
// A memory access checked in checked mode.
struct AccessSite {
  std::string access;  // "load", "store", "atomic.add", ...
  std::string memory;  // "tensor 'y'", "shared array %3", ...
  std::string where;
};

// What one launch reports. Kernels call the kiln_rt_* functions below with it; the runtime
// reads it after the launch. Thread-safe: cubes run on several workers.
struct LaunchState {
  struct Print {
    uint32_t cube, unit, site;
    std::vector<uint64_t> bits;  // each operand's lanes, as 64-bit patterns
  };
  std::mutex mu;
  std::vector<Print> prints;
  bool assert_failed = false;
  uint32_t assert_site = 0, assert_cube = 0, assert_unit = 0;
  // Checked mode: the out-of-bounds access of the lowest (cube, unit); the access was skipped.
  bool fault = false;
  uint32_t fault_site = 0, fault_cube = 0, fault_unit = 0;
  uint64_t fault_index = 0, fault_bound = 0;
};

// Formats the prints of a launch in order (by cube, then unit, then program order) with the
// kernel's print sites, one line each.
std::vector<std::string> format_prints(LaunchState& state, const std::vector<PrintSite>& sites);

}  // namespace kiln::cpu

// Called by compiled kernels (resolved by the JIT).
extern "C" {
void kiln_rt_print(void* state, uint32_t site, uint32_t cube, uint32_t unit, const uint64_t* bits,
                   uint32_t count);
void kiln_rt_assert_failed(void* state, uint32_t site, uint32_t cube, uint32_t unit);
void kiln_rt_fault(void* state, uint32_t site, uint32_t index, uint32_t bound, uint32_t cube,
                   uint32_t unit);
}
