// Trace context: a thread-local stack of active traces (a kernel may be traced while another
// trace on the same thread is suspended, e.g. a trace started from inside a helper test).
#include "compiler/dsl/context.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::dsl {

namespace {
thread_local TraceContext* t_active = nullptr;
}

TraceContext::TraceContext(std::string kernel_name)
    : builder_(std::move(kernel_name)), previous_(t_active) {
  t_active = this;
}

const TraceTarget& TraceContext::target() const {
  static const TraceTarget any;
  return target_ ? *target_ : any;
}

TraceContext::~TraceContext() {
  t_active = previous_;
}

TraceContext* TraceContext::active() {
  return t_active;
}

TraceContext& TraceContext::current() {
  if (!t_active) {
    std::fprintf(stderr,
                 "kiln: a DSL function was called outside a kernel trace. DSL values and "
                 "functions only work inside a kernel that kiln traces (KILN_KERNEL + "
                 "kiln::dsl::trace, kiln show, or a launch).\n");
    std::abort();
  }
  return *t_active;
}

ir::SourceLoc TraceContext::loc(const std::source_location& where) {
  const char* file = where.file_name();
  uint32_t index = 0;
  for (const auto& [ptr, idx] : files_)
    if (ptr == file) {
      index = idx;
      break;
    }
  if (index == 0) {
    index = builder_.loc(file, 0).file;
    files_.emplace_back(file, index);
  }
  last_ = ir::SourceLoc{index, static_cast<uint32_t>(where.line())};
  return last_;
}

void TraceContext::fail(const std::source_location& where, const std::string& message) {
  fail(loc(where), message);
}

void TraceContext::fail(ir::SourceLoc at, const std::string& message) {
  builder_.fail(at, message, ErrorKind::Trace);
}

}  // namespace kiln::dsl
