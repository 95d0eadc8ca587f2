// benchmarks/bench_common.hpp - the ceilings several benchmarks measure
// against, written once.
#pragma once

#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <cstddef>
#include <cstring>
#include <vector>

namespace kappa_bench {

/// The bandwidth ceiling: `bytes` copied with memcpy on `threads` threads
/// (OpenMP, one contiguous slice each), buffers touched before timing (first
/// touch of fresh pages is many times slower on this VM). Sets the counter
/// GB/s = bytes read per second; memcpy also writes them, so a pure read
/// stream can exceed it.
inline void memory_copy(benchmark::State& st, std::size_t bytes, int threads) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (int i = 0; i < 2; ++i) std::memcpy(dst.data(), src.data(), bytes);  // warm up
  for (auto _ : st) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int t = 0; t < threads; ++t) {
      const std::size_t lo = bytes * t / threads, hi = bytes * (t + 1) / threads;
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.counters["GB/s"] =
      benchmark::Counter(double(bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// One read of `src`: its floats summed (Eigen's vectorized sum) on
/// `threads` threads, one contiguous slice each.
inline float read_once(const std::vector<float>& src, int threads) {
  const std::size_t n = src.size();
  float total = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
#endif
  for (int t = 0; t < threads; ++t) {
    const std::size_t lo = n * t / threads, hi = n * (t + 1) / threads;
    total += Eigen::Map<const Eigen::VectorXf>(src.data() + lo, static_cast<Eigen::Index>(hi - lo))
                 .sum();
  }
  return total;
}

/// The read ceiling: `bytes` of floats summed by read_once. GB/s = bytes
/// read per second: what a memory-bound decode step can at best reach.
inline void memory_read(benchmark::State& st, std::size_t bytes, int threads) {
  const std::vector<float> src(bytes / sizeof(float), 1.0f);
  for (auto _ : st) benchmark::DoNotOptimize(read_once(src, threads));
  st.counters["GB/s"] = benchmark::Counter(double(src.size() * sizeof(float)) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace kappa_bench
