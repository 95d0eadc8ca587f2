// Fuzz target: GPT-2's encoder.json + vocab.bpe loader (BpeModel::from_gpt2,
// with its JSON reader and GPT-2's byte alphabet), with a round trip through
// the writer.
//
// Input: encoder.json, a NUL byte, vocab.bpe. Properties:
//   * loading either succeeds or throws kappa::FormatError;
//   * a loaded model saved with to_gpt2() reloads, saves to the same files
//     again, and both encode sample texts and the input to the same ids, ids
//     < vocab_size, decode(encode(x)) == x.
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
                         std::string_view text) {
  for (const tk::SpecialTokens mode : {tk::SpecialTokens::kAsText, tk::SpecialTokens::kRecognize}) {
    const std::vector<kappa::TokenId> ids = a.encode(text, mode);
    KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, a.vocab_size()), "ids out of range");
    KAPPA_FUZZ_CHECK(a.decode(ids) == text,
                     "decode(encode(x)) != x for " + kappa::fuzz::show(text));
    KAPPA_FUZZ_CHECK(b.encode(text, mode) == ids, "GPT-2 round trip: reloaded model encodes " +
                                                      kappa::fuzz::show(text) + " differently");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto [encoder_json, vocab_bpe] =
      kappa::fuzz::split_at(kappa::fuzz::as_text(data, size), '\0');
  tk::BpeModel model;
  try {
    model = tk::BpeModel::from_gpt2(encoder_json, "fuzz/encoder.json", vocab_bpe, "fuzz/vocab.bpe");
  } catch (const kappa::FormatError&) {
    return 0;  // rejected with a message: fine
  }
  const auto [json, bpe] = model.to_gpt2();
  tk::BpeModel again;
  try {
    again = tk::BpeModel::from_gpt2(json, "saved/encoder.json", bpe, "saved/vocab.bpe");
  } catch (const kappa::FormatError& e) {
    KAPPA_FUZZ_CHECK(false, std::string("to_gpt2() wrote files that do not load: ") + e.what());
  }
  KAPPA_FUZZ_CHECK(again.to_gpt2() == std::pair(json, bpe), "to_gpt2() not stable after a reload");
  KAPPA_FUZZ_CHECK(again.vocab_size() == model.vocab_size(), "vocab_size changed after a reload");
  const tk::Gpt2Tokenizer a(std::move(model)), b(std::move(again));
  for (std::string_view s : kSamples) check_same_encoding(a, b, s);
  check_same_encoding(a, b, encoder_json.substr(0, 256));
  check_same_encoding(a, b, vocab_bpe.substr(0, 256));
  return 0;
}
