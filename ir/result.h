// Errors as values: kiln::Error and kiln::Result<T>, used by every layer.
// User mistakes travel as Result; only broken internal invariants abort (KILN_CHECK).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

// What went wrong, coarsely; the message says the rest (what, where, how to fix).
enum class ErrorKind {
  InvalidArgument,  // a caller passed something unusable
  Parse,            // .kir text that does not parse
  Verify,           // IR that breaks a rule of the IR
  Trace,            // a DSL kernel used wrongly while tracing
  Compile,          // a backend compiler (LLVM, NVRTC) failed
  OutOfMemory,      // an allocation past a pool's cap or the device's memory
  Device,           // a device or driver failure
  Io,               // a file could not be read or written
  NotFound,         // a kernel, device or file that does not exist
  Unsupported,      // valid, but not supported by this target or build
  KernelFault,      // a launched kernel reported a fault (checked mode, assert)
};

const char* error_kind_name(ErrorKind kind);

struct Error {
  ErrorKind kind = ErrorKind::InvalidArgument;
  // Complete and self-contained: where (file:line[:col]), what, and how to fix it.
  std::string message;

  Error() = default;
  Error(ErrorKind k, std::string msg) : kind(k), message(std::move(msg)) {}
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return const_cast<Result*>(this)->checked(); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Result*>(this)->checked(); }

  const Error& error() const {
    if (ok()) fail("Result::error() called on a value");
    return std::get<1>(v_);
  }
  Error take_error() && { return std::move(const_cast<Error&>(error())); }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "kiln internal error: %s\n", what);
    std::abort();
  }
  T& checked() {
    if (!ok()) {
      std::fprintf(stderr, "kiln internal error: Result::value() on an error: %s\n",
                   std::get<1>(v_).message.c_str());
      std::abort();
    }
    return std::get<0>(v_);
  }
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), ok_(false) {}  // NOLINT

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }
  Error take_error() && { return std::move(err_); }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

// Aborts with file:line when an internal invariant is broken. Never for user input.
#define KILN_CHECK(cond, msg)                                                                  \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "kiln internal error at %s:%d: %s (%s)\n", __FILE__, __LINE__, msg, \
                   #cond);                                                                     \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

// Propagates an error from an expression returning Result<...>.
#define KILN_TRY(expr)                                                           \
  do {                                                                           \
    auto kiln_try_result_ = (expr);                                              \
    if (!kiln_try_result_.ok()) return std::move(kiln_try_result_).take_error(); \
  } while (0)

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
// KILN_ASSIGN(auto x, expr): binds the value or returns the error.
#define KILN_ASSIGN(decl, expr) KILN_ASSIGN_IMPL(KILN_CONCAT(kiln_assign_, __LINE__), decl, expr)
#define KILN_ASSIGN_IMPL(tmp, decl, expr)            \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).take_error(); \
  decl = std::move(tmp).value()

}  // namespace kiln
