// kiln::lib::conv against a double reference through `kiln run conv1d|conv2d|conv3d`'s runner:
// 1-, 2- and 3-d, NCHW and NHWC, odd sizes, stride, dilation, symmetric, asymmetric and "same"
// padding (larger than half the kernel too), groups from dense to depthwise, bias, residual and
// every activation, every type pair; the 1 x 1 convolutions that run as matmul; the same on
// the emulator; and the errors of the host API.
#include <catch2/catch.hpp>

#include <map>
#include <string>
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
    {"conv2d", {{"x", {2, 5, 11, 9}}, {"w", {7, 5, 3, 3}}}, {}, {}, "conv_direct"},
    {"conv2d",
     {{"x", {1, 6, 13, 10}}, {"w", {10, 3, 3, 2}}},
     {{"stride", "2"}, {"dilation", "2"}, {"padding", "3"}, {"padding_end", "0"}, {"groups", "2"}},
     {},
     "conv_direct"},
    {"conv2d",
     {{"x", {2, 12, 12, 8}}, {"w", {8, 1, 5, 5}}},
     {{"channels_last", "1"}, {"groups", "8"}, {"same", "1"}, {"use_bias", "1"}, {"epilogue", "3"}},
     {{"x", "bf16"}, {"y", "bf16"}},
     "conv_direct"},
    {"conv2d",
     {{"x", {1, 4, 7, 7}}, {"w", {6, 4, 7, 7}}},
     {{"padding", "5"}, {"use_residual", "1"}, {"epilogue", "1"}},
     {{"x", "f16"}},
     "conv_direct"},
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
    {"conv1d",
     {{"x", {3, 6, 40}}, {"w", {6, 3, 4}}},
     {{"groups", "2"}, {"stride", "3"}, {"padding", "2"}, {"use_bias", "1"}},
     {},
     "conv_direct"},
    {"conv3d",
     {{"x", {1, 6, 7, 5, 4}}, {"w", {8, 4, 3, 3, 3}}},
     {{"channels_last", "1"}, {"same", "1"}, {"dilation", "2"}},
     {},
     "conv_direct"},
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
    const ConvCase pointwise = {"conv2d",
                                {{"x", {2, 32, 5, 5}}, {"w", {24, 32, 1, 1}}},
                                {{"padding", "0"}, {"use_residual", "1"}, {"epilogue", "1"}},
                                {{"x", "bf16"}},
                                ""};
    run_case(opened.front(), pointwise,
             std::string(device) == "cuda-emu:sm_90a" ? "matmul_sm90" : "matmul_ring");
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
}

}  // namespace
}  // namespace kiln
