// demo: the paper's walk-through of one attention layer, on a tiny example.
//
//   sentence -> tokens -> indices -> X (rows of the embedding matrix E)
//   Q = X W^Q, K = X W^K, V = X W^V
//   A = f_kappa(s Q K^T), Z = diag(A 1), Y = Z^-1 A V
//
// first with the linear kernel f(x) = x (the paper's Figure 3), then with the
// scaled exponential (softmax), and once more with a causal mask. Everything
// is seeded, so the output is the same on every run.
//
// Usage: demo [--svg PATH]
// The three weight matrices Z^-1 A are also drawn side by side as a heatmap,
// the paper's Figure 3, written to PATH (default: figure3.svg in the current
// directory).
#include <kappa/kappa.hpp>

#include <exception>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "heatmap_svg.hpp"

namespace {

using kappa::Index;
using Matrix = kappa::RowMatrix<double>;

// A trivial tokenizer for the demo: split on spaces, one id per new word.
std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Entries are small integers in [-amplitude, amplitude]: easy to follow by hand.
Matrix seeded_matrix(Index rows, Index cols, unsigned seed, int amplitude) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> u(-amplitude, amplitude);
  Matrix m(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) m(i, j) = u(gen);
  return m;
}

void print(const std::string& title, const Matrix& m, const std::vector<std::string>& row_labels,
           const std::vector<std::string>& col_labels = {}) {
  std::cout << title << "\n";
  if (!col_labels.empty()) {
    std::cout << std::setw(10) << "";
    for (const auto& c : col_labels) std::cout << std::setw(9) << c.substr(0, 8);
    std::cout << "\n";
  }
  for (Index i = 0; i < m.rows(); ++i) {
    std::cout << std::setw(10) << row_labels[static_cast<std::size_t>(i)].substr(0, 9);
    for (Index j = 0; j < m.cols(); ++j)
      std::cout << std::setw(9) << std::fixed << std::setprecision(3) << m(i, j);
    std::cout << "\n";
  }
  std::cout << "\n";
}

// Prints A, Z, Z^-1 A and Y; returns the weights Z^-1 A.
template <class Kernel, class Mask>
Matrix attention_layer(const std::string& name, const Matrix& q, const Matrix& k, const Matrix& v,
                       const std::vector<std::string>& tokens, const Kernel& kernel,
                       const Mask& mask) {
  std::cout << "==== " << name << " ====\n\n";
  const auto d = kappa::attention_details(q, k, v, kernel, mask);
  print("A = f(s Q K^T)   (rows: queries, columns: keys)", d.scores, tokens, tokens);
  print("Z = diag(row sums of A)", Matrix(d.normalizer), tokens);
  print("Z^-1 A   (attention weights; each row sums to 1)", d.weights, tokens, tokens);
  print("Y = Z^-1 A V", d.output, tokens);
  return d.weights;
}

// The paper's Figure 3: the weights as heatmaps, tokens on both axes. The
// linear kernel's weights are signed (a diverging map centred on 0), the
// softmax weights lie in [0, 1] (one sequential map and colour bar for both).
heatmap::Figure figure3(const std::string& sentence, const std::vector<std::string>& tokens,
                        const Matrix& linear, const Matrix& softmax, const Matrix& causal) {
  heatmap::Figure fig;
  fig.title = "Attention weights Z\u207b\u00b9A for \u201c" + sentence + "\u201d";
  fig.x_label = "key j";
  fig.y_label = "query i";
  fig.masked_legend = "masked by the causal mask (j > i): weight 0";
  fig.panels.push_back({"linear kernel f(x) = x, s = 1", linear, tokens, tokens,
                        heatmap::Scale::symmetric(linear, "weight (signed)")});
  const heatmap::Scale unit{0, 1, heatmap::Colormap::kViridis, "attention weight"};
  fig.panels.push_back({"softmax, s = 1/\u221ad_QK", softmax, tokens, tokens, unit});
  const auto n = static_cast<Index>(tokens.size());
  heatmap::Mask above(n, n);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j) above(i, j) = j > i;
  fig.panels.push_back({"softmax, causal mask", causal, tokens, tokens, unit, above});
  return fig;
}

int run(const std::string& svg_path) {
  const std::string sentence = "the cat sat on the mat";
  const std::vector<std::string> tokens = split_words(sentence);

  // Vocabulary T and the index sequence (Figure 2, word-level).
  std::map<std::string, kappa::TokenId> vocab;
  std::vector<kappa::TokenId> ids;
  for (const auto& t : tokens) {
    const auto [it, inserted] = vocab.emplace(t, static_cast<kappa::TokenId>(vocab.size()));
    ids.push_back(it->second);
  }
  std::cout << "sentence: \"" << sentence << "\"\n"
            << "tokens:   ";
  for (std::size_t i = 0; i < tokens.size(); ++i) std::cout << tokens[i] << "(" << ids[i] << ") ";
  std::cout << "\nN_T = " << vocab.size() << " distinct tokens, N = " << tokens.size()
            << " tokens in the sequence\n\n";

  // Embedding matrix E (N_T x d) and X, whose row j is E_{i_j}.
  const Index d = 4, d_qk = 3, d_v = 2;
  const Matrix e = seeded_matrix(static_cast<Index>(vocab.size()), d, 7, 2);
  Matrix x(static_cast<Index>(ids.size()), d);
  for (std::size_t j = 0; j < ids.size(); ++j) x.row(static_cast<Index>(j)) = e.row(ids[j]);
  std::vector<std::string> vocab_labels(vocab.size());
  for (const auto& [w, id] : vocab) vocab_labels[static_cast<std::size_t>(id)] = w;
  print("E (N_T x d): one row per vocabulary entry", e, vocab_labels);
  print("X (N x d): row j is E_{i_j}; both 'the' rows are equal", x, tokens);

  // Projections: W^Q, W^K (d x d_QK) and W^V (d x d_V), entries in {-1/2, 0, 1/2}.
  const Matrix w_q = 0.5 * seeded_matrix(d, d_qk, 11, 1), w_k = 0.5 * seeded_matrix(d, d_qk, 12, 1),
               w_v = seeded_matrix(d, d_v, 13, 1);
  print("W^Q (d x d_QK)", w_q, {"x1", "x2", "x3", "x4"});
  const Matrix q = x * w_q, k = x * w_k, v = x * w_v;  // (N, d_QK), (N, d_QK), (N, d_V)
  print("Q = X W^Q", q, tokens);
  print("K = X W^K", k, tokens);
  print("V = X W^V", v, tokens);

  const Matrix linear = attention_layer("linear kernel f(x) = x (Figure 3), s = 1", q, k, v, tokens,
                                        kappa::kernels::Linear{}, kappa::NoMask{});
  std::cout << "(With the linear kernel the weights can be negative, and Z can be\n"
               " small: a row with Z = 0 would give a zero output row.)\n\n";
  const Matrix softmax = attention_layer("scaled exponential (softmax), s = 1/sqrt(d_QK)", q, k, v,
                                         tokens, kappa::kernels::Softmax{}, kappa::NoMask{});
  const Matrix causal =
      attention_layer("softmax with a causal mask (token j sees tokens 0..j)", q, k, v, tokens,
                      kappa::kernels::Softmax{}, kappa::CausalMask{});
  std::cout << "For Softmax kappa subtracts each row's maximum before exp: the A and Z\n"
               "printed are exp(-m_i) times the textbook ones, the weights are exact.\n";
  heatmap::write_svg(figure3(sentence, tokens, linear, softmax, causal), svg_path);
  std::cout << "Figure 3 (the three Z^-1 A as heatmaps): " << svg_path << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string svg_path = "figure3.svg";
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (opt == "--help" || opt == "-h") {
      std::cout << "usage: demo [--svg PATH]   (PATH default: figure3.svg)\n";
      return 0;
    }
    if (opt == "--svg" && i + 1 < argc) {
      svg_path = argv[++i];
    } else {
      std::cerr << "demo: unknown option or missing value: " << opt
                << "\nusage: demo [--svg PATH]\n";
      return 2;
    }
  }
  try {
    return run(svg_path);
  } catch (const std::exception& e) {
    std::cerr << "demo: " << e.what() << "\n";
    return 1;
  }
}
