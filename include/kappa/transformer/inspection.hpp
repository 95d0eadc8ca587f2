// kappa/transformer/inspection.hpp - what a forward pass can show besides
// its logits (DecoderLM::inspect, CausalLM::inspect): the residual stream
// (Hugging Face's output_hidden_states), each head's attention weights
// Z_h^-1 A_h (output_attentions), and a per-layer hook; and which rows of
// logits a cached call returns. Only types: light enough for kappa/runtime.hpp.
#pragma once

#include <functional>
#include <vector>

#include "kappa/core/concepts.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/heads/head_weights.hpp"

namespace kappa {

/// Which rows of logits a cached call returns: every new token's, or only the
/// last one's (all a sampler needs; saves N_new - 1 rows of the N_T-wide GEMM).
enum class LogitsFor { kAll, kLast };

/// What DecoderLM::inspect records of a forward pass (what is not asked
/// for costs nothing).
struct InspectOptions {
  /// The residual stream: Hugging Face's output_hidden_states, L + 1 rows
  /// blocks (N, d): entry l < L is layer l's input X_l (entry 0 the
  /// embeddings), entry L the final hidden states N_f(X_L).
  bool hidden_states = false;
  /// The attention weights Z_h^-1 A_h of every head (Hugging Face's
  /// output_attentions), of the layers in `layers`.
  bool attentions = false;
  /// The layers whose attention weights are recorded; empty: all of them.
  std::vector<Index> layers;
};

/// What DecoderLM::inspect returns.
template <Scalar T>
struct Inspection {
  RowMatrix<T> logits;                      ///< (N, N_T), as forward()
  std::vector<RowMatrix<T>> hidden_states;  ///< L + 1 entries (see InspectOptions), or none
  /// attentions[l][h] is layer l's head h (N x N); empty for a layer not
  /// asked for (and all empty unless InspectOptions::attentions).
  std::vector<HeadWeights<T>> attentions;
};

/// A per-layer observer of DecoderLM::inspect: called after layer l with
/// its output X_{l+1} (N, d), which it may change (an intervention: later
/// layers see the change).
template <Scalar T>
using LayerHook = std::function<void(Index layer, MatrixRef<T> x)>;

}  // namespace kappa
