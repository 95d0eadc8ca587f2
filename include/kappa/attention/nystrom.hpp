// kappa/attention/nystrom.hpp - Nystrom attention (Xiong et al. 2021,
// "Nystromformer: A Nystrom-based Algorithm for Approximating Self-Attention",
// AAAI 2021, eq. 14), a whole-attention approximation (whole_attention.hpp).
//
// With m query landmarks Q~ (m x d_QK), m key landmarks K~ (m x d_QK) and
// softmax taken row by row,
//
//     F = softmax(s Q K~^T)      (N_Q x m)
//     A~ = softmax(s Q~ K~^T)    (m x m)
//     B = softmax(s Q~ K^T)      (m x N_KV)
//     Y ~= F A~^+ (B V)          (N_Q x d_V)
//
// evaluated right to left, so nothing N_Q x N_KV is formed: cost
// 2 m (N_Q + m) d_QK + 2 m N_KV (d_QK + d_V) + 2 N_Q m d_V flops plus the
// pseudo-inverse (O(m^3)), memory O((N_Q + N_KV) m).
//
// Accuracy for m < N: F, A~ and B are three different softmaxes, so F A~^+ B
// is not a projection of S, and where A~ is ill-conditioned its exact
// pseudo-inverse amplifies their disagreement. On unstructured inputs
// (uniform random Q, K in [-2, 2], N = 256, d = 64, segment means) the
// relative error of Y at m = 64 is 5.8 with the cutoff m eps, 1.8 with
// rcond = 1e-3, 0.93 with 1e-2 and 0.83 with the paper's 6 iterations (which
// regularize implicitly); at m = N they give 1e-14, 3e-4, 1e-2 and 6e-2.
// Attention of trained layers on text is smoother and fares better; measure
// (the default keeps the exactness, raise rcond to trade it for stability).
//
// Exactness: with every key a landmark (m = N_KV = N_Q, K~ = K and Q~ = Q, or
// any ordering of them) F = A~ = B = S := softmax(s Q K^T) and
// S S^+ S = S (a Moore-Penrose identity), so Y = S V exactly; with the SVD
// pseudo-inverse the only deviation is the relative cutoff (see below).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kappa/attention/masks.hpp"
#include "kappa/attention/whole_attention.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/decompositions.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa::approx {

/// How the m landmarks are chosen.
enum class Landmarks {
  /// The paper's choice: the sequence is cut into m contiguous segments of
  /// floor or ceil N / m rows (segment l is rows floor(l N / m) ..
  /// floor((l + 1) N / m) - 1) and each landmark is its segment's mean, for
  /// keys and queries alike. Deterministic (the seed is unused).
  kSegmentMeans,
  /// m distinct keys drawn uniformly without replacement: the first m entries,
  /// sorted, of the seeded permutation (whole_attention.hpp). The query
  /// landmarks are the queries at the same positions when N_Q = N_KV, else a
  /// second draw from the queries with seed + 1.
  kUniform,
  /// m distinct keys drawn without replacement with probability proportional
  /// to ||k_j|| (weighted_sample_without_replacement); the query landmarks as
  /// for kUniform (by ||q_i|| when N_Q != N_KV).
  kKeyNorm,
};

/// How A~^+ is formed.
enum class PseudoInverse {
  /// SVD of A~ (in double), singular values below rcond * sigma_max treated
  /// as zero: the exact Moore-Penrose inverse of the rank-truncated A~,
  /// backward stable whatever A~'s conditioning. A~ is m x m, so its O(m^3)
  /// cost stays below the O(N m d) of the rest for m up to about sqrt(N d).
  kSvd,
  /// A complete orthogonal decomposition (column-pivoted QR, then an RQ of
  /// its leading rows; in double) with the same relative cutoff applied to
  /// the pivots |R_ii| / |R_00|: the minimum-norm solution for the
  /// numerical rank at a fraction of the SVD's cost. Exact at m = N like the
  /// SVD, but where A~ is ill-conditioned its pivoted-QR rank decision and
  /// truncation differ from the SVD's: on Gaussian random Q, K, V
  /// (N = 2048, d = 64, m = 64..512) its error for m < N was about 10 times
  /// the SVD's. Prefer kSvd unless m is large and A~ well-conditioned.
  kCod,
  /// The paper's iteration (Razavi et al. 2014), in double:
  /// Z_0 = A~^T / (||A~||_1 ||A~||_inf),
  /// Z_{k+1} = Z_k (13 I - A~ Z_k (15 I - A~ Z_k (7 I - A~ Z_k))) / 4.
  /// Matrix products only (what GPUs like); it converges to A~^+ for any A~,
  /// but only once ||I - A~ Z_k|| < 1, which takes many steps when A~ is
  /// ill-conditioned: the paper's 6 steps are an approximation of A~^+.
  kIterative,
};

/// Nystrom attention with m landmarks (see the file comment).
///
/// ```cpp
/// kappa::approx::Nystrom nys(64);                               // m = 64 segment means
/// RowMatrix<float> y = kappa::approx::approximate_attention(nys, q, k, v);
/// kappa::MultiHeadAttention<float, kappa::approx::Nystrom> attn(config, nys);
/// ```
/// Masks: NoMask, and KeyPaddingMask with one valid length L for every query
/// (the keys are then the first L rows); others fail to compile.
/// Preconditions (validate() throws std::invalid_argument naming the values):
/// 1 <= m <= N_KV (the visible keys) and m <= N_Q; rcond >= 0; iterations >= 1.
struct Nystrom {
  static constexpr const char* kName = "Nystrom";

  Index landmarks = 0;  ///< m
  std::uint64_t seed = 0;
  Landmarks selection = Landmarks::kSegmentMeans;
  PseudoInverse pinv = PseudoInverse::kSvd;
  /// Relative cutoff of the SVD and COD pseudo-inverses; 0 means m eps(T), the
  /// default of torch.linalg.pinv and LAPACK's rank decisions.
  double rcond = 0.0;
  int iterations = 6;  ///< steps of PseudoInverse::kIterative (the paper's 6)
  double scale = 0.0;  ///< the softmax scale s; 0 means 1/sqrt(d_QK)

  Nystrom() = default;
  /// m landmarks chosen by `sel` (seeded when random).
  explicit Nystrom(Index m, std::uint64_t s = 0, Landmarks sel = Landmarks::kSegmentMeans)
      : landmarks(m), seed(s), selection(sel) {}

  /// Throws std::invalid_argument when the parameters do not fit the shapes.
  template <Mask M>
  void validate(Index n_q, Index n_kv, const M& mask) const {
    const Index n = detail::common_key_length(kName, mask, n_q, n_kv);
    detail::require_at_least_one(kName, "the number of landmarks m", landmarks);
    if (n_q == 0) return;
    if (landmarks > n) {
      detail::throw_parameter(kName, "m = " + std::to_string(landmarks) +
                                         " landmarks exceed the N_KV = " + std::to_string(n) +
                                         " (visible) keys; use m <= N_KV");
    }
    if (landmarks > n_q) {
      detail::throw_parameter(kName, "m = " + std::to_string(landmarks) +
                                         " landmarks exceed the N_Q = " + std::to_string(n_q) +
                                         " queries; use m <= N_Q");
    }
    if (!(rcond >= 0.0) || !std::isfinite(rcond)) {
      detail::throw_parameter(
          kName, "rcond = " + std::to_string(rcond) + " must be finite and >= 0 (0 means m eps)");
    }
    if (pinv == PseudoInverse::kIterative) {
      detail::require_at_least_one(kName, "iterations", iterations);
    }
    (void)detail::scale_or_default(kName, scale, 1);
  }

  /// Y (N_Q x d_V) of one head into y. \throws as validate().
  template <Scalar T, Mask M = NoMask>
  void attend(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v, MatrixRef<T> y,
              const M& mask = {}) const {
    const Index n = detail::checked_key_length(*this, q, k, v, y, mask);
    if (q.rows() == 0) return;
    const auto kk = k.topRows(n);  // (N, d_QK), the visible keys
    const auto vv = v.topRows(n);  // (N, d_V)
    const T s = static_cast<T>(detail::scale_or_default(kName, scale, q.cols()));
    const Index m = landmarks;
    RowMatrix<T> q_tilde(m, q.cols()), k_tilde(m, q.cols());  // (m, d_QK) each
    pick_landmarks<T>(q, kk, q_tilde, k_tilde);
    RowMatrix<T> f, a_tilde, b;
    detail::softmax_rows<T>(q, k_tilde, s, f);                    // (N_Q, m)
    detail::softmax_rows<T>(q_tilde, k_tilde, s, a_tilde);        // (m, m)
    detail::softmax_rows<T>(q_tilde, kk, s, b);                   // (m, N)
    const Eigen::MatrixXd bv = (b * vv).template cast<double>();  // (m, d_V)
    const Eigen::MatrixXd x = solve(a_tilde.template cast<double>(), bv,
                                    std::numeric_limits<T>::epsilon());  // A~^+ B V, (m, d_V)
    y.noalias() = f * x.template cast<T>();                              // (N_Q, d_V)
  }

  /// A~^+ w, by the chosen pseudo-inverse (eps: the input type's epsilon for
  /// the default cutoff). Public for tests. A template only so that Eigen's
  /// BDCSVD and complete orthogonal decomposition are instantiated where a
  /// Nystrom approximation is used, not in every translation unit that
  /// includes this header (with g++ 12 that costs about 20 CPU s each).
  template <class Mat = Eigen::MatrixXd>
  requires std::same_as<Mat, Eigen::MatrixXd>
  [[nodiscard]] Mat solve(const std::type_identity_t<Mat>& a, const std::type_identity_t<Mat>& w,
                          double eps) const {
    const double cutoff = rcond > 0.0 ? rcond : static_cast<double>(a.rows()) * eps;
    if (pinv == PseudoInverse::kSvd) {
      Eigen::BDCSVD<Eigen::MatrixXd> svd(a, Eigen::ComputeThinU | Eigen::ComputeThinV);
      svd.setThreshold(cutoff);
      return svd.solve(w);
    }
    if (pinv == PseudoInverse::kCod) {
      Eigen::CompleteOrthogonalDecomposition<Eigen::MatrixXd> cod(a.rows(), a.cols());
      cod.setThreshold(cutoff);  // before compute(): it fixes the rank there
      cod.compute(a);
      return cod.solve(w);
    }
    const Eigen::MatrixXd id = Eigen::MatrixXd::Identity(a.rows(), a.cols());
    const double norm1 = a.cwiseAbs().colwise().sum().maxCoeff();
    const double norm_inf = a.cwiseAbs().rowwise().sum().maxCoeff();
    Eigen::MatrixXd z = a.transpose() / (norm1 * norm_inf);  // Z_0
    for (int it = 0; it < iterations; ++it) {
      const Eigen::MatrixXd az = a * z;
      const Eigen::MatrixXd inner = az * (7.0 * id - az);
      const Eigen::MatrixXd middle = az * (15.0 * id - inner);
      z = 0.25 * z * (13.0 * id - middle);
    }
    return z * w;
  }

 private:
  /// Fills the landmarks Q~ and K~ (m rows each) from Q and the visible keys.
  template <class T, class DK>
  void pick_landmarks(const ConstMatrixRef<T>& q, const Eigen::MatrixBase<DK>& kk,
                      RowMatrix<T>& q_tilde, RowMatrix<T>& k_tilde) const {
    const Index m = landmarks, n = kk.rows(), n_q = q.rows();
    if (selection == Landmarks::kSegmentMeans) {
      for (Index l = 0; l < m; ++l) {
        const Index k0 = l * n / m, k1 = (l + 1) * n / m;
        k_tilde.row(l) = kk.middleRows(k0, k1 - k0).colwise().mean();
        const Index q0 = l * n_q / m, q1 = (l + 1) * n_q / m;
        q_tilde.row(l) = q.middleRows(q0, q1 - q0).colwise().mean();
      }
      return;
    }
    const auto draw = [&](const auto& x, Index rows, std::uint64_t sd) {
      if (selection == Landmarks::kUniform) {
        std::vector<Index> p = detail::seeded_permutation(rows, sd);
        p.resize(static_cast<std::size_t>(m));
        std::sort(p.begin(), p.end());
        return p;
      }
      std::vector<double> w(static_cast<std::size_t>(rows));
      for (Index j = 0; j < rows; ++j)
        w[static_cast<std::size_t>(j)] = static_cast<double>(x.row(j).norm());
      return detail::weighted_sample_without_replacement(w, m, sd);
    };
    const std::vector<Index> kj = draw(kk, n, seed);
    const std::vector<Index> qi = n_q == n ? kj : draw(q, n_q, seed + 1);
    for (Index l = 0; l < m; ++l) {
      k_tilde.row(l) = kk.row(kj[static_cast<std::size_t>(l)]);
      q_tilde.row(l) = q.row(qi[static_cast<std::size_t>(l)]);
    }
  }
};

}  // namespace kappa::approx
