// Fuzz target: SentencePiece tokenizer.model files and text,
// kappa/tokenize/sentencepiece_model.hpp.
//
// Input: the first byte picks what the rest is:
//   0  a tokenizer.model (protobuf), read through the path API;
//   1  text for tests/data/tokenize/sentencepiece/unigram_bytes.model
//      (Unigram, identity, byte fallback, spaces kept);
//   2  text for bpe_llama.model (BPE, byte fallback) through HfTokenizer;
//   3  text for unigram_user.model and unigram_nfkc.model (charsmaps,
//      user-defined pieces, unknowns).
// Properties:
//   * reading a model succeeds or throws FormatError, nothing else; a model
//     that loads converts (to_unigram / HfTokenizer::from_sentencepiece) or throws
//     FormatError, and then encodes in range and decodes its ids;
//   * encode never throws; every id is in [0, vocab size); decode and
//     SentencePieceModel::decode never throw and give valid UTF-8, and agree
//     for Unigram models;
//   * with byte fallback and spaces kept (1, 2): decode(encode(x)) is x with
//     invalid UTF-8 as U+FFFD and "▁" as " " (sentencepiece's round trip).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/sentencepiece_model.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace {

namespace tk = kappa::tokenize;
using kappa::TokenId;

const tk::SentencePieceModel& model(const char* name) {
  static std::deque<std::pair<std::string, tk::SentencePieceModel>> cache;  // stable references
  for (const auto& [n, m] : cache)
    if (n == name) return m;
  cache.emplace_back(name, tk::SentencePieceModel::read(std::string(KAPPA_FUZZ_CORPUS_DIR) +
                                                        "/../sentencepiece/" + name + ".model"));
  return cache.back().second;
}

// x as sentencepiece round-trips it with byte fallback and spaces kept.
std::string expected_round_trip(std::string_view x) {
  const std::string valid = tk::SentencePieceModel::replace_invalid_utf8(x);
  std::string out;
  for (std::size_t i = 0; i < valid.size();) {
    if (valid.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += valid[i++];
    }
  }
  return out;
}

void check_unigram(const tk::SentencePieceModel& m, std::string_view text, bool round_trip) {
  static std::deque<std::pair<const tk::SentencePieceModel*, tk::UnigramTokenizer>> toks;
  const tk::UnigramTokenizer* t = nullptr;
  for (const auto& [p, tok] : toks)
    if (p == &m) t = &tok;
  if (t == nullptr) t = &toks.emplace_back(&m, m.to_unigram()).second;
  const std::vector<TokenId> ids = t->encode(text, tk::AddSpecial::kNo);
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, m.pieces.size()), kappa::fuzz::show(text));
  const std::string decoded = t->decode(ids);
  KAPPA_FUZZ_CHECK(decoded == m.decode(ids), kappa::fuzz::show(text));
  KAPPA_FUZZ_CHECK(tk::is_valid_utf8(decoded), kappa::fuzz::show(text));
  if (round_trip)
    KAPPA_FUZZ_CHECK(decoded == expected_round_trip(text),
                     kappa::fuzz::show(text) + " decodes to " + kappa::fuzz::show(decoded));
}

void check_bpe(std::string_view text) {
  const tk::SentencePieceModel& m = model("bpe_llama");
  static const tk::HfTokenizer t = tk::HfTokenizer::from_sentencepiece(m);
  const std::string valid = tk::SentencePieceModel::replace_invalid_utf8(text);
  const std::vector<TokenId> ids = t.encode(valid, tk::AddSpecial::kNo, tk::SpecialTokens::kAsText);
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, m.pieces.size()), kappa::fuzz::show(text));
  const std::string decoded = m.decode(ids);
  KAPPA_FUZZ_CHECK(decoded == expected_round_trip(text),
                   kappa::fuzz::show(text) + " decodes to " + kappa::fuzz::show(decoded));
  (void)t.decode(ids);
}

void check_file(std::string_view bytes) {
  static const kappa::fuzz::MemFile file("sentencepiece_model");
  file.assign(bytes);
  try {
    const tk::SentencePieceModel m = tk::SentencePieceModel::read(file.path());
    KAPPA_FUZZ_CHECK(!m.pieces.empty(), "a model without pieces loaded");
    const std::string text = "Hello <s> w\xC3\xB6rld \xF0\x9F\x98\x80  \xFF end";
    if (m.trainer_spec.model_type == tk::SentencePieceModelType::kUnigram) {
      const tk::UnigramTokenizer t = m.to_unigram();
      const std::vector<TokenId> ids = t.encode(text, tk::AddSpecial::kNo);
      KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, m.pieces.size()), "loaded unigram");
      KAPPA_FUZZ_CHECK(t.decode(ids) == m.decode(ids), "loaded unigram decode");
    } else if (m.trainer_spec.model_type == tk::SentencePieceModelType::kBpe) {
      const tk::HfTokenizer t = tk::HfTokenizer::from_sentencepiece(m);
      const std::vector<TokenId> ids =
          t.encode(text, tk::AddSpecial::kNo, tk::SpecialTokens::kAsText);
      KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, t.vocab_size()), "loaded bpe");
      (void)t.decode(ids);
    }
  } catch (const kappa::FormatError&) {
  } catch (const kappa::RangeError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in = kappa::fuzz::as_text(data, size);
  switch (kappa::fuzz::take_byte(in) % 4) {
    case 0:
      check_file(in);
      break;
    case 1:
      check_unigram(model("unigram_bytes"), in, true);
      break;
    case 2:
      check_bpe(in);
      break;
    default:
      check_unigram(model("unigram_user"), in, false);
      check_unigram(model("unigram_nfkc"), in, false);
  }
  return 0;
}
