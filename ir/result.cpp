// Names of error kinds.
#include "ir/result.h"

namespace kiln {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument:
      return "invalid argument";
    case ErrorKind::Parse:
      return "parse error";
    case ErrorKind::Verify:
      return "verification error";
    case ErrorKind::Trace:
      return "trace error";
    case ErrorKind::Compile:
      return "compile error";
    case ErrorKind::OutOfMemory:
      return "out of memory";
    case ErrorKind::Device:
      return "device error";
    case ErrorKind::Io:
      return "i/o error";
    case ErrorKind::NotFound:
      return "not found";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::KernelFault:
      return "kernel fault";
  }
  return "error";
}

}  // namespace kiln
