// kappa/embed/positional.hpp - absolute positional encodings and how they
// combine with the token embeddings.
//
// A position policy P gives, for positions p = offset .. offset + N - 1, a
// matrix P (N x d_pos), row r for position offset + r:
//
//   SinusoidalPositions (Vaswani et al. 2017, section 3.5), with base b:
//       P_{p, 2i}   = sin(p / b^{2i / d})
//       P_{p, 2i+1} = cos(p / b^{2i / d})        i = 0 .. ceil(d/2) - 1
//   LearnedPositions (GPT-2, BERT): a trained table, row p for position p.
//
// The combination is a compile-time choice (a policy type, not a flag):
//   AddPositions     X' = X + P          (N x d; needs d_pos = d)
//   ConcatPositions  X' = [X  P]         (N x (d + d_pos); separate channels,
//                                         as DeBERTa and DeepSeek-V2 keep
//                                         position apart from content)
// Rotary encodings (RoPE) are not added to X but applied to Q and K: see
// rope.hpp.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/embed/embedding.hpp"
#include "kappa/embed/random.hpp"

namespace kappa {

/// Sinusoidal positional encoding (see the file comment). Any position
/// p >= 0 is valid; computed in double, rounded to T.
template <Scalar T>
class SinusoidalPositions {
 public:
  /// d_pos = dim; base b (10000 in the original Transformer).
  /// \throws RangeError naming dim if it is negative.
  explicit SinusoidalPositions(Index dim, double base = 10000.0)
      : dim_(require_nonnegative("SinusoidalPositions: dim", dim)), base_(base) {}

  Index dim() const noexcept { return dim_; }
  double base() const noexcept { return base_; }

  /// P for positions offset .. offset + n - 1 (n x d_pos).
  /// \throws RangeError for n < 0, an n x d_pos above kMaxElements, and as
  ///         encode_into().
  RowMatrix<T> encode(Index n, Index offset = 0) const {
    require_nonnegative("sinusoidal positions: n", n);
    (void)checked_mul("sinusoidal positions: P, n x d_pos", n, dim_);
    RowMatrix<T> p(n, dim_);
    encode_into(p, offset);
    return p;
  }
  /// As encode(), into P (its rows give n).
  /// \throws ShapeError unless P has d_pos columns; RangeError naming the
  ///         offset if it is negative or offset + n overflows.
  void encode_into(MatrixRef<T> p, Index offset = 0) const {
    require_shapes(p.cols() == dim_, "sinusoidal positions", "P", p.rows(), p.cols(), "(n, d_pos)",
                   p.rows(), dim_, "P must have d_pos columns");
    if (offset < 0)
      throw RangeError("kappa: sinusoidal positions: offset " + std::to_string(offset) +
                       " is negative");
    (void)checked_add("sinusoidal positions: offset + n", offset, p.rows());
    for (Index i = 0; 2 * i < dim_; ++i) {
      const double inv_freq =
          std::pow(base_, -static_cast<double>(2 * i) / static_cast<double>(dim_));
      for (Index r = 0; r < p.rows(); ++r) {
        const double angle = static_cast<double>(offset + r) * inv_freq;
        p(r, 2 * i) = static_cast<T>(std::sin(angle));
        if (2 * i + 1 < dim_) p(r, 2 * i + 1) = static_cast<T>(std::cos(angle));
      }
    }
  }

 private:
  Index dim_;
  double base_;
};

/// Learned absolute positions: a table (max_positions x d_pos), row p for
/// position p; seeded N(0, stddev^2) initialization (GPT-2 uses 0.01).
template <Scalar T>
class LearnedPositions {
 public:
  LearnedPositions(Index max_positions, Index dim, std::uint64_t seed, double stddev = 0.02)
      : table_(seeded_normal_matrix<T>(max_positions, dim, seed, stddev)) {}
  explicit LearnedPositions(RowMatrix<T> table) : table_(std::move(table)) {}

  Index dim() const noexcept { return table_.cols(); }
  Index max_positions() const noexcept { return table_.rows(); }
  const RowMatrix<T>& table() const noexcept { return table_; }
  RowMatrix<T>& table() noexcept { return table_; }

  /// Rows offset .. offset + n - 1 of the table. RangeError naming the last
  /// position and max_positions if it does not exist, or naming n or the
  /// offset if it is negative.
  RowMatrix<T> encode(Index n, Index offset = 0) const {
    require_nonnegative("learned positions: n", n);
    require_nonnegative("learned positions: offset", offset);
    if (n == 0) return RowMatrix<T>(0, dim());
    const Index last = checked_add("learned positions: offset + n", offset, n) - 1;
    if (last >= max_positions())
      throw RangeError("kappa: " + std::to_string(offset + n) +
                       " tokens exceed the context length of " + std::to_string(max_positions()) +
                       " (the learned position table holds positions 0 .. " +
                       std::to_string(max_positions() - 1) + "; position " + std::to_string(last) +
                       " was asked for)");
    return table_.middleRows(offset, n);
  }

 private:
  RowMatrix<T> table_;  // (max_positions, d_pos)
};

/// A position policy: dim() and encode(n, offset) -> RowMatrix<T>.
template <class P, class T>
concept PositionEncoding = requires(const P& p, Index n) {
  { p.dim() } -> std::convertible_to<Index>;
  { p.encode(n, n) } -> std::same_as<RowMatrix<T>>;
};

/// X' = X + P (needs d_pos = d).
struct AddPositions {
  static Index width(Index d_tok, Index d_pos) {
    require_shapes(
        d_tok == d_pos, "adding positions", "X", 0, d_tok, "P", 0, d_pos,
        "X + P needs as many position channels as token channels; use ConcatPositions otherwise");
    return d_tok;
  }
  template <class T>
  static void combine(const RowMatrix<T>& x, const RowMatrix<T>& p, RowMatrix<T>& out) {
    out = x + p;  // (N, d)
  }
};

/// X' = [X P] (d + d_pos channels).
struct ConcatPositions {
  static Index width(Index d_tok, Index d_pos) { return d_tok + d_pos; }
  template <class T>
  static void combine(const RowMatrix<T>& x, const RowMatrix<T>& p, RowMatrix<T>& out) {
    out.resize(x.rows(), x.cols() + p.cols());
    out.leftCols(x.cols()) = x;
    out.rightCols(p.cols()) = p;  // (N, d + d_pos)
  }
};

/// The input of a Transformer: token embeddings combined with positions,
/// X'_j = combine(E_{i_j}, P_{offset + j}).
///
/// Example:
///   kappa::InputEmbedding<float, kappa::SinusoidalPositions<float>> in(
///       kappa::Embedding<float>::random(1000, 64, 1), kappa::SinusoidalPositions<float>(64));
///   kappa::RowMatrix<float> x = in(ids);  // (N, 64)
template <Scalar T, class Positions, class Combine = AddPositions>
class InputEmbedding {
  static_assert(
      PositionEncoding<Positions, T>,
      "InputEmbedding: Positions must provide dim() and encode(n, offset) -> RowMatrix<T>");
  static_assert(std::same_as<Combine, AddPositions> || std::same_as<Combine, ConcatPositions>,
                "InputEmbedding: Combine must be kappa::AddPositions or kappa::ConcatPositions");

 public:
  /// ShapeError (AddPositions) if d_pos != d.
  InputEmbedding(Embedding<T> tokens, Positions positions)
      : tokens_(std::move(tokens)),
        positions_(std::move(positions)),
        width_(Combine::width(tokens_.dim(), positions_.dim())) {}

  /// Width of X': d (add) or d + d_pos (concatenate).
  Index dim() const noexcept { return width_; }
  const Embedding<T>& tokens() const noexcept { return tokens_; }
  Embedding<T>& tokens() noexcept { return tokens_; }
  const Positions& positions() const noexcept { return positions_; }

  /// X' for ids at positions offset .. offset + N - 1 (N x dim()).
  RowMatrix<T> operator()(std::span<const TokenId> ids, Index offset = 0) const {
    const RowMatrix<T> x = tokens_.lookup(ids);                                        // (N, d)
    const RowMatrix<T> p = positions_.encode(static_cast<Index>(ids.size()), offset);  // (N, d_pos)
    RowMatrix<T> out;
    Combine::combine(x, p, out);
    return out;
  }
  /// X' for the single token id at position offset (1 x dim()), e.g. one
  /// decode step. RangeError naming id and N_T if it is out of range.
  RowMatrix<T> operator()(TokenId id, Index offset = 0) const {
    return (*this)(std::span<const TokenId>(&id, 1), offset);
  }

 private:
  Embedding<T> tokens_;
  Positions positions_;
  Index width_;
};

}  // namespace kappa
