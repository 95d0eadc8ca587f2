// kappa/core/decompositions.hpp - Eigen's dense decompositions that kappa
// uses (Householder QR, BDCSVD, complete orthogonal decomposition), and a way
// to compile them once per program instead of once per translation unit.
//
// Eigen's BDCSVD is among the costliest templates to compile: with g++ 12 at
// -O3 it adds about 30 CPU s to every translation unit that runs a randomized
// SVD (core/randomized_svd.hpp), a latent compression (heads/compress.hpp) or
// a Nystrom approximation (attention/nystrom.hpp). A program with several such
// translation units can compile the decompositions once:
//
//   - define KAPPA_EXTERN_DECOMPOSITIONS in every translation unit (for
//     example as a compile definition of the target): the classes below are
//     then declared `extern template`, and their out-of-line members are not
//     compiled there;
//   - in exactly one translation unit, also define
//     KAPPA_INSTANTIATE_DECOMPOSITIONS before including this header: that one
//     compiles them (explicit instantiation definitions).
//
// Compile all of these translation units with the same instruction-set flags
// (-march): Eigen's alignment assumptions depend on them. Without either
// macro this header only includes Eigen's QR and SVD modules.
#pragma once

#include <Eigen/QR>
#include <Eigen/SVD>

namespace kappa::detail {
/// The column-major dynamic matrix the decompositions work on.
template <class T>
using DecompositionMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
}  // namespace kappa::detail

#if defined(KAPPA_EXTERN_DECOMPOSITIONS) || defined(KAPPA_INSTANTIATE_DECOMPOSITIONS)
// Each class once, for both the declarations and the definitions.
#define KAPPA_DECOMPOSITIONS(X)                                                         \
  X(Eigen::HouseholderQR<kappa::detail::DecompositionMatrix<float>>)                    \
  X(Eigen::HouseholderQR<kappa::detail::DecompositionMatrix<double>>)                   \
  X(Eigen::ColPivHouseholderQR<kappa::detail::DecompositionMatrix<double>>)             \
  X(Eigen::CompleteOrthogonalDecomposition<kappa::detail::DecompositionMatrix<double>>) \
  X(Eigen::JacobiSVD<kappa::detail::DecompositionMatrix<double>>)                       \
  X(Eigen::BDCSVD<kappa::detail::DecompositionMatrix<double>>)
#if defined(KAPPA_EXTERN_DECOMPOSITIONS)
#define KAPPA_DECLARE_EXTERN(...) extern template class __VA_ARGS__;
KAPPA_DECOMPOSITIONS(KAPPA_DECLARE_EXTERN)
#undef KAPPA_DECLARE_EXTERN
#endif
#if defined(KAPPA_INSTANTIATE_DECOMPOSITIONS)
#define KAPPA_DEFINE_INSTANCE(...) template class __VA_ARGS__;
KAPPA_DECOMPOSITIONS(KAPPA_DEFINE_INSTANCE)
#undef KAPPA_DEFINE_INSTANCE
#endif
#undef KAPPA_DECOMPOSITIONS
#endif
