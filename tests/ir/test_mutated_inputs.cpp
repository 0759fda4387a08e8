// Robustness: truncated and mutated .kir inputs must end in a clean error or a kernel that
// verifies (or not) without crashing, and whatever parses must print back stably.
#include <catch2/catch.hpp>

#include <cctype>
#include <random>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tests/test_util.h"

using namespace kiln;
using namespace kiln::ir;

namespace {

// Every line of a parser or verifier message starts with "m.kir:LINE:COL" (or is the note that
// more errors were cut).
void require_positions(const std::string& message) {
  size_t start = 0;
  while (start <= message.size()) {
    size_t end = message.find('\n', start);
    if (end == std::string::npos) end = message.size();
    const std::string line = message.substr(start, end - start);
    start = end + 1;
    if (line == "(more errors not shown)") continue;
    INFO(message);
    REQUIRE(line.rfind("m.kir:", 0) == 0);
    size_t at = 6, digits = 0;
    for (int field = 0; field < 2; ++field, ++at) {
      for (digits = 0; at < line.size() && std::isdigit(static_cast<unsigned char>(line[at])); ++at)
        ++digits;
      REQUIRE(digits > 0);
      REQUIRE(at < line.size());
      // "m.kir:3:7: error: ..." or "m.kir:3:7 (from DSL file:line): error: ..."
      REQUIRE((line[at] == ':' || (field == 1 && line[at] == ' ')));
    }
  }
}

// Parses, verifies and prints; a kernel that parses must print back to a fixed point.
void exercise(const std::string& text) {
  auto k = parse(text, "m.kir");
  if (!k.ok()) {
    REQUIRE(k.error().kind == ErrorKind::Parse);
    require_positions(k.error().message);
    return;
  }
  auto st = verify(*k);
  if (!st.ok()) {
    REQUIRE(st.error().kind == ErrorKind::Verify);
    require_positions(st.error().message);
  }
  const std::string once = print(*k);
  if (st.ok()) {
    auto again = parse(once, "again.kir");
    REQUIRE(again.ok());
    REQUIRE(print(*again) == once);
  }
}

const char* kTokens[] = {"%0",        "%1",   "{",       "}",      "(",
                         ")",         ",",    ":",       "=",      "if",
                         "for",       "loop", "break",   "return", "sync_cube",
                         "f32x4",     "u32",  "tensor<", ">",      "\"",
                         "loc(#1:2)", "-",    "1e999",   "0x",     "99999999999999999999",
                         "nan",       "%x",   "@k",      "#9",     "\\",
                         "\n",        "//"};

}  // namespace

TEST_CASE("truncated and mutated inputs never crash the parser or verifier",
          "[ir][parser][robustness]") {
  std::mt19937 rng(12345);  // fixed seed: the run is repeatable
  size_t cases = 0;
  for (const auto& path : test::files_in("tests/lit/ir/roundtrip", ".kir")) {
    const std::string text = test::read_file(path);
    // Every truncation point (in steps, to keep the test quick).
    for (size_t n = 0; n < text.size(); n += 7, ++cases) exercise(text.substr(0, n));
    // Random byte-level and token-level mutations.
    for (int m = 0; m < 1500; ++m, ++cases) {
      std::string t = text;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !t.empty(); ++e) {
        const size_t pos = rng() % t.size();
        switch (rng() % 5) {
          case 0:
            t[pos] = static_cast<char>(rng() % 256);
            break;
          case 1:
            t.erase(pos, 1 + rng() % 8);
            break;
          case 2:
            t.insert(pos, kTokens[rng() % std::size(kTokens)]);
            break;
          case 3:
            t.insert(pos, t.substr(rng() % t.size(), rng() % 40));
            break;
          case 4:
            std::swap(t[pos], t[rng() % t.size()]);
            break;
        }
      }
      exercise(t);
    }
  }
  CHECK(cases > 5000);
}
