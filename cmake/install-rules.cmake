# Install the headers and an exported package config so that downstream
# projects can `find_package(kappa)` and link `kappa::kappa`.
include(CMakePackageConfigHelpers)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/kappa"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" COMPONENT kappa_Development)

install(TARGETS kappa EXPORT kappaTargets INCLUDES
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
# kappa::runtime (kappa/runtime.hpp's compiled library), with
# KAPPA_BUILD_RUNTIME: a static library, so the package is then no longer
# architecture-independent.
if(KAPPA_BUILD_RUNTIME)
  install(TARGETS kappa_runtime EXPORT kappaTargets ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
          COMPONENT kappa_Development)
  set(kappa_arch_independent "")
else()
  set(kappa_arch_independent ARCH_INDEPENDENT)
endif()

set(kappa_config_dir "${CMAKE_INSTALL_DATADIR}/kappa/cmake" CACHE STRING
    "Where kappa's CMake package config is installed (relative to the prefix)")
mark_as_advanced(kappa_config_dir)

write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/kappaConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ${kappa_arch_independent})
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/kappaConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/kappaConfig.cmake"
  INSTALL_DESTINATION "${kappa_config_dir}")

install(FILES "${PROJECT_BINARY_DIR}/kappaConfig.cmake"
              "${PROJECT_BINARY_DIR}/kappaConfigVersion.cmake"
        DESTINATION "${kappa_config_dir}" COMPONENT kappa_Development)
install(EXPORT kappaTargets NAMESPACE kappa:: DESTINATION "${kappa_config_dir}"
        COMPONENT kappa_Development)

# pkg-config, for builds without CMake: `pkg-config --cflags kappa` gives the
# include directories of kappa, Eigen and nlohmann/json (compile with
# -std=c++20; the BLAS and OpenMP options are CMake-only). Header-only, so the
# file is architecture-independent: share/pkgconfig.
# The prefix is found from the file's own place (pkg-config's ${pcfiledir}), so
# `cmake --install --prefix <p>` and moved install trees work too.
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_DATADIR}")
  set(kappa_pc_prefix "${CMAKE_INSTALL_PREFIX}")
  cmake_path(ABSOLUTE_PATH CMAKE_INSTALL_INCLUDEDIR BASE_DIRECTORY "${CMAKE_INSTALL_PREFIX}"
             OUTPUT_VARIABLE kappa_pc_includedir)
else()
  file(RELATIVE_PATH kappa_pc_up "/${CMAKE_INSTALL_DATADIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" kappa_pc_up "${kappa_pc_up}")
  set(kappa_pc_prefix "\${pcfiledir}/${kappa_pc_up}")
  set(kappa_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/kappa.pc.in" "${PROJECT_BINARY_DIR}/kappa.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/kappa.pc" DESTINATION "${CMAKE_INSTALL_DATADIR}/pkgconfig"
        COMPONENT kappa_Development)

# The license and the change log go with the headers.
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" "${PROJECT_SOURCE_DIR}/CHANGELOG.md"
        "${PROJECT_SOURCE_DIR}/README.md" DESTINATION "${CMAKE_INSTALL_DOCDIR}"
        COMPONENT kappa_Development)
