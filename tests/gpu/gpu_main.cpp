// The main of test_gpu: the GPU tests run on KILN_TEST_DEVICE (cuda:0 by default, the emulator
// cuda-emu for test_emu), or the whole program reports itself skipped (exit code 77, which ctest
// shows as "Skipped") with the reason. Never passed. Listing the tests needs no device.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/gpu/gpu_exec.h"

int main(int argc, char** argv) {
  ::setenv("KILN_CACHE_DIR", KILN_TEST_CACHE_DIR, 0);  // as test_main.cpp
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  std::string why;
  if (!listing && !kiln::test::gpu(&why)) {
    std::printf("skipped: there is no %s to run the GPU tests on: %s\n", kiln::test::test_device(),
                why.c_str());
    return 77;
  }
  if (!listing) {
    const auto& info = kiln::test::gpu()->device->info();
    std::printf("running on %s: %s, %s, %d %s\n", info.name.c_str(), info.description.c_str(),
                info.arch.c_str(), info.cores, info.host_memory ? "host threads" : "SMs");
  }
  return Catch::Session().run(argc, argv);
}
