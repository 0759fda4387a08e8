// The main of test_gpu: the GPU tests run on cuda:0, or the whole program reports itself
// skipped (exit code 77, which ctest shows as "Skipped") with the reason. Never passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "tests/gpu/gpu_exec.h"

int main(int argc, char** argv) {
  std::string why;
  if (!kiln::test::gpu(&why)) {
    std::printf("skipped: there is no GPU to run the GPU tests on: %s\n", why.c_str());
    return 77;
  }
  const auto& info = kiln::test::gpu()->device->info();
  std::printf("running on %s: %s, %s, %d SMs\n", info.name.c_str(), info.description.c_str(),
              info.arch.c_str(), info.cores);
  return Catch::Session().run(argc, argv);
}
