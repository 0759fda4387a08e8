// Tensor memory and tcgen05 misuse is reported with the DSL line on both backends that run it
// without a GPU, the CPU and the emulator (cuda-emu:sm_100a): a missing mbarrier_init, a copy out
// of tensor memory before the wait, a wait on a phase that never completes, memory not freed
// a multiply into columns that are not allocated, and reads into registers before the wait or
// past the allocation; on the emulator also a store into shared memory a multiply may still be
// reading. The correct version passes on both.
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

// D (128 x 16) = A * B^T over one k step of 16, A and B all ones (so D is 16 everywhere), with
// one mistake chosen by mode: 1 no mbarrier_init, 2 a tmem_load before the wait, 3 a wait with
// the parity of the phase after the one that completes, 4 no tmem_free, 5 a multiply into the
// columns after the allocation, 6 a tmem_read before the wait, 7 a tmem_read of the column after
// the allocation, 8 a store into the multiply's operands before the wait (a GPU may still be
// reading them).
void tm_misuse(Tensor<f32> y, int mode) {
  auto s = shared_array<bf16>(128 * 16);
  auto cs = shared_array<f32>(128 * 16);
  auto bar = shared_array<u64>(1);
  for_range(unit_pos(), 128u * 16u, 128u, [&](u32 i) { s[i] = bf16(1.0f); });
  sync_cube();
  if (mode != 1) mbarrier_init(bar, 0u);
  u32 d = tmem_alloc(32);  // TM_ALLOC
  u32 past = d + 32u;
  auto a = tcgen05_tile_desc(s, 0u, 128, Swizzle::None, 0u);
  auto b = tcgen05_tile_desc(s, 0u, 16, Swizzle::None, 0u);
  tcgen05_mma<bf16>(mode == 5 ? past : d, a, b, 16, false);  // TM_MMA
  tcgen05_commit(bar, 0u);
  if (mode == 2) tmem_load(cs, 0u, d, 16);               // TM_EARLY_LOAD
  if (mode == 6) y[unit_pos()] = tmem_read<f32>(d, 0u);  // TM_EARLY_READ
  if (mode == 8) {
    sync_cube();  // the multiply has been issued (not completed) before every unit's store
    s[unit_pos()] = bf16(2.0f);  // TM_EARLY_STORE
  }
  mbarrier_wait(bar, 0u, mode == 3 ? 1u : 0u);  // TM_WAIT
  tmem_load(cs, 0u, d, 16);
  if (mode == 7) y[unit_pos()] = extract(tmem_read<f32>(d, 30u, 4), 0);  // TM_READ_PAST
  if (mode != 4) tmem_free(d, 32);
  for_range(unit_pos(), 128u * 16u, 128u, [&](u32 i) { y[i] = cs[i]; });
}
KILN_KERNEL(tm_misuse, "y, mode = 0").cube_dim(128);

namespace kiln {
namespace {

using Catch::Contains;

std::string loc(const char* marker) {
  return test::marker_loc("tests/runtime/test_tensor_memory.cpp", marker);
}

TEST_CASE("tensor-memory misuse is reported at its line on the CPU and the emulator",
          "[emulator][tcgen05]") {
  (void)kernels::builtin_names();
  for (const char* device : {"cpu", "cuda-emu:sm_100a"}) {
    auto opened = Runtime::open(device);
    if (!opened) {
      std::printf("skipped on %s: %s\n", device, opened.error().message.c_str());
      continue;
    }
    Runtime& rt = *opened;
    const bool emu = std::string(device) != "cpu";
    INFO("on " << device);
    Tensor y = test::f32_tensor(rt, std::vector<float>(128 * 16, 0.0f));
    auto k = test::kernel(rt, "tm_misuse");
    auto run = [&](int mode) {
      KILN_REQUIRE_OK(rt.launch(k, 1, 128, y, mode));
      return rt.sync();
    };
    KILN_REQUIRE_OK(run(0));
    for (float v : test::to_host<float>(y)) REQUIRE(v == 16.0f);
    // The CPU cannot tell an mbarrier never initialized from one a previous cube left in its
    // arena; the emulator's shadow memory can (the wait reads memory nothing wrote, and can
    // never complete).
    if (emu) {
      Status st = run(1);
      REQUIRE_FALSE(st.ok());
      CHECK_THAT(st.error().message, Contains(loc("TM_WAIT") + ": error:"));
    }
    Status st = run(2);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("TM_EARLY_LOAD")) &&
                                       Contains("tmem_load() while a tcgen05_mma") &&
                                       Contains("mbarrier_wait() first"));
    st = run(3);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains(loc("TM_WAIT")) && Contains("mbarrier wait that can never complete"));
    st = run(4);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains(loc("TM_ALLOC")) && Contains("still allocated") && Contains("tmem_free"));
    st = run(5);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains(loc("TM_MMA")) && Contains("tcgen05_mma into tensor-memory columns that "
                                                   "are not allocated"));
    st = run(6);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains(loc("TM_EARLY_READ")) &&
                                       Contains("tmem_read() while a tcgen05_mma") &&
                                       Contains("mbarrier_wait() first"));
    st = run(7);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message,
               Contains(loc("TM_READ_PAST")) &&
                   Contains("tmem_read() of tensor-memory columns that are not allocated"));
    // The CPU's multiply is done when it returns; on a GPU it runs on, so the emulator holds
    // stores into its operands to the wait for its commit.
    if (emu) {
      st = run(8);
      REQUIRE_FALSE(st.ok());
      CHECK_THAT(st.error().message,
                 Contains(loc("TM_EARLY_STORE")) &&
                     Contains("overwrites bytes that a tcgen05_mma may still be reading"));
    }
  }
}

}  // namespace
}  // namespace kiln
