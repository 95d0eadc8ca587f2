// kappa/tokenize/pretokenize.hpp - the split patterns of GPT-2, cl100k_base
// and o200k_base, hand-written (no regex engine), with the exact semantics of
// the regexes as tiktoken runs them (leftmost-first alternation, greedy
// quantifiers with backtracking, Unicode classes; see unicode.hpp).
//
// A pre-tokenizer cuts text into pieces; byte-level BPE then encodes each
// piece on its own. A pre-tokenizer is a policy type P with
//
//     static std::size_t P::next(std::string_view text, std::size_t i);
//
// returning the end of the piece that starts at byte i (i < text.size(),
// result > i). Pieces are contiguous and cover the text, so concatenating
// them gives the text back, byte for byte, whatever the input. An invalid
// UTF-8 byte is one character of class Other (like punctuation).
//
// Patterns (\p{..} Unicode general categories, \s the White_Space property):
//   Gpt2Split   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Cl100kSplit (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//               ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   O200kSplit  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?|
//               [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C?|
//               \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//               with C = (?i:'s|'t|'re|'ve|'m|'ll|'d)
#pragma once

#include <concepts>
#include <cstddef>
#include <string_view>

#include "kappa/tokenize/unicode.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace kappa::tokenize {

/// A pre-tokenizer policy: see the file comment.
template <class P>
concept PreTokenizer = requires(std::string_view text, std::size_t i) {
  { P::next(text, i) } -> std::same_as<std::size_t>;
};

/// Calls f(piece) for every piece of text, in order.
template <PreTokenizer P, class F>
void split(std::string_view text, F&& f) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t j = P::next(text, i);
    f(text.substr(i, j - i));
    i = j;
  }
}

namespace detail {

inline constexpr unsigned kEndClass = 15;  // past the end: in no class mask

/// One character as the patterns see it.
struct Ch {
  char32_t cp;      // code point; 0xFFFFFFFF for an invalid byte or the end
  unsigned cls;     // CharClass as an integer, kEndClass past the end
  std::size_t end;  // byte offset just after this character
};

inline Ch peek(std::string_view s, std::size_t i) noexcept {
  if (i >= s.size()) return {0xFFFFFFFFu, kEndClass, i};
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {b, static_cast<unsigned>(kAsciiClass[b]), i + 1};
  const Utf8Char c = decode_utf8(s, i);
  if (!c.valid) return {0xFFFFFFFFu, static_cast<unsigned>(CharClass::kOther), i + 1};
  return {c.code_point, static_cast<unsigned>(char_class(c.code_point)), i + c.length};
}

inline constexpr ClassMask kL = kLetterMask;
inline constexpr ClassMask kN = mask_of(CharClass::kNumber);
inline constexpr ClassMask kS = mask_of(CharClass::kSpace);
inline constexpr ClassMask kO =
    mask_of(CharClass::kOther) | mask_of(CharClass::kMark);  // [^\s\p{L}\p{N}]
// o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] ("upper") and [\p{Ll}\p{Lm}\p{Lo}\p{M}] ("lower")
inline constexpr ClassMask kUpper = mask_of(CharClass::kLu) | mask_of(CharClass::kLt) |
                                    mask_of(CharClass::kLm) | mask_of(CharClass::kLo) |
                                    mask_of(CharClass::kMark);
inline constexpr ClassMask kLower = mask_of(CharClass::kLl) | mask_of(CharClass::kLm) |
                                    mask_of(CharClass::kLo) | mask_of(CharClass::kMark);

inline bool in(const Ch& c, ClassMask m) noexcept {
  return (m >> c.cls) & 1u;
}
inline bool is_crlf(const Ch& c) noexcept {
  return c.cp == '\r' || c.cp == '\n';
}
/// [^\r\n\p{L}\p{N}]: one optional prefix character of cl100k/o200k.
inline bool is_prefix(const Ch& c) noexcept {
  return c.cls != kEndClass && !in(c, kL | kN) && !is_crlf(c);
}

/// End of the maximal run of characters in class mask m starting at i.
inline std::size_t run(std::string_view s, std::size_t i, ClassMask m) noexcept {
  for (;;) {
    const Ch c = peek(s, i);
    if (!in(c, m)) return i;
    i = c.end;
  }
}

/// Length of the contraction 's 't 're 've 'm 'll 'd starting at i (0 if
/// none); case-insensitive by Unicode simple case folding if `fold`.
inline std::size_t contraction(std::string_view s, std::size_t i, bool fold) noexcept {
  if (i >= s.size() || s[i] != '\'') return 0;
  const Ch a = peek(s, i + 1);
  auto is = [fold](const Ch& c, char lower) {
    return fold ? folds_to(c.cp, lower) : c.cp == static_cast<char32_t>(lower);
  };
  if (is(a, 's') || is(a, 't') || is(a, 'm') || is(a, 'd')) return a.end - i;
  const Ch b = peek(s, a.end);
  if ((is(a, 'r') && is(b, 'e')) || (is(a, 'v') && is(b, 'e')) || (is(a, 'l') && is(b, 'l')))
    return b.end - i;
  return 0;
}

/// The whitespace tail shared by all three patterns, at a whitespace char:
/// `\s+(?!\S)|\s+` - the run minus its last character when a non-space
/// follows and the run is longer than one character.
inline std::size_t whitespace_tail(std::string_view s, std::size_t i) noexcept {
  const Ch c0 = peek(s, i);
  std::size_t last_start = i, j = c0.end;
  for (;;) {
    const Ch c = peek(s, j);
    if (!in(c, kS)) break;
    last_start = j;
    j = c.end;
  }
  if (j == s.size() || last_start == i) return j;
  return last_start;
}

/// `\s*[\r\n]+` at a whitespace char: through the last CR/LF of the
/// whitespace run, or 0 when the run has none.
inline std::size_t whitespace_newlines(std::string_view s, std::size_t i) noexcept {
  std::size_t found = 0;
  for (std::size_t j = i;;) {
    const Ch c = peek(s, j);
    if (!in(c, kS)) break;
    if (is_crlf(c)) found = c.end;
    j = c.end;
  }
  return found;
}

/// \p{N}{1,3}: the end of 1 to 3 numbers starting with c (which is one).
inline std::size_t digits_1_to_3(std::string_view s, const Ch& c) noexcept {
  std::size_t j = c.end;
  for (int k = 1; k < 3; ++k) {
    const Ch d = peek(s, j);
    if (!in(d, kN)) break;
    j = d.end;
  }
  return j;
}

/// " ?[^\s\p{L}\p{N}]": the optional leading space's successor when it is
/// an "other" character, else c itself.
inline Ch space_then_other(std::string_view s, const Ch& c) noexcept {
  if (c.cp == ' ') {
    const Ch d = peek(s, c.end);
    if (in(d, kO)) return d;
  }
  return c;
}

}  // namespace detail

/// GPT-2's pattern (r50k_base, p50k_base):
///
///     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
struct Gpt2Split {
  static std::size_t next(std::string_view s, std::size_t i) noexcept {
    using namespace detail;
    if (const std::size_t n = contraction(s, i, false)) return i + n;
    Ch c = peek(s, i);
    if (c.cp == ' ') {  // ` ?X+`: the space joins a following letter/number/other run
      const Ch d = peek(s, c.end);
      if (in(d, kL | kN | kO)) c = d;
    }
    const std::size_t start = c.end;
    if (in(c, kL)) return run(s, start, kL);
    if (in(c, kN)) return run(s, start, kN);
    if (in(c, kO)) return run(s, start, kO);
    return whitespace_tail(s, i);
  }
};

/// cl100k_base's pattern (one regex, split over two lines here):
///
///     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
///     \s*[\r\n]+|\s+(?!\S)|\s+
struct Cl100kSplit {
  static std::size_t next(std::string_view s, std::size_t i) noexcept {
    using namespace detail;
    if (const std::size_t n = contraction(s, i, true)) return i + n;
    const Ch c = peek(s, i);
    if (in(c, kL)) return run(s, c.end, kL);
    if (is_prefix(c)) {
      const Ch d = peek(s, c.end);
      if (in(d, kL)) return run(s, d.end, kL);
    }
    if (in(c, kN)) return digits_1_to_3(s, c);
    const Ch o = space_then_other(s, c);
    if (in(o, kO)) {
      std::size_t j = run(s, o.end, kO);
      for (;;) {
        const Ch d = peek(s, j);
        if (!is_crlf(d)) return j;
        j = d.end;
      }
    }
    if (const std::size_t j = whitespace_newlines(s, i)) return j;
    return whitespace_tail(s, i);
  }
};

/// o200k_base's pattern (see the file comment): words split at case
/// changes, contractions kept on the word, numbers by 3, `/` kept with
/// punctuation.
struct O200kSplit {
 private:
  // P? X* Y+ C? after the optional prefix, from byte p: 0 if no match.
  static std::size_t upper_star_lower_plus(std::string_view s, std::size_t p) noexcept {
    using namespace detail;
    std::size_t j = p, last_lower_end = 0;
    for (;;) {
      const Ch c = peek(s, j);
      if (!in(c, kUpper)) break;
      if (in(c, kLower)) last_lower_end = c.end;
      j = c.end;
    }
    std::size_t end;
    const Ch c = peek(s, j);
    if (in(c, kLower)) {
      end = run(s, c.end, kLower);
    } else if (last_lower_end != 0) {
      end = last_lower_end;  // backtrack: the last "upper" that is also "lower"
    } else {
      return 0;
    }
    return end + contraction(s, end, true);
  }
  static std::size_t upper_plus_lower_star(std::string_view s, std::size_t p) noexcept {
    using namespace detail;
    const Ch c = peek(s, p);
    if (!in(c, kUpper)) return 0;
    const std::size_t end = run(s, run(s, c.end, kUpper), kLower);
    return end + contraction(s, end, true);
  }

 public:
  static std::size_t next(std::string_view s, std::size_t i) noexcept {
    using namespace detail;
    const Ch c = peek(s, i);
    const bool prefix = is_prefix(c);
    if (prefix)
      if (const std::size_t e = upper_star_lower_plus(s, c.end)) return e;
    if (const std::size_t e = upper_star_lower_plus(s, i)) return e;
    if (prefix)
      if (const std::size_t e = upper_plus_lower_star(s, c.end)) return e;
    if (const std::size_t e = upper_plus_lower_star(s, i)) return e;
    if (in(c, kN)) return digits_1_to_3(s, c);
    const Ch o = space_then_other(s, c);
    if (in(o, kO)) {
      std::size_t j = run(s, o.end, kO);
      for (;;) {
        const Ch d = peek(s, j);
        if (!is_crlf(d) && d.cp != '/') return j;
        j = d.end;
      }
    }
    if (const std::size_t j = whitespace_newlines(s, i)) return j;
    return whitespace_tail(s, i);
  }
};

}  // namespace kappa::tokenize
