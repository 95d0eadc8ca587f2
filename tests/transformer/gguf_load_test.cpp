// Tests for kappa/transformer/gguf_load.hpp: the tiny llama of
// tests/data/models/llama converted by llama.cpp's own converter
// (tests/reference/make_gguf_models.py, tests/data/models/llama-gguf/) loads
// to the logits of the independent PyTorch reference (F32 file: within the
// safetensors model's tolerance; Q8_0 file: within Q8_0's stated error, same
// top-1), continues greedily as the reference does, and its tokenizer gives
// the reference ids; hostile files name what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/gemm_simd.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/transformer/gguf_load.hpp"
#include "kappa/transformer/gguf_write.hpp"
#include "kappa/transformer/hf.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

using testing::kModelTol;
using testing::model_dir;
using testing::read_ids;
using testing::read_ref;
using testing::scaled_error;

/// A file of tests/data/models/llama-gguf: `model` (llama, qwen2) in `type`.
std::filesystem::path gguf_file(const std::string& type, const std::string& model = "llama") {
  return model_dir("llama-gguf") / (model + "-" + type + ".gguf");
}

std::vector<TokenId> reference_ids(const std::string& model = "llama") {
  return read_ids(model_dir(model) / "reference" / "input_ids.npy");
}

/// The F32 files and the directories they were converted from: llama (W^Q,
/// W^K permuted by the converter), qwen2 (not permuted; q/k/v biases, tied
/// head), gpt2 (Conv1D weights stored transposed, fused attn_qkv, learned
/// positions, tied head), mixtral (general.architecture llama with
/// expert_count: the experts merged into blk.N.ffn_{gate,up,down}_exps, one
/// [n_expert][out][in] tensor each, W^Q / W^K permuted), qwen3 (attn_q_norm,
/// attn_k_norm; head_dim 16 != d / heads).
const std::vector<std::string> kF32Models = {"llama", "qwen2", "gpt2", "mixtral", "qwen3"};

/// Q8_0's error on this model's logits against the F32 model's, relative to
/// their scale: measured 0.0399 (max abs 0.401 on logits up to 10.05; the
/// same in the independent forward on gguf-py's dequantized weights, so it is
/// the format's, not kappa's). Q8_0 rounds each weight to a step of 1/127 of
/// its block's largest magnitude; this tiny model's weights are large and
/// its logits spread (std 2.7).
constexpr double kQ8Tol = 0.05;
// Prefill (more than 8 rows) of weights kept in blocks: float X times the
// dequantized blocks, the independent forward to float rounding; or, in a
// build with AVX-512 VNNI or AVX2 (-march=native), X in Q8_0 times the
// blocks in 8-bit integers (kappa/core/quant_gemm.hpp), within the
// tolerance of decoding, which always quantizes X.
#if KAPPA_QUANT_GEMM_INT8
constexpr double kBlockPrefillTol = kQ8Tol;  // measured 0.045 on the Q8_0 file
#else
constexpr double kBlockPrefillTol = kModelTol<float>;
#endif

/// `n` greedy tokens after `prompt`, decoded through the cache.
template <class LM>
std::vector<TokenId> greedy(const LM& lm, const std::vector<TokenId>& prompt, std::size_t n) {
  auto cache = lm.make_cache();
  std::vector<TokenId> got;
  auto logits = lm.forward_cached(prompt, cache, LogitsFor::kLast);
  for (std::size_t step = 0; step < n; ++step) {
    Index best = 0;
    logits.row(0).maxCoeff(&best);
    got.push_back(static_cast<TokenId>(best));
    logits = lm.forward_cached(got.back(), cache);
  }
  return got;
}

template <class T>
class GgufLoadTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GgufLoadTest, Scalars);

TYPED_TEST(GgufLoadTest, F32LogitsMatchTheReferenceAndTheSafetensorsModel) {
  using T = TypeParam;
  for (const std::string& name : kF32Models) {
    SCOPED_TRACE(name);
    const gguf::CausalLM<T> lm = gguf::load_causal_lm<T>(gguf_file("f32", name));
    const hf::CausalLM<T> st = hf::load_causal_lm<T>(model_dir(name));
    // general.architecture: llama.cpp writes Mixtral as "llama".
    EXPECT_EQ(lm.model_type(), name == "mixtral" ? "llama" : name);
    EXPECT_EQ(lm.vocab_size(), st.vocab_size());
    EXPECT_EQ(lm.d_model(), 32);
    EXPECT_EQ(lm.n_layers(), st.n_layers());
    EXPECT_EQ(lm.model().index(), st.model().index());  // the same architecture type
    EXPECT_EQ(lm.context_length(), st.context_length());
    const std::vector<TokenId> ids = reference_ids(name);
    const RowMatrix<T> logits = lm.forward(ids);
    EXPECT_LE(scaled_error(logits, read_ref(name, "logits")), kModelTol<T>);
    // The same F32 weights (llama's W^Q, W^K un-permuted): the safetensors
    // model's logits to rounding; in double the GGUF's RMSNorm epsilon,
    // stored as f32 (9.99999975e-6 for 1e-5), moves them by 3e-12.
    const double same_tol = std::is_same_v<T, double> ? 1e-10 : 1e-6;
    EXPECT_LE(scaled_error(logits, st.forward(ids).template cast<double>()), same_tol);
  }
}

TYPED_TEST(GgufLoadTest, F32GreedyContinuationMatchesTheReference) {
  using T = TypeParam;
  for (const std::string& name : kF32Models) {
    SCOPED_TRACE(name);
    const gguf::CausalLM<T> lm = gguf::load_causal_lm<T>(gguf_file("f32", name));
    const std::vector<TokenId> expected =
        read_ids(model_dir(name) / "reference" / "greedy_ids.npy");
    EXPECT_EQ(greedy(lm, reference_ids(name), expected.size()), expected);
  }
}

TYPED_TEST(GgufLoadTest, Q8LogitsWithinTheFormatsErrorWithTheSameTop1) {
  using T = TypeParam;
  const gguf::CausalLM<T> lm = gguf::load_causal_lm<T>(gguf_file("q8_0"));
  const RowMatrix<T> logits = lm.forward(reference_ids());
  // The independent forward on the same dequantized weights
  // (tests/reference/make_gguf_models.py): the float tolerance.
  const RowMatrix<double> q8_ref = read_ref("llama-gguf", "llama-q8_0_logits");
  EXPECT_LE(scaled_error(logits, q8_ref), kModelTol<T>);
  // Against the F32 model: the format's error.
  const RowMatrix<double> ref = read_ref("llama", "logits");
  const double err = scaled_error(logits, ref);
  EXPECT_LE(err, kQ8Tol);
  EXPECT_GE(err, 1e-3);  // really quantized, not a float copy
  for (Index r = 0; r < ref.rows(); ++r) {
    Index a = 0, b = 0;
    logits.row(r).maxCoeff(&a);
    ref.row(r).maxCoeff(&b);
    EXPECT_EQ(a, b) << "row " << r;
  }
}

// The same Q8_0 file with the feed-forward and output-head weights kept in
// Q8_0 blocks (Q8_0Weights: products on the packed blocks, the activations
// quantized to Q8_0 per row as ggml does) instead of dequantized to float:
// within the same Q8_0 tolerance of the F32 reference, the same top-1 on
// every row, and the weights in fewer bytes.
TEST(GgufLoad, Q8StorageKeepsTheBlocksWithinTheFormatsError) {
  const gguf::CausalLM<float> dense = gguf::load_causal_lm<float>(gguf_file("q8_0"));
  const gguf::CausalLM<float, kappa::Q8_0Weights> blocks =
      gguf::load_causal_lm<float, kappa::Q8_0Weights>(gguf_file("q8_0"));
  const RowMatrix<float> logits = blocks.forward(reference_ids());
  const RowMatrix<double> ref = read_ref("llama", "logits");
  EXPECT_LE(scaled_error(logits, ref), kQ8Tol);
  EXPECT_LE(scaled_error(logits, RowMatrix<double>(dense.forward(reference_ids()).cast<double>())),
            kQ8Tol);
  for (Index r = 0; r < ref.rows(); ++r) {
    Index a = 0, b = 0;
    logits.row(r).maxCoeff(&a);
    ref.row(r).maxCoeff(&b);
    EXPECT_EQ(a, b) << "row " << r;
  }
  EXPECT_LT(static_cast<double>(blocks.weight_bytes()),
            0.7 * static_cast<double>(dense.weight_bytes()));
}

// AsStoredWeights keeps every matrix as the file stores it: the Q8_0 file's
// projections (attention's W^Q, W^K, W^V, W^O included) and its Q8_0 head
// stay in blocks, viewed in the file's mapping (no copy) except W^Q / W^K,
// whose rows of blocks the llama layout reorders; the F32 norms and
// embedding are read in float. Prefill (more than 8 rows: the blocks
// dequantized panel by panel, X in float; with VNNI see kBlockPrefillTol)
// gives the independent forward on
// the same dequantized weights to float rounding; decoding row by row (X
// quantized to Q8_0, as ggml does) stays within the format's tolerance with
// the same top-1.
TEST(GgufLoad, AsStoredKeepsTheFilesBlocksAndViewsTheMapping) {
  const std::filesystem::path path = gguf_file("q8_0");
  const auto shared = std::make_shared<const io::GgufFile>(path.string());
  const io::GgufFile& file = *shared;
  const gguf::CausalLM<float, kappa::AsStoredWeights> lm =
      gguf::load_causal_lm<float, kappa::AsStoredWeights>(shared);
  const auto& llama = std::get<Llama<float, kappa::AsStoredWeights>>(lm.model());
  for (Index i = 0; i < llama.n_layers(); ++i) {
    const auto& layer = llama.layers()[static_cast<std::size_t>(i)];
    const auto& attn = layer.attention();
    for (const auto* w : {&attn.w_q_stored(), &attn.w_k_stored(), &attn.w_v_stored(),
                          &attn.w_o_stored(), &layer.feed_forward().w_gate_up(),
                          &layer.feed_forward().w_up_split(), &layer.feed_forward().w_down()})
      EXPECT_EQ(w->format(), "q8_0") << "layer " << i;
    EXPECT_TRUE(layer.feed_forward().split());
    // W^V is the file's own bytes (a view); W^Q's rows were reordered (a copy).
    const auto& v = std::get<WeightMatrix<float, Q8_0Weights>>(attn.w_v_stored().held());
    const std::string blk = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(v.blocks().data(), file.raw(blk + "attn_v.weight").data());
    const auto& q = std::get<WeightMatrix<float, Q8_0Weights>>(attn.w_q_stored().held());
    EXPECT_NE(q.blocks().data(), file.raw(blk + "attn_q.weight").data());
  }
  const std::vector<TokenId> ids = reference_ids();
  ASSERT_GT(ids.size(), 8u);  // prefill takes the panel path
  const RowMatrix<float> logits = lm.forward(ids);
  EXPECT_LE(scaled_error(logits, read_ref("llama-gguf", "llama-q8_0_logits")), kBlockPrefillTol);
  const gguf::CausalLM<float> dense = gguf::load_causal_lm<float>(path);
  EXPECT_LT(static_cast<double>(lm.weight_bytes()),
            0.5 * static_cast<double>(dense.weight_bytes()));
  // Token by token: X in Q8_0.
  auto cache = lm.make_cache();
  const RowMatrix<double> ref = read_ref("llama", "logits");
  RowMatrix<float> rows(static_cast<Index>(ids.size()), logits.cols());
  for (std::size_t i = 0; i < ids.size(); ++i)
    rows.row(static_cast<Index>(i)) = lm.forward_cached(ids[i], cache);
  EXPECT_LE(scaled_error(rows, ref), kQ8Tol);
  for (Index r = 0; r < ref.rows(); ++r) {
    Index a = 0, b = 0;
    rows.row(r).maxCoeff(&a);
    ref.row(r).maxCoeff(&b);
    EXPECT_EQ(a, b) << "row " << r;
  }
}

// llama.cpp's own quantizer (llama-quantize) on a tiny LLaMA with d = 256
// (tests/data/models/llama-256): Q8_0, Q4_0 (with its Q6_K head) and Q4_K_M
// (Q4_K, with Q6_K for the head and layer 1's W^V and W_down) files run with
// every matrix as stored. Prefill (blocks dequantized by panels, X in float;
// with VNNI see kBlockPrefillTol) gives the independent forward on gguf-py's
// dequantization of the same bytes to float rounding; decoding token by token
// (X quantized to Q8_0 per 32 values, as ggml quantizes activations) adds X's
// rounding: measured 0.021-0.025 of the largest logit on this model, whose
// sharp random attention amplifies weight errors about 4x (README of
// llama-gguf), the same top-1 on every row whose reference margin is clear (>
// 1: 7 of 12; the 4-bit formats' own error moves the argmax of rows with
// margins 0.08 and 0.2).
TEST(GgufLoad, LlamaQuantizeFilesRunAsStored) {
  const std::vector<TokenId> ids = reference_ids("llama-256");
  ASSERT_GT(ids.size(), 8u);
  for (const std::string type : {"q8_0", "q4_0", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const auto path = model_dir("llama-gguf") / ("llama-256-" + type + ".gguf");
    const gguf::CausalLM<float, kappa::AsStoredWeights> lm =
        gguf::load_causal_lm<float, kappa::AsStoredWeights>(path);
    const RowMatrix<double> ref = read_ref("llama-gguf", "llama-256-" + type + "_logits");
    EXPECT_LE(scaled_error(lm.forward(ids), ref), kBlockPrefillTol);
    auto cache = lm.make_cache();
    RowMatrix<float> rows(static_cast<Index>(ids.size()), ref.cols());
    for (std::size_t i = 0; i < ids.size(); ++i)
      rows.row(static_cast<Index>(i)) = lm.forward_cached(ids[i], cache);
    const double err = scaled_error(rows, ref);
    EXPECT_LE(err, 0.04);
    EXPECT_GE(err, 1e-4);  // X really in Q8_0
    int clear = 0;
    for (Index r = 0; r < ref.rows(); ++r) {
      Index best = 0, got = 0;
      ref.row(r).maxCoeff(&best);
      rows.row(r).maxCoeff(&got);
      RowVector<double> rest = ref.row(r);
      rest(best) = -std::numeric_limits<double>::infinity();
      if (ref(r, best) - rest.maxCoeff() <= 1.0) continue;
      ++clear;
      EXPECT_EQ(got, best) << "row " << r;
    }
    EXPECT_GE(clear, 6);  // of 12 rows; 6 to 9 by file
  }
  // The Q4_0 and Q4_K_M files with their Q4_0 / Q4_K matrices interleaved
  // by eights (the embedding's lookups, prefill and the Q6_K matrices read
  // the same values as before): prefill gives the same bits; decoding sums
  // in another order, and for Q4_K takes X in Q8_K (one scale per 256)
  // instead of Q8_0. A float rounding apart in one product can move an
  // activation across a rounding boundary of the next product's
  // quantization, so the two decodes differ by a few activation steps, not
  // by float rounding. Measured against the largest logit: Q4_0 9.0e-4,
  // Q4_K_M 1.3e-2 (X's coarser quantization), against 0.021-0.025 for either
  // decode against the reference (bounded by 0.04 above and below).
  for (const auto& [type, apart] :
       std::vector<std::pair<std::string, double>>{{"q4_0", 0.005}, {"q4_k_m", 0.05}}) {
    SCOPED_TRACE(type + " interleaved");
    const auto path = model_dir("llama-gguf") / ("llama-256-" + type + ".gguf");
    const auto rows_lm = gguf::load_causal_lm<float, kappa::AsStoredWeights>(
        std::make_shared<const io::GgufFile>(path.string()));
    const auto il_lm = gguf::load_causal_lm<float, kappa::AsStoredWeights>(
        std::make_shared<const io::GgufFile>(path.string(), io::Residence::kMapped,
                                             /*interleave_q4=*/true));
    EXPECT_TRUE(il_lm.forward(ids) == rows_lm.forward(ids));
    auto rows_cache = rows_lm.make_cache();
    auto il_cache = il_lm.make_cache();
    const RowMatrix<double> ref = read_ref("llama-gguf", "llama-256-" + type + "_logits");
    RowMatrix<float> a(static_cast<Index>(ids.size()), ref.cols()), b = a;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      a.row(static_cast<Index>(i)) = rows_lm.forward_cached(ids[i], rows_cache);
      b.row(static_cast<Index>(i)) = il_lm.forward_cached(ids[i], il_cache);
    }
    const double diff = scaled_error(b, a.cast<double>());
    std::cout << type << " decode, of the largest logit: interleaved against the rows' " << diff
              << ", rows against the reference " << scaled_error(a, ref)
              << ", interleaved against the reference " << scaled_error(b, ref) << "\n";
    EXPECT_LE(diff, apart);
    EXPECT_GT(diff, 0.0);  // the interleaved loop really ran
    EXPECT_LE(scaled_error(b, ref), 0.04);
    // The file in huge pages, its blocks copied out by the loader (no
    // mapping shared): the same interleaved matrices, the same bits.
    const io::GgufFile huge(path.string(), io::Residence::kHugePages, /*interleave_q4=*/true);
    const auto copied_lm = gguf::load_causal_lm<float, kappa::AsStoredWeights>(huge);
    auto copied_cache = copied_lm.make_cache();
    for (std::size_t i = 0; i < ids.size(); ++i)
      EXPECT_TRUE(copied_lm.forward_cached(ids[i], copied_cache) == b.row(static_cast<Index>(i)))
          << i;
  }
  // The Q4_K_M file's mix, matrix by matrix as llama-quantize wrote it.
  const auto lm = gguf::load_causal_lm<float, kappa::AsStoredWeights>(model_dir("llama-gguf") /
                                                                      "llama-256-q4_k_m.gguf");
  const auto& llama = std::get<Llama<float, kappa::AsStoredWeights>>(lm.model());
  const auto& l0 = llama.layers()[0];
  const auto& l1 = llama.layers()[1];
  EXPECT_EQ(l0.attention().w_q_stored().format(), "q4_K");
  EXPECT_EQ(l0.attention().w_v_stored().format(), "q4_K");
  EXPECT_EQ(l1.attention().w_v_stored().format(), "q6_K");
  EXPECT_EQ(l0.feed_forward().w_down().format(), "q4_K");
  EXPECT_EQ(l1.feed_forward().w_down().format(), "q6_K");
  EXPECT_EQ(l1.feed_forward().w_up_split().format(), "q4_K");
  // The embedding stays in its Q4_K blocks (rows dequantized per lookup),
  // the head in Q6_K: the weights take the file's tensor bytes, no float copy.
  ASSERT_TRUE(llama.embedding_stored().has_value());
  EXPECT_EQ(llama.embedding_stored()->format(), "q4_K");
  EXPECT_EQ(llama.embedding().table().size(), 0);
  const io::GgufFile file((model_dir("llama-gguf") / "llama-256-q4_k_m.gguf").string());
  std::uint64_t tensor_bytes = 0;
  for (const io::GgufTensorInfo& t : file.tensors()) tensor_bytes += t.bytes;
  EXPECT_NEAR(static_cast<double>(lm.weight_bytes()), static_cast<double>(tensor_bytes),
              0.02 * static_cast<double>(tensor_bytes));
  const gguf::CausalLM<float> dense =
      gguf::load_causal_lm<float>(model_dir("llama-gguf") / "llama-256-q4_k_m.gguf");
  EXPECT_LT(static_cast<double>(lm.weight_bytes()),
            0.2 * static_cast<double>(dense.weight_bytes()));
  // A token id outside the stored table is named with the table's size.
  try {
    (void)lm.forward(std::vector<TokenId>{5, 298});
    ADD_FAILURE() << "no RangeError";
  } catch (const RangeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("298"), std::string::npos) << msg;
  }
}

// DeepSeek-V2 through llama.cpp's converter (general.architecture
// deepseek2): latent attention with kv_b_proj split per head into attn_k_b
// (transposed) and attn_v_b, which the loader joins back; YaRN from the
// rope.scaling.* keys; V2-Lite (no q_lora_rank), the dense model and the
// mixture (group-limited greedy routing, two shared experts, scaled
// weights). The Hugging Face reference to the float32 rounding of the
// metadata the file stores (yarn_log_multiplier = 0.1 mscale_all_dim and
// the epsilons as f32: 6e-9 of the logit scale in double), greedy
// continuations equal.
TYPED_TEST(GgufLoadTest, DeepSeek2MatchesTheReference) {
  using T = TypeParam;
  for (const std::string name : {"deepseek_v2", "deepseek_v2-lite", "deepseek_v2-moe"}) {
    SCOPED_TRACE(name);
    const gguf::CausalLM<T> lm = gguf::load_causal_lm<T>(gguf_file("f32", name));
    const hf::CausalLM<T> st = hf::load_causal_lm<T>(model_dir(name));
    EXPECT_EQ(lm.model_type(), "deepseek2");
    EXPECT_EQ(lm.model().index(), st.model().index());
    EXPECT_EQ(lm.n_layers(), st.n_layers());
    const RowMatrix<T> logits = lm.forward(reference_ids(name));
    EXPECT_LE(scaled_error(logits, read_ref(name, "logits")), std::max(kModelTol<T>, 2e-8));
    const std::vector<TokenId> expected =
        read_ids(model_dir(name) / "reference" / "greedy_ids.npy");
    EXPECT_EQ(greedy(lm, reference_ids(name), expected.size()), expected);
  }
}

// llama-quantize's Q8_0 of the tiny Mixtral: every expert's W_gate and W_up
// is its slice of the merged ffn_{gate,up}_exps, kept in Q8_0 and viewed in
// the file (no copy); W_down fell back to F16 there (rows of 16) and is an
// fp16 view of its slice.
TEST(GgufLoad, QuantizedExpertsAreViewsOfTheirSlices) {
  const auto shared = std::make_shared<const io::GgufFile>(gguf_file("q8_0", "mixtral").string());
  const gguf::CausalLM<float, kappa::AsStoredWeights> lm =
      gguf::load_causal_lm<float, kappa::AsStoredWeights>(shared);
  const auto& moe = std::get<LlamaMoe<float, kappa::AsStoredWeights>>(lm.model());
  const auto& mix = std::get<1>(moe.layers()[1].feed_forward().get());
  ASSERT_EQ(mix.n_experts(), 8);
  const io::GgufTensorInfo& gate = shared->tensor("blk.1.ffn_gate_exps.weight");
  for (Index e = 0; e < mix.n_experts(); ++e) {
    const auto& expert = mix.expert(e);
    EXPECT_TRUE(expert.split());
    EXPECT_EQ(expert.w_gate_up().format(), "q8_0");
    EXPECT_EQ(expert.w_down().format(), "f16 view");
    const auto& g = std::get<WeightMatrix<float, Q8_0Weights>>(expert.w_gate_up().held());
    EXPECT_EQ(g.blocks().data(),  // expert e's slice of the merged tensor
              shared->raw(gate.name).data() + static_cast<std::size_t>(e) * (gate.bytes / 8));
  }
  // The file dequantized to float: the independent forward on the same
  // weights to float rounding. As stored: each expert sees the few rows
  // routed to it, so its products take the decode path (X in Q8_0, as ggml):
  // measured 0.014 of the logit scale.
  const RowMatrix<double> ref = read_ref("llama-gguf", "mixtral-q8_0_logits");
  const gguf::CausalLM<float> dense = gguf::load_causal_lm<float>(gguf_file("q8_0", "mixtral"));
  EXPECT_LE(scaled_error(dense.forward(reference_ids("mixtral")), ref), kModelTol<float>);
  const std::vector<TokenId> mids = reference_ids("mixtral");
  const RowMatrix<float> pre = lm.forward(mids);
  const double err = scaled_error(pre, ref);
#if KAPPA_QUANT_GEMM_INT8
  // Every product quantizes X then, as token-by-token decoding always does
  // (measured 0.24 of the logit scale against the float forward on this
  // tiny random model, whose sharp attention amplifies X's rounding; 0.014
  // when only the experts did): prefill equals decoding to float rounding
  // (measured 0.003, the summation orders differ).
  auto cache = lm.make_cache();
  RowMatrix<float> rows(static_cast<Index>(mids.size()), pre.cols());
  for (std::size_t i = 0; i < mids.size(); ++i)
    rows.row(static_cast<Index>(i)) = lm.forward_cached(mids[i], cache);
  EXPECT_LE(scaled_error(rows, RowMatrix<double>(pre.cast<double>())), 0.01);
  EXPECT_LE(err, 0.3);
#else
  EXPECT_LE(err, 0.03);
#endif
  EXPECT_GE(err, 1e-4);
}

// An F32 file as stored, in float: every matrix (W^Q / W^K of the llama
// layout excepted: their rows move) and the tied embedding are views of the
// mapped file, not float copies; the logits are the dense model's.
TEST(GgufLoad, F32MatricesAreViewsAsStored) {
  for (const std::string name : {"llama", "qwen2"}) {
    SCOPED_TRACE(name);
    const auto lm = gguf::load_causal_lm<float, kappa::AsStoredWeights>(gguf_file("f32", name));
    const auto& llama = std::get<Llama<float, kappa::AsStoredWeights>>(lm.model());
    const auto& layer = llama.layers()[0];
    EXPECT_EQ(layer.attention().w_v_stored().format(), "f32 view");
    EXPECT_EQ(layer.attention().w_o_stored().format(), "f32 view");
    EXPECT_EQ(layer.attention().w_q_stored().format(), name == "llama" ? "dense" : "f32 view");
    EXPECT_EQ(layer.feed_forward().w_down().format(), "f32 view");
    if (llama.tied()) {
      ASSERT_TRUE(llama.embedding_stored().has_value());
      EXPECT_EQ(llama.embedding_stored()->format(), "f32 view");
    }
    const gguf::CausalLM<float> dense = gguf::load_causal_lm<float>(gguf_file("f32", name));
    const std::vector<TokenId> ids = reference_ids(name);
    EXPECT_LE(scaled_error(lm.forward(ids), RowMatrix<double>(dense.forward(ids).cast<double>())),
              1e-6);
  }
}

// The checks a half-precision file (F16, BF16) loaded as stored shares: the
// logits of the dense load (which converts every tensor to T once) to the
// summation's rounding, in prefill (converted panels, Eigen's GEMM) and token
// by token (one dot product per row); 1 and 2 threads give the same decode
// bits; the file read without a mapping (an owned copy) the same bits as the
// mapped one; in double, the stored values exactly and the products in
// double. Half the bytes of the float model. `prefill_tol`: the prefill's
// scaled error allowed (the summation's rounding, unless the build rounds
// the activations too: BF16 on AVX512_BF16).
void expect_half_as_stored_matches_dense(const std::filesystem::path& path,
                                         const gguf::CausalLM<float, AsStoredWeights>& lm,
                                         double prefill_tol = 1e-5) {
  const gguf::CausalLM<float> dense = gguf::load_causal_lm<float>(path);
  EXPECT_LT(static_cast<double>(lm.weight_bytes()),
            0.6 * static_cast<double>(dense.weight_bytes()));
  const std::vector<TokenId> ids = reference_ids();
  ASSERT_GT(ids.size(), 8u);  // prefill takes the panel path
  const RowMatrix<double> want = dense.forward(ids).cast<double>();
  EXPECT_LE(scaled_error(lm.forward(ids), want), prefill_tol);
  const auto decode = [&](const auto& model) {
    auto cache = model.make_cache();
    RowMatrix<float> rows(static_cast<Index>(ids.size()), want.cols());
    for (std::size_t i = 0; i < ids.size(); ++i)
      rows.row(static_cast<Index>(i)) = model.forward_cached(ids[i], cache);
    return rows;
  };
  const RowMatrix<float> one = decode(lm);
  EXPECT_LE(scaled_error(one, want), 1e-5);
#ifdef _OPENMP
  kappa::set_num_threads(2);
  EXPECT_TRUE(decode(lm) == one);
  kappa::set_num_threads(1);
#endif
  const io::GgufFile file(path.string());
  const auto copied = gguf::load_causal_lm<float, kappa::AsStoredWeights>(file);
  EXPECT_TRUE(decode(copied) == one);
  const auto lm_d = gguf::load_causal_lm<double, kappa::AsStoredWeights>(path);
  const gguf::CausalLM<double> dense_d = gguf::load_causal_lm<double>(path);
  EXPECT_LE(scaled_error(lm_d.forward(ids), dense_d.forward(ids)), 1e-12);
}

// An F16 file (written by our writer from the tiny llama directory, as
// llama.cpp's converter writes F16; the writer's bytes are tested against
// that converter in gguf_write_test) as stored: every matrix an fp16 view
// (W^Q / W^K a reordered fp16 copy), converted in the products; the checks
// above.
TEST(GgufLoad, F16MatricesAreViewsAsStored) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / "kappa_gguf_load_f16_test.gguf";
  gguf::write_hf_directory(model_dir("llama"), out, io::GgmlType::kF16);
  const auto lm = gguf::load_causal_lm<float, kappa::AsStoredWeights>(out);
  const auto& llama = std::get<Llama<float, kappa::AsStoredWeights>>(lm.model());
  for (const auto& layer : llama.layers()) {
    const auto& attn = layer.attention();
    for (const auto* w : {&attn.w_q_stored(), &attn.w_k_stored(), &attn.w_v_stored(),
                          &attn.w_o_stored(), &layer.feed_forward().w_down()})
      EXPECT_EQ(w->format(), "f16 view");
  }
  expect_half_as_stored_matches_dense(out, lm);
  std::filesystem::remove(out);
}

// A BF16 file's matrices as stored are views of the mapping too (bf16
// values, W^T as the file holds a projection; W^Q / W^K a reordered copy):
// no float copy at load; the checks of the F16 file above.
TEST(GgufLoad, Bf16MatricesAreViewsAsStored) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / "kappa_gguf_load_bf16_test.gguf";
  gguf::write_hf_directory(model_dir("llama"), out, io::GgmlType::kBF16);
  const auto shared = std::make_shared<const io::GgufFile>(out.string());
  const auto lm = gguf::load_causal_lm<float, kappa::AsStoredWeights>(shared);
  const auto& llama = std::get<Llama<float, kappa::AsStoredWeights>>(lm.model());
  for (std::size_t i = 0; i < llama.layers().size(); ++i) {
    const auto& layer = llama.layers()[i];
    const auto& attn = layer.attention();
    for (const auto* w : {&attn.w_q_stored(), &attn.w_k_stored(), &attn.w_v_stored(),
                          &attn.w_o_stored(), &layer.feed_forward().w_gate_up(),
                          &layer.feed_forward().w_up_split(), &layer.feed_forward().w_down()})
      EXPECT_EQ(w->format(), "bf16");
    const std::string blk = "blk." + std::to_string(i) + ".";
    const auto& v = std::get<WeightMatrix<float, Bf16Weights>>(attn.w_v_stored().held());
    EXPECT_TRUE(v.stored_transposed());
    // W^V is the file's own bytes (a view); W^Q's rows were reordered (a copy).
    EXPECT_EQ(static_cast<const void*>(v.data()),
              static_cast<const void*>(shared->raw(blk + "attn_v.weight").data()));
    const auto& q = std::get<WeightMatrix<float, Bf16Weights>>(attn.w_q_stored().held());
    EXPECT_NE(static_cast<const void*>(q.data()),
              static_cast<const void*>(shared->raw(blk + "attn_q.weight").data()));
  }
  // With AVX512_BF16 (kappa/core/gemm_simd.hpp), prefill's products round
  // X to bfloat16 as well: 0.0113 of the logits' scale on this model,
  // measured; the summation's rounding alone elsewhere.
  expect_half_as_stored_matches_dense(out, lm, KAPPA_GEMM_BF16_PAIRS ? 0.03 : 1e-5);
  std::filesystem::remove(out);
}

// The view outlives every other handle on the file: a model loaded from a
// path keeps the mapping alive itself.
TEST(GgufLoad, AsStoredModelOwnsItsMapping) {
  std::optional<gguf::CausalLM<float, kappa::AsStoredWeights>> lm;
  {
    auto loaded = gguf::load<float, kappa::AsStoredWeights>(gguf_file("q8_0"));
    lm.emplace(std::move(loaded.model));
  }
  const RowMatrix<float> logits = lm->forward(reference_ids());
  EXPECT_LE(scaled_error(logits, read_ref("llama-gguf", "llama-q8_0_logits")), kBlockPrefillTol);
}

// The file read into huge pages (io::Residence::kHugePages) instead of
// mapped: the same model, bit for bit, its blocks views of that memory.
TEST(GgufLoad, FileInHugePagesGivesTheMappedModel) {
  for (const auto& [model, kind] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "q8_0"}, {"llama-256", "q4_k_m"}}) {
    SCOPED_TRACE(model + " " + kind);
    const auto mapped = gguf::load<float, kappa::AsStoredWeights>(gguf_file(kind, model));
    const auto read = gguf::load<float, kappa::AsStoredWeights>(gguf_file(kind, model),
                                                                kappa::io::Residence::kHugePages);
    const RowMatrix<float> a = mapped.model.forward(reference_ids(model)),
                           b = read.model.forward(reference_ids(model));
    EXPECT_EQ(a, b);
    EXPECT_LE(scaled_error(b, read_ref("llama-gguf", model + "-" + kind + "_logits")),
              kBlockPrefillTol);
  }
}

// Mistral through llama.cpp's converter: general.architecture llama with
// attention.key_length 16 != embedding_length / head_count = 8, and no
// sliding window (llama.cpp writes none): the independent no-window forward,
// whose first sliding_window (4) rows are the Hugging Face reference's.
TYPED_TEST(GgufLoadTest, MistralLoadsAsLlamaWithItsHeadWidth) {
  using T = TypeParam;
  const gguf::CausalLM<T> lm = gguf::load_causal_lm<T>(gguf_file("f32", "mistral"));
  EXPECT_EQ(lm.model_type(), "llama");
  const RowMatrix<T> logits = lm.forward(reference_ids("mistral"));
  EXPECT_LE(scaled_error(logits, read_ref("llama-gguf", "mistral-f32_logits")), kModelTol<T>);
  const RowMatrix<double> hf_ref = read_ref("mistral", "logits");
  EXPECT_LE(scaled_error(logits.topRows(4), RowMatrix<double>(hf_ref.topRows(4))), kModelTol<T>);
}

// Llama 3's RoPE rule as the converter stores it (rope_freqs.weight, one
// float32 divisor per frequency, generate_extra_tensors): the independent
// forward with ggml's theta_i / f_i on the file's factors, and the Hugging
// Face reference (the float64 rule) to the factors' float32 rounding
// (measured 2.4e-7 there).
TYPED_TEST(GgufLoadTest, Llama3RopeFactorsMatchTheReference) {
  using T = TypeParam;
  const gguf::CausalLM<T> lm = gguf::load_causal_lm<T>(gguf_file("f32", "llama3"));
  const RowMatrix<T> logits = lm.forward(reference_ids("llama3-scaled"));
  EXPECT_LE(scaled_error(logits, read_ref("llama-gguf", "llama3-f32_logits")), kModelTol<T>);
  const double hf_tol = std::max(kModelTol<T>, 1e-6);
  EXPECT_LE(scaled_error(logits, read_ref("llama3-scaled", "logits")), hf_tol);
  // Decoding through the cache, one token at a time, gives the same rows
  // (the divisors do not depend on the length).
  typename gguf::CausalLM<T>::Cache cache = lm.make_cache();
  const std::vector<TokenId> ids = reference_ids("llama3-scaled");
  RowMatrix<T> rows(static_cast<Index>(ids.size()), logits.cols());
  for (std::size_t i = 0; i < ids.size(); ++i)
    rows.row(static_cast<Index>(i)) = lm.forward_cached(ids[i], cache);
  const double cache_tol = std::is_same_v<T, double> ? 1e-12 : 2e-5;
  EXPECT_LE(scaled_error(rows, logits.template cast<double>()), cache_tol);
}

// The converter's permutation (LlamaModel.permute) followed by the loader's
// inverse is the identity, on a W^K-shaped matrix with 2 heads of width 8.
TEST(GgufLoad, UnpermuteInvertsTheConvertersPermutation) {
  const Index heads = 2, width = 8, cols = 3;
  RowMatrix<double> hf(heads * width, cols);
  for (Index i = 0; i < hf.size(); ++i) hf.data()[i] = static_cast<double>(i);
  // permute: reshape(heads, 2, width / 2, cols).swapaxes(1, 2).reshape(...)
  RowMatrix<double> g(hf.rows(), cols);
  for (Index h = 0; h < heads; ++h)
    for (Index a = 0; a < 2; ++a)
      for (Index b = 0; b < width / 2; ++b)
        g.row(h * width + b * 2 + a) = hf.row(h * width + a * (width / 2) + b);
  EXPECT_EQ(gguf::detail::unpermute_rope_rows<double>(g, heads), hf);
}

// The tokenizer.ggml.* keys give the ids of the reference tokenizer
// (tests/reference/make_models.py's, independent of kappa) on its texts:
// llama (pre llama-bpe, BOS prepended), qwen2 (pre qwen2, no BOS), gpt2
// (pre gpt-2, no BOS).
TEST(GgufLoad, TokenizerGivesTheReferenceIds) {
  for (const std::string& name : kF32Models) {
    SCOPED_TRACE(name);
    const io::GgufFile f(gguf_file("f32", name).string());
    const tokenize::HfTokenizer tok = gguf::load_tokenizer(f);
    std::ifstream in(model_dir(name) / "reference" / "tokens.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    ASSERT_EQ(ref.at("texts").size(), ref.at("ids").size());
    for (std::size_t i = 0; i < ref.at("texts").size(); ++i) {
      const std::string text = ref.at("texts")[i].get<std::string>();
      SCOPED_TRACE(text);
      EXPECT_EQ(tok.encode(text), ref.at("ids")[i].get<std::vector<TokenId>>());
    }
  }
  const tokenize::HfTokenizer tok = gguf::load_tokenizer(io::GgufFile(gguf_file("f32").string()));
  EXPECT_EQ(tok.bos_id(), std::optional<TokenId>(296));
  const auto both = gguf::load<float>(gguf_file("q8_0"));
  EXPECT_EQ(both.eos_id, std::optional<TokenId>(297));
  EXPECT_EQ(both.tokenizer.encode("Hello world"), tok.encode("Hello world"));
}

// A SentencePiece-style vocabulary (tokenizer.ggml.model "llama": tokens,
// scores, token types), written by the converter's _set_vocab_sentencepiece
// from tests/data/tokenize/sentencepiece/bpe_llama.model, gives
// sentencepiece's own ids (golden.json there, EncodeAsIds: no BOS) on every
// valid UTF-8 input, and prepends BOS 1 by llama.cpp's default.
TEST(GgufLoad, SentencePieceVocabularyGivesSentencePiecesIds) {
  namespace tk = kappa::tokenize;
  const io::GgufFile f((model_dir("llama-gguf") / "spm-bpe_llama-vocab.gguf").string());
  const tk::HfTokenizer tok = gguf::load_tokenizer(f);
  std::ifstream in(std::filesystem::path(KAPPA_TEST_DATA_DIR) / "tokenize" / "sentencepiece" /
                   "golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  const nlohmann::json& inputs = golden.at("inputs");
  const nlohmann::json& ids = golden.at("models").at("bpe_llama").at("ids");
  std::size_t compared = 0;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].contains("text")) continue;  // the invalid UTF-8 ("hex") inputs
    const std::string text = inputs[k].at("text").get<std::string>();
    const auto want = ids[k].get<std::vector<TokenId>>();
    EXPECT_EQ(tok.encode(text, tk::AddSpecial::kNo, tk::SpecialTokens::kAsText), want) << text;
    ++compared;
  }
  EXPECT_GE(compared, 300u);
  EXPECT_EQ(tok.bos_id(), std::optional<TokenId>(1));
  const std::vector<TokenId> with_bos = tok.encode("hello world");
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos.front(), 1);
}

// ---- Hostile files: copies of the F32 file with one field changed ------------------

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The F32 file with the first `from` replaced by `to` (same length), written
/// to a temporary file whose path is returned.
std::filesystem::path patched(const std::string& name, const std::string& from,
                              const std::string& to, const std::string& model = "llama") {
  std::string bytes = read_bytes(gguf_file("f32", model));
  const std::size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(from.size(), to.size());
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kappa_gguf_load_test_" + name + ".gguf");
  std::ofstream(out, std::ios::binary) << bytes;
  return out;
}

template <class E>
std::string message_of(const std::filesystem::path& p) {
  try {
    (void)gguf::load_causal_lm<float>(p);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

TEST(GgufLoad, UnsupportedArchitectureIsNamed) {
  // general.architecture's value "llama" (u64 length 5, then the bytes).
  const std::string key = "general.architecture";
  std::string from = key + std::string("\x08\x00\x00\x00", 4) +
                     std::string("\x05\x00\x00\x00\x00\x00\x00\x00", 8) + "llama";
  std::string to = from;
  to.replace(to.size() - 5, 5, "mamba");
  const auto p = patched("arch", from, to);
  const std::string msg = message_of<FormatError>(p);
  EXPECT_NE(msg.find("general.architecture"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"mamba\""), std::string::npos) << msg;
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  std::filesystem::remove(p);
}

TEST(GgufLoad, MissingTensorIsNamed) {
  const auto p = patched("missing", "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight");
  const std::string msg = message_of<FormatError>(p);
  EXPECT_NE(msg.find("\"blk.1.ffn_up.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  std::filesystem::remove(p);
}

TEST(GgufLoad, ShapeDisagreeingWithTheMetadataNamesBoth) {
  // llama.feed_forward_length: u32 (type 4) 64 -> 48.
  const std::string key = "llama.feed_forward_length";
  const std::string type_u32("\x04\x00\x00\x00", 4);
  const auto p = patched("shape", key + type_u32 + std::string("\x40\x00\x00\x00", 4),
                         key + type_u32 + std::string("\x30\x00\x00\x00", 4));
  const std::string msg = message_of<ShapeError>(p);
  EXPECT_NE(msg.find("\"blk.0.ffn_gate.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64, 32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[48, 32]"), std::string::npos) << msg;
  std::filesystem::remove(p);
}

TEST(GgufLoad, Gpt2ShapeDisagreeingWithTheMetadataNamesBoth) {
  // gpt2.feed_forward_length: u32 128 -> 96; ffn_up is stored (out, in).
  const std::string key = "gpt2.feed_forward_length";
  const std::string type_u32("\x04\x00\x00\x00", 4);
  const auto p = patched("gpt2shape", key + type_u32 + std::string("\x80\x00\x00\x00", 4),
                         key + type_u32 + std::string("\x60\x00\x00\x00", 4), "gpt2");
  const std::string msg = message_of<ShapeError>(p);
  EXPECT_NE(msg.find("\"blk.0.ffn_up.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("[128, 32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[96, 32]"), std::string::npos) << msg;
  std::filesystem::remove(p);
}

TEST(GgufLoad, HeadCountThatDoesNotDivideIsNamed) {
  // llama.attention.head_count_kv: u32 2 -> 3 (does not divide 4 heads).
  const std::string key = "llama.attention.head_count_kv";
  const std::string type_u32("\x04\x00\x00\x00", 4);
  const auto p = patched("kv", key + type_u32 + std::string("\x02\x00\x00\x00", 4),
                         key + type_u32 + std::string("\x03\x00\x00\x00", 4));
  const std::string msg = message_of<FormatError>(p);
  EXPECT_NE(msg.find("llama.attention.head_count_kv"), std::string::npos) << msg;
  std::filesystem::remove(p);
}

TEST(GgufLoad, NotAGgufFileIsAFormatError) {
  const std::string msg = message_of<FormatError>(model_dir("llama") / "model.safetensors");
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kappa
