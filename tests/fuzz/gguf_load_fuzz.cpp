// Fuzz target: whole-model and tokenizer loading from a GGUF file whose
// metadata is the fuzz input and whose tensors are those of one of the tiny
// reference GGUF models (tests/data/models/llama-gguf): the metadata's sizes
// and tokenizer keys against real tensors, the analogue of hf_load for GGUF.
// (gguf fuzzes the reader and the dequantizers on whole files.)
//
// Input: the first byte picks the model (llama Q8_0, gpt2, qwen2, qwen3,
// mixtral Q8_0, deepseek2); the rest is the metadata section as a GGUF file
// stores it, the key-value count (u64, little-endian) followed by the
// key-value pairs. The file handed to the loader is the GGUF header
// (version 3, the model's tensor count), the input, the model's tensor table
// with its padding, padding to the model's alignment and the model's tensor
// data (an in-memory file, memfd).
// Properties:
//   * gguf::load (model and tokenizer) succeeds or throws one of kappa's
//     error types (FormatError, ShapeError, RangeError), never another
//     exception, a crash or a sanitizer report;
//   * nothing is sized by the metadata before the tensors confirm it: run.sh
//     gives -malloc_limit_mb=2048, so one allocation above 2 GB (the models
//     hold at most 0.3 MB) is a finding;
//   * a model that loads gives finite logits on a few tokens, of the shape
//     it states, and its tokenizer encodes a short text to ids below its
//     vocabulary size.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/io/gguf.hpp"
#include "kappa/transformer/gguf_load.hpp"

namespace {

constexpr std::array<const char*, 6> kModels = {"llama-q8_0", "gpt2-f32",     "qwen2-f32",
                                                "qwen3-f32",  "mixtral-q8_0", "deepseek_v2-f32"};

/// A model file cut around its metadata by kappa's reader: the tensor count,
/// the tensor table with its padding, and the tensor data.
struct Template {
  std::uint64_t n_tensors = 0, alignment = 0;  // both set by cut()
  std::string own_metadata, table, data;
};

Template cut(const std::string& path, const std::string& file) {
  const kappa::io::GgufFile g(path);
  KAPPA_FUZZ_CHECK(g.version() == 3, "template model: version");
  const auto table = static_cast<std::size_t>(g.tensor_table_offset());
  const auto data = static_cast<std::size_t>(g.data_offset());
  Template t;
  t.n_tensors = g.tensors().size();
  t.alignment = g.alignment();
  t.own_metadata = file.substr(16, table - 16);
  t.table = file.substr(table, data - table);
  t.data = file.substr(data);
  return t;
}

/// The GGUF file of `metadata` (the count and the pairs) around t's tensors.
std::string file_of(const Template& t, std::string_view metadata) {
  std::string f = "GGUF";
  const auto put = [&f](std::uint64_t v, std::size_t n) {
    char b[8];
    std::memcpy(b, &v, 8);
    f.append(b, n);
  };
  put(3, 4);
  put(t.n_tensors, 8);
  f.append(metadata);
  f.append(t.table);
  f.append((t.alignment - f.size() % t.alignment) % t.alignment, '\0');
  f.append(t.data);
  return f;
}

const std::vector<Template>& templates() {
  static const std::vector<Template> all = [] {
    std::vector<Template> out;
    for (const char* m : kModels) {
      const std::string path = std::string(KAPPA_FUZZ_MODELS_DIR) + "/llama-gguf/" + m + ".gguf";
      std::ifstream in(path, std::ios::binary);
      KAPPA_FUZZ_CHECK(static_cast<bool>(in), "cannot read " + path);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      out.push_back(cut(path, bytes));
      // The model's own metadata spliced back gives the file byte for byte.
      KAPPA_FUZZ_CHECK(file_of(out.back(), out.back().own_metadata) == bytes,
                       path + " is not spliced back to itself");
    }
    return out;
  }();
  return all;
}

void load_and_run(const std::string& path) {
  const auto loaded = kappa::gguf::load<float>(path);
  const auto& m = loaded.model;
  const auto vocab = static_cast<std::size_t>(m.vocab_size());
  const std::vector<kappa::TokenId> ids = loaded.tokenizer.encode("hello world, the end");
  KAPPA_FUZZ_CHECK(kappa::fuzz::ids_in_range(ids, loaded.tokenizer.vocab_size()),
                   "the tokenizer gave an id outside its vocabulary");
  if (vocab < 3 || (m.context_length() > 0 && m.context_length() < 3)) return;
  const kappa::RowMatrix<float> logits = m.forward(std::vector<kappa::TokenId>{0, 1, 2});
  KAPPA_FUZZ_CHECK(logits.rows() == 3 && logits.cols() == m.vocab_size(),
                   "logits of the wrong shape");
  KAPPA_FUZZ_CHECK(logits.allFinite(), "the metadata made the logits non-finite");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kappa::fuzz::MemFile file("kappa-fuzz-gguf-load");
  std::string_view in = kappa::fuzz::as_text(data, size);
  const Template& t = templates()[kappa::fuzz::take_byte(in) % kModels.size()];
  file.assign(file_of(t, in));
  try {
    load_and_run(file.path());
  } catch (const kappa::FormatError&) {
  } catch (const kappa::ShapeError&) {
  } catch (const kappa::RangeError&) {
  }
  return 0;
}
