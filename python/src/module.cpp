// python/src/module.cpp - the module kappa._kappa: exceptions, threads, and
// attention / attention_details with kernels and masks by name.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "common.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/runtime.hpp"

namespace kappa::python {

// ---- Kernels and masks by name ------------------------------------------------------------

KernelSpec parse_kernel(const py::object& kernel, std::optional<double> scale, int degree, double c,
                        double cap, Index features, std::uint64_t seed,
                        const std::string& projection) {
  using Kind = KernelSpec::Kind;
  KernelSpec k;
  k.scale = scale;
  k.degree = degree;
  k.c = c;
  k.cap = cap;
  k.features = features;
  k.seed = seed;
  if (projection == "orthogonal") {
    k.orthogonal = true;
  } else if (projection == "iid" || projection == "gaussian") {
    k.orthogonal = false;
  } else {
    throw std::invalid_argument("kappa: projection must be 'orthogonal' or 'iid', got '" +
                                projection + "'");
  }
  if (kernel.is_none()) return k;
  if (!py::isinstance<py::str>(kernel)) {
    if (!PyCallable_Check(kernel.ptr()))
      throw py::type_error("kappa: kernel must be a name or a callable");
    k.kind = Kind::kCallable;
    k.callable = kernel;
    return k;
  }
  std::string name = py::str(kernel);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (name == "softmax") {
    k.kind = Kind::kSoftmax;
  } else if (name == "linear") {
    k.kind = Kind::kLinear;
  } else if (name == "relu") {
    k.kind = Kind::kReLU;
  } else if (name == "polynomial") {
    k.kind = Kind::kPolynomial;
  } else if (name == "softcapped" || name == "soft_capped") {
    k.kind = Kind::kSoftCapped;
  } else if (name == "elu+1" || name == "elu_plus_one") {
    k.kind = Kind::kEluPlusOne;
  } else if (name == "positive_random_features" || name == "favor+" || name == "prf") {
    k.kind = Kind::kPositiveRandomFeatures;
  } else if (name == "trigonometric_random_features" || name == "rff" || name == "trf") {
    k.kind = Kind::kTrigonometricRandomFeatures;
  } else {
    throw std::invalid_argument(
        "kappa: unknown kernel '" + name +
        "' (softmax, linear, relu, polynomial, softcapped, elu+1, positive_random_features, "
        "trigonometric_random_features, or a callable)");
  }
  return k;
}

MaskSpec parse_mask(const py::object& mask, std::optional<Index> offset,
                    std::optional<Index> window, const py::object& lengths) {
  using Kind = MaskSpec::Kind;
  MaskSpec m;
  m.offset = offset;
  const auto no_extra = [&](const char* which) {
    if (window)
      throw std::invalid_argument(std::string("kappa: window= is for mask='sliding', not ") +
                                  which);
    if (!lengths.is_none())
      throw std::invalid_argument(std::string("kappa: lengths= is for mask='padding', not ") +
                                  which);
  };
  if (mask.is_none()) {
    no_extra("no mask");
    return m;
  }
  if (!py::isinstance<py::str>(mask)) {
    auto a = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(mask);
    if (!a) {
      PyErr_Clear();
      throw py::type_error("kappa: mask must be a name or a boolean array (N_Q x N_KV)");
    }
    if (a.ndim() != 2)
      throw ShapeError("kappa: a boolean mask must be 2-D (N_Q x N_KV), got " +
                       std::to_string(a.ndim()) + " dimensions");
    no_extra("a boolean mask");
    if (offset) throw std::invalid_argument("kappa: offset= does not apply to a boolean mask");
    m.kind = Kind::kBoolean;
    m.allowed = Eigen::Map<const BooleanMask::Matrix>(a.data(), a.shape(0), a.shape(1));
    return m;
  }
  const std::string name = py::str(mask);
  if (name == "none") {
    no_extra("mask='none'");
  } else if (name == "causal") {
    no_extra("mask='causal'");
    m.kind = Kind::kCausal;
  } else if (name == "sliding" || name == "sliding_window") {
    if (!window) throw std::invalid_argument("kappa: mask='sliding' needs window=W (W >= 1)");
    if (!lengths.is_none())
      throw std::invalid_argument("kappa: lengths= is for mask='padding', not 'sliding'");
    m.kind = Kind::kSliding;
    m.window = *window;
  } else if (name == "padding" || name == "key_padding") {
    if (lengths.is_none())
      throw std::invalid_argument(
          "kappa: mask='padding' needs lengths= (one valid key count, or one per query row)");
    if (window) throw std::invalid_argument("kappa: window= is for mask='sliding', not 'padding'");
    if (offset) throw std::invalid_argument("kappa: offset= does not apply to mask='padding'");
    m.kind = Kind::kPadding;
    if (py::isinstance<py::int_>(lengths)) {
      m.lengths = {lengths.cast<Index>()};
      m.broadcast = true;
    } else {
      m.lengths = lengths.cast<std::vector<Index>>();
      m.broadcast = false;
    }
  } else {
    throw std::invalid_argument("kappa: unknown mask '" + name +
                                "' (none, causal, sliding, padding, or a boolean array)");
  }
  return m;
}

template <class T>
void run_attention(const AttentionCall<T>& call) {
  using Kind = KernelSpec::Kind;
  switch (call.kernel.kind) {
    case Kind::kSoftmax:
    case Kind::kSoftCapped:
      run_softmax_family<T>(call);
      return;
    case Kind::kLinear:
    case Kind::kReLU:
    case Kind::kPolynomial:
      run_score_family<T>(call);
      return;
    default:
      run_feature_family<T>(call);
      return;
  }
}
template void run_attention<float>(const AttentionCall<float>&);
template void run_attention<double>(const AttentionCall<double>&);

namespace {

// ---- attention, attention_details ---------------------------------------------------------

/// A, Z, Z^-1 A, the row shifts and Y of one call, as numpy arrays.
struct Details {
  py::array scores, normalizer, weights, row_shift, output;
};

/// The GIL is released around kappa's work unless the kernel is a Python
/// callable (which takes the GIL itself, see attention_feature.cpp).
template <class F>
void compute(const KernelSpec& k, F&& f) {
  if (k.kind == KernelSpec::Kind::kCallable) {
    f();
  } else {
    py::gil_scoped_release release;
    f();
  }
}

template <class T>
py::array attention_impl(const py::object& q, const py::object& k, const py::object& v,
                         const KernelSpec& ks, const MaskSpec& ms) {
  const InMatrix<T> qm(q, "q"), km(k, "k"), vm(v, "v");
  RowMatrix<T> y;
  AttentionCall<T> call{qm.ref(), km.ref(), vm.ref(), ks, ms};
  call.y = &y;
  compute(ks, [&] { run_attention<T>(call); });
  return to_numpy(std::move(y));
}

template <class T>
Details details_impl(const py::object& q, const py::object& k, const py::object& v,
                     const KernelSpec& ks, const MaskSpec& ms) {
  const InMatrix<T> qm(q, "q"), km(k, "k"), vm(v, "v");
  AttentionDetails<T> d;
  AttentionCall<T> call{qm.ref(), km.ref(), vm.ref(), ks, ms};
  call.details = &d;
  compute(ks, [&] { run_attention<T>(call); });
  return Details{to_numpy(std::move(d.scores)), to_numpy(std::move(d.normalizer)),
                 to_numpy(std::move(d.weights)), to_numpy(std::move(d.row_shift)),
                 to_numpy(std::move(d.output))};
}

/// Median seconds of `reps` C++ calls of exactly what attention() runs
/// (same inputs, a fresh Y and workspace per call, as kappa::attention).
template <class T>
std::vector<double> bench_impl(const py::object& q, const py::object& k, const py::object& v,
                               int reps, const KernelSpec& ks, const MaskSpec& ms) {
  const InMatrix<T> qm(q, "q"), km(k, "k"), vm(v, "v");
  std::vector<double> seconds;
  seconds.reserve(static_cast<std::size_t>(std::max(reps, 0)));
  py::gil_scoped_release release;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    RowMatrix<T> y;
    AttentionCall<T> call{qm.ref(), km.ref(), vm.ref(), ks, ms};
    call.y = &y;
    run_attention<T>(call);
    const auto t1 = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  return seconds;
}

PyObject* g_shape_error = nullptr;
PyObject* g_range_error = nullptr;
PyObject* g_format_error = nullptr;

PyObject* new_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("kappa.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // a new reference, kept by the module
  Py_INCREF(cls);                       // and one for the translator (never released)
  return cls;
}

}  // namespace

}  // namespace kappa::python

namespace py = pybind11;
using namespace kappa::python;

PYBIND11_MODULE(_kappa, m) {
  m.doc() =
      "kappa: exact, inspectable attention (A, Z, Z^-1 A for any kernel), its randomized "
      "approximations, multi-head / grouped-query / latent attention with KV caches, "
      "tokenizers and whole models, from the C++ library's own headers.";
  m.attr("__version__") = KAPPA_PYTHON_VERSION;

  // ---- Exceptions: kappa's three, with its messages ------------------------------------
  g_shape_error = new_exception(
      m, "ShapeError", PyExc_ValueError,
      "Operands whose shapes do not fit together (kappa::ShapeError); the message names both.");
  {
    py::tuple bases = py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_IndexError));
    g_range_error = new_exception(m, "RangeError", bases.ptr(),
                                  "An index (token id, position, head) outside its range "
                                  "(kappa::RangeError); the message names the value and the size.");
  }
  {
    py::tuple bases = py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_OSError));
    g_format_error = new_exception(m, "FormatError", bases.ptr(),
                                   "A malformed or unreadable file or field (kappa::FormatError); "
                                   "the message names the file and the byte or line.");
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kappa::ShapeError& e) {
      PyErr_SetString(g_shape_error, e.what());
    } catch (const kappa::RangeError& e) {
      PyErr_SetString(g_range_error, e.what());
    } catch (const kappa::FormatError& e) {
      PyErr_SetString(g_format_error, e.what());
    }
  });

  // ---- Threads ---------------------------------------------------------------------------
  m.def(
      "set_num_threads",
      [](int n) {
        kappa::runtime::set_num_threads(n);
        return kappa::set_num_threads(n);
      },
      py::arg("n"),
      "Sets the threads of kappa's parallel loops and GEMMs (n < 1 counts as 1); returns the "
      "count now in effect (1 in a build without OpenMP). Results do not depend on it beyond "
      "rounding.");
  m.def("num_threads", &kappa::num_threads, "The threads kappa's parallel loops use.");
  m.def("has_openmp", &kappa::has_openmp, "Whether the module was built with OpenMP threads.");

  // ---- Attention -------------------------------------------------------------------------
  py::class_<Details>(m, "AttentionDetails",
                      "What one attention call computes: A, Z (its diagonal), Z^-1 A and Y.")
      .def_readonly("scores", &Details::scores,
                    "A = f(s Q K^T), masked entries 0 (N_Q x N_KV); for softmax each row is "
                    "multiplied by exp(-row_shift[i])")
      .def_readonly("normalizer", &Details::normalizer, "diag(Z) = A 1, the row sums of A (N_Q)")
      .def_readonly("weights", &Details::weights,
                    "Z^-1 A (N_Q x N_KV): rows sum to 1, or are zero for a row that sees no key")
      .def_readonly("row_shift", &Details::row_shift,
                    "m_i subtracted from row i's scores before f (softmax), else 0 (N_Q)")
      .def_readonly("output", &Details::output, "Y = Z^-1 A V (N_Q x d_V)")
      .def_property_readonly("A", [](const Details& d) { return d.scores; })
      .def_property_readonly("Z", [](const Details& d) { return d.normalizer; })
      .def_property_readonly("Y", [](const Details& d) { return d.output; })
      .def("__repr__", [](const Details& d) {
        return "AttentionDetails(A " + std::string(py::str(d.scores.attr("shape"))) + ", Y " +
               std::string(py::str(d.output.attr("shape"))) + ")";
      });

  static const char* kAttentionDoc =
      R"doc(Y = Z^-1 A V with A = f(s Q K^T), masked (the paper's section 2).

q: (N_Q, d_QK), k: (N_KV, d_QK), v: (N_KV, d_V); float32 when all three are
float32 arrays, float64 otherwise. C-contiguous arrays of that dtype are read
in place (no copy); the result is a new array that owns kappa's matrix (no copy).

kernel: 'softmax' (exp, s = 1/sqrt(d_QK)), 'linear' (x, s = 1), 'relu',
  'polynomial' ((x + c)^degree), 'softcapped' (exp(cap tanh(x / cap))),
  'elu+1' (feature map), 'positive_random_features' / 'trigonometric_random_features'
  (features=m, seed, projection='orthogonal'|'iid'), or a Python callable f
  applied elementwise to 1-D arrays of scaled scores (slow path: one Python
  call per block row of A, under the GIL; no row maximum is subtracted).
scale: s (None: the kernel's default).
mask: None/'none', 'causal', 'sliding' (window=W), 'padding' (lengths=L or one
  per query row), or a boolean (N_Q, N_KV) array; offset: the position of query
  row 0 (default N_KV - N_Q). A row that sees no key, or whose Z is 0, is zero.
Raises ShapeError, RangeError (kappa's messages), ValueError for bad parameters.)doc";

  m.def(
      "attention",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& kernel,
         const py::object& mask, std::optional<double> scale, std::optional<kappa::Index> offset,
         std::optional<kappa::Index> window, const py::object& lengths, int degree, double c,
         double cap, kappa::Index features, std::uint64_t seed, const std::string& projection) {
        const KernelSpec ks =
            parse_kernel(kernel, scale, degree, c, cap, features, seed, projection);
        const MaskSpec ms = parse_mask(mask, offset, window, lengths);
        if (all_float32({q, k, v})) return attention_impl<float>(q, k, v, ks, ms);
        return attention_impl<double>(q, k, v, ks, ms);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("kernel") = "softmax",
      py::arg("mask") = py::none(), py::kw_only(), py::arg("scale") = py::none(),
      py::arg("offset") = py::none(), py::arg("window") = py::none(),
      py::arg("lengths") = py::none(), py::arg("degree") = 2, py::arg("c") = 0.0,
      py::arg("cap") = 50.0, py::arg("features") = 64, py::arg("seed") = 0,
      py::arg("projection") = "orthogonal", kAttentionDoc);

  m.def(
      "attention_details",
      [](const py::object& q, const py::object& k, const py::object& v, const py::object& kernel,
         const py::object& mask, std::optional<double> scale, std::optional<kappa::Index> offset,
         std::optional<kappa::Index> window, const py::object& lengths, int degree, double c,
         double cap, kappa::Index features, std::uint64_t seed, const std::string& projection) {
        const KernelSpec ks =
            parse_kernel(kernel, scale, degree, c, cap, features, seed, projection);
        const MaskSpec ms = parse_mask(mask, offset, window, lengths);
        if (all_float32({q, k, v})) return details_impl<float>(q, k, v, ks, ms);
        return details_impl<double>(q, k, v, ks, ms);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("kernel") = "softmax",
      py::arg("mask") = py::none(), py::kw_only(), py::arg("scale") = py::none(),
      py::arg("offset") = py::none(), py::arg("window") = py::none(),
      py::arg("lengths") = py::none(), py::arg("degree") = 2, py::arg("c") = 0.0,
      py::arg("cap") = 50.0, py::arg("features") = 64, py::arg("seed") = 0,
      py::arg("projection") = "orthogonal",
      "Like attention(), but returns AttentionDetails: A, Z, Z^-1 A, the row shifts and Y.\n"
      "Allocates N_Q x N_KV twice: for inspection and teaching, not speed.");

  m.def(
      "_bench_attention",
      [](const py::object& q, const py::object& k, const py::object& v, int reps,
         const py::object& kernel, const py::object& mask) {
        const KernelSpec ks = parse_kernel(kernel, std::nullopt, 2, 0.0, 50.0, 64, 0, "orthogonal");
        if (ks.kind == KernelSpec::Kind::kCallable)
          throw std::invalid_argument("kappa: _bench_attention takes a kernel name");
        const MaskSpec ms = parse_mask(mask, std::nullopt, std::nullopt, py::none());
        if (all_float32({q, k, v})) return bench_impl<float>(q, k, v, reps, ks, ms);
        return bench_impl<double>(q, k, v, reps, ks, ms);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("reps"), py::arg("kernel") = "softmax",
      py::arg("mask") = py::none(),
      "Seconds of each of `reps` calls of the C++ code attention() runs, timed in C++ (the "
      "overhead benchmark's reference).");

  register_linear_attention(m);
  register_approx(m);
  register_heads(m);
  register_latent(m);
  register_tokenizers(m);
  register_model(m);
}
