// bench_quant: the weight products of a decode step with weights stored as
// float, bfloat16, fp16 (F16View: a GGUF F16 tensor viewed as stored,
// kappa/core/stored_weights.hpp; F32View likewise for F32), Q8_0, Q4_0
// (also Q4_0Interleaved: its rows interleaved by eights), Q4_K (and
// Q4_KInterleaved: X in Q8_K) and Q6_K
// (kappa/core/weight_storage.hpp, kappa/core/quant_weights.hpp), beside a
// plain read of as many bytes (fp16 takes bfloat16's).
//
//   BM_Decode<Storage>/k/m/head/threads  one row: out = x W (W: k x m, the
//       projections; head = 0) or out = x E^T (E: m x k, the output head;
//       head = 1), on 1 or 2 threads. Counter GB/s: the weight bytes
//       (WeightMatrix::bytes()) per second; the time is the time per token.
//   BM_PlainRead/bytes/threads  the ceiling: as many bytes summed
//       (kappa_bench::memory_read); one per format and shape, since the
//       bytes differ (and smaller ones may stay in a larger cache).
//   BM_Prefill<Storage>/n/k/m/threads  n = 128 rows times W (4096 x 4096):
//       GFLOP/s = 2 n k m per second. Dense (W as k x m) and F32View (a
//       GGUF F32 tensor viewed as stored, W^T) are kappa's float GEMM
//       (kappa/core/gemm_simd.hpp), which fp16 uses too, widening; bf16
//       (held as W^T, as a file stores it) too where the build lacks
//       AVX512_BF16, else its dot products (X rounded to bfloat16).
//   BM_PrefillEigen/n/k/m/threads  the peer: Eigen's GEMM, same shape.
//   BM_FmaPeak/threads  the FMA peak, the prefill ceiling.
//   BM_Qkv<Storage>/k/threads  attention's three projections of one decode
//       row, Q = x W^Q, K = x W^K, V = x W^V: GPT-2 small's (k = 768, three
//       768 x 768) and a 1B LLaMA's (k = 2048, 2048 + 512 + 512 outputs),
//       one product after another (the peer) and with multiply_each (one
//       parallel region, X quantized once), alternated in every iteration.
//       Counters: the three matrices' bytes per second each way, and
//       each_speedup, the time one by one over the time with multiply_each.
// The matrices are built once per format and shape (quantizing takes longer
// than the products) and kept for the binary's run.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#include "bench_common.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/quant_weights.hpp"
#include "kappa/core/stored_weights.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/core/weight_storage.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;

RowMatrix<float> random_matrix(Index r, Index c, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  RowMatrix<float> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

/// W (k x m) for out = x W, or E (m x k) for out = x E^T, in storage S,
/// built once.
template <class S>
struct Held {
  using type = kappa::WeightMatrix<float, S>;
};
/// The matrix make(k, m, head) returns, built once per shape and kept for
/// the binary's run (one cache per call site: Make is its lambda's type).
template <class W, class Make>
const W& built_once(Index k, Index m, bool head, const Make& make) {
  static std::map<std::tuple<Index, Index, bool>, std::unique_ptr<W>> made;
  auto& slot = made[{k, m, head}];
  if (!slot) slot = make(k, m, head);
  return *slot;
}

template <class S>
const typename Held<S>::type& weights(Index k, Index m, bool head) {
  using W = kappa::WeightMatrix<float, S>;
  return built_once<W>(k, m, head, [](Index kk, Index mm, bool hd) {
    const RowMatrix<float> w = hd ? random_matrix(mm, kk, 1) : random_matrix(kk, mm, 1);
    // bfloat16 and the block formats: P = E for the head, W^T otherwise
    if constexpr (std::is_constructible_v<W, RowMatrix<float>, kappa::BlocksAlong>)
      return std::make_unique<W>(w, hd ? kappa::BlocksAlong::kCols : kappa::BlocksAlong::kRows);
    else
      return std::make_unique<W>(w);
  });
}

/// The fp16 view that a GGUF file's F16 tensor becomes
/// (WeightMatrix<float, AsStoredWeights> holding detail::MappedF16): W's
/// values rounded to fp16 in the file's layout, built once.
struct F16View {};
template <>
struct Held<F16View> {
  using type = kappa::WeightMatrix<float, kappa::AsStoredWeights>;
};
template <>
const kappa::WeightMatrix<float, kappa::AsStoredWeights>& weights<F16View>(Index k, Index m,
                                                                           bool head) {
  using W = kappa::WeightMatrix<float, kappa::AsStoredWeights>;
  return built_once<W>(k, m, head, [](Index kk, Index mm, bool hd) {
    // P = W^T (m rows of k) for out = x W, P = E (m rows of k) for x E^T
    const RowMatrix<float> p = random_matrix(mm, kk, 1);
    auto bytes =
        std::make_shared<std::vector<unsigned char>>(2 * static_cast<std::size_t>(p.size()));
    for (Index i = 0; i < p.size(); ++i) {
      const std::uint16_t h = kappa::quant::fp16_from_float(p.data()[i]);
      std::memcpy(bytes->data() + 2 * i, &h, 2);
    }
    const unsigned char* data = bytes->data();
    return std::make_unique<W>(kappa::detail::MappedF16<float>(
        hd ? mm : kk, hd ? kk : mm, hd ? kappa::BlocksAlong::kCols : kappa::BlocksAlong::kRows,
        data, std::move(bytes)));
  });
}

/// The float view that a GGUF file's F32 tensor becomes
/// (detail::MappedDense: P = W^T as the file stores it, no copy), built once.
struct F32View {};
template <>
struct Held<F32View> {
  using type = kappa::WeightMatrix<float, kappa::AsStoredWeights>;
};
template <>
const kappa::WeightMatrix<float, kappa::AsStoredWeights>& weights<F32View>(Index k, Index m,
                                                                           bool head) {
  using W = kappa::WeightMatrix<float, kappa::AsStoredWeights>;
  return built_once<W>(k, m, head, [](Index kk, Index mm, bool hd) {
    auto p = std::make_shared<RowMatrix<float>>(random_matrix(mm, kk, 1));  // P: m rows of k
    const float* data = p->data();
    return std::make_unique<W>(kappa::detail::MappedDense<float>(
        hd ? mm : kk, hd ? kk : mm, hd ? kappa::BlocksAlong::kCols : kappa::BlocksAlong::kRows,
        data, std::move(p)));
  });
}

/// Q4_0 or Q4_K (F) with the rows of P interleaved by eights
/// (WeightMatrix<float, F>::interleaved(); Q4_K's decode takes X in Q8_K),
/// built once.
template <class F>
const kappa::WeightMatrix<float, F>& interleaved_weights(Index k, Index m, bool head) {
  using W = kappa::WeightMatrix<float, F>;
  return built_once<W>(k, m, head, [](Index kk, Index mm, bool hd) {
    return std::make_unique<W>(weights<F>(kk, mm, hd).interleaved());
  });
}
struct Q4_0Interleaved {};
template <>
struct Held<Q4_0Interleaved> {
  using type = kappa::WeightMatrix<float, kappa::Q4_0Weights>;
};
template <>
const kappa::WeightMatrix<float, kappa::Q4_0Weights>& weights<Q4_0Interleaved>(Index k, Index m,
                                                                               bool head) {
  return interleaved_weights<kappa::Q4_0Weights>(k, m, head);
}
struct Q4_KInterleaved {};
template <>
struct Held<Q4_KInterleaved> {
  using type = kappa::WeightMatrix<float, kappa::Q4_KWeights>;
};
template <>
const kappa::WeightMatrix<float, kappa::Q4_KWeights>& weights<Q4_KInterleaved>(Index k, Index m,
                                                                               bool head) {
  return interleaved_weights<kappa::Q4_KWeights>(k, m, head);
}

struct ThreadsScope {
  explicit ThreadsScope(int n) { kappa::set_num_threads(n); }
  ~ThreadsScope() { kappa::set_num_threads(1); }
};

template <class S>
void BM_Decode(benchmark::State& st) {
  const Index k = st.range(0), m = st.range(1);
  const bool head = st.range(2) != 0;
  const ThreadsScope threads(static_cast<int>(st.range(3)));
  const auto& w = weights<S>(k, m, head);
  const RowMatrix<float> x = random_matrix(1, k, 2) * 50.0f;
  RowMatrix<float> out(1, m);
  for (auto _ : st) {
    if (head)
      w.multiply_transposed(x, out);
    else
      w.multiply(x, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes()) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
  st.counters["MB"] = static_cast<double>(w.bytes()) * 1e-6;
}

void BM_PlainRead(benchmark::State& st) {
  kappa_bench::memory_read(st, static_cast<std::size_t>(st.range(0)),
                           static_cast<int>(st.range(1)));
}

template <class S>
void BM_Prefill(benchmark::State& st) {
  const Index n = st.range(0), k = st.range(1), m = st.range(2);
  const ThreadsScope threads(static_cast<int>(st.range(3)));
  const auto& w = weights<S>(k, m, false);
  const RowMatrix<float> x = random_matrix(n, k, 3) * 50.0f;
  RowMatrix<float> out(n, m);
  for (auto _ : st) {
    w.multiply(x, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * k * m) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

/// The peer of the float prefill: Eigen's GEMM of the same shape (what
/// kappa's products used before kappa/core/gemm_simd.hpp).
void BM_PrefillEigen(benchmark::State& st) {
  const Index n = st.range(0), k = st.range(1), m = st.range(2);
  const ThreadsScope threads(static_cast<int>(st.range(3)));
  const RowMatrix<float>& w = weights<kappa::DenseWeights>(k, m, false).dense();
  const RowMatrix<float> x = random_matrix(n, k, 3) * 50.0f;
  RowMatrix<float> out(n, m);
  for (auto _ : st) {
    out.noalias() = x * w;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * k * m) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

/// Attention's W^Q, W^K, W^V for d_model k (GPT-2 small at 768, a 1B
/// LLaMA's grouped K and V at 2048), three distinct matrices, built once.
template <class S>
const std::array<std::unique_ptr<kappa::WeightMatrix<float, S>>, 3>& qkv_weights(Index k) {
  using W = kappa::WeightMatrix<float, S>;
  static std::map<Index, std::array<std::unique_ptr<W>, 3>> made;
  auto& slot = made[k];
  if (!slot[0]) {
    const std::array<Index, 3> widths =
        k == 768 ? std::array<Index, 3>{768, 768, 768} : std::array<Index, 3>{k, k / 4, k / 4};
    for (std::size_t i = 0; i < 3; ++i)
      slot[i] = std::make_unique<W>(random_matrix(k, widths[i], 10 + i));
  }
  return slot;
}

/// One decode row through W^Q, W^K, W^V, the products one after another and
/// with multiply_each, alternated inside each iteration so that both see the
/// same state of the machine (this VM's speed moves 15-30 % between runs).
template <class S>
void BM_Qkv(benchmark::State& st) {
  using W = kappa::WeightMatrix<float, S>;
  const Index k = st.range(0);
  const ThreadsScope threads(static_cast<int>(st.range(1)));
  const auto& w = qkv_weights<S>(k);
  const std::array<const W*, 3> ws{w[0].get(), w[1].get(), w[2].get()};
  const RowMatrix<float> x = random_matrix(1, k, 2) * 50.0f;
  std::array<RowMatrix<float>, 3> y;
  double bytes = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    y[i].resize(1, ws[i]->cols());
    bytes += static_cast<double>(ws[i]->bytes());
  }
  std::array<kappa::MatrixRef<float>, 3> out{
      kappa::MatrixRef<float>(y[0]), kappa::MatrixRef<float>(y[1]), kappa::MatrixRef<float>(y[2])};
  const auto [t_one, t_each] = kappa_bench::alternate(
      st,
      [&] {
        for (std::size_t i = 0; i < 3; ++i) ws[i]->multiply(x, out[i]);
        benchmark::ClobberMemory();
      },
      [&] {
        kappa::multiply_each<float>(x, ws, out);
        benchmark::ClobberMemory();
      });
  const double n = static_cast<double>(st.iterations());
  st.counters["one_by_one_GB/s"] = bytes * 1e-9 * n / t_one;
  st.counters["each_GB/s"] = bytes * 1e-9 * n / t_each;
  st.counters["each_speedup"] = t_one / t_each;
}

void qkv_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"k", "threads"});
  for (int threads : {1, 2})
    for (int k : {768, 2048}) b->Args({k, threads});
  b->UseRealTime();
}

void BM_FmaPeak(benchmark::State& st) {
  kappa_bench::fma_peak(st, static_cast<int>(st.range(0)));
}

/// The three decode shapes: 4096 x 4096, 2048 x 8192, and the GPT-2 head
/// (768 x 50257, transposed). Every k is a multiple of 256, so the k-quants
/// (Q4_K, Q6_K) take them too.
void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"k", "m", "head", "threads"});
  for (int threads : {1, 2}) {
    b->Args({4096, 4096, 0, threads});
    b->Args({2048, 8192, 0, threads});
    b->Args({768, 50257, 1, threads});
  }
  b->UseRealTime();
}

/// Plain reads of the bytes each format takes for the decode shapes (the
/// 4096 x 4096 and 2048 x 8192 matrices take the same bytes).
void read_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"bytes", "threads"});
  const long long weights_square = 4096LL * 4096, weights_head = 768LL * 50257;
  for (int threads : {1, 2}) {
    for (long long weights : {weights_square, weights_head}) {
      const long long blocks = weights / 32;
      b->Args({4 * weights, threads});            // float
      b->Args({2 * weights, threads});            // bfloat16
      b->Args({34 * blocks, threads});            // Q8_0
      b->Args({18 * blocks, threads});            // Q4_0, and Q4_K (144 bytes per 256: the same)
      b->Args({210 * (weights / 256), threads});  // Q6_K
    }
  }
  b->UseRealTime();
}

void prefill_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "k", "m", "threads"});
  for (int threads : {1, 2}) b->Args({128, 4096, 4096, threads});
  b->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_Decode, kappa::DenseWeights)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, kappa::Bf16Weights)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, F16View)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, kappa::Q8_0Weights)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, kappa::Q4_0Weights)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, Q4_0Interleaved)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, kappa::Q4_KWeights)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, Q4_KInterleaved)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(BM_Decode, kappa::Q6_KWeights)->Apply(decode_shapes);
BENCHMARK(BM_PlainRead)->Apply(read_sizes);
BENCHMARK_TEMPLATE(BM_Prefill, kappa::DenseWeights)->Apply(prefill_shapes);
BENCHMARK_TEMPLATE(BM_Prefill, F32View)->Apply(prefill_shapes);
BENCHMARK(BM_PrefillEigen)->Apply(prefill_shapes);
BENCHMARK_TEMPLATE(BM_Prefill, kappa::Bf16Weights)->Apply(prefill_shapes);
BENCHMARK_TEMPLATE(BM_Prefill, F16View)->Apply(prefill_shapes);
BENCHMARK_TEMPLATE(BM_Prefill, kappa::Q8_0Weights)->Apply(prefill_shapes);
BENCHMARK_TEMPLATE(BM_Prefill, kappa::Q4_0Weights)->Apply(prefill_shapes);
BENCHMARK_TEMPLATE(BM_Prefill, kappa::Q4_KWeights)->Apply(prefill_shapes);
BENCHMARK_TEMPLATE(BM_Prefill, kappa::Q6_KWeights)->Apply(prefill_shapes);
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK_TEMPLATE(BM_Qkv, kappa::DenseWeights)->Apply(qkv_shapes);
BENCHMARK_TEMPLATE(BM_Qkv, kappa::Bf16Weights)->Apply(qkv_shapes);
BENCHMARK_TEMPLATE(BM_Qkv, kappa::Q8_0Weights)->Apply(qkv_shapes);
BENCHMARK_TEMPLATE(BM_Qkv, kappa::Q4_0Weights)->Apply(qkv_shapes);
BENCHMARK_TEMPLATE(BM_Qkv, kappa::Q4_KWeights)->Apply(qkv_shapes);

}  // namespace

BENCHMARK_MAIN();
