// latent_attention: how much cache multi-head latent attention saves, and a
// small MLA layer decoding through its latent cache on both paths.
//
//   1. KV-cache elements per token for MHA (2 n_h d_h l), GQA (2 n_g d_h l),
//      MQA (2 d_h l) and MLA ((d_c + d_R) l) for DeepSeek-V2's published
//      configuration, with the ratio to MHA and the bytes of a 32k context.
//   2. A random-weight DeepSeek-V2-Lite-shaped layer (d 2048, 16 heads,
//      d_c 512, d_R 64): prefill 256 tokens, decode 32, naive and absorbed,
//      printing tokens/s and checking that both paths agree.
#include <kappa/kappa.hpp>

#include <chrono>
#include <cstdio>
#include <random>

namespace {

using kappa::Index;
using Matrix = kappa::RowMatrix<float>;

void print_table() {
  // DeepSeek-V2 (arXiv 2405.04434): 60 layers, 128 heads, d_h 128, d_c 512,
  // d_R 64, query rank 1536, d_model 5120. GQA shown with 8 groups.
  const Index layers = 60, n_h = 128, n_g = 8, d_h = 128, d_c = 512, d_r = 64;
  const auto e = kappa::cache_elements_per_token(n_h, n_g, d_h, d_c, d_r, layers);
  std::printf("KV cache per token, DeepSeek-V2 (60 layers, 128 heads, d_h 128, d_c 512, d_R 64)\n");
  std::printf("%-22s %14s %10s %16s\n", "form", "elements", "vs MHA", "32k ctx, bf16");
  const auto row = [&](const char* name, Index elems) {
    std::printf("%-22s %14lld %9.2fx %13.2f GiB\n", name, static_cast<long long>(elems),
                static_cast<double>(e.mha) / static_cast<double>(elems),
                static_cast<double>(elems) * 2.0 * 32768 / (1024.0 * 1024 * 1024));
  };
  row("MHA  2 n_h d_h l", e.mha);
  row("GQA  2 n_g d_h l (n_g=8)", e.gqa);
  row("MQA  2 d_h l", e.mqa);
  row("MLA  (d_c + d_R) l", e.mla);
  std::printf("MLA caches as much as GQA with %.2f groups.\n\n",
              static_cast<double>(d_c + d_r) / (2.0 * d_h));
}

template <class Path>
Matrix run(const char* name, const kappa::LatentConfig& c, const kappa::LatentWeights<float>& w,
           const Matrix& x, Index prefill) {
  kappa::LatentAttention<float, Path> mla(c);
  mla.set_weights(w);
  kappa::LatentCache<float> cache(c);
  Matrix y(x.rows(), c.d_model);
  const auto t0 = std::chrono::steady_clock::now();
  y.topRows(prefill) = mla.forward_cached(x.topRows(prefill), cache);
  const auto t1 = std::chrono::steady_clock::now();
  for (Index t = prefill; t < x.rows(); ++t) y.row(t) = mla.forward_cached(x.row(t), cache);
  const auto t2 = std::chrono::steady_clock::now();
  const double pre = std::chrono::duration<double>(t1 - t0).count();
  const double dec = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "%-9s prefill %lld tokens: %8.0f tokens/s   decode %lld tokens: %7.1f tokens/s   cache %.2f "
      "MB\n",
      name, static_cast<long long>(prefill), double(prefill) / pre,
      static_cast<long long>(x.rows() - prefill), double(x.rows() - prefill) / dec,
      double(cache.bytes()) / 1e6);
  return y;
}

}  // namespace

int main() {
  print_table();

  const kappa::LatentConfig c{
      .d_model = 2048, .n_heads = 16, .d_head = 128, .d_rope = 64, .d_v = 128, .d_latent = 512};
  std::mt19937 gen(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const auto rnd = [&](Index r, Index k) {
    return Matrix(Matrix::NullaryExpr(r, k, [&] { return nd(gen); }));
  };
  kappa::LatentWeights<float> w;
  w.w_uq = rnd(c.d_model, c.n_heads * c.d_head);
  w.w_qr = rnd(c.d_model, c.n_heads * c.d_rope);
  w.w_dkv = rnd(c.d_model, c.d_latent);
  w.kv_norm = kappa::RowVector<float>::Ones(c.d_latent);
  w.w_uk = rnd(c.d_latent, c.n_heads * c.d_head);
  w.w_uv = rnd(c.d_latent, c.n_heads * c.d_head);
  w.w_kr = rnd(c.d_model, c.d_rope);
  w.w_o = rnd(c.n_heads * c.d_head, c.d_model);
  const Matrix x = rnd(288, c.d_model) * 50.0f;

  std::printf("DeepSeek-V2-Lite-shaped layer, random weights, float, %d thread(s)\n",
              kappa::num_threads());
  const Matrix y_naive = run<kappa::NaiveLatent>("naive", c, w, x, 256);
  const Matrix y_abs = run<kappa::AbsorbedLatent>("absorbed", c, w, x, 256);
  const double rel = (y_naive - y_abs).norm() / y_naive.norm();
  std::printf("naive vs absorbed: relative difference %.2e\n", rel);
  return rel < 1e-4 ? 0 : 1;
}
