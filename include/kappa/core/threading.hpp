// kappa/core/threading.hpp - how many threads kappa (and Eigen) may use.
//
// The thread count is the user's choice. Without OpenMP (the default build)
// everything runs on the calling thread. With OpenMP (CMake option
// KAPPA_USE_OPENMP) kappa follows Eigen::nbThreads(), which the user sets with
// kappa::set_num_threads(); kappa never starts more threads than that, and
// results do not depend on the thread count beyond rounding (they are in fact
// bitwise identical: work is split by rows and each row is computed alone).
#pragma once

#include <Eigen/Core>

namespace kappa {

/// Sets the number of threads for kappa's parallel loops and Eigen's GEMM.
/// Has no effect in a build without OpenMP.
inline void set_num_threads(int n) {
  Eigen::setNbThreads(n < 1 ? 1 : n);
}

/// The number of threads kappa's parallel loops use (1 without OpenMP).
inline int num_threads() {
#ifdef _OPENMP
  return Eigen::nbThreads();
#else
  return 1;
#endif
}

}  // namespace kappa
