// kappa/attention/tile_simd.hpp - register-blocked kernels of the tiled
// softmax path for float, on x86 with AVX-512 or AVX2 + FMA.
//
// The tiled path (attention.hpp) computes, per block of query rows and tile
// of keys, S = s Q_block K_tile^T, its online softmax, and Y_block += P V_tile.
// Eigen's GEMMs reach about half of the FMA peak on these shapes (depth d_QK
// = 64..128 for S, and a fresh GEMM call with its packing per tile). The
// kernels here keep a whole panel of the result in registers instead:
//
//  * scores, transposed: S^T (keys x queries) = K_tile (s Q_block)^T, the
//    block's s Q^T packed once (d_QK x kSimdTileRows) and reused for every tile,
//    K read in place. A panel is kScoreKeys keys x kScoreVecs vectors of
//    queries: 24 accumulators with AVX-512 (8 x 48), 12 with AVX2 (4 x 24).
//    Each step broadcasts one K value and multiplies it by the panel's query
//    vectors, so K needs no packing. The column maxima (one per query) come
//    out of the same registers.
//  * Y += P V with P = S^T read as P^T: a panel is kPvRows queries x kPvVecs
//    vectors of Y's columns (6 x 64 with AVX-512, 6 x 16 with AVX2),
//    broadcasting P^T[j][i] and reading V's row j in place.
//  * the softmax of the tile runs down the columns of S^T, one vector of
//    queries at a time, with Eigen's vectorized exp.
//
// With queries along the vector lanes, a query's maximum, sum and rescale
// factor are lanes of vectors, so the online softmax costs no horizontal
// reductions. Measured on Zen 5 (AVX-512, N = 4096, d = 128, 1 thread): the
// score and P V kernels at 0.95 and 0.94 of the FMA peak, the softmax 6% of
// the time (benchmarks/README.md, "Prefill against the FMA peak").
#pragma once

#include "kappa/core/simd.hpp"

#if KAPPA_SIMD_LANES > 0
#define KAPPA_TILE_SIMD 1

#include <cmath>

#include <Eigen/Core>

#include "kappa/core/matrix.hpp"

namespace kappa::detail::tile {

using simd::add;
using simd::broadcast;
using simd::fma;
using simd::kLanes;
using simd::load;
using simd::max;
using simd::mul;
using simd::store;
using simd::sub;
using simd::Vec;
using simd::zero;

#if KAPPA_SIMD_LANES == 16
inline constexpr int kScoreKeys = 8;  // 8 x 3 = 24 of 32 registers
inline constexpr int kScoreVecs = 3;
inline constexpr int kPvRows = 6;  // 6 x 4 = 24 of 32 registers
inline constexpr int kPvVecs = 4;
/// x where s is not -inf (NaN counts as not -inf), else 0.
inline Vec zero_where_neginf(Vec x, Vec s) {
  const __mmask16 keep = _mm512_cmp_ps_mask(s, broadcast(-INFINITY), _CMP_NEQ_UQ);
  return _mm512_maskz_mov_ps(keep, x);
}
#else
inline constexpr int kScoreKeys = 4;  // 4 x 3 = 12 of 16 registers
inline constexpr int kScoreVecs = 3;
inline constexpr int kPvRows = 6;  // 6 x 2 = 12 of 16 registers
inline constexpr int kPvVecs = 2;
inline Vec zero_where_neginf(Vec x, Vec s) {
  return _mm256_and_ps(x, _mm256_cmp_ps(s, broadcast(-INFINITY), _CMP_NEQ_UQ));
}
#endif
/// 0 where m is -inf, else m.
inline Vec finite_or_zero(Vec m) {
  return zero_where_neginf(m, m);
}

/// e^x, lane by lane (Eigen's vectorized exp: the same function the scalar
/// paths call through Eigen's arrays).
inline Vec exp(Vec x) {
  return Eigen::internal::pexp(x);
}

/// Queries per score panel (lanes x kScoreVecs).
inline constexpr int kScoreCols = kScoreVecs * kLanes;

/// S^T[j][c] = sum_p K[j][p] Qt[p][c] for the MR keys j of `k` (row stride
/// ldk) and the kScoreCols queries c of `qt` (d_QK x ..., row stride ldq),
/// written to `st` (row stride lds). With kMax, also cmax[c] = max(cmax[c],
/// S^T[j][c]) over the MR keys.
template <int MR, bool kMax>
inline void score_panel(const float* k, Index ldk, const float* qt, Index ldq, Index depth,
                        float* st, Index lds, float* cmax) {
  Vec acc[MR][kScoreVecs];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < kScoreVecs; ++c) acc[i][c] = zero();
  }
  for (Index p = 0; p < depth; ++p) {
    Vec b[kScoreVecs];
#pragma GCC unroll 4
    for (int c = 0; c < kScoreVecs; ++c) b[c] = load(qt + p * ldq + c * kLanes);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const Vec a = broadcast(k[i * ldk + p]);
#pragma GCC unroll 4
      for (int c = 0; c < kScoreVecs; ++c) acc[i][c] = fma(a, b[c], acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < kScoreVecs; ++c) {
    Vec mx = kMax ? load(cmax + c * kLanes) : zero();
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      store(st + i * lds + c * kLanes, acc[i][c]);
      if constexpr (kMax) mx = max(mx, acc[i][c]);
    }
    if constexpr (kMax) store(cmax + c * kLanes, mx);
  }
}

/// score_panel over `keys` keys (any count): full panels, then one of the
/// remaining keys % kScoreKeys.
template <bool kMax>
inline void score_columns(const float* k, Index ldk, Index keys, const float* qt, Index ldq,
                          Index depth, float* st, Index lds, float* cmax) {
  Index j = 0;
  for (; j + kScoreKeys <= keys; j += kScoreKeys) {
    score_panel<kScoreKeys, kMax>(k + j * ldk, ldk, qt, ldq, depth, st + j * lds, lds, cmax);
  }
  const Index rest = keys - j;
  if (rest == 0) return;
  const float* kj = k + j * ldk;
  float* sj = st + j * lds;
  switch (rest) {
    case 1:
      score_panel<1, kMax>(kj, ldk, qt, ldq, depth, sj, lds, cmax);
      break;
    case 2:
      score_panel<2, kMax>(kj, ldk, qt, ldq, depth, sj, lds, cmax);
      break;
    case 3:
      score_panel<3, kMax>(kj, ldk, qt, ldq, depth, sj, lds, cmax);
      break;
#if KAPPA_SIMD_LANES == 16
    case 4:
      score_panel<4, kMax>(kj, ldk, qt, ldq, depth, sj, lds, cmax);
      break;
    case 5:
      score_panel<5, kMax>(kj, ldk, qt, ldq, depth, sj, lds, cmax);
      break;
    case 6:
      score_panel<6, kMax>(kj, ldk, qt, ldq, depth, sj, lds, cmax);
      break;
    case 7:
      score_panel<7, kMax>(kj, ldk, qt, ldq, depth, sj, lds, cmax);
      break;
#endif
    default:
      break;
  }
}

/// Y[i][n] += sum_j Pt[j][i] V[j][n] for the kPvRows queries i of `pt`
/// (depth x ..., row stride ldp) and NV vectors of columns n of `v` (row
/// stride ldv) and `y` (row stride ldy), over `depth` keys j.
template <int NV>
inline void pv_panel(const float* pt, Index ldp, const float* v, Index ldv, Index depth, float* y,
                     Index ldy) {
  Vec acc[kPvRows][NV];
#pragma GCC unroll 8
  for (int i = 0; i < kPvRows; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[i][c] = load(y + i * ldy + c * kLanes);
  }
  for (Index p = 0; p < depth; ++p) {
    Vec b[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) b[c] = load(v + p * ldv + c * kLanes);
#pragma GCC unroll 8
    for (int i = 0; i < kPvRows; ++i) {
      const Vec a = broadcast(pt[p * ldp + i]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[i][c] = fma(a, b[c], acc[i][c]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kPvRows; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) store(y + i * ldy + c * kLanes, acc[i][c]);
  }
}

/// Y (rows x d_v, row stride d_v) += P V_tile for P^T = `pt` (keys x rows, row
/// stride ldp), V_tile `keys` rows of stride ldv. rows is a multiple of
/// kPvRows; d_v a multiple of kLanes.
inline void accumulate_pv(const float* pt, Index ldp, Index rows, const float* v, Index ldv,
                          Index keys, Index d_v, float* y) {
  constexpr Index kWide = Index{kPvVecs} * kLanes;
  Index n = 0;
  for (; n + kWide <= d_v; n += kWide) {
    for (Index i = 0; i < rows; i += kPvRows)
      pv_panel<kPvVecs>(pt + i, ldp, v + n, ldv, keys, y + i * d_v + n, d_v);
  }
  for (; n < d_v; n += kLanes) {
    for (Index i = 0; i < rows; i += kPvRows)
      pv_panel<1>(pt + i, ldp, v + n, ldv, keys, y + i * d_v + n, d_v);
  }
}

/// The online-softmax step of one tile, down the first `cols` columns of S^T
/// (`st`: keys x ..., row stride lds; cols a multiple of kLanes). On entry m holds the
/// running maxima and cmax the maxima including this tile. Per query c:
/// alpha[c] = e^{m[c] - cmax[c]}, m[c] = cmax[c], st[j][c] = e^{st[j][c] -
/// m[c]} (0 where st is -inf when kMasked: hidden keys), l[c] = alpha l + the
/// column's sum. A query that has seen no finite score yet (cmax = -inf)
/// subtracts 0 instead, so its hidden entries stay 0 rather than NaN.
template <bool kMasked>
inline void softmax_columns(float* st, Index lds, Index keys, Index cols, float* m,
                            const float* cmax, float* l, float* alpha) {
  for (Index c = 0; c < cols; c += kLanes) {
    const Vec mn = load(cmax + c);
    const Vec shift = finite_or_zero(mn);
    const Vec a = exp(sub(load(m + c), shift));
    Vec sum = zero();
    for (Index j = 0; j < keys; ++j) {
      float* s = st + j * lds + c;
      const Vec x = load(s);
      Vec e = exp(sub(x, shift));
      if constexpr (kMasked) e = zero_where_neginf(e, x);
      store(s, e);
      sum = add(sum, e);
    }
    store(alpha + c, a);
    store(m + c, mn);
    store(l + c, fma(a, load(l + c), sum));
  }
}

/// cmax[c] = max(m[c], max_j st[j][c]) for the first `cols` columns (st: keys
/// x ..., row stride lds).
inline void column_max(const float* st, Index lds, Index keys, Index cols, const float* m,
                       float* cmax) {
  for (Index c = 0; c < cols; c += kLanes) {
    Vec mx = load(m + c);
    for (Index j = 0; j < keys; ++j) mx = max(mx, load(st + j * lds + c));
    store(cmax + c, mx);
  }
}

/// y[c] *= alpha[c] for `rows` rows of width d_v (row stride d_v) - the
/// rescale of the partial output when a tile raised a row's maximum.
inline void scale_rows(float* y, Index rows, Index d_v, const float* alpha) {
  for (Index i = 0; i < rows; ++i) {
    const float a = alpha[i];
    if (a == 1.0f) continue;
    const Vec va = broadcast(a);
    float* yi = y + i * d_v;
    for (Index n = 0; n < d_v; n += kLanes) store(yi + n, mul(load(yi + n), va));
  }
}

}  // namespace kappa::detail::tile

#endif
