// Must not compile: decoding through a KV cache with an attention
// approximation in the Kernel slot.
#include <kappa/attention/nystrom.hpp>
#include <kappa/heads/multi_head_attention.hpp>

int main() {
  using Attn = kappa::MultiHeadAttention<float, kappa::approx::Nystrom>;
  const Attn attn({.d_in = 8, .n_heads = 2}, kappa::approx::Nystrom(2));
  kappa::KVCache<float> cache({.n_kv_heads = 2, .d_head = 4});
  (void)attn.forward_cached(kappa::RowMatrix<float>(1, 8), cache);
}
