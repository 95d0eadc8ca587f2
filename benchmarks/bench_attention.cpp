// bench_attention: softmax attention forward Y = Z^-1 A V (one head, float)
// against its ceiling, Eigen GEMM of the same shapes, in the same binary.
//
// Flops: 4 N_Q N_KV d (Q K^T and A V, 2 N_Q N_KV d each), the kernel's exp
// not counted. The ceiling BM_EigenGemm_SameShapes runs exactly the two
// products attention needs (N x d by d x N, then N x N by N x d) into
// preallocated outputs, so GFLOP/s(attention) / GFLOP/s(GEMM) is the fraction
// of the machine's GEMM speed that attention reaches.
//
// Every benchmark touches its buffers once before timing (steady state).
//
// Args: {N, d, threads}. Threads > 1 needs the OpenMP build (bench preset).
#include <benchmark/benchmark.h>

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
void attention_bench(benchmark::State& state, const Mask& mask, double flop_fraction) {
  const Index n = state.range(0), d = state.range(1);
  use_threads(state);
  const RowMatrix<float> q = random(n, d, 1), k = random(n, d, 2), v = random(n, d, 3);
  RowMatrix<float> y(n, d);
  kappa::AttentionWorkspace<float> ws;
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

BENCHMARK(BM_Attention_Softmax)->Apply(shapes);
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

}  // namespace

BENCHMARK_MAIN();
