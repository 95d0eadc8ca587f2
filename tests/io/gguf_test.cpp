// The GGUF reader and the block formats, against ggml itself: the files and
// block data in tests/data/io/gguf/ were written by ggml 0.25.1's own code
// (libggml-base.so of npm @node-llama-cpp/linux-x64 3.22.1, driven by
// tests/reference/ggml_reference.c): its gguf writer, its quantizers and its
// to-float functions, with what ggml's gguf reader read back in
// *.expected.json. Then hostile files built byte by byte here, each of which
// must be a FormatError naming the file and the field.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/io/gguf.hpp"
#include "kappa/io/safetensors.hpp"

namespace {
namespace gguf_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
using kappa::FormatError;
using kappa::io::GgmlType;
using kappa::io::GgufArray;
using kappa::io::GgufFile;
using kappa::io::GgufType;

const std::string kGgufDir = std::string(KAPPA_TEST_DATA_DIR) + "/io/gguf/";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> read_f32(const std::string& path) {
  const std::string b = read_bytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

/// A file name unique to this process and test.
std::string gguf_temp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return (fs::temp_directory_path() /
          ("kappa_gguf_test_" + std::to_string(::getpid()) + "_" + info->name() + "_" + name))
      .string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// The message of the FormatError that opening `bytes` as a file throws
/// ("" and a test failure if it opens or throws something else).
std::string open_error(const std::string& bytes, const std::string& name = "f.gguf") {
  const std::string path = gguf_temp_path(name);
  write_bytes(path, bytes);
  std::string msg;
  try {
    GgufFile f(path);
    ADD_FAILURE() << "opened without an error";
  } catch (const FormatError& e) {
    msg = e.what();
    EXPECT_NE(msg.find("kappa: " + path + ": byte "), std::string::npos) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a FormatError: " << e.what();
  }
  fs::remove(path);
  return msg;
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

/// Indices where two float arrays differ in their bits (NaNs included).
std::size_t count_bit_differences(const float* a, const float* b, std::size_t n) {
  std::size_t d = 0;
  for (std::size_t i = 0; i < n; ++i) d += same_bits(a[i], b[i]) ? 0 : 1;
  return d;
}

// ---- ggml's type table --------------------------------------------------------------

TEST(GgufTypes, TableEqualsGgmls) {
  std::istringstream in(read_bytes(kGgufDir + "ggml_types.txt"));
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::uint32_t id = 0;
    std::string name, rest;
    fields >> id;
    fields.get();
    std::getline(fields, name, '\t');
    std::int64_t block = 0, size = 0;
    fields >> block >> size;
    const auto* info = kappa::io::ggml_type_info(id);
    if (block == 0) {  // ids ggml removed ("DEPRECATED", "TYPE_... REMOVED")
      EXPECT_EQ(info, nullptr) << id;
    } else {
      ASSERT_NE(info, nullptr) << id;
      EXPECT_EQ(info->name, name) << id;
      EXPECT_EQ(info->block_size, block) << name;
      EXPECT_EQ(info->type_size, size) << name;
    }
    ++rows;
  }
  EXPECT_EQ(rows, 43);
  EXPECT_EQ(kappa::io::ggml_type_info(43), nullptr);
  EXPECT_EQ(kappa::io::ggml_type_name(GgmlType::kQ4_K), "q4_K");
}

// ---- block formats against ggml's quantizers and to-float functions ---------------

struct BlockCase {
  const char* name;
  void (*dequantize)(const unsigned char*, float*, std::int64_t);
};

void f16_row(const unsigned char* in, float* y, std::int64_t k) {
  for (std::int64_t i = 0; i < k; ++i) {
    std::uint16_t h = 0;
    std::memcpy(&h, in + 2 * i, 2);
    y[i] = kappa::quant::fp16_to_float(h);
  }
}
void bf16_row(const unsigned char* in, float* y, std::int64_t k) {
  for (std::int64_t i = 0; i < k; ++i) {
    std::uint16_t h = 0;
    std::memcpy(&h, in + 2 * i, 2);
    y[i] = kappa::quant::bf16_to_float(h);
  }
}

const BlockCase kBlockCases[] = {
    {"q8_0", kappa::quant::dequantize_row_q8_0},
    {"q4_0", kappa::quant::dequantize_row_q4_0},
    {"q4_k", kappa::quant::dequantize_row_q4_K},
    {"q6_k", kappa::quant::dequantize_row_q6_K},
    {"f16", f16_row},
    {"bf16", bf16_row},
};

// Bitwise for every format: each of ggml's to-float functions is exact float
// arithmetic in a fixed order (products of small integers and f16 scales,
// Q4_K's one subtraction, Q6_K's (d sc) q), which kappa repeats.
TEST(GgufBlocks, DequantizeEqualsGgmlBitForBit) {
  for (const BlockCase& c : kBlockCases) {
    for (const std::string kind : {"quant", "random"}) {
      const std::string stem = kGgufDir + "blocks/" + c.name + "." + kind;
      const std::string bytes = read_bytes(stem + ".bin");
      const std::vector<float> want =
          read_f32(kGgufDir + "blocks/" + c.name +
                   (kind == "quant" ? ".dequant.f32" : ".random_dequant.f32"));
      ASSERT_FALSE(want.empty()) << stem;
      std::vector<float> got(want.size());
      c.dequantize(reinterpret_cast<const unsigned char*>(bytes.data()), got.data(),
                   static_cast<std::int64_t>(got.size()));
      EXPECT_EQ(count_bit_differences(got.data(), want.data(), want.size()), 0u) << stem;
    }
  }
}

TEST(GgufBlocks, QuantizeQ8_0AndQ4_0EqualGgmlByteForByte) {
  const std::vector<float> x = read_f32(kGgufDir + "blocks/input.f32");
  ASSERT_EQ(x.size(), 12u * 256u);
  const auto n = static_cast<std::int64_t>(x.size());
  {
    const std::string want = read_bytes(kGgufDir + "blocks/q8_0.quant.bin");
    std::string got(want.size(), '\0');
    kappa::quant::quantize_row_q8_0(x.data(), reinterpret_cast<unsigned char*>(got.data()), n);
    EXPECT_EQ(got, want);
    for (std::size_t b = 0; b < want.size() / 34; ++b)
      EXPECT_EQ(got.substr(b * 34, 34), want.substr(b * 34, 34)) << "Q8_0 block " << b;
  }
  {
    const std::string want = read_bytes(kGgufDir + "blocks/q4_0.quant.bin");
    std::string got(want.size(), '\0');
    kappa::quant::quantize_row_q4_0(x.data(), reinterpret_cast<unsigned char*>(got.data()), n);
    EXPECT_EQ(got, want);
    for (std::size_t b = 0; b < want.size() / 18; ++b)
      EXPECT_EQ(got.substr(b * 18, 18), want.substr(b * 18, 18)) << "Q4_0 block " << b;
  }
}

TEST(GgufBlocks, F16AndBf16ConversionsEqualGgmls) {
  const std::vector<float> x = read_f32(kGgufDir + "blocks/input.f32");
  const std::string f16 = read_bytes(kGgufDir + "blocks/f16.quant.bin");
  const std::string bf16 = read_bytes(kGgufDir + "blocks/bf16.quant.bin");
  ASSERT_EQ(f16.size(), 2 * x.size());
  ASSERT_EQ(bf16.size(), 2 * x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint16_t h = 0, b = 0;
    std::memcpy(&h, f16.data() + 2 * i, 2);
    std::memcpy(&b, bf16.data() + 2 * i, 2);
    EXPECT_EQ(kappa::quant::fp16_from_float(x[i]), h) << i << " " << x[i];
    EXPECT_EQ(kappa::io::f16_from_double(x[i]), h) << i << " " << x[i];
    EXPECT_EQ(kappa::io::bf16_from_double(x[i]), b) << i << " " << x[i];
  }
}

// Every binary16 value converts to float and back to itself (NaNs to 0x7e00).
TEST(GgufBlocks, Fp16RoundTripsEveryValue) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = kappa::quant::fp16_to_float(bits);
    EXPECT_TRUE(same_bits(f, kappa::io::f16_to_float(bits))) << h;
    const std::uint16_t back = kappa::quant::fp16_from_float(f);
    if (std::isnan(f)) {
      EXPECT_EQ(back & 0x7fffu, 0x7e00u) << h;
    } else {
      EXPECT_EQ(back, bits) << h;
    }
  }
}

// Q8_0 reproduces its input within half a step d = amax / 127, plus what
// storing d as f16 moves (|q| <= 127 times d's rounding, 2^-11 d); Q4_0's
// levels are -8 d .. 7 d, so the extreme opposite to the block's maximum
// clamps to 7 d: within one step d = amax / 8.
TEST(GgufBlocks, QuantizeDequantizeErrorIsBounded) {
  std::vector<float> x(1024);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  std::vector<unsigned char> q8(x.size() / 32 * 34), q4(x.size() / 32 * 18);
  std::vector<float> y8(x.size()), y4(x.size());
  const auto n = static_cast<std::int64_t>(x.size());
  kappa::quant::quantize_row_q8_0(x.data(), q8.data(), n);
  kappa::quant::dequantize_row_q8_0(q8.data(), y8.data(), n);
  kappa::quant::quantize_row_q4_0(x.data(), q4.data(), n);
  kappa::quant::dequantize_row_q4_0(q4.data(), y4.data(), n);
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    for (std::size_t j = 0; j < 32; ++j) {
      const std::size_t i = b * 32 + j;
      EXPECT_LE(std::fabs(y8[i] - x[i]), amax / 127 * (0.5f + 127.0f / 2048) + 1e-6f) << i;
      EXPECT_LE(std::fabs(y4[i] - x[i]), amax / 8 * (1.0f + 8.0f / 2048) + 1e-6f) << i;
    }
  }
}

// ---- files written by ggml's gguf writer ----------------------------------------------

/// Checks `v` against ggml's reading of it (a JSON value of type `type`).
void expect_scalar(const kappa::io::GgufValue& v, const std::string& type,
                   const nlohmann::json& want, const std::string& key) {
  SCOPED_TRACE(key);
  ASSERT_EQ(std::string(kappa::io::gguf_type_name(kappa::io::gguf_type_of(v))), type);
  switch (kappa::io::gguf_type_of(v)) {
    case GgufType::kU8:
      EXPECT_EQ(std::get<std::uint8_t>(v), want.get<std::uint8_t>());
      break;
    case GgufType::kI8:
      EXPECT_EQ(std::get<std::int8_t>(v), want.get<std::int8_t>());
      break;
    case GgufType::kU16:
      EXPECT_EQ(std::get<std::uint16_t>(v), want.get<std::uint16_t>());
      break;
    case GgufType::kI16:
      EXPECT_EQ(std::get<std::int16_t>(v), want.get<std::int16_t>());
      break;
    case GgufType::kU32:
      EXPECT_EQ(std::get<std::uint32_t>(v), want.get<std::uint32_t>());
      break;
    case GgufType::kI32:
      EXPECT_EQ(std::get<std::int32_t>(v), want.get<std::int32_t>());
      break;
    case GgufType::kU64:
      EXPECT_EQ(std::get<std::uint64_t>(v), want.get<std::uint64_t>());
      break;
    case GgufType::kI64:
      EXPECT_EQ(std::get<std::int64_t>(v), want.get<std::int64_t>());
      break;
    case GgufType::kF32:
      EXPECT_TRUE(same_bits(std::get<float>(v), static_cast<float>(want.get<double>())));
      break;
    case GgufType::kF64:
      EXPECT_EQ(std::get<double>(v), want.get<double>());
      break;
    case GgufType::kBool:
      EXPECT_EQ(std::get<bool>(v), want.get<bool>());
      break;
    case GgufType::kString:
      EXPECT_EQ(std::get<std::string>(v), want.get<std::string>());
      break;
    case GgufType::kArray:
      ADD_FAILURE() << "array as a scalar";
      break;
  }
}

/// The i-th element of array `a` as a GgufValue (for expect_scalar).
kappa::io::GgufValue element(const GgufArray& a, std::size_t i) {
  return std::visit(
      [&](const auto& vec) -> kappa::io::GgufValue {
        using V = std::decay_t<decltype(vec)>;
        if constexpr (std::is_same_v<V, std::vector<bool>>) {
          return static_cast<bool>(vec[i]);
        } else if constexpr (std::is_same_v<V, std::vector<GgufArray>>) {
          return vec[i];
        } else {
          return vec[i];
        }
      },
      a.values);
}

void check_reference_file(const std::string& name) {
  SCOPED_TRACE(name);
  const nlohmann::json want = nlohmann::json::parse(read_bytes(kGgufDir + name + ".expected.json"));
  const std::vector<float> dequant = read_f32(kGgufDir + name + ".dequant.f32");
  const GgufFile f(kGgufDir + name + ".gguf");
  EXPECT_EQ(f.version(), want["version"].get<std::uint32_t>());
  EXPECT_EQ(f.alignment(), want["alignment"].get<std::uint64_t>());
  EXPECT_EQ(f.data_offset(), want["data_offset"].get<std::uint64_t>());

  const auto& meta = want["metadata"];
  ASSERT_EQ(f.metadata().size(), meta.size());
  for (std::size_t i = 0; i < meta.size(); ++i) {
    const auto& kv = f.metadata()[i];
    const std::string key = meta[i]["key"].get<std::string>();
    EXPECT_EQ(kv.key, key);
    EXPECT_EQ(&f.value(key), &kv.value);
    const std::string type = meta[i]["type"].get<std::string>();
    if (type != "array") {
      expect_scalar(kv.value, type, meta[i]["value"], key);
      continue;
    }
    ASSERT_EQ(kappa::io::gguf_type_of(kv.value), GgufType::kArray) << key;
    const auto& a = std::get<GgufArray>(kv.value);
    const std::string et = meta[i]["element_type"].get<std::string>();
    EXPECT_EQ(std::string(kappa::io::gguf_type_name(a.element_type())), et) << key;
    ASSERT_EQ(a.size(), meta[i]["value"].size()) << key;
    for (std::size_t k = 0; k < a.size(); ++k)
      expect_scalar(element(a, k), et, meta[i]["value"][k], key + "[" + std::to_string(k) + "]");
  }

  const auto& tensors = want["tensors"];
  ASSERT_EQ(f.tensors().size(), tensors.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& w = tensors[i];
    const auto& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, w["name"].get<std::string>());
    EXPECT_EQ(&f.tensor(t.name), &t);
    EXPECT_EQ(std::string(kappa::io::ggml_type_name(t.type)), w["type"].get<std::string>());
    EXPECT_EQ(static_cast<int>(t.type), w["type_id"].get<int>());
    const int n_dims = w["n_dims"].get<int>();
    ASSERT_EQ(t.dims.size(), static_cast<std::size_t>(n_dims));
    for (int d = 0; d < 4; ++d)
      EXPECT_EQ(d < n_dims ? t.dims[static_cast<std::size_t>(d)] : 1,
                w["ne"][static_cast<std::size_t>(d)].get<std::int64_t>());
    EXPECT_EQ(t.offset, w["offset"].get<std::uint64_t>());
    EXPECT_EQ(t.bytes, w["bytes"].get<std::uint64_t>());
    EXPECT_EQ(t.file_offset, f.data_offset() + t.offset);
    EXPECT_EQ(f.raw(t.name).size(), t.bytes);
    const auto numel = w["numel"].get<std::int64_t>();
    EXPECT_EQ(t.numel, numel);
    // The matrix reading: one GGUF row (ne[0] elements) per matrix row, so
    // its row-major data is the stored element order.
    const kappa::RowMatrix<float> m = f.dequantize(t.name);
    EXPECT_EQ(m.cols(), t.dims[0]);
    EXPECT_EQ(m.rows() * m.cols(), numel);
    std::vector<std::int64_t> shape = t.shape();
    EXPECT_EQ(shape.back(), t.dims[0]);
    EXPECT_EQ(shape.front(), t.dims.back());
    ASSERT_LE(at + static_cast<std::size_t>(numel), dequant.size());
    EXPECT_EQ(count_bit_differences(m.data(), dequant.data() + at, static_cast<std::size_t>(numel)),
              0u);
    at += static_cast<std::size_t>(numel);
  }
  EXPECT_EQ(at, dequant.size());
}

TEST(GgufFile, AllTypesFileEqualsGgmlsReading) {
  check_reference_file("all_types");
}
TEST(GgufFile, Alignment64FileEqualsGgmlsReading) {
  check_reference_file("aligned64");
}
TEST(GgufFile, SmallFileEqualsGgmlsReading) {
  check_reference_file("small");
}

TEST(GgufFile, ReadIntoHugePagesHoldsTheSameBytes) {
  // Residence::kHugePages: the file read whole into anonymous memory on a
  // 2 MB boundary; every tensor's bytes and the metadata as the mapping's,
  // and the hostile-file checks as before (the truncated file still fails).
  for (const char* name : {"all_types", "aligned64", "small"}) {
    SCOPED_TRACE(name);
    const GgufFile mapped(kGgufDir + name + ".gguf");
    const GgufFile read(kGgufDir + name + ".gguf", kappa::io::Residence::kHugePages);
    EXPECT_EQ(read.file_size(), mapped.file_size());
    ASSERT_EQ(read.tensors().size(), mapped.tensors().size());
    for (const auto& t : mapped.tensors()) {
      const auto a = mapped.raw(t.name), b = read.raw(t.name);
      ASSERT_EQ(a.size(), b.size()) << t.name;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << t.name;
      EXPECT_NE(a.data(), b.data());  // a copy, not the mapping
    }
    const auto first = read.raw(read.tensors().front().name);
    const auto start = reinterpret_cast<std::uintptr_t>(first.data()) -
                       static_cast<std::uintptr_t>(read.tensors().front().file_offset);
    EXPECT_EQ(start % (std::uintptr_t{2} << 20), 0u);  // the file starts on a 2 MB boundary
  }
  const std::string bytes = read_bytes(kGgufDir + "small.gguf");
  const std::string path = gguf_temp_path("cut.gguf");
  write_bytes(path, bytes.substr(0, bytes.size() - 1));
  EXPECT_THROW(GgufFile(path, kappa::io::Residence::kHugePages), kappa::FormatError);
  fs::remove(path);
}

TEST(GgufFile, ShapeMappingOnAReferenceTensor) {
  const GgufFile f(kGgufDir + "all_types.gguf");
  // ggml wrote q8_0.2d with ne = {64, 3}: three rows of 64.
  const auto& t = f.tensor("q8_0.2d");
  EXPECT_EQ(t.dims, (std::vector<std::int64_t>{64, 3}));
  EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{3, 64}));
  EXPECT_EQ(t.rows(), 3);
  EXPECT_EQ(t.cols(), 64);
  // row 1 of the matrix is ggml's elements 64..127 of the tensor.
  const kappa::RowMatrix<float> m = f.dequantize("q8_0.2d");
  std::vector<float> flat(static_cast<std::size_t>(t.numel));
  f.dequantize_into(t, flat.data());
  for (int j = 0; j < 64; ++j)
    EXPECT_TRUE(same_bits(m(1, j), flat[static_cast<std::size_t>(64 + j)]));
  const auto& t4 = f.tensor("q4_0.4d");  // ne = {32, 2, 2, 2}
  EXPECT_EQ(t4.shape(), (std::vector<std::int64_t>{2, 2, 2, 32}));
  EXPECT_EQ(t4.rows(), 8);
  EXPECT_EQ(t4.cols(), 32);
}

TEST(GgufFile, TypedGetters) {
  const std::string path = kGgufDir + "all_types.gguf";
  const GgufFile f(path);
  EXPECT_EQ(f.get<std::string>("general.architecture"), "kappa-test");
  EXPECT_EQ(f.get<std::uint32_t>("test.u32"), 4000000000u);
  EXPECT_EQ(f.get<bool>("test.bool_true"), true);
  EXPECT_EQ(f.get_integer("test.i8"), -128);
  EXPECT_EQ(f.get_integer("test.u32"), 4000000000);
  EXPECT_EQ(f.get_integer("test.i64"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(f.get_array<std::string>("tokenizer.ggml.tokens").size(), 4u);
  EXPECT_EQ(f.get_array<bool>("test.arr_bool"), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(f.has("test.f64"));
  EXPECT_FALSE(f.has("test.nope"));
  EXPECT_EQ(f.find("test.nope"), nullptr);
  const auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string m = message([&] { (void)f.get<std::uint64_t>("test.u32"); });
  EXPECT_NE(m.find("kappa: " + path + ": byte "), std::string::npos) << m;
  EXPECT_NE(m.find("metadata key \"test.u32\" is u32, expected u64"), std::string::npos) << m;
  m = message([&] { (void)f.get_array<float>("test.arr_i32"); });
  EXPECT_NE(m.find("\"test.arr_i32\" is array of i32, expected array of f32"), std::string::npos)
      << m;
  m = message([&] { (void)f.get_array<float>("test.f32"); });
  EXPECT_NE(m.find("\"test.f32\" is f32, expected array of f32"), std::string::npos) << m;
  m = message([&] { (void)f.get_integer("test.f64"); });
  EXPECT_NE(m.find("\"test.f64\" is f64, expected an integer"), std::string::npos) << m;
  m = message([&] { (void)f.get_integer("test.u64"); });
  EXPECT_NE(m.find("\"test.u64\": u64 value 18446744073709551615 does not fit"), std::string::npos)
      << m;
  m = message([&] { (void)f.get<std::string>("test.nope"); });
  EXPECT_NE(m.find("kappa: " + path + ": no metadata key \"test.nope\""), std::string::npos) << m;
  m = message([&] { (void)f.tensor("nope"); });
  EXPECT_NE(m.find("no tensor \"nope\""), std::string::npos) << m;
}

// ---- hostile files -----------------------------------------------------------------------

/// GGUF bytes, written field by field.
struct Bytes {
  std::string b;
  Bytes& u8(std::uint8_t v) { return raw(&v, 1); }
  Bytes& u32(std::uint32_t v) { return raw(&v, 4); }
  Bytes& u64(std::uint64_t v) { return raw(&v, 8); }
  Bytes& i64(std::int64_t v) { return raw(&v, 8); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.append(s);
    return *this;
  }
  Bytes& raw(const void* p, std::size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
  Bytes& pad_to(std::size_t alignment) {
    while (b.size() % alignment) b.push_back('\0');
    return *this;
  }
};

struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> dims;
  std::uint32_t type = 0;
  std::uint64_t offset = 0;
};

/// A GGUF v3 file: header, the given raw key-value entries, the tensors and
/// `data_bytes` of data after padding to `alignment`.
std::string gguf_file(const std::vector<std::string>& kvs, const std::vector<TensorSpec>& tensors,
                      std::size_t data_bytes, std::size_t alignment = 32,
                      std::uint32_t version = 3) {
  Bytes out;
  out.raw("GGUF", 4).u32(version).u64(tensors.size()).u64(kvs.size());
  for (const std::string& kv : kvs) out.b += kv;
  for (const TensorSpec& t : tensors) {
    out.str(t.name).u32(static_cast<std::uint32_t>(t.dims.size()));
    for (std::int64_t d : t.dims) out.i64(d);
    out.u32(t.type).u64(t.offset);
  }
  out.pad_to(alignment);
  out.b.append(data_bytes, '\x01');
  return out.b;
}

std::string kv_str(std::string_view key, std::string_view value) {
  return Bytes().str(key).u32(8).str(value).b;
}
std::string kv_u32(std::string_view key, std::uint32_t value) {
  return Bytes().str(key).u32(4).u32(value).b;
}

/// A valid file: two F32 tensors of 4 elements (16 bytes each).
std::string valid_file() {
  return gguf_file({kv_str("general.architecture", "llama")},
                   {{"a", {4}, 0, 0}, {"b", {2, 2}, 0, 32}}, 48);
}

void expect_error(const std::string& bytes, const std::string& what) {
  const std::string msg = open_error(bytes);
  EXPECT_NE(msg.find(what), std::string::npos) << "expected \"" << what << "\" in: " << msg;
}

TEST(GgufHostile, ValidBaseFileOpens) {
  const std::string path = gguf_temp_path("ok.gguf");
  write_bytes(path, valid_file());
  const GgufFile f(path);
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.dequantize("b").rows(), 2);
  // Counted by hand: a 24-byte header; the pair's key 8 + 20, its type 4 and
  // its value 8 + 5 end the metadata at 69; tensor "a" takes 8 + 1 + 4 + 8 +
  // 4 + 8 = 33 bytes and "b" 41, which end the table at 143, padded to 160.
  EXPECT_EQ(f.tensor_table_offset(), 69u);
  EXPECT_EQ(f.data_offset(), 160u);
  fs::remove(path);
}

TEST(GgufHostile, EveryTruncationOfASmallFileIsAFormatError) {
  const std::string bytes = read_bytes(kGgufDir + "small.gguf");
  ASSERT_EQ(bytes.size(), 336u);  // its last tensor ends at the end of the file
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_FALSE(open_error(bytes.substr(0, n)).empty());
  }
  // a tensor's bytes cut off: named by the tensor and its offset
  expect_error(bytes.substr(0, bytes.size() - 1), "tensor \"c\": offset 48 + 8 bytes");
  expect_error(bytes.substr(0, 10), "tensor_count: needs 8 bytes but the file ends at byte 10");
}

TEST(GgufHostile, HeaderFields) {
  expect_error("", "magic: the file has 0 bytes");
  expect_error("GGML\x03\0\0\0", "magic: expected \"GGUF\", found \"GGML\"");
  std::string v1 = valid_file();
  v1[4] = 1;
  expect_error(v1, "version 1 is not supported");
  std::string big = valid_file();
  big[4] = 0;
  big[7] = 3;
  expect_error(big, "big-endian");
  // version 2 has the same layout
  const std::string path = gguf_temp_path("v2.gguf");
  std::string v2 = valid_file();
  v2[4] = 2;
  write_bytes(path, v2);
  EXPECT_EQ(GgufFile(path).version(), 2u);
  fs::remove(path);
}

TEST(GgufHostile, HugeCountsAndLengths) {
  std::string f = valid_file();
  std::uint64_t huge = std::uint64_t{1} << 62;
  std::memcpy(f.data() + 8, &huge, 8);
  expect_error(f, "byte 8: tensor_count 4611686018427387904 needs at least 32 bytes per tensor");
  f = valid_file();
  std::memcpy(f.data() + 16, &huge, 8);
  expect_error(f, "byte 16: kv_count 4611686018427387904 needs at least 13 bytes per pair");
  // the first key's length
  f = valid_file();
  std::memcpy(f.data() + 24, &huge, 8);
  expect_error(f, "byte 24: metadata key #0: string length 4611686018427387904 runs past the end");
  // a string value's length
  expect_error(gguf_file({Bytes().str("k").u32(8).u64(1000).b}, {}, 0),
               "metadata key \"k\": string length 1000 runs past the end");
  // an array count
  expect_error(
      gguf_file({Bytes().str("k").u32(9).u32(6).u64(huge).b}, {}, 0),
      "metadata key \"k\": array of 4611686018427387904 f32 elements needs at least 4 bytes");
  // an array of strings whose element 1 runs past the end
  expect_error(gguf_file({Bytes().str("k").u32(9).u32(8).u64(2).str("x").u64(99).b}, {}, 0),
               "metadata key \"k\" element 1: string length 99 runs past the end");
  // a tensor name
  expect_error(gguf_file({}, {{"n", {4}, 0, 0}}, 16).substr(0, 24) + Bytes().u64(500).b +
                   std::string(40, 'x'),
               "byte 24: tensor #0 name: string length 500 runs past the end");
}

TEST(GgufHostile, MetadataValues) {
  expect_error(gguf_file({Bytes().str("k").u32(13).u8(0).b}, {}, 0),
               "metadata key \"k\": type 13 is not a GGUF value type");
  expect_error(gguf_file({Bytes().str("k").u32(7).u8(2).b}, {}, 0),
               "metadata key \"k\": bool byte is 2, must be 0 or 1");
  expect_error(gguf_file({Bytes().str("k").u32(9).u32(7).u64(2).u8(1).u8(5).b}, {}, 0),
               "metadata key \"k\" element 1: bool byte is 5");
  expect_error(gguf_file({kv_u32("k", 1), kv_u32("k", 2)}, {}, 0),
               "byte 41: metadata key \"k\" appears twice (first at byte 24)");
  expect_error(gguf_file({Bytes().str("general.alignment").u32(10).u64(64).b}, {}, 0),
               "metadata key \"general.alignment\" is u64, expected u32");
  expect_error(gguf_file({kv_u32("general.alignment", 48)}, {}, 0),
               "general.alignment 48 is not a power of two");
  expect_error(gguf_file({kv_u32("general.alignment", 0)}, {}, 0),
               "general.alignment 0 is not a power of two");
  // nesting beyond 8 levels
  Bytes deep;
  deep.str("k").u32(9);
  for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
  deep.u32(5).u64(0);
  expect_error(gguf_file({deep.b}, {}, 0), "arrays nest deeper than 8");
}

TEST(GgufHostile, NestedArraysParse) {
  // [[1, 2], []] of i32 and [["a"], ["b", "c"]] of strings
  const std::string a =
      Bytes().str("n.i32").u32(9).u32(9).u64(2).u32(5).u64(2).u32(1).u32(2).u32(5).u64(0).b;
  const std::string s = Bytes()
                            .str("n.str")
                            .u32(9)
                            .u32(9)
                            .u64(2)
                            .u32(8)
                            .u64(1)
                            .str("a")
                            .u32(8)
                            .u64(2)
                            .str("b")
                            .str("c")
                            .b;
  const std::string path = gguf_temp_path("nested.gguf");
  write_bytes(path, gguf_file({a, s}, {}, 0));
  const GgufFile f(path);
  const auto& outer = f.get_array<GgufArray>("n.i32");
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_EQ(std::get<std::vector<std::int32_t>>(outer[0].values),
            (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(outer[1].size(), 0u);
  EXPECT_EQ(outer[1].element_type(), GgufType::kI32);
  const auto& strs = f.get_array<GgufArray>("n.str");
  EXPECT_EQ(std::get<std::vector<std::string>>(strs[1].values),
            (std::vector<std::string>{"b", "c"}));
  fs::remove(path);
}

TEST(GgufHostile, TensorTable) {
  const std::vector<std::string> kv = {kv_str("general.architecture", "llama")};
  expect_error(gguf_file(kv, {{"a", {4}, 0, 0}, {"a", {4}, 0, 32}}, 48),
               "tensor \"a\" appears twice (first at byte");
  expect_error(gguf_file(kv, {{"a", {}, 0, 0}}, 16), "tensor \"a\": n_dims 0 is outside [1, 4]");
  expect_error(gguf_file(kv, {{"a", {1, 1, 1, 1, 1}, 0, 0}}, 16),
               "tensor \"a\": n_dims 5 is outside [1, 4]");
  expect_error(gguf_file(kv, {{"a", {4, -1}, 0, 0}}, 16),
               "tensor \"a\": ne[1] is -1, must be >= 0");
  expect_error(gguf_file(kv, {{"a", {1 << 20, std::int64_t{1} << 40, 1 << 10}, 0, 0}}, 16),
               "tensor \"a\": the product of the dimensions overflows int64 at ne[2]");
  expect_error(gguf_file(kv, {{"a", {32}, 99, 0}}, 64),
               "tensor \"a\": type id 99 is not a ggml type");
  expect_error(gguf_file(kv, {{"a", {32}, 4, 0}}, 64),
               "tensor \"a\": type id 4 is not a ggml type");
  expect_error(gguf_file(kv, {{"a", {256}, 13, 0}}, 256),
               "tensor \"a\": type q5_K (13) is not supported (kappa reads f32, f16, bf16, q8_0, "
               "q4_0, q4_K, q6_K)");
  expect_error(gguf_file(kv, {{"a", {32}, 28, 0}}, 256),
               "tensor \"a\": type f64 (28) is not supported");
  expect_error(gguf_file(kv, {{"a", {33, 2}, 8, 0}}, 256),
               "tensor \"a\": row length ne[0] = 33 is not a multiple of q8_0's block size 32");
  expect_error(gguf_file(kv, {{"a", {128}, 12, 0}}, 256),
               "row length ne[0] = 128 is not a multiple of q4_K's block size 256");
}

TEST(GgufHostile, TensorOffsets) {
  const std::vector<std::string> kv = {kv_str("general.architecture", "llama")};
  expect_error(gguf_file(kv, {{"a", {4}, 0, 4}}, 64),
               "tensor \"a\": offset 4 is not a multiple of general.alignment 32");
  expect_error(gguf_file({kv_u32("general.alignment", 64)}, {{"a", {4}, 0, 32}}, 128),
               "tensor \"a\": offset 32 is not a multiple of general.alignment 64");
  expect_error(gguf_file(kv, {{"a", {4}, 0, 0}, {"b", {16}, 0, 32}}, 80),
               "tensor \"b\": offset 32 + 64 bytes from the data section at byte");
  expect_error(gguf_file(kv, {{"a", {4}, 0, std::uint64_t{1} << 63}}, 64),
               "tensor \"a\": offset 9223372036854775808 + 16 bytes");
  expect_error(gguf_file(kv, {{"a", {4}, 0, ~std::uint64_t{31}}}, 64),
               "runs past the end of the file");
  expect_error(gguf_file(kv, {{"a", {16}, 0, 0}, {"b", {4}, 0, 32}}, 96),
               "tensor \"b\": data at offset 32 overlaps tensor \"a\" at offset 0 (64 bytes)");
  expect_error(gguf_file(kv, {{"b", {4}, 0, 0}, {"a", {16}, 0, 0}}, 96), "overlaps tensor");
  // header not padded: the data section starts past the end of the file
  const std::string cut = gguf_file(kv, {{"a", {4}, 0, 0}}, 0, /*alignment=*/1);
  ASSERT_EQ(cut.size(), 102u);
  expect_error(cut, "byte 102: the data section would start at byte 128");
  // zero-size tensors may share an offset
  const std::string path = gguf_temp_path("empty.gguf");
  write_bytes(path, gguf_file(kv, {{"a", {0, 5}, 0, 0}, {"b", {4}, 0, 0}}, 16));
  const GgufFile f(path);
  EXPECT_EQ(f.dequantize("a").rows(), 5);
  EXPECT_EQ(f.dequantize("a").cols(), 0);
  fs::remove(path);
}

TEST(GgufHostile, NotARegularFile) {
  const std::string dir = gguf_temp_path("dir");
  fs::create_directories(dir);
  try {
    GgufFile f(dir);
    ADD_FAILURE() << "a directory opened";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("kappa: " + dir + ": byte 0: is a directory"),
              std::string::npos)
        << e.what();
  }
  fs::remove(dir);
  const std::string fifo = gguf_temp_path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    GgufFile f(fifo);
    ADD_FAILURE() << "a FIFO opened";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("kappa: " + fifo + ": byte 0: not a regular file"),
              std::string::npos)
        << e.what();
  }
  fs::remove(fifo);
  try {
    GgufFile f(gguf_temp_path("missing"));
    ADD_FAILURE() << "a missing file opened";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open the file"), std::string::npos) << e.what();
  }
}

/// A tensor's Q4_0 or Q4_K rows (`matrices` matrices of `rows` rows of `nb`
/// blocks each, GGUF's layout at `plain`) as the interleaved layouts are
/// documented (quant::Q4_0Rows8, quant::Q4_KRows8), written out here from
/// that description: per whole group of 8 rows and per block (8 blocks'
/// bytes), for row r of the group
///   Q4_0: its 2-byte scale at 2 r, its 16 bytes of nibbles at 16 + 16 r;
///   Q4_K: d at 2 r, dmin at 16 + 2 r, the 12 scale bytes as words u = 0..2
///         at 32 + 32 u + 4 r, the 4-byte pieces p = 0..31 of its 128 bytes
///         of nibbles at 128 + 32 p + 4 r;
/// the rows after the last whole group as they were.
std::string interleaved_by_hand(bool q4_k, const unsigned char* plain, std::int64_t matrices,
                                std::int64_t rows, std::int64_t nb) {
  const std::size_t block = q4_k ? 144 : 18;
  const std::size_t row_bytes = static_cast<std::size_t>(nb) * block;
  const std::size_t matrix_bytes = static_cast<std::size_t>(rows) * row_bytes;
  std::string out(reinterpret_cast<const char*>(plain),
                  static_cast<std::size_t>(matrices) * matrix_bytes);
  const auto put = [&out](std::size_t at, const unsigned char* from, std::size_t n) {
    out.replace(at, n, reinterpret_cast<const char*>(from), n);
  };
  for (std::int64_t m = 0; m < matrices; ++m)
    for (std::int64_t g = 0; g < rows / 8; ++g)
      for (std::int64_t b = 0; b < nb; ++b)
        for (std::size_t r = 0; r < 8; ++r) {
          const unsigned char* in = plain + static_cast<std::size_t>(m) * matrix_bytes +
                                    (static_cast<std::size_t>(8 * g) + r) * row_bytes +
                                    static_cast<std::size_t>(b) * block;
          const std::size_t at = static_cast<std::size_t>(m) * matrix_bytes +
                                 static_cast<std::size_t>(8 * g) * row_bytes +
                                 static_cast<std::size_t>(b) * 8 * block;
          if (!q4_k) {
            put(at + 2 * r, in, 2);
            put(at + 16 + 16 * r, in + 2, 16);
            continue;
          }
          put(at + 2 * r, in, 2);
          put(at + 16 + 2 * r, in + 2, 2);
          for (std::size_t u = 0; u < 3; ++u) put(at + 32 + 32 * u + 4 * r, in + 4 + 4 * u, 4);
          for (std::size_t p = 0; p < 32; ++p) put(at + 128 + 32 * p + 4 * r, in + 16 + 4 * p, 4);
        }
  return out;
}

/// The permissions ("r--p", "rw-p", ...) of this process's mapping that
/// holds address `p`, from /proc/self/maps; "" if none does.
std::string mapping_permissions(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms;
    const std::size_t dash = range.find('-');
    const std::uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const std::uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (lo <= at && at < hi) return perms;
  }
  return "";
}

void expect_interleaved_reading(const std::string& path) {
  const GgufFile plain(path);
  for (const auto residence : {kappa::io::Residence::kMapped, kappa::io::Residence::kHugePages}) {
    SCOPED_TRACE(residence == kappa::io::Residence::kMapped ? "mapped" : "huge pages");
    const GgufFile held(path, residence, /*interleave_q4=*/true);
    ASSERT_EQ(held.tensors().size(), plain.tensors().size());
    int interleaved = 0;
    for (const auto& t : held.tensors()) {
      SCOPED_TRACE(t.name);
      const auto a = plain.raw(t.name), b = held.raw(t.name);
      ASSERT_EQ(a.size(), b.size());
      const bool q4_k = t.type == GgmlType::kQ4_K;
      const bool want = (t.type == GgmlType::kQ4_0 || q4_k) && t.dims.size() >= 2;
      EXPECT_EQ(t.interleaved, want);
      EXPECT_FALSE(plain.tensor(t.name).interleaved);
      const std::string expected =
          want ? interleaved_by_hand(q4_k, a.data(), t.n_rows / t.dims[1], t.dims[1],
                                     t.dims[0] / (q4_k ? 256 : 32))
               : std::string(reinterpret_cast<const char*>(a.data()), a.size());
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), b.size()), expected);
      // read back in rows: the same floats, bit for bit
      const kappa::RowMatrix<float> x = plain.dequantize(t.name), y = held.dequantize(t.name);
      EXPECT_EQ(std::memcmp(x.data(), y.data(), sizeof(float) * static_cast<std::size_t>(x.size())),
                0);
      interleaved += t.interleaved ? 1 : 0;
    }
    EXPECT_GT(interleaved, 0);
    // Rearranged, then made read-only like any file's bytes: every tensor's
    // first and last byte are in a read-only private mapping.
    for (const auto& t : held.tensors()) {
      const auto b = held.raw(t.name);
      if (b.empty()) continue;
      EXPECT_EQ(mapping_permissions(b.data()), "r--p") << t.name;
      EXPECT_EQ(mapping_permissions(b.data() + b.size() - 1), "r--p") << t.name;
    }
  }
}

TEST(GgufFile, InterleavedQ4IsRearrangedInPlaceAndReadsBackInRows) {
  // llama.cpp's Q4_0 and Q4_K_M files (their Q4_0 / Q4_K matrices; Q6_K,
  // Q8_0 and F32 tensors untouched), opened with interleave_q4 in both
  // residences.
  for (const char* name : {"llama-256-q4_0.gguf", "llama-256-q4_k_m.gguf"})
    expect_interleaved_reading(std::string(KAPPA_TEST_DATA_DIR) + "/models/llama-gguf/" + name);
  // Merged [2][9][in] Q4_0 and Q4_K tensors: each 9-row matrix on its own
  // (one group of 8 and a row left as it was), random bytes so that no two
  // blocks agree.
  for (const bool q4_k : {false, true}) {
    SCOPED_TRACE(q4_k ? "q4_K" : "q4_0");
    const std::int64_t nb = 2, rows = 9, matrices = 2, block_weights = q4_k ? 256 : 32;
    const std::size_t bytes = static_cast<std::size_t>(matrices * rows * nb) * (q4_k ? 144 : 18);
    std::string file =
        gguf_file({kv_str("general.architecture", "llama")},
                  {{"experts", {block_weights * nb, rows, matrices}, q4_k ? 12u : 2u, 0}}, bytes);
    std::uint32_t state = 12345;
    for (std::size_t i = file.size() - bytes; i < file.size(); ++i) {
      state = state * 1664525u + 1013904223u;
      file[i] = static_cast<char>(state >> 24);
    }
    const std::string path = gguf_temp_path("experts_q4.gguf");
    write_bytes(path, file);
    expect_interleaved_reading(path);
    fs::remove(path);
  }
}

}  // namespace gguf_test
}  // namespace
