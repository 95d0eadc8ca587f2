// kappa/cache/formats.hpp - the number formats a cache may store its rows in,
// and the conversions between them and float.
//
// A decode step reads the whole cache once and does little arithmetic per
// byte, so its time is the cache's bytes over the memory bandwidth: storing
// the rows in fewer bits speeds it up by the same factor. The format is a
// policy type of the caches (KVCache, LatentCache, TokenStore):
//
// | format         | bytes per value | per row         | rounding from float           |
// |----------------|-----------------|-----------------|-------------------------------|
// | cache::Native  | sizeof(T)       | -               | none (the scalar type itself) |
// | cache::BF16    | 2               | -               | to nearest, ties to even      |
// | cache::F16     | 2               | -               | to nearest, ties to even      |
// | cache::Int8    | 1               | one float scale | to nearest of scale x {-127..127} |
//
// Scores and sums are always computed in T (float or double): the decode
// kernel (decode.hpp) widens stored values in registers or in small blocks of
// rows, never into a float copy of the cache.
//
// Special values:
//  * BF16 keeps float's exponent range: finite floats beyond the largest
//    BF16 (about 3.39e38) round to +-inf as IEEE rounding says; a NaN stays a
//    NaN (quieted, sign and top payload bits kept), never turns into inf.
//  * F16 (IEEE binary16) reaches only +-65504. f16_from_float() rounds as
//    IEEE says (finite values from 65520 up become +-inf); the F16 *cache*
//    instead saturates finite values to +-65504 so that a large activation
//    cannot turn into inf (and a score into NaN). NaN stays NaN.
//  * Int8 stores row r as q_rj = round(x_rj / s_r) in -127..127 with
//    s_r = max_j |x_rj| / 127 (symmetric, as llama.cpp's q8_0 but one scale
//    per row: per token and kv head). An all-zero row has s_r = 0. A row
//    with a NaN or inf has no such scale: appending it throws.
// T = double is narrowed to float first (one more rounding) for BF16, F16
// and the Int8 scale.
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#if (defined(__F16C__) && defined(__AVX__)) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// The nearest bfloat16 to f (round to nearest, ties to even): the top 16
/// bits of the float after rounding. Overflow gives +-inf; a NaN gives a
/// quiet NaN of the same sign (never inf).
inline std::uint16_t bf16_from_float(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: truncate, force the quiet bit
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

/// The float whose top 16 bits are b (exact).
inline float float_from_bf16(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// The nearest IEEE binary16 to f (round to nearest, ties to even), with
/// subnormals. Finite values of magnitude >= 65520 round to +-inf, as IEEE
/// says; a NaN gives a quiet NaN of the same sign.
inline std::uint16_t f16_from_float(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t u = bits & 0x7fffffffu;
  if (u > 0x7f800000u)  // NaN: keep the top payload bits, force the quiet bit
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  if (u >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (u >= 0x38800000u) {  // a normal half: re-bias the exponent (127 -> 15), round 13 bits
    std::uint32_t h = (u - 0x38000000u) >> 13;
    const std::uint32_t rest = u & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may raise the exponent
    return static_cast<std::uint16_t>(sign | h);
  }
  if (u <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie, to even 0)
  // A subnormal half h 2^-24: h = mantissa (with its leading 1) >> (126 - e).
  const std::uint32_t e = u >> 23;
  const std::uint32_t m = (u & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14 .. 24
  std::uint32_t h = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // h = 1024 is the smallest normal
  return static_cast<std::uint16_t>(sign | h);
}

/// The float value of the IEEE binary16 h (exact; subnormals, inf and NaN
/// included).
inline float float_from_f16(std::uint16_t h) {
  // Shifted into a float's place the 15 magnitude bits are h's value times
  // 2^-112 (subnormal halves become float subnormals), so one multiply by
  // 2^112 rebiases every finite value exactly; inf and NaN keep all-ones.
  const std::uint32_t mag = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t special = (h & 0x7c00u) == 0x7c00u ? (mag | 0x7f800000u) : 0u;
  const float finite = std::bit_cast<float>(mag) * 0x1p112f;
  const std::uint32_t out = special != 0u ? special : std::bit_cast<std::uint32_t>(finite);
  return std::bit_cast<float>(out | sign);
}

namespace cache {

/// Storage format: the cache's scalar type T itself (float or double).
struct Native {
  template <class T>
  using Element = T;
  static constexpr bool kScaled = false;
  static constexpr const char* kName = "native";
};

/// Storage format: bfloat16 (8 exponent bits, 7 mantissa bits); 2 bytes a value.
struct BF16 {
  template <class T>
  using Element = std::uint16_t;
  static constexpr bool kScaled = false;
  static constexpr const char* kName = "bf16";
};

/// Storage format: IEEE binary16 (5 exponent bits, 10 mantissa bits),
/// saturated to +-65504; 2 bytes a value.
struct F16 {
  template <class T>
  using Element = std::uint16_t;
  static constexpr bool kScaled = false;
  static constexpr const char* kName = "f16";
};

/// Storage format: signed 8-bit integers with one float scale per row (per
/// token and stream, i.e. per token and kv head); 1 byte a value + 4 a row.
struct Int8 {
  template <class T>
  using Element = std::int8_t;
  static constexpr bool kScaled = true;
  static constexpr const char* kName = "int8";
};

/// What a storage format is: one of the four above.
template <class F>
concept StorageFormat = std::same_as<F, Native> || std::same_as<F, BF16> || std::same_as<F, F16> ||
    std::same_as<F, Int8>;

/// A storage format chosen at run time (a model's whole cache, the generate
/// command's --cache-type): one of the four policy types above.
enum class Format { kNative, kBF16, kF16, kInt8 };

/// The name of a run-time format: "native", "bf16", "f16" or "int8" (the
/// policy types' kName).
inline const char* to_string(Format f) {
  switch (f) {
    case Format::kNative:
      return Native::kName;
    case Format::kBF16:
      return BF16::kName;
    case Format::kF16:
      return F16::kName;
    case Format::kInt8:
      return Int8::kName;
  }
  return "?";
}

/// The format named `name`: "native" (also "f32", "float": the model's own
/// scalar type), "bf16", "f16" (also "fp16") or "int8" (also "q8").
/// \throws std::invalid_argument naming the name and the accepted ones.
inline Format parse_format(std::string_view name) {
  if (name == "native" || name == "f32" || name == "float") return Format::kNative;
  if (name == "bf16") return Format::kBF16;
  if (name == "f16" || name == "fp16") return Format::kF16;
  if (name == "int8" || name == "q8") return Format::kInt8;
  throw std::invalid_argument("kappa: unknown cache format '" + std::string(name) +
                              "' (native, f32, bf16, f16, int8)");
}

/// Calls f(Native{}), f(BF16{}), f(F16{}) or f(Int8{}) for a run-time format
/// (all four are instantiated) and returns its result.
template <class Fn>
decltype(auto) with_format(Format format, Fn&& f) {
  switch (format) {
    case Format::kBF16:
      return std::forward<Fn>(f)(BF16{});
    case Format::kF16:
      return std::forward<Fn>(f)(F16{});
    case Format::kInt8:
      return std::forward<Fn>(f)(Int8{});
    case Format::kNative:
      break;
  }
  return std::forward<Fn>(f)(Native{});
}

/// The run-time tag of a format type.
template <StorageFormat F>
constexpr Format format_of() {
  if constexpr (std::same_as<F, BF16>)
    return Format::kBF16;
  else if constexpr (std::same_as<F, F16>)
    return Format::kF16;
  else if constexpr (std::same_as<F, Int8>)
    return Format::kInt8;
  else
    return Format::kNative;
}

/// Bytes of one stored row of `width` values in format F for scalar type T
/// (the values, plus the scale for Int8).
template <StorageFormat F, Scalar T>
constexpr std::size_t row_bytes(std::size_t width) {
  return width * sizeof(typename F::template Element<T>) + (F::kScaled ? sizeof(float) : 0);
}

/// One value x as a BF16 or F16 cache stores it (see the file comment): the
/// F16 cache saturates finite values to +-65504 first (a NaN passes).
template <StorageFormat F>
requires(std::same_as<F, BF16> || std::same_as<F, F16>) std::uint16_t narrow_value(float x) {
  if constexpr (std::same_as<F, BF16>) {
    return bf16_from_float(x);
  } else {
    constexpr float kMax = 65504.0f;
    return f16_from_float(x > kMax ? kMax : (x < -kMax ? -kMax : x));
  }
}

/// One stored value widened to T, exactly, without an Int8 row scale.
template <StorageFormat F, Scalar T>
T widen_value(typename F::template Element<T> e) {
  if constexpr (std::same_as<F, BF16>) {
    return static_cast<T>(float_from_bf16(e));
  } else if constexpr (std::same_as<F, F16>) {
    return static_cast<T>(float_from_f16(e));
  } else {
    return static_cast<T>(e);  // Native: T itself; Int8: the integer
  }
}

/// Encodes one row of n values x into `out` (n elements) and, for Int8, its
/// scale into *scale (see the file comment for the rounding).
/// \throws std::invalid_argument for Int8 if a value is NaN or infinite
///         (checked before anything is written).
template <StorageFormat F, Scalar T>
void encode_row(const T* x, Index n, typename F::template Element<T>* out, float* scale) {
  if constexpr (std::same_as<F, Native>) {
    for (Index j = 0; j < n; ++j) out[j] = x[j];
  } else if constexpr (!F::kScaled) {  // BF16, F16
    for (Index j = 0; j < n; ++j) out[j] = narrow_value<F>(static_cast<float>(x[j]));
  } else {
    float amax = 0.0f;
    for (Index j = 0; j < n; ++j) {
      const float v = static_cast<float>(x[j]);
      if (!std::isfinite(v))
        throw std::invalid_argument("kappa: cache::Int8: value " + std::to_string(v) +
                                    " at column " + std::to_string(j) +
                                    " of a row cannot be stored (no finite row scale)");
      amax = std::fmax(amax, std::fabs(v));
    }
    const float s = amax / 127.0f;
    *scale = s;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (Index j = 0; j < n; ++j) {
      float r = std::nearbyint(static_cast<float>(x[j]) * inv);
      r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
      out[j] = static_cast<std::int8_t>(r);
    }
  }
}

/// Widens one stored row to T *without* its Int8 scale (the decode kernel
/// multiplies the dot product by it instead): exact for every format.
template <StorageFormat F, Scalar T>
void widen_row(const typename F::template Element<T>* in, Index n, T* x) {
  Index j = 0;
  if constexpr (std::same_as<T, float>) {
#if defined(__AVX2__)
    // 8 values per step: zero- (BF16) or sign-extend (Int8) to 32 bits.
    if constexpr (std::same_as<F, BF16>) {
      for (; j + 8 <= n; j += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j));
        const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(x + j, _mm256_castsi256_ps(w));
      }
    } else if constexpr (std::same_as<F, Int8>) {
      for (; j + 8 <= n; j += 8) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + j));
        _mm256_storeu_ps(x + j, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
      }
    }
#endif
#if defined(__F16C__) && defined(__AVX__)
    if constexpr (std::same_as<F, F16>) {
      for (; j + 8 <= n; j += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j));
        _mm256_storeu_ps(x + j, _mm256_cvtph_ps(h));
      }
    }
#endif
  }
  for (; j < n; ++j) x[j] = widen_value<F, T>(in[j]);
}

/// Decodes one stored row (n values, and its scale for Int8) into x.
template <StorageFormat F, Scalar T>
void decode_row(const typename F::template Element<T>* in, Index n, float scale, T* x) {
  if constexpr (F::kScaled) {
    // The scale is applied by the caller when it can be (once per dot
    // product); here the row is widened exactly, times the scale.
    const T s = static_cast<T>(scale);
    for (Index j = 0; j < n; ++j) x[j] = static_cast<T>(in[j]) * s;
  } else {
    (void)scale;
    widen_row<F, T>(in, n, x);
  }
}

/// A read-only view of rows stored in format F: `rows` rows of `cols` values,
/// row r at data + r * stride, its Int8 scale at scales[r] (nullptr for the
/// other formats). What the caches hand to the decode kernel. Any address
/// works, but the decode kernel reads fastest when every row starts on a
/// 64-byte cache line: in our runs a float view of your own buffer whose
/// rows straddled lines read at 0.63-0.79 of a plain read of its bytes.
template <Scalar T, StorageFormat F>
struct StoredRows {
  using Element = typename F::template Element<T>;
  const Element* data = nullptr;
  Index rows = 0;
  Index cols = 0;
  Index stride = 0;
  const float* scales = nullptr;

  [[nodiscard]] const Element* row(Index r) const { return data + r * stride; }
  [[nodiscard]] float scale(Index r) const {
    if constexpr (F::kScaled) return scales[r];
    return 1.0f;
  }
  /// Rows [r0, r0 + n) as a view.
  [[nodiscard]] StoredRows middle_rows(Index r0, Index n) const {
    StoredRows s = *this;
    s.data = data + r0 * stride;
    s.rows = n;
    if constexpr (F::kScaled) s.scales = scales + r0;
    return s;
  }
  /// Columns [c0, c0 + n) of every row (the scales stay those of the rows).
  [[nodiscard]] StoredRows middle_cols(Index c0, Index n) const {
    StoredRows s = *this;
    s.data = data + c0;
    s.cols = n;
    return s;
  }
  /// The rows decoded to T (rows x cols): for tests and inspection, it
  /// allocates the full copy the decode kernel avoids.
  [[nodiscard]] RowMatrix<T> decoded() const {
    RowMatrix<T> out(rows, cols);
    for (Index r = 0; r < rows; ++r) decode_row<F, T>(row(r), cols, scale(r), out.row(r).data());
    return out;
  }
};

}  // namespace cache
}  // namespace kappa
