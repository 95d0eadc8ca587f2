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
// Others (gpt2, deepseek2, the mixtures of experts, ...) are refused by name.
//
// Hyperparameters come from the metadata as llama.cpp reads them
// (gguf-py/gguf/constants.py Keys, llama.cpp's llama-model.cpp):
// <arch>.block_count, .context_length, .embedding_length,
// .feed_forward_length, .attention.head_count, .attention.head_count_kv
// (default head_count), .attention.key_length / .value_length (default
// embedding_length / head_count), .attention.layer_norm_rms_epsilon,
// .rope.freq_base (default 10000), .rope.dimension_count (must equal the
// head width: kappa's LLaMA rotates whole heads), .rope.scaling.type (none
// or linear with .rope.scaling.factor; yarn and the Llama-3 factors tensor
// rope_freqs.weight are refused by name). The vocabulary size is the length
// of tokenizer.ggml.tokens, else <arch>.vocab_size, else token_embd's rows.
//
// Tensors, by llama.cpp's names (gguf-py's MODEL_TENSOR names):
//   token_embd.weight, blk.N.attn_norm.weight, blk.N.attn_{q,k,v}.weight
//   (and .bias for qwen2), blk.N.attn_output.weight, blk.N.ffn_norm.weight,
//   blk.N.ffn_{gate,up,down}.weight, output_norm.weight, output.weight
//   (absent: tied to token_embd, as llama.cpp does).
// They reach the same builder as a Hugging Face llama directory
// (hf::detail::build_llama) through LlamaGgufTensors, which answers the
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
// Interim path: every tensor is dequantized to float (F16, BF16, Q8_0, Q4_0,
// Q4_K, Q6_K by kappa/core/quant_blocks.hpp, equal to ggml's) and copied into
// the model, which then holds T weights (or the storage policy S's). Keeping
// the quantized blocks without a dequantized copy, and views into the mapped
// file, are later steps (issue 27 items 1 and 3).
//
// Errors: an unsupported architecture, a missing or mistyped key or tensor
// is a FormatError naming the file and the key or tensor; a tensor whose
// shape disagrees with the metadata is a ShapeError naming the file, the
// tensor, its shape and the expected one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/io/gguf.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/hf.hpp"

namespace kappa::gguf {

/// The architectures kappa loads from GGUF.
inline constexpr std::string_view kSupportedArchitectures = "llama, qwen2";

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

/// The tensors of a llama-layout GGUF file under the Hugging Face names that
/// hf::detail::build_llama asks for ("model.layers.3.self_attn.q_proj.weight"
/// is "blk.3.attn_q.weight"), dequantized to T, W^Q and W^K in Hugging Face's
/// row order (see the file comment). It is the Source of hf::detail::Weights.
class LlamaGgufTensors {
 public:
  /// `rope_permuted`: the file's W^Q / W^K rows are in llama.cpp's
  /// interleaved order (llama); `n_head`, `n_kv`: the head counts.
  LlamaGgufTensors(const io::GgufFile& f, bool rope_permuted, Index n_head, Index n_kv)
      : f_(f), permuted_(rope_permuted), n_head_(n_head), n_kv_(n_kv) {}

  /// llama.cpp's name of Hugging Face tensor `hf`, or "" if it has none.
  [[nodiscard]] static std::string gguf_name(std::string_view hf) {
    if (hf == "model.embed_tokens.weight") return "token_embd.weight";
    if (hf == "model.norm.weight") return "output_norm.weight";
    if (hf == "lm_head.weight") return "output.weight";
    constexpr std::string_view kLayers = "model.layers.";
    if (hf.substr(0, kLayers.size()) != kLayers) return {};
    hf.remove_prefix(kLayers.size());
    const std::size_t dot = hf.find('.');
    if (dot == std::string_view::npos) return {};
    const std::string layer(hf.substr(0, dot));
    const std::string_view rest = hf.substr(dot + 1);
    static constexpr std::pair<std::string_view, std::string_view> kMap[] = {
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
    };
    for (const auto& [from, to] : kMap)
      if (rest == from) return "blk." + layer + "." + std::string(to);
    return {};
  }

  [[nodiscard]] bool has(std::string_view hf) const {
    const std::string g = gguf_name(hf);
    return !g.empty() && f_.has_tensor(g);
  }

  /// \throws FormatError naming the GGUF tensor when it is missing,
  /// ShapeError naming it, its shape and `expected` (row-major, as
  /// Hugging Face's: out x in) when they differ.
  void require_shape(std::string_view hf, const std::vector<std::int64_t>& expected) const {
    const io::GgufTensorInfo& t = info(hf);
    // A vector may be stored with trailing unit dimensions; compare the
    // row-major shape without them.
    std::vector<std::int64_t> shape = t.shape();
    while (shape.size() > expected.size() && shape.front() == 1) shape.erase(shape.begin());
    if (shape == expected) return;
    throw ShapeError("kappa: " + f_.path() + ": tensor " + kappa::quoted(t.name) + " has shape " +
                     io::tensor_shape_string(t.shape()) + ", expected " +
                     io::tensor_shape_string(expected) + " from the metadata");
  }

  /// Tensor `hf` as a (rows x cols) matrix after require_shape(hf, expected).
  template <Scalar T>
  [[nodiscard]] RowMatrix<T> matrix(std::string_view hf,
                                    const std::vector<std::int64_t>& expected) const {
    require_shape(hf, expected);
    RowMatrix<T> m = f_.dequantize(info(hf).name).template cast<T>();
    if (expected.size() == 1) m.resize(1, expected[0]);
    return permuted_rows(hf, std::move(m));
  }

  /// Tensor `hf` as a row vector (callers check its shape first).
  template <Scalar T>
  [[nodiscard]] RowVector<T> row_vector(std::string_view hf) const {
    const io::GgufTensorInfo& t = info(hf);
    RowMatrix<T> m = f_.dequantize(t.name).template cast<T>();
    // A bias of W^Q / W^K is permuted like the rows of its weight.
    const RowMatrix<T> col = Eigen::Map<const RowMatrix<T>>(m.data(), t.numel, 1);
    const RowMatrix<T> fixed = permuted_rows(hf, col);
    return Eigen::Map<const RowVector<T>>(fixed.data(), t.numel);
  }

  [[nodiscard]] const io::GgufFile& file() const { return f_; }

 private:
  const io::GgufTensorInfo& info(std::string_view hf) const {
    const std::string g = gguf_name(hf);
    if (g.empty())
      throw FormatError("kappa: " + f_.path() + ": kappa knows no GGUF name for tensor " +
                        kappa::quoted(hf));
    if (!f_.has_tensor(g))
      throw FormatError("kappa: " + f_.path() + ": tensor " + kappa::quoted(g) +
                        " is missing (the metadata's layers and architecture need it)");
    return f_.tensor(g);
  }

  template <Scalar T>
  RowMatrix<T> permuted_rows(std::string_view hf, RowMatrix<T> m) const {
    if (!permuted_) return m;
    const bool q = hf.find("self_attn.q_proj.") != std::string_view::npos;
    const bool k = hf.find("self_attn.k_proj.") != std::string_view::npos;
    if (!q && !k) return m;
    return detail::unpermute_rope_rows<T>(m, q ? n_head_ : n_kv_);
  }

  const io::GgufFile& f_;
  bool permuted_ = false;
  Index n_head_ = 1, n_kv_ = 1;
};

/// The sizes of a llama-layout GGUF file (llama, qwen2) from its metadata,
/// as hf::llama_sizes reads them from a config.json. \throws FormatError
/// naming the key.
inline hf::LlamaSizes llama_sizes(const io::GgufFile& f, const std::string& arch) {
  const std::string a = arch + ".";
  hf::LlamaSizes s;
  s.d = detail::integer(f, a + "embedding_length");
  s.n_layer = detail::integer(f, a + "block_count", std::nullopt, 0);
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
  if (f.has_tensor("rope_freqs.weight"))
    detail::fail(f,
                 "tensor \"rope_freqs.weight\" (Llama 3's RoPE frequency factors) is not "
                 "supported yet");
  if (f.has("tokenizer.ggml.tokens")) {
    s.vocab = static_cast<Index>(f.get_array<std::string>("tokenizer.ggml.tokens").size());
  } else if (f.has(a + "vocab_size")) {
    s.vocab = detail::integer(f, a + "vocab_size");
  } else {
    s.vocab = f.tensor("token_embd.weight").rows();
  }
  s.tied = !f.has_tensor("output.weight");
  s.qkv_bias = arch == "qwen2";  // Qwen2: q/k/v with bias, o_proj without
  s.o_bias = false;
  return s;
}

/// A model loaded from a GGUF file: the same CausalLM as hf::load_causal_lm
/// returns, its model_type() the file's general.architecture.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
using CausalLM = hf::CausalLM<T, S>;

/// The model of an open GGUF file (see the file comment).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
CausalLM<T, S> load_causal_lm(const io::GgufFile& f) {
  const std::string arch = detail::string(f, "general.architecture");
  if (arch != "llama" && arch != "qwen2")
    detail::fail(f, "general.architecture is " + kappa::quoted(arch) +
                        ", which kappa does not load from GGUF (" +
                        std::string(kSupportedArchitectures) + ")");
  const hf::LlamaSizes s = llama_sizes(f, arch);
  const LlamaGgufTensors tensors(f, /*rope_permuted=*/arch == "llama", s.n_head, s.n_kv);
  auto model = hf::detail::build_llama<T, S, LlamaLayer<T, S>>(
      s, tensors, CausalMask{}, hf::detail::llama_rope<T>(s),
      [&s](const hf::detail::Weights<T, LlamaGgufTensors>& w, Index, const std::string& p) {
        return hf::detail::read_llama_mlp<T, S>(w, p, s.d, s.d_ff);
      });
  return CausalLM<T, S>(std::move(model), arch);
}

/// Loads the model of GGUF file `path`. \throws FormatError naming the file
/// and the key or tensor, ShapeError naming a tensor whose shape disagrees
/// with the metadata (see the file comment).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
CausalLM<T, S> load_causal_lm(const std::filesystem::path& path) {
  const io::GgufFile f(path.string());
  return load_causal_lm<T, S>(f);
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
  const auto token_id = [&](const char* key) -> std::optional<std::int64_t> {
    if (!f.has(key)) return std::nullopt;
    const std::int64_t id = f.get_integer(key);
    if (id < 0 || id >= n)
      detail::fail(f, "metadata key " + kappa::quoted(key) + " is " + std::to_string(id) +
                          ", not a token id in [0, " + std::to_string(n) + ")");
    return id;
  };
  const std::optional<std::int64_t> bos = token_id("tokenizer.ggml.bos_token_id");
  const std::optional<std::int64_t> eos = token_id("tokenizer.ggml.eos_token_id");
  const auto flag = [&](const char* key, bool fallback) {
    return f.has(key) ? f.get<bool>(key) : fallback;
  };
  const bool add_bos = flag("tokenizer.ggml.add_bos_token", split->ignore_merges);
  const bool add_eos = flag("tokenizer.ggml.add_eos_token", false);

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

  nlohmann::json single = nlohmann::json::array(), specials = nlohmann::json::object();
  const auto special = [&](std::int64_t id) {
    const std::string& t = tokens[static_cast<std::size_t>(id)];
    single.push_back({{"SpecialToken", {{"id", t}, {"type_id", 0}}}});
    specials[t] = {{"id", t}, {"ids", {id}}, {"tokens", {t}}};
  };
  if (add_bos) {
    if (!bos) detail::fail(f, "tokenizer.ggml.add_bos_token is true but no bos_token_id is set");
    special(*bos);
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) {
    if (!eos) detail::fail(f, "tokenizer.ggml.add_eos_token is true but no eos_token_id is set");
    special(*eos);
  }
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
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", single},
            {"pair", single},
            {"special_tokens", specials}}},
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

/// The tokenizer of an open GGUF file (tokenizer.ggml.model "gpt2": see
/// gpt2_tokenizer_json). bos_id() is the prepended BOS; eos_id() is the
/// template's EOS when add_eos_token is set (the file's
/// tokenizer.ggml.eos_token_id is LoadedCausalLM::eos_id). \throws
/// FormatError naming the key; tokenizer.ggml.model "llama" (SentencePiece
/// scores) is not read yet.
inline tokenize::HfTokenizer load_tokenizer(const io::GgufFile& f) {
  const std::string model = detail::string(f, "tokenizer.ggml.model");
  if (model != "gpt2")
    detail::fail(f, "metadata key \"tokenizer.ggml.model\" is " + kappa::quoted(model) +
                        "; kappa reads \"gpt2\" (byte-level BPE) vocabularies from GGUF so far");
  return tokenize::HfTokenizer::from_json(gpt2_tokenizer_json(f),
                                          f.path() + " (tokenizer.ggml.* as tokenizer.json)");
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
/// load_tokenizer().
template <Scalar T, WeightStoragePolicy S = DenseWeights>
LoadedCausalLM<T, S> load(const std::filesystem::path& path) {
  const io::GgufFile f(path.string());
  CausalLM<T, S> model = load_causal_lm<T, S>(f);
  tokenize::HfTokenizer tok = load_tokenizer(f);
  std::optional<TokenId> eos;
  if (f.has("tokenizer.ggml.eos_token_id"))
    eos = static_cast<TokenId>(f.get_integer("tokenizer.ggml.eos_token_id"));
  return {std::move(model), std::move(tok), eos, path};
}

}  // namespace kappa::gguf
