// The C API (kiln.h) over the C++ runtime: handles own C++ objects, errors become a status and
// a thread-local message, and no C++ exception or type crosses the boundary.
#include "runtime/api/kiln.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/api/dlpack.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0"
#endif

struct kiln_runtime {
  kiln::Runtime rt;
};
struct kiln_tensor {
  kiln::Tensor t;
};
struct kiln_kernel {
  kiln::Kernel k;
};
struct kiln_stream {
  kiln::Stream s;
};

namespace {

using kiln::Error;
using kiln::ErrorKind;

thread_local std::string t_last_error;

kiln_status status_of(ErrorKind k) {
  switch (k) {
    case ErrorKind::InvalidArgument:
      return KILN_INVALID_ARGUMENT;
    case ErrorKind::Parse:
      return KILN_PARSE;
    case ErrorKind::Verify:
      return KILN_VERIFY;
    case ErrorKind::Trace:
      return KILN_TRACE;
    case ErrorKind::Compile:
      return KILN_COMPILE;
    case ErrorKind::OutOfMemory:
      return KILN_OUT_OF_MEMORY;
    case ErrorKind::Device:
      return KILN_DEVICE;
    case ErrorKind::Io:
      return KILN_IO;
    case ErrorKind::NotFound:
      return KILN_NOT_FOUND;
    case ErrorKind::Unsupported:
      return KILN_UNSUPPORTED;
    case ErrorKind::KernelFault:
      return KILN_KERNEL_FAULT;
  }
  return KILN_INVALID_ARGUMENT;
}

kiln_status fail(const Error& e) {
  t_last_error = e.message;
  return status_of(e.kind);
}
kiln_status fail(kiln_status s, std::string message) {
  t_last_error = std::move(message);
  return s;
}
kiln_status invalid(const char* fn, const char* what) {
  return fail(KILN_INVALID_ARGUMENT, fmt::format("{}: {}", fn, what));
}

// Runs `body`, turning what C++ throws (an allocation that fails) into a status: nothing
// unwinds into C.
template <class F>
kiln_status guarded(const char* fn, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(KILN_OUT_OF_MEMORY, fmt::format("{}: out of host memory", fn));
  } catch (const std::exception& e) {
    return fail(KILN_INVALID_ARGUMENT, fmt::format("{}: {}", fn, e.what()));
  }
}

bool valid_dtype(kiln_dtype d) {
  return static_cast<int>(d) >= 0 && static_cast<int>(d) < kiln::ir::kNumElemTypes;
}

void copy_text(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

kiln_status take_tensor(kiln::Result<kiln::Tensor> r, kiln_tensor** out) {
  if (!r) return fail(r.error());
  *out = new kiln_tensor{std::move(*r)};
  return KILN_OK;
}

}  // namespace

namespace kiln {

Result<std::vector<LaunchArg>> order_args(const Kernel& kernel, std::span<const LooseArg> args) {
  const dsl::KernelDef& def = kernel.def();
  const auto& params = def.instantiations.front().params;
  auto bad = [&](std::string m) {
    return Error(ErrorKind::InvalidArgument, fmt::format("kernel '{}': {}", def.name, m));
  };
  std::vector<const LooseArg*> positional, by_param(params.size(), nullptr);
  for (const LooseArg& a : args) {
    if (a.name.empty()) {
      positional.push_back(&a);
      continue;
    }
    size_t p = 0;
    while (p < params.size() && params[p].name != a.name) ++p;
    if (p == params.size() || params[p].runtime()) {
      std::string names;
      for (const auto& q : params)
        if (!q.runtime()) names += (names.empty() ? "" : ", ") + q.name;
      return bad(
          fmt::format("no comptime parameter '{}' (only comptime parameters are given "
                      "by name; {})",
                      a.name, names.empty() ? std::string("it has none") : "it has: " + names));
    }
    if (by_param[p]) return bad(fmt::format("'{}' is given twice", a.name));
    by_param[p] = &a;
  }
  size_t next = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    if (by_param[p]) continue;
    if (next < positional.size())
      by_param[p] = positional[next++];
    else if (params[p].runtime())
      return bad(fmt::format("it takes {} arguments in order; '{}' (argument {}) is missing",
                             params.size(), params[p].name, p + 1));
  }
  if (next < positional.size())
    return bad(fmt::format("it takes {} parameters, got {} arguments", params.size(), args.size()));
  std::vector<LaunchArg> list;
  list.reserve(params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    const dsl::ParamInfo& info = params[p];
    const LooseArg* a = by_param[p];
    if (!a) {  // a comptime parameter left at its default
      LaunchArg d;
      d.kind = LaunchArg::Kind::Value;
      d.comptime = *info.default_value;
      list.push_back(d);
    } else if (a->text) {
      if (info.runtime() || !info.parse)
        return bad(
            fmt::format("'{}' is a runtime parameter; text is for comptime values", info.name));
      auto v = info.parse(*a->text);
      if (!v) return bad(fmt::format("comptime parameter '{}': {}", info.name, v.error().message));
      LaunchArg c;
      c.kind = LaunchArg::Kind::Value;
      c.comptime = *v;
      list.push_back(c);
    } else {
      list.push_back(a->arg);
    }
  }
  return list;
}

}  // namespace kiln

extern "C" {

const char* kiln_version(void) {
  return KILN_VERSION;
}

const char* kiln_last_error(void) {
  return t_last_error.c_str();
}

const char* kiln_status_name(kiln_status status) {
  switch (status) {
    case KILN_OK:
      return "ok";
    case KILN_INVALID_ARGUMENT:
      return "invalid argument";
    case KILN_PARSE:
      return "parse error";
    case KILN_VERIFY:
      return "verification error";
    case KILN_TRACE:
      return "trace error";
    case KILN_COMPILE:
      return "compile error";
    case KILN_OUT_OF_MEMORY:
      return "out of memory";
    case KILN_DEVICE:
      return "device error";
    case KILN_IO:
      return "I/O error";
    case KILN_NOT_FOUND:
      return "not found";
    case KILN_UNSUPPORTED:
      return "unsupported";
    case KILN_KERNEL_FAULT:
      return "kernel fault";
  }
  return "unknown status";
}

kiln_status kiln_devices(kiln_device_info* out, size_t capacity, size_t* count) {
  if (!count) return invalid("kiln_devices", "count is NULL");
  if (capacity > 0 && !out) return invalid("kiln_devices", "out is NULL but capacity is not 0");
  return guarded("kiln_devices", [&] {
    const auto all = kiln::devices();
    *count = all.size();
    for (size_t i = 0; i < all.size() && i < capacity; ++i) {
      copy_text(out[i].name, sizeof out[i].name, all[i].name);
      copy_text(out[i].description, sizeof out[i].description, all[i].info.description);
      out[i].available = all[i].available ? 1 : 0;
      copy_text(out[i].reason, sizeof out[i].reason, all[i].reason);
    }
    return KILN_OK;
  });
}

kiln_status kiln_runtime_open(const char* device, int checked, kiln_runtime** out) {
  if (!out) return invalid("kiln_runtime_open", "out is NULL");
  *out = nullptr;
  if (!device) return invalid("kiln_runtime_open", "device is NULL; pass \"cpu\", \"cuda:0\", ...");
  return guarded("kiln_runtime_open", [&] {
    kiln::RuntimeOptions o;
    o.checked = checked != 0;
    auto rt = kiln::Runtime::open(device, std::move(o));
    if (!rt) return fail(rt.error());
    *out = new kiln_runtime{std::move(*rt)};
    return KILN_OK;
  });
}

void kiln_runtime_release(kiln_runtime* rt) {
  delete rt;
}

kiln_status kiln_sync(kiln_runtime* rt) {
  if (!rt) return invalid("kiln_sync", "the runtime is NULL");
  return guarded("kiln_sync", [&] {
    auto st = rt->rt.sync();
    return st ? KILN_OK : fail(st.error());
  });
}

kiln_status kiln_tensor_empty(kiln_runtime* rt, kiln_dtype dtype, const int64_t* shape, int rank,
                              kiln_tensor** out) {
  if (!out) return invalid("kiln_tensor_empty", "out is NULL");
  *out = nullptr;
  if (!rt) return invalid("kiln_tensor_empty", "the runtime is NULL");
  if (!valid_dtype(dtype)) return invalid("kiln_tensor_empty", "dtype is not a kiln_dtype");
  if (rank < 0 || rank > kiln::kMaxTensorRank)
    return fail(KILN_INVALID_ARGUMENT,
                fmt::format("kiln_tensor_empty: rank {} is out of range (0 to {})", rank,
                            kiln::kMaxTensorRank));
  if (rank > 0 && !shape) return invalid("kiln_tensor_empty", "shape is NULL");
  return guarded("kiln_tensor_empty", [&] {
    return take_tensor(rt->rt.empty(static_cast<kiln::ir::ElemType>(dtype),
                                    std::span<const int64_t>(shape, static_cast<size_t>(rank))),
                       out);
  });
}

kiln_status kiln_tensor_wrap(kiln_runtime* rt, void* data, kiln_dtype dtype, const int64_t* shape,
                             const int64_t* strides, int rank, void (*release)(void*),
                             void* release_ctx, kiln_tensor** out) {
  if (!out) return invalid("kiln_tensor_wrap", "out is NULL");
  *out = nullptr;
  if (!rt) return invalid("kiln_tensor_wrap", "the runtime is NULL");
  if (!valid_dtype(dtype)) return invalid("kiln_tensor_wrap", "dtype is not a kiln_dtype");
  if (rank < 0 || rank > kiln::kMaxTensorRank)
    return fail(KILN_INVALID_ARGUMENT,
                fmt::format("kiln_tensor_wrap: rank {} is out of range (0 to {})", rank,
                            kiln::kMaxTensorRank));
  if (rank > 0 && !shape) return invalid("kiln_tensor_wrap", "shape is NULL");
  return guarded("kiln_tensor_wrap", [&] {
    std::function<void()> rel;
    if (release) rel = [release, release_ctx] { release(release_ctx); };
    const auto n = static_cast<size_t>(rank);
    return take_tensor(
        rt->rt.wrap(data, static_cast<kiln::ir::ElemType>(dtype),
                    std::span<const int64_t>(shape, n),
                    strides ? std::span<const int64_t>(strides, n) : std::span<const int64_t>(),
                    std::move(rel)),
        out);
  });
}

kiln_status kiln_tensor_upload(kiln_tensor* t, const void* host, size_t bytes) {
  if (!t) return invalid("kiln_tensor_upload", "the tensor is NULL");
  if (!host && bytes) return invalid("kiln_tensor_upload", "host is NULL");
  return guarded("kiln_tensor_upload", [&] {
    auto st = t->t.upload(host, bytes);
    return st ? KILN_OK : fail(st.error());
  });
}

kiln_status kiln_tensor_download(const kiln_tensor* t, void* host, size_t bytes) {
  if (!t) return invalid("kiln_tensor_download", "the tensor is NULL");
  if (!host && bytes) return invalid("kiln_tensor_download", "host is NULL");
  return guarded("kiln_tensor_download", [&] {
    auto st = t->t.download(host, bytes);
    return st ? KILN_OK : fail(st.error());
  });
}

int kiln_tensor_rank(const kiln_tensor* t) {
  return t ? t->t.rank() : -1;
}
int64_t kiln_tensor_dim(const kiln_tensor* t, int d) {
  return t && d >= 0 && d < t->t.rank() ? t->t.shape(d) : -1;
}
int64_t kiln_tensor_stride(const kiln_tensor* t, int d) {
  return t && d >= 0 && d < t->t.rank() ? t->t.stride(d) : -1;
}
kiln_dtype kiln_tensor_dtype(const kiln_tensor* t) {
  return t ? static_cast<kiln_dtype>(t->t.dtype()) : KILN_F32;
}
void* kiln_tensor_data(const kiln_tensor* t) {
  return t ? t->t.data() : nullptr;
}
int kiln_tensor_read_only(const kiln_tensor* t) {
  return t && t->t.read_only() ? 1 : 0;
}

kiln_status kiln_tensor_read_only_view(const kiln_tensor* t, kiln_tensor** out) {
  if (!out) return invalid("kiln_tensor_read_only_view", "out is NULL");
  *out = nullptr;
  if (!t) return invalid("kiln_tensor_read_only_view", "the tensor is NULL");
  return guarded("kiln_tensor_read_only_view", [&] {
    *out = new kiln_tensor{t->t.as_read_only()};
    return KILN_OK;
  });
}

void kiln_tensor_release(kiln_tensor* t) {
  delete t;
}

kiln_status kiln_tensor_from_dlpack(kiln_runtime* rt, DLManagedTensorVersioned* managed,
                                    kiln_tensor** out) {
  if (out) *out = nullptr;
  if (!out || !rt) {
    if (managed && managed->deleter) managed->deleter(managed);  // owned in every case
    return invalid("kiln_tensor_from_dlpack", !out ? "out is NULL" : "the runtime is NULL");
  }
  return guarded("kiln_tensor_from_dlpack",
                 [&] { return take_tensor(kiln::from_dlpack(rt->rt, managed), out); });
}

kiln_status kiln_tensor_from_dlpack_unversioned(kiln_runtime* rt, DLManagedTensor* managed,
                                                kiln_tensor** out) {
  if (out) *out = nullptr;
  if (!out || !rt) {
    if (managed && managed->deleter) managed->deleter(managed);
    return invalid("kiln_tensor_from_dlpack_unversioned",
                   !out ? "out is NULL" : "the runtime is NULL");
  }
  return guarded("kiln_tensor_from_dlpack_unversioned",
                 [&] { return take_tensor(kiln::from_dlpack(rt->rt, managed), out); });
}

kiln_status kiln_tensor_to_dlpack(const kiln_tensor* t, DLManagedTensorVersioned** out) {
  if (!out) return invalid("kiln_tensor_to_dlpack", "out is NULL");
  *out = nullptr;
  if (!t) return invalid("kiln_tensor_to_dlpack", "the tensor is NULL");
  return guarded("kiln_tensor_to_dlpack", [&] {
    auto m = kiln::to_dlpack_versioned(t->t);
    if (!m) return fail(m.error());
    *out = *m;
    return KILN_OK;
  });
}

kiln_status kiln_tensor_to_dlpack_unversioned(const kiln_tensor* t, DLManagedTensor** out) {
  if (!out) return invalid("kiln_tensor_to_dlpack_unversioned", "out is NULL");
  *out = nullptr;
  if (!t) return invalid("kiln_tensor_to_dlpack_unversioned", "the tensor is NULL");
  return guarded("kiln_tensor_to_dlpack_unversioned", [&] {
    auto m = kiln::to_dlpack(t->t);
    if (!m) return fail(m.error());
    *out = *m;
    return KILN_OK;
  });
}

kiln_status kiln_load_plugin(const char* path, size_t* kernels) {
  if (!path) return invalid("kiln_load_plugin", "path is NULL");
  return guarded("kiln_load_plugin", [&] {
    auto p = kiln::load_plugin(path);
    if (!p) return fail(p.error());
    if (kernels) *kernels = p->kernels.size();
    return KILN_OK;
  });
}

kiln_status kiln_kernel_find(kiln_runtime* rt, const char* name, kiln_kernel** out) {
  if (!out) return invalid("kiln_kernel_find", "out is NULL");
  *out = nullptr;
  if (!rt) return invalid("kiln_kernel_find", "the runtime is NULL");
  if (!name) return invalid("kiln_kernel_find", "name is NULL");
  return guarded("kiln_kernel_find", [&] {
    auto k = rt->rt.kernel(name);
    if (!k) return fail(k.error());
    *out = new kiln_kernel{*k};
    return KILN_OK;
  });
}

void kiln_kernel_release(kiln_kernel* k) {
  delete k;
}

kiln_status kiln_launch(kiln_runtime* rt, const kiln_kernel* kernel, const uint32_t cubes[3],
                        const uint32_t cube_dim[3], const kiln_arg* args, size_t nargs,
                        kiln_stream* stream) {
  if (!rt) return invalid("kiln_launch", "the runtime is NULL");
  if (!kernel) return invalid("kiln_launch", "the kernel is NULL");
  if (!cubes || !cube_dim) return invalid("kiln_launch", "cubes and cube_dim take 3 numbers each");
  if (nargs && !args) return invalid("kiln_launch", "args is NULL");
  return guarded("kiln_launch", [&]() -> kiln_status {
    std::vector<kiln::LooseArg> loose(nargs);
    for (size_t i = 0; i < nargs; ++i) {
      const kiln_arg& a = args[i];
      kiln::LooseArg& l = loose[i];
      if (a.name) l.name = a.name;
      switch (a.kind) {
        case KILN_ARG_TENSOR:
          if (!a.value.tensor)
            return fail(KILN_INVALID_ARGUMENT,
                        fmt::format("kiln_launch: argument {} is a NULL tensor", i + 1));
          l.arg = kiln::launch_arg(a.value.tensor->t);
          break;
        case KILN_ARG_INT:
          l.arg = kiln::launch_arg(a.value.i);
          break;
        case KILN_ARG_UINT:
          l.arg = kiln::launch_arg(a.value.u);
          break;
        case KILN_ARG_FLOAT:
          l.arg = kiln::launch_arg(a.value.f);
          break;
        case KILN_ARG_BOOL:
          l.arg = kiln::launch_arg(a.value.i != 0);
          break;
        case KILN_ARG_TEXT:
          if (!a.value.text)
            return fail(KILN_INVALID_ARGUMENT,
                        fmt::format("kiln_launch: argument {} is NULL text", i + 1));
          l.text = a.value.text;
          break;
        default:
          return fail(KILN_INVALID_ARGUMENT,
                      fmt::format("kiln_launch: argument {} has an unknown kind {}", i + 1,
                                  static_cast<int>(a.kind)));
      }
    }
    auto list = kiln::order_args(kernel->k, loose);
    if (!list) return fail(list.error());
    kiln::LaunchOptions o;
    if (stream) o.stream = &stream->s;
    auto st = rt->rt.launch_args(kernel->k, kiln::Dim3(cubes[0], cubes[1], cubes[2]),
                                 kiln::Dim3(cube_dim[0], cube_dim[1], cube_dim[2]), o,
                                 std::span<const kiln::LaunchArg>(*list));
    return st ? KILN_OK : fail(st.error());
  });
}

kiln_status kiln_stream_new(kiln_runtime* rt, kiln_stream** out) {
  if (!out) return invalid("kiln_stream_new", "out is NULL");
  *out = nullptr;
  if (!rt) return invalid("kiln_stream_new", "the runtime is NULL");
  return guarded("kiln_stream_new", [&] {
    auto s = rt->rt.new_stream();
    if (!s) return fail(s.error());
    *out = new kiln_stream{*s};
    return KILN_OK;
  });
}

kiln_status kiln_stream_wrap(kiln_runtime* rt, void* cu_stream, kiln_stream** out) {
  if (!out) return invalid("kiln_stream_wrap", "out is NULL");
  *out = nullptr;
  if (!rt) return invalid("kiln_stream_wrap", "the runtime is NULL");
  return guarded("kiln_stream_wrap", [&] {
    auto s = rt->rt.wrap_stream(cu_stream);
    if (!s) return fail(s.error());
    *out = new kiln_stream{*s};
    return KILN_OK;
  });
}

kiln_status kiln_stream_sync(kiln_runtime* rt, kiln_stream* stream) {
  if (!rt) return invalid("kiln_stream_sync", "the runtime is NULL");
  if (!stream) return invalid("kiln_stream_sync", "the stream is NULL");
  return guarded("kiln_stream_sync", [&] {
    auto st = rt->rt.sync(stream->s);
    return st ? KILN_OK : fail(st.error());
  });
}

void kiln_stream_release(kiln_stream* stream) {
  delete stream;
}

kiln_status kiln_cache_get_stats(kiln_cache_stats* out) {
  if (!out) return invalid("kiln_cache_get_stats", "out is NULL");
  const kiln::CacheStats s = kiln::cache_stats();
  out->memory_hits = s.memory_hits;
  out->disk_hits = s.disk_hits;
  out->compiles = s.compiles;
  out->failures = s.failures;
  out->compile_ms = s.compile_ms;
  out->disk_load_ms = s.disk_load_ms;
  return KILN_OK;
}

kiln_status kiln_cache_configure(const char* dir, int enabled) {
  return guarded("kiln_cache_configure", [&] {
    kiln::DiskCache::Config c = kiln::DiskCache::config_from_env();
    if (dir) c.dir = dir;
    c.enabled = enabled != 0;
    kiln::DiskCache::set_global(std::move(c));
    return KILN_OK;
  });
}

}  // extern "C"
