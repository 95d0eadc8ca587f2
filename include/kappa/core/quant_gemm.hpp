// kappa/core/quant_gemm.hpp - many rows of X (prefill) times block-quantized
// weights in 8-bit integer arithmetic, with AVX-512 VNNI or AVX2.
//
// Decoding multiplies one row of X by every weight once, so its speed is
// the weight bytes (quant_weights.hpp). Prefill multiplies n rows (a prompt)
// by the same weights: compute-bound, where float GEMM on dequantized panels
// does 16 multiply-adds per 512-bit instruction and VNNI's vpdpbusd does 64
// (AVX2's vpmaddubsw + vpmaddwd: 32 per two 256-bit instructions, against
// 8 per float FMA). This file is that integer path.
//
// Codes. Every format's row of P is first rewritten as 8-bit unsigned codes
// q_t with, per group g of G weights (G = 32; 16 for Q6_K), a float scale
// s_g and offset c_g such that the weight is w_t = s_g q_t + c_g:
//
//   Q8_0  q = int8 + 128,   s = d,        c = -128 d        (G = 32)
//   Q4_0  q = nibble,       s = d,        c = -8 d          (G = 32)
//   Q4_K  q = nibble,       s = d sc_j,   c = -(dmin m_j)   (G = 32)
//   Q6_K  q = 6-bit value,  s = d sc_g,   c = -32 s         (G = 16)
//
// (Q8_0, Q4_0 and Q4_K: s q + c is the dequantized weight bit for bit; Q6_K
// within one rounding, s q - 32 s against s (q - 32).) X's rows are
// quantized to Q8_0 as decoding does (x_t = dx_b xq_t, one dx per block b
// of 32), so one output is
//
//   sum_g  s_g dx_b(g) I_g  +  c_g (dx_b(g) S_g),   I_g = sum_{t in g} q_t xq_t,
//                                                     S_g = sum_{t in g} xq_t,
//
// with exact int32 sums I_g, S_g (|I_g| <= 32 * 255 * 128 < 2^24, so exact as
// floats too). Per group, in this order and in float:
//   acc = fma(float(I_g), s_g * dx, acc);   acc = fma(c_g, dx * float(S_g), acc)
// The VNNI kernel, the AVX2 one and the portable one
// (quant::panel_product_portable) do exactly these operations, so they give
// the same bits, and so does every thread count (each output is one
// thread's). Against the exact sum, the
// float steps add at most (3 groups + 2) 2^-24 sum_g (|s_g dx I_g| +
// |c_g dx S_g|) (tests/core/quant_gemm_test.cpp asserts it).
//
// Panels. 32 rows of P are packed together ("interleaved" as llama.cpp's
// repacked formats are, but here per product, not at load, so the file's
// bytes stay a view): for each 4 consecutive weights t..t+3, 128 bytes hold
// rows 0..31's four codes, so one vpdpbusd against X's 4 bytes broadcast
// adds 16 dot products of 4, and two cover the panel. The panel (32 k
// bytes, 128 KiB at k = 4096) stays in L2 while every row of X passes over
// it, 4 rows at a time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kappa/core/quant_blocks.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define KAPPA_QUANT_GEMM_VNNI 1
#else
#define KAPPA_QUANT_GEMM_VNNI 0
#endif
// Without VNNI, AVX2 (with FMA) has the 8-bit kernel too (panel_tile_avx2).
#if !KAPPA_QUANT_GEMM_VNNI && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KAPPA_QUANT_GEMM_AVX2 1
#else
#define KAPPA_QUANT_GEMM_AVX2 0
#endif
/// 1 where prefill of the block formats runs in 8-bit integers (either kernel).
#define KAPPA_QUANT_GEMM_INT8 (KAPPA_QUANT_GEMM_VNNI || KAPPA_QUANT_GEMM_AVX2)

namespace kappa::quant {

// ---- codes: w = s q + c ------------------------------------------------------------------

namespace detail {
/// lo[j] = in[j] & 15, hi[j] = in[j] >> 4 for j < n (a multiple of 8), eight
/// bytes at a time.
inline void split_nibbles(const unsigned char* in, std::uint8_t* lo, std::uint8_t* hi, int n) {
  for (int j = 0; j < n; j += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, in + j, 8);
    const std::uint64_t l = w & 0x0F0F0F0F0F0F0F0Full, h = (w >> 4) & 0x0F0F0F0F0F0F0F0Full;
    std::memcpy(lo + j, &l, 8);
    std::memcpy(hi + j, &h, 8);
  }
}
}  // namespace detail

/// Row of k / 32 Q8_0 blocks as codes (see the file comment): q[0..k),
/// s[0..k/32), c[0..k/32).
inline void codes_row_q8_0(const unsigned char* in, std::int64_t k, std::uint8_t* q, float* s,
                           float* c) {
  for (std::int64_t b = 0; b < k / kBlock32; ++b, in += kBytesQ8_0) {
    const float d = fp16_to_float(detail::load_u16(in));
    for (int j = 0; j < 32; ++j) *q++ = static_cast<std::uint8_t>(in[2 + j] ^ 0x80u);
    s[b] = d;
    c[b] = -128.0f * d;
  }
}

/// Row of k / 32 Q4_0 blocks as codes: the nibbles in element order.
inline void codes_row_q4_0(const unsigned char* in, std::int64_t k, std::uint8_t* q, float* s,
                           float* c) {
  for (std::int64_t b = 0; b < k / kBlock32; ++b, in += kBytesQ4_0, q += 32) {
    const float d = fp16_to_float(detail::load_u16(in));
    detail::split_nibbles(in + 2, q, q + 16, 16);
    s[b] = d;
    c[b] = -8.0f * d;
  }
}

/// Row of k / 256 Q4_K blocks as codes: 8 groups of 32 per block, the
/// order and scales of dequantize_row_q4_K.
inline void codes_row_q4_K(const unsigned char* in, std::int64_t k, std::uint8_t* q, float* s,
                           float* c) {
  for (std::int64_t b = 0; b < k / kBlockK; ++b, in += kBytesQ4_K) {
    const float d = fp16_to_float(detail::load_u16(in));
    const float dmin = fp16_to_float(detail::load_u16(in + 2));
    const unsigned char* scales = in + 4;
    const unsigned char* qs = in + 16;
    for (int pair = 0; pair < 4; ++pair, qs += 32) {
      for (int h = 0; h < 2; ++h) {
        std::uint8_t sc = 0, m = 0;
        detail::q4_k_scale_min(2 * pair + h, scales, sc, m);
        *s++ = d * static_cast<float>(sc);
        *c++ = -(dmin * static_cast<float>(m));
      }
      detail::split_nibbles(qs, q, q + 32, 32);
      q += 64;
    }
  }
}

/// Row of k / 256 Q6_K blocks as codes: 16 groups of 16 per block, the
/// order and scales of dequantize_row_q6_K.
inline void codes_row_q6_K(const unsigned char* in, std::int64_t k, std::uint8_t* q, float* s,
                           float* c) {
  for (std::int64_t b = 0; b < k / kBlockK; ++b, in += kBytesQ6_K) {
    const float d = fp16_to_float(detail::load_u16(in + 208));
    const unsigned char* ql = in;
    const unsigned char* qh = in + 128;
    const unsigned char* sc_bytes = in + 192;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc_bytes += 8, q += 128) {
      for (int l = 0; l < 32; ++l) {
        q[l] = static_cast<std::uint8_t>((ql[l] & 0xF) | ((qh[l] & 3) << 4));
        q[l + 32] = static_cast<std::uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
        q[l + 64] = static_cast<std::uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        q[l + 96] = static_cast<std::uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
      for (int g = 0; g < 8; ++g) {
        std::int8_t sc = 0;
        std::memcpy(&sc, sc_bytes + g, 1);
        const float ds = d * static_cast<float>(sc);
        *s++ = ds;
        *c++ = -32.0f * ds;
      }
    }
  }
}

// ---- X in Q8_0, panels of codes ----------------------------------------------------------

/// n rows of X (k each) in Q8_0 (quantize_row_q8_0, as decoding does) with
/// the per-group terms the panel product needs: q (n x k), d (n x k/32),
/// sum (n x k/G: the group's sum of q, S_g).
struct Q8Panel {
  std::int64_t n = 0, k = 0, group = 32;
  std::vector<std::int8_t> q;
  std::vector<float> d;
  std::vector<std::int32_t> sum;  // n x k/G: the group's sum of q (S_g)

  /// Quantizes row r from float values x[0..k).
  void set_row(std::int64_t r, const float* x, std::vector<unsigned char>& blocks) {
    blocks.resize(static_cast<std::size_t>(k / kBlock32) * kBytesQ8_0);
    quantize_row_q8_0(x, blocks.data(), k);
    const unsigned char* in = blocks.data();
    std::int8_t* qr = q.data() + r * k;
    float* dr = d.data() + r * (k / kBlock32);
    for (std::int64_t b = 0; b < k / kBlock32; ++b, in += kBytesQ8_0) {
      dr[b] = fp16_to_float(detail::load_u16(in));
      std::memcpy(qr + 32 * b, in + 2, 32);
    }
    std::int32_t* sr = sum.data() + r * (k / group);
    for (std::int64_t g = 0; g < k / group; ++g) {
      std::int32_t total = 0;
      for (std::int64_t t = g * group; t < (g + 1) * group; ++t) total += qr[t];
      sr[g] = total;
    }
  }
  void resize(std::int64_t rows, std::int64_t cols, std::int64_t g) {
    n = rows, k = cols, group = g;
    q.resize(static_cast<std::size_t>(n * k));
    d.resize(static_cast<std::size_t>(n * (k / kBlock32)));
    sum.resize(static_cast<std::size_t>(n * (k / group)));
  }
};

/// Rows of P this many at a time (two 512-bit vectors of int32 sums).
inline constexpr std::int64_t kPanelRows = 32;

/// kPanelRows rows of P as interleaved codes: q[(t / 4) 128 + 4 r + t % 4]
/// is row r's code t; s[32 g + r], c[32 g + r] its group g's scale and
/// offset. Rows past the matrix are zero codes with zero scale and offset.
struct CodePanel {
  std::int64_t k = 0, group = 32;
  int code_bits = 8;  // every code < 2^code_bits (8 for Q8_0, 4 for Q4_0 and Q4_K, 6 for Q6_K)
  std::vector<std::uint8_t> q;
  std::vector<float> s, c;
  std::vector<std::uint8_t> row_q;
  std::vector<float> row_s, row_c;

  /// For rows of `cols` weights (a multiple of g) in groups of g, codes of
  /// at most `bits` bits.
  void resize(std::int64_t cols, std::int64_t g, int bits = 8) {
    k = cols, group = g, code_bits = bits;
    q.assign(static_cast<std::size_t>(k * kPanelRows), 0);
    s.assign(static_cast<std::size_t>(k / group * kPanelRows), 0.0f);
    c.assign(s.size(), 0.0f);
    row_q.resize(256);
    row_s.resize(static_cast<std::size_t>(256 / group));
    row_c.resize(row_s.size());
  }
  /// The panel from rows[0 .. kPanelRows) (packed rows of P, nullptr for
  /// rows past the matrix), `bytes256` bytes per 256 weights, through
  /// `codes(row, k, q, s, c)`. By chunks of 256 weights, so that the chunk
  /// of the panel being written (8 KiB) stays in L1.
  template <class Codes>
  void pack(const unsigned char* const* rows, std::size_t bytes256, Codes codes) {
    constexpr std::int64_t kChunk = 256;
    for (std::int64_t c0 = 0; c0 < k; c0 += kChunk) {
      const std::int64_t n = std::min(kChunk, k - c0);  // a multiple of the group
      const std::int64_t gc = n / group;
      std::uint8_t* dst = q.data() + 4 * kPanelRows * (c0 / 4);
      const std::int64_t g0 = c0 / group;
      for (std::int64_t r = 0; r < kPanelRows; ++r) {
        if (rows[r] == nullptr) {
          std::fill(row_q.begin(), row_q.begin() + n, std::uint8_t{0});
          std::fill(row_s.begin(), row_s.begin() + gc, 0.0f);
          std::fill(row_c.begin(), row_c.begin() + gc, 0.0f);
        } else {
          codes(rows[r] + static_cast<std::size_t>(c0 / kChunk) * bytes256, n, row_q.data(),
                row_s.data(), row_c.data());
        }
        for (std::int64_t t4 = 0; t4 < n / 4; ++t4)
          std::memcpy(dst + 4 * kPanelRows * t4 + 4 * r, row_q.data() + 4 * t4, 4);
        for (std::int64_t g = 0; g < gc; ++g) {
          s[static_cast<std::size_t>(kPanelRows * (g0 + g) + r)] =
              row_s[static_cast<std::size_t>(g)];
          c[static_cast<std::size_t>(kPanelRows * (g0 + g) + r)] =
              row_c[static_cast<std::size_t>(g)];
        }
      }
    }
  }
};

/// out(i, j) for rows i0 .. i0 + m - 1 of X and the panel's first `cols`
/// rows (out row-major, `ld` floats apart): the reference loop, the same
/// float operations in the same order as the VNNI kernel.
inline void panel_product_portable(const CodePanel& p, const Q8Panel& x, std::int64_t i0,
                                   std::int64_t m, float* out, std::int64_t ld, std::int64_t cols) {
  const std::int64_t k = p.k, G = p.group, ng = k / G;
  for (std::int64_t i = i0; i < i0 + m; ++i) {
    const std::int8_t* xq = x.q.data() + i * k;
    const float* xd = x.d.data() + i * (k / kBlock32);
    const std::int32_t* xs = x.sum.data() + i * ng;
    for (std::int64_t r = 0; r < cols; ++r) {
      float acc = 0.0f;
      for (std::int64_t g = 0; g < ng; ++g) {
        std::int32_t isum = 0;
        for (std::int64_t t = g * G; t < (g + 1) * G; ++t)
          isum += static_cast<std::int32_t>(
                      p.q[static_cast<std::size_t>(4 * kPanelRows * (t / 4) + 4 * r + t % 4)]) *
                  xq[t];
        const float dx = xd[g * G / kBlock32];
        const float sd = p.s[static_cast<std::size_t>(kPanelRows * g + r)] * dx;
        acc = std::fma(static_cast<float>(isum), sd, acc);
        acc = std::fma(p.c[static_cast<std::size_t>(kPanelRows * g + r)],
                       dx * static_cast<float>(xs[g]), acc);
      }
      out[(i - i0) * ld + r] = acc;
    }
  }
}

#if KAPPA_QUANT_GEMM_VNNI
namespace detail {
/// M (1..4) rows of X against the panel's two halves of 16 rows: 2 M
/// independent vpdpbusd chains (enough to cover its latency), G / 4 of them
/// per group, row and half, each W vector shared by the M rows.
template <int M, int G>
inline void panel_tile_vnni(const CodePanel& p, const Q8Panel& x, std::int64_t i0, float* out,
                            std::int64_t ld, std::int64_t cols) {
  const std::int64_t k = p.k, ng = k / G;
  const std::int8_t* xq[M];
  const float* xd[M];
  const std::int32_t* xs[M];
  for (int i = 0; i < M; ++i) {
    xq[i] = x.q.data() + (i0 + i) * k;
    xd[i] = x.d.data() + (i0 + i) * (k / kBlock32);
    xs[i] = x.sum.data() + (i0 + i) * ng;
  }
  __m512 acc0[M], acc1[M];
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const std::uint8_t* pq = p.q.data();
  for (std::int64_t g = 0; g < ng; ++g) {
    __m512i isum0[M], isum1[M];
    for (int i = 0; i < M; ++i) isum0[i] = isum1[i] = _mm512_setzero_si512();
    for (int t4 = 0; t4 < G / 4; ++t4, pq += 128) {
      const __m512i w0 = _mm512_loadu_si512(pq);
      const __m512i w1 = _mm512_loadu_si512(pq + 64);
      for (int i = 0; i < M; ++i) {
        std::int32_t x4 = 0;
        std::memcpy(&x4, xq[i] + g * G + 4 * t4, 4);
        const __m512i xv = _mm512_set1_epi32(x4);
        isum0[i] = _mm512_dpbusd_epi32(isum0[i], w0, xv);
        isum1[i] = _mm512_dpbusd_epi32(isum1[i], w1, xv);
      }
    }
    const float* ps = p.s.data() + kPanelRows * g;
    const float* pc = p.c.data() + kPanelRows * g;
    const __m512 s0 = _mm512_loadu_ps(ps), s1 = _mm512_loadu_ps(ps + 16);
    const __m512 c0 = _mm512_loadu_ps(pc), c1 = _mm512_loadu_ps(pc + 16);
    for (int i = 0; i < M; ++i) {
      const float dxs = xd[i][g * G / kBlock32];
      const __m512 dx = _mm512_set1_ps(dxs);
      const __m512 bx = _mm512_set1_ps(dxs * static_cast<float>(xs[i][g]));
      acc0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum0[i]), _mm512_mul_ps(s0, dx), acc0[i]);
      acc1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum1[i]), _mm512_mul_ps(s1, dx), acc1[i]);
      acc0[i] = _mm512_fmadd_ps(c0, bx, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(c1, bx, acc1[i]);
    }
  }
  const std::uint32_t bits = cols >= 32 ? 0xFFFFFFFFu : (1u << cols) - 1u;
  const auto mask0 = static_cast<__mmask16>(bits & 0xFFFFu);
  const auto mask1 = static_cast<__mmask16>(bits >> 16);
  for (int i = 0; i < M; ++i) {
    _mm512_mask_storeu_ps(out + i * ld, mask0, acc0[i]);
    _mm512_mask_storeu_ps(out + i * ld + 16, mask1, acc1[i]);
  }
}

template <int G>
inline void panel_product_vnni(const CodePanel& p, const Q8Panel& x, std::int64_t i0,
                               std::int64_t m, float* out, std::int64_t ld, std::int64_t cols) {
  std::int64_t i = 0;
  for (; i + 4 <= m; i += 4) panel_tile_vnni<4, G>(p, x, i0 + i, out + i * ld, ld, cols);
  switch (m - i) {
    case 3:
      panel_tile_vnni<3, G>(p, x, i0 + i, out + i * ld, ld, cols);
      break;
    case 2:
      panel_tile_vnni<2, G>(p, x, i0 + i, out + i * ld, ld, cols);
      break;
    case 1:
      panel_tile_vnni<1, G>(p, x, i0 + i, out + i * ld, ld, cols);
      break;
    default:
      break;
  }
}
}  // namespace detail
#endif

#if KAPPA_QUANT_GEMM_AVX2
namespace detail {
/// M (1..3 here) rows of X against V vectors of 8 rows of the panel, from row
/// 8 v0: vpmaddubsw (u8 codes times X's s8, pairs summed in int16) and
/// vpmaddwd (int16 pairs summed in int32). The int32 sums I_g are exact, so
/// the floats are the portable loop's.
///   - kSteps16 > 0 (codes below 2^6): the int16 sums of kSteps16
///     consecutive 4-weight steps are added before widening. A pair of
///     products is at most 2 * 63 * 127 = 16002 (6-bit codes, X's |q| <=
///     127) or 2 * 15 * 127 = 3810 (4-bit), so 2 (6-bit) or 8 (4-bit) steps
///     stay below 2^15.
///   - kSteps16 = 0 (any 8-bit code): u8 codes up to 255 times 127 would
///     saturate a pair, so the sign trick: w = q - 128 as s8, |w| times x
///     with w's sign (|w| <= 128: a pair is at most 32512), then
///     I_g = sum w x + 128 S_g.
template <int M, int V, int G, int kSteps16>
inline void panel_tile_avx2(const CodePanel& p, const Q8Panel& x, std::int64_t i0, int v0,
                            float* out, std::int64_t ld, std::int64_t cols) {
  static_assert(kSteps16 == 0 || (G / 4) % kSteps16 == 0, "whole int16 runs per group");
  constexpr bool kSigned = kSteps16 == 0;  // the sign trick, one step per run
  constexpr int kRun = kSigned ? 1 : kSteps16;
  const std::int64_t k = p.k, ng = k / G;
  const std::int8_t* xq[M];
  const float* xd[M];
  const std::int32_t* xs[M];
  for (int i = 0; i < M; ++i) {
    xq[i] = x.q.data() + (i0 + i) * k;
    xd[i] = x.d.data() + (i0 + i) * (k / kBlock32);
    xs[i] = x.sum.data() + (i0 + i) * ng;
  }
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[M][V];
  for (int i = 0; i < M; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = _mm256_setzero_ps();
  const std::uint8_t* pq = p.q.data() + 32 * v0;
  for (std::int64_t g = 0; g < ng; ++g) {
    __m256i isum[M][V];
    for (int i = 0; i < M; ++i)
      for (int v = 0; v < V; ++v) isum[i][v] = _mm256_setzero_si256();
    const std::int8_t* xg[M];
    for (int i = 0; i < M; ++i) xg[i] = xq[i] + g * G;
    // Runs of kRun 4-weight steps summed in int16, then widened to int32.
    // (The steps are not unrolled: unrolled, g++ 12 computed all the group's
    // products first and spilled them to the stack.)
    for (int t0 = 0; t0 < G / 4; t0 += kRun) {
      __m256i s16[M][V];
      for (int i = 0; i < M; ++i)
        for (int v = 0; v < V; ++v) s16[i][v] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int t4 = t0; t4 < t0 + kRun; ++t4, pq += 128) {
        __m256i w[V], wabs[V];
        for (int v = 0; v < V; ++v) {
          w[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + 32 * v));
          if constexpr (kSigned) {  // w = q - 128 as s8, and |w|
            w[v] = _mm256_xor_si256(w[v], _mm256_set1_epi8(static_cast<char>(0x80)));
            wabs[v] = _mm256_abs_epi8(w[v]);
          }
        }
        for (int i = 0; i < M; ++i) {
          std::int32_t x4 = 0;
          std::memcpy(&x4, xg[i] + 4 * t4, 4);
          const __m256i xv = _mm256_set1_epi32(x4);
          for (int v = 0; v < V; ++v) {
            const __m256i pr = kSigned ? _mm256_maddubs_epi16(wabs[v], _mm256_sign_epi8(xv, w[v]))
                                       : _mm256_maddubs_epi16(w[v], xv);
            s16[i][v] = _mm256_add_epi16(s16[i][v], pr);
          }
        }
      }
      for (int i = 0; i < M; ++i)
        for (int v = 0; v < V; ++v)
          isum[i][v] = _mm256_add_epi32(isum[i][v], _mm256_madd_epi16(s16[i][v], ones16));
    }
    if constexpr (kSigned) {  // sum q x = sum w x + 128 S_g
      for (int i = 0; i < M; ++i) {
        const __m256i corr = _mm256_set1_epi32(128 * xs[i][g]);
        for (int v = 0; v < V; ++v) isum[i][v] = _mm256_add_epi32(isum[i][v], corr);
      }
    }
    const float* ps = p.s.data() + kPanelRows * g + 8 * v0;
    const float* pc = p.c.data() + kPanelRows * g + 8 * v0;
    for (int i = 0; i < M; ++i) {
      const float dxs = xd[i][g * G / kBlock32];
      const __m256 dx = _mm256_set1_ps(dxs);
      const __m256 bx = _mm256_set1_ps(dxs * static_cast<float>(xs[i][g]));
      for (int v = 0; v < V; ++v) {
        const __m256 sd = _mm256_mul_ps(_mm256_loadu_ps(ps + 8 * v), dx);
        acc[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][v]), sd, acc[i][v]);
        acc[i][v] = _mm256_fmadd_ps(_mm256_loadu_ps(pc + 8 * v), bx, acc[i][v]);
      }
    }
  }
  for (int i = 0; i < M; ++i)
    for (int v = 0; v < V; ++v) {
      const std::int64_t c0 = 8 * (v0 + v);
      if (c0 + 8 <= cols) {
        _mm256_storeu_ps(out + i * ld + c0, acc[i][v]);
      } else if (c0 < cols) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[i][v]);
        std::memcpy(out + i * ld + c0, tmp, static_cast<std::size_t>(cols - c0) * sizeof(float));
      }
    }
}

template <int G, int kSteps16>
inline void panel_product_avx2(const CodePanel& p, const Q8Panel& x, std::int64_t i0,
                               std::int64_t m, float* out, std::int64_t ld, std::int64_t cols) {
  // Tiles of 3 rows of X times 16 rows of P: 6 int32 sums and 6 float sums
  // in registers (of 16). On a Zen 3 EPYC, 3 x 16 was the fastest of 1 x 32,
  // 2 x 16, 2 x 32, 3 x 16 and 4 x 8 (at n = 128, k = 4096 the four
  // formats' products took 5-33% less time than 2 x 16; best of 6 runs of
  // 32 panels each, 3 rounds, on a noisy VM).
  constexpr int V = 2;
  for (int v0 = 0; 8 * v0 < cols; v0 += V) {
    std::int64_t i = 0;
    for (; i + 3 <= m; i += 3)
      panel_tile_avx2<3, V, G, kSteps16>(p, x, i0 + i, v0, out + i * ld, ld, cols);
    if (m - i == 2)
      panel_tile_avx2<2, V, G, kSteps16>(p, x, i0 + i, v0, out + i * ld, ld, cols);
    else if (m - i == 1)
      panel_tile_avx2<1, V, G, kSteps16>(p, x, i0 + i, v0, out + i * ld, ld, cols);
  }
}

template <int G>
inline void panel_product_avx2_bits(const CodePanel& p, const Q8Panel& x, std::int64_t i0,
                                    std::int64_t m, float* out, std::int64_t ld,
                                    std::int64_t cols) {
  if (p.code_bits <= 4) return panel_product_avx2<G, G / 4>(p, x, i0, m, out, ld, cols);
  if (p.code_bits <= 6) return panel_product_avx2<G, 2>(p, x, i0, m, out, ld, cols);
  panel_product_avx2<G, 0>(p, x, i0, m, out, ld, cols);
}
}  // namespace detail
#endif

/// The panel product (rows i0 .. i0 + m - 1 of X, the panel's first `cols`
/// <= 32 rows): the VNNI kernel where the build has it, else the portable
/// loop; the same bits either way.
inline void panel_product(const CodePanel& p, const Q8Panel& x, std::int64_t i0, std::int64_t m,
                          float* out, std::int64_t ld, std::int64_t cols) {
#if KAPPA_QUANT_GEMM_VNNI
  if (p.group == 32) return detail::panel_product_vnni<32>(p, x, i0, m, out, ld, cols);
  if (p.group == 16) return detail::panel_product_vnni<16>(p, x, i0, m, out, ld, cols);
#elif KAPPA_QUANT_GEMM_AVX2
  if (p.group == 32) return detail::panel_product_avx2_bits<32>(p, x, i0, m, out, ld, cols);
  if (p.group == 16) return detail::panel_product_avx2_bits<16>(p, x, i0, m, out, ld, cols);
#endif
  panel_product_portable(p, x, i0, m, out, ld, cols);
}

}  // namespace kappa::quant
