// kappa/heads/multi_head_attention.hpp - multi-head, grouped-query and
// multi-query attention with the output projection W^O (the paper's
// section 2.2).
//
// With H query heads, H_kv key/value heads (G = H / H_kv query heads per kv
// head) and inputs X^Q (N_Q x d_in), X^K = X^V (N_KV x d_kv_in):
//
//     Q = X^Q W^Q + b_Q         W^Q = [W^Q_1 ... W^Q_H]       (d_in x H d_head)
//     K = X^K W^K + b_K         W^K = [W^K_1 ... W^K_Hkv]     (d_kv_in x H_kv d_head)
//     V = X^V W^V + b_V         W^V = [W^V_1 ... W^V_Hkv]     (d_kv_in x H_kv d_v)
//     Y_h = Z_h^-1 A_h V_g,     A_h = f_kappa(s Q_h K_g^T) masked,  g = h / G
//     Y   = [Y_1 ... Y_H] W^O + b_O                            W^O: (H d_v x d_out)
//
// Q_h is the column block h of Q (no copy), and [Y_1 ... Y_H] is one
// N_Q x (H d_v) matrix, so the output is one GEMM. A positional policy (RoPE)
// transforms Q_h and K_g by absolute position before the scores.
//
// Batches: a SequenceBatch packs B sequences of different lengths one after
// the other in one matrix (sum_b N_b rows) with their lengths, a view of the
// caller's rows. The projections are one GEMM over all rows; attention runs
// per sequence, so no sequence sees another's keys and there is no padding to
// mask: key padding is handled by construction, and each sequence's result
// equals running it alone. The (sequence, kv head) pairs are spread over
// kappa::num_threads() OpenMP threads; each is computed by one thread in a
// fixed order, so results do not depend on the thread count.
//
// Decoding: forward_cached() appends the new tokens' K and V to a KVCache and
// attends over everything cached, with the causal mask aligned to the last
// positions and the positional policy fed the absolute positions, so prefill
// then token-by-token decode equals the full causal forward pass.
//
// Weights: the Storage policy (core/weight_storage.hpp) stores W^Q, W^K,
// W^V and W^O in T (DenseWeights), bfloat16, GGUF's blocks (Q8_0Weights,
// ..., blocks along the rows of each W, the dimension X W reduces over) or
// per matrix as a file stores them (AsStoredWeights); the projections are
// WeightMatrix::multiply, the rest of the layer computes in T.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/attention/concepts.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/attention/whole_attention.hpp"
#include "kappa/cache/decode.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/random.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/core/weight_storage.hpp"
#include "kappa/heads/grouped_attention.hpp"
#include "kappa/heads/grouping.hpp"
#include "kappa/heads/head_weights.hpp"
#include "kappa/heads/positional.hpp"

namespace kappa {

namespace detail {
/// An options type no argument converts to: the PositionOptions of a
/// positional policy that is not built per head width.
struct NoPositionOptions {
  explicit NoPositionOptions(int /*unusable*/) {}
};
template <class P>
struct PositionOptionsOf {
  using type = NoPositionOptions;
};
template <HeadWidthPosition P>
struct PositionOptionsOf<P> {
  using type = typename P::Options;
};
}  // namespace detail

/// Sizes of a multi-head attention layer. Zeros mean the defaults noted.
struct HeadsConfig {
  Index d_in = 0;        ///< width of X^Q (d_model)
  Index n_heads = 1;     ///< H, query heads
  Index d_head = 0;      ///< d_QK per head; 0 means d_in / n_heads
  Index n_kv_heads = 0;  ///< H_kv; 0 means n_heads (the grouping policy checks it)
  Index d_v = 0;         ///< width of each V_h; 0 means d_head
  Index d_kv_in = 0;     ///< width of X^K = X^V; 0 means d_in
  Index d_out = 0;       ///< width of the output; 0 means d_in
};

/// B sequences of different lengths packed one after the other: sequence b is
/// rows offsets()[b] .. offsets()[b+1] - 1 of `rows` (sum_b N_b x d). A view:
/// `rows` refers to the caller's matrix, nothing is copied.
template <Scalar T>
struct SequenceBatch {
  ConstMatrixRef<T> rows;      ///< (sum_b N_b, d)
  std::vector<Index> lengths;  ///< N_b, each >= 0

  /// Prefix sums of the lengths: B + 1 entries, offsets()[0] = 0.
  /// \throws ShapeError if a length is negative or they do not sum to rows.rows()
  ///         (also when their sum would overflow: each prefix sum is checked
  ///         against rows.rows() before it is formed).
  [[nodiscard]] std::vector<Index> offsets() const {
    std::vector<Index> off(lengths.size() + 1, 0);
    for (std::size_t b = 0; b < lengths.size(); ++b) {
      if (lengths[b] < 0) {
        throw ShapeError("kappa: SequenceBatch: length " + std::to_string(lengths[b]) +
                         " of sequence " + std::to_string(b) + " is negative");
      }
      if (lengths[b] > rows.rows() - off[b]) {
        throw ShapeError("kappa: SequenceBatch: length " + std::to_string(lengths[b]) +
                         " of sequence " + std::to_string(b) + " after " + std::to_string(off[b]) +
                         " rows takes the lengths past the packed matrix " + shape_of(rows));
      }
      off[b + 1] = off[b] + lengths[b];
    }
    if (off.back() != rows.rows()) {
      throw ShapeError("kappa: SequenceBatch: the lengths sum to " + std::to_string(off.back()) +
                       " rows but the packed matrix is " + shape_of(rows));
    }
    return off;
  }
};

/// Multi-head attention with W^O; grouped-query and multi-query by the
/// grouping policy (see the file comment for the equations).
///
/// \tparam T         float or double
/// \tparam Kernel    similarity kernel f_kappa (kernels::Softmax, Linear, ...)
/// \tparam Grouping  MultiHead (H_kv = H), GroupedQuery (H_kv divides H) or
///                   MultiQuery (H_kv = 1)
/// \tparam Position  positional policy applied to Q_h and K_g (NoPosition,
///                   kappa::Rope<T> from embed/rope.hpp)
///
/// ```cpp
/// kappa::GroupedQueryAttention<float> attn({.d_in = 512, .n_heads = 8, .n_kv_heads = 2});
/// attn.set_weights(w_q, w_k, w_v, w_o);
/// kappa::RowMatrix<float> y = attn.forward(x, kappa::CausalMask{});   // (N, 512)
/// ```
/// A freshly constructed layer has zero weights, so its output is zero until
/// the weights are set (set_weights, set_weights_from_hf, ...) or drawn with
/// init_random(seed). A layer object is read-only during forward calls, so
/// several threads may call them at once.
template <Scalar T, class Kernel = kernels::Softmax, HeadGrouping Grouping = MultiHead,
          class Position = NoPosition, WeightStoragePolicy Storage = DenseWeights>
class MultiHeadAttention {
  static_assert(check_heads_kernel<Kernel>());
  static_assert(check_positional<Position, T>());

 public:
  using value_type = T;
  using KernelType = Kernel;
  using GroupingType = Grouping;
  using PositionType = Position;
  /// How W^Q, W^K, W^V and W^O are stored (core/weight_storage.hpp).
  using StorageType = Storage;

  /// The options a positional policy built per head width takes
  /// (kappa::RopeOptions for kappa::Rope); an unusable type otherwise.
  using PositionOptions = typename detail::PositionOptionsOf<Position>::type;

  /// A layer of the given sizes with zero weights and no biases. The
  /// positional policy is Position{}, or for one built per head width
  /// (HeadWidthPosition, e.g. kappa::Rope) Position::for_head(d_head): RoPE
  /// over the whole head with base 10000.
  /// \throws std::invalid_argument for non-positive sizes, d_head = 0 with
  ///         n_heads not dividing d_in, or an H_kv the grouping does not allow;
  ///         RangeError naming the values for more than kMaxHeads heads or a
  ///         product of sizes (a width such as H d_head, or a weight matrix)
  ///         above kMaxElements (core/checked.hpp).
  explicit MultiHeadAttention(HeadsConfig config,
                              Kernel kernel = {}) requires(std::default_initializable<Position> ||
                                                           HeadWidthPosition<Position>)
      : config_(resolve(config)), kernel_(std::move(kernel)), position_(default_position(config_)) {
    init();
  }

  /// A layer with the given kernel and positional policy.
  /// \throws as above; ShapeError naming both widths if the policy reports
  ///         a rotary width (WidthReportingPosition, e.g. Rope's d_R) above
  ///         d_head. A smaller one is partial rotary (GPT-NeoX's rotary_pct):
  ///         the columns past it pass unchanged.
  explicit MultiHeadAttention(HeadsConfig config, Kernel kernel, Position position)
      : config_(resolve(config)), kernel_(std::move(kernel)), position_(std::move(position)) {
    init();
  }

  /// A layer with the default kernel and the given positional policy (no
  /// placeholder kernel argument): `Attn attn(config, kappa::Rope<float>(d_r))`.
  /// \throws as the constructor above.
  explicit MultiHeadAttention(HeadsConfig config,
                              Position position) requires(!std::same_as<Position, NoPosition> &&
                                                          !std::same_as<Position, Kernel>)
      : config_(resolve(config)), kernel_{}, position_(std::move(position)) {
    init();
  }

  /// A layer whose positional policy it builds for its own head width:
  /// Position::for_head(d_head, options), e.g.
  /// `Attn attn(config, kappa::RopeOptions{.base = 500000.0})` - the rotary
  /// width is derived from HeadsConfig, not given twice.
  /// \throws as the first constructor; as Position::for_head (Rope: ShapeError
  ///         naming both widths if options.rotary_dim > d_head).
  explicit MultiHeadAttention(HeadsConfig config,
                              const PositionOptions& options) requires HeadWidthPosition<Position>
      : config_(resolve(config)),
        kernel_{},
        position_(Position::for_head(config_.d_head, options)) {
    init();
  }
  /// As above, with a kernel.
  explicit MultiHeadAttention(HeadsConfig config, Kernel kernel,
                              const PositionOptions& options) requires HeadWidthPosition<Position>
      : config_(resolve(config)),
        kernel_(std::move(kernel)),
        position_(Position::for_head(config_.d_head, options)) {
    init();
  }

  /// Draws every weight from the seed and removes the biases: W^Q, W^K, W^V,
  /// W^O in that order from one SeededNormal(seed) stream, each W (fan_in x
  /// fan_out) with entries W_ij ~ U(-a, a], a = sqrt(3 / fan_in), i.e. mean 0
  /// and variance 1 / fan_in (seeded_projection, core/random.hpp). For X
  /// with independent unit-variance entries, Q, K and V then have
  /// unit-variance entries, and so has Y for a single token (Y = X W^V W^O).
  /// The same seed gives the same weights on every platform.
  void init_random(std::uint64_t seed) {
    SeededNormal g(seed);
    const HeadsConfig& c = config_;
    w_q_ = store(seeded_projection<T>(c.d_in, c.n_heads * c.d_head, g));
    w_k_ = store(seeded_projection<T>(c.d_kv_in, c.n_kv_heads * c.d_head, g));
    w_v_ = store(seeded_projection<T>(c.d_kv_in, c.n_kv_heads * c.d_v, g));
    w_o_ = store(seeded_projection<T>(c.n_heads * c.d_v, c.d_out, g));
    b_q_.resize(0);
    b_k_.resize(0);
    b_v_.resize(0);
    b_o_.resize(0);
  }

  /// The sizes, with every default resolved.
  [[nodiscard]] const HeadsConfig& config() const { return config_; }
  [[nodiscard]] Index n_heads() const { return config_.n_heads; }
  [[nodiscard]] Index n_kv_heads() const { return config_.n_kv_heads; }
  /// G = H / H_kv: query heads per key/value head.
  [[nodiscard]] Index group_size() const { return config_.n_heads / config_.n_kv_heads; }
  [[nodiscard]] Index d_head() const { return config_.d_head; }
  [[nodiscard]] Index d_v() const { return config_.d_v; }
  [[nodiscard]] const Kernel& kernel() const { return kernel_; }
  [[nodiscard]] const Position& position() const { return position_; }
  /// The shape of the KV cache this layer decodes with.
  [[nodiscard]] KVCacheConfig kv_cache_config() const {
    return {config_.n_kv_heads, config_.d_head, config_.d_v};
  }

  /// W^Q (d_in x H d_head), W^K (d_kv_in x H_kv d_head), W^V (d_kv_in x
  /// H_kv d_v), W^O (H d_v x d_out) in T, and the biases (size 0 when
  /// absent). With DenseWeights a reference to the weights; with another
  /// storage a copy widened to T (w_q_stored() etc. give the stored matrix).
  [[nodiscard]] decltype(auto) w_q() const { return w_q_.dense(); }
  [[nodiscard]] decltype(auto) w_k() const { return w_k_.dense(); }
  [[nodiscard]] decltype(auto) w_v() const { return w_v_.dense(); }
  [[nodiscard]] decltype(auto) w_o() const { return w_o_.dense(); }
  /// The stored W^Q, W^K, W^V, W^O.
  [[nodiscard]] const WeightMatrix<T, Storage>& w_q_stored() const { return w_q_; }
  [[nodiscard]] const WeightMatrix<T, Storage>& w_k_stored() const { return w_k_; }
  [[nodiscard]] const WeightMatrix<T, Storage>& w_v_stored() const { return w_v_; }
  [[nodiscard]] const WeightMatrix<T, Storage>& w_o_stored() const { return w_o_; }
  /// The bytes of W^Q, W^K, W^V and W^O as stored (biases not counted).
  [[nodiscard]] std::size_t weight_bytes() const {
    return w_q_.bytes() + w_k_.bytes() + w_v_.bytes() + w_o_.bytes();
  }
  [[nodiscard]] const RowVector<T>& b_q() const { return b_q_; }
  [[nodiscard]] const RowVector<T>& b_k() const { return b_k_; }
  [[nodiscard]] const RowVector<T>& b_v() const { return b_v_; }
  [[nodiscard]] const RowVector<T>& b_o() const { return b_o_; }

  /// Sets W^Q, W^K, W^V, W^O in the paper's convention (Q = X W^Q, head h is
  /// column block h). Shapes: W^Q d_in x (H d_head), W^K d_kv_in x
  /// (H_kv d_head), W^V d_kv_in x (H_kv d_v), W^O (H d_v) x d_out.
  /// \throws ShapeError naming the actual and the expected shape.
  void set_weights(ConstMatrixRef<T> w_q, ConstMatrixRef<T> w_k, ConstMatrixRef<T> w_v,
                   ConstMatrixRef<T> w_o) {
    constexpr const char* what = "MultiHeadAttention::set_weights";
    const HeadsConfig& c = config_;
    expect_shape(what, "w_q", w_q, c.d_in, c.n_heads * c.d_head, "W^Q is d_in x (n_heads d_head)");
    expect_shape(what, "w_k", w_k, c.d_kv_in, c.n_kv_heads * c.d_head,
                 "W^K is d_kv_in x (n_kv_heads d_head)");
    expect_shape(what, "w_v", w_v, c.d_kv_in, c.n_kv_heads * c.d_v,
                 "W^V is d_kv_in x (n_kv_heads d_v)");
    expect_shape(what, "w_o", w_o, c.n_heads * c.d_v, c.d_out, "W^O is (n_heads d_v) x d_out");
    w_q_ = store(RowMatrix<T>(w_q));
    w_k_ = store(RowMatrix<T>(w_k));
    w_v_ = store(RowMatrix<T>(w_v));
    w_o_ = store(RowMatrix<T>(w_o));
  }

  /// Sets W^Q, W^K, W^V, W^O already in the layer's storage (e.g. blocks
  /// viewed in a memory-mapped GGUF file), shaped as set_weights() above
  /// says. \throws ShapeError naming the actual and the expected shape.
  void set_weights(WeightMatrix<T, Storage> w_q, WeightMatrix<T, Storage> w_k,
                   WeightMatrix<T, Storage> w_v, WeightMatrix<T, Storage> w_o) {
    constexpr const char* what = "MultiHeadAttention::set_weights";
    const HeadsConfig& c = config_;
    expect_stored(what, "w_q", w_q, c.d_in, c.n_heads * c.d_head, "W^Q is d_in x (n_heads d_head)");
    expect_stored(what, "w_k", w_k, c.d_kv_in, c.n_kv_heads * c.d_head,
                  "W^K is d_kv_in x (n_kv_heads d_head)");
    expect_stored(what, "w_v", w_v, c.d_kv_in, c.n_kv_heads * c.d_v,
                  "W^V is d_kv_in x (n_kv_heads d_v)");
    expect_stored(what, "w_o", w_o, c.n_heads * c.d_v, c.d_out, "W^O is (n_heads d_v) x d_out");
    w_q_ = std::move(w_q);
    w_k_ = std::move(w_k);
    w_v_ = std::move(w_v);
    w_o_ = std::move(w_o);
  }

  /// Sets the biases b_Q (H d_head), b_K (H_kv d_head), b_V (H_kv d_v),
  /// b_O (d_out), added to every row. An empty vector means no bias.
  /// \throws ShapeError naming the actual and the expected length.
  void set_biases(const RowVector<T>& b_q, const RowVector<T>& b_k, const RowVector<T>& b_v,
                  const RowVector<T>& b_o) {
    constexpr const char* what = "MultiHeadAttention::set_biases";
    const HeadsConfig& c = config_;
    expect_bias(what, "b_q", b_q, c.n_heads * c.d_head);
    expect_bias(what, "b_k", b_k, c.n_kv_heads * c.d_head);
    expect_bias(what, "b_v", b_v, c.n_kv_heads * c.d_v);
    expect_bias(what, "b_o", b_o, c.d_out);
    b_q_ = b_q;
    b_k_ = b_k;
    b_v_ = b_v;
    b_o_ = b_o;
  }

  /// Sets the weights from PyTorch's nn.MultiheadAttention (embed_dim E =
  /// d_in = d_out = H d_head, kdim = vdim = E): `in_proj_weight` is
  /// [W_q; W_k; W_v] (3E x E) applied as x W^T, so W^Q = W_q^T etc.;
  /// `out_proj_weight` (E x E) gives W^O = out_proj.weight^T. PyTorch splits
  /// the embedding into heads in contiguous blocks, as kappa does.
  /// \throws ShapeError naming the actual and the expected shape (also when
  ///         this layer is not shaped like an nn.MultiheadAttention).
  void set_weights_from_torch_mha(ConstMatrixRef<T> in_proj_weight,
                                  ConstMatrixRef<T> out_proj_weight) {
    constexpr const char* what = "MultiHeadAttention::set_weights_from_torch_mha";
    const Index e = config_.n_heads * config_.d_head;
    require_torch_shape(what);
    expect_shape(what, "in_proj_weight", in_proj_weight, 3 * e, e,
                 "[W_q; W_k; W_v], each embed_dim x embed_dim");
    expect_shape(what, "out_proj.weight", out_proj_weight, e, e, "embed_dim x embed_dim");
    w_q_ = store(in_proj_weight.topRows(e).transpose());
    w_k_ = store(in_proj_weight.middleRows(e, e).transpose());
    w_v_ = store(in_proj_weight.bottomRows(e).transpose());
    w_o_ = store(out_proj_weight.transpose());
  }

  /// Sets the biases from nn.MultiheadAttention: `in_proj_bias` (3E) is
  /// [b_q; b_k; b_v]; `out_proj_bias` (E) is b_O.
  /// \throws ShapeError naming the actual and the expected length.
  void set_biases_from_torch_mha(const RowVector<T>& in_proj_bias,
                                 const RowVector<T>& out_proj_bias) {
    constexpr const char* what = "MultiHeadAttention::set_biases_from_torch_mha";
    const Index e = config_.n_heads * config_.d_head;
    require_torch_shape(what);
    expect_bias(what, "in_proj_bias", in_proj_bias, 3 * e);
    expect_bias(what, "out_proj.bias", out_proj_bias, e);
    if (in_proj_bias.size() == 0) {
      b_q_.resize(0);
      b_k_.resize(0);
      b_v_.resize(0);
    } else {
      b_q_ = in_proj_bias.segment(0, e);
      b_k_ = in_proj_bias.segment(e, e);
      b_v_ = in_proj_bias.segment(2 * e, e);
    }
    b_o_ = out_proj_bias;
  }

  /// Sets the weights from Hugging Face LLaMA-style projections (nn.Linear,
  /// weight is out_features x in_features, applied as x W^T): q_proj
  /// (H d_head x d_in), k_proj (H_kv d_head x d_kv_in), v_proj (H_kv d_v x
  /// d_kv_in), o_proj (d_out x H d_v). Head h is rows h d_head .. of q_proj,
  /// as in HF's view(N, H, d_head). (RoPE conventions - HF's rotate_half pairs
  /// dimension i with i + d_head / 2 - are the positional policy's concern.)
  /// \throws ShapeError naming the actual and the expected shape.
  void set_weights_from_hf(ConstMatrixRef<T> q_proj, ConstMatrixRef<T> k_proj,
                           ConstMatrixRef<T> v_proj, ConstMatrixRef<T> o_proj) {
    constexpr const char* what = "MultiHeadAttention::set_weights_from_hf";
    const HeadsConfig& c = config_;
    expect_shape(what, "q_proj.weight", q_proj, c.n_heads * c.d_head, c.d_in,
                 "nn.Linear weight: (n_heads d_head) x d_in");
    expect_shape(what, "k_proj.weight", k_proj, c.n_kv_heads * c.d_head, c.d_kv_in,
                 "nn.Linear weight: (n_kv_heads d_head) x d_kv_in");
    expect_shape(what, "v_proj.weight", v_proj, c.n_kv_heads * c.d_v, c.d_kv_in,
                 "nn.Linear weight: (n_kv_heads d_v) x d_kv_in");
    expect_shape(what, "o_proj.weight", o_proj, c.d_out, c.n_heads * c.d_v,
                 "nn.Linear weight: d_out x (n_heads d_v)");
    w_q_ = store(q_proj.transpose());
    w_k_ = store(k_proj.transpose());
    w_v_ = store(v_proj.transpose());
    w_o_ = store(o_proj.transpose());
  }

  /// Self-attention of one sequence: X^Q = X^K = X^V = x (N x d_in), each
  /// head masked by `mask` bound to (N, N); returns Y (N x d_out).
  /// \throws ShapeError if x is not N x d_in (or d_kv_in != d_in).
  template <class M = NoMask>
  RowMatrix<T> forward(ConstMatrixRef<T> x, const M& mask = {}) const {
    static_assert(check_head_mask<M>());
    require_self_attention("MultiHeadAttention::forward");
    const std::vector<Index> off{0, x.rows()};
    return run(x, off, x, off, mask);
  }

  /// Cross-attention: queries from xq (N_Q x d_in), keys and values from xkv
  /// (N_KV x d_kv_in), as in the original decoder; mask bound to (N_Q, N_KV).
  /// Returns Y (N_Q x d_out).
  template <class M = NoMask>
  RowMatrix<T> forward_cross(ConstMatrixRef<T> xq, ConstMatrixRef<T> xkv,
                             const M& mask = {}) const {
    static_assert(check_head_mask<M>());
    const std::vector<Index> q_off{0, xq.rows()}, kv_off{0, xkv.rows()};
    return run(xq, q_off, xkv, kv_off, mask);
  }

  /// Self-attention of a batch of B packed sequences (see SequenceBatch):
  /// sequence b attends only to itself, `mask` bound to (N_b, N_b) per
  /// sequence. Returns the packed outputs (sum_b N_b x d_out), row for row
  /// equal to forward() of each sequence alone.
  template <class M = NoMask>
  RowMatrix<T> forward(const SequenceBatch<T>& x, const M& mask = {}) const {
    static_assert(check_head_mask<M>());
    require_self_attention("MultiHeadAttention::forward");
    const std::vector<Index> off = x.offsets();
    return run(x.rows, off, x.rows, off, mask);
  }

  /// Cross-attention of B sequence pairs: queries of sequence b from xq's
  /// sequence b, keys and values from xkv's sequence b; `mask` bound to
  /// (N_Q_b, N_KV_b). Returns the packed outputs (sum_b N_Q_b x d_out).
  /// \throws ShapeError if the batches differ in B.
  template <class M = NoMask>
  RowMatrix<T> forward_cross(const SequenceBatch<T>& xq, const SequenceBatch<T>& xkv,
                             const M& mask = {}) const {
    static_assert(check_head_mask<M>());
    if (xq.lengths.size() != xkv.lengths.size()) {
      throw ShapeError(
          "kappa: MultiHeadAttention::forward_cross: " + std::to_string(xq.lengths.size()) +
          " query sequences but " + std::to_string(xkv.lengths.size()) + " key/value sequences");
    }
    return run(xq.rows, xq.offsets(), xkv.rows, xkv.offsets(), mask);
  }

  /// Causal self-attention of n new tokens x (n x d_in) that continue the
  /// sequence held by `cache`: their K and V are appended to the cache, and
  /// token i (absolute position t + i, t = cache.length() before the call)
  /// attends to every cached position <= t + i - or, for a SlidingWindow
  /// cache of window W, to positions t + i - W + 1 .. t + i. The positional
  /// policy sees the absolute positions. Prefill is one call with the prompt,
  /// decoding one call per token; the concatenated outputs equal
  /// forward(whole sequence, CausalMask{}) (or SlidingWindowMask{W}).
  /// Returns Y (n x d_out).
  /// \throws ShapeError if x or the cache's shape do not fit this layer;
  ///         RangeError when a FixedCapacity cache would overflow (the cache
  ///         is then unchanged).
  template <cache::RetentionPolicy R, cache::StorageFormat F>
  RowMatrix<T> forward_cached(ConstMatrixRef<T> x, KVCache<T, R, F>& cache) const {
    return forward_cached(x, cache, NoMask{});
  }

  /// forward_cached() with an additive score bias (or any further mask-like
  /// policy) on top of the causal mask: AlibiBias / Alibi(n_heads),
  /// T5RelativeBias, HeadScoreBias... The bias is bound to (n, t + n) with the
  /// default offset, so query row i is position t + i and key row j position
  /// j, as in forward(whole sequence, all_of(CausalMask{}, bias)), which the
  /// concatenated outputs equal. A per-head bias in a stored-format cache
  /// attends head by head (each head reads its group's K and V). Growable
  /// and FixedCapacity caches only: a SlidingWindow ring does not hold keys
  /// in position order.
  template <class B, cache::RetentionPolicy R, cache::StorageFormat F>
  RowMatrix<T> forward_cached(ConstMatrixRef<T> x, KVCache<T, R, F>& cache, const B& bias) const {
    static_assert(std::same_as<B, NoMask> || !R::kWindowed,
                  "kappa: forward_cached() with a score bias needs a Growable or FixedCapacity "
                  "cache (a SlidingWindow ring does not keep its keys in position order)");
    static_assert(!AttentionApproximation<Kernel> || dependent_false<R>,
                  "kappa: forward_cached() is not available with an attention approximation "
                  "(approx::Nystrom, SequenceSketch, SampledAttention) in the Kernel slot: they "
                  "approximate attention over a whole sequence; call forward() instead");
    require_self_attention("MultiHeadAttention::forward_cached");
    check_input("MultiHeadAttention::forward_cached", "x", x, config_.d_in, "d_in");
    check_cache("MultiHeadAttention::forward_cached", cache);
    const Index n = x.rows(), t0 = cache.length();
    if (n == 0) return RowMatrix<T>(0, config_.d_out);  // no new tokens: the cache is unchanged
    const Index h_kv = config_.n_kv_heads, dh = config_.d_head, dv = config_.d_v;
    RowMatrix<T> q, k, v;
    project_qkv(x, q, k, v);  // (n, H d_head), (n, H_kv d_head), (n, H_kv d_v)
    apply_position(ProjectionRole::kQuery, q, config_.n_heads, 0, n, t0);
    apply_position(ProjectionRole::kKey, k, h_kv, 0, n, t0);
    RowMatrix<T> y(n, config_.n_heads * dv);  // (n, H d_v)
    const std::vector<Index> q_off{0, n};
    if constexpr (!std::same_as<B, NoMask>) {
      const auto mask = all_of(CausalMask{}, bias);
      detail::check_heads_mask(mask, config_.n_heads, n, t0 + n);  // before the cache changes
      cache.append(k, v);
      attend_cache(q, cache, y, mask);
    } else if constexpr (!R::kWindowed) {
      cache.append(k, v);
      attend_cache(q, cache, y, CausalMask{});
    } else {
      const Index w = cache.store().retention().window;
      if (t0 + n <= w) {
        // No wrap yet: the ring holds positions 0 .. t0 + n - 1 in order, all
        // inside every query's window.
        cache.append(k, v);
        attend_cache(q, cache, y, CausalMask{});
      } else if (n == 1) {
        // The ring holds exactly the window of the new token (in ring order,
        // which attention does not care about).
        cache.append(k, v);
        attend_cache(q, cache, y, NoMask{});
      } else {
        // A chunk of n > 1 tokens after wrapping: its first tokens need keys
        // the chunk itself evicts, so gather the last W - 1 cached tokens in
        // position order in front of the new ones.
        const Index old = std::min(t0, w - 1);
        std::vector<RowMatrix<T>> kk(static_cast<std::size_t>(h_kv)), vv(kk.size());
        for (Index g = 0; g < h_kv; ++g) {
          RowMatrix<T>& kg = kk[static_cast<std::size_t>(g)];
          RowMatrix<T>& vg = vv[static_cast<std::size_t>(g)];
          kg.resize(old + n, dh);  // (old + n, d_head)
          vg.resize(old + n, dv);  // (old + n, d_v)
          cache.copy_keys(g, t0 - old, old, kg.topRows(old));
          cache.copy_values(g, t0 - old, old, vg.topRows(old));
          kg.bottomRows(n) = k.middleCols(g * dh, dh);
          vg.bottomRows(n) = v.middleCols(g * dv, dv);
        }
        cache.append(k, v);
        const auto gathered = [&kk, &vv](Index /*b*/, Index g) {
          return std::pair<ConstMatrixRef<T>, ConstMatrixRef<T>>(kk[static_cast<std::size_t>(g)],
                                                                 vv[static_cast<std::size_t>(g)]);
        };
        attend_all(q, q_off, gathered, y, SlidingWindowMask{w});
      }
    }
    RowMatrix<T> out;
    project(y, w_o_, b_o_, out);  // (n, d_out)
    return out;
  }

  /// forward_cached() for B independent sequences in one call, as in serving
  /// several requests at once: the new tokens of sequence b are sequence b of
  /// `x` (any count, 0 included) and continue the sequence held by
  /// *caches[b]. One projection GEMM covers every row; the (sequence, kv
  /// head) attention tasks spread over the threads. Row for row equal to
  /// forward_cached(x_b, *caches[b]). Returns the packed outputs.
  /// \throws ShapeError if caches.size() differs from the number of
  ///         sequences, a cache is null, repeated or of another shape;
  ///         RangeError if a FixedCapacity cache would overflow (then no
  ///         cache changes).
  template <cache::RetentionPolicy R, cache::StorageFormat F>
  RowMatrix<T> forward_cached(const SequenceBatch<T>& x,
                              const std::vector<KVCache<T, R, F>*>& caches) const {
    static_assert(!AttentionApproximation<Kernel> || dependent_false<R>,
                  "kappa: forward_cached() is not available with an attention approximation "
                  "(approx::Nystrom, SequenceSketch, SampledAttention) in the Kernel slot: they "
                  "approximate attention over a whole sequence; call forward() instead");
    constexpr const char* what = "MultiHeadAttention::forward_cached (batch)";
    require_self_attention(what);
    check_input(what, "x", x.rows, config_.d_in, "d_in");
    const std::vector<Index> off = x.offsets();
    const std::size_t n_seq = off.size() - 1;
    if (caches.size() != n_seq) {
      throw ShapeError(std::string("kappa: ") + what + ": " + std::to_string(n_seq) +
                       " sequences but " + std::to_string(caches.size()) + " caches");
    }
    std::vector<const void*> seen;
    for (const KVCache<T, R, F>* c : caches) {
      if (c == nullptr) throw ShapeError(std::string("kappa: ") + what + ": a cache is null");
      check_cache(what, *c);
      seen.push_back(c);
    }
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
      throw ShapeError(std::string("kappa: ") + what + ": the same cache is given twice");
    }
    if constexpr (R::kWindowed || !std::same_as<F, cache::Native>) {
      // The ring needs the per-sequence chunk logic, a stored format the
      // decode kernel: run the sequences one by one (each still spreads its
      // work over the threads).
      RowMatrix<T> out(x.rows.rows(), config_.d_out);
      for (std::size_t b = 0; b < n_seq; ++b) {
        out.middleRows(off[b], off[b + 1] - off[b]) =
            forward_cached(x.rows.middleRows(off[b], off[b + 1] - off[b]), *caches[b]);
      }
      return out;
    } else {
      if constexpr (std::same_as<R, cache::FixedCapacity>) {
        for (std::size_t b = 0; b < n_seq; ++b) {
          const KVCache<T, R, F>& c = *caches[b];
          if (c.length() + (off[b + 1] - off[b]) > c.capacity()) {
            throw RangeError("kappa: cache: appending " + std::to_string(off[b + 1] - off[b]) +
                             " tokens to " + std::to_string(c.length()) +
                             " would exceed the fixed capacity of " + std::to_string(c.capacity()) +
                             " tokens (sequence " + std::to_string(b) + ")");
          }
        }
      }
      RowMatrix<T> q, k, v;
      project_qkv(x.rows, q, k, v);  // (sum N_b, H d_head), (.., H_kv d_head), (.., H_kv d_v)
      for (std::size_t b = 0; b < n_seq; ++b) {
        const Index n = off[b + 1] - off[b], t0 = caches[b]->length();
        apply_position(ProjectionRole::kQuery, q, config_.n_heads, off[b], n, t0);
        apply_position(ProjectionRole::kKey, k, config_.n_kv_heads, off[b], n, t0);
      }
      for (std::size_t b = 0; b < n_seq; ++b) {
        const Index n = off[b + 1] - off[b];
        caches[b]->append(k.middleRows(off[b], n), v.middleRows(off[b], n));
      }
      RowMatrix<T> y(q.rows(), config_.n_heads * config_.d_v);  // (sum N_b, H d_v)
      const auto from_caches = [&caches](Index b, Index g) {
        const KVCache<T, R, F>& c = *caches[static_cast<std::size_t>(b)];
        return std::pair<ConstMatrixRef<T>, ConstMatrixRef<T>>(c.keys(g), c.values(g));
      };
      attend_all(q, off, from_caches, y, CausalMask{});
      RowMatrix<T> out;
      project(y, w_o_, b_o_, out);  // (sum N_b, d_out)
      return out;
    }
  }

  /// The attention weights Z_h^-1 A_h of every head h (N_Q x N_KV each), for
  /// queries xq and keys xkv (pass x twice for self-attention). Allocates
  /// H N_Q N_KV: for inspection, not speed. Indexing the result with a head
  /// outside [0, H) throws RangeError (HeadWeights).
  template <class M = NoMask>
  HeadWeights<T> head_weights(ConstMatrixRef<T> xq, ConstMatrixRef<T> xkv,
                              const M& mask = {}) const {
    static_assert(check_head_mask<M>());
    static_assert(!AttentionApproximation<Kernel> || dependent_false<M>,
                  "kappa: head_weights() needs the weights Z^-1 A, which an attention "
                  "approximation (approx::Nystrom, ...) does not form");
    check_input("MultiHeadAttention::head_weights", "X^Q", xq, config_.d_in, "d_in");
    check_input("MultiHeadAttention::head_weights", "X^K", xkv, config_.d_kv_in, "d_kv_in");
    RowMatrix<T> q, k, v;
    project(xq, w_q_, b_q_, q);
    project(xkv, w_k_, b_k_, k);
    project(xkv, w_v_, b_v_, v);
    apply_position(ProjectionRole::kQuery, q, config_.n_heads, 0, q.rows(), 0);
    apply_position(ProjectionRole::kKey, k, config_.n_kv_heads, 0, k.rows(), 0);
    const Index dh = config_.d_head, dv = config_.d_v, grp = group_size();
    std::vector<RowMatrix<T>> weights;
    for (Index h = 0; h < config_.n_heads; ++h) {
      const Index g = h / grp;
      auto d = attention_details(q.middleCols(h * dh, dh), k.middleCols(g * dh, dh),
                                 v.middleCols(g * dv, dv), kernel_, detail::head_of(mask, h));
      weights.push_back(std::move(d.weights));
    }
    return HeadWeights<T>(std::move(weights));
  }

 private:
  static Position default_position(const HeadsConfig& c) {
    if constexpr (HeadWidthPosition<Position>) {
      return Position::for_head(c.d_head, PositionOptions{});
    } else {
      return Position{};
    }
  }

  /// Checks the positional policy's width and allocates the zero weights.
  void init() {
    if constexpr (WidthReportingPosition<Position>) {
      const Index d_r = static_cast<Index>(position_.rotary_dim());
      if (d_r > config_.d_head) {
        throw ShapeError("kappa: MultiHeadAttention: the positional policy rotates d_R = " +
                         std::to_string(d_r) + " columns per head but the heads are d_head = " +
                         std::to_string(config_.d_head) +
                         " wide (HeadsConfig::d_head); d_R must be at most d_head. Build it for "
                         "d_head, or pass its options (kappa::RopeOptions) and let the layer "
                         "build it");
      }
    }
    w_q_ = zero_weights(config_.d_in, config_.n_heads * config_.d_head);
    w_k_ = zero_weights(config_.d_kv_in, config_.n_kv_heads * config_.d_head);
    w_v_ = zero_weights(config_.d_kv_in, config_.n_kv_heads * config_.d_v);
    w_o_ = zero_weights(config_.n_heads * config_.d_v, config_.d_out);
  }
  /// W = 0 in the layer's storage: in untouched zero pages where the storage
  /// has them (WeightMatrix::zeros), so the placeholders a loader replaces at
  /// once cost nothing (they took most of a GGUF load's time); else W = 0
  /// stored as store() stores it.
  static WeightMatrix<T, Storage> zero_weights(Index rows, Index cols) {
    if constexpr (requires { WeightMatrix<T, Storage>::zeros(rows, cols); })
      return WeightMatrix<T, Storage>::zeros(rows, cols);
    else
      return store(RowMatrix<T>::Zero(rows, cols));
  }

  static HeadsConfig resolve(HeadsConfig c) {
    if (c.d_in < 1 || c.n_heads < 1) {
      throw std::invalid_argument("kappa: MultiHeadAttention: d_in and n_heads must be >= 1, got " +
                                  std::to_string(c.d_in) + " and " + std::to_string(c.n_heads));
    }
    if (c.d_head == 0) {
      if (c.d_in % c.n_heads != 0) {
        throw std::invalid_argument(
            "kappa: MultiHeadAttention: d_head = 0 means d_in / n_heads, "
            "but n_heads = " +
            std::to_string(c.n_heads) + " does not divide d_in = " + std::to_string(c.d_in));
      }
      c.d_head = c.d_in / c.n_heads;
    }
    if (c.d_head < 0 || c.d_v < 0 || c.d_kv_in < 0 || c.d_out < 0 || c.n_kv_heads < 0) {
      throw std::invalid_argument("kappa: MultiHeadAttention: sizes must not be negative");
    }
    require_head_count("MultiHeadAttention: n_heads", c.n_heads);
    c.n_kv_heads = Grouping::kv_heads(c.n_heads, c.n_kv_heads);
    if (c.d_v == 0) c.d_v = c.d_head;
    if (c.d_kv_in == 0) c.d_kv_in = c.d_in;
    if (c.d_out == 0) c.d_out = c.d_in;
    // Every width and weight matrix the layer forms, checked once here so that
    // no later product of sizes can overflow.
    const Index qk =
        checked_mul("MultiHeadAttention: W^Q columns, n_heads x d_head", c.n_heads, c.d_head);
    const Index kk =
        checked_mul("MultiHeadAttention: W^K columns, n_kv_heads x d_head", c.n_kv_heads, c.d_head);
    const Index kv =
        checked_mul("MultiHeadAttention: W^V columns, n_kv_heads x d_v", c.n_kv_heads, c.d_v);
    const Index hv = checked_mul("MultiHeadAttention: W^O rows, n_heads x d_v", c.n_heads, c.d_v);
    (void)checked_mul("MultiHeadAttention: W^Q, d_in x (n_heads d_head)", c.d_in, qk);
    (void)checked_mul("MultiHeadAttention: W^K, d_kv_in x (n_kv_heads d_head)", c.d_kv_in, kk);
    (void)checked_mul("MultiHeadAttention: W^V, d_kv_in x (n_kv_heads d_v)", c.d_kv_in, kv);
    (void)checked_mul("MultiHeadAttention: W^O, (n_heads d_v) x d_out", hv, c.d_out);
    return c;
  }

  static void expect_shape(const char* what, const char* name, const ConstMatrixRef<T>& m,
                           Index rows, Index cols, const char* rule) {
    require_shapes(m.rows() == rows && m.cols() == cols, what, name, m.rows(), m.cols(),
                   "the expected shape", rows, cols, rule);
  }
  static void expect_stored(const char* what, const char* name, const WeightMatrix<T, Storage>& m,
                            Index rows, Index cols, const char* rule) {
    require_shapes(m.rows() == rows && m.cols() == cols, what, name, m.rows(), m.cols(),
                   "the expected shape", rows, cols, rule);
  }
  /// W (in T) in the layer's storage: as it is for DenseWeights; rounded to
  /// bfloat16, or quantized in blocks along W's rows (what X W reduces over).
  static WeightMatrix<T, Storage> store(RowMatrix<T> w) {
    if constexpr (std::is_constructible_v<WeightMatrix<T, Storage>, RowMatrix<T>, BlocksAlong>)
      return WeightMatrix<T, Storage>(std::move(w), BlocksAlong::kRows);
    else
      return WeightMatrix<T, Storage>(std::move(w));
  }
  static void expect_bias(const char* what, const char* name, const RowVector<T>& b, Index n) {
    require_shapes(b.size() == 0 || b.size() == n, what, name, 1, b.size(), "the expected shape", 1,
                   n, "a bias is one row, or empty for none");
  }
  static void check_input(const char* what, const char* name, const ConstMatrixRef<T>& x,
                          Index cols, const char* width_name) {
    if (x.cols() == cols) return;
    throw ShapeError(std::string("kappa: ") + what + ": " + name + " is " + shape_of(x) +
                     " but the layer expects " + std::to_string(cols) + " columns (" + width_name +
                     ")");
  }
  template <cache::RetentionPolicy R, cache::StorageFormat F>
  void check_cache(const char* what, const KVCache<T, R, F>& cache) const {
    const KVCacheConfig& cc = cache.config();
    if (cc.n_kv_heads != config_.n_kv_heads || cc.d_head != config_.d_head ||
        cc.value_width() != config_.d_v) {
      throw ShapeError(std::string("kappa: ") + what + ": the cache holds " +
                       std::to_string(cc.n_kv_heads) + " kv heads of d_head " +
                       std::to_string(cc.d_head) + ", d_v " + std::to_string(cc.value_width()) +
                       " but the layer has " + std::to_string(config_.n_kv_heads) +
                       " kv heads of d_head " + std::to_string(config_.d_head) + ", d_v " +
                       std::to_string(config_.d_v));
    }
  }
  void require_self_attention(const char* what) const {
    if (config_.d_kv_in != config_.d_in) {
      throw ShapeError(std::string("kappa: ") + what + ": self-attention needs d_kv_in = d_in, " +
                       "the layer has d_in = " + std::to_string(config_.d_in) + " and d_kv_in = " +
                       std::to_string(config_.d_kv_in) + " (use forward_cross)");
    }
  }
  void require_torch_shape(const char* what) const {
    const HeadsConfig& c = config_;
    const Index e = c.n_heads * c.d_head;
    if (c.n_kv_heads != c.n_heads || c.d_v != c.d_head || c.d_in != e || c.d_kv_in != e ||
        c.d_out != e) {
      throw ShapeError(std::string("kappa: ") + what + ": nn.MultiheadAttention has " +
                       "n_kv_heads = n_heads, d_v = d_head and d_in = d_kv_in = d_out = n_heads " +
                       "d_head; this layer is not shaped so");
    }
  }

  /// out = x W + b.
  static void project(const ConstMatrixRef<T>& x, const WeightMatrix<T, Storage>& w,
                      const RowVector<T>& b, RowMatrix<T>& out) {
    out.resize(x.rows(), w.cols());
    w.multiply(x, out);  // (N, width); decode rows split over the threads
    if (b.size() != 0) out.rowwise() += b;
  }
  /// Q = X W^Q + b^Q, K = X W^K + b^K, V = X W^V + b^V from one X (self
  /// attention): a decode step runs the three products in one parallel
  /// region, X quantized once for block formats (multiply_each); the values
  /// are project()'s, bit for bit.
  void project_qkv(const ConstMatrixRef<T>& x, RowMatrix<T>& q, RowMatrix<T>& k,
                   RowMatrix<T>& v) const {
    q.resize(x.rows(), w_q_.cols());
    k.resize(x.rows(), w_k_.cols());
    v.resize(x.rows(), w_v_.cols());
    std::array<MatrixRef<T>, 3> out{MatrixRef<T>(q), MatrixRef<T>(k), MatrixRef<T>(v)};
    multiply_each<T>(x, std::array<const WeightMatrix<T, Storage>*, 3>{&w_q_, &w_k_, &w_v_}, out);
    if (b_q_.size() != 0) q.rowwise() += b_q_;
    if (b_k_.size() != 0) k.rowwise() += b_k_;
    if (b_v_.size() != 0) v.rowwise() += b_v_;
  }

  /// Applies the positional policy to rows [row0, row0 + rows) of every head
  /// block of m (heads blocks of d_head columns), the first at `first_position`.
  void apply_position(ProjectionRole role, RowMatrix<T>& m, Index heads, Index row0, Index rows,
                      Index first_position) const {
    if constexpr (!std::same_as<Position, NoPosition>) {
      if (rows == 0) return;  // an empty sequence: no block to take (m may have no storage)
      const Index dh = config_.d_head;
      for (Index h = 0; h < heads; ++h) {
        MatrixRef<T> block(m.block(row0, h * dh, rows, dh));
        apply_positional<T>(position_, block, first_position, role);
      }
    }
  }

  /// Attention of the n queries q (n x H d_head) over everything `cache`
  /// stores, into y (n x H d_v); `mask` bound to (n, stored()). A stored
  /// format (BF16, F16, Int8) goes through the decode kernel; so does a
  /// float cache for a few rows per kv head where the kernel's register
  /// loops are compiled in (detail::native_cache_decodable); otherwise a
  /// Native cache goes through attend_all.
  template <class M, cache::RetentionPolicy R, cache::StorageFormat F>
  void attend_cache(const RowMatrix<T>& q, const KVCache<T, R, F>& cache, RowMatrix<T>& y,
                    const M& mask) const {
    if constexpr (std::same_as<F, cache::Native>) {
      if constexpr (detail::native_cache_decodable<T, Kernel, M>()) {
        if (q.rows() * group_size() <= kDecodeRows) {
          detail::decode_cache_heads<T>(ConstMatrixRef<T>(q), cache, MatrixRef<T>(y),
                                        config_.n_heads, kernel_, mask);
          return;
        }
      }
      const std::vector<Index> q_off{0, q.rows()};
      const auto from_cache = [&cache](Index /*b*/, Index g) {
        return std::pair<ConstMatrixRef<T>, ConstMatrixRef<T>>(cache.keys(g), cache.values(g));
      };
      attend_all(q, q_off, from_cache, y, mask);
    } else {
      static_assert(ScoreKernel<Kernel>,
                    "kappa: a cache in a stored format (BF16, F16, Int8) needs a score kernel");
      detail::decode_cache_heads<T>(ConstMatrixRef<T>(q), cache, MatrixRef<T>(y), config_.n_heads,
                                    kernel_, mask);
    }
  }

  /// Runs attention for every (sequence, kv head) pair (see
  /// grouped_attention.hpp): sequence b is rows q_off[b] .. q_off[b+1] - 1.
  template <class M, class KV>
  void attend_all(const RowMatrix<T>& q, const std::vector<Index>& q_off, const KV& kv,
                  RowMatrix<T>& y, const M& mask) const {
    detail::grouped_attention_tasks<T>(ConstMatrixRef<T>(q), q_off, kv, MatrixRef<T>(y),
                                       config_.n_heads, config_.n_kv_heads, kernel_, mask);
  }

  /// The shared body of forward / forward_cross.
  template <class M>
  RowMatrix<T> run(ConstMatrixRef<T> xq, const std::vector<Index>& q_off, ConstMatrixRef<T> xkv,
                   const std::vector<Index>& kv_off, const M& mask) const {
    constexpr const char* what = "MultiHeadAttention::forward";
    check_input(what, "X^Q", xq, config_.d_in, "d_in");
    check_input(what, "X^K", xkv, config_.d_kv_in, "d_kv_in");
    const Index h_kv = config_.n_kv_heads, dh = config_.d_head, dv = config_.d_v;
    RowMatrix<T> q, k, v;
    project(xq, w_q_, b_q_, q);   // (N_Q, H d_head)
    project(xkv, w_k_, b_k_, k);  // (N_KV, H_kv d_head)
    project(xkv, w_v_, b_v_, v);  // (N_KV, H_kv d_v)
    for (std::size_t b = 0; b + 1 < q_off.size(); ++b) {
      apply_position(ProjectionRole::kQuery, q, config_.n_heads, q_off[b], q_off[b + 1] - q_off[b],
                     0);
      apply_position(ProjectionRole::kKey, k, h_kv, kv_off[b], kv_off[b + 1] - kv_off[b], 0);
    }
    RowMatrix<T> y(q.rows(), config_.n_heads * dv);  // (N_Q, H d_v)
    const auto from_kv = [&](Index b, Index g) {
      using Pair = std::pair<ConstMatrixRef<T>, ConstMatrixRef<T>>;
      const auto sb = static_cast<std::size_t>(b);  // a sequence index, >= 0
      const Index r0 = kv_off[sb], n = kv_off[sb + 1] - kv_off[sb];
      if (n == 0)  // an empty sequence: no block of a matrix that may have no storage
        return Pair(Eigen::Map<const RowMatrix<T>>(nullptr, 0, dh),
                    Eigen::Map<const RowMatrix<T>>(nullptr, 0, dv));
      return Pair(k.block(r0, g * dh, n, dh), v.block(r0, g * dv, n, dv));
    };
    attend_all(q, q_off, from_kv, y, mask);
    RowMatrix<T> out;
    project(y, w_o_, b_o_, out);  // (N_Q, d_out)
    return out;
  }

  HeadsConfig config_;
  Kernel kernel_;
  Position position_;
  WeightMatrix<T, Storage> w_q_, w_k_, w_v_, w_o_;
  RowVector<T> b_q_, b_k_, b_v_, b_o_;
};

/// Grouped-query attention: H_kv divides H (HeadsConfig::n_kv_heads).
template <Scalar T, class Kernel = kernels::Softmax, class Position = NoPosition,
          WeightStoragePolicy Storage = DenseWeights>
using GroupedQueryAttention = MultiHeadAttention<T, Kernel, GroupedQuery, Position, Storage>;

/// Multi-query attention: one key/value head for all query heads.
template <Scalar T, class Kernel = kernels::Softmax, class Position = NoPosition>
using MultiQueryAttention = MultiHeadAttention<T, Kernel, MultiQuery, Position>;

}  // namespace kappa
