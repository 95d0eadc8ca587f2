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
// Scores take four keys at a time (independent accumulators hide the FMA
// latency) and two query rows at a time (each loaded key serves both).
// Accumulation keeps a panel of up to kPanelVecs vectors of y_r in registers
// while it runs down a block of keys, so y is loaded and stored once per
// block instead of once per key. Both loops go over kBlockKeys keys at a time
// for all rows, so with several rows a block is read from memory once and
// from L1 again by the other rows. Tails (d or d_v not a multiple of the
// vector width) go through the scalar conversions of formats.hpp, so results
// agree with the portable path to float rounding (the order of the sums
// differs).
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
/// Vectors of y held in registers by the accumulation (8: 128 floats with
/// AVX-512, 64 with AVX2).
inline constexpr int kPanelVecs = 8;

/// x_rj = q_r . k_{j0 + j} (times its Int8 scale) for rows r < m and keys
/// j < n, into sc[r * ld + j]. q: m rows of d floats, row r at q + r * d.
template <StorageFormat F>
void scores(const float* q, Index m, const StoredRows<float, F>& k, Index j0, Index n, float* sc,
            Index ld) {
  using kappa::simd::fma;
  using kappa::simd::hsum;
  const Index d = k.cols, dw = d - d % kLanes;
  for (Index b = 0; b < n; b += kBlockKeys) {
    const Index be = std::min(n, b + kBlockKeys);
    for (Index r0 = 0; r0 < m; r0 += 2) {
      const bool two = r0 + 1 < m;
      const float* q0 = q + r0 * d;
      const float* q1 = two ? q0 + d : q0;
      Index j = b;
      for (; j + 4 <= be; j += 4) {
        const decltype(k.row(0)) rows[4] = {k.row(j0 + j), k.row(j0 + j + 1), k.row(j0 + j + 2),
                                            k.row(j0 + j + 3)};
        // Key by key, each row's values in address order: interleaving the
        // four rows' loads (one vector of each in turn) halves the read rate
        // from memory on Zen 5 (the prefetchers see four strided streams).
        Vec a[4], c[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          a[t] = kappa::simd::zero();
          c[t] = a[t];
          for (Index i = 0; i < dw; i += kLanes) {
            const Vec x = load<F>(rows[t] + i);
            a[t] = fma(kappa::simd::load(q0 + i), x, a[t]);
            if (two) c[t] = fma(kappa::simd::load(q1 + i), x, c[t]);
          }
        }
        float s0[4] = {hsum(a[0]), hsum(a[1]), hsum(a[2]), hsum(a[3])};
        float s1[4] = {hsum(c[0]), hsum(c[1]), hsum(c[2]), hsum(c[3])};
        for (Index i = dw; i < d; ++i) {
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
      for (; j < be; ++j) {
        const auto* kj = k.row(j0 + j);
        Vec a = kappa::simd::zero(), c = a;
        for (Index i = 0; i < dw; i += kLanes) {
          const Vec x = load<F>(kj + i);
          a = fma(kappa::simd::load(q0 + i), x, a);
          c = fma(kappa::simd::load(q1 + i), x, c);
        }
        float s0 = hsum(a), s1 = hsum(c);
        for (Index i = dw; i < d; ++i) {
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

/// y_r += sum_j w_rj v_{j0 + j} (w_rj = w[r * ld + j], times v's Int8 scale)
/// over the keys row r sees, begin[r] <= j < end[r] (chunk-relative), for
/// rows r < m; y: m rows of v.cols floats, row r at y + r * v.cols. Keys
/// outside a row's range are never read for that row.
template <StorageFormat F>
void accumulate(const float* w, Index ld, Index m, const Index* begin, const Index* end,
                const StoredRows<float, F>& v, Index j0, float* y) {
  const Index dv = v.cols, dw = dv - dv % kLanes;
  Index lo = begin[0], hi = end[0];
  for (Index r = 1; r < m; ++r) {
    lo = std::min(lo, begin[r]);
    hi = std::max(hi, end[r]);
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
