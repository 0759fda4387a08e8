// Running a registered kernel on generated inputs and checking it against a C++ reference:
// what `kiln run`, `kiln demo` and the kernel tests use.
//
// A kernel declares how to run it next to its registration:
//
//   KILN_RUN(axpy)
//       .shape("x", {1 << 22}).same_shape("y", "x")
//       .scalar("a", 2.0)
//       .cubes([](const RunData& d) { return ceil_div(d.numel("y") / d.line("y"), 256); })
//       .reference([](RunData& d) {
//         for (size_t i = 0; i < d["y"].size(); ++i) d["y"][i] += d.scalar("a") * d["x"][i];
//       });
//
// The runner makes each tensor with its shape (the declared default, or --shape), fills it
// with random values (uniform in [-1, 1] unless declared otherwise, rounded to the element
// type), launches once, and compares every tensor the kernel may write with what the
// reference computed from the same inputs, in double precision.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/runtime.h"

namespace kiln::kernels {

// The host side of one run: tensors as doubles in row-major order, shapes, scalar and comptime
// values, and the line width of each tensor.
class RunData {
 public:
  std::vector<double>& operator[](std::string_view tensor);
  const std::vector<double>& operator[](std::string_view tensor) const;
  const std::vector<int64_t>& shape(std::string_view tensor) const;
  int64_t dim(std::string_view tensor, int d) const {
    return shape(tensor).at(static_cast<size_t>(d));
  }
  int64_t numel(std::string_view tensor) const;
  double scalar(std::string_view name) const;
  // An integer comptime parameter (or a bool, as 0 or 1).
  int64_t comptime(std::string_view name) const;
  int line(std::string_view tensor) const;
  // The element type of a tensor, array or scalar parameter (a generic kernel's instantiation
  // decides it), and a value rounded to it: a reference that serves every instantiation.
  ir::ElemType dtype(std::string_view name) const;
  double round(std::string_view name, double v) const;

  // Filled by the runner, in this order: element types, comptime and scalar values, the cube size,
  // shapes (so a shape may follow the cube size), the tensors' values and line widths.
  Dim3 cube_dim;
  std::map<std::string, std::vector<double>, std::less<>> values;
  std::map<std::string, std::vector<int64_t>, std::less<>> shapes;
  std::map<std::string, double, std::less<>> scalars;
  std::map<std::string, std::string, std::less<>> comptimes;  // formatted values
  std::map<std::string, int, std::less<>> lines;
  std::map<std::string, ir::ElemType, std::less<>> dtypes;  // every runtime parameter
  // What a host operation's call chose (its kernel and configuration), for `kiln run` to print;
  // the call writes it, through the const RunData it gets.
  mutable std::string plan;
};

inline uint32_t ceil_div(int64_t a, int64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

// Recipe pieces of the matrix-multiply examples, C (M x N) from A (M x K): 2 M N K, from the
// shapes of c and a.
double matmul_flops(const RunData& d);
// The examples that compute C = A * B^T (matmul_wgmma, matmul_tma, matmul_tcgen05; b is N x K):
// c's shape, and the reference in double, f32 inputs read as tf32 as wgmma and tcgen05 read
// them (the 13 low mantissa bits ignored).
std::vector<int64_t> abt_c_shape(const RunData& d);
void abt_reference(RunData& d);

// A library operation that `kiln run NAME` runs through its host entry point (kiln::lib::matmul)
// instead of launching one kernel: the tensors and scalars it takes, the element types it accepts
// (one list of the tensors' types per variant, in `tensors` order; --dtype picks the first that
// matches), and the call. The call gets the runner's tensors by name and the run's values.
struct HostOp {
  struct TensorParam {
    std::string name;
    bool input = true;  // read only; otherwise written and checked against the reference
  };
  std::string description;
  std::vector<std::string> kernels;  // the kernels it launches, for `kiln show`
  std::vector<TensorParam> tensors;
  std::vector<std::vector<ir::ElemType>> variants;
  std::vector<std::pair<std::string, ir::ElemType>> scalars;  // defaults: RunRecipe::scalar
  std::function<Status(Runtime&, std::map<std::string, Tensor, std::less<>>&, const RunData&)> call;
};

class RunRecipe {
 public:
  using ShapeFn = std::function<std::vector<int64_t>(const RunData&)>;
  using DimFn = std::function<Dim3(const RunData&)>;

  explicit RunRecipe(std::string kernel) : kernel_(std::move(kernel)) {}
  // The default shape of a tensor; or computed from the tensors declared before it.
  RunRecipe& shape(std::string tensor, std::vector<int64_t> dims);
  RunRecipe& shape(std::string tensor, ShapeFn fn);
  RunRecipe& same_shape(std::string tensor, std::string as);
  // Random inputs uniform in [lo, hi] (integers for integer types); zeros: all 0.
  RunRecipe& values(std::string tensor, double lo, double hi);
  RunRecipe& zeros(std::string tensor);
  // The default of a scalar parameter.
  RunRecipe& scalar(std::string name, double value);
  RunRecipe& cubes(DimFn fn);
  // The cube size, from comptime and scalar values; the registered one when not given.
  RunRecipe& cube_dim(DimFn fn);
  // Computes the expected contents of the written tensors from the inputs, in place.
  RunRecipe& reference(std::function<void(RunData&)> fn);
  // |got - want| <= abs + rel * |want|; by default from the element type.
  RunRecipe& tolerance(double rel, double abs);
  // The arithmetic operations of one launch (2*M*N*K for a matmul), for a throughput in
  // GFLOP/s next to the bandwidth: what a compute-bound kernel is measured by.
  RunRecipe& flops(std::function<double(const RunData&)> fn);
  // The one GPU architecture a per-architecture kernel is written for ("sm_100a"): `kiln demo`
  // runs it on an emulator of that architecture and skips GPUs of another.
  RunRecipe& gpu_arch(std::string arch);
  // Runs the host operation instead of a kernel of this name (which need not exist).
  RunRecipe& host(HostOp op);
  // |got - want| <= abs + rel * |want| for tensor `name`, from the run's values.
  RunRecipe& tolerance(
      std::function<std::pair<double, double>(const RunData&, std::string_view)> fn);

  const std::string& kernel() const { return kernel_; }
  // The shared object (or program) that registered it: a recipe describes the kernel of the
  // same name registered from the same object, not one a plugin put in its place.
  const std::string& object() const { return object_; }
  const std::string& gpu_arch() const { return gpu_arch_; }
  const HostOp* host_op() const { return host_ ? &*host_ : nullptr; }

 private:
  friend struct RunRecipeAccess;
  struct TensorDecl {
    std::string name;
    std::optional<std::vector<int64_t>> dims;
    ShapeFn fn;
  };
  friend RunRecipe& run_recipe(std::string_view kernel, const void* anchor);
  std::string kernel_, object_;
  std::vector<TensorDecl> shapes_;
  std::map<std::string, std::pair<double, double>, std::less<>> ranges_;
  std::map<std::string, double, std::less<>> scalars_;
  DimFn cubes_, cube_dim_;
  std::function<void(RunData&)> reference_;
  std::optional<std::pair<double, double>> tolerance_;
  std::function<double(const RunData&)> flops_;
  std::string gpu_arch_;
  std::optional<HostOp> host_;
  std::function<std::pair<double, double>(const RunData&, std::string_view)> tolerance_fn_;
};

// The recipe for `kernel` registered from the shared object (or program) whose code `anchor`
// points into (created on first use; KILN_RUN passes a function of its own file). Without an
// anchor: the recipe of that name registered last, to add to it.
RunRecipe& run_recipe(std::string_view kernel, const void* anchor);
RunRecipe& run_recipe(std::string_view kernel);
// The recipe that describes the kernel the name stands for now: the one registered from the
// same object as that kernel. None when a plugin's kernel took the name and brought no recipe
// (the built-in recipe describes another kernel). For a host operation, the last registered.
const RunRecipe* find_run_recipe(std::string_view kernel);
// The names of the host operations (RunRecipe::host), sorted.
std::vector<std::string> host_op_names();

// Where a kernel's recipe runs when asked for `device`. Any kernel runs on the CPU; a
// per-architecture kernel (RunRecipe::gpu_arch) runs on a GPU or emulator of its architecture
// ("sm_90" and "sm_90a" are one), on an emulator of its own architecture when `device` is an
// emulator of another (`emulator` names it: "cuda-emu:sm_100a"), and not at all on a GPU of
// another (`skip` says why).
struct Placement {
  std::string emulator;  // non-empty: open this device instead of `device`
  std::string skip;      // non-empty: the kernel cannot run there, and why
};
Placement placement(const RunRecipe& recipe, const DeviceInfo& device);

#define KILN_RUN_CAT2(a, b) a##b
#define KILN_RUN_CAT(a, b) KILN_RUN_CAT2(a, b)
#define KILN_RUN(kernel)                                                                  \
  [[maybe_unused]] static ::kiln::kernels::RunRecipe& KILN_RUN_CAT(kiln_run_, __LINE__) = \
      ::kiln::kernels::run_recipe(#kernel, reinterpret_cast<const void*>(+[] {}))

struct RunConfig {
  std::map<std::string, std::string> set;              // scalars and comptime values
  std::map<std::string, std::vector<int64_t>> shapes;  // tensor shapes
  std::map<std::string, std::string> dtypes;           // element types (generic kernels)
  std::map<std::string, int> lines;                    // line widths
  std::optional<Dim3> cubes, cube_dim;
  bool checked = false;
  int repeat = 10;            // timed launches after the first
  uint64_t seed = 0;          // 0: a fresh seed
  bool keep_outputs = false;  // RunResult::outputs (to compare devices)
};

struct TensorCheck {
  std::string name;
  double max_abs_error = 0, max_rel_error = 0;
  int64_t mismatches = 0;
  int64_t first_bad = -1;
  double got = 0, want = 0;  // at first_bad
  double rel_tol = 0, abs_tol = 0;
};

struct RunResult {
  std::string kernel, device;
  bool host_op = false;  // ran through a host entry point (RunRecipe::host): no one grid
  Dim3 cubes, cube_dim;
  uint64_t seed = 0;
  std::string arguments;   // "x: f32[4194304] line 16, y: ..., a = 2"
  double first_ms = 0;     // the first launch, compiling included
  bool validated = false;  // the first launch ran checked because the caller chose the grid
  CompileReport compile;   // where the first launch's time went (when it compiled)
  bool compiled = false;
  bool has_reference = false;
  std::vector<TensorCheck> checks;
  bool passed = true;
  std::string plan;  // a host operation's choice on its first call (RunData::plan)
  std::vector<double> times_ms;  // the timed launches, each followed by sync
  double median_ms = 0, min_ms = 0;
  uint64_t bytes = 0;  // bytes of all tensor arguments (for an effective bandwidth)
  double flops = 0;    // arithmetic operations per launch, when the recipe says (RunRecipe::flops)
  // With RunConfig::keep_outputs: what the first run wrote to each writable tensor.
  std::map<std::string, std::vector<double>> outputs;
};

// Runs `kernel` as its recipe (or only its registration, with --shape for every tensor) says.
Result<RunResult> run(Runtime& rt, std::string_view kernel, const RunConfig& config);

}  // namespace kiln::kernels
