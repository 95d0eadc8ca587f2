// bench_latent: multi-head latent attention (DeepSeek-V2 MLA) against
// multi-head and grouped-query attention of the same model width.
//
// Shapes are DeepSeek-V2-Lite's attention layer: d_model 2048, 16 heads,
// d_h = d_v = 128, d_R = 64, d_c = 512, no query compression. MHA and GQA
// (4 kv heads) use 16 heads of 128 too. float.
//
//   BM_Decode<Layout>/len/threads   one token through the whole layer over a
//       cache of `len` tokens (the cache is rolled back after each step, so
//       its length stays fixed). Counters: tokens/s; cache_GB/s = live cache
//       bytes / step time (what a step must read at least); total_GB/s adds
//       the layer's weights, which a step reads too; cache_GFLOP/s = flops of
//       the work over the cache (the absorbed path is compute-bound).
//   BM_MemoryCopy/bytes/threads   memcpy of the same number of bytes as a
//       cache: the bandwidth ceiling, in the same binary.
//   BM_Prefill<Path>/N   causal prefill of N tokens through the layer, tokens/s
//       and GFLOP/s of that path's own flop count, beside BM_PrefillGemm, one
//       Eigen GEMM N x 2048 x 2048 (the machine's GEMM rate at this width).
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <cstring>
#include <vector>

#include "kappa/cache/kv_cache.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/heads/multi_head_attention.hpp"

namespace {

using T = float;
using kappa::Index;
using Matrix = kappa::RowMatrix<T>;

constexpr Index kDModel = 2048, kHeads = 16, kDHead = 128, kDRope = 64, kDLatent = 512,
                kGqaKvHeads = 4;

Matrix random(Index rows, Index cols, unsigned seed = 1) {
  std::srand(seed);
  return Matrix::Random(rows, cols) * T(0.05);
}

bool set_threads(benchmark::State& st, int threads) {
  kappa::set_num_threads(threads);
  if (threads > 1 && kappa::num_threads() != threads) {
    st.SkipWithError("built without OpenMP: only 1 thread");
    return false;
  }
  return true;
}

kappa::LatentConfig latent_config() {
  return {.d_model = kDModel,
          .n_heads = kHeads,
          .d_head = kDHead,
          .d_rope = kDRope,
          .d_v = kDHead,
          .d_latent = kDLatent};
}

kappa::LatentWeights<T> latent_weights() {
  const auto c = latent_config();
  kappa::LatentWeights<T> w;
  w.w_uq = random(kDModel, kHeads * kDHead, 2);
  w.w_qr = random(kDModel, kHeads * kDRope, 3);
  w.w_dkv = random(kDModel, kDLatent, 4);
  w.kv_norm = kappa::RowVector<T>::Ones(kDLatent);
  w.w_uk = random(kDLatent, kHeads * kDHead, 5);
  w.w_uv = random(kDLatent, kHeads * c.value_width(), 6);
  w.w_kr = random(kDModel, kDRope, 7);
  w.w_o = random(kHeads * kDHead, kDModel, 8);
  return w;
}

double weight_bytes(const kappa::LatentWeights<T>& w) {
  return double(w.w_uq.size() + w.w_qr.size() + w.w_dkv.size() + w.w_uk.size() + w.w_uv.size() +
                w.w_kr.size() + w.w_o.size()) *
         sizeof(T);
}

void decode_counters(benchmark::State& st, double cache_bytes, double weights) {
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["cache_GB/s"] =
      benchmark::Counter(cache_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["total_GB/s"] = benchmark::Counter((cache_bytes + weights) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  st.counters["cache_MB"] = cache_bytes * 1e-6;
}

template <class Path>
void BM_DecodeMLA(benchmark::State& st) {
  const Index len = st.range(0);
  if (!set_threads(st, static_cast<int>(st.range(1)))) return;
  kappa::LatentAttention<T, Path> mla(latent_config());
  mla.set_weights(latent_weights());
  kappa::LatentCache<T> cache(latent_config());
  cache.reserve(len + 1);
  const Matrix rows = random(1024, kDLatent + kDRope, 9);
  for (Index t = 0; t < len; t += 1024) cache.append(rows.topRows(std::min<Index>(1024, len - t)));
  const Matrix x = random(1, kDModel, 10);
  (void)mla.forward_cached(x, cache);  // warm-up
  cache.truncate(len);
  for (auto _ : st) {
    Matrix y = mla.forward_cached(x, cache);
    benchmark::DoNotOptimize(y.data());
    cache.truncate(len);
  }
  decode_counters(st, double(cache.bytes()), weight_bytes(mla.weights()));
  // Flops over the cache per step: absorbed, scores and values against the
  // latent rows for H stacked heads; naive, up-projecting K^C_h and V_h for
  // every cached token first. Decode over the cache is compute-bound for the
  // absorbed path (about 34 flops per cached byte with 16 heads).
  const double L = double(len), H = kHeads, dc = kDLatent, dr = kDRope, dh = kDHead;
  const double flops = std::is_same_v<Path, kappa::AbsorbedLatent>
                           ? 2 * L * H * (dc + dr) + 2 * L * H * dc
                           : 2 * L * dc * H * (dh + dh) + 2 * L * H * (dh + dr) + 2 * L * H * dh;
  st.counters["cache_GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_DecodeMLA_Absorbed(benchmark::State& st) {
  BM_DecodeMLA<kappa::AbsorbedLatent>(st);
}
void BM_DecodeMLA_Naive(benchmark::State& st) {
  BM_DecodeMLA<kappa::NaiveLatent>(st);
}

template <class Layer>
void decode_heads(benchmark::State& st, Index kv_heads) {
  const Index len = st.range(0);
  if (!set_threads(st, static_cast<int>(st.range(1)))) return;
  Layer attn({.d_in = kDModel, .n_heads = kHeads, .d_head = kDHead, .n_kv_heads = kv_heads});
  const Matrix w_q = random(kDModel, kHeads * kDHead, 2),
               w_k = random(kDModel, kv_heads * kDHead, 3),
               w_v = random(kDModel, kv_heads * kDHead, 4),
               w_o = random(kHeads * kDHead, kDModel, 5);
  attn.set_weights(w_q, w_k, w_v, w_o);
  kappa::KVCache<T> cache(kappa::KVCacheConfig{.n_kv_heads = kv_heads, .d_head = kDHead});
  cache.reserve(len + 1);
  const Matrix kv = random(1024, kv_heads * kDHead, 6);
  for (Index t = 0; t < len; t += 1024) {
    const Index n = std::min<Index>(1024, len - t);
    cache.append(kv.topRows(n), kv.topRows(n));
  }
  const Matrix x = random(1, kDModel, 7);
  (void)attn.forward_cached(x, cache);
  cache.truncate(len);
  for (auto _ : st) {
    Matrix y = attn.forward_cached(x, cache);
    benchmark::DoNotOptimize(y.data());
    cache.truncate(len);
  }
  decode_counters(st, double(cache.bytes()),
                  double(w_q.size() + w_k.size() + w_v.size() + w_o.size()) * sizeof(T));
}
void BM_DecodeMHA(benchmark::State& st) {
  decode_heads<kappa::MultiHeadAttention<T>>(st, kHeads);
}
void BM_DecodeGQA(benchmark::State& st) {
  decode_heads<kappa::GroupedQueryAttention<T>>(st, kGqaKvHeads);
}

// Args: cache length, bytes per token (which layout's cache), threads.
void BM_MemoryCopy(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(2));
  if (!set_threads(st, threads)) return;
  kappa_bench::memory_copy(st, static_cast<std::size_t>(st.range(0) * st.range(1)), threads);
}

// Flops of one causal prefill of n tokens, per path (multiply-add = 2).
double prefill_flops(Index n, bool absorbed) {
  const double N = double(n), P = N * (N + 1) / 2, d = kDModel, H = kHeads, dh = kDHead,
               dr = kDRope, dc = kDLatent, dv = kDHead;
  const double proj = 2 * N * d * (dc + dr) + 2 * N * d * H * (dh + dr) + 2 * N * H * dv * d;
  if (absorbed) {
    return proj + 2 * N * H * dh * dc + 2 * P * H * (dc + dr) + 2 * P * H * dc +
           2 * N * H * dc * dv;
  }
  return proj + 2 * N * dc * H * (dh + dv) + 2 * P * H * (dh + dr) + 2 * P * H * dv;
}

template <class Path>
void BM_PrefillMLA(benchmark::State& st) {
  const Index n = st.range(0);
  if (!set_threads(st, static_cast<int>(st.range(1)))) return;
  kappa::LatentAttention<T, Path> mla(latent_config());
  mla.set_weights(latent_weights());
  const Matrix x = random(n, kDModel, 11);
  for (auto _ : st) {
    Matrix y = mla.forward(x);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["tokens/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(prefill_flops(n, std::is_same_v<Path, kappa::AbsorbedLatent>) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
void BM_PrefillMLA_Absorbed(benchmark::State& st) {
  BM_PrefillMLA<kappa::AbsorbedLatent>(st);
}
void BM_PrefillMLA_Naive(benchmark::State& st) {
  BM_PrefillMLA<kappa::NaiveLatent>(st);
}

void BM_PrefillGemm(benchmark::State& st) {
  const Index n = st.range(0);
  if (!set_threads(st, static_cast<int>(st.range(1)))) return;
  const Matrix x = random(n, kDModel, 1), w = random(kDModel, kDModel, 2);
  Matrix y = Matrix::Zero(n, kDModel);
  for (auto _ : st) {
    y.noalias() = x * w;
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n) * kDModel * kDModel * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void decode_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int len : {1024, 8192, 32768}) b->Args({len, threads});
  b->ArgNames({"len", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
void copy_args(benchmark::internal::Benchmark* b) {
  const Index per_token[] = {(kDLatent + kDRope) * 4, 2 * kGqaKvHeads * kDHead * 4,
                             2 * kHeads * kDHead * 4};  // MLA, GQA, MHA bytes per token
  for (int threads : {1, 2})
    for (Index bpt : per_token) b->Args({32768, bpt, threads});
  b->ArgNames({"len", "bytes_per_token", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
void prefill_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int n : {512, 2048}) b->Args({n, threads});
  b->ArgNames({"N", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_DecodeMLA_Absorbed)->Apply(decode_args);
BENCHMARK(BM_DecodeMLA_Naive)->Apply(decode_args);
BENCHMARK(BM_DecodeMHA)->Apply(decode_args);
BENCHMARK(BM_DecodeGQA)->Apply(decode_args);
BENCHMARK(BM_MemoryCopy)->Apply(copy_args);
BENCHMARK(BM_PrefillMLA_Absorbed)->Apply(prefill_args);
BENCHMARK(BM_PrefillMLA_Naive)->Apply(prefill_args);
BENCHMARK(BM_PrefillGemm)->Apply(prefill_args);

}  // namespace

BENCHMARK_MAIN();
