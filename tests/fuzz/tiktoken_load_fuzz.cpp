// Fuzz target: tiktoken's rank-file loader (BpeModel::from_tiktoken) and
// base64, with round trips through the writers.
//
// Input: the rank file. Properties:
//   * loading either succeeds or throws kappa::FormatError (nothing else, no
//     sanitizer report, bounded memory);
//   * a loaded model saved with to_tiktoken() reloads to the same rank file,
//     and both encode sample texts (and the input itself) to the same ids,
//     ids < vocab_size, and decode(encode(x)) == x;
//   * base64_decode of each line's first field, when it succeeds, re-encodes
//     to the same text (the loader accepts only canonical base64).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/bpe.hpp"

namespace {

namespace tk = kappa::tokenize;

constexpr std::string_view kSamples[] = {"hello world",
                                         "  leading spaces and\ttabs\n\n",
                                         "numbers 12345 and 3.14",
                                         "it's they'll we've",
                                         "\xff\xfe invalid \xc3 utf-8",
                                         "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87",
                                         "<|endoftext|> special"};

void check_same_encoding(const tk::Gpt2Tokenizer& a, const tk::Gpt2Tokenizer& b,
                         std::string_view text, const char* what) {
  for (const tk::SpecialTokens mode : {tk::SpecialTokens::kAsText, tk::SpecialTokens::kRecognize}) {
    const std::vector<kappa::TokenId> ids = a.encode(text, mode);
    KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, a.vocab_size()), "ids out of range");
    KAPPA_FUZZ_CHECK(a.decode(ids) == text,
                     "decode(encode(x)) != x for " + kappa::fuzz::show(text));
    KAPPA_FUZZ_CHECK(b.encode(text, mode) == ids, std::string(what) + ": reloaded model encodes " +
                                                      kappa::fuzz::show(text) + " differently");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view file = kappa::fuzz::as_text(data, size);

  // base64: what decodes re-encodes to the same text.
  for (std::size_t pos = 0; pos < file.size();) {
    std::size_t eol = file.find('\n', pos);
    if (eol == std::string_view::npos) eol = file.size();
    const std::string_view field =
        file.substr(pos, eol - pos).substr(0, file.substr(pos, eol - pos).find(' '));
    if (const auto bytes = tk::base64_decode(field))
      KAPPA_FUZZ_CHECK(tk::base64_encode(*bytes) == field,
                       "base64_decode accepted non-canonical '" + kappa::fuzz::show(field) + "'");
    pos = eol + 1;
  }

  // One special token just past the ranks (a dense file has one line per id).
  std::size_t lines = 0;
  for (std::size_t pos = 0; pos < file.size();) {
    std::size_t eol = file.find('\n', pos);
    if (eol == std::string_view::npos) eol = file.size();
    std::string_view line = file.substr(pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines += !line.empty();
    pos = eol + 1;
  }
  std::vector<tk::SpecialToken> specials{{"<|endoftext|>", static_cast<kappa::TokenId>(lines)}};

  tk::BpeModel model;
  try {
    model = tk::BpeModel::from_tiktoken(file, "fuzz.tiktoken", specials);
  } catch (const kappa::FormatError&) {
    return 0;  // rejected with a message: fine
  }
  const std::string saved = model.to_tiktoken();
  tk::BpeModel again;
  try {
    again = tk::BpeModel::from_tiktoken(saved, "saved.tiktoken", specials);
  } catch (const kappa::FormatError& e) {
    KAPPA_FUZZ_CHECK(false,
                     std::string("to_tiktoken() wrote a file that does not load: ") + e.what());
  }
  KAPPA_FUZZ_CHECK(again.to_tiktoken() == saved, "to_tiktoken() not stable after a reload");
  KAPPA_FUZZ_CHECK(again.vocab_size() == model.vocab_size(), "vocab_size changed after a reload");

  const tk::Gpt2Tokenizer a(model), b(std::move(again));
  for (std::string_view s : kSamples) check_same_encoding(a, b, s, "tiktoken round trip");
  check_same_encoding(a, b, file.substr(0, 512), "tiktoken round trip");

  // Saved as GPT-2's encoder.json + vocab.bpe: to_gpt2() may refuse a token
  // that is no merge of two lower-ranked tokens (FormatError, documented);
  // what it writes loads to the same vocabulary and encodes the same.
  std::pair<std::string, std::string> gpt2;
  try {
    gpt2 = model.to_gpt2();
  } catch (const kappa::FormatError&) {
    return 0;
  }
  tk::BpeModel from_gpt2;
  try {
    from_gpt2 =
        tk::BpeModel::from_gpt2(gpt2.first, "saved/encoder.json", gpt2.second, "saved/vocab.bpe");
  } catch (const kappa::FormatError& e) {
    KAPPA_FUZZ_CHECK(false, std::string("to_gpt2() wrote files that do not load: ") + e.what());
  }
  KAPPA_FUZZ_CHECK(from_gpt2.to_tiktoken() == saved, "GPT-2 round trip changed the vocabulary");
  const tk::Gpt2Tokenizer c(std::move(from_gpt2));
  for (std::string_view s : kSamples) check_same_encoding(a, c, s, "GPT-2 round trip");
  check_same_encoding(a, c, file.substr(0, 512), "GPT-2 round trip");
  return 0;
}
