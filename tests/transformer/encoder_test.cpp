// Tests for kappa/transformer/hf.hpp: BERT and the paper's encoder-decoder
// against their PyTorch references, and the loader's errors on bad
// directories (each names the file and the key or tensor).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/transformer/hf.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

namespace fs = std::filesystem;
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

/// A copy of a reference model directory under the build tree, with
/// config.json edited by `edit` (and tensors removed by the caller if asked).
fs::path edited_copy(const std::string& model, const std::string& tag,
                     const std::function<void(nlohmann::json&)>& edit) {
  const fs::path out =
      fs::temp_directory_path() / ("kappa_hf_test_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(out);
  fs::copy(model_dir(model), out, fs::copy_options::recursive);
  nlohmann::json j;
  {
    std::ifstream in(out / "config.json");
    in >> j;
  }
  edit(j);
  std::ofstream(out / "config.json") << j.dump(2);
  return out;
}

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

TEST(HfLoaderErrors, MixtureOfExpertsIsRejectedNamingTheKey) {
  const fs::path d = edited_copy("deepseek_v2", "moe", [](nlohmann::json& j) {
    j["n_routed_experts"] = 64;
    j["first_k_dense_replace"] = 1;
  });
  expect_error<FormatError>(d, {"config.json", "n_routed_experts"});
  fs::remove_all(d);
}

TEST(HfLoaderErrors, UnknownRopeScalingIsNamed) {
  const fs::path d = edited_copy("llama", "rope", [](nlohmann::json& j) {
    j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  });
  expect_error<FormatError>(d, {"rope_scaling", "longrope"});
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

}  // namespace
}  // namespace kappa
