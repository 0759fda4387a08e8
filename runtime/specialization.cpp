// Specialization tables and the slow path: trace, passes, disk cache or compile, dumps.
#include "runtime/specialization.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "compiler/cpu/llvm_info.h"
#include "compiler/cuda/codegen.h"
#include "compiler/cuda/nvrtc.h"
#include "compiler/passes/pipeline.h"
#include "ir/printer.h"
#include "runtime/disk_cache.h"
#include "runtime/log.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0"
#endif

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Counters {
  std::atomic<uint64_t> memory_hits{0}, disk_hits{0}, compiles{0}, failures{0};
  std::atomic<uint64_t> compile_us{0}, disk_load_us{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

thread_local CompileReport t_report;

// KILN_DUMP=ir,ir-opt,llvm,asm and KILN_DUMP_DIR (default: ./kiln-dump).
struct DumpConfig {
  std::set<std::string> stages;
  std::string dir;
};
const DumpConfig& dump_config() {
  static const DumpConfig c = [] {
    DumpConfig d;
    if (const char* s = std::getenv("KILN_DUMP")) {
      std::string v = s;
      size_t start = 0;
      while (start <= v.size()) {
        const size_t comma = v.find(',', start);
        const std::string item =
            v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) d.stages.insert(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    const char* dir = std::getenv("KILN_DUMP_DIR");
    d.dir = dir && *dir ? dir : "kiln-dump";
    return d;
  }();
  return c;
}

// Writes the asked-for stages of a specialization: `stages` pairs a KILN_DUMP stage with its
// file extension and the function that makes its text (only called when asked for).
void dump_stages(
    const std::string& kernel, const Hash128& hash,
    std::initializer_list<std::tuple<const char*, const char*, std::function<std::string()>>>
        stages) {
  const DumpConfig& d = dump_config();
  if (d.stages.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(d.dir, ec);
  const std::string base = fmt::format("{}/{}-{}", d.dir, kernel, hash.hex().substr(0, 16));
  for (const auto& [stage, ext, text] : stages) {
    if (!d.stages.count(stage)) continue;
    std::ofstream f(base + ext);
    f << text();
    if (!f) log_warning(fmt::format("KILN_DUMP: cannot write {}{}", base, ext));
  }
}

std::string versions() {
  static const std::string v =
      fmt::format("kiln {} / LLVM {} / cpu-abi 2", KILN_VERSION, cpu::llvm_version());
  return v;
}

std::string cuda_versions() {
  static const std::string v = [] {
    auto nv = cuda::nvrtc();
    return fmt::format("kiln {} / NVRTC {} / cuda-abi 1 / prelude {:016x}", KILN_VERSION,
                       nv ? fmt::format("{}.{}", (*nv)->major, (*nv)->minor) : std::string("none"),
                       XXH3_64bits(cuda::prelude().data(), cuda::prelude().size()));
  }();
  return v;
}

// The slow path for a CUDA device: CUDA C++ -> NVRTC -> CUBIN (or PTX) -> module.
Result<detail::CompiledSpec> build_cuda(const detail::BuildRequest& req) {
  const detail::CudaDevice& dev = *req.cuda;
  CompileReport report;
  report.kernel = req.def->name;
  const auto t_all = Clock::now();
  auto t = Clock::now();
  KILN_ASSIGN(ir::Kernel traced, dsl::trace(*req.def, *req.inst, req.trace));
  report.trace_ms = ms_since(t);
  t = Clock::now();
  KILN_ASSIGN(ir::Kernel prepared, passes::prepare_for_cuda(traced));
  report.passes_ms = ms_since(t);
  t = Clock::now();
  cuda::CodegenOptions copts;
  copts.checked = req.options.checked;
  copts.fast_math = req.options.fast_math;
  KILN_ASSIGN(cuda::Source src, cuda::generate(prepared, copts));
  report.codegen_ms = ms_since(t);
  t = Clock::now();
  const std::string arch =
      dev.cubin() ? dev.compile_target().name() : dev.compile_target().compute();
  const std::string material =
      fmt::format("{}\n--\n{}\n--\nchecked={} fast_math={}\n--\n{}", src.text, arch,
                  req.options.checked, req.options.fast_math, cuda_versions());
  const Hash128 hash = strong_hash(material);
  report.hash_ms = ms_since(t);
  const std::shared_ptr<DiskCache> cache = DiskCache::global();
  detail::CompiledSpec out;
  std::string ptx;
  t = Clock::now();
  auto entry = cache->load("cuda", hash, material);
  if (entry) {
    auto meta = nlohmann::json::parse(entry->meta, nullptr, false);
    auto info =
        abi::info_from_json(meta.is_object() ? meta.value("info", std::string()) : std::string());
    report.read_ms = ms_since(t);
    if (info) {
      cuda::Resources res;
      if (meta.contains("resources") && meta["resources"].is_object()) {
        const auto& r = meta["resources"];
        res.known = true;
        res.registers = r.value("registers", 0);
        res.shared_bytes = r.value("shared_bytes", 0);
        res.stack_bytes = r.value("stack_bytes", 0);
        res.spill_store_bytes = r.value("spill_stores", 0);
        res.spill_load_bytes = r.value("spill_loads", 0);
      }
      t = Clock::now();
      auto k = detail::load_cuda_kernel(dev, entry->blob, std::move(*info), res);
      if (k) {
        report.load_ms = ms_since(t);
        report.from_disk = true;
        out.cuda = std::move(*k);
        counters().disk_hits++;
        if (!dev.cubin()) ptx.assign(entry->blob.begin(), entry->blob.end());
      } else {
        log_warning(fmt::format("cache entry {} for '{}' could not be loaded ({}); recompiling",
                                hash.hex(), req.def->name, k.error().message));
      }
    }
  } else {
    report.read_ms = ms_since(t);
  }
  if (!out.cuda) {
    t = Clock::now();
    KILN_ASSIGN(cuda::CompiledCuda compiled,
                cuda::compile_cuda(src.text, req.def->name + ".cu", arch, req.options.fast_math));
    report.optimize_ms = ms_since(t);  // NVRTC: front end, optimization and ptxas
    std::vector<char> image =
        dev.cubin() ? compiled.cubin : std::vector<char>(compiled.ptx.begin(), compiled.ptx.end());
    nlohmann::json meta;
    meta["kernel"] = req.def->name;
    meta["target"] = arch;
    meta["versions"] = cuda_versions();
    meta["image"] = dev.cubin() ? "cubin" : "ptx";
    meta["info"] = abi::info_to_json(src.info);
    meta["resources"] = {{"registers", compiled.resources.registers},
                         {"shared_bytes", compiled.resources.shared_bytes},
                         {"stack_bytes", compiled.resources.stack_bytes},
                         {"spill_stores", compiled.resources.spill_store_bytes},
                         {"spill_loads", compiled.resources.spill_load_bytes}};
    if (auto st = cache->store("cuda", hash, material, meta.dump(), image); !st)
      log_warning_once(st.error().message,
                       fmt::format("compiled kernels are not stored in the disk cache: {}",
                                   st.error().message));
    t = Clock::now();
    KILN_ASSIGN(auto k, detail::load_cuda_kernel(dev, image, src.info, compiled.resources));
    report.load_ms = ms_since(t);
    out.cuda = std::move(k);
    ptx = std::move(compiled.ptx);
    counters().compiles++;
  }
  report.total_ms = ms_since(t_all);
  (report.from_disk ? counters().disk_load_us : counters().compile_us) +=
      static_cast<uint64_t>(report.total_ms * 1000);
  dump_stages(req.def->name, hash,
              {{"ir", ".kir", [&] { return ir::print(traced); }},
               {"ir-opt", ".opt.kir", [&] { return ir::print(prepared); }},
               {"cuda", ".cu", [&] { return src.text; }},
               {"ptx", ".ptx", [&] {
                  if (!ptx.empty())
                    return ptx;  // a CUBIN from the disk cache: compile the PTX to show
                  auto c =
                      cuda::compile_cuda(src.text, req.def->name + ".cu",
                                         dev.compile_target().compute(), req.options.fast_math);
                  return c ? c->ptx : c.error().message;
                }}});
  t_report = report;
  return out;
}

// The slow path for a CPU target.
Result<detail::CompiledSpec> build_cpu(const detail::BuildRequest& req) {
  CompileReport report;
  report.kernel = req.def->name;
  const auto t_all = Clock::now();
  auto t = Clock::now();
  KILN_ASSIGN(ir::Kernel traced, dsl::trace(*req.def, *req.inst, req.trace));
  report.trace_ms = ms_since(t);
  t = Clock::now();
  KILN_ASSIGN(ir::Kernel lowered, passes::lower_for_cpu(traced));
  report.passes_ms = ms_since(t);
  // The content address: everything that determines the code.
  t = Clock::now();
  const std::string material =
      fmt::format("{}\n--\n{}\n--\nchecked={} fast_math={}\n--\n{}", ir::print(lowered),
                  req.target_key, req.options.checked, req.options.fast_math, versions());
  const Hash128 hash = strong_hash(material);
  report.hash_ms = ms_since(t);
  const std::shared_ptr<DiskCache> cache = DiskCache::global();
  DiskCache& disk = *cache;
  detail::CompiledSpec out;
  t = Clock::now();
  auto entry = disk.load("cpu", hash, material);
  if (entry) {
    auto meta = nlohmann::json::parse(entry->meta, nullptr, false);
    auto info =
        abi::info_from_json(meta.is_object() ? meta.value("info", std::string()) : std::string());
    report.read_ms = ms_since(t);
    t = Clock::now();
    if (info) {
      cpu::CompileTimings timings;
      auto k =
          cpu::load_object(cpu::ObjectCode{std::move(entry->blob), std::move(*info)}, &timings);
      if (k) {
        report.load_ms = ms_since(t);
        report.from_disk = true;
        out.cpu = std::move(*k);
        counters().disk_hits++;
      }
    }
    if (!out.cpu)
      log_warning(fmt::format("cache entry {} for '{}' could not be loaded; recompiling",
                              hash.hex(), req.def->name));
  }
  if (!entry) report.read_ms = ms_since(t);
  if (!out.cpu) {
    cpu::CompileTimings timings;
    KILN_ASSIGN(cpu::ObjectCode obj, cpu::compile_object(lowered, req.options, &timings));
    report.codegen_ms = timings.codegen_ms;
    report.optimize_ms = timings.optimize_ms;
    report.machine_ms = timings.machine_ms;
    nlohmann::json meta;
    meta["kernel"] = req.def->name;
    meta["target"] = req.target_key;
    meta["versions"] = versions();
    meta["info"] = abi::info_to_json(obj.info);
    if (auto st = disk.store("cpu", hash, material, meta.dump(), obj.bytes); !st)
      log_warning_once(st.error().message,
                       fmt::format("compiled kernels are not stored in the disk cache: {}",
                                   st.error().message));
    t = Clock::now();
    KILN_ASSIGN(auto k, cpu::load_object(std::move(obj), &timings));
    report.load_ms = ms_since(t);
    out.cpu = std::move(k);
    counters().compiles++;
  }
  report.total_ms = ms_since(t_all);
  (report.from_disk ? counters().disk_load_us : counters().compile_us) +=
      static_cast<uint64_t>(report.total_ms * 1000);
  dump_stages(req.def->name, hash,
              {{"ir", ".kir", [&] { return ir::print(traced); }},
               {"ir-opt", ".opt.kir", [&] { return ir::print(lowered); }},
               {"llvm", ".ll",
                [&] {
                  auto t = cpu::emit_llvm(lowered, req.options, true);
                  return t ? *t : t.error().message;
                }},
               {"asm", ".s", [&] {
                  auto t = cpu::emit_asm(lowered, req.options);
                  return t ? *t : t.error().message;
                }}});
  t_report = report;
  return out;
}

}  // namespace

CacheStats cache_stats() {
  const Counters& c = counters();
  CacheStats s;
  s.memory_hits = c.memory_hits;
  s.disk_hits = c.disk_hits;
  s.compiles = c.compiles;
  s.failures = c.failures;
  s.compile_ms = static_cast<double>(c.compile_us) / 1000;
  s.disk_load_ms = static_cast<double>(c.disk_load_us) / 1000;
  return s;
}

const CompileReport& last_compile_report() {
  return t_report;
}

namespace detail {

void SpecKey::finish() {
  hash = XXH3_64bits(bytes.data(), size);
}

SpecTable* table_for(const dsl::KernelDef* def) {
  static std::mutex mu;
  static auto* tables = new std::unordered_map<const dsl::KernelDef*, std::unique_ptr<SpecTable>>;
  std::lock_guard<std::mutex> lock(mu);
  auto& t = (*tables)[def];
  if (!t) t = std::make_unique<SpecTable>();
  return t.get();
}

const Spec* find_ready(SpecTable& table, const SpecKey& key) {
  std::shared_lock<std::shared_mutex> lock(table.mu);
  auto it = table.map.find(key);
  if (it == table.map.end() ||
      it->second->state.load(std::memory_order_acquire) != Spec::State::Ready)
    return nullptr;
  counters().memory_hits.fetch_add(1, std::memory_order_relaxed);
  return it->second.get();
}

Result<const Spec*> get_or_build(SpecTable& table, const SpecKey& key, const BuildRequest& req) {
  Spec* spec = nullptr;
  bool mine = false;
  {
    std::unique_lock<std::shared_mutex> lock(table.mu);
    auto& slot = table.map[key];
    if (!slot) {
      slot = std::make_unique<Spec>();
      mine = true;
    }
    spec = slot.get();
  }
  if (mine) {
    // This thread builds it; others that arrive meanwhile wait below.
    Result<CompiledSpec> built = req.cuda ? build_cuda(req) : build_cpu(req);
    std::lock_guard<std::mutex> lock(spec->mu);
    if (built) {
      spec->code = std::move(*built);
      spec->state.store(Spec::State::Ready, std::memory_order_release);
    } else {
      spec->error = built.error();
      spec->state.store(Spec::State::Failed, std::memory_order_release);
      counters().failures++;
    }
    spec->cv.notify_all();
  } else {
    std::unique_lock<std::mutex> lock(spec->mu);
    spec->cv.wait(lock, [&] { return spec->state.load() != Spec::State::Compiling; });
    if (spec->state.load() == Spec::State::Ready) counters().memory_hits++;
  }
  if (spec->state.load() == Spec::State::Failed) return spec->error;
  return static_cast<const Spec*>(spec);
}

}  // namespace detail

}  // namespace kiln
