// kappa/runtime/bf16.hpp - one compiled file of the runtime: models whose
// projections and head are held in BF16 (Bf16Weights). Compile it in
// exactly one translation unit (kappa/runtime/all.hpp includes it).
#pragma once

#include "kappa/runtime/backend.hpp"

namespace kappa::runtime::detail {

Loaded load_bf16(const std::filesystem::path& path, const LoadOptions& o) {
  return load_as<Bf16Weights>(path, o);
}

}  // namespace kappa::runtime::detail
