// Fuzz target: the Hugging Face JSON readers - tokenizer.json (with the
// tokenizer.json loader of include/kappa/tokenize/hf_tokenizer.hpp) and
// config.json (kappa::hf::Config with the LLaMA-layout and rope_scaling
// parsers of include/kappa/transformer/hf.hpp).
//
// Input: the first byte picks the reader, the rest is the file, handed over
// as an in-memory file (memfd) so the real path-taking API runs. Properties:
//   * loading either succeeds or throws kappa::FormatError (never another
//     exception type, a crash or a sanitizer report);
//   * a tokenizer that loads gives ids inside its vocabulary for a few fixed
//     strings, decodes them, and round-trips them (decode(encode(x)) == x
//     without added specials) when HfTokenizer::round_trips() says Hugging
//     Face's own tokenizer does: byte-level BPE without add_prefix_space,
//     and the SentencePiece-style layout only in Llama-2's exact pipeline
//     (elsewhere HF itself loses text: <unk>, Metaspace's leading space, no
//     decoder joining tokens with " "; kappa follows HF, tested against it in
//     tests/tokenize/sp_bpe_test.cpp);
//   * a config that parses gives sizes inside the bounds the parser states.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/hf.hpp"

namespace {

void tokenizer_json(const std::string& path) {
  try {
    const auto tok = kappa::tokenize::HfTokenizer::from_tokenizer_json(
        path, std::nullopt, kappa::tokenize::Normalization::kAssumeNormalized);
    for (const std::string_view text :
         {"Hello world", "  a\n\nb 12345", "caf\xc3\xa9 \xe4\xb8\xad"}) {
      const std::vector<kappa::TokenId> ids = tok.encode(text, kappa::tokenize::AddSpecial::kNo,
                                                         kappa::tokenize::SpecialTokens::kAsText);
      for (const kappa::TokenId id : ids)
        KAPPA_FUZZ_CHECK(id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size(),
                         "an id outside the vocabulary");
      const std::string back = tok.decode(ids);
      (void)tok.decode(ids, kappa::tokenize::SkipSpecial::kYes);
      if (tok.round_trips()) KAPPA_FUZZ_CHECK(back == text, "decode(encode(x)) != x");
    }
  } catch (const kappa::FormatError&) {
  }
}

void config_json(const std::string& path) {
  try {
    const kappa::hf::Config c = kappa::hf::Config::read(path);
    const kappa::hf::LlamaSizes s = kappa::hf::llama_sizes(c, "llama");
    KAPPA_FUZZ_CHECK(s.d >= 1 && s.n_head >= 1 && s.n_kv >= 1 && s.n_head % s.n_kv == 0 &&
                         s.d_head >= 2 && s.d_head % 2 == 0 && s.vocab >= 1,
                     "sizes outside the parser's bounds");
    (void)kappa::hf::parse_rope_scaling(c, s.max_pos);
  } catch (const kappa::FormatError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in = kappa::fuzz::as_text(data, size);
  const unsigned which = kappa::fuzz::take_byte(in);
  static const kappa::fuzz::MemFile file("kappa-fuzz-hf-json");
  file.assign(in);
  if (which % 2 == 0) {
    tokenizer_json(file.path());
  } else {
    config_json(file.path());
  }
  return 0;
}
