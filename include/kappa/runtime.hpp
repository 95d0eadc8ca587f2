// kappa/runtime.hpp - a loaded language model and its tokenizer behind a
// light header, with the model code compiled once into a library.
//
// The typed API (hf::load<float>, CausalLM, generate<Model, Tokenizer>)
// instantiates every architecture kappa supports in the file that calls it:
// about a minute of g++ per such file. This header declares the same
// operations on one type-erased model; their code is compiled once, in
// the library kappa::runtime (CMake: target_link_libraries(app PRIVATE
// kappa::runtime)), so a program that loads and runs a model compiles in a
// few seconds. Without CMake, compile kappa/runtime/all.hpp in one
// translation unit of your own and link it (see that file).
//
//   // a file that includes kappa/runtime.hpp (and links kappa::runtime):
//   auto lm = kappa::runtime::Model::load("gpt2");      // a directory or a .gguf
//   kappa::GenerateOptions opt = lm.default_options();   // EOS ids of the model
//   opt.max_new_tokens = 32;
//   kappa::Generation g = lm.generate("Once upon a time", opt,
//       [](std::string_view piece) { std::cout << piece << std::flush; return true; });
//
// Models are float (kappa's F32 arithmetic). Weights stay in their stored
// format (LoadOptions::Weights::kAsStored: a GGUF file's Q8_0 / Q4_K blocks
// as blocks, a directory's F32/BF16 weights as F32) or are held as BF16
// (kBf16). Threads: runtime::set_num_threads below.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kappa/cache/formats.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/chat_message.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/transformer/inspection.hpp"
#include "kappa/transformer/sampling.hpp"

namespace kappa::runtime {

/// Threads of the runtime's products (kappa::set_num_threads as compiled
/// into the library: OpenMP when it was built with KAPPA_USE_OPENMP).
/// set_num_threads returns the count now in effect (1 without OpenMP).
int set_num_threads(int n);
[[nodiscard]] int num_threads();
[[nodiscard]] bool has_openmp();

namespace detail {
class TokenizerImpl;
class ModelBackend;
}  // namespace detail

/// A model's tokenizer (tokenizer.json and its relatives, or a GGUF file's
/// tokenizer.ggml.* keys): the operations of tokenize::HfTokenizer.
class Tokenizer {
 public:
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// The tokenizer of a Hugging Face directory. \throws FormatError.
  static Tokenizer from_directory(const std::filesystem::path& dir);

  /// The ids of `text` (with the BOS/EOS the tokenizer adds unless kNo).
  [[nodiscard]] std::vector<TokenId> encode(
      std::string_view text, tokenize::AddSpecial add = tokenize::AddSpecial::kYes) const;
  /// The text of `ids`. \throws RangeError naming an id outside the vocabulary.
  [[nodiscard]] std::string decode(std::span<const TokenId> ids,
                                   tokenize::SkipSpecial skip = tokenize::SkipSpecial::kNo) const;
  /// One token's bytes (its piece decoded). \throws RangeError.
  [[nodiscard]] std::string token(TokenId id) const;
  /// The id of a token's text, if it is in the vocabulary.
  [[nodiscard]] std::optional<TokenId> find(std::string_view token) const;
  [[nodiscard]] std::size_t vocab_size() const noexcept;
  [[nodiscard]] std::optional<TokenId> bos_id() const noexcept;
  [[nodiscard]] std::optional<TokenId> eos_id() const noexcept;
  [[nodiscard]] bool is_special(TokenId id) const noexcept;

  /// The tokenizer's own class (for the typed API).
  [[nodiscard]] const detail::TokenizerImpl& impl() const noexcept { return *impl_; }

 private:
  friend class Model;
  explicit Tokenizer(std::unique_ptr<detail::TokenizerImpl> impl);
  std::unique_ptr<detail::TokenizerImpl> impl_;
};

/// How Model::load reads a model.
struct LoadOptions {
  /// How the weight matrices are held.
  enum class Weights {
    kAsStored,  ///< as the file stores them: GGUF blocks stay blocks (views
                ///< into the mapping), F16 a view, F32 and BF16 as F32
    kBf16,      ///< every projection and the head in BF16 (half of F32)
  };
  Weights weights = Weights::kAsStored;
  /// In a directory with several weight files: the one to read (a file
  /// name in the directory); empty: model.safetensors or the index.
  std::string weights_file;
  /// Where a GGUF file's bytes live (the block weights are views of them).
  enum class FileMemory {
    kHugePages,  ///< read whole into memory advised for 2 MB pages: decode of
                 ///< block weights up to 1.3x faster (fewer TLB misses)
    kMapped,     ///< mapped: pages shared with the page cache, read on touch
  };
  FileMemory file_memory = FileMemory::kHugePages;
  /// A GGUF file's Q4_0 and Q4_K weights held with their rows interleaved
  /// by eights (io::GgufFile's interleave_q4, as llama.cpp repacks them for
  /// its CPU kernels). Q4_0: generation 1.22-1.38x faster with AVX2 alone,
  /// 1.01-1.17x with AMD's AVX-512 (benchmarks/README.md, "Q4_0 rows
  /// interleaved by eights"); Q4_K: see "Q4_K rows interleaved by eights"
  /// there (X in Q8_K for those products). Prompt processing as fast as the
  /// rows'. The rows are rearranged where the file's bytes are (no copy: the
  /// same peak memory); the logits differ from the rows' by rounding
  /// (another summation order, and for Q4_K X's quantization). false keeps
  /// the file's rows.
  bool interleave_q4 = true;
  /// Has the C library's allocator keep the memory each layer of a forward
  /// pass frees for the next (kappa::retain_freed_memory(), core/
  /// allocator.hpp; glibc only): without it a prompt's pass faults in fresh
  /// pages layer after layer, which halved prefill on a 246 M LLaMA. A
  /// process-wide setting, made when the model is loaded; false leaves the
  /// allocator as it is.
  bool retain_freed_memory = true;
};

/// A causal language model of any architecture kappa loads (GPT-2, LLaMA,
/// Mistral, Qwen2/3, Gemma 2/3, Phi-3, DeepSeek-V2, the mixtures of
/// experts), with its tokenizer.
class Model {
 public:
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  /// A Hugging Face directory (config.json, safetensors, tokenizer files,
  /// generation_config.json) or a llama.cpp .gguf file.
  /// \throws FormatError naming the file and what is wrong in it;
  ///         std::invalid_argument for an architecture kappa does not load.
  static Model load(const std::filesystem::path& path, const LoadOptions& options = {});

  // ---- What it is ----------------------------------------------------------------------
  /// config.json's model_type, or the GGUF file's general.architecture.
  [[nodiscard]] const std::string& model_type() const noexcept;
  /// The kappa architecture it was loaded as: "Gpt2", "Llama", "MistralSliding",
  /// "DeepSeekV2", "LlamaMoe", "DeepSeekMoe", "Qwen3", "Gemma2" or "Gemma3".
  [[nodiscard]] const char* architecture() const;
  [[nodiscard]] Index vocab_size() const;
  [[nodiscard]] Index num_layers() const;
  /// Largest sequence length (0: no limit the model knows of).
  [[nodiscard]] Index context_length() const;
  /// The bytes the weights take in memory (views into a file included).
  [[nodiscard]] std::size_t weight_bytes() const;
  /// LoadOptions::Weights as a word: "as stored" or "bf16".
  [[nodiscard]] const char* weights_format() const noexcept;
  /// The bytes one token adds to a cache of this format (every layer).
  [[nodiscard]] std::size_t cache_bytes_per_token(
      cache::Format format = cache::Format::kNative) const;
  /// The options the model's files ask for (generation_config.json's EOS
  /// ids, or the GGUF file's EOS); the rest are GenerateOptions' defaults.
  [[nodiscard]] const GenerateOptions& default_options() const noexcept;
  [[nodiscard]] const Tokenizer& tokenizer() const noexcept { return tok_; }

  // ---- Chat ----------------------------------------------------------------------------
  /// Whether the model ships a chat template (tokenizer_config.json's
  /// chat_template, or the GGUF file's tokenizer.chat_template).
  [[nodiscard]] bool has_chat_template() const noexcept;
  /// `messages` rendered with the model's chat template, ending with the
  /// opening of the assistant's turn when add_generation_prompt; encode the
  /// result with AddSpecial::kNo (the template writes the special tokens).
  /// \throws FormatError when there is no template; tokenize::ChatTemplateError.
  [[nodiscard]] std::string apply_chat_template(std::span<const tokenize::ChatMessage> messages,
                                                bool add_generation_prompt = true) const;

  // ---- Forward passes ------------------------------------------------------------------
  /// Logits (N, N_T) of token ids (kLast: the last row only).
  /// No ids give (0, N_T).
  /// \throws RangeError for an id outside the vocabulary or a sequence
  ///         longer than the context.
  [[nodiscard]] RowMatrix<float> forward(std::span<const TokenId> ids,
                                         LogitsFor rows = LogitsFor::kAll) const;
  /// forward() recording the hidden states and attention weights asked for,
  /// with an optional per-layer hook (see inspection.hpp).
  [[nodiscard]] Inspection<float> inspect(std::span<const TokenId> ids,
                                          const InspectOptions& options,
                                          const LayerHook<float>& hook = {}) const;

  // ---- Generation ----------------------------------------------------------------------
  /// A continuation of `prompt` (encoded with the tokenizer's BOS/EOS rule);
  /// `on_text` receives each new piece of text as soon as it is final.
  [[nodiscard]] Generation generate(std::string_view prompt, const GenerateOptions& options,
                                    const TextCallback& on_text = {}) const;
  /// The same from token ids, with text.
  [[nodiscard]] Generation generate(std::span<const TokenId> prompt, const GenerateOptions& options,
                                    const TextCallback& on_text = {}) const;
  /// Token ids only (no text; stop strings must be empty): what benchmarks
  /// time. Without options.eos_ids nothing stops it but max_new_tokens and
  /// the context.
  [[nodiscard]] Generation generate_ids(std::span<const TokenId> prompt,
                                        const GenerateOptions& options,
                                        const TokenCallback& on_token = {}) const;
  /// Beam search (Hugging Face's num_beams): the num_return_sequences best
  /// hypotheses, best first, with text.
  [[nodiscard]] std::vector<Generation> beam_search(std::span<const TokenId> prompt,
                                                    const GenerateOptions& options,
                                                    const BeamSearchOptions& beams) const;

  /// The typed model behind this one (for the typed API).
  [[nodiscard]] const detail::ModelBackend& backend() const noexcept { return *model_; }

 private:
  Model(std::unique_ptr<detail::ModelBackend> model, Tokenizer tok, GenerateOptions options);
  std::unique_ptr<detail::ModelBackend> model_;
  Tokenizer tok_;
  GenerateOptions options_;
};

}  // namespace kappa::runtime
