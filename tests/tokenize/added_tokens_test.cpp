// tests/tokenize/added_tokens_test.cpp - added tokens with their flags
// (lstrip, rstrip, single_word, normalized): AddedTokenMatcher on hand-made
// cases, then HfTokenizer against Hugging Face tokenizers' ids on four kinds
// of tokenizer.json (tests/tokenize/peer/added_peer.cjs wrote
// tests/data/tokenize/added/peer_ids.json with the npm binding
// @anush008/tokenizers).
#include "kappa/tokenize/added_tokens.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/tokenize/hf_tokenizer.hpp"

namespace {
namespace added_tokens_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
namespace tk = kappa::tokenize;
using kappa::TokenId;
using json = nlohmann::json;

// "[gap]" for text between matches, "#id" for a match.
std::vector<std::string> cut(const tk::AddedTokenMatcher& m, std::string_view text) {
  std::vector<std::string> out;
  m.split(
      text,
      [&](std::size_t b, std::size_t e) {
        out.push_back("[" + std::string(text.substr(b, e - b)) + "]");
      },
      [&](TokenId id) { out.push_back("#" + std::to_string(id)); });
  return out;
}

tk::AddedToken token(TokenId id, std::string content) {
  tk::AddedToken t;
  t.id = id;
  t.content = std::move(content);
  return t;
}

using V = std::vector<std::string>;

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(tk::lossy_utf8("a\xE2\x82x"), "a\uFFFDx");
  EXPECT_EQ(tk::lossy_utf8("\xE9t\xE9"), "\uFFFDt\uFFFD");
  EXPECT_EQ(tk::lossy_utf8("\xC0\xAF"), "\uFFFD\uFFFD");
  EXPECT_EQ(tk::lossy_utf8("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // a surrogate
  EXPECT_EQ(tk::lossy_utf8("\xF0\x9F\x98"), "\uFFFD");
  EXPECT_EQ(tk::lossy_utf8("ok \xF0\x9F\x98\x80"), "ok \xF0\x9F\x98\x80");
}

TEST(AddedTokenMatcher, LeftmostThenLongest) {
  tk::AddedTokenMatcher m;
  m.add(token(1, "ab"), "ab");
  m.add(token(2, "abc"), "abc");
  m.add(token(3, "bcd"), "bcd");
  EXPECT_EQ(cut(m, "xabcd"), (V{"[x]", "#2", "[d]"}));  // abc starts leftmost, longest there
  EXPECT_EQ(cut(m, "abab"), (V{"#1", "#1"}));
  EXPECT_EQ(cut(m, ""), V{});
  EXPECT_EQ(cut(m, "zz"), (V{"[zz]"}));
  // Added longest in the middle, then shorter and longer: still longest first;
  // a pattern added again keeps its first token.
  m.add(token(4, "abcde"), "abcde");
  m.add(token(5, "a"), "a");
  m.add(token(6, "abcdef"), "abcdef");
  m.add(token(7, "abc"), "abc");
  EXPECT_EQ(cut(m, "abcdefg"), (V{"#6", "[g]"}));
  EXPECT_EQ(cut(m, "abcdx"), (V{"#2", "[dx]"}));
  EXPECT_EQ(cut(m, "ax"), (V{"#5", "[x]"}));
}

TEST(AddedTokenMatcher, StripFlagsTakeInWhiteSpace) {
  tk::AddedToken l = token(1, "<m>");
  l.lstrip = true;
  tk::AddedToken r = token(2, "<r>");
  r.rstrip = true;
  tk::AddedTokenMatcher m;
  m.add(l, l.content);
  m.add(r, r.content);
  EXPECT_EQ(cut(m, "a \t<m>b"), (V{"[a]", "#1", "[b]"}));
  EXPECT_EQ(cut(m, "a<r> \n b"), (V{"[a]", "#2", "[b]"}));
  // U+3000 IDEOGRAPHIC SPACE is White_Space; U+200B is not.
  EXPECT_EQ(cut(m, "a\u3000<m>"), (V{"[a]", "#1"}));
  EXPECT_EQ(cut(m, "a\u200b<m>"), (V{"[a\u200b]", "#1"}));
  // lstrip stops at the previous match's end.
  EXPECT_EQ(cut(m, "<r>  <m>"), (V{"#2", "#1"}));
}

TEST(AddedTokenMatcher, SingleWordNeedsNonWordNeighbours) {
  tk::AddedToken c = token(7, "cat");
  c.single_word = true;
  tk::AddedTokenMatcher m;
  m.add(c, c.content);
  EXPECT_EQ(cut(m, "a cat!"), (V{"[a ]", "#7", "[!]"}));
  EXPECT_EQ(cut(m, "concat"), (V{"[concat]"}));
  EXPECT_EQ(cut(m, "cat_"), (V{"[cat_]"}));               // '_' is a word character (Pc)
  EXPECT_EQ(cut(m, "\u24b6cat"), (V{"[\u24b6cat]"}));     // circled A: Alphabetic, though So
  EXPECT_EQ(cut(m, "\u00b2cat"), (V{"[\u00b2]", "#7"}));  // superscript two: No, not \w
  EXPECT_EQ(cut(m, "\u0301cat"), (V{"[\u0301cat]"}));     // a combining mark is \w
  // A discarded match is skipped whole: "catcat" finds no match at 3 either,
  // the second cat is preceded by 't'.
  EXPECT_EQ(cut(m, "catcat"), (V{"[catcat]"}));
}

const fs::path kData = fs::path(KAPPA_TEST_DATA_DIR) / "tokenize" / "added";

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(AddedTokens, MatchHuggingFaceOnEveryLayout) {
  const json golden = json::parse(read(kData / "peer_ids.json"));
  const json& cases = golden["cases"];
  ASSERT_GT(cases.size(), 300u);
  for (const json& l : golden["layouts"]) {
    const std::string layout = l.get<std::string>();
    SCOPED_TRACE(layout);
    const tk::HfTokenizer tok =
        tk::HfTokenizer::from_tokenizer_json((kData / layout / "tokenizer.json").string());
    std::size_t matched = 0, failures = 0;
    for (const json& c : cases) {
      const std::string text = c["text"].get<std::string>();
      const json& want = c[layout];
      const auto ids = want["ids"].get<std::vector<TokenId>>();
      const auto plain = want["plain"].get<std::vector<TokenId>>();
      const std::vector<TokenId> got = tok.encode(text);
      const std::vector<TokenId> got_plain = tok.encode(text, tk::AddSpecial::kNo);
      // kappa's decode gives bytes; Hugging Face's is their lossy UTF-8.
      const std::string dec = tk::lossy_utf8(tok.decode(plain));
      if (got == ids && got_plain == plain && dec == want["decode"].get<std::string>()) {
        ++matched;
      } else if (++failures <= 5) {
        ADD_FAILURE() << c["name"].get<std::string>() << ": " << json(text).dump() << "\n got "
                      << json(got_plain).dump() << "\nwant " << json(plain).dump() << "\n decode "
                      << json(dec).dump() << "\n   want " << want["decode"].dump();
      }
    }
    EXPECT_EQ(matched, cases.size());
  }
}

}  // namespace added_tokens_test
}  // namespace
