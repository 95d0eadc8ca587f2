// Must not compile: Nystrom attention with a causal mask (it compresses the
// keys once for every query).
#include <kappa/attention/nystrom.hpp>

int main() {
  const kappa::RowMatrix<float> x(4, 4);
  (void)kappa::approx::approximate_attention(kappa::approx::Nystrom(2), x, x, x,
                                             kappa::CausalMask{});
}
