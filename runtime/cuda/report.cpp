// Reading a CUDA stream's report buffer (runtime/cuda/report.h).
#include "runtime/cuda/report.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

namespace kiln::detail {

void decode_key(uint64_t key, uint32_t& seq, uint32_t& cube, uint32_t& unit) {
  seq = static_cast<uint32_t>(key >> 42);
  cube = static_cast<uint32_t>((key >> 10) & 0xffffffffu);
  unit = static_cast<uint32_t>(key & 1023u);
}

ReportHeader empty_report() {
  ReportHeader h;
  std::memset(&h, 0, sizeof h);
  h.fault_key = h.assert_key = ~uint64_t{0};
  h.print_capacity = kPrintCapacity;
  return h;
}

void read_report(const ReportHeader& h, std::span<const unsigned char> arena,
                 const std::function<const abi::KernelInfo*(uint32_t seq)>& kernel_of,
                 std::vector<std::string>& prints, std::optional<Error>& fault,
                 uint64_t& fault_key) {
  // The first fault or failed assert: the smallest (launch, cube, unit); at the same unit the
  // assert, which states what the kernel expected (checked mode's view checks are asserts
  // placed before the access they skip).
  const FaultEntry* best = nullptr;
  bool best_is_fault = false;
  for (int list = 0; list < 2; ++list) {
    const bool faults = list == 1;
    const uint32_t count = std::min<uint32_t>(faults ? h.fault_count : h.assert_count, 32);
    const FaultEntry* entries = faults ? h.faults : h.asserts;
    for (uint32_t i = 0; i < count; ++i)
      if (!best || entries[i].key < best->key) {
        best = &entries[i];
        best_is_fault = faults;
      }
  }
  fault_key = ~uint64_t{0};
  if (best && !fault) {
    uint32_t seq, cube, unit;
    decode_key(best->key, seq, cube, unit);
    fault_key = best->key;
    const abi::KernelInfo* k = kernel_of(seq);
    if (!k) {
      fault = Error(ErrorKind::KernelFault,
                    "a kernel reported a fault kiln cannot attribute (report buffer damaged?)");
    } else if (best_is_fault && best->site < k->accesses.size()) {
      const abi::AccessSite& site = k->accesses[best->site];
      fault = Error(ErrorKind::KernelFault,
                    fmt::format("{}: error: out-of-bounds {} of {} in kernel '{}': line index {} "
                                "is not below {} (cube "
                                "{}, unit {}); the access was skipped",
                                site.where.empty() ? k->name : site.where, site.access, site.memory,
                                k->name, best->index, best->bound, cube, unit));
    } else if (!best_is_fault && best->site < k->asserts.size()) {
      const abi::AssertSite& site = k->asserts[best->site];
      fault = Error(ErrorKind::KernelFault,
                    fmt::format("{}: error: assertion failed in kernel '{}': {} (cube {}, unit {})",
                                site.where.empty() ? k->name : site.where, k->name, site.message,
                                cube, unit));
    }
  }
  // Prints, launch by launch in order, each by cube, unit and program order.
  if (h.print_bytes == 0) return;
  const uint32_t bytes =
      static_cast<uint32_t>(std::min<size_t>({h.print_bytes, kPrintCapacity, arena.size()}));
  std::map<uint32_t, abi::LaunchState> by_launch;
  for (uint32_t at = 0; at + 16 <= bytes;) {
    uint32_t size, site;
    uint64_t key;
    std::memcpy(&size, arena.data() + at, 4);
    if (size & 0x80000000u || size < 16 || at + size > bytes) break;  // the record that did not fit
    std::memcpy(&site, arena.data() + at + 4, 4);
    std::memcpy(&key, arena.data() + at + 8, 8);
    uint32_t seq, cube, unit;
    decode_key(key, seq, cube, unit);
    abi::LaunchState::Print p{cube, unit, site, std::vector<uint64_t>((size - 16) / 8)};
    if (!p.bits.empty()) std::memcpy(p.bits.data(), arena.data() + at + 16, p.bits.size() * 8);
    by_launch[seq].prints.push_back(std::move(p));
    at += size;
  }
  for (auto& [seq, state] : by_launch)
    if (const abi::KernelInfo* k = kernel_of(seq))
      for (std::string& line : abi::format_prints(state, k->prints))
        prints.push_back(std::move(line));
  if (h.prints_dropped)
    prints.push_back(fmt::format(
        "kiln: {} device prints were dropped: the report buffer holds {} bytes per stream "
        "between syncs; sync more often",
        h.prints_dropped, kPrintCapacity));
}

}  // namespace kiln::detail
