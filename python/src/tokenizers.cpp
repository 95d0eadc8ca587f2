// The tokenizers: character (Figure 1), word (Figure 2), byte-level BPE from
// GPT-2's files or tiktoken rank files, and Hugging Face directories
// (kappa::runtime::Tokenizer, compiled in kappa::runtime).
#include <variant>

#include "common.hpp"
#include "kappa/runtime.hpp"
#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/char_tokenizer.hpp"
#include "kappa/tokenize/word_tokenizer.hpp"

namespace kappa::python {

namespace tk = kappa::tokenize;

namespace {

/// Text as UTF-8 bytes: a str, or bytes as they are (byte-level tokenizers
/// encode any byte string).
std::string text_bytes(const py::object& text) {
  if (py::isinstance<py::bytes>(text)) return text.cast<std::string>();
  if (py::isinstance<py::str>(text)) return text.cast<std::string>();
  throw py::type_error("kappa: text must be str or bytes");
}

/// Bytes as a str, invalid UTF-8 replaced by U+FFFD (as tiktoken's decode).
py::str to_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::list to_list(const std::vector<TokenId>& ids) {
  py::list out(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) out[i] = py::int_(ids[i]);
  return out;
}

using AnyBpe = std::variant<tk::Gpt2Tokenizer, tk::Cl100kTokenizer, tk::O200kTokenizer>;

struct PyBpe {
  AnyBpe tok;
  std::string encoding;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

template <class Tok>
void def_common(py::class_<Tok>& cls) {
  cls.def_property_readonly(
         "vocab_size", [](const Tok& t) { return t.vocab_size(); }, "N_T")
      .def("__len__", [](const Tok& t) { return t.vocab_size(); })
      .def(
          "find", [](const Tok& t, const std::string& s) { return t.find(s); }, py::arg("token"),
          "The id of a token's text, or None.");
}

}  // namespace

void register_tokenizers(py::module_& m) {
  // ---- Character tokenizer ---------------------------------------------------------------
  py::class_<tk::CharTokenizer> chars(
      m, "CharTokenizer",
      "Tokens of up to K code points (the paper's Figure 1), greedy longest match; id 0 is "
      "'<unk>'.");
  chars
      .def(py::init<const std::vector<std::string>&, std::size_t>(), py::arg("tokens"),
           py::arg("max_chars") = 2, "From a list of tokens (ids 1.. in order).")
      .def_static("from_corpus", &tk::CharTokenizer::from_corpus, py::arg("corpus"),
                  py::arg("vocab_size"), py::arg("max_chars") = 2,
                  "Every character of the corpus, then its most frequent K-grams.")
      .def(
          "encode",
          [](const tk::CharTokenizer& t, const std::string& s) { return to_list(t.encode(s)); },
          py::arg("text"))
      .def(
          "decode",
          [](const tk::CharTokenizer& t, const py::object& ids) {
            return to_str(t.decode(to_ids(ids)));
          },
          py::arg("ids"))
      .def(
          "token", [](const tk::CharTokenizer& t, TokenId id) { return to_str(t.token(id)); },
          py::arg("id"));
  def_common(chars);

  // ---- Word tokenizer --------------------------------------------------------------------
  py::class_<tk::WordTokenizer> words(
      m, "WordTokenizer",
      "Words (letters, marks, digits, _) and single punctuation characters (Figure 2), with a "
      "frequency vocabulary built from a corpus; id 0 is the unknown token.");
  words
      .def(py::init([](const std::string& corpus, std::size_t min_frequency, std::size_t max_size,
                       const std::string& unknown, const std::vector<std::string>& specials) {
             tk::WordVocabularyOptions o;
             o.min_frequency = min_frequency;
             o.max_size = max_size;
             o.unknown = unknown;
             o.specials = specials;
             return tk::WordTokenizer(corpus, o);
           }),
           py::arg("corpus"), py::kw_only(), py::arg("min_frequency") = 1, py::arg("max_size") = 0,
           py::arg("unknown") = "<unk>", py::arg("specials") = std::vector<std::string>{})
      .def(
          "encode",
          [](const tk::WordTokenizer& t, const std::string& s) { return to_list(t.encode(s)); },
          py::arg("text"))
      .def(
          "decode",
          [](const tk::WordTokenizer& t, const py::object& ids) {
            return to_str(t.decode(to_ids(ids)));
          },
          py::arg("ids"), "The tokens joined with single spaces.")
      .def(
          "token", [](const tk::WordTokenizer& t, TokenId id) { return to_str(t.token(id)); },
          py::arg("id"));
  def_common(words);

  // ---- Byte-level BPE ----------------------------------------------------------------------
  py::class_<PyBpe>(m, "BpeTokenizer",
                    "Byte-level BPE with tiktoken's exact ids: GPT-2 / r50k_base, cl100k_base, "
                    "o200k_base.")
      .def_static(
          "from_gpt2_files",
          [](const std::string& encoder_json, const std::string& vocab_bpe) {
            return PyBpe{tk::Gpt2Tokenizer::from_gpt2_files(encoder_json, vocab_bpe), "gpt2"};
          },
          py::arg("encoder_json"), py::arg("vocab_bpe"), "GPT-2's encoder.json and vocab.bpe.")
      .def_static(
          "from_tiktoken_file",
          [](const std::string& path, const std::string& encoding) {
            const std::string e = lower(encoding);
            if (e == "gpt2" || e == "r50k_base")
              return PyBpe{tk::Gpt2Tokenizer::from_tiktoken_file(path), e};
            if (e == "cl100k_base") return PyBpe{tk::Cl100kTokenizer::from_tiktoken_file(path), e};
            if (e == "o200k_base") return PyBpe{tk::O200kTokenizer::from_tiktoken_file(path), e};
            throw std::invalid_argument("kappa: unknown encoding '" + encoding +
                                        "' (gpt2, r50k_base, cl100k_base, o200k_base)");
          },
          py::arg("path"), py::arg("encoding"),
          "A tiktoken rank file; `encoding` names its split pattern and special tokens.")
      .def_property_readonly("encoding", [](const PyBpe& b) { return b.encoding; })
      .def_property_readonly("vocab_size",
                             [](const PyBpe& b) {
                               return std::visit([](const auto& t) { return t.vocab_size(); },
                                                 b.tok);
                             })
      .def("__len__",
           [](const PyBpe& b) {
             return std::visit([](const auto& t) { return t.vocab_size(); }, b.tok);
           })
      .def(
          "encode",
          [](const PyBpe& b, const py::object& text, bool allow_special) {
            const std::string s = text_bytes(text);
            std::vector<TokenId> ids;
            {
              py::gil_scoped_release release;
              ids = std::visit(
                  [&](const auto& t) {
                    return t.encode(s, allow_special ? tk::SpecialTokens::kRecognize
                                                     : tk::SpecialTokens::kAsText);
                  },
                  b.tok);
            }
            return to_list(ids);
          },
          py::arg("text"), py::kw_only(), py::arg("allow_special") = false,
          "Token ids of text (str or bytes); special-token text is text unless allow_special.")
      .def(
          "decode",
          [](const PyBpe& b, const py::object& ids) {
            return to_str(std::visit([&](const auto& t) { return t.decode(to_ids(ids)); }, b.tok));
          },
          py::arg("ids"), "The text (invalid UTF-8 replaced by U+FFFD; decode_bytes keeps it).")
      .def(
          "decode_bytes",
          [](const PyBpe& b, const py::object& ids) {
            return py::bytes(
                std::visit([&](const auto& t) { return t.decode(to_ids(ids)); }, b.tok));
          },
          py::arg("ids"))
      .def(
          "token",
          [](const PyBpe& b, TokenId id) {
            return py::bytes(std::visit([&](const auto& t) { return t.token(id); }, b.tok));
          },
          py::arg("id"), "A token's bytes.")
      .def(
          "find",
          [](const PyBpe& b, const py::object& token) {
            const std::string s = text_bytes(token);
            return std::visit([&](const auto& t) { return t.find(s); }, b.tok);
          },
          py::arg("token"));

  // ---- Hugging Face directories (compiled in kappa::runtime) -------------------------------
  py::class_<runtime::Tokenizer>(
      m, "Tokenizer",
      "A Hugging Face tokenizer (tokenizer.json and its relatives: byte-level BPE, "
      "SentencePiece-style BPE, WordPiece, Unigram, SentencePiece model files), with the ids "
      "of Hugging Face's tokenizers.")
      .def_static(
          "from_directory",
          [](const std::string& dir) { return runtime::Tokenizer::from_directory(dir); },
          py::arg("directory"))
      .def(
          "encode",
          [](const runtime::Tokenizer& t, const py::object& text, bool add_special) {
            const std::string s = text_bytes(text);
            std::vector<TokenId> ids;
            {
              py::gil_scoped_release release;
              ids = t.encode(s, add_special ? tk::AddSpecial::kYes : tk::AddSpecial::kNo);
            }
            return to_list(ids);
          },
          py::arg("text"), py::kw_only(), py::arg("add_special") = true,
          "Token ids, with the BOS/EOS the tokenizer adds unless add_special=False.")
      .def(
          "decode",
          [](const runtime::Tokenizer& t, const py::object& ids, bool skip_special) {
            return to_str(
                t.decode(to_ids(ids), skip_special ? tk::SkipSpecial::kYes : tk::SkipSpecial::kNo));
          },
          py::arg("ids"), py::kw_only(), py::arg("skip_special") = false)
      .def(
          "token", [](const runtime::Tokenizer& t, TokenId id) { return py::bytes(t.token(id)); },
          py::arg("id"), "A token's bytes (its piece decoded).")
      .def(
          "find", [](const runtime::Tokenizer& t, const std::string& s) { return t.find(s); },
          py::arg("token"))
      .def("is_special", &runtime::Tokenizer::is_special, py::arg("id"))
      .def_property_readonly("vocab_size", &runtime::Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &runtime::Tokenizer::bos_id)
      .def_property_readonly("eos_id", &runtime::Tokenizer::eos_id)
      .def("__len__", &runtime::Tokenizer::vocab_size);
}

}  // namespace kappa::python
