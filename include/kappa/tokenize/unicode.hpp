// kappa/tokenize/unicode.hpp - the character classes the pre-tokenizers use.
//
// The GPT-2, cl100k and o200k split patterns are written with \p{L} (letter),
// \p{Lu}/\p{Ll}/\p{Lt}/\p{Lm}/\p{Lo}, \p{M} (mark), \p{N} (number) and \s
// (the White_Space property). char_class(cp) answers which of these a code
// point is in, from tables generated out of the Unicode Character Database
// (unicode_tables.hpp, see tests/reference/gen_unicode_tables.py): ASCII by a
// 128-entry table, everything else by a two-level table (4352 x 256-entry
// blocks, deduplicated) built once from the range list on first use.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "kappa/tokenize/unicode_tables.hpp"

namespace kappa::tokenize {

/// Character classes. The general categories are exclusive, and White_Space
/// characters (Zs, Zl, Zp, some Cc) are in none of L, M, N, so one class per
/// code point suffices. An invalid UTF-8 byte is kOther.
enum class CharClass : std::uint8_t {
  kOther = 0,   ///< anything else: punctuation, symbols, controls, unassigned
  kLu = 1,      ///< uppercase letter
  kLl = 2,      ///< lowercase letter
  kLt = 3,      ///< titlecase letter
  kLm = 4,      ///< modifier letter
  kLo = 5,      ///< other letter (CJK ideographs, Arabic, ...)
  kMark = 6,    ///< `\p{M}`: Mn, Mc, Me (combining marks)
  kNumber = 7,  ///< `\p{N}`: Nd, Nl, No
  kSpace = 8,   ///< `\s`: the White_Space property
};

/// A set of classes as a bit mask (bit c for CharClass c).
using ClassMask = std::uint16_t;

/// The mask with the single bit of class c.
constexpr ClassMask mask_of(CharClass c) {
  return static_cast<ClassMask>(1u << static_cast<unsigned>(c));
}

inline constexpr ClassMask kLetterMask = mask_of(CharClass::kLu) | mask_of(CharClass::kLl) |
                                         mask_of(CharClass::kLt) | mask_of(CharClass::kLm) |
                                         mask_of(CharClass::kLo);  ///< `\p{L}`

namespace detail {

/// The two-level lookup table, built from kUnicodeRanges.
struct ClassTable {
  std::array<std::uint16_t, 0x110000 / 256> stage1{};  // block index per 256 code points
  std::vector<std::uint8_t> stage2;                    // blocks of 256 classes

  ClassTable() {
    std::vector<std::uint8_t> full(0x110000, 0);
    for (const UnicodeRange& r : kUnicodeRanges)
      for (std::uint32_t cp = r.first; cp <= r.last; ++cp) full[cp] = r.cls;
    for (std::size_t b = 0; b < stage1.size(); ++b) {
      const std::uint8_t* block = full.data() + b * 256;
      std::size_t found = stage2.size() / 256;
      for (std::size_t k = 0; k < stage2.size() / 256; ++k) {
        if (std::equal(block, block + 256, stage2.data() + k * 256)) {
          found = k;
          break;
        }
      }
      if (found == stage2.size() / 256) stage2.insert(stage2.end(), block, block + 256);
      stage1[b] = static_cast<std::uint16_t>(found);
    }
  }
};

inline const ClassTable& class_table() {
  static const ClassTable table;
  return table;
}

inline constexpr std::array<CharClass, 128> kAsciiClass = [] {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    CharClass k = CharClass::kOther;
    if (c >= 'A' && c <= 'Z') k = CharClass::kLu;
    if (c >= 'a' && c <= 'z') k = CharClass::kLl;
    if (c >= '0' && c <= '9') k = CharClass::kNumber;
    if ((c >= 0x09 && c <= 0x0D) || c == ' ') k = CharClass::kSpace;
    t[static_cast<std::size_t>(c)] = k;
  }
  return t;
}();

}  // namespace detail

/// The class of code point cp (kOther above U+10FFFF).
inline CharClass char_class(char32_t cp) noexcept {
  if (cp < 128) return detail::kAsciiClass[cp];
  if (cp >= 0x110000) return CharClass::kOther;
  const detail::ClassTable& t = detail::class_table();
  return static_cast<CharClass>(t.stage2[std::size_t{t.stage1[cp >> 8]} * 256 + (cp & 0xFF)]);
}

/// True if cp is one of the letters that (?i) matches for ASCII letter
/// `lower` (one of s t r e v m l d), by Unicode simple case folding.
inline bool folds_to(char32_t cp, char lower) noexcept {
  auto in = [cp](const auto& arr) {
    for (std::uint32_t x : arr)
      if (x == cp) return true;
    return false;
  };
  switch (lower) {
    case 's':
      return in(detail::kFold_s);
    case 't':
      return in(detail::kFold_t);
    case 'r':
      return in(detail::kFold_r);
    case 'e':
      return in(detail::kFold_e);
    case 'v':
      return in(detail::kFold_v);
    case 'm':
      return in(detail::kFold_m);
    case 'l':
      return in(detail::kFold_l);
    case 'd':
      return in(detail::kFold_d);
    default:
      return false;
  }
}

}  // namespace kappa::tokenize
