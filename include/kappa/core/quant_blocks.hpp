// kappa/core/quant_blocks.hpp - the block-quantized weight formats of GGUF
// (Q8_0, Q4_0, Q4_K, Q6_K): their byte layouts, the scalar reference
// quantizers for Q8_0 and Q4_0 (byte-identical to ggml's reference
// quantizer, quantize_row_q8_0_ref / quantize_row_q4_0_ref), and the
// dequantizers of all four, plus IEEE binary16 and bfloat16 conversions.
//
// A row of k weights is k / B blocks of B weights each (B = 32 for Q8_0 and
// Q4_0, 256 for the "k-quants" Q4_K and Q6_K), stored one after another,
// little-endian. Every function here reads and writes bytes through memcpy:
// blocks in a file need not be aligned for their 16-bit fields.
//
//   Q8_0  (34 bytes / 32)   d: f16; qs[32]: int8.          w_j = d q_j
//   Q4_0  (18 bytes / 32)   d: f16; qs[16]: two 4-bit q    w_j = d (q_j - 8)
//                           (low nibble of qs[j]: element j, high: j + 16)
//   Q4_K  (144 bytes / 256) d, dmin: f16; scales[12]: 8 pairs of 6-bit
//                           (scale, min); qs[128]: 4-bit q. Sub-block s of 32:
//                           w = (d sc_s) q - (dmin m_s)
//   Q6_K  (210 bytes / 256) ql[128]: low 4 bits; qh[64]: high 2 bits;
//                           scales[16]: int8, one per 16 weights; d: f16.
//                           w = (d sc) (q - 32), q in [0, 64)
//
// Dequantization is exact float arithmetic in ggml's order (each product of
// a small integer and an f16 scale is exact; Q4_K's one subtraction and
// Q6_K's second product round once, as ggml's do), so it equals ggml's
// dequantize_row_* bit for bit; tests/io/gguf_test.cpp checks both against
// ggml's own output.
//
// The scalar code here is the reference; fast dot products over packed
// blocks build on these layouts.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace kappa::quant {

/// Weights per block of Q8_0 and Q4_0.
inline constexpr std::int64_t kBlock32 = 32;
/// Weights per super-block of the k-quants (Q4_K, Q6_K).
inline constexpr std::int64_t kBlockK = 256;

/// Q8_0: 32 weights w_j = d q_j; `d` is IEEE binary16 bits.
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[32];
};
/// Q4_0: 32 weights w_j = d (q_j - 8); qs[j] holds q_j (low nibble) and
/// q_{j+16} (high nibble).
struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[16];
};
/// Q4_K: 256 weights in 8 sub-blocks of 32, each with a 6-bit scale and a
/// 6-bit min packed into `scales`; w = d sc q - dmin m.
struct BlockQ4_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
/// Q6_K: 256 weights in 16 groups of 16, each with an int8 scale;
/// w = d sc (q - 32) with q's low 4 bits in `ql` and high 2 bits in `qh`.
struct BlockQ6_K {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 &&
                  sizeof(BlockQ6_K) == 210,
              "kappa: the GGUF block structs must have no padding");
static_assert(std::endian::native == std::endian::little,
              "kappa: the GGUF block formats are read on little-endian hosts only");

// ---- binary16 and bfloat16 ---------------------------------------------------------

/// IEEE binary16 bits -> float, exactly (subnormals, infinities, NaN payloads).
inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa 2^-24, exact
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  const std::uint32_t bits = exponent == 0x1f
                                 ? (sign | 0x7f800000u | (mantissa << 13))
                                 : (sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
  return std::bit_cast<float>(bits);
}

/// float -> IEEE binary16 bits, rounding to nearest, ties to even (as ggml's
/// GGML_FP32_TO_FP16): subnormal results are rounded too, magnitudes from
/// 65520 up give infinity, and NaN gives the quiet NaN 0x7e00 with the sign.
inline std::uint16_t fp16_from_float(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520
  std::uint32_t h = 0, rem = 0, half = 0;
  if (ax >= 0x38800000u) {  // normal binary16 (>= 2^-14): rebias, keep 10 bits
    h = (ax - 0x38000000u) >> 13;
    rem = ax & 0x1fffu;
    half = 0x1000u;
  } else {  // subnormal binary16 or zero: round(|f| 2^24) units of 2^-24
    if (ax < 0x33000000u) return sign;  // below 2^-25 (2^-25 itself ties to 0)
    const std::uint32_t e = ax >> 23;   // 102 .. 112
    const std::uint32_t mantissa = (ax & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14 .. 24
    h = mantissa >> shift;
    rem = mantissa & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
  }
  if (rem > half || (rem == half && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<std::uint16_t>(sign | h);
}

/// bfloat16 bits -> float, exactly (bfloat16 is a float's high half).
inline float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

namespace detail {

inline std::uint16_t load_u16(const unsigned char* p) {
  std::uint16_t v = 0;
  std::memcpy(&v, p, 2);
  return v;
}

inline void store_u16(unsigned char* p, std::uint16_t v) {
  std::memcpy(p, &v, 2);
}

/// A float's conversion to an 8-bit integer as ggml's C code performs it on
/// x86-64 (`(int8_t)v`: truncation toward zero, then the low byte), as an
/// int in [-128, 127]. A value outside the int32 range (only the infinities
/// and NaNs a subnormal scale produces, 1/d overflowing) gives 0, what
/// x86-64's cvttss2si result truncated to 8 bits is, where C leaves it
/// undefined.
inline int trunc_to_int8(float v) {
  if (!(v > -2147483648.0f && v < 2147483648.0f)) return 0;
  const auto low = static_cast<std::uint32_t>(static_cast<std::int32_t>(v)) & 0xFFu;
  return low >= 128u ? static_cast<int>(low) - 256 : static_cast<int>(low);
}

/// std::round(v) (ties away from zero) as an int32, for |v| < 2^31, in
/// operations compilers vectorize (std::round is a call into libm, and
/// std::trunc keeps GCC 12 from vectorizing): the conversion truncates,
/// v - trunc(v) is exact, and its magnitude against 0.5 decides the tie as
/// std::round does.
inline std::int32_t round_half_away_int(float v) {
  const auto t = static_cast<std::int32_t>(v);
  const float f = v - static_cast<float>(t);
  return t + (f >= 0.5f ? 1 : 0) - (f <= -0.5f ? 1 : 0);
}

/// 6-bit scale and min j (0..7) of a Q4_K block's packed `scales`: for
/// j = 0..3 the low 6 bits of bytes j and j + 4; for j = 4..7 the nibbles of
/// byte j + 4 with their top 2 bits in bytes j - 4 and j.
inline void q4_k_scale_min(int j, const unsigned char* q, std::uint8_t& sc, std::uint8_t& m) {
  if (j < 4) {
    sc = static_cast<std::uint8_t>(q[j] & 63);
    m = static_cast<std::uint8_t>(q[j + 4] & 63);
  } else {
    sc = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace detail

// ---- sizes ----------------------------------------------------------------------------

/// Bytes of one block of each format.
inline constexpr std::size_t kBytesQ8_0 = sizeof(BlockQ8_0);
inline constexpr std::size_t kBytesQ4_0 = sizeof(BlockQ4_0);
inline constexpr std::size_t kBytesQ4_K = sizeof(BlockQ4_K);
inline constexpr std::size_t kBytesQ6_K = sizeof(BlockQ6_K);

// ---- quantize (Q8_0, Q4_0) ----------------------------------------------------------------

/// Q8_0 of a row x[0..k) (k a multiple of 32) into k / 32 blocks at `out`,
/// byte for byte as ggml's quantize_row_q8_0_ref: per block,
/// amax = max |x_j|, d = amax / 127 (float), stored as f16 (round to nearest
/// even), and q_j = roundf(x_j (1 / d)) (ties away from zero; 1/d from the
/// float d, not from the stored f16), with q = 0 when d = 0. The maximum is
/// ggml's `MAX(amax, |x_j|)` (a NaN is kept until the next element replaces
/// it); inputs are meant to be finite.
inline void quantize_row_q8_0(const float* x, unsigned char* out, std::int64_t k) {
  for (std::int64_t b = 0; b < k / kBlock32; ++b, x += kBlock32, out += kBytesQ8_0) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    detail::store_u16(out, fp16_from_float(d));
    // When every x is finite and d is a normal float, |x / d| <= 127 up to
    // three roundings, so every rounded value is an int8 and converts
    // directly, in a loop compilers vectorize; otherwise (a subnormal d, an
    // infinity or NaN) each goes through trunc_to_int8, as x86-64's
    // conversion does it.
    int finite = 0;
    for (int j = 0; j < 32; ++j) finite += std::fabs(x[j]) <= std::numeric_limits<float>::max();
    if (finite == 32 && d >= std::numeric_limits<float>::min()) {
      for (int j = 0; j < 32; ++j) {
        const std::int32_t q = detail::round_half_away_int(x[j] * id);
        out[2 + j] = static_cast<unsigned char>(static_cast<std::uint32_t>(q) & 0xFFu);
      }
    } else {
      for (int j = 0; j < 32; ++j) {
        const int q = detail::trunc_to_int8(std::round(x[j] * id));
        out[2 + j] = static_cast<unsigned char>(static_cast<unsigned>(q) & 0xFFu);
      }
    }
  }
}

/// Q4_0 of a row x[0..k) (k a multiple of 32) into k / 32 blocks at `out`,
/// byte for byte as ggml's quantize_row_q4_0_ref: per block, m is the x_j of
/// largest magnitude (the first one on ties) with its sign, d = m / -8
/// (float; so m itself maps to q = 0), stored as f16, and
/// q_j = min(15, trunc(x_j (1 / d) + 8.5)), with 1/d := 0 when d = 0.
inline void quantize_row_q4_0(const float* x, unsigned char* out, std::int64_t k) {
  for (std::int64_t b = 0; b < k / kBlock32; ++b, x += kBlock32, out += kBytesQ4_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    detail::store_u16(out, fp16_from_float(d));
    for (int j = 0; j < 16; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[16 + j] * id;
      // ggml: xi = MIN(15, (int8_t)(x + 8.5f)) as uint8_t; qs = xi0 | xi1 << 4
      const int q0 = detail::trunc_to_int8(x0 + 8.5f);
      const int q1 = detail::trunc_to_int8(x1 + 8.5f);
      const unsigned xi0 = static_cast<unsigned>(q0 < 15 ? q0 : 15) & 0xFFu;
      const unsigned xi1 = static_cast<unsigned>(q1 < 15 ? q1 : 15) & 0xFFu;
      out[2 + j] = static_cast<unsigned char>((xi0 | (xi1 << 4)) & 0xFFu);
    }
  }
}

// ---- Q4_0 rows interleaved by eights ------------------------------------------------------

/// Rows of Q4_0 blocks interleaved by groups of kInterleave (8): for group
/// g (rows 8 g .. 8 g + 7) and block b, the 8 rows' fp16 scales (16 bytes),
/// then their 16 bytes of nibbles, row by row (128 bytes): 144 bytes, the
/// same as 8 blocks, so a group takes the bytes its 8 rows took and the rows
/// after the last whole group (fewer than 8) stay as they were, at the same
/// offsets. One load then gives 8 rows' scales, and a decode loop sums 8
/// rows at once (kappa::detail::dot8_q4_0). The same idea as llama.cpp's
/// "q4_0_8x8" repacking; the byte order is ours.
inline constexpr std::int64_t kInterleave = 8;
inline constexpr std::size_t kBytesQ4_0x8 = kInterleave * kBytesQ4_0;
/// Rows of Q4_K super-blocks interleaved by groups of 8 the same way: for
/// super-block i of a group, 1152 bytes (8 super-blocks' worth):
///   bytes 0..15     the 8 rows' d (fp16), row r at 2 r;
///   bytes 16..31    their dmin, row r at 16 + 2 r;
///   bytes 32..127   the 12 bytes of packed 6-bit scales and mins as three
///                   4-byte words u0, u1, u2 (bytes 0..3, 4..7, 8..11):
///                   word u of row r at 32 + 32 u + 4 r, so each word is
///                   unpacked for the 8 rows at once;
///   bytes 128..1151 the nibbles qs (128 bytes a row) in 4-byte pieces:
///                   qs[32 p + 4 c .. + 4) of row r (p = 0..3 the pair of
///                   sub-blocks, c = 0..7) at 128 + 32 (8 p + c) + 4 r.
/// A decode loop then multiplies 4 weights of each of the 8 rows by the
/// same 4 values of X in one instruction (kappa::detail::dot8_q4_k). The
/// idea of llama.cpp's "q4_K_8x8" repacking; the byte order is ours.
inline constexpr std::size_t kBytesQ4_Kx8 = kInterleave * kBytesQ4_K;

/// The two interleaved layouts, as policies of the functions below: the
/// bytes and weights of one row's block, and where row r's block goes in a
/// group's block (to_group) and back (from_group).
struct Q4_0Rows8 {
  static constexpr std::int64_t kBlockWeights = kBlock32;
  static constexpr std::size_t kBlockBytes = kBytesQ4_0;
  static void to_group(const unsigned char* block, std::size_t r, unsigned char* group_block) {
    std::memcpy(group_block + 2 * r, block, 2);
    std::memcpy(group_block + 16 + 16 * r, block + 2, 16);
  }
  static void from_group(const unsigned char* group_block, std::size_t r, unsigned char* block) {
    std::memcpy(block, group_block + 2 * r, 2);
    std::memcpy(block + 2, group_block + 16 + 16 * r, 16);
  }
};
struct Q4_KRows8 {
  static constexpr std::int64_t kBlockWeights = kBlockK;
  static constexpr std::size_t kBlockBytes = kBytesQ4_K;
  static void to_group(const unsigned char* block, std::size_t r, unsigned char* group_block) {
    std::memcpy(group_block + 2 * r, block, 2);
    std::memcpy(group_block + 16 + 2 * r, block + 2, 2);
    for (std::size_t u = 0; u < 3; ++u)
      std::memcpy(group_block + 32 + 32 * u + 4 * r, block + 4 + 4 * u, 4);
    for (std::size_t piece = 0; piece < 32; ++piece)
      std::memcpy(group_block + 128 + 32 * piece + 4 * r, block + 16 + 4 * piece, 4);
  }
  static void from_group(const unsigned char* group_block, std::size_t r, unsigned char* block) {
    std::memcpy(block, group_block + 2 * r, 2);
    std::memcpy(block + 2, group_block + 16 + 2 * r, 2);
    for (std::size_t u = 0; u < 3; ++u)
      std::memcpy(block + 4 + 4 * u, group_block + 32 + 32 * u + 4 * r, 4);
    for (std::size_t piece = 0; piece < 32; ++piece)
      std::memcpy(block + 16 + 4 * piece, group_block + 128 + 32 * piece + 4 * r, 4);
  }
};

/// `n_rows` rows of `nb` blocks at `rows` (one after another) into layout
/// L's interleaved form at `out` (the same size; not overlapping `rows`).
template <class L>
void interleave_rows(const unsigned char* rows, std::int64_t n_rows, std::int64_t nb,
                     unsigned char* out) {
  const auto row_bytes = static_cast<std::size_t>(nb) * L::kBlockBytes;
  const std::int64_t groups = n_rows / kInterleave;
  for (std::int64_t g = 0; g < groups; ++g) {
    const unsigned char* in = rows + static_cast<std::size_t>(g * kInterleave) * row_bytes;
    unsigned char* o = out + static_cast<std::size_t>(g * kInterleave) * row_bytes;
    for (std::int64_t b = 0; b < nb; ++b, o += kInterleave * L::kBlockBytes) {
      for (std::size_t r = 0; r < kInterleave; ++r)
        L::to_group(in + r * row_bytes + static_cast<std::size_t>(b) * L::kBlockBytes, r, o);
    }
  }
  const std::size_t done = static_cast<std::size_t>(groups * kInterleave) * row_bytes;
  std::memcpy(out + done, rows + done, static_cast<std::size_t>(n_rows) * row_bytes - done);
}

/// interleave_rows where the rows are (the same bytes, at `rows`): each
/// group's 8 rows are copied aside and written back interleaved, so no
/// second copy of the matrix is ever held.
template <class L>
void interleave_rows_in_place(unsigned char* rows, std::int64_t n_rows, std::int64_t nb) {
  const std::size_t group_bytes = static_cast<std::size_t>(nb) * kInterleave * L::kBlockBytes;
  std::vector<unsigned char> aside(group_bytes);
  for (std::int64_t g = 0; g < n_rows / kInterleave; ++g) {
    unsigned char* group = rows + static_cast<std::size_t>(g) * group_bytes;
    std::memcpy(aside.data(), group, group_bytes);
    interleave_rows<L>(aside.data(), kInterleave, nb, group);
  }
}

/// Row j of `n_rows` interleaved rows of `nb` blocks (layout L at `data`)
/// back in GGUF's layout, nb blocks at `out`.
template <class L>
void deinterleave_row(const unsigned char* data, std::int64_t n_rows, std::int64_t nb,
                      std::int64_t j, unsigned char* out) {
  const auto row_bytes = static_cast<std::size_t>(nb) * L::kBlockBytes;
  if (j >= n_rows / kInterleave * kInterleave) {
    std::memcpy(out, data + static_cast<std::size_t>(j) * row_bytes, row_bytes);
    return;
  }
  const auto r = static_cast<std::size_t>(j % kInterleave);
  const unsigned char* group = data + static_cast<std::size_t>(j - j % kInterleave) * row_bytes;
  for (std::int64_t b = 0; b < nb; ++b, out += L::kBlockBytes)
    L::from_group(group + static_cast<std::size_t>(b) * kInterleave * L::kBlockBytes, r, out);
}

/// Rows j0 .. j0 + count - 1 of `n_rows` interleaved rows of `nb` blocks
/// (layout L) back in GGUF's layout, one after another at `out`: whole
/// groups in one pass over their blocks each, other rows one by one.
template <class L>
void deinterleave_rows(const unsigned char* data, std::int64_t n_rows, std::int64_t nb,
                       std::int64_t j0, std::int64_t count, unsigned char* out) {
  const auto row_bytes = static_cast<std::size_t>(nb) * L::kBlockBytes;
  const std::int64_t grouped = n_rows / kInterleave * kInterleave;
  std::int64_t j = j0;
  for (; j % kInterleave != 0 && j < j0 + count; ++j)
    deinterleave_row<L>(data, n_rows, nb, j, out + static_cast<std::size_t>(j - j0) * row_bytes);
  for (; j + kInterleave <= j0 + count && j < grouped; j += kInterleave) {
    const unsigned char* group = data + static_cast<std::size_t>(j) * row_bytes;
    unsigned char* o = out + static_cast<std::size_t>(j - j0) * row_bytes;
    for (std::int64_t b = 0; b < nb; ++b, o += L::kBlockBytes) {
      for (std::size_t r = 0; r < kInterleave; ++r)
        L::from_group(group + static_cast<std::size_t>(b) * kInterleave * L::kBlockBytes, r,
                      o + r * row_bytes);
    }
  }
  for (; j < j0 + count; ++j)
    deinterleave_row<L>(data, n_rows, nb, j, out + static_cast<std::size_t>(j - j0) * row_bytes);
}

/// The Q4_0 layout's functions by their names (interleave_rows<Q4_0Rows8>
/// and the rest).
inline void interleave_q4_0(const unsigned char* rows, std::int64_t n_rows, std::int64_t nb,
                            unsigned char* out) {
  interleave_rows<Q4_0Rows8>(rows, n_rows, nb, out);
}
inline void interleave_q4_0_in_place(unsigned char* rows, std::int64_t n_rows, std::int64_t nb) {
  interleave_rows_in_place<Q4_0Rows8>(rows, n_rows, nb);
}
inline void deinterleave_row_q4_0(const unsigned char* data, std::int64_t n_rows, std::int64_t nb,
                                  std::int64_t j, unsigned char* out) {
  deinterleave_row<Q4_0Rows8>(data, n_rows, nb, j, out);
}
inline void deinterleave_rows_q4_0(const unsigned char* data, std::int64_t n_rows, std::int64_t nb,
                                   std::int64_t j0, std::int64_t count, unsigned char* out) {
  deinterleave_rows<Q4_0Rows8>(data, n_rows, nb, j0, count, out);
}

// ---- dequantize ---------------------------------------------------------------------------

/// y[0..k) from k / 32 Q8_0 blocks: y_j = d q_j.
inline void dequantize_row_q8_0(const unsigned char* in, float* y, std::int64_t k) {
  for (std::int64_t b = 0; b < k / kBlock32; ++b, in += kBytesQ8_0, y += kBlock32) {
    const float d = fp16_to_float(detail::load_u16(in));
    for (int j = 0; j < 32; ++j) {
      std::int8_t q = 0;
      std::memcpy(&q, in + 2 + j, 1);
      y[j] = static_cast<float>(q) * d;
    }
  }
}

/// y[0..k) from k / 32 Q4_0 blocks: y_j = (q_j - 8) d.
inline void dequantize_row_q4_0(const unsigned char* in, float* y, std::int64_t k) {
  for (std::int64_t b = 0; b < k / kBlock32; ++b, in += kBytesQ4_0, y += kBlock32) {
    const float d = fp16_to_float(detail::load_u16(in));
    for (int j = 0; j < 16; ++j) {
      const int q0 = (in[2 + j] & 0x0F) - 8;
      const int q1 = (in[2 + j] >> 4) - 8;
      y[j] = static_cast<float>(q0) * d;
      y[j + 16] = static_cast<float>(q1) * d;
    }
  }
}

/// y[0..k) from k / 256 Q4_K blocks: for each pair of sub-blocks (64
/// weights sharing qs[32 i .. 32 i + 32)), the low nibbles are the first 32
/// weights with scale/min 2 i, the high nibbles the next 32 with 2 i + 1:
/// y = (d sc) q - (dmin m).
inline void dequantize_row_q4_K(const unsigned char* in, float* y, std::int64_t k) {
  for (std::int64_t b = 0; b < k / kBlockK; ++b, in += kBytesQ4_K) {
    const float d = fp16_to_float(detail::load_u16(in));
    const float dmin = fp16_to_float(detail::load_u16(in + 2));
    const unsigned char* scales = in + 4;
    const unsigned char* q = in + 16;
    for (int pair = 0; pair < 4; ++pair, q += 32) {
      std::uint8_t sc = 0, m = 0;
      detail::q4_k_scale_min(2 * pair, scales, sc, m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      detail::q4_k_scale_min(2 * pair + 1, scales, sc, m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        const float p = d1 * static_cast<float>(q[l] & 0xF);
        *y++ = p - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const float p = d2 * static_cast<float>(q[l] >> 4);
        *y++ = p - m2;
      }
    }
  }
}

/// y[0..k) from k / 256 Q6_K blocks. Per half of 128 weights (ql advancing
/// by 64, qh by 32, scales by 8), weight l + 32 i (i = 0..3, l = 0..31) has
/// low bits ql[l] (i = 0), ql[l + 32] (1), ql[l] >> 4 (2), ql[l + 32] >> 4
/// (3), high bits (qh[l] >> 2 i) & 3, and scale scales[l / 16 + 2 i], i.e.
/// weight e of the half has scales[e / 16]: y = (d sc) (q - 32). The q - 32
/// of a half are unpacked first, then each group of 16 is scaled: two loops
/// that compilers vectorize, the same two float products per weight.
inline void dequantize_row_q6_K(const unsigned char* in, float* y, std::int64_t k) {
  for (std::int64_t b = 0; b < k / kBlockK; ++b, in += kBytesQ6_K) {
    const float d = fp16_to_float(detail::load_u16(in + 208));
    const unsigned char* ql = in;
    const unsigned char* qh = in + 128;
    const unsigned char* sc_bytes = in + 192;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc_bytes += 8, y += 128) {
      std::int8_t q[128];
      for (int l = 0; l < 32; ++l) {
        q[l] = static_cast<std::int8_t>(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
        q[l + 32] = static_cast<std::int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        q[l + 64] = static_cast<std::int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        q[l + 96] = static_cast<std::int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
      for (int g = 0; g < 8; ++g) {
        std::int8_t sc = 0;
        std::memcpy(&sc, sc_bytes + g, 1);
        const float ds = d * static_cast<float>(sc);
        for (int j = 16 * g; j < 16 * g + 16; ++j) y[j] = ds * static_cast<float>(q[j]);
      }
    }
  }
}

}  // namespace kappa::quant
