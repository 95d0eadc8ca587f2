// benchmarks/bench_models_common.hpp - what the whole-model benchmarks
// (bench_models, bench_moe, bench_encoder_decoder) share, written once: the
// random weights, the token lists, the thread count taken from the
// benchmark's argument, the 1-and-2-thread registration, the prefill and
// decode loops of a decoder-only model with their counters, the peak resident
// memory, and the GEMM ceiling. The memory ceilings are in bench_common.hpp.
#pragma once

#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "bench_common.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/transformer/architectures.hpp"

namespace kappa_bench {

/// xorshift64 from seed x the golden ratio + offset: the deterministic
/// stream behind fill() and random_tokens().
class XorShift {
 public:
  XorShift(std::uint64_t seed, std::uint64_t offset) : s_(seed * 0x9E3779B97F4A7C15ull + offset) {}
  std::uint64_t next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }

 private:
  std::uint64_t s_;
};

/// Uniform(-a, a) from a counter-based hash: fast, deterministic.
inline kappa::RowMatrix<float> fill(kappa::Index r, kappa::Index c, std::uint64_t seed,
                                    float a = 0.02f) {
  kappa::RowMatrix<float> m(r, c);
  XorShift g(seed, 1);
  for (kappa::Index i = 0; i < m.size(); ++i)
    m.data()[i] = a * (static_cast<float>(g.next() >> 40) / static_cast<float>(1 << 23) - 1.0f);
  return m;
}

/// n token ids (i x 7919 + 13) mod vocab: a fixed prompt spread over the
/// vocabulary.
inline std::vector<kappa::TokenId> spread_tokens(kappa::Index n, kappa::Index vocab) {
  std::vector<kappa::TokenId> ids;
  for (kappa::Index i = 0; i < n; ++i)
    ids.push_back(static_cast<kappa::TokenId>((i * 7919 + 13) % vocab));
  return ids;
}

/// n token ids spread over the vocabulary (a fixed pseudo-random list).
inline std::vector<kappa::TokenId> random_tokens(kappa::Index n, kappa::Index vocab,
                                                 std::uint64_t seed) {
  std::vector<kappa::TokenId> ids;
  XorShift g(seed, 7);
  for (kappa::Index i = 0; i < n; ++i)
    ids.push_back(static_cast<kappa::TokenId>(g.next() % static_cast<std::uint64_t>(vocab)));
  return ids;
}

/// The process's peak resident memory (MB).
inline double peak_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

/// The threads a benchmark runs on: its argument.
inline int arg_threads(const benchmark::State& st) {
  return static_cast<int>(st.range(0));
}

/// kappa's thread count set to the benchmark's argument for a scope, and
/// back to 1 at its end.
class ArgThreads {
 public:
  explicit ArgThreads(const benchmark::State& st) { kappa::set_num_threads(arg_threads(st)); }
  ~ArgThreads() { kappa::set_num_threads(1); }
  ArgThreads(const ArgThreads&) = delete;
  ArgThreads& operator=(const ArgThreads&) = delete;
};

/// Every whole-model benchmark runs on 1 and 2 threads (its argument), in
/// milliseconds of real time: BENCHMARK(fn)->Apply(on_1_and_2_threads).
inline void on_1_and_2_threads(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
}
/// The same for benchmarks that pair each step with a plain read
/// (run_decode): their time is the steps' alone (manual time).
inline void decode_on_1_and_2_threads(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseManualTime();
}

/// Flops of a prefill of `tokens` with LogitsFor::kLast: 2 x the layers'
/// parameters (layer_bytes(layer) / sizeof(float) each) per token (the
/// attention scores are not counted), plus the output head once.
template <class M, class LayerBytes>
double prefill_flops(const M& m, kappa::Index tokens, LayerBytes layer_bytes) {
  double layer_params = 0;
  for (const auto& l : m.layers())
    layer_params += static_cast<double>(layer_bytes(l)) / sizeof(float);
  return 2.0 * layer_params * static_cast<double>(tokens) +
         2.0 * static_cast<double>(m.vocab_size() * m.d_model());
}

/// Prefill of `ids`, logits of the last row, the cache reset before each.
/// Counters: tokens/s, GFLOP/s (`flops` per prefill), peak_MB.
template <class M>
void run_prefill(benchmark::State& st, M& m, std::span<const kappa::TokenId> ids, double flops) {
  const ArgThreads threads(st);
  auto cache = m.make_cache();
  for (auto _ : st) {
    cache.reset();
    benchmark::DoNotOptimize(m.forward_cached(ids, cache, kappa::LogitsFor::kLast).data());
  }
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(ids.size()),
                                               benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["peak_MB"] = peak_mb();
}

/// Whether run_decode reports the cache's size (cache_MB).
enum class CacheCounter { kNo, kYes };

/// One decode step after `prompt`, the cache rolled back to the prompt's
/// length after each step (every step sees the same length); step i decodes
/// next[i mod next.size()]. Each step is paired with a plain read of the
/// same bytes (read_once of decode_bytes(), alternate()), so that the
/// step's fraction of the read comes from one run: our VMs' reads move by
/// 1.5x between minutes, which separate runs of the step and the read
/// cannot tell from a change in the step. The benchmark's time is the
/// steps' alone (register it with decode_on_1_and_2_threads). Counters:
/// tokens/s, GB/s and read_MB (the model's decode_bytes() per step),
/// read_GB/s (the paired reads), of_read (the steps' GB/s over the reads'),
/// peak_MB (before the read's buffer), and cache_MB if asked.
template <class M>
void run_decode(benchmark::State& st, M& m, std::span<const kappa::TokenId> prompt,
                std::span<const kappa::TokenId> next, CacheCounter cache_counter) {
  const ArgThreads threads(st);
  const auto length = static_cast<kappa::Index>(prompt.size());
  auto cache = m.make_cache();
  (void)m.forward_cached(prompt, cache, kappa::LogitsFor::kLast);
  st.counters["peak_MB"] = peak_mb();
  const auto bytes = static_cast<double>(m.decode_bytes());
  const std::vector<float> src(m.decode_bytes() / sizeof(float), 1.0f);
  std::size_t i = 0;
  const auto [t_step, t_read] = alternate(
      st,
      [&] {
        benchmark::DoNotOptimize(
            m.forward_cached(next.subspan(i, 1), cache, kappa::LogitsFor::kLast).data());
        cache.truncate(length);
        i = (i + 1) % next.size();
      },
      [&] { benchmark::DoNotOptimize(read_once(src, arg_threads(st))); });
  const auto read = static_cast<double>(src.size() * sizeof(float));
  st.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["read_MB"] = bytes / 1e6;
  st.counters["read_GB/s"] = read * static_cast<double>(st.iterations()) / t_read * 1e-9;
  st.counters["of_read"] = (bytes / t_step) / (read / t_read);
  if (cache_counter == CacheCounter::kYes)
    st.counters["cache_MB"] = static_cast<double>(cache.bytes()) / 1e6;
}

/// The GEMM ceiling: Eigen's product a x b. GFLOP/s = 2 x rows(a) x cols(a)
/// x cols(b) per product.
inline void gemm_ceiling(benchmark::State& st, const kappa::RowMatrix<float>& a,
                         const kappa::RowMatrix<float>& b) {
  const ArgThreads threads(st);
  kappa::RowMatrix<float> c(a.rows(), b.cols());
  for (auto _ : st) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(a.rows()) * static_cast<double>(a.cols()) *
                             static_cast<double>(b.cols()) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace kappa_bench
