// kappa/tokenize/bpe.hpp - byte-level byte-pair encoding with exactly the ids
// of GPT-2 and tiktoken (r50k_base/gpt2, cl100k_base, o200k_base).
//
// Vocabulary: mergeable tokens (byte strings; all 256 single bytes are
// tokens, so every byte string can be encoded) and special tokens (text such
// as "<|endoftext|>" with an id of its own). A merge (a, b) -> c has a
// priority; lower merges first.
//
// encode(text) = concat over pieces p of pre_tokenize(text) of bpe(p), where
//   bpe(p) = [id(p)] if p is itself a mergeable token (tiktoken's shortcut);
//   otherwise start from the single bytes of p and repeatedly merge the
//   adjacent pair of lowest priority, the leftmost on ties, until no adjacent
//   pair has a merge.
// Priorities: for a tiktoken rank file the priority of (a, b) is the rank of
// the token a+b (what tiktoken does); for GPT-2's encoder.json + vocab.bpe it
// is the line of "a b" in vocab.bpe (what GPT-2's encoder.py does). The two
// agree on GPT-2's files.
//
// Cost: pre-tokenization is linear; a piece of n bytes that is not a token
// costs O(n^2) with small n and O(n log n) above 64 bytes (a heap over a
// linked list of parts), so a 1 MB word without spaces is not quadratic.
// Recognizing special tokens is linear too. The long-piece merge is
// memory-bound: its heap and parts (20 bytes per byte of the piece) and the
// merge table (8 MB for cl100k) are read in priority order, i.e. at random,
// so MB/s falls as they outgrow the caches (bench_tokenize: BM_RandomLetters
// against BM_DistinctWords), not from extra work.
//
// decode(encode(s)) == s for every byte string s, including invalid UTF-8:
// pieces cover the input and tokens are bytes. Special tokens are text unless
// encode(text, SpecialTokens::kRecognize) is asked for.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/detail_hash.hpp"
#include "kappa/tokenize/formats.hpp"
#include "kappa/tokenize/pretokenize.hpp"

namespace kappa::tokenize {

/// A special token: its text and its id.
struct SpecialToken {
  std::string text;
  TokenId id;
};

/// GPT-2's / r50k_base's special tokens.
inline std::vector<SpecialToken> gpt2_special_tokens() {
  return {{"<|endoftext|>", 50256}};
}
/// cl100k_base's special tokens.
inline std::vector<SpecialToken> cl100k_special_tokens() {
  return {{"<|endoftext|>", 100257},
          {"<|fim_prefix|>", 100258},
          {"<|fim_middle|>", 100259},
          {"<|fim_suffix|>", 100260},
          {"<|endofprompt|>", 100276}};
}
/// o200k_base's special tokens.
inline std::vector<SpecialToken> o200k_special_tokens() {
  return {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
}

/// Where from_tiktoken() expects the special tokens' ids.
enum class SpecialIds {
  kAnywhere,    ///< any ids the ranks do not use
  kAfterRanks,  ///< the first special id is at most 2 above the last rank, as in
                ///< every tiktoken encoding: a rank file that ends earlier is
                ///< truncated (what from_tiktoken_file checks with its defaults)
};

/// The vocabulary and merges of a byte-level BPE, independent of the split
/// pattern: loading, saving, merging one piece, decoding.
class BpeModel {
 public:
  static constexpr std::uint32_t kNoMerge = std::numeric_limits<std::uint32_t>::max();

  BpeModel() = default;

  // ---- loading ---------------------------------------------------------------

  /// From tiktoken's rank file format: lines "<base64 of token bytes> <rank>"
  /// (empty lines ignored); the rank is the id. `name` names the file in
  /// errors. Throws FormatError on a malformed line, bad base64, a duplicate
  /// rank or token, or a missing single byte; specials must not reuse a rank.
  /// The ranks must be 0..n-1 without gaps, except ids that special tokens
  /// take (p50k_base's <|endoftext|> is 50256, amid the ranks). A file cut at
  /// a line boundary is otherwise a valid smaller vocabulary; with
  /// SpecialIds::kAfterRanks it is a FormatError when the special tokens
  /// start more than 2 ids after the last rank.
  static BpeModel from_tiktoken(std::string_view contents, std::string_view name,
                                std::vector<SpecialToken> specials,
                                SpecialIds where = SpecialIds::kAnywhere) {
    BpeModel m;
    struct Entry {
      std::string bytes;
      TokenId rank;
      std::size_t line;
    };
    std::vector<Entry> entries;
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < contents.size();) {
      std::size_t eol = contents.find('\n', pos);
      if (eol == std::string_view::npos) eol = contents.size();
      std::string_view line = contents.substr(pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      const std::size_t sp = line.find(' ');
      if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
        detail::format_error(name, line_no, "expected '<base64 token> <rank>'");
      const std::optional<std::string> bytes = base64_decode(line.substr(0, sp));
      if (!bytes)
        detail::format_error(name, line_no, "invalid base64 " + kappa::quoted(line.substr(0, sp)));
      const std::string_view r = line.substr(sp + 1);
      long long rank = 0;
      if (r.empty() || r.size() > 10)
        detail::format_error(name, line_no, "invalid rank " + kappa::quoted(r));
      for (char c : r) {
        if (c < '0' || c > '9')
          detail::format_error(name, line_no, "invalid rank " + kappa::quoted(r));
        rank = rank * 10 + (c - '0');
      }
      if (rank > std::numeric_limits<TokenId>::max())
        detail::format_error(name, line_no, "rank " + std::string(r) + " is too large");
      entries.push_back({*bytes, static_cast<TokenId>(rank), line_no});
    }
    const Entry* last = nullptr;  // the largest rank
    for (const Entry& e : entries)
      if (last == nullptr || e.rank > last->rank) last = &e;
    if (where == SpecialIds::kAfterRanks && last != nullptr && !specials.empty()) {
      const TokenId first_special =
          std::min_element(specials.begin(), specials.end(), [](const auto& x, const auto& y) {
            return x.id < y.id;
          })->id;
      if (first_special > last->rank + 2)
        throw FormatError("kappa: " + std::string(name) + ": the ranks end at " +
                          std::to_string(last->rank) + " (line " + std::to_string(last->line) +
                          "), but the special tokens start at " + std::to_string(first_special) +
                          ": the file is truncated or is not the encoding's rank file");
    }
    for (const Entry& e : entries) check_dense(e.rank, entries.size(), name, e.line);
    for (const Entry& e : entries) m.add_token(e.bytes, e.rank, name, e.line);
    m.finish_tokens(name);
    // Every split a + b of a token into two tokens is a merge with the
    // token's rank as priority: tiktoken looks up the rank of a + b.
    for (std::size_t id = 0; id < m.tokens_.size(); ++id) {
      if (!m.assigned_[id]) continue;
      const std::string_view t = m.token_bytes(static_cast<TokenId>(id));
      for (std::size_t k = 1; k < t.size(); ++k) {
        const std::uint32_t a = m.ids_.find(t.substr(0, k)), b = m.ids_.find(t.substr(k));
        if (a != detail::StringMap::kMissing && b != detail::StringMap::kMissing)
          m.insert_pair(a, b, {static_cast<std::uint32_t>(id), static_cast<std::uint32_t>(id)});
      }
    }
    m.set_specials(std::move(specials), name);
    // Ranks 0..last without a gap (ids of special tokens may fill one).
    for (std::size_t id = 0; last != nullptr && id < static_cast<std::size_t>(last->rank); ++id) {
      if (m.assigned_[id]) continue;
      const Entry* after = nullptr;  // the line with the next rank, to point at
      for (const Entry& e : entries)
        if (static_cast<std::size_t>(e.rank) > id && (after == nullptr || e.rank < after->rank))
          after = &e;
      detail::format_error(name, after->line,
                           "rank " + std::to_string(id) +
                               " is missing (ranks must be 0..n-1 without gaps; this line has "
                               "rank " +
                               std::to_string(after->rank) + ")");
    }
    return m;
  }

  /// From GPT-2's encoder.json (token string -> id, in GPT-2's byte alphabet)
  /// and vocab.bpe (an optional "#version" line, then one merge "a b" per
  /// line, in priority order). Entries of encoder.json that are neither a
  /// single byte nor made by a merge (GPT-2's "<|endoftext|>") are special
  /// tokens. Throws FormatError naming the file and line for malformed JSON,
  /// token strings outside GPT-2's alphabet, duplicate ids or tokens, and
  /// merges of unknown tokens; and, since merges must be complete and
  /// consistent:
  ///  - a merge operand that is neither a single byte nor made by a merge (on
  ///    any line): BPE could never produce it, the merge would be dead;
  ///  - a token made by two merges;
  ///  - an entry made by no merge that is the concatenation of two mergeable
  ///    tokens: that is a merge missing from vocab.bpe (a file cut at a line
  ///    boundary), not a special token. Special tokens such as
  ///    "<|endoftext|>", "<s>" or "[CLS]" split into no two tokens of GPT-2.
  static BpeModel from_gpt2(std::string_view encoder_json, std::string_view encoder_name,
                            std::string_view vocab_bpe, std::string_view vocab_name) {
    const auto entries = parse_json_int_object(encoder_json, encoder_name);
    const Gpt2ByteAlphabet& alphabet = gpt2_alphabet();
    std::unordered_map<std::string, std::pair<TokenId, std::string>> by_text;  // key -> (id, bytes)
    std::vector<std::pair<std::string, TokenId>> keys;
    std::unordered_map<long long, std::string> seen_ids;
    for (const auto& [key, id] : entries) {
      if (id < 0 || id > std::numeric_limits<TokenId>::max())
        throw FormatError("kappa: " + std::string(encoder_name) + ": id " + std::to_string(id) +
                          " of token " + kappa::quoted(key) + " is out of range");
      if (!seen_ids.emplace(id, key).second)
        throw FormatError("kappa: " + std::string(encoder_name) + ": duplicate id " +
                          std::to_string(id) + " (tokens " + kappa::quoted(seen_ids[id]) + " and " +
                          kappa::quoted(key) + ")");
      std::optional<std::string> bytes = alphabet.decode(key);
      if (!bytes)
        throw FormatError("kappa: " + std::string(encoder_name) + ": unknown token string " +
                          kappa::quoted(key) + " (id " + std::to_string(id) +
                          ") has a character outside GPT-2's byte alphabet");
      if (!by_text.emplace(key, std::pair{static_cast<TokenId>(id), std::move(*bytes)}).second)
        throw FormatError("kappa: " + std::string(encoder_name) + ": duplicate token " +
                          kappa::quoted(key));
      keys.emplace_back(key, static_cast<TokenId>(id));
    }
    for (const auto& [key, id] : keys) check_dense(id, keys.size(), encoder_name, 1);
    BpeModel m;
    std::vector<bool> mergeable(keys.size(), false);
    std::unordered_map<std::string, std::size_t> index_of;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      index_of[keys[k].first] = k;
      if (by_text[keys[k].first].second.size() == 1) mergeable[k] = true;
    }
    // Merges: parse first, so that tokens made by merges are known.
    struct Line {
      std::size_t a, b, c, line_no;
    };
    std::vector<Line> merges;
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < vocab_bpe.size();) {
      std::size_t eol = vocab_bpe.find('\n', pos);
      if (eol == std::string_view::npos) eol = vocab_bpe.size();
      std::string_view line = vocab_bpe.substr(pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
      const std::size_t sp = line.find(' ');
      if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
          line.find(' ', sp + 1) != std::string_view::npos)
        detail::format_error(vocab_name, line_no,
                             "expected a merge '<token> <token>', got " + kappa::quoted(line));
      const std::string a(line.substr(0, sp)), b(line.substr(sp + 1)), c = a + b;
      for (const std::string* t : {&a, &b, &c}) {
        if (!index_of.contains(*t))
          detail::format_error(vocab_name, line_no,
                               "merge " + kappa::quoted(line) + ": token " + kappa::quoted(*t) +
                                   " is not in " + std::string(encoder_name));
      }
      merges.push_back({index_of[a], index_of[b], index_of[c], line_no});
    }
    // made_by[k]: the line of the merge that makes entry k (0: none).
    std::vector<std::size_t> made_by(keys.size(), 0);
    std::vector<std::pair<std::size_t, std::size_t>> operands(keys.size());
    for (const Line& l : merges) {
      if (made_by[l.c] != 0 && operands[l.c] == std::pair{l.a, l.b})
        detail::format_error(vocab_name, l.line_no, "duplicate merge");
      if (made_by[l.c] != 0)
        detail::format_error(vocab_name, l.line_no,
                             "merge " + kappa::quoted(keys[l.a].first + " " + keys[l.b].first) +
                                 " makes " + kappa::quoted(keys[l.c].first) + ", which line " +
                                 std::to_string(made_by[l.c]) + " already makes");
      made_by[l.c] = l.line_no;
      operands[l.c] = {l.a, l.b};
      mergeable[l.c] = true;
    }
    for (const Line& l : merges) {
      for (std::size_t k : {l.a, l.b}) {
        if (mergeable[k]) continue;
        detail::format_error(vocab_name, l.line_no,
                             "merge " + kappa::quoted(keys[l.a].first + " " + keys[l.b].first) +
                                 ": token " + kappa::quoted(keys[k].first) +
                                 " is neither a single byte nor made by a merge in " +
                                 std::string(vocab_name));
      }
    }
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (mergeable[k]) continue;
      const std::string& t = keys[k].first;  // in GPT-2's alphabet
      for (std::size_t i = 0; i < t.size(); i += decode_utf8(t, i).length) {
        if (i == 0) continue;
        const auto x = index_of.find(t.substr(0, i)), y = index_of.find(t.substr(i));
        if (x == index_of.end() || y == index_of.end() || !mergeable[x->second] ||
            !mergeable[y->second])
          continue;
        detail::format_error(vocab_name, line_no,
                             "the file ends, but no merge makes token " + kappa::quoted(t) +
                                 " (id " + std::to_string(keys[k].second) + " of " +
                                 std::string(encoder_name) + "), which is " +
                                 kappa::quoted(x->first) + " + " + kappa::quoted(y->first) +
                                 ": is " + std::string(vocab_name) + " truncated?");
      }
    }
    std::vector<SpecialToken> specials;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (mergeable[k])
        m.add_token(by_text[keys[k].first].second, keys[k].second, encoder_name, 1);
      else
        specials.push_back({keys[k].first, keys[k].second});
    }
    m.finish_tokens(encoder_name);
    std::uint32_t priority = 0;
    for (const Line& l : merges) {
      const auto id = [&](std::size_t k) { return static_cast<std::uint32_t>(keys[k].second); };
      if (!m.insert_pair(id(l.a), id(l.b), {priority++, id(l.c)}))
        detail::format_error(vocab_name, l.line_no, "duplicate merge");
      m.merges_.emplace_back(keys[l.a].second, keys[l.b].second);
    }
    m.set_specials(std::move(specials), encoder_name);
    return m;
  }

  // ---- queries ---------------------------------------------------------------

  /// N_T: one more than the largest id (mergeable or special).
  std::size_t vocab_size() const noexcept { return vocab_size_; }
  /// Number of mergeable (non-special) tokens.
  std::size_t mergeable_count() const noexcept { return ids_.size(); }
  const std::vector<SpecialToken>& special_tokens() const noexcept { return specials_; }

  /// The id of a mergeable token's bytes, or of a special token's text.
  std::optional<TokenId> find(std::string_view token) const {
    const std::uint32_t id = ids_.find(token);
    if (id != detail::StringMap::kMissing) return static_cast<TokenId>(id);
    for (const SpecialToken& s : specials_)
      if (s.text == token) return s.id;
    return std::nullopt;
  }

  /// The bytes of token `id` (the text of a special token). Throws
  /// RangeError naming the id and N_T if id is not assigned.
  std::string token(TokenId id) const { return std::string(checked_bytes(id)); }

  /// True if id is a special token.
  bool is_special(TokenId id) const noexcept {
    return std::any_of(specials_.begin(), specials_.end(),
                       [id](const SpecialToken& s) { return s.id == id; });
  }

  /// Concatenated bytes of the tokens. Throws RangeError naming the first
  /// id that is not in the vocabulary.
  std::string decode(std::span<const TokenId> ids) const {
    std::string out;
    for (TokenId id : ids) out += checked_bytes(id);
    return out;
  }

  /// Appends bpe(piece) to out (see the file comment). piece is non-empty.
  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
    const std::uint32_t whole = ids_.find(piece);
    if (whole != detail::StringMap::kMissing) {
      out.push_back(static_cast<TokenId>(whole));
      return;
    }
    if (piece.size() <= kSmallPiece)
      merge_small(piece, out, kNoMerge);
    else
      merge_heap(piece, out);
  }

  /// Appends bpe(piece) by the merges alone, also when piece is itself a
  /// token (encode_piece() emits such a piece whole): repeatedly the adjacent
  /// pair of lowest priority, leftmost on ties. O(n log n) in the length of
  /// piece (a heap beyond 64 bytes). piece is non-empty.
  void merge_bytes(std::string_view piece, std::vector<TokenId>& out) const {
    if (piece.size() <= kSmallPiece)
      merge_small(piece, out, kNoMerge);
    else
      merge_heap(piece, out);
  }

  /// The merges "a b" in priority order (as GPT-2's vocab.bpe lists them).
  /// For a model read from ranks they are derived: token c of rank r splits
  /// into the two parts that bpe(c) gives with merges of priority < r only.
  std::vector<std::pair<TokenId, TokenId>> merges() const {
    if (!merges_.empty() || mergeable_count() <= 256) return merges_;
    std::vector<std::pair<TokenId, TokenId>> out;
    std::vector<TokenId> parts;
    for (std::size_t id = 0; id < tokens_.size(); ++id) {
      if (!assigned_[id] || is_special(static_cast<TokenId>(id))) continue;
      const std::string_view t = token_bytes(static_cast<TokenId>(id));
      if (t.size() < 2) continue;
      parts.clear();
      merge_small(t, parts, static_cast<std::uint32_t>(id));
      if (parts.size() != 2)
        throw FormatError("kappa: token " + std::to_string(id) + " (" + kappa::quoted(t) +
                          ") is not the merge of two lower-ranked tokens; it has no GPT-2 merge");
      out.emplace_back(parts[0], parts[1]);
    }
    return out;
  }

  // ---- saving ----------------------------------------------------------------

  /// tiktoken's rank file: `<base64 bytes> <id>\n` per mergeable token, by id.
  std::string to_tiktoken() const {
    std::string out;
    for (std::size_t id = 0; id < tokens_.size(); ++id) {
      if (!assigned_[id] || is_special(static_cast<TokenId>(id))) continue;
      out += base64_encode(token_bytes(static_cast<TokenId>(id)));
      out += ' ';
      out += std::to_string(id);
      out += '\n';
    }
    return out;
  }

  /// GPT-2's encoder.json (mergeable tokens then specials) and vocab.bpe.
  /// Throws FormatError for a special token that from_gpt2() could not read
  /// back as one (its text is written as is in encoder.json): text outside
  /// GPT-2's byte alphabet, text that is a mergeable token's, or text that
  /// is two mergeable tokens end to end (from_gpt2 takes that for a merge
  /// missing from vocab.bpe). Such a model saves with to_tiktoken().
  std::pair<std::string, std::string> to_gpt2() const {
    const Gpt2ByteAlphabet& alphabet = gpt2_alphabet();
    for (const SpecialToken& sp : specials_) {
      const auto fail = [&](const std::string& why) {
        throw FormatError("kappa: to_gpt2: special token " + kappa::quoted(sp.text) + " " + why +
                          "; GPT-2's encoder.json cannot hold it (save as tiktoken)");
      };
      const auto mergeable = [&](std::string_view text) {
        const std::optional<std::string> b = alphabet.decode(text);
        return b && ids_.find(*b) != detail::StringMap::kMissing;
      };
      if (!alphabet.decode(sp.text)) fail("has characters outside GPT-2's byte alphabet");
      if (mergeable(sp.text)) fail("is also a mergeable token's text");
      for (std::size_t i = decode_utf8(sp.text, 0).length; i < sp.text.size();
           i += decode_utf8(sp.text, i).length) {
        const std::string_view t = sp.text;
        if (mergeable(t.substr(0, i)) && mergeable(t.substr(i)))
          fail("is the mergeable tokens " + kappa::quoted(t.substr(0, i)) + " + " +
               kappa::quoted(t.substr(i)));
      }
    }
    std::string json = "{";
    bool first = true;
    for (std::size_t id = 0; id < tokens_.size(); ++id) {
      if (!assigned_[id]) continue;
      const bool special = is_special(static_cast<TokenId>(id));
      const std::string_view t = token_bytes(static_cast<TokenId>(id));
      json += first ? "" : ", ";
      json += json_quote(special ? std::string(t) : alphabet.encode(t));
      json += ": " + std::to_string(id);
      first = false;
    }
    json += "}";
    std::string bpe = "#version: 0.2\n";
    for (const auto& [a, b] : merges()) {
      bpe += alphabet.encode(token_bytes(a));
      bpe += ' ';
      bpe += alphabet.encode(token_bytes(b));
      bpe += '\n';
    }
    return {std::move(json), std::move(bpe)};
  }

  // ---- building (used by the trainer) ----------------------------------------

  /// Adds mergeable token `bytes` with `id`; FormatError on duplicates.
  void add_token(std::string_view bytes, TokenId id, std::string_view file, std::size_t line) {
    if (bytes.empty()) detail::format_error(file, line, "empty token");
    const auto u = static_cast<std::size_t>(id);
    if (u >= tokens_.size()) {
      tokens_.resize(u + 1);
      assigned_.resize(u + 1, false);
    }
    if (assigned_[u]) detail::format_error(file, line, "duplicate rank " + std::to_string(id));
    if (!ids_.insert(bytes, static_cast<std::uint32_t>(id)))
      detail::format_error(file, line,
                           "duplicate token " + kappa::quoted(bytes) + " (rank " +
                               std::to_string(id) + " and rank " +
                               std::to_string(ids_.find(bytes)) + ")");
    tokens_[u] = std::string(bytes);
    assigned_[u] = true;
  }
  /// Checks that all 256 single bytes are tokens and caches their ids.
  void finish_tokens(std::string_view file) {
    for (int b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      const std::uint32_t id = ids_.find(std::string_view(&c, 1));
      if (id == detail::StringMap::kMissing)
        throw FormatError("kappa: " + std::string(file) + ": the single byte 0x" + hex_byte(b) +
                          " is not a token (byte-level BPE needs all 256)");
      byte_id_[static_cast<std::size_t>(b)] = id;
    }
    byte_pairs_.assign(std::size_t{256} * 256, detail::Merge{});
    vocab_size_ = tokens_.size();
  }
  /// Adds merge (a, b) -> c with the given priority. RangeError if a, b or c
  /// is not a mergeable token added before.
  void add_merge(TokenId a, TokenId b, TokenId c, std::uint32_t priority) {
    require_mergeable(a, b, c);
    insert_pair(static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b),
                {priority, static_cast<std::uint32_t>(c)});
    merges_.emplace_back(a, b);
  }
  /// Sets the special tokens; FormatError if one reuses an id or a text.
  void set_specials(std::vector<SpecialToken> specials, std::string_view file) {
    for (const SpecialToken& s : specials) {
      if (s.text.empty() || s.id < 0)
        throw FormatError("kappa: " + std::string(file) + ": invalid special token " +
                          kappa::quoted(s.text));
      check_dense(s.id, tokens_.size() + specials.size(), file, 0);
      const auto u = static_cast<std::size_t>(s.id);
      if (u < assigned_.size() && assigned_[u])
        throw FormatError("kappa: " + std::string(file) + ": special token " +
                          kappa::quoted(s.text) + " reuses id " + std::to_string(s.id));
      if (u >= tokens_.size()) {
        tokens_.resize(u + 1);
        assigned_.resize(u + 1, false);
      }
      tokens_[u] = s.text;
      assigned_[u] = true;
    }
    specials_ = std::move(specials);
    std::sort(specials_.begin(), specials_.end(),
              [](const auto& x, const auto& y) { return x.text.size() > y.text.size(); });
    vocab_size_ = tokens_.size();
  }
  /// Adds merge (a, b) -> c without listing it among merges() (an extra
  /// split of an existing token); ignored if (a, b) already merges.
  void add_merge_quiet(TokenId a, TokenId b, TokenId c, std::uint32_t priority) {
    require_mergeable(a, b, c);
    insert_pair(static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b),
                {priority, static_cast<std::uint32_t>(c)});
  }
  std::uint32_t byte_id(unsigned char b) const noexcept { return byte_id_[b]; }
  /// The merge of adjacent tokens (a, b), if any.
  detail::Merge merge_of(std::uint32_t a, std::uint32_t b) const noexcept {
    return pairs_.find(a, b);
  }

 private:
  static constexpr std::size_t kSmallPiece = 64;

  // Every merge goes through here (after finish_tokens): merges of two
  // single bytes are also kept in a dense 256 x 256 table, which serves the
  // first lookups of every piece from cache.
  bool insert_pair(std::uint32_t a, std::uint32_t b, detail::Merge m) {
    if (!pairs_.insert(a, b, m)) return false;
    const std::string& ta = tokens_[a];
    const std::string& tb = tokens_[b];
    if (ta.size() == 1 && tb.size() == 1 && byte_id_[static_cast<unsigned char>(ta[0])] == a &&
        byte_id_[static_cast<unsigned char>(tb[0])] == b)
      byte_pairs_[static_cast<unsigned char>(ta[0]) * 256u + static_cast<unsigned char>(tb[0])] = m;
    return true;
  }
  detail::Merge byte_pair(char x, char y) const noexcept {
    return byte_pairs_[static_cast<unsigned char>(x) * 256u + static_cast<unsigned char>(y)];
  }

  // Ids index a dense table: an id far beyond the number of tokens would
  // make loading allocate without bound, so it is a format error.
  static void check_dense(TokenId id, std::size_t count, std::string_view file, std::size_t line) {
    if (static_cast<std::size_t>(id) < 2 * count + 1024) return;
    const std::string what = "id " + std::to_string(id) + " is far beyond the " +
                             std::to_string(count) +
                             " tokens (ids must be dense: below 2 N + 1024)";
    if (line == 0) throw FormatError("kappa: " + std::string(file) + ": " + what);
    detail::format_error(file, line, what);
  }

  // insert_pair reads tokens_[a] and tokens_[b]: ids from a caller must be
  // mergeable tokens, never specials or unassigned ids.
  void require_mergeable(TokenId a, TokenId b, TokenId c) const {
    for (TokenId id : {a, b, c}) {
      require_index("merge token id", id, static_cast<long long>(tokens_.size()), "a vocabulary");
      if (!assigned_[static_cast<std::size_t>(id)] || is_special(id))
        throw RangeError("kappa: merge token id " + std::to_string(id) +
                         " is not a mergeable token");
    }
  }

  static std::string hex_byte(int b) {
    static constexpr char kHex[] = "0123456789abcdef";
    return {kHex[b >> 4], kHex[b & 15]};
  }

  std::string_view token_bytes(TokenId id) const { return tokens_[static_cast<std::size_t>(id)]; }
  std::string_view checked_bytes(TokenId id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size() ||
        !assigned_[static_cast<std::size_t>(id)]) {
      if (id >= 0 && static_cast<std::size_t>(id) < tokens_.size())
        throw RangeError("kappa: token id " + std::to_string(id) +
                         " is not assigned in the vocabulary of size " +
                         std::to_string(vocab_size_));
      require_index("token id", id, static_cast<long long>(vocab_size_), "a vocabulary");
    }
    return tokens_[static_cast<std::size_t>(id)];
  }

  // Quadratic merge for short pieces (tiktoken's scheme on token ids); only
  // merges with priority < limit are applied.
  void merge_small(std::string_view piece, std::vector<TokenId>& out, std::uint32_t limit) const {
    std::uint32_t ids[kSmallPiece + 1];
    std::uint32_t prio[kSmallPiece + 1];
    std::uint32_t result[kSmallPiece + 1];
    std::vector<std::uint32_t> big_ids, big_prio, big_result;
    std::uint32_t* id = ids;
    std::uint32_t* pr = prio;
    std::uint32_t* res = result;
    if (piece.size() > kSmallPiece) {  // only from merges() on a long token
      big_ids.resize(piece.size());
      big_prio.resize(piece.size());
      big_result.resize(piece.size());
      id = big_ids.data();
      pr = big_prio.data();
      res = big_result.data();
    }
    std::size_t n = piece.size();
    for (std::size_t k = 0; k < n; ++k) {
      id[k] = byte_id_[static_cast<unsigned char>(piece[k])];
      pr[k] = kNoMerge;
      res[k] = kNoMerge;
    }
    auto look = [&](std::size_t k) {
      const detail::Merge m = pairs_.find(id[k], id[k + 1]);
      pr[k] = m.priority < limit ? m.priority : kNoMerge;
      res[k] = m.result;
    };
    for (std::size_t k = 0; k + 1 < n; ++k) {
      const detail::Merge m = byte_pair(piece[k], piece[k + 1]);
      pr[k] = m.priority < limit ? m.priority : kNoMerge;
      res[k] = m.result;
    }
    while (n > 1) {
      std::size_t best = 0;
      for (std::size_t k = 1; k + 1 < n; ++k)
        if (pr[k] < pr[best]) best = k;
      if (pr[best] == kNoMerge) break;
      id[best] = res[best];
      for (std::size_t k = best + 1; k + 1 < n; ++k) {
        id[k] = id[k + 1];
        pr[k] = pr[k + 1];
        res[k] = res[k + 1];
      }
      --n;
      if (best + 1 < n) look(best);
      if (best > 0) look(best - 1);
    }
    for (std::size_t k = 0; k < n; ++k) out.push_back(static_cast<TokenId>(id[k]));
  }

  // O(n log n) merge for long pieces: parts in a doubly linked list
  // (indexed by their first byte), candidate pairs in a binary min-heap of
  // 64-bit keys (priority, position of the left part). An entry is not
  // removed when a merge changes its pair: on reaching the top it is checked
  // against the pair now at its position (alive, with a right neighbour, and
  // that pair has the entry's priority); every pair present has an entry, so
  // a matching top entry is the lowest pair, leftmost on ties. Scratch
  // memory is per thread and reused across pieces.
  void merge_heap(std::string_view piece, std::vector<TokenId>& out) const {
    constexpr std::uint32_t kNone = 0xFFFFFFFFu;
    struct Part {
      std::uint32_t id, next, prev;  // id kNone: merged into the part on its left
    };
    thread_local std::vector<Part> parts;
    thread_local detail::MinHeap heap;
    const auto key = [](std::uint32_t priority, std::uint32_t left) {
      return (std::uint64_t{priority} << 32) | left;
    };
    const auto n = static_cast<std::uint32_t>(piece.size());
    parts.resize(n);
    heap.keys.clear();
    for (std::uint32_t k = 0; k < n; ++k)
      parts[k] = {byte_id_[static_cast<unsigned char>(piece[k])], k + 1 < n ? k + 1 : kNone,
                  k > 0 ? k - 1 : kNone};
    for (std::uint32_t k = 0; k + 1 < n; ++k) {
      const std::uint32_t p = byte_pair(piece[k], piece[k + 1]).priority;
      if (p != kNoMerge) heap.keys.push_back(key(p, k));
    }
    heap.make();
    auto push = [&](std::uint32_t l) {
      const std::uint32_t r = parts[l].next;
      if (r == kNone) return;
      const std::uint32_t p = pairs_.find(parts[l].id, parts[r].id).priority;
      if (p == kNoMerge) return;
      heap.push(key(p, l));
    };
    while (!heap.keys.empty()) {
      const std::uint64_t top = heap.pop();
      const auto l = static_cast<std::uint32_t>(top & 0xFFFFFFFFu);
      Part& left = parts[l];
      if (left.id == kNone || left.next == kNone) continue;
      const std::uint32_t r = left.next;
      const detail::Merge m = pairs_.find(left.id, parts[r].id);
      if (m.priority != static_cast<std::uint32_t>(top >> 32)) continue;  // stale
      left.id = m.result;
      parts[r].id = kNone;
      left.next = parts[r].next;
      if (left.next != kNone) parts[left.next].prev = l;
      if (left.prev != kNone) push(left.prev);
      push(l);
    }
    for (std::uint32_t k = 0; k != kNone; k = parts[k].next)
      out.push_back(static_cast<TokenId>(parts[k].id));
  }

  std::vector<std::string> tokens_;                  // id -> bytes (special: text)
  std::vector<bool> assigned_;                       // id -> in the vocabulary
  detail::StringMap ids_;                            // mergeable bytes -> id
  detail::PairMap pairs_;                            // (a, b) -> merge
  std::vector<std::pair<TokenId, TokenId>> merges_;  // in priority order, when known
  std::vector<SpecialToken> specials_;               // longest text first
  std::uint32_t byte_id_[256] = {};
  std::vector<detail::Merge> byte_pairs_;  // merges of two single bytes, 256 x 256
  std::size_t vocab_size_ = 0;
};

/// Byte-level BPE with the split pattern `Split` (a PreTokenizer): the
/// tokenizer of GPT-2 (Gpt2Split), cl100k_base (Cl100kSplit) or o200k_base
/// (O200kSplit). See the file comment for the algorithm.
///
/// Example:
///   auto tok = kappa::tokenize::Cl100kTokenizer::from_tiktoken_file("cl100k_base.tiktoken");
///   std::vector<kappa::TokenId> ids = tok.encode("hello world");  // {15339, 1917}
template <PreTokenizer Split>
class BytePairTokenizer {
 public:
  using split_type = Split;

  explicit BytePairTokenizer(BpeModel model) : model_(std::move(model)) {}

  /// Loads a tiktoken rank file (e.g. cl100k_base.tiktoken). `specials`
  /// defaults to the encoding's special tokens when Split is one of the
  /// three known patterns; FormatError on a bad file, a directory, and (with
  /// the default specials) a file that ends before the encoding's last rank.
  static BytePairTokenizer from_tiktoken_file(
      const std::string& path, std::optional<std::vector<SpecialToken>> specials = std::nullopt) {
    // The default specials are those of a known encoding: its rank file
    // ends just below them, so a file that ends earlier is truncated.
    return BytePairTokenizer(
        BpeModel::from_tiktoken(read_file(path), path, specials ? *specials : default_specials(),
                                specials ? SpecialIds::kAnywhere : SpecialIds::kAfterRanks));
  }
  /// Loads GPT-2's encoder.json and vocab.bpe; FormatError on bad files.
  static BytePairTokenizer from_gpt2_files(const std::string& encoder_json,
                                           const std::string& vocab_bpe) {
    const std::string encoder = read_file(encoder_json);
    const std::string merges = read_file(vocab_bpe);
    return BytePairTokenizer(BpeModel::from_gpt2(encoder, encoder_json, merges, vocab_bpe));
  }

  /// encode(text) with special-token text treated as text.
  std::vector<TokenId> encode(std::string_view text) const {
    return encode(text, SpecialTokens::kAsText);
  }

  /// The token ids of text (see the file comment). With kRecognize, the
  /// special token taken is the leftmost occurrence, the longest on ties.
  /// Cost: linear in the text size for a fixed set of special tokens. Each
  /// special token's next occurrence is remembered and searched again only
  /// once a match has passed it, so every special token scans the text at
  /// most once (not once per match, which was quadratic).
  std::vector<TokenId> encode(std::string_view text, SpecialTokens specials) const {
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 1);
    if (specials == SpecialTokens::kRecognize && !model_.special_tokens().empty()) {
      const std::vector<SpecialToken>& all = model_.special_tokens();  // longest first
      // next[k]: the first occurrence of all[k] at or after the position
      // where it was last searched from (npos: none).
      std::vector<std::size_t> next(all.size(), 0);
      bool first = true;
      std::size_t pos = 0;
      while (pos < text.size()) {
        std::size_t best = std::string_view::npos;
        const SpecialToken* which = nullptr;
        for (std::size_t k = 0; k < all.size(); ++k) {
          if (first || (next[k] != std::string_view::npos && next[k] < pos)) {
            next[k] = text.find(all[k].text, pos);
          }
          if (next[k] < best) {
            best = next[k];
            which = &all[k];
          }
        }
        first = false;
        encode_ordinary(
            text.substr(pos, best == std::string_view::npos ? std::string_view::npos : best - pos),
            out);
        if (which == nullptr) break;
        out.push_back(which->id);
        pos = best + which->text.size();
      }
      return out;
    }
    encode_ordinary(text, out);
    return out;
  }

  /// The bytes of the tokens, concatenated; RangeError naming a bad id.
  std::string decode(std::span<const TokenId> ids) const { return model_.decode(ids); }
  /// N_T (largest id + 1).
  std::size_t vocab_size() const noexcept { return model_.vocab_size(); }
  /// The bytes of a token (the text of a special token); RangeError if none.
  std::string token(TokenId id) const { return model_.token(id); }
  /// The id of a token's bytes or a special token's text.
  std::optional<TokenId> find(std::string_view token) const { return model_.find(token); }

  const BpeModel& model() const noexcept { return model_; }

  /// Saves in tiktoken's rank file format (special tokens are not part of it).
  void save_tiktoken(const std::string& path) const { write_file(path, model_.to_tiktoken()); }
  /// Saves as GPT-2's encoder.json + vocab.bpe (special tokens in encoder.json).
  void save_gpt2(const std::string& encoder_json, const std::string& vocab_bpe) const {
    const auto [json, bpe] = model_.to_gpt2();
    write_file(encoder_json, json);
    write_file(vocab_bpe, bpe);
  }

 private:
  static std::vector<SpecialToken> default_specials() {
    if constexpr (std::is_same_v<Split, Gpt2Split>)
      return gpt2_special_tokens();
    else if constexpr (std::is_same_v<Split, Cl100kSplit>)
      return cl100k_special_tokens();
    else if constexpr (std::is_same_v<Split, O200kSplit>)
      return o200k_special_tokens();
    else
      return {};
  }
  void encode_ordinary(std::string_view text, std::vector<TokenId>& out) const {
    split<Split>(text, [&](std::string_view piece) { model_.encode_piece(piece, out); });
  }

  BpeModel model_;
};

/// GPT-2 / r50k_base: encoder.json + vocab.bpe, or r50k_base.tiktoken.
using Gpt2Tokenizer = BytePairTokenizer<Gpt2Split>;
/// cl100k_base (GPT-3.5/4): cl100k_base.tiktoken.
using Cl100kTokenizer = BytePairTokenizer<Cl100kSplit>;
/// o200k_base (GPT-4o): o200k_base.tiktoken.
using O200kTokenizer = BytePairTokenizer<O200kSplit>;

}  // namespace kappa::tokenize
