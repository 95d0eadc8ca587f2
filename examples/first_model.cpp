// examples/first_model.cpp - a loaded model in a few lines, through the
// compiled runtime (kappa/runtime.hpp, the library kappa::runtime): this file
// compiles in about a second, where one that calls hf::load compiles every
// architecture (about a minute of g++).
//
//   first_model [MODEL_DIR_OR_GGUF]     (default: the tiny trained GPT-2)
//
// Prints layer 2, head 3's attention weights of a short prompt, the size of
// the residual stream, the five most probable next tokens with their
// log-probabilities, and a continuation generated with a BF16 cache.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "kappa/runtime.hpp"

int main(int argc, char** argv) {
  try {
    const std::string path =
        argc > 1 ? argv[1] : std::string(KAPPA_SOURCE_DIR) + "/tests/data/models/gpt2-trained";
    const kappa::runtime::Model lm = kappa::runtime::Model::load(path);
    std::printf("%s: %s, %ld layers, vocabulary %ld\n", path.c_str(), lm.architecture(),
                static_cast<long>(lm.num_layers()), static_cast<long>(lm.vocab_size()));

    // Looking inside: the attention weights of one layer, every hidden state.
    const std::vector<kappa::TokenId> ids = lm.tokenizer().encode("In the beginning God created");
    const kappa::Index layer = std::min<kappa::Index>(2, lm.num_layers() - 1);
    const kappa::Inspection<float> in =
        lm.inspect(ids, {.hidden_states = true, .attentions = true, .layers = {layer}});
    const kappa::HeadWeights<float>& heads = in.attentions[static_cast<std::size_t>(layer)];
    const kappa::Index head =
        std::min<kappa::Index>(3, static_cast<kappa::Index>(heads.size()) - 1);
    const kappa::RowMatrix<float>& w = heads[head];
    std::printf("\nlayer %ld, head %ld: Z^-1 A (%ld x %ld), row by row\n", static_cast<long>(layer),
                static_cast<long>(head), static_cast<long>(w.rows()), static_cast<long>(w.cols()));
    for (kappa::Index i = 0; i < w.rows(); ++i) {
      std::printf("  %-10s", lm.tokenizer().token(ids[static_cast<std::size_t>(i)]).c_str());
      for (kappa::Index j = 0; j <= i; ++j) std::printf(" %.2f", static_cast<double>(w(i, j)));
      std::printf("\n");
    }
    std::printf("hidden states: %zu of (%ld x %ld)\n", in.hidden_states.size(),
                static_cast<long>(in.hidden_states[0].rows()),
                static_cast<long>(in.hidden_states[0].cols()));

    // The next token's top 5 log-probabilities, then a continuation with a
    // BF16 cache, streamed.
    kappa::GenerateOptions opt = lm.default_options();
    opt.max_new_tokens = 24;
    opt.logprobs = true;
    opt.top_logprobs = 5;
    opt.cache_format = kappa::cache::Format::kBF16;
    std::printf("\ncontinuation: In the beginning God created");
    const kappa::Generation g = lm.generate(ids, opt, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      return true;
    });
    std::printf("\n\nthe first new token's top 5:\n");
    for (const auto& [id, logprob] : g.logprobs.at(0).top)
      std::printf("  %-12s %8.3f\n", ("'" + lm.tokenizer().token(id) + "'").c_str(), logprob);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "first_model: %s\n", e.what());
    return 1;
  }
}
