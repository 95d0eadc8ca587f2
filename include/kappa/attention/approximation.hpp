// kappa/attention/approximation.hpp - measuring an approximation of attention
// against the exact computation on the same inputs.
//
// An approximation of attention is anything callable as approx(q, k, v) that
// returns an approximate Y~ (N_Q x d_V): a lambda around a random-feature
// kernel, a Nystrom or sketching policy, a compressed layer. The exact
// reference is kappa's own attention (by default softmax, no mask; any kernel
// and mask through exact_attention()). compare_to_exact() runs both on the
// same Q, K, V and reports
//
//     output error   ||Y~ - Y||_F / ||Y||_F
//     weights error  ||W~ - W||_F / ||W||_F,  W = Z^-1 A (N_Q x N_KV),
//                    when the approximation provides its weights W~
//     time           the median wall time of a few calls of each
//     peak memory    the growth of the resident set during one call of each
//
// Example (the linear-time path of a random-feature kernel):
//
// ```cpp
// kappa::kernels::PositiveRandomFeatures feats(64, /*seed=*/1);
// auto report = kappa::compare_to_exact(q, k, v, [&](const auto& q_, const auto& k_, const auto&
// v_) {
//   return kappa::linear_attention(q_, k_, v_, feats);
// });
// std::printf("error %.3g, %.2fx faster\n", report.output_error, report.speedup());
// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "kappa/attention/attention.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// What compare_to_exact() measured. Errors are NaN when not measured (see
/// each field); memory fields are empty where peak memory cannot be read.
struct ApproximationReport {
  /// ||Y~ - Y||_F / ||Y||_F. If ||Y||_F = 0 it is 0 when Y~ = Y and +inf
  /// otherwise; +inf too when Y~ holds a NaN or an infinity.
  double output_error = std::numeric_limits<double>::quiet_NaN();
  /// ||W~ - W||_F / ||W||_F for the weights W = Z^-1 A, with the same rules as
  /// output_error. NaN when the approximation has no weights (a plain
  /// callable, or one whose weights() is not defined), or when
  /// CompareOptions::weights is false.
  double weights_error = std::numeric_limits<double>::quiet_NaN();
  /// Median wall time of one call of the approximation, in seconds.
  double approx_seconds = std::numeric_limits<double>::quiet_NaN();
  /// Median wall time of one call of the exact reference, in seconds.
  double exact_seconds = std::numeric_limits<double>::quiet_NaN();
  /// Peak growth of the resident set during one call of the approximation,
  /// in bytes (see peak_memory_supported()); empty where it cannot be read.
  std::optional<std::int64_t> approx_peak_bytes;
  /// The same for the exact reference.
  std::optional<std::int64_t> exact_peak_bytes;
  /// Timed calls per side (the median is over these).
  int runs = 0;

  /// exact_seconds / approx_seconds: how many times faster the approximation is.
  [[nodiscard]] double speedup() const { return exact_seconds / approx_seconds; }
};

/// Options of compare_to_exact().
struct CompareOptions {
  /// Timed calls per side, >= 1; the report gives their median. One more,
  /// untimed call per side comes first (it warms caches, measures memory and
  /// gives the outputs compared).
  int runs = 3;
  /// Whether to compare the weights W = Z^-1 A when the approximation provides
  /// them. Costs N_Q x N_KV memory several times over; switch off for long
  /// sequences.
  bool weights = true;
  /// Whether to measure peak memory (Linux only, see peak_memory_supported()).
  bool memory = true;
};

/// The exact reference of compare_to_exact(): kappa::attention with a kernel
/// and a mask (default softmax without a mask). weights() returns Z^-1 A from
/// attention_details (N_Q x N_KV, only used for the weights error).
template <class K = kernels::Softmax, class M = NoMask>
struct ExactAttention {
  K kernel{};  ///< the kernel f_kappa
  M mask{};    ///< the mask

  /// Y = Z^-1 A V.
  template <class DQ, class DK, class DV>
  RowMatrix<typename DQ::Scalar> operator()(const Eigen::MatrixBase<DQ>& q,
                                            const Eigen::MatrixBase<DK>& k,
                                            const Eigen::MatrixBase<DV>& v) const {
    return attention(q, k, v, kernel, mask);
  }
  /// W = Z^-1 A.
  template <class DQ, class DK, class DV>
  RowMatrix<typename DQ::Scalar> weights(const Eigen::MatrixBase<DQ>& q,
                                         const Eigen::MatrixBase<DK>& k,
                                         const Eigen::MatrixBase<DV>& v) const {
    return attention_details(q, k, v, kernel, mask).weights;
  }
};

/// ExactAttention<K, M>{kernel, mask}: the exact reference for a kernel and a
/// mask, e.g. `exact_attention(kernels::Softmax{}, CausalMask{})`.
template <class K, class M = NoMask>
ExactAttention<K, M> exact_attention(K kernel, M mask = {}) {
  return ExactAttention<K, M>{std::move(kernel), std::move(mask)};
}

/// An approximation that also gives its weights: output(q, k, v) returns Y~
/// and weights_of(q, k, v) returns W~ = Z~^-1 A~ (N_Q x N_KV). Build it with
/// with_weights().
template <class F, class W>
struct ApproximationWithWeights {
  F output;      ///< (q, k, v) -> Y~
  W weights_of;  ///< (q, k, v) -> W~

  /// Y~.
  template <class Q, class K, class V>
  auto operator()(const Q& q, const K& k, const V& v) const {
    return output(q, k, v);
  }
  /// W~.
  template <class Q, class K, class V>
  auto weights(const Q& q, const K& k, const V& v) const {
    return weights_of(q, k, v);
  }
};

/// Pairs a callable for Y~ with one for its weights W~, so that
/// compare_to_exact() also reports the weights error.
template <class F, class W>
ApproximationWithWeights<std::decay_t<F>, std::decay_t<W>> with_weights(F&& output,
                                                                        W&& weights_of) {
  return {std::forward<F>(output), std::forward<W>(weights_of)};
}

/// ||a - b||_F / ||b||_F in double precision, b the reference. When
/// ||b||_F = 0: 0 if a = b, else +inf. +inf when a holds a NaN or an infinity.
/// \throws ShapeError when the shapes differ (naming both).
template <class DA, class DB>
double relative_frobenius_error(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DB>& b) {
  require_shapes(a.rows() == b.rows() && a.cols() == b.cols(), "relative_frobenius_error",
                 "approximation", a.rows(), a.cols(), "reference", b.rows(), b.cols(),
                 "the shapes must be equal");
  double diff2 = 0, ref2 = 0;
  for (Index i = 0; i < a.rows(); ++i) {
    for (Index j = 0; j < a.cols(); ++j) {
      const double x = static_cast<double>(a(i, j)), y = static_cast<double>(b(i, j));
      if (!std::isfinite(x)) return std::numeric_limits<double>::infinity();
      diff2 += (x - y) * (x - y);
      ref2 += y * y;
    }
  }
  if (ref2 == 0) return diff2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff2 / ref2);
}

namespace detail {

/// Reads a "Name:   1234 kB" line of /proc/self/status, in bytes; empty if
/// the file or the line is missing.
inline std::optional<std::int64_t> proc_status_bytes(const char* name) {
  std::ifstream in("/proc/self/status");
  if (!in) return std::nullopt;
  const std::string key = std::string(name) + ":";
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    try {
      return static_cast<std::int64_t>(std::stoll(line.substr(key.size()))) * 1024;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

/// Resets the peak resident set size VmHWM to the current VmRSS (Linux >= 4.0:
/// writing "5" to /proc/self/clear_refs). Returns the RSS after the reset, or
/// empty if the reset is not possible.
inline std::optional<std::int64_t> reset_peak_rss() {
#if defined(__GLIBC__)
  malloc_trim(0);  // return freed heap memory, so that reuse is counted again
#endif
  {
    std::ofstream out("/proc/self/clear_refs");
    if (!out) return std::nullopt;
    out << "5";
    out.flush();
    if (!out) return std::nullopt;
  }
  const auto rss = proc_status_bytes("VmRSS");
  const auto hwm = proc_status_bytes("VmHWM");
  // The kernel's counters are updated in batches, so right after the reset
  // VmHWM may exceed VmRSS by some pages; more than 1 MiB means no reset.
  if (!rss || !hwm || *hwm > *rss + (std::int64_t{1} << 20)) return std::nullopt;
  return rss;
}

template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

inline double median_of(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

/// One untimed call measuring the peak memory (if asked and possible), then
/// `runs` timed ones; returns the first call's result.
template <class R, class F>
R measure_calls(F&& call, const CompareOptions& opt, double& seconds,
                std::optional<std::int64_t>& peak) {
  const std::optional<std::int64_t> base = opt.memory ? reset_peak_rss() : std::nullopt;
  R result = call();
  if (base) {
    if (const auto hwm = proc_status_bytes("VmHWM")) peak = std::max<std::int64_t>(0, *hwm - *base);
  }
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(opt.runs));
  for (int r = 0; r < opt.runs; ++r) {
    times.push_back(seconds_of([&] {
      R y = call();
      // keep the result observable so that the call is not optimized away
      if (y.size() > 0 && !(y(0, 0) == y(0, 0))) seconds = -1;
    }));
  }
  seconds = median_of(std::move(times));
  return result;
}

/// The checks of run_exact() and compare_to_exact() before anything runs:
/// one scalar type for Q, K and V, opt.runs >= 1, shapes that fit together.
template <class DQ, class DK, class DV>
void check_compare_inputs(const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
                          const Eigen::MatrixBase<DV>& v, const CompareOptions& opt) {
  using T = typename DQ::Scalar;
  static_assert(std::is_same_v<T, typename DK::Scalar> && std::is_same_v<T, typename DV::Scalar>,
                "kappa: Q, K and V must have the same scalar type");
  require_positive("compare_to_exact: runs", opt.runs);
  check_attention_shapes<T>(ConstMatrixRef<T>(q), ConstMatrixRef<T>(k), ConstMatrixRef<T>(v));
}

}  // namespace detail

/// Whether compare_to_exact() can measure peak memory here: true on Linux
/// when /proc/self/clear_refs accepts "5" (resetting the peak resident set
/// size VmHWM) and /proc/self/status reports VmHWM and VmRSS.
inline bool peak_memory_supported() {
  return detail::reset_peak_rss().has_value();
}

/// The exact side measured once, to compare several approximations with it
/// without running it again (see run_exact()).
template <Scalar T>
struct ExactRun {
  RowMatrix<T> output;                     ///< Y (N_Q x d_V)
  std::optional<RowMatrix<T>> weights;     ///< Z^-1 A, when the reference has weights() and asked
  double seconds = 0;                      ///< median wall time of one call
  std::optional<std::int64_t> peak_bytes;  ///< peak resident set growth of one call
};

namespace detail {
template <class X>
inline constexpr bool kIsExactRun = false;
template <class T>
inline constexpr bool kIsExactRun<ExactRun<T>> = true;
}  // namespace detail

/// Runs the exact reference once untimed (measuring memory) and opt.runs
/// times timed, as compare_to_exact() does, and keeps Y (and W = Z^-1 A when
/// `exact` has weights() and opt.weights is set). Pass the result to
/// compare_to_exact() in place of the reference.
/// 	hrows ShapeError, RangeError as compare_to_exact().
template <class DQ, class DK, class DV, class Exact = ExactAttention<>>
requires Scalar<typename DQ::Scalar> ExactRun<typename DQ::Scalar> run_exact(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const Exact& exact = {}, const CompareOptions& opt = {}) {
  using T = typename DQ::Scalar;
  detail::check_compare_inputs(q, k, v, opt);
  const auto& qd = q.derived();
  const auto& kd = k.derived();
  const auto& vd = v.derived();
  ExactRun<T> run;
  run.output = detail::measure_calls<RowMatrix<T>>([&] { return RowMatrix<T>(exact(qd, kd, vd)); },
                                                   opt, run.seconds, run.peak_bytes);
  if constexpr (requires { RowMatrix<T>(exact.weights(qd, kd, vd)); }) {
    if (opt.weights) run.weights = RowMatrix<T>(exact.weights(qd, kd, vd));
  }
  return run;
}

/// Runs the approximation `approx` and the exact reference `exact` on the same
/// Q (N_Q x d_QK), K (N_KV x d_QK), V (N_KV x d_V) and reports how far apart
/// they are and what each costs (ApproximationReport).
///
/// `approx(q, k, v)` is called with the arguments as given (so a lambda may
/// take `const auto&`, `ConstMatrixRef<T>` or, for RowMatrix inputs,
/// `const RowMatrix<T>&` without a copy) and returns Y~, a matrix of Q's scalar
/// type. If it also has `weights(q, k, v)` returning W~ (see with_weights()),
/// the weights error ||W~ - W||_F / ||W||_F is reported as well; otherwise it
/// is NaN. `exact` defaults to softmax attention without a mask; pass
/// exact_attention(kernel, mask) for another kernel or a mask (and capture the
/// same mask in `approx`), or an ExactRun from run_exact() to reuse one
/// measurement of the reference for several approximations.
///
/// Time: each side is called once untimed (its result is the one compared),
/// then `opt.runs` times; the median wall time is reported. Threads are
/// whatever the callables use (kappa's default: kappa::num_threads()).
///
/// Peak memory: on Linux the peak resident set size (VmHWM) is reset to the
/// current one through /proc/self/clear_refs before the untimed call, and the
/// peak's growth during the call is reported: the largest amount of memory
/// the call had resident at once beyond what the process already had,
/// including its result and the allocator's slack, in pages actually touched.
/// Memory the allocator kept from earlier calls and hands out again is not
/// counted (glibc's malloc_trim() is called first to limit that), and the
/// kernel updates its counters in batches, so the figure is good to about
/// 100 KB: small working sets may read as 0. Elsewhere, or with `opt.memory`
/// false, the fields are empty.
///
/// \throws ShapeError when Q, K, V do not fit together or a result has the
///         wrong shape; RangeError when opt.runs < 1; whatever the callables
///         throw.
template <class DQ, class DK, class DV, class Approx, class Exact = ExactAttention<>>
requires Scalar<typename DQ::Scalar> ApproximationReport compare_to_exact(
    const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k, const Eigen::MatrixBase<DV>& v,
    const Approx& approx, const Exact& exact = {}, const CompareOptions& opt = {}) {
  using T = typename DQ::Scalar;
  static_assert(std::is_same_v<T, typename DK::Scalar> && std::is_same_v<T, typename DV::Scalar>,
                "kappa: Q, K and V must have the same scalar type");
  static_assert(
      requires { RowMatrix<T>(approx(q.derived(), k.derived(), v.derived())); },
      "kappa: compare_to_exact needs approx(q, k, v) to return a matrix Y~ of Q's "
      "scalar type");
  detail::check_compare_inputs(q, k, v, opt);
  const auto& qd = q.derived();
  const auto& kd = k.derived();
  const auto& vd = v.derived();

  ApproximationReport report;
  report.runs = opt.runs;
  std::optional<ExactRun<T>> own_run;
  constexpr bool kApproxHasWeights = requires {
    RowMatrix<T>(approx.weights(qd, kd, vd));
  };
  if constexpr (!detail::kIsExactRun<Exact>) {
    CompareOptions exact_opt = opt;
    exact_opt.weights = opt.weights && kApproxHasWeights;  // W costs N_Q x N_KV: only if compared
    own_run = run_exact(qd, kd, vd, exact, exact_opt);
  }
  const ExactRun<T>* reference = nullptr;
  if constexpr (detail::kIsExactRun<Exact>) {
    static_assert(std::is_same_v<Exact, ExactRun<T>>,
                  "kappa: the ExactRun must have the scalar type of Q");
    reference = &exact;
  } else {
    reference = &*own_run;
  }
  require_shapes(reference->output.rows() == qd.rows() && reference->output.cols() == vd.cols(),
                 "compare_to_exact", "the exact Y", reference->output.rows(),
                 reference->output.cols(), "(N_Q x d_V)", qd.rows(), vd.cols(),
                 "the reference must be N_Q x d_V (was the ExactRun made from these inputs?)");
  report.exact_seconds = reference->seconds;
  report.exact_peak_bytes = reference->peak_bytes;
  const RowMatrix<T> y_approx =
      detail::measure_calls<RowMatrix<T>>([&] { return RowMatrix<T>(approx(qd, kd, vd)); }, opt,
                                          report.approx_seconds, report.approx_peak_bytes);
  require_shapes(
      y_approx.rows() == reference->output.rows() && y_approx.cols() == reference->output.cols(),
      "compare_to_exact", "the approximation's Y", y_approx.rows(), y_approx.cols(), "the exact Y",
      reference->output.rows(), reference->output.cols(),
      "the approximation must return N_Q x d_V");
  report.output_error = relative_frobenius_error(y_approx, reference->output);

  if constexpr (kApproxHasWeights) {
    if (opt.weights && reference->weights) {
      const RowMatrix<T> w_approx(approx.weights(qd, kd, vd));
      const RowMatrix<T>& w = *reference->weights;
      require_shapes(w_approx.rows() == w.rows() && w_approx.cols() == w.cols(), "compare_to_exact",
                     "the approximation's weights", w_approx.rows(), w_approx.cols(),
                     "the exact weights", w.rows(), w.cols(), "the weights must be N_Q x N_KV");
      report.weights_error = relative_frobenius_error(w_approx, w);
    }
  }
  return report;
}

}  // namespace kappa
