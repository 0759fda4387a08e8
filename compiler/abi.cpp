// The shared kernel ABI: argument layout, KernelInfo as JSON, formatting of prints.
#include "compiler/abi.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ir/float16.h"

namespace kiln::abi {

uint32_t slot::count(const ir::Type& t) {
  if (t.kind == ir::TypeKind::Tensor) return slot::stride(t.rank, t.rank);
  if (t.kind == ir::TypeKind::Array) return slot::kLen + 1;
  return 1;  // a scalar's bits
}

ArgLayout arg_layout(const ir::Kernel& k) {
  ArgLayout l;
  for (const ir::Param& p : k.params) {
    const ir::Type& t = k.type_of(p.value);
    l.params.push_back(ParamSlots{p.name, l.slot_count, t});
    l.slot_count += slot::count(t);
  }
  return l;
}

namespace {

std::string format_scalar(ir::ElemType e, uint64_t bits) {
  using ir::ElemType;
  switch (e) {
    case ElemType::Bool:
      return bits ? "true" : "false";
    case ElemType::I8:
      return fmt::format("{}", static_cast<int8_t>(bits));
    case ElemType::I16:
      return fmt::format("{}", static_cast<int16_t>(bits));
    case ElemType::I32:
      return fmt::format("{}", static_cast<int32_t>(bits));
    case ElemType::I64:
      return fmt::format("{}", static_cast<int64_t>(bits));
    case ElemType::U8:
    case ElemType::U16:
    case ElemType::U32:
    case ElemType::U64:
      return fmt::format("{}", bits);
    case ElemType::F16:
      return fmt::format("{}", f16_value(static_cast<uint16_t>(bits)));
    case ElemType::BF16:
      return fmt::format("{}", bf16_value(static_cast<uint16_t>(bits)));
    case ElemType::F8E4M3:
      return fmt::format("{}", e4m3_value(static_cast<uint8_t>(bits)));
    case ElemType::F8E5M2:
      return fmt::format("{}", e5m2_value(static_cast<uint8_t>(bits)));
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

// ---- KernelInfo <-> JSON (the disk cache stores it beside the code) ----

namespace {

using nlohmann::json;

json type_json(const ir::Type& t) {
  return json{{"kind", static_cast<int>(t.kind)},
              {"elem", static_cast<int>(t.elem)},
              {"lanes", t.lanes},
              {"rank", t.rank},
              {"ro", t.read_only},
              {"count", t.count}};
}

ir::Type type_from(const json& j) {
  ir::Type t;
  t.kind = static_cast<ir::TypeKind>(j.at("kind").get<int>());
  t.elem = static_cast<ir::ElemType>(j.at("elem").get<int>());
  t.lanes = j.at("lanes").get<uint8_t>();
  t.rank = j.at("rank").get<uint8_t>();
  t.read_only = j.at("ro").get<bool>();
  t.count = j.at("count").get<uint32_t>();
  if (static_cast<int>(t.kind) > static_cast<int>(ir::TypeKind::Var) ||
      static_cast<int>(t.elem) >= ir::kNumElemTypes || !ir::valid_lanes(t.lanes))
    throw std::runtime_error("bad type");
  return t;
}

}  // namespace

std::vector<TensorMapSite> tensor_map_sites(const ir::Kernel& k) {
  std::vector<TensorMapSite> sites;
  ir::walk(k.body, [&](const ir::Op& op) {
    if (op.kind != ir::OpKind::TmaLoad && op.kind != ir::OpKind::TmaLoadMulticast &&
        op.kind != ir::OpKind::TmaStore && op.kind != ir::OpKind::TmaPrefetch)
      return;
    const ir::ValueId tensor = op.operands[ir::tma_operands(op.kind).tensor];
    for (uint32_t i = 0; i < k.params.size(); ++i)
      if (k.params[i].value == tensor) {
        TensorMapSite s{i, ir::tma_box_attr(op.attr.i), k.loc_string(op.loc)};
        if (std::find(sites.begin(), sites.end(), s) == sites.end()) sites.push_back(std::move(s));
      }
  });
  return sites;
}

std::string info_to_json(const KernelInfo& info) {
  json j;
  j["name"] = info.name;
  j["symbol"] = info.symbol;
  j["cube_dim"] = info.cube_dim;
  j["cluster_dim"] = info.cluster_dim;
  j["shared_bytes"] = info.shared_bytes;
  j["dynamic_shared_bytes"] = info.dynamic_shared_bytes;
  j["checked"] = info.checked;
  j["slot_count"] = info.layout.slot_count;
  for (const ParamSlots& p : info.layout.params)
    j["params"].push_back(json{{"name", p.name}, {"first", p.first}, {"type", type_json(p.type)}});
  for (const PrintSite& p : info.prints) {
    json ops = json::array();
    for (const ir::Type& t : p.operands) ops.push_back(type_json(t));
    j["prints"].push_back(json{{"format", p.format}, {"where", p.where}, {"operands", ops}});
  }
  for (const AssertSite& a : info.asserts)
    j["asserts"].push_back(json{{"message", a.message}, {"where", a.where}});
  for (const AccessSite& a : info.accesses)
    j["accesses"].push_back(json{{"access", a.access}, {"memory", a.memory}, {"where", a.where}});
  for (const TensorMapSite& m : info.tensor_maps)
    j["tensor_maps"].push_back(json{{"param", m.param}, {"box", m.box}, {"where", m.where}});
  return j.dump();
}

Result<KernelInfo> info_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    KernelInfo info;
    info.name = j.at("name").get<std::string>();
    info.symbol = j.at("symbol").get<std::string>();
    info.cube_dim = j.at("cube_dim").get<std::array<uint32_t, 3>>();
    info.cluster_dim = j.value("cluster_dim", std::array<uint32_t, 3>{1, 1, 1});
    for (uint32_t d : info.cluster_dim)
      if (d == 0 || d > ir::kMaxCubesPerCluster)
        return Error(ErrorKind::Io,
                     "malformed kernel description: a cluster dimension of 0 or "
                     "more than 8");
    info.shared_bytes = j.at("shared_bytes").get<uint32_t>();
    info.dynamic_shared_bytes = j.value("dynamic_shared_bytes", uint32_t{0});
    info.checked = j.at("checked").get<bool>();
    info.layout.slot_count = j.at("slot_count").get<uint32_t>();
    if (j.contains("params"))
      for (const json& p : j["params"])
        info.layout.params.push_back(ParamSlots{p.at("name").get<std::string>(),
                                                p.at("first").get<uint32_t>(),
                                                type_from(p.at("type"))});
    if (j.contains("prints"))
      for (const json& p : j["prints"]) {
        PrintSite site{p.at("format").get<std::string>(), {}, p.at("where").get<std::string>()};
        for (const json& t : p.at("operands")) site.operands.push_back(type_from(t));
        info.prints.push_back(std::move(site));
      }
    if (j.contains("asserts"))
      for (const json& a : j["asserts"])
        info.asserts.push_back(
            AssertSite{a.at("message").get<std::string>(), a.at("where").get<std::string>()});
    if (j.contains("accesses"))
      for (const json& a : j["accesses"])
        info.accesses.push_back(AccessSite{a.at("access").get<std::string>(),
                                           a.at("memory").get<std::string>(),
                                           a.at("where").get<std::string>()});
    if (j.contains("tensor_maps"))
      for (const json& m : j["tensor_maps"]) {
        TensorMapSite site{m.at("param").get<uint32_t>(), m.at("box").get<uint64_t>(),
                           m.at("where").get<std::string>()};
        // A damaged description must not send the launch to a parameter that is no tensor.
        if (site.param >= info.layout.params.size() ||
            info.layout.params[site.param].type.kind != ir::TypeKind::Tensor ||
            !ir::tma_box_error(
                 ir::tma_box(site.box),
                 static_cast<uint32_t>(ir::elem_bytes(info.layout.params[site.param].type.elem)))
                 .empty() ||
            ir::tma_box(site.box).rank != info.layout.params[site.param].type.rank)
          return Error(ErrorKind::Io,
                       "malformed kernel description: a tensor map names no "
                       "tensor parameter of its rank");
        info.tensor_maps.push_back(std::move(site));
      }
    return info;
  } catch (const std::exception& e) {
    return Error(ErrorKind::Io, std::string("malformed kernel description: ") + e.what());
  }
}

}  // namespace kiln::abi
