// The CUDA emulator's execution engine (internal to the runtime; the device is device.cpp beside
// it). It runs a kernel module built by the cuda-emu backend with CUDA's execution model: cubes
// spread over the host's threads; within a cube every unit is a fiber of its own (a stack and
// a context switch, not an OS thread) that runs until it reaches a barrier or a warp
// collective, which completes when every unit (or every lane of the mask) has arrived. Units
// run in a fixed order, so a run is reproducible.
//
// It checks what a GPU leaves undefined: an access outside every allocation, an index past the
// end of a shared or local array, a shared-memory data race (two units touching the same bytes
// with no barrier between them, one of them writing) or a read of shared memory no unit wrote,
// units at different barriers or collectives, and a cube that can no longer make progress.
// Each is a fault of the launch, reported by sync with the kernel's source line.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/cuda/emu/abi.h"
#include "ir/result.h"

namespace kiln::detail::emu {

// A kernel module loaded into the process.
struct Module {
  void* handle = nullptr;
  int fd = -1;  // the memory file it was loaded from
  void (*unit)(const void* slots) = nullptr;
  ~Module();
};
// Loads a module image (a shared object) and binds it to the emulator.
Result<std::shared_ptr<Module>> load_module(const std::vector<char>& image,
                                            const std::string& kernel);

// The memory of emulated devices: every allocation, so that accesses can be checked.
void* allocate(size_t bytes);
void release(void* p);

struct Launch {
  std::shared_ptr<Module> module;
  std::string kernel;                // its name, for messages
  std::string device;                // "cuda-emu", for messages
  ::kiln::emu::Dim3 cubes{1, 1, 1};  // grid
  ::kiln::emu::Dim3 cube_dim{1, 1, 1};
  ::kiln::emu::Dim3 cluster_dim{1, 1, 1};  // the cubes of a cluster run together
  uint32_t shared_bytes = 0;
  bool fibers = true;  // the kernel has barriers or collectives: units run as fibers
  const void* slots = nullptr;
};

// A fault the emulator found; the first one of a launch by (cube, unit).
struct Fault {
  uint32_t cube = 0, unit = 0;
  std::string message;
};

// Runs a launch to completion on the calling thread and the global thread pool.
std::optional<Fault> run(const Launch& launch);

}  // namespace kiln::detail::emu
