// kappa/io/gguf.hpp - reading GGUF files (llama.cpp's / ggml's format):
// the header, the metadata key-value pairs, the tensor table, and tensors
// in F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K, memory-mapped and validated.
//
// The format (ggml's gguf.h and docs/gguf.md; versions 2 and 3 share this
// layout, version 3 adds big-endian files, which kappa refuses):
//
//   magic "GGUF" (4 bytes), version (u32), tensor_count (u64),
//   kv_count (u64)
//   kv_count times: key (string), value type (u32), value
//   tensor_count times: name (string), n_dims (u32), ne[n_dims] (u64 each),
//                       ggml type (u32), offset (u64)
//   padding to general.alignment (u32 metadata, a power of two; default 32)
//   the data section: tensor t at data_offset + offset_t (aligned)
//
//   string = length (u64) + bytes (no terminator); array = element type
//   (u32) + count (u64) + elements (arrays may nest); bool = one byte 0 or 1.
//   Everything is little-endian.
//
// Everything is validated when the file is opened, before any tensor is
// read: counts and lengths are checked against the bytes that remain before
// anything is allocated for them, sizes use checked arithmetic, each
// tensor's type is one kappa reads, its row length a multiple of the block
// size, its offset aligned, its bytes inside the file and overlapping no
// other tensor's, and names and keys are unique. Each violation throws
// kappa::FormatError "kappa: FILE: byte N: WHAT" naming the field, e.g.
//   "kappa: model.gguf: byte 1234: tensor "blk.0.attn_q.weight": type q5_K
//    (13) is not supported (kappa reads f32, f16, bf16, q8_0, q4_0, q4_K,
//    q6_K)".
// Parsing is linear in the file size (tensor ranges are sorted once).
//
// Shapes. GGUF lists a tensor's dimensions innermost first: ne[0] is the
// length of a contiguous row (blocks run along it), ne[1] the number of
// such rows, and so on. kappa's row-major reading of a tensor is therefore
// the reversed list, and its matrix is rows() = ne[1] ne[2] ne[3] by
// cols() = ne[0]: one GGUF row per matrix row. A llama.cpp projection
// weight with ne = {d_in, d_out} reads as (d_out x d_in), the same
// (out x in) matrix as the Hugging Face tensor it came from, so the paper's
// W (d_in x d_out) is its transpose, exactly as with safetensors.
//
// Usage:
//   kappa::io::GgufFile f("model.gguf");
//   std::string arch = f.get<std::string>("general.architecture");
//   std::int64_t n_ctx = f.get_integer(arch + ".context_length");
//   const auto& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
//   kappa::RowMatrix<float> w = f.dequantize("blk.0.attn_q.weight");
//
// POSIX only (mmap); the file must not be truncated while it is mapped.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/io/safetensors.hpp"

namespace kappa::io {

/// The type of a GGUF metadata value; the numbering is the file's.
enum class GgufType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

/// "u8", "i8", ..., "f32", "bool", "string", "array", "u64", "i64", "f64".
inline std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                "i32", "f32", "bool", "string", "array",
                                                "u64", "i64", "f64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i < 13 ? kNames[i] : std::string_view("?");
}

/// A metadata array: one vector of its element type, the variant index
/// being the element's GgufType (bool arrays as `std::vector<bool>`; arrays of
/// arrays nest).
struct GgufArray {
  std::variant<std::vector<std::uint8_t>, std::vector<std::int8_t>, std::vector<std::uint16_t>,
               std::vector<std::int16_t>, std::vector<std::uint32_t>, std::vector<std::int32_t>,
               std::vector<float>, std::vector<bool>, std::vector<std::string>,
               std::vector<GgufArray>, std::vector<std::uint64_t>, std::vector<std::int64_t>,
               std::vector<double>>
      values;

  /// The type of every element.
  [[nodiscard]] GgufType element_type() const { return static_cast<GgufType>(values.index()); }
  /// Number of elements.
  [[nodiscard]] std::size_t size() const {
    return std::visit([](const auto& v) { return v.size(); }, values);
  }
  /// Equal element types and elements.
  friend bool operator==(const GgufArray&, const GgufArray&) = default;
};

/// A metadata value; the variant index is its GgufType.
using GgufValue = std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t,
                               std::uint32_t, std::int32_t, float, bool, std::string, GgufArray,
                               std::uint64_t, std::int64_t, double>;

/// The type of a metadata value.
inline GgufType gguf_type_of(const GgufValue& v) {
  return static_cast<GgufType>(v.index());
}

/// One metadata entry, in file order.
struct GgufKeyValue {
  std::string key;
  GgufValue value;
  std::uint64_t byte = 0;  ///< where the entry (its key's length) starts in the file
};

/// ggml's tensor types kappa reads (the numbering is ggml's enum ggml_type).
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
};

/// One entry of ggml's type table: id, name, weights per block, bytes per
/// block, and whether kappa reads it.
struct GgmlTypeInfo {
  std::uint32_t id;
  std::string_view name;
  std::int64_t block_size;
  std::int64_t type_size;
  bool supported;
};

/// ggml's tensor types by id, as ggml 0.25.1's ggml_type_name,
/// ggml_blck_size and ggml_type_size give them (checked against
/// tests/data/io/gguf/ggml_types.txt); ids ggml removed have an empty name.
inline constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "f32", 1, 4, true},
    {1, "f16", 1, 2, true},
    {2, "q4_0", 32, 18, true},
    {3, "q4_1", 32, 20, false},
    {4, "", 0, 0, false},
    {5, "", 0, 0, false},
    {6, "q5_0", 32, 22, false},
    {7, "q5_1", 32, 24, false},
    {8, "q8_0", 32, 34, true},
    {9, "q8_1", 32, 36, false},
    {10, "q2_K", 256, 84, false},
    {11, "q3_K", 256, 110, false},
    {12, "q4_K", 256, 144, true},
    {13, "q5_K", 256, 176, false},
    {14, "q6_K", 256, 210, true},
    {15, "q8_K", 256, 292, false},
    {16, "iq2_xxs", 256, 66, false},
    {17, "iq2_xs", 256, 74, false},
    {18, "iq3_xxs", 256, 98, false},
    {19, "iq1_s", 256, 50, false},
    {20, "iq4_nl", 32, 18, false},
    {21, "iq3_s", 256, 110, false},
    {22, "iq2_s", 256, 82, false},
    {23, "iq4_xs", 256, 136, false},
    {24, "i8", 1, 1, false},
    {25, "i16", 1, 2, false},
    {26, "i32", 1, 4, false},
    {27, "i64", 1, 8, false},
    {28, "f64", 1, 8, false},
    {29, "iq1_m", 256, 56, false},
    {30, "bf16", 1, 2, true},
    {31, "", 0, 0, false},
    {32, "", 0, 0, false},
    {33, "", 0, 0, false},
    {34, "tq1_0", 256, 54, false},
    {35, "tq2_0", 256, 66, false},
    {36, "", 0, 0, false},
    {37, "", 0, 0, false},
    {38, "", 0, 0, false},
    {39, "mxfp4", 32, 17, false},
    {40, "nvfp4", 64, 36, false},
    {41, "q1_0", 128, 18, false},
    {42, "q2_0", 64, 18, false},
};

/// The table entry of ggml type `id`, or nullptr for an id ggml does not
/// define (or removed).
inline const GgmlTypeInfo* ggml_type_info(std::uint32_t id) {
  if (id >= std::size(kGgmlTypes) || kGgmlTypes[id].name.empty()) return nullptr;
  return &kGgmlTypes[id];
}

/// ggml's name of a type kappa reads: "f32", "q8_0", "q4_K", ...
inline std::string_view ggml_type_name(GgmlType t) {
  return kGgmlTypes[static_cast<std::uint32_t>(t)].name;
}

/// What the tensor table says about one tensor, after validation.
struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> dims;  ///< GGUF order, innermost first: dims[0] = row length
  GgmlType type = GgmlType::kF32;
  std::uint64_t offset = 0;       ///< relative to the data section (aligned)
  std::uint64_t file_offset = 0;  ///< absolute byte of the data
  std::uint64_t bytes = 0;        ///< size of the data
  std::int64_t numel = 0;         ///< product of dims
  std::int64_t n_rows = 0;        ///< product of dims[1..]
  std::uint64_t byte = 0;         ///< where the entry (its name's length) starts
  /// Q4_0 and Q4_K only: the rows are held interleaved by eights
  /// (quant::Q4_0Rows8, quant::Q4_KRows8), each matrix of dims[1] rows on
  /// its own (a merged [n_expert][out][in] tensor: each expert's). A
  /// GgufFile opened with interleave_q4 holds every Q4_0 and Q4_K tensor of
  /// 2 or more dimensions so.
  bool interleaved = false;

  /// Row-major shape (outermost first): dims reversed.
  [[nodiscard]] std::vector<std::int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
  /// Rows of the matrix reading: dims[1] dims[2] dims[3].
  [[nodiscard]] Index rows() const { return n_rows; }
  /// Columns of the matrix reading: dims[0], the GGUF row length.
  [[nodiscard]] Index cols() const { return dims[0]; }
};

namespace detail {

/// How deep metadata arrays may nest (an array of arrays is depth 2).
inline constexpr int kGgufMaxNesting = 8;

/// Fewest bytes one element of each GgufType takes in a file (string: its
/// length; array: element type and count).
inline constexpr std::uint64_t kGgufMinBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};

[[noreturn]] inline void gguf_fail(std::string_view file, std::uint64_t byte,
                                   std::string_view what) {
  std::string msg = "kappa: ";
  msg += file;
  msg += ": byte ";
  msg += std::to_string(byte);
  msg += ": ";
  msg += what;
  throw FormatError(msg);
}

/// A bounds-checked little-endian cursor over the mapped file.
class GgufCursor {
 public:
  GgufCursor(const unsigned char* data, std::uint64_t size, const std::string& file)
      : data_(data), size_(size), file_(file) {}

  [[nodiscard]] std::uint64_t pos() const { return pos_; }
  [[nodiscard]] std::uint64_t left() const { return size_ - pos_; }
  [[noreturn]] void fail(std::uint64_t byte, std::string_view what) const {
    gguf_fail(file_, byte, what);
  }

  /// Field names for messages: `field`, or "`field` element `index`".
  static constexpr std::uint64_t kNoIndex = ~std::uint64_t{0};
  static std::string name(std::string_view field, std::uint64_t index) {
    std::string s(field);
    if (index != kNoIndex) s.append(" element ").append(std::to_string(index));
    return s;
  }

  void need(std::uint64_t n, std::string_view field, std::uint64_t index = kNoIndex) const {
    if (n <= left()) return;
    std::string what = name(field, index);
    what += ": needs ";
    what += std::to_string(n);
    what += " bytes but the file ends at byte ";
    what += std::to_string(size_);
    fail(pos_, what);
  }

  template <class T>
  T read(std::string_view field, std::uint64_t index = kNoIndex) {
    need(sizeof(T), field, index);
    T v{};
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view field, std::uint64_t index = kNoIndex) {
    const std::uint64_t at = pos_;
    const auto n = read<std::uint64_t>(field, index);
    if (n > left()) {
      std::string what = name(field, index);
      what += ": string length ";
      what += std::to_string(n);
      what += " runs past the end of the file (";
      what += std::to_string(left());
      what += " bytes left)";
      fail(at, what);
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(n));
    pos_ += n;
    return s;
  }

  /// Reads `n` elements of T (already checked to fit) into `out`.
  template <class T>
  void read_elements(std::uint64_t n, std::vector<T>& out) {
    out.resize(static_cast<std::size_t>(n));
    if (n) std::memcpy(out.data(), data_ + pos_, static_cast<std::size_t>(n) * sizeof(T));
    pos_ += n * sizeof(T);
  }

 private:
  const unsigned char* data_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  const std::string& file_;
};

inline GgufType read_gguf_type(GgufCursor& c, const std::string& field) {
  const std::uint64_t at = c.pos();
  const auto t = c.read<std::uint32_t>(field + " type");
  if (t > 12)
    c.fail(at, field + ": type " + std::to_string(t) + " is not a GGUF value type (0..12)");
  return static_cast<GgufType>(t);
}

inline bool read_gguf_bool(GgufCursor& c, const std::string& field,
                           std::uint64_t index = GgufCursor::kNoIndex) {
  const std::uint64_t at = c.pos();
  const auto b = c.read<std::uint8_t>(field, index);
  if (b > 1)
    c.fail(at, GgufCursor::name(field, index) + ": bool byte is " + std::to_string(b) +
                   ", must be 0 or 1");
  return b == 1;
}

inline GgufArray read_gguf_array(GgufCursor& c, const std::string& field, int depth);

inline GgufValue read_gguf_value(GgufCursor& c, GgufType t, const std::string& field, int depth) {
  switch (t) {
    case GgufType::kU8:
      return c.read<std::uint8_t>(field);
    case GgufType::kI8:
      return c.read<std::int8_t>(field);
    case GgufType::kU16:
      return c.read<std::uint16_t>(field);
    case GgufType::kI16:
      return c.read<std::int16_t>(field);
    case GgufType::kU32:
      return c.read<std::uint32_t>(field);
    case GgufType::kI32:
      return c.read<std::int32_t>(field);
    case GgufType::kF32:
      return c.read<float>(field);
    case GgufType::kBool:
      return read_gguf_bool(c, field);
    case GgufType::kString:
      return c.read_string(field);
    case GgufType::kArray:
      return read_gguf_array(c, field, depth + 1);
    case GgufType::kU64:
      return c.read<std::uint64_t>(field);
    case GgufType::kI64:
      return c.read<std::int64_t>(field);
    case GgufType::kF64:
      return c.read<double>(field);
  }
  c.fail(c.pos(), field + ": unreachable type");
}

inline GgufArray read_gguf_array(GgufCursor& c, const std::string& field, int depth) {
  if (depth > kGgufMaxNesting)
    c.fail(c.pos(), field + ": arrays nest deeper than " + std::to_string(kGgufMaxNesting));
  const GgufType et = read_gguf_type(c, field + " element");
  const std::uint64_t count_at = c.pos();
  const auto n = c.read<std::uint64_t>(field + " count");
  const std::uint64_t min_bytes = kGgufMinBytes[static_cast<std::uint32_t>(et)];
  if (n > c.left() / min_bytes)
    c.fail(count_at, field + ": array of " + std::to_string(n) + " " +
                         std::string(gguf_type_name(et)) + " elements needs at least " +
                         std::to_string(min_bytes) + " bytes each but " + std::to_string(c.left()) +
                         " bytes are left");
  GgufArray a;
  const auto numeric = [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> v;
    c.read_elements(n, v);
    a.values = std::move(v);
  };
  switch (et) {
    case GgufType::kU8:
      numeric(std::uint8_t{});
      break;
    case GgufType::kI8:
      numeric(std::int8_t{});
      break;
    case GgufType::kU16:
      numeric(std::uint16_t{});
      break;
    case GgufType::kI16:
      numeric(std::int16_t{});
      break;
    case GgufType::kU32:
      numeric(std::uint32_t{});
      break;
    case GgufType::kI32:
      numeric(std::int32_t{});
      break;
    case GgufType::kF32:
      numeric(float{});
      break;
    case GgufType::kU64:
      numeric(std::uint64_t{});
      break;
    case GgufType::kI64:
      numeric(std::int64_t{});
      break;
    case GgufType::kF64:
      numeric(double{});
      break;
    case GgufType::kBool: {
      std::vector<bool> v(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i)
        v[static_cast<std::size_t>(i)] = read_gguf_bool(c, field, i);
      a.values = std::move(v);
      break;
    }
    case GgufType::kString: {
      std::vector<std::string> v;
      v.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i) v.push_back(c.read_string(field, i));
      a.values = std::move(v);
      break;
    }
    case GgufType::kArray: {
      std::vector<GgufArray> v;
      v.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i)
        v.push_back(read_gguf_array(c, GgufCursor::name(field, i), depth + 1));
      a.values = std::move(v);
      break;
    }
  }
  return a;
}

/// a * b, or nullopt past int64.
inline std::optional<std::int64_t> mul_i64(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a + b, or nullopt past uint64.
inline std::optional<std::uint64_t> add_u64(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

template <class T>
constexpr GgufType gguf_type_for() {
  if constexpr (std::is_same_v<T, std::uint8_t>)
    return GgufType::kU8;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return GgufType::kI8;
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return GgufType::kU16;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return GgufType::kI16;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return GgufType::kU32;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return GgufType::kI32;
  else if constexpr (std::is_same_v<T, float>)
    return GgufType::kF32;
  else if constexpr (std::is_same_v<T, bool>)
    return GgufType::kBool;
  else if constexpr (std::is_same_v<T, std::string>)
    return GgufType::kString;
  else if constexpr (std::is_same_v<T, GgufArray>)
    return GgufType::kArray;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return GgufType::kU64;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return GgufType::kI64;
  else if constexpr (std::is_same_v<T, double>)
    return GgufType::kF64;
  else
    static_assert(sizeof(T) == 0, "kappa: not a GGUF value type");
}

}  // namespace detail

/// A GGUF file, memory-mapped (or read into huge pages: Residence) and
/// validated on construction (see the top of this header). Metadata and the
/// tensor table are copied out; tensor data is read from the mapping on
/// demand.
class GgufFile {
 public:
  /// Maps (or reads, with Residence::kHugePages) and validates `path`.
  /// Throws FormatError "kappa: PATH: byte N: WHAT" for a file that is not a
  /// regular file (directory, FIFO, ...), or that breaks any rule of the
  /// format.
  ///
  /// `interleave_q4`: every Q4_0 and Q4_K tensor of 2 or more dimensions is
  /// then held with its rows interleaved by eights (quant::Q4_0Rows8,
  /// quant::Q4_KRows8, each matrix of dims[1] rows on its own;
  /// GgufTensorInfo::interleaved), the layouts whose decode products sum 8
  /// rows at once. The rows are
  /// rearranged where they are, before the bytes are made read-only: no
  /// second copy (Residence::kMapped: the pages of those tensors become
  /// private copies, the rest stay the file's). raw() gives the bytes as
  /// held; dequantize() reads them back in rows, as without it.
  explicit GgufFile(const std::string& path, Residence residence = Residence::kMapped,
                    bool interleave_q4 = false)
      : path_(path), file_(open_regular(path, residence, interleave_q4)) {
    parse();
    if (interleave_q4) interleave_q4_tensors();
    file_.seal();
  }

  /// The path as given.
  [[nodiscard]] const std::string& path() const { return path_; }
  /// GGUF version (2 or 3).
  [[nodiscard]] std::uint32_t version() const { return version_; }
  /// general.alignment, or 32.
  [[nodiscard]] std::uint64_t alignment() const { return alignment_; }
  /// Absolute byte where the tensor table starts (the metadata's end).
  [[nodiscard]] std::uint64_t tensor_table_offset() const { return tensor_table_offset_; }
  /// Absolute byte where the data section starts: the tensor table's end
  /// rounded up to alignment().
  [[nodiscard]] std::uint64_t data_offset() const { return data_offset_; }
  /// File size in bytes.
  [[nodiscard]] std::uint64_t file_size() const { return file_.size(); }

  // ---- metadata -------------------------------------------------------------------

  /// Every entry, in file order.
  [[nodiscard]] const std::vector<GgufKeyValue>& metadata() const { return kv_; }
  /// True if the file has metadata `key`.
  [[nodiscard]] bool has(std::string_view key) const { return find_entry(key) != nullptr; }
  /// The value of `key`, or nullptr.
  [[nodiscard]] const GgufValue* find(std::string_view key) const {
    const GgufKeyValue* e = find_entry(key);
    return e ? &e->value : nullptr;
  }
  /// The value of `key`; FormatError naming the key if it is missing.
  [[nodiscard]] const GgufValue& value(std::string_view key) const { return entry(key).value; }

  /// The value of `key` as exactly type T (std::uint8_t ... double, bool,
  /// std::string, GgufArray). FormatError naming the key, its byte and the
  /// type found if it is missing or of another type.
  template <class T>
  [[nodiscard]] const T& get(std::string_view key) const {
    const GgufKeyValue& e = entry(key);
    constexpr GgufType want = detail::gguf_type_for<T>();
    if (gguf_type_of(e.value) != want) type_error(e, gguf_type_name(want));
    return std::get<T>(e.value);
  }

  /// The array `key` whose elements are exactly type T. FormatError naming
  /// the key and the types found otherwise.
  template <class T>
  [[nodiscard]] const std::vector<T>& get_array(std::string_view key) const {
    const GgufKeyValue& e = entry(key);
    constexpr GgufType want = detail::gguf_type_for<T>();
    const auto* a = std::get_if<GgufArray>(&e.value);
    if (a == nullptr || a->element_type() != want)
      type_error(e, "array of " + std::string(gguf_type_name(want)));
    return std::get<std::vector<T>>(a->values);
  }

  /// The integer `key` of any integer type (u8 ... i64) as int64;
  /// FormatError naming the key if it is not an integer or a u64 above
  /// 2^63 - 1.
  [[nodiscard]] std::int64_t get_integer(std::string_view key) const {
    const GgufKeyValue& e = entry(key);
    return std::visit(
        [&](const auto& v) -> std::int64_t {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            if constexpr (std::is_same_v<T, std::uint64_t>) {
              if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                detail::gguf_fail(path_, e.byte,
                                  "metadata key " + kappa::quoted(e.key, 256) + ": u64 value " +
                                      std::to_string(v) + " does not fit in int64");
            }
            return static_cast<std::int64_t>(v);
          } else {
            type_error(e, "an integer");
          }
        },
        e.value);
  }

  // ---- tensors --------------------------------------------------------------------

  /// Every tensor, in the order of the tensor table.
  [[nodiscard]] const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  /// True if the file has tensor `name`.
  [[nodiscard]] bool has_tensor(std::string_view name) const {
    return tensor_index_.find(std::string(name)) != tensor_index_.end();
  }
  /// The table entry of tensor `name`; FormatError naming it if absent.
  [[nodiscard]] const GgufTensorInfo& tensor(std::string_view name) const {
    const auto it = tensor_index_.find(std::string(name));
    if (it == tensor_index_.end())
      throw FormatError("kappa: " + path_ + ": no tensor " + kappa::quoted(name, 256));
    return tensors_[it->second];
  }
  /// The stored bytes of tensor `name` (inside the mapping; valid while this
  /// object lives), as held: a Q4_0 tensor's rows interleaved when its
  /// GgufTensorInfo::interleaved says so.
  [[nodiscard]] std::span<const unsigned char> raw(std::string_view name) const {
    const GgufTensorInfo& t = tensor(name);
    return {file_.data() + t.file_offset, static_cast<std::size_t>(t.bytes)};
  }

  /// Tensor `name` as float, rows() x cols() (one GGUF row per matrix row):
  /// F32 copied, F16 and BF16 converted exactly, Q8_0/Q4_0/Q4_K/Q6_K
  /// dequantized by kappa/core/quant_blocks.hpp (equal to ggml's bit for
  /// bit).
  [[nodiscard]] RowMatrix<float> dequantize(std::string_view name) const {
    const GgufTensorInfo& t = tensor(name);
    RowMatrix<float> m(t.rows(), t.cols());
    dequantize_into(t, m.data());
    return m;
  }

  /// Tensor `t` (an entry of tensors()) as numel floats at `out`, in stored
  /// order.
  void dequantize_into(const GgufTensorInfo& t, float* out) const {
    const unsigned char* p = file_.data() + t.file_offset;
    const std::int64_t n = t.numel;
    switch (t.type) {
      case GgmlType::kF32:
        if (n) std::memcpy(out, p, static_cast<std::size_t>(n) * 4);
        break;
      case GgmlType::kF16:
        for (std::int64_t i = 0; i < n; ++i)
          out[i] = quant::fp16_to_float(quant::detail::load_u16(p + 2 * i));
        break;
      case GgmlType::kBF16:
        for (std::int64_t i = 0; i < n; ++i)
          out[i] = quant::bf16_to_float(quant::detail::load_u16(p + 2 * i));
        break;
      case GgmlType::kQ8_0:
        quant::dequantize_row_q8_0(p, out, n);
        break;
      case GgmlType::kQ4_0:
        if (t.interleaved)
          dequantize_interleaved<quant::Q4_0Rows8>(t, p, out, &quant::dequantize_row_q4_0);
        else
          quant::dequantize_row_q4_0(p, out, n);
        break;
      case GgmlType::kQ4_K:
        if (t.interleaved)
          dequantize_interleaved<quant::Q4_KRows8>(t, p, out, &quant::dequantize_row_q4_K);
        else
          quant::dequantize_row_q4_K(p, out, n);
        break;
      case GgmlType::kQ6_K:
        quant::dequantize_row_q6_K(p, out, n);
        break;
    }
  }

 private:
  /// The mapping of `path`, after checking (without opening it: a FIFO must
  /// not block) that it is a regular file.
  static detail::MappedFile open_regular(const std::string& path, Residence residence,
                                         bool writable) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      detail::gguf_fail(path, 0, std::string("cannot open the file: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) detail::gguf_fail(path, 0, "is a directory, expected a GGUF file");
    if (!S_ISREG(st.st_mode))
      detail::gguf_fail(path, 0, "not a regular file (a FIFO, socket or device?)");
    return detail::MappedFile(path, residence, writable);
  }

  /// Each Q4_0 and Q4_K tensor of 2+ dimensions, matrix by matrix of
  /// dims[1] rows, interleaved by eights where it is (the bytes are still
  /// writable).
  void interleave_q4_tensors() {
    unsigned char* const data = file_.writable_data();
    if (data == nullptr) return;  // an empty file: no tensors
    const auto each_matrix = [&]<class L>(GgufTensorInfo& t) {
      const std::int64_t rows = t.dims[1], nb = t.dims[0] / L::kBlockWeights;
      const auto matrix_bytes = static_cast<std::size_t>(rows * nb) * L::kBlockBytes;
      file_.populate_for_writing(t.file_offset, t.bytes);  // one call, not a fault per page
      for (std::int64_t m = 0; m < t.n_rows / rows; ++m)
        quant::interleave_rows_in_place<L>(
            data + t.file_offset + static_cast<std::size_t>(m) * matrix_bytes, rows, nb);
      t.interleaved = true;
    };
    for (GgufTensorInfo& t : tensors_) {
      if (t.dims.size() < 2 || t.numel == 0) continue;
      if (t.type == GgmlType::kQ4_0) each_matrix.template operator()<quant::Q4_0Rows8>(t);
      if (t.type == GgmlType::kQ4_K) each_matrix.template operator()<quant::Q4_KRows8>(t);
    }
  }

  /// An interleaved tensor `t` (layout L; or one matrix of it, an expert's
  /// slice: its dims[1] rows are each matrix's) at `p` as floats in rows.
  template <class L>
  static void dequantize_interleaved(const GgufTensorInfo& t, const unsigned char* p, float* out,
                                     void (*dequantize_rows)(const unsigned char*, float*,
                                                             std::int64_t)) {
    const std::int64_t rows = t.dims[1], nb = t.dims[0] / L::kBlockWeights;
    const auto matrix_bytes = static_cast<std::size_t>(rows * nb) * L::kBlockBytes;
    std::vector<unsigned char> in_rows(matrix_bytes);
    for (std::int64_t m = 0; m < t.n_rows / rows; ++m) {
      quant::deinterleave_rows<L>(p + static_cast<std::size_t>(m) * matrix_bytes, rows, nb, 0, rows,
                                  in_rows.data());
      dequantize_rows(in_rows.data(), out + m * rows * t.dims[0], rows * t.dims[0]);
    }
  }

  const GgufKeyValue* find_entry(std::string_view key) const {
    const auto it = kv_index_.find(std::string(key));
    return it == kv_index_.end() ? nullptr : &kv_[it->second];
  }
  const GgufKeyValue& entry(std::string_view key) const {
    const GgufKeyValue* e = find_entry(key);
    if (e == nullptr)
      throw FormatError("kappa: " + path_ + ": no metadata key " + kappa::quoted(key, 256));
    return *e;
  }
  [[noreturn]] void type_error(const GgufKeyValue& e, std::string_view want) const {
    std::string found(gguf_type_name(gguf_type_of(e.value)));
    if (const auto* a = std::get_if<GgufArray>(&e.value))
      found = "array of " + std::string(gguf_type_name(a->element_type()));
    detail::gguf_fail(path_, e.byte,
                      "metadata key " + kappa::quoted(e.key, 256) + " is " + found + ", expected " +
                          std::string(want));
  }

  void parse() {
    const std::uint64_t size = file_.size();
    detail::GgufCursor c(file_.data(), size, path_);
    if (size < 4)
      c.fail(0, "magic: the file has " + std::to_string(size) +
                    " bytes; a GGUF file starts with the 4 bytes \"GGUF\"");
    const std::string_view magic(reinterpret_cast<const char*>(file_.data()), 4);
    if (magic != "GGUF") c.fail(0, "magic: expected \"GGUF\", found " + kappa::quoted(magic));
    c.read<std::uint32_t>("magic");
    const std::uint64_t version_at = c.pos();
    version_ = c.read<std::uint32_t>("version");
    if (version_ == 0x02000000u || version_ == 0x03000000u)
      c.fail(version_at, "version: a big-endian GGUF file; kappa reads little-endian files only");
    if (version_ != 2 && version_ != 3)
      c.fail(version_at, "version " + std::to_string(version_) +
                             " is not supported (kappa reads GGUF versions 2 and 3)");
    const std::uint64_t tensor_count_at = c.pos();
    const auto tensor_count = c.read<std::uint64_t>("tensor_count");
    const std::uint64_t kv_count_at = c.pos();
    const auto kv_count = c.read<std::uint64_t>("kv_count");
    // The fewest bytes an entry takes: a tensor 32 (name length, n_dims, one
    // dimension, type, offset), a key-value pair 13 (key length, type, u8).
    if (tensor_count > c.left() / 32)
      c.fail(tensor_count_at, "tensor_count " + std::to_string(tensor_count) +
                                  " needs at least 32 bytes per tensor but " +
                                  std::to_string(c.left()) + " bytes are left");
    if (kv_count > c.left() / 13)
      c.fail(kv_count_at, "kv_count " + std::to_string(kv_count) +
                              " needs at least 13 bytes per pair but " + std::to_string(c.left()) +
                              " bytes are left");

    kv_.reserve(static_cast<std::size_t>(kv_count));
    for (std::uint64_t i = 0; i < kv_count; ++i) {
      const std::uint64_t at = c.pos();
      std::string key = c.read_string("metadata key #" + std::to_string(i));
      const std::string field = "metadata key " + kappa::quoted(key, 256);
      if (const GgufKeyValue* first = find_entry(key))
        c.fail(at, field + " appears twice (first at byte " + std::to_string(first->byte) + ")");
      const GgufType t = detail::read_gguf_type(c, field);
      GgufValue v = detail::read_gguf_value(c, t, field, 0);
      kv_index_.emplace(key, kv_.size());
      kv_.push_back({std::move(key), std::move(v), at});
    }

    if (const GgufKeyValue* a = find_entry("general.alignment")) {
      const auto* v = std::get_if<std::uint32_t>(&a->value);
      if (v == nullptr) type_error(*a, "u32");
      if (*v == 0 || (*v & (*v - 1)) != 0)
        c.fail(a->byte, "general.alignment " + std::to_string(*v) + " is not a power of two");
      alignment_ = *v;
    }

    tensor_table_offset_ = c.pos();
    tensors_.reserve(static_cast<std::size_t>(tensor_count));
    for (std::uint64_t i = 0; i < tensor_count; ++i) read_tensor_info(c, i);

    // The data section: the header end rounded up to the alignment.
    const std::uint64_t header_end = c.pos();
    const std::uint64_t padded = header_end + (alignment_ - header_end % alignment_) % alignment_;
    data_offset_ = padded;
    if (!tensors_.empty() && padded > size)
      c.fail(header_end, "the data section would start at byte " + std::to_string(padded) +
                             " (the header end aligned to " + std::to_string(alignment_) +
                             "), past the end of the file (" + std::to_string(size) + " bytes)");
    for (GgufTensorInfo& t : tensors_) {
      const std::string field = "tensor " + kappa::quoted(t.name, 256);
      const std::optional<std::uint64_t> begin = detail::add_u64(padded, t.offset);
      const std::optional<std::uint64_t> end =
          begin ? detail::add_u64(*begin, t.bytes) : std::nullopt;
      if (!end || *end > size)
        c.fail(t.byte, field + ": offset " + std::to_string(t.offset) + " + " +
                           std::to_string(t.bytes) + " bytes from the data section at byte " +
                           std::to_string(padded) + " runs past the end of the file (" +
                           std::to_string(size) + " bytes)");
      t.file_offset = *begin;
    }
    // No two tensors share a byte.
    std::vector<std::size_t> order(tensors_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return tensors_[a].offset < tensors_[b].offset;
    });
    const GgufTensorInfo* prev = nullptr;
    for (std::size_t i : order) {
      const GgufTensorInfo& t = tensors_[i];
      if (t.bytes == 0) continue;
      if (prev != nullptr && prev->offset + prev->bytes > t.offset)
        c.fail(t.byte, "tensor " + kappa::quoted(t.name, 256) + ": data at offset " +
                           std::to_string(t.offset) + " overlaps tensor " +
                           kappa::quoted(prev->name, 256) + " at offset " +
                           std::to_string(prev->offset) + " (" + std::to_string(prev->bytes) +
                           " bytes)");
      prev = &t;
    }
  }

  void read_tensor_info(detail::GgufCursor& c, std::uint64_t i) {
    GgufTensorInfo t;
    t.byte = c.pos();
    t.name = c.read_string("tensor #" + std::to_string(i) + " name");
    const std::string field = "tensor " + kappa::quoted(t.name, 256);
    if (const auto it = tensor_index_.find(t.name); it != tensor_index_.end())
      c.fail(t.byte, field + " appears twice (first at byte " +
                         std::to_string(tensors_[it->second].byte) + ")");
    const std::uint64_t n_dims_at = c.pos();
    const auto n_dims = c.read<std::uint32_t>(field + " n_dims");
    if (n_dims < 1 || n_dims > 4)
      c.fail(n_dims_at, field + ": n_dims " + std::to_string(n_dims) + " is outside [1, 4]");
    std::int64_t numel = 1, n_rows = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t at = c.pos();
      const auto ne = c.read<std::int64_t>(field + " ne[" + std::to_string(d) + "]");
      if (ne < 0)
        c.fail(at, field + ": ne[" + std::to_string(d) + "] is " + std::to_string(ne) +
                       ", must be >= 0");
      const std::optional<std::int64_t> p = detail::mul_i64(numel, ne);
      const std::optional<std::int64_t> r = d > 0 ? detail::mul_i64(n_rows, ne) : n_rows;
      if (!p || !r)
        c.fail(at, field + ": the product of the dimensions overflows int64 at ne[" +
                       std::to_string(d) + "] = " + std::to_string(ne));
      numel = *p;
      n_rows = *r;
      t.dims.push_back(ne);
    }
    const std::uint64_t type_at = c.pos();
    const auto type_id = c.read<std::uint32_t>(field + " type");
    const GgmlTypeInfo* info = ggml_type_info(type_id);
    if (info == nullptr)
      c.fail(type_at, field + ": type id " + std::to_string(type_id) + " is not a ggml type");
    if (!info->supported)
      c.fail(type_at, field + ": type " + std::string(info->name) + " (" + std::to_string(type_id) +
                          ") is not supported (kappa reads f32, f16, bf16, q8_0, q4_0, q4_K, "
                          "q6_K)");
    if (t.dims[0] % info->block_size != 0)
      c.fail(type_at, field + ": row length ne[0] = " + std::to_string(t.dims[0]) +
                          " is not a multiple of " + std::string(info->name) + "'s block size " +
                          std::to_string(info->block_size));
    const std::optional<std::int64_t> bytes =
        detail::mul_i64(numel / info->block_size, info->type_size);
    if (!bytes) c.fail(type_at, field + ": its size in bytes overflows int64");
    const std::uint64_t offset_at = c.pos();
    t.offset = c.read<std::uint64_t>(field + " offset");
    if (t.offset % alignment_ != 0)
      c.fail(offset_at, field + ": offset " + std::to_string(t.offset) +
                            " is not a multiple of general.alignment " +
                            std::to_string(alignment_));
    t.type = static_cast<GgmlType>(type_id);
    t.numel = numel;
    t.n_rows = n_rows;
    t.bytes = static_cast<std::uint64_t>(*bytes);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  std::string path_;
  detail::MappedFile file_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t tensor_table_offset_ = 0;
  std::uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kv_;
  std::unordered_map<std::string, std::size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
};

}  // namespace kappa::io
