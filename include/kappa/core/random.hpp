// kappa/core/random.hpp - the seeded generator behind kappa's deterministic
// initializations (embedding tables, learned positions, init_random() of the
// layers).
//
// The stream is specified exactly, so that the same seed gives the same
// numbers on every platform and standard library (std::normal_distribution
// and std::uniform_real_distribution do not promise that), and so that a
// reference script can reproduce it (tests/reference/make_embed_golden.py):
//   splitmix64:  s += 0x9E3779B97F4A7C15; z = s;
//                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//                z = (z ^ (z >> 27)) * 0x94D049BB133111EB;  return z ^ (z >> 31)
//   uniform:     u = ((z >> 11) + 1) * 2^-53, in (0, 1]
//   symmetric:   v = 2 u - 1, in (-1, 1] (exact in double)
//   normal pair: Box-Muller, r = sqrt(-2 ln u1), (r cos 2 pi u2, r sin 2 pi u2)
// Matrices are filled in row-major order: normal ones with
// stddev * (z0, z1, z0, z1, ...), uniform ones with bound * v, one draw each.
// The uniform stream involves only exact operations and one rounding (the
// product bound * v), so it is bit-identical on every IEEE-754 platform; the
// normal stream goes through log, cos and sin, which libm implementations may
// round differently in the last place.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// splitmix64 with uniform and Box-Muller normal draws; see the file comment.
class SeededNormal {
 public:
  explicit SeededNormal(std::uint64_t seed) noexcept : state_(seed) {}

  std::uint64_t next_u64() noexcept {
    state_ += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1].
  double uniform() noexcept { return static_cast<double>((next_u64() >> 11) + 1) * 0x1.0p-53; }
  /// Uniform in (-1, 1]: 2 u - 1 (mean 0, variance 1/3).
  double symmetric() noexcept { return 2.0 * uniform() - 1.0; }
  /// Standard normal N(0, 1).
  double normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

/// A rows x cols matrix of N(0, stddev^2) entries from `seed` (row-major order).
/// \throws RangeError naming the sizes if one is negative or rows x cols
///         exceeds kMaxElements (core/checked.hpp), before allocating.
template <Scalar T>
RowMatrix<T> seeded_normal_matrix(Index rows, Index cols, std::uint64_t seed, double stddev) {
  require_nonnegative("seeded normal matrix: rows", rows);
  require_nonnegative("seeded normal matrix: cols", cols);
  (void)checked_mul("seeded normal matrix: rows x cols", rows, cols);
  SeededNormal g(seed);
  RowMatrix<T> m(rows, cols);
  T* p = m.data();
  for (Index k = 0; k < rows * cols; ++k) p[k] = static_cast<T>(stddev * g.normal());
  return m;
}

/// A rows x cols matrix of U(-bound, bound] entries bound * (2 u - 1), drawn
/// from `g` in row-major order (g advances by rows x cols draws, so one
/// generator fills several matrices in turn). Variance bound^2 / 3.
/// \throws RangeError naming the sizes if one is negative or rows x cols
///         exceeds kMaxElements, before allocating.
template <Scalar T>
RowMatrix<T> seeded_uniform_matrix(Index rows, Index cols, SeededNormal& g, double bound) {
  require_nonnegative("seeded uniform matrix: rows", rows);
  require_nonnegative("seeded uniform matrix: cols", cols);
  const Index n = checked_mul("seeded uniform matrix: rows x cols", rows, cols);
  RowMatrix<T> m(rows, cols);
  T* p = m.data();
  for (Index k = 0; k < n; ++k) p[k] = static_cast<T>(bound * g.symmetric());
  return m;
}

/// The initialization of a projection W (fan_in x fan_out, used as X W) by
/// init_random(): W_ij ~ U(-a, a] with a = sqrt(3 / fan_in), i.e. mean 0 and
/// variance 1 / fan_in ("LeCun uniform"). Then each entry of X W has the
/// variance of X's entries (for independent entries of X), so stacked
/// projections keep activations of order 1. Drawn from `g` as
/// seeded_uniform_matrix(); a zero fan_in gives an empty matrix.
template <Scalar T>
RowMatrix<T> seeded_projection(Index fan_in, Index fan_out, SeededNormal& g) {
  const double bound = fan_in > 0 ? std::sqrt(3.0 / static_cast<double>(fan_in)) : 0.0;
  return seeded_uniform_matrix<T>(fan_in, fan_out, g, bound);
}

}  // namespace kappa
