// kappa/nn/feed_forward.hpp - the position-wise feed-forward layers of the
// Transformer, applied to each token (row) independently:
//
//   Mlp<T, Act>       F(X) = act(X W_1 + b_1) W_2 + b_2
//                     W_1: (d, d_ff), W_2: (d_ff, d). Original Transformer
//                     (Relu), GPT-2 (GeluTanh), BERT (Gelu).
//   GatedMlp<T, Act>  F(X) = (act(X W_gate) * (X W_up)) W_down    (* elementwise)
//                     W_gate, W_up: (d, d_ff), W_down: (d_ff, d). SwiGLU
//                     (Shazeer 2020) with Act = Silu, as in LLaMA, Mistral,
//                     Qwen2 and DeepSeek-V2's dense layers.
//
// Weights follow the paper's row convention (used as X W). The gated layer
// stores [W_gate | W_up] side by side, so both come from one GEMM. The
// storage policy (DenseWeights, Bf16Weights; core/weight_storage.hpp) picks
// the bytes a decode step reads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/random.hpp"
#include "kappa/core/weight_storage.hpp"
#include "kappa/nn/activations.hpp"

namespace kappa {

namespace detail {
template <class M>
void expect_ffn_shape(const char* what, const char* name, const M& m, Index rows, Index cols) {
  require_shapes(m.rows() == rows && m.cols() == cols, what, name, m.rows(), m.cols(), "expected",
                 rows, cols, "d = d_model, d_ff = the hidden width");
}
template <Scalar T>
void add_bias(RowMatrix<T>& x, const RowVector<T>& b) {
  if (b.size() > 0) x.rowwise() += b;
}
}  // namespace detail

/// Two-layer MLP act(X W_1 + b_1) W_2 + b_2; biases optional (empty = none).
///
/// ```cpp
/// kappa::Mlp<float, kappa::GeluTanh> ffn(768, 3072);   // GPT-2 small
/// ffn.set_weights(w_1, b_1, w_2, b_2);
/// kappa::RowMatrix<float> y = ffn.forward(x);          // (N, 768)
/// ```
/// A freshly constructed Mlp has zero weights, so its output is zero until
/// set_weights() or init_random(seed) is called.
template <Scalar T, class Act = Relu, WeightStoragePolicy Storage = DenseWeights>
class Mlp {
  static_assert(Activation<Act, T>,
                "kappa: Mlp's activation must provide static apply(MatrixRef<T>)");

 public:
  using value_type = T;
  /// Zero weights, no biases. \throws RangeError for negative sizes.
  Mlp(Index d_model, Index d_ff)
      : w_1_(RowMatrix<T>::Zero(check_size(d_model), check_size(d_ff))),
        w_2_(RowMatrix<T>::Zero(d_ff, d_model)) {}

  [[nodiscard]] Index d_model() const { return w_1_.rows(); }
  [[nodiscard]] Index d_ff() const { return w_1_.cols(); }
  using StorageType = Storage;

  /// W_1 (d, d_ff), b_1 (d_ff or empty), W_2 (d_ff, d), b_2 (d or empty).
  /// \throws ShapeError naming the weight, its shape and the expected one.
  void set_weights(RowMatrix<T> w_1, RowVector<T> b_1, RowMatrix<T> w_2, RowVector<T> b_2) {
    constexpr const char* what = "Mlp::set_weights";
    detail::expect_ffn_shape(what, "W_1", w_1, d_model(), d_ff());
    detail::expect_ffn_shape(what, "W_2", w_2, d_ff(), d_model());
    if (b_1.size() > 0) detail::expect_ffn_shape(what, "b_1", b_1, 1, d_ff());
    if (b_2.size() > 0) detail::expect_ffn_shape(what, "b_2", b_2, 1, d_model());
    w_1_ = WeightMatrix<T, Storage>(std::move(w_1));
    b_1_ = std::move(b_1);
    w_2_ = WeightMatrix<T, Storage>(std::move(w_2));
    b_2_ = std::move(b_2);
  }

  /// As above with W_1 and W_2 already in the layer's storage (e.g. blocks
  /// viewed in a memory-mapped GGUF file).
  void set_weights(WeightMatrix<T, Storage> w_1, RowVector<T> b_1, WeightMatrix<T, Storage> w_2,
                   RowVector<T> b_2) {
    constexpr const char* what = "Mlp::set_weights";
    detail::expect_ffn_shape(what, "W_1", w_1, d_model(), d_ff());
    detail::expect_ffn_shape(what, "W_2", w_2, d_ff(), d_model());
    if (b_1.size() > 0) detail::expect_ffn_shape(what, "b_1", b_1, 1, d_ff());
    if (b_2.size() > 0) detail::expect_ffn_shape(what, "b_2", b_2, 1, d_model());
    w_1_ = std::move(w_1);
    b_1_ = std::move(b_1);
    w_2_ = std::move(w_2);
    b_2_ = std::move(b_2);
  }

  /// Draws W_1 then W_2 from one SeededNormal(seed) stream and removes the
  /// biases: each W (fan_in x fan_out) has entries W_ij ~ U(-a, a],
  /// a = sqrt(3 / fan_in), i.e. mean 0 and variance 1 / fan_in
  /// (seeded_projection, core/random.hpp), so X W_1 keeps the scale of X and
  /// F(X) is of order 1 for X of order 1. The same seed gives the same
  /// weights on every platform.
  void init_random(std::uint64_t seed) {
    SeededNormal g(seed);
    RowMatrix<T> w_1 = seeded_projection<T>(d_model(), d_ff(), g);
    RowMatrix<T> w_2 = seeded_projection<T>(d_ff(), d_model(), g);
    set_weights(std::move(w_1), {}, std::move(w_2), {});
  }

  /// F(X) for X (N, d); returns (N, d). \throws ShapeError unless X has d columns.
  [[nodiscard]] RowMatrix<T> forward(ConstMatrixRef<T> x) const {
    require_shapes(x.cols() == d_model(), "Mlp::forward", "X", x.rows(), x.cols(), "W_1",
                   w_1_.rows(), w_1_.cols(), "X must have d_model columns");
    RowMatrix<T> h(x.rows(), d_ff());
    w_1_.multiply(x, h);  // (N, d_ff)
    detail::add_bias(h, b_1_);
    Act::template apply<T>(h);
    RowMatrix<T> y(x.rows(), d_model());
    w_2_.multiply(h, y);  // (N, d)
    detail::add_bias(y, b_2_);
    return y;
  }

  [[nodiscard]] const WeightMatrix<T, Storage>& w_1() const { return w_1_; }
  [[nodiscard]] const WeightMatrix<T, Storage>& w_2() const { return w_2_; }
  /// Bytes of the weights (what a decode step reads).
  [[nodiscard]] std::size_t weight_bytes() const {
    return w_1_.bytes() + w_2_.bytes() +
           sizeof(T) * static_cast<std::size_t>(b_1_.size() + b_2_.size());
  }

 private:
  static Index check_size(Index n) {
    if (n < 0) throw RangeError("kappa: Mlp: size " + std::to_string(n) + " is negative");
    return n;
  }
  WeightMatrix<T, Storage> w_1_, w_2_;
  RowVector<T> b_1_, b_2_;
};

/// Gated MLP (act(X W_gate) * (X W_up)) W_down; no biases (as in LLaMA).
///
/// ```cpp
/// kappa::SwiGlu<float> ffn(4096, 14336);   // Mistral 7B
/// ffn.init_random(/*seed=*/1);             // or set_weights(w_gate, w_up, w_down)
/// ```
/// A freshly constructed GatedMlp has zero weights, so its output is zero
/// until set_weights() or init_random(seed) is called.
template <Scalar T, class Act = Silu, WeightStoragePolicy Storage = DenseWeights>
class GatedMlp {
  static_assert(Activation<Act, T>,
                "kappa: GatedMlp's activation must provide static apply(MatrixRef<T>)");

 public:
  using value_type = T;
  /// Zero weights. \throws RangeError for negative sizes.
  GatedMlp(Index d_model, Index d_ff)
      : w_gate_up_(RowMatrix<T>::Zero(check_size(d_model), 2 * check_size(d_ff))),
        w_down_(RowMatrix<T>::Zero(d_ff, d_model)) {}
  using StorageType = Storage;

  /// From W_gate, W_up (d, d_ff) and W_down (d_ff, d), d and d_ff taken
  /// from W_gate: as GatedMlp(d, d_ff) then set_weights, without first
  /// allocating zero weights (a loader's path: the zeros of one layer of a
  /// 7B LLaMA are 0.5 GB of float, written and freed per layer).
  /// \throws ShapeError naming the weight, its shape and the expected one.
  GatedMlp(const ConstMatrixRef<T>& w_gate, const ConstMatrixRef<T>& w_up, RowMatrix<T> w_down) {
    assign("GatedMlp", w_gate, w_up, std::move(w_down));
  }
  /// As above with the three matrices already in the layer's storage (W_gate
  /// and W_up kept apart, as set_weights does with stored matrices).
  GatedMlp(WeightMatrix<T, Storage> w_gate, WeightMatrix<T, Storage> w_up,
           WeightMatrix<T, Storage> w_down) {
    assign("GatedMlp", std::move(w_gate), std::move(w_up), std::move(w_down));
  }

  [[nodiscard]] Index d_model() const { return w_gate_up_.rows(); }
  [[nodiscard]] Index d_ff() const { return w_down_.rows(); }
  /// Whether W_gate and W_up are stored apart (set from stored matrices)
  /// rather than side by side.
  [[nodiscard]] bool split() const { return split_; }

  /// W_gate, W_up (d, d_ff) and W_down (d_ff, d).
  /// \throws ShapeError naming the weight, its shape and the expected one.
  void set_weights(const ConstMatrixRef<T>& w_gate, const ConstMatrixRef<T>& w_up,
                   RowMatrix<T> w_down) {
    detail::expect_ffn_shape("GatedMlp::set_weights", "W_gate", w_gate, d_model(), d_ff());
    assign("GatedMlp::set_weights", w_gate, w_up, std::move(w_down));
  }

  /// As above with the three matrices already in the layer's storage (e.g.
  /// blocks viewed in a memory-mapped GGUF file, where W_gate and W_up are
  /// two tensors): W_gate and W_up are then kept apart, two products instead
  /// of one. \throws ShapeError naming the weight, its shape and the
  /// expected one.
  void set_weights(WeightMatrix<T, Storage> w_gate, WeightMatrix<T, Storage> w_up,
                   WeightMatrix<T, Storage> w_down) {
    detail::expect_ffn_shape("GatedMlp::set_weights", "W_gate", w_gate, d_model(), d_ff());
    assign("GatedMlp::set_weights", std::move(w_gate), std::move(w_up), std::move(w_down));
  }

  /// Draws W_gate, W_up, then W_down from one SeededNormal(seed) stream: each
  /// W (fan_in x fan_out) has entries W_ij ~ U(-a, a], a = sqrt(3 / fan_in),
  /// i.e. mean 0 and variance 1 / fan_in (seeded_projection,
  /// core/random.hpp). The same seed gives the same weights on every platform.
  void init_random(std::uint64_t seed) {
    SeededNormal g(seed);
    const RowMatrix<T> w_gate = seeded_projection<T>(d_model(), d_ff(), g);
    const RowMatrix<T> w_up = seeded_projection<T>(d_model(), d_ff(), g);
    set_weights(w_gate, w_up, seeded_projection<T>(d_ff(), d_model(), g));
  }

  /// F(X) for X (N, d); returns (N, d). \throws ShapeError unless X has d columns.
  [[nodiscard]] RowMatrix<T> forward(ConstMatrixRef<T> x) const {
    require_shapes(x.cols() == d_model(), "GatedMlp::forward", "X", x.rows(), x.cols(), "W_gate",
                   d_model(), d_ff(), "X must have d_model columns");
    const Index f = d_ff();
    RowMatrix<T> gu(x.rows(), 2 * f);
    if (split_) {
      // X W_gate, X W_up: in one parallel region for a decode step
      std::array<MatrixRef<T>, 2> out{MatrixRef<T>(gu.leftCols(f)), MatrixRef<T>(gu.rightCols(f))};
      multiply_each<T>(x, std::array<const WeightMatrix<T, Storage>*, 2>{&w_gate_up_, &w_up_}, out);
    } else {
      w_gate_up_.multiply(x, gu);  // (N, 2 d_ff): [X W_gate | X W_up]
    }
    Act::template apply<T>(gu.leftCols(f));
    RowMatrix<T> h = gu.leftCols(f).cwiseProduct(gu.rightCols(f));  // (N, d_ff)
    RowMatrix<T> y(x.rows(), d_model());
    w_down_.multiply(h, y);  // (N, d)
    return y;
  }

  /// [W_gate | W_up] (d, 2 d_ff), or W_gate alone when split(); W_up when
  /// split() (else empty); W_down.
  [[nodiscard]] const WeightMatrix<T, Storage>& w_gate_up() const { return w_gate_up_; }
  [[nodiscard]] const WeightMatrix<T, Storage>& w_up_split() const { return w_up_; }
  [[nodiscard]] const WeightMatrix<T, Storage>& w_down() const { return w_down_; }
  [[nodiscard]] std::size_t weight_bytes() const {
    return w_gate_up_.bytes() + w_down_.bytes() + (split_ ? w_up_.bytes() : 0);
  }

 private:
  // W_up and W_down checked against W_gate's (d, d_ff), then all three set,
  // W_gate and W_up side by side. Nothing changes when a check throws.
  void assign(const char* what, const ConstMatrixRef<T>& w_gate, const ConstMatrixRef<T>& w_up,
              RowMatrix<T> w_down) {
    const Index d = w_gate.rows(), f = w_gate.cols();
    detail::expect_ffn_shape(what, "W_up", w_up, d, f);
    detail::expect_ffn_shape(what, "W_down", w_down, f, d);
    RowMatrix<T> gate_up(d, 2 * f);
    gate_up.leftCols(f) = w_gate;
    gate_up.rightCols(f) = w_up;
    w_gate_up_ = WeightMatrix<T, Storage>(std::move(gate_up));
    w_down_ = WeightMatrix<T, Storage>(std::move(w_down));
    w_up_ = {};
    split_ = false;
  }
  // As above with stored matrices, W_gate and W_up kept apart.
  void assign(const char* what, WeightMatrix<T, Storage> w_gate, WeightMatrix<T, Storage> w_up,
              WeightMatrix<T, Storage> w_down) {
    const Index d = w_gate.rows(), f = w_gate.cols();
    detail::expect_ffn_shape(what, "W_up", w_up, d, f);
    detail::expect_ffn_shape(what, "W_down", w_down, f, d);
    w_gate_up_ = std::move(w_gate);
    w_up_ = std::move(w_up);
    w_down_ = std::move(w_down);
    split_ = true;
  }
  static Index check_size(Index n) {
    if (n < 0) throw RangeError("kappa: GatedMlp: size " + std::to_string(n) + " is negative");
    return n;
  }
  WeightMatrix<T, Storage> w_gate_up_, w_down_;
  WeightMatrix<T, Storage> w_up_{};  // W_up when split_
  bool split_ = false;
};

/// SwiGLU: the gated MLP with SiLU (LLaMA, Mistral, Qwen2, DeepSeek-V2).
template <Scalar T, WeightStoragePolicy Storage = DenseWeights>
using SwiGlu = GatedMlp<T, Silu, Storage>;

/// A feed-forward policy: `forward(ConstMatrixRef<T>) const` returning (N, d).
template <class F, class T>
concept FeedForward = requires(const F& f, ConstMatrixRef<T> x) {
  { f.forward(x) } -> std::convertible_to<RowMatrix<T>>;
};

}  // namespace kappa
