// The cuda-emu backend: the CUDA backend's CUDA C++ for an NVIDIA arch, compiled for the host
// with the system C++ compiler together with kiln_emu.h (host.h), for the emulation device
// (runtime/emu/device.cpp). Targets: cuda-emu (sm_90a) and cuda-emu:sm_XY[a].
#pragma once

#include <string>

#include "compiler/backend.h"
#include "compiler/cuda/codegen.h"

namespace kiln::cuda::emu {

// The arch a cuda-emu target emulates.
struct Arch {
  Target target;                  // what the CUDA C++ is generated for
  uint32_t max_shared_bytes = 0;  // per cube, the arch's opt-in limit
};
const Arch& arch_of(const backend::Target& t);

// The host C++ compiler kernels are built with: KILN_EMU_CXX, else the first of c++, g++ and
// clang++ on PATH; or why there is none.
struct HostCompiler {
  std::string command;
  std::string version;  // its first line of --version
};
Result<HostCompiler> host_compiler();

// Builds CUDA C++ (the code generator's, or an edited copy: the emulator's tests break kernels
// this way) into an emulation module for target `t`. `fibers`: the code has barriers or warp
// collectives, so its units must run as fibers.
Result<backend::Artifact> compile_source(const Source& src, const backend::Target& t, bool fibers);

}  // namespace kiln::cuda::emu
