// Recursive-descent parser for .kir text (grammar in docs/ir.md). It builds the kernel with the
// declared result types and leaves type rules to the verifier, so that the verifier's messages
// (with this text's line:column) cover hand-written IR too.
#include "ir/parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include <fmt/format.h>

#include "ir/printer.h"

namespace kiln::ir {

namespace {

constexpr int kMaxDepth = 200;  // region nesting; deeper input is rejected, never overflows

enum class Tok { Ident, Value, Global, FileRef, Number, String, Punct, Eof };

struct Token {
  Tok kind = Tok::Eof;
  std::string text;  // identifier/number text, string contents, punctuation char, name after %/@/#
  uint32_t line = 1, col = 1;
};

bool ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool ident_char(char c) {
  return ident_start(c) || (c >= '0' && c <= '9') || c == '.';
}
bool digit(char c) {
  return c >= '0' && c <= '9';
}

struct ParseError {
  Error error;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view name) : src_(text), name_(name) {}

  Result<Kernel> run() {
    try {
      advance();
      parse_kernel();
      return std::move(k_);
    } catch (ParseError& e) {
      return std::move(e.error);
    }
  }

 private:
  // ---- errors ----
  [[noreturn]] void fail_at(uint32_t line, uint32_t col, const std::string& msg) {
    throw ParseError{
        Error(ErrorKind::Parse, fmt::format("{}:{}:{}: error: {}", name_, line, col, msg))};
  }
  [[noreturn]] void fail(const std::string& msg) { fail_at(tok_.line, tok_.col, msg); }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::Eof:
        return "end of input";
      case Tok::String:
        return fmt::format("string \"{}\"", t.text.substr(0, 40));
      case Tok::Value:
        return fmt::format("'%{}'", t.text);
      case Tok::Global:
        return fmt::format("'@{}'", t.text);
      case Tok::FileRef:
        return fmt::format("'#{}'", t.text);
      default:
        return fmt::format("'{}'", t.text.substr(0, 40));
    }
  }
  [[noreturn]] void expected(const std::string& what) {
    fail(fmt::format("expected {}, found {}", what, describe(tok_)));
  }

  // ---- lexer ----
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  void bump() {
    if (peek() == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  void advance() {
    // Skip whitespace and // comments.
    for (;;) {
      const char c = peek();
      if (pos_ >= src_.size()) break;
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        bump();
      } else if (c == '/' && peek(1) == '/') {
        while (pos_ < src_.size() && peek() != '\n') bump();
      } else {
        break;
      }
    }
    tok_ = Token{};
    tok_.line = line_;
    tok_.col = col_;
    if (pos_ >= src_.size()) {
      tok_.kind = Tok::Eof;
      return;
    }
    const char c = peek();
    auto take_ident = [&] {
      std::string s;
      while (pos_ < src_.size() && ident_char(peek())) {
        s += peek();
        bump();
      }
      return s;
    };
    if (ident_start(c)) {
      tok_.kind = Tok::Ident;
      tok_.text = take_ident();
    } else if (c == '%' || c == '@' || c == '#') {
      bump();
      tok_.kind = c == '%' ? Tok::Value : c == '@' ? Tok::Global : Tok::FileRef;
      if (pos_ >= src_.size() || !(ident_char(peek())))
        fail_at(tok_.line, tok_.col, fmt::format("expected a name or number after '{}'", c));
      tok_.text = take_ident();
    } else if (digit(c) || (c == '-' && (digit(peek(1)) || peek(1) == 'i'))) {
      tok_.kind = Tok::Number;
      std::string s;
      if (c == '-') {
        s += c;
        bump();
        if (peek() == 'i') {  // -inf
          std::string id = take_ident();
          if (id != "inf") fail_at(tok_.line, tok_.col, fmt::format("unknown literal '-{}'", id));
          tok_.kind = Tok::Ident;
          tok_.text = "-inf";
          return;
        }
      }
      while (pos_ < src_.size()) {
        const char d = peek();
        const bool exp_sign = (d == '+' || d == '-') && !s.empty() &&
                              (s.back() == 'e' || s.back() == 'E') &&
                              !(s.size() > 1 && (s[1] == 'x' || s[1] == 'X'));
        if (digit(d) || d == '.' || ident_start(d) || exp_sign) {
          s += d;
          bump();
        } else {
          break;
        }
      }
      tok_.text = std::move(s);
    } else if (c == '"') {
      tok_.kind = Tok::String;
      bump();
      std::string s;
      for (;;) {
        if (pos_ >= src_.size() || peek() == '\n')
          fail_at(tok_.line, tok_.col, "unterminated string (a string ends with '\"' on its line)");
        char d = peek();
        bump();
        if (d == '"') break;
        if (d == '\\') {
          const char e = peek();
          const uint32_t el = line_, ec = col_;
          if (pos_ >= src_.size()) fail_at(el, ec, "unterminated escape in string");
          bump();
          switch (e) {
            case 'n':
              s += '\n';
              break;
            case 't':
              s += '\t';
              break;
            case '"':
              s += '"';
              break;
            case '\\':
              s += '\\';
              break;
            case 'x': {
              int v = 0;
              for (int i = 0; i < 2; ++i) {
                const char h = peek();
                int hv = digit(h)                 ? h - '0'
                         : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                         : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                  : -1;
                if (hv < 0) fail_at(line_, col_, "expected two hex digits after \\x");
                v = v * 16 + hv;
                bump();
              }
              s += static_cast<char>(v);
              break;
            }
            default:
              fail_at(el, ec - 1,
                      fmt::format("unknown escape '\\{}' (use \\n \\t \\\" \\\\ or \\xHH)",
                                  printable(e)));
          }
        } else {
          s += d;
        }
      }
      tok_.text = std::move(s);
    } else if (std::string_view("(){}<>,:=").find(c) != std::string_view::npos) {
      tok_.kind = Tok::Punct;
      tok_.text = std::string(1, c);
      bump();
    } else {
      fail(fmt::format("unexpected character '{}'", printable(c)));
    }
  }

  static std::string printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return fmt::format("\\x{:02x}", u);
    return std::string(1, c);
  }

  // ---- token helpers ----
  bool is_punct(char c) const { return tok_.kind == Tok::Punct && tok_.text[0] == c; }
  bool is_ident(std::string_view s) const { return tok_.kind == Tok::Ident && tok_.text == s; }
  void expect_punct(char c) {
    if (!is_punct(c)) expected(fmt::format("'{}'", c));
    advance();
  }
  void expect_ident(std::string_view s) {
    if (!is_ident(s)) expected(fmt::format("'{}'", s));
    advance();
  }
  uint64_t parse_uint(const char* what, uint64_t max) {
    if (tok_.kind != Tok::Number) expected(what);
    uint64_t v = 0;
    const auto& s = tok_.text;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
      fail(fmt::format("expected {}, found '{}'", what, s));
    if (v > max) fail(fmt::format("{} {} is too large (at most {})", what, s, max));
    advance();
    return v;
  }
  int64_t parse_int(const char* what, int64_t min, int64_t max) {
    if (tok_.kind != Tok::Number) expected(what);
    int64_t v = 0;
    const auto& s = tok_.text;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
      fail(fmt::format("expected {}, found '{}'", what, s));
    if (v < min || v > max) fail(fmt::format("{} {} is outside {} to {}", what, s, min, max));
    advance();
    return v;
  }
  // An im2col box after `im2col`: "P, C, lower L..., upper U...," up to `swizzle`.
  TmaBox parse_im2col_box() {
    TmaBox b;
    b.im2col = true;
    b.pixels = static_cast<uint32_t>(parse_uint("the pixels (rows) of an im2col box", 0x7ff));
    expect_punct(',');
    b.channels = static_cast<uint32_t>(parse_uint("the channels of an im2col box", 0x1ff));
    expect_punct(',');
    auto corners = [&](const char* word, int32_t* out, const char* until) {
      expect_ident(word);
      uint32_t n = 0;
      for (;;) {
        const auto x = parse_int("an im2col corner", -32768, 32767);
        if (n < 3) out[n] = static_cast<int32_t>(x);
        if (++n > 3) fail("an im2col box has at most 3 spatial dimensions");
        expect_punct(',');
        if (is_ident(until)) break;
      }
      return n;
    };
    const uint32_t n = corners("lower", b.lower, "upper");
    if (corners("upper", b.upper, "swizzle") != n)
      fail("an im2col box has as many upper corners as lower ones, one per spatial dimension");
    b.rank = n + 2;
    if (std::string e = tma_im2col_shape_error(b); !e.empty()) fail(e);
    return b;
  }
  // The optional operand majors of a multiply: ", MA, MB", each k or mn (default k, k).
  MmaMajors parse_majors() {
    MmaMajors m;
    if (!is_punct(',')) return m;
    advance();
    auto one = [&](const char* which) {
      if (!is_ident("k") && !is_ident("mn"))
        expected(fmt::format("the major of {} (k or mn)", which));
      const bool mn = is_ident("mn");
      advance();
      return mn;
    };
    m.a_mn = one("A");
    expect_punct(',');
    m.b_mn = one("B");
    return m;
  }

  // ---- types ----
  // A line type written as one identifier: f32 or f32x4.
  Type line_from_ident(const std::string& s) {
    const size_t x = s.find('x');
    const std::string elem = x == std::string::npos ? s : s.substr(0, x);
    auto e = parse_elem_type(elem);
    if (!e) return Type::void_type();
    int lanes = 1;
    if (x != std::string::npos) {
      const std::string n = s.substr(x + 1);
      unsigned v = 0;
      auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
      if (n.empty() || ec != std::errc() || p != n.data() + n.size()) return Type::void_type();
      if (!valid_lanes(static_cast<int>(v)))
        fail(fmt::format("line width {} is not allowed: use 1, 2, 4, 8 or 16", n));
      lanes = static_cast<int>(v);
    }
    return Type::value(*e, lanes);
  }

  Type parse_line_type() {
    if (tok_.kind != Tok::Ident) expected("an element type such as f32 or f32x4");
    Type t = line_from_ident(tok_.text);
    if (t.is_void()) expected("an element type such as f32 or f32x4");
    advance();
    return t;
  }

  Type parse_type() {
    if (tok_.kind != Tok::Ident) expected("a type");
    const std::string word = tok_.text;
    if (word == "void") {
      advance();
      return Type::void_type();
    }
    if (word == "frag") {
      advance();
      expect_punct('<');
      if (tok_.kind != Tok::Ident || (tok_.text != "a" && tok_.text != "b" && tok_.text != "acc"))
        expected("a fragment use (a, b or acc)");
      const FragUse use = tok_.text == "a"   ? FragUse::A
                          : tok_.text == "b" ? FragUse::B
                                             : FragUse::Acc;
      advance();
      expect_punct(',');
      const Type elem = parse_line_type();
      if (elem.lanes != 1) fail("a fragment's element type is a scalar type such as f16");
      int dims[3];
      for (int& d : dims) {
        expect_punct(',');
        d = static_cast<int>(parse_uint("a fragment dimension", 1024));
      }
      expect_punct('>');
      return Type::frag(use, elem.elem, dims[0], dims[1], dims[2]);
    }
    if (word == "tensor" || word == "array" || word == "shared" || word == "local" ||
        word == "var") {
      advance();
      expect_punct('<');
      Type line = parse_line_type();
      Type t;
      if (word == "tensor") {
        expect_punct(',');
        const auto rank = parse_uint("a tensor rank", 8);
        bool ro = false;
        if (is_punct(',')) {
          advance();
          expect_ident("ro");
          ro = true;
        }
        t = Type::tensor(line.elem, line.lanes, static_cast<int>(rank), ro);
      } else if (word == "array") {
        bool ro = false;
        if (is_punct(',')) {
          advance();
          expect_ident("ro");
          ro = true;
        }
        t = Type::array(line.elem, line.lanes, ro);
      } else if (word == "var") {
        t = Type::var(line.elem, line.lanes);
      } else {
        expect_punct(',');
        const auto count = parse_uint("a line count", 0xffffffffu);
        t = word == "shared" ? Type::shared(line.elem, line.lanes, static_cast<uint32_t>(count))
                             : Type::local(line.elem, line.lanes, static_cast<uint32_t>(count));
      }
      expect_punct('>');
      return t;
    }
    return parse_line_type();
  }

  // ---- values ----
  ValueId use_value() {
    if (tok_.kind != Tok::Value) expected("a value such as %3");
    auto it = names_.find(tok_.text);
    if (it == names_.end()) fail(fmt::format("use of undefined value %{}", tok_.text));
    advance();
    return it->second;
  }

  ValueId define_value(const Token& name_tok, const Type& t) {
    if (names_.count(name_tok.text))
      fail_at(
          name_tok.line, name_tok.col,
          fmt::format("value %{} is defined twice; every value is defined once", name_tok.text));
    const ValueId v = k_.new_value(t);
    names_.emplace(name_tok.text, v);
    return v;
  }

  SourceLoc parse_optional_loc() {
    SourceLoc l;
    if (!is_ident("loc")) return l;
    advance();
    expect_punct('(');
    if (tok_.kind != Tok::FileRef) expected("a file reference such as #1");
    uint32_t f = 0;
    {
      const auto& s = tok_.text;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), f);
      if (ec != std::errc() || p != s.data() + s.size() || f == 0 || f > k_.files.size())
        fail(fmt::format("unknown file #{}: declare it first with `file #N \"path\"`", s));
    }
    advance();
    expect_punct(':');
    l.file = f;
    l.line = static_cast<uint32_t>(parse_uint("a line number", 0xffffffffu));
    expect_punct(')');
    return l;
  }

  // ---- kernel ----
  void parse_kernel() {
    while (is_ident("file")) {
      advance();
      if (tok_.kind != Tok::FileRef) expected("a file number such as #1");
      const std::string want = std::to_string(k_.files.size() + 1);
      if (tok_.text != want)
        fail(fmt::format("files are numbered in order: expected #{}, found #{}", want, tok_.text));
      advance();
      if (tok_.kind != Tok::String) expected("a file path in quotes");
      k_.files.push_back(tok_.text);
      advance();
    }
    k_.pos = TextPos{tok_.line, tok_.col};
    expect_ident("kernel");
    if (tok_.kind != Tok::Global) expected("a kernel name such as @axpy");
    k_.name = tok_.text;
    if (!ident_start(k_.name[0]) || k_.name.find('.') != std::string::npos)
      fail(fmt::format("kernel name '{}' must be an identifier", k_.name));
    advance();
    expect_punct('(');
    if (!is_punct(')')) {
      for (;;) {
        if (tok_.kind != Tok::Value) expected("a parameter such as %x");
        const Token name_tok = tok_;
        if (!ident_start(name_tok.text[0]) || name_tok.text.find('.') != std::string::npos)
          fail(fmt::format("parameters are named: write %x, not %{}", name_tok.text));
        advance();
        expect_punct(':');
        const Type t = parse_type();
        Param p;
        p.name = name_tok.text;
        p.value = define_value(name_tok, t);
        p.pos = TextPos{name_tok.line, name_tok.col};
        k_.params.push_back(std::move(p));
        if (is_punct(')')) break;
        expect_punct(',');
      }
    }
    advance();
    // `NAME(x, y, z)` after the parameters: cube_dim, then cluster_dim, each optional.
    auto dims = [&](const char* name, const char* what, std::array<uint32_t, 3>& out,
                    TextPos& pos) {
      if (!is_ident(name)) return;
      pos = TextPos{tok_.line, tok_.col};
      advance();
      expect_punct('(');
      for (int i = 0; i < 3; ++i) {
        if (i) expect_punct(',');
        out[i] = static_cast<uint32_t>(parse_uint(what, 0xffffffffu));
      }
      expect_punct(')');
    };
    dims("cube_dim", "a cube dimension", k_.cube_dim, k_.cube_dim_pos);
    dims("cluster_dim", "a cluster dimension", k_.cluster_dim, k_.cluster_dim_pos);
    parse_block(k_.body, 0);
    if (tok_.kind != Tok::Eof) expected("end of input after the kernel");
  }

  void parse_block(Region& r, int depth) {
    if (depth > kMaxDepth) fail(fmt::format("regions nested deeper than {}", kMaxDepth));
    expect_punct('{');
    while (!is_punct('}')) {
      if (tok_.kind == Tok::Eof) expected("'}'");
      r.ops.push_back(parse_op(depth));
    }
    advance();
  }

  Op parse_op(int depth) {
    Op op;
    op.pos = {tok_.line, tok_.col};
    Token result_tok;
    bool has_result_name = false;
    if (tok_.kind == Tok::Value) {
      result_tok = tok_;
      has_result_name = true;
      advance();
      expect_punct('=');
    }
    if (tok_.kind != Tok::Ident) expected("an op name");
    auto kind = parse_op_name(tok_.text);
    if (!kind) fail(fmt::format("unknown op '{}'", tok_.text));
    op.kind = *kind;
    const OpInfo& info = op_info(op.kind);
    const Token name_tok = tok_;
    advance();
    if (has_result_name && !sig_has_result(info.sig))
      fail_at(result_tok.line, result_tok.col,
              fmt::format("'{}' produces no value; remove '%{} ='", info.name, result_tok.text));
    if (!has_result_name && sig_has_result(info.sig))
      fail_at(name_tok.line, name_tok.col,
              fmt::format("'{}' produces a value; write '%N = {} ...'", info.name, info.name));

    if (is_region_sig(info.sig)) {
      parse_region_op(op, depth);
      return op;
    }
    std::string literal;
    Token literal_tok;
    if (!parse_matrix_operands(op)) parse_operands(op, literal, literal_tok);
    if (sig_has_result(info.sig)) {
      expect_punct(':');
      const Type t = parse_type();
      if (info.sig == Sig::Const) set_literal(op, t, literal, literal_tok);
      op.result = define_value(result_tok, t);
    } else if (is_punct(':')) {
      fail(fmt::format("'{}' produces no value, so it has no type", info.name));
    }
    op.loc = parse_optional_loc();
    return op;
  }

  static bool is_region_sig(Sig s) {
    return s == Sig::If || s == Sig::For || s == Sig::Loop || s == Sig::Pipeline || s == Sig::Units;
  }

  // N operands, comma-separated.
  void operands(Op& op, int n) {
    for (int i = 0; i < n; ++i) {
      if (i) expect_punct(',');
      op.operands.push_back(use_value());
    }
  }
  // `, N`: the op's immediate.
  void immediate(Op& op, const char* what) {
    expect_punct(',');
    op.attr.i = parse_uint(what, 0xffffffffu);
  }

  // An op with regions (if, for, loop, pipeline, units): its operands, location and blocks.
  void parse_region_op(Op& op, int depth) {
    switch (op_info(op.kind).sig) {
      case Sig::If:
        operands(op, 1);
        op.loc = parse_optional_loc();
        op.regions.resize(2);
        parse_block(op.regions[0], depth + 1);
        if (is_ident("else")) {
          advance();
          parse_block(op.regions[1], depth + 1);
        }
        return;
      case Sig::For: {
        if (tok_.kind != Tok::Value) expected("the induction variable such as %4");
        const Token iv_tok = tok_;
        advance();
        expect_punct('=');
        op.operands.push_back(use_value());
        expect_ident("to");
        op.operands.push_back(use_value());
        expect_ident("step");
        op.operands.push_back(use_value());
        if (is_ident("unroll")) {
          advance();
          if (is_ident("full")) {
            advance();
            op.attr.i = kUnrollFull;
          } else {
            op.attr.i = parse_uint("an unroll factor", 0xfffffffeu);
          }
        }
        op.loc = parse_optional_loc();
        op.regions.resize(1);
        op.regions[0].args.push_back(define_value(iv_tok, k_.type_of(op.operands[0])));
        parse_block(op.regions[0], depth + 1);
        return;
      }
      case Sig::Loop:
        op.loc = parse_optional_loc();
        op.regions.resize(1);
        parse_block(op.regions[0], depth + 1);
        return;
      case Sig::Pipeline: {
        operands(op, 3);
        expect_punct(',');
        expect_ident("stages");
        const auto stages = parse_uint("a stage count", kMaxPipelineStages);
        expect_punct(',');
        // `lag N`: the consumers release round r - N's stage after consume(r); `commit`: the
        // consume region releases each stage itself (tcgen05.commit on the empty mbarrier).
        uint64_t lag = 0;
        bool commit = false;
        if (is_ident("commit")) {
          advance();
          commit = true;
        } else {
          expect_ident("lag");
          lag = parse_uint("a release lag", kMaxPipelineStages);
        }
        // `, registers P C`: the producer's and the consumers' registers per unit (setmaxnreg).
        PipelineRegisters regs;
        if (is_punct(',')) {
          advance();
          expect_ident("registers");
          regs.producer = static_cast<uint32_t>(parse_uint("the producer's registers", 256));
          regs.consumers = static_cast<uint32_t>(parse_uint("the consumers' registers", 256));
        }
        op.attr.i =
            pipeline_attr(static_cast<uint32_t>(stages), static_cast<uint32_t>(lag), commit, regs);
        op.regions.resize(2);
        // The round and stage a region runs for: produce(%r, %s) and consume(%r, %s).
        auto region_args = [&](Region& r) {
          expect_punct('(');
          for (int i = 0; i < 2; ++i) {
            if (i) expect_punct(',');
            if (tok_.kind != Tok::Value)
              expected(i ? "the stage such as %5" : "the round such as %4");
            const Token t = tok_;
            advance();
            r.args.push_back(define_value(t, Type::value(ElemType::U32)));
          }
          expect_punct(')');
        };
        expect_ident("produce");
        region_args(op.regions[0]);
        op.loc = parse_optional_loc();
        parse_block(op.regions[0], depth + 1);
        expect_ident("consume");
        region_args(op.regions[1]);
        parse_block(op.regions[1], depth + 1);
        return;
      }
      case Sig::Units: {
        if (tok_.kind != Tok::Value) expected("the unit index such as %4");
        const Token u_tok = tok_;
        advance();
        expect_punct('=');
        op.operands.push_back(use_value());
        expect_ident("to");
        op.operands.push_back(use_value());
        op.loc = parse_optional_loc();
        op.regions.resize(1);
        op.regions[0].args.push_back(define_value(u_tok, Type::value(ElemType::U32)));
        parse_block(op.regions[0], depth + 1);
        return;
      }
      default:
        KILN_CHECK(false, "not an op with regions");
    }
  }

  // The operands and immediates of the matrix, mbarrier, tensor-memory and TMA ops; false when
  // `op` is not one of them.
  bool parse_matrix_operands(Op& op) {
    switch (op_info(op.kind).sig) {
      case Sig::FragLoad:
      case Sig::FragStore:
      case Sig::FragLdmatrix:
        operands(op, op_info(op.kind).sig == Sig::FragLdmatrix ? 4 : 6);
        if (!is_punct(',')) expected("', row' or ', col' (the memory layout) after the operands");
        advance();
        if (is_ident("row") || is_ident("col")) {
          op.attr.i = is_ident("col") ? 1 : 0;
          advance();
        } else {
          expected("the memory layout, row or col");
        }
        return true;
      case Sig::WgmmaDesc:
        operands(op, 4);
        immediate(op, "the swizzle in bytes (0, 32, 64 or 128)");
        return true;
      case Sig::Wgmma: {
        operands(op, 3);
        expect_punct(',');
        const auto e = tok_.kind == Tok::Ident ? parse_elem_type(tok_.text) : std::nullopt;
        if (!e) expected("the input element type of the multiply, such as bf16");
        op.attr.i = static_cast<uint64_t>(*e);
        advance();
        op.attr.i |= mma_major_bits(parse_majors(), kWgmmaMajorShift);
        return true;
      }
      case Sig::WgmmaWait:
        op.attr.i = parse_uint("the number of groups left in flight", 0xffffffffu);
        return true;
      case Sig::MbarInit:
        operands(op, 2);
        immediate(op, "the number of arrivals per phase");
        return true;
      case Sig::TmemAlloc:
        op.attr.i = parse_uint("the number of tensor-memory columns", 0xffffffffu);
        return true;
      case Sig::TmemFree:
        operands(op, 1);
        immediate(op, "the number of tensor-memory columns");
        return true;
      case Sig::TmemLoad:
        operands(op, 3);
        immediate(op, "the number of columns");
        return true;
      case Sig::TmaLoad:
      case Sig::TmaStore:
      case Sig::TmaPrefetch: {
        // tma.load %m, %i, %t, %bar, %bi, %c..., box B..., swizzle W[, fill nan]
        // tma.store %t, %m, %i, %c..., box B..., swizzle W[, fill nan][, reduce add|min|max]
        //   [, async]
        // tma.prefetch %t, %c..., box B..., swizzle W[, fill nan]
        //   (tma.load of an im2col box: %c..., %o..., im2col P, C, lower L..., upper U...,
        //   swizzle W[, fill nan])
        operands(op, static_cast<int>(tma_operands(op.kind).coords));
        while (is_punct(',')) {
          advance();
          if (is_ident("box") || is_ident("im2col")) break;
          op.operands.push_back(use_value());
        }
        if (!is_ident("box") && !is_ident("im2col"))
          expected("', box' and the box's extents (or ', im2col') after the coordinates");
        TmaBox b;
        if (is_ident("im2col")) {
          advance();
          b = parse_im2col_box();
        } else {
          advance();
          for (;;) {
            const uint64_t x = parse_uint("a box extent", kTmaMaxBox);
            if (b.rank < kTmaMaxRank) b.box[b.rank] = static_cast<uint32_t>(x);
            ++b.rank;
            if (b.rank > kTmaMaxRank)
              fail(fmt::format("a TMA box has at most {} dimensions", kTmaMaxRank));
            expect_punct(',');
            if (is_ident("swizzle")) break;
          }
        }
        advance();
        b.swizzle =
            static_cast<uint32_t>(parse_uint("the swizzle in bytes (0, 32, 64 or 128)", 128));
        if (!wgmma_swizzle_valid(b.swizzle))
          fail(fmt::format("a TMA swizzle is 0, 32, 64 or 128 bytes, not {}", b.swizzle));
        TmaReduce red = TmaReduce::None;
        bool async = false;
        while (is_punct(',')) {
          advance();
          if (is_ident("fill")) {
            advance();
            expect_ident("nan");
            b.fill_nan = true;
          } else if (is_ident("reduce")) {
            advance();
            for (TmaReduce r : {TmaReduce::Add, TmaReduce::Min, TmaReduce::Max})
              if (is_ident(tma_reduce_name(r))) red = r;
            if (red == TmaReduce::None) expected("add, min or max after 'reduce'");
            advance();
          } else if (is_ident("async")) {
            advance();
            async = true;
          } else {
            expected("'fill nan', 'reduce add|min|max' or 'async'");
          }
        }
        op.attr.i = tma_attr(b) | uint64_t{static_cast<uint32_t>(red)} << kTmaReduceShift |
                    uint64_t{async} << kTmaAsyncBit;
        return true;
      }
      case Sig::Tcgen05Mma: {
        operands(op, 4);
        expect_punct(',');
        const auto e = tok_.kind == Tok::Ident ? parse_elem_type(tok_.text) : std::nullopt;
        if (!e) expected("the input element type of the multiply, such as bf16");
        advance();
        expect_punct(',');
        const uint64_t n = parse_uint("the number of columns N", 0xffffu);
        op.attr.i =
            static_cast<uint64_t>(*e) | n << 8 | mma_major_bits(parse_majors(), kTcgen05MajorShift);
        return true;
      }
      default:
        return false;
    }
  }

  // The operands, immediates and literal of every other op.
  void parse_operands(Op& op, std::string& literal, Token& literal_tok) {
    switch (op_info(op.kind).sig) {
      case Sig::Const:
        if (tok_.kind != Tok::Number && tok_.kind != Tok::Ident) expected("a literal");
        literal = tok_.text;
        literal_tok = tok_;
        advance();
        break;
      case Sig::Builtin:
        if (is_ident("x") || is_ident("y") || is_ident("z")) {
          op.attr.i = static_cast<uint64_t>(tok_.text[0] - 'x' + 1);
          advance();
        }
        break;
      case Sig::Print:
        if (tok_.kind != Tok::String) expected("a format string");
        op.attr.s = tok_.text;
        advance();
        while (is_punct(',')) {
          advance();
          op.operands.push_back(use_value());
        }
        break;
      case Sig::Assert:
        operands(op, 1);
        expect_punct(',');
        if (tok_.kind != Tok::String) expected("a message string");
        op.attr.s = tok_.text;
        advance();
        break;
      case Sig::Extract:
        operands(op, 1);
        immediate(op, "a lane index");
        break;
      case Sig::Insert:
        operands(op, 2);
        immediate(op, "a lane index");
        break;
      case Sig::FragGet:
        operands(op, 1);
        immediate(op, "an element index");
        break;
      case Sig::FragSet:
        operands(op, 2);
        immediate(op, "an element index");
        break;
      case Sig::ShapeStride:
        operands(op, 1);
        immediate(op, "a dimension");
        break;
      default:
        operands(op, sig_operand_count(op_info(op.kind).sig));
        break;
    }
  }

  void set_literal(Op& op, const Type& t, const std::string& lit, const Token& at) {
    auto bad = [&](const std::string& msg) { fail_at(at.line, at.col, msg); };
    if (!t.is_value()) return;  // the verifier reports a constant of a non-value type
    if (t.elem == ElemType::Bool) {
      if (lit != "true" && lit != "false")
        bad(fmt::format("expected true or false, found '{}'", lit));
      op.attr.i = lit == "true";
      return;
    }
    if (is_int(t.elem)) {
      const bool neg = !lit.empty() && lit[0] == '-';
      std::string_view digits(lit);
      if (neg) digits.remove_prefix(1);
      int base = 10;
      if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
        base = 16;
        digits.remove_prefix(2);
      }
      uint64_t mag = 0;
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), mag, base);
      if (digits.empty() || p != digits.data() + digits.size())
        bad(fmt::format("expected an integer literal for {}, found '{}'", type_name(t), lit));
      if (ec != std::errc()) bad(fmt::format("integer literal {} does not fit in 64 bits", lit));
      if (neg) {
        if (!is_signed(t.elem))
          bad(fmt::format("constant {} is negative but {} is unsigned", lit, type_name(t)));
        if (mag > (uint64_t{1} << 63))
          bad(fmt::format("integer literal {} does not fit in 64 bits", lit));
        op.attr.i = ~mag + 1;  // two's complement negation
      } else {
        if (is_signed(t.elem) && mag > static_cast<uint64_t>(INT64_MAX))
          bad(fmt::format("constant {} is out of range for {}", lit, type_name(t)));
        op.attr.i = mag;
      }
      return;
    }
    // Floats.
    double v;
    if (lit == "nan") {
      v = NAN;
    } else if (lit == "inf") {
      v = INFINITY;
    } else if (lit == "-inf") {
      v = -INFINITY;
    } else {
      if (lit.empty() || !(digit(lit[0]) || lit[0] == '-'))
        bad(fmt::format("expected a float literal for {}, found '{}'", type_name(t), lit));
      char* end = nullptr;
      v = std::strtod(lit.c_str(), &end);
      if (end != lit.c_str() + lit.size() || lit.find_first_of("xX") != std::string::npos)
        bad(fmt::format("expected a float literal for {}, found '{}'", type_name(t), lit));
      if (std::isinf(v)) bad(fmt::format("constant {} is out of range for {}", lit, type_name(t)));
      const double r = round_float_literal(t.elem, v);
      if (!std::isinf(r)) {
        // A literal names its type's value to as many significant digits as it has: `0.1` is
        // the f32 nearest 0.1, but `16777217` (or `1e-50`) is no f32 at all, and silently
        // taking its neighbour (or zero) would change the program.
        int digits = 0;
        bool leading = true;
        for (char c : lit.substr(0, lit.find_first_of("eE"))) {
          if (!digit(c)) continue;
          if (leading && c == '0') continue;
          leading = false;
          ++digits;
        }
        const std::string back = fmt::format("{:.{}g}", r, std::clamp(digits, 1, 40));
        if (std::strtod(back.c_str(), nullptr) != v) {
          Attr nearest;
          nearest.f = r;
          bad(
              fmt::format("constant {} is not a {} value: the nearest {} is {}; write that "
                          "(a float literal must be its type's value to as many digits as it "
                          "has)",
                          lit, type_name(t), type_name(t), format_literal(t.elem, nearest)));
        }
        v = r;
      }  // out-of-range values stay for the verifier to report
    }
    op.attr.f = v;
  }

  std::string_view src_;
  std::string name_;
  size_t pos_ = 0;
  uint32_t line_ = 1, col_ = 1;
  Token tok_;
  Kernel k_;
  std::unordered_map<std::string, ValueId> names_;
};

}  // namespace

Result<Kernel> parse(std::string_view text, std::string_view source_name) {
  Parser p(text, source_name);
  auto r = p.run();
  if (r.ok()) r->source_name = std::string(source_name);
  return r;
}

}  // namespace kiln::ir
