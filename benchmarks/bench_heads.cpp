// bench_heads: multi-head (MHA), grouped-query (GQA) and multi-query (MQA)
// attention with 32 query heads of d_head 128 (H_kv = 32, 8, 1), float.
//
// Prefill (compute-bound): GFLOP/s and tokens/s of
//   BM_PrefillAttention  the attention step on projected Q, K, V
//                        (grouped_attention_into), no mask and causal;
//   BM_PrefillGemm       Eigen GEMM of the same shapes (S = s Q_h K_g^T,
//                        Y_h = S V_g per head, no kernel): the ceiling;
//   BM_PrefillLayer      the whole layer (d_model 4096: projections, heads, W^O)
//   BM_PrefillLayerGemm  the same GEMMs in plain Eigen.
// Flops: 4 N_Q N_KV d_head per head for attention (visible pairs only when
// causal), 2 N d_in d_out per projection.
//
// Decode (memory-bound): one new token against a cache of 1k, 8k, 32k tokens.
//   BM_DecodeAttention   the attention step of the token over the cache; GB/s
//                        is the bytes of cache read (K and V of every kv head)
//                        per second;
//   BM_MemoryCopy        memcpy of the same number of bytes (GB/s = bytes
//                        copied, i.e. read, per second): the ceiling;
//   BM_MemoryRead        a plain sum over the same bytes (read-only);
//   BM_DecodeLayer       forward_cached of the whole layer (projections read
//                        the 4096-wide weights too), latency per token.
// The last argument is the thread count (1 or 2; OpenMP build).
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/heads/grouped_attention.hpp"
#include "kappa/heads/multi_head_attention.hpp"

namespace {

using kappa::Index;
using T = float;
using Matrix = kappa::RowMatrix<T>;

constexpr Index kHeads = 32;
constexpr Index kDHead = 128;
constexpr Index kDModel = kHeads * kDHead;  // 4096
constexpr Index kKvHeads[] = {32, 8, 1};    // MHA, GQA, MQA
const char* const kLayoutName[] = {"MHA", "GQA", "MQA"};

Matrix random(Index r, Index c, T amp = T(1)) {
  Matrix m = Matrix::Random(r, c);
  m *= amp;
  return m;
}

void set_threads(benchmark::State& st, int threads) {
  kappa::set_num_threads(threads);
  st.SetLabel(std::string(kLayoutName[st.range(0)]) + " threads=" + std::to_string(threads));
}

double attention_flops(Index n, bool causal) {
  const double pairs = causal ? 0.5 * double(n) * double(n + 1) : double(n) * double(n);
  return 4.0 * pairs * double(kDHead) * double(kHeads);
}

// ---- Prefill --------------------------------------------------------------------

// Args: layout, N, causal (0/1), threads.
void BM_PrefillAttention(benchmark::State& st) {
  const Index h_kv = kKvHeads[st.range(0)], n = st.range(1);
  const bool causal = st.range(2) != 0;
  set_threads(st, static_cast<int>(st.range(3)));
  const Matrix q = random(n, kHeads * kDHead), k = random(n, h_kv * kDHead),
               v = random(n, h_kv * kDHead);
  Matrix y(n, kHeads * kDHead);
  for (auto _ : st) {
    if (causal) {
      kappa::grouped_attention_into<T>(q, k, v, y, kHeads, h_kv, kappa::kernels::Softmax{},
                                       kappa::CausalMask{});
    } else {
      kappa::grouped_attention_into<T>(q, k, v, y, kHeads, h_kv);
    }
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(attention_flops(n, causal) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

// Args: layout, N, threads. The same products as attention without a mask.
void BM_PrefillGemm(benchmark::State& st) {
  const Index h_kv = kKvHeads[st.range(0)], n = st.range(1), grp = kHeads / h_kv;
  set_threads(st, static_cast<int>(st.range(2)));
  const Matrix q = random(n, kHeads * kDHead), k = random(n, h_kv * kDHead),
               v = random(n, h_kv * kDHead);
  Matrix y(n, kHeads * kDHead), s(n, n);
  const T scale = T(1) / std::sqrt(T(kDHead));
  for (auto _ : st) {
    for (Index h = 0; h < kHeads; ++h) {
      const Index g = h / grp;
      s.noalias() = (scale * q.middleCols(h * kDHead, kDHead)) *
                    k.middleCols(g * kDHead, kDHead).transpose();                         // (N, N)
      y.middleCols(h * kDHead, kDHead).noalias() = s * v.middleCols(g * kDHead, kDHead);  // (N, d)
    }
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(attention_flops(n, false) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

double projection_flops(Index n, Index h_kv) {
  return 2.0 * double(n) * double(kDModel) * double(kHeads * kDHead + 2 * h_kv * kDHead + kDModel);
}

kappa::GroupedQueryAttention<T> make_layer(Index h_kv) {
  kappa::GroupedQueryAttention<T> attn(
      {.d_in = kDModel, .n_heads = kHeads, .d_head = kDHead, .n_kv_heads = h_kv});
  const T a = T(1) / std::sqrt(T(kDModel));
  attn.set_weights(random(kDModel, kHeads * kDHead, a), random(kDModel, h_kv * kDHead, a),
                   random(kDModel, h_kv * kDHead, a), random(kHeads * kDHead, kDModel, a));
  return attn;
}

// Args: layout, N, threads. Causal self-attention of N tokens.
void BM_PrefillLayer(benchmark::State& st) {
  const Index h_kv = kKvHeads[st.range(0)], n = st.range(1);
  set_threads(st, static_cast<int>(st.range(2)));
  const auto attn = make_layer(h_kv);
  const Matrix x = random(n, kDModel);
  for (auto _ : st) {
    Matrix y = attn.forward(x, kappa::CausalMask{});
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter((projection_flops(n, h_kv) + attention_flops(n, true)) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

// Args: layout, N, threads. The layer's GEMMs in plain Eigen, attention GEMMs
// over the full N x N (what a causal kernel could skip is counted as in
// BM_PrefillLayer, so the GFLOP/s compare the same useful work).
void BM_PrefillLayerGemm(benchmark::State& st) {
  const Index h_kv = kKvHeads[st.range(0)], n = st.range(1), grp = kHeads / h_kv;
  set_threads(st, static_cast<int>(st.range(2)));
  const T a = T(1) / std::sqrt(T(kDModel));
  const Matrix w_q = random(kDModel, kHeads * kDHead, a), w_k = random(kDModel, h_kv * kDHead, a),
               w_v = random(kDModel, h_kv * kDHead, a), w_o = random(kHeads * kDHead, kDModel, a);
  const Matrix x = random(n, kDModel);
  Matrix q(n, kHeads * kDHead), k(n, h_kv * kDHead), v(n, h_kv * kDHead), y(n, kHeads * kDHead),
      s(n, n), out(n, kDModel);
  const T scale = T(1) / std::sqrt(T(kDHead));
  for (auto _ : st) {
    q.noalias() = x * w_q;  // (N, H d)
    k.noalias() = x * w_k;  // (N, H_kv d)
    v.noalias() = x * w_v;  // (N, H_kv d)
    for (Index h = 0; h < kHeads; ++h) {
      const Index g = h / grp;
      s.noalias() = (scale * q.middleCols(h * kDHead, kDHead)) *
                    k.middleCols(g * kDHead, kDHead).transpose();  // (N, N)
      y.middleCols(h * kDHead, kDHead).noalias() = s * v.middleCols(g * kDHead, kDHead);
    }
    out.noalias() = y * w_o;  // (N, d_model)
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter((projection_flops(n, h_kv) + attention_flops(n, true)) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

// ---- Decode ----------------------------------------------------------------------

/// A cache of `len` random tokens for H_kv heads (room for a few more).
kappa::KVCache<T> filled_cache(Index h_kv, Index len) {
  kappa::KVCache<T> cache({.n_kv_heads = h_kv, .d_head = kDHead}, kappa::cache::Growable{len + 8});
  const Index chunk = 1024;
  const Matrix k = random(chunk, h_kv * kDHead), v = random(chunk, h_kv * kDHead);
  for (Index t = 0; t < len; t += chunk) {
    const Index n = std::min(chunk, len - t);
    cache.append(k.topRows(n), v.topRows(n));
  }
  return cache;
}

std::size_t cache_bytes(Index h_kv, Index len) {
  return static_cast<std::size_t>(len) * kappa::KVCache<T>::bytes_per_token({h_kv, kDHead});
}

// Args: layout, cache length, threads.
void BM_DecodeAttention(benchmark::State& st) {
  const Index h_kv = kKvHeads[st.range(0)], len = st.range(1);
  set_threads(st, static_cast<int>(st.range(2)));
  const auto cache = filled_cache(h_kv, len);
  const Matrix q = random(1, kHeads * kDHead);
  Matrix y(1, kHeads * kDHead);
  // Warm up: on this VM the first pass over freshly written memory is up to
  // 30x slower (host-side faults); a decoder reads its cache every step.
  for (int i = 0; i < 2; ++i) {
    kappa::grouped_attention_into<T>(q, cache, y, kHeads, kappa::kernels::Softmax{},
                                     kappa::NoMask{});
  }
  for (auto _ : st) {
    kappa::grouped_attention_into<T>(q, cache, y, kHeads, kappa::kernels::Softmax{},
                                     kappa::NoMask{});
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] = benchmark::Counter(double(cache.bytes()) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
  st.counters["cache_MB"] = double(cache.bytes()) * 1e-6;
  // The same 4 len d_head flops per query head whatever H_kv: MQA decode is
  // compute-bound (G = 32 queries per byte of cache), MHA memory-bound.
  st.counters["GFLOP/s"] = benchmark::Counter(4.0 * double(len) * kDHead * kHeads * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// Args: layout, cache length, threads: copies the bytes BM_DecodeAttention reads.
void BM_MemoryCopy(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(2));
  set_threads(st, threads);
  kappa_bench::memory_copy(st, cache_bytes(kKvHeads[st.range(0)], st.range(1)), threads);
}

// Args: layout, cache length, threads: sums the bytes BM_DecodeAttention reads.
void BM_MemoryRead(benchmark::State& st) {
  const std::size_t bytes = cache_bytes(kKvHeads[st.range(0)], st.range(1));
  const int threads = static_cast<int>(st.range(2));
  set_threads(st, threads);
  const Index n = static_cast<Index>(bytes / sizeof(T));
  const kappa::Vector<T> src = kappa::Vector<T>::Ones(n);
  std::vector<T> partial(static_cast<std::size_t>(threads));
  benchmark::DoNotOptimize(src.sum());  // warm up
  for (auto _ : st) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int t = 0; t < threads; ++t) {
      const Index lo = n * t / threads, hi = n * (t + 1) / threads;
      partial[static_cast<std::size_t>(t)] = src.segment(lo, hi - lo).sum();
    }
    benchmark::DoNotOptimize(partial.data());
  }
  st.counters["GB/s"] =
      benchmark::Counter(double(bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: layout, cache length, threads: one token through the whole layer
// (projections, cache append, attention, W^O); the cache is rolled back after
// each step so its length stays fixed.
void BM_DecodeLayer(benchmark::State& st) {
  const Index h_kv = kKvHeads[st.range(0)], len = st.range(1);
  set_threads(st, static_cast<int>(st.range(2)));
  const auto attn = make_layer(h_kv);
  auto cache = filled_cache(h_kv, len);
  const Matrix x = random(1, kDModel);
  for (int i = 0; i < 2; ++i) {  // warm up
    benchmark::DoNotOptimize(attn.forward_cached(x, cache).data());
    cache.truncate(len);
  }
  for (auto _ : st) {
    Matrix y = attn.forward_cached(x, cache);
    benchmark::DoNotOptimize(y.data());
    cache.truncate(len);
  }
  const double weight_bytes =
      double(attn.w_q().size() + attn.w_k().size() + attn.w_v().size() + attn.w_o().size()) *
      sizeof(T);
  st.counters["GB/s"] = benchmark::Counter((double(cache.bytes()) + weight_bytes) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

void prefill_args(benchmark::internal::Benchmark* b) {
  for (int layout = 0; layout < 3; ++layout)
    for (int threads : {1, 2})
      b->Args({layout, 1024, 0, threads})->Args({layout, 1024, 1, threads});
}
void prefill_gemm_args(benchmark::internal::Benchmark* b) {
  for (int layout = 0; layout < 3; ++layout)
    for (int threads : {1, 2}) b->Args({layout, 1024, threads});
}
void layer_args(benchmark::internal::Benchmark* b) {
  for (int layout = 0; layout < 3; ++layout)
    for (int threads : {1, 2}) b->Args({layout, 512, threads});
}
void decode_args(benchmark::internal::Benchmark* b) {
  for (int layout = 0; layout < 3; ++layout)
    for (int len : {1024, 8192, 32768})
      for (int threads : {1, 2}) b->Args({layout, len, threads});
}

BENCHMARK(BM_PrefillAttention)->Apply(prefill_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PrefillGemm)->Apply(prefill_gemm_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PrefillLayer)->Apply(layer_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PrefillLayerGemm)->Apply(layer_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeAttention)->Apply(decode_args)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MemoryCopy)->Apply(decode_args)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MemoryRead)->Apply(decode_args)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_DecodeLayer)->Apply(decode_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
