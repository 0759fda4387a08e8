// TMA box copies on the two backends that run them without a GPU, the CPU and the emulator
// (cuda-emu:sm_90a): the shared-memory layout of a box for every swizzle, boxes that reach
// outside the tensor (zeros, or NaN for a view that asks), rank 1 to 3, the mbarrier's
// transaction count, the launch's
// checks of a TMA tensor (errors naming the argument), and misuse reported at its DSL line.
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

// Copies the rows x cols box of src at (r0, c0) into shared memory with `swizzle` and writes the
// shared array as it is (the raw layout) to out. mode 1: one byte too few expected (the wait can
// never complete); mode 2: the box at an index that is no multiple of 128 bytes.
void tma_box2(Tensor<const f32> src, Tensor<f32> out, i32 r0, i32 c0, int rows, int cols,
              int swizzle, int mode) {
  auto s = shared_array<f32>(static_cast<uint32_t>(rows * cols + 64));
  auto bar = shared_array<u64>(1);
  auto view = tma_view(src, {rows, cols}, static_cast<Swizzle>(swizzle));
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes() - (mode == 1 ? 4u : 0u));
  tma_load(s, mode == 2 ? 4u : 0u, view, {r0, c0}, bar, 0u);  // TMA_LOAD
  mbarrier_wait(bar, 0u, 0u);                                 // TMA_WAIT
  for_range(unit_pos(), static_cast<uint32_t>(rows * cols), cube_dim(),
            [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(tma_box2,
            "src: rank=2, out, r0, c0, rows = 8, cols = 32, swizzle = 128, "
            "mode = 0")
    .cube_dim(64);

// A 4 x 16 box at (r0, c0) of a view that fills with NaN outside the tensor, written raw to out.
template <class T>
void tma_nan_box(Tensor<const T> src, Tensor<T> out, i32 r0, i32 c0) {
  auto s = shared_array<T>(64);
  auto bar = shared_array<u64>(1);
  auto view = tma_view(src, {4, 16}, Swizzle::None, TmaFill::Nan);
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes());
  tma_load(s, 0u, view, {r0, c0}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  for_range(unit_pos(), 64u, cube_dim(), [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL_GENERIC(tma_nan_box, "src: rank=2, out, r0, c0", f16, bf16, f32, f64).cube_dim(32);

// Every cube combines its 4 x 16 box, element e (row-major) being v(cube, e) = (7 cube + 5 e) %
// 23 - 11, into dst at (r0, c0) with `op` (1 add, 2 min, 3 max): cubes race on the same
// elements, as split-K sums do.
template <class T>
void tma_reduce2(Tensor<T> dst, i32 r0, i32 c0, int op) {
  auto s = shared_array<T>(64);
  auto view = tma_view(dst, {4, 16});
  for_range(unit_pos(), 64u, cube_dim(), [&](u32 e) {
    i32 v = cast<int32_t>((7u * cube_pos() + 5u * e) % 23u) - 11;
    s[e] = cast<host_of_t<T>>(v);
  });
  tma_reduce(view, {r0, c0}, s, 0u, static_cast<TmaReduce>(op));  // TMA_REDUCE
}
KILN_KERNEL_GENERIC(tma_reduce2, "dst: rank=2, r0, c0, op = 1 in 1..3", f32, bf16, i32, i64)
    .cube_dim(32);

// Four 4 x 16 tiles of dst (tile t: rows 4t .. 4t + 3, element e = 100 t + e) stored
// asynchronously through two shared buffers, each reused once the store that read it is done.
// mode 1: no wait before the reuse; mode 2: no wait at the end.
void tma_store_ring(Tensor<f32> dst, int mode) {
  auto s = shared_array<f32>(128);
  auto view = tma_view(dst, {4, 16});
  for (uint32_t t = 0; t < 4; ++t) {
    const uint32_t b = t % 2;
    if (t >= 2 && mode != 1) tma_store_wait(1);  // the store of tile t - 2 has read buffer b
    for_range(unit_pos(), 64u, cube_dim(),
              [&](u32 e) { s[b * 64u + e] = cast<float>(100u * t + e); });  // TMA_RING_FILL
    tma_store_async(view, {static_cast<int32_t>(4 * t), 0}, s, b * 64u);    // TMA_RING_STORE
  }
  if (mode != 2) tma_store_wait(0);
}
KILN_KERNEL(tma_store_ring, "dst: rank=2, mode = 0 in 0..2").cube_dim(32);

// A min reduction of f32 (TMA has none) is a trace error.
void tma_reduce_f32_min(Tensor<f32> dst) {
  auto s = shared_array<f32>(64);
  auto view = tma_view(dst, {4, 16});
  tma_reduce(view, {0, 0}, s, 0u, TmaReduce::Min);  // TMA_BAD_REDUCE
}
KILN_KERNEL(tma_reduce_f32_min, "dst: rank=2").cube_dim(32);

// Bad arguments of the store family, by mode: 1 a reduction with TmaReduce::None, 2 an
// asynchronous one likewise, 3 a wait leaving 8 stores pending, 4 a negative count.
void tma_store_misuse(Tensor<f32> dst, int mode) {
  auto s = shared_array<f32>(64);
  auto view = tma_view(dst, {4, 16});
  if (mode == 1) tma_reduce(view, {0, 0}, s, 0u, TmaReduce::None);        // TMA_REDUCE_NONE
  if (mode == 2) tma_reduce_async(view, {0, 0}, s, 0u, TmaReduce::None);  // TMA_ASYNC_NONE
  if (mode == 3) tma_store_wait(8);                                       // TMA_WAIT_8
  if (mode == 4) tma_store_wait(-1);                                      // TMA_WAIT_NEG
}
KILN_KERNEL(tma_store_misuse, "dst: rank=2, mode = 1 in 1..4").cube_dim(32);

// A NaN fill of an integer tensor is refused at the view.
void tma_nan_int(Tensor<const i32> a) {
  auto s = shared_array<i32>(64);
  auto bar = shared_array<u64>(1);
  mbarrier_init(bar, 0u);
  auto v = tma_view(a, {4, 16}, Swizzle::None, TmaFill::Nan);  // TMA_NAN_INT
  tma_load(s, 0u, v, {0, 0}, bar, 0u);
}
KILN_KERNEL(tma_nan_int, "a: rank=2").cube_dim(32);

// Fills a rows x cols box of shared memory with 1, 2, 3, ... in its raw layout and stores it
// through a TMA view with `swizzle` at (r0, c0) of dst.
void tma_store2(Tensor<f32> dst, i32 r0, i32 c0, int rows, int cols, int swizzle) {
  const auto n = static_cast<uint32_t>(rows * cols);
  auto s = shared_array<f32>(n + 64u);
  auto view = tma_view(dst, {rows, cols}, static_cast<Swizzle>(swizzle));
  for_range(unit_pos(), n, cube_dim(), [&](u32 i) { s[i] = cast<f32>(i + 1u); });
  tma_store(view, {r0, c0}, s, 0u);
}
KILN_KERNEL(tma_store2, "dst: rank=2, r0, c0, rows = 8, cols = 32, swizzle = 128").cube_dim(64);

// Rank 1 and 3: the box at coordinates, zeros outside (after an L2 prefetch of it, a hint that
// changes nothing, inside the tensor or not).
void tma_box1(Tensor<const i16> src, Tensor<i16> out, i32 x0) {
  auto s = shared_array<i16>(64);
  auto bar = shared_array<u64>(1);
  auto view = tma_view(src, {64});
  tma_prefetch(view, {x0});
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes());
  tma_load(s, 0u, view, {x0}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  for_range(unit_pos(), 64u, cube_dim(), [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(tma_box1, "src: rank=1, out, x0").cube_dim(32);

void tma_box3(Tensor<const u8> src, Tensor<u8> out, i32 z0, i32 y0, i32 x0) {
  auto s = shared_array<u8>(2 * 3 * 16);
  auto bar = shared_array<u64>(1);
  auto view = tma_view(src, {2, 3, 16});
  mbarrier_init(bar, 0u);
  // Two phases: the second copies the box again, expecting its bytes after they land.
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes());
  tma_load(s, 0u, view, {z0, y0, x0}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  sync_cube();
  tma_load(s, 0u, view, {z0, y0, x0}, bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes());
  mbarrier_wait(bar, 0u, 1u);
  for_range(unit_pos(), 96u, cube_dim(), [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(tma_box3, "src: rank=3, out, z0, y0, x0").cube_dim(32);

// A box whose rows (64 f32, 256 bytes) are wider than its 128-byte swizzle.
void tma_wide_box(Tensor<const f32> a) {
  auto s = shared_array<f32>(1024);
  auto bar = shared_array<u64>(1);
  mbarrier_init(bar, 0u);
  auto v = tma_view(a, {8, 64}, Swizzle::B128);  // TMA_WIDE
  tma_load(s, 0u, v, {0, 0}, bar, 0u);
}
KILN_KERNEL(tma_wide_box, "a: rank=2").cube_dim(32);

// A box extent of `extent` rows (0, negative and past 256 are refused at the view).
void tma_bad_extent(Tensor<const f32> a, int extent) {
  auto s = shared_array<f32>(1024);
  auto bar = shared_array<u64>(1);
  mbarrier_init(bar, 0u);
  auto v = tma_view(a, {extent, 4});  // TMA_EXTENT
  tma_load(s, 0u, v, {0, 0}, bar, 0u);
}
KILN_KERNEL(tma_bad_extent, "a: rank=2, extent = 0 in -8..1024").cube_dim(32);

namespace kiln {
namespace {

using Catch::Contains;

std::string loc(const char* marker) {
  return test::marker_loc("tests/runtime/test_tma.cpp", marker);
}

// Where element (r, c) of a rows x cols box of f32 lands, in elements: row-major, then the
// 16-byte chunk XORed with bits 7.. of the byte offset (PTX ISA, "Tensor swizzling modes").
uint32_t swizzled(uint32_t r, uint32_t c, uint32_t cols, uint32_t swizzle) {
  uint32_t byte = (r * cols + c) * 4u;
  if (swizzle) byte ^= ((byte >> 7) & (swizzle / 16 - 1)) << 4;
  return byte / 4u;
}

TEST_CASE("a TMA box lands row-major and swizzled, zeros outside the tensor", "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    const int64_t R = 20, C = 40;
    std::vector<float> host(R * C);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i + 1);
    Tensor src = test::tensor_from(rt, ir::ElemType::F32, host, {R, C});
    auto k = test::kernel(rt, "tma_box2");
    struct Case {
      int rows, cols, swizzle, r0, c0;
    };
    // Every swizzle with the widest box it allows; boxes past each edge and before the start.
    for (Case cs : {Case{8, 32, 128, 0, 0}, Case{8, 16, 64, 3, 5}, Case{8, 8, 32, 2, 1},
                    Case{16, 32, 0, 10, 20}, Case{8, 32, 128, 16, 24}, Case{8, 16, 64, -3, -5}}) {
      INFO("box " << cs.rows << "x" << cs.cols << " swizzle " << cs.swizzle << " at " << cs.r0
                  << "," << cs.c0);
      const auto n = static_cast<size_t>(cs.rows * cs.cols);
      Tensor out = test::f32_tensor(rt, std::vector<float>(n, -1.0f));
      KILN_REQUIRE_OK(rt.launch(k, 1, 64, src, out, cs.r0, cs.c0, cs.rows, cs.cols, cs.swizzle, 0));
      KILN_REQUIRE_OK(rt.sync());
      const auto got = test::to_host<float>(out);
      for (int r = 0; r < cs.rows; ++r)
        for (int c = 0; c < cs.cols; ++c) {
          const int64_t gr = cs.r0 + r, gc = cs.c0 + c;
          const float want = gr >= 0 && gr < R && gc >= 0 && gc < C ? host[gr * C + gc] : 0.0f;
          INFO("element " << r << "," << c);
          REQUIRE(
              got[swizzled(static_cast<uint32_t>(r), static_cast<uint32_t>(c),
                           static_cast<uint32_t>(cs.cols), static_cast<uint32_t>(cs.swizzle))] ==
              want);
        }
    }
  }
}

// Whether `bits` (the low `bytes` bytes) are a NaN of the IEEE format of that width, or of bf16.
bool is_nan_bits(uint64_t bits, int bytes, bool bf16) {
  const int mantissa = bytes == 8 ? 52 : bytes == 4 ? 23 : bf16 ? 7 : 10;
  const int exponent = bytes * 8 - 1 - mantissa;
  const uint64_t e = (bits >> mantissa) & ((uint64_t{1} << exponent) - 1);
  return e == (uint64_t{1} << exponent) - 1 && (bits & ((uint64_t{1} << mantissa) - 1)) != 0;
}

template <class H>
void check_nan_box(Runtime& rt, ir::ElemType dtype) {
  INFO(ir::elem_name(dtype));
  const int64_t R = 6, C = 24;
  std::vector<H> host(R * C);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<H>(i + 1);  // no NaN inside
  Tensor src = test::tensor_from(rt, dtype, host, {R, C});
  Tensor out = test::tensor_from(rt, dtype, std::vector<H>(64, 0), {64});
  auto k = test::kernel(rt, "tma_nan_box");
  for (auto [r0, c0] : {std::pair{0, 0}, std::pair{4, 16}, std::pair{-2, -8}}) {
    INFO("box at " << r0 << "," << c0);
    KILN_REQUIRE_OK(rt.launch(k, 1, 32, src, out, r0, c0));
    KILN_REQUIRE_OK(rt.sync());
    const auto got = test::to_host<H>(out);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 16; ++c) {
        const int64_t gr = r0 + r, gc = c0 + c;
        INFO("element " << r << "," << c);
        if (gr >= 0 && gr < R && gc >= 0 && gc < C)
          REQUIRE(got[r * 16 + c] == host[gr * C + gc]);
        else
          REQUIRE(is_nan_bits(static_cast<uint64_t>(got[r * 16 + c]), sizeof(H),
                              dtype == ir::ElemType::BF16));
      }
  }
}

TEST_CASE("a TMA view with a NaN fill loads NaN outside the tensor, of every float type", "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    // Raw bits: the elements inside are small integers' bit patterns, none of them a NaN.
    check_nan_box<uint16_t>(rt, ir::ElemType::F16);
    check_nan_box<uint16_t>(rt, ir::ElemType::BF16);
    check_nan_box<uint32_t>(rt, ir::ElemType::F32);
    check_nan_box<uint64_t>(rt, ir::ElemType::F64);
  }
}

// The reduction's result for element (r, c) of a 6 x 24 tensor starting at `init`, from
// `cubes` cubes reducing a 4 x 16 box at (r0, c0), in double.
double reduced(int op, double init, int cubes, int r, int c, int r0, int c0) {
  const int br = r - r0, bc = c - c0;
  if (br < 0 || br >= 4 || bc < 0 || bc >= 16) return init;
  double x = init;
  for (int cube = 0; cube < cubes; ++cube) {
    const double v = (7 * cube + 5 * (br * 16 + bc)) % 23 - 11;
    x = op == 1 ? x + v : op == 2 ? std::min(x, v) : std::max(x, v);
  }
  return x;
}

template <class H>
void check_reduce(Runtime& rt, ir::ElemType dtype) {
  auto k = test::kernel(rt, "tma_reduce2");
  const int cubes = 9;
  auto encode = [&](double v) -> H {
    if (dtype == ir::ElemType::BF16) return static_cast<H>(bf16_bits(v));
    if (dtype == ir::ElemType::F32) {
      const auto f = static_cast<float>(v);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return static_cast<H>(b);
    }
    return static_cast<H>(static_cast<int64_t>(v));
  };
  auto decode = [&](H h) -> double {
    if (dtype == ir::ElemType::BF16) return bf16_value(static_cast<uint16_t>(h));
    if (dtype == ir::ElemType::F32) {
      float f;
      const auto b = static_cast<uint32_t>(h);
      std::memcpy(&f, &b, 4);
      return f;
    }
    return static_cast<double>(static_cast<std::make_signed_t<H>>(h));
  };
  for (int op = 1; op <= 3; ++op) {
    if (!ir::tma_reduce_allowed(static_cast<ir::TmaReduce>(op), dtype)) continue;
    for (auto [r0, c0] : {std::pair{1, 4}, std::pair{3, 12}, std::pair{-2, -5}}) {
      INFO(ir::elem_name(dtype) << ", op " << op << ", box at " << r0 << "," << c0);
      std::vector<H> host(6 * 24);
      for (size_t i = 0; i < host.size(); ++i) host[i] = encode(static_cast<double>(i % 9) - 4);
      Tensor dst = test::tensor_from(rt, dtype, host, {6, 24});
      KILN_REQUIRE_OK(rt.launch(k, cubes, 32, dst, r0, c0, op));
      KILN_REQUIRE_OK(rt.sync());
      const auto got = test::to_host<H>(dst);
      for (int r = 0; r < 6; ++r)
        for (int c = 0; c < 24; ++c) {
          INFO("element " << r << "," << c);
          REQUIRE(decode(got[r * 24 + c]) ==
                  reduced(op, static_cast<double>((r * 24 + c) % 9) - 4, cubes, r, c, r0, c0));
        }
    }
  }
}

TEST_CASE("a TMA reduction combines every cube's box into the tensor, atomically", "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    check_reduce<uint32_t>(rt, ir::ElemType::F32);
    check_reduce<uint16_t>(rt, ir::ElemType::BF16);
    check_reduce<uint32_t>(rt, ir::ElemType::I32);
    check_reduce<uint64_t>(rt, ir::ElemType::I64);
  }
  const std::string e = test::trace_error("tma_reduce_f32_min");
  CHECK_THAT(e, Contains(loc("TMA_BAD_REDUCE")) && Contains("TMA has no min reduction of f32"));
}

TEST_CASE("asynchronous TMA stores: a ring of two buffers, and the waits it needs", "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    const bool emu = rt.device().name.find("emu") != std::string::npos;
    auto k = test::kernel(rt, "tma_store_ring");
    Tensor dst = test::f32_tensor(rt, std::vector<float>(16 * 16, -1.0f));
    auto shaped = dst.reshape({16, 16});
    REQUIRE(shaped.ok());
    KILN_REQUIRE_OK(rt.launch(k, 1, 32, *shaped, 0));
    KILN_REQUIRE_OK(rt.sync());
    const auto got = test::to_host<float>(dst);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        REQUIRE(got[r * 16 + c] == static_cast<float>(100 * (r / 4) + (r % 4) * 16 + c));
    // The CPU's stores are done when they return; the emulator holds the kernel to the GPU's
    // rules.
    if (!emu) continue;
    KILN_REQUIRE_OK(rt.launch(k, 1, 32, *shaped, 1));
    Status st = rt.sync();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(
        st.error().message,
        Contains(loc("TMA_RING_FILL")) &&
            Contains("overwrites bytes that an asynchronous TMA store may still be reading"));
    KILN_REQUIRE_OK(rt.launch(k, 1, 32, *shaped, 2));
    st = rt.sync();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("TMA_RING_STORE")) &&
                                       Contains("ends with an asynchronous TMA store") &&
                                       Contains("tma_store_wait(0) before the end of the kernel"));
  }
}

TEST_CASE("a TMA store writes the box from its shared layout and nothing outside the tensor",
          "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    const int64_t R = 20, C = 40;
    auto k = test::kernel(rt, "tma_store2");
    struct Case {
      int rows, cols, swizzle, r0, c0;
    };
    for (Case cs : {Case{8, 32, 128, 0, 0}, Case{8, 16, 64, 3, 5}, Case{8, 8, 32, 2, 1},
                    Case{16, 32, 0, 10, 20}, Case{8, 32, 128, 16, 24}, Case{8, 16, 64, -3, -5}}) {
      INFO("box " << cs.rows << "x" << cs.cols << " swizzle " << cs.swizzle << " at " << cs.r0
                  << "," << cs.c0);
      Tensor dst =
          test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(R * C, -1.0f), {R, C});
      KILN_REQUIRE_OK(rt.launch(k, 1, 64, dst, cs.r0, cs.c0, cs.rows, cs.cols, cs.swizzle));
      KILN_REQUIRE_OK(rt.sync());
      const auto got = test::to_host<float>(dst);
      for (int64_t gr = 0; gr < R; ++gr)
        for (int64_t gc = 0; gc < C; ++gc) {
          const int64_t r = gr - cs.r0, c = gc - cs.c0;
          float want = -1.0f;  // untouched outside the box
          if (r >= 0 && r < cs.rows && c >= 0 && c < cs.cols)
            want = static_cast<float>(swizzled(static_cast<uint32_t>(r), static_cast<uint32_t>(c),
                                               static_cast<uint32_t>(cs.cols),
                                               static_cast<uint32_t>(cs.swizzle)) +
                                      1);
          INFO("element " << gr << "," << gc);
          REQUIRE(got[static_cast<size_t>(gr * C + gc)] == want);
        }
    }
  }
}

TEST_CASE("TMA boxes of rank 1 and 3, and a second phase of the same mbarrier", "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    std::vector<int16_t> h1(100);
    for (size_t i = 0; i < h1.size(); ++i) h1[i] = static_cast<int16_t>(i * 3 - 7);
    Tensor s1 = test::tensor_from(rt, ir::ElemType::I16, h1, {100});
    Tensor o1 = test::tensor_from(rt, ir::ElemType::I16, std::vector<int16_t>(64, 99), {64});
    KILN_REQUIRE_OK(rt.launch(test::kernel(rt, "tma_box1"), 1, 32, s1, o1, 50));
    KILN_REQUIRE_OK(rt.sync());
    const auto g1 = test::to_host<int16_t>(o1);
    for (int i = 0; i < 64; ++i) REQUIRE(g1[i] == (50 + i < 100 ? h1[50 + i] : 0));

    std::vector<uint8_t> h3(4 * 5 * 32);
    for (size_t i = 0; i < h3.size(); ++i) h3[i] = static_cast<uint8_t>(i * 7 + 1);
    Tensor s3 = test::tensor_from(rt, ir::ElemType::U8, h3, {4, 5, 32});
    Tensor o3 = test::tensor_from(rt, ir::ElemType::U8, std::vector<uint8_t>(96, 0xee), {96});
    KILN_REQUIRE_OK(rt.launch(test::kernel(rt, "tma_box3"), 1, 32, s3, o3, 3, -1, 24));
    KILN_REQUIRE_OK(rt.sync());
    const auto g3 = test::to_host<uint8_t>(o3);
    for (int z = 0; z < 2; ++z)
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 16; ++x) {
          const int gz = 3 + z, gy = -1 + y, gx = 24 + x;
          const bool in = gz < 4 && gy >= 0 && gy < 5 && gx < 32;
          REQUIRE(g3[(z * 3 + y) * 16 + x] == (in ? h3[(gz * 5 + gy) * 32 + gx] : 0));
        }
  }
}

TEST_CASE("a launch checks TMA tensors and names the argument", "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "tma_box2");
    Tensor out = test::f32_tensor(rt, std::vector<float>(256, 0.0f));
    // Rows of 10 floats (40 bytes): no multiple of 16 bytes.
    Tensor odd = test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(80, 1.0f), {8, 10});
    Status st = rt.launch(k, 1, 64, odd, out, 0, 0, 8, 32, 128, 0);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("argument 'src'"));
    CHECK_THAT(st.error().message, Contains("multiple of 16 bytes"));
    CHECK_THAT(st.error().message, Contains(loc("TMA_LOAD")));
    // A transposed view: the innermost dimension is not contiguous.
    auto full =
        test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(64 * 64, 1.0f), {64, 64});
    auto tr = full.permute({1, 0});
    REQUIRE(tr.ok());
    st = rt.launch(k, 1, 64, *tr, out, 0, 0, 8, 32, 128, 0);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("innermost dimension contiguously"));
  }
}

TEST_CASE("TMA misuse is reported at its line on the CPU and the emulator", "[tma]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    auto k = test::kernel(rt, "tma_box2");
    Tensor src =
        test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(64 * 64, 1.0f), {64, 64});
    Tensor out = test::f32_tensor(rt, std::vector<float>(256, 0.0f));
    // One byte too few expected: the copy outruns the count, which the phase never forgives.
    Status st = rt.launch(k, 1, 64, src, out, 0, 0, 8, 32, 128, 1);
    if (st.ok()) st = rt.sync();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("TMA_WAIT")));
    // A destination index of 16 bytes.
    st = rt.launch(k, 1, 64, src, out, 0, 0, 8, 32, 128, 2);
    if (st.ok()) st = rt.sync();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("TMA_LOAD")));
    CHECK_THAT(st.error().message, Contains("128 bytes"));
  }
}

TEST_CASE("TMA views are checked at trace time", "[tma]") {
  // A box row wider than its swizzle names the DSL line.
  const std::string e = test::trace_error("tma_wide_box");
  CHECK_THAT(e, Contains(loc("TMA_WIDE")));
  CHECK_THAT(e, Contains("at most 128 bytes"));
  for (int extent : {0, -1, 257}) {
    dsl::SpecOptions o;
    o.set["extent"] = std::to_string(extent);
    const std::string bad = test::trace_error("tma_bad_extent", o);
    INFO("extent " << extent);
    CHECK_THAT(bad, Contains(loc("TMA_EXTENT")));
    CHECK_THAT(bad, Contains("spans 1 to 256 elements in each dimension"));
  }
  struct Bad {
    int mode;
    const char* marker;
    const char* says;
  };
  for (const Bad& b :
       {Bad{1, "TMA_REDUCE_NONE", "tma_reduce takes TmaReduce::Add, Min or Max"},
        Bad{2, "TMA_ASYNC_NONE", "tma_reduce_async takes TmaReduce::Add, Min or Max"},
        Bad{3, "TMA_WAIT_8", "tma_store_wait leaves 0 to 7 stores pending, not 8"},
        Bad{4, "TMA_WAIT_NEG", "tma_store_wait leaves 0 to 7 stores pending, not -1"}}) {
    dsl::SpecOptions o;
    o.set["mode"] = std::to_string(b.mode);
    const std::string e = test::trace_error("tma_store_misuse", o);
    INFO("mode " << b.mode);
    CHECK_THAT(e, Contains(loc(b.marker)) && Contains(b.says));
  }
  const std::string nan = test::trace_error("tma_nan_int");
  CHECK_THAT(nan, Contains(loc("TMA_NAN_INT")) &&
                      Contains("cannot fill with NaN (f16, bf16, f32 and f64 can)"));
}

}  // namespace
}  // namespace kiln
