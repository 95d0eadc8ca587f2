// kappa/embed/random.hpp - the seeded generator behind kappa's deterministic
// initializations (embedding tables, learned positions).
//
// The generator (SeededNormal, seeded_normal_matrix, seeded_uniform_matrix,
// seeded_projection) lives in kappa/core/random.hpp, where the layers of nn/
// and heads/ reach it too; its file comment specifies the stream exactly.
// This header is kept so that existing includes go on working.
#pragma once

#include "kappa/core/random.hpp"
