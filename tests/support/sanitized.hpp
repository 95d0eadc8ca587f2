// tests/support/sanitized.hpp - whether this test executable runs under
// AddressSanitizer (preset asan).
//
// The sanitized run is there to find memory errors: it needs every code path,
// not every byte of the data that the optimized build checks exactness on. A
// few tests that spend most of the sanitized run on data volume (a megabyte
// of adversarial text, a 200k vocabulary loaded several times) use
// kSanitized to run the same paths on less data there; each says what it
// leaves to the optimized build.
#pragma once

namespace kappa::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// `full` in the optimized build, `reduced` under the sanitizers.
template <class N>
constexpr N unless_sanitized(N full, N reduced) {
  return kSanitized ? reduced : full;
}

}  // namespace kappa::testing
