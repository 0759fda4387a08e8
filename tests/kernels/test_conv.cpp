// kiln::lib::conv against a double reference through `kiln run conv1d|conv2d|conv3d`'s runner:
// 1-, 2- and 3-d, NCHW and NHWC, odd sizes, stride, dilation, symmetric, asymmetric and "same"
// padding (larger than half the kernel too), groups from dense to depthwise, bias, residual and
// every activation, every type pair; dense layers as the CPU's implicit GEMM (one chunk and
// several; grouped ones with 8 or more channels per group as one per group), depthwise ones on
// their own kernel, narrow groups on the direct kernel, 1 x 1 ones as matmul; the same on the
// emulator; and the errors of the host API.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lib/conv.h"
#include "kernels/run.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;

struct ConvCase {
  const char* op;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::string> set, dtypes;
  const char* kernel;
};

const ConvCase kCases[] = {
    {"conv2d", {{"x", {2, 5, 11, 9}}, {"w", {7, 5, 3, 3}}}, {}, {}, "conv_gemm_cpu"},
    // "Same" layers (conv_gemm_cpu's flat form: each tap's column is x shifted): with bias,
    // residual and GELU; dilated, in and out bf16; 3-d, f16; more output channels than one block
    // of rows (140: two blocks of 72).
    {"conv2d",
     {{"x", {2, 5, 11, 9}}, {"w", {7, 5, 3, 3}}},
     {{"padding", "1"}, {"use_bias", "1"}, {"use_residual", "1"}, {"epilogue", "2"}},
     {},
     "conv_gemm_cpu"},
    {"conv2d",
     {{"x", {1, 6, 10, 13}}, {"w", {9, 6, 3, 3}}},
     {{"same", "1"}, {"dilation", "2"}},
     {{"x", "bf16"}, {"y", "bf16"}},
     "conv_gemm_cpu"},
    {"conv3d",
     {{"x", {1, 3, 5, 6, 7}}, {"w", {5, 3, 3, 3, 3}}},
     {{"same", "1"}},
     {{"x", "f16"}},
     "conv_gemm_cpu"},
    // No input channels: y is the bias (the packing has nothing to pack).
    {"conv2d",
     {{"x", {1, 0, 5, 5}}, {"w", {4, 0, 3, 3}}},
     {{"padding", "1"}, {"use_bias", "1"}},
     {},
     "conv_gemm_cpu"},
    {"conv2d",
     {{"x", {1, 3, 6, 5}}, {"w", {140, 3, 3, 3}}},
     {{"padding", "1"}, {"use_bias", "1"}},
     {},
     "conv_gemm_cpu"},
    {"conv2d",
     {{"x", {1, 6, 13, 10}}, {"w", {10, 3, 3, 2}}},
     {{"stride", "2"}, {"dilation", "2"}, {"padding", "3"}, {"padding_end", "0"}, {"groups", "2"}},
     {},
     "conv_direct"},
    {"conv2d",
     {{"x", {2, 12, 12, 8}}, {"w", {8, 1, 5, 5}}},
     {{"channels_last", "1"}, {"groups", "8"}, {"same", "1"}, {"use_bias", "1"}, {"epilogue", "3"}},
     {{"x", "bf16"}, {"y", "bf16"}},
     "conv_depthwise"},
    // Depthwise: stride 2, bias, residual and ReLU; a channel multiplier of 2 with dilation and
    // asymmetric padding; rows wider than a cube (600 columns) with 11 taps (a loop, not
    // unrolled); 3-d.
    {"conv2d",
     {{"x", {2, 6, 13, 35}}, {"w", {6, 1, 3, 3}}},
     {{"groups", "6"},
      {"stride", "2"},
      {"padding", "1"},
      {"use_bias", "1"},
      {"use_residual", "1"},
      {"epilogue", "1"}},
     {},
     "conv_depthwise"},
    {"conv2d",
     {{"x", {1, 4, 9, 11}}, {"w", {8, 1, 3, 3}}},
     {{"groups", "4"}, {"padding", "3"}, {"padding_end", "1"}, {"dilation", "2"}},
     {{"x", "f16"}},
     "conv_depthwise"},
    {"conv1d",
     {{"x", {1, 3, 600}}, {"w", {3, 1, 11}}},
     {{"groups", "3"}, {"padding", "5"}},
     {},
     "conv_depthwise"},
    {"conv3d",
     {{"x", {1, 4, 5, 6, 7}}, {"w", {4, 1, 3, 3, 3}}},
     {{"groups", "4"}, {"same", "1"}},
     {{"x", "bf16"}, {"y", "bf16"}},
     "conv_depthwise"},
    {"conv2d",
     {{"x", {1, 4, 7, 7}}, {"w", {6, 4, 7, 7}}},
     {{"padding", "5"}, {"use_residual", "1"}, {"epilogue", "1"}},
     {{"x", "f16"}},
     "conv_gemm_cpu"},
    // A 1 x 1 layer with 132 positions per item: conv_gemm_cpu rather than the product.
    {"conv2d",
     {{"x", {2, 16, 12, 11}}, {"w", {20, 16, 1, 1}}},
     {{"padding", "0"}, {"use_bias", "1"}, {"use_residual", "1"}, {"epilogue", "1"}},
     {},
     "conv_gemm_cpu"},
    {"conv2d",
     {{"x", {2, 24, 9, 7}}, {"w", {40, 24, 1, 1}}},
     {{"padding", "0"}, {"use_bias", "1"}, {"use_residual", "1"}, {"epilogue", "2"}},
     {},
     "matmul_cpu"},
    {"conv2d",
     {{"x", {2, 9, 7, 24}}, {"w", {40, 24, 1, 1}}},
     {{"padding", "0"}, {"channels_last", "1"}},
     {{"x", "f16"}, {"y", "f16"}},
     "matmul_cpu"},
    {"conv2d",
     {{"x", {2, 8, 9, 10}}, {"w", {16, 4, 3, 3}}},
     {{"groups", "2"},
      {"stride", "2"},
      {"use_bias", "1"},
      {"use_residual", "1"},
      {"epilogue", "3"}},
     {},
     "conv_gemm_cpu"},
    {"conv1d",
     {{"x", {3, 6, 40}}, {"w", {6, 3, 4}}},
     {{"groups", "2"}, {"stride", "3"}, {"padding", "2"}, {"use_bias", "1"}},
     {},
     "conv_direct"},
    {"conv3d",
     {{"x", {1, 6, 7, 5, 4}}, {"w", {8, 4, 3, 3, 3}}},
     {{"channels_last", "1"}, {"same", "1"}, {"dilation", "2"}},
     {},
     "matmul_cpu"},
};

void run_case(Runtime& rt, const ConvCase& c, const std::string& kernel) {
  kernels::RunConfig config;
  config.shapes = c.shapes;
  config.set = c.set;
  config.dtypes = c.dtypes;
  config.repeat = 0;
  config.seed = 20261206;
  auto r = kernels::run(rt, c.op, config);
  KILN_REQUIRE_OK(r);
  INFO("plan: " << r->plan);
  CHECK_THAT(r->plan, Contains(kernel + ":"));
  REQUIRE(r->checks.size() == 1);
  INFO("first bad " << r->checks[0].first_bad << ": got " << r->checks[0].got << ", want "
                    << r->checks[0].want);
  CHECK(r->checks[0].mismatches == 0);
}

TEST_CASE("kiln::lib::conv matches a double reference", "[conv]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  for (const ConvCase& c : kCases) {
    INFO(c.op << " " << c.kernel << " case " << (&c - kCases));
    run_case(*rt, c, c.kernel);
  }
}

TEST_CASE("kiln::lib::conv's implicit GEMM reads a same layer's taps as shifted rows of x",
          "[conv]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  // Padding 1 keeps 11 x 9 (the flat form); no padding (9 x 7), stride 2 or channels last
  // cannot use it.
  for (const auto& [set, flat] :
       {std::pair{std::map<std::string, std::string>{{"padding", "1"}}, true},
        std::pair{std::map<std::string, std::string>{{"padding", "0"}}, false},
        std::pair{std::map<std::string, std::string>{{"padding", "1"}, {"stride", "2"}}, false}}) {
    kernels::RunConfig config;
    config.shapes = {{"x", {2, 5, 11, 9}}, {"w", {7, 5, 3, 3}}};
    config.set = set;
    config.repeat = 0;
    config.seed = 5;
    auto r = kernels::run(*rt, "conv2d", config);
    KILN_REQUIRE_OK(r);
    INFO("plan: " << r->plan);
    CHECK_THAT(r->plan, Contains("conv_gemm_cpu:"));
    CHECK((r->plan.find("each tap's column x shifted") != std::string::npos) == flat);
    REQUIRE(r->checks.size() == 1);
    CHECK(r->checks[0].mismatches == 0);
  }
}

TEST_CASE("kiln::lib::conv's implicit GEMM packs im2col a chunk at a time", "[conv]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  // 3 items of 99 positions x 45 columns: 17,820 bytes of packed im2col per item. Channels last:
  // with positions contiguous in y (NCHW) conv_gemm_cpu packs its own blocks, no chunks.
  const ConvCase c = {"conv2d",
                      {{"x", {3, 11, 9, 5}}, {"w", {7, 5, 3, 3}}},
                      {{"use_bias", "1"}, {"use_residual", "1"}, {"channels_last", "1"}},
                      {},
                      ""};
  for (const auto& [budget, says] :
       {std::pair{"40000", "198 of 297 positions"}, std::pair{"8000", "96 of 297 positions"}}) {
    INFO("KILN_CONV_IM2COL_BYTES=" << budget);
    ::setenv("KILN_CONV_IM2COL_BYTES", budget, 1);
    kernels::RunConfig config;
    config.shapes = c.shapes;
    config.set = c.set;
    config.repeat = 0;
    config.seed = 7;
    auto r = kernels::run(*rt, c.op, config);
    ::unsetenv("KILN_CONV_IM2COL_BYTES");
    KILN_REQUIRE_OK(r);
    INFO("plan: " << r->plan);
    CHECK_THAT(r->plan, Contains(says));
    REQUIRE(r->checks.size() == 1);
    CHECK(r->checks[0].mismatches == 0);
  }
}

// With positions contiguous in y (NCHW) the products are y = w x (1 x 1) and y = w im2col^T
// (every row of C contiguous), the bias put into y first; a 16-bit y with a bias takes the
// transposed form (the bias is not rounded before the sum); NHWC takes it always.
TEST_CASE("kiln::lib::conv picks the product's form by y's layout", "[conv]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  const std::tuple<ConvCase, const char*, bool> cases[] = {
      {{"conv2d",
        {{"x", {2, 5, 8, 9}}, {"w", {6, 5, 3, 3}}},
        {{"use_bias", "1"}, {"use_residual", "1"}, {"epilogue", "1"}},
        {},
        ""},
       "as B of y = w im2col^T",
       true},
      {{"conv2d",
        {{"x", {2, 5, 8, 9}}, {"w", {6, 5, 3, 3}}},
        {{"use_bias", "1"}},
        {{"x", "bf16"}, {"y", "bf16"}},
        ""},
       "as B of y = w im2col^T",
       false},
      {{"conv2d",
        {{"x", {2, 8, 9, 5}}, {"w", {6, 5, 3, 3}}},
        {{"channels_last", "1"}, {"use_residual", "1"}},
        {},
        ""},
       "as B of y = w im2col^T",
       false},
      {{"conv2d",
        {{"x", {2, 16, 5, 7}}, {"w", {12, 16, 1, 1}}},
        {{"padding", "0"}, {"use_bias", "1"}},
        {{"x", "f16"}},
        ""},
       "y = w x per batch item",
       true},
      {{"conv2d",
        {{"x", {2, 16, 5, 7}}, {"w", {12, 16, 1, 1}}},
        {{"padding", "0"}, {"use_bias", "1"}},
        {{"x", "f16"}, {"y", "f16"}},
        ""},
       "y = w x per batch item",
       false},
  };
  int index = 0;
  for (const auto& [c, form, has] : cases) {
    INFO("case " << index++);
    kernels::RunConfig config;
    config.shapes = c.shapes;
    config.set = c.set;
    config.dtypes = c.dtypes;
    config.repeat = 0;
    config.seed = 3;
    auto r = kernels::run(*rt, c.op, config);
    KILN_REQUIRE_OK(r);
    INFO("plan: " << r->plan);
    CHECK((r->plan.find(form) != std::string::npos) == has);
    REQUIRE(r->checks.size() == 1);
    CHECK(r->checks[0].mismatches == 0);
  }
}

TEST_CASE("kiln::lib::conv's backward GEMMs work in chunks of positions", "[conv]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  // 45 columns of 4 bytes: 44 positions per chunk of 8000 bytes, 3 chunks per item of 99 (the
  // weights' gradient, padding 1), 5 per item of 195 (the input's: padding 3, more than the 2
  // of a stride-1 input gradient as a convolution, takes the GEMM and the gather).
  for (const auto& [op, x, w, padding, says] :
       {std::tuple{"conv2d_backward_weight", "x", "dw", "1",
                   "44 of 99 positions at a time, 2 batch items summed"},
        std::tuple{"conv2d_backward_input", "dx", "w", "3",
                   "44 of 195 positions at a time, gathered"}}) {
    INFO(op);
    ::setenv("KILN_CONV_IM2COL_BYTES", "8000", 1);
    kernels::RunConfig config;
    config.shapes = {{x, {2, 5, 11, 9}}, {w, {7, 5, 3, 3}}};
    config.set = {{"padding", padding}};
    config.repeat = 0;
    config.seed = 9;
    auto r = kernels::run(*rt, op, config);
    ::unsetenv("KILN_CONV_IM2COL_BYTES");
    KILN_REQUIRE_OK(r);
    INFO("plan: " << r->plan);
    CHECK_THAT(r->plan, Contains(says));
    for (const auto& check : r->checks) CHECK(check.mismatches == 0);
  }
}

TEST_CASE("kiln::lib::conv on the emulator", "[conv][gpu-paths]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cuda-emu:sm_80", "cuda-emu:sm_90a"}) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    INFO(device);
    const ConvCase direct = {"conv2d",
                             {{"x", {1, 6, 9, 8}}, {"w", {6, 3, 3, 3}}},
                             {{"groups", "2"}, {"stride", "2"}, {"use_bias", "1"}},
                             {{"x", "f16"}},
                             ""};
    run_case(opened.front(), direct, "conv_direct");
    const ConvCase depthwise = {
        "conv2d",
        {{"x", {2, 6, 9, 21}}, {"w", {6, 1, 3, 3}}},
        {{"groups", "6"}, {"padding", "1"}, {"use_bias", "1"}, {"epilogue", "2"}},
        {{"x", "bf16"}},
        ""};
    run_case(opened.front(), depthwise, "conv_depthwise");
    // A dense layer: im2col rows times w^T on the tensor cores, both batch items in one chunk,
    // then (a budget under one item's rows) a chunk per item.
    const ConvCase dense = {
        "conv2d",
        {{"x", {2, 8, 9, 7}}, {"w", {16, 8, 3, 3}}},
        {{"stride", "1"}, {"use_bias", "1"}, {"use_residual", "1"}, {"epilogue", "3"}},
        {{"x", "bf16"}},
        ""};
    const std::string tiles =
        std::string(device) == "cuda-emu:sm_90a" ? "matmul_sm90" : "matmul_ring";
    run_case(opened.front(), dense, tiles);
    ::setenv("KILN_CONV_IM2COL_BYTES", "8000", 1);
    run_case(opened.front(), dense, tiles);
    ::unsetenv("KILN_CONV_IM2COL_BYTES");
    const ConvCase pointwise = {"conv2d",
                                {{"x", {2, 32, 5, 5}}, {"w", {24, 32, 1, 1}}},
                                {{"padding", "0"}, {"use_residual", "1"}, {"epilogue", "1"}},
                                {{"x", "bf16"}},
                                ""};
    run_case(opened.front(), pointwise,
             std::string(device) == "cuda-emu:sm_90a" ? "matmul_sm90" : "matmul_ring");
  }
}

// The backward passes against their double references over the options (strides that skip
// inputs, dilation, asymmetric and "same" padding, groups, NHWC, 1-d and 3-d, 16-bit types).
TEST_CASE("kiln::lib::conv_backward_input and conv_backward_weight match double references",
          "[conv][conv-backward]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  struct Backward {
    int dims;
    std::vector<int64_t> x, w;
    std::map<std::string, std::string> set;
    const char* type;
    const char* input_kernel = "";  // the kernels the plans must name, where given
    const char* weight_kernel = "";
  };
  const Backward cases[] = {
      {2,
       {2, 8, 11, 9},
       {10, 4, 3, 2},
       {{"stride", "2"},
        {"dilation", "2"},
        {"padding", "3"},
        {"padding_end", "0"},
        {"groups", "2"}},
       "f32"},
      {2,
       {2, 9, 11, 16},
       {16, 1, 5, 5},
       {{"channels_last", "1"}, {"groups", "16"}, {"same", "1"}},
       "bf16"},
      {1, {1, 4, 17}, {6, 4, 4}, {{"stride", "3"}}, "f16"},
      {3, {1, 4, 5, 6, 7}, {6, 4, 3, 3, 3}, {{"stride", "2"}, {"padding", "1"}}, "f32"},
      {2, {2, 5, 8, 7}, {6, 5, 3, 3}, {{"dilation", "2"}, {"padding", "2"}}, "bf16-bf16"},
      // Depthwise, stride 1 (the input's gradient a convolution with the flipped taps): padding
      // past (k - 1) d (a negative padding for the flipped one), asymmetric padding with
      // dilation, wide rows; stride 2 (the direct kernel for the input's gradient); a channel
      // multiplier.
      {2,
       {2, 6, 9, 10},
       {6, 1, 3, 3},
       {{"groups", "6"}, {"padding", "4"}},
       "f32",
       "conv_depthwise:",
       "conv_depthwise_grad_weight:"},
      {2,
       {1, 3, 12, 300},
       {3, 1, 3, 5},
       {{"groups", "3"}, {"padding", "2"}, {"padding_end", "0"}, {"dilation", "2"}},
       "f16",
       "conv_depthwise:",
       "conv_depthwise_grad_weight:"},
      {2,
       {2, 4, 11, 9},
       {4, 1, 3, 3},
       {{"groups", "4"}, {"stride", "2"}, {"padding", "1"}},
       "f32",
       "conv_grad_input:",
       "conv_depthwise_grad_weight:"},
      // 1 x 1 layers of at least 2048 positions: dot products along them (conv_weight_dots),
      // rows and columns past whole blocks, positions past whole vectors; x swept (fewer input
      // channels), then dy swept (fewer output channels) with a bf16 gradient.
      {2, {2, 5, 47, 51}, {7, 5, 1, 1}, {{"padding", "0"}}, "f32", "", "conv_weight_dots:"},
      {2,
       {1, 9, 45, 47},
       {3, 9, 1, 1},
       {{"padding", "0"}},
       "bf16-bf16",
       "",
       "cube sweeping dy; 1 batch item"},  // conv_weight_dots's plan
      // Dense stride-1 layers of at least 2048 output positions: each tap as dot products
      // along shifted rows (conv_weight_taps): "same" 3 x 3, rows and channels past whole
      // blocks; 3-d with dilation; an even kernel width with no padding (dx wider than dy).
      {2, {2, 5, 50, 47}, {6, 5, 3, 3}, {{"padding", "1"}}, "f32", "", "conv_weight_taps:"},
      {3,
       {1, 3, 6, 20, 19},
       {5, 3, 3, 3, 3},
       {{"padding", "2"}, {"dilation", "2"}},
       "bf16-bf16",
       "",
       "conv_weight_taps:"},
      {2, {1, 4, 48, 50}, {3, 4, 2, 3}, {{"padding", "0"}}, "f16", "", "conv_weight_taps:"},
      // No batch items: dw and dbias are zeros (the products, which would leave dw as it
      // was, are not taken), for a 1 x 1, a 3 x 3 and a depthwise layer.
      {2, {0, 5, 47, 51}, {7, 5, 1, 1}, {{"padding", "0"}}, "f32", "", "conv_grad_weight:"},
      {2, {0, 4, 50, 47}, {6, 4, 3, 3}, {{"padding", "1"}}, "f32", "", "conv_grad_weight:"},
      {2,
       {0, 6, 12, 12},
       {6, 1, 3, 3},
       {{"padding", "1"}, {"groups", "6"}},
       "f32",
       "",
       "conv_depthwise_grad_weight:"},
      // 3-d depthwise: 27 taps, each with its sum in registers, 4 output rows at a time sharing
      // their input rows (8 rows to a plane), the planes tested apart.
      {3,
       {2, 4, 5, 8, 6},
       {4, 1, 3, 3, 3},
       {{"groups", "4"}, {"padding", "1"}},
       "f32",
       "",
       "conv_depthwise_grad_weight: a cube of 16 units per channel, 27 taps, 4 rows at a time"},
      // Dense stride-1 input gradients as convolutions of dy (conv_gemm_cpu, taps reversed):
      // 3-d "same"; no padding (dx larger than dy); asymmetric padding; more input channels
      // than one block of rows (140); padding past (k - 1) d, which takes the GEMM and gather.
      {3, {1, 3, 5, 6, 7}, {4, 3, 3, 3, 3}, {{"padding", "1"}}, "f32", "conv_gemm_cpu:"},
      {2, {2, 5, 9, 8}, {7, 5, 3, 2}, {{"padding", "0"}}, "f16", "conv_gemm_cpu:"},
      {2,
       {1, 4, 9, 10},
       {5, 4, 3, 3},
       {{"padding", "2"}, {"padding_end", "0"}},
       "bf16-bf16",
       "conv_gemm_cpu:",
       "matmul_cpu:"},
      {2,
       {1, 140, 5, 4},
       {3, 140, 3, 3},
       {{"padding", "1"}},
       "f32",
       "conv_gemm_cpu:",
       "matmul_cpu:"},
      {2,
       {1, 3, 7, 6},
       {4, 3, 3, 3},
       {{"padding", "3"}},
       "f32",
       "gathered by conv_col2im",
       "matmul_cpu:"},
      {2, {4, 3, 20, 20}, {4, 3, 3, 3}, {{"padding", "1"}}, "f32", "", "matmul_cpu:"},
      // No output channels: dx is zeros, dw empty.
      {2, {2, 3, 5, 5}, {0, 3, 3, 3}, {{"padding", "1"}}, "f32", "conv_gemm_cpu:", ""},
      {2,
       {2, 9, 11, 6},
       {8, 6, 3, 3},
       {{"channels_last", "1"}, {"stride", "2"}, {"padding", "1"}},
       "bf16-bf16",
       "",
       "matmul_cpu:"},
      // 1 x 1 layers: matrix products on views, NCHW and NHWC; on the CPU with 144 positions
      // per item the input's gradient is conv_gemm_cpu's.
      {2,
       {2, 8, 12, 12},
       {5, 8, 1, 1},
       {{"padding", "0"}},
       "f32",
       "conv_gemm_cpu:",
       "dw = dy x^T summed over 2 batch items"},
      {2,
       {2, 6, 5, 7},
       {4, 6, 1, 1},
       {{"padding", "0"}},
       "bf16-bf16",
       "dx = w^T dy per batch item",
       "dw = dy x^T summed over 2 batch items"},
      {2,
       {3, 5, 7, 6},
       {4, 6, 1, 1},
       {{"padding", "0"}, {"channels_last", "1"}},
       "f16",
       "dx^T = dy^T w per batch item",
       "dw = dy x^T summed over 3 batch items"},
      {1,
       {2, 3, 20},
       {6, 1, 5},
       {{"groups", "3"}, {"padding", "2"}},
       "bf16-bf16",
       "conv_grad_input:",
       "conv_depthwise_grad_weight:"},
  };
  for (const Backward& c : cases) {
    for (const bool of_input : {true, false}) {
      const std::string op =
          fmt::format("conv{}d_backward_{}", c.dims, of_input ? "input" : "weight");
      INFO(op << " case " << (&c - cases));
      kernels::RunConfig config;
      config.shapes = {{of_input ? "dx" : "x", c.x}, {of_input ? "w" : "dw", c.w}};
      config.set = c.set;
      const std::string type = c.type;
      if (type == "bf16-bf16")  // a bf16 gradient (summed in f32 and rounded once)
        config.dtypes = {{"dy", "bf16"}, {of_input ? "dx" : "dw", "bf16"}};
      else
        config.dtypes = {{"dy", type}};
      config.repeat = 0;
      config.seed = 11;
      auto r = kernels::run(*rt, op, config);
      KILN_REQUIRE_OK(r);
      INFO("plan: " << r->plan);
      const std::string kernel = of_input ? c.input_kernel : c.weight_kernel;
      if (!kernel.empty()) CHECK_THAT(r->plan, Contains(kernel));
      REQUIRE(r->checks.size() == (of_input ? 1u : 2u));
      for (const auto& check : r->checks) {
        INFO(check.name << ": first bad " << check.first_bad << ": got " << check.got << ", want "
                        << check.want);
        CHECK(check.mismatches == 0);
      }
    }
  }
}

// The backward passes are the forward's adjoints, whatever the reference says: for random x,
// w and dy, <conv(x, w), dy> = <x, conv_backward_input(dy, w)> = <w, conv_backward_weight(x,
// dy)>, each side from kiln's own kernels (the forward's implicit GEMM, direct and matmul paths)
// summed in double. This is the finite-difference check made exact: the convolution is linear.
TEST_CASE("kiln::lib::conv's backward passes are the forward's adjoints", "[conv][conv-backward]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu:sm_80"}) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    Runtime& rt = opened.front();
    struct Adjoint {
      std::vector<int64_t> x, w;
      lib::ConvOptions o;
    };
    const Adjoint cases[] = {
        {{2, 6, 10, 9}, {8, 6, 3, 3}, {.stride = {2}, .padding = {1}}},
        {{1, 6, 7, 8},
         {6, 2, 3, 3},
         {.padding = {2}, .padding_end = {0}, .dilation = {2}, .groups = 3}},
        {{2, 8, 5, 5}, {4, 8, 1, 1}, {}},
        {{1, 9, 9, 4},
         {6, 4, 3, 3},
         {.stride = {3, 1}, .same = false, .layout = lib::Layout::Nhwc}},
        // Depthwise (the flipped-tap input gradient and the per-channel weight gradient), and
        // with a channel multiplier.
        {{2, 5, 8, 19}, {5, 1, 3, 3}, {.padding = {1}, .groups = 5}},
        {{1, 3, 7, 9}, {6, 1, 3, 2}, {.stride = {2}, .dilation = {2}, .groups = 3}},
    };
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto random = [&](std::span<const int64_t> shape) {
      auto t = rt.empty(ir::ElemType::F32, shape);
      REQUIRE(t.ok());
      std::vector<float> v(static_cast<size_t>(t->numel()));
      for (float& f : v) f = dist(gen);
      REQUIRE(t->upload(std::span<const float>(v)).ok());
      return std::pair{*t, v};
    };
    auto read = [&](const Tensor& t) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      REQUIRE(rt.sync().ok());
      REQUIRE(t.download(std::span<float>(v)).ok());
      return v;
    };
    auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
      double s = 0;
      for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
      return s;
    };
    for (const Adjoint& c : cases) {
      INFO(device << " case " << (&c - cases));
      auto shape = lib::conv_output_shape(c.x, c.w, c.o);
      REQUIRE(shape.ok());
      auto [x, xv] = random(c.x);
      auto [w, wv] = random(c.w);
      auto [dy, dyv] = random(*shape);
      auto y = rt.empty(ir::ElemType::F32, *shape);
      auto dx = rt.empty(ir::ElemType::F32, c.x);
      auto dw = rt.empty(ir::ElemType::F32, c.w);
      REQUIRE((y.ok() && dx.ok() && dw.ok()));
      KILN_REQUIRE_OK(lib::conv(rt, x, w, *y, c.o));
      KILN_REQUIRE_OK(lib::conv_backward_input(rt, dy, w, *dx, c.o));
      KILN_REQUIRE_OK(lib::conv_backward_weight(rt, x, dy, *dw, c.o));
      const double forward = dot(read(*y), dyv), through_x = dot(xv, read(*dx)),
                   through_w = dot(wv, read(*dw));
      CHECK(through_x == Approx(forward).epsilon(1e-5).margin(1e-4));
      CHECK(through_w == Approx(forward).epsilon(1e-5).margin(1e-4));
    }
  }
}

// dy as a view whose rows are padded (row stride 8 for 6 columns): the bias's gradient walks
// each row's columns (its positions are not dense), and the weights' gradient (dense and
// depthwise) reads the view; both match the same gradients from a contiguous copy of dy, and
// dbias a double sum, on the CPU and the emulator.
TEST_CASE("kiln::lib::conv_backward_weight reads a strided dy", "[conv][conv-backward]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu:sm_80"}) {
    auto opened = test::open_devices({device});
    if (opened.empty()) {
      WARN("skipped: " << device << " is not available here");
      continue;
    }
    Runtime& rt = opened.front();
    for (const int64_t groups : {1, 3}) {
      INFO(device << ", groups " << groups);
      const std::vector<int64_t> xs{2, 3, 5, 6}, ws{6, 3 / groups, 3, 3}, ys{2, 6, 5, 6};
      const lib::ConvOptions o{.padding = {1}, .groups = groups};
      std::mt19937 gen(7);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> xv(2 * 3 * 5 * 6), big(2 * 6 * 5 * 8), dense;
      for (float& f : xv) f = dist(gen);
      for (float& f : big) f = dist(gen);
      double want[6] = {};
      for (int n = 0; n < 2; ++n)
        for (int k = 0; k < 6; ++k)
          for (int h = 0; h < 5; ++h)
            for (int w = 0; w < 6; ++w) {
              const float v = big[static_cast<size_t>(((n * 6 + k) * 5 + h) * 8 + w)];
              dense.push_back(v);
              want[k] += v;
            }
      auto x = rt.empty(ir::ElemType::F32, xs);
      auto dy_big = rt.empty(ir::ElemType::F32, {2, 6, 5, 8});
      auto dy_dense = rt.empty(ir::ElemType::F32, ys);
      REQUIRE((x.ok() && dy_big.ok() && dy_dense.ok()));
      REQUIRE(x->upload(std::span<const float>(xv)).ok());
      REQUIRE(dy_big->upload(std::span<const float>(big)).ok());
      REQUIRE(dy_dense->upload(std::span<const float>(dense)).ok());
      auto dy = Tensor::make(dy_big->device_ptr(), dy_big->buffer(), ir::ElemType::F32, ys,
                             std::vector<int64_t>{240, 40, 8, 1});
      REQUIRE(dy.ok());
      auto dw = rt.empty(ir::ElemType::F32, ws), dw_dense = rt.empty(ir::ElemType::F32, ws);
      auto db = rt.empty(ir::ElemType::F32, {6}), db_dense = rt.empty(ir::ElemType::F32, {6});
      REQUIRE((dw.ok() && dw_dense.ok() && db.ok() && db_dense.ok()));
      KILN_REQUIRE_OK(lib::conv_backward_weight(rt, *x, *dy, *dw, o, &*db));
      KILN_REQUIRE_OK(lib::conv_backward_weight(rt, *x, *dy_dense, *dw_dense, o, &*db_dense));
      REQUIRE(rt.sync().ok());
      std::vector<float> a(static_cast<size_t>(dw->numel())), b(a.size()), da(6), dd(6);
      REQUIRE(dw->download(std::span<float>(a)).ok());
      REQUIRE(dw_dense->download(std::span<float>(b)).ok());
      REQUIRE(db->download(std::span<float>(da)).ok());
      REQUIRE(db_dense->download(std::span<float>(dd)).ok());
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-5));
      for (int k = 0; k < 6; ++k) {
        CHECK(da[static_cast<size_t>(k)] == Approx(want[k]).margin(1e-4));
        CHECK(dd[static_cast<size_t>(k)] == Approx(want[k]).margin(1e-4));
      }
    }
  }
}

TEST_CASE("kiln::lib::conv refuses what it cannot compute, naming it", "[conv]") {
  (void)kernels::builtin_names();
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  auto make = [&](ir::ElemType t, std::initializer_list<int64_t> shape) {
    auto x = rt->empty(t, shape);
    REQUIRE(x.ok());
    return *x;
  };
  const auto F32 = ir::ElemType::F32;
  Tensor x = make(F32, {1, 4, 8, 8}), w = make(F32, {6, 4, 3, 3}), y = make(F32, {1, 6, 6, 6});
  auto fails = [&](const Tensor& a, const Tensor& b, Tensor& c, const lib::ConvOptions& o,
                   const std::string& says) {
    const Status st = lib::conv(*rt, a, b, c, o);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("kiln::lib::conv: ") && Contains(says));
  };
  REQUIRE(lib::conv(*rt, x, w, y).ok());
  fails(x, w, y, {.padding = {1}},
        "y is f32[1, 6, 6, 6]; the convolution's output is [1, 6, 8, 8]");
  fails(x, w, y, {.stride = {1, 2, 3}}, "stride has 3 values; a 2-d convolution takes one");
  fails(x, w, y, {.dilation = {0}}, "dilation is [0]; it must be at least 1");
  fails(x, w, y, {.padding = {-1}}, "padding is [-1]; it must be at least 0");
  fails(x, w, y, {.stride = {2}, .same = true}, "'same' padding needs stride 1");
  fails(x, w, y, {.groups = 3}, "groups is 3: x's 4 channels and w's 6 output channels");
  fails(x, w, y, {.groups = 2}, "its second dimension is C / groups = 4 / 2 = 2");
  fails(x, make(F32, {6, 4, 9, 9}), y, {}, "less than the kernel's extent of 9");
  fails(make(F32, {4, 8, 8}), w, y, {}, "w is [6, 4, 3, 3] and x [4, 8, 8]");
  fails(make(F32, {1, 4}), make(F32, {6, 4}), y, {}, "1 to 3 spatial dimensions");
  fails(make(ir::ElemType::F16, {1, 4, 8, 8}), w, y, {}, "both must hold the same type");
  Tensor y_i32 = make(ir::ElemType::I32, {1, 6, 6, 6});
  fails(x, w, y_i32, {}, "the result is f32 or the inputs' type");
  const Tensor bias = make(F32, {4});
  fails(x, w, y, {.bias = &bias}, "it must be f32[6] (one per output channel)");
  const Tensor residual = make(F32, {1, 6, 6, 5});
  fails(x, w, y, {.residual = &residual}, "it must be y's shape and type, f32[1, 6, 6, 6]");
  Tensor ro = y.as_read_only();
  fails(x, w, ro, {}, "'y' is read-only");
  // The output shape, as PyTorch computes it (Conv2d's docs), NHWC too.
  auto shape =
      lib::conv_output_shape(std::vector<int64_t>{2, 17, 31, 3}, std::vector<int64_t>{8, 3, 3, 5},
                             {.stride = {2, 3},
                              .padding = {1, 2},
                              .padding_end = {0, 2},
                              .dilation = {2, 1},
                              .layout = lib::Layout::Nhwc});
  REQUIRE(shape.ok());
  // H: (17 + 1 + 0 - 2 * 2 - 1) / 2 + 1 = 7; W: (31 + 4 - 4 - 1) / 3 + 1 = 11.
  CHECK(*shape == std::vector<int64_t>{2, 7, 11, 8});
  // The backward passes: dy must be the forward's output for dx's (x's) shape.
  Tensor dx = make(F32, {1, 4, 8, 8}), dw = make(F32, {6, 4, 3, 3});
  const Tensor dy = make(F32, {1, 6, 6, 6});
  auto back_fails = [&](const Status& st, const std::string& says) {
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(says));
  };
  REQUIRE(lib::conv_backward_input(*rt, dy, w, dx).ok());
  REQUIRE(lib::conv_backward_weight(*rt, x, dy, dw).ok());
  back_fails(lib::conv_backward_input(*rt, dy, w, dx, {.padding = {1}}),
             "kiln::lib::conv_backward_input: dy is f32[1, 6, 6, 6]; a convolution of f32[1, 4, 8, "
             "8] by f32[6, 4, 3, 3] gives [1, 6, 8, 8]");
  back_fails(lib::conv_backward_input(*rt, dy, w, dx, {.epilogue = lib::Epilogue::Relu}),
             "the bias, residual and epilogue are the forward pass's");
  back_fails(lib::conv_backward_weight(*rt, x, dy, dw, {.groups = 2}),
             "kiln::lib::conv_backward_weight: w is [6, 4, 3, 3]: its second dimension is C / "
             "groups = 4 / 2 = 2");
  Tensor bad_bias = make(F32, {5});
  back_fails(lib::conv_backward_weight(*rt, x, dy, dw, {}, &bad_bias),
             "dbias is f32[5]; it must be a writable f32[6]");
  Tensor dx16 = make(ir::ElemType::BF16, {1, 4, 8, 8});
  back_fails(lib::conv_backward_input(*rt, dy, w, dx16), "the gradient is f32 or dy's type (f32)");
  // An output whose elements overlap (a broadcast view) is refused, forward and backward.
  auto overlapping = [&](std::initializer_list<int64_t> shape) {
    std::vector<int64_t> strides(shape.size(), 1);
    strides[0] = 0;
    auto t = Tensor::make(x.device_ptr(), x.buffer(), F32, std::vector<int64_t>(shape), strides);
    REQUIRE(t.ok());
    return *t;
  };
  Tensor y_over = overlapping({1, 6, 6, 6});
  fails(x, w, y_over, {}, "has elements that overlap");
  Tensor dw_over = overlapping({6, 4, 3, 3});
  back_fails(lib::conv_backward_weight(*rt, x, dy, dw_over),
             "dw (f32[6, 4, 3, 3]) has elements that overlap");
  // A chunk budget that is not a number of bytes is an error, not ignored.
  ::setenv("KILN_CONV_IM2COL_BYTES", "lots", 1);
  const Status budget = lib::conv_backward_weight(*rt, x, dy, dw);
  ::unsetenv("KILN_CONV_IM2COL_BYTES");
  back_fails(budget, "KILN_CONV_IM2COL_BYTES is 'lots'; it must be a positive number of bytes");
}

}  // namespace
}  // namespace kiln
