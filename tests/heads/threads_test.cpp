// Results of multi-head attention do not depend on the thread count: built
// with OpenMP (this executable links it whatever KAPPA_USE_OPENMP says), a
// batch forward pass and a decode step with 1 and with 2 threads must agree
// bit for bit - every (sequence, kv head) task is computed by one thread in a
// fixed order.
#include <gtest/gtest.h>

#include <vector>

#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "support/heads_reference.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using namespace kappa::testing;

#ifndef _OPENMP
#error "threads_test.cpp must be built with OpenMP"
#endif

struct ThreadsGuard {
  ~ThreadsGuard() { kappa::set_num_threads(1); }
};

TEST(HeadsThreads, BatchAndDecodeAreIndependentOfTheThreadCount) {
  ThreadsGuard guard;
  const Index h = 8, h_kv = 2, d = 32, dh = 4;
  const auto w = random_heads_weights<double>(d, d, h, h_kv, dh, dh, d, true, 3);
  kappa::GroupedQueryAttention<double> attn(
      {.d_in = d, .n_heads = h, .d_head = dh, .n_kv_heads = h_kv});
  attn.set_weights(w.w_q, w.w_k, w.w_v, w.w_o);
  attn.set_biases(w.b_q, w.b_k, w.b_v, w.b_o);
  const RowMatrix<double> x = random_matrix<double>(300, d, 4);
  const kappa::SequenceBatch<double> batch{x, {100, 3, 150, 47}};

  auto run = [&](int threads) {
    kappa::set_num_threads(threads);
    EXPECT_EQ(kappa::num_threads(), threads);
    std::vector<RowMatrix<double>> out;
    out.push_back(attn.forward(batch, kappa::CausalMask{}));
    kappa::KVCache<double> cache(attn.kv_cache_config());
    out.push_back(attn.forward_cached(RowMatrix<double>(x.topRows(200)), cache));
    out.push_back(attn.forward_cached(RowMatrix<double>(x.row(200)), cache));
    return out;
  };
  const auto one = run(1);
  const auto two = run(2);
  ASSERT_EQ(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "output " << i;
}

}  // namespace
