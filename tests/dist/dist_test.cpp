// Tests for kappa/dist (tensor parallelism over MPI), run by ctest under
// mpirun with P = 1, 2, 3 and 4 ranks (and once over TCP): every rank loads
// its share of a tiny checkpoint, and its logits must equal those of the
// single-process model (loaded whole, in this process, by the ordinary
// loader) within 1e-5 relative, and the Hugging Face goldens within 1e-4;
// greedy and seeded sampled ids must be identical; cached decoding must
// equal the full pass; the allreduce payload must be 2 d numbers per token
// and layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kappa/dist/communicator.hpp"
#include "kappa/dist/partition.hpp"
#include "kappa/dist/tensor_parallel.hpp"
#include "kappa/io/npy.hpp"
#include "kappa/transformer/generate.hpp"
#include "kappa/transformer/gguf_load.hpp"
#include "kappa/transformer/hf.hpp"
#include "transformer/model_data.hpp"

namespace kappa {
namespace {

using dist::Communicator;

using testing::edited_copy;
using testing::model_dir;
using testing::read_ids;
using testing::read_ref;
using testing::scaled_error;

// ---- The plan (no communication) ----------------------------------------------------

TEST(DistPartition, EveryHeadOnceAndEachReadsItsOwnKeyValueHead) {
  for (const auto& [h, kv] : std::vector<std::pair<Index, Index>>{
           {4, 2}, {4, 4}, {4, 1}, {32, 8}, {14, 2}, {12, 4}, {28, 4}, {7, 7}}) {
    for (int p = 1; p <= std::min<Index>(h, 9); ++p) {
      SCOPED_TRACE(std::to_string(h) + " heads, " + std::to_string(kv) + " kv, P " +
                   std::to_string(p));
      std::vector<int> owner(static_cast<std::size_t>(h), -1);
      for (int r = 0; r < p; ++r) {
        const dist::HeadShare s = dist::share_heads(h, kv, r, p);
        ASSERT_GE(s.n_q(), 1);
        ASSERT_GE(s.n_kv(), 1);
        ASSERT_EQ(s.n_q() % s.n_kv(), 0);  // a grouped-query layer of its own
        const Index g_local = s.n_q() / s.n_kv(), g = h / kv;
        for (Index i = 0; i < s.n_q(); ++i) {
          const Index global = s.q_begin + i;
          EXPECT_EQ(owner[static_cast<std::size_t>(global)], -1) << "head " << global;
          owner[static_cast<std::size_t>(global)] = r;
          // local query head i reads local kv head i / g_local, which must
          // be the whole layer's kv head of that query head
          EXPECT_EQ(s.kv_heads[static_cast<std::size_t>(i / g_local)], global / g);
        }
      }
      for (Index x = 0; x < h; ++x) EXPECT_NE(owner[static_cast<std::size_t>(x)], -1);
    }
  }
  // Whole groups stay whole: 32 heads, 8 kv heads over 4 ranks: 2 kv each.
  EXPECT_EQ(dist::share_heads(32, 8, 1, 4).kv_heads, (std::vector<Index>{2, 3}));
  // MQA over 3 ranks: the one kv head on every rank.
  EXPECT_EQ(dist::share_heads(6, 1, 2, 3).kv_heads, (std::vector<Index>{0}));
  EXPECT_THROW((void)dist::share_heads(4, 2, 0, 5), std::invalid_argument);
  EXPECT_THROW((void)dist::share_heads(4, 3, 0, 2), std::invalid_argument);
  EXPECT_THROW((void)dist::share_columns(3, 0, 4), std::invalid_argument);
  const dist::ColumnShare c = dist::share_columns(10, 2, 3);  // 10 over 3: 3, 3, 4
  EXPECT_EQ(c.begin, 6);
  EXPECT_EQ(c.end, 10);
}

// ---- The model across ranks ---------------------------------------------------------

// Every architecture kappa::dist loads, and the variants that exercise its
// splits: GQA (llama, qwen2 with biases), RoPE scaling, a BF16 file (slices
// converted), an uneven vocabulary, tied heads (gpt2, qwen3), QK-norm
// (qwen3), sliding windows (mistral; phi3, whose fused projections are read
// by rows; LongRoPE), Gemma 2 and 3 (sandwich norms, soft-capping, sliding
// and global layers), mixtures of experts with and without shared experts and gates
// (mixtral, qwen2_moe), latent attention with and without the query latent,
// dense and expert layers, group-limited and biased routing (deepseek_*).
const std::vector<std::string> kModels = {"llama",
                                          "qwen2",
                                          "llama3-scaled",
                                          "llama-bf16",
                                          "llama-256",
                                          "gpt2",
                                          "mistral",
                                          "phi3",
                                          "phi3-longrope",
                                          "qwen3",
                                          "gemma2",
                                          "gemma3_text",
                                          "mixtral",
                                          "qwen2_moe",
                                          "qwen2_moe-norm",
                                          "deepseek_v2",
                                          "deepseek_v2-noqlora",
                                          "deepseek_v2-lite",
                                          "deepseek_v2-moe",
                                          "deepseek_v3"};

// f(this rank's share of model `name`), by the loader its model_type names.
template <class F>
void with_model(const std::string& name, F f) {
  dist::with_model<float>(model_dir(name), f);
}

TEST(DistTensorParallel, LogitsEqualTheSingleProcessModel) {
  const Communicator& comm = Communicator::world();
  for (const std::string& name : kModels) {
    SCOPED_TRACE(name + " on " + std::to_string(comm.size()) + " ranks");
    with_model(name, [&](const auto& tp) {
      const hf::CausalLM<float> one = hf::load_causal_lm<float>(model_dir(name));
      const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
      const RowMatrix<float> got = tp.forward(ids), want = one.forward(ids);
      EXPECT_LE(scaled_error(got, RowMatrix<double>(want.cast<double>())), 1e-5);
      EXPECT_LE(scaled_error(got, read_ref(name, "logits")), 1e-4);
      // Each rank holds its share: less than the whole model when P > 1.
      if (comm.size() > 1) {
        EXPECT_LT(tp.weight_bytes(), one.weight_bytes());
      }
      // Cached decoding: the prompt, then one token at a time, equals the
      // single process's, and the pass over the whole sequence (but for
      // LongRoPE past its original context, whose factors change with the
      // length: generation recomputes the cache there, cache_refresh_length).
      const auto by_steps = [&](const auto& lm) {
        auto cache = lm.make_cache();
        const std::span<const TokenId> all(ids);
        const Index n0 = static_cast<Index>(ids.size()) / 2;
        RowMatrix<float> rows(static_cast<Index>(ids.size()), lm.vocab_size());
        rows.topRows(n0) = lm.forward_cached(all.first(static_cast<std::size_t>(n0)), cache);
        for (Index i = n0; i < static_cast<Index>(ids.size()); ++i)
          rows.row(i) = lm.forward_cached(all.subspan(static_cast<std::size_t>(i), 1), cache);
        return rows;
      };
      const RowMatrix<float> rows = by_steps(tp), rows_one = by_steps(one);
      EXPECT_LE(scaled_error(rows, RowMatrix<double>(rows_one.cast<double>())), 1e-5);
      if (tp.cache_refresh_length() == 0 ||
          static_cast<Index>(ids.size()) <= tp.cache_refresh_length()) {
        EXPECT_LE(scaled_error(rows, RowMatrix<double>(got.cast<double>())), 1e-5);
      }
      EXPECT_EQ(tp.cache_refresh_length(), one.cache_refresh_length());
    });
  }
}

TEST(DistTensorParallel, GreedyAndSeededSampledIdsAreThoseOfOneProcess) {
  const Communicator& comm = Communicator::world();
  for (const std::string& name : kModels) {
    SCOPED_TRACE(name + " on " + std::to_string(comm.size()) + " ranks");
    with_model(name, [&](const auto& tp) {
      const hf::CausalLM<float> one = hf::load_causal_lm<float>(model_dir(name));
      const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
      // Greedy: Hugging Face's greedy continuation (greedy_ids.npy).
      const std::vector<TokenId> ref = read_ids(model_dir(name) / "reference" / "greedy_ids.npy");
      GenerateOptions o;
      o.max_new_tokens = static_cast<Index>(ref.size());
      o.eos_ids = std::vector<TokenId>{};
      const std::vector<TokenId> greedy = generate_ids(tp, ids, o).ids;
      EXPECT_EQ(greedy, ref);
      EXPECT_EQ(greedy, generate_ids(one, ids, o).ids);
      o.max_new_tokens = 16;
      o.decoding = Decoding::kSample;
      o.sampling.temperature = 0.9;
      o.sampling.top_p = 0.95;
      o.seed = 7;
      const std::vector<TokenId> sampled = generate_ids(tp, ids, o).ids;
      EXPECT_EQ(sampled, generate_ids(one, ids, o).ids);
      // Every rank generated the same ids.
      std::uint64_t h = 1469598103934665603ULL;
      for (const TokenId t : sampled) h = (h ^ static_cast<std::uint64_t>(t)) * 1099511628211ULL;
      EXPECT_EQ(comm.max(h), h);
    });
  }
}

TEST(DistTensorParallel, EachTokenSendsTwoRowsOfWidthDPerLayer) {
  // Dense, expert (the experts' partial sums go through the same one
  // allreduce as a dense feed-forward) and latent attention layers alike.
  const Communicator& comm = Communicator::world();
  for (const std::string name : {"llama-256", "mixtral", "deepseek_v2-moe"}) {
    SCOPED_TRACE(name);
    with_model(name, [&](const auto& tp) {
      const std::vector<TokenId> ids = {1, 2, 3, 4, 5};
      auto cache = tp.make_cache();
      (void)tp.forward_cached(std::span<const TokenId>(ids), cache, LogitsFor::kLast);
      comm.reset_counters();
      const TokenId next = 7;
      (void)tp.forward_cached(std::span<const TokenId>(&next, 1), cache, LogitsFor::kLast);
      const std::uint64_t per_token =
          comm.size() == 1 ? 0
                           : 2 * static_cast<std::uint64_t>(tp.n_layers()) *
                                 static_cast<std::uint64_t>(tp.d_model()) * sizeof(float);
      EXPECT_EQ(comm.allreduce_bytes(), per_token);
      EXPECT_EQ(comm.allreduce_calls(),
                comm.size() == 1 ? 0U : 2U * static_cast<std::uint64_t>(tp.n_layers()));
      // and its share of the logits row (its rows of the head) to the others
      const dist::ColumnShare v = dist::share_columns(tp.vocab_size(), comm.rank(), comm.size());
      EXPECT_EQ(comm.allgather_bytes(),
                comm.size() == 1 ? 0U : static_cast<std::uint64_t>(v.size()) * sizeof(float));
      EXPECT_EQ(comm.broadcast_bytes(), 0U);
      EXPECT_EQ(tp.local().vocab_size(), v.size());  // the head split by vocabulary
    });
  }
}

TEST(DistTensorParallel, ExpertsSplitByColumnsGiveTheSameModel) {
  // Every expert split by its columns instead of whole experts per rank.
  const Communicator& comm = Communicator::world();
  const dist::LoadOptions by_columns{.experts = dist::ExpertSplit::kColumns};
  for (const std::string name : {"mixtral", "qwen2_moe", "deepseek_v2-moe", "deepseek_v3"}) {
    SCOPED_TRACE(name + " on " + std::to_string(comm.size()) + " ranks");
    dist::with_model<float>(
        model_dir(name),
        [&](const auto& tp) {
          const hf::CausalLM<float> one = hf::load_causal_lm<float>(model_dir(name));
          const std::vector<TokenId> ids =
              read_ids(model_dir(name) / "reference" / "input_ids.npy");
          const RowMatrix<float> got = tp.forward(ids), want = one.forward(ids);
          EXPECT_LE(scaled_error(got, RowMatrix<double>(want.cast<double>())), 1e-5);
          EXPECT_LE(scaled_error(got, read_ref(name, "logits")), 1e-4);
          GenerateOptions o;
          o.max_new_tokens = 8;
          o.eos_ids = std::vector<TokenId>{};
          EXPECT_EQ(generate_ids(tp, ids, o).ids, generate_ids(one, ids, o).ids);
          // Every rank holds every expert, by its columns.
          const auto& layers = tp.local().layers();
          const auto& ffn = layers.back().feed_forward().local();
          if constexpr (requires { ffn.is_sparse(); }) {
            ASSERT_TRUE(ffn.is_sparse());
            const auto& moe = std::get<1>(ffn.get());
            EXPECT_EQ(moe.n_held(), moe.n_experts());
            EXPECT_EQ(moe.d_ff(), dist::share_columns(16, comm.rank(), comm.size()).size());
          } else {
            ADD_FAILURE() << "not a mixture-of-experts model";
          }
        },
        by_columns);
  }
}

TEST(DistTensorParallel, ExpertsAreSplitAndTheLatentIsReplicated) {
  // deepseek_v2-moe: 8 routed experts in layers 1 and 2; rank r holds
  // experts [8 r / P, 8 (r + 1) / P), the router whole, its columns of the
  // shared experts; every rank's latent cache holds the whole latent.
  const Communicator& comm = Communicator::world();
  const auto tp = dist::load_deepseek<float>(model_dir("deepseek_v2-moe"));
  const dist::ColumnShare e = dist::share_columns(8, comm.rank(), comm.size());
  for (Index l = 1; l < tp.n_layers(); ++l) {
    const auto& ffn = tp.local().layers()[static_cast<std::size_t>(l)].feed_forward().local();
    ASSERT_TRUE(ffn.is_sparse());
    const auto& moe = std::get<1>(ffn.get());
    EXPECT_EQ(moe.n_experts(), 8);
    EXPECT_EQ(moe.first_expert(), e.begin);
    EXPECT_EQ(moe.n_held(), e.size());
    ASSERT_TRUE(moe.shared().has_value());
    EXPECT_EQ(moe.shared()->d_ff(), dist::share_columns(32, comm.rank(), comm.size()).size());
  }
  const auto& attn = tp.local().layers()[0].attention().local();
  EXPECT_EQ(attn.config().n_heads, dist::share_heads(4, 4, comm.rank(), comm.size()).n_q());
  EXPECT_EQ(attn.config().d_latent, 16);  // the latent is whole on every rank
}

TEST(DistTensorParallel, Bf16StorageHoldsTheSharesInBf16) {
  // S = Bf16Weights: each rank stores its slices in bfloat16, as the single
  // process stores its whole matrices; the logits agree as closely as the
  // float models' (the same bf16 weights, other sums).
  const Communicator& comm = Communicator::world();
  for (const std::string name : {"llama-bf16", "gpt2", "gemma2", "qwen2_moe", "deepseek_v2-moe"}) {
    SCOPED_TRACE(name + " on " + std::to_string(comm.size()) + " ranks");
    dist::with_model<float, Bf16Weights>(model_dir(name), [&](const auto& tp) {
      const hf::CausalLM<float, Bf16Weights> one =
          hf::load_causal_lm<float, Bf16Weights>(model_dir(name));
      const std::vector<TokenId> ids = read_ids(model_dir(name) / "reference" / "input_ids.npy");
      const RowMatrix<float> got = tp.forward(ids), want = one.forward(ids);
      EXPECT_LE(scaled_error(got, RowMatrix<double>(want.cast<double>())), 1e-5);
      GenerateOptions o;
      o.max_new_tokens = 8;
      o.eos_ids = std::vector<TokenId>{};
      EXPECT_EQ(generate_ids(tp, ids, o).ids, generate_ids(one, ids, o).ids);
      // The feed-forward share in about half the bytes of the float share
      // (routers, gates and biases stay in T).
      const auto ffn_bytes = [](const auto& lm) {
        std::size_t b = 0;
        for (const auto& layer : lm.local().layers()) b += layer.feed_forward().weight_bytes();
        return static_cast<double>(b);
      };
      dist::with_model<float>(model_dir(name), [&](const auto& dense) {
        EXPECT_LT(ffn_bytes(tp), 0.6 * ffn_bytes(dense));
      });
    });
  }
}

TEST(DistTensorParallel, GgufFilesGiveTheSingleProcessModel) {
  // llama.cpp's files (written by ggml's own gguf writer, tests/reference):
  // the rank's slices of each dequantized tensor give the logits of the
  // single-process model of the same file, quantized or not.
  const Communicator& comm = Communicator::world();
  for (const std::string name : {"llama-f32", "llama-q8_0", "llama-256-q4_k_m", "qwen2-f32",
                                 "qwen3-f32", "mistral-f32", "mixtral-f32", "mixtral-q8_0"}) {
    SCOPED_TRACE(name + " on " + std::to_string(comm.size()) + " ranks");
    const std::filesystem::path file = model_dir("llama-gguf") / (name + ".gguf");
    dist::with_model<float>(file, [&](const auto& tp) {
      const hf::CausalLM<float> one = gguf::load_causal_lm<float>(file);
      const std::vector<TokenId> ids = {1, 5, 9, 13, 2, 40, 7};
      const RowMatrix<float> got = tp.forward(ids), want = one.forward(ids);
      EXPECT_LE(scaled_error(got, RowMatrix<double>(want.cast<double>())), 1e-5);
      GenerateOptions o;
      o.max_new_tokens = 8;
      o.eos_ids = std::vector<TokenId>{};
      EXPECT_EQ(generate_ids(tp, ids, o).ids, generate_ids(one, ids, o).ids);
    });
  }
  try {
    dist::with_model<float>(model_dir("llama-gguf") / "gpt2-f32.gguf", [](const auto&) {});
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture \"gpt2\" is not split across ranks "
                                         "from GGUF yet"),
              std::string::npos)
        << e.what();
  }
}

TEST(DistTensorParallel, WrongLoadersAndUnsupportedTypesAreNamed) {
  try {
    (void)dist::load_llama<float>(model_dir("mistral"));
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window (4 tokens): load it with "
                                         "dist::load_llama_sliding"),
              std::string::npos)
        << e.what();
  }
  try {
    dist::with_model<float>(model_dir("bert"), [](const auto&) {});
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model_type \"bert\" is not supported across ranks"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)dist::load_llama<float>(model_dir("gpt2"));
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpt2"), std::string::npos) << e.what();
  }
}

// A layer count sizes per-layer tables (which layers are sparse) before the
// weights can confirm it: the ranks' loaders bound it as the ordinary ones do
// (hf::kMaxLayers), naming the file, the key and the value.
TEST(DistTensorParallel, LayerCountsAreBoundedBeforeAnythingIsSized) {
  namespace fs = std::filesystem;
  for (const auto& [model, key] :
       {std::pair{"deepseek_v2-moe", "num_hidden_layers"}, std::pair{"gpt2", "n_layer"}}) {
    const fs::path dir =
        edited_copy(model, std::string("dist_layers_") + model,
                    [k = key](nlohmann::json& j) { j[k] = std::int64_t{1} << 40; });
    try {
      if (std::string(model) == "gpt2")
        (void)dist::load_gpt2<float>(dir);
      else
        (void)dist::load_deepseek<float>(dir);
      ADD_FAILURE() << "no exception for " << model;
    } catch (const FormatError& e) {
      for (const char* part : {"config.json", key, "1099511627776"})
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace kappa

// MPI around GoogleTest; only rank 0 prints the results (every rank runs the
// tests and fails the run on its own failures).
int main(int argc, char** argv) {
  kappa::dist::Environment env(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (kappa::dist::Communicator::world().rank() != 0) {
    ::testing::TestEventListeners& l = ::testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  // The run fails on every rank if it failed on one (mpirun reports it).
  return kappa::dist::Communicator::world().max(rc);
}
