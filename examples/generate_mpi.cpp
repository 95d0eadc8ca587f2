// examples/generate_mpi.cpp - kappa-generate-mpi: generate text with a model
// split over the ranks of an MPI job (tensor parallelism, kappa/dist/), or
// measure its prefill and decode speed (--bench).
//
//   mpirun -np 2 kappa-generate-mpi --model DIR|FILE.gguf --prompt TEXT [--max-new-tokens N]
//   mpirun -np 2 --hostfile hosts kappa-generate-mpi --model DIR --bench
//
// Every rank loads only its share of the weights (its heads, feed-forward
// columns and experts; --experts) from DIR, which every machine must see at
// the same path. Rank 0 tokenizes, and prints the text as it is generated
// (all ranks decode in lockstep from rank 0's logits, so seeded sampling
// gives the same text for every number of ranks), then on stderr the speed,
// the bytes each rank holds, its peak memory, and the allreduce payload per
// token. Built when
// CMake finds MPI (target generate_mpi).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli_options.hpp"
#include "kappa/core/allocator.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/dist/communicator.hpp"
#include "kappa/dist/tensor_parallel.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/transformer/generate.hpp"
#include "kappa/transformer/gguf_load.hpp"

namespace {

constexpr const char* kProgram = "kappa-generate-mpi";
using kappa_cli::UsageError;

struct Args {
  std::string model;
  std::optional<std::string> prompt;
  kappa::Index max_new_tokens = 32;
  std::optional<double> temperature;
  std::optional<std::uint64_t> seed;
  bool bench = false;
  kappa::Index bench_prompt = 128, bench_gen = 32;
  int reps = 3;
  std::optional<int> threads;
  kappa::dist::ExpertSplit experts = kappa::dist::ExpertSplit::kWhole;
  bool bf16 = false;
};

std::optional<Args> parse(int argc, char** argv) {
  Args a;
  kappa_cli::Options cli(
      kProgram,
      std::string("usage: mpirun -np P ") + kProgram +
          " --model DIR|FILE.gguf (--prompt TEXT | --bench) [options]\n\n"
          "Generates text with a model directory split over the MPI job's ranks (each holds\n"
          "its heads', feed-forward columns' and experts' weights); rank 0 prints.\n",
      {"Model", "Generation", "Performance"});
  using std::string;
  cli.value("Model", "--model", "DIR|FILE.gguf",
            "a Hugging Face model directory (gpt2, llama, qwen2, mistral without a sliding "
            "window, qwen3, mixtral, qwen2_moe, deepseek_v2, deepseek_v3), at the same path on "
            "every machine; or a GGUF file (llama, qwen2, qwen3, qwen2moe; each rank keeps its "
            "slices dequantized) (required)",
            [&](const string& v) { a.model = v; });
  cli.flag("Model", "--bf16",
           "store each rank's share of every projection, feed-forward and the output head in "
           "bfloat16 (half the bytes of float; a BF16 checkpoint's weights exactly; default: "
           "float)",
           [&] { a.bf16 = true; });
  cli.value("Model", "--experts", "whole|columns",
            "how a mixture's experts are split: whole experts per rank (expert parallelism, "
            "the default), or every expert by its columns (even reads in a decode step)",
            [&](const string& v) {
              if (v == "whole")
                a.experts = kappa::dist::ExpertSplit::kWhole;
              else if (v == "columns")
                a.experts = kappa::dist::ExpertSplit::kColumns;
              else
                throw UsageError("--experts is whole or columns, not " + v);
            });
  cli.value("Generation", "--prompt", "TEXT", "the prompt, encoded with the model's tokenizer",
            [&](const string& v) { a.prompt = v; });
  cli.value("Generation", "--max-new-tokens", "N", "tokens to generate (default 32)",
            [&](const string& v) {
              a.max_new_tokens = kappa_cli::parse_int("--max-new-tokens", v, 0, 1 << 20);
            });
  cli.value("Generation", "--temperature", "T",
            "sample at temperature T > 0 (default: greedy decoding)",
            [&](const string& v) { a.temperature = kappa_cli::parse_double("--temperature", v); });
  cli.value("Generation", "--seed", "S", "the seed of the draws (default 0)", [&](const string& v) {
    a.seed = static_cast<std::uint64_t>(kappa_cli::parse_int("--seed", v, 0, INT64_MAX));
  });
  cli.flag("Performance", "--bench",
           "measure prefill and decode tokens/s on random token ids instead of generating",
           [&] { a.bench = true; });
  cli.value("Performance", "--bench-prompt", "N", "prompt tokens of --bench (default 128)",
            [&](const string& v) {
              a.bench_prompt = kappa_cli::parse_int("--bench-prompt", v, 1, 1 << 20);
            });
  cli.value(
      "Performance", "--bench-gen", "M", "decode steps of --bench (default 32)",
      [&](const string& v) { a.bench_gen = kappa_cli::parse_int("--bench-gen", v, 1, 1 << 20); });
  cli.value("Performance", "--reps", "R", "repetitions of --bench (default 3)",
            [&](const string& v) {
              a.reps = static_cast<int>(kappa_cli::parse_int("--reps", v, 1, 1000));
            });
  cli.value("Performance", "--threads", "N",
            "threads per rank (default: OMP_NUM_THREADS, else all cores; with several ranks "
            "on one machine give each rank its share)",
            [&](const string& v) {
              a.threads = static_cast<int>(kappa_cli::parse_int("--threads", v, 1, 4096));
            });
  if (!cli.parse(argc, argv)) return std::nullopt;
  if (a.model.empty()) throw UsageError("--model is required");
  if (!a.bench && !a.prompt) throw UsageError("give --prompt TEXT or --bench");
  if (a.temperature && *a.temperature < 0) throw UsageError("--temperature must be >= 0");
  return a;
}

// This process's peak resident memory (VmHWM), in bytes; 0 if unknown.
double peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  return 0;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

template <class LM>
int run(const Args& a, const LM& lm, double load_s) {
  const kappa::dist::Communicator& comm = kappa::dist::Communicator::world();
  const bool root = comm.rank() == 0;

  // generation_config.json's options (EOS ids), as kappa-generate starts
  // from; a GGUF file's EOS is its tokenizer's (tokenizer.ggml.eos_token_id).
  kappa::GenerateOptions opt = std::filesystem::is_regular_file(a.model)
                                   ? kappa::GenerateOptions{}
                                   : kappa::hf::generation_options(a.model);
  opt.max_new_tokens = a.max_new_tokens;
  if (a.temperature && *a.temperature > 0) {
    opt.decoding = kappa::Decoding::kSample;
    opt.sampling.temperature = *a.temperature;
  }
  if (a.seed) opt.seed = *a.seed;

  std::vector<double> prefill, decode;
  std::uint64_t per_token_bytes = 0;
  if (a.bench) {
    kappa::Rng rng(2024);  // the same random prompt on every rank
    std::vector<kappa::TokenId> prompt(static_cast<std::size_t>(a.bench_prompt));
    for (kappa::TokenId& id : prompt)
      id = static_cast<kappa::TokenId>(rng.next() % static_cast<std::uint64_t>(lm.vocab_size()));
    opt.eos_ids = std::vector<kappa::TokenId>{};
    opt.max_new_tokens = a.bench_gen + 1;
    kappa::GenerateOptions warm = opt;
    warm.max_new_tokens = 2;
    (void)kappa::generate_ids(lm, std::span<const kappa::TokenId>(prompt.data(), 1), warm);
    for (int r = 0; r < a.reps; ++r) {
      comm.barrier();
      comm.reset_counters();
      const kappa::Generation g =
          kappa::generate_ids(lm, std::span<const kappa::TokenId>(prompt), opt);
      prefill.push_back(g.timing.prefill_tokens_per_second());
      decode.push_back(g.timing.decode_tokens_per_second());
      per_token_bytes =
          comm.allreduce_bytes() / static_cast<std::uint64_t>(a.bench_prompt + a.bench_gen);
    }
  } else {
    // A directory's tokenizer.json, or a GGUF file's tokenizer.ggml.* keys.
    const auto tok = std::filesystem::is_regular_file(a.model)
                         ? kappa::gguf::load_tokenizer(kappa::io::GgufFile(a.model))
                         : kappa::tokenize::HfTokenizer::from_directory(a.model);
    const std::vector<kappa::TokenId> ids = tok.encode(*a.prompt);
    comm.reset_counters();
    const kappa::Generation g = kappa::generate(
        lm, tok, std::span<const kappa::TokenId>(ids), opt, [&](std::string_view piece) {
          if (root) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
          }
          return true;
        });
    if (root) std::printf("\n");
    prefill.push_back(g.timing.prefill_tokens_per_second());
    decode.push_back(g.timing.decode_tokens_per_second());
    // The tokens that went through the model: the prompt and every generated
    // token but the last (sampled, never fed back).
    const std::size_t passed = ids.size() + g.ids.size() - (g.ids.empty() ? 0 : 1);
    per_token_bytes = passed == 0 ? 0 : comm.allreduce_bytes() / passed;
  }
  // What each rank holds: the largest and the sum over the ranks.
  const double w = static_cast<double>(lm.weight_bytes()), rss = peak_rss_bytes();
  const double w_max = comm.max(w), w_sum = comm.sum(w), rss_max = comm.max(rss);
  if (root) {
    std::fprintf(
        stderr,
        "ranks: %d x %d threads | prefill: %.1f tokens/s | decode: %.2f tokens/s (median of "
        "%zu) | weights per rank: %.1f MB (max; %.1f MB over all ranks) | peak memory per "
        "rank: %.1f MB (max) | allreduce payload: %llu bytes per token (%.0f per layer) | "
        "load: %.2f s\n",
        comm.size(), kappa::num_threads(), median(prefill), median(decode), decode.size(),
        w_max / 1e6, w_sum / 1e6, rss_max / 1e6, static_cast<unsigned long long>(per_token_bytes),
        static_cast<double>(per_token_bytes) / static_cast<double>(lm.n_layers()), load_s);
  }
  return 0;
}

int run(const Args& a) {
  const kappa::dist::Communicator& comm = kappa::dist::Communicator::world();
  if (a.threads) (void)kappa::set_num_threads(*a.threads);
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    comm.barrier();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto go = [&](const auto& lm) { return run(a, lm, seconds()); };
  if (a.bf16)
    return kappa::dist::with_model<float, kappa::Bf16Weights>(std::filesystem::path(a.model), go,
                                                              {.experts = a.experts});
  return kappa::dist::with_model<float>(std::filesystem::path(a.model), go, {.experts = a.experts});
}

}  // namespace

int main(int argc, char** argv) {
  kappa::dist::Environment env(argc, argv);
  const bool root = kappa::dist::Communicator::world().rank() == 0;
  try {
    const std::optional<Args> a = parse(argc, argv);
    if (!a) return 0;
    // As runtime::Model::load does for kappa-generate: each layer of a
    // prompt's pass reuses the memory the previous one freed.
    (void)kappa::retain_freed_memory();
    return run(*a);
  } catch (const UsageError& e) {
    if (root) std::fprintf(stderr, "%s: %s (see %s --help)\n", kProgram, e.what(), kProgram);
    return 2;
  } catch (const std::exception& e) {
    // A failure on one rank (a missing file) is on every rank; each names it.
    std::fprintf(stderr, "%s: rank %d: %s\n", kProgram, kappa::dist::Communicator::world().rank(),
                 e.what());
    return 1;
  }
}
