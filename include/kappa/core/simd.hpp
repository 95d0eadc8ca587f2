// kappa/core/simd.hpp - one float vector type for the register-blocked
// kernels (attention/tile_simd.hpp, cache/decode_simd.hpp), at the widest
// width the compiler targets on x86: 16 lanes with AVX-512F, 8 with AVX2 +
// FMA.
//
// KAPPA_SIMD_LANES is 16, 8, or 0 when neither is enabled (the kernels that
// build on this header are then compiled out and their callers take Eigen
// paths). Only the operations those kernels share are here; each kernel adds
// its own (masked exp, widening loads of a storage format).
#pragma once

#if defined(__AVX512F__)
#define KAPPA_SIMD_LANES 16
#elif defined(__AVX2__) && defined(__FMA__)
#define KAPPA_SIMD_LANES 8
#else
#define KAPPA_SIMD_LANES 0
#endif

#if KAPPA_SIMD_LANES > 0
#include <immintrin.h>

namespace kappa::simd {

#if KAPPA_SIMD_LANES == 16
using Vec = __m512;
inline constexpr int kLanes = 16;
/// Vector registers the compiler may allocate.
inline constexpr int kRegisters = 32;
inline Vec load(const float* p) {
  return _mm512_loadu_ps(p);
}
inline void store(float* p, Vec x) {
  _mm512_storeu_ps(p, x);
}
inline Vec broadcast(float x) {
  return _mm512_set1_ps(x);
}
inline Vec fma(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline Vec max(Vec a, Vec b) {
  return _mm512_max_ps(a, b);
}
inline Vec sub(Vec a, Vec b) {
  return _mm512_sub_ps(a, b);
}
inline Vec add(Vec a, Vec b) {
  return _mm512_add_ps(a, b);
}
inline Vec mul(Vec a, Vec b) {
  return _mm512_mul_ps(a, b);
}
inline Vec zero() {
  return _mm512_setzero_ps();
}
/// The sum of the lanes of v.
inline float hsum(Vec v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
#else
using Vec = __m256;
inline constexpr int kLanes = 8;
inline constexpr int kRegisters = 16;
inline Vec load(const float* p) {
  return _mm256_loadu_ps(p);
}
inline void store(float* p, Vec x) {
  _mm256_storeu_ps(p, x);
}
inline Vec broadcast(float x) {
  return _mm256_set1_ps(x);
}
inline Vec fma(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline Vec max(Vec a, Vec b) {
  return _mm256_max_ps(a, b);
}
inline Vec sub(Vec a, Vec b) {
  return _mm256_sub_ps(a, b);
}
inline Vec add(Vec a, Vec b) {
  return _mm256_add_ps(a, b);
}
inline Vec mul(Vec a, Vec b) {
  return _mm256_mul_ps(a, b);
}
inline Vec zero() {
  return _mm256_setzero_ps();
}
inline float hsum(Vec v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
#endif

}  // namespace kappa::simd

#endif  // KAPPA_SIMD_LANES > 0
