// Multi-head and grouped-query attention against PyTorch (golden .npy files
// written by tests/reference/make_heads_golden.py in float64): the layer is
// loaded through the PyTorch and Hugging Face weight setters and must match.
#include <gtest/gtest.h>

#include <string>

#include "kappa/embed/rope.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "kappa/io/npy.hpp"
#include "support/reference.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::RowVector;

template <class T>
RowMatrix<T> load(const std::string& name) {
  // (appended in place: GCC 12 can report a false -Warray-bounds in the chain
  // of operator+ once this file shares a unity TU with the other heads tests)
  std::string path = KAPPA_TEST_DATA_DIR "/heads/";
  path += name;
  path += ".npy";
  return kappa::io::read_npy_matrix<T>(path);
}

template <class T>
class HeadsGolden : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(HeadsGolden, Scalars);

template <class T>
void expect_matches(const RowMatrix<T>& got, const RowMatrix<double>& want) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  // float: the inputs themselves are rounded to float, so allow a few ulps
  // of the largest entry times the depth of the products.
  const double rel = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const RowMatrix<double> g = got.template cast<double>();
  EXPECT_LE(kappa::testing::max_scaled_error(g, want, rel, 0.0), 1.0) << "got\n"
                                                                      << g << "\nwant\n"
                                                                      << want;
}

template <class T>
kappa::MultiHeadAttention<T> torch_layer() {
  kappa::MultiHeadAttention<T> attn({.d_in = 16, .n_heads = 4});
  attn.set_weights_from_torch_mha(load<T>("mha_in_proj_weight"), load<T>("mha_out_proj_weight"));
  attn.set_biases_from_torch_mha(load<T>("mha_in_proj_bias"), load<T>("mha_out_proj_bias"));
  return attn;
}

TYPED_TEST(HeadsGolden, TorchMultiheadAttentionWithoutMask) {
  using T = TypeParam;
  const auto attn = torch_layer<T>();
  expect_matches<T>(attn.forward(load<T>("mha_x")), load<double>("mha_out_nomask"));
}

TYPED_TEST(HeadsGolden, TorchMultiheadAttentionCausal) {
  using T = TypeParam;
  const auto attn = torch_layer<T>();
  const RowMatrix<T> x = load<T>("mha_x");
  expect_matches<T>(attn.forward(x, kappa::CausalMask{}), load<double>("mha_out_causal"));
  // Per-head weights Z_h^-1 A_h, stacked (H N) x N by the script.
  const auto w = attn.head_weights(x, x, kappa::CausalMask{});
  const RowMatrix<double> want = load<double>("mha_weights_causal");
  const Index n = x.rows();
  for (Index h = 0; h < 4; ++h) {
    expect_matches<T>(w[static_cast<std::size_t>(h)], want.middleRows(h * n, n));
  }
}

TYPED_TEST(HeadsGolden, TorchMultiheadAttentionCross) {
  using T = TypeParam;
  const auto attn = torch_layer<T>();
  expect_matches<T>(attn.forward_cross(load<T>("mha_xq"), load<T>("mha_xkv")),
                    load<double>("mha_out_cross"));
}

TYPED_TEST(HeadsGolden, HuggingFaceGroupedQueryWithRepeatKv) {
  using T = TypeParam;
  kappa::GroupedQueryAttention<T> attn({.d_in = 32, .n_heads = 8, .d_head = 4, .n_kv_heads = 2});
  attn.set_weights_from_hf(load<T>("gqa_q_proj"), load<T>("gqa_k_proj"), load<T>("gqa_v_proj"),
                           load<T>("gqa_o_proj"));
  const RowMatrix<T> x = load<T>("gqa_x");
  const RowMatrix<double> want = load<double>("gqa_out_causal");
  expect_matches<T>(attn.forward(x, kappa::CausalMask{}), want);
  // The same through the KV cache, one token at a time.
  kappa::KVCache<T> cache(attn.kv_cache_config());
  RowMatrix<T> inc(x.rows(), 32);
  for (Index i = 0; i < x.rows(); ++i) inc.row(i) = attn.forward_cached(x.row(i), cache);
  expect_matches<T>(inc, want);
}

// Hugging Face LLaMA with its rotary embedding (rotate_half, base 10000):
// kappa::Rope<T> as the positional policy, full pass and decode through the
// cache (where the position offset must be the cache length).
TYPED_TEST(HeadsGolden, HuggingFaceGroupedQueryWithRope) {
  using T = TypeParam;
  using Layer = kappa::GroupedQueryAttention<T, kappa::kernels::Softmax, kappa::Rope<T>>;
  Layer attn({.d_in = 32, .n_heads = 8, .d_head = 8, .n_kv_heads = 2});  // Rope over d_head
  attn.set_weights_from_hf(load<T>("gqa_rope_q_proj"), load<T>("gqa_rope_k_proj"),
                           load<T>("gqa_rope_v_proj"), load<T>("gqa_rope_o_proj"));
  const RowMatrix<T> x = load<T>("gqa_rope_x");
  const RowMatrix<double> want = load<double>("gqa_rope_out_causal");
  expect_matches<T>(attn.forward(x, kappa::CausalMask{}), want);
  kappa::KVCache<T> cache(attn.kv_cache_config());
  RowMatrix<T> inc(x.rows(), 32);
  inc.topRows(2) = attn.forward_cached(x.topRows(2), cache);
  for (Index i = 2; i < x.rows(); ++i) inc.row(i) = attn.forward_cached(x.row(i), cache);
  expect_matches<T>(inc, want);
  // Without RoPE the result is different: the golden data does test it.
  kappa::GroupedQueryAttention<T> plain({.d_in = 32, .n_heads = 8, .d_head = 8, .n_kv_heads = 2});
  plain.set_weights(attn.w_q(), attn.w_k(), attn.w_v(), attn.w_o());
  EXPECT_GT(kappa::testing::max_scaled_error(
                plain.forward(x, kappa::CausalMask{}).template cast<double>(), want, 1e-5, 0.0),
            100.0);
}

TYPED_TEST(HeadsGolden, HuggingFaceMultiQuery) {
  using T = TypeParam;
  kappa::MultiQueryAttention<T> attn({.d_in = 32, .n_heads = 8, .d_head = 4});
  attn.set_weights_from_hf(load<T>("mqa_q_proj"), load<T>("mqa_k_proj"), load<T>("mqa_v_proj"),
                           load<T>("mqa_o_proj"));
  expect_matches<T>(attn.forward(load<T>("mqa_x"), kappa::CausalMask{}),
                    load<double>("mqa_out_causal"));
}

}  // namespace
