# Run by ctest (test kappa.install_consumer): installs kappa into a temporary
# prefix, then builds and runs tests/consumer twice, once finding kappa with
# find_package(kappa REQUIRED) in that prefix and once with add_subdirectory.
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

# 1. find_package(kappa) from the install prefix.
run("${CMAKE_COMMAND}" -S "${KAPPA_SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/fp" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release
    -DCONSUMER_MODE=find_package)
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/fp")
run("${WORK_DIR}/fp/app")
message(STATUS "app printed: ${last_output}")
message(STATUS "find_package consumer: OK")

# 2. add_subdirectory(kappa): only the library, no tests/benchmarks/examples.
run("${CMAKE_COMMAND}" -S "${KAPPA_SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/sub" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE=Release -DCONSUMER_MODE=add_subdirectory
    "-DKAPPA_SOURCE_DIR=${KAPPA_SOURCE_DIR}")
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/sub")
run("${WORK_DIR}/sub/app")
if(EXISTS "${WORK_DIR}/sub/kappa/tests")
  message(FATAL_ERROR "add_subdirectory(kappa) built kappa's tests: the options must default OFF")
endif()
message(STATUS "add_subdirectory consumer: OK")
