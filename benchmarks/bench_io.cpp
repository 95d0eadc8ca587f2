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
//
// Opening is linear in the header (issue 24: it was quadratic in the number
// of tensors through nlohmann's callback parser and a duplicate-key scan).
// Files of n = 1k, 10k, 100k one-byte U8 tensors (header written once per n
// to the temporary directory; about 60 bytes of header per tensor), rates
// per second of tensors and of header MB:
//   BM_SafetensorsOpenHeader/n map and validate the file (SafetensorsFile)
//   BM_JsonParseHeader/n       nlohmann::json::parse of the same header bytes
//                              (in memory, no callback): the peer; kappa's
//                              open does this parse's work plus validation
// A flat tensors/s from 1k to 100k is linear time; the ratio of the two rows
// at one n is the cost of validation over a bare parse.
#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

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

/// A file of `n` one-byte U8 tensors "model.layers.<i>.w" (names shaped like
/// a checkpoint's), written once per n and removed at exit.
struct TinyTensorsFile {
  std::string path, header;
  explicit TinyTensorsFile(std::int64_t n) {
    header = "{";
    for (std::int64_t i = 0; i < n; ++i) {
      if (i) header += ',';
      header += "\"model.layers." + std::to_string(i) +
                ".w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) +
                "," + std::to_string(i + 1) + "]}";
    }
    header += '}';
    path = (std::filesystem::temp_directory_path() /
            ("kappa_bench_io_tiny_" + std::to_string(n) + ".safetensors"))
               .string();
    std::string bytes(8, '\0');
    for (int k = 0; k < 8; ++k)
      bytes[static_cast<std::size_t>(k)] = static_cast<char>((header.size() >> (8 * k)) & 0xffu);
    bytes += header;
    bytes.append(static_cast<std::size_t>(n), '\x01');
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
      throw std::runtime_error("bench_io: cannot write " + path);
    std::fclose(f);
  }
  ~TinyTensorsFile() { std::remove(path.c_str()); }
};

const TinyTensorsFile& tiny_file(std::int64_t n) {
  static std::map<std::int64_t, TinyTensorsFile> files;
  auto it = files.find(n);
  if (it == files.end()) it = files.try_emplace(n, n).first;
  return it->second;
}

void set_header_rates(benchmark::State& st, std::int64_t n, std::size_t header_bytes) {
  st.counters["tensors/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["header MB/s"] = benchmark::Counter(double(header_bytes) * 1e-6,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SafetensorsOpenHeader(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  const TinyTensorsFile& f = tiny_file(n);
  for (auto _ : st) {
    const SafetensorsFile file(f.path);
    benchmark::DoNotOptimize(file.size());
  }
  set_header_rates(st, n, f.header.size());
}

void BM_JsonParseHeader(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  const TinyTensorsFile& f = tiny_file(n);
  for (auto _ : st) {
    const nlohmann::json j = nlohmann::json::parse(f.header);
    benchmark::DoNotOptimize(j.size());
  }
  set_header_rates(st, n, f.header.size());
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
BENCHMARK(BM_SafetensorsOpenHeader)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_JsonParseHeader)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
