// Tests for kappa/core/error.hpp: messages name both shapes, the id and size.
#include <gtest/gtest.h>

#include "kappa/core/error.hpp"

namespace kappa {
namespace {

TEST(ShapeString, FormatsRowsByCols) {
  EXPECT_EQ(shape_string(3, 4), "(3 x 4)");
  RowMatrix<float> m(2, 5);
  EXPECT_EQ(shape_of(m), "(2 x 5)");
}

TEST(RequireShapes, MessageNamesBothShapesAndRule) {
  RowMatrix<float> a(4, 8), b(5, 7);
  try {
    require_shapes(a.cols() == b.cols(), "attention", "Q", a, "K", b, "same d_QK");
    FAIL() << "no throw";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "kappa: attention: Q is (4 x 8) but K is (5 x 7) (same d_QK)");
  }
  EXPECT_NO_THROW(require_shapes(true, "x", "a", a, "b", b, ""));
}

TEST(RequireShapes, ShapeErrorIsInvalidArgument) {
  EXPECT_THROW(require_shapes(false, "w", "a", 1, 2, "b", 3, 4, ""), std::invalid_argument);
}

TEST(RequireIndex, NamesIdAndSize) {
  try {
    require_index("token id", 50257, 50257, "a vocabulary");
    FAIL() << "no throw";
  } catch (const RangeError& e) {
    EXPECT_STREQ(e.what(), "kappa: token id 50257 is out of range for a vocabulary of size 50257");
  }
  EXPECT_THROW(require_index("id", -1, 10, "v"), std::out_of_range);
  EXPECT_NO_THROW(require_index("id", 9, 10, "v"));
}

TEST(FormatError, IsRuntimeError) {
  const FormatError e("kappa: f.npy: byte 10: bad magic");
  const std::runtime_error& base = e;
  EXPECT_STREQ(base.what(), "kappa: f.npy: byte 10: bad magic");
}

}  // namespace
}  // namespace kappa
