// kappa/transformer/gguf_write.hpp - a Hugging Face model directory written
// as the GGUF file llama.cpp's converter (convert_hf_to_gguf.py) makes of it,
// with the weights in F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K, or in
// llama.cpp's "Q4_K_M" mix: the file llama.cpp runs, and the one
// kappa::gguf::load reads back (gguf_load.hpp).
//
// Q8_0 and Q4_0 blocks are ggml's reference quantizer's, byte for byte.
// Q4_K and Q6_K blocks come from kappa's own quantizer (quant_weights.hpp:
// sub-block min/max with the scales rounded to cover every value), valid
// blocks that llama.cpp reads, not byte-equal to llama-quantize's iterative
// search (its error is somewhat larger). WeightMix::kQ4_K_M picks each
// tensor's type as llama-quantize's Q4_K_M does: Q6_K for output.weight and
// for attn_v and ffn_down of the layers its use_more_bits rule names (the
// first and last eighth of the layers and every third between), Q4_K
// elsewhere; a row that is not a multiple of 256 falls back to Q8_0 (llama.cpp
// uses Q5_0 / Q5_1, which kappa does not write), or F16 when not a multiple
// of 32.
//
// What is written, as llama.cpp's converter writes it:
//   models      config.json model_type llama or mistral (general.architecture
//               "llama"), qwen2 ("qwen2"); rope_scaling must be null (a
//               scaled RoPE is a FormatError naming the key);
//   metadata    general.architecture, .name (the directory's name),
//               .file_type, .quantization_version; <arch>.block_count,
//               .context_length, .embedding_length, .feed_forward_length,
//               .attention.head_count, .attention.head_count_kv,
//               .rope.freq_base, .attention.layer_norm_rms_epsilon,
//               .attention.key_length / .value_length (when config.json
//               has head_dim), and for llama .rope.dimension_count and
//               .vocab_size;
//   tensors     llama.cpp's names (GgufTensors::gguf_name); W^Q and W^K rows
//               permuted per head for llama (LlamaModel.permute: ggml's
//               interleaved RoPE; qwen2 keeps Hugging Face's rows, ggml
//               rotates it NEOX-style); vectors (norms, biases) in F32,
//               matrices in the chosen type, or F16 when a row is not a
//               whole number of the type's blocks (as the converter falls
//               back); no output.weight when the embedding is tied;
//   tokenizer   a byte-level BPE tokenizer.json (tokenizer.ggml.model "gpt2":
//               tokens in GPT-2's byte alphabet, merges, token types (control
//               for special added tokens, user-defined for the others), pre
//               "llama-bpe" / "gpt-2" / "qwen2" from the split pattern (the
//               converter instead hashes the tokenizer's ids of a test text,
//               and names the tiny test Qwen2's "qwen2" though its pattern is
//               Llama 3's: kappa writes what the file's pattern is), BOS,
//               EOS, add_bos_token / add_eos_token). SentencePiece-style,
//               WordPiece and Unigram tokenizers are a FormatError (not
//               written yet).
// tests/transformer/gguf_write_test.cpp checks the result against the files
// llama.cpp's own converter wrote from the same directory: every tensor's
// name, dims, type and bytes, and the metadata.
#pragma once

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/io/gguf_writer.hpp"
#include "kappa/io/safetensors.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/gguf_load.hpp"

namespace kappa::gguf {

/// How from_hf_directory types the matrices: all in one type, or as
/// llama-quantize's Q4_K_M mix (see the file comment).
enum class WeightMix {
  kUniform,
  kQ4_K_M,
};

namespace detail {

/// The rows of W^Q / W^K as llama.cpp's LlamaModel.permute stores them: for
/// each of `n_heads` heads of width D, GGUF row h D + 2 i + j is Hugging
/// Face row h D + j D/2 + i (the inverse of unpermute_rope_rows).
inline RowMatrix<float> permute_rope_rows(const RowMatrix<float>& hf, Index n_heads) {
  const Index width = hf.rows() / n_heads, half = width / 2;
  RowMatrix<float> g(hf.rows(), hf.cols());
  for (Index h = 0; h < n_heads; ++h)
    for (Index j = 0; j < 2; ++j)
      for (Index i = 0; i < half; ++i)
        g.row(h * width + 2 * i + j) = hf.row(h * width + j * half + i);
  return g;
}

/// llama.cpp's general.file_type of a weight type.
inline std::uint32_t file_type(io::GgmlType t) {
  switch (t) {
    case io::GgmlType::kF32:
      return 0;
    case io::GgmlType::kF16:
      return 1;
    case io::GgmlType::kQ4_0:
      return 2;
    case io::GgmlType::kQ8_0:
      return 7;
    case io::GgmlType::kBF16:
      return 32;
    case io::GgmlType::kQ4_K:
      return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S: every matrix Q4_K
    case io::GgmlType::kQ6_K:
      return 18;
    default:
      throw std::invalid_argument("kappa: gguf: weights cannot be written as " +
                                  std::string(io::ggml_type_name(t)) +
                                  " (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)");
  }
}

/// llama-quantize's use_more_bits(i, n): the layers whose attn_v and
/// ffn_down Q4_K_M keeps in Q6_K.
inline bool use_more_bits(std::int64_t i, std::int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/// The type of matrix `g` (llama.cpp's name; rows of `cols` values) in a
/// file of `n_layer` layers: `weights`, or Q4_K_M's choice; a type whose
/// block does not divide the row falls back to Q8_0, then F16.
inline io::GgmlType matrix_type(io::GgmlType weights, WeightMix mix, const std::string& g,
                                std::int64_t cols, std::int64_t n_layer) {
  io::GgmlType t = weights;
  if (mix == WeightMix::kQ4_K_M) {
    t = io::GgmlType::kQ4_K;
    if (g == "output.weight") t = io::GgmlType::kQ6_K;
    if (g.ends_with(".attn_v.weight") || g.ends_with(".ffn_down.weight")) {
      const std::int64_t layer = std::stoll(g.substr(4, g.find('.', 4) - 4));  // blk.N.
      if (use_more_bits(layer, n_layer)) t = io::GgmlType::kQ6_K;
    }
  }
  for (const io::GgmlType fallback : {io::GgmlType::kQ8_0, io::GgmlType::kF16}) {
    if (cols % io::kGgmlTypes[static_cast<std::uint32_t>(t)].block_size == 0) break;
    t = fallback;
  }
  return t;
}

/// Adds matrix m to w in type t: the writer's own encoders, or kappa's Q4_K /
/// Q6_K quantizer.
inline void add_matrix(io::GgufWriter& w, const std::string& g, const RowMatrix<float>& m,
                       io::GgmlType t) {
  if (t != io::GgmlType::kQ4_K && t != io::GgmlType::kQ6_K) {
    w.add_tensor(g, m, t);
    return;
  }
  const io::GgmlTypeInfo& info = io::kGgmlTypes[static_cast<std::uint32_t>(t)];
  const auto row_bytes = static_cast<std::size_t>(m.cols() / info.block_size * info.type_size);
  std::vector<unsigned char> bytes(row_bytes * static_cast<std::size_t>(m.rows()));
  for (Index r = 0; r < m.rows(); ++r) {
    unsigned char* out = bytes.data() + static_cast<std::size_t>(r) * row_bytes;
    if (t == io::GgmlType::kQ4_K)
      kappa::detail::quantize_row_q4_K_simple(m.row(r).data(), out, m.cols());
    else
      kappa::detail::quantize_row_q6_K_simple(m.row(r).data(), out, m.cols());
  }
  w.add_tensor(g, t, {m.cols(), m.rows()}, std::move(bytes));
}

/// The tokenizer.ggml.* keys of a byte-level BPE tokenizer.json.
inline void write_bpe_tokenizer(io::GgufWriter& w, const std::filesystem::path& dir) {
  const std::string path = (dir / "tokenizer.json").string();
  const tokenize::HfTokenizer tok = tokenize::HfTokenizer::from_directory(dir.string());
  if (tok.family() != tokenize::TokenizerFamily::kByteLevelBpe)
    throw FormatError("kappa: " + dir.string() +
                      ": only byte-level BPE tokenizers are written to GGUF so far");
  const nlohmann::json j = kappa::parse_json(kappa::read_regular_file(path), path);
  const auto n = static_cast<std::size_t>(tok.vocab_size());
  std::vector<std::string> tokens(n);
  std::vector<std::int32_t> types(n, 1);  // normal
  for (const auto& [text, id] : j.at("model").at("vocab").items())
    tokens.at(id.get<std::size_t>()) = text;
  for (const tokenize::AddedToken& a : tok.added_tokens()) {
    tokens.at(static_cast<std::size_t>(a.id)) = a.content;
    types.at(static_cast<std::size_t>(a.id)) = a.special ? 3 : 4;  // control, user-defined
  }
  for (std::size_t id = 0; id < n; ++id)
    if (tokens[id].empty())
      throw FormatError("kappa: " + path + ": id " + std::to_string(id) +
                        " has no token (GGUF's token list has no gaps)");
  std::vector<std::string> merges;
  for (const auto& m : j.at("model").at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  const std::string_view pattern = tok.pattern_name();
  const char* pre = pattern == "cl100k"  ? "llama-bpe"
                    : pattern == "qwen2" ? "qwen2"
                    : pattern == "gpt2"  ? "gpt-2"
                                         : nullptr;
  if (pre == nullptr)
    throw FormatError("kappa: " + path + ": the split pattern " + std::string(pattern) +
                      " has no tokenizer.ggml.pre that kappa writes");
  w.set("tokenizer.ggml.model", std::string("gpt2"));
  w.set("tokenizer.ggml.pre", std::string(pre));
  w.set("tokenizer.ggml.tokens", io::GgufArray{std::move(tokens)});
  w.set("tokenizer.ggml.token_type", io::GgufArray{std::move(types)});
  w.set("tokenizer.ggml.merges", io::GgufArray{std::move(merges)});
  if (tok.bos_id()) w.set("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(*tok.bos_id()));
  if (tok.eos_id()) w.set("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(*tok.eos_id()));
  w.set("tokenizer.ggml.add_bos_token", !tok.prefix_ids().empty());
  w.set("tokenizer.ggml.add_eos_token", !tok.suffix_ids().empty());
}

}  // namespace detail

/// The GGUF file of Hugging Face model directory `dir` with its matrices in
/// `weights`, or in llama-quantize's Q4_K_M mix (see the file comment),
/// ready to write().
/// \throws FormatError naming the file and key for what it does not write.
inline io::GgufWriter from_hf_directory(const std::filesystem::path& dir, io::GgmlType weights,
                                        WeightMix mix = WeightMix::kUniform) {
  const std::string config_path = (dir / "config.json").string();
  const nlohmann::json c = kappa::parse_json(kappa::read_regular_file(config_path), config_path);
  const auto fail = [&](const std::string& key, const std::string& what) {
    throw FormatError("kappa: " + config_path + ": " + key + ": " + what);
  };
  const auto number = [&](const char* key) -> const nlohmann::json& {
    const auto it = c.find(key);
    if (it == c.end() || !it->is_number()) fail(key, "missing or not a number");
    return *it;
  };
  const std::string model_type = c.value("model_type", std::string());
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2")
    fail("model_type",
         kappa::quoted(model_type) + " is not written to GGUF by kappa (llama, mistral, qwen2)");
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    fail("rope_scaling", "a scaled RoPE is not written to GGUF by kappa");
  const std::string arch = model_type == "qwen2" ? "qwen2" : "llama";
  const auto u32 = [](const nlohmann::json& v) { return v.get<std::uint32_t>(); };
  const std::uint32_t d = u32(number("hidden_size")), n_head = u32(number("num_attention_heads"));
  const std::uint32_t n_kv =
      c.contains("num_key_value_heads") ? u32(number("num_key_value_heads")) : n_head;
  const std::uint32_t head_dim =
      c.contains("head_dim") && !c["head_dim"].is_null() ? u32(number("head_dim")) : d / n_head;
  io::GgufWriter w;
  w.set("general.architecture", arch);
  w.set("general.type", std::string("model"));
  w.set("general.name", dir.filename().string());
  w.set(arch + ".block_count", u32(number("num_hidden_layers")));
  w.set(arch + ".context_length", u32(number("max_position_embeddings")));
  w.set(arch + ".embedding_length", d);
  w.set(arch + ".feed_forward_length", u32(number("intermediate_size")));
  w.set(arch + ".attention.head_count", n_head);
  w.set(arch + ".attention.head_count_kv", n_kv);
  w.set(arch + ".rope.freq_base", c.contains("rope_theta")
                                      ? static_cast<float>(number("rope_theta").get<double>())
                                      : 10000.0f);
  w.set(arch + ".attention.layer_norm_rms_epsilon",
        static_cast<float>(number("rms_norm_eps").get<double>()));
  // As the converter: the head width when config.json names it, and for
  // llama the vocabulary size and the rotary width too.
  if (c.contains("head_dim") && !c["head_dim"].is_null()) {
    w.set(arch + ".attention.key_length", head_dim);
    w.set(arch + ".attention.value_length", head_dim);
  }
  w.set("general.file_type",
        mix == WeightMix::kQ4_K_M ? std::uint32_t{15} : detail::file_type(weights));
  if (arch == "llama") {
    w.set(arch + ".vocab_size", u32(number("vocab_size")));
    w.set(arch + ".rope.dimension_count", head_dim);
  }
  w.set("general.quantization_version", std::uint32_t{2});
  detail::write_bpe_tokenizer(w, dir);

  const io::Checkpoint ckpt(dir);
  const GgufLayout layout = arch == "llama" ? GgufLayout::kLlama : GgufLayout::kNeox;
  const bool tied = c.value("tie_word_embeddings", false);
  for (const std::string& name : ckpt.names()) {
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // recomputed, as llama.cpp skips it
    if (tied && name == "lm_head.weight") continue;
    const std::string g = GgufTensors::gguf_name(layout, name);
    if (g.empty())
      throw FormatError("kappa: " + dir.string() + ": tensor " + kappa::quoted(name) +
                        " has no llama.cpp name kappa knows");
    const std::vector<std::int64_t> shape = ckpt.info(name).shape;
    if (shape.size() == 1) {  // 1-D in F32, as llama.cpp writes vectors
      const RowVector<float> v = ckpt.row_vector<float>(name);
      std::vector<unsigned char> bytes(sizeof(float) * static_cast<std::size_t>(v.size()));
      std::memcpy(bytes.data(), v.data(), bytes.size());
      w.add_tensor(g, io::GgmlType::kF32, {v.size()}, std::move(bytes));
      continue;
    }
    RowMatrix<float> m = ckpt.matrix<float>(name);
    if (layout == GgufLayout::kLlama &&
        (g.ends_with("attn_q.weight") || g.ends_with("attn_k.weight")))
      m = detail::permute_rope_rows(m, g.ends_with("attn_q.weight") ? n_head : n_kv);
    detail::add_matrix(
        w, g, m, detail::matrix_type(weights, mix, g, m.cols(), u32(number("num_hidden_layers"))));
  }
  return w;
}

/// Writes the GGUF file of `dir` to `out` (see from_hf_directory).
inline void write_hf_directory(const std::filesystem::path& dir, const std::filesystem::path& out,
                               io::GgmlType weights, WeightMix mix = WeightMix::kUniform) {
  from_hf_directory(dir, weights, mix).write(out.string());
}

}  // namespace kappa::gguf
