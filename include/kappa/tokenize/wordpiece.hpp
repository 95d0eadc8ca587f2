// kappa/tokenize/wordpiece.hpp - WordPiece (BERT), as Hugging Face
// tokenizers defines it: the BertNormalizer, the BertPreTokenizer, the
// WordPiece model (greedy longest-match-first with the "##" continuation
// prefix), the WordPiece decoder and the [CLS] ... [SEP] template; loaded
// from a tokenizer.json or from the plain vocab.txt + tokenizer_config.json.
//
// Encoding text (the paper's section 1, tokenization as an index sequence):
//   1. the text splits at the added tokens ([CLS], [SEP], [MASK], ... with
//      their lstrip / rstrip / single_word / normalized flags, as
//      kappa/tokenize/added_tokens.hpp describes); each piece between them
//      goes on alone;
//   2. BertNormalizer: clean_text removes NUL, U+FFFD and every character of
//      a category Cc, Cf, Co (controls, format, private use; not unassigned
//      code points, which HF keeps) except tab, LF and CR, then maps
//      White_Space to ' '; handle_chinese_chars puts a
//      space on both sides of every CJK ideograph (HF's ranges: U+4E00-9FFF,
//      3400-4DBF, 20000-2A6DF, 2A700-2B73F, 2B740-2B81F, 2B920-2CEAF,
//      F900-FAFF, 2F800-2FA1F); strip_accents (unset: as lowercase) takes
//      NFD and drops the nonspacing marks (Mn); lowercase maps each
//      character to its lowercase (Unicode's simple mapping, U+0130 to
//      "i" U+0307);
//   3. BertPreTokenizer: words are split at White_Space (which is dropped)
//      and every punctuation character (category P*, or ASCII 33-47, 58-64,
//      91-96, 123-126) is a word of its own;
//   4. WordPiece: a word of more than max_input_chars_per_word characters is
//      the unknown token; otherwise the longest vocabulary token that starts
//      the word, then repeatedly the longest "##" + piece that continues it;
//      if some position has none, the whole word is the unknown token;
//   5. the template puts the ids of [CLS] before and [SEP] after (encode's
//      add_special_tokens, on by default as in HF).
//
// Decoding: tokens (special tokens skipped on request), the first as it is,
// every later one without its "##" or else after a space; with cleanup, each
// piece then loses the space before . ? ! , and before the contractions
// (HF's cleanup: " ." -> ".", " n't" -> "n't", " 's" -> "'s", ...).
//
// Unicode data: kappa/tokenize/wordpiece_tables.hpp, generated from the
// Unicode Character Database 15.0 by tests/reference/gen_wordpiece_tables.py.
// Text that is not UTF-8: every invalid byte reads as U+FFFD (which
// clean_text then removes). Where kappa differs from HF on purpose: decode
// of an id outside the vocabulary is a RangeError (HF skips it), a vocabulary
// with a repeated token is a FormatError (HF keeps the last id). Not
// supported: other normalizers,
// pre-tokenizers and decoders (FormatError), a pair template; a
// tokenizer.json's truncation and padding are ignored (encode returns every
// id, as HF's encode with both off).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/added_tokens.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/unicode.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "kappa/tokenize/wordpiece_tables.hpp"

namespace kappa::tokenize {

/// The BertNormalizer's four switches, as tokenizer.json names them.
struct BertNormalizerOptions {
  bool clean_text = true;             ///< drop controls, U+FFFD, NUL; whitespace to ' '
  bool handle_chinese_chars = true;   ///< spaces around CJK ideographs
  std::optional<bool> strip_accents;  ///< NFD, then drop Mn; unset: follows lowercase
  bool lowercase = true;              ///< lowercase every character
};

namespace detail {

/// Per-code-point flags of the Basic Multilingual Plane, built once from
/// the tables: bits 0-1 the BERT category (1 punctuation, 2 other, 3 Mn),
/// then "has a decomposition", "nonzero combining class", "lowercase
/// differs", White_Space. Code points above U+FFFF go to the tables.
struct BertFlags {
  static constexpr std::uint8_t kDecomposes = 4, kCombining = 8, kLower = 16, kSpace = 32;
  std::array<std::uint8_t, 0x10000> flags{};
  BertFlags() {
    for (const BertRange& r : kBertCategories)
      for (std::uint32_t c = r.first; c <= r.last && c < 0x10000; ++c) flags[c] = r.value;
    for (const BertRange& r : kBertCombiningClasses)
      for (std::uint32_t c = r.first; c <= r.last && c < 0x10000; ++c) flags[c] |= kCombining;
    for (const BertDecomposition& d : kBertDecompositions)
      if (d.cp < 0x10000) flags[d.cp] |= kDecomposes;
    for (const auto& m : kBertLowercase)
      if (m[0] < 0x10000) flags[m[0]] |= kLower;
    for (char32_t c = 0; c < 0x10000; ++c)
      if (char_class(c) == CharClass::kSpace) flags[c] |= kSpace;
  }
};

/// The flags of BMP code point cp (precondition: cp < 0x10000).
inline std::uint8_t bmp_flags(char32_t cp) noexcept {
  static const BertFlags table;
  return table.flags[cp];
}

/// The value of the range holding cp in a sorted range table, else 0.
template <std::size_t N>
std::uint8_t range_value(const BertRange (&table)[N], char32_t cp) noexcept {
  const auto* it =
      std::upper_bound(std::begin(table), std::end(table), std::uint32_t{cp},
                       [](std::uint32_t c, const BertRange& r) { return c < r.first; });
  if (it == std::begin(table)) return 0;
  --it;
  return cp <= it->last ? it->value : std::uint8_t{0};
}

/// The BERT category of cp: 1 punctuation, 2 other (Cc Cf Co Cs), 3 Mn, 0
/// anything else.
inline std::uint8_t bert_category(char32_t cp) noexcept {
  if (cp < 0x10000) return static_cast<std::uint8_t>(bmp_flags(cp) & 3);
  return range_value(kBertCategories, cp);
}

/// The canonical combining class of cp.
inline std::uint8_t combining_class(char32_t cp) noexcept {
  if (cp < 0x300 || (cp < 0x10000 && (bmp_flags(cp) & BertFlags::kCombining) == 0)) return 0;
  return range_value(kBertCombiningClasses, cp);
}

/// Rust's char::is_whitespace (White_Space) plus tab, LF, CR.
inline bool bert_is_whitespace(char32_t cp) noexcept {
  if (cp < 128) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  if (cp < 0x10000) return (bmp_flags(cp) & BertFlags::kSpace) != 0;
  return char_class(cp) == CharClass::kSpace;
}

/// HF's is_control: a character of a category Cc, Cf, Co, Cs, except tab, LF, CR.
inline bool bert_is_control(char32_t cp) noexcept {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp < 128) return cp < 32 || cp == 127;
  return bert_category(cp) == 2;
}

/// HF's is_chinese_char (the CJK ideograph blocks).
inline bool bert_is_chinese(char32_t cp) noexcept {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/// BertPreTokenizer's punctuation: ASCII 33-47, 58-64, 91-96, 123-126 or P*.
inline bool bert_is_punctuation(char32_t cp) noexcept {
  if (cp < 128)
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
           (cp >= 123 && cp <= 126);
  return bert_category(cp) == 1;
}

/// Appends the full canonical decomposition of cp (Hangul arithmetically).
inline void nfd_append(std::u32string& out, char32_t cp) {
  constexpr char32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
  constexpr char32_t kHangulTCount = 28, kHangulNCount = 21 * 28, kHangulSCount = 19 * 21 * 28;
  if (cp >= kHangulS && cp < kHangulS + kHangulSCount) {
    const char32_t s = cp - kHangulS;
    out += static_cast<char32_t>(kHangulL + s / kHangulNCount);
    out += static_cast<char32_t>(kHangulV + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount != 0) out += static_cast<char32_t>(kHangulT + s % kHangulTCount);
    return;
  }
  if (cp < 0xC0 || (cp < 0x10000 && (bmp_flags(cp) & BertFlags::kDecomposes) == 0)) {
    out += cp;
    return;
  }
  const auto* end = std::end(kBertDecompositions);
  const auto* it =
      std::lower_bound(std::begin(kBertDecompositions), end, std::uint32_t{cp},
                       [](const BertDecomposition& d, std::uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out += cp;
    return;
  }
  for (std::size_t k = 0; k < it->length; ++k)
    out += static_cast<char32_t>(kBertDecompositionPool[it->offset + k]);
}

/// Appends the lowercase of cp (Rust's char::to_lowercase).
inline void lowercase_append(std::u32string& out, char32_t cp) {
  if (cp < 128) {
    out += (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return;
  }
  if (cp < 0x10000 && (bmp_flags(cp) & BertFlags::kLower) == 0) {
    out += cp;
    return;
  }
  if (cp == 0x130) {
    out += U'i';
    out += char32_t{0x307};
    return;
  }
  const auto* end = std::end(kBertLowercase);
  const auto* it =
      std::lower_bound(std::begin(kBertLowercase), end, std::uint32_t{cp},
                       [](const std::uint32_t(&m)[2], std::uint32_t c) { return m[0] < c; });
  out += (it != end && (*it)[0] == cp) ? static_cast<char32_t>((*it)[1]) : cp;
}

/// Hash and equality that look up a std::string key by a string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

}  // namespace detail

/// The BertNormalizer applied to UTF-8 `text` (invalid bytes read as
/// U+FFFD); returns UTF-8.
inline std::string bert_normalize(std::string_view text, const BertNormalizerOptions& options) {
  std::u32string a;
  a.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    i += c.length;
    const char32_t cp = c.valid ? c.code_point : char32_t{0xFFFD};
    if (options.clean_text) {
      if (cp == 0 || cp == 0xFFFD || detail::bert_is_control(cp)) continue;
      if (detail::bert_is_whitespace(cp)) {
        a += U' ';
        continue;
      }
    }
    if (options.handle_chinese_chars && detail::bert_is_chinese(cp)) {
      a += U' ';
      a += cp;
      a += U' ';
    } else {
      a += cp;
    }
  }
  if (options.strip_accents.value_or(options.lowercase)) {
    std::u32string d;
    d.reserve(a.size());
    for (const char32_t cp : a) detail::nfd_append(d, cp);
    // Canonical ordering: stable sort of every run of nonzero combining classes.
    for (std::size_t i = 0; i < d.size();) {
      if (detail::combining_class(d[i]) == 0) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < d.size() && detail::combining_class(d[j]) != 0) ++j;
      std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i),
                       d.begin() + static_cast<std::ptrdiff_t>(j), [](char32_t x, char32_t y) {
                         return detail::combining_class(x) < detail::combining_class(y);
                       });
      i = j;
    }
    a.clear();
    for (const char32_t cp : d)
      if (cp < 0x300 || detail::bert_category(cp) != 3) a += cp;
  }
  if (options.lowercase) {
    std::u32string l;
    l.reserve(a.size());
    for (const char32_t cp : a) detail::lowercase_append(l, cp);
    a = std::move(l);
  }
  std::string out;
  out.reserve(a.size());
  for (const char32_t cp : a) append_utf8(out, cp);
  return out;
}

/// BertPreTokenizer: calls f(word) for each word of `text` (UTF-8): split at
/// White_Space (dropped), each punctuation character a word of its own.
template <class F>
void bert_pretokenize(std::string_view text, F&& f) {
  std::size_t start = 0, i = 0;
  while (i < text.size()) {
    const Utf8Char c = decode_utf8(text, i);
    const char32_t cp = c.valid ? c.code_point : char32_t{0xFFFD};
    const bool space = detail::bert_is_whitespace(cp);
    if (space || detail::bert_is_punctuation(cp)) {
      if (i > start) f(text.substr(start, i - start));
      if (!space) f(text.substr(i, c.length));
      start = i + c.length;
    }
    i += c.length;
  }
  if (i > start) f(text.substr(start, i - start));
}

/// An added token of a tokenizer.json (or a special token of vocab.txt's
/// tokenizer_config.json), found in text with its flags as
/// kappa/tokenize/added_tokens.hpp describes.
using WordPieceAddedToken = AddedToken;

/// Everything about a WordPiece tokenizer except its vocabulary.
struct WordPieceConfig {
  std::optional<BertNormalizerOptions> normalizer = BertNormalizerOptions{};  ///< none: as is
  bool bert_pre_tokenizer = true;   ///< false: each piece between added tokens is one word
  std::string unk_token = "[UNK]";  ///< the unknown token (must be in the vocabulary)
  std::string continuing_subword_prefix = "##";   ///< the model's continuation prefix
  std::size_t max_input_chars_per_word = 100;     ///< longer words are the unknown token
  std::vector<WordPieceAddedToken> added_tokens;  ///< found as added_tokens.hpp says
  std::vector<TokenId> template_prefix;           ///< ids before a sequence ([CLS])
  std::vector<TokenId> template_suffix;           ///< ids after it ([SEP])
  std::optional<std::string> decoder_prefix = std::string("##");  ///< none: join with ' '
  bool decoder_cleanup = true;  ///< the WordPiece decoder's cleanup
};

/// WordPiece tokenizer (BERT). Satisfies kappa::tokenize::Tokenizer.
class WordPieceTokenizer {
 public:
  /// From the tokens in id order (id k is tokens[k]) and the configuration.
  /// \throws FormatError (naming `source`) for a repeated token, an unknown
  /// token outside the vocabulary or an added token whose id is taken by
  /// another token.
  WordPieceTokenizer(std::vector<std::string> tokens, WordPieceConfig config,
                     const std::string& source = "WordPiece vocabulary")
      : tokens_(std::move(tokens)), config_(std::move(config)), model_size_(tokens_.size()) {
    ids_.reserve(tokens_.size());
    for (std::size_t k = 0; k < tokens_.size(); ++k) {
      if (!ids_.emplace(tokens_[k], static_cast<TokenId>(k)).second)
        throw FormatError("kappa: " + source + ": token " + kappa::quoted(tokens_[k]) +
                          " appears twice (ids " + std::to_string(ids_.find(tokens_[k])->second) +
                          " and " + std::to_string(k) + ")");
      max_token_bytes_ = std::max(max_token_bytes_, tokens_[k].size());
    }
    for (const WordPieceAddedToken& a : config_.added_tokens) {
      if (a.content.empty())
        throw FormatError("kappa: " + source + ": added token " + std::to_string(a.id) +
                          " is empty");
      const auto id = static_cast<std::size_t>(a.id);
      if (a.id < 0 || id > tokens_.size())
        throw FormatError("kappa: " + source + ": added token " + kappa::quoted(a.content) +
                          " has id " + std::to_string(a.id) + ", not in 0.." +
                          std::to_string(tokens_.size()));
      if (id == tokens_.size()) {
        tokens_.push_back(a.content);
        ids_.emplace(a.content, a.id);
      } else if (tokens_[id] != a.content) {
        throw FormatError("kappa: " + source + ": added token " + kappa::quoted(a.content) +
                          " has id " + std::to_string(a.id) + ", which is the token " +
                          kappa::quoted(tokens_[id]));
      }
      if (a.special) special_ids_.push_back(a.id);
      if (!a.normalized)
        raw_added_.add(a, a.content);
      else
        normalized_added_.add(
            a, config_.normalizer ? bert_normalize(a.content, *config_.normalizer) : a.content);
    }
    std::sort(special_ids_.begin(), special_ids_.end());
    const auto unk = ids_.find(config_.unk_token);
    if (unk == ids_.end())
      throw FormatError("kappa: " + source + ": the unknown token " +
                        kappa::quoted(config_.unk_token) + " is not in the vocabulary");
    unk_id_ = unk->second;
    for (const TokenId id : config_.template_prefix) check_template_id(id, source);
    for (const TokenId id : config_.template_suffix) check_template_id(id, source);
  }

  /// Loads a Hugging Face tokenizer.json whose model is WordPiece.
  /// \throws FormatError naming the file and the key.
  static WordPieceTokenizer from_tokenizer_json(const std::string& path) {
    return from_json(read_json_file(path), path);
  }

  /// As from_tokenizer_json() on a parsed document; `path` names it in
  /// messages.
  static WordPieceTokenizer from_json(const nlohmann::json& j, const std::string& path) {
    // The typed field readers every tokenizer.json loader shares (core/json.hpp).
    const JsonFields fields(path);
    const auto fail = [&](const std::string& key, const std::string& what) {
      fields.fail(key, what);
    };
    if (!j.is_object()) fail("(top level)", "not a JSON object");
    const auto get = [](const nlohmann::json& o, const char* k) { return JsonFields::get(o, k); };
    const auto type_of = [&](const nlohmann::json& o, const std::string& key) {
      return fields.type_of(o, key);
    };
    const auto flag = [&](const nlohmann::json& o, const char* k, const std::string& key,
                          bool dflt) { return fields.flag(o, k, key, dflt); };
    const auto str = [&](const nlohmann::json& o, const char* k, const std::string& key,
                         const std::string& dflt) { return fields.str(o, k, key, dflt); };
    WordPieceConfig c;
    // model
    const nlohmann::json* model = get(j, "model");
    if (model == nullptr) fail("model", "missing");
    if (const std::string t = type_of(*model, "model"); t != "WordPiece")
      fail("model.type", kappa::quoted(t) + " is not WordPiece");
    c.unk_token = str(*model, "unk_token", "model", "[UNK]");
    c.continuing_subword_prefix = str(*model, "continuing_subword_prefix", "model", "##");
    if (const nlohmann::json* m = get(*model, "max_input_chars_per_word")) {
      if (!m->is_number_unsigned()) fail("model.max_input_chars_per_word", "not an integer >= 0");
      c.max_input_chars_per_word = m->get<std::size_t>();
    }
    const nlohmann::json* vocab = get(*model, "vocab");
    if (vocab == nullptr || !vocab->is_object()) fail("model.vocab", "missing or not an object");
    std::vector<std::string> tokens(vocab->size());
    std::vector<bool> seen(vocab->size(), false);
    for (const auto& [token, id] : vocab->items()) {
      if (!id.is_number_integer() || id.get<long long>() < 0 ||
          id.get<long long>() >= static_cast<long long>(tokens.size()))
        fail("model.vocab." + kappa::quoted(token),
             "the id must be an integer in 0.." + std::to_string(tokens.size() - 1));
      const auto k = id.get<std::size_t>();
      if (seen[k])
        fail("model.vocab." + kappa::quoted(token), "id " + std::to_string(k) + " is taken twice");
      seen[k] = true;
      tokens[k] = token;
    }
    // normalizer
    if (const nlohmann::json* n = get(j, "normalizer")) {
      if (const std::string t = type_of(*n, "normalizer"); t != "BertNormalizer")
        fail("normalizer.type", kappa::quoted(t) + " is not supported (BertNormalizer or null)");
      BertNormalizerOptions o;
      o.clean_text = flag(*n, "clean_text", "normalizer", true);
      o.handle_chinese_chars = flag(*n, "handle_chinese_chars", "normalizer", true);
      if (get(*n, "strip_accents") != nullptr)
        o.strip_accents = flag(*n, "strip_accents", "normalizer", false);
      o.lowercase = flag(*n, "lowercase", "normalizer", true);
      c.normalizer = o;
    } else {
      c.normalizer.reset();
    }
    // pre-tokenizer
    if (const nlohmann::json* p = get(j, "pre_tokenizer")) {
      if (const std::string t = type_of(*p, "pre_tokenizer"); t != "BertPreTokenizer")
        fail("pre_tokenizer.type",
             kappa::quoted(t) + " is not supported (BertPreTokenizer or null)");
    } else {
      c.bert_pre_tokenizer = false;
    }
    // added tokens
    if (const nlohmann::json* added = get(j, "added_tokens")) {
      if (!added->is_array()) fail("added_tokens", "not an array");
      for (std::size_t k = 0; k < added->size(); ++k) {
        const nlohmann::json& a = (*added)[k];
        const std::string key = "added_tokens[" + std::to_string(k) + "]";
        if (!a.is_object()) fail(key, "not an object");
        const nlohmann::json* id = get(a, "id");
        if (id == nullptr || !id->is_number_integer()) fail(key + ".id", "not an integer");
        WordPieceAddedToken t;
        t.content = str(a, "content", key, "");
        if (id->get<long long>() < 0 || id->get<long long>() > (1LL << 30))
          fail(key + ".id", "out of range");
        t.id = static_cast<TokenId>(id->get<long long>());
        read_added_token_flags(t, [&](const char* name, bool d) { return flag(a, name, key, d); });
        c.added_tokens.push_back(std::move(t));
      }
    }
    std::sort(c.added_tokens.begin(), c.added_tokens.end(),
              [](const auto& x, const auto& y) { return x.id < y.id; });
    // post-processor
    if (const nlohmann::json* p = get(j, "post_processor")) {
      const std::string t = type_of(*p, "post_processor");
      if (t == "BertProcessing") {
        const auto pair_id = [&](const char* k) -> TokenId {
          const nlohmann::json* v = get(*p, k);
          if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[1].is_number_integer())
            fail(std::string("post_processor.") + k, "expected [token, id]");
          return static_cast<TokenId>((*v)[1].get<long long>());
        };
        c.template_prefix = {pair_id("cls")};
        c.template_suffix = {pair_id("sep")};
      } else if (t == "TemplateProcessing") {
        const nlohmann::json* single = get(*p, "single");
        const nlohmann::json* specials = get(*p, "special_tokens");
        if (single == nullptr || !single->is_array())
          fail("post_processor.single", "missing or not an array");
        bool after = false, has_sequence = false;
        for (std::size_t k = 0; k < single->size(); ++k) {
          const nlohmann::json& item = (*single)[k];
          const std::string key = "post_processor.single[" + std::to_string(k) + "]";
          if (item.is_object() && item.contains("Sequence")) {
            if (has_sequence) fail(key, "a second Sequence is not supported");
            has_sequence = after = true;
            continue;
          }
          if (!item.is_object() || !item.contains("SpecialToken") ||
              !item["SpecialToken"].is_object() || !item["SpecialToken"].contains("id") ||
              !item["SpecialToken"]["id"].is_string())
            fail(key, "expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
          const std::string name = item["SpecialToken"]["id"].get<std::string>();
          if (specials == nullptr || !specials->is_object() || !specials->contains(name) ||
              !(*specials)[name].is_object() || !(*specials)[name].contains("ids") ||
              !(*specials)[name]["ids"].is_array())
            fail("post_processor.special_tokens." + kappa::quoted(name), "missing or without ids");
          for (const nlohmann::json& id : (*specials)[name]["ids"]) {
            if (!id.is_number_integer())
              fail("post_processor.special_tokens." + kappa::quoted(name) + ".ids",
                   "not an integer");
            (after ? c.template_suffix : c.template_prefix)
                .push_back(static_cast<TokenId>(id.get<long long>()));
          }
        }
        if (!has_sequence) fail("post_processor.single", "has no Sequence");
      } else {
        fail("post_processor.type",
             kappa::quoted(t) + " is not supported (TemplateProcessing, BertProcessing or null)");
      }
    }
    // decoder
    if (const nlohmann::json* d = get(j, "decoder")) {
      if (const std::string t = type_of(*d, "decoder"); t != "WordPiece")
        fail("decoder.type", kappa::quoted(t) + " is not supported (WordPiece or null)");
      c.decoder_prefix = str(*d, "prefix", "decoder", "##");
      c.decoder_cleanup = flag(*d, "cleanup", "decoder", true);
    } else {
      c.decoder_prefix.reset();
    }
    return WordPieceTokenizer(std::move(tokens), std::move(c), path);
  }

  /// Loads BERT's plain layout: `vocab_path` (one token per line, id = line
  /// number from 0, trailing whitespace removed) and, if `config_path` is not
  /// empty, tokenizer_config.json (do_lower_case, strip_accents,
  /// tokenize_chinese_chars, unk/sep/pad/cls/mask tokens), configured as
  /// transformers' BertTokenizerFast converts it.
  /// \throws FormatError naming the file and the key or line.
  static WordPieceTokenizer from_vocab_txt(const std::string& vocab_path,
                                           const std::string& config_path = "") {
    const std::string text = read_regular_file(vocab_path);
    std::vector<std::string> tokens;
    for (std::size_t i = 0; i < text.size();) {
      std::size_t e = text.find('\n', i);
      if (e == std::string::npos) e = text.size();
      std::string_view line(text.data() + i, e - i);
      // Rust's trim_end: White_Space at the end.
      while (!line.empty()) {
        std::size_t b = line.size() - 1;
        while (b > 0 && (static_cast<unsigned char>(line[b]) & 0xC0) == 0x80) --b;
        const Utf8Char c = decode_utf8(line, b);
        if (!c.valid || !detail::bert_is_whitespace(c.code_point)) break;
        line = line.substr(0, b);
      }
      tokens.emplace_back(line);
      i = e + 1;
    }
    WordPieceConfig c;
    BertNormalizerOptions o;
    std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    std::string cls = "[CLS]", sep = "[SEP]";
    if (!config_path.empty()) {
      const nlohmann::json j = read_json_file(config_path);
      const auto fail = [&](const std::string& key, const std::string& what) -> void {
        throw FormatError("kappa: " + config_path + ": " + key + ": " + what);
      };
      if (!j.is_object()) fail("(top level)", "not a JSON object");
      const auto flag = [&](const char* k, bool dflt) -> bool {
        const auto it = j.find(k);
        if (it == j.end() || it->is_null()) return dflt;
        if (!it->is_boolean()) fail(k, "not true or false");
        return it->get<bool>();
      };
      o.lowercase = flag("do_lower_case", true);
      o.handle_chinese_chars = flag("tokenize_chinese_chars", true);
      if (const auto it = j.find("strip_accents"); it != j.end() && !it->is_null())
        o.strip_accents = flag("strip_accents", false);
      const auto special = [&](const char* k, std::string& out) {
        const auto it = j.find(k);
        if (it == j.end() || it->is_null()) return;
        if (it->is_string()) {
          out = it->get<std::string>();
        } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
          out = (*it)["content"].get<std::string>();
        } else {
          fail(k, "not a string or {\"content\": ...}");
        }
      };
      special("pad_token", specials[0]);
      special("unk_token", specials[1]);
      special("cls_token", specials[2]);
      special("sep_token", specials[3]);
      special("mask_token", specials[4]);
      c.unk_token = specials[1];
      cls = specials[2];
      sep = specials[3];
    }
    c.normalizer = o;
    std::unordered_map<std::string, TokenId> ids;
    for (std::size_t k = 0; k < tokens.size(); ++k) ids.emplace(tokens[k], static_cast<TokenId>(k));
    for (const std::string& s : specials) {
      const auto it = ids.find(s);
      if (it == ids.end()) continue;  // transformers would append it; not in BERT's files
      if (std::none_of(c.added_tokens.begin(), c.added_tokens.end(),
                       [&](const WordPieceAddedToken& a) { return a.content == s; }))
        c.added_tokens.push_back({s, it->second, true});
    }
    const auto cls_it = ids.find(cls);
    const auto sep_it = ids.find(sep);
    if (cls_it == ids.end() || sep_it == ids.end())
      throw FormatError("kappa: " + vocab_path + ": the template tokens " + kappa::quoted(cls) +
                        " and " + kappa::quoted(sep) + " must be in the vocabulary");
    c.template_prefix = {cls_it->second};
    c.template_suffix = {sep_it->second};
    return WordPieceTokenizer(std::move(tokens), std::move(c), vocab_path);
  }

  /// Loads `dir`/tokenizer.json if it exists, else `dir`/vocab.txt with
  /// `dir`/tokenizer_config.json (if it exists).
  static WordPieceTokenizer from_directory(const std::string& dir) {
    namespace fs = std::filesystem;
    const fs::path d(dir);
    std::error_code ec;
    if (fs::exists(d / "tokenizer.json", ec))
      return from_tokenizer_json((d / "tokenizer.json").string());
    const fs::path config = d / "tokenizer_config.json";
    return from_vocab_txt((d / "vocab.txt").string(),
                          fs::exists(config, ec) ? config.string() : std::string());
  }

  /// The ids of `text` (UTF-8), with the template's [CLS] ... [SEP] unless
  /// `add` is kNo (HF's add_special_tokens); the added tokens' text is
  /// recognized unless `specials` is kAsText (then it is plain text).
  std::vector<TokenId> encode(std::string_view text, AddSpecial add,
                              SpecialTokens specials = SpecialTokens::kRecognize) const {
    const bool add_special_tokens = add == AddSpecial::kYes;
    std::vector<TokenId> out;
    if (add_special_tokens) out = config_.template_prefix;
    if (specials == SpecialTokens::kAsText) {
      encode_piece(text, out);
    } else {
      // added_tokens.hpp's two passes: raw text, then normalized pieces.
      const auto token = [&](TokenId id) { out.push_back(id); };
      raw_added_.split(
          text,
          [&](std::size_t b, std::size_t e) {
            const std::string_view piece = text.substr(b, e - b);
            if (normalized_added_.empty()) {
              encode_piece(piece, out);
              return;
            }
            const std::string n = config_.normalizer ? bert_normalize(piece, *config_.normalizer)
                                                     : std::string(piece);
            normalized_added_.split(
                n,
                [&](std::size_t nb, std::size_t ne) {
                  encode_normalized(std::string_view(n).substr(nb, ne - nb), out);
                },
                token);
          },
          token);
    }
    if (add_special_tokens)
      out.insert(out.end(), config_.template_suffix.begin(), config_.template_suffix.end());
    return out;
  }

  /// encode(text, AddSpecial::kYes).
  std::vector<TokenId> encode(std::string_view text) const {
    return encode(text, AddSpecial::kYes);
  }

  /// The text of `ids` by the WordPiece decoder (HF's decode); special tokens
  /// left out when `skip_special_tokens`. RangeError for an id outside the
  /// vocabulary.
  std::string decode(std::span<const TokenId> ids, SkipSpecial skip) const {
    const bool skip_special_tokens = skip == SkipSpecial::kYes;
    std::string out;
    std::size_t n = 0;
    for (const TokenId id : ids) {
      require_index("token id", id, static_cast<long long>(tokens_.size()), "a vocabulary");
      if (skip_special_tokens && is_special(id)) continue;
      const std::string& t = tokens_[static_cast<std::size_t>(id)];
      if (!config_.decoder_prefix) {
        if (n++ > 0) out += ' ';
        out += t;
        continue;
      }
      std::string piece;
      const std::string& prefix = *config_.decoder_prefix;
      if (n++ == 0) {
        piece = t;
      } else if (t.starts_with(prefix)) {
        piece = t.substr(prefix.size());
      } else {
        piece.reserve(t.size() + 1);
        piece += ' ';
        piece += t;
      }
      if (config_.decoder_cleanup) cleanup(piece);
      out += piece;
    }
    return out;
  }

  /// decode(ids, SkipSpecial::kNo).
  std::string decode(std::span<const TokenId> ids) const { return decode(ids, SkipSpecial::kNo); }

  /// N_T: the number of tokens (the vocabulary and the added tokens).
  std::size_t vocab_size() const noexcept { return tokens_.size(); }

  /// The token of `id`; RangeError if it is not in the vocabulary.
  std::string token(TokenId id) const {
    require_index("token id", id, static_cast<long long>(tokens_.size()), "a vocabulary");
    return tokens_[static_cast<std::size_t>(id)];
  }

  /// The id of `token`, if it is one.
  std::optional<TokenId> find(std::string_view token) const {
    const auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

  /// HF's names for find and token.
  std::optional<TokenId> token_to_id(std::string_view t) const { return find(t); }
  /// As token(id).
  std::string id_to_token(TokenId id) const { return token(id); }

  /// The id of the unknown token.
  TokenId unk_id() const noexcept { return unk_id_; }
  /// True if `id` is a special added token.
  bool is_special(TokenId id) const noexcept {
    return std::binary_search(special_ids_.begin(), special_ids_.end(), id);
  }
  /// The configuration (normalizer, model options, template, decoder).
  const WordPieceConfig& config() const noexcept { return config_; }

  /// The WordPiece model on one pre-tokenized `word`: appends its ids to `out`.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const {
    if (word.empty()) return;
    if (count_chars(word) > config_.max_input_chars_per_word) {
      out.push_back(unk_id_);
      return;
    }
    const std::size_t mark = out.size();
    std::string buf = config_.continuing_subword_prefix;
    const std::size_t plen = buf.size();
    std::size_t start = 0;
    while (start < word.size()) {
      const std::size_t room =
          max_token_bytes_ - (start > 0 ? std::min(plen, max_token_bytes_) : 0);
      std::size_t end = std::min(word.size(), start + room);
      while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
      bool found = false;
      while (end > start) {
        const std::string_view sub = word.substr(start, end - start);
        decltype(ids_)::const_iterator it;
        if (start > 0) {
          buf.resize(plen);
          buf.append(sub);
          it = ids_.find(std::string_view(buf));
        } else {
          it = ids_.find(sub);
        }
        // Added tokens above the model's vocabulary are not the model's.
        if (it != ids_.end() && static_cast<std::size_t>(it->second) < model_size_) {
          out.push_back(it->second);
          found = true;
          break;
        }
        --end;
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
      }
      if (!found) {
        out.resize(mark);
        out.push_back(unk_id_);
        return;
      }
      start = end;
    }
  }

 private:
  void check_template_id(TokenId id, const std::string& source) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size())
      throw FormatError("kappa: " + source + ": post_processor: template id " + std::to_string(id) +
                        " is not in the vocabulary of " + std::to_string(tokens_.size()));
  }

  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
    if (piece.empty()) return;
    std::string normalized;
    if (config_.normalizer) {
      normalized = bert_normalize(piece, *config_.normalizer);
      piece = normalized;
    }
    encode_normalized(piece, out);
  }

  // Normalized text: the pre-tokenizer and the model.
  void encode_normalized(std::string_view piece, std::vector<TokenId>& out) const {
    if (piece.empty()) return;
    if (config_.bert_pre_tokenizer) {
      bert_pretokenize(piece, [&](std::string_view w) { encode_word(w, out); });
    } else {
      encode_word(piece, out);
    }
  }

  // HF's WordPiece decoder cleanup, on one piece.
  static void cleanup(std::string& s) {
    static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) {
      if (s.find(from) == std::string::npos) continue;
      std::string r;
      std::size_t i = 0;
      for (std::size_t p; (p = s.find(from, i)) != std::string::npos; i = p + from.size()) {
        r.append(s, i, p - i);
        r.append(to);
      }
      r.append(s, i);
      s = std::move(r);
    }
  }

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, TokenId, detail::StringHash, std::equal_to<>> ids_;
  WordPieceConfig config_;
  TokenId unk_id_ = 0;
  std::vector<TokenId> special_ids_;
  std::size_t max_token_bytes_ = 0;
  std::size_t model_size_ = 0;          // the model's vocabulary: ids below it
  AddedTokenMatcher raw_added_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_added_;  // the others, by their normalized content
};

}  // namespace kappa::tokenize
