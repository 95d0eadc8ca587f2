// Must not compile: compress_to_latent takes layers without a positional
// policy inside attention only; RoPE keys do not factor through a shared
// latent cache (see kappa/heads/compress.hpp).
#include <kappa/heads/compress.hpp>

int main() {
  kappa::MultiHeadAttention<float, kappa::kernels::Softmax, kappa::MultiHead, kappa::Rope<float>>
      rope_layer({.d_in = 16, .n_heads = 2});
  (void)kappa::compress_to_latent(rope_layer, 4);
  return 0;
}
