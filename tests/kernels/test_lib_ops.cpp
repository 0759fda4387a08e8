// kiln::lib's pooling, softmax and norms, and reductions against double references: through
// their `kiln run` recipes (types, ranks, layouts, options, odd sizes) on the CPU and the
// emulator; NaN and infinity as PyTorch treats them; strided views in and out; empty tensors;
// and the errors of the host API.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/kernels.h"
#include "kernels/lib/elementwise.h"
#include "kernels/lib/norm.h"
#include "kernels/lib/pool.h"
#include "kernels/lib/reduce.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  using Shapes = std::map<std::string, std::vector<int64_t>>;
  using Values = std::map<std::string, std::string>;
  Case(const char* o, Shapes sh, Values st = {}, Values dt = {}, bool emu = true)
      : op(o), shapes(std::move(sh)), set(std::move(st)), dtypes(std::move(dt)), emulator(emu) {}
  const char* op;
  Shapes shapes;
  Values set, dtypes;
  bool emulator;  // small enough for cuda-emu too
};

void run_cases(const std::vector<Case>& cases) {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::open_devices({"cpu", "cuda-emu"})) {
    const bool emu = rt.device().emulated;
    for (const Case& c : cases) {
      if (emu && !c.emulator) continue;
      std::string what = c.op;
      for (const auto& [k, v] : c.shapes) what += " " + k + "=" + std::to_string(v.size()) + "d";
      for (const auto& [k, v] : c.set) what += " " + k + "=" + v;
      for (const auto& [k, v] : c.dtypes) what += " " + k + ":" + v;
      INFO(what << " on " << rt.device().name);
      kernels::RunConfig config;
      config.shapes = c.shapes;
      config.set = c.set;
      config.dtypes = c.dtypes;
      config.repeat = 0;
      config.seed = 20261203;
      auto r = kernels::run(rt, c.op, config);
      KILN_REQUIRE_OK(r);
      REQUIRE(r->has_reference);
      for (const auto& check : r->checks) {
        INFO(check.name << ": first bad " << check.first_bad << ": got " << check.got << ", want "
                        << check.want);
        CHECK(check.mismatches == 0);
      }
    }
  }
}

TEST_CASE("kiln::lib pooling matches PyTorch's semantics in double", "[lib][pool]") {
  run_cases({
      {"max_pool2d", {{"in", {2, 3, 17, 29}}}, {}, {}},
      {"max_pool2d", {{"in", {2, 3, 17, 29}}}, {{"channels_last", "1"}}, {}},
      {"max_pool2d", {{"in", {3, 19, 21}}}, {{"kernel", "5"}, {"stride", "1"}, {"padding", "2"}}},
      {"max_pool2d",
       {{"in", {1, 2, 23, 31}}},
       {{"kernel", "3"}, {"dilation", "2"}, {"ceil_mode", "1"}, {"stride", "2"}},
       {{"in", "bf16"}}},
      {"max_pool2d",
       {{"in", {2, 5, 9, 40}}},
       {{"kernel", "2"},
        {"kernel_w", "4"},
        {"stride", "1"},
        {"stride_w", "3"},
        {"padding_w", "2"},
        {"padding", "0"},
        {"channels_last", "1"}},
       {{"in", "f16"}}},
      // A window taller than a band of rows (the per-tap kernel in NCHW).
      {"max_pool2d", {{"in", {1, 2, 90, 20}}}, {{"kernel", "40"}, {"padding", "3"}}},
      {"max_pool2d", {{"in", {1, 1, 1, 1}}}, {{"kernel", "1"}, {"padding", "0"}}},
      {"max_pool2d", {{"in", {0, 3, 8, 8}}}, {}},
      {"avg_pool2d", {{"in", {2, 3, 17, 29}}}, {{"ceil_mode", "1"}}},
      {"avg_pool2d",
       {{"in", {2, 3, 17, 29}}},
       {{"count_include_pad", "0"}, {"channels_last", "1"}},
       {{"in", "f16"}}},
      {"avg_pool2d", {{"in", {4, 11, 13}}}, {{"divisor", "7"}, {"kernel", "4"}, {"padding", "2"}}},
      // Values without indices (the kernels' unrolled form on the CPU).
      {"max_pool2d", {{"in", {2, 3, 37, 29}}}, {{"with_indices", "0"}}},
      {"max_pool2d",
       {{"in", {2, 3, 37, 29}}},
       {{"with_indices", "0"}, {"kernel", "5"}, {"stride", "1"}, {"padding", "2"}},
       {{"in", "bf16"}}},
      {"max_pool2d",
       {{"in", {2, 3, 37, 29}}},
       {{"with_indices", "0"}, {"kernel", "3"}, {"dilation", "2"}, {"ceil_mode", "1"}}},
      {"max_pool2d", {{"in", {2, 3, 37, 29}}}, {{"with_indices", "0"}, {"kernel", "9"}}},
      {"avg_pool2d",
       {{"in", {2, 3, 37, 29}}},
       {{"kernel", "5"}, {"stride", "1"}, {"padding", "2"}}},
      // Large enough for several bands and cubes (CPU only: the emulator is slow).
      {"max_pool2d", {{"in", {2, 4, 130, 600}}}, {}, {}, false},
      {"max_pool2d",
       {{"in", {2, 4, 130, 600}}},
       {{"kernel", "5"}, {"stride", "1"}, {"padding", "2"}},
       {},
       false},
      {"max_pool2d",
       {{"in", {2, 4, 130, 600}}},
       {{"kernel", "2"}, {"stride", "2"}, {"padding", "0"}, {"with_indices", "0"}},
       {},
       false},
  });
}

TEST_CASE("kiln::lib softmax and norms match a double reference", "[lib][norm]") {
  run_cases({
      {"softmax", {{"x", {37, 129}}}, {}, {}},
      {"softmax", {{"x", {2, 3, 4, 5, 6}}}, {}, {{"x", "f16"}}},
      {"softmax", {{"x", {3, 1}}}, {}, {{"x", "bf16"}}},
      {"log_softmax", {{"x", {11, 257}}}, {}, {}},
      {"log_softmax", {{"x", {1000}}}, {}, {{"x", "bf16"}}},
      {"layernorm", {{"x", {9, 333}}}, {}, {}},
      {"layernorm", {{"x", {2, 5, 64}}}, {{"use_bias", "0"}}, {{"x", "f16"}}},
      {"layernorm", {{"x", {4, 17}}}, {{"use_weight", "0"}, {"eps", "0.1"}}, {{"x", "bf16"}}},
      {"rmsnorm", {{"x", {9, 333}}}, {}, {}},
      {"rmsnorm", {{"x", {3, 2, 50}}}, {{"use_weight", "0"}}, {{"x", "f16"}}},
      {"softmax", {{"x", {0, 10}}}, {}, {}},
      {"softmax", {{"x", {64, 4096}}}, {}, {}, false},
      {"layernorm", {{"x", {64, 4096}}}, {}, {}, false},
  });
}

TEST_CASE("kiln::lib::reduce matches a double reference", "[lib][reduce]") {
  std::vector<Case> cases;
  for (const char* op : {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
                         "reduce_argmax", "reduce_argmin", "reduce_var"}) {
    cases.push_back({op, {{"x", {6, 50, 7}}}, {{"axis", "-1"}}, {}});
    cases.push_back({op, {{"x", {6, 50, 7}}}, {{"axis", "1"}, {"keepdim", "1"}}, {}});
    cases.push_back({op, {{"x", {6, 50, 7}}}, {{"axis", "0"}}, {{"x", "f16"}}});
    cases.push_back({op, {{"x", {300}}}, {{"all", "1"}}, {{"x", "bf16"}}});
    cases.push_back({op, {{"x", {2, 3, 4, 5, 6}}}, {{"axis", "2"}}, {}});
  }
  for (const char* op : {"reduce_sum", "reduce_max", "reduce_argmin", "reduce_prod"})
    cases.push_back({op, {{"x", {5, 9, 33}}}, {{"axis", "1"}}, {{"x", "i32"}}});
  for (const char* op : {"reduce_sum", "reduce_mean", "reduce_min", "reduce_var"}) {
    cases.push_back({op, {{"x", {4, 6, 5, 3}}}, {{"axis", "0"}, {"axis2", "2"}}, {}});
    cases.push_back({op, {{"x", {4, 6, 5}}}, {{"all", "1"}, {"keepdim", "1"}}, {}});
  }
  cases.push_back({"reduce_var", {{"x", {8, 9}}}, {{"correction", "0"}}, {}});
  cases.push_back({"reduce_sum", {{"x", {4, 0, 3}}}, {{"axis", "1"}}, {}});
  cases.push_back({"reduce_mean", {{"x", {3, 4}}}, {{"axis", "0"}}, {}});
  cases.push_back({"reduce_sum", {{"x", {8, 300, 200}}}, {{"axis", "1"}}, {}, false});
  // Long axes with few outputs: two passes (chunks of the axis, then their partials).
  cases.push_back({"reduce_sum", {{"x", {2, 1 << 16}}}, {{"axis", "1"}}, {}, false});
  cases.push_back({"reduce_mean", {{"x", {3, 1 << 17}}}, {{"axis", "1"}}, {{"x", "f16"}}, false});
  cases.push_back({"reduce_max", {{"x", {1 << 17}}}, {{"all", "1"}}, {{"x", "bf16"}}, false});
  cases.push_back({"reduce_prod", {{"x", {2, 1 << 16}}}, {{"axis", "1"}}, {{"x", "i32"}}, false});
  cases.push_back({"reduce_min", {{"x", {1 << 16, 2}}}, {{"axis", "0"}}, {}, false});
  cases.push_back({"reduce_argmax", {{"x", {40, 3000}}}, {{"axis", "0"}}, {}, false});
  run_cases(cases);
}

TEST_CASE("kiln::lib elementwise chains and copies match a double reference", "[lib][map]") {
  std::vector<Case> cases;
  for (int c = 0; c < 6; ++c) {
    const std::string chain = std::to_string(c);
    cases.push_back(
        {"elementwise", {{"x", {37, 65}}, {"y", {37, 65}}, {"z", {37, 65}}}, {{"chain", chain}}});
    // Broadcast: y along rows, z along columns, x with a leading dimension of 1.
    cases.push_back({"elementwise",
                     {{"x", {1, 37, 65}}, {"y", {65}}, {"z", {4, 37, 1}}},
                     {{"chain", chain}},
                     {{"x", c % 2 ? "f16" : "bf16"}}});
  }
  cases.push_back(
      {"elementwise", {{"x", {3, 1, 5, 1, 7}}, {"y", {2, 1, 6, 1}}, {"z", {1}}}, {{"chain", "2"}}});
  cases.push_back({"elementwise", {{"x", {0, 5}}, {"y", {5}}, {"z", {1}}}, {{"chain", "1"}}});
  cases.push_back({"elementwise",
                   {{"x", {50, 40}}, {"y", {50, 40}}, {"z", {50, 40}}},
                   {{"chain", "0"}},
                   {{"x", "f32"}, {"out", "f16"}}});
  cases.push_back({"copy", {{"src", {3, 57, 29}}}, {}});
  cases.push_back({"copy", {{"src", {2, 3, 4, 5, 6}}}, {{"transpose", "0"}}, {{"src", "f64"}}});
  cases.push_back({"copy", {{"src", {33, 17}}}, {}, {{"src", "u8"}}});
  cases.push_back({"copy", {{"src", {33, 17}}}, {}, {{"src", "f16"}, {"dst", "f32"}}});
  cases.push_back({"copy", {{"src", {33, 17}}}, {}, {{"src", "f32"}, {"dst", "bf16"}}});
  // Casts: saturation, wrapping, NaN-free rounding, bool, 8-bit floats.
  for (const auto& [from, to] : std::vector<std::pair<const char*, const char*>>{{"f32", "i32"},
                                                                                 {"i32", "f32"},
                                                                                 {"f32", "u8"},
                                                                                 {"i32", "i8"},
                                                                                 {"i64", "f16"},
                                                                                 {"f64", "f8e4m3"},
                                                                                 {"u16", "i64"},
                                                                                 {"f32", "bool"},
                                                                                 {"bool", "f32"},
                                                                                 {"f16", "u32"}})
    cases.push_back({"copy", {{"src", {5, 33, 17}}}, {}, {{"src", from}, {"dst", to}}});
  cases.push_back({"copy", {{"src", {1024, 999}}}, {}, {}, false});
  run_cases(cases);
}

// A row-major f32 tensor on `rt` holding `v`.
Tensor make(Runtime& rt, const std::vector<float>& v, std::vector<int64_t> shape) {
  return test::tensor_from(rt, ir::ElemType::F32, v, shape);
}

template <class T>
std::vector<T> read(Runtime& rt, const Tensor& t) {
  KILN_REQUIRE_OK(rt.sync());
  std::vector<T> out(static_cast<size_t>(t.numel()));
  KILN_REQUIRE_OK(t.download(std::span<T>(out)));
  return out;
}

TEST_CASE("kiln::lib treats NaN and infinity as PyTorch does", "[lib]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::open_devices({"cpu", "cuda-emu"})) {
    INFO(rt.device().name);
    // Max pooling: a NaN wins its windows, and the index is that of the last NaN in row-major
    // order (PyTorch's CPU rule: a value replaces the maximum when larger or NaN); -inf is an
    // ordinary value.
    const std::vector<float> img = {1, kNaN, 3,    4,  //
                                    5, 6,    kNaN, 8,  //
                                    9, 10,   11,   -kInf};
    Tensor in = make(rt, img, {1, 1, 3, 4});
    lib::Pool2dOptions o{.kernel = {2, 2}, .stride = {1, 1}};
    auto out = rt.empty(ir::ElemType::F32, {1, 1, 2, 3});
    auto idx = rt.empty(ir::ElemType::I64, {1, 1, 2, 3});
    REQUIRE(out.ok());
    REQUIRE(idx.ok());
    KILN_REQUIRE_OK(lib::max_pool2d(rt, in, *out, o, &*idx));
    const auto v = read<float>(rt, *out);
    const auto i = read<int64_t>(rt, *idx);
    CHECK(std::isnan(v[0]));
    CHECK(i[0] == 1);
    CHECK(std::isnan(v[1]));
    CHECK(i[1] == 6);  // the window {NaN, 3, 6, NaN}: the last NaN
    CHECK(std::isnan(v[2]));
    CHECK(i[2] == 6);
    CHECK(v[3] == 10);
    CHECK(i[3] == 9);
    CHECK(std::isnan(v[4]));
    CHECK(i[4] == 6);
    CHECK(std::isnan(v[5]));  // {NaN, 8, 11, -inf}
    CHECK(i[5] == 6);
    // Without indices the values are the same.
    KILN_REQUIRE_OK(lib::max_pool2d(rt, in, *out, o));
    const auto v2 = read<float>(rt, *out);
    for (size_t k = 0; k < v.size(); ++k)
      CHECK((v2[k] == v[k] || (std::isnan(v2[k]) && std::isnan(v[k]))));

    // Softmax and layer norm: a NaN or +inf spoils its row; other rows are unaffected.
    Tensor x = make(rt, {1, 2, kNaN, 4, /**/ 1, kInf, 0, 0, /**/ 0, 0, 0, 0}, {3, 4});
    auto y = rt.empty(ir::ElemType::F32, {3, 4});
    REQUIRE(y.ok());
    KILN_REQUIRE_OK(lib::softmax(rt, x, *y));
    auto s = read<float>(rt, *y);
    for (int k = 0; k < 8; ++k) CHECK(std::isnan(s[static_cast<size_t>(k)]));
    for (int k = 8; k < 12; ++k) CHECK(s[static_cast<size_t>(k)] == Approx(0.25));
    KILN_REQUIRE_OK(lib::layer_norm(rt, x, *y));
    s = read<float>(rt, *y);
    for (int k = 0; k < 8; ++k) CHECK(std::isnan(s[static_cast<size_t>(k)]));
    for (int k = 8; k < 12; ++k) CHECK(s[static_cast<size_t>(k)] == 0);

    // Reductions: NaN propagates through max and sum; argmax and argmin pick the first NaN.
    Tensor r = make(rt, {3, kNaN, 7, kNaN, /**/ -kInf, 2, kInf, 2}, {2, 4});
    auto m = rt.empty(ir::ElemType::F32, {2});
    auto a = rt.empty(ir::ElemType::I64, {2});
    REQUIRE(m.ok());
    REQUIRE(a.ok());
    KILN_REQUIRE_OK(lib::reduce(rt, lib::ReduceOp::Max, r, *m, {.axes = {1}}));
    auto mv = read<float>(rt, *m);
    CHECK(std::isnan(mv[0]));
    CHECK(mv[1] == kInf);
    KILN_REQUIRE_OK(lib::reduce(rt, lib::ReduceOp::Min, r, *m, {.axes = {1}}));
    mv = read<float>(rt, *m);
    CHECK(std::isnan(mv[0]));
    CHECK(mv[1] == -kInf);
    KILN_REQUIRE_OK(lib::reduce(rt, lib::ReduceOp::Sum, r, *m, {.axes = {1}}));
    mv = read<float>(rt, *m);
    CHECK(std::isnan(mv[0]));
    CHECK(std::isnan(mv[1]));  // inf - inf
    KILN_REQUIRE_OK(lib::reduce(rt, lib::ReduceOp::ArgMax, r, *a, {.axes = {1}}));
    auto av = read<int64_t>(rt, *a);
    CHECK(av[0] == 1);
    CHECK(av[1] == 2);
    KILN_REQUIRE_OK(lib::reduce(rt, lib::ReduceOp::ArgMin, r, *a, {.axes = {1}}));
    av = read<int64_t>(rt, *a);
    CHECK(av[0] == 1);
    CHECK(av[1] == 0);
    // Elementwise: NaN passes through ReLU, maximum and minimum as in PyTorch.
    Tensor e = make(rt, {kNaN, -1, 2, -kInf}, {4});
    Tensor f = make(rt, {0, kNaN, 1, 0}, {4});
    auto g = rt.empty(ir::ElemType::F32, {4});
    REQUIRE(g.ok());
    KILN_REQUIRE_OK(lib::unary(rt, lib::Op::Relu, e, *g));
    auto gv = read<float>(rt, *g);
    CHECK(std::isnan(gv[0]));
    CHECK(gv[1] == 0);
    CHECK(gv[2] == 2);
    CHECK(gv[3] == 0);
    KILN_REQUIRE_OK(lib::binary(rt, lib::Op::Max, e, f, *g));
    gv = read<float>(rt, *g);
    CHECK(std::isnan(gv[0]));
    CHECK(std::isnan(gv[1]));
    CHECK(gv[2] == 2);
    CHECK(gv[3] == 0);
    // Ties: the first index.
    KILN_REQUIRE_OK(lib::reduce(rt, lib::ReduceOp::ArgMax,
                                make(rt, {1, 5, 5, 5, 2, 2, 0, 2}, {2, 4}), *a, {.axes = {1}}));
    av = read<int64_t>(rt, *a);
    CHECK(av[0] == 1);
    CHECK(av[1] == 0);
  }
}

TEST_CASE("kiln::lib reads and writes strided views", "[lib]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1, 1);
  // x: the transpose of a 40 x 30 tensor, every other column: a 15 x 40 view.
  std::vector<float> base(40 * 30);
  for (float& v : base) v = d(rng);
  Tensor t = make(*rt, base, {40, 30});
  auto xt = t.permute({1, 0});
  REQUIRE(xt.ok());
  auto x = xt->slice(0, 0, 30, 2);
  REQUIRE(x.ok());
  auto at = [&](int64_t r, int64_t c) { return base[static_cast<size_t>(c * 30 + 2 * r)]; };
  // Softmax into every third column of a NaN-filled 15 x 120 tensor.
  std::vector<float> ybuf(15 * 120, kNaN);
  Tensor yt = make(*rt, ybuf, {15, 120});
  auto y = yt.slice(1, 2, 120, 3);
  REQUIRE(y.ok());
  KILN_REQUIRE_OK(lib::softmax(*rt, *x, *y));
  const auto got = read<float>(*rt, yt);
  for (int64_t r = 0; r < 15; ++r) {
    double mx = -1e30, s = 0;
    for (int64_t c = 0; c < 40; ++c) mx = std::max<double>(mx, at(r, c));
    for (int64_t c = 0; c < 40; ++c) s += std::exp(at(r, c) - mx);
    for (int64_t c = 0; c < 120; ++c) {
      const float g = got[static_cast<size_t>(r * 120 + c)];
      INFO("y[" << r << ", " << c << "]");
      if (c % 3 != 2 || c < 2) {
        CHECK(std::isnan(g));
      } else {
        CHECK(g == Approx(std::exp(at(r, (c - 2) / 3) - mx) / s).epsilon(1e-5));
      }
    }
  }
  // In place: softmax and a chain with y the same view as x.
  std::vector<float> ip = {1, 2, 3, 4, 0, 0, 0, 0};
  Tensor tip = make(*rt, ip, {2, 4});
  KILN_REQUIRE_OK(lib::softmax(*rt, tip, tip));
  auto ipv = read<float>(*rt, tip);
  CHECK(ipv[3] ==
        Approx(std::exp(4.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(4.0))));
  CHECK(ipv[5] == Approx(0.25));
  KILN_REQUIRE_OK(lib::map(*rt, {lib::Step{lib::Op::Mul, lib::Arg::S0}}, tip, tip,
                           {.y = nullptr, .z = nullptr, .scalars = {4.0f}}));
  ipv = read<float>(*rt, tip);
  CHECK(ipv[5] == Approx(1.0));
  // A sum over the view's rows (its axis 0, stride 2 in memory) and its columns.
  auto s0 = rt->empty(ir::ElemType::F32, {40});
  auto s1 = rt->empty(ir::ElemType::F32, {15, 1});
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  KILN_REQUIRE_OK(lib::reduce(*rt, lib::ReduceOp::Sum, *x, *s0, {.axes = {0}}));
  KILN_REQUIRE_OK(lib::reduce(*rt, lib::ReduceOp::Sum, *x, *s1, {.axes = {1}, .keepdim = true}));
  const auto g0 = read<float>(*rt, *s0), g1 = read<float>(*rt, *s1);
  for (int64_t c = 0; c < 40; ++c) {
    double s = 0;
    for (int64_t r = 0; r < 15; ++r) s += at(r, c);
    CHECK(g0[static_cast<size_t>(c)] == Approx(s).margin(1e-5));
  }
  for (int64_t r = 0; r < 15; ++r) {
    double s = 0;
    for (int64_t c = 0; c < 40; ++c) s += at(r, c);
    CHECK(g1[static_cast<size_t>(r)] == Approx(s).margin(1e-5));
  }
  // Max pooling of an NHWC view (channels every other element).
  std::vector<float> img(1 * 6 * 7 * 8);
  for (float& v : img) v = d(rng);
  Tensor ti = make(*rt, img, {1, 6, 7, 8});
  auto iv = ti.slice(3, 0, 8, 2);  // [1, 6, 7, 4], NHWC
  REQUIRE(iv.ok());
  auto po = rt->empty(ir::ElemType::F32, {1, 3, 3, 4});
  REQUIRE(po.ok());
  KILN_REQUIRE_OK(lib::max_pool2d(*rt, *iv, *po, {.kernel = {2, 2}, .layout = lib::Layout::Nhwc}));
  const auto pg = read<float>(*rt, *po);
  for (int64_t oy = 0; oy < 3; ++oy)
    for (int64_t ox = 0; ox < 3; ++ox)
      for (int64_t c = 0; c < 4; ++c) {
        float m = -kInf;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx)
            m = std::max(m,
                         img[static_cast<size_t>(((2 * oy + dy) * 7 + 2 * ox + dx) * 8 + 2 * c)]);
        CHECK(pg[static_cast<size_t>((oy * 3 + ox) * 4 + c)] == m);
      }
}

TEST_CASE("kiln::lib refuses what it cannot compute, naming it", "[lib]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  auto empty = [&](ir::ElemType t, std::initializer_list<int64_t> shape) {
    auto x = rt->empty(t, shape);
    REQUIRE(x.ok());
    return *x;
  };
  const auto F32 = ir::ElemType::F32;
  Tensor in = empty(F32, {1, 2, 8, 8}), out = empty(F32, {1, 2, 4, 4});
  auto fails = [](const Status& s, const std::string& with) {
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Contains(with));
  };
  fails(lib::max_pool2d(*rt, in, out, {.kernel = {3, 3}, .padding = {2, 2}}),
        "padding height is 2; it must be 0 to half the kernel (1)");
  fails(lib::max_pool2d(*rt, in, out, {.kernel = {3, 3}}), "'out' has shape [1, 2, 4, 4]");
  fails(lib::avg_pool2d(*rt, in, out, {.dilation = {2, 2}}), "dilation must be 1");
  fails(lib::max_pool2d(*rt, in, out, {.kernel = {0, 2}}),
        "kernel height is 0; it must be 1 to 65535");
  fails(lib::max_pool2d(*rt, in, out, {.stride = {2, -1}}), "stride width is -1");
  fails(lib::max_pool2d(*rt, in, out, {.dilation = {0, 1}}), "dilation height is 0");
  fails(lib::avg_pool2d(*rt, in, out, {.divisor = -3}), "divisor is -3");
  Tensor none;
  fails(lib::max_pool2d(*rt, none, out, {}), "the tensor 'in' is empty (no buffer)");
  Tensor idx32 = empty(ir::ElemType::I32, {1, 2, 4, 4});
  fails(lib::max_pool2d(*rt, in, out, {}, &idx32), "'indices' is i32");
  fails(lib::max_pool2d(*rt, empty(ir::ElemType::I32, {1, 2, 8, 8}), out, {}),
        "pooling takes f32, f16 or bf16");
  fails(lib::max_pool2d(*rt, empty(F32, {8, 8}), out, {}), "pooling takes [N, C, H, W]");
  Tensor x = empty(F32, {4, 6}), y = empty(F32, {4, 5});
  fails(lib::softmax(*rt, x, y), "'y' is f32[4, 5]; it must have x's shape");
  Tensor w = empty(F32, {5});
  Tensor y6 = empty(F32, {4, 6});
  fails(lib::layer_norm(*rt, x, y6, {.weight = &w}), "'weight' is f32[5]; it must be [6]");
  fails(lib::layer_norm(*rt, x, y6, {.eps = -1}), "eps is -1");
  fails(lib::rms_norm(*rt, x, y6, {.bias = &w}), "takes no bias");
  Tensor y16 = empty(ir::ElemType::F16, {4, 6});
  fails(lib::softmax(*rt, x, y16), "it must hold x's type");
  Tensor s = empty(F32, {4});
  fails(lib::reduce(*rt, lib::ReduceOp::Sum, x, s, {.axes = {2}}),
        "axis 2 is out of range for a tensor of rank 2 (-2 to 1)");
  fails(lib::reduce(*rt, lib::ReduceOp::Sum, x, s, {.axes = {1, -1}}), "axis -1 is given twice");
  fails(lib::reduce(*rt, lib::ReduceOp::Sum, x, s, {.axes = {0}}), "out is f32[4]");
  fails(lib::reduce(*rt, lib::ReduceOp::ArgMax, x, s, {.axes = {1}}), "ArgMax of f32 gives i64");
  fails(lib::reduce(*rt, lib::ReduceOp::Mean, empty(ir::ElemType::I32, {4, 6}), s, {.axes = {1}}),
        "it takes floating-point tensors");
  Tensor a = empty(F32, {4, 6}), b3 = empty(F32, {3}), o = empty(F32, {4, 6});
  fails(lib::binary(*rt, lib::Op::Add, a, b3, o),
        "do not broadcast: dimension 1 is 6 in one and 3");
  fails(lib::unary(*rt, lib::Op::Add, a, o), "not a unary one");
  fails(lib::map(*rt, {lib::Step{lib::Op::Mul}}, a, o),
        "step 0: a binary operation needs an operand");
  fails(lib::map(*rt, {lib::Step{lib::Op::Mul, lib::Arg::Y}}, a, o),
        "step 0 reads y, which was not given");
  fails(lib::map(*rt, {lib::Step{lib::Op::Add, lib::Arg::S1}}, a, o,
                 {.y = nullptr, .z = nullptr, .scalars = {1}}),
        "reads scalar S1, but 1 scalars were given");
  Tensor ro = o.as_read_only();
  fails(lib::copy(*rt, a, ro), "the result tensor is read-only");
  fails(lib::copy(*rt, b3, o), "'src' is f32[3], which does not broadcast to [4, 6]");
  const std::vector<lib::Step> nine(9, lib::Step{lib::Op::Neg});
  fails(lib::map(*rt, nine, a, o), "the chain has 9 steps; at most 8");
  fails(lib::map(*rt, {lib::Step{lib::Op::Neg}}, a, o,
                 {.y = nullptr, .z = nullptr, .scalars = {1, 2, 3, 4, 5}}),
        "5 scalars given; at most 4");
  Tensor o3 = empty(F32, {2, 4, 6});
  fails(lib::copy(*rt, o3, o), "'src' is f32[2, 4, 6]; it has more dimensions than the result");
  Tensor s4 = empty(F32, {4});
  fails(lib::reduce(*rt, lib::ReduceOp::Var, x, s4, {.axes = {1}, .correction = -1}),
        "correction is -1");
  fails(lib::softmax(*rt, none, y6), "the tensor 'x' is empty (no buffer)");
  Tensor s0 = empty(F32, {4});
  fails(lib::reduce(*rt, lib::ReduceOp::Max, empty(F32, {4, 0}), s0, {.axes = {1}}),
        "over no elements");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST_CASE("kiln::lib runs on the stream a Runtime::on_stream copy names", "[lib][stream]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu"}) {
    auto rt = Runtime::open(device);
    REQUIRE(rt.ok());
    auto stream = rt->new_stream();
    REQUIRE(stream.ok());
    auto on = rt->on_stream(*stream);
    REQUIRE(on.ok());
    CHECK(&on->device() == &rt->device());  // the same device, memory and caches
    std::vector<float> host(6 * 33);
    for (size_t i = 0; i < host.size(); ++i) host[i] = std::sin(static_cast<float>(i));
    auto x = rt->empty(ir::ElemType::F32, {6, 33});
    auto y = on->empty(ir::ElemType::F32, {6, 33});
    REQUIRE((x.ok() && y.ok()));
    REQUIRE(x->upload(host.data(), host.size() * 4).ok());
    REQUIRE(lib::softmax(*on, *x, *y).ok());
    REQUIRE(on->sync().ok());  // waits for `stream`, where the library launched
    std::vector<float> got(host.size());
    REQUIRE(y->download(got.data(), got.size() * 4).ok());
    for (int r = 0; r < 6; ++r) {
      double m = -1e30, sum = 0;
      for (int c = 0; c < 33; ++c) m = std::max(m, double(host[r * 33 + c]));
      for (int c = 0; c < 33; ++c) sum += std::exp(host[r * 33 + c] - m);
      for (int c = 0; c < 33; ++c)
        CHECK(got[r * 33 + c] == Approx(std::exp(host[r * 33 + c] - m) / sum).epsilon(1e-5));
    }
    auto other = Runtime::open(device);
    REQUIRE(other.ok());
    auto foreign = other->on_stream(*stream);
    REQUIRE_FALSE(foreign.ok());
    CHECK_THAT(foreign.error().message, Contains("on_stream on a stream of another Runtime"));
  }
}

}  // namespace
}  // namespace kiln
