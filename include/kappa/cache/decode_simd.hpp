// kappa/cache/decode_simd.hpp - the decode kernel's inner loops for float
// query rows over stored BF16, F16 and Int8 values, widened in registers
// (x86 AVX2 + FMA + F16C).
//
// A decode step with few query rows per kv head (multi-head attention: one;
// GQA with small groups: a few) does about one FMA per stored value, so it is
// bound by reading the cache. Widening a tile of stored rows into a float
// buffer and then running Eigen's dot products and row updates on it (the
// portable path in decode.hpp) spends extra loads, stores and per-call
// overhead on every key; here each stored value is loaded, widened to float
// and used in the same register:
//
//   scores:      x_rj = q_r . k_j           (times k_j's scale for Int8)
//   accumulate:  y_r += sum_j w_rj v_j      (w_rj times v_j's scale for Int8)
//
// four keys at a time (independent accumulators hide the FMA latency) and
// two query rows at a time (each loaded key serves both). Tails of fewer than
// eight values go through the scalar conversions of formats.hpp, so results
// agree with the portable path to float rounding (the order of the sums
// differs).
//
// Used for the stored formats (BF16, F16, Int8) only: a float cache is read
// in place by Eigen's dot products and row updates, which are as fast (with
// AVX-512 wider) since there is nothing to widen (benchmarks/README.md,
// "Caches in BF16, F16 and Int8").
//
// KAPPA_DECODE_SIMD is 1 when these loops are compiled in (the compiler
// targets AVX2 and FMA, e.g. -march=native on any x86-64 of the last decade),
// else 0 and decode.hpp uses its portable path. Define it to 0 to force that.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kappa/cache/formats.hpp"
#include "kappa/core/concepts.hpp"

#ifndef KAPPA_DECODE_SIMD
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KAPPA_DECODE_SIMD 1
#else
#define KAPPA_DECODE_SIMD 0
#endif
#endif

#if KAPPA_DECODE_SIMD
#include <immintrin.h>

namespace kappa::cache::simd {

/// Eight stored values from p, widened to float (no Int8 scale).
template <StorageFormat F>
inline __m256 load8(const typename F::template Element<float>* p) {
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
}

/// One stored value widened to float (no Int8 scale): widen_value (formats.hpp).
template <StorageFormat F>
inline float load1(const typename F::template Element<float>* p) {
  return widen_value<F, float>(*p);
}

/// The sum of the eight lanes of v.
inline float hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/// Keys ahead of the current ones whose rows are prefetched into L1.
inline constexpr Index kPrefetchKeys = 16;

/// Prefetches rows r0 .. r0 + n - 1 of s (every 64-byte line).
template <StorageFormat F>
inline void prefetch_rows(const StoredRows<float, F>& s, Index r0, Index n) {
  const Index bytes = s.cols * static_cast<Index>(sizeof(typename F::template Element<float>));
  for (Index r = r0; r < r0 + n; ++r) {
    const char* p = reinterpret_cast<const char*>(s.row(r));
    for (Index b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
  }
}

/// x_rj = q_r . k_{j0 + j} (times its Int8 scale) for rows r < m and keys
/// j < n, into sc[r * ld + j]. q: m rows of d floats, row r at q + r * d.
template <StorageFormat F>
void scores(const float* q, Index m, const StoredRows<float, F>& k, Index j0, Index n, float* sc,
            Index ld) {
  const Index d = k.cols, d8 = d - d % 8;
  for (Index r0 = 0; r0 < m; r0 += 2) {
    const bool two = r0 + 1 < m;
    const float* q0 = q + r0 * d;
    const float* q1 = two ? q0 + d : q0;
    Index j = 0;
    for (; j + 4 <= n; j += 4) {
      const auto* k0 = k.row(j0 + j);
      const auto* k1 = k.row(j0 + j + 1);
      const auto* k2 = k.row(j0 + j + 2);
      const auto* k3 = k.row(j0 + j + 3);
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      if (j + kPrefetchKeys + 4 <= n) prefetch_rows(k, j0 + j + kPrefetchKeys, 4);
      for (Index i = 0; i < d8; i += 8) {
        const __m256 x0 = load8<F>(k0 + i), x1 = load8<F>(k1 + i), x2 = load8<F>(k2 + i),
                     x3 = load8<F>(k3 + i);
        const __m256 p = _mm256_loadu_ps(q0 + i);
        a0 = _mm256_fmadd_ps(p, x0, a0);
        a1 = _mm256_fmadd_ps(p, x1, a1);
        a2 = _mm256_fmadd_ps(p, x2, a2);
        a3 = _mm256_fmadd_ps(p, x3, a3);
        if (two) {
          const __m256 p1 = _mm256_loadu_ps(q1 + i);
          b0 = _mm256_fmadd_ps(p1, x0, b0);
          b1 = _mm256_fmadd_ps(p1, x1, b1);
          b2 = _mm256_fmadd_ps(p1, x2, b2);
          b3 = _mm256_fmadd_ps(p1, x3, b3);
        }
      }
      float s0[4] = {hsum(a0), hsum(a1), hsum(a2), hsum(a3)};
      float s1[4] = {hsum(b0), hsum(b1), hsum(b2), hsum(b3)};
      const decltype(k0) rows[4] = {k0, k1, k2, k3};
      for (Index i = d8; i < d; ++i) {
        for (int t = 0; t < 4; ++t) {
          const float x = load1<F>(rows[t] + i);
          s0[t] += q0[i] * x;
          s1[t] += q1[i] * x;
        }
      }
      for (int t = 0; t < 4; ++t) {
        const float ks = k.scale(j0 + j + t);
        sc[r0 * ld + j + t] = F::kScaled ? s0[t] * ks : s0[t];
        if (two) sc[(r0 + 1) * ld + j + t] = F::kScaled ? s1[t] * ks : s1[t];
      }
    }
    for (; j < n; ++j) {
      const auto* kj = k.row(j0 + j);
      __m256 a = _mm256_setzero_ps(), b = a;
      for (Index i = 0; i < d8; i += 8) {
        const __m256 x = load8<F>(kj + i);
        a = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + i), x, a);
        b = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + i), x, b);
      }
      float s0 = hsum(a), s1 = hsum(b);
      for (Index i = d8; i < d; ++i) {
        const float x = load1<F>(kj + i);
        s0 += q0[i] * x;
        s1 += q1[i] * x;
      }
      const float ks = k.scale(j0 + j);
      sc[r0 * ld + j] = F::kScaled ? s0 * ks : s0;
      if (two) sc[(r0 + 1) * ld + j] = F::kScaled ? s1 * ks : s1;
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
  const Index dv = v.cols, d8 = dv - dv % 8;
  Index lo = begin[0], hi = end[0];
  for (Index r = 1; r < m; ++r) {
    lo = std::min(lo, begin[r]);
    hi = std::max(hi, end[r]);
  }
  // Blocks of kBlock keys, all rows each: a block of V stays in L1 while
  // the rows pass over it (row by row over the whole chunk would read it
  // from farther away m times).
  constexpr Index kBlock = 64;
  for (Index b0 = lo; b0 < hi; b0 += kBlock) {
    for (Index r = 0; r < m; ++r) {
      float* yr = y + r * dv;
      const float* wr = w + r * ld;
      Index j = std::max(begin[r], b0);
      const Index e = std::min(end[r], b0 + kBlock);
      for (; j + 4 <= e; j += 4) {
        if (r == 0 && j + kPrefetchKeys + 4 <= e) prefetch_rows(v, j0 + j + kPrefetchKeys, 4);
        const auto* v0 = v.row(j0 + j);
        const auto* v1 = v.row(j0 + j + 1);
        const auto* v2 = v.row(j0 + j + 2);
        const auto* v3 = v.row(j0 + j + 3);
        float c[4] = {wr[j], wr[j + 1], wr[j + 2], wr[j + 3]};
        if constexpr (F::kScaled) {
          for (int t = 0; t < 4; ++t) c[t] *= v.scale(j0 + j + t);
        }
        const __m256 c0 = _mm256_set1_ps(c[0]), c1 = _mm256_set1_ps(c[1]),
                     c2 = _mm256_set1_ps(c[2]), c3 = _mm256_set1_ps(c[3]);
        for (Index i = 0; i < d8; i += 8) {
          __m256 acc = _mm256_loadu_ps(yr + i);
          acc = _mm256_fmadd_ps(c0, load8<F>(v0 + i), acc);
          acc = _mm256_fmadd_ps(c1, load8<F>(v1 + i), acc);
          acc = _mm256_fmadd_ps(c2, load8<F>(v2 + i), acc);
          acc = _mm256_fmadd_ps(c3, load8<F>(v3 + i), acc);
          _mm256_storeu_ps(yr + i, acc);
        }
        for (Index i = d8; i < dv; ++i) {
          yr[i] += c[0] * load1<F>(v0 + i) + c[1] * load1<F>(v1 + i) + c[2] * load1<F>(v2 + i) +
                   c[3] * load1<F>(v3 + i);
        }
      }
      for (; j < e; ++j) {
        const auto* vj = v.row(j0 + j);
        float cj = wr[j];
        if constexpr (F::kScaled) cj *= v.scale(j0 + j);
        const __m256 cv = _mm256_set1_ps(cj);
        for (Index i = 0; i < d8; i += 8)
          _mm256_storeu_ps(yr + i, _mm256_fmadd_ps(cv, load8<F>(vj + i), _mm256_loadu_ps(yr + i)));
        for (Index i = d8; i < dv; ++i) yr[i] += cj * load1<F>(vj + i);
      }
    }
  }
}

}  // namespace kappa::cache::simd
#endif  // KAPPA_DECODE_SIMD
