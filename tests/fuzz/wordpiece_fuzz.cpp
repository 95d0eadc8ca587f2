// Fuzz target: WordPiece (BERT), kappa/tokenize/wordpiece.hpp.
//
// Input: the first byte picks what the rest is:
//   0, 1  text for bert-base-uncased's vocab.txt (tests/data/tokenize/
//         wordpiece), uncased (0) or cased (1);
//   2     a tokenizer.json;
//   3     a vocab.txt (then "Hello, [CLS] world" is encoded with it).
// Properties:
//   * encode never throws; every id is in [0, vocab_size); with the template
//     the ids are [CLS] ... [SEP] around encode(text, AddSpecial::kNo);
//   * bert_normalize gives valid UTF-8, and decode never throws on encode's
//     ids;
//   * if no piece is the unknown token and the text holds no '[' (no added
//     token), the decoded text without spaces is the pre-tokenized words
//     joined (the WordPiece decoder only joins pieces and removes spaces;
//     " do not" -> " don't" excepted);
//   * loading a tokenizer.json or vocab.txt succeeds or throws FormatError
//     (or RangeError), nothing else; a loaded tokenizer encodes in range.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "kappa/tokenize/wordpiece.hpp"

namespace {

namespace tk = kappa::tokenize;
using kappa::TokenId;
using kappa::tokenize::AddSpecial;
using kappa::tokenize::SkipSpecial;

const tk::WordPieceTokenizer& bert(bool cased) {
  static const std::string vocab =
      std::string(KAPPA_FUZZ_CORPUS_DIR) + "/../wordpiece/bert-base-uncased/vocab.txt";
  static const tk::WordPieceTokenizer uncased = tk::WordPieceTokenizer::from_vocab_txt(vocab);
  static const tk::WordPieceTokenizer cased_tok = [] {
    tk::WordPieceTokenizer t = tk::WordPieceTokenizer::from_vocab_txt(vocab);
    tk::WordPieceConfig c = t.config();
    c.normalizer->lowercase = false;
    std::vector<std::string> tokens;
    for (std::size_t k = 0; k < t.vocab_size(); ++k)
      tokens.push_back(t.token(static_cast<TokenId>(k)));
    return tk::WordPieceTokenizer(std::move(tokens), std::move(c));
  }();
  return cased ? cased_tok : uncased;
}

std::string without_spaces(std::string_view s) {
  std::string out;
  for (const char c : s)
    if (c != ' ') out += c;
  return out;
}

void check_text(const tk::WordPieceTokenizer& t, std::string_view text) {
  const std::vector<TokenId> plain = t.encode(text, AddSpecial::kNo);
  const std::vector<TokenId> full = t.encode(text);
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(full, t.vocab_size()), kappa::fuzz::show(text));
  const auto& pre = t.config().template_prefix;
  const auto& suf = t.config().template_suffix;
  KAPPA_FUZZ_CHECK(full.size() == pre.size() + plain.size() + suf.size(), kappa::fuzz::show(text));
  KAPPA_FUZZ_CHECK(std::equal(plain.begin(), plain.end(),
                              full.begin() + static_cast<std::ptrdiff_t>(pre.size())),
                   kappa::fuzz::show(text));
  const std::string decoded = t.decode(plain);
  (void)t.decode(full, SkipSpecial::kYes);
  const std::string normalized = tk::bert_normalize(text, *t.config().normalizer);
  KAPPA_FUZZ_CHECK(tk::is_valid_utf8(normalized), kappa::fuzz::show(text));
  const bool has_unk = std::find(plain.begin(), plain.end(), t.unk_id()) != plain.end();
  if (has_unk || text.find('[') != std::string_view::npos ||
      decoded.find("don't") != std::string::npos)
    return;
  std::string words;
  tk::bert_pretokenize(normalized, [&](std::string_view w) { words += w; });
  KAPPA_FUZZ_CHECK(without_spaces(decoded) == words,
                   kappa::fuzz::show(text) + " decodes to " + kappa::fuzz::show(decoded));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in = kappa::fuzz::as_text(data, size);
  const unsigned selector = kappa::fuzz::take_byte(in) % 4;
  if (selector < 2) {
    check_text(bert(selector == 1), in);
    return 0;
  }
  static const kappa::fuzz::MemFile file("wordpiece");
  file.assign(in);
  try {
    const tk::WordPieceTokenizer t = selector == 2
                                         ? tk::WordPieceTokenizer::from_tokenizer_json(file.path())
                                         : tk::WordPieceTokenizer::from_vocab_txt(file.path());
    const std::vector<TokenId> ids = t.encode("Hello, [CLS] world");
    KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, t.vocab_size()), "loaded tokenizer");
    (void)t.decode(ids, SkipSpecial::kYes);
  } catch (const kappa::FormatError&) {
  } catch (const kappa::RangeError&) {
  }
  return 0;
}
