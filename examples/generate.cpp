// examples/generate.cpp - kappa-generate: generate text with a Hugging Face
// model directory or a llama.cpp GGUF file (llama, qwen2, qwen3, deepseek2,
// gpt2 architectures; its tokenizer and EOS come from the file's metadata),
// or measure prefill and decode speed (--bench).
//
//   kappa-generate --model DIR|FILE.gguf (--prompt TEXT | --prompt-ids IDS) [options]
//   kappa-generate --model DIR|FILE.gguf --bench [--bench-prompt N] [--bench-gen M] [--reps R]
//
// `kappa-generate --help` lists every option with its default. Built as the
// target `generate` (examples, tests) and installed as bin/kappa-generate
// with -DKAPPA_BUILD_TOOLS=ON (preset `tools`).
//
// Prints the text as it is generated (stdout), then on stderr: the prompt's
// tokens, prefill and decode tokens/s, the weights' and the cache's bytes,
// the load time and why generation stopped. Decoding is greedy unless one of
// --temperature (> 0), --top-k, --top-p, --min-p or --seed asks for sampling
// (--greedy and --temperature 0 override). --json prints one JSON object
// instead of the text ({"prompt_ids": [...], "generated_ids": [...], "text":
// "...", "stop": "..."}; with --logprobs N each token's log-probability and
// the N most probable tokens of its step). --chat renders --prompt (and
// --system) with the model's chat template. --cache-type bf16|f16|int8 stores
// the cache in fewer bytes. A GGUF file's weights stay as the file stores them
// (Q8_0, Q4_0, ... blocks viewed in the mapped file; F32 tensors in float).
// Errors are one line on stderr: a bad option exits with status 2, a failure
// (a missing directory, an unreadable file) with 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli_options.hpp"
#include "kappa/io/npy.hpp"
#include "kappa/runtime.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace {

constexpr const char* kProgram = "kappa-generate";
using kappa_cli::UsageError;

// Text for a terminal: bytes that are not valid UTF-8 (a model may emit half a
// character, and a random model emits little else) and control characters
// other than newline and tab are shown as \xNN instead of corrupting the
// screen. Output to a pipe or file stays byte-exact.
std::string for_terminal(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const kappa::tokenize::Utf8Char c = kappa::tokenize::decode_utf8(text, i);
    const bool control = c.valid && (c.code_point < 0x20 || c.code_point == 0x7F) &&
                         c.code_point != '\n' && c.code_point != '\t';
    if (c.valid && !control) {
      out.append(text.substr(i, c.length));
    } else {
      char hex[16];  // "\\xNN" for a byte; room for any unsigned
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c.code_point));
      out += hex;
    }
    i += c.length;
  }
  return out;
}

struct Args {
  // Model
  std::string model, weights;
  bool bf16 = false;
  bool mmap = false;
  bool interleave_q4 = true;
  // Prompt
  std::optional<std::string> prompt;
  std::optional<std::vector<kappa::TokenId>> prompt_ids;
  // Sampling
  std::optional<kappa::Index> max_new_tokens, top_k;
  std::optional<double> temperature, top_p, min_p, repeat_penalty;
  std::optional<std::uint64_t> seed;
  bool greedy = false, ignore_eos = false;
  std::vector<std::string> stops;
  bool chat = false;
  std::optional<std::string> system;
  // Output
  bool json = false;
  std::string logits_file;
  std::optional<kappa::Index> logprobs;  // --logprobs N: the chosen token's and the top N
  // Performance
  std::optional<int> threads;
  kappa::cache::Format cache_format = kappa::cache::Format::kNative;
  bool bench = false;
  kappa::Index bench_prompt = 128, bench_gen = 64;
  // Beam search
  kappa::BeamSearchOptions beams{.num_beams = 1};
  int reps = 5;
};

// What --threads does without the option, for the help.
std::string default_threads() {
  if (!kappa::runtime::has_openmp())
    return "1: this build has no OpenMP; configure with -DKAPPA_USE_OPENMP=ON or use the "
           "preset tools";
  return "all cores, here " + std::to_string(kappa::runtime::num_threads()) +
         " (OMP_NUM_THREADS if set)";
}

// The option table: parsing and --help. Returns nullopt after --help.
std::optional<Args> parse(int argc, char** argv) {
  Args a;
  kappa_cli::Options cli(
      kProgram,
      std::string("usage: ") + kProgram +
          " --model DIR|FILE.gguf (--prompt TEXT | --prompt-ids IDS) [options]\n"
          "       " +
          kProgram +
          " --model DIR|FILE.gguf --bench [--bench-prompt N] [--bench-gen M] [--reps R]\n\n"
          "Generates text with a Hugging Face model directory or a llama.cpp GGUF file: the\n"
          "text goes to stdout as it is generated, a summary (tokens, tokens/s, bytes) to\n"
          "stderr. --bench measures prefill and decode speed instead.\n",
      {"Model", "Prompt", "Sampling", "Output", "Performance"});
  using std::string;
  // Model
  cli.value("Model", "--model", "DIR|FILE.gguf",
            "a Hugging Face model directory (config.json, tokenizer files, safetensors weights) "
            "or a llama.cpp GGUF file (required)",
            [&](const string& v) { a.model = v; });
  cli.value("Model", "--weights", "FILE",
            "the weights of the directory: a .safetensors file or a sharded index .json (its "
            "shards beside it), inside or outside DIR (default: DIR's "
            "model.safetensors.index.json, else DIR/model.safetensors)",
            [&](const string& v) {
              if (v.empty()) throw UsageError("--weights expects a file, got ''");
              a.weights = v;
            });
  cli.flag("Model", "--bf16",
           "round every projection and the output head to bfloat16: half the bytes a decode "
           "step reads of a float model (default: the weights as stored)",
           [&] { a.bf16 = true; });
  cli.flag("Model", "--mmap",
           "map a GGUF file instead of reading it into huge pages (memory shared with the "
           "page cache; decode of block weights up to 1.3x slower)",
           [&] { a.mmap = true; });
  cli.flag("Model", "--no-interleave-q4",
           "keep a GGUF file's Q4_0 and Q4_K weights in rows as stored; by default they are "
           "interleaved by eights in place at load (Q4_0 generation 1.2-1.4x faster with AVX2 "
           "alone, 1.0-1.2x with AVX-512; Q4_K_M 1.0-1.07x, X then in Q8_K; no extra memory)",
           [&] { a.interleave_q4 = false; });
  cli.flag(
      "Model", "--interleave-q4",
      "interleave a GGUF file's Q4_0 and Q4_K weights by eights (the default; for scripts that "
      "name it)",
      [&] { a.interleave_q4 = true; });
  // Prompt
  cli.value("Prompt", "--prompt", "TEXT", "the prompt, encoded with the model's tokenizer",
            [&](const string& v) { a.prompt = v; });
  cli.value("Prompt", "--prompt-ids", "IDS",
            "the prompt as token ids, \"1,2,3\" or \"1 2 3\" (instead of --prompt)",
            [&](const string& v) {
              std::vector<kappa::TokenId> ids;
              for (const long long x : kappa_cli::parse_int_list("--prompt-ids", v, INT32_MAX))
                ids.push_back(static_cast<kappa::TokenId>(x));
              a.prompt_ids = std::move(ids);
            });
  // Sampling
  cli.flag("Prompt", "--chat",
           "treat --prompt as a user message and render it with the model's chat template "
           "(tokenizer_config.json's chat_template, or the GGUF file's "
           "tokenizer.chat_template), ending with the assistant's turn",
           [&] { a.chat = true; });
  cli.value("Prompt", "--system", "TEXT", "with --chat: a system message before the user's",
            [&](const string& v) { a.system = v; });
  cli.value("Sampling", "--max-new-tokens", "N", "generate at most N tokens (default 64)",
            [&](const string& v) {
              a.max_new_tokens = kappa_cli::parse_int("--max-new-tokens", v, 0, 1 << 30);
            });
  cli.flag("Sampling", "--greedy",
           "always take the most likely token (the default unless a sampling option is given; "
           "overrides them)",
           [&] { a.greedy = true; });
  cli.value(
      "Sampling", "--temperature", "T",
      "sample from softmax(logits / T); 0 is greedy (default 1 when sampling)",
      [&](const string& v) {
        const double t = kappa_cli::parse_double("--temperature", v);
        if (!(t >= 0) || !std::isfinite(t))
          throw UsageError("--temperature expects a number >= 0 (0: greedy), got '" + v + "'");
        a.temperature = t;
      });
  cli.value("Sampling", "--top-k", "K", "sample among the K most likely tokens (default 0: all)",
            [&](const string& v) { a.top_k = kappa_cli::parse_int("--top-k", v, 0, 1 << 30); });
  cli.value("Sampling", "--top-p", "P",
            "sample among the most likely tokens whose probabilities add up to P (default 1: "
            "all)",
            [&](const string& v) { a.top_p = kappa_cli::parse_double("--top-p", v); });
  cli.value("Sampling", "--min-p", "P",
            "drop tokens less likely than P times the most likely one (default 0: none)",
            [&](const string& v) { a.min_p = kappa_cli::parse_double("--min-p", v); });
  cli.value(
      "Sampling", "--repeat-penalty", "R",
      "divide the positive logits (multiply the negative ones) of tokens already in the "
      "sequence by R (default 1: off)",
      [&](const string& v) { a.repeat_penalty = kappa_cli::parse_double("--repeat-penalty", v); });
  cli.value("Sampling", "--seed", "S",
            "seed of the draws: the same seed gives the same tokens (default 0)",
            [&](const string& v) {
              a.seed = static_cast<std::uint64_t>(kappa_cli::parse_int("--seed", v, 0, INT64_MAX));
            });
  cli.value("Sampling", "--stop", "STR",
            "stop when STR appears in the generated text (repeat for several)",
            [&](const string& v) {
              if (v.empty()) throw UsageError("--stop expects a non-empty string");
              a.stops.push_back(v);
            });
  cli.flag("Sampling", "--ignore-eos",
           "do not stop at the end-of-text token(s): generate all --max-new-tokens (default: "
           "stop at the EOS of generation_config.json or the tokenizer)",
           [&] { a.ignore_eos = true; });
  cli.value("Sampling", "--num-beams", "B",
            "beam search with B beams (Hugging Face's num_beams; default 1: no beam search); "
            "the best sequence is printed when the search ends",
            [&](const string& v) {
              a.beams.num_beams = kappa_cli::parse_int("--num-beams", v, 1, 1024);
            });
  cli.value("Sampling", "--length-penalty", "L",
            "beam search: a hypothesis scores sum log p / length^L (default 1)",
            [&](const string& v) {
              a.beams.length_penalty = kappa_cli::parse_double("--length-penalty", v);
            });
  cli.value("Sampling", "--early-stopping", "WHEN",
            "beam search: false (default: stop when no beam can win at the current length), "
            "true (when B hypotheses have ended) or never (when no beam can win at any length)",
            [&](const string& v) {
              if (v == "false")
                a.beams.early_stopping = kappa::EarlyStopping::kHeuristic;
              else if (v == "true")
                a.beams.early_stopping = kappa::EarlyStopping::kFirst;
              else if (v == "never")
                a.beams.early_stopping = kappa::EarlyStopping::kNever;
              else
                throw UsageError("--early-stopping expects false, true or never, got '" + v + "'");
            });
  // Output
  cli.flag("Output", "--json",
           "print one JSON object instead of the text: {\"prompt_ids\": [...], "
           "\"generated_ids\": [...], \"text\": \"...\", \"stop\": \"...\"}; with --bench the "
           "measurements",
           [&] { a.json = true; });
  cli.value("Output", "--logprobs", "N",
            "with --json: each generated token's log-probability under the model (before the "
            "sampling options) and the N most probable tokens of its step (0 .. 1000)",
            [&](const string& v) { a.logprobs = kappa_cli::parse_int("--logprobs", v, 0, 1000); });
  cli.value("Output", "--logits", "FILE",
            "write the logits of every prompt position as a float32 .npy (prompt length x "
            "vocabulary)",
            [&](const string& v) { a.logits_file = v; });
  // Performance
  cli.value("Performance", "--threads", "N",
            "threads for the products and attention (default " + default_threads() + ")",
            [&](const string& v) {
              a.threads = static_cast<int>(kappa_cli::parse_int("--threads", v, 1, 1024));
            });
  cli.value("Performance", "--cache-type", "TYPE",
            "how the cache stores keys and values (DeepSeek: its latent rows): f32 (default), "
            "bf16, f16 (half the bytes) or int8 (a quarter, plus a scale per row); the error "
            "each costs is in the README",
            [&](const string& v) {
              try {
                a.cache_format = kappa::cache::parse_format(v);
              } catch (const std::invalid_argument&) {
                throw UsageError("--cache-type expects f32, bf16, f16 or int8, got '" + v + "'");
              }
            });
  cli.flag("Performance", "--bench",
           "benchmark instead of generating: prefill a prompt of --bench-prompt token ids, then "
           "decode --bench-gen tokens (EOS ignored), --reps times; prints the median, min and "
           "max tokens/s of each as a table (or --json)",
           [&] { a.bench = true; });
  cli.value("Performance", "--bench-prompt", "N", "prompt tokens of --bench (default 128)",
            [&](const string& v) {
              a.bench_prompt = kappa_cli::parse_int("--bench-prompt", v, 1, 1 << 24);
            });
  cli.value(
      "Performance", "--bench-gen", "M", "tokens decoded by --bench (default 64)",
      [&](const string& v) { a.bench_gen = kappa_cli::parse_int("--bench-gen", v, 0, 1 << 24); });
  cli.value("Performance", "--reps", "R", "repetitions of --bench (default 5)",
            [&](const string& v) {
              a.reps = static_cast<int>(kappa_cli::parse_int("--reps", v, 1, 1000));
            });

  if (!cli.parse(argc, argv)) return std::nullopt;

  if (a.model.empty()) throw UsageError("--model DIR|FILE.gguf is required");
  if (a.prompt && a.prompt_ids) throw UsageError("give --prompt or --prompt-ids, not both");
  if (a.bench) {
    for (const char* o :
         {"--prompt", "--prompt-ids", "--max-new-tokens", "--stop", "--logits", "--ignore-eos"})
      if (cli.given(o))
        throw UsageError(std::string(o) +
                         " does not apply to --bench (it makes its own prompt of "
                         "--bench-prompt ids, decodes --bench-gen tokens and ignores EOS)");
  } else {
    if (!a.prompt && !a.prompt_ids)
      throw UsageError("--prompt TEXT or --prompt-ids IDS is required");
    if (a.chat && !a.prompt) throw UsageError("--chat needs --prompt TEXT (the user's message)");
    if (a.system && !a.chat) throw UsageError("--system needs --chat");
    if (a.logprobs && !a.json) throw UsageError("--logprobs needs --json");
    if (a.beams.num_beams > 1) {
      for (const char* o : {"--stop", "--logprobs", "--temperature", "--top-k", "--top-p",
                            "--min-p", "--seed", "--repeat-penalty"})
        if (cli.given(o))
          throw UsageError(std::string(o) + " does not apply to beam search (--num-beams > 1)");
    } else {
      for (const char* o : {"--length-penalty", "--early-stopping"})
        if (cli.given(o)) throw UsageError(std::string(o) + " needs --num-beams B > 1");
    }
    for (const char* o : {"--bench-prompt", "--bench-gen", "--reps"})
      if (cli.given(o)) throw UsageError(std::string(o) + " needs --bench");
  }
  return a;
}

bool is_gguf(const std::string& model) {
  std::error_code ec;
  return model.ends_with(".gguf") && !std::filesystem::is_directory(model, ec);
}

// --chat: the user's message (and --system's) rendered with the model's chat
// template, ending with the assistant's turn (add_generation_prompt).
std::string chat_prompt(const Args& a, const kappa::runtime::Model& lm) {
  std::vector<kappa::tokenize::ChatMessage> messages;
  if (a.system) messages.push_back({"system", *a.system});
  messages.push_back({"user", *a.prompt});
  return lm.apply_chat_template(messages, /*add_generation_prompt=*/true);
}

// Sampling options of the command line on top of the model's.
void apply_sampling(const Args& a, kappa::GenerateOptions& opt) {
  const bool zero_temperature = a.temperature && *a.temperature == 0;
  const bool sample =
      !a.greedy && !zero_temperature && (a.temperature || a.top_k || a.top_p || a.min_p || a.seed);
  opt.decoding = sample ? kappa::Decoding::kSample : kappa::Decoding::kGreedy;
  if (sample) {  // greedy decoding takes none of these (GenerateOptions::validate)
    if (a.temperature) opt.sampling.temperature = *a.temperature;
    if (a.top_k) opt.sampling.top_k = *a.top_k;
    if (a.top_p) opt.sampling.top_p = *a.top_p;
    if (a.min_p) opt.sampling.min_p = *a.min_p;
  }
  if (a.repeat_penalty) opt.sampling.repetition_penalty = *a.repeat_penalty;
  if (a.seed) opt.seed = *a.seed;
  opt.stop_strings = a.stops;
  if (a.ignore_eos) opt.eos_ids = std::vector<kappa::TokenId>{};  // never stop at an id
  opt.cache_format = a.cache_format;
  if (a.logprobs) {
    opt.logprobs = true;
    opt.top_logprobs = *a.logprobs;
  }
  try {
    opt.validate();
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// Median, min and max of rates.
struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats stats_of(std::vector<double> x) {
  if (x.empty()) return {};
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  const double median = n % 2 == 1 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
  return {median, x.front(), x.back()};
}

// --bench: prefill N token ids, decode M tokens, R times (after one short
// warm-up pass that touches every weight once).
int bench(const Args& a, const kappa::runtime::Model& lm, double load_s) {
  const kappa::Index n = a.bench_prompt, m = a.bench_gen;
  const kappa::Index context = lm.context_length();
  if (context > 0 && n + m > context)
    throw UsageError("--bench-prompt " + std::to_string(n) + " + --bench-gen " + std::to_string(m) +
                     " tokens exceed the model's context length " + std::to_string(context));
  // The prompt: ids drawn uniformly from the vocabulary with a fixed seed,
  // the same in every run and build.
  kappa::Rng rng(2024);
  std::vector<kappa::TokenId> prompt(static_cast<std::size_t>(n));
  for (kappa::TokenId& id : prompt)
    id = static_cast<kappa::TokenId>(rng.next() % static_cast<std::uint64_t>(lm.vocab_size()));

  kappa::GenerateOptions opt;
  apply_sampling(a, opt);
  opt.eos_ids = std::vector<kappa::TokenId>{};
  // The first new token comes with the prefill; M more are M decode steps.
  opt.max_new_tokens = m + 1;
  opt.context_length = n + m + 1;  // the last token is chosen, never fed

  kappa::GenerateOptions warm = opt;
  warm.max_new_tokens = 2;
  (void)lm.generate_ids(std::span<const kappa::TokenId>(prompt.data(), 1), warm);

  std::vector<double> prefill, decode;
  for (int r = 0; r < a.reps; ++r) {
    const kappa::Generation g = lm.generate_ids(std::span<const kappa::TokenId>(prompt), opt);
    if (g.timing.decode_tokens() != m)
      throw std::runtime_error("--bench: decoded " + std::to_string(g.timing.decode_tokens()) +
                               " tokens instead of " + std::to_string(m) +
                               " (stop: " + kappa::to_string(g.stop) + ")");
    prefill.push_back(g.timing.prefill_tokens_per_second());
    if (m > 0) decode.push_back(g.timing.decode_tokens_per_second());
  }
  const Stats p = stats_of(prefill), d = stats_of(decode);
  const int threads = kappa::runtime::num_threads();
  const double weight_mb = static_cast<double>(lm.weight_bytes()) / 1e6;
  if (a.json) {
    const auto rates = [](const Stats& s, const std::vector<double>& runs) {
      return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}, {"runs", runs}};
    };
    nlohmann::json out = {{"model", a.model},
                          {"model_type", lm.model_type()},
                          {"weights", lm.weights_format()},
                          {"weight_bytes", lm.weight_bytes()},
                          {"threads", threads},
                          {"reps", a.reps},
                          {"prompt_tokens", n},
                          {"gen_tokens", m},
                          {"load_seconds", load_s},
                          {"prefill_tokens_per_second", rates(p, prefill)}};
    if (m > 0) out["decode_tokens_per_second"] = rates(d, decode);
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf(
        "model: %s (%s, %ld layers, vocabulary %ld) | weights: %.1f MB (%s) | threads: %d "
        "| reps: %d | load: %.2f s\n\n",
        a.model.c_str(), lm.model_type().c_str(), static_cast<long>(lm.num_layers()),
        static_cast<long>(lm.vocab_size()), weight_mb, lm.weights_format(), threads, a.reps,
        load_s);
    std::printf("| %-8s | %8s | %18s | %12s | %12s |\n", "test", "tokens", "tokens/s (median)",
                "min", "max");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(10, '-').c_str(), std::string(10, '-').c_str(),
                std::string(20, '-').c_str(), std::string(14, '-').c_str(),
                std::string(14, '-').c_str());
    const auto row = [](const char* name, kappa::Index tokens, const Stats& s) {
      std::printf("| %-8s | %8ld | %18.2f | %12.2f | %12.2f |\n", name, static_cast<long>(tokens),
                  s.median, s.min, s.max);
    };
    row("prefill", n, p);
    if (m > 0) row("decode", m, d);
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw std::runtime_error("cannot write the output");
  return 0;
}

int run(const Args& a) {
  if (!a.weights.empty() && is_gguf(a.model))
    throw UsageError("--weights applies to a model directory, not to a GGUF file");
  const auto t0 = std::chrono::steady_clock::now();
  // kAsStored: a directory's float weights stay dense, a GGUF file's blocks
  // stay blocks.
  const kappa::runtime::Model lm = kappa::runtime::Model::load(
      a.model, {.weights = a.bf16 ? kappa::runtime::LoadOptions::Weights::kBf16
                                  : kappa::runtime::LoadOptions::Weights::kAsStored,
                .weights_file = a.weights,
                .file_memory = a.mmap ? kappa::runtime::LoadOptions::FileMemory::kMapped
                                      : kappa::runtime::LoadOptions::FileMemory::kHugePages,
                .interleave_q4 = a.interleave_q4});
  const kappa::runtime::Tokenizer& tok = lm.tokenizer();
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.bench) return bench(a, lm, load_s);

  kappa::GenerateOptions opt = lm.default_options();
  if (a.max_new_tokens) opt.max_new_tokens = *a.max_new_tokens;
  apply_sampling(a, opt);

  std::vector<kappa::TokenId> prompt_ids;
  if (a.prompt_ids) {
    prompt_ids = *a.prompt_ids;
    for (const kappa::TokenId id : prompt_ids)
      if (id >= lm.vocab_size())
        throw UsageError("--prompt-ids: id " + std::to_string(id) +
                         " is out of range for the model's vocabulary of " +
                         std::to_string(lm.vocab_size()) + " tokens");
  } else if (a.chat) {
    // The template writes the special tokens (BOS included) itself, so the
    // text is encoded without adding any, as transformers'
    // apply_chat_template(tokenize=True) does.
    prompt_ids = tok.encode(chat_prompt(a, lm), kappa::tokenize::AddSpecial::kNo);
  } else {
    prompt_ids = tok.encode(*a.prompt);
  }
  if (!a.logits_file.empty()) {
    const kappa::RowMatrix<float> logits = lm.forward(prompt_ids);  // (N, N_T)
    kappa::io::write_npy(a.logits_file, logits);
  }
  const bool tty = isatty(fileno(stdout)) != 0;
  const auto show = [&](std::string_view piece) {
    if (!a.json) {
      const std::string shown = tty ? for_terminal(piece) : std::string(piece);
      std::fwrite(shown.data(), 1, shown.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  const std::span<const kappa::TokenId> prompt(prompt_ids);
  kappa::Generation g;
  if (a.beams.num_beams > 1) {  // the whole search first, then the best sequence
    g = std::move(lm.beam_search(prompt, opt, a.beams)[0]);
    show(g.text);
  } else {
    g = lm.generate(prompt, opt, show);
  }
  if (a.json) {
    nlohmann::json out = {{"prompt_ids", prompt_ids},
                          {"generated_ids", g.ids},
                          {"text", g.text},
                          {"stop", kappa::to_string(g.stop)}};
    if (a.beams.num_beams > 1) out["sequence_score"] = g.sequence_score;
    if (a.logprobs) {
      nlohmann::json steps = nlohmann::json::array();
      const auto entry = [&](kappa::TokenId id, double lp) {
        return nlohmann::json{{"id", id}, {"token", tok.token(id)}, {"logprob", lp}};
      };
      for (const kappa::TokenLogprob& t : g.logprobs) {
        nlohmann::json step = entry(t.id, t.logprob);
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
        step["top"] = std::move(top);
        steps.push_back(std::move(step));
      }
      out["logprobs"] = std::move(steps);
    }
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw std::runtime_error("cannot write the output");

  // The cache's size: bytes per token times the tokens held at the end.
  const double cache_bytes = static_cast<double>(lm.cache_bytes_per_token(a.cache_format)) *
                             static_cast<double>(prompt_ids.size() + g.ids.size());
  std::fprintf(stderr,
               "prompt: %zu tokens | prefill: %.1f tokens/s | decode: %.2f tokens/s (%ld tokens) | "
               "weights: %.1f MB (%s) | cache: %.2f MB (%s) | load: %.2f s | stop: %s | "
               "threads: %d\n",
               prompt_ids.size(), g.timing.prefill_tokens_per_second(),
               g.timing.decode_tokens_per_second(), static_cast<long>(g.timing.decode_tokens()),
               static_cast<double>(lm.weight_bytes()) / 1e6, lm.weights_format(), cache_bytes / 1e6,
               kappa::cache::to_string(a.cache_format), load_s, kappa::to_string(g.stop),
               kappa::runtime::num_threads());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Args> parsed = parse(argc, argv);
    if (!parsed) return 0;  // --help
    const Args& a = *parsed;
    // Without --threads: Eigen's default, all cores (OMP_NUM_THREADS) with
    // OpenMP, else 1.
    if (a.threads && kappa::runtime::set_num_threads(*a.threads) < *a.threads)
      std::fprintf(stderr,
                   "%s: warning: --threads %d has no effect: this build has no OpenMP, so it runs "
                   "on 1 thread (configure with -DKAPPA_USE_OPENMP=ON, or the preset tools)\n",
                   kProgram, *a.threads);
    return run(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", kProgram, e.what(), kProgram);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
    return 1;
  }
}
