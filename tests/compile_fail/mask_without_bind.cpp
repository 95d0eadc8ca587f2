// Must not compile: a mask without bind().
#include <kappa/kappa.hpp>

struct NotAMask {
  bool allowed(kappa::Index, kappa::Index) const { return true; }
};

static_assert(kappa::check_mask<NotAMask>());

int main() {}
