// kappa/embed/embedding.hpp - the embedding matrix E (the paper's Figure 2).
//
// E is N_T x d: row E_i is the vector of token i. A token sequence
// i_1 ... i_N becomes X (N x d) with
//
//     X_j = E_{i_j}                               (lookup)
//
// and with tied input/output embeddings the output projection is
//
//     logits = X E^T                              (N x N_T)
//
// so that logits_{j, t} = <X_j, E_t>.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/embed/random.hpp"

namespace kappa {

/// The embedding matrix E (N_T x d) and its lookup and tied projection.
///
/// Example:
///   auto emb = kappa::Embedding<float>::random(50257, 768, /*seed=*/42, 0.02);
///   kappa::RowMatrix<float> x = emb.lookup(ids);          // (N, 768)
///   kappa::RowMatrix<float> logits = emb.logits(x);       // (N, 50257)
///   kappa::RowMatrix<float> x1 = emb.lookup(id);          // one token: (1, 768)
///
/// Embedding(N_T, d) starts with E = 0, so every lookup is zero until the
/// table is set (table(), the constructor from E) or drawn with random() /
/// init_random(seed).
template <Scalar T>
class Embedding {
 public:
  /// E = 0 (N_T x d).
  /// \throws RangeError naming the value for a negative size, or when
  ///         N_T x d exceeds kMaxElements (core/checked.hpp), before allocating.
  Embedding(Index vocab_size, Index dim)
      : table_(RowMatrix<T>::Zero(checked_size(vocab_size, dim), dim)) {}
  /// E given.
  explicit Embedding(RowMatrix<T> table) : table_(std::move(table)) {}

  /// E_{ti} ~ N(0, stddev^2), deterministic in `seed` (see random.hpp).
  /// PyTorch's nn.Embedding uses stddev 1, GPT-2 0.02.
  /// \throws RangeError as the constructor.
  static Embedding random(Index vocab_size, Index dim, std::uint64_t seed, double stddev = 1.0) {
    return Embedding(seeded_normal_matrix<T>(checked_size(vocab_size, dim), dim, seed, stddev));
  }

  /// Redraws E in place as random(N_T, d, seed, stddev) would:
  /// E_{ti} ~ N(0, stddev^2), deterministic in `seed`.
  void init_random(std::uint64_t seed, double stddev = 1.0) {
    table_ = seeded_normal_matrix<T>(table_.rows(), table_.cols(), seed, stddev);
  }

  /// N_T.
  Index vocab_size() const noexcept { return table_.rows(); }
  /// d.
  Index dim() const noexcept { return table_.cols(); }
  /// E (N_T x d).
  const RowMatrix<T>& table() const noexcept { return table_; }
  RowMatrix<T>& table() noexcept { return table_; }
  /// E_i (1 x d); RangeError naming i and N_T if 0 <= i < N_T fails.
  auto row(TokenId i) const {
    check(i);
    return table_.row(i);
  }

  /// X with X_j = E_{i_j} (N x d). Throws RangeError naming the first id
  /// outside [0, N_T) and N_T.
  RowMatrix<T> lookup(std::span<const TokenId> ids) const {
    RowMatrix<T> x(static_cast<Index>(ids.size()), dim());
    lookup_into(ids, x);
    return x;
  }
  /// X = E_id as a 1 x d matrix, the input of one decode step (a matrix, so
  /// it passes to forward() and forward_cached() as it is). Throws RangeError
  /// naming id and N_T if 0 <= id < N_T fails.
  RowMatrix<T> lookup(TokenId id) const {
    check(id);
    return table_.row(id);
  }
  /// As lookup(), into a caller-provided X (N x d); ShapeError if X has
  /// another shape.
  void lookup_into(std::span<const TokenId> ids, MatrixRef<T> x) const {
    require_shapes(x.rows() == static_cast<Index>(ids.size()) && x.cols() == dim(),
                   "embedding lookup", "X", x.rows(), x.cols(), "(ids, E)",
                   static_cast<Index>(ids.size()), dim(), "X must be N x d");
    for (TokenId id : ids) check(id);  // validate once, outside the copy loop
    for (Index j = 0; j < x.rows(); ++j) x.row(j) = table_.row(ids[static_cast<std::size_t>(j)]);
  }

  /// Tied output projection logits = X E^T (N x N_T). ShapeError unless X
  /// has d columns.
  RowMatrix<T> logits(ConstMatrixRef<T> x) const {
    require_shapes(x.cols() == dim(), "tied logits X E^T", "X", x, "E", table_,
                   "X must have d columns, as E");
    RowMatrix<T> out(x.rows(), vocab_size());
    out.noalias() = x * table_.transpose();  // (N, N_T)
    return out;
  }

 private:
  /// Validates N_T and d; returns N_T.
  static Index checked_size(Index vocab_size, Index dim) {
    require_nonnegative("Embedding: vocab_size N_T", vocab_size);
    require_nonnegative("Embedding: dim d", dim);
    (void)checked_mul("Embedding: table E, N_T x d", vocab_size, dim);
    return vocab_size;
  }
  void check(TokenId id) const {
    require_index("token id", id, static_cast<long long>(vocab_size()),
                  "the embedding table E (N_T)");
  }
  RowMatrix<T> table_;  // E, (N_T, d)
};

}  // namespace kappa
