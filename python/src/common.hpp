// python/src/common.hpp - what every translation unit of the Python module
// shares: numpy arrays in and out without copies, the dtype rule, and the
// kernel and mask specifications parsed from Python arguments.
//
// Arrays in: a C-contiguous float32/float64 numpy array is viewed in place
// (Eigen::Map, no copy); anything else (another dtype, a Fortran or strided
// array, a list) is converted once by numpy (array_t::ensure with forcecast).
// Arrays out: the owning Eigen matrix is moved to the heap and a py::capsule
// that deletes it becomes the numpy array's base, so results are never copied.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa::python {

namespace py = pybind11;

// ---- numpy <-> Eigen ------------------------------------------------------------------

/// A read-only view of a 2-D numpy array as a row-major Eigen matrix; holds
/// the array (the caller's, or numpy's converted copy) alive.
template <class T>
struct InMatrix {
  py::array_t<T, py::array::c_style | py::array::forcecast> array;
  Eigen::Map<const RowMatrix<T>> map{nullptr, 0, 0};

  InMatrix() = default;
  InMatrix(py::handle obj, const char* name) {
    array = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(obj);
    if (!array) {
      PyErr_Clear();
      throw py::type_error(std::string("kappa: ") + name + " must be an array of numbers");
    }
    if (array.ndim() != 2)
      throw ShapeError(std::string("kappa: ") + name +
                       " must be a 2-D array (rows x columns), got " +
                       std::to_string(array.ndim()) + " dimensions");
    new (&map) Eigen::Map<const RowMatrix<T>>(array.data(), array.shape(0), array.shape(1));
  }
  operator ConstMatrixRef<T>() const { return ConstMatrixRef<T>(map); }
  [[nodiscard]] ConstMatrixRef<T> ref() const { return ConstMatrixRef<T>(map); }
};

/// A 1-D numpy array as an Eigen row vector (a copy: vectors are small).
template <class T>
RowVector<T> to_row_vector(py::handle obj, const char* name) {
  auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a) {
    PyErr_Clear();
    throw py::type_error(std::string("kappa: ") + name + " must be an array of numbers");
  }
  if (a.ndim() != 1)
    throw ShapeError(std::string("kappa: ") + name + " must be a 1-D array, got " +
                     std::to_string(a.ndim()) + " dimensions");
  RowVector<T> v(a.shape(0));
  for (Index i = 0; i < v.size(); ++i) v(i) = a.data()[i];
  return v;
}

/// A numpy array owning `m` (moved, never copied): its base is a capsule
/// that deletes the matrix.
template <class M>
py::array to_numpy(M&& matrix) {
  using Mat = std::decay_t<M>;
  using T = typename Mat::Scalar;
  auto* heap = new Mat(std::forward<M>(matrix));
  py::capsule owner(heap, [](void* p) { delete static_cast<Mat*>(p); });
  if constexpr (Mat::IsVectorAtCompileTime) {
    return py::array_t<T>({heap->size()}, {static_cast<py::ssize_t>(sizeof(T))}, heap->data(),
                          owner);
  } else {
    static_assert(Mat::IsRowMajor || Mat::ColsAtCompileTime == 1, "row-major matrices only");
    const auto rows = static_cast<py::ssize_t>(heap->rows());
    const auto cols = static_cast<py::ssize_t>(heap->cols());
    return py::array_t<T>(
        {rows, cols},
        {static_cast<py::ssize_t>(sizeof(T)) * cols, static_cast<py::ssize_t>(sizeof(T))},
        heap->data(), owner);
  }
}

/// Whether an argument is a float32 numpy array (then the float path runs;
/// everything else runs in double).
inline bool is_float32(py::handle obj) {
  if (!py::isinstance<py::array>(obj)) return false;
  return py::reinterpret_borrow<py::array>(obj).dtype().is(py::dtype::of<float>());
}

/// The scalar type of a call: float when every array argument is float32,
/// double otherwise (numpy's promotion).
inline bool all_float32(std::initializer_list<py::handle> args) {
  for (py::handle a : args)
    if (!is_float32(a)) return false;
  return true;
}

/// "float32" / "float64" to a flag (true: float32). \throws ValueError.
inline bool parse_dtype(const py::object& dtype) {
  const py::dtype d = py::dtype::from_args(dtype);
  if (d.is(py::dtype::of<float>())) return true;
  if (d.is(py::dtype::of<double>())) return false;
  throw py::value_error("kappa: dtype must be float32 or float64, got " +
                        std::string(py::str(dtype)));
}

/// Token ids from a Python sequence or a numpy integer array.
inline std::vector<TokenId> to_ids(py::handle obj) {
  if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj))
    throw py::type_error("kappa: token ids must be a sequence of integers, not a string");
  auto a = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a) {
    PyErr_Clear();
    throw py::type_error("kappa: token ids must be a sequence of integers");
  }
  if (a.ndim() != 1)
    throw ShapeError("kappa: token ids must be 1-D, got " + std::to_string(a.ndim()) +
                     " dimensions");
  std::vector<TokenId> ids(static_cast<std::size_t>(a.shape(0)));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t x = a.data()[i];
    if (x < 0 || x > std::numeric_limits<TokenId>::max())
      throw RangeError("kappa: token id " + std::to_string(x) + " is out of range for a TokenId");
    ids[i] = static_cast<TokenId>(x);
  }
  return ids;
}

// ---- Kernels and masks by name ----------------------------------------------------------

/// f_kappa by name, with its parameters (see kappa.attention's docstring).
struct KernelSpec {
  enum class Kind {
    kSoftmax,
    kLinear,
    kReLU,
    kPolynomial,
    kSoftCapped,
    kEluPlusOne,
    kPositiveRandomFeatures,
    kTrigonometricRandomFeatures,
    kCallable,
  };
  Kind kind = Kind::kSoftmax;
  std::optional<double> scale;
  int degree = 2;
  double c = 0.0;
  double cap = 50.0;
  Index features = 64;
  std::uint64_t seed = 0;
  bool orthogonal = true;
  py::object callable;  // kCallable: f applied to 1-D arrays of scaled scores
};

/// Parses kernel= (a name or a callable) and its parameters.
KernelSpec parse_kernel(const py::object& kernel, std::optional<double> scale, int degree, double c,
                        double cap, Index features, std::uint64_t seed,
                        const std::string& projection);

/// Which keys each query sees, by name.
struct MaskSpec {
  enum class Kind { kNone, kCausal, kSliding, kPadding, kBoolean };
  Kind kind = Kind::kNone;
  std::optional<Index> offset;
  Index window = 0;
  std::vector<Index> lengths;
  bool broadcast = true;
  BooleanMask::Matrix allowed;
};

/// Parses mask= (a name, None, or a boolean N_Q x N_KV array) with offset,
/// window and lengths.
MaskSpec parse_mask(const py::object& mask, std::optional<Index> offset,
                    std::optional<Index> window, const py::object& lengths);

/// Calls f(mask) with the kappa mask the spec names (five instantiations).
template <class F>
decltype(auto) with_mask(const MaskSpec& m, F&& f) {
  switch (m.kind) {
    case MaskSpec::Kind::kCausal:
      return f(CausalMask{.offset = m.offset});
    case MaskSpec::Kind::kSliding:
      return f(SlidingWindowMask{.window = m.window, .offset = m.offset});
    case MaskSpec::Kind::kPadding:
      if (m.broadcast) return f(KeyPaddingMask(m.lengths.at(0)));
      return f(KeyPaddingMask(m.lengths));
    case MaskSpec::Kind::kBoolean:
      return f(BooleanMask{m.allowed});
    case MaskSpec::Kind::kNone:
      break;
  }
  return f(NoMask{});
}

/// One attention call: Y, or (details) A, Z, Z^-1 A, row shifts and Y.
/// `ws` is reused by the benchmark loop.
template <class T>
struct AttentionCall {
  ConstMatrixRef<T> q, k, v;
  const KernelSpec& kernel;
  const MaskSpec& mask;
  RowMatrix<T>* y = nullptr;               // plain attention
  AttentionDetails<T>* details = nullptr;  // attention_details
  AttentionWorkspace<T>* ws = nullptr;
};

/// Runs a call with the kernel and mask of the specs; each kernel family is
/// compiled in its own translation unit (attention_*.cpp).
template <class T>
void run_attention(const AttentionCall<T>& call);
template <class T>
void run_softmax_family(const AttentionCall<T>& call);  // softmax, softcapped
template <class T>
void run_score_family(const AttentionCall<T>& call);  // linear, relu, polynomial
template <class T>
void run_feature_family(const AttentionCall<T>& call);  // elu+1, random features, callable

/// The body shared by the families: the mask dispatch and the call.
template <class T, class K>
void run_with_kernel(const K& kernel, const AttentionCall<T>& call) {
  with_mask(call.mask, [&](const auto& mask) {
    if (call.details != nullptr) {
      *call.details = attention_details(call.q, call.k, call.v, kernel, mask);
    } else {
      call.y->resize(call.q.rows(), call.v.cols());
      AttentionWorkspace<T> local;
      attention_into<T>(call.q, call.k, call.v, *call.y, call.ws ? *call.ws : local, kernel, mask);
    }
  });
}

// ---- Registration of each area (one per translation unit) ------------------------------
void register_attention(py::module_& m);
void register_linear_attention(py::module_& m);
void register_approx(py::module_& m);
void register_heads(py::module_& m);
void register_latent(py::module_& m);
void register_tokenizers(py::module_& m);
void register_model(py::module_& m);

}  // namespace kappa::python
