// kappa/transformer/generate.hpp - text generation with a causal language
// model: logit processors, greedy decoding and seeded sampling, stop
// conditions, streaming text, and several prompts in one batch.
//
// One step of generation, for a sequence x_1 .. x_n and its logits l (one row
// of N_T numbers, the model's prediction of x_{n+1}):
//   l' = MinP(TopP(TopK(Temperature(RepetitionPenalty(l; x_1..x_n)))))
//   x_{n+1} = argmax_i l_i            (Decoding::kGreedy; only the repetition
//                                      penalty can move the argmax, so it is
//                                      the only processor applied)
//   x_{n+1} ~ softmax(l')              (Decoding::kSample, see Rng and
//                                      sample_categorical for the draw)
// The processor order is Hugging Face's (transformers' generation utils:
// logits processors such as the repetition penalty first, then the warpers
// temperature, top-k, top-p, min-p); a processor whose parameter makes it the
// identity (penalty 1, temperature 1, top_k 0, top_p 1, min_p 0) is skipped.
// A removed token's logit becomes -infinity.
//
// Example:
//   auto lm  = kappa::hf::load_causal_lm<float>(dir);
//   auto tok = kappa::tokenize::HfTokenizer::from_directory(dir.string());
//   kappa::GenerateOptions opt = kappa::hf::generation_options(dir);  // EOS ids
//   opt.decoding = kappa::Decoding::kSample;
//   opt.sampling = {.temperature = 0.8, .top_p = 0.95};
//   opt.seed = 42;
//   opt.max_new_tokens = 64;
//   opt.stop_strings = {"\n\n"};
//   kappa::Generation g = kappa::generate(lm, tok, "Once upon a time", opt,
//       [](std::string_view piece) { std::cout << piece << std::flush; return true; });
//   // g.ids, g.text, g.stop (StopReason), g.timing.decode_tokens_per_second()
//
// Streaming (TextStream): a piece is passed to the callback as soon as it is
// known to be final text, which is when
//   * it ends on a complete UTF-8 character: a trailing incomplete sequence
//     that can still become a well-formed character (a byte-level BPE token
//     may end inside one) is held back until the bytes that complete it or
//     show it ill-formed arrive; an ill-formed byte is passed on as it is
//     (never replaced by U+FFFD), so the pieces join to exactly the decoded
//     bytes; at the end, held-back bytes are flushed as they are;
//   * it cannot be the beginning of a stop string: a suffix of the text that
//     is a proper prefix of a stop string is held back until the following
//     bytes show that it is not.
// Text is the concatenation of the generated tokens' bytes (the tokenizer's
// decode()), special tokens left out unless GenerateOptions::skip_special is
// kNo; the token that ends generation at an EOS id is never part of it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/cache/formats.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/hf.hpp"

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

// ---- The generation loop -------------------------------------------------------------

namespace detail {

/// The scalar type of a model's logits.
template <class Model>
using LogitScalar = typename std::decay_t<decltype(std::declval<const Model&>().forward(
    std::span<const TokenId>{}))>::Scalar;

/// What the loop reports to (all optional).
struct GenerationSinks {
  std::function<std::string(TokenId)> token_text;  ///< the text of a token; empty: no text
  BatchTokenCallback on_token;
  BatchTextCallback on_text;
};

/// A model's cache for generation in the format asked for: make_cache(format)
/// when the model offers a run-time choice, else its one cache type (which
/// must then be the native one).
template <class Model>
auto make_generation_cache(const Model& lm, cache::Format format) {
  if constexpr (requires { lm.make_cache(format); }) {
    return lm.make_cache(format);
  } else {
    if (format != cache::Format::kNative)
      throw std::invalid_argument(std::string("kappa: generate: this model's cache has one "
                                              "format; cache_format must be native, got ") +
                                  cache::to_string(format));
    return lm.make_cache();
  }
}

template <class Model>
std::vector<Generation> run_generation(const Model& lm,
                                       const std::vector<std::vector<TokenId>>& prompts,
                                       const GenerateOptions& o, const std::vector<TokenId>& eos,
                                       const GenerationSinks& sinks) {
  using T = LogitScalar<Model>;
  using Clock = std::chrono::steady_clock;
  using Cache = decltype(make_generation_cache(lm, o.cache_format));
  o.validate();
  if (!o.stop_strings.empty() && !sinks.token_text)
    throw std::invalid_argument(
        "kappa: generate: stop strings need the text of the tokens (use a generate() with a "
        "tokenizer)");
  const SamplingParams::Processors processors(o.sampling);
  const Index limit = o.context_length > 0 ? o.context_length : lm.context_length();
  const std::size_t n_seq = prompts.size();

  struct Sequence {
    std::vector<TokenId> context;  // prompt + generated
    Generation out;
    Rng rng;
    TextStream stream;
    std::optional<Cache> cache;
    bool done = false, text_open = true;
  };
  std::vector<Sequence> seqs(n_seq);
  for (std::size_t b = 0; b < n_seq; ++b) {
    const Index len = static_cast<Index>(prompts[b].size());
    if (len == 0)
      throw std::invalid_argument("kappa: generate: prompt " + std::to_string(b) +
                                  " is empty (a model needs at least one token, e.g. BOS)");
    if (limit > 0 && len > limit)
      throw RangeError("kappa: generate: prompt " + std::to_string(b) + " has " +
                       std::to_string(len) + " tokens, more than the context length " +
                       std::to_string(limit));
    Sequence& s = seqs[b];
    s.context = prompts[b];
    s.rng = Rng(o.seed + b);
    s.stream = TextStream(o.stop_strings);
    s.out.timing.prefill_tokens = len;
    if (o.max_new_tokens == 0) {
      s.done = true;
      s.out.stop = StopReason::kMaxNewTokens;
    } else if (limit > 0 && len == limit) {
      s.done = true;
      s.out.stop = StopReason::kContextLength;
    }
  }

  const auto finish = [&](std::size_t b, StopReason why) {
    Sequence& s = seqs[b];
    s.done = true;
    s.out.stop = why;
    if (sinks.token_text) {
      const std::string rest = s.stream.finish();
      if (!rest.empty() && s.text_open && sinks.on_text) (void)sinks.on_text(b, rest);
      s.out.text = s.stream.text();
    }
  };
  // The choice of sequence b's next token from its logits row, and the stops.
  std::vector<T> row;
  const auto choose = [&](std::size_t b, const T* logits, Index n) {
    Sequence& s = seqs[b];
    row.assign(logits, logits + n);
    const std::span<T> l(row);
    TokenId next = 0;
    if (o.decoding == Decoding::kGreedy) {
      processors.apply_penalty(l, std::span<const TokenId>(s.context));
      next = argmax<T>(l);
    } else {
      processors.apply(l, std::span<const TokenId>(s.context));
      next = sample_categorical<T>(l, s.rng);
    }
    if (o.logprobs)
      s.out.logprobs.push_back(token_logprob<T>(
          std::span<const T>(logits, static_cast<std::size_t>(n)), next, o.top_logprobs));
    s.out.ids.push_back(next);
    s.context.push_back(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) return finish(b, StopReason::kEos);
    bool go_on = true;
    if (sinks.token_text) {
      const std::string piece = s.stream.push(sinks.token_text(next));
      if (!piece.empty() && s.text_open && sinks.on_text && !sinks.on_text(b, piece)) {
        s.text_open = false;
        go_on = false;
      }
      if (s.stream.stopped()) return finish(b, StopReason::kStopString);
    }
    if (sinks.on_token && !sinks.on_token(b, next)) go_on = false;
    if (!go_on) return finish(b, StopReason::kCallback);
    if (static_cast<Index>(s.out.ids.size()) >= o.max_new_tokens)
      return finish(b, StopReason::kMaxNewTokens);
    if (limit > 0 && static_cast<Index>(s.context.size()) >= limit)
      return finish(b, StopReason::kContextLength);
  };

  std::vector<std::size_t> active;
  for (std::size_t b = 0; b < n_seq; ++b)
    if (!seqs[b].done) active.push_back(b);
  Index refresh = 0;  // see CausalLM::cache_refresh_length()
  if constexpr (requires { lm.cache_refresh_length(); }) refresh = lm.cache_refresh_length();
  bool first = true;
  while (!active.empty()) {
    const auto t0 = Clock::now();
    RowMatrix<T> logits;  // (active, N_T): the last row of each active sequence
    if (o.cache == KvCache::kUse) {
      std::vector<std::vector<TokenId>> batch;
      std::vector<Cache*> caches;
      for (const std::size_t b : active) {
        Sequence& s = seqs[b];
        if (first) {
          s.cache.emplace(make_generation_cache(lm, o.cache_format));
          batch.push_back(s.context);
        } else if (refresh > 0 && s.cache->length() == refresh) {
          // The sequence crosses the model's refresh length (Phi-3's
          // LongRoPE): run all of it again, as Hugging Face does.
          s.cache->reset();
          batch.push_back(s.context);
        } else {
          batch.push_back({s.context.back()});
        }
        caches.push_back(&*s.cache);
      }
      logits = lm.forward_cached(batch, caches, LogitsFor::kLast);
    } else {
      logits.resize(static_cast<Index>(active.size()), lm.vocab_size());
      for (std::size_t k = 0; k < active.size(); ++k) {
        const RowMatrix<T> all = lm.forward(std::span<const TokenId>(seqs[active[k]].context));
        logits.row(static_cast<Index>(k)) = all.bottomRows(1);
      }
    }
    for (std::size_t k = 0; k < active.size(); ++k)
      choose(active[k], logits.row(static_cast<Index>(k)).data(), logits.cols());
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<std::size_t> still;
    for (const std::size_t b : active) {
      GenerationTiming& t = seqs[b].out.timing;
      if (first)
        t.prefill_seconds = seconds;
      else
        t.step_seconds.push_back(seconds);
      if (!seqs[b].done) still.push_back(b);
    }
    active.swap(still);
    first = false;
  }
  std::vector<Generation> out;
  out.reserve(n_seq);
  for (Sequence& s : seqs) {
    if (sinks.token_text && s.out.text.empty()) s.out.text = s.stream.text();
    out.push_back(std::move(s.out));
  }
  return out;
}

/// The text of one token for streaming: its bytes, or nothing for a special
/// token when special tokens are skipped.
template <class Tokenizer>
std::function<std::string(TokenId)> token_text_of(const Tokenizer& tok,
                                                  tokenize::SkipSpecial skip) {
  return [&tok, skip](TokenId id) -> std::string {
    if (skip == tokenize::SkipSpecial::kYes && tok.is_special(id)) return {};
    return tok.token(id);
  };
}

template <class Tokenizer>
std::vector<TokenId> eos_of(const Tokenizer& tok, const GenerateOptions& o) {
  if (o.eos_ids) return *o.eos_ids;
  if (const std::optional<TokenId> e = tok.eos_id()) return {*e};
  return {};
}

}  // namespace detail

// ---- Beam search ---------------------------------------------------------------------

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

namespace detail {

/// The ended hypotheses of a beam search (Hugging Face's BeamHypotheses):
/// the num_beams best by score = sum_logprobs / generated_len^length_penalty.
class BeamHypotheses {
 public:
  struct Hypothesis {
    double score;
    double sum_logprobs;
    std::vector<TokenId> ids;  // generated ids (with the EOS that ended it, if any)
  };
  BeamHypotheses(Index num_beams, double length_penalty, EarlyStopping early, Index max_new)
      : n_(static_cast<std::size_t>(num_beams)),
        lp_(length_penalty),
        early_(early),
        max_new_(max_new) {}

  [[nodiscard]] std::size_t size() const { return hyps_.size(); }
  void add(std::vector<TokenId> ids, double sum_logprobs, Index generated_len) {
    const double score = sum_logprobs / std::pow(static_cast<double>(generated_len), lp_);
    if (hyps_.size() < n_ || score > worst_) {
      hyps_.push_back({score, sum_logprobs, std::move(ids)});
      if (hyps_.size() > n_) {
        // Drop the worst (the first of equal ones, as a stable sort finds it).
        std::size_t w = 0;
        for (std::size_t i = 1; i < hyps_.size(); ++i)
          if (hyps_[i].score < hyps_[w].score) w = i;
        hyps_.erase(hyps_.begin() + static_cast<std::ptrdiff_t>(w));
        worst_ = hyps_[0].score;
        for (const Hypothesis& h : hyps_) worst_ = std::min(worst_, h.score);
      } else {
        worst_ = std::min(worst_, score);
      }
    }
  }
  /// Whether no running beam can improve the kept hypotheses, given the
  /// best running sum of log-probabilities after a step that made the
  /// generated length `generated_len`.
  [[nodiscard]] bool is_done(double best_sum_logprobs, Index generated_len) const {
    if (hyps_.size() < n_) return false;
    if (early_ == EarlyStopping::kFirst) return true;
    Index len = generated_len;
    if (early_ == EarlyStopping::kNever && lp_ > 0.0) len = max_new_;
    return worst_ >= best_sum_logprobs / std::pow(static_cast<double>(len), lp_);
  }
  /// The hypotheses, best first (equal scores: the earlier added first).
  [[nodiscard]] std::vector<Hypothesis> sorted() const {
    std::vector<Hypothesis> out = hyps_;
    std::stable_sort(out.begin(), out.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    return out;
  }

 private:
  std::size_t n_;
  double lp_;
  EarlyStopping early_;
  Index max_new_;
  std::vector<Hypothesis> hyps_;
  double worst_ = 1e9;
};

/// Beam search over one prompt; see beam_search_ids().
template <class Model>
std::vector<Generation> run_beam_search(const Model& lm, std::span<const TokenId> prompt,
                                        const GenerateOptions& o, const BeamSearchOptions& b,
                                        const std::vector<TokenId>& eos) {
  using T = LogitScalar<Model>;
  using Clock = std::chrono::steady_clock;
  using Cache = decltype(make_generation_cache(lm, o.cache_format));
  o.validate();
  b.validate();
  if (o.decoding != Decoding::kGreedy)
    throw std::invalid_argument(
        "kappa: beam search is deterministic: decoding must be kGreedy (beam sampling is not "
        "implemented)");
  if (o.sampling.repetition_penalty != 1.0 || !o.stop_strings.empty() || o.logprobs ||
      o.cache != KvCache::kUse)
    throw std::invalid_argument(
        "kappa: beam search takes no repetition penalty, stop strings, logprobs or kRecompute");
  const Index len = static_cast<Index>(prompt.size());
  if (len == 0)
    throw std::invalid_argument(
        "kappa: beam search: the prompt is empty (a model needs at least one token, e.g. BOS)");
  const Index limit = o.context_length > 0 ? o.context_length : lm.context_length();
  if (limit > 0 && len > limit)
    throw RangeError("kappa: beam search: the prompt has " + std::to_string(len) +
                     " tokens, more than the context length " + std::to_string(limit));
  // New tokens allowed: max_new_tokens, and what the context leaves.
  const Index max_new = limit > 0 ? std::min(o.max_new_tokens, limit - len) : o.max_new_tokens;
  const std::size_t n_beams = static_cast<std::size_t>(b.num_beams);
  const StopReason at_limit = limit > 0 && limit - len < o.max_new_tokens
                                  ? StopReason::kContextLength
                                  : StopReason::kMaxNewTokens;

  struct Beam {
    std::vector<TokenId> ids;  // generated so far
    double sum = 0.0;          // sum of their log-probabilities
    std::optional<Cache> cache;
  };
  BeamHypotheses hyps(b.num_beams, b.length_penalty, b.early_stopping, std::max<Index>(max_new, 1));
  std::vector<Beam> beams;
  GenerationTiming timing;
  timing.prefill_tokens = len;
  bool done = max_new == 0, scorer_done = false;
  if (!done) {
    auto t0 = Clock::now();  // the start of the step being timed
    Beam first;
    first.cache.emplace(make_generation_cache(lm, o.cache_format));
    RowMatrix<T> logits = lm.forward_cached(prompt, *first.cache, LogitsFor::kLast);  // (1, N_T)
    beams.push_back(std::move(first));
    const Index v = logits.cols();
    const std::size_t n_keep = std::max<std::size_t>(2, 1 + eos.size()) * n_beams;
    std::vector<double> lp;  // log softmax of every beam's row, beam-major
    Index step = 0;
    while (true) {
      // Candidates: (score = beam sum + log p, beam, token), the n_keep best.
      lp.resize(beams.size() * static_cast<std::size_t>(v));
      for (std::size_t k = 0; k < beams.size(); ++k) {
        const LogSoftmax<T> row(std::span<const T>(logits.row(static_cast<Index>(k)).data(),
                                                   static_cast<std::size_t>(v)));
        for (std::size_t j = 0; j < static_cast<std::size_t>(v); ++j)
          lp[k * static_cast<std::size_t>(v) + j] = row(j) + beams[k].sum;
      }
      std::vector<std::size_t> order(lp.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      const std::size_t n_cand = std::min(n_keep, order.size());
      // Best first; equal scores: lower (beam, token) index first.
      std::partial_sort(
          order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_cand), order.end(),
          [&](std::size_t a, std::size_t c) { return lp[a] > lp[c] || (lp[a] == lp[c] && a < c); });
      const Index generated = step + 1;  // the length the candidates would have
      std::vector<Beam> next;
      for (std::size_t r = 0; r < n_cand && next.size() < n_beams; ++r) {
        const std::size_t k = order[r] / static_cast<std::size_t>(v);
        const TokenId tok = static_cast<TokenId>(order[r] % static_cast<std::size_t>(v));
        const double score = lp[order[r]];
        if (score == -std::numeric_limits<double>::infinity()) break;
        if (std::find(eos.begin(), eos.end(), tok) != eos.end()) {
          if (r >= n_beams) continue;  // only an EOS among the B best ends a hypothesis
          std::vector<TokenId> ids = beams[k].ids;
          ids.push_back(tok);
          hyps.add(std::move(ids), score, generated);
          continue;
        }
        Beam nb;
        nb.ids = beams[k].ids;
        nb.ids.push_back(tok);
        nb.sum = score;
        nb.cache = beams[k].cache;  // a copy: the beam's own history
        next.push_back(std::move(nb));
      }
      scorer_done = hyps.is_done(lp[order[0]], generated);
      done = scorer_done || next.empty();
      ++step;
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (step == 1)
        timing.prefill_seconds = seconds;
      else
        timing.step_seconds.push_back(seconds);
      beams.swap(next);
      if (done || step >= max_new) break;
      // One batched step: each beam feeds its last token through its cache.
      t0 = Clock::now();
      std::vector<std::vector<TokenId>> batch;
      std::vector<Cache*> caches;
      for (Beam& bm : beams) {
        batch.push_back({bm.ids.back()});
        caches.push_back(&*bm.cache);
      }
      logits = lm.forward_cached(batch, caches, LogitsFor::kLast);  // (B, N_T)
    }
  }
  // The running beams join the ended hypotheses unless the kept hypotheses
  // were already known to be the best (Hugging Face's finalize).
  if (!scorer_done)
    for (Beam& bm : beams)
      if (!bm.ids.empty()) hyps.add(bm.ids, bm.sum, static_cast<Index>(bm.ids.size()));
  std::vector<Generation> out;
  for (auto& h : hyps.sorted()) {
    if (out.size() == static_cast<std::size_t>(b.num_return_sequences)) break;
    Generation g;
    g.stop = !h.ids.empty() && std::find(eos.begin(), eos.end(), h.ids.back()) != eos.end()
                 ? StopReason::kEos
                 : at_limit;
    g.ids = std::move(h.ids);
    g.sequence_score = h.score;
    g.timing = timing;
    out.push_back(std::move(g));
  }
  if (out.empty()) {  // max_new_tokens 0 (or no room in the context)
    Generation g;
    g.stop = at_limit;
    g.timing = timing;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace detail

/// Beam search (Hugging Face's generate(num_beams = B, do_sample = False)):
/// B running sequences; each step every beam's next-token log-probabilities
/// are added to its running sum, and of the best 2B (more with several EOS
/// ids) candidates over all beams the first B that are not EOS continue; an
/// EOS among the B best ends a hypothesis, scored
///   sum of log-probabilities / (generated length, EOS included)^length_penalty.
/// The search stops per b.early_stopping, at max_new_tokens or the context
/// length; then the running beams are scored as hypotheses too (unless the
/// kept ones were already known best), and the b.num_return_sequences best
/// are returned, best first, each with its sequence_score. Each beam keeps
/// its own cache (copied when a beam continues another), in
/// options.cache_format; the beams run as one batch per step. Uses
/// max_new_tokens, eos_ids, context_length and cache_format of `options`;
/// there is no beam sampling, repetition penalty, stop string or logprobs.
/// \throws std::invalid_argument for bad options, RangeError for a prompt
///         longer than the context length.
template <class Model>
std::vector<Generation> beam_search_ids(const Model& lm, std::span<const TokenId> prompt,
                                        const GenerateOptions& options,
                                        const BeamSearchOptions& beams) {
  return detail::run_beam_search(lm, prompt, options, beams,
                                 options.eos_ids.value_or(std::vector<TokenId>{}));
}

/// beam_search_ids with text: the tokenizer gives the EOS when
/// options.eos_ids is unset, and each result's text (its tokens' bytes
/// without the EOS that ended it; special tokens as options.skip_special).
template <class Model, class Tokenizer>
std::vector<Generation> beam_search(const Model& lm, const Tokenizer& tok,
                                    std::span<const TokenId> prompt, const GenerateOptions& options,
                                    const BeamSearchOptions& beams) {
  std::vector<Generation> out =
      detail::run_beam_search(lm, prompt, options, beams, detail::eos_of(tok, options));
  const auto text_of = detail::token_text_of(tok, options.skip_special);
  for (Generation& g : out) {
    const std::size_t n = g.stop == StopReason::kEos ? g.ids.size() - 1 : g.ids.size();
    for (std::size_t i = 0; i < n; ++i) g.text += text_of(g.ids[i]);
  }
  return out;
}

// ---- On token ids ---------------------------------------------------------------------

/// Generates a continuation of each prompt (token ids) in one batch: one
/// forward_cached call per step over the unfinished sequences (a finished
/// sequence is not passed anymore); sequence b draws from Rng(seed + b), so
/// its result equals generate_ids() of that prompt alone with that seed.
/// `on_token(b, id)` sees every new id (the EOS too) and may return false to
/// stop sequence b. No text: stop_strings must be empty.
/// \throws std::invalid_argument for bad options or an empty prompt,
///         RangeError for a prompt longer than the context length.
template <class Model>
std::vector<Generation> generate_ids(const Model& lm,
                                     const std::vector<std::vector<TokenId>>& prompts,
                                     const GenerateOptions& options,
                                     const BatchTokenCallback& on_token = {}) {
  detail::GenerationSinks sinks;
  sinks.on_token = on_token;
  return detail::run_generation(lm, prompts, options,
                                options.eos_ids.value_or(std::vector<TokenId>{}), sinks);
}

/// generate_ids for one prompt.
template <class Model>
Generation generate_ids(const Model& lm, std::span<const TokenId> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token = {}) {
  BatchTokenCallback cb;
  if (on_token) cb = [&on_token](std::size_t, TokenId id) { return on_token(id); };
  return std::move(generate_ids(
      lm, std::vector<std::vector<TokenId>>{{prompt.begin(), prompt.end()}}, options, cb)[0]);
}

// ---- On text --------------------------------------------------------------------------

/// Generates continuations of prompts already tokenized, with text: the
/// tokenizer gives each token's bytes (tok.token(id)), the EOS id when
/// options.eos_ids is unset (tok.eos_id()), and which tokens are special.
/// `on_text(b, piece)` receives sequence b's text as it becomes final (see the
/// file comment); returning false stops sequence b (StopReason::kCallback; its
/// held-back text is then in Generation::text but not passed on).
template <class Model, class Tokenizer>
std::vector<Generation> generate(const Model& lm, const Tokenizer& tok,
                                 const std::vector<std::vector<TokenId>>& prompts,
                                 const GenerateOptions& options,
                                 const BatchTextCallback& on_text = {}) {
  detail::GenerationSinks sinks;
  sinks.token_text = detail::token_text_of(tok, options.skip_special);
  sinks.on_text = on_text;
  return detail::run_generation(lm, prompts, options, detail::eos_of(tok, options), sinks);
}

/// Several text prompts in one batch (each encoded with tok.encode(prompt),
/// the tokenizer's BOS/EOS rule); sequence b equals generate() of prompt b
/// alone with seed + b.
template <class Model, class Tokenizer>
std::vector<Generation> generate(const Model& lm, const Tokenizer& tok,
                                 const std::vector<std::string>& prompts,
                                 const GenerateOptions& options,
                                 const BatchTextCallback& on_text = {}) {
  std::vector<std::vector<TokenId>> ids;
  ids.reserve(prompts.size());
  for (const std::string& p : prompts) ids.push_back(tok.encode(p));
  return generate(lm, tok, ids, options, on_text);
}

/// One tokenized prompt, with text.
template <class Model, class Tokenizer>
Generation generate(const Model& lm, const Tokenizer& tok, std::span<const TokenId> prompt,
                    const GenerateOptions& options, const TextCallback& on_text = {}) {
  BatchTextCallback cb;
  if (on_text) cb = [&on_text](std::size_t, std::string_view piece) { return on_text(piece); };
  return std::move(generate(
      lm, tok, std::vector<std::vector<TokenId>>{{prompt.begin(), prompt.end()}}, options, cb)[0]);
}

/// The common case: a text prompt (tok.encode(prompt)) continued by the model;
/// `on_text` receives each new piece of text as soon as it is final.
template <class Model, class Tokenizer>
Generation generate(const Model& lm, const Tokenizer& tok, std::string_view prompt,
                    const GenerateOptions& options, const TextCallback& on_text = {}) {
  const std::vector<TokenId> ids = tok.encode(prompt);
  return generate(lm, tok, std::span<const TokenId>(ids), options, on_text);
}

// ---- generation_config.json ---------------------------------------------------------------

namespace hf {

/// What kappa reads of a Hugging Face generation_config.json.
struct GenerationConfig {
  std::vector<TokenId> eos_ids;   ///< eos_token_id (an integer or a list); empty when absent
  std::optional<TokenId> bos_id;  ///< bos_token_id
  std::optional<TokenId> pad_id;  ///< pad_token_id

  /// Reads `path` (a model directory or the file). A directory without the
  /// file gives an empty config. \throws FormatError naming the file and key
  /// for malformed JSON or a value that is not a token id.
  static GenerationConfig read(const std::filesystem::path& path) {
    std::error_code ec;
    std::filesystem::path file = path;
    if (std::filesystem::is_directory(path, ec)) {
      file = path / "generation_config.json";
      if (!std::filesystem::exists(file, ec)) return {};
    }
    const Config c = Config::read(file);
    const Index max_id = std::numeric_limits<TokenId>::max();
    GenerationConfig g;
    if (c.has("eos_token_id")) {
      const nlohmann::json& v = c.json().at("eos_token_id");
      if (v.is_array()) {
        for (std::size_t i = 0; i < v.size(); ++i) {
          const nlohmann::json& x = v[i];
          if (!x.is_number_integer() || x.get<std::int64_t>() < 0 || x.get<std::int64_t>() > max_id)
            c.fail("eos_token_id", "entry " + std::to_string(i) +
                                       " must be a token id (an integer in [0, 2^31)), got " +
                                       x.dump());
          g.eos_ids.push_back(static_cast<TokenId>(x.get<std::int64_t>()));
        }
      } else {
        g.eos_ids.push_back(
            static_cast<TokenId>(c.integer("eos_token_id", std::nullopt, 0, max_id)));
      }
    }
    if (c.has("bos_token_id"))
      g.bos_id = static_cast<TokenId>(c.integer("bos_token_id", std::nullopt, 0, max_id));
    if (c.has("pad_token_id"))
      g.pad_id = static_cast<TokenId>(c.integer("pad_token_id", std::nullopt, 0, max_id));
    return g;
  }
};

/// GenerateOptions with the EOS ids of the directory's generation_config.json
/// (eos_token_id, an integer or a list); when it names none, eos_ids stays
/// unset and the text functions take the tokenizer's EOS.
inline GenerateOptions generation_options(const std::filesystem::path& dir) {
  GenerateOptions o;
  GenerationConfig g = GenerationConfig::read(dir);
  if (!g.eos_ids.empty()) o.eos_ids = std::move(g.eos_ids);
  return o;
}

}  // namespace hf

}  // namespace kappa
