# Options. The developer targets default ON only when kappa is the top-level
# project, so add_subdirectory()/FetchContent users get just the library.
include(GNUInstallDirs)

if(PROJECT_IS_TOP_LEVEL)
  set(kappa_dev_default ON)
else()
  set(kappa_dev_default OFF)
endif()

option(KAPPA_BUILD_TESTS "Build kappa's tests" ${kappa_dev_default})
option(KAPPA_BUILD_BENCHMARKS "Build kappa's benchmarks" ${kappa_dev_default})
option(KAPPA_BUILD_EXAMPLES "Build kappa's examples" ${kappa_dev_default})
# The compiled runtime kappa::runtime (kappa/runtime.hpp: a loaded model behind
# a light header; about 4 CPU min to build), built by default only when a
# target links it; ON builds it with the library and installs it, so that
# find_package(kappa) users can link kappa::runtime.
option(KAPPA_BUILD_RUNTIME "Build and install the compiled runtime kappa::runtime" OFF)
# The Python module (python/: pybind11, Debian's pybind11-dev and python3-dev),
# built on kappa::runtime. `pip install .` turns it on in its own build.
option(KAPPA_BUILD_PYTHON "Build the Python module kappa (python/)" OFF)
# The command-line tools kappa-generate and kappa-quantize (examples/generate.cpp,
# examples/quantize.cpp), built and installed into <prefix>/bin. The examples
# build them too (targets generate and quantize), without installing them.
option(KAPPA_BUILD_TOOLS "Build and install the tools kappa-generate and kappa-quantize" OFF)
# The tools compiled for the build machine's instruction set (-march=native):
# for your own machine, not for a binary you copy elsewhere.
option(KAPPA_TOOLS_NATIVE "Compile the tools with -march=native" OFF)
# Install rules (headers, CMake package, pkg-config file, LICENSE): on when kappa
# is the top-level project. A parent project that adds kappa with
# add_subdirectory()/FetchContent gets none of them unless it sets this ON
# (it must, if it installs and exports its own targets that link kappa::kappa).
option(KAPPA_INSTALL "Generate kappa's install rules" ${kappa_dev_default})
option(KAPPA_USE_BLAS "Let Eigen hand large products to a BLAS (EIGEN_USE_BLAS)" OFF)
option(KAPPA_USE_OPENMP "Let Eigen and kappa use OpenMP threads" OFF)
# libFuzzer targets in tests/fuzz (needs clang and KAPPA_BUILD_TESTS); never
# part of the default build.
option(KAPPA_BUILD_FUZZERS "Build kappa's libFuzzer targets (clang only)" OFF)
# One translation unit per public header, each compiled on its own. CI's
# clang build (preset asan) compiles it with the strict warnings as errors, as
# does preset clang-strict. Preset test leaves it out (about 110 CPU s with
# g++): there every header still compiles with g++ through kappa.hpp (the
# demo), only not alone.
option(KAPPA_HEADER_CHECK "Compile every public header on its own" ON)

# Warnings are errors when asked (CI sets KAPPA_WERROR=1 in the environment, so
# the README's own commands are what CI runs).
if(DEFINED ENV{KAPPA_WERROR} AND NOT "$ENV{KAPPA_WERROR}" STREQUAL "0")
  set(kappa_werror_default ON)
else()
  set(kappa_werror_default OFF)
endif()
option(KAPPA_WERROR "Treat warnings in kappa's own code as errors" ${kappa_werror_default})
