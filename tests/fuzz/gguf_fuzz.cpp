// Fuzz target: the GGUF reader (include/kappa/io/gguf.hpp) and the block
// dequantizers (include/kappa/core/quant_blocks.hpp).
//
// Input: a .gguf file, handed over as an in-memory file (memfd) so the real
// path-taking, memory-mapping API is exercised. Properties:
//   * opening either succeeds or throws kappa::FormatError (everything is
//     validated before a tensor is read: no sanitizer report, no exception of
//     another type, no allocation sized by an unchecked count);
//   * a file that opens has version 2 or 3, a power-of-two alignment, and
//     every tensor lies inside the file, aligned, of the size its type and
//     dims give, overlapping no other tensor (checked here independently);
//   * every metadata key is found by name with its own type through get<T>;
//     get_integer gives an int64 or FormatError;
//   * every tensor dequantizes to rows() x cols() = numel floats, and the
//     flat dequantize_into equals the matrix.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "fuzz_common.hpp"
#include "kappa/io/gguf.hpp"

namespace {

void check_metadata(const kappa::io::GgufFile& f) {
  for (const kappa::io::GgufKeyValue& kv : f.metadata()) {
    KAPPA_FUZZ_CHECK(f.find(kv.key) == &kv.value, "metadata key not found by name: " + kv.key);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          KAPPA_FUZZ_CHECK(&f.get<T>(kv.key) == &v, "get<T> of the key's own type: " + kv.key);
        },
        kv.value);
    try {
      (void)f.get_integer(kv.key);
    } catch (const kappa::FormatError&) {
    }
  }
}

void check_tensors(const kappa::io::GgufFile& f) {
  struct Range {
    std::uint64_t begin, end;
  };
  std::vector<Range> ranges;
  for (const kappa::io::GgufTensorInfo& t : f.tensors()) {
    const kappa::io::GgmlTypeInfo* info =
        kappa::io::ggml_type_info(static_cast<std::uint32_t>(t.type));
    KAPPA_FUZZ_CHECK(info != nullptr && info->supported, "unsupported type accepted: " + t.name);
    KAPPA_FUZZ_CHECK(!t.dims.empty() && t.dims.size() <= 4, "n_dims out of range: " + t.name);
    std::int64_t numel = 1;
    for (std::int64_t d : t.dims) numel *= d;  // validated not to overflow
    KAPPA_FUZZ_CHECK(numel == t.numel && t.dims[0] % info->block_size == 0,
                     "numel or block size: " + t.name);
    KAPPA_FUZZ_CHECK(
        t.bytes == static_cast<std::uint64_t>(numel / info->block_size * info->type_size),
        "byte count: " + t.name);
    KAPPA_FUZZ_CHECK(t.offset % f.alignment() == 0 && t.file_offset == f.data_offset() + t.offset,
                     "alignment: " + t.name);
    KAPPA_FUZZ_CHECK(t.file_offset <= f.file_size() && t.bytes <= f.file_size() - t.file_offset,
                     "tensor outside the file: " + t.name);
    KAPPA_FUZZ_CHECK(f.raw(t.name).size() == t.bytes, "raw size: " + t.name);
    if (t.bytes) ranges.push_back({t.file_offset, t.file_offset + t.bytes});
    const kappa::RowMatrix<float> m = f.dequantize(t.name);
    KAPPA_FUZZ_CHECK(m.rows() == t.rows() && m.cols() == t.cols() && m.size() == numel,
                     "dequantized shape: " + t.name);
    std::vector<float> flat(static_cast<std::size_t>(numel));
    f.dequantize_into(t, flat.data());
    KAPPA_FUZZ_CHECK(numel == 0 || std::memcmp(flat.data(), m.data(), flat.size() * 4) == 0,
                     "dequantize_into differs from dequantize: " + t.name);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < ranges.size(); ++i)
    KAPPA_FUZZ_CHECK(ranges[i - 1].end <= ranges[i].begin, "overlapping tensors accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kappa::fuzz::MemFile in("kappa-fuzz-gguf-in");
  in.assign(kappa::fuzz::as_text(data, size));
  try {
    const kappa::io::GgufFile f(in.path());
    KAPPA_FUZZ_CHECK(f.version() == 2 || f.version() == 3, "version");
    KAPPA_FUZZ_CHECK(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0,
                     "alignment not a power of two");
    check_metadata(f);
    check_tensors(f);
    // Its Q4_0 tensors interleaved in place read back as the same floats.
    const kappa::io::GgufFile il(in.path(), kappa::io::Residence::kMapped, true);
    for (const kappa::io::GgufTensorInfo& t : il.tensors()) {
      const kappa::RowMatrix<float> a = f.dequantize(t.name), b = il.dequantize(t.name);
      KAPPA_FUZZ_CHECK(a.size() == 0 || std::memcmp(a.data(), b.data(),
                                                    static_cast<std::size_t>(a.size()) * 4) == 0,
                       "interleaved Q4_0 reads back otherwise: " + t.name);
    }
  } catch (const kappa::FormatError&) {
  }
  return 0;
}
