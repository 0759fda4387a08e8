// The functions CPU kernels call to report prints, failed asserts and checked-mode faults.
#include "compiler/cpu/abi.h"

#include <vector>

extern "C" void kiln_rt_print(void* state, uint32_t site, uint32_t cube, uint32_t unit,
                              const uint64_t* bits, uint32_t count) {
  auto* s = static_cast<kiln::abi::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  s->prints.push_back({cube, unit, site, std::vector<uint64_t>(bits, bits + count)});
}

extern "C" void kiln_rt_assert_failed(void* state, uint32_t site, uint32_t cube, uint32_t unit) {
  auto* s = static_cast<kiln::abi::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  // Cubes run in parallel; reporting the failure of the lowest (cube, unit) keeps it repeatable.
  if (s->assert_failed &&
      (s->assert_cube < cube || (s->assert_cube == cube && s->assert_unit <= unit)))
    return;
  s->assert_failed = true;
  s->assert_site = site;
  s->assert_cube = cube;
  s->assert_unit = unit;
}

extern "C" void kiln_rt_fault(void* state, uint32_t site, uint32_t index, uint32_t bound,
                              uint32_t cube, uint32_t unit) {
  auto* s = static_cast<kiln::abi::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->fault && (s->fault_cube < cube || (s->fault_cube == cube && s->fault_unit <= unit)))
    return;
  s->fault = true;
  s->fault_site = site;
  s->fault_index = index;
  s->fault_bound = bound;
  s->fault_cube = cube;
  s->fault_unit = unit;
}
