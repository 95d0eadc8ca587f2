// kappa/heads/compress.hpp - compression of a trained multi-head or
// grouped-query attention layer into latent form (DeepSeek-V2's MLA layout),
// by a randomized or an exact truncated SVD of its key/value projections.
//
// An MHA/GQA layer computes K = X W^K and V = X W^V (H_kv heads). Stack
// W = [W^K  W^V] (d x H_kv (d_h + d_v)) and factor it at rank d_c:
//
//   W ~= U_r S_r V_r^T,   W^DKV = U_r S_r (d x d_c),   [W^UK_g  W^UV_g] = V_r^T blocks
//
// so K ~= (X W^DKV) W^UK and V ~= (X W^DKV) W^UV, and the cache keeps only
// c_KV = X W^DKV: d_c values per token instead of H_kv (d_h + d_v). W^Q and
// W^O carry over unchanged. By Eckart-Young the exact truncated SVD minimizes
// ||W - W^DKV [W^UK W^UV]||_F over rank d_c; randomized_svd() reaches it
// within the bound in core/randomized_svd.hpp, and at d_c = min(d, H_kv (d_h
// + d_v)) the factorization is exact, so the compressed layer equals the
// original to rounding.
//
// The data-aware variant (compress_to_latent_on) minimizes the error on
// calibration inputs X_cal (N_cal x d) instead: with X_cal W = U S V^T (rank
// d_c), W^DKV = W V_r and [W^UK W^UV] = V_r^T, so X_cal W^DKV [W^UK W^UV] =
// X_cal W V_r V_r^T is the best rank-d_c approximation of X_cal W, i.e. of the
// keys and values the layer actually produces.
//
// Mapping onto LatentAttention (heads/latent.hpp), decided as follows:
//  * GQA: query head h reads kv head g = h / (H / H_kv). LatentAttention has
//    one W^UK_h, W^UV_h per query head, so the kv heads are expanded: W^UK_h
//    is the block of kv head g (G copies of d_c x d_h). This costs weights
//    only; the cache is c_KV either way.
//  * RMSNorm on c_KV: DeepSeek-V2 normalizes c_KV, an MHA layer does not.
//    The compressed layer sets norm_eps = 2^100 and the gain to 2^50, so
//    RMSNorm(y) = y 2^50 / sqrt(mean(y^2) + 2^100) = y (1 + delta) with
//    |delta| <= mean(y^2) / 2^101: both scalings are powers of two, and for
//    rms(y) below 2^38 in float (2^24 in double) delta is below the unit
//    roundoff (in float, mean(y^2) < 2^76 even vanishes in the sum): the
//    norm is the identity to rounding.
//  * Decoupled RoPE part: LatentAttention always has one (d_R >= 2). Here
//    d_R = 2 with W^KR = 0 and W^QR = 0, so it adds nothing to the scores; it
//    costs 2 cache values per token, which the byte counts below include.
//  * Scale: the original kernel's s (1/sqrt(d_h) unless set) is kept.
//  * Biases: b_K is dropped exactly (it adds q_h . b_K to every score of a
//    row, which softmax ignores). b_Q, b_V, b_O have no place in
//    LatentAttention: a layer with one of them is rejected.
//  * Positions: only layers without positional policy inside attention
//    (NoPosition) are compressed. A RoPE layer rotates K_g = RoPE(X W^K_g)
//    per position, and RoPE(c W^UK) != RoPE(c) W^UK, so W^UK cannot be folded
//    into the query (the absorbed path) and the keys are not a fixed linear
//    image of a shared cache row; MLA's decoupled k^R is one d_R-wide key
//    shared by all heads, which cannot hold H_kv rotated heads either. Such a
//    layer is rejected at compile time (static_assert). What would work,
//    and is left out: recompute K_g = RoPE(c_KV W^UK_g) from the cache on the
//    naive path (the cache still shrinks, the decode cost grows by d_c H d_h
//    per cached token), or for MQA with partial rotary keep the rotated
//    columns uncompressed as k^R.
//  * Masks: LatentAttention is causal self-attention; the compressed layer
//    reproduces the original's forward(x, CausalMask{}) (d_kv_in = d_out = d).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kappa/attention/kernels.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/randomized_svd.hpp"
#include "kappa/heads/grouping.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "kappa/heads/positional.hpp"

namespace kappa {

/// How compress_to_latent() factors [W^K W^V]: Eigen's exact BDCSVD,
/// truncated to rank d_c (the Eckart-Young optimum; O(d n min(d, n))).
struct ExactTruncatedSvd {};

/// How compress_to_latent() factors [W^K W^V]: randomized_svd() with these
/// options (oversampling p, power iterations q, seed).
struct RandomizedTruncatedSvd {
  RandomizedSvdOptions options{};
};

template <class F>
concept LatentFactorization =
    std::same_as<F, ExactTruncatedSvd> || std::same_as<F, RandomizedTruncatedSvd>;

/// A compressed layer and what the compression did.
template <Scalar T, LatentPath Path>
struct LatentCompression {
  LatentAttention<T, Path> layer;      ///< the latent layer (d_c = d_latent)
  Vector<T> singular_values;           ///< the d_c singular values kept (of W, or of X_cal W)
  double factor_error = 0;             ///< ||M - M_r||_F / ||M||_F, M = W or X_cal W
  std::size_t bytes_per_token_before;  ///< KV cache: H_kv (d_h + d_v) sizeof(T)
  std::size_t bytes_per_token_after;   ///< latent cache: (d_c + d_R) sizeof(T), d_R = 2
};

namespace detail {

inline constexpr double kIdentityNormEps = 0x1.0p100;  // RMSNorm eps: see the file comment
inline constexpr double kIdentityNormGain = 0x1.0p50;  // sqrt(eps)

/// ||m - m_r||_F / ||m||_F, 0 for m = 0.
template <Scalar T>
double compression_relative_error(const RowMatrix<T>& m, const RowMatrix<T>& m_r) {
  const double norm = static_cast<double>(m.norm());
  return norm > 0 ? static_cast<double>((m - m_r).norm()) / norm : 0.0;
}

template <Scalar T, LatentFactorization F>
SvdFactors<T> latent_factors(const ConstMatrixRef<T>& m, Index rank, const F& method) {
  if constexpr (std::is_same_v<F, ExactTruncatedSvd>) {
    return truncated_svd<T>(m, rank);
  } else {
    return randomized_svd<T>(m, rank, method.options);
  }
}

/// Checks that the layer fits LatentAttention (before touching its weights).
template <Scalar T, class Grouping>
void check_compressible(const MultiHeadAttention<T, kernels::Softmax, Grouping, NoPosition>& mha) {
  const HeadsConfig& c = mha.config();
  if (c.d_kv_in != c.d_in || c.d_out != c.d_in) {
    throw ShapeError(
        "kappa: compress_to_latent: the layer must be self-attention with d_kv_in = "
        "d_out = d_in (LatentAttention's shape), got d_in " +
        std::to_string(c.d_in) + ", d_kv_in " + std::to_string(c.d_kv_in) + ", d_out " +
        std::to_string(c.d_out));
  }
  if (mha.b_q().size() > 0 || mha.b_v().size() > 0 || mha.b_o().size() > 0) {
    throw std::invalid_argument(
        "kappa: compress_to_latent: the layer has a bias b_Q, b_V or b_O (sizes " +
        std::to_string(mha.b_q().size()) + ", " + std::to_string(mha.b_v().size()) + ", " +
        std::to_string(mha.b_o().size()) +
        "); LatentAttention has none, so the layer cannot be compressed exactly");
  }
}

inline void check_latent_rank(Index d_latent, Index max_rank, const char* max_rank_name) {
  if (d_latent < 1 || d_latent > max_rank) {
    throw std::invalid_argument("kappa: compress_to_latent: d_c = " + std::to_string(d_latent) +
                                " must be in [1, " + std::string(max_rank_name) + " = " +
                                std::to_string(max_rank) + "]");
  }
}

/// Builds the latent layer from W^DKV (d x d_c) and [W^UK W^UV] in kv-head
/// layout (d_c x H_kv (d_h + d_v)).
template <Scalar T, LatentPath Path, class Grouping>
LatentCompression<T, Path> assemble_latent(
    const MultiHeadAttention<T, kernels::Softmax, Grouping, NoPosition>& mha, RowMatrix<T> w_dkv,
    const RowMatrix<T>& w_ukv, Vector<T> singular_values, double factor_error) {
  const HeadsConfig& c = mha.config();
  const Index d = c.d_in, h_n = c.n_heads, h_kv = c.n_kv_heads, dh = c.d_head, dv = c.d_v,
              dc = w_dkv.cols(), group = h_n / h_kv;
  constexpr Index kRope = 2;  // the smallest decoupled RoPE part LatentAttention takes
  LatentConfig lc;
  lc.d_model = d;
  lc.n_heads = h_n;
  lc.d_head = dh;
  lc.d_rope = kRope;
  lc.d_v = dv;
  lc.d_latent = dc;
  lc.norm_eps = kIdentityNormEps;
  lc.scale = mha.kernel().scale_for(dh);
  LatentWeights<T> w;
  w.w_uq = mha.w_q();
  w.w_qr = RowMatrix<T>::Zero(d, h_n * kRope);
  w.w_dkv = std::move(w_dkv);
  w.kv_norm = RowVector<T>::Constant(dc, static_cast<T>(kIdentityNormGain));
  w.w_uk.resize(dc, h_n * dh);
  w.w_uv.resize(dc, h_n * dv);
  for (Index h = 0; h < h_n; ++h) {
    const Index g = h / group;  // the kv head query head h reads
    w.w_uk.middleCols(h * dh, dh) = w_ukv.middleCols(g * dh, dh);
    w.w_uv.middleCols(h * dv, dv) = w_ukv.middleCols(h_kv * dh + g * dv, dv);
  }
  w.w_kr = RowMatrix<T>::Zero(d, kRope);
  w.w_o = mha.w_o();
  LatentAttention<T, Path> layer(lc);
  layer.set_weights(std::move(w));
  return {std::move(layer), std::move(singular_values), factor_error,
          KVCache<T>::bytes_per_token(mha.kv_cache_config()), LatentCache<T>::bytes_per_token(lc)};
}

template <Scalar T, class Grouping>
RowMatrix<T> stacked_kv(const MultiHeadAttention<T, kernels::Softmax, Grouping, NoPosition>& mha) {
  RowMatrix<T> w(mha.config().d_in, mha.w_k().cols() + mha.w_v().cols());
  w << mha.w_k(), mha.w_v();  // [W^K W^V] (d, H_kv (d_h + d_v))
  return w;
}

template <class Position>
consteval bool check_compress_position() {
  static_assert(std::same_as<Position, NoPosition>,
                "kappa: compress_to_latent compresses layers without a positional policy inside "
                "attention (NoPosition) only: RoPE rotates each kv head's keys by position, which "
                "does not commute with the up-projection W^UK (see kappa/heads/compress.hpp)");
  return true;
}

}  // namespace detail

/// Compresses a softmax MHA/GQA/MQA layer into a LatentAttention layer of
/// rank d_c: [W^K W^V] ~= W^DKV [W^UK W^UV] by a truncated SVD (see the file
/// comment for the mapping, GQA, the norm, RoPE and biases).
///
/// \tparam Path   the latent layer's execution path (AbsorbedLatent or NaiveLatent)
/// \param mha     the layer (NoPosition; RoPE layers fail to compile)
/// \param d_latent d_c, 1 <= d_c <= min(d, H_kv (d_h + d_v)); the maximum is exact
/// \param method  RandomizedTruncatedSvd{options} (default) or ExactTruncatedSvd{}
/// \returns the layer, the kept singular values of W, ||W - W_r||_F / ||W||_F,
///          and the cache bytes per token before and after.
/// \throws ShapeError unless d_kv_in = d_out = d_in; std::invalid_argument
///         naming the values for d_c out of range or a b_Q, b_V or b_O bias.
///
/// ```cpp
/// kappa::GroupedQueryAttention<float> gqa({.d_in = 512, .n_heads = 8, .n_kv_heads = 2});
/// auto c = kappa::compress_to_latent(gqa, 64);   // c.layer: LatentAttention<float>
/// kappa::RowMatrix<float> y = c.layer.forward(x); // ~= gqa.forward(x, kappa::CausalMask{})
/// ```
template <LatentPath Path = AbsorbedLatent, Scalar T, class Grouping, class Position,
          LatentFactorization F = RandomizedTruncatedSvd>
LatentCompression<T, Path> compress_to_latent(
    const MultiHeadAttention<T, kernels::Softmax, Grouping, Position>& mha, Index d_latent,
    const F& method = {}) {
  static_assert(detail::check_compress_position<Position>());
  if constexpr (std::same_as<Position, NoPosition>) {
    detail::check_compressible(mha);
    const RowMatrix<T> w = detail::stacked_kv(mha);
    detail::check_latent_rank(d_latent, std::min(w.rows(), w.cols()), "min(d, H_kv (d_h + d_v))");
    const SvdFactors<T> f = detail::latent_factors<T>(w, d_latent, method);
    RowMatrix<T> w_dkv = f.u * f.s.asDiagonal();  // U_r S_r (d, d_c)
    const RowMatrix<T> w_r = w_dkv * f.vt;        // W_r (d, H_kv (d_h + d_v))
    const double err = detail::compression_relative_error<T>(w, w_r);
    return detail::assemble_latent<T, Path>(mha, std::move(w_dkv), f.vt, f.s, err);
  }
}

/// The data-aware variant: factors X_cal W instead of W, so the compression
/// is optimal for the keys and values of the calibration inputs X_cal
/// (N_cal x d): W^DKV = W V_r, [W^UK W^UV] = V_r^T with X_cal W ~= U_r S_r V_r^T
/// (see the file comment). Otherwise as compress_to_latent().
/// \tparam Path      the latent layer's execution path
/// \param mha        the layer (NoPosition; RoPE layers fail to compile)
/// \param d_latent   d_c, 1 <= d_c <= min(N_cal, H_kv (d_h + d_v))
/// \param calibration X_cal (N_cal x d), e.g. the layer's inputs on real text
/// \param method     RandomizedTruncatedSvd{options} (default) or ExactTruncatedSvd{}
/// \throws as compress_to_latent(), with d_c <= min(N_cal, H_kv (d_h + d_v));
///         ShapeError unless X_cal has d columns.
template <LatentPath Path = AbsorbedLatent, Scalar T, class Grouping, class Position,
          LatentFactorization F = RandomizedTruncatedSvd>
LatentCompression<T, Path> compress_to_latent_on(
    const MultiHeadAttention<T, kernels::Softmax, Grouping, Position>& mha, Index d_latent,
    std::type_identity_t<ConstMatrixRef<T>> calibration, const F& method = {}) {
  static_assert(detail::check_compress_position<Position>());
  if constexpr (std::same_as<Position, NoPosition>) {
    require_shapes(calibration.cols() == mha.config().d_in, "compress_to_latent_on", "X_cal",
                   calibration.rows(), calibration.cols(), "(N_cal x d_in)", calibration.rows(),
                   mha.config().d_in, "X_cal must have d_in columns");
    detail::check_compressible(mha);
    const RowMatrix<T> w = detail::stacked_kv(mha);
    const RowMatrix<T> xw = calibration * w;  // X_cal W (N_cal, H_kv (d_h + d_v))
    detail::check_latent_rank(d_latent, std::min(xw.rows(), xw.cols()),
                              "min(N_cal, H_kv (d_h + d_v))");
    const SvdFactors<T> f = detail::latent_factors<T>(xw, d_latent, method);
    RowMatrix<T> w_dkv = w * f.vt.transpose();               // W V_r (d, d_c)
    const RowMatrix<T> xw_r = (calibration * w_dkv) * f.vt;  // (N_cal, H_kv (d_h + d_v))
    const double err = detail::compression_relative_error<T>(xw, xw_r);
    return detail::assemble_latent<T, Path>(mha, std::move(w_dkv), f.vt, f.s, err);
  }
}

}  // namespace kappa
