// Byte-level BPE on small vocabularies whose results are worked out by hand:
// merge priorities, leftmost ties, the O(n log n) path for long pieces,
// special tokens, errors in every file format, training (the classic
// "aaabdaaabac" example) and saving/loading in both formats.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/bpe_train.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "support/sanitized.hpp"

namespace tk = kappa::tokenize;
using kappa::TokenId;
using Ids = std::vector<TokenId>;

static_assert(tk::Tokenizer<tk::Gpt2Tokenizer>);
static_assert(tk::Tokenizer<tk::Cl100kTokenizer>);
static_assert(tk::Tokenizer<tk::O200kTokenizer>);

namespace {

/// A tiktoken rank file: bytes 0..255 with rank = byte value, then `extra`.
std::string rank_file(const std::vector<std::string>& extra) {
  std::string out;
  for (int b = 0; b < 256; ++b)
    out += tk::base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (std::size_t k = 0; k < extra.size(); ++k)
    out += tk::base64_encode(extra[k]) + " " + std::to_string(256 + k) + "\n";
  return out;
}

// 256 "ab", 257 "bc", 258 "abc", 259 "aa", 260 "aaa"
tk::Gpt2Tokenizer tiny(std::vector<tk::SpecialToken> specials = {}) {
  return tk::Gpt2Tokenizer(tk::BpeModel::from_tiktoken(rank_file({"ab", "bc", "abc", "aa", "aaa"}),
                                                       "tiny.tiktoken", specials));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kappa::FormatError& e) {
    return e.what();
  } catch (const kappa::RangeError& e) {
    return std::string("RangeError: ") + e.what();
  }
  return "<no error>";
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("kappa_bpe_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

}  // namespace

TEST(Bpe, MergesByPriorityLeftmostFirst) {
  const auto t = tiny();
  EXPECT_EQ(t.vocab_size(), 261u);
  EXPECT_EQ(t.encode("abc"), (Ids{258}));        // the whole piece is a token
  EXPECT_EQ(t.encode("abcd"), (Ids{258, 'd'}));  // ab, then ab+c
  EXPECT_EQ(t.encode("bcab"), (Ids{257, 256}));  // ab (256) before bc (257)
  EXPECT_EQ(t.encode("aaaa"), (Ids{259, 259}));  // leftmost of equal pairs first
  EXPECT_EQ(t.encode("aaaaa"), (Ids{259, 260}));
  EXPECT_EQ(t.encode("xy ab"), (Ids{'x', 'y', ' ', 256}));
  EXPECT_EQ(t.decode(Ids{258, 'd'}), "abcd");
  EXPECT_EQ(t.token(256), "ab");
  EXPECT_EQ(t.find("abc").value_or(-1), 258);
  EXPECT_FALSE(t.find("zz"));
}

TEST(Bpe, LongPiecesUseTheHeapAndAgreeWithTheShortPath) {
  // "a" x n: all pairs aa first (priority 259), then the odd tail aa+a (260).
  const auto t = tiny();
  auto expect_as = [&](std::size_t n) {
    Ids want(n / 2, 259);
    if (n % 2) want.back() = 260;
    EXPECT_EQ(t.encode(std::string(n, 'a')), want) << "n = " << n;
  };
  for (std::size_t n : {3u, 63u, 64u, 65u, 66u, 129u, 1001u}) expect_as(n);
  // A 100 KB word without spaces (one piece): linear-logarithmic, not quadratic.
  expect_as(100000);
  // At the a/b boundary "ab" (256) merges before "aa" (259): 49999 a's give
  // 24998 "aa" and one "aaa", then "ab", then 49999 single b's.
  Ids want(24998, 259);
  want.push_back(260);
  want.push_back(256);
  want.insert(want.end(), 49999, 'b');
  EXPECT_EQ(t.encode(std::string(50000, 'a') + std::string(50000, 'b')), want);
}

TEST(Bpe, SpecialTokensAreTextUnlessRecognized) {
  const auto t = tiny({{"<|end|>", 300}, {"<|end|>x", 301}});
  EXPECT_EQ(t.vocab_size(), 302u);
  EXPECT_EQ(t.encode("ab<|end|>", tk::SpecialTokens::kRecognize), (Ids{256, 300}));
  EXPECT_EQ(t.encode("<|end|>xab", tk::SpecialTokens::kRecognize),
            (Ids{301, 256}));  // longest special wins
  const Ids as_text = t.encode("ab<|end|>");
  EXPECT_EQ(as_text.front(), 256);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 300), 0);
  EXPECT_EQ(t.decode(as_text), "ab<|end|>");
  EXPECT_EQ(t.decode(Ids{300, 256}), "<|end|>ab");
  EXPECT_EQ(t.token(301), "<|end|>x");
  EXPECT_EQ(t.find("<|end|>").value_or(-1), 300);
}

TEST(Bpe, DecodeRejectsIdsOutsideTheVocabulary) {
  const auto t = tiny({{"<|end|>", 300}});
  EXPECT_EQ(error_of([&] {
              (void)t.decode(Ids{256, 301});
            }),
            "RangeError: kappa: token id 301 is out of range for a vocabulary of size 301");
  EXPECT_EQ(error_of([&] { (void)t.decode(Ids{-1}); }),
            "RangeError: kappa: token id -1 is out of range for a vocabulary of size 301");
  EXPECT_EQ(error_of([&] { (void)t.decode(Ids{280}); }),
            "RangeError: kappa: token id 280 is not assigned in the vocabulary of size 301");
  EXPECT_EQ(error_of([&] { (void)t.token(1000); }),
            "RangeError: kappa: token id 1000 is out of range for a vocabulary of size 301");
}

TEST(Bpe, RandomBytesRoundTrip) {
  const auto t = tiny();
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 300);
  for (int k = 0; k < 300; ++k) {
    std::string s;
    const int n = len(gen);
    for (int i = 0; i < n; ++i)
      s += static_cast<char>(k % 2 ? byte(gen) : "ab c\n\x80"[byte(gen) % 6]);
    ASSERT_EQ(t.decode(t.encode(s)), s);
  }
}

TEST(BpeFormats, TiktokenFileErrorsNameFileAndLine) {
  const std::string good = rank_file({"ab"});
  auto load = [](const std::string& text) {
    return [text] { (void)tk::BpeModel::from_tiktoken(text, "r.tiktoken", {}); };
  };
  EXPECT_EQ(error_of(load(good + "YWI= 257\n")),
            "kappa: r.tiktoken:258: duplicate token \"ab\" (rank 257 and rank 256)");
  EXPECT_EQ(error_of(load(good + "eHk= 256\n")), "kappa: r.tiktoken:258: duplicate rank 256");
  EXPECT_EQ(error_of(load(good + "eHk=257\n")),
            "kappa: r.tiktoken:258: expected '<base64 token> <rank>'");
  EXPECT_EQ(error_of(load(good + "e@k= 257\n")), "kappa: r.tiktoken:258: invalid base64 \"e@k=\"");
  EXPECT_EQ(error_of(load(good + "eHk= -3\n")), "kappa: r.tiktoken:258: invalid rank \"-3\"");
  EXPECT_EQ(error_of(load(good + "eHk= 2147483647\n")),
            "kappa: r.tiktoken:258: id 2147483647 is far beyond the 258 tokens (ids must be dense: "
            "below 2 N + 1024)");
  EXPECT_EQ(error_of(load(good + "eHk= 1 2\n")),
            "kappa: r.tiktoken:258: expected '<base64 token> <rank>'");
  std::string no_byte_7 = good;
  no_byte_7.erase(no_byte_7.find(tk::base64_encode("\x07") + " 7\n"), 7);
  EXPECT_EQ(
      error_of(load(no_byte_7)),
      "kappa: r.tiktoken: the single byte 0x07 is not a token (byte-level BPE needs all 256)");
  EXPECT_EQ(error_of([&] {
              (void)tk::BpeModel::from_tiktoken(good, "r.tiktoken", {{"<s>", 256}});
            }),
            "kappa: r.tiktoken: special token \"<s>\" reuses id 256");
  EXPECT_EQ(error_of([] { (void)tk::Gpt2Tokenizer::from_tiktoken_file("/nonexistent.tiktoken"); }),
            "kappa: cannot open '/nonexistent.tiktoken'");
}

TEST(BpeFormats, Gpt2FilesErrorsNameFileAndLine) {
  const auto& abc = tk::gpt2_alphabet();
  std::string json = "{";
  for (int b = 0; b < 256; ++b)
    json += tk::json_quote(abc.encode(std::string(1, static_cast<char>(b)))) + ": " +
            std::to_string(b) + ", ";
  const std::string base = json;
  json += "\"ab\": 256, \"<|endoftext|>\": 257}";
  const std::string merges = "#version: 0.2\na b\n";
  auto load = [](const std::string& j, const std::string& m) {
    return [j, m] { (void)tk::BpeModel::from_gpt2(j, "encoder.json", m, "vocab.bpe"); };
  };
  EXPECT_EQ(error_of(load(json, merges)), "<no error>");
  const auto ok =
      tk::Gpt2Tokenizer(tk::BpeModel::from_gpt2(json, "encoder.json", merges, "vocab.bpe"));
  EXPECT_EQ(ok.encode("abab <|endoftext|>", tk::SpecialTokens::kRecognize),
            (Ids{256, 256, ' ', 257}));
  EXPECT_TRUE(ok.model().is_special(257));
  EXPECT_EQ(error_of(load(json, merges + "a\n")),
            "kappa: vocab.bpe:3: expected a merge '<token> <token>', got \"a\"");
  EXPECT_EQ(error_of(load(json, merges + "a  b\n")),
            "kappa: vocab.bpe:3: expected a merge '<token> <token>', got \"a  b\"");
  EXPECT_EQ(error_of(load(json, merges + "b c\n")),
            "kappa: vocab.bpe:3: merge \"b c\": token \"bc\" is not in encoder.json");
  EXPECT_EQ(error_of(load(json, merges + "a b\n")), "kappa: vocab.bpe:3: duplicate merge");
  EXPECT_EQ(error_of(load(base + "\"a b\": 256}", "")),
            "kappa: encoder.json: unknown token string \"a b\" (id 256) has a character outside "
            "GPT-2's byte alphabet");
  EXPECT_EQ(error_of(load(base + "\"ab\": 255}", "")),
            "kappa: encoder.json: duplicate id 255 (tokens \"\xc3\xbf\" and \"ab\")");
  EXPECT_EQ(error_of(load(base + "\"ab\": 256, \"ab\": 257}", "")),
            "kappa: encoder.json: duplicate token \"ab\"");
  EXPECT_NE(error_of(load(base + "\"ab\" 256}", "")).find("kappa: encoder.json:1 (byte "),
            std::string::npos);
}

TEST(BpeTrain, ClassicExampleByHand) {
  // Wikipedia's BPE example: aa -> Z, ab -> Y, ZY -> X.
  tk::BpeTrainOptions options;
  options.vocab_size = 1000;
  options.specials = {"<|end|>"};
  const auto t = tk::train_bpe<tk::Gpt2Split>("aaabdaaabac", options);
  ASSERT_EQ(t.vocab_size(), 260u);
  EXPECT_EQ(t.token(256), "aa");
  EXPECT_EQ(t.token(257), "ab");
  EXPECT_EQ(t.token(258), "aaab");
  EXPECT_EQ(t.token(259), "<|end|>");
  EXPECT_EQ(t.encode("aaabdaaabac"), (Ids{258, 'd', 258, 'a', 'c'}));
  EXPECT_EQ(t.model().merges(),
            (std::vector<std::pair<TokenId, TokenId>>{{'a', 'a'}, {'a', 'b'}, {256, 257}}));
  EXPECT_THROW((void)tk::train_bpe<tk::Gpt2Split>(
                   "abc", {.vocab_size = 100, .min_pair_count = 2, .specials = {}}),
               std::invalid_argument);
}

TEST(BpeTrain, SavedFilesLoadBackToTheSameTokenizer) {
  std::string corpus;
  for (const char* name : {"english.txt", "code.txt", "cjk.txt", "emoji.txt"})
    corpus += tk::read_file(std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/corpus/" + name);
  tk::BpeTrainOptions options;
  options.vocab_size = 400;
  options.specials = {"<|endoftext|>"};
  const auto trained = tk::train_bpe<tk::Cl100kSplit>(corpus, options);
  EXPECT_EQ(trained.model().mergeable_count(), 400u);
  EXPECT_LT(trained.encode(corpus).size(), corpus.size() * 3 / 4);  // merges learned something

  const std::string rank = temp_path("t.tiktoken"), enc = temp_path("encoder.json"),
                    vocab = temp_path("vocab.bpe");
  trained.save_tiktoken(rank);
  trained.save_gpt2(enc, vocab);
  const auto from_rank = tk::Cl100kTokenizer::from_tiktoken_file(
      rank, std::vector<tk::SpecialToken>{{"<|endoftext|>", 400}});
  const auto from_gpt2 = tk::Cl100kTokenizer(
      tk::BpeModel::from_gpt2(tk::read_file(enc), enc, tk::read_file(vocab), vocab));
  EXPECT_EQ(from_rank.vocab_size(), trained.vocab_size());
  EXPECT_EQ(from_gpt2.vocab_size(), trained.vocab_size());
  const std::string text =
      corpus + tk::read_file(std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/corpus/arabic.txt") +
      "<|endoftext|> \x80\xFF";
  const Ids ids = trained.encode(text, tk::SpecialTokens::kRecognize);
  EXPECT_EQ(from_rank.encode(text, tk::SpecialTokens::kRecognize), ids);
  EXPECT_EQ(from_gpt2.encode(text, tk::SpecialTokens::kRecognize), ids);
  EXPECT_EQ(trained.decode(ids), text);
  // The merges a rank file implies are the ones training made.
  EXPECT_EQ(from_rank.model().merges(), trained.model().merges());
  for (const auto& f : {rank, enc, vocab}) std::filesystem::remove(f);
}

TEST(BpeFormats, MutatedFilesLoadOrThrowFormatErrorNeverCrash) {
  // Random byte edits of valid files: every outcome is a loaded model or a
  // kappa::FormatError (run under the asan preset for memory errors).
  const std::string rank = rank_file({"ab", "bc", "abc"});
  const auto& abc = tk::gpt2_alphabet();
  std::string json = "{";
  for (int b = 0; b < 256; ++b)
    json += tk::json_quote(abc.encode(std::string(1, static_cast<char>(b)))) + ": " +
            std::to_string(b) + ", ";
  json += "\"ab\": 256, \"\\u0120x\": 257, \"<|endoftext|>\": 258}";
  const std::string merges = "#version: 0.2\na b\n\xC4\xA0 x\n";
  std::mt19937 gen(99);
  int loaded = 0, rejected = 0;
  for (int k = 0; k < 600; ++k) {
    std::string r = rank, j = json, m = merges;
    std::string& victim = k % 3 == 0 ? r : (k % 3 == 1 ? j : m);
    const int edits = 1 + static_cast<int>(gen() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = gen() % victim.size();
      switch (gen() % 3) {
        case 0:
          victim[at] = static_cast<char>(gen() % 256);
          break;
        case 1:
          victim.erase(at, 1 + gen() % 4);
          break;
        default:
          victim.insert(at, 1, "{}\":, \n\\=0x"[gen() % 11]);
          break;
      }
      if (victim.empty())
        victim.push_back('x');  // (= "x": a false GCC 12 -Wrestrict in a unity TU)
    }
    try {
      if (k % 3 == 0) {
        (void)tk::BpeModel::from_tiktoken(r, "r.tiktoken", {});
      } else {
        (void)tk::BpeModel::from_gpt2(j, "encoder.json", m, "vocab.bpe");
      }
      ++loaded;
    } catch (const kappa::FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);  // most edits break something...
  EXPECT_GT(loaded, 10);     // ...some are harmless (e.g. a changed digit in a rank)
}

// ---- hardening ---------------------------------------------------------------

namespace {

/// encoder.json with the 256 single bytes (ids = byte values) and `extra`
/// ("token": id pairs, tokens in GPT-2's alphabet).
std::string encoder_json(const std::vector<std::pair<std::string, int>>& extra) {
  const auto& abc = tk::gpt2_alphabet();
  std::string json = "{";
  for (int b = 0; b < 256; ++b)
    json += tk::json_quote(abc.encode(std::string(1, static_cast<char>(b)))) + ": " +
            std::to_string(b) + ", ";
  for (const auto& [t, id] : extra) json += tk::json_quote(t) + ": " + std::to_string(id) + ", ";
  json.resize(json.size() - 2);
  return json + "}";
}

auto gpt2_loader(const std::string& j, const std::string& m) {
  return [j, m] { (void)tk::BpeModel::from_gpt2(j, "encoder.json", m, "vocab.bpe"); };
}

/// The reference for SpecialTokens::kRecognize: at each position, the longest
/// special token that starts there, else the next byte belongs to the text.
Ids naive_recognize(const tk::Gpt2Tokenizer& t, std::string_view text) {
  Ids out;
  std::string run;
  for (std::size_t i = 0; i < text.size();) {
    const tk::SpecialToken* best = nullptr;
    for (const auto& s : t.model().special_tokens())
      if (text.substr(i).starts_with(s.text) && (!best || s.text.size() > best->text.size()))
        best = &s;
    if (!best) {
      run += text[i++];
      continue;
    }
    const Ids part = t.encode(run);
    out.insert(out.end(), part.begin(), part.end());
    run.clear();
    out.push_back(best->id);
    i += best->text.size();
  }
  const Ids part = t.encode(run);
  out.insert(out.end(), part.begin(), part.end());
  return out;
}

}  // namespace

// Defect 1: a merge operand that no merge makes (and that is no single byte)
// used to become a special token; with an id above every mergeable id the
// loader read past the end of its token table, with a lower id to_gpt2()
// wrote files that from_gpt2() rejected. Now it is a FormatError.
TEST(BpeFormats, Gpt2MergeOperandThatNoMergeMakesIsAFormatError) {
  const std::string merges = "#version: 0.2\na b\nxy ab\n";
  EXPECT_EQ(error_of(gpt2_loader(encoder_json({{"ab", 256}, {"xyab", 257}, {"xy", 258}}), merges)),
            "kappa: vocab.bpe:3: merge \"xy ab\": token \"xy\" is neither a single byte nor made "
            "by a merge in vocab.bpe");
  EXPECT_EQ(error_of(gpt2_loader(encoder_json({{"xy", 256}, {"ab", 257}, {"xyab", 258}}), merges)),
            "kappa: vocab.bpe:3: merge \"xy ab\": token \"xy\" is neither a single byte nor made "
            "by a merge in vocab.bpe");
  // With the merge that makes "xy" (on any line) the file is consistent and
  // the round trip through to_gpt2() gives the same tokenizer.
  const std::string full = "#version: 0.2\na b\nxy ab\nx y\n";
  const auto t = tk::Gpt2Tokenizer(tk::BpeModel::from_gpt2(
      encoder_json({{"xy", 256}, {"ab", 257}, {"xyab", 258}, {"<|endoftext|>", 259}}),
      "encoder.json", full, "vocab.bpe"));
  EXPECT_EQ(t.encode("xyab ab xy"), (Ids{258, ' ', 257, ' ', 256}));
  const auto [json, bpe] = t.model().to_gpt2();
  const auto back =
      tk::Gpt2Tokenizer(tk::BpeModel::from_gpt2(json, "encoder.json", bpe, "vocab.bpe"));
  EXPECT_EQ(back.vocab_size(), 260u);
  EXPECT_EQ(back.encode("xyab ab xy<|endoftext|>", tk::SpecialTokens::kRecognize),
            (Ids{258, ' ', 257, ' ', 256, 259}));
}

// Defect 5: truncated files and incomplete merges are FormatErrors.
TEST(BpeFormats, RankGapsTruncationAndIncompleteMergesAreFormatErrors) {
  auto load = [](const std::string& text, std::vector<tk::SpecialToken> specials = {}) {
    return [text, specials] { (void)tk::BpeModel::from_tiktoken(text, "r.tiktoken", specials); };
  };
  // A gap in the ranks: 256 "ab", 258 "bc" (257 missing).
  std::string gap = rank_file({"ab"}) + tk::base64_encode("bc") + " 258\n";
  EXPECT_EQ(error_of(load(gap)),
            "kappa: r.tiktoken:258: rank 257 is missing (ranks must be 0..n-1 without gaps; "
            "this line has rank 258)");
  // A special token may fill the gap (p50k_base has <|endoftext|> at 50256).
  EXPECT_EQ(error_of(load(gap, {{"<|end|>", 257}})), "<no error>");
  // A rank file truncated at a line boundary, loaded with the default special
  // tokens of a known encoding (cl100k_base's start at 100257).
  const std::string cut = temp_path("cl100k_cut.tiktoken");
  tk::write_file(cut, rank_file({"ab", "bc"}));
  EXPECT_EQ(error_of([&] { (void)tk::Cl100kTokenizer::from_tiktoken_file(cut); }),
            "kappa: " + cut +
                ": the ranks end at 257 (line 258), but the special tokens start at 100257: the "
                "file is truncated or is not the encoding's rank file");
  EXPECT_EQ(error_of([&] {
              (void)tk::Cl100kTokenizer::from_tiktoken_file(cut, std::vector<tk::SpecialToken>{});
            }),
            "<no error>");
  std::filesystem::remove(cut);

  // vocab.bpe truncated at a line boundary: "abc" is made by no merge.
  const std::string json = encoder_json({{"ab", 256}, {"bc", 257}, {"abc", 258}});
  EXPECT_EQ(error_of(gpt2_loader(json, "#version: 0.2\na b\nb c\nab c\n")), "<no error>");
  EXPECT_EQ(error_of(gpt2_loader(json, "#version: 0.2\na b\nb c\n")),
            "kappa: vocab.bpe:3: the file ends, but no merge makes token \"abc\" (id 258 of "
            "encoder.json), which is \"a\" + \"bc\": is vocab.bpe truncated?");
  // A token made by two merges.
  EXPECT_EQ(error_of(gpt2_loader(json, "#version: 0.2\na b\nb c\nab c\na bc\n")),
            "kappa: vocab.bpe:5: merge \"a bc\" makes \"abc\", which line 4 already makes");
  // GPT-2's own layout still loads: <|endoftext|> is made by no merge and
  // splits into no two tokens, so it is a special token.
  const std::string with_special =
      encoder_json({{"ab", 256}, {"bc", 257}, {"abc", 258}, {"<|endoftext|>", 259}});
  const auto t = tk::Gpt2Tokenizer(tk::BpeModel::from_gpt2(
      with_special, "encoder.json", "#version: 0.2\na b\nb c\nab c\n", "vocab.bpe"));
  EXPECT_TRUE(t.model().is_special(259));
  EXPECT_EQ(t.encode("abc<|endoftext|>", tk::SpecialTokens::kRecognize), (Ids{258, 259}));
}

// Defect 6: bytes from a file reach messages escaped, never raw.
TEST(BpeFormats, ErrorMessagesEscapeControlBytes) {
  const std::string good = rank_file({"ab"});
  auto msg = [](const std::string& text) {
    return error_of([text] { (void)tk::BpeModel::from_tiktoken(text, "r.tiktoken", {}); });
  };
  const std::string base64 = msg(good + "\x1b[2J= 257\n");
  EXPECT_EQ(base64, "kappa: r.tiktoken:258: invalid base64 \"\\x1b[2J=\"");
  const std::string rank = msg(good + "eHk= 2\x1b]0;pwned\x07\n");
  EXPECT_EQ(rank, "kappa: r.tiktoken:258: invalid rank \"2\\x1b]0;pwned\\x07\"");
  for (const std::string& m : {base64, rank})
    for (char c : m) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << m;
  EXPECT_EQ(kappa::quoted("a\x1b\n\\\x7f\xc3\xa9\xc2\x85"),
            "\"a\\x1b\\x0a\\\\\\x7f\xc3\xa9\\u0085\"");
}

// Defect 4: a directory or an unreadable path is a FormatError naming it,
// never an empty file.
TEST(BpeFormats, DirectoriesAndUnreadableFilesAreFormatErrors) {
  const std::string dir = temp_path("dir");
  std::filesystem::create_directories(dir);
  EXPECT_EQ(error_of([&] { (void)tk::read_file(dir); }),
            "kappa: cannot read '" + dir + "': it is a directory");
  EXPECT_EQ(error_of([&] { (void)tk::Cl100kTokenizer::from_tiktoken_file(dir); }),
            "kappa: cannot read '" + dir + "': it is a directory");
  EXPECT_EQ(error_of([&] { (void)tk::Gpt2Tokenizer::from_gpt2_files(dir, dir + "/vocab.bpe"); }),
            "kappa: cannot read '" + dir + "': it is a directory");
  EXPECT_EQ(error_of([&] { tk::write_file(dir, "x"); }), "kappa: cannot write '" + dir + "'");
  EXPECT_EQ(error_of([&] { (void)tk::read_file(dir + "/missing"); }),
            "kappa: cannot open '" + dir + "/missing'");
  std::filesystem::remove_all(dir);
}

// Defect 2: recognizing special tokens is one pass; the result is the
// leftmost, then longest, special token (as before), checked against a naive
// scan on random text full of overlapping special tokens.
TEST(Bpe, RecognizedSpecialTokensAreLeftmostLongest) {
  const auto t = tiny({{"<|a|>", 300}, {"<|a|>b", 301}, {"|a", 302}, {"a|><", 303}, {"<", 304}});
  EXPECT_EQ(t.encode("x<|a|>bc", tk::SpecialTokens::kRecognize), (Ids{'x', 301, 'c'}));
  EXPECT_EQ(t.encode("|a|><|a|", tk::SpecialTokens::kRecognize),
            (Ids{302, '|', '>', 304, 302, '|'}));
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> pick(0, 5), len(0, 60);
  for (int k = 0; k < 2000; ++k) {
    std::string s;
    const int n = len(gen);
    for (int i = 0; i < n; ++i) s += "<|a>b"[pick(gen) % 5];
    if (k % 7 == 0) s += "<|a|>";
    ASSERT_EQ(t.encode(s, tk::SpecialTokens::kRecognize), naive_recognize(t, s)) << s;
  }
}

// Defect 8 (and 2): one megabyte of adversarial input completes and round
// trips; the time per byte is shown by bench_tokenize (BM_LongWord,
// BM_Specials), not timed here. 64 KiB of each under the sanitizers: the same
// paths, a sixteenth of the bytes.
TEST(Bpe, MegabyteAdversarialInputsRoundTrip) {
  // <|start|> never occurs: the scan that looked for each special token again
  // after every match was quadratic here.
  const auto t = tiny({{"<|end|>", 300}, {"<|start|>", 301}});
  constexpr std::size_t kMb = std::size_t{1} << kappa::testing::unless_sanitized(20, 16);
  std::mt19937 gen(3);
  std::string word;  // random letters, no spaces: one piece
  for (std::size_t i = 0; i < kMb; ++i) word += static_cast<char>('a' + gen() % 4);
  const Ids w = t.encode(word);
  EXPECT_EQ(t.decode(w), word);
  EXPECT_LT(w.size(), word.size());
  const std::string same(kMb, 'a');  // one repeated character: kMb / 2 x "aa"
  const Ids a = t.encode(same);
  EXPECT_EQ(a, Ids(kMb / 2, 259));
  EXPECT_EQ(t.decode(a), same);
  std::string specials;  // back-to-back special tokens
  while (specials.size() < kMb) specials += "<|end|>";
  const Ids s = t.encode(specials, tk::SpecialTokens::kRecognize);
  EXPECT_EQ(s, Ids(specials.size() / 7, 300));
  EXPECT_EQ(t.decode(s), specials);
  const Ids as_text = t.encode(specials);
  EXPECT_EQ(t.decode(as_text), specials);
  std::string mixed;  // specials between pieces of text
  while (mixed.size() < kMb) mixed += "ab <|end|>aa<|end";
  const Ids m = t.encode(mixed, tk::SpecialTokens::kRecognize);
  EXPECT_EQ(t.decode(m), mixed);
  EXPECT_EQ(std::count(m.begin(), m.end(), 300), static_cast<long>(mixed.size() / 17));
}

// add_merge is public (the trainer and HfTokenizer build models with it): ids
// that are not mergeable tokens are a RangeError, not a read past the table.
TEST(Bpe, AddMergeRejectsIdsThatAreNotMergeableTokens) {
  tk::BpeModel m;
  for (int b = 0; b < 256; ++b) m.add_token(std::string(1, static_cast<char>(b)), b, "t", 0);
  m.add_token("ab", 256, "t", 0);
  m.finish_tokens("t");
  EXPECT_EQ(error_of([&] { m.add_merge(300, 'b', 256, 0); }),
            "RangeError: kappa: merge token id 300 is out of range for a vocabulary of size 257");
  EXPECT_EQ(error_of([&] { m.add_merge('a', 'b', 256, 0); }), "<no error>");
  m.set_specials({{"<s>", 257}}, "t");
  EXPECT_EQ(error_of([&] { m.add_merge_quiet(257, 'b', 256, 1); }),
            "RangeError: kappa: merge token id 257 is not a mergeable token");
}

// The long-piece merge (heap, above 64 bytes) against the definition: merge
// the adjacent pair of lowest priority, the leftmost on ties, until none.
TEST(Bpe, LongPieceMergeEqualsTheDefinition) {
  tk::BpeTrainOptions options;
  options.vocab_size = 300;
  std::string corpus;
  std::mt19937 gen(17);
  for (int k = 0; k < 4000; ++k) corpus += "abcab"[gen() % 5];
  const auto t = tk::train_bpe<tk::Gpt2Split>(corpus, options);
  ASSERT_GT(t.model().mergeable_count(), 280u);
  auto definition = [&](const std::string& piece) {
    Ids ids;
    for (char c : piece) ids.push_back(*t.find(std::string(1, c)));
    for (;;) {
      std::size_t best = ids.size();
      std::uint32_t best_priority = tk::BpeModel::kNoMerge;
      for (std::size_t k = 0; k + 1 < ids.size(); ++k) {
        const auto m = t.model().merge_of(static_cast<std::uint32_t>(ids[k]),
                                          static_cast<std::uint32_t>(ids[k + 1]));
        if (m.priority < best_priority) {
          best_priority = m.priority;
          best = k;
        }
      }
      if (best == ids.size()) return ids;
      ids[best] = static_cast<TokenId>(t.model()
                                           .merge_of(static_cast<std::uint32_t>(ids[best]),
                                                     static_cast<std::uint32_t>(ids[best + 1]))
                                           .result);
      ids.erase(ids.begin() + static_cast<long>(best) + 1);
    }
  };
  std::uniform_int_distribution<int> len(65, 700);
  for (int k = 0; k < 200; ++k) {
    std::string piece;
    const int n = len(gen);
    for (int i = 0; i < n; ++i) piece += "abc"[gen() % (k % 2 ? 3 : 2)];
    if (t.find(piece)) continue;  // a whole token: no merging
    ASSERT_EQ(t.encode(piece), definition(piece)) << piece;
  }
}

// The GPT-2 round trip is exact or refused at saving: a special token that
// from_gpt2 would read as something else is a FormatError in to_gpt2.
TEST(BpeFormats, ToGpt2RefusesSpecialTokensItCannotWrite) {
  auto save = [](std::vector<tk::SpecialToken> specials) {
    return error_of([specials] { (void)tiny(specials).model().to_gpt2(); });
  };
  EXPECT_EQ(save({{"<|end|>", 300}}), "<no error>");
  EXPECT_EQ(save({{"<|a b|>", 300}}),
            "kappa: to_gpt2: special token \"<|a b|>\" has characters outside GPT-2's byte "
            "alphabet; GPT-2's encoder.json cannot hold it (save as tiktoken)");
  EXPECT_EQ(save({{"<a", 300}}),
            "kappa: to_gpt2: special token \"<a\" is the mergeable tokens \"<\" + \"a\"; GPT-2's "
            "encoder.json cannot hold it (save as tiktoken)");
  // What it writes loads back to the same tokenizer, specials included.
  const auto t = tiny({{"<|end|>", 300}});
  const auto [json, bpe] = t.model().to_gpt2();
  const auto back =
      tk::Gpt2Tokenizer(tk::BpeModel::from_gpt2(json, "encoder.json", bpe, "vocab.bpe"));
  const std::string text = "aaabcab bc<|end|>abc";
  EXPECT_EQ(back.encode(text, tk::SpecialTokens::kRecognize),
            t.encode(text, tk::SpecialTokens::kRecognize));
  EXPECT_EQ(back.vocab_size(), t.vocab_size());
}
