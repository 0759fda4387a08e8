// Trace context: a thread-local stack of active traces (a kernel may be traced while another
// trace on the same thread is suspended, e.g. a trace started from inside a helper test).
#include "compiler/dsl/context.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

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

namespace {

// Whether a path is one of kiln's DSL headers (compiler/dsl/*.h, in the tree or installed).
bool dsl_header(std::string_view file) {
  const size_t slash = file.rfind('/');
  if (slash == std::string_view::npos) return false;
  return file.substr(0, slash).ends_with("compiler/dsl") && file.ends_with(".h");
}

}  // namespace

ir::SourceLoc TraceContext::loc(const std::source_location& where) {
  const char* file = where.file_name();
  auto it = files_.begin();
  while (it != files_.end() && it->first != file) ++it;
  if (it == files_.end()) {
    const uint32_t index = dsl_header(file) ? 0 : builder_.loc(file, 0).file;
    files_.emplace_back(file, index);
    it = files_.end() - 1;
  }
  if (it->second == 0) return site_.known() ? site_ : last_;
  last_ = ir::SourceLoc{it->second, static_cast<uint32_t>(where.line())};
  return last_;
}

CallSite::CallSite(const std::source_location& where) : ctx_(TraceContext::active()) {
  if (!ctx_) return;
  saved_ = ctx_->site_;
  if (!saved_.known()) ctx_->site_ = ctx_->loc(where);
}

CallSite::~CallSite() {
  if (ctx_) ctx_->site_ = saved_;
}

void TraceContext::fail(const std::source_location& where, const std::string& message) {
  fail(loc(where), message);
}

void TraceContext::fail(ir::SourceLoc at, const std::string& message) {
  builder_.fail(at, message, ErrorKind::Trace);
}

}  // namespace kiln::dsl
