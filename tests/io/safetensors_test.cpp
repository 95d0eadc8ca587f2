// The safetensors reader, model directories and writer: golden files written
// by tests/reference/make_safetensors_golden.py (values decoded by numpy),
// exhaustive F16/BF16 conversions, zero-copy views, round trips through the
// writer, and the corpus of malformed files in tests/data/io/safetensors_bad/
// (tests/reference/make_safetensors_bad.py), each of which must throw
// FormatError naming its file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/io/npy.hpp"
#include "kappa/io/safetensors.hpp"
#include "support/reference.hpp"
#include "support/sanitized.hpp"

namespace {
namespace safetensors_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
using kappa::FormatError;
using kappa::Index;
using kappa::RowMatrix;
using kappa::ShapeError;
using kappa::io::Checkpoint;
using kappa::io::Dtype;
using kappa::io::SafetensorsFile;
using kappa::io::SafetensorsWriter;
using kappa::io::Storage;

const std::string kData = std::string(KAPPA_TEST_DATA_DIR) + "/io/";
const std::string kGolden = kData + "safetensors/golden.safetensors";

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kappa_safetensors_test_" + name)).string();
}

/// The message of the FormatError `f` throws ("" and a test failure if it
/// throws nothing or something else).
template <class F>
std::string format_error_of(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected FormatError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected FormatError, nothing was thrown";
  return "";
}

/// Equal bit for bit, except that any NaN equals any NaN.
template <class T>
bool same_value(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(a) ==
         std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(b);
}

template <class T>
void expect_same(const RowMatrix<T>& got, const RowMatrix<T>& want, const std::string& what) {
  ASSERT_EQ(got.rows(), want.rows()) << what;
  ASSERT_EQ(got.cols(), want.cols()) << what;
  for (Index i = 0; i < got.size(); ++i)
    EXPECT_TRUE(same_value(got.data()[i], want.data()[i]))
        << what << " element " << i << ": got " << got.data()[i] << ", want " << want.data()[i];
}

// ---- Golden files -----------------------------------------------------------------

TEST(Safetensors, GoldenFloatTensorsMatchNumpyExactly) {
  const SafetensorsFile f(kGolden);
  for (const char* name : {"f32", "f64", "f16", "bf16", "vector", "scalar", "rank3"}) {
    const RowMatrix<double> want =
        kappa::io::read_npy_matrix<double>(kData + "safetensors/expected_" + name + ".npy");
    expect_same<double>(f.matrix<double>(name), want, name);
    const RowMatrix<float> want_f = want.cast<float>();
    expect_same<float>(f.matrix<float>(name), want_f, name);
  }
}

TEST(Safetensors, GoldenSpecialValuesDecodeAsDefined) {
  const SafetensorsFile f(kGolden);
  const RowMatrix<float> h = f.matrix<float>("f16");  // see the script for the bit patterns
  EXPECT_EQ(h(0, 0), 0.0f);
  EXPECT_FALSE(std::signbit(h(0, 0)));
  EXPECT_TRUE(std::signbit(h(0, 1)) && h(0, 1) == 0.0f);  // -0
  EXPECT_EQ(h(0, 2), 0x1p-24f);                           // smallest subnormal
  EXPECT_EQ(h(0, 3), 1023 * 0x1p-24f);                    // largest subnormal
  EXPECT_EQ(h(0, 4), 0x1p-14f);                           // smallest normal
  EXPECT_EQ(h(1, 0), 1.0f);
  EXPECT_EQ(h(1, 1), -2.0f);
  EXPECT_EQ(h(1, 2), 65504.0f);
  EXPECT_EQ(h(1, 3), std::numeric_limits<float>::infinity());
  EXPECT_EQ(h(1, 4), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h(2, 0)) && std::isnan(h(2, 1)));
  EXPECT_EQ(h(2, 2), 0x1.554p-2f);  // 1/3 rounded to half
  EXPECT_EQ(h(2, 3), 0x1.004p-14f);
  EXPECT_EQ(h(2, 4), -65504.0f);

  const RowMatrix<float> b = f.matrix<float>("bf16");
  EXPECT_TRUE(std::signbit(b(0, 1)) && b(0, 1) == 0.0f);
  EXPECT_EQ(b(0, 2), 0x1p-133f);  // smallest bf16 subnormal
  EXPECT_EQ(b(0, 3), 0x1p-126f);
  EXPECT_EQ(b(0, 4), 1.0f);
  EXPECT_EQ(b(1, 1), 0x1.fep127f);  // largest finite bf16
  EXPECT_EQ(b(1, 2), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(b(1, 4)));

  const RowMatrix<double> d = f.matrix<double>("f64");
  EXPECT_EQ(d(0, 3), std::numeric_limits<double>::max());
  EXPECT_EQ(d(1, 1), std::numeric_limits<double>::denorm_min());
  const RowMatrix<float> df = f.matrix<float>("f64");  // narrowing rounds
  EXPECT_EQ(df(0, 3), std::numeric_limits<float>::infinity());
  EXPECT_EQ(df(1, 1), 0.0f);
}

TEST(Safetensors, ShapesMetadataAndInfo) {
  const SafetensorsFile f(kGolden);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"bf16", "empty", "f16", "f32", "f64", "ids",
                                                 "mask", "rank3", "scalar", "vector"}));
  EXPECT_EQ(f.size(), 10u);
  EXPECT_TRUE(f.has("f32"));
  EXPECT_FALSE(f.has("__metadata__"));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("source"), "kappa golden");

  const auto& r3 = f.info("rank3");
  EXPECT_EQ(r3.dtype, Dtype::kF32);
  EXPECT_EQ(r3.shape, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(r3.rows(), 2);
  EXPECT_EQ(r3.cols(), 12);
  EXPECT_EQ(r3.bytes(), 96);
  EXPECT_EQ(r3.file_offset, f.data_offset() + r3.begin);

  EXPECT_EQ(f.matrix<float>("vector").rows(), 1);
  EXPECT_EQ(f.matrix<float>("vector").cols(), 5);
  EXPECT_EQ(f.row_vector<float>("vector"), f.matrix<float>("vector"));
  EXPECT_EQ(f.row_vector<double>("scalar").size(), 1);
  EXPECT_EQ(f.info("scalar").shape.size(), 0u);
  const RowMatrix<float> empty = f.matrix<float>("empty");
  EXPECT_EQ(empty.rows(), 0);
  EXPECT_EQ(empty.cols(), 3);
  const std::string msg = format_error_of([&] { (void)f.row_vector<float>("f32"); });
  EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
}

TEST(Safetensors, IntegerTensorsReadAsIntegersOnly) {
  const SafetensorsFile f(kGolden);
  const RowMatrix<std::int64_t> ids = f.matrix<std::int64_t>("ids");
  EXPECT_EQ(ids(0, 1), -1);
  EXPECT_EQ(ids(0, 2), std::int64_t{1} << 40);
  EXPECT_EQ(ids(0, 3), -(std::int64_t{1} << 62));
  const RowMatrix<int> mask = f.matrix<int>("mask");
  EXPECT_EQ(mask, (RowMatrix<int>(1, 3) << 1, 0, 1).finished());

  std::string msg = format_error_of([&] { (void)f.matrix<float>("ids"); });
  EXPECT_NE(msg.find("I64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"ids\""), std::string::npos) << msg;
  msg = format_error_of([&] { (void)f.matrix<double>("mask"); });
  EXPECT_NE(msg.find("BOOL"), std::string::npos) << msg;
  msg = format_error_of([&] { (void)f.matrix<std::int32_t>("ids"); });  // 2^40 does not fit
  EXPECT_NE(msg.find("1099511627776"), std::string::npos) << msg;
  msg = format_error_of([&] { (void)f.matrix<int>("f32"); });
  EXPECT_NE(msg.find("F32"), std::string::npos) << msg;
}

TEST(Safetensors, ViewsAreZeroCopyIntoTheMapping) {
  SafetensorsFile f(kGolden);
  ASSERT_TRUE(f.can_view<float>("f32"));
  ASSERT_TRUE(f.can_view<double>("f64"));
  const auto map = f.mapping();
  const Eigen::Map<const RowMatrix<float>> v = f.view<float>("f32");
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  EXPECT_GE(p, map.data());
  EXPECT_LE(p + static_cast<std::size_t>(v.size()) * sizeof(float), map.data() + map.size());
  EXPECT_EQ(p, f.bytes("f32"));
  expect_same<float>(v, f.matrix<float>("f32"), "view");
  EXPECT_EQ(f.view<float>("rank3").cols(), 12);
  const auto d = f.view<double>("f64");
  EXPECT_EQ(d(0, 3), std::numeric_limits<double>::max());

  // Moving the file keeps the mapping, so views stay valid.
  const SafetensorsFile moved(std::move(f));
  EXPECT_EQ(moved.view<float>("f32").data(), v.data());
  EXPECT_EQ(v(0, 2), 1.0f);
  static_assert(!std::is_copy_constructible_v<SafetensorsFile>);
  static_assert(std::is_nothrow_move_constructible_v<SafetensorsFile>);

  std::string msg = format_error_of([&] { (void)moved.view<double>("f32"); });
  EXPECT_NE(msg.find("F32"), std::string::npos) << msg;
  msg = format_error_of([&] { (void)moved.view<float>("bf16"); });
  EXPECT_NE(msg.find("BF16"), std::string::npos) << msg;
  EXPECT_FALSE(moved.can_view<float>("f16"));
}

TEST(Safetensors, MatrixIntoFillsMatricesAndBlocksInPlace) {
  const SafetensorsFile f(kGolden);
  RowMatrix<double> m(2, 5);
  f.matrix_into<double>("bf16", m);
  expect_same<double>(m, f.matrix<double>("bf16"), "into");
  RowMatrix<float> big = RowMatrix<float>::Constant(5, 20, 7.0f);  // a strided block
  f.matrix_into<float>("rank3", big.block(1, 3, 2, 12));
  EXPECT_EQ(RowMatrix<float>(big.block(1, 3, 2, 12)), f.matrix<float>("rank3"));
  EXPECT_EQ(big(0, 0), 7.0f);
  EXPECT_EQ(big(1, 2), 7.0f);
  EXPECT_EQ(big(3, 3), 7.0f);
  RowMatrix<float> wrong(3, 5);
  EXPECT_THROW(f.matrix_into<float>("bf16", wrong), ShapeError);
  RowMatrix<float> ids(1, 4);
  EXPECT_THROW(f.matrix_into<float>("ids", ids), FormatError);
}

TEST(Safetensors, UnalignedDataIsCopiedNotViewed) {
  const SafetensorsFile f(kData + "safetensors/unaligned.safetensors");
  EXPECT_EQ(f.info("w").file_offset, 65);
  EXPECT_FALSE(f.can_view<float>("w"));
  const std::string msg = format_error_of([&] { (void)f.view<float>("w"); });
  EXPECT_NE(msg.find("byte 65"), std::string::npos) << msg;
  EXPECT_NE(msg.find("aligned"), std::string::npos) << msg;
  const RowMatrix<float> m = f.matrix<float>("w");
  EXPECT_EQ(m, (RowMatrix<float>(2, 3) << 0, 1, 2, 3, 4, 5).finished());
}

TEST(Safetensors, MissingTensorAndWrongShapeNameWhatWasWrong) {
  const SafetensorsFile f(kGolden);
  std::string msg = format_error_of([&] { (void)f.info("nope"); });
  EXPECT_NE(msg.find("\"nope\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("golden.safetensors"), std::string::npos) << msg;

  EXPECT_EQ(f.matrix<float>("f32", {3, 4}).rows(), 3);
  try {
    (void)f.matrix<float>("f32", {4, 3});
    FAIL() << "no ShapeError";
  } catch (const ShapeError& e) {
    msg = e.what();
    EXPECT_NE(msg.find("\"f32\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("has shape [3, 4], expected [4, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("golden.safetensors"), std::string::npos) << msg;
  }
  EXPECT_THROW(f.require_shape("vector", {1, 5}), ShapeError);
  EXPECT_NO_THROW(f.require_shape("vector", {5}));
  EXPECT_NO_THROW(f.require_shape("scalar", {}));
}

// ---- Model directories ------------------------------------------------------------

RowMatrix<double> ramp(Index rows, Index cols) {
  RowMatrix<double> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = 0.25 * double(i) - 1;
  return m;
}

TEST(Checkpoint, ShardedDirectoryFindsEachTensorInItsShard) {
  const Checkpoint c(kData + "safetensors_sharded");
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                 "model.layers.0.mlp.up_proj.weight",
                                                 "model.layers.1.mlp.up_proj.weight"}));
  EXPECT_EQ(c.index_metadata().at("total_size"), 320);
  EXPECT_FALSE(c.has("model.unlisted"));  // in a shard, not in the index
  EXPECT_EQ(c.matrix<double>("lm_head.weight", {6, 4}), ramp(6, 4));
  EXPECT_EQ(c.matrix<double>("model.layers.0.mlp.up_proj.weight", {8, 4}), ramp(8, 4));  // BF16
  EXPECT_EQ(c.matrix<float>("model.layers.1.mlp.up_proj.weight"), ramp(8, 4).cast<float>());  // F16
  EXPECT_EQ(c.info("model.layers.0.mlp.up_proj.weight").dtype, Dtype::kBF16);
  EXPECT_NE(c.file_of("lm_head.weight").path().find("model-00002-of-00002"), std::string::npos);
  ASSERT_TRUE(c.can_view<float>("model.embed_tokens.weight"));
  EXPECT_EQ(c.view<float>("model.embed_tokens.weight"), ramp(6, 4).cast<float>());

  const std::string msg = format_error_of([&] { (void)c.matrix<float>("model.layers.2.w"); });
  EXPECT_NE(msg.find("\"model.layers.2.w\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 shard(s)"), std::string::npos) << msg;
  EXPECT_THROW((void)c.matrix<float>("lm_head.weight", {4, 6}), ShapeError);
}

TEST(Checkpoint, SingleFileDirectoryAndFilePath) {
  for (const std::string& path :
       {kData + "safetensors_single", kData + "safetensors_single/model.safetensors"}) {
    const Checkpoint c(path);
    EXPECT_EQ(c.files().size(), 1u) << path;
    EXPECT_TRUE(c.index_metadata().is_null());
    EXPECT_EQ(c.matrix<float>("model.embed_tokens.weight"), ramp(6, 4).cast<float>());
    EXPECT_EQ(c.row_vector<double>("model.norm.weight"), ramp(1, 4));
    const std::string msg = format_error_of([&] { (void)c.info("lm_head.weight"); });
    EXPECT_NE(msg.find("\"lm_head.weight\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("safetensors_single"), std::string::npos) << msg;
  }
  EXPECT_THROW(Checkpoint(kData + "no_such_directory"), FormatError);
}

// ---- Writer -------------------------------------------------------------------------

template <class T>
class SafetensorsWriterTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SafetensorsWriterTest, Scalars);

TYPED_TEST(SafetensorsWriterTest, RoundTripsInEveryStorage) {
  using T = TypeParam;
  const RowMatrix<T> a = kappa::testing::random_matrix<T>(7, 5, 1, 100.0);
  const RowMatrix<T> b = kappa::testing::random_matrix<T>(3, 1, 2);
  const RowMatrix<T> c = kappa::testing::random_matrix<T>(1, 1, 3);
  const RowMatrix<T> d = kappa::testing::random_matrix<T>(2, 12, 4);
  for (Storage s : {Storage::kF64, Storage::kF32, Storage::kF16, Storage::kBF16}) {
    const std::string p = temp_path("roundtrip" + std::to_string(sizeof(T)) + ".safetensors");
    SafetensorsWriter w;
    w.add("a", a, s);
    w.add("b", b, Storage::kF16, std::vector<std::int64_t>{3});
    w.add("c", c, Storage::kF32, std::vector<std::int64_t>{});
    w.add("d", d, s, std::vector<std::int64_t>{2, 3, 4});
    w.add("e", RowMatrix<T>(0, 4));
    w.set_metadata("format", "pt");
    w.write(p);
    const SafetensorsFile f(p);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    auto stored = [&](const RowMatrix<T>& m, Storage st) {
      RowMatrix<T> r = m;
      for (Index i = 0; i < r.size(); ++i) {
        const double x = double(m.data()[i]);
        switch (st) {
          case Storage::kF64:
            r.data()[i] = T(x);
            break;
          case Storage::kF32:
            r.data()[i] = T(float(x));
            break;
          case Storage::kF16:
            r.data()[i] = T(kappa::io::f16_to_float(kappa::io::f16_from_double(x)));
            break;
          case Storage::kBF16:
            r.data()[i] = T(kappa::io::bf16_to_float(kappa::io::bf16_from_double(x)));
            break;
        }
      }
      return r;
    };
    expect_same<T>(f.matrix<T>("a"), stored(a, s), "a");
    expect_same<T>(f.matrix<T>("b"), stored(b.transpose(), Storage::kF16), "b");
    EXPECT_EQ(f.info("b").shape, (std::vector<std::int64_t>{3}));
    EXPECT_EQ(f.info("c").shape, (std::vector<std::int64_t>{}));
    expect_same<T>(f.matrix<T>("c"), stored(c, Storage::kF32), "c");
    EXPECT_EQ(f.info("d").shape, (std::vector<std::int64_t>{2, 3, 4}));
    expect_same<T>(f.matrix<T>("d"), stored(d, s), "d");
    EXPECT_EQ(f.matrix<T>("e").cols(), 4);
    if (s == Storage::kF32) {  // the writer aligns every tensor
      EXPECT_TRUE(f.can_view<float>("a") && f.can_view<float>("d"));
    } else if (s == Storage::kF64) {
      EXPECT_TRUE(f.can_view<double>("a") && f.can_view<double>("d"));
    }
    std::remove(p.c_str());
  }
}

TEST(SafetensorsWriter, WriteSafetensorsAndErrors) {
  const std::string p = temp_path("map.safetensors");
  const RowMatrix<double> m = kappa::testing::random_matrix<double>(4, 6, 9);
  kappa::io::write_safetensors<double>(p, {{"w", m}, {"v", m.topRows(1)}});
  const SafetensorsFile f(p);
  EXPECT_EQ(f.view<double>("w"), m);
  EXPECT_EQ(f.matrix<double>("v"), m.topRows(1));
  std::remove(p.c_str());

  SafetensorsWriter w;
  w.add("w", m);
  EXPECT_THROW(w.add("w", m), FormatError);
  EXPECT_THROW(w.add("__metadata__", m), FormatError);
  EXPECT_THROW(w.add("x", m, Storage::kF32, std::vector<std::int64_t>{5, 5}), ShapeError);
  EXPECT_THROW(w.write("/nonexistent_dir/x.safetensors"), FormatError);
}

// ---- Conversions ----------------------------------------------------------------------

TEST(HalfConversions, EveryF16AndBf16RoundTrips) {
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = kappa::io::f16_to_float(h);
    const float b = kappa::io::bf16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(kappa::io::f16_to_float(kappa::io::f16_from_double(f))));
    } else {
      ASSERT_EQ(kappa::io::f16_from_double(f), h) << std::hex << bits;
    }
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(kappa::io::bf16_to_float(kappa::io::bf16_from_double(b))));
    } else {
      ASSERT_EQ(kappa::io::bf16_from_double(b), h) << std::hex << bits;
    }
  }
}

TEST(HalfConversions, RoundToNearestEvenAtEveryMidpoint) {
  // Between consecutive finite positive values a < b (bits h, h + 1), the
  // midpoint (exact in double) goes to the even one, and anything above or
  // below it to the nearer one. Covers subnormals and the exponent carries.
  auto check = [](auto to_float, auto from_double, std::uint16_t last_finite) {
    for (std::uint16_t h = 0; h < last_finite; ++h) {
      const double a = to_float(h), b = to_float(static_cast<std::uint16_t>(h + 1));
      const double mid = 0.5 * (a + b);
      const std::uint16_t even = (h % 2 == 0) ? h : static_cast<std::uint16_t>(h + 1);
      ASSERT_EQ(from_double(mid), even) << h;
      ASSERT_EQ(from_double(std::nextafter(mid, 0.0)), h) << h;
      ASSERT_EQ(from_double(std::nextafter(mid, 1e300)), h + 1) << h;
      ASSERT_EQ(from_double(-mid), even | 0x8000) << h;
    }
  };
  check(kappa::io::f16_to_float, kappa::io::f16_from_double, 0x7bff);
  check(kappa::io::bf16_to_float, kappa::io::bf16_from_double, 0x7f7f);
  // Overflow: 65504 + half an ulp (65520) is a tie with 2^16 and goes to inf.
  EXPECT_EQ(kappa::io::f16_from_double(65519.99), 0x7bff);
  EXPECT_EQ(kappa::io::f16_from_double(65520.0), 0x7c00);
  EXPECT_EQ(kappa::io::f16_from_double(-1e300), 0xfc00);
  EXPECT_EQ(kappa::io::bf16_from_double(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(kappa::io::f16_from_double(0x1p-25), 0x0000);    // tie with 0: even
  EXPECT_EQ(kappa::io::f16_from_double(0x1.8p-25), 0x0001);  // above the tie
  EXPECT_EQ(kappa::io::f16_from_double(-0.0), 0x8000);
  EXPECT_EQ(kappa::io::f16_from_double(1e-300), 0x0000);
  EXPECT_EQ(kappa::io::bf16_from_double(5e-324), 0x0000);
  EXPECT_EQ(kappa::io::f16_from_double(std::nan("")) & 0x7e00, 0x7e00);  // quiet NaN
  EXPECT_EQ(kappa::io::bf16_from_double(-std::numeric_limits<double>::infinity()), 0xff80);
}

// ---- The corpus of malformed files -----------------------------------------------------

TEST(SafetensorsCorpus, EveryMalformedFileThrowsFormatErrorNamingIt) {
  const fs::path dir = kData + "safetensors_bad";
  nlohmann::json expected;
  std::ifstream(dir / "expected.json") >> expected;
  ASSERT_TRUE(expected.is_object());
  std::size_t cases = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "expected.json") continue;
    ++cases;
    SCOPED_TRACE(name);
    const std::string msg = format_error_of([&] {
      if (entry.is_directory()) {
        const Checkpoint c(entry.path());
      } else {
        const SafetensorsFile f(entry.path().string());
      }
    });
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("kappa: safetensors: ", 0), 0u) << msg;
    const nlohmann::json want = expected.value(name, nlohmann::json::object());
    if (want.empty()) {
      ADD_FAILURE() << name << " has no entry in expected.json (rerun make_safetensors_bad.py)";
    }
    if (want.value("byte", true)) {
      EXPECT_NE(msg.find(": byte "), std::string::npos) << msg;
    }
    if (want.contains("substring")) {
      const auto s = want["substring"].get<std::string>();
      EXPECT_NE(msg.find(s), std::string::npos) << "wanted '" << s << "' in: " << msg;
    }
    if (want.contains("tensor") && want["tensor"].is_string()) {
      const std::string tensor = "tensor \"" + want["tensor"].get<std::string>() + "\"";
      EXPECT_NE(msg.find(tensor), std::string::npos) << "wanted " << tensor << " in: " << msg;
    }
  }
  EXPECT_EQ(cases, expected.size()) << "expected.json and the directory disagree";
}

TEST(SafetensorsCorpus, TruncationsAndByteFlipsOfAGoodFileOpenOrThrowFormatError) {
  std::string good;
  {
    std::ifstream in(kGolden, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string p = temp_path("mutated.safetensors");
  auto try_open = [&](const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    try {
      const SafetensorsFile f(p);
      for (const std::string& n : f.names()) {
        if (f.info(n).dtype == Dtype::kF32 || f.info(n).dtype == Dtype::kF16)
          (void)f.matrix<float>(n);
      }
    } catch (const FormatError&) {
    }
  };
  for (std::size_t len = 0; len < good.size(); len += (len < 80 ? 1 : 13))
    try_open(good.substr(0, len));
  std::mt19937 gen(7);
  const std::size_t header_end = 8 + 0x200;
  for (int i = 0; i < 300; ++i) {
    std::string bytes = good;
    const std::size_t at =
        std::uniform_int_distribution<std::size_t>(0, std::min(header_end, good.size()) - 1)(gen);
    bytes[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(gen));
    try_open(bytes);
  }
  std::remove(p.c_str());
}

// ---- Hostile files (issue 24) ---------------------------------------------------------

/// A fresh empty directory under the temporary directory.
fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kappa_safetensors_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// A safetensors file of `n` one-byte U8 tensors "t0".."t<n-1>", header
/// text built directly (`extra` is spliced in before the closing brace).
std::string tiny_tensors_file(std::size_t n, const std::string& extra = "") {
  std::string header = "{";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) header += ',';
    header += "\"t" + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  header += extra + "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xffu);
  out += header;
  out.append(n, '\x01');
  return out;
}

/// The message is printable as it stands: kappa::printable changes nothing
/// (no control byte, DEL, C1 control, bidi override or invalid UTF-8).
void expect_printable(const std::string& msg) {
  EXPECT_EQ(kappa::printable(msg, msg.size() + 1), msg);
}

TEST(SafetensorsHostile, DeeplyNestedIndexIsAFormatErrorNamingTheFile) {
  // 1 MB of '[' in "metadata": copying or destroying it recursively would
  // overflow the stack.
  const fs::path d = fresh_dir("deep_index");
  write_file(d / "model.safetensors.index.json", R"({"metadata": )" + std::string(1 << 20, '[') +
                                                     std::string(1 << 20, ']') +
                                                     R"(, "weight_map": {}})");
  const std::string msg = format_error_of([&] { const Checkpoint c(d); });
  EXPECT_EQ(msg.rfind("kappa: safetensors: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json: byte 140:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deeper than 128 levels"), std::string::npos) << msg;
  fs::remove_all(d);
}

TEST(SafetensorsHostile, DeeplyNestedHeaderIsAFormatErrorAtItsByte) {
  const std::string p = temp_path("deep_header.safetensors");
  const std::string header = R"({"w": )" + std::string(1 << 20, '{');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xffu);
  write_file(p, bytes + header);
  const std::string msg = format_error_of([&] { const SafetensorsFile f(p); });
  EXPECT_NE(msg.find("deep_header.safetensors: byte " + std::to_string(8 + 6 + 127)),
            std::string::npos)
      << msg;  // the 129th opening bracket
  EXPECT_NE(msg.find("deeper than 128 levels"), std::string::npos) << msg;
  std::remove(p.c_str());
}

TEST(SafetensorsHostile, HundredThousandTensorsOpenAndDuplicatesAreStillFound) {
  // Opening is linear in the header (timed in benchmarks/bench_io.cpp); before,
  // 80k tensors took minutes. Here: every tensor is there. (10k under the
  // sanitizers: the same paths, a tenth of the entries.)
  constexpr std::size_t kN = kappa::testing::unless_sanitized<std::size_t>(100'000, 10'000);
  const std::string p = temp_path("many.safetensors");
  write_file(p, tiny_tensors_file(kN));
  {
    const SafetensorsFile f(p);
    ASSERT_EQ(f.size(), kN);
    EXPECT_EQ(f.info("t" + std::to_string(kN - 1)).begin, static_cast<std::int64_t>(kN) - 1);
    EXPECT_EQ(f.matrix<int>("t1234")(0, 0), 1);  // (below kN either way)
  }
  // A repeated top-level key, named with the byte of its second appearance.
  const std::string twice =
      tiny_tensors_file(3, R"(,"t1":{"dtype":"U8","shape":[1],"data_offsets":[1,2]})");
  write_file(p, twice);
  std::string msg = format_error_of([&] { const SafetensorsFile f(p); });
  EXPECT_NE(msg.find("byte " + std::to_string(8 + twice.substr(8).rfind("\"t1\""))),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("tensor \"t1\": the header lists this key twice"), std::string::npos) << msg;
  // Repeated keys inside an entry, in "__metadata__", and deeper (an object
  // in a shape) are found as well, before any other check.
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {R"(,"u":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[3,3]})",
            "tensor \"u\": duplicate key \"dtype\""},
           {R"(,"__metadata__":{"a":"x","b":"y","a":"z"})", ": duplicate key \"a\" in the header"},
           {R"(,"v":{"dtype":"U8","shape":[{"k":1,"k":2}],"data_offsets":[3,3]})",
            "tensor \"v\": duplicate key \"k\""}}) {
    write_file(p, tiny_tensors_file(kN / 10, extra));
    msg = format_error_of([&] { const SafetensorsFile f(p); });
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  }
  std::remove(p.c_str());
}

TEST(SafetensorsHostile, EverySpellingOfOneShardOpensItOnce) {
  // 2000 index entries naming one shard 2000 ways ("./m", ".//./m", a link
  // to it): one file opened and validated, not 2000.
  constexpr std::size_t kN = 2000;
  const fs::path d = fresh_dir("spellings");
  write_file(d / "m.safetensors", tiny_tensors_file(kN));
  fs::create_symlink("m.safetensors", d / "link.safetensors");
  fs::create_directories(d / "sub");
  fs::create_symlink("../m.safetensors", d / "sub" / "up.safetensors");
  fs::copy_file(d / "m.safetensors", d / "copy.safetensors");  // a different file
  nlohmann::json map = nlohmann::json::object();
  for (std::size_t i = 0; i + 1 < kN; ++i) {
    std::string spelling = "." + std::string(1 + i / 40, '/');
    for (std::size_t k = 0; k < i % 40; ++k) spelling += "./";
    spelling += i % 3 == 0   ? "m.safetensors"
                : i % 3 == 1 ? "link.safetensors"
                             : "sub/up.safetensors";
    map["t" + std::to_string(i)] = spelling;
  }
  map["t" + std::to_string(kN - 1)] = "copy.safetensors";
  write_file(d / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  const Checkpoint c(d);
  ASSERT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.files()[0].path(), (d / "m.safetensors").string());  // "./m", normalized
  EXPECT_EQ(c.names().size(), kN);
  EXPECT_EQ(&c.file_of("t1"), &c.file_of("t2"));
  EXPECT_EQ(c.file_of("t1999").path(), (d / "copy.safetensors").string());
  EXPECT_EQ(c.matrix<int>("t1998")(0, 0), 1);
  fs::remove_all(d);
}

/// format_error_of(f) on another thread. If f has not returned after 10 s it
/// is blocked opening the FIFO `fifo`: the test fails, and a writer opened
/// and closed on the FIFO releases it.
template <class F>
std::string format_error_without_blocking(const fs::path& fifo, F f) {
  auto result = std::async(std::launch::async, [&] { return format_error_of(f); });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO " << fifo;
    const int w = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  return result.get();
}

TEST(SafetensorsHostile, FifosAreRefusedWithoutBlocking) {
  const fs::path d = fresh_dir("fifo");
  // The index as a FIFO.
  fs::create_directories(d / "index");
  const fs::path index = d / "index" / "model.safetensors.index.json";
  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  std::string msg = format_error_without_blocking(index, [&] { const Checkpoint c(d / "index"); });
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  // model.safetensors as a FIFO, through the directory and by its path.
  fs::create_directories(d / "single");
  const fs::path single = d / "single" / "model.safetensors";
  ASSERT_EQ(::mkfifo(single.c_str(), 0600), 0);
  msg = format_error_without_blocking(single, [&] { const Checkpoint c(d / "single"); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  msg = format_error_without_blocking(single, [&] { const SafetensorsFile f(single.string()); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  // A link to a FIFO (links are followed, then the target must be a file).
  fs::create_symlink(single, d / "link.safetensors");
  msg = format_error_without_blocking(
      single, [&] { const SafetensorsFile f((d / "link.safetensors").string()); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  // A shard named by the index that is a FIFO.
  fs::create_directories(d / "shard");
  const fs::path shard = d / "shard" / "s.safetensors";
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  write_file(d / "shard" / "model.safetensors.index.json",
             R"({"weight_map": {"t0": "s.safetensors"}})");
  msg = format_error_without_blocking(shard, [&] { const Checkpoint c(d / "shard"); });
  EXPECT_NE(msg.find("tensor \"t0\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  fs::remove_all(d);
}

TEST(SafetensorsHostile, MessagesEscapeWhatTheFileHolds) {
  const std::string p = temp_path("escapes.safetensors");
  // nlohmann's own message echoes the bytes it stopped at: DEL, a C1 control
  // (U+0085, NEXT LINE) and a byte that is not UTF-8.
  for (const std::string& header :
       {std::string("{\"a\": \x7f}"), std::string("{\"a\": \xc2\x85}"),
        std::string("{\"a\": \xff}"), std::string("{\"a\": 1, \"b\": \"\xe2\x80\xae\x7f\"")}) {
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(header.size());
    write_file(p, bytes + header);
    const std::string msg = format_error_of([&] { const SafetensorsFile f(p); });
    EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
    expect_printable(msg);
  }
  // Names and values from the file, quoted: a dtype "\x7f\xc2\x85" and a
  // tensor name with a right-to-left override.
  const std::string header =
      "{\"w\xe2\x80\xae\": {\"dtype\": \"\x7f\xc2\x85\", \"shape\": [], \"data_offsets\": [0, 0]}}";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  write_file(p, bytes + header);
  std::string msg = format_error_of([&] { const SafetensorsFile f(p); });
  EXPECT_NE(msg.find(R"(tensor "w\u202e": unknown dtype "\x7f\u0085")"), std::string::npos) << msg;
  expect_printable(msg);
  // A string where a number belongs is shown quoted and escaped.
  const std::string shape_header =
      "{\"w\": {\"dtype\": \"U8\", \"shape\": [\"\\u001b[31m\"], \"data_offsets\": [0, 0]}}";
  bytes.assign(8, '\0');
  bytes[0] = static_cast<char>(shape_header.size());
  write_file(p, bytes + shape_header);
  msg = format_error_of([&] { const SafetensorsFile f(p); });
  EXPECT_NE(msg.find(R"(got "\x1b[31m")"), std::string::npos) << msg;
  expect_printable(msg);
  std::remove(p.c_str());
}

TEST(SafetensorsHostile, AnImplausibleHeaderLengthIsNotEchoed) {
  // A link named model.safetensors to some other file: its first 8 bytes
  // read as a header length are noise, not worth printing.
  const fs::path d = fresh_dir("not_safetensors");
  write_file(d / "notes.txt", "#!/bin/sh\necho hello\n");
  fs::create_symlink("notes.txt", d / "model.safetensors");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= std::uint64_t{static_cast<unsigned char>("#!/bin/s"[i])} << (8 * i);
  std::string msg = format_error_of([&] { const Checkpoint c(d); });
  EXPECT_EQ(msg.find(std::to_string(n)), std::string::npos) << msg;
  EXPECT_NE(msg.find("header length (bytes 0-7, little-endian) exceeds the limit"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("implausible"), std::string::npos) << msg;
  // Below the limit but past the end of the file.
  write_file(d / "notes.txt", std::string("\x87\xd6\x12\x00\x00\x00\x00\x00{}", 10));  // 1234567
  msg = format_error_of([&] { const Checkpoint c(d); });
  EXPECT_EQ(msg.find("1234567"), std::string::npos) << msg;
  EXPECT_NE(msg.find("runs past the end of the file (10 bytes)"), std::string::npos) << msg;
  fs::remove_all(d);
}

}  // namespace safetensors_test
}  // namespace
