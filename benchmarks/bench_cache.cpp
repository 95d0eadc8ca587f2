// bench_cache: decoding over caches stored in float, BF16, F16 and Int8.
//
// Shapes: the KV cache of one LLaMA-3-70B layer (8 kv heads of 128) read by
// G = 8 query heads per kv head (the model: 64 query heads, compute-bound in
// float on a core of 40 GFLOP/s: 4 flops per cached byte) or G = 1 (as
// multi-head attention: memory-bound); and one DeepSeek-V2-Lite latent
// attention layer (16 heads, latent rows d_c 512 + d_R 64, the
// weight-absorbed path), float queries.
//
//   BM_KvDecode<Format>/len/threads/G   the attention of one new token over
//       a KV cache of `len` tokens (each kv head read once by its G query
//       heads through the decode kernel). Counters: tokens/s (decode
//       steps of this layer per second), GB/s (the cache's bytes per step
//       time), cache_MB.
//   BM_KvDecodeBaseline/len/threads/G   the same step over a float cache
//       through grouped_attention_into (the path before the decode kernel).
//   BM_PlainRead<Format>/len/threads/0   a vectorized sum over as many
//       bytes as that format's cache holds: the read ceiling, same binary.
//   BM_KvDecodeVsRead<Format>/len/threads   G = 1: each iteration runs one
//       decode step and then one plain read of as many bytes, timed
//       separately; of_read = decode GB/s / read GB/s over the same
//       iterations. Alternating the two cancels the drift of this VM's
//       bandwidth (up to 1.5x between runs minutes apart), which separate
//       benchmarks cannot. GB/s and tokens/s count the decode steps only.
//   BM_KvDecodeVsFloat<Format>/len/threads   G = 1: each iteration runs one
//       decode step over a cache stored in Format and one over the same
//       tokens in a float cache, timed separately (the manual time is
//       Format's); x_float = float step time / Format step time, i.e. the
//       speedup in tokens/s, from alternating steps for the same reason.
//   BM_LatentDecode<Format>/len/threads   LatentAttention::forward_cached of
//       one token (the whole layer; the cache is rolled back after each step),
//       tokens/s, cache GB/s, and attn_GFLOP/s: the attention's flops over
//       the cache, 2 H len (2 d_c + d_R) per step, over the step time (the
//       projections, about 54 MB of weights read per step, are in the time
//       but not in the flops). With 16 heads it is compute-bound: compare
//       with BM_FmaPeak.
//   BM_FmaPeak/threads   the arithmetic ceiling (bench_common.hpp).
//
// The CI smoke run only runs the 1024-token rows (see CMakeLists.txt).
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "kappa/cache/decode.hpp"
#include "kappa/cache/formats.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/heads/grouped_attention.hpp"
#include "kappa/heads/latent.hpp"

namespace {

using T = float;
using kappa::Index;
using Matrix = kappa::RowMatrix<T>;
namespace cache = kappa::cache;

constexpr Index kKvHeads = 8, kDHead = 128;  // LLaMA-3-70B's cache, one layer

Matrix random(Index rows, Index cols, unsigned seed = 1) {
  std::srand(seed);
  return Matrix::Random(rows, cols);
}

template <class F>
kappa::KVCache<T, cache::Growable, F> filled_cache(Index len) {
  kappa::KVCache<T, cache::Growable, F> c({.n_kv_heads = kKvHeads, .d_head = kDHead},
                                          cache::Growable{len + 8});
  const Index chunk = 1024;
  const Matrix k = random(chunk, kKvHeads * kDHead, 2), v = random(chunk, kKvHeads * kDHead, 3);
  for (Index t = 0; t < len; t += chunk) {
    const Index n = std::min(chunk, len - t);
    c.append(k.topRows(n), v.topRows(n));
  }
  return c;
}

void set_threads(benchmark::State& st, int threads, const char* what) {
  kappa::set_num_threads(threads);
  st.SetLabel(std::string(what) + " threads=" + std::to_string(threads));
}

template <class F>
void decode_step(const Matrix& q, const kappa::KVCache<T, cache::Growable, F>& c, Matrix& y,
                 kappa::DecodeWorkspace<T>& ws, Index grp) {
  for (Index g = 0; g < kKvHeads; ++g) {
    const Eigen::Map<const Matrix> qg(q.data() + g * grp * kDHead, grp, kDHead);
    Eigen::Map<Matrix> yg(y.data() + g * grp * kDHead, grp, kDHead);
    kappa::decode_attention_into<T, F>(qg, c.key_rows(g), c.value_rows(g), yg, ws,
                                       kappa::kernels::Softmax{}, kappa::NoMask{}, grp);
  }
}

// Args: len, threads, G (query heads per kv head).
template <class F>
void BM_KvDecode(benchmark::State& st) {
  const Index len = st.range(0), grp = st.range(2), heads = grp * kKvHeads;
  set_threads(st, static_cast<int>(st.range(1)), F::kName);
  const auto c = filled_cache<F>(len);
  const Matrix q = random(1, heads * kDHead, 4);
  Matrix y(1, heads * kDHead);
  kappa::DecodeWorkspace<T> ws;
  for (int i = 0; i < 2; ++i) decode_step<F>(q, c, y, ws, grp);  // warm up (first touch)
  for (auto _ : st) {
    decode_step<F>(q, c, y, ws, grp);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] =
      benchmark::Counter(double(c.bytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["cache_MB"] = double(c.bytes()) * 1e-6;
}

// Args: len, threads, G: the float cache through grouped_attention_into.
void BM_KvDecodeBaseline(benchmark::State& st) {
  const Index len = st.range(0), heads = st.range(2) * kKvHeads;
  set_threads(st, static_cast<int>(st.range(1)), "float, grouped_attention_into");
  const auto c = filled_cache<cache::Native>(len);
  const Matrix q = random(1, heads * kDHead, 4);
  Matrix y(1, heads * kDHead);
  for (int i = 0; i < 2; ++i)
    kappa::grouped_attention_into<T>(q, c, y, heads, kappa::kernels::Softmax{}, kappa::NoMask{});
  for (auto _ : st) {
    kappa::grouped_attention_into<T>(q, c, y, heads, kappa::kernels::Softmax{}, kappa::NoMask{});
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] =
      benchmark::Counter(double(c.bytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: len, threads, G (unused): reads as many bytes as a cache of format F and len tokens.
template <class F>
void BM_PlainRead(benchmark::State& st) {
  const Index len = st.range(0);
  const int threads = static_cast<int>(st.range(1));
  set_threads(st, threads, F::kName);
  const std::size_t bytes =
      static_cast<std::size_t>(len) *
      kappa::KVCache<T>::bytes_per_token({.n_kv_heads = kKvHeads, .d_head = kDHead}, 1, F{});
  kappa_bench::memory_read(st, bytes, threads);
}

// Args: len, threads: decode steps (G = 1) alternating with plain reads of
// as many bytes; the decode steps' time is the benchmark's (manual) time.
template <class F>
void BM_KvDecodeVsRead(benchmark::State& st) {
  const Index len = st.range(0);
  const int threads = static_cast<int>(st.range(1));
  set_threads(st, threads, F::kName);
  const auto c = filled_cache<F>(len);
  const Matrix q = random(1, kKvHeads * kDHead, 4);
  Matrix y(1, kKvHeads * kDHead);
  kappa::DecodeWorkspace<T> ws;
  const std::vector<float> src(c.bytes() / sizeof(float), 1.0f);
  const auto [t_decode, t_read] = kappa_bench::alternate(
      st,
      [&] {
        decode_step<F>(q, c, y, ws, 1);
        benchmark::DoNotOptimize(y.data());
      },
      [&] { benchmark::DoNotOptimize(kappa_bench::read_once(src, threads)); });
  const double bytes = double(src.size() * sizeof(float));
  st.counters["GB/s"] =
      benchmark::Counter(double(c.bytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["read_GB/s"] = bytes * double(st.iterations()) / t_read * 1e-9;
  st.counters["of_read"] = (double(c.bytes()) / t_decode) / (bytes / t_read);
}

// Args: len, threads: decode steps (G = 1) over a Format cache alternating
// with steps over a float cache of the same tokens.
template <class F>
void BM_KvDecodeVsFloat(benchmark::State& st) {
  const Index len = st.range(0);
  set_threads(st, static_cast<int>(st.range(1)), F::kName);
  const auto c = filled_cache<F>(len);
  const auto c_float = filled_cache<cache::Native>(len);
  const Matrix q = random(1, kKvHeads * kDHead, 4);
  Matrix y(1, kKvHeads * kDHead), y_float(1, kKvHeads * kDHead);
  kappa::DecodeWorkspace<T> ws, ws_float;
  const auto [t_format, t_float] = kappa_bench::alternate(
      st,
      [&] {
        decode_step<F>(q, c, y, ws, 1);
        benchmark::DoNotOptimize(y.data());
      },
      [&] {
        decode_step<cache::Native>(q, c_float, y_float, ws_float, 1);
        benchmark::DoNotOptimize(y_float.data());
      });
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["float_tokens/s"] = double(st.iterations()) / t_float;
  st.counters["x_float"] = t_float / t_format;
}

// ---- latent ---------------------------------------------------------------------

kappa::LatentConfig latent_config() {
  kappa::LatentConfig c;  // DeepSeek-V2-Lite's attention
  c.d_model = 2048;
  c.n_heads = 16;
  c.d_head = 128;
  c.d_rope = 64;
  c.d_latent = 512;
  return c;
}

// Args: len, threads.
template <class F>
void BM_LatentDecode(benchmark::State& st) {
  const Index len = st.range(0);
  set_threads(st, static_cast<int>(st.range(1)), F::kName);
  const kappa::LatentConfig cfg = latent_config();
  kappa::LatentAttention<T, kappa::AbsorbedLatent> mla(cfg);
  mla.init_random(5);
  kappa::LatentCache<T, cache::Growable, F> c(cfg, cache::Growable{len + 8});
  {
    const Matrix rows = random(1024, cfg.d_latent + cfg.d_rope, 6);
    for (Index t = 0; t < len; t += 1024) c.append(rows.topRows(std::min<Index>(1024, len - t)));
  }
  const Matrix x = random(1, cfg.d_model, 7);
  for (int i = 0; i < 2; ++i) {
    benchmark::DoNotOptimize(mla.forward_cached(x, c).data());
    c.truncate(len);
  }
  for (auto _ : st) {
    Matrix y = mla.forward_cached(x, c);
    benchmark::DoNotOptimize(y.data());
    c.truncate(len);
  }
  st.counters["cache_GB/s"] =
      benchmark::Counter(double(c.bytes()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  const double flops =
      2.0 * double(cfg.n_heads) * double(len) * double(2 * cfg.d_latent + cfg.d_rope);
  st.counters["attn_GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_FmaPeak(benchmark::State& st) {
  kappa_bench::fma_peak(st, static_cast<int>(st.range(0)));
}

void decode_args(benchmark::internal::Benchmark* b) {
  for (int len : {1024, 8192, 32768, 131072})
    for (int grp : {1, 8})
      for (int threads : {1, 2}) b->Args({len, threads, grp});
}
void read_args(benchmark::internal::Benchmark* b) {
  for (int len : {1024, 8192, 32768, 131072})
    for (int threads : {1, 2}) b->Args({len, threads, 0});
}
void vs_read_args(benchmark::internal::Benchmark* b) {
  for (int len : {1024, 8192, 32768, 131072})
    for (int threads : {1, 2}) b->Args({len, threads});
}
void latent_args(benchmark::internal::Benchmark* b) {
  for (int len : {1024, 8192, 32768})
    for (int threads : {1, 2}) b->Args({len, threads});
}

BENCHMARK_TEMPLATE(BM_KvDecode, cache::Native)
    ->Apply(decode_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_KvDecode, cache::BF16)
    ->Apply(decode_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_KvDecode, cache::F16)
    ->Apply(decode_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_KvDecode, cache::Int8)
    ->Apply(decode_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_KvDecodeBaseline)->Apply(decode_args)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_PlainRead, cache::Native)
    ->Apply(read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_PlainRead, cache::BF16)
    ->Apply(read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_PlainRead, cache::Int8)
    ->Apply(read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_KvDecodeVsRead, cache::Native)
    ->Apply(vs_read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK_TEMPLATE(BM_KvDecodeVsRead, cache::BF16)
    ->Apply(vs_read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK_TEMPLATE(BM_KvDecodeVsFloat, cache::BF16)
    ->Apply(vs_read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK_TEMPLATE(BM_KvDecodeVsFloat, cache::F16)
    ->Apply(vs_read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK_TEMPLATE(BM_KvDecodeVsFloat, cache::Int8)
    ->Apply(vs_read_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK_TEMPLATE(BM_LatentDecode, cache::Native)
    ->Apply(latent_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_LatentDecode, cache::BF16)
    ->Apply(latent_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_LatentDecode, cache::Int8)
    ->Apply(latent_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK(BM_FmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

BENCHMARK_MAIN();
