// The kernel registry, registration strings, the tracing entry point, selection of an
// instantiation from text options, and plugin loading.
#include "compiler/dsl/registry.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <new>

#include <fmt/format.h>

#include "compiler/backend.h"
#include "compiler/dsl/context.h"
#include "compiler/dsl/selection.h"
#include "ir/verifier.h"

namespace kiln::dsl {

// ---- small text helpers (declared in comptime.h) ---------------------------------------------

namespace detail {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<bool> parse_bool(std::string_view s) {
  s = trim(s);
  if (s == "true" || s == "1") return true;
  if (s == "false" || s == "0") return false;
  return std::nullopt;
}

std::optional<double> parse_double(std::string_view s) {
  const std::string t(trim(s));
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

std::string format_double(double v) {
  return fmt::format("{}", v);
}

namespace {
// Splits at top-level commas (not inside braces).
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}') --depth;
    if (s[i] == ',' && depth == 0) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (!trim(s.substr(start)).empty() || !out.empty()) out.push_back(trim(s.substr(start)));
  return out;
}
}  // namespace

std::optional<std::vector<std::string_view>> split_braced(std::string_view s) {
  s = trim(s);
  if (s.size() < 2 || s.front() != '{' || s.back() != '}') return std::nullopt;
  return split_top(s.substr(1, s.size() - 2));
}

std::string describe_memory(ir::ValueId mem) {
  auto* ctx = TraceContext::active();
  if (!ctx) return "memory";
  const ir::Kernel& k = ctx->builder().kernel();
  const ir::Type& t = ctx->builder().type_of(mem);
  for (const ir::Param& p : k.params)
    if (p.value == mem)
      return fmt::format("{} '{}'", t.kind == ir::TypeKind::Tensor ? "tensor" : "array", p.name);
  return t.kind == ir::TypeKind::Shared ? "a shared array" : "a local array";
}

// ---- registration strings -------------------------------------------------------------------

std::string apply_param_spec(std::string_view spec, std::vector<Instantiation>& insts) {
  const std::vector<std::string_view> entries = split_top(spec);
  std::string problem;
  auto note = [&](const std::string& s) {
    if (problem.empty()) problem = s;
  };
  for (Instantiation& inst : insts) {
    if (entries.size() != inst.params.size()) {
      note(fmt::format("the parameter string names {} parameters but the function has {}",
                       entries.size(), inst.params.size()));
      continue;
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      ParamInfo& p = inst.params[i];
      std::string_view e = entries[i];
      std::string_view attrs, def;
      if (const size_t colon = e.find(':'); colon != std::string_view::npos) {
        attrs = trim(e.substr(colon + 1));
        e = trim(e.substr(0, colon));
      } else if (const size_t eq = e.find('='); eq != std::string_view::npos) {
        def = trim(e.substr(eq + 1));
        e = trim(e.substr(0, eq));
      }
      p.name = std::string(e);
      const bool ident = !e.empty() &&
                         (std::isalpha(static_cast<unsigned char>(e[0])) || e[0] == '_') &&
                         std::all_of(e.begin(), e.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                         });
      if (!ident) note(fmt::format("parameter name '{}' is not an identifier", e));
      if (p.runtime()) {
        if (!def.empty())
          note(
              fmt::format("'{}' is a runtime parameter ({}); only comptime parameters take "
                          "defaults",
                          p.name, param_kind_name(p.kind)));
        // Attributes: rank=N line=N.
        size_t pos = 0;
        while (pos < attrs.size()) {
          size_t end = attrs.find(' ', pos);
          if (end == std::string_view::npos) end = attrs.size();
          const std::string_view a = attrs.substr(pos, end - pos);
          pos = end + 1;
          if (a.empty()) continue;
          const size_t eq = a.find('=');
          const std::string_view key = a.substr(0, eq);
          int v = 0;
          const bool num =
              eq != std::string_view::npos &&
              std::from_chars(a.data() + eq + 1, a.data() + a.size(), v).ec == std::errc();
          const bool max = eq != std::string_view::npos && a.substr(eq + 1) == "max";
          if (key == "rank" && num && v >= 1 && v <= 8 && p.kind == ParamKind::Tensor) {
            p.default_rank = v;
            p.rank_fixed = true;
          } else if (key == "line" && num && ir::valid_lanes(v) && p.kind != ParamKind::Scalar)
            p.default_line = v;
          else if (key == "line" && max && p.kind != ParamKind::Scalar)
            p.default_line = 0;
          else
            note(
                fmt::format("'{}': unknown or invalid attribute '{}' (tensors take rank=1..8 "
                            "and line=1|2|4|8|16|max, arrays take line=...)",
                            p.name, a));
        }
      } else {
        if (!attrs.empty())
          note(fmt::format("'{}' is a comptime parameter; write its default as '{} = VALUE'",
                           p.name, p.name));
        if (def.empty()) {
          note(fmt::format("comptime parameter '{}' needs a default: write \"{} = VALUE\"", p.name,
                           p.name));
        } else {
          std::string_view range;
          if (const size_t in = def.find(" in "); in != std::string_view::npos) {
            range = trim(def.substr(in + 4));
            def = trim(def.substr(0, in));
          }
          auto v = p.parse(def);
          if (!v)
            note(fmt::format("default of '{}': {}", p.name, v.error().message));
          else
            p.default_value = *v;
          if (!range.empty()) {
            const size_t dots = range.find("..");
            auto lo = dots == std::string_view::npos ? p.parse("") : p.parse(range.substr(0, dots));
            auto hi =
                dots == std::string_view::npos ? p.parse("") : p.parse(range.substr(dots + 2));
            if (!lo || !hi || !lo->compare(*hi) || *lo->compare(*hi) > 0)
              note(
                  fmt::format("the range of '{}' must be 'LOW..HIGH', two {} values with LOW <= "
                              "HIGH, not '{}'",
                              p.name, p.comptime_type, range));
            else {
              p.min_value = *lo;
              p.max_value = *hi;
            }
          }
          if (p.default_value && p.min_value &&
              (p.default_value->compare(*p.min_value) < 0 ||
               p.default_value->compare(*p.max_value) > 0))
            note(fmt::format("the default of '{}' ({}) is outside its range {}..{}", p.name,
                             p.default_value->format(), p.min_value->format(),
                             p.max_value->format()));
        }
      }
    }
  }
  return problem;
}

}  // namespace detail

const char* param_kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::Tensor:
      return "tensor";
    case ParamKind::Array:
      return "array";
    case ParamKind::Scalar:
      return "scalar";
    case ParamKind::Comptime:
      return "comptime";
  }
  return "?";
}

size_t Instantiation::runtime_count() const {
  return static_cast<size_t>(
      std::count_if(params.begin(), params.end(), [](const ParamInfo& p) { return p.runtime(); }));
}
size_t Instantiation::comptime_count() const {
  return params.size() - runtime_count();
}

std::string Instantiation::dtype_summary() const {
  std::string s;
  for (const ParamInfo& p : params)
    if (p.runtime())
      s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", p.name, ir::elem_name(p.dtype));
  return s;
}

int64_t ComptimeArgs::integer(std::string_view name) const {
  size_t ci = 0;
  std::string ints;
  for (const ParamInfo& p : inst_.params) {
    if (p.runtime()) continue;
    const ComptimeValue* v = ci < values_.size() ? &values_[ci] : nullptr;
    ++ci;
    if (v && v->as_integer()) {
      if (p.name == name) return *v->as_integer();
      ints += (ints.empty() ? "" : ", ") + p.name;
    } else if (p.name == name) {
      if (problem_.empty())
        problem_ =
            fmt::format("'{}' is a {} comptime parameter, not an integer", name, p.comptime_type);
      return 0;
    }
  }
  if (problem_.empty())
    problem_ = fmt::format(
        "there is no integer comptime parameter '{}'{}", name,
        ints.empty() ? std::string(" (the kernel has none)") : " (there are: " + ints + ")");
  return 0;
}

Result<std::optional<CubeDim>> required_cube_dim(const KernelDef& def, const Instantiation& inst,
                                                 const std::vector<ComptimeValue>& comptime) {
  if (!def.required_cube_dim) return std::optional<CubeDim>();
  ComptimeArgs args(inst, comptime);
  const CubeDim d = def.required_cube_dim(args);
  if (!args.problem().empty())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("{}:{}: kernel '{}': its cube size function: {}", def.file, def.line,
                             def.name, args.problem()));
  const uint64_t units = uint64_t{d[0]} * d[1] * d[2];
  if (units == 0 || units > ir::kMaxUnitsPerCube)
    return Error(
        ErrorKind::InvalidArgument,
        fmt::format("{}:{}: kernel '{}': its cube size function gives {}x{}x{} ({} "
                    "units); a cube has 1 to {} units",
                    def.file, def.line, def.name, d[0], d[1], d[2], units, ir::kMaxUnitsPerCube));
  return std::optional<CubeDim>(d);
}

// ---- registry -----------------------------------------------------------------------------------

Registry& Registry::global() {
  static Registry* r = new Registry;  // never destroyed: plugins may register during exit
  return *r;
}

namespace {
// The file of the shared object (or program) holding `code`.
std::string object_of(const void* code) {
  Dl_info info{};
  if (code && dladdr(code, &info) && info.dli_fname) return info.dli_fname;
  return {};
}
std::string describe_origin(const KernelDef& d) {
  return d.origin == "built in"
             ? fmt::format("the built-in kernel at {}:{}", d.file, d.line)
             : fmt::format("the kernel at {}:{} (plugin {})", d.file, d.line, d.origin);
}
}  // namespace

KernelRegistration& Registry::add(KernelDef def) {
  if (!def.instantiations.empty())
    def.object = object_of(reinterpret_cast<const void*>(def.instantiations.front().fn));
  std::lock_guard<std::mutex> lock(mu_);
  if (!loading_.empty() && !def.object.empty()) {
    // Kernels of the libraries the plugin pulls in are not the plugin's.
    char* real = ::realpath(def.object.c_str(), nullptr);
    if (real && loading_real_ == real) def.origin = loading_;
    std::free(real);
  }
  for (auto it = defs_.rbegin(); it != defs_.rend(); ++it) {
    const KernelDef& d = **it;
    if (d.name != def.name) continue;
    const bool same_fn = !d.instantiations.empty() && !def.instantiations.empty() &&
                         d.instantiations.front().fn == def.instantiations.front().fn;
    if (d.object == def.object && same_fn && d.file != def.file) {
      // Two kernel functions of the same C++ name in two libraries, and the dynamic linker
      // bound one library's reference to the other's function.
      def.problem = fmt::format(
          "the kernels '{}' at {}:{} and at {}:{} register the same function (in {}): the "
          "dynamic linker bound one library's kernel function to the other's of the same "
          "name; build kernel libraries with -Wl,-Bsymbolic-functions (kiln_add_kernels "
          "does), or put their kernels in a namespace of their own",
          def.name, d.file, d.line, def.file, def.line, d.object);
    } else if (d.object == def.object) {
      if (def.problem.empty())
        def.problem = fmt::format(
            "kernel '{}' is registered twice: at {}:{} and at {}:{}; give one of them another "
            "name (KILN_KERNEL_AS(\"other_name\", fn, ...) keeps the function's name)",
            def.name, d.file, d.line, def.file, def.line);
    } else {
      def.replaces = describe_origin(d);
    }
    break;
  }
  defs_.push_back(std::make_unique<KernelDef>(std::move(def)));
  regs_.push_back(std::make_unique<KernelRegistration>(*defs_.back()));
  return *regs_.back();
}

const KernelDef* Registry::find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = defs_.rbegin(); it != defs_.rend(); ++it)
    if ((*it)->name == name) return it->get();
  return nullptr;
}

std::vector<const KernelDef*> Registry::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const KernelDef*> out;
  for (auto it = defs_.rbegin(); it != defs_.rend(); ++it) {
    const bool hidden = std::any_of(out.begin(), out.end(), [&](const KernelDef* d) {
      return d->name == (*it)->name && d->object != (*it)->object;
    });
    if (!hidden) out.push_back(it->get());
  }
  std::reverse(out.begin(), out.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelDef* a, const KernelDef* b) { return a->name < b->name; });
  return out;
}

std::vector<const KernelDef*> Registry::since(size_t first) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const KernelDef*> out;
  for (size_t i = first; i < defs_.size(); ++i) out.push_back(defs_[i].get());
  return out;
}

size_t Registry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return defs_.size();
}

// ---- tracing
// ---------------------------------------------------------------------------------------

Status check_comptime_range(const KernelDef& def, const ParamInfo& p, const ComptimeValue& v) {
  if (!p.min_value || !p.max_value) return {};
  const auto lo = v.compare(*p.min_value), hi = v.compare(*p.max_value);
  if (lo && hi && *lo >= 0 && *hi <= 0) return {};
  return Error(ErrorKind::InvalidArgument,
               fmt::format("kernel '{}': comptime parameter '{}' is {}, outside the values it "
                           "accepts, {}..{} (declared at {}:{})",
                           def.name, p.name, v.format(), p.min_value->format(),
                           p.max_value->format(), def.file, def.line));
}

Result<ir::Kernel> trace(const KernelDef& def, const Instantiation& inst, const TraceRequest& req) {
  if (!def.problem.empty())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("{}:{}: error: kernel '{}' is not registered correctly: {}", def.file,
                             def.line, def.name, def.problem));
  const size_t nr = inst.runtime_count(), nc = inst.comptime_count();
  if (req.args.size() != nr)
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kernel '{}' takes {} runtime argument{}, got {} descriptors",
                             def.name, nr, nr == 1 ? "" : "s", req.args.size()));
  if (req.comptime.size() != nc) {
    std::string names;
    for (const ParamInfo& p : inst.params)
      if (!p.runtime()) names += (names.empty() ? "" : ", ") + p.name;
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kernel '{}' takes {} comptime value{}{}, got {}", def.name, nc,
                             nc == 1 ? "" : "s", names.empty() ? "" : " (" + names + ")",
                             req.comptime.size()));
  }
  size_t ri = 0, ci = 0;
  for (const ParamInfo& p : inst.params) {
    if (p.runtime()) {
      const ArgDesc& d = req.args[ri++];
      if (d.dtype != p.dtype)
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("kernel '{}': argument '{}' is {}, but the kernel takes {}",
                                 def.name, p.name, ir::elem_name(d.dtype), ir::elem_name(p.dtype)));
      if (!ir::valid_lanes(d.line))
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("kernel '{}': argument '{}' has line width {}; use 1, 2, 4, 8 "
                                 "or 16",
                                 def.name, p.name, d.line));
      if (p.kind == ParamKind::Tensor && (d.rank < 1 || d.rank > 8))
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("kernel '{}': tensor '{}' has rank {}; use 1 to 8", def.name,
                                 p.name, d.rank));
      if (p.kind == ParamKind::Tensor && p.rank_fixed && d.rank != p.default_rank)
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("kernel '{}': argument '{}' is a rank-{} tensor, but the kernel "
                                 "takes rank {} there ('{}: rank={}' at {}:{}); reshape the "
                                 "tensor to {} dimensions",
                                 def.name, p.name, d.rank, p.default_rank, p.name, p.default_rank,
                                 def.file, def.line, p.default_rank));
      if (p.kind == ParamKind::Scalar && d.line != 1)
        return Error(
            ErrorKind::InvalidArgument,
            fmt::format("kernel '{}': scalar '{}' cannot have a line width", def.name, p.name));
    } else {
      const ComptimeValue& v = req.comptime[ci++];
      if (v.type_name() != p.comptime_type)
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("kernel '{}': comptime parameter '{}' takes a {}, got {}",
                                 def.name, p.name, p.comptime_type,
                                 v.empty() ? std::string("nothing") : std::string(v.type_name())));
      KILN_TRY(check_comptime_range(def, p, v));
    }
  }
  {
    KILN_ASSIGN(auto needed, required_cube_dim(def, inst, req.comptime));
    if (needed && *needed != req.cube_dim) {
      std::string values;
      size_t ci = 0;
      for (const ParamInfo& p : inst.params)
        if (!p.runtime())
          values += fmt::format("{}{}={}", values.empty() ? "" : ", ", p.name,
                                req.comptime[ci++].format());
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("kernel '{}' needs a {}x{}x{} cube for {} (its registration at "
                               "{}:{} says so), but the launch asks for {}x{}x{}",
                               def.name, (*needed)[0], (*needed)[1], (*needed)[2], values, def.file,
                               def.line, req.cube_dim[0], req.cube_dim[1], req.cube_dim[2]));
    }
  }
  TraceContext ctx(def.name);
  ctx.set_target(req.target);
  ctx.set_checked(req.checked);
  ctx.builder().set_cube_dim(req.cube_dim[0], req.cube_dim[1], req.cube_dim[2]);
  // Kernel code is ordinary C++ run at trace time: what it throws (a vector sized by a comptime
  // value, an allocation that fails) is an error of this trace, not the end of the process.
  auto thrown = [&](std::string_view what) {
    std::string values;
    size_t ci = 0;
    for (const ParamInfo& p : inst.params)
      if (!p.runtime())
        values +=
            fmt::format("{}{}={}", values.empty() ? "" : ", ", p.name, req.comptime[ci++].format());
    return Error(
        ErrorKind::Trace,
        fmt::format("{}:{}: error: kernel '{}' {} while it was traced{}; check the "
                    "values its C++ code computes from them",
                    def.file, def.line, def.name, what, values.empty() ? "" : " with " + values));
  };
  try {
    inst.invoke(inst.fn, ctx, inst.params, req);
  } catch (const std::bad_alloc&) {
    return thrown("ran out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return thrown(fmt::format("threw a C++ exception ({})", e.what()));
  } catch (...) {
    return thrown("threw a C++ exception");
  }
  return std::move(ctx.builder()).finish();
}

// ---- selection from text options
// ------------------------------------------------------------------

namespace {

std::string param_names(const Instantiation& inst, bool runtime) {
  std::string s;
  for (const ParamInfo& p : inst.params)
    if (p.runtime() == runtime) s += (s.empty() ? "" : ", ") + p.name;
  return s.empty() ? "(none)" : s;
}

const ParamInfo* find_param(const Instantiation& inst, const std::string& name) {
  for (const ParamInfo& p : inst.params)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

Result<Selection> select(const KernelDef& def, const SpecOptions& opts) {
  if (!def.problem.empty())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("{}:{}: error: kernel '{}' is not registered correctly: {}", def.file,
                             def.line, def.name, def.problem));
  const Instantiation& first = def.instantiations.front();
  // Every named parameter must exist and be of the right kind.
  auto check = [&](const auto& map, bool runtime, const char* option) -> Status {
    for (const auto& [name, v] : map) {
      const ParamInfo* p = find_param(first, name);
      if (!p || p->runtime() != runtime)
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("kernel '{}' has no {} parameter '{}' (given {}); its {} "
                                 "parameters are: {}",
                                 def.name, runtime ? "runtime" : "comptime", name, option,
                                 runtime ? "runtime" : "comptime", param_names(first, runtime)));
    }
    return {};
  };
  // (The words name what was given, not how a tool spells it: the CLI, a test or an
  // embedding program build SpecOptions alike.)
  KILN_TRY(check(opts.set, false, "a value"));
  KILN_TRY(check(opts.dtype, true, "an element type"));
  KILN_TRY(check(opts.line, true, "a line width"));
  KILN_TRY(check(opts.rank, true, "a rank"));
  KILN_TRY(check(opts.read_only, true, "read-only"));
  for (const auto& [name, r] : opts.rank)
    if (find_param(first, name)->kind != ParamKind::Tensor)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("'{}' is not a tensor; only tensors have a rank", name));

  // The instantiation whose element types match every one asked for.
  std::vector<std::optional<ir::ElemType>> wanted(first.params.size());
  std::string asked;
  for (const auto& [name, dt] : opts.dtype) {
    auto want = ir::parse_elem_type(dt);
    if (!want)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("unknown element type '{}' for '{}' (bool, i8..i64, u8..u64, "
                               "f16, bf16, f32, f64, f8e4m3, f8e5m2)",
                               dt, name));
    for (size_t i = 0; i < first.params.size(); ++i)
      if (first.params[i].name == name) wanted[i] = *want;
    asked += fmt::format("{}{}: {}", asked.empty() ? "" : ", ", name, dt);
  }
  const auto index = find_instantiation(def, [&](size_t i) { return wanted[i]; });
  if (!index) return no_instantiation(def, asked);
  const Instantiation* inst = &def.instantiations[*index];
  // line=max parameters: the widest line of the given vector width that all of them can use.
  const int line_max = line_max_width(*inst, [&](size_t i) {
    return std::clamp(opts.vector_bits / 8 / ir::elem_bytes(inst->params[i].dtype), 1, 16);
  });

  Selection sel;
  sel.inst = inst;
  sel.request.cube_dim = opts.cube_dim.value_or(def.default_cube_dim);
  for (const ParamInfo& p : inst->params) {
    if (p.runtime()) {
      ArgDesc d;
      d.dtype = p.dtype;
      d.rank = static_cast<uint8_t>(p.kind == ParamKind::Tensor ? p.default_rank : 0);
      int line = p.kind == ParamKind::Scalar ? 1 : p.default_line;
      if (line == 0) line = line_max;
      d.line = static_cast<uint8_t>(line);
      d.read_only = p.const_qualified;
      if (auto it = opts.rank.find(p.name); it != opts.rank.end()) {
        if (it->second < 1 || it->second > 8)
          return Error(
              ErrorKind::InvalidArgument,
              fmt::format("rank {} for '{}' is out of range (1 to 8)", it->second, p.name));
        d.rank = static_cast<uint8_t>(it->second);
      }
      if (auto it = opts.line.find(p.name); it != opts.line.end()) {
        if (p.kind == ParamKind::Scalar)
          return Error(ErrorKind::InvalidArgument,
                       fmt::format("'{}' is a scalar; only tensors and arrays have lines", p.name));
        if (!ir::valid_lanes(it->second))
          return Error(
              ErrorKind::InvalidArgument,
              fmt::format("line width {} for '{}' is not 1, 2, 4, 8 or 16", it->second, p.name));
        d.line = static_cast<uint8_t>(it->second);
      }
      if (auto it = opts.read_only.find(p.name); it != opts.read_only.end())
        d.read_only = it->second || p.const_qualified;
      sel.request.args.push_back(d);
    } else {
      if (auto it = opts.set.find(p.name); it != opts.set.end()) {
        auto v = p.parse(it->second);
        if (!v)
          return Error(ErrorKind::InvalidArgument, fmt::format("comptime value {}={}: {}", p.name,
                                                               it->second, v.error().message));
        if (auto st = check_comptime_range(def, p, *v); !st)
          return Error(ErrorKind::InvalidArgument, fmt::format("comptime value {}={}: {}", p.name,
                                                               it->second, st.error().message));
        sel.request.comptime.push_back(*v);
      } else {
        sel.request.comptime.push_back(*p.default_value);
      }
    }
  }
  if (!opts.cube_dim) {
    KILN_ASSIGN(auto needed, required_cube_dim(def, *inst, sel.request.comptime));
    if (needed) sel.request.cube_dim = *needed;
  }
  return sel;
}

Error no_instantiation(const KernelDef& def, const std::string& asked) {
  std::string avail;
  for (const Instantiation& cand : def.instantiations)
    avail += fmt::format("\n  ({})", cand.dtype_summary());
  return Error(ErrorKind::InvalidArgument,
               fmt::format("kernel '{}' takes no {}; it takes:{}", def.name,
                           asked.empty() ? std::string("arguments of these element types")
                                         : "arguments of these element types (" + asked + ")",
                           avail));
}

// ---- plugins
// --------------------------------------------------------------------------------------

// Names the plugin being loaded for the kernels that register meanwhile.
struct PluginLoading {
  PluginLoading(Registry& r, const std::string& path, const std::string& real) : r(r) {
    std::lock_guard<std::mutex> lock(r.mu_);
    r.loading_ = path;
    r.loading_real_ = real;
  }
  ~PluginLoading() {
    std::lock_guard<std::mutex> lock(r.mu_);
    r.loading_.clear();
    r.loading_real_.clear();
  }
  Registry& r;
};

// Why `file` cannot be a plugin, checked before dlopen maps it: not a regular file (a FIFO would
// block the loader), not a complete ELF shared object of this machine's class and architecture
// (a truncated one faults inside the loader, SIGBUS), or empty when it is fine.
std::string not_a_plugin(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::strerror(errno);
  const auto size = static_cast<uint64_t>(st.st_size);
  auto read_at = [&](uint64_t off, void* buf, size_t n) {
    return off + n <= size &&
           ::pread(fd, buf, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
  };
  std::string why;
  ElfW(Ehdr) eh{};
  if (!read_at(0, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    why = "it is not an ELF shared library";
  } else if (eh.e_ident[EI_CLASS] != (sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32) ||
             eh.e_ident[EI_DATA] !=
                 (std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB)) {
    why = "it is an ELF file of another word size or byte order than this kiln";
  } else if (eh.e_type != ET_DYN) {
    why = "it is an ELF file but not a shared library (build it with -shared)";
  } else if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 ||
             eh.e_phoff + uint64_t{eh.e_phnum} * sizeof(ElfW(Phdr)) > size ||
             (eh.e_shnum && eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize > size)) {
    why = fmt::format("its ELF headers reach past its {} bytes (a truncated file?)", size);
  } else {
    for (unsigned i = 0; i < eh.e_phnum && why.empty(); ++i) {
      ElfW(Phdr) ph{};
      if (!read_at(eh.e_phoff + i * sizeof ph, &ph, sizeof ph))
        why = "its program headers cannot be read";
      else if (ph.p_type == PT_LOAD && ph.p_offset + ph.p_filesz > size)
        why = fmt::format("a segment reaches byte {} of a file of {} bytes (a truncated file?)",
                          ph.p_offset + ph.p_filesz, size);
    }
  }
  ::close(fd);
  return why;
}

Result<Plugin> load_plugin(const std::string& path) {
  // One load at a time: the registry attributes what registers to the library being loaded.
  static std::mutex load_mu;
  static std::map<std::string, Plugin> loaded;  // by the library's real path
  std::lock_guard<std::mutex> lock(load_mu);
  // A path without a slash would be searched on the loader path; plugins are files.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  char* real = ::realpath(file.c_str(), nullptr);
  if (!real)
    return Error(ErrorKind::NotFound,
                 fmt::format("cannot load plugin '{}': {}", path, std::strerror(errno)));
  const std::string key = real;
  std::free(real);
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  if (std::string why = not_a_plugin(key); !why.empty())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("cannot load plugin '{}': {}; a plugin is a shared library built "
                             "with kiln_add_kernels",
                             path, why));

  Registry& r = Registry::global();
  const size_t before = r.size();
  const size_t backends_before = backend::all().size();
  void* lib = nullptr;
  {
    PluginLoading loading(r, path, key);
    lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib)
    return Error(ErrorKind::NotFound, fmt::format("cannot load plugin '{}': {}", path, dlerror()));
  // The library stays loaded: its kernels' code lives in it.
  Plugin out;
  out.path = path;
  for (const KernelDef* d : r.since(before)) {
    if (d->origin != path) continue;  // a library the plugin pulled in (kiln's own kernels)
    out.kernels.push_back(d->name);
    if (!d->replaces.empty())
      out.notices.push_back(
          fmt::format("kernel '{}' of {} replaces {}", d->name, path, d->replaces));
  }
  if (out.kernels.empty() && backend::all().size() == backends_before) {
    ::dlclose(lib);
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("'{}' loaded but registered no kernels and no backend: it is not a "
                             "kiln plugin (a plugin is a shared library of KILN_KERNELs built "
                             "with kiln_add_kernels)",
                             path));
  }
  loaded.emplace(key, out);
  return out;
}

}  // namespace kiln::dsl
