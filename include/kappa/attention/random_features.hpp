// kappa/attention/random_features.hpp - random-feature kernels that estimate
// the scaled exponential exp(s q.k) of softmax attention.
//
// Both kernels are feature-map kernels (attention/concepts.hpp): A~ = phi(Q)
// phi(K)^T, so they drop into kappa::attention, MultiHeadAttention and, at
// linear cost O((N_Q + N_KV) m d_V), into linear_attention and the recurrent
// LinearAttentionState. With x' = sqrt(s) x (so that s q.k = q'.k') and m
// random vectors w_i ~ N(0, I_d) (the rows of the projection W, m x d_QK):
//
//  * PositiveRandomFeatures (FAVOR+, Choromanski et al. 2021, "Rethinking
//    attention with Performers"):
//        phi(x)_i = exp(w_i.x' - |x'|^2 / 2) / sqrt(m),   i = 1..m.
//    E[phi(q).phi(k)] = exp(q'.k') since E[exp(w.(q'+k'))] = exp(|q'+k'|^2/2);
//    every feature is positive, so A~ > 0 and Z~ > 0. The variance of one
//    feature's product is exp(2|q'+k'|^2 - |q'|^2 - |k'|^2) - exp(2 q'.k')
//    (i.i.d. rows; divide by m for the estimate).
//  * TrigonometricRandomFeatures (random Fourier features, Rahimi and Recht
//    2007, with the factor that turns the Gaussian kernel into exp):
//        phi(x) = exp(|x'|^2 / 2) [cos(w_i.x'), sin(w_i.x')]_{i=1..m/2} / sqrt(m/2).
//    E[cos(w.(q'-k'))] = exp(-|q'-k'|^2/2), so E[phi(q).phi(k)] = exp(q'.k').
//    The features have both signs: A~ and Z~ may be negative or near zero
//    (the reason FAVOR+ was introduced); m must be even.
//
// Projections (Projection): kIid draws the rows of W independently;
// kOrthogonal draws blocks of d_QK rows that are orthogonal to each other
// (Gram-Schmidt of a Gaussian block, which gives uniformly random directions)
// with lengths drawn independently from the chi distribution with d_QK degrees
// of freedom, so every row is still N(0, I) - the estimator stays unbiased -
// while the rows of a block are no longer independent, which lowers the
// variance (Choromanski et al. 2021, Theorem 2). m need not be a multiple of
// d_QK: the last block is cut.
//
// Seeds: W is drawn from kappa::SeededNormal(seed) (core/random.hpp), so a
// seed gives the same W on every platform up to libm's last-place rounding;
// redraw(seed) draws a new W. The query and key maps use the same W.
//
// Numerical stabilization (on by default, RandomFeatureOptions::stabilize):
//  * queries: each row's largest exponent c_i = max_j (w_j.q_i' - |q_i'|^2/2)
//    is subtracted before exp (PositiveRandomFeatures), and the factor
//    exp(|q_i'|^2/2) is dropped (TrigonometricRandomFeatures). Both multiply
//    row i of A~ and of Z~ by the same positive number, so the estimated
//    weights Z~^-1 A~ and output Y~ are exactly those of the unstabilized
//    estimator (up to rounding): its bias and variance as an estimator of
//    softmax attention are unchanged. What changes is that A~ itself is no
//    longer an unbiased estimate of exp(s q.k) (it is exp(-c_i) times one),
//    and that query features cannot overflow: the largest is 1/sqrt(m).
//  * keys are not shifted: a shift must be the same for every key that a
//    query sees, including keys appended to a LinearAttentionState later, so
//    it cannot depend on the keys. PositiveRandomFeatures' key exponents are
//    bounded above anyway, w.k' - |k'|^2/2 <= |w|^2/2 (about d_QK / 2), so
//    they overflow float only for d_QK above about 150; keys with a large
//    |k'| underflow to zero features (their weight estimate becomes 0).
//    TrigonometricRandomFeatures' key factor exp(|k'|^2/2) overflows float
//    for |k'|^2 > 176, i.e. |k|^2 > 176 / s.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kappa/attention/concepts.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/random.hpp"

namespace kappa::kernels {

/// How the rows w_i of a random-feature projection are drawn.
enum class Projection {
  kIid,         ///< independent N(0, I) rows
  kOrthogonal,  ///< blocks of d_QK mutually orthogonal rows with chi-distributed lengths
};

/// Options of the random-feature kernels.
struct RandomFeatureOptions {
  /// How W is drawn.
  Projection projection = Projection::kOrthogonal;
  /// s in exp(s q.k); unset means 1/sqrt(d_QK), as kernels::Softmax.
  std::optional<double> scale{};
  /// Shift the query exponents (see the file comment); the weights Z^-1 A and
  /// Y do not change, only A and Z by a positive factor per row.
  bool stabilize = true;
};

namespace detail {

/// m x d matrix whose rows are N(0, I_d) vectors drawn from `seed`: i.i.d., or
/// in blocks of d orthogonal rows with chi_d lengths (see the file comment).
inline RowMatrix<double> draw_projection(Index m, Index d, std::uint64_t seed,
                                         Projection projection) {
  SeededNormal g(seed);
  RowMatrix<double> w(m, d);
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < d; ++j) w(i, j) = g.normal();
  if (projection == Projection::kIid) return w;
  for (Index b0 = 0; b0 < m; b0 += d) {
    const Index rows = std::min(d, m - b0);
    auto block = w.middleRows(b0, rows);
    // Modified Gram-Schmidt, twice ("twice is enough") for orthogonality to
    // rounding: row r becomes orthogonal to rows 0..r-1 and of length 1.
    for (Index r = 0; r < rows; ++r) {
      for (int pass = 0; pass < 2; ++pass) {
        for (Index p = 0; p < r; ++p) block.row(r) -= block.row(p).dot(block.row(r)) * block.row(p);
      }
      block.row(r).normalize();
    }
    // Lengths: |g| of an independent Gaussian vector is chi_d distributed.
    for (Index r = 0; r < rows; ++r) {
      double len2 = 0;
      for (Index j = 0; j < d; ++j) {
        const double z = g.normal();
        len2 += z * z;
      }
      block.row(r) *= std::sqrt(len2);
    }
  }
  return w;
}

/// The shared part of the random-feature kernels: the projection W (m x d,
/// kept in double and in float), the scale and the seed.
class RandomProjection {
 public:
  RandomProjection(const char* kind, Index d_qk, Index rows, Index features, std::uint64_t seed,
                   const RandomFeatureOptions& options)
      : d_qk_(d_qk), features_(features), options_(options) {
    const std::string k(kind);
    require_positive(k + ": d_QK", d_qk);
    require_positive(k + ": feature count m", features);
    (void)checked_mul(k + ": m x d_QK", rows, d_qk);
    if (options.scale) {
      require_finite(k + ": scale s", *options.scale);
      if (*options.scale <= 0)
        throw std::invalid_argument("kappa: " + k + ": scale s must be > 0, got " +
                                    std::to_string(*options.scale));
    }
    rows_ = rows;
    redraw(seed);
  }

  void redraw(std::uint64_t seed) {
    seed_ = seed;
    w_ = draw_projection(rows_, d_qk_, seed, options_.projection);
    w_float_ = w_.cast<float>();
  }

  [[nodiscard]] double scale() const {
    return options_.scale.value_or(1.0 / std::sqrt(static_cast<double>(d_qk_)));
  }

  /// (N x rows) matrix of w_i.x' for the rows x of `x`, and |x'|^2 / 2 per row.
  template <Scalar T>
  RowMatrix<T> project(const ConstMatrixRef<T>& x, Vector<T>& half_norm2, const char* kind) const {
    require_shapes(x.cols() == d_qk_, kind, "X", x.rows(), x.cols(), "the projection W", rows_,
                   d_qk_, "X must have d_QK columns, as W");
    const T root = static_cast<T>(std::sqrt(scale()));
    RowMatrix<T> u(x.rows(), rows_);
    if constexpr (std::is_same_v<T, float>) {
      u.noalias() = (root * x) * w_float_.transpose();
    } else {
      u.noalias() = (root * x) * w_.template cast<T>().transpose();
    }
    half_norm2 = (T(0.5) * root * root) * x.rowwise().squaredNorm();
    return u;
  }

  Index d_qk_;
  Index features_;
  Index rows_ = 0;
  RandomFeatureOptions options_;
  std::uint64_t seed_ = 0;
  RowMatrix<double> w_;
  RowMatrix<float> w_float_;
};

}  // namespace detail

/// FAVOR+ positive random features: phi(x)_i = exp(w_i.x' - |x'|^2/2) / sqrt(m),
/// x' = sqrt(s) x, so that E[phi(q).phi(k)] = exp(s q.k) (see the file
/// comment for the variance, the projections and the stabilization).
///
/// ```cpp
/// kappa::kernels::PositiveRandomFeatures feats(/*d_qk=*/64, /*m=*/256, /*seed=*/7);
/// RowMatrix<float> y = kappa::linear_attention(q, k, v, feats);  // O(N m d)
/// ```
class PositiveRandomFeatures {
 public:
  static constexpr const char* kName = "positive random features";

  /// m random features for queries and keys of width d_QK, W drawn from `seed`.
  /// \throws RangeError if d_qk < 1 or features < 1 (naming the value), or
  ///         m x d_QK is too large; std::invalid_argument for a scale that is
  ///         not finite and positive.
  PositiveRandomFeatures(Index d_qk, Index features, std::uint64_t seed,
                         RandomFeatureOptions options = {})
      : p_("PositiveRandomFeatures", d_qk, features, features, seed, options) {}

  /// Draws a new projection W from `seed` (the same seed gives the same W).
  void redraw(std::uint64_t seed) { p_.redraw(seed); }

  /// phi(x) (N x m) for the rows of x (N x d_QK).
  /// \throws ShapeError if x does not have d_QK columns.
  template <Scalar T>
  RowMatrix<T> feature_map(ConstMatrixRef<T> x, FeatureRole role) const {
    Vector<T> half_norm2;
    RowMatrix<T> u = p_.project<T>(x, half_norm2, "PositiveRandomFeatures::feature_map");
    u.colwise() -= half_norm2;  // w_i.x' - |x'|^2 / 2
    if (role == FeatureRole::kQuery && p_.options_.stabilize && u.cols() > 0) {
      u.colwise() -= u.rowwise().maxCoeff();  // row i times exp(-c_i): cancels in Z^-1 A
    }
    const T norm = static_cast<T>(1.0 / std::sqrt(static_cast<double>(p_.features_)));
    u.array() = norm * u.array().exp();
    return u;
  }

  /// The feature count m (the width of phi).
  [[nodiscard]] Index features() const { return p_.features_; }
  /// d_QK, the width of the queries and keys.
  [[nodiscard]] Index d_qk() const { return p_.d_qk_; }
  /// The seed W was drawn from.
  [[nodiscard]] std::uint64_t seed() const { return p_.seed_; }
  /// s in exp(s q.k).
  [[nodiscard]] double scale() const { return p_.scale(); }
  /// The options given at construction.
  [[nodiscard]] const RandomFeatureOptions& options() const { return p_.options_; }
  /// The projection W (m x d_QK), rows w_i.
  [[nodiscard]] const RowMatrix<double>& projection() const { return p_.w_; }

 private:
  detail::RandomProjection p_;
};

/// Trigonometric random Fourier features:
/// phi(x) = exp(|x'|^2/2) [cos(w_i.x'), sin(w_i.x')]_{i=1..m/2} / sqrt(m/2),
/// x' = sqrt(s) x, so that E[phi(q).phi(k)] = exp(s q.k) (see the file
/// comment). The first m/2 columns are the cosines, the last m/2 the sines.
class TrigonometricRandomFeatures {
 public:
  static constexpr const char* kName = "trigonometric random features";

  /// m features (m/2 random frequencies) for width d_QK, W drawn from `seed`.
  /// \throws RangeError if d_qk < 1 or features < 1; std::invalid_argument if
  ///         m is odd (naming it) or the scale is not finite and positive.
  TrigonometricRandomFeatures(Index d_qk, Index features, std::uint64_t seed,
                              RandomFeatureOptions options = {})
      : p_("TrigonometricRandomFeatures", d_qk, even(features) / 2, features, seed, options) {}

  /// Draws a new projection W from `seed`.
  void redraw(std::uint64_t seed) { p_.redraw(seed); }

  /// phi(x) (N x m) for the rows of x (N x d_QK).
  /// \throws ShapeError if x does not have d_QK columns.
  template <Scalar T>
  RowMatrix<T> feature_map(ConstMatrixRef<T> x, FeatureRole role) const {
    Vector<T> half_norm2;
    const RowMatrix<T> u = p_.project<T>(x, half_norm2, "TrigonometricRandomFeatures::feature_map");
    const Index f = u.cols();
    RowMatrix<T> phi(x.rows(), 2 * f);
    phi.leftCols(f).array() = u.array().cos();
    phi.rightCols(f).array() = u.array().sin();
    const T norm = static_cast<T>(1.0 / std::sqrt(static_cast<double>(f)));
    if (role == FeatureRole::kQuery && p_.options_.stabilize) {
      phi *= norm;  // the row factor exp(|q'|^2/2) cancels in Z^-1 A
    } else {
      const Vector<T> row_factor = norm * half_norm2.array().exp();
      phi = row_factor.asDiagonal() * phi;
    }
    return phi;
  }

  /// The feature count m (the width of phi; m/2 frequencies).
  [[nodiscard]] Index features() const { return p_.features_; }
  /// d_QK.
  [[nodiscard]] Index d_qk() const { return p_.d_qk_; }
  /// The seed W was drawn from.
  [[nodiscard]] std::uint64_t seed() const { return p_.seed_; }
  /// s in exp(s q.k).
  [[nodiscard]] double scale() const { return p_.scale(); }
  /// The options given at construction.
  [[nodiscard]] const RandomFeatureOptions& options() const { return p_.options_; }
  /// The frequencies W (m/2 x d_QK), rows w_i.
  [[nodiscard]] const RowMatrix<double>& projection() const { return p_.w_; }

 private:
  static Index even(Index m) {
    if (m > 0 && m % 2 != 0)
      throw std::invalid_argument(
          "kappa: TrigonometricRandomFeatures: feature count m must be even (m/2 cosines and "
          "m/2 sines), got " +
          std::to_string(m));
    return m;
  }
  detail::RandomProjection p_;
};

}  // namespace kappa::kernels
