// A downstream program: one softmax attention call through the installed
// package. Exits non-zero if the weights do not behave, if the headers'
// version is not the one the build system found, or (built against
// kappa::openmp) if kappa::set_num_threads has no effect.
//
// Built with CONSUMER_UMBRELLA (the find_package app) it includes the
// umbrella header, so every installed header is compiled from the prefix
// once; the other builds include only what they use. (cmake/test-consumer.cmake
// builds them at -O0: they check the packaging.)
#ifdef CONSUMER_UMBRELLA
#include <kappa/kappa.hpp>
#else
#include <kappa/attention/attention.hpp>
#include <kappa/core/threading.hpp>
#include <kappa/version.hpp>
#endif

#include <cmath>
#include <cstdio>
#include <string_view>

int main() {
  kappa::RowMatrix<double> q(2, 2), k(2, 2), v(2, 1);
  q << 1, 0, 0, 1;
  k << 1, 0, 0, 1;
  v << 1, 3;
  const kappa::RowMatrix<double> y =
      kappa::attention(q, k, v, kappa::kernels::Softmax{.scale = 1.0});
  // Row 0: weights softmax(1, 0) on values (1, 3).
  const double w = std::exp(1.0) / (std::exp(1.0) + 1.0);
  const double expect = w * 1 + (1 - w) * 3;
  std::printf("kappa %s: y(0) = %.12f (expected %.12f)\n", KAPPA_VERSION_STRING, y(0, 0), expect);
#ifdef CONSUMER_EXPECTED_VERSION
  if (std::string_view(CONSUMER_EXPECTED_VERSION) != kappa::version_string) {
    std::printf("version mismatch: build system %s, headers %s\n", CONSUMER_EXPECTED_VERSION,
                KAPPA_VERSION_STRING);
    return 1;
  }
#endif
#ifdef CONSUMER_EXPECT_OPENMP
  // Linked with kappa::openmp: the thread count is the user's to set.
  if (!kappa::has_openmp() || kappa::set_num_threads(2) != 2 || kappa::num_threads() != 2) {
    std::printf("kappa::openmp: set_num_threads(2) had no effect\n");
    return 1;
  }
  std::printf("kappa::openmp: 2 threads\n");
#endif
  return std::abs(y(0, 0) - expect) < 1e-12 ? 0 : 1;
}
