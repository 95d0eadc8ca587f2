// Must not compile: forward_cached with a score bias over a SlidingWindow
// cache, whose ring does not keep the keys in position order.
#include <kappa/attention/bias.hpp>
#include <kappa/cache/kv_cache.hpp>
#include <kappa/heads/multi_head_attention.hpp>

int main() {
  const kappa::MultiHeadAttention<float> attn({.d_in = 8, .n_heads = 2});
  kappa::KVCache<float, kappa::cache::SlidingWindow> cache({.n_kv_heads = 2, .d_head = 4}, {16});
  (void)attn.forward_cached(kappa::RowMatrix<float>(1, 8), cache, kappa::Alibi(2));
}
