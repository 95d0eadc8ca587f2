// benchmarks/bench_moe.cpp - mixture-of-experts models in float, random
// weights, built in memory: decode and prefill tokens/s on 1 and 2 threads,
// each beside its ceiling in the same binary.
//
// Two shapes, each with few layers so that it fits in memory and builds in
// seconds (the per-layer figures are those of the full model):
//   Mixtral   LlamaMoe: d 4096, 32 heads, 8 kv heads x 128, 8 experts of
//             width 14336, top-2 (renormalised), vocab 32000, untied head;
//             1 layer (its experts alone are 5.6 GB in float).
//   V2Lite    DeepSeekMoe (DeepSeek-V2-Lite): d 2048, latent attention (16
//             heads, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128,
//             no q_lora), layer 0 dense (width 10944), then 64 routed
//             experts of width 1408, top-6 (softmax, as scored), 2 shared
//             experts (one MLP of width 2816), vocab 102400, untied head;
//             3 layers (1 dense + 2 expert layers).
// These full shapes run with KAPPA_BENCH_LARGE=1 in the environment (about
// 9 GB at the largest moment); by default (and in CI's smoke run) the same
// structure runs at small widths.
//
// Decode: one token after a 128-token prompt (the cache rolled back after each
// step); the token changes from step to step (from a fixed random list), so
// the router picks different experts, as in real decoding. GB/s counts the
// ACTIVE weight bytes a step reads (DecoderLM::decode_bytes(): attention,
// router, the k chosen experts, the shared expert, the head). Ceiling:
// BM_Ceiling_Read_*, a plain read (Eigen sum) of the same number of bytes.
// BM_MoeLayer_Decode_* runs one expert layer's feed-forward alone on one row
// (its decode_bytes() per step), beside BM_Ceiling_ReadLayer_*.
//
// Prefill: a 128-token prompt, logits of the last row; tokens/s beside a
// dense model of the same active parameters per token (the same attention
// and a dense SwiGLU of width k x d_expert (+ the shared width)):
// BM_Dense_Prefill_*. GFLOP/s count 2 x active parameters x tokens.
//
// The prefill and decode loops, their counters and the random weights and
// token lists are those of bench_models_common.hpp.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_models_common.hpp"

namespace {

using kappa::Index;
using kappa::RowMatrix;
using kappa::RowVector;
using kappa_bench::fill;

const bool kLarge = [] {
  const char* e = std::getenv("KAPPA_BENCH_LARGE");
  return e != nullptr && e[0] == '1';
}();

kappa::RMSNorm<float> norm(Index d) {
  return kappa::RMSNorm<float>(RowVector<float>::Ones(d), 1e-6);
}
kappa::SwiGlu<float> swiglu(Index d, Index f, std::uint64_t seed) {
  kappa::SwiGlu<float> m(d, f);
  m.set_weights(fill(d, f, seed), fill(d, f, seed + 1), fill(f, d, seed + 2));
  return m;
}

// ---- shapes ---------------------------------------------------------------------

struct MixtralShape {
  Index d, heads, kv_heads, d_head, experts, d_expert, top_k, vocab, layers;
};
const MixtralShape kMixtral = kLarge ? MixtralShape{4096, 32, 8, 128, 8, 14336, 2, 32000, 1}
                                     : MixtralShape{512, 8, 2, 64, 8, 1792, 2, 4000, 2};

struct V2LiteShape {
  Index d, heads, d_latent, d_nope, d_rope, d_v, experts, d_expert, top_k, d_shared, d_dense, vocab,
      layers;
};
const V2LiteShape kV2Lite =
    kLarge ? V2LiteShape{2048, 16, 512, 128, 64, 128, 64, 1408, 6, 2816, 10944, 102400, 3}
           : V2LiteShape{256, 4, 64, 32, 16, 32, 16, 176, 6, 352, 1368, 8000, 2};

// ---- models (layer 0 of V2Lite dense, as first_k_dense_replace = 1) -------------

/// rc.n_experts SwiGLU experts of width f (seeds seed + 10 + 3e) behind a
/// router of weights fill(d, n_experts, seed + 5, 0.2).
kappa::MixtureOfExperts<float> mixture(Index d, Index f, const kappa::RouterConfig& rc,
                                       std::uint64_t seed) {
  std::vector<kappa::SwiGlu<float>> experts;
  for (Index e = 0; e < rc.n_experts; ++e)
    experts.push_back(swiglu(d, f, seed + 10 + 3 * static_cast<std::uint64_t>(e)));
  return kappa::MixtureOfExperts<float>(std::move(experts), rc,
                                        fill(d, rc.n_experts, seed + 5, 0.2f));
}

kappa::LlamaAttention<float> llama_attention(const MixtralShape& s, std::uint64_t seed) {
  const Index dq = s.heads * s.d_head, dkv = s.kv_heads * s.d_head;
  kappa::LlamaAttention<float> a(
      {.d_in = s.d, .n_heads = s.heads, .d_head = s.d_head, .n_kv_heads = s.kv_heads},
      kappa::RopeOptions{.base = 1e6});
  a.set_weights(fill(s.d, dq, seed), fill(s.d, dkv, seed + 1), fill(s.d, dkv, seed + 2),
                fill(dq, s.d, seed + 3));
  return a;
}

/// sparse: the mixture of experts; else the dense SwiGLU of width k x d_expert.
std::unique_ptr<kappa::LlamaMoe<float>> make_mixtral(bool sparse) {
  const MixtralShape& s = kMixtral;
  std::vector<kappa::LlamaMoeLayer<float>> layers;
  for (Index l = 0; l < s.layers; ++l) {
    const auto seed = static_cast<std::uint64_t>(1000 * l);
    kappa::SwiGluOrExperts<float> ffn = swiglu(1, 1, 0);
    if (sparse) {
      ffn = mixture(
          s.d, s.d_expert,
          {.n_experts = s.experts, .top_k = s.top_k, .weights = kappa::TopKWeights::kRenormalized},
          seed);
    } else {
      ffn = swiglu(s.d, s.top_k * s.d_expert, seed + 10);
    }
    layers.emplace_back(llama_attention(s, seed + 1), norm(s.d), norm(s.d), std::move(ffn));
  }
  return std::make_unique<kappa::LlamaMoe<float>>(kappa::Embedding<float>(fill(s.vocab, s.d, 1)),
                                                  kappa::NoAbsolutePositions{}, std::move(layers),
                                                  norm(s.d), fill(s.vocab, s.d, 2), 32768);
}

kappa::LatentAttention<float, kappa::AbsorbedLatent, kappa::Interleaved> latent_attention(
    const V2LiteShape& s, std::uint64_t seed) {
  kappa::LatentConfig lc;
  lc.d_model = s.d;
  lc.n_heads = s.heads;
  lc.d_head = s.d_nope;
  lc.d_rope = s.d_rope;
  lc.d_v = s.d_v;
  lc.d_latent = s.d_latent;
  kappa::HfDeepSeekV2AttentionWeights<float> hw;
  hw.q_proj = fill(s.heads * (s.d_nope + s.d_rope), s.d, seed);
  hw.kv_a_proj_with_mqa = fill(s.d_latent + s.d_rope, s.d, seed + 1);
  hw.kv_a_layernorm = RowVector<float>::Ones(s.d_latent);
  hw.kv_b_proj = fill(s.heads * (s.d_nope + s.d_v), s.d_latent, seed + 2);
  hw.o_proj = fill(s.d, s.heads * s.d_v, seed + 3);
  kappa::LatentAttention<float, kappa::AbsorbedLatent, kappa::Interleaved> a(lc);
  a.set_weights_from_hf(hw);
  return a;
}

/// sparse: experts after layer 0; else every layer dense, of width
/// k x d_expert + d_shared after layer 0.
std::unique_ptr<kappa::DeepSeekMoe<float>> make_v2lite(bool sparse) {
  const V2LiteShape& s = kV2Lite;
  std::vector<kappa::DeepSeekMoeLayer<float>> layers;
  for (Index l = 0; l < s.layers; ++l) {
    const auto seed = static_cast<std::uint64_t>(1000 * l);
    kappa::SwiGluOrExperts<float> ffn = swiglu(1, 1, 0);
    if (l == 0) {
      ffn = swiglu(s.d, s.d_dense, seed + 10);
    } else if (sparse) {
      auto moe = mixture(s.d, s.d_expert, {.n_experts = s.experts, .top_k = s.top_k}, seed);
      moe.set_shared(swiglu(s.d, s.d_shared, seed + 7));
      ffn = std::move(moe);
    } else {
      ffn = swiglu(s.d, s.top_k * s.d_expert + s.d_shared, seed + 10);
    }
    layers.emplace_back(latent_attention(s, seed + 1), norm(s.d), norm(s.d), std::move(ffn));
  }
  return std::make_unique<kappa::DeepSeekMoe<float>>(
      kappa::Embedding<float>(fill(s.vocab, s.d, 1)), kappa::NoAbsolutePositions{},
      std::move(layers), norm(s.d), fill(s.vocab, s.d, 2), 32768);
}

/// One model resident at a time (the full shapes take several GB each): the
/// benchmarks of one model run one after another, and asking for another
/// model frees the current one first.
struct Resident {
  std::string key;
  std::shared_ptr<void> model;
};
Resident g_resident;

template <class M, class Make>
M& resident(const std::string& key, Make make) {
  if (g_resident.key != key) {
    g_resident.model.reset();
    g_resident.key.clear();
    g_resident.model = std::shared_ptr<M>(make());
    g_resident.key = key;
  }
  return *static_cast<M*>(g_resident.model.get());
}
kappa::LlamaMoe<float>& mixtral() {
  return resident<kappa::LlamaMoe<float>>("mixtral", [] { return make_mixtral(true); });
}
kappa::LlamaMoe<float>& mixtral_dense() {
  return resident<kappa::LlamaMoe<float>>("mixtral_dense", [] { return make_mixtral(false); });
}
kappa::DeepSeekMoe<float>& v2lite() {
  return resident<kappa::DeepSeekMoe<float>>("v2lite", [] { return make_v2lite(true); });
}
kappa::DeepSeekMoe<float>& v2lite_dense() {
  return resident<kappa::DeepSeekMoe<float>>("v2lite_dense", [] { return make_v2lite(false); });
}

// ---- the measurements -----------------------------------------------------------

constexpr Index kPrompt = 128;
constexpr Index kDecodeTokens = 64;  // the tokens decode steps cycle through

/// A prefill of a 128-token prompt (a fixed random list); GFLOP/s count 2 x
/// the active parameters (decode_bytes / sizeof(float)) per token.
template <class M>
void prefill(benchmark::State& st, M& m) {
  kappa_bench::run_prefill(
      st, m, kappa_bench::random_tokens(kPrompt, m.vocab_size(), 1),
      kappa_bench::prefill_flops(m, kPrompt, [](const auto& l) { return l.decode_bytes(); }));
}

/// One decode step after a 128-token prompt, the cache rolled back each step;
/// step i decodes token i mod 64 of a fixed random list.
template <class M>
void decode(benchmark::State& st, M& m) {
  kappa_bench::run_decode(st, m, kappa_bench::random_tokens(kPrompt, m.vocab_size(), 1),
                          kappa_bench::random_tokens(kDecodeTokens, m.vocab_size(), 2),
                          kappa_bench::CacheCounter::kNo);
}

/// The feed-forward of the model's last layer (an expert layer) on one row
/// at a time (64 random rows in turn): the mixture's decode path alone.
template <class M>
void moe_layer_decode(benchmark::State& st, M& m) {
  const kappa_bench::ArgThreads threads(st);
  const auto& ffn = m.layers().back().feed_forward();
  const RowMatrix<float> rows = fill(kDecodeTokens, m.d_model(), 77, 1.0f);
  Index i = 0;
  for (auto _ : st) {
    benchmark::DoNotOptimize(ffn.forward(rows.row(i)).data());
    i = (i + 1) % kDecodeTokens;
  }
  st.counters["tokens/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(ffn.decode_bytes()) * 1e-9,
                                           benchmark::Counter::kIsIterationInvariantRate);
  st.counters["read_MB"] = static_cast<double>(ffn.decode_bytes()) / 1e6;
}

/// The benchmarks of one model, BM_<what>_<name>, each on 1 and 2 threads:
/// `sparse` the mixture, `dense` its dense counterpart. Registered in this
/// order so that each model is built once (see Resident).
template <class M>
void register_model(const std::string& name, M& (*sparse)(), M& (*dense)()) {
  // decode(): steps paired with plain reads, timed alone (run_decode)
  const auto add = [&name](const std::string& what, auto fn, bool paired = false) {
    benchmark::RegisterBenchmark(("BM_" + what + "_" + name).c_str(), fn)
        ->Apply(paired ? kappa_bench::decode_on_1_and_2_threads : kappa_bench::on_1_and_2_threads);
  };
  add(
      "Moe_Decode", [sparse](benchmark::State& st) { decode(st, sparse()); }, true);
  add("Ceiling_Read", [sparse](benchmark::State& st) {
    kappa_bench::memory_read(st, sparse().decode_bytes(), kappa_bench::arg_threads(st));
  });
  add("MoeLayer_Decode", [sparse](benchmark::State& st) { moe_layer_decode(st, sparse()); });
  add("Ceiling_ReadLayer", [sparse](benchmark::State& st) {
    kappa_bench::memory_read(st, sparse().layers().back().feed_forward().decode_bytes(),
                             kappa_bench::arg_threads(st));
  });
  add("Moe_Prefill", [sparse](benchmark::State& st) { prefill(st, sparse()); });
  add("Dense_Prefill", [dense](benchmark::State& st) { prefill(st, dense()); });
  add(
      "Dense_Decode", [dense](benchmark::State& st) { decode(st, dense()); }, true);
}

[[maybe_unused]] const bool kRegistered = [] {
  register_model("Mixtral", mixtral, mixtral_dense);
  register_model("V2Lite", v2lite, v2lite_dense);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
