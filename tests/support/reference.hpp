// tests/support/reference.hpp - plain-loop reference implementations that the
// tests compare kappa against. Written for clarity, in long double, with no
// Eigen products: an independent path to the same equations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
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
  const Index nq = q.rows(), nkv = k.rows(), d = q.cols(), dv = v.cols();
  RowMatrix<T> y = RowMatrix<T>::Zero(nq, dv);
  if (weights_out) *weights_out = RowMatrix<T>::Zero(nq, nkv);
  // Rows through raw pointers and sums in std::vector: through Eigen's
  // accessors these loops were most of several tests' time at -O0 under the
  // sanitizers. Each sum still runs over j in ascending order.
  std::vector<long double> x(static_cast<std::size_t>(nkv)), a(x.size()),
      acc(static_cast<std::size_t>(dv));
  for (Index i = 0; i < nq; ++i) {
    const T* qi = q.data() + i * d;
    long double m = -std::numeric_limits<long double>::infinity();
    bool any = false;
    for (Index j = 0; j < nkv; ++j) {
      const auto sj = static_cast<std::size_t>(j);
      x[sj] = 0;
      a[sj] = 0;
      if (!visible(i, j)) continue;
      const T* kj = k.data() + j * d;
      long double dot = 0;
      for (Index c = 0; c < d; ++c) dot += (long double)qi[c] * (long double)kj[c];
      x[sj] = (long double)scale * dot;
      m = std::max(m, x[sj]);
      any = true;
    }
    if (!any) continue;
    long double z = 0;
    for (Index j = 0; j < nkv; ++j) {
      const auto sj = static_cast<std::size_t>(j);
      if (!visible(i, j)) continue;
      a[sj] = exponential ? std::exp(x[sj] - m) : f(x[sj]);
      z += a[sj];
    }
    if (z == 0) continue;
    std::fill(acc.begin(), acc.end(), 0.0L);
    for (Index j = 0; j < nkv; ++j) {
      const long double aj = a[static_cast<std::size_t>(j)];
      const T* vj = v.data() + j * dv;
      for (Index c = 0; c < dv; ++c) acc[static_cast<std::size_t>(c)] += aj * (long double)vj[c];
    }
    for (Index c = 0; c < dv; ++c) y(i, c) = static_cast<T>(acc[static_cast<std::size_t>(c)] / z);
    if (weights_out)
      for (Index j = 0; j < nkv; ++j)
        (*weights_out)(i, j) = static_cast<T>(a[static_cast<std::size_t>(j)] / z);
  }
  return y;
}

}  // namespace kappa::testing
