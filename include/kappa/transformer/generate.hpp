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
#include "kappa/transformer/sampling.hpp"

namespace kappa {
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
