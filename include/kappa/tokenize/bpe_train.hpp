// kappa/tokenize/bpe_train.hpp - learning a byte-level BPE vocabulary from a
// corpus.
//
// Algorithm (Sennrich et al. 2016, on bytes as GPT-2): pre-tokenize the
// corpus with Split and count each distinct piece; start every piece as its
// bytes (ids 0..255 = byte values); then repeat: find the adjacent pair
// (a, b) with the largest count summed over all pieces (ties: smallest a,
// then smallest b), add token a+b with the next id, replace (a, b) by it
// everywhere (left to right, non-overlapping). Stop at vocab_size tokens or
// when no pair occurs min_pair_count times. Merge k gets priority k, so the
// trained tokenizer encodes with the same rules as a tiktoken file, and
// save_tiktoken()/save_gpt2() write it in both formats.
//
// Cost: O(total piece bytes) per merge for the pieces that contain the pair
// (an index from pair to pieces), plus a heap over pair counts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kappa/tokenize/bpe.hpp"

namespace kappa::tokenize {

/// Options of train_bpe().
struct BpeTrainOptions {
  std::size_t vocab_size = 512;       ///< mergeable tokens wanted (>= 256)
  std::size_t min_pair_count = 2;     ///< stop when the best pair occurs less often
  std::vector<std::string> specials;  ///< special tokens, ids after the merges
};

/// Learns a byte-level BPE from corpus (see the file comment). Throws
/// std::invalid_argument if vocab_size < 256.
template <PreTokenizer Split>
BytePairTokenizer<Split> train_bpe(std::string_view corpus, const BpeTrainOptions& options) {
  if (options.vocab_size < 256)
    throw std::invalid_argument("kappa: train_bpe: vocab_size " +
                                std::to_string(options.vocab_size) +
                                " < 256 (every byte is a token)");
  std::unordered_map<std::string, std::size_t> piece_counts;
  split<Split>(corpus, [&](std::string_view p) { ++piece_counts[std::string(p)]; });

  std::vector<std::vector<std::uint32_t>> words;
  std::vector<std::size_t> freq;
  words.reserve(piece_counts.size());
  for (const auto& [p, n] : piece_counts) {
    std::vector<std::uint32_t> w;
    for (char c : p) w.push_back(static_cast<unsigned char>(c));
    words.push_back(std::move(w));
    freq.push_back(n);
  }
  // Deterministic order whatever the hash map did.
  std::vector<std::size_t> order(words.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return words[a] < words[b]; });
  {
    std::vector<std::vector<std::uint32_t>> w2;
    std::vector<std::size_t> f2;
    for (std::size_t k : order) {
      w2.push_back(std::move(words[k]));
      f2.push_back(freq[k]);
    }
    words = std::move(w2);
    freq = std::move(f2);
  }

  auto key = [](std::uint32_t a, std::uint32_t b) { return (std::uint64_t{a} << 32) | b; };
  std::unordered_map<std::uint64_t, long long> count;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> where;
  for (std::size_t w = 0; w < words.size(); ++w)
    for (std::size_t k = 0; k + 1 < words[w].size(); ++k) {
      const std::uint64_t p = key(words[w][k], words[w][k + 1]);
      count[p] += static_cast<long long>(freq[w]);
      where[p].push_back(static_cast<std::uint32_t>(w));
    }
  // Max-heap on (count, -a, -b) with lazy entries.
  using Entry =
      std::tuple<long long, std::uint64_t>;  // (count, ~key) so that smaller keys win ties
  std::priority_queue<Entry> heap;
  for (const auto& [p, n] : count) heap.emplace(n, ~p);

  std::vector<std::string> bytes(256);
  for (int b = 0; b < 256; ++b)
    bytes[static_cast<std::size_t>(b)] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, std::uint32_t> id_of;
  for (std::uint32_t b = 0; b < 256; ++b) id_of[bytes[b]] = b;
  std::vector<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>> merges;  // (a, b) -> c
  std::vector<std::uint32_t> visited(words.size(), 0);
  std::uint32_t step = 0;

  while (bytes.size() < options.vocab_size && !heap.empty()) {
    const auto [n, inv] = heap.top();
    heap.pop();
    const std::uint64_t p = ~inv;
    const auto it = count.find(p);
    if (it == count.end() || it->second != n) continue;  // stale
    if (n < static_cast<long long>(options.min_pair_count) || n <= 0) break;
    const auto a = static_cast<std::uint32_t>(p >> 32),
               b = static_cast<std::uint32_t>(p & 0xFFFFFFFFu);
    const std::string merged = bytes[a] + bytes[b];
    std::uint32_t c;
    if (const auto found = id_of.find(merged); found != id_of.end()) {
      c = found->second;  // same bytes reached by another pair: reuse the token
    } else {
      c = static_cast<std::uint32_t>(bytes.size());
      bytes.push_back(merged);
      id_of.emplace(merged, c);
      merges.emplace_back(a, b, c);
    }
    ++step;
    std::unordered_map<std::uint64_t, long long> delta;
    const std::vector<std::uint32_t> affected = std::move(where[p]);
    where.erase(p);
    for (std::uint32_t w : affected) {
      if (visited[w] == step) continue;
      visited[w] = step;
      std::vector<std::uint32_t>& s = words[w];
      const auto f = static_cast<long long>(freq[w]);
      bool has = false;
      for (std::size_t k = 0; k + 1 < s.size(); ++k) has |= s[k] == a && s[k + 1] == b;
      if (!has) continue;
      for (std::size_t k = 0; k + 1 < s.size(); ++k) delta[key(s[k], s[k + 1])] -= f;
      std::vector<std::uint32_t> t;
      t.reserve(s.size());
      for (std::size_t k = 0; k < s.size();) {
        if (k + 1 < s.size() && s[k] == a && s[k + 1] == b) {
          t.push_back(c);
          k += 2;
        } else {
          t.push_back(s[k++]);
        }
      }
      s = std::move(t);
      for (std::size_t k = 0; k + 1 < s.size(); ++k) {
        const std::uint64_t q = key(s[k], s[k + 1]);
        delta[q] += f;
        if (s[k] == c || s[k + 1] == c) where[q].push_back(w);
      }
    }
    for (const auto& [q, d] : delta) {
      if (d == 0) continue;
      long long& v = count[q];
      v += d;
      if (v > 0) heap.emplace(v, ~q);
    }
    count.erase(p);
  }

  BpeModel model;
  for (std::uint32_t id = 0; id < bytes.size(); ++id)
    model.add_token(bytes[id], static_cast<TokenId>(id), "train_bpe", 0);
  model.finish_tokens("train_bpe");
  for (const auto& [a, b, c] : merges)
    model.add_merge(static_cast<TokenId>(a), static_cast<TokenId>(b), static_cast<TokenId>(c), c);
  // Other splits of a merged token into two tokens merge too (as for a
  // tiktoken file, where the priority is the rank of a+b): a trained model
  // then encodes exactly like its saved rank file.
  for (std::uint32_t id = 256; id < bytes.size(); ++id) {
    const std::string& t = bytes[id];
    for (std::size_t k = 1; k < t.size(); ++k) {
      const auto x = id_of.find(t.substr(0, k)), y = id_of.find(t.substr(k));
      if (x != id_of.end() && y != id_of.end())
        model.add_merge_quiet(static_cast<TokenId>(x->second), static_cast<TokenId>(y->second),
                              static_cast<TokenId>(id), id);
    }
  }
  std::vector<SpecialToken> specials;
  for (std::size_t k = 0; k < options.specials.size(); ++k)
    specials.push_back({options.specials[k], static_cast<TokenId>(bytes.size() + k)});
  model.set_specials(std::move(specials), "train_bpe");
  return BytePairTokenizer<Split>(std::move(model));
}

}  // namespace kappa::tokenize
