// tests/io/gguf_writer_test.cpp - GgufWriter against ggml's own writer: the
// GGUF files ggml wrote (tests/data/io/gguf, tests/reference/make_gguf_files.sh)
// read and written back key by key and tensor by tensor are the same bytes;
// float matrices encode to the bytes of quant_blocks.hpp's quantizers (equal
// to ggml's, gguf_test.cpp) and read back; bad input is named.
#include "kappa/io/gguf_writer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kappa/core/quant_blocks.hpp"
#include "kappa/io/gguf.hpp"

namespace {
namespace gguf_writer_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
using kappa::io::GgmlType;
using kappa::io::GgufFile;
using kappa::io::GgufWriter;

const std::string kGgufDir = std::string(KAPPA_TEST_DATA_DIR) + "/io/gguf/";

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() /
          ("kappa_gguf_writer_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(GgufWriter, RewritesGgmlFilesByteForByte) {
  for (const char* name : {"small.gguf", "all_types.gguf", "aligned64.gguf"}) {
    SCOPED_TRACE(name);
    const GgufFile f(kGgufDir + name);
    GgufWriter w;
    for (const auto& kv : f.metadata()) w.set(kv.key, kv.value);
    for (const auto& t : f.tensors()) {
      const auto raw = f.raw(t.name);
      w.add_tensor(t.name, t.type, t.dims, std::vector<unsigned char>(raw.begin(), raw.end()));
    }
    const std::string want = read_bytes(kGgufDir + name);
    ASSERT_FALSE(want.empty());
    const std::string got = w.bytes();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << "first difference at byte "
                             << std::mismatch(got.begin(), got.end(), want.begin()).first -
                                    got.begin();
    EXPECT_EQ(w.alignment(), f.alignment());
  }
}

TEST(GgufWriter, MatricesEncodeAndReadBack) {
  kappa::RowMatrix<float> m(3, 64);
  for (kappa::Index r = 0; r < m.rows(); ++r)
    for (kappa::Index c = 0; c < m.cols(); ++c)
      m(r, c) = std::sin(0.37f * static_cast<float>(r * 64 + c)) * (r == 2 ? 1e-3f : 3.0f);
  GgufWriter w;
  w.set("general.architecture", std::string("test"));
  w.set("general.alignment", std::uint32_t{64});
  for (const GgmlType t :
       {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0})
    w.add_tensor(std::string("m.") + std::string(kappa::io::ggml_type_name(t)), m, t);
  const std::string path = temp_path("matrices.gguf");
  w.write(path);
  const GgufFile f(path);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get<std::string>("general.architecture"), "test");
  // F32 exactly; Q8_0 / Q4_0 are the quantizers' bytes row by row.
  EXPECT_EQ(f.dequantize("m.f32"), m);
  std::vector<unsigned char> q8(2 * kappa::quant::kBytesQ8_0), q4(2 * kappa::quant::kBytesQ4_0);
  for (kappa::Index r = 0; r < m.rows(); ++r) {
    kappa::quant::quantize_row_q8_0(&m(r, 0), q8.data(), 64);
    kappa::quant::quantize_row_q4_0(&m(r, 0), q4.data(), 64);
    const auto raw8 = f.raw("m.q8_0").subspan(static_cast<std::size_t>(r) * q8.size(), q8.size());
    const auto raw4 = f.raw("m.q4_0").subspan(static_cast<std::size_t>(r) * q4.size(), q4.size());
    EXPECT_TRUE(std::equal(raw8.begin(), raw8.end(), q8.begin())) << "row " << r;
    EXPECT_TRUE(std::equal(raw4.begin(), raw4.end(), q4.begin())) << "row " << r;
  }
  // Each format within its rounding: f16 2^-11, bf16 2^-8 relative; Q8_0
  // half a step d = max|block| / 127 plus the f16 rounding of d times
  // |q| <= 127 (d (1/2 + 127 2^-11)); Q4_0 a step of max / 8.
  const auto max_err = [&](const char* t) {
    return (f.dequantize(std::string("m.") + t) - m).cwiseAbs().maxCoeff();
  };
  EXPECT_LE(max_err("f16"), 3.0f * 0x1p-11f);
  EXPECT_LE(max_err("bf16"), 3.0f * 0x1p-8f);
  EXPECT_LE(max_err("q8_0"), 3.0f / 127.0f * (0.5f + 127.0f * 0x1p-11f));
  EXPECT_LE(max_err("q4_0"), 3.0f / 8.0f * 1.01f);
  fs::remove(path);
}

TEST(GgufWriter, BadInputIsNamed) {
  const auto error = [](auto f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  GgufWriter w;
  w.add_tensor("a", GgmlType::kF32, {2}, std::vector<unsigned char>(8));
  EXPECT_NE(error([&] {
              w.add_tensor("a", GgmlType::kF32, {2}, std::vector<unsigned char>(8));
            }).find("\"a\": added twice"),
            std::string::npos);
  EXPECT_NE(error([&] {
              w.add_tensor("b", GgmlType::kF32, {2}, std::vector<unsigned char>(7));
            }).find("7 bytes for 8"),
            std::string::npos);
  EXPECT_NE(error([&] {
              w.add_tensor("c", GgmlType::kQ8_0, {16}, {});
            }).find("not a multiple of q8_0's block of 32"),
            std::string::npos);
  EXPECT_NE(error([&] {
              w.add_tensor("d", GgmlType::kF32, {1, 1, 1, 1, 1}, {});
            }).find("5 dims"),
            std::string::npos);
  EXPECT_NE(error([&] { w.add_tensor("e", GgmlType::kF32, {0}, {}); }).find("dimension 0 is 0"),
            std::string::npos);
  const kappa::RowMatrix<float> m = kappa::RowMatrix<float>::Zero(1, 256);
  EXPECT_NE(
      error([&] { w.add_tensor("f", m, GgmlType::kQ4_K); }).find("kappa does not encode q4_K"),
      std::string::npos);
  w.set("general.alignment", std::uint32_t{48});
  EXPECT_NE(error([&] { (void)w.bytes(); }).find("power of two"), std::string::npos);
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), std::invalid_argument);  // alignment first
  w.set("general.alignment", std::uint32_t{32});
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), kappa::FormatError);
}

}  // namespace gguf_writer_test
}  // namespace
