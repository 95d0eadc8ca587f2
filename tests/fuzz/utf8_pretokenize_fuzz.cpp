// Fuzz target: UTF-8 decoding and the three pre-tokenizers on any bytes.
//
// Oracle: an independent decoder written from the Unicode Standard's table of
// well-formed byte sequences (Table 3-7), not from kappa's code. Properties:
//   * decode_utf8 at every character start agrees with the oracle (code point,
//     length, validity); an ill-formed sequence is one invalid byte;
//   * is_valid_utf8 and count_chars agree with the oracle's walk;
//   * append_utf8 of a decoded code point gives back its bytes;
//   * Gpt2Split, Cl100kSplit and O200kSplit cut the input into non-empty
//     pieces that end on character boundaries and concatenate to the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/pretokenize.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace {

struct OracleChar {
  std::uint32_t cp;
  std::size_t len;
  bool valid;
};

// Table 3-7 of the Unicode Standard: the ranges of each byte of a
// well-formed sequence, by first byte.
OracleChar oracle_decode(std::string_view s, std::size_t i) {
  const auto b = [&](int k) -> int {  // byte i + k, or -1 past the end
    const std::size_t at = i + static_cast<std::size_t>(k);
    return at < s.size() ? static_cast<unsigned char>(s[at]) : -1;
  };
  const int b0 = b(0);
  struct Row {
    int lo0, hi0, lo1, hi1, n;
  };
  static constexpr Row kRows[] = {
      {0x00, 0x7F, 0, 0, 1},       {0xC2, 0xDF, 0x80, 0xBF, 2}, {0xE0, 0xE0, 0xA0, 0xBF, 3},
      {0xE1, 0xEC, 0x80, 0xBF, 3}, {0xED, 0xED, 0x80, 0x9F, 3}, {0xEE, 0xEF, 0x80, 0xBF, 3},
      {0xF0, 0xF0, 0x90, 0xBF, 4}, {0xF1, 0xF3, 0x80, 0xBF, 4}, {0xF4, 0xF4, 0x80, 0x8F, 4},
  };
  for (const Row& r : kRows) {
    if (b0 < r.lo0 || b0 > r.hi0) continue;
    if (r.n == 1) return {static_cast<std::uint32_t>(b0), 1, true};
    const int b1 = b(1);
    if (b1 < r.lo1 || b1 > r.hi1) break;
    bool ok = true;
    for (int k = 2; k < r.n; ++k) ok = ok && b(k) >= 0x80 && b(k) <= 0xBF;
    if (!ok) break;
    static constexpr std::uint32_t kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    std::uint32_t cp = static_cast<std::uint32_t>(b0) & kLeadMask[r.n];
    for (int k = 1; k < r.n; ++k) cp = (cp << 6) | (static_cast<std::uint32_t>(b(k)) & 0x3F);
    return {cp, static_cast<std::size_t>(r.n), true};
  }
  return {static_cast<std::uint32_t>(b0), 1, false};
}

template <class Split>
void check_split(std::string_view text, const std::vector<bool>& boundary, const char* name) {
  std::string joined;
  std::size_t at = 0;
  kappa::tokenize::split<Split>(text, [&](std::string_view piece) {
    KAPPA_FUZZ_CHECK(!piece.empty(), std::string(name) + ": empty piece");
    KAPPA_FUZZ_CHECK(piece.data() == text.data() + at,
                     std::string(name) + ": pieces not contiguous");
    at += piece.size();
    KAPPA_FUZZ_CHECK(
        at <= text.size() && boundary[at],
        std::string(name) + ": piece ends inside a character at byte " + std::to_string(at));
    joined += piece;
  });
  KAPPA_FUZZ_CHECK(joined == text, std::string(name) + ": pieces do not concatenate to the input");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tk = kappa::tokenize;
  const std::string_view text = kappa::fuzz::as_text(data, size);

  std::vector<bool> boundary(text.size() + 1, false);
  bool all_valid = true;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size();) {
    boundary[i] = true;
    const OracleChar want = oracle_decode(text, i);
    const tk::Utf8Char got = tk::decode_utf8(text, i);
    KAPPA_FUZZ_CHECK(got.valid == want.valid && got.length == want.len && got.code_point == want.cp,
                     "decode_utf8 at byte " + std::to_string(i) + " of " + kappa::fuzz::show(text));
    if (want.valid) {
      std::string again;
      tk::append_utf8(again, static_cast<char32_t>(want.cp));
      KAPPA_FUZZ_CHECK(again == text.substr(i, want.len),
                       "append_utf8 of U+" + std::to_string(want.cp));
    }
    all_valid = all_valid && want.valid;
    ++chars;
    i += want.len;
  }
  boundary[text.size()] = true;
  KAPPA_FUZZ_CHECK(tk::is_valid_utf8(text) == all_valid, "is_valid_utf8");
  KAPPA_FUZZ_CHECK(tk::count_chars(text) == chars, "count_chars");

  check_split<tk::Gpt2Split>(text, boundary, "Gpt2Split");
  check_split<tk::Cl100kSplit>(text, boundary, "Cl100kSplit");
  check_split<tk::O200kSplit>(text, boundary, "O200kSplit");
  return 0;
}
