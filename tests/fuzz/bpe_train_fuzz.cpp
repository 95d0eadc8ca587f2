// Fuzz target: BPE training (train_bpe) on small corpora.
//
// Input: byte (vocab_size - 256) mod 128, byte min_pair_count - 1 (mod 3), the
// corpus. Properties:
//   * training succeeds (the options are valid) with vocab_size() tokens at
//     most vocab_size + 1 (one special);
//   * decode(encode(corpus)) == corpus and ids < vocab_size;
//   * the trained tokenizer, its saved rank file and its saved GPT-2 files
//     encode the corpus to the same ids (the trainer's promise that the
//     trained model encodes like what it saves).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/bpe_train.hpp"

namespace tk = kappa::tokenize;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view corpus = kappa::fuzz::as_text(data, size);
  tk::BpeTrainOptions options;
  options.vocab_size = 256 + kappa::fuzz::take_byte(corpus) % 128;
  options.min_pair_count = 1 + kappa::fuzz::take_byte(corpus) % 3;
  options.specials = {"<|endoftext|>"};
  const tk::Gpt2Tokenizer trained = tk::train_bpe<tk::Gpt2Split>(corpus, options);
  KAPPA_FUZZ_CHECK(trained.model().mergeable_count() <= options.vocab_size, "too many tokens");
  KAPPA_FUZZ_CHECK(trained.vocab_size() == trained.model().mergeable_count() + 1,
                   "vocab_size is not tokens + specials");

  const std::vector<kappa::TokenId> ids = trained.encode(corpus);
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, trained.vocab_size()), "id out of range");
  KAPPA_FUZZ_CHECK(trained.decode(ids) == corpus, "decode(encode(corpus)) != corpus");

  const std::vector<tk::SpecialToken> specials = trained.model().special_tokens();
  const tk::Gpt2Tokenizer from_ranks(
      tk::BpeModel::from_tiktoken(trained.model().to_tiktoken(), "trained.tiktoken", specials));
  KAPPA_FUZZ_CHECK(from_ranks.encode(corpus) == ids,
                   "trained model and its saved rank file encode the corpus differently");
  const auto [json, bpe] = trained.model().to_gpt2();
  const tk::Gpt2Tokenizer from_gpt2(
      tk::BpeModel::from_gpt2(json, "trained/encoder.json", bpe, "trained/vocab.bpe"));
  KAPPA_FUZZ_CHECK(from_gpt2.encode(corpus) == ids,
                   "trained model and its saved GPT-2 files encode the corpus differently");
  return 0;
}
