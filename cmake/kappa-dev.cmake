# Helpers for kappa's own tests, benchmarks and examples (never exported).

# Users compile with -Wconversion -Wsign-conversion; our headers are clean
# under them (clang and GCC), and CI's clang build (preset asan) checks it with
# this option ON, together with the header check and -Werror.
option(KAPPA_STRICT_WARNINGS "Add -Wconversion -Wsign-conversion to kappa's own targets" OFF)

# kappa_warnings(<target>): the warning set for our own code.
function(kappa_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
    if(KAPPA_STRICT_WARNINGS)
      target_compile_options(${target} PRIVATE -Wconversion -Wsign-conversion)
    endif()
    if(KAPPA_WERROR)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
  elseif(MSVC)
    target_compile_options(${target} PRIVATE /W4 /permissive-)
    if(KAPPA_WERROR)
      target_compile_options(${target} PRIVATE /WX)
    endif()
  endif()
endfunction()

# kappa_native(<target>): compiled for the build machine's instruction set.
function(kappa_native target)
  target_compile_options(${target} PRIVATE -march=native)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 reports -Wmaybe-uninitialized, and for Eigen's vectorized
    # sin/cos -Wuninitialized, inside its own AVX-512 intrinsics headers
    # (_mm512_undefined_epi32's self-initialization) when Eigen is inlined
    # with -march=native: false positives, fixed in GCC 13.
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized -Wno-uninitialized)
  endif()
endfunction()

# GCC's garbage collector runs often while it instantiates kappa's and
# Eigen's templates; a larger heap before the first collection takes about a
# fifth off the CPU time of a test TU (g++ 12, heads tests at -O1: 82 -> 62 s)
# for about 10% more peak memory (2.1 -> 2.3 GB). Our own targets only.
option(KAPPA_GCC_LARGE_GC_HEAP "Compile kappa's own targets with a larger GCC garbage-collector heap" ON)
if(KAPPA_GCC_LARGE_GC_HEAP AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(--param=ggc-min-expand=400 --param=ggc-min-heapsize=1048576)
endif()

# The sanitized builds link ~80 executables with line tables (preset asan):
# GNU ld took 9.7 s for the transformer tests there, lld 2.2 s. With clang
# and lld at hand (Debian: lld), our own executables link with lld.
find_program(KAPPA_LD_LLD ld.lld)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND KAPPA_LD_LLD)
  set(kappa_use_lld_default ON)
else()
  set(kappa_use_lld_default OFF)
endif()
option(KAPPA_USE_LLD "Link kappa's own executables with lld (default: with clang, where lld is)"
       ${kappa_use_lld_default})
if(KAPPA_USE_LLD)
  add_link_options(-fuse-ld=lld)
endif()

# The test preset builds at -O1 (it checks results; the bench and demo
# presets build -O3). At -O1 GCC 12's -Wmaybe-uninitialized reports false
# positives inside Eigen's storage copy (DenseStorage, "'<unknown>' may be
# used uninitialized") for vectors filled with the comma initializer; clang's
# uninitialized-use warnings still run in CI (presets asan, clang-strict).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_FLAGS_RELEASE MATCHES "(^| )-O1( |$)")
  add_compile_options($<$<CONFIG:Release>:-Wno-maybe-uninitialized>)
endif()

# kappa_shared_decompositions(<target>): Eigen's QR and SVD classes that
# kappa uses are compiled once, in the static library kappa_decompositions,
# and declared extern in the target (kappa/core/decompositions.hpp). A target
# that does not use them links nothing from it. Only for targets with the
# default instruction set (not kappa_native ones).
function(kappa_shared_decompositions target)
  if(NOT TARGET kappa_decompositions)
    set(tu "${PROJECT_BINARY_DIR}/kappa_decompositions.cpp")
    file(CONFIGURE OUTPUT "${tu}"
         CONTENT "#define KAPPA_INSTANTIATE_DECOMPOSITIONS\n#include <kappa/core/decompositions.hpp>\n")
    add_library(kappa_decompositions STATIC "${tu}")
    # Position-independent, so the Python module (a shared object) links the
    # same library as the tests and examples (python/CMakeLists.txt).
    set_target_properties(kappa_decompositions PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_link_libraries(kappa_decompositions PRIVATE kappa::kappa)
    kappa_warnings(kappa_decompositions)
  endif()
  target_compile_definitions(${target} PRIVATE KAPPA_EXTERN_DECOMPOSITIONS)
  target_link_libraries(${target} PRIVATE kappa_decompositions)
endfunction()

# kappa_optimized(<target>): benchmarks measure -O3 -DNDEBUG code, whatever
# the build type. KAPPA_BENCH_OPTIMIZATION replaces -O3 only for preset
# bench-smoke, CI's check that every benchmark builds and runs (not its
# speed): g++ 12 compiles bench_models in 34 s at -O1 against 60 at -O3.
set(KAPPA_BENCH_OPTIMIZATION "-O3" CACHE STRING
    "Optimization flag of the benchmarks (-O3; -O1 in preset bench-smoke, whose timings mean nothing)")
function(kappa_optimized target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE ${KAPPA_BENCH_OPTIMIZATION})
    kappa_native(${target})
  endif()
  target_compile_definitions(${target} PRIVATE NDEBUG)
endfunction()

# The real vocabularies, extracted into the build tree (KAPPA_VOCAB_DIR), and
# the optional target tokenize-peers.
include("${CMAKE_CURRENT_LIST_DIR}/kappa-vocab.cmake")

# ccache, when installed, serves repeated compilations from its cache (CI
# re-runs, switching branches); -DKAPPA_CCACHE=OFF compiles without it. The
# sloppiness lets it cache the TUs that use the tests' precompiled headers.
option(KAPPA_CCACHE "Compile through ccache when it is installed" ON)
if(KAPPA_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(KAPPA_CCACHE_PROGRAM ccache)
  if(KAPPA_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER
        "${CMAKE_COMMAND}" -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        "${KAPPA_CCACHE_PROGRAM}")
  endif()
endif()
