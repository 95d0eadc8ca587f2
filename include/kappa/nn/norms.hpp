// kappa/nn/norms.hpp - normalization layers (nn/: per-token building blocks
// that depend on core only, so heads/ and transformer/ may both include them).
//
// RMSNorm (Zhang & Sennrich 2019), as used by LLaMA and DeepSeek-V2, row by
// row (one token per row):
//
//     RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g,      g: learned gain (d)
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// Root-mean-square normalization with a learned gain g (width d).
template <Scalar T>
class RMSNorm {
 public:
  RMSNorm() = default;
  /// Gain of ones (width d) and the given epsilon.
  explicit RMSNorm(Index d, double eps = 1e-6) : gain_(RowVector<T>::Ones(d)), eps_(eps) {
    check_eps();
  }
  /// The given gain g (width d). \throws std::invalid_argument if eps < 0.
  explicit RMSNorm(RowVector<T> gain, double eps = 1e-6) : gain_(std::move(gain)), eps_(eps) {
    check_eps();
  }

  [[nodiscard]] Index width() const { return gain_.size(); }
  [[nodiscard]] const RowVector<T>& gain() const { return gain_; }
  [[nodiscard]] double eps() const { return eps_; }

  /// x_i <- x_i / sqrt(mean(x_i^2) + eps) * g for each row x_i of x (N x d),
  /// in place. A zero row stays zero (eps > 0) or becomes zero (eps = 0).
  /// \throws ShapeError unless x has d columns.
  void apply(MatrixRef<T> x) const {
    require_shapes(x.cols() == gain_.size(), "RMSNorm", "x", x.rows(), x.cols(), "the gain g",
                   1, gain_.size(), "x must have d columns");
    for (Index i = 0; i < x.rows(); ++i) {
      const T ms = x.row(i).squaredNorm() / static_cast<T>(x.cols());
      const T denom = std::sqrt(ms + static_cast<T>(eps_));
      if (denom > T(0)) {
        x.row(i) = (x.row(i).array() * gain_.array() / denom).matrix();
      } else {
        x.row(i).setZero();
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
  void check_eps() const {
    if (!(eps_ >= 0)) throw std::invalid_argument("kappa: RMSNorm eps must be >= 0, got " + std::to_string(eps_));
  }
  RowVector<T> gain_;
  double eps_ = 1e-6;
};

}  // namespace kappa
