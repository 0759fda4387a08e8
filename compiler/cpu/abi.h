// The CPU kernel ABI: how a compiled kernel is called and the functions it calls to report
// prints, failed asserts and checked-mode faults (into an abi::LaunchState). The argument
// slots and KernelInfo are shared with CUDA (compiler/abi.h). No LLVM types.
#pragma once

#include <cstdint>

#include "compiler/abi.h"

namespace kiln::cpu {

// One entry point per kernel. It runs cubes [cube_begin, cube_end) (linear cube indices) with
// `shared` pointing at a per-worker arena of KernelInfo::shared_bytes (64-byte aligned) and
// `state` at the launch's abi::LaunchState.
using EntryFn = void (*)(const uint64_t* args, uint32_t cube_begin, uint32_t cube_end,
                         uint8_t* shared, void* state);

// The shared ABI, as the CPU backend's code names it.
using abi::AccessSite;
using abi::arg_layout;
using abi::ArgLayout;
using abi::AssertSite;
using abi::format_prints;
using abi::kHeaderSlots;
using abi::LaunchState;
using abi::ParamSlots;
using abi::PrintSite;

}  // namespace kiln::cpu

// Called by compiled kernels (resolved by the JIT).
extern "C" {
void kiln_rt_print(void* state, uint32_t site, uint32_t cube, uint32_t unit, const uint64_t* bits,
                   uint32_t count);
void kiln_rt_assert_failed(void* state, uint32_t site, uint32_t cube, uint32_t unit);
void kiln_rt_fault(void* state, uint32_t site, uint32_t index, uint32_t bound, uint32_t cube,
                   uint32_t unit);
// wgmma.mma for one plane: acc (16 x n, row-major f32 or i32) += rows 16 (plane % 4) .. + 15
// of A times B, read through their descriptors from the cube's shared arena. Returns 0, or 1 +
// the first byte offset past the arena that a descriptor reaches (read as zero).
uint32_t kiln_rt_wgmma(void* acc, uint32_t plane, const void* shared, uint32_t shared_bytes,
                       uint64_t adesc, uint64_t bdesc, uint32_t elem, uint32_t n);
}
