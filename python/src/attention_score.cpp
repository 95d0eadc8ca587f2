// The other elementwise score kernels (linear, ReLU, polynomial): every
// mask, float and double.
#include "common.hpp"

namespace kappa::python {

template <class T>
void run_score_family(const AttentionCall<T>& call) {
  const KernelSpec& k = call.kernel;
  switch (k.kind) {
    case KernelSpec::Kind::kLinear:
      run_with_kernel<T>(kernels::Linear{.scale = k.scale}, call);
      return;
    case KernelSpec::Kind::kReLU:
      run_with_kernel<T>(kernels::ReLU{.scale = k.scale}, call);
      return;
    default:
      run_with_kernel<T>(kernels::Polynomial(k.degree, k.c, k.scale), call);
      return;
  }
}

template void run_score_family<float>(const AttentionCall<float>&);
template void run_score_family<double>(const AttentionCall<double>&);

}  // namespace kappa::python
