// Tests for kappa/runtime.hpp (runtime::Model, runtime::Tokenizer): the
// type-erased model must give what the Hugging Face references give
// (tests/data/models/*/reference, float64 goldens of tests/reference/
// make_models.py and make_inspection_golden.py), load GGUF files as the
// directories they were converted from, and report bad input as the typed API
// does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/io/npy.hpp"
#include "kappa/runtime.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

using runtime::LoadOptions;
using runtime::Model;

using testing::model_dir;
using testing::read_ids;
using testing::read_ref;
using testing::scaled_error;

// The float tolerance against float64 references (the Transformer issue's).
constexpr double kTol = 1e-4;

// Every architecture the runtime's variant holds, from its directory.
const std::vector<std::string> kModels = {
    "gpt2",  "llama",  "mistral",     "deepseek_v2", "deepseek_v2-moe",
    "qwen3", "gemma2", "gemma3_text", "mixtral",     "phi3"};

TEST(Runtime, LogitsAndGreedyIdsMatchHuggingFaceForEveryArchitecture) {
  for (const std::string& name : kModels) {
    SCOPED_TRACE(name);
    const Model lm = Model::load(model_dir(name));
    const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
    const RowMatrix<float> logits = lm.forward(ids);
    EXPECT_LE(scaled_error(logits, read_ref(name, "logits")), kTol);
    // kLast: the last row of the same pass.
    const RowMatrix<float> last = lm.forward(ids, LogitsFor::kLast);
    ASSERT_EQ(last.rows(), 1);
    EXPECT_LE((last.row(0) - logits.row(logits.rows() - 1)).cwiseAbs().maxCoeff(),
              1e-4F * std::max(1.0F, logits.cwiseAbs().maxCoeff()));
    EXPECT_EQ(lm.vocab_size(), logits.cols());
    // Greedy decoding through the cache (no EOS: exactly the reference's length).
    const std::vector<TokenId> expected =
        read_ids(model_dir(name) / "reference" / "greedy_ids.npy");
    GenerateOptions o;
    o.max_new_tokens = static_cast<Index>(expected.size());
    o.eos_ids = std::vector<TokenId>{};
    EXPECT_EQ(lm.generate_ids(ids, o).ids, expected);
  }
}

TEST(Runtime, InspectionMatchesHuggingFaceOutputs) {
  const Model lm = Model::load(model_dir("gpt2"));
  EXPECT_STREQ(lm.architecture(), "Gpt2");
  EXPECT_EQ(lm.model_type(), "gpt2");
  const std::vector<TokenId> ids = read_ids(model_dir("gpt2") / "reference" / "input_ids.npy");
  const Inspection<float> got =
      lm.inspect(ids, {.hidden_states = true, .attentions = true, .layers = {}});
  const Index n = static_cast<Index>(ids.size()), n_l = lm.num_layers();
  const RowMatrix<double> hs = read_ref("gpt2", "hidden_states");  // ((L + 1) N, d)
  ASSERT_EQ(got.hidden_states.size(), static_cast<std::size_t>(n_l + 1));
  for (Index l = 0; l <= n_l; ++l)
    EXPECT_LE(scaled_error(got.hidden_states[static_cast<std::size_t>(l)], hs.middleRows(l * n, n)),
              kTol)
        << "hidden state " << l;
  const RowMatrix<double> at = read_ref("gpt2", "attentions");  // (L H N, N)
  ASSERT_EQ(got.attentions.size(), static_cast<std::size_t>(n_l));
  const Index heads = static_cast<Index>(got.attentions[0].size());
  ASSERT_EQ(at.rows(), n_l * heads * n);
  for (Index l = 0; l < n_l; ++l)
    for (Index h = 0; h < heads; ++h)
      EXPECT_LE(scaled_error(got.attentions[static_cast<std::size_t>(l)][h],
                             at.middleRows((l * heads + h) * n, n)),
                kTol);
  // A hook sees every layer's output, in order.
  std::vector<Index> seen;
  (void)lm.inspect(ids, {}, [&](Index layer, MatrixRef<float> x) {
    EXPECT_EQ(x.rows(), n);
    seen.push_back(layer);
  });
  std::vector<Index> all(static_cast<std::size_t>(n_l));
  for (Index l = 0; l < n_l; ++l) all[static_cast<std::size_t>(l)] = l;
  EXPECT_EQ(seen, all);
}

TEST(Runtime, TokenizerMatchesTheReferenceIds) {
  // tokens.json: the ids Hugging Face's tokenizer gives each text.
  const Model lm = Model::load(model_dir("gpt2"));
  std::ifstream in(model_dir("gpt2") / "reference" / "tokens.json");
  ASSERT_TRUE(in);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The first text and its ids, read by hand (a JSON parser would make this
  // test as heavy as the library).
  const std::vector<TokenId> hello = lm.tokenizer().encode("Hello world");
  const std::string want = "[\n      39,\n      287,\n      75,\n      78,\n      220,";
  ASSERT_NE(json.find(want), std::string::npos);
  ASSERT_GE(hello.size(), 5U);
  EXPECT_EQ(std::vector<TokenId>(hello.begin(), hello.begin() + 5),
            (std::vector<TokenId>{39, 287, 75, 78, 220}));
  EXPECT_EQ(lm.tokenizer().decode(hello), "Hello world");
  EXPECT_EQ(lm.tokenizer().vocab_size(), static_cast<std::size_t>(lm.vocab_size()));
  EXPECT_THROW((void)lm.tokenizer().token(static_cast<TokenId>(lm.vocab_size())), RangeError);
}

TEST(Runtime, GenerateWithTextStreamsWhatItReturns) {
  const Model lm = Model::load(model_dir("gpt2-trained"));
  GenerateOptions o = lm.default_options();
  o.max_new_tokens = 12;
  std::string streamed;
  const Generation g = lm.generate("And God said", o, [&](std::string_view piece) {
    streamed += piece;
    return true;
  });
  EXPECT_EQ(streamed, g.text);
  EXPECT_FALSE(g.text.empty());
  // The same from the ids, and the ids' text is the text.
  const std::vector<TokenId> prompt = lm.tokenizer().encode("And God said");
  EXPECT_EQ(lm.generate(prompt, o).ids, g.ids);
  EXPECT_EQ(lm.tokenizer().decode(g.ids), g.text);
  // Log-probabilities: one per token, each <= 0, the top one first.
  o.logprobs = true;
  o.top_logprobs = 3;
  const Generation lp = lm.generate(prompt, o);
  ASSERT_EQ(lp.logprobs.size(), lp.ids.size());
  for (const TokenLogprob& t : lp.logprobs) {
    EXPECT_LE(t.logprob, 0.0);
    ASSERT_EQ(t.top.size(), 3U);
    EXPECT_EQ(t.top[0].first, t.id);  // greedy: the chosen token is the most probable
  }
  // Beam search with one beam is greedy decoding.
  const std::vector<Generation> beams =
      lm.beam_search(prompt, lm.default_options(), {.num_beams = 1});
  ASSERT_EQ(beams.size(), 1U);
  GenerateOptions plain = lm.default_options();
  EXPECT_EQ(beams[0].ids, lm.generate(prompt, plain).ids);
  // A stored-format cache generates and reports its size.
  o.logprobs = false;
  o.top_logprobs = 0;
  o.cache_format = cache::Format::kBF16;
  EXPECT_EQ(lm.generate(prompt, o).ids.size(), g.ids.size());
  EXPECT_EQ(lm.cache_bytes_per_token(cache::Format::kBF16) * 2,
            lm.cache_bytes_per_token(cache::Format::kNative));
}

TEST(Runtime, GgufFileGivesTheLogitsOfItsDirectory) {
  // llama-f32.gguf: tests/data/models/llama converted by llama.cpp's own
  // converter (tests/data/models/llama-gguf/README.md).
  const Model dir = Model::load(model_dir("llama"));
  const Model gguf = Model::load(model_dir("llama-gguf") / "llama-f32.gguf");
  EXPECT_EQ(gguf.model_type(), "llama");
  const std::vector<TokenId> ids = read_ids(model_dir("llama") / "reference" / "input_ids.npy");
  EXPECT_LE(scaled_error(gguf.forward(ids), read_ref("llama", "logits")), kTol);
  EXPECT_EQ(gguf.tokenizer().encode("hello world"), dir.tokenizer().encode("hello world"));
  // A Q8_0 file holds its blocks: fewer bytes, logits within its error.
  const Model q8 = Model::load(model_dir("llama-gguf") / "llama-q8_0.gguf");
  EXPECT_LT(q8.weight_bytes(), gguf.weight_bytes());
  EXPECT_LE(scaled_error(q8.forward(ids), read_ref("llama", "logits")), 0.05);
  LoadOptions file;
  file.weights_file = "model.safetensors";  // a directory's option
  EXPECT_THROW((void)Model::load(model_dir("llama-gguf") / "llama-f32.gguf", file),
               std::invalid_argument);
}

TEST(Runtime, Bf16WeightsHalveTheBytesWithinTheirError) {
  const Model f32 = Model::load(model_dir("llama"));
  LoadOptions half;
  half.weights = LoadOptions::Weights::kBf16;
  const Model bf16 = Model::load(model_dir("llama"), half);
  EXPECT_STREQ(f32.weights_format(), "as stored");
  EXPECT_STREQ(bf16.weights_format(), "bf16");
  EXPECT_LT(bf16.weight_bytes(), f32.weight_bytes());
  const std::vector<TokenId> ids = read_ids(model_dir("llama") / "reference" / "input_ids.npy");
  const double err = scaled_error(bf16.forward(ids), read_ref("llama", "logits"));
  EXPECT_GT(err, 0.0);  // not the float model
  EXPECT_LE(err, 0.05);
}

TEST(Runtime, ChatTemplateFromTokenizerConfig) {
  const Model gpt2 = Model::load(model_dir("gpt2"));
  EXPECT_FALSE(gpt2.has_chat_template());
  const std::vector<tokenize::ChatMessage> chat = {{"user", "hi"}};
  EXPECT_THROW((void)gpt2.apply_chat_template(chat), FormatError);
  // The tiny GPT-2 with ChatML's template (written here, rendered by hand).
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "kappa_runtime_chat_test";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(model_dir("gpt2"), dir, std::filesystem::copy_options::recursive);
  {
    std::ofstream cfg(dir / "tokenizer_config.json");
    cfg << R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content )"
           R"(}}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n)"
           R"({% endif %}"})";
  }
  const Model lm = Model::load(dir);
  EXPECT_TRUE(lm.has_chat_template());
  const std::vector<tokenize::ChatMessage> two = {{"system", "be brief"}, {"user", "hi"}};
  EXPECT_EQ(lm.apply_chat_template(two),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(lm.apply_chat_template(two, false),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  std::filesystem::remove_all(dir);
}

TEST(Runtime, BadInputIsAClearError) {
  // A missing directory names itself.
  try {
    (void)Model::load(model_dir("no-such-model"));
    ADD_FAILURE() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-model"), std::string::npos) << e.what();
  }
  const Model lm = Model::load(model_dir("gpt2"));
  const std::vector<TokenId> bad = {0, static_cast<TokenId>(lm.vocab_size())};
  try {
    (void)lm.forward(bad);
    ADD_FAILURE() << "no exception";
  } catch (const RangeError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(lm.vocab_size())), std::string::npos)
        << e.what();
  }
  // No ids: the documented empty result, (0, N_T).
  const RowMatrix<float> none = lm.forward(std::vector<TokenId>{});
  EXPECT_EQ(none.rows(), 0);
  EXPECT_EQ(none.cols(), lm.vocab_size());
  GenerateOptions o;
  o.sampling.temperature = 0.5;  // with greedy decoding: an error, not ignored
  EXPECT_THROW((void)lm.generate("hi", o), std::invalid_argument);
  EXPECT_GE(runtime::num_threads(), 1);
}

}  // namespace
}  // namespace kappa
