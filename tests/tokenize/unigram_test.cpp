// Tests of the Unigram tokenizer (unigram.hpp): Viterbi segmentation over the
// piece scores, unk fusing, byte fallback, the Precompiled (SentencePiece
// charsmap), Replace, Strip and Lowercase normalizers, WhitespaceSplit and
// Metaspace, TemplateProcessing and the decoders.
//
// The expected ids and decodings are Hugging Face tokenizers' own
// (@anush008/tokenizers, the native Rust binding), committed in
// tests/data/tokenize/unigram/peer_ids.json by
// tests/tokenize/peer/unigram_peer.cjs golden, for the synthetic tokenizers of
// tests/data/tokenize/unigram/<config>/tokenizer.json (unigram_peer.cjs make;
// README.md there). Every input, every configuration: ids with and without
// the template, decode, decode skipping special tokens.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/unigram.hpp"

namespace {
namespace unigram_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
using kappa::TokenId;
using kappa::tokenize::AddSpecial;
using kappa::tokenize::SkipSpecial;
using kappa::tokenize::UnigramTokenizer;
using json = nlohmann::json;

static_assert(kappa::tokenize::Tokenizer<UnigramTokenizer>);

const fs::path kData = fs::path(KAPPA_TEST_DATA_DIR) / "tokenize";
const char* const kConfigs[] = {"t5", "albert", "bytes", "first", "strip_first"};

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const json& golden() {
  static const json j = json::parse(read(kData / "unigram" / "peer_ids.json"));
  return j;
}

UnigramTokenizer load(const std::string& config) {
  return UnigramTokenizer::from_tokenizer_json(
      (kData / "unigram" / config / "tokenizer.json").string());
}

TEST(Unigram, MatchesHuggingFaceOnEveryInput) {
  const json& cases = golden()["cases"];
  ASSERT_GT(cases.size(), 500u);
  for (const char* config : kConfigs) {
    SCOPED_TRACE(config);
    const UnigramTokenizer tok = load(config);
    std::size_t matched = 0, failures = 0;
    for (const json& c : cases) {
      const std::string text = c.contains("file") ? read(kData / c["file"].get<std::string>())
                                                  : c["text"].get<std::string>();
      const json& want = c[config];
      const auto ids = want["ids"].get<std::vector<TokenId>>();
      const auto plain = want["plain"].get<std::vector<TokenId>>();
      const std::vector<TokenId> got = tok.encode(text);
      const std::vector<TokenId> got_plain = tok.encode(text, AddSpecial::kNo);
      const std::string dec = tok.decode(plain, SkipSpecial::kNo);
      const std::string dec_skip = tok.decode(ids, SkipSpecial::kYes);
      const bool ok = got == ids && got_plain == plain &&
                      dec == want["decode"].get<std::string>() &&
                      dec_skip == want["decode_skip"].get<std::string>();
      if (ok) {
        ++matched;
        continue;
      }
      if (++failures > 5) continue;
      ADD_FAILURE() << c["name"].get<std::string>() << ": text " << json(text).dump()
                    << "\n got ids  " << json(got).dump() << "\n want ids " << json(ids).dump()
                    << "\n got plain  " << json(got_plain).dump() << "\n want plain "
                    << json(plain).dump() << "\n got decode  " << json(dec).dump()
                    << "\n want decode " << want["decode"].dump() << "\n got skip  "
                    << json(dec_skip).dump() << "\n want skip " << want["decode_skip"].dump();
    }
    EXPECT_EQ(matched, cases.size());
  }
}

// The one call that loads any hub directory gives the same ids and text.
TEST(Unigram, HfTokenizerFromDirectoryMatchesHuggingFace) {
  const json& cases = golden()["cases"];
  for (const char* config : kConfigs) {
    SCOPED_TRACE(config);
    const kappa::tokenize::HfTokenizer tok =
        kappa::tokenize::HfTokenizer::from_directory((kData / "unigram" / config).string());
    EXPECT_EQ(tok.family(), kappa::tokenize::TokenizerFamily::kUnigram);
    std::size_t matched = 0, failures = 0;
    for (const json& c : cases) {
      const std::string text = c.contains("file") ? read(kData / c["file"].get<std::string>())
                                                  : c["text"].get<std::string>();
      const json& want = c[config];
      const auto ids = want["ids"].get<std::vector<TokenId>>();
      const auto plain = want["plain"].get<std::vector<TokenId>>();
      const bool ok = tok.encode(text) == ids && tok.encode(text, AddSpecial::kNo) == plain &&
                      tok.decode(plain) == want["decode"].get<std::string>() &&
                      tok.decode(ids, SkipSpecial::kYes) == want["decode_skip"].get<std::string>();
      if (ok)
        ++matched;
      else if (++failures <= 5)
        ADD_FAILURE() << c["name"].get<std::string>() << ": " << json(text).dump();
    }
    EXPECT_EQ(matched, cases.size());
  }
}

TEST(Unigram, Basics) {
  const UnigramTokenizer tok = load("t5");
  EXPECT_EQ(tok.unk_id(), 2);
  EXPECT_EQ(tok.token(1), "</s>");
  EXPECT_EQ(tok.find("</s>"), std::optional<TokenId>(1));
  EXPECT_EQ(tok.token_to_id("<unk>"), std::optional<TokenId>(2));
  EXPECT_EQ(tok.id_to_token(2), "<unk>");
  EXPECT_FALSE(tok.find("no such piece").has_value());
  EXPECT_GT(tok.vocab_size(), 1000u);
  EXPECT_TRUE(tok.is_special(1));
  // The template appends </s>.
  const std::vector<TokenId> ids = tok.encode("hello");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 1);
  EXPECT_TRUE(tok.encode("", AddSpecial::kNo).empty());
  // The charsmap maps full-width letters to ASCII.
  EXPECT_EQ(tok.normalize("\xEF\xBC\xA8i"), "Hi");
  EXPECT_THROW((void)tok.token(static_cast<TokenId>(tok.vocab_size())), kappa::RangeError);
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{-1}), kappa::RangeError);
}

TEST(Unigram, ByteFallbackAndUnk) {
  const UnigramTokenizer bytes = load("bytes");
  // U+10348 is in no piece: its four bytes as <0xNN>, decoded back.
  const std::vector<TokenId> ids = bytes.encode("\xF0\x90\x8D\x88", AddSpecial::kNo);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(bytes.token(ids[ids.size() - 4]), "<0xF0>");
  EXPECT_EQ(bytes.decode(ids), "\xF0\x90\x8D\x88");
  const UnigramTokenizer t5 = load("t5");
  // Without byte fallback, consecutive unknown characters fuse into one unk.
  const std::vector<TokenId> unk = t5.encode("\xF0\x90\x8D\x88\xF0\x90\x8D\x88", AddSpecial::kNo);
  EXPECT_EQ(std::count(unk.begin(), unk.end(), t5.unk_id()), 1);
}

void expect_format_error(const std::string& text, const std::string& needle) {
  const fs::path p = fs::temp_directory_path() / "kappa_unigram_bad_tokenizer.json";
  {
    std::ofstream f(p, std::ios::binary);
    f << text;
  }
  try {
    (void)UnigramTokenizer::from_tokenizer_json(p.string());
    ADD_FAILURE() << "no FormatError for " << text;
  } catch (const kappa::FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(p.string()), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
  fs::remove(p);
}

TEST(Unigram, FormatErrorsNameFileAndKey) {
  expect_format_error("[1]", "(top level)");
  expect_format_error(R"({"model": {"type": "BPE"}})", "model.type");
  expect_format_error(R"({"model": {"type": "Unigram", "vocab": [["a"]], "unk_id": 0}})",
                      "model.vocab[0]");
  expect_format_error(R"({"model": {"type": "Unigram", "vocab": [["a", -1.0]]}})", "model.unk_id");
  expect_format_error(R"({"model": {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 5}})",
                      "model.unk_id");
  expect_format_error(
      R"({"normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA"},
          "model": {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 0}})",
      "normalizer.precompiled_charsmap");
  expect_format_error(
      R"({"normalizer": {"type": "NFKC\u001b"},
          "model": {"type": "Unigram", "vocab": [["a", -1.0]], "unk_id": 0}})",
      "\\x1b");
}

}  // namespace unigram_test
}  // namespace
