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
//     WeightMatrix<T, DenseWeights>   F32 (and F16, widened to T)
//     WeightMatrix<T, Bf16Weights>    BF16
//     WeightMatrix<T, Q8_0Weights>    Q8_0   blocks: views into the file
//     WeightMatrix<T, Q4_0Weights>    Q4_0   (quant_weights.hpp)
//     WeightMatrix<T, Q4_KWeights>    Q4_K
//     WeightMatrix<T, Q6_KWeights>    Q6_K
//     detail::MappedDense<T>          F32 when T is float: a view too
//   and forwards rows(), cols(), bytes(), dense(), multiply() and
//   multiply_transposed() to it (one branch per product, nothing per
//   element). format() names the one held.
//
// A model with AsStoredWeights builds every weight matrix it is given from
// floats as DenseWeights (so it behaves as a dense model when built in
// memory); the GGUF loader (transformer/gguf_load.hpp) hands it the file's
// blocks instead.
#pragma once

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/weight_storage.hpp"

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

 private:
  Index rows_ = 0, cols_ = 0;
  BlocksAlong along_ = BlocksAlong::kRows;
  const T* p_ = nullptr;
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
                            detail::MappedDense<T>>;

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
  /// "q6_K", "f32 view".
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
  template <WeightStoragePolicy F>
  static void rows_of(const WeightMatrix<T, F>& m, std::span<const TokenId> ids,
                      MatrixRef<T>& out) {
    if constexpr (std::same_as<F, DenseWeights>) {
      for (std::size_t j = 0; j < ids.size(); ++j)
        out.row(static_cast<Index>(j)) = m.dense().row(ids[j]);
    } else if constexpr (requires { F::kBlockBytes; }) {
      if (m.blocks_along() != BlocksAlong::kCols) not_readable();
      const std::size_t row_bytes = m.blocks().size() / static_cast<std::size_t>(m.rows());
      std::vector<float> row(static_cast<std::size_t>(m.cols()));
      for (std::size_t j = 0; j < ids.size(); ++j) {
        detail::BlockFormatOps<F>::dequantize(
            m.blocks().data() + static_cast<std::size_t>(ids[j]) * row_bytes, row.data(), m.cols());
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
