// Tests for kappa/transformer/hf.hpp: BERT and the paper's encoder-decoder
// against their PyTorch references, and the loader's errors on bad
// directories (each names the file and the key or tensor).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/transformer/generate.hpp"
#include "kappa/transformer/hf.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

namespace fs = std::filesystem;
using testing::edited_copy;
using testing::kModelTol;
using testing::model_dir;
using testing::read_ids;
using testing::read_ref;
using testing::scaled_error;

template <class T>
class EncoderTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EncoderTest, Scalars);

TYPED_TEST(EncoderTest, BertMatchesTheReference) {
  using T = TypeParam;
  const Bert<T> bert = hf::load_bert<T>(model_dir("bert"));
  const std::vector<TokenId> ids = read_ids(model_dir("bert") / "reference" / "input_ids.npy");
  const std::vector<TokenId> types =
      read_ids(model_dir("bert") / "reference" / "token_type_ids.npy");
  EXPECT_LE(scaled_error(bert.hidden(ids, types), read_ref("bert", "hidden")), kModelTol<T>);
  EXPECT_LE(scaled_error(bert.mlm_logits(ids, types), read_ref("bert", "logits")), kModelTol<T>);
}

TYPED_TEST(EncoderTest, PaperTransformerMatchesTorchTransformer) {
  using T = TypeParam;
  const PaperTransformer<T> m = hf::load_paper_transformer<T>(model_dir("transformer"));
  const std::vector<TokenId> src = read_ids(model_dir("transformer") / "reference" / "src_ids.npy");
  const std::vector<TokenId> tgt = read_ids(model_dir("transformer") / "reference" / "tgt_ids.npy");
  const RowMatrix<T> memory = m.encode(src);
  EXPECT_LE(scaled_error(memory, read_ref("transformer", "memory")), kModelTol<T>);
  const RowMatrix<T> logits = m.decode(memory, tgt);
  EXPECT_LE(scaled_error(logits, read_ref("transformer", "logits")), kModelTol<T>);
  // Cached decoding over the same memory gives the same rows.
  auto cache = m.make_cache();
  const std::span<const TokenId> all(tgt);
  RowMatrix<T> rows(logits.rows(), logits.cols());
  rows.topRows(3) = m.decode_cached(memory, all.first(3), cache);
  for (std::size_t i = 3; i < tgt.size(); ++i)
    rows.row(static_cast<Index>(i)) = m.decode_cached(memory, all.subspan(i, 1), cache);
  EXPECT_LE(scaled_error(rows, logits.template cast<double>()),
            (std::is_same_v<T, double> ? 1e-12 : 2e-5));
}

// ---- Bad directories ----------------------------------------------------------

/// Expects load_causal_lm to throw E with every one of `parts` in its message.
template <class E>
void expect_error(const fs::path& dir, const std::vector<std::string>& parts) {
  try {
    (void)hf::load_causal_lm<float>(dir);
    ADD_FAILURE() << "expected an error for " << dir;
  } catch (const E& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\nmissing: " << p;
  }
}

TEST(HfLoaderErrors, UnsupportedModelTypeIsNamed) {
  const fs::path d =
      edited_copy("llama", "type", [](nlohmann::json& j) { j["model_type"] = "mamba"; });
  expect_error<FormatError>(d, {"config.json", "model_type", "mamba"});
  fs::remove_all(d);
}

// The settings of the newer families that kappa does not run name their key.
TEST(HfLoaderErrors, UnsupportedFamilySettingsNameTheKey) {
  const fs::path a = edited_copy("gemma3_text", "g3cap",
                                 [](nlohmann::json& j) { j["attn_logit_softcapping"] = 50.0; });
  expect_error<FormatError>(a, {"config.json", "attn_logit_softcapping"});
  const fs::path b = edited_copy("gemma2", "g2types", [](nlohmann::json& j) {
    j["layer_types"] = {"sliding_attention", "chunked_attention", "sliding_attention",
                        "full_attention"};
  });
  expect_error<FormatError>(b, {"config.json", "layer_types", "chunked_attention"});
  const fs::path c = edited_copy("phi3-longrope", "factors", [](nlohmann::json& j) {
    j["rope_scaling"]["long_factor"] = {1.0, 2.0};
    j["rope_scaling"]["short_factor"] = {1.0, 2.0};
  });
  expect_error<FormatError>(c, {"config.json", "rope_scaling", "rescale factors"});
  const fs::path e =
      edited_copy("qwen3", "window", [](nlohmann::json& j) { j["use_sliding_window"] = true; });
  expect_error<FormatError>(e, {"config.json", "use_sliding_window"});
  const fs::path f =
      edited_copy("mixtral", "window", [](nlohmann::json& j) { j["sliding_window"] = 4; });
  expect_error<FormatError>(f, {"config.json", "sliding_window"});
  // DeepSeek-V3 as the hub ships it: FP8 weights with block scales.
  const fs::path g = edited_copy("deepseek_v3", "fp8", [](nlohmann::json& j) {
    j["quantization_config"] = {
        {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}};
  });
  expect_error<FormatError>(g, {"config.json", "quantization_config", "fp8"});
  for (const fs::path& p : {a, b, c, e, f, g}) fs::remove_all(p);
}

// Expert layers the weights do not have name the missing tensor; router
// settings kappa does not know name their key.
TEST(HfLoaderErrors, MixtureOfExpertsErrorsNameTheKeyOrTensor) {
  const fs::path d = edited_copy("deepseek_v2", "moe", [](nlohmann::json& j) {
    j["n_routed_experts"] = 64;
    j["num_experts_per_tok"] = 2;
    j["moe_intermediate_size"] = 16;
    j["first_k_dense_replace"] = 1;
  });
  expect_error<FormatError>(d, {"model.safetensors", "layers.1.mlp.gate.weight"});
  const fs::path e = edited_copy("deepseek_v2", "moe_method", [](nlohmann::json& j) {
    j["n_routed_experts"] = 8;
    j["num_experts_per_tok"] = 2;
    j["moe_intermediate_size"] = 16;
    j["topk_method"] = "sinkhorn";
  });
  expect_error<FormatError>(e, {"config.json", "topk_method", "sinkhorn"});
  const fs::path f = edited_copy("deepseek_v2", "moe_k", [](nlohmann::json& j) {
    j["n_routed_experts"] = 8;
    j["num_experts_per_tok"] = 9;
    j["moe_intermediate_size"] = 16;
  });
  expect_error<FormatError>(f, {"config.json", "n_routed_experts", "top_k"});
  const fs::path g = edited_copy("deepseek_v2", "moe_groups", [](nlohmann::json& j) {
    j["n_routed_experts"] = 8;
    j["num_experts_per_tok"] = 2;
    j["moe_intermediate_size"] = 16;
    j["topk_method"] = "group_limited_greedy";
    j["n_group"] = 3;
  });
  expect_error<FormatError>(g, {"config.json", "n_group = 3"});
  for (const fs::path& p : {d, e, f, g}) fs::remove_all(p);
}

TEST(HfLoaderErrors, UnknownRopeScalingIsNamed) {
  const fs::path d = edited_copy("llama", "rope", [](nlohmann::json& j) {
    j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 2.0}};
  });
  expect_error<FormatError>(d, {"rope_scaling", "ntk-by-parts"});
  fs::remove_all(d);
}

TEST(HfLoaderErrors, BadConfigValuesNameTheKey) {
  const fs::path a = edited_copy("gpt2", "neg", [](nlohmann::json& j) { j["n_layer"] = -1; });
  expect_error<FormatError>(a, {"n_layer", "-1"});
  const fs::path b =
      edited_copy("llama", "str", [](nlohmann::json& j) { j["hidden_size"] = "32"; });
  expect_error<FormatError>(b, {"hidden_size", "integer"});
  const fs::path c =
      edited_copy("llama", "act", [](nlohmann::json& j) { j["hidden_act"] = "relu"; });
  expect_error<FormatError>(c, {"hidden_act", "relu"});
  for (const fs::path& p : {a, b, c}) fs::remove_all(p);
}

// A config that disagrees with the weights names the tensor and both shapes.
TEST(HfLoaderErrors, ShapeDisagreementNamesTheTensor) {
  const fs::path d =
      edited_copy("llama", "shape", [](nlohmann::json& j) { j["intermediate_size"] = 65; });
  expect_error<ShapeError>(d, {"model.safetensors", "mlp.", "_proj.weight", "64", "65"});
  fs::remove_all(d);
}

TEST(HfLoaderErrors, MissingTensorIsNamed) {
  const fs::path d = edited_copy("gpt2", "layers", [](nlohmann::json& j) { j["n_layer"] = 3; });
  expect_error<FormatError>(d, {"h.2.", "model.safetensors"});
  fs::remove_all(d);
}

TEST(HfLoaderErrors, MissingOrBrokenConfig) {
  expect_error<FormatError>(model_dir("no_such_model"), {"no_such_model"});
  const fs::path d = edited_copy("gpt2", "json", [](nlohmann::json&) {});
  std::ofstream(d / "config.json") << "{\"model_type\": \"gpt2\",";
  expect_error<FormatError>(d, {"config.json", "JSON"});
  fs::remove_all(d);
}

// ---- Hostile directories (issue 24) ----------------------------------------------

/// No raw control byte (C0, DEL, C1 as UTF-8) in a message.
void expect_printable(const std::string& msg) {
  for (std::size_t i = 0; i < msg.size(); ++i) {
    const auto c = static_cast<unsigned char>(msg[i]);
    EXPECT_FALSE(c < 0x20 || c == 0x7F) << "raw byte " << int(c) << " at " << i << ": " << msg;
    if (c == 0xC2 && i + 1 < msg.size()) {
      const auto n = static_cast<unsigned char>(msg[i + 1]);
      EXPECT_FALSE(n >= 0x80 && n <= 0x9F) << "raw C1 control at " << i << ": " << msg;
    }
  }
}

/// The message of the error E that loading `dir` throws ("" if none).
template <class E>
std::string error_of(const fs::path& dir) {
  try {
    (void)hf::load_causal_lm<float>(dir);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error for " << dir;
  return "";
}

// Item 1: 2 MB of brackets used to overflow the stack (dump, copy, recursion).
TEST(HfHostileFiles, DeeplyNestedConfigIsAFormatError) {
  const fs::path d = edited_copy("gpt2", "deep", [](nlohmann::json&) {});
  std::ofstream(d / "config.json")
      << "{\"model_type\": \"gpt2\", \"x\": " << std::string(2u << 20, '[');
  expect_error<FormatError>(d, {"config.json", "byte 155", "nested deeper than 128"});
  fs::remove_all(d);
}

// Item 2: sizes that disagree with the weights fail on the first tensor that
// shows it, before anything of that size is allocated (these allocated
// 25 GB of zeros, or looped over 2^40 layers, before).
TEST(HfHostileFiles, ConfigSizesAreCheckedAgainstTheWeightsBeforeAllocating) {
  const fs::path a =
      edited_copy("llama", "ff", [](nlohmann::json& j) { j["intermediate_size"] = 100000000; });
  expect_error<ShapeError>(a, {"mlp.gate_proj.weight", "100000000"});
  const fs::path b =
      edited_copy("llama", "wide", [](nlohmann::json& j) { j["hidden_size"] = 40000; });
  expect_error<ShapeError>(b, {"embed_tokens.weight", "40000"});
  const fs::path c = edited_copy("gpt2", "deep_layers",
                                 [](nlohmann::json& j) { j["n_layer"] = std::int64_t{1} << 40; });
  // Layer counts are bounded (kMaxLayers): per-layer tables are sized by them.
  expect_error<FormatError>(c, {"config.json", "n_layer", "1099511627776"});
  const fs::path e = edited_copy("deepseek_v2", "ffn",
                                 [](nlohmann::json& j) { j["intermediate_size"] = 100000000; });
  expect_error<ShapeError>(e, {"mlp.gate_proj.weight"});
  const fs::path f =
      edited_copy("gpt2", "inner", [](nlohmann::json& j) { j["n_inner"] = 100000000; });
  expect_error<ShapeError>(f, {"mlp.c_fc.weight"});
  // head_dim sized the RoPE table (8 GB here) before q_proj was read; the
  // fuzzer found it.
  const fs::path g = edited_copy("llama", "head_dim",
                                 [](nlohmann::json& j) { j["head_dim"] = std::int64_t{1} << 31; });
  expect_error<ShapeError>(g, {"self_attn.q_proj.weight", "8589934592"});
  for (const fs::path& p : {a, b, c, e, f, g}) fs::remove_all(p);
}

// Item 2, the encoder models: BERT and the paper's Transformer read before
// they build too.
TEST(HfHostileFiles, EncoderSizesAreCheckedBeforeAllocating) {
  const fs::path a =
      edited_copy("bert", "ff", [](nlohmann::json& j) { j["intermediate_size"] = 100000000; });
  try {
    (void)hf::load_bert<float>(a);
    ADD_FAILURE() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate.dense.weight"), std::string::npos);
  }
  const fs::path b =
      edited_copy("transformer", "ff", [](nlohmann::json& j) { j["dim_feedforward"] = 100000000; });
  try {
    (void)hf::load_paper_transformer<float>(b);
    ADD_FAILURE() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("linear1.weight"), std::string::npos);
  }
  for (const fs::path& p : {a, b}) fs::remove_all(p);
}

// Item 5: a FIFO would block forever, /dev/zero never end.
TEST(HfHostileFiles, ConfigMustBeARegularFile) {
  const fs::path d = edited_copy("gpt2", "fifo", [](nlohmann::json&) {});
  fs::remove(d / "config.json");
  ASSERT_EQ(::mkfifo((d / "config.json").c_str(), 0600), 0);
  expect_error<FormatError>(d, {"config.json", "not a regular file"});
  fs::remove(d / "config.json");
  fs::create_symlink("/dev/zero", d / "config.json");
  expect_error<FormatError>(d, {"config.json", "not a regular file"});
  // generation_config.json goes through the same reader.
  fs::remove(d / "generation_config.json");
  ASSERT_EQ(::mkfifo((d / "generation_config.json").c_str(), 0600), 0);
  try {
    (void)hf::GenerationConfig::read(d);
    ADD_FAILURE() << "expected a FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json"), std::string::npos);
  }
  fs::remove_all(d);
}

// Item 7: products of config values are checked (signed overflow was UB).
TEST(HfHostileFiles, ProductsOfConfigValuesAreChecked) {
  const fs::path d = edited_copy("deepseek_v2", "overflow", [](nlohmann::json& j) {
    j["num_attention_heads"] = std::int64_t{1} << 40;
    j["hidden_size"] = std::int64_t{1} << 40;
    j["qk_nope_head_dim"] = std::int64_t{1} << 40;
  });
  expect_error<FormatError>(d, {"config.json", "num_attention_heads x", "exceeds the limit"});
  const fs::path l = edited_copy("llama", "overflow",
                                 [](nlohmann::json& j) { j["head_dim"] = std::int64_t{1} << 40; });
  expect_error<FormatError>(l, {"config.json", "num_attention_heads x head_dim"});
  for (const fs::path& p : {d, l}) fs::remove_all(p);
}

// Item 9: control bytes of the file never reach a message raw.
TEST(HfHostileFiles, MessagesEscapeTheFilesBytes) {
  const std::string nasty = "x\x1b[31m\x7f\xc2\x85\xe2\x80\xaey";
  const fs::path a =
      edited_copy("llama", "ctl", [&](nlohmann::json& j) { j["model_type"] = nasty; });
  const std::string m1 = error_of<FormatError>(a);
  expect_printable(m1);
  EXPECT_NE(m1.find("x\\x1b[31m\\x7f\\u0085\\u202ey"), std::string::npos) << m1;
  const fs::path b =
      edited_copy("llama", "act_ctl", [&](nlohmann::json& j) { j["hidden_act"] = nasty; });
  expect_printable(error_of<FormatError>(b));
  const fs::path c =
      edited_copy("llama", "num_ctl", [&](nlohmann::json& j) { j["hidden_size"] = nasty; });
  expect_printable(error_of<FormatError>(c));
  // nlohmann's syntax error quotes the bytes it stopped at.
  const fs::path e = edited_copy("gpt2", "json_ctl", [](nlohmann::json&) {});
  std::ofstream(e / "config.json") << "{\"model_type\": \x7f\xc2\x85}";
  const std::string m2 = error_of<FormatError>(e);
  expect_printable(m2);
  EXPECT_NE(m2.find("config.json"), std::string::npos);
  for (const fs::path& p : {a, b, c, e}) fs::remove_all(p);
}

// Item 11: out-of-range values named as written, every float parameter
// range-checked with the file and key, one "kappa:" prefix.
TEST(HfHostileFiles, ConfigValuesAreRangeChecked) {
  const fs::path a = edited_copy("llama", "huge", [](nlohmann::json& j) {
    j["vocab_size"] = std::numeric_limits<std::uint64_t>::max();
  });
  const std::string m = error_of<FormatError>(a);
  EXPECT_NE(m.find("18446744073709551615"), std::string::npos) << m;
  EXPECT_EQ(m.find("is -1"), std::string::npos) << m;
  const fs::path b = edited_copy("llama", "eps", [](nlohmann::json& j) { j["rms_norm_eps"] = -1; });
  expect_error<FormatError>(b, {"config.json", "rms_norm_eps", "-1"});
  const fs::path c = edited_copy("llama", "yarn", [](nlohmann::json& j) {
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1e30}};
  });
  expect_error<FormatError>(c, {"config.json", "attention_factor", "1e+30"});
  const fs::path e = edited_copy("llama", "llama3", [](nlohmann::json& j) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 4.0},
                         {"high_freq_factor", 1.0},
                         {"original_max_position_embeddings", 64}};
  });
  const std::string m3 = error_of<FormatError>(e);
  EXPECT_NE(m3.find("rope_scaling"), std::string::npos) << m3;
  EXPECT_EQ(m3.find("kappa:", 1), std::string::npos) << "doubled prefix: " << m3;
  const fs::path f = edited_copy("deepseek_v2", "mscale", [](nlohmann::json& j) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", 40.0},
                         {"mscale", 1.0},
                         {"mscale_all_dim", -1.0},
                         {"original_max_position_embeddings", 64}};
  });
  expect_error<FormatError>(f, {"config.json", "mscale_all_dim"});
  const fs::path g =
      edited_copy("gpt2", "lneps", [](nlohmann::json& j) { j["layer_norm_epsilon"] = 0.0; });
  expect_error<FormatError>(g, {"config.json", "layer_norm_epsilon"});
  for (const fs::path& p : {a, b, c, e, f, g}) fs::remove_all(p);
}

// Item 8: an empty sequence is decided once, in the model: 0 rows out, no
// layer run, the cache unchanged (the layers reached UB on it before).
TEST(HfHostileFiles, EmptySequencesGiveEmptyResults) {
  const auto lm = hf::load_causal_lm<float>(model_dir("gpt2"));
  const std::vector<TokenId> none;
  const RowMatrix<float> l0 = lm.forward(none);
  EXPECT_EQ(l0.rows(), 0);
  EXPECT_EQ(l0.cols(), lm.vocab_size());
  auto cache = lm.make_cache();
  const std::vector<TokenId> two = {1, 2};
  (void)lm.forward_cached(two, cache);
  EXPECT_EQ(lm.forward_cached(none, cache).rows(), 0);
  EXPECT_EQ(lm.forward_cached(none, cache, LogitsFor::kLast).rows(), 0);
  EXPECT_EQ(cache.length(), 2);
  auto other = lm.make_cache();
  const RowMatrix<float> last = lm.forward_cached({none, none}, {&cache, &other}, LogitsFor::kLast);
  EXPECT_EQ(last.rows(), 2);
  EXPECT_EQ(last.cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_EQ(cache.length(), 2);
  EXPECT_EQ(other.length(), 0);
  const RowMatrix<float> batch = std::get<Gpt2<float>>(lm.model()).forward({none, none});
  EXPECT_EQ(batch.rows(), 0);

  const Bert<float> bert = hf::load_bert<float>(model_dir("bert"));
  EXPECT_EQ(bert.hidden(none).rows(), 0);
  EXPECT_EQ(bert.mlm_logits(none).rows(), 0);
  const PaperTransformer<float> tr = hf::load_paper_transformer<float>(model_dir("transformer"));
  const RowMatrix<float> memory = tr.encode(none);
  EXPECT_EQ(memory.rows(), 0);
  EXPECT_EQ(tr.decode(memory, none).rows(), 0);
  // Over an empty memory, cross-attention has no key: zero rows, finite logits.
  const RowMatrix<float> y = tr.decode(memory, two);
  EXPECT_EQ(y.rows(), 2);
  EXPECT_TRUE(y.allFinite());
}

}  // namespace
}  // namespace kappa
