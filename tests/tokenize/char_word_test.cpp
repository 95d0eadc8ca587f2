// Character (Figure 1) and word (Figure 2) tokenizers on hand-worked examples.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kappa/tokenize/char_tokenizer.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/word_tokenizer.hpp"

namespace tk = kappa::tokenize;
using kappa::TokenId;
using Ids = std::vector<TokenId>;

static_assert(tk::Tokenizer<tk::CharTokenizer>);
static_assert(tk::Tokenizer<tk::WordTokenizer>);
static_assert(!tk::Tokenizer<int>);

TEST(CharTokenizer, GreedyLongestMatchFromAList) {
  const tk::CharTokenizer t({"a", "b", "ab", "c"});  // ids 1..4, <unk> is 0
  EXPECT_EQ(t.vocab_size(), 5u);
  EXPECT_EQ(t.encode("abcab"), (Ids{3, 4, 3}));
  EXPECT_EQ(t.encode("abd"), (Ids{3, 0}));
  EXPECT_EQ(t.encode("ba"), (Ids{2, 1}));
  EXPECT_EQ(t.decode(Ids{3, 4}), "abc");
  EXPECT_EQ(t.token(0), "<unk>");
  EXPECT_THROW((void)t.decode(Ids{5}), kappa::RangeError);
  EXPECT_THROW(tk::CharTokenizer({"abc"}), std::invalid_argument);  // 3 characters > K = 2
  EXPECT_THROW(tk::CharTokenizer({"a", "a"}), std::invalid_argument);
}

TEST(CharTokenizer, CharactersAreCodePoints) {
  const tk::CharTokenizer t({"\xE6\x97\xA5", "\xE6\x9C\xAC", "\xE6\x97\xA5\xE6\x9C\xAC",
                             "\xE8\xAA\x9E"});  // 日 本 日本 語
  EXPECT_EQ(t.encode("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"), (Ids{3, 4}));
  const tk::CharTokenizer k3({"abc", "a", "b", "c"}, 3);
  EXPECT_EQ(k3.encode("abcab"), (Ids{1, 2, 3}));
}

TEST(CharTokenizer, FromCorpusKeepsFrequentPairs) {
  const auto t = tk::CharTokenizer::from_corpus("abab ab", 100);
  // characters by code point: ' ' 1, a 2, b 3; then "ab" (3 times); "ba", "b ", " a" occur once
  ASSERT_EQ(t.vocab_size(), 5u);
  EXPECT_EQ(t.token(1), " ");
  EXPECT_EQ(t.token(4), "ab");
  EXPECT_EQ(t.encode("abab"), (Ids{4, 4}));
  const std::string bytes = "caf\xC3\xA9 \x80 caf\xC3\xA9";
  const auto u = tk::CharTokenizer::from_corpus(bytes, 100);
  EXPECT_EQ(u.decode(u.encode(bytes)), bytes);
  EXPECT_EQ(tk::CharTokenizer::from_corpus("abab ab", 4).vocab_size(), 4u);  // no room for pairs
}

TEST(WordTokenizer, FrequencyVocabularyAndUnknown) {
  tk::WordVocabularyOptions o;
  o.min_frequency = 2;
  const tk::WordTokenizer t("the cat sat on the mat. The cat!", o);
  ASSERT_EQ(t.vocab_size(), 3u);  // <unk>, cat, the (ties in byte order)
  EXPECT_EQ(t.token(1), "cat");
  EXPECT_EQ(t.token(2), "the");
  EXPECT_EQ(t.encode("the cat sat"), (Ids{2, 1, 0}));
  EXPECT_EQ(t.decode(Ids{2, 1, 0}), "the cat <unk>");
}

TEST(WordTokenizer, SpecialsPunctuationAndUnicodeWords) {
  tk::WordVocabularyOptions o;
  o.specials = {"<bos>", "<eos>"};
  const tk::WordTokenizer t(
      "the cat the cat don't stop! na\xC3\xAFve e\xCC\x81t\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC x_y",
      o);
  EXPECT_EQ(t.find("<bos>").value_or(-1), 1);
  EXPECT_EQ(t.find("<eos>").value_or(-1), 2);
  EXPECT_EQ(t.token(3), "cat");
  EXPECT_EQ(t.token(4), "the");
  EXPECT_EQ(t.encode("<bos>the cat<eos>"), (Ids{1, 4, 3, 2}));
  EXPECT_EQ(t.decode(t.encode("<bos>the cat<eos>")), "<bos> the cat <eos>");
  std::vector<std::string> words;
  t.split_words("don't stop! na\xC3\xAFve e\xCC\x81t\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC x_y",
                [&](std::string_view w, bool) { words.emplace_back(w); });
  EXPECT_EQ(words,
            (std::vector<std::string>{"don", "'", "t", "stop", "!", "na\xC3\xAFve",
                                      "e\xCC\x81t\xC3\xA9", "\xE6\x9D\xB1\xE4\xBA\xAC", "x_y"}));
  for (const auto& w : words) EXPECT_TRUE(t.find(w)) << w;
}

TEST(WordTokenizer, MaxSizeAndBadOptions) {
  tk::WordVocabularyOptions o;
  o.max_size = 2;
  const tk::WordTokenizer t("b b a a a c", o);
  ASSERT_EQ(t.vocab_size(), 2u);
  EXPECT_EQ(t.token(1), "a");
  EXPECT_THROW((void)t.token(2), kappa::RangeError);
  o.specials = {"<s>", "<s>"};
  EXPECT_THROW(tk::WordTokenizer("x", o), std::invalid_argument);
  o.specials = {"<a>", "<b>"};
  EXPECT_THROW(tk::WordTokenizer("x", o), std::invalid_argument);  // max_size 2 < 3 specials
}

// Defect 3: the cost of encode() depends on the tokens, not on K; from_corpus
// (whose cost grows with K) has a documented limit.
TEST(CharTokenizer, CostDoesNotGrowWithTheParameterK) {
  const tk::CharTokenizer t({"a", "bc"}, std::size_t{1} << 31);
  EXPECT_EQ(t.max_chars(), std::size_t{1} << 31);
  for (int k = 0; k < 1000; ++k) ASSERT_EQ(t.encode("abca"), (Ids{1, 2, 1}));
  std::string corpus;
  while (corpus.size() < 20000) corpus += "the cat sat on the mat. ";
  try {
    (void)tk::CharTokenizer::from_corpus(corpus, 4096, 4096);
    ADD_FAILURE() << "K = 4096 accepted";
  } catch (const kappa::RangeError& e) {
    EXPECT_STREQ(e.what(),
                 "kappa: CharTokenizer::from_corpus: K (max_chars) 4096 exceeds the limit of 32");
  }
  const auto at_limit = tk::CharTokenizer::from_corpus(corpus, 4096, 32);
  EXPECT_EQ(at_limit.decode(at_limit.encode(corpus)), corpus);
  EXPECT_EQ(at_limit.encode("the cat sat on the mat. the cat sat on the mat. ").size(), 2u);
}

// Defect 6: token text in messages is escaped.
TEST(CharTokenizer, ErrorMessagesEscapeControlBytes) {
  try {
    tk::CharTokenizer({"\x1b[2Jxyz"});
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kappa: CharTokenizer: token \"\\x1b[2Jxyz\" has 7 characters, not 1..2");
  }
}

TEST(WordTokenizer, ErrorMessagesEscapeControlBytes) {
  tk::WordVocabularyOptions o;
  o.specials = {"<\x1b[31m>", "<\x1b[31m>"};
  try {
    tk::WordTokenizer("x", o);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kappa: WordTokenizer: bad or duplicate special token \"<\\x1b[31m>\"");
  }
}

// from_corpus counts only strings whose prefix repeats: the vocabulary is the
// one of the definition (every string of 2..K characters, most frequent
// first, ties in byte order, seen at least twice).
TEST(CharTokenizer, FromCorpusEqualsTheDefinition) {
  std::string corpus;
  for (const char* name : {"english.txt", "cjk.txt", "code.txt"}) {
    std::ifstream in(std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/corpus/" + name,
                     std::ios::binary);
    corpus.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(corpus.size(), 1000u);
  for (std::size_t k : {2u, 3u, 5u}) {
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i < corpus.size(); i += tk::decode_utf8(corpus, i).length)
      starts.push_back(i);
    starts.push_back(corpus.size());
    std::map<std::string, std::size_t> counts;
    for (std::size_t c = 0; c + 1 < starts.size(); ++c)
      for (std::size_t j = 2; j <= k && c + j < starts.size(); ++j)
        ++counts[corpus.substr(starts[c], starts[c + j] - starts[c])];
    std::vector<std::pair<std::string, std::size_t>> ranked(counts.begin(), counts.end());
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    const auto t = tk::CharTokenizer::from_corpus(corpus, 3000, k);
    auto one_char = [&](std::size_t id) {
      const std::string s = t.token(static_cast<TokenId>(id));
      return tk::decode_utf8(s, 0).length == s.size();
    };
    std::size_t first_gram = 1;  // after <unk> and the single characters
    while (first_gram < t.vocab_size() && one_char(first_gram)) ++first_gram;
    ASSERT_LT(first_gram, t.vocab_size());
    for (std::size_t id = first_gram; id < t.vocab_size(); ++id) {
      ASSERT_GE(ranked[id - first_gram].second, 2u);
      ASSERT_EQ(t.token(static_cast<TokenId>(id)), ranked[id - first_gram].first)
          << "K = " << k << ", id " << id;
    }
  }
}
