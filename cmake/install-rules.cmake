# Install the headers and an exported package config so that downstream
# projects can `find_package(kappa)` and link `kappa::kappa`.
include(CMakePackageConfigHelpers)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/kappa"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" COMPONENT kappa_Development)

install(TARGETS kappa EXPORT kappaTargets INCLUDES
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

set(kappa_config_dir "${CMAKE_INSTALL_DATADIR}/kappa/cmake" CACHE STRING
    "Where kappa's CMake package config is installed (relative to the prefix)")
mark_as_advanced(kappa_config_dir)

write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/kappaConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/kappaConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/kappaConfig.cmake"
  INSTALL_DESTINATION "${kappa_config_dir}")

install(FILES "${PROJECT_BINARY_DIR}/kappaConfig.cmake"
              "${PROJECT_BINARY_DIR}/kappaConfigVersion.cmake"
        DESTINATION "${kappa_config_dir}" COMPONENT kappa_Development)
install(EXPORT kappaTargets NAMESPACE kappa:: DESTINATION "${kappa_config_dir}"
        COMPONENT kappa_Development)
