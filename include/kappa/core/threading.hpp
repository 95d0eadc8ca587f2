// kappa/core/threading.hpp - how many threads kappa (and Eigen) may use.
//
// The thread count is the user's choice. Without OpenMP (the default build)
// everything runs on the calling thread. With OpenMP (CMake option
// KAPPA_USE_OPENMP, or a find_package user linking kappa::openmp) kappa
// follows Eigen::nbThreads(), which the user sets with
// kappa::set_num_threads(); kappa never starts more threads than that, and
// results do not depend on the thread count beyond rounding (kappa's own
// loops are in fact bitwise identical: work is split by rows or columns and
// each is computed alone; Eigen's GEMM, which prompts use in builds without
// AVX2 or AVX-512, chooses its blocks by the thread count).
//
// Whether threads are available is a property of the translation unit (it is
// compiled with OpenMP or not): has_openmp() says so, and set_num_threads()
// returns the count it could set, so a program can tell its user that a
// request for more threads had no effect.
#pragma once

#include <Eigen/Core>

namespace kappa {

/// Whether this translation unit is compiled with OpenMP (so that
/// set_num_threads() has an effect).
inline constexpr bool has_openmp() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

/// The number of threads kappa's parallel loops use (1 without OpenMP).
inline int num_threads() {
#ifdef _OPENMP
  return Eigen::nbThreads();
#else
  return 1;
#endif
}

/// Sets the number of threads for kappa's parallel loops and Eigen's GEMM
/// (n < 1 counts as 1) and returns the number now in effect: n, or 1 in a
/// build without OpenMP, where it has no effect.
inline int set_num_threads(int n) {
  Eigen::setNbThreads(n < 1 ? 1 : n);
  return num_threads();
}

}  // namespace kappa
