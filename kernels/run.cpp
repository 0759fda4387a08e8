// The kernel runner behind `kiln run` and `kiln demo`.
#include "kernels/run.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "compiler/dsl/selection.h"
#include "ir/float16.h"

namespace kiln::kernels {

namespace {

using ir::ElemType;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The recipes of each name, one per shared object that registered one, in registration order.
std::map<std::string, std::vector<std::unique_ptr<RunRecipe>>, std::less<>>& recipes() {
  static auto* r = new std::map<std::string, std::vector<std::unique_ptr<RunRecipe>>, std::less<>>;
  return *r;
}
std::mutex& recipes_mu() {
  static std::mutex mu;
  return mu;
}

// ---- element conversions ---------------------------------------------------------------------

void put_elem(ElemType t, double v, void* p) {
  auto put = [&](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case ElemType::Bool:
      put(static_cast<uint8_t>(v != 0));
      break;
    case ElemType::I8:
      put(static_cast<int8_t>(v));
      break;
    case ElemType::I16:
      put(static_cast<int16_t>(v));
      break;
    case ElemType::I32:
      put(static_cast<int32_t>(v));
      break;
    case ElemType::I64:
      put(static_cast<int64_t>(v));
      break;
    case ElemType::U8:
      put(static_cast<uint8_t>(v));
      break;
    case ElemType::U16:
      put(static_cast<uint16_t>(v));
      break;
    case ElemType::U32:
      put(static_cast<uint32_t>(v));
      break;
    case ElemType::U64:
      put(static_cast<uint64_t>(v));
      break;
    case ElemType::F16:
      put(f16_bits(v));
      break;
    case ElemType::BF16:
      put(bf16_bits(v));
      break;
    case ElemType::F8E4M3:
      put(e4m3_bits(v));
      break;
    case ElemType::F8E5M2:
      put(e5m2_bits(v));
      break;
    case ElemType::F32:
      put(static_cast<float>(v));
      break;
    case ElemType::F64:
      put(v);
      break;
    default:
      KILN_CHECK(false, "kiln run: an element type tensors cannot hold");
  }
}

double get_elem(ElemType t, const void* p) {
  auto get = [&](auto x) {
    std::memcpy(&x, p, sizeof x);
    return static_cast<double>(x);
  };
  switch (t) {
    case ElemType::Bool:
      return get(uint8_t{});
    case ElemType::I8:
      return get(int8_t{});
    case ElemType::I16:
      return get(int16_t{});
    case ElemType::I32:
      return get(int32_t{});
    case ElemType::I64:
      return get(int64_t{});
    case ElemType::U8:
      return get(uint8_t{});
    case ElemType::U16:
      return get(uint16_t{});
    case ElemType::U32:
      return get(uint32_t{});
    case ElemType::U64:
      return get(uint64_t{});
    case ElemType::F16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return f16_value(b);
    }
    case ElemType::BF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return bf16_value(b);
    }
    case ElemType::F8E4M3:
      return e4m3_value(*static_cast<const uint8_t*>(p));
    case ElemType::F8E5M2:
      return e5m2_value(*static_cast<const uint8_t*>(p));
    case ElemType::F32:
      return get(float{});
    case ElemType::F64:
      return get(double{});
    default:
      KILN_CHECK(false, "kiln run: an element type tensors cannot hold");
  }
  return 0;
}

// The value as the element type holds it.
double round_to_elem(ElemType t, double v) {
  if (t == ElemType::F64) return v;
  if (t == ElemType::F32) return static_cast<double>(static_cast<float>(v));
  unsigned char b[8];
  put_elem(t, v, b);
  return get_elem(t, b);
}

std::pair<double, double> default_range(ElemType t) {
  if (t == ElemType::Bool) return {0, 1};
  if (ir::is_float(t)) return {-1, 1};
  if (ir::is_signed(t)) return {-100, 100};
  return {0, 100};
}

// Tolerances by element type: a few units in the last place of a sum of a few thousand terms.
std::pair<double, double> default_tolerance(ElemType t) {
  switch (t) {
    case ElemType::F64:
      return {1e-12, 1e-12};
    case ElemType::F32:
      return {2e-5, 1e-5};
    case ElemType::F16:
      return {4e-3, 2e-3};
    case ElemType::BF16:
      return {3e-2, 1e-2};
    case ElemType::F8E4M3:  // 3 and 2 mantissa bits
      return {1.3e-1, 6.3e-2};
    case ElemType::F8E5M2:
      return {2.5e-1, 1.3e-1};
    default:
      return {0, 0};
  }
}

Result<std::vector<double>> download_values(const Tensor& t) {
  std::vector<unsigned char> bytes(static_cast<size_t>(t.numel()) * t.element_bytes());
  KILN_TRY(t.download(bytes.data(), bytes.size()));
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = get_elem(t.dtype(), bytes.data() + i * t.element_bytes());
  return v;
}

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
uint64_t available_host_memory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lu kB", &kib) == 1) break;
  std::fclose(f);
  return kib * 1024;
}

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30))
    return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (uint64_t{1} << 20))
    return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  return fmt::format("{} KiB", (b + 1023) / 1024);
}

// The integers an integer element type holds, as doubles (exact up to 2^53; the 64-bit bounds
// round outward, which the caller's truncation test then refuses).
std::pair<double, double> integer_range(ElemType t) {
  const int bits = ir::elem_bytes(t) * 8;
  if (ir::is_signed(t)) return {-std::ldexp(1.0, bits - 1), std::ldexp(1.0, bits - 1) - 1};
  return {0, std::ldexp(1.0, bits) - 1};
}

std::string dims_text(const std::vector<int64_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += fmt::format("{}{}", i ? "x" : "", s[i]);
  return out;
}

std::string given_shapes_text(const RunConfig& config) {
  std::string out;
  for (const auto& [n, dims] : config.shapes)
    out += fmt::format("{}--shape {}={}", out.empty() ? "" : " ", n, dims_text(dims));
  return out.empty() ? "the defaults" : out;
}

Error usage(std::string_view kernel, const std::string& what) {
  return Error(ErrorKind::InvalidArgument, fmt::format("kernel '{}': {}", kernel, what));
}

}  // namespace

// ---- RunData ---------------------------------------------------------------------------------

std::vector<double>& RunData::operator[](std::string_view tensor) {
  auto it = values.find(tensor);
  KILN_CHECK(it != values.end(), "a run recipe names a tensor the kernel does not have");
  return it->second;
}
const std::vector<double>& RunData::operator[](std::string_view tensor) const {
  auto it = values.find(tensor);
  KILN_CHECK(it != values.end(), "a run recipe names a tensor the kernel does not have");
  return it->second;
}
const std::vector<int64_t>& RunData::shape(std::string_view tensor) const {
  auto it = shapes.find(tensor);
  KILN_CHECK(it != shapes.end(), "a run recipe uses the shape of a tensor before it has one");
  return it->second;
}
int64_t RunData::numel(std::string_view tensor) const {
  int64_t n = 1;
  for (int64_t d : shape(tensor)) n *= d;
  return n;
}
double RunData::scalar(std::string_view name) const {
  auto it = scalars.find(name);
  KILN_CHECK(it != scalars.end(), "a run recipe names a scalar the kernel does not have");
  return it->second;
}
int64_t RunData::comptime(std::string_view name) const {
  auto it = comptimes.find(name);
  KILN_CHECK(it != comptimes.end(),
             "a run recipe names a comptime parameter the kernel does not have");
  if (it->second == "true") return 1;
  if (it->second == "false") return 0;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  KILN_CHECK(end != it->second.c_str() && *end == '\0',
             "a run recipe reads a non-integer comptime value as an integer");
  return v;
}
int RunData::line(std::string_view tensor) const {
  auto it = lines.find(tensor);
  KILN_CHECK(it != lines.end(), "a run recipe names a tensor the kernel does not have");
  return it->second;
}

ElemType RunData::dtype(std::string_view name) const {
  auto it = dtypes.find(name);
  KILN_CHECK(it != dtypes.end(), "a run recipe asks the type of a parameter the kernel lacks");
  return it->second;
}
double RunData::round(std::string_view name, double v) const {
  return round_to_elem(dtype(name), v);
}

// ---- recipes ---------------------------------------------------------------------------------

RunRecipe& RunRecipe::shape(std::string tensor, std::vector<int64_t> dims) {
  shapes_.push_back({std::move(tensor), std::move(dims), {}});
  return *this;
}
RunRecipe& RunRecipe::shape(std::string tensor, ShapeFn fn) {
  shapes_.push_back({std::move(tensor), std::nullopt, std::move(fn)});
  return *this;
}
RunRecipe& RunRecipe::same_shape(std::string tensor, std::string as) {
  return shape(std::move(tensor), [as](const RunData& d) { return d.shape(as); });
}
RunRecipe& RunRecipe::values(std::string tensor, double lo, double hi) {
  ranges_[std::move(tensor)] = {lo, hi};
  return *this;
}
RunRecipe& RunRecipe::zeros(std::string tensor) {
  return values(std::move(tensor), 0, 0);
}
RunRecipe& RunRecipe::scalar(std::string name, double value) {
  scalars_[std::move(name)] = value;
  return *this;
}
RunRecipe& RunRecipe::cubes(DimFn fn) {
  cubes_ = std::move(fn);
  return *this;
}
RunRecipe& RunRecipe::cube_dim(DimFn fn) {
  cube_dim_ = std::move(fn);
  return *this;
}
RunRecipe& RunRecipe::reference(std::function<void(RunData&)> fn) {
  reference_ = std::move(fn);
  return *this;
}
RunRecipe& RunRecipe::tolerance(double rel, double abs) {
  tolerance_ = std::pair{rel, abs};
  return *this;
}
RunRecipe& RunRecipe::flops(std::function<double(const RunData&)> fn) {
  flops_ = std::move(fn);
  return *this;
}

RunRecipe& RunRecipe::gpu_arch(std::string arch) {
  gpu_arch_ = std::move(arch);
  return *this;
}

RunRecipe& RunRecipe::host(HostOp op) {
  host_ = std::move(op);
  return *this;
}

RunRecipe& RunRecipe::tolerance(
    std::function<std::pair<double, double>(const RunData&, std::string_view)> fn) {
  tolerance_fn_ = std::move(fn);
  return *this;
}

Placement placement(const RunRecipe& recipe, const DeviceInfo& device) {
  const std::string& arch = recipe.gpu_arch();
  const auto base = [](std::string_view a) {
    if (!a.empty() && a.back() == 'a') a.remove_suffix(1);
    return a;
  };
  Placement p;
  if (arch.empty() || device.any_arch || base(device.arch) == base(arch)) return p;
  if (!device.retarget.empty())
    p.emulator = fmt::format(fmt::runtime(device.retarget), arch);
  else
    p.skip = fmt::format("written for {}, this GPU is {}", arch, device.arch);
  return p;
}

RunRecipe& run_recipe(std::string_view kernel, const void* anchor) {
  Dl_info info{};
  const std::string object =
      anchor && ::dladdr(anchor, &info) && info.dli_fname ? info.dli_fname : "";
  std::lock_guard<std::mutex> lock(recipes_mu());
  auto& list = recipes()[std::string(kernel)];
  if (!anchor && !list.empty()) return *list.back();
  for (auto& r : list)
    if (r->object_ == object) return *r;
  list.push_back(std::make_unique<RunRecipe>(std::string(kernel)));
  list.back()->object_ = object;
  return *list.back();
}

RunRecipe& run_recipe(std::string_view kernel) {
  return run_recipe(kernel, nullptr);
}

namespace {
const RunRecipe* find_locked(std::string_view kernel) {
  auto it = recipes().find(kernel);
  if (it == recipes().end() || it->second.empty()) return nullptr;
  const dsl::KernelDef* def = dsl::Registry::global().find(kernel);
  if (!def || def->object.empty()) return it->second.back().get();
  for (const auto& r : it->second)
    if (r->object() == def->object || r->object().empty()) return r.get();
  return nullptr;
}
}  // namespace

std::vector<std::string> host_op_names() {
  std::lock_guard<std::mutex> lock(recipes_mu());
  std::vector<std::string> names;
  for (const auto& [name, list] : recipes())
    if (const RunRecipe* r = find_locked(name); r && r->host_op()) names.push_back(name);
  return names;
}

const RunRecipe* find_run_recipe(std::string_view kernel) {
  std::lock_guard<std::mutex> lock(recipes_mu());
  return find_locked(kernel);
}

struct RunRecipeAccess {
  static const auto& shapes(const RunRecipe& r) { return r.shapes_; }
  static const auto& ranges(const RunRecipe& r) { return r.ranges_; }
  static const auto& scalars(const RunRecipe& r) { return r.scalars_; }
  static const auto& cubes(const RunRecipe& r) { return r.cubes_; }
  static const auto& cube_dim(const RunRecipe& r) { return r.cube_dim_; }
  static const auto& reference(const RunRecipe& r) { return r.reference_; }
  static const auto& tolerance(const RunRecipe& r) { return r.tolerance_; }
  static const auto& tolerance_fn(const RunRecipe& r) { return r.tolerance_fn_; }
  static const auto& flops(const RunRecipe& r) { return r.flops_; }
};

// ---- the runner ------------------------------------------------------------------------------

namespace {

// A host operation's parameters as a kernel definition's, so that the runner treats both alike.
dsl::KernelDef host_def(std::string_view name, const HostOp& op) {
  dsl::KernelDef def;
  def.name = std::string(name);
  def.description = op.description;
  def.file = "(host operation)";
  for (const auto& types : op.variants) {
    dsl::Instantiation inst;
    for (size_t i = 0; i < op.tensors.size(); ++i) {
      dsl::ParamInfo p;
      p.name = op.tensors[i].name;
      p.kind = dsl::ParamKind::Tensor;
      p.dtype = types.at(i);
      p.const_qualified = op.tensors[i].input;
      inst.params.push_back(std::move(p));
    }
    for (const auto& [sname, stype] : op.scalars) {
      dsl::ParamInfo p;
      p.name = sname;
      p.kind = dsl::ParamKind::Scalar;
      p.dtype = stype;
      inst.params.push_back(std::move(p));
    }
    def.instantiations.push_back(std::move(inst));
  }
  return def;
}

// One `kiln run`: each phase below reads what the earlier ones decided and adds its own part
// (the instantiation, the values of comptime and scalar parameters, the cube size, shapes and
// line widths, the tensors' plans, the grid, the arguments), then the first launch is checked
// against the reference and the timed launches follow.
class Runner {
 public:
  Runner(Runtime& rt, std::string_view name, const RunConfig& config)
      : rt_(rt),
        name_(name),
        config_(config),
        recipe_(find_run_recipe(name)),
        host_(recipe_ ? recipe_->host_op() : nullptr) {}

  Result<RunResult> run() {
    KILN_TRY(choose_instantiation());
    KILN_TRY(check_option_names());
    KILN_TRY(read_values());
    KILN_TRY(choose_cube_dim());
    KILN_TRY(resolve_shapes());
    KILN_TRY(plan_tensors());
    KILN_TRY(make_tensors());
    KILN_TRY(choose_grid());
    KILN_TRY(make_arguments());
    KILN_TRY(first_launch());
    if (has_reference()) KILN_TRY(check_reference());
    KILN_TRY(timed_launches());
    return std::move(result_);
  }

 private:
  using A = RunRecipeAccess;

  // A tensor's share of the run's random stream and its size.
  struct Plan {
    const dsl::ParamInfo* p;
    size_t numel = 0;
    double lo = 0, hi = 0;
    uint64_t rng_start = 0;
  };

  static bool is_memory(const dsl::ParamInfo& p) {
    return p.kind == dsl::ParamKind::Tensor || p.kind == dsl::ParamKind::Array;
  }
  static bool too_large(const std::vector<int64_t>& shape) {
    uint64_t n = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && n > (uint64_t{1} << 48) / static_cast<uint64_t>(d))) return true;
      n *= static_cast<uint64_t>(d);
    }
    return false;
  }
  bool has_reference() const { return recipe_ && A::reference(*recipe_); }
  Error usage(const std::string& what) const { return kernels::usage(name_, what); }
  const dsl::ParamInfo* find_param(std::string_view n) const {
    for (const auto& p : inst_->params)
      if (p.name == n) return &p;
    return nullptr;
  }

  // The instantiation: the one whose tensor types match --dtype, else the first.
  Status choose_instantiation() {
    if (host_) {
      host_definition_ = host_def(name_, *host_);
      def_ = &host_definition_;
    } else {
      KILN_ASSIGN(kernel_, rt_.kernel(name_));
      def_ = &kernel_.def();
    }
    if (!def_->problem.empty()) return usage(def_->problem);
    const auto& first_params = def_->instantiations.front().params;
    std::vector<std::optional<ElemType>> wanted(first_params.size());
    std::string asked;
    for (const auto& [pname, tname] : config_.dtypes) {
      auto t = ir::parse_elem_type(tname);
      if (!t)
        return usage(
            fmt::format("'{}' is not an element type (--dtype {}={})", tname, pname, tname));
      for (size_t i = 0; i < first_params.size(); ++i)
        if (first_params[i].name == pname) wanted[i] = *t;
      asked += fmt::format("{}{}: {}", asked.empty() ? "" : ", ", pname, tname);
    }
    const auto index = dsl::find_instantiation(*def_, [&](size_t i) { return wanted[i]; });
    if (!index) return dsl::no_instantiation(*def_, asked);
    inst_ = &def_->instantiations[*index];
    for (const dsl::ParamInfo& p : inst_->params)
      if (p.runtime()) data_.dtypes[p.name] = p.dtype;
    return {};
  }

  // Every --set, --shape, --line and --dtype names a parameter of the right kind.
  Status check_option_names() const {
    std::string names;
    for (const auto& p : inst_->params) names += (names.empty() ? "" : ", ") + p.name;
    auto unknown = [&](const char* option, const std::string& n) {
      return usage(fmt::format("{} names '{}', which is not a parameter (parameters: {})", option,
                               n, names));
    };
    for (const auto& [n, v] : config_.set)
      if (!find_param(n) || is_memory(*find_param(n))) return unknown("--set", n);
    for (const auto& [n, v] : config_.shapes)
      if (!find_param(n) || !is_memory(*find_param(n))) return unknown("--shape", n);
    for (const auto& [n, v] : config_.lines) {
      if (!find_param(n) || !is_memory(*find_param(n))) return unknown("--line", n);
      if (!ir::valid_lanes(v))
        return usage(fmt::format("--line {}={}: a line width is 1, 2, 4, 8 or 16", n, v));
    }
    for (const auto& [n, v] : config_.dtypes)
      if (!find_param(n)) return unknown("--dtype", n);
    return {};
  }

  // Comptime and scalar values: given with --set, else the declared default.
  Status read_values() {
    const auto& params = inst_->params;
    comptime_values_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const dsl::ParamInfo& p = params[i];
      if (p.kind == dsl::ParamKind::Comptime) {
        KILN_ASSIGN(comptime_values_[i], read_comptime(p));
        data_.comptimes[p.name] = comptime_values_[i].format();
      } else if (p.kind == dsl::ParamKind::Scalar) {
        KILN_ASSIGN(data_.scalars[p.name], read_scalar(p));
      }
    }
    return {};
  }

  Result<dsl::ComptimeValue> read_comptime(const dsl::ParamInfo& p) const {
    auto given = config_.set.find(p.name);
    if (given == config_.set.end()) {
      if (p.default_value) return *p.default_value;
      return usage(fmt::format("comptime parameter '{}' has no default; pass --set {}=VALUE",
                               p.name, p.name));
    }
    auto v = p.parse(given->second);
    if (!v) return usage(fmt::format("--set {}={}: {}", p.name, given->second, v.error().message));
    if (auto st = dsl::check_comptime_range(*def_, p, *v); !st)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("--set {}={}: {}", p.name, given->second, st.error().message));
    return *v;
  }

  Result<double> read_scalar(const dsl::ParamInfo& p) const {
    auto given = config_.set.find(p.name);
    if (given == config_.set.end()) {
      if (recipe_ && A::scalars(*recipe_).count(p.name))
        return A::scalars(*recipe_).find(p.name)->second;
      return usage(
          fmt::format("scalar parameter '{}' has no default; pass --set {}=VALUE", p.name, p.name));
    }
    const std::string& text = given->second;
    char* end = nullptr;
    const double v = text == "true" ? 1 : text == "false" ? 0 : std::strtod(text.c_str(), &end);
    if (text != "true" && text != "false" && (end == text.c_str() || *end != '\0'))
      return usage(fmt::format("--set {}={}: not a number", p.name, text));
    if (!ir::is_float(p.dtype) && p.dtype != ElemType::Bool) {
      // Checked here, against the type, so that the value is never echoed wrapped.
      const auto [lo, hi] = integer_range(p.dtype);
      if (!(std::trunc(v) == v && v >= lo && v <= hi))
        return usage(fmt::format("--set {}={}: '{}' is {} and takes an integer from {} to {}",
                                 p.name, text, p.name, ir::elem_name(p.dtype),
                                 fmt::format("{:.0f}", lo), fmt::format("{:.0f}", hi)));
    }
    return v;
  }

  // The cube size: given, else the recipe's, else the kernel's default or what it requires.
  Status choose_cube_dim() {
    const auto& d = def_->default_cube_dim;
    if (config_.cube_dim) {
      data_.cube_dim = *config_.cube_dim;
    } else if (recipe_ && A::cube_dim(*recipe_)) {
      data_.cube_dim = A::cube_dim(*recipe_)(data_);
    } else {
      data_.cube_dim = Dim3(d[0], d[1], d[2]);
      std::vector<dsl::ComptimeValue> in_order;
      for (size_t i = 0; i < inst_->params.size(); ++i)
        if (!inst_->params[i].runtime()) in_order.push_back(comptime_values_[i]);
      KILN_ASSIGN(auto needed, dsl::required_cube_dim(*def_, *inst_, in_order));
      if (needed) data_.cube_dim = Dim3((*needed)[0], (*needed)[1], (*needed)[2]);
    }
    result_.cube_dim = data_.cube_dim;
    return {};
  }

  // Shapes: given, else declared (constants first, then computed in declaration order). A
  // given shape is checked first, since the recipe's shape functions compute with it.
  Status resolve_shapes() {
    for (const auto& [n, dims] : config_.shapes) {
      if (too_large(dims))
        return usage(
            fmt::format("--shape {}={}: {}", n, dims_text(dims),
                        std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })
                            ? "a dimension is negative"
                            : "more than 2^48 elements"));
      data_.shapes[n] = dims;
    }
    if (recipe_) {
      for (const auto& decl : A::shapes(*recipe_))
        if (decl.dims && !data_.shapes.count(decl.name)) data_.shapes[decl.name] = *decl.dims;
      for (const auto& decl : A::shapes(*recipe_)) {
        if (decl.dims) continue;
        resolve_lines();
        // A function that reads a dimension the given shapes lack throws std::out_of_range,
        // which run() turns into an error naming the --shapes.
        std::vector<int64_t> derived = decl.fn(data_);
        auto given = data_.shapes.find(decl.name);
        // A shape that follows from the others cannot be chosen apart from them: the kernel
        // would index past the tensor.
        if (given != data_.shapes.end() && given->second != derived)
          return usage(
              fmt::format("tensor '{}' must be {} with these arguments (its shape "
                          "follows from the others); drop --shape {} or make it {}",
                          decl.name, dims_text(derived), decl.name, dims_text(derived)));
        data_.shapes[decl.name] = std::move(derived);
      }
    }
    for (const auto& p : inst_->params)
      if (is_memory(p) && !data_.shapes.count(p.name))
        return usage(fmt::format("tensor '{}' has no shape; pass --shape {}=AxB", p.name, p.name));
    resolve_lines();
    return {};
  }

  // Line widths follow from shapes: the runner's tensors start on 64-byte boundaries, so the
  // widest line is the widest that divides the innermost dimension (a launch picks the same).
  // A shape computed from a line width sees the widths of the shapes known before it.
  void resolve_lines() {
    const auto& params = inst_->params;
    const int common = dsl::line_max_width(*inst_, [&](size_t i) {
      const dsl::ParamInfo& p = params[i];
      if (config_.lines.count(p.name) || !data_.shapes.count(p.name)) return 0;
      const auto& shape = data_.shapes[p.name];
      int w = rt_.max_lanes(p.dtype);
      while (w > 1 && (shape.empty() || shape.back() % w != 0)) w /= 2;
      return w;
    });
    for (const auto& p : params) {
      if (!is_memory(p) || !data_.shapes.count(p.name)) continue;
      int w = p.default_line == 0 ? common : p.default_line;
      if (auto it = config_.lines.find(p.name); it != config_.lines.end()) w = it->second;
      data_.lines[p.name] = w;
    }
  }

  // Tensors with random inputs. Each tensor's values are its own stretch of one splitmix64
  // stream, so they can be made again instead of kept: host memory stays under three times
  // the tensors' size (docs/runtime.md, "Running a kernel by name").
  Status plan_tensors() {
    result_.kernel = def_->name;
    result_.host_op = host_ != nullptr;
    result_.device = rt_.device().name;
    result_.seed =
        config_.seed
            ? config_.seed
            : (uint64_t{std::random_device{}()} << 20 | std::random_device{}()) % 1000000007 + 1;
    uint64_t rng_state = result_.seed, tensor_bytes = 0, output_bytes = 0, double_bytes = 0,
             largest = 0;
    for (const auto& p : inst_->params) {
      if (!is_memory(p)) continue;
      const auto& shape = data_.shapes[p.name];
      if (p.kind == dsl::ParamKind::Array && shape.size() != 1)
        return usage(fmt::format("array '{}' takes a 1-D shape, got {}", p.name, dims_text(shape)));
      Plan plan{&p};
      if (too_large(shape))
        return usage(fmt::format("tensor '{}' of shape {} is too large", p.name, dims_text(shape)));
      uint64_t n = 1;
      for (int64_t d : shape) n *= static_cast<uint64_t>(d);
      plan.numel = static_cast<size_t>(n);
      std::tie(plan.lo, plan.hi) = default_range(p.dtype);
      if (recipe_ && A::ranges(*recipe_).count(p.name))
        std::tie(plan.lo, plan.hi) = A::ranges(*recipe_).find(p.name)->second;
      plan.rng_start = rng_state;
      rng_state += 0x9e3779b97f4a7c15ull * plan.numel;  // splitmix64 steps by a constant
      const uint64_t bytes = n * static_cast<uint64_t>(ir::elem_bytes(p.dtype));
      tensor_bytes += bytes;
      largest = std::max(largest, bytes);
      if (!p.const_qualified) output_bytes += bytes;
      double_bytes += n * sizeof(double);
      plans_.push_back(plan);
    }
    result_.bytes = tensor_bytes;
    if (recipe_ && A::flops(*recipe_)) result_.flops = A::flops(*recipe_)(data_);
    // What this run holds at its peak, checked against the memory the host has free, so that a
    // shape too large fails here with its size instead of in the out-of-memory killer. The
    // launch comes first (it validates every argument before anything is computed): the
    // device's tensors (host memory on the CPU), the initial outputs and one tensor's bytes;
    // then the reference: every tensor as doubles and the computed outputs.
    const uint64_t host_peak =
        std::max(has_reference() ? double_bytes + output_bytes : 0,
                 (rt_.device().host_memory ? tensor_bytes : 0) + 2 * output_bytes + largest);
    if (const uint64_t avail = available_host_memory(); avail && host_peak > avail)
      return Error(ErrorKind::OutOfMemory,
                   fmt::format("kernel '{}': these tensors ({}) need about {} of host memory to "
                               "run and check, and only {} is free; pass a smaller --shape",
                               name_, human_bytes(tensor_bytes), human_bytes(host_peak),
                               human_bytes(avail)));
    return {};
  }

  template <class Put>
  static void values_of(const Plan& plan, Put&& put) {
    uint64_t state = plan.rng_start;
    for (size_t i = 0; i < plan.numel; ++i) {
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      double x = plan.lo + (plan.hi - plan.lo) * (static_cast<double>(z >> 11) * 0x1.0p-53);
      if (!ir::is_float(plan.p->dtype)) x = std::round(x);
      put(i, round_to_elem(plan.p->dtype, x));
    }
  }

  // The device's tensors with their inputs. They are made twice when there is a reference: for
  // the first launch, then again for the timed ones, so that the reference (every tensor as
  // doubles) never shares the host with them. The map's entries stay put (launch arguments
  // point at them); only the tensors in them are replaced.
  Status make_tensors() {
    for (const Plan& plan : plans_) {
      const dsl::ParamInfo& p = *plan.p;
      KILN_ASSIGN(Tensor t, rt_.empty(p.dtype, std::span<const int64_t>(data_.shapes[p.name])));
      const size_t es = static_cast<size_t>(ir::elem_bytes(p.dtype));
      std::vector<unsigned char> bytes(plan.numel * es);
      values_of(plan, [&](size_t i, double x) { put_elem(p.dtype, x, bytes.data() + i * es); });
      KILN_TRY(t.upload(bytes.data(), bytes.size()));
      if (!p.const_qualified) initial_[p.name] = std::move(bytes);  // restored before each run
      tensors_[p.name] = std::move(t);
    }
    return {};
  }

  void drop_tensors() {
    for (auto& [n, t] : tensors_) t = Tensor();
    initial_.clear();
    rt_.trim();
  }

  // The grid: given, else the recipe's; a host operation picks its own.
  Status choose_grid() {
    if (host_ && config_.checked)
      return usage(
          fmt::format("'{}' runs through its host entry point, whose launches follow "
                      "the runtime's checked mode: open the runtime with "
                      "RuntimeOptions::checked (kiln run --checked does)",
                      name_));
    if (host_ && (config_.cubes || config_.cube_dim || !config_.lines.empty()))
      return usage(
          fmt::format("'{}' runs through its host entry point, which picks the "
                      "kernels, their grids and line widths; drop --cubes, "
                      "--cube-dim and --line",
                      name_));
    if (host_)
      result_.cubes = Dim3(0, 0, 0);
    else if (config_.cubes)
      result_.cubes = *config_.cubes;
    else if (recipe_ && A::cubes(*recipe_))
      result_.cubes = A::cubes(*recipe_)(data_);
    else
      return usage("the kernel declares no cube count (KILN_RUN ... .cubes); pass --cubes X[xYxZ]");
    return {};
  }

  // The launch arguments and options, and the text that lists them.
  Status make_arguments() {
    const auto& params = inst_->params;
    options_.checked = config_.checked;
    args_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const dsl::ParamInfo& p = params[i];
      LaunchArg& a = args_[i];
      std::string text;
      if (is_memory(p)) {
        options_.lines.emplace_back(p.name, data_.lines[p.name]);
        a.kind = LaunchArg::Kind::Tensor;
        a.tensor = &tensors_.find(p.name)->second;
        text = fmt::format("{}: {}[{}] line {}", p.name, ir::elem_name(p.dtype),
                           dims_text(data_.shapes[p.name]), data_.lines[p.name]);
      } else if (p.kind == dsl::ParamKind::Scalar) {
        KILN_TRY(scalar_argument(p, a));
        text = fmt::format("{} = {}", p.name, data_.scalars[p.name]);
      } else {
        a.kind = LaunchArg::Kind::Value;
        a.comptime = comptime_values_[i];
        text = fmt::format("{} = {}", p.name, a.comptime.format());
      }
      result_.arguments += (result_.arguments.empty() ? "" : ", ") + text;
    }
    return {};
  }

  Status scalar_argument(const dsl::ParamInfo& p, LaunchArg& a) {
    const double v = data_.scalars[p.name];
    a.kind = LaunchArg::Kind::Number;
    if (p.dtype == ElemType::Bool) {
      a.num = LaunchArg::Num::Bool;
      a.u = v != 0;
    } else if (ir::is_float(p.dtype)) {
      a.num = LaunchArg::Num::Float;
      a.f = v;
    } else if (ir::is_signed(p.dtype)) {
      a.num = LaunchArg::Num::Int;
      a.i = static_cast<int64_t>(v);
    } else {
      if (v < 0)
        return usage(fmt::format("scalar '{}' is {} and cannot be negative", p.name,
                                 ir::elem_name(p.dtype)));
      a.num = LaunchArg::Num::UInt;
      a.u = static_cast<uint64_t>(v);
    }
    if (!ir::is_float(p.dtype) && std::trunc(v) != v)
      return usage(fmt::format("scalar '{}' is {} and takes an integer, got {}", p.name,
                               ir::elem_name(p.dtype), v));
    return {};
  }

  // One run: the kernel's launch, or the host operation's call (checked mode is the runtime's).
  Status launch(const LaunchOptions& options) {
    if (host_) return host_->call(rt_, tensors_, data_);
    return rt_.launch_args(kernel_, result_.cubes, result_.cube_dim, options, args_);
  }

  // The first launch (compiling if needed). A grid, line width or shape the caller chose
  // instead of the kernel's recipe runs it in checked mode, so that a footprint the tensors do
  // not have is reported instead of written past them.
  Status first_launch() {
    LaunchOptions first = options_;
    result_.validated =
        !host_ && !config_.checked &&
        (config_.cubes || config_.cube_dim || !config_.lines.empty() || !config_.shapes.empty());
    if (result_.validated) first.checked = true;
    const CacheStats before = cache_stats();
    const auto t0 = Clock::now();
    KILN_TRY(launch(first));
    KILN_TRY(rt_.sync());
    result_.first_ms = ms_since(t0);
    result_.plan = data_.plan;
    const CacheStats after = cache_stats();
    if (after.compiles + after.disk_hits > before.compiles + before.disk_hits) {
      result_.compiled = true;
      result_.compile = last_compile_report();
    }
    if (config_.keep_outputs)
      for (const auto& p : inst_->params)
        if (is_memory(p) && !p.const_qualified) {
          KILN_ASSIGN(result_.outputs[p.name], download_values(tensors_.find(p.name)->second));
        }
    return {};
  }

  // What the first launch wrote, against the reference computed from the same values in
  // double precision (kept as the element type holds its results, which is what they are
  // compared as).
  Status check_reference() {
    std::map<std::string, std::vector<unsigned char>, std::less<>> computed;
    for (const auto& p : inst_->params) {
      if (!is_memory(p) || p.const_qualified) continue;
      const Tensor& t = tensors_.find(p.name)->second;
      std::vector<unsigned char>& got = computed[p.name];
      got.resize(static_cast<size_t>(t.numel()) * t.element_bytes());
      KILN_TRY(t.download(got.data(), got.size()));
    }
    drop_tensors();
    for (const Plan& plan : plans_) {
      std::vector<double> v(plan.numel);
      values_of(plan, [&](size_t i, double x) { v[i] = x; });
      data_.values[plan.p->name] = std::move(v);
    }
    A::reference (*recipe_)(data_);  // std::out_of_range, as above
    result_.has_reference = true;
    for (const auto& p : inst_->params) {
      if (!is_memory(p) || p.const_qualified) continue;
      TensorCheck c = compare(p, computed[p.name], data_.values[p.name]);
      if (c.mismatches) result_.passed = false;
      result_.checks.push_back(c);
    }
    data_.values.clear();
    return {};
  }

  TensorCheck compare(const dsl::ParamInfo& p, const std::vector<unsigned char>& got,
                      const std::vector<double>& want) const {
    const size_t es = static_cast<size_t>(ir::elem_bytes(p.dtype));
    TensorCheck c;
    c.name = p.name;
    std::tie(c.rel_tol, c.abs_tol) = A::tolerance_fn(*recipe_)
                                         ? A::tolerance_fn(*recipe_)(data_, p.name)
                                     : A::tolerance(*recipe_) ? *A::tolerance(*recipe_)
                                                              : default_tolerance(p.dtype);
    for (size_t i = 0; i * es < got.size(); ++i) {
      const double got_i = get_elem(p.dtype, got.data() + i * es);
      const double want_i = round_to_elem(p.dtype, want[i]);  // as the type holds it
      const double err = got_i == want_i ? 0.0 : std::fabs(got_i - want_i);
      const bool bad = !(err <= c.abs_tol + c.rel_tol * std::fabs(want_i)) &&
                       !(std::isnan(got_i) && std::isnan(want_i));
      c.max_abs_error = std::max(c.max_abs_error, std::isnan(err) ? INFINITY : err);
      if (want_i != 0) c.max_rel_error = std::max(c.max_rel_error, err / std::fabs(want_i));
      if (bad && c.mismatches++ == 0) {
        c.first_bad = static_cast<int64_t>(i);
        c.got = got_i;
        c.want = want_i;
      }
    }
    return c;
  }

  // Timed launches, each from the same inputs (after an untimed one that compiles the
  // unchecked code, when the first run was checked only to validate the grid).
  Status timed_launches() {
    if (has_reference() && config_.repeat > 0) KILN_TRY(make_tensors());
    if (result_.validated && config_.repeat > 0) {
      KILN_TRY(launch(options_));
      KILN_TRY(rt_.sync());
    }
    for (int r = 0; r < config_.repeat; ++r) {
      for (const auto& [n, bytes] : initial_)
        KILN_TRY(tensors_.find(n)->second.upload(bytes.data(), bytes.size()));
      const auto t0 = Clock::now();
      KILN_TRY(launch(options_));
      KILN_TRY(rt_.sync());
      result_.times_ms.push_back(ms_since(t0));
    }
    if (!result_.times_ms.empty()) {
      std::vector<double> sorted = result_.times_ms;
      std::sort(sorted.begin(), sorted.end());
      result_.median_ms = sorted[sorted.size() / 2];
      result_.min_ms = sorted.front();
    }
    return {};
  }

  Runtime& rt_;
  std::string_view name_;
  const RunConfig& config_;
  const RunRecipe* recipe_;
  const HostOp* host_;
  Kernel kernel_;
  dsl::KernelDef host_definition_;
  const dsl::KernelDef* def_ = nullptr;
  const dsl::Instantiation* inst_ = nullptr;
  RunData data_;
  std::vector<dsl::ComptimeValue> comptime_values_;
  std::vector<Plan> plans_;
  std::map<std::string, Tensor, std::less<>> tensors_;
  std::map<std::string, std::vector<unsigned char>, std::less<>> initial_;
  std::vector<LaunchArg> args_;
  LaunchOptions options_;
  RunResult result_;
};
}  // namespace

Result<RunResult> run(Runtime& rt, std::string_view name, const RunConfig& config) {
  // Host allocations past what the machine has (kiln's own checks estimate, the allocator
  // decides) are an error of this run, not the end of the program.
  try {
    return Runner(rt, name, config).run();
  } catch (const std::out_of_range&) {
    // A recipe's grid, shape or reference read a dimension the given shapes do not have.
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kernel '{}': the shapes given do not have the ranks the kernel's "
                             "tensors have ({}); see `kiln show {}` for its parameters",
                             name, given_shapes_text(config), name));
  } catch (const std::bad_alloc&) {
    return Error(ErrorKind::OutOfMemory,
                 fmt::format("kernel '{}': the host ran out of memory for the tensors of this run "
                             "and their reference; pass a smaller --shape",
                             name));
  }
}

double matmul_flops(const RunData& d) {
  return 2.0 * static_cast<double>(d.dim("c", 0)) * static_cast<double>(d.dim("c", 1)) *
         static_cast<double>(d.dim("a", 1));
}

std::vector<int64_t> abt_c_shape(const RunData& d) {
  return {d.dim("a", 0), d.dim("b", 0)};
}

void abt_reference(RunData& d) {
  const auto m = static_cast<size_t>(d.dim("c", 0)), n = static_cast<size_t>(d.dim("c", 1));
  const auto k = static_cast<size_t>(d.dim("a", 1));
  // wgmma and tcgen05 read f32 as tf32 by ignoring the 13 low mantissa bits (no rounding).
  const bool is_tf32 = d.dtype("a") == ir::ElemType::F32;
  auto in = [&](double x) {
    if (!is_tf32) return x;
    float f = static_cast<float>(x);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u &= 0xffffe000u;
    std::memcpy(&f, &u, 4);
    return static_cast<double>(f);
  };
  const auto& a = d["a"];
  const auto& b = d["b"];
  auto& c = d["c"];
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (size_t kk = 0; kk < k; ++kk) s += in(a[i * k + kk]) * in(b[j * k + kk]);
      c[i * n + j] = s;
    }
}

}  // namespace kiln::kernels
