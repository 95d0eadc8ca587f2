// kappa/cache/decode.hpp - the decode kernel: a few queries against the rows
// a cache stores, in any storage format (formats.hpp).
//
// For m <= kDecodeRows query rows q_i (one token, or the G heads of one GQA
// group stacked as rows) against one kv head's stored K (N x d) and V
// (N x d_v):
//
//     x_ij = s q_i . k_j (+ bias_ij)     for the keys j that row i sees
//     y_i  = sum_j f(x_ij - m_i) v_j / sum_j f(x_ij - m_i)
//
// with m_i the row maximum for shift-invariant kernels (Softmax), else 0.
// The keys are cut into fixed chunks of kDecodeChunk (independent of the
// thread count, so results are too) that run on separate threads (OpenMP);
// chunk c yields per row its maximum m_ci, sum z_ci and partial output y_ci,
// combined as m_i = max_c m_ci, z_i = sum_c e^{m_ci - m_i} z_ci,
// y_i = sum_c e^{m_ci - m_i} y_ci / z_i ("split-K", flash decoding). Inside a
// chunk, float rows on x86 with AVX-512 or AVX2 + FMA go through the register
// loops of decode_simd.hpp (any format: each value is loaded, widened and
// used in a register); otherwise stored rows are widened to T kDecodeTile rows
// at a time (a block of a few KB that stays in L1) and a float cache is read
// in place, by Eigen's dot products and row updates or, from
// kDecodeGemmRows(Native) rows on, small GEMMs. An Int8 row's scale multiplies
// its dot product (K) or its weight (V), never the row.
// K and V are each read once; scores and sums are in T.
//
// Masks: row i sees the keys bound.range(i) (a KeyRange) and, for a mask
// with holes (kHasHoles: BooleanMask, or one combined with it), of those the
// keys bound.allowed(i, j); such masks take the portable path below (rows
// widened per tile, each hidden key skipped), not the register loops. A key
// a row does not see never touches that row, not even through 0 * NaN. A
// bound with `static constexpr bool kHasBias = true` and `void
// add_bias(Index i, Index j0, T* scores, Index len) const` has its bias
// added to the scaled scores x_ij (keys j0 .. j0 + len - 1 of row i) before
// the maximum and f. A row that sees no key gets a zero output.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kappa/attention/concepts.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/cache/decode_simd.hpp"
#include "kappa/cache/formats.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/threading.hpp"

namespace kappa {

/// At most this many query rows go through the decode kernel at once (more
/// rows are processed in blocks of it, each reading the keys it needs).
inline constexpr Index kDecodeRows = 16;
#if KAPPA_DECODE_SIMD
static_assert(kDecodeRows <= cache::simd::kDecodeRowsMax,
              "kappa: the register loops take at most kDecodeRowsMax rows at once");
#endif
/// Keys per chunk of the decode kernel (the unit of work of one thread).
inline constexpr Index kDecodeChunk = 2048;
/// Stored rows widened to T at once inside a chunk.
inline constexpr Index kDecodeTile = 32;
/// From this many query rows on, a tile's scores and outputs are small GEMMs
/// (the loaded keys and values are reused across the rows in registers):
/// for rows widened into a tile, and (kDecodeGemmRowsNative) for a Native
/// cache read in place, where up to 8 rows stream faster row by row.
inline constexpr Index kDecodeGemmRows = 4;
inline constexpr Index kDecodeGemmRowsNative = 9;

namespace detail {
/// Whether a bound mask adds score biases (kHasBias = true).
template <class B>
constexpr bool bound_has_bias() {
  if constexpr (requires { B::kHasBias; }) {
    return static_cast<bool>(B::kHasBias);
  } else {
    return false;
  }
}

/// Rows j0 .. j0 + n - 1 of s as T, row r at data + r * stride: read in place
/// from a Native cache, else widened into `tile` (n rows of s.cols values).
template <class T>
struct TileRows {
  const T* data;
  Index stride;
};
template <class T, class F>
TileRows<T> tile_rows(const cache::StoredRows<T, F>& s, Index j0, Index n, T* tile) {
  if constexpr (std::is_same_v<F, cache::Native>) {
    return {s.row(j0), s.stride};
  } else {
    for (Index jj = 0; jj < n; ++jj)
      cache::widen_row<F, T>(s.row(j0 + jj), s.cols, tile + jj * s.cols);
    return {tile, s.cols};
  }
}
}  // namespace detail

/// Scratch memory of the decode kernel, reused across calls (steady-state
/// calls allocate nothing).
template <Scalar T>
struct DecodeWorkspace {
  RowMatrix<T> q_scaled;  ///< s Q of the current row block (m x d)
  RowMatrix<T> part_y;    ///< y_ci, chunk c at rows c m .. c m + m - 1 (chunks m x d_v)
  RowMatrix<T> part_mz;   ///< m_ci (column 2i) and z_ci (column 2i + 1), one row per chunk
  /// Per thread: scores (m x chunk) and a tile of widened rows.
  std::vector<std::vector<T>> scores, tile;
};

namespace detail {

template <class T, class F, class K, class B>
void decode_block(const ConstMatrixRef<T>& q, const cache::StoredRows<T, F>& k,
                  const cache::StoredRows<T, F>& v, MatrixRef<T> y, const K& kernel, const B& bound,
                  Index row0, Index group, T scale, DecodeWorkspace<T>& ws) {
  const Index m = q.rows(), d = k.cols, dv = v.cols;
  // Row r's keys (bound row (row0 + r) / group) and their union.
  KeyRange ranges[kDecodeRows];
  Index lo = std::numeric_limits<Index>::max(), hi = 0;
  for (Index r = 0; r < m; ++r) {
    ranges[r] = bound.range((row0 + r) / group);
    if (ranges[r].end > ranges[r].begin) {
      lo = std::min(lo, ranges[r].begin);
      hi = std::max(hi, ranges[r].end);
    }
  }
  y.setZero();
  if (hi <= lo) return;               // no row sees a key
  ws.q_scaled.noalias() = scale * q;  // (m, d)
  const Index span = hi - lo;
  const Index n_chunks = (span + kDecodeChunk - 1) / kDecodeChunk;
  ws.part_y.resize(n_chunks * m, dv);
  ws.part_mz.resize(n_chunks, 2 * m);
  const int threads = static_cast<int>(std::min<Index>(num_threads(), n_chunks));
  const auto n_scratch = static_cast<std::size_t>(std::max(threads, 1));
  if (ws.scores.size() < n_scratch) ws.scores.resize(n_scratch);
  if (ws.tile.size() < n_scratch) ws.tile.resize(n_scratch);
  const std::size_t tile_size = std::is_same_v<F, cache::Native>
                                    ? 0
                                    : static_cast<std::size_t>(kDecodeTile * std::max(d, dv));
  for (std::size_t t = 0; t < n_scratch; ++t) {
    ws.scores[t].resize(static_cast<std::size_t>(m * kDecodeChunk));
    ws.tile[t].resize(tile_size);
  }
  using Row = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>;
  constexpr Index gemm_rows =
      std::is_same_v<F, cache::Native> ? kDecodeGemmRowsNative : kDecodeGemmRows;
  using OutRow = Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>;

  const auto chunk = [&](Index c, std::size_t tid) {
    T* sc = ws.scores[tid].data();  // row r at sc + r * len
    T* tile = ws.tile[tid].data();
    const Index b0 = lo + c * kDecodeChunk;
    const Index len = std::min(kDecodeChunk, hi - b0);
    // Float rows, with the SIMD loops compiled in: values are read (and
    // widened) in registers (decode_simd.hpp), for any format and number of
    // rows (benchmarks/README.md, "Decoding against the read ceiling").
#if KAPPA_DECODE_SIMD
    constexpr bool fused = std::is_same_v<T, float> && !B::kHasHoles;
    if constexpr (fused) cache::simd::scores<F>(ws.q_scaled.data(), m, k, b0, len, sc, len);
#else
    constexpr bool fused = false;
#endif
    // Scores: x_rj = s q_r . k_j (times the row scale for Int8). Few rows:
    // one dot product per (key, row); more rows: a small GEMM per tile,
    // which reuses each loaded key across the rows in registers.
    for (Index t0 = 0; t0 < len && !fused; t0 += kDecodeTile) {
      const Index tl = std::min(kDecodeTile, len - t0);
      const auto [base, stride] = tile_rows(k, b0 + t0, tl, tile);
      if (m >= gemm_rows) {
        const Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>> kt(
            base, tl, d, Eigen::OuterStride<>(stride));
        Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>> st(sc + t0, m, tl,
                                                             Eigen::OuterStride<>(len));
        st.noalias() = ws.q_scaled * kt.transpose();  // (m, tl)
        if constexpr (F::kScaled) {
          for (Index jj = 0; jj < tl; ++jj) st.col(jj) *= static_cast<T>(k.scale(b0 + t0 + jj));
        }
        continue;
      }
      for (Index jj = 0; jj < tl; ++jj) {
        const Row k_j(base + jj * stride, d);
        const T ks = static_cast<T>(k.scale(b0 + t0 + jj));
        for (Index r = 0; r < m; ++r) {
          T x = k_j.dot(ws.q_scaled.row(r));
          if constexpr (F::kScaled) x *= ks;
          sc[r * len + t0 + jj] = x;
        }
      }
    }
    // Per row: its keys in this chunk, bias, shift, f, sum.
    Index a[kDecodeRows], e[kDecodeRows];
    for (Index r = 0; r < m; ++r) {
      a[r] = std::clamp(ranges[r].begin - b0, Index{0}, len);
      e[r] = std::clamp(ranges[r].end - b0, Index{0}, len);
      T shift = T(0), z = T(0);
      if (e[r] > a[r]) {
        T* x = sc + r * len + a[r];
        const Index n = e[r] - a[r];
        if constexpr (bound_has_bias<B>()) bound.add_bias((row0 + r) / group, b0 + a[r], x, n);
        if constexpr (B::kHasHoles) {  // hidden keys out of the maximum
          for (Index j = 0; j < n; ++j)
            if (!bound.allowed((row0 + r) / group, b0 + a[r] + j))
              x[j] = -std::numeric_limits<T>::infinity();
        }
        Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> xa(x, n);
        if constexpr (ShiftInvariantKernel<K>) {
          shift = xa.maxCoeff();
          if (!std::isfinite(shift)) shift = T(0);  // all -inf (biased away) or NaN: no shift
          xa -= shift;
        }
        if constexpr (HasVectorForm<K, T>) {
          kernel.apply(x, n);
        } else {
          for (Index j = 0; j < n; ++j) x[j] = kernel(x[j]);
        }
        if constexpr (B::kHasHoles) {  // weight 0 whatever f(-inf) is
          for (Index j = 0; j < n; ++j)
            if (!bound.allowed((row0 + r) / group, b0 + a[r] + j)) x[j] = T(0);
        }
        z = xa.sum();
      }
      ws.part_mz(c, 2 * r) = shift;
      ws.part_mz(c, 2 * r + 1) = z;
    }
    // Values: y_cr = sum_j a_rj v_j over the keys row r sees.
    auto y_c = ws.part_y.middleRows(c * m, m);
    y_c.setZero();
#if KAPPA_DECODE_SIMD
    if constexpr (fused) cache::simd::accumulate<F>(sc, len, m, a, e, v, b0, y_c.data());
#endif
    for (Index t0 = 0; t0 < len && !fused; t0 += kDecodeTile) {
      const Index tl = std::min(kDecodeTile, len - t0);
      const auto [base, stride] = tile_rows(v, b0 + t0, tl, tile);
      // Every row sees every key of the tile (never with holes: 0 * NaN).
      bool full = m >= gemm_rows && !B::kHasHoles;
      for (Index r = 0; r < m && full; ++r) full = a[r] <= t0 && t0 + tl <= e[r];
      if (full) {
        Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>> vt(base, tl, dv,
                                                                   Eigen::OuterStride<>(stride));
        Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>> at(sc + t0, m, tl,
                                                             Eigen::OuterStride<>(len));
        if constexpr (F::kScaled) {
          for (Index jj = 0; jj < tl; ++jj) at.col(jj) *= static_cast<T>(v.scale(b0 + t0 + jj));
        }
        y_c.noalias() += at * vt;  // (m, d_v)
        continue;
      }
      for (Index jj = 0; jj < tl; ++jj) {
        const Index j = t0 + jj;
        const Row v_j(base + jj * stride, dv);
        const T vs = static_cast<T>(v.scale(b0 + j));
        for (Index r = 0; r < m; ++r) {
          if (j < a[r] || j >= e[r]) continue;
          if constexpr (B::kHasHoles) {
            if (!bound.allowed((row0 + r) / group, b0 + j)) continue;
          }
          T w = sc[r * len + j];
          if constexpr (F::kScaled) w *= vs;
          OutRow(y_c.row(r).data(), dv).noalias() += w * v_j;
        }
      }
    }
  };
#ifdef _OPENMP
  if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index c = 0; c < n_chunks; ++c) chunk(c, static_cast<std::size_t>(omp_get_thread_num()));
  } else
#endif
  {
    for (Index c = 0; c < n_chunks; ++c) chunk(c, 0);
  }
  // Combine the chunks row by row.
  for (Index r = 0; r < m; ++r) {
    T m_r = -std::numeric_limits<T>::infinity();
    for (Index c = 0; c < n_chunks; ++c)
      if (ws.part_mz(c, 2 * r + 1) != T(0)) m_r = std::max(m_r, ws.part_mz(c, 2 * r));
    T z = T(0);
    auto y_r = y.row(r);
    for (Index c = 0; c < n_chunks; ++c) {
      const T z_c = ws.part_mz(c, 2 * r + 1);
      if (z_c == T(0)) continue;  // this chunk holds none of the row's keys (or only zeros)
      const T w = ShiftInvariantKernel<K> ? std::exp(ws.part_mz(c, 2 * r) - m_r) : T(1);
      z += w * z_c;
      y_r += w * ws.part_y.row(c * m + r);
    }
    if (z != T(0)) {
      y_r *= T(1) / z;
    } else {
      y_r.setZero();
    }
  }
}

}  // namespace detail

/// Y = Z^-1 A V for the query rows q (n x d) against stored rows k (N x d)
/// and v (N x d_v) of any storage format, into y (n x d_v): the decode
/// kernel described in the file comment. Query row r belongs to mask row
/// r / group (group = G when the G heads of one GQA group are stacked as
/// rows, row i G + j = query i of head j); `mask` is bound to
/// (n / group, N). Rows go through in blocks of kDecodeRows.
/// \throws ShapeError when the shapes do not fit or group does not divide
///         n; std::invalid_argument for a non-finite kernel scale or
///         group < 1; whatever the mask's bind() throws.
template <Scalar T, cache::StorageFormat F, class K = kernels::Softmax, class M = NoMask>
void decode_attention_into(ConstMatrixRef<T> q, const cache::StoredRows<T, F>& k,
                           const cache::StoredRows<T, F>& v, MatrixRef<T> y, DecodeWorkspace<T>& ws,
                           const K& kernel = {}, const M& mask = {}, Index group = 1) {
  static_assert(ScoreKernel<K>,
                "kappa: the decode kernel needs a score kernel (f applied to s q.k); feature-map "
                "kernels decode through attention_into on a Native cache");
  static_assert(Mask<M>, "kappa: decode_attention_into: M is not a mask");
  constexpr const char* what = "decode_attention_into";
  if (group < 1)
    throw std::invalid_argument("kappa: decode_attention_into: group must be >= 1, got " +
                                std::to_string(group));
  require_shapes(k.cols == q.cols(), what, "Q", q.rows(), q.cols(), "K", k.rows, k.cols,
                 "Q and K need the same width d");
  require_shapes(v.rows == k.rows, what, "K", k.rows, k.cols, "V", v.rows, v.cols,
                 "K and V need the same number of rows");
  require_shapes(y.rows() == q.rows() && y.cols() == v.cols, what, "Y", y.rows(), y.cols(),
                 "(n x d_v)", q.rows(), v.cols, "Y must be n x d_v");
  require_shapes(q.rows() % group == 0, what, "Q", q.rows(), q.cols(), "group rows", group, 1,
                 "the rows of Q must be whole groups");
  const auto bound = mask.bind(q.rows() / group, k.rows);
  const T scale = static_cast<T>(
      require_finite("decode kernel scale s", kernel.scale_for(static_cast<Index>(q.cols()))));
  for (Index r0 = 0; r0 < q.rows(); r0 += kDecodeRows) {
    const Index m = std::min(kDecodeRows, q.rows() - r0);
    detail::decode_block<T, F>(ConstMatrixRef<T>(q.middleRows(r0, m)), k, v,
                               MatrixRef<T>(y.middleRows(r0, m)), kernel, bound, r0, group, scale,
                               ws);
  }
}

}  // namespace kappa
