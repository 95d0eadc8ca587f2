// kappa/cache/token_store.hpp - per-token storage shared by every decoding
// cache: the KV cache (K_g and V_g per key/value head) and the latent cache of
// multi-head latent attention (c_KV and k^R per token) are both a handful of
// *streams*, each one row of a fixed width per token.
//
// A TokenStore holds S streams; stream s is a preallocated row-major
// (capacity x width_s) matrix whose first stored() rows are live. Views handed
// out are blocks of that storage (topRows), never copies. The retention policy,
// a type, says what happens when the capacity is reached:
//
// | policy         | capacity                    | when full                 |
// |----------------|-----------------------------|---------------------------|
// | Growable       | doubles (amortized O(1))    | reallocates, copies rows  |
// | FixedCapacity  | fixed, allocated up front   | throws kappa::RangeError  |
// | SlidingWindow  | grows (doubling) up to the  | overwrites the oldest row |
// |                | window W, then a ring buffer|                           |
//
// Positions: the token appended first has position 0; length() is the number
// of tokens appended so far (the position of the next one). With Growable and
// FixedCapacity, stored row j holds position j. With SlidingWindow the store
// keeps the last min(length, W) tokens, position p in row p mod W (ring
// order); attention over all of them needs no mask for the newest token, since
// they are exactly its window, and copy_chronological() gathers them in
// position order for everything else.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kappa/cache/formats.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa::cache {

/// Retention policy: the capacity starts at `initial_capacity` tokens and
/// doubles whenever an append needs more (existing rows are copied once).
struct Growable {
  static constexpr bool kWindowed = false;
  Index initial_capacity = 256;
};

/// Retention policy: exactly `capacity` tokens, allocated up front; an append
/// beyond it throws kappa::RangeError and leaves the cache unchanged.
struct FixedCapacity {
  static constexpr bool kWindowed = false;
  Index capacity = 0;
};

/// Retention policy: a ring buffer of the last `window` tokens (Mistral-style
/// sliding-window attention: token p sees positions p - W + 1 .. p).
struct SlidingWindow {
  static constexpr bool kWindowed = true;
  Index window = 0;
};

/// What a retention policy is: one of the three above.
template <class R>
concept RetentionPolicy =
    std::same_as<R, Growable> || std::same_as<R, FixedCapacity> || std::same_as<R, SlidingWindow>;

/// S per-token streams of widths width_0 .. width_{S-1} (see the file comment).
/// \tparam F  storage format (formats.hpp): Native, BF16, F16 or Int8.
template <Scalar T, RetentionPolicy R = Growable, StorageFormat F = Native>
class TokenStore {
 public:
  using Retention = R;
  using Format = F;
  /// How one value is stored (T for Native).
  using Element = typename F::template Element<T>;
  /// The storage of one stream (capacity x width).
  using StreamMatrix = Eigen::Matrix<Element, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  /// A read-only view of the live rows of one stream (no copy).
  using ConstView = Eigen::Block<const StreamMatrix>;
  /// A view of the live rows of one stream in its storage format.
  using Rows = StoredRows<T, F>;

  TokenStore() = default;

  /// Streams of the given widths (each >= 1).
  /// \throws std::invalid_argument for a width < 1, a FixedCapacity < 0, a
  ///         window < 1 or a Growable initial capacity < 0; RangeError when
  ///         the storage, capacity x sum_s width_s scalars, would exceed
  ///         kMaxElements (checked.hpp), before anything is allocated.
  TokenStore(std::vector<Index> widths, R retention)
      : retention_(retention), widths_(std::move(widths)) {
    for (Index w : widths_) {
      if (w < 1)
        throw std::invalid_argument("kappa: cache: stream width must be >= 1, got " +
                                    std::to_string(w));
      row_scalars_ = checked_add("cache: scalars per token (sum of the stream widths)",
                                 row_scalars_, w, kMaxElements);
    }
    Index cap = 0;
    if constexpr (std::same_as<R, Growable>) {
      if (retention_.initial_capacity < 0)
        throw std::invalid_argument("kappa: cache: Growable initial_capacity must be >= 0");
      cap = retention_.initial_capacity;
    } else if constexpr (std::same_as<R, FixedCapacity>) {
      if (retention_.capacity < 0)
        throw std::invalid_argument("kappa: cache: FixedCapacity capacity must be >= 0");
      cap = retention_.capacity;
    } else {
      if (retention_.window < 1) {
        throw std::invalid_argument("kappa: cache: SlidingWindow window must be >= 1, got " +
                                    std::to_string(retention_.window));
      }
      // Grown on demand up to the window: a window from a config (Mistral's
      // 4096, Phi-4-mini's 262144) must not allocate before tokens arrive.
      cap = std::min<Index>(retention_.window, 256);
      // The storage it may grow to must be possible.
      (void)checked_mul("cache: storage (window x scalars per token)", retention_.window,
                        row_scalars_);
    }
    (void)checked_mul("cache: storage (capacity x scalars per token)", cap, row_scalars_);
    data_.resize(widths_.size());
    for (std::size_t s = 0; s < widths_.size(); ++s) data_[s].resize(cap, widths_[s]);
    if constexpr (F::kScaled) {
      scales_.resize(widths_.size());
      for (auto& sc : scales_) sc.resize(cap);
    }
  }

  /// t: tokens appended so far, which is the position of the next token.
  [[nodiscard]] Index length() const { return length_; }
  /// Rows held: t, or min(t, W) for a sliding window.
  [[nodiscard]] Index stored() const {
    if constexpr (R::kWindowed) return std::min(length_, retention_.window);
    return length_;
  }
  /// Position of the oldest stored token: t - stored().
  [[nodiscard]] Index first_position() const { return length_ - stored(); }
  /// Tokens the storage holds without reallocating.
  [[nodiscard]] Index capacity() const { return data_.empty() ? 0 : data_[0].rows(); }
  [[nodiscard]] Index streams() const { return static_cast<Index>(widths_.size()); }
  [[nodiscard]] Index width(Index s) const { return widths_[static_cast<std::size_t>(s)]; }
  [[nodiscard]] const R& retention() const { return retention_; }
  /// Bytes of one token over all streams: sum_s row_bytes(width_s), i.e.
  /// sizeof(element) sum_s width_s, plus 4 bytes of scale per stream for Int8.
  [[nodiscard]] std::size_t bytes_per_token() const {
    std::size_t b = 0;
    for (Index x : widths_) b += row_bytes<F, T>(static_cast<std::size_t>(x));
    return b;
  }
  /// Bytes of the live rows (what attention over the cache reads).
  [[nodiscard]] std::size_t bytes() const {
    return static_cast<std::size_t>(stored()) * bytes_per_token();
  }
  /// Bytes allocated (capacity rows).
  [[nodiscard]] std::size_t capacity_bytes() const {
    return static_cast<std::size_t>(capacity()) * bytes_per_token();
  }

  /// The live rows of stream s: stored() x width_s, a view into the storage.
  /// Row j is position j (Growable, FixedCapacity) or the ring slot j
  /// (SlidingWindow; see slot()).
  /// Native format only (the other formats hand out stored_rows()).
  // (A member template, so that an explicit instantiation of the class for
  // another format does not instantiate it: clang 14 would.)
  template <class F2 = F>
  requires std::same_as<F2, Native>
  [[nodiscard]] ConstView stream(Index s) const {
    require_index("cache stream", s, streams(), "the cache's streams");
    const StreamMatrix& m = data_[static_cast<std::size_t>(s)];
    return ConstView(m, 0, 0, stored(), m.cols());
  }

  /// The live rows of stream s in the storage format (row order as stream()),
  /// a view: what the decode kernel reads.
  [[nodiscard]] Rows stored_rows(Index s) const {
    require_index("cache stream", s, streams(), "the cache's streams");
    const StreamMatrix& m = data_[static_cast<std::size_t>(s)];
    Rows r;
    r.data = m.data();
    r.rows = stored();
    r.cols = m.cols();
    r.stride = m.cols();
    if constexpr (F::kScaled) r.scales = scales_[static_cast<std::size_t>(s)].data();
    return r;
  }

  /// The storage row that holds `position` (first_position() <= position < t).
  [[nodiscard]] Index slot(Index position) const {
    if constexpr (R::kWindowed) return position % retention_.window;
    return position;
  }

  /// Makes room for `tokens` in total without reallocating later (Growable);
  /// for FixedCapacity throws RangeError if tokens > capacity; no-op for a window.
  /// \throws RangeError if the storage would exceed kMaxElements.
  void reserve(Index tokens) {
    if constexpr (std::same_as<R, Growable>) {
      if (tokens > capacity()) reallocate(tokens);
    } else if constexpr (std::same_as<R, FixedCapacity>) {
      if (tokens > capacity()) throw_full(tokens - length_);
    }
  }

  /// Appends n tokens: rows[s] is n x width_s (any view; e.g. a column block
  /// of a stacked projection). All streams get the same n rows, atomically:
  /// on an error nothing changes.
  /// \throws ShapeError if the number of streams, a width, or n differ;
  ///         RangeError if a FixedCapacity store would overflow.
  void append(std::span<const ConstMatrixRef<T>> rows) {
    if (static_cast<Index>(rows.size()) != streams()) {
      throw ShapeError("kappa: cache append: got " + std::to_string(rows.size()) +
                       " streams but the cache has " + std::to_string(streams()));
    }
    if (rows.empty()) return;
    const Index n = rows[0].rows();
    for (std::size_t s = 0; s < rows.size(); ++s) {
      require_shapes(rows[s].rows() == n && rows[s].cols() == widths_[s], "cache append",
                     "stream " + std::to_string(s), rows[s].rows(), rows[s].cols(),
                     "the expected shape", n, widths_[s],
                     "each stream gets n rows of its own width");
    }
    if (n == 0) return;
    if constexpr (F::kScaled) {
      // Int8 cannot store a non-finite value: check everything before writing.
      for (std::size_t s = 0; s < rows.size(); ++s) {
        if (!rows[s].allFinite()) {
          throw std::invalid_argument(
              "kappa: cache append: stream " + std::to_string(s) +
              " has a NaN or infinite value, which the Int8 format cannot store");
        }
      }
    }
    if constexpr (R::kWindowed) {
      const Index w = retention_.window;
      // Before the ring first fills, rows sit at their positions (p mod W =
      // p), so growing keeps them where slot() looks; once length + n
      // reaches W the capacity is W.
      const Index need = std::min(length_ + n, w);
      if (need > capacity()) reallocate(std::min(w, std::max(need, 2 * capacity())));
      const Index keep = std::min(n, w);  // only the last W of the new rows survive
      for (std::size_t s = 0; s < rows.size(); ++s) {
        for (Index i = n - keep; i < n; ++i) put(s, (length_ + i) % w, rows[s], i);
      }
    } else {
      const Index need = length_ + n;
      if (need > capacity()) {
        if constexpr (std::same_as<R, Growable>) {
          reallocate(std::max<Index>(need, std::max<Index>(2 * capacity(), 16)));
        } else {
          throw_full(n);
        }
      }
      for (std::size_t s = 0; s < rows.size(); ++s) {
        if constexpr (std::same_as<F, Native>) {
          data_[s].middleRows(length_, n) = rows[s];
        } else {
          for (Index i = 0; i < n; ++i) put(s, length_ + i, rows[s], i);
        }
      }
    }
    length_ += n;
  }

  /// Rolls back to the first `len` tokens (speculative decoding: drop the
  /// rejected draft tokens). For a sliding window this needs every token of the
  /// new window still to be stored: once the ring has wrapped, the tokens it
  /// overwrote cannot come back, so that rollback throws.
  /// \throws RangeError if len > length(), or the rows needed were evicted.
  void truncate(Index len) {
    require_index("cache truncate length", len, length_ + 1, "lengths 0..length()");
    if constexpr (R::kWindowed) {
      const Index need_from = len - std::min(len, retention_.window);
      if (need_from < first_position()) {
        throw RangeError("kappa: cache truncate: cannot roll back a sliding window of " +
                         std::to_string(retention_.window) + " tokens from length " +
                         std::to_string(length_) + " to " + std::to_string(len) +
                         ": positions from " + std::to_string(need_from) + " were evicted (the " +
                         "oldest stored is " + std::to_string(first_position()) + ")");
      }
    }
    length_ = len;
  }

  /// Forgets every token (length 0); keeps the allocation.
  void reset() { length_ = 0; }

  /// Copies `count` tokens of stream s, positions first .. first + count - 1,
  /// in position order into out (count x width_s), handling the ring's wrap.
  /// \throws RangeError if s is not a stream, count < 0 or a position is not
  ///         stored; ShapeError unless out is count x width_s. Nothing is
  ///         written on an error.
  void copy_chronological(Index s, Index first, Index count, MatrixRef<T> out) const {
    require_index("cache stream", s, streams(), "the cache's streams");
    require_nonnegative("cache copy: count", count);
    const Index width = widths_[static_cast<std::size_t>(s)];
    require_shapes(out.rows() == count && out.cols() == width, "cache copy", "out", out.rows(),
                   out.cols(), "the expected shape", count, width,
                   "out is count x the stream's width");
    if (count == 0) return;
    // first + count > length_, written so that it cannot overflow.
    if (first < first_position() || first > length_ - count) {
      throw RangeError("kappa: cache: the " + std::to_string(count) + " positions from " +
                       std::to_string(first) + " are not all stored (stored: " +
                       std::to_string(first_position()) + ".." + std::to_string(length_ - 1) + ")");
    }
    const StreamMatrix& m = data_[static_cast<std::size_t>(s)];
    Index done = 0;
    while (done < count) {
      const Index row = slot(first + done);
      const Index run = std::min(count - done, capacity() - row);
      if constexpr (std::same_as<F, Native>) {
        out.middleRows(done, run) = m.middleRows(row, run);
      } else {
        const Rows rs = stored_rows(s);
        for (Index i = 0; i < run; ++i) {
          decode_row<F, T>(m.row(row + i).data(), width, rs.scale(row + i),
                           out.row(done + i).data());
        }
      }
      done += run;
    }
  }

 private:
  [[noreturn]] void throw_full(Index n) const {
    throw RangeError("kappa: cache: appending " + std::to_string(n) + " tokens to " +
                     std::to_string(length_) + " would exceed the fixed capacity of " +
                     std::to_string(capacity()) + " tokens");
  }
  void reallocate(Index cap) {
    (void)checked_mul("cache: storage (capacity x scalars per token)", cap, row_scalars_);
    for (std::size_t s = 0; s < data_.size(); ++s) {
      StreamMatrix bigger(cap, widths_[s]);
      bigger.topRows(length_) = data_[s].topRows(length_);
      data_[s].swap(bigger);
      if constexpr (F::kScaled) {
        Eigen::VectorXf more(cap);
        more.head(length_) = scales_[s].head(length_);
        scales_[s].swap(more);
      }
    }
  }
  /// Stores row i of src as storage row `row` of stream s.
  void put(std::size_t s, Index row, const ConstMatrixRef<T>& src, Index i) {
    if constexpr (std::same_as<F, Native>) {
      data_[s].row(row) = src.row(i);
    } else {
      // src's rows are contiguous (row-major) even when src is a column block.
      float scale = 0.0f;
      encode_row<F, T>(src.row(i).data(), src.cols(), data_[s].row(row).data(), &scale);
      if constexpr (F::kScaled) scales_[s](row) = scale;
    }
  }

  R retention_{};
  std::vector<Index> widths_;
  std::vector<StreamMatrix> data_;
  std::vector<Eigen::VectorXf> scales_;  // Int8: one scale per row of each stream
  Index row_scalars_ = 0;                // sum_s width_s
  Index length_ = 0;
};

}  // namespace kappa::cache
