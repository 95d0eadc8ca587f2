// kappa/core/checked.hpp - sizes validated where they enter: checked
// products and sums that throw a kappa error naming the value instead of
// overflowing (signed overflow is undefined behaviour) or asking the
// allocator for an impossible size.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kappa/core/error.hpp"

namespace kappa {

/// The largest element count kappa allocates for one matrix or buffer:
/// 2^40 elements (4 TiB of float). Sizes above it are reported as a
/// RangeError naming the value instead of reaching the allocator, whose
/// std::bad_alloc / std::length_error would not say which size was wrong.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

/// The most heads (query or key/value) one layer or cache may have: 2^16.
/// Real models use at most a few hundred; the limit keeps a mistyped count
/// (e.g. 2^40 kv heads, each a separate stream of the KV cache) from looping
/// for seconds before the allocator fails.
inline constexpr std::int64_t kMaxHeads = std::int64_t{1} << 16;

namespace detail {
[[noreturn]] inline void throw_size_error(std::string_view what, std::string_view detail_msg) {
  std::string msg = "kappa: ";
  msg += what;
  msg += ": ";
  msg += detail_msg;
  throw RangeError(msg);
}
}  // namespace detail

/// Throws RangeError unless 0 <= value: "kappa: <what> must be >= 0, got -1".
inline std::int64_t require_nonnegative(std::string_view what, std::int64_t value) {
  if (value < 0) detail::throw_size_error(what, "must be >= 0, got " + std::to_string(value));
  return value;
}

/// Throws RangeError unless 0 < value.
inline std::int64_t require_positive(std::string_view what, std::int64_t value) {
  if (value <= 0) detail::throw_size_error(what, "must be > 0, got " + std::to_string(value));
  return value;
}

/// a * b for non-negative a, b; throws RangeError naming `what` and both
/// factors when the product exceeds `limit` (default kMaxElements) or
/// overflows int64. Example: checked_mul("W^Q columns", n_heads, d_head).
inline std::int64_t checked_mul(std::string_view what, std::int64_t a, std::int64_t b,
                                std::int64_t limit = kMaxElements) {
  if (a < 0 || b < 0)
    detail::throw_size_error(what,
                             "negative factor in " + std::to_string(a) + " x " + std::to_string(b));
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > limit)
    detail::throw_size_error(what, std::to_string(a) + " x " + std::to_string(b) +
                                       " exceeds the limit of " + std::to_string(limit));
  return r;
}

/// a + b for non-negative a, b; throws RangeError naming `what` on overflow
/// or when the sum exceeds `limit` (default: the int64 range).
inline std::int64_t checked_add(std::string_view what, std::int64_t a, std::int64_t b,
                                std::int64_t limit = std::numeric_limits<std::int64_t>::max()) {
  if (a < 0 || b < 0)
    detail::throw_size_error(what,
                             "negative term in " + std::to_string(a) + " + " + std::to_string(b));
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > limit)
    detail::throw_size_error(what, std::to_string(a) + " + " + std::to_string(b) +
                                       " exceeds the limit of " + std::to_string(limit));
  return r;
}

/// Throws RangeError unless 0 <= count <= kMaxElements; for sizes about to be
/// allocated.
inline std::int64_t require_allocatable(std::string_view what, std::int64_t count) {
  if (count < 0 || count > kMaxElements)
    detail::throw_size_error(what, std::to_string(count) + " elements is outside [0, " +
                                       std::to_string(kMaxElements) + "]");
  return count;
}

/// Throws RangeError unless 1 <= value <= kMaxHeads.
inline std::int64_t require_head_count(std::string_view what, std::int64_t value) {
  if (value < 1 || value > kMaxHeads)
    detail::throw_size_error(
        what, std::to_string(value) + " is outside [1, " + std::to_string(kMaxHeads) + "]");
  return value;
}

/// Throws std::invalid_argument unless `value` is finite (not NaN, not
/// infinite): "kappa: <what> must be finite, got nan".
inline double require_finite(std::string_view what, double value) {
  if (!std::isfinite(value)) {
    std::string msg = "kappa: ";
    msg += what;
    msg += " must be finite, got ";
    msg += std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
    throw std::invalid_argument(msg);
  }
  return value;
}

}  // namespace kappa
