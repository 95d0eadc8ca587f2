// kappa/io/gguf_writer.hpp - writing GGUF files (version 3), the format
// kappa/io/gguf.hpp reads and llama.cpp loads.
//
// Layout written (gguf.hpp's file comment has the format):
//   "GGUF", version 3, tensor count, key count;
//   the metadata in the order set() first saw each key;
//   the tensor table in the order add_tensor() was called, each offset the
//   previous tensor's end rounded up to the alignment;
//   zeros up to the alignment, then each tensor's bytes followed by zeros up
//   to the alignment.
// The alignment is general.alignment when it is set (a u32 power of two),
// else 32. This is the byte layout of ggml's own writer: a file GgufFile read
// from ggml's writer, written back with every key and tensor in its order,
// gives the same bytes (tests/io/gguf_writer_test.cpp checks it on files
// ggml wrote).
//
// Tensors come as their stored bytes (any type GgufFile reads, blocks along
// the innermost dimension) or as a float matrix that the writer encodes:
// F32, F16 and BF16 (round to nearest even), Q8_0 and Q4_0 (ggml's reference
// quantizers, byte for byte: kappa/core/quant_blocks.hpp). A matrix of r
// rows and c columns is the GGUF tensor with dims {c, r}: one matrix row per
// GGUF row, as GgufFile reads it back.
//
// Errors: an empty or repeated tensor name, dims that are not 1 to 4 positive
// sizes, a row length that is not a multiple of the type's block, bytes that
// do not match the dims, an alignment that is not a power of two, a type
// kappa cannot encode: std::invalid_argument naming the tensor or key.
// write() throws kappa::FormatError naming the path if it cannot be written.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/quant_blocks.hpp"
#include "kappa/io/gguf.hpp"

namespace kappa::io {

/// Builds a GGUF file in memory and writes it (see the file comment).
class GgufWriter {
 public:
  /// Sets metadata `key` (a new key goes last; an existing one keeps its
  /// place). \throws std::invalid_argument for an empty key.
  void set(std::string key, GgufValue value) {
    if (key.empty()) throw std::invalid_argument("kappa: GgufWriter: empty metadata key");
    for (auto& [k, v] : kv_)
      if (k == key) {
        v = std::move(value);
        return;
      }
    kv_.emplace_back(std::move(key), std::move(value));
  }

  /// Adds a tensor from its stored bytes: `dims` innermost first (dims[0] is
  /// the row length, a multiple of the type's block size), `bytes` the rows
  /// one after another. \throws std::invalid_argument naming the tensor.
  void add_tensor(std::string name, GgmlType type, std::vector<std::int64_t> dims,
                  std::vector<unsigned char> bytes) {
    const auto fail = [&](const std::string& what) {
      throw std::invalid_argument("kappa: GgufWriter: tensor " + kappa::quoted(name) + ": " + what);
    };
    if (name.empty()) throw std::invalid_argument("kappa: GgufWriter: empty tensor name");
    for (const Tensor& t : tensors_)
      if (t.name == name) fail("added twice");
    if (dims.empty() || dims.size() > 4) fail(std::to_string(dims.size()) + " dims (1 to 4)");
    const GgmlTypeInfo& info = kGgmlTypes[static_cast<std::uint32_t>(type)];
    std::uint64_t rows = 1;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] <= 0) fail("dimension " + std::to_string(i) + " is " + std::to_string(dims[i]));
      if (i > 0) rows = checked_mul(rows, static_cast<std::uint64_t>(dims[i]), name);
    }
    if (dims[0] % info.block_size != 0)
      fail("row length " + std::to_string(dims[0]) + " is not a multiple of " +
           std::string(info.name) + "'s block of " + std::to_string(info.block_size));
    const std::uint64_t row_bytes = static_cast<std::uint64_t>(dims[0] / info.block_size) *
                                    static_cast<std::uint64_t>(info.type_size);
    const std::uint64_t want = checked_mul(rows, row_bytes, name);
    if (bytes.size() != want)
      fail(std::to_string(bytes.size()) + " bytes for " + std::to_string(want) + " (" +
           std::string(info.name) + ")");
    tensors_.push_back({std::move(name), type, std::move(dims), std::move(bytes)});
  }

  /// Adds the matrix `m` (rows x cols) encoded as `type` (F32, F16, BF16,
  /// Q8_0 or Q4_0): the GGUF tensor with dims {cols, rows}.
  /// \throws std::invalid_argument naming the tensor for another type or a
  /// row length the type's block does not divide.
  void add_tensor(std::string name, const ConstMatrixRef<float>& m, GgmlType type) {
    const std::int64_t rows = m.rows(), cols = m.cols();
    const GgmlTypeInfo& info = kGgmlTypes[static_cast<std::uint32_t>(type)];
    if (cols % info.block_size != 0)
      throw std::invalid_argument("kappa: GgufWriter: tensor " + kappa::quoted(name) +
                                  ": row length " + std::to_string(cols) +
                                  " is not a multiple of " + std::string(info.name) +
                                  "'s block of " + std::to_string(info.block_size));
    const auto row_bytes = static_cast<std::size_t>(cols / info.block_size * info.type_size);
    std::vector<unsigned char> bytes(row_bytes * static_cast<std::size_t>(rows));
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) row[static_cast<std::size_t>(c)] = m(r, c);
      unsigned char* out = bytes.data() + static_cast<std::size_t>(r) * row_bytes;
      switch (type) {
        case GgmlType::kF32:
          std::memcpy(out, row.data(), row_bytes);
          break;
        case GgmlType::kF16:
        case GgmlType::kBF16:
          for (std::size_t c = 0; c < row.size(); ++c) {
            const std::uint16_t h =
                type == GgmlType::kF16 ? quant::fp16_from_float(row[c]) : bf16_from_float(row[c]);
            std::memcpy(out + 2 * c, &h, 2);
          }
          break;
        case GgmlType::kQ8_0:
          quant::quantize_row_q8_0(row.data(), out, cols);
          break;
        case GgmlType::kQ4_0:
          quant::quantize_row_q4_0(row.data(), out, cols);
          break;
        default:
          throw std::invalid_argument("kappa: GgufWriter: tensor " + kappa::quoted(name) +
                                      ": kappa does not encode " + std::string(info.name) +
                                      " (F32, F16, BF16, Q8_0, Q4_0; pass the bytes instead)");
      }
    }
    add_tensor(std::move(name), type, {cols, rows}, std::move(bytes));
  }

  /// The file's bytes.
  [[nodiscard]] std::string bytes() const {
    const std::uint64_t align = alignment();
    std::string out;
    out.append("GGUF", 4);
    put<std::uint32_t>(out, 3);
    put<std::uint64_t>(out, tensors_.size());
    put<std::uint64_t>(out, kv_.size());
    for (const auto& [key, value] : kv_) {
      put_string(out, key);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(value.index()));
      put_value(out, value);
    }
    std::uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      put_string(out, t.name);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(t.dims.size()));
      for (const std::int64_t d : t.dims) put<std::uint64_t>(out, static_cast<std::uint64_t>(d));
      put<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
      put<std::uint64_t>(out, offset);
      offset = round_up(offset + t.bytes.size(), align);
    }
    out.resize(round_up(out.size(), align), '\0');
    for (const Tensor& t : tensors_) {
      out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
      out.resize(round_up(out.size(), align), '\0');
    }
    return out;
  }

  /// Writes the file. \throws FormatError naming the path if it fails.
  void write(const std::string& path) const {
    const std::string b = bytes();
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw FormatError("kappa: " + path + ": cannot be opened for writing");
    const bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
    if (std::fclose(f) != 0 || !ok)
      throw FormatError("kappa: " + path + ": writing failed (" + std::to_string(b.size()) +
                        " bytes)");
  }

  /// general.alignment if set (a u32 power of two), else 32.
  /// \throws std::invalid_argument if it is set to anything else.
  [[nodiscard]] std::uint64_t alignment() const {
    for (const auto& [k, v] : kv_) {
      if (k != "general.alignment") continue;
      const auto* a = std::get_if<std::uint32_t>(&v);
      if (a == nullptr || *a == 0 || !std::has_single_bit(*a))
        throw std::invalid_argument(
            "kappa: GgufWriter: general.alignment must be a u32 power of two");
      return *a;
    }
    return 32;
  }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<std::int64_t> dims;
    std::vector<unsigned char> bytes;
  };

  static std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& name) {
    if (b != 0 && a > UINT64_MAX / b)
      throw std::invalid_argument("kappa: GgufWriter: tensor " + kappa::quoted(name) +
                                  ": size overflows");
    return a * b;
  }
  static std::uint64_t round_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }
  static std::uint16_t bf16_from_float(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }

  template <class T>
  static void put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // little-endian hosts only, as the reader
    out.append(b, sizeof(T));
  }
  static void put_string(std::string& out, std::string_view s) {
    put<std::uint64_t>(out, s.size());
    out.append(s);
  }
  static void put_value(std::string& out, const GgufValue& value) {
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string>) {
            put_string(out, v);
          } else if constexpr (std::is_same_v<V, GgufArray>) {
            put_array(out, v);
          } else if constexpr (std::is_same_v<V, bool>) {
            out.push_back(v ? '\1' : '\0');
          } else {
            put<V>(out, v);
          }
        },
        value);
  }
  static void put_array(std::string& out, const GgufArray& a) {
    put<std::uint32_t>(out, static_cast<std::uint32_t>(a.values.index()));
    put<std::uint64_t>(out, a.size());
    std::visit(
        [&](const auto& vec) {
          using E = typename std::decay_t<decltype(vec)>::value_type;
          for (const auto& e : vec) {
            if constexpr (std::is_same_v<E, std::string>) {
              put_string(out, e);
            } else if constexpr (std::is_same_v<E, GgufArray>) {
              put_array(out, e);
            } else if constexpr (std::is_same_v<E, bool>) {
              out.push_back(e ? '\1' : '\0');
            } else {
              put<E>(out, e);
            }
          }
        },
        a.values);
  }

  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace kappa::io
