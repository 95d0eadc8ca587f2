// kappa/embed/rope_scaling.hpp - the RoPE frequency rules of real model
// configs (config.json's "rope_scaling"), for rotary dimension d_R and base b.
// The unscaled frequencies are theta_i = b^{-2i / d_R}, i = 0 .. d_R/2 - 1.
//
//   linear (position interpolation):  theta_i / s                        (s = factor)
//   dynamic NTK: for a sequence of L > L_0 tokens (L_0 the original context)
//                the base becomes b (s L / L_0 - (s - 1))^{d_R / (d_R - 2)};
//                for L <= L_0 nothing changes. L is the number of positions
//                seen so far, so a cached decode step uses its own length.
//   llama3 (Llama 3.1): with wavelength w_i = 2 pi / theta_i,
//                w_i < L_0 / f_high:  theta_i                       (high frequencies kept)
//                w_i > L_0 / f_low:   theta_i / s                   (low frequencies interpolated)
//                otherwise:           (1 - a) theta_i / s + a theta_i,
//                                     a = (L_0 / w_i - f_low) / (f_high - f_low)
//   yarn (Peng et al. 2023; DeepSeek-V2): with the correction range
//                [lo, hi] = [floor(c(beta_fast)), ceil(c(beta_slow))] clamped to
//                [0, d_R - 1], c(r) = d_R ln(L_0 / (2 pi r)) / (2 ln b), and the
//                ramp g_i = clamp((i - lo) / (hi - lo), 0, 1):
//                theta'_i = theta_i / s g_i + theta_i (1 - g_i)
//                cos and sin are multiplied by the attention factor
//                m(s, mscale) / m(s, mscale_all_dim), m(s, k) = 0.1 k ln s + 1
//                (1 for s <= 1), or by m(s, 1) when the config gives no mscales.
//                DeepSeek-V2 also multiplies the softmax scale by
//                m(s, mscale_all_dim)^2 (yarn_softmax_factor()).
//   longrope (Phi-3, Phi-3.5, Phi-4-mini): per-frequency rescale factors,
//                theta'_i = theta_i / e_i with e = long_factor for a sequence
//                of L > L_0 positions, short_factor otherwise (L as for dynamic
//                NTK: a cached decode step uses its own length); cos and sin
//                are multiplied by sqrt(1 + ln s / ln L_0) (1 for s <= 1),
//                s = max_position_embeddings / L_0, unless attention_factor
//                is given.
//
// These are the rules of Hugging Face's modeling_rope_utils and DeepSeek's
// modeling code, stated as equations; tests/reference checks them against an
// independent implementation.
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// A RoPE frequency rule and its parameters (config.json's rope_scaling).
struct RopeScaling {
  enum class Kind { kNone, kLinear, kDynamicNtk, kLlama3, kYarn, kLongRope };
  Kind kind = Kind::kNone;
  double factor = 1.0;                       ///< s
  Index original_context = 0;                ///< L_0 [original_max_position_embeddings]
  double low_freq_factor = 1.0;              ///< f_low (llama3)
  double high_freq_factor = 4.0;             ///< f_high (llama3)
  double beta_fast = 32.0;                   ///< yarn
  double beta_slow = 1.0;                    ///< yarn
  double mscale = 0.0;                       ///< yarn; 0 = not given
  double mscale_all_dim = 0.0;               ///< yarn; 0 = not given
  std::optional<double> attention_factor{};  ///< yarn, longrope: overrides the computed factor
  std::vector<double> short_factor{};        ///< longrope: e_i for L <= L_0 (d_R / 2)
  std::vector<double> long_factor{};         ///< longrope: e_i for L > L_0 (d_R / 2)

  /// Whether the frequencies depend on the sequence length (dynamic NTK,
  /// longrope): decoding through a cache then rotates each token with the
  /// frequencies of the length at its step.
  [[nodiscard]] bool length_dependent() const {
    return kind == Kind::kDynamicNtk || kind == Kind::kLongRope;
  }

  [[nodiscard]] static const char* name(Kind k) {
    switch (k) {
      case Kind::kNone:
        return "default";
      case Kind::kLinear:
        return "linear";
      case Kind::kDynamicNtk:
        return "dynamic";
      case Kind::kLlama3:
        return "llama3";
      case Kind::kYarn:
        return "yarn";
      case Kind::kLongRope:
        return "longrope";
    }
    return "?";
  }

  /// \throws std::invalid_argument naming the parameter when it is out of range.
  void validate() const {
    const auto bad = [&](const std::string& what) {
      throw std::invalid_argument(std::string("kappa: rope_scaling (") + name(kind) + "): " + what);
    };
    if (kind == Kind::kNone) return;
    if (!(factor > 0) || !std::isfinite(factor))
      bad("factor must be finite and > 0, got " + std::to_string(factor));
    if ((kind == Kind::kDynamicNtk || kind == Kind::kLlama3 || kind == Kind::kYarn ||
         kind == Kind::kLongRope) &&
        original_context < 1)
      bad("original_max_position_embeddings must be >= 1, got " + std::to_string(original_context));
    if (kind == Kind::kLlama3 && !(high_freq_factor > low_freq_factor && low_freq_factor > 0))
      bad("needs 0 < low_freq_factor < high_freq_factor");
    if (kind == Kind::kYarn &&
        !(std::isfinite(beta_fast) && std::isfinite(beta_slow) && beta_fast > 0 && beta_slow > 0))
      bad("beta_fast and beta_slow must be finite and > 0");
    if (kind == Kind::kLongRope) {
      if (short_factor.size() != long_factor.size())
        bad("short_factor has " + std::to_string(short_factor.size()) + " entries, long_factor " +
            std::to_string(long_factor.size()) + ": both need d_R / 2");
      for (const std::vector<double>* v : {&short_factor, &long_factor})
        for (double e : *v)
          if (!(e > 0) || !std::isfinite(e))
            bad("short_factor and long_factor entries must be finite and > 0");
    }
    if (attention_factor && (!(*attention_factor > 0) || !std::isfinite(*attention_factor)))
      bad("attention_factor must be finite and > 0");
  }
};

/// m(s, k) = 0.1 k ln s + 1 for s > 1, else 1 (YaRN's magnitude scale).
inline double yarn_mscale(double s, double k = 1.0) {
  return s <= 1.0 ? 1.0 : 0.1 * k * std::log(s) + 1.0;
}

/// The factor multiplying cos and sin: 1 except for yarn (see the file comment).
inline double rope_attention_factor(const RopeScaling& r) {
  if (r.kind == RopeScaling::Kind::kLongRope) {
    if (r.attention_factor) return *r.attention_factor;
    if (r.factor <= 1.0) return 1.0;
    return std::sqrt(1.0 + std::log(r.factor) / std::log(static_cast<double>(r.original_context)));
  }
  if (r.kind != RopeScaling::Kind::kYarn) return 1.0;
  if (r.attention_factor) return *r.attention_factor;
  if (r.mscale != 0.0 && r.mscale_all_dim != 0.0)
    return yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim);
  return yarn_mscale(r.factor);
}

/// DeepSeek-V2's factor on the softmax scale: m(s, mscale_all_dim)^2 for yarn
/// with mscale_all_dim given, else 1.
inline double yarn_softmax_factor(const RopeScaling& r) {
  if (r.kind != RopeScaling::Kind::kYarn || r.mscale_all_dim == 0.0) return 1.0;
  const double m = yarn_mscale(r.factor, r.mscale_all_dim);
  return m * m;
}

/// The frequencies theta'_i (d_R / 2 of them) under the rule, for a sequence
/// of `seq_len` positions (used by dynamic NTK only).
inline std::vector<double> rope_frequencies(Index rotary_dim, double base, const RopeScaling& r,
                                            Index seq_len = 0) {
  const Index half = rotary_dim / 2;
  const double d = static_cast<double>(rotary_dim);
  double b = base;
  if (r.kind == RopeScaling::Kind::kDynamicNtk && seq_len > r.original_context && rotary_dim > 2) {
    const double ratio =
        r.factor * static_cast<double>(seq_len) / static_cast<double>(r.original_context) -
        (r.factor - 1.0);
    b = base * std::pow(ratio, d / (d - 2.0));
  }
  std::vector<double> theta(static_cast<std::size_t>(half));
  for (Index i = 0; i < half; ++i)
    theta[static_cast<std::size_t>(i)] = std::pow(b, -static_cast<double>(2 * i) / d);
  switch (r.kind) {
    case RopeScaling::Kind::kNone:
    case RopeScaling::Kind::kDynamicNtk:
      break;
    case RopeScaling::Kind::kLongRope: {
      const std::vector<double>& e = seq_len > r.original_context ? r.long_factor : r.short_factor;
      if (static_cast<Index>(e.size()) != half)
        throw std::invalid_argument("kappa: rope_scaling (longrope): " + std::to_string(e.size()) +
                                    " rescale factors for a rotary dimension of " +
                                    std::to_string(rotary_dim) +
                                    " (d_R / 2 = " + std::to_string(half) + " needed)");
      for (std::size_t i = 0; i < theta.size(); ++i) theta[i] /= e[i];
      break;
    }
    case RopeScaling::Kind::kLinear:
      for (double& t : theta) t /= r.factor;
      break;
    case RopeScaling::Kind::kLlama3: {
      const double l0 = static_cast<double>(r.original_context);
      const double low_wavelen = l0 / r.low_freq_factor, high_wavelen = l0 / r.high_freq_factor;
      for (double& t : theta) {
        const double w = 2.0 * std::numbers::pi / t;
        if (w < high_wavelen) continue;
        if (w > low_wavelen) {
          t /= r.factor;
        } else {
          const double a = (l0 / w - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          t = (1.0 - a) * t / r.factor + a * t;
        }
      }
      break;
    }
    case RopeScaling::Kind::kYarn: {
      const double l0 = static_cast<double>(r.original_context);
      const auto corr = [&](double rotations) {
        return d * std::log(l0 / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
      };
      const double lo = std::max(std::floor(corr(r.beta_fast)), 0.0);
      double hi = std::min(std::ceil(corr(r.beta_slow)), d - 1.0);
      if (hi == lo) hi += 0.001;
      for (Index i = 0; i < half; ++i) {
        const double g = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
        double& t = theta[static_cast<std::size_t>(i)];
        t = t / r.factor * g + t * (1.0 - g);
      }
      break;
    }
  }
  return theta;
}

}  // namespace kappa
