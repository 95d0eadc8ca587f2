// kappa/embed/rope.hpp - rotary position embedding (RoPE; Su et al. 2021).
//
// RoPE rotates pairs of channels of a query or key at position p by angles
// p theta_i, theta_i = b^{-2i / d_R} (i = 0 .. d_R/2 - 1, base b = 10000 by
// default), so that <RoPE(q, m), RoPE(k, n)> depends on q, k and m - n only.
// Two conventions pair the channels differently (same rotation otherwise):
//
//   RotateHalf  (GPT-NeoX, LLaMA in Hugging Face, DeepSeek): pair (i, i + d_R/2)
//       x'_i         = x_i cos(p theta_i) - x_{i+d_R/2} sin(p theta_i)
//       x'_{i+d_R/2} = x_{i+d_R/2} cos(p theta_i) + x_i sin(p theta_i)
//   Interleaved (GPT-J, RoFormer, Meta's LLaMA reference): pair (2i, 2i + 1)
//       x'_{2i}   = x_{2i} cos(p theta_i) - x_{2i+1} sin(p theta_i)
//       x'_{2i+1} = x_{2i+1} cos(p theta_i) + x_{2i} sin(p theta_i)
//
// The first d_R columns of each head rotate; columns d_R.. (partial rotary, as
// GPT-NeoX's rotary_pct or GPT-J's rotary_dim) pass unchanged. Row r of the
// input sits at position offset + r: prefill uses offset 0, decoding with a
// KV cache passes the number of cached tokens.
//
// Usage from attention (Q stacked as N x (H d_head), head h = column block h):
//   kappa::Rope<float> rope(d_head);              // RotateHalf, base 10000
//   rope.apply_heads(q, n_heads, offset);         // in place, every head
//   rope.apply(q.middleCols(h * d_head, d_head), offset);  // one head (a block)
//   rope.apply(k_rope, offset);                   // DeepSeek's decoupled key, N x d_R
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/embed/rope_scaling.hpp"

namespace kappa {

/// RoPE pairs channel i with i + d_R/2 (GPT-NeoX, Hugging Face LLaMA).
struct RotateHalf {};
/// RoPE pairs channel 2i with 2i + 1 (GPT-J, RoFormer, Meta's LLaMA).
struct Interleaved {};

/// How an attention layer builds its RoPE for its own head width (see
/// Rope::for_head): the layer knows d_head, so it is not given twice.
/// ```cpp
/// kappa::GroupedQueryAttention<float, kappa::kernels::Softmax, kappa::Rope<float>> attn(
///     config, kappa::RopeOptions{.base = 500000.0});   // LLaMA 3: d_R = d_head
/// ```
struct RopeOptions {
  double base = 10000.0;  ///< b [rope_theta]
  RopeScaling scaling{};  ///< frequency rule [rope_scaling]; kind kNone for plain RoPE
  Index rotary_dim = 0;   ///< d_R; 0 means the whole head (d_R = d_head)
};

/// Rotary position embedding; see the file comment.
template <Scalar T, class Convention = RotateHalf>
class Rope {
  static_assert(std::is_same_v<Convention, RotateHalf> || std::is_same_v<Convention, Interleaved>,
                "Rope: Convention must be kappa::RotateHalf or kappa::Interleaved");

 public:
  /// What a layer passes to for_head().
  using Options = RopeOptions;

  /// RoPE for heads of width d_head: d_R = options.rotary_dim, or d_head when
  /// it is 0. MultiHeadAttention calls this when given RopeOptions (or no
  /// positional argument), so the rotary width is derived, not repeated.
  /// 	hrows ShapeError naming both widths if d_R > d_head; as the
  ///         constructor for an odd d_R, the base and the scaling.
  static Rope for_head(Index d_head, const RopeOptions& options = {}) {
    const Index d_r = options.rotary_dim > 0 ? options.rotary_dim : d_head;
    if (options.rotary_dim < 0 || d_r > d_head) {
      throw ShapeError("kappa: RoPE for heads of d_head = " + std::to_string(d_head) +
                       ": RopeOptions::rotary_dim = " + std::to_string(options.rotary_dim) +
                       " must be 0 (the whole head) or between 1 and d_head");
    }
    return Rope(d_r, options.base, options.scaling);
  }

  /// d_R = rotary_dim (even, >= 0; 0 rotates nothing, for callers whose
  /// rotary part is optional); base b > 0. Throws ShapeError for an odd or
  /// negative d_R, std::invalid_argument for base <= 0 or not finite.
  explicit Rope(Index rotary_dim, double base = 10000.0) : Rope(rotary_dim, base, RopeScaling{}) {}

  /// RoPE with a frequency rule of real configs (linear, dynamic NTK, llama3,
  /// yarn; see rope_scaling.hpp): theta'_i from rope_frequencies(), and cos,
  /// sin multiplied by rope_attention_factor(). \throws std::invalid_argument
  /// for bad scaling parameters (naming them), as above for d_R and the base.
  Rope(Index rotary_dim, double base, RopeScaling scaling)
      : d_rot_(rotary_dim), base_(base), scaling_(std::move(scaling)) {
    require_shapes(rotary_dim >= 0 && rotary_dim % 2 == 0, "RoPE", "rotary dim", 1, rotary_dim,
                   "pairs", 1, rotary_dim / 2,
                   "the rotary dimension must be even and non-negative");
    if (!(base > 0) || !std::isfinite(base))
      throw std::invalid_argument("kappa: RoPE: base must be finite and > 0");
    scaling_.validate();
    inv_freq_ = rope_frequencies(d_rot_, base_, scaling_);
    attention_factor_ = rope_attention_factor(scaling_);
  }

  /// d_R.
  Index rotary_dim() const noexcept { return d_rot_; }
  double base() const noexcept { return base_; }
  /// The frequency rule (kind kNone for plain RoPE).
  const RopeScaling& scaling() const noexcept { return scaling_; }
  /// The factor multiplying cos and sin (1 except for yarn).
  double attention_factor() const noexcept { return attention_factor_; }
  /// theta_i = b^{-2i / d_R}.
  double theta(Index i) const { return inv_freq_[static_cast<std::size_t>(i)]; }

  /// Rotates x (N x d, d >= d_R) in place, row r at position offset + r.
  /// \throws ShapeError if d < d_R; RangeError naming the offset if it is
  ///         negative or offset + N overflows (x is then unchanged).
  void apply(MatrixRef<T> x, Index offset = 0) const {
    check(x.cols(), "X");
    check_offset(offset, x.rows());
    const std::vector<double>& f = frequencies_for(offset + x.rows(), dyn_scratch());
    for (Index r = 0; r < x.rows(); ++r)
      rotate_row(x.row(r).data(), static_cast<double>(offset + r), f);
  }
  /// Rotates row r of x by position positions[r] (any order, e.g. packed
  /// sequences). ShapeError if the sizes differ.
  void apply(MatrixRef<T> x, std::span<const Index> positions) const {
    check(x.cols(), "X");
    require_shapes(static_cast<Index>(positions.size()) == x.rows(), "RoPE", "X", x.rows(),
                   x.cols(), "positions", static_cast<Index>(positions.size()), 1,
                   "one position per row");
    Index len = 0;
    for (Index p : positions) {
      if (p == std::numeric_limits<Index>::max())
        throw RangeError("kappa: RoPE: position " + std::to_string(p) +
                         " is too large (the sequence length p + 1 overflows)");
      len = std::max(len, p + 1);
    }
    const std::vector<double>& f = frequencies_for(len, dyn_scratch());
    for (Index r = 0; r < x.rows(); ++r)
      rotate_row(x.row(r).data(), static_cast<double>(positions[static_cast<std::size_t>(r)]), f);
  }
  /// Rotates every head of a stacked N x (H d_head) matrix in place: head h
  /// is the column block [h d_head, (h+1) d_head). ShapeError unless H
  /// divides the width and d_head >= d_R; RangeError for offsets as apply().
  void apply_heads(MatrixRef<T> x, Index n_heads, Index offset = 0) const {
    require_shapes(n_heads > 0 && x.cols() % n_heads == 0, "RoPE heads", "X", x.rows(), x.cols(),
                   "heads", n_heads, 1, "the number of heads must divide the width of X");
    const Index d_head = x.cols() / n_heads;
    check(d_head, "a head of X");
    check_offset(offset, x.rows());
    const std::vector<double>& f = frequencies_for(offset + x.rows(), dyn_scratch());
    for (Index r = 0; r < x.rows(); ++r)
      for (Index h = 0; h < n_heads; ++h)
        rotate_row(x.row(r).data() + h * d_head, static_cast<double>(offset + r), f);
  }
  /// A rotated copy of x.
  RowMatrix<T> rotated(ConstMatrixRef<T> x, Index offset = 0) const {
    RowMatrix<T> y = x;
    apply(y, offset);
    return y;
  }

 private:
  /// Positions offset .. offset + rows - 1 must be >= 0 and representable.
  static void check_offset(Index offset, Index rows) {
    if (offset < 0)
      throw RangeError("kappa: RoPE: position offset " + std::to_string(offset) + " is negative");
    (void)checked_add("RoPE: position offset + rows", offset, rows);
  }
  void check(Index width, const char* what) const {
    require_shapes(width >= d_rot_, "RoPE", what, 1, width, "rotary dim", 1, d_rot_,
                   "RoPE rotates the first d_R columns, so a row needs at least d_R");
  }
  /// The frequencies for a sequence of `seq_len` positions: the fixed table,
  /// or for dynamic NTK beyond the original context a table computed into
  /// `scratch` (thread_local: the layer stays read-only during forward calls).
  const std::vector<double>& frequencies_for(Index seq_len, std::vector<double>& scratch) const {
    if (!scaling_.length_dependent() || seq_len <= scaling_.original_context) return inv_freq_;
    scratch = rope_frequencies(d_rot_, base_, scaling_, seq_len);
    return scratch;
  }
  void rotate_row(T* v, double p, const std::vector<double>& freq) const {
    const Index half = d_rot_ / 2;
    const double m = attention_factor_;
    for (Index i = 0; i < half; ++i) {
      const double a = p * freq[static_cast<std::size_t>(i)];
      const T c = static_cast<T>(m * std::cos(a)), s = static_cast<T>(m * std::sin(a));
      T* x0;
      T* x1;
      if constexpr (std::is_same_v<Convention, RotateHalf>) {
        x0 = v + i;
        x1 = v + i + half;
      } else {
        x0 = v + 2 * i;
        x1 = v + 2 * i + 1;
      }
      const T a0 = *x0, a1 = *x1;
      *x0 = a0 * c - a1 * s;
      *x1 = a1 * c + a0 * s;
    }
  }

  Index d_rot_;
  double base_;
  RopeScaling scaling_{};
  std::vector<double> inv_freq_;  // theta_i (theta'_i under a fixed scaling rule)
  double attention_factor_ = 1.0;
  // Dynamic NTK scratch, one per thread. A function-local thread_local: GCC 12
  // rejects several `static inline thread_local` members of one class template
  // in a translation unit ("redefinition of __tls_guard").
  static std::vector<double>& dyn_scratch() {
    thread_local std::vector<double> scratch;
    return scratch;
  }
};

}  // namespace kappa
