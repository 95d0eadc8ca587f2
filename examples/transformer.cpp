// examples/transformer.cpp - the paper's Transformer section, step by step,
// on a small trained GPT-2 (4 layers, 4 heads, d = 128, trained on the King
// James Bible: tests/data/models/gpt2-trained) loaded from a Hugging Face
// model directory:
//
//   tokens -> X_0 = E[ids] + P -> per layer: H = X + Attn(LN_1(X)),
//   X' = H + FFN(LN_2(H)) -> logits = LN_f(X_L) E^T -> the next token.
//
// Usage: transformer [MODEL_DIR] [TEXT] [--svg PATH [--layer L] [--head H]]
//   (default: the trained test model and a verse of Genesis). --svg draws the attention weights
//   Z^-1 A of one head (default: layer 0, head 0) as a heatmap with the tokens on both axes.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "heatmap_svg.hpp"
#include "kappa/kappa.hpp"

namespace {
/// A token's bytes for the terminal: printable ASCII as is, others as \xNN
/// (a byte-level token may hold part of a UTF-8 character).
std::string shown(const std::string& bytes) {
  std::string out;
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
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
struct Args {
  std::string dir = std::string(KAPPA_SOURCE_DIR) + "/tests/data/models/gpt2-trained";
  std::string text = "And God said, Let there be light: and there was light.";
  std::optional<std::string> svg;
  kappa::Index layer = 0, head = 0;
};

kappa::Index parse_index(const std::string& opt, const std::string& v) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 0)
    throw std::invalid_argument(opt + " expects a non-negative integer, got '" + v + "'");
  return static_cast<kappa::Index>(x);
}

Args parse(int argc, char** argv) {
  Args a;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
      const std::string v = argv[++i];
      if (arg == "--svg")
        a.svg = v;
      else if (arg == "--layer")
        a.layer = parse_index(arg, v);
      else if (arg == "--head")
        a.head = parse_index(arg, v);
      else
        throw std::invalid_argument("unknown option " + arg);
    } else if (positional == 0) {
      a.dir = arg, ++positional;
    } else if (positional == 1) {
      a.text = arg, ++positional;
    } else {
      throw std::invalid_argument("unexpected argument '" + arg + "'");
    }
  }
  return a;
}

void check_head(const kappa::Gpt2<double>& gpt, kappa::Index layer, kappa::Index head) {
  if (layer >= gpt.n_layers())
    throw std::out_of_range("--layer " + std::to_string(layer) + ": the model has " +
                            std::to_string(gpt.n_layers()) + " layers");
  const auto& attention = gpt.layers()[static_cast<std::size_t>(layer)].attention();
  if (head >= attention.n_heads())
    throw std::out_of_range("--head " + std::to_string(head) + ": the layer has " +
                            std::to_string(attention.n_heads()) + " heads");
}

/// Head h of layer l as a heatmap: Z_h^-1 A_h for the layer's input X_l,
/// queries down, keys across, the causal mask's cells drawn grey.
heatmap::Figure head_figure(const kappa::Gpt2<double>& gpt, const kappa::RowMatrix<double>& x0,
                            const std::vector<std::string>& tokens, const std::string& text,
                            kappa::Index layer, kappa::Index head) {
  check_head(gpt, layer, head);
  const auto& l = gpt.layers()[static_cast<std::size_t>(layer)];
  kappa::RowMatrix<double> x = x0;  // X_l: the input of layer l
  for (kappa::Index i = 0; i < layer; ++i) x = gpt.layers()[static_cast<std::size_t>(i)].forward(x);
  l.norm_attention().apply(x);  // LN_1(X_l)
  const auto weights = l.attention().head_weights(x, x, kappa::CausalMask{});

  heatmap::Figure fig;
  fig.title = "GPT-2, layer " + std::to_string(layer) + ", head " + std::to_string(head) +
              ": Z\u207b\u00b9A for \u201c" + text + "\u201d";
  fig.x_label = "key j";
  fig.y_label = "query i";
  fig.masked_legend = "masked by the causal mask (j > i): weight 0";
  const auto n = static_cast<kappa::Index>(tokens.size());
  heatmap::Mask above(n, n);
  for (kappa::Index i = 0; i < n; ++i)
    for (kappa::Index j = 0; j < n; ++j) above(i, j) = j > i;
  fig.panels.push_back({"causal self-attention, " + std::to_string(l.attention().n_heads()) +
                            " heads, d_head = " + std::to_string(l.attention().config().d_head),
                        weights[static_cast<std::size_t>(head)], tokens, tokens,
                        heatmap::Scale{0, 1, heatmap::Colormap::kViridis, "attention weight"},
                        above});
  return fig;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    const std::string& dir = args.dir;
    const std::string& text = args.text;

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
    if (args.svg) check_head(gpt, args.layer, args.head);

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
    if (args.svg) {
      std::vector<std::string> tokens;  // the tokens' bytes; the heatmap shows them readably
      for (kappa::TokenId id : ids) tokens.push_back(tok.token(id));
      heatmap::write_svg(head_figure(gpt, x, tokens, text, args.layer, args.head), *args.svg);
      std::printf("layer %ld, head %ld: Z^-1 A as a heatmap: %s\n", static_cast<long>(args.layer),
                  static_cast<long>(args.head), args.svg->c_str());
    }

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
    std::printf(
        "(tests/data/models/gpt2-trained is trained; tests/data/models/gpt2 has random "
        "weights: its mechanics are real, its text is not)\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transformer: %s\n", e.what());
    return 1;
  }
}
