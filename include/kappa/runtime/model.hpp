// kappa/runtime/model.hpp - one compiled file of the runtime: the
// definitions of runtime::Tokenizer and runtime::Model (kappa/runtime.hpp).
// Compile it in exactly one translation unit (kappa/runtime/all.hpp
// includes it).
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kappa/core/allocator.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/io/gguf.hpp"
#include "kappa/runtime.hpp"
#include "kappa/runtime/backend.hpp"

namespace kappa::runtime {

int set_num_threads(int n) {
  return kappa::set_num_threads(n);
}
int num_threads() {
  return kappa::num_threads();
}
bool has_openmp() {
  return kappa::has_openmp();
}

// ---- Tokenizer ----------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<detail::TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_directory(const std::filesystem::path& dir) {
  auto impl =
      std::make_unique<detail::TokenizerImpl>(tokenize::HfTokenizer::from_directory(dir.string()));
  impl->source = dir;
  return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, tokenize::AddSpecial add) const {
  return impl_->encode(text, add);
}
std::string Tokenizer::decode(std::span<const TokenId> ids, tokenize::SkipSpecial skip) const {
  return impl_->decode(ids, skip);
}
std::string Tokenizer::token(TokenId id) const {
  return impl_->token(id);
}
std::optional<TokenId> Tokenizer::find(std::string_view token) const {
  return impl_->find(token);
}
std::size_t Tokenizer::vocab_size() const noexcept {
  return impl_->vocab_size();
}
std::optional<TokenId> Tokenizer::bos_id() const noexcept {
  return impl_->bos_id();
}
std::optional<TokenId> Tokenizer::eos_id() const noexcept {
  return impl_->eos_id();
}
bool Tokenizer::is_special(TokenId id) const noexcept {
  return impl_->is_special(id);
}

// ---- Model --------------------------------------------------------------------------

Model::Model(std::unique_ptr<detail::ModelBackend> model, Tokenizer tok, GenerateOptions options)
    : model_(std::move(model)), tok_(std::move(tok)), options_(std::move(options)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::filesystem::path& path, const LoadOptions& options) {
  if (options.retain_freed_memory) (void)kappa::retain_freed_memory();
  detail::Loaded l = options.weights == LoadOptions::Weights::kBf16
                         ? detail::load_bf16(path, options)
                         : detail::load_as_stored(path, options);
  return Model(std::move(l.model), Tokenizer(std::move(l.tokenizer)), std::move(l.options));
}

const std::string& Model::model_type() const noexcept {
  return model_->model_type();
}
const char* Model::architecture() const {
  return model_->architecture();
}
Index Model::vocab_size() const {
  return model_->vocab_size();
}
Index Model::num_layers() const {
  return model_->num_layers();
}
Index Model::context_length() const {
  return model_->context_length();
}
std::size_t Model::weight_bytes() const {
  return model_->weight_bytes();
}
const char* Model::weights_format() const noexcept {
  return model_->weights_format();
}
std::size_t Model::cache_bytes_per_token(cache::Format format) const {
  return model_->cache_bytes_per_token(format);
}
const GenerateOptions& Model::default_options() const noexcept {
  return options_;
}

namespace {
std::filesystem::path tokenizer_config(const detail::TokenizerImpl& t) {
  return t.source / "tokenizer_config.json";
}
}  // namespace

bool Model::has_chat_template() const noexcept {
  const detail::TokenizerImpl& t = tok_.impl();
  try {
    if (t.gguf) return io::GgufFile(t.source).has("tokenizer.chat_template");
    const nlohmann::json config = read_json_file(tokenizer_config(t).string());
    const auto it = config.find("chat_template");
    return it != config.end() && !it->is_null();
  } catch (const std::exception&) {
    return false;  // no file, or one apply_chat_template will report
  }
}

std::string Model::apply_chat_template(std::span<const tokenize::ChatMessage> messages,
                                       bool add_generation_prompt) const {
  using tokenize::ChatTemplate;
  const detail::TokenizerImpl& t = tok_.impl();
  tokenize::ChatOptions o;
  o.add_generation_prompt = add_generation_prompt;
  std::optional<ChatTemplate> tpl;
  if (t.gguf) {
    const io::GgufFile file(t.source);
    if (!file.has("tokenizer.chat_template"))
      throw FormatError("kappa: " + t.source.string() +
                        ": the file has no tokenizer.chat_template");
    tpl = ChatTemplate::parse(file.get<std::string>("tokenizer.chat_template"));
    if (const auto bos = t.bos_id()) o.bos_token = t.token(*bos);
    if (const auto eos = t.eos_id()) o.eos_token = t.token(*eos);
  } else {
    // bos_token / eos_token: the defaults tokenizer_config.json gives.
    tpl = ChatTemplate::from_tokenizer_config(tokenizer_config(t).string());
  }
  return tpl->render(std::vector<tokenize::ChatMessage>(messages.begin(), messages.end()), o);
}

RowMatrix<float> Model::forward(std::span<const TokenId> ids, LogitsFor rows) const {
  return model_->forward(ids, rows);
}

Inspection<float> Model::inspect(std::span<const TokenId> ids, const InspectOptions& options,
                                 const LayerHook<float>& hook) const {
  return model_->inspect(ids, options, hook);
}

Generation Model::generate(std::string_view prompt, const GenerateOptions& options,
                           const TextCallback& on_text) const {
  const std::vector<TokenId> ids = tok_.impl().encode(prompt);
  return model_->generate(ids, tok_.impl(), options, on_text);
}

Generation Model::generate(std::span<const TokenId> prompt, const GenerateOptions& options,
                           const TextCallback& on_text) const {
  return model_->generate(prompt, tok_.impl(), options, on_text);
}

Generation Model::generate_ids(std::span<const TokenId> prompt, const GenerateOptions& options,
                               const TokenCallback& on_token) const {
  return model_->generate_ids(prompt, options, on_token);
}

std::vector<Generation> Model::beam_search(std::span<const TokenId> prompt,
                                           const GenerateOptions& options,
                                           const BeamSearchOptions& beams) const {
  return model_->beam_search(prompt, tok_.impl(), options, beams);
}

}  // namespace kappa::runtime
