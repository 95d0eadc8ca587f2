// kappa/heads/grouping.hpp - how query heads share key/value heads.
//
// Grouped-query attention (Ainslie et al., 2023) gives H query heads only
// H_kv key/value heads: query head h uses kv head g = h / (H / H_kv), so the
// G = H / H_kv query heads of group g are the contiguous heads g G .. g G + G - 1.
// Multi-head attention is H_kv = H (G = 1) and multi-query attention is
// H_kv = 1 (G = H): one code path, chosen by a grouping policy type.
//
// K and V are never repeated. For each kv head, kappa attends with the group's
// G query heads at once: their queries form the rows of one matrix (row
// i G + j is query i of head g G + j) and GroupedRows tells the mask that row
// r is query r / G. Decoding then reads each cached K_g and V_g once per step
// rather than G times.
#pragma once

#include <concepts>
#include <stdexcept>
#include <string>
#include <utility>

#include "kappa/attention/concepts.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// Grouping policy: H_kv = H (classic multi-head attention).
struct MultiHead {
  static constexpr const char* kName = "multi-head";
  /// H_kv for H query heads; `requested` must be 0 (meaning H) or H.
  static Index kv_heads(Index n_heads, Index requested) {
    if (requested != 0 && requested != n_heads) {
      throw std::invalid_argument(
          "kappa: multi-head attention has n_kv_heads = n_heads = " + std::to_string(n_heads) +
          ", got n_kv_heads = " + std::to_string(requested) + " (use GroupedQuery)");
    }
    return n_heads;
  }
};

/// Grouping policy: any H_kv that divides H (grouped-query attention).
struct GroupedQuery {
  static constexpr const char* kName = "grouped-query";
  /// H_kv for H query heads; `requested` 0 means H. Throws
  /// std::invalid_argument unless 1 <= H_kv <= H and H_kv divides H.
  static Index kv_heads(Index n_heads, Index requested) {
    const Index h_kv = requested == 0 ? n_heads : requested;
    if (h_kv < 1 || h_kv > n_heads || n_heads % h_kv != 0) {
      throw std::invalid_argument(
          "kappa: grouped-query attention: n_kv_heads = " + std::to_string(h_kv) +
          " does not divide n_heads = " + std::to_string(n_heads) +
          " (each kv head serves n_heads / n_kv_heads query heads)");
    }
    return h_kv;
  }
};

/// Grouping policy: H_kv = 1 (multi-query attention, Shazeer 2019).
struct MultiQuery {
  static constexpr const char* kName = "multi-query";
  /// Always 1; `requested` must be 0 or 1.
  static Index kv_heads(Index n_heads, Index requested) {
    if (requested != 0 && requested != 1) {
      throw std::invalid_argument("kappa: multi-query attention has n_kv_heads = 1, got " +
                                  std::to_string(requested) +
                                  " (with n_heads = " + std::to_string(n_heads) + ")");
    }
    return 1;
  }
};

/// What a grouping policy provides.
template <class G>
concept HeadGrouping = requires(Index h, Index r) {
  { G::kv_heads(h, r) } -> std::convertible_to<Index>;
};

/// Mask adapter for a group's stacked queries: row r of the stacked matrix is
/// query r / group of the sequence, so `GroupedRows{&mask, G}` binds `mask` to
/// (N_Q, N_KV) and answers row r with the inner answer for row r / G.
template <Mask M>
struct GroupedRows {
  const M* inner;
  Index group;

  struct Bound {
    using Inner = decltype(std::declval<const M&>().bind(0, 0));
    static constexpr bool kHasHoles = Inner::kHasHoles;
    static constexpr bool kHasBias = BiasedBound<Inner>;
    Inner b;
    Index group;
    [[nodiscard]] KeyRange range(Index r) const { return b.range(r / group); }
    [[nodiscard]] bool allowed(Index r, Index j) const requires Inner::kHasHoles {
      return b.allowed(r / group, j);
    }
    template <class T>
    void add_bias(Index r, Index j0, T* scores, Index len) const requires kHasBias {
      b.add_bias(r / group, j0, scores, len);
    }
  };
  /// n_rows = N_Q G stacked rows.
  [[nodiscard]] Bound bind(Index n_rows, Index n_kv) const {
    return {inner->bind(n_rows / group, n_kv), group};
  }
};

}  // namespace kappa
