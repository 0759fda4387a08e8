// The CPU backend: lowered kiln IR -> LLVM IR -> optimized for the host CPU -> object code ->
// loaded into an ORC JIT. Also prints every stage for `kiln show --target cpu`. This header has
// no LLVM types; everything LLVM lives in compiler/cpu/*.cpp.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "compiler/cpu/abi.h"
#include "ir/ir.h"

namespace kiln::cpu {

// A CPU to compile for: the host (the default), or another x86 CPU for inspection only.
struct Target {
  std::string triple;
  std::string cpu;        // LLVM CPU name, e.g. "sapphirerapids"
  std::string features;   // e.g. "+avx2,+fma,..."
  int vector_bits = 128;  // widest SIMD register: 512 with AVX-512, 256 with AVX, else 128
  // vpdpbusd, from AVX-512 VNNI on 512-bit CPUs or AVX-VNNI on 256-bit ones (no AVX-512):
  // 8-bit matrix fragments multiply as dot products of four bytes (docs/backends.md,
  // "Matrix fragments"). Set from the CPU's features; a caller may clear it to compile the
  // plain 32-bit path instead.
  bool vnni = false;
  bool host = true;
  // Run the units of a cube in SIMD lanes (the unit vectorizer, docs/backends.md). On unless
  // the environment sets KILN_CPU_VECTORIZE=0 when the target is made.
  bool vectorize = true;

  // The widest useful line width for an element of `bytes` bytes (a power of two, <= 16).
  int max_lanes(int bytes) const;
  // A short description: "sapphirerapids (avx512, 512-bit vectors)".
  std::string describe() const;
};

// KILN_CPU_VECTORIZE from the environment: 0 is off, 1 or unset on, anything else an error
// naming the variable (host_target and make_target read it).
Result<bool> vectorize_from_environment();
// The host CPU, from LLVM's host detection.
Result<Target> host_target();
// Another x86-64 CPU by LLVM name, with optional extra features ("+avx2,-avx512f").
Result<Target> make_target(const std::string& cpu, const std::string& features);
// Whether code for `t` runs on this machine: every feature t's CPU and features enable is one
// the host has (an error names those it lacks). The host itself always does.
Status runs_on_host(const Target& t);

using abi::KernelInfo;

struct CompileOptions {
  Target target;
  bool fast_math = false;  // allow reassociation and approximate math
  bool checked = false;    // bounds-check every memory access (docs/runtime.md)
};

// Milliseconds spent in each step of a compile.
struct CompileTimings {
  double codegen_ms = 0;   // kiln IR -> LLVM IR
  double optimize_ms = 0;  // LLVM's O3 pipeline
  double machine_ms = 0;   // LLVM code generation to object code
  double link_ms = 0;      // loading the object into the JIT
};

// A kernel ready to run. Its code stays loaded as long as the object lives.
class CompiledKernel {
 public:
  ~CompiledKernel();
  EntryFn entry() const { return entry_; }
  const KernelInfo& info() const { return info_; }
  // The relocatable object code it was loaded from (what a disk cache stores).
  const std::vector<char>& object() const { return object_; }

 private:
  friend class Jit;
  CompiledKernel() = default;
  EntryFn entry_ = nullptr;
  KernelInfo info_;
  std::vector<char> object_;
  std::string dylib_;  // the JIT dylib holding the code
};

// Text of a stage for inspection. The kernel must be lowered (passes::lower_for_cpu).
Result<std::string> emit_llvm(const ir::Kernel& lowered, const CompileOptions& opts,
                              bool optimized);
Result<std::string> emit_asm(const ir::Kernel& lowered, const CompileOptions& opts);

// Object code for a lowered kernel, with the facts needed to load it again.
struct ObjectCode {
  std::vector<char> bytes;
  KernelInfo info;
};
Result<ObjectCode> compile_object(const ir::Kernel& lowered, const CompileOptions& opts,
                                  CompileTimings* timings = nullptr);

// Loads object code into the JIT (no LLVM optimization or code generation). The target must
// be the host.
Result<std::unique_ptr<CompiledKernel>> load_object(ObjectCode obj,
                                                    CompileTimings* timings = nullptr);
// Starts the process's JIT now (once) rather than at the first load.
Status start_jit();

// compile_object + load_object.
Result<std::unique_ptr<CompiledKernel>> compile(const ir::Kernel& lowered,
                                                const CompileOptions& opts,
                                                CompileTimings* timings = nullptr);

}  // namespace kiln::cpu
