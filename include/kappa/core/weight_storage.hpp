// kappa/core/weight_storage.hpp - how a layer stores its weight matrices.
//
// Decoding one token reads every weight once, so its speed is the weight
// bytes over the memory bandwidth. A storage policy chooses those bytes:
//
//   DenseWeights  W in the compute type T (4 bytes per weight in float)
//   Bf16Weights   W rounded to bfloat16 (2 bytes), widened to T block by
//                 block while multiplying: half the bytes per token, with
//                 the relative rounding of bfloat16 (2^-9) on each weight.
//                 Scores, activations and sums stay in T.
//
// WeightMatrix<T, Storage> holds one matrix W (rows x cols, row-major) and
// offers the two products layers need:
//   product_into(X, W, out)            out = X W        (projections, FFN)
//   product_transposed_into(X, W, out) out = X W^T      (the output head X E^T)
// For a few rows (decoding) the output columns are split over
// kappa::num_threads() threads; larger inputs widen row panels of W once and
// use Eigen's GEMM.
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/threading.hpp"

namespace kappa {

/// Weights stored in the compute type.
struct DenseWeights {
  static constexpr const char* kName = "dense";
};
/// Weights stored as bfloat16, widened while multiplying.
struct Bf16Weights {
  static constexpr const char* kName = "bf16";
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

 private:
  RowMatrix<T> w_;
};

/// bfloat16: 2 bytes per weight.
template <Scalar T>
class WeightMatrix<T, Bf16Weights> {
 public:
  WeightMatrix() = default;
  /// Rounds w to bfloat16 (nearest even).
  explicit WeightMatrix(const RowMatrix<T>& w) : rows_(w.rows()), cols_(w.cols()) {
    b_.resize(static_cast<std::size_t>(w.size()));
    for (Index i = 0; i < w.size(); ++i)
      b_[static_cast<std::size_t>(i)] = float_to_bf16(static_cast<float>(w.data()[i]));
  }
  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] std::size_t bytes() const { return sizeof(std::uint16_t) * b_.size(); }
  /// W widened to T (N x M; allocates).
  [[nodiscard]] RowMatrix<T> dense() const {
    RowMatrix<T> w(rows_, cols_);
    widen(0, rows_, 0, cols_, w.data(), cols_);
    return w;
  }

  /// out = X W.
  void multiply(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    require_shapes(x.cols() == rows_ && out.rows() == x.rows() && out.cols() == cols_,
                   "product X W (bf16 weights)", "X", x.rows(), x.cols(), "W", rows_, cols_,
                   "X must have as many columns as W has rows");
    const int threads = num_threads();
    if (x.rows() > kFewRows) {
      // Prefill: widen panels of kPanel rows of W and accumulate GEMMs, the
      // columns split over the threads (each widens and multiplies its own;
      // widening on one thread left 2 threads slower than 1: 0.86x).
      constexpr Index kPanel = 256;
      const int parts = (threads > 1 && cols_ >= Index{128} * threads) ? threads : 1;
      out.setZero();
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
      for (int p = 0; p < parts; ++p) {
        Index c0 = 0, c1 = 0;
        detail::block_range(cols_, parts, p, c0, c1);
        RowMatrix<T> panel;
        for (Index r0 = 0; r0 < rows_; r0 += kPanel) {
          const Index nr = std::min(kPanel, rows_ - r0);
          panel.resize(nr, c1 - c0);
          widen(r0, nr, c0, c1 - c0, panel.data(), c1 - c0);
          out.middleCols(c0, c1 - c0).noalias() += x.middleCols(r0, nr) * panel;  // (n, c1 - c0)
        }
      }
      return;
    }
    const int parts = (threads > 1 && cols_ >= 64) ? threads : 1;
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
    for (int p = 0; p < parts; ++p) {
      Index lo = 0, hi = 0;
      detail::block_range(cols_, parts, p, lo, hi);
      if (hi > lo) gemv_block(x, out, lo, hi - lo);
    }
  }

  /// out = X W^T (W: m x k, the output head E).
  void multiply_transposed(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    require_shapes(x.cols() == cols_ && out.rows() == x.rows() && out.cols() == rows_,
                   "product X W^T (bf16 weights)", "X", x.rows(), x.cols(), "W", rows_, cols_,
                   "X and W must have the same number of columns");
    const int threads = num_threads();
    const int parts = (threads > 1 && rows_ >= 64) ? threads : 1;
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
    for (int p = 0; p < parts; ++p) {
      Index lo = 0, hi = 0;
      detail::block_range(rows_, parts, p, lo, hi);
      if (x.rows() <= kFewRows) {
        // Decoding: dot products with rows of W, four rows at a time.
        std::vector<float> xr(static_cast<std::size_t>(cols_));
        for (Index r = 0; r < x.rows(); ++r) {
          for (Index k = 0; k < cols_; ++k)
            xr[static_cast<std::size_t>(k)] = static_cast<float>(x(r, k));
          Index j = lo;
          for (; j + 4 <= hi; j += 4) {
            // Rows j + 8 .. j + 11 into L1 while these four are summed: the
            // hardware's prefetch alone left GPT-2's bf16 head at 0.6 of a
            // plain read; with it, 0.95 (two groups ahead was the best).
            if (j + 12 <= hi) {
              const std::uint16_t* ahead = b_.data() + (j + 8) * cols_;
              for (Index t = 0; t < 4 * cols_; t += 32) __builtin_prefetch(ahead + t, 0, 3);
            }
            dot_rows<4>(xr.data(), j, &out(r, j));
          }
          for (; j < hi; ++j) dot_rows<1>(xr.data(), j, &out(r, j));
        }
        continue;
      }
      constexpr Index kPanel = 64;
      RowMatrix<T> panel(kPanel, cols_);
      for (Index r0 = lo; r0 < hi; r0 += kPanel) {
        const Index nr = std::min(kPanel, hi - r0);
        widen(r0, nr, 0, cols_, panel.data(), cols_);
        out.middleCols(r0, nr).noalias() = x * panel.topRows(nr).transpose();  // (n, nr)
      }
    }
  }

 private:
  /// out[i] = x . W_{j + i} (float) for i < R: 16 partial sums per row, the
  /// R rows' chains independent (R = 4 keeps four chains of fused
  /// multiply-adds in flight and reads x once for four rows). Each row's sum
  /// is in the same order for every R, so the result does not depend on how
  /// the rows were grouped or split over threads.
  template <int R>
  void dot_rows(const float* xr, Index j, T* out) const {
    constexpr Index kLanes = 16;
    const std::uint16_t* e = b_.data() + j * cols_;
    float part[R][kLanes] = {};
    Index k = 0;
    for (; k + kLanes <= cols_; k += kLanes)
      for (int i = 0; i < R; ++i)
        for (Index t = 0; t < kLanes; ++t)
          part[i][t] += xr[k + t] * widen_one(e[i * cols_ + k + t]);
    for (int i = 0; i < R; ++i) {
      float s = 0;
      for (Index kk = k; kk < cols_; ++kk) s += xr[kk] * widen_one(e[i * cols_ + kk]);
      for (const float p : part[i]) s += p;
      out[i] = static_cast<T>(s);
    }
  }

  /// Rows r0 .. r0 + nr - 1, columns c0 .. c0 + nc - 1 of W, widened into dst
  /// (row stride ld).
  void widen(Index r0, Index nr, Index c0, Index nc, T* dst, Index ld) const {
    for (Index i = 0; i < nr; ++i) {
      const std::uint16_t* src = b_.data() + (r0 + i) * cols_ + c0;
      T* d = dst + i * ld;
      for (Index j = 0; j < nc; ++j)
        d[j] = static_cast<T>(std::bit_cast<float>(static_cast<std::uint32_t>(src[j]) << 16));
    }
  }
  /// out[:, c0 .. c0+nc) = X W[:, c0 .. c0+nc) for a few rows of X: one pass
  /// over W, eight rows at a time, each bfloat16 widened in registers
  /// (a 16-bit shift) and accumulated into a row of nc sums that stays in L1.
  void gemv_block(const ConstMatrixRef<T>& x, MatrixRef<T>& out, Index c0, Index nc) const {
    constexpr Index kRows = 8;
    std::vector<float> acc(static_cast<std::size_t>(nc));
    for (Index r = 0; r < x.rows(); ++r) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      float* a = acc.data();
      Index i = 0;
      for (; i + kRows <= rows_; i += kRows) {
        const std::uint16_t* w = b_.data() + i * cols_ + c0;
        const std::uint16_t *w0 = w, *w1 = w + cols_, *w2 = w + 2 * cols_, *w3 = w + 3 * cols_,
                            *w4 = w + 4 * cols_, *w5 = w + 5 * cols_, *w6 = w + 6 * cols_,
                            *w7 = w + 7 * cols_;
        const float x0 = static_cast<float>(x(r, i)), x1 = static_cast<float>(x(r, i + 1)),
                    x2 = static_cast<float>(x(r, i + 2)), x3 = static_cast<float>(x(r, i + 3)),
                    x4 = static_cast<float>(x(r, i + 4)), x5 = static_cast<float>(x(r, i + 5)),
                    x6 = static_cast<float>(x(r, i + 6)), x7 = static_cast<float>(x(r, i + 7));
        // The next eight rows into L1, a cache line of each per 32 columns,
        // while these are summed (one group ahead: 0.87-0.95 of a plain read
        // on GPT-2's shapes, 0.80-0.91 without).
        const std::uint16_t* ahead = w + kRows * cols_;
        const bool prefetch = i + 2 * kRows <= rows_;
        const auto step = [&](Index j) {
          a[j] += ((x0 * widen_one(w0[j]) + x1 * widen_one(w1[j])) +
                   (x2 * widen_one(w2[j]) + x3 * widen_one(w3[j]))) +
                  ((x4 * widen_one(w4[j]) + x5 * widen_one(w5[j])) +
                   (x6 * widen_one(w6[j]) + x7 * widen_one(w7[j])));
        };
        Index j = 0;
        for (; j + 32 <= nc; j += 32) {
          if (prefetch)
            for (Index q = 0; q < kRows; ++q) __builtin_prefetch(ahead + q * cols_ + j, 0, 3);
          for (Index t = j; t < j + 32; ++t) step(t);
        }
        for (; j < nc; ++j) step(j);
      }
      for (; i < rows_; ++i) {
        const std::uint16_t* w = b_.data() + i * cols_ + c0;
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

  Index rows_ = 0, cols_ = 0;
  std::vector<std::uint16_t> b_;
};

}  // namespace kappa
