# `cmake --install build --prefix P`: headers under P/include/kiln (included as in the source
# tree: "compiler/dsl/dsl.h", "runtime/runtime.h"), the libraries and the `kiln` CLI, the CUDA
# prelude (for reading; the libraries carry their own copy) and a CMake package:
#   find_package(kiln REQUIRED)            # CMAKE_PREFIX_PATH=P
#   kiln_add_kernels(my_kernels my_kernels.cpp)
#   target_link_libraries(my_app PRIVATE kiln::runtime)
# Imported targets: kiln::ir, kiln::compiler, kiln::runtime, kiln::kernels (docs/embedding.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Installed binaries find kiln's libraries next to them, and LLVM where it was linked from.
set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};$ORIGIN")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
foreach(t kiln_ir kiln_compiler kiln_runtime kiln_kernels kiln kiln-nvrtc-worker)
  set_target_properties(${t} PROPERTIES INSTALL_RPATH "${CMAKE_INSTALL_RPATH}"
                                        INSTALL_RPATH_USE_LINK_PATH ON)
endforeach()
set_target_properties(kiln_ir PROPERTIES EXPORT_NAME ir)
set_target_properties(kiln_compiler PROPERTIES EXPORT_NAME compiler)
set_target_properties(kiln_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(kiln_kernels PROPERTIES EXPORT_NAME kernels)

install(TARGETS kiln_ir kiln_compiler kiln_runtime kiln_kernels EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kiln kiln-nvrtc-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers: everything a kernel author or an embedding program includes. The CPU code
# generator's internals include LLVM and stay behind.
foreach(dir ir compiler runtime kernels)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.def"
          PATTERN "cpu/codegen.h" EXCLUDE PATTERN "cpu/gen.h" EXCLUDE
          PATTERN "cpu/math.h" EXCLUDE PATTERN "examples" EXCLUDE)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/compiler/cuda/prelude.cuh
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln)

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/kilnConfig.cmake
                              INSTALL_DESTINATION ${KILN_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR
                                        CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kilnConfig.cmake ${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/kiln_add_kernels.cmake
        DESTINATION ${KILN_CMAKE_DIR})
