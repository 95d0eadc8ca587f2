// kappa/nn/layer_norm.hpp - layer normalization (Ba, Kiros & Hinton 2016), as
// in the original Transformer, GPT-2 and BERT, row by row (one token per row):
//
//     LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * g + b
//
// with the biased variance var(x) = mean((x - mean(x))^2), a learned gain g
// and an optional learned bias b (width d). RMSNorm (nn/norms.hpp) is the
// variant without centring and without b.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// Layer normalization with gain g and optional bias b (width d).
///
/// ```cpp
/// kappa::LayerNorm<float> ln(gain, bias, 1e-5);   // GPT-2: layer_norm_epsilon
/// ln.apply(x);                                     // x (N x d), in place
/// ```
/// A NaN or infinite entry makes its row NaN (never silently zero).
template <Scalar T>
class LayerNorm {
 public:
  LayerNorm() = default;
  /// g = 1, b = 0 (width d), as nn.LayerNorm initialises them.
  explicit LayerNorm(Index d, double eps = 1e-5)
      : gain_(RowVector<T>::Ones(d)), bias_(RowVector<T>::Zero(d)), eps_(eps) {
    check();
  }
  /// The given gain and bias; pass an empty bias for a LayerNorm without one.
  /// \throws ShapeError if the bias is neither empty nor of the gain's width;
  ///         std::invalid_argument if eps < 0 or is not finite.
  LayerNorm(RowVector<T> gain, RowVector<T> bias, double eps = 1e-5)
      : gain_(std::move(gain)), bias_(std::move(bias)), eps_(eps) {
    check();
  }

  [[nodiscard]] Index width() const { return gain_.size(); }
  [[nodiscard]] const RowVector<T>& gain() const { return gain_; }
  /// b, or an empty vector when the norm has no bias.
  [[nodiscard]] const RowVector<T>& bias() const { return bias_; }
  [[nodiscard]] bool has_bias() const { return bias_.size() > 0; }
  [[nodiscard]] double eps() const { return eps_; }

  /// x_i <- (x_i - mean(x_i)) / sqrt(var(x_i) + eps) g + b for each row x_i
  /// of x (N x d), in place. Two passes over the row (mean, then centred
  /// squares), so a large common offset does not cancel the variance; the sums
  /// are accumulated in double for float input. \throws ShapeError unless x
  /// has d columns.
  void apply(MatrixRef<T> x) const {
    require_shapes(x.cols() == gain_.size(), "LayerNorm", "x", x.rows(), x.cols(), "the gain g", 1,
                   gain_.size(), "x must have d columns");
    const Index d = x.cols();
    if (d == 0) return;
    for (Index i = 0; i < x.rows(); ++i) {
      auto row = x.row(i);
      const double mean = row.template cast<double>().sum() / static_cast<double>(d);
      const double var =
          (row.template cast<double>().array() - mean).square().sum() / static_cast<double>(d);
      const T inv = static_cast<T>(1.0 / std::sqrt(var + eps_));
      row.array() = (row.array() - static_cast<T>(mean)) * inv * gain_.array();
      if (has_bias()) row += bias_;
    }
  }

  /// Returns LayerNorm(x) (N x d).
  [[nodiscard]] RowMatrix<T> operator()(ConstMatrixRef<T> x) const {
    RowMatrix<T> y = x;
    apply(y);
    return y;
  }

 private:
  void check() const {
    if (!(eps_ >= 0) || !std::isfinite(eps_))
      throw std::invalid_argument("kappa: LayerNorm eps must be finite and >= 0, got " +
                                  std::to_string(eps_));
    require_shapes(bias_.size() == 0 || bias_.size() == gain_.size(), "LayerNorm", "the bias b", 1,
                   bias_.size(), "the gain g", 1, gain_.size(),
                   "b must be empty (no bias) or as wide as g");
  }
  RowVector<T> gain_;
  RowVector<T> bias_;
  double eps_ = 1e-5;
};

}  // namespace kappa
