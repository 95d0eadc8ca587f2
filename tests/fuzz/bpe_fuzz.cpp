// Fuzz target: byte-level BPE encode/decode on any bytes.
//
// Vocabularies, built once:
//   * synthetic: train_bpe on tests/data/tokenize/corpus, written both as a
//     tiktoken rank file and as GPT-2's encoder.json + vocab.bpe, and loaded
//     back from each;
//   * real, when the files are there (cmake extracts them into <build>/vocab
//     from tests/data/tokenize/vocab/vocab.tar.xz; the environment variable
//     KAPPA_FUZZ_VOCAB_DIR overrides the place): r50k_base.tiktoken and
//     gpt2/encoder.json + gpt2/vocab.bpe.
// Properties for every input x, with each split pattern (GPT-2, cl100k, o200k):
//   * decode(encode(x)) == x, every id < vocab_size, in both special-token
//     modes;
//   * the GPT-2-format and rank-file loads of one vocabulary give the same
//     ids (the trained tokenizer too, for the synthetic one).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/bpe_train.hpp"

namespace {

namespace tk = kappa::tokenize;
namespace fs = std::filesystem;

/// One vocabulary loaded two ways, as tokenizers of one split pattern.
template <class Split>
struct Loaded {
  tk::BytePairTokenizer<Split> from_tiktoken, from_gpt2;
};

/// One vocabulary loaded two ways (the rank file and GPT-2's files), under
/// each split pattern; built once, as tokenizers copy their model.
struct Pair {
  Pair(std::string n, const tk::BpeModel& tt, const tk::BpeModel& g2,
       std::unique_ptr<tk::Gpt2Tokenizer> t)
      : name(std::move(n)),
        gpt2{tk::BytePairTokenizer<tk::Gpt2Split>(tt), tk::BytePairTokenizer<tk::Gpt2Split>(g2)},
        cl100k{tk::BytePairTokenizer<tk::Cl100kSplit>(tt),
               tk::BytePairTokenizer<tk::Cl100kSplit>(g2)},
        o200k{tk::BytePairTokenizer<tk::O200kSplit>(tt), tk::BytePairTokenizer<tk::O200kSplit>(g2)},
        trained(std::move(t)) {}
  std::string name;
  Loaded<tk::Gpt2Split> gpt2;
  Loaded<tk::Cl100kSplit> cl100k;
  Loaded<tk::O200kSplit> o200k;
  std::unique_ptr<tk::Gpt2Tokenizer> trained;  // synthetic only
};

std::vector<Pair> make_vocabularies() {
  std::vector<Pair> out;
  std::string corpus;
  for (const auto& e : fs::directory_iterator(KAPPA_FUZZ_CORPUS_DIR))
    if (e.is_regular_file()) corpus += tk::read_file(e.path().string());
  tk::BpeTrainOptions options;
  options.vocab_size = 700;
  options.specials = {"<|endoftext|>"};
  auto trained = std::make_unique<tk::Gpt2Tokenizer>(tk::train_bpe<tk::Gpt2Split>(corpus, options));
  const std::string ranks = trained->model().to_tiktoken();
  const auto [json, bpe] = trained->model().to_gpt2();
  const std::vector<tk::SpecialToken> specials = trained->model().special_tokens();
  out.emplace_back(
      "synthetic", tk::BpeModel::from_tiktoken(ranks, "synthetic.tiktoken", specials),
      tk::BpeModel::from_gpt2(json, "synthetic/encoder.json", bpe, "synthetic/vocab.bpe"),
      std::move(trained));

  const char* env = std::getenv("KAPPA_FUZZ_VOCAB_DIR");
  const fs::path dir = env != nullptr ? fs::path(env) : fs::path(KAPPA_FUZZ_VOCAB_DIR);
  if (fs::exists(dir / "r50k_base.tiktoken") && fs::exists(dir / "gpt2" / "encoder.json")) {
    out.emplace_back(
        "r50k/gpt2",
        tk::BpeModel::from_tiktoken(tk::read_file((dir / "r50k_base.tiktoken").string()),
                                    "r50k_base.tiktoken", tk::gpt2_special_tokens()),
        tk::BpeModel::from_gpt2(tk::read_file((dir / "gpt2" / "encoder.json").string()),
                                "encoder.json",
                                tk::read_file((dir / "gpt2" / "vocab.bpe").string()), "vocab.bpe"),
        nullptr);
    std::fprintf(stderr, "bpe fuzz: real vocabularies from %s\n", dir.c_str());
  } else {
    std::fprintf(stderr, "bpe fuzz: no r50k/gpt2 files in %s, synthetic vocabulary only\n",
                 dir.c_str());
  }
  return out;
}

template <class Split>
void check(const Pair& p, const Loaded<Split>& t, std::string_view x) {
  const tk::BytePairTokenizer<Split>& a = t.from_tiktoken;
  const tk::BytePairTokenizer<Split>& b = t.from_gpt2;
  for (const tk::SpecialTokens mode : {tk::SpecialTokens::kAsText, tk::SpecialTokens::kRecognize}) {
    const std::vector<kappa::TokenId> ids = a.encode(x, mode);
    KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, a.vocab_size()), p.name + ": id out of range");
    KAPPA_FUZZ_CHECK(a.decode(ids) == x, p.name + ": decode(encode(x)) != x");
    KAPPA_FUZZ_CHECK(b.encode(x, mode) == ids,
                     p.name + ": encoder.json/vocab.bpe and the rank file give different ids for " +
                         kappa::fuzz::show(x));
    if constexpr (std::is_same_v<Split, tk::Gpt2Split>)
      if (p.trained)
        KAPPA_FUZZ_CHECK(p.trained->encode(x, mode) == ids,
                         p.name + ": trained tokenizer and its saved rank file differ on " +
                             kappa::fuzz::show(x));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<Pair> vocabularies = make_vocabularies();
  const std::string_view x = kappa::fuzz::as_text(data, size);
  for (const Pair& p : vocabularies) {
    check(p, p.gpt2, x);
    check(p, p.cl100k, x);
    check(p, p.o200k, x);
  }
  return 0;
}
