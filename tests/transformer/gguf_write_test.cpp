// tests/transformer/gguf_write_test.cpp - kappa::gguf::from_hf_directory
// against llama.cpp's own converter: the tiny llama and qwen2 directories
// written by kappa have every tensor of the files convert_hf_to_gguf.py wrote
// from them (tests/data/models/llama-gguf: same name, dims, type and bytes,
// W^Q / W^K permuted as llama.cpp does, Q8_0 blocks byte for byte) and the
// same metadata and vocabulary. The round trip through the loader runs in the
// generate CLI test (tests/transformer/run_generate.cmake).
#include "kappa/transformer/gguf_write.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kappa/io/gguf.hpp"
#include "transformer/model_data.hpp"

namespace {

namespace fs = std::filesystem;
using kappa::io::GgmlType;
using kappa::io::GgufFile;

const fs::path kModels = fs::path(KAPPA_TEST_DATA_DIR) / "models";

fs::path write(const std::string& model, GgmlType type) {
  const fs::path out = fs::temp_directory_path() /
                       ("kappa_gguf_write_" + std::to_string(::getpid()) + "_" + model + ".gguf");
  kappa::gguf::write_hf_directory(kModels / model, out, type);
  return out;
}

// Every tensor of llama.cpp's file is in ours with the same dims, type and
// bytes; the keys that describe the model are equal; ours has no tensor more.
void expect_same_file(const GgufFile& ours, const GgufFile& theirs) {
  EXPECT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (const auto& t : theirs.tensors()) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(ours.has_tensor(t.name));
    const auto& o = ours.tensor(t.name);
    EXPECT_EQ(o.dims, t.dims);
    EXPECT_EQ(o.type, t.type);
    const auto a = ours.raw(t.name), b = theirs.raw(t.name);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << "bytes differ";
  }
  for (const auto& kv : theirs.metadata()) {
    if (kv.key == "general.name" || kv.key == "general.size_label" ||
        kv.key == "tokenizer.ggml.pre" || kv.key.starts_with("tokenizer.ggml.add_sep") ||
        kv.key == "tokenizer.ggml.padding_token_id" || kv.key == "tokenizer.ggml.bos_token_id")
      continue;  // names, and what the converter takes from elsewhere (see gguf_write.hpp)
    SCOPED_TRACE(kv.key);
    ASSERT_TRUE(ours.has(kv.key));
    EXPECT_TRUE(ours.value(kv.key) == kv.value);
  }
}

TEST(GgufWrite, LlamaEqualsLlamaCppsConverterInF32AndQ8_0) {
  for (const auto& [type, file] : {std::pair{GgmlType::kF32, "llama-f32.gguf"},
                                   std::pair{GgmlType::kQ8_0, "llama-q8_0.gguf"}}) {
    SCOPED_TRACE(file);
    const fs::path ours = write("llama", type);
    expect_same_file(GgufFile(ours.string()), GgufFile((kModels / "llama-gguf" / file).string()));
    EXPECT_EQ(GgufFile(ours.string()).get<std::string>("tokenizer.ggml.pre"), "llama-bpe");
    fs::remove(ours);
  }
}

TEST(GgufWrite, Qwen2EqualsLlamaCppsConverter) {
  const fs::path ours = write("qwen2", GgmlType::kF32);
  expect_same_file(GgufFile(ours.string()),
                   GgufFile((kModels / "llama-gguf" / "qwen2-f32.gguf").string()));
  fs::remove(ours);
}

TEST(GgufWrite, WhatItDoesNotWriteIsNamed) {
  const auto error = [](const fs::path& dir) -> std::string {
    try {
      (void)kappa::gguf::from_hf_directory(dir, GgmlType::kQ8_0);
    } catch (const kappa::FormatError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error(kModels / "gpt2").find("model_type: \"gpt2\" is not written"), std::string::npos);
  EXPECT_NE(error(kModels / "llama3-scaled").find("rope_scaling"), std::string::npos);
}

// llama-quantize's Q4_K_M choice, tensor by tensor: kappa's file of the
// d = 256 llama has every tensor of llama-quantize's
// (tests/data/models/llama-gguf/llama-256-q4_k_m.gguf) with the same dims
// and type (Q6_K for the head and layer 1's attn_v / ffn_down, Q4_K
// elsewhere, F32 vectors); the blocks are kappa's quantizer's, so the
// bytes differ. The file loads and its logits stay within Q4_K_M's error of
// the F32 model (llama-quantize's own file: 0.255 of the largest logit).
TEST(GgufWrite, Q4KMMixMatchesLlamaQuantizesChoice) {
  const fs::path out = fs::temp_directory_path() /
                       ("kappa_gguf_write_" + std::to_string(::getpid()) + "_q4_k_m.gguf");
  kappa::gguf::write_hf_directory(kModels / "llama-256", out, GgmlType::kQ4_K,
                                  kappa::gguf::WeightMix::kQ4_K_M);
  const GgufFile ours(out.string());
  const GgufFile theirs((kModels / "llama-gguf" / "llama-256-q4_k_m.gguf").string());
  EXPECT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (const auto& t : theirs.tensors()) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(ours.has_tensor(t.name));
    EXPECT_EQ(ours.tensor(t.name).type, t.type);
    EXPECT_EQ(ours.tensor(t.name).dims, t.dims);
  }
  EXPECT_EQ(ours.get_integer("general.file_type"), 15);
  const auto lm = kappa::gguf::load_causal_lm<float, kappa::AsStoredWeights>(out);
  const auto ids = kappa::testing::read_ids(kModels / "llama-256" / "reference" / "input_ids.npy");
  const double err = kappa::testing::scaled_error(lm.forward(ids),
                                                  kappa::testing::read_ref("llama-256", "logits"));
  EXPECT_LE(err, 0.4);
  EXPECT_GE(err, 0.01);
  fs::remove(out);
}

}  // namespace
