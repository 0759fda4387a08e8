// The trace context: while a kernel is traced, DSL calls on this thread record IR into the
// context's builder. One context per trace, installed for the trace's duration only.
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "ir/builder.h"

namespace kiln::dsl {

// The target a kernel is traced for, as kernels may ask about it (dsl::target_name(),
// dsl::has_mma): its name and the matrix multiplies it runs. A trace for no particular target
// (kiln show --emit ir, tests) is for "any", which runs every multiply the IR accepts.
struct TraceTarget {
  std::string name = "any";
  std::vector<ir::MatrixConfig> matrix = ir::matrix_configs();
  ir::Features features;  // the target's (backend::Target::features)
};

class TraceContext {
 public:
  explicit TraceContext(std::string kernel_name);
  ~TraceContext();
  TraceContext(const TraceContext&) = delete;
  TraceContext& operator=(const TraceContext&) = delete;

  // The context of the trace running on this thread. DSL calls outside a trace are a misuse
  // of the API (not of a kernel) and stop the program with a message.
  static TraceContext& current();
  static TraceContext* active();

  ir::Builder& builder() { return builder_; }
  const TraceTarget& target() const;
  void set_target(std::shared_ptr<const TraceTarget> t) { target_ = std::move(t); }
  // Checked mode: t(i, j) checks each index against the view's shape (TraceRequest::checked).
  bool checked() const { return checked_; }
  void set_checked(bool on) { checked_ = on; }

  // The IR location of a DSL call site; remembered as the latest location. A site inside kiln's
  // own DSL headers (compiler/dsl/: a helper such as wgmma_desc emitting ops of its own) is
  // never named: its ops belong to the kernel's line that called the helper (the outermost
  // CallSite), or else the latest kernel line. So every message, #line and checked-mode report
  // names the kernel's own source.
  ir::SourceLoc loc(const std::source_location& where);
  // The latest location seen, for the few ops C++ gives no call site for (copy assignment).
  ir::SourceLoc last_loc() const { return last_; }

  // Records a trace error at a call site (the first error of a trace wins).
  void fail(const std::source_location& where, const std::string& message);
  void fail(ir::SourceLoc at, const std::string& message);
  bool ok() const { return builder_.ok(); }

 private:
  friend class CallSite;
  ir::Builder builder_;
  std::shared_ptr<const TraceTarget> target_;
  bool checked_ = false;
  TraceContext* previous_;
  ir::SourceLoc last_;  // the latest kernel line
  ir::SourceLoc site_;  // the kernel line the running DSL helper was called from (CallSite)
  // file_name() pointers seen so far and their file index (0: a kiln DSL header): source_location
  // hands out the same pointer for every call in one file, so most lookups are one comparison.
  std::vector<std::pair<const char*, uint32_t>> files_;
};

// Attributes the ops a DSL helper emits to the kernel line it was called from: a helper that
// takes a call site opens one first thing. Nested helpers keep the outermost kernel line.
class CallSite {
 public:
  explicit CallSite(const std::source_location& where);
  ~CallSite();
  CallSite(const CallSite&) = delete;
  CallSite& operator=(const CallSite&) = delete;

 private:
  TraceContext* ctx_;
  ir::SourceLoc saved_;
};

}  // namespace kiln::dsl
