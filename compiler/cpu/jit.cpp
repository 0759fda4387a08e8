// Targets, LLVM's optimization pipeline, object code, and the process-wide ORC JIT.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <llvm/ExecutionEngine/Orc/AbsoluteSymbols.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include "compiler/cpu/backend.h"
#include "compiler/cpu/codegen.h"

namespace kiln::cpu {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::string llvm_error(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return s;
}

Result<std::unique_ptr<llvm::TargetMachine>> target_machine(const Target& t) {
  init_llvm();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(llvm::Triple(t.triple), err);
  if (!target)
    return Error(ErrorKind::Unsupported, fmt::format("no LLVM target for {}: {}", t.triple, err));
  llvm::TargetOptions to;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(llvm::Triple(t.triple), t.cpu, t.features, to, llvm::Reloc::PIC_,
                                  std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) return Error(ErrorKind::Unsupported, fmt::format("cannot target CPU '{}'", t.cpu));
  return tm;
}

// Whether a feature list ("+avx2,-avx512f,...") enables `f`.
bool has_feature(const std::string& features, const std::string& f) {
  const std::string item = "+" + f;
  size_t pos = 0;
  while ((pos = features.find(item, pos)) != std::string::npos) {
    const size_t end = pos + item.size();
    if ((pos == 0 || features[pos - 1] == ',') && (end == features.size() || features[end] == ','))
      return true;
    pos = end;
  }
  return false;
}

int vector_bits_of(const std::string& features) {
  if (has_feature(features, "avx512f")) return 512;
  if (has_feature(features, "avx")) return 256;
  return 128;
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

Result<std::vector<char>> machine_code(llvm::Module& m, llvm::TargetMachine& tm,
                                       llvm::CodeGenFileType kind) {
  m.setDataLayout(tm.createDataLayout());
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, kind))
    return Error(ErrorKind::Unsupported, "LLVM cannot emit code for this target");
  pm.run(m);
  return std::vector<char>(buf.begin(), buf.end());
}

// Generated and (optionally) optimized module for a kernel.
struct Prepared {
  std::unique_ptr<llvm::LLVMContext> ctx;
  GeneratedModule gen;
  std::unique_ptr<llvm::TargetMachine> tm;
};

Result<Prepared> prepare(const ir::Kernel& lowered, const CompileOptions& opts, bool optimized,
                         CompileTimings* timings) {
  Prepared p;
  KILN_ASSIGN(p.tm, target_machine(opts.target));
  p.ctx = std::make_unique<llvm::LLVMContext>();
  auto t0 = Clock::now();
  KILN_ASSIGN(p.gen, generate(*p.ctx, lowered, opts));
  p.gen.module->setDataLayout(p.tm->createDataLayout());
  if (timings) timings->codegen_ms = ms_since(t0);
  if (optimized) {
    t0 = Clock::now();
    optimize(*p.gen.module, *p.tm);
    if (timings) timings->optimize_ms = ms_since(t0);
  }
  return p;
}

}  // namespace

// ---- targets
// -----------------------------------------------------------------------------------------

Result<Target> host_target() {
  init_llvm();
  Target t;
  t.triple = llvm::sys::getProcessTriple();
  t.cpu = llvm::sys::getHostCPUName().str();
  std::vector<std::string> feats;
  for (const auto& f : llvm::sys::getHostCPUFeatures())
    feats.push_back((f.getValue() ? "+" : "-") + f.getKey().str());
  std::sort(feats.begin(), feats.end());  // deterministic: it is part of cache keys
  for (const std::string& f : feats) t.features += (t.features.empty() ? "" : ",") + f;
  t.vector_bits = vector_bits_of(t.features);
  // vpdpbusd: zmm with AVX-512 VNNI on 512-bit CPUs, ymm with AVX-VNNI on 256-bit ones.
  t.vnni = t.vector_bits == 512 ? has_feature(t.features, "avx512vnni")
                                : t.vector_bits == 256 && has_feature(t.features, "avxvnni");
  t.host = true;
  KILN_ASSIGN(t.vectorize, vectorize_from_environment());
  return t;
}

Result<Target> make_target(const std::string& cpu, const std::string& features) {
  init_llvm();
  Target t;
  t.triple = llvm::sys::getProcessTriple();
  t.cpu = cpu;
  t.host = false;
  // The CPU and each feature are checked against LLVM's tables first, from a machine for the
  // generic CPU: LLVM itself only warns on stderr about an unknown CPU or feature, and rejects
  // an empty feature as invalid IR much later.
  Target generic = t;
  generic.cpu = "x86-64";
  KILN_ASSIGN(auto plain, target_machine(generic));
  const llvm::MCSubtargetInfo* plain_sti = plain->getMCSubtargetInfo();
  if (!plain_sti->isCPUStringValid(cpu))
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("unknown CPU '{}' (try x86-64, x86-64-v3, skylake, znver4, "
                             "sapphirerapids, ...)",
                             cpu));
  if (!features.empty()) {
    std::set<std::string, std::less<>> known;
    for (const auto& kv : plain_sti->getAllProcessorFeatures()) known.insert(kv.Key);
    size_t start = 0;
    for (;;) {
      const size_t comma = std::min(features.find(',', start), features.size());
      const std::string item = features.substr(start, comma - start);
      if (item.size() < 2 || (item[0] != '+' && item[0] != '-'))
        return Error(
            ErrorKind::InvalidArgument,
            fmt::format("CPU features '{}': '{}' is not a feature; write a comma-separated "
                        "list of +NAME (enable) and -NAME (disable), e.g. +avx2,-avx512f",
                        features, item));
      if (!known.count(item.substr(1)))
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("CPU features '{}': '{}' is not a feature of {} (e.g. avx2, "
                                 "fma, avx512f, avx512bw)",
                                 features, item.substr(1), t.triple));
      if (comma == features.size()) break;
      start = comma + 1;
    }
  }
  t.features = features;
  KILN_ASSIGN(auto tm, target_machine(t));
  const llvm::MCSubtargetInfo* sti = tm->getMCSubtargetInfo();
  t.vector_bits = sti->checkFeatures("+avx512f") ? 512 : sti->checkFeatures("+avx") ? 256 : 128;
  t.vnni = t.vector_bits == 512 ? sti->checkFeatures("+avx512vnni")
                                : t.vector_bits == 256 && sti->checkFeatures("+avxvnni");
  KILN_ASSIGN(t.vectorize, vectorize_from_environment());
  return t;
}

Status runs_on_host(const Target& t) {
  if (t.host) return Status{};
  KILN_ASSIGN(auto mine, target_machine(t));
  const llvm::MCSubtargetInfo* sti = mine->getMCSubtargetInfo();
  // The instruction-set features the host reports (tuning features, such as
  // fast-variable-crosslane-shuffle, are not among them and change no instruction's meaning).
  const llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
  std::string lacking;
  for (const auto& kv : sti->getAllProcessorFeatures()) {
    const auto it = host.find(kv.Key);
    if (sti->getFeatureBits().test(kv.Value) && it != host.end() && !it->getValue())
      lacking += (lacking.empty() ? "" : ", ") + std::string(kv.Key);
  }
  if (lacking.empty()) return Status{};
  return Error(ErrorKind::Unsupported,
               fmt::format("cpu:{}{}{} cannot run here: this CPU ({}) lacks {}; name a CPU whose "
                           "features this one has (e.g. cpu:x86-64-v3 for AVX2 code), or cpu "
                           "for the host",
                           t.cpu, t.features.empty() ? "" : ":", t.features,
                           llvm::sys::getHostCPUName().str(), lacking));
}

// ---- stages
// --------------------------------------------------------------------------------------------

Result<std::string> emit_llvm(const ir::Kernel& lowered, const CompileOptions& opts,
                              bool optimized) {
  KILN_ASSIGN(Prepared p, prepare(lowered, opts, optimized, nullptr));
  std::string s;
  llvm::raw_string_ostream os(s);
  p.gen.module->print(os, nullptr);
  return s;
}

Result<std::string> emit_asm(const ir::Kernel& lowered, const CompileOptions& opts) {
  KILN_ASSIGN(Prepared p, prepare(lowered, opts, true, nullptr));
  KILN_ASSIGN(auto text, machine_code(*p.gen.module, *p.tm, llvm::CodeGenFileType::AssemblyFile));
  return std::string(text.begin(), text.end());
}

Result<ObjectCode> compile_object(const ir::Kernel& lowered, const CompileOptions& opts,
                                  CompileTimings* timings) {
  KILN_ASSIGN(Prepared p, prepare(lowered, opts, true, timings));
  const auto t0 = Clock::now();
  KILN_ASSIGN(auto bytes, machine_code(*p.gen.module, *p.tm, llvm::CodeGenFileType::ObjectFile));
  if (timings) timings->machine_ms = ms_since(t0);
  return ObjectCode{std::move(bytes), std::move(p.gen.info)};
}

// ---- the JIT
// --------------------------------------------------------------------------------------------

// With KILN_PERF_MAP=1, every function of a loaded kernel is named in /tmp/perf-PID.map (the
// form `perf report` reads for code it cannot find in a file): "kiln:KERNEL" for its entry,
// "kiln:KERNEL:FUNCTION" for the others. Their addresses come from the entry's: JITLink keeps
// a section's functions where the object placed them, one block per section.
void write_perf_map(const std::vector<char>& bytes, const std::string& kernel,
                    const std::string& entry, uint64_t entry_address) {
  static const bool on = [] {
    const char* v = std::getenv("KILN_PERF_MAP");
    if (!v || std::string(v) == "0" || std::string(v).empty()) return false;
    if (std::string(v) == "1") return true;
    std::fprintf(stderr, "kiln: KILN_PERF_MAP is '%s'; 1 writes /tmp/perf-PID.map, 0 does not\n",
                 v);
    return false;
  }();
  if (!on) return;
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(bytes.data(), bytes.size()), kernel));
  if (!file) {
    llvm::consumeError(file.takeError());
    return;
  }
  if (!(*file)->isELF()) return;
  struct Function {
    std::string name;
    uint64_t offset, size;
    llvm::object::SectionRef section;
  };
  std::vector<Function> functions;
  const Function* base = nullptr;
  for (const llvm::object::SymbolRef& sym : (*file)->symbols()) {
    auto type = sym.getType();
    auto name = sym.getName();
    auto value = sym.getValue();
    auto section = sym.getSection();
    if (!type || !name || !value || !section || *type != llvm::object::SymbolRef::ST_Function ||
        *section == (*file)->section_end()) {
      if (!type) llvm::consumeError(type.takeError());
      if (!name) llvm::consumeError(name.takeError());
      if (!value) llvm::consumeError(value.takeError());
      if (!section) llvm::consumeError(section.takeError());
      continue;
    }
    const uint64_t size = llvm::object::ELFSymbolRef(sym).getSize();
    functions.push_back({name->str(), *value, size, **section});
  }
  for (const Function& f : functions)
    if (f.name == entry) base = &f;
  if (!base) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const std::string path = fmt::format("/tmp/perf-{}.map", ::getpid());
  std::FILE* out = std::fopen(path.c_str(), "a");
  if (!out) {
    static bool told = false;  // under mu
    if (!told) std::fprintf(stderr, "kiln: KILN_PERF_MAP: cannot write %s\n", path.c_str());
    told = true;
    return;
  }
  for (const Function& f : functions) {
    if (f.section != base->section) continue;
    const std::string label =
        &f == base ? fmt::format("kiln:{}", kernel) : fmt::format("kiln:{}:{}", kernel, f.name);
    fmt::print(out, "{:x} {:x} {}\n", entry_address + f.offset - base->offset,
               std::max<uint64_t>(f.size, 1), label);
  }
  std::fclose(out);
}

class Jit {
 public:
  static Result<Jit*> get() {
    static std::once_flag once;
    static Jit* jit = nullptr;
    static std::string failure;
    std::call_once(once, [] {
      init_llvm();
      auto j = llvm::orc::LLJITBuilder().create();
      if (!j) {
        failure = llvm_error(j.takeError());
        return;
      }
      jit = new Jit;  // lives for the process: kernels' code must outlive every user
      jit->jit_ = std::move(*j);
    });
    if (!jit) return Error(ErrorKind::Compile, "cannot start the LLVM JIT: " + failure);
    return jit;
  }

  Result<std::unique_ptr<CompiledKernel>> load(ObjectCode obj) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string name = fmt::format("kiln.{}.{}", obj.info.name, counter_++);
    auto jd = jit_->createJITDylib(name);
    if (!jd) return Error(ErrorKind::Compile, "JIT: " + llvm_error(jd.takeError()));
    llvm::orc::SymbolMap runtime;
    runtime[jit_->mangleAndIntern("kiln_rt_print")] = {
        llvm::orc::ExecutorAddr::fromPtr(&kiln_rt_print), llvm::JITSymbolFlags::Exported};
    runtime[jit_->mangleAndIntern("kiln_rt_assert_failed")] = {
        llvm::orc::ExecutorAddr::fromPtr(&kiln_rt_assert_failed), llvm::JITSymbolFlags::Exported};
    runtime[jit_->mangleAndIntern("kiln_rt_fault")] = {
        llvm::orc::ExecutorAddr::fromPtr(&kiln_rt_fault), llvm::JITSymbolFlags::Exported};
    runtime[jit_->mangleAndIntern("kiln_rt_wgmma")] = {
        llvm::orc::ExecutorAddr::fromPtr(&kiln_rt_wgmma), llvm::JITSymbolFlags::Exported};
    const std::pair<const char*, void*> functions[] = {
      {"kiln_rt_mma_scaled", reinterpret_cast<void*>(&kiln_rt_mma_scaled)},
      {"kiln_rt_mbar_init", reinterpret_cast<void*>(&kiln_rt_mbar_init)},
      {"kiln_rt_mbar_wait", reinterpret_cast<void*>(&kiln_rt_mbar_wait)},
      {"kiln_rt_tmem_alloc", reinterpret_cast<void*>(&kiln_rt_tmem_alloc)},
      {"kiln_rt_tmem_free", reinterpret_cast<void*>(&kiln_rt_tmem_free)},
      {"kiln_rt_tcgen05_mma", reinterpret_cast<void*>(&kiln_rt_tcgen05_mma)},
      {"kiln_rt_tcgen05_commit", reinterpret_cast<void*>(&kiln_rt_tcgen05_commit)},
      {"kiln_rt_tmem_load", reinterpret_cast<void*>(&kiln_rt_tmem_load)},
      {"kiln_rt_tmem_read", reinterpret_cast<void*>(&kiln_rt_tmem_read)},
      {"kiln_rt_tmem_end", reinterpret_cast<void*>(&kiln_rt_tmem_end)},
      {"kiln_rt_mbar_arrive_tx", reinterpret_cast<void*>(&kiln_rt_mbar_arrive_tx)},
      {"kiln_rt_cluster_sync", reinterpret_cast<void*>(&kiln_rt_cluster_sync)},
      {"kiln_rt_cluster_shared", reinterpret_cast<void*>(&kiln_rt_cluster_shared)},
      {"kiln_rt_tma_load_multicast", reinterpret_cast<void*>(&kiln_rt_tma_load_multicast)},
      {"kiln_rt_tma_load", reinterpret_cast<void*>(&kiln_rt_tma_load)},
      {"kiln_rt_tma_store", reinterpret_cast<void*>(&kiln_rt_tma_store)},
      {"kiln_rt_tma_reduce", reinterpret_cast<void*>(&kiln_rt_tma_reduce)},
      {"kiln_rt_copy_async", reinterpret_cast<void*>(&kiln_rt_copy_async)},
#if defined(__x86_64__) || defined(__aarch64__)
      {"__truncsfbf2", reinterpret_cast<void*>(&kiln_rt_truncsfbf2)},  // abi.h
#endif
    };
    for (const auto& [name, fn] : functions)
      runtime[jit_->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn),
                                              llvm::JITSymbolFlags::Exported};
    if (auto e = jd->define(llvm::orc::absoluteSymbols(std::move(runtime))))
      return Error(ErrorKind::Compile, "JIT: " + llvm_error(std::move(e)));
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
        llvm::StringRef(obj.bytes.data(), obj.bytes.size()), name);
    if (auto e = jit_->addObjectFile(*jd, std::move(buffer)))
      return Error(ErrorKind::Compile,
                   "JIT: cannot load the kernel's object code: " + llvm_error(std::move(e)));
    auto sym = jit_->lookup(*jd, obj.info.symbol);
    if (!sym)
      return Error(ErrorKind::Compile, "JIT: cannot link kernel '" + obj.info.name +
                                           "': " + llvm_error(sym.takeError()));
    write_perf_map(obj.bytes, obj.info.name, obj.info.symbol, sym->getValue());
    std::unique_ptr<CompiledKernel> k(new CompiledKernel);
    k->entry_ = sym->toPtr<EntryFn>();
    k->info_ = std::move(obj.info);
    k->object_ = std::move(obj.bytes);
    k->dylib_ = name;
    return k;
  }

 private:
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::mutex mu_;
  uint64_t counter_ = 0;
};

// The code stays in the JIT (kernels are few and small); the object just forgets it.
CompiledKernel::~CompiledKernel() = default;

Status start_jit() {
  KILN_TRY(Jit::get());
  return {};
}

Result<std::unique_ptr<CompiledKernel>> load_object(ObjectCode obj, CompileTimings* timings) {
  const auto t0 = Clock::now();
  KILN_ASSIGN(Jit * jit, Jit::get());
  auto k = jit->load(std::move(obj));
  if (timings) timings->link_ms = ms_since(t0);
  return k;
}

Result<std::unique_ptr<CompiledKernel>> compile(const ir::Kernel& lowered,
                                                const CompileOptions& opts,
                                                CompileTimings* timings) {
  if (!opts.target.host)
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("cannot run code for CPU '{}' here: only the host CPU can run kernels "
                             "(other CPUs are for inspection with kiln show)",
                             opts.target.cpu));
  KILN_ASSIGN(ObjectCode obj, compile_object(lowered, opts, timings));
  return load_object(std::move(obj), timings);
}

}  // namespace kiln::cpu
