// Fuzz target: the character tokenizer (greedy longest match over tokens of
// up to K characters) and the word tokenizer, built from a fuzzed corpus.
//
// Input: byte K (1..4), byte vocab_size, then corpus NUL text NUL specials
// (one per line). Properties:
//   * building either succeeds or throws std::invalid_argument;
//   * every character of the corpus is a CharTokenizer token, so
//     encode(corpus) has no unknown id and decode(encode(corpus)) == corpus;
//     ids of any text are < vocab_size, and text whose ids have no unknown
//     decodes back to itself;
//   * WordTokenizer (min_frequency 1, no size limit) knows every word of its
//     corpus: encode(corpus) has no unknown id, and decode gives the words,
//     punctuation and specials of split_words joined by single spaces.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/char_tokenizer.hpp"
#include "kappa/tokenize/word_tokenizer.hpp"

namespace tk = kappa::tokenize;

namespace {

void check_char(std::string_view corpus, std::string_view text, std::size_t vocab_size,
                std::size_t k) {
  std::optional<tk::CharTokenizer> tok;
  try {
    tok.emplace(tk::CharTokenizer::from_corpus(corpus, vocab_size, k));
  } catch (const std::invalid_argument&) {
    return;
  }
  const std::vector<kappa::TokenId> ids = tok->encode(corpus);
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, tok->vocab_size()),
                   "CharTokenizer: id out of range");
  for (kappa::TokenId id : ids)
    KAPPA_FUZZ_CHECK(id != 0, "CharTokenizer: corpus character unknown");
  KAPPA_FUZZ_CHECK(tok->decode(ids) == corpus, "CharTokenizer: decode(encode(corpus)) != corpus");
  const std::vector<kappa::TokenId> t = tok->encode(text);
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(t, tok->vocab_size()),
                   "CharTokenizer: id out of range");
  if (std::find(t.begin(), t.end(), 0) == t.end())
    KAPPA_FUZZ_CHECK(tok->decode(t) == text, "CharTokenizer: decode(encode(text)) != text");
}

void check_word(std::string_view corpus, std::string_view text, std::string_view specials) {
  tk::WordVocabularyOptions options;
  for (std::size_t pos = 0; pos < specials.size() && options.specials.size() < 4;) {
    std::size_t eol = specials.find('\n', pos);
    if (eol == std::string_view::npos) eol = specials.size();
    options.specials.emplace_back(specials.substr(pos, eol - pos));
    pos = eol + 1;
  }
  std::optional<tk::WordTokenizer> tok;
  try {
    tok.emplace(corpus, options);
  } catch (const std::invalid_argument&) {
    return;
  }
  const std::vector<kappa::TokenId> ids = tok->encode(corpus);
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, tok->vocab_size()),
                   "WordTokenizer: id out of range");
  std::string joined;
  std::size_t n = 0;
  tok->split_words(corpus, [&](std::string_view w, bool) {
    if (n++ > 0) joined += ' ';
    joined += w;
  });
  KAPPA_FUZZ_CHECK(n == ids.size(), "WordTokenizer: encode and split_words disagree on the count");
  for (kappa::TokenId id : ids) KAPPA_FUZZ_CHECK(id != 0, "WordTokenizer: corpus word unknown");
  KAPPA_FUZZ_CHECK(tok->decode(ids) == joined, "WordTokenizer: decode(encode(corpus)) != words");
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(tok->encode(text), tok->vocab_size()),
                   "WordTokenizer: id out of range");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in = kappa::fuzz::as_text(data, size);
  const std::size_t k = 1 + kappa::fuzz::take_byte(in) % 4;
  const std::size_t vocab_size = kappa::fuzz::take_byte(in);
  const auto [corpus, rest] = kappa::fuzz::split_at(in, '\0');
  const auto [text, specials] = kappa::fuzz::split_at(rest, '\0');
  check_char(corpus, text, vocab_size, k);
  check_word(corpus, text, specials);
  return 0;
}
