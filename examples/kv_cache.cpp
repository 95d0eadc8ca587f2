// kv_cache: what a KV cache costs, and decoding through one.
//
// Part 1 prints the cache memory per token and for a 32k-token context of
// real model shapes, in their multi-head (H_kv = H), grouped-query (their own
// H_kv) and multi-query (H_kv = 1) forms: 2 x H_kv x d_head x layers x bytes.
//
// Part 2 builds a small random-weight decoder (embedding, a few grouped-query
// attention layers with residual connections, tied unembedding), prefills a
// prompt, then decodes greedily one token at a time through per-layer KV
// caches, printing tokens/s; and checks that the last decoded step equals a
// full causal pass over the whole sequence.
#include <kappa/cache/kv_cache.hpp>
#include <kappa/heads/multi_head_attention.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

struct ModelShape {
  const char* name;
  kappa::Index layers, n_heads, n_kv_heads, d_head;
};

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

void print_memory_table() {
  const ModelShape models[] = {
      {"LLaMA-3-70B", 80, 64, 8, 128},
      {"LLaMA-3-8B", 32, 32, 8, 128},
      {"Mistral-7B", 32, 32, 8, 128},
  };
  const kappa::Index context = 32768;
  const std::size_t bf16 = 2;
  std::printf("KV cache memory, bf16 (2 bytes per scalar), all layers\n");
  std::printf("%-12s %-4s %5s %10s %12s\n", "model", "form", "H_kv", "per token", "32k tokens");
  for (const ModelShape& m : models) {
    const std::pair<const char*, kappa::Index> forms[] = {
        {"MHA", m.n_heads}, {"GQA", m.n_kv_heads}, {"MQA", 1}};
    for (const auto& [form, h_kv] : forms) {
      const kappa::KVCacheConfig c{.n_kv_heads = h_kv, .d_head = m.d_head};
      const std::size_t per_token = kappa::KVCache<float>::bytes_per_token(c, m.layers, bf16);
      std::printf("%-12s %-4s %5ld %10s %12s\n", m.name, form, static_cast<long>(h_kv),
                  human(double(per_token)).c_str(), human(double(per_token) * context).c_str());
    }
  }
  // Mistral-7B v0.1 attends over a sliding window of 4096 tokens: a ring of
  // W tokens (cache::SlidingWindow) caps the cache whatever the context.
  const kappa::KVCacheConfig mistral{.n_kv_heads = 8, .d_head = 128};
  std::printf(
      "Mistral-7B with a 4096-token sliding window: %s for any context\n\n",
      human(double(kappa::KVCache<float>::bytes_per_token(mistral, 32, bf16)) * 4096).c_str());
}

using T = float;
using Matrix = kappa::RowMatrix<T>;
using Layer = kappa::GroupedQueryAttention<T>;
using Cache = kappa::KVCache<T>;

Matrix random_matrix(kappa::Index r, kappa::Index c, double scale, std::mt19937& gen) {
  std::normal_distribution<double> n(0.0, scale);
  Matrix m(r, c);
  for (kappa::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(n(gen));
  return m;
}

/// A toy decoder: x_0 = E[token]; x_{l+1} = x_l + Attn_l(x_l); logits = x_L E^T.
struct TinyModel {
  Matrix embedding;  // (vocab, d_model)
  std::vector<Layer> layers;

  /// Runs rows x (n x d_model) through every layer, with caches if given.
  Matrix forward(Matrix x, std::vector<Cache>* caches) const {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      if (caches) {
        x += layers[l].forward_cached(x, (*caches)[l]);
      } else {
        x += layers[l].forward(x, kappa::CausalMask{});
      }
    }
    return x;
  }
  [[nodiscard]] kappa::TokenId next_token(const Matrix& last_row) const {
    Eigen::Index best = 0;
    const kappa::RowVector<T> logits = last_row * embedding.transpose();  // (1, vocab)
    logits.maxCoeff(&best);
    return static_cast<kappa::TokenId>(best);
  }
  [[nodiscard]] Matrix embed(const std::vector<kappa::TokenId>& ids) const {
    Matrix x(static_cast<kappa::Index>(ids.size()), embedding.cols());
    for (std::size_t i = 0; i < ids.size(); ++i)
      x.row(static_cast<kappa::Index>(i)) = embedding.row(ids[i]);
    return x;
  }
};

}  // namespace

int main() {
  print_memory_table();

  const kappa::Index vocab = 512, d_model = 256, n_heads = 8, n_kv_heads = 2, d_head = 32;
  const int n_layers = 4, prompt_len = 256, new_tokens = 64;
  std::mt19937 gen(7);
  TinyModel model;
  model.embedding = random_matrix(vocab, d_model, 1.0, gen);
  const double w = 1.0 / std::sqrt(double(d_model));
  for (int l = 0; l < n_layers; ++l) {
    Layer layer({.d_in = d_model, .n_heads = n_heads, .d_head = d_head, .n_kv_heads = n_kv_heads});
    layer.set_weights(random_matrix(d_model, n_heads * d_head, w, gen),
                      random_matrix(d_model, n_kv_heads * d_head, w, gen),
                      random_matrix(d_model, n_kv_heads * d_head, w, gen),
                      random_matrix(n_heads * d_head, d_model, w, gen));
    model.layers.push_back(std::move(layer));
  }

  std::vector<kappa::TokenId> tokens(prompt_len);
  std::uniform_int_distribution<kappa::TokenId> pick(0, static_cast<kappa::TokenId>(vocab - 1));
  for (auto& t : tokens) t = pick(gen);

  std::vector<Cache> caches;
  for (int l = 0; l < n_layers; ++l) {
    caches.emplace_back(model.layers[0].kv_cache_config(), kappa::cache::Growable{512});
  }
  std::printf("toy decoder: %d layers, d_model %ld, %ld query heads, %ld kv heads, d_head %ld\n",
              n_layers, static_cast<long>(d_model), static_cast<long>(n_heads),
              static_cast<long>(n_kv_heads), static_cast<long>(d_head));

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Matrix h = model.forward(model.embed(tokens), &caches);  // prefill
  tokens.push_back(model.next_token(h.bottomRows(1)));
  const auto t1 = Clock::now();
  Matrix last;
  for (int i = 1; i < new_tokens; ++i) {  // decode
    last = model.forward(model.embed({tokens.back()}), &caches);
    tokens.push_back(model.next_token(last));
  }
  const auto t2 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("prefill: %d tokens in %.1f ms = %.0f tokens/s\n", prompt_len, 1e3 * prefill_s,
              prompt_len / prefill_s);
  std::printf("decode:  %d tokens in %.1f ms = %.0f tokens/s\n", new_tokens - 1, 1e3 * decode_s,
              (new_tokens - 1) / decode_s);
  std::size_t bytes = 0;
  for (const Cache& c : caches) bytes += c.bytes();
  std::printf("cache:   %ld tokens, %s live (%zu bytes per token over %d layers)\n",
              static_cast<long>(caches[0].length()), human(double(bytes)).c_str(),
              Cache::bytes_per_token(caches[0].config(), n_layers), n_layers);

  // The cache is an optimization, not an approximation: the full causal pass
  // over every token but the last gives the same last hidden state.
  tokens.pop_back();
  const Matrix full = model.forward(model.embed(tokens), nullptr);
  const double err =
      (full.bottomRows(1) - last).cwiseAbs().maxCoeff() / full.bottomRows(1).cwiseAbs().maxCoeff();
  std::printf("last decoded step vs full causal pass: max relative difference %.2e\n", err);
  if (!(err < 1e-4)) {
    std::printf("MISMATCH\n");
    return 1;
  }
  return 0;
}
