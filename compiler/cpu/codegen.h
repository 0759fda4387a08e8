// Lowered kiln IR -> LLVM IR (internal to compiler/cpu).
#pragma once

#include <memory>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "compiler/cpu/backend.h"

namespace kiln::cpu {

struct GeneratedModule {
  std::unique_ptr<llvm::Module> module;
  KernelInfo info;
};

// One function per kernel, named KernelInfo::symbol, with the EntryFn signature. The kernel
// must be lowered (passes::lower_for_cpu) and verified.
Result<GeneratedModule> generate(llvm::LLVMContext& ctx, const ir::Kernel& lowered,
                                 const CompileOptions& opts);

}  // namespace kiln::cpu
