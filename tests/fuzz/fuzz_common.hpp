// tests/fuzz/fuzz_common.hpp - what every kappa fuzz target shares: a check
// that stops the fuzzer with a message (libFuzzer then saves the input as a
// crash artifact), a reader that splits the input into fields, and an
// in-memory file for the readers that take a path.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kappa/core/matrix.hpp"

/// Aborts with a message when a property fails: a finding.
#define KAPPA_FUZZ_CHECK(cond, what)                                                            \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "kappa fuzz: %s:%d: property failed: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, std::string(what).c_str());                                           \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace kappa::fuzz {

/// The fuzzer's bytes as text.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Consumes a small number from the front of the input (0 if empty).
inline unsigned take_byte(std::string_view& in) {
  if (in.empty()) return 0;
  const auto b = static_cast<unsigned char>(in.front());
  in.remove_prefix(1);
  return b;
}

/// Splits at the first byte `sep`: (before, after); after is empty if none.
inline std::pair<std::string_view, std::string_view> split_at(std::string_view in, char sep) {
  const std::size_t k = in.find(sep);
  if (k == std::string_view::npos) return {in, {}};
  return {in.substr(0, k), in.substr(k + 1)};
}

/// True if every id is in [0, n).
inline bool ids_in_range(std::span<const TokenId> ids, std::size_t n) {
  for (TokenId id : ids)
    if (id < 0 || static_cast<std::size_t>(id) >= n) return false;
  return true;
}

/// A short printable rendering of bytes for messages.
inline std::string show(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

/// An anonymous in-memory file (memfd) reachable by path, so a fuzzer runs the
/// real path-taking API of a reader. `name` shows in /proc/self/fd listings.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, 0)) {
    KAPPA_FUZZ_CHECK(fd_ >= 0, "memfd_create failed");
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  /// Replaces the file's contents with `bytes`.
  void assign(std::string_view bytes) const {
    KAPPA_FUZZ_CHECK(ftruncate(fd_, 0) == 0, "ftruncate failed");
    KAPPA_FUZZ_CHECK(
        pwrite(fd_, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()),
        "pwrite failed");
  }
  [[nodiscard]] std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace kappa::fuzz
