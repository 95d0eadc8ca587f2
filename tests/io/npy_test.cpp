// The .npy reader and writer: round trips, every supported dtype and byte
// order, Fortran order, versions 1 and 2, and malformed files that must throw
// FormatError naming the file and the byte offset.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "kappa/io/npy.hpp"
#include "support/reference.hpp"

namespace {
namespace npy_test {  // (one TU with the area's other files)

using kappa::Index;
using kappa::RowMatrix;
using kappa::io::read_npy;
using kappa::io::read_npy_matrix;
using kappa::io::write_npy;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kappa_npy_test_" + name)).string();
}

/// A .npy file from a header dict and raw data bytes (version 1 unless told).
std::string make_npy(const std::string& dict, const std::string& data, int version = 1) {
  std::string header = dict;
  const std::size_t pre = version == 1 ? 10 : 12;
  while ((pre + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string f = "\x93NUMPY";
  f.push_back(static_cast<char>(version));
  f.push_back('\0');
  const std::size_t len = header.size();
  for (std::size_t i = 0; i < (version == 1 ? 2u : 4u); ++i)
    f.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  return f + header + data;
}

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string p = temp_path(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

template <class U>
std::string raw(const std::vector<U>& v, bool big_endian = false) {
  std::string s(v.size() * sizeof(U), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  if (big_endian)
    for (std::size_t i = 0; i < v.size(); ++i)
      std::reverse(s.data() + i * sizeof(U), s.data() + (i + 1) * sizeof(U));
  return s;
}

template <class T>
class NpyTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(NpyTest, Scalars);

TYPED_TEST(NpyTest, WriteThenReadRoundTripsExactly) {
  using T = TypeParam;
  const RowMatrix<T> m = kappa::testing::random_matrix<T>(7, 5, 3);
  const std::string p = temp_path("roundtrip.npy");
  write_npy(p, m);
  EXPECT_EQ(read_npy_matrix<T>(p), m);
  const auto a = read_npy<T>(p);
  EXPECT_EQ(a.shape, (std::vector<Index>{7, 5}));
  std::remove(p.c_str());
}

TEST(Npy, ReadsEveryDtypeAndByteOrderConvertingToTheAskedType) {
  const std::string dict = "{'descr': '%s', 'fortran_order': False, 'shape': (2, 2), }";
  auto with = [&](const char* d) {
    std::string s = dict;
    s.replace(s.find("%s"), 2, d);
    return s;
  };
  const RowMatrix<double> want = (RowMatrix<double>(2, 2) << 1, -2, 3, 40).finished();
  EXPECT_EQ(read_npy_matrix<double>(
                write_file("f4.npy", make_npy(with("<f4"), raw<float>({1, -2, 3, 40})))),
            want);
  EXPECT_EQ(read_npy_matrix<double>(
                write_file("f8be.npy", make_npy(with(">f8"), raw<double>({1, -2, 3, 40}, true)))),
            want);
  EXPECT_EQ(read_npy_matrix<float>(
                write_file("i4.npy", make_npy(with("<i4"), raw<std::int32_t>({1, -2, 3, 40})))),
            want.cast<float>());
  EXPECT_EQ(read_npy<std::int64_t>(
                write_file("i8.npy", make_npy(with("<i8"), raw<std::int64_t>({1, -2, 3, 40}))))
                .values,
            (std::vector<std::int64_t>{1, -2, 3, 40}));
  // Version 2 header (4-byte length), a 1-d array and a scalar.
  const auto v2 = read_npy_matrix<double>(
      write_file("v2.npy", make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                                    raw<double>({1, 2, 3}), 2)));
  EXPECT_EQ(v2, (RowMatrix<double>(1, 3) << 1, 2, 3).finished());
  const auto scalar = read_npy<double>(write_file(
      "s.npy",
      make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", raw<double>({7}))));
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.values, std::vector<double>{7});
}

TEST(Npy, FortranOrderIsReorderedToRowMajor) {
  // The 2 x 3 matrix [[1, 2, 3], [4, 5, 6]] stored column by column.
  const std::string p = write_file(
      "fortran.npy", make_npy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }",
                              raw<double>({1, 4, 2, 5, 3, 6})));
  EXPECT_EQ(read_npy_matrix<double>(p), (RowMatrix<double>(2, 3) << 1, 2, 3, 4, 5, 6).finished());
  // Rank 3, shape (2, 2, 2): element (i, j, k) stored at i + 2 j + 4 k.
  std::vector<double> f(8);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k)
        f[static_cast<std::size_t>(i + 2 * j + 4 * k)] = 100 * i + 10 * j + k;
  const auto a = read_npy<double>(write_file(
      "fortran3.npy",
      make_npy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2, 2), }", raw<double>(f))));
  EXPECT_EQ(a.values, (std::vector<double>{0, 1, 10, 11, 100, 101, 110, 111}));
}

/// The FormatError message of reading `bytes` as a file, or "" if none.
std::string error_of(const std::string& name, const std::string& bytes) {
  const std::string p = write_file(name, bytes);
  try {
    (void)read_npy<double>(p);
  } catch (const kappa::FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(Npy, MalformedFilesThrowFormatErrorNamingFileAndByte) {
  const std::string good_dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  struct Bad {
    const char* name;
    std::string bytes;
    const char* expect;  // a fragment of the message, after the file name
  };
  const std::string d2 = raw<double>({1, 2});
  std::string bad_len = make_npy(good_dict, d2);
  bad_len[8] = static_cast<char>(0xff);  // header length beyond the file
  const std::vector<Bad> cases{
      {"magic.npy", "\x93NUMPX\x01\x00\x10\x00" + std::string(80, ' '),
       "byte 0: missing the \\x93NUMPY magic"},
      {"short.npy", "\x93NUM", "byte 4: file too short"},
      {"version.npy", std::string("\x93NUMPY\x09\x00\x10\x00", 10) + std::string(80, ' '),
       "byte 6: unsupported .npy version 9"},
      {"hlen.npy", bad_len, "file ends inside the header"},
      {"dtype.npy", make_npy("{'descr': '<c16', 'fortran_order': False, 'shape': (2,), }", d2),
       "byte 20: unsupported dtype '<c16'"},
      {"colon.npy", make_npy("{'descr' '<f8', 'fortran_order': False, 'shape': (2,), }", d2),
       "byte 19: expected ':' after key 'descr'"},
      {"key.npy", make_npy("{'descr': '<f8', 'fortran': False, 'shape': (2,), }", d2),
       "byte 27: unexpected key 'fortran'"},
      {"noshape.npy", make_npy("{'descr': '<f8', 'fortran_order': False, }", d2),
       "the header has no 'shape'"},
      {"bool.npy", make_npy("{'descr': '<f8', 'fortran_order': 0, 'shape': (2,), }", d2),
       "byte 44: expected True or False"},
      {"dim.npy", make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2, x), }", d2),
       "byte 64: expected a dimension"},
      {"data.npy", make_npy(good_dict, raw<double>({1})),
       "byte 136: file ends inside the data: the shape needs 16 bytes from byte 128, found 8"},
  };
  for (const Bad& b : cases) {
    const std::string msg = error_of(b.name, b.bytes);
    EXPECT_NE(msg.find(b.name), std::string::npos) << b.name << ": " << msg;
    EXPECT_NE(msg.find(b.expect), std::string::npos) << b.name << ": " << msg;
  }
  EXPECT_THROW((void)read_npy<double>(temp_path("does_not_exist.npy")), kappa::FormatError);
  // A rank-3 array is not a matrix.
  const std::string p3 = write_file(
      "rank3.npy", make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 2), }", d2));
  EXPECT_THROW((void)read_npy_matrix<double>(p3), kappa::FormatError);
}

TEST(Npy, ReadsTheCommittedGoldenFilesWrittenByNumpy) {
  const std::string p = std::string(KAPPA_TEST_DATA_DIR) + "/heads/mha_x.npy";
  const auto a = read_npy<double>(p);
  ASSERT_EQ(a.shape.size(), 2u);
  EXPECT_EQ(a.shape[1], 16);
  EXPECT_EQ(static_cast<Index>(a.values.size()), a.shape[0] * a.shape[1]);
}

// ---- Hardening: hostile headers and paths ------------------------------------------

TEST(Npy, ShapesWhoseSizeOverflowsOrExceedsTheFileAreFormatErrors) {
  const std::string d2 = raw<double>({1, 2});
  const auto dict = [](const std::string& shape) {
    return "{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  struct Bad {
    const char* name;
    std::string shape;
    const char* expect;
  };
  const std::vector<Bad> cases{
      // 2^32 x 2^32 = 2^64 wraps to 0 elements without a check.
      {"wrap.npy", "(4294967296, 4294967296)", "byte 73: the shape has more elements"},
      // 2^61 elements of 8 bytes: the byte count overflows (std::length_error before).
      {"bytes.npy", "(2305843009213693952,)", "bytes"},
      // Fits in int64 but not in the file (std::bad_alloc if allocated first).
      {"huge.npy", "(1099511627776, 1024)", "file ends inside the data"},
      {"big1d.npy", "(68719476736,)", "file ends inside the data"},
      // A zero dimension makes the product 0 whatever follows.
      {"zero_then_huge.npy", "(0, 4611686018427387904, 4611686018427387904)", ""},
  };
  for (const Bad& b : cases) {
    const std::string p = write_file(b.name, make_npy(dict(b.shape), d2));
    if (std::string(b.name) == "zero_then_huge.npy") {
      const auto a = read_npy<double>(p);
      EXPECT_TRUE(a.values.empty());
      continue;
    }
    std::string msg;
    try {
      (void)read_npy<double>(p);
      ADD_FAILURE() << b.name << " was accepted";
    } catch (const kappa::FormatError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find(b.name), std::string::npos) << b.name << ": " << msg;
    EXPECT_NE(msg.find(b.expect), std::string::npos) << b.name << ": " << msg;
  }
  // The header parser alone reports the overflow too.
  EXPECT_THROW(
      (void)kappa::io::parse_npy_header(make_npy(dict("(4294967296, 4294967296)"), ""), "mem.npy"),
      kappa::FormatError);
}

TEST(Npy, DirectoriesAndUnreadableFilesAreFormatErrorsNamingThePath) {
  const std::string dir = temp_path("a_directory.npy");
  std::filesystem::create_directories(dir);
  std::string msg;
  try {
    (void)read_npy<double>(dir);
    ADD_FAILURE() << "a directory was read";
  } catch (const kappa::FormatError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
  EXPECT_THROW((void)read_npy_matrix<float>(dir), kappa::FormatError);
  EXPECT_THROW((void)kappa::io::read_file_bytes(dir), kappa::FormatError);
}

TEST(Npy, ErrorMessagesEscapeControlBytesFromTheFile) {
  const std::string d2 = raw<double>({1, 2});
  const std::string esc = "\x1b[2J\x1b]0;pwned\x07";
  const std::vector<std::pair<const char*, std::string>> cases{
      {"esc_key.npy", "{'" + esc + "': '<f8', 'fortran_order': False, 'shape': (2,), }"},
      {"esc_dtype.npy", "{'descr': '<" + esc + "', 'fortran_order': False, 'shape': (2,), }"},
      {"esc_order.npy", "{'descr': '" + std::string("\x1b") +
                            "f8', 'fortran_order': False, "
                            "'shape': (2,), }"},
      {"esc_colon.npy", "{'descr\x9b' '<f8', 'fortran_order': False, 'shape': (2,), }"},
  };
  for (const auto& [name, dict] : cases) {
    const std::string msg = error_of(name, make_npy(dict, d2));
    ASSERT_FALSE(msg.empty()) << name;
    for (const char c : msg) {
      const auto u = static_cast<unsigned char>(c);
      EXPECT_TRUE(u >= 0x20 && u < 0x7f) << name << ": byte " << int(u) << " in " << msg;
    }
    EXPECT_NE(msg.find(name == std::string("esc_colon.npy") ? "\\x9b" : "\\x1b"), std::string::npos)
        << name << ": " << msg;
  }
}

// Fuzz finding 3 (tests/fuzz/FINDINGS.md): float64 1e300 read as int64 was
// UB (float-cast-overflow); integers that do not fit a narrower type wrapped.
TEST(Npy, ElementsThatDoNotFitAnIntegerTypeAreFormatErrors) {
  const auto f8 = [](std::vector<double> v) {
    const std::string shape = "(" + std::to_string(v.size()) + ",)";
    return make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + ", }",
                    raw<double>(v));
  };
  const std::string big = write_file("f8_big.npy", f8({3.0, 1e300}));
  std::string msg;
  try {
    (void)read_npy<std::int64_t>(big);
  } catch (const kappa::FormatError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("f8_big.npy: byte 136: element 1"), std::string::npos) << msg;
  EXPECT_THROW((void)read_npy<std::int32_t>(
                   write_file("f8_nan.npy", f8({std::numeric_limits<double>::quiet_NaN()}))),
               kappa::FormatError);
  EXPECT_THROW((void)read_npy<std::int64_t>(
                   write_file("f8_inf.npy", f8({-std::numeric_limits<double>::infinity()}))),
               kappa::FormatError);
  EXPECT_THROW((void)read_npy<std::int64_t>(write_file("f8_2p63.npy", f8({9223372036854775808.0}))),
               kappa::FormatError);
  const std::string i8 = write_file(
      "i8_wide.npy", make_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
                              raw<std::int64_t>({-1, std::int64_t{1} << 40})));
  EXPECT_THROW((void)read_npy<std::int32_t>(i8), kappa::FormatError);
  EXPECT_THROW((void)read_npy<std::uint64_t>(i8), kappa::FormatError);  // -1
  // Values that fit convert as before; float T takes everything.
  const auto ok = read_npy<std::int64_t>(write_file("f8_ok.npy", f8({3.0, -2.0, 2.5})));
  EXPECT_EQ(ok.values, (std::vector<std::int64_t>{3, -2, 2}));
  EXPECT_EQ(read_npy<std::int64_t>(i8).values,
            (std::vector<std::int64_t>{-1, std::int64_t{1} << 40}));
  EXPECT_EQ(read_npy<double>(big).values[1], 1e300);
}

}  // namespace npy_test
}  // namespace
