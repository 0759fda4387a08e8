# kiln's third-party libraries, as targets: fmt::fmt, CLI11::CLI11, nlohmann_json::nlohmann_json,
# kiln_xxhash and (for the tests) Catch2::Catch2 with Catch.cmake on the module path.
#
# Two sources, never mixed:
#  - the system's Debian packages (the default; setup.sh installs them);
#  - KILN_DEPS_PREFIX: a folder made by tools/gpu-pack.sh with the header-only forms of all five,
#    for a machine that has none of them and cannot install them (the GPU bring-up machine).
#    Then no package is searched for: what the pack lacks is an error here, not a header quietly
#    taken from /usr/include (the gpu_kit test checks the compiler's dependency lists too).
if(KILN_DEPS_PREFIX)
  set(_inc ${KILN_DEPS_PREFIX}/include)
  foreach(_h fmt/format.h fmt/format-inl.h CLI/CLI.hpp nlohmann/json.hpp xxhash.h catch2/catch.hpp)
    if(NOT EXISTS ${_inc}/${_h})
      message(FATAL_ERROR "KILN_DEPS_PREFIX=${KILN_DEPS_PREFIX} has no include/${_h}; "
                          "make the pack again with tools/gpu-pack.sh")
    endif()
  endforeach()
  foreach(_f Catch.cmake CatchAddTests.cmake)
    if(NOT EXISTS ${KILN_DEPS_PREFIX}/cmake/${_f})
      message(FATAL_ERROR "KILN_DEPS_PREFIX=${KILN_DEPS_PREFIX} has no cmake/${_f}")
    endif()
  endforeach()
  message(STATUS "kiln: dependencies from the pack in ${KILN_DEPS_PREFIX} (header-only)")
  # The pack's include folder comes before the system's for every target; each library is
  # then an interface target that adds only its header-only switch.
  include_directories(BEFORE SYSTEM ${_inc})
  add_library(fmt::fmt INTERFACE IMPORTED GLOBAL)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
  add_library(CLI11::CLI11 INTERFACE IMPORTED GLOBAL)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED GLOBAL)
  add_library(Catch2::Catch2 INTERFACE IMPORTED GLOBAL)
  add_library(kiln_xxhash INTERFACE)
  target_compile_definitions(kiln_xxhash INTERFACE XXH_INLINE_ALL)
  list(APPEND CMAKE_MODULE_PATH ${KILN_DEPS_PREFIX}/cmake)
  set(KILN_HAVE_CATCH2 ON)
else()
  find_package(fmt REQUIRED)
  find_package(CLI11 REQUIRED)
  find_package(nlohmann_json REQUIRED)
  find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
  find_library(XXHASH_LIBRARY xxhash REQUIRED)
  add_library(kiln_xxhash INTERFACE)
  target_include_directories(kiln_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
  target_link_libraries(kiln_xxhash INTERFACE ${XXHASH_LIBRARY})
  if(KILN_BUILD_TESTS)
    find_package(Catch2 2 REQUIRED)
  endif()
endif()
