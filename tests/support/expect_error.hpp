// tests/support/expect_error.hpp - the check that a call throws an error of
// a given type whose message names what it should (the shapes, the file,
// the field), in one line at the test's site:
//
//   expect_error<kappa::ShapeError>([&] { w.multiply(x, out); }, {"(2 x 63)", "(64 x 33)"});
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <typeinfo>

namespace kappa::testing {

/// Calls f and expects it to throw E with every string of `parts` in its
/// message; returns the message for further checks. No exception is a
/// failure (and returns ""); an exception of another type propagates, which
/// fails the test too. Failures name the caller's line (file and line
/// default to the call's: __builtin_FILE and __builtin_LINE, which g++ and
/// clang have; clang 14 cannot compile libstdc++'s std::source_location).
template <class E, class F>
std::string expect_error(F&& f, std::initializer_list<std::string_view> parts = {},
                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const ::testing::ScopedTrace trace(file, line, "expect_error");
  std::string msg;
  try {
    static_cast<F&&>(f)();
  } catch (const E& e) {
    msg = e.what();
    for (std::string_view p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' is not in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no exception (expected " << typeid(E).name() << ")";
  return msg;
}

}  // namespace kappa::testing
