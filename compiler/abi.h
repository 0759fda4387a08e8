// The kernel ABI both backends share: how arguments are packed into 64-bit slots, what a
// compiled kernel's KernelInfo says (its layout, cube size, shared memory, and the sites of its
// prints, asserts and checked accesses), and how prints and faults reported by a launch are
// collected and formatted. The CPU calls its entry point with the slots; CUDA passes the same
// slots as the kernel's one parameter. No LLVM or CUDA types.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace kiln::abi {

// Packed arguments: an array of 64-bit slots.
//   slots 0..2   cube_count x, y, z
//   then, per runtime parameter in order:
//     tensor     data pointer, length in lines, extent in lines (1 + the largest line index the
//                view reaches: the bound of checked mode), shape[0..rank), stride[0..rank)
//                (elements)
//     array      data pointer, length in lines
//     scalar     the value's bits, zero-extended (f16/bf16 in the low 16 bits)
inline constexpr uint32_t kHeaderSlots = 3;

// A parameter's slots, relative to its first: the one place both code generators and the
// argument packer take these offsets from.
namespace slot {
inline constexpr uint32_t kData = 0;    // tensors and arrays: the data pointer; scalars: bits
inline constexpr uint32_t kLen = 1;     // tensors and arrays: the length in lines
inline constexpr uint32_t kExtent = 2;  // tensors: 1 + the largest line index the view reaches
constexpr uint32_t shape(uint32_t d) {
  return 3 + d;
}
constexpr uint32_t stride(uint32_t rank, uint32_t d) {
  return 3 + rank + d;
}
// How many slots a parameter of type `t` takes.
uint32_t count(const ir::Type& t);
}  // namespace slot

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

// What one launch reports: the CPU kernels call the kiln_rt_* functions (cpu/abi.h) with it,
// the CUDA runtime fills it from the device's report buffer. Thread-safe.
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

// A TMA view the kernel copies through (tma.load, tma.store): which tensor parameter, with which
// box (ir::tma_attr). Each launch checks the tensor against TMA's rules for every backend; on the
// GPU it encodes a tensor map for each site into the arguments (cuda::tensor_map_offset).
struct TensorMapSite {
  uint32_t param = 0;  // index into ArgLayout::params
  uint64_t box = 0;
  std::string where;  // the DSL file:line of the first tma.load through it
  friend bool operator==(const TensorMapSite& a, const TensorMapSite& b) {
    return a.param == b.param && a.box == b.box;
  }
};
// The sites of a kernel's tma.load, tma.store and tma.prefetch ops, one per distinct (tensor
// parameter, box), in order of first use.
std::vector<TensorMapSite> tensor_map_sites(const ir::Kernel& k);

// Facts about a compiled kernel the runtime needs.
struct KernelInfo {
  std::string name;
  std::string symbol;
  std::array<uint32_t, 3> cube_dim{1, 1, 1};
  std::array<uint32_t, 3> cluster_dim{1, 1, 1};  // the cubes of a cluster; the grid's multiple
  uint32_t shared_bytes = 0;  // per cube: CPU arena (shared memory, context arrays); CUDA shared
  uint32_t dynamic_shared_bytes = 0;  // CUDA: of shared_bytes, what the launch must ask for
  ArgLayout layout;
  std::vector<PrintSite> prints;
  std::vector<AssertSite> asserts;
  std::vector<AccessSite> accesses;  // checked mode
  std::vector<TensorMapSite> tensor_maps;
  bool checked = false;
};

// KernelInfo as JSON and back (the disk cache stores it beside the object code).
std::string info_to_json(const KernelInfo& info);
Result<KernelInfo> info_from_json(const std::string& json);

}  // namespace kiln::abi
