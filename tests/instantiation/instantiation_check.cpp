// The public templates, instantiated for float and for double.
//
// A template's body is only checked for warnings when it is instantiated, and
// the float and double paths differ (-Wconversion: double -> float). The tests
// use some templates with one scalar type only, so this file instantiates each
// class template explicitly (every non-template member function) and calls the
// function templates, for both. It is compiled with kappa's warning flags
// (CMakeLists.txt), never linked or run.
#include <kappa/kappa.hpp>

#include <span>
#include <string>
#include <vector>

namespace kappa {

// ---- embed ---------------------------------------------------------------
template class Embedding<float>;
template class Embedding<double>;
template class SinusoidalPositions<float>;
template class SinusoidalPositions<double>;
template class LearnedPositions<float>;
template class LearnedPositions<double>;
template class InputEmbedding<float, SinusoidalPositions<float>>;
template class InputEmbedding<double, LearnedPositions<double>>;
template class Rope<float, RotateHalf>;
template class Rope<double, RotateHalf>;
template class Rope<float, Interleaved>;
template class Rope<double, Interleaved>;
template struct ScoreBias<float>;
template struct ScoreBias<double>;
template struct ScoreBiasView<float>;
template struct ScoreBiasView<double>;
template struct HeadScoreBias<float>;
template struct HeadScoreBias<double>;
template struct T5RelativeBias<float>;
template struct T5RelativeBias<double>;
template struct AttentionWorkspace<float>;
template struct AttentionWorkspace<double>;

// ---- attention, heads, caches ---------------------------------------------
template class LinearAttentionState<float, kernels::EluPlusOne>;
template class LinearAttentionState<double, kernels::EluPlusOne>;
template struct ExactAttention<kernels::Softmax, NoMask>;
template struct ExactAttention<kernels::EluPlusOne, CausalMask>;
template struct ExactRun<float>;
template struct ExactRun<double>;
template class LinearAttentionState<float, kernels::TrigonometricRandomFeatures>;
template class LinearAttentionState<double, kernels::PositiveRandomFeatures>;
template class cache::TokenStore<float, cache::Growable>;
template class cache::TokenStore<double, cache::SlidingWindow>;
template class cache::TokenStore<float, cache::FixedCapacity>;
template class KVCache<float>;
template class KVCache<double, cache::SlidingWindow>;
template class cache::TokenStore<float, cache::Growable, cache::BF16>;
template class cache::TokenStore<double, cache::SlidingWindow, cache::Int8>;
template class KVCache<float, cache::Growable, cache::BF16>;
template class KVCache<double, cache::Growable, cache::BF16>;
template class KVCache<float, cache::FixedCapacity, cache::F16>;
template class KVCache<double, cache::SlidingWindow, cache::F16>;
template class KVCache<float, cache::Growable, cache::Int8>;
template class KVCache<double, cache::Growable, cache::Int8>;
template struct cache::StoredRows<float, cache::BF16>;
template struct cache::StoredRows<double, cache::Int8>;
template struct DecodeWorkspace<float>;
template struct DecodeWorkspace<double>;
// (With NoPosition, clang 14 rejects an explicit instantiation: it does not
// skip the constructors constrained on HeadWidthPosition. Those are used below.)
template struct SvdFactors<float>;
template struct SvdFactors<double>;
template struct LatentCompression<float, AbsorbedLatent>;
template struct LatentCompression<double, NaiveLatent>;
template class MultiHeadAttention<float, kernels::Softmax, GroupedQuery, Rope<float>>;
template class MultiHeadAttention<double, kernels::Softmax, MultiQuery, Rope<double, Interleaved>>;
template class MultiHeadAttention<float, approx::Nystrom, MultiHead, Rope<float>>;
template class MultiHeadAttention<float, kernels::Softmax, GroupedQuery, Rope<float>, Q8_0Weights>;
template class MultiHeadAttention<float, kernels::Softmax, GroupedQuery, Rope<float>,
                                  AsStoredWeights>;
template class MultiHeadAttention<double, kernels::Softmax, MultiHead, Rope<double>, Bf16Weights>;
template class MultiHeadAttention<double, approx::SequenceSketch, GroupedQuery, Rope<double>>;
template class MultiHeadAttention<float, approx::SampledAttention, MultiQuery, Rope<float>>;
template struct approx::SampledParts<float>;
template struct approx::SampledParts<double>;
template class LatentCache<float>;
template class LatentCache<double>;
template class LatentCache<float, cache::Growable, cache::BF16>;
template class LatentCache<double, cache::FixedCapacity, cache::Int8>;
template class LatentAttention<float>;
template class LatentAttention<double>;
template class LatentAttention<float, NaiveLatent>;
template class LatentAttention<double, NaiveLatent>;

// ---- nn ------------------------------------------------------------------
template class RMSNorm<float>;
template class RMSNorm<double>;
template class LayerNorm<float>;
template class LayerNorm<double>;
template class Mlp<float, Gelu>;
template class Mlp<double, Relu>;
template class Mlp<float, GeluTanh, Bf16Weights>;
template class GatedMlp<float>;
template class GatedMlp<double>;
template class GatedMlp<float, Silu, Bf16Weights>;
template class GatedMlp<double, Silu, Bf16Weights>;
template class GatedMlp<float, Silu, AsStoredWeights>;
template class GatedMlp<float, Silu, Q4_KWeights>;
template class WeightMatrix<float, AsStoredWeights>;
template class WeightMatrix<double, Q6_KWeights>;
template class WeightMatrix<float, DenseWeights>;
template class WeightMatrix<double, Bf16Weights>;
template class WeightMatrix<float, Bf16Weights>;

// ---- transformer: layers, models, the Hugging Face loader -------------------
template class DecoderOnlyLayer<float, LlamaAttention<float>, RMSNorm<float>, SwiGlu<float>>;
template class DecoderOnlyLayer<double, LlamaAttention<double>, RMSNorm<double>, SwiGlu<double>>;
template class EncoderLayer<float, MultiHeadAttention<float>, LayerNorm<float>, Mlp<float, Gelu>>;
template class EncoderLayer<double, MultiHeadAttention<double>, LayerNorm<double>,
                            Mlp<double, Gelu>>;
template class EncoderOnlyModel<float, BertLayer<float>>;
template class EncoderOnlyModel<double, BertLayer<double>>;
template class EncoderDecoderModel<float, PaperEncoderLayer<float>, PaperDecoderLayer<float>>;
template class EncoderDecoderModel<double, PaperEncoderLayer<double>, PaperDecoderLayer<double>>;
template class hf::CausalLM<float>;
template class hf::CausalLM<double>;
template class hf::CausalLM<float, Bf16Weights>;
template class hf::CausalLM<double, Bf16Weights>;

namespace instantiation_check {

// The function templates, called (never run) with T = float and T = double.
template <class T>
void use_function_templates() {
  const RowMatrix<T> x(4, 8);
  AttentionWorkspace<T> ws;
  RowMatrix<T> y(4, 8);
  attention_into<T>(x, x, x, y, ws);
  attention_into<T>(x, x, x, y, ws, kernels::Softmax{}, CausalMask{});
  attention_into<T>(x, x, x, y, ws, kernels::EluPlusOne{}, SlidingWindowMask{2});
  (void)attention(x, x, x, kernels::Polynomial(2, 1.0), KeyPaddingMask{Index{3}});
  (void)attention(x, x, x, kernels::ReLU{}, NoMask{});
  (void)attention_details(x, x, x, kernels::Linear{}, CausalMask{});
  (void)linear_attention(x, x, x, kernels::EluPlusOne{}, CausalMask{});
  ws.path = AttentionPath::kTiled;
  attention_into<T>(x, x, x, y, ws, kernels::Softmax{}, all_of(CausalMask{}, AlibiBias{0.5}));
  attention_into<T>(x, x, x, y, ws, kernels::Linear{}, BooleanMask{});
  (void)attention(x, x, x, kernels::Softmax{}, ScoreBias<T>{});
  (void)attention_details(x, x, x, kernels::Softmax{}, T5RelativeBias<T>{}.head(0));
  (void)alibi_slopes(3);
  (void)t5_relative_position_bucket(-5, false);
  (void)compare_to_exact(x, x, x, ExactAttention<>{});
  (void)compare_to_exact(
      x, x, x,
      with_weights([](const auto& q, const auto& k, const auto& v) { return attention(q, k, v); },
                   [](const auto& q, const auto& k, const auto& v) {
                     return attention_details(q, k, v).weights;
                   }),
      exact_attention(kernels::Softmax{}, CausalMask{}), {.runs = 1});
  (void)relative_frobenius_error(x, x);
  (void)compare_to_exact(x, x, x, ExactAttention<>{}, run_exact(x, x, x));
  (void)linear_attention(x, x, x, kernels::PositiveRandomFeatures(8, 4, 1), CausalMask{});
  (void)attention(x, x, x, kernels::TrigonometricRandomFeatures(8, 4, 1));
  (void)LinearAttentionState<T, kernels::PositiveRandomFeatures>(
      kernels::PositiveRandomFeatures(8, 4, 1))
      .query(x);
  grouped_attention_into<T>(x, x, x, y, 2, 1);
  grouped_attention_into<T>(x, x, x, y, 2, 1, kernels::Softmax{}, Alibi(2));
  const HeadsConfig config{.d_in = 8, .n_heads = 2};
  (void)MultiHeadAttention<T>(config).forward(x, all_of(CausalMask{}, HeadScoreBias<T>{}));
  (void)MultiHeadAttention<T>(config).forward(x);
  (void)MultiHeadAttention<T, kernels::EluPlusOne>(config).forward(x, CausalMask{});
  {  // caches in stored formats, the decode kernel, the cached layer paths
    KVCache<T, cache::Growable, cache::BF16> kv({.n_kv_heads = 1, .d_head = 4});
    DecodeWorkspace<T> dws;
    RowMatrix<T> yd(4, 4);
    decode_attention_into<T, cache::BF16>(x.leftCols(4), kv.key_rows(0), kv.value_rows(0), yd, dws);
    decode_attention_into<T, cache::BF16>(x.leftCols(4), kv.key_rows(0), kv.value_rows(0), yd, dws,
                                          kernels::Softmax{}, CausalMask{}, 2);
    MultiHeadAttention<T> mha(config);
    KVCache<T, cache::Growable, cache::Int8> k8(mha.kv_cache_config());
    KVCache<T, cache::SlidingWindow, cache::F16> kf(mha.kv_cache_config(), cache::SlidingWindow{4});
    (void)mha.forward_cached(x, k8);
    (void)mha.forward_cached(x, kf);
    LatentConfig lc;
    LatentCache<T, cache::Growable, cache::F16> lcache(lc);
    (void)LatentAttention<T>(lc).forward_cached(x, lcache);
    (void)LatentAttention<T, NaiveLatent>(lc).forward_cached(x, lcache);
    (void)KVCache<T>::bytes_per_token(kv.config(), 80, cache::Int8{});
    (void)LatentCache<T>::bytes_per_token(lc, 60, cache::BF16{});
    const std::uint16_t h = f16_from_float(float_from_bf16(bf16_from_float(1.0f)));
    (void)float_from_f16(h);
  }
  (void)approx::approximate_attention(approx::Nystrom(2), x, x, x, KeyPaddingMask{Index{3}});
  (void)approx::approximate_attention(approx::SequenceSketch(2), x, x, x);
  (void)approx::approximate_attention(approx::SampledAttention(2), x, x, x, CausalMask{});
  (void)approx::SampledAttention(2).parts<T>(x, x, x, BooleanMask{});
  approx::SequenceSketch sketch(2);
  sketch.prepare<T>(4);
  grouped_attention_into<T>(x, x, x, y, 2, 1, approx::Nystrom(2));
  (void)MultiHeadAttention<T, approx::SampledAttention>(config, approx::SampledAttention(2))
      .forward(x, KeyPaddingMask{Index{3}});
  (void)randomized_svd<T>(x, 2, RandomizedSvdOptions{});
  (void)truncated_svd<T>(x, 2).reconstruct();
  const GroupedQueryAttention<T> gqa({.d_in = 8, .n_heads = 2, .n_kv_heads = 1});
  (void)compress_to_latent(gqa, 2);
  (void)compress_to_latent<NaiveLatent>(gqa, 2, ExactTruncatedSvd{});
  (void)compress_to_latent_on(gqa, 2, x, RandomizedTruncatedSvd{});
  product_into<T>(x, RowMatrix<T>(8, 8), y);
  product_transposed_into<T>(x, RowMatrix<T>(8, 8), y);
  io::write_npy("unused.npy", x);
  (void)io::read_npy_matrix<T>("unused.npy");
  io::write_safetensors<T>("unused.safetensors", {{"x", x}});
  const std::vector<T> logits(4);
  (void)argmax(std::span<const T>(logits));
  const hf::LoadedCausalLM<T> loaded = hf::load<T>("unused");
  (void)generate(loaded.model, loaded.tokenizer, "unused", GenerateOptions{});
}

template void use_function_templates<float>();
template void use_function_templates<double>();

}  // namespace instantiation_check

}  // namespace kappa
