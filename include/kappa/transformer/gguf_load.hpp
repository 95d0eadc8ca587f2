// kappa/transformer/gguf_load.hpp - llama.cpp's GGUF model files to kappa
// models, with one call, as kappa/transformer/hf.hpp does for Hugging Face
// directories.
//
//   auto lm = kappa::gguf::load_causal_lm<float>("model-q8_0.gguf");
//   kappa::RowMatrix<float> logits = lm.forward(ids);  // (N, N_T)
//   auto both = kappa::gguf::load<float>("model.gguf");  // model + tokenizer
//
// Supported general.architecture values and what they become:
//   llama   Llama<T> (also Mistral and TinyLlama files, which llama.cpp's
//           converter writes as "llama"; llama.cpp applies no sliding window
//           to them and neither does kappa)
//   qwen2   Llama<T> with Qwen2's q/k/v biases
//   qwen3   Qwen3<T> (attn_q_norm / attn_k_norm)
//   llama with <arch>.expert_count > 0: LlamaMoe<T> (Mixtral: every layer
//           a mixture, top-k weights renormalized); qwen2moe: LlamaMoe<T>
//           with the shared expert and its gate (top-k weights as scored:
//           the file keeps no norm_topk_prob). Experts come from llama.cpp's
//           merged tensors blk.N.ffn_{gate,up,down}_exps ([n_expert][out]
//           [in]): expert e is slice e, viewed as it is stored.
//   deepseek2  DeepSeekV2<T> or DeepSeekMoe<T> (hf::load_deepseek_* on the
//           deepseek2.* metadata: deepseek2_config()); kv_b_proj is joined
//           back from llama.cpp's per-head attn_k_b / attn_v_b; latent
//           attention's matrices are read in T (its storage is not a policy
//           yet), the experts and the head as stored
//   gpt2    Gpt2<T> (hf::load_gpt2 on the gpt2.* metadata: gpt2_config())
// Others (gemma2/3, phi3, ...) are refused by name.
//
// Hyperparameters come from the metadata as llama.cpp reads them
// (gguf-py/gguf/constants.py Keys, llama.cpp's llama-model.cpp):
// <arch>.block_count, .context_length, .embedding_length,
// .feed_forward_length, .attention.head_count, .attention.head_count_kv
// (default head_count), .attention.key_length / .value_length (default
// embedding_length / head_count), .attention.layer_norm_rms_epsilon,
// .rope.freq_base (default 10000), .rope.dimension_count (must equal the
// head width: kappa's LLaMA rotates whole heads), .rope.scaling.type (none
// or linear with .rope.scaling.factor; yarn is refused by name). Llama 3's
// RoPE rule arrives as the tensor rope_freqs.weight (one divisor per
// frequency, which ggml applies as theta_i / f_i): kappa applies it through
// RopeScaling's LongRoPE divisors (equal short and long, attention factor 1).
// The vocabulary size is the length
// of tokenizer.ggml.tokens, else <arch>.vocab_size, else token_embd's rows.
//
// Tensors, by llama.cpp's names (gguf-py's MODEL_TENSOR names); llama, qwen2:
//   token_embd.weight, blk.N.attn_norm.weight, blk.N.attn_{q,k,v}.weight
//   (and .bias for qwen2), blk.N.attn_output.weight, blk.N.ffn_norm.weight,
//   blk.N.ffn_{gate,up,down}.weight, output_norm.weight, output.weight
//   (absent: tied to token_embd, as llama.cpp does). gpt2: token_embd,
//   position_embd, blk.N.attn_norm (weight, bias), blk.N.attn_qkv (Hugging
//   Face's c_attn), attn_output (c_proj), ffn_norm, ffn_up (c_fc), ffn_down
//   (mlp.c_proj), output_norm, output (absent: tied); llama.cpp's converter
//   stores the Conv1D weights transposed, (out, in), the loader turns them
//   back.
// They reach the same builder as a Hugging Face llama directory
// (hf::detail::build_llama; hf::load_gpt2) through GgufTensors, which answers the
// builder's Hugging Face names with the GGUF tensors.
//
// The rotary layout. kappa's LLaMA rotates each head as Hugging Face does
// (rotate_half: column i pairs with column i + d_head/2). ggml rotates
// llama's heads "normally" (adjacent columns 2i, 2i + 1), so llama.cpp's
// converter (convert_hf_to_gguf.py, LlamaModel.permute) reorders the rows of
// W^Q and W^K (and their biases) of each head: GGUF row h d_head + 2 i + j is
// Hugging Face row h d_head + j d_head/2 + i (i < d_head/2, j in {0, 1});
// for W^K with the key/value head count. The loader undoes it. qwen2 is
// converted without the permutation (ggml rotates it in the NEOX layout,
// which is rotate_half), so its rows are taken as stored.
//
// Weights. With the storage policy S = AsStoredWeights (what generate
// uses) every projection (W^Q, W^K, W^V, W^O, W_gate, W_up, W_down) and the
// output head stay in the format the file stores them in: Q8_0, Q4_0, Q4_K
// and Q6_K blocks are views into the memory-mapped file (no copy; the model
// holds the mapping), except W^Q / W^K of the llama layout, whose rows of
// blocks are reordered once (rows move whole, no value changes); BF16 and
// F16 matrices are views too, converted in the products; F32 matrices are
// views when T is float; the norms and biases are read in T. A llama.cpp
// Q4_K_M, BF16 or F16 file so runs in about its own size. With S = DenseWeights every
// tensor is dequantized to T (F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K by
// kappa/core/quant_blocks.hpp, equal to ggml's); with a block policy
// (Q8_0Weights, ...) tensors of that type are kept and others requantized.
// GPT-2 files are read in T (their fused attn_qkv is split after reading).
//
// Accuracy on tests/data/models/llama-gguf: F32 files give the safetensors
// model's logits (to the f32-stored epsilon). Quantized files (llama.cpp's
// converter and llama-quantize) give, in prefill, an independent forward on
// the same dequantized weights to float rounding; decoding a few rows at a
// time quantizes X to Q8_0 per 32 values, as ggml does, which adds about
// 2 % of the largest logit on the tiny d = 256 model (each format's own
// error against F32 is in that folder's README).

// The tokenizer (load(), load_tokenizer()): tokenizer.ggml.model "gpt2"
// (byte-level BPE: tokens, merges, token types, pre llama-bpe / llama3 /
// llama-v3 / gpt-2 / qwen2, BOS/EOS ids and add_bos/add_eos_token) becomes
// the tokenizer.json an HfTokenizer reads (gpt2_tokenizer_json()).
// tokenizer.ggml.model "llama" (SentencePiece-style BPE: tokens, scores,
// token types, byte pieces) becomes a tokenize::SentencePieceModel
// (spm_model()) and its tokenizer.json.
//
// Errors: an unsupported architecture, a missing or mistyped key or tensor
// is a FormatError naming the file and the key or tensor; a tensor whose
// shape disagrees with the metadata is a ShapeError naming the file, the
// tensor, its shape and the expected one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/stored_weights.hpp"
#include "kappa/io/gguf.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/sentencepiece_model.hpp"
#include "kappa/transformer/hf.hpp"

namespace kappa::gguf {

/// The architectures kappa loads from GGUF.
inline constexpr std::string_view kSupportedArchitectures =
    "llama (also Mixtral's experts), qwen2, qwen2moe, qwen3, deepseek2, gpt2";

namespace detail {

/// Throws FormatError "kappa: FILE: WHAT".
[[noreturn]] inline void fail(const io::GgufFile& f, const std::string& what) {
  throw FormatError("kappa: " + f.path() + ": " + what);
}

/// Integer metadata `key` in [lo, hi]; `fallback` when absent.
inline Index integer(const io::GgufFile& f, const std::string& key,
                     std::optional<Index> fallback = std::nullopt, Index lo = 1,
                     Index hi = kMaxElements) {
  if (!f.has(key)) {
    if (fallback) return *fallback;
    fail(f, "metadata key " + kappa::quoted(key) + " is missing");
  }
  const std::int64_t x = f.get_integer(key);  // FormatError naming the key if not an integer
  if (x < lo || x > hi)
    fail(f, "metadata key " + kappa::quoted(key) + " is " + std::to_string(x) + ", outside [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

/// The layer count `key` (ARCH.block_count): integer() in [0, hf::kMaxLayers].
inline Index layer_count(const io::GgufFile& f, const std::string& key) {
  return integer(f, key, std::nullopt, 0, hf::kMaxLayers);
}

/// Number metadata `key` (f32, f64 or an integer) in (0, hi]; `fallback`
/// when absent.
inline double positive(const io::GgufFile& f, const std::string& key,
                       std::optional<double> fallback, double hi) {
  const io::GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(f, "metadata key " + kappa::quoted(key) + " is missing");
  }
  const std::optional<double> x = std::visit(
      [](const auto& a) -> std::optional<double> {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_arithmetic_v<A> && !std::is_same_v<A, bool>)
          return static_cast<double>(a);
        else
          return std::nullopt;
      },
      *v);
  if (!x) fail(f, "metadata key " + kappa::quoted(key) + " must be a number");
  if (!(*x > 0 && *x <= hi))
    fail(f, "metadata key " + kappa::quoted(key) + " is " + std::to_string(*x) + ", outside (0, " +
                std::to_string(hi) + "]");
  return *x;
}

/// String metadata `key`; `fallback` when absent.
inline std::string string(const io::GgufFile& f, const std::string& key,
                          std::optional<std::string> fallback = std::nullopt) {
  if (!f.has(key)) {
    if (fallback) return *fallback;
    fail(f, "metadata key " + kappa::quoted(key) + " is missing");
  }
  return f.get<std::string>(key);
}

/// The rows of a W^Q / W^K (or its bias) as Hugging Face orders them, from
/// the rows llama.cpp's LlamaModel.permute wrote: for each of `n_heads`
/// heads of width D = rows / n_heads, HF row h D + j D/2 + i = GGUF row
/// h D + 2 i + j (see the file comment).
template <Scalar T>
RowMatrix<T> unpermute_rope_rows(const RowMatrix<T>& g, Index n_heads) {
  const Index width = g.rows() / n_heads, half = width / 2;
  RowMatrix<T> hf(g.rows(), g.cols());
  for (Index h = 0; h < n_heads; ++h)
    for (Index j = 0; j < 2; ++j)
      for (Index i = 0; i < half; ++i)
        hf.row(h * width + j * half + i) = g.row(h * width + 2 * i + j);
  return hf;
}

}  // namespace detail

/// How a GGUF file stores a model's tensors, as far as the loader must undo it.
enum class GgufLayout {
  kLlama,     ///< LLaMA names; W^Q / W^K rows permuted per head for ggml's interleaved RoPE
  kNeox,      ///< LLaMA names, rows as Hugging Face's (qwen2: ggml rotates it NEOX-style)
  kGpt2,      ///< GPT-2 names; the Conv1D weights stored transposed, (out, in)
  kDeepSeek,  ///< LLaMA names plus latent attention's; kv_b_proj split per head into
              ///< attn_k_b (transposed) and attn_v_b
};

/// The tensors of a GGUF file under the Hugging Face names that hf.hpp's
/// builders ask for ("model.layers.3.self_attn.q_proj.weight" is
/// "blk.3.attn_q.weight", GPT-2's "h.3.attn.c_attn.weight" is
/// "blk.3.attn_qkv.weight"), dequantized to T and in Hugging Face's layout
/// (llama's W^Q and W^K rows un-permuted, GPT-2's Conv1D weights transposed
/// back to (in, out); see the file comment). It is the Source of
/// hf::detail::Weights.
class GgufTensors {
 public:
  /// `n_head`, `n_kv`: the head counts (for kLlama's permutation).
  /// `mapping`: what keeps `f` (its mapping) alive, for weight matrices that
  /// view the file's blocks (stored_weight()); null: they copy the blocks.
  /// Q4_0 and Q4_K weight matrices are held as `f` holds them: interleaved
  /// by eights when it was opened so (io::GgufFile's interleave_q4).
  GgufTensors(const io::GgufFile& f, GgufLayout layout, Index n_head, Index n_kv,
              std::shared_ptr<const void> mapping = nullptr)
      : f_(f), layout_(layout), n_head_(n_head), n_kv_(n_kv), mapping_(std::move(mapping)) {}

  /// llama.cpp's name of Hugging Face tensor `hf` in `layout`, or "" if it
  /// has none.
  [[nodiscard]] static std::string gguf_name(GgufLayout layout, std::string_view hf) {
    using NamePair = std::pair<std::string_view, std::string_view>;
    const bool gpt2 = layout == GgufLayout::kGpt2;
    static constexpr NamePair kGlobal[] = {{"model.embed_tokens.weight", "token_embd.weight"},
                                           {"model.norm.weight", "output_norm.weight"},
                                           {"lm_head.weight", "output.weight"}};
    static constexpr NamePair kGpt2Global[] = {{"wte.weight", "token_embd.weight"},
                                               {"wpe.weight", "position_embd.weight"},
                                               {"ln_f.weight", "output_norm.weight"},
                                               {"ln_f.bias", "output_norm.bias"},
                                               {"lm_head.weight", "output.weight"}};
    for (const auto& [from, to] :
         gpt2 ? std::span<const NamePair>(kGpt2Global) : std::span<const NamePair>(kGlobal))
      if (hf == from) return std::string(to);
    const std::string_view layers = gpt2 ? "h." : "model.layers.";
    if (hf.substr(0, layers.size()) != layers) return {};
    hf.remove_prefix(layers.size());
    const std::size_t dot = hf.find('.');
    if (dot == std::string_view::npos || dot == 0) return {};
    const std::string layer(hf.substr(0, dot));
    if (!std::all_of(layer.begin(), layer.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      return {};
    const std::string_view rest = hf.substr(dot + 1);
    static constexpr NamePair kLayer[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.bias", "attn_output.bias"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
        {"mlp.gate.weight", "ffn_gate_inp.weight"},
        {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
        {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
        {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
        {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
        {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
        {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
        {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
        {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    };
    static constexpr NamePair kGpt2Layer[] = {
        {"ln_1.weight", "attn_norm.weight"},          {"ln_1.bias", "attn_norm.bias"},
        {"ln_2.weight", "ffn_norm.weight"},           {"ln_2.bias", "ffn_norm.bias"},
        {"attn.c_attn.weight", "attn_qkv.weight"},    {"attn.c_attn.bias", "attn_qkv.bias"},
        {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
        {"mlp.c_fc.weight", "ffn_up.weight"},         {"mlp.c_fc.bias", "ffn_up.bias"},
        {"mlp.c_proj.weight", "ffn_down.weight"},     {"mlp.c_proj.bias", "ffn_down.bias"},
    };
    for (const auto& [from, to] :
         gpt2 ? std::span<const NamePair>(kGpt2Layer) : std::span<const NamePair>(kLayer))
      if (rest == from) return "blk." + layer + "." + std::string(to);
    return {};
  }

  /// An expert's matrix inside llama.cpp's merged expert tensors: Hugging
  /// Face's "model.layers.3.block_sparse_moe.experts.5.w1.weight" (Mixtral:
  /// w1 gate, w3 up, w2 down) or "model.layers.3.mlp.experts.5.gate_proj.
  /// weight" (Qwen2-MoE) is slice 5 of "blk.3.ffn_gate_exps.weight" (ne =
  /// [in, out, n_expert]: the experts one after another). nullopt for other
  /// names.
  struct ExpertSlice {
    std::string tensor;
    Index expert = 0;
  };
  [[nodiscard]] static std::optional<ExpertSlice> expert_slice(std::string_view hf) {
    constexpr std::string_view layers = "model.layers.";
    if (hf.substr(0, layers.size()) != layers) return std::nullopt;
    hf.remove_prefix(layers.size());
    const std::size_t dot = hf.find('.');
    if (dot == std::string_view::npos || dot == 0) return std::nullopt;
    const std::string layer(hf.substr(0, dot));
    std::string_view rest = hf.substr(dot + 1);
    for (std::string_view pre : {"block_sparse_moe.experts.", "mlp.experts."}) {
      if (rest.substr(0, pre.size()) != pre) continue;
      rest.remove_prefix(pre.size());
      const std::size_t d2 = rest.find('.');
      if (d2 == std::string_view::npos || d2 == 0 || d2 > 6) return std::nullopt;
      Index e = 0;
      for (const char ch : rest.substr(0, d2)) {
        if (ch < '0' || ch > '9') return std::nullopt;
        e = 10 * e + (ch - '0');
      }
      const std::string_view which = rest.substr(d2 + 1);
      const char* kind = which == "w1.weight" || which == "gate_proj.weight"   ? "gate"
                         : which == "w3.weight" || which == "up_proj.weight"   ? "up"
                         : which == "w2.weight" || which == "down_proj.weight" ? "down"
                                                                               : nullptr;
      if (kind == nullptr) return std::nullopt;
      return ExpertSlice{"blk." + layer + ".ffn_" + kind + "_exps.weight", e};
    }
    return std::nullopt;
  }

  [[nodiscard]] bool has(std::string_view hf) const {
    if (const auto x = expert_slice(hf)) return f_.has_tensor(x->tensor) && slice_exists(*x);
    if (const auto kb = split_kv_b(hf)) return true;
    const std::string g = gguf_name(layout_, hf);
    return !g.empty() && f_.has_tensor(g);
  }

  /// \throws FormatError naming the GGUF tensor when it is missing,
  /// ShapeError naming it, its shape and the one `expected` implies when
  /// they differ. `expected` is the Hugging Face shape (out x in; GPT-2's
  /// Conv1D in x out); the message states the GGUF tensor's stored shape
  /// (row-major: ne reversed) and the stored shape expected.
  void require_shape(std::string_view hf, const std::vector<std::int64_t>& expected) const {
    if (const auto kb = split_kv_b(hf)) {
      const auto [k_b, v_b] = *kb;
      const std::int64_t h = k_b.dims[2], nope = k_b.dims[0], r = k_b.dims[1], v = v_b.dims[1];
      if (expected == std::vector<std::int64_t>{h * (nope + v), r} && v_b.dims[0] == r &&
          v_b.dims[2] == h)
        return;
      throw ShapeError("kappa: " + f_.path() + ": tensors " + kappa::quoted(k_b.name) + " " +
                       io::tensor_shape_string(k_b.shape()) + " and " + kappa::quoted(v_b.name) +
                       " " + io::tensor_shape_string(v_b.shape()) + " do not make kv_b_proj " +
                       io::tensor_shape_string(expected) + " from the metadata");
    }
    const io::GgufTensorInfo t = info(hf);
    std::vector<std::int64_t> want = expected;
    if (transposed(hf) && want.size() == 2) std::swap(want[0], want[1]);
    // A vector may be stored with or asked for with unit dimensions
    // (a 1 x d gate as [d]); compare without them.
    std::vector<std::int64_t> shape = t.shape();
    while (shape.size() > want.size() && shape.front() == 1) shape.erase(shape.begin());
    while (want.size() > shape.size() && want.front() == 1) want.erase(want.begin());
    if (shape == want) return;
    throw ShapeError("kappa: " + f_.path() + ": tensor " + kappa::quoted(t.name) + " has shape " +
                     io::tensor_shape_string(t.shape()) + ", expected " +
                     io::tensor_shape_string(want) + " from the metadata");
  }

  /// The Hugging Face shape of tensor `hf` (out x in; GPT-2's Conv1D
  /// in x out; kv_b_proj joined from attn_k_b and attn_v_b), as matrix()
  /// returns it. \throws FormatError when the file lacks it.
  [[nodiscard]] std::vector<std::int64_t> hf_shape(std::string_view hf) const {
    if (const auto kb = split_kv_b(hf)) {
      const auto [k_b, v_b] = *kb;
      return {k_b.dims[2] * (k_b.dims[0] + v_b.dims[1]), k_b.dims[1]};
    }
    std::vector<std::int64_t> shape = info(hf).shape();
    if (transposed(hf) && shape.size() == 2) std::swap(shape[0], shape[1]);
    return shape;
  }

  /// Tensor `hf` as a matrix of shape `expected`, after require_shape(hf,
  /// expected).
  template <Scalar T>
  [[nodiscard]] RowMatrix<T> matrix(std::string_view hf,
                                    const std::vector<std::int64_t>& expected) const {
    require_shape(hf, expected);
    if (const auto kb = split_kv_b(hf)) return joined_kv_b<T>(kb->first, kb->second);
    const io::GgufTensorInfo t = info(hf);
    RowMatrix<float> f(t.rows(), t.cols());
    f_.dequantize_into(t, f.data());
    RowMatrix<T> m = f.template cast<T>();
    if (transposed(hf)) return m.transpose();
    if (expected.size() == 1) m.resize(1, expected[0]);
    return permuted_rows(hf, std::move(m));
  }

  /// Tensor `hf` as a row vector (callers check its shape first).
  template <Scalar T>
  [[nodiscard]] RowVector<T> row_vector(std::string_view hf) const {
    const io::GgufTensorInfo t = info(hf);
    RowMatrix<float> f(t.rows(), t.cols());
    f_.dequantize_into(t, f.data());
    const RowMatrix<T> m = f.template cast<T>();
    // A bias of W^Q / W^K is permuted like the rows of its weight.
    const RowMatrix<T> fixed =
        permuted_rows(hf, RowMatrix<T>(Eigen::Map<const RowMatrix<T>>(m.data(), t.numel, 1)));
    return Eigen::Map<const RowVector<T>>(fixed.data(), t.numel);
  }

  /// nn.Linear weight `hf` (out x in; stored as GGUF [out][in], blocks
  /// along `in`) as a weight matrix in storage S without converting its
  /// values: W = weight^T (in x out, BlocksAlong::kRows) if `transposed`, for
  /// X W; else W = weight (out x in, BlocksAlong::kCols), for X W^T (the
  /// output head). The blocks are viewed in the mapping (or copied when no
  /// mapping was given); W^Q / W^K of the llama layout get their rows of
  /// blocks reordered (a copy: whole rows move, no value changes). nullopt
  /// when S cannot hold the tensor's type as it is (the caller then reads
  /// it in T): AsStoredWeights holds Q8_0, Q4_0, Q4_K, Q6_K, BF16, F16 (as
  /// a view) and, for T = float with a mapping, F32 as a view (F32
  /// otherwise is read in T); a block policy holds its own type. GPT-2's layout gives
  /// nullopt (its fused, transposed tensors are read in T).
  /// \throws FormatError / ShapeError as require_shape().
  template <Scalar T, WeightStoragePolicy S>
  [[nodiscard]] std::optional<WeightMatrix<T, S>> stored_weight(std::string_view hf, Index out,
                                                                Index in, bool transposed) const {
    if (layout_ == GgufLayout::kGpt2 || split_kv_b(hf)) return std::nullopt;
    require_shape(hf, {out, in});
    const io::GgufTensorInfo t = info(hf);
    const Index rows = transposed ? in : out, cols = transposed ? out : in;
    const BlocksAlong along = transposed ? BlocksAlong::kRows : BlocksAlong::kCols;
    // (an expert's slice starts past the merged tensor's first byte)
    const unsigned char* const at =
        f_.raw(t.name).data() + (t.file_offset - f_.tensor(t.name).file_offset);
    const auto size = static_cast<std::size_t>(t.bytes);
    // The tensor's rows (one per output) in HF's order: W^Q / W^K of the
    // llama layout reordered whole (a copy), else nullptr (use `at`). Q4_0 /
    // Q4_K rows held interleaved are read back row by row as they move, and
    // the copy is interleaved again.
    const auto reordered = [&]() -> std::shared_ptr<std::vector<unsigned char>> {
      const Index perm_heads = permuted_heads(hf);
      if (perm_heads == 0) return nullptr;
      const std::size_t row = size / static_cast<std::size_t>(out);
      auto re = std::make_shared<std::vector<unsigned char>>(size);
      const Index width = out / perm_heads, half = width / 2;
      // copy_row(from, to): the tensor's row `from` into the copy's `to`
      const auto permute = [&](const auto& copy_row) {
        for (Index h = 0; h < perm_heads; ++h)
          for (Index j = 0; j < 2; ++j)
            for (Index i = 0; i < half; ++i)
              copy_row(h * width + 2 * i + j,
                       re->data() + static_cast<std::size_t>(h * width + j * half + i) * row);
      };
      const auto permute_interleaved = [&]<class L>() {
        const std::int64_t nb = in / L::kBlockWeights;
        permute([&](Index from, unsigned char* to) {
          quant::deinterleave_row<L>(at, out, nb, from, to);
        });
        quant::interleave_rows_in_place<L>(re->data(), out, nb);
      };
      if (!t.interleaved)
        permute([&](Index from, unsigned char* to) {
          std::memcpy(to, at + static_cast<std::size_t>(from) * row, row);
        });
      else if (t.type == io::GgmlType::kQ4_K)
        permute_interleaved.template operator()<quant::Q4_KRows8>();
      else
        permute_interleaved.template operator()<quant::Q4_0Rows8>();
      return re;
    };
    // A half-precision tensor's (F16, BF16) values to view and their owner:
    // the reordered copy for W^Q / W^K of the llama layout; an owned copy
    // without a mapping or at an odd address; else the mapping itself.
    [[maybe_unused]] const auto half_bytes =
        [&]() -> std::pair<const std::uint16_t*, std::shared_ptr<const void>> {
      if (auto re = reordered()) {
        const auto* q = reinterpret_cast<const std::uint16_t*>(re->data());
        return {q, std::move(re)};
      }
      if (mapping_ && reinterpret_cast<std::uintptr_t>(at) % alignof(std::uint16_t) == 0)
        return {reinterpret_cast<const std::uint16_t*>(at), mapping_};
      auto own = std::make_shared<std::vector<unsigned char>>(at, at + size);
      const auto* q = reinterpret_cast<const std::uint16_t*>(own->data());
      return {q, std::move(own)};
    };
    const auto blocks = [&]<class F>() -> std::optional<WeightMatrix<T, F>> {
      if (const auto re = reordered())
        return WeightMatrix<T, F>(rows, cols, along, std::span<const unsigned char>(*re));
      if (mapping_) return WeightMatrix<T, F>(rows, cols, along, at, size, mapping_);
      return WeightMatrix<T, F>(rows, cols, along, std::span<const unsigned char>(at, size));
    };
    const auto held = [&]<class F>() -> std::optional<WeightMatrix<T, S>> {
      auto m = blocks.template operator()<F>();
      if constexpr (kappa::detail::kInterleavable<F>) {
        if (t.interleaved) m = WeightMatrix<T, F>::already_interleaved(std::move(*m));
      }
      if constexpr (requires { S::kPerMatrix; })
        return WeightMatrix<T, S>(std::move(*m));
      else
        return m;  // F is S here
    };
    constexpr bool kAny = requires {
      S::kPerMatrix;
    };
    // The cases differ; with a storage whose `if constexpr` removes them (e.g.
    // Bf16Weights) two are left as `break`, which clang-tidy reports as clones.
    // NOLINTBEGIN(bugprone-branch-clone)
    switch (t.type) {
      case io::GgmlType::kQ8_0:
        if constexpr (kAny || std::same_as<S, Q8_0Weights>)
          return held.template operator()<Q8_0Weights>();
        break;
      case io::GgmlType::kQ4_0:
        if constexpr (kAny || std::same_as<S, Q4_0Weights>)
          return held.template operator()<Q4_0Weights>();
        break;
      case io::GgmlType::kQ4_K:
        if constexpr (kAny || std::same_as<S, Q4_KWeights>)
          return held.template operator()<Q4_KWeights>();
        break;
      case io::GgmlType::kQ6_K:
        if constexpr (kAny || std::same_as<S, Q6_KWeights>)
          return held.template operator()<Q6_KWeights>();
        break;
      case io::GgmlType::kF32:
        // F32 in float: viewed in the mapping (no copy) unless rows move
        if constexpr (kAny && std::is_same_v<T, float>) {
          if (mapping_ && permuted_heads(hf) == 0 &&
              reinterpret_cast<std::uintptr_t>(at) % alignof(float) == 0)
            return WeightMatrix<T, S>(kappa::detail::MappedDense<T>(
                rows, cols, along, reinterpret_cast<const float*>(at), mapping_));
        }
        break;
      case io::GgmlType::kF16:
        // F16 viewed, converted in the products
        if constexpr (kAny) {
          auto [q, owner] = half_bytes();
          return WeightMatrix<T, S>(kappa::detail::MappedF16<T>(
              rows, cols, along, reinterpret_cast<const unsigned char*>(q), std::move(owner)));
        }
        break;
      case io::GgmlType::kBF16:
        // BF16 viewed: the file's [out][in] rows are W^T for a projection, W
        // for the head
        if constexpr (kAny) {
          auto [q, owner] = half_bytes();
          return WeightMatrix<T, S>(
              WeightMatrix<T, Bf16Weights>(rows, cols, transposed, q, std::move(owner)));
        }
        break;
      default:
        break;
    }
    // NOLINTEND(bugprone-branch-clone)
    return std::nullopt;
  }

  [[nodiscard]] const io::GgufFile& file() const { return f_; }

 private:
  /// llama.cpp's split of DeepSeek's kv_b_proj (H (d_nope + d_v) x r): for
  /// each head h, attn_k_b [h] (ne [d_nope, r, H]: r x d_nope per head) is
  /// rows h (d_nope + d_v) .. + d_nope transposed, attn_v_b [h] (ne [r, d_v,
  /// H]) the next d_v rows. The pair for kv_b_proj `hf` in a file that has
  /// them and no attn_kv_b; nullopt otherwise.
  std::optional<std::pair<io::GgufTensorInfo, io::GgufTensorInfo>> split_kv_b(
      std::string_view hf) const {
    if (layout_ != GgufLayout::kDeepSeek) return std::nullopt;
    constexpr std::string_view suffix = ".self_attn.kv_b_proj.weight";
    if (hf.size() < suffix.size() || hf.substr(hf.size() - suffix.size()) != suffix)
      return std::nullopt;
    const std::string g = gguf_name(layout_, hf);  // blk.N.attn_kv_b.weight
    if (g.empty() || f_.has_tensor(g)) return std::nullopt;
    const std::string base = g.substr(0, g.size() - std::string_view("kv_b.weight").size());
    const std::string k = base + "k_b.weight", v = base + "v_b.weight";
    if (!f_.has_tensor(k) || !f_.has_tensor(v))
      throw FormatError("kappa: " + f_.path() + ": tensors " + kappa::quoted(k) + " and " +
                        kappa::quoted(v) + " (or " + kappa::quoted(g) +
                        ") are missing (the metadata's latent attention needs them)");
    const io::GgufTensorInfo &kt = f_.tensor(k), &vt = f_.tensor(v);
    if (kt.dims.size() != 3 || vt.dims.size() != 3)
      throw ShapeError("kappa: " + f_.path() + ": tensors " + kappa::quoted(k) + " " +
                       io::tensor_shape_string(kt.shape()) + " and " + kappa::quoted(v) + " " +
                       io::tensor_shape_string(vt.shape()) + " must have 3 dimensions");
    return std::pair(kt, vt);
  }

  template <Scalar T>
  RowMatrix<T> joined_kv_b(const io::GgufTensorInfo& kt, const io::GgufTensorInfo& vt) const {
    const Index h = kt.dims[2], nope = kt.dims[0], r = kt.dims[1], dv = vt.dims[1];
    std::vector<float> k(static_cast<std::size_t>(kt.numel)), v(static_cast<std::size_t>(vt.numel));
    f_.dequantize_into(kt, k.data());
    f_.dequantize_into(vt, v.data());
    RowMatrix<T> m(h * (nope + dv), r);
    for (Index head = 0; head < h; ++head) {
      for (Index i = 0; i < nope; ++i)
        for (Index c = 0; c < r; ++c)  // k_b[head] is r x nope
          m(head * (nope + dv) + i, c) =
              static_cast<T>(k[static_cast<std::size_t>((head * r + c) * nope + i)]);
      for (Index j = 0; j < dv; ++j)
        for (Index c = 0; c < r; ++c)  // v_b[head] is d_v x r
          m(head * (nope + dv) + nope + j, c) =
              static_cast<T>(v[static_cast<std::size_t>((head * dv + j) * r + c)]);
    }
    return m;
  }

  /// The head count whose rows llama's converter permuted in tensor `hf`
  /// (W^Q: n_head, W^K: n_kv), or 0 for a tensor taken as stored.
  Index permuted_heads(std::string_view hf) const {
    if (layout_ != GgufLayout::kLlama) return 0;
    if (hf.find("self_attn.q_proj.") != std::string_view::npos) return n_head_;
    if (hf.find("self_attn.k_proj.") != std::string_view::npos) return n_kv_;
    return 0;
  }

  /// Whether the merged tensor of x holds expert x.expert (3 dims, ne[2]
  /// experts).
  bool slice_exists(const ExpertSlice& x) const {
    const io::GgufTensorInfo& t = f_.tensor(x.tensor);
    return t.dims.size() == 3 && x.expert < t.dims[2];
  }

  /// The table entry of tensor `hf`; an expert's slice of a merged tensor as
  /// an entry of its own (its dims, bytes and offset).
  io::GgufTensorInfo info(std::string_view hf) const {
    if (const auto x = expert_slice(hf)) {
      if (!f_.has_tensor(x->tensor))
        throw FormatError("kappa: " + f_.path() + ": tensor " + kappa::quoted(x->tensor) +
                          " is missing (the metadata's experts need it)");
      const io::GgufTensorInfo& all = f_.tensor(x->tensor);
      if (!slice_exists(*x))
        throw ShapeError("kappa: " + f_.path() + ": tensor " + kappa::quoted(all.name) +
                         " has shape " + io::tensor_shape_string(all.shape()) +
                         ", which holds no " + "expert " + std::to_string(x->expert) +
                         " (an [n_expert][out][in] tensor)");
      io::GgufTensorInfo t = all;
      const auto n_e = static_cast<std::uint64_t>(all.dims[2]);
      t.dims.pop_back();
      t.bytes = all.bytes / n_e;
      t.numel = all.numel / all.dims[2];
      t.n_rows = all.n_rows / all.dims[2];
      t.offset += static_cast<std::uint64_t>(x->expert) * t.bytes;
      t.file_offset += static_cast<std::uint64_t>(x->expert) * t.bytes;
      return t;
    }
    const std::string g = gguf_name(layout_, hf);
    if (g.empty())
      throw FormatError("kappa: " + f_.path() + ": kappa knows no GGUF name for tensor " +
                        kappa::quoted(hf));
    if (!f_.has_tensor(g))
      throw FormatError("kappa: " + f_.path() + ": tensor " + kappa::quoted(g) +
                        " is missing (the metadata's layers and architecture need it)");
    return f_.tensor(g);
  }

  /// GPT-2's Conv1D weights (GPT2Model.modify_tensors transposed them).
  bool transposed(std::string_view hf) const {
    if (layout_ != GgufLayout::kGpt2) return false;
    for (std::string_view s :
         {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
      if (hf.size() >= s.size() && hf.substr(hf.size() - s.size()) == s) return true;
    return false;
  }

  template <Scalar T>
  RowMatrix<T> permuted_rows(std::string_view hf, RowMatrix<T> m) const {
    if (layout_ != GgufLayout::kLlama) return m;
    const bool q = hf.find("self_attn.q_proj.") != std::string_view::npos;
    const bool k = hf.find("self_attn.k_proj.") != std::string_view::npos;
    if (!q && !k) return m;
    return detail::unpermute_rope_rows<T>(m, q ? n_head_ : n_kv_);
  }

  const io::GgufFile& f_;
  GgufLayout layout_ = GgufLayout::kLlama;
  Index n_head_ = 1, n_kv_ = 1;
  std::shared_ptr<const void> mapping_;
};

/// The sizes of a llama-layout GGUF file (llama, qwen2) from its metadata,
/// as hf::llama_sizes reads them from a config.json. \throws FormatError
/// naming the key.
inline hf::LlamaSizes llama_sizes(const io::GgufFile& f, const std::string& arch) {
  const std::string a = arch + ".";
  hf::LlamaSizes s;
  s.d = detail::integer(f, a + "embedding_length");
  s.n_layer = detail::layer_count(f, a + "block_count");
  s.n_head = detail::integer(f, a + "attention.head_count", std::nullopt, 1, kMaxHeads);
  s.n_kv = detail::integer(f, a + "attention.head_count_kv", s.n_head, 1, kMaxHeads);
  if (s.n_head % s.n_kv != 0)
    detail::fail(f, "metadata key " + kappa::quoted(a + "attention.head_count_kv") + " = " +
                        std::to_string(s.n_kv) + " must divide " + a +
                        "attention.head_count = " + std::to_string(s.n_head));
  if (!f.has(a + "attention.key_length") && s.d % s.n_head != 0)
    detail::fail(f, "metadata key " + kappa::quoted(a + "attention.head_count") + " must divide " +
                        a + "embedding_length = " + std::to_string(s.d));
  s.d_head = detail::integer(f, a + "attention.key_length", s.d / s.n_head, 2);
  if (s.d_head % 2 != 0)
    detail::fail(f, "metadata key " + kappa::quoted(a + "attention.key_length") +
                        " must be even for RoPE, got " + std::to_string(s.d_head));
  if (detail::integer(f, a + "attention.value_length", s.d_head) != s.d_head)
    detail::fail(f, "metadata key " + kappa::quoted(a + "attention.value_length") +
                        " differs from the key length " + std::to_string(s.d_head) +
                        "; kappa's LLaMA layout needs them equal");
  s.q_width = checked_mul("head_count x key_length", s.n_head, s.d_head);
  s.kv_width = checked_mul("head_count_kv x key_length", s.n_kv, s.d_head);
  s.d_ff = detail::integer(f, a + "feed_forward_length");
  s.max_pos = detail::integer(f, a + "context_length", Index{2048});
  s.eps =
      detail::positive(f, a + "attention.layer_norm_rms_epsilon", std::nullopt, hf::kMaxEpsilon);
  s.theta = detail::positive(f, a + "rope.freq_base", 10000.0, hf::kMaxRopeBase);
  s.d_rot = detail::integer(f, a + "rope.dimension_count", s.d_head, 2);
  if (s.d_rot != s.d_head)
    detail::fail(f, "metadata key " + kappa::quoted(a + "rope.dimension_count") + " is " +
                        std::to_string(s.d_rot) + ", not the head width " +
                        std::to_string(s.d_head) + "; kappa's LLaMA layout rotates whole heads");
  const std::string scaling = detail::string(f, a + "rope.scaling.type", std::string("none"));
  if (scaling == "linear") {
    s.scaling.kind = RopeScaling::Kind::kLinear;
    s.scaling.factor =
        detail::positive(f, a + "rope.scaling.factor", std::nullopt, hf::kMaxRopeFactor);
    s.scaling.original_context = s.max_pos;
  } else if (scaling != "none") {
    detail::fail(f, "metadata key " + kappa::quoted(a + "rope.scaling.type") + " is " +
                        kappa::quoted(scaling) + ", which kappa does not load yet (none, linear)");
  }
  if (f.has_tensor("rope_freqs.weight")) {
    // Llama 3's rule as llama.cpp's converter stores it: one factor per
    // frequency, by which ggml's rope divides theta^(-2i/d_R) (ggml_rope_ext's
    // freq_factors). kappa's LongRoPE divides by per-frequency factors too:
    // equal short and long factors and attention factor 1 are exactly that.
    const io::GgufTensorInfo& t = f.tensor("rope_freqs.weight");
    if (t.numel != s.d_rot / 2)
      throw ShapeError("kappa: " + f.path() + ": tensor \"rope_freqs.weight\" has shape " +
                       io::tensor_shape_string(t.shape()) + ", expected [" +
                       std::to_string(s.d_rot / 2) + "] (one factor per rotary frequency)");
    if (s.scaling.kind != RopeScaling::Kind::kNone)
      detail::fail(f, "tensor \"rope_freqs.weight\" and " + a +
                          "rope.scaling.type are both set; kappa applies one or the other");
    const RowMatrix<float> ff = f.dequantize("rope_freqs.weight");
    std::vector<double> factors(ff.data(), ff.data() + ff.size());
    for (double x : factors)
      if (!(x > 0) || !(x <= hf::kMaxRopeFactor))
        detail::fail(f, "tensor \"rope_freqs.weight\" holds " + std::to_string(x) +
                            ", not a factor in (0, 1e6]");
    s.scaling.kind = RopeScaling::Kind::kLongRope;
    s.scaling.factor = 1.0;
    s.scaling.original_context = s.max_pos;
    s.scaling.attention_factor = 1.0;
    s.scaling.short_factor = factors;
    s.scaling.long_factor = std::move(factors);
  }
  if (f.has("tokenizer.ggml.tokens")) {
    s.vocab = static_cast<Index>(f.get_array<std::string>("tokenizer.ggml.tokens").size());
  } else if (f.has(a + "vocab_size")) {
    s.vocab = detail::integer(f, a + "vocab_size");
  } else {
    s.vocab = f.tensor("token_embd.weight").rows();
  }
  s.tied = !f.has_tensor("output.weight");
  s.qkv_bias = arch == "qwen2" || arch == "qwen2moe";  // q/k/v with bias, o_proj without
  s.o_bias = false;
  return s;
}

/// The mixture of experts of a llama-layout file (llama.cpp's names): llama
/// with llama.expert_count > 0 (Mixtral: every layer, top-k weights
/// renormalized, experts as wide as feed_forward_length) or qwen2moe
/// (expert_feed_forward_length, expert_shared_feed_forward_length, top-k
/// weights as scored: llama.cpp keeps no norm_topk_prob for it, and neither
/// can the file). nullopt for a dense model. \throws FormatError naming the
/// key.
inline std::optional<hf::MoeSizes> moe_sizes(const io::GgufFile& f, const std::string& arch,
                                             Index n_layer) {
  const std::string a = arch + ".";
  const Index n_e = detail::integer(f, a + "expert_count", Index{0}, 0, hf::kMaxExperts);
  if (n_e == 0) {
    if (arch == "qwen2moe") detail::fail(f, a + "expert_count is missing or 0");
    return std::nullopt;
  }
  hf::MoeSizes m;
  m.router.n_experts = n_e;
  m.router.top_k = detail::integer(f, a + "expert_used_count", std::nullopt, 1, n_e);
  m.sparse.assign(static_cast<std::size_t>(n_layer), char{1});
  if (arch == "qwen2moe") {
    m.layout = hf::MoeSizes::Layout::kQwen2Moe;
    m.router.weights = TopKWeights::kAsScored;
    m.d_expert = detail::integer(f, a + "expert_feed_forward_length");
    m.d_shared = detail::integer(f, a + "expert_shared_feed_forward_length", Index{0}, 0);
  } else {
    m.layout = hf::MoeSizes::Layout::kMixtral;
    m.router.weights = TopKWeights::kRenormalized;
    m.d_expert = detail::integer(f, a + "feed_forward_length");
  }
  try {
    m.router.validate();
  } catch (const std::invalid_argument& e) {
    detail::fail(f, a + "expert_count / expert_used_count: " + std::string(e.what()));
  }
  return m;
}

/// The config.json equivalent of a gpt2 GGUF file's metadata, for
/// hf::load_gpt2: gpt2.embedding_length, .block_count, .attention.head_count,
/// .context_length (the learned positions), .feed_forward_length,
/// .attention.layer_norm_epsilon; the vocabulary as llama_sizes(); tied
/// unless output.weight is stored; llama.cpp's GPT-2 uses the tanh GELU
/// (gelu_new). Each value is checked here, naming the GGUF key.
inline hf::Config gpt2_config(const io::GgufFile& f) {
  const Index d = detail::integer(f, "gpt2.embedding_length");
  const Index n_head = detail::integer(f, "gpt2.attention.head_count", std::nullopt, 1, kMaxHeads);
  if (d % n_head != 0)
    detail::fail(f, "metadata key \"gpt2.attention.head_count\" = " + std::to_string(n_head) +
                        " must divide gpt2.embedding_length = " + std::to_string(d));
  Index vocab = 0;
  if (f.has("tokenizer.ggml.tokens"))
    vocab = static_cast<Index>(f.get_array<std::string>("tokenizer.ggml.tokens").size());
  else if (f.has("gpt2.vocab_size"))
    vocab = detail::integer(f, "gpt2.vocab_size");
  else
    vocab = f.tensor("token_embd.weight").rows();
  nlohmann::json j = {
      {"model_type", "gpt2"},
      {"n_embd", d},
      {"n_layer", detail::layer_count(f, "gpt2.block_count")},
      {"n_head", n_head},
      {"n_positions", detail::integer(f, "gpt2.context_length")},
      {"n_inner", detail::integer(f, "gpt2.feed_forward_length")},
      {"vocab_size", vocab},
      {"layer_norm_epsilon",
       detail::positive(f, "gpt2.attention.layer_norm_epsilon", std::nullopt, hf::kMaxEpsilon)},
      {"activation_function", "gelu_new"},
      {"tie_word_embeddings", !f.has_tensor("output.weight")}};
  return hf::Config(std::move(j), f.path() + " (gpt2.* metadata)");
}

/// The config.json equivalent of a deepseek2 GGUF file's metadata, for
/// hf::load_deepseek_v2 / load_deepseek_moe (llama.cpp's converter,
/// DeepseekV2Model, writes them): deepseek2.embedding_length, .block_count,
/// .attention.head_count, .feed_forward_length (the dense layers),
/// .context_length, .rope.freq_base, .attention.layer_norm_rms_epsilon,
/// .attention.kv_lora_rank, .attention.q_lora_rank (absent: V2-Lite's plain
/// W^Q), .rope.dimension_count (d_rope), .attention.key_length_mla /
/// .value_length_mla (d_nope + d_rope, d_v; files without them have these
/// in key_length / value_length), YaRN from .rope.scaling.* with mscale =
/// mscale_all_dim = yarn_log_multiplier / 0.1 (the converter keeps only
/// 0.1 mscale_all_dim, and llama.cpp assumes the two equal); the experts
/// from .expert_count, .expert_used_count, .expert_shared_count,
/// .expert_feed_forward_length, .leading_dense_block_count,
/// .expert_group_count / _used_count, .expert_weights_scale,
/// .expert_weights_norm and .expert_gating_func (1 softmax, 2 sigmoid:
/// DeepSeek-V3's routing with the biased group top-k; softmax with more
/// than one group: V2's group-limited greedy). No expert_count: every layer
/// dense.
inline hf::Config deepseek2_config(const io::GgufFile& f) {
  const std::string a = "deepseek2.";
  const Index d_rope = detail::integer(f, a + "rope.dimension_count", std::nullopt, 2);
  const Index k_len = f.has(a + "attention.key_length_mla")
                          ? detail::integer(f, a + "attention.key_length_mla")
                          : detail::integer(f, a + "attention.key_length");
  const Index v_len = f.has(a + "attention.value_length_mla")
                          ? detail::integer(f, a + "attention.value_length_mla")
                          : detail::integer(f, a + "attention.value_length");
  if (k_len <= d_rope)
    detail::fail(f, "metadata key \"" + a +
                        "attention.key_length_mla\" = " + std::to_string(k_len) +
                        " must exceed rope.dimension_count = " + std::to_string(d_rope));
  Index vocab = 0;
  if (f.has("tokenizer.ggml.tokens"))
    vocab = static_cast<Index>(f.get_array<std::string>("tokenizer.ggml.tokens").size());
  else
    vocab = f.tensor("token_embd.weight").rows();
  nlohmann::json j = {
      {"model_type", "deepseek_v2"},
      {"hidden_size", detail::integer(f, a + "embedding_length")},
      {"num_hidden_layers", detail::layer_count(f, a + "block_count")},
      {"num_attention_heads",
       detail::integer(f, a + "attention.head_count", std::nullopt, 1, kMaxHeads)},
      {"intermediate_size", detail::integer(f, a + "feed_forward_length")},
      {"vocab_size", vocab},
      {"max_position_embeddings", detail::integer(f, a + "context_length", Index{2048})},
      {"rope_theta", detail::positive(f, a + "rope.freq_base", 10000.0, hf::kMaxRopeBase)},
      {"rms_norm_eps",
       detail::positive(f, a + "attention.layer_norm_rms_epsilon", std::nullopt, hf::kMaxEpsilon)},
      {"kv_lora_rank", detail::integer(f, a + "attention.kv_lora_rank")},
      {"qk_rope_head_dim", d_rope},
      {"qk_nope_head_dim", k_len - d_rope},
      {"v_head_dim", v_len},
      {"tie_word_embeddings", !f.has_tensor("output.weight")}};
  if (f.has(a + "attention.q_lora_rank"))
    j["q_lora_rank"] = detail::integer(f, a + "attention.q_lora_rank");
  const std::string scaling = detail::string(f, a + "rope.scaling.type", std::string("none"));
  if (scaling == "yarn") {
    const double mscale =
        detail::positive(f, a + "rope.scaling.yarn_log_multiplier", 1.0, 1e3) / 0.1;
    j["rope_scaling"] = {
        {"type", "yarn"},
        {"factor", detail::positive(f, a + "rope.scaling.factor", std::nullopt, 1e6)},
        {"original_max_position_embeddings",
         detail::integer(f, a + "rope.scaling.original_context_length")},
        {"beta_fast", detail::positive(f, a + "rope.scaling.yarn_beta_fast", 32.0, 1e6)},
        {"beta_slow", detail::positive(f, a + "rope.scaling.yarn_beta_slow", 1.0, 1e6)},
        {"mscale", mscale},
        {"mscale_all_dim", mscale}};
  } else if (scaling != "none") {
    detail::fail(f, "metadata key \"" + a + "rope.scaling.type\" is " + kappa::quoted(scaling) +
                        "; kappa loads deepseek2 with none or yarn");
  }
  if (detail::integer(f, a + "expert_count", Index{0}, 0, hf::kMaxExperts) > 0) {
    const Index gating = detail::integer(f, a + "expert_gating_func", Index{1}, 1, 2);
    const Index groups = detail::integer(f, a + "expert_group_count", Index{1}, 1);
    j["n_routed_experts"] = detail::integer(f, a + "expert_count");
    j["num_experts_per_tok"] = detail::integer(f, a + "expert_used_count");
    j["n_shared_experts"] = detail::integer(f, a + "expert_shared_count", Index{0}, 0);
    j["moe_intermediate_size"] = detail::integer(f, a + "expert_feed_forward_length");
    j["first_k_dense_replace"] = detail::integer(f, a + "leading_dense_block_count", Index{0}, 0);
    j["n_group"] = groups;
    j["topk_group"] = detail::integer(f, a + "expert_group_used_count", Index{1}, 1);
    j["routed_scaling_factor"] = detail::positive(f, a + "expert_weights_scale", 1.0, 1e6);
    j["norm_topk_prob"] =
        f.has(a + "expert_weights_norm") && f.get<bool>(a + "expert_weights_norm");
    j["scoring_func"] = gating == 2 ? "sigmoid" : "softmax";
    j["topk_method"] = gating == 2 ? "noaux_tc" : groups > 1 ? "group_limited_greedy" : "greedy";
    if (gating == 2) j["model_type"] = "deepseek_v3";
  }
  return hf::Config(std::move(j), f.path() + " (deepseek2.* metadata)");
}

/// A model loaded from a GGUF file: the same CausalLM as hf::load_causal_lm
/// returns, its model_type() the file's general.architecture.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using CausalLM = hf::CausalLM<T, S>;

namespace detail {
template <Scalar T, WeightStoragePolicy S>
CausalLM<T, S> load_causal_lm(const io::GgufFile& f, std::shared_ptr<const void> mapping);
}  // namespace detail

/// The model of an open GGUF file (see the file comment). Weight matrices
/// kept in the file's format (AsStoredWeights, or a block policy matching a
/// tensor's type) copy their blocks: the model does not need `f` afterwards.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
CausalLM<T, S> load_causal_lm(const io::GgufFile& f) {
  return detail::load_causal_lm<T, S>(f, nullptr);
}

/// As above for a file shared with the model: weight matrices kept in the
/// file's format view its mapping (no copy), and keep `f` alive. Q4_0 and
/// Q4_K matrices are read as `f` holds them: interleaved by eights when it
/// was opened with interleave_q4 (io::GgufFile), which their decode
/// products read 8 rows at a time.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
CausalLM<T, S> load_causal_lm(std::shared_ptr<const io::GgufFile> f) {
  const io::GgufFile& file = *f;
  return detail::load_causal_lm<T, S>(file, std::move(f));
}

template <Scalar T, WeightStoragePolicy S>
CausalLM<T, S> detail::load_causal_lm(const io::GgufFile& f, std::shared_ptr<const void> mapping) {
  const std::string arch = detail::string(f, "general.architecture");
  if (arch == "gpt2")
    return CausalLM<T, S>(
        hf::load_gpt2<T, S>(gpt2_config(f), GgufTensors(f, GgufLayout::kGpt2, 1, 1, nullptr)),
        arch);
  if (arch == "deepseek2") {
    const hf::Config c = deepseek2_config(f);
    const Index n_head = c.integer("num_attention_heads");
    const GgufTensors tensors(f, GgufLayout::kDeepSeek, n_head, n_head, std::move(mapping));
    if (c.has("n_routed_experts"))
      return CausalLM<T, S>(hf::load_deepseek_moe<T, S>(c, tensors), arch);
    return CausalLM<T, S>(hf::load_deepseek_v2<T, S>(c, tensors), arch);
  }
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "qwen2moe")
    detail::fail(f, "general.architecture is " + kappa::quoted(arch) +
                        ", which kappa does not load from GGUF (" +
                        std::string(kSupportedArchitectures) + ")");
  const hf::LlamaSizes s = llama_sizes(f, arch);
  const GgufTensors tensors(f, arch == "llama" ? GgufLayout::kLlama : GgufLayout::kNeox, s.n_head,
                            s.n_kv, std::move(mapping));
  if (arch == "qwen3") return CausalLM<T, S>(hf::detail::build_qwen3<T, S>(s, tensors), arch);
  if (const std::optional<hf::MoeSizes> m = moe_sizes(f, arch, s.n_layer))
    return CausalLM<T, S>(hf::detail::build_llama_moe<T, S>(s, *m, tensors), arch);
  auto model = hf::detail::build_llama<T, S, LlamaLayer<T, S>>(
      s, tensors, CausalMask{}, hf::detail::llama_rope<T>(s),
      [&s](const hf::detail::Weights<T, GgufTensors>& w, Index, const std::string& p) {
        return hf::detail::read_llama_mlp<T, S>(w, p, s.d, s.d_ff);
      });
  return CausalLM<T, S>(std::move(model), arch);
}

/// Loads the model of GGUF file `path`, the file mapped or read into huge
/// pages (io::Residence: the block weights are views of it). \throws
/// FormatError naming the file and the key or tensor, ShapeError naming a
/// tensor whose shape disagrees with the metadata (see the file comment).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
CausalLM<T, S> load_causal_lm(const std::filesystem::path& path,
                              io::Residence residence = io::Residence::kMapped) {
  return load_causal_lm<T, S>(std::make_shared<const io::GgufFile>(path.string(), residence));
}

// ---- The tokenizer --------------------------------------------------------------

/// tokenizer.ggml.token_type values (gguf-py's TokenType, llama.cpp's
/// llama_token_type).
enum class GgufTokenType : std::int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

/// The split regex of a tokenizer.ggml.pre value, spelled as the model's
/// tokenizer.json spells it (the original that llama.cpp's llama-vocab.cpp
/// quotes beside its adapted form), and whether llama.cpp sets
/// ignore_merges for it; nullopt for a value kappa does not know.
struct GgufPreTokenizer {
  std::string_view regex;
  bool ignore_merges = false;
};
inline std::optional<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view pre) {
  // llama-vocab.cpp: "llama3", "llama-v3", "llama-bpe" -> LLAMA3 (ignore_merges);
  // "gpt-2" -> GPT2; "qwen2" -> QWEN2.
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe")
    return GgufPreTokenizer{
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
        true};
  if (pre == "gpt-2")
    return GgufPreTokenizer{
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false};
  if (pre == "qwen2")
    return GgufPreTokenizer{
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
        false};
  return std::nullopt;
}

namespace detail {

/// Token id metadata `key` in [0, n); `fallback` when absent.
inline std::optional<std::int64_t> token_id(const io::GgufFile& f, const char* key, std::int64_t n,
                                            std::optional<std::int64_t> fallback = std::nullopt) {
  if (!f.has(key)) return fallback;
  const std::int64_t id = f.get_integer(key);
  if (id < 0 || id >= n)
    fail(f, "metadata key " + kappa::quoted(key) + " is " + std::to_string(id) +
                ", not a token id in [0, " + std::to_string(n) + ")");
  return id;
}

/// Boolean metadata `key`; `fallback` when absent.
inline bool flag(const io::GgufFile& f, const char* key, bool fallback) {
  return f.has(key) ? f.get<bool>(key) : fallback;
}

/// tokenizer.json's TemplateProcessing that puts `bos` before and `eos`
/// after a sequence (either may be absent).
inline nlohmann::json bos_eos_template(const std::vector<std::string>& tokens,
                                       std::optional<std::int64_t> bos,
                                       std::optional<std::int64_t> eos) {
  nlohmann::json single = nlohmann::json::array(), specials = nlohmann::json::object();
  const auto special = [&](std::int64_t id) {
    const std::string& t = tokens[static_cast<std::size_t>(id)];
    single.push_back({{"SpecialToken", {{"id", t}, {"type_id", 0}}}});
    specials[t] = {{"id", t}, {"ids", {id}}, {"tokens", {t}}};
  };
  if (bos) special(*bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos) special(*eos);
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", single},
          {"special_tokens", specials}};
}

/// Protocol-buffer encoding, as much as a SentencePiece ModelProto needs.
struct ProtoWriter {
  std::string out;
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  void tag(std::uint32_t field, std::uint32_t wire) { varint((std::uint64_t{field} << 3) | wire); }
  /// A varint field (a negative value takes ten bytes, as protobuf's int32).
  void integer(std::uint32_t field, std::int64_t v) {
    tag(field, 0);
    varint(static_cast<std::uint64_t>(v));
  }
  void bytes(std::uint32_t field, std::string_view b) {
    tag(field, 2);
    varint(b.size());
    out.append(b);
  }
  void f32(std::uint32_t field, float x) {
    tag(field, 5);
    std::uint32_t u = 0;
    std::memcpy(&u, &x, 4);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  }
};

}  // namespace detail

/// The SentencePiece model (ModelProto) of a GGUF file's SentencePiece-style
/// vocabulary (tokenizer.ggml.model "llama"), as llama.cpp's tokenizer reads
/// it (llama-vocab.cpp, LLAMA_VOCAB_TYPE_SPM): BPE over the pieces
/// tokenizer.ggml.tokens with their .scores and .token_type (llama.cpp's
/// numbering is sentencepiece's: normal 1, unknown 2, control 3,
/// user-defined 4, unused 5, byte 6), byte fallback when byte pieces exist,
/// a space prefix unless .add_space_prefix is false, whitespace escaped as
/// U+2581, no other normalization; unknown / BOS / EOS from
/// .unknown_token_id / .bos_token_id / .eos_token_id (llama.cpp's defaults
/// 0, 1, 2). \throws FormatError naming the key, or as
/// tokenize::SentencePieceModel::parse for a vocabulary sentencepiece would
/// refuse (e.g. no piece of type unknown).
inline tokenize::SentencePieceModel spm_model(const io::GgufFile& f) {
  const std::vector<std::string>& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::vector<float>& scores = f.get_array<float>("tokenizer.ggml.scores");
  std::vector<std::int32_t> types(tokens.size(), static_cast<std::int32_t>(GgufTokenType::kNormal));
  if (f.has("tokenizer.ggml.token_type"))
    types = f.get_array<std::int32_t>("tokenizer.ggml.token_type");
  for (const auto& [key, size] : {std::pair{"tokenizer.ggml.scores", scores.size()},
                                  std::pair{"tokenizer.ggml.token_type", types.size()}})
    if (static_cast<std::int64_t>(size) != n)
      detail::fail(f, "metadata key " + kappa::quoted(key) + " has " + std::to_string(size) +
                          " entries for " + std::to_string(n) + " tokens");
  bool bytes = false;
  detail::ProtoWriter model;
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    if (types[k] < 1 || types[k] > 6)
      detail::fail(f, "metadata key \"tokenizer.ggml.token_type\" holds " +
                          std::to_string(types[k]) + " for token " + std::to_string(k) +
                          " (normal 1 ... byte 6)");
    bytes = bytes || types[k] == static_cast<std::int32_t>(GgufTokenType::kByte);
    detail::ProtoWriter piece;
    piece.bytes(1, tokens[k]);
    piece.f32(2, scores[k]);
    piece.integer(3, types[k]);
    model.bytes(1, piece.out);
  }
  detail::ProtoWriter trainer;
  trainer.integer(3, 2);  // model_type: BPE
  trainer.integer(4, n);  // vocab_size
  trainer.integer(35, bytes ? 1 : 0);
  trainer.integer(40, *detail::token_id(f, "tokenizer.ggml.unknown_token_id", n, 0));
  trainer.integer(41, *detail::token_id(f, "tokenizer.ggml.bos_token_id", n, 1));
  trainer.integer(42, *detail::token_id(f, "tokenizer.ggml.eos_token_id", n, 2));
  trainer.integer(43, detail::token_id(f, "tokenizer.ggml.padding_token_id", n).value_or(-1));
  model.bytes(2, trainer.out);
  detail::ProtoWriter normalizer;
  normalizer.bytes(1, "identity");
  normalizer.integer(3, detail::flag(f, "tokenizer.ggml.add_space_prefix", true) ? 1 : 0);
  normalizer.integer(4, 0);  // remove_extra_whitespaces
  normalizer.integer(5, 1);  // escape_whitespaces
  model.bytes(3, normalizer.out);
  return tokenize::SentencePieceModel::parse(
      model.out, f.path() + " (tokenizer.ggml.* as a SentencePiece model)");
}

/// The tokenizer.json (as Hugging Face's tokenizers library writes it) of a
/// GGUF file's byte-level BPE vocabulary (tokenizer.ggml.model "gpt2"):
/// tokenizer.ggml.tokens (id = index), .merges ("a b" each), .token_type
/// (control and user-defined tokens become added tokens, special when
/// control), .pre (the split regex, see gguf_pre_tokenizer), .bos_token_id
/// prepended when .add_bos_token says so (default: llama.cpp's for the pre
/// type), .add_eos_token likewise. \throws FormatError naming the key.
inline nlohmann::json gpt2_tokenizer_json(const io::GgufFile& f) {
  const std::vector<std::string>& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
  const std::string pre = detail::string(f, "tokenizer.ggml.pre", std::string("default"));
  const std::optional<GgufPreTokenizer> split = gguf_pre_tokenizer(pre);
  if (!split)
    detail::fail(f, "metadata key \"tokenizer.ggml.pre\" is " + kappa::quoted(pre) +
                        ", a pre-tokenizer kappa does not know (llama-bpe, llama3, llama-v3, "
                        "gpt-2, qwen2)");
  const auto n = static_cast<std::int64_t>(tokens.size());
  std::vector<std::int32_t> types(tokens.size(), static_cast<std::int32_t>(GgufTokenType::kNormal));
  if (f.has("tokenizer.ggml.token_type")) {
    types = f.get_array<std::int32_t>("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
      detail::fail(f, "metadata key \"tokenizer.ggml.token_type\" has " +
                          std::to_string(types.size()) + " entries for " + std::to_string(n) +
                          " tokens");
  }
  const std::optional<std::int64_t> bos = detail::token_id(f, "tokenizer.ggml.bos_token_id", n);
  const std::optional<std::int64_t> eos = detail::token_id(f, "tokenizer.ggml.eos_token_id", n);
  const bool add_bos = detail::flag(f, "tokenizer.ggml.add_bos_token", split->ignore_merges);
  const bool add_eos = detail::flag(f, "tokenizer.ggml.add_eos_token", false);

  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::string& t = tokens[static_cast<std::size_t>(i)];
    const auto type = static_cast<GgufTokenType>(types[static_cast<std::size_t>(i)]);
    if (vocab.contains(t))
      detail::fail(f, "metadata key \"tokenizer.ggml.tokens\" repeats token " + kappa::quoted(t) +
                          " (id " + std::to_string(i) + ")");
    vocab[t] = i;
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUserDefined)
      added.push_back({{"id", i},
                       {"content", t},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == GgufTokenType::kControl}});
  }
  nlohmann::json merges = nlohmann::json::array();
  if (f.has("tokenizer.ggml.merges"))
    for (const std::string& m : f.get_array<std::string>("tokenizer.ggml.merges"))
      merges.push_back(m);

  if (add_bos && !bos)
    detail::fail(f, "tokenizer.ggml.add_bos_token is true but no bos_token_id is set");
  if (add_eos && !eos)
    detail::fail(f, "tokenizer.ggml.add_eos_token is true but no eos_token_id is set");
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(split->regex)}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", true},
               {"use_regex", false}}}}}},
          {"post_processor", detail::bos_eos_template(tokens, add_bos ? bos : std::nullopt,
                                                      add_eos ? eos : std::nullopt)},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", split->ignore_merges},
            {"vocab", vocab},
            {"merges", merges}}}};
}

/// The tokenizer of an open GGUF file: tokenizer.ggml.model "gpt2" (see
/// gpt2_tokenizer_json) or "llama" (spm_model(), in the tokenizer.json
/// layout of transformers' LlamaConverter: tokenize::SentencePieceModel::
/// to_hf_json). BOS is prepended and EOS appended as .add_bos_token /
/// .add_eos_token say (llama.cpp's defaults: BOS for "llama" and for the
/// llama3 pre types); bos_id() is then that BOS. The file's
/// tokenizer.ggml.eos_token_id is LoadedCausalLM::eos_id. \throws
/// FormatError naming the key.
inline tokenize::HfTokenizer load_tokenizer(const io::GgufFile& f) {
  const std::string model = detail::string(f, "tokenizer.ggml.model");
  const std::string source = f.path() + " (tokenizer.ggml.* as tokenizer.json)";
  if (model == "gpt2") return tokenize::HfTokenizer::from_json(gpt2_tokenizer_json(f), source);
  if (model != "llama")
    detail::fail(f, "metadata key \"tokenizer.ggml.model\" is " + kappa::quoted(model) +
                        "; kappa reads \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece "
                        "BPE) vocabularies from GGUF");
  nlohmann::json j = spm_model(f).to_hf_json();
  const std::vector<std::string>& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
  const auto n = static_cast<std::int64_t>(tokens.size());
  const bool add_bos = detail::flag(f, "tokenizer.ggml.add_bos_token", true);
  const bool add_eos = detail::flag(f, "tokenizer.ggml.add_eos_token", false);
  j["post_processor"] = detail::bos_eos_template(
      tokens, add_bos ? detail::token_id(f, "tokenizer.ggml.bos_token_id", n, 1) : std::nullopt,
      add_eos ? detail::token_id(f, "tokenizer.ggml.eos_token_id", n, 2) : std::nullopt);
  return tokenize::HfTokenizer::from_json(j, source);
}

/// What one call loads from a GGUF file: the model, its tokenizer, the
/// file's end-of-sequence id (tokenizer.ggml.eos_token_id) and the path.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
struct LoadedCausalLM {
  CausalLM<T, S> model;
  tokenize::HfTokenizer tokenizer;
  std::optional<TokenId> eos_id;
  std::filesystem::path file;
};

/// One call: the model and the tokenizer of GGUF file `path` (as
/// hf::load for a directory). \throws as load_causal_lm() and
/// load_tokenizer(). `interleave_q4`: the file's Q4_0 and Q4_K matrices
/// held interleaved by eights, rearranged in place as it is opened
/// (io::GgufFile; BlockWeightMatrix::interleaved() in core/quant_weights.hpp
/// says what that buys).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
LoadedCausalLM<T, S> load(const std::filesystem::path& path,
                          io::Residence residence = io::Residence::kMapped,
                          bool interleave_q4 = false) {
  const auto shared = std::make_shared<const io::GgufFile>(path.string(), residence, interleave_q4);
  const io::GgufFile& f = *shared;
  CausalLM<T, S> model = load_causal_lm<T, S>(shared);
  tokenize::HfTokenizer tok = load_tokenizer(f);
  std::optional<TokenId> eos;
  if (f.has("tokenizer.ggml.eos_token_id"))
    eos = static_cast<TokenId>(f.get_integer("tokenizer.ggml.eos_token_id"));
  else if (detail::string(f, "tokenizer.ggml.model") == "llama")
    eos = 2;  // llama.cpp's default for SentencePiece vocabularies
  return {std::move(model), std::move(tok), eos, path};
}

}  // namespace kappa::gguf
