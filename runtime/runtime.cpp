// Runtime: devices, streams, kernels and the launch path.
#include "runtime/runtime.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "compiler/dsl/selection.h"
#include "ir/float16.h"
#include "ir/verifier.h"
#include "runtime/cpu/exec.h"
#include "runtime/device.h"
#include "runtime/specialization.h"

namespace kiln {

namespace detail {

struct StreamState {
  std::mutex mu;
  const Device* device = nullptr;
  std::unique_ptr<DeviceStream> stream;
};

struct RuntimeState {
  std::shared_ptr<Device> device;
  RuntimeOptions options;
  uint16_t target_id = 0;
  Stream default_stream;
};

}  // namespace detail

namespace {

constexpr size_t kMaxParams = 32;

// A small id per distinct target, for keys.
uint16_t target_id_of(const std::string& target_key) {
  static std::mutex mu;
  static std::map<std::string, uint16_t> ids;
  std::lock_guard<std::mutex> lock(mu);
  auto it = ids.find(target_key);
  if (it != ids.end()) return it->second;
  const auto id = static_cast<uint16_t>(ids.size() + 1);
  ids.emplace(target_key, id);
  return id;
}

// ---- launch helpers
// ------------------------------------------------------------------------------

Error arg_error(const dsl::KernelDef& def, const dsl::ParamInfo& p, const std::string& what) {
  return Error(ErrorKind::InvalidArgument,
               fmt::format("kernel '{}', argument '{}': {}", def.name, p.name, what));
}

// Whether a tensor can be read in lines of `w` elements (and, with `aligned`, whether its
// pointer is aligned to a whole line).
bool lines_fit(const Tensor& t, int w, bool aligned) {
  if (w == 1) return true;
  const int r = t.rank();
  if (r < 1) return false;
  const int64_t last = t.shape(r - 1);
  if (last % w != 0 || (last > 1 && t.stride(r - 1) != 1)) return false;
  for (int d = 0; d + 1 < r; ++d)
    if (t.stride(d) % w != 0) return false;
  if (aligned &&
      reinterpret_cast<uintptr_t>(t.data()) % (static_cast<uintptr_t>(w) * t.element_bytes()) != 0)
    return false;
  return true;
}

int widest_lines(const Device& dev, const Tensor& t) {
  for (int w = dev.max_lanes(static_cast<int>(t.element_bytes())); w > 1; w /= 2)
    if (lines_fit(t, w, true)) return w;
  return 1;
}

// The bits of a numeric argument as the parameter's element type, or why it does not fit.
Result<uint64_t> scalar_bits(const dsl::KernelDef& def, const dsl::ParamInfo& p,
                             const LaunchArg& a) {
  using ir::ElemType;
  const ElemType t = p.dtype;
  if (t == ElemType::Bool) {
    if (a.num != LaunchArg::Num::Bool)
      return arg_error(def, p, "a Bool parameter takes true or false");
    return a.u;
  }
  if (a.num == LaunchArg::Num::Bool)
    return arg_error(def, p,
                     fmt::format("it is {} and takes a number, not a bool", ir::elem_name(t)));
  if (ir::is_float(t)) {
    const double v = a.num == LaunchArg::Num::Float ? a.f
                     : a.num == LaunchArg::Num::Int ? static_cast<double>(a.i)
                                                    : static_cast<double>(a.u);
    const double r = ir::round_float_literal(t, v);
    if (std::isinf(r) && !std::isinf(v))
      return arg_error(def, p, fmt::format("{} is out of range for {}", v, ir::elem_name(t)));
    if (t == ElemType::F8E4M3 && std::isinf(v))
      return arg_error(def, p, "f8e4m3 has no infinity (its largest value is 448)");
    if (a.num != LaunchArg::Num::Float &&
        (r != v || (a.num == LaunchArg::Num::Int ? static_cast<int64_t>(v) != a.i
                                                 : static_cast<uint64_t>(v) != a.u)))
      return arg_error(
          def, p,
          fmt::format("the integer {} is not exactly representable in {}; pass a float",
                      a.num == LaunchArg::Num::Int ? std::to_string(a.i) : std::to_string(a.u),
                      ir::elem_name(t)));
    switch (t) {
      case ElemType::F16:
        return uint64_t{f16_bits(r)};
      case ElemType::BF16:
        return uint64_t{bf16_bits(r)};
      case ElemType::F8E4M3:
        return uint64_t{e4m3_bits(r)};
      case ElemType::F8E5M2:
        return uint64_t{e5m2_bits(r)};
      case ElemType::F32: {
        const float f = static_cast<float>(r);
        uint32_t b;
        std::memcpy(&b, &f, 4);
        return uint64_t{b};
      }
      default: {
        uint64_t b;
        std::memcpy(&b, &r, 8);
        return b;
      }
    }
  }
  if (a.num == LaunchArg::Num::Float || a.num == LaunchArg::Num::Bool)
    return arg_error(def, p,
                     fmt::format("it is {} and takes an integer, not a floating-point number",
                                 ir::elem_name(t)));
  const int bits = ir::elem_bits(t);
  const bool neg = a.num == LaunchArg::Num::Int && a.i < 0;
  const uint64_t mag = neg                            ? 0 - static_cast<uint64_t>(a.i)
                       : a.num == LaunchArg::Num::Int ? static_cast<uint64_t>(a.i)
                                                      : a.u;
  bool fits;
  if (ir::is_signed(t)) {
    const uint64_t limit = uint64_t{1} << (bits - 1);
    fits = neg ? mag <= limit : mag < limit;
  } else {
    fits = !neg && (bits == 64 || mag < (uint64_t{1} << bits));
  }
  if (!fits)
    return arg_error(
        def, p,
        fmt::format("{} does not fit in {}",
                    a.num == LaunchArg::Num::Int ? std::to_string(a.i) : std::to_string(a.u),
                    ir::elem_name(t)));
  const uint64_t raw = a.num == LaunchArg::Num::Int ? static_cast<uint64_t>(a.i) : a.u;
  return bits == 64 ? raw : raw & ((uint64_t{1} << bits) - 1);
}

}  // namespace

// ---- devices and runtimes
// ---------------------------------------------------------------------------

std::vector<DeviceEntry> devices() {
  std::vector<DeviceEntry> out;
  for (const DeviceFamily& f : device_families())
    for (DeviceEntry& e : f.list()) out.push_back(std::move(e));
  return out;
}

namespace {
Result<std::shared_ptr<detail::StreamState>> make_stream(Device& dev) {
  auto s = std::make_shared<detail::StreamState>();
  s->device = &dev;
  KILN_ASSIGN(s->stream, dev.new_stream());
  return s;
}
}  // namespace

Result<Runtime> Runtime::open(std::string_view name, RuntimeOptions options) {
  auto state = std::make_shared<detail::RuntimeState>();
  state->options = std::move(options);
  const DeviceFamily* family = nullptr;
  const std::vector<DeviceFamily> families = device_families();
  for (const DeviceFamily& f : families)
    if (f.claims(name)) family = &f;
  if (!family) {
    std::string names;
    for (size_t i = 0; i < families.size(); ++i)
      names += fmt::format("{}'{}'",
                           i == 0                     ? ""
                           : i + 1 == families.size() ? " and "
                                                      : ", ",
                           families[i].syntax);
    return Error(
        ErrorKind::NotFound,
        fmt::format("unknown device '{}'; devices are {} (see kiln devices)", name, names));
  }
  KILN_ASSIGN(state->device, family->open(name, state->options.memory_cap));
  // The key of a specialization names the device instance: GPU modules belong to a context.
  state->target_id =
      target_id_of(fmt::format("{}@{}", state->device->target_key(), state->device->info().name));
  KILN_ASSIGN(state->default_stream.s_, make_stream(*state->device));
  Runtime rt;
  rt.s_ = std::move(state);
  return rt;
}

const DeviceInfo& Runtime::device() const {
  return s_->device->info();
}

Result<Tensor> Runtime::empty(ir::ElemType dtype, std::span<const int64_t> shape) {
  int64_t bytes = ir::elem_bytes(dtype);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("empty: dimension {} is negative ({})", d, shape[d]));
    if (__builtin_mul_overflow(bytes, shape[d], &bytes))
      return Error(ErrorKind::OutOfMemory, "empty: the tensor's size in bytes overflows 64 bits");
  }
  KILN_ASSIGN(Buffer b, Buffer::allocate(s_->device->pool(), static_cast<size_t>(bytes)));
  return Tensor::make(s_->device, std::move(b), dtype, shape);
}

namespace {

// Whether the byte at `at` of this process can be read, without touching it: a one-byte
// process_vm_readv of our own memory fails with EFAULT where a read would fault (unmapped,
// PROT_NONE, or a region a sanitizer reserved). Where the call is not allowed (seccomp), a page
// that mincore does not find unmapped.
// The pages found readable last are remembered per thread: the call costs microseconds (a page
// walk in the kernel), and a program that wraps the same arrays on every launch (a Python loop
// over NumPy arrays or torch tensors, through DLPack) would pay it twice per tensor per launch.
// A remembered page that has been unmapped since is accepted, as it was before this check
// existed; what the check is for, strides that reach past an allocation, reach pages not seen.
bool host_readable(uintptr_t at) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  thread_local std::array<uintptr_t, 16> seen{};  // page addresses; 0 (never readable): empty
  thread_local size_t next = 0;
  const uintptr_t first = at & ~(page - 1);
  for (uintptr_t p : seen)
    if (p == first && p != 0) return true;
  unsigned char byte = 0;
  iovec local{&byte, 1}, remote{reinterpret_cast<void*>(at), 1};
  const ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  bool readable = n == 1;
  if (n != 1 && !(n < 0 && errno == EFAULT)) {
    unsigned char resident = 0;
    readable = !(::mincore(reinterpret_cast<void*>(first), 1, &resident) != 0 && errno == ENOMEM);
  }
  if (readable) seen[next++ % seen.size()] = first;
  return readable;
}

}  // namespace

Result<Tensor> Runtime::wrap(void* data, ir::ElemType dtype, std::span<const int64_t> shape,
                             std::span<const int64_t> strides, std::function<void()> release) {
  if (!data) return Error(ErrorKind::InvalidArgument, "wrap: null data pointer");
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(ir::elem_bytes(dtype)) != 0)
    return Error(ErrorKind::InvalidArgument,
                 "wrap: the pointer is not aligned to the element size");
  // Everything the tensor would refuse is refused here, before the memory is taken: on an
  // error `release` is not called and the memory stays the caller's.
  if (shape.size() > static_cast<size_t>(kMaxTensorRank))
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("wrap: a tensor has at most {} dimensions, got {}", kMaxTensorRank,
                             shape.size()));
  if (!strides.empty() && strides.size() != shape.size())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("wrap: {} strides for {} dimensions", strides.size(), shape.size()));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("wrap: dimension {} is {}", d, shape[d]));
    if (!strides.empty() && strides[d] < 0)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("wrap: stride {} is {}; strides are not negative", d, strides[d]));
  }
  // The extent the view reaches bounds the wrapped size; every step is checked, so that a
  // stride of 2^40 or INT64_MAX is refused here rather than read at a wrapped address later.
  int64_t last = 0, n = 1;
  auto too_far = [&](size_t d) {
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("wrap: the view reaches beyond the address space (dimension {}: "
                             "size {}, stride {}); check the shape and strides",
                             d, shape[d], strides.empty() ? 0 : strides[d]));
  };
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t st = strides.empty() ? 0 : strides[d];
    int64_t step = 0;
    if (__builtin_mul_overflow(n, shape[d], &n) ||
        __builtin_mul_overflow(shape[d] > 0 ? shape[d] - 1 : 0, st, &step) ||
        __builtin_add_overflow(last, step, &last))
      return too_far(d);
  }
  const int64_t elems = strides.empty() ? n : (n == 0 ? 0 : last + 1);
  int64_t bytes = 0;
  uintptr_t end = 0;
  if (__builtin_mul_overflow(elems, int64_t{ir::elem_bytes(dtype)}, &bytes) ||
      __builtin_add_overflow(reinterpret_cast<uintptr_t>(data), static_cast<uintptr_t>(bytes),
                             &end) ||
      bytes > (int64_t{1} << 56))
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("wrap: the view reaches {} elements of {} bytes past the pointer, "
                             "beyond the address space; check the shape and strides",
                             elems, ir::elem_bytes(dtype)));
  // Host memory: the first and the last byte the view reaches must be readable (a stride far
  // past the allocation would otherwise fault at the first download). Pages in between are the
  // caller's promise.
  if (bytes > 0 && s_->device->info().host_memory) {
    for (uintptr_t at : {reinterpret_cast<uintptr_t>(data), end - 1})
      if (!host_readable(at))
        return Error(ErrorKind::InvalidArgument,
                     fmt::format("wrap: the view reaches {} bytes past the pointer, to memory "
                                 "that cannot be read; check the shape and strides (in elements)",
                                 at - reinterpret_cast<uintptr_t>(data)));
  }
  Buffer b = Buffer::wrap(data, static_cast<size_t>(bytes), std::move(release));
  return Tensor::make(s_->device, std::move(b), dtype, shape, strides);
}

MemoryStats Runtime::memory_stats() const {
  return s_->device->pool()->stats();
}
void Runtime::trim() {
  s_->device->pool()->trim();
}

Stream Runtime::default_stream() const {
  return s_->default_stream;
}

Result<Stream> Runtime::new_stream() {
  Stream s;
  KILN_ASSIGN(s.s_, make_stream(*s_->device));
  return s;
}

Result<Stream> Runtime::wrap_stream(void* native) {
  auto s = std::make_shared<detail::StreamState>();
  s->device = s_->device.get();
  KILN_ASSIGN(s->stream, s_->device->wrap_stream(native));
  Stream out;
  out.s_ = std::move(s);
  return out;
}

Result<Runtime> Runtime::on_stream(const Stream& stream) const {
  KILN_TRY(check_stream(stream, "on_stream"));
  auto state = std::make_shared<detail::RuntimeState>(*s_);
  state->default_stream = stream;
  Runtime rt;
  rt.s_ = std::move(state);
  return rt;
}

Status Runtime::sync() {
  return sync(s_->default_stream);
}

// A stream handle this Runtime may use: one made by it (each Runtime has a device object of
// its own, so another Runtime's stream is refused even on the same device).
Status Runtime::check_stream(const Stream& stream, std::string_view op) const {
  if (!stream.valid())
    return Error(ErrorKind::InvalidArgument, fmt::format("{} on an empty stream handle", op));
  if (stream.s_->device != s_->device.get())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("{} on a stream of another Runtime ({}); use the Runtime whose "
                             "new_stream() or wrap_stream() made it",
                             op, stream.s_->device->info().name));
  return {};
}

Status Runtime::sync(const Stream& stream) {
  KILN_TRY(check_stream(stream, "sync"));
  std::vector<std::string> prints;
  std::optional<Error> err;
  {
    std::lock_guard<std::mutex> lock(stream.s_->mu);
    if (auto st = stream.s_->stream->sync(prints, err); !st && !err) err = st.error();
  }
  for (const std::string& line : prints) {
    if (s_->options.print)
      s_->options.print(line);
    else
      std::printf("%s\n", line.c_str());
  }
  if (!prints.empty() && !s_->options.print) std::fflush(stdout);
  if (err) return *err;
  return {};
}

Result<Event> Runtime::record(const Stream& stream) {
  KILN_TRY(check_stream(stream, "record"));
  Event e;
  std::lock_guard<std::mutex> lock(stream.s_->mu);
  KILN_ASSIGN(e.e_, stream.s_->stream->record());
  return e;
}

Status Runtime::wait(const Stream& stream, const Event& event) {
  KILN_TRY(check_stream(stream, "wait"));
  if (!event.e_) return Error(ErrorKind::InvalidArgument, "wait on an event never recorded");
  std::lock_guard<std::mutex> lock(stream.s_->mu);
  return stream.s_->stream->wait(*event.e_);
}

Result<double> Event::elapsed_ms(const Event& a, const Event& b) {
  if (!a.e_ || !b.e_)
    return Error(ErrorKind::InvalidArgument, "elapsed_ms of an event never recorded");
  return b.e_->since(*a.e_);
}

Result<Kernel> Runtime::kernel(std::string_view name) const {
  const dsl::KernelDef* def = dsl::Registry::global().find(name);
  if (!def) {
    std::string names;
    for (const dsl::KernelDef* d : dsl::Registry::global().all())
      names += (names.empty() ? "" : ", ") + d->name;
    // The usual cause in a program: the library that defines it is not loaded. A linked one
    // registers at start-up, unless the linker dropped it because nothing calls into it.
    return Error(ErrorKind::NotFound,
                 fmt::format("no kernel named '{}'; registered kernels: {}. A kernel registers "
                             "when its library loads: load a plugin with kiln::load_plugin, or "
                             "link the library through kiln_add_kernels (a library linked with "
                             "--as-needed is dropped when the program calls nothing in it; "
                             "-Wl,--no-as-needed keeps it)",
                             name, names.empty() ? "none" : names));
  }
  Kernel k;
  k.def_ = def;
  k.table_ = detail::table_for(def);
  return k;
}

int Runtime::line_width(std::initializer_list<const Tensor*> tensors) const {
  int w = 16;
  for (const Tensor* t : tensors) w = std::min(w, widest_lines(*s_->device, *t));
  return w;
}

int Runtime::max_lanes(ir::ElemType dtype) const {
  return s_->device->max_lanes(ir::elem_bytes(dtype));
}

// ---- launch
// ------------------------------------------------------------------------------------------

namespace {

// What a launch builds on the stack (no allocation): the specialization key, the trace's
// argument descriptors and comptime values, the host views of the runtime arguments, and the
// parameter each runtime argument is.
// The phases of a launch are inlined into it: as calls, each returning a Status, they cost a
// cached launch about 5% (runtime_bench).
#define KILN_LAUNCH_PHASE [[gnu::always_inline]] inline

struct LaunchFrame {
  detail::SpecKey key;
  std::array<dsl::ArgDesc, kMaxParams> descs;
  std::array<HostArg, kMaxParams> host;
  std::array<dsl::ComptimeValue, kMaxParams> comptime;
  std::array<uint8_t, kMaxParams> param_of;
  size_t nr = 0, nc = 0;
  int common_width = -1;  // for line=max parameters, found on first need
};

// The checks of a launch that need no argument: the kernel's registration, the argument count,
// the cube size and the cube count.
KILN_LAUNCH_PHASE Status check_launch(const dsl::KernelDef& def, size_t arg_count, Dim3 cubes,
                                      Dim3 cube_dim) {
  if (!def.problem.empty())
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("{}:{}: error: kernel '{}' is not registered correctly: {}", def.file,
                             def.line, def.name, def.problem));
  const std::vector<dsl::ParamInfo>& params0 = def.instantiations.front().params;
  if (arg_count != params0.size()) {
    std::string names;
    for (const auto& p : params0) names += (names.empty() ? "" : ", ") + p.name;
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kernel '{}' takes {} arguments ({}), got {}", def.name,
                             params0.size(), names, arg_count));
  }
  if (params0.size() > kMaxParams)
    return Error(ErrorKind::Unsupported,
                 fmt::format("kernel '{}' has more than {} parameters", def.name, kMaxParams));
  const uint64_t units = uint64_t{cube_dim.x} * cube_dim.y * cube_dim.z;
  if (units == 0 || units > ir::kMaxUnitsPerCube)
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kernel '{}': a cube of {}x{}x{} units; use 1 to {} units per cube",
                             def.name, cube_dim.x, cube_dim.y, cube_dim.z, ir::kMaxUnitsPerCube));
  if (cubes.x == 0 || cubes.y == 0 || cubes.z == 0 ||
      uint64_t{cubes.x} * cubes.y * cubes.z > 0xffffffffu)
    return Error(
        ErrorKind::InvalidArgument,
        fmt::format(
            "kernel '{}': {}x{}x{} cubes; each count must be at least 1 and the total below 2^32",
            def.name, cubes.x, cubes.y, cubes.z));
  return {};
}

// A tensor or array argument: its device, rank, contiguity and line width, into the frame.
KILN_LAUNCH_PHASE Status add_tensor_arg(LaunchFrame& f, const Device& dev,
                                        const dsl::KernelDef& def, const dsl::Instantiation& inst,
                                        size_t i, const LaunchOptions& o,
                                        std::span<const LaunchArg> args) {
  const dsl::ParamInfo& p = inst.params[i];
  const LaunchArg& a = args[i];
  if (a.kind != LaunchArg::Kind::Tensor || !a.tensor->valid())
    return arg_error(
        def, p, fmt::format("the kernel takes a tensor here ({})", dsl::param_kind_name(p.kind)));
  const Tensor& t = *a.tensor;
  if (t.device() != &dev)
    return arg_error(
        def, p,
        t.device()->info().name == dev.info().name
            ? fmt::format("the tensor belongs to another Runtime on {}; a launch takes "
                          "tensors of its own runtime (copy it over, or launch there)",
                          dev.info().name)
            : fmt::format("the tensor is on {}, the launch on {}", t.device()->info().name,
                          dev.info().name));
  if (t.rank() < 1)
    return arg_error(def, p, "tensors passed to kernels have at least one dimension");
  if (p.kind == dsl::ParamKind::Array && !t.is_contiguous())
    return arg_error(def, p, "an Array parameter takes a contiguous tensor; this view is strided");
  // The line width: the launch's choice, else the registered one (0: the widest that fits).
  int w = p.default_line;
  for (const auto& [name, width] : o.lines)
    if (name == p.name) w = width;
  if (w == 0) {
    if (f.common_width < 0)
      f.common_width = dsl::line_max_width(inst, [&](size_t j) {
        return args[j].kind == LaunchArg::Kind::Tensor && args[j].tensor->valid()
                   ? widest_lines(dev, *args[j].tensor)
                   : 0;
      });
    w = f.common_width;
  }
  if (!ir::valid_lanes(w))
    return arg_error(def, p, fmt::format("line width {} is not 1, 2, 4, 8 or 16", w));
  if (!lines_fit(t, w, false))
    return arg_error(
        def, p,
        fmt::format(
            "{} cannot be read in lines of {}: its innermost dimension must be contiguous and "
            "a multiple of {} (and outer strides multiples of {}); choose a width with "
            "Runtime::line_width and LaunchOptions::lines",
            t.describe(), w, w, w));
  if (std::string why = dev.line_problem(t, w); !why.empty()) return arg_error(def, p, why);
  dsl::ArgDesc& d = f.descs[f.nr];
  d.dtype = t.dtype();
  d.rank = static_cast<uint8_t>(p.kind == dsl::ParamKind::Tensor ? t.rank() : 0);
  d.line = static_cast<uint8_t>(w);
  d.read_only = t.read_only() || p.const_qualified;
  f.key.put(d.dtype);
  f.key.put(d.rank);
  f.key.put(d.line);
  f.key.put(d.read_only);
  if (p.kind == dsl::ParamKind::Tensor)
    f.host[f.nr] = TensorView(t.data(), t.shape(), t.strides());
  else
    f.host[f.nr] = ArrayView{t.data(), static_cast<uint64_t>(t.numel())};
  f.param_of[f.nr++] = static_cast<uint8_t>(i);
  return {};
}

// A comptime argument, converted to the parameter's C++ type when it fits, into the key.
KILN_LAUNCH_PHASE Status add_comptime_arg(LaunchFrame& f, const dsl::KernelDef& def,
                                          const dsl::ParamInfo& p, const LaunchArg& a) {
  if (a.kind == LaunchArg::Kind::Tensor || a.comptime.empty())
    return arg_error(def, p, fmt::format("the kernel takes a comptime {} here", p.comptime_type));
  dsl::ComptimeValue v = a.comptime;
  if (v.type_name() != p.comptime_type) {
    // A number of another C++ type: converted when it fits (256 for an unsigned).
    auto converted = a.kind == LaunchArg::Kind::Number ? p.parse(v.format())
                                                       : Result<dsl::ComptimeValue>(Error());
    if (!converted)
      return arg_error(def, p,
                       fmt::format("the comptime parameter takes a {}, got a {} ({})",
                                   p.comptime_type, v.type_name(), v.format()));
    v = *converted;
  }
  uint8_t buf[dsl::ComptimeValue::kMaxSize];
  dsl::KeyWriter w(buf, sizeof buf);
  v.encode(w);
  f.key.put_bytes(buf, w.size());
  f.comptime[f.nc++] = v;
  return {};
}

// Every line width a launch chooses names a tensor or array parameter (a misspelt name would
// otherwise be ignored, and the launch run with widths the caller did not choose).
Status check_line_names(const dsl::KernelDef& def, const dsl::Instantiation& inst,
                        const LaunchOptions& o) {
  for (const auto& [name, width] : o.lines) {
    bool found = false;
    for (const auto& p : inst.params)
      found = found || (p.name == name &&
                        (p.kind == dsl::ParamKind::Tensor || p.kind == dsl::ParamKind::Array));
    if (!found)
      return Error(ErrorKind::InvalidArgument,
                   fmt::format("kernel '{}': LaunchOptions::lines names '{}', which is not a "
                               "tensor parameter of the kernel",
                               def.name, name));
  }
  return {};
}

// Views the kernel would read or write outside of (docs/runtime.md "Views"): a flat-indexed
// parameter takes only dense row-major views, a written one no view that reaches an element
// twice.
Status check_views(const detail::Spec& spec, const LaunchFrame& f, const dsl::KernelDef& def,
                   const dsl::Instantiation& inst, std::span<const LaunchArg> args) {
  const uint64_t watched = spec.flat_params | spec.written_params;
  for (size_t j = 0; j < f.nr && j < 64; ++j) {
    if (!(watched >> j & 1)) continue;
    const dsl::ParamInfo& p = inst.params[f.param_of[j]];
    const Tensor& t = *args[f.param_of[j]].tensor;
    if (spec.flat_params >> j & 1 && !t.is_contiguous() && t.numel() > 0)
      return arg_error(
          def, p,
          fmt::format("the kernel indexes it flat ({}[i]), which reads only a dense row-major "
                      "view, but this view of {} has strides {}; pass a contiguous tensor (a "
                      "copy: .contiguous() in PyTorch, numpy.ascontiguousarray, "
                      "kiln::lib::copy), or index it through its strides in the kernel "
                      "({}(i, j))",
                      p.name, t.describe(), t.strides_text(), p.name));
    if (spec.written_params >> j & 1 && t.may_overlap())
      return arg_error(
          def, p,
          fmt::format("the kernel writes it, but this view of {} with strides {} reaches some "
                      "elements more than once (a stride of 0 or overlapping strides, as "
                      "expand() or as_strided make); write into a tensor of its own",
                      t.describe(), t.strides_text()));
  }
  return {};
}

}  // namespace
#undef KILN_LAUNCH_PHASE

Status Runtime::launch_args(const Kernel& kernel, Dim3 cubes, Dim3 cube_dim, const LaunchOptions& o,
                            std::span<const LaunchArg> args) {
  if (!kernel.def_) return Error(ErrorKind::InvalidArgument, "launch of an empty Kernel handle");
  const dsl::KernelDef& def = *kernel.def_;
  KILN_TRY(check_launch(def, args.size(), cubes, cube_dim));
  const std::vector<dsl::ParamInfo>& params0 = def.instantiations.front().params;
  // The instantiation whose element types match the tensors.
  const auto found = dsl::find_instantiation(def, [&](size_t i) -> std::optional<ir::ElemType> {
    const dsl::ParamKind k = params0[i].kind;
    if ((k == dsl::ParamKind::Tensor || k == dsl::ParamKind::Array) &&
        args[i].kind == LaunchArg::Kind::Tensor && args[i].tensor->valid())
      return args[i].tensor->dtype();
    return std::nullopt;
  });
  if (!found) {
    std::string have;
    for (size_t i = 0; i < params0.size(); ++i)
      if (args[i].kind == LaunchArg::Kind::Tensor && args[i].tensor->valid())
        have += fmt::format("{}{}: {}", have.empty() ? "" : ", ", params0[i].name,
                            ir::elem_name(args[i].tensor->dtype()));
    return dsl::no_instantiation(def, have);
  }
  const size_t inst_index = *found;
  const dsl::Instantiation& inst = def.instantiations[inst_index];
  const Device& dev = *s_->device;
  const bool checked = o.checked.value_or(s_->options.checked);

  // Descriptors and the key, on the stack.
  LaunchFrame f;
  f.key.put(static_cast<uint8_t>(inst_index));
  for (size_t i = 0; i < inst.params.size(); ++i) {
    const dsl::ParamInfo& p = inst.params[i];
    const LaunchArg& a = args[i];
    if (p.kind == dsl::ParamKind::Tensor || p.kind == dsl::ParamKind::Array) {
      KILN_TRY(add_tensor_arg(f, dev, def, inst, i, o, args));
    } else if (p.kind == dsl::ParamKind::Scalar) {
      if (a.kind != LaunchArg::Kind::Number)
        return arg_error(
            def, p, fmt::format("the kernel takes a number here ({})", ir::elem_name(p.dtype)));
      KILN_ASSIGN(uint64_t bits, scalar_bits(def, p, a));
      f.descs[f.nr] = dsl::ArgDesc{p.dtype, 0, 1, false};
      f.host[f.nr] = ScalarBits{bits};
      f.param_of[f.nr++] = static_cast<uint8_t>(i);
    } else {
      KILN_TRY(add_comptime_arg(f, def, p, a));
    }
  }
  if (!o.lines.empty()) KILN_TRY(check_line_names(def, inst, o));
  f.key.put(cube_dim.array());
  f.key.put(s_->target_id);
  f.key.put(checked);
  f.key.finish();
  if (f.key.overflow)
    return Error(ErrorKind::Unsupported,
                 fmt::format("kernel '{}': the comptime values are too large for a key", def.name));

  const detail::Spec* spec = detail::find_ready(*kernel.table_, f.key);
  if (!spec) {
    detail::BuildRequest req;
    req.def = &def;
    req.inst = &inst;
    req.trace.args.assign(f.descs.begin(), f.descs.begin() + static_cast<long>(f.nr));
    req.trace.comptime.assign(f.comptime.begin(), f.comptime.begin() + static_cast<long>(f.nc));
    req.trace.cube_dim = cube_dim.array();
    req.options.checked = checked;
    req.device = s_->device;
    KILN_ASSIGN(spec, detail::get_or_build(*kernel.table_, f.key, req));
  }
  if (spec->flat_params | spec->written_params) KILN_TRY(check_views(*spec, f, def, inst, args));

  const Stream& stream = o.stream ? *o.stream : s_->default_stream;
  KILN_TRY(check_stream(stream, "launch"));
  if (std::string why = dev.grid_problem(cubes.array()); !why.empty())
    return Error(ErrorKind::InvalidArgument, fmt::format("kernel '{}': {}", def.name, why));
  std::lock_guard<std::mutex> lock(stream.s_->mu);
  return stream.s_->stream->launch(*spec->code, cubes.array(),
                                   std::span<const HostArg>(f.host.data(), f.nr));
}

}  // namespace kiln
