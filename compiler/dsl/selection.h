// Choosing what to specialize: the instantiation of a kernel for the element types at hand, and
// the one width every `line=max` parameter gets. The DSL's select(), the runtime's launch and
// the kernel runner all decide through these, so they cannot drift apart. Templates, so the
// launch fast path calls them without allocating.
#pragma once

#include <algorithm>
#include <optional>
#include <string>

#include "compiler/dsl/registry.h"

namespace kiln::dsl {

// The index of the first instantiation whose runtime parameters have the element types
// `dtype_of(i)` gives for parameter i (std::nullopt: any type), or nothing.
template <class DtypeOf>
std::optional<size_t> find_instantiation(const KernelDef& def, DtypeOf&& dtype_of) {
  for (size_t n = 0; n < def.instantiations.size(); ++n) {
    const auto& ps = def.instantiations[n].params;
    bool match = true;
    for (size_t i = 0; i < ps.size() && match; ++i) {
      if (!ps[i].runtime()) continue;
      const std::optional<ir::ElemType> want = dtype_of(i);
      if (want && *want != ps[i].dtype) match = false;
    }
    if (match) return n;
  }
  return std::nullopt;
}

// The error for no match: `asked` says what was asked ("x: f16, y: f32"); it lists what there is.
Error no_instantiation(const KernelDef& def, const std::string& asked);

// The width of the `line=max` parameters of `inst`: the narrowest of what each allows
// (`widest(i)` for parameter i), so that all of them read lines of one width; 16 when none is
// line=max (or none is known: `widest` returns 0 to skip a parameter).
template <class Widest>
int line_max_width(const Instantiation& inst, Widest&& widest) {
  int w = 16;
  for (size_t i = 0; i < inst.params.size(); ++i) {
    const ParamInfo& p = inst.params[i];
    if (p.kind == ParamKind::Scalar || !p.runtime() || p.default_line != 0) continue;
    if (const int allowed = widest(i); allowed > 0) w = std::min(w, allowed);
  }
  return w;
}

}  // namespace kiln::dsl
