// kappa/core/error.hpp - the exception types for bad user input, and the
// helpers that build their messages.
//
// Three tiers (see docs/design.md): type misuse fails a concept/static_assert;
// internal invariants use KAPPA_ASSERT (compiled out with NDEBUG); bad user
// input at an API boundary throws one of the types below, with a message that
// names what was wrong (both shapes, the id and the size, the file and byte).
#pragma once

#include <cassert>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kappa/core/matrix.hpp"

/// Internal invariant check; compiled out with NDEBUG. Never for user input.
#define KAPPA_ASSERT(cond) assert(cond)

namespace kappa {

/// Operands whose shapes do not fit together. The message names both shapes.
class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A malformed file or field. The message names the file (or field) and the
/// byte offset or line where reading failed.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An index (token id, position, head) outside its valid range. The message
/// names the offending value and the size of the range.
class RangeError : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

/// "(rows x cols)": how kappa prints a shape in messages.
inline std::string shape_string(Index rows, Index cols) {
  std::string s = "(";  // appended piecewise: GCC 12 warns (-Wrestrict) on a + chain
  s.append(std::to_string(rows)).append(" x ").append(std::to_string(cols)).push_back(')');
  return s;
}

/// The shape of any Eigen expression, formatted as by shape_string().
template <class Derived>
std::string shape_of(const Eigen::EigenBase<Derived>& m) {
  return shape_string(m.rows(), m.cols());
}

/// Throws ShapeError unless `ok`, naming both operands' shapes and the rule.
/// Example message: "kappa: attention: Q is (4 x 8) but K is (5 x 7)
/// (Q and K must have the same number of columns, d_QK)".
inline void require_shapes(bool ok, std::string_view what, std::string_view a_name, Index a_rows,
                           Index a_cols, std::string_view b_name, Index b_rows, Index b_cols,
                           std::string_view rule) {
  if (ok) return;
  std::string msg = "kappa: ";
  msg += what;
  msg += ": ";
  msg += a_name;
  msg += " is ";
  msg += shape_string(a_rows, a_cols);
  msg += " but ";
  msg += b_name;
  msg += " is ";
  msg += shape_string(b_rows, b_cols);
  if (!rule.empty()) {
    msg += " (";
    msg += rule;
    msg += ")";
  }
  throw ShapeError(msg);
}

/// As above, reading the shapes off two Eigen objects.
template <class A, class B>
void require_shapes(bool ok, std::string_view what, std::string_view a_name, const A& a,
                    std::string_view b_name, const B& b, std::string_view rule) {
  require_shapes(ok, what, a_name, a.rows(), a.cols(), b_name, b.rows(), b.cols(), rule);
}

/// Throws RangeError naming `what`, the value and the size unless
/// 0 <= value < size. Example: "kappa: token id 50257 is out of range for a
/// vocabulary of size 50257".
inline void require_index(std::string_view what, long long value, long long size,
                          std::string_view range_name) {
  if (value >= 0 && value < size) return;
  std::string msg = "kappa: ";
  msg += what;
  msg += " ";
  msg += std::to_string(value);
  msg += " is out of range for ";
  msg += range_name;
  msg += " of size ";
  msg += std::to_string(size);
  throw RangeError(msg);
}

}  // namespace kappa
