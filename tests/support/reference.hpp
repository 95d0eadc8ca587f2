// tests/support/reference.hpp - plain-loop reference implementations that the
// tests compare kappa against. Written for clarity, in long double, with no
// Eigen products: an independent path to the same equations.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kappa/core/matrix.hpp"

namespace kappa::testing {

/// Per-scalar tolerances for comparisons against the references.
template <class T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double kRel = 2e-5;
  static constexpr double kAbs = 2e-6;
};
template <>
struct Tolerance<double> {
  static constexpr double kRel = 1e-12;
  static constexpr double kAbs = 1e-14;
};

/// Max over entries of |a - b| / (abs + rel * max|b|), <= 1 means "close".
template <class A, class B>
double max_scaled_error(const A& a, const B& b, double rel, double abs) {
  double scale = 0;
  for (Eigen::Index i = 0; i < b.rows(); ++i)
    for (Eigen::Index j = 0; j < b.cols(); ++j)
      scale = std::max(scale, std::abs(static_cast<double>(b(i, j))));
  double worst = 0;
  for (Eigen::Index i = 0; i < b.rows(); ++i)
    for (Eigen::Index j = 0; j < b.cols(); ++j) {
      const double d = std::abs(static_cast<double>(a(i, j)) - static_cast<double>(b(i, j)));
      if (std::isnan(d)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, d / (abs + rel * scale));
    }
  return worst;
}

/// Random matrix with entries uniform in [-1, 1], from a fixed seed.
template <class T>
RowMatrix<T> random_matrix(Index rows, Index cols, unsigned seed, double amplitude = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-amplitude, amplitude);
  RowMatrix<T> m(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) m(i, j) = static_cast<T>(u(gen));
  return m;
}

/// visible(i, j) for the reference: which keys query i may see.
using Visibility = std::function<bool(Index, Index)>;

/// Reference attention by the definition, in long double:
/// A_ij = f(s <q_i, k_j>) if visible(i, j) else 0; Z_ii = sum_j A_ij;
/// Y_i = (1 / Z_ii) sum_j A_ij V_j, or 0 if Z_ii == 0 or no key is visible.
/// `f` receives the scaled score; for the exponential the reference subtracts
/// the row max itself (in long double) to stay finite.
template <class T>
RowMatrix<T> reference_attention(const RowMatrix<T>& q, const RowMatrix<T>& k,
                                 const RowMatrix<T>& v, double scale,
                                 const std::function<long double(long double)>& f, bool exponential,
                                 const Visibility& visible, RowMatrix<T>* weights_out = nullptr) {
  const Index nq = q.rows(), nkv = k.rows(), dv = v.cols();
  RowMatrix<T> y = RowMatrix<T>::Zero(nq, dv);
  if (weights_out) *weights_out = RowMatrix<T>::Zero(nq, nkv);
  for (Index i = 0; i < nq; ++i) {
    Eigen::ArrayX<long double> x = Eigen::ArrayX<long double>::Zero(nkv);
    long double m = -std::numeric_limits<long double>::infinity();
    bool any = false;
    for (Index j = 0; j < nkv; ++j) {
      if (!visible(i, j)) continue;
      long double dot = 0;
      for (Index c = 0; c < q.cols(); ++c) dot += (long double)q(i, c) * (long double)k(j, c);
      x[j] = (long double)scale * dot;
      m = std::max(m, x[j]);
      any = true;
    }
    if (!any) continue;
    Eigen::ArrayX<long double> a = Eigen::ArrayX<long double>::Zero(nkv);
    long double z = 0;
    for (Index j = 0; j < nkv; ++j) {
      if (!visible(i, j)) continue;
      a[j] = exponential ? std::exp(x[j] - m) : f(x[j]);
      z += a[j];
    }
    if (z == 0) continue;
    for (Index c = 0; c < dv; ++c) {
      long double acc = 0;
      for (Index j = 0; j < nkv; ++j) acc += a[j] * (long double)v(j, c);
      y(i, c) = static_cast<T>(acc / z);
    }
    if (weights_out)
      for (Index j = 0; j < nkv; ++j) (*weights_out)(i, j) = static_cast<T>(a[j] / z);
  }
  return y;
}

}  // namespace kappa::testing
