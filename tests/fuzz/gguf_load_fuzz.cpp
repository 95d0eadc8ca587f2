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
// (version 3, the model's tensor count), the input, the model's tensor table,
// padding to 32 bytes and the model's tensor data (an in-memory file, memfd).
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
#include "kappa/transformer/gguf_load.hpp"

namespace {

constexpr std::array<const char*, 6> kModels = {"llama-q8_0", "gpt2-f32",     "qwen2-f32",
                                                "qwen3-f32",  "mixtral-q8_0", "deepseek_v2-f32"};

/// A model file cut around its metadata: the tensor count, the tensor table
/// and the tensor data (the data section's offset is re-aligned to 32).
struct Template {
  std::uint64_t n_tensors = 0;
  std::string own_metadata, table, data;
};

/// A cursor over a GGUF file that the tests commit (valid by construction;
/// a short read is a broken checkout and stops the fuzzer).
struct Cursor {
  const std::string& s;
  std::size_t at = 0;
  std::uint64_t u(std::size_t n) {
    KAPPA_FUZZ_CHECK(at + n <= s.size(), "truncated template model");
    std::uint64_t v = 0;
    std::memcpy(&v, s.data() + at, n);  // little-endian host (x86, arm64)
    at += n;
    return v;
  }
  void skip(std::size_t n) {
    KAPPA_FUZZ_CHECK(at + n <= s.size(), "truncated template model");
    at += n;
  }
  void skip_string() { skip(static_cast<std::size_t>(u(8))); }
  void skip_value(std::uint64_t type) {
    static constexpr std::array<std::size_t, 13> kSize = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    KAPPA_FUZZ_CHECK(type < kSize.size(), "template model: value type");
    if (type == 8) return skip_string();
    if (type == 9) {
      const std::uint64_t element = u(4), n = u(8);
      for (std::uint64_t i = 0; i < n; ++i) skip_value(element);
      return;
    }
    skip(kSize[type]);
  }
};

Template cut(const std::string& file) {
  Cursor c{file};
  KAPPA_FUZZ_CHECK(file.compare(0, 4, "GGUF") == 0, "template model: magic");
  c.skip(4);
  KAPPA_FUZZ_CHECK(c.u(4) == 3, "template model: version");
  Template t;
  t.n_tensors = c.u(8);
  const std::uint64_t n_kv = c.u(8);
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    c.skip_string();
    c.skip_value(c.u(4));
  }
  const std::size_t table = c.at;
  for (std::uint64_t i = 0; i < t.n_tensors; ++i) {
    c.skip_string();
    c.skip(8 * static_cast<std::size_t>(c.u(4)) + 4 + 8);  // dims, type, offset
  }
  t.own_metadata = file.substr(16, table - 16);
  t.table = file.substr(table, c.at - table);
  const std::size_t data = (c.at + 31) / 32 * 32;  // the committed files align to 32
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
  f.append((32 - f.size() % 32) % 32, '\0');
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
      out.push_back(cut(bytes));
      // The model's own metadata spliced back gives the file byte for byte
      // (else the cut's assumptions, e.g. data aligned to 32, do not hold).
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
