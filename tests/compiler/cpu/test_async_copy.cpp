// Per-unit asynchronous copies (cp.async) on the backends that run them without a GPU, the CPU
// and the emulator: a tile copied 16 bytes per unit with zeros past the tensor's end, and a
// misaligned copy reported at its DSL line.
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

// async_tile is in async_copy_kernels.cpp, which the CUDA compile tests build for every target.

namespace kiln {
namespace {

using Catch::Contains;

TEST_CASE("copy_async copies 16 bytes per unit, zeros when not valid", "[async]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu"}) {
    auto opened = Runtime::open(device);
    if (!opened) {
      WARN("skipped on " << device << ": " << opened.error().message);
      continue;
    }
    Runtime& rt = *opened;
    INFO("on " << device);
    const int64_t R = 20;
    std::vector<float> host(R * 32);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f + 1.0f;
    Tensor src = test::tensor_from(rt, ir::ElemType::F32, host, {R, 32});
    auto k = test::kernel(rt, "async_tile");
    for (uint32_t r0 : {0u, 4u, 10u}) {
      INFO("from row " << r0);
      Tensor out = test::f32_tensor(rt, std::vector<float>(512, -1.0f));
      KILN_REQUIRE_OK(rt.launch(k, 1, 32, src, out, r0, 0));
      KILN_REQUIRE_OK(rt.sync());
      const auto got = test::to_host<float>(out);
      for (uint32_t r = 0; r < 16; ++r)
        for (uint32_t c = 0; c < 32; ++c) {
          const float want = r0 + r < R ? host[(r0 + r) * 32 + c] : 0.0f;
          REQUIRE(got[r * 32 + c] == want);
        }
    }
    Tensor out = test::f32_tensor(rt, std::vector<float>(512, -1.0f));
    Status st = rt.launch(k, 1, 32, src, out, 0u, 1);
    if (st.ok()) st = rt.sync();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(test::marker_loc(
                                       "tests/compiler/cpu/async_copy_kernels.cpp", "ASYNC_COPY")));
    CHECK_THAT(st.error().message, Contains("16-byte aligned"));
  }
}

}  // namespace
}  // namespace kiln
