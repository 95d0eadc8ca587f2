// kappa/heads/positional.hpp - the positional hook of multi-head attention.
//
// A positional policy changes each head's queries and keys according to their
// absolute positions, after the projections and before the scores: rotary
// embeddings (RoPE) rotate row i of Q_h and K_h by angles proportional to its
// position. Multi-head attention calls
//
//     policy.apply(x, first_position)
//
// once per head and per sequence, with x a writable view of that head's
// (N x d_head) block of Q or K, whose row i sits at absolute position
// first_position + i. With a KV cache first_position is the cache length, so
// decoding token t rotates by position t exactly as the full pass would. K is
// stored in the cache after the policy was applied.
//
// kappa::Rope<T> (include/kappa/embed/rope.hpp) is the rotary policy. The
// layer knows d_head, so it builds the Rope itself unless given one:
//   using Attn = kappa::GroupedQueryAttention<float, kernels::Softmax, kappa::Rope<float>>;
//   Attn a(config);                                        // d_R = d_head, base 10000
//   Attn b(config, kappa::RopeOptions{.base = 500000.0});  // d_R = d_head, LLaMA 3's base
//   Attn c(config, kappa::Rope<float>(d_r));               // explicit; d_r <= d_head is
//                                                          // checked at construction
// (a kernel argument, when one is needed, goes before the positional one).
// Hugging Face LLaMA checkpoints pair channels (i, i + d_head/2): use
// Rope<T, RotateHalf> (the default) with their q_proj/k_proj as they are.
#pragma once

#include <concepts>

#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// Which projection a head block passed to a positional policy comes from.
enum class ProjectionRole { kQuery, kKey };

/// A positional policy that treats queries and keys differently (kappa::QkNorm:
/// separate norm weights for Q_h and K_h): `apply(MatrixRef<T> x, Index
/// first_position, ProjectionRole role) const`.
template <class P, class T>
concept RoleAwarePosition = requires(const P& p, MatrixRef<T> x, Index pos) {
  p.apply(x, pos, ProjectionRole::kQuery);
};

/// What a positional policy for scalar type T provides: `apply(MatrixRef<T>
/// x, Index first_position) const`, changing x (N x d_head; row i at position
/// first_position + i) in place, or the role-aware form above.
/// kappa::Rope<T> (embed/rope.hpp) is one; NoPosition is one for every T.
template <class P, class T>
concept PositionalPolicy = RoleAwarePosition<P, T> ||
    requires(const P& p, MatrixRef<T> x, Index pos) {
  p.apply(x, pos);
};

/// Applies `p` to one head block of Q (role kQuery) or K (kKey).
template <class T, class P>
void apply_positional(const P& p, MatrixRef<T> x, Index first_position, ProjectionRole role) {
  if constexpr (RoleAwarePosition<P, T>) {
    p.apply(x, first_position, role);
  } else {
    p.apply(x, first_position);
  }
}

/// A positional policy that the layer can build for its own head width:
/// `static P for_head(Index d_head, const P::Options&)` (kappa::Rope).
template <class P>
concept HeadWidthPosition = requires(Index d_head, const typename P::Options& options) {
  { P::for_head(d_head, options) } -> std::same_as<P>;
};

/// A positional policy that reports how many columns of a head it changes
/// (`rotary_dim()`, kappa::Rope's d_R): the layer checks it against d_head
/// when it is constructed.
template <class P>
concept WidthReportingPosition = requires(const P& p) {
  { p.rotary_dim() } -> std::convertible_to<Index>;
};

/// No positional information inside attention (positions were added to the
/// embeddings, or the model has none): apply() does nothing.
struct NoPosition {
  template <Scalar T>
  void apply(MatrixRef<T> /*x*/, Index /*first_position*/) const {}
};

/// Compile-time check with a readable message.
template <class P, class T>
consteval bool check_positional() {
  static_assert(PositionalPolicy<P, T>,
                "kappa: a positional policy must provide `void apply(MatrixRef<T> x, Index "
                "first_position) const` for the layer's scalar type T (row i of x is at position "
                "first_position + i), e.g. kappa::NoPosition or kappa::Rope<T>");
  return PositionalPolicy<P, T>;
}

}  // namespace kappa
