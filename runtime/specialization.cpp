// Specialization tables and the slow path: trace, passes, disk cache or compile, dumps.
#include "runtime/specialization.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <fmt/format.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "ir/printer.h"
#include "ir/view_use.h"
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
    // A stage no backend has would be silently never written: say so once.
    std::set<std::string> known;
    for (const backend::Backend* b : backend::all())
      for (const backend::Stage& st : backend::stages(*b)) known.insert(st.name);
    for (const std::string& st : d.stages)
      if (!known.count(st)) {
        std::string names;
        for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
        log_warning(
            fmt::format("KILN_DUMP names '{}', which is no backend's stage; the stages "
                        "are: {}",
                        st, names));
      }
    return d;
  }();
  return c;
}

// Writes the stages asked for with KILN_DUMP, as the backend declares them (names and file
// extensions); each stage's text is only made when asked for.
void dump_stages(const std::string& kernel, const Hash128& hash, const backend::Backend& b,
                 const std::function<Result<std::string>(const std::string& stage)>& text) {
  const DumpConfig& d = dump_config();
  if (d.stages.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(d.dir, ec);
  const std::string base = fmt::format("{}/{}-{}", d.dir, kernel, hash.hex().substr(0, 16));
  for (const backend::Stage& stage : backend::stages(b)) {
    if (!d.stages.count(stage.name)) continue;
    auto t = text(stage.name);
    std::ofstream f(base + stage.extension);
    f << (t ? *t : t.error().message);
    if (!f) log_warning(fmt::format("KILN_DUMP: cannot write {}{}", base, stage.extension));
  }
}

// An artifact as the disk cache keeps it: the image, and a JSON description of the rest.
std::string artifact_meta(const std::string& kernel, const backend::Target& t,
                          const std::string& versions, const backend::Artifact& a) {
  nlohmann::json meta;
  meta["kernel"] = kernel;
  meta["target"] = t.name;
  meta["versions"] = versions;
  meta["image"] = a.image_kind;
  meta["info"] = abi::info_to_json(a.info);
  meta["extra"] = a.extra_json;
  return meta.dump();
}
Result<backend::Artifact> artifact_from_entry(DiskCache::Entry entry) {
  auto meta = nlohmann::json::parse(entry.meta, nullptr, false);
  if (!meta.is_object()) return Error(ErrorKind::Io, "its description is not JSON");
  KILN_ASSIGN(abi::KernelInfo info, abi::info_from_json(meta.value("info", std::string())));
  backend::Artifact a;
  a.image = std::move(entry.blob);
  a.image_kind = meta.value("image", std::string());
  a.info = std::move(info);
  a.extra_json = meta.value("extra", std::string("{}"));
  return a;
}

// Why an artifact read from the disk cache is not the code of `k`: the entry's checksum and
// key matched, but what it records of the kernel (parameters, their types and slots, the cube
// size) must also be what this kiln traced, or the launch would pack the wrong arguments.
std::string disagreement(const abi::KernelInfo& info, const ir::Kernel& k) {
  const abi::ArgLayout want = abi::arg_layout(k);
  const auto& have = info.layout.params;
  if (have.size() != want.params.size())
    return fmt::format("it records {} parameters, the kernel has {}", have.size(),
                       want.params.size());
  for (size_t i = 0; i < have.size(); ++i)
    if (have[i].name != want.params[i].name || !(have[i].type == want.params[i].type) ||
        have[i].first != want.params[i].first)
      return fmt::format("its parameter {} is '{}', the kernel's is '{}'", i, have[i].name,
                         want.params[i].name);
  if (info.layout.slot_count != want.slot_count)
    return fmt::format("it records {} argument slots, the kernel takes {}", info.layout.slot_count,
                       want.slot_count);
  // A GPU's code for a pipeline launches its producer's units after the kernel's own.
  auto launched = k.cube_dim;
  for (const ir::Op& op : k.body.ops)
    if (op.kind == ir::OpKind::Pipeline) launched[0] += ir::pipeline_producer_units(op.attr.i);
  if (info.cube_dim != k.cube_dim && info.cube_dim != launched)
    return "it records another cube size";
  return {};
}

// The slow path, for any device: trace -> the backend's passes -> its cache key text -> the
// disk cache, or the backend's compile (stored) -> loaded on the device.
struct Built {
  std::shared_ptr<const LoadedKernel> code;
  uint64_t flat_params = 0, written_params = 0;
};

Result<Built> build(const detail::BuildRequest& req) {
  Device& dev = *req.device;
  const backend::Target& target = dev.target();
  const backend::Backend& b = *target.backend;
  CompileReport report;
  report.kernel = req.def->name;
  const auto t_all = Clock::now();
  auto t = Clock::now();
  dsl::TraceRequest trace_req = req.trace;
  trace_req.target = backend::trace_target(target);
  trace_req.checked = req.options.checked;
  KILN_ASSIGN(ir::Kernel traced, dsl::trace(*req.def, *req.inst, trace_req));
  report.trace_ms = ms_since(t);
  Built built;
  const std::vector<ir::ParamViewUse> views = ir::view_use(traced);
  for (size_t i = 0; i < views.size() && i < 64; ++i) {
    if (views[i].flat) built.flat_params |= uint64_t{1} << i;
    if (views[i].written) built.written_params |= uint64_t{1} << i;
  }
  t = Clock::now();
  KILN_ASSIGN(ir::Kernel prepared, b.prepare(traced));
  KILN_TRY(backend::check_supported(b, prepared, target));
  report.passes_ms = ms_since(t);
  // The content address: everything that determines the code.
  t = Clock::now();
  const std::string versions =
      fmt::format("kiln {} (code {}) / {}", KILN_VERSION, backend::code_id(), b.versions());
  KILN_ASSIGN(std::string key_text, b.key_text(prepared, target, req.options));
  const std::string material =
      fmt::format("{}\n--\n{}\n--\nchecked={} fast_math={}\n--\n{}", key_text, target.key,
                  req.options.checked, req.options.fast_math, versions);
  const Hash128 hash = strong_hash(material);
  report.hash_ms = ms_since(t);
  const std::shared_ptr<DiskCache> cache = DiskCache::global();
  std::shared_ptr<const LoadedKernel> loaded;
  t = Clock::now();
  auto entry = cache->load(b.name(), hash, material);
  report.read_ms = ms_since(t);
  if (entry) {
    auto artifact = artifact_from_entry(std::move(*entry));
    if (artifact)
      if (std::string why = disagreement(artifact->info, prepared); !why.empty())
        artifact = Error(ErrorKind::Io,
                         fmt::format("it does not describe this kernel: {}; it is replaced", why));
    t = Clock::now();
    auto k = artifact ? dev.load(*artifact)
                      : Result<std::shared_ptr<const LoadedKernel>>(artifact.error());
    if (k) {
      report.load_ms = ms_since(t);
      report.from_disk = true;
      loaded = std::move(*k);
      counters().disk_hits++;
    } else {
      log_warning(fmt::format("cache entry {} for '{}' could not be loaded ({}); recompiling",
                              hash.hex(), req.def->name, k.error().message));
    }
  }
  if (!loaded) {
    KILN_ASSIGN(backend::Artifact artifact, b.compile(prepared, target, req.options));
    report.stages = artifact.timings;
    if (auto st =
            cache->store(b.name(), hash, material,
                         artifact_meta(req.def->name, target, versions, artifact), artifact.image);
        !st)
      log_warning_once(
          st.error().message,
          fmt::format("compiled kernels are not stored in the disk cache: {}", st.error().message));
    t = Clock::now();
    KILN_ASSIGN(loaded, dev.load(artifact));
    report.load_ms = ms_since(t);
    counters().compiles++;
  }
  report.total_ms = ms_since(t_all);
  (report.from_disk ? counters().disk_load_us : counters().compile_us) +=
      static_cast<uint64_t>(report.total_ms * 1000);
  dump_stages(req.def->name, hash, b, [&](const std::string& stage) -> Result<std::string> {
    if (stage == "ir") return ir::print(traced);
    if (stage == "ir-opt") return ir::print(prepared);
    return b.emit(prepared, stage, target, req.options);
  });
  t_report = report;
  built.code = std::move(loaded);
  return built;
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
    Result<Built> built = build(req);
    std::lock_guard<std::mutex> lock(spec->mu);
    if (built) {
      spec->code = std::move(built->code);
      spec->flat_params = built->flat_params;
      spec->written_params = built->written_params;
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
