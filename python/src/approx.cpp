// The randomized approximations of softmax attention (Nystrom, sequence
// sketches, sampled attention, random features) and compare_to_exact, their
// error-versus-cost measurement.
#include "common.hpp"
#include "feature_kernels.hpp"
#include "kappa/attention/approximation.hpp"
#include "kappa/attention/linear.hpp"
#include "kappa/attention/nystrom.hpp"
#include "kappa/attention/sampled.hpp"
#include "kappa/attention/sketch.hpp"
#include "kappa/attention/whole_attention.hpp"

namespace kappa::python {

namespace {

/// An approximation by name with its parameters.
struct ApproxSpec {
  std::string method;
  Index m = 64;
  std::uint64_t seed = 0;
  std::string variant;  // landmarks / sketch kind / proposal / projection
  std::string pinv = "svd";
  std::optional<double> scale;
};

approx::Nystrom make_nystrom(const ApproxSpec& s) {
  approx::Landmarks sel = approx::Landmarks::kSegmentMeans;
  if (s.variant == "uniform")
    sel = approx::Landmarks::kUniform;
  else if (s.variant == "key_norm")
    sel = approx::Landmarks::kKeyNorm;
  else if (!s.variant.empty() && s.variant != "segment_means")
    throw std::invalid_argument(
        "kappa: Nystrom landmarks must be 'segment_means', 'uniform' or "
        "'key_norm', got '" +
        s.variant + "'");
  approx::Nystrom n(s.m, s.seed, sel);
  if (s.pinv == "cod")
    n.pinv = approx::PseudoInverse::kCod;
  else if (s.pinv == "iterative")
    n.pinv = approx::PseudoInverse::kIterative;
  else if (s.pinv != "svd")
    throw std::invalid_argument("kappa: pinv must be 'svd', 'cod' or 'iterative', got '" + s.pinv +
                                "'");
  n.scale = s.scale.value_or(0.0);
  return n;
}

approx::SequenceSketch make_sketch(const ApproxSpec& s) {
  approx::SketchKind kind = approx::SketchKind::kGaussian;
  if (s.variant == "sparse_sign")
    kind = approx::SketchKind::kSparseSign;
  else if (s.variant == "partition" || s.variant == "random_partition")
    kind = approx::SketchKind::kRandomPartition;
  else if (!s.variant.empty() && s.variant != "gaussian")
    throw std::invalid_argument(
        "kappa: sketch kind must be 'gaussian', 'sparse_sign' or "
        "'partition', got '" +
        s.variant + "'");
  approx::SequenceSketch k(s.m, s.seed, kind);
  k.scale = s.scale.value_or(0.0);
  return k;
}

approx::SampledAttention make_sampled(const ApproxSpec& s) {
  approx::Proposal p = approx::Proposal::kNormBound;
  if (s.variant == "uniform")
    p = approx::Proposal::kUniform;
  else if (s.variant == "key_norm")
    p = approx::Proposal::kKeyNorm;
  else if (!s.variant.empty() && s.variant != "norm_bound")
    throw std::invalid_argument(
        "kappa: proposal must be 'norm_bound', 'uniform' or 'key_norm', "
        "got '" +
        s.variant + "'");
  approx::SampledAttention a(s.m, s.seed, p);
  a.scale = s.scale.value_or(0.0);
  return a;
}

KernelSpec feature_spec(const ApproxSpec& s, KernelSpec::Kind kind) {
  KernelSpec k;
  k.kind = kind;
  k.features = s.m;
  k.seed = s.seed;
  k.scale = s.scale;
  k.orthogonal = s.variant.empty() || s.variant == "orthogonal";
  if (!k.orthogonal && s.variant != "iid")
    throw std::invalid_argument("kappa: projection must be 'orthogonal' or 'iid', got '" +
                                s.variant + "'");
  return k;
}

/// Calls f(approximation) where approximation(q, k, v) -> Y~ (and, for the
/// random features, .weights(q, k, v) -> W~).
template <class T, class F>
decltype(auto) with_approximation(const ApproxSpec& s, Index d_qk, F&& f) {
  if (s.method == "nystrom")
    return f([p = make_nystrom(s)](const auto& q, const auto& k, const auto& v) {
      return approx::approximate_attention(p, q, k, v);
    });
  if (s.method == "sketch")
    return f([p = make_sketch(s)](const auto& q, const auto& k, const auto& v) {
      return approx::approximate_attention(p, q, k, v);
    });
  if (s.method == "sampled")
    return f([p = make_sampled(s)](const auto& q, const auto& k, const auto& v) {
      return approx::approximate_attention(p, q, k, v);
    });
  const auto features = [&](auto kernel) {
    return f(with_weights([kernel](const auto& q, const auto& k,
                                   const auto& v) { return linear_attention(q, k, v, kernel); },
                          [kernel](const auto& q, const auto& k, const auto& v) {
                            return attention_details(q, k, v, kernel).weights;
                          }));
  };
  if (s.method == "positive_random_features" || s.method == "favor+")
    return features(
        make_positive_features(feature_spec(s, KernelSpec::Kind::kPositiveRandomFeatures), d_qk));
  if (s.method == "trigonometric_random_features")
    return features(
        make_trig_features(feature_spec(s, KernelSpec::Kind::kTrigonometricRandomFeatures), d_qk));
  throw std::invalid_argument("kappa: unknown approximation '" + s.method +
                              "' (nystrom, sketch, sampled, positive_random_features, "
                              "trigonometric_random_features)");
}

template <class T>
py::array approximate_impl(const py::object& q, const py::object& k, const py::object& v,
                           const ApproxSpec& s) {
  const InMatrix<T> qm(q, "q"), km(k, "k"), vm(v, "v");
  RowMatrix<T> y;
  {
    py::gil_scoped_release release;
    with_approximation<T>(s, qm.map.cols(),
                          [&](const auto& approx) { y = approx(qm.ref(), km.ref(), vm.ref()); });
  }
  return to_numpy(std::move(y));
}

template <class T>
py::dict compare_impl(const py::object& q, const py::object& k, const py::object& v,
                      const ApproxSpec& s, int runs, bool weights, bool memory) {
  const InMatrix<T> qm(q, "q"), km(k, "k"), vm(v, "v");
  CompareOptions opt;
  opt.runs = runs;
  opt.weights = weights;
  opt.memory = memory;
  ApproximationReport r;
  {
    py::gil_scoped_release release;
    // The exact reference is softmax with the approximation's scale.
    const auto exact = exact_attention(kernels::Softmax{.scale = s.scale});
    with_approximation<T>(s, qm.map.cols(), [&](const auto& approx) {
      r = compare_to_exact(qm.ref(), km.ref(), vm.ref(), approx, exact, opt);
    });
  }
  py::dict d;
  d["output_error"] = r.output_error;
  d["weights_error"] = r.weights_error;
  d["approx_seconds"] = r.approx_seconds;
  d["exact_seconds"] = r.exact_seconds;
  d["speedup"] = r.speedup();
  d["approx_peak_bytes"] = r.approx_peak_bytes ? py::cast(*r.approx_peak_bytes) : py::none();
  d["exact_peak_bytes"] = r.exact_peak_bytes ? py::cast(*r.exact_peak_bytes) : py::none();
  d["runs"] = r.runs;
  return d;
}

constexpr const char* kMethodsDoc = R"doc(
method: 'nystrom' (m landmarks; variant = landmarks 'segment_means' | 'uniform' |
  'key_norm'; pinv 'svd' | 'cod' | 'iterative'), 'sketch' (m sketch rows; variant
  'gaussian' | 'sparse_sign' | 'partition'), 'sampled' (m = S samples; variant =
  proposal 'norm_bound' | 'uniform' | 'key_norm'), 'positive_random_features' or
  'trigonometric_random_features' (m features, linear-time; variant = projection
  'orthogonal' | 'iid'). seed draws the randomness; scale is the softmax scale s
  (None: 1/sqrt(d_QK)).)doc";

}  // namespace

void register_approx(py::module_& m) {
  static const std::string approximate_doc =
      std::string("Y~, an approximation of softmax attention Y = softmax(s Q K^T) V.\n") +
      kMethodsDoc;
  static const std::string compare_doc =
      std::string(
          "Error and cost of an approximation against exact softmax attention on the same "
          "Q, K, V\n(kappa::compare_to_exact). Returns a dict: output_error = ||Y~ - Y||_F / "
          "||Y||_F,\nweights_error (random features only; NaN otherwise), approx_seconds and "
          "exact_seconds\n(medians of `runs` calls), speedup = exact / approx, peak bytes "
          "(Linux), runs.\n") +
      kMethodsDoc;
  m.def(
      "approximate_attention",
      [](const py::object& q, const py::object& k, const py::object& v, const std::string& method,
         Index size, std::uint64_t seed, const std::string& variant, const std::string& pinv,
         std::optional<double> scale) {
        const ApproxSpec s{method, size, seed, variant, pinv, scale};
        if (all_float32({q, k, v})) return approximate_impl<float>(q, k, v, s);
        return approximate_impl<double>(q, k, v, s);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("method"), py::arg("m"), py::kw_only(),
      py::arg("seed") = 0, py::arg("variant") = "", py::arg("pinv") = "svd",
      py::arg("scale") = py::none(), approximate_doc.c_str());
  m.def(
      "compare_to_exact",
      [](const py::object& q, const py::object& k, const py::object& v, const std::string& method,
         Index size, std::uint64_t seed, const std::string& variant, const std::string& pinv,
         std::optional<double> scale, int runs, bool weights, bool memory) {
        const ApproxSpec s{method, size, seed, variant, pinv, scale};
        if (all_float32({q, k, v})) return compare_impl<float>(q, k, v, s, runs, weights, memory);
        return compare_impl<double>(q, k, v, s, runs, weights, memory);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("method"), py::arg("m"), py::kw_only(),
      py::arg("seed") = 0, py::arg("variant") = "", py::arg("pinv") = "svd",
      py::arg("scale") = py::none(), py::arg("runs") = 3, py::arg("weights") = true,
      py::arg("memory") = true, compare_doc.c_str());
}

}  // namespace kappa::python
