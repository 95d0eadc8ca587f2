// kappa/core/quant_weights.hpp - weights stored in GGUF's 8-bit and 4-bit
// blocks (Q8_0, Q4_0) and k-quant super-blocks (Q4_K, Q6_K), multiplied
// without dequantizing the matrix.
//
//   Q8_0Weights  34 bytes per 32 weights (8.5 bits): w = d q, q int8
//   Q4_0Weights  18 bytes per 32 weights (4.5 bits): w = d (q - 8), q 4-bit
//   Q4_KWeights  144 bytes per 256 weights (4.5 bits): sub-block s of 32,
//                w = d sc_s q - dmin m_s (q 4-bit, sc_s, m_s 6-bit)
//   Q6_KWeights  210 bytes per 256 weights (6.5625 bits): group g of 16,
//                w = d sc_g (q - 32) (q 6-bit, sc_g int8)
//
// Layout. A product reduces over one dimension of W; the blocks run along
// that dimension, so a product reads contiguous blocks. The packed matrix P
// has one row per output element, each row k / B blocks (k the reduction
// length, B = 32 weights per block, 256 for the k-quants), rows one after
// another:
//
//   BlocksAlong::kRows (default)  P = W^T: row j of P is column j of W
//                                 (k = rows of W). For out = X W: the
//                                 projections and the feed-forward.
//   BlocksAlong::kCols            P = W: row i of P is row i of W
//                                 (k = cols of W). For out = X W^T: the
//                                 output head X E^T.
//
// This is GGUF's layout: a GGUF tensor of shape [n_out][n_in] (ne0 = n_in)
// is P row by row, so its bytes are used as they are (the constructor from
// packed bytes copies or views them, never repacks). A projection
// y = x W (W: d_in x d_out) is a GGUF tensor [d_out][d_in] with kRows; the
// output head or embedding E (N_T x d) is [N_T][d] with kCols. k must be a
// multiple of the block, 32 or 256 (GGUF's own rule): other shapes throw
// ShapeError naming the shape of W and of a block; there is no padding, so
// the bytes stay GGUF's. (A row of P has k / 32 or k / 256 blocks; X's Q8_0
// rows below always have k / 32.)
//
// Products. Both products compute out = X P^T when the blocks run along the
// reduction ("the fast layout"):
//   - up to kFewRows (8) rows of X (decoding): each row of X is quantized to
//     Q8_0 once (quant::quantize_row_q8_0, ggml's reference quantizer, from
//     X's values as float), and each output is a sum over blocks of an
//     integer block dot product times the two fp16 scales, as ggml's
//     vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0 do. The integer sums are exact
//     (eight int32 lanes of 4 products per block); each lane's term d s_l
//     (d = d_w d_x, exact in float) is added into float lane sums with a
//     fused multiply-add where the build has FMA, in a fixed order
//     (detail::lanes_add: two sets for even and odd blocks, as ggml's AVX2
//     code with one more set), so the AVX2 path and the portable path give
//     the same float bit for bit, and so does every thread count (output
//     elements are split over kappa::num_threads() threads by contiguous
//     ranges of rows of P, each computed by one thread alone). The float
//     summation adds at most (k / 32 + 8) 2^-24 sum |terms| to the exact
//     sum of the block terms.
//   - Q4_K and Q6_K, up to kFewRows rows: X's rows in the same Q8_0 blocks
//     of 32 (not ggml's Q8_K); the super-block's bytes are unpacked in
//     registers (nibbles, 6-bit q, 6-bit scales and mins) and each 32-element
//     sub-block s (X's block 8 i + s in super-block i) gives exact int32s:
//       Q4_K  I_s = sc_s sum q x,  M_s = m_s sum x; the term is
//             (d dx_s) I_s - (dmin dx_s) M_s
//       Q6_K  I_s = sc_lo sum_lo (q - 32) x + sc_hi sum_hi (q - 32) x
//             (lo, hi: the two groups of 16); the term is (d dx_s) I_s
//     (|I_s|, |M_s| <= 2^24, so exact as floats; d dx_s, dmin dx_s are exact
//     products of two fp16 values). The float order is one for every path
//     (detail::kq_lanes_add): float lane s of set i mod 2 gets
//     lane_fma(d dx_s, I_s) then, for Q4_K, lane_fma(-dmin dx_s, M_s); the
//     total is lanes_total's. So AVX2, VNNI and portable give the same float
//     bit for bit, and so does every thread count. Each lane adds at most
//     2 ceil(n / 2) terms (n = k / 256 super-blocks) plus the 4 additions of
//     the total: the result is within (k / 256 + 8) 2^-24 sum |terms| of the
//     exact sum of the sub-block terms (one term per sub-block for Q6_K, two
//     for Q4_K). Against X's Q8_0 values times ggml's dequantized weights
//     Q4_K adds 2^-24 sum |w x| (dequantization rounds d sc q - dmin m once;
//     Q6_K's is exact).
//   - more rows (prefill), T = float, in a build with AVX-512 VNNI or AVX2
//     (KAPPA_QUANT_GEMM_INT8): X's rows in Q8_0 as for decoding, panels of
//     32 rows of P rewritten as 8-bit codes, and vpdpbusd (VNNI) or
//     vpmaddubsw (AVX2) products (kappa/core/quant_gemm.hpp: its comment
//     gives the float order and the error bound; the same bits on either
//     kernel, the portable loop and every thread count). With VNNI 2.2-2.7x
//     float GEMM for Q8_0 / Q4_0 / Q4_K, 1.7-2.1x for Q6_K; with AVX2 alone
//     (a Zen 3 EPYC) 1.4-2.5x the dequantized path below, 1.0-1.4x kappa's
//     float GEMM on 1 thread (bench_quant BM_Prefill).
//   - more rows otherwise: panels of 64 rows of P are dequantized into a
//     buffer in T and multiplied with Eigen's GEMM (X is not quantized, so
//     prefill is as exact as the weights allow; decode adds X's Q8_0 error).
//   - Q4_0 rows interleaved by eights (BlockWeightMatrix::interleaved(),
//     quant::Q4_0Rows8: a copy the user asks for; a GGUF file opened with
//     interleave_q4 holds its Q4_0 tensors so, rearranged in place, as
//     runtime::Model::load does by default), up to kFewRows rows: each group
//     of 8 rows of P is summed at once (detail::dot8_q4_0), block b giving
//     row r the exact int32 S_rb, added in block order into one float per
//     row: acc_r = lane_fma(d_w d_x, S_rb, acc_r). The same in the AVX2,
//     512-bit VNNI (where q4_0_wide() says so: 2-2.9x AVX2's on an AMD EPYC
//     VM) and portable loops and for every thread count (the threads split whole
//     groups; the rows after the last group take dot_q4_0), but another
//     order than the rows' lanes: within (k / 32) 2^-24 sum |terms| of the
//     exact sum, and different bits from the same matrix not interleaved.
//     Prefill and the other products read the rows back (the same bits).
//   - Q4_K rows interleaved by eights (quant::Q4_KRows8, the same ways),
//     up to kFewRows rows: X's rows in ggml's Q8_K instead (detail::Q8KRow:
//     one float scale per 256 values, as llama.cpp's k-quant products take
//     them; coarser than Q8_0's one per 32), and per super-block each row's
//     exact int32s I = sum_s sc_s sum q x, M = sum_s m_s sum x, then
//     acc = lane_fma(d dx, I, acc), lane_fma(-dmin dx, M, acc)
//     (detail::dot8_q4_k: the AVX2 loop multiplies 4 weights of each of 8
//     rows by the same 4 values of X in one instruction, and keeps the sums
//     of a sub-block in int16; the 512-bit VNNI loop, where q4_0_wide()
//     says so, two pieces per vector with vpdpbusd, 1.5-1.6x AVX2's on an
//     AMD EPYC VM; the portable loop gives the same bits).
//     Within (2 k / 256 + 2) 2^-24 sum |terms| of the exact sum.
// A product along the other dimension (multiply() of a kCols matrix,
// multiply_transposed() of a kRows one) is supported but slow: panels of P
// are dequantized and accumulated with Eigen's GEMM for any number of rows.
// No product allocates more than one panel per thread plus X's Q8_0 rows.
//
// Instruction sets: the integer block dot products use AVX2
// (_mm256_maddubs_epi16 / _mm256_madd_epi16 with the sign trick: |w| as
// unsigned times x with w's sign) or VNNI (_mm256_dpbusd_epi32 with
// AVX512-VNNI + VL, _mm256_dpbusd_avx_epi32 with AVX-VNNI) when the build
// enables them (-march=native), else the portable scalar code; all give the
// same int32 lane sums (the sign trick keeps every pair of products within
// int16: |w| <= 128, |x| <= 127). With AVX-512BW + VL the scales of 8
// blocks are permuted out of wide loads and widened (F16C) at once
// (scales8); without it each block's scale is widened on its own (a
// gather of the 8 was the slower way on an AVX-512 Xeon and on a Zen 3
// EPYC). With VNNI, Q4_0's loop masks the high
// nibbles without shifting them (16 q), carries lanes 4..7 at 16 times their
// value through the float sums and scales them back exactly at the end
// (dot_q4_0_vnni says why the bits stay the same), and broadcasts each
// block's scale from a buffer filled per 64 blocks. With KAPPA_QUANT_AVX512=1
// (off by default, see below) two blocks go in one 512-bit vector, same
// lanes, same order. Q4_0's and Q8_0's 512-bit loops are also built wherever
// AVX-512 VNNI is and taken at run time on AMD CPUs (detail::q4_0_wide:
// 1.12-1.19x per decode step there, no gain on Intel's). detail::kQuantDotIsa names the
// path built. Q4_K and Q6_K use the same
// lane dot products (q is unsigned there, 0..15 or 0..63, so no sign trick:
// every pair of products is within int16, 2 * 63 * 128 < 2^15). Q6_K hadds
// the lanes into per-16 sums and scales them with _mm256_mullo_epi32; Q4_K
// packs its lane sums to int16 and sums them with _mm256_madd_epi16, the
// last time against the scales (q4_k_block_avx2): the same int32s as the
// portable loops. Where q4_0_wide() says so (AMD's CPUs) they take two
// super-blocks per 512-bit step (q4_k_pair_wide, q6_k_pair_wide: each half
// of a vector does the 256-bit loop's work for its super-block, so the
// bits are the same; 1.2-1.3x on matrices in L3), whatever
// KAPPA_QUANT_AVX512 says.
//
// Quantizing floats (the RowMatrix constructor): Q8_0 and Q4_0 use ggml's
// reference quantizers byte for byte. Q4_K and Q6_K use a simple quantizer of
// our own from the format's definition (detail::quantize_row_q4_K_simple,
// detail::quantize_row_q6_K_simple: sub-block min/max, scales rounded up so
// that every value is covered); it is not ggml's iterative search, so its
// bytes differ from ggml's and its error is somewhat larger. Each weight is
// within half its step (d sc) of the input, plus float rounding; the bounds
// are in the functions' comments and asserted by the tests.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/parallel_product.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/core/quant_gemm.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/core/weight_storage.hpp"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define KAPPA_QUANT_AVX2 1
#else
#define KAPPA_QUANT_AVX2 0
#endif
// KAPPA_QUANT_AVX512=1 (with AVX-512BW, VL and FMA) takes two blocks per
// 512-bit vector. It is off by default: 1.1x faster on blocks in L1, but no
// faster streaming the weights from memory (bench_quant on an AVX-512 VNNI
// Xeon VM: equal for 4096 x 4096, 1.25x slower for GPT-2's Q4_0 head).
#ifndef KAPPA_QUANT_AVX512
#define KAPPA_QUANT_AVX512 0
#endif
// How far ahead (bytes of P) the decode loops prefetch the weights
// (prefetch_ahead: every step of a block loop asks for the bytes it will
// read KAPPA_QUANT_PREFETCH_BYTES later). See prefetch_ahead for the numbers.
#ifndef KAPPA_QUANT_PREFETCH_BYTES
#define KAPPA_QUANT_PREFETCH_BYTES 8192
#endif
#if KAPPA_QUANT_AVX512 && \
    !(KAPPA_QUANT_AVX2 && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__FMA__))
#error "kappa: KAPPA_QUANT_AVX512=1 needs AVX-512BW, AVX-512VL and FMA (e.g. -march=native)"
#endif
// Q8_0's and Q4_0's decode loops are also built in 512 bits wherever
// AVX-512BW, VL, VNNI and FMA are (KAPPA_QUANT_Q4_0_WIDE, named for the first
// format that had it), and chosen at run time by detail::q4_0_wide(): on
// AMD's CPUs, not on Intel's (see there).
#if KAPPA_QUANT_AVX2 && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__FMA__)
#define KAPPA_QUANT_Q4_0_WIDE 1
#else
#define KAPPA_QUANT_Q4_0_WIDE 0
#endif
// Whether the 512-bit loops of Q8_0 and Q4_0 (detail::dot_wide) are built:
// where the run-time choice can take them, or where KAPPA_QUANT_AVX512 always
// does (q4_0_wide() is then true).
#if KAPPA_QUANT_AVX512 || KAPPA_QUANT_Q4_0_WIDE
#define KAPPA_QUANT_WIDE_LOOPS 1
#else
#define KAPPA_QUANT_WIDE_LOOPS 0
#endif
// Q8_0's and Q4_0's loops take the scales of 8 blocks at once
// (detail::scales8: permutes of wide loads) where AVX-512BW and VL are, and
// each block's scale on its own elsewhere (detail::dot_avx2 says why).
#if KAPPA_QUANT_AVX2 && defined(__AVX512BW__) && defined(__AVX512VL__)
#define KAPPA_QUANT_SCALES8 1
#else
#define KAPPA_QUANT_SCALES8 0
#endif

namespace kappa {

/// Weights in GGUF's Q8_0 blocks: 32 weights w_j = d q_j (q_j int8, d fp16)
/// in 34 bytes.
struct Q8_0Weights {
  static constexpr const char* kName = "q8_0";
  /// Weights per block.
  static constexpr Index kBlockWeights = quant::kBlock32;
  /// Bytes per block.
  static constexpr std::size_t kBlockBytes = quant::kBytesQ8_0;
};
/// Weights in GGUF's Q4_0 blocks: 32 weights w_j = d (q_j - 8) (q_j in
/// 0..15, d fp16) in 18 bytes.
struct Q4_0Weights {
  static constexpr const char* kName = "q4_0";
  /// Weights per block.
  static constexpr Index kBlockWeights = quant::kBlock32;
  /// Bytes per block.
  static constexpr std::size_t kBlockBytes = quant::kBytesQ4_0;
};

/// Weights in GGUF's Q4_K super-blocks: 256 weights in 8 sub-blocks of 32,
/// w = d sc_s q - dmin m_s (q 4-bit; sc_s, m_s 6-bit; d, dmin fp16) in 144
/// bytes.
struct Q4_KWeights {
  static constexpr const char* kName = "q4_K";
  /// Weights per block (super-block).
  static constexpr Index kBlockWeights = quant::kBlockK;
  /// Bytes per block.
  static constexpr std::size_t kBlockBytes = quant::kBytesQ4_K;
};
/// Weights in GGUF's Q6_K super-blocks: 256 weights in 16 groups of 16,
/// w = d sc_g (q - 32) (q 6-bit, sc_g int8, d fp16) in 210 bytes.
struct Q6_KWeights {
  static constexpr const char* kName = "q6_K";
  /// Weights per block (super-block).
  static constexpr Index kBlockWeights = quant::kBlockK;
  /// Bytes per block.
  static constexpr std::size_t kBlockBytes = quant::kBytesQ6_K;
};

namespace detail {

/// The instruction set of the block dot products in this build.
#if KAPPA_QUANT_AVX512 && defined(__AVX512VNNI__)
inline constexpr const char* kQuantDotIsa = "512-bit avx512-vnni";
#elif KAPPA_QUANT_AVX512
inline constexpr const char* kQuantDotIsa = "512-bit avx512bw";
#elif KAPPA_QUANT_AVX2 && defined(__AVX512VNNI__) && defined(__AVX512VL__)
inline constexpr const char* kQuantDotIsa = "256-bit avx512-vnni";
#elif KAPPA_QUANT_AVX2 && defined(__AVXVNNI__)
inline constexpr const char* kQuantDotIsa = "256-bit avx-vnni";
#elif KAPPA_QUANT_AVX2
inline constexpr const char* kQuantDotIsa = "256-bit avx2";
#else
inline constexpr const char* kQuantDotIsa = "portable";
#endif

/// The fp16 scale at the start of a Q8_0 or Q4_0 block, as float (exact).
inline float block_scale(const unsigned char* block) {
  return quant::fp16_to_float(quant::detail::load_u16(block));
}

/// One row of X in Q8_0 (nb blocks), unpacked for the dot products: the
/// quants x_j contiguous, the scales as float (exact), and per block and
/// lane l (elements 4 l .. 4 l + 3) the offset -8 sum x_j that Q4_0's
/// w = d (q - 8) needs (and the same with lanes 4..7 times 16 for the VNNI
/// loop of Q4_0, q4_lanes16), the same offset per block (-8 sum x_j over
/// its 32, for the 8-row loop dot8_q4_0), and per 16 elements the sum of
/// x_j (|sum| <= 2048) that Q4_K's mins and Q6_K's q - 32 need.
struct Q8Row {
  Index nb = 0;
  std::vector<std::int8_t> q;
  std::vector<float> d;
  std::vector<std::int32_t> offset;
  std::vector<std::int32_t> offset16;      // offset, lanes 4..7 times 16 (see q4_lanes16)
  std::vector<std::int32_t> block_offset;  // -8 sum x_j per block (dot8_q4_0)
  std::vector<std::int16_t> sum16;

  Q8Row() = default;
  /// From nb Q8_0 blocks of 34 bytes.
  Q8Row(const unsigned char* blocks, Index n_blocks) { assign(blocks, n_blocks); }
  void assign(const unsigned char* blocks, Index n_blocks) {
    nb = n_blocks;
    const auto n = static_cast<std::size_t>(nb);
    q.resize(32 * n);
    d.resize(n);
    offset.resize(8 * n);
    offset16.resize(8 * n);
    block_offset.resize(n);
    sum16.resize(2 * n);
    for (std::size_t b = 0; b < n; ++b, blocks += quant::kBytesQ8_0) {
      d[b] = block_scale(blocks);
      std::memcpy(q.data() + 32 * b, blocks + 2, 32);
      std::int32_t half[2] = {0, 0};
      for (std::size_t l = 0; l < 8; ++l) {
        std::int32_t sum = 0;
        for (std::size_t j = 4 * l; j < 4 * l + 4; ++j) sum += q[32 * b + j];
        offset[8 * b + l] = -8 * sum;
        offset16[8 * b + l] = (l < 4 ? -8 : -128) * sum;
        half[l / 4] += sum;
      }
      sum16[2 * b] = static_cast<std::int16_t>(half[0]);
      sum16[2 * b + 1] = static_cast<std::int16_t>(half[1]);
      block_offset[b] = -8 * (half[0] + half[1]);
    }
  }
};

/// X's rows in Q8_0 (quantize_row_q8_0, unpacked as Q8Row).
template <Scalar T>
std::vector<Q8Row> q8_rows(const ConstMatrixRef<T>& x) {
  const Index k = x.cols(), nx = k / quant::kBlock32;
  std::vector<Q8Row> xs(static_cast<std::size_t>(x.rows()));
  std::vector<float> xr(static_cast<std::size_t>(k));
  std::vector<unsigned char> blocks(static_cast<std::size_t>(nx) * quant::kBytesQ8_0);
  for (Index r = 0; r < x.rows(); ++r) {
    for (Index t = 0; t < k; ++t) xr[static_cast<std::size_t>(t)] = static_cast<float>(x(r, t));
    quant::quantize_row_q8_0(xr.data(), blocks.data(), k);
    xs[static_cast<std::size_t>(r)].assign(blocks.data(), nx);
  }
  return xs;
}

/// One row of X in ggml's Q8_K, for the decode of Q4_K rows interleaved by
/// eights (dot8_q4_k): per super-block of 256 values, m the value of
/// largest magnitude (the first on ties), d = 1 / (-127 / m) (float, not
/// rounded to fp16) and q_j = min(127, nearest(x_j (-127 / m))) (ties to
/// even), all 0 when m = 0; as ggml's quantize_row_q8_K_ref. Held unpacked:
/// the quants, the scales and the sum of each 16 quants (|.| <= 2032;
/// ggml's bsums, and Q8Row's sum16).
/// Inputs are meant to be finite (a NaN gives a quant of -127, not UB).
struct Q8KRow {
  Index nb = 0;  ///< super-blocks
  std::vector<std::int8_t> q;
  std::vector<float> d;
  std::vector<std::int16_t> sum16;

  /// From x[0..k) (k a multiple of 256).
  void assign(const float* x, Index k) {
    nb = k / quant::kBlockK;
    const auto n = static_cast<std::size_t>(k);
    q.assign(n, 0);
    d.assign(static_cast<std::size_t>(nb), 0.0f);
    sum16.assign(n / 16, 0);
    for (std::size_t i = 0; i < static_cast<std::size_t>(nb); ++i) {
      const float* xb = x + 256 * i;
      float m = 0.0f, amax = 0.0f;
      for (std::size_t j = 0; j < 256; ++j) {
        const float a = std::fabs(xb[j]);
        if (a > amax) {
          amax = a;
          m = xb[j];
        }
      }
      if (amax == 0.0f) continue;
      const float iscale = -127.0f / m;
      for (std::size_t j = 0; j < 256; ++j) {
        const float v = std::fmin(std::fmax(iscale * xb[j], -127.0f), 127.0f);
        q[256 * i + j] = static_cast<std::int8_t>(std::nearbyint(v));
      }
      d[i] = 1.0f / iscale;
    }
    for (std::size_t s = 0; s < n / 16; ++s) {
      int sum = 0;
      for (std::size_t j = 16 * s; j < 16 * s + 16; ++j) sum += q[j];
      sum16[s] = static_cast<std::int16_t>(sum);
    }
  }
};

/// X's rows in Q8_K (Q8KRow).
template <Scalar T>
std::vector<Q8KRow> q8k_rows(const ConstMatrixRef<T>& x) {
  std::vector<Q8KRow> xs(static_cast<std::size_t>(x.rows()));
  std::vector<float> xr(static_cast<std::size_t>(x.cols()));
  for (Index r = 0; r < x.rows(); ++r) {
    for (Index t = 0; t < x.cols(); ++t)
      xr[static_cast<std::size_t>(t)] = static_cast<float>(x(r, t));
    xs[static_cast<std::size_t>(r)].assign(xr.data(), x.cols());
  }
  return xs;
}

/// What the decode products of one X prepare once (see DecodeJob): its rows
/// in Q8_0, and in Q8_K for interleaved Q4_K matrices, each made by the
/// first block-format product that asks for it. It serves one X: a later
/// call with another matrix throws std::logic_error (a kappa bug, never a
/// user's input).
struct DecodeInput {
  template <Scalar T>
  const std::vector<Q8Row>& q8_rows(const ConstMatrixRef<T>& x) {
    if (!bind(x) || !made_q8) {
      q8 = detail::q8_rows<T>(x);
      made_q8 = true;
    }
    return q8;
  }
  template <Scalar T>
  const std::vector<Q8KRow>& q8k_rows(const ConstMatrixRef<T>& x) {
    if (!bind(x) || !made_q8k) {
      q8k = detail::q8k_rows<T>(x);
      made_q8k = true;
    }
    return q8k;
  }

 private:
  std::vector<Q8Row> q8;
  std::vector<Q8KRow> q8k;
  bool made_q8 = false, made_q8k = false;
  const void* of = nullptr;  ///< X's data, once a form of it is made
  Index rows = 0, cols = 0;

  /// False the first time (X is taken); true for the same X again.
  template <Scalar T>
  bool bind(const ConstMatrixRef<T>& x) {
    if (of == nullptr) {
      of = x.data();
      rows = x.rows();
      cols = x.cols();
      return false;
    }
    if (of != x.data() || rows != x.rows() || cols != x.cols())
      throw std::logic_error(
          "kappa: DecodeInput holds the quantized rows of one X, not of another");
    return true;
  }
};

/// d s + acc with one rounding where the build has FMA (both paths then
/// fuse), else with two (neither does).
inline float lane_fma(float d, float s, float acc) {
#if defined(__FMA__)
  return std::fma(d, s, acc);
#else
  const float p = d * s;
  return p + acc;
#endif
}

/// The order in which both paths add the block terms, as ggml's AVX2 code
/// does: block b's eight int32 lane sums s_l (elements 4 l .. 4 l + 3, exact)
/// become floats (exact) and d s_l (d = d_w d_x, exact in float) is added
/// to float lane l of set b mod 2 (lane_fma). The total adds the two sets
/// lane by lane, then lanes l and l + 4, then (0 + 2) + (1 + 3).
inline void lanes_add(float (&acc)[2][8], Index b, float d, const std::int32_t (&s)[8]) {
  for (int l = 0; l < 8; ++l) acc[b & 1][l] = lane_fma(d, static_cast<float>(s[l]), acc[b & 1][l]);
}
inline float lanes_total(const float (&acc)[2][8]) {
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = acc[0][l] + acc[1][l];
  float u[4];
  for (int i = 0; i < 4; ++i) u[i] = t[i] + t[i + 4];
  return (u[0] + u[2]) + (u[1] + u[3]);
}

/// Sum over blocks of d_w d_x (sum_j w_j x_j) for a row of Q8_0 weight
/// blocks `w` and X's row `x`, portable scalar code.
inline float dot_q8_0_portable(const unsigned char* w, const Q8Row& x) {
  float acc[2][8] = {};
  for (Index b = 0; b < x.nb; ++b, w += quant::kBytesQ8_0) {
    const std::int8_t* xq = x.q.data() + 32 * b;
    std::int32_t s[8];
    for (int l = 0; l < 8; ++l) {
      std::int32_t sum = 0;
      for (int j = 4 * l; j < 4 * l + 4; ++j)
        sum += static_cast<std::int32_t>(static_cast<std::int8_t>(w[2 + j])) * xq[j];
      s[l] = sum;
    }
    lanes_add(acc, b, block_scale(w) * x.d[static_cast<std::size_t>(b)], s);
  }
  return lanes_total(acc);
}

/// As dot_q8_0_portable for Q4_0 weight blocks: w_j = d (q_j - 8), element
/// j < 16 the low nibble of qs[j], element j + 16 its high nibble; the
/// integer sums are sum q_j x_j plus X's offset -8 sum x_j.
inline float dot_q4_0_portable(const unsigned char* w, const Q8Row& x) {
  float acc[2][8] = {};
  for (Index b = 0; b < x.nb; ++b, w += quant::kBytesQ4_0) {
    const std::int8_t* xq = x.q.data() + 32 * b;
    std::int32_t s[8];
    for (int l = 0; l < 8; ++l) {
      std::int32_t sum = x.offset[static_cast<std::size_t>(8 * b + l)];
      for (int j = 4 * l; j < 4 * l + 4; ++j) {
        const int q = j < 16 ? (w[2 + j] & 0x0F) : (w[2 + j - 16] >> 4);
        sum += static_cast<std::int32_t>(q) * xq[j];
      }
      s[l] = sum;
    }
    lanes_add(acc, b, block_scale(w) * x.d[static_cast<std::size_t>(b)], s);
  }
  return lanes_total(acc);
}

/// Q4_K's eight 6-bit scales sc_s and mins m_s of a super-block (its 12
/// packed bytes at `packed`).
inline void q4_k_scales_mins(const unsigned char* packed, std::int32_t (&sc)[8],
                             std::int32_t (&m)[8]) {
  for (int s = 0; s < 8; ++s) {
    std::uint8_t a = 0, b = 0;
    quant::detail::q4_k_scale_min(s, packed, a, b);
    sc[s] = a;
    m[s] = b;
  }
}

/// The shared float step of the k-quant dot products (both paths, one
/// order): lane s += (scale dx_s) I_s with one lane_fma, for the 8
/// sub-blocks s of a super-block (dx: X's 8 block scales).
inline void kq_lanes_add(float (&acc)[8], float scale, const float* dx,
                         const std::int32_t (&ints)[8]) {
  for (int s = 0; s < 8; ++s) acc[s] = lane_fma(scale * dx[s], static_cast<float>(ints[s]), acc[s]);
}

/// The exact int32s of one Q4_K super-block `w` against X's 256 quants `xq`
/// and their per-16 sums `xs`: I_s = sc_s sum q x, M_s = m_s sum x. In
/// sub-block pair p (qs[32 p .. 32 p + 32)) the low nibbles are sub-block
/// 2 p, the high nibbles 2 p + 1.
inline void q4_k_ints_portable(const unsigned char* w, const std::int8_t* xq,
                               const std::int16_t* xs, std::int32_t (&ints)[8],
                               std::int32_t (&mins)[8]) {
  std::int32_t sc[8], m[8];
  q4_k_scales_mins(w + 4, sc, m);
  const unsigned char* qs = w + 16;
  for (int s = 0; s < 8; ++s) {
    const unsigned char* qp = qs + std::ptrdiff_t{32} * (s / 2);
    const int shift = 4 * (s & 1);
    std::int32_t sum = 0;
    for (int l = 0; l < 32; ++l)
      sum += static_cast<std::int32_t>((qp[l] >> shift) & 0x0F) * xq[32 * s + l];
    ints[s] = sc[s] * sum;
    mins[s] = m[s] * (static_cast<std::int32_t>(xs[std::ptrdiff_t{2} * s]) +
                      xs[std::ptrdiff_t{2} * s + 1]);
  }
}

/// The exact int32s of one Q6_K super-block `w` against X's 256 quants:
/// I_s = sc_{2s} sum_lo (q - 32) x + sc_{2s+1} sum_hi (q - 32) x over the two
/// groups of 16 of sub-block s. Sub-block s = 4 h + j (h the half of 128):
/// element l (0..31) has low bits ql[64 h + l + 32 (j & 1)] (the low nibble
/// for j < 2, the high one for j >= 2) and high bits (qh[32 h + l] >> 2 j) & 3.
inline void q6_k_ints_portable(const unsigned char* w, const std::int8_t* xq,
                               std::int32_t (&ints)[8]) {
  for (int s = 0; s < 8; ++s) {
    const int h = s / 4, j = s % 4;
    const unsigned char* ql = w + std::ptrdiff_t{64} * h + std::ptrdiff_t{32} * (j & 1);
    const unsigned char* qh = w + 128 + std::ptrdiff_t{32} * h;
    std::int32_t sum[2] = {0, 0};
    for (int l = 0; l < 32; ++l) {
      const int low = (ql[l] >> (4 * (j / 2))) & 0x0F;
      const int q = low | (((qh[l] >> (2 * j)) & 3) << 4);
      sum[l / 16] += (q - 32) * xq[32 * s + l];
    }
    const auto sc_lo = static_cast<std::int8_t>(w[192 + 2 * s]);
    const auto sc_hi = static_cast<std::int8_t>(w[192 + 2 * s + 1]);
    ints[s] = sc_lo * sum[0] + sc_hi * sum[1];
  }
}

/// Sum over sub-blocks of (d dx_s) I_s - (dmin dx_s) M_s for a row of Q4_K
/// super-blocks `w` and X's row `x` (x.nb = 8 per super-block), portable.
inline float dot_q4_k_portable(const unsigned char* w, const Q8Row& x) {
  float acc[2][8] = {};
  for (Index i = 0; i < x.nb / 8; ++i, w += quant::kBytesQ4_K) {
    const auto at = static_cast<std::size_t>(8 * i);
    std::int32_t ints[8], mins[8];
    q4_k_ints_portable(w, x.q.data() + 32 * at, x.sum16.data() + 2 * at, ints, mins);
    const float d = block_scale(w);
    const float dmin = quant::fp16_to_float(quant::detail::load_u16(w + 2));
    kq_lanes_add(acc[i & 1], d, x.d.data() + at, ints);
    kq_lanes_add(acc[i & 1], -dmin, x.d.data() + at, mins);
  }
  return lanes_total(acc);
}

/// Sum over sub-blocks of (d dx_s) I_s for a row of Q6_K super-blocks `w`
/// and X's row `x`, portable.
inline float dot_q6_k_portable(const unsigned char* w, const Q8Row& x) {
  float acc[2][8] = {};
  for (Index i = 0; i < x.nb / 8; ++i, w += quant::kBytesQ6_K) {
    const auto at = static_cast<std::size_t>(8 * i);
    std::int32_t ints[8];
    q6_k_ints_portable(w, x.q.data() + 32 * at, ints);
    const float d = quant::fp16_to_float(quant::detail::load_u16(w + 208));
    kq_lanes_add(acc[i & 1], d, x.d.data() + at, ints);
  }
  return lanes_total(acc);
}

#if KAPPA_QUANT_AVX2
/// The fp16 scale of a block with F16C (exact, as block_scale).
inline float block_scale_f16c(const unsigned char* block) {
  return _cvtsh_ss(quant::detail::load_u16(block));
}

/// acc += s + offset: u8 a times s8 b, summed four by four into eight int32
/// lanes (lane l: elements 4 l .. 4 l + 3). Every pair of products stays
/// within int16 for the maddubs path (|a| <= 128, |b| <= 127).
inline __m256i lane_dot_u8s8(__m256i offset, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(offset, a, b);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(offset, a, b);
#else
  return _mm256_add_epi32(offset,
                          _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
#endif
}

/// lanes_total of the two vector sets.
inline float lanes_total_avx2(__m256 acc0, __m256 acc1) {
  const __m256 t = _mm256_add_ps(acc0, acc1);
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));  // (u0 + u2, u1 + u3)
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
}

/// Block b of a Q8_0 row against X: the sign trick, |w| times x with w's sign.
inline __m256i q8_lanes(const unsigned char* w, const std::int8_t* xq) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  return lane_dot_u8s8(_mm256_setzero_si256(), _mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
}
/// Block b of a Q4_0 row against X: the nibbles q (0..15) in element order
/// times x, plus the offset -8 sum x.
inline __m256i q4_lanes(const unsigned char* w, const std::int8_t* xq, const std::int32_t* off) {
  // The 16 bytes in both halves (a load, no shuffle), the upper half's
  // shifted by 4 (per 64 bits, whose stray bits the mask drops).
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
  const __m256i q = _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_setr_epi64x(0, 0, 4, 4)),
                                     _mm256_set1_epi8(0x0F));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  return lane_dot_u8s8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(off)), q, xv);
}

/// Asks for the kStep bytes that a decode loop's step at `w` will read
/// KAPPA_QUANT_PREFETCH_BYTES later (one prefetch per 64-byte line, with
/// KAPPA_WEIGHT_PREFETCH_HINT: non-temporal by default, see
/// kappa/core/weight_storage.hpp). Each step of the block loops calls it,
/// so the requests go out at the pace the weights are consumed and run on
/// across rows (the rows of P are contiguous). At a matrix's end it asks
/// for bytes past it: a prefetch never faults, and the address is formed as
/// an integer.
/// Why per step: the loop used to prefetch each row a row ahead in one burst
/// (18 prefetches for LLaMA-1B's Q4_K rows, 72 for its down projection);
/// the burst filled the miss buffers and stalled the loop on them. On an AMD
/// EPYC VM (1 thread, LLaMA-1B's Q4_K products in sequence, 584 MB, three
/// alternating rounds) the per-step prefetch reached 0.79-0.82 of a plain
/// read of the same bytes where the burst reached 0.66-0.69 (the down
/// projection: 14 -> 21-25 GB/s), and no software prefetch at all 0.79-0.82
/// (benchmarks/README.md, "Prefetch per loop step").
template <std::size_t kStep>
inline void prefetch_ahead(const unsigned char* w) {
  const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(w) + KAPPA_QUANT_PREFETCH_BYTES;
  for (std::size_t b = 0; b < kStep; b += 64)
    _mm_prefetch(reinterpret_cast<const char*>(at + b), KAPPA_WEIGHT_PREFETCH_HINT);
}

#if KAPPA_QUANT_SCALES8
/// The scales d_w d_x of 8 Q4_0 or Q8_0 blocks starting at `w` (block stride
/// kW bytes): the 8 fp16 d_w permuted out of 128-byte loads, widened with
/// F16C (exact) and multiplied by X's 8 scales: the same floats as
/// block_scale(w) * d_x one by one. (Without AVX-512BW the loops take each
/// block's scale on its own: dot_avx2 says why.)
template <Index kW>
inline __m256 scales8(const unsigned char* w, const float* xd) {
  static_assert(kW == static_cast<Index>(quant::kBytesQ4_0) ||
                kW == static_cast<Index>(quant::kBytesQ8_0));
  if constexpr (kW == static_cast<Index>(quant::kBytesQ4_0)) {
    // Q4_0: the scales are the 16-bit words 0, 9, .., 63 of the 128 bytes
    // at w, picked by two permutes of 64 bytes each (a gather took about a
    // quarter of Q4_0's decode time on an AVX-512 Xeon).
    const auto ld = [w](int at) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + at));
    };
#if defined(__AVX512VBMI__)
    // Byte permutes: one instruction where the word ones take two or three.
    const __m256i idx = _mm256_setr_epi8(0, 1, 18, 19, 36, 37, 54, 55, 8, 9, 26, 27, 44, 45, 62, 63,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128i lo = _mm256_castsi256_si128(_mm256_permutex2var_epi8(ld(0), idx, ld(32)));
    const __m128i hi = _mm256_castsi256_si128(_mm256_permutex2var_epi8(ld(64), idx, ld(96)));
#else
    const __m256i idx = _mm256_setr_epi16(0, 9, 18, 27, 4, 13, 22, 31, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128i lo = _mm256_castsi256_si128(_mm256_permutex2var_epi16(ld(0), idx, ld(32)));
    const __m128i hi = _mm256_castsi256_si128(_mm256_permutex2var_epi16(ld(64), idx, ld(96)));
#endif
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_blend_epi32(lo, hi, 0x0C)), _mm256_loadu_ps(xd));
  } else {
    // Q8_0: the scales are the 16-bit words 0, 17, 34, 51 of the 128 bytes
    // at w and 4, 21, 38, 55 of the next 128 (8 blocks span 272 bytes):
    // two word permutes of 128 bytes each instead of a gather. GPT-2
    // small's decode step in Q8_0 on an AMD EPYC VM, old and new builds
    // alternated: 1.10x on 1 thread, 1.16x on 2.
    const auto ld = [w](int at) { return _mm512_loadu_si512(w + at); };
    const __m512i idx = _mm512_zextsi128_si512(_mm_setr_epi16(0, 17, 34, 51, 4, 21, 38, 55));
    const __m128i lo = _mm512_castsi512_si128(_mm512_permutex2var_epi16(ld(0), idx, ld(64)));
    const __m128i hi = _mm512_castsi512_si128(_mm512_permutex2var_epi16(ld(128), idx, ld(192)));
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_blend_epi32(lo, hi, 0x0C)), _mm256_loadu_ps(xd));
  }
}
#endif

/// acc += d s (d: one scale in every lane).
inline void lanes_add_avx2(__m256& acc, __m256 d, __m256i s) {
#if defined(__FMA__)
  acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
#else
  acc = _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(s)), acc);
#endif
}

#if KAPPA_QUANT_WIDE_LOOPS
/// acc + (u8 a times s8 b, summed four by four into 16 int32 lanes).
inline __m512i lane_dot_u8s8_512(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(acc, a, b);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1)));
#endif
}
/// Blocks b (at w) and b + 1 (at w + 34) of a Q8_0 row in one 512-bit
/// vector: block b's eight lane sums in lanes 0..7, block b + 1's in 8..15.
/// The sign trick without vpsignb: |w| and x negated where w < 0.
inline __m512i q8_lanes2(const unsigned char* w, const std::int8_t* xq) {
  const __m512i wv = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + quant::kBytesQ8_0 + 2)), 1);
  const __m512i xv = _mm512_loadu_si512(xq);
  const __m512i sx = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), _mm512_setzero_si512(), xv);
  return lane_dot_u8s8_512(_mm512_setzero_si512(), _mm512_abs_epi8(wv), sx);
}
/// Blocks b and b + 1 of a Q4_0 row in one 512-bit vector: each block's
/// 16 bytes twice, the second copy shifted by 4, masked to nibbles.
inline __m512i q4_lanes2(const unsigned char* w, const std::int8_t* xq, const std::int32_t* off) {
  const __m512i t = _mm512_mask_broadcast_i32x4(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2))),
      static_cast<__mmask16>(0xFF00),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + quant::kBytesQ4_0 + 2)));
  const __m512i q = _mm512_and_si512(
      _mm512_srlv_epi64(t, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
  return lane_dot_u8s8_512(_mm512_loadu_si512(off), q, _mm512_loadu_si512(xq));
}
#endif

#if KAPPA_QUANT_WIDE_LOOPS
/// dot_avx2's loop with two blocks per 512-bit vector (block b's lanes in
/// 0..7, which are set 0's, block b + 1's in 8..15, set 1's), groups of 8
/// blocks with their scales from scales8, then the last blocks one by one.
/// Measured and not taken (AMD EPYC VM, 1 thread, the old and new builds
/// alternated 3-5 times): Q4_0 without the shift (q4_lanes16's trick in 512
/// bits) was 1.12x on bench_quant's 4096 x 4096 and 1.08x on GPT-2's head
/// but 0.87x on 2048 x 8192 and about 0.9x on GPT-2 small's whole decode
/// step; adding two rows of P per pass (two independent FMA chains, X's
/// loads shared, the same bits) gave Q4_0 1.0-1.04x over the old loop
/// (medians of three rounds) and Q8_0 0.65-0.8x on GPT-2's head.
template <Index kW, class Lanes, class Lanes2>
inline float dot_wide(const unsigned char* w, const Q8Row& x, Lanes lanes, Lanes2 lanes2) {
  const float* xd = x.d.data();
  Index b = 0;
  __m512 acc = _mm512_setzero_ps();
  const __m512i upper = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (; b + 8 <= x.nb; b += 8, w += 8 * kW) {
    prefetch_ahead<8 * kW>(w);
    const __m512 d8 = _mm512_castps256_ps512(scales8<kW>(w, xd + b));
    for (int i = 0; i < 8; i += 2) {
      const __m512i s = lanes2(w + i * kW, b + i);
      const __m512 d = _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set1_epi32(i), upper), d8);
      acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
    }
  }
  __m256 acc0 = _mm512_castps512_ps256(acc);
  __m256 acc1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  for (; b < x.nb; ++b, w += kW) {
    const __m256i s = lanes(w, b);
    const __m256 d = _mm256_set1_ps(block_scale_f16c(w) * xd[static_cast<std::size_t>(b)]);
    if (b & 1)
      lanes_add_avx2(acc1, d, s);
    else
      lanes_add_avx2(acc0, d, s);
  }
  return lanes_total_avx2(acc0, acc1);
}
#endif

/// The loop of the AVX2 dot products over the blocks of a weight row `w`
/// (kW bytes per block): groups of 8 blocks, then the last blocks one by
/// one; block b into set b mod 2 (lanes_add's order). lanes(w_b, b) gives
/// block b's eight int32 lane sums. (dot_wide is the 512-bit loop.)
template <Index kW, class Lanes>
inline float dot_avx2(const unsigned char* w, const Q8Row& x, Lanes lanes) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  const float* xd = x.d.data();
  Index b = 0;
  for (; b + 8 <= x.nb; b += 8, w += 8 * kW) {
    prefetch_ahead<8 * kW>(w);
#if KAPPA_QUANT_SCALES8
    // The 8 scales at once, permuted out of 128-byte loads (scales8).
    const __m256 d8 = scales8<kW>(w, xd + b);
    const auto scale = [&d8](int i) { return _mm256_permutevar8x32_ps(d8, _mm256_set1_epi32(i)); };
#else
    // Each block's scale on its own (F16C on one word, a scalar multiply, a
    // broadcast). The 8 scales used to be gathered (_mm256_i32gather_epi32)
    // and widened at once; on an AMD EPYC VM (Zen 3, AVX2 alone, 1 thread,
    // 4096 x 4096 in L3) that held Q4_0's and Q8_0's loops to ~12 G
    // weights/s, and this loop runs Q4_0 at ~20 and Q8_0 at ~16 (bench_quant:
    // 1.3-1.6x); _mm_insert_epi16 of the 8 words gave ~19. Same floats.
    const auto scale = [w, xd, b](int i) {
      return _mm256_set1_ps(block_scale_f16c(w + i * kW) * xd[static_cast<std::size_t>(b + i)]);
    };
#endif
    for (int i = 0; i < 8; i += 2) {
      const __m256i s0 = lanes(w + i * kW, b + i);
      const __m256i s1 = lanes(w + (i + 1) * kW, b + i + 1);
      lanes_add_avx2(acc0, scale(i), s0);
      lanes_add_avx2(acc1, scale(i + 1), s1);
    }
  }
  for (; b < x.nb; ++b, w += kW) {
    const __m256i s = lanes(w, b);
    const __m256 d = _mm256_set1_ps(block_scale_f16c(w) * xd[static_cast<std::size_t>(b)]);
    if (b & 1)
      lanes_add_avx2(acc1, d, s);
    else
      lanes_add_avx2(acc0, d, s);
  }
  return lanes_total_avx2(acc0, acc1);
}

#if KAPPA_QUANT_WIDE_LOOPS
inline bool q4_0_wide();  // (below)
/// dot_q8_0_portable with two blocks per 512-bit vector (dot_wide; bit for
/// bit the same result).
inline float dot_q8_0_wide(const unsigned char* w, const Q8Row& x) {
  const std::int8_t* xq = x.q.data();
  return dot_wide<static_cast<Index>(quant::kBytesQ8_0)>(
      w, x, [xq](const unsigned char* wb, Index b) { return q8_lanes(wb, xq + 32 * b); },
      [xq](const unsigned char* wb, Index b) { return q8_lanes2(wb, xq + 32 * b); });
}
#endif

/// dot_q8_0_portable in dot_avx2's loop (bit for bit the same result).
inline float dot_q8_0_narrow(const unsigned char* w, const Q8Row& x) {
  const std::int8_t* xq = x.q.data();
  return dot_avx2<static_cast<Index>(quant::kBytesQ8_0)>(
      w, x, [xq](const unsigned char* wb, Index b) { return q8_lanes(wb, xq + 32 * b); });
}

/// dot_q8_0_portable with AVX2 / AVX-512 / VNNI (bit for bit the same
/// result): the 512-bit loop where q4_0_wide() says so, else dot_avx2's.
inline float dot_q8_0_avx2(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_WIDE_LOOPS
  if (q4_0_wide()) return dot_q8_0_wide(w, x);
#endif
  return dot_q8_0_narrow(w, x);
}

#if !KAPPA_QUANT_AVX512 && \
    ((defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__))
/// Block b of a Q4_0 row against X for the VNNI loop, without a shift: the
/// 16 bytes in both halves, masked to the low nibbles in the lower half and
/// the high nibbles (16 q) in the upper one, plus offset16: lanes 4..7 are
/// 16 times block b's lane sums (exact: |16 s| <= 16 * 4 * 8 * 128). (VNNI
/// only: _mm256_maddubs_epi16 would saturate with 16 q up to 240.)
inline __m256i q4_lanes16(const unsigned char* w, const std::int8_t* xq, const std::int32_t* off) {
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
  const __m256i q =
      _mm256_and_si256(t, _mm256_setr_epi64x(0x0F0F0F0F0F0F0F0F, 0x0F0F0F0F0F0F0F0F,
                                             static_cast<long long>(0xF0F0F0F0F0F0F0F0u),
                                             static_cast<long long>(0xF0F0F0F0F0F0F0F0u)));
  return lane_dot_u8s8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(off)), q,
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
}

/// dot_q4_0_portable with VNNI (bit for bit the same result), with
/// q4_lanes16: lanes 4..7 of every block are 16 s_l, so lanes 4..7 of the
/// two float sets accumulate lane_fma(d, 16 s_l, 16 acc) = 16 lane_fma(d,
/// s_l, acc) exactly (scaling by 16 commutes with rounding: every value is
/// a multiple of 2^-48, the smallest product of two fp16 scales, so none is
/// subnormal, and none comes near overflow), and one exact multiply by
/// 1 / 16 at the end gives lanes_add's sets bit for bit. Per chunk of 64
/// blocks the scales d = d_w d_x are computed first (8 at a time) into a
/// buffer, so that each block takes its scale with a broadcast load.
inline float dot_q4_0_vnni(const unsigned char* w, const Q8Row& x) {
  constexpr Index kW = static_cast<Index>(quant::kBytesQ4_0);
  constexpr Index kChunk = 64;  // even: block b0 + i has the parity of i
  const std::int8_t* xq = x.q.data();
  const std::int32_t* off = x.offset16.data();
  const float* xd = x.d.data();
  alignas(32) float d[kChunk];
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  for (Index b0 = 0; b0 < x.nb; b0 += kChunk, w += kChunk * kW) {
    const Index n = std::min(kChunk, x.nb - b0);
    Index i = 0;
    for (; i + 8 <= n; i += 8) {
      prefetch_ahead<8 * kW>(w + i * kW);
#if KAPPA_QUANT_SCALES8
      _mm256_store_ps(d + i, scales8<kW>(w + i * kW, xd + b0 + i));
#else
      for (Index j = i; j < i + 8; ++j) d[j] = block_scale_f16c(w + j * kW) * xd[b0 + j];
#endif
    }
    for (; i < n; ++i) d[i] = block_scale_f16c(w + i * kW) * xd[b0 + i];
    const std::int8_t* xb = xq + 32 * b0;
    const std::int32_t* ob = off + 8 * b0;
    for (i = 0; i + 2 <= n; i += 2) {
      const __m256i s0 = q4_lanes16(w + i * kW, xb + 32 * i, ob + 8 * i);
      const __m256i s1 = q4_lanes16(w + (i + 1) * kW, xb + 32 * (i + 1), ob + 8 * (i + 1));
      lanes_add_avx2(acc0, _mm256_broadcast_ss(d + i), s0);
      lanes_add_avx2(acc1, _mm256_broadcast_ss(d + i + 1), s1);
    }
    if (i < n)
      lanes_add_avx2(acc0, _mm256_broadcast_ss(d + i),
                     q4_lanes16(w + i * kW, xb + 32 * i, ob + 8 * i));
  }
  const __m256 unscale = _mm256_setr_ps(1.0f, 1.0f, 1.0f, 1.0f, 0.0625f, 0.0625f, 0.0625f, 0.0625f);
  return lanes_total_avx2(_mm256_mul_ps(acc0, unscale), _mm256_mul_ps(acc1, unscale));
}
#endif

#if KAPPA_QUANT_WIDE_LOOPS
/// dot_q4_0_portable with two blocks per 512-bit vector (dot_wide; bit for
/// bit the same result).
inline float dot_q4_0_wide(const unsigned char* w, const Q8Row& x) {
  const std::int8_t* xq = x.q.data();
  const std::int32_t* off = x.offset.data();
  return dot_wide<static_cast<Index>(quant::kBytesQ4_0)>(
      w, x,
      [xq, off](const unsigned char* wb, Index b) {
        return q4_lanes(wb, xq + 32 * b, off + 8 * b);
      },
      [xq, off](const unsigned char* wb, Index b) {
        return q4_lanes2(wb, xq + 32 * b, off + 8 * b);
      });
}

/// Whether the Q4_0 and Q8_0 decodes take dot_q4_0_wide / dot_q8_0_wide:
/// on AMD's CPUs (Zen 4 and later, AMD's CPUs with AVX-512), not on Intel's.
/// Whole-model decode of GPT-2 small in Q4_0 on an AMD EPYC VM (AVX-512
/// VNNI): 1.19-1.31x on 1 thread, 1.16-1.24x on 2, the two builds
/// alternated; on an AVX-512 Xeon VM the wide loop was no faster streaming
/// weights from memory and 1.25x slower on GPT-2's head. Q8_0's wide loop
/// was 0.97-0.98x on that AMD VM while both loops gathered their scales;
/// with the scales permuted (scales8) it is 1.2-1.3x faster there (bench_quant,
/// 1 thread, three alternating rounds). The same bits either way.
inline bool q4_0_wide() {
#if KAPPA_QUANT_AVX512
  return true;
#else
  static const bool wide = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return wide;
#endif
}
#endif

/// dot_q4_0_portable with AVX2 / AVX-512 / VNNI (bit for bit the same
/// result): the 512-bit loop where q4_0_wide() says so, else VNNI's
/// 256-bit loop (dot_q4_0_vnni) where the build has VNNI, else dot_avx2's.
inline float dot_q4_0_avx2(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_WIDE_LOOPS
  if (q4_0_wide()) return dot_q4_0_wide(w, x);
#endif
#if !KAPPA_QUANT_AVX512 && \
    ((defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__))
  return dot_q4_0_vnni(w, x);
#else
  const std::int8_t* xq = x.q.data();
  const std::int32_t* off = x.offset.data();
  return dot_avx2<static_cast<Index>(quant::kBytesQ4_0)>(
      w, x, [xq, off](const unsigned char* wb, Index b) {
        return q4_lanes(wb, xq + 32 * b, off + 8 * b);
      });
#endif
}

/// The sums of four lanes of v0..v3: [lo(v0) lo(v1) lo(v2) lo(v3) | hi(v0)
/// hi(v1) hi(v2) hi(v3)], lo = lanes 0..3, hi = lanes 4..7 (integer adds:
/// exact in any order).
inline __m256i hsum4_halves(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
}

/// acc += a b in float lanes with lane_fma's rounding.
inline __m256 kq_fma(__m256 a, __m256i b, __m256 acc) {
#if defined(__FMA__)
  return _mm256_fmadd_ps(a, _mm256_cvtepi32_ps(b), acc);
#else
  return _mm256_add_ps(_mm256_mul_ps(a, _mm256_cvtepi32_ps(b)), acc);
#endif
}

/// acc - a b in float lanes: the same float as kq_fma(-a, b, acc) (the
/// negation is exact and rounding is symmetric), one instruction fewer.
inline __m256 kq_fnma(__m256 a, __m256i b, __m256 acc) {
#if defined(__FMA__)
  return _mm256_fnmadd_ps(a, _mm256_cvtepi32_ps(b), acc);
#else
  return _mm256_sub_ps(acc, _mm256_mul_ps(a, _mm256_cvtepi32_ps(b)));
#endif
}

/// Q4_K's 6-bit scales and mins of a super-block `w` as the bytes
/// [sc_0..7, m_0..7], unpacked from their 12 bytes as 32-bit words u0, u1,
/// u2 in one vector: sc_0..3 = the low 6 bits of u0's bytes, m_0..3 of u1's;
/// sc_4..7 = the low nibbles of u2's bytes with the top 2 bits of u0's above
/// them, m_4..7 the high nibbles of u2's with those of u1's.
inline __m128i q4_k_scales_mins_avx2(const unsigned char* w) {
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 4));  // u0 u1 u2 -
  const __m128i low = _mm_and_si128(
      _mm_srlv_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4)),
      _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));  // u0 u2 u1 u2>>4
  const __m128i top =
      _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                    _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, top);
}

/// One Q4_K super-block against X's 256 quants at xq (and per-16 sums xs),
/// into acc: kq_lanes_add(d, I) then kq_lanes_add(-dmin, M), as
/// dot_q4_k_portable. The int32s without horizontal adds or 32-bit
/// multiplies: each lane of a sub-block's dot product (4 products, |.| <=
/// 4 * 15 * 128) fits int16, so the eight sub-blocks' lanes are packed
/// (_mm256_packs_epi32, no saturation) and summed pairwise by
/// _mm256_madd_epi16, first with ones (8 products, then 16: |.| <= 30720),
/// then with sc_s in both int16s of a pair, which gives sc_s times each half
/// of sub-block s; the two halves' sum is I_s. M_s is _mm256_madd_epi16 of
/// X's per-16 sums with m_s in both int16s. All exact, the same int32s as
/// the portable loop.
inline __m256 q4_k_block_avx2(const unsigned char* w, const std::int8_t* xq, const std::int16_t* xs,
                              const float* dx, __m256 acc) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i v[8];
  for (int p = 0; p < 4; ++p) {
    const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * p));
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 64 * p));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 64 * p + 32));
    v[2 * p] = lane_dot_u8s8(zero, _mm256_and_si256(qv, nibble), x0);
    v[2 * p + 1] = lane_dot_u8s8(zero, _mm256_and_si256(_mm256_srli_epi16(qv, 4), nibble), x1);
  }
  // Per 128-bit half: [a_s b_s a_t b_t] with a, b the sums of lanes (0, 1)
  // and (2, 3) of that half, for the pairs (s, t) = (0, 1), (2, 3), ...
  const __m256i w01 = _mm256_madd_epi16(_mm256_packs_epi32(v[0], v[1]), ones);
  const __m256i w23 = _mm256_madd_epi16(_mm256_packs_epi32(v[2], v[3]), ones);
  const __m256i w45 = _mm256_madd_epi16(_mm256_packs_epi32(v[4], v[5]), ones);
  const __m256i w67 = _mm256_madd_epi16(_mm256_packs_epi32(v[6], v[7]), ones);
  const __m256i sm = _mm256_broadcastsi128_si256(q4_k_scales_mins_avx2(w));
  const __m256i sc0123 = _mm256_shuffle_epi8(
      sm, _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1, 0, -1, 0, -1, 1,
                           -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1));
  const __m256i sc4567 = _mm256_shuffle_epi8(
      sm, _mm256_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1, 4, -1, 4, -1, 5,
                           -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1));
  const __m256i m_pairs = _mm256_shuffle_epi8(
      sm, _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1, 12, -1, 12,
                           -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1));
  // [sc_s lo_s, s = 0..3 | sc_s hi_s, s = 0..3] (lo, hi: sub-block s's
  // elements 0..15 and 16..31), and the same for s = 4..7.
  const __m256i a = _mm256_madd_epi16(_mm256_packs_epi32(w01, w23), sc0123);
  const __m256i b = _mm256_madd_epi16(_mm256_packs_epi32(w45, w67), sc4567);
  const __m256i ints = _mm256_add_epi32(_mm256_blend_epi32(a, b, 0xF0),
                                        _mm256_permute2x128_si256(a, b, 0x21));  // I_s
  const __m256i mins = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)),
                                         m_pairs);  // M_s
  // [d dmin d dmin ...] from one 32-bit broadcast (F16C, exact).
  std::uint32_t dd = 0;
  std::memcpy(&dd, w, 4);
  const __m256 ddmin = _mm256_cvtph_ps(_mm_set1_epi32(static_cast<int>(dd)));
  const __m256 dx8 = _mm256_loadu_ps(dx);
  const __m256 d = _mm256_mul_ps(_mm256_shuffle_ps(ddmin, ddmin, 0x00), dx8);
  const __m256 dmin = _mm256_mul_ps(_mm256_shuffle_ps(ddmin, ddmin, 0x55), dx8);
  acc = kq_fma(d, ints, acc);
  return kq_fnma(dmin, mins, acc);
}

/// One Q6_K super-block against X's 256 quants into acc, as
/// dot_q6_k_portable: q = low | high << 4 unpacked per half, sum q x per
/// group of 16 (hsum4_halves), times the int8 scales, then minus
/// 32 (sc_lo sum_lo x + sc_hi sum_hi x) (_mm256_madd_epi16 of the scales and
/// X's per-16 sums).
inline __m256 q6_k_block_avx2(const unsigned char* w, const std::int8_t* xq, const std::int16_t* xs,
                              const float* dx, __m256 acc) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(0x30);
  const __m256i zero = _mm256_setzero_si256();
  __m256i v[8];
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * h));
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(ql0, nibble),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 4), two)),
        _mm256_or_si256(_mm256_and_si256(ql1, nibble),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), two)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), nibble),
                        _mm256_and_si256(qh, two)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), nibble),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), two)),
    };
    for (int j = 0; j < 4; ++j)
      v[4 * h + j] = lane_dot_u8s8(
          zero, q[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 128 * h + 32 * j)));
  }
  // [lo_0..3 | hi_0..3] and [lo_4..7 | hi_4..7]: sum q x per group of 16.
  const __m256i a = hsum4_halves(v[0], v[1], v[2], v[3]);
  const __m256i b = hsum4_halves(v[4], v[5], v[6], v[7]);
  const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192));
  const __m128i sc_split = _mm_shuffle_epi8(
      sc_bytes, _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
  const __m256i as = _mm256_mullo_epi32(a, _mm256_cvtepi8_epi32(sc_split));
  const __m256i bs = _mm256_mullo_epi32(b, _mm256_cvtepi8_epi32(_mm_srli_si128(sc_split, 8)));
  const __m256i scaled = _mm256_add_epi32(_mm256_permute2x128_si256(as, bs, 0x20),
                                          _mm256_permute2x128_si256(as, bs, 0x31));
  const __m256i offset = _mm256_madd_epi16(
      _mm256_cvtepi8_epi16(sc_bytes), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
  const __m256i ints = _mm256_sub_epi32(scaled, _mm256_slli_epi32(offset, 5));
  const __m256 d = _mm256_mul_ps(_mm256_set1_ps(block_scale_f16c(w + 208)), _mm256_loadu_ps(dx));
  return kq_fma(d, ints, acc);
}

/// The loop of the k-quant AVX2 dot products: super-block i into set
/// i mod 2, as the portable code.
template <std::size_t kW, class Block>
inline float dot_k_avx2(const unsigned char* w, const Q8Row& x, Block block) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const Index n = x.nb / 8;
  for (Index i = 0; i < n; ++i, w += kW) {
    prefetch_ahead<kW>(w);
    const auto at = static_cast<std::size_t>(8 * i);
    acc[i & 1] =
        block(w, x.q.data() + 32 * at, x.sum16.data() + 2 * at, x.d.data() + at, acc[i & 1]);
  }
  return lanes_total_avx2(acc[0], acc[1]);
}

#if KAPPA_QUANT_Q4_0_WIDE
/// q4_k_block_avx2 on two super-blocks at once: w (block i) in the lower
/// 256 bits of every vector, w + 144 (block i + 1) in the upper, with X's
/// quants, per-16 sums and scales of both (xq, xq + 256; 32 sums at xs; 16
/// scales at dx). Each half computes what q4_k_block_avx2 computes for its
/// block, instruction for instruction (the byte shuffles, packs and madds
/// work within 128 bits; the one cross-lane step is done per half), so acc's
/// lower half is acc[0] of dot_k_avx2 and its upper half acc[1]: the same
/// bits, with about half the instructions per block.
inline __m512 q4_k_pair_wide(const unsigned char* w, const std::int8_t* xq, const std::int16_t* xs,
                             const float* dx, __m512 acc) {
  constexpr int kNext = static_cast<int>(quant::kBytesQ4_K);
  const auto two = [](const void* lo, const void* hi) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
        _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
  };
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi16(1);
  __m512i v[8];
  for (int p = 0; p < 4; ++p) {
    const __m512i qv = two(w + 16 + 32 * p, w + kNext + 16 + 32 * p);
    const __m512i x0 = two(xq + 64 * p, xq + 256 + 64 * p);
    const __m512i x1 = two(xq + 64 * p + 32, xq + 256 + 64 * p + 32);
    v[2 * p] = _mm512_dpbusd_epi32(zero, _mm512_and_si512(qv, nibble), x0);
    v[2 * p + 1] =
        _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(qv, 4), nibble), x1);
  }
  const __m512i w01 = _mm512_madd_epi16(_mm512_packs_epi32(v[0], v[1]), ones);
  const __m512i w23 = _mm512_madd_epi16(_mm512_packs_epi32(v[2], v[3]), ones);
  const __m512i w45 = _mm512_madd_epi16(_mm512_packs_epi32(v[4], v[5]), ones);
  const __m512i w67 = _mm512_madd_epi16(_mm512_packs_epi32(v[6], v[7]), ones);
  // Both blocks' scales and mins (q4_k_scales_mins_avx2 in 256 bits), each
  // block's 16 bytes then in both 128-bit lanes of its half.
  const __m256i u = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 4))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kNext + 4)), 1);
  const __m256i low =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0)),
                                         _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
                       _mm256_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F,
                                         0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
  const __m256i top = _mm256_and_si256(
      _mm256_srli_epi32(_mm256_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0)), 2),
      _mm256_setr_epi32(0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030));
  const __m512i sm2 = _mm512_castsi256_si512(_mm256_or_si256(low, top));
  const __m512i sm = _mm512_shuffle_i64x2(sm2, sm2, _MM_SHUFFLE(1, 1, 0, 0));
  const __m512i sc0123 =
      _mm512_shuffle_epi8(sm, _mm512_broadcast_i32x4(_mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2,
                                                                   -1, 2, -1, 3, -1, 3, -1)));
  const __m512i sc4567 =
      _mm512_shuffle_epi8(sm, _mm512_broadcast_i32x4(_mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6,
                                                                   -1, 6, -1, 7, -1, 7, -1)));
  const __m512i m_pairs =
      _mm512_shuffle_epi8(sm, _mm512_broadcast_i64x4(_mm256_setr_epi8(
                                  8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1, 12,
                                  -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1)));
  const __m512i a = _mm512_madd_epi16(_mm512_packs_epi32(w01, w23), sc0123);
  const __m512i b = _mm512_madd_epi16(_mm512_packs_epi32(w45, w67), sc4567);
  // Per half: a's lanes 0..3 and b's 4..7, plus [a's upper 128, b's lower 128].
  const __m512i ints = _mm512_add_epi32(
      _mm512_mask_blend_epi32(0xF0F0, a, b),
      _mm512_permutex2var_epi64(a, _mm512_setr_epi64(2, 3, 8, 9, 6, 7, 12, 13), b));
  const __m512i mins = _mm512_madd_epi16(_mm512_loadu_si512(xs), m_pairs);
  std::uint32_t dd[2] = {0, 0};
  std::memcpy(&dd[0], w, 4);
  std::memcpy(&dd[1], w + kNext, 4);
  const __m512 ddmin = _mm512_cvtph_ps(
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(static_cast<int>(dd[0]))),
                              _mm_set1_epi32(static_cast<int>(dd[1])), 1));
  const __m512 dx16 = _mm512_loadu_ps(dx);
  const __m512 d = _mm512_mul_ps(_mm512_shuffle_ps(ddmin, ddmin, 0x00), dx16);
  const __m512 dmin = _mm512_mul_ps(_mm512_shuffle_ps(ddmin, ddmin, 0x55), dx16);
  acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(ints), acc);
  return _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(mins), acc);
}

/// One Q6_K super-block pair as q4_k_pair_wide does Q4_K's: each half of
/// every vector computes what q6_k_block_avx2 computes for its block. The
/// horizontal adds (no 512-bit hadd) are packs to int16 and madds with ones
/// (a lane of 4 products: |.| <= 4 * 63 * 127 < 2^15), then even plus odd
/// lanes: exact integer sums, the same int32s.
inline __m512 q6_k_pair_wide(const unsigned char* w, const std::int8_t* xq, const std::int16_t* xs,
                             const float* dx, __m512 acc) {
  constexpr int kNext = static_cast<int>(quant::kBytesQ6_K);
  const auto two = [](const void* lo, const void* hi) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
        _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
  };
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi16(1);
  // hadd_epi32 per 128 bits: [a0 + a1, a2 + a3, b0 + b1, b2 + b3].
  const auto hadd = [](__m512i a, __m512i b) {
    const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_add_epi32(
        _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, _MM_SHUFFLE(2, 0, 2, 0))),
        _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, _MM_SHUFFLE(3, 1, 3, 1))));
  };
  __m512i v[8];
  for (int h = 0; h < 2; ++h) {
    const __m512i ql0 = two(w + 64 * h, w + kNext + 64 * h);
    const __m512i ql1 = two(w + 64 * h + 32, w + kNext + 64 * h + 32);
    const __m512i qh = two(w + 128 + 32 * h, w + kNext + 128 + 32 * h);
    const __m512i q[4] = {
        _mm512_or_si512(_mm512_and_si512(ql0, nibble),
                        _mm512_and_si512(_mm512_slli_epi16(qh, 4), bits45)),
        _mm512_or_si512(_mm512_and_si512(ql1, nibble),
                        _mm512_and_si512(_mm512_slli_epi16(qh, 2), bits45)),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), nibble),
                        _mm512_and_si512(qh, bits45)),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), nibble),
                        _mm512_and_si512(_mm512_srli_epi16(qh, 2), bits45)),
    };
    for (int j = 0; j < 4; ++j)
      v[4 * h + j] =
          _mm512_dpbusd_epi32(zero, q[j], two(xq + 128 * h + 32 * j, xq + 256 + 128 * h + 32 * j));
  }
  const auto pairs = [ones](__m512i a, __m512i b) {
    return _mm512_madd_epi16(_mm512_packs_epi32(a, b), ones);
  };
  const __m512i a = hadd(pairs(v[0], v[1]), pairs(v[2], v[3]));
  const __m512i b = hadd(pairs(v[4], v[5]), pairs(v[6], v[7]));
  const __m256i sc_bytes = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kNext + 192)), 1);
  const __m256i sc_split =
      _mm256_shuffle_epi8(sc_bytes, _mm256_broadcastsi128_si256(_mm_setr_epi8(
                                        0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15)));
  // [lower 8 bytes of each half | upper 8 bytes of each half]
  const __m256i sc_lo_hi = _mm256_permute4x64_epi64(sc_split, _MM_SHUFFLE(3, 1, 2, 0));
  const __m512i as = _mm512_mullo_epi32(a, _mm512_cvtepi8_epi32(_mm256_castsi256_si128(sc_lo_hi)));
  const __m512i bs =
      _mm512_mullo_epi32(b, _mm512_cvtepi8_epi32(_mm256_extracti128_si256(sc_lo_hi, 1)));
  const __m512i scaled = _mm512_add_epi32(
      _mm512_permutex2var_epi64(as, _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), bs),
      _mm512_permutex2var_epi64(as, _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15), bs));
  const __m512i offset = _mm512_madd_epi16(_mm512_cvtepi8_epi16(sc_bytes), _mm512_loadu_si512(xs));
  const __m512i ints = _mm512_sub_epi32(scaled, _mm512_slli_epi32(offset, 5));
  const __m512 dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(block_scale_f16c(w + 208)),
                                         _mm512_set1_ps(block_scale_f16c(w + kNext + 208)));
  return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_loadu_ps(dx)), _mm512_cvtepi32_ps(ints), acc);
}

/// dot_k_avx2 with two super-blocks per 512-bit step (pair: q4_k_pair_wide
/// or q6_k_pair_wide), the last one of an odd count by `single` (the
/// 256-bit block): the lower half of acc is dot_k_avx2's set 0, the upper
/// half its set 1, so the result is the same bits.
template <std::size_t kW, class Pair, class Single>
inline float dot_k_wide(const unsigned char* w, const Q8Row& x, Pair pair, Single single) {
  __m512 acc = _mm512_setzero_ps();
  const Index n = x.nb / 8;
  Index i = 0;
  for (; i + 1 < n; i += 2, w += 2 * kW) {
    prefetch_ahead<2 * kW>(w);
    const auto at = static_cast<std::size_t>(8 * i);
    acc = pair(w, x.q.data() + 32 * at, x.sum16.data() + 2 * at, x.d.data() + at, acc);
  }
  __m256 acc0 = _mm512_castps512_ps256(acc);
  const __m256 acc1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  if (i < n) {
    const auto at = static_cast<std::size_t>(8 * i);
    acc0 = single(w, x.q.data() + 32 * at, x.sum16.data() + 2 * at, x.d.data() + at, acc0);
  }
  return lanes_total_avx2(acc0, acc1);
}

/// dot_q4_k_portable two super-blocks at a time (bit for bit the same result).
inline float dot_q4_k_wide(const unsigned char* w, const Q8Row& x) {
  return dot_k_wide<quant::kBytesQ4_K>(
      w, x, [](auto... a) { return q4_k_pair_wide(a...); },
      [](auto... a) { return q4_k_block_avx2(a...); });
}
/// dot_q6_k_portable two super-blocks at a time (bit for bit the same result).
inline float dot_q6_k_wide(const unsigned char* w, const Q8Row& x) {
  return dot_k_wide<quant::kBytesQ6_K>(
      w, x, [](auto... a) { return q6_k_pair_wide(a...); },
      [](auto... a) { return q6_k_block_avx2(a...); });
}
#endif

/// dot_q4_k_portable with AVX2 / VNNI (bit for bit the same result): two
/// super-blocks per 512-bit step where q4_0_wide() says so (AMD's CPUs).
inline float dot_q4_k_avx2(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_Q4_0_WIDE
  if (q4_0_wide()) return dot_q4_k_wide(w, x);
#endif
  return dot_k_avx2<quant::kBytesQ4_K>(w, x, [](auto... a) { return q4_k_block_avx2(a...); });
}
/// dot_q6_k_portable with AVX2 / VNNI (bit for bit the same result): two
/// super-blocks per 512-bit step where q4_0_wide() says so (AMD's CPUs).
inline float dot_q6_k_avx2(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_Q4_0_WIDE
  if (q4_0_wide()) return dot_q6_k_wide(w, x);
#endif
  return dot_k_avx2<quant::kBytesQ6_K>(w, x, [](auto... a) { return q6_k_block_avx2(a...); });
}
#endif

/// The block dot product of this build: AVX2 / VNNI where enabled, else
/// portable; the same value either way.
inline float dot_q8_0(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_AVX2
  return dot_q8_0_avx2(w, x);
#else
  return dot_q8_0_portable(w, x);
#endif
}
/// As dot_q8_0 for Q4_0 weights.
inline float dot_q4_0(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_AVX2
  return dot_q4_0_avx2(w, x);
#else
  return dot_q4_0_portable(w, x);
#endif
}

/// As dot_q8_0 for Q4_K weights.
inline float dot_q4_k(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_AVX2
  return dot_q4_k_avx2(w, x);
#else
  return dot_q4_k_portable(w, x);
#endif
}
/// As dot_q8_0 for Q6_K weights.
inline float dot_q6_k(const unsigned char* w, const Q8Row& x) {
#if KAPPA_QUANT_AVX2
  return dot_q6_k_avx2(w, x);
#else
  return dot_q6_k_portable(w, x);
#endif
}

/// The decode of 8 interleaved Q4_0 rows (quant::interleave_q4_0's layout:
/// a group of 8 rows of P at `g`) against X's row `x`: out[r] for row r of
/// the group. Each block b gives row r the exact int32 sum
/// S_rb = sum_j q_j x_j - 8 sum_j x_j, and the row's float is
/// acc_r = lane_fma(d_w d_x, S_rb, acc_r) in block order (one float per
/// row, not lanes_add's 16): another order than dot_q4_0's, the same in
/// the AVX2 loop and here. The summation adds at most (k / 32) 2^-24 sum
/// |terms| to the exact sum of the block terms.
inline void dot8_q4_0_portable(const unsigned char* g, const Q8Row& x, float* out) {
  float acc[8] = {};
  for (Index b = 0; b < x.nb; ++b, g += quant::kBytesQ4_0x8) {
    const std::int8_t* xq = x.q.data() + 32 * b;
    const float dx = x.d[static_cast<std::size_t>(b)];
    for (Index r = 0; r < 8; ++r) {
      const unsigned char* q = g + 16 + 16 * r;
      std::int32_t sum = x.block_offset[static_cast<std::size_t>(b)];
      for (int j = 0; j < 16; ++j)
        sum += std::int32_t{q[j] & 0x0F} * xq[j] + std::int32_t{q[j] >> 4} * xq[j + 16];
      acc[r] = lane_fma(block_scale(g + 2 * r) * dx, static_cast<float>(sum), acc[r]);
    }
  }
  for (int r = 0; r < 8; ++r) out[r] = acc[r];
}

#if KAPPA_QUANT_AVX2
/// One row's nibbles of an interleaved block (16 bytes at q) times X's
/// block xv: eight int32 lane sums (the offset is added later, per block).
inline __m256i q4_row_lanes(const unsigned char* q, __m256i xv) {
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i n = _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_setr_epi64x(0, 0, 4, 4)),
                                     _mm256_set1_epi8(0x0F));
  return lane_dot_u8s8(_mm256_setzero_si256(), n, xv);
}

/// dot8_q4_0_portable with AVX2 (bit for bit the same result): per block,
/// the 8 rows' lane sums reduced by three levels of horizontal adds into
/// one vector of the 8 rows' S_rb, the 8 scales widened by one F16C
/// convert, one multiply-add for the 8 rows. About 7 vector instructions
/// per block and row where dot_avx2 takes about 15.
inline void dot8_q4_0_avx2(const unsigned char* g, const Q8Row& x, float* out) {
  __m256 acc = _mm256_setzero_ps();
  const std::int8_t* xq = x.q.data();
  const std::int32_t* offsets = x.block_offset.data();
  const float* xd = x.d.data();
  for (Index b = 0; b < x.nb; ++b, g += quant::kBytesQ4_0x8) {
    prefetch_ahead<quant::kBytesQ4_0x8>(g);
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * b));
    const __m256i h01 = _mm256_hadd_epi32(q4_row_lanes(g + 16, xv), q4_row_lanes(g + 32, xv));
    const __m256i h23 = _mm256_hadd_epi32(q4_row_lanes(g + 48, xv), q4_row_lanes(g + 64, xv));
    const __m256i h45 = _mm256_hadd_epi32(q4_row_lanes(g + 80, xv), q4_row_lanes(g + 96, xv));
    const __m256i h67 = _mm256_hadd_epi32(q4_row_lanes(g + 112, xv), q4_row_lanes(g + 128, xv));
    // rows 0..3 (then 4..7): lanes 0..3 their sums over x's lanes 0..3,
    // lanes 4..7 over x's lanes 4..7; the halves added give S_rb
    const __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                                                        _mm256_permute2x128_si256(lo, hi, 0x31)),
                                       _mm256_set1_epi32(offsets[b]));
    const __m256 d =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g))),
                      _mm256_broadcast_ss(xd + b));
    lanes_add_avx2(acc, d, s);
  }
  _mm256_storeu_ps(out, acc);
}
#endif

#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
/// dot8_q4_0_avx2 in 512 bits with VNNI (bit for bit the same result). Per
/// block, rows 0..3's 64 nibble bytes in one vector and rows 4..7's in
/// another, one row per 128-bit lane; X's 16 low and 16 high quants
/// broadcast to the four lanes; four vpdpbusd give each row four int32
/// partial sums (exact: no saturation). The two vectors' sums go to one
/// vector of the 8 rows' S_rb in five ops (unpack the 64-bit halves, add,
/// swap neighbours, add, one permute), then the same offset add and float
/// step as the AVX2 loop. About 21 vector instructions per block against
/// about 45; on an AMD EPYC VM (1 thread) 2.0x the AVX2 loop on 4096 x 4096
/// in L3 (64 against 32 GB/s), 1.05-1.2x over 151 MB from memory (20-27
/// GB/s, where a plain read gives about 30).
inline void dot8_q4_0_wide(const unsigned char* g, const Q8Row& x, float* out) {
  __m256 acc = _mm256_setzero_ps();
  const __m512i nib = _mm512_set1_epi8(0x0F);
  // w's dwords: row i's sum at 4 i (rows 0..3) and at 4 i + 2 (rows 4..7)
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const std::int8_t* xq = x.q.data();
  const std::int32_t* offsets = x.block_offset.data();
  const float* xd = x.d.data();
  const auto sums4 = [nib](__m512i v, __m512i xlo, __m512i xhi) {
    const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, nib), xlo);
    return _mm512_dpbusd_epi32(a, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib), xhi);
  };
  for (Index b = 0; b < x.nb; ++b, g += quant::kBytesQ4_0x8) {
    prefetch_ahead<quant::kBytesQ4_0x8>(g);
    const __m512i xlo =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 32 * b)));
    const __m512i xhi =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 32 * b + 16)));
    const __m512i a0 = sums4(_mm512_loadu_si512(g + 16), xlo, xhi);  // rows 0..3
    const __m512i a1 = sums4(_mm512_loadu_si512(g + 80), xlo, xhi);  // rows 4..7
    const __m512i v =
        _mm512_add_epi32(_mm512_unpacklo_epi64(a0, a1), _mm512_unpackhi_epi64(a0, a1));
    const __m512i w = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
    const __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, w)),
                                       _mm256_set1_epi32(offsets[b]));
    const __m256 d =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g))),
                      _mm256_broadcast_ss(xd + b));
    lanes_add_avx2(acc, d, s);
  }
  _mm256_storeu_ps(out, acc);
}
#endif

/// dot8_q4_0_portable: the 512-bit loop where q4_0_wide() says so, else
/// AVX2's where the build has it.
inline void dot8_q4_0(const unsigned char* g, const Q8Row& x, float* out) {
#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
  if (q4_0_wide()) return dot8_q4_0_wide(g, x, out);
#endif
#if KAPPA_QUANT_AVX2
  dot8_q4_0_avx2(g, x, out);
#else
  dot8_q4_0_portable(g, x, out);
#endif
}

/// The exact int32s of one Q4_K super-block `w` (GGUF's layout) against
/// X's 256 Q8_K quants `xq` and their sums per 16 `xs`: the sums over the
/// sub-blocks of q4_k_ints_portable's, I = sum_s sc_s sum_l q_sl x_sl and
/// M = sum_s m_s sum_l x_sl (|I| <= 8 * 63 * 32 * 15 * 127 < 2^25,
/// |M| <= 8 * 63 * 4064).
inline void q4_k_q8k_ints(const unsigned char* w, const std::int8_t* xq, const std::int16_t* xs,
                          std::int32_t& ints, std::int32_t& mins) {
  std::int32_t sub_ints[8], sub_mins[8];
  q4_k_ints_portable(w, xq, xs, sub_ints, sub_mins);
  ints = 0;
  mins = 0;
  for (int s = 0; s < 8; ++s) {
    ints += sub_ints[s];
    mins += sub_mins[s];
  }
}

/// The float step of the Q8_K products, one per super-block i and row:
/// acc = lane_fma(d dx_i, I, acc) then lane_fma(-(dmin dx_i), M, acc) (I
/// converted to float rounds to nearest where |I| > 2^24; d dx_i and
/// dmin dx_i are rounded float products).
inline float q4_k_q8k_step(float d, float dmin, float dx, std::int32_t ints, std::int32_t mins,
                           float acc) {
  acc = lane_fma(d * dx, static_cast<float>(ints), acc);
  return lane_fma(-(dmin * dx), static_cast<float>(mins), acc);
}

/// One row of Q4_K super-blocks `w` (GGUF's layout) against X's row in
/// Q8_K, as one row of dot8_q4_k: the rows of an interleaved matrix after
/// its last whole group of 8.
inline float dot_q4_k_q8k(const unsigned char* w, const Q8KRow& x) {
  float acc = 0.0f;
  for (Index i = 0; i < x.nb; ++i, w += quant::kBytesQ4_K) {
    std::int32_t ints = 0, mins = 0;
    q4_k_q8k_ints(w, x.q.data() + 256 * i, x.sum16.data() + 16 * i, ints, mins);
    acc = q4_k_q8k_step(block_scale(w), quant::fp16_to_float(quant::detail::load_u16(w + 2)),
                        x.d[static_cast<std::size_t>(i)], ints, mins, acc);
  }
  return acc;
}

/// The decode of 8 interleaved Q4_K rows (quant::Q4_KRows8's layout: a
/// group of 8 rows of P at `g`) against X's row in Q8_K: out[r] for row r
/// of the group. Per super-block, row r's exact int32s I_r and M_r
/// (q4_k_q8k_ints) and one float step (q4_k_q8k_step), in super-block
/// order: one float per row. Within (2 k / 256 + 2) 2^-24 sum |terms| of
/// the exact sum of the terms d dx I - dmin dx M (first order). Portable:
/// each row's super-block is read back (Q4_KRows8::from_group) and summed
/// as dot_q4_k_q8k does.
inline void dot8_q4_k_portable(const unsigned char* g, const Q8KRow& x, float* out) {
  float acc[8] = {};
  unsigned char block[quant::kBytesQ4_K];
  for (Index i = 0; i < x.nb; ++i, g += quant::kBytesQ4_Kx8) {
    for (std::size_t r = 0; r < 8; ++r) {
      quant::Q4_KRows8::from_group(g, r, block);
      std::int32_t ints = 0, mins = 0;
      q4_k_q8k_ints(block, x.q.data() + 256 * i, x.sum16.data() + 16 * i, ints, mins);
      acc[r] = q4_k_q8k_step(block_scale(block),
                             quant::fp16_to_float(quant::detail::load_u16(block + 2)),
                             x.d[static_cast<std::size_t>(i)], ints, mins, acc[r]);
    }
  }
  for (int r = 0; r < 8; ++r) out[r] = acc[r];
}

#if KAPPA_QUANT_AVX2
/// The 6-bit scales `sc` and mins `mn` of the 8 rows of a Q4_KRows8
/// super-block `g`, from its three gathered words: per vector (sub-blocks
/// 0..3, then 4..7) a byte each, row r in 32-bit lane r.
inline void q4_k8_scales(const unsigned char* g, __m256i sc[2], __m256i mn[2]) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), low6 = _mm256_set1_epi8(0x3F);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  const auto word = [g](int u) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32 + 32 * u));
  };
  const __m256i u0 = word(0), u1 = word(1), u2 = word(2);
  sc[0] = _mm256_and_si256(u0, low6);
  sc[1] = _mm256_or_si256(_mm256_and_si256(u2, nibble),
                          _mm256_and_si256(_mm256_srli_epi32(u0, 2), top2));
  mn[0] = _mm256_and_si256(u1, low6);
  mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), nibble),
                          _mm256_and_si256(_mm256_srli_epi32(u1, 2), top2));
}

/// The end of super-block i of the 8-row Q4_K loops: the 8 rows' M from
/// their mins `mn` and X's sums per 16, then the float step with their
/// ints I: acc = lane_fma(d dx, I, acc), lane_fma(-(dmin dx), M, acc).
inline __m256 q4_k8_step(const unsigned char* g, const Q8KRow& x, Index i, const __m256i mn[2],
                         __m256i ints, __m256 acc) {
  const __m256i zero = _mm256_setzero_si256();
  // M: X's sums per 32 from its sums per 16 (one horizontal add); rows
  // 0, 1 (4, 5) from the low bytes of each half, 2, 3 (6, 7) from the
  // high; [m_0 x_0 + m_1 x_1, m_2 x_2 + m_3 x_3] per row, then hadd.
  const auto* xs = reinterpret_cast<const __m128i*>(x.sum16.data() + 16 * i);
  const __m128i xs32 = _mm_hadd_epi16(_mm_loadu_si128(xs), _mm_loadu_si128(xs + 1));
  const __m256i s0123 = _mm256_broadcastq_epi64(xs32);
  const __m256i s4567 = _mm256_broadcastq_epi64(_mm_unpackhi_epi64(xs32, xs32));
  const __m256i m_lo =
      _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi8(mn[0], zero), s0123),
                       _mm256_madd_epi16(_mm256_unpacklo_epi8(mn[1], zero), s4567));
  const __m256i m_hi =
      _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpackhi_epi8(mn[0], zero), s0123),
                       _mm256_madd_epi16(_mm256_unpackhi_epi8(mn[1], zero), s4567));
  const __m256i mins = _mm256_hadd_epi32(m_lo, m_hi);
  const __m256 dx = _mm256_set1_ps(x.d[static_cast<std::size_t>(i)]);
  const __m256 d =
      _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g))), dx);
  const __m256 dmin =
      _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16))), dx);
  acc = kq_fma(d, ints, acc);
  return kq_fnma(dmin, mins, acc);
}

/// dot8_q4_k_portable with AVX2 (bit for bit the same result); 32-bit lane
/// r of every vector is row r. Per super-block:
///   - the 6-bit scales and mins of the 8 rows from the three gathered
///     words (two vectors each: sub-blocks 0..3 and 4..7, a byte each);
///   - per pair p of sub-blocks, 8 pieces of 4 nibbles of each row (one
///     load: low nibbles sub-block 2 p, high 2 p + 1), each times X's 4
///     quants broadcast to the 8 lanes (a broadcast load) by
///     _mm256_maddubs_epi16;
///     a sub-block's 8 products add up in int16 (|.| <= 8 * 2 * 15 * 127
///     = 30480), then _mm256_madd_epi16 against the sub-block's scale in
///     both int16s of a row's lane gives sc_s sum q x, added into I (int32);
///   - M from the mins widened to int16 and _mm256_madd_epi16 against X's
///     sums per 32, one horizontal add;
///   - the float step of the 8 rows at once (F16C for d and dmin).
/// About 34 vector instructions per row and super-block, where the row
/// loop (q4_k_block_avx2) takes about 65.
inline void dot8_q4_k_avx2(const unsigned char* g, const Q8KRow& x, float* out) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  // byte t of each row's lane, zero-extended into both int16s of the lane
  __m256i pick[4];
  for (int t = 0; t < 4; ++t) {
    const auto b = static_cast<char>(t);
    const auto c = static_cast<char>(t + 4), e = static_cast<char>(t + 8),
               f = static_cast<char>(t + 12);
    pick[t] = _mm256_setr_epi8(b, -1, b, -1, c, -1, c, -1, e, -1, e, -1, f, -1, f, -1, b, -1, b, -1,
                               c, -1, c, -1, e, -1, e, -1, f, -1, f, -1);
  }
  __m256 acc = _mm256_setzero_ps();
  const std::int8_t* xq = x.q.data();
  for (Index i = 0; i < x.nb; ++i, g += quant::kBytesQ4_Kx8, xq += 256) {
    prefetch_ahead<quant::kBytesQ4_Kx8>(g);
    __m256i sc[2], mn[2];
    q4_k8_scales(g, sc, mn);
    __m256i ints = _mm256_setzero_si256();
    const unsigned char* qs = g + 128;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 4
#endif
    for (int p = 0; p < 4; ++p) {
      __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (8 * p + c)));
        std::int32_t x4lo = 0, x4hi = 0;
        std::memcpy(&x4lo, xq + 4 * (16 * p + c), 4);
        std::memcpy(&x4hi, xq + 4 * (16 * p + 8 + c), 4);
        const __m256i xlo = _mm256_set1_epi32(x4lo), xhi = _mm256_set1_epi32(x4hi);
        lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(_mm256_and_si256(v, nibble), xlo));
        hi = _mm256_add_epi16(
            hi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), nibble), xhi));
      }
      const int s0 = 2 * p, s1 = 2 * p + 1;
      ints = _mm256_add_epi32(ints,
                              _mm256_madd_epi16(lo, _mm256_shuffle_epi8(sc[s0 / 4], pick[s0 % 4])));
      ints = _mm256_add_epi32(ints,
                              _mm256_madd_epi16(hi, _mm256_shuffle_epi8(sc[s1 / 4], pick[s1 % 4])));
    }
    acc = q4_k8_step(g, x, i, mn, ints, acc);
  }
  _mm256_storeu_ps(out, acc);
}
#endif

#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
/// dot8_q4_k_avx2 in 512 bits with VNNI (bit for bit the same result). Per
/// pair p of sub-blocks, each load takes two pieces (c, c + 1) of the 8 rows:
/// row r in 32-bit lanes r and 8 + r. X's 64 quants of the pair are loaded
/// once and permuted so that each half of a vector holds its piece's 4
/// quants; vpdpbusd adds the 4 products per lane in int32. After the 4
/// loads of a sub-block a lane holds 16 products, |.| <= 16 * 15 * 127 =
/// 30480, so its low int16 is the whole sum, and vpdpwssd against the
/// sub-block's scale in that int16 (0 in the high one) adds sc_s sum q x
/// into I. The halves are added once per super-block; M and the float
/// step are the AVX2 loop's.
inline void dot8_q4_k_wide(const unsigned char* g, const Q8KRow& x, float* out) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  // byte t of each row's lane into the low int16 of the lane, 0 above
  __m512i pick[4];
  for (int t = 0; t < 4; ++t) {
    const auto b = static_cast<char>(t), c = static_cast<char>(t + 4), e = static_cast<char>(t + 8),
               f = static_cast<char>(t + 12);
    pick[t] = _mm512_broadcast_i32x4(
        _mm_setr_epi8(b, -1, -1, -1, c, -1, -1, -1, e, -1, -1, -1, f, -1, -1, -1));
  }
  // X's pieces c (lanes 0..7) and c + 1 (lanes 8..15): low nibbles take
  // dwords c, c + 1 of the pair's 64 quants, high nibbles 8 + c, 9 + c
  __m512i take_lo[4], take_hi[4];
  for (int c2 = 0; c2 < 4; ++c2) {
    const __m512i half =
        _mm512_inserti64x4(_mm512_set1_epi32(2 * c2), _mm256_set1_epi32(2 * c2 + 1), 1);
    take_lo[c2] = half;
    take_hi[c2] = _mm512_add_epi32(half, _mm512_set1_epi32(8));
  }
  __m256 acc = _mm256_setzero_ps();
  const std::int8_t* xq = x.q.data();
  for (Index i = 0; i < x.nb; ++i, g += quant::kBytesQ4_Kx8, xq += 256) {
    prefetch_ahead<quant::kBytesQ4_Kx8>(g);
    __m256i sc8[2], mn[2];
    q4_k8_scales(g, sc8, mn);
    const __m512i sc[2] = {_mm512_broadcast_i64x4(sc8[0]), _mm512_broadcast_i64x4(sc8[1])};
    __m512i ints = _mm512_setzero_si512();
    const unsigned char* qs = g + 128;
    for (int p = 0; p < 4; ++p) {
      const __m512i xp = _mm512_loadu_si512(xq + 64 * p);
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
      for (int c2 = 0; c2 < 4; ++c2) {
        const __m512i v = _mm512_loadu_si512(qs + 32 * (8 * p + 2 * c2));
        lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v, nib),
                                 _mm512_permutexvar_epi32(take_lo[c2], xp));
        hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib),
                                 _mm512_permutexvar_epi32(take_hi[c2], xp));
      }
      const int s0 = 2 * p, s1 = 2 * p + 1;
      ints = _mm512_dpwssd_epi32(ints, lo, _mm512_shuffle_epi8(sc[s0 / 4], pick[s0 % 4]));
      ints = _mm512_dpwssd_epi32(ints, hi, _mm512_shuffle_epi8(sc[s1 / 4], pick[s1 % 4]));
    }
    const __m256i ints8 =
        _mm256_add_epi32(_mm512_castsi512_si256(ints), _mm512_extracti64x4_epi64(ints, 1));
    acc = q4_k8_step(g, x, i, mn, ints8, acc);
  }
  _mm256_storeu_ps(out, acc);
}
#endif

/// dot8_q4_k_portable: the 512-bit loop where q4_0_wide() says so, else
/// AVX2's where the build has it.
inline void dot8_q4_k(const unsigned char* g, const Q8KRow& x, float* out) {
#if KAPPA_QUANT_WIDE_LOOPS && defined(__AVX512VNNI__)
  if (q4_0_wide()) return dot8_q4_k_wide(g, x, out);
#endif
#if KAPPA_QUANT_AVX2
  dot8_q4_k_avx2(g, x, out);
#else
  dot8_q4_k_portable(g, x, out);
#endif
}

/// The smallest fp16 value not below v >= 0 (for scales that must cover a
/// range); stays at the largest finite fp16 value for v beyond it.
inline std::uint16_t fp16_not_below(float v) {
  std::uint16_t h = quant::fp16_from_float(v);
  if (h < 0x7BFFu && quant::fp16_to_float(h) < v) ++h;
  return h < 0x7C00u ? h : std::uint16_t{0x7BFF};
}

/// Q4_K of a row x[0..k) (k a multiple of 256) into k / 256 super-blocks:
/// our own simple quantizer from the format's definition, not ggml's
/// iterative search (so not ggml's bytes). Per sub-block s of 32:
/// lo_s = min(0, min x), hi_s = max x, off_s = -lo_s. dmin = the fp16 value
/// not below max_s off_s / 63 and m_s = ceil(off_s / dmin) (so dmin m_s >=
/// off_s); need_s = max(0, hi_s + dmin m_s) / 15, d = the fp16 not below
/// max_s need_s / 63, sc_s = ceil(need_s / d) <= 63; q = round((x +
/// dmin m_s) / (d sc_s)) in 0..15. Every value is covered, so for finite x
/// well inside fp16's range each weight w = d sc_s q - dmin m_s is within
/// half a step d sc_s of x (plus float rounding, 2^-18 max |x| of the
/// super-block), and the step is at most (hi_s - lo_s + dmin) / 15 + d.
inline void quantize_row_q4_K_simple(const float* x, unsigned char* out, std::int64_t k) {
  for (std::int64_t b = 0; b < k / quant::kBlockK;
       ++b, x += quant::kBlockK, out += quant::kBytesQ4_K) {
    float hi[8], off[8], max_off = 0.0f;
    for (int s = 0; s < 8; ++s) {
      float lo = 0.0f, top = x[std::ptrdiff_t{32} * s];
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, x[32 * s + l]);
        top = std::max(top, x[32 * s + l]);
      }
      hi[s] = top;
      off[s] = -lo;
      max_off = std::max(max_off, off[s]);
    }
    const std::uint16_t dmin_h = fp16_not_below(max_off / 63.0f);
    const float dmin = quant::fp16_to_float(dmin_h);
    int m[8];
    float need[8], max_need = 0.0f;
    for (int s = 0; s < 8; ++s) {
      m[s] = dmin > 0.0f ? std::min(63, static_cast<int>(std::ceil(off[s] / dmin))) : 0;
      need[s] = std::max(0.0f, hi[s] + dmin * static_cast<float>(m[s])) / 15.0f;
      max_need = std::max(max_need, need[s]);
    }
    const std::uint16_t d_h = fp16_not_below(max_need / 63.0f);
    const float d = quant::fp16_to_float(d_h);
    int sc[8];
    for (int s = 0; s < 8; ++s)
      sc[s] = d > 0.0f ? std::min(63, static_cast<int>(std::ceil(need[s] / d))) : 0;
    quant::detail::store_u16(out, d_h);
    quant::detail::store_u16(out + 2, dmin_h);
    unsigned char* packed = out + 4;
    std::memset(packed, 0, 12);
    for (int s = 0; s < 8; ++s) {
      const auto scs = static_cast<unsigned>(sc[s]), ms = static_cast<unsigned>(m[s]);
      if (s < 4) {
        packed[s] = static_cast<unsigned char>(scs);
        packed[s + 4] = static_cast<unsigned char>(ms);
      } else {
        packed[s + 4] = static_cast<unsigned char>((scs & 0xFu) | ((ms & 0xFu) << 4));
        packed[s - 4] = static_cast<unsigned char>(packed[s - 4] | ((scs >> 4) << 6));
        packed[s] = static_cast<unsigned char>(packed[s] | ((ms >> 4) << 6));
      }
    }
    unsigned char* qs = out + 16;
    std::memset(qs, 0, 128);
    for (int s = 0; s < 8; ++s) {
      const float step = d * static_cast<float>(sc[s]);
      const float offset = dmin * static_cast<float>(m[s]);
      for (int l = 0; l < 32; ++l) {
        const float v = step > 0.0f ? std::round((x[32 * s + l] + offset) / step) : 0.0f;
        const auto q = static_cast<unsigned>(std::clamp(v, 0.0f, 15.0f));
        qs[32 * (s / 2) + l] =
            static_cast<unsigned char>(qs[32 * (s / 2) + l] | (q << (4 * (s & 1))));
      }
    }
  }
}

/// Q6_K of a row x[0..k) (k a multiple of 256) into k / 256 super-blocks:
/// our own simple quantizer, not ggml's search (not its bytes). Per group g
/// of 16: need_g = max |x| / 31; d = the fp16 value not below max_g need_g /
/// 127, sc_g = ceil(need_g / d) <= 127, q - 32 = round(x / (d sc_g)) in
/// -31..31 (32 when the step is 0). Each weight w = d sc_g (q - 32) is within
/// half a step d sc_g of x (plus float rounding, 2^-18 max |x| of the
/// super-block), and the step is at most max |x_g| / 31 + d.
inline void quantize_row_q6_K_simple(const float* x, unsigned char* out, std::int64_t k) {
  for (std::int64_t b = 0; b < k / quant::kBlockK;
       ++b, x += quant::kBlockK, out += quant::kBytesQ6_K) {
    float need[16], max_need = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * g + l]));
      need[g] = amax / 31.0f;
      max_need = std::max(max_need, need[g]);
    }
    const std::uint16_t d_h = fp16_not_below(max_need / 127.0f);
    const float d = quant::fp16_to_float(d_h);
    std::memset(out, 0, quant::kBytesQ6_K);
    for (int g = 0; g < 16; ++g) {
      const int sc = d > 0.0f ? std::min(127, static_cast<int>(std::ceil(need[g] / d))) : 0;
      out[192 + g] = static_cast<unsigned char>(sc);
      const float step = d * static_cast<float>(sc);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * g + l;  // element 128 h + 32 j + i of the super-block
        const float v = step > 0.0f ? std::round(x[e] / step) : 0.0f;
        const auto q = static_cast<unsigned>(static_cast<int>(std::clamp(v, -31.0f, 31.0f)) + 32);
        const int h = e / 128, j = (e % 128) / 32, i = e % 32;
        unsigned char& low = out[64 * h + 32 * (j & 1) + i];
        low = static_cast<unsigned char>(low | ((q & 0xFu) << (4 * (j / 2))));
        unsigned char& high = out[128 + 32 * h + i];
        high = static_cast<unsigned char>(high | ((q >> 4) << (2 * j)));
      }
    }
    quant::detail::store_u16(out + 208, d_h);
  }
}

/// The per-format operations of BlockWeightMatrix.
template <class Format>
struct BlockFormatOps;
template <>
struct BlockFormatOps<Q8_0Weights> {
  static constexpr Index kGroup = 32;  // weights per scale of the codes (quant_gemm.hpp)
  static constexpr int kCodeBits = 8;  // every code below 2^kCodeBits
  static void codes(const unsigned char* in, Index k, std::uint8_t* q, float* s, float* c) {
    quant::codes_row_q8_0(in, k, q, s, c);
  }
  static void quantize(const float* x, unsigned char* out, Index k) {
    quant::quantize_row_q8_0(x, out, k);
  }
  static void dequantize(const unsigned char* in, float* y, Index k) {
    quant::dequantize_row_q8_0(in, y, k);
  }
  static float dot(const unsigned char* w, const Q8Row& x) { return dot_q8_0(w, x); }
};
template <>
struct BlockFormatOps<Q4_0Weights> {
  static constexpr Index kGroup = 32;  // weights per scale of the codes (quant_gemm.hpp)
  static constexpr int kCodeBits = 4;  // every code below 2^kCodeBits
  static void codes(const unsigned char* in, Index k, std::uint8_t* q, float* s, float* c) {
    quant::codes_row_q4_0(in, k, q, s, c);
  }
  static void quantize(const float* x, unsigned char* out, Index k) {
    quant::quantize_row_q4_0(x, out, k);
  }
  static void dequantize(const unsigned char* in, float* y, Index k) {
    quant::dequantize_row_q4_0(in, y, k);
  }
  static float dot(const unsigned char* w, const Q8Row& x) { return dot_q4_0(w, x); }
};

template <>
struct BlockFormatOps<Q4_KWeights> {
  static constexpr Index kGroup = 32;  // weights per scale of the codes (quant_gemm.hpp)
  static constexpr int kCodeBits = 4;  // every code below 2^kCodeBits
  static void codes(const unsigned char* in, Index k, std::uint8_t* q, float* s, float* c) {
    quant::codes_row_q4_K(in, k, q, s, c);
  }
  static void quantize(const float* x, unsigned char* out, Index k) {
    quantize_row_q4_K_simple(x, out, k);
  }
  static void dequantize(const unsigned char* in, float* y, Index k) {
    quant::dequantize_row_q4_K(in, y, k);
  }
  static float dot(const unsigned char* w, const Q8Row& x) { return dot_q4_k(w, x); }
};
template <>
struct BlockFormatOps<Q6_KWeights> {
  static constexpr Index kGroup = 16;  // weights per scale of the codes (quant_gemm.hpp)
  static constexpr int kCodeBits = 6;  // every code below 2^kCodeBits
  static void codes(const unsigned char* in, Index k, std::uint8_t* q, float* s, float* c) {
    quant::codes_row_q6_K(in, k, q, s, c);
  }
  static void quantize(const float* x, unsigned char* out, Index k) {
    quantize_row_q6_K_simple(x, out, k);
  }
  static void dequantize(const unsigned char* in, float* y, Index k) {
    quant::dequantize_row_q6_K(in, y, k);
  }
  static float dot(const unsigned char* w, const Q8Row& x) { return dot_q6_k(w, x); }
};

/// W (rows x cols) stored as block-quantized rows of P (see the file
/// comment); the common code of `WeightMatrix<T, Q8_0Weights>`,
/// `WeightMatrix<T, Q4_0Weights>`, `WeightMatrix<T, Q4_KWeights>` and
/// `WeightMatrix<T, Q6_KWeights>`.
/// The formats whose rows can be held interleaved by eights, and the
/// layout of each (quant_blocks.hpp).
template <class Format>
inline constexpr bool kInterleavable =
    std::same_as<Format, Q4_0Weights> || std::same_as<Format, Q4_KWeights>;
template <class Format>
using RowsLayout8 =
    std::conditional_t<std::same_as<Format, Q4_0Weights>, quant::Q4_0Rows8, quant::Q4_KRows8>;

template <Scalar T, class Format>
class BlockWeightMatrix {
  using Ops = BlockFormatOps<Format>;
  static constexpr Index kB = Format::kBlockWeights;
  static constexpr std::size_t kBlockBytes = Format::kBlockBytes;

 public:
  BlockWeightMatrix() = default;

  /// Quantizes W (rows x cols), blocks along `along`: Q8_0 and Q4_0 with
  /// the reference quantizer (byte-identical to ggml's quantize_row_*_ref),
  /// Q4_K and Q6_K with our own simple one (see the file comment).
  /// \throws ShapeError when the dimension the blocks run along is not a
  /// multiple of the block (32, or 256 for the k-quants).
  explicit BlockWeightMatrix(const RowMatrix<T>& w, BlocksAlong along = BlocksAlong::kRows)
      : BlockWeightMatrix(w.rows(), w.cols(), along) {
    auto owned = std::make_shared<std::vector<unsigned char>>(packed_bytes());
    std::vector<float> row(static_cast<std::size_t>(k_));
    for (Index j = 0; j < n_p_; ++j) {
      for (Index t = 0; t < k_; ++t)
        row[static_cast<std::size_t>(t)] =
            static_cast<float>(along_ == BlocksAlong::kRows ? w(t, j) : w(j, t));
      Ops::quantize(row.data(), owned->data() + static_cast<std::size_t>(j) * row_bytes(), k_);
    }
    data_ = owned->data();
    owner_ = std::move(owned);
  }

  /// W (rows x cols) from packed blocks in GGUF's layout, copied as they
  /// are (no repacking): `blocks` holds the rows of P one after another
  /// (kRows: cols rows of rows / B blocks, a GGUF tensor [cols][rows];
  /// kCols: rows rows of cols / B blocks, a GGUF tensor [rows][cols]; B the
  /// block's weights, 32 or 256).
  /// \throws ShapeError when the block dimension is not a multiple of B or
  /// `blocks` has not exactly the size that takes.
  BlockWeightMatrix(Index rows, Index cols, BlocksAlong along,
                    std::span<const unsigned char> blocks)
      : BlockWeightMatrix(rows, cols, along) {
    require_size(blocks.size());
    auto owned = std::make_shared<std::vector<unsigned char>>(blocks.begin(), blocks.end());
    data_ = owned->data();
    owner_ = std::move(owned);
  }

  /// As above, but a view: the blocks stay at `blocks` (e.g. a memory-mapped
  /// GGUF file, unaligned is fine), kept alive by `owner`, which the matrix
  /// and its copies hold. `size` is the bytes available at `blocks`.
  BlockWeightMatrix(Index rows, Index cols, BlocksAlong along, const unsigned char* blocks,
                    std::size_t size, std::shared_ptr<const void> owner)
      : BlockWeightMatrix(rows, cols, along) {
    require_size(size);
    data_ = blocks;
    owner_ = std::move(owner);
  }

  /// W = 0 (rows x cols, blocks along `along`) in untouched zero pages
  /// (detail::zero_pages): all-zero bytes are blocks of scale 0 in every
  /// format, so the matrix is exactly zero and costs nothing until read.
  /// \throws ShapeError as the constructor from W.
  template <class Self = WeightMatrix<T, Format>>
  static Self zeros(Index rows, Index cols, BlocksAlong along = BlocksAlong::kRows) {
    const std::size_t n = BlockWeightMatrix(rows, cols, along).packed_bytes();
    auto owner = detail::zero_pages(n);
    const auto* p = static_cast<const unsigned char*>(owner.get());
    return Self(rows, cols, along, p, n, std::move(owner));
  }

  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  /// The dimension the blocks run along.
  [[nodiscard]] BlocksAlong blocks_along() const { return along_; }
  /// The packed size: rows of P times blocks per row times bytes per block.
  [[nodiscard]] std::size_t bytes() const { return packed_bytes(); }
  /// The packed blocks as held: rows of P one after another (GGUF's
  /// layout), or Q4_0 rows interleaved by eights (is_interleaved()).
  [[nodiscard]] std::span<const unsigned char> blocks() const { return {data_, packed_bytes()}; }

  /// Row j of P in GGUF's layout (k / B blocks): a pointer into blocks(),
  /// or for interleaved rows `scratch`, which it fills.
  const unsigned char* row_blocks(Index j, std::vector<unsigned char>& scratch) const {
    return rows_blocks(j, 1, scratch);
  }
  /// Rows j0 .. j0 + count - 1 of P in GGUF's layout, one after another: a
  /// pointer into blocks(), or for interleaved rows `scratch`, which it
  /// fills (whole groups in one pass each, quant::deinterleave_rows).
  const unsigned char* rows_blocks(Index j0, Index count,
                                   std::vector<unsigned char>& scratch) const {
    if (!interleaved_) return packed_row(j0);
    scratch.resize(static_cast<std::size_t>(count) * row_bytes());
    if constexpr (kInterleavable<Format>)
      quant::deinterleave_rows<RowsLayout8<Format>>(data_, n_p_, nb_, j0, count, scratch.data());
    return scratch.data();
  }

  /// Q4_0 and Q4_K: a copy of W with the rows of P interleaved by groups
  /// of 8 (quant::Q4_0Rows8, quant::Q4_KRows8; the rows after the last
  /// whole group stay as they are), the same size in new memory. Its decode
  /// product sums 8 rows at once:
  ///   - Q4_0 (detail::dot8_q4_0), X in Q8_0 as for the rows: 1.22-1.29x
  ///     the row loop per product with AVX2 alone, 1.01-1.07x the 512-bit
  ///     loop AMD's AVX-512 CPUs take;
  ///   - Q4_K (detail::dot8_q4_k), X in ggml's Q8_K (one scale per 256
  ///     values, detail::Q8KRow) where the rows take Q8_0.
  /// (benchmarks/README.md, "Q4_0 rows interleaved by eights" and "Q4_K
  /// rows interleaved by eights"). The float order (and for Q4_K X's
  /// quantization) differs from the rows', so decode results differ from
  /// this matrix's by rounding; prefill and the other products read the
  /// rows back and give the same bits.
  template <class Self = WeightMatrix<T, Format>>
  [[nodiscard]] Self interleaved() const requires kInterleavable<Format> {
    return interleaved<Self>(nullptr, nullptr);
  }
  /// As interleaved(), into memory of the caller's: bytes() bytes at `into`
  /// (any alignment; not overlapping blocks()), kept alive by `owner`,
  /// which the copy and its copies hold. Returns a copy of *this when it is
  /// interleaved already.
  template <class Self = WeightMatrix<T, Format>>
  [[nodiscard]] Self interleaved(unsigned char* into, std::shared_ptr<const void> owner)
      const requires kInterleavable<Format> {
    Self m(static_cast<const Self&>(*this));
    m.interleave(into, std::move(owner));
    return m;
  }
  /// `m`, built (viewed or copied) from blocks that are in the interleaved
  /// layout already, read as such: a GGUF file opened with interleave_q4
  /// holds its Q4_0 and Q4_K rows so (io::GgufFile,
  /// GgufTensorInfo::interleaved), and the loaders view them with this.
  template <class Self = WeightMatrix<T, Format>>
  [[nodiscard]] static Self already_interleaved(Self m) requires kInterleavable<Format> {
    m.held_interleaved();
    return m;
  }

  /// Whether the rows of P are interleaved by eights (interleaved()).
  [[nodiscard]] bool is_interleaved() const { return interleaved_; }

  /// W dequantized to T (rows x cols; allocates the whole matrix: for tests
  /// and inspection, never used by the products).
  [[nodiscard]] RowMatrix<T> dense() const {
    RowMatrix<T> w(rows_, cols_);
    std::vector<float> row(static_cast<std::size_t>(k_));
    std::vector<unsigned char> scratch;
    for (Index j = 0; j < n_p_; ++j) {
      Ops::dequantize(row_blocks(j, scratch), row.data(), k_);
      for (Index t = 0; t < k_; ++t) {
        const T v = static_cast<T>(row[static_cast<std::size_t>(t)]);
        if (along_ == BlocksAlong::kRows)
          w(t, j) = v;
        else
          w(j, t) = v;
      }
    }
    return w;
  }

  /// out = X W for X (n x rows) and out (n x cols). Fast with kRows.
  /// \throws ShapeError on mismatch.
  void multiply(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, false, Format::kName);
    if (along_ == BlocksAlong::kRows)
      product_p_transposed(x, out);
    else
      product_p(x, out);
  }

  /// out = X W^T for X (n x cols) and out (n x rows): the output head
  /// X E^T. Fast with kCols. \throws ShapeError on mismatch.
  void multiply_transposed(const ConstMatrixRef<T>& x, MatrixRef<T> out) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, true, Format::kName);
    if (along_ == BlocksAlong::kCols)
      product_p_transposed(x, out);
    else
      product_p(x, out);
  }

 protected:
  /// Q4_0 and Q4_K: the rows of P interleaved by eights into new memory
  /// (WeightMatrix<T, Q4_0Weights>::interleaved(), and Q4_K's).
  /// Into `into` (bytes() of them, not overlapping blocks()), kept alive
  /// by `owner`; null: into new memory of its own.
  void interleave(unsigned char* into,
                  std::shared_ptr<const void> owner) requires kInterleavable<Format> {
    if (interleaved_) return;
    if (into == nullptr) {
      auto owned = std::make_shared<std::vector<unsigned char>>(packed_bytes());
      into = owned->data();
      owner = std::move(owned);
    }
    quant::interleave_rows<RowsLayout8<Format>>(data_, n_p_, nb_, into);
    data_ = into;
    owner_ = std::move(owner);
    interleaved_ = true;
  }
  /// Q4_0 and Q4_K: the blocks held are in the interleaved layout already
  /// (WeightMatrix<T, Q4_0Weights>::already_interleaved(), and Q4_K's).
  void held_interleaved() requires kInterleavable<Format> { interleaved_ = true; }

 private:
  /// Shapes only; validates that k is a multiple of the block.
  BlockWeightMatrix(Index rows, Index cols, BlocksAlong along)
      : rows_(rows), cols_(cols), along_(along) {
    const bool by_rows = along == BlocksAlong::kRows;
    k_ = by_rows ? rows : cols;
    n_p_ = by_rows ? cols : rows;
    require_shapes(rows >= 0 && cols >= 0 && k_ % kB == 0, storage_name(), "W", rows, cols,
                   "a block", by_rows ? kB : 1, by_rows ? 1 : kB,
                   by_rows ? "the blocks run along W's rows (the dimension X W reduces over), so "
                             "W's rows must be a multiple of " +
                                 std::to_string(kB)
                           : "the blocks run along W's columns (the dimension X W^T reduces "
                             "over), so W's columns must be a multiple of " +
                                 std::to_string(kB));
    nb_ = k_ / kB;
  }

  void require_size(std::size_t size) const {
    if (size == packed_bytes()) return;
    throw ShapeError(std::string("kappa: ") + storage_name() + ": W is " +
                     shape_string(rows_, cols_) + ", which takes " +
                     std::to_string(packed_bytes()) + " bytes of blocks, but " +
                     std::to_string(size) + " bytes were given");
  }

  static std::string storage_name() { return std::string(Format::kName) + " weights"; }

  [[nodiscard]] std::size_t row_bytes() const {
    return static_cast<std::size_t>(nb_) * kBlockBytes;
  }
  [[nodiscard]] std::size_t packed_bytes() const {
    return static_cast<std::size_t>(n_p_) * row_bytes();
  }
  [[nodiscard]] const unsigned char* packed_row(Index j) const {
    return data_ + static_cast<std::size_t>(j) * row_bytes();
  }

  /// Rows r0 .. r0 + nr - 1 of P dequantized into `panel` (nr x k);
  /// interleaved rows are read back first, group by group.
  void dequantize_panel(Index r0, Index nr, RowMatrix<T>& panel, std::vector<float>& row) const {
    std::vector<unsigned char> read_back;
    const unsigned char* rows = rows_blocks(r0, nr, read_back);
    for (Index i = 0; i < nr; ++i) {
      const unsigned char* w = rows + static_cast<std::size_t>(i) * row_bytes();
      if constexpr (std::is_same_v<T, float>) {
        Ops::dequantize(w, panel.row(i).data(), k_);
      } else {
        Ops::dequantize(w, row.data(), k_);
        for (Index t = 0; t < k_; ++t)
          panel(i, t) = static_cast<T>(row[static_cast<std::size_t>(t)]);
      }
    }
  }

  /// out = X P^T (X: n x k, out: n x n_p): the fast product.
  void product_p_transposed(const ConstMatrixRef<T>& x, MatrixRef<T>& out) const {
    const Index n = x.rows();
    const int parts = decode_parts(n_p_);
    if (n > kFewRows) {
#if KAPPA_QUANT_GEMM_INT8
      // Prefill with VNNI or AVX2: X in Q8_0, integer products (quant_gemm.hpp).
      if constexpr (std::is_same_v<T, float>) {
        product_int8(x, out, parts);
        return;
      }
#endif
      // Prefill: panels of P in T, Eigen's GEMM.
      constexpr Index kPanel = 64;
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
      for (int p = 0; p < parts; ++p) {
        // Whole panels per thread, at the same boundaries for every thread
        // count, so that each output is computed the same way.
        const Index n_panels = (n_p_ + kPanel - 1) / kPanel;
        const Index lo = std::min(n_p_, n_panels * p / parts * kPanel);
        const Index hi = std::min(n_p_, n_panels * (p + 1) / parts * kPanel);
        if (hi <= lo) continue;
        RowMatrix<T> panel(std::min(kPanel, hi - lo), k_);
        std::vector<float> row(static_cast<std::size_t>(k_));
        for (Index r0 = lo; r0 < hi; r0 += kPanel) {
          const Index nr = std::min(kPanel, hi - r0);
          dequantize_panel(r0, nr, panel, row);
          out.middleCols(r0, nr).noalias() = x * panel.topRows(nr).transpose();  // (n, nr)
        }
      }
      return;
    }
    // Decode: X's rows in Q8_0 once, then integer block dot products.
    if constexpr (std::same_as<Format, Q4_KWeights>) {
      if (interleaved_) {
        const std::vector<Q8KRow> xk = q8k_rows(x);
        run_pieces(parts, [&](int p) { dots8_piece(xk, out, p, parts); });
        return;
      }
    }
    const std::vector<Q8Row> xs = q8_rows(x);
    run_pieces(parts, [&](int p) { dots_piece(xs, out, p, parts); });
  }

 public:
  /// multiply()'s decode product (a few rows of X) as a job for a region
  /// that the caller runs (multiply_each); X's rows in Q8_0 come from
  /// `shared`, made once for all the products of X. \throws ShapeError on
  /// mismatch.
  DecodeJob decode_job(const ConstMatrixRef<T>& x, MatrixRef<T>& out, DecodeInput& shared) const {
    detail::require_product_shapes<T>(x, out, rows_, cols_, false, Format::kName);
    if (along_ != BlocksAlong::kRows)  // product_p: one thread, no region of its own
      return {1, [this, &x, &out](int) { product_p(x, out); }};
    if constexpr (std::same_as<Format, Q4_KWeights>) {
      if (interleaved_) {
        const std::vector<Q8KRow>& xk = shared.q8k_rows(x);
        const int parts = decode_parts(n_p_);
        return {parts, [this, &xk, &out, parts](int p) { dots8_piece(xk, out, p, parts); }};
      }
    }
    const std::vector<Q8Row>& xs = shared.q8_rows(x);
    const int parts = decode_parts(n_p_);
    return {parts, [this, &xs, &out, parts](int p) { dots_piece(xs, out, p, parts); }};
  }

 private:
  /// Piece p of `parts` of the decode product out = X P^T: a block of P's
  /// rows, each row's block dot products with X's rows in Q8_0.
  void dots_piece(const std::vector<Q8Row>& xs, MatrixRef<T>& out, int p, int parts) const {
    if constexpr (std::same_as<Format, Q4_0Weights>) {
      if (interleaved_) return dots8_piece(xs, out, p, parts);
    }
    Index lo = 0, hi = 0;
    detail::block_range(n_p_, parts, p, lo, hi);
    for (Index j = lo; j < hi; ++j) {
      // (The block loops prefetch the weights ahead: prefetch_ahead.)
      const unsigned char* w = packed_row(j);
      for (std::size_t r = 0; r < xs.size(); ++r)
        out(static_cast<Index>(r), j) = static_cast<T>(Ops::dot(w, xs[r]));
    }
  }

  /// dots_piece for interleaved rows: the pieces split the groups of 8
  /// rows (the last piece also takes the rows after them, row by row).
  /// Q4_0: X's rows in Q8_0, dot8_q4_0 and the rows' dot_q4_0; Q4_K: X's
  /// rows in Q8_K, dot8_q4_k and dot_q4_k_q8k (the same steps).
  template <class XRow>
  void dots8_piece(const std::vector<XRow>& xs, MatrixRef<T>& out, int p, int parts) const {
    const Index groups = n_p_ / quant::kInterleave;
    Index lo = 0, hi = 0;
    detail::block_range(groups, parts, p, lo, hi);
    const std::size_t group_bytes = quant::kInterleave * row_bytes();
    float sums[quant::kInterleave];
    for (Index g = lo; g < hi; ++g) {
      const unsigned char* w = data_ + static_cast<std::size_t>(g) * group_bytes;
      for (std::size_t r = 0; r < xs.size(); ++r) {
        if constexpr (std::same_as<XRow, Q8KRow>)
          dot8_q4_k(w, xs[r], sums);
        else
          dot8_q4_0(w, xs[r], sums);
        for (Index i = 0; i < quant::kInterleave; ++i)
          out(static_cast<Index>(r), g * quant::kInterleave + i) = static_cast<T>(sums[i]);
      }
    }
    if (p != parts - 1) return;
    for (Index j = groups * quant::kInterleave; j < n_p_; ++j)
      for (std::size_t r = 0; r < xs.size(); ++r) {
        if constexpr (std::same_as<XRow, Q8KRow>)
          out(static_cast<Index>(r), j) = static_cast<T>(dot_q4_k_q8k(packed_row(j), xs[r]));
        else
          out(static_cast<Index>(r), j) = static_cast<T>(Ops::dot(packed_row(j), xs[r]));
      }
  }

  /// out = X P^T for many rows of X in 8-bit integers (quant_gemm.hpp):
  /// X's rows in Q8_0 once, then panels of 16 rows of P as codes, whole
  /// panels per thread at the same boundaries for every thread count.
  void product_int8(const ConstMatrixRef<T>& x, MatrixRef<T>& out, int parts) const {
    const Index n = x.rows();
    quant::Q8Panel xq;
    xq.resize(n, k_, Ops::kGroup);
    // X's rows split over the threads too (each row is quantized alone, so
    // the bytes do not depend on the split).
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
    for (int p = 0; p < parts; ++p) {
      Index lo = 0, hi = 0;
      detail::block_range(n, parts, p, lo, hi);
      std::vector<unsigned char> blocks;
      std::vector<float> xr(static_cast<std::size_t>(k_));
      for (Index r = lo; r < hi; ++r) {
        for (Index t = 0; t < k_; ++t)
          xr[static_cast<std::size_t>(t)] = static_cast<float>(x(r, t));
        xq.set_row(r, xr.data(), blocks);
      }
    }
    const Index n_panels = (n_p_ + quant::kPanelRows - 1) / quant::kPanelRows;
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
#endif
    for (int p = 0; p < parts; ++p) {
      const Index lo = n_panels * p / parts, hi = n_panels * (p + 1) / parts;
      if (hi <= lo) continue;
      quant::CodePanel panel;
      panel.resize(k_, Ops::kGroup, Ops::kCodeBits);
      std::array<const unsigned char*, quant::kPanelRows> rows{};
      std::vector<unsigned char> read_back;  // interleaved rows, read back
      const std::size_t bytes256 = row_bytes() * 256 / static_cast<std::size_t>(k_);
      for (Index pi = lo; pi < hi; ++pi) {
        const Index r0 = pi * quant::kPanelRows;
        const Index cols = std::min(quant::kPanelRows, n_p_ - r0);
        const unsigned char* first = rows_blocks(r0, cols, read_back);
        for (Index r = 0; r < quant::kPanelRows; ++r)
          rows[static_cast<std::size_t>(r)] =
              r < cols ? first + static_cast<std::size_t>(r) * row_bytes() : nullptr;
        panel.pack(rows.data(), bytes256, &Ops::codes);
        // out is row-major with unit inner stride (Eigen::Ref of a RowMatrix).
        quant::panel_product(panel, xq, 0, n, out.data() + r0, out.outerStride(), cols);
      }
    }
  }

  /// out = X P (X: n x n_p, out: n x k): the product along the other
  /// dimension, by panels of P and Eigen's GEMM.
  void product_p(const ConstMatrixRef<T>& x, MatrixRef<T>& out) const {
    constexpr Index kPanel = 64;
    out.setZero();
    RowMatrix<T> panel(std::min(kPanel, std::max<Index>(n_p_, 1)), k_);
    std::vector<float> row(static_cast<std::size_t>(k_));
    for (Index r0 = 0; r0 < n_p_; r0 += kPanel) {
      const Index nr = std::min(kPanel, n_p_ - r0);
      dequantize_panel(r0, nr, panel, row);
      out.noalias() += x.middleCols(r0, nr) * panel.topRows(nr);  // (n, k)
    }
  }

  Index rows_ = 0, cols_ = 0;
  BlocksAlong along_ = BlocksAlong::kRows;
  // reduction length, rows of P, weight blocks per row of P
  Index k_ = 0, n_p_ = 0, nb_ = 0;
  const unsigned char* data_ = nullptr;
  std::shared_ptr<const void> owner_;
  bool interleaved_ = false;  // Q4_0 / Q4_K rows interleaved by eights (interleaved())
};

}  // namespace detail

/// W in Q8_0 blocks (8.5 bits per weight). Layout, products and accuracy:
/// see the comment at the top of kappa/core/quant_weights.hpp.
///
/// **Example**: `WeightMatrix<float, Q8_0Weights> w(w_float);` then
/// `w.multiply(x, out)` computes out = X W with W quantized along its rows.
template <Scalar T>
class WeightMatrix<T, Q8_0Weights> : public detail::BlockWeightMatrix<T, Q8_0Weights> {
 public:
  using detail::BlockWeightMatrix<T, Q8_0Weights>::BlockWeightMatrix;
};

/// W in Q4_0 blocks (4.5 bits per weight). Layout, products and accuracy:
/// see the comment at the top of kappa/core/quant_weights.hpp.
template <Scalar T>
class WeightMatrix<T, Q4_0Weights> : public detail::BlockWeightMatrix<T, Q4_0Weights> {
 public:
  using detail::BlockWeightMatrix<T, Q4_0Weights>::BlockWeightMatrix;
  // interleaved(), already_interleaved(): see BlockWeightMatrix.
};

/// W in Q4_K super-blocks (4.5 bits per weight). Layout, products and
/// accuracy: see the comment at the top of kappa/core/quant_weights.hpp.
/// The reduction length must be a multiple of 256.
template <Scalar T>
class WeightMatrix<T, Q4_KWeights> : public detail::BlockWeightMatrix<T, Q4_KWeights> {
 public:
  using detail::BlockWeightMatrix<T, Q4_KWeights>::BlockWeightMatrix;
  // interleaved(), already_interleaved(): see BlockWeightMatrix.
};

/// W in Q6_K super-blocks (6.5625 bits per weight). Layout, products and
/// accuracy: see the comment at the top of kappa/core/quant_weights.hpp.
/// The reduction length must be a multiple of 256.
template <Scalar T>
class WeightMatrix<T, Q6_KWeights> : public detail::BlockWeightMatrix<T, Q6_KWeights> {
 public:
  using detail::BlockWeightMatrix<T, Q6_KWeights>::BlockWeightMatrix;
};

/// out[i] = X W_i for weight matrices that multiply the same X: attention's
/// W^Q, W^K and W^V, a gated feed-forward's W_gate and W_up kept apart. For
/// a decode step (at most kFewRows rows of X) the products run in one
/// parallel region, a hand-off of the threads instead of one per product,
/// and the block formats quantize X to Q8_0 once instead of once each; every
/// product keeps its own split of the outputs over the threads, so out[i]
/// is what w[i]->multiply(x, out[i]) gives, bit for bit. Longer X (a prompt)
/// and storages without decode_job() run the products one after another.
/// \throws ShapeError naming the product whose shapes do not match.
template <Scalar T, class W, std::size_t N>
void multiply_each(const ConstMatrixRef<T>& x, const std::array<const W*, N>& w,
                   std::array<MatrixRef<T>, N>& out) {
  detail::DecodeInput shared;
  constexpr bool kJobs = requires(const W& m, MatrixRef<T>& o) {
    { m.decode_job(x, o, shared) } -> std::same_as<detail::DecodeJob>;
  };
  if (!kJobs || x.rows() > kFewRows) {
    for (std::size_t i = 0; i < N; ++i) w[i]->multiply(x, out[i]);
    return;
  }
  if constexpr (kJobs) {
    std::array<detail::DecodeJob, N> jobs;
    int parts = 1;
    for (std::size_t i = 0; i < N; ++i) {
      jobs[i] = w[i]->decode_job(x, out[i], shared);
      parts = std::max(parts, jobs[i].parts);
    }
    detail::run_pieces(parts, [&](int p) {
      for (std::size_t i = 0; i < N; ++i)
        if (p < jobs[i].parts) jobs[i].run(p);
    });
  }
}

}  // namespace kappa
