// kappa/core/concepts.hpp - concepts shared by every policy family.
#pragma once

#include <concepts>
#include <type_traits>

namespace kappa {

/// The scalar types kappa computes in: float and double.
template <class T>
concept Scalar = std::same_as<T, float> || std::same_as<T, double>;

/// For `static_assert(dependent_false<X>, "...")` in a branch that must not be
/// instantiated: the message then names the unsupported combination.
template <class...>
inline constexpr bool dependent_false = false;

}  // namespace kappa
