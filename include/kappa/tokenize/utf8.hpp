// kappa/tokenize/utf8.hpp - UTF-8 decoding and encoding that never fails.
//
// Text in kappa is a byte string that is usually UTF-8. The tokenizers walk
// it one "character" at a time, where a character is
//   * a Unicode code point encoded as well-formed UTF-8 (RFC 3629: shortest
//     form, no surrogates, at most U+10FFFF), or
//   * a single byte that does not start a well-formed sequence ("invalid
//     byte"); it stands for itself, so any byte string is a sequence of
//     characters and tokenizers can round-trip it exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kappa::tokenize {

/// A decoded character: the code point (or the raw byte value when invalid)
/// and the number of bytes it occupies (1..4).
struct Utf8Char {
  char32_t code_point;  ///< U+0000..U+10FFFF, or the byte value if !valid
  std::uint8_t length;  ///< bytes consumed, >= 1
  bool valid;           ///< false for an invalid byte
};

/// Decodes the character starting at s[i]. Precondition: i < s.size().
/// Never reads past s.size(); an ill-formed or truncated sequence yields
/// {byte, 1, false} so that decoding resumes at the next byte.
inline Utf8Char decode_utf8(std::string_view s, std::size_t i) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1, true};
  const std::size_t left = s.size() - i;
  auto cont = [&](std::size_t k) {
    return k < left && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  };
  auto at = [&](std::size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F);
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) return {(static_cast<char32_t>(b0 & 0x1F) << 6) | at(1), 2, true};
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (cont(1) && cont(2)) {
      const char32_t cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (at(1) << 6) | at(2);
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3, true};
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (cont(1) && cont(2) && cont(3)) {
      const char32_t cp =
          (static_cast<char32_t>(b0 & 0x07) << 18) | (at(1) << 12) | (at(2) << 6) | at(3);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4, true};
    }
  }
  return {b0, 1, false};
}

/// Appends the UTF-8 encoding of code point cp (precondition: cp <= U+10FFFF
/// and not a surrogate) to out.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// True if s is entirely well-formed UTF-8.
inline bool is_valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    if (!c.valid) return false;
    i += c.length;
  }
  return true;
}

/// s with each maximal ill-formed subsequence replaced by U+FFFD (Unicode's
/// "substitution of maximal subparts", as Rust's String::from_utf8_lossy, so
/// as Hugging Face's decode returns text): a truncated sequence E2 82 is one
/// U+FFFD, a lone byte E9 one, bytes C0 AF two.
inline std::string lossy_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    if (c.valid) {
      out.append(s.substr(i, c.length));
      i += c.length;
      continue;
    }
    // The longest prefix of a well-formed sequence that starts at i.
    const auto b0 = static_cast<unsigned char>(s[i]);
    std::size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 2;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 3;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    std::size_t k = 1;
    while (k <= need && i + k < s.size()) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
      ++k;
    }
    out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

/// Number of characters (code points, each invalid byte counting as one).
inline std::size_t count_chars(std::string_view s) noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++n) i += decode_utf8(s, i).length;
  return n;
}

}  // namespace kappa::tokenize
