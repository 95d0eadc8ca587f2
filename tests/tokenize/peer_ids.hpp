// tests/tokenize/peer_ids.hpp - what the tokenizer exactness tests compare
// against, without running any peer:
//   * the expected ids of the reference tokenizers, committed in
//     tests/data/tokenize/peer_ids.json (made by tests/tokenize/peer/peer.cjs
//     golden from tiktoken's Rust core, @dqbd/tiktoken, and Hugging Face
//     tokenizers, @anush008/tokenizers; regenerated and compared by the
//     target tokenize-peers);
//   * the real vocabulary files, extracted at configure time from
//     tests/data/tokenize/vocab/vocab.tar.xz into KAPPA_VOCAB_DIR (the build
//     tree).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/formats.hpp"

namespace kappa::testing {

/// The extracted vocabulary files: gpt2/encoder.json, gpt2/vocab.bpe,
/// {r50k_base,cl100k_base,o200k_base}.tiktoken.
inline std::string vocab_dir() {
  return KAPPA_VOCAB_DIR;
}

/// Empty when every vocabulary file is there, else which one is missing and
/// why (the caller FAILs with it).
inline std::string vocab_missing() {
  for (const char* f : {"gpt2/encoder.json", "gpt2/vocab.bpe", "r50k_base.tiktoken",
                        "cl100k_base.tiktoken", "o200k_base.tiktoken"}) {
    if (!std::filesystem::exists(vocab_dir() + "/" + f))
      return vocab_dir() + "/" + f +
             " is missing: cmake extracts it at configure time from "
             "tests/data/tokenize/vocab/vocab.tar.xz; re-run cmake on this build directory";
  }
  return {};
}

/// One input of the exactness tests and the ids each peer gives for it.
struct PeerCase {
  std::string name;  ///< "corpus/english.txt", "random/17", "long/0"
  std::string text;  ///< the input (a corpus case: the file's bytes)
  /// tiktoken's mode: special-token text encoded as the special tokens
  /// (encode(text, "all")) rather than as text (encode_ordinary).
  bool recognize_specials = false;
  /// "gpt2" (also r50k_base's), "cl100k_base", "o200k_base": tiktoken's ids;
  /// "hf:gpt2": Hugging Face tokenizers' ids for GPT-2's files as a
  /// tokenizer.json (added tokens always recognized).
  std::map<std::string, std::vector<TokenId>> ids;
};

inline std::string peer_ids_file() {
  return std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/peer_ids.json";
}

/// Every case of peer_ids.json, read once. Throws std::runtime_error naming
/// the file and the case when it is malformed.
inline const std::vector<PeerCase>& peer_cases() {
  static const std::vector<PeerCase> cases = [] {
    const std::string file = peer_ids_file();
    std::vector<PeerCase> out;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(tokenize::read_file(file));
      for (const auto& c : j.at("cases")) {
        PeerCase pc;
        pc.name = c.at("name").get<std::string>();
        pc.text = c.contains("file")
                      ? tokenize::read_file(std::string(KAPPA_TEST_DATA_DIR) + "/tokenize/" +
                                            c.at("file").get<std::string>())
                      : c.at("text").get<std::string>();
        const std::string specials = c.at("specials").get<std::string>();
        if (specials != "ordinary" && specials != "all-special")
          throw std::runtime_error(pc.name + ": specials is '" + specials + "'");
        pc.recognize_specials = specials == "all-special";
        for (const auto& [peer, ids] : c.at("ids").items())
          pc.ids[peer] = ids.get<std::vector<TokenId>>();
        out.push_back(std::move(pc));
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(file + ": " + e.what());
    }
    return out;
  }();
  return cases;
}

/// The cases whose name starts with `prefix` ("corpus/", "random/", "long/").
inline std::vector<const PeerCase*> peer_cases(std::string_view prefix) {
  std::vector<const PeerCase*> out;
  for (const PeerCase& c : peer_cases())
    if (c.name.starts_with(prefix)) out.push_back(&c);
  return out;
}

/// The peer's ids of case c; FAILs the test (and returns empty) if the file
/// has none for that peer.
inline const std::vector<TokenId>& peer_ids(const PeerCase& c, const std::string& peer) {
  static const std::vector<TokenId> none;
  const auto it = c.ids.find(peer);
  if (it == c.ids.end()) {
    ADD_FAILURE() << peer_ids_file() << ": case " << c.name << " has no ids of " << peer;
    return none;
  }
  return it->second;
}

}  // namespace kappa::testing
