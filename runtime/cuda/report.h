// The report buffer of a CUDA stream as the host reads it (the device side is kiln::report in
// compiler/cuda/prelude.cuh): prints, failed asserts and checked-mode faults of the launches
// since the last sync. Shared by the GPU (runtime/cuda/device.cpp) and the emulator
// (runtime/emu/device.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/abi.h"
#include "ir/result.h"

namespace kiln::detail {

struct FaultEntry {
  uint64_t key;
  uint32_t site, index, bound, pad;
};
struct ReportHeader {
  uint64_t fault_key, assert_key;
  uint32_t fault_count, assert_count, print_bytes, prints_dropped, print_capacity, pad;
  FaultEntry faults[32];
  FaultEntry asserts[32];
};
static_assert(sizeof(FaultEntry) == 24 && sizeof(ReportHeader) == 1576, "must match prelude.cuh");
inline constexpr uint32_t kPrintCapacity = 1u << 20;  // bytes of print records per stream
inline constexpr uint32_t kMaxSeq = (1u << 22) - 1;   // launches a key can number

// A report key: launch sequence number, cube and unit (kiln::report_key in the prelude).
inline uint64_t report_key(uint32_t seq, uint32_t cube, uint32_t unit) {
  return (uint64_t{seq} << 42) | (uint64_t{cube} << 10) | (unit & 1023u);
}
void decode_key(uint64_t key, uint32_t& seq, uint32_t& cube, uint32_t& unit);

// An empty report (no fault, no prints) holding up to kPrintCapacity bytes of prints.
ReportHeader empty_report();

// The prints of a report buffer in order (launch by launch, each by cube, unit and program
// order), and its first fault or failed assert (the smallest key; faults first), with that key.
// `kernel_of` gives the kernel of a launch's sequence number (null when unknown).
void read_report(const ReportHeader& h, std::span<const unsigned char> arena,
                 const std::function<const abi::KernelInfo*(uint32_t seq)>& kernel_of,
                 std::vector<std::string>& prints, std::optional<Error>& fault,
                 uint64_t& fault_key);

}  // namespace kiln::detail
