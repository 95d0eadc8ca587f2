// benchmarks/bench_encoder_decoder.cpp - one decode step of the paper's
// encoder-decoder Transformer at base size (d 512, 8 heads, 6 + 6 layers,
// ffn 2048, vocab 32000, random weights) over an encoder output M of
// N_src = 512 rows, after a 32-token target prefix, on 1 and 2 threads.
//
//   CrossCache   the decoder layers' caches hold K = M W^K and V = M W^V,
//                projected once per sequence (set_memory); a step reads them.
//   Recompute    set_memory before every step: K and V of M projected again
//                at each step, as decode_cached did before the cross cache
//                (4 N_src d^2 flops per layer and step).
// The ratio of their tokens/s is the gain of the cross cache.
//
// Ceilings in the same binary: a step is memory-bound; it reads the decoder
// weights it uses (self-attention, W^Q and W^O of the cross-attention, the
// feed-forward, the generator), the cross K, V (2 N_src d per layer) and the
// self-attention cache. GB/s of the CrossCache step beside a plain read of
// the same bytes; the Recompute step's projections as GFLOP/s beside Eigen's
// GEMM of their shape (N_src x d) x (d x 2d).
//
// The random weights, the token list, the thread setting and the ceilings are
// those of bench_models_common.hpp (shared with bench_models and bench_moe).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <span>

#include "bench_models_common.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::RowVector;
using kappa_bench::fill;

constexpr Index kD = 512, kHeads = 8, kLayers = 6, kFfn = 2048, kVocab = 32000, kSrc = 512,
                kPrefix = 32;

kappa::MultiHeadAttention<float> attention(std::uint64_t seed) {
  kappa::MultiHeadAttention<float> a({.d_in = kD, .n_heads = kHeads});
  a.set_weights(fill(kD, kD, seed), fill(kD, kD, seed + 1), fill(kD, kD, seed + 2),
                fill(kD, kD, seed + 3));
  a.set_biases(fill(1, kD, seed + 4), fill(1, kD, seed + 5), fill(1, kD, seed + 6),
               fill(1, kD, seed + 7));
  return a;
}
kappa::Mlp<float, kappa::Relu> feed_forward(std::uint64_t seed) {
  kappa::Mlp<float, kappa::Relu> m(kD, kFfn);
  m.set_weights(fill(kD, kFfn, seed), fill(1, kFfn, seed + 1), fill(kFfn, kD, seed + 2),
                fill(1, kD, seed + 3));
  return m;
}
kappa::LayerNorm<float> norm(std::uint64_t seed) {
  return kappa::LayerNorm<float>(RowVector<float>::Ones(kD), fill(1, kD, seed), 1e-5f);
}

std::unique_ptr<kappa::PaperTransformer<float>> make_base() {
  kappa::PaperTransformer<float>::Parts p{.src_embed = kappa::Embedding<float>(fill(kVocab, kD, 1)),
                                          .tgt_embed = kappa::Embedding<float>(fill(kVocab, kD, 2)),
                                          .scale_embedding = true,
                                          .encoder = {},
                                          .encoder_norm = std::nullopt,
                                          .decoder = {},
                                          .decoder_norm = norm(3),
                                          .generator = fill(kVocab, kD, 4),
                                          .generator_bias = fill(1, kVocab, 5)};
  // The encoder is not part of a decode step: M is given below.
  for (Index l = 0; l < kLayers; ++l) {
    const auto s = static_cast<std::uint64_t>(100 * (l + 1));
    p.decoder.emplace_back(attention(s), attention(s + 10), norm(s + 20), norm(s + 21),
                           norm(s + 22), feed_forward(s + 30));
  }
  return std::make_unique<kappa::PaperTransformer<float>>(std::move(p));
}

kappa::PaperTransformer<float>& base() {
  static const std::unique_ptr<kappa::PaperTransformer<float>> m = make_base();
  return *m;
}
const RowMatrix<float>& memory() {
  static const RowMatrix<float> m = fill(kSrc, kD, 7, 1.0f);  // M (N_src, d)
  return m;
}

/// Bytes a cached step reads: per layer the self-attention (4 d^2 + 4 d),
/// W^Q, W^O of the cross-attention (2 d^2 + 2 d), the feed-forward (2 d ffn +
/// ffn + d), the cross K, V (2 N_src d) and the self cache (2 t d); the
/// generator (N_T d + N_T) and one embedding row.
double step_bytes(Index t) {
  const double d = kD, per_layer = 6 * d * d + 6 * d + 2 * d * kFfn + kFfn + d + 2.0 * kSrc * d +
                                   2.0 * static_cast<double>(t) * d;
  return sizeof(float) * (kLayers * per_layer + static_cast<double>(kVocab) * (d + 1) + d);
}

template <bool kRecompute>
void decode_step(benchmark::State& st) {
  const kappa_bench::ArgThreads threads(st);
  const auto& m = base();
  auto cache = m.make_cache();
  m.set_memory(memory(), cache);
  (void)m.decode_cached(kappa_bench::spread_tokens(kPrefix, kVocab), cache);
  const kappa::TokenId next = 42;
  for (auto _ : st) {
    if constexpr (kRecompute) m.set_memory(memory(), cache);  // K, V of M again, as before
    benchmark::DoNotOptimize(
        m.decode_cached(std::span<const kappa::TokenId>(&next, 1), cache).data());
    for (auto& c : cache) c.truncate(kPrefix);
  }
  st.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  if constexpr (kRecompute) {
    st.counters["proj_GFLOP"] = 4.0 * kLayers * kSrc * kD * kD * 1e-9;  // per step
  } else {
    st.counters["GB/s"] = benchmark::Counter(step_bytes(kPrefix + 1) * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
    st.counters["read_MB"] = step_bytes(kPrefix + 1) / 1e6;
  }
  std::size_t cross = 0;
  for (const auto& c : cache) cross += c.memory().bytes();
  st.counters["cross_cache_MB"] = static_cast<double>(cross) / 1e6;
}

void BM_EncDec_DecodeStep_CrossCache(benchmark::State& st) {
  decode_step<false>(st);
}
void BM_EncDec_DecodeStep_Recompute(benchmark::State& st) {
  decode_step<true>(st);
}
/// Ceiling of the cached step: a plain read of the bytes it reads.
void BM_Ceiling_Read_EncDecStep(benchmark::State& st) {
  kappa_bench::memory_read(st, static_cast<std::size_t>(step_bytes(kPrefix + 1)),
                           kappa_bench::arg_threads(st));
}
/// What Recompute pays per layer: Eigen GEMM M [W^K W^V], (N_src x d) x (d x 2d).
void BM_Ceiling_Gemm_MemoryKV(benchmark::State& st) {
  kappa_bench::gemm_ceiling(st, memory(), fill(kD, 2 * kD, 9));
}

using kappa_bench::on_1_and_2_threads;
BENCHMARK(BM_EncDec_DecodeStep_CrossCache)->Apply(on_1_and_2_threads);
BENCHMARK(BM_EncDec_DecodeStep_Recompute)->Apply(on_1_and_2_threads);
BENCHMARK(BM_Ceiling_Read_EncDecStep)->Apply(on_1_and_2_threads);
BENCHMARK(BM_Ceiling_Gemm_MemoryKV)->Apply(on_1_and_2_threads);

}  // namespace

BENCHMARK_MAIN();
