// kappa/core/error.hpp - the exception types for bad user input, and the
// helpers that build their messages.
//
// Three tiers (see docs/design.md): type misuse fails a concept/static_assert;
// internal invariants use KAPPA_ASSERT (compiled out with NDEBUG); bad user
// input at an API boundary throws one of the types below, with a message that
// names what was wrong (both shapes, the id and the size, the file and byte).
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kappa/core/matrix.hpp"

/// Internal invariant check; compiled out with NDEBUG. Never for user input.
#define KAPPA_ASSERT(cond) assert(cond)

namespace kappa {

/// Operands whose shapes do not fit together. The message names both shapes.
class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A malformed file or field. The message names the file (or field) and the
/// byte offset or line where reading failed.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An index (token id, position, head) outside its valid range. The message
/// names the offending value and the size of the range.
class RangeError : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

/// Text from a file, shown in a message: in double quotes, with every byte
/// that could disturb a terminal or a log escaped, so a hostile file cannot
/// inject lines or terminal codes. C0 controls and DEL become `\xNN`, a
/// double quote and a backslash are escaped with a backslash; C1 controls
/// (U+0080..U+009F), line and paragraph separators and bidirectional
/// overrides become `\uNNNN`; bytes that are not UTF-8 become `\xNN`. Cut
/// after `max_bytes` bytes of input (at a character boundary) with "..."
/// after the closing quote. The one quoting helper for every message that
/// quotes file content.
inline std::string quoted(std::string_view text, std::size_t max_bytes = 80);

/// As quoted(), without the quotes and without escaping double quotes and
/// backslashes: for a whole message from elsewhere (a parser's) that may
/// echo file bytes.
inline std::string printable(std::string_view text, std::size_t max_bytes = 400);

namespace detail {
inline std::string escape_for_message(std::string_view text, std::size_t max_bytes, bool quote) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  if (quote) out += '"';
  const auto hex_byte = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n && i < max_bytes) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F) {
        hex_byte(c);
      } else if (quote && (c == '"' || c == '\\')) {
        out += '\\';
        out += static_cast<char>(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, then validated
    // (no overlong forms, no surrogates, nothing above U+10FFFF).
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07u;
    }
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    ok = ok && !(len == 3 && cp < 0x800) && !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
         !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      hex_byte(c);
      ++i;
      continue;
    }
    if (i + len > max_bytes) break;  // cut before a character that does not fit whole
    const bool control = (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
                         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
    if (control) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  if (quote) out += '"';
  if (i < n) out += "...";
  return out;
}
}  // namespace detail

inline std::string quoted(std::string_view text, std::size_t max_bytes) {
  return detail::escape_for_message(text, max_bytes, true);
}
inline std::string printable(std::string_view text, std::size_t max_bytes) {
  return detail::escape_for_message(text, max_bytes, false);
}

/// "(rows x cols)": how kappa prints a shape in messages.
inline std::string shape_string(Index rows, Index cols) {
  std::string s = "(";  // appended piecewise: GCC 12 warns (-Wrestrict) on a + chain
  s.append(std::to_string(rows)).append(" x ").append(std::to_string(cols)).push_back(')');
  return s;
}

/// The shape of any Eigen expression, formatted as by shape_string().
template <class Derived>
std::string shape_of(const Eigen::EigenBase<Derived>& m) {
  return shape_string(m.rows(), m.cols());
}

/// Throws ShapeError unless `ok`, naming both operands' shapes and the rule.
/// Example message: "kappa: attention: Q is (4 x 8) but K is (5 x 7)
/// (Q and K must have the same number of columns, d_QK)".
inline void require_shapes(bool ok, std::string_view what, std::string_view a_name, Index a_rows,
                           Index a_cols, std::string_view b_name, Index b_rows, Index b_cols,
                           std::string_view rule) {
  if (ok) return;
  std::string msg = "kappa: ";
  msg += what;
  msg += ": ";
  msg += a_name;
  msg += " is ";
  msg += shape_string(a_rows, a_cols);
  msg += " but ";
  msg += b_name;
  msg += " is ";
  msg += shape_string(b_rows, b_cols);
  if (!rule.empty()) {
    msg += " (";
    msg += rule;
    msg += ")";
  }
  throw ShapeError(msg);
}

/// As above, reading the shapes off two Eigen objects.
template <class A, class B>
void require_shapes(bool ok, std::string_view what, std::string_view a_name, const A& a,
                    std::string_view b_name, const B& b, std::string_view rule) {
  require_shapes(ok, what, a_name, a.rows(), a.cols(), b_name, b.rows(), b.cols(), rule);
}

/// Throws RangeError naming `what`, the value and the size unless
/// 0 <= value < size. Example: "kappa: token id 50257 is out of range for a
/// vocabulary of size 50257".
inline void require_index(std::string_view what, long long value, long long size,
                          std::string_view range_name) {
  if (value >= 0 && value < size) return;
  std::string msg = "kappa: ";
  msg += what;
  msg += " ";
  msg += std::to_string(value);
  msg += " is out of range for ";
  msg += range_name;
  msg += " of size ";
  msg += std::to_string(size);
  throw RangeError(msg);
}

}  // namespace kappa
