// kappa/dist/tensor_parallel.hpp - a decoder-only model split over the
// ranks of an MPI communicator by heads and feed-forward columns (tensor
// parallelism), each rank reading only its share of the weights.
//
// The split (see partition.hpp for who holds what): rank r computes, for its
// query heads h in S_r and its feed-forward columns C_r,
//   attention:     sum_{h in S_r} softmax(Q_h K_h^T / sqrt(d)) V_h W^O_h
//   feed-forward:  (silu(X W_gate[:, C_r]) * X W_up[:, C_r]) W_down[C_r, :]
// and one allreduce (MPI_Allreduce, sum) after each gives every rank the
// whole layer's output: the paper's Y = [Y_1 ... Y_H] W^O = sum_h Y_h W^O_h.
// Norms and the embedding are replicated; the output head is split by
// vocabulary (rows [floor(r N_T / P), floor((r + 1) N_T / P)) of E_out, or of
// E for tied embeddings) and one allgather gives every rank the whole row of
// logits; biases after W^O are added by rank 0 only. Per token and layer
// each rank hands 2 d numbers to allreduce (the payload; a ring allreduce
// then sends 2 (P - 1) / P of it per rank).
//
// The layer types are the library's own with two wrappers:
// ShardedAttention<A> (a SelfAttentionOps specialization sums the partial
// outputs) and ShardedFfn<F>. The whole model is a DecoderLM of those
// layers inside TensorParallelLM, which gathers the logits so that every
// rank has the same bits and its sampler makes the same choices:
// kappa::generate runs unchanged on every rank, in lockstep, and rank 0
// prints.
//
//   kappa::dist::Environment env(argc, argv);
//   auto lm = kappa::dist::load_llama<float>("Llama-3.2-1B");   // this rank's share
//   auto tok = kappa::tokenize::HfTokenizer::from_directory("Llama-3.2-1B");
//   kappa::Generation g = kappa::generate(lm, tok, "The heads are", opt);  // every rank
//
// Loads GPT-2 and LLaMA-layout directories (model_type gpt2, llama, qwen2,
// mistral without a sliding window) from safetensors. Not yet: Phi-3's
// fused tensors, sliding windows, latent attention, mixtures of experts
// (expert parallelism), GGUF; each is rejected by name.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kappa/dist/communicator.hpp"
#include "kappa/dist/partition.hpp"
#include "kappa/io/safetensors.hpp"
#include "kappa/transformer/architectures.hpp"
#include "kappa/transformer/hf.hpp"
#include "kappa/transformer/layers.hpp"
#include "kappa/transformer/models.hpp"

namespace kappa::dist {

/// A rank's share of a grouped-query attention layer: the local heads' A
/// (whose W^O rows give a partial output), summed over the ranks by the
/// layer (SelfAttentionOps below). Constructed as A is.
template <class A>
class ShardedAttention {
 public:
  using value_type = typename A::value_type;
  using Local = A;

  ShardedAttention(HeadsConfig config, typename A::KernelType kernel,
                   typename A::PositionType position,
                   const Communicator& comm = Communicator::world())
      : local_(config, std::move(kernel), std::move(position)), comm_(&comm) {}

  template <class... Args>
  void set_weights_from_hf(Args&&... args) {
    local_.set_weights_from_hf(std::forward<Args>(args)...);
  }
  template <class... Args>
  void set_weights(Args&&... args) {
    local_.set_weights(std::forward<Args>(args)...);
  }
  template <class... Args>
  void set_biases(Args&&... args) {
    local_.set_biases(std::forward<Args>(args)...);
  }

  [[nodiscard]] const A& local() const noexcept { return local_; }
  [[nodiscard]] const Communicator& comm() const noexcept { return *comm_; }
  /// y <- sum over the ranks of y.
  void reduce(RowMatrix<value_type>& y) const {
    comm_->allreduce_sum(y.data(), static_cast<std::size_t>(y.size()));
  }
  [[nodiscard]] std::size_t weight_bytes() const { return local_.weight_bytes(); }

 private:
  A local_;
  const Communicator* comm_;
};

/// A rank's share of a feed-forward (columns of W_gate, W_up; rows of
/// W_down): forward gives the partial output summed over the ranks.
template <class F>
class ShardedFfn {
 public:
  explicit ShardedFfn(F local, const Communicator& comm = Communicator::world())
      : local_(std::move(local)), comm_(&comm) {}
  template <Scalar T>
  [[nodiscard]] RowMatrix<T> forward(const Eigen::Ref<const RowMatrix<T>>& x) const {
    RowMatrix<T> y = local_.forward(x);
    comm_->allreduce_sum(y.data(), static_cast<std::size_t>(y.size()));
    return y;
  }
  [[nodiscard]] std::size_t weight_bytes() const { return local_.weight_bytes(); }
  [[nodiscard]] const F& local() const noexcept { return local_; }

 private:
  F local_;
  const Communicator* comm_;
};

}  // namespace kappa::dist

namespace kappa {

/// A sharded attention layer runs as its local layer, then sums the ranks'
/// partial outputs. Head weights (inspection) are the rank's own heads.
template <class A, class Mask>
struct SelfAttentionOps<dist::ShardedAttention<A>, Mask> {
  using Attn = dist::ShardedAttention<A>;
  using Inner = SelfAttentionOps<A, Mask>;
  using T = typename A::value_type;
  template <class F>
  using CacheOf = typename Inner::template CacheOf<F>;
  using Cache = typename Inner::Cache;

  template <cache::StorageFormat F = cache::Native>
  static CacheOf<F> make_cache(const Attn& a, const Mask& mask) {
    return Inner::template make_cache<F>(a.local(), mask);
  }
  static RowMatrix<T> full(const Attn& a, ConstMatrixRef<T> x, const Mask& mask) {
    RowMatrix<T> y = Inner::full(a.local(), x, mask);
    a.reduce(y);
    return y;
  }
  static RowMatrix<T> batch(const Attn& a, const SequenceBatch<T>& x, const Mask& mask) {
    RowMatrix<T> y = Inner::batch(a.local(), x, mask);
    a.reduce(y);
    return y;
  }
  template <cache::StorageFormat F>
  static RowMatrix<T> cached(const Attn& a, ConstMatrixRef<T> x, CacheOf<F>& c) {
    RowMatrix<T> y = Inner::template cached<F>(a.local(), x, c);
    a.reduce(y);
    return y;
  }
  template <cache::StorageFormat F>
  static RowMatrix<T> batch_cached(const Attn& a, const SequenceBatch<T>& x,
                                   const std::vector<CacheOf<F>*>& caches) {
    RowMatrix<T> y = Inner::template batch_cached<F>(a.local(), x, caches);
    a.reduce(y);
    return y;
  }
  static HeadWeights<T> head_weights(const Attn& a, ConstMatrixRef<T> x, const Mask& mask) {
    return Inner::head_weights(a.local(), x, mask);
  }
  static std::size_t weight_bytes(const Attn& a) { return a.weight_bytes(); }
};

}  // namespace kappa

namespace kappa::dist {

/// The tensor-parallel LLaMA-layout model of one rank.
template <Scalar T>
using TpLlamaLayer = DecoderOnlyLayer<T, ShardedAttention<LlamaAttention<T>>, RMSNorm<T>,
                                      ShardedFfn<SwiGlu<T>>, PreNorm>;
template <Scalar T>
using TpLlama = DecoderLM<T, TpLlamaLayer<T>, NoAbsolutePositions>;

/// A rank's model, whose output head holds the rows of its share of the
/// vocabulary: every call gathers the ranks' columns of logits (one
/// allgather of N_T / P numbers per row from each rank), so every rank sees
/// the same whole logits, bit for bit, and every rank's sampler takes the
/// same decisions (the ranks' collectives would no longer match
/// otherwise). The interface of DecoderLM that kappa::generate uses.
template <class M>
class TensorParallelLM {
 public:
  using T = typename M::value_type;
  using Cache = typename M::Cache;

  /// `vocab`: the whole vocabulary, split over the ranks as share_columns.
  TensorParallelLM(M model, Index vocab, const Communicator& comm)
      : m_(std::move(model)), vocab_(vocab), comm_(&comm) {
    for (int r = 0; r < comm.size(); ++r) shares_.push_back(share_columns(vocab, r, comm.size()));
    if (shares_[static_cast<std::size_t>(comm.rank())].size() != m_.vocab_size())
      throw ShapeError("kappa: dist: the rank's output head has " +
                       std::to_string(m_.vocab_size()) + " rows, its share of the vocabulary " +
                       std::to_string(shares_[static_cast<std::size_t>(comm.rank())].size()));
  }

  [[nodiscard]] const M& local() const noexcept { return m_; }
  [[nodiscard]] const Communicator& comm() const noexcept { return *comm_; }
  /// The whole vocabulary (the logits' width).
  [[nodiscard]] Index vocab_size() const { return vocab_; }
  [[nodiscard]] Index context_length() const { return m_.context_length(); }
  [[nodiscard]] Index n_layers() const { return m_.n_layers(); }
  [[nodiscard]] Index d_model() const { return m_.d_model(); }
  /// This rank's weight bytes.
  [[nodiscard]] std::size_t weight_bytes() const { return m_.weight_bytes(); }

  [[nodiscard]] Cache make_cache() const { return m_.make_cache(); }
  [[nodiscard]] RowMatrix<T> forward(std::span<const TokenId> ids) const {
    return gather(m_.forward(ids));
  }
  [[nodiscard]] RowMatrix<T> forward_cached(std::span<const TokenId> ids, Cache& cache,
                                            LogitsFor which = LogitsFor::kAll) const {
    return gather(m_.forward_cached(ids, cache, which));
  }
  [[nodiscard]] RowMatrix<T> forward_cached(const std::vector<std::vector<TokenId>>& batch,
                                            const std::vector<Cache*>& caches,
                                            LogitsFor which = LogitsFor::kAll) const {
    return gather(m_.forward_cached(batch, caches, which));
  }

 private:
  // (N, N_T / P) on each rank -> (N, N_T) on every rank.
  RowMatrix<T> gather(const RowMatrix<T>& mine) const {
    const Index n = mine.rows();
    std::vector<int> counts;
    for (const ColumnShare& c : shares_) {
      const Index k = n * c.size();
      if (k > static_cast<Index>(INT32_MAX))
        throw std::length_error("kappa: dist: a block of logits exceeds MPI's int count");
      counts.push_back(static_cast<int>(k));
    }
    std::vector<T> all(static_cast<std::size_t>(n * vocab_));
    comm_->allgather(mine.data(), all.data(), counts);
    RowMatrix<T> out(n, vocab_);
    const T* block = all.data();
    for (const ColumnShare& c : shares_) {
      out.middleCols(c.begin, c.size()) = Eigen::Map<const RowMatrix<T>>(block, n, c.size());
      block += n * c.size();
    }
    return out;
  }
  M m_;
  Index vocab_;
  const Communicator* comm_;
  std::vector<ColumnShare> shares_;
};

namespace detail {

/// The checkpoint as one rank sees it: the projections of its heads and
/// feed-forward columns, under the Hugging Face names (the Source of
/// hf::detail::Weights). Each slice is read from the mapped file (a view
/// for F32, else the one tensor converted, then sliced); everything else is
/// passed through.
class ShardedCheckpoint {
 public:
  /// `vocab`: the rows of the output head this rank holds ("lm_head.weight",
  /// or for a model with tied embeddings the same rows of E).
  ShardedCheckpoint(const io::Checkpoint& full, Index d_head, HeadShare heads, ColumnShare ffn,
                    ColumnShare vocab, bool rank0)
      : full_(full),
        d_head_(d_head),
        heads_(std::move(heads)),
        ffn_(ffn),
        vocab_(vocab),
        rank0_(rank0) {}

  [[nodiscard]] bool has(std::string_view name) const { return name == kHead || full_.has(name); }
  void require_shape(std::string_view name, const std::vector<std::int64_t>& expected) const {
    if (kind(name) == Kind::kWhole) full_.require_shape(name, expected);
    // a sliced tensor's shape is checked against the whole one when read
  }
  template <class U>
  [[nodiscard]] RowVector<U> row_vector(std::string_view name) const {
    const Kind k = kind(name);
    if (k == Kind::kWhole) return full_.template row_vector<U>(name);
    const RowVector<U> all = full_.template row_vector<U>(name);
    if (k == Kind::kRank0Bias) return rank0_ ? all : RowVector<U>::Zero(all.size());
    const std::vector<Index> rows = row_indices(k);
    RowVector<U> out(static_cast<Index>(rows.size()));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      require(rows[i] < all.size(), name);
      out(static_cast<Index>(i)) = all(rows[i]);
    }
    return out;
  }
  template <class U>
  [[nodiscard]] RowMatrix<U> matrix(std::string_view name,
                                    const std::vector<std::int64_t>& expected) const {
    const Kind k = kind(name);
    if (k == Kind::kWhole) return full_.template matrix<U>(name, expected);
    // The head of a tied model is E's rows.
    if (k == Kind::kHeadRows && !full_.has(name)) name = kEmbedding;
    // The whole tensor (a view when the file stores U), then this rank's part.
    RowMatrix<U> owned;
    const bool view = full_.template can_view<U>(name);
    if (!view) owned = full_.template matrix<U>(name);
    const Eigen::Map<const RowMatrix<U>> all =
        view ? full_.template view<U>(name)
             : Eigen::Map<const RowMatrix<U>>(owned.data(), owned.rows(), owned.cols());
    if (k == Kind::kQRows || k == Kind::kKvRows || k == Kind::kFfnRows ||
        k == Kind::kHeadRows) {  // out x in: rows
      const std::vector<Index> rows = row_indices(k);
      RowMatrix<U> out(static_cast<Index>(rows.size()), all.cols());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        require(rows[i] < all.rows(), name);
        out.row(static_cast<Index>(i)) = all.row(rows[i]);
      }
      // The loader asks for the whole head (N_T, d): this rank's rows of it.
      check_expected(name, out,
                     k == Kind::kHeadRows && expected.size() == 2
                         ? std::vector<std::int64_t>{out.rows(), expected[1]}
                         : expected);
      return out;
    }
    // kOCols / kFfnCols: columns of (out x in)
    const std::vector<Index> cols = row_indices(k == Kind::kOCols ? Kind::kQRows : Kind::kFfnRows);
    RowMatrix<U> out(all.rows(), static_cast<Index>(cols.size()));
    for (std::size_t j = 0; j < cols.size(); ++j) {
      require(cols[j] < all.cols(), name);
      out.col(static_cast<Index>(j)) = all.col(cols[j]);
    }
    check_expected(name, out, expected);
    return out;
  }

 private:
  enum class Kind { kWhole, kQRows, kKvRows, kOCols, kRank0Bias, kFfnRows, kFfnCols, kHeadRows };
  static constexpr std::string_view kHead = "lm_head.weight";
  static constexpr std::string_view kEmbedding = "model.embed_tokens.weight";
  static bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  }
  static Kind kind(std::string_view n) {
    if (n == kHead) return Kind::kHeadRows;
    if (n.find(".layers.") == std::string_view::npos) return Kind::kWhole;
    if (ends_with(n, "self_attn.q_proj.weight") || ends_with(n, "self_attn.q_proj.bias"))
      return Kind::kQRows;
    if (ends_with(n, "self_attn.k_proj.weight") || ends_with(n, "self_attn.k_proj.bias") ||
        ends_with(n, "self_attn.v_proj.weight") || ends_with(n, "self_attn.v_proj.bias"))
      return Kind::kKvRows;
    if (ends_with(n, "self_attn.o_proj.weight")) return Kind::kOCols;
    if (ends_with(n, "self_attn.o_proj.bias") || ends_with(n, "mlp.down_proj.bias"))
      return Kind::kRank0Bias;
    if (ends_with(n, "mlp.gate_proj.weight") || ends_with(n, "mlp.up_proj.weight") ||
        ends_with(n, "mlp.gate_proj.bias") || ends_with(n, "mlp.up_proj.bias"))
      return Kind::kFfnRows;
    if (ends_with(n, "mlp.down_proj.weight")) return Kind::kFfnCols;
    return Kind::kWhole;
  }
  // The rows of the whole (out x in) tensor this rank takes.
  [[nodiscard]] std::vector<Index> row_indices(Kind k) const {
    std::vector<Index> rows;
    if (k == Kind::kQRows) {
      for (Index h = heads_.q_begin; h < heads_.q_end; ++h)
        for (Index c = 0; c < d_head_; ++c) rows.push_back(h * d_head_ + c);
    } else if (k == Kind::kKvRows) {
      for (const Index h : heads_.kv_heads)
        for (Index c = 0; c < d_head_; ++c) rows.push_back(h * d_head_ + c);
    } else if (k == Kind::kHeadRows) {
      for (Index v = vocab_.begin; v < vocab_.end; ++v) rows.push_back(v);
    } else {
      for (Index c = ffn_.begin; c < ffn_.end; ++c) rows.push_back(c);
    }
    return rows;
  }
  static void require(bool ok, std::string_view name) {
    if (!ok)
      throw FormatError("kappa: dist: tensor " + std::string(name) +
                        " is smaller than the config's sizes");
  }
  template <class U>
  static void check_expected(std::string_view name, const RowMatrix<U>& m,
                             const std::vector<std::int64_t>& expected) {
    if (expected.size() != 2 || expected[0] != m.rows() || expected[1] != m.cols())
      throw ShapeError("kappa: dist: tensor " + std::string(name) + ": this rank's part is (" +
                       std::to_string(m.rows()) + ", " + std::to_string(m.cols()) +
                       "), the local layer expects (" +
                       (expected.size() == 2
                            ? std::to_string(expected[0]) + ", " + std::to_string(expected[1])
                            : std::string("?")) +
                       ")");
  }

  const io::Checkpoint& full_;
  Index d_head_;
  HeadShare heads_;
  ColumnShare ffn_;
  ColumnShare vocab_;
  bool rank0_;
};

}  // namespace detail

/// This rank's share of a LLaMA-layout model directory (config.json and
/// safetensors): model_type llama, qwen2 or mistral without a sliding
/// window; float or double. Every rank of MPI_COMM_WORLD calls it (the
/// ranks of the world split the model).
/// \throws std::invalid_argument naming what is not supported yet (another
///         model_type, Phi-3's fused tensors, a sliding window) or a split
///         that cannot be made (more ranks than heads or than d_ff columns);
///         as hf::load_causal_lm for a bad directory.
template <Scalar T>
TensorParallelLM<TpLlama<T>> load_llama(const std::filesystem::path& dir) {
  const Communicator& comm = Communicator::world();
  const hf::Config c = hf::Config::read(dir / "config.json");
  const std::string type = c.string("model_type");
  if (type != "llama" && type != "qwen2" && type != "mistral")
    throw std::invalid_argument("kappa: dist::load_llama: model_type " + kappa::quoted(type) +
                                " is not supported across ranks yet (llama, qwen2, mistral are)");
  hf::LlamaSizes s = hf::llama_sizes(c, type);
  if (s.sliding_window > 0)
    throw std::invalid_argument("kappa: dist::load_llama: a sliding window (" +
                                std::to_string(s.sliding_window) +
                                " tokens) is not supported across ranks yet");
  if (s.tensors != hf::LlamaSizes::Tensors::kSeparate)
    throw std::invalid_argument(
        "kappa: dist::load_llama: fused projections (Phi-3's qkv_proj) are not supported across "
        "ranks yet");
  const HeadShare heads = share_heads(s.n_head, s.n_kv, comm.rank(), comm.size());
  const ColumnShare ffn = share_columns(s.d_ff, comm.rank(), comm.size());
  const ColumnShare vocab = share_columns(s.vocab, comm.rank(), comm.size());
  const io::Checkpoint full(dir);
  const detail::ShardedCheckpoint part(full, s.d_head, heads, ffn, vocab, comm.rank() == 0);
  hf::LlamaSizes local = s;
  local.tied = false;  // a tied head is this rank's rows of E, held apart
  local.n_head = heads.n_q();
  local.n_kv = heads.n_kv();
  local.q_width = local.n_head * s.d_head;
  local.kv_width = local.n_kv * s.d_head;
  local.d_ff = ffn.size();
  TpLlama<T> m = hf::detail::build_llama<T, DenseWeights, TpLlamaLayer<T>>(
      local, part, CausalMask{}, hf::detail::llama_rope<T>(s),
      [&](const auto& w, Index, const std::string& p) {
        return ShardedFfn<SwiGlu<T>>(
            hf::detail::read_llama_mlp<T, DenseWeights>(w, p, local.d, local.d_ff), comm);
      });
  return TensorParallelLM<TpLlama<T>>(std::move(m), s.vocab, comm);
}

/// The tensor-parallel GPT-2 of one rank (multi-head attention, learned
/// positions, a GELU MLP; the head tied to E, split by vocabulary).
template <Scalar T>
using TpGpt2Layer = DecoderOnlyLayer<T, ShardedAttention<MultiHeadAttention<T>>, LayerNorm<T>,
                                     ShardedFfn<Mlp<T, GeluTanh>>, PreNorm>;
template <Scalar T>
using TpGpt2 = DecoderLM<T, TpGpt2Layer<T>, LearnedPositions<T>>;

namespace detail {
/// Columns `cols` (or, with by_rows, rows) of tensor `name` of the
/// checkpoint, read from the mapped file without a whole copy when the file
/// stores U (else the one tensor converted, then sliced).
template <class U>
RowMatrix<U> slice(const io::Checkpoint& ckpt, const std::string& name, Index rows, Index cols,
                   const std::vector<Index>& take, bool by_rows) {
  ckpt.require_shape(name, {rows, cols});
  RowMatrix<U> owned;
  const bool view = ckpt.template can_view<U>(name);
  if (!view) owned = ckpt.template matrix<U>(name);
  const Eigen::Map<const RowMatrix<U>> all =
      view ? ckpt.template view<U>(name)
           : Eigen::Map<const RowMatrix<U>>(owned.data(), owned.rows(), owned.cols());
  const Index n = static_cast<Index>(take.size());
  RowMatrix<U> out(by_rows ? n : rows, by_rows ? cols : n);
  for (Index i = 0; i < n; ++i) {
    if (by_rows)
      out.row(i) = all.row(take[static_cast<std::size_t>(i)]);
    else
      out.col(i) = all.col(take[static_cast<std::size_t>(i)]);
  }
  return out;
}
inline std::vector<Index> range(Index begin, Index end, Index offset = 0) {
  std::vector<Index> r;
  for (Index i = begin; i < end; ++i) r.push_back(offset + i);
  return r;
}
}  // namespace detail

/// This rank's share of a GPT-2 directory (config.json and safetensors, the
/// Hugging Face Conv1D layout: X W). Every rank of MPI_COMM_WORLD calls it.
/// \throws std::invalid_argument for a split that cannot be made (more ranks
///         than heads); as hf::load_causal_lm for a bad directory.
template <Scalar T>
TensorParallelLM<TpGpt2<T>> load_gpt2(const std::filesystem::path& dir) {
  const Communicator& comm = Communicator::world();
  const hf::Config c = hf::Config::read(dir / "config.json");
  if (c.string("model_type") != "gpt2")
    throw std::invalid_argument("kappa: dist::load_gpt2: model_type " +
                                kappa::quoted(c.string("model_type")) + " is not gpt2");
  if (!c.boolean("tie_word_embeddings", true))
    throw std::invalid_argument(
        "kappa: dist::load_gpt2: an untied GPT-2 head is not supported "
        "across ranks yet");
  const Index d = c.integer("n_embd", std::nullopt, 1),
              n_layer = c.integer("n_layer", std::nullopt, 0),
              n_head = c.integer("n_head", std::nullopt, 1),
              n_pos = c.integer("n_positions", std::nullopt, 1),
              vocab = c.integer("vocab_size", std::nullopt, 1);
  const Index d_ff = c.integer("n_inner", c.product("4 x n_embd", 4, d), 1);
  const double eps = c.positive("layer_norm_epsilon", 1e-5, 1.0);
  if (d % n_head != 0) c.fail("n_head", "must divide n_embd = " + std::to_string(d));
  const Index dh = d / n_head;
  const HeadShare heads = share_heads(n_head, n_head, comm.rank(), comm.size());
  const ColumnShare ffn = share_columns(d_ff, comm.rank(), comm.size());
  const ColumnShare voc = share_columns(vocab, comm.rank(), comm.size());
  const bool rank0 = comm.rank() == 0;
  const io::Checkpoint ckpt(dir);
  const std::string pre = ckpt.has("transformer.wte.weight") ? "transformer." : "";
  const auto vec = [&](const std::string& name, Index n) {
    ckpt.require_shape(pre + name, {n});
    return ckpt.template row_vector<T>(pre + name);
  };
  const auto take = [](const RowVector<T>& v, const std::vector<Index>& idx) {
    RowVector<T> out(static_cast<Index>(idx.size()));
    for (std::size_t i = 0; i < idx.size(); ++i) out(static_cast<Index>(i)) = v(idx[i]);
    return out;
  };
  const Index c0 = heads.q_begin * dh, c1 = heads.q_end * dh;
  std::vector<TpGpt2Layer<T>> layers;
  for (Index i = 0; i < n_layer; ++i) {
    const std::string p = pre + "h." + std::to_string(i) + ".";
    ShardedAttention<MultiHeadAttention<T>> attn(
        {.d_in = d, .n_heads = heads.n_q(), .d_head = dh, .n_kv_heads = heads.n_q()}, {}, {});
    // c_attn (d, 3d): the columns of this rank's heads in each of Q, K, V
    const std::string qkv = p + "attn.c_attn.weight";
    const RowVector<T> b = vec("h." + std::to_string(i) + ".attn.c_attn.bias", 3 * d);
    attn.set_weights(
        detail::slice<T>(ckpt, qkv, d, 3 * d, detail::range(c0, c1), false),
        detail::slice<T>(ckpt, qkv, d, 3 * d, detail::range(c0, c1, d), false),
        detail::slice<T>(ckpt, qkv, d, 3 * d, detail::range(c0, c1, 2 * d), false),
        detail::slice<T>(ckpt, p + "attn.c_proj.weight", d, d, detail::range(c0, c1), true));
    const RowVector<T> b_o = vec("h." + std::to_string(i) + ".attn.c_proj.bias", d);
    attn.set_biases(take(b, detail::range(c0, c1)), take(b, detail::range(c0, c1, d)),
                    take(b, detail::range(c0, c1, 2 * d)),
                    rank0 ? b_o : RowVector<T>(RowVector<T>::Zero(d)));
    Mlp<T, GeluTanh> mlp(d, ffn.size());
    const RowVector<T> b_fc = vec("h." + std::to_string(i) + ".mlp.c_fc.bias", d_ff);
    const RowVector<T> b_2 = vec("h." + std::to_string(i) + ".mlp.c_proj.bias", d);
    mlp.set_weights(detail::slice<T>(ckpt, p + "mlp.c_fc.weight", d, d_ff,
                                     detail::range(ffn.begin, ffn.end), false),
                    take(b_fc, detail::range(ffn.begin, ffn.end)),
                    detail::slice<T>(ckpt, p + "mlp.c_proj.weight", d_ff, d,
                                     detail::range(ffn.begin, ffn.end), true),
                    rank0 ? b_2 : RowVector<T>(RowVector<T>::Zero(d)));
    const std::string q = "h." + std::to_string(i) + ".";
    layers.emplace_back(std::move(attn),
                        LayerNorm<T>(vec(q + "ln_1.weight", d), vec(q + "ln_1.bias", d), eps),
                        LayerNorm<T>(vec(q + "ln_2.weight", d), vec(q + "ln_2.bias", d), eps),
                        ShardedFfn<Mlp<T, GeluTanh>>(std::move(mlp), comm));
  }
  ckpt.require_shape(pre + "wte.weight", {vocab, d});
  ckpt.require_shape(pre + "wpe.weight", {n_pos, d});
  RowMatrix<T> head =
      detail::slice<T>(ckpt, pre + "wte.weight", vocab, d, detail::range(voc.begin, voc.end), true);
  TpGpt2<T> m(Embedding<T>(ckpt.template matrix<T>(pre + "wte.weight")),
              LearnedPositions<T>(ckpt.template matrix<T>(pre + "wpe.weight")), std::move(layers),
              LayerNorm<T>(vec("ln_f.weight", d), vec("ln_f.bias", d), eps), std::move(head),
              n_pos);
  return TensorParallelLM<TpGpt2<T>>(std::move(m), vocab, comm);
}

}  // namespace kappa::dist
