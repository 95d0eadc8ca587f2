// kappa/io/safetensors.hpp - reading (memory-mapped, validated) and writing
// safetensors files, and Hugging Face model directories made of them.
//
// The safetensors format (huggingface/safetensors, README "Format"):
//
//   bytes 0-7       N, the header length: uint64 little-endian
//   bytes 8..8+N    the header: UTF-8 JSON, an object that starts with '{' and
//                   may be padded at the end with spaces:
//                     {"__metadata__": {"format": "pt"},
//                      "w": {"dtype": "F32", "shape": [2, 3],
//                            "data_offsets": [0, 24]}, ...}
//   bytes 8+N..end  the data section; a tensor's data_offsets [begin, end) are
//                   relative to its start. Elements are little-endian, C order.
//
// kappa validates the whole header when a file is opened, before it reads or
// allocates for any tensor (see SafetensorsFile for the list of rules), so a
// file that opens can be read without further checks. Every problem throws
// kappa::FormatError naming the file, the tensor where one applies, and a
// byte offset in the file, e.g.
//   "kappa: safetensors: model.safetensors: byte 57: tensor "lm_head.weight":
//    data_offsets [0, 400] end past the data section (96 bytes from byte 72)"
// (the byte is where the tensor's entry starts in the header; layout errors
// name the byte in the data section). Shape mismatches against what a caller
// expects (matrix(name, expected), require_shape, matrix_into) are
// kappa::ShapeError naming the tensor and both shapes.
//
// Usage:
//   kappa::io::Checkpoint ckpt("models/llama");   // model.safetensors or index
//   RowMatrix<float> w_q = ckpt.matrix<float>("model.layers.0.self_attn.q_proj.weight",
//                                             {4096, 4096});            // (out x in)
//   if (ckpt.can_view<float>("lm_head.weight"))                          // F32, aligned
//     auto head = ckpt.view<float>("lm_head.weight");                    // zero copy
//
// Tensors are read as matrices in the paper's row-vector convention: a 2-d
// tensor (rows x cols) as RowMatrix<T>; a 1-d tensor of n elements as 1 x n;
// a scalar (shape []) as 1 x 1; a tensor of rank r > 2 as
// shape[0] x (shape[1] ... shape[r-1]) (its C-order elements, rows kept).
// Hugging Face stores nn.Linear weights as (out x in), so the paper's W (in x
// out) is the transpose of what is read.
//
// POSIX only (mmap). The file must not be truncated by another process while
// it is mapped: the kernel would then deliver SIGBUS, which no check can
// prevent.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/checked.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa::io {

/// The element types of the safetensors format. Every one is accepted in a
/// header (its byte count is validated); which ones kappa converts is listed
/// at SafetensorsFile::matrix().
enum class Dtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
  kF4,
  kF6E2M3,
  kF6E3M2,
};

namespace detail {

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  int bits;
};

inline constexpr DtypeEntry kDtypes[] = {
    {Dtype::kBool, "BOOL", 8},
    {Dtype::kU8, "U8", 8},
    {Dtype::kI8, "I8", 8},
    {Dtype::kF8E5M2, "F8_E5M2", 8},
    {Dtype::kF8E4M3, "F8_E4M3", 8},
    {Dtype::kF8E8M0, "F8_E8M0", 8},
    {Dtype::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    {Dtype::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8},
    {Dtype::kI16, "I16", 16},
    {Dtype::kU16, "U16", 16},
    {Dtype::kF16, "F16", 16},
    {Dtype::kBF16, "BF16", 16},
    {Dtype::kI32, "I32", 32},
    {Dtype::kU32, "U32", 32},
    {Dtype::kF32, "F32", 32},
    {Dtype::kC64, "C64", 64},
    {Dtype::kF64, "F64", 64},
    {Dtype::kI64, "I64", 64},
    {Dtype::kU64, "U64", 64},
    {Dtype::kF4, "F4", 4},
    {Dtype::kF6E2M3, "F6_E2M3", 6},
    {Dtype::kF6E3M2, "F6_E3M2", 6},
};

inline const DtypeEntry& dtype_entry(Dtype d) {
  for (const DtypeEntry& e : kDtypes)
    if (e.dtype == d) return e;
  return kDtypes[0];  // unreachable for a valid enumerator
}

}  // namespace detail

/// The format's name of a dtype: "F32", "BF16", "F8_E4M3", ...
inline std::string_view dtype_name(Dtype d) {
  return detail::dtype_entry(d).name;
}

/// Bits per element: 64, 32, 16, 8, 6 (F6_*) or 4 (F4).
inline int dtype_bits(Dtype d) {
  return detail::dtype_entry(d).bits;
}

/// The Dtype called `name` in a header, or nullopt for a name the format does
/// not define.
inline std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const detail::DtypeEntry& e : detail::kDtypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

/// The storage kappa's writer uses for float/double matrices.
enum class Storage { kF64, kF32, kF16, kBF16 };

// ---- Half-precision conversions ------------------------------------------------

/// IEEE binary16 bits -> float, exactly (every half is a float): zeros keep
/// their sign, subnormals (exponent 0) become m 2^-24, inf stays inf, NaNs
/// stay NaN with their payload in the high mantissa bits.
inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  std::uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf (mantissa 0) or NaN
  } else {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

/// bfloat16 bits -> float, exactly: bfloat16 is the high half of a float.
inline float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

namespace detail {

/// double -> a narrow IEEE-style format with kExpBits exponent and kManBits
/// mantissa bits, rounding to nearest, ties to even, in one step (float
/// sources convert to double exactly first, so there is no double rounding).
/// Overflow gives inf; values below half the smallest subnormal give a signed
/// zero; NaN stays a quiet NaN keeping its high payload bits.
template <int kExpBits, int kManBits>
std::uint16_t narrow_from_double(double d) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr std::uint64_t kInf = ((std::uint64_t{1} << kExpBits) - 1) << kManBits;
  const std::uint64_t x = std::bit_cast<std::uint64_t>(d);
  const auto sign = static_cast<std::uint16_t>((x >> 63) << (kExpBits + kManBits));
  const int e = static_cast<int>((x >> 52) & 0x7ffu);
  const std::uint64_t m = x & ((std::uint64_t{1} << 52) - 1);
  if (e == 0x7ff) {
    if (m == 0) return static_cast<std::uint16_t>(sign | kInf);
    const std::uint64_t payload = (m >> (52 - kManBits)) | (std::uint64_t{1} << (kManBits - 1));
    return static_cast<std::uint16_t>(sign | kInf | payload);
  }
  if (e == 0) return sign;  // a double subnormal is far below any narrow subnormal
  const int target_exponent = e - 1023 + kBias;
  int shift = 0;
  std::uint64_t q = 0, rem = 0;
  if (target_exponent >= 1) {  // normal in the narrow format (or overflow)
    shift = 52 - kManBits;
    q = (static_cast<std::uint64_t>(target_exponent) << kManBits) | (m >> shift);
    rem = m & ((std::uint64_t{1} << shift) - 1);
  } else {  // subnormal in the narrow format: units of 2^(1 - bias - kManBits)
    shift = 52 - kManBits + (1 - target_exponent);
    if (shift >= 54) return sign;  // below half the smallest subnormal
    const std::uint64_t full = m | (std::uint64_t{1} << 52);
    q = full >> shift;
    rem = full & ((std::uint64_t{1} << shift) - 1);
  }
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // carries into the exponent correctly
  if (q >= kInf) return static_cast<std::uint16_t>(sign | kInf);
  return static_cast<std::uint16_t>(sign | q);
}

}  // namespace detail

/// double (or float) -> IEEE binary16 bits, round to nearest even; beyond
/// 65504 + half an ulp gives inf; NaN gives a quiet NaN.
inline std::uint16_t f16_from_double(double d) {
  return detail::narrow_from_double<5, 10>(d);
}

/// double (or float) -> bfloat16 bits, round to nearest even; NaN gives a
/// quiet NaN.
inline std::uint16_t bf16_from_double(double d) {
  return detail::narrow_from_double<8, 7>(d);
}

// ---- One file --------------------------------------------------------------------

/// What a header says about one tensor, after validation.
struct TensorInfo {
  Dtype dtype = Dtype::kF32;
  std::vector<std::int64_t> shape;  ///< empty for a scalar
  std::int64_t begin = 0;           ///< data_offsets[0], relative to the data section
  std::int64_t end = 0;             ///< data_offsets[1] (one past the last byte)
  std::int64_t file_offset = 0;     ///< absolute byte offset of the data: 8 + N + begin

  /// Number of elements: product of the shape (1 for a scalar).
  [[nodiscard]] std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;  // validated not to overflow
    return n;
  }
  /// Rows of the matrix reading: shape[0] for rank >= 2, else 1.
  [[nodiscard]] Index rows() const { return shape.size() >= 2 ? shape[0] : 1; }
  /// Columns of the matrix reading: product of shape[1..] for rank >= 2, the
  /// length for rank 1, 1 for a scalar.
  [[nodiscard]] Index cols() const {
    if (shape.empty()) return 1;
    if (shape.size() == 1) return shape[0];
    std::int64_t n = 1;
    for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
  }
  /// Byte count: end - begin.
  [[nodiscard]] std::int64_t bytes() const { return end - begin; }
};

/// "[2, 3]": how kappa prints a tensor shape in messages.
inline std::string tensor_shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

namespace detail {

/// How many bytes of a tensor or shard name a message shows (kappa::quoted
/// escapes them and cuts longer names with "...").
inline constexpr std::size_t kShownNameBytes = 256;

/// A tensor, key or shard name from a file, quoted for a message.
inline std::string shown_name(std::string_view name) {
  return kappa::quoted(name, kShownNameBytes);
}

[[noreturn]] inline void st_fail(std::string_view file, std::int64_t byte, std::string_view tensor,
                                 std::string_view what) {
  std::string msg = "kappa: safetensors: ";
  msg += file;
  if (byte >= 0) {  // -1: no byte offset applies (a tensor that is absent)
    msg += ": byte ";
    msg += std::to_string(byte);
  }
  msg += ": ";
  if (!tensor.empty()) {
    msg += "tensor ";
    msg += shown_name(tensor);
    msg += ": ";
  }
  msg += what;
  throw FormatError(msg);
}

}  // namespace detail

/// Where the bytes of an opened weight file live.
enum class Residence {
  /// A read-only mapping of the file: its pages are the page cache's, read
  /// on first touch, shared with other processes, mapped 4 KB at a time.
  kMapped,
  /// Read whole into anonymous memory advised for transparent huge pages
  /// (madvise MADV_HUGEPAGE; 2 MB pages where the kernel has them, as
  /// Linux's default "madvise" setting allows): the same resident bytes as
  /// a fully touched mapping, read at open, and far fewer TLB misses for the
  /// block products of a decode step, which stream every weight once per
  /// token (a 374 M-parameter Q8_0 model: its products read 13.7 GB/s
  /// instead of 10.4 on one thread of our machine, benchmarks/README.md).
  kHugePages,
};

namespace detail {

/// A whole file, read-only: a private mapping (Residence::kMapped) or a
/// copy in anonymous huge pages (kHugePages); released on destruction.
/// Opened `writable`, its bytes may be changed in this process only
/// (writable_data(); a private mapping copies the pages written) until
/// seal() makes them read-only: GgufFile repacks its Q4_0 tensors so.
/// Regular files only, after following symbolic links: a directory, FIFO,
/// socket or device is a FormatError, and opening never blocks (O_NONBLOCK:
/// a FIFO without a writer would otherwise wait forever in open()).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path, Residence residence = Residence::kMapped,
                      bool writable = false)
      : writable_(writable) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) st_fail(path, 0, "", std::string("cannot open the file: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      st_fail(path, 0, "", "not a regular file (a directory, FIFO, socket or device)");
    }

    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0 && residence == Residence::kHugePages) {
      read_into_huge_pages(fd, path);
      ::close(fd);
    } else if (size_ > 0) {
      void* p =
          ::mmap(nullptr, size_, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);
      if (p == MAP_FAILED) st_fail(path, 0, "", std::string("mmap failed: ") + std::strerror(err));
      data_ = static_cast<const unsigned char*>(p);
    } else {
      ::close(fd);
    }
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        base_(std::exchange(o.base_, nullptr)),
        length_(std::exchange(o.length_, 0)),
        writable_(std::exchange(o.writable_, false)) {}
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      unmap();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      base_ = std::exchange(o.base_, nullptr);
      length_ = std::exchange(o.length_, 0);
      writable_ = std::exchange(o.writable_, false);
    }
    return *this;
  }
  ~MappedFile() { unmap(); }

  [[nodiscard]] const unsigned char* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }

  /// The bytes, writable: opened `writable` and not sealed yet; else null.
  [[nodiscard]] unsigned char* writable_data() {
    return writable_ ? const_cast<unsigned char*>(data_) : nullptr;
  }
  /// Readies bytes [offset, offset + bytes) (within size()) for writing in
  /// one call where the kernel can: a private mapping's pages are then
  /// copied at once (MADV_POPULATE_WRITE) rather than one fault per 4 KB
  /// page (a 139 MB Q4_0 file repacked: 0.64 -> 0.23 s). A kernel before
  /// 5.14 refuses the advice, and the faults then do the same; the huge-page
  /// copy's pages are present already. Nothing unless writable.
  void populate_for_writing([[maybe_unused]] std::size_t offset,
                            [[maybe_unused]] std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    if (!writable_ || base_ != nullptr || data_ == nullptr || bytes == 0) return;
    unsigned char* const first = const_cast<unsigned char*>(data_) + offset;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t lead = reinterpret_cast<std::uintptr_t>(first) % page;  // to a page
    (void)::madvise(first - lead, bytes + lead, MADV_POPULATE_WRITE);
#endif
  }
  /// Makes the bytes read-only (once writable; nothing otherwise).
  void seal() {
    if (!writable_) return;
    writable_ = false;
    if (base_ != nullptr)
      (void)::mprotect(base_, length_, PROT_READ);
    else if (data_)
      (void)::mprotect(const_cast<unsigned char*>(data_), size_, PROT_READ);
  }

 private:
  // The file's bytes into anonymous memory starting on a 2 MB boundary,
  // advised for huge pages, then made read-only.
  void read_into_huge_pages(int fd, const std::string& path) {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    const std::size_t length = (size_ + kHuge - 1) / kHuge * kHuge + kHuge;
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      st_fail(path, 0, "",
              std::string("cannot allocate memory for the file: ") + std::strerror(err));
    }
    base_ = p;
    length_ = length;
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    unsigned char* const dst = static_cast<unsigned char*>(p) + (kHuge - at % kHuge) % kHuge;
    (void)::madvise(dst, size_, MADV_HUGEPAGE);  // advice: without THP, 4 KB pages
    std::size_t done = 0;
    while (done < size_) {
      const ::ssize_t n = ::pread(fd, dst + done, std::min<std::size_t>(size_ - done, kHuge * 32),
                                  static_cast<::off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : 0;
        ::close(fd);
        unmap();
        st_fail(path, static_cast<std::int64_t>(done), "",
                err != 0 ? std::string("read failed: ") + std::strerror(err)
                         : std::string("the file ended early (truncated while read?)"));
      }
      done += static_cast<std::size_t>(n);
    }
    if (!writable_) (void)::mprotect(base_, length_, PROT_READ);
    data_ = dst;
  }
  void unmap() {
    if (base_ != nullptr)
      ::munmap(base_, length_);
    else if (data_)
      ::munmap(const_cast<unsigned char*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
    base_ = nullptr;
    length_ = 0;
  }
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  void* base_ = nullptr;  // kHugePages: the anonymous mapping (length_ bytes)
  std::size_t length_ = 0;
  bool writable_ = false;  // until seal()
};

/// Byte offsets (relative to the header text) of the keys of the top-level
/// JSON object, in document order. The text is valid JSON already.
inline std::vector<std::size_t> top_level_key_offsets(std::string_view text) {
  std::vector<std::size_t> offsets;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      const std::size_t start = i;
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      if (depth == 1) {
        std::size_t j = i + 1;
        while (j < text.size() &&
               (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r'))
          ++j;
        if (j < text.size() && text[j] == ':') offsets.push_back(start);
      }
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return offsets;
}

/// A nlohmann::json::sax_parse handler that builds the document in one
/// linear pass (no parser callback: nlohmann's callback parser rescans the
/// parent object after every entry, quadratic in the number of tensors) and
/// notes what the DOM parser silently accepts or throws:
///  - the first key repeated within one object, at any depth (nlohmann keeps
///    the last), found by the object's own lookup as the key is inserted;
///  - the keys of the top-level object in document order;
///  - the first syntax error, with its byte and nlohmann's message.
/// Nesting is not limited here: callers bound it first (kappa::json_too_deep).
// (clang-tidy's exception-escape finds a throw in the implicit members, which
// only move and destroy nlohmann::json values, whose destructor is noexcept.)
// NOLINTNEXTLINE(bugprone-exception-escape)
class UniqueKeyJsonBuilder {
 public:
  using json = nlohmann::json;

  json root;                          ///< the document (valid when ok())
  std::vector<std::string> top_keys;  ///< keys of the top-level object, in order
  // The first duplicate key: the key, whether it is a top-level key, and the
  // index in top_keys of the top-level entry it belongs to (or is).
  std::optional<std::string> duplicate;
  bool duplicate_at_top = false;
  std::size_t duplicate_entry = 0;
  // The first syntax error: byte (0-based, in the text), message, and whether
  // it is a number beyond double (nlohmann's out_of_range 406).
  std::optional<std::string> error;
  std::size_t error_byte = 0;
  bool error_is_number = false;

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t /*elements*/) { return open(json::value_t::object); }
  bool start_array(std::size_t /*elements*/) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    auto& object = stack_.back()->get_ref<json::object_t&>();
    const bool top = stack_.size() == 1;
    if (top) top_keys.push_back(k);
    const auto [it, inserted] = object.try_emplace(std::move(k));
    if (!inserted && !duplicate) {
      duplicate = it->first;
      duplicate_at_top = top;
      duplicate_entry = top_keys.empty() ? 0 : top_keys.size() - 1;
    }
    slot_ = &it->second;  // a repeated key's later value replaces the earlier one
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const json::exception& e) {
    error_byte = position > 0 ? position - 1 : 0;
    error_is_number = e.id == 406;
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    if (const std::size_t p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
    error = kappa::printable(what);
    return false;
  }

 private:
  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      auto& array = parent.get_ref<json::array_t&>();
      array.push_back(std::move(v));
      return &array.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json::value_t type) {
    // An open container's address is stable: only its own children are added
    // until it closes.
    stack_.push_back(place(json(type)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  std::vector<json*> stack_;  // the open containers, outermost first
  json* slot_ = nullptr;      // the value slot of the last key read
};

}  // namespace detail

/// A safetensors file, memory-mapped read-only and validated on opening.
///
/// Validation (all before any tensor is read; each failure is a FormatError
/// naming the file, the tensor where one applies, and a byte offset):
///  - the path is a regular file after following symbolic links (a
///    directory, FIFO, socket or device is refused without blocking);
///  - the file holds at least the 8-byte header length N, and
///    N <= kMaxHeaderBytes (100 MB, the reference implementation's limit) and
///    8 + N <= file size (the message does not echo N: in a file that is not
///    safetensors it is arbitrary bytes);
///  - the header starts with '{', nests arrays/objects at most kMaxJsonDepth
///    (128) deep, is valid UTF-8 JSON without NUL bytes (trailing whitespace
///    allowed), is an object, and has no duplicate keys at any depth;
///  - "__metadata__", if present, is an object of string values;
///  - every other entry is an object with exactly "dtype" (a name the format
///    defines), "shape" (an array of non-negative integers) and
///    "data_offsets" (an array of two non-negative integers [begin, end]);
///  - begin <= end <= the data section's size (file size - 8 - N);
///  - the element count (product of the shape) and the matrix reading's
///    column count do not overflow int64, and end - begin equals
///    count x bits / 8 (sub-byte dtypes: count x bits a multiple of 8);
///  - sorted by offsets, the tensors neither overlap nor leave holes, and
///    the last one ends at the end of the file: the format requires the data
///    section to be fully covered, and kappa enforces it (as the reference
///    implementation does), so no bytes are hidden in a file.
///
/// Opening takes time linear in the header's size (one pass of the JSON
/// parser, duplicate keys found by the lookup that inserts them; then
/// O(n log n) in the number of tensors n for the sorted table and the
/// coverage check).
///
/// Movable, not copyable; views returned by view() point into the mapping and
/// live as long as this object (moving it keeps them valid).
class SafetensorsFile {
 public:
  /// Largest header length accepted.
  static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

  /// Maps and validates the file at `path`.
  /// \throws FormatError as listed above, or when the file cannot be opened.
  explicit SafetensorsFile(const std::string& path) : path_(path), map_(path) { parse(); }

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  /// The path the file was opened with.
  [[nodiscard]] const std::string& path() const { return path_; }
  /// File size in bytes.
  [[nodiscard]] std::size_t size_bytes() const { return map_.size(); }
  /// The whole mapped file (views and bytes() point into it).
  [[nodiscard]] std::span<const unsigned char> mapping() const {
    return {map_.data(), map_.size()};
  }
  /// Byte offset of the data section: 8 + N.
  [[nodiscard]] std::int64_t data_offset() const { return data_offset_; }

  /// Tensor names, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, info] : tensors_) out.push_back(name);
    return out;
  }
  /// Number of tensors (without "__metadata__").
  [[nodiscard]] std::size_t size() const { return tensors_.size(); }
  [[nodiscard]] bool has(std::string_view name) const {
    return tensors_.find(name) != tensors_.end();
  }

  /// The header's "__metadata__" map (empty if absent).
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// dtype, shape and byte offsets of tensor `name`.
  /// \throws FormatError naming the file and the tensor when there is none.
  [[nodiscard]] const TensorInfo& info(std::string_view name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      detail::st_fail(path_, -1, name,
                      "no such tensor (the header at bytes 8.." + std::to_string(data_offset_) +
                          " lists " + std::to_string(tensors_.size()) + " tensors)");
    }
    return it->second;
  }

  /// The raw bytes of tensor `name` (bytes() of them), inside the mapping.
  [[nodiscard]] const unsigned char* bytes(std::string_view name) const {
    return map_.data() + info(name).file_offset;
  }

  /// True when view<T>(name) works: the tensor is stored as T (F32 for
  /// float, F64 for double) and its data is aligned to alignof(T).
  template <class T>
  [[nodiscard]] bool can_view(std::string_view name) const {
    const TensorInfo& t = info(name);
    return t.dtype == stored_dtype<T>() &&
           t.file_offset % static_cast<std::int64_t>(alignof(T)) == 0;
  }

  /// Zero-copy view of tensor `name` as a rows() x cols() row-major matrix
  /// (see the file comment for ranks other than 2). T is float (dtype F32)
  /// or double (F64). The map is Eigen's default Unaligned (no 16-byte
  /// assumption), but the data must be aligned to alignof(T): files written
  /// by Hugging Face's safetensors or by write_safetensors() are. Use
  /// matrix<T>() otherwise (it copies and converts).
  /// \throws FormatError naming the tensor and dtype when the stored dtype is
  ///         not T, or naming the offset when the data is misaligned.
  template <class T>
  [[nodiscard]] Eigen::Map<const RowMatrix<T>> view(std::string_view name) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "kappa: SafetensorsFile::view<T> views float (F32) or double (F64) data");
    static_assert(std::endian::native == std::endian::little,
                  "kappa: safetensors views need a little-endian host");
    const TensorInfo& t = info(name);
    if (t.dtype != stored_dtype<T>()) {
      detail::st_fail(path_, t.file_offset, name,
                      "stored as " + std::string(dtype_name(t.dtype)) + ", cannot be viewed as " +
                          std::string(dtype_name(stored_dtype<T>())) +
                          " (use matrix<T>() to convert)");
    }
    if (t.file_offset % static_cast<std::int64_t>(alignof(T)) != 0) {
      detail::st_fail(path_, t.file_offset, name,
                      "data is not aligned to " + std::to_string(alignof(T)) +
                          " bytes, cannot be viewed (use matrix<T>() to copy)");
    }
    return Eigen::Map<const RowMatrix<T>>(reinterpret_cast<const T*>(map_.data() + t.file_offset),
                                          t.rows(), t.cols());
  }

  /// Tensor `name` read as a rows() x cols() matrix of T, converting:
  ///  - T float or double: from F32, F64, F16, BF16 (F16/BF16 exactly; F64 to
  ///    float rounds to nearest);
  ///  - T an integer type: from BOOL, U8, I8, U16, I16, U32, I32, U64, I64
  ///    (a value T cannot hold is a FormatError naming it).
  /// Any other pairing (I64 read as float, F8_E4M3, F4, C64, ...) throws
  /// FormatError naming the tensor and its dtype. The data may be unaligned.
  template <class T>
  [[nodiscard]] RowMatrix<T> matrix(std::string_view name) const {
    const TensorInfo& t = info(name);
    RowMatrix<T> out(t.rows(), t.cols());
    convert_into(name, t, out.data());
    return out;
  }

  /// As matrix(name), after checking that the tensor's shape is exactly
  /// `expected` (e.g. {d_out, d_in}).
  /// \throws ShapeError naming the file, the tensor, the expected and the
  ///         actual shape.
  template <class T>
  [[nodiscard]] RowMatrix<T> matrix(std::string_view name,
                                    const std::vector<std::int64_t>& expected) const {
    require_shape(name, expected);
    return matrix<T>(name);
  }

  /// A tensor of rank 0 or 1 read as a row vector (1 x n).
  /// \throws FormatError naming the tensor and its shape for rank > 1, and as
  ///         matrix().
  template <class T>
  [[nodiscard]] RowVector<T> row_vector(std::string_view name) const {
    const TensorInfo& t = info(name);
    if (t.shape.size() > 1) {
      detail::st_fail(
          path_, t.file_offset, name,
          "has shape " + tensor_shape_string(t.shape) + ", expected a vector (rank 0 or 1)");
    }
    RowVector<T> out(t.numel());
    convert_into(name, t, out.data());
    return out;
  }

  /// As matrix(name), into a caller-provided rows() x cols() matrix or block
  /// (no allocation: for reloading weights into place).
  /// \throws ShapeError naming the tensor and both shapes when `out` is not
  ///         rows() x cols(); FormatError as matrix().
  template <class T>
  void matrix_into(std::string_view name, MatrixRef<T> out) const {
    const TensorInfo& t = info(name);
    if (out.rows() != t.rows() || out.cols() != t.cols()) {
      throw ShapeError("kappa: safetensors: " + path_ + ": tensor " + detail::shown_name(name) +
                       " reads as " + shape_string(t.rows(), t.cols()) + " but the output is " +
                       shape_of(out));
    }
    if (out.outerStride() == out.cols()) {
      convert_into(name, t, out.data());
      return;
    }
    for (Index r = 0; r < out.rows(); ++r)
      convert_range(name, t, out.row(r).data(), r * t.cols(), t.cols());
  }

  /// Throws ShapeError naming the file, the tensor, `expected` and the
  /// actual shape unless the tensor's shape equals `expected`.
  void require_shape(std::string_view name, const std::vector<std::int64_t>& expected) const {
    const TensorInfo& t = info(name);
    if (t.shape == expected) return;
    throw ShapeError("kappa: safetensors: " + path_ + ": tensor " + detail::shown_name(name) +
                     " has shape " + tensor_shape_string(t.shape) + ", expected " +
                     tensor_shape_string(expected));
  }

 private:
  template <class T>
  static constexpr Dtype stored_dtype() {
    return std::is_same_v<T, double> ? Dtype::kF64 : Dtype::kF32;
  }

  /// Whether convert_range converts dtype d to T.
  template <class T>
  static constexpr bool readable_as(Dtype d) {
    if constexpr (std::is_floating_point_v<T>) {
      return d == Dtype::kF32 || d == Dtype::kF64 || d == Dtype::kF16 || d == Dtype::kBF16;
    } else {
      return d == Dtype::kBool || d == Dtype::kU8 || d == Dtype::kI8 || d == Dtype::kU16 ||
             d == Dtype::kI16 || d == Dtype::kU32 || d == Dtype::kI32 || d == Dtype::kU64 ||
             d == Dtype::kI64;
    }
  }

  template <class U>
  static U load(const unsigned char* p) {
    U u;
    std::memcpy(&u, p, sizeof(U));
    return u;
  }

  template <class T>
  void convert_into(std::string_view name, const TensorInfo& t, T* out) const {
    convert_range(name, t, out, 0, t.numel());
  }

  /// Elements [first, first + n) of tensor t, converted into out[0..n).
  template <class T>
  void convert_range(std::string_view name, const TensorInfo& t, T* out, std::int64_t first,
                     std::int64_t n) const {
    static_assert(std::endian::native == std::endian::little,
                  "kappa: safetensors reading assumes a little-endian host");
    auto unsupported = [&](std::string_view wanted) {
      detail::st_fail(path_, t.file_offset, name,
                      "dtype " + std::string(dtype_name(t.dtype)) + " cannot be read as " +
                          std::string(wanted));
    };
    constexpr std::string_view kFloats = "floating point (kappa converts F32, F64, F16, BF16)";
    constexpr std::string_view kInts = "an integer (kappa converts BOOL, U8..U64, I8..I64)";
    if (!readable_as<T>(t.dtype)) unsupported(std::is_floating_point_v<T> ? kFloats : kInts);
    if (n == 0) return;  // an empty tensor (out may be null)
    const unsigned char* src = map_.data() + t.file_offset + first * dtype_bits(t.dtype) / 8;
    if constexpr (std::is_floating_point_v<T>) {
      switch (t.dtype) {
        case Dtype::kF32:
          if constexpr (std::is_same_v<T, float>) {
            std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(float));
          } else {
            for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(load<float>(src + 4 * i));
          }
          return;
        case Dtype::kF64:
          if constexpr (std::is_same_v<T, double>) {
            std::memcpy(out, src, static_cast<std::size_t>(n) * sizeof(double));
          } else {
            for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(load<double>(src + 8 * i));
          }
          return;
        case Dtype::kF16:
          for (std::int64_t i = 0; i < n; ++i)
            out[i] = static_cast<T>(f16_to_float(load<std::uint16_t>(src + 2 * i)));
          return;
        case Dtype::kBF16:
          for (std::int64_t i = 0; i < n; ++i)
            out[i] = static_cast<T>(bf16_to_float(load<std::uint16_t>(src + 2 * i)));
          return;
        default:
          unsupported(kFloats);
      }
    } else if constexpr (std::is_integral_v<T>) {
      auto copy_ints = [&]<class S>(S) {
        for (std::int64_t i = 0; i < n; ++i) {
          const S v = load<S>(src + static_cast<std::int64_t>(sizeof(S)) * i);
          if (!std::in_range<T>(v)) {
            detail::st_fail(path_, src - map_.data() + static_cast<std::int64_t>(sizeof(S)) * i,
                            name,
                            "element " + std::to_string(first + i) + " = " + std::to_string(v) +
                                " does not fit the integer type asked for");
          }
          out[i] = static_cast<T>(v);
        }
      };
      switch (t.dtype) {
        case Dtype::kBool:
        case Dtype::kU8:
          return copy_ints(std::uint8_t{});
        case Dtype::kI8:
          return copy_ints(std::int8_t{});
        case Dtype::kU16:
          return copy_ints(std::uint16_t{});
        case Dtype::kI16:
          return copy_ints(std::int16_t{});
        case Dtype::kU32:
          return copy_ints(std::uint32_t{});
        case Dtype::kI32:
          return copy_ints(std::int32_t{});
        case Dtype::kU64:
          return copy_ints(std::uint64_t{});
        case Dtype::kI64:
          return copy_ints(std::int64_t{});
        default:
          unsupported(kInts);
      }
    } else {
      static_assert(std::is_arithmetic_v<T>, "kappa: safetensors reads float, double or integers");
    }
  }

  [[noreturn]] void fail(std::int64_t byte, std::string_view tensor, std::string_view what) const {
    detail::st_fail(path_, byte, tensor, what);
  }

  /// A non-negative JSON integer as int64, or a FormatError naming `field`.
  std::int64_t json_size(const nlohmann::json& v, std::int64_t byte, std::string_view tensor,
                         std::string_view field) const {
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(byte, tensor, std::string(field) + " " + std::to_string(u) + " is too large");
      return static_cast<std::int64_t>(u);
    }
    if (v.is_number_integer())
      fail(byte, tensor,
           std::string(field) + " is negative (" + std::to_string(v.get<std::int64_t>()) + ")");
    fail(byte, tensor, std::string(field) + " must be a non-negative integer, got " + describe(v));
  }

  static std::string describe(const nlohmann::json& v) {
    if (v.is_array()) return "an array of " + std::to_string(v.size()) + " elements";
    if (v.is_string()) return kappa::quoted(v.get_ref<const std::string&>(), 64);
    if (v.is_primitive()) return v.dump().substr(0, 64);  // a number, true, false or null
    return std::string("a JSON ") + v.type_name();
  }

  void parse() {
    const std::uint64_t file_size = map_.size();
    if (file_size < 8)
      fail(0, "",
           "file too short (" + std::to_string(file_size) + " bytes) for the 8-byte header length");
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(map_.data()[i]) << (8 * i);
    // The number itself is not shown: in a file that is not safetensors at
    // all (a link to some other file) it is 8 arbitrary bytes.
    if (n > kMaxHeaderBytes) {
      fail(0, "",
           "the header length (bytes 0-7, little-endian) exceeds the limit of " +
               std::to_string(kMaxHeaderBytes) +
               " bytes: implausible, is this a safetensors file?");
    }
    if (n > file_size - 8) {
      fail(0, "",
           "the header length (bytes 0-7, little-endian) runs past the end of the file (" +
               std::to_string(file_size) + " bytes): implausible, is this a safetensors file?");
    }
    data_offset_ = static_cast<std::int64_t>(8 + n);
    const std::int64_t data_size = static_cast<std::int64_t>(file_size) - data_offset_;
    const std::string_view text(reinterpret_cast<const char*>(map_.data() + 8), n);
    if (text.empty() || text[0] != '{') fail(8, "", "the header does not start with '{'");
    // Nesting is bounded before anything recurses into it (copies, dumps).
    if (const auto deep = json_too_deep(text))
      fail(8 + static_cast<std::int64_t>(*deep), "",
           "the header nests arrays/objects deeper than " + std::to_string(kMaxJsonDepth) +
               " levels");
    // nlohmann's parser stops at a NUL byte as at the end of input, which
    // would let bytes after it hide in the header; JSON text has none.
    if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos)
      fail(8 + static_cast<std::int64_t>(nul), "",
           "the header contains a NUL byte (JSON has none)");

    // Parse in one linear pass, rejecting duplicate keys at any depth
    // (nlohmann's DOM keeps the last).
    detail::UniqueKeyJsonBuilder sax;
    if (!nlohmann::json::sax_parse(text.begin(), text.end(), &sax) || sax.error) {
      const std::int64_t at = 8 + static_cast<std::int64_t>(sax.error_byte);
      if (sax.error_is_number)
        fail(at, "", "the header cannot be parsed: " + sax.error.value_or(""));
      fail(at, "", "the header is not valid JSON: " + sax.error.value_or(""));
    }
    const nlohmann::json& header = sax.root;
    if (!header.is_object())
      fail(8, "", std::string("the header is a JSON ") + header.type_name() + ", not an object");
    const std::vector<std::string>& top_keys = sax.top_keys;
    // Byte offset of each top-level key, for messages.
    const std::vector<std::size_t> offsets = detail::top_level_key_offsets(text);
    const auto key_byte = [&](std::size_t i) -> std::int64_t {
      return 8 + static_cast<std::int64_t>(
                     i < offsets.size() && offsets.size() == top_keys.size() ? offsets[i] : 0);
    };
    if (sax.duplicate) {
      const std::string& entry_name = top_keys[sax.duplicate_entry];
      if (sax.duplicate_at_top)
        fail(key_byte(sax.duplicate_entry), *sax.duplicate, "the header lists this key twice");
      fail(key_byte(sax.duplicate_entry), entry_name == "__metadata__" ? std::string() : entry_name,
           "duplicate key " + detail::shown_name(*sax.duplicate) + " in the header");
    }
    std::unordered_map<std::string_view, std::int64_t> key_at;
    key_at.reserve(top_keys.size());
    for (std::size_t i = 0; i < top_keys.size(); ++i) key_at.emplace(top_keys[i], key_byte(i));

    struct Span {
      std::int64_t begin, end;
      const std::string* name;
    };
    std::vector<Span> spans;
    for (const auto& [name, entry] : header.items()) {
      const auto found_at = key_at.find(name);
      const std::int64_t at = found_at != key_at.end() ? found_at->second : 8;
      if (name == "__metadata__") {
        if (!entry.is_object())
          fail(at, "", "\"__metadata__\" must be an object of strings, got " + describe(entry));
        for (const auto& [k, v] : entry.items()) {
          if (!v.is_string()) {
            fail(at, "",
                 "\"__metadata__\" value of " + detail::shown_name(k) + " must be a string, got " +
                     describe(v));
          }
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      if (!entry.is_object()) fail(at, name, "entry must be an object, got " + describe(entry));
      for (const auto& [k, v] : entry.items()) {
        (void)v;
        if (k != "dtype" && k != "shape" && k != "data_offsets")
          fail(at, name,
               "unexpected field " + detail::shown_name(k) +
                   " (expected dtype, shape, data_offsets)");
      }
      TensorInfo t;
      // dtype
      const auto d = entry.find("dtype");
      if (d == entry.end()) fail(at, name, "missing \"dtype\"");
      if (!d->is_string()) fail(at, name, "\"dtype\" must be a string, got " + describe(*d));
      const auto dt = parse_dtype(d->get_ref<const std::string&>());
      if (!dt)
        fail(at, name, "unknown dtype " + detail::shown_name(d->get_ref<const std::string&>()));
      t.dtype = *dt;
      // shape
      const auto s = entry.find("shape");
      if (s == entry.end()) fail(at, name, "missing \"shape\"");
      if (!s->is_array()) fail(at, name, "\"shape\" must be an array, got " + describe(*s));
      for (const auto& dim : *s) t.shape.push_back(json_size(dim, at, name, "shape dimension"));
      // data_offsets
      const auto o = entry.find("data_offsets");
      if (o == entry.end()) fail(at, name, "missing \"data_offsets\"");
      if (!o->is_array() || o->size() != 2)
        fail(at, name, "\"data_offsets\" must be an array [begin, end], got " + describe(*o));
      t.begin = json_size((*o)[0], at, name, "data_offsets begin");
      t.end = json_size((*o)[1], at, name, "data_offsets end");
      const std::string offsets_text =
          "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
      if (t.begin > t.end) fail(at, name, offsets_text + " are reversed (begin > end)");
      if (t.end > data_size) {
        fail(at, name,
             offsets_text + " end past the data section (" + std::to_string(data_size) +
                 " bytes from byte " + std::to_string(data_offset_) + ")");
      }
      t.file_offset = data_offset_ + t.begin;
      // Element count and byte count, overflow-checked.
      std::int64_t count = 1, cols = 1, bits = 0;
      try {
        for (std::int64_t dim : t.shape)
          count =
              checked_mul("element count", count, dim, std::numeric_limits<std::int64_t>::max());
        for (std::size_t i = 1; i < t.shape.size(); ++i)
          cols = checked_mul("columns", cols, t.shape[i], std::numeric_limits<std::int64_t>::max());
        bits = checked_mul("bit count", count, dtype_bits(t.dtype),
                           std::numeric_limits<std::int64_t>::max());
      } catch (const RangeError& e) {
        std::string_view why = e.what();
        if (why.starts_with("kappa: ")) why.remove_prefix(7);
        fail(at, name,
             "shape " + tensor_shape_string(t.shape) + " overflows (" + std::string(why) + ")");
      }
      if (bits % 8 != 0) {
        fail(at, name,
             "shape " + tensor_shape_string(t.shape) + " of " + std::string(dtype_name(t.dtype)) +
                 " is not a whole number of bytes");
      }
      if (bits / 8 != t.bytes()) {
        fail(at, name,
             offsets_text + " hold " + std::to_string(t.bytes()) + " bytes, but shape " +
                 tensor_shape_string(t.shape) + " of " + std::string(dtype_name(t.dtype)) +
                 " needs " + std::to_string(bits / 8));
      }
      auto [it, inserted] = tensors_.emplace(name, std::move(t));
      (void)inserted;  // duplicates were rejected above
      spans.push_back({it->second.begin, it->second.end, &it->first});
    }

    // Coverage: sorted by (begin, end), each tensor starts where the previous
    // ends, and the last ends at the end of the file.
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::int64_t covered = 0;
    const std::string* previous = nullptr;
    for (const Span& sp : spans) {
      if (sp.begin < covered) {
        fail(data_offset_ + sp.begin, *sp.name,
             "data_offsets [" + std::to_string(sp.begin) + ", " + std::to_string(sp.end) +
                 "] overlap tensor " + detail::shown_name(previous ? *previous : std::string()) +
                 ", which ends at " + std::to_string(covered));
      }
      if (sp.begin > covered) {
        fail(data_offset_ + covered, *sp.name,
             "data section bytes [" + std::to_string(covered) + ", " + std::to_string(sp.begin) +
                 ") before this tensor belong to no tensor (the format forbids holes)");
      }
      covered = sp.end;
      previous = sp.name;
    }
    if (covered != data_size) {
      fail(data_offset_ + covered, "",
           "the data section has " + std::to_string(data_size - covered) +
               " bytes after the last tensor's data (the format forbids unindexed bytes)");
    }
  }

  std::string path_;
  detail::MappedFile map_;
  std::int64_t data_offset_ = 0;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// ---- A Hugging Face model directory ------------------------------------------------

/// The weights of a Hugging Face model directory: either one
/// `model.safetensors`, or shards listed by `model.safetensors.index.json`
///   {"metadata": {...}, "weight_map": {"<tensor name>": "<shard file>", ...}}
/// (a path to a single .safetensors file, or to an index file anywhere with
/// its shards beside it, is accepted too).
///
/// Validation on opening, each failure a FormatError naming the file, the
/// tensor where one applies and a byte offset (of the name in the index):
///  - the index and every shard are regular files after following symbolic
///    links (a FIFO, socket, device or directory is refused without
///    blocking);
///  - the index is at most 100 MB (kMaxHeaderBytes) of valid JSON nested at
///    most kMaxJsonDepth (128) deep, an object whose "weight_map" is an
///    object of strings ("metadata", if present, is kept as is and exposed
///    by index_metadata());
///  - every shard name is a relative path inside the directory: not empty,
///    not absolute, no ".." component (symbolic links are followed as the
///    file system resolves them: the Hugging Face cache links snapshots to
///    blobs elsewhere);
///  - every shard exists and passes SafetensorsFile's validation. Each
///    distinct file is opened and validated once, however many spellings of
///    its name the index uses ("a", "./a", "x//../a" is refused, a link to
///    it): names are resolved to the file (st_dev, st_ino) first;
///  - every tensor the index lists is present in its shard.
/// Tensors a shard holds but the index does not list are not reachable;
/// tensors the model does not ask for are simply never read.
class Checkpoint {
 public:
  static constexpr std::string_view kSingleFile = "model.safetensors";
  static constexpr std::string_view kIndexFile = "model.safetensors.index.json";

  /// Opens the model directory `path` (index first, then model.safetensors),
  /// the single .safetensors file `path`, or the index `path` (a file whose
  /// name ends in ".json"; its shard names are relative to its own
  /// directory). Shards are memory-mapped, not read.
  /// \throws FormatError as listed above, or naming the directory and the
  ///         files looked for when it holds neither.
  explicit Checkpoint(const std::filesystem::path& path) : dir_(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      dir_ = path.parent_path();
      if (path.extension() == ".json")
        open_index(path);
      else
        open_single(path);
      return;
    }
    if (!fs::is_directory(path, ec)) {
      detail::st_fail(path.string(), -1, "", "is neither a directory nor a file");
    }
    if (fs::exists(path / kIndexFile, ec)) {
      open_index(path / kIndexFile);
    } else if (fs::exists(path / kSingleFile, ec)) {
      open_single(path / kSingleFile);
    } else {
      detail::st_fail(
          path.string(), -1, "",
          "holds neither " + std::string(kIndexFile) + " nor " + std::string(kSingleFile));
    }
  }

  /// The model directory.
  [[nodiscard]] const std::filesystem::path& directory() const { return dir_; }
  /// The opened files (one, or the distinct shard files in the index's order
  /// of first use; a file named several ways is opened once, under the first
  /// spelling, lexically normalized: "./a" opens as `DIR/a`).
  [[nodiscard]] const std::vector<SafetensorsFile>& files() const { return files_; }
  /// The index's "metadata" (null without an index).
  [[nodiscard]] const nlohmann::json& index_metadata() const { return index_metadata_; }

  /// All tensor names, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(where_.size());
    for (const auto& [name, file] : where_) out.push_back(name);
    return out;
  }
  [[nodiscard]] bool has(std::string_view name) const { return where_.find(name) != where_.end(); }

  /// The file holding tensor `name`.
  /// \throws FormatError naming the tensor and the files searched.
  [[nodiscard]] const SafetensorsFile& file_of(std::string_view name) const {
    const auto it = where_.find(name);
    if (it == where_.end()) {
      detail::st_fail(dir_.string(), -1, name,
                      "not in the checkpoint (searched " + searched_ + ")");
    }
    return files_[it->second];
  }
  /// dtype, shape and offsets of tensor `name` in its file.
  [[nodiscard]] const TensorInfo& info(std::string_view name) const {
    return file_of(name).info(name);
  }

  /// SafetensorsFile::can_view / view / matrix / row_vector / matrix_into /
  /// require_shape
  /// on the file holding `name`.
  template <class T>
  [[nodiscard]] bool can_view(std::string_view name) const {
    return file_of(name).template can_view<T>(name);
  }
  template <class T>
  [[nodiscard]] Eigen::Map<const RowMatrix<T>> view(std::string_view name) const {
    return file_of(name).template view<T>(name);
  }
  template <class T>
  [[nodiscard]] RowMatrix<T> matrix(std::string_view name) const {
    return file_of(name).template matrix<T>(name);
  }
  template <class T>
  [[nodiscard]] RowMatrix<T> matrix(std::string_view name,
                                    const std::vector<std::int64_t>& expected) const {
    return file_of(name).template matrix<T>(name, expected);
  }
  template <class T>
  [[nodiscard]] RowVector<T> row_vector(std::string_view name) const {
    return file_of(name).template row_vector<T>(name);
  }
  template <class T>
  void matrix_into(std::string_view name, MatrixRef<T> out) const {
    file_of(name).template matrix_into<T>(name, out);
  }
  void require_shape(std::string_view name, const std::vector<std::int64_t>& expected) const {
    file_of(name).require_shape(name, expected);
  }

 private:
  void open_single(const std::filesystem::path& file) {
    files_.emplace_back(file.string());
    for (const std::string& name : files_.back().names()) where_.emplace(name, 0);
    searched_ = file.string();
  }

  void open_index(const std::filesystem::path& index_path) {
    namespace fs = std::filesystem;
    const std::string index_name = index_path.string();
    std::string text;
    nlohmann::json index;
    try {
      // Regular files only (a FIFO would block), bounded in size, nesting
      // bounded before parsing.
      text = read_regular_file(index_name, SafetensorsFile::kMaxHeaderBytes);
      index = parse_json(text, index_name);
    } catch (const FormatError& e) {
      std::string_view what = e.what();  // "kappa: <file>: ..."
      if (what.starts_with("kappa: ")) what.remove_prefix(7);
      throw FormatError("kappa: safetensors: " + std::string(what));
    }
    if (!index.is_object()) {
      detail::st_fail(index_name, 0, "",
                      std::string("the index is a JSON ") + index.type_name() + ", not an object");
    }
    if (const auto m = index.find("metadata"); m != index.end()) index_metadata_ = std::move(*m);
    const auto map = index.find("weight_map");
    if (map == index.end()) detail::st_fail(index_name, 0, "", "missing \"weight_map\"");
    if (!map->is_object()) {
      detail::st_fail(
          index_name, 0, "",
          std::string("\"weight_map\" must be an object, got a JSON ") + map->type_name());
    }
    // Where a tensor's name appears in the index, for messages.
    auto byte_of = [&](const std::string& name) -> std::int64_t {
      const std::string quoted = nlohmann::json(name).dump();
      const std::size_t at = text.find(quoted);
      return at == std::string::npos ? 0 : static_cast<std::int64_t>(at);
    };
    // Each shard name as written -> its file, and each file (st_dev, st_ino)
    // -> its index in files_: every spelling of one file ("a", "./a", ".//a",
    // "sub/../a" is refused below, a link to it) maps to one SafetensorsFile,
    // opened and validated once.
    std::unordered_map<std::string, std::size_t> by_spelling;
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t> by_identity;
    for (const auto& [name, shard] : map->items()) {
      if (!shard.is_string()) {
        detail::st_fail(
            index_name, byte_of(name), name,
            std::string("shard must be a file name (string), got a JSON ") + shard.type_name());
      }
      const std::string& shard_name = shard.get_ref<const std::string&>();
      auto found = by_spelling.find(shard_name);
      if (found == by_spelling.end()) {
        const fs::path rel(shard_name);
        bool escapes = shard_name.empty() || rel.is_absolute() || rel.has_root_name() ||
                       rel.has_root_directory() || shard_name.find('\0') != std::string::npos;
        for (const fs::path& part : rel) escapes = escapes || part == "..";
        if (escapes) {
          detail::st_fail(index_name, byte_of(name), name,
                          "shard " + detail::shown_name(shard_name) +
                              " is not a relative path inside the directory");
        }
        const fs::path shard_path = dir_ / rel.lexically_normal();
        struct stat st {};
        if (::stat(shard_path.c_str(), &st) != 0) {
          detail::st_fail(
              index_name, byte_of(name), name,
              "shard " + detail::shown_name(shard_name) + " does not exist in " + dir_.string());
        }
        if (!S_ISREG(st.st_mode)) {
          detail::st_fail(index_name, byte_of(name), name,
                          "shard " + detail::shown_name(shard_name) + " in " + dir_.string() +
                              " is not a regular file (a directory, FIFO, socket or device)");
        }
        const std::pair<std::uint64_t, std::uint64_t> identity{
            static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
        auto file = by_identity.find(identity);
        if (file == by_identity.end()) {
          files_.emplace_back(shard_path.string());
          file = by_identity.emplace(identity, files_.size() - 1).first;
        }
        found = by_spelling.emplace(shard_name, file->second).first;
      }
      const SafetensorsFile& file = files_[found->second];
      if (!file.has(name)) {
        detail::st_fail(index_name, byte_of(name), name,
                        "listed in shard " + detail::shown_name(shard_name) +
                            ", which does not hold it (" + file.path() + " has " +
                            std::to_string(file.size()) + " tensors)");
      }
      where_.emplace(name, found->second);
    }
    searched_ = index_name + " and its " + std::to_string(files_.size()) + " shard(s)";
  }

  std::filesystem::path dir_;
  std::string searched_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t, std::less<>> where_;
  nlohmann::json index_metadata_;
};

// ---- Writing ---------------------------------------------------------------------------

/// Collects tensors and writes them as one safetensors file: header padded
/// with spaces to a multiple of 8 bytes, tensors ordered by element size
/// (largest first) then name, so that every tensor's data is aligned to its
/// element size and view() works on the result.
///
/// \code
///   kappa::io::SafetensorsWriter w;
///   w.add("w_q", w_q);                                   // F32 for float
///   w.add("bias", b, kappa::io::Storage::kBF16, {d});    // 1-d, BF16
///   w.write("model.safetensors");
/// \endcode
class SafetensorsWriter {
 public:
  /// Adds `m` as tensor `name` stored as `storage` (F16/BF16 round to nearest
  /// even). `shape` defaults to {rows, cols}; any shape whose product is
  /// m.size() may be given ({} for a 1 x 1 scalar, {n} for a vector, or a
  /// rank-3 shape); the elements are m's in row-major order.
  /// \throws ShapeError when the shape's product differs from m.size();
  ///         FormatError when `name` is already added or is "__metadata__".
  template <class Derived>
  void add(const std::string& name, const Eigen::MatrixBase<Derived>& m, Storage storage,
           std::optional<std::vector<std::int64_t>> shape = std::nullopt) {
    using T = typename Derived::Scalar;
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "kappa: SafetensorsWriter::add writes float or double matrices");
    static_assert(std::endian::native == std::endian::little,
                  "kappa: the safetensors writer assumes a little-endian host");
    if (name == "__metadata__" || entries_.contains(name)) {
      throw FormatError("kappa: safetensors: writer: tensor " + detail::shown_name(name) +
                        " is added twice or uses a reserved name");
    }
    std::vector<std::int64_t> dims = shape ? *shape : std::vector<std::int64_t>{m.rows(), m.cols()};
    std::int64_t count = 1;
    for (std::int64_t d : dims) count = checked_mul("safetensors writer shape", count, d);
    if (count != m.size()) {
      throw ShapeError("kappa: safetensors: writer: tensor " + detail::shown_name(name) +
                       " has shape " + tensor_shape_string(dims) + " but the matrix is " +
                       shape_of(m));
    }
    const RowMatrix<T> rm = m;  // row-major element order
    Entry e;
    e.shape = std::move(dims);
    switch (storage) {
      case Storage::kF64:
        e.dtype = Dtype::kF64;
        append_as<double>(rm, e.bytes, [](T v) { return static_cast<double>(v); });
        break;
      case Storage::kF32:
        e.dtype = Dtype::kF32;
        append_as<float>(rm, e.bytes, [](T v) { return static_cast<float>(v); });
        break;
      case Storage::kF16:
        e.dtype = Dtype::kF16;
        append_as<std::uint16_t>(rm, e.bytes, [](T v) { return f16_from_double(v); });
        break;
      case Storage::kBF16:
        e.dtype = Dtype::kBF16;
        append_as<std::uint16_t>(rm, e.bytes, [](T v) { return bf16_from_double(v); });
        break;
    }
    entries_.emplace(name, std::move(e));
  }

  /// Adds `m` in its own precision (F32 for float, F64 for double).
  template <class Derived>
  void add(const std::string& name, const Eigen::MatrixBase<Derived>& m) {
    add(name, m, std::is_same_v<typename Derived::Scalar, double> ? Storage::kF64 : Storage::kF32);
  }

  /// Sets "__metadata__"[key] = value.
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  /// Writes the file. \throws FormatError naming the path when writing fails.
  void write(const std::string& path) const {
    std::vector<const std::pair<const std::string, Entry>*> order;
    for (const auto& kv : entries_) order.push_back(&kv);
    std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
      return dtype_bits(a->second.dtype) > dtype_bits(b->second.dtype);
    });
    // The header text is built entry by entry (an ordered_json object would
    // search its keys linearly on every insertion: quadratic in tensors).
    std::string text = "{";
    if (!metadata_.empty())
      text.append("\"__metadata__\":").append(nlohmann::json(metadata_).dump());
    std::int64_t offset = 0;
    for (const auto* kv : order) {
      const Entry& e = kv->second;
      const auto size = static_cast<std::int64_t>(e.bytes.size());
      const nlohmann::ordered_json entry = {{"dtype", std::string(dtype_name(e.dtype))},
                                            {"shape", e.shape},
                                            {"data_offsets", {offset, offset + size}}};
      if (text.size() > 1) text += ',';
      text.append(nlohmann::json(kv->first).dump()).append(1, ':').append(entry.dump());
      offset += size;
    }
    text += '}';
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out)
      throw FormatError("kappa: safetensors: " + path + ": byte 0: cannot open for writing");
    const std::uint64_t n = text.size();
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xffu);
    out.write(len, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto* kv : order)
      out.write(kv->second.bytes.data(), static_cast<std::streamsize>(kv->second.bytes.size()));
    out.flush();
    if (!out) throw FormatError("kappa: safetensors: " + path + ": write failed");
  }

 private:
  struct Entry {
    Dtype dtype = Dtype::kF32;
    std::vector<std::int64_t> shape;
    std::string bytes;
  };

  template <class U, class T, class F>
  static void append_as(const RowMatrix<T>& m, std::string& bytes, F convert) {
    bytes.resize(static_cast<std::size_t>(m.size()) * sizeof(U));
    for (Index i = 0; i < m.size(); ++i) {
      const U u = convert(m.data()[i]);
      std::memcpy(bytes.data() + static_cast<std::size_t>(i) * sizeof(U), &u, sizeof(U));
    }
  }

  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Writes every matrix of `tensors` (name -> rows x cols) to `path` as one
/// safetensors file, stored as `storage` (default: F32 for float, F64 for
/// double; F16 and BF16 round to nearest even), with optional "__metadata__".
/// \throws FormatError naming the path when writing fails.
template <class T>
void write_safetensors(const std::string& path, const std::map<std::string, RowMatrix<T>>& tensors,
                       Storage storage = std::is_same_v<T, double> ? Storage::kF64 : Storage::kF32,
                       const std::map<std::string, std::string>& metadata = {}) {
  SafetensorsWriter w;
  for (const auto& [name, m] : tensors) w.add(name, m, storage);
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  w.write(path);
}

}  // namespace kappa::io
