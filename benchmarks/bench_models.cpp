// benchmarks/bench_models.cpp - whole decoder-only models in float: prefill
// and decode tokens/s of a GPT-2-small-shaped model (12 layers, 12 heads,
// d 768, vocab 50257) and, with KAPPA_BENCH_LARGE=1 in the environment, a
// LLaMA-shaped model of about 1B parameters (16 layers, d 2048, 32 heads,
// 8 kv heads, ffn 8192, vocab 32000, tied), both with random weights, on 1
// and 2 threads.
//
// Bf16 variants keep the feed-forward and output-head weights in bfloat16
// (Bf16Weights): half of those bytes per decoded token.
//
// Ceilings in the same binary:
//   prefill (GEMM-bound): GFLOP/s of the model (2 x parameters x tokens) beside
//     Eigen's GEMM of the model's most common shape (128 x d) x (d x 4d);
//   decode (memory-bound: every weight is read once per token): weight bytes
//     read per second beside a memcpy of the same number of bytes.
// Each benchmark also reports the process's peak resident memory (MB).
// PyTorch's numbers for the same shapes come from benchmarks/torch_models.py.
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench_common.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/transformer/architectures.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::RowVector;

/// Uniform(-a, a) from a counter-based hash: fast, deterministic.
RowMatrix<float> fill(Index r, Index c, std::uint64_t seed, float a = 0.02f) {
  RowMatrix<float> m(r, c);
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (Index i = 0; i < m.size(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    m.data()[i] = a * (static_cast<float>(s >> 40) / static_cast<float>(1 << 23) - 1.0f);
  }
  return m;
}
RowVector<float> ones(Index n) {
  return RowVector<float>::Ones(n);
}

template <class S = kappa::DenseWeights>
std::unique_ptr<kappa::Gpt2<float, S>> make_gpt2() {
  const Index d = 768, L = 12, H = 12, V = 50257, P = 1024, F = 3072;
  std::vector<kappa::Gpt2Layer<float, S>> layers;
  for (Index l = 0; l < L; ++l) {
    kappa::MultiHeadAttention<float> attn({.d_in = d, .n_heads = H});
    attn.set_weights(fill(d, d, 10 * l + 1), fill(d, d, 10 * l + 2), fill(d, d, 10 * l + 3),
                     fill(d, d, 10 * l + 4));
    attn.set_biases(fill(1, d, 5), fill(1, d, 6), fill(1, d, 7), fill(1, d, 8));
    kappa::Mlp<float, kappa::GeluTanh, S> mlp(d, F);
    mlp.set_weights(fill(d, F, 10 * l + 5), fill(1, F, 9), fill(F, d, 10 * l + 6), fill(1, d, 11));
    layers.emplace_back(std::move(attn), kappa::LayerNorm<float>(ones(d), fill(1, d, 12), 1e-5),
                        kappa::LayerNorm<float>(ones(d), fill(1, d, 13), 1e-5), std::move(mlp));
  }
  return std::make_unique<kappa::Gpt2<float, S>>(
      kappa::Embedding<float>(fill(V, d, 1000)), kappa::LearnedPositions<float>(fill(P, d, 1001)),
      std::move(layers), kappa::LayerNorm<float>(ones(d), fill(1, d, 14), 1e-5), std::nullopt, P);
}

template <class S = kappa::DenseWeights>
std::unique_ptr<kappa::Llama<float, S>> make_llama_1b() {
  const Index d = 2048, L = 16, H = 32, Hkv = 8, dh = 64, V = 32000, F = 8192;
  std::vector<kappa::LlamaLayer<float, S>> layers;
  for (Index l = 0; l < L; ++l) {
    kappa::LlamaAttention<float> attn({.d_in = d, .n_heads = H, .d_head = dh, .n_kv_heads = Hkv},
                                      kappa::RopeOptions{.base = 500000.0});
    attn.set_weights(fill(d, H * dh, 10 * l + 1), fill(d, Hkv * dh, 10 * l + 2),
                     fill(d, Hkv * dh, 10 * l + 3), fill(H * dh, d, 10 * l + 4));
    kappa::SwiGlu<float, S> mlp(d, F);
    mlp.set_weights(fill(d, F, 10 * l + 5), fill(d, F, 10 * l + 6), fill(F, d, 10 * l + 7));
    layers.emplace_back(std::move(attn), kappa::RMSNorm<float>(ones(d), 1e-5),
                        kappa::RMSNorm<float>(ones(d), 1e-5), std::move(mlp));
  }
  return std::make_unique<kappa::Llama<float, S>>(
      kappa::Embedding<float>(fill(V, d, 1000)), kappa::NoAbsolutePositions{}, std::move(layers),
      kappa::RMSNorm<float>(ones(d), 1e-5), std::nullopt, 131072);
}

kappa::Gpt2<float>& gpt2() {
  static const std::unique_ptr<kappa::Gpt2<float>> m = make_gpt2();
  return *m;
}
kappa::Llama<float>& llama() {
  static const std::unique_ptr<kappa::Llama<float>> m = make_llama_1b();
  return *m;
}
kappa::Gpt2<float, kappa::Bf16Weights>& gpt2_bf16() {
  static const std::unique_ptr<kappa::Gpt2<float, kappa::Bf16Weights>> m =
      make_gpt2<kappa::Bf16Weights>();
  return *m;
}
kappa::Llama<float, kappa::Bf16Weights>& llama_bf16() {
  static const std::unique_ptr<kappa::Llama<float, kappa::Bf16Weights>> m =
      make_llama_1b<kappa::Bf16Weights>();
  return *m;
}

double peak_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

std::vector<kappa::TokenId> prompt(Index n, Index vocab) {
  std::vector<kappa::TokenId> ids;
  for (Index i = 0; i < n; ++i) ids.push_back(static_cast<kappa::TokenId>((i * 7919 + 13) % vocab));
  return ids;
}

/// Flops of a prefill of `tokens` with LogitsFor::kLast: 2 x (layer
/// parameters) per token (the attention scores are not counted), plus the
/// output head once.
template <class M>
double prefill_flops(const M& m, Index tokens) {
  double layer_params = 0;
  for (const auto& l : m.layers())
    layer_params += static_cast<double>(l.weight_bytes()) / sizeof(float);
  return 2.0 * layer_params * static_cast<double>(tokens) +
         2.0 * static_cast<double>(m.vocab_size() * m.d_model());
}

constexpr Index kPrompt = 128;

template <class M>
void prefill(benchmark::State& st, M& m) {
  kappa::set_num_threads(static_cast<int>(st.range(0)));
  const auto ids = prompt(kPrompt, m.vocab_size());
  auto cache = m.make_cache();
  for (auto _ : st) {
    cache.reset();
    benchmark::DoNotOptimize(m.forward_cached(ids, cache, kappa::LogitsFor::kLast).data());
  }
  st.counters["tokens/s"] =
      benchmark::Counter(kPrompt, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(prefill_flops(m, kPrompt) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  st.counters["peak_MB"] = peak_mb();
  kappa::set_num_threads(1);
}

/// One decode step after a prompt of 128 tokens (the cache is rolled back to
/// 128 after each step, so every step sees the same length).
template <class M>
void decode(benchmark::State& st, M& m) {
  kappa::set_num_threads(static_cast<int>(st.range(0)));
  const auto ids = prompt(kPrompt, m.vocab_size());
  auto cache = m.make_cache();
  (void)m.forward_cached(ids, cache, kappa::LogitsFor::kLast);
  const kappa::TokenId next = 42;
  for (auto _ : st) {
    benchmark::DoNotOptimize(
        m.forward_cached(std::span<const kappa::TokenId>(&next, 1), cache, kappa::LogitsFor::kLast)
            .data());
    cache.truncate(kPrompt);
  }
  st.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(m.decode_bytes()) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
  st.counters["read_MB"] = static_cast<double>(m.decode_bytes()) / 1e6;
  st.counters["cache_MB"] = static_cast<double>(cache.bytes()) / 1e6;
  st.counters["peak_MB"] = peak_mb();
  kappa::set_num_threads(1);
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
void BM_Model_Decode_Gpt2Small_Bf16(benchmark::State& st) {
  decode(st, gpt2_bf16());
}
void BM_Model_Decode_Llama1B_Bf16(benchmark::State& st) {
  decode(st, llama_bf16());
}

/// Where a decode step's time goes: the attention sub-layers (projections,
/// the cached attention, W^O), the feed-forward sub-layers, and the logits
/// (final norm and H E^T), timed separately on the same cache.
template <class M>
void decode_split(benchmark::State& st, M& m) {
  using Clock = std::chrono::steady_clock;
  kappa::set_num_threads(static_cast<int>(st.range(0)));
  const auto ids = prompt(kPrompt, m.vocab_size());
  auto cache = m.make_cache();
  (void)m.forward_cached(ids, cache, kappa::LogitsFor::kLast);
  const kappa::TokenId next = 42;
  double t_attn = 0, t_ffn = 0, t_logits = 0;
  for (auto _ : st) {
    RowMatrix<float> x = m.embed(std::span<const kappa::TokenId>(&next, 1), kPrompt);
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
  kappa::set_num_threads(1);
}
void BM_Model_DecodeSplit_Gpt2Small(benchmark::State& st) {
  decode_split(st, gpt2());
}
void BM_Model_DecodeSplit_Gpt2Small_Bf16(benchmark::State& st) {
  decode_split(st, gpt2_bf16());
}

/// Ceiling for decode: a memcpy of the GPT-2 weights' bytes.
void BM_Ceiling_Copy_Gpt2Weights(benchmark::State& st) {
  kappa_bench::memory_copy(st, gpt2().decode_bytes(), static_cast<int>(st.range(0)));
}
/// Ceiling for decode: a plain read (sum) of the GPT-2 weights' bytes.
void BM_Ceiling_Read_Gpt2Weights(benchmark::State& st) {
  kappa_bench::memory_read(st, gpt2().decode_bytes(), static_cast<int>(st.range(0)));
}
/// Ceiling for prefill: Eigen GEMM (128 x d) x (d x 4d), d = 768.
void BM_Ceiling_Gemm_128x768x3072(benchmark::State& st) {
  kappa::set_num_threads(static_cast<int>(st.range(0)));
  const RowMatrix<float> a = fill(kPrompt, 768, 1), b = fill(768, 3072, 2);
  RowMatrix<float> c(kPrompt, 3072);
  for (auto _ : st) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * kPrompt * 768 * 3072 * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  kappa::set_num_threads(1);
}

BENCHMARK(BM_Model_Prefill_Gpt2Small)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Model_Decode_Gpt2Small)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Model_Decode_Gpt2Small_Bf16)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Model_DecodeSplit_Gpt2Small)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Model_DecodeSplit_Gpt2Small_Bf16)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Ceiling_Read_Gpt2Weights)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Ceiling_Copy_Gpt2Weights)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Ceiling_Gemm_128x768x3072)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The 1B model needs 4.4 GB and a few seconds per iteration: only on request.
const bool kLarge = [] {
  const char* e = std::getenv("KAPPA_BENCH_LARGE");
  if (e != nullptr && e[0] == '1') {
    BENCHMARK(BM_Model_Prefill_Llama1B)
        ->Arg(1)
        ->Arg(2)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    BENCHMARK(BM_Model_Decode_Llama1B)
        ->Arg(1)
        ->Arg(2)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    BENCHMARK(BM_Model_Decode_Llama1B_Bf16)
        ->Arg(1)
        ->Arg(2)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    return true;
  }
  return false;
}();

}  // namespace

BENCHMARK_MAIN();
