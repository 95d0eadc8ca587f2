// tests/tokenize/wordpiece_test.cpp - WordPiece (BERT) against Hugging Face
// tokenizers: the ids and decodings that tests/tokenize/peer/wordpiece_peer.cjs
// wrote with the npm binding @anush008/tokenizers into
// tests/data/tokenize/wordpiece/peer_ids.json, for every input and every
// configuration, from a tokenizer.json and from vocab.txt +
// tokenizer_config.json; then the loaders' errors and BERT run on the ids.
#include "kappa/tokenize/wordpiece.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/hf.hpp"

namespace {
namespace wordpiece_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
using kappa::TokenId;
using kappa::tokenize::AddSpecial;
using kappa::tokenize::HfTokenizer;
using kappa::tokenize::SkipSpecial;
using kappa::tokenize::WordPieceTokenizer;

static_assert(kappa::tokenize::Tokenizer<WordPieceTokenizer>);

const fs::path kData = KAPPA_TEST_DATA_DIR "/tokenize";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const nlohmann::json& golden() {
  static const nlohmann::json j =
      nlohmann::json::parse(read_bytes(kData / "wordpiece" / "peer_ids.json"));
  return j;
}

/// A fresh directory under the temporary directory, removed at exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             ("kappa_wordpiece_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

std::vector<std::string> vocab_lines(const fs::path& p) {
  std::vector<std::string> out;
  std::istringstream in(read_bytes(p));
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

/// The tokenizer.json the peer script builds (wordpiece_peer.cjs tokenizerJson).
nlohmann::json tokenizer_json(const std::vector<std::string>& tokens,
                              const nlohmann::json& normalizer) {
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t k = 0; k < tokens.size(); ++k) vocab[tokens[k]] = k;
  nlohmann::json added = nlohmann::json::array();
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (vocab.contains(s))
      added.push_back({{"id", vocab[s]},
                       {"content", s},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  nlohmann::json n = {
      {"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true}};
  n.update(normalizer);
  const auto special = [](const char* name) {
    return nlohmann::json{{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
  };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", n},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {special("[CLS]"), {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, special("[SEP]")}},
            {"special_tokens",
             {{"[CLS]", {{"id", "[CLS]"}, {"ids", {vocab["[CLS]"]}}, {"tokens", {"[CLS]"}}}},
              {"[SEP]", {{"id", "[SEP]"}, {"ids", {vocab["[SEP]"]}}, {"tokens", {"[SEP]"}}}}}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 100},
            {"vocab", vocab}}}};
}

void write(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

/// Compares `t` with the peer's configuration `config` on every input;
/// returns the number of inputs that match in all four fields.
/// `Tok` is WordPieceTokenizer or HfTokenizer (the one call that loads any
/// directory), which must give the same ids.
template <class Tok>
std::size_t compare_all(const Tok& t, const std::string& config, const std::string& layout) {
  std::size_t matched = 0, reported = 0;
  for (const nlohmann::json& c : golden()["cases"]) {
    const std::string name = c["name"].get<std::string>();
    const std::string text = c.contains("file") ? read_bytes(kData / c["file"].get<std::string>())
                                                : c["text"].get<std::string>();
    const nlohmann::json& want = c[config];
    const auto ids = want["ids"].get<std::vector<TokenId>>();
    const auto plain = want["plain"].get<std::vector<TokenId>>();
    const std::vector<TokenId> got = t.encode(text);
    const std::vector<TokenId> got_plain = t.encode(text, AddSpecial::kNo);
    const std::string dec_skip = t.decode(got, SkipSpecial::kYes);
    const std::string dec = t.decode(got_plain, SkipSpecial::kNo);
    const bool ok = got == ids && got_plain == plain &&
                    dec_skip == want["decode_skip"].get<std::string>() &&
                    dec == want["decode"].get<std::string>();
    if (ok) {
      ++matched;
    } else if (reported++ < 5) {
      ADD_FAILURE() << layout << " " << config << " " << name << ": " << kappa::quoted(text, 200)
                    << "\n ids " << ::testing::PrintToString(got) << "\nwant "
                    << ::testing::PrintToString(ids) << "\n decode " << kappa::quoted(dec, 200)
                    << "\n   want " << kappa::quoted(want["decode"].get<std::string>(), 200);
    }
  }
  return matched;
}

struct Layout {
  const char* config;
  const char* vocab;  // relative to tests/data/tokenize
  nlohmann::json normalizer;
  nlohmann::json tokenizer_config;
};

std::vector<Layout> layouts() {
  const char* base = "wordpiece/bert-base-uncased/vocab.txt";
  return {
      {"uncased",
       base,
       {{"strip_accents", nullptr}, {"lowercase", true}},
       {{"do_lower_case", true}}},
      {"cased",
       base,
       {{"strip_accents", nullptr}, {"lowercase", false}},
       {{"do_lower_case", false}}},
      {"strip",
       base,
       {{"strip_accents", true}, {"lowercase", false}},
       {{"do_lower_case", false}, {"strip_accents", true}}},
      {"keep_accents",
       base,
       {{"strip_accents", false}, {"lowercase", true}},
       {{"do_lower_case", true}, {"strip_accents", false}}},
      {"tiny", "../models/bert/vocab.txt", {{"strip_accents", nullptr}, {"lowercase", true}}, {}},
  };
}

TEST(WordPiece, EveryInputMatchesHuggingFaceFromTokenizerJson) {
  const std::size_t n = golden()["cases"].size();
  ASSERT_GT(n, 600u);
  for (const Layout& l : layouts()) {
    TempDir dir(std::string("json_") + l.config);
    write(dir.path / "tokenizer.json",
          tokenizer_json(vocab_lines(kData / l.vocab), l.normalizer).dump());
    const WordPieceTokenizer t = WordPieceTokenizer::from_directory(dir.path.string());
    EXPECT_EQ(compare_all(t, l.config, "tokenizer.json"), n) << l.config;
    const HfTokenizer hf = HfTokenizer::from_directory(dir.path.string());
    EXPECT_EQ(hf.family(), kappa::tokenize::TokenizerFamily::kWordPiece);
    EXPECT_EQ(compare_all(hf, l.config, "HfTokenizer tokenizer.json"), n) << l.config;
  }
}

TEST(WordPiece, EveryInputMatchesHuggingFaceFromVocabTxt) {
  const std::size_t n = golden()["cases"].size();
  for (const Layout& l : layouts()) {
    if (std::string(l.config) == "tiny") {
      // The tiny BERT's own directory: vocab.txt + tokenizer_config.json.
      const WordPieceTokenizer t =
          WordPieceTokenizer::from_directory(KAPPA_TEST_DATA_DIR "/models/bert");
      EXPECT_EQ(t.vocab_size(), 98u);
      EXPECT_EQ(compare_all(t, l.config, "vocab.txt"), n);
      const HfTokenizer hf = HfTokenizer::from_directory(KAPPA_TEST_DATA_DIR "/models/bert");
      EXPECT_EQ(hf.vocab_size(), 98u);
      EXPECT_EQ(compare_all(hf, l.config, "HfTokenizer vocab.txt"), n);
      // BERT names no BOS / EOS: the template's [CLS] and [SEP] stand in.
      EXPECT_EQ(hf.bos_id(), t.find("[CLS]"));
      EXPECT_EQ(hf.eos_id(), t.find("[SEP]"));
      EXPECT_TRUE(hf.is_special(*t.find("[MASK]")));
      EXPECT_FALSE(hf.is_special(*t.find("!")));
      EXPECT_FALSE(hf.round_trips());
      continue;
    }
    TempDir dir(std::string("txt_") + l.config);
    fs::copy_file(kData / l.vocab, dir.path / "vocab.txt");
    write(dir.path / "tokenizer_config.json", l.tokenizer_config.dump());
    const WordPieceTokenizer t = WordPieceTokenizer::from_directory(dir.path.string());
    EXPECT_EQ(compare_all(t, l.config, "vocab.txt"), n) << l.config;
    const HfTokenizer hf = HfTokenizer::from_directory(dir.path.string());
    EXPECT_EQ(compare_all(hf, l.config, "HfTokenizer vocab.txt"), n) << l.config;
  }
}

TEST(WordPiece, VocabularyAndKnownIds) {
  const WordPieceTokenizer t = WordPieceTokenizer::from_vocab_txt(
      (kData / "wordpiece/bert-base-uncased/vocab.txt").string());
  EXPECT_EQ(t.vocab_size(), 30522u);
  EXPECT_EQ(t.token_to_id("[CLS]"), TokenId{101});
  EXPECT_EQ(t.id_to_token(2015), "##s");
  EXPECT_EQ(t.unk_id(), 100);
  // BERT's own example: "i like strawberries" -> i like straw ##berries.
  EXPECT_EQ(t.encode("I like strawberries", AddSpecial::kNo),
            (std::vector<TokenId>{1045, 2066, 13137, 20968}));
  const std::vector<TokenId> ids = t.encode("Hello, world!");
  EXPECT_EQ(t.decode(ids, SkipSpecial::kYes), "hello, world!");
  EXPECT_EQ(t.decode(ids), "[CLS] hello, world! [SEP]");
  EXPECT_THROW((void)t.token(30522), kappa::RangeError);
  const std::vector<TokenId> bad{30522};
  EXPECT_THROW((void)t.decode(bad), kappa::RangeError);
}

TEST(WordPiece, NormalizerPieces) {
  using kappa::tokenize::bert_normalize;
  kappa::tokenize::BertNormalizerOptions o;
  EXPECT_EQ(bert_normalize("H\xC3\xA9llo\tW\xC3\xB6rld\x01", o), "hello world");
  EXPECT_EQ(bert_normalize("\xE4\xB8\xAD\xE6\x96\x87", o), " \xE4\xB8\xAD  \xE6\x96\x87 ");
  EXPECT_EQ(bert_normalize("\xEA\xB0\x80", o), "\xE1\x84\x80\xE1\x85\xA1");  // Hangul to jamo
  EXPECT_EQ(bert_normalize("\xC4\xB0", o), "i");  // U+0130 -> i U+0307 -> i
  o.lowercase = false;
  EXPECT_EQ(bert_normalize("\xC3\x89", o), "\xC3\x89");  // strip_accents follows lowercase
  o.strip_accents = true;
  EXPECT_EQ(bert_normalize("\xC3\x89", o), "E");
}

// ---- loader errors -------------------------------------------------------------

std::string load_error(const std::string& tag, const nlohmann::json& j) {
  TempDir dir(tag);
  write(dir.path / "tokenizer.json", j.dump());
  try {
    (void)WordPieceTokenizer::from_tokenizer_json((dir.path / "tokenizer.json").string());
  } catch (const kappa::FormatError& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(WordPiece, TokenizerJsonErrorsNameTheFileAndKey) {
  const nlohmann::json good =
      tokenizer_json({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##b"}, nlohmann::json::object());
  EXPECT_EQ(load_error("good", good), "(loaded)");
  nlohmann::json j = good;
  j["model"]["type"] = "BPE\x1b[2J";
  EXPECT_NE(load_error("type", j).find("model.type: \"BPE\\x1b[2J\" is not WordPiece"),
            std::string::npos)
      << load_error("type", j);
  j = good;
  j["model"]["vocab"]["a"] = 99;
  EXPECT_NE(load_error("id", j).find("model.vocab.\"a\": the id must be"), std::string::npos);
  j = good;
  j["model"]["unk_token"] = "<unk>";
  EXPECT_NE(load_error("unk", j).find("the unknown token \"<unk>\" is not in the vocabulary"),
            std::string::npos);
  j = good;
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(load_error("norm", j).find("normalizer.type: \"NFKC\" is not supported"),
            std::string::npos);
  j = good;
  j["decoder"] = {{"type", "ByteLevel"}};
  EXPECT_NE(load_error("dec", j).find("decoder.type"), std::string::npos);
  j = good;
  j["added_tokens"][0]["lstrip"] = "yes";  // the flags are read (added_tokens_test.cpp)
  EXPECT_NE(load_error("lstrip", j).find("added_tokens[0].lstrip: not true or false"),
            std::string::npos);
  j = good;
  j["post_processor"]["special_tokens"].erase("[SEP]");
  EXPECT_NE(load_error("tmpl", j).find("post_processor.special_tokens.\"[SEP]\""),
            std::string::npos);
}

TEST(WordPiece, VocabTxtErrors) {
  TempDir dir("vocab_err");
  write(dir.path / "vocab.txt", "[UNK]\n[CLS]\n[SEP]\na\na\n");
  try {
    (void)WordPieceTokenizer::from_vocab_txt((dir.path / "vocab.txt").string());
    ADD_FAILURE() << "loaded";
  } catch (const kappa::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("token \"a\" appears twice (ids 3 and 4)"),
              std::string::npos)
        << e.what();
  }
  write(dir.path / "vocab.txt", "[UNK]\n[CLS]\n[SEP]\na\n");
  write(dir.path / "tokenizer_config.json", R"({"do_lower_case": "yes"})");
  try {
    (void)WordPieceTokenizer::from_directory(dir.path.string());
    ADD_FAILURE() << "loaded";
  } catch (const kappa::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: do_lower_case: not true or false"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)WordPieceTokenizer::from_vocab_txt(dir.path.string()), kappa::FormatError);
}

// ---- BERT on the ids -----------------------------------------------------------

TEST(WordPiece, TinyBertRunsOnItsOwnTokenizersIds) {
  const fs::path dir = KAPPA_TEST_DATA_DIR "/models/bert";
  const WordPieceTokenizer t = WordPieceTokenizer::from_directory(dir.string());
  const std::vector<TokenId> ids = t.encode("Hello, world! The cat sat.");
  ASSERT_EQ(ids.front(), *t.find("[CLS]"));
  ASSERT_EQ(ids.back(), *t.find("[SEP]"));
  const kappa::Bert<float> bert = kappa::hf::load_bert<float>(dir);
  const std::vector<TokenId> types(ids.size(), 0);
  const auto logits = bert.mlm_logits(ids, types);
  EXPECT_EQ(static_cast<std::size_t>(logits.rows()), ids.size());
  EXPECT_EQ(static_cast<std::size_t>(logits.cols()), t.vocab_size());
  EXPECT_TRUE(logits.allFinite());
}

}  // namespace wordpiece_test
}  // namespace
