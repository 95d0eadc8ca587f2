// Fuzz target: whole-model loading from a Hugging Face directory whose
// config.json is the fuzz input and whose weights are one of the tiny
// reference checkpoints (tests/data/models): the config's sizes against
// real weights, the class of issue 24's items 2, 7 and 11.
//
// Input: the first byte picks the checkpoint (gpt2, llama, mistral, qwen2,
// deepseek_v2, bert, the paper's transformer), the rest is config.json.
// Properties:
//   * loading succeeds or throws one of kappa's error types (FormatError,
//     ShapeError, RangeError), never another exception, a crash or a
//     sanitizer report;
//   * nothing is sized by the config before the weights confirm it: run.sh
//     gives -malloc_limit_mb=2048, so one allocation above 2 GB (the tiny
//     checkpoints hold 0.3 MB) is a finding;
//   * a model that loads gives finite logits on a few tokens (no config
//     value can make them inf or NaN) of the shape the model states.

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/transformer/hf.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::array<const char*, 7> kModels = {"gpt2",        "llama", "mistral",    "qwen2",
                                                "deepseek_v2", "bert",  "transformer"};

/// One directory per checkpoint under the temp dir, holding a link to the
/// reference weights; config.json is rewritten for every input.
const std::vector<fs::path>& model_dirs() {
  static const std::vector<fs::path> dirs = [] {
    std::vector<fs::path> out;
    const fs::path root =
        fs::temp_directory_path() / ("kappa_fuzz_hf_load_" + std::to_string(::getpid()));
    for (const char* m : kModels) {
      const fs::path src = fs::path(KAPPA_FUZZ_MODELS_DIR) / m / "model.safetensors";
      const fs::path dir = root / m;
      fs::create_directories(dir);
      fs::remove(dir / "model.safetensors");
      fs::create_symlink(src, dir / "model.safetensors");
      out.push_back(dir);
    }
    return out;
  }();
  return dirs;
}

template <class Logits>
void check_logits(const Logits& l, kappa::Index rows, kappa::Index cols) {
  KAPPA_FUZZ_CHECK(l.rows() == rows && l.cols() == cols, "logits of the wrong shape");
  KAPPA_FUZZ_CHECK(l.allFinite(), "a config made the logits non-finite");
}

void load_and_run(std::size_t which, const fs::path& dir) {
  const std::vector<kappa::TokenId> ids = {0, 1, 2};
  const std::string model = kModels[which];
  if (model == "bert") {
    const kappa::Bert<float> m = kappa::hf::load_bert<float>(dir);
    if (m.vocab_size() < 3 || m.max_positions() < 3) return;
    const kappa::RowMatrix<float> h = m.hidden(ids);
    check_logits(h, 3, m.d_model());
  } else if (model == "transformer") {
    const kappa::PaperTransformer<float> m = kappa::hf::load_paper_transformer<float>(dir);
    if (m.tgt_vocab_size() < 3) return;
    const kappa::RowMatrix<float> memory = m.encode(std::vector<kappa::TokenId>{0});
    check_logits(m.decode(memory, ids), 3, m.tgt_vocab_size());
  } else {
    const auto m = kappa::hf::load_causal_lm<float>(dir);
    if (m.vocab_size() < 3 || (m.context_length() > 0 && m.context_length() < 3)) return;
    check_logits(m.forward(ids), 3, m.vocab_size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in = kappa::fuzz::as_text(data, size);
  const std::size_t which = kappa::fuzz::take_byte(in) % kModels.size();
  const fs::path& dir = model_dirs()[which];
  {
    std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
    out.write(in.data(), static_cast<std::streamsize>(in.size()));
    KAPPA_FUZZ_CHECK(static_cast<bool>(out), "cannot write config.json");
  }
  try {
    load_and_run(which, dir);
  } catch (const kappa::FormatError&) {
  } catch (const kappa::ShapeError&) {
  } catch (const kappa::RangeError&) {
  }
  return 0;
}
