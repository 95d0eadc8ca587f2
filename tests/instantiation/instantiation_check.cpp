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
// (With NoPosition, clang 14 rejects an explicit instantiation: it does not
// skip the constructors constrained on HeadWidthPosition. Those are used below.)
template class MultiHeadAttention<float, kernels::Softmax, GroupedQuery, Rope<float>>;
template class MultiHeadAttention<double, kernels::Softmax, MultiQuery, Rope<double, Interleaved>>;
template class MultiHeadAttention<float, approx::Nystrom, MultiHead, Rope<float>>;
template class MultiHeadAttention<double, approx::SequenceSketch, GroupedQuery, Rope<double>>;
template class MultiHeadAttention<float, approx::SampledAttention, MultiQuery, Rope<float>>;
template struct approx::SampledParts<float>;
template struct approx::SampledParts<double>;
template class LatentCache<float>;
template class LatentCache<double>;
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
  const HeadsConfig config{.d_in = 8, .n_heads = 2};
  (void)MultiHeadAttention<T>(config).forward(x);
  (void)MultiHeadAttention<T, kernels::EluPlusOne>(config).forward(x, CausalMask{});
  (void)approx::approximate_attention(approx::Nystrom(2), x, x, x, KeyPaddingMask{Index{3}});
  (void)approx::approximate_attention(approx::SequenceSketch(2), x, x, x);
  (void)approx::approximate_attention(approx::SampledAttention(2), x, x, x, CausalMask{});
  (void)approx::SampledAttention(2).parts<T>(x, x, x, BooleanMask{});
  approx::SequenceSketch sketch(2);
  sketch.prepare<T>(4);
  grouped_attention_into<T>(x, x, x, y, 2, 1, approx::Nystrom(2));
  (void)MultiHeadAttention<T, approx::SampledAttention>(config, approx::SampledAttention(2))
      .forward(x, KeyPaddingMask{Index{3}});
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
