// Built with OpenMP (see CMakeLists.txt): attention gives the same result on
// 1 and 2 threads. kappa splits the work by blocks of query rows and computes
// each row alone, so the results are in fact bitwise identical.
#include <gtest/gtest.h>

#include "kappa/attention/attention.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

TEST(Threading, BuiltWithOpenMP) {
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(0);  // clamps to 1
  EXPECT_EQ(num_threads(), 1);
}

template <class K, class M>
void expect_thread_independent(const K& kernel, const M& mask, Index n_q = 517, Index n_kv = 600) {
  const RowMatrix<float> q = testing::random_matrix<float>(n_q, 32, 1);
  const RowMatrix<float> k = testing::random_matrix<float>(n_kv, 32, 2);
  const RowMatrix<float> v = testing::random_matrix<float>(n_kv, 24, 3);
  set_num_threads(1);
  const RowMatrix<float> y1 = attention(q, k, v, kernel, mask);
  set_num_threads(2);
  const RowMatrix<float> y2 = attention(q, k, v, kernel, mask);
  set_num_threads(1);
  EXPECT_TRUE(y1 == y2) << "max difference " << (y1 - y2).cwiseAbs().maxCoeff();
}

TEST(Threading, AttentionIsIndependentOfThreadCount) {
  expect_thread_independent(kernels::Softmax{}, NoMask{});
  expect_thread_independent(kernels::Softmax{}, CausalMask{});
  expect_thread_independent(kernels::Linear{}, SlidingWindowMask{.window = 50});
  expect_thread_independent(kernels::EluPlusOne{}, CausalMask{});
  // Decode-shaped: key chunks run on separate threads, recombined in order.
  expect_thread_independent(kernels::Softmax{}, NoMask{}, 1, 3 * kSplitKeys + 5);
  expect_thread_independent(kernels::Softmax{}, CausalMask{}, 1, 3 * kSplitKeys + 5);
  expect_thread_independent(kernels::Linear{}, NoMask{}, 16, 2 * kSplitKeys);
  // Long key ranges: the tiled path (blocks of query rows over threads).
  const Index long_kv = kTiledMinRowBytes / static_cast<Index>(sizeof(float)) + 100;
  expect_thread_independent(kernels::Softmax{}, CausalMask{}, 300, long_kv);
  expect_thread_independent(kernels::Softmax{},
                            all_of(SlidingWindowMask{.window = 3000}, KeyPaddingMask{long_kv - 50}),
                            300, long_kv);
}

}  // namespace
}  // namespace kappa
