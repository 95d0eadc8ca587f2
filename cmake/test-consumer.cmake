# Run by ctest (test kappa.install_consumer): installs kappa into a temporary
# prefix, then builds and runs tests/consumer twice, once finding kappa with
# find_package(kappa REQUIRED) in that prefix (with the component openmp:
# kappa::openmp must make set_num_threads work) and once with add_subdirectory;
# then compiles it once more with the flags of the installed pkg-config file.
# Also checks that the prefix holds the license and version header, and that a
# parent using add_subdirectory installs none of kappa's files by default.
foreach(var KAPPA_BUILD_DIR KAPPA_SOURCE_DIR WORK_DIR GENERATOR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "test-consumer.cmake: ${var} is not set")
endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run("${CMAKE_COMMAND}" --install "${KAPPA_BUILD_DIR}" --prefix "${prefix}")
foreach(f include/kappa/kappa.hpp include/kappa/version.hpp share/doc/kappa/LICENSE
          share/doc/kappa/CHANGELOG.md share/pkgconfig/kappa.pc share/kappa/cmake/kappaConfig.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "the install prefix lacks ${f}")
endif()
endforeach()

# The consumers build with no build type (the compiler's -O0): they check the
# packaging, and at -O3 the umbrella header's compile was ~100 s of one core,
# the longest test of the test preset.
# 1. find_package(kappa) from the install prefix.
run("${CMAKE_COMMAND}" -S "${KAPPA_SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/fp" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=
    -DCONSUMER_MODE=find_package)
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/fp")
run("${WORK_DIR}/fp/app")
message(STATUS "app printed: ${last_output}")
# The component openmp (kappa::openmp), where the compiler has OpenMP.
if(EXISTS "${WORK_DIR}/fp/app_openmp")
  run("${WORK_DIR}/fp/app_openmp")
  message(STATUS "app_openmp printed: ${last_output}")
else()
  message(STATUS "no OpenMP for ${CXX}: kappa::openmp not checked")
endif()
# The component dist (kappa::dist), where MPI is: built (linking MPI), not run
# (that takes mpiexec).
if(EXISTS "${WORK_DIR}/fp/app_dist")
  message(STATUS "app_dist built against kappa::dist")
else()
  message(STATUS "no MPI: kappa::dist not checked")
endif()
message(STATUS "find_package consumer: OK")

# 2. add_subdirectory(kappa): only the library, no tests/benchmarks/examples.
run("${CMAKE_COMMAND}" -S "${KAPPA_SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/sub" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE= -DCONSUMER_MODE=add_subdirectory
    "-DKAPPA_SOURCE_DIR=${KAPPA_SOURCE_DIR}")
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/sub")
run("${WORK_DIR}/sub/app")
if(EXISTS "${WORK_DIR}/sub/kappa/tests")
  message(FATAL_ERROR "add_subdirectory(kappa) built kappa's tests: the options must default OFF")
endif()
run("${CMAKE_COMMAND}" --install "${WORK_DIR}/sub" --prefix "${WORK_DIR}/sub-prefix")
if(NOT EXISTS "${WORK_DIR}/sub-prefix/bin/app" OR EXISTS "${WORK_DIR}/sub-prefix/include/kappa")
  message(FATAL_ERROR "add_subdirectory(kappa): the parent's install must hold its app and none of kappa's files (KAPPA_INSTALL defaults OFF)")
endif()
message(STATUS "add_subdirectory consumer: OK")

# 3. pkg-config: the installed kappa.pc gives the include flags.
find_program(PKG_CONFIG_EXE NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG_EXE)
  message(FATAL_ERROR "pkg-config is missing (Debian/Ubuntu: apt-get install pkg-config)")
endif()

set(ENV{PKG_CONFIG_PATH} "${prefix}/share/pkgconfig")
run("${PKG_CONFIG_EXE}" --cflags kappa)
string(STRIP "${last_output}" cflags)
# The first -I is kappa's own; it must resolve to the prefix the files went to.
string(REGEX MATCH "-I([^ ]+)" kappa_flag "${cflags}")
file(REAL_PATH "${CMAKE_MATCH_1}" pc_include)
file(REAL_PATH "${prefix}/include" want_include)
if(NOT pc_include STREQUAL want_include)
  message(FATAL_ERROR "pkg-config --cflags kappa gave '${cflags}': its -I is not ${want_include}")
endif()
run("${PKG_CONFIG_EXE}" --modversion kappa)
string(STRIP "${last_output}" pc_version)
separate_arguments(cflag_list UNIX_COMMAND "${cflags}")
run("${CXX}" -std=c++20 -O1 ${cflag_list} "-DCONSUMER_EXPECTED_VERSION=\"${pc_version}\""
    "${KAPPA_SOURCE_DIR}/tests/consumer/main.cpp" -o "${WORK_DIR}/pc-app")
run("${WORK_DIR}/pc-app")
message(STATUS "pkg-config consumer (${pc_version}): OK")

