#include <benchmark/benchmark.h>
#include "kappa/kappa.hpp"
static void BM_Placeholder(benchmark::State& s) { for (auto _ : s) benchmark::DoNotOptimize(s.iterations()); }
BENCHMARK(BM_Placeholder);
BENCHMARK_MAIN();
