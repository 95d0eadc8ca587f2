// bench_attention: softmax attention forward Y = Z^-1 A V (one head, float)
// against its ceiling, Eigen GEMM of the same shapes, in the same binary.
//
// Flops: 4 N_Q N_KV d (Q K^T and A V, 2 N_Q N_KV d each), the kernel's exp
// not counted. The ceiling BM_EigenGemm_SameShapes runs exactly the two
// products attention needs (N x d by d x N, then N x N by N x d) into
// preallocated outputs, so GFLOP/s(attention) / GFLOP/s(GEMM) is the fraction
// of the machine's GEMM speed that attention reaches.
//
// BM_Attention_Softmax runs what attention_into chooses (kAuto: for float on
// AVX-512 or AVX2 + FMA, the tiled path's register-blocked kernels);
// BM_Attention_Softmax_Blocked forces the blocked path, whose products are
// Eigen GEMMs. BM_FmaPeak is the other ceiling: the machine's fused
// multiply-add rate (2 flops each) with independent register accumulators,
// so GFLOP/s(attention) / GFLOP/s(FMA peak) is the fraction of the
// arithmetic peak, read from one run.
//
// Every benchmark touches its buffers once before timing (steady state).
//
// Args: {N, d, threads}. Threads > 1 needs the OpenMP build (bench preset).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_common.hpp"
#include "kappa/kappa.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;

RowMatrix<float> random(Index rows, Index cols, int seed) {
  std::srand(static_cast<unsigned>(seed));
  return RowMatrix<float>::Random(rows, cols);
}

void set_rates(benchmark::State& state, double flops, Index n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

int use_threads(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(2));
  kappa::set_num_threads(threads);
  if (threads > 1 && kappa::num_threads() != threads) {
    state.SkipWithError("built without OpenMP: only 1 thread available");
  }
  return threads;
}

template <class Mask>
void attention_bench(benchmark::State& state, const Mask& mask, double flop_fraction,
                     kappa::AttentionPath path = kappa::AttentionPath::kAuto) {
  const Index n = state.range(0), d = state.range(1);
  use_threads(state);
  const RowMatrix<float> q = random(n, d, 1), k = random(n, d, 2), v = random(n, d, 3);
  RowMatrix<float> y(n, d);
  kappa::AttentionWorkspace<float> ws;
  ws.path = path;
  kappa::attention_into<float>(q, k, v, y, ws, kappa::kernels::Softmax{}, mask);  // warm-up
  for (auto _ : state) {
    kappa::attention_into<float>(q, k, v, y, ws, kappa::kernels::Softmax{}, mask);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, flop_fraction * 4.0 * double(n) * double(n) * double(d), n);
  state.counters["scratch_MB"] = static_cast<double>(ws.scores.size() * sizeof(float)) / 1e6;
}

void BM_Attention_Softmax(benchmark::State& state) {
  attention_bench(state, kappa::NoMask{}, 1.0);
}

// The same through the blocked path: Eigen GEMMs for Q K^T and A V.
void BM_Attention_Softmax_Blocked(benchmark::State& state) {
  attention_bench(state, kappa::NoMask{}, 1.0, kappa::AttentionPath::kBlocked);
}

// The FMA peak (bench_common.hpp): the arithmetic ceiling.
void BM_FmaPeak(benchmark::State& state) {
  kappa_bench::fma_peak(state, static_cast<int>(state.range(0)));
}

// Causal: blocks of queries skip the keys they cannot see, so about half the
// flops; the rate counts only the (N^2 + N)/2 visible pairs.
void BM_Attention_Softmax_Causal(benchmark::State& state) {
  const double n = static_cast<double>(state.range(0));
  attention_bench(state, kappa::CausalMask{}, (n * n + n) / 2 / (n * n));
}

// The ceiling: the same two products as plain Eigen GEMMs, no kernel, no mask.
void BM_EigenGemm_SameShapes(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  use_threads(state);
  const RowMatrix<float> q = random(n, d, 1), k = random(n, d, 2), v = random(n, d, 3);
  RowMatrix<float> s = RowMatrix<float>::Zero(n, n), y = RowMatrix<float>::Zero(n, d);
  // (Zero: touch every page before timing; first-touch page faults of an
  // N x N buffer cost more than the GEMM itself on this VM.)
  for (auto _ : state) {
    s.noalias() = q * k.transpose();  // (N, N)
    y.noalias() = s * v;              // (N, d)
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, 4.0 * double(n) * double(n) * double(d), n);
}

// The "textbook" evaluation kappa does not use: the full N x N score matrix,
// softmax over it, then one product. Shows what the row-blocked path buys.
void BM_Attention_Softmax_FullMatrix(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  use_threads(state);
  const RowMatrix<float> q = random(n, d, 1), k = random(n, d, 2), v = random(n, d, 3);
  RowMatrix<float> s(n, n), y(n, d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (auto _ : state) {
    s.noalias() = (scale * q) * k.transpose();  // (N, N)
    for (Index i = 0; i < n; ++i) {
      auto r = s.row(i).array();
      r = (r - r.maxCoeff()).exp();
      r /= r.sum();
    }
    y.noalias() = s * v;  // (N, d)
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, 4.0 * double(n) * double(n) * double(d), n);
}

// Feature-map kernel (elu + 1): the quadratic path against the linear-time
// one (linear.hpp), causal. Rate: tokens/s; the quadratic path's GFLOP/s
// counts its (N^2 + N)/2 visible pairs as above.
void BM_Attention_EluPlusOne_Causal_Quadratic(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  use_threads(state);
  const RowMatrix<float> q = random(n, d, 1), k = random(n, d, 2), v = random(n, d, 3);
  RowMatrix<float> y(n, d);
  kappa::AttentionWorkspace<float> ws;
  kappa::attention_into<float>(q, k, v, y, ws, kappa::kernels::EluPlusOne{}, kappa::CausalMask{});
  for (auto _ : state) {
    kappa::attention_into<float>(q, k, v, y, ws, kappa::kernels::EluPlusOne{}, kappa::CausalMask{});
    benchmark::DoNotOptimize(y.data());
  }
  set_rates(state, 2.0 * (double(n) * double(n) + double(n)) * double(d), n);
}

void BM_Attention_EluPlusOne_Causal_LinearTime(benchmark::State& state) {
  const Index n = state.range(0), d = state.range(1);
  use_threads(state);
  const RowMatrix<float> q = random(n, d, 1), k = random(n, d, 2), v = random(n, d, 3);
  for (auto _ : state) {
    RowMatrix<float> y =
        kappa::linear_attention(q, k, v, kappa::kernels::EluPlusOne{}, kappa::CausalMask{});
    benchmark::DoNotOptimize(y.data());
  }
  // Useful flops of the recurrence: phi(k)^T v rank-1 updates and phi(q) S.
  set_rates(state, 4.0 * double(n) * double(d) * double(d), n);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int d : {64, 128})
      for (int n : {256, 1024, 4096}) b->Args({n, d, threads});
  b->ArgNames({"N", "d", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_FmaPeak)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("threads")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Attention_Softmax)->Apply(shapes);
BENCHMARK(BM_Attention_Softmax_Blocked)->Apply(shapes);
BENCHMARK(BM_EigenGemm_SameShapes)->Apply(shapes);
BENCHMARK(BM_Attention_Softmax_Causal)->Apply(shapes);
BENCHMARK(BM_Attention_Softmax_FullMatrix)->Apply(shapes);
BENCHMARK(BM_Attention_EluPlusOne_Causal_Quadratic)
    ->Args({1024, 64, 1})
    ->Args({4096, 64, 1})
    ->ArgNames({"N", "d", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Attention_EluPlusOne_Causal_LinearTime)
    ->Args({1024, 64, 1})
    ->Args({4096, 64, 1})
    ->Args({16384, 64, 1})
    ->ArgNames({"N", "d", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- Long context: a block of N_Q queries over N_KV keys --------------------
//
// Prefill of a chunk over a long cache (N_Q = 4096 or 512 queries, N_KV = 4k
// .. 128k keys, d = 128, float, no mask). The blocked path (blocks of query
// rows, each with its scores over all N_KV keys) against the tiled path
// (blocks of 128 query rows x tiles of 256 keys, online softmax), and the
// ceiling: Eigen GEMM of the same products, 128 query rows at a time (a full
// N_Q x N_KV score matrix would take 2 GB at 4096 x 128k). scratch_MB is the
// attention scratch of all threads (the blocked path's block of scores, or
// the tiled path's fixed tiles); Eigen's GEMM packing buffers come on top on
// every path. Args: {N_Q, N_KV, threads}. The CI smoke run skips all but the
// smallest shape (benchmarks/CMakeLists.txt).

void long_context(benchmark::State& state, kappa::AttentionPath path) {
  const Index n_q = state.range(0), n_kv = state.range(1), d = 128;
  const int threads = use_threads(state);
  const RowMatrix<float> q = random(n_q, d, 1), k = random(n_kv, d, 2), v = random(n_kv, d, 3);
  RowMatrix<float> y(n_q, d);
  kappa::AttentionWorkspace<float> ws;
  ws.path = path;
  kappa::attention_into<float>(q, k, v, y, ws);  // warm-up
  for (auto _ : state) {
    kappa::attention_into<float>(q, k, v, y, ws);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, 4.0 * double(n_q) * double(n_kv) * double(d), n_q);
  const Index per_thread = path == kappa::AttentionPath::kTiled
                               ? kappa::detail::tiled_scratch_bytes<float>(d, d)
                               : kappa::detail::blocked_scratch_bytes<float>(n_q, n_kv);
  state.counters["scratch_MB"] = static_cast<double>(per_thread) * threads / 1e6;
}

void BM_LongContext_Blocked(benchmark::State& state) {
  long_context(state, kappa::AttentionPath::kBlocked);
}

void BM_LongContext_Tiled(benchmark::State& state) {
  long_context(state, kappa::AttentionPath::kTiled);
}

// The ceiling: S_b = Q_b K^T and Y_b = S_b V for blocks of 128 query rows
// (the blocks spread over the threads as attention's are), no softmax.
void BM_LongContext_EigenGemm(benchmark::State& state) {
  const Index n_q = state.range(0), n_kv = state.range(1), d = 128, rows = 128;
  const int threads = use_threads(state);
  const RowMatrix<float> q = random(n_q, d, 1), k = random(n_kv, d, 2), v = random(n_kv, d, 3);
  RowMatrix<float> y = RowMatrix<float>::Zero(n_q, d);
  std::vector<RowMatrix<float>> s(static_cast<std::size_t>(threads),
                                  RowMatrix<float>::Zero(rows, n_kv));
  const Index n_blocks = (n_q + rows - 1) / rows;
  for (auto _ : state) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
#endif
    for (Index b = 0; b < n_blocks; ++b) {
#ifdef _OPENMP
      RowMatrix<float>& sb = s[static_cast<std::size_t>(omp_get_thread_num())];
#else
      RowMatrix<float>& sb = s[0];
#endif
      const Index r = std::min(rows, n_q - b * rows);
      sb.topRows(r).noalias() = q.middleRows(b * rows, r) * k.transpose();  // (r, N_KV)
      y.middleRows(b * rows, r).noalias() = sb.topRows(r) * v;              // (r, d)
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, 4.0 * double(n_q) * double(n_kv) * double(d), n_q);
}

void long_shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int n_q : {512, 4096})
      for (int n_kv : {4096, 16384, 32768, 65536, 131072}) b->Args({n_q, n_kv, threads});
  b->ArgNames({"NQ", "NKV", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_LongContext_Blocked)->Apply(long_shapes);
BENCHMARK(BM_LongContext_Tiled)->Apply(long_shapes);
BENCHMARK(BM_LongContext_EigenGemm)->Apply(long_shapes);

}  // namespace

BENCHMARK_MAIN();
