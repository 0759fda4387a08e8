// kiln._kiln, the extension module of the `kiln` package: devices, runtimes, kernels by name,
// launches on kiln tensors or on anything with __dlpack__ (NumPy arrays, PyTorch tensors)
// without copies, kiln tensors that NumPy and PyTorch read through DLPack, plugins, and errors
// as kiln.Error (with the DSL line).
// docs/embedding.md#python and docs/python.md are the guides; tests/python/ the tests. The
// kernel library's entry points are in lib_python.cpp.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <bit>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "bindings/python/common.h"
#include "compiler/dsl/registry.h"
#include "kernels/kernels.h"
#include "runtime/api/dlpack.h"
#include "runtime/runtime.h"

namespace kiln::python {

namespace {

// kiln.Error, a RuntimeError with a `kind` ("invalid argument", "trace", "kernel fault", ...).
py::handle g_error;

// Error.kind: error_kind_name without its " error" ("trace", not "trace error"), for a program
// to compare.
std::string kind_name(kiln::ErrorKind k) {
  std::string_view n = kiln::error_kind_name(k);
  if (n.ends_with(" error")) n.remove_suffix(6);
  return std::string(n);
}

}  // namespace

[[noreturn]] void raise(const kiln::Error& e) {
  py::object inst = py::reinterpret_borrow<py::object>(g_error)(e.message);
  inst.attr("kind") = kind_name(e.kind);
  PyErr_SetObject(g_error.ptr(), inst.ptr());
  throw py::error_already_set();
}
[[noreturn]] void raise_invalid(std::string message) {
  raise(kiln::Error(kiln::ErrorKind::InvalidArgument, std::move(message)));
}
void check(const kiln::Status& s) {
  if (!s) raise(s.error());
}

kiln::ir::ElemType parse_dtype(const std::string& name) {
  auto t = kiln::ir::parse_elem_type(name);
  if (!t)
    raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                      fmt::format("'{}' is not an element type (bool, i8-i64, u8-u64, f16, bf16, "
                                  "f32, f64, f8e4m3, f8e5m2)",
                                  name)));
  return *t;
}

namespace {

// ---- DLPack capsules ----------------------------------------------------------------------

constexpr const char* kVersioned = "dltensor_versioned";
constexpr const char* kUnversioned = "dltensor";

// A capsule nobody consumed still owns its tensor.
void delete_versioned_capsule(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, kVersioned)) return;  // consumed: renamed "used_..."
  auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, kVersioned));
  if (m && m->deleter) m->deleter(m);
}
void delete_unversioned_capsule(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, kUnversioned)) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kUnversioned));
  if (m && m->deleter) m->deleter(m);
}

py::object export_capsule(const kiln::Tensor& t, bool versioned) {
  if (versioned) {
    DLManagedTensorVersioned* m = take(kiln::to_dlpack_versioned(t));
    return py::reinterpret_steal<py::object>(
        PyCapsule_New(m, kVersioned, delete_versioned_capsule));
  }
  DLManagedTensor* m = take(kiln::to_dlpack(t));
  return py::reinterpret_steal<py::object>(
      PyCapsule_New(m, kUnversioned, delete_unversioned_capsule));
}

// Consumes a capsule (renaming it, as the protocol says, so that nobody uses it twice).
kiln::Tensor import_capsule(kiln::Runtime& rt, py::handle cap) {
  PyObject* c = cap.ptr();
  if (PyCapsule_IsValid(c, kVersioned)) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, kVersioned));
    PyCapsule_SetName(c, "used_dltensor_versioned");
    return take(kiln::from_dlpack(rt, m));
  }
  if (PyCapsule_IsValid(c, kUnversioned)) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kUnversioned));
    PyCapsule_SetName(c, "used_dltensor");
    return take(kiln::from_dlpack(rt, m));
  }
  const char* name = PyCapsule_GetName(c);
  PyErr_Clear();
  raise(kiln::Error(
      kiln::ErrorKind::InvalidArgument,
      name && std::string(name).starts_with("used_")
          ? std::string("this DLPack capsule was consumed already; ask its "
                        "producer for a new one (x.__dlpack__())")
          : fmt::format("a capsule named '{}' is not a DLPack tensor", name ? name : "")));
}

// ---- DLPack's C exchange API -----------------------------------------------------------------
//
// DLPack 1.3 lets a framework publish C functions for the exchange on its tensor type:
// `type(x).__dlpack_c_exchange_api__` is a capsule named "dlpack_exchange_api" holding a table
// whose `managed_tensor_from_py_object_no_sync` makes the managed tensor in C, with no Python
// code, no capsule and no method lookup (PyTorch 2.10+: ~0.1 us, against ~2-3 us for
// torch.Tensor.__dlpack__). The table is written here from the specification; kiln reads
// major version 1 (walking `prev_api` past newer majors) and needs only that function.

struct ExchangeApiHeader {
  DLPackVersion version;
  ExchangeApiHeader* prev_api;
};
struct ExchangeApi {
  ExchangeApiHeader header;
  int (*managed_tensor_allocator)(DLTensor* prototype, DLManagedTensorVersioned** out,
                                  void* error_ctx,
                                  void (*set_error)(void* ctx, const char* kind, const char* msg));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, DLManagedTensorVersioned** out);
  int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned* tensor, void** out);
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(DLDeviceType type, int32_t id, void** out_stream);
};

// The exchange table of a type, or null when it has none kiln can use; looked up once per type.
const ExchangeApi* exchange_api(PyTypeObject* type) {
  static std::mutex mu;  // under the GIL today; free-threaded builds are not, so guarded
  static std::unordered_map<PyTypeObject*, const ExchangeApi*> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(type); it != known.end()) return it->second;
  }
  const ExchangeApi* api = nullptr;
  PyObject* cap =
      PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (!cap) {
    PyErr_Clear();
  } else {
    if (PyCapsule_IsValid(cap, "dlpack_exchange_api")) {
      auto* h = static_cast<ExchangeApiHeader*>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
      while (h && h->version.major > 1) h = h->prev_api;
      const auto* table = reinterpret_cast<const ExchangeApi*>(h);
      if (table && table->header.version.major == 1 && table->managed_tensor_from_py_object_no_sync)
        api = table;  // the table lives as long as the process (the specification says so)
    }
    Py_DECREF(cap);
  }
  std::lock_guard<std::mutex> lock(mu);
  // The type is kept alive, so that its address never names another type later.
  if (known.emplace(type, api).second) Py_INCREF(reinterpret_cast<PyObject*>(type));
  return api;
}

// torch.Tensor, once torch has been imported (by the caller: never imported here).
PyTypeObject* torch_tensor_type() {
  static PyTypeObject* type = nullptr;  // found once, under the GIL; kept for the process
  if (type) return type;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (!torch) return nullptr;
  PyObject* t = PyObject_GetAttrString(torch, "Tensor");
  if (!t) {
    PyErr_Clear();
    return nullptr;
  }
  if (!PyType_Check(t)) {
    Py_DECREF(t);
    return nullptr;
  }
  type = reinterpret_cast<PyTypeObject*>(t);  // the reference is kept
  return type;
}

// What PyTorch's exchange function does not refuse but kiln must: a tensor that requires a
// gradient (its __dlpack__ refuses it, and a kernel writing it would bypass autograd) and a
// negative view (x.conj().imag, torch._neg_view), whose elements are the negation of the
// memory's; PyTorch's DLPack export silently drops the negation.
bool torch_refused(PyObject* obj) {
  static PyObject* const requires_grad = PyUnicode_InternFromString("requires_grad");
  static PyObject* const is_neg = PyUnicode_InternFromString("is_neg");
  PyObject* rg = PyObject_GetAttr(obj, requires_grad);
  if (!rg) throw py::error_already_set();
  const bool grad = rg == Py_True;
  Py_DECREF(rg);
  if (grad) return true;  // __dlpack__ raises PyTorch's own BufferError for it
  PyObject* neg = PyObject_CallMethodNoArgs(obj, is_neg);
  if (!neg) throw py::error_already_set();
  const bool negative = neg == Py_True;
  Py_DECREF(neg);
  if (negative)
    raise_invalid(
        "this PyTorch tensor is a negative view (its elements are the negation of its memory's, "
        "as x.conj().imag makes); kiln reads memory as it is: pass x.resolve_neg()");
  return false;
}

// A tensor of a type with the exchange API: owned (managed_tensor_from_py_object_no_sync: the
// managed tensor keeps it alive), or with `borrow`, described in place for a call that waits
// for its launches (dltensor_from_py_object_no_sync: no allocation; the caller's reference
// keeps it alive through the call). Nothing for other types, and for the tensors PyTorch's
// __dlpack__ must refuse (requiring a gradient).
std::optional<kiln::Tensor> import_exchange(kiln::Runtime& rt, py::handle obj, bool borrow) {
  PyTypeObject* type = Py_TYPE(obj.ptr());
  const ExchangeApi* api = exchange_api(type);
  if (!api) return std::nullopt;
  if (PyTypeObject* torch = torch_tensor_type();
      torch && PyType_IsSubtype(type, torch) && torch_refused(obj.ptr()))
    return std::nullopt;
  auto refused = [&] {
    if (PyErr_Occurred()) throw py::error_already_set();
    raise_invalid(fmt::format("a {} refused the DLPack exchange", type_name(obj)));
  };
  if (borrow && api->dltensor_from_py_object_no_sync) {
    DLTensor dl{};
    if (api->dltensor_from_py_object_no_sync(obj.ptr(), &dl) != 0) refused();
    return take(kiln::from_dlpack_borrowed(rt, dl));
  }
  DLManagedTensorVersioned* m = nullptr;
  if (api->managed_tensor_from_py_object_no_sync(obj.ptr(), &m) != 0 || !m) refused();
  return take(kiln::from_dlpack(rt, m));  // the deleter runs on success and on failure
}

}  // namespace

// A new tensor of `like`'s framework, on its device, made by the framework's DLPack exchange
// allocator (PyTorch: torch.empty without Python code, ~0.2 us against ~0.7-1.3 us from
// Python); None when `like`'s type has no exchange API.
py::object new_like(py::handle like, const std::string& dtype, py::handle shape) {
  const ExchangeApi* api = exchange_api(Py_TYPE(like.ptr()));
  if (!api || !api->managed_tensor_allocator || !api->managed_tensor_to_py_object_no_sync ||
      !api->dltensor_from_py_object_no_sync)
    return py::none();
  DLTensor have{};
  if (api->dltensor_from_py_object_no_sync(like.ptr(), &have) != 0) throw py::error_already_set();
  std::vector<int64_t> extents = dims(shape, "shape");
  for (int64_t e : extents)
    if (e < 0) raise_invalid(fmt::format("a result's dimension is {}", e));
  DLTensor proto{};
  proto.device = have.device;
  proto.ndim = static_cast<int32_t>(extents.size());
  proto.dtype = kiln::dlpack_type(parse_dtype(dtype));
  proto.shape = extents.data();
  DLManagedTensorVersioned* m = nullptr;
  std::string why;
  auto set_error = [](void* ctx, const char* kind, const char* message) {
    *static_cast<std::string*>(ctx) = fmt::format("{}: {}", kind ? kind : "error", message);
  };
  if (api->managed_tensor_allocator(&proto, &m, &why, set_error) != 0 || !m) {
    if (PyErr_Occurred()) throw py::error_already_set();
    raise(kiln::Error(kiln::ErrorKind::OutOfMemory,
                      fmt::format("a {} refused to make a result of {} {}: {}", type_name(like),
                                  dtype, py::repr(shape).cast<std::string>(), why)));
  }
  void* out = nullptr;
  if (api->managed_tensor_to_py_object_no_sync(m, &out) != 0 || !out) {
    if (PyErr_Occurred()) throw py::error_already_set();
    raise_invalid(fmt::format("a {} refused its own DLPack tensor", type_name(like)));
  }
  return py::reinterpret_steal<py::object>(static_cast<PyObject*>(out));
}

// kiln.Tensor's Python type (exactly: subclasses take isinstance).
PyTypeObject* kiln_tensor_type() {
  static PyTypeObject* const type =
      reinterpret_cast<PyTypeObject*>(py::type::of<kiln::Tensor>().ptr());
  return type;
}

// The imports that need no Python call: a kiln.Tensor, a tensor whose type has DLPack's C
// exchange API (PyTorch), borrowed for a call that waits (import_exchange). Nothing for the
// rest, which take __dlpack__.
std::optional<kiln::Tensor> import_fast(kiln::Runtime& rt, py::handle obj, bool borrow) {
  if (Py_TYPE(obj.ptr()) == kiln_tensor_type()) return obj.cast<kiln::Tensor>();
  return import_exchange(rt, obj, borrow);
}

// Anything with __dlpack__ (or a DLPack capsule) as a kiln tensor, without a copy.
kiln::Tensor import_any(kiln::Runtime& rt, py::handle obj) {
  if (std::optional<kiln::Tensor> t = import_fast(rt, obj, false)) return std::move(*t);
  if (py::isinstance<kiln::Tensor>(obj)) return obj.cast<kiln::Tensor>();
  if (PyCapsule_CheckExact(obj.ptr())) return import_capsule(rt, obj);
  if (!py::hasattr(obj, "__dlpack__"))
    raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                      fmt::format("a {} is not a tensor: pass a kiln.Tensor or an object with "
                                  "__dlpack__ (a NumPy array, a PyTorch tensor)",
                                  type_name(obj))));
  // The versioned form where the producer has it (NumPy 2.1+, PyTorch 2.5+). Whether a type
  // takes max_version is remembered, so that older producers (NumPy 1) do not raise and catch a
  // TypeError on every launch; through the C API, since a C++ exception costs microseconds.
  static std::mutex mu;  // under the GIL today; free-threaded builds are not, so guarded
  static std::unordered_map<PyTypeObject*, bool> legacy;
  PyTypeObject* type = Py_TYPE(obj.ptr());
  bool old = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = legacy.find(type);
    old = it != legacy.end() && it->second;
  }
  py::object method = obj.attr("__dlpack__");
  py::object cap;
  if (!old) {
    // Kept for the life of the process (never released: the interpreter may be gone by then).
    static PyObject* const no_args = py::tuple().release().ptr();
    static PyObject* const versioned = [] {
      py::dict d;
      d["max_version"] = py::make_tuple(1, 0);
      return d.release().ptr();
    }();
    cap = py::reinterpret_steal<py::object>(PyObject_Call(method.ptr(), no_args, versioned));
    if (!cap) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
      PyErr_Clear();
      old = true;
    }
    std::lock_guard<std::mutex> lock(mu);
    legacy[type] = old;
  }
  if (old) cap = method();
  return import_capsule(rt, cap);
}

std::string type_name(py::handle v) {
  return py::str(py::type::handle_of(v).attr("__name__")).cast<std::string>();
}

namespace {

// A NumPy scalar (np.float32(2), np.int64(3), np.bool_(True)) as the Python value it holds;
// nothing for anything else (a type name test first: tensors pass here on every launch).
std::optional<py::object> numpy_scalar(py::handle v) {
  const std::string_view type = Py_TYPE(v.ptr())->tp_name;
  if (!type.starts_with("numpy.") || type == "numpy.ndarray") return std::nullopt;
  py::dict modules = py::module_::import("sys").attr("modules");
  if (modules.contains("numpy") && py::isinstance(v, modules["numpy"].attr("generic")) &&
      py::hasattr(v, "item"))
    return v.attr("item")();
  return std::nullopt;
}

}  // namespace

// A shape (an int or a sequence of ints); `what` names it in errors.
std::vector<int64_t> dims(py::handle shape, const char* what) {
  if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape))
    return {to_int64(shape, [&] { return std::string(what); })};
  std::vector<int64_t> out;
  const py::sequence seq = py::reinterpret_borrow<py::sequence>(shape);
  for (size_t i = 0; i < seq.size(); ++i)
    out.push_back(to_int64(seq[i], [&] { return fmt::format("{}[{}]", what, i); }));
  return out;
}
namespace {

kiln::Dim3 dim3(py::handle d, const char* what) {
  std::vector<int64_t> v = dims(d, what);
  if (v.empty() || v.size() > 3)
    raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                      fmt::format("{} is an int or a tuple of 1 to 3 ints, not {}", what,
                                  py::repr(d).cast<std::string>())));
  for (int64_t x : v)
    if (x < 1 || x > UINT32_MAX)
      raise(kiln::Error(
          kiln::ErrorKind::InvalidArgument,
          fmt::format("{}: a dimension of {} is out of range (1 to {})", what, x, UINT32_MAX)));
  v.resize(3, 1);
  return kiln::Dim3(static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1]),
                    static_cast<uint32_t>(v[2]));
}

// A Python value as a loose launch argument; tensors are imported into `keep`. Errors name
// the argument: "argument 3" (1-based `position`), or "argument 'a'" for a keyword.
kiln::LooseArg loose(kiln::Runtime& rt, py::handle v, size_t position, std::string_view keyword,
                     std::vector<kiln::Tensor>& keep, bool borrow = false) {
  auto what = [&] {
    return keyword.empty() ? fmt::format("argument {}", position)
                           : fmt::format("argument '{}'", keyword);
  };
  kiln::LooseArg a;
  if (std::optional<kiln::Tensor> t = import_fast(rt, v, borrow)) {
    keep.push_back(std::move(*t));  // `keep` has room for every argument: no reallocation
    a.arg = kiln::launch_arg(keep.back());
  } else if (py::isinstance<py::bool_>(v)) {
    a.arg = kiln::launch_arg(v.cast<bool>());
  } else if (py::isinstance<py::int_>(v)) {
    a.arg = kiln::launch_arg(to_int64(v, what));
  } else if (py::isinstance<py::float_>(v)) {
    a.arg = kiln::launch_arg(v.cast<double>());
  } else if (py::isinstance<py::str>(v)) {
    a.text = v.cast<std::string>();
  } else if (std::optional<py::object> held = numpy_scalar(v)) {
    return loose(rt, *held, position, keyword, keep);  // before __dlpack__, which 0-d has
  } else if (py::isinstance<kiln::Tensor>(v) || PyCapsule_CheckExact(v.ptr()) ||
             py::hasattr(v, "__dlpack__")) {
    keep.push_back(import_any(rt, v));  // `keep` has room for every argument: no reallocation
    a.arg = kiln::launch_arg(keep.back());
  } else {
    raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                      fmt::format("{} is a {}, which a kernel cannot take: pass a tensor (a "
                                  "kiln.Tensor or an object with __dlpack__: a NumPy array, a "
                                  "PyTorch tensor), a bool, an int, a float or a str",
                                  what(), type_name(v))));
  }
  return a;
}

// NumPy arrays are read through their Python attributes wherever pybind11 would read NumPy's C
// structs: NumPy 2 changed PyArray_Descr (an element's size moved), so pybind11 2.10's
// py::array::nbytes(), itemsize() and the strides of py::array(dtype, shape) are wrong under it
// (0 bytes, 0 strides). These are copies, not launches: the attribute lookups cost nothing that
// matters here.
struct HostArray {
  void* data;
  size_t bytes;
  std::vector<int64_t> shape;
};
HostArray host_array(py::handle a) {
  HostArray h;
  h.data = reinterpret_cast<void*>(
      a.attr("__array_interface__")["data"].cast<py::tuple>()[0].cast<uintptr_t>());
  h.bytes = a.attr("nbytes").cast<size_t>();
  h.shape = a.attr("shape").cast<std::vector<int64_t>>();
  return h;
}

std::string format_of(kiln::ir::ElemType t) {
  using kiln::ir::ElemType;
  switch (t) {
    case ElemType::Bool:
      return "?";
    case ElemType::I8:
      return "b";
    case ElemType::I16:
      return "h";
    case ElemType::I32:
      return "i";
    case ElemType::I64:
      return "q";
    case ElemType::U8:
      return "B";
    case ElemType::U16:
      return "H";
    case ElemType::U32:
      return "I";
    case ElemType::U64:
      return "Q";
    case ElemType::F16:
      return "e";
    case ElemType::F32:
      return "f";
    case ElemType::F64:
      return "d";
    case ElemType::BF16:
    case ElemType::F8E4M3:
    case ElemType::F8E5M2:
      return "";
  }
  return "";
}

// rt.launch / rt.launch_on.
bool has_param(const kiln::Kernel& k, std::string_view name) {
  for (const auto& p : k.def().instantiations.front().params)
    if (p.name == name) return true;
  return false;
}

// checked=True/False (None: the runtime's mode), lines={"x": 4, ...} (the launch checks the
// names and which widths are valid).
void launch_option(kiln::LaunchOptions& o, const std::string& name, py::handle v) {
  if (name == "checked") {
    if (!v.is_none() && !py::isinstance<py::bool_>(v))
      raise(kiln::Error(
          kiln::ErrorKind::InvalidArgument,
          fmt::format("launch option checked= takes True, False or None; got a {}", type_name(v))));
    if (!v.is_none()) o.checked = v.cast<bool>();
    return;
  }
  if (!py::isinstance<py::dict>(v))
    raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                      fmt::format("launch option lines= takes a dict of parameter names to line "
                                  "widths, like {{'x': 4}}; got a {}",
                                  type_name(v))));
  for (auto [key, width] : v.cast<py::dict>()) {
    if (!py::isinstance<py::str>(key) || !py::isinstance<py::int_>(width))
      raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                        "launch option lines= maps parameter names (str) to widths (int)"));
    const std::string param = key.cast<std::string>();  // the launch checks the name
    const int64_t w = to_int64(width, [&] { return fmt::format("lines['{}']", param); });
    if (w < 0 || w > 64)
      raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                        fmt::format("lines['{}'] is {}; a line width is 1, 2, 4, 8 or 16 (0: the "
                                    "widest that fits)",
                                    param, w)));
    o.lines.emplace_back(param, static_cast<int>(w));
  }
}

// kiln.Kernel's Python type (exactly).
PyTypeObject* kiln_kernel_type() {
  static PyTypeObject* const type =
      reinterpret_cast<PyTypeObject*>(py::type::of<kiln::Kernel>().ptr());
  return type;
}

// One launch: `args` are the positional arguments after cube_dim, `kwnames` (a tuple, or
// null) names the keyword arguments, whose values are `kwvalues`.
// The kernel a launch names: a kiln.Kernel (no copy), or a name looked up into `by_name`.
const kiln::Kernel& resolve_kernel(kiln::Runtime& rt, py::handle kernel,
                                   std::optional<kiln::Kernel>& by_name) {
  if (Py_TYPE(kernel.ptr()) == kiln_kernel_type() || py::isinstance<kiln::Kernel>(kernel))
    return kernel.cast<const kiln::Kernel&>();
  if (!PyUnicode_Check(kernel.ptr()))
    raise_invalid(
        fmt::format("the kernel is a name (str) or a kiln.Kernel; got a {}", type_name(kernel)));
  by_name = take(rt.kernel(kernel.cast<std::string>()));
  return *by_name;
}

// A keyword argument of a launch (or a launcher): `checked` and `lines` are the launch's
// options unless the kernel has a parameter so named; the others are comptime values by name.
void keyword_arg(kiln::Runtime& rt, const kiln::Kernel& k, std::string name, py::handle v,
                 kiln::LaunchOptions& o, std::vector<kiln::LooseArg>& list,
                 std::vector<kiln::Tensor>& keep) {
  if ((name == "checked" || name == "lines") && !has_param(k, name)) {
    launch_option(o, name, v);
    return;
  }
  list.push_back(loose(rt, v, 0, name, keep));
  list.back().name = std::move(name);
}

// One launch: `args` are the positional arguments after cube_dim, `kwnames` (a tuple, or
// null) names the keyword arguments, whose values are `kwvalues`.
void launch(kiln::Runtime& rt, const kiln::Stream* stream, py::handle kernel, py::handle cubes,
            py::handle cube_dim, std::span<PyObject* const> args, PyObject* kwnames,
            PyObject* const* kwvalues) {
  std::optional<kiln::Kernel> by_name;
  const kiln::Kernel* k = &resolve_kernel(rt, kernel, by_name);
  const size_t nkw = kwnames ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames)) : 0;
  std::vector<kiln::Tensor> keep;
  keep.reserve(args.size() + nkw);
  std::vector<kiln::LooseArg> list;
  list.reserve(args.size() + nkw);
  size_t position = 0;
  for (PyObject* v : args) list.push_back(loose(rt, v, ++position, {}, keep));
  kiln::LaunchOptions o;
  o.stream = stream;
  for (size_t i = 0; i < nkw; ++i)
    keyword_arg(rt, *k, py::handle(PyTuple_GET_ITEM(kwnames, i)).cast<std::string>(), kwvalues[i],
                o, list, keep);
  std::vector<kiln::LaunchArg> ordered = take(kiln::order_args(*k, list));
  const kiln::Dim3 c = dim3(cubes, "cubes"), d = dim3(cube_dim, "cube_dim");
  kiln::Status st;
  {
    py::gil_scoped_release nogil;  // a first launch compiles; a launch may wait for room
    st = rt.launch_args(*k, c, d, o, ordered);
  }
  check(st);
}

// Runs a vectorcall method's body, turning the C++ exceptions it throws (kiln.Error and other
// Python errors already set, pybind11's cast errors, anything else) into a Python error.
template <class Body>
PyObject* python_call(Body&& body) {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// rt.launch and rt.launch_on as vectorcall methods (METH_FASTCALL | METH_KEYWORDS): pybind11's
// dispatcher would build a tuple and a dict of the arguments and look each type up by name on
// every launch, about a third of a cached launch's time from Python.
template <bool kOnStream>
PyObject* launch_method(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                        PyObject* kwnames) {
  return python_call([&]() -> PyObject* {
    const auto n = static_cast<size_t>(PyVectorcall_NARGS(nargsf));
    constexpr size_t kFixed = kOnStream ? 4 : 3;
    if (n < kFixed) {
      PyErr_SetString(PyExc_TypeError,
                      kOnStream ? "launch_on(stream, kernel, cubes, cube_dim, *args, **kwargs): "
                                  "the first four arguments are positional"
                                : "launch(kernel, cubes, cube_dim, *args, **kwargs): the first "
                                  "three arguments are positional");
      return nullptr;
    }
    auto& rt = py::handle(self).cast<kiln::Runtime&>();
    const kiln::Stream* stream = nullptr;
    if constexpr (kOnStream) {
      if (!py::isinstance<kiln::Stream>(args[0]))
        raise_invalid(
            fmt::format("launch_on: the stream is a kiln.Stream (rt.new_stream(), "
                        "rt.wrap_stream(handle)); got a {}",
                        type_name(args[0])));
      stream = &py::handle(args[0]).cast<const kiln::Stream&>();
    }
    launch(rt, stream, args[kFixed - 3], args[kFixed - 2], args[kFixed - 1],
           std::span<PyObject* const>(args + kFixed, n - kFixed), kwnames, args + n);
    Py_RETURN_NONE;
  });
}

// rt.sync(stream=None), a vectorcall method too: kiln.lib and kiln.torch wait after each call
// on the CPU.
PyObject* sync_method(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return python_call([&]() -> PyObject* {
    const auto n = static_cast<size_t>(PyVectorcall_NARGS(nargsf));
    const size_t nkw = kwnames ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames)) : 0;
    PyObject* stream_arg = n > 0 ? args[0] : nullptr;
    if (n > 1 || nkw > 1 || (n == 1 && nkw == 1) ||
        (nkw == 1 && py::handle(PyTuple_GET_ITEM(kwnames, 0)).cast<std::string>() != "stream")) {
      PyErr_SetString(PyExc_TypeError, "sync(stream=None) takes one optional argument, stream");
      return nullptr;
    }
    if (nkw == 1) stream_arg = args[n];
    auto& rt = py::handle(self).cast<kiln::Runtime&>();
    const kiln::Stream* stream = nullptr;
    if (stream_arg && stream_arg != Py_None) {
      if (!py::isinstance<kiln::Stream>(stream_arg))
        raise_invalid(
            fmt::format("sync: the stream is a kiln.Stream; got a {}", type_name(stream_arg)));
      stream = &py::handle(stream_arg).cast<const kiln::Stream&>();
    }
    kiln::Status st;
    {
      py::gil_scoped_release nogil;
      st = stream ? rt.sync(*stream) : rt.sync();
    }
    check(st);
    Py_RETURN_NONE;
  });
}

// ---- kiln.Launcher: a kernel with its comptime values and options bound ---------------------
//
// rt.launcher(kernel, wait=False, **comptime) resolves what every launch of a kernel with the
// same comptime values would repeat: the kernel by name, the keyword arguments, the options.
// With wait=True a call returns when its launch is done (and raises its faults), which lets it
// read PyTorch tensors in place, without a managed tensor each (import_fast with `borrow`): the
// call a framework's operator makes.
struct Launcher {
  kiln::Runtime rt;
  kiln::Kernel kernel;
  std::vector<kiln::LooseArg> named;  // the comptime values, by name
  kiln::LaunchOptions options;        // checked, lines; the default stream
  bool wait = false;
};

Launcher make_launcher(kiln::Runtime& rt, py::handle kernel, bool wait, const py::kwargs& kw) {
  std::optional<kiln::Kernel> by_name;
  Launcher l{rt, resolve_kernel(rt, kernel, by_name), {}, {}, wait};
  std::vector<kiln::Tensor> none;
  for (auto [key, v] : kw) {
    const std::string name = key.cast<std::string>();
    keyword_arg(rt, l.kernel, name, v, l.options, l.named, none);
    if (!none.empty())
      raise_invalid(
          fmt::format("launcher: '{}' is a tensor; a launcher binds comptime values "
                      "by name, and takes tensors when it is called",
                      name));
  }
  // A name the kernel does not have is an error now, not at the first call.
  for (const kiln::LooseArg& a : l.named) {
    bool found = false;
    for (const auto& p : l.kernel.def().instantiations.front().params)
      found |= p.name == a.name && p.kind == kiln::dsl::ParamKind::Comptime;
    if (!found)
      raise_invalid(
          fmt::format("kernel '{}' has no comptime parameter '{}'", l.kernel.name(), a.name));
  }
  return l;
}

// launcher(cubes, cube_dim, *args).
PyObject* launcher_call(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                        PyObject* kwnames) {
  return python_call([&]() -> PyObject* {
    const auto n = static_cast<size_t>(PyVectorcall_NARGS(nargsf));
    if (n < 2 || kwnames) {
      PyErr_SetString(PyExc_TypeError,
                      "a launcher takes (cubes, cube_dim, *args): positional arguments only (its "
                      "comptime values were bound when it was made)");
      return nullptr;
    }
    auto& l = py::handle(self).cast<Launcher&>();
    std::vector<kiln::Tensor> keep;
    keep.reserve(n);
    std::vector<kiln::LooseArg> list;
    list.reserve(n - 2 + l.named.size());
    for (size_t i = 2; i < n; ++i) list.push_back(loose(l.rt, args[i], i - 1, {}, keep, l.wait));
    list.insert(list.end(), l.named.begin(), l.named.end());
    std::vector<kiln::LaunchArg> ordered = take(kiln::order_args(l.kernel, list));
    const kiln::Dim3 c = dim3(args[0], "cubes"), d = dim3(args[1], "cube_dim");
    kiln::Status st;
    {
      py::gil_scoped_release nogil;
      st = l.rt.launch_args(l.kernel, c, d, l.options, ordered);
      if (st && l.wait) st = l.rt.sync();
    }
    check(st);
    Py_RETURN_NONE;
  });
}

// Adds a vectorcall method to a pybind11 class (kept for the process, as the class is).
using FastMethod = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*);
template <class Class>
void add_fast_method(Class& cls, const char* name, FastMethod fn, const char* doc) {
  auto* def = new PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn)),
                              METH_FASTCALL | METH_KEYWORDS, doc};
  py::object descr = py::reinterpret_steal<py::object>(
      PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def));
  if (!descr) throw py::error_already_set();
  cls.attr(name) = descr;
}

}  // namespace

}  // namespace kiln::python

using namespace kiln::python;

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln: JIT-compiled kernels from a C++ DSL, launched on NumPy and PyTorch tensors";
  (void)kiln::kernels::builtin_names();  // kiln's own kernels
  static py::exception<std::runtime_error> error(m, "Error", PyExc_RuntimeError);
  g_error = error;
  error.attr("__doc__") =
      "An error from kiln (a RuntimeError). str(e) is kiln's message: what went wrong, where (the "
      "kernel's source line, the argument's name) and how to fix it. e.kind says which kind: "
      "'invalid argument', 'parse', 'verification', 'trace', 'compile', 'out of memory', "
      "'device', 'i/o', 'not found', 'unsupported' or 'kernel fault'.";
  m.attr("__version__") = KILN_VERSION;

  m.def("_new_like", &new_like, py::arg("like"), py::arg("dtype"), py::arg("shape"),
        "A new tensor of like's framework on its device (kiln.lib's results), through DLPack's "
        "C exchange API; None when like's type has none.");
  m.def(
      "cache_stats",
      [] {
        const kiln::CacheStats c = kiln::cache_stats();
        py::dict d;
        d["memory_hits"] = c.memory_hits;
        d["disk_hits"] = c.disk_hits;
        d["compiles"] = c.compiles;
        d["failures"] = c.failures;
        d["compile_ms"] = c.compile_ms;
        d["disk_load_ms"] = c.disk_load_ms;
        return d;
      },
      "The specialization caches' counters for this process: memory_hits (launches that found "
      "their kernel compiled), disk_hits, compiles, failures, and the milliseconds spent "
      "compiling and loading from disk.");

  m.def(
      "devices",
      [] {
        py::list out;
        for (const kiln::DeviceEntry& e : kiln::devices()) {
          py::dict d;
          d["name"] = e.name;
          d["available"] = e.available;
          d["description"] = e.info.description;
          d["reason"] = e.reason;
          out.append(d);
        }
        return out;
      },
      "The devices kiln knows of: name, available, description, and why not when absent.");

  m.def(
      "load_plugin",
      [](const std::string& path) {
        kiln::Plugin p = take(kiln::load_plugin(path));
        py::dict d;
        d["kernels"] = p.kernels;
        d["notices"] = p.notices;
        return d;
      },
      py::arg("path"),
      "Loads a shared library of kernels; returns the names it registered and notices.");

  py::class_<kiln::Tensor>(m, "Tensor", "A kiln tensor: a view (shape, strides) of device memory.")
      .def_property_readonly(
          "shape",
          [](const kiln::Tensor& t) {
            auto s = t.shape();
            return py::tuple(py::cast(std::vector<int64_t>(s.begin(), s.end())));
          },
          "The tensor's dimensions, outermost first.")
      .def_property_readonly(
          "strides",
          [](const kiln::Tensor& t) {
            auto s = t.strides();
            return py::tuple(py::cast(std::vector<int64_t>(s.begin(), s.end())));
          },
          "The step of each dimension, in elements (NumPy's are in bytes).")
      .def_property_readonly(
          "dtype",
          [](const kiln::Tensor& t) { return std::string(kiln::ir::elem_name(t.dtype())); },
          "The element type's kiln name: 'f32', 'bf16', 'i64', ...")
      .def_property_readonly(
          "device", [](const kiln::Tensor& t) { return t.device()->info().name; },
          "The device its memory is on: 'cpu', 'cuda:0', 'cuda-emu'.")
      .def_property_readonly("read_only", &kiln::Tensor::read_only,
                             "Whether kernels may only read it (a read-only producer's memory).")
      .def_property_readonly(
          "_device_key",
          [](const kiln::Tensor& t) { return reinterpret_cast<uintptr_t>(&t.device()->info()); },
          "Which opened device holds it (Runtime._device_key of the runtime that made it).")
      .def("__repr__",
           [](const kiln::Tensor& t) {
             return fmt::format("kiln.Tensor({} on {})", t.describe(), t.device()->info().name);
           })
      .def(
          "__dlpack__",
          [](const kiln::Tensor& t, py::object stream, py::object max_version, py::object,
             py::object) {
            (void)stream;  // CPU memory needs no stream; GPU launches are synced by the caller
            const bool versioned =
                !max_version.is_none() && max_version.cast<py::tuple>()[0].cast<int>() >= 1;
            return export_capsule(t, versioned);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
          "The tensor as a DLPack capsule, without a copy (np.from_dlpack, torch.from_dlpack).")
      .def(
          "__dlpack_device__",
          [](const kiln::Tensor& t) -> py::tuple {
            const kiln::DeviceInfo& info = t.device()->info();
            if (info.dlpack_type == kDLCUDA)
              return py::make_tuple(static_cast<int>(kDLCUDA), static_cast<int>(info.dlpack_id));
            return py::make_tuple(static_cast<int>(kDLCPU), 0);
          },
          "(DLPack device type, device index): (1, 0) for host memory, (2, N) for cuda:N.")
      .def_property_readonly(
          "__array_interface__",
          [](const kiln::Tensor& t) {
            // NumPy's view of a CPU tensor, without a copy and writable unless the tensor is
            // read-only (np.asarray(t)); NumPy keeps the tensor alive as the array's base.
            // A TypeError, not an AttributeError: NumPy takes the latter to mean "not an array"
            // and makes a 0-d object array of the tensor, silently.
            if (!t.device()->host_accessible())
              throw py::type_error(fmt::format(
                  "np.asarray: a tensor of {} is not in host memory; t.numpy() copies it",
                  t.device()->info().name));
            const std::string f = format_of(t.dtype());
            if (f.empty())
              throw py::type_error(
                  fmt::format("np.asarray: {} has no NumPy type; torch.from_dlpack(t) reads it "
                              "without a copy",
                              kiln::ir::elem_name(t.dtype())));
            static const char* const typestr[] = {"|b1", "|i1", "<i2", "<i4", "<i8",
                                                  "|u1", "<u2", "<u4", "<u8", "<f2",
                                                  "",    "<f4", "<f8", "",    ""};
            py::dict d;
            std::vector<int64_t> shape, strides;
            for (int i = 0; i < t.rank(); ++i) {
              shape.push_back(t.shape(i));
              strides.push_back(t.stride(i) * static_cast<int64_t>(t.element_bytes()));
            }
            d["shape"] = py::tuple(py::cast(shape));
            d["strides"] = py::tuple(py::cast(strides));
            d["typestr"] = typestr[static_cast<int>(t.dtype())];
            d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(t.data()), t.read_only());
            d["version"] = 3;
            return d;
          },
          "NumPy's view of a CPU tensor, without a copy (np.asarray(t)); a TypeError for a "
          "tensor off the host or of a type NumPy lacks.")
      .def(
          "numpy",
          [](const kiln::Tensor& t) {
            const std::string f = format_of(t.dtype());
            if (f.empty())
              raise(kiln::Error(kiln::ErrorKind::Unsupported,
                                fmt::format("{} has no NumPy type; read it with torch.from_dlpack",
                                            kiln::ir::elem_name(t.dtype()))));
            auto s = t.shape();
            py::object out = py::module_::import("numpy").attr("empty")(
                py::tuple(py::cast(std::vector<int64_t>(s.begin(), s.end()))), f);
            const HostArray h = host_array(out);
            check(t.is_contiguous()
                      ? t.download(h.data, h.bytes)
                      : kiln::Status(kiln::Error(kiln::ErrorKind::Unsupported,
                                                 "numpy() copies contiguous tensors")));
            return out;
          },
          "A NumPy copy of the tensor (np.from_dlpack(t) reads a CPU tensor without a copy).");

  py::class_<kiln::Stream>(m, "Stream", "A queue of launches of one runtime.");

  py::class_<kiln::Kernel>(m, "Kernel", "A registered kernel.")
      .def_property_readonly(
          "name", [](const kiln::Kernel& k) { return k.name(); }, "The name it is registered as.")
      .def_property_readonly(
          "params",
          [](const kiln::Kernel& k) {
            std::vector<std::string> names;
            for (const auto& p : k.def().instantiations.front().params) names.push_back(p.name);
            return names;
          },
          "The parameters' names in launch order (parameters has the rest).")
      .def_property_readonly(
          "parameters",
          [](const kiln::Kernel& k) {
            py::list out;
            for (const auto& p : k.def().instantiations.front().params) {
              py::dict d;
              d["name"] = p.name;
              d["kind"] = kiln::dsl::param_kind_name(p.kind);
              if (p.runtime()) {
                d["dtype"] = kiln::ir::elem_name(p.dtype);
                d["const"] = p.const_qualified;
              } else {
                d["type"] = p.comptime_type;
                d["default"] = p.default_value ? py::object(py::str(p.default_value->format()))
                                               : py::object(py::none());
              }
              out.append(d);
            }
            return out;
          },
          "Each parameter as a dict: name and kind ('tensor', 'array', 'scalar', 'comptime'); "
          "dtype and const for the others (the first instantiation's), type and default for "
          "comptime parameters, which a launch passes by position or name like any other.")
      .def_property_readonly(
          "description", [](const kiln::Kernel& k) { return k.def().description; },
          "What the kernel does, as its registration describes it.")
      .def("__repr__", [](const kiln::Kernel& k) { return "kiln.Kernel('" + k.name() + "')"; });

  py::class_<kiln::Runtime> runtime(m, "Runtime",
                                    "A device opened for launches: 'cpu', 'cuda:0', 'cuda-emu'.");
  runtime
      .def(py::init([](const std::string& device, bool checked) {
             kiln::RuntimeOptions o;
             o.checked = checked;
             return take(kiln::Runtime::open(device, std::move(o)));
           }),
           py::arg("device") = "cpu", py::arg("checked") = false)
      .def_property_readonly(
          "device", [](const kiln::Runtime& rt) { return rt.device().name; },
          "The name of the device it launches on.")
      .def_property_readonly(
          "_device_key",
          [](const kiln::Runtime& rt) { return reinterpret_cast<uintptr_t>(&rt.device()); },
          "Which opened device it launches on (Tensor._device_key of its tensors).")
      .def(
          "kernel",
          [](const kiln::Runtime& rt, const std::string& name) { return take(rt.kernel(name)); },
          py::arg("name"),
          "The registered kernel of that name (a kiln.Error of kind 'not found' when there is "
          "none); launching a Kernel skips the lookup by name.")
      .def(
          "empty",
          [](kiln::Runtime& rt, const std::string& dtype, py::object shape) {
            const std::vector<int64_t> d = dims(shape, "shape");
            return take(rt.empty(parse_dtype(dtype), std::span<const int64_t>(d)));
          },
          py::arg("dtype"), py::arg("shape"), "A new tensor (uninitialized).")
      .def(
          "tensor", [](kiln::Runtime& rt, py::handle obj) { return import_any(rt, obj); },
          py::arg("obj"),
          "The memory of anything with __dlpack__ (or a DLPack capsule) as a kiln tensor, "
          "without a copy.")
      .def(
          "upload",
          [](kiln::Runtime& rt, py::array arr) {
            // A byte order other than the host's ('>f4' here) is converted, not copied as is.
            const std::string order =
                py::str(arr.attr("dtype").attr("byteorder")).cast<std::string>();
            const bool little = std::endian::native == std::endian::little;
            if ((order == ">" && little) || (order == "<" && !little))
              arr = py::array::ensure(
                  arr.attr("astype")(arr.attr("dtype").attr("newbyteorder")("=")));
            const std::string f = py::str(arr.attr("dtype").attr("char")).cast<std::string>();
            static const std::pair<const char*, const char*> types[] = {
                {"?", "bool"}, {"b", "i8"},  {"h", "i16"}, {"i", "i32"}, {"l", "i64"},
                {"q", "i64"},  {"B", "u8"},  {"H", "u16"}, {"I", "u32"}, {"L", "u64"},
                {"Q", "u64"},  {"e", "f16"}, {"f", "f32"}, {"d", "f64"}};
            const char* name = nullptr;
            for (const auto& [c, n] : types)
              if (f == c) name = n;
            if (!name)
              raise(kiln::Error(kiln::ErrorKind::InvalidArgument,
                                fmt::format("NumPy type '{}' has no kiln type", f)));
            py::object c = py::module_::import("numpy").attr("require")(arr, py::none(), "C");
            const HostArray h = host_array(c);
            kiln::Tensor t = take(rt.empty(parse_dtype(name), std::span<const int64_t>(h.shape)));
            check(t.upload(h.data, h.bytes));
            return t;
          },
          py::arg("array"), "A new tensor with a copy of a NumPy array (for any device).")
      .def(
          "new_stream", [](kiln::Runtime& rt) { return take(rt.new_stream()); },
          "A new stream of this runtime: its launches run in order, apart from other streams'.")
      .def(
          "wrap_stream",
          [](kiln::Runtime& rt, uintptr_t handle) {
            return take(rt.wrap_stream(reinterpret_cast<void*>(handle)));
          },
          py::arg("cu_stream"),
          "A kiln.Stream over a CUDA stream another framework owns, by its handle "
          "(torch.cuda.current_stream().cuda_stream); cuda:N runtimes only.")
      .def(
          "on_stream",
          [](const kiln::Runtime& rt, const kiln::Stream& stream) {
            return take(rt.on_stream(stream));
          },
          py::arg("stream"),
          "This runtime with `stream` (one of its own) as its default stream: launches and "
          "kiln.lib calls through the copy go on `stream`, and its sync() waits for it; it "
          "shares the device, its memory and caches (kiln.lib on PyTorch's current stream: "
          "rt.on_stream(rt.wrap_stream(torch.cuda.current_stream().cuda_stream))).");
  add_fast_method(
      runtime, "launch", launch_method<false>,
      "launch($self, kernel, cubes, cube_dim, /, *args, **kwargs)\n--\n\n"
      "Launches a kernel (a kiln.Kernel or a name) over `cubes` cubes of `cube_dim` units (an\n"
      "int or a tuple of 1 to 3 ints each). Positional arguments follow the kernel's\n"
      "parameters: tensors (kiln.Tensor or anything with __dlpack__, used without a copy),\n"
      "numbers; keyword arguments are comptime values by name (numbers, or text such as\n"
      "'Fast'), and two options (unless the kernel has a parameter so named): checked=True or\n"
      "False for this launch, and lines={'name': width} to choose line widths. Returns when\n"
      "the launch is queued; sync() waits for it.");
  add_fast_method(
      runtime, "launch_on", launch_method<true>,
      "launch_on($self, stream, kernel, cubes, cube_dim, /, *args, **kwargs)\n--\n\n"
      "launch() on a stream of this runtime (new_stream, wrap_stream): the launch waits for\n"
      "the stream's earlier work, and sync(stream) waits for it. The other arguments\n"
      "are launch()'s.");
  runtime.def(
      "launcher",
      [](kiln::Runtime& rt, py::handle kernel, bool wait, py::kwargs kw) {
        return make_launcher(rt, kernel, wait, kw);
      },
      py::arg("kernel"), py::kw_only(), py::arg("wait") = false,
      "A kiln.Launcher: `kernel` (a kiln.Kernel or a name) with its comptime values (keywords)\n"
      "and options (checked=, lines=) bound, called as launcher(cubes, cube_dim, *args) with\n"
      "the kernel's other arguments. The kernel, the names and the options are resolved once,\n"
      "not at every launch. wait=True makes each call return when its launch is done (raising\n"
      "its faults), and read PyTorch tensors in place; the call a framework operator makes.");
  py::class_<Launcher> launcher(
      m, "Launcher",
      "A kernel with its comptime values and launch options bound (Runtime.launcher).");
  launcher
      .def_property_readonly(
          "kernel", [](const Launcher& l) { return l.kernel; }, "The kernel it launches.")
      .def_property_readonly(
          "wait", [](const Launcher& l) { return l.wait; },
          "Whether a call returns only when its launch is done.")
      .def("__repr__", [](const Launcher& l) {
        std::string values;
        for (const kiln::LooseArg& a : l.named) values += fmt::format(", {}=...", a.name);
        return fmt::format("kiln.Launcher('{}'{}{})", l.kernel.name(), values,
                           l.wait ? ", wait=True" : "");
      });
  add_fast_method(launcher, "__call__", launcher_call,
                  "__call__($self, cubes, cube_dim, /, *args)\n--\n\n"
                  "Launches the kernel over `cubes` cubes of `cube_dim` units with `args`, its\n"
                  "parameters other than the bound comptime ones, in order.");
  add_fast_method(runtime, "sync", sync_method,
                  "sync($self, stream=None)\n--\n\n"
                  "Waits for the launches (of the default stream, or of `stream`); raises\n"
                  "kiln.Error for the first fault they reported.");

  bind_lib(m);
}
