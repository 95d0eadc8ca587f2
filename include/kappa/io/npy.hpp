// kappa/io/npy.hpp - reading and writing NumPy .npy files.
//
// The .npy format (NumPy's NEP 1, versions 1.0, 2.0 and 3.0):
//
//   bytes 0-5   "\x93NUMPY"
//   byte  6, 7  major, minor version
//   then        header length: uint16 little-endian (v1) or uint32 (v2, v3)
//   then        the header, an ASCII (v3: UTF-8) Python dict literal such as
//               {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
//               padded with spaces and ended by '\n'
//   then        the array's elements, C order (or Fortran order if said so)
//
// kappa reads the element types float32/float64/int32/int64 in either byte
// order ('<f4', '>f8', '<i8', ...) and converts them to the scalar type asked
// for. Every malformed header throws kappa::FormatError naming the file and the
// byte offset where reading failed, e.g.
//   "kappa: npy: w.npy: byte 23: expected ':' after key 'descr'".
// Text quoted from the file in a message has its control and non-ASCII bytes
// escaped (\x1b), so a hostile file cannot send escape sequences to a
// terminal. A shape whose element or byte count does not fit, or that needs
// more bytes than the file holds, is a FormatError before anything is
// allocated; so are directories and unreadable paths.
// The weight loaders (safetensors, checkpoints) reuse read_npy().
#pragma once

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa::io {

/// The element types kappa reads from .npy files.
enum class NpyType { kFloat32, kFloat64, kInt32, kInt64 };

/// What a .npy header says about its array.
struct NpyHeader {
  NpyType type = NpyType::kFloat64;
  bool little_endian = true;    ///< byte order of the stored elements
  bool fortran_order = false;   ///< column-major storage
  std::vector<Index> shape;     ///< empty for a scalar (0-d array)
  std::size_t data_offset = 0;  ///< byte offset of the first element in the file

  /// Product of the shape (1 for a scalar).
  /// \throws RangeError if the product does not fit in Index (a header from
  ///         parse_npy_header() never has such a shape).
  [[nodiscard]] Index size() const {
    Index n = 1;
    for (Index s : shape) {
      if (n == 0) return 0;
      n = checked_mul("npy shape: number of elements", n, s, std::numeric_limits<Index>::max());
    }
    return n;
  }
  /// Bytes per element: 4 or 8.
  [[nodiscard]] std::size_t item_size() const {
    return (type == NpyType::kFloat32 || type == NpyType::kInt32) ? 4 : 8;
  }
};

/// A whole .npy array converted to scalar type T, its elements in C
/// (row-major) order whatever the file's order.
template <class T>
struct NpyArray {
  std::vector<Index> shape;
  std::vector<T> values;
};

namespace detail {

/// `text` with every byte outside printable ASCII (0x20..0x7e) and the
/// backslash written as \xNN, for quoting file contents in messages.
inline std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out.push_back(ch);
    } else {
      out += "\\x";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    }
  }
  return out;
}

[[noreturn]] inline void npy_fail(std::string_view file, std::size_t byte, std::string_view what) {
  throw FormatError("kappa: npy: " + std::string(file) + ": byte " + std::to_string(byte) + ": " +
                    std::string(what));
}

/// A tiny parser for the header's Python dict literal. `base` is the byte
/// offset of text[0] in the file, so errors name file offsets.
class NpyHeaderParser {
 public:
  NpyHeaderParser(std::string_view text, std::size_t base, std::string_view file)
      : s_(text), base_(base), file_(file) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::size_t key_at = i_;
      const std::string key = parse_string();
      skip_space();
      if (peek() != ':') fail(i_, "expected ':' after key '" + printable(key) + "'");
      ++i_;
      skip_space();
      if (key == "descr") {
        if (have_descr) fail(key_at, "duplicate key 'descr'");
        const std::size_t at = i_;
        parse_descr(parse_string(), at, h);
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_order) fail(key_at, "duplicate key 'fortran_order'");
        h.fortran_order = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        if (have_shape) fail(key_at, "duplicate key 'shape'");
        h.shape = parse_shape();
        have_shape = true;
      } else {
        fail(key_at,
             "unexpected key '" + printable(key) + "' (expected descr, fortran_order, shape)");
      }
      skip_space();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') {
        ++i_;
        break;
      }
      fail(i_, "expected ',' or '}' in the header dict");
    }
    if (!have_descr) fail(i_, "the header has no 'descr'");
    if (!have_order) fail(i_, "the header has no 'fortran_order'");
    if (!have_shape) fail(i_, "the header has no 'shape'");
    for (; i_ < s_.size(); ++i_) {
      if (s_[i_] != ' ' && s_[i_] != '\n' && s_[i_] != '\t' && s_[i_] != '\0') {
        fail(i_, "unexpected text after the header dict");
      }
    }
    return h;
  }

 private:
  [[noreturn]] void fail(std::size_t at, std::string_view what) const {
    npy_fail(file_, base_ + at, what);
  }
  [[nodiscard]] char peek() const {
    if (i_ >= s_.size()) fail(i_, "the header ends early");
    return s_[i_];
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(i_, std::string("expected '") + c + "'");
    ++i_;
  }
  std::string parse_string() {
    const char q = peek();
    if (q != '\'' && q != '"') fail(i_, "expected a quoted string");
    const std::size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) fail(start - 1, "unterminated string");
    std::string out(s_.substr(start, i_ - start));
    ++i_;
    return out;
  }
  bool parse_bool() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    fail(i_, "expected True or False for 'fortran_order'");
  }
  /// The dimensions; fails at the dimension where their product (the number
  /// of elements) would overflow Index.
  std::vector<Index> parse_shape() {
    std::vector<Index> shape;
    Index count = 1;
    expect('(');
    for (;;) {
      skip_space();
      if (peek() == ')') {
        ++i_;
        return shape;
      }
      const std::size_t at = i_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail(at, "expected a dimension");
      Index v = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (v > (std::numeric_limits<Index>::max() - 9) / 10) fail(at, "dimension too large");
        v = v * 10 + (s_[i_] - '0');
        ++i_;
      }
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix
      if (count != 0 && __builtin_mul_overflow(count, v, &count)) {
        fail(at, "the shape has more elements than fit in a signed 64-bit count (dimension " +
                     std::to_string(v) + " after " + std::to_string(shape.size()) + ")");
      }
      shape.push_back(v);
      skip_space();
      if (peek() == ',') {
        ++i_;
      } else if (peek() != ')') {
        fail(i_, "expected ',' or ')' in 'shape'");
      }
    }
  }
  void parse_descr(const std::string& d, std::size_t at, NpyHeader& h) const {
    if (d.size() != 3)
      fail(at, "unsupported dtype '" + printable(d) + "' (kappa reads f4, f8, i4, i8)");
    const char order = d[0];
    const std::string kind = d.substr(1);
    if (order == '<' || order == '|') {
      h.little_endian = true;
    } else if (order == '>') {
      h.little_endian = false;
    } else if (order == '=') {
      h.little_endian = std::endian::native == std::endian::little;
    } else {
      fail(at, "bad byte order in dtype '" + printable(d) + "'");
    }
    if (kind == "f4") {
      h.type = NpyType::kFloat32;
    } else if (kind == "f8") {
      h.type = NpyType::kFloat64;
    } else if (kind == "i4") {
      h.type = NpyType::kInt32;
    } else if (kind == "i8") {
      h.type = NpyType::kInt64;
    } else {
      fail(at, "unsupported dtype '" + printable(d) + "' (kappa reads f4, f8, i4, i8)");
    }
  }

  std::string_view s_;
  std::size_t base_;
  std::string_view file_;
  std::size_t i_ = 0;
};

template <class U>
U npy_load_element(const char* p, bool little_endian) {
  unsigned char b[sizeof(U)];
  std::memcpy(b, p, sizeof(U));
  if (little_endian != (std::endian::native == std::endian::little)) {
    std::reverse(b, b + sizeof(U));
  }
  U u;
  std::memcpy(&u, b, sizeof(U));
  return u;
}

/// u converted to T; `ok` false (and T{} returned) when T is an integer type
/// and u is NaN, infinite or outside T's range, where the conversion would be
/// undefined behaviour (float to integer) or silently wrap (integer to a
/// narrower integer). Floating-point T takes every value (out-of-range float64
/// values become +-inf in float32, as in NumPy).
template <class T, class U>
T npy_convert(U u, bool& ok) {
  ok = true;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if constexpr (std::is_floating_point_v<U>) {
      const auto v = static_cast<long double>(u);
      ok = std::isfinite(v) && v > static_cast<long double>(std::numeric_limits<T>::min()) - 1.0L &&
           v < static_cast<long double>(std::numeric_limits<T>::max()) + 1.0L;
    } else if constexpr (std::is_signed_v<U>) {
      ok = u < 0 ? std::is_signed_v<T> &&
                       static_cast<std::intmax_t>(u) >=
                           static_cast<std::intmax_t>(std::numeric_limits<T>::min())
                 : static_cast<std::uintmax_t>(u) <=
                       static_cast<std::uintmax_t>(std::numeric_limits<T>::max());
    } else {
      ok = static_cast<std::uintmax_t>(u) <=
           static_cast<std::uintmax_t>(std::numeric_limits<T>::max());
    }
    if (!ok) return T{};
  }
  return static_cast<T>(u);
}

/// The element at p converted to T; `ok` as in npy_convert.
template <class T>
T npy_element(const char* p, const NpyHeader& h, bool& ok) {
  switch (h.type) {
    case NpyType::kFloat32:
      return npy_convert<T>(npy_load_element<float>(p, h.little_endian), ok);
    case NpyType::kFloat64:
      return npy_convert<T>(npy_load_element<double>(p, h.little_endian), ok);
    case NpyType::kInt32:
      return npy_convert<T>(npy_load_element<std::int32_t>(p, h.little_endian), ok);
    case NpyType::kInt64:
      return npy_convert<T>(npy_load_element<std::int64_t>(p, h.little_endian), ok);
  }
  ok = true;
  return T{};
}

/// Throws FormatError: element `i` at byte `at` does not fit in T.
[[noreturn]] inline void npy_fail_value(std::string_view file, std::size_t at, Index i,
                                        std::string_view type_name) {
  npy_fail(file, at,
           "element " + std::to_string(i) + " is NaN, infinite or outside the range of " +
               std::string(type_name) + ", the type it is read as");
}

}  // namespace detail

/// Parses the header of a .npy file held in `bytes` (the whole file, or at
/// least its header). `name` is used in error messages.
/// \throws FormatError naming `name` and the byte offset of the problem.
inline NpyHeader parse_npy_header(std::string_view bytes, std::string_view name) {
  static constexpr char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 8) detail::npy_fail(name, bytes.size(), "file too short for a .npy preamble");
  if (bytes.substr(0, 6) != std::string_view(kMagic, 6)) {
    detail::npy_fail(name, 0, "missing the \\x93NUMPY magic string (not a .npy file)");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  std::size_t len_bytes = 0;
  if (major == 1) {
    len_bytes = 2;
  } else if (major == 2 || major == 3) {
    len_bytes = 4;
  } else {
    detail::npy_fail(name, 6, "unsupported .npy version " + std::to_string(major));
  }
  if (bytes.size() < 8 + len_bytes) detail::npy_fail(name, 8, "file ends inside the header length");
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  const std::size_t start = 8 + len_bytes;
  if (bytes.size() < start + header_len) {
    detail::npy_fail(name, bytes.size(),
                     "file ends inside the header (header length says " +
                         std::to_string(header_len) + " bytes from byte " + std::to_string(start) +
                         ")");
  }
  const std::string_view text = bytes.substr(start, header_len);
  if (header_len == 0 || text.back() != '\n') {
    detail::npy_fail(name, start + (header_len ? header_len - 1 : 0),
                     "the header does not end with '\\n'");
  }
  NpyHeader h = detail::NpyHeaderParser(text, start, name).parse();
  h.data_offset = start + header_len;
  return h;
}

/// Reads a whole .npy file into memory.
/// \throws FormatError naming the path when it is a directory, or cannot be
///         opened or read (never std::ios_base::failure).
inline std::string read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw FormatError("kappa: npy: " + path + ": byte 0: is a directory, not a file");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw FormatError("kappa: npy: " + path + ": byte 0: cannot open the file" +
                      (err != 0 ? " (" + std::generic_category().message(err) + ")" : ""));
  }
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure& e) {
    throw FormatError("kappa: npy: " + path + ": byte " + std::to_string(bytes.size()) +
                      ": cannot read the file (" + e.what() + ")");
  }
  if (in.bad()) {
    throw FormatError("kappa: npy: " + path + ": byte " + std::to_string(bytes.size()) +
                      ": cannot read the file");
  }
  return bytes;
}

/// Reads the .npy file at `path`, converting its elements to T. Elements come
/// back in C (row-major) order; a Fortran-order file is reordered.
/// \throws FormatError naming the file and byte offset for a malformed file
///         (bad magic, bad header, unsupported dtype, too little data), and
///         for integer T, an element that is NaN, infinite or outside T.
template <class T>
NpyArray<T> read_npy(const std::string& path) {
  static_assert(std::is_arithmetic_v<T>, "kappa: read_npy<T> needs an arithmetic T");
  const std::string bytes = read_file_bytes(path);
  const NpyHeader h = parse_npy_header(bytes, path);
  const Index n = h.size();  // fits: the parser checked the product
  std::size_t need = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(n), h.item_size(), &need)) {
    detail::npy_fail(path, h.data_offset,
                     "the shape's " + std::to_string(n) + " elements of " +
                         std::to_string(h.item_size()) + " bytes overflow a byte count");
  }
  // Compared with the bytes present before anything is allocated.
  if (bytes.size() - h.data_offset < need) {
    detail::npy_fail(path, bytes.size(),
                     "file ends inside the data: the shape needs " + std::to_string(need) +
                         " bytes from byte " + std::to_string(h.data_offset) + ", found " +
                         std::to_string(bytes.size() - h.data_offset));
  }
  NpyArray<T> a;
  a.shape = h.shape;
  a.values.resize(static_cast<std::size_t>(n));
  const char* data = bytes.data() + h.data_offset;
  const std::size_t rank = h.shape.size();
  const char* type_name = std::is_signed_v<T> ? "a signed integer" : "an unsigned integer";
  bool ok = true;
  const std::size_t item = h.item_size();
  T* const out = a.values.data();
  if (!h.fortran_order || rank <= 1) {
    for (Index i = 0; i < n; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * item;  // i >= 0
      out[i] = detail::npy_element<T>(data + at, h, ok);
      if (!ok) detail::npy_fail_value(path, h.data_offset + at, i, type_name);
    }
    return a;
  }
  // Fortran order: the first index varies fastest in the file.
  std::vector<Index> idx(rank, 0);
  for (Index f = 0; f < n; ++f) {
    Index c = 0;
    for (std::size_t d = 0; d < rank; ++d) c = c * h.shape[d] + idx[d];
    const std::size_t at = static_cast<std::size_t>(f) * item;  // f >= 0
    out[c] = detail::npy_element<T>(data + at, h, ok);
    if (!ok) detail::npy_fail_value(path, h.data_offset + at, f, type_name);
    for (std::size_t d = 0; d < rank; ++d) {
      if (++idx[d] < h.shape[d]) break;
      idx[d] = 0;
    }
  }
  return a;
}

/// Reads a .npy file holding a matrix: a 2-d array (rows x cols), a 1-d
/// array of n elements (returned as 1 x n) or a scalar (1 x 1).
/// \throws FormatError as read_npy(), and when the array has rank > 2.
template <Scalar T>
RowMatrix<T> read_npy_matrix(const std::string& path) {
  NpyArray<T> a = read_npy<T>(path);
  if (a.shape.size() > 2) {
    throw FormatError("kappa: npy: " + path + ": byte 0: expected a matrix (rank <= 2), the " +
                      "array has rank " + std::to_string(a.shape.size()));
  }
  const Index rows = a.shape.size() == 2 ? a.shape[0] : 1;
  const Index cols = a.shape.empty() ? 1 : a.shape.back();
  return Eigen::Map<const RowMatrix<T>>(a.values.data(), rows, cols);
}

/// Writes `m` (rows x cols) to `path` as a version 1.0 .npy file of little-
/// endian float32 or float64, C order. Throws FormatError if it cannot write.
template <class Derived>
void write_npy(const std::string& path, const Eigen::MatrixBase<Derived>& m) {
  using T = typename Derived::Scalar;
  static_assert(Scalar<T>, "kappa: write_npy writes float or double matrices");
  static_assert(std::endian::native == std::endian::little,
                "kappa: write_npy assumes a little-endian host");
  std::string header = std::string("{'descr': '<") + (sizeof(T) == 4 ? "f4" : "f8") +
                       "', 'fortran_order': False, 'shape': (" + std::to_string(m.rows()) + ", " +
                       std::to_string(m.cols()) + "), }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw FormatError("kappa: npy: " + path + ": byte 0: cannot open for writing");
  out.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const RowMatrix<T> rm = m;  // C order
  out.write(reinterpret_cast<const char*>(rm.data()),
            static_cast<std::streamsize>(rm.size()) * static_cast<std::streamsize>(sizeof(T)));
  if (!out) throw FormatError("kappa: npy: " + path + ": write failed");
}

}  // namespace kappa::io
