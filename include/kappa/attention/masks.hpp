// kappa/attention/masks.hpp - which keys each query may see.
//
// A mask is a policy type. `bind(N_Q, N_KV)` validates it against the shapes
// once per call and returns a bound mask that answers, for query row i, the
// interval of keys it may see (`range(i)`), and, for masks with holes, which
// keys inside it (`allowed(i, j)`). Keys outside are excluded from A (A_ij = 0)
// and from the normalizer Z. A query that sees no key gets a zero output row.
//
// Positions: query row i sits at absolute position `offset + i`; key row j at
// position j. With a KV cache of N_KV keys and N_Q new queries the queries are
// the *last* N_Q positions, so the default offset is N_KV - N_Q: the last query
// sees every key. (Aligning the queries to position 0 instead - the "top-left"
// causal mask - is a classic bug when decoding with a cache.)
#pragma once

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/attention/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

namespace detail {
inline Index clamp_index(Index x, Index lo, Index hi) {
  return std::min(std::max(x, lo), hi);
}

/// Throws RangeError unless offset + delta fits in Index. Masks call it once
/// per bind on the extreme positions their range() forms (`formula`), so
/// range() itself needs no checks. The message names the offset and the other
/// operand: "kappa: CausalMask: offset 9223372036854775807 with N_Q = 4:
/// offset + N_Q overflows the position range [...]".
inline void require_position_fits(const char* mask, Index offset, Index delta, const char* formula,
                                  const char* other_name, Index other) {
  Index r = 0;
  if (!__builtin_add_overflow(offset, delta, &r)) return;
  throw RangeError(std::string("kappa: ") + mask + ": offset " + std::to_string(offset) + " with " +
                   other_name + " = " + std::to_string(other) + ": " + formula +
                   " overflows the position range [" +
                   std::to_string(std::numeric_limits<Index>::min()) + ", " +
                   std::to_string(std::numeric_limits<Index>::max()) + "]");
}
}  // namespace detail

namespace detail {
/// Head h's mask of a per-head policy (PerHeadMask), or the mask itself.
template <class P>
decltype(auto) head_of(const P& p, Index h) {
  if constexpr (PerHeadMask<P>) {
    return p.head(h);
  } else {
    (void)h;
    return (p);
  }
}
}  // namespace detail

/// Every query sees every key.
struct NoMask {
  struct Bound {
    static constexpr bool kHasHoles = false;
    Index n_kv;
    [[nodiscard]] KeyRange range(Index /*i*/) const { return {0, n_kv}; }
  };
  [[nodiscard]] Bound bind(Index /*n_q*/, Index n_kv) const { return {n_kv}; }
};

/// Causal: query i (at position offset + i) sees keys j <= offset + i.
/// `offset` unset means N_KV - N_Q (bottom-right alignment, what a KV cache
/// needs). With offset 0 and N_Q == N_KV this is the lower-triangular mask.
/// bind() throws RangeError naming the offset if offset + N_Q overflows.
struct CausalMask {
  std::optional<Index> offset{};

  struct Bound {
    static constexpr bool kHasHoles = false;
    Index offset;
    Index n_kv;
    [[nodiscard]] KeyRange range(Index i) const {
      return {0, detail::clamp_index(offset + i + 1, 0, n_kv)};
    }
  };
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const {
    const Index off = offset.value_or(n_kv - n_q);
    detail::require_position_fits("CausalMask", off, n_q, "offset + N_Q", "N_Q", n_q);
    return {off, n_kv};
  }
};

/// Causal with a window of W keys: query i at position p = offset + i sees the
/// keys at positions p - W + 1 .. p (itself and the W - 1 before it), as in
/// Mistral's sliding-window attention. `offset` as in CausalMask. Any
/// window >= 1 and offset are valid as long as the positions range() forms,
/// offset - (W - 1) and offset + N_Q, fit in Index; bind() checks that once.
struct SlidingWindowMask {
  Index window = 1;
  std::optional<Index> offset{};

  struct Bound {
    static constexpr bool kHasHoles = false;
    Index window;
    Index offset;
    Index n_kv;
    [[nodiscard]] KeyRange range(Index i) const {
      const Index p = offset + i;
      return {detail::clamp_index(p - (window - 1), 0, n_kv), detail::clamp_index(p + 1, 0, n_kv)};
    }
  };
  /// Throws std::invalid_argument if window < 1; RangeError naming the
  /// offset or window if offset - (W - 1) or offset + N_Q overflows.
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const {
    if (window < 1) {
      throw std::invalid_argument("kappa: SlidingWindowMask window must be >= 1, got " +
                                  std::to_string(window));
    }
    const Index off = offset.value_or(n_kv - n_q);
    detail::require_position_fits("SlidingWindowMask", off, n_q, "offset + N_Q", "N_Q", n_q);
    detail::require_position_fits("SlidingWindowMask", off, -(window - 1), "offset - (window - 1)",
                                  "window", window);
    return {window, off, n_kv};
  }
};

/// Key padding: query row i sees keys 0 .. valid_length[i] - 1 (the rest of
/// the key rows are padding). One length for every row, or one per row.
struct KeyPaddingMask {
  std::vector<Index> valid_length;

  KeyPaddingMask() = default;
  /// The same valid length for every query row.
  explicit KeyPaddingMask(Index length) : valid_length{length}, broadcast_(true) {}
  /// One valid length per query row.
  explicit KeyPaddingMask(std::vector<Index> lengths) : valid_length(std::move(lengths)) {}

  struct Bound {
    static constexpr bool kHasHoles = false;
    const Index* lengths;
    bool broadcast;
    [[nodiscard]] KeyRange range(Index i) const { return {0, lengths[broadcast ? 0 : i]}; }
  };
  /// Throws ShapeError if there is neither one length nor one per query row,
  /// RangeError if a length is outside [0, N_KV].
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const {
    const auto n = static_cast<Index>(valid_length.size());
    if (!broadcast_ && n != n_q) {
      throw ShapeError("kappa: KeyPaddingMask: valid_length has " + std::to_string(n) +
                       " entries but Q has " + std::to_string(n_q) +
                       " rows (one length per query row, or construct with a single length)");
    }
    if (broadcast_ && n != 1) {
      throw ShapeError("kappa: KeyPaddingMask: expected one broadcast length, got " +
                       std::to_string(n));
    }
    for (Index len : valid_length)
      require_index("KeyPaddingMask valid length", len, n_kv + 1, "keys 0..N_KV (N_KV + 1 values)");
    return {valid_length.data(), broadcast_};
  }

 private:
  bool broadcast_ = false;
};

/// An arbitrary mask: allowed(i, j) is true where query i may see key j.
struct BooleanMask {
  using Matrix = Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Matrix allowed;

  struct Bound {
    static constexpr bool kHasHoles = true;
    const Matrix* m;
    [[nodiscard]] KeyRange range(Index /*i*/) const { return {0, m->cols()}; }
    [[nodiscard]] bool allowed(Index i, Index j) const { return (*m)(i, j); }
  };
  /// Throws ShapeError unless `allowed` is N_Q x N_KV.
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const {
    require_shapes(allowed.rows() == n_q && allowed.cols() == n_kv, "BooleanMask", "the mask",
                   allowed.rows(), allowed.cols(), "(N_Q x N_KV)", n_q, n_kv,
                   "the mask must be N_Q x N_KV");
    return {&allowed};
  }
};

/// The intersection of two masks: key j is visible to query i when both say so
/// (e.g. causal and key padding for a batch of left-aligned sequences). Score
/// biases (attention/bias.hpp) combine the same way: all_of(CausalMask{},
/// AlibiBias{m}) masks causally and adds both biases, if both have one.
template <class M1, class M2>
requires(Mask<M1> || PerHeadMask<M1>) && (Mask<M2> || PerHeadMask<M2>)struct AllOf {
  M1 first;
  M2 second;

  struct Bound {
    using B1 = decltype(std::declval<const M1&>().bind(0, 0));
    using B2 = decltype(std::declval<const M2&>().bind(0, 0));
    static constexpr bool kHasHoles = B1::kHasHoles || B2::kHasHoles;
    static constexpr bool kHasBias = BiasedBound<B1> || BiasedBound<B2>;
    B1 a;
    B2 b;
    /// The sum of both biases (see BiasedBound).
    template <class T>
    void add_bias(Index i, Index j0, T* scores, Index len) const requires kHasBias {
      if constexpr (BiasedBound<B1>) a.add_bias(i, j0, scores, len);
      if constexpr (BiasedBound<B2>) b.add_bias(i, j0, scores, len);
    }
    [[nodiscard]] KeyRange range(Index i) const {
      const KeyRange ra = a.range(i);
      const KeyRange rb = b.range(i);
      return {std::max(ra.begin, rb.begin), std::min(ra.end, rb.end)};
    }
    [[nodiscard]] bool allowed(Index i, Index j) const {
      bool ok = true;
      if constexpr (B1::kHasHoles) ok = ok && a.allowed(i, j);
      if constexpr (B2::kHasHoles) ok = ok && b.allowed(i, j);
      return ok;
    }
  };
  [[nodiscard]] Bound bind(Index n_q, Index n_kv) const requires Mask<M1> && Mask<M2> {
    return {first.bind(n_q, n_kv), second.bind(n_q, n_kv)};
  }

  /// With a per-head policy inside (PerHeadMask, e.g. a bias per head): the
  /// number of heads, and head h's mask, AllOf{first's head h, second's head h}.
  [[nodiscard]] Index heads() const requires PerHeadMask<M1> || PerHeadMask<M2> {
    if constexpr (PerHeadMask<M1>) {
      return first.heads();
    } else {
      return second.heads();
    }
  }
  [[nodiscard]] auto head(Index h) const requires PerHeadMask<M1> || PerHeadMask<M2> {
    return all_of_heads(first, second, h);
  }

 private:
  static auto all_of_heads(const M1& x, const M2& y, Index h) {
    using H1 = std::decay_t<decltype(detail::head_of(x, h))>;
    using H2 = std::decay_t<decltype(detail::head_of(y, h))>;
    return AllOf<H1, H2>{detail::head_of(x, h), detail::head_of(y, h)};
  }
};

/// `all_of(CausalMask{}, KeyPaddingMask{lengths})`.
template <class M1, class M2>
requires(Mask<M1> || PerHeadMask<M1>) &&
    (Mask<M2> || PerHeadMask<M2>)AllOf<M1, M2> all_of(M1 a, M2 b) {
  return {std::move(a), std::move(b)};
}

}  // namespace kappa
