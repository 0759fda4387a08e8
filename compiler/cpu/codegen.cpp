// Lowered kiln IR -> LLVM IR: the entry point (the generator is compiler/cpu/gen.h, its
// vector mode compiler/cpu/vectorize.cpp).
#include "compiler/cpu/codegen.h"

#include "compiler/cpu/gen.h"
#include "ir/printer.h"

namespace kiln::cpu {

Result<GeneratedModule> generate(llvm::LLVMContext& ctx, const ir::Kernel& lowered,
                                 const CompileOptions& opts) {
  GeneratedModule g;
  g.module = std::make_unique<llvm::Module>(fmt::format("kiln.{}", lowered.name), ctx);
  g.module->setTargetTriple(llvm::Triple(opts.target.triple));
  g.info.name = lowered.name;
  g.info.cube_dim = lowered.cube_dim;
  g.info.checked = opts.checked;
  // A symbol unique per kernel text, so kernels of one name in different specializations never
  // collide in the JIT.
  const std::string text = ir::print(lowered);
  g.info.symbol = fmt::format("kiln_{}_{:016x}{}", lowered.name, std::hash<std::string>{}(text),
                              opts.checked ? "_checked" : "");
  detail::Gen gen(ctx, *g.module, lowered, opts, g.info);
  KILN_TRY(gen.run());
  return g;
}

}  // namespace kiln::cpu
