// kappa/core/json.hpp - the small JSON files of a model directory
// (config.json, tokenizer.json, the sharded index, generation_config.json),
// read as untrusted input: regular files only, bounded in size, nesting
// bounded before anything recurses into it, and every message naming the
// file and the byte with the file's bytes escaped (kappa::quoted).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"

namespace kappa {

/// The deepest nesting of arrays and objects kappa accepts in a JSON file.
/// Hugging Face's own reader (serde_json) stops at 128; real files nest
/// fewer than 10 levels. Deeper text is a FormatError before it is parsed,
/// so nothing recurses (dump, copy, destroy) through a million brackets.
inline constexpr int kMaxJsonDepth = 128;

/// The largest JSON file read whole: 512 MiB (the largest tokenizer.json on
/// the hub is about 35 MB). A larger file, or a device that never ends
/// (/dev/zero), is a FormatError, not an unbounded read.
inline constexpr std::size_t kMaxJsonFileBytes = std::size_t{512} << 20;

/// Reads the regular file `path` whole (symbolic links followed), at most
/// `max_bytes` bytes. \throws FormatError naming the file when it cannot be
/// opened, is not a regular file (a directory, a FIFO, a device: a FIFO
/// would block forever, /dev/zero never end), or holds more than `max_bytes`.
inline std::string read_regular_file(const std::string& path,
                                     std::size_t max_bytes = kMaxJsonFileBytes) {
  const auto fail = [&](const std::string& what) -> void {
    throw FormatError("kappa: " + path + ": " + what);
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer. It has no effect
  // on reads of a regular file, the only kind read below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    fail(std::string("cannot open the file (") + std::strerror(err) + ")");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("cannot stat the file");
  if (S_ISDIR(st.st_mode)) fail("is a directory, expected a file");
  if (!S_ISREG(st.st_mode)) fail("not a regular file (a FIFO, socket or device?)");
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > max_bytes)
    fail("the file is larger than the limit of " + std::to_string(max_bytes) + " bytes");
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {  // the file may shrink while it is read
    const ::ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot read the file");
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

/// The byte offset at which `text` first nests arrays/objects deeper than
/// `max_depth`, or nullopt. Brackets inside strings do not count. Linear,
/// no recursion.
inline std::optional<std::size_t> json_too_deep(std::string_view text,
                                                int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

/// Parses JSON `text` read from `file`. \throws FormatError
/// "kappa: <file>: byte <n>: <what>" for nesting deeper than `max_depth`,
/// a NUL byte, a syntax error (nlohmann's message, escaped) or a number
/// beyond double. `byte_base` is added to every byte offset (the position
/// of `text` inside its file).
inline nlohmann::json parse_json(std::string_view text, std::string_view file,
                                 std::size_t byte_base = 0, int max_depth = kMaxJsonDepth) {
  const auto fail = [&](std::size_t byte, const std::string& what) -> void {
    std::string msg = "kappa: ";
    msg.append(file).append(": byte ").append(std::to_string(byte_base + byte)).append(": ");
    msg += what;
    throw FormatError(msg);
  };
  if (const auto at = json_too_deep(text, max_depth))
    fail(*at, "JSON nested deeper than " + std::to_string(max_depth) + " levels");
  // nlohmann stops at a NUL byte as at the end of input, which would let
  // bytes after it hide; JSON text has none.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos)
    fail(nul, "not valid JSON: a NUL byte");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    if (const std::size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    fail(e.byte > 0 ? e.byte - 1 : 0, "not valid JSON: " + printable(what));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number beyond double: 1e400
    std::string what = e.what();
    if (const std::size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    fail(0, "not valid JSON: " + printable(what));
  }
  return {};  // not reached
}

/// read_regular_file() then parse_json().
inline nlohmann::json read_json_file(const std::string& path,
                                     std::size_t max_bytes = kMaxJsonFileBytes) {
  return parse_json(read_regular_file(path, max_bytes), path);
}

/// Typed fields of a parsed JSON file (a tokenizer.json section), each bad
/// one a FormatError "kappa: <source>: <key>: <what>". A null value counts as
/// absent.
class JsonFields {
 public:
  explicit JsonFields(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw FormatError("kappa: " + source_ + ": " + key + ": " + what);
  }
  /// o[k], or nullptr when o is not an object or k is absent or null.
  static const nlohmann::json* get(const nlohmann::json& o, const char* k) {
    if (!o.is_object()) return nullptr;
    const auto it = o.find(k);
    return (it == o.end() || it->is_null()) ? nullptr : &*it;
  }
  /// o["type"] of the object o at `key`.
  std::string type_of(const nlohmann::json& o, const std::string& key) const {
    if (!o.is_object()) fail(key, "not a JSON object");
    const nlohmann::json* t = get(o, "type");
    if (t == nullptr || !t->is_string()) fail(key + ".type", "missing or not a string");
    return t->get<std::string>();
  }
  /// The boolean o[k] (`dflt` when absent) of the object at `key`.
  bool flag(const nlohmann::json& o, const char* k, const std::string& key, bool dflt) const {
    const nlohmann::json* v = get(o, k);
    if (v == nullptr) return dflt;
    if (!v->is_boolean()) fail(key + "." + k, "not true or false");
    return v->get<bool>();
  }
  /// The string o[k] (`dflt` when absent) of the object at `key`.
  std::string str(const nlohmann::json& o, const char* k, const std::string& key,
                  const std::string& dflt) const {
    const nlohmann::json* v = get(o, k);
    if (v == nullptr) return dflt;
    if (!v->is_string()) fail(key + "." + k, "not a string");
    return v->get<std::string>();
  }

 private:
  std::string source_;
};

}  // namespace kappa
