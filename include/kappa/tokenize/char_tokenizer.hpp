// kappa/tokenize/char_tokenizer.hpp - character tokenizer (the paper's
// Figure 1): tokens are strings of 1..K characters (Unicode code points; an
// invalid UTF-8 byte counts as one character), encoding is greedy longest
// match.
//
// encode(text): at each position take the longest token (at most K
// characters) that the text starts with; a character that is no token
// becomes the unknown token (id 0). decode(ids) concatenates the tokens, so
// decode(encode(s)) == s whenever every character of s is in the vocabulary.
//
// Cost: encode is O(n L^2) for n characters and L = the longest token in
// characters (at most K, and never more than the tokens given): K itself
// costs nothing. from_corpus counts a string of k characters only where its
// first k - 1 repeat; it is O(n K^2) in time at worst (a corpus that repeats
// itself), so it accepts K <= kMaxCorpusChars (RangeError naming K otherwise).
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
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
#include "kappa/tokenize/utf8.hpp"

namespace kappa::tokenize {

/// Greedy longest-match tokenizer over tokens of up to K characters.
class CharTokenizer {
 public:
  /// The unknown token's text; it always has id 0.
  static constexpr std::string_view kUnknown = "<unk>";
  /// The largest K that from_corpus() accepts (its cost grows as K^2).
  static constexpr std::size_t kMaxCorpusChars = 32;

  /// From a list of tokens (each of 1..max_chars characters; duplicates and
  /// empty strings are errors). Ids: 0 is `<unk>`, then the list in order.
  /// Throws std::invalid_argument on a bad list or max_chars < 1.
  CharTokenizer(const std::vector<std::string>& tokens, std::size_t max_chars = 2)
      : max_chars_(max_chars) {
    if (max_chars < 1)
      throw std::invalid_argument("kappa: CharTokenizer: K (max_chars) must be >= 1");
    add(std::string(kUnknown));
    for (const std::string& t : tokens) {
      const std::size_t n = count_chars(t);
      if (n == 0 || n > max_chars)
        throw std::invalid_argument("kappa: CharTokenizer: token " + kappa::quoted(t) + " has " +
                                    std::to_string(n) + " characters, not 1.." +
                                    std::to_string(max_chars));
      if (!add(t))
        throw std::invalid_argument("kappa: CharTokenizer: duplicate token " + kappa::quoted(t));
      longest_ = std::max(longest_, n);
    }
  }

  /// From a corpus: every character of the corpus (sorted by code point),
  /// then the most frequent strings of 2..K consecutive characters (ties by
  /// byte order) until the vocabulary (with `<unk>`) has `vocab_size` tokens
  /// or no string occurs twice. Throws RangeError if max_chars exceeds
  /// kMaxCorpusChars.
  static CharTokenizer from_corpus(std::string_view corpus, std::size_t vocab_size,
                                   std::size_t max_chars = 2) {
    if (max_chars > kMaxCorpusChars)
      throw RangeError("kappa: CharTokenizer::from_corpus: K (max_chars) " +
                       std::to_string(max_chars) + " exceeds the limit of " +
                       std::to_string(kMaxCorpusChars));
    std::vector<std::size_t> starts;  // byte offsets of the characters, plus the end
    for (std::size_t i = 0; i < corpus.size(); i += decode_utf8(corpus, i).length)
      starts.push_back(i);
    starts.push_back(corpus.size());
    auto gram = [&](std::size_t c, std::size_t k) {  // the k characters from character c
      return corpus.substr(starts[c], starts[c + k] - starts[c]);
    };
    std::map<std::string, std::size_t> singles;
    for (std::size_t c = 0; c + 1 < starts.size(); ++c) singles[std::string(gram(c, 1))] += 1;
    // Strings of k characters, k = 2..K, level by level: only where the first
    // k - 1 characters occur twice (a string occurs at most as often as its
    // prefix, and only strings seen twice are kept), so a corpus with few
    // repeats costs little whatever K is.
    std::vector<std::pair<std::string, std::size_t>> ranked;  // seen at least twice
    std::vector<std::size_t> at;  // characters where the previous level's string repeats
    for (std::size_t c = 0; c + 1 < starts.size(); ++c)
      if (singles[std::string(gram(c, 1))] >= 2) at.push_back(c);
    for (std::size_t k = 2; k <= max_chars && !at.empty(); ++k) {
      std::unordered_map<std::string_view, std::size_t> counts;
      std::vector<std::size_t> next;
      for (std::size_t c : at)
        if (c + k < starts.size()) ++counts[gram(c, k)];
      for (std::size_t c : at)
        if (c + k < starts.size() && counts[gram(c, k)] >= 2) next.push_back(c);
      for (const auto& [t, n] : counts)
        if (n >= 2) ranked.emplace_back(std::string(t), n);
      at = std::move(next);
    }
    std::vector<std::pair<std::string, std::size_t>> chars(singles.begin(), singles.end());
    std::sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) {
      const Utf8Char x = decode_utf8(a.first, 0), y = decode_utf8(b.first, 0);
      // valid characters by code point first, then invalid bytes by value
      return x.valid != y.valid ? x.valid : x.code_point < y.code_point;
    });
    std::vector<std::string> tokens;
    tokens.reserve(chars.size());
    for (const auto& [t, n] : chars) tokens.push_back(t);
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    for (const auto& [t, n] : ranked) {
      if (tokens.size() + 1 >= vocab_size || n < 2) break;
      tokens.push_back(t);
    }
    return CharTokenizer(tokens, max_chars);
  }

  /// Greedy longest match (see the file comment).
  std::vector<TokenId> encode(std::string_view text) const {
    std::vector<TokenId> out;
    const std::size_t k_max = std::min(max_chars_, longest_);  // no token is longer
    std::vector<std::size_t> ends(k_max);
    for (std::size_t i = 0; i < text.size();) {
      std::size_t n = 0;
      for (std::size_t j = i; n < k_max && j < text.size(); ++n) {
        j += decode_utf8(text, j).length;
        ends[n] = j;
      }
      TokenId id = 0;
      std::size_t end = ends[0];
      for (std::size_t k = n; k-- > 0;) {
        const auto it = ids_.find(std::string(text.substr(i, ends[k] - i)));
        if (it != ids_.end()) {
          id = it->second;
          end = ends[k];
          break;
        }
      }
      out.push_back(id);
      i = end;
    }
    return out;
  }

  /// Concatenation of the tokens; RangeError naming an id outside [0, N_T).
  std::string decode(std::span<const TokenId> ids) const {
    std::string out;
    for (TokenId id : ids) out += token(id);
    return out;
  }

  std::size_t vocab_size() const noexcept { return tokens_.size(); }
  std::size_t max_chars() const noexcept { return max_chars_; }
  /// The string of token id; RangeError naming the id and N_T if none.
  std::string token(TokenId id) const {
    require_index("token id", id, static_cast<long long>(tokens_.size()), "a vocabulary");
    return tokens_[static_cast<std::size_t>(id)];
  }
  std::optional<TokenId> find(std::string_view token) const {
    const auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

 private:
  bool add(const std::string& t) {
    if (!ids_.emplace(t, static_cast<TokenId>(tokens_.size())).second) return false;
    tokens_.push_back(t);
    return true;
  }
  std::size_t max_chars_;
  std::size_t longest_ = kUnknown.size();  // the longest token, in characters
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, TokenId> ids_;
};

}  // namespace kappa::tokenize
