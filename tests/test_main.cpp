// The Catch2 main shared by all test programs. Tests keep their compiled kernels out of the
// user's cache: KILN_CACHE_DIR defaults to the build's test-cache (ctest can pass only one
// environment variable per discovered test reliably, so the default lives here).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

int main(int argc, char** argv) {
#ifdef KILN_TEST_CACHE_DIR
  ::setenv("KILN_CACHE_DIR", KILN_TEST_CACHE_DIR, 0);
#endif
  return Catch::Session().run(argc, argv);
}
