# Compile-fail tests: each file in tests/compile_fail/ must fail to compile with the message
# its `// EXPECT:` line gives (a regular expression), proving that a misuse of the DSL is a
# C++ compile error in plain words.
file(GLOB kiln_compile_fail_sources ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail/*.cpp)
get_target_property(kiln_fmt_includes fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
foreach(src ${kiln_compile_fail_sources})
  get_filename_component(name ${src} NAME_WE)
  file(STRINGS ${src} expect_line REGEX "^// EXPECT: ")
  string(REGEX REPLACE "^// EXPECT: " "" expect "${expect_line}")
  add_test(NAME compile_fail.${name}
           COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -I${PROJECT_SOURCE_DIR} ${src})
  set_tests_properties(compile_fail.${name} PROPERTIES PASS_REGULAR_EXPRESSION "${expect}")
endforeach()
