// TMA im2col boxes on the CPU and the emulator (cuda-emu:sm_90a): the rows a load writes
// (the walk of filter origins through the bounding box, across rows and images, each read at
// origin + offsets), the padding, the channels and images past the tensor (zeros, or NaN), every
// swizzle, tensors of rank 3, 4 and 5, a first origin outside the bounding box (a fault at its
// line), a bounding box that is empty for the tensor launched (an error naming the argument),
// views refused at trace time, and the convolution built on them (conv2d_im2col).
#include <catch2/catch.hpp>

#include <cmath>

#include "compiler/dsl/dsl.h"
#include "kernels/kernels.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

// The im2col box of x (N H W C, f32) whose first filter origin is (n0, h0, w0) and first channel
// c0, read at origin + (oh, ow), written raw (as it lies in shared memory) to out. The bounding
// box's corners are (lo_h, lo_w) and (up_h, up_w).
void im2col_box4(Tensor<const f32> x, Tensor<f32> out, i32 n0, i32 h0, i32 w0, i32 c0, u32 oh,
                 u32 ow, int pixels, int channels, int lo_h, int lo_w, int up_h, int up_w,
                 int swizzle, int nan) {
  const auto n = static_cast<uint32_t>(pixels * channels);
  auto s = shared_array<f32>(n + 32u);
  auto bar = shared_array<u64>(1);
  auto view = tma_im2col_view(x, pixels, channels, {lo_h, lo_w}, {up_h, up_w},
                              static_cast<Swizzle>(swizzle), nan ? TmaFill::Nan : TmaFill::Zero);
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes());
  tma_load(s, 0u, view, {n0, h0, w0, c0}, {oh, ow}, bar, 0u);  // IM2COL_LOAD
  mbarrier_wait(bar, 0u, 0u);
  for_range(unit_pos(), n, cube_dim(), [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(im2col_box4,
            "x: rank=4, out, n0, h0, w0, c0, oh, ow, pixels = 16 in 1..128, channels = 8 in 1..64, "
            "lo_h = 0 in -64..64, lo_w = 0 in -64..64, up_h = 0 in -64..64, up_w = 0 in -64..64, "
            "swizzle = 0 in 0..128, nan = 0 in 0..1")
    .cube_dim(64);

// Rank 3 (N W C) and rank 5 (N D H W C), no swizzle: out as in im2col_box4.
void im2col_box3(Tensor<const u16> x, Tensor<u16> out, i32 n0, i32 w0, i32 c0, u32 ow, int lo,
                 int up) {
  auto s = shared_array<u16>(24 * 16);
  auto bar = shared_array<u64>(1);
  auto view = tma_im2col_view(x, 24, 16, {lo}, {up});
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes());
  tma_load(s, 0u, view, {n0, w0, c0}, {ow}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  for_range(unit_pos(), 24u * 16u, cube_dim(), [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(im2col_box3, "x: rank=3, out, n0, w0, c0, ow, lo = 0 in -300..300, up = 0 in -300..300")
    .cube_dim(32);

void im2col_box5(Tensor<const f32> x, Tensor<f32> out, i32 n0, i32 d0, i32 h0, i32 w0, u32 od,
                 u32 oh, u32 ow) {
  auto s = shared_array<f32>(40 * 4);
  auto bar = shared_array<u64>(1);
  auto view = tma_im2col_view(x, 40, 4, {-1, 0, -2}, {0, -1, 1});
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, view.box_bytes());
  tma_load(s, 0u, view, {n0, d0, h0, w0, 0}, {od, oh, ow}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  for_range(unit_pos(), 160u, cube_dim(), [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(im2col_box5, "x: rank=5, out, n0, d0, h0, w0, od, oh, ow").cube_dim(32);

// Views and loads refused at trace time, by mode: 1 a rank-2 tensor, 2 one corner for two
// spatial dimensions, 3 channels of 12 bytes, 4 a corner beyond rank 4's precision, 5 one offset
// for two spatial dimensions, 6 a NaN fill of integers.
void im2col_bad(Tensor<const f32> x, Tensor<const f32> flat, Tensor<const i32> ints, int mode) {
  auto s = shared_array<f32>(4096);
  auto si = shared_array<i32>(4096);
  auto bar = shared_array<u64>(1);
  mbarrier_init(bar, 0u);
  if (mode == 1) tma_im2col_view(flat, 16, 8, {}, {});          // IM2COL_RANK
  if (mode == 2) tma_im2col_view(x, 16, 8, {-1}, {-1});         // IM2COL_CORNERS
  if (mode == 3) tma_im2col_view(x, 16, 3, {0, 0}, {0, 0});     // IM2COL_CHANNELS
  if (mode == 4) tma_im2col_view(x, 16, 8, {-200, 0}, {0, 0});  // IM2COL_RANGE
  if (mode == 5) {
    auto v = tma_im2col_view(x, 16, 8, {0, 0}, {0, 0});
    tma_load(s, 0u, v, {0, 0, 0, 0}, {1u}, bar, 0u);  // IM2COL_OFFSETS
  }
  if (mode == 6)
    tma_im2col_view(ints, 16, 8, {0, 0}, {0, 0}, Swizzle::None, TmaFill::Nan);  // IM2COL_NAN
  (void)si;
}
KILN_KERNEL(im2col_bad, "x: rank=4, flat: rank=2, ints: rank=4, mode = 1 in 1..6").cube_dim(32);

namespace kiln {
namespace {

using Catch::Contains;

std::string loc(const char* marker) {
  return test::marker_loc("tests/runtime/test_im2col.cpp", marker);
}

// The host's model of an im2col box, written as the PTX ISA describes it rather than as the
// backends walk it: list every filter origin of the bounding box in order (the images, then
// each spatial dimension, outermost first), find the load's first one, and take `pixels` of
// them. Returns, per row, the element's position (image, spatial..., nothing for the channel)
// read for that row; the caller adds the channel.
std::vector<std::vector<int64_t>> model_rows(const std::vector<int64_t>& shape,
                                             const std::vector<int64_t>& lower,
                                             const std::vector<int64_t>& upper,
                                             const std::vector<int64_t>& first,
                                             const std::vector<int64_t>& offsets, int pixels) {
  const size_t spatial = lower.size();
  std::vector<std::vector<int64_t>> origins;
  const int64_t images = shape[0] + pixels;  // enough to walk past the last image
  std::vector<int64_t> o(1 + spatial);
  for (o[0] = 0; o[0] < images; ++o[0]) {
    // Odometer over the spatial dimensions.
    std::vector<int64_t> at(spatial);
    for (size_t s = 0; s < spatial; ++s) at[s] = lower[s];
    bool done = false;
    while (!done) {
      std::vector<int64_t> row = {o[0]};
      row.insert(row.end(), at.begin(), at.end());
      origins.push_back(row);
      size_t s = spatial;
      done = true;
      while (s-- > 0) {
        if (++at[s] < shape[1 + s] + upper[s]) {
          done = false;
          break;
        }
        at[s] = lower[s];
      }
    }
  }
  size_t start = 0;
  while (start < origins.size() && origins[start] != first) ++start;
  REQUIRE(start < origins.size());
  std::vector<std::vector<int64_t>> rows;
  for (int p = 0; p < pixels; ++p) {
    std::vector<int64_t> r = origins[start + static_cast<size_t>(p)];
    for (size_t s = 0; s < spatial; ++s) r[1 + s] += offsets[s];
    rows.push_back(r);
  }
  return rows;
}

// The element of a row-major tensor at `pos` (all but the channel) and channel c, or nullopt
// outside it.
std::optional<size_t> element(const std::vector<int64_t>& shape, const std::vector<int64_t>& pos,
                              int64_t c) {
  size_t at = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t i = d + 1 < shape.size() ? pos[d] : c;
    if (i < 0 || i >= shape[d]) return std::nullopt;
    at = at * static_cast<size_t>(shape[d]) + static_cast<size_t>(i);
  }
  return at;
}

// Where element (p, c) of a pixels x channels box of `esize`-byte elements lands, in elements.
size_t swizzled(size_t p, size_t c, size_t channels, size_t esize, uint32_t swizzle) {
  size_t byte = (p * channels + c) * esize;
  if (swizzle) byte ^= ((byte >> 7) & (swizzle / 16 - 1)) << 4;
  return byte / esize;
}

TEST_CASE("an im2col box: the walk of filter origins, offsets, padding, every swizzle",
          "[tma][im2col]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    const std::vector<int64_t> shape = {2, 5, 7, 20};  // N H W C
    std::vector<float> host(2 * 5 * 7 * 20);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i + 1);
    Tensor x = test::tensor_from(rt, ir::ElemType::F32, host, shape);
    auto k = test::kernel(rt, "im2col_box4");
    struct Case {
      int pixels, channels, lo_h, lo_w, up_h, up_w, swizzle, nan;
      int n0, h0, w0, c0, oh, ow;
    };
    const Case cases[] = {
        // The whole first image, no padding, every channel block of 8.
        {35, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        // A 3 x 3 filter with padding 1: the origins are the output pixels, the offsets the
        // filter position; the walk wraps rows and runs into the second image.
        {64, 8, -1, -1, -1, -1, 32, 0, 0, 2, 3, 8, 2, 1},
        // The widest channels each swizzle allows, channels past C (16 .. 47 of 20).
        {16, 32, -2, -1, 0, 1, 128, 0, 1, 0, -1, 16, 1, 0},
        {24, 16, -1, 0, -1, 0, 64, 1, 0, -1, 2, 4, 0, 0},
        // Past the last image: zeros, or NaN.
        {48, 8, 0, -2, -2, 1, 0, 1, 1, 2, 5, 12, 1, 2},
        {48, 8, 0, -2, -2, 1, 0, 0, 1, 2, 5, 12, 1, 2},
        // Asymmetric corners: a stride of the box that is not the image's.
        {30, 4, 1, 2, 0, -3, 0, 0, 0, 1, 2, 0, 3, 0},
    };
    for (const Case& cs : cases) {
      INFO("pixels " << cs.pixels << " channels " << cs.channels << " corners (" << cs.lo_h << ","
                     << cs.lo_w << ") (" << cs.up_h << "," << cs.up_w << ") swizzle " << cs.swizzle
                     << " from " << cs.n0 << "," << cs.h0 << "," << cs.w0 << "," << cs.c0
                     << " offsets " << cs.oh << "," << cs.ow);
      const auto n = static_cast<size_t>(cs.pixels * cs.channels);
      Tensor out = test::f32_tensor(rt, std::vector<float>(n, -1.0f));
      KILN_REQUIRE_OK(rt.launch(k, 1, 64, x, out, cs.n0, cs.h0, cs.w0, cs.c0,
                                static_cast<uint32_t>(cs.oh), static_cast<uint32_t>(cs.ow),
                                cs.pixels, cs.channels, cs.lo_h, cs.lo_w, cs.up_h, cs.up_w,
                                cs.swizzle, cs.nan));
      KILN_REQUIRE_OK(rt.sync());
      const auto got = test::to_host<float>(out);
      const auto rows = model_rows(shape, {cs.lo_h, cs.lo_w}, {cs.up_h, cs.up_w},
                                   {cs.n0, cs.h0, cs.w0}, {cs.oh, cs.ow}, cs.pixels);
      for (int p = 0; p < cs.pixels; ++p)
        for (int c = 0; c < cs.channels; ++c) {
          INFO("row " << p << " channel " << c);
          const float g =
              got[swizzled(static_cast<size_t>(p), static_cast<size_t>(c),
                           static_cast<size_t>(cs.channels), 4, static_cast<uint32_t>(cs.swizzle))];
          const auto at = element(shape, rows[static_cast<size_t>(p)], cs.c0 + c);
          if (at)
            REQUIRE(g == host[*at]);
          else if (cs.nan)
            REQUIRE(std::isnan(g));
          else
            REQUIRE(g == 0.0f);
        }
    }
  }
}

TEST_CASE("im2col boxes of rank 3 and 5", "[tma][im2col]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    {
      // N W C of u16, a corner beyond 8 bits (rank 3 has 16).
      const std::vector<int64_t> shape = {3, 300, 16};
      std::vector<uint16_t> host(3 * 300 * 16);
      for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint16_t>(i * 7 + 1);
      Tensor x = test::tensor_from(rt, ir::ElemType::U16, host, shape);
      Tensor out = test::tensor_from(rt, ir::ElemType::U16, std::vector<uint16_t>(384, 1), {384});
      auto k = test::kernel(rt, "im2col_box3");
      for (auto [n0, w0, ow, lo, up] :
           {std::tuple{0, 290, 3, -2, -5}, std::tuple{1, -200, 200, -200, 1},
            std::tuple{2, 280, 0, 0, -10}}) {
        INFO("n0 " << n0 << " w0 " << w0 << " ow " << ow << " corners " << lo << " " << up);
        KILN_REQUIRE_OK(rt.launch(k, 1, 32, x, out, n0, w0, 0, static_cast<uint32_t>(ow), lo, up));
        KILN_REQUIRE_OK(rt.sync());
        const auto got = test::to_host<uint16_t>(out);
        const auto rows = model_rows(shape, {lo}, {up}, {n0, w0}, {ow}, 24);
        for (size_t p = 0; p < 24; ++p)
          for (int c = 0; c < 16; ++c) {
            INFO("row " << p << " channel " << c);
            const auto at = element(shape, rows[p], c);
            REQUIRE(got[p * 16 + static_cast<size_t>(c)] == (at ? host[*at] : 0));
          }
      }
    }
    {
      // N D H W C: three spatial dimensions with corners of 5 bits.
      const std::vector<int64_t> shape = {2, 3, 4, 5, 4};
      std::vector<float> host(2 * 3 * 4 * 5 * 4);
      for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i + 1);
      Tensor x = test::tensor_from(rt, ir::ElemType::F32, host, shape);
      Tensor out = test::f32_tensor(rt, std::vector<float>(160, -1.0f));
      auto k = test::kernel(rt, "im2col_box5");
      KILN_REQUIRE_OK(rt.launch(k, 1, 32, x, out, 0, 1, 1, 3, 1u, 0u, 2u));
      KILN_REQUIRE_OK(rt.sync());
      const auto got = test::to_host<float>(out);
      const auto rows = model_rows(shape, {-1, 0, -2}, {0, -1, 1}, {0, 1, 1, 3}, {1, 0, 2}, 40);
      for (size_t p = 0; p < 40; ++p)
        for (int c = 0; c < 4; ++c) {
          INFO("row " << p << " channel " << c);
          const auto at = element(shape, rows[p], c);
          REQUIRE(got[p * 4 + static_cast<size_t>(c)] == (at ? host[*at] : 0.0f));
        }
    }
  }
}

TEST_CASE("an im2col load outside its bounding box, and an empty bounding box", "[tma][im2col]") {
  (void)kernels::builtin_names();
  for (Runtime& rt : test::tma_devices()) {
    INFO("on " << rt.device().name);
    Tensor x = test::tensor_from(rt, ir::ElemType::F32, std::vector<float>(2 * 5 * 7 * 8, 1.0f),
                                 {2, 5, 7, 8});
    Tensor out = test::f32_tensor(rt, std::vector<float>(128, 0.0f));
    auto k = test::kernel(rt, "im2col_box4");
    // Corners -1 .. 7 - 1: origin w = 6 is outside (the box's last is 5), as is h = -2.
    for (auto [h0, w0] : {std::pair{0, 6}, std::pair{-2, 0}}) {
      INFO("origin " << h0 << "," << w0);
      Status st = rt.launch(k, 1, 64, x, out, 0, h0, w0, 0, 0u, 0u, 16, 8, -1, -1, -1, -1, 0, 0);
      if (st.ok()) st = rt.sync();
      REQUIRE_FALSE(st.ok());
      CHECK_THAT(st.error().message, Contains(loc("IM2COL_LOAD")));
      CHECK_THAT(st.error().message, Contains("outside the view's bounding box"));
    }
    // A filter larger than the padded image: H + up - lo = 5 - 6 - 0 < 1.
    Status st = rt.launch(k, 1, 64, x, out, 0, 0, 0, 0, 0u, 0u, 16, 8, 0, 0, -6, 0, 0, 0);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("argument 'x'"));
    CHECK_THAT(st.error().message, Contains("im2col bounding box of dimension 1 is empty"));
  }
}

TEST_CASE("im2col views and loads are checked at trace time", "[tma][im2col]") {
  struct Bad {
    int mode;
    const char* marker;
    const char* says;
  };
  for (const Bad& b :
       {Bad{1, "IM2COL_RANK", "reads a tensor of rank 3 to 5"},
        Bad{2, "IM2COL_CORNERS", "has 2 lower and 2 upper corners (one per spatial dimension)"},
        Bad{3, "IM2COL_CHANNELS", "a multiple of 16 bytes; 3 elements of 4 bytes are 12"},
        Bad{4, "IM2COL_RANGE", "are -128 to 127 (the precision of the GPU's tensor map), not -200"},
        Bad{5, "IM2COL_OFFSETS", "takes 4 coordinates and 2 offsets, not 4 and 1"},
        Bad{6, "IM2COL_NAN", "cannot fill with NaN"}}) {
    dsl::SpecOptions o;
    o.set["mode"] = std::to_string(b.mode);
    const std::string e = test::trace_error("im2col_bad", o);
    INFO("mode " << b.mode);
    CHECK_THAT(e, Contains(loc(b.marker)) && Contains(b.says));
  }
}

TEST_CASE("conv2d_im2col against a double reference on the CPU and the emulator",
          "[tma][im2col][kernels]") {
  (void)kernels::builtin_names();
  struct Case {
    const char* dtype;
    int kernel, pad, channels, pixels;
  };
  for (const char* device : {"cpu", "cuda-emu:sm_90a"})
    for (const Case& c : {Case{"f32", 3, 1, 32, 64}, Case{"f16", 3, 0, 16, 128},
                          Case{"bf16", 5, 2, 64, 32}, Case{"f32", 1, 0, 8, 64}}) {
      INFO(device << " " << c.dtype << " kernel " << c.kernel << " pad " << c.pad << " channels "
                  << c.channels << " pixels " << c.pixels);
      auto rt = Runtime::open(device);
      if (!rt) {
        WARN("skipped on " << device << ": " << rt.error().message);
        continue;
      }
      kernels::RunConfig o;
      o.repeat = 0;
      o.dtypes["x"] = c.dtype;
      o.set["kernel"] = std::to_string(c.kernel);
      o.set["pad"] = std::to_string(c.pad);
      o.set["channels"] = std::to_string(c.channels);
      o.set["pixels"] = std::to_string(c.pixels);
      auto r = kernels::run(*rt, "conv2d_im2col", o);
      INFO((r.ok() ? r->arguments : r.error().message));
      REQUIRE(r.ok());
      CHECK(r->passed);
    }
}

}  // namespace
}  // namespace kiln
