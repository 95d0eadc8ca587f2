// bench_approx: time against sequence length N of exact softmax attention and
// of randomized approximations at a fixed accuracy target (issue 11), one
// head of width d = 64, float, one thread, no mask.
//
// Accuracy target: the issue asks for the m at which each method reaches
// about 1 % relative error of Y at N = 2048 on the example's realistic input
// (examples/randomized_attention.cpp). None does within the sizes swept there
// (m <= 1024, S <= 2048; benchmarks/README.md), so each runs at a fixed size
// instead - m = 256 for Nystrom, the sequence sketch and sampled attention,
// m = 1024 for the random features - and README states their errors at that
// size. m is kept fixed as N grows. The peer is exact attention
// (kappa::attention, the blocked path) in the same binary:
// tokens/s(method) / tokens/s(exact) at the same N is the speedup.
//
// Counters: tokens/s = N per second (N queries attended over N keys); for the
// exact path GFLOP/s = 4 N^2 d per second as well.
//
// N = 1024, 2048, 4096 always (the CI smoke run executes every benchmark
// once); 8192 .. 65536 only when the environment variable KAPPA_BENCH_LARGE
// is set, since exact attention at N = 65536 costs 1.1 TFLOP a call:
//   KAPPA_BENCH_LARGE=1 ./build/bench/benchmarks/bench_approx
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/attention/linear.hpp"
#include "kappa/attention/nystrom.hpp"
#include "kappa/attention/random_features.hpp"
#include "kappa/attention/sampled.hpp"
#include "kappa/attention/sketch.hpp"
#include "kappa/attention/whole_attention.hpp"
#include "kappa/core/random.hpp"
#include "kappa/core/threading.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using Matrix = RowMatrix<float>;
constexpr Index kD = 64;

using Approx = std::function<Matrix(const Matrix&, const Matrix&, const Matrix&)>;

/// A method at its accuracy target: name, m and how to build it.
struct Method {
  std::string name;
  Index m;
  std::function<Approx(Index m)> make;
};

template <class Kernel>
Method random_features(std::string name, Index m, kappa::kernels::Projection projection) {
  return {std::move(name), m, [projection](Index m_) -> Approx {
            const Kernel kernel(kD, m_, /*seed=*/1234, {.projection = projection});
            return [kernel](const Matrix& q, const Matrix& k, const Matrix& v) {
              return kappa::linear_attention(q, k, v, kernel);
            };
          }};
}

template <class Policy>
Method whole(std::string name, Index m, std::function<Policy(Index)> make_policy) {
  return {std::move(name), m, [make_policy](Index m_) -> Approx {
            const Policy policy = make_policy(m_);
            return [policy](const Matrix& q, const Matrix& k, const Matrix& v) {
              return kappa::approx::approximate_attention(policy, q, k, v);
            };
          }};
}

/// The methods and their fixed m (see the file comment).
std::vector<Method> methods() {
  using kappa::kernels::PositiveRandomFeatures;
  using kappa::kernels::Projection;
  using kappa::kernels::TrigonometricRandomFeatures;
  namespace ap = kappa::approx;
  return {
      whole<ap::Nystrom>(
          "Nystrom", 256,
          [](Index m) { return ap::Nystrom(m, 1234, ap::Landmarks::kSegmentMeans); }),
      whole<ap::SequenceSketch>(
          "SequenceSketch", 256,
          [](Index m) { return ap::SequenceSketch(m, 1234, ap::SketchKind::kGaussian); }),
      whole<ap::SampledAttention>(
          "SampledAttention", 256,
          [](Index m) { return ap::SampledAttention(m, 1234, ap::Proposal::kNormBound); }),
      random_features<PositiveRandomFeatures>("PositiveRF_Orthogonal", 1024,
                                              Projection::kOrthogonal),
      random_features<TrigonometricRandomFeatures>("TrigonometricRF_Orthogonal", 1024,
                                                   Projection::kOrthogonal),
  };
}

std::vector<Index> lengths() {
  std::vector<Index> n{1024, 2048, 4096};
  if (std::getenv("KAPPA_BENCH_LARGE") != nullptr) {
    for (Index big : {8192, 16384, 32768, 65536}) n.push_back(big);
  }
  return n;
}

Matrix seeded(Index rows, std::uint64_t seed) {
  return kappa::seeded_normal_matrix<float>(rows, kD, seed, 1.0);
}

void set_tokens(benchmark::State& state, Index n) {
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Exact(benchmark::State& state) {
  const Index n = state.range(0);
  kappa::set_num_threads(1);
  const Matrix q = seeded(n, 1), k = seeded(n, 2), v = seeded(n, 3);
  Matrix y(n, kD);
  kappa::AttentionWorkspace<float> ws;
  kappa::attention_into<float>(q, k, v, y, ws);  // warm-up
  for (auto _ : state) {
    kappa::attention_into<float>(q, k, v, y, ws);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_tokens(state, n);
  state.counters["GFLOP/s"] = benchmark::Counter(4e-9 * double(n) * double(n) * double(kD),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void run_method(benchmark::State& state, const Method& method) {
  const Index n = state.range(0);
  kappa::set_num_threads(1);
  const Matrix q = seeded(n, 1), k = seeded(n, 2), v = seeded(n, 3);
  const Approx approx = method.make(method.m);
  Matrix y = approx(q, k, v);  // warm-up
  for (auto _ : state) {
    y = approx(q, k, v);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_tokens(state, n);
  state.counters["m"] = static_cast<double>(method.m);
}

const bool kRegistered = [] {
  auto* exact = benchmark::RegisterBenchmark("BM_Exact", BM_Exact);
  exact->ArgName("N")->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const Index n : lengths()) exact->Arg(n);
  for (const Method& m : methods()) {
    auto* b = benchmark::RegisterBenchmark(("BM_" + m.name).c_str(),
                                           [m](benchmark::State& st) { run_method(st, m); });
    b->ArgName("N")->Unit(benchmark::kMillisecond)->UseRealTime();
    for (const Index n : lengths()) b->Arg(n);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
