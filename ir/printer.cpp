// Canonical printer for .kir text.
//
// Layout: `file #N "path"` lines, then `kernel @name(%p: type, ...) cube_dim(x, y, z) {`, one
// op per line indented two spaces per region level, `}` closing each region. An op reads
// `[%r = ]name operands[, immediates] [: type]`; a known DSL location follows as
// `loc(#FILE:LINE)` starting at column 57 (or two spaces after a longer op). Region ops put the
// location before their `{`.
#include "ir/printer.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "ir/float16.h"

namespace kiln::ir {

namespace {

constexpr size_t kLocColumn = 56;

class Printer {
 public:
  explicit Printer(const Kernel& k) : k_(k), names_(k.value_types.size()) {}

  std::vector<std::string> names() {
    for (const Param& p : k_.params)
      if (p.value < names_.size()) names_[p.value] = "%" + p.name;
    number(k_.body);
    return names_;
  }

  std::string run() {
    for (size_t i = 0; i < k_.files.size(); ++i)
      out_ += fmt::format("file #{} {}\n", i + 1, quote(k_.files[i]));
    names();
    out_ += fmt::format("kernel @{}(", k_.name);
    for (size_t i = 0; i < k_.params.size(); ++i) {
      const Param& p = k_.params[i];
      out_ += fmt::format("{}%{}: {}", i ? ", " : "", p.name,
                          p.value < k_.value_types.size() ? type_name(k_.type_of(p.value)) : "?");
    }
    out_ += fmt::format(") cube_dim({}, {}, {})", k_.cube_dim[0], k_.cube_dim[1], k_.cube_dim[2]);
    if (k_.cluster_dim != std::array<uint32_t, 3>{1, 1, 1})
      out_ += fmt::format(" cluster_dim({}, {}, {})", k_.cluster_dim[0], k_.cluster_dim[1],
                          k_.cluster_dim[2]);
    out_ += " {\n";
    region(k_.body, 1);
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  // Numbers every non-parameter value in printing order.
  void number(const Region& r) {
    for (const Op& op : r.ops) {
      if (op.result < names_.size()) names_[op.result] = fmt::format("%{}", next_++);
      for (const Region& sub : op.regions) {
        for (ValueId a : sub.args)
          if (a < names_.size()) names_[a] = fmt::format("%{}", next_++);
        number(sub);
      }
    }
  }

  std::string name(ValueId v) const {
    if (v < names_.size() && !names_[v].empty()) return names_[v];
    return fmt::format("%?{}", v);  // undefined: only in IR the verifier rejects
  }

  std::string loc(const SourceLoc& l) const {
    if (!l.known()) return {};
    return fmt::format("loc(#{}:{})", l.file, l.line);
  }

  void line_with_loc(std::string text, const SourceLoc& l, int depth) {
    std::string s(static_cast<size_t>(depth) * 2, ' ');
    s += text;
    if (l.known()) {
      s.append(s.size() + 2 <= kLocColumn ? kLocColumn - s.size() : 2, ' ');
      s += loc(l);
    }
    out_ += s;
    out_ += '\n';
  }

  void region(const Region& r, int depth) {
    for (const Op& op : r.ops) print_op(op, depth);
  }

  void open_region(const std::string& head, const Op& op, int depth) {
    std::string s(static_cast<size_t>(depth) * 2, ' ');
    s += head;
    if (op.loc.known()) {
      s += ' ';
      s += loc(op.loc);
    }
    out_ += s;
    out_ += " {\n";
  }

  void close_region(int depth) {
    out_.append(static_cast<size_t>(depth) * 2, ' ');
    out_ += "}\n";
  }

  void print_op(const Op& op, int depth) {
    const OpInfo& info = op_info(op.kind);
    auto opnd = [&](size_t i) { return i < op.operands.size() ? name(op.operands[i]) : "%?"; };
    switch (info.sig) {
      case Sig::If:
        open_region(fmt::format("if {}", opnd(0)), op, depth);
        if (!op.regions.empty()) region(op.regions[0], depth + 1);
        if (op.regions.size() > 1 && !op.regions[1].ops.empty()) {
          out_.append(static_cast<size_t>(depth) * 2, ' ');
          out_ += "} else {\n";
          region(op.regions[1], depth + 1);
        }
        close_region(depth);
        return;
      case Sig::For: {
        const std::string iv =
            !op.regions.empty() && !op.regions[0].args.empty() ? name(op.regions[0].args[0]) : "%?";
        std::string head = fmt::format("for {} = {} to {} step {}", iv, opnd(0), opnd(1), opnd(2));
        if (op.attr.i == kUnrollFull)
          head += " unroll full";
        else if (op.attr.i != 0)
          head += fmt::format(" unroll {}", op.attr.i);
        open_region(head, op, depth);
        if (!op.regions.empty()) region(op.regions[0], depth + 1);
        close_region(depth);
        return;
      }
      case Sig::Units: {
        const std::string u =
            !op.regions.empty() && !op.regions[0].args.empty() ? name(op.regions[0].args[0]) : "%?";
        open_region(fmt::format("units {} = {} to {}", u, opnd(0), opnd(1)), op, depth);
        if (!op.regions.empty()) region(op.regions[0], depth + 1);
        close_region(depth);
        return;
      }
      case Sig::Loop:
        open_region("loop", op, depth);
        if (!op.regions.empty()) region(op.regions[0], depth + 1);
        close_region(depth);
        return;
      case Sig::Pipeline: {
        auto args = [&](size_t i) {
          if (op.regions.size() <= i || op.regions[i].args.size() != 2) return std::string("()");
          return fmt::format("({}, {})", name(op.regions[i].args[0]), name(op.regions[i].args[1]));
        };
        std::string release = pipeline_commit(op.attr.i)
                                  ? std::string("commit")
                                  : fmt::format("lag {}", pipeline_lag(op.attr.i));
        if (const PipelineRegisters regs = pipeline_registers(op.attr.i); regs.set())
          release += fmt::format(", registers {} {}", regs.producer, regs.consumers);
        open_region(fmt::format("pipeline {}, {}, {}, stages {}, {} produce{}", opnd(0), opnd(1),
                                opnd(2), pipeline_stages(op.attr.i), release, args(0)),
                    op, depth);
        if (!op.regions.empty()) region(op.regions[0], depth + 1);
        out_.append(static_cast<size_t>(depth) * 2, ' ');
        out_ += fmt::format("}} consume{} {{\n", args(1));
        if (op.regions.size() > 1) region(op.regions[1], depth + 1);
        close_region(depth);
        return;
      }
      default:
        break;
    }

    std::string s;
    if (op.result != kNoValue) s = name(op.result) + " = ";
    s += info.name;
    std::vector<std::string> parts;
    // The operand majors of a multiply, when not both K-major.
    auto majors = [&](MmaMajors m) {
      if (!m.a_mn && !m.b_mn) return;
      parts.push_back(m.a_mn ? "mn" : "k");
      parts.push_back(m.b_mn ? "mn" : "k");
    };
    switch (info.sig) {
      case Sig::Const: {
        const Type t = op.result < k_.value_types.size() ? k_.type_of(op.result) : Type{};
        parts.push_back(format_literal(t.elem, op.attr));
        break;
      }
      case Sig::Builtin:
        if (op.attr.i >= 1 && op.attr.i <= 3) s += std::string(" ") + "xyz"[op.attr.i - 1];
        break;
      case Sig::Print:
        parts.push_back(quote(op.attr.s));
        for (size_t i = 0; i < op.operands.size(); ++i) parts.push_back(opnd(i));
        break;
      case Sig::Assert:
        parts.push_back(opnd(0));
        parts.push_back(quote(op.attr.s));
        break;
      default:
        for (size_t i = 0; i < op.operands.size(); ++i) parts.push_back(opnd(i));
        if (info.sig == Sig::Extract || info.sig == Sig::Insert || info.sig == Sig::ShapeStride ||
            info.sig == Sig::FragGet || info.sig == Sig::FragSet)
          parts.push_back(fmt::format("{}", op.attr.i));
        if (info.sig == Sig::FragLoad || info.sig == Sig::FragStore ||
            info.sig == Sig::FragLdmatrix)
          parts.push_back(op.attr.i == 1 ? "col" : op.attr.i == 0 ? "row" : "layout?");
        if (info.sig == Sig::WgmmaDesc || info.sig == Sig::WgmmaWait || info.sig == Sig::MbarInit ||
            info.sig == Sig::TmemAlloc || info.sig == Sig::TmemFree || info.sig == Sig::TmemLoad)
          parts.push_back(fmt::format("{}", op.attr.i));
        if (info.sig == Sig::Tcgen05Mma) {
          const uint64_t e = op.attr.i & 0xff;
          parts.push_back(e < kNumElemTypes ? std::string(elem_name(static_cast<ElemType>(e)))
                                            : fmt::format("type?{}", e));
          parts.push_back(fmt::format("{}", (op.attr.i >> 8) & 0xffff));
          majors(mma_majors(op.attr.i, kTcgen05MajorShift));
        }
        if (info.sig == Sig::TmaLoad || info.sig == Sig::TmaStore || info.sig == Sig::TmaPrefetch) {
          const TmaBox b = tma_box(op.attr.i);
          if (b.im2col) {
            parts.push_back(fmt::format("im2col {}", b.pixels));
            parts.push_back(fmt::format("{}", b.channels));
            for (const auto& [word, c] : {std::pair{"lower", b.lower}, std::pair{"upper", b.upper}})
              for (uint32_t s = 0; s < tma_spatial(b) && s < 3; ++s)
                parts.push_back(s ? fmt::format("{}", c[s]) : fmt::format("{} {}", word, c[s]));
          } else {
            std::string box = "box";
            for (uint32_t d = 0; d < b.rank; ++d)
              box += fmt::format("{}{}", d ? ", " : " ", b.box[d]);
            parts.push_back(box);
          }
          parts.push_back(fmt::format("swizzle {}", b.swizzle));
          if (b.fill_nan) parts.push_back("fill nan");
          if (tma_reduce(op.attr.i) != TmaReduce::None)
            parts.push_back(fmt::format("reduce {}", tma_reduce_name(tma_reduce(op.attr.i))));
          if (tma_async(op.attr.i)) parts.push_back("async");
        }
        if (info.sig == Sig::Wgmma) {
          const uint64_t e = op.attr.i & 0xff;
          parts.push_back(e < kNumElemTypes ? std::string(elem_name(static_cast<ElemType>(e)))
                                            : fmt::format("type?{}", e));
          majors(mma_majors(op.attr.i, kWgmmaMajorShift));
        }
        break;
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      s += i ? ", " : " ";
      s += parts[i];
    }
    if (op.result != kNoValue)
      s += " : " + (op.result < k_.value_types.size() ? type_name(k_.type_of(op.result)) : "?");
    line_with_loc(std::move(s), op.loc, depth);
  }

  const Kernel& k_;
  std::vector<std::string> names_;
  uint32_t next_ = 0;
  std::string out_;
};

}  // namespace

std::string format_literal(ElemType t, const Attr& attr) {
  if (t == ElemType::Bool) return attr.i ? "true" : "false";
  if (is_int(t)) {
    if (is_signed(t)) return fmt::format("{}", static_cast<int64_t>(attr.i));
    return fmt::format("{}", attr.i);
  }
  const double v = attr.f;
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  std::string s;
  for (int p = 1; p <= 17; ++p) {
    s = fmt::format("{:.{}g}", v, p);
    if (round_float_literal(t, std::strtod(s.c_str(), nullptr)) == v) break;
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c >= 0x7f)
          out += fmt::format("\\x{:02x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string print(const Kernel& k) {
  return Printer(k).run();
}

std::vector<std::string> value_names(const Kernel& k) {
  return Printer(k).names();
}

}  // namespace kiln::ir
