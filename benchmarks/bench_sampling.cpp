// bench_sampling: what sampling one token costs beside the model's step, at
// the vocabularies of GPT-2 (50257, d = 768) and Qwen2 (151936, d = 896).
//
//   BM_Sample/N_T/peaked   SamplingParams{temperature 0.8, top_p 0.95} and
//                          the draw (sample_categorical) on one float row of
//                          logits with a peaked head (20 tokens 12 above a
//                          normal(0, 2) background), as a language model's;
//   BM_Sample/N_T/flat     the same on the normal(0, 2) background alone: the
//                          nucleus then holds most of the vocabulary (the
//                          worst case of the selection, close to a full sort);
//   BM_TopPFullSort/N_T/.. top-p as it was before (a sort of the whole
//                          vocabulary), the peer in this binary;
//   BM_HeadProduct/N_T     the output head of one decode step, logits = E h
//                          (N_T x d float, Eigen GEMV): the ceiling-style
//                          yardstick; sampling's share of a step is at most
//                          BM_Sample / BM_HeadProduct of the same N_T.
// Counters: tokens/s (samples or head products per second) and, for the head,
// GB/s of its weight bytes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kappa/core/matrix.hpp"
#include "kappa/transformer/generate.hpp"

namespace {

std::vector<float> logits(std::size_t n, bool peaked) {
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0F, 2.0F);
  std::vector<float> l(n);
  for (float& x : l) x = normal(gen);
  if (peaked) {
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    for (int k = 0; k < 20; ++k) l[pick(gen)] += 12.0F;
  }
  return l;
}

void BM_Sample(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> row = logits(n, state.range(1) != 0);
  const kappa::SamplingParams::Processors processors(
      kappa::SamplingParams{.temperature = 0.8, .top_p = 0.95});
  kappa::Rng rng(7);
  std::vector<float> work(n);
  for (auto _ : state) {
    std::copy(row.begin(), row.end(), work.begin());
    processors.apply(std::span<float>(work), {});
    benchmark::DoNotOptimize(kappa::sample_categorical(std::span<const float>(work), rng));
  }
  state.counters["tokens/s"] =
      benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// Top-p with a sort of the whole vocabulary (kappa's TopP before the
// selection), on the same rows: the peer.
void BM_TopPFullSort(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> row = logits(n, state.range(1) != 0);
  std::vector<double> w(n);
  std::vector<kappa::TokenId> idx(n);
  for (auto _ : state) {
    const double m = *std::max_element(row.begin(), row.end());
    double z = 0;
    for (std::size_t i = 0; i < n; ++i) z += w[i] = std::exp((row[i] - m) / 0.8);
    std::iota(idx.begin(), idx.end(), kappa::TokenId{0});
    std::sort(idx.begin(), idx.end(), [&](kappa::TokenId a, kappa::TokenId b) {
      const double wa = w[static_cast<std::size_t>(a)], wb = w[static_cast<std::size_t>(b)];
      return wa > wb || (wa == wb && a < b);
    });
    double cum = 0;
    std::size_t keep = 0;
    while (keep < n && cum < 0.95 * z) cum += w[static_cast<std::size_t>(idx[keep++])];
    benchmark::DoNotOptimize(keep);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_HeadProduct(benchmark::State& state) {
  const auto n = static_cast<kappa::Index>(state.range(0));
  const kappa::Index d = n > 100000 ? 896 : 768;
  const kappa::RowMatrix<float> e = kappa::RowMatrix<float>::Random(n, d);
  const Eigen::VectorXf h = Eigen::VectorXf::Random(d);
  Eigen::VectorXf out(n);
  for (auto _ : state) {
    out.noalias() = e * h;
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(n * d) * sizeof(float) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Sample)->ArgsProduct({{50257, 151936}, {1, 0}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopPFullSort)->ArgsProduct({{50257, 151936}, {1, 0}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_HeadProduct)->Arg(50257)->Arg(151936)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
