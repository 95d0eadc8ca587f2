// benchmarks/bench_models.cpp - whole decoder-only models in float: prefill
// and decode tokens/s of a GPT-2-small-shaped model (12 layers, 12 heads,
// d 768, vocab 50257) and, with KAPPA_BENCH_LARGE=1 in the environment, the
// decode of a GPT-2-medium-shaped one (24 layers, 16 heads, d 1024) and a
// LLaMA-shaped model of about 1B parameters (16 layers, d 2048, 32 heads,
// 8 kv heads, ffn 8192, vocab 32000, tied), all with random weights, on 1
// and 2 threads.
//
// Storage variants keep every projection (attention's W^Q, W^K, W^V, W^O,
// the feed-forward) and the output head in bfloat16 (Bf16Weights: half the
// bytes per decoded token), GGUF's Q8_0 blocks (8.5 bits per weight), Q4_0
// (4.5) or Q4_K (4.5, in 256-weight super-blocks): the products read the
// blocks, a decode step's X is quantized to Q8_0. The token embedding stays
// in float (one row is read per token). Bf16Weights built from float W holds
// W^T, as a BF16 GGUF file does, and runs the loops such files run. Their
// weights GB/s against BM_Ceiling_Read_Gpt2Weights (a plain read) is
// the fraction of the bandwidth bound reached.
//
// BM_Model_DecodeInterleaved_* hold the Q4_0 and Q4_K matrices with their
// rows interleaved by eights, as the runtime holds a GGUF file's (kappa-
// generate's default), built through the same calls the GGUF loader makes:
// each matrix set in the layer's storage, W_gate and W_up apart, the head a
// stored matrix.
//
// BM_Model_DecodeCacheF16_* runs each decode step over a float cache and
// over an fp16 one, alternated, and reports the ratio.
//
// Ceilings in the same binary:
//   prefill (GEMM-bound): GFLOP/s of the model (2 x parameters x tokens) beside
//     Eigen's GEMM of the model's most common shape (128 x d) x (d x 4d);
//   decode (memory-bound: every weight is read once per token): weight bytes
//     read per second beside a memcpy and a plain read (sum) of the same
//     number of bytes.
// The prefill and decode benchmarks also report the process's peak resident
// memory (MB). The loops, counters and ceilings shared with bench_moe and
// bench_encoder_decoder are in bench_models_common.hpp. PyTorch's numbers for
// the same shapes come from benchmarks/torch_models.py.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "bench_models_common.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::RowVector;
using kappa_bench::fill;

RowVector<float> ones(Index n) {
  return RowVector<float>::Ones(n);
}

/// How a model's matrices are held: as the storage's constructor from float
/// makes them (rows of P; gated MLPs' W_gate | W_up fused), or Q4_0 / Q4_K
/// interleaved by eights and set through the stored-matrix calls the GGUF
/// loader makes (W_gate and W_up two products), as a loaded file's are.
enum class Held { kRows, kInterleaved };

/// The GPT-2 shapes: small (124 M parameters) and medium (355 M).
struct Gpt2Shape {
  Index d, layers, heads, ffn;
};
constexpr Gpt2Shape kSmall{768, 12, 12, 3072}, kMedium{1024, 24, 16, 4096};

/// W (fan_in x fan_out) in storage S with the rows of P interleaved by
/// eights.
template <class S>
kappa::WeightMatrix<float, S> interleaved(const RowMatrix<float>& w,
                                          kappa::BlocksAlong along = kappa::BlocksAlong::kRows) {
  return kappa::WeightMatrix<float, S>(w, along).interleaved();
}

/// layer.set_weights(w...) from float, or from the matrices interleaved.
template <class S, Held kHeld, class Layer, class... W>
void set_weights(Layer& layer, const W&... w) {
  if constexpr (kHeld == Held::kInterleaved)
    layer.set_weights(interleaved<S>(w)...);
  else
    layer.set_weights(w...);
}

/// The model from its parts; a stored head (tied, E's blocks along d) when
/// interleaved.
template <class Model, class S, Held kHeld, class Positions, class Layers, class Norm>
std::unique_ptr<Model> assemble(const RowMatrix<float>& e, Positions positions, Layers layers,
                                Norm norm, Index context) {
  if constexpr (kHeld == Held::kInterleaved)
    return std::make_unique<Model>(
        kappa::Embedding<float>(e), std::move(positions), std::move(layers), std::move(norm),
        interleaved<S>(e, kappa::BlocksAlong::kCols), /*tied=*/true, context);
  else
    return std::make_unique<Model>(kappa::Embedding<float>(e), std::move(positions),
                                   std::move(layers), std::move(norm), std::nullopt, context);
}

template <class S, Held kHeld, Gpt2Shape kShape>
std::unique_ptr<kappa::Gpt2<float, S>> make_gpt2() {
  const Index d = kShape.d, H = kShape.heads, F = kShape.ffn, V = 50257, P = 1024;
  std::vector<kappa::Gpt2Layer<float, S>> layers;
  for (Index l = 0; l < kShape.layers; ++l) {
    typename kappa::Gpt2Layer<float, S>::AttentionType attn({.d_in = d, .n_heads = H});
    set_weights<S, kHeld>(attn, fill(d, d, 10 * l + 1), fill(d, d, 10 * l + 2),
                          fill(d, d, 10 * l + 3), fill(d, d, 10 * l + 4));
    attn.set_biases(fill(1, d, 5), fill(1, d, 6), fill(1, d, 7), fill(1, d, 8));
    kappa::Mlp<float, kappa::GeluTanh, S> mlp(d, F);
    if constexpr (kHeld == Held::kInterleaved)
      mlp.set_weights(interleaved<S>(fill(d, F, 10 * l + 5)), fill(1, F, 9),
                      interleaved<S>(fill(F, d, 10 * l + 6)), fill(1, d, 11));
    else
      mlp.set_weights(fill(d, F, 10 * l + 5), fill(1, F, 9), fill(F, d, 10 * l + 6),
                      fill(1, d, 11));
    layers.emplace_back(std::move(attn), kappa::LayerNorm<float>(ones(d), fill(1, d, 12), 1e-5),
                        kappa::LayerNorm<float>(ones(d), fill(1, d, 13), 1e-5), std::move(mlp));
  }
  return assemble<kappa::Gpt2<float, S>, S, kHeld>(
      fill(V, d, 1000), kappa::LearnedPositions<float>(fill(P, d, 1001)), std::move(layers),
      kappa::LayerNorm<float>(ones(d), fill(1, d, 14), 1e-5), P);
}

template <class S, Held kHeld>
std::unique_ptr<kappa::Llama<float, S>> make_llama_1b() {
  const Index d = 2048, L = 16, H = 32, Hkv = 8, dh = 64, V = 32000, F = 8192;
  std::vector<kappa::LlamaLayer<float, S>> layers;
  for (Index l = 0; l < L; ++l) {
    kappa::LlamaAttention<float, S> attn({.d_in = d, .n_heads = H, .d_head = dh, .n_kv_heads = Hkv},
                                         kappa::RopeOptions{.base = 500000.0});
    set_weights<S, kHeld>(attn, fill(d, H * dh, 10 * l + 1), fill(d, Hkv * dh, 10 * l + 2),
                          fill(d, Hkv * dh, 10 * l + 3), fill(H * dh, d, 10 * l + 4));
    kappa::SwiGlu<float, S> mlp(d, F);
    set_weights<S, kHeld>(mlp, fill(d, F, 10 * l + 5), fill(d, F, 10 * l + 6),
                          fill(F, d, 10 * l + 7));
    layers.emplace_back(std::move(attn), kappa::RMSNorm<float>(ones(d), 1e-5),
                        kappa::RMSNorm<float>(ones(d), 1e-5), std::move(mlp));
  }
  return assemble<kappa::Llama<float, S>, S, kHeld>(fill(V, d, 1000), kappa::NoAbsolutePositions{},
                                                    std::move(layers),
                                                    kappa::RMSNorm<float>(ones(d), 1e-5), 131072);
}

/// The models, built on first use (one per storage, layout and shape).
template <class S = kappa::DenseWeights, Held kHeld = Held::kRows, Gpt2Shape kShape = kSmall>
kappa::Gpt2<float, S>& gpt2() {
  static const std::unique_ptr<kappa::Gpt2<float, S>> m = make_gpt2<S, kHeld, kShape>();
  return *m;
}
template <class S = kappa::DenseWeights, Held kHeld = Held::kRows>
kappa::Llama<float, S>& llama() {
  static const std::unique_ptr<kappa::Llama<float, S>> m = make_llama_1b<S, kHeld>();
  return *m;
}

constexpr Index kPrompt = 128;
const kappa::TokenId kNext = 42;  // the token every decode step decodes

/// A prefill of a 128-token prompt; GFLOP/s count 2 x all the layers'
/// parameters per token.
template <class M>
void prefill(benchmark::State& st, M& m) {
  kappa_bench::run_prefill(
      st, m, kappa_bench::spread_tokens(kPrompt, m.vocab_size()),
      kappa_bench::prefill_flops(m, kPrompt, [](const auto& l) { return l.weight_bytes(); }));
}

/// One decode step (token 42) after a prompt of 128 tokens (the cache is
/// rolled back to 128 after each step, so every step sees the same length).
template <class M>
void decode(benchmark::State& st, M& m) {
  kappa_bench::run_decode(st, m, kappa_bench::spread_tokens(kPrompt, m.vocab_size()),
                          std::span<const kappa::TokenId>(&kNext, 1),
                          kappa_bench::CacheCounter::kYes);
}

void BM_Model_Prefill_Gpt2Small(benchmark::State& st) {
  prefill(st, gpt2());
}
void BM_Model_Decode_Gpt2Small(benchmark::State& st) {
  decode(st, gpt2());
}
void BM_Model_Prefill_Llama1B(benchmark::State& st) {
  prefill(st, llama());
}
void BM_Model_Decode_Llama1B(benchmark::State& st) {
  decode(st, llama());
}
/// Decode with the weights in storage S (Bf16Weights, Q8_0Weights, ...).
template <class S>
void BM_Model_Decode_Gpt2Small_(benchmark::State& st) {
  decode(st, gpt2<S>());
}
template <class S>
void BM_Model_Decode_Llama1B_(benchmark::State& st) {
  decode(st, llama<S>());
}
/// Decode with the Q4_0 or Q4_K matrices held interleaved by eights.
template <class S>
void BM_Model_DecodeInterleaved_Gpt2Small_(benchmark::State& st) {
  decode(st, gpt2<S, Held::kInterleaved>());
}
template <class S>
void BM_Model_DecodeInterleaved_Llama1B_(benchmark::State& st) {
  decode(st, llama<S, Held::kInterleaved>());
}
/// GPT-2 medium: decode with the weights in storage S, held as kHeld.
template <class S, Held kHeld>
void BM_Model_Decode_Gpt2Medium_(benchmark::State& st) {
  decode(st, gpt2<S, kHeld, kMedium>());
}

/// Where a decode step's time goes: the attention sub-layers (projections,
/// the cached attention, W^O), the feed-forward sub-layers, and the logits
/// (final norm and H E^T), timed separately on the same cache.
template <class M>
void decode_split(benchmark::State& st, M& m) {
  using Clock = std::chrono::steady_clock;
  const kappa_bench::ArgThreads threads(st);
  const auto ids = kappa_bench::spread_tokens(kPrompt, m.vocab_size());
  auto cache = m.make_cache();
  (void)m.forward_cached(ids, cache, kappa::LogitsFor::kLast);
  double t_attn = 0, t_ffn = 0, t_logits = 0;
  for (auto _ : st) {
    RowMatrix<float> x = m.embed(std::span<const kappa::TokenId>(&kNext, 1), kPrompt);
    for (std::size_t l = 0; l < m.layers().size(); ++l) {
      const auto& layer = m.layers()[l];
      const auto t0 = Clock::now();
      RowMatrix<float> a = x;
      layer.norm_attention().apply(a);
      x += layer.attention().forward_cached(a, cache.layers[l]);
      const auto t1 = Clock::now();
      RowMatrix<float> f = x;
      layer.norm_feed_forward().apply(f);
      x += layer.feed_forward().forward(f);
      const auto t2 = Clock::now();
      t_attn += std::chrono::duration<double>(t1 - t0).count();
      t_ffn += std::chrono::duration<double>(t2 - t1).count();
    }
    const auto t3 = Clock::now();
    m.final_norm().apply(x);
    benchmark::DoNotOptimize(m.project(x).data());
    t_logits += std::chrono::duration<double>(Clock::now() - t3).count();
    cache.truncate(kPrompt);
  }
  const double n = static_cast<double>(st.iterations());
  st.counters["attention_ms"] = 1e3 * t_attn / n;
  st.counters["ffn_ms"] = 1e3 * t_ffn / n;
  st.counters["logits_ms"] = 1e3 * t_logits / n;
  st.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Model_DecodeSplit_Gpt2Small(benchmark::State& st) {
  decode_split(st, gpt2());
}
template <class S>
void BM_Model_DecodeSplit_Gpt2Small_(benchmark::State& st) {
  decode_split(st, gpt2<S>());
}

/// The cache's bytes: a decode step over a float cache and one over an fp16
/// cache (cache::F16, half the bytes: llama.cpp's default) of the same 128
/// positions, both in every iteration, in alternating order, so that both
/// see the same state of the machine (separate runs on this VM move by
/// 15-30 %). Counters: tokens/s each way and f16_speedup (time with the
/// float cache over time with the fp16 one).
template <class S>
void BM_Model_DecodeCacheF16_Gpt2Small_(benchmark::State& st) {
  auto& m = gpt2<S>();
  const kappa_bench::ArgThreads threads(st);
  const auto ids = kappa_bench::spread_tokens(kPrompt, m.vocab_size());
  auto c32 = m.make_cache();
  auto c16 = m.template make_cache<kappa::cache::F16>();
  (void)m.forward_cached(ids, c32, kappa::LogitsFor::kLast);
  (void)m.forward_cached(ids, c16, kappa::LogitsFor::kLast);
  const std::span<const kappa::TokenId> next(&kNext, 1);
  const auto step = [&](auto& cache) {
    benchmark::DoNotOptimize(m.forward_cached(next, cache, kappa::LogitsFor::kLast).data());
    cache.truncate(kPrompt);
  };
  const auto [t32, t16] = kappa_bench::alternate(
      st, [&] { step(c32); }, [&] { step(c16); });
  const double n = static_cast<double>(st.iterations());
  st.counters["float_cache_tokens/s"] = n / t32;
  st.counters["f16_cache_tokens/s"] = n / t16;
  st.counters["f16_speedup"] = t32 / t16;
  st.counters["float_cache_MB"] = static_cast<double>(c32.bytes()) / 1e6;
  st.counters["f16_cache_MB"] = static_cast<double>(c16.bytes()) / 1e6;
}

/// Ceiling for decode: a memcpy of the GPT-2 weights' bytes.
void BM_Ceiling_Copy_Gpt2Weights(benchmark::State& st) {
  kappa_bench::memory_copy(st, gpt2().decode_bytes(), kappa_bench::arg_threads(st));
}
/// Ceiling for decode: a plain read (sum) of the GPT-2 weights' bytes.
void BM_Ceiling_Read_Gpt2Weights(benchmark::State& st) {
  kappa_bench::memory_read(st, gpt2().decode_bytes(), kappa_bench::arg_threads(st));
}
/// Ceiling for prefill: Eigen GEMM (128 x d) x (d x 4d), d = 768.
void BM_Ceiling_Gemm_128x768x3072(benchmark::State& st) {
  kappa_bench::gemm_ceiling(st, fill(kPrompt, 768, 1), fill(768, 3072, 2));
}

using kappa_bench::decode_on_1_and_2_threads;
using kappa_bench::on_1_and_2_threads;
BENCHMARK(BM_Model_Prefill_Gpt2Small)->Apply(on_1_and_2_threads);
BENCHMARK(BM_Model_Decode_Gpt2Small)->Apply(decode_on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Small_, kappa::Bf16Weights)
    ->Apply(decode_on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Small_, kappa::Q8_0Weights)
    ->Apply(decode_on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Small_, kappa::Q4_0Weights)
    ->Apply(decode_on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Small_, kappa::Q4_KWeights)
    ->Apply(decode_on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_DecodeInterleaved_Gpt2Small_, kappa::Q4_0Weights)
    ->Apply(decode_on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_DecodeInterleaved_Gpt2Small_, kappa::Q4_KWeights)
    ->Apply(decode_on_1_and_2_threads);
BENCHMARK(BM_Model_DecodeSplit_Gpt2Small)->Apply(on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_DecodeSplit_Gpt2Small_, kappa::Bf16Weights)->Apply(on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_DecodeSplit_Gpt2Small_, kappa::Q4_KWeights)->Apply(on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_DecodeCacheF16_Gpt2Small_, kappa::Bf16Weights)
    ->Apply(on_1_and_2_threads);
BENCHMARK_TEMPLATE(BM_Model_DecodeCacheF16_Gpt2Small_, kappa::Q4_KWeights)
    ->Apply(on_1_and_2_threads);
BENCHMARK(BM_Ceiling_Read_Gpt2Weights)->Apply(on_1_and_2_threads);
BENCHMARK(BM_Ceiling_Copy_Gpt2Weights)->Apply(on_1_and_2_threads);
BENCHMARK(BM_Ceiling_Gemm_128x768x3072)->Apply(on_1_and_2_threads);

// GPT-2 medium (1.4 GB in float) and the 1B model (4.4 GB, a few seconds per
// iteration): only on request.
const bool kLarge = [] {
  const char* e = std::getenv("KAPPA_BENCH_LARGE");
  if (e != nullptr && e[0] == '1') {
    using kappa::Bf16Weights, kappa::DenseWeights, kappa::Q4_0Weights, kappa::Q4_KWeights,
        kappa::Q8_0Weights;
    BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Medium_, DenseWeights, Held::kRows)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Medium_, Bf16Weights, Held::kRows)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Medium_, Q8_0Weights, Held::kRows)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Medium_, Q4_0Weights, Held::kRows)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Medium_, Q4_KWeights, Held::kRows)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Medium_, Q4_0Weights, Held::kInterleaved)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Gpt2Medium_, Q4_KWeights, Held::kInterleaved)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK(BM_Model_Prefill_Llama1B)->Apply(on_1_and_2_threads);
    BENCHMARK(BM_Model_Decode_Llama1B)->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Llama1B_, kappa::Bf16Weights)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Llama1B_, kappa::Q8_0Weights)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Llama1B_, kappa::Q4_0Weights)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_Decode_Llama1B_, kappa::Q4_KWeights)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_DecodeInterleaved_Llama1B_, kappa::Q4_0Weights)
        ->Apply(decode_on_1_and_2_threads);
    BENCHMARK_TEMPLATE(BM_Model_DecodeInterleaved_Llama1B_, kappa::Q4_KWeights)
        ->Apply(decode_on_1_and_2_threads);
    return true;
  }
  return false;
}();

}  // namespace

BENCHMARK_MAIN();
