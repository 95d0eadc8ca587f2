// benchmarks/bench_common.hpp - the ceilings several benchmarks measure
// against, written once.
#pragma once

#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include "kappa/core/simd.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

namespace kappa_bench {

// The FMA peak: each thread runs kChains independent chains acc = acc * b + c
// in registers (enough to cover the FMA latency times the FMA ports of any
// current x86 core: 4 cycles x 2 ports = 8 in flight). 2 flops per lane per
// FMA. Vector width: AVX-512, else AVX2 + FMA, else scalar std::fma.
inline constexpr int kChains = 12;
// kappa's own vector type and FMA (core/simd.hpp) where it has one.
#if KAPPA_SIMD_LANES > 0
using FmaVec = kappa::simd::Vec;
inline constexpr int kFmaLanes = kappa::simd::kLanes;
inline FmaVec fma_step(FmaVec a, FmaVec b, FmaVec c) {
  return kappa::simd::fma(a, b, c);
}
inline FmaVec fma_splat(float x) {
  return kappa::simd::broadcast(x);
}
inline float fma_first(FmaVec a) {
  return kappa::simd::hsum(a);
}
#else
using FmaVec = float;
inline constexpr int kFmaLanes = 1;
inline FmaVec fma_step(FmaVec a, FmaVec b, FmaVec c) {
  return std::fma(a, b, c);
}
inline FmaVec fma_splat(float x) {
  return x;
}
inline float fma_first(FmaVec a) {
  return a;
}
#endif

inline float fma_chains(long iters) {
  FmaVec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = fma_splat(1.0f + 1e-3f * static_cast<float>(i));
  const FmaVec b = fma_splat(0.9999999f), c = fma_splat(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = fma_step(acc[i], b, c);
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) sum += fma_first(acc[i]);
  return sum;
}

/// The FMA peak on `threads` threads (OpenMP): fma_chains in each. Sets
/// GFLOP/s (2 flops per lane per FMA) and lanes (the vector width used).
inline void fma_peak(benchmark::State& st, int threads) {
#ifndef _OPENMP
  if (threads > 1) st.SkipWithError("built without OpenMP: only 1 thread available");
#endif
  constexpr long kIters = 1 << 22;
  for (auto _ : st) {
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
#endif
    { benchmark::DoNotOptimize(fma_chains(kIters)); }
  }
  const double flops = 2.0 * kFmaLanes * kChains * double(kIters) * threads;
  st.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["lanes"] = kFmaLanes;
}

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

/// Paired timing, for a ratio read from one run: every iteration of `st`
/// runs a() and b(), timed apart, in alternating order (a() first in even
/// iterations), after two untimed rounds of each (first touch). Both see the
/// same state of the machine, where separate runs on our VMs move 15-30 %.
/// Returns the total seconds of a() and of b(); the iteration's manual time
/// is a()'s (read only by benchmarks registered with UseManualTime).
template <class A, class B>
std::pair<double, double> alternate(benchmark::State& st, A&& a, B&& b) {
  const auto timed = [](auto& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) {
    a();
    b();
  }
  double t_a = 0, t_b = 0;
  bool a_first = true;
  for (auto _ : st) {
    double da = 0, db = 0;
    if (a_first) {
      da = timed(a);
      db = timed(b);
    } else {
      db = timed(b);
      da = timed(a);
    }
    t_a += da;
    t_b += db;
    st.SetIterationTime(da);
    a_first = !a_first;
  }
  return {t_a, t_b};
}

}  // namespace kappa_bench
