// kappa/tokenize/sentencepiece_model.hpp - a SentencePiece `tokenizer.model`
// (the serialized sentencepiece ModelProto that older Llama-2 repos, T5,
// ALBERT and XLNet ship) read directly, and turned into kappa's tokenizers
// with sentencepiece's own semantics.
//
// Reading: a bounded protobuf wire-format reader (varints of at most 10
// bytes, length-delimited fields, fixed32 floats; unknown fields skipped by
// their wire type, groups nested at most 64 deep; every length checked
// against the bytes left; one pass, linear in the file size) for the fields
// of sentencepiece_model.proto that encoding needs: ModelProto.pieces (1:
// piece 1, score 2, type 3), trainer_spec (2: model_type 3, vocab_size 4,
// treat_whitespace_as_suffix 24, byte_fallback 35, unk_id 40, bos_id 41,
// eos_id 42, pad_id 43, unk_surface 44, unk_piece 45, bos_piece 46,
// eos_piece 47, pad_piece 48), normalizer_spec (3: name 1,
// precompiled_charsmap 2, add_dummy_prefix 3, remove_extra_whitespaces 4,
// escape_whitespaces 5) and denormalizer_spec (5). Absent fields take their
// proto2 defaults. A repeated occurrence of a message field merges into the
// first, of a scalar field replaces it (protobuf's rules). Any malformed input
// is a FormatError "kappa: <file>: byte <n>: <what>" naming the field; so are
// what sentencepiece itself refuses to load (an empty or duplicate piece, no
// or two unknown pieces, byte pieces without byte_fallback or not all 256 with
// it) and what kappa does not implement: model types WORD and CHAR,
// treat_whitespace_as_suffix, a denormalizer with rules.
//
// Encoding as sentencepiece 0.1.97 - 0.2 does (sentencepiece_processor.cc
// Encode with no extra options, i.e. EncodeAsIds without BOS/EOS):
//   normalize  at each position the longest user-defined piece (copied as it
//              is), else the precompiled charsmap's longest rule, else one
//              character, an invalid UTF-8 byte becoming U+FFFD; with
//              remove_extra_whitespaces the leading spaces, a space after a
//              space and the trailing spaces of the result are dropped; with
//              add_dummy_prefix "▁" is put first (unless the text normalizes
//              to nothing); with escape_whitespaces each " " becomes "▁".
//   Unigram    Viterbi over the whole normalized text (no pre-tokenizer) in
//              float arithmetic as unigram_model.cc EncodeOptimized: normal
//              pieces score their score, user-defined pieces n max_s - 0.1,
//              a character no piece of its length covers is unknown with
//              min_s - 10; unused pieces never win; runs of unknown pieces
//              fuse into one unknown id, or with byte_fallback become their
//              bytes' `<0xNN>` pieces.
//   BPE        characters (user-defined pieces whole and frozen), then the
//              adjacent pair whose concatenation is a piece of highest score,
//              leftmost on ties, is merged until none is left; a symbol that
//              is no piece is unknown (byte fallback as above).
// Decoding as sentencepiece's Decode: control pieces are empty, the unknown
// piece is trainer_spec.unk_surface (" ⁇ " by default), runs of byte pieces
// are their bytes with each byte that does not start a valid UTF-8 character
// replaced by U+FFFD, "▁" is a space, and the first piece loses a leading
// "▁" when add_dummy_prefix or remove_extra_whitespaces is set (with the
// latter, every piece does while the text is still empty).
//
// to_unigram() builds a UnigramTokenizer with UnigramSemantics::kSentencePiece
// (unigram.hpp): exactly the above. HfTokenizer::from_sentencepiece() (hf_tokenizer.hpp) builds,
// for BPE models, the tokenizer.json that transformers' LlamaConverter writes (to_hf_json()) and
// loads it with HfTokenizer::from_json; that is Hugging Face's pipeline, which equals
// sentencepiece's BPE on the inputs of tests/tokenize/sentencepiece_model_test.cpp, with the
// differences listed below. It accepts only what that layout expresses: no charsmap,
// remove_extra_whitespaces false, escape_whitespaces true (Llama-2's,
// Mistral's settings); anything else is a FormatError naming the field.
//
// Differences between sentencepiece and Hugging Face's converted fast
// tokenizers (tokenizer.json) that we know of:
//   * HF's converters make control pieces (`<s>`, `</s>`, `<pad>`) and the
//     unknown piece added tokens, matched in the text ("<s>" in the input is
//     id 1); sentencepiece never matches them (they are not in its lattice).
//     to_unigram() keeps sentencepiece's behaviour; with HfTokenizer::from_sentencepiece()
//     pass SpecialTokens::kAsText to get it.
//   * HF's Llama tokenizer adds BOS; EncodeAsIds does not. Neither
//     tokenizer built here adds BOS or EOS.
//   * The T5/ALBERT converters' normalizer (Precompiled, then Replace(" {2,}",
//     " "), Metaspace) does not drop trailing spaces and matches charsmap
//     rules per grapheme cluster (shortest key) rather than by the longest
//     key at each byte; sentencepiece strips trailing spaces and takes the
//     longest rule. HF's Unigram splits words at "▁" and adds in double
//     precision; sentencepiece runs one lattice in float.
//   * HF's Unigram looks a fused run of unknown characters up as a piece;
//     sentencepiece does not.
//   * HF's BPE (Llama) passes an invalid UTF-8 byte to byte fallback as that
//     byte; sentencepiece's normalizer first turns it into U+FFFD
//     (`<0xEF><0xBF><0xBD>` or its piece).
//   * HF's ByteFallback decoder turns a whole run of byte tokens that is not
//     valid UTF-8 into one U+FFFD per byte; sentencepiece keeps the valid
//     characters of the run. HF's Strip decoder removes one leading space of
//     the text even when it came from a byte piece or the first piece did
//     not start with "▁"; sentencepiece removes only the first piece's
//     "▁". HF decodes the unknown piece as "<unk>", sentencepiece as " ⁇ ".
//   * HF's BPE merges by merge rank (pieces ordered by score, then id); an
//     UNUSED piece that a merge produces stays in HF but is split back into
//     its parts by sentencepiece. Equal scores of two different merges break
//     ties by id in HF and by position in sentencepiece. User-defined pieces
//     become HF added tokens, matched before the "▁" prefix is added.
//
// Example:
//   auto model = kappa::tokenize::SentencePieceModel::read("t5-small/spiece.model");
//   kappa::tokenize::UnigramTokenizer tok = model.to_unigram();
//   std::vector<kappa::TokenId> ids = tok.encode("Hello world", kappa::tokenize::AddSpecial::kNo);
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/unigram.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace kappa::tokenize {

/// TrainerSpec.ModelType.
enum class SentencePieceModelType : std::uint8_t {
  kUnigram = 1,  ///< Unigram language model
  kBpe = 2,      ///< byte-pair encoding
  kWord = 3,     ///< whitespace-delimited words (not supported)
  kChar = 4,     ///< characters (not supported)
};

/// One entry of ModelProto.pieces.
struct SentencePieceEntry {
  std::string piece;   ///< the piece's text, "▁" for a space
  float score = 0.0f;  ///< log-probability (Unigram) or merge order (BPE)
  SentencePieceType type = SentencePieceType::kNormal;  ///< NORMAL unless stated
  std::size_t offset = 0;                               ///< byte of the entry in the file
};

/// The TrainerSpec fields that encoding and decoding need (proto2 defaults).
struct SentencePieceTrainerSpec {
  SentencePieceModelType model_type = SentencePieceModelType::kUnigram;
  std::int32_t vocab_size = 8000;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;
  std::int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  std::string unk_surface = " \xE2\x81\x87 ";  ///< the unknown piece's decoded text (" ⁇ ")
  std::size_t offset = 0;  ///< byte of the model_type field in the file (0 if absent)
};

/// NormalizerSpec (proto2 defaults).
struct SentencePieceNormalizerSpec {
  std::string name;                      ///< "nmt_nfkc", "identity", ...
  std::string precompiled_charsmap;      ///< the raw blob (PrecompiledCharsmap)
  bool add_dummy_prefix = true;          ///< "▁" before the text
  bool remove_extra_whitespaces = true;  ///< strip and collapse spaces
  bool escape_whitespaces = true;        ///< " " -> "▁"
  std::size_t offset = 0;                ///< byte of the spec's field in the file (0 if absent)
};

/// A parsed SentencePiece ModelProto (`tokenizer.model`, `spiece.model`).
/// Piece i has id i.
class SentencePieceModel {
 public:
  /// The largest file read() accepts (sentencepiece's largest models are a
  /// few MB).
  static constexpr std::size_t kMaxFileBytes = std::size_t{256} << 20;
  /// The most pieces a model may have (Gemma 3 has 262144).
  static constexpr std::size_t kMaxPieces = std::size_t{1} << 20;

  std::vector<SentencePieceEntry> pieces;
  SentencePieceTrainerSpec trainer_spec;
  SentencePieceNormalizerSpec normalizer_spec;
  std::optional<SentencePieceNormalizerSpec> denormalizer_spec;

  /// Reads and parses the regular file `path` (at most kMaxFileBytes; a
  /// FIFO or a directory is a FormatError, never a blocking read).
  /// \throws FormatError `kappa: <path>: byte <n>: <what>`.
  static SentencePieceModel read(const std::string& path) {
    return parse(read_regular_file(path, kMaxFileBytes), path);
  }

  /// Parses the bytes of a ModelProto; `source` names them in messages.
  /// O(bytes). \throws FormatError naming the source, the byte and the field.
  static SentencePieceModel parse(std::string_view bytes, const std::string& source) {
    SentencePieceModel m;
    Reader r{bytes, 0, source};
    if (bytes.empty()) r.fail(0, "empty file (not a SentencePiece model)");
    bool any_piece_or_spec = false, seen_normalizer = false;
    while (!r.done()) {
      const auto [field, wire, at] = r.tag();
      switch (field) {
        case 1: {  // repeated SentencePiece pieces
          Reader sub = r.message(wire, at, "ModelProto.pieces");
          if (m.pieces.size() >= kMaxPieces)
            r.fail(at, "ModelProto.pieces: more than " + std::to_string(kMaxPieces) + " pieces");
          m.pieces.push_back(parse_piece(sub, at, m.pieces.size()));
          any_piece_or_spec = true;
          break;
        }
        case 2: {
          Reader sub = r.message(wire, at, "ModelProto.trainer_spec");
          parse_trainer(sub, m.trainer_spec);
          any_piece_or_spec = true;
          break;
        }
        case 3: {
          Reader sub = r.message(wire, at, "ModelProto.normalizer_spec");
          if (!seen_normalizer) m.normalizer_spec.offset = at;
          seen_normalizer = true;
          parse_normalizer(sub, m.normalizer_spec, "normalizer_spec");
          any_piece_or_spec = true;
          break;
        }
        case 5: {
          Reader sub = r.message(wire, at, "ModelProto.denormalizer_spec");
          if (!m.denormalizer_spec) {
            m.denormalizer_spec.emplace();
            m.denormalizer_spec->offset = at;
          }
          parse_normalizer(sub, *m.denormalizer_spec, "denormalizer_spec");
          break;
        }
        default:
          r.skip(wire, at, 0);
      }
    }
    if (!any_piece_or_spec || m.pieces.empty())
      r.fail(bytes.size(), "ModelProto.pieces: none (not a SentencePiece model?)");
    m.check(r);
    return m;
  }

  /// The id of the unknown piece (the one piece of type UNKNOWN).
  TokenId unk_id() const noexcept { return unk_id_; }

  /// The id of `piece` as sentencepiece's PieceToId finds it (control,
  /// unknown and byte pieces first), nullopt if no piece has that text.
  std::optional<TokenId> id(std::string_view piece) const {
    for (const bool reserved : {true, false})
      for (std::size_t i = 0; i < pieces.size(); ++i)
        if (is_reserved(pieces[i].type) == reserved && pieces[i].piece == piece)
          return static_cast<TokenId>(i);
    return std::nullopt;
  }

  /// The configuration of to_unigram(): pieces with their scores, the piece
  /// types, unk id, byte fallback, one normalizer step and one decoder step
  /// of kind kSentencePiece. \throws FormatError for a model type that is
  /// not UNIGRAM.
  UnigramConfig unigram_config() const {
    if (trainer_spec.model_type != SentencePieceModelType::kUnigram)
      fail_model_type("to_unigram", "UNIGRAM");
    UnigramConfig c;
    c.semantics = UnigramSemantics::kSentencePiece;
    c.pieces.reserve(pieces.size());
    c.piece_types.reserve(pieces.size());
    for (const SentencePieceEntry& e : pieces) {
      c.pieces.emplace_back(e.piece, static_cast<double>(e.score));
      c.piece_types.push_back(e.type);
    }
    c.unk_id = unk_id_;
    c.byte_fallback = trainer_spec.byte_fallback;
    UnigramNormalizerStep n;
    n.kind = UnigramNormalizerStep::Kind::kSentencePiece;
    if (!normalizer_spec.precompiled_charsmap.empty())
      n.charsmap = PrecompiledCharsmap(normalizer_spec.precompiled_charsmap,
                                       source_ + ": normalizer_spec.precompiled_charsmap");
    for (const SentencePieceEntry& e : pieces)
      if (e.type == SentencePieceType::kUserDefined) n.protected_pieces.push_back(e.piece);
    n.add_dummy_prefix = normalizer_spec.add_dummy_prefix;
    n.remove_extra_whitespaces = normalizer_spec.remove_extra_whitespaces;
    n.escape_whitespaces = normalizer_spec.escape_whitespaces;
    c.normalizer.push_back(std::move(n));
    UnigramDecoderStep d;
    d.kind = UnigramDecoderStep::Kind::kSentencePiece;
    d.unk_surface = trainer_spec.unk_surface;
    d.drop_bos_space = normalizer_spec.add_dummy_prefix || normalizer_spec.remove_extra_whitespaces;
    d.drop_leading_spaces = normalizer_spec.remove_extra_whitespaces;
    c.decoder.push_back(std::move(d));
    c.has_decoder = true;
    return c;
  }

  /// A Unigram model as sentencepiece encodes and decodes it (see the file
  /// comment); encode() adds no BOS/EOS. \throws FormatError for a model
  /// type that is not UNIGRAM.
  UnigramTokenizer to_unigram() const { return UnigramTokenizer(unigram_config(), source_); }

  /// The tokenizer.json that transformers' LlamaConverter writes for a BPE
  /// model: vocab = pieces by id; merges (a, b) for every split p = a + b of
  /// a piece p into two pieces, ordered by p's score descending (stable: by
  /// id on ties), within one p by (id(a), id(b)) (SentencePieceExtractor);
  /// normalizer [Prepend("▁") when add_dummy_prefix, Replace(" ", "▁")];
  /// byte_fallback and fuse_unk; unknown and control pieces as special added
  /// tokens, user-defined ones as plain added tokens; decoder [Replace("▁",
  /// " "), ByteFallback, Fuse, Strip(" ", 1, 0) when add_dummy_prefix]; no
  /// post-processor (no BOS). \throws FormatError for what that layout
  /// cannot express (a charsmap, remove_extra_whitespaces, no
  /// escape_whitespaces) or a model type that is not BPE.
  nlohmann::json to_hf_json() const {
    if (trainer_spec.model_type != SentencePieceModelType::kBpe)
      fail_model_type("to_hf_json", "BPE");
    const auto unsupported = [&](const std::string& field, const std::string& what) -> void {
      throw FormatError("kappa: " + source_ + ": byte " + std::to_string(normalizer_spec.offset) +
                        ": " + field + ": " + what +
                        " cannot be expressed by a SentencePiece-style BPE tokenizer.json "
                        "(use a Unigram model or a file without it)");
    };
    if (!normalizer_spec.precompiled_charsmap.empty())
      unsupported("normalizer_spec.precompiled_charsmap",
                  "a normalization rule set (" + kappa::quoted(normalizer_spec.name) + ")");
    if (normalizer_spec.remove_extra_whitespaces)
      unsupported("normalizer_spec.remove_extra_whitespaces", "true");
    if (!normalizer_spec.escape_whitespaces)
      unsupported("normalizer_spec.escape_whitespaces", "false");
    using nlohmann::json;
    static constexpr std::string_view kMeta = "\xE2\x96\x81";
    json vocab = json::object();
    std::unordered_map<std::string_view, TokenId> ids;  // python dict: the last id wins
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      vocab[pieces[i].piece] = static_cast<TokenId>(i);
      ids[pieces[i].piece] = static_cast<TokenId>(i);
    }
    // SentencePieceExtractor: per piece (by id) its splits sorted by the
    // ids of the parts, then all stably sorted by the piece's score.
    struct Merge {
      float score;
      TokenId left, right;
    };
    std::vector<Merge> merges;
    std::vector<std::pair<TokenId, TokenId>> local;
    for (const SentencePieceEntry& piece : pieces) {
      const std::string_view p = piece.piece;
      local.clear();
      for (std::size_t k = 1; k < p.size(); ++k) {
        if ((static_cast<unsigned char>(p[k]) & 0xC0) == 0x80) continue;  // python splits chars
        const auto a = ids.find(p.substr(0, k));
        if (a == ids.end()) continue;
        const auto b = ids.find(p.substr(k));
        if (b == ids.end()) continue;
        local.emplace_back(a->second, b->second);
      }
      std::sort(local.begin(), local.end());
      for (const auto& [a, b] : local) merges.push_back({piece.score, a, b});
    }
    std::stable_sort(merges.begin(), merges.end(),
                     [](const Merge& x, const Merge& y) { return x.score > y.score; });
    json merge_list = json::array();
    for (const Merge& mg : merges)
      merge_list.push_back(json::array({pieces[static_cast<std::size_t>(mg.left)].piece,
                                        pieces[static_cast<std::size_t>(mg.right)].piece}));
    json added = json::array();
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const SentencePieceType t = pieces[i].type;
      if (t != SentencePieceType::kUnknown && t != SentencePieceType::kControl &&
          t != SentencePieceType::kUserDefined)
        continue;
      added.push_back({{"id", static_cast<TokenId>(i)},
                       {"content", pieces[i].piece},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", t != SentencePieceType::kUserDefined}});
    }
    json normalizers = json::array();
    if (normalizer_spec.add_dummy_prefix)
      normalizers.push_back({{"type", "Prepend"}, {"prepend", std::string(kMeta)}});
    normalizers.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kMeta)}});
    json decoders = json::array();
    decoders.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", std::string(kMeta)}}}, {"content", " "}});
    decoders.push_back({{"type", "ByteFallback"}});
    decoders.push_back({{"type", "Fuse"}});
    if (normalizer_spec.add_dummy_prefix)
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1u}, {"stop", 0u}});
    json model = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", pieces[static_cast<std::size_t>(unk_id_)].piece},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},
                  {"byte_fallback", trainer_spec.byte_fallback},
                  {"ignore_merges", false},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(merge_list)}};
    return {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", std::move(added)},
            {"normalizer", {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}}},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", {{"type", "Sequence"}, {"decoders", std::move(decoders)}}},
            {"model", std::move(model)}};
  }

  /// sentencepiece's DecodeIds for any model type (see the file comment):
  /// what to_unigram()'s decode() gives, and what a BPE model's HfTokenizer
  /// decode() gives only up to the differences listed there.
  /// \throws RangeError naming an id outside the vocabulary.
  std::string decode(std::span<const TokenId> ids) const {
    UnigramDecoderStep d;
    d.kind = UnigramDecoderStep::Kind::kSentencePiece;
    d.unk_surface = trainer_spec.unk_surface;
    d.drop_bos_space = normalizer_spec.add_dummy_prefix || normalizer_spec.remove_extra_whitespaces;
    d.drop_leading_spaces = normalizer_spec.remove_extra_whitespaces;
    return sentencepiece_decode(
        ids, pieces.size(),
        [&](TokenId id) {
          const SentencePieceEntry& e = pieces[static_cast<std::size_t>(id)];
          return std::pair<std::string_view, SentencePieceType>(e.piece, e.type);
        },
        d);
  }

  /// `text` with each byte that does not start a valid UTF-8 character
  /// replaced by U+FFFD, as sentencepiece's normalizer does first: a BPE
  /// model's HfTokenizer gives sentencepiece's ids on the result (it would
  /// byte-fall-back the invalid byte itself).
  static std::string replace_invalid_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      const Utf8Char c = decode_utf8(text, i);
      if (c.valid)
        out.append(text.substr(i, c.length));
      else
        out.append("\xEF\xBF\xBD");
      i += c.valid ? c.length : 1;
    }
    return out;
  }

  /// The file or name the model was parsed from.
  const std::string& source() const noexcept { return source_; }

 private:
  // A bounded view of the bytes [begin, end) of the file.
  struct Reader {
    std::string_view bytes;  // the whole file
    std::size_t pos;         // absolute offset of the next byte
    const std::string& source;
    std::size_t end = std::string_view::npos;

    [[noreturn]] void fail(std::size_t at, const std::string& what) const {
      throw FormatError("kappa: " + source + ": byte " + std::to_string(at) + ": " + what);
    }
    std::size_t limit() const noexcept {
      return end == std::string_view::npos ? bytes.size() : end;
    }
    bool done() const noexcept { return pos >= limit(); }

    std::uint64_t varint(const char* what) {
      const std::size_t at = pos;
      std::uint64_t v = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        if (pos >= limit()) fail(at, std::string(what) + ": truncated varint");
        const auto b = static_cast<unsigned char>(bytes[pos++]);
        if (shift == 63 && (b & 0x7Fu) > 1)
          fail(at, std::string(what) + ": varint overflows 64 bits");
        v |= static_cast<std::uint64_t>(b & 0x7Fu) << shift;
        if ((b & 0x80u) == 0) return v;
      }
      fail(at, std::string(what) + ": varint longer than 10 bytes");
    }

    struct Tag {
      std::uint32_t field;
      std::uint32_t wire;
      std::size_t at;
    };
    Tag tag() {
      const std::size_t at = pos;
      const std::uint64_t t = varint("field tag");
      if ((t >> 3) == 0 || (t >> 3) > 0x1FFFFFFFu)
        fail(at, "field number " + std::to_string(t >> 3) + " is not valid");
      return {static_cast<std::uint32_t>(t >> 3), static_cast<std::uint32_t>(t & 7u), at};
    }

    static const char* wire_name(std::uint32_t wire) noexcept {
      switch (wire) {
        case 0:
          return "varint";
        case 1:
          return "fixed64";
        case 2:
          return "length-delimited";
        case 3:
          return "start-group";
        case 4:
          return "end-group";
        case 5:
          return "fixed32";
        default:
          return "invalid";
      }
    }

    void expect(std::uint32_t wire, std::uint32_t want, std::size_t at, const char* field) const {
      if (wire != want)
        fail(at, std::string(field) + ": wire type " + std::to_string(wire) + " (" +
                     wire_name(wire) + "), expected " + std::to_string(want) + " (" +
                     wire_name(want) + ")");
    }

    std::string_view bytes_field(std::uint32_t wire, std::size_t at, const char* field) {
      expect(wire, 2, at, field);
      const std::size_t len_at = pos;
      const std::uint64_t n = varint(field);
      if (n > limit() - pos)
        fail(len_at, std::string(field) + ": length " + std::to_string(n) + " runs past the end (" +
                         std::to_string(limit() - pos) + " bytes left)");
      const std::string_view out = bytes.substr(pos, static_cast<std::size_t>(n));
      pos += static_cast<std::size_t>(n);
      return out;
    }

    Reader message(std::uint32_t wire, std::size_t at, const char* field) {
      const std::string_view body = bytes_field(wire, at, field);
      const std::size_t begin = static_cast<std::size_t>(body.data() - bytes.data());
      return Reader{bytes, begin, source, begin + body.size()};
    }

    std::uint64_t varint_field(std::uint32_t wire, std::size_t at, const char* field) {
      expect(wire, 0, at, field);
      return varint(field);
    }

    bool bool_field(std::uint32_t wire, std::size_t at, const char* field) {
      return varint_field(wire, at, field) != 0;
    }

    std::int32_t int32_field(std::uint32_t wire, std::size_t at, const char* field) {
      // proto int32: the low 32 bits of the varint, two's complement
      return static_cast<std::int32_t>(
          static_cast<std::uint32_t>(varint_field(wire, at, field) & 0xFFFFFFFFu));
    }

    float float_field(std::uint32_t wire, std::size_t at, const char* field) {
      expect(wire, 5, at, field);
      if (limit() - pos < 4) fail(at, std::string(field) + ": truncated fixed32");
      std::uint32_t v = 0;
      for (std::size_t i = 0; i < 4; ++i)
        v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[pos + i])) << (8 * i);
      pos += 4;
      return std::bit_cast<float>(v);
    }

    // Skips the value of an unknown field by its wire type (groups nested
    // at most 64 deep).
    void skip(std::uint32_t wire, std::size_t at, int depth) {
      switch (wire) {
        case 0:
          (void)varint("unknown field");
          return;
        case 1:
          if (limit() - pos < 8) fail(at, "unknown field: truncated fixed64");
          pos += 8;
          return;
        case 2:
          (void)bytes_field(2, at, "unknown field");
          return;
        case 5:
          if (limit() - pos < 4) fail(at, "unknown field: truncated fixed32");
          pos += 4;
          return;
        case 3: {
          if (depth >= 64) fail(at, "groups nested deeper than 64");
          while (true) {
            if (done()) fail(at, "unknown group: no end-group before the end");
            const Tag t = tag();
            if (t.wire == 4) return;
            skip(t.wire, t.at, depth + 1);
          }
        }
        default:
          fail(at, "wire type " + std::to_string(wire) + " (" + wire_name(wire) +
                       ") is not valid here");
      }
    }
  };

  static bool is_reserved(SentencePieceType t) noexcept {
    return t == SentencePieceType::kUnknown || t == SentencePieceType::kControl ||
           t == SentencePieceType::kByte;
  }

  static SentencePieceEntry parse_piece(Reader& r, std::size_t at, std::size_t index) {
    SentencePieceEntry e;
    e.offset = at;
    const std::string name = "pieces[" + std::to_string(index) + "]";
    while (!r.done()) {
      const auto [field, wire, fat] = r.tag();
      switch (field) {
        case 1:
          e.piece = std::string(r.bytes_field(wire, fat, (name + ".piece").c_str()));
          break;
        case 2: {
          e.score = r.float_field(wire, fat, (name + ".score").c_str());
          if (std::isnan(e.score)) r.fail(fat, name + ".score: NaN");
          break;
        }
        case 3: {
          const std::uint64_t t = r.varint_field(wire, fat, (name + ".type").c_str());
          if (t < 1 || t > 6)
            r.fail(fat, name + ".type: " + std::to_string(t) +
                            " is not a piece type (NORMAL=1 ... BYTE=6)");
          e.type = static_cast<SentencePieceType>(t);
          break;
        }
        default:
          r.skip(wire, fat, 0);
      }
    }
    return e;
  }

  static void parse_trainer(Reader& r, SentencePieceTrainerSpec& t) {
    while (!r.done()) {
      const auto [field, wire, at] = r.tag();
      switch (field) {
        case 3: {
          const std::uint64_t v = r.varint_field(wire, at, "trainer_spec.model_type");
          if (v < 1 || v > 4)
            r.fail(at, "trainer_spec.model_type: " + std::to_string(v) +
                           " is not UNIGRAM=1, BPE=2, WORD=3 or CHAR=4");
          t.model_type = static_cast<SentencePieceModelType>(v);
          t.offset = at;
          break;
        }
        case 4:
          t.vocab_size = r.int32_field(wire, at, "trainer_spec.vocab_size");
          break;
        case 24:
          t.treat_whitespace_as_suffix =
              r.bool_field(wire, at, "trainer_spec.treat_whitespace_as_suffix");
          break;
        case 35:
          t.byte_fallback = r.bool_field(wire, at, "trainer_spec.byte_fallback");
          break;
        case 40:
          t.unk_id = r.int32_field(wire, at, "trainer_spec.unk_id");
          break;
        case 41:
          t.bos_id = r.int32_field(wire, at, "trainer_spec.bos_id");
          break;
        case 42:
          t.eos_id = r.int32_field(wire, at, "trainer_spec.eos_id");
          break;
        case 43:
          t.pad_id = r.int32_field(wire, at, "trainer_spec.pad_id");
          break;
        case 44:
          t.unk_surface = std::string(r.bytes_field(wire, at, "trainer_spec.unk_surface"));
          break;
        case 45:
          t.unk_piece = std::string(r.bytes_field(wire, at, "trainer_spec.unk_piece"));
          break;
        case 46:
          t.bos_piece = std::string(r.bytes_field(wire, at, "trainer_spec.bos_piece"));
          break;
        case 47:
          t.eos_piece = std::string(r.bytes_field(wire, at, "trainer_spec.eos_piece"));
          break;
        case 48:
          t.pad_piece = std::string(r.bytes_field(wire, at, "trainer_spec.pad_piece"));
          break;
        default:
          r.skip(wire, at, 0);
      }
    }
  }

  static void parse_normalizer(Reader& r, SentencePieceNormalizerSpec& n, const std::string& name) {
    while (!r.done()) {
      const auto [field, wire, at] = r.tag();
      switch (field) {
        case 1:
          n.name = std::string(r.bytes_field(wire, at, (name + ".name").c_str()));
          break;
        case 2:
          n.precompiled_charsmap =
              std::string(r.bytes_field(wire, at, (name + ".precompiled_charsmap").c_str()));
          break;
        case 3:
          n.add_dummy_prefix = r.bool_field(wire, at, (name + ".add_dummy_prefix").c_str());
          break;
        case 4:
          n.remove_extra_whitespaces =
              r.bool_field(wire, at, (name + ".remove_extra_whitespaces").c_str());
          break;
        case 5:
          n.escape_whitespaces = r.bool_field(wire, at, (name + ".escape_whitespaces").c_str());
          break;
        default:
          r.skip(wire, at, 0);
      }
    }
  }

  // What sentencepiece's ModelInterface::InitializePieces refuses, and what
  // kappa does not implement.
  void check(const Reader& r) {
    source_ = r.source;
    std::unordered_map<std::string_view, std::size_t> normal, reserved;
    std::vector<bool> byte_found(256, false);
    std::optional<std::size_t> unk;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const SentencePieceEntry& e = pieces[i];
      const std::string name = "pieces[" + std::to_string(i) + "]";
      if (e.piece.empty()) r.fail(e.offset, name + ".piece: empty (sentencepiece refuses it)");
      auto& map = is_reserved(e.type) ? reserved : normal;
      if (const auto [it, fresh] = map.emplace(e.piece, i); !fresh)
        r.fail(e.offset, name + ".piece: " + kappa::quoted(e.piece) + " is already piece " +
                             std::to_string(it->second));
      if (e.type == SentencePieceType::kUnknown) {
        if (unk)
          r.fail(e.offset,
                 name + ": a second UNKNOWN piece (the first is " + std::to_string(*unk) + ")");
        unk = i;
      }
      if (e.type == SentencePieceType::kByte) {
        if (!trainer_spec.byte_fallback)
          r.fail(e.offset, name + ": byte piece " + kappa::quoted(e.piece) +
                               " although trainer_spec.byte_fallback is false");
        const auto hex = [](char ch) -> int {
          if (ch >= '0' && ch <= '9') return ch - '0';
          if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
          return -1;
        };
        const std::string& p = e.piece;
        if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>' || hex(p[3]) < 0 ||
            hex(p[4]) < 0)
          r.fail(e.offset, name + ": byte piece " + kappa::quoted(p) + " is not <0xNN>");
        byte_found[static_cast<std::size_t>(hex(p[3])) * 16 + static_cast<std::size_t>(hex(p[4]))] =
            true;
      }
    }
    if (!unk) r.fail(r.bytes.size(), "ModelProto.pieces: no piece of type UNKNOWN");
    unk_id_ = static_cast<TokenId>(*unk);
    if (trainer_spec.byte_fallback)
      for (std::size_t b = 0; b < 256; ++b)
        if (!byte_found[b]) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned>(b));
          r.fail(r.bytes.size(), std::string("trainer_spec.byte_fallback: the byte piece ") + buf +
                                     " is missing (all 256 are needed)");
        }
    if (trainer_spec.treat_whitespace_as_suffix)
      r.fail(r.bytes.size(), "trainer_spec.treat_whitespace_as_suffix: true is not supported");
    if (denormalizer_spec && !denormalizer_spec->precompiled_charsmap.empty())
      r.fail(denormalizer_spec->offset, "denormalizer_spec: a denormalization rule set (" +
                                            kappa::quoted(denormalizer_spec->name) +
                                            ") is not supported");
    if (!normalizer_spec.precompiled_charsmap.empty())
      (void)PrecompiledCharsmap(normalizer_spec.precompiled_charsmap,
                                r.source + ": byte " + std::to_string(normalizer_spec.offset) +
                                    ": normalizer_spec.precompiled_charsmap");
  }

  void fail_model_type(const char* what, const char* want) const {
    static constexpr const char* kNames[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    throw FormatError(
        "kappa: " + source_ + ": byte " + std::to_string(trainer_spec.offset) +
        ": trainer_spec.model_type: " + kNames[static_cast<int>(trainer_spec.model_type)] +
        " is not supported by " + what + " (it needs " + want + ")");
  }

  std::string source_;
  TokenId unk_id_ = 0;
};

}  // namespace kappa::tokenize
