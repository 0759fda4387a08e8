// KernelInfo <-> JSON, for the disk cache (the object code's companion).
#include <nlohmann/json.hpp>

#include "compiler/cpu/backend.h"

namespace kiln::cpu {

namespace {

using nlohmann::json;

json type_json(const ir::Type& t) {
  return json{{"kind", static_cast<int>(t.kind)}, {"elem", static_cast<int>(t.elem)}, {"lanes", t.lanes},
              {"rank", t.rank}, {"ro", t.read_only}, {"count", t.count}};
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

std::string info_to_json(const KernelInfo& info) {
  json j;
  j["name"] = info.name;
  j["symbol"] = info.symbol;
  j["cube_dim"] = info.cube_dim;
  j["shared_bytes"] = info.shared_bytes;
  j["checked"] = info.checked;
  j["slot_count"] = info.layout.slot_count;
  for (const ParamSlots& p : info.layout.params)
    j["params"].push_back(json{{"name", p.name}, {"first", p.first}, {"type", type_json(p.type)}});
  for (const PrintSite& p : info.prints) {
    json ops = json::array();
    for (const ir::Type& t : p.operands) ops.push_back(type_json(t));
    j["prints"].push_back(json{{"format", p.format}, {"where", p.where}, {"operands", ops}});
  }
  for (const AssertSite& a : info.asserts) j["asserts"].push_back(json{{"message", a.message}, {"where", a.where}});
  for (const AccessSite& a : info.accesses)
    j["accesses"].push_back(json{{"access", a.access}, {"memory", a.memory}, {"where", a.where}});
  return j.dump();
}

Result<KernelInfo> info_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    KernelInfo info;
    info.name = j.at("name").get<std::string>();
    info.symbol = j.at("symbol").get<std::string>();
    info.cube_dim = j.at("cube_dim").get<std::array<uint32_t, 3>>();
    info.shared_bytes = j.at("shared_bytes").get<uint32_t>();
    info.checked = j.at("checked").get<bool>();
    info.layout.slot_count = j.at("slot_count").get<uint32_t>();
    if (j.contains("params"))
      for (const json& p : j["params"])
        info.layout.params.push_back(ParamSlots{p.at("name").get<std::string>(), p.at("first").get<uint32_t>(),
                                                type_from(p.at("type"))});
    if (j.contains("prints"))
      for (const json& p : j["prints"]) {
        PrintSite site{p.at("format").get<std::string>(), {}, p.at("where").get<std::string>()};
        for (const json& t : p.at("operands")) site.operands.push_back(type_from(t));
        info.prints.push_back(std::move(site));
      }
    if (j.contains("asserts"))
      for (const json& a : j["asserts"])
        info.asserts.push_back(AssertSite{a.at("message").get<std::string>(), a.at("where").get<std::string>()});
    if (j.contains("accesses"))
      for (const json& a : j["accesses"])
        info.accesses.push_back(AccessSite{a.at("access").get<std::string>(), a.at("memory").get<std::string>(),
                                           a.at("where").get<std::string>()});
    return info;
  } catch (const std::exception& e) {
    return Error(ErrorKind::Io, std::string("malformed kernel description: ") + e.what());
  }
}

}  // namespace kiln::cpu
