// Embeddings against golden .npy files written by numpy from the definitions
// (tests/reference/make_embed_golden.py): RoPE in both conventions as
// Hugging Face (rotate_half) and Meta (complex multiplication) write them,
// sinusoidal encodings, and the seeded normal stream.
#include <gtest/gtest.h>

#include <string>

#include "kappa/embed/embedding.hpp"
#include "kappa/embed/positional.hpp"
#include "kappa/embed/rope.hpp"
#include "kappa/io/npy.hpp"
#include "support/reference.hpp"

using kappa::Index;
using kappa::RowMatrix;

namespace {
template <class T>
RowMatrix<T> golden(const std::string& name) {
  // (appended in place: GCC 12 reports a false -Warray-bounds in the chain of
  // operator+ once this file shares a unity TU with the other embed tests)
  std::string path = KAPPA_TEST_DATA_DIR "/embed/";
  path += name;
  path += ".npy";
  return kappa::io::read_npy_matrix<T>(path);
}
}  // namespace

template <class T>
class EmbedGolden : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EmbedGolden, Scalars);

TYPED_TEST(EmbedGolden, RopeBothConventions) {
  using T = TypeParam;
  using Tol = kappa::testing::Tolerance<T>;
  struct Case {
    const char* name;
    Index d_rot, offset;
    double base;
  };
  for (const Case& c : {Case{"full", 8, 0, 10000.0}, Case{"offset", 8, 37, 10000.0},
                        Case{"partial", 6, 3, 500.0}, Case{"long", 64, 100000, 1e6}}) {
    const RowMatrix<T> x = golden<T>(std::string("rope_") + c.name + "_x");
    const RowMatrix<T> neox =
        kappa::Rope<T, kappa::RotateHalf>(c.d_rot, c.base).rotated(x, c.offset);
    const RowMatrix<T> gptj =
        kappa::Rope<T, kappa::Interleaved>(c.d_rot, c.base).rotated(x, c.offset);
    // Angles up to 1e5 rad: cos/sin are computed in double for both, so the
    // tolerance is that of T.
    EXPECT_LE(kappa::testing::max_scaled_error(
                  neox, golden<T>(std::string("rope_") + c.name + "_neox"), Tol::kRel, Tol::kAbs),
              1.0)
        << c.name;
    EXPECT_LE(kappa::testing::max_scaled_error(
                  gptj, golden<T>(std::string("rope_") + c.name + "_gptj"), Tol::kRel, Tol::kAbs),
              1.0)
        << c.name;
  }
}

TYPED_TEST(EmbedGolden, Sinusoidal) {
  using T = TypeParam;
  using Tol = kappa::testing::Tolerance<T>;
  EXPECT_LE(
      kappa::testing::max_scaled_error(kappa::SinusoidalPositions<T>(6).encode(7, 2),
                                       golden<T>("sinusoidal_7x6_off2"), Tol::kRel, Tol::kAbs),
      1.0);
  EXPECT_LE(
      kappa::testing::max_scaled_error(kappa::SinusoidalPositions<T>(5).encode(4, 0),
                                       golden<T>("sinusoidal_4x5_off0"), Tol::kRel, Tol::kAbs),
      1.0);
  EXPECT_LE(kappa::testing::max_scaled_error(
                kappa::SinusoidalPositions<T>(16, 100.0).encode(3, 1000),
                golden<T>("sinusoidal_3x16_off1000_base100"), Tol::kRel, Tol::kAbs),
            1.0);
}

TYPED_TEST(EmbedGolden, SeededNormalStream) {
  using T = TypeParam;
  using Tol = kappa::testing::Tolerance<T>;
  EXPECT_LE(
      kappa::testing::max_scaled_error(kappa::Embedding<T>::random(4, 3, 42).table(),
                                       golden<T>("seeded_normal_4x3_seed42"), Tol::kRel, Tol::kAbs),
      1.0);
  EXPECT_LE(kappa::testing::max_scaled_error(kappa::LearnedPositions<T>(3, 5, 7, 0.02).table(),
                                             golden<T>("seeded_normal_3x5_seed7_std002"), Tol::kRel,
                                             Tol::kAbs),
            1.0);
}
