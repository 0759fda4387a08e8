// Printer: canonical literals and strings, and the exact round trip of the corpus.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tests/test_util.h"

using namespace kiln;
using namespace kiln::ir;

namespace {
std::string lit_f(ElemType t, double v) {
  Attr a;
  a.f = v;
  return format_literal(t, a);
}
std::string lit_i(ElemType t, uint64_t v) {
  Attr a;
  a.i = v;
  return format_literal(t, a);
}
}  // namespace

TEST_CASE("literals print in their shortest exact form", "[ir][printer]") {
  CHECK(lit_f(ElemType::F32, static_cast<float>(0.1)) == "0.1");
  CHECK(lit_f(ElemType::F64, 0.1) == "0.1");
  CHECK(lit_f(ElemType::F64, static_cast<float>(0.1)) == "0.10000000149011612");
  CHECK(lit_f(ElemType::F16, 0.0999755859375) == "0.1");
  CHECK(lit_f(ElemType::F32, 1.0) == "1.0");
  CHECK(lit_f(ElemType::F32, -0.0) == "-0.0");
  CHECK(lit_f(ElemType::F64, 1e300) == "1e+300");
  CHECK(lit_f(ElemType::F64, 123456789.0) == "123456789.0");
  CHECK(lit_f(ElemType::F32, NAN) == "nan");
  CHECK(lit_f(ElemType::F32, -INFINITY) == "-inf");
  CHECK(lit_i(ElemType::I32, static_cast<uint64_t>(int64_t{-5})) == "-5");
  CHECK(lit_i(ElemType::U64, ~uint64_t{0}) == "18446744073709551615");
  CHECK(lit_i(ElemType::Bool, 1) == "true");
}

TEST_CASE("strings are quoted with escapes", "[ir][printer]") {
  CHECK(quote("a\"b\\c\nd\te\x01") == "\"a\\\"b\\\\c\\nd\\te\\x01\"");
}

TEST_CASE("the round-trip corpus prints back byte for byte and covers every op kind",
          "[ir][printer]") {
  std::set<OpKind> seen;
  const auto files = test::files_in("tests/lit/ir/roundtrip", ".kir");
  REQUIRE(files.size() >= 5);
  for (const auto& path : files) {
    INFO(path);
    const std::string text = test::strip_comment_lines(test::read_file(path));
    auto k = parse(text, path);
    REQUIRE(k.ok());
    auto st = verify(*k);
    INFO((st.ok() ? "" : st.error().message));
    REQUIRE(st.ok());
    CHECK(print(*k) == text);
    walk(k->body, [&](const Op& op) { seen.insert(op.kind); });
  }
  for (int i = 0; i < kNumOpKinds; ++i) {
    INFO("op kind missing from tests/lit/ir/roundtrip: " << op_name(static_cast<OpKind>(i)));
    CHECK(seen.count(static_cast<OpKind>(i)) == 1);
  }
}

TEST_CASE("printing is idempotent through the parser", "[ir][printer]") {
  for (const auto& path : test::files_in("tests/lit/ir/roundtrip", ".kir")) {
    auto k = parse(test::read_file(path), path);
    REQUIRE(k.ok());
    const std::string once = print(*k);
    auto k2 = parse(once, "again");
    REQUIRE(k2.ok());
    CHECK(print(*k2) == once);
  }
}

TEST_CASE("the kernels shown in docs/ir.md verify and are in canonical form", "[ir][docs]") {
  const std::string doc = test::read_file(test::source_path("docs/ir.md"));
  size_t pos = 0, n = 0;
  while ((pos = doc.find("```\n", pos)) != std::string::npos) {
    const size_t start = pos + 4;
    const size_t end = doc.find("```\n", start);
    REQUIRE(end != std::string::npos);
    const std::string block = doc.substr(start, end - start);
    pos = end + 4;
    if (block.rfind("kernel @", 0) != 0 && block.rfind("file #", 0) != 0) continue;
    ++n;
    INFO(block);
    auto k = parse(block, "docs/ir.md");
    REQUIRE(k.ok());
    auto st = verify(*k);
    INFO((st.ok() ? "" : st.error().message));
    CHECK(st.ok());
    CHECK(print(*k) == block);
  }
  CHECK(n >= 3);
}
