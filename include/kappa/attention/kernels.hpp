// kappa/attention/kernels.hpp - the similarity kernels f_kappa.
//
// The paper writes A = f_kappa(Q K^T). kappa's score kernels apply f to the
// *scaled* scores x = s Q K^T, with s a per-kernel parameter (`scale`, unset
// means the kernel's default below):
//
// | kernel               | f(x)                | default s      | A >= 0 |
// |----------------------|---------------------|----------------|--------|
// | Softmax              | exp(x)              | 1/sqrt(d_QK)   | yes    |
// | Linear               | x                   | 1 (paper, Fig.3)| no    |
// | ReLU                 | max(x, 0)           | 1/sqrt(d_QK)   | yes    |
// | Polynomial{p, c}     | (x + c)^p           | 1/sqrt(d_QK)   | p even |
// | EluPlusOne (feature) | phi(q).phi(k), phi = elu + 1 | -     | yes    |
// | SoftCapped{c}        | exp(c tanh(x / c))  | 1/sqrt(d_QK)   | yes    |
//
// For Linear and ReLU the scale cancels in Z^-1 A (f is homogeneous), so it
// only changes the reported A and Z. Kernels whose A may be negative (Linear,
// odd Polynomial) can give a normalizer near zero; a row with Z exactly zero
// yields a zero output row (see attention.hpp).
#pragma once

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "kappa/attention/concepts.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa::kernels {

namespace detail {
inline double inv_sqrt(Index d) {
  return d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0;
}
}  // namespace detail

/// The scaled exponential: f(x) = exp(x), x = s q.k, s = 1/sqrt(d_QK) by
/// default, so Z^-1 A = softmax(s Q K^T) row by row. Shift-invariant: attention
/// subtracts each row's maximum first, so logits of any size stay finite.
struct Softmax {
  static constexpr bool kShiftInvariant = true;
  static constexpr const char* kName = "softmax";
  /// s; unset means 1/sqrt(d_QK).
  std::optional<double> scale{};

  [[nodiscard]] double scale_for(Index d_qk) const {
    return scale.value_or(detail::inv_sqrt(d_qk));
  }
  template <Scalar T>
  T operator()(T x) const {
    return std::exp(x);
  }
  template <Scalar T>
  void apply(T* x, Index n) const {
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(x, n);
    a = a.exp();
  }
};

/// The soft-capped exponential of Gemma 2: f(x) = exp(c tanh(x / c)),
/// x = s q.k, so Z^-1 A = softmax(c tanh(s Q K^T / c)) row by row: each score
/// is squashed into (-c, c) before the softmax. Not shift-invariant (the cap
/// acts on the scores themselves), and it needs no shift: f lies in
/// (e^-c, e^c), finite in float for c <= 80. s defaults to 1/sqrt(d_QK)
/// (Gemma 2 sets it to query_pre_attn_scalar^-1/2).
struct SoftCapped {
  static constexpr const char* kName = "softcapped";
  /// c, in (0, 80].
  double cap = 50.0;
  /// s; unset means 1/sqrt(d_QK).
  std::optional<double> scale{};

  /// \throws std::invalid_argument unless 0 < cap <= 80 (exp(80) is finite in
  /// float) and the scale, if set, is finite.
  SoftCapped() = default;
  explicit SoftCapped(double c, std::optional<double> s = std::nullopt) : cap(c), scale(s) {
    if (!(cap > 0) || !(cap <= 80.0))
      throw std::invalid_argument("kappa: SoftCapped: the cap c must be in (0, 80], got " +
                                  std::to_string(cap));
    if (scale && !std::isfinite(*scale))
      throw std::invalid_argument("kappa: SoftCapped: the scale must be finite");
  }
  [[nodiscard]] double scale_for(Index d_qk) const {
    return scale.value_or(detail::inv_sqrt(d_qk));
  }
  template <Scalar T>
  T operator()(T x) const {
    const T c = static_cast<T>(cap);
    return std::exp(c * std::tanh(x / c));
  }
  template <Scalar T>
  void apply(T* x, Index n) const {
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(x, n);
    const T c = static_cast<T>(cap);
    a = (c * (a / c).tanh()).exp();
  }
};

/// The linear kernel of the paper's Figure 3: f(x) = x, with s = 1 by default,
/// so A = Q K^T exactly. Weights Z^-1 A may be negative.
struct Linear {
  static constexpr const char* kName = "linear";
  /// s; unset means 1 (the paper's f(x) = x).
  std::optional<double> scale{};

  [[nodiscard]] double scale_for(Index /*d_qk*/) const { return scale.value_or(1.0); }
  template <Scalar T>
  T operator()(T x) const {
    return x;
  }
  template <Scalar T>
  void apply(T* /*x*/, Index /*n*/) const {}
};

/// f(x) = max(x, 0): keys with negative similarity get weight 0.
struct ReLU {
  static constexpr const char* kName = "relu";
  std::optional<double> scale{};

  [[nodiscard]] double scale_for(Index d_qk) const {
    return scale.value_or(detail::inv_sqrt(d_qk));
  }
  template <Scalar T>
  T operator()(T x) const {
    return x > T(0) ? x : T(0);
  }
  template <Scalar T>
  void apply(T* x, Index n) const {
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(x, n);
    a = a.max(T(0));
  }
};

/// f(x) = (x + c)^p for an integer degree p >= 1 and offset c.
/// The power is taken by repeated squaring: about 2 log2(p) multiplications
/// per score, whatever p (p = INT_MAX costs 61), so a large degree cannot make
/// attention slow. (For p <= 3 this is the plain product, bit for bit.) Large
/// p or |x + c| overflow to +-inf as the power does; keep s (x + c) near 1.
class Polynomial {
 public:
  static constexpr const char* kName = "polynomial";

  /// Throws std::invalid_argument if degree < 1, or the offset or the scale
  /// is not finite (naming the value).
  explicit Polynomial(int degree = 2, double offset = 0.0,
                      std::optional<double> scale = std::nullopt)
      : degree_(degree), offset_(offset), scale_(scale) {
    if (degree < 1) {
      throw std::invalid_argument("kappa: Polynomial kernel degree must be >= 1, got " +
                                  std::to_string(degree));
    }
    require_finite("Polynomial kernel offset c", offset);
    if (scale) require_finite("Polynomial kernel scale s", *scale);
  }

  [[nodiscard]] int degree() const { return degree_; }
  [[nodiscard]] double offset() const { return offset_; }
  [[nodiscard]] double scale_for(Index d_qk) const {
    return scale_.value_or(detail::inv_sqrt(d_qk));
  }

  template <Scalar T>
  T operator()(T x) const {
    // base^p by squaring: bit k of p multiplies in base^(2^k).
    T base = x + static_cast<T>(offset_);
    T r = base;  // the lowest set bit of p >= 1 is handled below
    unsigned p = static_cast<unsigned>(degree_);
    while ((p & 1u) == 0) {
      base *= base;
      r = base;
      p >>= 1;
    }
    for (p >>= 1; p != 0; p >>= 1) {
      base *= base;
      if (p & 1u) r *= base;
    }
    return r;
  }
  /// The same computation as operator(), elementwise (same results).
  template <Scalar T>
  void apply(T* x, Index n) const {
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(x, n);
    a += static_cast<T>(offset_);
    if (degree_ == 1) return;
    if (degree_ == 2) {
      a = a.square();
      return;
    }
    Eigen::Array<T, Eigen::Dynamic, 1> base = a;  // r = a holds the result
    unsigned p = static_cast<unsigned>(degree_);
    while ((p & 1u) == 0) {
      base = base.square();
      p >>= 1;
    }
    a = base;
    for (p >>= 1; p != 0; p >>= 1) {
      base = base.square();
      if (p & 1u) a *= base;
    }
  }

 private:
  int degree_;
  double offset_;
  std::optional<double> scale_;
};

/// Feature-map kernel of Katharopoulos et al. (2020), "Transformers are RNNs":
/// kappa(q, k) = phi(q) . phi(k) with phi(x) = elu(x) + 1 elementwise
/// (x + 1 for x > 0, exp(x) otherwise), which is positive. No scale.
struct EluPlusOne {
  static constexpr const char* kName = "elu+1";

  template <Scalar T>
  RowMatrix<T> feature_map(ConstMatrixRef<T> x, FeatureRole /*role*/) const {
    RowMatrix<T> phi(x.rows(), x.cols());
    phi.array() = (x.array() > T(0)).select(x.array() + T(1), x.array().exp());
    return phi;
  }
};

}  // namespace kappa::kernels
