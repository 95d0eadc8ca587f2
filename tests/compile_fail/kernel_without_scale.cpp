// Must not compile: a score kernel that forgot scale_for().
#include <kappa/kappa.hpp>

struct NoScale {
  template <kappa::Scalar T>
  T operator()(T x) const {
    return x;
  }
};

static_assert(kappa::check_kernel<NoScale>());

int main() {}
