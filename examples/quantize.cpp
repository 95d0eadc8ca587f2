// examples/quantize.cpp - write a Hugging Face model directory as the GGUF
// file llama.cpp runs (kappa/transformer/gguf_write.hpp), its matrices in
// F32, F16, BF16, Q8_0 or Q4_0 (byte for byte as ggml's reference quantizer
// makes them; vectors stay F32).
//
//   quantize --model DIR --out FILE.gguf [--type q8_0|q4_0|f16|bf16|f32]
//
// Supported: llama and mistral (general.architecture llama), qwen2, with a
// byte-level BPE tokenizer.json. Prints the tensors' bytes before and after.
// Errors (an unsupported model, an unreadable file, a bad option) are one
// line on stderr and a non-zero exit status; a bad option exits with 2.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "kappa/io/gguf.hpp"
#include "kappa/transformer/gguf_write.hpp"

namespace {

constexpr const char* kUsage =
    "usage: quantize --model DIR --out FILE.gguf [--type q8_0|q4_0|f16|bf16|f32] (default q8_0)\n";

int usage(const std::string& what) {
  std::fprintf(stderr, "quantize: %s\n%s", what.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, out, type = "q8_0";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return usage("option " + a + " needs a value");
    if (a == "--model")
      model = argv[++i];
    else if (a == "--out")
      out = argv[++i];
    else if (a == "--type")
      type = argv[++i];
    else
      return usage("unknown option " + a);
  }
  if (model.empty() || out.empty()) return usage("--model and --out are required");
  using kappa::io::GgmlType;
  const GgmlType t = type == "q8_0"   ? GgmlType::kQ8_0
                     : type == "q4_0" ? GgmlType::kQ4_0
                     : type == "f16"  ? GgmlType::kF16
                     : type == "bf16" ? GgmlType::kBF16
                     : type == "f32"  ? GgmlType::kF32
                                      : GgmlType::kQ4_K;
  if (t == GgmlType::kQ4_K) return usage("unknown --type " + type);
  try {
    kappa::gguf::write_hf_directory(model, out, t);
    const kappa::io::GgufFile f(out);
    std::uint64_t bytes = 0;
    for (const auto& info : f.tensors()) bytes += info.bytes;
    std::printf("%s: %zu tensors, %.3f MB of weights as %s (file %.3f MB)\n", out.c_str(),
                f.tensors().size(), static_cast<double>(bytes) / 1e6, type.c_str(),
                static_cast<double>(f.file_size()) / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quantize: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
