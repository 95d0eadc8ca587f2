// kappa/dist/tensor_parallel.hpp - a decoder-only model split over the
// ranks of an MPI communicator by heads, feed-forward columns and experts
// (tensor and expert parallelism), each rank reading only its share of the
// weights from the memory-mapped safetensors.
//
// Who holds what (partition.hpp): rank r holds
//   - the query heads [floor(r H / P), floor((r + 1) H / P)) and the
//     key/value heads they read: the columns of W^Q, W^K, W^V (their rows in
//     Hugging Face's out x in layout) and the rows of W^O, and their cache;
//   - latent attention (DeepSeek MLA): its heads' columns of W^Q (or W^UQ
//     and W^QR, after the replicated down-projection W^DQ), their
//     W^UK / W^UV (kv_b_proj's rows) and W^O rows; the down-projection W^DKV,
//     its norm and the shared RoPE key W^KR are replicated, and so is the
//     latent cache (c^KV and k^R of every token): every head reads the whole
//     latent, so splitting it would cost an allgather per layer and step for
//     d_c + d_R numbers per token that are cheap to recompute, and the cache
//     is already the small one (576 numbers per token and layer on
//     DeepSeek-V2, against 32768 for its 128 heads uncompressed);
//   - the feed-forward columns [floor(r d_ff / P), floor((r + 1) d_ff / P))
//     of W_gate and W_up and those rows of W_down;
//   - mixture-of-experts layers: the router whole, the shared expert split
//     by columns as a dense feed-forward, and the routed experts split one
//     of two ways (LoadOptions::experts):
//       ExpertSplit::kWhole (expert parallelism, the default): the experts
//         [floor(r E / P), floor((r + 1) E / P)) whole;
//       ExpertSplit::kColumns: every expert, by the columns of its width.
//     The hidden states are already on every rank (the attention's allreduce
//     put them there), so no token has to travel to its expert: every rank
//     routes every token (the same choice, from the same bits), runs its
//     part, and the sum over ranks is the same one allreduce of d numbers
//     per token as a dense layer's. An all-to-all exchange of tokens would
//     pay off only with data-parallel attention (each rank its own tokens),
//     which this layout does not use. Whole experts make fewer, larger
//     products (prefill, batches); but a decode step's k experts fall
//     unevenly on the ranks, and the busiest rank sets the step's time
//     (benchmarks/README.md, "Across machines": with DeepSeek-V2's routing
//     on 8 ranks the busiest reads 2.9 of the 6 experts, not 0.75), which
//     the column split avoids: every rank reads 1 / P of each chosen expert;
//   - the output head's rows [floor(r N_T / P), floor((r + 1) N_T / P)) (of
//     E for tied embeddings); one allgather gives every rank the whole row
//     of logits.
// Norms and the embedding are replicated; biases after W^O and W_down are
// added by rank 0 only. Per token and layer each rank hands 2 d numbers to
// allreduce (the payload; a ring allreduce then sends 2 (P - 1) / P of it
// per rank).
//
// The layers are the library's own (sharded.hpp wraps them), the model a
// DecoderLM inside TensorParallelLM: kappa::generate runs unchanged on
// every rank, in lockstep, and rank 0 prints.
//
//   kappa::dist::Environment env(argc, argv);
//   auto lm = kappa::dist::load_llama<float>("Llama-3.2-1B");   // this rank's share
//   auto tok = kappa::tokenize::HfTokenizer::from_directory("Llama-3.2-1B");
//   kappa::Generation g = kappa::generate(lm, tok, "The heads are", opt);  // every rank
//
// Loaders, by model_type (with_model picks one): load_gpt2 (gpt2),
// load_llama (llama, qwen2, mistral and phi3 without a sliding window;
// Phi-3's fused qkv_proj / gate_up_proj read by the rank's rows),
// load_llama_sliding (mistral, phi3 with one), load_qwen3 (qwen3),
// load_gemma (gemma2, gemma3_text), load_llama_moe (mixtral, qwen2_moe),
// load_deepseek (deepseek_v2, deepseek_v3, dense or with experts);
// with_gguf_model for GGUF files (llama, qwen2, qwen3, qwen2moe; each rank
// keeps its slices dequantized).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/dist/communicator.hpp"
#include "kappa/dist/partition.hpp"
#include "kappa/dist/sharded.hpp"
#include "kappa/io/gguf.hpp"
#include "kappa/io/safetensors.hpp"
#include "kappa/transformer/architectures.hpp"
#include "kappa/transformer/gguf_load.hpp"
#include "kappa/transformer/hf.hpp"

namespace kappa::dist {

/// One rank's layer of a LLaMA-layout model: the library's layer with the
/// rank's attention heads and feed-forward share. The models below take the
/// library's weight storage policy S for their projections, feed-forward and
/// head (DenseWeights; Bf16Weights, or a block format where the slices'
/// widths are multiples of its block): each rank reads its slices in T and
/// stores them in S, so a BF16 checkpoint's share is held in BF16.
template <Scalar T, class Attention, class Ffn, class Mask = CausalMask>
using TpDecoderLayer =
    DecoderOnlyLayer<T, ShardedAttention<Attention>, RMSNorm<T>, ShardedFfn<Ffn>, PreNorm, Mask>;
template <Scalar T, class Layer, WeightStoragePolicy S = DenseWeights>
using TpDecoderLM = DecoderLM<T, Layer, NoAbsolutePositions, S>;

/// LLaMA, Qwen2, Mistral (without a window).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpLlamaLayer = TpDecoderLayer<T, LlamaAttention<T, S>, SwiGlu<T, S>>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpLlama = TpDecoderLM<T, TpLlamaLayer<T, S>, S>;
/// Mistral and Phi-3 with their sliding window.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpMistralSliding =
    TpDecoderLM<T, TpDecoderLayer<T, LlamaAttention<T, S>, SwiGlu<T, S>, SlidingWindowMask>, S>;
/// Gemma 2 and 3: sandwich norms, GeGLU, sliding and global layers.
template <Scalar T, class Attention, WeightStoragePolicy S = DenseWeights>
using TpGemmaLayer =
    DecoderOnlyLayer<T, ShardedAttention<Attention>, Sandwich<RMSNorm<T>>,
                     ShardedFfn<GatedMlp<T, GeluTanh, S>>, SandwichNorm, SlidingWindowMask>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpGemma2 = TpDecoderLM<T, TpGemmaLayer<T, Gemma2Attention<T, S>, S>, S>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpGemma3 = TpDecoderLM<T, TpGemmaLayer<T, Qwen3Attention<T, S>, S>, S>;
/// Qwen3 (QK-norm before RoPE).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpQwen3 = TpDecoderLM<T, TpDecoderLayer<T, Qwen3Attention<T, S>, SwiGlu<T, S>>, S>;
/// Mixtral, Qwen2-MoE: a layer's feed-forward is dense or the rank's experts.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpLlamaMoe =
    TpDecoderLM<T, TpDecoderLayer<T, LlamaAttention<T, S>, SwiGluOrExperts<T, S>>, S>;
/// DeepSeek-V2 / V3: latent attention (the absorbed path; its projections
/// in T, as in one process), dense or expert feed-forward layers.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpDeepSeek = TpDecoderLM<
    T, TpDecoderLayer<T, LatentAttention<T, AbsorbedLatent, Interleaved>, SwiGluOrExperts<T, S>>,
    S>;

/// How the routed experts of a mixture are split over the ranks (see the
/// file comment).
enum class ExpertSplit {
  kWhole,    ///< expert parallelism: each rank holds whole experts
  kColumns,  ///< each rank holds its columns of every expert
};

/// Options of the loaders.
struct LoadOptions {
  ExpertSplit experts = ExpertSplit::kWhole;
};

namespace detail {

/// What one rank takes of each kind of tensor (see the file comment).
struct ShardPlan {
  HeadShare heads;
  /// Per head: W^Q's rows (out x in), W^K / W^V's (or latent attention's
  /// kv_b_proj's) rows, W^O's columns.
  Index q_width = 0, kv_width = 0, o_width = 0;
  ColumnShare ffn;      ///< dense feed-forward columns
  ColumnShare shared;   ///< the shared expert's columns (empty: none)
  ColumnShare experts;  ///< the routed experts held (empty: no expert layers)
  /// With ExpertSplit::kColumns: every expert is held, by these columns of
  /// its width (experts then spans all of them).
  std::optional<ColumnShare> expert_columns;
  ColumnShare vocab;   ///< the output head's rows
  bool rank0 = false;  ///< adds the biases after W^O and W_down
  /// The whole layer's heads, key/value heads and d_ff: where the parts of
  /// Phi-3's fused tensors begin (qkv_proj: q, k, v; gate_up_proj: gate, up).
  Index n_head = 0, n_kv = 0, d_ff = 0;
};

/// The checkpoint as one rank sees it: its slices of the projections under
/// the Hugging Face names (the Source of hf::detail::Weights). Each slice
/// is read from the mapped file (a view for F32, else the one tensor
/// converted, then sliced); everything else is passed through, and the
/// routed experts are read whole by the loader for the experts the rank
/// holds only.
///
/// \tparam Full  the whole checkpoint under the Hugging Face names: an
///               io::Checkpoint (safetensors: F32 slices read from views of
///               the mapped file) or transformer/gguf_load.hpp's GgufTensors
///               (each tensor dequantized, then sliced).
template <class Full = io::Checkpoint>
class ShardedCheckpoint {
 public:
  ShardedCheckpoint(const Full& full, ShardPlan plan) : full_(full), plan_(std::move(plan)) {}

  [[nodiscard]] bool has(std::string_view name) const { return name == kHead || full_.has(name); }
  [[nodiscard]] decltype(auto) info(std::string_view name) const {
    return full_.info(name == kHead && !full_.has(name) ? kEmbedding : name);
  }
  void require_shape(std::string_view name, const std::vector<std::int64_t>& expected) const {
    if (kind(name) == Kind::kWhole) full_.require_shape(name, expected);
    // a sliced tensor's shape is checked against the whole one when read
  }
  template <class U>
  [[nodiscard]] RowVector<U> row_vector(std::string_view name) const {
    const Kind k = kind(name);
    if (k == Kind::kWhole) return full_.template row_vector<U>(name);
    const RowVector<U> all = full_.template row_vector<U>(name);
    if (k == Kind::kRank0Bias) return plan_.rank0 ? all : RowVector<U>::Zero(all.size());
    const std::vector<Index> take = indices(k);
    RowVector<U> out(static_cast<Index>(take.size()));
    for (std::size_t i = 0; i < take.size(); ++i) {
      require(take[i] < all.size(), name);
      out(static_cast<Index>(i)) = all(take[i]);
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
    const Eigen::Map<const RowMatrix<U>> all = whole<U>(name, owned);
    const std::vector<Index> take = indices(k);
    const auto n = static_cast<Index>(take.size());
    const bool by_rows = k != Kind::kOCols && k != Kind::kFfnCols && k != Kind::kSharedCols &&
                         k != Kind::kExpertCols;
    RowMatrix<U> out(by_rows ? n : all.rows(), by_rows ? all.cols() : n);
    for (Index i = 0; i < n; ++i) {
      const Index at = take[static_cast<std::size_t>(i)];
      require(at < (by_rows ? all.rows() : all.cols()), name);
      if (by_rows)
        out.row(i) = all.row(at);
      else
        out.col(i) = all.col(at);
    }
    // The loader asks for the whole head (N_T, d): this rank's rows of it.
    check_expected(name, out,
                   k == Kind::kHeadRows && expected.size() == 2
                       ? std::vector<std::int64_t>{out.rows(), expected[1]}
                       : expected);
    return out;
  }

 private:
  // Tensor `name` whole: a view of the mapped file when it stores U, else
  // read (converted) into `owned`.
  template <class U>
  Eigen::Map<const RowMatrix<U>> whole(std::string_view name, RowMatrix<U>& owned) const {
    if constexpr (requires { full_.template can_view<U>(name); }) {
      if (full_.template can_view<U>(name)) return full_.template view<U>(name);
      owned = full_.template matrix<U>(name);
    } else {
      owned = full_.template matrix<U>(name, full_.hf_shape(name));
    }
    return Eigen::Map<const RowMatrix<U>>(owned.data(), owned.rows(), owned.cols());
  }

  enum class Kind {
    kWhole,
    kQRows,
    kKvRows,
    kOCols,
    kRank0Bias,
    kFfnRows,
    kFfnCols,
    kSharedRows,
    kSharedCols,
    kExpertRows,
    kExpertCols,
    kQkvRows,
    kGateUpRows,
    kHeadRows
  };
  static constexpr std::string_view kHead = "lm_head.weight";
  static constexpr std::string_view kEmbedding = "model.embed_tokens.weight";
  static bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  }
  static bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
  }
  static bool any_end(std::string_view n, std::initializer_list<std::string_view> suffixes) {
    for (const std::string_view x : suffixes)
      if (ends_with(n, x)) return true;
    return false;
  }
  [[nodiscard]] Kind kind(std::string_view n) const {
    const Kind k = kind_of(n);
    if ((k == Kind::kExpertRows || k == Kind::kExpertCols) && !plan_.expert_columns)
      return Kind::kWhole;
    return k;
  }
  static Kind kind_of(std::string_view n) {
    if (n == kHead) return Kind::kHeadRows;
    if (!contains(n, ".layers.")) return Kind::kWhole;
    if (contains(n, ".experts.")) {  // routed: the held ones, whole or by columns
      if (any_end(n, {"gate_proj.weight", "up_proj.weight", ".w1.weight", ".w3.weight"}))
        return Kind::kExpertRows;
      if (any_end(n, {"down_proj.weight", ".w2.weight"})) return Kind::kExpertCols;
      return Kind::kWhole;
    }
    if (contains(n, ".shared_expert.") || contains(n, ".shared_experts.")) {
      if (any_end(n, {"gate_proj.weight", "up_proj.weight"})) return Kind::kSharedRows;
      if (ends_with(n, "down_proj.weight")) return Kind::kSharedCols;
      return Kind::kWhole;
    }
    if (any_end(n,
                {"self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.q_b_proj.weight"}))
      return Kind::kQRows;
    if (any_end(n, {"self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                    "self_attn.v_proj.bias", "self_attn.kv_b_proj.weight"}))
      return Kind::kKvRows;
    if (ends_with(n, "self_attn.o_proj.weight")) return Kind::kOCols;
    if (ends_with(n, "self_attn.qkv_proj.weight")) return Kind::kQkvRows;
    if (ends_with(n, "mlp.gate_up_proj.weight")) return Kind::kGateUpRows;
    if (any_end(n, {"self_attn.o_proj.bias", "mlp.down_proj.bias"})) return Kind::kRank0Bias;
    if (any_end(n, {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.gate_proj.bias",
                    "mlp.up_proj.bias"}))
      return Kind::kFfnRows;
    if (ends_with(n, "mlp.down_proj.weight")) return Kind::kFfnCols;
    return Kind::kWhole;
  }
  // The rows (or columns) of the whole tensor this rank takes.
  [[nodiscard]] std::vector<Index> indices(Kind k) const {
    std::vector<Index> out;
    const auto heads = [&](Index width) {
      for (Index h = plan_.heads.q_begin; h < plan_.heads.q_end; ++h)
        for (Index c = 0; c < width; ++c) out.push_back(h * width + c);
    };
    const auto range = [&](ColumnShare c) {
      for (Index i = c.begin; i < c.end; ++i) out.push_back(i);
    };
    switch (k) {
      case Kind::kQRows:
        heads(plan_.q_width);
        break;
      case Kind::kOCols:
        heads(plan_.o_width);
        break;
      case Kind::kKvRows:
        for (const Index h : plan_.heads.kv_heads)
          for (Index c = 0; c < plan_.kv_width; ++c) out.push_back(h * plan_.kv_width + c);
        break;
      case Kind::kFfnRows:
      case Kind::kFfnCols:
        range(plan_.ffn);
        break;
      case Kind::kSharedRows:
      case Kind::kSharedCols:
        range(plan_.shared);
        break;
      case Kind::kExpertRows:
      case Kind::kExpertCols:
        range(*plan_.expert_columns);
        break;
      case Kind::kQkvRows: {  // this rank's rows of q, then of k, then of v
        heads(plan_.q_width);
        const Index dh = plan_.kv_width, k0 = plan_.n_head * plan_.q_width,
                    v0 = k0 + plan_.n_kv * dh;
        for (const Index base : {k0, v0})
          for (const Index h : plan_.heads.kv_heads)
            for (Index c = 0; c < dh; ++c) out.push_back(base + h * dh + c);
        break;
      }
      case Kind::kGateUpRows:  // this rank's rows of gate, then of up
        range(plan_.ffn);
        for (Index i = plan_.ffn.begin; i < plan_.ffn.end; ++i) out.push_back(plan_.d_ff + i);
        break;
      case Kind::kHeadRows:
        range(plan_.vocab);
        break;
      default:
        break;
    }
    return out;
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

  const Full& full_;
  ShardPlan plan_;
};

/// model_type of dir's config.json, which must be one of `accepted` (else
/// std::invalid_argument naming the loader and what it accepts).
inline std::string require_type(const hf::Config& c, const char* loader,
                                std::initializer_list<std::string_view> accepted) {
  const std::string type = c.string("model_type");
  std::string list;
  for (const std::string_view a : accepted) {
    if (type == a) return type;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw std::invalid_argument("kappa: dist::" + std::string(loader) + ": model_type " +
                              kappa::quoted(type) + " is not one it loads (" + list + ")");
}

/// This rank's experts in `plan` (none when no layer is a mixture): whole
/// experts, or the columns of every one.
/// \throws std::invalid_argument when there are more ranks than experts
///         (kWhole) or than an expert's columns (kColumns).
inline void share_experts(ShardPlan& plan, const hf::MoeSizes& m, ExpertSplit split,
                          const Communicator& comm) {
  if (!m.any_sparse()) return;
  if (split == ExpertSplit::kColumns) {
    plan.experts = {0, m.router.n_experts};
    plan.expert_columns = share_columns(m.d_expert, comm.rank(), comm.size());
    return;
  }
  if (comm.size() > m.router.n_experts)
    throw std::invalid_argument("kappa: dist: " + std::to_string(m.router.n_experts) +
                                " experts over " + std::to_string(comm.size()) +
                                " ranks: more ranks than experts (every rank holds at least one)");
  plan.experts = share_columns(m.router.n_experts, comm.rank(), comm.size());
}

/// A layer's feed-forward on this rank: its columns of a dense one, or its
/// experts of a mixture (with its columns of the shared expert).
template <Scalar T, WeightStoragePolicy S, class W>
ShardedFfn<SwiGluOrExperts<T, S>> read_sharded_ffn(const W& w, Index i, const std::string& p,
                                                   Index d, const hf::MoeSizes& m,
                                                   const ShardPlan& plan,
                                                   const Communicator& comm) {
  if (!m.sparse[static_cast<std::size_t>(i)])
    return ShardedFfn<SwiGluOrExperts<T, S>>(
        hf::detail::read_llama_mlp<T, S>(w, p, d, plan.ffn.size()), comm);
  hf::MoeSizes local = m;
  local.d_shared = plan.shared.size();
  if (plan.expert_columns) local.d_expert = plan.expert_columns->size();
  return ShardedFfn<SwiGluOrExperts<T, S>>(
      hf::detail::read_moe<T, S>(w, p, d, local,
                                 std::pair<Index, Index>{plan.experts.begin, plan.experts.end}),
      comm);
}

/// A LLaMA-layout model of sizes s on this rank: the plan for its heads,
/// columns, experts and vocabulary; the model built by hf::detail::
/// build_llama from the rank's view of the checkpoint `full` (an
/// io::Checkpoint or GgufTensors), with the position policy make_position
/// and the feed-forward make_ffn(w, i, p, plan).
template <Scalar T, WeightStoragePolicy S, class Layer, class Full, class Mask, class MakePosition,
          class MakeFfn>
TensorParallelLM<TpDecoderLM<T, Layer, S>> load_llama_layout(
    const Full& full, const hf::LlamaSizes& s, const hf::MoeSizes* m, const LoadOptions& options,
    Mask mask, MakePosition make_position, MakeFfn make_ffn) {
  const Communicator& comm = Communicator::world();
  ShardPlan plan;
  plan.n_head = s.n_head;
  plan.n_kv = s.n_kv;
  plan.d_ff = s.d_ff;
  plan.heads = share_heads(s.n_head, s.n_kv, comm.rank(), comm.size());
  plan.q_width = plan.kv_width = plan.o_width = s.d_head;
  plan.ffn = share_columns(s.d_ff, comm.rank(), comm.size());
  if (m != nullptr) {
    detail::share_experts(plan, *m, options.experts, comm);
    if (m->d_shared > 0) plan.shared = share_columns(m->d_shared, comm.rank(), comm.size());
  }
  plan.vocab = share_columns(s.vocab, comm.rank(), comm.size());
  plan.rank0 = comm.rank() == 0;
  const ShardedCheckpoint<Full> part(full, plan);
  hf::LlamaSizes local = s;
  local.tied = false;  // a tied head is this rank's rows of E, held apart
  local.n_head = plan.heads.n_q();
  local.n_kv = plan.heads.n_kv();
  local.q_width = local.n_head * s.d_head;
  local.kv_width = local.n_kv * s.d_head;
  local.d_ff = plan.ffn.size();
  TpDecoderLM<T, Layer, S> model = hf::detail::build_llama<T, S, Layer>(
      local, part, mask, make_position(s),
      [&](const auto& w, Index i, const std::string& p) { return make_ffn(w, i, p, plan); });
  return TensorParallelLM<TpDecoderLM<T, Layer, S>>(std::move(model), s.vocab, comm);
}

}  // namespace detail

namespace detail {
/// A LLaMA-layout model of type Model (TpLlama or TpMistralSliding) from
/// `full`: llama, qwen2, mistral, phi3 (fused projections, LongRoPE; `c`
/// its config).
template <Scalar T, class Model, class Full, class Mask,
          WeightStoragePolicy S = typename Model::StorageType>
TensorParallelLM<Model> load_llama_like(const Full& full, const hf::Config& c,
                                        const hf::LlamaSizes& s, Mask mask) {
  TensorParallelLM<Model> lm = load_llama_layout<T, S, typename Model::LayerType>(
      full, s, nullptr, {}, mask,
      [](const hf::LlamaSizes& z) { return hf::detail::llama_rope<T>(z); },
      [&](const auto& w, Index, const std::string& p, const ShardPlan& plan) {
        if (s.tensors == hf::LlamaSizes::Tensors::kFused)
          return ShardedFfn<SwiGlu<T, S>>(
              hf::detail::read_fused_mlp<T, S>(w, p, s.d, plan.ffn.size(), c));
        return ShardedFfn<SwiGlu<T, S>>(
            hf::detail::read_llama_mlp<T, S>(w, p, s.d, plan.ffn.size()));
      });
  if (s.scaling.kind == RopeScaling::Kind::kLongRope)  // as hf::load_causal_lm
    lm.set_cache_refresh_length(s.scaling.original_context);
  return lm;
}
}  // namespace detail

/// This rank's share of a LLaMA-layout model directory (config.json and
/// safetensors) without a sliding window: model_type llama, qwen2, mistral
/// or phi3 (its fused qkv_proj and gate_up_proj read by this rank's rows);
/// float or double. Every rank of MPI_COMM_WORLD calls it (the ranks of the
/// world split the model).
/// \throws std::invalid_argument naming what is not supported (another
///         model_type, a sliding window: load_llama_sliding) or a split that
///         cannot be made (more ranks than heads or than d_ff columns); as
///         hf::load_causal_lm for a bad directory.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
TensorParallelLM<TpLlama<T, S>> load_llama(const std::filesystem::path& dir) {
  const hf::Config c = hf::Config::read(dir / "config.json");
  const std::string type =
      detail::require_type(c, "load_llama", {"llama", "qwen2", "mistral", "phi3"});
  const hf::LlamaSizes s = hf::llama_sizes(c, type);
  if (s.sliding_window > 0)
    throw std::invalid_argument("kappa: dist::load_llama: the model has a sliding window (" +
                                std::to_string(s.sliding_window) +
                                " tokens): load it with dist::load_llama_sliding");
  const io::Checkpoint full(dir);
  return detail::load_llama_like<T, TpLlama<T, S>>(full, c, s, CausalMask{});
}

/// This rank's share of a Mistral or Phi-3 directory with a sliding window
/// (each rank's cache keeps the window of its key/value heads). As
/// load_llama. \throws std::invalid_argument when the config sets no window.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
TensorParallelLM<TpMistralSliding<T, S>> load_llama_sliding(const std::filesystem::path& dir) {
  const hf::Config c = hf::Config::read(dir / "config.json");
  const std::string type = detail::require_type(c, "load_llama_sliding", {"mistral", "phi3"});
  const hf::LlamaSizes s = hf::llama_sizes(c, type);
  if (s.sliding_window < 1) c.fail("sliding_window", "is not set");
  const io::Checkpoint full(dir);
  return detail::load_llama_like<T, TpMistralSliding<T, S>>(full, c, s,
                                                            SlidingWindowMask{s.sliding_window});
}

namespace detail {
template <Scalar T, WeightStoragePolicy S, class Full>
TensorParallelLM<TpQwen3<T, S>> load_qwen3_from(const Full& full, const hf::LlamaSizes& s) {
  return load_llama_layout<T, S, typename TpQwen3<T, S>::LayerType>(
      full, s, nullptr, {}, CausalMask{},
      [](const hf::LlamaSizes& z) { return hf::detail::qwen3_position<T>(z); },
      [&](const auto& w, Index, const std::string& p, const ShardPlan& plan) {
        return ShardedFfn<SwiGlu<T, S>>(
            hf::detail::read_llama_mlp<T, S>(w, p, s.d, plan.ffn.size()));
      });
}
template <Scalar T, WeightStoragePolicy S, class Full>
TensorParallelLM<TpLlamaMoe<T, S>> load_llama_moe_from(const Full& full, const hf::LlamaSizes& s,
                                                       const hf::MoeSizes& m,
                                                       const LoadOptions& options) {
  const Communicator& comm = Communicator::world();
  return load_llama_layout<T, S, typename TpLlamaMoe<T, S>::LayerType>(
      full, s, &m, options, CausalMask{},
      [](const hf::LlamaSizes& z) { return hf::detail::llama_rope<T>(z); },
      [&](const auto& w, Index i, const std::string& p, const ShardPlan& plan) {
        return read_sharded_ffn<T, S>(w, i, p, s.d, m, plan, comm);
      });
}
}  // namespace detail

/// This rank's share of a Qwen3 directory (the LLaMA layout with QK-norm,
/// whose one gain per layer every rank holds). As load_llama.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
TensorParallelLM<TpQwen3<T, S>> load_qwen3(const std::filesystem::path& dir) {
  const hf::Config c = hf::Config::read(dir / "config.json");
  const hf::LlamaSizes s = hf::llama_sizes(c, detail::require_type(c, "load_qwen3", {"qwen3"}));
  const io::Checkpoint full(dir);
  return detail::load_qwen3_from<T, S>(full, s);
}

/// This rank's share of a Gemma 2 or Gemma 3 (text) directory: heads and
/// GeGLU columns split as LLaMA's; norms, the embedding (and its scale) and
/// the final soft-cap as the single-process model. Model: TpGemma2<T> for
/// gemma2, TpGemma3<T> for gemma3_text. As load_llama.
template <Scalar T, class Model>
TensorParallelLM<Model> load_gemma(const std::filesystem::path& dir) {
  const Communicator& comm = Communicator::world();
  const hf::Config c = hf::Config::read(dir / "config.json");
  const bool gemma3 = std::is_same_v<Model, TpGemma3<T, typename Model::StorageType>>;
  (void)detail::require_type(c, gemma3 ? "load_gemma<TpGemma3>" : "load_gemma<TpGemma2>",
                             {gemma3 ? "gemma3_text" : "gemma2"});
  const Index n_head = c.integer("num_attention_heads", std::nullopt, 1),
              n_kv = c.integer("num_key_value_heads", n_head, 1),
              d_head = c.integer("head_dim", 256, 2),
              d_ff = c.integer("intermediate_size", std::nullopt, 1),
              vocab = c.integer("vocab_size", std::nullopt, 1);
  detail::ShardPlan plan;
  plan.heads = share_heads(n_head, n_kv, comm.rank(), comm.size());
  plan.q_width = plan.kv_width = plan.o_width = d_head;
  plan.ffn = share_columns(d_ff, comm.rank(), comm.size());
  plan.vocab = share_columns(vocab, comm.rank(), comm.size());
  plan.rank0 = comm.rank() == 0;
  nlohmann::json j = c.json();
  j["num_attention_heads"] = plan.heads.n_q();
  j["num_key_value_heads"] = plan.heads.n_kv();
  j["head_dim"] = d_head;
  j["intermediate_size"] = plan.ffn.size();
  j["tie_word_embeddings"] = false;  // a tied head is this rank's rows of E
  const hf::Config local(std::move(j), c.file());
  const io::Checkpoint full(dir);
  const detail::ShardedCheckpoint part(full, plan);
  return TensorParallelLM<Model>(
      hf::detail::build_gemma<T, typename Model::StorageType, typename Model::LayerType, Model>(
          local, part),
      vocab, comm);
}

/// This rank's share of a Mixtral or Qwen2-MoE directory: attention split
/// by heads, each mixture by experts (expert parallelism; the router and
/// the shared expert's columns as the file comment says), dense layers by
/// columns (or every expert by columns: options.experts).
/// \throws std::invalid_argument for more ranks than experts, and as
///         load_llama.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
TensorParallelLM<TpLlamaMoe<T, S>> load_llama_moe(const std::filesystem::path& dir,
                                                  const LoadOptions& options = {}) {
  const hf::Config c = hf::Config::read(dir / "config.json");
  const std::string type = detail::require_type(c, "load_llama_moe", {"mixtral", "qwen2_moe"});
  const hf::LlamaSizes s = hf::llama_sizes(c, type);
  if (type == "mixtral" && c.has("sliding_window"))
    c.fail("sliding_window", "is set; kappa runs Mixtral without a sliding window only");
  const hf::MoeSizes m = hf::moe_sizes(c, type, s.n_layer);
  const io::Checkpoint full(dir);
  return detail::load_llama_moe_from<T, S>(full, s, m, options);
}

/// This rank's share of a DeepSeek-V2 / V2-Lite / V3 directory: latent
/// attention split by heads (the latent and its cache replicated: see the
/// file comment), experts by expert (or by columns: options.experts), dense
/// layers and the shared experts by columns; the absorbed latent path. V3's multi-token-prediction
/// layer is ignored, as by the single-process loader. \throws std::invalid_argument for more ranks
/// than heads or experts, and
///         as hf::load_causal_lm for a bad directory.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
TensorParallelLM<TpDeepSeek<T, S>> load_deepseek(const std::filesystem::path& dir,
                                                 const LoadOptions& options = {}) {
  const Communicator& comm = Communicator::world();
  const hf::Config c = hf::Config::read(dir / "config.json");
  const std::string type = detail::require_type(c, "load_deepseek", {"deepseek_v2", "deepseek_v3"});
  const Index n_layer = c.layer_count("num_hidden_layers"),
              n_head = c.integer("num_attention_heads", std::nullopt, 1),
              d = c.integer("hidden_size", std::nullopt, 1),
              vocab = c.integer("vocab_size", std::nullopt, 1),
              dh = c.integer("qk_nope_head_dim", std::nullopt, 1),
              dr = c.integer("qk_rope_head_dim", std::nullopt, 2),
              dv = c.integer("v_head_dim", std::nullopt, 1);
  const hf::MoeSizes m = hf::moe_sizes(c, type, n_layer);
  detail::ShardPlan plan;
  plan.heads = share_heads(n_head, n_head, comm.rank(), comm.size());
  plan.q_width = dh + dr;
  plan.kv_width = dh + dv;
  plan.o_width = dv;
  plan.ffn =
      share_columns(c.integer("intermediate_size", std::nullopt, 1), comm.rank(), comm.size());
  detail::share_experts(plan, m, options.experts, comm);
  if (m.d_shared > 0) plan.shared = share_columns(m.d_shared, comm.rank(), comm.size());
  plan.vocab = share_columns(vocab, comm.rank(), comm.size());
  plan.rank0 = comm.rank() == 0;
  // The rank's layers are a DeepSeek model of its heads whose head is its
  // rows of the vocabulary (a tied head too: the rows of E).
  nlohmann::json j = c.json();
  j["num_attention_heads"] = plan.heads.n_q();
  j["tie_word_embeddings"] = false;
  const hf::Config local(std::move(j), c.file());
  const io::Checkpoint full(dir);
  const detail::ShardedCheckpoint part(full, plan);
  TpDeepSeek<T, S> model =
      hf::detail::build_deepseek<T, S, AbsorbedLatent, typename TpDeepSeek<T, S>::LayerType>(
          local, part, [&](const auto& w, Index i, const std::string& p, Index, Index) {
            return detail::read_sharded_ffn<T, S>(w, i, p, d, m, plan, comm);
          });
  return TensorParallelLM<TpDeepSeek<T, S>>(std::move(model), vocab, comm);
}

/// The tensor-parallel GPT-2 of one rank (multi-head attention, learned
/// positions, a GELU MLP; the head tied to E, split by vocabulary).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpGpt2Layer = DecoderOnlyLayer<
    T, ShardedAttention<MultiHeadAttention<T, kernels::Softmax, MultiHead, NoPosition, S>>,
    LayerNorm<T>, ShardedFfn<Mlp<T, GeluTanh, S>>, PreNorm>;
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using TpGpt2 = DecoderLM<T, TpGpt2Layer<T, S>, LearnedPositions<T>, S>;

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
template <Scalar T, WeightStoragePolicy S = DenseWeights>
TensorParallelLM<TpGpt2<T, S>> load_gpt2(const std::filesystem::path& dir) {
  const Communicator& comm = Communicator::world();
  const hf::Config c = hf::Config::read(dir / "config.json");
  if (c.string("model_type") != "gpt2")
    throw std::invalid_argument("kappa: dist::load_gpt2: model_type " +
                                kappa::quoted(c.string("model_type")) + " is not gpt2");
  if (!c.boolean("tie_word_embeddings", true))
    throw std::invalid_argument(
        "kappa: dist::load_gpt2: an untied GPT-2 head is not supported "
        "across ranks yet");
  const Index d = c.integer("n_embd", std::nullopt, 1), n_layer = c.layer_count("n_layer"),
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
  std::vector<TpGpt2Layer<T, S>> layers;
  for (Index i = 0; i < n_layer; ++i) {
    const std::string p = pre + "h." + std::to_string(i) + ".";
    typename TpGpt2Layer<T, S>::AttentionType attn(
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
    Mlp<T, GeluTanh, S> mlp(d, ffn.size());
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
                        ShardedFfn<Mlp<T, GeluTanh, S>>(std::move(mlp), comm));
  }
  ckpt.require_shape(pre + "wte.weight", {vocab, d});
  ckpt.require_shape(pre + "wpe.weight", {n_pos, d});
  RowMatrix<T> head =
      detail::slice<T>(ckpt, pre + "wte.weight", vocab, d, detail::range(voc.begin, voc.end), true);
  TpGpt2<T, S> m(Embedding<T>(ckpt.template matrix<T>(pre + "wte.weight")),
                 LearnedPositions<T>(ckpt.template matrix<T>(pre + "wpe.weight")),
                 std::move(layers), LayerNorm<T>(vec("ln_f.weight", d), vec("ln_f.bias", d), eps),
                 std::move(head), n_pos);
  return TensorParallelLM<TpGpt2<T, S>>(std::move(m), vocab, comm);
}

}  // namespace kappa::dist

namespace kappa::dist {

/// Loads this rank's share of the model in dir with the loader its
/// config's model_type names (gpt2, llama, qwen2, mistral, phi3, qwen3,
/// gemma2, gemma3_text, mixtral, qwen2_moe, deepseek_v2, deepseek_v3) and
/// returns f(model). Every rank of
/// MPI_COMM_WORLD calls it. (Instantiates every loader: a program that runs
/// one architecture compiles faster with that loader alone.)
/// \throws std::invalid_argument naming a model_type no loader takes; as
///         the loaders.
template <Scalar T, WeightStoragePolicy S = DenseWeights, class F>
decltype(auto) with_gguf_model(const std::filesystem::path& path, F&& f,
                               const LoadOptions& options = {});

template <Scalar T, WeightStoragePolicy S = DenseWeights, class F>
decltype(auto) with_model(const std::filesystem::path& dir, F&& f,
                          const LoadOptions& options = {}) {
  if (std::filesystem::is_regular_file(dir))
    return with_gguf_model<T, S>(dir, std::forward<F>(f), options);
  const std::string type = hf::Config::read(dir / "config.json").string("model_type");
  if (type == "gpt2") return std::forward<F>(f)(load_gpt2<T, S>(dir));
  if (type == "llama" || type == "qwen2" || type == "mistral" || type == "phi3") {
    const hf::LlamaSizes sizes = hf::llama_sizes(hf::Config::read(dir / "config.json"), type);
    if (sizes.sliding_window > 0) return std::forward<F>(f)(load_llama_sliding<T, S>(dir));
    return std::forward<F>(f)(load_llama<T, S>(dir));
  }
  if (type == "gemma2") return std::forward<F>(f)(load_gemma<T, TpGemma2<T, S>>(dir));
  if (type == "gemma3_text") return std::forward<F>(f)(load_gemma<T, TpGemma3<T, S>>(dir));
  if (type == "qwen3") return std::forward<F>(f)(load_qwen3<T, S>(dir));
  if (type == "mixtral" || type == "qwen2_moe")
    return std::forward<F>(f)(load_llama_moe<T, S>(dir, options));
  if (type == "deepseek_v2" || type == "deepseek_v3")
    return std::forward<F>(f)(load_deepseek<T, S>(dir, options));
  throw std::invalid_argument("kappa: dist: model_type " + kappa::quoted(type) +
                              " is not supported across ranks yet (gpt2, llama, qwen2, mistral, "
                              "phi3, qwen3, gemma2, gemma3_text, mixtral, qwen2_moe, deepseek_v2, "
                              "deepseek_v3 are)");
}

/// Loads this rank's share of the model in GGUF file `path` (general.
/// architecture llama, qwen2, qwen3 or qwen2moe, with llama.cpp's tensor
/// names and conventions as gguf::load_causal_lm reads them) and returns
/// f(model). Each rank dequantizes a tensor whole, keeps its slice and
/// drops the rest, so it holds its share in T: a rank of a Q4_K file holds
/// its share in float (8x the bytes of its quantized share); quantized
/// slices across ranks are not there yet. Every rank of MPI_COMM_WORLD calls
/// it. \throws std::invalid_argument naming an architecture not split
///         across ranks (gpt2, deepseek2); FormatError as the GGUF reader.
template <Scalar T, WeightStoragePolicy S, class F>
decltype(auto) with_gguf_model(const std::filesystem::path& path, F&& f,
                               const LoadOptions& options) {
  const io::GgufFile file(path.string());
  const std::string arch = gguf::detail::string(file, "general.architecture");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "qwen2moe")
    throw std::invalid_argument("kappa: dist: " + path.string() + ": general.architecture " +
                                kappa::quoted(arch) +
                                " is not split across ranks from GGUF yet (llama, qwen2, qwen3, "
                                "qwen2moe are; its safetensors directory may be)");
  const hf::LlamaSizes s = gguf::llama_sizes(file, arch);
  const gguf::GgufTensors tensors(
      file, arch == "llama" ? gguf::GgufLayout::kLlama : gguf::GgufLayout::kNeox, s.n_head, s.n_kv);
  if (arch == "qwen3") return std::forward<F>(f)(detail::load_qwen3_from<T, S>(tensors, s));
  if (const std::optional<hf::MoeSizes> m = gguf::moe_sizes(file, arch, s.n_layer))
    return std::forward<F>(f)(detail::load_llama_moe_from<T, S>(tensors, s, *m, options));
  return std::forward<F>(f)(
      detail::load_llama_like<T, TpLlama<T, S>>(tensors, hf::Config(), s, CausalMask{}));
}

}  // namespace kappa::dist
