// The kernel ABI: argument slots from one place (compiler/abi.h slot::), and the KernelInfo JSON
// the disk cache keeps beside each image, which must give back exactly what was written.
#include <catch2/catch.hpp>

#include "compiler/abi.h"
#include "ir/parser.h"

using namespace kiln;

TEST_CASE("argument slots: header, tensors, arrays, scalars", "[abi]") {
  auto k = ir::parse(
      "kernel @k(%t: tensor<f32x4, 3>, %a: array<u32>, %s: f64, %u: tensor<i8, 1>) "
      "cube_dim(1, 1, 1) {\n}\n",
      "t.kir");
  REQUIRE(k.ok());
  const abi::ArgLayout l = abi::arg_layout(*k);
  REQUIRE(l.params.size() == 4);
  CHECK(l.params[0].first == abi::kHeaderSlots);
  CHECK(abi::slot::count(l.params[0].type) == 3 + 2 * 3);
  CHECK(l.params[1].first == l.params[0].first + 9);
  CHECK(abi::slot::count(l.params[1].type) == 2);
  CHECK(l.params[2].first == l.params[1].first + 2);
  CHECK(abi::slot::count(l.params[2].type) == 1);
  CHECK(l.params[3].first == l.params[2].first + 1);
  CHECK(l.slot_count == l.params[3].first + 3 + 2);
  // Within a tensor's slots: data, length, extent, then the shape, then the strides.
  CHECK(abi::slot::kData == 0);
  CHECK(abi::slot::kLen == 1);
  CHECK(abi::slot::kExtent == 2);
  CHECK(abi::slot::shape(0) == 3);
  CHECK(abi::slot::stride(3, 0) == 6);
  CHECK(abi::slot::stride(3, 2) == 8);
}

TEST_CASE("KernelInfo survives its JSON form", "[abi]") {
  auto k = ir::parse("kernel @k(%t: tensor<f32x4, 2>, %s: u32) cube_dim(64, 2, 1) {\n}\n", "t.kir");
  REQUIRE(k.ok());
  abi::KernelInfo info;
  info.name = "k";
  info.symbol = "kiln_k_0123";
  info.cube_dim = {64, 2, 1};
  info.shared_bytes = 70000;
  info.dynamic_shared_bytes = 70000;
  info.layout = abi::arg_layout(*k);
  info.prints = {{"x = {} \"quoted\"\n", {ir::Type::value(ir::ElemType::F32, 4)}, "a.cpp:3"}};
  info.asserts = {{"n must be positive", "a.cpp:4"}};
  info.accesses = {{"load", "tensor 't'", "a.cpp:5"}, {"atomic.add", "shared array %3", ""}};
  info.checked = true;
  const std::string json = abi::info_to_json(info);
  auto back = abi::info_from_json(json);
  REQUIRE(back.ok());
  CHECK(abi::info_to_json(*back) == json);
  CHECK(back->symbol == info.symbol);
  CHECK(back->cube_dim == info.cube_dim);
  CHECK(back->dynamic_shared_bytes == 70000);
  CHECK(back->layout.slot_count == info.layout.slot_count);
  REQUIRE(back->layout.params.size() == 2);
  CHECK(back->layout.params[0].type == info.layout.params[0].type);
  REQUIRE(back->prints.size() == 1);
  CHECK(back->prints[0].format == info.prints[0].format);
  CHECK(back->prints[0].operands == info.prints[0].operands);
  REQUIRE(back->accesses.size() == 2);
  CHECK(back->accesses[1].access == "atomic.add");
  CHECK(back->checked);
  // Damaged descriptions are errors, never a half-filled KernelInfo.
  for (const char* bad : {"", "{", "[]", R"({"name": 3})", "null"}) {
    INFO(bad);
    CHECK_FALSE(abi::info_from_json(bad).ok());
  }
}
