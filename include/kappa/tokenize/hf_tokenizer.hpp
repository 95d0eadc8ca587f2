// kappa/tokenize/hf_tokenizer.hpp - the tokenizer of a Hugging Face model
// directory, of any family, with one call (from_directory): tokenizer.json
// (byte-level BPE, as Llama-3, Qwen2, GPT-2 and most current models ship it;
// SentencePiece-style BPE with byte fallback, as Llama-2, Mistral-7B,
// TinyLlama, Phi-3 and Gemma do; WordPiece, as BERT; Unigram, as T5 and
// ALBERT), GPT-2's vocab.json + merges.txt, or BERT's vocab.txt, with the
// BOS/EOS settings of tokenizer_config.json and special_tokens_map.json.
// family() says which was found. WordPiece and Unigram run in their own
// classes (wordpiece.hpp, unigram.hpp, whose file comments give their
// semantics); HfTokenizer forwards to them and applies the same BOS/EOS rules
// as below, so BERT's bos_id() is its template's [CLS] and eos_id() its [SEP].
// The rest of this comment is about the two BPE families.
//
// encode(text) = prefix ++ concat over segments s of text of bpe(pieces(s)) ++ suffix,
// where the added tokens of tokenizer.json ("<|begin_of_text|>", ...) cut
// the text into segments and become their own ids (leftmost match first, the
// longest on ties, as Hugging Face's tokenizers does); pieces(s) is the
// pre-tokenizer's split pattern; bpe is BpeModel's merge loop (bpe.hpp);
// prefix/suffix are the BOS/EOS ids the tokenizer adds (see "BOS and EOS").
//
// Supported byte-level tokenizer.json (anything else is a FormatError that names the
// file, the key and what was found):
//   normalizer     null or absent, or NFC (Qwen2 and Qwen3 ship it), applied
//                  to the text between added tokens (tokenize/normalize.hpp,
//                  Unicode 16); with Normalization::kAssumeNormalized the
//                  caller promises NFC text and the step is skipped.
//   pre_tokenizer  ByteLevel with use_regex = true (GPT-2's pattern), or
//                  Sequence [Split {Regex: P, behavior: Isolated, invert:
//                  false}, ByteLevel {use_regex: false}] where P is one of
//                  the known patterns: GPT-2's, cl100k_base's (= Llama-3's),
//                  o200k_base's, Qwen2's (cl100k's with single digits).
//                  ByteLevel's add_prefix_space is honoured (a space is put
//                  before every segment that does not start with one).
//   model          type "BPE" (or no type with vocab + merges); vocab in
//                  GPT-2's byte alphabet with all 256 single bytes; merges
//                  as "a b" strings or ["a", "b"] pairs (a repeated merge
//                  takes its last position, as in tokenizers); dropout null
//                  or 0; no continuing_subword_prefix / end_of_word_suffix;
//                  unk_token and byte_fallback are accepted and never used
//                  (every byte is a token). ignore_merges: see below.
//   added_tokens   [{id, content, special, lstrip, rstrip, single_word,
//                  normalized}]: found in text with every flag as Hugging
//                  Face does (kappa/tokenize/added_tokens.hpp): first those
//                  with normalized false in the raw text, then the others in
//                  the normalized text between them. decode() passes their
//                  text through the ByteLevel decoder as Hugging Face does.
//   decoder        ByteLevel, null or absent.
//   post_processor null, ByteLevel, TemplateProcessing (the special tokens
//                  before / after $A of "single"), RobertaProcessing,
//                  BertProcessing (cls before, sep after), or a Sequence of
//                  these.
//
// SentencePiece-style BPE (the layout when pre_tokenizer is null, absent,
// Metaspace or a Split on a String), exactly as Hugging Face tokenizers (0.22) runs it:
//   normalizer     null, Prepend, Replace with a String pattern, or a Sequence
//                  of these (Llama-2's Sequence [Prepend("▁"), Replace(" ",
//                  "▁")]); NFC as above. It runs on each segment between added
//                  tokens (so Prepend puts a "▁" before each).
//   pre_tokenizer  null: the normalized segment is one word. Metaspace
//                  {replacement, prepend_scheme first / always / never (or the
//                  older add_prefix_space), split}: spaces become the
//                  replacement, which is put in front unless the segment
//                  starts with it (always; first: only for the segment at the
//                  start of the text), and with split each replacement
//                  character starts a new word.
//                  Or Split {pattern: {String: s}, behavior, invert: false}
//                  (Gemma 3's " ", MergedWithPrevious): the words are the
//                  pieces around each s, as the behavior says (Removed,
//                  Isolated, MergedWithPrevious, MergedWithNext, Contiguous).
//   model          BPE over characters: vocabulary strings as they are ("▁the",
//                  "<0x0A>"), merges in either layout; each character is its
//                  token, else with byte_fallback its UTF-8 bytes as <0xNN>
//                  tokens (if all 256 needed are there), else unk_token (runs
//                  fused into one with fuse_unk; dropped without unk_token);
//                  then the adjacent pair of lowest merge rank is merged,
//                  leftmost on ties, until none is left (a heap: O(n log n)).
//                  ignore_merges: a word that is a token is that token. A byte
//                  of invalid UTF-8 is a character of its own (byte fallback).
//                  unk_token must be in the vocabulary (Hugging Face fails at
//                  encoding time instead).
//   decoder        Sequence of Replace (String pattern), ByteFallback (runs
//                  of <0xNN> tokens to their bytes; a run that is not valid
//                  UTF-8 becomes one U+FFFD per byte), Fuse, Strip {content,
//                  start, stop}, Metaspace (the replacement as a space; in the
//                  first token dropped unless prepend_scheme is never); null
//                  joins the tokens with " ", as Hugging Face does.
// Added tokens: as for byte-level BPE above (the normalizer being the steps
// above). round_trips() says whether
// decode(encode(x)) == x holds (it does not in most SentencePiece-style
// layouts, for Hugging Face either). token(id) is the text a token stands
// for, piece(id) its vocabulary string.
//
// ignore_merges: with true (Llama-3) a piece that is itself in the vocabulary
// is emitted as that id; with false the merges alone decide. The two differ
// when a token is not reachable by the merge list from its own bytes: with
// vocab {a, b, c, bc, ab, abc} and merges [b c, a b, ab c], "abc" is [abc]
// with ignore_merges and [a, bc] without. For a rank-consistent vocabulary
// (tiktoken's, where every split of a token into two tokens merges at the
// token's rank) they never differ; for a merge list they can, so both are
// implemented. unreachable_token_count() says how many tokens are affected
// (none of GPT-2's 50256); loading finds them once, so encoding costs the same
// either way.
//
// tokenizer_config.json's added_tokens_decoder is read only for GPT-2's
// layout; with tokenizer.json, its added_tokens are the list.
//
// Files are untrusted input: each is read only if it is a regular file (a
// FIFO or a device of a file's name is a FormatError, never a blocking or
// endless read), up to 512 MiB, and JSON nested deeper than 128 levels is a
// FormatError before it is parsed (kappa/core/json.hpp). Loading is
// O(n log n) in the length of the longest token. File text in a message is
// escaped by kappa::quoted.
//
// BOS and EOS: the post_processor's template gives the ids put before and
// after the text. tokenizer_config.json's add_bos_token / add_eos_token, when
// present (true or false), take precedence and set the prefix to [bos] or []
// and the suffix to [eos] or [] (what transformers' Llama tokenizers do by
// rewriting the template). bos_token / eos_token (a string or {"content":
// ...}) come from tokenizer_config.json, overridden by special_tokens_map.json
// when it names them (as transformers loads them); without either, bos_id()
// is the template's single prefix id and eos_id() its single suffix id.
//
// decode(ids) is the concatenated bytes of the tokens (added tokens as their
// text), so decode(encode(x, AddSpecial::kNo)) == x for every byte string x,
// unless an added token with lstrip / rstrip absorbed white space or
// add_prefix_space put a space in front. No clean-up of tokenization spaces
// is applied (transformers' clean_up_tokenization_spaces is not read), and
// the bytes of a partial sequence of ids may be invalid UTF-8.
//
// Example:
//   auto tok = kappa::tokenize::HfTokenizer::from_directory("Meta-Llama-3-8B");
//   std::vector<kappa::TokenId> ids = tok.encode("Hello world");  // {128000, 9906, 1917}
//   std::string text = tok.decode(ids, kappa::tokenize::SkipSpecial::kYes);  // "Hello world"
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/added_tokens.hpp"
#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/formats.hpp"
#include "kappa/tokenize/normalize.hpp"
#include "kappa/tokenize/pretokenize.hpp"
#include "kappa/tokenize/sentencepiece_model.hpp"
#include "kappa/tokenize/unicode.hpp"
#include "kappa/tokenize/unigram.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "kappa/tokenize/wordpiece.hpp"

namespace kappa::tokenize {

/// Qwen2's pattern: cl100k_base's with single numbers instead of 1 to 3 (one
/// regex, split over two lines here):
///
///     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
///     \s*[\r\n]+|\s+(?!\S)|\s+
///
/// At a `\p{N}` character the earlier alternatives of cl100k's pattern cannot
/// match (a contraction starts with ', a letter run needs a letter or a
/// non-number prefix), so both patterns take their number alternative there;
/// everywhere else they are the same.
struct Qwen2Split {
  static std::size_t next(std::string_view s, std::size_t i) noexcept {
    const Utf8Char c = decode_utf8(s, i);
    if (c.valid && char_class(c.code_point) == CharClass::kNumber) return i + c.length;
    return Cl100kSplit::next(s, i);
  }
};

/// What the byte-level loader does with tokenizer.json's normalizer.
enum class Normalization {
  kReject,            ///< apply NFC; FormatError naming any other normalizer (the default)
  kAssumeNormalized,  ///< skip NFC: the caller promises NFC input, on which NFC is the identity
};

namespace detail {

/// "kappa: <file>: <key>: <what>"
[[noreturn]] inline void hf_error(std::string_view file, std::string_view key,
                                  std::string_view what) {
  std::string msg = "kappa: ";
  msg.append(file).append(": ");
  if (!key.empty()) msg.append(key).append(": ");
  msg.append(what);
  throw FormatError(msg);
}

/// Parses JSON text read from `file` (kappa::parse_json: nesting deeper than
/// kappa::kMaxJsonDepth is rejected before parsing). \throws FormatError
/// "kappa: <file>: byte <n>: ..." naming the file and the byte offset.
inline nlohmann::json parse_hf_json(std::string_view text, std::string_view file) {
  return kappa::parse_json(text, file);
}

/// Reads and parses the JSON file `path`: a regular file only (a FIFO does
/// not block, a device is rejected), bounded in size and nesting.
/// \throws FormatError naming the file.
inline nlohmann::json read_hf_json(const std::string& path) {
  return parse_hf_json(kappa::read_regular_file(path), path);
}

/// The JSON type of v as a word for messages.
inline std::string json_kind(const nlohmann::json& v) {
  return v.type_name();
}

/// v[key] as a string; FormatError if absent or not a string.
inline std::string json_string(const nlohmann::json& v, const char* key, std::string_view file,
                               const std::string& path) {
  const auto it = v.find(key);
  if (it == v.end()) hf_error(file, path, std::string("missing key \"") + key + "\"");
  if (!it->is_string())
    hf_error(file, path + "." + key, "expected a string, got " + json_kind(*it));
  return it->get<std::string>();
}

/// v[key] as a bool: `fallback` if absent or null; FormatError otherwise.
inline bool json_bool(const nlohmann::json& v, const char* key, bool fallback,
                      std::string_view file, const std::string& path) {
  const auto it = v.find(key);
  if (it == v.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    hf_error(file, path + "." + key, "expected true or false, got " + json_kind(*it));
  return it->get<bool>();
}

/// An id: an integer in [0, bound); FormatError naming the key otherwise.
inline TokenId json_id(const nlohmann::json& v, long long bound, std::string_view file,
                       const std::string& path) {
  if (!v.is_number_integer()) hf_error(file, path, "expected an integer id, got " + json_kind(v));
  if (v.is_number_unsigned() &&
      v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<long long>::max()))
    hf_error(file, path, "id " + v.dump() + " is out of range");
  const long long id = v.get<long long>();
  if (id < 0) hf_error(file, path, "negative id " + std::to_string(id));
  if (id >= bound)
    hf_error(file, path,
             "id " + std::to_string(id) +
                 " is far beyond the number of tokens (ids must be below " + std::to_string(bound) +
                 ")");
  return static_cast<TokenId>(id);
}

/// v as an id when it is a plain integer in [0, bound), else nullopt (then
/// json_id gives the error).
inline std::optional<TokenId> plain_id(const nlohmann::json& v, long long bound) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const std::uint64_t id = v.get<std::uint64_t>();
  if (id >= static_cast<std::uint64_t>(bound)) return std::nullopt;
  return static_cast<TokenId>(id);
}

/// A special-token setting of tokenizer_config.json / special_tokens_map.json:
/// absent -> nullopt (not set), null -> "" (set to none), a string or an
/// object with "content"; FormatError otherwise.
inline std::optional<std::string> json_token_setting(const nlohmann::json& v, const char* key,
                                                     std::string_view file) {
  const auto it = v.find(key);
  if (it == v.end()) return std::nullopt;
  if (it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return json_string(*it, "content", file, key);
  hf_error(file, key,
           "expected a string, an object with \"content\" or null, got " + json_kind(*it));
}

inline bool is_white_space(char32_t cp) noexcept {
  return char_class(cp) == CharClass::kSpace;
}

// One step of the SentencePiece-style normalizer (applied in order).
struct SpNormalizeStep {
  bool prepend = false;  // Prepend(from) when true, else Replace(from -> to)
  std::string from, to;
};
// One step of the decoder chain (Hugging Face's decode_chain, in order).
struct SpDecodeStep {
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string from, to;   // Replace; Metaspace: from = the replacement
  char32_t strip = U' ';  // Strip's content
  std::size_t start = 0, stop = 0;
  bool metaspace_prepends = true;  // Metaspace: prepend_scheme != never
};
enum class PrependScheme { kFirst, kAlways, kNever };
/// Where a Split pre-tokenizer puts the matches of its pattern.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// Hugging Face's Split pre-tokenizer with a String pattern: the text cut
/// at each occurrence of `on` (left to right, not overlapping); `word` gets
/// each non-empty piece as `behavior` says. MergedWithPrevious joins a match
/// to the piece before it unless that piece is a match itself (HF:
/// "a--b" -> "a-", "-", "b"); MergedWithNext likewise forward; Contiguous
/// makes one piece of adjacent matches.
template <class F>
void split_on_string(std::string_view text, std::string_view on, SplitBehavior behavior, F&& word) {
  std::vector<std::pair<std::string_view, bool>> parts;  // (piece, is a match)
  for (std::size_t p = 0;;) {
    const std::size_t f = text.find(on, p);
    if (f == std::string_view::npos) {
      if (p < text.size()) parts.emplace_back(text.substr(p), false);
      break;
    }
    if (f > p) parts.emplace_back(text.substr(p, f - p), false);
    parts.emplace_back(text.substr(f, on.size()), true);
    p = f + on.size();
  }
  // Pieces are contiguous in `text`: joining two is widening a view.
  const auto join = [](std::string_view a, std::string_view b) {
    return std::string_view(a.data(), static_cast<std::size_t>(b.data() + b.size() - a.data()));
  };
  std::vector<std::pair<std::string_view, bool>> merged;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& [piece, match] : parts)
        if (!match) word(piece);
      return;
    case SplitBehavior::kIsolated:
      for (const auto& part : parts) word(part.first);
      return;
    case SplitBehavior::kContiguous:
      for (const auto& part : parts) {
        if (part.second && !merged.empty() && merged.back().second)
          merged.back().first = join(merged.back().first, part.first);
        else
          merged.push_back(part);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& part : parts) {
        if (part.second && !previous_match && !merged.empty())
          merged.back().first = join(merged.back().first, part.first);
        else
          merged.push_back(part);
        previous_match = part.second;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (std::size_t k = parts.size(); k-- > 0;) {
        const auto& part = parts[k];
        if (part.second && !previous_match && !merged.empty())
          merged.back().first = join(part.first, merged.back().first);
        else
          merged.push_back(part);
        previous_match = part.second;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  for (const auto& part : merged) word(part.first);
}

struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
// The model and the pipeline of the SentencePiece-style layout.
struct SentencePieceBpe {
  std::vector<std::string> pieces;  // id -> vocabulary string (an added token's text)
  std::vector<bool> present;        // id -> assigned
  std::unordered_map<std::string, TokenId, TransparentHash, std::equal_to<>> id_of;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, TokenId>> merges;  // (a,b) -> rank, c
  std::array<TokenId, 256> byte_ids{};   // <0xNN> -> id, or -1
  std::array<TokenId, 128> ascii_ids{};  // an ASCII character's id, or -1 (a shortcut of id_of)
  bool all_bytes = false;                // every <0xNN> is a token
  bool byte_fallback = false, fuse_unk = false;
  std::optional<TokenId> unk;
  std::vector<SpNormalizeStep> normalize;
  bool metaspace = false;  // a Metaspace pre-tokenizer
  std::string split_on;    // a Split pre-tokenizer's String pattern (Gemma 3), or ""
  SplitBehavior split_behavior = SplitBehavior::kRemoved;
  std::string replacement;
  PrependScheme scheme = PrependScheme::kAlways;
  bool split = true;
  bool has_decoder = false;  // without one, Hugging Face joins the tokens with " "
  std::string separator;     // "▁" when words may be merged apart (sp_encode_word)
  std::string space;         // the character spaces become ("▁"), or ""
  bool round_trips = false;  // see HfTokenizer::round_trips()
  std::vector<SpDecodeStep> decode;
};

}  // namespace detail

/// The tokenizer families a Hugging Face directory may hold.
enum class TokenizerFamily {
  kByteLevelBpe,      ///< GPT-2, Llama-3, Qwen2: BPE over bytes (bpe.hpp)
  kSentencePieceBpe,  ///< Llama-2, Mistral, Gemma, Phi-3: BPE over characters, byte fallback
  kWordPiece,         ///< BERT (wordpiece.hpp)
  kUnigram,           ///< T5, ALBERT, XLNet (unigram.hpp)
};

/// The tokenizer of a Hugging Face model directory (see the file comment):
/// byte-level BPE with one of the known split patterns, chosen at run time,
/// SentencePiece-style BPE over characters with byte fallback, WordPiece or
/// Unigram; family() says which.
class HfTokenizer {
 public:
  /// The split pattern, one alternative per known pre-tokenizer.
  using Splitter = std::variant<Gpt2Split, Cl100kSplit, O200kSplit, Qwen2Split>;

  /// The split patterns as tokenizer.json spells them (Split's Regex), by
  /// the Splitter alternative they select. Equivalent spellings of the same
  /// regex (tiktoken's later possessive forms) are accepted too.
  static const std::vector<std::pair<std::string_view, Splitter>>& known_patterns() {
    static const std::vector<std::pair<std::string_view, Splitter>> patterns = {
        {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
         Gpt2Split{}},
        {R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", Gpt2Split{}},
        {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
         Cl100kSplit{}},
        {R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)",
         Cl100kSplit{}},
        {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
         O200kSplit{}},
        {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
         Qwen2Split{}},
    };
    return patterns;
  }

  HfTokenizer() = default;

  // ---- loading ---------------------------------------------------------------

  /// Loads a model directory: tokenizer.json if present, else vocab.json +
  /// merges.txt (GPT-2's layout); plus tokenizer_config.json and
  /// special_tokens_map.json when present. FormatError naming the file if
  /// none of the layouts is there or a file is malformed, unsupported, or
  /// present but not a regular file.
  static HfTokenizer from_directory(const std::string& dir,
                                    Normalization normalization = Normalization::kReject) {
    namespace fs = std::filesystem;
    const fs::path d(dir);
    // Present is enough: a FIFO or a directory of a file's name is then a
    // FormatError naming it (kappa::read_regular_file), not silently skipped.
    const auto file = [&](const char* name) -> std::optional<std::string> {
      const fs::path p = d / name;
      std::error_code ec;
      if (fs::exists(p, ec)) return p.string();
      return std::nullopt;
    };
    const std::optional<std::string> config = file("tokenizer_config.json");
    const std::optional<std::string> special_map = file("special_tokens_map.json");
    if (const auto tj = file("tokenizer.json"))
      return load_tokenizer_json(*tj, config, special_map, normalization);
    const auto vocab = file("vocab.json");
    const auto merges = file("merges.txt");
    if (vocab && merges) return load_gpt2(*vocab, *merges, config, special_map);
    if (const auto vocab_txt = file("vocab.txt")) {
      HfTokenizer t;
      t.set_wordpiece(WordPieceTokenizer::from_vocab_txt(*vocab_txt, config.value_or("")));
      t.apply_config(config, special_map);
      return t;
    }
    for (const char* name : {"tokenizer.model", "spiece.model"}) {
      if (const auto model = file(name)) {
        HfTokenizer t = from_sentencepiece(SentencePieceModel::read(*model));
        t.apply_config(config, special_map);
        return t;
      }
    }
    throw FormatError("kappa: " + dir +
                      ": no tokenizer: expected tokenizer.json, vocab.json and merges.txt, "
                      "vocab.txt, or a SentencePiece tokenizer.model / spiece.model");
  }

  /// Loads tokenizer.json, with the BOS/EOS settings of tokenizer_config
  /// (a tokenizer_config.json path) when given.
  static HfTokenizer from_tokenizer_json(const std::string& path,
                                         const std::optional<std::string>& tokenizer_config = {},
                                         Normalization normalization = Normalization::kReject) {
    return load_tokenizer_json(path, tokenizer_config, std::nullopt, normalization);
  }

  /// The tokenizer of a SentencePiece model file (sentencepiece_model.hpp):
  /// a UNIGRAM model exactly as sentencepiece runs it, a BPE model in the
  /// layout transformers' LlamaConverter writes (the file comment there lists
  /// where that differs from sentencepiece). bos_id() / eos_id() are the
  /// model's BOS / EOS pieces; encode() adds neither (as sentencepiece's
  /// EncodeAsIds) unless tokenizer_config.json's add_bos_token /
  /// add_eos_token say so (from_directory()).
  static HfTokenizer from_sentencepiece(const SentencePieceModel& m) {
    HfTokenizer t;
    if (m.trainer_spec.model_type == SentencePieceModelType::kUnigram)
      t.set_unigram(m.to_unigram());
    else
      t = from_json(m.to_hf_json(), m.source() + " (as tokenizer.json)");
    const auto piece_id = [&](std::int32_t id) -> std::optional<TokenId> {
      if (id < 0 || static_cast<std::size_t>(id) >= m.pieces.size()) return std::nullopt;
      return static_cast<TokenId>(id);
    };
    t.bos_ = piece_id(m.trainer_spec.bos_id);
    t.eos_ = piece_id(m.trainer_spec.eos_id);
    return t;
  }

  /// Loads a parsed tokenizer.json (BPE layouts only, as
  /// from_tokenizer_json()); `source` names it in messages.
  static HfTokenizer from_json(const nlohmann::json& root, const std::string& source,
                               Normalization normalization = Normalization::kReject) {
    return load_json_root(root, source, std::nullopt, std::nullopt, normalization);
  }

  /// Loads GPT-2's vocab.json + merges.txt, with tokenizer_config.json when
  /// given: its bos/eos/unk/pad tokens and added_tokens_decoder entries are
  /// the added tokens.
  static HfTokenizer from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt,
                                     const std::optional<std::string>& tokenizer_config = {}) {
    return load_gpt2(vocab_json, merges_txt, tokenizer_config, std::nullopt);
  }

  // ---- encoding and decoding -------------------------------------------------

  /// The ids of text: added tokens recognized, the configured BOS/EOS added
  /// unless `add` is kNo (see the file comment).
  std::vector<TokenId> encode(std::string_view text, AddSpecial add = AddSpecial::kYes) const {
    return encode(text, add, SpecialTokens::kRecognize);
  }

  /// As encode(text, add), with the spelling of added tokens in text treated
  /// as plain text when `specials` is kAsText (for untrusted text).
  std::vector<TokenId> encode(std::string_view text, AddSpecial add, SpecialTokens specials) const {
    if (wordpiece_ || unigram_) {
      std::vector<TokenId> ids = wordpiece_ ? wordpiece_->encode(text, AddSpecial::kNo, specials)
                                            : unigram_->encode(text, AddSpecial::kNo, specials);
      if (add == AddSpecial::kNo) return ids;
      std::vector<TokenId> out;
      out.reserve(prefix_.size() + ids.size() + suffix_.size());
      out.insert(out.end(), prefix_.begin(), prefix_.end());
      out.insert(out.end(), ids.begin(), ids.end());
      out.insert(out.end(), suffix_.begin(), suffix_.end());
      return out;
    }
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 2 + prefix_.size() + suffix_.size());
    if (add == AddSpecial::kYes) out.insert(out.end(), prefix_.begin(), prefix_.end());
    if (specials == SpecialTokens::kRecognize && !added_.empty())
      encode_with_added(text, out);
    else
      encode_segment(text, true, out);
    if (add == AddSpecial::kYes) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }

  /// The concatenated bytes of the tokens (added tokens as their text),
  /// leaving out special tokens when `skip` is kYes. RangeError naming the
  /// first id that is not in the vocabulary.
  std::string decode(std::span<const TokenId> ids, SkipSpecial skip = SkipSpecial::kNo) const {
    if (wordpiece_) return wordpiece_->decode(ids, skip);
    if (unigram_) return unigram_->decode(ids, skip);
    if (sp_) return sp_decode(ids, skip);
    if (!added_bytes_.empty()) {
      // Hugging Face's ByteLevel decoder reads these added tokens' text as
      // byte-alphabet strings too (see build()).
      std::string out;
      for (const TokenId id : ids) {
        if (skip == SkipSpecial::kYes && is_special(id)) continue;
        const auto f = std::find_if(added_bytes_.begin(), added_bytes_.end(),
                                    [id](const auto& a) { return a.first == id; });
        out += f != added_bytes_.end() ? f->second : model_.token(id);
      }
      return out;
    }
    if (skip == SkipSpecial::kNo) return model_.decode(ids);
    std::vector<TokenId> kept;
    kept.reserve(ids.size());
    for (TokenId id : ids)
      if (!is_special(id)) kept.push_back(id);
    return model_.decode(kept);
  }

  // ---- queries ---------------------------------------------------------------

  /// N_T: one more than the largest id (model tokens and added tokens).
  std::size_t vocab_size() const noexcept {
    if (wordpiece_) return wordpiece_->vocab_size();
    if (unigram_) return unigram_->vocab_size();
    return sp_ ? sp_->pieces.size() : model_.vocab_size();
  }
  /// The bytes of a token (an added token's text); RangeError if none. In
  /// the SentencePiece-style layout, what the token stands for in text: a
  /// byte token `<0xNN>` its byte, any other its vocabulary string with "▁"
  /// as a space ("▁the" -> " the"; decode() of a whole sequence may also
  /// strip the first space, as the decoder says). piece(id) is the string.
  std::string token(TokenId id) const {
    if (wordpiece_ || unigram_) return piece(id);
    if (!sp_) return model_.token(id);
    std::string t = piece(id);
    if (is_special(id)) return t;
    const int b = byte_token_value(t);
    if (b >= 0 && sp_->byte_ids[static_cast<std::size_t>(b)] == id)
      return std::string(1, static_cast<char>(b));
    if (!sp_->space.empty()) replace_all(t, sp_->space, " ");
    return t;
  }
  /// The vocabulary string of a token (`▁the`, `<0x0A>`, an added token's
  /// text); for byte-level BPE the same as token(id). RangeError if none.
  std::string piece(TokenId id) const {
    if (wordpiece_) return wordpiece_->token(id);
    if (unigram_) return unigram_->token(id);
    if (!sp_) return model_.token(id);
    if (id < 0 || static_cast<std::size_t>(id) >= sp_->pieces.size() ||
        !sp_->present[static_cast<std::size_t>(id)])
      throw RangeError("kappa: token id " + std::to_string(id) +
                       " is not in the vocabulary (N_T = " + std::to_string(sp_->pieces.size()) +
                       ")");
    return sp_->pieces[static_cast<std::size_t>(id)];
  }
  /// The id of a token's bytes (the SentencePiece-style layout: of its
  /// vocabulary string, piece(id)) or of an added token's text.
  std::optional<TokenId> find(std::string_view token) const {
    if (wordpiece_) return wordpiece_->find(token);
    if (unigram_) return unigram_->find(token);
    for (const AddedToken& a : added_)
      if (a.content == token) return a.id;
    if (sp_) {
      const auto f = sp_->id_of.find(token);
      if (f == sp_->id_of.end()) return std::nullopt;
      return f->second;
    }
    return model_.find(token);
  }
  /// True for the SentencePiece-style layout (characters and "▁", byte
  /// fallback), false for byte-level BPE.
  bool is_sentencepiece() const noexcept { return sp_.has_value(); }
  /// The tokenizer family the files describe.
  TokenizerFamily family() const noexcept {
    if (wordpiece_) return TokenizerFamily::kWordPiece;
    if (unigram_) return TokenizerFamily::kUnigram;
    return sp_ ? TokenizerFamily::kSentencePieceBpe : TokenizerFamily::kByteLevelBpe;
  }
  /// The WordPiece tokenizer inside (family() kWordPiece), else null.
  const WordPieceTokenizer* wordpiece() const noexcept { return wordpiece_.get(); }
  /// The Unigram tokenizer inside (family() kUnigram), else null.
  const UnigramTokenizer* unigram() const noexcept { return unigram_.get(); }
  /// True if decode(encode(x, AddSpecial::kNo, SpecialTokens::kAsText)) == x
  /// holds, as Hugging Face's own tokenizer behaves: for byte-level BPE
  /// without add_prefix_space, every byte string; for the SentencePiece-style
  /// layout only with Llama-2's pipeline exactly (Prepend + Replace of " ",
  /// byte fallback with all 256 byte tokens, decoder Replace, ByteFallback,
  /// Fuse, Strip of one leading space, no merge of byte tokens), every valid
  /// UTF-8 text without the "▁" character. Hugging Face loses text in the
  /// other layouts: `<unk>` without byte fallback, the leading space of " x"
  /// with Metaspace (the prepended "▁" and the decoder's strip cannot tell
  /// them apart), "▁" typed in the text (decoded as a space).
  bool round_trips() const noexcept {
    if (wordpiece_ || unigram_) return false;
    return sp_ ? sp_->round_trips : !add_prefix_space_;
  }
  /// The BOS id, if the tokenizer names one (see the file comment).
  std::optional<TokenId> bos_id() const noexcept { return bos_; }
  /// The EOS id, if the tokenizer names one.
  std::optional<TokenId> eos_id() const noexcept { return eos_; }
  /// The ids encode(text) puts before / after the text's ids.
  const std::vector<TokenId>& prefix_ids() const noexcept { return prefix_; }
  const std::vector<TokenId>& suffix_ids() const noexcept { return suffix_; }
  /// True if id is an added token marked special.
  bool is_special(TokenId id) const noexcept {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() &&
           special_[static_cast<std::size_t>(id)];
  }
  /// The added tokens, in the order of tokenizer.json.
  const std::vector<AddedToken>& added_tokens() const noexcept { return added_; }
  /// The split pattern in use.
  const Splitter& splitter() const noexcept { return split_; }
  /// "gpt2", "cl100k", "o200k" or "qwen2": the split pattern's name.
  std::string_view pattern_name() const noexcept {
    static constexpr std::string_view kNames[] = {"gpt2", "cl100k", "o200k", "qwen2"};
    return kNames[split_.index()];
  }
  /// "NFC" when loaded with Normalization::kAssumeNormalized over an NFC
  /// normalizer, else empty.
  const std::string& assumed_normalizer() const noexcept { return normalizer_; }
  /// Whether encode() puts the text between added tokens into NFC first
  /// (a byte-level tokenizer.json with an NFC normalizer, loaded with
  /// Normalization::kReject).
  bool applies_nfc() const noexcept { return apply_nfc_; }
  /// The number of model tokens that the merges do not make from their own
  /// bytes (bpe(bytes(t)) != [t]). When zero, ignore_merges cannot change
  /// any id; GPT-2's vocabulary has none.
  std::size_t unreachable_token_count() const noexcept { return unreachable_count_; }
  /// True if a piece that is a token is emitted whole (model.ignore_merges).
  bool ignores_merges() const noexcept { return ignore_merges_; }
  const BpeModel& model() const noexcept { return model_; }

 private:
  // What the two file layouts describe, before the BpeModel is built.
  // Strings are views into the parsed files, which outlive build().
  struct Spec {
    std::string vocab_where;                                  // "file: model.vocab"
    std::vector<std::pair<std::string_view, TokenId>> vocab;  // GPT-2 alphabet string -> id
    std::string merges_file;                                  // for messages
    std::vector<std::pair<std::string_view, std::string_view>> merges;
    std::vector<std::size_t> merge_lines;  // merges.txt: the line of each merge
    std::vector<AddedToken> added;
    std::string added_file;

    // Where merge k is, for messages: "model.merges[k]" or "line N".
    std::string merge_where(std::size_t k) const {
      if (merge_lines.empty()) return "model.merges[" + std::to_string(k) + "]";
      return "line " + std::to_string(merge_lines[k]);
    }
  };

  // ---- tokenizer.json ----------------------------------------------------------

  // model.type of a tokenizer.json ("" when absent or not a string: the BPE
  // reader then names what is wrong).
  static std::string model_type(const nlohmann::json& root) {
    if (!root.is_object()) return {};
    const auto m = root.find("model");
    if (m == root.end() || !m->is_object()) return {};
    const auto t = m->find("type");
    return t != m->end() && t->is_string() ? t->get<std::string>() : std::string();
  }

  // Takes the template's ids as prefix and suffix and the special flags of
  // a WordPiece / Unigram tokenizer; encode() adds the prefix and suffix.
  template <class Inner>
  void adopt(const Inner& inner, std::vector<TokenId> prefix, std::vector<TokenId> suffix) {
    prefix_ = std::move(prefix);
    suffix_ = std::move(suffix);
    special_.assign(inner.vocab_size(), false);
    for (std::size_t id = 0; id < special_.size(); ++id)
      special_[id] = inner.is_special(static_cast<TokenId>(id));
  }
  void set_wordpiece(WordPieceTokenizer w) {
    wordpiece_ = std::make_shared<const WordPieceTokenizer>(std::move(w));
    adopt(*wordpiece_, wordpiece_->config().template_prefix, wordpiece_->config().template_suffix);
  }
  void set_unigram(UnigramTokenizer u) {
    unigram_ = std::make_shared<const UnigramTokenizer>(std::move(u));
    adopt(*unigram_, unigram_->config().template_prefix, unigram_->config().template_suffix);
  }

  static HfTokenizer load_tokenizer_json(const std::string& path,
                                         const std::optional<std::string>& config_path,
                                         const std::optional<std::string>& special_map_path,
                                         Normalization normalization) {
    return load_json_root(detail::read_hf_json(path), path, config_path, special_map_path,
                          normalization);
  }

  // `path` names the source in messages.
  static HfTokenizer load_json_root(const nlohmann::json& root, const std::string& path,
                                    const std::optional<std::string>& config_path,
                                    const std::optional<std::string>& special_map_path,
                                    Normalization normalization) {
    HfTokenizer t;
    std::vector<TokenId> prefix, suffix;
    if (const std::string type = model_type(root); type == "WordPiece" || type == "Unigram") {
      if (type == "WordPiece")
        t.set_wordpiece(WordPieceTokenizer::from_json(root, path));
      else
        t.set_unigram(UnigramTokenizer::from_json(root, path));
      t.apply_config(config_path, special_map_path);
      return t;
    }
    try {
      if (!root.is_object()) detail::hf_error(path, "", "expected a JSON object");
      Spec spec;
      spec.added_file = path;
      if (is_sentencepiece_layout(root)) {
        t.sp_.emplace();
        t.read_sp_normalizer(root, path, normalization);
        t.read_metaspace(root, path);
        t.read_sp_decoder(root, path);
        read_added_tokens(root, path, spec);
        t.read_model(root, path, spec);
        t.read_sp_model_options(root, path);
        t.build_sp(spec);
      } else {
        t.normalizer_ = check_normalizer(root, path, normalization);
        // NFC applied unless the caller promised NFC text (then only named).
        t.apply_nfc_ = t.normalizer_ == "NFC" && normalization != Normalization::kAssumeNormalized;
        if (t.apply_nfc_) t.normalizer_.clear();
        t.read_pre_tokenizer(root, path);
        check_decoder(root, path);
        read_added_tokens(root, path, spec);
        t.read_model(root, path, spec);
        t.build(spec);
      }
      read_post_processor(t, root, path, prefix, suffix);
    } catch (const nlohmann::json::exception& e) {  // a type the checks above missed
      detail::hf_error(path, "",
                       std::string("unexpected JSON structure: ") + kappa::printable(e.what()));
    }
    t.prefix_ = std::move(prefix);
    t.suffix_ = std::move(suffix);
    t.apply_config(config_path, special_map_path);
    return t;
  }

  // Returns the normalizer assumed to be the identity ("" for none).
  static std::string check_normalizer(const nlohmann::json& root, const std::string& path,
                                      Normalization normalization) {
    const auto it = root.find("normalizer");
    if (it == root.end() || it->is_null()) return {};
    const auto type_of = [](const nlohmann::json& n) {
      return n.is_object() && n.contains("type") && n["type"].is_string()
                 ? n["type"].get<std::string>()
                 : n.dump().substr(0, 60);
    };
    std::string type = type_of(*it);
    bool nfc = type == "NFC";
    if (type == "Sequence" && it->contains("normalizers") && (*it)["normalizers"].is_array()) {
      nfc = !(*it)["normalizers"].empty();
      type += " [";
      for (const auto& n : (*it)["normalizers"]) {
        type += type_of(n) + (&n == &(*it)["normalizers"].back() ? "" : ", ");
        nfc = nfc && type_of(n) == "NFC";
      }
      type += "]";
    }
    (void)normalization;
    if (nfc) return "NFC";
    detail::hf_error(path, "normalizer",
                     "type " + kappa::quoted(type) +
                         " is not supported (a byte-level tokenizer.json may have null or NFC)");
  }

  static void check_decoder(const nlohmann::json& root, const std::string& path) {
    const auto it = root.find("decoder");
    if (it == root.end() || it->is_null()) return;
    if (!it->is_object()) detail::hf_error(path, "decoder", "expected an object or null");
    const std::string type = detail::json_string(*it, "type", path, "decoder");
    if (type != "ByteLevel")
      detail::hf_error(path, "decoder.type",
                       kappa::quoted(type) + " is not supported (ByteLevel only)");
  }

  void read_pre_tokenizer(const nlohmann::json& root, const std::string& path) {
    const auto it = root.find("pre_tokenizer");
    if (it == root.end() || it->is_null())
      detail::hf_error(path, "pre_tokenizer",
                       "null is not supported (byte-level BPE needs ByteLevel or "
                       "Sequence [Split, ByteLevel])");
    if (!it->is_object()) detail::hf_error(path, "pre_tokenizer", "expected an object");
    const std::string type = detail::json_string(*it, "type", path, "pre_tokenizer");
    if (type == "ByteLevel") {
      if (!detail::json_bool(*it, "use_regex", true, path, "pre_tokenizer"))
        detail::hf_error(path, "pre_tokenizer.use_regex",
                         "ByteLevel without a split pattern is not supported");
      split_ = Gpt2Split{};
      add_prefix_space_ = detail::json_bool(*it, "add_prefix_space", false, path, "pre_tokenizer");
      return;
    }
    if (type != "Sequence")
      detail::hf_error(
          path, "pre_tokenizer.type",
          kappa::quoted(type) + " is not supported (ByteLevel, or Sequence [Split, ByteLevel])");
    const auto list = it->find("pretokenizers");
    if (list == it->end() || !list->is_array())
      detail::hf_error(path, "pre_tokenizer.pretokenizers", "expected an array");
    if (list->size() != 2 || !(*list)[0].is_object() || !(*list)[1].is_object())
      detail::hf_error(path, "pre_tokenizer.pretokenizers",
                       "only Sequence [Split {Regex, Isolated}, ByteLevel {use_regex: false}] is "
                       "supported, got " +
                           std::to_string(list->size()) + " entries" + describe_types(*list));
    const nlohmann::json& s = (*list)[0];
    const nlohmann::json& b = (*list)[1];
    const std::string k0 = "pre_tokenizer.pretokenizers[0]", k1 = "pre_tokenizer.pretokenizers[1]";
    const std::string t0 = detail::json_string(s, "type", path, k0);
    const std::string t1 = detail::json_string(b, "type", path, k1);
    if (t0 != "Split" || t1 != "ByteLevel")
      detail::hf_error(path, "pre_tokenizer.pretokenizers",
                       "only Sequence [Split, ByteLevel] is supported, got [" + kappa::quoted(t0) +
                           ", " + kappa::quoted(t1) + "]");
    if (detail::json_bool(b, "use_regex", true, path, k1))
      detail::hf_error(path, k1 + ".use_regex",
                       "true after a Split is not supported (two split patterns)");
    add_prefix_space_ = detail::json_bool(b, "add_prefix_space", false, path, k1);
    const std::string behavior = detail::json_string(s, "behavior", path, k0);
    if (behavior != "Isolated")
      detail::hf_error(path, k0 + ".behavior",
                       kappa::quoted(behavior) + " is not supported (Isolated only)");
    if (detail::json_bool(s, "invert", false, path, k0))
      detail::hf_error(path, k0 + ".invert", "true is not supported");
    const auto pattern = s.find("pattern");
    if (pattern == s.end() || !pattern->is_object())
      detail::hf_error(path, k0 + ".pattern", "expected an object {\"Regex\": ...}");
    if (!pattern->contains("Regex"))
      detail::hf_error(path, k0 + ".pattern",
                       "only a Regex pattern is supported, got " + kappa::quoted(pattern->dump()));
    const std::string regex = detail::json_string(*pattern, "Regex", path, k0 + ".pattern");
    for (const auto& [known, splitter] : known_patterns()) {
      if (regex == known) {
        split_ = splitter;
        return;
      }
    }
    detail::hf_error(path, k0 + ".pattern.Regex",
                     "unknown split pattern " + kappa::quoted(regex) +
                         " (supported: the patterns of GPT-2, cl100k_base / Llama-3, o200k_base, "
                         "Qwen2)");
  }

  // " (<type>, <type>, ...)": each entry's type quoted (or its JSON kind),
  // the first 8 only.
  static std::string describe_types(const nlohmann::json& list) {
    std::string out = " (";
    std::size_t k = 0;
    for (const auto& e : list) {
      if (k == 8) {
        out += ", ...";
        break;
      }
      out += k++ == 0 ? "" : ", ";
      out += e.is_object() && e.contains("type") && e["type"].is_string()
                 ? kappa::quoted(e["type"].get_ref<const std::string&>())
                 : std::string(e.type_name());
    }
    return out + ")";
  }

  static void read_added_tokens(const nlohmann::json& root, const std::string& path, Spec& spec) {
    const auto it = root.find("added_tokens");
    if (it == root.end() || it->is_null()) return;
    if (!it->is_array()) detail::hf_error(path, "added_tokens", "expected an array");
    // Ids are checked against the final bound in build(); here any int32.
    for (std::size_t k = 0; k < it->size(); ++k) {
      const nlohmann::json& e = (*it)[k];
      const std::string key = "added_tokens[" + std::to_string(k) + "]";
      if (!e.is_object()) detail::hf_error(path, key, "expected an object");
      if (!e.contains("id")) detail::hf_error(path, key, "missing key \"id\"");
      AddedToken a;
      a.id = detail::json_id(e["id"], 0x7FFFFFFF, path, key + ".id");
      a.content = detail::json_string(e, "content", path, key);
      if (a.content.empty()) detail::hf_error(path, key + ".content", "empty token");
      read_added_token_flags(
          a, [&](const char* name, bool d) { return detail::json_bool(e, name, d, path, key); });
      spec.added.push_back(std::move(a));
    }
  }

  void read_model(const nlohmann::json& root, const std::string& path, Spec& spec) {
    const auto it = root.find("model");
    if (it == root.end()) detail::hf_error(path, "", "missing key \"model\"");
    const nlohmann::json& m = *it;
    if (!m.is_object()) detail::hf_error(path, "model", "expected an object");
    if (m.contains("type")) {
      const std::string type = detail::json_string(m, "type", path, "model");
      if (type != "BPE")
        detail::hf_error(path, "model.type",
                         kappa::quoted(type) +
                             " is not supported (kappa loads BPE tokenizers only: byte-level, or "
                             "SentencePiece-style over characters)");
    } else if (!m.contains("vocab") || !m.contains("merges")) {
      detail::hf_error(path, "model", "missing key \"type\"");
    }
    if (const auto d = m.find("dropout"); d != m.end() && !d->is_null()) {
      if (!d->is_number()) detail::hf_error(path, "model.dropout", "expected a number or null");
      if (d->get<double>() != 0.0)
        detail::hf_error(path, "model.dropout",
                         "BPE dropout is not supported (encoding would be random)");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const auto k = m.find(key);
      if (k != m.end() && !k->is_null() && !(k->is_string() && k->get<std::string>().empty()))
        detail::hf_error(path, std::string("model.") + key, "is not supported (must be null)");
    }
    ignore_merges_ = detail::json_bool(m, "ignore_merges", false, path, "model");

    const auto vocab = m.find("vocab");
    if (vocab == m.end()) detail::hf_error(path, "model", "missing key \"vocab\"");
    if (!vocab->is_object())
      detail::hf_error(path, "model.vocab",
                       "expected an object {token: id}, got " + detail::json_kind(*vocab));
    spec.vocab_where = path + ": model.vocab";
    const long long bound = 2 * static_cast<long long>(vocab->size() + spec.added.size()) + 1024;
    spec.vocab.reserve(vocab->size());
    for (const auto& item : vocab->items()) {
      const std::string& key = item.key();
      const nlohmann::json& value = item.value();
      std::optional<TokenId> id = detail::plain_id(value, bound);
      if (!id) id = detail::json_id(value, bound, path, "model.vocab[" + kappa::quoted(key) + "]");
      spec.vocab.emplace_back(key, *id);
    }

    const auto merges = m.find("merges");
    if (merges == m.end()) detail::hf_error(path, "model", "missing key \"merges\"");
    if (!merges->is_array()) detail::hf_error(path, "model.merges", "expected an array");
    spec.merges_file = path;
    spec.merges.reserve(merges->size());
    for (std::size_t k = 0; k < merges->size(); ++k) {
      const nlohmann::json& e = (*merges)[k];
      if (e.is_string()) {
        const std::string_view line = e.get_ref<const std::string&>();
        const std::size_t sp = line.find(' ');
        if (sp == 0 || sp == std::string::npos || sp + 1 == line.size() ||
            line.find(' ', sp + 1) != std::string::npos)
          detail::hf_error(path, spec.merge_where(k),
                           "expected \"<token> <token>\", got " + kappa::quoted(line));
        spec.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
      } else if (e.is_array()) {
        if (e.size() != 2 || !e[0].is_string() || !e[1].is_string())
          detail::hf_error(path, spec.merge_where(k), "expected a pair [\"<token>\", \"<token>\"]");
        spec.merges.emplace_back(e[0].get_ref<const std::string&>(),
                                 e[1].get_ref<const std::string&>());
      } else {
        detail::hf_error(path, spec.merge_where(k),
                         "expected a string or a pair, got " + detail::json_kind(e));
      }
    }
  }

  static void read_post_processor(const HfTokenizer& t, const nlohmann::json& root,
                                  const std::string& path, std::vector<TokenId>& prefix,
                                  std::vector<TokenId>& suffix) {
    const auto it = root.find("post_processor");
    if (it == root.end() || it->is_null()) return;
    t.read_processor(*it, path, "post_processor", prefix, suffix);
  }

  void read_processor(const nlohmann::json& p, const std::string& path, const std::string& key,
                      std::vector<TokenId>& prefix, std::vector<TokenId>& suffix) const {
    if (!p.is_object()) detail::hf_error(path, key, "expected an object");
    const std::string type = detail::json_string(p, "type", path, key);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const auto list = p.find("processors");
      if (list == p.end() || !list->is_array())
        detail::hf_error(path, key + ".processors", "expected an array");
      for (std::size_t k = 0; k < list->size(); ++k)
        read_processor((*list)[k], path, key + ".processors[" + std::to_string(k) + "]", prefix,
                       suffix);
      return;
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
      const auto pair_id = [&](const char* name) {
        const auto e = p.find(name);
        if (e == p.end() || !e->is_array() || e->size() != 2)
          detail::hf_error(path, key + "." + name, "expected [\"<token>\", id]");
        return checked_template_id((*e)[1], path, key + "." + name + "[1]");
      };
      prefix.push_back(pair_id("cls"));
      suffix.insert(suffix.begin(), pair_id("sep"));
      return;
    }
    if (type != "TemplateProcessing")
      detail::hf_error(path, key + ".type",
                       kappa::quoted(type) +
                           " is not supported (TemplateProcessing, ByteLevel, RobertaProcessing, "
                           "BertProcessing, Sequence)");
    const auto single = p.find("single");
    if (single == p.end() || !single->is_array())
      detail::hf_error(path, key + ".single", "expected an array");
    const auto specials = p.find("special_tokens");
    bool seen_sequence = false;
    std::vector<TokenId> before, after;
    for (std::size_t k = 0; k < single->size(); ++k) {
      const nlohmann::json& e = (*single)[k];
      const std::string where = key + ".single[" + std::to_string(k) + "]";
      if (!e.is_object()) detail::hf_error(path, where, "expected an object");
      if (e.contains("Sequence")) {
        if (seen_sequence) detail::hf_error(path, where, "a second $A is not supported");
        seen_sequence = true;
        continue;
      }
      const auto st = e.find("SpecialToken");
      if (st == e.end() || !st->is_object())
        detail::hf_error(path, where, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      const std::string name = detail::json_string(*st, "id", path, where + ".SpecialToken");
      if (specials == p.end() || !specials->is_object() || !specials->contains(name))
        detail::hf_error(path, key + ".special_tokens", "missing the entry " + kappa::quoted(name));
      const nlohmann::json& entry = (*specials)[name];
      const std::string ek = key + ".special_tokens[" + kappa::quoted(name) + "].ids";
      if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array())
        detail::hf_error(path, ek, "expected an array of ids");
      std::vector<TokenId>& dst = seen_sequence ? after : before;
      for (std::size_t j = 0; j < entry["ids"].size(); ++j)
        dst.push_back(
            checked_template_id(entry["ids"][j], path, ek + "[" + std::to_string(j) + "]"));
    }
    if (!seen_sequence) detail::hf_error(path, key + ".single", "has no {\"Sequence\": $A}");
    prefix.insert(prefix.end(), before.begin(), before.end());
    suffix.insert(suffix.begin(), after.begin(), after.end());
  }

  TokenId checked_template_id(const nlohmann::json& v, const std::string& path,
                              const std::string& key) const {
    const TokenId id = detail::json_id(v, 0x7FFFFFFF, path, key);
    if (static_cast<std::size_t>(id) >= vocab_size() || !has_token(id))
      detail::hf_error(path, key,
                       "id " + std::to_string(id) + " is not a token (vocabulary size " +
                           std::to_string(vocab_size()) + ")");
    return id;
  }

  bool has_token(TokenId id) const {
    try {
      (void)piece(id);
      return true;
    } catch (const RangeError&) {
      return false;
    }
  }

  // ---- SentencePiece-style BPE (Llama-2, Mistral, TinyLlama, Phi-3, Gemma) -----

  using SpNormalizeStep = detail::SpNormalizeStep;
  using SpDecodeStep = detail::SpDecodeStep;
  using PrependScheme = detail::PrependScheme;
  using SentencePieceBpe = detail::SentencePieceBpe;

  static std::uint64_t pair_key(TokenId a, TokenId b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }

  // The layout is SentencePiece-style when the pre-tokenizer is absent, null
  // or Metaspace: the symbols are Unicode characters, not GPT-2's bytes.
  static bool is_sentencepiece_layout(const nlohmann::json& root) {
    const auto it = root.find("pre_tokenizer");
    if (it == root.end() || it->is_null()) return true;
    if (!it->is_object()) return false;
    const auto type = it->find("type");
    if (type == it->end() || !type->is_string()) return false;
    if (type->get_ref<const std::string&>() == "Metaspace") return true;
    // A Split on a plain string (Gemma 3's " "); the byte-level layouts
    // split with a Regex.
    const auto pattern = it->find("pattern");
    return type->get_ref<const std::string&>() == "Split" && pattern != it->end() &&
           pattern->is_object() && pattern->contains("String");
  }

  // A one-character string (Metaspace's replacement, Strip's content).
  static char32_t one_char(const std::string& s, const std::string& path, const std::string& key) {
    const Utf8Char c = s.empty() ? Utf8Char{0, 1, false} : decode_utf8(s, 0);
    if (!c.valid || c.length != s.size())
      detail::hf_error(path, key, "expected one character, got " + kappa::quoted(s));
    return c.code_point;
  }

  void read_sp_normalizer(const nlohmann::json& root, const std::string& path,
                          Normalization normalization) {
    const auto it = root.find("normalizer");
    if (it == root.end() || it->is_null()) return;
    const auto step = [&](const nlohmann::json& n, const std::string& key) {
      if (!n.is_object()) detail::hf_error(path, key, "expected an object");
      const std::string type = detail::json_string(n, "type", path, key);
      if (type == "Prepend") {
        sp_->normalize.push_back({true, detail::json_string(n, "prepend", path, key), {}});
      } else if (type == "Replace") {
        const auto pattern = n.find("pattern");
        if (pattern == n.end() || !pattern->is_object() || !pattern->contains("String"))
          detail::hf_error(path, key + ".pattern",
                           "only a String pattern is supported (a Regex is not)");
        std::string from = detail::json_string(*pattern, "String", path, key + ".pattern");
        if (from.empty()) detail::hf_error(path, key + ".pattern.String", "empty pattern");
        sp_->normalize.push_back(
            {false, std::move(from), detail::json_string(n, "content", path, key)});
      } else if (type == "NFC" && normalization == Normalization::kAssumeNormalized) {
        normalizer_ = "NFC";
      } else {
        detail::hf_error(path, key + ".type",
                         kappa::quoted(type) +
                             " is not supported (Prepend, Replace with a String pattern, and NFC "
                             "with Normalization::kAssumeNormalized)");
      }
    };
    if (it->is_object() && it->contains("type") && (*it)["type"] == "Sequence") {
      const auto list = it->find("normalizers");
      if (list == it->end() || !list->is_array())
        detail::hf_error(path, "normalizer.normalizers", "expected an array");
      for (std::size_t k = 0; k < list->size(); ++k)
        step((*list)[k], "normalizer.normalizers[" + std::to_string(k) + "]");
    } else {
      step(*it, "normalizer");
    }
  }

  void read_metaspace(const nlohmann::json& root, const std::string& path) {
    const auto it = root.find("pre_tokenizer");
    if (it == root.end() || it->is_null()) return;
    const nlohmann::json& m = *it;  // a Metaspace or a Split (is_sentencepiece_layout)
    const std::string key = "pre_tokenizer";
    if (detail::json_string(m, "type", path, key) == "Split") {
      sp_->split_on = detail::json_string(m["pattern"], "String", path, key + ".pattern");
      if (sp_->split_on.empty()) detail::hf_error(path, key + ".pattern.String", "empty pattern");
      if (detail::json_bool(m, "invert", false, path, key))
        detail::hf_error(path, key + ".invert", "true is not supported");
      const std::string b = detail::json_string(m, "behavior", path, key);
      static constexpr std::pair<std::string_view, detail::SplitBehavior> kBehaviors[] = {
          {"Removed", detail::SplitBehavior::kRemoved},
          {"Isolated", detail::SplitBehavior::kIsolated},
          {"MergedWithPrevious", detail::SplitBehavior::kMergedWithPrevious},
          {"MergedWithNext", detail::SplitBehavior::kMergedWithNext},
          {"Contiguous", detail::SplitBehavior::kContiguous}};
      const auto f = std::find_if(std::begin(kBehaviors), std::end(kBehaviors),
                                  [&](const auto& e) { return e.first == b; });
      if (f == std::end(kBehaviors))
        detail::hf_error(path, key + ".behavior", kappa::quoted(b) + " is not a Split behavior");
      sp_->split_behavior = f->second;
      return;
    }
    sp_->metaspace = true;
    sp_->replacement = detail::json_string(m, "replacement", path, key);
    (void)one_char(sp_->replacement, path, key + ".replacement");
    sp_->scheme = read_prepend_scheme(m, path, key);
    sp_->split = detail::json_bool(m, "split", true, path, key);
  }

  // prepend_scheme "first" / "always" / "never", or the older
  // add_prefix_space (true: always, false: never); always by default.
  static PrependScheme read_prepend_scheme(const nlohmann::json& m, const std::string& path,
                                           const std::string& key) {
    const auto s = m.find("prepend_scheme");
    if (s != m.end() && !s->is_null()) {
      const std::string v = detail::json_string(m, "prepend_scheme", path, key);
      if (v == "first") return PrependScheme::kFirst;
      if (v == "always") return PrependScheme::kAlways;
      if (v == "never") return PrependScheme::kNever;
      detail::hf_error(path, key + ".prepend_scheme",
                       kappa::quoted(v) + " is not one of \"first\", \"always\", \"never\"");
    }
    return detail::json_bool(m, "add_prefix_space", true, path, key) ? PrependScheme::kAlways
                                                                     : PrependScheme::kNever;
  }

  void read_sp_decoder(const nlohmann::json& root, const std::string& path) {
    const auto it = root.find("decoder");
    if (it == root.end() || it->is_null()) return;
    sp_->has_decoder = true;
    read_sp_decoder_step(*it, path, "decoder");
  }

  void read_sp_decoder_step(const nlohmann::json& d, const std::string& path,
                            const std::string& key) {
    if (!d.is_object()) detail::hf_error(path, key, "expected an object");
    const std::string type = detail::json_string(d, "type", path, key);
    SpDecodeStep step{};
    if (type == "Sequence") {
      const auto list = d.find("decoders");
      if (list == d.end() || !list->is_array())
        detail::hf_error(path, key + ".decoders", "expected an array");
      for (std::size_t k = 0; k < list->size(); ++k)
        read_sp_decoder_step((*list)[k], path, key + ".decoders[" + std::to_string(k) + "]");
      return;
    }
    if (type == "Replace") {
      step.kind = SpDecodeStep::Kind::kReplace;
      const auto pattern = d.find("pattern");
      if (pattern == d.end() || !pattern->is_object() || !pattern->contains("String"))
        detail::hf_error(path, key + ".pattern",
                         "only a String pattern is supported (a Regex is not)");
      step.from = detail::json_string(*pattern, "String", path, key + ".pattern");
      if (step.from.empty()) detail::hf_error(path, key + ".pattern.String", "empty pattern");
      step.to = detail::json_string(d, "content", path, key);
    } else if (type == "ByteFallback") {
      step.kind = SpDecodeStep::Kind::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = SpDecodeStep::Kind::kFuse;
    } else if (type == "Strip") {
      step.kind = SpDecodeStep::Kind::kStrip;
      step.strip = one_char(detail::json_string(d, "content", path, key), path, key + ".content");
      const auto count = [&](const char* name) -> std::size_t {
        const auto v = d.find(name);
        if (v == d.end()) detail::hf_error(path, key, std::string("missing key \"") + name + "\"");
        if (!v->is_number_unsigned() || v->get<std::uint64_t>() > 0xFFFFFFFFu)
          detail::hf_error(path, key + "." + name, "expected a count, got " + v->dump());
        return static_cast<std::size_t>(v->get<std::uint64_t>());
      };
      step.start = count("start");
      step.stop = count("stop");
    } else if (type == "Metaspace") {
      step.kind = SpDecodeStep::Kind::kMetaspace;
      step.from = detail::json_string(d, "replacement", path, key);
      (void)one_char(step.from, path, key + ".replacement");
      step.metaspace_prepends = read_prepend_scheme(d, path, key) != PrependScheme::kNever;
    } else {
      detail::hf_error(path, key + ".type",
                       kappa::quoted(type) +
                           " is not supported with a SentencePiece-style layout (Replace, "
                           "ByteFallback, Fuse, Strip, Metaspace, Sequence)");
    }
    sp_->decode.push_back(std::move(step));
  }

  void read_sp_model_options(const nlohmann::json& root, const std::string& path) {
    const nlohmann::json& m = root["model"];  // read_model checked it
    sp_->byte_fallback = detail::json_bool(m, "byte_fallback", false, path, "model");
    sp_->fuse_unk = detail::json_bool(m, "fuse_unk", false, path, "model");
    const auto unk = m.find("unk_token");
    if (unk != m.end() && !unk->is_null()) {
      const std::string u = detail::json_string(m, "unk_token", path, "model");
      sp_unk_text_ = u;
    }
  }

  // Builds the SentencePiece-style model: vocabulary strings as they are (the
  // "▁" form), merges over them, <0xNN> byte tokens, the unk token.
  void build_sp(Spec& spec) {
    SentencePieceBpe& sp = *sp_;
    std::size_t size = 0;
    for (const auto& [key, id] : spec.vocab)
      size = std::max(size, static_cast<std::size_t>(id) + 1);
    for (const AddedToken& a : spec.added)
      size = std::max(size, static_cast<std::size_t>(a.id) + 1);
    sp.pieces.assign(size, std::string());
    sp.present.assign(size, false);
    sp.id_of.reserve(spec.vocab.size());
    for (const auto& [key, id] : spec.vocab) {
      const auto slot = static_cast<std::size_t>(id);
      if (sp.present[slot]) {
        std::string w = spec.vocab_where;
        w.push_back('[');
        w.append(kappa::quoted(key)).push_back(']');
        detail::hf_error(w, "",
                         "duplicate id " + std::to_string(id) + " (also token " +
                             kappa::quoted(sp.pieces[slot]) + ")");
      }
      sp.present[slot] = true;
      sp.pieces[slot] = std::string(key);
      sp.id_of.emplace(std::string(key), id);
    }
    std::unordered_map<std::string_view, TokenId> added_by_text;
    for (std::size_t k = 0; k < spec.added.size(); ++k) {
      const AddedToken& a = spec.added[k];
      const std::string key = "added_tokens[" + std::to_string(k) + "]";
      const auto slot = static_cast<std::size_t>(a.id);
      if (!added_by_text.emplace(a.content, a.id).second)
        detail::hf_error(spec.added_file, key + ".content",
                         "duplicate token " + kappa::quoted(a.content));
      if (sp.present[slot] && sp.pieces[slot] != a.content)
        detail::hf_error(spec.added_file, key + ".id",
                         "id " + std::to_string(a.id) + " is also vocabulary token " +
                             kappa::quoted(sp.pieces[slot]));
      sp.present[slot] = true;
      sp.pieces[slot] = a.content;
    }
    // Merges: (a, b) -> a+b, the last position of a repeated pair its rank.
    std::string joined;
    for (std::size_t k = 0; k < spec.merges.size(); ++k) {
      const std::string_view a = spec.merges[k].first, b = spec.merges[k].second;
      const auto id = [&](std::string_view s) {
        const auto f = sp.id_of.find(s);
        if (f == sp.id_of.end()) {
          std::string both(a);
          both.push_back(' ');
          both.append(b);
          detail::hf_error(spec.merges_file, spec.merge_where(k),
                           "merge " + kappa::quoted(both) + ": token " + kappa::quoted(s) +
                               " is not in the vocabulary");
        }
        return f->second;
      };
      joined.assign(a).append(b);
      sp.merges[pair_key(id(a), id(b))] = {static_cast<std::uint32_t>(k), id(joined)};
    }
    sp.all_bytes = true;
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (std::size_t b = 0; b < 256; ++b) {
      const std::string name = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      const auto f = sp.id_of.find(name);
      sp.byte_ids[b] = f == sp.id_of.end() ? -1 : f->second;
      sp.all_bytes = sp.all_bytes && f != sp.id_of.end();
    }
    if (sp_unk_text_) {
      const auto f = sp.id_of.find(*sp_unk_text_);
      if (f == sp.id_of.end())
        detail::hf_error(spec.merges_file, "model.unk_token",
                         kappa::quoted(*sp_unk_text_) + " is not in the vocabulary");
      sp.unk = f->second;
    }
    sp.space = sp.replacement;
    if (!sp.metaspace)
      for (const SpNormalizeStep& n : sp.normalize)
        if (!n.prepend && n.from == " ") sp.space = n.to;
    sp.separator = sp_separator(sp);
    sp.round_trips = sp_round_trips(sp, spec);
    for (std::size_t c = 0; c < 128; ++c) {
      const auto f = sp.id_of.find(std::string(1, static_cast<char>(c)));
      sp.ascii_ids[c] = f == sp.id_of.end() ? -1 : f->second;
    }
    added_ = std::move(spec.added);
    special_.assign(size, false);
    for (const AddedToken& a : added_)
      if (a.special) special_[static_cast<std::size_t>(a.id)] = true;
    build_matchers();
  }

  // Llama-2's pipeline exactly (see round_trips()).
  static bool sp_round_trips(const SentencePieceBpe& sp, const Spec& spec) {
    using Kind = SpDecodeStep::Kind;
    if (!sp.byte_fallback || !sp.all_bytes || sp.metaspace || sp.normalize.size() != 2 ||
        sp.decode.size() != 4)
      return false;
    const std::string sep = sp.normalize[0].prepend ? sp.normalize[0].from : sp.normalize[1].from;
    const SpNormalizeStep& r = sp.normalize[0].prepend ? sp.normalize[1] : sp.normalize[0];
    const bool one_prepend = sp.normalize[0].prepend != sp.normalize[1].prepend;
    if (!one_prepend || r.from != " " || r.to != sep || sep.empty() ||
        sep.find(' ') != std::string::npos)
      return false;
    const SpDecodeStep* d = sp.decode.data();
    if (d[0].kind != Kind::kReplace || d[0].from != sep || d[0].to != " " ||
        d[1].kind != Kind::kByteFallback || d[2].kind != Kind::kFuse || d[3].kind != Kind::kStrip ||
        d[3].strip != U' ' || d[3].start != 1 || d[3].stop != 0 ||
        std::count(sep.begin(), sep.end(), ' ') != 0 || decode_utf8(sep, 0).length != sep.size())
      return false;
    // Only the 256 byte tokens decode as bytes, and no merge joins one.
    for (std::size_t id = 0; id < sp.pieces.size(); ++id) {
      if (!sp.present[id]) continue;
      const int b = byte_token_value(sp.pieces[id]);
      if (b >= 0 && sp.byte_ids[static_cast<std::size_t>(b)] != static_cast<TokenId>(id))
        return false;
    }
    for (const auto& [a, b] : spec.merges)
      if (byte_token_value(a) >= 0 || byte_token_value(b) >= 0) return false;
    return true;
  }

  // The character spaces become (Metaspace's replacement, or the normalizer's
  // Replace of " "), when it is a token and no token has another character
  // right before it; else "" (then words are merged whole).
  static std::string sp_separator(const SentencePieceBpe& sp) {
    std::string sep = sp.replacement;
    if (!sp.metaspace)
      for (const SpNormalizeStep& n : sp.normalize)
        if (!n.prepend && n.from == " ") sep = n.to;
    if (sep.empty() || decode_utf8(sep, 0).length != sep.size() || !decode_utf8(sep, 0).valid ||
        !sp.id_of.contains(sep))
      return {};
    for (const auto& [key, id] : sp.id_of) {
      for (std::size_t p = key.find(sep, 1); p != std::string::npos;
           p = key.find(sep, p + sep.size()))
        if (p < sep.size() || key.compare(p - sep.size(), sep.size(), sep) != 0) return {};
    }
    return sep;
  }

  // normalize, then the Metaspace pre-tokenizer, then bpe of each word.
  // at_start: the segment begins the text (Metaspace's prepend_scheme first).
  // The normalizer steps (Prepend, Replace) on a segment.
  std::string sp_normalize(std::string_view segment) const {
    const SentencePieceBpe& sp = *sp_;
    std::string text(segment);
    std::string next;
    for (const SpNormalizeStep& n : sp.normalize) {
      if (n.prepend) {
        if (!text.empty()) text.insert(0, n.from);
        continue;
      }
      next.clear();
      for (std::size_t p = 0;;) {
        const std::size_t f = text.find(n.from, p);
        if (f == std::string::npos) {
          next.append(text, p);
          break;
        }
        next.append(text, p, f - p).append(n.to);
        p = f + n.from.size();
      }
      text.swap(next);
    }
    return text;
  }

  // The Metaspace pre-tokenizer (if any) and the model on normalized text.
  void sp_encode_normalized(std::string_view text, bool at_start, std::vector<TokenId>& out) const {
    const SentencePieceBpe& sp = *sp_;
    if (!sp.split_on.empty()) {
      detail::split_on_string(text, sp.split_on, sp.split_behavior,
                              [&](std::string_view word) { sp_encode_word(word, out); });
      return;
    }
    if (!sp.metaspace) {
      sp_encode_word(text, out);
      return;
    }
    std::string next;
    for (const char c : text) {
      if (c == ' ')
        next += sp.replacement;
      else
        next += c;
    }
    if (!next.empty() && !next.starts_with(sp.replacement) &&
        (sp.scheme == PrependScheme::kAlways || (sp.scheme == PrependScheme::kFirst && at_start)))
      next.insert(0, sp.replacement);
    if (!sp.split) {
      sp_encode_word(next, out);
      return;
    }
    // Split before every replacement character (MergedWithNext).
    std::size_t word = 0;
    for (std::size_t p = next.find(sp.replacement, 1); p != std::string::npos;
         p = next.find(sp.replacement, p + 1)) {
      sp_encode_word(std::string_view(next).substr(word, p - word), out);
      word = p;
    }
    sp_encode_word(std::string_view(next).substr(word), out);
  }

  // Hugging Face's BPE::merge_word and Word::merge_all: characters (a
  // character not in the vocabulary: its <0xNN> bytes with byte_fallback,
  // else the unk token, fused runs with fuse_unk), then merges by rank, the
  // lowest first, leftmost on ties, with a heap. Invalid UTF-8 bytes are
  // characters of their own (never in the vocabulary).
  void sp_encode_word(std::string_view w, std::vector<TokenId>& out) const {
    const SentencePieceBpe& sp = *sp_;
    if (w.empty()) return;
    if (ignore_merges_) {
      if (const auto f = sp.id_of.find(w); f != sp.id_of.end()) {
        out.push_back(f->second);
        return;
      }
    }
    if (sp.separator.empty()) {
      SpScratch scratch;
      sp_merge_word(w, out, scratch);
      return;
    }
    // No token has a character other than the separator ("▁") before a
    // separator (checked when loading): no merge crosses the start of a
    // "▁" run that follows another character, so the pieces between such
    // points merge independently, each as Hugging Face merges the whole. The
    // heap then stays as small as a word (Llama-2's layout makes the whole
    // text one word).
    SpScratch scratch;
    const std::string& sep = sp.separator;
    std::size_t start = 0;
    for (std::size_t p = w.find(sep, 1); p != std::string_view::npos;
         p = w.find(sep, p + sep.size())) {
      if (p >= sep.size() && w.compare(p - sep.size(), sep.size(), sep) == 0) continue;
      sp_merge_word(w.substr(start, p - start), out, scratch);
      start = p;
    }
    sp_merge_word(w.substr(start), out, scratch);
  }

  struct SpSymbol {
    TokenId id;
    std::int32_t prev, next;
    bool alive;
  };
  struct SpCandidate {
    std::uint32_t rank;
    std::int32_t pos;
    TokenId id;
    bool operator<(const SpCandidate& o) const noexcept {  // max-heap: lowest rank, then pos
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  struct SpScratch {
    std::vector<SpSymbol> symbols;
    std::vector<SpCandidate> heap;
  };

  // Hugging Face's merge_word + merge_all on one word (see sp_encode_word).
  void sp_merge_word(std::string_view w, std::vector<TokenId>& out, SpScratch& scratch) const {
    const SentencePieceBpe& sp = *sp_;
    if (w.empty()) return;
    std::vector<SpSymbol>& symbols = scratch.symbols;
    symbols.clear();
    const auto add = [&](TokenId id) {
      const auto n = static_cast<std::int32_t>(symbols.size());
      symbols.push_back({id, n - 1, n + 1, true});
    };
    // A pending unk id (fused while fuse_unk), -1 for none. (A plain id, not
    // std::optional: GCC 12 at -O3 reports its payload maybe-uninitialized.)
    TokenId unk = -1;
    for (std::size_t i = 0; i < w.size();) {
      const Utf8Char c = decode_utf8(w, i);
      const std::size_t len = c.valid ? c.length : 1;
      const std::string_view ch = w.substr(i, len);
      i += len;
      if (const auto b = static_cast<unsigned char>(ch[0]); b < 128 && sp.ascii_ids[b] >= 0) {
        if (unk >= 0) add(unk);
        unk = -1;
        add(sp.ascii_ids[b]);
        continue;
      }
      if (const auto f = sp.id_of.find(ch); f != sp.id_of.end()) {
        if (unk >= 0) add(unk);
        unk = -1;
        add(f->second);
        continue;
      }
      if (sp.byte_fallback) {
        bool all = true;
        for (const char b : ch) all = all && sp.byte_ids[static_cast<unsigned char>(b)] >= 0;
        if (all) {
          for (const char b : ch) add(sp.byte_ids[static_cast<unsigned char>(b)]);
          continue;
        }
      }
      if (sp.unk) {
        if (unk >= 0 && !sp.fuse_unk) add(unk);
        unk = *sp.unk;
      }
    }
    if (unk >= 0) add(unk);
    if (symbols.empty()) return;
    symbols.back().next = -1;
    std::vector<SpCandidate>& heap = scratch.heap;
    heap.clear();
    const auto push = [&](std::int32_t pos, TokenId a, TokenId b) {
      const auto f = sp.merges.find(pair_key(a, b));
      if (f == sp.merges.end()) return;
      heap.push_back({f->second.first, pos, f->second.second});
      std::push_heap(heap.begin(), heap.end());
    };
    for (std::size_t k = 0; k + 1 < symbols.size(); ++k)
      push(static_cast<std::int32_t>(k), symbols[k].id, symbols[k + 1].id);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const SpCandidate top = heap.back();
      heap.pop_back();
      SpSymbol& s = symbols[static_cast<std::size_t>(top.pos)];
      if (!s.alive || s.next < 0) continue;
      SpSymbol& right = symbols[static_cast<std::size_t>(s.next)];
      const auto f = sp.merges.find(pair_key(s.id, right.id));
      if (f == sp.merges.end() || f->second.second != top.id) continue;  // stale
      s.id = top.id;
      right.alive = false;
      s.next = right.next;
      if (s.next >= 0) symbols[static_cast<std::size_t>(s.next)].prev = top.pos;
      if (s.prev >= 0) push(s.prev, symbols[static_cast<std::size_t>(s.prev)].id, s.id);
      if (s.next >= 0) push(top.pos, s.id, symbols[static_cast<std::size_t>(s.next)].id);
    }
    for (const SpSymbol& s : symbols)
      if (s.alive) out.push_back(s.id);
  }

  // Hugging Face's decode: the tokens' strings through the decoder chain,
  // concatenated (joined with " " when there is no decoder).
  std::string sp_decode(std::span<const TokenId> ids, SkipSpecial skip) const {
    const SentencePieceBpe& sp = *sp_;
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const TokenId id : ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= sp.pieces.size() ||
          !sp.present[static_cast<std::size_t>(id)])
        throw RangeError("kappa: token id " + std::to_string(id) +
                         " is not in the vocabulary (N_T = " + std::to_string(sp.pieces.size()) +
                         ")");
      if (skip == SkipSpecial::kYes && is_special(id)) continue;
      tokens.push_back(sp.pieces[static_cast<std::size_t>(id)]);
    }
    for (const SpDecodeStep& d : sp.decode) sp_decode_step(d, tokens);
    std::string out;
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      if (k != 0 && !sp.has_decoder) out += ' ';
      out += tokens[k];
    }
    return out;
  }

  static void replace_all(std::string& s, std::string_view from, std::string_view to) {
    std::string out;
    for (std::size_t p = 0;;) {
      const std::size_t f = s.find(from, p);
      if (f == std::string::npos) {
        if (p == 0) return;
        out.append(s, p);
        break;
      }
      out.append(s, p, f - p).append(to);
      p = f + from.size();
    }
    s.swap(out);
  }

  // The value of a <0xNN> token (Rust's u8::from_str_radix(NN, 16), which
  // takes a leading '+'), else -1.
  static int byte_token_value(std::string_view t) noexcept {
    if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return -1;
    const auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int lo = hex(t[4]);
    if (lo < 0) return -1;
    if (t[3] == '+') return lo;
    const int hi = hex(t[3]);
    return hi < 0 ? -1 : hi * 16 + lo;
  }

  static void sp_decode_step(const SpDecodeStep& d, std::vector<std::string>& tokens) {
    using Kind = SpDecodeStep::Kind;
    switch (d.kind) {
      case Kind::kReplace:
        for (std::string& t : tokens) replace_all(t, d.from, d.to);
        return;
      case Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.clear();
        tokens.push_back(std::move(all));
        return;
      }
      case Kind::kByteFallback: {
        // Runs of byte tokens become their bytes if valid UTF-8, else one
        // U+FFFD per byte (as Hugging Face's ByteFallback).
        std::vector<std::string> out;
        std::string run;
        std::size_t run_len = 0;
        const auto flush = [&] {
          if (run_len == 0) return;
          if (is_valid_utf8(run))
            out.push_back(run);
          else
            for (std::size_t k = 0; k < run_len; ++k) out.emplace_back("\xEF\xBF\xBD");
          run.clear();
          run_len = 0;
        };
        for (std::string& t : tokens) {
          const int b = byte_token_value(t);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
            ++run_len;
            continue;
          }
          flush();
          out.push_back(std::move(t));
        }
        flush();
        tokens.swap(out);
        return;
      }
      case Kind::kStrip:
        for (std::string& t : tokens) {
          std::vector<std::pair<std::size_t, char32_t>> chars;  // byte offset, character
          for (std::size_t i = 0; i < t.size();) {
            const Utf8Char c = decode_utf8(t, i);
            chars.emplace_back(i, c.valid ? c.code_point : 0xFFFFFFFFu);
            i += c.valid ? c.length : 1;
          }
          std::size_t start = 0, stop = chars.size();
          for (std::size_t i = 0; i < d.start && i < chars.size() && chars[i].second == d.strip;
               ++i)
            start = i + 1;
          for (std::size_t i = 0; i < d.stop && i < chars.size(); ++i) {
            const std::size_t index = chars.size() - i - 1;
            if (chars[index].second != d.strip) break;
            stop = index;
          }
          if (start >= stop) {
            t.clear();
            continue;
          }
          const std::size_t from = chars[start].first;
          const std::size_t to = stop == chars.size() ? t.size() : chars[stop].first;
          t = t.substr(from, to - from);
        }
        return;
      case Kind::kMetaspace:
        for (std::size_t k = 0; k < tokens.size(); ++k)
          replace_all(tokens[k], d.from, k == 0 && d.metaspace_prepends ? "" : " ");
        return;
    }
  }

  // ---- GPT-2's vocab.json + merges.txt -----------------------------------------

  static HfTokenizer load_gpt2(const std::string& vocab_path, const std::string& merges_path,
                               const std::optional<std::string>& config_path,
                               const std::optional<std::string>& special_map_path) {
    try {
      return load_gpt2_files(vocab_path, merges_path, config_path, special_map_path);
    } catch (const nlohmann::json::exception& e) {  // a type the checks missed
      detail::hf_error(vocab_path, "",
                       std::string("unexpected JSON structure: ") + kappa::printable(e.what()));
    }
  }

  static HfTokenizer load_gpt2_files(const std::string& vocab_path, const std::string& merges_path,
                                     const std::optional<std::string>& config_path,
                                     const std::optional<std::string>& special_map_path) {
    const nlohmann::json vocab = detail::read_hf_json(vocab_path);
    const std::string merges = read_file(merges_path);
    HfTokenizer t;
    t.split_ = Gpt2Split{};
    t.ignore_merges_ = false;
    Spec spec;
    if (!vocab.is_object()) detail::hf_error(vocab_path, "", "expected a JSON object {token: id}");
    // Added tokens: the config's special tokens and added_tokens_decoder.
    std::optional<nlohmann::json> config, special_map;
    if (config_path) config = read_object(*config_path);
    if (special_map_path) special_map = read_object(*special_map_path);
    spec.vocab_where = vocab_path;
    const long long bound = 2 * static_cast<long long>(vocab.size()) + 1024;
    for (const auto& [key, value] : vocab.items())
      spec.vocab.emplace_back(key, detail::json_id(value, bound, vocab_path, kappa::quoted(key)));
    std::unordered_map<std::string, TokenId> id_of;
    for (const auto& [key, id] : spec.vocab) id_of.emplace(key, id);
    const auto add = [&](const std::string& content, TokenId id, bool special) {
      for (const AddedToken& a : spec.added)
        if (a.id == id) return;
      AddedToken a;
      a.content = content;
      a.id = id;
      a.special = special;
      spec.added.push_back(std::move(a));
    };
    if (config) {
      spec.added_file = *config_path;
      if (const auto d = config->find("added_tokens_decoder");
          d != config->end() && !d->is_null()) {
        if (!d->is_object())
          detail::hf_error(*config_path, "added_tokens_decoder", "expected an object");
        for (const auto& [key, value] : d->items()) {
          const std::string where = "added_tokens_decoder[" + kappa::quoted(key) + "]";
          long long id = -1;
          if (key.empty() || key.size() > 9 ||
              !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
            detail::hf_error(*config_path, where, "expected a decimal id as the key");
          id = std::stoll(key);
          if (id >= bound) detail::hf_error(*config_path, where, "id is far beyond the vocabulary");
          if (!value.is_object()) detail::hf_error(*config_path, where, "expected an object");
          const std::string content = detail::json_string(value, "content", *config_path, where);
          if (content.empty()) detail::hf_error(*config_path, where + ".content", "empty token");
          add(content, static_cast<TokenId>(id),
              detail::json_bool(value, "special", false, *config_path, where));
        }
      }
    }
    for (const auto* obj : {&config, &special_map}) {
      if (!*obj) continue;
      const std::string& file = obj == &config ? *config_path : *special_map_path;
      for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
        const std::optional<std::string> s = detail::json_token_setting(**obj, key, file);
        if (!s || s->empty()) continue;
        const auto found = id_of.find(*s);
        if (found == id_of.end())
          detail::hf_error(file, key, kappa::quoted(*s) + " is not a token of " + vocab_path);
        add(*s, found->second, true);
      }
    }
    if (spec.added_file.empty())
      spec.added_file = special_map_path ? *special_map_path : vocab_path;
    spec.merges_file = merges_path;
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < merges.size();) {
      std::size_t eol = merges.find('\n', pos);
      if (eol == std::string::npos) eol = merges.size();
      std::string_view line(merges.data() + pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
      const std::size_t sp = line.find(' ');
      if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
          line.find(' ', sp + 1) != std::string_view::npos)
        detail::hf_error(merges_path, "line " + std::to_string(line_no),
                         "expected \"<token> <token>\", got " + kappa::quoted(line));
      spec.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
      spec.merge_lines.push_back(line_no);
    }
    t.build(spec);
    t.apply_config(config_path, special_map_path);
    return t;
  }

  static nlohmann::json read_object(const std::string& path) {
    nlohmann::json j = detail::read_hf_json(path);
    if (!j.is_object()) detail::hf_error(path, "", "expected a JSON object");
    return j;
  }

  // ---- building --------------------------------------------------------------

  // Builds model_ from the vocabulary, merges and added tokens: model tokens
  // are the vocab entries that are not added tokens; added tokens become the
  // model's special tokens (their text is their token).
  void build(Spec& spec) {
    const Gpt2ByteAlphabet& alphabet = gpt2_alphabet();
    const std::size_t count = spec.vocab.size() + spec.added.size();
    const long long bound = 2 * static_cast<long long>(count) + 1024;
    std::unordered_map<TokenId, std::size_t> added_by_id;
    std::unordered_map<std::string_view, TokenId> added_by_text;
    for (std::size_t k = 0; k < spec.added.size(); ++k) {
      const AddedToken& a = spec.added[k];
      const std::string key = "added_tokens[" + std::to_string(k) + "]";
      if (a.id >= bound)
        detail::hf_error(spec.added_file, key + ".id",
                         "id " + std::to_string(a.id) +
                             " is far beyond the number of tokens (ids must be below " +
                             std::to_string(bound) + ")");
      if (!added_by_id.emplace(a.id, k).second)
        detail::hf_error(spec.added_file, key + ".id", "duplicate id " + std::to_string(a.id));
      if (!added_by_text.emplace(a.content, a.id).second)
        detail::hf_error(spec.added_file, key + ".content",
                         "duplicate token " + kappa::quoted(a.content));
    }
    // Model tokens: id -> bytes. Ids are below bound (checked when read).
    std::unordered_map<std::string_view, TokenId> id_of;  // alphabet string -> id
    id_of.reserve(spec.vocab.size());
    std::vector<std::uint32_t> owner(static_cast<std::size_t>(bound), 0xFFFFFFFFu);  // id -> entry
    BpeModel m;
    std::vector<bool> mergeable;
    for (std::size_t entry = 0; entry < spec.vocab.size(); ++entry) {
      const auto& [key, id] = spec.vocab[entry];
      const auto where = [&, key = key] {
        std::string w = spec.vocab_where;  // piecewise: GCC 12 warns (-Wrestrict) on + chains
        w.push_back('[');
        w.append(kappa::quoted(key)).push_back(']');
        return w;
      };
      std::uint32_t& first = owner[static_cast<std::size_t>(id)];
      if (first != 0xFFFFFFFFu)
        detail::hf_error(where(), "",
                         "duplicate id " + std::to_string(id) + " (also token " +
                             kappa::quoted(spec.vocab[first].first) + ")");
      first = static_cast<std::uint32_t>(entry);
      id_of.emplace(key, id);
      std::optional<std::string> bytes = alphabet.decode(key);
      if (const auto a = added_by_id.find(id); a != added_by_id.end()) {
        const std::string& content = spec.added[a->second].content;
        if (content != key && (!bytes || *bytes != content))
          detail::hf_error(
              where(), "",
              "id " + std::to_string(id) + " is also added token " + kappa::quoted(content));
        continue;  // an added token: not a model token
      }
      if (const auto a = added_by_text.find(key); a != added_by_text.end())
        detail::hf_error(where(), "",
                         "has id " + std::to_string(id) + " but added token " + kappa::quoted(key) +
                             " has id " + std::to_string(a->second));
      if (!bytes || bytes->empty())
        detail::hf_error(where(), "", "token string has a character outside GPT-2's byte alphabet");
      m.add_token(*bytes, id, spec.vocab_where, 0);
      const auto slot = static_cast<std::size_t>(id);  // 0 <= id < bound
      if (slot >= mergeable.size()) mergeable.resize(slot + 1, false);
      mergeable[slot] = true;
    }
    m.finish_tokens(spec.vocab_where);
    // Merges: the last position of a repeated pair is its priority.
    struct Merge {
      TokenId a, b, c;
    };
    std::vector<Merge> merges;
    merges.reserve(spec.merges.size());
    const auto model_id = [&](std::string_view s, std::size_t k) {
      const auto f = id_of.find(s);
      if (f == id_of.end() || static_cast<std::size_t>(f->second) >= mergeable.size() ||
          !mergeable[static_cast<std::size_t>(f->second)]) {
        std::string both(spec.merges[k].first);
        both.push_back(' ');
        both.append(spec.merges[k].second);
        detail::hf_error(spec.merges_file, spec.merge_where(k),
                         "merge " + kappa::quoted(both) + ": token " + kappa::quoted(s) +
                             " is not in the vocabulary");
      }
      return f->second;
    };
    std::string joined;
    // At least the byte length of the longest token a merge makes (its GPT-2
    // alphabet string has 1 or 2 bytes per byte of the token).
    std::size_t longest_merge = 1;
    for (std::size_t k = 0; k < spec.merges.size(); ++k) {
      const auto& [a, b] = spec.merges[k];
      joined.assign(a).append(b);
      longest_merge = std::max(longest_merge, joined.size());
      merges.push_back({model_id(a, k), model_id(b, k), model_id(joined, k)});
    }
    std::unordered_map<std::uint64_t, std::uint32_t> last;
    last.reserve(merges.size());
    const auto pack = [](const Merge& x) {
      return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(x.a)) << 32) |
             static_cast<std::uint32_t>(x.b);
    };
    for (std::size_t k = 0; k < merges.size(); ++k)
      last[pack(merges[k])] = static_cast<std::uint32_t>(k);
    for (std::size_t k = 0; k < merges.size(); ++k)
      if (last[pack(merges[k])] == k)
        m.add_merge(merges[k].a, merges[k].b, merges[k].c, static_cast<std::uint32_t>(k));
    std::vector<SpecialToken> specials;
    for (const AddedToken& a : spec.added) specials.push_back({a.content, a.id});
    m.set_specials(std::move(specials), spec.added_file);
    model_ = std::move(m);
    added_ = std::move(spec.added);
    special_.assign(model_.vocab_size(), false);
    for (const AddedToken& a : added_)
      if (a.special) special_[static_cast<std::size_t>(a.id)] = true;
    // Hugging Face's decode passes added tokens through the ByteLevel
    // decoder like the others: a text whose every character is in GPT-2's
    // byte alphabet becomes those bytes ("été" -> E9 74 E9), any other stays
    // as it is. Only the tokens this changes are kept (none in the hub's
    // files, whose added tokens are ASCII without spaces).
    added_bytes_.clear();
    for (const AddedToken& a : added_)
      if (auto b = gpt2_alphabet().decode(a.content); b && *b != a.content)
        added_bytes_.emplace_back(a.id, std::move(*b));
    // Tokens whose own bytes the merges do not turn into them: only for these
    // does ignore_merges change ids. A token longer than every merge's
    // result is one without merging; the others take O(n log n) each, so
    // loading is n log n in the length of a token (a hostile file's 1 MB
    // token included), not quadratic.
    unreachable_.assign(model_.vocab_size(), false);
    unreachable_count_ = 0;
    std::vector<TokenId> parts;
    std::string bytes;
    for (std::size_t id = 0; id < mergeable.size(); ++id) {
      if (!mergeable[id]) continue;
      bytes = model_.token(static_cast<TokenId>(id));
      if (bytes.size() < 2) continue;
      parts.clear();
      if (bytes.size() <= longest_merge) merge_whole_token(bytes, parts);
      if (parts.size() != 1 || parts[0] != static_cast<TokenId>(id)) {
        unreachable_[id] = true;
        ++unreachable_count_;
      }
    }
    build_matchers();
  }

  // The BOS/EOS settings of tokenizer_config.json and special_tokens_map.json.
  void apply_config(const std::optional<std::string>& config_path,
                    const std::optional<std::string>& special_map_path) {
    try {
      apply_config_files(config_path, special_map_path);
    } catch (const nlohmann::json::exception& e) {  // a type the checks missed
      detail::hf_error(config_path ? *config_path : special_map_path.value_or("tokenizer config"),
                       "", std::string("unexpected JSON structure: ") + kappa::printable(e.what()));
    }
  }

  void apply_config_files(const std::optional<std::string>& config_path,
                          const std::optional<std::string>& special_map_path) {
    std::optional<std::string> bos, eos;
    std::string bos_file, eos_file;
    std::optional<bool> add_bos, add_eos;
    const auto read_tokens = [&](const nlohmann::json& j, const std::string& file) {
      if (auto s = detail::json_token_setting(j, "bos_token", file)) {
        bos = std::move(s);
        bos_file = file;
      }
      if (auto s = detail::json_token_setting(j, "eos_token", file)) {
        eos = std::move(s);
        eos_file = file;
      }
    };
    if (config_path) {
      const nlohmann::json c = read_object(*config_path);
      read_tokens(c, *config_path);
      for (const auto& [key, dst] :
           {std::pair{"add_bos_token", &add_bos}, std::pair{"add_eos_token", &add_eos}}) {
        const auto it = c.find(key);
        if (it == c.end() || it->is_null()) continue;
        if (!it->is_boolean())
          detail::hf_error(*config_path, key,
                           "expected true or false, got " + detail::json_kind(*it));
        *dst = it->get<bool>();
      }
    }
    if (special_map_path) read_tokens(read_object(*special_map_path), *special_map_path);
    const auto resolve = [&](const std::optional<std::string>& text, const std::string& file,
                             const char* key) -> std::optional<TokenId> {
      if (!text || text->empty()) return std::nullopt;
      if (const auto id = find_text(*text)) return id;
      detail::hf_error(file, key, kappa::quoted(*text) + " is not a token of the tokenizer");
    };
    // Named (or set to none) by a file: that; otherwise what the tokenizer
    // file gave (a SentencePiece model's BOS / EOS pieces), or the template's.
    if (bos) bos_ = resolve(bos, bos_file, "bos_token");
    if (eos) eos_ = resolve(eos, eos_file, "eos_token");
    if (!bos && !bos_ && prefix_.size() == 1) bos_ = prefix_[0];
    if (!eos && !eos_ && suffix_.size() == 1) eos_ = suffix_[0];
    if (add_bos) {
      if (*add_bos && !bos_)
        detail::hf_error(*config_path, "add_bos_token", "true, but no bos_token is set");
      prefix_.clear();
      if (*add_bos) prefix_.push_back(*bos_);
    }
    if (add_eos) {
      if (*add_eos && !eos_)
        detail::hf_error(*config_path, "add_eos_token", "true, but no eos_token is set");
      suffix_.clear();
      if (*add_eos) suffix_.push_back(*eos_);
    }
  }

  // An added token's text, or a model token's string in GPT-2's alphabet.
  std::optional<TokenId> find_text(const std::string& text) const {
    if (wordpiece_ || unigram_) return find(text);
    for (const AddedToken& a : added_)
      if (a.content == text) return a.id;
    if (sp_) return find(text);
    if (const auto bytes = gpt2_alphabet().decode(text)) {
      if (const auto id = model_.find(*bytes); id && !model_.is_special(*id)) return id;
    }
    return std::nullopt;
  }

  // ---- encoding --------------------------------------------------------------

  // Cuts text at added tokens (leftmost match, longest on ties) and encodes
  // the segments between them. Candidates at a position are the added tokens
  // that start with its byte, longest first: one pass over the text.
  // The two matchers of added_tokens.hpp's procedure: tokens with
  // normalized = false by their content, the others by their content as the
  // normalizer makes it.
  void build_matchers() {
    raw_added_ = AddedTokenMatcher();
    normalized_added_ = AddedTokenMatcher();
    for (const AddedToken& a : added_) {
      if (a.normalized)
        normalized_added_.add(a, normalize_text(a.content));
      else
        raw_added_.add(a, a.content);
    }
  }

  // added_tokens.hpp's procedure: the raw text cut at the tokens matched
  // raw, each piece normalized and cut at the normalized tokens.
  void encode_with_added(std::string_view text, std::vector<TokenId>& out) const {
    raw_added_.split(
        text,
        [&](std::size_t b, std::size_t e) {
          const std::string_view piece = text.substr(b, e - b);
          if (normalized_added_.empty()) {
            encode_segment(piece, b == 0, out);
            return;
          }
          const std::string n = normalize_text(piece);
          normalized_added_.split(
              n,
              [&](std::size_t nb, std::size_t ne) {
                encode_normalized(std::string_view(n).substr(nb, ne - nb), b == 0 && nb == 0, out);
              },
              [&](TokenId id) { out.push_back(id); });
        },
        [&](TokenId id) { out.push_back(id); });
  }

  // The normalizer: the SentencePiece-style steps, or NFC, or none.
  std::string normalize_text(std::string_view text) const {
    if (sp_) return sp_normalize(text);
    if (apply_nfc_) return normalize(text, NormalizationForm::kNFC);
    return std::string(text);
  }

  // A segment of text between added tokens: normalized, pre-tokenized,
  // encoded.
  void encode_segment(std::string_view segment, bool at_start, std::vector<TokenId>& out) const {
    if (segment.empty()) return;
    if (sp_ || apply_nfc_) {
      const std::string n = normalize_text(segment);
      encode_normalized(n, at_start, out);
    } else {
      encode_normalized(segment, at_start, out);
    }
  }

  // Normalized text: the pre-tokenizer and the model.
  void encode_normalized(std::string_view segment, bool at_start, std::vector<TokenId>& out) const {
    if (segment.empty()) return;
    if (sp_) {
      sp_encode_normalized(segment, at_start, out);
      return;
    }
    std::string prefixed;
    if (add_prefix_space_ && segment.front() != ' ') {
      prefixed.reserve(segment.size() + 1);
      prefixed += ' ';
      prefixed += segment;
      segment = prefixed;
    }
    std::visit(
        [&](const auto& s) {
          using S = std::decay_t<decltype(s)>;
          split<S>(segment, [&](std::string_view piece) { encode_piece(piece, out); });
        },
        split_);
  }

  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
    if (!ignore_merges_ && unreachable_count_ != 0) {
      // BpeModel emits a piece that is a token whole; without ignore_merges
      // the merges decide, which differs for the unreachable tokens only.
      if (const auto id = model_.find(piece); id &&
                                              static_cast<std::size_t>(*id) < unreachable_.size() &&
                                              unreachable_[static_cast<std::size_t>(*id)]) {
        merge_whole_token(piece, out);
        return;
      }
    }
    model_.encode_piece(piece, out);
  }

  // bpe(piece) by the merges alone: repeatedly the adjacent pair of lowest
  // priority, leftmost on ties. O(n log n) in the length of piece.
  void merge_whole_token(std::string_view piece, std::vector<TokenId>& out) const {
    model_.merge_bytes(piece, out);
  }

  BpeModel model_;
  Splitter split_ = Gpt2Split{};
  bool add_prefix_space_ = false;
  std::string normalizer_;
  bool apply_nfc_ = false;  // the byte-level layout's NFC normalizer
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_;
  std::vector<bool> special_;      // id -> added token marked special
  std::vector<bool> unreachable_;  // id -> a model token the merges do not make from its bytes
  std::size_t unreachable_count_ = 0;
  std::vector<std::pair<TokenId, std::string>> added_bytes_;  // see build()
  AddedTokenMatcher raw_added_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_added_;  // the others, by their normalized content
  std::vector<TokenId> prefix_, suffix_;
  std::optional<TokenId> bos_, eos_;
  std::optional<SentencePieceBpe> sp_;  // set: the SentencePiece-style layout
  // Set for the WordPiece / Unigram families: encode() and decode() forward
  // to them; prefix_, suffix_, special_, bos_, eos_ are kept here as for BPE.
  std::shared_ptr<const WordPieceTokenizer> wordpiece_;
  std::shared_ptr<const UnigramTokenizer> unigram_;
  std::optional<std::string> sp_unk_text_;  // model.unk_token while loading
};

static_assert(Tokenizer<HfTokenizer>, "HfTokenizer must model kappa::tokenize::Tokenizer");

}  // namespace kappa::tokenize
