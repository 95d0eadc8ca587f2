// Feature-map kernels (elu + 1, positive and trigonometric random features),
// the user's Python callable (the slow path), and linear_attention.
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>

#include "common.hpp"
#include "feature_kernels.hpp"
#include "kappa/attention/linear.hpp"

namespace kappa::python {

namespace {

/// A user kernel f given as a Python callable: a score kernel whose
/// vectorized form calls f on a 1-D numpy array of scaled scores (a block
/// row of A at a time) and copies the result back. kappa's attention may run
/// it from its OpenMP threads: each call takes the GIL, and the first Python
/// exception is kept (later calls then do nothing) and raised once the
/// attention returns, since an exception may not leave an OpenMP region.
struct CallableKernel {
  struct Shared {
    std::mutex mutex;
    std::exception_ptr error;
    std::atomic<bool> failed{false};
  };
  py::object* f;
  std::optional<double> scale;
  Shared* shared;

  [[nodiscard]] double scale_for(Index d_qk) const {
    return scale.value_or(d_qk > 0 ? 1.0 / std::sqrt(static_cast<double>(d_qk)) : 1.0);
  }
  template <Scalar T>
  T operator()(T x) const {
    apply(&x, 1);
    return x;
  }
  template <Scalar T>
  void apply(T* x, Index n) const {
    if (n == 0) return;
    if (shared->failed.load()) {
      std::fill(x, x + n, T(0));
      return;
    }
    py::gil_scoped_acquire gil;
    try {
      py::capsule no_owner(x, [](void*) {});
      py::array_t<T> scores({static_cast<py::ssize_t>(n)}, {static_cast<py::ssize_t>(sizeof(T))}, x,
                            no_owner);
      py::object r = (*f)(scores);
      auto out = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(r);
      if (!out) throw py::error_already_set();
      if (out.size() != n)
        throw ShapeError("kappa: the kernel callable returned " + std::to_string(out.size()) +
                         " values for " + std::to_string(n) +
                         " scores (it must be elementwise: same shape in and out)");
      std::copy(out.data(), out.data() + n, x);
    } catch (...) {
      std::lock_guard<std::mutex> lock(shared->mutex);
      if (!shared->error) shared->error = std::current_exception();
      shared->failed.store(true);
      std::fill(x, x + n, T(0));
    }
  }
};

}  // namespace

template <class T>
void run_feature_family(const AttentionCall<T>& call) {
  const KernelSpec& k = call.kernel;
  switch (k.kind) {
    case KernelSpec::Kind::kEluPlusOne:
      run_with_kernel<T>(kernels::EluPlusOne{}, call);
      return;
    case KernelSpec::Kind::kPositiveRandomFeatures:
      run_with_kernel<T>(make_positive_features(k, call.q.cols()), call);
      return;
    case KernelSpec::Kind::kTrigonometricRandomFeatures:
      run_with_kernel<T>(make_trig_features(k, call.q.cols()), call);
      return;
    default: {
      CallableKernel::Shared shared;
      {
        // The callable runs with the GIL it takes itself (see CallableKernel).
        py::gil_scoped_release release;
        run_with_kernel<T>(CallableKernel{const_cast<py::object*>(&k.callable), k.scale, &shared},
                           call);
      }
      if (shared.error) std::rethrow_exception(shared.error);
      return;
    }
  }
}

template void run_feature_family<float>(const AttentionCall<float>&);
template void run_feature_family<double>(const AttentionCall<double>&);

namespace {

template <class T>
py::array linear_impl(const py::object& q, const py::object& k, const py::object& v,
                      const KernelSpec& spec, bool causal) {
  const InMatrix<T> qm(q, "q"), km(k, "k"), vm(v, "v");
  RowMatrix<T> y;
  {
    py::gil_scoped_release release;
    const auto run = [&](const auto& kernel) {
      if (causal)
        y = linear_attention(qm.ref(), km.ref(), vm.ref(), kernel, CausalMask{});
      else
        y = linear_attention(qm.ref(), km.ref(), vm.ref(), kernel, NoMask{});
    };
    switch (spec.kind) {
      case KernelSpec::Kind::kEluPlusOne:
        run(kernels::EluPlusOne{});
        break;
      case KernelSpec::Kind::kPositiveRandomFeatures:
        run(make_positive_features(spec, qm.map.cols()));
        break;
      case KernelSpec::Kind::kTrigonometricRandomFeatures:
        run(make_trig_features(spec, qm.map.cols()));
        break;
      default:
        throw std::invalid_argument(
            "kappa: linear_attention needs a feature-map kernel: 'elu+1', "
            "'positive_random_features' or 'trigonometric_random_features'");
    }
  }
  return to_numpy(std::move(y));
}

}  // namespace

void register_linear_attention(py::module_& m) {
  m.def(
      "linear_attention",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& kernel,
         const py::object& mask, std::optional<double> scale, Index features, std::uint64_t seed,
         const std::string& projection) {
        const KernelSpec spec =
            parse_kernel(kernel, scale, 2, 0.0, 50.0, features, seed, projection);
        bool causal = false;
        if (!mask.is_none()) {
          const std::string name = py::str(mask);
          if (name == "causal")
            causal = true;
          else if (name != "none")
            throw std::invalid_argument(
                "kappa: linear_attention supports mask 'none' and "
                "'causal' (a prefix of the keys), got '" +
                name + "'");
        }
        if (all_float32({q, k, v})) return linear_impl<float>(q, k, v, spec, causal);
        return linear_impl<double>(q, k, v, spec, causal);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("kernel") = "positive_random_features",
      py::arg("mask") = py::none(), py::kw_only(), py::arg("scale") = py::none(),
      py::arg("features") = 64, py::arg("seed") = 0, py::arg("projection") = "orthogonal",
      R"doc(Linear-time Y = phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1) for a feature-map kernel.

kernel: 'elu+1', 'positive_random_features' (FAVOR+) or 'trigonometric_random_features',
with features=m and seed for the random ones; mask: None/'none' or 'causal'.
Cost O((N_Q + N_KV) m d_V): no N_Q x N_KV matrix is formed.)doc");
}

}  // namespace kappa::python
