// kappa/transformer/hf.hpp - Hugging Face model directories: config.json and
// safetensors weights to kappa models, with one call.
//
//   auto lm = kappa::hf::load_causal_lm<float>("path/to/gpt2");   // or llama, ...
//   kappa::RowMatrix<float> logits = lm.forward(ids);             // (N, N_T)
//
// Supported config.json model_type values and what they become:
//   gpt2                    Gpt2<T>       (Conv1D weights are already X W)
//   llama, mistral, qwen2   Llama<T>, or MistralSliding<T> when a sliding
//                           window is set; Qwen2's q/k/v biases
//   deepseek_v2, deepseek_v3  DeepSeekV2<T> when every layer is dense, else
//                           DeepSeekMoe<T> (V2, V2-Lite, V3: routed and
//                           shared experts, group-limited or biased
//                           selection; V3's multi-token-prediction layer is
//                           ignored)
//   qwen3                   Qwen3<T> (q_norm, k_norm per head before RoPE)
//   phi3                    Llama<T> (or MistralSliding<T> with a sliding
//                           window): fused qkv_proj and gate_up_proj split at
//                           load, partial rotary, longrope
//   gemma2, gemma3_text     Gemma2<T>, Gemma3<T> (sandwich norms, GeGLU,
//                           sliding and global layers, soft-capping / QK-norm)
//   mixtral, qwen2_moe      LlamaMoe<T> (experts in every layer, or as
//                           Qwen2-MoE's mlp_only_layers/decoder_sparse_step say)
//   bert                    Bert<T> (load_encoder)
//   kappa_transformer       PaperTransformer<T> (load_encoder_decoder; the
//                           original encoder-decoder with torch.nn.Transformer's
//                           weight names, see tests/data/models/README.md)
// rope_scaling: linear, dynamic, llama3, yarn (RopeScaling); others are
// rejected by name. Tensors the model does not use (GPT-2's attn.bias mask
// buffers, rotary inv_freq buffers) are ignored. Every weight's shape is
// checked against the config: a ShapeError names the file, the tensor, its
// shape and the expected one; a missing tensor is a FormatError naming it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/checked.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/stored_weights.hpp"
#include "kappa/embed/rope_scaling.hpp"
#include "kappa/io/safetensors.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/architectures.hpp"

namespace kappa::hf {

/// The most layers kappa reads (real models: up to about 130). Per-layer
/// tables (which layers are sparse, which slide) are sized by the config's
/// layer count before the weights can confirm it, so it is bounded here
/// (Config::layer_count, and the GGUF loader's block_count).
inline constexpr Index kMaxLayers = Index{1} << 16;

/// config.json parsed, with the file name for errors.
class Config {
 public:
  Config() = default;
  Config(nlohmann::json j, std::string file) : j_(std::move(j)), file_(std::move(file)) {}

  /// The largest config.json (or generation_config.json) read: 16 MiB
  /// (real ones are a few KB).
  static constexpr std::size_t kMaxBytes = std::size_t{16} << 20;

  /// Reads and parses `path`: a regular file (links followed) of at most
  /// kMaxBytes, nested at most kMaxJsonDepth levels. \throws FormatError
  /// naming the file (and the byte of a JSON syntax error), for a FIFO or
  /// device, or when the top level is not an object.
  static Config read(const std::filesystem::path& path) {
    nlohmann::json j = parse_json(read_regular_file(path.string(), kMaxBytes), path.string());
    if (!j.is_object())
      throw FormatError("kappa: " + path.string() + ": the top level is not an object");
    return Config(std::move(j), path.string());
  }

  [[nodiscard]] const nlohmann::json& json() const { return j_; }
  [[nodiscard]] const std::string& file() const { return file_; }
  [[nodiscard]] bool has(const char* key) const {
    return j_.contains(key) && !j_.at(key).is_null();
  }

  /// An integer key; `fallback` when absent or null, else a FormatError
  /// naming the file and key. Values must lie in [lo, hi] (a value beyond
  /// int64 is reported as written, never wrapped).
  [[nodiscard]] Index integer(const char* key, std::optional<Index> fallback = std::nullopt,
                              Index lo = 0, Index hi = kMaxElements) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(key, "is missing");
    }
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + shown(v));
    const auto range = [&] { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; };
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<Index>::max()))
      fail(key, "is " + v.dump() + ", outside " + range());
    const auto x = v.get<std::int64_t>();
    if (x < lo || x > hi) fail(key, "is " + std::to_string(x) + ", outside " + range());
    return x;
  }
  /// A layer count (num_hidden_layers, n_layer, ...): integer() in [0,
  /// kMaxLayers].
  [[nodiscard]] Index layer_count(const char* key,
                                  std::optional<Index> fallback = std::nullopt) const {
    return integer(key, fallback, 0, kMaxLayers);
  }
  /// A number key in [lo, hi]; `fallback` when absent or null. \throws
  /// FormatError naming the file and key for a non-number or a value outside.
  [[nodiscard]] double number(const char* key, std::optional<double> fallback = std::nullopt,
                              double lo = -std::numeric_limits<double>::max(),
                              double hi = std::numeric_limits<double>::max()) const {
    const double x = any_number(key, fallback);
    if (!(x >= lo && x <= hi))
      fail(key, "is " + number_string(x) + ", outside [" + number_string(lo) + ", " +
                    number_string(hi) + "]");
    return x;
  }
  /// A number key in (0, hi]: epsilons, bases, factors that divide or scale.
  [[nodiscard]] double positive(const char* key, std::optional<double> fallback, double hi) const {
    const double x = any_number(key, fallback);
    if (!(x > 0 && x <= hi))
      fail(key, "is " + number_string(x) + ", outside (0, " + number_string(hi) + "]");
    return x;
  }
  [[nodiscard]] bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean()) fail(key, "must be true or false, got " + shown(v));
    return v.get<bool>();
  }
  /// A string key. Shown in messages only through kappa::quoted.
  [[nodiscard]] std::string string(const char* key,
                                   std::optional<std::string> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(key, "is missing");
    }
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string()) fail(key, "must be a string, got " + shown(v));
    return v.get<std::string>();
  }
  /// a * b of two config values, checked: \throws FormatError naming the
  /// file and `what` (the keys, e.g. "n_head x d_head") when the product
  /// leaves [0, kMaxElements].
  [[nodiscard]] Index product(const char* what, Index a, Index b) const {
    try {
      return checked_mul(what, a, b);
    } catch (const RangeError& e) {
      throw FormatError("kappa: " + file_ + ": " + without_prefix(e.what()));
    }
  }
  /// a + b of two config values, checked as product().
  [[nodiscard]] Index sum(const char* what, Index a, Index b) const {
    try {
      return checked_add(what, a, b);
    } catch (const RangeError& e) {
      throw FormatError("kappa: " + file_ + ": " + without_prefix(e.what()));
    }
  }
  /// A JSON value as a message shows it: strings through kappa::quoted,
  /// numbers and literals as written, containers by their type.
  static std::string shown(const nlohmann::json& v) {
    if (v.is_string()) return kappa::quoted(v.get_ref<const std::string&>());
    if (v.is_primitive()) return printable(v.dump(), 64);
    return std::string("a JSON ") + v.type_name();
  }
  /// `msg` without a leading "kappa: " (for a message wrapped in another).
  static std::string without_prefix(std::string_view msg) {
    constexpr std::string_view kPrefix = "kappa: ";
    if (msg.substr(0, kPrefix.size()) == kPrefix) msg.remove_prefix(kPrefix.size());
    return std::string(msg);
  }
  /// Throws FormatError "kappa: <file>: key '<key>' <what>".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw FormatError("kappa: " + file_ + ": key '" + key + "' " + what);
  }

 private:
  double any_number(const char* key, std::optional<double> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(key, "is missing");
    }
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) fail(key, "must be a number, got " + shown(v));
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(key, "must be finite");
    return x;
  }
  static std::string number_string(double x) {
    std::ostringstream os;
    os << x;
    return os.str();
  }

  nlohmann::json j_ = nlohmann::json::object();
  std::string file_ = "config.json";
};

/// Bounds of the float parameters a config sets, so that none can make the
/// logits non-finite: RoPE bases up to 1e12 (real ones: 1e4 .. 5e7),
/// scaling factors and YaRN betas in (0, 1e6], YaRN's mscale and
/// attention_factor up to 100 (real ones about 1), epsilons in (0, 1].
inline constexpr double kMaxRopeBase = 1e12, kMaxRopeFactor = 1e6, kMaxMscale = 100.0,
                        kMaxEpsilon = 1.0;

/// config.json's rope_scaling (null or absent: none). `max_positions` is the
/// config's max_position_embeddings, the original context where the rule
/// does not name one.
inline RopeScaling parse_rope_scaling(const Config& c, Index max_positions) {
  RopeScaling r;
  if (!c.has("rope_scaling")) return r;
  const nlohmann::json& s = c.json().at("rope_scaling");
  if (!s.is_object()) c.fail("rope_scaling", "must be an object or null");
  const Config sc(s, c.file() + " (rope_scaling)");
  const std::string type =
      sc.has("rope_type") ? sc.string("rope_type") : sc.string("type", "default");
  if (type == "default") return r;
  if (type == "longrope" || type == "su") {  // "su": Phi-3's first name for it
    // Phi-3 states the original context at the config's top level.
    r.kind = RopeScaling::Kind::kLongRope;
    r.original_context = c.has("original_max_position_embeddings")
                             ? c.integer("original_max_position_embeddings", std::nullopt, 1)
                             : sc.integer("original_max_position_embeddings", max_positions, 1);
    r.factor = sc.has("factor")
                   ? sc.positive("factor", std::nullopt, kMaxRopeFactor)
                   : static_cast<double>(max_positions) / static_cast<double>(r.original_context);
    if (sc.has("attention_factor"))
      r.attention_factor = sc.positive("attention_factor", std::nullopt, kMaxMscale);
    const auto factors = [&](const char* key) {
      const nlohmann::json& v = sc.json().contains(key) ? sc.json().at(key) : nlohmann::json();
      if (!v.is_array()) sc.fail(key, "must be a list of numbers (one per rotary frequency)");
      std::vector<double> out;
      for (const nlohmann::json& x : v) {
        if (!x.is_number() || !(x.get<double>() > 0) || !(x.get<double>() <= kMaxRopeFactor))
          sc.fail(key, "holds " + Config::shown(x) + ", not a number in (0, 1e6]");
        out.push_back(x.get<double>());
      }
      return out;
    };
    r.short_factor = factors("short_factor");
    r.long_factor = factors("long_factor");
    try {
      r.validate();
    } catch (const std::invalid_argument& e) {
      c.fail("rope_scaling", Config::without_prefix(e.what()));
    }
    return r;
  }
  r.factor = sc.positive("factor", std::nullopt, kMaxRopeFactor);
  r.original_context = sc.integer("original_max_position_embeddings", max_positions, 1);
  if (type == "linear") {
    r.kind = RopeScaling::Kind::kLinear;
  } else if (type == "dynamic") {
    r.kind = RopeScaling::Kind::kDynamicNtk;
    r.original_context = max_positions;  // HF: the config's max_position_embeddings
  } else if (type == "llama3") {
    r.kind = RopeScaling::Kind::kLlama3;
    r.low_freq_factor = sc.positive("low_freq_factor", 1.0, kMaxRopeFactor);
    r.high_freq_factor = sc.positive("high_freq_factor", 4.0, kMaxRopeFactor);
  } else if (type == "yarn") {
    r.kind = RopeScaling::Kind::kYarn;
    r.beta_fast = sc.positive("beta_fast", 32.0, kMaxRopeFactor);
    r.beta_slow = sc.positive("beta_slow", 1.0, kMaxRopeFactor);
    r.mscale = sc.number("mscale", 0.0, 0.0, kMaxMscale);
    r.mscale_all_dim = sc.number("mscale_all_dim", 0.0, 0.0, kMaxMscale);
    if (sc.has("attention_factor"))
      r.attention_factor = sc.positive("attention_factor", std::nullopt, kMaxMscale);
  } else {
    c.fail("rope_scaling",
           "has type " + kappa::quoted(type) +
               ", which kappa does not support (linear, dynamic, llama3, yarn, longrope)");
  }
  try {
    r.validate();
  } catch (const std::invalid_argument& e) {
    c.fail("rope_scaling", Config::without_prefix(e.what()));
  }
  return r;
}

namespace detail {

/// Reads weights by name with the expected shape (HF nn.Linear: out x in).
/// \tparam Source  where the tensors come from: io::Checkpoint (safetensors),
///                 or any type with its `has`, `require_shape`,
///                 `matrix<T>(name, shape)` and `row_vector<T>(name)` under the
///                 Hugging Face names (the GGUF loader's name map,
///                 kappa/transformer/gguf_load.hpp)
template <Scalar T, class Source = io::Checkpoint>
class Weights {
 public:
  Weights(const Source& ckpt, std::string prefix) : ckpt_(ckpt), prefix_(std::move(prefix)) {}
  [[nodiscard]] RowMatrix<T> mat(const std::string& name, Index rows, Index cols) const {
    return ckpt_.template matrix<T>(prefix_ + name, {rows, cols});
  }
  [[nodiscard]] RowVector<T> vec(const std::string& name, Index n) const {
    ckpt_.require_shape(prefix_ + name, {n});
    return ckpt_.template row_vector<T>(prefix_ + name);
  }
  [[nodiscard]] bool has(const std::string& name) const { return ckpt_.has(prefix_ + name); }
  [[nodiscard]] const Source& checkpoint() const { return ckpt_; }

  /// Whether the source hands out weight matrices in storage S as it stores
  /// them (a GGUF file's blocks: stored_weight<T, S>(name, out, in,
  /// transposed) returning std::optional<WeightMatrix<T, S>>).
  template <WeightStoragePolicy S>
  static constexpr bool kStores =
      !std::same_as<S, DenseWeights> && requires(const Source& src, const std::string& n) {
    src.template stored_weight<T, S>(n, Index{}, Index{}, true);
  };

  /// nn.Linear weight `name` (out x in) as W = weight^T (in x out) in
  /// storage S: the source's stored matrix where it has one (kStores),
  /// else read in T and stored with blocks along W's rows.
  template <WeightStoragePolicy S>
  [[nodiscard]] WeightMatrix<T, S> linear(const std::string& name, Index out, Index in) const {
    if constexpr (kStores<S>) {
      if (auto m = ckpt_.template stored_weight<T, S>(prefix_ + name, out, in, true))
        return std::move(*m);
    }
    RowMatrix<T> w = mat(name, out, in).transpose();
    if constexpr (std::is_constructible_v<WeightMatrix<T, S>, RowMatrix<T>, BlocksAlong>)
      return WeightMatrix<T, S>(std::move(w), BlocksAlong::kRows);
    else
      return WeightMatrix<T, S>(std::move(w));
  }
  /// Checks a tensor's shape against the config without reading it (a
  /// header lookup): loaders call it for the model-wide tensors first, so a
  /// config that disagrees with the file fails before anything is allocated.
  void check(const std::string& name, Index rows, Index cols) const {
    ckpt_.require_shape(prefix_ + name, {rows, cols});
  }
  void check(const std::string& name, Index n) const { ckpt_.require_shape(prefix_ + name, {n}); }

 private:
  const Source& ckpt_;
  std::string prefix_;
};

inline void require_activation(const Config& c, const char* key, const std::string& fallback,
                               std::initializer_list<const char*> accepted) {
  const std::string act = c.string(key, fallback);
  for (const char* a : accepted)
    if (act == a) return;
  std::string list;
  for (const char* a : accepted) list += (list.empty() ? "" : ", ") + std::string(a);
  c.fail(key, "is " + kappa::quoted(act) + "; kappa supports " + list + " for this model type");
}

inline void require_false(const Config& c, const char* key, const std::string& why) {
  if (c.boolean(key, false)) c.fail(key, "is true; " + why);
}

}  // namespace detail

// ---- GPT-2 -------------------------------------------------------------------

/// GPT-2 from its config.json and checkpoint (tensor names with or without
/// the "transformer." prefix; lm_head.weight is tied to wte); the tensors
/// from `ckpt` (see detail::Weights' Source).
template <Scalar T, WeightStoragePolicy S = DenseWeights, class Source = io::Checkpoint>
Gpt2<T, S> load_gpt2(const Config& c, const Source& ckpt) {
  const Index d = c.integer("n_embd", std::nullopt, 1), n_layer = c.layer_count("n_layer"),
              n_head = c.integer("n_head", std::nullopt, 1),
              n_pos = c.integer("n_positions", std::nullopt, 1),
              vocab = c.integer("vocab_size", std::nullopt, 1);
  const Index d_ff = c.integer("n_inner", c.product("4 x n_embd", 4, d), 1);
  const Index d3 = c.product("3 x n_embd", 3, d);
  const double eps = c.positive("layer_norm_epsilon", 1e-5, kMaxEpsilon);
  if (d % n_head != 0) c.fail("n_head", "must divide n_embd = " + std::to_string(d));
  detail::require_activation(c, "activation_function", "gelu_new",
                             {"gelu_new", "gelu_pytorch_tanh"});
  if (!c.boolean("scale_attn_weights", true))
    c.fail("scale_attn_weights", "is false; kappa scales by 1/sqrt(d_head)");
  detail::require_false(c, "scale_attn_by_inverse_layer_idx", "kappa does not support it");
  const std::string prefix = ckpt.has("transformer.wte.weight") ? "transformer." : "";
  const detail::Weights<T, Source> w(ckpt, prefix);
  // The config's sizes against the file before anything is allocated; each
  // layer below reads (and so checks) its tensors before building on them.
  const bool tied = c.boolean("tie_word_embeddings", true);
  w.check("wte.weight", vocab, d);
  w.check("wpe.weight", n_pos, d);
  if (!tied) ckpt.require_shape("lm_head.weight", {vocab, d});
  std::vector<Gpt2Layer<T, S>> layers;
  for (Index i = 0; i < n_layer; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    const RowMatrix<T> c_attn = w.mat(p + "attn.c_attn.weight", d, d3);  // Conv1D: X W
    const RowVector<T> c_attn_b = w.vec(p + "attn.c_attn.bias", d3);
    const RowMatrix<T> w_fc = w.mat(p + "mlp.c_fc.weight", d, d_ff);
    typename Gpt2Layer<T, S>::AttentionType attn({.d_in = d, .n_heads = n_head});
    attn.set_weights(c_attn.leftCols(d), c_attn.middleCols(d, d), c_attn.rightCols(d),
                     w.mat(p + "attn.c_proj.weight", d, d));
    attn.set_biases(c_attn_b.leftCols(d), c_attn_b.middleCols(d, d), c_attn_b.rightCols(d),
                    w.vec(p + "attn.c_proj.bias", d));
    Mlp<T, GeluTanh, S> mlp(d, d_ff);
    mlp.set_weights(w_fc, w.vec(p + "mlp.c_fc.bias", d_ff), w.mat(p + "mlp.c_proj.weight", d_ff, d),
                    w.vec(p + "mlp.c_proj.bias", d));
    layers.emplace_back(
        std::move(attn), LayerNorm<T>(w.vec(p + "ln_1.weight", d), w.vec(p + "ln_1.bias", d), eps),
        LayerNorm<T>(w.vec(p + "ln_2.weight", d), w.vec(p + "ln_2.bias", d), eps), std::move(mlp));
  }
  std::optional<RowMatrix<T>> head;
  if (!tied) head = ckpt.template matrix<T>("lm_head.weight", {vocab, d});
  return Gpt2<T, S>(Embedding<T>(w.mat("wte.weight", vocab, d)),
                    LearnedPositions<T>(w.mat("wpe.weight", n_pos, d)), std::move(layers),
                    LayerNorm<T>(w.vec("ln_f.weight", d), w.vec("ln_f.bias", d), eps),
                    std::move(head), n_pos);
}

// ---- LLaMA, Mistral, Qwen2 -----------------------------------------------------

/// Sizes of a LLaMA-layout config (llama, mistral, qwen2).
struct LlamaSizes {
  Index d = 0, n_layer = 0, n_head = 0, n_kv = 0, d_head = 0, d_ff = 0, vocab = 0, max_pos = 0;
  double eps = 1e-6, theta = 10000.0;
  RopeScaling scaling{};
  bool qkv_bias = false, o_bias = false, tied = false;
  Index sliding_window = 0;         ///< 0: none
  Index q_width = 0, kv_width = 0;  ///< n_head d_head and n_kv d_head (checked products)
  Index d_rot = 0;                  ///< rotated columns of a head (partial_rotary_factor)
  /// How the hub stores the projections.
  enum class Tensors {
    kSeparate,  ///< q_proj, k_proj, v_proj; mlp.gate_proj, mlp.up_proj (LLaMA, Qwen, Mistral)
    kFused,     ///< qkv_proj (rows q, k, v); mlp.gate_up_proj (rows gate, up) (Phi-3)
  };
  Tensors tensors = Tensors::kSeparate;
};

inline LlamaSizes llama_sizes(const Config& c, const std::string& model_type) {
  LlamaSizes s;
  s.d = c.integer("hidden_size", std::nullopt, 1);
  s.n_layer = c.layer_count("num_hidden_layers");
  s.n_head = c.integer("num_attention_heads", std::nullopt, 1);
  s.n_kv = c.integer("num_key_value_heads", s.n_head, 1);
  if (s.d % s.n_head != 0 && !c.has("head_dim"))
    c.fail("num_attention_heads", "must divide hidden_size = " + std::to_string(s.d));
  s.d_head = c.integer("head_dim", s.d / s.n_head, 2);
  if (s.d_head % 2 != 0)
    c.fail("head_dim", "must be even for RoPE, got " + std::to_string(s.d_head));
  if (s.n_head % s.n_kv != 0)
    c.fail("num_key_value_heads",
           "= " + std::to_string(s.n_kv) +
               " must divide num_attention_heads = " + std::to_string(s.n_head));
  s.q_width = c.product("num_attention_heads x head_dim", s.n_head, s.d_head);
  s.kv_width = c.product("num_key_value_heads x head_dim", s.n_kv, s.d_head);
  s.d_ff = c.integer("intermediate_size", std::nullopt, 1);
  s.vocab = c.integer("vocab_size", std::nullopt, 1);
  s.max_pos = c.integer("max_position_embeddings", 2048, 1);
  s.eps = c.positive("rms_norm_eps", 1e-6, kMaxEpsilon);
  s.theta = c.positive("rope_theta", 10000.0, kMaxRopeBase);
  s.scaling = parse_rope_scaling(c, s.max_pos);
  detail::require_activation(c, "hidden_act", "silu", {"silu", "swish"});
  s.d_rot = s.d_head;
  if (c.has("partial_rotary_factor")) {
    if (model_type != "phi3" && c.positive("partial_rotary_factor", std::nullopt, 1.0) != 1.0)
      c.fail("partial_rotary_factor", "is not 1; kappa's LLaMA layout rotates whole heads");
    // Phi3: int(d_head * factor), an even number of columns from the start of each head.
    s.d_rot = static_cast<Index>(static_cast<double>(s.d_head) *
                                 c.positive("partial_rotary_factor", std::nullopt, 1.0));
    if (s.d_rot < 2 || s.d_rot % 2 != 0)
      c.fail("partial_rotary_factor",
             "gives " + std::to_string(s.d_rot) +
                 " rotated columns per head; kappa needs an even number >= 2");
  }
  if (s.scaling.kind == RopeScaling::Kind::kLongRope &&
      static_cast<Index>(s.scaling.short_factor.size()) != s.d_rot / 2)
    c.fail("rope_scaling", "has " + std::to_string(s.scaling.short_factor.size()) +
                               " rescale factors; the rotary dimension " + std::to_string(s.d_rot) +
                               " needs " + std::to_string(s.d_rot / 2));
  if (model_type == "phi3") s.tensors = LlamaSizes::Tensors::kFused;
  detail::require_false(c, "mlp_bias", "kappa's SwiGLU has no biases");
  s.tied = c.boolean("tie_word_embeddings", false);
  if (model_type == "qwen2" || model_type == "qwen2_moe") {
    s.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without
    if (c.boolean("use_sliding_window", false))
      c.fail("use_sliding_window", "is true; kappa does not support Qwen2's per-layer windows");
  } else {
    s.qkv_bias = s.o_bias = c.boolean("attention_bias", false);
  }
  if (model_type == "qwen3" && c.boolean("use_sliding_window", false))
    c.fail("use_sliding_window", "is true; kappa does not support Qwen3's per-layer windows");
  if ((model_type == "mistral" || model_type == "phi3") && c.has("sliding_window"))
    s.sliding_window = c.integer("sliding_window", std::nullopt, 1);
  return s;
}

// ---- Mixture of experts (Mixtral, Qwen2-MoE, DeepSeek-V2/V3) ------------------------

/// The mixture-of-experts part of a config: the router, the widths, and
/// which layers are sparse.
struct MoeSizes {
  /// The hub's tensor layout of the experts.
  enum class Layout {
    kMixtral,   ///< block_sparse_moe.gate, block_sparse_moe.experts.j.{w1,w3,w2}
    kQwen2Moe,  ///< mlp.gate, mlp.experts.j.*_proj, mlp.shared_expert.*, mlp.shared_expert_gate
    kDeepSeek,  ///< mlp.gate (+ e_score_correction_bias), mlp.experts.j.*_proj,
                ///< mlp.shared_experts.*
  };
  Layout layout = Layout::kMixtral;
  RouterConfig router;
  Index d_expert = 0;        ///< an expert's width
  Index d_shared = 0;        ///< the shared expert's width; 0: none
  std::vector<char> sparse;  ///< per layer: 1 if its feed-forward is the mixture
  [[nodiscard]] bool any_sparse() const {
    return std::find(sparse.begin(), sparse.end(), char{1}) != sparse.end();
  }
};

/// The most experts kappa reads per layer (real models: 8 .. 256).
inline constexpr Index kMaxExperts = Index{1} << 16;

/// The mixture-of-experts sizes of a mixtral, qwen2_moe, deepseek_v2 or
/// deepseek_v3 config (every key as the hub's configuration classes name
/// and default it). For deepseek_v2 without n_routed_experts every layer is
/// dense. \throws FormatError naming the key of an unsupported or
/// out-of-range value.
inline MoeSizes moe_sizes(const Config& c, const std::string& model_type, Index n_layer) {
  MoeSizes m;
  m.sparse.assign(static_cast<std::size_t>(n_layer), 0);
  const char* experts_key = "num_local_experts";
  if (model_type == "mixtral") {
    m.layout = MoeSizes::Layout::kMixtral;
    m.router.n_experts = c.integer("num_local_experts", 8, 1, kMaxExperts);
    m.router.top_k = c.integer("num_experts_per_tok", 2, 1, kMaxExperts);
    m.router.weights = TopKWeights::kRenormalized;  // Mixtral always renormalises
    m.d_expert = c.integer("intermediate_size", std::nullopt, 1);
    std::fill(m.sparse.begin(), m.sparse.end(), char{1});
  } else if (model_type == "qwen2_moe") {
    experts_key = "num_experts";
    m.layout = MoeSizes::Layout::kQwen2Moe;
    m.router.n_experts = c.integer("num_experts", 60, 0, kMaxExperts);
    m.router.top_k = c.integer("num_experts_per_tok", 4, 1, kMaxExperts);
    m.router.weights =
        c.boolean("norm_topk_prob", false) ? TopKWeights::kRenormalized : TopKWeights::kAsScored;
    m.d_expert = c.integer("moe_intermediate_size", 1408, 1);
    m.d_shared = c.integer("shared_expert_intermediate_size", 5632, 0);
    const Index step = c.integer("decoder_sparse_step", 1, 1);
    std::vector<char> dense_only(static_cast<std::size_t>(n_layer), 0);
    if (c.has("mlp_only_layers")) {
      const nlohmann::json& v = c.json().at("mlp_only_layers");
      if (!v.is_array()) c.fail("mlp_only_layers", "must be a list of layer indices");
      for (const nlohmann::json& x : v) {
        if (!x.is_number_integer() || x.get<std::int64_t>() < 0 || x.get<std::int64_t>() >= n_layer)
          c.fail("mlp_only_layers", "holds " + Config::shown(x) + ", not a layer index in [0, " +
                                        std::to_string(n_layer) + ")");
        dense_only[static_cast<std::size_t>(x.get<std::int64_t>())] = 1;
      }
    }
    for (Index i = 0; i < n_layer; ++i)
      m.sparse[static_cast<std::size_t>(i)] =
          static_cast<char>(!dense_only[static_cast<std::size_t>(i)] && m.router.n_experts > 0 &&
                            (i + 1) % step == 0);
    if (m.router.n_experts == 0) m.router = {.n_experts = 1, .top_k = 1};  // unused: all dense
  } else {  // deepseek_v2, deepseek_v3
    experts_key = "n_routed_experts";
    m.layout = MoeSizes::Layout::kDeepSeek;
    const bool v3 = model_type == "deepseek_v3";
    if (!c.has("n_routed_experts")) return m;  // dense
    m.router.n_experts = c.integer("n_routed_experts", std::nullopt, 1, kMaxExperts);
    m.router.top_k = c.integer("num_experts_per_tok", std::nullopt, 1, kMaxExperts);
    m.d_expert = c.integer("moe_intermediate_size", std::nullopt, 1);
    m.d_shared = c.product("moe_intermediate_size x n_shared_experts", m.d_expert,
                           c.integer("n_shared_experts", 0, 0, kMaxExperts));
    const std::string score = c.string("scoring_func", v3 ? "sigmoid" : "softmax");
    if (score == "softmax") {
      m.router.score = RouterScore::kSoftmax;
    } else if (score == "sigmoid") {
      m.router.score = RouterScore::kSigmoid;
    } else {
      c.fail("scoring_func", "is " + kappa::quoted(score) + "; kappa supports softmax, sigmoid");
    }
    const std::string method = c.string("topk_method", v3 ? "noaux_tc" : "greedy");
    if (method == "greedy") {
      m.router.selection = ExpertSelection::kTopK;
    } else if (method == "group_limited_greedy") {
      m.router.selection = ExpertSelection::kGroupLimitedTopK;
    } else if (method == "noaux_tc") {
      m.router.selection = ExpertSelection::kBiasedGroupTopK;
    } else {
      c.fail("topk_method", "is " + kappa::quoted(method) +
                                "; kappa supports greedy, group_limited_greedy, noaux_tc");
    }
    m.router.n_group = c.integer("n_group", 1, 1, kMaxExperts);
    m.router.topk_group = c.integer("topk_group", 1, 1, kMaxExperts);
    // DeepSeek's MoEGate: renormalise (sum + 1e-20) when top_k > 1 and
    // norm_topk_prob; V2 scales by routed_scaling_factor only when it does
    // not renormalise, V3 always.
    const double factor = c.positive("routed_scaling_factor", 1.0, kMaxRopeFactor);
    const bool renorm = m.router.top_k > 1 && c.boolean("norm_topk_prob", false);
    m.router.weights = renorm ? TopKWeights::kRenormalized : TopKWeights::kAsScored;
    m.router.renorm_epsilon = 1e-20;
    m.router.scale = (v3 || !renorm) ? factor : 1.0;
    const Index first_dense = c.integer("first_k_dense_replace", 0, 0);
    const Index freq = c.integer("moe_layer_freq", 1, 1);
    for (Index i = 0; i < n_layer; ++i)
      m.sparse[static_cast<std::size_t>(i)] = static_cast<char>(i >= first_dense && i % freq == 0);
  }
  try {
    m.router.validate();
  } catch (const std::invalid_argument& e) {
    c.fail(experts_key, Config::without_prefix(e.what()));
  }
  return m;
}

namespace detail {

/// A SwiGLU read from Hugging Face's gate/up/down projections (nn.Linear
/// layout, out x in), read (and so checked) before it is built.
template <Scalar T, WeightStoragePolicy S, class Source>
SwiGlu<T, S> read_swiglu(const Weights<T, Source>& w, const std::string& gate,
                         const std::string& up, const std::string& down, Index d, Index d_ff) {
  if constexpr (Weights<T, Source>::template kStores<S>) {  // as the file stores them
    auto g = w.template linear<S>(gate, d_ff, d);
    auto u = w.template linear<S>(up, d_ff, d);
    auto dn = w.template linear<S>(down, d, d_ff);
    return SwiGlu<T, S>(std::move(g), std::move(u), std::move(dn));
  }
  const RowMatrix<T> w_gate = w.mat(gate, d_ff, d), w_up = w.mat(up, d_ff, d),
                     w_down = w.mat(down, d, d_ff);
  return SwiGlu<T, S>(w_gate.transpose(), w_up.transpose(), w_down.transpose());
}

/// The dense feed-forward of LLaMA-layout layer prefix p ("layers.i.").
template <Scalar T, WeightStoragePolicy S, class Source>
SwiGlu<T, S> read_llama_mlp(const Weights<T, Source>& w, const std::string& p, Index d,
                            Index d_ff) {
  return read_swiglu<T, S>(w, p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                           p + "mlp.down_proj.weight", d, d_ff);
}

/// The mixture of experts of layer prefix p ("layers.i."), in the hub's
/// layout `m.layout`; every tensor read (and so checked) before it is built.
/// With `held` = [e0, e1): only those experts are read (expert parallelism;
/// see MixtureOfExperts).
template <Scalar T, WeightStoragePolicy S, class Source>
MixtureOfExperts<T, S> read_moe(const Weights<T, Source>& w, const std::string& p, Index d,
                                const MoeSizes& m,
                                std::optional<std::pair<Index, Index>> held = std::nullopt) {
  using Layout = MoeSizes::Layout;
  const Index n_e = m.router.n_experts, f = m.d_expert;
  const std::string base = m.layout == Layout::kMixtral ? p + "block_sparse_moe." : p + "mlp.";
  const RowMatrix<T> w_router = w.mat(base + "gate.weight", n_e, d);  // (E, d)
  const auto [e0, e1] = held.value_or(std::pair<Index, Index>{0, n_e});
  std::vector<typename MixtureOfExperts<T, S>::Expert> experts;
  for (Index e = e0; e < e1; ++e) {
    const std::string x = base + "experts." + std::to_string(e) + ".";
    experts.push_back(
        m.layout == Layout::kMixtral
            ? read_swiglu<T, S>(w, x + "w1.weight", x + "w3.weight", x + "w2.weight", d, f)
            : read_swiglu<T, S>(w, x + "gate_proj.weight", x + "up_proj.weight",
                                x + "down_proj.weight", d, f));
  }
  MixtureOfExperts<T, S> moe(std::move(experts), m.router, w_router.transpose(),
                             held ? std::optional<Index>(e0) : std::nullopt);
  if (m.router.selection == ExpertSelection::kBiasedGroupTopK)
    moe.set_selection_bias(w.vec(base + "gate.e_score_correction_bias", n_e));
  if (m.d_shared > 0) {
    const std::string x =
        base + (m.layout == Layout::kQwen2Moe ? "shared_expert." : "shared_experts.");
    auto shared = read_swiglu<T, S>(w, x + "gate_proj.weight", x + "up_proj.weight",
                                    x + "down_proj.weight", d, m.d_shared);
    RowVector<T> gate;
    if (m.layout == Layout::kQwen2Moe) gate = w.mat(base + "shared_expert_gate.weight", 1, d);
    moe.set_shared(std::move(shared), std::move(gate));
  }
  return moe;
}

/// Layer i's feed-forward: the mixture where m says so, else the dense
/// SwiGLU of width d_ff.
template <Scalar T, WeightStoragePolicy S, class Source>
SwiGluOrExperts<T, S> read_ffn(const Weights<T, Source>& w, Index i, const std::string& p, Index d,
                               Index d_ff, const MoeSizes& m) {
  if (m.sparse[static_cast<std::size_t>(i)]) return read_moe<T, S>(w, p, d, m);
  return read_llama_mlp<T, S>(w, p, d, d_ff);
}

/// The dense feed-forward of Phi-3's layer prefix p: gate_up_proj holds
/// W_gate^T over W_up^T (2 d_ff, d).
template <Scalar T, WeightStoragePolicy S, class Source>
SwiGlu<T, S> read_fused_mlp(const Weights<T, Source>& w, const std::string& p, Index d, Index d_ff,
                            const Config& c) {
  const RowMatrix<T> gate_up =
      w.mat(p + "mlp.gate_up_proj.weight", c.product("2 x intermediate_size", 2, d_ff), d);
  const RowMatrix<T> w_down = w.mat(p + "mlp.down_proj.weight", d, d_ff);
  return SwiGlu<T, S>(gate_up.topRows(d_ff).transpose(), gate_up.bottomRows(d_ff).transpose(),
                      w_down.transpose());
}

/// The position policy of a LLaMA-layout layer: RoPE over the first d_rot
/// columns of each head (partial when d_rot < d_head).
template <Scalar T>
auto llama_rope(const LlamaSizes& s) {
  return [&s](const auto& /*weights*/, Index, const std::string&) {
    return Rope<T, RotateHalf>(s.d_rot, s.theta, s.scaling);
  };
}

/// The LLaMA layout: GQA with the position policy `make_position(w, i, p)`
/// (RoPE, or QK-norm then RoPE), the feed-forward `make_ffn(w, i, p)`; the
/// tensors under the Hugging Face names from `ckpt` (see Weights' Source).
template <Scalar T, WeightStoragePolicy S, class Layer, class Source, class Mask,
          class MakePosition, class MakeFfn>
DecoderLM<T, Layer, NoAbsolutePositions, S> build_llama(const LlamaSizes& s, const Source& ckpt,
                                                        Mask mask, MakePosition make_position,
                                                        MakeFfn make_ffn) {
  const detail::Weights<T, Source> w(ckpt, "model.");
  // The config's sizes against the file before anything is allocated; each
  // layer below reads (and so checks) its tensors before building on them.
  w.check("embed_tokens.weight", s.vocab, s.d);
  if (!s.tied) ckpt.require_shape("lm_head.weight", {s.vocab, s.d});
  std::vector<Layer> layers;
  const Index dq = s.q_width, dkv = s.kv_width;
  for (Index i = 0; i < s.n_layer; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    // The attention's sizes against the file before its position policy (a
    // RoPE table of d_rot / 2 frequencies, d_rot <= head_dim) or its weights
    // are built on them: a config's head_dim alone must not size anything.
    if (s.tensors == LlamaSizes::Tensors::kFused) {
      w.check(p + "self_attn.qkv_proj.weight", dq + 2 * dkv, s.d);
    } else {
      w.check(p + "self_attn.q_proj.weight", dq, s.d);
      w.check(p + "self_attn.k_proj.weight", dkv, s.d);
    }
    typename Layer::AttentionType attn(
        {.d_in = s.d, .n_heads = s.n_head, .d_head = s.d_head, .n_kv_heads = s.n_kv}, {},
        make_position(w, i, p));
    if constexpr (Weights<T, Source>::template kStores<S>) {  // as the file stores them
      auto sq = w.template linear<S>(p + "self_attn.q_proj.weight", dq, s.d);
      auto sk = w.template linear<S>(p + "self_attn.k_proj.weight", dkv, s.d);
      auto sv = w.template linear<S>(p + "self_attn.v_proj.weight", dkv, s.d);
      auto so = w.template linear<S>(p + "self_attn.o_proj.weight", s.d, dq);
      attn.set_weights(std::move(sq), std::move(sk), std::move(sv), std::move(so));
    } else {
      RowMatrix<T> w_q, w_k, w_v;
      if (s.tensors == LlamaSizes::Tensors::kFused) {  // rows: q, then k, then v
        const RowMatrix<T> qkv = w.mat(p + "self_attn.qkv_proj.weight", dq + 2 * dkv, s.d);
        w_q = qkv.topRows(dq);
        w_k = qkv.middleRows(dq, dkv);
        w_v = qkv.bottomRows(dkv);
      } else {
        w_q = w.mat(p + "self_attn.q_proj.weight", dq, s.d);
        w_k = w.mat(p + "self_attn.k_proj.weight", dkv, s.d);
        w_v = w.mat(p + "self_attn.v_proj.weight", dkv, s.d);
      }
      attn.set_weights_from_hf(w_q, w_k, w_v, w.mat(p + "self_attn.o_proj.weight", s.d, dq));
    }
    if (s.qkv_bias || s.o_bias) {
      attn.set_biases(s.qkv_bias ? w.vec(p + "self_attn.q_proj.bias", dq) : RowVector<T>(),
                      s.qkv_bias ? w.vec(p + "self_attn.k_proj.bias", dkv) : RowVector<T>(),
                      s.qkv_bias ? w.vec(p + "self_attn.v_proj.bias", dkv) : RowVector<T>(),
                      s.o_bias ? w.vec(p + "self_attn.o_proj.bias", s.d) : RowVector<T>());
    }
    auto mlp = make_ffn(w, i, p);
    layers.emplace_back(
        std::move(attn), RMSNorm<T>(w.vec(p + "input_layernorm.weight", s.d), s.eps),
        RMSNorm<T>(w.vec(p + "post_attention_layernorm.weight", s.d), s.eps), std::move(mlp), mask);
  }
  if constexpr (Weights<T, Source>::template kStores<S>) {  // the head as the file stores it
    auto head = ckpt.template stored_weight<T, S>(
        s.tied ? "model.embed_tokens.weight" : "lm_head.weight", s.vocab, s.d, false);
    if (head) {
      if constexpr (requires { S::kPerMatrix; }) {  // E too, read by rows from its blocks
        std::optional<WeightMatrix<T, S>> emb =
            s.tied ? head
                   : ckpt.template stored_weight<T, S>("model.embed_tokens.weight", s.vocab, s.d,
                                                       false);
        if (emb && emb->rows_readable())
          return DecoderLM<T, Layer, NoAbsolutePositions, S>(
              std::move(*emb), {}, std::move(layers), RMSNorm<T>(w.vec("norm.weight", s.d), s.eps),
              std::move(*head), s.tied, s.max_pos);
      }
      return DecoderLM<T, Layer, NoAbsolutePositions, S>(
          Embedding<T>(w.mat("embed_tokens.weight", s.vocab, s.d)), {}, std::move(layers),
          RMSNorm<T>(w.vec("norm.weight", s.d), s.eps), std::move(*head), s.tied, s.max_pos);
    }
  }
  std::optional<RowMatrix<T>> head;
  if (!s.tied) head = ckpt.template matrix<T>("lm_head.weight", {s.vocab, s.d});
  return DecoderLM<T, Layer, NoAbsolutePositions, S>(
      Embedding<T>(w.mat("embed_tokens.weight", s.vocab, s.d)), {}, std::move(layers),
      RMSNorm<T>(w.vec("norm.weight", s.d), s.eps), std::move(head), s.max_pos);
}
}  // namespace detail

/// LLaMA / Qwen2 / Mistral (without a sliding window) from config and checkpoint.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
Llama<T, S> load_llama(const Config& c, const io::Checkpoint& ckpt) {
  const LlamaSizes s = llama_sizes(c, c.string("model_type", "llama"));
  return detail::build_llama<T, S, LlamaLayer<T, S>>(
      s, ckpt, CausalMask{}, detail::llama_rope<T>(s),
      [&](const detail::Weights<T>& w, Index, const std::string& p) {
        if (s.tensors == LlamaSizes::Tensors::kFused)
          return detail::read_fused_mlp<T, S>(w, p, s.d, s.d_ff, c);
        return detail::read_llama_mlp<T, S>(w, p, s.d, s.d_ff);
      });
}

/// Qwen3: the LLaMA layout with q_norm and k_norm (RMSNorm over each head's
/// d_head columns, one gain for all heads) before RoPE.
namespace detail {
/// The position policy of a Qwen3 layer: q_norm / k_norm, then RoPE.
template <Scalar T>
auto qwen3_position(const LlamaSizes& s) {
  return [&s](const auto& w, Index, const std::string& p) {
    return QkNorm<T, Rope<T, RotateHalf>>(w.vec(p + "self_attn.q_norm.weight", s.d_head),
                                          w.vec(p + "self_attn.k_norm.weight", s.d_head), s.eps,
                                          Rope<T, RotateHalf>(s.d_rot, s.theta, s.scaling));
  };
}

/// Qwen3 of sizes s: the LLaMA layout with q_norm / k_norm.
template <Scalar T, WeightStoragePolicy S, class Source>
Qwen3<T, S> build_qwen3(const LlamaSizes& s, const Source& ckpt) {
  return build_llama<T, S, Qwen3Layer<T, S>>(s, ckpt, CausalMask{}, qwen3_position<T>(s),
                                             [&s](const auto& w, Index, const std::string& p) {
                                               return read_llama_mlp<T, S>(w, p, s.d, s.d_ff);
                                             });
}
}  // namespace detail

/// Qwen3: the LLaMA layout with q_norm and k_norm (RMSNorm over each head's
/// d_head columns, one gain for all heads) before RoPE.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
Qwen3<T, S> load_qwen3(const Config& c, const io::Checkpoint& ckpt) {
  return detail::build_qwen3<T, S>(llama_sizes(c, "qwen3"), ckpt);
}

// ---- Gemma 2 and 3 ----------------------------------------------------------------

namespace detail {
/// x rounded to the precision `dtype` stores (Gemma's embedding normalizer is
/// sqrt(d) as a tensor of the model's dtype).
inline double rounded_to(double x, io::Dtype dtype) {
  switch (dtype) {
    case io::Dtype::kBF16:
      return static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(x))));
    case io::Dtype::kF16:
      return static_cast<double>(static_cast<float>(Eigen::half(static_cast<float>(x))));
    case io::Dtype::kF64:
      return x;
    default:
      return static_cast<double>(static_cast<float>(x));
  }
}

/// (1 + w): Gemma's RMSNorm gain stored as its offset from one.
template <Scalar T, class Source>
RowVector<T> gemma_gain(const Weights<T, Source>& w, const std::string& name, Index n) {
  return (w.vec(name, n).array() + T(1)).matrix();
}

/// Which layers of a gemma2 / gemma3_text config slide: layer_types when
/// given ("sliding_attention" / "full_attention"), else Gemma 2's even layers
/// or Gemma 3's all but every sliding_window_pattern-th.
inline std::vector<char> gemma_sliding_layers(const Config& c, const std::string& type,
                                              Index n_layer) {
  std::vector<char> sliding(static_cast<std::size_t>(n_layer), 0);
  if (c.has("layer_types")) {
    const nlohmann::json& v = c.json().at("layer_types");
    if (!v.is_array() || static_cast<Index>(v.size()) != n_layer)
      c.fail("layer_types", "must list one type per layer (" + std::to_string(n_layer) + ")");
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string t = v[i].is_string() ? v[i].get<std::string>() : std::string();
      if (t != "sliding_attention" && t != "full_attention")
        c.fail("layer_types", "holds " + Config::shown(v[i]) +
                                  "; kappa knows sliding_attention and full_attention");
      sliding[i] = static_cast<char>(t == "sliding_attention");
    }
    return sliding;
  }
  const Index pattern = type == "gemma2" ? 2 : c.integer("sliding_window_pattern", 6, 1);
  for (Index i = 0; i < n_layer; ++i)
    sliding[static_cast<std::size_t>(i)] =
        static_cast<char>(type == "gemma2" ? i % 2 == 0 : (i + 1) % pattern != 0);
  return sliding;
}

/// The attention layer a model's Layer is built from: Layer::AttentionType,
/// or for a wrapper of one (kappa::dist's ShardedAttention) the wrapped
/// type, which converts to it.
template <class A, class = void>
struct BuiltAttention {
  using type = A;
};
template <class A>
struct BuiltAttention<A, std::void_t<typename A::Local>> {
  using type = typename A::Local;
};

/// Gemma 2 / 3 from config and checkpoint (any Source of Weights); Layer's
/// attention is Gemma2Attention or Qwen3Attention (or a wrapper of one).
template <Scalar T, WeightStoragePolicy S, class Layer, class Model, class Source = io::Checkpoint>
Model build_gemma(const Config& c, const Source& ckpt) {
  const std::string type = c.string("model_type");
  const bool gemma3 = type == "gemma3_text";
  const Index d = c.integer("hidden_size", std::nullopt, 1),
              n_layer = c.layer_count("num_hidden_layers"),
              n_head = c.integer("num_attention_heads", std::nullopt, 1, kMaxHeads),
              n_kv = c.integer("num_key_value_heads", n_head, 1, kMaxHeads),
              d_head = c.integer("head_dim", 256, 2),
              d_ff = c.integer("intermediate_size", std::nullopt, 1),
              vocab = c.integer("vocab_size", std::nullopt, 1),
              max_pos = c.integer("max_position_embeddings", 8192, 1),
              window = c.integer("sliding_window", 4096, 1);
  if (d_head % 2 != 0) c.fail("head_dim", "must be even for RoPE, got " + std::to_string(d_head));
  if (n_head % n_kv != 0)
    c.fail("num_key_value_heads",
           "= " + std::to_string(n_kv) +
               " must divide num_attention_heads = " + std::to_string(n_head));
  const Index dq = c.product("num_attention_heads x head_dim", n_head, d_head),
              dkv = c.product("num_key_value_heads x head_dim", n_kv, d_head);
  const double eps = c.positive("rms_norm_eps", 1e-6, kMaxEpsilon);
  const double theta = c.positive("rope_theta", 10000.0, kMaxRopeBase);
  const double local_theta =
      gemma3 ? c.positive("rope_local_base_freq", 10000.0, kMaxRopeBase) : theta;
  // Gemma 3 scales the global layers' RoPE only; Gemma 2 has no scaling.
  const RopeScaling global_scaling = parse_rope_scaling(c, max_pos);
  const double scale =
      1.0 / std::sqrt(c.positive("query_pre_attn_scalar", static_cast<double>(d_head), 1e12));
  const double attn_cap = c.has("attn_logit_softcapping")
                              ? c.positive("attn_logit_softcapping", std::nullopt, 80.0)
                              : 0.0;
  const double final_cap = c.has("final_logit_softcapping")
                               ? c.positive("final_logit_softcapping", std::nullopt, 1e6)
                               : 0.0;
  if (gemma3 && attn_cap > 0)
    c.fail("attn_logit_softcapping", "is set; kappa's Gemma 3 has no attention soft-capping");
  if (!gemma3 && attn_cap == 0)
    c.fail("attn_logit_softcapping", "is null; kappa's Gemma 2 soft-caps the scores");
  require_activation(c, "hidden_activation", "gelu_pytorch_tanh", {"gelu_pytorch_tanh"});
  require_false(c, "attention_bias", "kappa's Gemma attention has no biases");
  const bool tied = c.boolean("tie_word_embeddings", true);
  const std::vector<char> sliding = gemma_sliding_layers(c, type, n_layer);
  const Weights<T, Source> w(ckpt, "model.");
  w.check("embed_tokens.weight", vocab, d);
  if (!tied) ckpt.require_shape("lm_head.weight", {vocab, d});
  using Attention = typename BuiltAttention<typename Layer::AttentionType>::type;
  std::vector<Layer> layers;
  for (Index i = 0; i < n_layer; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const RowMatrix<T> w_q = w.mat(p + "self_attn.q_proj.weight", dq, d),
                       w_k = w.mat(p + "self_attn.k_proj.weight", dkv, d),
                       w_v = w.mat(p + "self_attn.v_proj.weight", dkv, d),
                       w_o = w.mat(p + "self_attn.o_proj.weight", d, dq);
    const bool local = sliding[static_cast<std::size_t>(i)] != 0;
    const Rope<T, RotateHalf> rope(d_head, local ? local_theta : theta,
                                   local && gemma3 ? RopeScaling{} : global_scaling);
    const HeadsConfig hc{.d_in = d, .n_heads = n_head, .d_head = d_head, .n_kv_heads = n_kv};
    Attention attn = [&] {
      if constexpr (std::same_as<Attention, Gemma2Attention<T, S>>) {
        return Gemma2Attention<T, S>(hc, kernels::SoftCapped(attn_cap, scale), rope);
      } else {
        return Qwen3Attention<T, S>(
            hc, kernels::Softmax{scale},
            QkNorm<T, Rope<T, RotateHalf>>(gemma_gain(w, p + "self_attn.q_norm.weight", d_head),
                                           gemma_gain(w, p + "self_attn.k_norm.weight", d_head),
                                           eps, rope));
      }
    }();
    attn.set_weights_from_hf(w_q, w_k, w_v, w_o);
    const RowMatrix<T> w_gate = w.mat(p + "mlp.gate_proj.weight", d_ff, d),
                       w_up = w.mat(p + "mlp.up_proj.weight", d_ff, d),
                       w_down = w.mat(p + "mlp.down_proj.weight", d, d_ff);
    GatedMlp<T, GeluTanh, S> mlp(d, d_ff);
    mlp.set_weights(w_gate.transpose(), w_up.transpose(), w_down.transpose());
    const auto norm = [&](const char* name) { return RMSNorm<T>(gemma_gain(w, p + name, d), eps); };
    layers.emplace_back(std::move(attn),
                        Sandwich<RMSNorm<T>>{norm("input_layernorm.weight"),
                                             norm("post_attention_layernorm.weight")},
                        Sandwich<RMSNorm<T>>{norm("pre_feedforward_layernorm.weight"),
                                             norm("post_feedforward_layernorm.weight")},
                        std::move(mlp), SlidingWindowMask{local ? window : max_pos});
  }
  std::optional<RowMatrix<T>> head;
  if (!tied) head = ckpt.template matrix<T>("lm_head.weight", {vocab, d});
  Model m(Embedding<T>(w.mat("embed_tokens.weight", vocab, d)), {}, std::move(layers),
          RMSNorm<T>(gemma_gain(w, "norm.weight", d), eps), std::move(head), max_pos);
  m.set_embedding_scale(
      rounded_to(std::sqrt(static_cast<double>(d)), ckpt.info("model.embed_tokens.weight").dtype));
  m.set_final_logit_softcap(final_cap);
  return m;
}
}  // namespace detail

/// Gemma 2 (gemma2): see architectures.hpp. The embedding scale sqrt(d) is
/// rounded as the checkpoint's dtype rounds it, as Hugging Face computes it.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
Gemma2<T, S> load_gemma2(const Config& c, const io::Checkpoint& ckpt) {
  return detail::build_gemma<T, S, Gemma2Layer<T, S>, Gemma2<T, S>>(c, ckpt);
}

/// Gemma 3's text model (gemma3_text): Gemma 2's layout with QK-norm, no
/// soft-capping, and the local layers' own RoPE base (rope_local_base_freq,
/// unscaled) beside the global layers' (rope_theta with rope_scaling).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
Gemma3<T, S> load_gemma3(const Config& c, const io::Checkpoint& ckpt) {
  return detail::build_gemma<T, S, Gemma3Layer<T, S>, Gemma3<T, S>>(c, ckpt);
}

/// Mixtral and Qwen2-MoE: the LLaMA layout whose feed-forward is, layer by
/// layer, a mixture of SwiGLU experts (or dense, as Qwen2-MoE's
/// mlp_only_layers and decoder_sparse_step say).
template <Scalar T, WeightStoragePolicy S = DenseWeights>
LlamaMoe<T, S> load_llama_moe(const Config& c, const io::Checkpoint& ckpt);

namespace detail {
/// Mixtral / Qwen2-MoE of sizes s and m: the LLaMA layout whose
/// feed-forward is, layer by layer, SwiGLU or a mixture of experts.
template <Scalar T, WeightStoragePolicy S, class Source>
LlamaMoe<T, S> build_llama_moe(const LlamaSizes& s, const MoeSizes& m, const Source& ckpt) {
  return build_llama<T, S, LlamaMoeLayer<T, S>>(
      s, ckpt, CausalMask{}, llama_rope<T>(s),
      [&s, &m](const auto& w, Index i, const std::string& p) {
        return read_ffn<T, S>(w, i, p, s.d, s.d_ff, m);
      });
}
}  // namespace detail

template <Scalar T, WeightStoragePolicy S>
LlamaMoe<T, S> load_llama_moe(const Config& c, const io::Checkpoint& ckpt) {
  const std::string type = c.string("model_type");
  const LlamaSizes s = llama_sizes(c, type);
  if (type == "mixtral" && c.has("sliding_window"))
    c.fail("sliding_window", "is set; kappa runs Mixtral without a sliding window only");
  return detail::build_llama_moe<T, S>(s, moe_sizes(c, type, s.n_layer), ckpt);
}

/// Mistral with its sliding window: token i sees positions i - W + 1 .. i.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
MistralSliding<T, S> load_mistral_sliding(const Config& c, const io::Checkpoint& ckpt) {
  const LlamaSizes s = llama_sizes(c, c.string("model_type", "mistral"));
  if (s.sliding_window < 1) c.fail("sliding_window", "is not set");
  return detail::build_llama<T, S, MistralSlidingLayer<T, S>>(
      s, ckpt, SlidingWindowMask{s.sliding_window}, detail::llama_rope<T>(s),
      [&](const detail::Weights<T>& w, Index, const std::string& p) {
        if (s.tensors == LlamaSizes::Tensors::kFused)
          return detail::read_fused_mlp<T, S>(w, p, s.d, s.d_ff, c);
        return detail::read_llama_mlp<T, S>(w, p, s.d, s.d_ff);
      });
}

// ---- DeepSeek-V2 ----------------------------------------------------------------

namespace detail {
/// The DeepSeek-V2/V3 layout: latent attention in every layer, the
/// feed-forward from `make_ffn(w, i, "layers.i.", d, d_ff)`.
template <Scalar T, WeightStoragePolicy S, LatentPath Path, class Layer, class MakeFfn,
          class Source = io::Checkpoint>
DecoderLM<T, Layer, NoAbsolutePositions, S> build_deepseek(const Config& c, const Source& ckpt,
                                                           MakeFfn make_ffn) {
  const Index d = c.integer("hidden_size", std::nullopt, 1),
              n_layer = c.layer_count("num_hidden_layers"),
              n_head = c.integer("num_attention_heads", std::nullopt, 1),
              d_ff = c.integer("intermediate_size", std::nullopt, 1),
              vocab = c.integer("vocab_size", std::nullopt, 1),
              max_pos = c.integer("max_position_embeddings", 2048, 1);
  detail::require_activation(c, "hidden_act", "silu", {"silu"});
  detail::require_false(c, "attention_bias", "kappa's latent attention has no biases");
  LatentConfig lc;
  lc.d_model = d;
  lc.n_heads = n_head;
  lc.d_head = c.integer("qk_nope_head_dim", std::nullopt, 1);
  lc.d_rope = c.integer("qk_rope_head_dim", std::nullopt, 2);
  lc.d_v = c.integer("v_head_dim", std::nullopt, 1);
  lc.d_latent = c.integer("kv_lora_rank", std::nullopt, 1);
  lc.d_q_latent = c.has("q_lora_rank") ? c.integer("q_lora_rank", std::nullopt, 1) : 0;
  // DeepSeek's q_a_layernorm / kv_a_layernorm are built with the default
  // epsilon (1e-6), not rms_norm_eps.
  lc.norm_eps = 1e-6;
  lc.rope_base = c.positive("rope_theta", 10000.0, kMaxRopeBase);
  lc.rope_scaling = parse_rope_scaling(c, max_pos);
  lc.scale =
      yarn_softmax_factor(lc.rope_scaling) / std::sqrt(static_cast<double>(lc.d_head + lc.d_rope));
  const double eps = c.positive("rms_norm_eps", 1e-6, kMaxEpsilon);
  const Index dh = lc.d_head, dr = lc.d_rope, dv = lc.d_v, dc = lc.d_latent;
  const Index q_rows = c.product("num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim)",
                                 n_head, c.sum("qk_nope_head_dim + qk_rope_head_dim", dh, dr)),
              kv_a_rows = c.sum("kv_lora_rank + qk_rope_head_dim", dc, dr),
              kv_b_rows = c.product("num_attention_heads x (qk_nope_head_dim + v_head_dim)", n_head,
                                    c.sum("qk_nope_head_dim + v_head_dim", dh, dv)),
              o_cols = c.product("num_attention_heads x v_head_dim", n_head, dv);
  const bool tied = c.boolean("tie_word_embeddings", false);
  const detail::Weights<T, Source> w(ckpt, "model.");
  // The config's sizes against the file before anything is allocated; each
  // layer below reads (and so checks) its tensors before building on them.
  w.check("embed_tokens.weight", vocab, d);
  if (!tied) ckpt.require_shape("lm_head.weight", {vocab, d});
  std::vector<Layer> layers;
  for (Index i = 0; i < n_layer; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".self_attn.";
    HfDeepSeekV2AttentionWeights<T> hw;
    if (lc.d_q_latent > 0) {
      hw.q_a_proj = w.mat(p + "q_a_proj.weight", lc.d_q_latent, d);
      hw.q_a_layernorm = w.vec(p + "q_a_layernorm.weight", lc.d_q_latent);
      hw.q_b_proj = w.mat(p + "q_b_proj.weight", q_rows, lc.d_q_latent);
    } else {
      hw.q_proj = w.mat(p + "q_proj.weight", q_rows, d);
    }
    hw.kv_a_proj_with_mqa = w.mat(p + "kv_a_proj_with_mqa.weight", kv_a_rows, d);
    hw.kv_a_layernorm = w.vec(p + "kv_a_layernorm.weight", dc);
    hw.kv_b_proj = w.mat(p + "kv_b_proj.weight", kv_b_rows, dc);
    hw.o_proj = w.mat(p + "o_proj.weight", d, o_cols);
    const std::string q = "layers." + std::to_string(i) + ".";
    LatentAttention<T, Path, Interleaved> attn(lc);
    attn.set_weights_from_hf(hw);
    auto mlp = make_ffn(w, i, q, d, d_ff);
    layers.emplace_back(std::move(attn), RMSNorm<T>(w.vec(q + "input_layernorm.weight", d), eps),
                        RMSNorm<T>(w.vec(q + "post_attention_layernorm.weight", d), eps),
                        std::move(mlp));
  }
  std::optional<RowMatrix<T>> head;
  if (!tied) head = ckpt.template matrix<T>("lm_head.weight", {vocab, d});
  return DecoderLM<T, Layer, NoAbsolutePositions, S>(
      Embedding<T>(w.mat("embed_tokens.weight", vocab, d)), {}, std::move(layers),
      RMSNorm<T>(w.vec("norm.weight", d), eps), std::move(head), max_pos);
}
}  // namespace detail

namespace detail {
/// The expert layout of a DeepSeek config (its model_type, deepseek_v2 by
/// default, and num_hidden_layers).
inline MoeSizes deepseek_moe_sizes(const Config& c) {
  return moe_sizes(c, c.string("model_type", "deepseek_v2"), c.layer_count("num_hidden_layers", 0));
}
}  // namespace detail

/// DeepSeek-V2 with dense feed-forward layers only. \throws FormatError
/// naming n_routed_experts for a config with expert layers (load those with
/// load_deepseek_moe; load_causal_lm picks the right one).
template <Scalar T, WeightStoragePolicy S = DenseWeights, LatentPath Path = AbsorbedLatent,
          class Source = io::Checkpoint>
DeepSeekV2<T, S, Path> load_deepseek_v2(const Config& c, const Source& ckpt) {
  const MoeSizes m = detail::deepseek_moe_sizes(c);
  if (m.any_sparse())
    c.fail("n_routed_experts",
           "is set and some layers are mixtures of experts: use load_deepseek_moe");
  return detail::build_deepseek<T, S, Path, DeepSeekV2Layer<T, S, Path>>(
      c, ckpt, [](const auto& w, Index, const std::string& p, Index d, Index d_ff) {
        return detail::read_llama_mlp<T, S>(w, p, d, d_ff);
      });
}

/// DeepSeek-V2, V2-Lite and V3 with their mixture-of-experts layers (and
/// dense ones where first_k_dense_replace and moe_layer_freq say). V3's
/// multi-token-prediction layer (`model.layers.L.*` with L = num_hidden_layers, counted
/// by num_nextn_predict_layers) is not part of the causal model and is
/// ignored.
template <Scalar T, WeightStoragePolicy S = DenseWeights, LatentPath Path = AbsorbedLatent,
          class Source = io::Checkpoint>
DeepSeekMoe<T, S, Path> load_deepseek_moe(const Config& c, const Source& ckpt) {
  const MoeSizes m = detail::deepseek_moe_sizes(c);
  return detail::build_deepseek<T, S, Path, DeepSeekMoeLayer<T, S, Path>>(
      c, ckpt, [&m](const auto& w, Index i, const std::string& p, Index d, Index d_ff) {
        return detail::read_ffn<T, S>(w, i, p, d, d_ff, m);
      });
}

// ---- BERT -------------------------------------------------------------------------

/// BERT (BertModel or BertForMaskedLM names; LayerNorm weight/bias or the
/// legacy gamma/beta). The masked-LM head is loaded when the checkpoint has it.
template <Scalar T>
Bert<T> load_bert(const Config& c, const io::Checkpoint& ckpt) {
  const Index d = c.integer("hidden_size", std::nullopt, 1),
              n_layer = c.layer_count("num_hidden_layers"),
              n_head = c.integer("num_attention_heads", std::nullopt, 1),
              d_ff = c.integer("intermediate_size", std::nullopt, 1),
              vocab = c.integer("vocab_size", std::nullopt, 1),
              max_pos = c.integer("max_position_embeddings", 512, 1),
              n_types = c.integer("type_vocab_size", 2, 0);
  const double eps = c.positive("layer_norm_eps", 1e-12, kMaxEpsilon);
  if (d % n_head != 0)
    c.fail("num_attention_heads", "must divide hidden_size = " + std::to_string(d));
  detail::require_activation(c, "hidden_act", "gelu", {"gelu"});
  if (c.string("position_embedding_type", "absolute") != "absolute")
    c.fail("position_embedding_type", "is not 'absolute'; kappa supports absolute positions only");
  const std::string prefix = ckpt.has("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  const detail::Weights<T> w(ckpt, prefix);
  const auto norm = [&](const detail::Weights<T>& ws, const std::string& p) {
    const bool legacy = !ws.has(p + ".weight") && ws.has(p + ".gamma");
    return LayerNorm<T>(ws.vec(p + (legacy ? ".gamma" : ".weight"), d),
                        ws.vec(p + (legacy ? ".beta" : ".bias"), d), eps);
  };
  // The config's sizes against the file before anything is allocated; each
  // layer below reads (and so checks) its tensors before building on them.
  w.check("embeddings.word_embeddings.weight", vocab, d);
  w.check("embeddings.position_embeddings.weight", max_pos, d);
  if (n_types > 0) w.check("embeddings.token_type_embeddings.weight", n_types, d);
  std::vector<BertLayer<T>> layers;
  for (Index i = 0; i < n_layer; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    const RowMatrix<T> w_q = w.mat(p + "attention.self.query.weight", d, d),
                       w_k = w.mat(p + "attention.self.key.weight", d, d),
                       w_v = w.mat(p + "attention.self.value.weight", d, d),
                       w_o = w.mat(p + "attention.output.dense.weight", d, d),
                       w_in = w.mat(p + "intermediate.dense.weight", d_ff, d),
                       w_out = w.mat(p + "output.dense.weight", d, d_ff);
    MultiHeadAttention<T> attn({.d_in = d, .n_heads = n_head});
    attn.set_weights_from_hf(w_q, w_k, w_v, w_o);
    attn.set_biases(
        w.vec(p + "attention.self.query.bias", d), w.vec(p + "attention.self.key.bias", d),
        w.vec(p + "attention.self.value.bias", d), w.vec(p + "attention.output.dense.bias", d));
    Mlp<T, Gelu> mlp(d, d_ff);
    mlp.set_weights(w_in.transpose(), w.vec(p + "intermediate.dense.bias", d_ff), w_out.transpose(),
                    w.vec(p + "output.dense.bias", d));
    layers.emplace_back(std::move(attn), norm(w, p + "attention.output.LayerNorm"),
                        norm(w, p + "output.LayerNorm"), std::move(mlp));
  }
  std::optional<MaskedLMHead<T, Gelu>> head;
  const detail::Weights<T> root(ckpt, "");
  if (root.has("cls.predictions.transform.dense.weight")) {
    MaskedLMHead<T, Gelu> h;
    h.w_transform = root.mat("cls.predictions.transform.dense.weight", d, d).transpose();
    h.b_transform = root.vec("cls.predictions.transform.dense.bias", d);
    h.norm = norm(root, "cls.predictions.transform.LayerNorm");
    h.bias = root.vec("cls.predictions.bias", vocab);
    head = std::move(h);
  }
  return Bert<T>(Embedding<T>(w.mat("embeddings.word_embeddings.weight", vocab, d)),
                 LearnedPositions<T>(w.mat("embeddings.position_embeddings.weight", max_pos, d)),
                 n_types > 0 ? w.mat("embeddings.token_type_embeddings.weight", n_types, d)
                             : RowMatrix<T>(0, d),
                 norm(w, "embeddings.LayerNorm"), std::move(layers), std::move(head));
}

// ---- The paper's encoder-decoder ----------------------------------------------------

/// The original Transformer in torch.nn.Transformer's weight names (see the
/// file comment and tests/data/models/README.md).
template <Scalar T>
PaperTransformer<T> load_paper_transformer(const Config& c, const io::Checkpoint& ckpt) {
  const Index d = c.integer("d_model", std::nullopt, 1),
              n_head = c.integer("nhead", std::nullopt, 1),
              n_enc = c.layer_count("num_encoder_layers"),
              n_dec = c.layer_count("num_decoder_layers"),
              d_ff = c.integer("dim_feedforward", std::nullopt, 1),
              v_src = c.integer("src_vocab_size", std::nullopt, 1),
              v_tgt = c.integer("tgt_vocab_size", std::nullopt, 1);
  const double eps = c.positive("layer_norm_eps", 1e-5, kMaxEpsilon);
  if (d % n_head != 0) c.fail("nhead", "must divide d_model = " + std::to_string(d));
  const detail::Weights<T> w(ckpt, "transformer.");
  const auto ln = [&](const std::string& p) {
    return LayerNorm<T>(w.vec(p + ".weight", d), w.vec(p + ".bias", d), eps);
  };
  const Index d3 = c.product("3 x d_model", 3, d);
  // Read (and so check) each tensor before building on the config's sizes.
  const auto mha = [&](const std::string& p) {
    const RowMatrix<T> in_proj = w.mat(p + ".in_proj_weight", d3, d);
    MultiHeadAttention<T> a({.d_in = d, .n_heads = n_head});
    a.set_weights_from_torch_mha(in_proj, w.mat(p + ".out_proj.weight", d, d));
    a.set_biases_from_torch_mha(w.vec(p + ".in_proj_bias", d3), w.vec(p + ".out_proj.bias", d));
    return a;
  };
  const auto mlp = [&](const std::string& p) {
    const RowMatrix<T> w1 = w.mat(p + "linear1.weight", d_ff, d);
    Mlp<T, Relu> m(d, d_ff);
    m.set_weights(w1.transpose(), w.vec(p + "linear1.bias", d_ff),
                  w.mat(p + "linear2.weight", d, d_ff).transpose(), w.vec(p + "linear2.bias", d));
    return m;
  };
  ckpt.require_shape("src_embed.weight", {v_src, d});
  ckpt.require_shape("tgt_embed.weight", {v_tgt, d});
  ckpt.require_shape("generator.weight", {v_tgt, d});
  typename PaperTransformer<T>::Parts parts{
      .src_embed = Embedding<T>(ckpt.template matrix<T>("src_embed.weight", {v_src, d})),
      .tgt_embed = Embedding<T>(ckpt.template matrix<T>("tgt_embed.weight", {v_tgt, d})),
      .scale_embedding = c.boolean("scale_embedding", true),
      .encoder = {},
      .encoder_norm = std::nullopt,
      .decoder = {},
      .decoder_norm = std::nullopt,
      .generator = ckpt.template matrix<T>("generator.weight", {v_tgt, d}),
      .generator_bias = ckpt.has("generator.bias") ? ckpt.template row_vector<T>("generator.bias")
                                                   : RowVector<T>()};
  for (Index i = 0; i < n_enc; ++i) {
    const std::string p = "encoder.layers." + std::to_string(i) + ".";
    parts.encoder.emplace_back(mha(p + "self_attn"), ln(p + "norm1"), ln(p + "norm2"), mlp(p));
  }
  for (Index i = 0; i < n_dec; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i) + ".";
    parts.decoder.emplace_back(mha(p + "self_attn"), mha(p + "multihead_attn"), ln(p + "norm1"),
                               ln(p + "norm2"), ln(p + "norm3"), mlp(p));
  }
  if (w.has("encoder.norm.weight")) parts.encoder_norm = ln("encoder.norm");
  if (w.has("decoder.norm.weight")) parts.decoder_norm = ln("decoder.norm");
  return PaperTransformer<T>(std::move(parts));
}

// ---- One call -------------------------------------------------------------------

/// A decoder-only language model loaded from a directory, whichever layout
/// its config names; forward / cached decoding dispatch to it.
/// \tparam S  weight storage of the feed-forward and output-head weights
///            (DenseWeights, or Bf16Weights: half the bytes per decoded token)
template <Scalar T, WeightStoragePolicy S = DenseWeights>
class CausalLM {
 public:
  using Model =
      std::variant<Gpt2<T, S>, Llama<T, S>, MistralSliding<T, S>, DeepSeekV2<T, S>, LlamaMoe<T, S>,
                   DeepSeekMoe<T, S>, Qwen3<T, S>, Gemma2<T, S>, Gemma3<T, S>>;
  /// The cache of one sequence (of the loaded model's kind, in the storage
  /// format make_cache() was given).
  struct Cache {
    std::variant<typename Gpt2<T, S>::AnyCache, typename Llama<T, S>::AnyCache,
                 typename MistralSliding<T, S>::AnyCache, typename DeepSeekV2<T, S>::AnyCache,
                 typename LlamaMoe<T, S>::AnyCache, typename DeepSeekMoe<T, S>::AnyCache,
                 typename Qwen3<T, S>::AnyCache, typename Gemma2<T, S>::AnyCache,
                 typename Gemma3<T, S>::AnyCache>
        c;
    [[nodiscard]] cache::Format format() const {
      return std::visit([](const auto& x) { return x.format(); }, c);
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
    void reset() {
      std::visit([](auto& x) { x.reset(); }, c);
    }
    void truncate(Index len) {
      std::visit([len](auto& x) { x.truncate(len); }, c);
    }
  };

  CausalLM(Model m, std::string model_type) : m_(std::move(m)), type_(std::move(model_type)) {}

  /// The cache length at which generation drops the cache and runs the
  /// whole sequence again (0: never). Phi-3's LongRoPE switches from the
  /// short to the long factors once the sequence passes the original context
  /// L_0; keys cached before were rotated with the short ones, so Hugging
  /// Face's Phi-3 recomputes the cache once when it crosses (its
  /// prepare_inputs_for_generation), and so does kappa's generate(): the
  /// text then equals a pass over the whole sequence at every step.
  [[nodiscard]] Index cache_refresh_length() const { return refresh_; }
  void set_cache_refresh_length(Index n) { refresh_ = n; }
  [[nodiscard]] const std::string& model_type() const { return type_; }
  [[nodiscard]] const Model& model() const { return m_; }
  /// The architecture alias the model was loaded as: "Gpt2", "Llama",
  /// "MistralSliding", "DeepSeekV2", "LlamaMoe", "DeepSeekMoe", "Qwen3",
  /// "Gemma2" or "Gemma3" (architectures.hpp).
  [[nodiscard]] const char* architecture() const {
    constexpr std::array<const char*, std::variant_size_v<Model>> kNames = {
        "Gpt2",        "Llama", "MistralSliding", "DeepSeekV2", "LlamaMoe",
        "DeepSeekMoe", "Qwen3", "Gemma2",         "Gemma3"};
    return kNames[m_.index()];
  }
  /// Whether the model is an M (e.g. kappa::Llama<float>).
  template <class M>
  [[nodiscard]] bool holds() const {
    return std::holds_alternative<M>(m_);
  }
  /// The model as its type M (e.g. `lm.as<kappa::Gpt2<float>>().layers()[0]`).
  /// \throws std::invalid_argument naming the loaded model_type and
  ///         architecture when it is another type.
  template <class M>
  [[nodiscard]] const M& as() const {
    if (const M* m = std::get_if<M>(&m_)) return *m;
    throw std::invalid_argument("kappa: CausalLM::as: the loaded model (model_type " +
                                kappa::quoted(type_) + ") is a kappa::" + architecture() +
                                ", not the type asked for (see architecture(), or visit())");
  }
  /// Calls f(model) with the model as its own type (a generic lambda sees
  /// the concrete DecoderLM) and returns f's result.
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), m_);
  }
  /// See DecoderLM::inspect: the logits with the hidden states and the
  /// attention weights asked for; `hook` sees every layer's output.
  [[nodiscard]] Inspection<T> inspect(std::span<const TokenId> ids, const InspectOptions& what = {},
                                      const LayerHook<T>& hook = {}) const {
    return visit([&](const auto& m) { return m.inspect(ids, what, hook); });
  }
  [[nodiscard]] Index vocab_size() const {
    return visit([](const auto& m) { return m.vocab_size(); });
  }
  [[nodiscard]] Index d_model() const {
    return visit([](const auto& m) { return m.d_model(); });
  }
  [[nodiscard]] Index n_layers() const {
    return visit([](const auto& m) { return m.n_layers(); });
  }
  /// max_position_embeddings / n_positions of the config.
  [[nodiscard]] Index context_length() const {
    return visit([](const auto& m) { return m.context_length(); });
  }
  [[nodiscard]] std::size_t weight_bytes() const {
    return visit([](const auto& m) { return m.weight_bytes(); });
  }
  /// Bytes of weights one decode step reads (see DecoderLM::decode_bytes).
  [[nodiscard]] std::size_t decode_bytes() const {
    return visit([](const auto& m) { return m.decode_bytes(); });
  }
  /// Logits (N, N_T) of one sequence.
  [[nodiscard]] RowMatrix<T> forward(std::span<const TokenId> ids) const {
    return visit([&](const auto& m) { return m.forward(ids); });
  }
  /// An empty cache for one sequence, its keys and values (DeepSeek: its
  /// latent rows) stored in `format` (cache/formats.hpp; the error of each
  /// format is measured in kv_cache.hpp).
  [[nodiscard]] Cache make_cache(cache::Format format = cache::Format::kNative) const {
    return visit([format](const auto& m) { return Cache{m.make_cache(format)}; });
  }
  /// See DecoderLM::forward_cached.
  [[nodiscard]] RowMatrix<T> forward_cached(std::span<const TokenId> ids, Cache& cache,
                                            LogitsFor which = LogitsFor::kAll) const {
    return std::visit(
        [&](const auto& m) -> RowMatrix<T> {
          using C = typename std::decay_t<decltype(m)>::AnyCache;
          C* c = std::get_if<C>(&cache.c);
          if (c == nullptr)
            throw ShapeError("kappa: CausalLM: the cache was made by another model");
          return m.forward_cached(ids, *c, which);
        },
        m_);
  }
  /// One decoding step: the next token's logits (1, N_T). See
  /// DecoderLM::forward_cached.
  [[nodiscard]] RowMatrix<T> forward_cached(TokenId id, Cache& cache) const {
    return forward_cached(std::span<const TokenId>(&id, 1), cache);
  }
  /// X_0 of one token at `position` (1, d). See DecoderLM::embed.
  [[nodiscard]] RowMatrix<T> embed(TokenId id, Index position) const {
    return visit([&](const auto& m) { return m.embed(id, position); });
  }
  /// X_0 of `ids` at positions first .. first + N - 1 (N, d).
  [[nodiscard]] RowMatrix<T> embed(std::span<const TokenId> ids, Index first = 0) const {
    return visit([&](const auto& m) { return m.embed(ids, first); });
  }
  /// See DecoderLM::forward_cached (batch).
  [[nodiscard]] RowMatrix<T> forward_cached(const std::vector<std::vector<TokenId>>& batch,
                                            const std::vector<Cache*>& caches,
                                            LogitsFor which = LogitsFor::kAll) const {
    return std::visit(
        [&](const auto& m) -> RowMatrix<T> {
          using C = typename std::decay_t<decltype(m)>::AnyCache;
          std::vector<C*> cs;
          for (Cache* c : caches) {
            C* x = c == nullptr ? nullptr : std::get_if<C>(&c->c);
            if (x == nullptr)
              throw ShapeError("kappa: CausalLM: a cache is null or made by another model");
            cs.push_back(x);
          }
          return m.forward_cached(batch, cs, which);
        },
        m_);
  }

 private:
  Model m_;
  std::string type_;
  Index refresh_ = 0;
};

/// Loads the decoder-only model of a Hugging Face directory (config.json +
/// model.safetensors or its sharded index). `weights`, when not empty, names
/// the weights instead, inside or outside `dir`: a .safetensors file, or an
/// index .json whose shards lie beside it (io::Checkpoint). \throws
/// FormatError naming the file and key (an unsupported model_type is named),
/// ShapeError naming a tensor whose shape disagrees with the config.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
CausalLM<T, S> load_causal_lm(const std::filesystem::path& dir,
                              const std::filesystem::path& weights = {}) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw FormatError("kappa: " + dir.string() + ": not a model directory");
  const Config c = Config::read(dir / "config.json");
  const std::string type = c.string("model_type");
  constexpr std::array<std::string_view, 12> kTypes = {
      "gpt2",      "llama",       "mistral", "qwen2", "deepseek_v2", "mixtral",
      "qwen2_moe", "deepseek_v3", "qwen3",   "phi3",  "gemma2",      "gemma3_text"};
  if (std::find(kTypes.begin(), kTypes.end(), type) == kTypes.end()) {
    if (type == "bert") c.fail("model_type", "is 'bert', an encoder-only model: use load_bert");
    c.fail("model_type",
           "is " + kappa::quoted(type) +
               ", which kappa does not load as a causal LM (gpt2, llama, mistral, "
               "qwen2, qwen3, phi3, gemma2, gemma3_text, deepseek_v2, deepseek_v3, mixtral, "
               "qwen2_moe)");
  }
  // Quantized checkpoints (DeepSeek-V3's block-scaled FP8, GPTQ, AWQ, ...)
  // store weights that mean nothing without their scales: refuse them by
  // name rather than read the raw values.
  if (c.has("quantization_config")) {
    const nlohmann::json& q = c.json().at("quantization_config");
    const std::string method =
        q.is_object() && q.contains("quant_method") && q.at("quant_method").is_string()
            ? q.at("quant_method").get<std::string>()
            : std::string("unknown");
    c.fail("quantization_config",
           "is set (quant_method " + kappa::quoted(method) +
               "); kappa reads F32, F16 and BF16 weights: use the BF16 release of the model or "
               "dequantize it first");
  }
  const io::Checkpoint ckpt(weights.empty() ? dir : weights);
  if (type == "gpt2") return CausalLM<T, S>(load_gpt2<T, S>(c, ckpt), type);
  if (type == "qwen3") return CausalLM<T, S>(load_qwen3<T, S>(c, ckpt), type);
  if (type == "gemma2") return CausalLM<T, S>(load_gemma2<T, S>(c, ckpt), type);
  if (type == "gemma3_text") return CausalLM<T, S>(load_gemma3<T, S>(c, ckpt), type);
  if (type == "mixtral" || type == "qwen2_moe")
    return CausalLM<T, S>(load_llama_moe<T, S>(c, ckpt), type);
  if (type == "deepseek_v2" || type == "deepseek_v3") {
    const MoeSizes m = moe_sizes(c, type, c.layer_count("num_hidden_layers"));
    if (m.any_sparse()) return CausalLM<T, S>(load_deepseek_moe<T, S>(c, ckpt), type);
    return CausalLM<T, S>(load_deepseek_v2<T, S>(c, ckpt), type);
  }
  if (type == "phi3") {
    CausalLM<T, S> lm = c.has("sliding_window")
                            ? CausalLM<T, S>(load_mistral_sliding<T, S>(c, ckpt), type)
                            : CausalLM<T, S>(load_llama<T, S>(c, ckpt), type);
    const LlamaSizes s = llama_sizes(c, type);
    if (s.scaling.kind == RopeScaling::Kind::kLongRope)
      lm.set_cache_refresh_length(s.scaling.original_context);
    return lm;
  }
  if (type == "mistral" && c.has("sliding_window"))
    return CausalLM<T, S>(load_mistral_sliding<T, S>(c, ckpt), type);
  return CausalLM<T, S>(load_llama<T, S>(c, ckpt), type);
}

/// What one call loads from a Hugging Face directory: the model, its
/// tokenizer and the directory it came from.
template <Scalar T, WeightStoragePolicy S = DenseWeights>
struct LoadedCausalLM {
  CausalLM<T, S> model;
  tokenize::HfTokenizer tokenizer;
  std::filesystem::path directory;
};

/// One call: config.json, the weights and the tokenizer (tokenizer.json, or
/// vocab.json + merges.txt, with tokenizer_config.json's BOS/EOS).
/// \throws as load_causal_lm() and HfTokenizer::from_directory().
template <Scalar T, WeightStoragePolicy S = DenseWeights>
LoadedCausalLM<T, S> load(const std::filesystem::path& dir, tokenize::Normalization normalization =
                                                                tokenize::Normalization::kReject) {
  CausalLM<T, S> model = load_causal_lm<T, S>(dir);
  tokenize::HfTokenizer tok = tokenize::HfTokenizer::from_directory(dir.string(), normalization);
  return {std::move(model), std::move(tok), dir};
}

/// Loads a BERT directory (model_type bert).
template <Scalar T>
Bert<T> load_bert(const std::filesystem::path& dir) {
  const Config c = Config::read(dir / "config.json");
  const std::string type = c.string("model_type");
  if (type != "bert") c.fail("model_type", "is " + kappa::quoted(type) + ", expected 'bert'");
  return load_bert<T>(c, io::Checkpoint(dir));
}

/// Loads the paper's encoder-decoder (model_type kappa_transformer).
template <Scalar T>
PaperTransformer<T> load_paper_transformer(const std::filesystem::path& dir) {
  const Config c = Config::read(dir / "config.json");
  const std::string type = c.string("model_type");
  if (type != "kappa_transformer")
    c.fail("model_type", "is " + kappa::quoted(type) + ", expected 'kappa_transformer'");
  return load_paper_transformer<T>(c, io::Checkpoint(dir));
}

}  // namespace kappa::hf
