// What the specialization caches did and where a compile's time went: counters for the whole
// process and the report of the latest compile on this thread. Below runtime.h, so that the
// specialization cache that fills them does not include the API above it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/backend.h"

namespace kiln {

// Counters of the specialization caches, for the whole process.
struct CacheStats {
  uint64_t memory_hits = 0;  // launches that found their compiled kernel in memory
  uint64_t disk_hits = 0;    // specializations loaded from the disk cache
  uint64_t compiles = 0;     // specializations compiled
  uint64_t failures = 0;     // specializations that failed to trace or compile
  double compile_ms = 0;     // time of the specializations that compiled (all stages)
  double disk_load_ms = 0;   // time of the specializations loaded from disk (all stages)
};
CacheStats cache_stats();

// Where the time of a launch that had to compile went (the latest one on this thread).
struct CompileReport {
  std::string kernel;
  bool from_disk = false;
  double trace_ms = 0, passes_ms = 0;
  double hash_ms = 0;  // printing the canonical IR and hashing it (the disk cache's key)
  double read_ms = 0;  // reading and checking the disk-cache entry (a hit or a miss)
  // The backend's own stages, named as it declares them (compiler/backend.h): on the CPU
  // llvm, llvm-opt, asm; on CUDA cuda, ptx (NVRTC). Empty when loaded from the disk cache.
  std::vector<backend::StageTime> stages;
  double load_ms = 0, total_ms = 0;  // loading onto the device; everything
};
const CompileReport& last_compile_report();

}  // namespace kiln
