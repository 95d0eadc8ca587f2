// kappa/attention/attention.hpp - kernel-generic attention Y = Z^-1 A V.
//
// Given Q (N_Q x d_QK), K (N_KV x d_QK), V (N_KV x d_V), a kernel f_kappa and
// a mask, kappa computes (the paper's section 2, eq. for one head)
//
//     A = f_kappa(s Q K^T)          (N_Q x N_KV), masked entries set to 0
//     Z = diag(A 1)                 (N_Q x N_Q), the row sums of A
//     Y = Z^-1 A V                  (N_Q x d_V)
//
// For a feature-map kernel A = phi(Q) phi(K)^T instead.
//
// With a score bias B (attention/bias.hpp: a bias matrix, ALiBi, T5 relative
// position buckets) A = f_kappa(s Q K^T + B): the bias is a mask-like policy,
// combined with a mask by all_of().
//
// Documented edge cases:
//  * A query row whose keys are all masked, or whose normalizer Z_ii is exactly
//    zero, yields a zero output row and a zero weights row - never NaN. So
//    does a row whose visible scores are all -inf (a bias of -inf hides a key).
//  * A row's output depends only on the keys it can see: a NaN or inf in K or
//    V at a key a row cannot see (masked, padded, outside its window) never
//    reaches that row, on any path. (A product of the zero weights with such a
//    value would be NaN; kappa checks the values of partly hidden keys and
//    then sums each row over its own keys. Keys every row of a block sees are
//    not checked: the unmasked hot path costs nothing.) A NaN at a key the row
//    sees makes that row NaN, as the mathematics says.
//  * For shift-invariant kernels (Softmax) kappa subtracts each row's maximum
//    m_i (over visible keys) before f, so logits of any size stay finite. The
//    A and Z it reports (attention_details) are then exp(-m_i) times the
//    mathematical ones, row by row; the weights Z^-1 A and the output Y are
//    exact. The shifts m_i are reported too, so A e^{m_i} can be rebuilt.
//
// Cost: 2 N_Q N_KV d_QK + 2 N_Q N_KV d_V flops (4 N_Q N_KV d when equal) plus
// N_Q N_KV kernel evaluations. Three evaluation paths, chosen by shape
// (AttentionWorkspace::path can force one):
//  * blocked: blocks of query rows, each with its scores over all the keys it
//    may see (scratch O(block x N_KV), within about 2 MB while N_KV <= 8192
//    floats; with a causal or sliding-window mask it skips the keys no row of
//    a block can see);
//  * tiled, for score kernels once N_KV > kTiledMinRowBytes / sizeof(T):
//    blocks of kTileRows query rows x tiles of kTileKeys keys with the online
//    softmax (a running row maximum and sum, rescaling the partial Y), so the
//    scratch is a fixed kTileRows x (kTileKeys + d_QK + 3) per thread whatever
//    N_KV, the GEMMs keep their shape however long the context, and fully
//    masked tiles are skipped. Kernels that are not shift-invariant take no
//    maximum (their A is summed as is). It equals the blocked path to
//    rounding (tests: 1e-5 relative in float, 1e-12 in double). For float
//    softmax with a mask of key ranges (none, causal, window, padding; with
//    or without a score bias) in a build for AVX-512 or AVX2 + FMA, its
//    products run on the register-blocked kernels of tile_simd.hpp (blocks
//    of kSimdTileRows rows, padded to a multiple of the score panel's 48
//    (24) queries, the block's s Q^T packed once, K and V read in place;
//    with enough blocks per thread, kSimdPassBlocks blocks share one pass
//    over K and V, whose tiles then come from memory once per pass), at
//    about 0.85 of the FMA peak against Eigen's 0.55 on these shapes; kAuto
//    then takes it from kSimdMinRows query rows on, whatever N_KV;
//  * few-query (a decode step: at most kFewQueryRows queries seeing the same
//    keys) is computed transposed so that the long key dimension drives the
//    GEMMs, split over key chunks.
// Feature-map kernels always take the blocked path.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kappa/attention/concepts.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/attention/tile_simd.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/threading.hpp"

namespace kappa {

/// Everything attention computes, for those who want to look inside.
template <Scalar T>
struct AttentionDetails {
  RowMatrix<T> scores;   ///< A (N_Q x N_KV); row-shifted for Softmax, see above
  Vector<T> normalizer;  ///< diag(Z) (N_Q), the row sums of A
  RowMatrix<T> weights;  ///< Z^-1 A (N_Q x N_KV); rows sum to 1 (or are zero)
  Vector<T> row_shift;   ///< m_i subtracted before f (0 for other kernels)
  RowMatrix<T> output;   ///< Y = Z^-1 A V (N_Q x d_V)
};

/// Which evaluation attention_into uses for score kernels (feature-map
/// kernels always take the blocked path).
enum class AttentionPath {
  kAuto,     ///< few-query path for decode shapes, else blocked or tiled by N_KV
  kBlocked,  ///< blocks of query rows, each with its scores over all its keys
  kTiled,    ///< blocks of query rows x tiles of keys, online softmax
};

/// Reusable scratch memory for attention_into (one per thread).
template <Scalar T>
struct AttentionWorkspace {
  /// The path to take; kAuto (the default) chooses by shape. The others force
  /// one path for every shape (tests and benchmarks compare them).
  AttentionPath path = AttentionPath::kAuto;
  std::vector<T> scores;      // block of A (blocked) or one tile of A (tiled)
  std::vector<T> z;           // block of diag(Z)
  std::vector<T> tile_q;      // tiled: s Q of the block
  std::vector<T> tile_m;      // tiled: running row maxima, row sums, rescale factors
  std::vector<T> tile_y;      // tiled, SIMD kernels: the block's partial output
  RowMatrix<T> phi_q, phi_k;  // feature maps (feature-map kernels only)
  // Few-query path: s Q; per thread a chunk of A^T; per key chunk (A V)^T,
  // and the chunks' row maxima and sums (column-major: one query per column).
  RowMatrix<T> q_scaled;
  std::vector<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> split_scores{1};
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> split_y, split_mz;
};

/// Up to this many query rows that share one key range (a decode step: one
/// token, or the heads of one token stacked as rows) take the transposed path.
inline constexpr Index kFewQueryRows = 16;
/// Keys per chunk of the few-query path (chunks run on separate threads).
inline constexpr Index kSplitKeys = 4096;
/// Up to this many queries the few-query path streams K and V row by row
/// (memory-bound); more queries use GEMMs (compute-bound).
inline constexpr Index kStreamRows = 8;
/// Tiled path: query rows per block and keys per tile. Its scratch is
/// kTileRows x (kTileKeys + d_QK + 3) scalars per thread, whatever N_KV.
inline constexpr Index kTileRows = 128;
inline constexpr Index kTileKeys = 256;
/// Query rows per block of the tiled path when it runs the register-blocked
/// float kernels of tile_simd.hpp (a multiple of their panel sizes).
inline constexpr Index kSimdTileRows = 96;
/// Blocks of kSimdTileRows rows that share one pass over K and V in the SIMD
/// tiled path (as many passes as split evenly over the threads; the other
/// blocks run alone): each tile of K and V then comes from memory once per
/// pass instead of once per block. With 128k keys (128 MB of K and V at d =
/// 128) this is 10-25% faster on Zen 5; the pass's working set (2 blocks' s
/// Q^T and Y, a tile of scores, a tile of K and of V) is about 0.55 MB at d =
/// 128, within a 1 MB L2.
inline constexpr int kSimdPassBlocks = 2;

namespace detail {
/// The blocks [begin, end) of the tiled path's unit of work u, when the first
/// n_passes units are passes of kSimdPassBlocks blocks and the others single
/// blocks (attention_into hands out the passes first: they are the larger).
struct UnitBlocks {
  Index begin, end;
};
inline UnitBlocks unit_blocks(Index u, Index n_passes) {
  if (u < n_passes) return {u * kSimdPassBlocks, (u + 1) * kSimdPassBlocks};
  const Index b = n_passes * kSimdPassBlocks + (u - n_passes);
  return {b, b + 1};
}
}  // namespace detail

/// From this many query rows on, kAuto takes the tiled path whenever its
/// SIMD kernels apply (detail::simd_tiled), whatever N_KV: they run faster
/// than Eigen's GEMMs in the blocked path (benchmarks/README.md).
inline constexpr Index kSimdMinRows = 32;
/// kAuto takes the tiled path for score kernels once a row of scores is
/// longer than this many bytes (N_KV > 8192 keys in float, 4096 in double):
/// beyond it the blocked path's blocks shrink below 64 rows (block_rows) and
/// its scratch grows with N_KV (benchmarks/README.md, "Long context").
inline constexpr Index kTiledMinRowBytes = Index{32} * 1024;

namespace detail {

// Policies are checked here, not by constraining the entry points, so that a
// wrong type gets kappa's message rather than a list of failed overloads.
template <class K, class M>
consteval bool check_policies() {
  constexpr bool ok = check_kernel<K>() && check_mask<M>();
  if constexpr (ok) {
    static_assert(!BiasedBound<decltype(std::declval<const M&>().bind(0, 0))> || ScoreKernel<K>,
                  "kappa: a score bias needs a score kernel (A = f(s Q K^T + bias)); a "
                  "feature-map kernel has no scores to add it to");
  }
  return ok;
}

/// check_policies for multi-head entry points: a per-head policy is checked
/// through its head(0).
template <class K, class M>
consteval bool check_head_policies() {
  if constexpr (PerHeadMask<M>) {
    return check_policies<K, std::decay_t<decltype(std::declval<const M&>().head(0))>>();
  } else {
    return check_policies<K, M>();
  }
}

/// Adds the bound's bias to scores[0, len) of query row i, keys j0.. (no-op
/// for masks without a bias).
template <class B, class T>
inline void add_bias(const B& bound, Index i, Index j0, T* scores, Index len) {
  if constexpr (BiasedBound<B>) {
    if (len > 0) bound.add_bias(i, j0, scores, len);
  }
}

/// Whether the shape makes the tiled path faster or needed (see kTiledMinRowBytes).
template <class T>
bool prefer_tiled(Index n_kv) {
  return n_kv > kTiledMinRowBytes / static_cast<Index>(sizeof(T));
}

/// The per-thread scratch bytes of the tiled path for widths d_QK and d_V
/// (fixed, whatever N_Q and N_KV): the larger of the Eigen-GEMM tiles
/// (kTileRows x (kTileKeys + d_QK + 3); Eigen's packing buffers come on top,
/// as on every path) and the SIMD kernels' (a tile of kTileKeys x
/// kSimdTileRows scores, and per block of a pass kSimdTileRows x (d_QK + d_V
/// + 4) and a row of kTileKeys for a score bias).
template <class T>
Index tiled_scratch_bytes(Index d_qk, Index d_v = 0) {
  const Index gemm = kTileRows * (kTileKeys + d_qk + 3);
  const Index simd =
      kSimdTileRows * kTileKeys + kSimdPassBlocks * (kSimdTileRows * (d_qk + d_v + 4) + kTileKeys);
  return std::max(gemm, simd) * static_cast<Index>(sizeof(T));
}

/// Throws std::invalid_argument naming kernel K and the scale s (see
/// checked_scale).
template <class K>
[[noreturn]] void throw_bad_scale(double s, bool overflows_t) {
  std::string what = "attention: the ";
  if constexpr (requires { K::kName; }) {
    what += K::kName;
    what += " kernel's";
  } else {
    what += "kernel's";
  }
  what += " scale s";
  if (!overflows_t) require_finite(what, s);  // throws, naming nan / inf / -inf
  throw std::invalid_argument("kappa: " + what + " = " + std::to_string(s) +
                              " is not finite in the scalar type (float)");
}

/// The scale s of a score kernel for width d_QK, in T. Throws
/// std::invalid_argument naming the kernel and the value when s is NaN or
/// infinite, or overflows T: such a scale would turn every output into NaN
/// silently. Called once per attention call; allocates only to throw.
template <class T, class K>
T checked_scale(const K& kernel, Index d_qk) {
  const double s = kernel.scale_for(d_qk);
  const T st = static_cast<T>(s);
  if (!std::isfinite(st)) [[unlikely]]
    throw_bad_scale<K>(s, std::isfinite(s));
  return st;
}

/// Checks the shapes of Q, K, V (and Y if given) and throws ShapeError naming
/// both shapes when they do not fit.
template <class T>
void check_attention_shapes(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
                            const ConstMatrixRef<T>& v) {
  require_shapes(q.cols() == k.cols(), "attention", "Q", q, "K", k,
                 "Q and K must have the same number of columns, d_QK");
  require_shapes(k.rows() == v.rows(), "attention", "K", k, "V", v,
                 "K and V must have the same number of rows, N_KV");
}

/// Rows per block: enough for an efficient GEMM (16..128 rows), few enough
/// that the block of A (rows x N_KV) stays within about 2 MB (L2/L3). Measured
/// on Zen 4 at N = 4096, d = 64 when this was tuned: 256 KB blocks 79k
/// tokens/s, 512 KB 101k, 2 MB 108k, and the whole N x N matrix at once 49k.
template <class T>
Index block_rows(Index n_q, Index n_kv) {
  const Index target = (Index{2048} * 1024) / static_cast<Index>(sizeof(T));  // elements
  Index b = n_kv > 0 ? target / n_kv : n_q;
  b = std::clamp<Index>(b, 16, 128);
  return std::max<Index>(1, std::min(b, n_q));
}

/// The per-thread scratch bytes of the blocked path: one block of scores
/// (block_rows x N_KV), which grows with N_KV once blocks are 16 rows.
template <class T>
Index blocked_scratch_bytes(Index n_q, Index n_kv) {
  return block_rows<T>(n_q, n_kv) * (n_kv + 1) * static_cast<Index>(sizeof(T));
}

/// Applies the kernel to one block of scaled scores in place: turns rows
/// [r0, r0 + rows) of s Q K^T, restricted to keys [kb, kb + span), into A and
/// writes the row sums into z (and the row shifts into shift, if given).
template <class T, class K, class B>
void kernel_rows(const K& kernel, const B& bound, Index r0, Index rows, Index kb, Index span,
                 T* scores, T* z, T* shift) {
  for (Index r = 0; r < rows; ++r) {
    T* row = scores + r * span;
    const KeyRange full = bound.range(r0 + r);
    const Index lo = std::clamp(full.begin - kb, Index{0}, span);
    const Index hi = std::clamp(full.end - kb, lo, span);
    std::fill(row, row + lo, T(0));
    std::fill(row + hi, row + span, T(0));
    T m = T(0);
    Index visible = hi - lo;
    if constexpr (B::kHasHoles) {
      visible = 0;
      for (Index j = lo; j < hi; ++j) {
        if (bound.allowed(r0 + r, kb + j)) ++visible;
      }
    }
    if (visible == 0) {
      std::fill(row + lo, row + hi, T(0));
      z[r] = T(0);
      if (shift) shift[r] = T(0);
      continue;
    }
    add_bias(bound, r0 + r, kb + lo, row + lo, hi - lo);
    if constexpr (ShiftInvariantKernel<K>) {
      m = -std::numeric_limits<T>::infinity();
      if constexpr (B::kHasHoles) {
        for (Index j = lo; j < hi; ++j) {
          if (bound.allowed(r0 + r, kb + j) && !(row[j] <= m)) m = row[j];  // NaN propagates
        }
      } else {
        m = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(row + lo, hi - lo).maxCoeff();
      }
      if (m == -std::numeric_limits<T>::infinity()) {
        // Every visible score is -inf (a bias of -inf masks too): A row 0.
        std::fill(row + lo, row + hi, T(0));
        z[r] = T(0);
        if (shift) shift[r] = T(0);
        continue;
      }
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(row + lo, hi - lo) -= m;
    }
    if constexpr (ScoreKernel<K>) {
      if constexpr (HasVectorForm<K, T>) {
        kernel.apply(row + lo, hi - lo);
      } else {
        for (Index j = lo; j < hi; ++j) row[j] = kernel(row[j]);
      }
    }
    if constexpr (B::kHasHoles) {
      for (Index j = lo; j < hi; ++j) {
        if (!bound.allowed(r0 + r, kb + j)) row[j] = T(0);
      }
    }
    z[r] = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(row + lo, hi - lo).sum();
    if (shift) shift[r] = m;
  }
}

/// The keys any row of [r0, r0 + rows) may see: the union of their ranges.
template <class B>
KeyRange block_keys(const B& bound, Index r0, Index rows) {
  KeyRange u{std::numeric_limits<Index>::max(), 0};
  for (Index r = 0; r < rows; ++r) {
    const KeyRange kr = bound.range(r0 + r);
    if (kr.size() == 0) continue;
    u.begin = std::min(u.begin, kr.begin);
    u.end = std::max(u.end, kr.end);
  }
  if (u.end <= u.begin) return {0, 0};
  return u;
}

/// Y_rows += P V[kb, kb + len) for the rows [r0, r0 + rows) of P (rows x len,
/// row-major, zero where a row cannot see a key), by one GEMM. The rule that
/// a row's output depends only on the keys it can see needs care here: the
/// GEMM multiplies the zeros of P by V's rows, and 0 * NaN = NaN, so a NaN or
/// inf in V at a key some row cannot see would leak into that row. Keys that
/// every row sees need no check; for the others (the block's ragged edges: a
/// causal block's diagonal, a padded tail, every key of a mask with holes) V
/// is checked to be finite, and where it is not the rows are accumulated one
/// by one over their own visible keys. The unmasked hot path checks nothing.
template <class T, class B, class Y>
void accumulate_pv(const B& bound, Index r0, Index rows, Index kb, Index len, const T* p,
                   const ConstMatrixRef<T>& v, Y&& y_rows) {
  const Eigen::Map<const RowMatrix<T>> pm(p, rows, len);
  Index all_b = kb, all_e = kb + len;  // keys every row sees
  if constexpr (B::kHasHoles) {
    all_e = all_b;
  } else {
    for (Index r = 0; r < rows; ++r) {
      const KeyRange kr = bound.range(r0 + r);
      all_b = std::max(all_b, kr.begin);
      all_e = std::min(all_e, kr.end);
    }
    if (all_e < all_b) all_e = all_b;
  }
  bool finite = true;
  if (all_b > kb) finite = v.middleRows(kb, all_b - kb).allFinite();
  if (finite && all_e < kb + len) finite = v.middleRows(all_e, kb + len - all_e).allFinite();
  if (finite) [[likely]] {
    y_rows.noalias() += pm * v.middleRows(kb, len);  // (rows, d_V)
    return;
  }
  for (Index r = 0; r < rows; ++r) {
    const KeyRange kr = bound.range(r0 + r);
    const Index lo = std::clamp(kr.begin - kb, Index{0}, len);
    const Index hi = std::clamp(kr.end - kb, lo, len);
    if constexpr (B::kHasHoles) {
      for (Index j = lo; j < hi; ++j) {
        if (bound.allowed(r0 + r, kb + j)) y_rows.row(r) += pm(r, j) * v.row(kb + j);
      }
    } else if (hi > lo) {
      y_rows.row(r).noalias() += pm.row(r).segment(lo, hi - lo) * v.middleRows(kb + lo, hi - lo);
    }
  }
}

/// Y_r = Y_r / z_r for every row r of y, and a zero row where z_r = 0 (the
/// zero-row rule of the file comment): the last step of the blocked and the
/// tiled paths.
template <class T, class Rows>
void normalize_rows(Rows&& y, const T* z) {
  for (Index r = 0; r < y.rows(); ++r) {
    if (z[r] != T(0)) {
      y.row(r) *= T(1) / z[r];
    } else {
      y.row(r).setZero();
    }
  }
}

/// One block of query rows [r0, r0 + rows): Y_block = Z^-1 A V.
/// `qs` is s Q (score kernels) or phi(Q); `ks` is K or phi(K).
template <class T, class K, class B>
void attention_block(const K& kernel, const B& bound, const ConstMatrixRef<T>& qs, T q_scale,
                     const ConstMatrixRef<T>& ks, const ConstMatrixRef<T>& v, MatrixRef<T>& y,
                     Index r0, Index rows, std::vector<T>& scores_buf, std::vector<T>& z_buf) {
  const KeyRange keys = block_keys(bound, r0, rows);
  const Index span = keys.size();
  if (span == 0) {
    y.middleRows(r0, rows).setZero();
    return;
  }
  const auto n_scores = static_cast<std::size_t>(rows * span);  // both >= 0
  if (scores_buf.size() < n_scores) scores_buf.resize(n_scores);
  if (z_buf.size() < static_cast<std::size_t>(rows)) z_buf.resize(static_cast<std::size_t>(rows));
  Eigen::Map<RowMatrix<T>> a(scores_buf.data(), rows, span);
  a.noalias() = (q_scale * qs.middleRows(r0, rows)) *
                ks.middleRows(keys.begin, span).transpose();  // (rows, span)
  kernel_rows<T>(kernel, bound, r0, rows, keys.begin, span, scores_buf.data(), z_buf.data(),
                 static_cast<T*>(nullptr));
  auto y_block = y.middleRows(r0, rows);
  y_block.setZero();
  accumulate_pv<T>(bound, r0, rows, keys.begin, span, scores_buf.data(), v, y_block);
  normalize_rows(y_block, z_buf.data());
}

/// Scratch of the tiled path (one per thread).
template <class T>
struct TiledScratch {
  std::vector<T>& scores;  // kTileRows x kTileKeys
  std::vector<T>& q;       // kTileRows x d_QK
  std::vector<T>& mla;     // 3 kTileRows: running max m, running sum l, rescale alpha
};

/// One block of query rows [r0, r0 + rows), rows <= kTileRows, over tiles of
/// kTileKeys keys with the online softmax (Milakov and Gimelshein 2018; as in
/// FlashAttention): per row a running maximum m and sum l of f(x - m), and
/// the partial output Y_r = sum_j f(x_rj - m) v_j. A tile with maximum m' > m
/// rescales l and Y_r by e^{m - m'} before adding its own terms. At the end
/// Y_r / l is the exact softmax average. Kernels that are not shift-invariant
/// (Linear, ReLU, Polynomial, a user's f) take no maximum and no rescaling:
/// their A is f(x) itself, summed tile by tile. Tiles no row of the block can
/// see are skipped, and only the rows that see a tile enter its GEMMs.
template <class T, class K, class B>
void tiled_block(const K& kernel, const B& bound, const ConstMatrixRef<T>& q, T scale,
                 const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v, MatrixRef<T>& y, Index r0,
                 Index rows, TiledScratch<T> ws) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  auto y_block = y.middleRows(r0, rows);
  y_block.setZero();
  const KeyRange keys = block_keys(bound, r0, rows);
  if (keys.size() == 0) return;
  const Index d = q.cols();
  const auto n_q = static_cast<std::size_t>(rows * d);
  const auto n_s = static_cast<std::size_t>(rows * std::min(kTileKeys, keys.size()));
  if (ws.q.size() < n_q) ws.q.resize(n_q);
  if (ws.scores.size() < n_s) ws.scores.resize(n_s);
  if (ws.mla.size() < static_cast<std::size_t>(3 * rows))
    ws.mla.resize(static_cast<std::size_t>(3 * rows));
  Eigen::Map<RowMatrix<T>> qs(ws.q.data(), rows, d);
  qs.noalias() = scale * q.middleRows(r0, rows);  // s Q_block
  T* const m = ws.mla.data();
  T* const l = m + rows;
  T* const alpha = l + rows;
  std::fill(m, m + rows, ShiftInvariantKernel<K> ? kNegInf : T(0));
  std::fill(l, l + rows, T(0));
  for (Index kb = keys.begin; kb < keys.end; kb += kTileKeys) {
    const Index len = std::min(kTileKeys, keys.end - kb);
    // The rows that see any key of this tile: [rs, re).
    Index rs = rows, re = 0;
    for (Index r = 0; r < rows; ++r) {
      const KeyRange kr = bound.range(r0 + r);
      if (std::max(kr.begin, kb) < std::min(kr.end, kb + len)) {
        rs = std::min(rs, r);
        re = r + 1;
      }
    }
    if (re <= rs) continue;  // a fully masked tile
    const Index nr = re - rs;
    Eigen::Map<RowMatrix<T>> sc(ws.scores.data(), nr, len);
    sc.noalias() = qs.middleRows(rs, nr) * k.middleRows(kb, len).transpose();  // (nr, len)
    bool rescale = false;
    for (Index r = rs; r < re; ++r) {
      T* row = ws.scores.data() + (r - rs) * len;
      const KeyRange kr = bound.range(r0 + r);
      const Index lo = std::clamp(kr.begin - kb, Index{0}, len);
      const Index hi = std::clamp(kr.end - kb, lo, len);
      alpha[r] = T(1);
      std::fill(row, row + lo, T(0));
      std::fill(row + hi, row + len, T(0));
      if (hi == lo) continue;
      add_bias(bound, r0 + r, kb + lo, row + lo, hi - lo);
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> x(row + lo, hi - lo);
      if constexpr (ShiftInvariantKernel<K>) {
        T mt = kNegInf;
        if constexpr (B::kHasHoles) {
          for (Index j = lo; j < hi; ++j) {
            if (bound.allowed(r0 + r, kb + j) && !(row[j] <= mt)) mt = row[j];  // NaN propagates
          }
        } else {
          mt = x.maxCoeff();
        }
        if (mt == kNegInf) {  // nothing visible here (holes, or a bias of -inf)
          x.setZero();
          continue;
        }
        if (mt > m[r]) {
          alpha[r] = std::exp(m[r] - mt);  // 0 for the first visible tile
          m[r] = mt;
          rescale = true;
        }
        x -= m[r];
      }
      if constexpr (HasVectorForm<K, T>) {
        kernel.apply(row + lo, hi - lo);
      } else {
        for (Index j = lo; j < hi; ++j) row[j] = kernel(row[j]);
      }
      if constexpr (B::kHasHoles) {
        for (Index j = lo; j < hi; ++j) {
          if (!bound.allowed(r0 + r, kb + j)) row[j] = T(0);
        }
      }
      l[r] = alpha[r] * l[r] + x.sum();
    }
    if (rescale) {
      for (Index r = rs; r < re; ++r) {
        if (alpha[r] != T(1)) y_block.row(r) *= alpha[r];
      }
    }
    accumulate_pv<T>(bound, r0 + rs, nr, kb, len, ws.scores.data(), v, y_block.middleRows(rs, nr));
  }
  normalize_rows(y_block, l);
}

/// Whether the register-blocked kernels of tile_simd.hpp can run a tiled
/// call: float, the softmax kernel, a mask of key ranges (no holes; a score
/// bias may come with it),
/// d_V a multiple of the vector width, and a build for AVX-512 or AVX2 + FMA.
template <class T, class K, class B>
bool simd_tiled(Index d_v) {
#ifdef KAPPA_TILE_SIMD
  if constexpr (std::is_same_v<T, float> && std::is_same_v<K, kernels::Softmax> && !B::kHasHoles) {
    return d_v % tile::kLanes == 0;
  }
#endif
  static_cast<void>(d_v);
  return false;
}

#ifdef KAPPA_TILE_SIMD
/// Scratch of the SIMD tiled path (one per thread), for the kSimdPassBlocks
/// blocks of a pass: block b's parts start at b times the sizes below.
struct SimdTileScratch {
  std::vector<float>& qt;   // s Q_block^T, d_QK x kSimdTileRows per block
  std::vector<float>& st;   // one tile of S^T, then of P^T: kTileKeys x kSimdTileRows (shared)
  std::vector<float>& y;    // the block's partial output Y, kSimdTileRows x d_V per block
  std::vector<float>& mla;  // 4 kSimdTileRows per block: maxima m, with this tile, sums l,
                            // rescale alpha; then kTileKeys for one row's score bias
};

/// One block of rows <= kSimdTileRows query rows of the SIMD tiled path,
/// through the kernels of tile_simd.hpp: tiled_block's online softmax,
/// transposed (queries along the vector lanes), on the block's rows padded
/// with zero queries to a multiple of tile::kScoreCols. begin() sets it up,
/// tile() takes one tile of keys, finish() writes the block's rows of Y.
/// Tiles every row of the block sees in full take the fused path (the
/// column maxima from the score registers); ragged tiles (a causal diagonal,
/// a window's edges, a padded tail) set hidden scores to -inf before the
/// maxima and their weights to 0 after the exp. With a score bias every
/// tile takes the ragged path: the bias is added row by row (through a row
/// of scratch) before the maxima, and a bias of -inf hides a key like the
/// mask.
template <class B>
class SimdTiledBlock {
 public:
  static constexpr Index kRows = kSimdTileRows;
  static_assert(kRows % tile::kScoreCols == 0 && tile::kScoreCols % tile::kPvRows == 0);

  /// Returns false, having set nothing up, when a key that some row of the
  /// block cannot see holds a non-finite value in V (0 * NaN would leak into
  /// that row through the P V kernel): tiled_block then sums each row over
  /// its own keys. qt, y and mla point at this block's scratch (see
  /// SimdTileScratch).
  bool begin(const B& bound, const ConstMatrixRef<float>& q, float scale,
             const ConstMatrixRef<float>& v, Index r0, Index rows, float* qt, float* y,
             float* mla) {
    r0_ = r0;
    rows_ = rows;
    keys_ = block_keys(bound, r0, rows);
    if (keys_.size() == 0) return true;
    // The keys every row of the block sees: [ib_, ie_) (empty when ib_ >= ie_).
    ib_ = keys_.begin;
    ie_ = keys_.end;
    for (Index r = 0; r < rows; ++r) {
      const KeyRange kr = bound.range(r0 + r);
      ib_ = std::max(ib_, kr.begin);
      ie_ = std::min(ie_, kr.end);
    }
    if (ie_ <= ib_) ib_ = ie_ = keys_.end;
    const auto finite = [&](Index b, Index e) {
      return e <= b || v.middleRows(b, e - b).allFinite();
    };
    if (!finite(keys_.begin, ib_) || !finite(ie_, keys_.end)) return false;
    cols_ = (rows + tile::kScoreCols - 1) / tile::kScoreCols * tile::kScoreCols;
    d_v_ = v.cols();
    qt_ = qt;
    Eigen::Map<RowMatrix<float>> qtm(qt, q.cols(), kRows);
    qtm.leftCols(rows).noalias() = scale * q.middleRows(r0, rows).transpose();
    qtm.middleCols(rows, cols_ - rows).setZero();
    y_ = y;
    std::fill(y, y + kRows * d_v_, 0.0f);
    m_ = mla;
    cmax_ = m_ + kRows;
    l_ = cmax_ + kRows;
    alpha_ = l_ + kRows;
    bias_row_ = alpha_ + kRows;
    std::fill(m_, m_ + kRows, -std::numeric_limits<float>::infinity());
    std::fill(l_, l_ + kRows, 0.0f);
    return true;
  }

  /// The keys some row of the block sees (empty when none).
  KeyRange keys() const { return keys_; }

  /// Keys [kb, kb + len) (within keys()), through st (kTileKeys x kRows).
  void tile(const B& bound, const ConstMatrixRef<float>& k, const ConstMatrixRef<float>& v,
            Index kb, Index len, float* st) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const Index d = k.cols(), ldk = k.outerStride(), ldv = v.outerStride();
    const float* const kt = k.data() + kb * ldk;
    if (!BiasedBound<B> && ib_ <= kb && kb + len <= ie_) {  // every row sees every key
      std::copy(m_, m_ + cols_, cmax_);
      for (Index c = 0; c < cols_; c += tile::kScoreCols)
        tile::score_columns<true>(kt, ldk, len, qt_ + c, kRows, d, st + c, kRows, cmax_ + c);
      tile::softmax_columns<false>(st, kRows, len, cols_, m_, cmax_, l_, alpha_);
    } else {
      bool seen = false;
      for (Index r = 0; r < rows_ && !seen; ++r) {
        const KeyRange kr = bound.range(r0_ + r);
        seen = std::max(kr.begin, kb) < std::min(kr.end, kb + len);
      }
      if (!seen) return;  // a fully masked tile
      for (Index c = 0; c < cols_; c += tile::kScoreCols)
        tile::score_columns<false>(kt, ldk, len, qt_ + c, kRows, d, st + c, kRows, nullptr);
      for (Index r = 0; r < rows_; ++r) {  // hide the keys row r cannot see
        const KeyRange kr = bound.range(r0_ + r);
        const Index lo = std::clamp(kr.begin - kb, Index{0}, len);
        const Index hi = std::clamp(kr.end - kb, lo, len);
        for (Index j = 0; j < lo; ++j) st[j * kRows + r] = kNegInf;
        for (Index j = hi; j < len; ++j) st[j * kRows + r] = kNegInf;
        if constexpr (BiasedBound<B>) {
          if (hi > lo) {
            std::fill(bias_row_, bias_row_ + (hi - lo), 0.0f);
            bound.add_bias(r0_ + r, kb + lo, bias_row_, hi - lo);
            for (Index j = lo; j < hi; ++j) st[j * kRows + r] += bias_row_[j - lo];
          }
        }
      }
      tile::column_max(st, kRows, len, cols_, m_, cmax_);
      tile::softmax_columns<true>(st, kRows, len, cols_, m_, cmax_, l_, alpha_);
    }
    tile::scale_rows(y_, cols_, d_v_, alpha_);
    tile::accumulate_pv(st, kRows, cols_, v.data() + kb * ldv, ldv, len, d_v_, y_);
  }

  /// Writes the block's rows of Y (zero where a row sees no key).
  void finish(MatrixRef<float>& y) const {
    auto y_block = y.middleRows(r0_, rows_);
    if (keys_.size() == 0) {
      y_block.setZero();
      return;
    }
    y_block = Eigen::Map<const RowMatrix<float>>(y_, rows_, d_v_);
    normalize_rows(y_block, l_);
  }

 private:
  Index r0_ = 0, rows_ = 0, cols_ = 0, d_v_ = 0;
  KeyRange keys_{0, 0};
  Index ib_ = 0, ie_ = 0;
  float* qt_ = nullptr;
  float* y_ = nullptr;
  float* m_ = nullptr;
  float* cmax_ = nullptr;
  float* l_ = nullptr;
  float* alpha_ = nullptr;
  float* bias_row_ = nullptr;
};

/// One pass of the SIMD tiled path over K and V for the blocks
/// [r0 + b kSimdTileRows, ...) b < n_blocks (n_blocks <= kSimdPassBlocks,
/// the last one `last_rows` rows): each tile of K and V is read from memory
/// once and from L2 by the other blocks of the pass. The tiles follow a grid
/// of kTileKeys keys from key 0, clipped to each block's keys, so a block's
/// result does not depend on which blocks share its pass (nor on the thread
/// count). Returns a bit per block that begin() refused (see SimdTiledBlock;
/// nothing written for it).
template <class B>
unsigned simd_tiled_pass(const B& bound, const ConstMatrixRef<float>& q, float scale,
                         const ConstMatrixRef<float>& k, const ConstMatrixRef<float>& v,
                         MatrixRef<float>& y, Index r0, int n_blocks, Index last_rows,
                         SimdTileScratch ws) {
  constexpr Index kRows = kSimdTileRows;
  const Index d = q.cols(), d_v = v.cols();
  const auto grow = [](std::vector<float>& buf, Index n) {
    if (buf.size() < static_cast<std::size_t>(n)) buf.resize(static_cast<std::size_t>(n));
  };
  const Index mla = 4 * kRows + kTileKeys;
  grow(ws.qt, kSimdPassBlocks * d * kRows);
  grow(ws.st, kTileKeys * kRows);
  grow(ws.y, kSimdPassBlocks * kRows * d_v);
  grow(ws.mla, kSimdPassBlocks * mla);
  SimdTiledBlock<B> blocks[kSimdPassBlocks];
  unsigned refused = 0;
  const auto live = [&](int b) { return ((refused >> b) & 1u) == 0; };
  Index kb0 = std::numeric_limits<Index>::max(), ke = 0;  // the keys any block sees
  for (int b = 0; b < n_blocks; ++b) {
    const Index rows = b + 1 == n_blocks ? last_rows : kRows;
    if (!blocks[b].begin(bound, q, scale, v, r0 + b * kRows, rows, ws.qt.data() + b * d * kRows,
                         ws.y.data() + b * kRows * d_v, ws.mla.data() + b * mla)) {
      refused |= 1u << b;
      continue;
    }
    const KeyRange keys = blocks[b].keys();
    if (keys.size() > 0) {
      kb0 = std::min(kb0, keys.begin);
      ke = std::max(ke, keys.end);
    }
  }
  if (kb0 < ke) {
    for (Index t = kb0 / kTileKeys * kTileKeys; t < ke; t += kTileKeys) {
      for (int b = 0; b < n_blocks; ++b) {
        if (!live(b)) continue;
        const KeyRange keys = blocks[b].keys();
        const Index lo = std::max(t, keys.begin), hi = std::min(t + kTileKeys, keys.end);
        if (lo < hi) blocks[b].tile(bound, k, v, lo, hi - lo, ws.st.data());
      }
    }
  }
  for (int b = 0; b < n_blocks; ++b)
    if (live(b)) blocks[b].finish(y);
  return refused;
}
#endif

/// The decode-shaped case: m <= kFewQueryRows queries that all see the same
/// keys [b, e). Computed transposed,
///     A^T = f(K (s Q)^T)    (span x m),      (A V)^T = V^T A^T    (d_V x m),
/// so the long key dimension is the GEMM's row dimension and the few queries
/// its narrow column dimension, which Eigen's kernels tile well (the m x span
/// product with m = 1..16 runs as a GEMV-like loop otherwise), in chunks of
/// kSplitKeys keys spread over the threads ("split-K", as flash decoding).
/// K and V are each read once. Returns false, writing nothing, when it does
/// not apply.
template <class T, class K, class B>
bool few_query_rows(const K& kernel, const B& bound, T scale, const ConstMatrixRef<T>& q,
                    const ConstMatrixRef<T>& k, const ConstMatrixRef<T>& v, MatrixRef<T>& y,
                    AttentionWorkspace<T>& ws) {
  if constexpr (!ScoreKernel<K> || B::kHasHoles) {
    return false;
  } else {
    const Index m = q.rows();
    if (m > kFewQueryRows) return false;
    const KeyRange keys = bound.range(0);
    for (Index i = 1; i < m; ++i) {
      const KeyRange r = bound.range(i);
      if (r.begin != keys.begin || r.end != keys.end) return false;
    }
    const Index span = keys.size();
    if (span == 0) {
      y.setZero();
      return true;
    }
    ws.q_scaled.noalias() = scale * q;  // (m, d_QK)
    // Split the keys into fixed chunks of kSplitKeys (independent of the thread
    // count, so results are too). Chunk c gives, per query i, its row max
    // m_ci (shift-invariant kernels), z_ci = sum_j f(x_ij - m_ci) and
    // y_ci = sum_j f(x_ij - m_ci) v_j; they combine as
    //   m_i = max_c m_ci,  z_i = sum_c e^{m_ci - m_i} z_ci,  y_i = sum_c e^{m_ci - m_i} y_ci.
    // Each chunk's products run single-threaded inside the parallel loop:
    // Eigen's own threaded GEMM is up to 8x *slower* on this tall-skinny
    // (span x d) (d x m) shape with 2 threads.
    const Index n_chunks = (span + kSplitKeys - 1) / kSplitKeys;
    ws.split_y.resize(v.cols(), m * n_chunks);  // [y_c0 | y_c1 | ...], (d_V, m) each
    ws.split_mz.resize(2 * n_chunks, m);        // rows 2c: m_c, 2c + 1: z_c
    const int threads = static_cast<int>(std::min<Index>(num_threads(), n_chunks));
    if (ws.split_scores.size() < static_cast<std::size_t>(threads))
      ws.split_scores.resize(static_cast<std::size_t>(threads));
    auto chunk = [&](Index c, Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& sc) {
      const Index b0 = keys.begin + c * kSplitKeys;
      const Index len = std::min(kSplitKeys, keys.end - b0);
      const bool stream = m <= kStreamRows;
      if (stream) {
        // Few queries: memory-bound. One pass over the key rows, m dot
        // products each, no packing copy of K (which a GEMM would make).
        sc.resize(len, m);
        for (Index j = 0; j < len; ++j) {
          const auto k_j = k.row(b0 + j);
          for (Index i = 0; i < m; ++i) sc(j, i) = k_j.dot(ws.q_scaled.row(i));
        }
      } else {
        sc.noalias() = k.middleRows(b0, len) * ws.q_scaled.transpose();  // (len, m)
      }
      for (Index i = 0; i < m; ++i) {
        T* col = sc.col(i).data();
        add_bias(bound, i, b0, col, len);
        T shift = T(0);
        if constexpr (ShiftInvariantKernel<K>) {
          Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> a(col, len);
          shift = a.maxCoeff();
          if (shift == -std::numeric_limits<T>::infinity()) {
            // Every score of the chunk is -inf (a bias of -inf): no weight.
            a.setZero();
            ws.split_mz(2 * c, i) = shift;
            ws.split_mz(2 * c + 1, i) = T(0);
            continue;
          }
          a -= shift;
        }
        if constexpr (HasVectorForm<K, T>) {
          kernel.apply(col, len);
        } else {
          for (Index j = 0; j < len; ++j) col[j] = kernel(col[j]);
        }
        ws.split_mz(2 * c, i) = shift;
        ws.split_mz(2 * c + 1, i) = sc.col(i).sum();
      }
      auto y_c = ws.split_y.middleCols(c * m, m);  // (d_V, m)
      if (stream) {
        // (A V)^T accumulated row by row of V: y_i += a_ij v_j, V read once.
        y_c.setZero();
        for (Index j = 0; j < len; ++j) {
          const auto v_j = v.row(b0 + j).transpose();
          for (Index i = 0; i < m; ++i) y_c.col(i).noalias() += sc(j, i) * v_j;
        }
      } else {
        y_c.noalias() = v.middleRows(b0, len).transpose() * sc;
      }
    };
#ifdef _OPENMP
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (Index c = 0; c < n_chunks; ++c)
        chunk(c, ws.split_scores[static_cast<std::size_t>(omp_get_thread_num())]);
    } else
#endif
    {
      for (Index c = 0; c < n_chunks; ++c) chunk(c, ws.split_scores[0]);
    }
    for (Index i = 0; i < m; ++i) {
      T m_i = ws.split_mz(0, i);
      for (Index c = 1; c < n_chunks; ++c) m_i = std::max(m_i, ws.split_mz(2 * c, i));
      T z = T(0);
      auto y_i = y.row(i);
      y_i.setZero();
      if (m_i == -std::numeric_limits<T>::infinity()) continue;  // no visible weight
      for (Index c = 0; c < n_chunks; ++c) {
        const T w = ShiftInvariantKernel<K> ? std::exp(ws.split_mz(2 * c, i) - m_i) : T(1);
        z += w * ws.split_mz(2 * c + 1, i);
        y_i += w * ws.split_y.col(c * m + i).transpose();
      }
      if (z != T(0)) {
        y_i *= T(1) / z;
      } else {
        y_i.setZero();
      }
    }
    return true;
  }
}

}  // namespace detail

/// Y = Z^-1 A V with A = f_kappa(s Q K^T) masked, written into `y`
/// (N_Q x d_V, preallocated). The hot-path entry point: `ws` is reused
/// across calls so that steady-state calls allocate nothing.
///
/// \param q  Q, N_Q x d_QK      \param k  K, N_KV x d_QK
/// \param v  V, N_KV x d_V      \param y  Y, N_Q x d_V (output)
/// \param ws  scratch buffers, reused across calls
/// \param kernel  f_kappa      \param mask  which keys each query row sees
/// \throws ShapeError when the shapes do not fit (the message names both),
///         std::invalid_argument when a score kernel's scale is not finite,
///         and whatever the mask's bind() throws.
template <Scalar T, class K = kernels::Softmax, class M = NoMask>
void attention_into(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v, MatrixRef<T> y,
                    AttentionWorkspace<T>& ws, const K& kernel = {}, const M& mask = {}) {
  static_assert(detail::check_policies<K, M>());
  detail::check_attention_shapes<T>(q, k, v);
  require_shapes(y.rows() == q.rows() && y.cols() == v.cols(), "attention", "Y", y.rows(), y.cols(),
                 "(N_Q x d_V)", q.rows(), v.cols(), "Y must be N_Q x d_V");
  const auto bound = mask.bind(q.rows(), k.rows());
  T scale = T(1);
  if constexpr (ScoreKernel<K>) scale = detail::checked_scale<T>(kernel, q.cols());
  const Index n_q = q.rows();
  if (n_q == 0) return;
  if (k.rows() == 0) {
    y.setZero();
    return;
  }
  if (ws.path == AttentionPath::kAuto &&
      detail::few_query_rows<T>(kernel, bound, scale, q, k, v, y, ws))
    return;
  if constexpr (ScoreKernel<K>) {
    using Bound = std::decay_t<decltype(bound)>;
    const bool simd = detail::simd_tiled<T, K, Bound>(v.cols());
    if (ws.path == AttentionPath::kTiled ||
        (ws.path == AttentionPath::kAuto &&
         (detail::prefer_tiled<T>(k.rows()) || (simd && n_q >= kSimdMinRows)))) {
      const Index block = simd ? kSimdTileRows : kTileRows;
      const Index n_tb = (n_q + block - 1) / block;
      // Units of work, largest first: with the SIMD kernels, passes of
      // kSimdPassBlocks blocks, as many as split evenly over the threads;
      // then single blocks.
      const Index per_round = Index{kSimdPassBlocks} * num_threads();
      const Index n_passes = simd ? n_tb / per_round * num_threads() : 0;
      const Index n_units = n_passes + (n_tb - n_passes * kSimdPassBlocks);
      auto rows_of = [&](Index b) { return std::min(block, n_q - b * block); };
      auto unit = [&](Index u, std::vector<T>& s, std::vector<T>& qb, std::vector<T>& mla,
                      std::vector<T>& yb) {
        const auto [b0, b1] = detail::unit_blocks(u, n_passes);
        unsigned simd_done = 0;  // bit b - b0: block b ran on the SIMD kernels
#ifdef KAPPA_TILE_SIMD
        if constexpr (std::is_same_v<T, float>) {
          if (simd) {
            const auto n = static_cast<int>(b1 - b0);
            const unsigned refused =
                detail::simd_tiled_pass(bound, q, scale, k, v, y, b0 * block, n, rows_of(b1 - 1),
                                        detail::SimdTileScratch{qb, s, yb, mla});
            simd_done = ~refused & ((1u << n) - 1u);
          }
        }
#endif
        static_cast<void>(yb);
        for (Index b = b0; b < b1; ++b) {
          if ((simd_done >> (b - b0)) & 1u) continue;
          detail::tiled_block<T>(kernel, bound, q, scale, k, v, y, b * block, rows_of(b),
                                 detail::TiledScratch<T>{s, qb, mla});
        }
      };
#ifdef _OPENMP
      const int threads = static_cast<int>(std::min<Index>(num_threads(), n_units));
      if (threads > 1) {
#pragma omp parallel num_threads(threads)
        {
          std::vector<T> s, qb, mla, yb;
#pragma omp for schedule(dynamic, 1)
          for (Index u = 0; u < n_units; ++u) unit(u, s, qb, mla, yb);
        }
        return;
      }
#endif
      for (Index u = 0; u < n_units; ++u) unit(u, ws.scores, ws.tile_q, ws.tile_m, ws.tile_y);
      return;
    }
  }
  const Index block = detail::block_rows<T>(n_q, k.rows());
  const Index n_blocks = (n_q + block - 1) / block;

  auto run = [&](const ConstMatrixRef<T>& qs, T q_scale, const ConstMatrixRef<T>& ks) {
#ifdef _OPENMP
    const int threads = static_cast<int>(std::min<Index>(num_threads(), n_blocks));
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
      {
        std::vector<T> scores_buf, z_buf;
#pragma omp for schedule(dynamic, 1)
        for (Index b = 0; b < n_blocks; ++b) {
          const Index r0 = b * block;
          detail::attention_block<T>(kernel, bound, qs, q_scale, ks, v, y, r0,
                                     std::min(block, n_q - r0), scores_buf, z_buf);
        }
      }
      return;
    }
#endif
    for (Index b = 0; b < n_blocks; ++b) {
      const Index r0 = b * block;
      detail::attention_block<T>(kernel, bound, qs, q_scale, ks, v, y, r0,
                                 std::min(block, n_q - r0), ws.scores, ws.z);
    }
  };

  if constexpr (ScoreKernel<K>) {
    run(q, scale, k);
  } else {
    ws.phi_q = kernel.template feature_map<T>(q, FeatureRole::kQuery);
    ws.phi_k = kernel.template feature_map<T>(k, FeatureRole::kKey);
    require_shapes(ws.phi_q.cols() == ws.phi_k.cols(), "attention feature map", "phi(Q)", ws.phi_q,
                   "phi(K)", ws.phi_k, "phi(Q) and phi(K) must have equal widths");
    run(ws.phi_q, T(1), ws.phi_k);
  }
}

/// Y = Z^-1 A V with A = f_kappa(s Q K^T) masked: returns Y (N_Q x d_V).
///
/// ```cpp
/// RowMatrix<float> y = kappa::attention(q, k, v, kernels::Softmax{}, CausalMask{});
/// ```
/// Q, K, V may be any Eigen expressions of one scalar type (row-major blocks
/// and maps pass without a copy).
/// \throws ShapeError when the shapes do not fit (the message names both);
///         std::invalid_argument for a non-finite kernel scale.
template <class DQ, class DK, class DV, class K = kernels::Softmax, class M = NoMask>
requires Scalar<typename DQ::Scalar> RowMatrix<typename DQ::Scalar> attention(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const K& kernel = {}, const M& mask = {}) {
  using T = typename DQ::Scalar;
  static_assert(std::is_same_v<T, typename DK::Scalar> && std::is_same_v<T, typename DV::Scalar>,
                "kappa: Q, K and V must have the same scalar type");
  const ConstMatrixRef<T> qr(q), kr(k), vr(v);
  RowMatrix<T> y(qr.rows(), vr.cols());  // shapes are checked by attention_into
  AttentionWorkspace<T> ws;
  attention_into<T>(qr, kr, vr, y, ws, kernel, mask);
  return y;
}

/// Like attention(), but returns A, Z, Z^-1 A and Y (see AttentionDetails).
/// Allocates N_Q x N_KV twice: meant for inspection and teaching, not speed.
template <class DQ, class DK, class DV, class K = kernels::Softmax, class M = NoMask>
requires Scalar<typename DQ::Scalar> AttentionDetails<typename DQ::Scalar> attention_details(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const K& kernel = {}, const M& mask = {}) {
  using T = typename DQ::Scalar;
  static_assert(detail::check_policies<K, M>());
  static_assert(std::is_same_v<T, typename DK::Scalar> && std::is_same_v<T, typename DV::Scalar>,
                "kappa: Q, K and V must have the same scalar type");
  const ConstMatrixRef<T> qr(q), kr(k), vr(v);
  detail::check_attention_shapes<T>(qr, kr, vr);
  const auto bound = mask.bind(qr.rows(), kr.rows());
  const Index n_q = qr.rows(), n_kv = kr.rows();
  AttentionDetails<T> d;
  d.scores.resize(n_q, n_kv);
  if constexpr (ScoreKernel<K>) {
    const T s = detail::checked_scale<T>(kernel, qr.cols());
    d.scores.noalias() = (s * qr) * kr.transpose();  // (N_Q, N_KV)
  } else {
    const RowMatrix<T> phi_q = kernel.template feature_map<T>(qr, FeatureRole::kQuery);
    const RowMatrix<T> phi_k = kernel.template feature_map<T>(kr, FeatureRole::kKey);
    require_shapes(phi_q.cols() == phi_k.cols(), "attention feature map", "phi(Q)", phi_q, "phi(K)",
                   phi_k, "phi(Q) and phi(K) must have equal widths");
    d.scores.noalias() = phi_q * phi_k.transpose();  // (N_Q, N_KV)
  }
  d.normalizer.resize(n_q);
  d.row_shift.resize(n_q);
  if (n_kv > 0) {
    detail::kernel_rows<T>(kernel, bound, 0, n_q, 0, n_kv, d.scores.data(), d.normalizer.data(),
                           d.row_shift.data());
  } else {
    d.normalizer.setZero();
    d.row_shift.setZero();
  }
  d.weights.resize(n_q, n_kv);
  for (Index i = 0; i < n_q; ++i) {
    const T zi = d.normalizer(i);
    if (zi != T(0)) {
      d.weights.row(i) = d.scores.row(i) / zi;
    } else {
      d.weights.row(i).setZero();
    }
  }
  d.output.noalias() = d.weights * vr;  // (N_Q, d_V)
  return d;
}

}  // namespace kappa
