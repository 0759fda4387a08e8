// What the extension module's sources share (bindings/python): kiln errors raised as
// kiln.Error, results taken or raised, tensors imported from anything with __dlpack__, and
// Python numbers and shapes read with errors that name the argument.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/runtime.h"

namespace kiln::python {

namespace py = pybind11;

// Raises kiln.Error (with its kind) for a kiln error; an InvalidArgument one for `message`.
[[noreturn]] void raise(const kiln::Error& e);
[[noreturn]] void raise_invalid(std::string message);
template <class T>
T take(kiln::Result<T> r) {
  if (!r) raise(r.error());
  return std::move(*r);
}
void check(const kiln::Status& s);

// An element type by its kiln name ("f32", "bf16", ...), or an error listing them.
kiln::ir::ElemType parse_dtype(const std::string& name);
// Anything with __dlpack__ (or a DLPack capsule, or a kiln.Tensor) as a kiln tensor of `rt`'s
// device, without a copy.
kiln::Tensor import_any(kiln::Runtime& rt, py::handle obj);
// The imports that need no Python call (a kiln.Tensor; a tensor whose type has DLPack's C
// exchange API: PyTorch; `borrow`: described in place, for a call that waits for its
// launches); nothing for other objects.
std::optional<kiln::Tensor> import_fast(kiln::Runtime& rt, py::handle obj, bool borrow = false);
// The name of a value's type, for messages.
std::string type_name(py::handle v);

// A Python integer (or anything with __index__: a NumPy integer) as an int64; `what()` names
// the argument in the error (made only then: launches pass every argument through here).
template <class What>
int64_t to_int64(py::handle v, const What& what) {
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!index) {
    PyErr_Clear();
    raise_invalid(fmt::format("{} must be an integer, not a {} ({})", what(), type_name(v),
                              py::repr(v).cast<std::string>()));
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0)
    raise_invalid(fmt::format("{} is {}, which does not fit in 64 bits", what(),
                              py::str(index).cast<std::string>()));
  return x;
}

// A shape: an int or a sequence of ints; `what` names it in errors.
std::vector<int64_t> dims(py::handle shape, const char* what);

// Adds the kernel library's entry points (kiln::lib) to `m` (lib_python.cpp).
void bind_lib(py::module_& m);

}  // namespace kiln::python
