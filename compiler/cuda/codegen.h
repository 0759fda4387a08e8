// The CUDA backend's code generator: a verified kiln kernel (not lowered: units stay
// threads) -> readable CUDA C++, one statement per IR op, with `#line` directives pointing at
// the DSL source. The source includes "kiln_prelude.cuh" (compiler/cuda/prelude.cuh), which
// gives every op its exact IR semantics; NVRTC compiles both (compiler/cuda/nvrtc.h).
//
// Launch ABI: the kernel takes one parameter, a struct of 64-bit slots laid out as on the CPU
// (compiler/abi.h), followed by two more: the stream's report buffer (prints, asserts,
// checked-mode faults) and the launch's sequence number in that buffer. Shared memory is
// static up to 48 KiB per cube and dynamic above (KernelInfo::dynamic_shared_bytes).
#pragma once

#include <string>
#include <string_view>

#include "compiler/abi.h"
#include "compiler/backend.h"
#include "ir/ir.h"

namespace kiln::cuda {

// An NVIDIA GPU architecture: sm_XY, or sm_XYa for the arch-specific features (wgmma, tcgen05).
struct Target {
  int sm = 80;                  // 80, 86, 89, 90, 100, 120, ...
  bool arch_specific = false;   // the "a" suffix
  std::string name() const;     // "sm_90a"
  std::string compute() const;  // "compute_90a": the virtual arch of its PTX
  friend bool operator==(const Target&, const Target&) = default;
};
// Parses "sm_90a" (or "90a"); what NVRTC supports is checked when compiling.
Result<Target> parse_target(std::string_view text);

struct CodegenOptions {
  Target target;              // what the code is for (tensor-core paths choose by it)
  uint32_t plane_width = 32;  // plane_dim(): the backend's plane width (a warp)
  bool checked = false;       // bounds-check every access (docs/runtime.md)
  bool fast_math = false;     // NVRTC --use_fast_math
};

struct Source {
  std::string text;      // the kernel's CUDA C++ (it includes kiln_prelude.cuh)
  abi::KernelInfo info;  // symbol, layout, shared memory, report sites
};

// The slots after the parameters' (abi::ArgLayout::slot_count): the report buffer pointer and
// the launch's sequence number.
inline constexpr uint32_t kReportSlots = 2;

// A kernel that copies through TMA takes its tensor maps after the slots, in the same
// parameter: from byte tensor_map_offset(info) on (128-byte aligned, as the driver's CUtensorMap),
// one map of kTensorMapBytes per KernelInfo::tensor_maps site, at most kMaxTensorMaps. The
// runtime fills them (runtime/tma.h): with the driver's encoding on a GPU, with the emulator's
// description (prelude.cuh, tma_desc) on cuda-emu.
inline constexpr uint32_t kTensorMapBytes = 128, kMaxTensorMaps = 8;
inline uint32_t tensor_map_offset(const abi::KernelInfo& info) {
  return (8 * (info.layout.slot_count + kReportSlots) + 127) / 128 * 128;
}

Result<Source> generate(const ir::Kernel& k, const CodegenOptions& options);

// What generated CUDA C++ may use on every target: 1024 units per cube, 48 KiB of static
// shared memory (more is dynamic, up to the device's opt-in limit), lines of 16, 32-bit
// indices. The CUDA backend and the emulator, which runs the same code, both answer with it.
backend::Limits limits(const Target& arch);
// A cube's opt-in shared-memory limit on `arch`: 227 KiB on sm_90 and sm_100, 163 KiB on sm_80
// and sm_87, 99 KiB on the others (sm_86, sm_89, sm_120).
uint32_t max_shared_optin(const Target& arch);

// The matrix multiplies generated code runs on an arch: every one the IR accepts from sm_80 on
// (mma.sync for f16, bf16, tf32, s8 and u8), none before. The CUDA backend and the emulator
// answer with it, and reject fragments of any other multiply.
std::vector<ir::MatrixConfig> matrix_configs(const Target& arch);
std::string unsupported_fragment(const ir::Op& op, const ir::Kernel& k, const Target& arch);
// Whether the arch has warpgroup multiplies (wgmma): sm_90a only.
bool has_wgmma(const Target& arch);
// Whether the arch has tensor memory and tcgen05: sm_100a only (sm_120a has neither).
bool has_tcgen05(const Target& arch);
// Whether the architecture has the Tensor Memory Accelerator: sm_90 and later.
bool has_tma(const Target& arch);
// Whether the arch multicasts TMA boxes to a cluster: sm_90a and sm_100a (ptxas warns that on
// sm_120a it is expected to have substantially reduced performance).
bool has_multicast(const Target& arch);
// Whether the arch runs block-scaled mma.sync (kind::mxf8f6f4): sm_120a only.
bool has_mma_scaled(const Target& arch);

// The prelude's text and the name the generated source includes it by.
const std::string& prelude();
inline constexpr const char* kPreludeName = "kiln_prelude.cuh";

}  // namespace kiln::cuda
