// Tests for kappa/transformer/hf.hpp and models.hpp: decoder-only language
// models loaded from Hugging Face directories match the independent PyTorch
// references of tests/reference/make_models.py (float64), in logits, cached
// decoding, batches and greedy continuations.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/transformer/hf.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

using testing::kModelTol;
using testing::model_dir;
using testing::read_ids;
using testing::read_ref;
using testing::scaled_error;

const std::vector<std::string> kCausalModels = {
    "gpt2", "gpt2-f16", "gpt2-prefixed", "llama", "llama-bf16", "llama-sharded", "llama-linear",
    "llama-dynamic", "llama3-scaled", "mistral", "qwen2", "deepseek_v2", "deepseek_v2-noqlora",
    // mixtures of experts (issue 26)
    "mixtral", "qwen2_moe", "qwen2_moe-norm", "deepseek_v2-moe", "deepseek_v2-lite", "deepseek_v3",
    // Qwen3 and Phi-3 (issue 26)
    "qwen3", "phi3", "phi3-longrope", "gemma2", "gemma3_text"};

template <class T>
class CausalLmTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CausalLmTest, Scalars);

TYPED_TEST(CausalLmTest, LogitsMatchTheReference) {
  using T = TypeParam;
  for (const std::string& name : kCausalModels) {
    SCOPED_TRACE(name);
    const hf::CausalLM<T> lm = hf::load_causal_lm<T>(model_dir(name));
    const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
    const RowMatrix<double> ref = read_ref(name, "logits");
    EXPECT_EQ(lm.vocab_size(), ref.cols());
    EXPECT_LE(scaled_error(lm.forward(ids), ref), kModelTol<T>);
  }
}

// Decoding through the cache (a prefill of 5 tokens, then one token per call,
// then a chunk) gives the rows of the full pass.
TYPED_TEST(CausalLmTest, CachedDecodingEqualsTheFullPass) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, double> ? 1e-12 : 2e-5;
  for (const std::string& name : kCausalModels) {
    SCOPED_TRACE(name);
    const hf::CausalLM<T> lm = hf::load_causal_lm<T>(model_dir(name));
    const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
    const RowMatrix<T> full = lm.forward(ids);
    typename hf::CausalLM<T>::Cache cache = lm.make_cache();
    if (name == "llama-dynamic" || name == "phi3-longrope") {
      // Dynamic NTK rescales the frequencies with the sequence length (as
      // Hugging Face does): keys cached at an earlier, shorter length keep
      // their rotation, so token-by-token decoding past the original context
      // differs from one pass by design. One prefill of the whole sequence
      // is the same computation as the full pass. LongRoPE switches from
      // the short to the long factors past the original context the same
      // way.
      const RowMatrix<T> once = lm.forward_cached(ids, cache);
      EXPECT_LE(scaled_error(once, full.template cast<double>()), tol);
      continue;
    }
    RowMatrix<T> rows(static_cast<Index>(ids.size()), full.cols());
    const std::span<const TokenId> all(ids);
    rows.topRows(5) = lm.forward_cached(all.first(5), cache);
    for (std::size_t i = 5; i < 9; ++i) {  // one token per step: the TokenId overloads
      rows.row(static_cast<Index>(i)) = lm.forward_cached(ids[i], cache);
      EXPECT_EQ(lm.embed(ids[i], static_cast<Index>(i)),
                lm.embed(all.subspan(i, 1), static_cast<Index>(i)));
    }
    rows.bottomRows(static_cast<Index>(ids.size()) - 9) = lm.forward_cached(all.subspan(9), cache);
    EXPECT_EQ(cache.length(), static_cast<Index>(ids.size()));
    EXPECT_LE(scaled_error(rows, full.template cast<double>()), tol);
    // LogitsFor::kLast gives the last row only.
    cache.reset();
    const RowMatrix<T> last = lm.forward_cached(all, cache, LogitsFor::kLast);
    ASSERT_EQ(last.rows(), 1);
    EXPECT_LE(scaled_error(last, full.bottomRows(1).template cast<double>()), tol);
  }
}

// Greedy continuation through the cache equals the reference's uncached
// greedy loop (argmax of the last row, append, rerun).
TYPED_TEST(CausalLmTest, GreedyContinuationMatchesTheReference) {
  using T = TypeParam;
  for (const std::string& name : kCausalModels) {
    SCOPED_TRACE(name);
    const hf::CausalLM<T> lm = hf::load_causal_lm<T>(model_dir(name));
    const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
    const std::vector<TokenId> expected =
        read_ids(model_dir(name) / "reference" / "greedy_ids.npy");
    typename hf::CausalLM<T>::Cache cache = lm.make_cache();
    std::vector<TokenId> got;
    RowMatrix<T> logits = lm.forward_cached(ids, cache, LogitsFor::kLast);
    for (std::size_t step = 0; step < expected.size(); ++step) {
      Index best = 0;
      logits.row(0).maxCoeff(&best);
      got.push_back(static_cast<TokenId>(best));
      const TokenId next = got.back();
      logits = lm.forward_cached(next, cache);
    }
    EXPECT_EQ(got, expected);
  }
}

// Several sequences of different lengths in one call equal each alone, both
// the full pass and cached decoding.
TYPED_TEST(CausalLmTest, BatchesEqualSequencesAlone) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, double> ? 1e-12 : 2e-5;
  for (const std::string name : {"gpt2", "llama", "mistral", "deepseek_v2"}) {
    SCOPED_TRACE(name);
    const hf::CausalLM<T> lm = hf::load_causal_lm<T>(model_dir(name));
    const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
    const std::vector<std::vector<TokenId>> batch = {
        std::vector<TokenId>(ids.begin(), ids.begin() + 7),
        std::vector<TokenId>(ids.begin() + 2, ids.end()),
        {ids[3]}};
    std::vector<typename hf::CausalLM<T>::Cache> caches;
    std::vector<typename hf::CausalLM<T>::Cache*> ptrs;
    for (std::size_t b = 0; b < batch.size(); ++b) caches.push_back(lm.make_cache());
    for (auto& c : caches) ptrs.push_back(&c);
    const RowMatrix<T> packed = lm.forward_cached(batch, ptrs);
    Index row = 0;
    for (const auto& s : batch) {
      const RowMatrix<T> alone = lm.forward(s);
      EXPECT_LE(scaled_error(packed.middleRows(row, alone.rows()), alone.template cast<double>()),
                tol);
      row += alone.rows();
    }
    // One more token each, last logits only.
    const std::vector<std::vector<TokenId>> step = {{ids[1]}, {ids[0]}, {ids[5]}};
    const RowMatrix<T> next = lm.forward_cached(step, ptrs, LogitsFor::kLast);
    for (std::size_t b = 0; b < batch.size(); ++b) {
      std::vector<TokenId> s = batch[b];
      s.push_back(step[b][0]);
      const RowMatrix<T> alone = lm.forward(s);
      EXPECT_LE(scaled_error(next.row(static_cast<Index>(b)),
                             alone.bottomRows(1).template cast<double>()),
                tol);
    }
  }
}

// F16 and BF16 checkpoints load to the F32 model's logits within the
// rounding of their weights (the references of the rounded weights are
// matched exactly above).
TEST(CausalLmStorage, HalfPrecisionFilesAreCloseToF32) {
  const std::vector<TokenId> ids = read_ids(model_dir("gpt2") / "reference" / "input_ids.npy");
  const RowMatrix<double> f32 = hf::load_causal_lm<double>(model_dir("gpt2")).forward(ids);
  const RowMatrix<double> f16 = hf::load_causal_lm<double>(model_dir("gpt2-f16")).forward(ids);
  EXPECT_LE(scaled_error(f16, f32), 5e-3);
  EXPECT_GT(scaled_error(f16, f32), 0.0);  // the weights were really rounded
  const std::vector<TokenId> lids = read_ids(model_dir("llama") / "reference" / "input_ids.npy");
  const RowMatrix<double> l32 = hf::load_causal_lm<double>(model_dir("llama")).forward(lids);
  const RowMatrix<double> lbf = hf::load_causal_lm<double>(model_dir("llama-bf16")).forward(lids);
  EXPECT_LE(scaled_error(lbf, l32), 6e-2);  // BF16 keeps 8 significant bits
  EXPECT_GT(scaled_error(lbf, l32), 0.0);
}

// Bf16Weights keeps the feed-forward and output-head weights in bfloat16:
// logits within bfloat16's rounding of the F32 model's, the same greedy
// continuation, and about half the bytes read per decoded token.
TEST(CausalLmStorage, Bf16WeightStorageIsCloseToF32) {
  for (const std::string name : {"gpt2", "llama", "deepseek_v2"}) {
    SCOPED_TRACE(name);
    const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
    const auto dense = hf::load_causal_lm<float>(model_dir(name));
    const auto bf16 = hf::load_causal_lm<float, Bf16Weights>(model_dir(name));
    const double err = scaled_error(bf16.forward(ids), read_ref(name, "logits"));
    EXPECT_LE(err, 3e-2);
    EXPECT_GT(err, 1e-5);  // the weights were really rounded
    EXPECT_LT(bf16.decode_bytes(), dense.decode_bytes());
    auto cache = bf16.make_cache();
    const RowMatrix<float> all = bf16.forward(ids);
    EXPECT_LE(scaled_error(bf16.forward_cached(ids, cache), all.cast<double>()), 2e-5);
  }
}

// One call loads the model and its tokenizer; the prompt's ids are the
// independent reference tokenizer's, and the logits those of the reference.
TEST(HfLoad, OneCallLoadsModelAndTokenizer) {
  for (const std::string name : {"gpt2", "llama", "deepseek_v2"}) {
    SCOPED_TRACE(name);
    const auto loaded = hf::load<double>(model_dir(name));
    EXPECT_EQ(static_cast<Index>(loaded.tokenizer.vocab_size()), loaded.model.vocab_size());
    std::ifstream in(model_dir(name) / "reference" / "tokens.json");
    const nlohmann::json tokens = nlohmann::json::parse(in);
    const std::vector<TokenId> ids = loaded.tokenizer.encode(tokens["texts"][0].get<std::string>());
    EXPECT_EQ(ids, tokens["ids"][0].get<std::vector<TokenId>>());
    const std::vector<TokenId> ref_ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
    EXPECT_LE(scaled_error(loaded.model.forward(ref_ids), read_ref(name, "logits")), 1e-10);
  }
}

TEST(CausalLmStorage, ShardedEqualsSingleFile) {
  const std::vector<TokenId> ids = read_ids(model_dir("llama") / "reference" / "input_ids.npy");
  const RowMatrix<double> a = hf::load_causal_lm<double>(model_dir("llama")).forward(ids);
  const RowMatrix<double> b = hf::load_causal_lm<double>(model_dir("llama-sharded")).forward(ids);
  EXPECT_EQ(a, b);
}

// The learned position table is a hard limit: a position past it is a
// RangeError naming the position, and the cache is unchanged.
TEST(CausalLmLimits, PositionsPastTheTableAreRangeErrors) {
  const hf::CausalLM<float> lm = hf::load_causal_lm<float>(model_dir("gpt2"));
  ASSERT_EQ(lm.context_length(), 32);
  std::vector<TokenId> ids(32, 5);
  auto cache = lm.make_cache();
  (void)lm.forward_cached(ids, cache, LogitsFor::kLast);
  const TokenId one = 7;
  try {
    (void)lm.forward_cached(one, cache);
    FAIL() << "expected RangeError";
  } catch (const RangeError& e) {
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(), 32);
  std::vector<TokenId> bad{1, 297};
  EXPECT_THROW((void)lm.forward(bad), RangeError);
}

}  // namespace
}  // namespace kappa
