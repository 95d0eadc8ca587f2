// examples/quantize.cpp - write a Hugging Face model directory as the GGUF
// file llama.cpp runs (kappa/transformer/gguf_write.hpp), its matrices in
// F32, F16, BF16, Q8_0 or Q4_0 (byte for byte as ggml's reference quantizer
// makes them), Q4_K or Q6_K (kappa's own k-quant quantizer), or q4_k_m:
// llama-quantize's Q4_K_M choice of Q4_K and Q6_K per tensor. Vectors stay
// F32.
//
//   quantize --model DIR --out FILE.gguf [--type q8_0|q4_0|q4_k_m|q4_k|q6_k|f16|bf16|f32]
//
// Supported: llama and mistral (general.architecture llama), qwen2, with a
// byte-level BPE tokenizer.json. Prints the tensors' bytes before and after.
// Errors (an unsupported model, an unreadable file, a bad option) are one
// line on stderr and a non-zero exit status; a bad option exits with 2.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iterator>
#include <string>
#include <utility>

#include "kappa/io/gguf.hpp"
#include "kappa/transformer/gguf_write.hpp"

namespace {

constexpr const char* kUsage =
    "usage: quantize --model DIR --out FILE.gguf [--type q8_0|q4_0|q4_k_m|q4_k|q6_k|f16|bf16|f32]\n"
    "       (default q8_0)\n";

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
  using kappa::gguf::WeightMix;
  using kappa::io::GgmlType;
  const std::pair<const char*, GgmlType> kTypes[] = {
      {"q8_0", GgmlType::kQ8_0}, {"q4_0", GgmlType::kQ4_0},   {"q4_k", GgmlType::kQ4_K},
      {"q6_k", GgmlType::kQ6_K}, {"q4_k_m", GgmlType::kQ4_K}, {"f16", GgmlType::kF16},
      {"bf16", GgmlType::kBF16}, {"f32", GgmlType::kF32}};
  const auto* it = std::find_if(std::begin(kTypes), std::end(kTypes),
                                [&type](const auto& p) { return type == p.first; });
  if (it == std::end(kTypes)) return usage("unknown --type " + type);
  const GgmlType t = it->second;
  const WeightMix mix = type == "q4_k_m" ? WeightMix::kQ4_K_M : WeightMix::kUniform;
  try {
    kappa::gguf::write_hf_directory(model, out, t, mix);
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
