// The kiln runtime: open a device, allocate tensors, launch kernels, synchronize.
//
//   auto rt = kiln::Runtime::open("cpu").value();
//   auto x = rt.empty(kiln::ir::ElemType::F32, {n}).value();
//   x.upload(std::span<const float>(host)).ok();
//   auto axpy = rt.kernel("axpy").value();
//   const int w = rt.line_width({&x, &y});
//   rt.launch(axpy, {n / w / 256}, {256}, x, y, 2.0f);   // Status: argument and compile errors
//   rt.sync();                                          // Status: faults found while running
//
// Launches are asynchronous and in order per stream: their errors (a failed device assert, a
// checked-mode fault) arrive at sync(). On the CPU a launch has finished when launch() returns;
// on a GPU it has only been queued: read results after sync(). docs/runtime.md is the guide.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "compiler/dsl/registry.h"
#include "runtime/compile_report.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace kiln {

// What this machine has: each device kiln can open, or why it is absent (DeviceEntry is in
// runtime/device.h: "cpu", "cuda:0", or "cuda" when no CUDA device can be opened).
std::vector<DeviceEntry> devices();

// Cube counts and cube sizes: {x}, {x, y} or {x, y, z}.
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  Dim3() = default;
  Dim3(uint32_t x_, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT
  std::array<uint32_t, 3> array() const { return {x, y, z}; }
};

struct RuntimeOptions {
  bool checked = false;     // checked mode for every launch (LaunchOptions can override)
  uint64_t memory_cap = 0;  // the memory pool's cap in bytes; 0: none
  // Receives device prints at sync, one line each; stdout when empty.
  std::function<void(const std::string&)> print;
};

namespace detail {
struct RuntimeState;
struct StreamState;
struct SpecTable;
}  // namespace detail

// A queue of launches that run in order. Cheap to copy (shared).
class Stream {
 public:
  Stream() = default;
  bool valid() const { return s_ != nullptr; }

 private:
  friend class Runtime;
  std::shared_ptr<detail::StreamState> s_;
};

// A point in a stream: when everything launched before it had finished.
class Event {
 public:
  // Milliseconds from `a` to `b` (waits for `b` to be reached). Both from the same device.
  static Result<double> elapsed_ms(const Event& a, const Event& b);

 private:
  friend class Runtime;
  std::shared_ptr<DeviceEvent> e_;
};

// A registered kernel, ready to launch.
class Kernel {
 public:
  Kernel() = default;
  const dsl::KernelDef& def() const { return *def_; }
  const std::string& name() const { return def_->name; }

 private:
  friend class Runtime;
  const dsl::KernelDef* def_ = nullptr;
  detail::SpecTable* table_ = nullptr;
};

struct LaunchOptions {
  std::optional<bool> checked;                     // overrides RuntimeOptions::checked
  std::vector<std::pair<std::string, int>> lines;  // line widths by parameter name
  const Stream* stream = nullptr;                  // the runtime's default stream if null
};

// One launch argument, as the launch sees it (built from the C++ arguments).
struct LaunchArg {
  enum class Kind : uint8_t { Tensor, Number, Value };
  enum class Num : uint8_t { Bool, Int, UInt, Float };
  Kind kind = Kind::Value;
  Num num = Num::Int;
  const Tensor* tensor = nullptr;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  dsl::ComptimeValue comptime;  // numbers and comptime values, for comptime parameters
};

template <class T>
LaunchArg launch_arg(const T& v) {
  LaunchArg a;
  if constexpr (std::is_same_v<T, Tensor>) {
    a.kind = LaunchArg::Kind::Tensor;
    a.tensor = &v;
  } else if constexpr (std::is_arithmetic_v<T>) {
    a.kind = LaunchArg::Kind::Number;
    if constexpr (std::is_same_v<T, bool>) {
      a.num = LaunchArg::Num::Bool;
      a.u = v;
    } else if constexpr (std::is_floating_point_v<T>) {
      a.num = LaunchArg::Num::Float;
      a.f = static_cast<double>(v);
    } else if constexpr (std::is_signed_v<T>) {
      a.num = LaunchArg::Num::Int;
      a.i = static_cast<int64_t>(v);
    } else {
      a.num = LaunchArg::Num::UInt;
      a.u = static_cast<uint64_t>(v);
    }
    a.comptime = dsl::ComptimeValue::of(v);
  } else {
    static_assert(dsl::Comptime<T>,
                  "kiln: launch arguments are kiln::Tensor, numbers, or comptime values (enums "
                  "and structs declared with KILN_COMPTIME_ENUM / KILN_COMPTIME_STRUCT)");
    a.kind = LaunchArg::Kind::Value;
    a.comptime = dsl::ComptimeValue::of(v);
  }
  return a;
}

// A launch argument as other languages give them (the C API, Python): in order (no name), or
// a comptime parameter by name; `text` is a comptime value's text form ("Fast", "128").
struct LooseArg {
  std::string name;
  LaunchArg arg;
  std::optional<std::string> text;
};
// Puts loose arguments in the kernel's parameter order: named ones go to their comptime
// parameters, the rest fill the other parameters in order, and comptime parameters given
// neither way keep their registered defaults. Errors name the parameter (missing, unknown,
// given twice, text that does not parse).
Result<std::vector<LaunchArg>> order_args(const Kernel& kernel, std::span<const LooseArg> args);

class Runtime {
 public:
  // Opens "cpu" or "cuda:N". An absent device is an error that says why.
  static Result<Runtime> open(std::string_view device, RuntimeOptions options = {});

  const DeviceInfo& device() const;

  // ---- memory ----
  Result<Tensor> empty(ir::ElemType dtype, std::span<const int64_t> shape);
  Result<Tensor> empty(ir::ElemType dtype, std::initializer_list<int64_t> shape) {
    return empty(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // Existing memory as a tensor, without a copy: host memory on the CPU, device memory (a
  // CUdeviceptr) on a GPU. `release` runs when the last tensor using it goes; on an error it
  // is not called (the memory is still the caller's).
  Result<Tensor> wrap(void* data, ir::ElemType dtype, std::span<const int64_t> shape,
                      std::span<const int64_t> strides = {}, std::function<void()> release = {});
  MemoryStats memory_stats() const;
  // Returns cached memory to the device.
  void trim();

  // ---- streams ----
  Stream default_stream() const;
  Result<Stream> new_stream();
  // A stream over a native stream the caller owns and keeps alive longer than this Stream (a
  // CUstream of this runtime's GPU, e.g. a framework's current stream; 0 is the legacy default
  // stream): kiln's launches on it order with the caller's work, and sync() waits for it. The
  // CPU and the emulator have no native streams (an Unsupported error).
  Result<Stream> wrap_stream(void* native);
  // This runtime with `stream` (one of its own: new_stream, wrap_stream) as its default
  // stream. The copy shares the device, its memory and the caches; what is launched through it
  // without a stream, the kernel library's launches included, goes on `stream`, and its sync()
  // waits for `stream`. E.g. kiln::lib on a framework's current CUDA stream:
  //   KILN_ASSIGN(Stream s, rt.wrap_stream(torch_stream));
  //   KILN_ASSIGN(Runtime on, rt.on_stream(s));
  //   KILN_TRY(kiln::lib::softmax(on, x, y));   // ordered with the framework's work
  Result<Runtime> on_stream(const Stream& stream) const;
  // Waits for the stream's launches; returns the first fault they reported (and delivers
  // their prints).
  Status sync();
  Status sync(const Stream& stream);
  Result<Event> record(const Stream& stream);
  // Later launches on `stream` wait for `event`.
  Status wait(const Stream& stream, const Event& event);

  // ---- kernels ----
  Result<Kernel> kernel(std::string_view name) const;
  // The line width a launch picks for parameters registered with line=max: the widest that
  // divides every tensor's contiguous innermost dimension and its pointer alignment, capped
  // by the device's vector width.
  int line_width(std::initializer_list<const Tensor*> tensors) const;
  int line_width(const Tensor& t) const { return line_width({&t}); }
  // The widest line of `dtype` elements the device handles in one vector.
  int max_lanes(ir::ElemType dtype) const;

  // Launches `kernel` over `cubes` cubes of `cube_dim` units. The arguments follow the kernel
  // function's parameters: kiln::Tensor for tensors and arrays, numbers for scalars, C++
  // values for comptime parameters. Argument and compile errors come back here; faults
  // while running come back from sync().
  template <class... Args>
  Status launch(const Kernel& kernel, Dim3 cubes, Dim3 cube_dim, const Args&... args) {
    const LaunchArg list[] = {launch_arg(args)..., LaunchArg{}};
    return launch_args(kernel, cubes, cube_dim, {},
                       std::span<const LaunchArg>(list, sizeof...(Args)));
  }
  template <class... Args>
  Status launch_with(const LaunchOptions& options, const Kernel& kernel, Dim3 cubes, Dim3 cube_dim,
                     const Args&... args) {
    const LaunchArg list[] = {launch_arg(args)..., LaunchArg{}};
    return launch_args(kernel, cubes, cube_dim, options,
                       std::span<const LaunchArg>(list, sizeof...(Args)));
  }
  Status launch_args(const Kernel& kernel, Dim3 cubes, Dim3 cube_dim, const LaunchOptions& options,
                     std::span<const LaunchArg> args);

 private:
  Status check_stream(const Stream& stream, std::string_view op) const;

  std::shared_ptr<detail::RuntimeState> s_;
};

}  // namespace kiln
