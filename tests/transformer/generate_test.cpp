// Tests for kappa/transformer/generate.hpp: logit processors against their
// definitions, the seeded draw's frequencies, greedy decoding against the
// independent PyTorch references of tests/data/models, stop conditions,
// streaming text (UTF-8 and stop-string holdback) and batches.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kappa/core/threading.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "kappa/transformer/generate.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

using testing::model_dir;
using testing::read_ids;
using tokenize::HfTokenizer;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

std::vector<TokenId> reference_prompt(const std::string& name) {
  return read_ids(model_dir(name) / "reference" / "input_ids.npy");
}
std::vector<TokenId> reference_greedy(const std::string& name) {
  return read_ids(model_dir(name) / "reference" / "greedy_ids.npy");
}

// Indices of the logits that are not removed (-inf).
template <class T>
std::vector<TokenId> kept(const std::vector<T>& l) {
  std::vector<TokenId> k;
  for (std::size_t i = 0; i < l.size(); ++i)
    if (l[i] != -std::numeric_limits<T>::infinity()) k.push_back(static_cast<TokenId>(i));
  return k;
}

std::vector<double> log_of(const std::vector<double>& p) {
  std::vector<double> l;
  for (double x : p) l.push_back(std::log(x));
  return l;
}

template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected std::invalid_argument mentioning " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---- Logit processors -------------------------------------------------------------

TEST(LogitProcessors, TemperatureDividesEveryLogit) {
  std::vector<double> l = {1.0, -2.0, 0.5, -kInf};
  Temperature{0.5}.apply(std::span<double>(l));
  EXPECT_EQ(l, (std::vector<double>{2.0, -4.0, 1.0, -kInf}));
  std::vector<float> f = {3.0f, -1.5f};
  Temperature{1.5}.apply(std::span<float>(f));
  EXPECT_FLOAT_EQ(f[0], 2.0f);
  EXPECT_FLOAT_EQ(f[1], -1.0f);
  expect_invalid([] { Temperature{0.0}; }, "got 0");
  expect_invalid([] { Temperature{-1.0}; }, "got -1");
  expect_invalid([] { Temperature{std::nan("")}; }, "got nan");
  expect_invalid([] { Temperature{kInf}; }, "got inf");
}

// HF/CTRL rule: l > 0 ? l / r : l * r, once per distinct id of the context.
TEST(LogitProcessors, RepetitionPenaltyPositiveAndNegative) {
  std::vector<double> l = {2.0, -2.0, 3.0, 0.0, 1.0};
  const std::vector<TokenId> context = {0, 1, 1, 3, 1, 99, -1};  // 99, -1: outside the row
  RepetitionPenalty{2.0}.apply(std::span<double>(l), std::span<const TokenId>(context));
  EXPECT_EQ(l, (std::vector<double>{1.0, -4.0, 3.0, 0.0, 1.0}));
  std::vector<double> m = {2.0, -2.0};
  const std::vector<TokenId> both = {0, 1};
  RepetitionPenalty{0.5}.apply(std::span<double>(m),
                               std::span<const TokenId>(both));  // r < 1 favours
  EXPECT_EQ(m, (std::vector<double>{4.0, -1.0}));
  expect_invalid([] { RepetitionPenalty{0.0}; }, "got 0");
  expect_invalid([] { RepetitionPenalty{-1.5}; }, "got -1.5");
}

// Issue 24 item 10: the parameters act in the type the logits have. A
// temperature float cannot hold (1e-45 rounds to a denormal, 1e-50 to 0)
// used to turn every positive logit into inf (then NaN in softmax: sampling
// at random); it must act greedy. A penalty of 1e-300 (0 in float) used to
// give inf and 0.
TEST(LogitProcessors, ExtremeParametersStayFiniteInFloat) {
  for (const double t : {1e-45, 1e-50, 1e-300}) {
    std::vector<float> f = {1.0f, 3.0f, 2.0f, -kInfF, 2.5f};
    Temperature{t}.apply(std::span<float>(f));
    EXPECT_EQ(f[1], 0.0f) << t;  // the best logit, shifted to 0
    EXPECT_EQ(f[3], -kInfF) << t;
    for (const std::size_t i : {0u, 2u, 4u}) {
      EXPECT_TRUE(std::isfinite(f[i])) << t;
      EXPECT_LE(f[i], -1e30f) << t;  // exp(f - 0) is 0: greedy in the limit
    }
    Rng rng(5);
    for (int k = 0; k < 100; ++k)
      EXPECT_EQ(sample_categorical(std::span<const float>(f), rng), 1) << t;
  }
  // Where l / t fits, the plain quotient (as PyTorch computes it in float).
  std::vector<float> g = {1.0f, -3.0f};
  Temperature{0.7}.apply(std::span<float>(g));
  EXPECT_EQ(g[0], 1.0f / 0.7f);
  EXPECT_EQ(g[1], -3.0f / 0.7f);

  std::vector<float> p = {2.0f, -2.0f, 1.0f};
  const std::vector<TokenId> ctx = {0, 1};
  RepetitionPenalty{1e-300}.apply(std::span<float>(p), std::span<const TokenId>(ctx));
  EXPECT_EQ(p[0], std::numeric_limits<float>::max());  // 2 / 1e-300, saturated
  EXPECT_EQ(p[1], -0.0f);                              // -2 * 1e-300
  EXPECT_EQ(p[2], 1.0f);
  std::vector<float> q = {2.0f, -2.0f};
  RepetitionPenalty{1.3}.apply(std::span<float>(q), std::span<const TokenId>(ctx));
  EXPECT_EQ(q[0], 2.0f / 1.3f);
  EXPECT_EQ(q[1], -2.0f * 1.3f);
}

// Exactly k stay; ties at the k-th value go to the smaller ids.
TEST(LogitProcessors, TopKKeepsExactlyK) {
  const std::vector<double> l0 = {1.0, 5.0, 3.0, 5.0, 2.0};
  std::vector<double> l = l0;
  TopK{2}.apply(std::span<double>(l));
  EXPECT_EQ(kept(l), (std::vector<TokenId>{1, 3}));
  EXPECT_EQ(l[1], 5.0);  // kept values are unchanged
  l = l0;
  TopK{3}.apply(std::span<double>(l));
  EXPECT_EQ(kept(l), (std::vector<TokenId>{1, 2, 3}));
  l = l0;
  TopK{1}.apply(std::span<double>(l));
  EXPECT_EQ(kept(l), (std::vector<TokenId>{1}));  // tie 5 = 5: the smaller id
  std::vector<double> ties = {4.0, 4.0, 4.0, 1.0, 4.0};
  TopK{2}.apply(std::span<double>(ties));
  EXPECT_EQ(kept(ties), (std::vector<TokenId>{0, 1}));
  l = l0;
  TopK{5}.apply(std::span<double>(l));
  EXPECT_EQ(l, l0);
  TopK{50}.apply(std::span<double>(l));
  EXPECT_EQ(l, l0);
  std::vector<double> with_nan = {std::nan(""), 1.0, 0.0};
  TopK{2}.apply(std::span<double>(with_nan));
  EXPECT_EQ(kept(with_nan), (std::vector<TokenId>{1, 2}));
  expect_invalid([] { TopK{0}; }, "got 0");
}

// The smallest set of most likely tokens whose probability reaches p.
TEST(LogitProcessors, TopPKeepsTheSmallestSetReachingP) {
  const std::vector<double> l0 = log_of({0.15, 0.5, 0.05, 0.3});
  const auto top_p = [&](double p) {
    std::vector<double> l = l0;
    TopP{p}.apply(std::span<double>(l));
    return kept(l);
  };
  EXPECT_EQ(top_p(0.4), (std::vector<TokenId>{1}));
  EXPECT_EQ(top_p(0.7), (std::vector<TokenId>{1, 3}));
  EXPECT_EQ(top_p(0.85), (std::vector<TokenId>{0, 1, 3}));
  EXPECT_EQ(top_p(0.97), (std::vector<TokenId>{0, 1, 2, 3}));
  EXPECT_EQ(top_p(0.0), (std::vector<TokenId>{1}));  // always at least one
  EXPECT_EQ(top_p(1.0), (std::vector<TokenId>{0, 1, 2, 3}));
  expect_invalid([] { TopP{1.5}; }, "got 1.5");
  expect_invalid([] { TopP{-0.25}; }, "got -0.25");

  // Property on random rows: the kept set is the m most likely tokens with m
  // the least count whose probabilities sum to >= p.
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> l(37);
    for (double& x : l) x = 6.0 * rng.uniform() - 3.0;
    const double p = rng.uniform();
    std::vector<double> prob(l.size());
    double z = 0;
    for (std::size_t i = 0; i < l.size(); ++i) z += prob[i] = std::exp(l[i]);
    for (double& x : prob) x /= z;
    std::vector<double> sorted = prob;
    std::sort(sorted.rbegin(), sorted.rend());
    std::size_t m = 0;
    double cum = 0;
    while (m < sorted.size() && cum < p) cum += sorted[m++];
    m = std::max<std::size_t>(m, 1);
    TopP{p}.apply(std::span<double>(l));
    const std::vector<TokenId> k = kept(l);
    ASSERT_EQ(k.size(), m) << "p = " << p;
    for (TokenId i : k) EXPECT_GE(prob[static_cast<std::size_t>(i)], sorted[m - 1]);
  }
}

// Large vocabularies: the selection that grows until it reaches p keeps
// exactly the set a full sort keeps (a plain reference here), for peaked and
// flat rows and p up to 1 - 1e-9, ties included.
TEST(LogitProcessors, TopPOnALargeVocabularyEqualsAFullSort) {
  Rng rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    const std::size_t n = trial % 3 == 0 ? 5000 : 50000;
    std::vector<double> l(n);
    const double spread = trial % 2 == 0 ? 20.0 : 0.5;  // peaked or nearly flat
    for (double& x : l) x = spread * rng.uniform();
    if (trial % 4 == 1)
      for (std::size_t i = 0; i < n; i += 7) l[i] = l[0];  // many ties
    const double p = trial % 5 == 0 ? 1 - 1e-9 : rng.uniform();
    // Reference: sort every token by probability (ties by id), sum in order.
    std::vector<TokenId> order(n);
    std::iota(order.begin(), order.end(), TokenId{0});
    const double m = *std::max_element(l.begin(), l.end());
    std::vector<double> w(n);
    double z = 0;
    for (std::size_t i = 0; i < n; ++i) z += w[i] = std::exp(l[i] - m);
    std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
      return w[static_cast<std::size_t>(a)] > w[static_cast<std::size_t>(b)];
    });
    double cum = 0;
    std::size_t keep = 0;
    while (keep < n) {
      cum += w[static_cast<std::size_t>(order[keep++])];
      if (cum >= p * z) break;
    }
    std::vector<TokenId> want(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
    std::sort(want.begin(), want.end());
    TopP{p}.apply(std::span<double>(l));
    ASSERT_EQ(kept(l), want) << "trial " << trial << ", n = " << n << ", p = " << p;
  }
}

TEST(LogitProcessors, MinPKeepsTokensWithinAFactorOfTheBest) {
  const std::vector<double> l0 = log_of({0.5, 0.3, 0.15, 0.05});
  const auto min_p = [&](double p) {
    std::vector<double> l = l0;
    MinP{p}.apply(std::span<double>(l));
    return kept(l);
  };
  EXPECT_EQ(min_p(0.35), (std::vector<TokenId>{0, 1}));        // p_i >= 0.175
  EXPECT_EQ(min_p(0.12), (std::vector<TokenId>{0, 1, 2}));     // p_i >= 0.06
  EXPECT_EQ(min_p(0.05), (std::vector<TokenId>{0, 1, 2, 3}));  // p_i >= 0.025
  EXPECT_EQ(min_p(1.0), (std::vector<TokenId>{0}));
  expect_invalid([] { MinP{2.0}; }, "got 2");
}

// Hugging Face's order: temperature before top-p. With t = 2 the
// distribution (0.5, 0.3, 0.15, 0.05) flattens to about (0.38, 0.29, 0.21,
// 0.12), so top-p 0.7 keeps three tokens (two without the temperature).
TEST(LogitProcessors, SamplingParamsApplyInHuggingFaceOrder) {
  const std::vector<double> l0 = log_of({0.5, 0.3, 0.15, 0.05});
  std::vector<double> l = l0;
  SamplingParams{.temperature = 2.0, .top_p = 0.7}.apply(std::span<double>(l), {});
  EXPECT_EQ(kept(l), (std::vector<TokenId>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(l[0], l0[0] / 2.0);
  l = l0;
  TopP{0.7}.apply(std::span<double>(l));
  EXPECT_EQ(kept(l), (std::vector<TokenId>{0, 1}));

  // The whole chain equals the processors applied one by one.
  std::vector<double> a = {2.0, -1.0, 0.5, 3.0, -0.25, 1.5};
  std::vector<double> b = a;
  const std::vector<TokenId> ctx = {0, 1, 3};
  SamplingParams{
      .repetition_penalty = 1.3, .temperature = 0.7, .top_k = 4, .top_p = 0.9, .min_p = 0.05}
      .apply(std::span<double>(a), std::span<const TokenId>(ctx));
  ProcessorChain chain{RepetitionPenalty{1.3}, Temperature{0.7}, TopK{4}, TopP{0.9}, MinP{0.05}};
  chain.apply(std::span<double>(b), std::span<const TokenId>(ctx));
  EXPECT_EQ(a, b);
  expect_invalid([] { SamplingParams{.top_k = -2}.validate(); }, "got -2");
  expect_invalid([] { SamplingParams{.temperature = 0.0}.validate(); }, "got 0");
}

// ---- The draw ---------------------------------------------------------------------

// Chi-square goodness of fit with a fixed seed: the statistic must stay below
// the 0.999 quantile (3 degrees of freedom: 16.27; 1: 10.83).
TEST(Sampling, FrequenciesMatchTheProbabilities) {
  const std::vector<double> p = {0.5, 0.25, 0.15, 0.1};
  const std::vector<double> l = log_of(p);
  const int n = 200000;
  std::vector<int> count(p.size(), 0);
  Rng rng(123);
  for (int i = 0; i < n; ++i)
    ++count[static_cast<std::size_t>(sample_categorical(std::span<const double>(l), rng))];
  double chi2 = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double e = n * p[i];
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);

  // Through top-k 2: (2/3, 1/3), the others never.
  std::vector<double> lk = l;
  TopK{2}.apply(std::span<double>(lk));
  std::vector<int> ck(p.size(), 0);
  for (int i = 0; i < n; ++i)
    ++ck[static_cast<std::size_t>(sample_categorical(std::span<const double>(lk), rng))];
  EXPECT_EQ(ck[2] + ck[3], 0);
  const double e0 = n * 2.0 / 3.0, e1 = n / 3.0;
  EXPECT_LT((ck[0] - e0) * (ck[0] - e0) / e0 + (ck[1] - e1) * (ck[1] - e1) / e1, 10.83);

  // The same seed gives the same draws; one uniform per draw.
  Rng a(9), b(9);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(), b.next());
  const double u = Rng(3).uniform();
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

TEST(Sampling, ArgmaxAndNonFiniteRows) {
  const std::vector<double> l = {1.0, 3.0, std::nan(""), 3.0};
  EXPECT_EQ(argmax(std::span<const double>(l)), 1);
  const std::vector<double> dead = {-kInf, std::nan("")};
  EXPECT_THROW((void)argmax(std::span<const double>(dead)), std::domain_error);
  Rng rng(1);
  EXPECT_THROW((void)sample_categorical(std::span<const double>(dead), rng), std::domain_error);
  const std::vector<double> one = {-kInf, 0.0, -kInf};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_categorical(std::span<const double>(one), rng), 1);
}

// ---- Streaming text ----------------------------------------------------------------

// The byte offsets where characters of s start (decode_utf8's walk), and its end.
std::set<std::size_t> char_boundaries(const std::string& s) {
  std::set<std::size_t> b = {0};
  for (std::size_t i = 0; i < s.size();) {
    i += tokenize::decode_utf8(s, i).length;
    b.insert(i);
  }
  return b;
}

// Pieces joined equal the text, and every piece ends on a character boundary.
void expect_well_cut(const std::vector<std::string>& pieces, const std::string& text) {
  std::string joined;
  const std::set<std::size_t> bounds = char_boundaries(text);
  for (const std::string& p : pieces) {
    joined += p;
    EXPECT_TRUE(bounds.count(joined.size()))
        << "a piece ends inside a character at byte " << joined.size();
  }
  EXPECT_EQ(joined, text);
}

TEST(TextStream, NeverSplitsACharacter) {
  const std::string text =
      "a\xC3\xA9 \xF0\x9F\x99\x82 \xE4\xB8\x96\xE7\x95\x8C b";  // "aé 🙂 世界 b"
  // One byte per token, and every cut into two tokens.
  {
    TextStream ts;
    std::vector<std::string> pieces;
    for (char c : text) {
      const std::string p = ts.push(std::string(1, c));
      if (!p.empty()) pieces.push_back(p);
    }
    pieces.push_back(ts.finish());
    for (const std::string& p : pieces) EXPECT_TRUE(tokenize::is_valid_utf8(p)) << p;
    expect_well_cut(pieces, text);
    EXPECT_GE(pieces.size(), 8u);
  }
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    TextStream ts;
    std::vector<std::string> pieces = {ts.push(text.substr(0, cut)), ts.push(text.substr(cut)),
                                       ts.finish()};
    for (const std::string& p : pieces) EXPECT_TRUE(tokenize::is_valid_utf8(p)) << cut;
    expect_well_cut(pieces, text);
  }
}

TEST(TextStream, IllFormedBytesPassAndTheTailIsFlushedAsItIs) {
  TextStream ts;
  EXPECT_EQ(ts.push("x\xF0\x9F"), "x");    // held: may become an emoji
  EXPECT_EQ(ts.push("\x98"), "");          // still 3 of 4 bytes
  EXPECT_EQ(ts.finish(), "\xF0\x9F\x98");  // flushed as it is
  TextStream t2;
  EXPECT_EQ(t2.push("a\x80"), "a\x80");        // a lone continuation byte is ill-formed: passed on
  EXPECT_EQ(t2.push("\xE0\x80"), "\xE0\x80");  // E0 80 can never be well-formed
  EXPECT_EQ(t2.push("\xC3"), "");
  EXPECT_EQ(t2.push("z"), "\xC3z");  // C3 then z: C3 is ill-formed
  EXPECT_EQ(TextStream::incomplete_tail("ab\xE2\x82"), 2u);
  EXPECT_EQ(TextStream::incomplete_tail("ab\xE2\x82\xAC"), 0u);
  EXPECT_EQ(TextStream::incomplete_tail("\xED\xA0"), 0u);  // a surrogate's start
  EXPECT_EQ(TextStream::incomplete_tail("\xF4\x90"), 0u);  // beyond U+10FFFF
  EXPECT_EQ(TextStream::incomplete_tail("\xF4\x8F"), 2u);
}

// Byte-level BPE tokens of the reference tokenizer split emoji and CJK
// characters (its 40 merges are English): streamed token by token, no piece
// holds part of a character and the pieces join to decode(ids).
TEST(TextStream, ByteLevelTokensOfTheReferenceTokenizer) {
  const HfTokenizer tok = HfTokenizer::from_directory(model_dir("gpt2").string());
  const std::string text =
      "emoji \xF0\x9F\x99\x82\xF0\x9F\x9A\x80 and \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
      "caf\xC3\xA9";
  const std::vector<TokenId> ids = tok.encode(text, tokenize::AddSpecial::kNo);
  ASSERT_EQ(tok.decode(ids), text);
  bool split_inside = false;
  for (TokenId id : ids) split_inside |= !tokenize::is_valid_utf8(tok.token(id));
  ASSERT_TRUE(split_inside) << "the test needs tokens that end inside a character";
  TextStream ts;
  std::vector<std::string> pieces;
  for (TokenId id : ids)
    if (std::string p = ts.push(tok.token(id)); !p.empty()) pieces.push_back(p);
  if (std::string p = ts.finish(); !p.empty()) pieces.push_back(p);
  for (const std::string& p : pieces) EXPECT_TRUE(tokenize::is_valid_utf8(p));
  expect_well_cut(pieces, text);
}

TEST(TextStream, StopStringsAcrossTokenBoundaries) {
  TextStream ts({"lo wo"});
  EXPECT_EQ(ts.push("Hel"), "He");  // "l" may begin "lo wo"
  EXPECT_EQ(ts.push("lo"), "l");    // "lo" may
  EXPECT_EQ(ts.push(" w"), "");     // "lo w" may
  EXPECT_EQ(ts.push("orld"), "");   // "lo wo" found: the text ends before it
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.text(), "Hel");
  EXPECT_EQ(ts.push("more"), "");
  EXPECT_EQ(ts.finish(), "");

  TextStream f({"abc"});  // a false start is released
  EXPECT_EQ(f.push("xab"), "x");
  EXPECT_EQ(f.push("d"), "abd");
  EXPECT_FALSE(f.stopped());

  TextStream two({"cd", "bc"});  // the earliest occurrence wins
  EXPECT_EQ(two.push("ab"), "a");
  EXPECT_EQ(two.push("cdx"), "");
  EXPECT_EQ(two.text(), "a");
  EXPECT_THROW(TextStream({""}), std::invalid_argument);

  TextStream end({"\n\n"});  // held text that never became a stop string is flushed
  EXPECT_EQ(end.push("a\n"), "a");
  EXPECT_EQ(end.finish(), "\n");
  EXPECT_EQ(end.text(), "a\n");
}

// ---- Generation with the reference models ------------------------------------------------

const std::vector<std::string> kGenerateModels = {
    "gpt2",          "gpt2-f16",     "gpt2-prefixed",      "llama",         "llama-bf16",
    "llama-sharded", "llama-linear", "llama-dynamic",      "llama3-scaled", "mistral",
    "qwen2",         "deepseek_v2",  "deepseek_v2-noqlora"};

GenerateOptions greedy(Index n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.eos_ids = std::vector<TokenId>{};  // llama-linear's reference continues past its EOS
  return o;
}

template <class T>
class GenerateGreedy : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GenerateGreedy, Scalars);

// With the cache and with forward() over the growing sequence, greedy ids
// equal the reference's uncached PyTorch loop on every tiny causal model.
TYPED_TEST(GenerateGreedy, MatchesTheReferenceOnEveryModel) {
  using T = TypeParam;
  for (const std::string& name : kGenerateModels) {
    SCOPED_TRACE(name);
    const hf::CausalLM<T> lm = hf::load_causal_lm<T>(model_dir(name));
    const std::vector<TokenId> prompt = reference_prompt(name), expected = reference_greedy(name);
    GenerateOptions o = greedy(static_cast<Index>(expected.size()));
    if (name == "llama-dynamic")
      o.context_length = 64;  // the 12-token prompt exceeds its 8 positions
    for (const KvCache mode : {KvCache::kUse, KvCache::kRecompute}) {
      o.cache = mode;
      const Generation g = generate_ids(lm, prompt, o);
      EXPECT_EQ(g.ids, expected) << (mode == KvCache::kUse ? "cached" : "recomputed");
      EXPECT_EQ(g.stop, StopReason::kMaxNewTokens);
      EXPECT_EQ(g.timing.prefill_tokens, static_cast<Index>(prompt.size()));
      EXPECT_EQ(g.timing.decode_tokens(), static_cast<Index>(expected.size()) - 1);
      EXPECT_GE(g.timing.decode_tokens_per_second(), 0.0);
    }
  }
}

GenerateOptions sampled(std::uint64_t seed, Index n) {
  GenerateOptions o = greedy(n);
  o.decoding = Decoding::kSample;
  o.seed = seed;
  o.sampling = {
      .repetition_penalty = 1.1, .temperature = 1.3, .top_k = 200, .top_p = 0.95, .min_p = 0.01};
  return o;
}

TEST(GenerateSampling, SeededAndReproducible) {
  const hf::CausalLM<double> lm = hf::load_causal_lm<double>(model_dir("llama"));
  const std::vector<TokenId> prompt = reference_prompt("llama");
  const Generation a = generate_ids(lm, prompt, sampled(7, 24));
  const Generation b = generate_ids(lm, prompt, sampled(7, 24));
  const Generation c = generate_ids(lm, prompt, sampled(8, 24));
  ASSERT_EQ(a.ids.size(), 24u);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NE(a.ids, c.ids);
  GenerateOptions re = sampled(7, 24);
  re.cache = KvCache::kRecompute;
  EXPECT_EQ(generate_ids(lm, prompt, re).ids, a.ids);
#ifdef _OPENMP
  const int before = num_threads();
  set_num_threads(1);
  const Generation one = generate_ids(lm, prompt, sampled(7, 24));
  set_num_threads(2);
  const Generation two = generate_ids(lm, prompt, sampled(7, 24));
  set_num_threads(before);
  EXPECT_EQ(one.ids, two.ids);
  EXPECT_EQ(one.ids, a.ids);
#endif
}

TEST(GenerateStops, MaxNewTokensAndContextLength) {
  const hf::CausalLM<double> lm = hf::load_causal_lm<double>(model_dir("gpt2"));
  const std::vector<TokenId> prompt = reference_prompt("gpt2"), ref = reference_greedy("gpt2");
  const Generation three = generate_ids(lm, prompt, greedy(3));
  EXPECT_EQ(three.ids, std::vector<TokenId>(ref.begin(), ref.begin() + 3));
  EXPECT_EQ(three.stop, StopReason::kMaxNewTokens);
  EXPECT_TRUE(generate_ids(lm, prompt, greedy(0)).ids.empty());

  // n_positions 32: a 30-token prompt gets 2 new tokens, then stops (no RangeError).
  std::vector<TokenId> long_prompt;
  while (long_prompt.size() < 30) long_prompt.push_back(prompt[long_prompt.size() % prompt.size()]);
  for (const KvCache mode : {KvCache::kUse, KvCache::kRecompute}) {
    GenerateOptions o = greedy(10);
    o.cache = mode;
    const Generation g = generate_ids(lm, long_prompt, o);
    EXPECT_EQ(g.ids.size(), 2u);
    EXPECT_EQ(g.stop, StopReason::kContextLength);
  }
  long_prompt.resize(32, 5);
  const Generation full = generate_ids(lm, long_prompt, greedy(10));
  EXPECT_TRUE(full.ids.empty());
  EXPECT_EQ(full.stop, StopReason::kContextLength);
  long_prompt.push_back(5);
  EXPECT_THROW((void)generate_ids(lm, long_prompt, greedy(10)), RangeError);
  EXPECT_THROW((void)generate_ids(lm, std::vector<TokenId>{}, greedy(10)), std::invalid_argument);
  GenerateOptions bad = greedy(-1);
  expect_invalid([&] { (void)generate_ids(lm, prompt, bad); }, "got -1");
  GenerateOptions stops = greedy(4);
  stops.stop_strings = {"x"};
  expect_invalid([&] { (void)generate_ids(lm, prompt, stops); }, "tokenizer");
}

// llama-linear's greedy continuation reaches its EOS (297) at the 4th token.
TEST(GenerateStops, EosFromGenerationConfigOrTokenizer) {
  const std::filesystem::path dir = model_dir("llama-linear");
  const hf::CausalLM<double> lm = hf::load_causal_lm<double>(dir);
  const HfTokenizer tok = HfTokenizer::from_directory(dir.string());
  const std::vector<TokenId> prompt = reference_prompt("llama-linear"),
                             ref = reference_greedy("llama-linear");
  ASSERT_EQ(ref[3], 297);
  GenerateOptions o = hf::generation_options(dir);
  ASSERT_TRUE(o.eos_ids.has_value());
  EXPECT_EQ(*o.eos_ids, std::vector<TokenId>{297});
  o.max_new_tokens = 20;
  std::string streamed;
  const Generation g =
      generate(lm, tok, std::span<const TokenId>(prompt), o, [&](std::string_view p) {
        streamed += p;
        return true;
      });
  EXPECT_EQ(g.ids, std::vector<TokenId>(ref.begin(), ref.begin() + 4));
  EXPECT_EQ(g.stop, StopReason::kEos);
  const std::vector<TokenId> before_eos(ref.begin(), ref.begin() + 3);
  EXPECT_EQ(g.text, tok.decode(before_eos));
  EXPECT_EQ(streamed, g.text);
  // Without eos_ids the tokenizer's EOS is used.
  ASSERT_EQ(tok.eos_id(), std::optional<TokenId>(297));
  GenerateOptions plain;
  plain.max_new_tokens = 20;
  EXPECT_EQ(generate(lm, tok, std::span<const TokenId>(prompt), plain).ids, g.ids);
}

TEST(GenerateStops, GenerationConfigFile) {
  const hf::GenerationConfig llama = hf::GenerationConfig::read(model_dir("llama"));
  EXPECT_EQ(llama.eos_ids, std::vector<TokenId>{297});
  EXPECT_EQ(llama.bos_id, std::optional<TokenId>(296));
  EXPECT_FALSE(hf::GenerationConfig::read(model_dir("qwen2")).bos_id.has_value());
  EXPECT_TRUE(hf::GenerationConfig::read(model_dir("bert")).eos_ids.empty());  // no file
  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / "kappa_h7_generation_config.json";
  const auto write = [&](const std::string& json) { std::ofstream(tmp) << json; };
  write(R"({"eos_token_id": [5, 7], "pad_token_id": 0})");
  const hf::GenerationConfig list = hf::GenerationConfig::read(tmp);
  EXPECT_EQ(list.eos_ids, (std::vector<TokenId>{5, 7}));
  EXPECT_EQ(list.pad_id, std::optional<TokenId>(0));
  for (const std::string& bad :
       {std::string(R"({"eos_token_id": "x"})"), std::string(R"({"eos_token_id": [1, -2]})"),
        std::string(R"({"eos_token_id": [1,)")}) {
    write(bad);
    try {
      (void)hf::GenerationConfig::read(tmp);
      ADD_FAILURE() << "expected FormatError for " << bad;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("generation_config"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(tmp);
}

// A stop string that spans two generated tokens ends the text before it; the
// ids stop at the token that completed it; the stream never showed it.
TEST(GenerateStops, StopStringAcrossTokens) {
  const std::filesystem::path dir = model_dir("llama");
  const hf::CausalLM<double> lm = hf::load_causal_lm<double>(dir);
  const HfTokenizer tok = HfTokenizer::from_directory(dir.string());
  const std::vector<TokenId> prompt = reference_prompt("llama");
  const Generation free = generate(lm, tok, std::span<const TokenId>(prompt), greedy(6));
  ASSERT_EQ(free.ids, reference_greedy("llama"));
  ASSERT_EQ(free.text, tok.decode(free.ids));
  const std::string t0 = tok.token(free.ids[0]), t1 = tok.token(free.ids[1]),
                    t2 = tok.token(free.ids[2]);
  ASSERT_FALSE(t1.empty());
  ASSERT_FALSE(t2.empty());
  const std::string stop = t1.substr(t1.size() - 1) + t2.substr(0, 1);
  const std::size_t at = free.text.find(stop);
  ASSERT_NE(at, std::string::npos);
  // The number of tokens whose text first contains the stop string.
  std::size_t n = 0;
  std::string so_far;
  while (so_far.find(stop) == std::string::npos) so_far += tok.token(free.ids[n++]);
  GenerateOptions o = greedy(6);
  o.stop_strings = {stop};
  std::vector<std::string> pieces;
  const Generation g =
      generate(lm, tok, std::span<const TokenId>(prompt), o, [&](std::string_view p) {
        pieces.emplace_back(p);
        return true;
      });
  EXPECT_EQ(g.stop, StopReason::kStopString);
  EXPECT_EQ(g.text, free.text.substr(0, at));
  EXPECT_EQ(g.ids, std::vector<TokenId>(free.ids.begin(),
                                        free.ids.begin() + static_cast<std::ptrdiff_t>(n)));
  std::string joined;
  for (const std::string& p : pieces) joined += p;
  EXPECT_EQ(joined, g.text);

  // The callback can stop generation.
  int calls = 0;
  const Generation cut =
      generate(lm, tok, std::span<const TokenId>(prompt), greedy(6), [&](std::string_view) {
        ++calls;
        return false;
      });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cut.stop, StopReason::kCallback);
  EXPECT_LT(cut.ids.size(), 6u);
}

// Sampled text streamed from a model: random byte-level tokens, often inside
// multi-byte characters or ill-formed; the pieces join to the decoded text
// and none ends inside a character.
TEST(GenerateStreaming, PiecesJoinToTheText) {
  const std::filesystem::path dir = model_dir("gpt2");
  const hf::CausalLM<double> lm = hf::load_causal_lm<double>(dir);
  const HfTokenizer tok = HfTokenizer::from_directory(dir.string());
  GenerateOptions o = sampled(11, 25);
  o.sampling = {.temperature = 3.0};  // flat: many single-byte tokens
  std::vector<std::string> pieces;
  const Generation g = generate(lm, tok, "caf\xC3\xA9 ", o, [&](std::string_view p) {
    EXPECT_FALSE(p.empty());
    pieces.emplace_back(p);
    return true;
  });
  EXPECT_EQ(g.ids.size(), 25u);
  bool split_inside = false;
  for (TokenId id : g.ids) split_inside |= !tokenize::is_valid_utf8(tok.token(id));
  EXPECT_TRUE(split_inside) << "no generated token ends inside a character";
  EXPECT_EQ(g.text, tok.decode(g.ids, tokenize::SkipSpecial::kYes));
  expect_well_cut(pieces, g.text);
}

// Several prompts of different lengths in one batch equal each alone
// (greedy and sampled with seed + b), with sequences leaving the batch at
// different steps (context length, callback).
TEST(GenerateBatch, EqualsEachPromptAlone) {
  for (const std::string name : {"gpt2", "llama", "mistral", "deepseek_v2"}) {
    SCOPED_TRACE(name);
    const hf::CausalLM<double> lm = hf::load_causal_lm<double>(model_dir(name));
    const std::vector<TokenId> ids = reference_prompt(name);
    std::vector<TokenId> longest;
    while (longest.size() < 28) longest.push_back(ids[longest.size() % ids.size()]);
    const std::vector<std::vector<TokenId>> prompts = {
        longest, std::vector<TokenId>(ids.begin(), ids.begin() + 5), ids, {ids[3]}};
    for (const Decoding d : {Decoding::kGreedy, Decoding::kSample}) {
      GenerateOptions o = d == Decoding::kGreedy ? greedy(8) : sampled(21, 8);
      if (name != "gpt2") o.context_length = 32;  // prompt 0 leaves at 32 tokens everywhere
      const auto stop_seq3 = [](std::size_t b, std::size_t n) { return !(b == 3 && n >= 3); };
      std::vector<std::size_t> counts(prompts.size(), 0);
      const std::vector<Generation> batch = generate_ids(
          lm, prompts, o, [&](std::size_t b, TokenId) { return stop_seq3(b, ++counts[b]); });
      ASSERT_EQ(batch.size(), prompts.size());
      EXPECT_EQ(batch[0].stop, StopReason::kContextLength);
      EXPECT_EQ(batch[0].ids.size(), 4u);
      EXPECT_EQ(batch[1].stop, StopReason::kMaxNewTokens);
      EXPECT_EQ(batch[3].stop, StopReason::kCallback);
      EXPECT_EQ(batch[3].ids.size(), 3u);
      for (std::size_t b = 0; b < prompts.size(); ++b) {
        GenerateOptions alone = o;
        alone.seed = o.seed + b;
        std::size_t n = 0;
        const Generation g =
            generate_ids(lm, prompts[b], alone, [&](TokenId) { return stop_seq3(b, ++n); });
        EXPECT_EQ(batch[b].ids, g.ids) << "sequence " << b;
        EXPECT_EQ(batch[b].stop, g.stop) << "sequence " << b;
      }
    }
  }
}

// Text prompts in one batch equal generate() of each prompt alone, text too.
TEST(GenerateBatch, TextPromptsEqualEachAlone) {
  const std::filesystem::path dir = model_dir("mistral");
  const hf::CausalLM<double> lm = hf::load_causal_lm<double>(dir);
  const HfTokenizer tok = HfTokenizer::from_directory(dir.string());
  const std::vector<std::string> prompts = {"Hello world", "caf\xC3\xA9",
                                            "The quick brown fox jumps"};
  GenerateOptions o = sampled(3, 10);
  std::vector<std::string> streamed(prompts.size());
  const std::vector<Generation> batch =
      generate(lm, tok, prompts, o, [&](std::size_t b, std::string_view p) {
        streamed[b] += p;
        return true;
      });
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    GenerateOptions alone = o;
    alone.seed = o.seed + b;
    const Generation g = generate(lm, tok, prompts[b], alone);
    EXPECT_EQ(batch[b].ids, g.ids);
    EXPECT_EQ(batch[b].text, g.text);
    EXPECT_EQ(streamed[b], g.text);
  }
}

// Phi-3's LongRoPE: a short prompt (below the original context of 8)
// generating past it must give what a pass over the whole sequence gives at
// every step, as Hugging Face's Phi-3 does by recomputing its cache once at
// the crossing (with keys left rotated by the short factors it would not).
TEST(GenerateLongRope, CachedGenerationCrossingTheOriginalContextEqualsRecomputing) {
  const auto lm = hf::load_causal_lm<double>(testing::model_dir("phi3-longrope"));
  ASSERT_EQ(lm.cache_refresh_length(), 8);
  const std::vector<TokenId> prompt = {5, 17, 42, 9, 100};
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.eos_ids = std::vector<TokenId>{};  // never stop at an id
  // Sampling at a high temperature, not greedy: a draw sees any change of
  // the logits, where the argmax of this tiny model does not (it repeats one
  // token). Without the refresh the ids part from the 7th on.
  o.decoding = Decoding::kSample;
  o.sampling.temperature = 4.0;
  o.seed = 3;
  o.cache = KvCache::kUse;
  const Generation cached = generate_ids(lm, std::span<const TokenId>(prompt), o);
  o.cache = KvCache::kRecompute;
  const Generation full = generate_ids(lm, std::span<const TokenId>(prompt), o);
  EXPECT_EQ(cached.ids, full.ids);
  EXPECT_EQ(cached.ids.size(), 12u);
}

}  // namespace
}  // namespace kappa
