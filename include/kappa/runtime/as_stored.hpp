// kappa/runtime/as_stored.hpp - one compiled file of the runtime: models
// whose weights stay as stored (AsStoredWeights). Compile it in exactly one
// translation unit (kappa/runtime/all.hpp includes it).
#pragma once

#include "kappa/runtime/backend.hpp"

namespace kappa::runtime::detail {

Loaded load_as_stored(const std::filesystem::path& path, const LoadOptions& o) {
  return load_as<AsStoredWeights>(path, o);
}

}  // namespace kappa::runtime::detail
