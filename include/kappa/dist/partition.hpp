// kappa/dist/partition.hpp - which heads, key/value heads and feed-forward
// columns each of P ranks holds (tensor parallelism). No MPI here: the plan
// is plain arithmetic, tested on its own.
//
// Attention (the paper's multi-head attention: heads are independent until
// W^O). H query heads, H_kv key/value heads, group size g = H / H_kv (query
// head h reads key/value head h / g). Rank r holds the query heads
//   [floor(r H / P), floor((r + 1) H / P))        (P <= H; uneven P allowed)
// and the key/value heads they read, so that its local attention is an
// ordinary grouped-query attention:
//   - whole groups (the range starts and ends on a group boundary): those
//     H_kv P / H... key/value heads, local group size g;
//   - all of the rank's query heads in one group (P > H_kv, e.g. MQA): that
//     one key/value head, replicated on the ranks that share it;
//   - otherwise (a group split unevenly, e.g. H = 4 over P = 3): one copy of
//     the key/value head per local query head (local group size 1), which
//     costs that rank more cache than an even split would.
// W^Q, W^K, W^V are split by those heads' columns, W^O by the matching rows,
// and one allreduce sums the ranks' partial outputs X_h W^O_h.
//
// Feed-forward (SwiGLU): W_gate and W_up split by columns
// [floor(r d_ff / P), floor((r + 1) d_ff / P)), W_down by the same rows; one
// allreduce.
#pragma once

#include <string>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa::dist {

/// One rank's share of one attention layer's heads.
struct HeadShare {
  Index q_begin = 0, q_end = 0;  ///< query heads [q_begin, q_end) of the whole layer
  /// The whole layer's key/value head behind each local key/value head
  /// (local head j holds kv_heads[j]); local query head i reads local
  /// key/value head i / (n_q() / n_kv()).
  std::vector<Index> kv_heads;
  [[nodiscard]] Index n_q() const { return q_end - q_begin; }
  [[nodiscard]] Index n_kv() const { return static_cast<Index>(kv_heads.size()); }
};

/// Rank r's heads out of H query and H_kv key/value heads over P ranks.
/// \throws std::invalid_argument naming the sizes when P exceeds H (a rank
///         would hold no head), or the sizes are not positive, or H_kv does
///         not divide H.
inline HeadShare share_heads(Index n_heads, Index n_kv_heads, int rank, int ranks) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("kappa: dist: " + std::to_string(n_heads) + " attention heads (" +
                                std::to_string(n_kv_heads) + " key/value heads) over " +
                                std::to_string(ranks) + " ranks: " + why);
  };
  if (n_heads <= 0 || n_kv_heads <= 0 || ranks <= 0) fail("sizes must be positive");
  if (n_heads % n_kv_heads != 0) fail("the key/value heads must divide the heads");
  if (ranks > n_heads) fail("more ranks than heads (every rank needs at least one head)");
  if (rank < 0 || rank >= ranks) fail("rank " + std::to_string(rank) + " is out of range");
  const Index p = ranks, r = rank, g = n_heads / n_kv_heads;
  HeadShare s;
  s.q_begin = r * n_heads / p;
  s.q_end = (r + 1) * n_heads / p;
  const Index kv_first = s.q_begin / g, kv_last = (s.q_end - 1) / g;
  if (s.q_begin % g == 0 && s.q_end % g == 0) {  // whole groups
    for (Index k = kv_first; k <= kv_last; ++k) s.kv_heads.push_back(k);
  } else if (kv_first == kv_last) {  // inside one group: that key/value head
    s.kv_heads.push_back(kv_first);
  } else {  // a split group: one key/value head per query head
    for (Index h = s.q_begin; h < s.q_end; ++h) s.kv_heads.push_back(h / g);
  }
  return s;
}

/// Rank r's columns [begin, end) of a width split over P ranks (d_ff of a
/// feed-forward); uneven widths give ranks widths that differ by one.
/// \throws std::invalid_argument when P exceeds the width.
struct ColumnShare {
  Index begin = 0, end = 0;
  [[nodiscard]] Index size() const { return end - begin; }
};
inline ColumnShare share_columns(Index width, int rank, int ranks) {
  if (ranks <= 0 || width < ranks)
    throw std::invalid_argument("kappa: dist: a width of " + std::to_string(width) +
                                " cannot be split over " + std::to_string(ranks) + " ranks");
  const Index p = ranks, r = rank;
  return {r * width / p, (r + 1) * width / p};
}

}  // namespace kappa::dist
