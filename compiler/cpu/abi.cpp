// Argument layout and the host side of kernel reports (prints and asserts).
#include "compiler/cpu/abi.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "ir/float16.h"

namespace kiln::cpu {

ArgLayout arg_layout(const ir::Kernel& k) {
  ArgLayout l;
  for (const ir::Param& p : k.params) {
    const ir::Type& t = k.type_of(p.value);
    l.params.push_back(ParamSlots{p.name, l.slot_count, t});
    switch (t.kind) {
      case ir::TypeKind::Tensor: l.slot_count += 3 + 2 * t.rank; break;
      case ir::TypeKind::Array: l.slot_count += 2; break;
      default: l.slot_count += 1; break;
    }
  }
  return l;
}

namespace {

std::string format_scalar(ir::ElemType e, uint64_t bits) {
  using ir::ElemType;
  switch (e) {
    case ElemType::Bool: return bits ? "true" : "false";
    case ElemType::I8: return fmt::format("{}", static_cast<int8_t>(bits));
    case ElemType::I16: return fmt::format("{}", static_cast<int16_t>(bits));
    case ElemType::I32: return fmt::format("{}", static_cast<int32_t>(bits));
    case ElemType::I64: return fmt::format("{}", static_cast<int64_t>(bits));
    case ElemType::U8:
    case ElemType::U16:
    case ElemType::U32:
    case ElemType::U64: return fmt::format("{}", bits);
    case ElemType::F16: return fmt::format("{}", f16_value(static_cast<uint16_t>(bits)));
    case ElemType::BF16: return fmt::format("{}", bf16_value(static_cast<uint16_t>(bits)));
    case ElemType::F32: {
      float f;
      const auto b = static_cast<uint32_t>(bits);
      std::memcpy(&f, &b, 4);
      return fmt::format("{}", f);
    }
    case ElemType::F64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return fmt::format("{}", d);
    }
  }
  return "?";
}

}  // namespace

std::vector<std::string> format_prints(LaunchState& state, const std::vector<PrintSite>& sites) {
  std::lock_guard<std::mutex> lock(state.mu);
  std::stable_sort(state.prints.begin(), state.prints.end(),
                   [](const LaunchState::Print& a, const LaunchState::Print& b) {
                     return a.cube != b.cube ? a.cube < b.cube : a.unit < b.unit;
                   });
  std::vector<std::string> lines;
  for (const auto& p : state.prints) {
    if (p.site >= sites.size()) continue;
    const PrintSite& site = sites[p.site];
    std::vector<std::string> args;
    size_t at = 0;
    for (const ir::Type& t : site.operands) {
      std::string v;
      if (t.lanes == 1) {
        v = format_scalar(t.elem, at < p.bits.size() ? p.bits[at] : 0);
      } else {
        v = "[";
        for (int i = 0; i < t.lanes; ++i)
          v += (i ? ", " : "") + format_scalar(t.elem, at + i < p.bits.size() ? p.bits[at + i] : 0);
        v += "]";
      }
      at += t.lanes;
      args.push_back(std::move(v));
    }
    // Substitute {} in order; {{ and }} are braces.
    std::string out;
    size_t next = 0;
    const std::string& f = site.format;
    for (size_t i = 0; i < f.size(); ++i) {
      if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '{') {
        out += '{';
        ++i;
      } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
      } else if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '}') {
        if (next < args.size()) out += args[next++];
        ++i;
      } else {
        out += f[i];
      }
    }
    lines.push_back(std::move(out));
  }
  return lines;
}

}  // namespace kiln::cpu

extern "C" void kiln_rt_print(void* state, uint32_t site, uint32_t cube, uint32_t unit,
                              const uint64_t* bits, uint32_t count) {
  auto* s = static_cast<kiln::cpu::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  s->prints.push_back({cube, unit, site, std::vector<uint64_t>(bits, bits + count)});
}

extern "C" void kiln_rt_assert_failed(void* state, uint32_t site, uint32_t cube, uint32_t unit) {
  auto* s = static_cast<kiln::cpu::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  // Cubes run in parallel; reporting the failure of the lowest (cube, unit) keeps it repeatable.
  if (s->assert_failed && (s->assert_cube < cube || (s->assert_cube == cube && s->assert_unit <= unit)))
    return;
  s->assert_failed = true;
  s->assert_site = site;
  s->assert_cube = cube;
  s->assert_unit = unit;
}

extern "C" void kiln_rt_fault(void* state, uint32_t site, uint32_t index, uint32_t bound,
                              uint32_t cube, uint32_t unit) {
  auto* s = static_cast<kiln::cpu::LaunchState*>(state);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->fault && (s->fault_cube < cube || (s->fault_cube == cube && s->fault_unit <= unit))) return;
  s->fault = true;
  s->fault_site = site;
  s->fault_index = index;
  s->fault_bound = bound;
  s->fault_cube = cube;
  s->fault_unit = unit;
}
