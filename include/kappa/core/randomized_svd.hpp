// kappa/core/randomized_svd.hpp - a rank-r SVD by random sampling (Halko,
// Martinsson and Tropp, "Finding structure with randomness", SIAM Review 53,
// 2011; HMT below), and the exact truncated SVD it is measured against.
//
// For A (m x n), target rank r, oversampling p and q power iterations,
// l = min(r + p, min(m, n)):
//
//   Omega  (n x l), entries N(0, 1) from the seed      (HMT Algorithm 4.1)
//   Q      = orth(A Omega)                             (m x l)
//   repeat q times:                                    (HMT Algorithm 4.4)
//     Q    = orth(A orth(A^T Q))
//   B      = Q^T A = U_B S V^T                         (l x n, exact SVD)
//   A_r    = (Q U_B[:, :r]) S[:r] V^T[:r, :]           (m x r, r, r x n)
//
// orth() is a Householder QR (thin Q): re-orthonormalizing between the
// products keeps the columns that belong to small singular values from being
// washed out in floating point (HMT section 4.5), and a rank-deficient sample
// still gives orthonormal columns. Power iterations sharpen a slowly decaying
// spectrum: the range finder then sees (A A^T)^q A, whose singular values are
// sigma_j^(2q+1).
//
// Error (HMT Theorem 10.5, expectation over Omega, p >= 2): with
// tail_r = (sum_{j>r} sigma_j^2)^(1/2),
//     E ||A - Q Q^T A||_F <= (1 + r / (p - 1))^(1/2) tail_r.
// The proof builds a rank-r matrix inside range(Q) that meets the bound; A_r
// is the best rank-r approximation of A inside range(Q) in the Frobenius
// norm, so the bound holds for ||A - A_r||_F too. The optimum (Eckart-Young)
// is tail_r; with l = min(m, n), range(Q) is everything and A_r is the exact
// truncated SVD up to rounding.
//
// Cost: (2 q + 2) m n l multiply-adds for the products, O((m + n) l^2) for
// the QRs and the small SVD - against O(m n min(m, n)) for a full SVD.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/decompositions.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/random.hpp"

namespace kappa {

/// The parameters of randomized_svd(): oversampling p, power iterations q
/// and the seed of the Gaussian test matrix Omega.
struct RandomizedSvdOptions {
  Index oversampling = 10;     ///< p >= 0: Omega has r + p columns (capped at min(m, n))
  Index power_iterations = 2;  ///< q >= 0: products with (A A^T) before the last QR
  std::uint64_t seed = 0;      ///< Omega = seeded_normal_matrix(n, r + p, seed, 1)
};

/// A rank-r factorization A_r = U diag(S) V^T.
template <Scalar T>
struct SvdFactors {
  RowMatrix<T> u;   ///< U (m x r), orthonormal columns
  Vector<T> s;      ///< S (r), non-negative, non-increasing
  RowMatrix<T> vt;  ///< V^T (r x n), orthonormal rows

  [[nodiscard]] Index rank() const { return s.size(); }
  /// A_r = U diag(S) V^T (m x n).
  [[nodiscard]] RowMatrix<T> reconstruct() const {
    RowMatrix<T> us = u * s.asDiagonal();  // (m, r)
    return us * vt;                        // (m, n)
  }
};

namespace detail {
template <Scalar T>
using ColMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

/// Orthonormal columns spanning range(y) (thin Q of a Householder QR).
template <Scalar T>
ColMatrix<T> orthonormal_basis(const ColMatrix<T>& y) {
  const Eigen::HouseholderQR<ColMatrix<T>> qr(y);
  return qr.householderQ() * ColMatrix<T>::Identity(y.rows(), y.cols());
}

/// Checks A and r for both SVDs; returns min(m, n).
template <Scalar T>
Index check_svd_input(const char* what, const ConstMatrixRef<T>& a, Index rank) {
  if (a.rows() < 1 || a.cols() < 1) {
    throw ShapeError(std::string("kappa: ") + what + ": A is " + shape_of(a) +
                     ", it needs at least one row and one column");
  }
  const Index k = std::min(a.rows(), a.cols());
  if (rank < 1 || rank > k) {
    throw std::invalid_argument(
        std::string("kappa: ") + what + ": rank r = " + std::to_string(rank) +
        " must be in [1, min(m, n) = " + std::to_string(k) + "] for A " + shape_of(a));
  }
  if (!a.allFinite()) {
    throw std::invalid_argument(std::string("kappa: ") + what + ": A " + shape_of(a) +
                                " has a NaN or infinite entry");
  }
  return k;
}

/// The rank-r factors of an exact thin SVD of b (Eigen's BDCSVD), computed
/// in double whatever T: as accurate as T can hold, and one BDCSVD
/// instantiation for every scalar type (it is among the costliest Eigen
/// templates to compile, about 14 CPU s with g++ 12).
template <Scalar T>
SvdFactors<T> factors_from_svd(const ColMatrix<T>& b, Index rank) {
  const Eigen::BDCSVD<ColMatrix<double>> svd(b.template cast<double>(),
                                             Eigen::ComputeThinU | Eigen::ComputeThinV);
  SvdFactors<T> f;
  f.u = svd.matrixU().leftCols(rank).template cast<T>();               // (m, r)
  f.s = svd.singularValues().head(rank).template cast<T>();            // (r)
  f.vt = svd.matrixV().leftCols(rank).transpose().template cast<T>();  // (r, n)
  return f;
}
}  // namespace detail

/// Randomized rank-r SVD, A ~= U diag(S) V^T (see the file comment for the
/// algorithm, HMT Algorithms 4.1 and 4.4, and its error bound).
///
/// \param a     A (m x n)
/// \param rank  r, 1 <= r <= min(m, n)
/// \param opt   oversampling p >= 0, power iterations q >= 0, seed
/// \returns U (m x r), S (r), V^T (r x n). The same seed gives the same
///          factors (up to the last place of libm's log/sin/cos in Omega).
/// \throws ShapeError for an empty A; std::invalid_argument naming the values
///         for r outside [1, min(m, n)], p < 0, q < 0 or a non-finite entry.
///
/// ```cpp
/// auto f = kappa::randomized_svd<double>(a, 16, {.oversampling = 8, .power_iterations = 2});
/// kappa::RowMatrix<double> a16 = f.reconstruct();
/// ```
template <Scalar T>
SvdFactors<T> randomized_svd(ConstMatrixRef<T> a, Index rank,
                             const RandomizedSvdOptions& opt = {}) {
  const Index k = detail::check_svd_input<T>("randomized_svd", a, rank);
  if (opt.oversampling < 0 || opt.power_iterations < 0) {
    throw std::invalid_argument(
        "kappa: randomized_svd: oversampling p = " + std::to_string(opt.oversampling) +
        " and power iterations q = " + std::to_string(opt.power_iterations) + " must be >= 0");
  }
  using Mat = detail::ColMatrix<T>;
  const Index l = opt.oversampling >= k - rank ? k : rank + opt.oversampling;
  const Mat omega = seeded_normal_matrix<T>(a.cols(), l, opt.seed, 1.0);  // (n, l)
  Mat q = detail::orthonormal_basis<T>(Mat(a * omega));                   // (m, l)
  for (Index i = 0; i < opt.power_iterations; ++i) {
    const Mat z = detail::orthonormal_basis<T>(Mat(a.transpose() * q));  // (n, l)
    q = detail::orthonormal_basis<T>(Mat(a * z));                        // (m, l)
  }
  const Mat b = q.transpose() * a;  // B = Q^T A (l, n)
  SvdFactors<T> f = detail::factors_from_svd<T>(b, rank);
  f.u = (q * f.u).eval();  // Q U_B (m, r)
  return f;
}

/// The exact truncated SVD A_r = U diag(S) V^T (Eckart-Young optimum of rank
/// r), from Eigen's BDCSVD of the whole A: the reference randomized_svd() is
/// measured against. Cost O(m n min(m, n)).
/// \throws as randomized_svd() for an empty A, a bad r or a non-finite entry.
template <Scalar T>
SvdFactors<T> truncated_svd(ConstMatrixRef<T> a, Index rank) {
  (void)detail::check_svd_input<T>("truncated_svd", a, rank);
  return detail::factors_from_svd<T>(detail::ColMatrix<T>(a), rank);
}

}  // namespace kappa
