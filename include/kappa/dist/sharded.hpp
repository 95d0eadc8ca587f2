// kappa/dist/sharded.hpp - the layers and the model of one rank of a
// tensor-parallel (and expert-parallel) model: ShardedAttention<A> and
// ShardedFfn<F> wrap the library's own attention and feed-forward types
// holding the rank's share, and add the ranks' partial outputs with one
// allreduce; TensorParallelLM gathers the logits of a head split by
// vocabulary. The loaders that fill them: tensor_parallel.hpp.
//
// Rank r computes, for its query heads h in S_r and its feed-forward
// columns C_r (or its experts),
//   attention:     sum_{h in S_r} softmax(Q_h K_h^T / sqrt(d)) V_h W^O_h
//   feed-forward:  (silu(X W_gate[:, C_r]) * X W_up[:, C_r]) W_down[C_r, :]
//   experts:       sum_{e in I(x), e held by r} w_e E_e(x) + S_r(x)
// and one allreduce (MPI_Allreduce, sum) after each gives every rank the
// whole layer's output: the paper's Y = [Y_1 ... Y_H] W^O = sum_h Y_h W^O_h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/dist/communicator.hpp"
#include "kappa/dist/partition.hpp"
#include "kappa/transformer/layers.hpp"
#include "kappa/transformer/models.hpp"

namespace kappa::dist {

namespace detail {
/// The kernel and position policy types an attention layer is constructed
/// with (placeholders for a layer built otherwise, as latent attention).
template <class A, class = void>
struct AttentionArgs {
  struct Kernel {};
  struct Position {};
};
template <class A>
struct AttentionArgs<A, std::void_t<typename A::KernelType, typename A::PositionType>> {
  using Kernel = typename A::KernelType;
  using Position = typename A::PositionType;
};
}  // namespace detail

/// A rank's share of an attention layer: an attention layer A of the
/// rank's heads (grouped-query, or latent attention), whose W^O rows give a
/// partial output, summed over the ranks by the layer (SelfAttentionOps
/// below). Constructed as A is, or from an A (the loaders build the local
/// layer, then wrap it).
template <class A>
class ShardedAttention {
 public:
  using value_type = typename A::value_type;
  using Local = A;

  ShardedAttention(HeadsConfig config, typename detail::AttentionArgs<A>::Kernel kernel,
                   typename detail::AttentionArgs<A>::Position position,
                   const Communicator& comm = Communicator::world())
      : local_(config, std::move(kernel), std::move(position)), comm_(&comm) {}
  // Implicit: a loader's emplace_back(local_layer, ...) builds the wrapper.
  ShardedAttention(A local,  // NOLINT(google-explicit-constructor)
                   const Communicator& comm = Communicator::world())
      : local_(std::move(local)), comm_(&comm) {}

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

 private:
  A local_;
  const Communicator* comm_;
};

/// A rank's share of a feed-forward (columns of W_gate, W_up; rows of
/// W_down), or of a mixture of experts (its experts, the router whole, the
/// shared expert's columns): forward gives the partial output summed over
/// the ranks.
template <class F>
class ShardedFfn {
 public:
  // Implicit: a loader's emplace_back(..., local_ffn, ...) builds the wrapper.
  ShardedFfn(F local,  // NOLINT(google-explicit-constructor)
             const Communicator& comm = Communicator::world())
      : local_(std::move(local)), comm_(&comm) {}
  template <Scalar T>
  [[nodiscard]] RowMatrix<T> forward(const Eigen::Ref<const RowMatrix<T>>& x) const {
    RowMatrix<T> y = local_.forward(x);
    comm_->allreduce_sum(y.data(), static_cast<std::size_t>(y.size()));
    return y;
  }
  [[nodiscard]] std::size_t weight_bytes() const { return local_.weight_bytes(); }
  /// Bytes of this rank's share that one decode step reads (a mixture's:
  /// the router and at most k of its experts).
  [[nodiscard]] std::size_t decode_bytes() const {
    if constexpr (requires { local_.decode_bytes(); })
      return local_.decode_bytes();
    else
      return local_.weight_bytes();
  }
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
  static std::size_t weight_bytes(const Attn& a) { return Inner::weight_bytes(a.local()); }
};

}  // namespace kappa

namespace kappa::dist {

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
  /// Phi-3's LongRoPE: the prompt length past which generation recomputes
  /// the cache (as hf::CausalLM::cache_refresh_length); 0: never.
  [[nodiscard]] Index cache_refresh_length() const { return refresh_; }
  void set_cache_refresh_length(Index n) { refresh_ = n; }
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
  Index refresh_ = 0;
};

}  // namespace kappa::dist
