// libFuzzer entry for the .kir parser, verifier and printer. Run it on the round-trip corpus:
//   build-fuzz/bin/fuzz_parser tests/lit/ir/roundtrip -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto k = kiln::ir::parse(text, "fuzz.kir");
  if (!k.ok()) return 0;
  if (kiln::ir::verify(*k).ok()) {
    // A kernel that verifies must print to a fixed point.
    const std::string once = kiln::ir::print(*k);
    auto again = kiln::ir::parse(once, "again.kir");
    if (!again.ok() || kiln::ir::print(*again) != once) __builtin_trap();
  } else {
    (void)kiln::ir::print(*k);
  }
  return 0;
}
