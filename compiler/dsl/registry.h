// Kernel registration and the tracing entry point.
//
//   void axpy(Tensor<f32> x, Tensor<f32> y, f32 a) { ... }
//   KILN_KERNEL(axpy, "x: line=4, y: line=4, a");
//
//   template <class T> void scale(Tensor<T> x, T factor) { ... }
//   KILN_KERNEL_GENERIC(scale, "x, factor", f16, bf16, f32, f64);
//
// The string names every parameter in order. Runtime parameters (Tensor, Array, scalars) may
// carry default descriptors (`name: rank=2 line=4`; `line=max`: the widest line a launch
// allows, the same for every such parameter); comptime parameters
// (plain C++ types) carry their default value (`units = 256`) and, if numeric, may declare the
// values they accept (`units = 256 in 1..1024`). A registration problem (a
// missing default, a malformed string) is kept with the kernel and reported when it is used.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "compiler/dsl/comptime.h"
#include "compiler/dsl/memory.h"
#include "compiler/dsl/value.h"
#include "ir/ir.h"

namespace kiln::dsl {

enum class ParamKind { Tensor, Array, Scalar, Comptime };
const char* param_kind_name(ParamKind k);

struct ParamInfo {
  std::string name;
  ParamKind kind = ParamKind::Scalar;
  // Runtime parameters: the element type and whether the C++ type is const (read-only).
  ir::ElemType dtype = ir::ElemType::F32;
  bool const_qualified = false;
  // Defaults used when a caller gives no descriptor.
  int default_rank = 1;
  bool rank_fixed = false;  // `x: rank=N`: the kernel takes rank-N tensors only
  int default_line = 1;     // 0: line=max, the widest line the launch allows
  // Comptime parameters.
  std::string comptime_type;
  std::optional<ComptimeValue> default_value;
  // Numeric comptime parameters may declare the values they accept: "units = 256 in 1..1024"
  // (inclusive). A value outside is an error naming the parameter, before anything uses it.
  std::optional<ComptimeValue> min_value, max_value;
  Result<ComptimeValue> (*parse)(std::string_view) = nullptr;

  bool runtime() const { return kind != ParamKind::Comptime; }
};

// What a launch knows about one runtime argument; part of the specialization key.
struct ArgDesc {
  ir::ElemType dtype = ir::ElemType::F32;
  uint8_t rank = 1;  // tensors; 0 for arrays and scalars
  uint8_t line = 1;  // line width of tensors and arrays
  bool read_only = false;
  friend bool operator==(const ArgDesc&, const ArgDesc&) = default;
};

struct TraceRequest {
  std::vector<ArgDesc> args;            // one per runtime parameter, in order
  std::vector<ComptimeValue> comptime;  // one per comptime parameter, in order
  std::array<uint32_t, 3> cube_dim{1, 1, 1};
  // The target the kernel is traced for (null: "any"); runtimes and `kiln show --target` set it.
  std::shared_ptr<const TraceTarget> target;
  // Checked mode: each index of t(i, j) is checked against the view's shape, so that an access
  // between a strided view's elements is reported (and skipped) like one outside its memory.
  bool checked = false;
};

class TraceContext;
struct TraceTarget;
using GenericFn = void (*)();

// One C++ function behind a kernel name (a generic kernel has one per element type).
struct Instantiation {
  std::vector<ParamInfo> params;
  GenericFn fn = nullptr;
  void (*invoke)(GenericFn, TraceContext&, const std::vector<ParamInfo>&,
                 const TraceRequest&) = nullptr;
  size_t runtime_count() const;
  size_t comptime_count() const;
  // "x: f32, y: f32" for messages.
  std::string dtype_summary() const;
};

// The comptime values of one specialization, by parameter name: what a kernel's cube size may
// follow (KernelRegistration::cube_dim with a function).
class ComptimeArgs {
 public:
  // `values`: one per comptime parameter of `inst`, in order.
  ComptimeArgs(const Instantiation& inst, const std::vector<ComptimeValue>& values)
      : inst_(inst), values_(values) {}
  // The value of an integer or bool comptime parameter. A name that is not one gives 0 and
  // leaves a problem() for the caller to report.
  int64_t integer(std::string_view name) const;
  const std::string& problem() const { return problem_; }

 private:
  const Instantiation& inst_;
  const std::vector<ComptimeValue>& values_;
  mutable std::string problem_;
};
using CubeDim = std::array<uint32_t, 3>;
using CubeDimFn = std::function<CubeDim(const ComptimeArgs&)>;

struct KernelDef {
  std::string name;
  std::string file;
  int line = 0;
  std::string description;
  std::array<uint32_t, 3> default_cube_dim{64, 1, 1};
  // The cube size the kernel needs for its comptime values, when it declares one: launches
  // and the CLI use it, and a launch with another cube size is an error.
  CubeDimFn required_cube_dim;
  std::vector<Instantiation> instantiations;
  std::string origin = "built in";  // or the plugin that registered it
  std::string problem;              // a registration problem, empty when fine
  std::string object;               // the shared object (or program) its code lives in
  // When this definition took the name from an earlier one (in another shared object):
  // "the built-in kernel at kernels/examples/axpy.cpp:12"; empty otherwise.
  std::string replaces;
};

// Returned by KILN_KERNEL for optional settings: KILN_KERNEL(k, "...").cube_dim(256).
class KernelRegistration {
 public:
  explicit KernelRegistration(KernelDef& def) : def_(def) {}
  KernelRegistration& cube_dim(uint32_t x, uint32_t y = 1, uint32_t z = 1) {
    def_.default_cube_dim = {x, y, z};
    return *this;
  }
  // The cube size follows from the comptime values and no other works:
  //   .cube_dim([](const ComptimeArgs& c) -> CubeDim {
  //     const auto t = static_cast<uint32_t>(c.integer("tile"));
  //     return {t, t, 1};
  //   })
  KernelRegistration& cube_dim(CubeDimFn fn) {
    def_.required_cube_dim = std::move(fn);
    return *this;
  }
  KernelRegistration& describe(std::string text) {
    def_.description = std::move(text);
    return *this;
  }
  KernelDef& def() { return def_; }

 private:
  KernelDef& def_;
};

// Every registered kernel of the process. Thread-safe; kernels are never removed, so the
// references it hands out stay valid.
//
// Names: within one shared object (or the program) a name may be registered once; a second
// registration there is a problem reported wherever the kernel is used. A kernel registered
// from another shared object takes the name over: the one registered last wins (a plugin's
// kernel over a built-in one, a program's own over its libraries'), `replaces` says what it
// hid, and load_plugin reports it.
class Registry {
 public:
  static Registry& global();
  KernelRegistration& add(KernelDef def);
  // The kernel a name stands for now (the last registration of it).
  const KernelDef* find(std::string_view name) const;
  std::vector<const KernelDef*> all() const;  // what each name stands for, sorted by name
  size_t size() const;                        // every registration, hidden ones included
  // The registrations since the first `first` ones, oldest first.
  std::vector<const KernelDef*> since(size_t first) const;

 private:
  friend struct PluginLoading;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<KernelDef>> defs_;
  std::vector<std::unique_ptr<KernelRegistration>> regs_;
  std::string loading_, loading_real_;  // the plugin being loaded (as named, real path)
};

// Traces one instantiation into verified IR. The request must give one descriptor per runtime
// parameter and one value per comptime parameter; mistakes come back as errors naming the
// parameter, and misuse inside the kernel as errors naming the kernel's source line.
Result<ir::Kernel> trace(const KernelDef& def, const Instantiation& inst, const TraceRequest& req);

// Checks a comptime value against its parameter's declared range; the error names the kernel,
// the parameter, the value, the range and where it was declared.
Status check_comptime_range(const KernelDef& def, const ParamInfo& p, const ComptimeValue& v);

// The cube size `def` requires for these comptime values (one per comptime parameter of
// `inst`), or nothing when it does not declare one; an error when its function asks for a
// parameter that is not an integer one or gives an empty cube.
Result<std::optional<CubeDim>> required_cube_dim(const KernelDef& def, const Instantiation& inst,
                                                 const std::vector<ComptimeValue>& comptime);

// Specialization options as text, the way the CLI takes them.
struct SpecOptions {
  std::map<std::string, std::string> set;    // comptime NAME=VALUE
  std::map<std::string, std::string> dtype;  // NAME=TYPE
  std::map<std::string, int> line;           // NAME=WIDTH
  std::map<std::string, int> rank;           // NAME=RANK
  std::map<std::string, bool> read_only;     // NAME=true|false
  std::optional<std::array<uint32_t, 3>> cube_dim;
  // The SIMD width that line=max parameters fill (128 bits: 4 x f32, the same on every
  // machine, unless a caller knows its target).
  int vector_bits = 128;
};

struct Selection {
  const Instantiation* inst = nullptr;
  TraceRequest request;
};

// Picks the instantiation and builds the request from defaults plus `opts`. Unknown names are
// errors that list the valid ones.
Result<Selection> select(const KernelDef& def, const SpecOptions& opts);

// What loading a plugin registered.
struct Plugin {
  std::string path;
  std::vector<std::string> kernels;  // the names it registered
  // One line per kernel of the plugin that took a name over: "kernel 'axpy' of PATH replaces
  // the built-in kernel at kernels/examples/axpy.cpp:12".
  std::vector<std::string> notices;
};

// Loads a shared library of kernels (dlopen); its KILN_KERNELs register as it loads, and its
// backends too. Loading the same library again returns what it registered the first time.
// The library stays loaded for the life of the process (its kernels' code lives in it).
Result<Plugin> load_plugin(const std::string& path);

// ---- registration machinery --------------------------------------------------------------------

template <size_t N>
struct FixedString {
  char text[N];
  constexpr FixedString(const char (&s)[N]) {  // NOLINT: implicit for string literals
    for (size_t i = 0; i < N; ++i) text[i] = s[i];
  }
};

// Number of top-level comma-separated entries (commas inside braces do not count).
template <size_t N>
constexpr int count_entries(const FixedString<N>& s) {
  int n = 0, depth = 0;
  bool any = false;
  for (size_t i = 0; i + 1 < N; ++i) {
    const char c = s.text[i];
    if (c == '{') ++depth;
    if (c == '}') --depth;
    if (c == ',' && depth == 0) ++n;
    if (c != ' ' && c != ',') any = true;
  }
  return any ? n + 1 : 0;
}

namespace detail {

template <class P>
struct ParamTraits {
  static constexpr bool is_runtime = false;
};
template <class V>
struct ParamTraits<Tensor<V>> {
  static constexpr bool is_runtime = true;
  static constexpr ParamKind kind = ParamKind::Tensor;
  using T = host_of_t<V>;
  static constexpr bool is_const = std::is_const_v<V>;
};
template <class V>
struct ParamTraits<Array<V>> {
  static constexpr bool is_runtime = true;
  static constexpr ParamKind kind = ParamKind::Array;
  using T = host_of_t<V>;
  static constexpr bool is_const = std::is_const_v<V>;
};
template <Element T0>
struct ParamTraits<Val<T0>> {
  static constexpr bool is_runtime = true;
  static constexpr ParamKind kind = ParamKind::Scalar;
  using T = T0;
  static constexpr bool is_const = false;
};

template <class P>
ParamInfo param_info() {
  ParamInfo p;
  if constexpr (ParamTraits<P>::is_runtime) {
    p.kind = ParamTraits<P>::kind;
    p.dtype = elem_v<typename ParamTraits<P>::T>;
    p.const_qualified = ParamTraits<P>::is_const;
  } else {
    static_assert(Comptime<P>,
                  "kiln: a kernel parameter is either a DSL type (Tensor<T>, Array<T>, f32, "
                  "u32, ...) or a comptime type (integers, bool, float, enums declared with "
                  "KILN_COMPTIME_ENUM, structs declared with KILN_COMPTIME_STRUCT)");
    p.kind = ParamKind::Comptime;
    p.comptime_type = std::string(ComptimeTraits<P>::name());
    p.parse = &parse_comptime<P>;
  }
  return p;
}

// Creates the kernel argument for parameter `p` from the request.
template <class P>
P make_arg(TraceContext& ctx, const ParamInfo& p, const TraceRequest& req, size_t& ri, size_t& ci) {
  auto& b = ctx.builder();
  if constexpr (ParamTraits<P>::is_runtime) {
    const ArgDesc& d = req.args[ri++];
    using T = typename ParamTraits<P>::T;
    if constexpr (ParamTraits<P>::kind == ParamKind::Tensor) {
      const ir::ValueId id = b.param(
          p.name, ir::Type::tensor(elem_v<T>, d.line, d.rank, d.read_only || p.const_qualified));
      return P(id);
    } else if constexpr (ParamTraits<P>::kind == ParamKind::Array) {
      const ir::ValueId id =
          b.param(p.name, ir::Type::array(elem_v<T>, d.line, d.read_only || p.const_qualified));
      return P(id);
    } else {
      return P::from_id(b.param(p.name, ir::Type::value(elem_v<T>)));
    }
  } else {
    const P* v = req.comptime[ci++].template get<P>();
    if (!v) {
      b.fail(
          {},
          fmt::format("comptime parameter '{}' needs a value of type {}", p.name, p.comptime_type),
          ErrorKind::InvalidArgument);
      return P{};
    }
    return *v;
  }
}

template <class... Ps>
struct Invoker {
  static void run(GenericFn g, TraceContext& ctx, const std::vector<ParamInfo>& params,
                  const TraceRequest& req) {
    run_with(g, ctx, params, req, std::index_sequence_for<Ps...>{});
  }
  template <size_t... Is>
  static void run_with(GenericFn g, TraceContext& ctx, const std::vector<ParamInfo>& params,
                       const TraceRequest& req, std::index_sequence<Is...>) {
    auto fn = reinterpret_cast<void (*)(Ps...)>(g);
    size_t ri = 0, ci = 0;
    // Braced initialization runs left to right: parameters are created in order.
    std::tuple<std::decay_t<Ps>...> args{
        make_arg<std::decay_t<Ps>>(ctx, params[Is], req, ri, ci)...};
    if (!ctx.ok()) return;
    std::apply(fn, args);
  }
};

template <class... Ps>
Instantiation make_instantiation(void (*fn)(Ps...)) {
  Instantiation inst;
  inst.params = {param_info<std::decay_t<Ps>>()...};
  inst.fn = reinterpret_cast<GenericFn>(fn);
  inst.invoke = &Invoker<Ps...>::run;
  return inst;
}

// Applies the registration string to every instantiation; returns a problem or "".
std::string apply_param_spec(std::string_view spec, std::vector<Instantiation>& insts);

template <class F>
struct Arity;
template <class... Ps>
struct Arity<void (*)(Ps...)> {
  static constexpr int value = sizeof...(Ps);
};

}  // namespace detail

template <FixedString Spec, class... Ps>
KernelRegistration& register_kernel(const char* name, void (*fn)(Ps...), const char* file,
                                    int line) {
  static_assert(count_entries(Spec) == sizeof...(Ps),
                "KILN_KERNEL: the parameter string must name every parameter of the kernel "
                "function, in order (\"x, y, a\")");
  KernelDef def;
  def.name = name;
  def.file = file;
  def.line = line;
  def.instantiations.push_back(detail::make_instantiation(fn));
  def.problem = detail::apply_param_spec(Spec.text, def.instantiations);
  return Registry::global().add(std::move(def));
}

template <FixedString Spec, class... Ts, class Get>
KernelRegistration& register_generic(const char* name, Get get, const char* file, int line) {
  static_assert(sizeof...(Ts) > 0, "KILN_KERNEL_GENERIC: list the element types to instantiate");
  static_assert(
      ((count_entries(Spec) == detail::Arity<decltype(get.template operator()<Ts>())>::value) &&
       ...),
      "KILN_KERNEL_GENERIC: the parameter string must name every parameter of the "
      "kernel function, in order");
  KernelDef def;
  def.name = name;
  def.file = file;
  def.line = line;
  (def.instantiations.push_back(detail::make_instantiation(get.template operator()<Ts>())), ...);
  def.problem = detail::apply_param_spec(Spec.text, def.instantiations);
  return Registry::global().add(std::move(def));
}

}  // namespace kiln::dsl

namespace kiln {
using dsl::load_plugin;
using dsl::Plugin;
}  // namespace kiln

// Registers a kernel function under its own name.
#define KILN_KERNEL(fn, params) KILN_KERNEL_AS(#fn, fn, params)

// Registers a kernel function under another name (when the function's name is taken).
#define KILN_KERNEL_AS(name, fn, params)                                                 \
  [[maybe_unused]] static ::kiln::dsl::KernelRegistration& KILN_DSL_PP_CAT(kiln_kernel_, \
                                                                           __LINE__) =   \
      ::kiln::dsl::register_kernel<params>(name, &fn, __FILE__, __LINE__)

// Registers a function template once per listed element type, under one name; a launch (or
// a requested element type) picks the instantiation whose parameters have the requested types.
#define KILN_KERNEL_GENERIC(fn, params, ...)                                             \
  [[maybe_unused]] static ::kiln::dsl::KernelRegistration& KILN_DSL_PP_CAT(kiln_kernel_, \
                                                                           __LINE__) =   \
      ::kiln::dsl::register_generic<params, __VA_ARGS__>(                                \
          #fn, []<class KilnT>() { return &fn<KilnT>; }, __FILE__, __LINE__)
