// kappa/cache/decode_simd.hpp - the decode kernel's inner loops for float
// query rows over stored rows in any format (float, BF16, F16, Int8), with
// the values widened in registers (x86: AVX-512F, or AVX2 + FMA + F16C).
//
// A decode step with few query rows per kv head (multi-head attention: one;
// GQA with small groups: a few) does about one FMA per stored value, so it is
// bound by reading the cache, and what decides its speed is how close the
// loops keep the memory system to a plain sequential read. Each stored value
// is loaded, widened to float and used in the same register, once:
//
//   scores:      x_rj = q_r . k_j           (times k_j's scale for Int8)
//   accumulate:  y_r += sum_j w_rj v_j      (w_rj times v_j's scale for Int8)
//
// One or two query rows (multi-head attention, small groups): scores take
// one key at a time, its row read in address order (reading four keys' rows
// interleaved, one vector of each in turn, halves the read rate from memory
// on Zen 5: the prefetchers see four strided streams), and two query rows at
// a time (each loaded and widened vector of the key serves both), held in
// registers for d = 4 or 8 vectors, over kBlockKeys keys at a time.
// Accumulation keeps a panel of up to kPanelVecs vectors of y_r in registers
// while it runs down a block of keys, so y is loaded and stored once per
// block instead of once per key.
// Three rows or more (GQA groups), with d (d_v) of 4 or 8 vectors: both
// loops go key-major. A few stored rows are loaded and widened into
// registers once, and every query row takes them (query rows and y are read
// from L1), with the stored rows asked for kPrefetchRows keys ahead. Row by
// row over a block, the block came from memory for the first rows while the
// core idled, then from L1 for the others while the memory idled; key-major,
// the two overlap (G = 8: 1.4-1.6x the tokens/s). A row's sums keep the same
// order either way, so its result has the same bits whatever rows run with
// it.
// Three rows or more with d (d_v) of any other number of whole vectors (the
// DeepSeek-V2 latent rows, 576 and 512 floats, under 16 stacked heads):
// register-blocked "wide" loops, 4 rows x a few keys of sums streaming d for
// the scores, 4 rows x a few vectors of y streaming the keys for the
// accumulation. With 16 rows this is compute-bound, not memory-bound.
// Tails (d or d_v not a multiple of the vector width) go through the scalar
// conversions of formats.hpp, so results agree with the portable path to
// float rounding (the order of the sums differs).
//
// Measured against a plain read of the same bytes, one LLaMA-3-70B layer's
// cache at 32k tokens: benchmarks/README.md, "Decoding against the read
// ceiling".
//
// KAPPA_DECODE_SIMD is 1 when these loops are compiled in (the compiler
// targets AVX-512F, or AVX2 + FMA + F16C: -march=native on any x86-64 of the
// last decade), else 0 and decode.hpp uses its portable path. Define it to 0
// to force that.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kappa/cache/formats.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/simd.hpp"

#ifndef KAPPA_DECODE_SIMD
#if KAPPA_SIMD_LANES == 16 || (KAPPA_SIMD_LANES == 8 && defined(__F16C__))
#define KAPPA_DECODE_SIMD 1
#else
#define KAPPA_DECODE_SIMD 0
#endif
#endif

#if KAPPA_DECODE_SIMD
namespace kappa::cache::simd {

using kappa::simd::kLanes;
using kappa::simd::Vec;

/// kLanes stored values from p, widened to float (no Int8 scale).
template <StorageFormat F>
inline Vec load(const typename F::template Element<float>* p) {
#if KAPPA_SIMD_LANES == 16
  if constexpr (std::same_as<F, Native>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::same_as<F, BF16>) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (std::same_as<F, F16>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
#else
  if constexpr (std::same_as<F, Native>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::same_as<F, BF16>) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (std::same_as<F, F16>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
#endif
}

/// One stored value widened to float (no Int8 scale): widen_value (formats.hpp).
template <StorageFormat F>
inline float load1(const typename F::template Element<float>* p) {
  return widen_value<F, float>(*p);
}

/// Keys per block: every row passes over a block before the next one is
/// read, so it stays in L1 (64 keys of 128 floats: 32 KB).
inline constexpr Index kBlockKeys = 64;
/// How many keys ahead the key-major loops ask for the stored rows (12 KB
/// for 128 floats). Each key there costs the work of every query row, so the
/// core keeps few keys' loads in flight by itself: without this, G = 8 over a
/// float cache on 2 threads read slower key-major than row by row.
inline constexpr Index kPrefetchRows = 24;
/// The most rows the loops take at once (kDecodeRows of decode.hpp).
inline constexpr Index kDecodeRowsMax = 16;
/// Vectors of y held in registers by the accumulation (8: 128 floats with
/// AVX-512, 64 with AVX2).
inline constexpr int kPanelVecs = 8;

/// The lane sums of a0, a1, a2, a3, in that order.
inline __m128 hsum4(Vec a0, Vec a1, Vec a2, Vec a3) {
#if KAPPA_SIMD_LANES == 16
  // Halve twice across 128-bit lanes (lane l of u: four partial sums of a_l),
  // then add within the lanes and gather one sum from each.
  const __m512 t0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
  const __m512 t1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
  __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x88), _mm512_shuffle_f32x4(t0, t1, 0xDD));
  u = _mm512_add_ps(u, _mm512_permute_ps(u, 0xB1));
  u = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), u));
#else
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
#endif
}

/// q . k for one key row kj: NQ > 0 vectors with the query in registers p,
/// else dw values with the query read from q.
template <StorageFormat F, int NQ>
inline Vec dot(const typename F::template Element<float>* kj, const Vec* p, const float* q,
               Index dw) {
  Vec a = kappa::simd::zero();
  if constexpr (NQ > 0) {
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) a = kappa::simd::fma(p[i], load<F>(kj + i * kLanes), a);
  } else {
    for (Index i = 0; i < dw; i += kLanes)
      a = kappa::simd::fma(kappa::simd::load(q + i), load<F>(kj + i), a);
  }
  return a;
}

/// Two vectors (the lane partial sums of two dot products).
struct VecPair {
  Vec first, second;
};

/// The lane partial sums of q0 . kj and q1 . kj (NQ vectors, the query rows
/// in registers p0 and p1), each vector of kj loaded and widened once; the
/// order of the sums is dot's.
template <StorageFormat F, int NQ>
inline VecPair dot2(const typename F::template Element<float>* kj, const Vec* p0, const Vec* p1) {
  Vec a = kappa::simd::zero(), b = kappa::simd::zero();
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
    const Vec x = load<F>(kj + i * kLanes);
    a = kappa::simd::fma(p0[i], x, a);
    b = kappa::simd::fma(p1[i], x, b);
  }
  return {a, b};
}

/// s0[j] = q0 . k_{j0 + j} and, with kTwo, s1[j] = q1 . k_{j0 + j} (each
/// times k's Int8 scale), for keys b <= j < e, each key's row read in address
/// order. Four keys at a time share one horizontal reduction (hsum4): the
/// fewer instructions per key, the more keys the core keeps in flight, and
/// the closer the loop comes to a plain read. NQ > 0: d is NQ vectors and the
/// query rows stay in registers; NQ = 0: any d, the query rows are read from
/// L1 for every key, the tail of d % kLanes values one by one.
template <StorageFormat F, int NQ, bool kTwo>
void score_keys(const float* q0, const float* q1, const StoredRows<float, F>& k, Index j0, Index b,
                Index e, float* s0, float* s1) {
  const Index d = k.cols, dw = NQ > 0 ? Index{NQ} * kLanes : d - d % kLanes;
  Vec p0[NQ > 0 ? NQ : 1], p1[NQ > 0 ? NQ : 1];
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
    p0[i] = kappa::simd::load(q0 + i * kLanes);
    if constexpr (kTwo) p1[i] = kappa::simd::load(q1 + i * kLanes);
  }
  // The tail of a row (NQ = 0 only) and its Int8 scale.
  const auto finish = [&](const auto* kj, Index j, float& x0, float& x1) {
    for (Index i = dw; i < d; ++i) {
      const float x = load1<F>(kj + i);
      x0 += q0[i] * x;
      if constexpr (kTwo) x1 += q1[i] * x;
    }
    if constexpr (F::kScaled) {
      x0 *= k.scale(j0 + j);
      x1 *= k.scale(j0 + j);
    }
  };
  Index j = b;
  for (; j + 4 <= e; j += 4) {
    const auto* k0 = k.row(j0 + j);
    const auto* k1 = k.row(j0 + j + 1);
    const auto* k2 = k.row(j0 + j + 2);
    const auto* k3 = k.row(j0 + j + 3);
    // Key by key: the four rows' loads interleaved (one vector of each in
    // turn) halve the read rate from memory on Zen 5.
    __m128 x, y = _mm_setzero_ps();
    if constexpr (kTwo && NQ > 0) {
      // Both query rows take each widened vector of a key as it is loaded:
      // one load and one widening per vector, and only the 8 accumulators
      // live beside the query rows (two separate passes over a key's row
      // would keep its widened vectors alive in between, which spills).
      const VecPair a0 = dot2<F, NQ>(k0, p0, p1), a1 = dot2<F, NQ>(k1, p0, p1),
                    a2 = dot2<F, NQ>(k2, p0, p1), a3 = dot2<F, NQ>(k3, p0, p1);
      x = hsum4(a0.first, a1.first, a2.first, a3.first);
      y = hsum4(a0.second, a1.second, a2.second, a3.second);
    } else {
      const Vec a0 = dot<F, NQ>(k0, p0, q0, dw), a1 = dot<F, NQ>(k1, p0, q0, dw),
                a2 = dot<F, NQ>(k2, p0, q0, dw), a3 = dot<F, NQ>(k3, p0, q0, dw);
      x = hsum4(a0, a1, a2, a3);
      if constexpr (kTwo) {
        y = hsum4(dot<F, NQ>(k0, p1, q1, dw), dot<F, NQ>(k1, p1, q1, dw),
                  dot<F, NQ>(k2, p1, q1, dw), dot<F, NQ>(k3, p1, q1, dw));
      }
    }
    if (NQ == 0 && (dw < d || F::kScaled)) {
      alignas(16) float xs[4], ys[4];
      _mm_store_ps(xs, x);
      _mm_store_ps(ys, y);
      const decltype(k0) rows[4] = {k0, k1, k2, k3};
      for (int t = 0; t < 4; ++t) finish(rows[t], j + t, xs[t], ys[t]);
      x = _mm_load_ps(xs);
      y = _mm_load_ps(ys);
    } else if constexpr (F::kScaled) {
      const __m128 sc = _mm_loadu_ps(k.scales + j0 + j);
      x = _mm_mul_ps(x, sc);
      y = _mm_mul_ps(y, sc);
    }
    _mm_storeu_ps(s0 + j, x);
    if constexpr (kTwo) _mm_storeu_ps(s1 + j, y);
  }
  for (; j < e; ++j) {
    // hsum4 as above (not a one-vector sum): a key's score then has the same
    // bits wherever it falls, and in the key-major loop too.
    const auto* kj = k.row(j0 + j);
    const Vec z = kappa::simd::zero();
    alignas(16) float xs[4];
    _mm_store_ps(xs,
                 hsum4(dot<F, NQ>(kj, p0, q0, dw), kTwo ? dot<F, NQ>(kj, p1, q1, dw) : z, z, z));
    float x0 = xs[0], x1 = xs[1];
    finish(kj, j, x0, x1);
    s0[j] = x0;
    if constexpr (kTwo) s1[j] = x1;
  }
}

/// score_keys for one pair of rows (kTwo) or a single row.
template <StorageFormat F, int NQ>
void score_rows(bool two, const float* q0, const float* q1, const StoredRows<float, F>& k, Index j0,
                Index b, Index e, float* s0, float* s1) {
  if (two) {
    score_keys<F, NQ, true>(q0, q1, k, j0, b, e, s0, s1);
  } else {
    score_keys<F, NQ, false>(q0, q1, k, j0, b, e, s0, s1);
  }
}

/// The key-major loops' step: rows j0 + j + t (t < KS) of s, N vectors each,
/// loaded and widened into out[t], their Int8 scales into scale[t]; each row
/// kPrefetchRows keys ahead (below e, chunk-relative) is asked for.
template <StorageFormat F, int N, int KS>
inline void load_rows(const StoredRows<float, F>& s, Index j0, Index j, Index e, Vec (&out)[KS][N],
                      float (&scale)[KS]) {
  constexpr Index kBytes = Index{N} * kLanes * Index{sizeof(typename F::template Element<float>)};
#pragma GCC unroll 4
  for (int t = 0; t < KS; ++t) {
    const auto* row = s.row(j0 + j + t);
    if (j + t + kPrefetchRows < e) {
      const char* ahead = reinterpret_cast<const char*>(s.row(j0 + j + t + kPrefetchRows));
#pragma GCC unroll 8
      for (Index l = 0; l < kBytes; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) out[t][i] = load<F>(row + i * kLanes);
    scale[t] = s.scale(j0 + j + t);
  }
}

/// fn(r0, std::integral_constant<int, R>{}) for the rows of m in blocks of
/// four, R = min(4, m - r0): the register loops' row count at compile time.
template <class Fn>
inline void for_row_blocks(Index m, const Fn& fn) {
  for (Index r0 = 0; r0 < m; r0 += 4) {
    switch (std::min<Index>(4, m - r0)) {
      case 1:
        fn(r0, std::integral_constant<int, 1>{});
        break;
      case 2:
        fn(r0, std::integral_constant<int, 2>{});
        break;
      case 3:
        fn(r0, std::integral_constant<int, 3>{});
        break;
      default:
        fn(r0, std::integral_constant<int, 4>{});
        break;
    }
  }
}

/// The key-major score loops' last step: the sums acc[r][t] (row r0 + r,
/// key j + t) reduced four rows at a time by hsum4, which reduces each input
/// alike whatever its position (so a score has the same bits as in the
/// row-pair loop), times the keys' Int8 scales, into sc.
template <StorageFormat F, int KS, int R>
inline void store_scores(const Vec (&acc)[4][KS], const float* ks, Index j, Index r0, float* sc,
                         Index ld) {
#pragma GCC unroll 4
  for (int t = 0; t < KS; ++t) {
    __m128 x = hsum4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]);
    if constexpr (F::kScaled) x = _mm_mul_ps(x, _mm_set1_ps(ks[t]));
    alignas(16) float xs[4];
    _mm_store_ps(xs, x);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sc[(r0 + r) * ld + j + t] = xs[r];
  }
}

/// Key-major scores of R <= 4 rows from r0 for the KS keys from key j
/// (chunk-relative), whose widened vectors kv are in registers: each query
/// vector is read from L1 once for all KS keys. Lane r of a reduction is row
/// r0 + r; hsum4 reduces each of its inputs alike whatever its position, so
/// a score has the same bits as in the row-pair loop.
template <StorageFormat F, int NQ, int KS, int R>
inline void score_group(const float* q, Index d, const Vec (&kv)[KS][NQ], const float* ks, Index j,
                        Index r0, float* sc, Index ld) {
  Vec acc[4][KS];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < KS; ++t) acc[r][t] = kappa::simd::zero();
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const Vec qv = kappa::simd::load(q + (r0 + r) * d + i * kLanes);
#pragma GCC unroll 4
      for (int t = 0; t < KS; ++t) acc[r][t] = kappa::simd::fma(qv, kv[t][i], acc[r][t]);
    }
  }
  store_scores<F, KS, R>(acc, ks, j, r0, sc, ld);
}

/// Keys per step of the key-major scores: as many keys' widened vectors (N
/// each) as fit in registers beside 4 accumulators per key.
template <int N>
inline constexpr int kKeyMajorKeys = std::max(1, (kappa::simd::kRegisters - 1) / (N + 4));

/// scores() for m >= 3 rows and d = NQ vectors, keys b <= j < e, key-major:
/// KS key rows at a time are loaded (in address order, asked for
/// kPrefetchRows keys ahead) and widened into registers once, then all the
/// rows take them, four rows per reduction. The memory streams the keys while
/// the core computes; in row pairs over a block, it idled during all the
/// pairs but the first.
template <StorageFormat F, int NQ, int KS>
void scores_key_major(const float* q, Index m, const StoredRows<float, F>& k, Index j0, Index b,
                      Index e, float* sc, Index ld) {
  const Index d = k.cols;
  Vec kv[KS][NQ];
  float ks[KS];
  Index j = b;
  for (; j + KS <= e; j += KS) {
    load_rows<F, NQ, KS>(k, j0, j, e, kv, ks);
    for_row_blocks(m, [&](Index r0, auto rows) {
      score_group<F, NQ, KS, decltype(rows)::value>(q, d, kv, ks, j, r0, sc, ld);
    });
  }
  if constexpr (KS > 1) {
    if (j < e) scores_key_major<F, NQ, 1>(q, m, k, j0, j, e, sc, ld);
  }
}

/// Keys per step of the wide key-major loops (d or d_v of any number of
/// whole vectors): 4 rows x kWideKeys<F> keys of accumulators (scores), 4
/// rows x kWideVecs vectors of y (accumulation), with the loaded vectors
/// beside them. Float keys go one at a time: four 2304-byte latent rows
/// read side by side came from memory at about half the rate of one row
/// read in address order (scores 7.2 ms against 5.6 per 32k-token step,
/// though one key leaves only 4 independent sums, the FMA latency's limit);
/// the narrower rows of the other formats keep up with four.
template <StorageFormat F>
inline constexpr int kWideKeys = std::same_as<F, Native> ? 1
                                                         : (kappa::simd::kRegisters >= 32 ? 4 : 2);
inline constexpr int kWideVecs = kappa::simd::kRegisters >= 32 ? 4 : 2;
/// How many keys ahead the wide loops ask for the stored rows (a row of the
/// DeepSeek-V2 latent cache is 2304 bytes in float: 18 KB ahead).
inline constexpr Index kWidePrefetchKeys = 8;

/// Asks for every cache line of row r of s (T0).
template <StorageFormat F>
inline void prefetch_row(const StoredRows<float, F>& s, Index r) {
  const char* p = reinterpret_cast<const char*>(s.row(r));
  const Index bytes = s.cols * Index{sizeof(typename F::template Element<float>)};
  for (Index l = 0; l < bytes; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
  _mm_prefetch(p + bytes - 1, _MM_HINT_T0);
}

/// Scores of R <= 4 rows from r0 against the KS keys rows[t] (key j + t,
/// chunk-relative), d a multiple of kLanes, streaming d: each vector of the
/// keys is loaded and widened once for the R rows, each query vector once
/// for the KS keys (4 x KS independent sums in registers). Each sum runs
/// over d in dot's order and is reduced by hsum4, so a score has the same
/// bits as in the row-pair loop.
template <StorageFormat F, int KS, int R>
inline void score_wide_group(const float* q, Index d,
                             const typename F::template Element<float>* const (&rows)[KS],
                             const float* ks, Index j, Index r0, float* sc, Index ld) {
  Vec acc[4][KS];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < KS; ++t) acc[r][t] = kappa::simd::zero();
  for (Index i = 0; i < d; i += kLanes) {
    Vec kv[KS];
#pragma GCC unroll 4
    for (int t = 0; t < KS; ++t) kv[t] = load<F>(rows[t] + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const Vec qv = kappa::simd::load(q + (r0 + r) * d + i);
#pragma GCC unroll 4
      for (int t = 0; t < KS; ++t) acc[r][t] = kappa::simd::fma(qv, kv[t], acc[r][t]);
    }
  }
  store_scores<F, KS, R>(acc, ks, j, r0, sc, ld);
}

/// Scores of the R rows from r0 against keys b <= j < e (chunk-relative), KS
/// keys at a time, the rows of keys kWidePrefetchKeys ahead asked for when
/// `ahead` (the first row block to pass).
template <StorageFormat F, int KS, int R>
void score_wide_rows(const float* q, Index r0, const StoredRows<float, F>& k, Index j0, Index b,
                     Index e, bool ahead, float* sc, Index ld) {
  const Index d = k.cols;
  Index j = b;
  for (; j + KS <= e; j += KS) {
    const typename F::template Element<float>* rows[KS];
    float ks[KS];
#pragma GCC unroll 4
    for (int t = 0; t < KS; ++t) {
      rows[t] = k.row(j0 + j + t);
      ks[t] = k.scale(j0 + j + t);
      if (ahead) prefetch_row(k, j0 + j + t + kWidePrefetchKeys);
    }
    score_wide_group<F, KS, R>(q, d, rows, ks, j, r0, sc, ld);
  }
  if constexpr (KS > 1) {
    if (j < e) score_wide_rows<F, 1, R>(q, r0, k, j0, j, e, false, sc, ld);
  }
}

/// scores() for m >= 3 rows and d a multiple of kLanes other than 4 or 8
/// vectors (the DeepSeek-V2 latent rows: 576 = 36 x 16), keys b <= j < e:
/// over blocks of kBlockKeys keys (in L2), four query rows at a time (in
/// L1) take KS keys at a time (4 x KS sums in registers: 4 + KS loads per
/// 4 KS FMAs). With many rows this is compute-bound. Sixteen latent query
/// rows (36 KB in float) and a few keys do not fit in L1 together, four
/// rows do.
template <StorageFormat F>
void scores_wide(const float* q, Index m, const StoredRows<float, F>& k, Index j0, Index b, Index e,
                 float* sc, Index ld) {
  for (Index b0 = b; b0 < e; b0 += kBlockKeys) {
    const Index b1 = std::min(e, b0 + kBlockKeys);
    // The first row block asks for the keys ahead, as far as they exist.
    const Index pf_end = std::max(b0, std::min(b1, e - kWidePrefetchKeys));
    for_row_blocks(m, [&](Index r0, auto rows) {
      constexpr int R = decltype(rows)::value;
      if (r0 == 0) {
        score_wide_rows<F, kWideKeys<F>, R>(q, r0, k, j0, b0, pf_end, true, sc, ld);
        score_wide_rows<F, kWideKeys<F>, R>(q, r0, k, j0, pf_end, b1, false, sc, ld);
      } else {
        score_wide_rows<F, kWideKeys<F>, R>(q, r0, k, j0, b0, b1, false, sc, ld);
      }
    });
  }
}

/// x_rj = q_r . k_{j0 + j} (times its Int8 scale) for rows r < m and keys
/// j < n, into sc[r * ld + j]. q: m rows of d floats, row r at q + r * d.
/// Three rows or more with d of 4 or 8 vectors: key-major
/// (scores_key_major); of any other number of whole vectors: scores_wide.
/// Otherwise rows go two at a time (each loaded key serves both), over
/// blocks of kBlockKeys keys (read from memory for the first pair, from L1
/// after).
template <StorageFormat F>
void scores(const float* q, Index m, const StoredRows<float, F>& k, Index j0, Index n, float* sc,
            Index ld) {
  const Index d = k.cols;
  // Query rows in registers where d is 4 or 8 whole vectors and two rows fit
  // beside the accumulators.
  const int nq = d == 8 * kLanes && 2 * 8 + 8 <= kappa::simd::kRegisters ? 8
                 : d == 4 * kLanes                                       ? 4
                                                                         : 0;
  if (m >= 3 && d == 8 * kLanes) {
    scores_key_major<F, 8, kKeyMajorKeys<8>>(q, m, k, j0, 0, n, sc, ld);
    return;
  }
  if (m >= 3 && d == 4 * kLanes) {
    scores_key_major<F, 4, kKeyMajorKeys<4>>(q, m, k, j0, 0, n, sc, ld);
    return;
  }
  if (m >= 3 && d % kLanes == 0) {
    scores_wide<F>(q, m, k, j0, 0, n, sc, ld);
    return;
  }
  for (Index b = 0; b < n; b += kBlockKeys) {
    const Index e = std::min(n, b + kBlockKeys);
    for (Index r0 = 0; r0 < m; r0 += 2) {
      const bool two = r0 + 1 < m;
      const float* q0 = q + r0 * d;
      const float* q1 = two ? q0 + d : q0;
      float* s0 = sc + r0 * ld;
      float* s1 = two ? s0 + ld : s0;
      switch (nq) {
        case 8:
          score_rows<F, 8>(two, q0, q1, k, j0, b, e, s0, s1);
          break;
        case 4:
          score_rows<F, 4>(two, q0, q1, k, j0, b, e, s0, s1);
          break;
        default:
          score_rows<F, 0>(two, q0, q1, k, j0, b, e, s0, s1);
          break;
      }
    }
  }
}

/// y[0 .. NV kLanes) += sum_{j in [a, e)} c_j v_{j0 + j}[col .. ] with
/// c_j = w[j] (times v's Int8 scale): NV vectors of y in registers.
template <StorageFormat F, int NV>
void accumulate_panel(const float* w, Index a, Index e, const StoredRows<float, F>& v, Index j0,
                      Index col, float* y) {
  using kappa::simd::broadcast;
  using kappa::simd::fma;
  Vec acc[NV];
#pragma GCC unroll 8
  for (int t = 0; t < NV; ++t) acc[t] = kappa::simd::load(y + t * kLanes);
  Index j = a;
  for (; j + 2 <= e; j += 2) {
    const auto* v0 = v.row(j0 + j) + col;
    const auto* v1 = v.row(j0 + j + 1) + col;
    float c0 = w[j], c1 = w[j + 1];
    if constexpr (F::kScaled) {
      c0 *= v.scale(j0 + j);
      c1 *= v.scale(j0 + j + 1);
    }
    const Vec w0 = broadcast(c0), w1 = broadcast(c1);
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t)
      acc[t] = fma(w1, load<F>(v1 + t * kLanes), fma(w0, load<F>(v0 + t * kLanes), acc[t]));
  }
  if (j < e) {
    const auto* v0 = v.row(j0 + j) + col;
    float c0 = w[j];
    if constexpr (F::kScaled) c0 *= v.scale(j0 + j);
    const Vec w0 = broadcast(c0);
#pragma GCC unroll 8
    for (int t = 0; t < NV; ++t) acc[t] = fma(w0, load<F>(v0 + t * kLanes), acc[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NV; ++t) kappa::simd::store(y + t * kLanes, acc[t]);
}

/// Values per step of the key-major accumulation: as many keys' widened
/// vectors (N each) as fit in registers beside a weight and a y vector per key.
template <int N>
inline constexpr int kKeyMajorValues = std::max(1, (kappa::simd::kRegisters - 2) / (N + 1));

/// y_r += sum_{j in [a, e)} w_rj v_{j0 + j} for rows r < m, v.cols = NV
/// vectors, key-major: KS values at a time are loaded (in address order) and
/// widened into registers once, then each row's y is read from L1, updated
/// and written back. The order of each row's sum over keys is that of
/// accumulate_panel, so the results are bit-identical to it.
template <StorageFormat F, int NV, int KS>
void accumulate_key_major(const float* w, Index ld, Index m, Index a, Index e,
                          const StoredRows<float, F>& v, Index j0, float* y) {
  using kappa::simd::broadcast;
  using kappa::simd::fma;
  constexpr Index dv = Index{NV} * kLanes;
  Vec vv[KS][NV];
  Index j = a;
  for (; j + KS <= e; j += KS) {
    float vs[KS];
    load_rows<F, NV, KS>(v, j0, j, e, vv, vs);
    for (Index r = 0; r < m; ++r) {
      Vec c[KS];
#pragma GCC unroll 4
      for (int t = 0; t < KS; ++t) {
        float ct = w[r * ld + j + t];
        if constexpr (F::kScaled) ct *= vs[t];
        c[t] = broadcast(ct);
      }
      float* yr = y + r * dv;
#pragma GCC unroll 8
      for (int i = 0; i < NV; ++i) {
        Vec acc = kappa::simd::load(yr + i * kLanes);
#pragma GCC unroll 4
        for (int t = 0; t < KS; ++t) acc = fma(c[t], vv[t][i], acc);
        kappa::simd::store(yr + i * kLanes, acc);
      }
    }
  }
  if constexpr (KS > 1) {
    if (j < e) accumulate_key_major<F, NV, 1>(w, ld, m, j, e, v, j0, y);
  }
}

/// y_r[col .. col + NV kLanes) += sum_{j in [a, e)} w_rj v_{j0 + j}[col ..]
/// for the R <= 4 rows from r0 (w_rj times v's Int8 scale): R x NV vectors
/// of y in registers, each loaded vector of v used by the R rows. Each
/// element's sum runs in key order, as in accumulate_panel (same bits).
template <StorageFormat F, int NV, int R>
inline void accumulate_wide_group(const float* w, Index ld, Index r0, Index a, Index e,
                                  const StoredRows<float, F>& v, Index j0, Index col, float* y) {
  using kappa::simd::broadcast;
  using kappa::simd::fma;
  const Index dv = v.cols;
  Vec acc[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < NV; ++i)
      acc[r][i] = kappa::simd::load(y + (r0 + r) * dv + col + i * kLanes);
  for (Index j = a; j < e; ++j) {
    const auto* vj = v.row(j0 + j) + col;
    Vec x[NV];
#pragma GCC unroll 4
    for (int i = 0; i < NV; ++i) x[i] = load<F>(vj + i * kLanes);
    [[maybe_unused]] const float vs = v.scale(j0 + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float c = w[(r0 + r) * ld + j];
      if constexpr (F::kScaled) c *= vs;
      const Vec cb = broadcast(c);
#pragma GCC unroll 4
      for (int i = 0; i < NV; ++i) acc[r][i] = fma(cb, x[i], acc[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < NV; ++i)
      kappa::simd::store(y + (r0 + r) * dv + col + i * kLanes, acc[r][i]);
}

/// accumulate_wide_group for the rows from r0 (all of them in blocks of 4).
template <StorageFormat F, int NV>
inline void accumulate_wide_cols(const float* w, Index ld, Index m, Index a, Index e,
                                 const StoredRows<float, F>& v, Index j0, Index col, float* y) {
  for_row_blocks(m, [&](Index r0, auto rows) {
    accumulate_wide_group<F, NV, decltype(rows)::value>(w, ld, r0, a, e, v, j0, col, y);
  });
}

/// y_r += sum_{j in [a, e)} w_rj v_{j0 + j} for rows r < m, d_v a multiple
/// of kLanes other than 4 or 8 vectors (the latent rows: 512 = 32 x 16):
/// over blocks of kBlockKeys keys, kWideVecs columns of y at a time for four
/// rows at a time; a block's columns (64 keys x 256 bytes in float) stay in
/// L1 while every row takes them. (Asking for the next block ahead, into L1
/// or L2, measured no faster.)
template <StorageFormat F>
void accumulate_wide(const float* w, Index ld, Index m, Index a, Index e,
                     const StoredRows<float, F>& v, Index j0, float* y) {
  const Index dv = v.cols;
  for (Index b0 = a; b0 < e; b0 += kBlockKeys) {
    const Index b1 = std::min(e, b0 + kBlockKeys);
    for (Index col = 0; col < dv;) {
      switch (std::min<Index>(kWideVecs, (dv - col) / kLanes)) {
        case 1:
          accumulate_wide_cols<F, 1>(w, ld, m, b0, b1, v, j0, col, y);
          col += kLanes;
          break;
        case 2:
          accumulate_wide_cols<F, 2>(w, ld, m, b0, b1, v, j0, col, y);
          col += 2 * kLanes;
          break;
        case 3:
          accumulate_wide_cols<F, 3>(w, ld, m, b0, b1, v, j0, col, y);
          col += 3 * kLanes;
          break;
        default:
          accumulate_wide_cols<F, kWideVecs>(w, ld, m, b0, b1, v, j0, col, y);
          col += kWideVecs * kLanes;
          break;
      }
    }
  }
}

/// y_r += sum_j w_rj v_{j0 + j} (w_rj = w[r * ld + j], times v's Int8 scale)
/// over the keys row r sees, begin[r] <= j < end[r] (chunk-relative), for
/// rows r < m; y: m rows of v.cols floats, row r at y + r * v.cols. Keys
/// outside a row's range are never read for that row.
template <StorageFormat F>
void accumulate(const float* w, Index ld, Index m, const Index* begin, const Index* end,
                const StoredRows<float, F>& v, Index j0, float* y) {
  const Index dv = v.cols, dw = dv - dv % kLanes;
  Index lo = begin[0], hi = end[0], common_lo = begin[0], common_hi = end[0];
  for (Index r = 1; r < m; ++r) {
    lo = std::min(lo, begin[r]);
    hi = std::max(hi, end[r]);
    common_lo = std::max(common_lo, begin[r]);
    common_hi = std::min(common_hi, end[r]);
  }
  // Three rows or more, d_v of whole vectors: key-major (4 or 8 vectors) or
  // wide over the keys every row sees, each row's keys before and after them
  // row by row (its sum stays in key order).
  if (m >= 3 && common_lo < common_hi && dv % kLanes == 0) {
    Index b_pre[kDecodeRowsMax], e_pre[kDecodeRowsMax], b_post[kDecodeRowsMax],
        e_post[kDecodeRowsMax];
    for (Index r = 0; r < m; ++r) {
      b_pre[r] = begin[r];
      e_pre[r] = common_lo;
      b_post[r] = common_hi;
      e_post[r] = end[r];
    }
    accumulate(w, ld, m, b_pre, e_pre, v, j0, y);
    if (dv == 8 * kLanes) {
      accumulate_key_major<F, 8, kKeyMajorValues<8>>(w, ld, m, common_lo, common_hi, v, j0, y);
    } else if (dv == 4 * kLanes) {
      accumulate_key_major<F, 4, kKeyMajorValues<4>>(w, ld, m, common_lo, common_hi, v, j0, y);
    } else {
      accumulate_wide(w, ld, m, common_lo, common_hi, v, j0, y);
    }
    accumulate(w, ld, m, b_post, e_post, v, j0, y);
    return;
  }
  for (Index b0 = lo; b0 < hi; b0 += kBlockKeys) {
    for (Index r = 0; r < m; ++r) {
      const Index a = std::max(begin[r], b0), e = std::min(end[r], b0 + kBlockKeys);
      if (a >= e) continue;
      float* yr = y + r * dv;
      const float* wr = w + r * ld;
      for (Index col = 0; col < dw;) {
        const Index vecs = std::min<Index>(kPanelVecs, (dw - col) / kLanes);
        switch (vecs) {
          case 1:
            accumulate_panel<F, 1>(wr, a, e, v, j0, col, yr + col);
            break;
          case 2:
            accumulate_panel<F, 2>(wr, a, e, v, j0, col, yr + col);
            break;
          case 3:
            accumulate_panel<F, 3>(wr, a, e, v, j0, col, yr + col);
            break;
          case 4:
            accumulate_panel<F, 4>(wr, a, e, v, j0, col, yr + col);
            break;
          case 5:
            accumulate_panel<F, 5>(wr, a, e, v, j0, col, yr + col);
            break;
          case 6:
            accumulate_panel<F, 6>(wr, a, e, v, j0, col, yr + col);
            break;
          case 7:
            accumulate_panel<F, 7>(wr, a, e, v, j0, col, yr + col);
            break;
          default:
            accumulate_panel<F, kPanelVecs>(wr, a, e, v, j0, col, yr + col);
            break;
        }
        col += vecs * kLanes;
      }
      for (Index j = a; j < e && dw < dv; ++j) {
        const auto* vj = v.row(j0 + j);
        float cj = wr[j];
        if constexpr (F::kScaled) cj *= v.scale(j0 + j);
        for (Index i = dw; i < dv; ++i) yr[i] += cj * load1<F>(vj + i);
      }
    }
  }
}

}  // namespace kappa::cache::simd
#endif  // KAPPA_DECODE_SIMD
