// compress_attention: compress a GPT-2-small-shaped attention layer (d 768,
// 12 heads x 64) into latent form at several ranks d_c, and report the
// relative error of its output against the original layer, for the
// randomized SVD, the exact truncated SVD and the data-aware variant, with
// the cache bytes per token before and after.
//
// The layer is SYNTHETIC: no trained checkpoint is available offline. Its
// stacked key/value projection [W^K W^V] (768 x 1536) and W^Q have singular
// values decaying as a power law, sigma_j ~ (j + 1)^-0.6 (trained transformer
// weights have heavy-tailed, roughly power-law spectra; the exponent is our
// assumption), between random orthonormal bases from a seed. The inputs are
// the tokens of real English text (this repository's README.md, split into
// words) looked up in a seeded embedding table whose coordinates are scaled
// by (j + 1)^-0.5 (real activations are anisotropic), so the token statistics
// are real and the vectors are not.
//
//   compress_attention [--tokens N] [--ranks 64,128,...] [--csv out.csv]
#include <kappa/kappa.hpp>

#include <Eigen/QR>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kappa::Index;
using Matrix = kappa::RowMatrix<float>;
using Gpt2Attention = kappa::MultiHeadAttention<float>;

constexpr Index kDModel = 768, kHeads = 12, kDHead = 64;

// Orthonormal columns (rows x cols) from the QR of a seeded Gaussian matrix.
Matrix orthonormal(Index rows, Index cols, std::uint64_t seed) {
  using ColMatrix = Eigen::MatrixXf;
  const ColMatrix g = kappa::seeded_normal_matrix<float>(rows, cols, seed, 1.0);
  const Eigen::HouseholderQR<ColMatrix> qr(g);
  return ColMatrix(qr.householderQ() * ColMatrix::Identity(rows, cols));
}

// U diag(sigma) V^T (rows x cols), sigma_j = c (j + 1)^-alpha, scaled so that
// the mean squared column norm is `col_norm2`.
Matrix power_law_matrix(Index rows, Index cols, double alpha, double col_norm2,
                        std::uint64_t seed) {
  const Index k = std::min(rows, cols);
  kappa::Vector<float> sigma(k);
  for (Index j = 0; j < k; ++j)
    sigma(j) = static_cast<float>(std::pow(static_cast<double>(j + 1), -alpha));
  const double scale = std::sqrt(col_norm2 * static_cast<double>(cols)) / sigma.norm();
  sigma *= static_cast<float>(scale);
  const Matrix u = orthonormal(rows, k, seed), v = orthonormal(cols, k, seed + 1);
  return u * sigma.asDiagonal() * v.transpose();
}

double rel_error(const Matrix& y, const Matrix& ref) {
  return static_cast<double>((y - ref).norm() / ref.norm());
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<Index> parse_ranks(const std::string& s) {
  std::vector<Index> r;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) r.push_back(std::stol(item));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Index n_tokens = 512;
  std::vector<Index> ranks = {64, 128, 256, 384, 512, 768};
  std::string csv_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") {
      n_tokens = std::stol(v);
    } else if (a == "--ranks") {
      ranks = parse_ranks(v);
    } else if (a == "--csv") {
      csv_path = v;
    } else {
      std::fprintf(stderr, "usage: compress_attention [--tokens N] [--ranks 64,128] [--csv f]\n");
      return 2;
    }
  }

  // Real text: the words of README.md; the first n_tokens are the inputs, the
  // next n_tokens the calibration set of the data-aware variant.
  std::ifstream readme(std::string(KAPPA_SOURCE_DIR) + "/README.md");
  const std::string text((std::istreambuf_iterator<char>(readme)),
                         std::istreambuf_iterator<char>());
  const kappa::tokenize::WordTokenizer words(text, {});
  const std::vector<kappa::TokenId> ids = words.encode(text);
  if (static_cast<Index>(ids.size()) < 2 * n_tokens) {
    std::fprintf(stderr, "README.md has %zu words, fewer than 2 x %lld\n", ids.size(),
                 static_cast<long long>(n_tokens));
    return 1;
  }
  // Number the words by first appearance among the 2 n_tokens used, so the
  // inputs depend on those words only (not on the rest of README.md).
  std::map<kappa::TokenId, kappa::TokenId> first_seen;
  std::vector<kappa::TokenId> used(ids.begin(), ids.begin() + 2 * n_tokens);
  for (kappa::TokenId& id : used)
    id = first_seen.emplace(id, static_cast<kappa::TokenId>(first_seen.size())).first->second;
  const auto vocab = static_cast<kappa::TokenId>(first_seen.size());
  const auto emb = kappa::Embedding<float>::random(vocab, kDModel, 2026, 1.0);
  kappa::RowVector<float> aniso(kDModel);
  for (Index j = 0; j < kDModel; ++j)
    aniso(j) = static_cast<float>(std::pow(static_cast<double>(j + 1), -0.5));
  aniso *= static_cast<float>(std::sqrt(static_cast<double>(kDModel)) / aniso.norm());
  const Matrix all = emb.lookup(std::span<const kappa::TokenId>(used)) * aniso.asDiagonal();
  const Matrix x = all.topRows(n_tokens), x_cal = all.bottomRows(n_tokens);

  // The synthetic GPT-2-small-shaped layer.
  Gpt2Attention mha({.d_in = kDModel, .n_heads = kHeads, .d_head = kDHead});
  mha.init_random(11);  // W^O (LeCun uniform); W^Q, W^K, W^V replaced below
  const Matrix w_q = power_law_matrix(kDModel, kHeads * kDHead, 0.6, 2.0, 21);
  const Matrix w_kv = power_law_matrix(kDModel, 2 * kHeads * kDHead, 0.6, 2.0, 31);
  mha.set_weights(w_q, w_kv.leftCols(kHeads * kDHead), w_kv.rightCols(kHeads * kDHead), mha.w_o());
  const Matrix y = mha.forward(x, kappa::CausalMask{});

  std::printf(
      "Synthetic GPT-2-small-shaped layer (d 768, 12 heads x 64, sigma_j ~ (j+1)^-0.6), inputs: "
      "%lld words of README.md\n",
      static_cast<long long>(n_tokens));
  std::printf("%6s %10s %10s | %12s %12s %12s | %9s %9s\n", "d_c", "B/tok", "saving", "err exact",
              "err rand", "err data", "t exact", "t rand");
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "d_latent,bytes_per_token_before,bytes_per_token_after,weight_error_exact,"
           "output_error_exact,output_error_randomized,output_error_data_aware,"
           "seconds_exact,seconds_randomized\n";
  }
  for (const Index dc : ranks) {
    const kappa::RandomizedTruncatedSvd rand{
        {.oversampling = 10, .power_iterations = 2, .seed = 1}};
    std::optional<kappa::LatentCompression<float, kappa::AbsorbedLatent>> exact, randomized, data;
    const double t_exact = seconds(
        [&] { exact.emplace(kappa::compress_to_latent(mha, dc, kappa::ExactTruncatedSvd{})); });
    const double t_rand =
        seconds([&] { randomized.emplace(kappa::compress_to_latent(mha, dc, rand)); });
    // The data-aware rank is at most the number of calibration tokens.
    if (dc <= x_cal.rows()) data.emplace(kappa::compress_to_latent_on(mha, dc, x_cal, rand));
    const double e_exact = rel_error(exact->layer.forward(x), y);
    const double e_rand = rel_error(randomized->layer.forward(x), y);
    // "-": d_c above the number of calibration tokens (no data-aware factor).
    const double e_data = data ? rel_error(data->layer.forward(x), y) : -1.0;
    char data_cell[32] = "-";
    if (e_data >= 0) std::snprintf(data_cell, sizeof data_cell, "%.3e", e_data);
    std::printf("%6lld %4zu->%-5zu %9.2fx | %12.3e %12.3e %12s | %8.2fs %8.2fs\n",
                static_cast<long long>(dc), exact->bytes_per_token_before,
                exact->bytes_per_token_after,
                static_cast<double>(exact->bytes_per_token_before) /
                    static_cast<double>(exact->bytes_per_token_after),
                e_exact, e_rand, data_cell, t_exact, t_rand);
    if (csv.is_open()) {
      csv << dc << ',' << exact->bytes_per_token_before << ',' << exact->bytes_per_token_after
          << ',' << exact->factor_error << ',' << e_exact << ',' << e_rand << ',';
      if (e_data >= 0) csv << e_data;  // empty: no data-aware factor at this d_c
      csv << ',' << t_exact << ',' << t_rand << '\n';
    }
  }
  std::printf("errors: ||Y_latent - Y||_F / ||Y||_F over the causal output of the %lld tokens\n",
              static_cast<long long>(n_tokens));
  return 0;
}
