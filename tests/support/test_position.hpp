// tests/support/test_position.hpp - a minimal positional policy for testing
// the hook of multi-head attention (not RoPE: the real one lives in
// include/kappa/embed/). It rotates the first coordinate pair of every row
// by the angle omega * position, so a wrong position offset shows at once.
#pragma once

#include <cmath>

#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"
#include "support/heads_reference.hpp"

namespace kappa::testing {

/// Rotates (x_0, x_1) of row i by omega (first_position + i).
struct FirstPairRotation {
  double omega = 0.3;

  template <Scalar T>
  void apply(MatrixRef<T> x, Index first_position) const {
    if (x.cols() < 2) return;
    for (Index i = 0; i < x.rows(); ++i) {
      const double a = omega * static_cast<double>(first_position + i);
      const T c = static_cast<T>(std::cos(a)), s = static_cast<T>(std::sin(a));
      const T x0 = x(i, 0), x1 = x(i, 1);
      x(i, 0) = c * x0 - s * x1;
      x(i, 1) = s * x0 + c * x1;
    }
  }

  /// The same transformation for the plain-loop reference.
  template <class T>
  RefPosition<T> reference() const {
    const double w = omega;
    return [w](RowMatrix<T>& m, Index first) {
      for (Index i = 0; i < m.rows(); ++i) {
        const long double a = (long double)w * (long double)(first + i);
        const long double x0 = m(i, 0), x1 = m(i, 1);
        m(i, 0) = static_cast<T>(std::cos(a) * x0 - std::sin(a) * x1);
        m(i, 1) = static_cast<T>(std::sin(a) * x0 + std::cos(a) * x1);
      }
    };
  }
};

}  // namespace kappa::testing
