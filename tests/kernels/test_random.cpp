// kiln::lib's random numbers: Philox 4x32-10 against the known-answer vectors of its authors'
// Random123 library, on the host, the CPU and the emulator; uniform and normal tensors that are
// bit for bit the same on the CPU and the emulator and equal to (uniform) or within 1e-5 of
// (normal) the host's reference; their statistics; streams by offset; and the host API's errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "kernels/kernels.h"
#include "kernels/lib/philox.h"
#include "kernels/lib/random.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

// The four words of Philox 4x32-10 for one counter and key, computed by the DSL library.
void philox_kat(Tensor<u32> out, u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
  if_(unit_pos() == 0u, [&] {
    auto r = kiln::lib::philox4x32(c0, c1, c2, c3, k0, k1);
    for (uint32_t j = 0; j < 4; ++j) out[j] = r[j];
  });
}
KILN_KERNEL(philox_kat, "out, c0, c1, c2, c3, k0, k1").cube_dim(32);

namespace kiln {
namespace {

using Catch::Contains;

struct Kat {
  std::array<uint32_t, 4> counter;
  uint32_t k0, k1;
  std::array<uint32_t, 4> want;
};
// Random123's kat_vectors for philox4x32_10.
const Kat kKats[] = {
    {{0, 0, 0, 0}, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     0xffffffffu,
     0xffffffffu,
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     0xa4093822u,
     0x299f31d0u,
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

// The raw bits of a tensor, 2 or 4 bytes per element.
std::vector<uint32_t> bits_of(const Tensor& t) {
  const size_t size = ir::elem_bytes(t.dtype());
  std::vector<uint8_t> raw(static_cast<size_t>(t.numel()) * size);
  REQUIRE(t.download(std::span<uint8_t>(raw)).ok());
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) std::memcpy(&out[i], &raw[i * size], size);
  return out;
}

float as_float(uint32_t bits, ir::ElemType e) {
  if (e == ir::ElemType::F32) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return static_cast<float>(e == ir::ElemType::F16 ? f16_value(static_cast<uint16_t>(bits))
                                                   : bf16_value(static_cast<uint16_t>(bits)));
}

TEST_CASE("Philox 4x32-10 gives Random123's known answers on the host, the CPU and the emulator",
          "[random]") {
  for (const Kat& kat : kKats)
    CHECK(lib::host::philox4x32(kat.counter, kat.k0, kat.k1) == kat.want);
  (void)kernels::builtin_names();
  for (Runtime& rt : test::open_devices({"cpu", "cuda-emu"})) {
    INFO("on " << rt.device().name);
    auto k = rt.kernel("philox_kat");
    REQUIRE(k.ok());
    for (const Kat& kat : kKats) {
      auto out = rt.empty(ir::ElemType::U32, {4});
      REQUIRE(out.ok());
      KILN_REQUIRE_OK(rt.launch(*k, 1, 32, *out, kat.counter[0], kat.counter[1], kat.counter[2],
                                kat.counter[3], kat.k0, kat.k1));
      KILN_REQUIRE_OK(rt.sync());
      std::array<uint32_t, 4> got{};
      KILN_REQUIRE_OK(out->download(std::span<uint32_t>(got)));
      CHECK(got == kat.want);
    }
  }
}

TEST_CASE("uniform and normal: the same bits on every device, the host's values, their moments",
          "[random]") {
  (void)kernels::builtin_names();
  auto devs = test::open_devices({"cpu", "cuda-emu"});
  REQUIRE(!devs.empty());
  const int64_t n = (1 << 18) + 3;  // not a whole number of blocks
  for (ir::ElemType e : {ir::ElemType::F32, ir::ElemType::F16, ir::ElemType::BF16})
    for (bool is_normal : {false, true}) {
      INFO(ir::elem_name(e) << (is_normal ? " normal" : " uniform"));
      const lib::RandomOptions o{0x0123456789abcdefull, 7};
      std::vector<std::vector<uint32_t>> per_device;
      for (Runtime& rt : devs) {
        auto t = rt.empty(e, {n});
        REQUIRE(t.ok());
        KILN_REQUIRE_OK(is_normal ? lib::normal(rt, *t, o, 1.5, 2.0)
                                  : lib::uniform(rt, *t, o, -3.0, 2.0));
        KILN_REQUIRE_OK(rt.sync());
        per_device.push_back(bits_of(*t));
      }
      for (size_t d = 1; d < per_device.size(); ++d) REQUIRE(per_device[d] == per_device[0]);
      // The host's values: the same float for uniform, within 1e-5 (and the type's rounding)
      // for normal; and the sample's moments.
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        const auto w = lib::host::philox4x32(
            {static_cast<uint32_t>(i / 4), 0u, static_cast<uint32_t>(o.offset), 0u},
            static_cast<uint32_t>(o.seed), static_cast<uint32_t>(o.seed >> 32));
        const float got = as_float(per_device[0][static_cast<size_t>(i)], e);
        double want;
        if (is_normal) {
          const size_t pair = static_cast<size_t>(i % 4) / 2;
          const auto [z0, z1] = lib::host::box_muller(w[2 * pair], w[2 * pair + 1]);
          want = 1.5 + 2.0 * (i % 2 ? z1 : z0);
        } else {
          want = std::fma(lib::host::uniform01(w[static_cast<size_t>(i % 4)]), 5.0f, -3.0f);
          REQUIRE(got >= -3.0f);
          REQUIRE(got <= 2.0f);
        }
        const double tol = e == ir::ElemType::F32   ? 1e-5 * (1 + std::abs(want))
                           : e == ir::ElemType::F16 ? 1e-3 * (1 + std::abs(want))
                                                    : 8e-3 * (1 + std::abs(want));
        INFO("element " << i);
        if (!is_normal && e == ir::ElemType::F32)
          REQUIRE(got == static_cast<float>(want));
        else
          REQUIRE(std::abs(got - want) <= tol);
        sum += got;
        sq += static_cast<double>(got) * got;
      }
      const double mean = sum / static_cast<double>(n),
                   var = sq / static_cast<double>(n) - mean * mean;
      // N(1.5, 4), U(-3, 2): mean -0.5, variance 25 / 12.
      CHECK(std::abs(mean - (is_normal ? 1.5 : -0.5)) < 0.02);
      CHECK(std::abs(var - (is_normal ? 4.0 : 25.0 / 12.0)) < 0.03);
    }
}

TEST_CASE("random streams: the same seed and offset repeat, another offset or seed does not",
          "[random]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  auto draw = [&](uint64_t seed, uint64_t offset) {
    auto t = rt->empty(ir::ElemType::F32, {1000});
    REQUIRE(t.ok());
    KILN_REQUIRE_OK(lib::uniform(*rt, *t, {seed, offset}));
    KILN_REQUIRE_OK(rt->sync());
    return bits_of(*t);
  };
  const auto a = draw(1, 0);
  CHECK(draw(1, 0) == a);
  const auto b = draw(1, 1), c = draw(2, 0);
  size_t same_b = 0, same_c = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_b += a[i] == b[i];
    same_c += a[i] == c[i];
  }
  CHECK(same_b < 5);
  CHECK(same_c < 5);
}

TEST_CASE("the random host API refuses what it cannot fill, naming it", "[random]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  auto ints = rt->empty(ir::ElemType::I32, {16});
  REQUIRE(ints.ok());
  Status st = lib::uniform(*rt, *ints, {});
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("kiln::lib::uniform: the tensor 'out' holds i32"));
  auto m = rt->empty(ir::ElemType::F32, {8, 8});
  REQUIRE(m.ok());
  auto tr = m->permute({1, 0});
  REQUIRE(tr.ok());
  st = lib::normal(*rt, *tr, {});
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("not contiguous"));
  st = lib::uniform(*rt, *m, {}, 2.0, 1.0);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("low (2) is above high (1)"));
  st = lib::normal(*rt, *m, {}, 0.0, -1.0);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("standard deviation -1 is negative"));
  // NaN, infinities, and a range too wide for f32, named.
  st = lib::uniform(*rt, *m, {}, 0.0, std::nan(""));
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("high - low nan") && Contains("must be finite as f32"));
  st = lib::uniform(*rt, *m, {}, -3e38, 3e38);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("high - low 6e+38"));
  st = lib::normal(*rt, *m, {}, 0.0, std::nan(""));
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("kiln::lib::normal: mean 0 and stddev nan"));
  st = lib::normal(*rt, *m, {}, -INFINITY, 1.0);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("mean -inf"));
  auto empty = rt->empty(ir::ElemType::F32, {0});
  REQUIRE(empty.ok());
  KILN_REQUIRE_OK(lib::normal(*rt, *empty, {}));
}

}  // namespace
}  // namespace kiln
