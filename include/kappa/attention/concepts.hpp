// kappa/attention/concepts.hpp - what a kernel f_kappa and a mask must provide.
//
// Two kernel families, one concept `Kernel`:
//
//  * a *score kernel* maps each scaled score x_ij = s * <q_i, k_j> to
//    A_ij = f(x_ij) elementwise (softmax's exp, linear, ReLU, polynomial...).
//    It provides
//        template <Scalar T> T operator()(T x) const;      // f(x)
//        double scale_for(Index d_qk) const;               // s
//    and may provide a vectorized form
//        template <Scalar T> void apply(T* x, Index n) const;  // x[i] = f(x[i])
//    and `static constexpr bool kShiftInvariant = true` when
//    f(x - m) = f(x) f(-m) (the exponential): attention then subtracts each
//    row's maximum before applying f, which leaves Z^-1 A unchanged and cannot
//    overflow.
//
//  * a *feature-map kernel* has kappa(q, k) = phi(q) . phi(k). It provides
//        template <Scalar T>
//        RowMatrix<T> feature_map(ConstMatrixRef<T> x, FeatureRole role) const;
//    which maps each row of x (N x d) to a row of phi(x) (N x m). Such a kernel
//    also allows the linear-time evaluation phi(Q) (phi(K)^T V).
//
// A type that is neither fails `static_assert(kappa::check_kernel<K>())` with
// a message naming the member it lacks.
#pragma once

#include <concepts>

#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// Whether a feature map is applied to queries or to keys (random-feature
/// kernels may treat them differently; elementwise maps ignore it).
enum class FeatureRole { kQuery, kKey };

template <class K>
concept HasScalarForm = requires(const K& k, float xf, double xd) {
  { k(xf) } -> std::convertible_to<float>;
  { k(xd) } -> std::convertible_to<double>;
};

template <class K>
concept HasScale = requires(const K& k, Index d) {
  { k.scale_for(d) } -> std::convertible_to<double>;
};

template <class K>
concept HasFeatureMap = requires(const K& k, const ConstMatrixRef<float>& xf,
                                 const ConstMatrixRef<double>& xd) {
  { k.feature_map(xf, FeatureRole::kQuery) } -> std::same_as<RowMatrix<float>>;
  { k.feature_map(xd, FeatureRole::kKey) } -> std::same_as<RowMatrix<double>>;
};

/// A kernel applied elementwise to scaled scores: A = f(s Q K^T).
template <class K>
concept ScoreKernel = HasScalarForm<K> && HasScale<K>;

/// A kernel with a feature map: A = phi(Q) phi(K)^T.
template <class K>
concept FeatureMapKernel = HasFeatureMap<K>;

/// Any similarity kernel f_kappa that kappa's attention accepts.
template <class K>
concept Kernel = ScoreKernel<K> || FeatureMapKernel<K>;

/// Whether f(x - m) = f(x) f(-m), so that a row maximum may be subtracted.
template <class K>
concept ShiftInvariantKernel = ScoreKernel<K> && requires {
  requires K::kShiftInvariant;
};

/// Whether a score kernel offers the vectorized `apply(T*, Index)`.
template <class K, class T>
concept HasVectorForm = requires(const K& k, T* x, Index n) {
  k.apply(x, n);
};

/// Compile-time check with readable messages; use as
/// `static_assert(check_kernel<K>())`.
template <class K>
consteval bool check_kernel() {
  static_assert(HasScalarForm<K> || HasFeatureMap<K>,
                "kappa: a kernel must provide either `template <Scalar T> T operator()(T x) "
                "const` (a score kernel: A = f(s Q K^T)) or `template <Scalar T> RowMatrix<T> "
                "feature_map(ConstMatrixRef<T>, FeatureRole) const` (a feature-map kernel: "
                "A = phi(Q) phi(K)^T)");
  static_assert(!HasScalarForm<K> || HasFeatureMap<K> || HasScale<K>,
                "kappa: a score kernel must provide `double scale_for(Index d_qk) const` "
                "(the scale s in A = f(s Q K^T); kernels::Softmax uses 1/sqrt(d_qk))");
  return Kernel<K>;
}

// ---- Masks -------------------------------------------------------------------

/// A half-open interval [begin, end) of key indices.
struct KeyRange {
  Index begin = 0;
  Index end = 0;
  [[nodiscard]] Index size() const { return end > begin ? end - begin : 0; }
};

/// A mask bound to a shape (N_Q, N_KV): it says, for query row i, the interval
/// of keys that may be visible, and (if kHasHoles) which ones inside it are.
template <class B>
concept BoundMask = requires(const B& b, Index i, Index j) {
  { b.range(i) } -> std::same_as<KeyRange>;
  { B::kHasHoles } -> std::convertible_to<bool>;
}
&&(!B::kHasHoles || requires(const B& b, Index i, Index j) {
  { b.allowed(i, j) } -> std::convertible_to<bool>;
});

/// A mask policy: `bind(n_q, n_kv)` validates it against the shapes once per
/// call (throwing ShapeError/RangeError) and returns a BoundMask.
template <class M>
concept Mask = requires(const M& m, Index n_q, Index n_kv) {
  { m.bind(n_q, n_kv) } -> BoundMask;
};

/// A bound mask that also adds a score bias (see attention/bias.hpp): it
/// declares `static constexpr bool kHasBias = true` and provides
///     void add_bias(Index i, Index j0, T* scores, Index len) const;
/// which adds bias(i, j0 + t) to scores[t] for t < len (the scaled scores of
/// query row i against keys j0 .. j0 + len - 1, all inside range(i)).
template <class B>
concept BiasedBound = BoundMask<B> && requires {
  requires B::kHasBias;
};

/// A policy with one mask per head (ALiBi slopes, T5 bucket tables, one bias
/// matrix per head): `heads()` is their number and `head(h)` the Mask of head
/// h. Multi-head attention accepts it where it accepts a mask; plain
/// attention takes one head's `head(h)`.
template <class M>
concept PerHeadMask = requires(const M& m, Index h) {
  { m.heads() } -> std::convertible_to<Index>;
  { m.head(h) } -> Mask;
};

template <class M>
consteval bool check_mask() {
  static_assert(Mask<M> || !PerHeadMask<M>,
                "kappa: this policy holds one mask or bias per head: pass `policy.head(h)` to "
                "single-head attention, or the policy itself to multi-head attention");
  static_assert(Mask<M> || PerHeadMask<M>,
                "kappa: a mask must provide `bind(Index n_q, Index n_kv) const` returning a "
                "type with `KeyRange range(Index i) const`, `static constexpr bool kHasHoles` "
                "and, if kHasHoles, `bool allowed(Index i, Index j) const`");
  return Mask<M>;
}

/// Like check_mask, but also accepts a PerHeadMask (multi-head entry points).
template <class M>
consteval bool check_head_mask() {
  if constexpr (PerHeadMask<M>) {
    return true;
  } else {
    return check_mask<M>();
  }
}

}  // namespace kappa
