// Must not compile: a "kernel" with neither f(x) nor a feature map.
#include <kappa/kappa.hpp>

struct NotAKernel {
  double scale_for(kappa::Index) const { return 1.0; }
};

int main() {
  kappa::RowMatrix<float> q = kappa::RowMatrix<float>::Ones(2, 2);
  kappa::AttentionWorkspace<float> ws;
  kappa::RowMatrix<float> y(2, 2);
  kappa::attention_into<float, NotAKernel>(q, q, q, y, ws, NotAKernel{});
}
