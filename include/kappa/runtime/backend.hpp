// kappa/runtime/backend.hpp - what stands behind kappa/runtime.hpp: the
// typed model of one weight storage S behind a virtual interface, and the
// tokenizer with its chat template. Heavy (every architecture); included by
// the runtime's compiled files, and by a user who wants the typed objects of
// a runtime::Model:
//
//   const auto& b = dynamic_cast<const kappa::runtime::detail::ModelBackendOf<
//       kappa::AsStoredWeights>&>(model.backend());
//   const kappa::hf::CausalLM<float, kappa::AsStoredWeights>& lm = b.causal_lm();
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kappa/runtime.hpp"
#include "kappa/tokenize/chat_template.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/generate.hpp"
#include "kappa/transformer/gguf_load.hpp"
#include "kappa/transformer/hf.hpp"

namespace kappa::runtime::detail {

/// The tokenizer, and where its chat template comes from.
class TokenizerImpl : public tokenize::HfTokenizer {
 public:
  explicit TokenizerImpl(tokenize::HfTokenizer tok) : tokenize::HfTokenizer(std::move(tok)) {}
  /// The model's file or directory (the chat template is read from it when
  /// first asked for).
  std::filesystem::path source;
  bool gguf = false;
};

/// The operations of runtime::Model on the typed model.
class ModelBackend {
 public:
  ModelBackend() = default;
  ModelBackend(const ModelBackend&) = delete;
  ModelBackend& operator=(const ModelBackend&) = delete;
  virtual ~ModelBackend() = default;

  [[nodiscard]] virtual const std::string& model_type() const noexcept = 0;
  [[nodiscard]] virtual const char* architecture() const = 0;
  [[nodiscard]] virtual Index vocab_size() const = 0;
  [[nodiscard]] virtual Index num_layers() const = 0;
  [[nodiscard]] virtual Index context_length() const = 0;
  [[nodiscard]] virtual std::size_t weight_bytes() const = 0;
  [[nodiscard]] virtual const char* weights_format() const noexcept = 0;
  [[nodiscard]] virtual std::size_t cache_bytes_per_token(cache::Format format) const = 0;
  [[nodiscard]] virtual RowMatrix<float> forward(std::span<const TokenId> ids,
                                                 LogitsFor rows) const = 0;
  [[nodiscard]] virtual Inspection<float> inspect(std::span<const TokenId> ids,
                                                  const InspectOptions& options,
                                                  const LayerHook<float>& hook) const = 0;
  [[nodiscard]] virtual Generation generate(std::span<const TokenId> prompt,
                                            const tokenize::HfTokenizer& tok,
                                            const GenerateOptions& options,
                                            const TextCallback& on_text) const = 0;
  [[nodiscard]] virtual Generation generate_ids(std::span<const TokenId> prompt,
                                                const GenerateOptions& options,
                                                const TokenCallback& on_token) const = 0;
  [[nodiscard]] virtual std::vector<Generation> beam_search(
      std::span<const TokenId> prompt, const tokenize::HfTokenizer& tok,
      const GenerateOptions& options, const BeamSearchOptions& beams) const = 0;
};

/// ModelBackend over hf::CausalLM<float, S>.
template <WeightStoragePolicy S>
class ModelBackendOf final : public ModelBackend {
 public:
  explicit ModelBackendOf(hf::CausalLM<float, S> lm) : lm_(std::move(lm)) {}

  [[nodiscard]] const hf::CausalLM<float, S>& causal_lm() const noexcept { return lm_; }

  [[nodiscard]] const std::string& model_type() const noexcept override { return lm_.model_type(); }
  [[nodiscard]] const char* architecture() const override { return lm_.architecture(); }
  [[nodiscard]] Index vocab_size() const override { return lm_.vocab_size(); }
  [[nodiscard]] Index num_layers() const override { return lm_.n_layers(); }
  [[nodiscard]] Index context_length() const override { return lm_.context_length(); }
  [[nodiscard]] std::size_t weight_bytes() const override { return lm_.weight_bytes(); }
  [[nodiscard]] const char* weights_format() const noexcept override {
    return std::same_as<S, Bf16Weights> ? "bf16" : "as stored";
  }
  [[nodiscard]] std::size_t cache_bytes_per_token(cache::Format format) const override {
    return lm_.make_cache(format).bytes_per_token();
  }
  [[nodiscard]] RowMatrix<float> forward(std::span<const TokenId> ids,
                                         LogitsFor rows) const override {
    if (rows == LogitsFor::kAll) return lm_.forward(ids);
    auto cache = lm_.make_cache();
    return lm_.forward_cached(ids, cache, rows);
  }
  [[nodiscard]] Inspection<float> inspect(std::span<const TokenId> ids,
                                          const InspectOptions& options,
                                          const LayerHook<float>& hook) const override {
    return lm_.inspect(ids, options, hook);
  }
  [[nodiscard]] Generation generate(std::span<const TokenId> prompt,
                                    const tokenize::HfTokenizer& tok,
                                    const GenerateOptions& options,
                                    const TextCallback& on_text) const override {
    return kappa::generate(lm_, tok, prompt, options, on_text);
  }
  [[nodiscard]] Generation generate_ids(std::span<const TokenId> prompt,
                                        const GenerateOptions& options,
                                        const TokenCallback& on_token) const override {
    return kappa::generate_ids(lm_, prompt, options, on_token);
  }
  [[nodiscard]] std::vector<Generation> beam_search(std::span<const TokenId> prompt,
                                                    const tokenize::HfTokenizer& tok,
                                                    const GenerateOptions& options,
                                                    const BeamSearchOptions& beams) const override {
    return kappa::beam_search(lm_, tok, prompt, options, beams);
  }

 private:
  hf::CausalLM<float, S> lm_;
};

/// What a load reads: the model, its tokenizer and its generation options.
struct Loaded {
  std::unique_ptr<ModelBackend> model;
  std::unique_ptr<TokenizerImpl> tokenizer;
  GenerateOptions options;
};

/// Whether `path` names a GGUF file (rather than a directory).
inline bool is_gguf(const std::filesystem::path& path) {
  std::error_code ec;
  return path.extension() == ".gguf" && !std::filesystem::is_directory(path, ec);
}

/// A directory (config.json, the weights, the tokenizer files,
/// generation_config.json) or a GGUF file, with storage S.
template <WeightStoragePolicy S>
Loaded load_as(const std::filesystem::path& path, const LoadOptions& o) {
  Loaded out;
  if (is_gguf(path)) {
    if (!o.weights_file.empty())
      throw std::invalid_argument("kappa: runtime::Model::load: " + path.string() +
                                  " is a GGUF file; LoadOptions::weights_file (" + o.weights_file +
                                  ") names a file in a model directory");
    auto g = gguf::load<float, S>(path,
                                  o.file_memory == LoadOptions::FileMemory::kMapped
                                      ? io::Residence::kMapped
                                      : io::Residence::kHugePages,
                                  o.interleave_q4);
    if (g.eos_id) out.options.eos_ids = std::vector<TokenId>{*g.eos_id};
    out.model = std::make_unique<ModelBackendOf<S>>(std::move(g.model));
    out.tokenizer = std::make_unique<TokenizerImpl>(std::move(g.tokenizer));
    out.tokenizer->gguf = true;
  } else {
    out.model =
        std::make_unique<ModelBackendOf<S>>(hf::load_causal_lm<float, S>(path, o.weights_file));
    out.tokenizer =
        std::make_unique<TokenizerImpl>(tokenize::HfTokenizer::from_directory(path.string()));
    out.options = hf::generation_options(path);
  }
  out.tokenizer->source = path;
  return out;
}

/// load_as<AsStoredWeights> and load_as<Bf16Weights>, each compiled in its
/// own file of the runtime (as_stored.hpp, bf16.hpp) so that a build on
/// two cores compiles them at once.
Loaded load_as_stored(const std::filesystem::path& path, const LoadOptions& o);
Loaded load_bf16(const std::filesystem::path& path, const LoadOptions& o);

}  // namespace kappa::runtime::detail
