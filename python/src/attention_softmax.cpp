// The softmax family of attention kernels (softmax, Gemma 2's soft cap):
// every mask, float and double. Its own translation unit: the tiled and
// few-query paths of attention_into make these the heaviest instantiations.
#include "common.hpp"

namespace kappa::python {

template <class T>
void run_softmax_family(const AttentionCall<T>& call) {
  const KernelSpec& k = call.kernel;
  if (k.kind == KernelSpec::Kind::kSoftCapped) {
    run_with_kernel<T>(kernels::SoftCapped(k.cap, k.scale), call);
  } else {
    run_with_kernel<T>(kernels::Softmax{.scale = k.scale}, call);
  }
}

template void run_softmax_family<float>(const AttentionCall<float>&);
template void run_softmax_family<double>(const AttentionCall<double>&);

}  // namespace kappa::python
