// python/src/feature_kernels.hpp - the random-feature kernels from a KernelSpec.
#pragma once

#include "common.hpp"
#include "kappa/attention/random_features.hpp"

namespace kappa::python {

inline kernels::RandomFeatureOptions feature_options(const KernelSpec& k) {
  kernels::RandomFeatureOptions o;
  o.projection = k.orthogonal ? kernels::Projection::kOrthogonal : kernels::Projection::kIid;
  o.scale = k.scale;
  return o;
}
inline kernels::PositiveRandomFeatures make_positive_features(const KernelSpec& k, Index d_qk) {
  return kernels::PositiveRandomFeatures(d_qk, k.features, k.seed, feature_options(k));
}
inline kernels::TrigonometricRandomFeatures make_trig_features(const KernelSpec& k, Index d_qk) {
  return kernels::TrigonometricRandomFeatures(d_qk, k.features, k.seed, feature_options(k));
}

}  // namespace kappa::python
