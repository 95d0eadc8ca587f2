// kappa/core/weight_storage.hpp - how a layer stores its weight matrices.
//
// Decoding one token reads every weight once, so its speed is the weight
// bytes over the memory bandwidth. A storage policy chooses those bytes:
//
//   DenseWeights  W in the compute type T (4 bytes per weight in float)
//   Bf16Weights   W rounded to bfloat16 (2 bytes), widened to T block by
//                 block while multiplying: half the bytes per token, with
//                 the relative rounding of bfloat16 (2^-9) on each weight.
//                 Scores, activations and sums stay in T, except in a
//                 prompt's X W^T products on CPUs with AVX512_BF16, which
//                 round X to bfloat16 too (see WeightMatrix<T, Bf16Weights>).
//
// WeightMatrix<T, Storage> holds one matrix W (rows x cols, row-major) and
// offers the two products layers need:
//   product_into(X, W, out)            out = X W        (projections, FFN)
//   product_transposed_into(X, W, out) out = X W^T      (the output head X E^T)
// For a few rows (decoding) the output columns are split over
// kappa::num_threads() threads; larger inputs (a prompt) go to kappa's GEMM
// (core/gemm_simd.hpp: float, AVX2 or AVX-512), which widens W's blocks as it
// packs them, or else widen row panels of W once for Eigen's GEMM.
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/gemm_simd.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/threading.hpp"

// (undefined again at the end of this header: not part of the API)
#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#define KAPPA_DETAIL_HAS_MMAP 1
#else
#define KAPPA_DETAIL_HAS_MMAP 0
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

// The hint of the software prefetches that the decode loops of bf16 and of
// the block formats (kappa/core/quant_weights.hpp) issue ahead of the
// weights they stream. A decode step reads each weight once, so the lines
// need not stay in L2: _MM_HINT_NTA. On an AMD EPYC VM (1 thread) the 8-row
// Q4_0 loop over GPT-2 medium's 96 products (170 MB in sequence) read 36-38
// GB/s with it against 25-27 with _MM_HINT_T0 (Eigen's sum of the same
// bytes: 35-43), and whole GPT-2-medium decode steps moved 0-8 % closer to
// a paired plain read (benchmarks/README.md, "Prefetch hint"). In L3 the
// two are equal. Define it as _MM_HINT_T0 for the earlier behaviour.
#ifndef KAPPA_WEIGHT_PREFETCH_HINT
#define KAPPA_WEIGHT_PREFETCH_HINT _MM_HINT_NTA
#endif
namespace kappa {

/// Weights stored in the compute type.
struct DenseWeights {
  static constexpr const char* kName = "dense";
};
/// Weights stored as bfloat16, widened while multiplying.
struct Bf16Weights {
  static constexpr const char* kName = "bf16";
};

/// Which dimension of W the stored rows P run along (the blocks of a block
/// format, the values of Bf16Weights): the one the product that the matrix
/// serves reduces over, so that each output is a dot product with a row of P.
enum class BlocksAlong {
  kRows,  ///< along W's rows (P = W^T, GGUF [cols][rows]): for out = X W
  kCols,  ///< along W's columns (P = W, GGUF [rows][cols]): for out = X W^T
};

/// Dense, bfloat16, a block format (a policy with kBlockBytes: Q8_0Weights,
/// Q4_0Weights, ... in quant_weights.hpp), or a format per matrix (kPerMatrix:
/// AsStoredWeights in stored_weights.hpp).
template <class S>
concept WeightStoragePolicy =
    std::same_as<S, DenseWeights> || std::same_as<S, Bf16Weights> || requires {
  S::kBlockBytes;
} || requires {
  S::kPerMatrix;
};

/// float -> bfloat16, round to nearest even (NaN stays NaN).
inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}
/// bfloat16 -> float (exact).
inline float bf16_to_float_exact(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

namespace detail {
/// `bytes` zero bytes, owned by the pointer returned, in memory that is
/// not touched until read: from 64 KiB up, fresh anonymous pages of the
/// kernel's zeros (mmap; calloc would clear reused heap memory, which
/// malloc hands out for sizes up to 32 MiB once such blocks were freed),
/// else calloc. The placeholders a layer holds until a loader sets its
/// weights (MultiHeadAttention's zero_weights) take no time and no resident
/// memory this way. \throws std::bad_alloc.
inline std::shared_ptr<const void> zero_pages(std::size_t bytes) {
#if KAPPA_DETAIL_HAS_MMAP
  if (bytes >= (std::size_t{1} << 16)) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return {p, [bytes](void* q) { ::munmap(q, bytes); }};
  }
#endif
  void* p = std::calloc(std::max<std::size_t>(bytes, 1), 1);
  if (p == nullptr) throw std::bad_alloc();
  return {p, [](void* q) { std::free(q); }};
}

/// \throws ShapeError unless out = X W (transposed: out = X W^T) is defined
/// for a W of rows x cols; `storage` names W's storage in the message ("bf16",
/// "q8_0", ...). The message is built only when the shapes do not fit.
template <Scalar T>
void require_product_shapes(const ConstMatrixRef<T>& x, const MatrixRef<T>& out, Index rows,
                            Index cols, bool transposed, std::string_view storage) {
  const Index k = transposed ? cols : rows, n_out = transposed ? rows : cols;
  if (x.cols() == k && out.rows() == x.rows() && out.cols() == n_out) return;
  const std::string what = std::string(transposed ? "product X W^T (" : "product X W (") +
                           std::string(storage) + " weights)";
  require_shapes(false, what, "X", x.rows(), x.cols(), "W", rows, cols,
                 transposed ? "X and W must have the same number of columns, the output (rows "
                              "of X) x (rows of W)"
                            : "X must have as many columns as W has rows, the output (rows of "
                              "X) x (columns of W)");
}
}  // namespace detail

template <Scalar T, WeightStoragePolicy S = DenseWeights>
class WeightMatrix;

/// Dense: a RowMatrix<T>.
template <Scalar T>
class WeightMatrix<T, DenseWeights> {
 public:
  WeightMatrix() = default;
  explicit WeightMatrix(RowMatrix<T> w) : w_(std::move(w)) {}
  [[nodiscard]] Index rows() const { return w_.rows(); }
  [[nodiscard]] Index cols() const { return w_.cols(); }
  [[nodiscard]] std::size_t bytes() const {
    return sizeof(T) * static_cast<std::size_t>(w_.size());
  }
  /// W in the compute type (a copy for other storages).
  [[nodiscard]] const RowMatrix<T>& dense() const { return w_; }

  void multiply(const ConstMatrixRef<T>& x, MatrixRef<T> out) const { product_into<T>(x, w_, out); }
  void multiply_transposed(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    product_transposed_into<T>(x, w_, out);
  }
  /// multiply()'s decode product (a few rows of X) as a job for a region
  /// that the caller runs (multiply_each). \throws ShapeError on mismatch.
  detail::DecodeJob decode_job(const ConstMatrixRef<T>& x, MatrixRef<T>& out,
                               detail::DecodeInput& /*shared*/) const {
    return detail::product_job<T>(x, w_, out);
  }

 private:
  RowMatrix<T> w_;
};

/// bfloat16: 2 bytes per weight. The values are P, row-major: P = W^T (a
/// file's [cols][rows] tensor: a GGUF or Hugging Face projection, viewed
/// where the file holds it; or rounded from floats along W's rows, the
/// default, for X W) or P = W (a file's [rows][cols] tensor such as an
/// output head, or rounded along W's columns, for X W^T). The products work
/// on P in either orientation: out = X P (one pass over P, eight rows at a
/// time) and out = X P^T (dot products with P's rows, four at a time). The
/// second is the faster decode loop on 2 threads (1.3-1.5x on GPT-2 small's
/// whole decode step; benchmarks/README.md), so matrices rounded from floats
/// are laid out for it as a file's are, and run the same loops (the
/// prefill's below included). Prefill
/// (more than kFewRows rows, T = float, AVX2 or AVX-512) takes kappa's GEMM
/// (core/gemm_simd.hpp), widening P's blocks as it packs them; else Eigen's
/// GEMM on widened panels. Where the build has AVX512_BF16, prefill's
/// X P^T (the projections, the head) uses its bfloat16 dot products
/// instead, on P as stored and X rounded to bfloat16 (nearest even, as
/// llama.cpp does for its BF16 files): twice the multiply-adds per
/// instruction, for a relative rounding of 2^-9 on the activations as well
/// as on the weights. Decoding keeps X in float.
template <Scalar T>
class WeightMatrix<T, Bf16Weights> {
 public:
  WeightMatrix() = default;
  /// Rounds w to bfloat16 (nearest even), held as P = W^T (`along` kRows:
  /// for out = X W, as a file holds a projection) or P = W (kCols: for
  /// out = X W^T, an output head; and row_into()).
  explicit WeightMatrix(const RowMatrix<T>& w, BlocksAlong along = BlocksAlong::kRows)
      : rows_(w.rows()),
        cols_(w.cols()),
        pr_(along == BlocksAlong::kRows ? w.cols() : w.rows()),
        pc_(along == BlocksAlong::kRows ? w.rows() : w.cols()),
        transposed_(along == BlocksAlong::kRows) {
    auto own = std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(w.size()));
    std::uint16_t* p = own->data();
    constexpr Index kTile = 64;  // transposed in tiles: W's rows read a line at a time
    for (Index i0 = 0; i0 < pr_; i0 += kTile)
      for (Index j0 = 0; j0 < pc_; j0 += kTile)
        for (Index i = i0; i < std::min(i0 + kTile, pr_); ++i)
          for (Index j = j0; j < std::min(j0 + kTile, pc_); ++j)
            p[i * pc_ + j] = float_to_bf16(static_cast<float>(transposed_ ? w(j, i) : w(i, j)));
    p_ = p;
    owner_ = std::move(own);
  }
  /// W (rows x cols) viewed in bfloat16 values held elsewhere (e.g. a
  /// memory-mapped file; `owner` keeps them alive): at `p`, W^T row-major
  /// (cols x rows) when `stored_transposed`, else W row-major. Nothing is
  /// copied. (2-byte alignment of `p` is the caller's: GGUF aligns tensors
  /// to 32 bytes.)
  WeightMatrix(Index rows, Index cols, bool stored_transposed, const std::uint16_t* p,
               std::shared_ptr<const void> owner)
      : rows_(rows),
        cols_(cols),
        pr_(stored_transposed ? cols : rows),
        pc_(stored_transposed ? rows : cols),
        transposed_(stored_transposed),
        p_(p),
        owner_(std::move(owner)) {}

  /// W = 0 (rows x cols) in untouched zero pages (detail::zero_pages):
  /// costs nothing until read.
  static WeightMatrix zeros(Index rows, Index cols) {
    auto owner = detail::zero_pages(sizeof(std::uint16_t) * static_cast<std::size_t>(rows) *
                                    static_cast<std::size_t>(cols));
    const auto* p = static_cast<const std::uint16_t*>(owner.get());
    return WeightMatrix(rows, cols, true, p, std::move(owner));
  }

  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] std::size_t bytes() const {
    return sizeof(std::uint16_t) * static_cast<std::size_t>(rows_) *
           static_cast<std::size_t>(cols_);
  }
  /// The bfloat16 values (P: W, or W^T when stored_transposed()).
  [[nodiscard]] const std::uint16_t* data() const { return p_; }
  /// Whether the values are W^T row-major (a view of a file's projection).
  [[nodiscard]] bool stored_transposed() const { return transposed_; }
  /// Row i of W widened into out[0 .. cols()): a row of P when W is held as
  /// W, else a column of P (strided; a lookup table is better held as W).
  void row_into(Index i, T* out) const {
    if (!transposed_) {
      widen(i, 1, 0, pc_, out, pc_);
      return;
    }
    for (Index j = 0; j < cols_; ++j) out[j] = static_cast<T>(widen_one(p_[j * pc_ + i]));
  }
  /// W widened to T (N x M; allocates).
  [[nodiscard]] RowMatrix<T> dense() const {
    RowMatrix<T> pm(pr_, pc_);
    widen(0, pr_, 0, pc_, pm.data(), pc_);
    if (transposed_) return pm.transpose();
    return pm;
  }

  /// out = X W.
  void multiply(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, false, "bf16");
    if (transposed_)
      product_p_transposed(x, out);
    else
      product_p(x, out);
  }
  /// multiply()'s decode product (a few rows of X) as a job for a region
  /// that the caller runs (multiply_each). \throws ShapeError on mismatch.
  detail::DecodeJob decode_job(const ConstMatrixRef<T>& x, MatrixRef<T>& out,
                               detail::DecodeInput& /*shared*/) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, false, "bf16");
    if (transposed_) {
      const int parts = detail::decode_parts(pr_);
      return {parts, [this, &x, &out, parts](int p) { dots_piece(x, out, p, parts); }};
    }
    const int parts = detail::decode_parts(pc_);
    return {parts, [this, &x, &out, parts](int p) { gemv_piece(x, out, p, parts); }};
  }

  /// out = X W^T (W: m x k, the output head E).
  void multiply_transposed(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, true, "bf16");
    if (transposed_)
      product_p(x, out);
    else
      product_p_transposed(x, out);
  }

 private:
  /// out = X P (X: n x pr_, out: n x pc_).
  void product_p(const ConstMatrixRef<T>& x, MatrixRef<T>& out) const {
    const int threads = num_threads();
#if KAPPA_SIMD_LANES > 0
    if constexpr (std::is_same_v<T, float>) {
      constexpr Index kNr = detail::gemm::kNr;
      if (x.rows() > kFewRows) {  // prefill: our GEMM, widening B's blocks
        detail::gemm::gemm_nn(
            x.data(), x.outerStride(), x.rows(), pr_, pc_,
            [this](Index t, Index kc, Index j, Index len, float* dst) {
              widen(t, kc, j, len, dst, kNr);
            },
            out.data(), out.outerStride(), threads);
        return;
      }
    }
#endif
    if (x.rows() > kFewRows) {
      // Prefill: widen panels of kPanel rows of P and accumulate GEMMs, the
      // columns split over the threads (each widens and multiplies its own;
      // widening on one thread left 2 threads slower than 1: 0.86x).
      constexpr Index kPanel = 256;
      const int parts = (threads > 1 && pc_ >= Index{128} * threads) ? threads : 1;
      out.setZero();
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
      for (int p = 0; p < parts; ++p) {
        Index c0 = 0, c1 = 0;
        detail::block_range(pc_, parts, p, c0, c1);
        RowMatrix<T> panel;
        for (Index r0 = 0; r0 < pr_; r0 += kPanel) {
          const Index nr = std::min(kPanel, pr_ - r0);
          panel.resize(nr, c1 - c0);
          widen(r0, nr, c0, c1 - c0, panel.data(), c1 - c0);
          out.middleCols(c0, c1 - c0).noalias() += x.middleCols(r0, nr) * panel;  // (n, c1 - c0)
        }
      }
      return;
    }
    const int parts = detail::decode_parts(pc_);
    detail::run_pieces(parts, [&](int p) { gemv_piece(x, out, p, parts); });
  }
  /// Piece p of `parts` of the decode product out = X P.
  void gemv_piece(const ConstMatrixRef<T>& x, MatrixRef<T>& out, int p, int parts) const {
    Index lo = 0, hi = 0;
    detail::block_range(pc_, parts, p, lo, hi);
    if (hi > lo) gemv_block(x, out, lo, hi - lo);
  }

  /// out = X P^T (X: n x pc_, out: n x pr_).
  void product_p_transposed(const ConstMatrixRef<T>& x, MatrixRef<T>& out) const {
#if KAPPA_SIMD_LANES > 0
    if constexpr (std::is_same_v<T, float>) {
      if (x.rows() > kFewRows) {  // prefill: our GEMM
#if KAPPA_GEMM_BF16_PAIRS
        // AVX512_BF16's dot products on P's rows as stored, X rounded to
        // bfloat16 (see the class comment).
        detail::gemm::gemm_nt<detail::gemm::Bf16PairOperands>(
            x.data(), x.outerStride(), x.rows(), pc_, pr_,
            [this](Index j, Index t, Index len, std::uint16_t* dst) {
              std::memcpy(dst, p_ + j * pc_ + t,
                          sizeof(std::uint16_t) * static_cast<std::size_t>(len));
            },
            out.data(), out.outerStride(), num_threads());
#else
        detail::gemm::gemm_nt(
            x.data(), x.outerStride(), x.rows(), pc_, pr_,
            [this](Index j, Index t, Index len, float* dst) { widen(j, 1, t, len, dst, len); },
            out.data(), out.outerStride(), num_threads());
#endif
        return;
      }
    }
#endif
    const int parts = detail::decode_parts(pr_);
    if (x.rows() <= kFewRows) {  // decode
      detail::run_pieces(parts, [&](int p) { dots_piece(x, out, p, parts); });
      return;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
    for (int p = 0; p < parts; ++p) {
      Index lo = 0, hi = 0;
      detail::block_range(pr_, parts, p, lo, hi);
      constexpr Index kPanel = 64;
      RowMatrix<T> panel(kPanel, pc_);
      for (Index r0 = lo; r0 < hi; r0 += kPanel) {
        const Index nr = std::min(kPanel, hi - r0);
        widen(r0, nr, 0, pc_, panel.data(), pc_);
        out.middleCols(r0, nr).noalias() = x * panel.topRows(nr).transpose();  // (n, nr)
      }
    }
  }

  /// Piece p of `parts` of the decode product out = X P^T: dot products
  /// with a block of P's rows, four rows at a time.
  void dots_piece(const ConstMatrixRef<T>& x, MatrixRef<T>& out, int p, int parts) const {
    Index lo = 0, hi = 0;
    detail::block_range(pr_, parts, p, lo, hi);
    std::vector<float> xr(static_cast<std::size_t>(pc_));
    for (Index r = 0; r < x.rows(); ++r) {
      for (Index k = 0; k < pc_; ++k) xr[static_cast<std::size_t>(k)] = static_cast<float>(x(r, k));
      Index j = lo;
      for (; j + 4 <= hi; j += 4) {
        // Rows j + 8 .. j + 11 into L1 while these four are summed.
        dot_rows<4>(xr.data(), j, &out(r, j), j + 12 <= hi ? p_ + (j + 8) * pc_ : nullptr);
      }
      for (; j < hi; ++j) dot_rows<1>(xr.data(), j, &out(r, j), nullptr);
    }
  }

  /// out[i] = x . P_{j + i} (float) for i < R: 16 partial sums per row, the
  /// R rows' chains independent (R = 4 keeps four chains of fused
  /// multiply-adds in flight and reads x once for four rows). Each row's sum
  /// is in the same order for every R, so the result does not depend on how
  /// the rows were grouped or split over threads.
  /// `ahead`: R rows to bring into L1 meanwhile, or nullptr (rows j + 8 ..
  /// j + 11: the hardware's prefetch alone left GPT-2's bf16 head at 0.6 of
  /// a plain read; two groups ahead was the best). With AVX2 / AVX-512 a
  /// line of each per 32 values as the sums go: all at once, 4 rows of 2816
  /// values two groups ahead overran L1 (a 1024 x 2816 product at 27 GB/s on
  /// 1 thread of an EPYC VM, 41 spread out).
  template <int R>
  void dot_rows(const float* xr, Index j, T* out, const std::uint16_t* ahead) const {
    constexpr Index kLanes = 16;
    const std::uint16_t* e = p_ + j * pc_;
    alignas(64) float part[R][kLanes] = {};
    Index k = 0;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    const auto prefetch = [&](Index at) {
      if (ahead != nullptr && at % 32 == 0)
        for (int i = 0; i < R; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(ahead + i * pc_ + at),
                       KAPPA_WEIGHT_PREFETCH_HINT);
    };
#else
    if (ahead != nullptr)  // all of it now
      for (Index t = 0; t < R * pc_; t += 32) __builtin_prefetch(ahead + t, 0, 3);
#endif
#if defined(__AVX512F__)
    // The same lanes in registers (the array form of the loop below kept
    // them in memory: 24-30 GB/s on a 1024 x 2816 matrix, 1 thread, where the
    // X P loop reads 31-55); each lane's fused multiply-adds in the same order.
    {
      __m512 acc[R];
      for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
      for (; k + kLanes <= pc_; k += kLanes) {
        prefetch(k);
        const __m512 xv = _mm512_loadu_ps(xr + k);
        for (int i = 0; i < R; ++i) {
          const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + i * pc_ + k));
          const __m512 w = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
          acc[i] = _mm512_fmadd_ps(xv, w, acc[i]);
        }
      }
      for (int i = 0; i < R; ++i) _mm512_store_ps(part[i], acc[i]);
    }
#elif defined(__AVX2__) && defined(__FMA__)
    {
      __m256 lo[R], hi[R];
      for (int i = 0; i < R; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
      for (; k + kLanes <= pc_; k += kLanes) {
        prefetch(k);
        const __m256 x0 = _mm256_loadu_ps(xr + k), x1 = _mm256_loadu_ps(xr + k + 8);
        for (int i = 0; i < R; ++i) {
          const std::uint16_t* q = e + i * pc_ + k;
          const __m256 w0 = _mm256_castsi256_ps(_mm256_slli_epi32(
              _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))), 16));
          const __m256 w1 = _mm256_castsi256_ps(_mm256_slli_epi32(
              _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 8))), 16));
          lo[i] = _mm256_fmadd_ps(x0, w0, lo[i]);
          hi[i] = _mm256_fmadd_ps(x1, w1, hi[i]);
        }
      }
      for (int i = 0; i < R; ++i) {
        _mm256_store_ps(part[i], lo[i]);
        _mm256_store_ps(part[i] + 8, hi[i]);
      }
    }
#else
    for (; k + kLanes <= pc_; k += kLanes)
      for (int i = 0; i < R; ++i)
        for (Index t = 0; t < kLanes; ++t) part[i][t] += xr[k + t] * widen_one(e[i * pc_ + k + t]);
#endif
    for (int i = 0; i < R; ++i) {
      float s = 0;
      for (Index kk = k; kk < pc_; ++kk) s += xr[kk] * widen_one(e[i * pc_ + kk]);
      for (const float q : part[i]) s += q;
      out[i] = static_cast<T>(s);
    }
  }

  /// Rows r0 .. r0 + nr - 1, columns c0 .. c0 + nc - 1 of P, widened into dst
  /// (row stride ld).
  void widen(Index r0, Index nr, Index c0, Index nc, T* dst, Index ld) const {
    for (Index i = 0; i < nr; ++i) {
      const std::uint16_t* src = p_ + (r0 + i) * pc_ + c0;
      T* d = dst + i * ld;
      for (Index j = 0; j < nc; ++j)
        d[j] = static_cast<T>(std::bit_cast<float>(static_cast<std::uint32_t>(src[j]) << 16));
    }
  }
  /// out[:, c0 .. c0+nc) = X P[:, c0 .. c0+nc) for a few rows of X: one pass
  /// over P, eight rows at a time, each bfloat16 widened in registers
  /// (a 16-bit shift) and accumulated into a row of nc sums that stays in L1.
  void gemv_block(const ConstMatrixRef<T>& x, MatrixRef<T>& out, Index c0, Index nc) const {
    constexpr Index kRows = 8;
    const Index ld = pc_;
    std::vector<float> acc(static_cast<std::size_t>(nc));
    for (Index r = 0; r < x.rows(); ++r) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      float* a = acc.data();
      Index i = 0;
      for (; i + kRows <= pr_; i += kRows) {
        const std::uint16_t* w = p_ + i * ld + c0;
        const std::uint16_t *w0 = w, *w1 = w + ld, *w2 = w + 2 * ld, *w3 = w + 3 * ld,
                            *w4 = w + 4 * ld, *w5 = w + 5 * ld, *w6 = w + 6 * ld, *w7 = w + 7 * ld;
        const float x0 = static_cast<float>(x(r, i)), x1 = static_cast<float>(x(r, i + 1)),
                    x2 = static_cast<float>(x(r, i + 2)), x3 = static_cast<float>(x(r, i + 3)),
                    x4 = static_cast<float>(x(r, i + 4)), x5 = static_cast<float>(x(r, i + 5)),
                    x6 = static_cast<float>(x(r, i + 6)), x7 = static_cast<float>(x(r, i + 7));
        // The next eight rows into L1, a cache line of each per 32 columns,
        // while these are summed (one group ahead: 0.87-0.95 of a plain read
        // on GPT-2's shapes, 0.80-0.91 without).
        const std::uint16_t* ahead = w + kRows * ld;
        const bool prefetch = i + 2 * kRows <= pr_;
        const auto step = [&](Index j) {
          a[j] += ((x0 * widen_one(w0[j]) + x1 * widen_one(w1[j])) +
                   (x2 * widen_one(w2[j]) + x3 * widen_one(w3[j]))) +
                  ((x4 * widen_one(w4[j]) + x5 * widen_one(w5[j])) +
                   (x6 * widen_one(w6[j]) + x7 * widen_one(w7[j])));
        };
        Index j = 0;
        for (; j + 32 <= nc; j += 32) {
          if (prefetch)
            for (Index q = 0; q < kRows; ++q) __builtin_prefetch(ahead + q * ld + j, 0, 3);
          for (Index t = j; t < j + 32; ++t) step(t);
        }
        for (; j < nc; ++j) step(j);
      }
      for (; i < pr_; ++i) {
        const std::uint16_t* w = p_ + i * ld + c0;
        const float xi = static_cast<float>(x(r, i));
        for (Index j = 0; j < nc; ++j) a[j] += xi * widen_one(w[j]);
      }
      for (Index j = 0; j < nc; ++j) out(r, c0 + j) = static_cast<T>(a[j]);
    }
  }
  static float widen_one(std::uint16_t b) {
    const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }

  Index rows_ = 0, cols_ = 0;  // W
  Index pr_ = 0, pc_ = 0;      // P: W, or W^T when transposed_
  bool transposed_ = false;
  const std::uint16_t* p_ = nullptr;
  std::shared_ptr<const void> owner_;  // keeps p_'s values alive
};

}  // namespace kappa

#undef KAPPA_DETAIL_HAS_MMAP
