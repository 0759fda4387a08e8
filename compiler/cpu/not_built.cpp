// The CPU backend's entry points in a kiln built without it (-DKILN_CPU=OFF: no LLVM, as on a
// GPU machine that has none). Each says so; the runtime then lists the CPU device as absent
// with this reason, as it lists a missing GPU driver. Nothing here pretends to compile.
#include "compiler/cpu/backend.h"
#include "compiler/cpu/llvm_info.h"

namespace kiln::cpu {

namespace {
Error not_built() {
  return Error(ErrorKind::Unsupported,
               "this kiln was built without the CPU backend (-DKILN_CPU=OFF, no LLVM); "
               "configure with -DKILN_CPU=ON and LLVM 22 to run kernels on the CPU");
}
}  // namespace

CompiledKernel::~CompiledKernel() = default;

Result<Target> host_target() {
  return not_built();
}
Result<Target> make_target(const std::string&, const std::string&) {
  return not_built();
}
Status runs_on_host(const Target&) {
  return not_built();
}
Result<std::string> emit_llvm(const ir::Kernel&, const CompileOptions&, bool) {
  return not_built();
}
Result<std::string> emit_asm(const ir::Kernel&, const CompileOptions&) {
  return not_built();
}
Result<ObjectCode> compile_object(const ir::Kernel&, const CompileOptions&, CompileTimings*) {
  return not_built();
}
Result<std::unique_ptr<CompiledKernel>> load_object(ObjectCode, CompileTimings*) {
  return not_built();
}
Status start_jit() {
  return not_built();
}
Result<std::unique_ptr<CompiledKernel>> compile(const ir::Kernel&, const CompileOptions&,
                                                CompileTimings*) {
  return not_built();
}

std::string llvm_version() {
  return "none (built with -DKILN_CPU=OFF)";
}

}  // namespace kiln::cpu
