// The mixture of experts' decode path (one token: whole experts shared out
// among the threads) gives the same result, bit for bit, on 1, 2 and 3
// threads, for dense and bfloat16 expert weights. Built with OpenMP
// whatever KAPPA_USE_OPENMP says for the library.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kappa/core/threading.hpp"
#include "kappa/nn/moe.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;

#ifndef _OPENMP
#error "moe_threads_test.cpp must be built with OpenMP"
#endif

struct ThreadsGuard {
  ~ThreadsGuard() { kappa::set_num_threads(1); }
};

RowMatrix<float> random(Index r, Index c, std::mt19937_64& g, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  RowMatrix<float> m(r, c);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

template <class S>
void check_thread_independence() {
  ThreadsGuard guard;
  // Widths of 64 and more, so that a product on its own would be split
  // over the threads.
  const Index d = 96, f = 80, E = 8;
  std::mt19937_64 g(7);
  kappa::MixtureOfExperts<float, S> moe(d, f, {.n_experts = E, .top_k = 3});
  moe.set_router(random(d, E, g, 1.0f));
  for (Index e = 0; e < E; ++e)
    moe.set_expert(e, random(d, f, g, 0.1f), random(d, f, g, 0.1f), random(f, d, g, 0.1f));
  kappa::GatedMlp<float, kappa::Silu, S> shared(d, 2 * f);
  shared.set_weights(random(d, 2 * f, g, 0.1f), random(d, 2 * f, g, 0.1f),
                     random(2 * f, d, g, 0.1f));
  moe.set_shared(std::move(shared), random(1, d, g, 1.0f));
  const RowMatrix<float> x = random(12, d, g, 1.0f);
  for (Index t = 0; t < x.rows(); ++t) {
    kappa::set_num_threads(1);
    const RowMatrix<float> one = moe.forward(x.row(t));
    for (int threads : {2, 3}) {
      kappa::set_num_threads(threads);
      EXPECT_EQ(moe.forward(x.row(t)), one) << "token " << t << ", " << threads << " threads";
    }
  }
}

TEST(MoeThreads, DecodeIsIndependentOfTheThreadCount) {
  check_thread_independence<kappa::DenseWeights>();
}

TEST(MoeThreads, DecodeWithBf16ExpertsIsIndependentOfTheThreadCount) {
  check_thread_independence<kappa::Bf16Weights>();
}

}  // namespace
