// The backend table and what every backend shares: the "ir" and "ir-opt" stages, emitting any
// stage by name, checking a kernel's ops against a target.
#include "compiler/backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <mutex>

#include <fmt/format.h>

#include <xxhash.h>

#include "compiler/dsl/context.h"
#include "ir/printer.h"

namespace kiln::backend {

namespace {

std::mutex& table_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<const Backend*>& table() {
  static auto* t = new std::vector<const Backend*>();
  return *t;
}

}  // namespace

std::vector<ir::MatrixConfig> Backend::matrix_configs(const Target&) const {
  return ir::matrix_configs();
}

std::string Backend::unsupported(const ir::Kernel&, const ir::Op&, const Target&) const {
  return {};
}

Result<std::string> Backend::key_text(const ir::Kernel& prepared, const Target&,
                                      const Options&) const {
  return ir::print(prepared);
}

std::vector<Stage> stages(const Backend& b) {
  std::vector<Stage> out = {
      {"ir", ".kir", "the traced kernel"},
      {"ir-opt", ".opt.kir", "the kernel after the target's passes"},
  };
  for (const Stage& s : b.own_stages()) out.push_back(s);
  return out;
}

Result<std::string> emit_stage(const Backend& b, const ir::Kernel& traced, std::string_view stage,
                               const Target& t, const Options& o) {
  if (stage == "ir") return ir::print(traced);
  const auto own = b.own_stages();
  const bool known = stage == "ir-opt" || std::any_of(own.begin(), own.end(), [&](const Stage& s) {
                       return s.name == stage;
                     });
  if (!known) {
    std::string names;
    for (const Stage& s : stages(b)) names += (names.empty() ? "" : ", ") + s.name;
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("'{}' is not a stage of {} targets; the stages of '{}' are: {}", stage,
                             b.name(), t.name, names));
  }
  KILN_ASSIGN(ir::Kernel prepared, b.prepare(traced));
  if (stage == "ir-opt") return ir::print(prepared);
  KILN_TRY(check_supported(b, prepared, t));
  return b.emit(prepared, stage, t, o);
}

Status check_supported(const Backend& b, const ir::Kernel& k, const Target& t) {
  const Limits lim = b.limits(t);
  if (k.units_per_cube() > lim.max_units_per_cube)
    return Error(ErrorKind::Unsupported,
                 fmt::format("kernel '{}': a cube of {} units; {} allows at most {} units per cube",
                             k.name, k.units_per_cube(), t.name, lim.max_units_per_cube));
  if (k.cubes_per_cluster() > 1 && !t.features.tma)
    return Error(ErrorKind::Unsupported,
                 fmt::format("{}: error: kernel '{}' has clusters of {}x{}x{} cubes; clusters are "
                             "sm_90 features and {} has none (ask has_clusters() at trace time)",
                             k.where(k.cluster_dim_pos.known() ? k.cluster_dim_pos : k.pos), k.name,
                             k.cluster_dim[0], k.cluster_dim[1], k.cluster_dim[2], t.name));
  std::string split;
  ir::walk(k.body, [&](const ir::Op& op) {
    if (op.kind != ir::OpKind::Pipeline || !split.empty()) return;
    if (!ir::pipeline_registers(op.attr.i).set()) return;
    if (!t.features.setmaxnreg)
      split = fmt::format(
          "{}: error: kernel '{}': a pipeline's register split is setmaxnreg, an "
          "sm_90a, sm_100a and sm_120a instruction; {} has none (ask "
          "has_setmaxnreg() at trace time)",
          k.where(op), k.name, t.name);
    else if (k.units_per_cube() % 128 != 0)
      split = fmt::format(
          "{}: error: kernel '{}': a pipeline that splits registers needs whole "
          "warpgroups of consumers (setmaxnreg sets a warpgroup's), and the cube "
          "has {} units, not a multiple of 128",
          k.where(op), k.name, k.units_per_cube());
  });
  if (!split.empty()) return Error(ErrorKind::Unsupported, split);
  for (size_t v = 0; v < k.value_types.size(); ++v)
    if (k.value_types[v].lanes > lim.max_line)
      return Error(ErrorKind::Unsupported,
                   fmt::format("kernel '{}': lines of {} lanes; {} allows at most {}", k.name,
                               k.value_types[v].lanes, t.name, lim.max_line));
  std::string problem;
  const ir::Op* where = nullptr;
  ir::walk(k.body, [&](const ir::Op& op) {
    if (!problem.empty()) return;
    problem = b.unsupported(k, op, t);
    if (!problem.empty()) where = &op;
  });
  if (problem.empty()) return {};
  return Error(ErrorKind::Unsupported,
               fmt::format("{}: error: '{}' is not supported on {}: {}", k.where(*where),
                           ir::op_name(where->kind), t.name, problem));
}

std::shared_ptr<const dsl::TraceTarget> trace_target(const Target& t) {
  auto tt = std::make_shared<dsl::TraceTarget>();
  tt->name = t.name;
  tt->matrix = t.backend->matrix_configs(t);
  tt->features = t.features;
  return tt;
}

void register_backend(const Backend* b) {
  std::lock_guard<std::mutex> lock(table_mu());
  for (const Backend* have : table())
    if (have->name() == b->name()) return;
  table().push_back(b);
  // Listed in a fixed order, whatever order the files registered in.
  std::sort(table().begin(), table().end(),
            [](const Backend* x, const Backend* y) { return x->name() < y->name(); });
}

std::vector<const Backend*> all() {
  std::lock_guard<std::mutex> lock(table_mu());
  return table();
}

const Backend* find(std::string_view name) {
  for (const Backend* b : all())
    if (b->name() == name) return b;
  return nullptr;
}

const std::string& code_id() {
  static const std::string id = [] {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&code_id), &info) || !info.dli_fname)
      return std::string("unknown");
    std::ifstream f(info.dli_fname, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.empty()) return std::string("unknown");
    return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
  }();
  return id;
}

Result<Target> parse_target(std::string_view text) {
  for (const Backend* b : all())
    if (b->claims(text)) return b->parse_target(text);
  std::string forms;
  for (const Backend* b : all())
    forms += fmt::format("{}{}", forms.empty() ? "" : "; ", b->target_syntax());
  return Error(ErrorKind::InvalidArgument,
               fmt::format("unknown target '{}'; targets are: {} (see kiln targets)", text, forms));
}

}  // namespace kiln::backend
