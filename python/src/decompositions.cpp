// Eigen's QR and SVD classes that the bindings use (Nystrom's pseudo-inverse,
// latent compression's randomized SVD), compiled once for the module: every
// other translation unit of the module declares them extern
// (KAPPA_EXTERN_DECOMPOSITIONS, kappa/core/decompositions.hpp).
#define KAPPA_INSTANTIATE_DECOMPOSITIONS
#include "kappa/core/decompositions.hpp"
