// kappa/tokenize/added_tokens.hpp - the added tokens of a Hugging Face
// tokenizer ("<|endoftext|>", "[MASK]", "<extra_id_0>", ...) and how they are
// found in text, as Hugging Face tokenizers' AddedVocabulary does it.
//
// An added token has an id, a content and five flags:
//   special      decode(ids, SkipSpecial::kYes) leaves it out;
//   single_word  a match counts only if the character before it (if any) and
//                the one after it (if any) are not word characters (the word class, backslash-w, of
//                Rust's regex crate: Alphabetic, marks, Nd, Pc, Join_Control);
//                a discarded match is skipped whole (the search goes on at
//                its end, as Aho-Corasick's non-overlapping iteration does);
//   lstrip       the match takes in the white space (White_Space) before it,
//                back to the end of the previous match;
//   rstrip       the match takes in the white space after it;
//   normalized   the token is matched in the normalized text, as the
//                normalizer makes its content; otherwise in the raw text.
//
// Encoding text is then (Hugging Face's extract_and_normalize):
//   1. the raw text is cut at the matches of the tokens with normalized =
//      false (leftmost match first, the longest of those starting there);
//   2. each piece between them is normalized, and cut at the matches of the
//      normalized contents of the tokens with normalized = true;
//   3. the pieces left go to the pre-tokenizer and the model.
// With no normalizer, step 2 still comes after step 1: a token of either kind
// can hide a match of the other kind that starts earlier.
//
// AddedTokenMatcher does the cutting of one step; the tokenizers (HfTokenizer,
// WordPieceTokenizer, UnigramTokenizer) keep one matcher per step.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/normalize.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace kappa::tokenize {

/// A token of tokenizer.json's added_tokens (see the file comment).
struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;      ///< left out by decode(ids, SkipSpecial::kYes)
  bool lstrip = false;       ///< absorbs the white space before a match
  bool rstrip = false;       ///< absorbs the white space after a match
  bool single_word = false;  ///< matches only between non-word characters
  bool normalized = false;   ///< matched in the normalized text
};

/// Sets the five flags of `t` from one tokenizer.json added_tokens entry:
/// `flag(name, fallback)` reads the boolean `name` (fallback when absent);
/// normalized defaults to !special, as Hugging Face's AddedToken::from.
template <class Flag>
void read_added_token_flags(AddedToken& t, Flag&& flag) {
  t.special = flag("special", false);
  t.lstrip = flag("lstrip", false);
  t.rstrip = flag("rstrip", false);
  t.single_word = flag("single_word", false);
  t.normalized = flag("normalized", !t.special);
}

/// Finds added tokens in text (one step of the file comment's procedure).
class AddedTokenMatcher {
 public:
  /// Adds `token`, found where `pattern` occurs (its content, or the content
  /// as the normalizer makes it). An empty pattern never matches; a pattern
  /// added twice keeps its first token.
  void add(const AddedToken& token, std::string pattern) {
    if (pattern.empty() || !seen_.insert(pattern).second) return;
    const auto k = static_cast<std::uint32_t>(entries_.size());
    const std::size_t n = pattern.size();
    entries_.push_back(
        {std::move(pattern), token.id, token.lstrip, token.rstrip, token.single_word});
    // After every candidate at least as long: longest first, and the earlier
    // added first among equals. (A search and an insertion per token: a
    // sort per token took 5 s for a vocabulary of 31704 added tokens.)
    auto& list = by_first_byte_[static_cast<unsigned char>(entries_.back().pattern[0])];
    list.insert(
        std::partition_point(list.begin(), list.end(),
                             [&](std::uint32_t a) { return entries_[a].pattern.size() >= n; }),
        k);
  }

  bool empty() const noexcept { return entries_.empty(); }

  /// Cuts `text`: calls gap(begin, end) for each non-empty piece between
  /// matches and token(id) for each match, in order.
  template <class Gap, class Token>
  void split(std::string_view text, Gap&& gap, Token&& token) const {
    std::size_t done = 0;  // the end of the last match (with what it absorbed)
    for (std::size_t p = 0; p < text.size();) {
      const Entry* e = longest_at(text, p);
      if (e == nullptr) {
        ++p;
        continue;
      }
      std::size_t start = p, stop = p + e->pattern.size();
      p = stop;  // the search goes on after the match as found
      if (e->single_word && ((start > 0 && word_char_before(text, start)) ||
                             (stop < text.size() && word_char_at(text, stop))))
        continue;
      if (e->lstrip) start = std::max(white_space_start(text, start), done);
      if (e->rstrip) stop = white_space_end(text, stop);
      start = std::max(start, done);
      if (done < start) gap(done, start);
      token(e->id);
      done = stop;
      p = std::max(p, done);
    }
    if (done < text.size()) gap(done, text.size());
  }

 private:
  struct Entry {
    std::string pattern;
    TokenId id;
    bool lstrip, rstrip, single_word;
  };

  const Entry* longest_at(std::string_view text, std::size_t p) const {
    for (const std::uint32_t k : by_first_byte_[static_cast<unsigned char>(text[p])])
      if (text.compare(p, entries_[k].pattern.size(), entries_[k].pattern) == 0)
        return &entries_[k];
    return nullptr;
  }

  // The character that ends at byte i (i > 0); invalid UTF-8 is no character.
  static Utf8Char char_before(std::string_view text, std::size_t i) noexcept {
    std::size_t c = i - 1;
    while (c > 0 && i - c < 4 && (static_cast<unsigned char>(text[c]) & 0xC0) == 0x80) --c;
    Utf8Char ch = decode_utf8(text, c);
    if (c + ch.length != i) ch.valid = false;
    ch.length = static_cast<std::uint8_t>(i - c);
    return ch;
  }
  static bool word_char_before(std::string_view text, std::size_t i) noexcept {
    const Utf8Char ch = char_before(text, i);
    return ch.valid && is_word_char(ch.code_point);
  }
  static bool word_char_at(std::string_view text, std::size_t i) noexcept {
    const Utf8Char ch = decode_utf8(text, i);
    return ch.valid && is_word_char(ch.code_point);
  }
  // Where the run of white space that ends at `end` starts.
  static std::size_t white_space_start(std::string_view text, std::size_t end) noexcept {
    while (end > 0) {
      const Utf8Char ch = char_before(text, end);
      if (!ch.valid || !is_white_space(ch.code_point)) break;
      end -= ch.length;
    }
    return end;
  }
  // Where the run of white space that starts at `begin` ends.
  static std::size_t white_space_end(std::string_view text, std::size_t begin) noexcept {
    while (begin < text.size()) {
      const Utf8Char ch = decode_utf8(text, begin);
      if (!ch.valid || !is_white_space(ch.code_point)) break;
      begin += ch.length;
    }
    return begin;
  }

  std::vector<Entry> entries_;
  std::unordered_set<std::string> seen_;                       // the patterns of entries_
  std::array<std::vector<std::uint32_t>, 256> by_first_byte_;  // longest first
};

}  // namespace kappa::tokenize
