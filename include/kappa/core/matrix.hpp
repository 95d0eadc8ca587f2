// kappa/core/matrix.hpp - matrix aliases for the paper's row-vector convention.
//
// The paper writes one token per row: X is N x d and Q = X W^Q. kappa stores
// every such matrix row-major behind one alias, so that a token is a
// contiguous row and a head's column block of a stacked projection is a
// strided view that passes through `ConstMatrixRef` without a copy.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <type_traits>

namespace kappa {

/// Index type for sizes and positions (Eigen's signed index).
using Index = Eigen::Index;

/// A token id: an index into the vocabulary T, 0 <= id < N_T.
using TokenId = std::int32_t;

/// A dense row-major matrix: one token (or one query/key/value) per row.
template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A column vector (e.g. the diagonal of the normalizer Z).
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// A row vector (e.g. one token's embedding E_i).
template <class T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

/// Read-only view of any row-major matrix, block or map (no copy when the
/// inner stride is 1). This is what non-template kappa functions take.
template <class T>
using ConstMatrixRef = Eigen::Ref<const RowMatrix<T>>;

/// Writable view of a row-major matrix, block or map (hot-path outputs).
template <class T>
using MatrixRef = Eigen::Ref<RowMatrix<T>>;

/// Read-only view of a row-major matrix with runtime inner stride too.
template <class T>
using ConstStridedRef =
    Eigen::Ref<const RowMatrix<T>, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

}  // namespace kappa
