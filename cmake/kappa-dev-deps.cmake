# The developer targets' own dependencies, checked up front: GoogleTest for
# the tests (KAPPA_BUILD_TESTS), Google Benchmark for the benchmarks
# (KAPPA_BUILD_BENCHMARKS). Both options are ON by default when kappa is the
# top-level project, so a user who only wants to install the library meets
# them first: the message names the Debian packages and the options that turn
# the targets off, and the command that installs the library without them.
set(kappa_dev_deps_hint
    "  To install kappa, neither is needed (README, Install). The library alone:\n"
    "    cmake -B build -DKAPPA_BUILD_TESTS=OFF -DKAPPA_BUILD_BENCHMARKS=OFF -DKAPPA_BUILD_EXAMPLES=OFF\n"
    "    cmake --install build --prefix <prefix>\n"
    "  the library and the tools kappa-generate, kappa-quantize:\n"
    "    cmake --workflow --preset tools && cmake --install build/tools --prefix <prefix>")
if(KAPPA_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    message(FATAL_ERROR
            "kappa: KAPPA_BUILD_TESTS is ON (the default when kappa is the top-level project) "
            "and CMake did not find GoogleTest.\n"
            "  Debian/Ubuntu:  sudo apt-get install -y libgtest-dev\n"
            "  elsewhere:      install GoogleTest and pass -DGTest_DIR=<dir with GTestConfig.cmake>\n"
            "  or turn the tests off: -DKAPPA_BUILD_TESTS=OFF\n" ${kappa_dev_deps_hint})
  endif()
endif()
if(KAPPA_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    message(FATAL_ERROR
            "kappa: KAPPA_BUILD_BENCHMARKS is ON (the default when kappa is the top-level project) "
            "and CMake did not find Google Benchmark.\n"
            "  Debian/Ubuntu:  sudo apt-get install -y libbenchmark-dev\n"
            "  elsewhere:      install it and pass -Dbenchmark_DIR=<dir with benchmarkConfig.cmake>\n"
            "  or turn the benchmarks off: -DKAPPA_BUILD_BENCHMARKS=OFF\n" ${kappa_dev_deps_hint})
  endif()
endif()
