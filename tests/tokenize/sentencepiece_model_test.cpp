// Tests of kappa/tokenize/sentencepiece_model.hpp: reading a SentencePiece
// tokenizer.model (protobuf) and encoding / decoding with it.
//
// The reference is sentencepiece itself: tests/reference/make_sentencepiece_models.py
// trains five tiny models (Unigram with nmt_nfkc, Unigram with byte fallback,
// Llama-2-like BPE, BPE with unknowns, Unigram with user-defined symbols and
// its own normalization rules) and writes the sentencepiece 0.1.97 Python
// binding's EncodeAsIds / DecodeIds on the corpus, fixed cases, invalid
// UTF-8 and 300 random stress strings into
// tests/data/tokenize/sentencepiece/golden.json. Every input of every model
// must match exactly: Unigram models through to_unigram(), BPE models
// through HfTokenizer::from_sentencepiece() (Hugging Face's layout, with special-token text
// as plain text, as sentencepiece treats it). Hostile files (truncated
// varints, lengths past the end, wrong wire types, too many pieces, an empty
// file, a FIFO, and every prefix of a real model) must be a FormatError
// naming the file and the byte.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/sentencepiece_model.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace {
namespace sentencepiece_model_test {  // (one TU with the area's other files)

namespace fs = std::filesystem;
namespace tk = kappa::tokenize;
using kappa::TokenId;
using json = nlohmann::json;
using ::testing::HasSubstr;

const fs::path kDir = fs::path(KAPPA_TEST_DATA_DIR) / "tokenize" / "sentencepiece";

const json& golden() {
  static const json g = kappa::read_json_file((kDir / "golden.json").string());
  return g;
}

std::string input_bytes(const json& item) {
  if (item.contains("text")) return item["text"].get<std::string>();
  const std::string hex = item["hex"].get<std::string>();
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string show(const std::string& s) {
  return kappa::quoted(s, 200);
}

// ---- the committed models against sentencepiece ---------------------------

class SentencePieceGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(SentencePieceGolden, ParsedFieldsMatchTheBinding) {
  const std::string name = GetParam();
  const json& g = golden()["models"][name];
  const tk::SentencePieceModel m =
      tk::SentencePieceModel::read((kDir / (name + ".model")).string());
  ASSERT_EQ(m.pieces.size(), g["pieces"].get<std::size_t>());
  const auto& types = g["types"];
  for (std::size_t i = 0; i < m.pieces.size(); ++i) {
    EXPECT_EQ(m.pieces[i].piece, g["id_to_piece"][i].get<std::string>()) << i;
    EXPECT_EQ(m.pieces[i].score, g["scores"][i].get<float>()) << i;
    const int t = types[i].get<int>();  // 0 normal/user, 1 unk, 2 control, 3 unused, 4 byte
    const tk::SentencePieceType want = t == 1   ? tk::SentencePieceType::kUnknown
                                       : t == 2 ? tk::SentencePieceType::kControl
                                       : t == 3 ? tk::SentencePieceType::kUnused
                                       : t == 4 ? tk::SentencePieceType::kByte
                                                : m.pieces[i].type;
    EXPECT_EQ(m.pieces[i].type, want) << i;
    if (t == 0) {
      EXPECT_TRUE(m.pieces[i].type == tk::SentencePieceType::kNormal ||
                  m.pieces[i].type == tk::SentencePieceType::kUserDefined);
    }
  }
  EXPECT_EQ(m.unk_id(), g["unk_id"].get<TokenId>());
  EXPECT_EQ(m.trainer_spec.unk_id, g["unk_id"].get<int>());
  EXPECT_EQ(m.trainer_spec.bos_id, g["bos_id"].get<int>());
  EXPECT_EQ(m.trainer_spec.eos_id, g["eos_id"].get<int>());
  EXPECT_EQ(m.trainer_spec.pad_id, g["pad_id"].get<int>());
  const json& opts = g["options"];
  const std::string type = opts["model_type"].get<std::string>();
  EXPECT_EQ(m.trainer_spec.model_type, type == "bpe" ? tk::SentencePieceModelType::kBpe
                                                     : tk::SentencePieceModelType::kUnigram);
  EXPECT_EQ(m.trainer_spec.vocab_size, opts["vocab_size"].get<int>());
  EXPECT_EQ(m.trainer_spec.byte_fallback, opts.value("byte_fallback", false));
  EXPECT_EQ(m.normalizer_spec.remove_extra_whitespaces,
            opts.value("remove_extra_whitespaces", true));
  EXPECT_EQ(m.normalizer_spec.add_dummy_prefix, opts.value("add_dummy_prefix", true));
  EXPECT_TRUE(m.normalizer_spec.escape_whitespaces);
  const std::string rule = opts.value("normalization_rule_name", std::string("user_defined"));
  if (opts.contains("normalization_rule_name")) {
    EXPECT_EQ(m.normalizer_spec.name, rule);
  }
  EXPECT_EQ(m.normalizer_spec.precompiled_charsmap.empty(), rule == "identity");
  if (opts.contains("unk_surface")) {
    EXPECT_EQ(m.trainer_spec.unk_surface, opts["unk_surface"].get<std::string>());
  } else {
    EXPECT_EQ(m.trainer_spec.unk_surface, " \xE2\x81\x87 ");
  }
  EXPECT_EQ(m.trainer_spec.pad_piece, "<pad>");
  for (std::size_t i = 0; i < m.pieces.size(); ++i)
    EXPECT_EQ(m.id(m.pieces[i].piece), static_cast<TokenId>(i));
}

TEST_P(SentencePieceGolden, IdsAndDecodingsMatchSentencePiece) {
  const std::string name = GetParam();
  const json& g = golden()["models"][name];
  const json& inputs = golden()["inputs"];
  const tk::SentencePieceModel m =
      tk::SentencePieceModel::read((kDir / (name + ".model")).string());
  const bool bpe = m.trainer_spec.model_type == tk::SentencePieceModelType::kBpe;
  std::optional<tk::UnigramTokenizer> uni;
  std::optional<tk::HfTokenizer> hf;
  if (bpe)
    hf.emplace(tk::HfTokenizer::from_sentencepiece(m));
  else
    uni.emplace(m.to_unigram());
  std::size_t id_ok = 0, text_ok = 0, failures = 0, hf_text_ok = 0;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::string text = input_bytes(inputs[k]);
    const auto want = g["ids"][k].get<std::vector<TokenId>>();
    const std::string want_text = g["decoded"][k].is_null() ? inputs[k]["text"].get<std::string>()
                                                            : g["decoded"][k].get<std::string>();
    // BPE through Hugging Face's layout: sentencepiece's ids once invalid
    // UTF-8 is replaced as sentencepiece's normalizer does (the documented
    // difference), Hugging Face's own decoding wherever no unknown piece is
    // involved (HF writes "<unk>", sentencepiece " ⁇ "), and
    // SentencePieceModel::decode exactly.
    const std::vector<TokenId> got =
        bpe ? hf->encode(tk::SentencePieceModel::replace_invalid_utf8(text), tk::AddSpecial::kNo,
                         tk::SpecialTokens::kAsText)
            : uni->encode(text, tk::AddSpecial::kNo);
    const std::string got_text = bpe ? m.decode(want) : uni->decode(want);
    if (bpe) {
      if (kappa::tokenize::is_valid_utf8(text)) {
        EXPECT_EQ(hf->encode(text, tk::AddSpecial::kNo, tk::SpecialTokens::kAsText), want);
      }
      if (std::find(want.begin(), want.end(), m.unk_id()) == want.end()) {
        EXPECT_EQ(hf->decode(want), want_text) << show(text);
        ++hf_text_ok;
      }
    } else {
      EXPECT_EQ(m.decode(want), want_text);
    }
    if (got == want) ++id_ok;
    if (got_text == want_text) ++text_ok;
    if ((got != want || got_text != want_text) && ++failures <= 5) {
      ADD_FAILURE() << name << " " << inputs[k]["name"].get<std::string>() << " " << show(text)
                    << "\n  ids " << json(got).dump() << "\n want " << json(want).dump()
                    << "\n  decoded " << show(got_text) << "\n want    " << show(want_text);
    }
  }
  std::printf("%s: ids equal on %zu of %zu inputs, decodings on %zu (HfTokenizer's on %zu)\n",
              name.c_str(), id_ok, inputs.size(), text_ok, hf_text_ok);
  EXPECT_EQ(id_ok, inputs.size()) << name << ": ids equal on " << id_ok << " of " << inputs.size();
  EXPECT_EQ(text_ok, inputs.size())
      << name << ": decodings equal on " << text_ok << " of " << inputs.size();
  RecordProperty("inputs", static_cast<int>(inputs.size()));
}

INSTANTIATE_TEST_SUITE_P(Models, SentencePieceGolden,
                         ::testing::Values("unigram_nfkc", "unigram_bytes", "bpe_llama", "bpe_unk",
                                           "unigram_user"));

TEST(SentencePieceModel, GoldenCoversTheRequiredCases) {
  std::size_t random = 0, corpus = 0;
  for (const json& item : golden()["inputs"]) {
    const std::string n = item["name"].get<std::string>();
    random += n.rfind("random/", 0) == 0;
    corpus += n.rfind("corpus/", 0) == 0;
  }
  EXPECT_GE(random, 300u);
  EXPECT_GE(corpus, 10u);
  EXPECT_EQ(golden()["sentencepiece"].get<std::string>(), "0.1.97");
}

TEST(SentencePieceModel, UnigramOfABpeModelAndBpeOfAUnigramModelAreErrorsByName) {
  const auto bpe = tk::SentencePieceModel::read((kDir / "bpe_unk.model").string());
  const auto uni = tk::SentencePieceModel::read((kDir / "unigram_nfkc.model").string());
  try {
    (void)bpe.to_unigram();
    FAIL() << "no error";
  } catch (const kappa::FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bpe_unk.model: byte "));
    EXPECT_THAT(e.what(), HasSubstr("trainer_spec.model_type: BPE"));
  }
  try {
    (void)uni.to_hf_json();
    FAIL() << "no error";
  } catch (const kappa::FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("trainer_spec.model_type: UNIGRAM"));
  }
  // HfTokenizer takes either kind.
  EXPECT_EQ(tk::HfTokenizer::from_sentencepiece(uni).family(), tk::TokenizerFamily::kUnigram);
}

TEST(SentencePieceModel, BpeLayoutLimitsAreNamed) {
  auto m = tk::SentencePieceModel::read((kDir / "bpe_llama.model").string());
  m.normalizer_spec.remove_extra_whitespaces = true;
  try {
    (void)m.to_hf_json();
    FAIL() << "no error";
  } catch (const kappa::FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("normalizer_spec.remove_extra_whitespaces"));
  }
}

TEST(SentencePieceModel, HfJsonHasTheLlamaLayout) {
  const auto m = tk::SentencePieceModel::read((kDir / "bpe_llama.model").string());
  const json j = m.to_hf_json();
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["byte_fallback"], true);
  EXPECT_EQ(j["model"]["vocab"].size(), m.pieces.size());
  EXPECT_EQ(j["normalizer"]["normalizers"][0]["type"], "Prepend");
  EXPECT_EQ(j["decoder"]["decoders"].size(), 4u);
  // Every merge's concatenation is a piece; merges of one piece are
  // contiguous and pieces come in score order.
  const auto& merges = j["model"]["merges"];
  ASSERT_FALSE(merges.empty());
  float last = INFINITY;
  for (const json& mg : merges) {
    const std::string p = mg[0].get<std::string>() + mg[1].get<std::string>();
    const auto id = m.id(p);
    ASSERT_TRUE(id.has_value()) << p;
    const float s = m.pieces[static_cast<std::size_t>(*id)].score;
    EXPECT_LE(s, last);
    last = s;
  }
}

TEST(SentencePieceModel, ControlPiecesAreSpecialButNotMatchedInText) {
  const auto m = tk::SentencePieceModel::read((kDir / "unigram_user.model").string());
  const tk::UnigramTokenizer t = m.to_unigram();
  EXPECT_TRUE(t.is_special(1));  // <s>
  EXPECT_TRUE(t.is_special(2));  // </s>
  const std::vector<TokenId> ids = t.encode("<s>", tk::AddSpecial::kNo);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0);
  const std::vector<TokenId> with = {1, 10, 2};
  EXPECT_EQ(t.decode(with), t.decode(std::vector<TokenId>{10}));
  EXPECT_THROW((void)t.decode(std::vector<TokenId>{static_cast<TokenId>(m.pieces.size())}),
               kappa::RangeError);
}

// ---- hostile files ---------------------------------------------------------

std::string varint(std::uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string key(int field, int wire) {
  return varint(static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire));
}
std::string len_field(int field, const std::string& body) {
  return key(field, 2) + varint(body.size()) + body;
}
std::string varint_field(int field, std::uint64_t v) {
  return key(field, 0) + varint(v);
}
std::string float_field(int field, float f) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  std::string out = key(field, 5);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  return out;
}
std::string piece(const std::string& text, float score, int type = 1) {
  return len_field(1, len_field(1, text) + float_field(2, score) +
                          varint_field(3, static_cast<std::uint64_t>(type)));
}
// A minimal valid model: <unk>, and two normal pieces; Unigram.
std::string minimal(const std::string& extra = "") {
  return piece("<unk>", 0, 2) +
         piece(
             "\xE2\x96\x81"
             "a",
             -1) +
         piece("a", -2) + len_field(2, varint_field(3, 1)) + extra;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("kappa_spm_test_" + std::to_string(::getpid()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

// The one call: a directory with only the model file (spiece.model as T5
// and ALBERT ship it, tokenizer.model as Llama-2) loads through
// HfTokenizer::from_directory with the same ids; tokenizer_config.json's
// add_bos_token puts the model's BOS piece first.
TEST_P(SentencePieceGolden, FromDirectoryLoadsTheModelFile) {
  const std::string name = GetParam();
  const json& g = golden()["models"][name];
  const json& inputs = golden()["inputs"];
  const fs::path file = kDir / (name + ".model");
  const tk::SentencePieceModel m = tk::SentencePieceModel::read(file.string());
  const bool bpe = m.trainer_spec.model_type == tk::SentencePieceModelType::kBpe;
  TempDir dir;
  const std::string bytes = kappa::read_regular_file(file.string());
  dir.write(bpe ? "tokenizer.model" : "spiece.model", bytes);
  if (bpe) dir.write("tokenizer_config.json", R"({"add_bos_token": true})");
  const tk::HfTokenizer tok = tk::HfTokenizer::from_directory(dir.path().string());
  EXPECT_EQ(tok.family(),
            bpe ? tk::TokenizerFamily::kSentencePieceBpe : tk::TokenizerFamily::kUnigram);
  EXPECT_EQ(tok.vocab_size(), m.pieces.size());
  EXPECT_EQ(tok.bos_id(), std::optional<TokenId>(m.trainer_spec.bos_id));
  EXPECT_EQ(tok.eos_id(), std::optional<TokenId>(m.trainer_spec.eos_id));
  std::size_t ok = 0;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::string text = input_bytes(inputs[k]);
    auto want = g["ids"][k].get<std::vector<TokenId>>();
    const std::string in = bpe ? tk::SentencePieceModel::replace_invalid_utf8(text) : text;
    if (bpe) want.insert(want.begin(), m.trainer_spec.bos_id);
    if (tok.encode(in, tk::AddSpecial::kYes, tk::SpecialTokens::kAsText) == want) ++ok;
  }
  EXPECT_EQ(ok, inputs.size()) << name;
}

// The error of reading `bytes` as a file named `name`, or "" if it loads.
std::string error_of(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.write(name, bytes);
  try {
    (void)tk::SentencePieceModel::read(path);
  } catch (const kappa::FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(SentencePieceModel, MinimalModelLoadsAndEncodes) {
  const auto m = tk::SentencePieceModel::parse(minimal(), "minimal");
  ASSERT_EQ(m.pieces.size(), 3u);
  const auto t = m.to_unigram();
  EXPECT_EQ(t.encode("a a", tk::AddSpecial::kNo), (std::vector<TokenId>{1, 1}));
  EXPECT_EQ(t.encode("b", tk::AddSpecial::kNo), (std::vector<TokenId>{0}));  // ▁ and b: one unk run
  EXPECT_EQ(t.decode(std::vector<TokenId>{1, 1}), "a a");
  EXPECT_EQ(t.decode(std::vector<TokenId>{0}), " \xE2\x81\x87 ");
}

TEST(SentencePieceModel, HostileFilesAreFormatErrorsNamingFileByteAndField) {
  const TempDir dir;
  struct Case {
    std::string name, bytes;
    std::vector<std::string> expect;
  };
  std::string huge;
  huge.reserve((tk::SentencePieceModel::kMaxPieces + 1) * 2);
  for (std::size_t i = 0; i <= tk::SentencePieceModel::kMaxPieces; ++i) huge += len_field(1, "");
  const std::vector<Case> cases = {
      {"empty.model", "", {"empty.model: byte 0: empty file"}},
      {"truncated_varint.model", minimal() + "\x0a\xff", {"byte ", "truncated varint"}},
      {"truncated_tag.model", "\xff", {"truncated_tag.model: byte 0: field tag: truncated varint"}},
      {"long_varint.model",
       minimal() + "\x48" + std::string(11, '\xff') + "\x01",
       {"unknown field: varint overflows 64 bits"}},
      {"long_varint2.model",
       minimal() + "\x48" + std::string(9, '\x80') + "\x81\x01",
       {"unknown field: varint longer than 10 bytes"}},
      {"length_past_end.model",
       minimal() + "\x0a\x64"
                   "abc",
       {"ModelProto.pieces: length 100 runs past the end"}},
      {"inner_length.model",
       len_field(1,
                 "\x0a\x10"
                 "ab") +
           minimal(),
       {"byte 3: pieces[0].piece: length 16 runs past the end"}},
      {"wrong_wire_pieces.model",
       "\x08\x01" + minimal(),
       {"byte 0: ModelProto.pieces: wire type 0 (varint), expected 2"}},
      {"wrong_wire_score.model",
       len_field(1, len_field(1, "x") + varint_field(2, 3)) + minimal(),
       {"pieces[0].score: wire type 0"}},
      {"wrong_wire_type.model",
       len_field(1, len_field(1, "x") + len_field(3, "a")) + minimal(),
       {"pieces[0].type: wire type 2"}},
      {"wrong_wire_trainer.model",
       minimal() + len_field(2, len_field(35, "x")),
       {"trainer_spec.byte_fallback: wire type 2"}},
      {"wrong_wire_normalizer.model",
       minimal() + len_field(3, float_field(3, 1)),
       {"normalizer_spec.add_dummy_prefix: wire type 5"}},
      {"bad_piece_type.model",
       piece("x", 0, 9) + minimal(),
       {"pieces[0].type: 9 is not a piece type"}},
      {"bad_model_type.model",
       minimal() + len_field(2, varint_field(3, 7)),
       {"trainer_spec.model_type: 7"}},
      {"nan_score.model", piece("x", NAN) + minimal(), {"pieces[0].score: NaN"}},
      {"truncated_float.model", minimal() + len_field(1, key(2, 5) + "ab"), {"truncated fixed32"}},
      {"no_pieces.model", len_field(2, varint_field(3, 1)), {"ModelProto.pieces: none"}},
      {"no_unk.model", piece("a", -1), {"no piece of type UNKNOWN"}},
      {"two_unk.model", minimal() + piece("<unk2>", 0, 2), {"pieces[3]: a second UNKNOWN piece"}},
      {"duplicate.model",
       minimal() + piece("a", -3),
       {"pieces[3].piece: \"a\" is already piece 2"}},
      {"empty_piece.model", minimal() + piece("", -3), {"pieces[3].piece: empty"}},
      {"byte_without_fallback.model",
       minimal() + piece("<0x41>", 0, 6),
       {"byte piece \"<0x41>\" although trainer_spec.byte_fallback is false"}},
      {"missing_bytes.model",
       minimal() + len_field(2, varint_field(35, 1)),
       {"the byte piece <0x00> is missing"}},
      {"bad_wire_7.model", minimal() + "\x0f", {"wire type 7 (invalid)"}},
      {"field_zero.model",
       std::string("\x00\x01", 2) + minimal(),
       {"byte 0: field number 0 is not valid"}},
      {"unclosed_group.model",
       minimal() + key(9, 3) + varint_field(1, 1),
       {"unknown group: no end-group"}},
      {"deep_groups.model",
       minimal() +
           [] {
             std::string s;
             for (int i = 0; i < 100; ++i) s += key(9, 3);
             return s;
           }(),
       {"groups nested deeper than 64"}},
      {"whitespace_suffix.model",
       minimal() + len_field(2, varint_field(24, 1)),
       {"treat_whitespace_as_suffix"}},
      {"denormalizer.model",
       minimal() + len_field(5, len_field(1, "rules") + len_field(2, "xxxx")),
       {"denormalizer_spec: a denormalization rule set (\"rules\")"}},
      {"bad_charsmap.model",
       minimal() + len_field(3, len_field(2, std::string("\x40\x00\x00\x00", 4))),
       {"normalizer_spec.precompiled_charsmap"}},
      {"huge_piece_count.model", huge, {"more than 1048576 pieces"}},
  };
  for (const Case& c : cases) {
    const std::string err = error_of(dir, c.name, c.bytes);
    ASSERT_FALSE(err.empty()) << c.name << " loaded";
    EXPECT_THAT(err, HasSubstr("kappa: " + (dir.path() / c.name).string() + ": byte ")) << c.name;
    for (const std::string& e : c.expect) EXPECT_THAT(err, HasSubstr(e)) << c.name;
  }
}

TEST(SentencePieceModel, UnknownFieldsOfEveryWireTypeAreSkipped) {
  const std::string extras = varint_field(99, 5) + key(98, 1) + std::string(8, 'x') +
                             len_field(97, "zzz") + key(96, 5) + "abcd" + key(95, 3) +
                             varint_field(1, 2) + key(95, 4);
  const auto m = tk::SentencePieceModel::parse(
      extras + minimal(len_field(2, extras + varint_field(3, 1)) + len_field(3, extras)), "x");
  EXPECT_EQ(m.pieces.size(), 3u);
  // A wire-compatible denormalizer without rules is accepted (trivial).
  EXPECT_NO_THROW(
      (void)tk::SentencePieceModel::parse(minimal(len_field(5, len_field(1, "identity"))), "x"));
}

TEST(SentencePieceModel, WordAndCharModelsAreRejectedByName) {
  for (const auto& [type, name] : {std::pair{3, "WORD"}, std::pair{4, "CHAR"}}) {
    const auto m = tk::SentencePieceModel::parse(
        minimal(len_field(2, varint_field(3, static_cast<std::uint64_t>(type)))), "w.model");
    try {
      (void)m.to_unigram();
      FAIL();
    } catch (const kappa::FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("w.model: byte ")));
      EXPECT_THAT(e.what(),
                  HasSubstr(std::string("trainer_spec.model_type: ") + name + " is not supported"));
    }
  }
}

TEST(SentencePieceModel, AFifoAndADirectoryAreRefusedWithoutBlocking) {
  const TempDir dir;
  const fs::path fifo = dir.path() / "fifo.model";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    (void)tk::SentencePieceModel::read(fifo.string());
    FAIL();
  } catch (const kappa::FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("fifo.model"));
    EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
  }
  EXPECT_THROW((void)tk::SentencePieceModel::read(dir.path().string()), kappa::FormatError);
  EXPECT_THROW((void)tk::SentencePieceModel::read((dir.path() / "missing").string()),
               kappa::FormatError);
}

TEST(SentencePieceModel, EveryPrefixOfARealModelLoadsOrIsAFormatError) {
  std::ifstream in(kDir / "bpe_unk.model", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  std::size_t loaded = 0;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    try {
      const auto m = tk::SentencePieceModel::parse(std::string_view(bytes).substr(0, n), "prefix");
      ++loaded;
      (void)tk::HfTokenizer::from_sentencepiece(m).encode("hello world", tk::AddSpecial::kNo);
    } catch (const kappa::FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr("prefix"));
    }
  }
  EXPECT_LT(loaded, bytes.size());
  // Flipping bytes: each result loads or is a FormatError.
  for (std::size_t n = 0; n < bytes.size(); n += 7) {
    std::string mutated = bytes;
    mutated[n] = static_cast<char>(mutated[n] ^ 0x5A);
    try {
      const auto m = tk::SentencePieceModel::parse(mutated, "mutated");
      if (m.trainer_spec.model_type == tk::SentencePieceModelType::kUnigram)
        (void)m.to_unigram().encode("hello world", tk::AddSpecial::kNo);
      else if (m.trainer_spec.model_type == tk::SentencePieceModelType::kBpe)
        (void)tk::HfTokenizer::from_sentencepiece(m).encode("hello world", tk::AddSpecial::kNo);
    } catch (const kappa::FormatError&) {
    }
  }
}

}  // namespace sentencepiece_model_test
}  // namespace
