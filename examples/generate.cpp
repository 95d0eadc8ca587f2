// examples/generate.cpp - generate text with a Hugging Face model directory
// or a llama.cpp GGUF file (llama, qwen2, gpt2 architectures; its tokenizer
// and EOS come from the file's metadata).
//
//   generate --model DIR|FILE.gguf --prompt TEXT [--max-new-tokens N] [--temperature T]
//            [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]
//            [--threads N] [--greedy] [--stop STR]... [--bf16] [--json]
//            [--logits FILE]
//
// Prints the text as it is generated (stdout), then on stderr: the prompt's
// tokens, prefill and decode tokens/s, the weights' and the cache's bytes,
// the load time and why generation stopped. Decoding is greedy unless one of
// --temperature, --top-k, --top-p, --min-p or --seed asks for sampling
// (--greedy overrides). --json prints one JSON object instead of the text
// ({"prompt_ids": [...], "generated_ids": [...], "text": "...", "stop": "..."}).
// --logits FILE writes the logits of every prompt position as a float32 .npy
// (prompt length x vocabulary). A GGUF file's weights stay as the file
// stores them (Q8_0, Q4_0, ... blocks viewed in the mapped file; F32 tensors
// in float). --bf16 rounds every projection and the output head to bfloat16
// (half the bytes a decode step reads of a float model).
// Errors (a missing directory, an unreadable file, a bad option) are one
// line on stderr and a non-zero exit status.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kappa/core/threading.hpp"
#include "kappa/io/npy.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/utf8.hpp"
#include "kappa/transformer/generate.hpp"
#include "kappa/transformer/gguf_load.hpp"
#include "kappa/transformer/hf.hpp"

namespace {

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
  std::string model, prompt, logits_file;
  std::optional<kappa::Index> max_new_tokens, top_k;
  std::optional<double> temperature, top_p, min_p, repeat_penalty;
  std::optional<std::uint64_t> seed;
  int threads = 1;
  bool greedy = false, json = false, bf16 = false;
  std::vector<std::string> stops;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr const char* kUsage =
    "usage: generate --model DIR|FILE.gguf --prompt TEXT [--max-new-tokens N --temperature T "
    "--top-k K "
    "--top-p P --min-p P --repeat-penalty R --seed S --threads N --greedy --stop STR --bf16 "
    "--json --logits FILE]";

double parse_double(const std::string& opt, const std::string& v) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) throw UsageError(opt + " expects a number, got '" + v + "'");
  return x;
}
long long parse_int(const std::string& opt, const std::string& v, long long lo, long long hi) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || x < lo || x > hi)
    throw UsageError(opt + " expects an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got '" + v + "'");
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  bool have_prompt = false;
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (opt == "--help" || opt == "-h") {
      std::printf("%s\n", kUsage);
      std::exit(0);
    }
    if (opt == "--greedy") {
      a.greedy = true;
      continue;
    }
    if (opt == "--json") {
      a.json = true;
      continue;
    }
    if (opt == "--bf16") {
      a.bf16 = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError("unknown option or missing value: " + opt);
    const std::string v = argv[++i];
    if (opt == "--model")
      a.model = v;
    else if (opt == "--prompt") {
      a.prompt = v;
      have_prompt = true;
    } else if (opt == "--max-new-tokens")
      a.max_new_tokens = parse_int(opt, v, 0, 1 << 30);
    else if (opt == "--temperature")
      a.temperature = parse_double(opt, v);
    else if (opt == "--top-k")
      a.top_k = parse_int(opt, v, 0, 1 << 30);
    else if (opt == "--top-p")
      a.top_p = parse_double(opt, v);
    else if (opt == "--min-p")
      a.min_p = parse_double(opt, v);
    else if (opt == "--repeat-penalty")
      a.repeat_penalty = parse_double(opt, v);
    else if (opt == "--seed")
      a.seed = static_cast<std::uint64_t>(parse_int(opt, v, 0, INT64_MAX));
    else if (opt == "--threads")
      a.threads = static_cast<int>(parse_int(opt, v, 1, 1024));
    else if (opt == "--stop")
      a.stops.push_back(v);
    else if (opt == "--logits")
      a.logits_file = v;
    else
      throw UsageError("unknown option: " + opt);
  }
  if (a.model.empty()) throw UsageError("--model DIR|FILE.gguf is required");
  if (!have_prompt) throw UsageError("--prompt TEXT is required");
  return a;
}

// A model directory, or a llama.cpp GGUF file (its tokenizer inside).
template <class S>
struct Loaded {
  kappa::hf::CausalLM<float, S> lm;
  kappa::tokenize::HfTokenizer tok;
  kappa::GenerateOptions opt;
};
template <class S>
Loaded<S> load(const std::string& model) {
  std::error_code ec;
  if (model.ends_with(".gguf") && !std::filesystem::is_directory(model, ec)) {
    auto g = kappa::gguf::load<float, S>(model);
    kappa::GenerateOptions opt;
    if (g.eos_id) opt.eos_ids = std::vector<kappa::TokenId>{*g.eos_id};
    return {std::move(g.model), std::move(g.tokenizer), std::move(opt)};
  }
  auto lm = kappa::hf::load_causal_lm<float, S>(model);
  auto tok = kappa::tokenize::HfTokenizer::from_directory(model);
  return {std::move(lm), std::move(tok), kappa::hf::generation_options(model)};
}

template <class S>
int run(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  Loaded<S> loaded = load<S>(a.model);
  const auto& lm = loaded.lm;
  const auto& tok = loaded.tok;
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  kappa::GenerateOptions opt = std::move(loaded.opt);
  if (a.max_new_tokens) opt.max_new_tokens = *a.max_new_tokens;
  const bool sample = !a.greedy && (a.temperature || a.top_k || a.top_p || a.min_p || a.seed);
  opt.decoding = sample ? kappa::Decoding::kSample : kappa::Decoding::kGreedy;
  if (a.temperature) opt.sampling.temperature = *a.temperature;
  if (a.top_k) opt.sampling.top_k = *a.top_k;
  if (a.top_p) opt.sampling.top_p = *a.top_p;
  if (a.min_p) opt.sampling.min_p = *a.min_p;
  if (a.repeat_penalty) opt.sampling.repetition_penalty = *a.repeat_penalty;
  if (a.seed) opt.seed = *a.seed;
  opt.stop_strings = a.stops;
  try {
    opt.validate();
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  const std::vector<kappa::TokenId> prompt_ids = tok.encode(a.prompt);
  if (!a.logits_file.empty()) {
    const kappa::RowMatrix<float> logits = lm.forward(prompt_ids);  // (N, N_T)
    kappa::io::write_npy(a.logits_file, logits);
  }
  const bool tty = isatty(fileno(stdout)) != 0;
  const kappa::Generation g = kappa::generate(
      lm, tok, std::span<const kappa::TokenId>(prompt_ids), opt, [&](std::string_view piece) {
        if (!a.json) {
          const std::string shown = tty ? for_terminal(piece) : std::string(piece);
          std::fwrite(shown.data(), 1, shown.size(), stdout);
          std::fflush(stdout);
        }
        return true;
      });
  if (a.json) {
    const nlohmann::json out = {{"prompt_ids", prompt_ids},
                                {"generated_ids", g.ids},
                                {"text", g.text},
                                {"stop", kappa::to_string(g.stop)}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw std::runtime_error("cannot write the output");

  // The cache's size: bytes per token (one token through a fresh cache) times
  // the tokens held at the end.
  auto probe = lm.make_cache();
  (void)lm.forward_cached(
      std::span<const kappa::TokenId>(prompt_ids.data(), prompt_ids.empty() ? 0 : 1), probe,
      kappa::LogitsFor::kLast);
  const double cache_bytes =
      static_cast<double>(probe.bytes()) * static_cast<double>(prompt_ids.size() + g.ids.size());
  std::fprintf(stderr,
               "prompt: %zu tokens | prefill: %.1f tokens/s | decode: %.2f tokens/s (%ld tokens) | "
               "weights: %.1f MB (%s) | cache: %.2f MB | load: %.2f s | stop: %s | threads: %d\n",
               prompt_ids.size(), g.timing.prefill_tokens_per_second(),
               g.timing.decode_tokens_per_second(), static_cast<long>(g.timing.decode_tokens()),
               static_cast<double>(lm.weight_bytes()) / 1e6, S::kName, cache_bytes / 1e6, load_s,
               kappa::to_string(g.stop), kappa::num_threads());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    kappa::set_num_threads(a.threads);
    // AsStoredWeights: a directory's float weights stay dense (as
    // DenseWeights), a GGUF file's blocks stay blocks.
    return a.bf16 ? run<kappa::Bf16Weights>(a) : run<kappa::AsStoredWeights>(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "generate: %s (see generate --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
}
