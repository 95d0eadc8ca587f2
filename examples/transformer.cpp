// examples/transformer.cpp - the paper's Transformer section, step by step,
// on a tiny GPT-2 (2 layers, 4 heads, d = 32) loaded from a Hugging Face
// model directory:
//
//   tokens -> X_0 = E[ids] + P -> per layer: H = X + Attn(LN_1(X)),
//   X' = H + FFN(LN_2(H)) -> logits = LN_f(X_L) E^T -> the next token.
//
// Usage: transformer [MODEL_DIR] [TEXT]   (default: the tiny test model)
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "kappa/kappa.hpp"

namespace {
/// A token's bytes for the terminal: printable ASCII as is, others as \xNN
/// (a byte-level token may hold part of a UTF-8 character).
std::string shown(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

void print_matrix(const char* name, const kappa::RowMatrix<double>& m, int max_rows = 6,
                  int max_cols = 8) {
  std::printf("%s (%ld x %ld)%s\n", name, static_cast<long>(m.rows()), static_cast<long>(m.cols()),
              m.rows() > max_rows || m.cols() > max_cols ? ", top-left corner:" : ":");
  for (kappa::Index i = 0; i < std::min<kappa::Index>(m.rows(), max_rows); ++i) {
    std::printf("  ");
    for (kappa::Index j = 0; j < std::min<kappa::Index>(m.cols(), max_cols); ++j)
      std::printf("%8.4f ", m(i, j));
    std::printf("\n");
  }
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string dir =
        argc > 1 ? argv[1] : std::string(KAPPA_SOURCE_DIR) + "/tests/data/models/gpt2";
    const std::string text = argc > 2 ? argv[2] : "the cat sat on the";

    // 1. Tokenization: text -> indices into the vocabulary T.
    const auto tok = kappa::tokenize::HfTokenizer::from_directory(dir);
    const std::vector<kappa::TokenId> ids = tok.encode(text);
    std::printf("text: \"%s\"\ntokens (%zu):", text.c_str(), ids.size());
    for (kappa::TokenId id : ids) std::printf(" %d:'%s'", id, shown(tok.token(id)).c_str());
    std::printf("\n\n");

    // 2. The model: config.json + model.safetensors -> kappa::Gpt2<double>.
    const auto config = kappa::hf::Config::read(dir + "/config.json");
    const kappa::io::Checkpoint weights(dir);
    const kappa::Gpt2<double> gpt = kappa::hf::load_gpt2<double>(config, weights);
    std::printf("GPT-2: N_T = %ld, d = %ld, %ld layers, %zu weight bytes\n\n",
                static_cast<long>(gpt.vocab_size()), static_cast<long>(gpt.d_model()),
                static_cast<long>(gpt.n_layers()), gpt.weight_bytes());

    // 3. Embeddings: X_0 = E[ids] + P[0 .. N-1], one token per row.
    kappa::RowMatrix<double> x = gpt.embed(ids);
    print_matrix("X_0 = E[ids] + P", x);

    // 4. One layer's attention: A = exp(s Q K^T) masked causally, Z^-1 A.
    const auto& layer0 = gpt.layers()[0];
    kappa::RowMatrix<double> xn = x;
    layer0.norm_attention().apply(xn);  // LN_1(X_0): GPT-2 is pre-norm
    const auto weights0 = layer0.attention().head_weights(xn, xn, kappa::CausalMask{});
    print_matrix("\nlayer 0, head 0: Z^-1 A (causal: zeros above the diagonal, rows sum to 1)",
                 weights0[0], 8, 8);

    // 5. The residual stream: each layer adds its attention and feed-forward
    //    outputs to X; its size per token grows as the layers write into it.
    std::printf("\nresidual stream, norm of the last token's row:\n  X_0: %.4f\n",
                x.bottomRows(1).norm());
    for (kappa::Index l = 0; l < gpt.n_layers(); ++l) {
      x = gpt.layers()[static_cast<std::size_t>(l)].forward(x);
      std::printf("  X_%ld: %.4f\n", static_cast<long>(l + 1), x.bottomRows(1).norm());
    }

    // 6. Logits: LN_f(X_L) E^T (the output projection is tied to E).
    gpt.final_norm().apply(x);
    const kappa::RowMatrix<double> logits = gpt.project(x);
    const kappa::RowMatrix<double> check = gpt.forward(ids);
    std::printf("\nlogits (%ld x %ld); equal to forward(ids): max |diff| = %.2e\n",
                static_cast<long>(logits.rows()), static_cast<long>(logits.cols()),
                (logits - check).cwiseAbs().maxCoeff());

    // 7. The next token: row N-1 predicts token N. softmax -> probabilities.
    const Eigen::RowVectorXd last = logits.bottomRows(1);
    const Eigen::RowVectorXd p = (last.array() - last.maxCoeff()).exp().matrix();
    const Eigen::RowVectorXd prob = p / p.sum();
    std::vector<kappa::Index> order(static_cast<std::size_t>(prob.size()));
    for (kappa::Index i = 0; i < prob.size(); ++i) order[static_cast<std::size_t>(i)] = i;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](kappa::Index a, kappa::Index b) { return prob(a) > prob(b); });
    std::printf("most likely next tokens:\n");
    for (int r = 0; r < 5; ++r) {
      const auto id = static_cast<kappa::TokenId>(order[static_cast<std::size_t>(r)]);
      std::printf("  %5d '%s'  p = %.4f\n", id, shown(tok.token(id)).c_str(), prob(id));
    }
    std::printf("(random weights: the model is untrained, the mechanics are real)\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transformer: %s\n", e.what());
    return 1;
  }
}
