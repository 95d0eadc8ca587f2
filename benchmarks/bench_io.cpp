// bench_io: reading weights from safetensors files, against a plain memcpy of
// the same bytes in the same binary.
//
// Two files are written once to the temporary directory: 100 MB of F32 (one
// 5000 x 5000 tensor) and 100 MB of BF16 (one 10000 x 5000 tensor). The file
// stays open across iterations (its pages mapped and in the page cache), as a
// model loader holds a checkpoint; GB/s is the file bytes read per second.
//   BM_SafetensorsOpen         map and validate both files (header only)
//   BM_ReadF32                 matrix<float>() of the F32 tensor: allocate the
//                              output and copy (fresh pages every iteration)
//   BM_ReadF32Into             the same copy into a preallocated matrix
//                              (matrix_into)
//   BM_ViewF32Sum              view<float>() (zero copy) and a sum of it
//   BM_ReadBF16                matrix<float>() of the BF16 tensor (widening
//                              conversion; writes twice the bytes it reads)
//   BM_ReadBF16Into            the same conversion into a preallocated matrix
//   BM_MemoryCopy              memcpy of 100 MB between preallocated buffers:
//                              the ceiling
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <cstdio>
#include <filesystem>
#include <string>

#include "kappa/io/safetensors.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::io::SafetensorsFile;

constexpr std::size_t kBytes = 100'000'000;

struct Files {
  std::string f32_path, bf16_path;
  Files() {
    const auto dir = std::filesystem::temp_directory_path();
    f32_path = (dir / "kappa_bench_io_f32.safetensors").string();
    bf16_path = (dir / "kappa_bench_io_bf16.safetensors").string();
    kappa::io::SafetensorsWriter w32;
    w32.add("w", RowMatrix<float>::Random(5000, 5000), kappa::io::Storage::kF32);
    w32.write(f32_path);
    kappa::io::SafetensorsWriter w16;
    w16.add("w", RowMatrix<float>::Random(10000, 5000), kappa::io::Storage::kBF16);
    w16.write(bf16_path);
  }
  ~Files() {
    std::remove(f32_path.c_str());
    std::remove(bf16_path.c_str());
  }
};

const Files& files() {
  static const Files f;
  return f;
}

void set_rate(benchmark::State& st, double bytes) {
  st.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SafetensorsOpen(benchmark::State& st) {
  const Files& f = files();
  for (auto _ : st) {
    SafetensorsFile a(f.f32_path), b(f.bf16_path);
    benchmark::DoNotOptimize(a.data_offset() + b.data_offset());
  }
}

void BM_ReadF32(benchmark::State& st) {
  const SafetensorsFile file(files().f32_path);
  (void)file.matrix<float>("w");  // warm up: map the pages
  for (auto _ : st) {
    RowMatrix<float> m = file.matrix<float>("w");
    benchmark::DoNotOptimize(m.data());
    benchmark::ClobberMemory();
  }
  set_rate(st, double(kBytes));
}

void BM_ReadF32Into(benchmark::State& st) {
  const SafetensorsFile file(files().f32_path);
  RowMatrix<float> m = file.matrix<float>("w");
  for (auto _ : st) {
    file.matrix_into<float>("w", m);
    benchmark::DoNotOptimize(m.data());
    benchmark::ClobberMemory();
  }
  set_rate(st, double(kBytes));
}

void BM_ViewF32Sum(benchmark::State& st) {
  const SafetensorsFile file(files().f32_path);
  for (auto _ : st) {
    const auto v = file.view<float>("w");
    float s = v.sum();
    benchmark::DoNotOptimize(s);
  }
  set_rate(st, double(kBytes));
}

void BM_ReadBF16(benchmark::State& st) {
  const SafetensorsFile file(files().bf16_path);
  (void)file.matrix<float>("w");
  for (auto _ : st) {
    RowMatrix<float> m = file.matrix<float>("w");
    benchmark::DoNotOptimize(m.data());
    benchmark::ClobberMemory();
  }
  set_rate(st, double(kBytes));
}

void BM_ReadBF16Into(benchmark::State& st) {
  const SafetensorsFile file(files().bf16_path);
  RowMatrix<float> m = file.matrix<float>("w");
  for (auto _ : st) {
    file.matrix_into<float>("w", m);
    benchmark::DoNotOptimize(m.data());
    benchmark::ClobberMemory();
  }
  set_rate(st, double(kBytes));
}

void BM_MemoryCopy(benchmark::State& st) {
  kappa_bench::memory_copy(st, kBytes, 1);
}

}  // namespace

BENCHMARK(BM_SafetensorsOpen)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ReadF32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadF32Into)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ViewF32Sum)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadBF16)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadBF16Into)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemoryCopy)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
