// kappa/nn/activations.hpp - elementwise activations of the feed-forward
// layers, as policy types with one static member `apply(MatrixRef<T>)`
// (in place):
//
//   Relu       max(x, 0)                                    original Transformer
//   Gelu       x Phi(x) = x (1 + erf(x / sqrt 2)) / 2       BERT ("gelu")
//   GeluTanh   x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2
//                                                           GPT-2 ("gelu_new")
//   Silu       x sigmoid(x) = x / (1 + exp(-x))             LLaMA's SwiGLU gate
#pragma once

#include <cmath>
#include <concepts>
#include <numbers>

#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// max(x, 0).
struct Relu {
  static constexpr const char* kName = "relu";
  template <Scalar T>
  static void apply(MatrixRef<T> x) {
    x = x.cwiseMax(T(0));
  }
};

/// The exact GELU, x Phi(x) with the erf form (PyTorch's default GELU).
struct Gelu {
  static constexpr const char* kName = "gelu";
  template <Scalar T>
  static void apply(MatrixRef<T> x) {
    const T inv_sqrt2 = static_cast<T>(1.0 / std::numbers::sqrt2);
    for (Index i = 0; i < x.rows(); ++i) {
      T* r = x.row(i).data();
      for (Index j = 0; j < x.cols(); ++j)
        r[j] = T(0.5) * r[j] * (T(1) + std::erf(r[j] * inv_sqrt2));
    }
  }
};

/// GELU with the tanh approximation (GPT-2's gelu_new, PyTorch's
/// approximate="tanh").
struct GeluTanh {
  static constexpr const char* kName = "gelu_new";
  template <Scalar T>
  static void apply(MatrixRef<T> x) {
    const T c = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
    for (Index i = 0; i < x.rows(); ++i) {
      auto r = x.row(i).array();
      r = T(0.5) * r * (T(1) + (c * (r + T(0.044715) * r.cube())).tanh());
    }
  }
};

/// SiLU (swish), x sigmoid(x).
struct Silu {
  static constexpr const char* kName = "silu";
  template <Scalar T>
  static void apply(MatrixRef<T> x) {
    for (Index i = 0; i < x.rows(); ++i) {
      auto r = x.row(i).array();
      r = r / (T(1) + (-r).exp());
    }
  }
};

/// An activation policy: `A::apply(MatrixRef<T>)` changes x in place.
template <class A, class T>
concept Activation = requires(MatrixRef<T> x) {
  A::template apply<T>(x);
};

}  // namespace kappa
