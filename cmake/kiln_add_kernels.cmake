# kiln_add_kernels(TARGET SOURCES...): a shared library of DSL kernels, built so that it works
# both as a plugin (`kiln show K --plugin libTARGET.so`, kiln::load_plugin) and linked into a
# program:
#  - C++20, position-independent, linked to kiln::kernels (the DSL, the runtime and run
#    recipes);
#  - -Wl,-Bsymbolic-functions: the library's kernel functions are its own even when a function
#    of the same name was loaded before it (kiln's built-in `axpy`, another plugin's);
#  - -ffile-prefix-map of the calling project's source folder: DSL source lines in IR dumps,
#    errors and cache keys are relative to it, the same wherever the project is checked out;
#  - a run path to kiln's libraries, so a program that links the library finds them;
#  - a program that links the library keeps it, under --as-needed too (the default of Ubuntu's
#    compilers, and a common flag): nothing in the program calls into it, its kernels register
#    from its static initializers, so an as-needed link would drop it and every kernel name
#    would be unknown. The library is named to the linker once more between
#    --push-state,--no-as-needed and --pop-state, which leaves the program's other libraries
#    as they were.
function(kiln_add_kernels target)
  if(NOT ARGN)
    message(FATAL_ERROR "kiln_add_kernels(${target}): name at least one source file")
  endif()
  add_library(${target} SHARED ${ARGN})
  target_link_libraries(${target} PUBLIC kiln::kernels)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON
                                             BUILD_RPATH "${KILN_LIBRARY_DIR}"
                                             INSTALL_RPATH "${KILN_LIBRARY_DIR}")
  target_compile_options(${target} PRIVATE "-ffile-prefix-map=${CMAKE_SOURCE_DIR}/=")
  target_link_options(${target} PRIVATE "LINKER:-Bsymbolic-functions")
  target_link_options(${target} INTERFACE
                      "LINKER:--push-state,--no-as-needed,$<TARGET_FILE:${target}>,--pop-state")
endfunction()
