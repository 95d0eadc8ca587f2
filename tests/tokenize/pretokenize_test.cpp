// The three split patterns on hand-derived cases: each expected split was
// worked out from the regex (leftmost-first alternation, greedy quantifiers
// with backtracking), not from kappa. peer_test.cpp checks the full pipeline
// against tiktoken itself.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kappa/tokenize/pretokenize.hpp"

namespace tk = kappa::tokenize;
using Pieces = std::vector<std::string>;

template <class P>
Pieces pieces(std::string_view text) {
  Pieces out;
  tk::split<P>(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

TEST(Gpt2Split, HandDerivedCases) {
  using P = tk::Gpt2Split;
  EXPECT_EQ(pieces<P>("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces<P>("I'm don't we'll"), (Pieces{"I", "'m", " don", "'t", " we", "'ll"}));
  EXPECT_EQ(pieces<P>("I'M"), (Pieces{"I", "'", "M"}));  // case-sensitive contractions
  EXPECT_EQ(pieces<P>("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(pieces<P>("a   \n\nb"), (Pieces{"a", "   \n", "\n", "b"}));
  EXPECT_EQ(pieces<P>("123456 7"), (Pieces{"123456", " 7"}));
  EXPECT_EQ(pieces<P>("x  "), (Pieces{"x", "  "}));
  EXPECT_EQ(pieces<P>("hello!!! world"), (Pieces{"hello", "!!!", " world"}));
  EXPECT_EQ(pieces<P>("\tword"), (Pieces{"\t", "word"}));
  EXPECT_EQ(pieces<P>("caf\xC3\xA9 e\xCC\x81"),
            (Pieces{"caf\xC3\xA9", " e", "\xCC\x81"}));  // a mark is not \p{L}
  EXPECT_EQ(pieces<P>("a\x80"
                      "b"),
            (Pieces{"a", "\x80", "b"}));  // an invalid byte is "other"
  EXPECT_TRUE(pieces<P>("").empty());
}

TEST(Cl100kSplit, HandDerivedCases) {
  using P = tk::Cl100kSplit;
  EXPECT_EQ(pieces<P>("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces<P>("I'M"), (Pieces{"I", "'M"}));
  EXPECT_EQ(pieces<P>("'sa"), (Pieces{"'s", "a"}));
  EXPECT_EQ(pieces<P>("x'\xC5\xBF"), (Pieces{"x", "'\xC5\xBF"}));  // 's with U+017F long s
  EXPECT_EQ(pieces<P>("1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(pieces<P>("\tword"), (Pieces{"\tword"}));
  EXPECT_EQ(pieces<P>("a\r\n\r\nb"), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(pieces<P>("a  \n  b"), (Pieces{"a", "  \n", " ", " b"}));
  EXPECT_EQ(pieces<P>("hello!!!\n\nworld"), (Pieces{"hello", "!!!\n\n", "world"}));
  EXPECT_EQ(pieces<P>("  ."), (Pieces{" ", " ."}));
  EXPECT_EQ(pieces<P>(".a"), (Pieces{".a"}));
  EXPECT_EQ(pieces<P>("\n a"), (Pieces{"\n", " a"}));
}

TEST(O200kSplit, HandDerivedCases) {
  using P = tk::O200kSplit;
  EXPECT_EQ(pieces<P>("HelloWorld"), (Pieces{"Hello", "World"}));
  EXPECT_EQ(pieces<P>("HTTPServer"), (Pieces{"HTTPServer"}));  // [Lu..]* takes HTTPS, then "erver"
  EXPECT_EQ(pieces<P>("iPhone"), (Pieces{"i", "Phone"}));
  EXPECT_EQ(pieces<P>("don't"), (Pieces{"don't"}));
  EXPECT_EQ(pieces<P>("DON'T"), (Pieces{"DON'T"}));
  EXPECT_EQ(pieces<P>("1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(pieces<P>("a/b"), (Pieces{"a", "/b"}));
  EXPECT_EQ(pieces<P>("x!!/\n"), (Pieces{"x", "!!/\n"}));
  EXPECT_EQ(pieces<P>("\xCC\x81"
                      "A"),
            (Pieces{"\xCC\x81", "A"}));  // backtracking: the mark is both prefix and "lower"
  EXPECT_EQ(pieces<P>(" \xE4\xB8\xAD\xE6\x96\x87"),
            (Pieces{" \xE4\xB8\xAD\xE6\x96\x87"}));  // Lo is in both classes
}

TEST(Split, PiecesCoverTheInputForEveryPattern) {
  const std::string text =
      "Tab\there  \r\n\x80\xFF \xE6\x97 end's 12345 \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!";
  for (const auto& ps :
       {pieces<tk::Gpt2Split>(text), pieces<tk::Cl100kSplit>(text), pieces<tk::O200kSplit>(text)}) {
    std::string joined;
    for (const auto& p : ps) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, text);
  }
}
