// kappa/tokenize/unigram.hpp - the Unigram language-model tokenizer (T5,
// ALBERT, XLNet) as Hugging Face tokenizers defines it in tokenizer.json.
//
// A Unigram vocabulary T holds pieces with log-probabilities s(t). A
// pre-token w (a word after the normalizer and the Metaspace pre-tokenizer)
// is segmented into the pieces t_1 ... t_k with w = t_1 ... t_k that
// maximize sum_j s(t_j) (Viterbi over the lattice of the pieces that start
// at each character boundary). A character that starts no piece of its own
// length is an unknown piece of score min_t s(t) - 10. Ties keep the first
// candidate in the order HF visits them: end positions are filled from the
// earliest start, and a later candidate replaces an earlier one only when
// its score is strictly greater. Consecutive unknown pieces fuse into one
// (fuse_unk); a piece not in T becomes its bytes' `<0xNN>` pieces when
// byte_fallback is on and every such piece exists, else the unknown id.
//
// Loaded from tokenizer.json: normalizers Precompiled (SentencePiece's
// charsmap: per grapheme cluster under 6 bytes the replacement of the
// shortest key that prefixes it, else per character, as HF), Replace (string,
// or the regex `c{n,}`), Strip, Lowercase, NFC/NFD/NFKC/NFKD, StripAccents
// and Sequence; pre-tokenizers Metaspace (replacement U+2581) after an
// optional WhitespaceSplit; TemplateProcessing (single); decoders Metaspace,
// Replace (string), ByteFallback, Fuse, Strip and Sequence; added tokens with
// their lstrip / rstrip / single_word / normalized flags, found as
// kappa/tokenize/added_tokens.hpp describes. Not supported (a FormatError
// names the key): other regexes, other pre-tokenizers, other post-processors.
// Grapheme clusters follow UAX #29 except Hangul jamo sequences and Prepend
// characters, which the charsmap then sees one character at a time.
//
// UnigramSemantics::kSentencePiece (UnigramConfig::semantics, set by
// SentencePieceModel::to_unigram in sentencepiece_model.hpp) follows
// sentencepiece's own code instead, where it differs from HF's: its
// normalizer (step kind kSentencePiece: the charsmap's longest key at each
// byte, user-defined pieces untouched, sentencepiece's whitespace rules),
// one lattice over the whole text in float arithmetic with the piece types
// (control, byte and unknown pieces out of the lattice, unused ones never
// chosen, user-defined ones scored n max_s - 0.1), and its Decode (decoder
// step kind kSentencePiece, sentencepiece_decode()).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/added_tokens.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/normalize.hpp"
#include "kappa/tokenize/unicode.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "kappa/tokenize/wordpiece.hpp"

namespace kappa::tokenize {

namespace unigram_detail {

/// Transparent string hash for heterogeneous lookup.
struct Hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

/// Decodes standard base64 (with or without padding); nullopt on a bad
/// character.
inline std::optional<std::string> base64_decode(std::string_view in) {
  std::string out;
  out.reserve(in.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char ch : in) {
    int v = -1;
    if (ch >= 'A' && ch <= 'Z')
      v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z')
      v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9')
      v = ch - '0' + 52;
    else if (ch == '+')
      v = 62;
    else if (ch == '/')
      v = 63;
    else if (ch == '=')
      break;
    else if (ch == '\n' || ch == '\r')
      continue;
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFFu));
    }
  }
  return out;
}

/// A set of byte strings for the longest-prefix query (SentencePiece's
/// PrefixMatcher of user-defined pieces): a byte trie with sorted edges.
class PrefixSet {
 public:
  void insert(std::string_view key) {
    if (key.empty()) return;
    std::size_t v = 0;
    for (const char ch : key) {
      const auto b = static_cast<unsigned char>(ch);
      auto& edges = kids_[v];
      auto it = std::lower_bound(edges.begin(), edges.end(), std::make_pair(b, std::int32_t{0}));
      if (it != edges.end() && it->first == b) {
        v = static_cast<std::size_t>(it->second);
        continue;
      }
      const auto w = static_cast<std::int32_t>(kids_.size());
      edges.insert(it, {b, w});
      kids_.emplace_back();
      end_.push_back(false);
      v = static_cast<std::size_t>(w);
    }
    end_[v] = true;
  }
  bool empty() const noexcept { return kids_.size() == 1; }
  /// The length of the longest key that prefixes `s`, 0 if none.
  std::size_t longest(std::string_view s) const {
    std::size_t v = 0, best = 0;
    for (std::size_t k = 0; k < s.size(); ++k) {
      const auto& edges = kids_[v];
      const auto b = static_cast<unsigned char>(s[k]);
      auto it = std::lower_bound(edges.begin(), edges.end(), std::make_pair(b, std::int32_t{0}));
      if (it == edges.end() || it->first != b) break;
      v = static_cast<std::size_t>(it->second);
      if (end_[v]) best = k + 1;
    }
    return best;
  }

 private:
  std::vector<std::vector<std::pair<unsigned char, std::int32_t>>> kids_{1};
  std::vector<bool> end_{false};
};

/// A lattice position: the best path ending here.
struct Node {
  double score;       ///< the best path's total score
  std::size_t start;  ///< byte where its last piece starts
  TokenId id;         ///< that piece's id
  bool set;           ///< whether any path ends here
};

/// Buffers reused across the words of one encode() call.
struct Scratch {
  std::vector<Node> best;
  std::vector<std::tuple<std::size_t, std::size_t, TokenId>> spans;  ///< from, to, id or -1
  std::string word;
};

}  // namespace unigram_detail

/// The type of a piece in a SentencePiece model (ModelProto.SentencePiece.Type).
enum class SentencePieceType : std::uint8_t {
  kNormal = 1,       ///< an ordinary piece
  kUnknown = 2,      ///< the unknown piece (one per model)
  kControl = 3,      ///< `<s>`, `</s>`, `<pad>`: never matched in text, decoded as ""
  kUserDefined = 4,  ///< always one piece, never normalized
  kUnused = 5,       ///< in the vocabulary, never produced by the lattice
  kByte = 6,         ///< a byte-fallback piece `<0xNN>`
};

/// Whose semantics a UnigramTokenizer follows.
enum class UnigramSemantics {
  kHuggingFace,   ///< tokenizers' Unigram model (tokenizer.json)
  kSentencePiece  ///< sentencepiece's own (a tokenizer.model): see UnigramConfig
};

/// SentencePiece's precompiled character map (the `precompiled_charsmap`
/// of a tokenizer.json's Precompiled normalizer): a little-endian uint32
/// byte size n of a double-array trie (darts-clone units), the trie, then
/// the NUL-terminated replacement strings the trie's values point into.
class PrecompiledCharsmap {
 public:
  PrecompiledCharsmap() = default;

  /// Parses the decoded blob. \throws FormatError naming `source`.
  PrecompiledCharsmap(std::string_view blob, const std::string& source) {
    if (blob.size() < 4) throw FormatError("kappa: " + source + ": charsmap shorter than 4 bytes");
    std::uint32_t n = 0;
    for (std::size_t i = 0; i < 4; ++i)
      n |= static_cast<std::uint32_t>(static_cast<unsigned char>(blob[i])) << (8 * i);
    if (n % 4 != 0 || n > blob.size() - 4 || n == 0)
      throw FormatError("kappa: " + source + ": charsmap trie size " + std::to_string(n) +
                        " does not fit the " + std::to_string(blob.size()) + "-byte blob");
    units_.resize(n / 4);
    for (std::size_t u = 0; u < units_.size(); ++u) {
      std::uint32_t v = 0;
      for (std::size_t i = 0; i < 4; ++i)
        v |= static_cast<std::uint32_t>(static_cast<unsigned char>(blob[4 + 4 * u + i])) << (8 * i);
      units_[u] = v;
    }
    normalized_.assign(blob.substr(4 + n));
    for (std::size_t b = 0; b < 128; ++b) {
      const char ch = static_cast<char>(b);
      ascii_mapped_[b] = transform(std::string_view(&ch, 1)).has_value();
    }
  }

  bool empty() const noexcept { return units_.empty(); }

  /// Whether the ASCII byte `b` (< 128) alone has a replacement.
  bool ascii_mapped(unsigned char b) const noexcept { return ascii_mapped_[b & 0x7F]; }

  /// The replacement of `chunk`: the trie's first (shortest) prefix match of
  /// chunk's bytes, as spm_precompiled's transform (which HF calls) takes
  /// it; nullopt when no prefix of chunk is a key.
  std::optional<std::string_view> transform(std::string_view chunk) const {
    if (units_.empty()) return std::nullopt;
    std::size_t pos = offset(units_[0]);
    for (const char c : chunk) {
      if (c == '\0') return std::nullopt;  // as spm_precompiled: a NUL ends the key
      const auto label = static_cast<std::uint32_t>(static_cast<unsigned char>(c));
      pos ^= label;
      if (pos >= units_.size()) return std::nullopt;
      const std::uint32_t unit = units_[pos];
      if ((unit & ((1u << 31) | 0xFFu)) != label) return std::nullopt;
      pos ^= offset(unit);
      if (((unit >> 8) & 1u) != 0) {
        if (pos >= units_.size()) return std::nullopt;
        const std::size_t value = units_[pos] & ((1u << 31) - 1);
        if (value >= normalized_.size()) return std::nullopt;
        const std::string_view rest = std::string_view(normalized_).substr(value);
        return rest.substr(0, std::min(rest.find('\0'), rest.size()));
      }
    }
    return std::nullopt;
  }

  /// SentencePiece's own lookup (normalizer.cc NormalizePrefix): the
  /// longest key that prefixes `s` among the first 32 prefix matches (its
  /// kMaxTrieResultsSize), as {key length in bytes, replacement}; nullopt
  /// when no key prefixes s. A NUL byte ends the search.
  std::optional<std::pair<std::size_t, std::string_view>> longest_prefix(std::string_view s) const {
    if (units_.empty()) return std::nullopt;
    std::optional<std::pair<std::size_t, std::string_view>> best;
    std::size_t results = 0;
    std::size_t pos = offset(units_[0]);
    for (std::size_t k = 0; k < s.size(); ++k) {
      const char c = s[k];
      if (c == '\0') break;
      const auto label = static_cast<std::uint32_t>(static_cast<unsigned char>(c));
      pos ^= label;
      if (pos >= units_.size()) break;
      const std::uint32_t unit = units_[pos];
      if ((unit & ((1u << 31) | 0xFFu)) != label) break;
      pos ^= offset(unit);
      if (((unit >> 8) & 1u) != 0) {
        if (pos >= units_.size()) break;
        if (results++ >= 32) continue;
        const std::size_t value = units_[pos] & ((1u << 31) - 1);
        if (value >= normalized_.size()) continue;  // a malformed map: no rule
        const std::string_view rest = std::string_view(normalized_).substr(value);
        best.emplace(k + 1, rest.substr(0, std::min(rest.find('\0'), rest.size())));
      }
    }
    return best;
  }

 private:
  static std::size_t offset(std::uint32_t unit) noexcept {
    const std::uint32_t off = (unit >> 10) << ((unit & (1u << 9)) >> 6);
    return off;
  }
  std::vector<std::uint32_t> units_;
  std::string normalized_;
  std::array<bool, 128> ascii_mapped_{};
};

/// One normalizer step of a Unigram tokenizer.json.
struct UnigramNormalizerStep {
  enum class Kind {
    kPrecompiled,
    kReplace,
    kStrip,
    kLowercase,
    kForm,
    kStripAccents,
    kSentencePiece  ///< sentencepiece's whole Normalizer (see UnigramConfig)
  };
  NormalizationForm form = NormalizationForm::kNFC;  ///< kForm: NFC, NFD, NFKC or NFKD
  Kind kind = Kind::kLowercase;
  std::string pattern;      ///< Replace: the string pattern
  std::string content;      ///< Replace: its replacement
  std::size_t min_run = 0;  ///< Replace: 0, or a regex `pattern{min_run,}`
  bool strip_left = false;  ///< Strip
  bool strip_right = false;
  PrecompiledCharsmap charsmap;  ///< Precompiled, SentencePiece (may be empty)
  /// SentencePiece: the user-defined pieces, copied without normalization.
  std::vector<std::string> protected_pieces;
  bool add_dummy_prefix = true;             ///< SentencePiece: "▁" before the text
  bool remove_extra_whitespaces = true;     ///< SentencePiece: strip, collapse runs of " "
  bool escape_whitespaces = true;           ///< SentencePiece: " " -> "▁"
  unigram_detail::PrefixSet protected_set;  ///< built by UnigramTokenizer
};

/// One decoder step.
struct UnigramDecoderStep {
  enum class Kind {
    kMetaspace,
    kByteFallback,
    kFuse,
    kReplace,
    kStrip,
    kSentencePiece  ///< sentencepiece's Decode (the only step; see UnigramConfig)
  };
  Kind kind = Kind::kMetaspace;
  std::string unk_surface = " \xE2\x81\x87 ";  ///< SentencePiece: the unknown piece's text
  bool drop_bos_space = true;        ///< SentencePiece: the first piece's leading "▁" is dropped
  bool drop_leading_spaces = false;  ///< SentencePiece: ... and later ones while the text is ""
  std::string pattern, content;      ///< Replace
  std::size_t start = 0, stop = 0;   ///< Strip: characters of `content`
  bool prepend = true;               ///< Metaspace: prepend_scheme != never
};

/// The Metaspace prefix scheme.
enum class UnigramPrependScheme { kAlways, kFirst, kNever };

/// The parts of a Unigram tokenizer.json.
struct UnigramConfig {
  std::vector<std::pair<std::string, double>> pieces;  ///< the model's vocab
  std::optional<TokenId> unk_id;
  bool byte_fallback = false;
  bool fuse_unk = true;
  std::vector<UnigramNormalizerStep> normalizer;
  bool whitespace_split = false;  ///< WhitespaceSplit before Metaspace
  bool metaspace = false;         ///< a Metaspace pre-tokenizer
  UnigramPrependScheme prepend_scheme = UnigramPrependScheme::kAlways;
  bool split = true;                                      ///< Metaspace's split
  std::vector<TokenId> template_prefix, template_suffix;  ///< TemplateProcessing single
  std::vector<UnigramDecoderStep> decoder;
  bool has_decoder = false;
  /// the added tokens (added_tokens.hpp), found with their flags
  std::vector<AddedToken> added;
  /// kSentencePiece: sentencepiece's own Unigram (unigram_model.cc
  /// EncodeOptimized, sentencepiece_processor.cc) over `piece_types` (one per
  /// piece, required): the lattice holds the normal, user-defined and unused
  /// pieces (unused ones never win), with scores in float as sentencepiece
  /// adds them; a user-defined piece of n bytes scores n max_s - 0.1 with
  /// max_s the largest normal score (at least FLT_MIN); the unknown piece
  /// scores min_s - 10 over normal pieces; the whole normalized text is one
  /// lattice (no pre-tokenizer); an unknown run is never looked up as a
  /// piece; control pieces are special. Use with the normalizer step and the
  /// decoder step of kind kSentencePiece.
  UnigramSemantics semantics = UnigramSemantics::kHuggingFace;
  std::vector<SentencePieceType> piece_types;  ///< kSentencePiece: per piece
};

/// sentencepiece's Decode (sentencepiece_processor.cc) of `ids` over
/// `n_pieces` pieces, `piece_of(id)` giving a piece's text and type: control
/// pieces are "", the unknown piece is `d.unk_surface`, runs of byte pieces
/// `<0xNN>` are their bytes with each byte that does not start a valid UTF-8
/// character replaced by U+FFFD, "▁" is a space; with `d.drop_bos_space` the
/// first piece loses a leading "▁" (with `d.drop_leading_spaces`, every piece
/// does while the text is still empty).
/// \throws RangeError naming an id outside [0, n_pieces).
template <class PieceOf>
std::string sentencepiece_decode(std::span<const TokenId> ids, std::size_t n_pieces,
                                 PieceOf piece_of, const UnigramDecoderStep& d) {
  std::string text, bytes;
  const auto flush = [&] {
    for (std::size_t i = 0; i < bytes.size();) {
      const Utf8Char c = decode_utf8(bytes, i);
      if (c.valid) {
        text.append(bytes, i, c.length);
        i += c.length;
      } else {
        text.append("\xEF\xBF\xBD");
        ++i;
      }
    }
    bytes.clear();
  };
  const auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return 0;
  };
  static constexpr std::string_view kMeta = "\xE2\x96\x81";
  bool is_bos_ws = true, bos_ws_seen = false;
  for (const TokenId id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= n_pieces)
      throw RangeError("kappa: SentencePiece token id " + std::to_string(id) + " outside [0, " +
                       std::to_string(n_pieces) + ")");
    auto [piece, t] = piece_of(id);
    if (t == SentencePieceType::kByte) {
      if (piece.size() == 6) bytes.push_back(static_cast<char>(hex(piece[3]) * 16 + hex(piece[4])));
      continue;
    }
    flush();
    if (bos_ws_seen || !text.empty()) is_bos_ws = false;
    bos_ws_seen = false;
    if (t == SentencePieceType::kControl) continue;
    if (t == SentencePieceType::kUnknown) {
      text += d.unk_surface;
      continue;
    }
    if (is_bos_ws && d.drop_bos_space && piece.substr(0, kMeta.size()) == kMeta) {
      piece.remove_prefix(kMeta.size());
      bos_ws_seen = !d.drop_leading_spaces;
    }
    for (std::size_t i = 0; i < piece.size();) {
      if (piece.substr(i, kMeta.size()) == kMeta) {
        text.push_back(' ');
        i += kMeta.size();
      } else {
        text.push_back(piece[i]);
        ++i;
      }
    }
  }
  flush();
  return text;
}

/// Unigram tokenizer (Hugging Face tokenizers' model "Unigram").
class UnigramTokenizer {
 public:
  /// Builds from a config. \throws FormatError naming `source`.
  explicit UnigramTokenizer(UnigramConfig config, const std::string& source = "Unigram")
      : config_(std::move(config)) {
    if (config_.pieces.empty()) throw FormatError("kappa: " + source + ": model.vocab: empty");
    min_score_ = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < config_.pieces.size(); ++i) {
      const auto& [piece, score] = config_.pieces[i];
      ids_.insert_or_assign(piece, static_cast<TokenId>(i));  // HF: the last of duplicates
      min_score_ = std::min(min_score_, score);
    }
    if (!config_.unk_id)
      throw FormatError("kappa: " + source + ": model.unk_id: missing (HF requires it to encode)");
    if (*config_.unk_id < 0 || static_cast<std::size_t>(*config_.unk_id) >= config_.pieces.size())
      throw FormatError("kappa: " + source + ": model.unk_id: " + std::to_string(*config_.unk_id) +
                        " outside the vocabulary of " + std::to_string(config_.pieces.size()));
    n_tokens_ = config_.pieces.size();
    std::vector<std::pair<std::string_view, TokenId>> lattice_pieces;
    if (sentencepiece()) {
      init_sentencepiece(source, lattice_pieces);
    } else {
      for (const auto& [piece, id] : ids_) lattice_pieces.emplace_back(piece, id);
      for (const UnigramDecoderStep& d : config_.decoder)
        if (d.kind == UnigramDecoderStep::Kind::kSentencePiece)
          throw FormatError(
              "kappa: " + source +
              ": a SentencePiece decoder step needs UnigramSemantics::kSentencePiece");
    }
    for (UnigramNormalizerStep& n : config_.normalizer) {
      n.protected_set = unigram_detail::PrefixSet{};
      for (const std::string& p : n.protected_pieces) n.protected_set.insert(p);
    }
    build_trie(lattice_pieces);
    for (const AddedToken& a : config_.added) {
      if (a.id < 0) throw FormatError("kappa: " + source + ": added_tokens: negative id");
      if (a.content.empty())
        throw FormatError("kappa: " + source + ": added_tokens: empty content");
      const auto uid = static_cast<std::size_t>(a.id);
      n_tokens_ = std::max(n_tokens_, uid + 1);
      if (a.special) special_ids_.push_back(a.id);
      if (uid >= config_.pieces.size()) extra_[a.id] = a.content;
    }
    // After the normalizer's tables are built: normalized tokens are found
    // by their normalized content.
    for (const AddedToken& a : config_.added) {
      if (a.normalized)
        normalized_added_.add(a, normalize(a.content));
      else
        raw_added_.add(a, a.content);
    }
    for (const TokenId id : config_.template_prefix) check_id(id, source);
    for (const TokenId id : config_.template_suffix) check_id(id, source);
    if (config_.byte_fallback) {
      byte_ids_.assign(256, -1);
      for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        const auto it = ids_.find(std::string_view(buf));
        if (it != ids_.end()) byte_ids_[static_cast<std::size_t>(b)] = it->second;
      }
    }
  }

  /// Loads a Hugging Face tokenizer.json whose model type is "Unigram".
  /// \throws FormatError naming the file and the key.
  static UnigramTokenizer from_tokenizer_json(const std::string& path) {
    return from_json(read_json_file(path), path);
  }

  /// As from_tokenizer_json() on a parsed document; `source` names it.
  static UnigramTokenizer from_json(const nlohmann::json& j, const std::string& source) {
    // The typed field readers every tokenizer.json loader shares (core/json.hpp).
    const JsonFields fields(source);
    const auto fail = [&](const std::string& key, const std::string& what) {
      fields.fail(key, what);
    };
    if (!j.is_object()) fail("(top level)", "not a JSON object");
    const auto get = [](const nlohmann::json& o, const char* k) { return JsonFields::get(o, k); };
    const auto type_of = [&](const nlohmann::json& o, const std::string& key) {
      return fields.type_of(o, key);
    };
    const auto flag = [&](const nlohmann::json& o, const char* k, const std::string& key,
                          bool dflt) { return fields.flag(o, k, key, dflt); };
    const auto str = [&](const nlohmann::json& o, const char* k, const std::string& key,
                         const std::string& dflt) { return fields.str(o, k, key, dflt); };
    const auto id_of = [&](const nlohmann::json& v, const std::string& key) -> TokenId {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
          v.get<std::int64_t>() > std::numeric_limits<TokenId>::max())
        fail(key, "not a token id");
      return static_cast<TokenId>(v.get<std::int64_t>());
    };
    UnigramConfig c;
    const nlohmann::json* model = get(j, "model");
    if (model == nullptr) fail("model", "missing");
    const std::string mtype = type_of(*model, "model");
    if (mtype != "Unigram") fail("model.type", kappa::quoted(mtype) + " is not \"Unigram\"");
    const nlohmann::json* vocab = get(*model, "vocab");
    if (vocab == nullptr || !vocab->is_array()) fail("model.vocab", "missing or not an array");
    c.pieces.reserve(vocab->size());
    for (std::size_t i = 0; i < vocab->size(); ++i) {
      const nlohmann::json& e = (*vocab)[i];
      const std::string key = "model.vocab[" + std::to_string(i) + "]";
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        fail(key, "not a [piece, score] pair");
      c.pieces.emplace_back(e[0].get<std::string>(), e[1].get<double>());
    }
    if (const nlohmann::json* u = get(*model, "unk_id")) c.unk_id = id_of(*u, "model.unk_id");
    c.byte_fallback = flag(*model, "byte_fallback", "model", false);
    // normalizer
    const auto add_norm = [&](const nlohmann::json& n, const std::string& key, auto& self) -> void {
      const std::string t = type_of(n, key);
      UnigramNormalizerStep s;
      if (t == "Sequence") {
        const nlohmann::json* list = get(n, "normalizers");
        if (list == nullptr || !list->is_array()) fail(key + ".normalizers", "not an array");
        for (std::size_t i = 0; i < list->size(); ++i)
          self((*list)[i], key + ".normalizers[" + std::to_string(i) + "]", self);
        return;
      }
      if (t == "Precompiled") {
        const std::string b64 = str(n, "precompiled_charsmap", key, "");
        if (b64.empty()) return;  // HF: an empty charsmap normalizes nothing
        const auto blob = unigram_detail::base64_decode(b64);
        if (!blob) fail(key + ".precompiled_charsmap", "not base64");
        s.kind = UnigramNormalizerStep::Kind::kPrecompiled;
        s.charsmap = PrecompiledCharsmap(*blob, source + ": " + key + ".precompiled_charsmap");
      } else if (t == "Replace") {
        const nlohmann::json* p = get(n, "pattern");
        s.kind = UnigramNormalizerStep::Kind::kReplace;
        s.content = str(n, "content", key, "");
        if (p != nullptr && get(*p, "Regex") != nullptr) {
          // The one regex the hub's Unigram files use (T5: " {2,}" -> " "):
          // a run of at least n copies of one character, "c{n,}".
          const std::string re = str(*p, "Regex", key + ".pattern", "");
          const std::size_t brace = re.find('{');
          std::size_t min_run = 0;
          bool ok = brace != std::string::npos && brace > 0 && re.size() > brace + 2 &&
                    re.compare(re.size() - 2, 2, ",}") == 0 && decode_utf8(re, 0).length == brace &&
                    std::string_view("\\.^$|?*+()[]{}").find(re[0]) == std::string_view::npos;
          for (std::size_t k = brace + 1; ok && k + 2 < re.size(); ++k) {
            if (re[k] < '0' || re[k] > '9' || min_run > 1000)
              ok = false;
            else
              min_run = min_run * 10 + static_cast<std::size_t>(re[k] - '0');
          }
          if (!ok || min_run == 0)
            fail(key + ".pattern.Regex",
                 kappa::quoted(re) + " is not supported (only a repeated character `c{n,}`)");
          s.pattern = re.substr(0, brace);
          s.min_run = min_run;
        } else {
          if (p == nullptr || get(*p, "String") == nullptr)
            fail(key + ".pattern", "neither String nor Regex");
          s.pattern = str(*p, "String", key + ".pattern", "");
          if (s.pattern.empty()) fail(key + ".pattern.String", "empty");
        }
      } else if (t == "Strip") {
        s.kind = UnigramNormalizerStep::Kind::kStrip;
        s.strip_left = flag(n, "strip_left", key, true);
        s.strip_right = flag(n, "strip_right", key, true);
      } else if (t == "Lowercase") {
        s.kind = UnigramNormalizerStep::Kind::kLowercase;
      } else if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
        s.kind = UnigramNormalizerStep::Kind::kForm;
        s.form = t == "NFC"    ? NormalizationForm::kNFC
                 : t == "NFD"  ? NormalizationForm::kNFD
                 : t == "NFKC" ? NormalizationForm::kNFKC
                               : NormalizationForm::kNFKD;
      } else if (t == "StripAccents") {
        s.kind = UnigramNormalizerStep::Kind::kStripAccents;
      } else {
        fail(key + ".type", kappa::quoted(t) + " is not supported for Unigram");
      }
      c.normalizer.push_back(std::move(s));
    };
    if (const nlohmann::json* n = get(j, "normalizer")) add_norm(*n, "normalizer", add_norm);
    // pre-tokenizer
    const auto add_pre = [&](const nlohmann::json& p, const std::string& key, auto& self) -> void {
      const std::string t = type_of(p, key);
      if (t == "Sequence") {
        const nlohmann::json* list = get(p, "pretokenizers");
        if (list == nullptr || !list->is_array()) fail(key + ".pretokenizers", "not an array");
        for (std::size_t i = 0; i < list->size(); ++i)
          self((*list)[i], key + ".pretokenizers[" + std::to_string(i) + "]", self);
      } else if (t == "WhitespaceSplit") {
        if (c.metaspace) fail(key, "WhitespaceSplit after Metaspace is not supported");
        c.whitespace_split = true;
      } else if (t == "Metaspace") {
        if (c.metaspace) fail(key, "a second Metaspace");
        c.metaspace = true;
        if (str(p, "replacement", key, "\xE2\x96\x81") != "\xE2\x96\x81")
          fail(key + ".replacement", "only U+2581 is supported");
        if (get(p, "prepend_scheme") != nullptr) {
          const std::string s = str(p, "prepend_scheme", key, "always");
          if (s == "always")
            c.prepend_scheme = UnigramPrependScheme::kAlways;
          else if (s == "first")
            c.prepend_scheme = UnigramPrependScheme::kFirst;
          else if (s == "never")
            c.prepend_scheme = UnigramPrependScheme::kNever;
          else
            fail(key + ".prepend_scheme", kappa::quoted(s) + " is not always, first or never");
        } else {
          c.prepend_scheme = flag(p, "add_prefix_space", key, true) ? UnigramPrependScheme::kAlways
                                                                    : UnigramPrependScheme::kNever;
        }
        c.split = flag(p, "split", key, true);
      } else {
        fail(key + ".type", kappa::quoted(t) + " is not supported for Unigram");
      }
    };
    if (const nlohmann::json* p = get(j, "pre_tokenizer")) add_pre(*p, "pre_tokenizer", add_pre);
    // added tokens
    if (const nlohmann::json* a = get(j, "added_tokens")) {
      if (!a->is_array()) fail("added_tokens", "not an array");
      for (std::size_t i = 0; i < a->size(); ++i) {
        const std::string key = "added_tokens[" + std::to_string(i) + "]";
        const nlohmann::json& e = (*a)[i];
        const nlohmann::json* id = get(e, "id");
        if (id == nullptr) fail(key + ".id", "missing");
        const std::string content = str(e, "content", key, "");
        if (content.empty()) fail(key + ".content", "missing or empty");
        AddedToken t;
        t.content = content;
        t.id = id_of(*id, key + ".id");
        read_added_token_flags(t, [&](const char* name, bool d) { return flag(e, name, key, d); });
        c.added.push_back(std::move(t));
      }
    }
    // post-processor
    if (const nlohmann::json* pp = get(j, "post_processor")) {
      const std::string t = type_of(*pp, "post_processor");
      if (t != "TemplateProcessing")
        fail("post_processor.type", kappa::quoted(t) + " is not supported");
      const nlohmann::json* single = get(*pp, "single");
      if (single == nullptr || !single->is_array()) fail("post_processor.single", "not an array");
      const nlohmann::json* specials = get(*pp, "special_tokens");
      bool seen_a = false;
      for (std::size_t i = 0; i < single->size(); ++i) {
        const std::string key = "post_processor.single[" + std::to_string(i) + "]";
        const nlohmann::json& e = (*single)[i];
        if (get(e, "Sequence") != nullptr) {
          if (seen_a) fail(key, "a second sequence");
          seen_a = true;
        } else if (const nlohmann::json* sp = get(e, "SpecialToken")) {
          const std::string name = str(*sp, "id", key + ".SpecialToken", "");
          const nlohmann::json* def = specials ? get(*specials, name.c_str()) : nullptr;
          const nlohmann::json* ids = def ? get(*def, "ids") : nullptr;
          if (ids == nullptr || !ids->is_array())
            fail("post_processor.special_tokens", kappa::quoted(name) + " missing or without ids");
          for (const auto& v : *ids)
            (seen_a ? c.template_suffix : c.template_prefix)
                .push_back(id_of(v, "post_processor.special_tokens." + name));
        } else {
          fail(key, "neither Sequence nor SpecialToken");
        }
      }
    }
    // decoder
    const auto add_dec = [&](const nlohmann::json& d, const std::string& key, auto& self) -> void {
      const std::string t = type_of(d, key);
      UnigramDecoderStep s;
      if (t == "Sequence") {
        const nlohmann::json* list = get(d, "decoders");
        if (list == nullptr || !list->is_array()) fail(key + ".decoders", "not an array");
        for (std::size_t i = 0; i < list->size(); ++i)
          self((*list)[i], key + ".decoders[" + std::to_string(i) + "]", self);
        return;
      }
      if (t == "Metaspace") {
        s.kind = UnigramDecoderStep::Kind::kMetaspace;
        if (str(d, "replacement", key, "\xE2\x96\x81") != "\xE2\x96\x81")
          fail(key + ".replacement", "only U+2581 is supported");
        if (get(d, "prepend_scheme") != nullptr)
          s.prepend = str(d, "prepend_scheme", key, "always") != "never";
        else
          s.prepend = flag(d, "add_prefix_space", key, true);
      } else if (t == "ByteFallback") {
        s.kind = UnigramDecoderStep::Kind::kByteFallback;
      } else if (t == "Fuse") {
        s.kind = UnigramDecoderStep::Kind::kFuse;
      } else if (t == "Replace") {
        const nlohmann::json* p = get(d, "pattern");
        if (p == nullptr || get(*p, "String") == nullptr)
          fail(key + ".pattern", "only a String pattern is supported");
        s.kind = UnigramDecoderStep::Kind::kReplace;
        s.pattern = str(*p, "String", key + ".pattern", "");
        s.content = str(d, "content", key, "");
        if (s.pattern.empty()) fail(key + ".pattern.String", "empty");
      } else if (t == "Strip") {
        s.kind = UnigramDecoderStep::Kind::kStrip;
        s.content = str(d, "content", key, " ");
        const auto num = [&](const char* k) -> std::size_t {
          const nlohmann::json* v = get(d, k);
          if (v == nullptr) return 0;
          if (!v->is_number_unsigned()) fail(key + "." + k, "not a count");
          return v->get<std::size_t>();
        };
        s.start = num("start");
        s.stop = num("stop");
      } else {
        fail(key + ".type", kappa::quoted(t) + " is not supported for Unigram");
      }
      c.decoder.push_back(std::move(s));
    };
    if (const nlohmann::json* d = get(j, "decoder")) {
      c.has_decoder = true;
      add_dec(*d, "decoder", add_dec);
    }
    return UnigramTokenizer(std::move(c), source);
  }

  /// The ids of `text`, with the post-processor's special tokens unless
  /// `add` is kNo (HF's add_special_tokens); the added tokens' text is
  /// recognized unless `specials` is kAsText (then it is plain text).
  std::vector<TokenId> encode(std::string_view text, AddSpecial add,
                              SpecialTokens specials = SpecialTokens::kRecognize) const {
    const bool add_special_tokens = add == AddSpecial::kYes;
    std::vector<TokenId> out;
    if (add_special_tokens)
      out.insert(out.end(), config_.template_prefix.begin(), config_.template_prefix.end());
    // added_tokens.hpp's two passes: the raw text cut at the tokens matched
    // raw, each piece normalized and cut at the normalized tokens; the rest
    // runs through the pre-tokenizer and the model.
    unigram_detail::Scratch scratch;
    const auto token = [&](TokenId id) { out.push_back(id); };
    if (specials == SpecialTokens::kAsText) {
      encode_segment(text, true, out, scratch);
    } else {
      raw_added_.split(
          text,
          [&](std::size_t b, std::size_t e) {
            const std::string_view piece = text.substr(b, e - b);
            if (normalized_added_.empty()) {
              encode_segment(piece, b == 0, out, scratch);
              return;
            }
            bool at_origin = true;
            const std::string n = normalize(piece, at_origin);
            normalized_added_.split(
                n,
                [&](std::size_t nb, std::size_t ne) {
                  encode_normalized(std::string_view(n).substr(nb, ne - nb),
                                    b == 0 && at_origin && nb == 0, out, scratch);
                },
                token);
          },
          token);
    }
    if (add_special_tokens)
      out.insert(out.end(), config_.template_suffix.begin(), config_.template_suffix.end());
    return out;
  }

  /// Encodes with the post-processor's special tokens (HF's default).
  std::vector<TokenId> encode(std::string_view text) const {
    return encode(text, AddSpecial::kYes);
  }

  /// HF's decode: ids to pieces (special ones dropped when
  /// `skip` is kYes), then the decoder.
  /// \throws RangeError naming an id outside the vocabulary.
  std::string decode(std::span<const TokenId> ids, SkipSpecial skip) const {
    if (sentencepiece() && config_.has_decoder)
      return decode_sentencepiece(ids, config_.decoder[0]);
    const bool skip_special_tokens = skip == SkipSpecial::kYes;
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const TokenId id : ids) {
      if (skip_special_tokens && is_special(id)) continue;
      tokens.push_back(token(id));
    }
    if (!config_.has_decoder) {
      std::string s;
      for (std::size_t k = 0; k < tokens.size(); ++k) {
        if (k != 0) s += ' ';
        s += tokens[k];
      }
      return s;
    }
    for (const UnigramDecoderStep& d : config_.decoder) apply_decoder(d, tokens);
    std::string s;
    for (const std::string& t : tokens) s += t;
    return s;
  }

  /// Decodes keeping special tokens.
  std::string decode(std::span<const TokenId> ids) const { return decode(ids, SkipSpecial::kNo); }

  /// N_T: the model's pieces and any added token above them.
  std::size_t vocab_size() const noexcept { return n_tokens_; }

  /// The piece of `id`. \throws RangeError naming the id and the size.
  std::string token(TokenId id) const {
    if (id >= 0 && static_cast<std::size_t>(id) < config_.pieces.size())
      return config_.pieces[static_cast<std::size_t>(id)].first;
    const auto it = extra_.find(id);
    if (it != extra_.end()) return it->second;
    throw RangeError("kappa: Unigram token id " + std::to_string(id) + " outside [0, " +
                     std::to_string(n_tokens_) + ")");
  }

  /// The id of a piece or an added token.
  std::optional<TokenId> find(std::string_view piece) const {
    for (const AddedToken& a : config_.added)
      if (a.content == piece) return a.id;
    const auto it = ids_.find(piece);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

  std::optional<TokenId> token_to_id(std::string_view t) const { return find(t); }
  std::string id_to_token(TokenId id) const { return token(id); }
  TokenId unk_id() const noexcept { return *config_.unk_id; }
  bool is_special(TokenId id) const noexcept {
    return std::find(special_ids_.begin(), special_ids_.end(), id) != special_ids_.end();
  }
  /// The score s(t) of piece `id` (a model piece).
  double score(TokenId id) const { return config_.pieces.at(static_cast<std::size_t>(id)).second; }
  const UnigramConfig& config() const noexcept { return config_; }

  /// The normalizer's output for `text` (no added-token split).
  std::string normalize(std::string_view text) const {
    bool at_origin = true;
    return normalize(text, at_origin);
  }

  /// As normalize(); `at_origin` becomes false when HF's alignments would
  /// give the first normalized character an original offset above 0 (a
  /// leading Replace match of two or more characters, or one replaced by
  /// nothing; a Strip that removed leading whitespace), which Metaspace's
  /// prepend_scheme "first" reads.
  std::string normalize(std::string_view text, bool& at_origin) const {
    std::string s(text);
    for (const UnigramNormalizerStep& n : config_.normalizer) {
      if (at_origin && !s.empty()) at_origin = keeps_origin(n, s);
      s = apply_normalizer(n, s);
    }
    return s;
  }

  /// The model alone: the Viterbi segmentation of one pre-token `word`,
  /// appended to `out` as ids (byte fallback and unk applied).
  void encode_word(std::string_view word, std::vector<TokenId>& out) const {
    unigram_detail::Scratch scratch;
    encode_word(word, out, scratch);
  }

 private:
  void encode_word(std::string_view word, std::vector<TokenId>& out,
                   unigram_detail::Scratch& scratch) const {
    if (word.empty()) return;
    if (sentencepiece()) {
      encode_sentencepiece(word, out, scratch);
      return;
    }
    const std::size_t n = word.size();
    using Node = unigram_detail::Node;
    std::vector<Node>& best = scratch.best;
    best.assign(n + 1, Node{0.0, 0, 0, false});
    best[0].set = true;
    const double unk_score = min_score_ - 10.0;
    std::size_t at = 0;
    while (at < n) {
      const double here = best[at].score;
      const std::size_t mblen = char_len(word, at);
      bool single = false;
      // The pieces that start here, shortest first (HF's trie order).
      std::size_t node = 0;
      for (std::size_t k = at; k < n; ++k) {
        const std::int32_t next = child(node, static_cast<unsigned char>(word[k]));
        if (next < 0) break;
        node = static_cast<std::size_t>(next);
        const TokenId id = trie_ids_[node];
        if (id < 0) continue;
        const std::size_t len = k + 1 - at;
        Node& target = best[k + 1];
        const double cand = config_.pieces[static_cast<std::size_t>(id)].second + here;
        if (!target.set || cand > target.score) target = Node{cand, at, id, true};
        if (len == mblen) single = true;
      }
      if (!single) {
        Node& target = best[at + mblen];
        const double cand = unk_score + here;
        if (!target.set || cand > target.score) target = Node{cand, at, *config_.unk_id, true};
      }
      at += mblen;
    }
    // Backtrack: pieces (start, end), unk runs fused.
    auto& spans = scratch.spans;
    spans.clear();
    std::size_t end = n;
    std::size_t unk_end = 0;
    bool in_unk = false;
    while (end > 0) {
      const Node& node = best[end];
      if (config_.fuse_unk && node.id == *config_.unk_id) {
        if (!in_unk) unk_end = end;
        in_unk = true;
      } else {
        if (in_unk) spans.emplace_back(end, unk_end, -1);
        in_unk = false;
        spans.emplace_back(node.start, end, node.id);
      }
      end = node.start;
    }
    if (in_unk) spans.emplace_back(0, unk_end, -1);
    std::reverse(spans.begin(), spans.end());
    for (const auto& [from, to, piece_id] : spans) {
      if (piece_id >= 0) {  // a piece of the lattice: its id is the vocabulary's
        out.push_back(piece_id);
        continue;
      }
      const std::string_view piece = word.substr(from, to - from);
      const auto f = ids_.find(piece);
      if (f != ids_.end()) {
        out.push_back(f->second);
        continue;
      }
      if (config_.byte_fallback) {
        bool all = true;
        for (const char ch : piece)
          if (byte_ids_[static_cast<unsigned char>(ch)] < 0) all = false;
        if (all) {
          for (const char ch : piece) out.push_back(byte_ids_[static_cast<unsigned char>(ch)]);
          continue;
        }
      }
      out.push_back(*config_.unk_id);
    }
  }

  bool sentencepiece() const noexcept {
    return config_.semantics == UnigramSemantics::kSentencePiece;
  }

  SentencePieceType type_of(TokenId id) const noexcept {
    return config_.piece_types[static_cast<std::size_t>(id)];
  }

  // Checks a kSentencePiece config and sets what sentencepiece's
  // InitializePieces and unigram::Model set: the piece -> id map (reserved
  // pieces over normal ones, as PieceToId), the lattice's pieces, the float
  // min and max of the normal scores, the control pieces as special.
  void init_sentencepiece(const std::string& source,
                          std::vector<std::pair<std::string_view, TokenId>>& lattice_pieces) {
    const auto fail = [&](const std::string& what) -> void {
      throw FormatError("kappa: " + source + ": " + what);
    };
    if (config_.piece_types.size() != config_.pieces.size())
      fail("SentencePiece semantics need one piece type per piece (" +
           std::to_string(config_.piece_types.size()) + " types for " +
           std::to_string(config_.pieces.size()) + " pieces)");
    if (!config_.added.empty() || config_.metaspace || config_.whitespace_split ||
        !config_.template_prefix.empty() || !config_.template_suffix.empty())
      fail("SentencePiece semantics take no added tokens, pre-tokenizer or template");
    if (type_of(*config_.unk_id) != SentencePieceType::kUnknown)
      fail("unk id " + std::to_string(*config_.unk_id) + " is not the unknown piece");
    if (config_.has_decoder &&
        (config_.decoder.size() != 1 ||
         config_.decoder[0].kind != UnigramDecoderStep::Kind::kSentencePiece))
      fail("SentencePiece semantics take one decoder step of kind kSentencePiece");
    ids_.clear();
    sp_min_ = std::numeric_limits<float>::max();
    sp_max_ = std::numeric_limits<float>::min();  // FLT_MIN, as unigram_model.cc starts
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t i = 0; i < config_.pieces.size(); ++i) {
        const SentencePieceType t = config_.piece_types[i];
        const bool normal_group = t == SentencePieceType::kNormal ||
                                  t == SentencePieceType::kUserDefined ||
                                  t == SentencePieceType::kUnused;
        if (normal_group != (pass == 0)) continue;
        const std::string& piece = config_.pieces[i].first;
        ids_.insert_or_assign(piece, static_cast<TokenId>(i));
        if (pass == 0) lattice_pieces.emplace_back(piece, static_cast<TokenId>(i));
        if (t == SentencePieceType::kNormal) {
          const auto f = static_cast<float>(config_.pieces[i].second);
          sp_min_ = std::min(sp_min_, f);
          sp_max_ = std::max(sp_max_, f);
        }
        if (t == SentencePieceType::kControl) special_ids_.push_back(static_cast<TokenId>(i));
        if (t == SentencePieceType::kByte && byte_of(piece) < 0)
          fail("byte piece " + kappa::quoted(piece) + " (id " + std::to_string(i) +
               ") is not <0xNN>");
      }
  }

  // The byte of a piece `<0xNN>` (sentencepiece's PieceToByte), else -1.
  static int byte_of(std::string_view piece) noexcept {
    const auto hex = [](char ch) -> int {
      if (ch >= '0' && ch <= '9') return ch - '0';
      if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
      return -1;
    };
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
    const int hi = hex(piece[3]), lo = hex(piece[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }

  // sentencepiece's unigram::Model::EncodeOptimized on the whole normalized
  // text, then SentencePieceProcessor's unknown handling (runs fused; with
  // byte fallback each byte's piece).
  void encode_sentencepiece(std::string_view text, std::vector<TokenId>& out,
                            unigram_detail::Scratch& scratch) const {
    const std::size_t n = text.size();
    if (n == 0) return;
    using Node = unigram_detail::Node;
    std::vector<Node>& best = scratch.best;
    best.assign(n + 1, Node{0.0, 0, 0, false});
    const float unk_score = sp_min_ - 10.0f;
    static constexpr std::array<unsigned char, 16> kCharLen = {1, 1, 1, 1, 1, 1, 1, 1,
                                                               1, 1, 1, 1, 2, 2, 3, 4};
    std::size_t at = 0;
    while (at < n) {
      const double here = best[at].score;  // a float's value
      const auto lead = static_cast<unsigned char>(text[at]);
      const std::size_t mblen = std::min<std::size_t>(kCharLen[lead >> 4], n - at);
      bool single = false;
      std::size_t node = 0;
      for (std::size_t k = at; k < n; ++k) {
        const std::int32_t next = child(node, static_cast<unsigned char>(text[k]));
        if (next < 0) break;
        node = static_cast<std::size_t>(next);
        const TokenId id = trie_ids_[node];
        if (id < 0 || type_of(id) == SentencePieceType::kUnused) continue;
        const std::size_t len = k + 1 - at;
        // The score is a double (the conditional's type), the path's a float.
        const double score = type_of(id) == SentencePieceType::kUserDefined
                                 ? static_cast<double>(static_cast<float>(len) * sp_max_) - 0.1
                                 : static_cast<double>(static_cast<float>(
                                       config_.pieces[static_cast<std::size_t>(id)].second));
        const double cand = score + here;
        Node& target = best[k + 1];
        if (!target.set || cand > target.score)
          target = Node{static_cast<double>(static_cast<float>(cand)), at, id, true};
        if (len == mblen) single = true;
      }
      if (!single) {
        Node& target = best[at + mblen];
        const float cand = unk_score + static_cast<float>(here);
        if (!target.set || static_cast<double>(cand) > target.score)
          target = Node{static_cast<double>(cand), at, *config_.unk_id, true};
      }
      at += mblen;
    }
    auto& spans = scratch.spans;
    spans.clear();
    for (std::size_t end = n; end > 0; end = best[end].start)
      spans.emplace_back(best[end].start, end, best[end].id);
    std::reverse(spans.begin(), spans.end());
    bool prev_unk = false;
    for (const auto& [from, to, id] : spans) {
      const bool unk = id == *config_.unk_id;
      if (unk && config_.byte_fallback) {
        for (std::size_t k = from; k < to; ++k) {
          const TokenId b = byte_ids_[static_cast<unsigned char>(text[k])];
          out.push_back(b >= 0 ? b : *config_.unk_id);
        }
      } else if (!(unk && prev_unk)) {
        out.push_back(id);
      }
      prev_unk = unk;
    }
  }

  std::string decode_sentencepiece(std::span<const TokenId> ids,
                                   const UnigramDecoderStep& d) const {
    return sentencepiece_decode(
        ids, config_.pieces.size(),
        [&](TokenId id) {
          return std::pair<std::string_view, SentencePieceType>(
              config_.pieces[static_cast<std::size_t>(id)].first, type_of(id));
        },
        d);
  }

  // sentencepiece's Normalizer::Normalize (normalizer.cc): at each position
  // the longest user-defined piece (kept as it is), else the charsmap's
  // longest rule, else one character (an invalid byte becomes U+FFFD);
  // leading spaces of the output dropped, a space after a space dropped,
  // trailing spaces dropped (remove_extra_whitespaces); "▁" first
  // (add_dummy_prefix); " " as "▁" (escape_whitespaces).
  static std::string sentencepiece_normalize(const UnigramNormalizerStep& n,
                                             std::string_view input) {
    std::string out;
    if (input.empty()) return out;
    const auto prefix = [&](std::string_view in) -> std::pair<std::string_view, std::size_t> {
      if (const std::size_t len = n.protected_set.longest(in); len > 0)
        return {in.substr(0, len), len};
      if (!n.charsmap.empty())
        if (const auto m = n.charsmap.longest_prefix(in)) return {m->second, m->first};
      const Utf8Char c = decode_utf8(in, 0);
      if (!c.valid) return {std::string_view("\xEF\xBF\xBD"), 1};
      return {in.substr(0, c.length), c.length};
    };
    if (n.remove_extra_whitespaces) {
      while (!input.empty()) {
        const auto p = prefix(input);
        if (p.first != " ") break;
        input.remove_prefix(p.second);
      }
    }
    if (input.empty()) return out;
    static constexpr std::string_view kMeta = "\xE2\x96\x81";
    const std::string_view space = n.escape_whitespaces ? kMeta : std::string_view(" ");
    out.reserve(input.size() * 3 + 3);
    if (n.add_dummy_prefix) out.append(space);
    bool prev_space = n.remove_extra_whitespaces;
    while (!input.empty()) {
      auto [sp, consumed] = prefix(input);
      while (prev_space && !sp.empty() && sp.front() == ' ') sp.remove_prefix(1);
      if (!sp.empty()) {
        for (const char ch : sp) {
          if (ch == ' ' && n.escape_whitespaces)
            out.append(kMeta);
          else
            out.push_back(ch);
        }
        prev_space = sp.back() == ' ';
      }
      input.remove_prefix(consumed);
      if (!n.remove_extra_whitespaces) prev_space = false;
    }
    if (n.remove_extra_whitespaces)
      while (out.size() >= space.size() &&
             out.compare(out.size() - space.size(), space.size(), space) == 0)
        out.resize(out.size() - space.size());
    return out;
  }

  // The byte trie of the pieces: node 0 is the root; a node's children are
  // edges [edge_begin_[v], edge_begin_[v + 1]) sorted by label.
  void build_trie(const std::vector<std::pair<std::string_view, TokenId>>& entries) {
    std::vector<std::map<unsigned char, std::int32_t>> kids(1);
    std::vector<TokenId> ids(1, -1);
    for (const auto& [piece, id] : entries) {
      std::size_t v = 0;
      for (const char ch : piece) {
        const auto b = static_cast<unsigned char>(ch);
        const auto it = kids[v].find(b);
        if (it != kids[v].end()) {
          v = static_cast<std::size_t>(it->second);
        } else {
          const auto w = static_cast<std::int32_t>(kids.size());
          kids[v].emplace(b, w);
          kids.emplace_back();
          ids.push_back(-1);
          v = static_cast<std::size_t>(w);
        }
      }
      ids[v] = id;
    }
    trie_ids_ = std::move(ids);
    edge_begin_.assign(kids.size() + 1, 0);
    edge_label_.clear();
    edge_target_.clear();
    for (std::size_t v = 0; v < kids.size(); ++v) {
      edge_begin_[v] = static_cast<std::uint32_t>(edge_label_.size());
      for (const auto& [b, w] : kids[v]) {
        edge_label_.push_back(b);
        edge_target_.push_back(w);
      }
    }
    edge_begin_[kids.size()] = static_cast<std::uint32_t>(edge_label_.size());
    root_.fill(-1);
    for (const auto& [b, w] : kids[0]) root_[b] = w;
  }

  std::int32_t child(std::size_t v, unsigned char b) const noexcept {
    if (v == 0) return root_[b];
    const std::uint32_t lo = edge_begin_[v], hi = edge_begin_[v + 1];
    const auto first = edge_label_.begin() + static_cast<std::ptrdiff_t>(lo);
    const auto last = edge_label_.begin() + static_cast<std::ptrdiff_t>(hi);
    const auto it = std::lower_bound(first, last, b);
    if (it == last || *it != b) return -1;
    return edge_target_[static_cast<std::size_t>(it - edge_label_.begin())];
  }

  static std::size_t char_len(std::string_view s, std::size_t i) noexcept {
    return decode_utf8(s, i).length;
  }

  void check_id(TokenId id, const std::string& source) const {
    if (id < 0 || static_cast<std::size_t>(id) >= n_tokens_)
      throw FormatError("kappa: " + source + ": post_processor: id " + std::to_string(id) +
                        " outside the vocabulary of " + std::to_string(n_tokens_));
  }

  static std::string replace_all(std::string_view s, std::string_view pat, std::string_view with) {
    std::string out;
    std::size_t i = 0;
    while (true) {
      const std::size_t f = s.find(pat, i);
      if (f == std::string_view::npos) break;
      out.append(s.substr(i, f - i));
      out.append(with);
      i = f + pat.size();
    }
    out.append(s.substr(i));
    return out;
  }

  // Every run of at least `min_run` consecutive copies of `unit` replaced by
  // `with` (the regex `unit{min_run,}`, leftmost and greedy).
  static std::string replace_runs(std::string_view s, std::string_view unit, std::size_t min_run,
                                  std::string_view with) {
    std::string out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t j = i;
      std::size_t run = 0;
      while (s.substr(j, unit.size()) == unit) {
        j += unit.size();
        ++run;
      }
      if (run >= min_run) {
        out.append(with);
        i = j;
      } else if (run > 0) {
        out.append(s.substr(i, j - i));
        i = j;
      } else {
        out.push_back(s[i]);
        ++i;
      }
    }
    return out;
  }

  // Grapheme_Cluster_Break = Control (approximately: Cc, Zl, Zp, Cf).
  static bool is_control(char32_t cp) noexcept {
    return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0xAD || cp == 0x61C || cp == 0x180E ||
           cp == 0x200B || cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
           (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFB) ||
           (cp >= 0x1BCA0 && cp <= 0x1BCA3) || (cp >= 0x1D173 && cp <= 0x1D17A) || cp == 0xE0001;
  }

  // Extended_Pictographic, approximately (the emoji blocks).
  static bool is_pictographic(char32_t cp) noexcept {
    return (cp >= 0x1F000 && cp <= 0x1FAFF) || (cp >= 0x2600 && cp <= 0x27BF) ||
           (cp >= 0x2300 && cp <= 0x23FF) || cp == 0xA9 || cp == 0xAE || cp == 0x203C ||
           cp == 0x2049 || (cp >= 0x2190 && cp <= 0x21FF) || (cp >= 0x2B00 && cp <= 0x2BFF);
  }

  // End of the extended grapheme cluster starting at i: UAX #29's rules for
  // CR LF, controls, Extend and SpacingMark (`\p{M}`, ZWJ, ZWNJ, variation
  // selectors, emoji modifiers, tags), ZWJ emoji sequences and regional
  // indicator pairs. Hangul jamo sequences and Prepend are not joined (the
  // charsmap is consulted per character there, as for any cluster of 6 bytes
  // or more).
  static std::size_t cluster_end(std::string_view s, std::size_t i) {
    const Utf8Char first = decode_utf8(s, i);
    std::size_t j = i + first.length;
    if (!first.valid) return j;
    if (first.code_point == U'\r') {
      if (j < s.size() && s[j] == '\n') ++j;
      return j;
    }
    if (is_control(first.code_point)) return j;
    bool pictographic = is_pictographic(first.code_point);
    if (first.code_point >= 0x1F1E6 && first.code_point <= 0x1F1FF && j < s.size()) {
      const Utf8Char c = decode_utf8(s, j);
      if (c.valid && c.code_point >= 0x1F1E6 && c.code_point <= 0x1F1FF) j += c.length;
    }
    while (j < s.size()) {
      const Utf8Char c = decode_utf8(s, j);
      if (!c.valid) break;
      const char32_t cp = c.code_point;
      const bool extend = char_class(cp) == CharClass::kMark || (cp >= 0xFE00 && cp <= 0xFE0F) ||
                          cp == 0x200C || (cp >= 0x1F3FB && cp <= 0x1F3FF) ||
                          (cp >= 0xE0020 && cp <= 0xE007F) || (cp >= 0xE0100 && cp <= 0xE01EF);
      if (extend) {
        j += c.length;
      } else if (cp == 0x200D) {
        j += c.length;
        if (pictographic && j < s.size()) {
          const Utf8Char n = decode_utf8(s, j);
          if (n.valid && is_pictographic(n.code_point)) j += n.length;
        }
      } else {
        break;
      }
    }
    return j;
  }

  // Whether step n leaves the first character's original offset at 0 (see
  // normalize(text, at_origin)): HF aligns a Replace's first new character
  // with the last character of the match.
  static bool keeps_origin(const UnigramNormalizerStep& n, std::string_view s) {
    switch (n.kind) {
      case UnigramNormalizerStep::Kind::kReplace: {
        std::size_t run = 0, at = 0;
        while (s.substr(at, n.pattern.size()) == n.pattern) {
          at += n.pattern.size();
          ++run;
          if (n.min_run == 0) break;
        }
        if (run == 0 || (n.min_run != 0 && run < n.min_run)) return true;
        const std::size_t chars = count_chars(s.substr(0, at));
        return chars < 2 && !n.content.empty();
      }
      case UnigramNormalizerStep::Kind::kStripAccents: {
        const Utf8Char c = decode_utf8(s, 0);
        return !(c.valid && char_class(c.code_point) == CharClass::kMark);
      }
      case UnigramNormalizerStep::Kind::kStrip:
        if (!n.strip_left) return true;
        {
          const Utf8Char c = decode_utf8(s, 0);
          return !(c.valid && detail::bert_is_whitespace(c.code_point));
        }
      default:
        return true;
    }
  }

  static std::string apply_normalizer(const UnigramNormalizerStep& n, std::string_view s) {
    switch (n.kind) {
      case UnigramNormalizerStep::Kind::kSentencePiece:
        return sentencepiece_normalize(n, s);
      case UnigramNormalizerStep::Kind::kForm:
        return kappa::tokenize::normalize(s, n.form);
      case UnigramNormalizerStep::Kind::kStripAccents:
        return StripAccents{}.apply(s);
      case UnigramNormalizerStep::Kind::kReplace:
        return n.min_run == 0 ? replace_all(s, n.pattern, n.content)
                              : replace_runs(s, n.pattern, n.min_run, n.content);
      case UnigramNormalizerStep::Kind::kLowercase: {
        std::u32string buf;
        std::string out;
        out.reserve(s.size());
        for (std::size_t i = 0; i < s.size();) {
          const Utf8Char c = decode_utf8(s, i);
          if (!c.valid || c.code_point < 0x80) {
            const char ch = s[i];
            out.push_back(ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch);
          } else {
            buf.clear();
            detail::lowercase_append(buf, c.code_point);
            for (const char32_t cp : buf) append_utf8(out, cp);
          }
          i += c.length;
        }
        return out;
      }
      case UnigramNormalizerStep::Kind::kStrip: {
        std::size_t b = 0, e = s.size();
        if (n.strip_left)
          while (b < e) {
            const Utf8Char c = decode_utf8(s, b);
            if (!c.valid || !detail::bert_is_whitespace(c.code_point)) break;
            b += c.length;
          }
        if (n.strip_right)
          while (e > b) {
            std::size_t k = e - 1;
            while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
            const Utf8Char c = decode_utf8(s, k);
            if (!c.valid || !detail::bert_is_whitespace(c.code_point)) break;
            e = k;
          }
        return std::string(s.substr(b, e - b));
      }
      case UnigramNormalizerStep::Kind::kPrecompiled: {
        std::string out;
        out.reserve(s.size());
        for (std::size_t i = 0; i < s.size();) {
          // Fast path: an ASCII character the charsmap keeps, followed by
          // ASCII (or the end), is a cluster of its own and stays as it is.
          const auto b = static_cast<unsigned char>(s[i]);
          if (b < 0x80 && b != '\r' && !n.charsmap.ascii_mapped(b) &&
              (i + 1 == s.size() || static_cast<unsigned char>(s[i + 1]) < 0x80)) {
            out.push_back(s[i]);
            ++i;
            continue;
          }
          const std::size_t g_end = cluster_end(s, i);
          const std::string_view g = s.substr(i, g_end - i);
          if (g.size() < 6) {
            if (const auto r = n.charsmap.transform(g)) {
              out.append(*r);
              i = g_end;
              continue;
            }
            if (g.size() == char_len(g, 0)) {  // one character: the same lookup
              out.append(g);
              i = g_end;
              continue;
            }
          }
          for (std::size_t k = 0; k < g.size();) {
            const std::size_t len = char_len(g, k);
            const std::string_view part = g.substr(k, len);
            if (const auto r = n.charsmap.transform(part))
              out.append(*r);
            else
              out.append(part);
            k += len;
          }
          i = g_end;
        }
        return out;
      }
    }
    return std::string(s);
  }

  // One segment between added tokens: normalizer, pre-tokenizer, model.
  void encode_segment(std::string_view text, bool at_start, std::vector<TokenId>& out,
                      unigram_detail::Scratch& scratch) const {
    if (text.empty()) return;
    bool at_origin = true;
    const std::string norm = normalize(text, at_origin);
    encode_normalized(norm, at_start && at_origin, out, scratch);
  }

  // Normalized text: the pre-tokenizer and the model.
  void encode_normalized(std::string_view norm, bool at_start, std::vector<TokenId>& out,
                         unigram_detail::Scratch& scratch) const {
    if (norm.empty()) return;
    static constexpr std::string_view kMeta = "\xE2\x96\x81";
    const auto meta = [&](std::string_view word, bool first) {
      if (word.empty()) return;
      std::string& w = scratch.word;
      w.clear();
      if (word.find(' ') == std::string_view::npos)
        w.assign(word);
      else
        w = replace_all(word, " ", kMeta);
      const bool prepend = (config_.prepend_scheme == UnigramPrependScheme::kAlways ||
                            (config_.prepend_scheme == UnigramPrependScheme::kFirst && first)) &&
                           w.compare(0, kMeta.size(), kMeta) != 0;
      if (prepend) w.insert(0, kMeta);
      if (!config_.split) {
        encode_word(w, out, scratch);
        return;
      }
      // split before every "▁" (MergedWithNext)
      std::size_t b = 0;
      for (std::size_t k = kMeta.size(); k + kMeta.size() <= w.size();) {
        if (std::string_view(w).substr(k, kMeta.size()) == kMeta) {
          encode_word(std::string_view(w).substr(b, k - b), out, scratch);
          b = k;
          k += kMeta.size();
        } else {
          ++k;
        }
      }
      encode_word(std::string_view(w).substr(b), out, scratch);
    };
    const auto word = [&](std::string_view w, bool first) {
      if (config_.metaspace)
        meta(w, first);
      else
        encode_word(w, out, scratch);
    };
    if (!config_.whitespace_split) {
      word(norm, at_start);
      return;
    }
    const std::string_view sv(norm);
    std::size_t i = 0;
    while (i < sv.size()) {
      std::size_t b = i;
      while (b < sv.size()) {
        const Utf8Char c = decode_utf8(sv, b);
        if (!c.valid || !detail::bert_is_whitespace(c.code_point)) break;
        b += c.length;
      }
      std::size_t e = b;
      while (e < sv.size()) {
        const Utf8Char c = decode_utf8(sv, e);
        if (c.valid && detail::bert_is_whitespace(c.code_point)) break;
        e += c.length;
      }
      if (e > b) word(sv.substr(b, e - b), at_start && b == 0);
      i = e;
    }
  }

  static void apply_decoder(const UnigramDecoderStep& d, std::vector<std::string>& tokens) {
    switch (d.kind) {
      case UnigramDecoderStep::Kind::kMetaspace:
        for (std::size_t k = 0; k < tokens.size(); ++k) {
          std::string out;
          const std::string& t = tokens[k];
          for (std::size_t i = 0; i < t.size();) {
            if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
              if (!(k == 0 && d.prepend)) out.push_back(' ');
              i += 3;
            } else {
              out.push_back(t[i]);
              ++i;
            }
          }
          tokens[k] = std::move(out);
        }
        break;
      case UnigramDecoderStep::Kind::kReplace:
        for (std::string& t : tokens) t = replace_all(t, d.pattern, d.content);
        break;
      case UnigramDecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.clear();
        tokens.push_back(std::move(all));
        break;
      }
      case UnigramDecoderStep::Kind::kStrip:
        for (std::string& t : tokens) {
          std::size_t b = 0, e = t.size();
          for (std::size_t k = 0;
               k < d.start && b < e && t.compare(b, d.content.size(), d.content) == 0; ++k)
            b += d.content.size();
          for (std::size_t k = 0; k < d.stop && e >= b + d.content.size() &&
                                  t.compare(e - d.content.size(), d.content.size(), d.content) == 0;
               ++k)
            e -= d.content.size();
          t = t.substr(b, e - b);
        }
        break;
      case UnigramDecoderStep::Kind::kSentencePiece:  // decode() runs it on the ids
        break;
      case UnigramDecoderStep::Kind::kByteFallback: {
        std::vector<std::string> out;
        std::string bytes;
        std::size_t pending = 0;
        const auto flush = [&] {
          if (pending == 0) return;
          if (is_valid_utf8(bytes)) {
            out.push_back(bytes);
          } else {
            for (std::size_t k = 0; k < pending; ++k) out.emplace_back("\xEF\xBF\xBD");
          }
          bytes.clear();
          pending = 0;
        };
        for (std::string& t : tokens) {
          const auto hex = [](char ch) -> int {
            if (ch >= '0' && ch <= '9') return ch - '0';
            if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
            if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
            return -1;
          };
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 &&
              hex(t[4]) >= 0) {
            bytes.push_back(static_cast<char>(hex(t[3]) * 16 + hex(t[4])));
            ++pending;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
    }
  }

  UnigramConfig config_;
  std::unordered_map<std::string, TokenId, unigram_detail::Hash, std::equal_to<>> ids_;
  std::unordered_map<TokenId, std::string> extra_;
  std::vector<TokenId> special_ids_;
  std::vector<TokenId> byte_ids_;
  double min_score_ = 0.0;
  float sp_min_ = 0.0f, sp_max_ = 0.0f;  ///< kSentencePiece: over the normal pieces
  std::vector<TokenId> trie_ids_;
  std::vector<std::uint32_t> edge_begin_;
  std::vector<unsigned char> edge_label_;
  std::vector<std::int32_t> edge_target_;
  std::array<std::int32_t, 256> root_{};
  AddedTokenMatcher raw_added_;         ///< added tokens with normalized = false
  AddedTokenMatcher normalized_added_;  ///< the others, by their normalized content
  std::size_t n_tokens_ = 0;
};

}  // namespace kappa::tokenize
