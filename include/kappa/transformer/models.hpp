// kappa/transformer/models.hpp - whole Transformer models: token ids in,
// vocabulary logits out (the paper's section 3).
//
//   DecoderLM           decoder-only language model (GPT-2, LLaMA, Mistral,
//                       Qwen2, DeepSeek-V2 with dense feed-forward layers):
//                         X_0 = E[ids] (+ P[positions])
//                         X_l = Layer_l(X_{l-1})           l = 1 .. L, causal
//                         logits = N_f(X_L) E_out^T         E_out = E when tied
//   EncoderOnlyModel    BERT: X_0 = LN(E[ids] + P[positions] + T[types]),
//                       encoder layers, and the masked-LM head
//                         logits = LN(act(X_L W_t + b_t)) E^T + b
//   EncoderDecoderModel the original Transformer: encoder over the source,
//                       decoder (causal self-attention + cross-attention over
//                       the encoder output) over the target, then logits.
//
// The output projection E_out is stored (N_T x d) as the embedding is, so
// tied and separate heads are one code path: logits = H E_out^T.
//
// An empty sequence (N = 0) is valid input everywhere, decided once here:
// its result has 0 rows ((0, d) hidden states, (0, N_T) logits), no layer
// runs, and a cache it continues is left unchanged. An encoder-decoder over
// an empty source has an empty memory M: cross-attention then has no key to
// attend to and gives zero rows (the fully masked row's documented result).
//
// Cached decoding of the encoder-decoder projects the memory once per
// sequence: each decoder layer's cache keeps K = M W^K and V = M W^V (N_src
// rows) from set_memory(M, cache) or the first decode_cached(M, tgt, cache),
// and every later step attends over them. A cache serves one memory: a later
// decode_cached must pass the same matrix M (same data pointer and shape,
// checked in O(1), the values not compared: do not change M in place) or it
// throws ShapeError with the cache unchanged; set_memory() replaces the
// memory, reset() of the layer caches drops it. decode_cached(tgt, cache)
// decodes over the memory held without passing it. An empty target leaves
// the cache unchanged (it does not take the memory); an empty memory is held
// as 0 rows of K and V.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kappa/cache/formats.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/weight_storage.hpp"
#include "kappa/embed/embedding.hpp"
#include "kappa/embed/positional.hpp"
#include "kappa/heads/head_weights.hpp"
#include "kappa/nn/activations.hpp"
#include "kappa/nn/layer_norm.hpp"
#include "kappa/transformer/inspection.hpp"
#include "kappa/transformer/layers.hpp"

namespace kappa {

/// No absolute positions added to the embeddings (RoPE inside attention, or
/// none at all).
struct NoAbsolutePositions {};

namespace detail {
template <class P>
inline constexpr bool kHasAbsolutePositions = !std::same_as<P, NoAbsolutePositions>;

template <Scalar T>
void require_output_head(const char* what, const RowMatrix<T>& e_out, Index d) {
  require_shapes(e_out.cols() == d, what, "E_out (output projection, N_T x d)", e_out.rows(),
                 e_out.cols(), "d_model", 1, d, "E_out must have d_model columns");
}
}  // namespace detail

/// A decoder-only language model; see the file comment.
///
/// \tparam T          float or double
/// \tparam Layer      a DecoderOnlyLayer<T, ...>
/// \tparam Positions  NoAbsolutePositions, LearnedPositions<T> (GPT-2) or
///                    SinusoidalPositions<T>, added to the token embeddings
/// \tparam Storage    how the output head E_out is stored (DenseWeights,
///                    Bf16Weights); with Bf16Weights a tied head keeps a
///                    bfloat16 copy of E for the logits and E for the lookup
///
/// A model object is read-only during forward calls; several threads may use
/// one model with their own caches.
template <Scalar T, class Layer, class Positions = NoAbsolutePositions,
          WeightStoragePolicy Storage = DenseWeights>
class DecoderLM {
 public:
  using value_type = T;
  using LayerType = Layer;
  using StorageType = Storage;
  using Norm = typename Layer::NormType;
  using LayerCache = typename Layer::Cache;

  /// The per-layer caches of one sequence, their rows stored in format F
  /// (cache/formats.hpp: cache::Native, BF16, F16 or Int8).
  // (F checked by a static_assert, not a constraint: clang 14 crashes on the
  // constrained member template used in the class body.)
  template <class F>
  struct CacheOf {
    static_assert(cache::StorageFormat<F>, "kappa: F is a cache storage format (formats.hpp)");
    using Format = F;
    std::vector<typename Layer::template CacheOf<F>> layers;
    /// Tokens seen so far (the position of the next token).
    [[nodiscard]] Index length() const { return layers.empty() ? length_ : layers[0].length(); }
    /// Bytes of cached keys/values (or latent rows) in use.
    [[nodiscard]] std::size_t bytes() const {
      std::size_t b = 0;
      for (const auto& c : layers) b += c.bytes();
      return b;
    }
    /// Bytes cached per stored token over all layers: the sum of the layers'
    /// bytes_per_token() (bytes() is this times the tokens stored).
    [[nodiscard]] std::size_t bytes_per_token() const {
      std::size_t b = 0;
      for (const auto& c : layers) b += c.bytes_per_token();
      return b;
    }
    /// Rolls back to the first `len` tokens (e.g. to retry a continuation).
    /// \throws as the layer caches' truncate() for len outside [0, length()].
    void truncate(Index len) {
      for (auto& c : layers) c.truncate(len);
      if (layers.empty()) length_ = len;
    }
    /// Drops every cached token (the caches keep their memory).
    void reset() {
      for (auto& c : layers) c.reset();
      length_ = 0;
    }
    Index length_ = 0;  // for a model with no layers
  };
  /// The per-layer caches of one sequence in the model's scalar type.
  using Cache = CacheOf<cache::Native>;

  /// A cache whose storage format is chosen at run time (make_cache(format)):
  /// one of the four CacheOf<F>. forward_cached dispatches on it once per
  /// call; a batch needs caches of one format.
  struct AnyCache {
    std::variant<CacheOf<cache::Native>, CacheOf<cache::BF16>, CacheOf<cache::F16>,
                 CacheOf<cache::Int8>>
        c;
    [[nodiscard]] cache::Format format() const {
      return std::visit(
          [](const auto& x) {
            return cache::format_of<typename std::decay_t<decltype(x)>::Format>();
          },
          c);
    }
    [[nodiscard]] Index length() const {
      return std::visit([](const auto& x) { return x.length(); }, c);
    }
    [[nodiscard]] std::size_t bytes() const {
      return std::visit([](const auto& x) { return x.bytes(); }, c);
    }
    [[nodiscard]] std::size_t bytes_per_token() const {
      return std::visit([](const auto& x) { return x.bytes_per_token(); }, c);
    }
    void truncate(Index len) {
      std::visit([len](auto& x) { x.truncate(len); }, c);
    }
    void reset() {
      std::visit([](auto& x) { x.reset(); }, c);
    }
  };

  /// \param embed    E (N_T x d)
  /// \param positions absolute positions (or NoAbsolutePositions{})
  /// \param layers   the L layers
  /// \param final_norm  N_f
  /// \param output   E_out (N_T x d); std::nullopt ties it to E
  /// \param context_length  positions the model was trained for (0: no
  ///        limit); the table of learned positions is a hard limit anyway
  /// \throws ShapeError if the widths or vocabulary sizes disagree.
  DecoderLM(Embedding<T> embed, Positions positions, std::vector<Layer> layers, Norm final_norm,
            std::optional<RowMatrix<T>> output = std::nullopt, Index context_length = 0)
      : DecoderLM(std::move(embed), std::move(positions), std::move(layers), std::move(final_norm),
                  std::move(output), context_length, true) {}

  /// As above with the output head already in the model's storage (e.g. a
  /// GGUF file's blocks, viewed in the mapped file): `head` is E_out
  /// (N_T x d), the file's separate output tensor or its copy of E when
  /// `tied`. \throws ShapeError if the widths or vocabulary sizes disagree.
  DecoderLM(Embedding<T> embed, Positions positions, std::vector<Layer> layers, Norm final_norm,
            WeightMatrix<T, Storage> head, bool tied,
            Index context_length) requires(!std::same_as<Storage, DenseWeights>)
      : DecoderLM(std::move(embed), std::move(positions), std::move(layers), std::move(final_norm),
                  std::nullopt, context_length, false) {
    require_shapes(head.cols() == embed_.dim() && (!tied || head.rows() == embed_.vocab_size()),
                   "DecoderLM", "E_out", head.rows(), head.cols(), "E", embed_.vocab_size(),
                   embed_.dim(),
                   "the output head must be as wide as the embeddings (and as tall when tied)");
    head_ = std::move(head);
    untied_ = !tied;
    stored_head_ = true;
  }

  /// As above with the embedding E too in the model's storage
  /// (AsStoredWeights; `embedding` readable row by row: dense, or blocks
  /// along d as a GGUF token_embd): a lookup dequantizes the rows it needs,
  /// and no float copy of E is made. `head` may be the same matrix (a tied
  /// model keeps one copy of the blocks).
  /// \throws ShapeError if the widths or vocabulary sizes disagree,
  /// std::invalid_argument if `embedding` cannot be read by rows.
  DecoderLM(WeightMatrix<T, Storage> embedding, Positions positions, std::vector<Layer> layers,
            Norm final_norm, WeightMatrix<T, Storage> head, bool tied,
            Index context_length) requires requires {
    Storage::kPerMatrix;
  } : DecoderLM(Embedding<T>(RowMatrix<T>(0, embedding.cols())), std::move(positions),
                std::move(layers), std::move(final_norm), std::nullopt, context_length, false) {
    if (!embedding.rows_readable())
      throw std::invalid_argument("kappa: DecoderLM: the embedding (" + embedding.format() +
                                  ") cannot be read row by row");
    require_shapes(head.cols() == embedding.cols() && (!tied || head.rows() == embedding.rows()),
                   "DecoderLM", "E_out", head.rows(), head.cols(), "E", embedding.rows(),
                   embedding.cols(),
                   "the output head must be as wide as the embeddings (and as tall when tied)");
    embed_rows_ = std::move(embedding);
    head_ = std::move(head);
    untied_ = !tied;
    stored_head_ = true;
  }

 private:
  /// The constructors' common part; builds head_ from E_out in T when
  /// `build_head` and the storage keeps its own head.
  DecoderLM(Embedding<T> embed, Positions positions, std::vector<Layer> layers, Norm final_norm,
            std::optional<RowMatrix<T>> output, Index context_length, bool build_head)
      : embed_(std::move(embed)),
        positions_(std::move(positions)),
        layers_(std::move(layers)),
        final_norm_(std::move(final_norm)),
        output_(std::move(output)),
        context_length_(context_length) {
    if (output_) {
      detail::require_output_head("DecoderLM", *output_, embed_.dim());
    }
    if constexpr (std::same_as<Storage, DenseWeights> || kHeadInT) {
      // The head is E_out in T (AsStoredWeights built from floats keeps it so
      // too: no second copy of a tied E).
      (void)build_head;
    } else if (build_head) {
      untied_ = output_.has_value();
      // bfloat16 values or blocks along d, what X E^T reduces
      if constexpr (std::is_constructible_v<WeightMatrix<T, Storage>, RowMatrix<T>, BlocksAlong>)
        head_ = WeightMatrix<T, Storage>(output_ ? *output_ : embed_.table(), BlocksAlong::kCols);
      else
        head_ = WeightMatrix<T, Storage>(output_ ? *output_ : embed_.table());
      output_.reset();  // the head lives in head_ only
    }
    if constexpr (detail::kHasAbsolutePositions<Positions>) {
      require_shapes(positions_.dim() == embed_.dim(), "DecoderLM", "the positions", 1,
                     positions_.dim(), "E", embed_.vocab_size(), embed_.dim(),
                     "added positions must be as wide as the embeddings");
    }
  }

 public:
  [[nodiscard]] Index vocab_size() const {
    if (!dense_head()) return head_.rows();
    return output_ ? output_->rows() : embed_.vocab_size();
  }
  [[nodiscard]] Index d_model() const { return embed_.dim(); }
  [[nodiscard]] Index n_layers() const { return static_cast<Index>(layers_.size()); }
  [[nodiscard]] Index context_length() const { return context_length_; }
  [[nodiscard]] bool tied() const {
    if (dense_head()) return !output_.has_value();
    return !untied_;
  }
  /// E in T (0 x d when the model keeps E in its storage: embedding_stored()).
  [[nodiscard]] const Embedding<T>& embedding() const { return embed_; }
  /// E in the model's storage, when it keeps it so (AsStoredWeights).
  [[nodiscard]] const std::optional<WeightMatrix<T, Storage>>& embedding_stored() const {
    return embed_rows_;
  }
  [[nodiscard]] const Positions& positions() const { return positions_; }
  [[nodiscard]] const std::vector<Layer>& layers() const { return layers_; }
  [[nodiscard]] const Norm& final_norm() const { return final_norm_; }
  /// Bytes of every weight held (memory).
  [[nodiscard]] std::size_t weight_bytes() const {
    std::size_t b = sizeof(T) * static_cast<std::size_t>(embed_.table().size());
    if (embed_rows_ && untied_) b += embed_rows_->bytes();  // tied: head_'s bytes
    if (dense_head()) {
      if (output_) b += sizeof(T) * static_cast<std::size_t>(output_->size());
    } else {
      b += head_.bytes();
    }
    if constexpr (std::same_as<Positions, LearnedPositions<T>>)
      b += sizeof(T) * static_cast<std::size_t>(positions_.table().size());
    for (const Layer& l : layers_) b += l.weight_bytes();
    return b;
  }
  /// Bytes of weights one decode step reads: every layer's, the output head,
  /// and one row of E (and of the position table).
  [[nodiscard]] std::size_t decode_bytes() const {
    std::size_t b = sizeof(T) * static_cast<std::size_t>(embed_.dim());
    if (dense_head()) {
      b += sizeof(T) * static_cast<std::size_t>((output_ ? *output_ : embed_.table()).size());
    } else {
      b += head_.bytes();
    }
    if constexpr (std::same_as<Positions, LearnedPositions<T>>)
      b += sizeof(T) * static_cast<std::size_t>(embed_.dim());
    for (const Layer& l : layers_) b += l.decode_bytes();
    return b;
  }

  /// X_0 for ids at positions first .. first + N - 1 (N, d).
  /// \throws RangeError naming a token id outside [0, N_T) or a position
  ///         beyond the learned table.
  [[nodiscard]] RowMatrix<T> embed(std::span<const TokenId> ids, Index first = 0) const {
    RowMatrix<T> x;
    if constexpr (kHeadInT) {
      if (embed_rows_) {  // E in its stored format: the rows asked for
        const Index n_t = embed_rows_->rows();
        for (const TokenId id : ids)
          require_index("token id", id, static_cast<long long>(n_t), "the embedding table E (N_T)");
        x.resize(static_cast<Index>(ids.size()), embed_rows_->cols());
        embed_rows_->rows_into(ids, x);
      }
    }
    if (x.size() == 0 && !embed_rows_) x = embed_.lookup(ids);  // (N, d)
    if (embed_scale_ != 1.0) x *= static_cast<T>(embed_scale_);
    if constexpr (detail::kHasAbsolutePositions<Positions>) {
      x += positions_.encode(x.rows(), first);
    } else {
      (void)first;
    }
    return x;
  }

  /// X_0 of one token at `position` (1, d): embed({id}, position).
  /// \throws RangeError as embed(ids, first).
  [[nodiscard]] RowMatrix<T> embed(TokenId id, Index position) const {
    return embed(std::span<const TokenId>(&id, 1), position);
  }

  /// The final hidden states N_f(X_L) of one sequence (N, d).
  [[nodiscard]] RowMatrix<T> hidden(std::span<const TokenId> ids) const {
    RowMatrix<T> x = embed(ids, 0);
    if (ids.empty()) return x;  // (0, d): see the file comment
    for (const Layer& l : layers_) x = l.forward(x);
    final_norm_.apply(x);
    return x;
  }

  /// Logits of every position of one sequence (N, N_T): row i predicts
  /// token i + 1. No ids give (0, N_T) logits (see the file comment).
  [[nodiscard]] RowMatrix<T> forward(std::span<const TokenId> ids) const {
    return project(hidden(ids));
  }

  /// forward() that also records what `what` asks for (hidden states,
  /// attention weights of chosen layers) and calls `hook` after every
  /// layer; the logits equal forward(ids). No ids: (0, N_T) logits, L + 1
  /// (0, d) hidden states when asked, no attention weights.
  /// \throws RangeError for a layer index outside [0, L), and as forward().
  [[nodiscard]] Inspection<T> inspect(std::span<const TokenId> ids, const InspectOptions& what = {},
                                      const LayerHook<T>& hook = {}) const {
    const Index n_l = n_layers();
    std::vector<char> record(static_cast<std::size_t>(n_l), what.layers.empty() ? 1 : 0);
    for (const Index l : what.layers) {
      require_index("layer", l, n_l, "the model's layers (L)");
      record[static_cast<std::size_t>(l)] = 1;
    }
    Inspection<T> out;
    RowMatrix<T> x = embed(ids, 0);
    if (what.attentions) out.attentions.resize(static_cast<std::size_t>(n_l));
    for (Index l = 0; l < n_l; ++l) {
      const Layer& layer = layers_[static_cast<std::size_t>(l)];
      if (what.hidden_states) out.hidden_states.push_back(x);
      if (ids.empty()) continue;  // see the file comment
      if (what.attentions && record[static_cast<std::size_t>(l)] != 0)
        out.attentions[static_cast<std::size_t>(l)] = layer.attention_weights(x);
      x = layer.forward(x);
      if (hook) hook(l, x);
    }
    if (!ids.empty()) final_norm_.apply(x);
    if (what.hidden_states) out.hidden_states.push_back(x);
    out.logits = ids.empty() ? RowMatrix<T>(0, vocab_size()) : project(x);
    return out;
  }

  /// Logits of every position of B sequences at once (one GEMM per
  /// projection over all their rows); returns the packed (sum N_b, N_T) rows.
  [[nodiscard]] RowMatrix<T> forward(const std::vector<std::vector<TokenId>>& batch) const {
    std::vector<Index> lengths;
    std::vector<TokenId> all;
    for (const auto& s : batch) {
      lengths.push_back(static_cast<Index>(s.size()));
      all.insert(all.end(), s.begin(), s.end());
    }
    RowMatrix<T> x(static_cast<Index>(all.size()), d_model());
    Index row = 0;
    for (const auto& s : batch) {
      x.middleRows(row, static_cast<Index>(s.size())) = embed(s, 0);
      row += static_cast<Index>(s.size());
    }
    if (all.empty()) return RowMatrix<T>(0, vocab_size());  // see the file comment
    for (const Layer& l : layers_) x = l.forward(SequenceBatch<T>{x, lengths});
    final_norm_.apply(x);
    return project(x);
  }

  /// An empty cache for one sequence, its rows stored in format F.
  template <cache::StorageFormat F = cache::Native>
  [[nodiscard]] CacheOf<F> make_cache() const {
    CacheOf<F> c;
    c.layers.reserve(layers_.size());
    for (const Layer& l : layers_) c.layers.push_back(l.template make_cache<F>());
    return c;
  }
  /// An empty cache for one sequence in a storage format chosen at run time
  /// (cache::Format; the measured error of each format is in kv_cache.hpp).
  [[nodiscard]] AnyCache make_cache(cache::Format format) const {
    return cache::with_format(format, [&](auto f) { return AnyCache{make_cache<decltype(f)>()}; });
  }

  /// Runs the new tokens `ids` that continue the sequence held in `cache`
  /// (prefill with the prompt, then one token per call) and appends them to
  /// it. Returns their logits (N_new, N_T), or the last row only (1, N_T).
  /// Equal to the rows of forward() on the whole sequence.
  /// \throws RangeError for an id outside the vocabulary or a position past
  ///         the learned table (the cache is then unchanged).
  template <cache::StorageFormat F>
  [[nodiscard]] RowMatrix<T> forward_cached(std::span<const TokenId> ids, CacheOf<F>& cache,
                                            LogitsFor which = LogitsFor::kAll) const {
    check_cache(cache);
    RowMatrix<T> x = embed(ids, cache.length());            // validates before any cache changes
    if (ids.empty()) return RowMatrix<T>(0, vocab_size());  // see the file comment
    for (std::size_t l = 0; l < layers_.size(); ++l)
      x = layers_[l].forward_cached(x, cache.layers[l]);
    cache.length_ += static_cast<Index>(ids.size());
    if (which == LogitsFor::kLast && x.rows() > 1) {
      RowMatrix<T> last = x.bottomRows(1);
      final_norm_.apply(last);
      return project(last);
    }
    final_norm_.apply(x);
    return project(x);
  }

  /// forward_cached over a cache of a run-time format.
  [[nodiscard]] RowMatrix<T> forward_cached(std::span<const TokenId> ids, AnyCache& cache,
                                            LogitsFor which = LogitsFor::kAll) const {
    return std::visit([&](auto& c) { return forward_cached(ids, c, which); }, cache.c);
  }

  /// One decoding step: forward_cached({id}, cache), the logits of the next
  /// token (1, N_T).
  /// \throws RangeError as forward_cached(ids, cache).
  template <class C>
  [[nodiscard]] RowMatrix<T> forward_cached(TokenId id, C& cache) const
      requires(std::same_as<C, AnyCache> || requires { typename C::Format; }) {
    return forward_cached(std::span<const TokenId>(&id, 1), cache);
  }

  /// forward_cached for B sequences in one call (sequence b continues
  /// *caches[b]); every projection is one GEMM over the new rows of all
  /// sequences. Returns the packed logits (sum N_b, N_T), or with kLast one
  /// row per sequence (B, N_T); a sequence with no new tokens gets a zero row.
  template <cache::StorageFormat F>
  [[nodiscard]] RowMatrix<T> forward_cached(const std::vector<std::vector<TokenId>>& batch,
                                            const std::vector<CacheOf<F>*>& caches,
                                            LogitsFor which = LogitsFor::kAll) const {
    if (batch.size() != caches.size())
      throw ShapeError("kappa: DecoderLM::forward_cached (batch): " + std::to_string(batch.size()) +
                       " sequences but " + std::to_string(caches.size()) + " caches");
    std::vector<Index> lengths;
    Index total = 0;
    for (std::size_t b = 0; b < batch.size(); ++b) {
      if (caches[b] == nullptr)
        throw ShapeError("kappa: DecoderLM::forward_cached: a cache is null");
      check_cache(*caches[b]);
      lengths.push_back(static_cast<Index>(batch[b].size()));
      total += lengths.back();
    }
    RowMatrix<T> x(total, d_model());
    Index row = 0;
    for (std::size_t b = 0; b < batch.size(); ++b) {
      x.middleRows(row, lengths[b]) = embed(batch[b], caches[b]->length());
      row += lengths[b];
    }
    if (total == 0) {  // no new token in any sequence: see the file comment
      return RowMatrix<T>::Zero(which == LogitsFor::kLast ? static_cast<Index>(batch.size()) : 0,
                                vocab_size());
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      std::vector<typename Layer::template CacheOf<F>*> lc;
      lc.reserve(caches.size());
      for (CacheOf<F>* c : caches) lc.push_back(&c->layers[l]);
      x = layers_[l].forward_cached(SequenceBatch<T>{x, lengths}, lc);
    }
    for (std::size_t b = 0; b < batch.size(); ++b) caches[b]->length_ += lengths[b];
    if (which == LogitsFor::kLast) {
      RowMatrix<T> last = RowMatrix<T>::Zero(static_cast<Index>(batch.size()), d_model());
      Index end = 0;
      for (std::size_t b = 0; b < batch.size(); ++b) {
        end += lengths[b];
        if (lengths[b] > 0) last.row(static_cast<Index>(b)) = x.row(end - 1);
      }
      final_norm_.apply(last);
      RowMatrix<T> logits = project(last);
      for (std::size_t b = 0; b < batch.size(); ++b)
        if (lengths[b] == 0) logits.row(static_cast<Index>(b)).setZero();
      return logits;
    }
    final_norm_.apply(x);
    return project(x);
  }

  /// The batch forward_cached over caches of a run-time format (all of one
  /// format). \throws ShapeError if a cache is null or of another format.
  [[nodiscard]] RowMatrix<T> forward_cached(const std::vector<std::vector<TokenId>>& batch,
                                            const std::vector<AnyCache*>& caches,
                                            LogitsFor which = LogitsFor::kAll) const {
    if (caches.empty()) return forward_cached(batch, std::vector<Cache*>{}, which);
    if (caches[0] == nullptr) throw ShapeError("kappa: DecoderLM::forward_cached: a cache is null");
    return std::visit(
        [&](auto& first) {
          using C = std::decay_t<decltype(first)>;
          std::vector<C*> typed;
          typed.reserve(caches.size());
          for (AnyCache* a : caches) {
            C* x = a == nullptr ? nullptr : std::get_if<C>(&a->c);
            if (x == nullptr)
              throw ShapeError(
                  "kappa: DecoderLM::forward_cached (batch): a cache is null or of another "
                  "format than the first (" +
                  std::string(cache::to_string(caches[0]->format())) + ")");
            typed.push_back(x);
          }
          return forward_cached(batch, typed, which);
        },
        caches[0]->c);
  }

  /// logits = H E_out^T for final hidden states H (N, d).
  [[nodiscard]] RowMatrix<T> project(ConstMatrixRef<T> h) const {
    require_shapes(h.cols() == d_model(), "DecoderLM::project", "H", h.rows(), h.cols(), "E_out",
                   vocab_size(), d_model(), "H must have d_model columns");
    RowMatrix<T> logits(h.rows(), vocab_size());
    if (dense_head()) {
      product_transposed_into<T>(h, output_ ? *output_ : embed_.table(), logits);  // (N, N_T)
    } else {
      head_.multiply_transposed(h, logits);  // (N, N_T)
    }
    if (final_cap_ > 0) {  // Gemma 2: logits <- c tanh(logits / c)
      const T c = static_cast<T>(final_cap_);
      logits = (c * (logits.array() / c).tanh()).matrix();
    }
    return logits;
  }

  /// Multiplies the looked-up embeddings by `s` before the first layer,
  /// X_0 = s E[ids] (Gemma: sqrt(d) as the checkpoint's dtype rounds it);
  /// the tied output head keeps E. \throws std::invalid_argument unless s is
  /// finite and > 0.
  void set_embedding_scale(double s) {
    if (!(s > 0) || !std::isfinite(s))
      throw std::invalid_argument("kappa: DecoderLM: the embedding scale must be finite and > 0");
    embed_scale_ = s;
  }
  [[nodiscard]] double embedding_scale() const { return embed_scale_; }
  /// Soft-caps the logits, logits <- c tanh(logits / c) (Gemma 2's
  /// final_logit_softcapping); 0 turns it off. \throws std::invalid_argument
  /// unless c is finite and >= 0.
  void set_final_logit_softcap(double c) {
    if (!(c >= 0) || !std::isfinite(c))
      throw std::invalid_argument(
          "kappa: DecoderLM: the final logit soft-cap must be finite "
          "and >= 0");
    final_cap_ = c;
  }
  [[nodiscard]] double final_logit_softcap() const { return final_cap_; }
  /// E_out (N_T x d) in the compute type: the separate head, or E when tied
  /// (a widened copy for non-dense storage).
  [[nodiscard]] RowMatrix<T> output_projection_dense() const {
    if (dense_head()) return output_ ? *output_ : embed_.table();
    return head_.dense();
  }

 private:
  template <class C>
  void check_cache(const C& c) const {
    if (c.layers.size() != layers_.size())
      throw ShapeError("kappa: DecoderLM: the cache has " + std::to_string(c.layers.size()) +
                       " layers but the model has " + std::to_string(layers_.size()) +
                       " (use make_cache())");
  }

  Embedding<T> embed_;
  Positions positions_;
  std::vector<Layer> layers_;
  Norm final_norm_;
  std::optional<RowMatrix<T>> output_;
  Index context_length_ = 0;
  double embed_scale_ = 1.0;         // X_0 = s E[ids] (set_embedding_scale)
  double final_cap_ = 0.0;           // logits soft-cap c; 0: none
  WeightMatrix<T, Storage> head_{};  // the output head, for non-dense storage
  bool untied_ = false;
  bool stored_head_ = false;  // head_ given in the storage (AsStoredWeights)
  // E in the storage (AsStoredWeights), read by rows; embed_ is then 0 x d.
  std::optional<WeightMatrix<T, Storage>> embed_rows_;

  /// AsStoredWeights keeps a head built from floats in T, as DenseWeights.
  static constexpr bool kHeadInT = requires { Storage::kPerMatrix; };
  /// Whether the logits use E_out in T (output_ or E) rather than head_.
  [[nodiscard]] bool dense_head() const {
    if constexpr (std::same_as<Storage, DenseWeights>)
      return true;
    else if constexpr (kHeadInT)
      return !stored_head_;
    else
      return false;
  }

 public:
  /// E_out (N_T x d) for dense storage: the separate output head, or E when tied.
  [[nodiscard]] const RowMatrix<T>& output_projection()
      const requires std::same_as<Storage, DenseWeights> {
    return output_ ? *output_ : embed_.table();
  }
};

/// The masked-language-model head of BERT: logits = LN(act(H W_t + b_t)) E^T + b.
template <Scalar T, class Act = Gelu>
struct MaskedLMHead {
  RowMatrix<T> w_transform;  ///< W_t (d, d)
  RowVector<T> b_transform;  ///< b_t (d)
  LayerNorm<T> norm;         ///< LN
  RowVector<T> bias;         ///< b (N_T)
};

/// An encoder-only model (BERT): embeddings with learned positions and token
/// types, then encoder layers; hidden() gives the contextual embeddings and
/// mlm_logits() the masked-LM head's logits.
/// \tparam Layer  an EncoderLayer<T, ...>
template <Scalar T, class Layer, class HeadAct = Gelu>
class EncoderOnlyModel {
 public:
  using value_type = T;

  EncoderOnlyModel(Embedding<T> words, LearnedPositions<T> positions, RowMatrix<T> token_types,
                   LayerNorm<T> embed_norm, std::vector<Layer> layers,
                   std::optional<MaskedLMHead<T, HeadAct>> head = std::nullopt)
      : words_(std::move(words)),
        positions_(std::move(positions)),
        types_(std::move(token_types)),
        embed_norm_(std::move(embed_norm)),
        layers_(std::move(layers)),
        head_(std::move(head)) {
    const Index d = words_.dim();
    require_shapes(positions_.dim() == d, "EncoderOnlyModel", "the positions", 1, positions_.dim(),
                   "E", words_.vocab_size(), d, "widths must agree");
    require_shapes(types_.cols() == d, "EncoderOnlyModel", "the token types", types_.rows(),
                   types_.cols(), "E", words_.vocab_size(), d, "widths must agree");
    if (head_) {
      require_shapes(head_->w_transform.rows() == d && head_->w_transform.cols() == d,
                     "EncoderOnlyModel", "W_t", head_->w_transform.rows(),
                     head_->w_transform.cols(), "(d x d)", d, d, "the MLM transform is d x d");
      require_shapes(head_->bias.size() == words_.vocab_size(), "EncoderOnlyModel", "the MLM bias",
                     1, head_->bias.size(), "E", words_.vocab_size(), d, "one bias per token");
    }
  }

  [[nodiscard]] Index vocab_size() const { return words_.vocab_size(); }
  [[nodiscard]] Index d_model() const { return words_.dim(); }
  [[nodiscard]] Index n_layers() const { return static_cast<Index>(layers_.size()); }
  [[nodiscard]] Index max_positions() const { return positions_.max_positions(); }

  /// The contextual embeddings X_L (N, d) of one sequence; `token_types`
  /// empty means all 0. \throws RangeError for an id, a type or a position
  /// out of range; ShapeError if token_types has another length.
  [[nodiscard]] RowMatrix<T> hidden(std::span<const TokenId> ids,
                                    std::span<const TokenId> token_types = {}) const {
    RowMatrix<T> x = embed(ids, token_types);
    if (ids.empty()) return x;  // (0, d): see the file comment
    for (const Layer& l : layers_) x = l.forward(x);
    return x;
  }

  /// Masked-LM logits (N, N_T). \throws std::logic_error without a head.
  [[nodiscard]] RowMatrix<T> mlm_logits(std::span<const TokenId> ids,
                                        std::span<const TokenId> token_types = {}) const {
    if (!head_) throw std::logic_error("kappa: EncoderOnlyModel: this model has no MLM head");
    const RowMatrix<T> h = hidden(ids, token_types);
    RowMatrix<T> t(h.rows(), d_model());
    t.noalias() = h * head_->w_transform;  // (N, d)
    if (head_->b_transform.size() > 0) t.rowwise() += head_->b_transform;
    HeadAct::template apply<T>(t);
    head_->norm.apply(t);
    RowMatrix<T> logits(h.rows(), vocab_size());
    logits.noalias() = t * words_.table().transpose();  // (N, N_T)
    logits.rowwise() += head_->bias;
    return logits;
  }

 private:
  RowMatrix<T> embed(std::span<const TokenId> ids, std::span<const TokenId> types) const {
    RowMatrix<T> x = words_.lookup(ids);
    x += positions_.encode(x.rows(), 0);
    if (!types.empty()) {
      require_shapes(types.size() == ids.size(), "EncoderOnlyModel", "token_types",
                     static_cast<Index>(types.size()), 1, "ids", static_cast<Index>(ids.size()), 1,
                     "one token type per id");
      for (std::size_t i = 0; i < types.size(); ++i) {
        require_index("token type", types[i], types_.rows(), "the token type table");
        x.row(static_cast<Index>(i)) += types_.row(types[i]);
      }
    } else if (types_.rows() > 0) {
      x.rowwise() += types_.row(0);
    }
    embed_norm_.apply(x);
    return x;
  }

  Embedding<T> words_;
  LearnedPositions<T> positions_;
  RowMatrix<T> types_;
  LayerNorm<T> embed_norm_;
  std::vector<Layer> layers_;
  std::optional<MaskedLMHead<T, HeadAct>> head_;
};

/// The encoder-decoder Transformer of the paper (Vaswani et al. 2017):
/// X_src = sqrt(d) E_src[src] + P, encoder layers (and an optional final
/// norm) give M; X_tgt = sqrt(d) E_tgt[tgt] + P, decoder layers over M (and
/// an optional final norm), then logits = H W_g^T + b_g.
/// \tparam EncLayer  an EncoderLayer<T, ...>;  \tparam DecLayer a DecoderLayer<T, ...>
template <Scalar T, class EncLayer, class DecLayer, class Norm = LayerNorm<T>>
class EncoderDecoderModel {
 public:
  using value_type = T;
  /// The decoder's caches of one target sequence, one per layer: each holds
  /// the layer's self-attention tokens and its cross-attention K, V of M.
  using DecoderCache = std::vector<typename DecLayer::Cache>;

  struct Parts {
    Embedding<T> src_embed, tgt_embed;
    bool scale_embedding = true;  ///< multiply embeddings by sqrt(d) (section 3.4)
    std::vector<EncLayer> encoder;
    std::optional<Norm> encoder_norm;
    std::vector<DecLayer> decoder;
    std::optional<Norm> decoder_norm;
    RowMatrix<T> generator;       ///< W_g (N_T_tgt x d)
    RowVector<T> generator_bias;  ///< b_g (N_T_tgt), or empty
  };

  explicit EncoderDecoderModel(Parts p) : p_(std::move(p)), positions_(p_.tgt_embed.dim()) {
    const Index d = p_.tgt_embed.dim();
    require_shapes(p_.src_embed.dim() == d, "EncoderDecoderModel", "E_src",
                   p_.src_embed.vocab_size(), p_.src_embed.dim(), "E_tgt",
                   p_.tgt_embed.vocab_size(), d, "widths must agree");
    require_shapes(p_.generator.cols() == d, "EncoderDecoderModel", "W_g", p_.generator.rows(),
                   p_.generator.cols(), "d_model", 1, d, "the generator maps d to N_T");
    require_shapes(p_.generator_bias.size() == 0 || p_.generator_bias.size() == p_.generator.rows(),
                   "EncoderDecoderModel", "b_g", 1, p_.generator_bias.size(), "W_g",
                   p_.generator.rows(), d, "one bias per target token");
  }

  [[nodiscard]] Index d_model() const { return p_.tgt_embed.dim(); }
  [[nodiscard]] Index tgt_vocab_size() const { return p_.generator.rows(); }
  /// The decoder's layers (their cross-attention, for instance).
  [[nodiscard]] const std::vector<DecLayer>& decoder_layers() const { return p_.decoder; }

  /// The encoder output M (N_src, d).
  [[nodiscard]] RowMatrix<T> encode(std::span<const TokenId> src) const {
    RowMatrix<T> x = input(p_.src_embed, src, 0);
    if (src.empty()) return x;  // (0, d): see the file comment
    for (const EncLayer& l : p_.encoder) x = l.forward(x);
    if (p_.encoder_norm) p_.encoder_norm->apply(x);
    return x;
  }
  /// Logits (N_tgt, N_T_tgt) of the target tokens over the memory M.
  [[nodiscard]] RowMatrix<T> decode(ConstMatrixRef<T> memory, std::span<const TokenId> tgt) const {
    RowMatrix<T> x = input(p_.tgt_embed, tgt, 0);
    if (tgt.empty()) return RowMatrix<T>(0, tgt_vocab_size());  // see the file comment
    for (const DecLayer& l : p_.decoder) x = l.forward(x, memory);
    return finish(x);
  }
  /// decode(encode(src), tgt).
  [[nodiscard]] RowMatrix<T> forward(std::span<const TokenId> src,
                                     std::span<const TokenId> tgt) const {
    const RowMatrix<T> m = encode(src);
    return decode(m, tgt);
  }
  /// An empty cache for one target sequence: one DecoderLayer cache per
  /// layer, without memory until set_memory() or the first decode_cached().
  [[nodiscard]] DecoderCache make_cache() const {
    DecoderCache c;
    c.reserve(p_.decoder.size());
    for (const DecLayer& l : p_.decoder) c.push_back(l.make_cache());
    return c;
  }
  /// Projects the memory M (N_src, d) into every layer's cross-attention K
  /// and V in `cache`, replacing any memory it held (see the file comment).
  /// \throws ShapeError for a cache of another model or M of another width.
  void set_memory(ConstMatrixRef<T> memory, DecoderCache& cache) const {
    check_cache(cache);
    for (std::size_t l = 0; l < p_.decoder.size(); ++l) p_.decoder[l].set_memory(memory, cache[l]);
  }
  /// New target tokens continuing the sequence in `cache`, over M; returns
  /// their logits. Equal to the rows of decode() on the whole target. The
  /// first call projects M's K and V into the cache (unless set_memory did);
  /// later calls reuse them and must pass the same M (see the file comment).
  /// \throws ShapeError if M is not the memory the cache holds (the cache is
  ///         then unchanged); RangeError for an id outside the vocabulary.
  [[nodiscard]] RowMatrix<T> decode_cached(ConstMatrixRef<T> memory, std::span<const TokenId> tgt,
                                           DecoderCache& cache) const {
    check_cache(cache);
    for (std::size_t l = 0; l < p_.decoder.size(); ++l)  // before anything changes
      p_.decoder[l].check_memory(memory, cache[l]);
    RowMatrix<T> x = input(p_.tgt_embed, tgt, cache.empty() ? 0 : cache[0].length());
    if (tgt.empty()) return RowMatrix<T>(0, tgt_vocab_size());  // see the file comment
    for (std::size_t l = 0; l < p_.decoder.size(); ++l)
      if (!cache[l].has_memory()) p_.decoder[l].set_memory(memory, cache[l]);
    return decode_layers(x, cache);
  }
  /// decode_cached over the memory `cache` holds (set_memory, or an earlier
  /// decode_cached(memory, ...)), without passing it.
  /// \throws std::logic_error if the cache holds no memory; RangeError for
  ///         an id outside the vocabulary.
  [[nodiscard]] RowMatrix<T> decode_cached(std::span<const TokenId> tgt,
                                           DecoderCache& cache) const {
    check_cache(cache);
    for (const auto& c : cache)
      if (!c.has_memory())
        throw std::logic_error(
            "kappa: EncoderDecoderModel::decode_cached: the cache holds no memory: call "
            "set_memory(memory, cache) or decode_cached(memory, tgt, cache) first");
    RowMatrix<T> x = input(p_.tgt_embed, tgt, cache.empty() ? 0 : cache[0].length());
    if (tgt.empty()) return RowMatrix<T>(0, tgt_vocab_size());  // see the file comment
    return decode_layers(x, cache);
  }

 private:
  RowMatrix<T> input(const Embedding<T>& e, std::span<const TokenId> ids, Index first) const {
    RowMatrix<T> x = e.lookup(ids);
    if (p_.scale_embedding) x *= static_cast<T>(std::sqrt(static_cast<double>(d_model())));
    x += positions_.encode(x.rows(), first);
    return x;
  }
  void check_cache(const DecoderCache& cache) const {
    if (cache.size() != p_.decoder.size())
      throw ShapeError("kappa: EncoderDecoderModel: the cache has " + std::to_string(cache.size()) +
                       " layers but the decoder has " + std::to_string(p_.decoder.size()) +
                       " (use make_cache())");
  }
  /// The decoder layers over their caches' memory, then the logits.
  RowMatrix<T> decode_layers(RowMatrix<T>& x, DecoderCache& cache) const {
    for (std::size_t l = 0; l < p_.decoder.size(); ++l)
      x = p_.decoder[l].forward_cached(x, cache[l]);
    return finish(x);
  }
  RowMatrix<T> finish(RowMatrix<T>& x) const {
    if (p_.decoder_norm) p_.decoder_norm->apply(x);
    RowMatrix<T> logits(x.rows(), p_.generator.rows());
    logits.noalias() = x * p_.generator.transpose();
    if (p_.generator_bias.size() > 0) logits.rowwise() += p_.generator_bias;
    return logits;
  }

  Parts p_;
  SinusoidalPositions<T> positions_;
};

}  // namespace kappa
