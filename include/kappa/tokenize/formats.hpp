// kappa/tokenize/formats.hpp - the pieces of the vocabulary file formats:
// reading files, base64 (tiktoken's rank files), GPT-2's byte <-> unicode
// alphabet (encoder.json, vocab.bpe), and a strict reader for the flat JSON
// object {"token": id, ...} of encoder.json.
//
// Every parse error throws kappa::FormatError naming the file and the line
// (and byte offset for JSON), e.g.
//   "kappa: encoder.json:1 (byte 5321): expected ':' after a key".
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace kappa::tokenize {

/// The largest file read_file() reads: 512 MiB (the largest vocabulary
/// files, o200k_base's ranks or a tokenizer.json, are tens of MB).
inline constexpr std::size_t kMaxFileBytes = kappa::kMaxJsonFileBytes;

/// Reads a whole regular file (symbolic links followed) as bytes, at most
/// `max_bytes`. \throws FormatError naming the file: a missing or unreadable
/// file ("kappa: cannot open '<path>'"), a directory ("kappa: cannot read
/// '<path>': it is a directory"), anything that is not a regular file (a
/// FIFO would block, /dev/zero never end: "kappa: <path>: not a regular
/// file ..."), a file larger than `max_bytes` or than memory can hold, or a
/// read error. Never blocks on a FIFO; never throws std::bad_alloc.
inline std::string read_file(const std::string& path, std::size_t max_bytes = kMaxFileBytes) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    throw FormatError("kappa: cannot open '" + path + "'");
  if (std::filesystem::is_directory(status))
    throw FormatError("kappa: cannot read '" + path + "': it is a directory");
  // Opened non-blocking and checked again on the open descriptor (the file
  // may change after the status above).
  try {
    return kappa::read_regular_file(path, max_bytes);
  } catch (const std::bad_alloc&) {
    throw FormatError("kappa: cannot read '" + path + "': too large to hold in memory");
  }
}

/// Writes bytes to a file; throws FormatError naming the file on failure.
inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw FormatError("kappa: cannot write '" + path + "'");
}

namespace detail {

/// "kappa: <file>:<line>: <what>"
[[noreturn]] inline void format_error(std::string_view file, std::size_t line,
                                      std::string_view what) {
  throw FormatError("kappa: " + std::string(file) + ":" + std::to_string(line) + ": " +
                    std::string(what));
}

}  // namespace detail

// ---- base64 (RFC 4648, with padding) ----------------------------------------

/// Base64 encoding of bytes, with '=' padding.
inline std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  // Byte j, widened unsigned before it is shifted (an unsigned char shifts as an int).
  const auto byte = [&](std::size_t j) {
    return std::uint32_t{static_cast<unsigned char>(bytes[j])};
  };
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t v = byte(i) << 16;
    if (i + 1 < bytes.size()) v |= byte(i + 1) << 8;
    if (i + 2 < bytes.size()) v |= byte(i + 2);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

/// Decodes base64 text; nullopt if it is not canonical padded base64.
inline std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int a = value(text[i]), b = value(text[i + 1]);
    int c = value(text[i + 2]), d = value(text[i + 3]);
    if (a < 0 || b < 0) return std::nullopt;
    int pad = 0;
    if (last && text[i + 3] == '=') {
      pad = text[i + 2] == '=' ? 2 : 1;
      if (pad == 2) c = 0;
      d = 0;
    }
    if (c < 0 || d < 0) return std::nullopt;
    // Canonical: the bits the padding leaves unused must be zero ("Q2==" and
    // "Qw==" would otherwise both spell "C").
    if ((pad == 2 && (b & 0xF) != 0) || (pad == 1 && (c & 0x3) != 0)) return std::nullopt;
    const std::uint32_t v = (std::uint32_t(a) << 18) | (std::uint32_t(b) << 12) |
                            (std::uint32_t(c) << 6) | std::uint32_t(d);
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return out;
}

// ---- GPT-2's byte <-> unicode alphabet ---------------------------------------

/// GPT-2 writes token bytes in encoder.json / vocab.bpe as printable code
/// points: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves,
/// the other 68 bytes b map to U+0100 + (index of b among them).
struct Gpt2ByteAlphabet {
  std::array<char32_t, 256> to_unicode{};
  std::array<std::int16_t, 0x144> to_byte{};  // -1 if not in the alphabet

  Gpt2ByteAlphabet() {
    to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp =
          printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + extra++);
      to_unicode[static_cast<std::size_t>(b)] = cp;
      to_byte[cp] = static_cast<std::int16_t>(b);
    }
  }

  /// The UTF-8 string GPT-2 writes for these bytes.
  std::string encode(std::string_view bytes) const {
    std::string out;
    for (char c : bytes) append_utf8(out, to_unicode[static_cast<unsigned char>(c)]);
    return out;
  }

  /// The bytes a GPT-2 token string stands for; nullopt if it has a
  /// character outside the alphabet (or is not UTF-8).
  std::optional<std::string> decode(std::string_view text) const {
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
      const Utf8Char c = decode_utf8(text, i);
      if (!c.valid || c.code_point >= to_byte.size() || to_byte[c.code_point] < 0)
        return std::nullopt;
      out += static_cast<char>(to_byte[c.code_point]);
      i += c.length;
    }
    return out;
  }
};

inline const Gpt2ByteAlphabet& gpt2_alphabet() {
  static const Gpt2ByteAlphabet alphabet;
  return alphabet;
}

// ---- JSON: a flat object of string keys and integer values -----------------

/// Parses `{"key": 123, ...}` (RFC 8259 strings with all escapes, integer
/// values) into (key, value) pairs in file order. Throws FormatError naming
/// `file`, the line and the byte offset on anything else.
inline std::vector<std::pair<std::string, long long>> parse_json_int_object(std::string_view text,
                                                                            std::string_view file) {
  std::size_t pos = 0;
  auto fail = [&](std::string_view what) {
    std::size_t line = 1;
    for (std::size_t k = 0; k < pos && k < text.size(); ++k) line += text[k] == '\n';
    throw FormatError("kappa: " + std::string(file) + ":" + std::to_string(line) + " (byte " +
                      std::to_string(pos) + "): " + std::string(what));
  };
  auto skip_ws = [&] {
    while (pos < text.size() &&
           (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  };
  auto expect = [&](char c, std::string_view what) {
    skip_ws();
    if (pos >= text.size() || text[pos] != c) fail(what);
    ++pos;
  };
  auto hex4 = [&]() -> std::uint32_t {
    if (pos + 4 > text.size()) fail("truncated \\u escape");
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[pos++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      else
        fail("bad hex digit in \\u escape");
    }
    return v;
  };
  auto parse_string = [&]() {
    expect('"', "expected '\"' to start a key");
    std::string out;
    for (;;) {
      if (pos >= text.size()) fail("unterminated string");
      const char c = text[pos++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= text.size()) fail("unterminated escape");
      switch (text[pos++]) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos + 2 > text.size() || text[pos] != '\\' || text[pos + 1] != 'u')
              fail("unpaired surrogate in \\u escape");
            pos += 2;
            const std::uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail("unknown escape in string");
      }
    }
  };
  std::vector<std::pair<std::string, long long>> out;
  expect('{', "expected '{' (a JSON object of token: id)");
  skip_ws();
  if (pos < text.size() && text[pos] == '}') {
    ++pos;
  } else {
    for (;;) {
      std::string key = parse_string();
      expect(':', "expected ':' after a key");
      skip_ws();
      const std::size_t start = pos;
      if (pos < text.size() && text[pos] == '-') ++pos;
      while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
      if (pos == start || (pos == start + 1 && text[start] == '-') || pos - start > 12)
        fail("expected an integer id after key " + kappa::quoted(key));
      out.emplace_back(std::move(key), std::stoll(std::string(text.substr(start, pos - start))));
      skip_ws();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      expect('}', "expected ',' or '}' after a value");
      break;
    }
  }
  skip_ws();
  if (pos != text.size()) fail("unexpected data after the JSON object");
  return out;
}

/// A JSON string literal for s (UTF-8 passed through, controls, '"' and '\'
/// escaped).
inline std::string json_quote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace kappa::tokenize
