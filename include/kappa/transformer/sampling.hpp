// kappa/transformer/sampling.hpp - what generation needs that knows no
// model: the logit processors (repetition penalty, temperature, top-k, top-p,
// min-p), the seeded draw, streaming text with stop strings, and the options
// and results of generation and beam search (GenerateOptions, Generation,
// TokenLogprob, BeamSearchOptions). generate.hpp runs a model with them; the
// light header kappa/runtime.hpp uses them without any model code. See
// generate.hpp's file comment for the order of the processors and the rules
// of streaming.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "kappa/cache/formats.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/concepts.hpp"

namespace kappa {

namespace detail {

/// x formatted for messages (shortest form that reads back, e.g. 0.5, 1e-09).
inline std::string gen_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

/// The largest logit that is not NaN (-inf when there is none).
template <Scalar T>
double row_max(std::span<const T> logits) {
  double m = -std::numeric_limits<double>::infinity();
  for (const T l : logits)
    if (!std::isnan(l) && static_cast<double>(l) > m) m = static_cast<double>(l);
  return m;
}

/// exp(l - m) for the row maximum m: 1 at the maximum (also when it is
/// +inf), 0 for NaN and -inf. softmax(l)_i = w_i / sum_j w_j.
inline double relative_weight(double l, double m) {
  if (std::isnan(l)) return 0.0;
  if (l == m) return 1.0;
  return std::exp(l - m);
}

template <Scalar T>
constexpr T kRemoved = -std::numeric_limits<T>::infinity();

/// x rounded to T, clamped to T's finite range (no overflow to inf, and no
/// undefined double -> float conversion of an out-of-range value).
template <Scalar T>
T saturate(double x) {
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  return static_cast<T>(std::clamp(x, -hi, hi));
}

/// x as T stores it when that is a normal number (so float arithmetic
/// matches PyTorch's float32), else x itself (T cannot hold it: 1e-45 in
/// float), for double arithmetic.
template <Scalar T>
double as_stored(double x) {
  if (!(std::abs(x) <= static_cast<double>(std::numeric_limits<T>::max()))) return x;
  const T y = static_cast<T>(x);
  return std::isnormal(y) ? static_cast<double>(y) : x;
}

[[noreturn]] inline void no_finite_logit() {
  throw std::domain_error(
      "kappa: generate: a logits row has no value to choose (every logit is NaN or -inf)");
}

}  // namespace detail

// ---- Logit processors ---------------------------------------------------------------

/// The repetition penalty of CTRL (Keskar et al. 2019) as Hugging Face applies
/// it: for every distinct token i of the context (prompt and generated tokens),
///   l_i <- l_i / r  if l_i > 0,   l_i * r  otherwise,
/// so r > 1 makes repeated tokens less likely. Each id is penalized once, however
/// often it occurs; ids outside the row are ignored.
class RepetitionPenalty {
 public:
  /// \throws std::invalid_argument unless r > 0 and finite (r = 1: no change).
  explicit RepetitionPenalty(double r) : r_(r) {
    if (!(r > 0) || !std::isfinite(r))
      throw std::invalid_argument(
          "kappa: RepetitionPenalty: the penalty must be finite and > 0, got " +
          detail::gen_number(r));
  }
  [[nodiscard]] double penalty() const { return r_; }

  /// Computed in double and rounded to T, saturating at T's largest
  /// magnitude: a penalty that float cannot hold (1e-300 rounds to 0 in
  /// float) or a quotient beyond its range never turns a logit into inf or
  /// NaN.
  template <Scalar T>
  void apply(std::span<T> logits, std::span<const TokenId> context) const {
    std::vector<TokenId> seen(context.begin(), context.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (const TokenId id : seen) {
      if (id < 0 || static_cast<std::size_t>(id) >= logits.size()) continue;
      T& l = logits[static_cast<std::size_t>(id)];
      if (std::isnan(l) || std::isinf(l)) continue;  // -inf stays removed
      const double x = static_cast<double>(l), r = detail::as_stored<T>(r_);
      l = detail::saturate<T>(x > 0 ? x / r : x * r);
    }
  }

 private:
  double r_;
};

/// Temperature scaling: l_i <- l_i / t. t < 1 sharpens softmax(l), t > 1
/// flattens it (greedy decoding is the limit t -> 0, Decoding::kGreedy).
/// The quotient is computed in double; where it would leave T's range (a t
/// as small as 1e-45, which float cannot even hold) the row is scaled as
/// (l_i - max_j l_j) / t instead, which gives the same softmax and cannot
/// overflow: only the best token(s) keep a chance, as t -> 0 should, where
/// a plain float division would turn several logits into inf and sample at
/// random among them. -inf (a removed token) and NaN stay as they are.
class Temperature {
 public:
  /// \throws std::invalid_argument unless t > 0 and finite.
  explicit Temperature(double t) : t_(t) {
    if (!(t > 0) || !std::isfinite(t))
      throw std::invalid_argument("kappa: Temperature: t must be finite and > 0, got " +
                                  detail::gen_number(t) + " (use Decoding::kGreedy for t = 0)");
  }
  [[nodiscard]] double t() const { return t_; }

  template <Scalar T>
  void apply(std::span<T> logits, std::span<const TokenId> /*context*/ = {}) const {
    // t as T holds it (a float division, as PyTorch's), where T can.
    const double t = detail::as_stored<T>(t_);
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    double m = -std::numeric_limits<double>::infinity();
    bool fits = true;
    for (const T l : logits) {
      if (!std::isfinite(l)) continue;
      m = std::max(m, static_cast<double>(l));
      fits = fits && std::abs(static_cast<double>(l) / t) <= hi;
    }
    const double shift = fits ? 0.0 : m;
    for (T& l : logits) {
      if (!std::isfinite(l)) continue;
      l = detail::saturate<T>((static_cast<double>(l) - shift) / t);
    }
  }

 private:
  double t_;
};

/// Top-k: keeps exactly the k largest logits and removes the rest (all of
/// them kept when k >= N_T). Ties at the k-th value are broken by the smaller
/// token id, so exactly k tokens stay (Hugging Face's TopKLogitsWarper keeps
/// every token tied with the k-th value instead; the two differ only on exact
/// ties). NaN counts as -inf. Cost O(N_T).
class TopK {
 public:
  /// \throws std::invalid_argument unless k >= 1.
  explicit TopK(Index k) : k_(k) {
    if (k < 1)
      throw std::invalid_argument("kappa: TopK: k must be >= 1, got " + std::to_string(k) +
                                  " (leave SamplingParams::top_k at 0 for no top-k)");
  }
  [[nodiscard]] Index k() const { return k_; }

  template <Scalar T>
  void apply(std::span<T> logits, std::span<const TokenId> /*context*/ = {}) const {
    const std::size_t n = logits.size(), k = static_cast<std::size_t>(k_);
    if (k >= n) return;
    std::vector<TokenId> idx(n);
    std::iota(idx.begin(), idx.end(), TokenId{0});
    const auto key = [&](TokenId i) {
      const T l = logits[static_cast<std::size_t>(i)];
      return std::isnan(l) ? -std::numeric_limits<T>::infinity() : l;
    };
    // A strict total order (value descending, then id ascending): the first k
    // after nth_element are exactly the k best.
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                     [&](TokenId a, TokenId b) {
                       const T ka = key(a), kb = key(b);
                       return ka > kb || (ka == kb && a < b);
                     });
    for (std::size_t j = k; j < n; ++j)
      logits[static_cast<std::size_t>(idx[j])] = detail::kRemoved<T>;
  }

 private:
  Index k_;
};

/// Nucleus (top-p) sampling (Holtzman et al. 2020): with p_i = softmax(l)_i,
/// keeps the smallest set S of highest-probability tokens with
/// sum_{i in S} p_i >= p, and removes the rest; at least one token is always
/// kept (p = 0 keeps only the most likely one). Tokens of equal probability
/// enter S in the order of their ids. The sums are computed in double. Cost
/// O(N_T + |S| log |S|) for a peaked distribution: the 256 most likely tokens
/// are selected (nth_element) and sorted first, and the selection grows
/// (eightfold, or to the least count that can reach p, or to all tokens past
/// half of them) only while it does not reach p; the result equals a full
/// sort's bit for bit. O(N_T log N_T) at worst, a flat distribution.
class TopP {
 public:
  /// \throws std::invalid_argument unless 0 <= p <= 1.
  explicit TopP(double p) : p_(p) {
    if (!(p >= 0 && p <= 1))
      throw std::invalid_argument("kappa: TopP: p must be in [0, 1], got " + detail::gen_number(p));
  }
  [[nodiscard]] double p() const { return p_; }

  template <Scalar T>
  void apply(std::span<T> logits, std::span<const TokenId> /*context*/ = {}) const {
    const std::size_t n = logits.size();
    if (n == 0 || p_ >= 1) return;
    const double m = detail::row_max<T>(logits);
    if (m == -std::numeric_limits<double>::infinity()) detail::no_finite_logit();
    std::vector<double> w(n);
    double z = 0;
    for (std::size_t i = 0; i < n; ++i) z += w[i] = detail::relative_weight(logits[i], m);
    std::vector<TokenId> idx(n);
    std::iota(idx.begin(), idx.end(), TokenId{0});
    const auto better = [&](TokenId a, TokenId b) {  // a total order
      const double wa = w[static_cast<std::size_t>(a)], wb = w[static_cast<std::size_t>(b)];
      return wa > wb || (wa == wb && a < b);
    };
    const double target = p_ * z;  // sum p_i >= p  <=>  sum w_i >= p Z
    double cum = 0;
    std::size_t keep = 0;
    for (std::size_t k = std::min<std::size_t>(n, 256);;) {
      // idx[0, k) becomes the k most likely tokens, in order.
      if (k < n)
        std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                         better);
      std::sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), better);
      cum = 0;
      keep = 0;
      while (keep < k) {
        cum += w[static_cast<std::size_t>(idx[keep])];
        ++keep;
        if (cum >= target) break;
      }
      if (cum >= target || k == n) break;
      // The tokens left weigh at most the k-th's each: at least
      // (target - cum) / w_k more are needed. Grow eightfold, or to that
      // bound if larger, or to the whole vocabulary past half of it.
      const double w_k = w[static_cast<std::size_t>(idx[k - 1])];
      const double need = w_k > 0 ? (target - cum) / w_k : static_cast<double>(n);
      std::size_t next = 8 * k;
      if (need * 1.25 > static_cast<double>(n - k))
        next = n;
      else
        next = std::max(next, k + static_cast<std::size_t>(need * 1.25) + 1);
      k = next > n / 2 ? n : next;
    }
    for (std::size_t j = keep; j < n; ++j)
      logits[static_cast<std::size_t>(idx[j])] = detail::kRemoved<T>;
  }

 private:
  double p_;
};

/// Min-p sampling: keeps the tokens with p_i >= p * max_j p_j (p_i =
/// softmax(l)_i), i.e. l_i >= max_j l_j + ln p, and removes the rest; the most
/// likely token always stays. Cost O(N_T).
class MinP {
 public:
  /// \throws std::invalid_argument unless 0 <= p <= 1.
  explicit MinP(double p) : p_(p) {
    if (!(p >= 0 && p <= 1))
      throw std::invalid_argument("kappa: MinP: p must be in [0, 1], got " + detail::gen_number(p));
  }
  [[nodiscard]] double p() const { return p_; }

  template <Scalar T>
  void apply(std::span<T> logits, std::span<const TokenId> /*context*/ = {}) const {
    if (p_ <= 0 || logits.empty()) return;
    const double m = detail::row_max<T>(logits);
    if (m == -std::numeric_limits<double>::infinity()) detail::no_finite_logit();
    for (T& l : logits)
      if (detail::relative_weight(l, m) < p_) l = detail::kRemoved<T>;  // p_i / p_max = w_i
  }

 private:
  double p_;
};

/// A logit processor: `p.apply(logits, context)` changes one row of logits
/// (N_T values of T) given the tokens of the sequence so far.
template <class P, class T>
concept LogitProcessor = Scalar<T> &&
    requires(const P& p, std::span<T> logits, std::span<const TokenId> context) {
  p.apply(logits, context);
};

/// Processors applied left to right, composed at compile time:
///   ProcessorChain chain{RepetitionPenalty{1.3}, Temperature{0.7}, TopK{40}};
///   chain.apply(std::span<float>(row), context);
/// A user's own type with apply(std::span<T>, std::span<const TokenId>) fits.
template <class... Ps>
class ProcessorChain {
 public:
  explicit ProcessorChain(Ps... ps) : ps_(std::move(ps)...) {}
  template <Scalar T>
  void apply(std::span<T> logits, std::span<const TokenId> context = {}) const {
    static_assert((LogitProcessor<Ps, T> && ...),
                  "kappa::ProcessorChain: every processor must provide "
                  "apply(std::span<T> logits, std::span<const TokenId> context) const");
    std::apply([&](const auto&... p) { (p.apply(logits, context), ...); }, ps_);
  }

 private:
  std::tuple<Ps...> ps_;
};

/// The parameters of the standard processors, applied in Hugging Face's order
/// (repetition penalty, temperature, top-k, top-p, min-p); the defaults are
/// all identities.
struct SamplingParams {
  double repetition_penalty = 1.0;  ///< r > 0; 1: off
  double temperature = 1.0;         ///< t > 0; 1: off
  Index top_k = 0;                  ///< k >= 0; 0: off
  double top_p = 1.0;               ///< p in [0, 1]; 1: off
  double min_p = 0.0;               ///< p in [0, 1]; 0: off

  /// \throws std::invalid_argument naming the first bad value.
  void validate() const { (void)Processors(*this); }

  /// The processors built once (validated) and applied to rows.
  class Processors {
   public:
    explicit Processors(const SamplingParams& s) {
      if (s.repetition_penalty != 1.0) penalty_.emplace(s.repetition_penalty);
      if (s.temperature != 1.0) temperature_.emplace(s.temperature);
      if (s.top_k < 0)
        throw std::invalid_argument("kappa: SamplingParams: top_k must be >= 0, got " +
                                    std::to_string(s.top_k));
      if (s.top_k > 0) top_k_.emplace(s.top_k);
      if (s.top_p != 1.0) top_p_.emplace(s.top_p);
      if (s.min_p != 0.0) min_p_.emplace(s.min_p);
    }
    /// Every processor in order (sampling).
    template <Scalar T>
    void apply(std::span<T> logits, std::span<const TokenId> context) const {
      if (penalty_) penalty_->apply(logits, context);
      if (temperature_) temperature_->apply(logits, context);
      if (top_k_) top_k_->apply(logits, context);
      if (top_p_) top_p_->apply(logits, context);
      if (min_p_) min_p_->apply(logits, context);
    }
    /// The repetition penalty only: the others never move the argmax (greedy).
    template <Scalar T>
    void apply_penalty(std::span<T> logits, std::span<const TokenId> context) const {
      if (penalty_) penalty_->apply(logits, context);
    }

   private:
    std::optional<RepetitionPenalty> penalty_;
    std::optional<Temperature> temperature_;
    std::optional<TopK> top_k_;
    std::optional<TopP> top_p_;
    std::optional<MinP> min_p_;
  };

  template <Scalar T>
  void apply(std::span<T> logits, std::span<const TokenId> context) const {
    Processors(*this).apply(logits, context);
  }
};

// ---- Random numbers and the draw ------------------------------------------------------

/// xoshiro256** (Blackman and Vigna) seeded through splitmix64: the same seed
/// gives the same numbers on every platform and compiler (unlike the
/// distributions of `<random>`). Each sequence owns one; draws are made on the
/// calling thread in a fixed order, so the thread count never changes them.
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) {
    for (std::uint64_t& x : s_) {  // splitmix64
      seed += 0x9E3779B97F4A7C15ULL;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      x = z ^ (z >> 31);
    }
  }
  /// The next 64 random bits.
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// u in [0, 1): the top 53 bits of next() times 2^-53.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

/// argmax_i l_i; the smallest id among equal maxima (as torch.argmax); NaN is
/// never chosen. \throws std::domain_error if every logit is NaN or -inf.
template <Scalar T>
TokenId argmax(std::span<const T> logits) {
  const double m = detail::row_max<T>(logits);
  if (m == -std::numeric_limits<double>::infinity()) detail::no_finite_logit();
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (static_cast<double>(logits[i]) == m) return static_cast<TokenId>(i);
  detail::no_finite_logit();
}

/// One draw from softmax(l): with w_i = exp(l_i - max l) (0 for NaN and -inf)
/// and u = rng.uniform(), returns the smallest i with
/// u * sum_j w_j < w_0 + ... + w_i (sums in double, in id order); if rounding
/// leaves no such i, the largest i with w_i > 0. Exactly one number is taken
/// from rng per draw. \throws std::domain_error if every logit is NaN or -inf.
template <Scalar T>
TokenId sample_categorical(std::span<const T> logits, Rng& rng) {
  const double m = detail::row_max<T>(logits);
  if (m == -std::numeric_limits<double>::infinity()) detail::no_finite_logit();
  double z = 0;
  for (const T l : logits) z += detail::relative_weight(l, m);
  const double target = rng.uniform() * z;
  double cum = 0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double w = detail::relative_weight(logits[i], m);
    if (w <= 0) continue;
    cum += w;
    last = i;
    if (target < cum) return static_cast<TokenId>(i);
  }
  return static_cast<TokenId>(last);
}

// ---- Streaming text -----------------------------------------------------------------

/// Turns the bytes of generated tokens into pieces of final text (see the file
/// comment): push() each token's bytes, pass on what it returns, and call
/// finish() at the end. Also finds the stop strings, across token boundaries:
/// at the first occurrence of any of them the text ends before it, stopped()
/// becomes true, and later pushes are ignored.
///
/// Invariant: the pieces returned so far, joined, are a prefix of text(); after
/// finish() they are all of it; no piece ends inside a well-formed UTF-8
/// character of text().
class TextStream {
 public:
  /// \throws std::invalid_argument for an empty stop string.
  explicit TextStream(std::vector<std::string> stop_strings = {})
      : stops_(std::move(stop_strings)) {
    for (const std::string& s : stops_)
      if (s.empty()) throw std::invalid_argument("kappa: TextStream: a stop string is empty");
  }

  /// Appends the bytes of one token; returns the text that is now final
  /// (possibly empty).
  std::string push(std::string_view bytes) {
    if (stopped_ || finished_) return {};
    const std::size_t before = text_.size();
    text_.append(bytes);
    // The earliest stop string that ends in the new bytes (one that ended
    // earlier would have been found then).
    std::size_t hit = std::string::npos;
    for (const std::string& s : stops_) {
      const std::size_t from = before >= s.size() - 1 ? before - (s.size() - 1) : 0;
      const std::size_t at = text_.find(s, std::max(from, emitted_));
      if (at != std::string::npos && at < hit) hit = at;
    }
    if (hit != std::string::npos) {
      text_.resize(hit);
      stopped_ = true;
      return take(text_.size());
    }
    return take(std::min(utf8_safe_end(), stop_safe_end()));
  }

  /// Ends the stream: returns everything not yet returned (incomplete UTF-8
  /// bytes as they are, text held for a possible stop string).
  std::string finish() {
    finished_ = true;
    return take(text_.size());
  }

  [[nodiscard]] bool stopped() const { return stopped_; }
  /// The text so far (cut before a matched stop string).
  [[nodiscard]] const std::string& text() const { return text_; }
  /// Bytes of text() returned as pieces so far.
  [[nodiscard]] std::size_t emitted() const { return emitted_; }

  /// The number of trailing bytes of s that form an incomplete UTF-8 sequence
  /// which more bytes could still complete (0 to 3).
  static std::size_t incomplete_tail(std::string_view s) {
    const std::size_t n = s.size();
    for (std::size_t k = 1; k <= 3 && k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[n - k]);
      if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
      const std::size_t need = b >= 0xC2 && b <= 0xDF   ? 2
                               : b >= 0xE0 && b <= 0xEF ? 3
                               : b >= 0xF0 && b <= 0xF4 ? 4
                                                        : 0;
      if (need <= k) return 0;  // ASCII, an invalid lead, or complete
      if (k >= 2) {             // the second byte's range depends on the lead
        const auto c = static_cast<unsigned char>(s[n - k + 1]);
        const bool ok = b == 0xE0   ? c >= 0xA0
                        : b == 0xED ? c <= 0x9F
                        : b == 0xF0 ? c >= 0x90
                        : b == 0xF4 ? c <= 0x8F
                                    : true;
        if (!ok) return 0;
      }
      return k;
    }
    return 0;
  }

 private:
  std::string take(std::size_t end) {
    if (end <= emitted_) return {};
    std::string piece = text_.substr(emitted_, end - emitted_);
    emitted_ = end;
    return piece;
  }
  std::size_t utf8_safe_end() const { return text_.size() - incomplete_tail(text_); }
  // The start of the earliest suffix of the text that is a proper prefix of a
  // stop string (text_.size() when there is none).
  std::size_t stop_safe_end() const {
    std::size_t end = text_.size();
    for (const std::string& s : stops_) {
      const std::size_t first = text_.size() >= s.size() - 1 ? text_.size() - (s.size() - 1) : 0;
      for (std::size_t j = std::max(first, emitted_); j < end; ++j) {
        if (std::string_view(s).starts_with(std::string_view(text_).substr(j))) {
          end = j;
          break;
        }
      }
    }
    return end;
  }

  std::vector<std::string> stops_;
  std::string text_;
  std::size_t emitted_ = 0;
  bool stopped_ = false, finished_ = false;
};

// ---- Options and results ------------------------------------------------------------

/// How the next token is chosen.
enum class Decoding {
  kGreedy,  ///< argmax (after the repetition penalty)
  kSample,  ///< a draw from softmax of the processed logits, from the sequence's Rng
};

/// How logits are computed each step.
enum class KvCache {
  kUse,        ///< prefill the prompt once, then one token per step through the cache
  kRecompute,  ///< forward() over the whole sequence every step (a reference path)
};

/// Why a sequence stopped.
enum class StopReason {
  kEos,            ///< an EOS id was generated (it is the last of ids)
  kStopString,     ///< a stop string appeared in the text (text ends before it)
  kMaxNewTokens,   ///< max_new_tokens were generated
  kContextLength,  ///< prompt + generated tokens reached the context length
  kCallback,       ///< the callback returned false
};

inline const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::kEos:
      return "eos";
    case StopReason::kStopString:
      return "stop string";
    case StopReason::kMaxNewTokens:
      return "max new tokens";
    case StopReason::kContextLength:
      return "context length";
    case StopReason::kCallback:
      return "callback";
  }
  return "?";
}

struct GenerateOptions {
  Index max_new_tokens = 64;  ///< >= 0
  Decoding decoding = Decoding::kGreedy;
  SamplingParams sampling{};  ///< the processors (greedy: the repetition penalty only)
  /// The seed of the draws (kSample). In a batch, sequence b uses seed + b,
  /// so it generates what it would alone with that seed.
  std::uint64_t seed = 0;
  /// Token ids that end a sequence. nullopt: the tokenizer's eos_id() in the
  /// text functions (hf::generation_options reads generation_config.json's),
  /// none in the id functions. An empty list: never stop at an id.
  std::optional<std::vector<TokenId>> eos_ids;
  /// Strings that end generation when they appear in the generated text (not
  /// the prompt); the text ends before the first occurrence. Needs a
  /// tokenizer (the text functions).
  std::vector<std::string> stop_strings;
  /// Largest prompt + generated length; 0: the model's context_length()
  /// (no limit when that is 0). Above GPT-2's learned table it makes the model
  /// throw RangeError; RoPE models may go past max_position_embeddings.
  Index context_length = 0;
  KvCache cache = KvCache::kUse;
  /// How the cache stores keys and values (a latent model: its latent rows):
  /// the model's scalar type, or BF16, F16, Int8 (cache/formats.hpp; the
  /// error each costs is measured in kv_cache.hpp). A model whose cache has
  /// one format (e.g. a user's own) accepts only kNative.
  cache::Format cache_format = cache::Format::kNative;
  /// Whether special tokens (other than the EOS that stops) are in the text.
  tokenize::SkipSpecial skip_special = tokenize::SkipSpecial::kYes;
  /// Record each chosen token's log-probability (Generation::logprobs).
  bool logprobs = false;
  /// With logprobs, also the `top_logprobs` most probable tokens of each
  /// step (0 .. 1000).
  Index top_logprobs = 0;

  /// \throws std::invalid_argument naming the first bad value.
  void validate() const {
    if (max_new_tokens < 0)
      throw std::invalid_argument("kappa: GenerateOptions: max_new_tokens must be >= 0, got " +
                                  std::to_string(max_new_tokens));
    if (context_length < 0)
      throw std::invalid_argument("kappa: GenerateOptions: context_length must be >= 0, got " +
                                  std::to_string(context_length));
    if (top_logprobs < 0 || top_logprobs > 1000)
      throw std::invalid_argument(
          "kappa: GenerateOptions: top_logprobs must be in [0, 1000], got " +
          std::to_string(top_logprobs));
    sampling.validate();
    if (decoding == Decoding::kGreedy) {
      // Greedy decoding applies only the repetition penalty; a warper set
      // with it would be silently ignored (Hugging Face warns), so it is an
      // error here.
      const SamplingParams& p = sampling;
      std::string set;
      const auto note = [&set](const char* name, double v) {
        set += (set.empty() ? "" : ", ") + std::string(name) + " " + detail::gen_number(v);
      };
      if (p.temperature != 1.0) note("temperature", p.temperature);
      if (p.top_k != 0) note("top_k", static_cast<double>(p.top_k));
      if (p.top_p != 1.0) note("top_p", p.top_p);
      if (p.min_p != 0.0) note("min_p", p.min_p);
      if (!set.empty())
        throw std::invalid_argument("kappa: GenerateOptions: sampling parameters are set (" + set +
                                    ") but decoding is kGreedy, which ignores them: set decoding "
                                    "= Decoding::kSample, or leave them at their defaults");
    }
    for (const std::string& s : stop_strings)
      if (s.empty()) throw std::invalid_argument("kappa: GenerateOptions: a stop string is empty");
  }
};

/// Wall-clock times of one sequence's generation. In a batch, the prefill and
/// each step are shared: every sequence records the batch's time of the steps
/// it took part in.
struct GenerationTiming {
  Index prefill_tokens = 0;          ///< the prompt's length
  double prefill_seconds = 0;        ///< the prompt's forward pass and the first choice
  std::vector<double> step_seconds;  ///< each decode step: one token in, the next chosen

  [[nodiscard]] Index decode_tokens() const { return static_cast<Index>(step_seconds.size()); }
  [[nodiscard]] double decode_seconds() const {
    return std::accumulate(step_seconds.begin(), step_seconds.end(), 0.0);
  }
  /// Prompt tokens per second (0 when nothing was timed).
  [[nodiscard]] double prefill_tokens_per_second() const {
    return prefill_seconds > 0 ? static_cast<double>(prefill_tokens) / prefill_seconds : 0.0;
  }
  /// Decode steps per second (0 when there was none).
  [[nodiscard]] double decode_tokens_per_second() const {
    const double s = decode_seconds();
    return s > 0 ? static_cast<double>(decode_tokens()) / s : 0.0;
  }
};

/// The log-probability of one generated token, and of the most probable
/// tokens of that step. They are of the model's distribution,
/// log softmax(logits) in double, before the sampling processors
/// (temperature, top-k, top-p, min-p, repetition penalty): what perplexity
/// and evaluation use, the same for greedy and sampled decoding.
struct TokenLogprob {
  TokenId id = 0;        ///< the chosen token
  double logprob = 0.0;  ///< log p(id | context); -inf if its logit is -inf
  /// The top_logprobs most probable tokens, most probable first (ties: lower
  /// id first), with their log-probabilities.
  std::vector<std::pair<TokenId, double>> top;
};

/// The result for one prompt.
struct Generation {
  std::vector<TokenId> ids;  ///< the new tokens (with the EOS or the stop string's tokens)
  std::string text;          ///< their text, up to a stop string (empty in the id functions)
  StopReason stop = StopReason::kMaxNewTokens;
  GenerationTiming timing;
  /// One entry per id when GenerateOptions::logprobs is set (else empty).
  std::vector<TokenLogprob> logprobs;
  /// Beam search: the hypothesis' score, sum of its tokens' log-probabilities
  /// over (generated length)^length_penalty (Hugging Face's sequence_scores);
  /// 0 otherwise.
  double sequence_score = 0.0;
};

/// log softmax(logits)[id] and the `top` most probable tokens of one row of
/// logits, in double (see TokenLogprob). A NaN logit counts as -inf.
/// \throws RangeError if id is outside the row; std::domain_error if no
///         logit is finite (as argmax).
namespace detail {
/// log softmax(logits)_i in double, the same rule for logprobs and beam
/// search: a NaN logit counts as -inf, and +inf logits share all the mass.
/// \throws std::domain_error if no logit is finite (as argmax).
template <Scalar T>
class LogSoftmax {
 public:
  explicit LogSoftmax(std::span<const T> logits) : logits_(logits), m_(row_max<T>(logits)) {
    if (m_ == -kInf) no_finite_logit();
    for (const T l : logits) z_ += relative_weight(static_cast<double>(l), m_);
    log_z_ = m_ + std::log(z_);
  }
  double operator()(std::size_t i) const {
    const double l = static_cast<double>(logits_[i]);
    if (std::isnan(l)) return -kInf;
    if (m_ == kInf) return l == kInf ? -std::log(z_) : -kInf;  // the mass is on the +inf logits
    return l - log_z_;
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  std::span<const T> logits_;
  double m_;
  double z_ = 0.0;  // sum exp(l - m); with +inf logits, how many there are
  double log_z_ = 0.0;
};
}  // namespace detail

template <Scalar T>
TokenLogprob token_logprob(std::span<const T> logits, TokenId id, Index top = 0) {
  require_index("token id", id, static_cast<long long>(logits.size()), "the logits row (N_T)");
  const detail::LogSoftmax<T> lp(logits);
  TokenLogprob out;
  out.id = id;
  out.logprob = lp(static_cast<std::size_t>(id));
  const std::size_t k = std::min(static_cast<std::size_t>(std::max<Index>(top, 0)), logits.size());
  if (k > 0) {
    std::vector<TokenId> order(logits.size());
    std::iota(order.begin(), order.end(), TokenId{0});
    const auto before = [&](TokenId a, TokenId b) {
      const double la = lp(static_cast<std::size_t>(a)), lb = lp(static_cast<std::size_t>(b));
      return la > lb || (la == lb && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      before);
    out.top.reserve(k);
    for (std::size_t i = 0; i < k; ++i)
      out.top.emplace_back(order[i], lp(static_cast<std::size_t>(order[i])));
  }
  return out;
}

/// Streaming callbacks: return false to stop (that sequence).
using TokenCallback = std::function<bool(TokenId)>;
using BatchTokenCallback = std::function<bool(std::size_t sequence, TokenId)>;
using TextCallback = std::function<bool(std::string_view piece)>;
using BatchTextCallback = std::function<bool(std::size_t sequence, std::string_view piece)>;

// ---- Beam search options -------------------------------------------------------------

/// When beam search stops (Hugging Face's early_stopping).
enum class EarlyStopping {
  kHeuristic,  ///< False: stop when no running beam can beat the worst kept
               ///< hypothesis, judged at the current length
  kFirst,      ///< True: stop as soon as num_beams hypotheses have ended
  kNever,      ///< "never": stop only when no running beam can beat them at
               ///< any length up to the limit
};

/// Beam search (Hugging Face's num_beams > 1 without sampling).
struct BeamSearchOptions {
  Index num_beams = 4;          ///< B >= 1 (1 is greedy decoding)
  double length_penalty = 1.0;  ///< score = sum log p / (generated length)^length_penalty
  EarlyStopping early_stopping = EarlyStopping::kHeuristic;
  Index num_return_sequences = 1;  ///< 1 .. num_beams, best first

  /// \throws std::invalid_argument naming the first bad value.
  void validate() const {
    if (num_beams < 1 || num_beams > 1024)
      throw std::invalid_argument("kappa: BeamSearchOptions: num_beams must be in [1, 1024], got " +
                                  std::to_string(num_beams));
    if (!std::isfinite(length_penalty))
      throw std::invalid_argument("kappa: BeamSearchOptions: length_penalty must be finite");
    if (num_return_sequences < 1 || num_return_sequences > num_beams)
      throw std::invalid_argument(
          "kappa: BeamSearchOptions: num_return_sequences must be in [1, num_beams = " +
          std::to_string(num_beams) + "], got " + std::to_string(num_return_sequences));
  }
};

}  // namespace kappa
