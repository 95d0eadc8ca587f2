// kappa/heads/head_weights.hpp - the attention weights Z_h^-1 A_h of every
// head of a layer, as head_weights() and the models' inspection return them.
//
// A thin owner of H matrices (N_Q x N_KV each) whose element access is
// bounds-checked: asking for head h outside [0, H) throws RangeError naming
// h and H instead of reading past the end.
#pragma once

#include <concepts>
#include <cstddef>
#include <utility>
#include <vector>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// The weights Z_h^-1 A_h of heads h = 0 .. H-1 (see the file comment).
template <Scalar T>
class HeadWeights {
 public:
  HeadWeights() = default;
  explicit HeadWeights(std::vector<RowMatrix<T>> heads) : heads_(std::move(heads)) {}

  /// H, the number of heads.
  [[nodiscard]] std::size_t size() const { return heads_.size(); }
  [[nodiscard]] bool empty() const { return heads_.empty(); }
  /// Head h's weights (N_Q x N_KV). \throws RangeError for h outside [0, H).
  template <std::integral I>
  [[nodiscard]] const RowMatrix<T>& operator[](I h) const {
    return heads_[checked_head(h)];
  }
  template <std::integral I>
  [[nodiscard]] const RowMatrix<T>& at(I h) const {
    return heads_[checked_head(h)];
  }
  [[nodiscard]] auto begin() const { return heads_.begin(); }
  [[nodiscard]] auto end() const { return heads_.end(); }
  /// The matrices themselves.
  [[nodiscard]] const std::vector<RowMatrix<T>>& heads() const { return heads_; }

 private:
  template <std::integral I>
  std::size_t checked_head(I h) const {
    require_index("head", static_cast<long long>(h), static_cast<long long>(heads_.size()),
                  "the layer's heads (H)");
    return static_cast<std::size_t>(h);
  }
  std::vector<RowMatrix<T>> heads_;
};

}  // namespace kappa
