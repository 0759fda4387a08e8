// Builder: constructs a kernel op by op and checks each op as it is built, so that a mistake is
// reported at the op (and DSL source line) that made it.
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/ir.h"

namespace kiln::ir {

// Errors are sticky: the first one is kept and later calls become no-ops that return
// kNoValue, so a caller (the DSL) can keep going and report the first mistake at finish().
class Builder {
 public:
  explicit Builder(std::string kernel_name);

  // Interns a DSL source file; use the result in SourceLoc::file.
  SourceLoc loc(const std::string& file, uint32_t line);

  ValueId param(const std::string& name, const Type& t);
  void set_cube_dim(uint32_t x, uint32_t y, uint32_t z);
  void set_cluster_dim(uint32_t x, uint32_t y, uint32_t z);

  // Any op without regions. `type` is required for ops whose result type is explicit (const,
  // cast, bitcast, broadcast, alloc) and ignored otherwise.
  ValueId op(OpKind kind, std::span<const ValueId> operands, SourceLoc at,
             const Type& type = Type::void_type(), Attr attr = {});
  ValueId op(OpKind kind, std::initializer_list<ValueId> operands, SourceLoc at,
             const Type& type = Type::void_type(), Attr attr = {}) {
    return op(kind, std::span<const ValueId>(operands.begin(), operands.size()), at, type,
              std::move(attr));
  }

  ValueId const_int(const Type& t, int64_t v, SourceLoc at);
  ValueId const_uint(const Type& t, uint64_t v, SourceLoc at);
  ValueId const_float(const Type& t, double v, SourceLoc at);  // rounded to t's precision
  ValueId const_bool(bool v, SourceLoc at, int lanes = 1);

  // Structured control flow: begin/end pairs must nest.
  void begin_if(ValueId cond, SourceLoc at);
  void begin_else();  // between begin_if and end_if, at most once
  void end_if();
  // Reopens the if just closed to add its else branch. `marker` is op_count() taken right
  // after that if's end_if(). Ops added since then move into the else branch when
  // `take_trailing` is set and they have no side effects (the condition of an else-if,
  // evaluated before the call); otherwise any op added since, or an existing else, means
  // nothing is reopened and the result is false.
  bool reopen_else(uint64_t marker, bool take_trailing = false);
  // How many ops were added so far (region ops count when closed).
  uint64_t op_count() const { return ops_added_; }
  ValueId begin_for(ValueId start, ValueId end, ValueId step, uint64_t unroll, SourceLoc at);
  void end_for();
  // A pipeline (docs/ir.md): begin_pipeline opens its produce region and returns that region's
  // round and stage; begin_consume closes it and opens the consume region (its own round and
  // stage); end_pipeline closes both. {kNoValue, kNoValue} after an error.
  std::pair<ValueId, ValueId> begin_pipeline(ValueId rounds, ValueId full, ValueId empty,
                                             uint32_t stages, uint32_t lag, bool commit,
                                             SourceLoc at, PipelineRegisters regs = {});
  std::pair<ValueId, ValueId> begin_consume();
  void end_pipeline();
  void begin_loop(SourceLoc at);
  void end_loop();

  // How many loops enclose the current position.
  int loop_depth() const;
  // Whether the current block already ended with break/continue/return.
  bool block_terminated() const;
  // Depth of region nesting at the current position (0 = kernel body).
  int depth() const { return static_cast<int>(frames_.size()) - 1; }

  const Type& type_of(ValueId v) const;
  bool valid(ValueId v) const { return v < k_.value_types.size(); }
  const Kernel& kernel() const { return k_; }

  // Records a caller's error at `at` (the first error wins).
  void fail(SourceLoc at, const std::string& message, ErrorKind kind = ErrorKind::Trace);
  bool ok() const { return !error_.has_value(); }
  const std::optional<Error>& error() const { return error_; }

  // Closes the kernel and runs the verifier. Unclosed regions are an error.
  Result<Kernel> finish() &&;

 private:
  struct Frame {
    Op op;           // the region-owning op being built (unused for the kernel body)
    int region = 0;  // which of op.regions is being filled
    bool terminated = false;
    OpKind terminator = OpKind::Return;  // the jump that ended the block, when terminated
    std::vector<ValueId> defined;        // values defined in the current region, hidden at its end
  };
  Region& current();
  Frame& top() { return frames_.back(); }
  bool check_operands(std::span<const ValueId> operands, SourceLoc at, std::string_view what);
  void define(ValueId v);
  bool add_op(Op op);
  void push(Op op);
  void end_region_of(OpKind kind, const char* what);
  void close_region();
  std::string dead_code_message() const;

  Kernel k_;
  std::vector<Frame> frames_;
  std::vector<uint8_t> visible_;
  std::optional<Error> error_;
  uint64_t ops_added_ = 0;
};

}  // namespace kiln::ir
