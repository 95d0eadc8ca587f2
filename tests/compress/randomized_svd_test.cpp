// Tests for kappa/core/randomized_svd.hpp: the randomized rank-r SVD (Halko,
// Martinsson, Tropp 2011) against Eigen's exact BDCSVD on matrices with a
// known spectrum: the error bound of HMT Theorem 10.5, closeness to the
// optimum sigma_{r+1} / tail_r, the effect of power iterations on a slowly
// decaying spectrum, exactness at full rank, and bad parameters.
#include <gtest/gtest.h>

#include <Eigen/QR>
#include <Eigen/SVD>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kappa/core/error.hpp"
#include "kappa/core/randomized_svd.hpp"
#include "support/reference.hpp"

namespace kappa {
namespace {

using ColMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;

// Orthonormal columns (rows x cols) from the QR of a seeded uniform matrix.
ColMat rsvd_orthonormal(Index rows, Index cols, unsigned seed) {
  const ColMat g = testing::random_matrix<double>(rows, cols, seed);
  const Eigen::HouseholderQR<ColMat> qr(g);
  return qr.householderQ() * ColMat::Identity(rows, cols);
}

// A = U diag(sigma) V^T (m x n) with the given singular values.
RowMatrix<double> with_spectrum(Index m, Index n, const Vector<double>& sigma, unsigned seed) {
  const Index k = sigma.size();
  const ColMat u = rsvd_orthonormal(m, k, seed), v = rsvd_orthonormal(n, k, seed + 1);
  return u * sigma.asDiagonal() * v.transpose();
}

double spectral_norm(const RowMatrix<double>& a) {
  const Eigen::BDCSVD<ColMat> svd(a);
  return svd.singularValues()(0);
}

// tail_r = (sum_{j > r} sigma_j^2)^(1/2)
double frobenius_tail(const Vector<double>& sigma, Index r) {
  return sigma.tail(sigma.size() - r).norm();
}

// The rank-r truncation from Eigen's BDCSVD of A, computed here, independently
// of kappa::truncated_svd.
RowMatrix<double> bdcsvd_truncation(const RowMatrix<double>& a, Index r) {
  const Eigen::BDCSVD<ColMat> svd(a, Eigen::ComputeThinU | Eigen::ComputeThinV);
  return svd.matrixU().leftCols(r) * svd.singularValues().head(r).asDiagonal() *
         svd.matrixV().leftCols(r).transpose();
}

TEST(RandomizedSvd, FastDecayMeetsTheHmtBoundAndTheOptimum) {
  const Index m = 60, n = 40, r = 10, p = 5;
  Vector<double> sigma(n);
  for (Index j = 0; j < n; ++j) sigma(j) = std::pow(0.5, static_cast<double>(j));
  const RowMatrix<double> a = with_spectrum(m, n, sigma, 3);
  const double tail = frobenius_tail(sigma, r);
  const double hmt = std::sqrt(1.0 + static_cast<double>(r) / static_cast<double>(p - 1)) * tail;
  const RowMatrix<double> exact = bdcsvd_truncation(a, r);
  EXPECT_NEAR((a - exact).norm(), tail, 1e-12);  // Eckart-Young, the reference itself
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    // q = 0: within HMT's bound, and (sigma halves per index) near the optimum.
    const auto f =
        randomized_svd<double>(a, r, {.oversampling = p, .power_iterations = 0, .seed = seed});
    ASSERT_EQ(f.u.rows(), m);
    ASSERT_EQ(f.u.cols(), r);
    ASSERT_EQ(f.s.size(), r);
    ASSERT_EQ(f.vt.rows(), r);
    ASSERT_EQ(f.vt.cols(), n);
    const double err = (a - f.reconstruct()).norm();
    EXPECT_LE(err, hmt) << "seed " << seed;
    EXPECT_LE(err, 1.1 * tail) << "seed " << seed;
    EXPECT_LE((f.reconstruct() - exact).norm(), 0.5 * tail) << "seed " << seed;
    for (Index j = 0; j < r; ++j) EXPECT_NEAR(f.s(j), sigma(j), 1e-2 * sigma(j)) << j;
    // q = 1: the sample sees sigma_j^3, the gap to sigma_{l+1} is 2^-18: optimal.
    const auto g =
        randomized_svd<double>(a, r, {.oversampling = p, .power_iterations = 1, .seed = seed});
    EXPECT_LE((a - g.reconstruct()).norm(), 1.01 * tail) << "seed " << seed;
    EXPECT_LE((g.reconstruct() - exact).norm(), 0.05 * tail) << "seed " << seed;
    for (Index j = 0; j < r; ++j) EXPECT_NEAR(g.s(j), sigma(j), 1e-4 * sigma(j)) << j;
  }
}

TEST(RandomizedSvd, PowerIterationsRescueASlowlyDecayingSpectrum) {
  // sigma_j = 1 / sqrt(j + 1): the tail holds most of the mass, and a plain
  // range finder (q = 0) mixes it into the sample; (A A^T)^q A has
  // sigma_j^(2q+1), which decays fast enough.
  const Index m = 90, n = 70, r = 8;
  Vector<double> sigma(n);
  for (Index j = 0; j < n; ++j) sigma(j) = 1.0 / std::sqrt(static_cast<double>(j + 1));
  const RowMatrix<double> a = with_spectrum(m, n, sigma, 7);
  const double opt2 = sigma(r);  // sigma_{r+1}, the optimal spectral error
  const RandomizedSvdOptions q0{.oversampling = 4, .power_iterations = 0, .seed = 5};
  RandomizedSvdOptions q1 = q0, q3 = q0;
  q1.power_iterations = 1;
  q3.power_iterations = 3;
  const double e0 = spectral_norm(a - randomized_svd<double>(a, r, q0).reconstruct());
  const double e1 = spectral_norm(a - randomized_svd<double>(a, r, q1).reconstruct());
  const double e3 = spectral_norm(a - randomized_svd<double>(a, r, q3).reconstruct());
  EXPECT_NEAR(spectral_norm(a - bdcsvd_truncation(a, r)), opt2, 1e-12);
  EXPECT_GT(e0, 1.5 * opt2);  // far from optimal without power iterations
  EXPECT_LT(e1, e0);
  EXPECT_LT(e3, e1);
  EXPECT_LT(e3, 1.15 * opt2);
  // Frobenius: within HMT's bound (p = 4) even for q = 0.
  const double hmt = std::sqrt(1.0 + static_cast<double>(r) / 3.0) * frobenius_tail(sigma, r);
  EXPECT_LE((a - randomized_svd<double>(a, r, q0).reconstruct()).norm(), hmt);
}

TEST(RandomizedSvd, FactorsAreOrthonormalAndOrdered) {
  const RowMatrix<double> a = testing::random_matrix<double>(50, 30, 9);
  const auto f =
      randomized_svd<double>(a, 12, {.oversampling = 6, .power_iterations = 2, .seed = 4});
  const ColMat iu = f.u.transpose() * f.u, iv = f.vt * f.vt.transpose();
  EXPECT_LT((iu - ColMat::Identity(12, 12)).cwiseAbs().maxCoeff(), 1e-13);
  EXPECT_LT((iv - ColMat::Identity(12, 12)).cwiseAbs().maxCoeff(), 1e-13);
  for (Index j = 0; j + 1 < 12; ++j) EXPECT_GE(f.s(j), f.s(j + 1));
  EXPECT_GE(f.s(11), 0.0);
}

TEST(RandomizedSvd, FullRankIsExactEvenForRankDeficientMatrices) {
  const RowMatrix<double> a = testing::random_matrix<double>(25, 18, 2);
  const auto f =
      randomized_svd<double>(a, 18, {.oversampling = 0, .power_iterations = 0, .seed = 1});
  EXPECT_LT(testing::max_scaled_error(f.reconstruct(), a, 1e-13, 0), 1.0);
  // rank 3, asked for rank 10: Householder QR keeps Q orthonormal.
  const RowMatrix<double> low =
      testing::random_matrix<double>(25, 3, 4) * testing::random_matrix<double>(3, 18, 5);
  const auto g =
      randomized_svd<double>(low, 10, {.oversampling = 2, .power_iterations = 1, .seed = 1});
  EXPECT_LT(testing::max_scaled_error(g.reconstruct(), low, 1e-12, 0), 1.0);
  EXPECT_LT(g.s(3), 1e-12 * g.s(0));
  const ColMat iu = g.u.transpose() * g.u;
  EXPECT_LT((iu - ColMat::Identity(10, 10)).cwiseAbs().maxCoeff(), 1e-12);
}

TEST(RandomizedSvd, FloatMatchesDoubleToFloatRounding) {
  Vector<double> sigma(20);
  for (Index j = 0; j < 20; ++j) sigma(j) = std::pow(0.7, static_cast<double>(j));
  const RowMatrix<double> a = with_spectrum(30, 20, sigma, 12);
  const RowMatrix<float> af = a.cast<float>();
  const auto f =
      randomized_svd<float>(af, 6, {.oversampling = 6, .power_iterations = 2, .seed = 3});
  const double err = (a - f.reconstruct().cast<double>()).norm();
  EXPECT_LE(err, 1.01 * frobenius_tail(sigma, 6));
  for (Index j = 0; j < 6; ++j) EXPECT_NEAR(f.s(j), sigma(j), 1e-4);
  const auto full =
      randomized_svd<float>(af, 20, {.oversampling = 0, .power_iterations = 0, .seed = 3});
  EXPECT_LT(testing::max_scaled_error(full.reconstruct(), af, 1e-5, 0), 1.0);
}

TEST(RandomizedSvd, SeedDeterminesTheResult) {
  const RowMatrix<double> a = testing::random_matrix<double>(20, 16, 8);
  const RandomizedSvdOptions o{.oversampling = 2, .power_iterations = 0, .seed = 42};
  const auto f1 = randomized_svd<double>(a, 5, o), f2 = randomized_svd<double>(a, 5, o);
  EXPECT_EQ(f1.u, f2.u);
  EXPECT_EQ(f1.s, f2.s);
  EXPECT_EQ(f1.vt, f2.vt);
  RandomizedSvdOptions other = o;
  other.seed = 43;
  EXPECT_NE(randomized_svd<double>(a, 5, other).s, f1.s);
}

TEST(RandomizedSvd, TruncatedSvdIsTheBdcsvdTruncation) {
  const RowMatrix<double> a = testing::random_matrix<double>(14, 22, 6);
  const auto f = truncated_svd<double>(a, 5);
  EXPECT_LT(testing::max_scaled_error(f.reconstruct(), bdcsvd_truncation(a, 5), 1e-13, 0), 1.0);
}

template <class F>
std::string rsvd_message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(RandomizedSvd, BadParametersThrowNamingTheValues) {
  const RowMatrix<double> a = testing::random_matrix<double>(6, 4, 1);
  EXPECT_NE(rsvd_message_of([&] { (void)randomized_svd<double>(a, 0); }).find("r = 0"),
            std::string::npos);
  EXPECT_NE(rsvd_message_of([&] { (void)randomized_svd<double>(a, 5); }).find("min(m, n) = 4"),
            std::string::npos);
  EXPECT_NE(rsvd_message_of([&] {
              (void)randomized_svd<double>(a, 2, {.oversampling = -1});
            }).find("oversampling p = -1"),
            std::string::npos);
  EXPECT_NE(rsvd_message_of([&] {
              (void)randomized_svd<double>(a, 2, {.power_iterations = -2});
            }).find("q = -2"),
            std::string::npos);
  EXPECT_THROW((void)randomized_svd<double>(RowMatrix<double>(0, 3), 1), ShapeError);
  RowMatrix<double> bad = a;
  bad(2, 1) = std::nan("");
  EXPECT_NE(rsvd_message_of([&] { (void)randomized_svd<double>(bad, 2); }).find("NaN"),
            std::string::npos);
  EXPECT_THROW((void)truncated_svd<double>(a, 7), std::invalid_argument);
}

}  // namespace
}  // namespace kappa
