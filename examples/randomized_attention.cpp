// randomized_attention: error against cost of randomized approximations of
// softmax attention on a real text, one line per method.
//
//   1.-2. Q, K, V of a trained model (default): the first N tokens (default
//      512, the model's context) of a held-out text through the layers of a
//      GPT-2 directory (--model, default tests/data/models/gpt2-trained: d 128,
//      4 heads of 32, trained on the King James Bible; its text default is
//      reference/revelation.txt, the book held out of training) up to layer L
//      (--layer, default 1), then LN_1 and the layer's own projections:
//      Q = LN_1(X_L) W^Q + b^Q, and so K, V. --head H keeps one head only.
//      No mask (bidirectional), as in the seeded case.
//   or, with --seeded (the previous input): the first N tokens (default
//      2048) of tests/data/tokenize/bench/english.txt (the GNU GPL v3)
//      encoded with GPT-2's byte-level BPE (the vocabulary files unpacked into
//      the build tree, cmake/kappa-vocab.cmake; --word uses kappa's word
//      tokenizer over the same text instead) through a GPT-2-small-shaped
//      attention layer: d_model 768, 12 heads of width 64, token embeddings
//      N(0, 1) drawn per token id from a seed, plus sinusoidal positions,
//      layer-normalized, and seeded W^Q, W^K, W^V (U(-a, a], a = sqrt(3/768):
//      variance 1/768): a random layer on real token statistics.
//   3. For each method and each size m (features, landmarks, sketch rows...)
//      kappa::compare_to_exact measures the relative Frobenius error of Y
//      (all heads) and the median time against exact softmax attention (the
//      same run of the exact side for all). Writes a CSV and an SVG picture:
//      relative error against time, log-log, one line per method, the exact
//      path as the reference point, and a dashed line at 1 % error.
//
// The methods are a list (`methods()` below): adding one is one line.
//
//   randomized_attention [--model DIR] [--layer 1] [--head H] [--n 512]
//                        [--csv out.csv] [--svg out.svg] [--text FILE] [--runs 3]
//   randomized_attention --seeded [--n 2048] [--vocab DIR] [--word] ...
#include <kappa/kappa.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "line_plot_svg.hpp"

namespace {

using kappa::Index;
using T = float;
using Matrix = kappa::RowMatrix<T>;

constexpr Index kDModel = 768, kHeads = 12, kDHead = 64;  // the seeded layer

/// Applies a single-head method to each of the heads (column blocks of width
/// d_head = Q's columns / H) of Q, K, V and returns [Y_1 ... Y_H].
template <class F>
Matrix per_head(const Matrix& q, const Matrix& k, const Matrix& v, Index heads, F&& f) {
  const Index d_head = q.cols() / heads, d_v = v.cols() / heads;
  Matrix y(q.rows(), v.cols());
  for (Index h = 0; h < heads; ++h) {
    y.middleCols(h * d_v, d_v) = f(q.middleCols(h * d_head, d_head),
                                   k.middleCols(h * d_head, d_head), v.middleCols(h * d_v, d_v));
  }
  return y;
}

using Approx = std::function<Matrix(const Matrix&, const Matrix&, const Matrix&)>;

/// A method: its name, the sizes m to sweep and how to build it for one m.
struct Method {
  std::string name;
  std::vector<Index> sizes;
  std::function<Approx(Index m, Index heads, Index d_head)> make;
};

/// A random-feature kernel on the linear-time path, per head.
template <class Kernel>
Method random_features(std::string name, kappa::kernels::Projection projection) {
  return {std::move(name),
          {16, 32, 64, 128, 256, 512, 1024},
          [projection](Index m, Index heads, Index d_head) -> Approx {
            const Kernel kernel(d_head, m, /*seed=*/1234, {.projection = projection});
            return [kernel, heads](const Matrix& q, const Matrix& k, const Matrix& v) {
              return per_head(q, k, v, heads, [&](const auto& qh, const auto& kh, const auto& vh) {
                return kappa::linear_attention(qh, kh, vh, kernel);
              });
            };
          }};
}

/// A whole-attention approximation policy (Nystrom, sketch, sampling) per head.
template <class Policy, class Make>
Method whole(std::string name, std::vector<Index> sizes, Make make_policy) {
  return {std::move(name), std::move(sizes), [make_policy](Index m, Index heads, Index) -> Approx {
            const Policy policy = make_policy(m);
            return [policy, heads](const Matrix& q, const Matrix& k, const Matrix& v) {
              return per_head(q, k, v, heads, [&](const auto& qh, const auto& kh, const auto& vh) {
                return kappa::approx::approximate_attention(policy, qh, kh, vh);
              });
            };
          }};
}

/// The methods of the sweep: one line each.
std::vector<Method> methods() {
  using kappa::kernels::PositiveRandomFeatures;
  using kappa::kernels::Projection;
  using kappa::kernels::TrigonometricRandomFeatures;
  namespace ap = kappa::approx;
  const std::vector<Index> sizes{16, 32, 64, 128, 256, 512, 1024};
  return {
      whole<ap::Nystrom>(
          "Nystrom, segment means", sizes,
          [](Index m) { return ap::Nystrom(m, 1234, ap::Landmarks::kSegmentMeans); }),
      whole<ap::SequenceSketch>(
          "sketch (Linformer), Gaussian", sizes,
          [](Index m) { return ap::SequenceSketch(m, 1234, ap::SketchKind::kGaussian); }),
      whole<ap::SampledAttention>(
          "sampled, norm bound", {64, 128, 256, 512, 1024, 2048},
          [](Index m) { return ap::SampledAttention(m, 1234, ap::Proposal::kNormBound); }),
      random_features<PositiveRandomFeatures>("positive RF, orthogonal", Projection::kOrthogonal),
      random_features<PositiveRandomFeatures>("positive RF, iid", Projection::kIid),
      random_features<TrigonometricRandomFeatures>("trigonometric RF, orthogonal",
                                                   Projection::kOrthogonal),
  };
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("randomized_attention: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// X (N x 768): seeded per-id embeddings + sinusoidal positions, layer-normalized.
Matrix embed(const std::vector<kappa::TokenId>& ids) {
  const Index n = static_cast<Index>(ids.size());
  Matrix x(n, kDModel);
  for (Index i = 0; i < n; ++i) {
    const auto id = static_cast<std::uint64_t>(ids[static_cast<std::size_t>(i)]);
    x.row(i) = kappa::seeded_normal_matrix<T>(1, kDModel, 0x5EED0000ull + id, 1.0);
  }
  x += kappa::SinusoidalPositions<T>(kDModel).encode(n);
  for (Index i = 0; i < n; ++i) {
    const T mean = x.row(i).mean();
    x.row(i).array() -= mean;
    const T sd = std::sqrt(x.row(i).squaredNorm() / static_cast<T>(kDModel) + T(1e-5));
    x.row(i) /= sd;
  }
  return x;
}

/// Q, K, V (N x H d_head each) of layer `layer` of a GPT-2 directory on `ids`:
/// X_layer from the trained layers below it, then LN_1 and the layer's
/// projections with their biases. head >= 0 keeps that head's columns only.
struct Qkv {
  Matrix q, k, v;
  Index heads;
};
Qkv model_qkv(const std::string& dir, const std::vector<kappa::TokenId>& ids, Index layer,
              Index head) {
  const auto config = kappa::hf::Config::read(dir + "/config.json");
  const kappa::io::Checkpoint weights(dir);
  const kappa::Gpt2<T> gpt = kappa::hf::load_gpt2<T>(config, weights);
  if (layer >= gpt.n_layers())
    throw std::invalid_argument("randomized_attention: --layer " + std::to_string(layer) +
                                ": the model has " + std::to_string(gpt.n_layers()) + " layers");
  Matrix x = gpt.embed(ids);  // X_0 = E[ids] + P
  for (Index l = 0; l < layer; ++l) x = gpt.layers()[static_cast<std::size_t>(l)].forward(x);
  const auto& l = gpt.layers()[static_cast<std::size_t>(layer)];
  l.norm_attention().apply(x);  // LN_1(X_layer)
  const auto& a = l.attention();
  Qkv r{(x * a.w_q()).rowwise() + a.b_q(), (x * a.w_k()).rowwise() + a.b_k(),
        (x * a.w_v()).rowwise() + a.b_v(), a.n_heads()};  // (N, H d_head)
  if (head >= 0) {
    if (head >= r.heads)
      throw std::invalid_argument("randomized_attention: --head " + std::to_string(head) +
                                  ": the layer has " + std::to_string(r.heads) + " heads");
    const Index dh = r.q.cols() / r.heads, dv = r.v.cols() / r.heads;
    r.q = r.q.middleCols(head * dh, dh).eval();
    r.k = r.k.middleCols(head * dh, dh).eval();
    r.v = r.v.middleCols(head * dv, dv).eval();
    r.heads = 1;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  Index n = -1;  // default: 512 (the trained model's context), 2048 with --seeded
  int runs = 3;
  bool word = false, seeded = false;
  Index layer = 1, head = -1;
  std::string csv_path = "randomized_attention.csv", svg_path = "randomized_attention.svg";
  std::string model_dir = std::string(KAPPA_SOURCE_DIR) + "/tests/data/models/gpt2-trained";
  std::string text_path;
  std::string vocab_dir = KAPPA_VOCAB_DIR;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        throw std::invalid_argument("randomized_attention: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--n") {
      n = std::stoll(value());
    } else if (a == "--runs") {
      runs = std::stoi(value());
    } else if (a == "--csv") {
      csv_path = value();
    } else if (a == "--svg") {
      svg_path = value();
    } else if (a == "--text") {
      text_path = value();
    } else if (a == "--vocab") {
      vocab_dir = value();
    } else if (a == "--word") {
      word = true;
    } else if (a == "--seeded") {
      seeded = true;
    } else if (a == "--model") {
      model_dir = value();
    } else if (a == "--layer") {
      layer = std::stoll(value());
    } else if (a == "--head") {
      head = std::stoll(value());
    } else {
      throw std::invalid_argument("randomized_attention: unknown argument " + a);
    }
  }
  if (n < 0) n = seeded ? 2048 : 512;
  kappa::require_positive("randomized_attention: --n", n);
  if (text_path.empty())
    text_path = seeded ? std::string(KAPPA_SOURCE_DIR) + "/tests/data/tokenize/bench/english.txt"
                       : model_dir + "/reference/revelation.txt";

  // 1. Tokens of a real text.
  const std::string text = read_text(text_path);
  std::vector<kappa::TokenId> ids;
  if (!seeded) {
    ids = kappa::tokenize::HfTokenizer::from_directory(model_dir).encode(text);
  } else if (word) {
    ids =
        kappa::tokenize::WordTokenizer(text, kappa::tokenize::WordVocabularyOptions{}).encode(text);
  } else {
    const auto bpe = kappa::tokenize::Gpt2Tokenizer::from_gpt2_files(
        vocab_dir + "/gpt2/encoder.json", vocab_dir + "/gpt2/vocab.bpe");
    ids = bpe.encode(text);
  }
  if (static_cast<Index>(ids.size()) < n)
    throw std::invalid_argument("randomized_attention: the text has " + std::to_string(ids.size()) +
                                " tokens, fewer than --n " + std::to_string(n));
  ids.resize(static_cast<std::size_t>(n));

  // 2. Q, K, V: a trained model's layer, or a GPT-2-small-shaped layer with
  //    seeded weights.
  Matrix q, k, v;
  Index heads = kHeads;
  std::string source;
  if (seeded) {
    const Matrix x = embed(ids);
    kappa::SeededNormal g(2026);
    const Matrix w_q = kappa::seeded_projection<T>(kDModel, kDModel, g);
    const Matrix w_k = kappa::seeded_projection<T>(kDModel, kDModel, g);
    const Matrix w_v = kappa::seeded_projection<T>(kDModel, kDModel, g);
    q = x * w_q, k = x * w_k, v = x * w_v;
    source =
        std::string(word ? "word tokens" : "GPT-2 tokens") + ", seeded GPT-2-small-shaped layer";
  } else {
    Qkv r = model_qkv(model_dir, ids, layer, head);
    q = std::move(r.q), k = std::move(r.k), v = std::move(r.v);
    heads = r.heads;
    source = "tokens, trained " +
             std::filesystem::path(model_dir).lexically_normal().filename().string() + ", layer " +
             std::to_string(layer) + (head >= 0 ? ", head " + std::to_string(head) : "");
  }
  const Index d_head = q.cols() / heads;
  std::printf("randomized_attention: N = %lld %s, %lld heads of %lld, %d threads\n",
              static_cast<long long>(n), source.c_str(), static_cast<long long>(heads),
              static_cast<long long>(d_head), kappa::num_threads());

  // 3. The exact side once, then each method's sweep against it.
  const kappa::CompareOptions opt{.runs = runs, .weights = false};
  const auto exact = [heads](const Matrix& q_, const Matrix& k_, const Matrix& v_) {
    return per_head(q_, k_, v_, heads, [](const auto& qh, const auto& kh, const auto& vh) {
      return kappa::attention(qh, kh, vh);
    });
  };
  const kappa::ExactRun<T> reference = kappa::run_exact(q, k, v, exact, opt);
  std::printf("exact softmax attention: %.4f s, peak %.1f MB\n", reference.seconds,
              reference.peak_bytes ? double(*reference.peak_bytes) / 1e6 : -1.0);

  std::ofstream csv(csv_path);
  if (!csv) throw std::runtime_error("randomized_attention: cannot write " + csv_path);
  csv << "method,m,relative_error_y,seconds,exact_seconds,speedup,peak_bytes,exact_peak_bytes\n";
  csv << "exact softmax,0,0," << reference.seconds << "," << reference.seconds << ",1,"
      << reference.peak_bytes.value_or(-1) << "," << reference.peak_bytes.value_or(-1) << "\n";
  lineplot::Plot plot;
  plot.title = "Randomized attention, N = " + std::to_string(n) + " " + source + ", " +
               std::to_string(heads) + " heads x " + std::to_string(d_head);
  plot.x_label = "time per call (s, median)";
  plot.y_label = "relative error of Y, ||Y~ - Y||_F / ||Y||_F";
  std::printf("%-30s %6s %12s %10s %9s %10s\n", "method", "m", "rel. error", "time (s)", "speedup",
              "peak MB");
  for (const Method& method : methods()) {
    lineplot::Series series{method.name, {}, {}};
    Index best_m = -1;
    double best_speedup = 0;
    for (const Index m : method.sizes) {
      if (m > n)
        continue;  // (a sketch or landmark set as long as the sequence does not compress it)
      const auto r =
          kappa::compare_to_exact(q, k, v, method.make(m, heads, d_head), reference, opt);
      std::printf("%-30s %6lld %12.3e %10.4f %8.2fx %10.1f\n", method.name.c_str(),
                  static_cast<long long>(m), r.output_error, r.approx_seconds, r.speedup(),
                  r.approx_peak_bytes ? double(*r.approx_peak_bytes) / 1e6 : -1.0);
      csv << '"' << method.name << "\"," << m << "," << r.output_error << "," << r.approx_seconds
          << "," << r.exact_seconds << "," << r.speedup() << "," << r.approx_peak_bytes.value_or(-1)
          << "," << r.exact_peak_bytes.value_or(-1) << "\n";
      series.x.push_back(r.approx_seconds);
      series.y.push_back(r.output_error);
      if (r.output_error <= 0.01 && r.speedup() > best_speedup) {
        best_m = m;
        best_speedup = r.speedup();
      }
    }
    if (best_m > 0) {
      std::printf("  -> reaches 1 %% error at m = %lld, %.2fx the speed of exact attention\n",
                  static_cast<long long>(best_m), best_speedup);
    } else {
      std::printf("  -> does not reach 1 %% error for the sizes swept\n");
    }
    plot.series.push_back(std::move(series));
  }
  plot.references.push_back({"exact softmax (error 0, drawn at 1e-4)", reference.seconds, 1e-4});
  plot.y_lines.push_back({"1 % error", 0.01});
  lineplot::write_svg(plot, svg_path);
  std::printf("wrote %s and %s\n", csv_path.c_str(), svg_path.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
