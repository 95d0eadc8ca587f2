// kappa/nn/norms.hpp - normalization layers (nn/: per-token building blocks
// that depend on core only, so heads/ and transformer/ may both include them).
//
// RMSNorm (Zhang & Sennrich 2019), as used by LLaMA and DeepSeek-V2, row by
// row (one token per row):
//
//     RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g,      g: learned gain (d)
//
// Numerics: NaN in a row gives a NaN row (never zeros, which would hide the
// NaN downstream, e.g. in the latent cache); an infinite entry gives a NaN row
// too (inf / inf). Rows whose squares overflow (|x| ~ 1e20 in float, 1e155 in
// double) or, with eps = 0, underflow are divided by their largest |x_j|
// before squaring, so RMSNorm(c x) = RMSNorm(x) holds over the whole range
// (up to eps). Other rows take the direct one-pass formula.
#pragma once

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// Root-mean-square normalization with a learned gain g (width d).
template <Scalar T>
class RMSNorm {
 public:
  RMSNorm() = default;
  /// Gain of ones (width d) and the given epsilon. \throws RangeError naming
  /// d if it is negative or above kMaxElements; as below for eps.
  explicit RMSNorm(Index d, double eps = 1e-6)
      : gain_(RowVector<T>::Ones(require_allocatable("RMSNorm: width d", d))), eps_(eps) {
    check_eps();
  }
  /// The given gain g (width d). \throws std::invalid_argument if eps < 0 or
  /// not finite.
  explicit RMSNorm(RowVector<T> gain, double eps = 1e-6) : gain_(std::move(gain)), eps_(eps) {
    check_eps();
  }

  [[nodiscard]] Index width() const { return gain_.size(); }
  [[nodiscard]] const RowVector<T>& gain() const { return gain_; }
  [[nodiscard]] double eps() const { return eps_; }

  /// x_i <- x_i / sqrt(mean(x_i^2) + eps) * g for each row x_i of x (N x d),
  /// in place. A zero row stays zero (eps > 0) or becomes zero (eps = 0); a
  /// row holding NaN or inf becomes NaN (see the file comment).
  /// \throws ShapeError unless x has d columns.
  void apply(MatrixRef<T> x) const {
    require_shapes(x.cols() == gain_.size(), "RMSNorm", "x", x.rows(), x.cols(), "the gain g", 1,
                   gain_.size(), "x must have d columns");
    if (x.cols() == 0) return;
    const T d = static_cast<T>(x.cols());
    const T eps = static_cast<T>(eps_);
    // Below this sum of squares, squares may have lost digits to underflow;
    // that only matters when eps does not dominate them.
    const T tiny = std::numeric_limits<T>::min() / std::numeric_limits<T>::epsilon();
    for (Index i = 0; i < x.rows(); ++i) {
      auto row = x.row(i);
      const T ss = row.squaredNorm();
      if (ss <= std::numeric_limits<T>::max() && (ss >= tiny || eps >= tiny)) {
        // The common case, one pass: x / rms * g, with |x / rms| <= sqrt(d).
        const T denom = std::sqrt(ss / d + eps);
        if (denom > T(0)) {
          row = (row.array() * (T(1) / denom) * gain_.array()).matrix();
        } else {
          row.setZero();  // a zero row with eps = 0
        }
      } else if (std::isnan(ss)) {
        row.setConstant(std::numeric_limits<T>::quiet_NaN());
      } else {
        normalize_scaled(row, d, eps);  // overflow, inf, or underflow with eps ~ 0
      }
    }
  }

  /// Returns RMSNorm(x) (N x d).
  [[nodiscard]] RowMatrix<T> operator()(ConstMatrixRef<T> x) const {
    RowMatrix<T> y = x;
    apply(y);
    return y;
  }

 private:
  /// x <- x / sqrt(mean(x^2) + eps) * g for a row whose squares overflow or
  /// underflow: with m = max_j |x_j| and y = x / m (|y| <= 1), the result is
  /// y / sqrt(mean(y^2) + eps / m^2) * g. NaN for an infinite entry; a zero
  /// row stays zero.
  template <class Row>
  void normalize_scaled(Row& row, T d, T eps) const {
    const T m = row.cwiseAbs().maxCoeff();
    if (m == T(0)) {
      row.setZero();
      return;
    }
    if (std::isinf(m)) {
      row.setConstant(std::numeric_limits<T>::quiet_NaN());
      return;
    }
    if (m < T(1) && eps > T(0)) {
      // Tiny x, tiny eps: x^2 may underflow but eps dominates what is lost,
      // and 1 / sqrt(m^2 mean(y^2) + eps) <= 1 / sqrt(eps) is finite.
      const T ms = (row.array() / m).matrix().squaredNorm() / d;
      row = (row.array() * (T(1) / std::sqrt(m * m * ms + eps)) * gain_.array()).matrix();
      return;
    }
    row /= m;                                    // y, |y| <= 1
    const T ms = row.squaredNorm() / d;          // in [1/d, 1]
    const T e = m >= T(1) ? eps / m / m : T(0);  // here m < 1 only with eps = 0
    row = (row.array() * (T(1) / std::sqrt(ms + e)) * gain_.array()).matrix();
  }
  void check_eps() const {
    if (!(eps_ >= 0) || !std::isfinite(eps_))
      throw std::invalid_argument("kappa: RMSNorm eps must be finite and >= 0, got " +
                                  std::to_string(eps_));
  }
  RowVector<T> gain_;
  double eps_ = 1e-6;
};

}  // namespace kappa
