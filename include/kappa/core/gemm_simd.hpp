// kappa/core/gemm_simd.hpp - the float GEMM of a prompt's weight products.
//
// Processing a prompt of n tokens multiplies X (n x k) by every weight
// matrix: a GEMM with few rows (n ~ 10-1000) against a weight that is far
// larger than X. Eigen's GEMM runs these at about half of the FMA peak on
// AVX-512; this one is written for the shape, in the manner of the
// register-blocked GEMMs (Goto, van de Geijn; BLIS):
//
//   a micro-tile of R <= kMr rows and kNr = 2 vectors of columns of C stays
//   in 2R registers for kc <= kKc steps of the sum; each step loads two
//   vectors of B and broadcasts R values of A (R = 14, 28 accumulators, with
//   AVX-512; 6 with AVX2's 16 registers). A's rows are copied to a scratch
//   with a row stride fixed at compile time (kLda), so the broadcasts are
//   one pointer plus constant offsets, and the micro-tile runs at the FMA
//   peak when its operands are in L1.
//
// Two forms, for the two layouts weights come in:
//   gemm_nn: C = X B, B (k x m) given by blocks of rows (a row-major W).
//            Per kKc steps: X's rows copied (A), then per kNc columns B's
//            block copied (or widened from bfloat16 / fp16) into kNr-wide
//            panels, and every tile of X's rows times every panel.
//   gemm_nt: C = X P^T, P (m x k) given row by row (a file's projection
//            W^T, or the output head E): computed as C^T = P X^T. X^T is
//            packed once into kNr-wide panels (the vector operand, one
//            stream per panel); per block of kNb tokens and kMr rows of P
//            (A, copied or widened per kKc steps), C^T's kMr x kNb block is
//            summed over all of k in an L1 scratch, then stored transposed
//            into C. With AVX512_BF16, bfloat16 P can instead be multiplied
//            as stored by X rounded to bfloat16 (Bf16PairOperands,
//            vdpbf16ps: two products per float lane).
// Both split C's columns over kappa::num_threads() threads; every element of
// C is summed in the same order (kKc blocks, each sequential in k) whatever
// the thread count or the tile that holds it, so results do not depend on
// the thread count. Only float, and only where the build has AVX2 + FMA or
// AVX-512 (KAPPA_SIMD_LANES > 0); callers keep Eigen's GEMM otherwise.
// Measured on a 2-core AVX-512 EPYC VM (benchmarks/bench_quant,
// BM_Prefill against BM_PrefillEigen and BM_FmaPeak): 128 x 4096 x 4096 at
// 0.62-0.82 of the FMA peak, 1.3-1.9x Eigen's GEMM (bf16 and fp16 widened
// included); the bfloat16 pairs at 1.3-1.5x the float FMA peak.
#pragma once

#include "kappa/core/simd.hpp"

/// 1 where the build has AVX512_BF16's dot products (gemm_nt's
/// Bf16PairOperands), else 0.
#if KAPPA_SIMD_LANES == 16 && defined(__AVX512BF16__)
#define KAPPA_GEMM_BF16_PAIRS 1
#else
#define KAPPA_GEMM_BF16_PAIRS 0
#endif

#if KAPPA_SIMD_LANES > 0
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "kappa/core/matrix.hpp"

namespace kappa::detail::gemm {

/// Columns of C per micro-tile: two vectors.
inline constexpr Index kNr = Index{2} * simd::kLanes;
/// Rows of C per micro-tile: 2 kMr accumulators, two vectors of B and a
/// broadcast within the registers.
inline constexpr int kMr = simd::kLanes == 16 ? 14 : 6;
/// Steps of the sum per block: a B panel (kKc x kNr floats, 32 KB with
/// AVX-512) or A's rows for a tile (kMr x kKc, 14 KB) stays in L1.
inline constexpr Index kKc = 256;
/// Row stride of A's scratch: kKc plus a line, so that the kMr rows fall in
/// different L1 sets.
inline constexpr Index kLda = kKc + 16;
/// Columns of X^T (tokens) per block in gemm_nt: at most kNb x k values of
/// X^T stream past each tile of P's rows (4 MB for k = 4096: L3). Unblocked,
/// a 1024-token prompt ran below Eigen's GEMM (0.9x).
inline constexpr Index kNb = 256;
/// Columns of B per packed block in gemm_nn (kKc x kNc floats, 256 KB: L2).
inline constexpr Index kNc = 128;

/// c[r][0 .. kNr) (+)= sum_{t < kc} a[r kLda + t] b[t ldb + 0 .. kNr), r < R.
/// (A's rows as copied, with a row stride fixed at compile time: the R
/// broadcasts are one pointer and constant offsets. Interleaving A's R
/// values per step into one stream, as BLIS packs it, ran 10 % slower on an
/// AVX-512 EPYC.)
template <int R>
inline void tile(const float* a, const float* b, Index ldb, Index kc, float* c, Index ldc,
                 bool accumulate) {
  simd::Vec c0[R], c1[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) c0[r] = c1[r] = simd::zero();
  for (Index t = 0; t < kc; ++t) {
    const simd::Vec b0 = simd::load(b + t * ldb), b1 = simd::load(b + t * ldb + simd::kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const simd::Vec av = simd::broadcast(a[r * kLda + t]);
      c0[r] = simd::fma(av, b0, c0[r]);
      c1[r] = simd::fma(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (accumulate) {
      c0[r] = simd::add(simd::load(cr), c0[r]);
      c1[r] = simd::add(simd::load(cr + simd::kLanes), c1[r]);
    }
    simd::store(cr, c0[r]);
    simd::store(cr + simd::kLanes, c1[r]);
  }
}

/// Calls f(i, std::integral_constant<int, R>{}) for the tiles that cover
/// `rows` rows: kMr at a time, then 8, 4, 2, 1.
template <class F>
inline void for_tiles(Index rows, const F& f) {
  Index i = 0;
  for (; i + kMr <= rows; i += kMr) f(i, std::integral_constant<int, kMr>{});
  if constexpr (kMr > 8) {
    if (rows - i >= 8) {
      f(i, std::integral_constant<int, 8>{});
      i += 8;
    }
  }
  if (rows - i >= 4) {
    f(i, std::integral_constant<int, 4>{});
    i += 4;
  }
  if (rows - i >= 2) {
    f(i, std::integral_constant<int, 2>{});
    i += 2;
  }
  if (rows - i >= 1) f(i, std::integral_constant<int, 1>{});
}

/// [lo, hi) of part p of `parts` over `units` units of `unit` each, the
/// last part ending at `end` (which may cut the last unit short).
inline void split(Index units, Index unit, Index end, int parts, int p, Index& lo, Index& hi) {
  const Index per = (units + parts - 1) / parts;
  lo = std::min(end, per * p * unit);
  hi = std::min(end, lo + per * unit);
}

/// dst[0 .. len) = src[0 .. len) for len <= kNr (a row of a B block).
inline void copy_row(float* dst, const float* src, Index len) {
  if (len == kNr) {
    simd::store(dst, simd::load(src));
    simd::store(dst + simd::kLanes, simd::load(src + simd::kLanes));
  } else {
    std::memcpy(dst, src, sizeof(float) * static_cast<std::size_t>(len));
  }
}

/// Uninitialized scratch (a vector's zeroing showed in profiles).
inline std::unique_ptr<float[]> scratch(Index size) {
  return std::unique_ptr<float[]>(new float[static_cast<std::size_t>(std::max<Index>(size, 1))]);
}

/// C (n x m, row stride ldc) = X (n x k, row stride ldx) B for B (k x m)
/// given by bpack(t, kc, j, len, dst), which writes B[t + s][j .. j + len)
/// to dst + s kNr for s < kc (len <= kNr; the rest of each row is zeroed
/// here). The last columns, fewer than kNr, are summed in a scratch.
template <class BPack>
void gemm_nn(const float* x, Index ldx, Index n, Index k, Index m, const BPack& bpack, float* c,
             Index ldc, int threads) {
  if (k == 0) {
    for (Index i = 0; i < n; ++i) std::fill(c + i * ldc, c + i * ldc + m, 0.0f);
    return;
  }
  const Index units = (m + kNr - 1) / kNr;
  const int parts = static_cast<int>(std::max<Index>(1, std::min<Index>(threads, units)));
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
  for (int p = 0; p < parts; ++p) {
    Index lo = 0, hi = 0;
    split(units, kNr, m, parts, p, lo, hi);
    if (hi <= lo) continue;
    const auto a = scratch(n * kLda), b = scratch(kKc * kNc);
    const Index tail = (hi - lo) % kNr;  // columns of a last, partial panel
    const auto ctail = scratch(tail > 0 ? n * kNr : 0);
    for (Index pc = 0; pc < k; pc += kKc) {
      const Index kc = std::min(kKc, k - pc);
      for (Index i = 0; i < n; ++i)
        std::memcpy(a.get() + i * kLda, x + i * ldx + pc,
                    sizeof(float) * static_cast<std::size_t>(kc));
      for (Index jc = lo; jc < hi; jc += kNc) {
        const Index nc = std::min(kNc, hi - jc);
        for (Index j = 0; j < nc; j += kNr) {
          const Index len = std::min(kNr, nc - j);
          float* dst = b.get() + j * kKc;
          bpack(pc, kc, jc + j, len, dst);
          if (len < kNr)
            for (Index s = 0; s < kc; ++s)
              std::fill(dst + s * kNr + len, dst + (s + 1) * kNr, 0.0f);
        }
        // Per tile of X's rows (in L1), every kNr columns of the block.
        for_tiles(n, [&](Index i, auto r) {
          for (Index j = 0; j < nc; j += kNr) {
            const bool partial = nc - j < kNr;
            tile<decltype(r)::value>(a.get() + i * kLda, b.get() + j * kKc, kNr, kc,
                                     partial ? ctail.get() + i * kNr : c + i * ldc + jc + j,
                                     partial ? kNr : ldc, pc > 0);
          }
        });
      }
    }
    if (tail > 0)
      for (Index i = 0; i < n; ++i)
        std::memcpy(c + i * ldc + hi - tail, ctail.get() + i * kNr,
                    sizeof(float) * static_cast<std::size_t>(tail));
  }
}

/// The operands of gemm_nt in float: X^T's panels and P's rows as floats,
/// tile() for the products.
struct FloatOperands {
  using Elem = float;
  /// Elements of a row of X^T's panels per step of the sum.
  static Index depth(Index k) { return k; }
  /// Steps t0 .. t1 of X^T's panel of columns i0 .. i0 + kNr (zero past n):
  /// panel[t kNr + i - i0].
  static void pack_panel(const float* x, Index ldx, Index n, Index /*k*/, Index i0, Index t0,
                         Index t1, float* panel) {
    for (Index i = i0; i < i0 + kNr; ++i)
      if (i < n)
        for (Index t = t0; t < t1; ++t) panel[t * kNr + (i - i0)] = x[i * ldx + t];
      else
        for (Index t = t0; t < t1; ++t) panel[t * kNr + (i - i0)] = 0.0f;
  }
  template <int R>
  static void tile(const float* a, const float* b, Index kc, float* c, Index ldc, bool accumulate) {
    gemm::tile<R>(a, b, kNr, kc, c, ldc, accumulate);
  }
};

#if KAPPA_GEMM_BF16_PAIRS
/// The operands of gemm_nt in bfloat16 pairs, for AVX512_BF16's dot
/// products (vdpbf16ps: two products of bfloat16 pairs added to each float
/// lane, twice the multiply-adds of a float FMA): X rounded to bfloat16
/// (nearest even) in panels of pairs, panel[(t / 2) 2 kNr + 2 i + t % 2]
/// (k padded to even with zeros); P's rows as stored, bfloat16.
struct Bf16PairOperands {
  using Elem = std::uint16_t;
  static Index depth(Index k) { return (k + 1) / 2 * 2; }
  /// Steps t0 .. t1 (even; t1 up to depth(k)) of X^T's panel of columns
  /// i0 .. i0 + kNr, rounded to bfloat16: 16 values at a time by
  /// vcvtneps2bf16, their 8 pairs stored one per row of pairs.
  static void pack_panel(const float* x, Index ldx, Index n, Index k, Index i0, Index t0, Index t1,
                         std::uint16_t* panel) {
    for (Index i = i0; i < i0 + kNr; ++i) {
      std::uint16_t* col = panel + 2 * (i - i0);
      Index t = t0;
      if (i < n) {
        const float* xr = x + i * ldx;
        for (; t + 16 <= std::min(t1, k); t += 16) {
          std::uint32_t pairs[8];
          const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(xr + t));
          std::memcpy(pairs, &h, sizeof pairs);
          for (Index q = 0; q < 8; ++q)
            std::memcpy(col + (t / 2 + q) * 2 * kNr, &pairs[q], sizeof(std::uint32_t));
        }
      }
      for (; t < t1; ++t)
        col[(t / 2) * 2 * kNr + t % 2] =
            (i < n && t < k) ? float_to_bf16_rne(x[i * ldx + t]) : std::uint16_t{0};
    }
  }
  /// float -> bfloat16, round to nearest even (NaN stays NaN).
  static std::uint16_t float_to_bf16_rne(float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  /// c[r][0 .. kNr) (+)= sum over the kc (padded to even) steps of
  /// a[r kLda + t] b's pairs: R broadcasts of a pair and two loads per two
  /// steps of the sum.
  template <int R>
  static void tile(const std::uint16_t* a, const std::uint16_t* b, Index kc, float* c, Index ldc,
                   bool accumulate) {
    __m512 c0[R], c1[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
    const Index pairs = (kc + 1) / 2;
    for (Index q = 0; q < pairs; ++q) {
      const auto b0 = std::bit_cast<__m512bh>(_mm512_loadu_si512(b + q * 2 * kNr));
      const auto b1 = std::bit_cast<__m512bh>(_mm512_loadu_si512(b + q * 2 * kNr + kNr));
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        std::int32_t pair = 0;
        std::memcpy(&pair, a + r * kLda + 2 * q, sizeof pair);
        const auto av = std::bit_cast<__m512bh>(_mm512_set1_epi32(pair));
        c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
        c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* cr = c + r * ldc;
      if (accumulate) {
        c0[r] = _mm512_add_ps(_mm512_loadu_ps(cr), c0[r]);
        c1[r] = _mm512_add_ps(_mm512_loadu_ps(cr + 16), c1[r]);
      }
      _mm512_storeu_ps(cr, c0[r]);
      _mm512_storeu_ps(cr + 16, c1[r]);
    }
  }
};
#endif

/// C (n x m, row stride ldc) = X (n x k, row stride ldx) P^T for P (m x k)
/// given by prow(j, t, len, dst), which writes P[j][t .. t + len) to dst
/// (as Ops::Elem: float, or bfloat16 with Bf16PairOperands). Per tile of
/// kMr rows of P: C^T's kMr x n block summed in an L1 scratch over all of k,
/// then stored transposed into C.
template <class Ops = FloatOperands, class PRow>
void gemm_nt(const float* x, Index ldx, Index n, Index k, Index m, const PRow& prow, float* c,
             Index ldc, int threads) {
  using Elem = typename Ops::Elem;
  if (k == 0) {
    for (Index i = 0; i < n; ++i) std::fill(c + i * ldc, c + i * ldc + m, 0.0f);
    return;
  }
  const Index np = (n + kNr - 1) / kNr * kNr, kp = Ops::depth(k);
  // X^T in panels of kNr columns (zero-padded to np), each panel's rows one
  // after another: the vector operand, read as one stream. Packed by all
  // the threads, in chunks of kKc steps (one thread packing it left 2
  // threads at 1.1x of 1 on a 128 x 1024 x 256 product).
  const auto xt = std::unique_ptr<Elem[]>(new Elem[static_cast<std::size_t>(kp * np)]);
  const Index chunks = (kp + kKc - 1) / kKc, panels = np / kNr;
  const Index units = (m + kMr - 1) / kMr;
  const int parts = static_cast<int>(std::max<Index>(1, std::min<Index>(threads, units)));
#ifdef _OPENMP
#pragma omp parallel num_threads(parts) if (parts > 1)
#endif
  {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (Index q = 0; q < panels * chunks; ++q) {
      const Index i0 = q / chunks * kNr, t0 = q % chunks * kKc;
      Ops::pack_panel(x, ldx, n, k, i0, t0, std::min(kp, t0 + kKc), xt.get() + i0 * kp);
    }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (int p = 0; p < parts; ++p) {
      Index lo = 0, hi = 0;
      split(units, kMr, m, parts, p, lo, hi);
      if (hi <= lo) continue;
      const auto a = std::unique_ptr<Elem[]>(new Elem[static_cast<std::size_t>(kMr * kLda)]);
      const Index nb_max = std::min(np, kNb);
      const auto ct = scratch(kMr * nb_max);
      // Blocks of kNb columns of X^T (kNb tokens), so that the block a tile
      // of P's rows streams stays in L3 for long prompts; P is read once per
      // block.
      for (Index ib = 0; ib < np; ib += kNb) {
        const Index nb = std::min(kNb, np - ib), iend = std::min(n, ib + nb);
        for (Index j = lo; j < hi; j += kMr) {
          const Index rows = std::min<Index>(kMr, hi - j);
          for (Index pc = 0; pc < k; pc += kKc) {
            const Index kc = std::min(kKc, k - pc);
            for (Index r = 0; r < rows; ++r) {
              prow(j + r, pc, kc, a.get() + r * kLda);
              if (Ops::depth(kc) > kc) a[static_cast<std::size_t>(r * kLda + kc)] = Elem{0};
            }
            for (Index i = 0; i < nb; i += kNr)
              for_tiles(rows, [&](Index i_a, auto r) {
                Ops::template tile<decltype(r)::value>(a.get() + i_a * kLda,
                                                       xt.get() + (ib + i) * kp + pc * kNr, kc,
                                                       ct.get() + i_a * nb + i, nb, pc > 0);
              });
          }
          for (Index i = ib; i < iend; ++i)
            for (Index r = 0; r < rows; ++r)
              c[i * ldc + j + r] = ct[static_cast<std::size_t>(r * nb + (i - ib))];
        }
      }
    }
  }
}

}  // namespace kappa::detail::gemm

#endif  // KAPPA_SIMD_LANES > 0
