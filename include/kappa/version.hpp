// kappa/version.hpp - the library's version, for the preprocessor and for code.
//
// CMake reads these three numbers for project(kappa VERSION ...), so this file
// is the one place the version is written. Bump it together with CHANGELOG.md.
#pragma once

#include <string_view>

/// Major version: changes that break source compatibility.
#define KAPPA_VERSION_MAJOR 0
/// Minor version: additions; in 0.x, breaking changes may land here too.
#define KAPPA_VERSION_MINOR 1
/// Patch version: fixes only.
#define KAPPA_VERSION_PATCH 0

/// The version as one comparable number: major * 10000 + minor * 100 + patch.
#define KAPPA_VERSION \
  (KAPPA_VERSION_MAJOR * 10000 + KAPPA_VERSION_MINOR * 100 + KAPPA_VERSION_PATCH)

#define KAPPA_DETAIL_STRINGIZE2(x) #x
#define KAPPA_DETAIL_STRINGIZE(x) KAPPA_DETAIL_STRINGIZE2(x)
/// The version as "major.minor.patch".
#define KAPPA_VERSION_STRING                  \
  KAPPA_DETAIL_STRINGIZE(KAPPA_VERSION_MAJOR) \
  "." KAPPA_DETAIL_STRINGIZE(KAPPA_VERSION_MINOR) "." KAPPA_DETAIL_STRINGIZE(KAPPA_VERSION_PATCH)

namespace kappa {

/// The version of the kappa headers this code was compiled against.
struct Version {
  int major;
  int minor;
  int patch;
};

/// kappa's version as numbers, e.g. `kappa::version.minor`.
inline constexpr Version version{KAPPA_VERSION_MAJOR, KAPPA_VERSION_MINOR, KAPPA_VERSION_PATCH};

/// kappa's version as "major.minor.patch".
inline constexpr std::string_view version_string = KAPPA_VERSION_STRING;

}  // namespace kappa
