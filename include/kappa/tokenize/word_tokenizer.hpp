// kappa/tokenize/word_tokenizer.hpp - word tokenizer (the paper's Figure 2):
// text splits into words (maximal runs of letters, marks, numbers and '_'),
// single punctuation/symbol characters, and user special tokens; whitespace
// separates and is dropped.
//
// Vocabulary (ids in this order): the unknown token (id 0), the user's
// special tokens, then the corpus words of frequency >= min_frequency, most
// frequent first (ties in byte order), at most max_size tokens in all.
// encode maps a word outside the vocabulary to the unknown token; decode
// joins tokens with single spaces (the original whitespace is not kept).
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/formats.hpp"
#include "kappa/tokenize/unicode.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace kappa::tokenize {

/// How a WordTokenizer's vocabulary is built from a corpus.
struct WordVocabularyOptions {
  std::size_t min_frequency = 1;      ///< keep words seen at least this often
  std::size_t max_size = 0;           ///< at most this many tokens in all (0: no limit)
  std::string unknown = "<unk>";      ///< the unknown token (id 0)
  std::vector<std::string> specials;  ///< user special tokens (ids 1..), matched verbatim in text
};

/// Whitespace-and-punctuation word tokenizer with a frequency vocabulary.
class WordTokenizer {
 public:
  /// Builds the vocabulary from a corpus. Throws std::invalid_argument if a
  /// special token is empty, duplicated or equal to the unknown token, or if
  /// max_size leaves no room for them.
  WordTokenizer(std::string_view corpus, WordVocabularyOptions options)
      : options_(std::move(options)) {
    add(options_.unknown);
    for (const std::string& s : options_.specials) {
      if (s.empty() || !add(s))
        throw std::invalid_argument("kappa: WordTokenizer: bad or duplicate special token " +
                                    kappa::quoted(s));
    }
    if (options_.max_size != 0 && options_.max_size < tokens_.size())
      throw std::invalid_argument("kappa: WordTokenizer: max_size " +
                                  std::to_string(options_.max_size) + " is smaller than the " +
                                  std::to_string(tokens_.size()) + " special tokens");
    std::unordered_map<std::string, std::size_t> counts;
    split_words(corpus, [&](std::string_view w, bool special) {
      if (!special) ++counts[std::string(w)];
    });
    std::vector<std::pair<std::string, std::size_t>> ranked(counts.begin(), counts.end());
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    for (const auto& [w, n] : ranked) {
      if (n < options_.min_frequency) break;
      if (options_.max_size != 0 && tokens_.size() >= options_.max_size) break;
      add(w);
    }
  }

  /// The ids of the words, punctuation and special tokens of text.
  std::vector<TokenId> encode(std::string_view text) const {
    std::vector<TokenId> out;
    split_words(text, [&](std::string_view w, bool) {
      const auto it = ids_.find(std::string(w));
      out.push_back(it == ids_.end() ? TokenId{0} : it->second);
    });
    return out;
  }

  /// The tokens joined by single spaces; RangeError naming a bad id.
  std::string decode(std::span<const TokenId> ids) const {
    std::string out;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (k > 0) out += ' ';
      out += token(ids[k]);
    }
    return out;
  }

  std::size_t vocab_size() const noexcept { return tokens_.size(); }
  std::string token(TokenId id) const {
    require_index("token id", id, static_cast<long long>(tokens_.size()), "a vocabulary");
    return tokens_[static_cast<std::size_t>(id)];
  }
  std::optional<TokenId> find(std::string_view token) const {
    const auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  /// Id of the unknown token (0).
  static constexpr TokenId unknown_id() noexcept { return 0; }

  /// Calls f(piece, is_special) for each word, punctuation character and
  /// special token of text, in order.
  template <class F>
  void split_words(std::string_view text, F&& f) const {
    std::size_t i = 0;
    while (i < text.size()) {
      if (const std::size_t n = special_at(text, i)) {
        f(text.substr(i, n), true);
        i += n;
        continue;
      }
      const Utf8Char c = decode_utf8(text, i);
      const CharClass k = c.valid ? char_class(c.code_point) : CharClass::kOther;
      if (k == CharClass::kSpace) {
        i += c.length;
      } else if (is_word_char(c, k)) {
        std::size_t j = i + c.length;
        while (j < text.size() && special_at(text, j) == 0) {
          const Utf8Char d = decode_utf8(text, j);
          if (!is_word_char(d, d.valid ? char_class(d.code_point) : CharClass::kOther)) break;
          j += d.length;
        }
        f(text.substr(i, j - i), false);
        i = j;
      } else {
        f(text.substr(i, c.length), false);
        i += c.length;
      }
    }
  }

 private:
  static bool is_word_char(const Utf8Char& c, CharClass k) {
    if (!c.valid) return false;
    return c.code_point == '_' || (k != CharClass::kOther && k != CharClass::kSpace);
  }
  std::size_t special_at(std::string_view text, std::size_t i) const {
    std::size_t best = 0;
    for (const std::string& s : options_.specials)
      if (s.size() > best && text.substr(i).starts_with(s)) best = s.size();
    return best;
  }
  bool add(const std::string& t) {
    if (!ids_.emplace(t, static_cast<TokenId>(tokens_.size())).second) return false;
    tokens_.push_back(t);
    return true;
  }
  WordVocabularyOptions options_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, TokenId> ids_;
};

}  // namespace kappa::tokenize
