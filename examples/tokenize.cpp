// tokenize: text -> tokens -> ids -> vectors, as in the paper's Figures 1
// and 2. Reads text (argument, --file or stdin), tokenizes it with the chosen
// tokenizer, prints each token and its id, looks the ids up in a seeded
// embedding matrix E, adds sinusoidal positions, and prints the shapes.
//
//   tokenize --char "Attention is all you need"
//   tokenize --gpt2 build/test/vocab/gpt2 --json "hello world"   # [31373, 995]
//   tokenize --tiktoken cl100k_base.tiktoken --file README.md
//   echo "the cat sat on the mat" | tokenize --word
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "kappa/core/checked.hpp"
#include "kappa/embed/embedding.hpp"
#include "kappa/embed/positional.hpp"
#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/char_tokenizer.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/sentencepiece_model.hpp"
#include "kappa/tokenize/word_tokenizer.hpp"

namespace tk = kappa::tokenize;

namespace {

constexpr const char* kHelp = R"(usage: tokenize [options] [TEXT]

Tokenizes TEXT (or the file given by --file, or standard input when neither is
given), prints each token with its id, then embeds the ids (X = rows of a
seeded embedding matrix E, plus sinusoidal positions) and prints the shapes.

Tokenizer (choose one; default --char):
  --char              character tokenizer: tokens of up to K characters (code
                      points), greedy longest match; vocabulary = every
                      character of the corpus + its most frequent K-grams
  --k K               K for --char (default 2)
  --vocab-size N      vocabulary size for --char (default 256)
  --word              word tokenizer: words and punctuation, vocabulary from
                      the corpus (unknown words -> <unk>)
  --min-frequency N   minimum corpus frequency for --word (default 1)
  --corpus PATH       corpus for the --char/--word vocabulary (default: the text)
  --gpt2 DIR          GPT-2 byte-level BPE from DIR/encoder.json + DIR/vocab.bpe
  --encoder PATH      GPT-2 encoder.json (with --merges; instead of --gpt2 DIR)
  --merges PATH       GPT-2 vocab.bpe (with --encoder)
  --tiktoken PATH     byte-level BPE from a tiktoken rank file
  --pattern NAME      split pattern for --tiktoken: gpt2, cl100k or o200k
                      (default: guessed from the file name, else cl100k)
  --hf PATH           a Hugging Face tokenizer of any family (byte-level or
                      SentencePiece-style BPE, WordPiece, Unigram): a model
                      directory, a tokenizer.json, or a SentencePiece
                      tokenizer.model; with its BOS/EOS (--no-add-special: without)
  --no-add-special    with --hf: leave out the BOS/EOS or [CLS]/[SEP] it adds
  --special           recognize special tokens such as <|endoftext|> (BPE and
                      --hf; by default their text is encoded as ordinary text)

Input:
  --file PATH         read the text from PATH
  TEXT                the text itself (all remaining arguments, joined by spaces)

Output:
  --json              print only the token ids, as one JSON array
  --dim D             embedding width d (default 8)
  --seed S            seed of the embedding matrix (default 42)
  --help              this help

A missing or malformed file (or a directory given as a file), and output that
cannot be written, print one line "tokenize: error: ..." and exit with
status 1; a bad option exits with status 2.
)";

struct Options {
  std::string mode = "char";
  std::size_t k = 2, vocab_size = 256, min_frequency = 1;
  std::optional<std::string> corpus, file, gpt2_dir, encoder, merges, tiktoken, pattern, hf;
  bool special = false, json = false, add_special = true;
  kappa::Index dim = 8;
  std::uint64_t seed = 42;
  std::string text;
  bool have_text = false;
};

/// Flushes standard output; false (with errno set) if anything written to it
/// was lost, e.g. on a full disk or /dev/full.
bool output_ok() {
  std::cout.flush();
  return std::fflush(stdout) == 0 && !std::ferror(stdout) && std::cout.good();
}

/// The exit status after the output was written: 1 with one line on stderr
/// if it could not be written.
int finish(int status) {
  if (output_ok()) return status;
  std::cerr << "tokenize: error: cannot write the output: " << std::strerror(errno) << "\n";
  return 1;
}

[[noreturn]] void usage_error(const std::string& what) {
  std::cerr << "tokenize: " << what << " (see --help)\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage_error(std::string("option ") + argv[i] + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) -> std::size_t {
    const std::string opt = argv[i], v = value(i);
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0')
      usage_error("option " + opt + " needs a number, got '" + v + "'");
    return static_cast<std::size_t>(n);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      std::exit(finish(0));
    } else if (a == "--char")
      o.mode = "char";
    else if (a == "--word")
      o.mode = "word";
    else if (a == "--k")
      o.k = number(i);
    else if (a == "--vocab-size")
      o.vocab_size = number(i);
    else if (a == "--min-frequency")
      o.min_frequency = number(i);
    else if (a == "--corpus")
      o.corpus = value(i);
    else if (a == "--gpt2") {
      o.mode = "gpt2";
      o.gpt2_dir = value(i);
    } else if (a == "--encoder") {
      o.mode = "gpt2";
      o.encoder = value(i);
    } else if (a == "--merges") {
      o.mode = "gpt2";
      o.merges = value(i);
    } else if (a == "--tiktoken") {
      o.mode = "tiktoken";
      o.tiktoken = value(i);
    } else if (a == "--hf") {
      o.mode = "hf";
      o.hf = value(i);
    } else if (a == "--no-add-special")
      o.add_special = false;
    else if (a == "--pattern")
      o.pattern = value(i);
    else if (a == "--special")
      o.special = true;
    else if (a == "--file")
      o.file = value(i);
    else if (a == "--json")
      o.json = true;
    else if (a == "--dim")
      o.dim = static_cast<kappa::Index>(number(i));
    else if (a == "--seed")
      o.seed = number(i);
    else if (a.size() > 1 && a[0] == '-' && a[1] == '-')
      usage_error("unknown option " + a);
    else {
      o.text += (o.have_text ? " " : "") + a;
      o.have_text = true;
    }
  }
  if (o.mode == "gpt2" && !o.gpt2_dir && !(o.encoder && o.merges))
    usage_error("--encoder needs --merges and vice versa");
  if (o.corpus && o.mode != "char" && o.mode != "word")
    usage_error("--corpus applies to --char and --word only");
  if (o.k < 1) usage_error("--k must be >= 1");
  if (o.dim < 1) usage_error("--dim must be >= 1");
  return o;
}

/// A token's bytes for display: printable text as is, other bytes as \xNN.
std::string show(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const tk::Utf8Char c = tk::decode_utf8(s, i);
    if (c.valid && c.code_point >= 0x20 && c.code_point != 0x7F) {
      out.append(s.substr(i, c.length));
    } else if (c.valid && c.code_point == '\n') {
      out += "\\n";
    } else if (c.valid && c.code_point == '\t') {
      out += "\\t";
    } else {
      const auto b = static_cast<unsigned char>(s[i]);
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
    i += c.length;
  }
  return out;
}

/// The largest embedding matrix E the example allocates: 2^28 floats (1 GiB).
constexpr std::int64_t kMaxEmbeddingElements = std::int64_t{1} << 28;

template <class Tok>
int run(const Tok& tok, const Options& o, const std::string& text, std::vector<kappa::TokenId> ids,
        const char* name) {
  if (!o.json)  // before any output: E (N_T x d) must fit, or one error line
    (void)kappa::checked_mul("embedding matrix E (N_T x d)",
                             static_cast<std::int64_t>(tok.vocab_size()), o.dim,
                             kMaxEmbeddingElements);
  if (o.json) {
    std::cout << "[";
    for (std::size_t k = 0; k < ids.size(); ++k) std::cout << (k ? ", " : "") << ids[k];
    std::cout << "]\n";
    return 0;
  }
  std::cout << "tokenizer: " << name << ", vocabulary N_T = " << tok.vocab_size() << "\n";
  std::cout << "text: " << text.size() << " bytes -> " << ids.size() << " tokens\n";
  std::cout << "  j     id  token\n";
  for (std::size_t j = 0; j < ids.size(); ++j) {
    std::printf("%3zu %6d  |%s|\n", j, static_cast<int>(ids[j]), show(tok.token(ids[j])).c_str());
  }
  // Figure 2: X_j = E_{i_j}, then positions added (X + P).
  const auto n_t = static_cast<kappa::Index>(tok.vocab_size());
  const kappa::InputEmbedding<float, kappa::SinusoidalPositions<float>> input(
      kappa::Embedding<float>::random(n_t, o.dim, o.seed, 1.0),
      kappa::SinusoidalPositions<float>(o.dim));
  const kappa::RowMatrix<float> x = input.tokens().lookup(ids);
  const kappa::RowMatrix<float> x_pos = input(ids);
  std::cout << "E: " << n_t << " x " << o.dim << " (N_T x d)\n";
  std::cout << "X = [E_{i_1}; ...; E_{i_N}]: " << x.rows() << " x " << x.cols() << " (N x d)\n";
  std::cout << "X + P (sinusoidal positions): " << x_pos.rows() << " x " << x_pos.cols()
            << " (N x d)\n";
  if (x.rows() > 0) {
    std::cout << "X_1 = E_" << ids[0] << " =";
    for (kappa::Index c = 0; c < x.cols() && c < 8; ++c)
      std::printf(" %.4f", static_cast<double>(x(0, c)));
    std::cout << (x.cols() > 8 ? " ...\n" : "\n");
  }
  const std::string back = tok.decode(ids);
  std::cout << "decode(ids): |" << show(back) << "|"
            << (back == text ? " (the text, byte for byte)" : "") << "\n";
  return 0;
}

template <class Tok>
int run_bpe(const Tok& tok, const Options& o, const std::string& text, const char* name) {
  return run(
      tok, o, text,
      tok.encode(text, o.special ? tk::SpecialTokens::kRecognize : tk::SpecialTokens::kAsText),
      name);
}

/// Reads the input, tokenizes it and prints the result; throws on bad files.
int run_main(const Options& o) {
  std::string text;
  if (o.file) {
    text = tk::read_file(*o.file);
  } else if (o.have_text) {
    text = o.text;
  } else {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  if (o.mode == "char") {
    const std::string corpus = o.corpus ? tk::read_file(*o.corpus) + text : text;
    const auto tok = tk::CharTokenizer::from_corpus(corpus, o.vocab_size, o.k);
    return run(tok, o, text, tok.encode(text), "character (greedy longest match)");
  }
  if (o.mode == "word") {
    tk::WordVocabularyOptions w;
    w.min_frequency = o.min_frequency;
    const auto tok = tk::WordTokenizer(o.corpus ? tk::read_file(*o.corpus) : text, w);
    return run(tok, o, text, tok.encode(text), "word");
  }
  if (o.mode == "hf") {
    namespace fs = std::filesystem;
    const std::string& path = *o.hf;
    std::error_code ec;
    const tk::HfTokenizer tok =
        fs::is_directory(path, ec) ? tk::HfTokenizer::from_directory(path)
        : path.ends_with(".model")
            ? tk::HfTokenizer::from_sentencepiece(tk::SentencePieceModel::read(path))
            : tk::HfTokenizer::from_tokenizer_json(path);
    static constexpr const char* kFamilies[] = {"byte-level BPE", "SentencePiece-style BPE",
                                                "WordPiece", "Unigram"};
    const std::string name =
        std::string("Hugging Face, ") + kFamilies[static_cast<int>(tok.family())];
    return run(tok, o, text,
               tok.encode(text, o.add_special ? tk::AddSpecial::kYes : tk::AddSpecial::kNo,
                          o.special ? tk::SpecialTokens::kRecognize : tk::SpecialTokens::kAsText),
               name.c_str());
  }
  if (o.mode == "gpt2") {
    const std::string enc = o.gpt2_dir ? *o.gpt2_dir + "/encoder.json" : *o.encoder;
    const std::string merges = o.gpt2_dir ? *o.gpt2_dir + "/vocab.bpe" : *o.merges;
    return run_bpe(tk::Gpt2Tokenizer::from_gpt2_files(enc, merges), o, text,
                   "GPT-2 byte-level BPE");
  }
  const std::string& f = *o.tiktoken;
  auto named = [&](const char* n) { return f.find(n) != std::string::npos; };
  std::string pattern = o.pattern.value_or("");
  if (pattern.empty())
    pattern = named("o200k")                                      ? "o200k"
              : (named("r50k") || named("p50k") || named("gpt2")) ? "gpt2"
                                                                  : "cl100k";
  // The special tokens of the known encodings, by file name; none otherwise.
  const bool known =
      named("o200k") || named("cl100k") || named("r50k") || named("p50k") || named("gpt2");
  const std::optional<std::vector<tk::SpecialToken>> specials =
      known ? std::nullopt
            : std::optional<std::vector<tk::SpecialToken>>(std::vector<tk::SpecialToken>{});
  if (pattern == "gpt2")
    return run_bpe(tk::Gpt2Tokenizer::from_tiktoken_file(f, specials), o, text,
                   "tiktoken BPE, GPT-2 pattern");
  if (pattern == "cl100k")
    return run_bpe(tk::Cl100kTokenizer::from_tiktoken_file(f, specials), o, text,
                   "tiktoken BPE, cl100k pattern");
  if (pattern == "o200k")
    return run_bpe(tk::O200kTokenizer::from_tiktoken_file(f, specials), o, text,
                   "tiktoken BPE, o200k pattern");
  usage_error("unknown --pattern '" + pattern + "' (gpt2, cl100k or o200k)");
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int status = 0;
  try {
    status = run_main(o);
  } catch (const std::bad_alloc&) {
    (void)output_ok();
    std::cerr << "tokenize: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    (void)output_ok();  // what was printed before the error goes out first
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::cerr << "tokenize: error: " << msg << "\n";
    return 1;
  }
  return finish(status);
}
