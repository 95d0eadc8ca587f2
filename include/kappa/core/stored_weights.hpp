// kappa/core/stored_weights.hpp - weights kept in the format a file stores
// each of them in, chosen per matrix when the file is read.
//
// A llama.cpp "Q4_K_M" file mixes formats: most matrices in Q4_K, some
// (W^V and W_down of half the layers, the output head) in Q6_K, the norms in
// F32; a "Q8_0" file has Q8_0 matrices and F32 norms. A model whose storage
// policy is one compile-time format would requantize or widen the others.
// AsStoredWeights keeps each matrix as the file has it:
//
//   WeightMatrix<T, AsStoredWeights> holds one of
//     WeightMatrix<T, DenseWeights>   F32
//     WeightMatrix<T, Bf16Weights>    BF16: a view as well (W^T as stored)
//     WeightMatrix<T, Q8_0Weights>    Q8_0   blocks: views into the file
//     WeightMatrix<T, Q4_0Weights>    Q4_0   (quant_weights.hpp)
//     WeightMatrix<T, Q4_KWeights>    Q4_K
//     WeightMatrix<T, Q6_KWeights>    Q6_K
//     detail::MappedDense<T>          F32 when T is float: a view too
//     detail::MappedF16<T>            F16: a view (converted in registers)
//   and forwards rows(), cols(), bytes(), dense(), multiply() and
//   multiply_transposed() to it (one branch per product, nothing per
//   element). format() names the one held.
//
// A model with AsStoredWeights builds every weight matrix it is given from
// floats as DenseWeights (so it behaves as a dense model when built in
// memory); the GGUF loader (transformer/gguf_load.hpp) hands it the file's
// blocks instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/core/weight_storage.hpp"

#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kappa {

/// Each weight matrix in the format its file stores it in (see the file
/// comment of kappa/core/stored_weights.hpp).
struct AsStoredWeights {
  static constexpr const char* kName = "as stored";
  /// A storage whose format is chosen per matrix at run time.
  static constexpr bool kPerMatrix = true;
};

namespace detail {
/// W (rows x cols) as float values that stay where they are (a GGUF file's
/// F32 tensor in the mapping), in the file's layout P: P = W^T (kRows, the
/// projections: X W = X P^T) or P = W (kCols, the head). Products go to
/// product_into / product_transposed_into on a map of P: no copy.
template <Scalar T>
class MappedDense {
 public:
  MappedDense(Index rows, Index cols, BlocksAlong along, const T* p,
              std::shared_ptr<const void> owner)
      : rows_(rows), cols_(cols), along_(along), p_(p), owner_(std::move(owner)) {}
  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] BlocksAlong blocks_along() const { return along_; }
  [[nodiscard]] std::size_t bytes() const {
    return sizeof(T) * static_cast<std::size_t>(rows_) * static_cast<std::size_t>(cols_);
  }
  /// P as a matrix (rows of P one after another).
  [[nodiscard]] Eigen::Map<const RowMatrix<T>> packed() const {
    return along_ == BlocksAlong::kRows ? Eigen::Map<const RowMatrix<T>>(p_, cols_, rows_)
                                        : Eigen::Map<const RowMatrix<T>>(p_, rows_, cols_);
  }
  [[nodiscard]] RowMatrix<T> dense() const {
    if (along_ == BlocksAlong::kRows) return packed().transpose();
    return packed();
  }
  void multiply(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    if (along_ == BlocksAlong::kRows)
      product_transposed_into<T>(x, packed(), out);
    else
      product_into<T>(x, packed(), out);
  }
  void multiply_transposed(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    if (along_ == BlocksAlong::kRows)
      product_into<T>(x, packed(), out);
    else
      product_transposed_into<T>(x, packed(), out);
  }
  /// multiply()'s decode product as a job (multiply_each).
  DecodeJob decode_job(const ConstMatrixRef<T>& x, MatrixRef<T>& out,
                       DecodeInput& /*shared*/) const {
    if (along_ == BlocksAlong::kRows) return product_transposed_job<T>(x, packed(), out);
    return product_job<T>(x, packed(), out);
  }

 private:
  Index rows_ = 0, cols_ = 0;
  BlocksAlong along_ = BlocksAlong::kRows;
  const T* p_ = nullptr;
  std::shared_ptr<const void> owner_;
};

/// x . p for k fp16 values at p (any alignment) and k floats: F16C
/// conversions and four chains of fused multiply-adds where the build has
/// them, else 8 partial sums of fp16_to_float products.
inline float f16_dot(const unsigned char* p, const float* x, Index k) {
  Index t = 0;
  float s = 0.0f;
#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; t + 32 <= k; t += 32) {
    const auto* q = reinterpret_cast<const __m128i*>(p + 2 * t);
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(q)), _mm256_loadu_ps(x + t), a0);
    a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(q + 1)), _mm256_loadu_ps(x + t + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(q + 2)), _mm256_loadu_ps(x + t + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(q + 3)), _mm256_loadu_ps(x + t + 24), a3);
  }
  const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
  s = _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
#else
  float part[8] = {};
  for (; t + 8 <= k; t += 8)
    for (Index l = 0; l < 8; ++l)
      part[l] += quant::fp16_to_float(quant::detail::load_u16(p + 2 * (t + l))) * x[t + l];
  for (const float v : part) s += v;
#endif
  for (; t < k; ++t) s += quant::fp16_to_float(quant::detail::load_u16(p + 2 * t)) * x[t];
  return s;
}

/// W (rows x cols) as fp16 values that stay where they are (a GGUF file's
/// F16 tensor in the mapping, or a reordered copy), in the file's layout P
/// as MappedDense: P = W^T (kRows, the projections) or P = W (kCols, the
/// head). Decoding (up to kFewRows rows of X) takes one dot product per row
/// of P, converted in registers, the row two ahead prefetched; prefill
/// takes kappa's GEMM (core/gemm_simd.hpp), converting P's blocks as it
/// packs them (T = float with AVX2 or AVX-512), else converts panels of 64
/// rows of P to T for Eigen's GEMM. Half the bytes of the float matrix, and
/// the file's bytes used as they are.
template <Scalar T>
class MappedF16 {
 public:
  MappedF16(Index rows, Index cols, BlocksAlong along, const unsigned char* p,
            std::shared_ptr<const void> owner)
      : rows_(rows), cols_(cols), along_(along), p_(p), owner_(std::move(owner)) {
    k_ = along == BlocksAlong::kRows ? rows : cols;
    n_p_ = along == BlocksAlong::kRows ? cols : rows;
  }
  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] BlocksAlong blocks_along() const { return along_; }
  [[nodiscard]] std::size_t bytes() const {
    return 2 * static_cast<std::size_t>(rows_) * static_cast<std::size_t>(cols_);
  }
  /// Row j of P (k values) converted into out[0..k).
  void p_row(Index j, T* out) const { p_segment(j, 0, k_, out); }
  /// P[j][t0 .. t0 + len) converted into out[0 .. len).
  void p_segment(Index j, Index t0, Index len, T* out) const {
    const unsigned char* r = p_ + 2 * (static_cast<std::size_t>(j) * static_cast<std::size_t>(k_) +
                                       static_cast<std::size_t>(t0));
    Index t = 0;
#if defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
    if constexpr (std::is_same_v<T, float>)  // exact, 8 at a time
      for (; t + 8 <= len; t += 8)
        _mm256_storeu_ps(
            out + t, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * t))));
#endif
    for (; t < len; ++t)
      out[t] = static_cast<T>(quant::fp16_to_float(quant::detail::load_u16(r + 2 * t)));
  }
  [[nodiscard]] RowMatrix<T> dense() const {
    RowMatrix<T> pm(n_p_, k_);
    for (Index j = 0; j < n_p_; ++j) p_row(j, pm.row(j).data());
    if (along_ == BlocksAlong::kRows) return pm.transpose();
    return pm;
  }
  /// out = X W. \throws ShapeError on mismatch.
  void multiply(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, false, "f16");
    if (along_ == BlocksAlong::kRows)
      product_p_transposed(x, out);
    else
      product_p(x, out);
  }
  /// multiply()'s decode product (a few rows of X) as a job (multiply_each).
  /// \throws ShapeError on mismatch.
  DecodeJob decode_job(const ConstMatrixRef<T>& x, MatrixRef<T>& out,
                       DecodeInput& /*shared*/) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, false, "f16");
    if (along_ != BlocksAlong::kRows)  // product_p: one thread, no region of its own
      return {1, [this, &x, &out](int) { product_p(x, out); }};
    const int parts = decode_parts(n_p_);
    return {parts,
            [this, xs = floats_of(x), &out, parts](int p) { dots_piece(xs, out, p, parts); }};
  }
  /// out = X W^T. \throws ShapeError on mismatch.
  void multiply_transposed(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, true, "f16");
    if (along_ == BlocksAlong::kCols)
      product_p_transposed(x, out);
    else
      product_p(x, out);
  }

 private:
  static constexpr Index kPanel = 64;
  [[nodiscard]] const unsigned char* row_ptr(Index j) const {
    return p_ + 2 * static_cast<std::size_t>(j) * static_cast<std::size_t>(k_);
  }
  /// out = X P^T (X: n x k): the fast product.
  void product_p_transposed(const ConstMatrixRef<T>& x, MatrixRef<T>& out) const {
    const Index n = x.rows();
    const int parts = decode_parts(n_p_);
#if KAPPA_SIMD_LANES > 0
    if constexpr (std::is_same_v<T, float>) {
      if (n > kFewRows) {  // prefill: our GEMM, converting P's rows
        gemm::gemm_nt(
            x.data(), x.outerStride(), n, k_, n_p_,
            [this](Index j, Index t, Index len, float* dst) { p_segment(j, t, len, dst); },
            out.data(), out.outerStride(), num_threads());
        return;
      }
    }
#endif
    if (n > kFewRows) {
      const Index n_panels = (n_p_ + kPanel - 1) / kPanel;
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
      for (int p = 0; p < parts; ++p) {
        const Index lo = std::min(n_p_, n_panels * p / parts * kPanel);
        const Index hi = std::min(n_p_, n_panels * (p + 1) / parts * kPanel);
        if (hi <= lo) continue;
        RowMatrix<T> panel(std::min(kPanel, hi - lo), k_);
        for (Index r0 = lo; r0 < hi; r0 += kPanel) {
          const Index nr = std::min(kPanel, hi - r0);
          for (Index i = 0; i < nr; ++i) p_row(r0 + i, panel.row(i).data());
          out.middleCols(r0, nr).noalias() = x * panel.topRows(nr).transpose();
        }
      }
      return;
    }
    const std::vector<float> xs = floats_of(x);
    run_pieces(parts, [&](int p) { dots_piece(xs, out, p, parts); });
  }
  /// X's rows as floats, one after another.
  [[nodiscard]] std::vector<float> floats_of(const ConstMatrixRef<T>& x) const {
    std::vector<float> xs(static_cast<std::size_t>(x.rows() * k_));
    for (Index r = 0; r < x.rows(); ++r)
      for (Index t = 0; t < k_; ++t)
        xs[static_cast<std::size_t>(r * k_ + t)] = static_cast<float>(x(r, t));
    return xs;
  }
  /// Piece p of `parts` of the decode product out = X P^T (X's rows in xs):
  /// dot products with a block of P's rows.
  void dots_piece(const std::vector<float>& xs, MatrixRef<T>& out, int p, int parts) const {
    Index lo = 0, hi = 0;
    detail::block_range(n_p_, parts, p, lo, hi);
    for (Index j = lo; j < hi; ++j) {
      if (j + 2 < hi) {
        const unsigned char* ahead = row_ptr(j + 2);
        for (Index b = 0; b < 2 * k_; b += 64) __builtin_prefetch(ahead + b, 0, 2);
      }
      for (Index r = 0; r < out.rows(); ++r)
        out(r, j) = static_cast<T>(f16_dot(row_ptr(j), xs.data() + r * k_, k_));
    }
  }
  /// out = X P (X: n x n_p): panels of P converted, accumulated GEMMs.
  void product_p(const ConstMatrixRef<T>& x, MatrixRef<T>& out) const {
#if KAPPA_SIMD_LANES > 0
    if constexpr (std::is_same_v<T, float>) {
      constexpr Index kNr = gemm::kNr;
      if (x.rows() > kFewRows) {  // prefill: our GEMM, converting B's blocks
        gemm::gemm_nn(
            x.data(), x.outerStride(), x.rows(), n_p_, k_,
            [this](Index t, Index kc, Index j, Index len, float* dst) {
              for (Index s = 0; s < kc; ++s) p_segment(t + s, j, len, dst + s * kNr);
            },
            out.data(), out.outerStride(), num_threads());
        return;
      }
    }
#endif
    out.setZero();
    RowMatrix<T> panel(std::min(kPanel, std::max<Index>(n_p_, 1)), k_);
    for (Index r0 = 0; r0 < n_p_; r0 += kPanel) {
      const Index nr = std::min(kPanel, n_p_ - r0);
      for (Index i = 0; i < nr; ++i) p_row(r0 + i, panel.row(i).data());
      out.noalias() += x.middleCols(r0, nr) * panel.topRows(nr);
    }
  }

  Index rows_ = 0, cols_ = 0;
  BlocksAlong along_ = BlocksAlong::kRows;
  Index k_ = 0, n_p_ = 0;  // reduction length, rows of P
  const unsigned char* p_ = nullptr;
  std::shared_ptr<const void> owner_;
};
}  // namespace detail

/// One weight matrix in any of the formats AsStoredWeights holds.
template <Scalar T>
class WeightMatrix<T, AsStoredWeights> {
 public:
  using Held = std::variant<WeightMatrix<T, DenseWeights>, WeightMatrix<T, Bf16Weights>,
                            WeightMatrix<T, Q8_0Weights>, WeightMatrix<T, Q4_0Weights>,
                            WeightMatrix<T, Q4_KWeights>, WeightMatrix<T, Q6_KWeights>,
                            detail::MappedDense<T>, detail::MappedF16<T>>;

  WeightMatrix() = default;
  /// W kept dense, in T. (The block constructors of the models quantize
  /// along a dimension; with this storage, W built from floats stays dense.)
  explicit WeightMatrix(RowMatrix<T> w) : m_(WeightMatrix<T, DenseWeights>(std::move(w))) {}
  /// As above; `along` does not apply to dense weights.
  WeightMatrix(RowMatrix<T> w, BlocksAlong /*along*/)
      : m_(WeightMatrix<T, DenseWeights>(std::move(w))) {}
  /// W in one of the held formats.
  template <WeightStoragePolicy S>
  requires std::is_constructible_v<Held, WeightMatrix<T, S>>
  explicit WeightMatrix(WeightMatrix<T, S> w) : m_(std::move(w)) {}
  /// Float values viewed where they are (a GGUF file's F32 tensor).
  explicit WeightMatrix(detail::MappedDense<T> w) : m_(std::move(w)) {}
  /// fp16 values viewed where they are (a GGUF file's F16 tensor).
  explicit WeightMatrix(detail::MappedF16<T> w) : m_(std::move(w)) {}
  /// W = 0 (rows x cols), dense, in untouched zero pages
  /// (detail::zero_pages): a layer's placeholder until its loader sets the
  /// file's matrix, at no cost in time or resident memory.
  static WeightMatrix zeros(Index rows, Index cols) {
    auto owner = detail::zero_pages(sizeof(T) * static_cast<std::size_t>(rows) *
                                    static_cast<std::size_t>(cols));
    const auto* p = static_cast<const T*>(owner.get());
    return WeightMatrix(
        detail::MappedDense<T>(rows, cols, BlocksAlong::kRows, p, std::move(owner)));
  }

  [[nodiscard]] Index rows() const {
    return std::visit([](const auto& m) { return m.rows(); }, m_);
  }
  [[nodiscard]] Index cols() const {
    return std::visit([](const auto& m) { return m.cols(); }, m_);
  }
  /// The bytes of the held matrix (packed blocks as stored).
  [[nodiscard]] std::size_t bytes() const {
    return std::visit([](const auto& m) { return m.bytes(); }, m_);
  }
  /// The name of the held format: "dense", "bf16", "q8_0", "q4_0", "q4_K",
  /// "q6_K", "f32 view", "f16 view".
  [[nodiscard]] std::string format() const {
    return std::visit([](const auto& m) -> std::string { return storage_name(m); }, m_);
  }
  /// The held matrix.
  [[nodiscard]] const Held& held() const { return m_; }

  /// Whether rows_into() can read W's rows one by one: W dense, or in blocks
  /// along its columns (BlocksAlong::kCols: an embedding or output head
  /// [N_T][d] as GGUF stores it).
  [[nodiscard]] bool rows_readable() const {
    return std::visit(
        [](const auto& m) {
          using M = std::remove_cvref_t<decltype(m)>;
          if constexpr (std::same_as<M, WeightMatrix<T, DenseWeights>>)
            return true;
          else if constexpr (std::same_as<M, WeightMatrix<T, Bf16Weights>>)
            return !m.stored_transposed();
          else if constexpr (requires { m.blocks_along(); })  // blocks, or an F32 view
            return m.blocks_along() == BlocksAlong::kCols;
          else
            return false;
        },
        m_);
  }

  /// Rows ids[j] of W into row j of out (ids.size() x cols), each row of
  /// blocks dequantized on its own (an embedding lookup without a float copy
  /// of the table). The ids must be in [0, rows()) (checked by the caller).
  /// \throws std::logic_error unless rows_readable().
  void rows_into(std::span<const TokenId> ids, MatrixRef<T> out) const {
    std::visit([&](const auto& m) { rows_of(m, ids, out); }, m_);
  }

  /// W in T (rows x cols; a copy).
  [[nodiscard]] RowMatrix<T> dense() const {
    return std::visit([](const auto& m) { return RowMatrix<T>(m.dense()); }, m_);
  }
  /// out = X W. \throws ShapeError on mismatch.
  void multiply(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    std::visit([&](const auto& m) { m.multiply(x, out); }, m_);
  }
  /// out = X W^T. \throws ShapeError on mismatch.
  void multiply_transposed(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    std::visit([&](const auto& m) { m.multiply_transposed(x, out); }, m_);
  }
  /// multiply()'s decode product as a job of the held matrix (multiply_each).
  /// \throws ShapeError on mismatch.
  detail::DecodeJob decode_job(const ConstMatrixRef<T>& x, MatrixRef<T>& out,
                               detail::DecodeInput& shared) const {
    return std::visit([&](const auto& m) { return m.decode_job(x, out, shared); }, m_);
  }

 private:
  [[noreturn]] static void not_readable() {
    throw std::logic_error(
        "kappa: WeightMatrix<AsStoredWeights>::rows_into: the held matrix cannot be read row by "
        "row (its blocks do not run along its columns)");
  }
  static void rows_of(const detail::MappedDense<T>& m, std::span<const TokenId> ids,
                      MatrixRef<T>& out) {
    if (m.blocks_along() != BlocksAlong::kCols) not_readable();
    for (std::size_t j = 0; j < ids.size(); ++j)
      out.row(static_cast<Index>(j)) = m.packed().row(ids[j]);
  }
  static const char* storage_name(const detail::MappedDense<T>& /*m*/) { return "f32 view"; }
  static void rows_of(const detail::MappedF16<T>& m, std::span<const TokenId> ids,
                      MatrixRef<T>& out) {
    if (m.blocks_along() != BlocksAlong::kCols) not_readable();
    std::vector<T> row(static_cast<std::size_t>(m.cols()));
    for (std::size_t j = 0; j < ids.size(); ++j) {
      m.p_row(ids[j], row.data());
      for (Index c = 0; c < m.cols(); ++c)
        out(static_cast<Index>(j), c) = row[static_cast<std::size_t>(c)];
    }
  }
  static const char* storage_name(const detail::MappedF16<T>& /*m*/) { return "f16 view"; }
  template <WeightStoragePolicy F>
  static void rows_of(const WeightMatrix<T, F>& m, std::span<const TokenId> ids,
                      MatrixRef<T>& out) {
    if constexpr (std::same_as<F, DenseWeights>) {
      for (std::size_t j = 0; j < ids.size(); ++j)
        out.row(static_cast<Index>(j)) = m.dense().row(ids[j]);
    } else if constexpr (std::same_as<F, Bf16Weights>) {
      if (m.stored_transposed()) not_readable();
      std::vector<T> row(static_cast<std::size_t>(m.cols()));
      for (std::size_t j = 0; j < ids.size(); ++j) {
        m.row_into(ids[j], row.data());
        for (Index c = 0; c < m.cols(); ++c)
          out(static_cast<Index>(j), c) = row[static_cast<std::size_t>(c)];
      }
    } else if constexpr (requires { F::kBlockBytes; }) {
      if (m.blocks_along() != BlocksAlong::kCols) not_readable();
      std::vector<float> row(static_cast<std::size_t>(m.cols()));
      std::vector<unsigned char> scratch;
      for (std::size_t j = 0; j < ids.size(); ++j) {
        detail::BlockFormatOps<F>::dequantize(m.row_blocks(ids[j], scratch), row.data(), m.cols());
        for (Index c = 0; c < m.cols(); ++c)
          out(static_cast<Index>(j), c) = static_cast<T>(row[static_cast<std::size_t>(c)]);
      }
    } else {
      (void)m;
      (void)ids;
      (void)out;
      not_readable();
    }
  }
  template <WeightStoragePolicy S>
  static const char* storage_name(const WeightMatrix<T, S>& /*m*/) {
    return S::kName;
  }
  Held m_{};
};

}  // namespace kappa
