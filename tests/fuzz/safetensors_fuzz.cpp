// Fuzz target: the safetensors reader (include/kappa/io/safetensors.hpp).
//
// Input: a .safetensors file, handed over as an in-memory file (memfd) so the
// real path-taking, memory-mapping API is exercised. Properties:
//   * opening either succeeds or throws kappa::FormatError (the header is
//     validated before anything is read: no sanitizer report, no exception
//     of another type, memory bounded by the file size);
//   * every tensor of a file that opens reads as float, double and int64 or
//     throws FormatError; a matrix has rows() x cols() == numel() elements;
//     view<T>() works exactly when can_view<T>() says so and equals matrix<T>();
//   * the tensors that read as float, written with write_safetensors (F32)
//     and opened again, read back bit for bit.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "fuzz_common.hpp"
#include "kappa/io/safetensors.hpp"

namespace {

template <class T>
bool read_as(const kappa::io::SafetensorsFile& f, const std::string& name,
             kappa::RowMatrix<T>* out) {
  const kappa::io::TensorInfo& t = f.info(name);
  try {
    kappa::RowMatrix<T> m = f.matrix<T>(name);
    KAPPA_FUZZ_CHECK(m.rows() == t.rows() && m.cols() == t.cols() && m.size() == t.numel(),
                     "matrix<T>() has the wrong shape for " + name);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (f.can_view<T>(name)) {
        const Eigen::Map<const kappa::RowMatrix<T>> v = f.view<T>(name);
        KAPPA_FUZZ_CHECK(
            v.size() == m.size() &&
                (v.size() == 0 || std::memcmp(v.data(), m.data(),
                                              sizeof(T) * static_cast<std::size_t>(m.size())) == 0),
            "view<T>() differs from matrix<T>() for " + name);
      }
    }
    if (out != nullptr) *out = std::move(m);
    return true;
  } catch (const kappa::FormatError&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kappa::fuzz::MemFile in("kappa-fuzz-safetensors-in"),
      out("kappa-fuzz-safetensors-out");
  in.assign(kappa::fuzz::as_text(data, size));
  std::map<std::string, kappa::RowMatrix<float>> floats;
  try {
    const kappa::io::SafetensorsFile f(in.path());
    for (const std::string& name : f.names()) {
      kappa::RowMatrix<float> m;
      const bool is_float = read_as<float>(f, name, &m);
      (void)read_as<double>(f, name, nullptr);
      (void)read_as<std::int64_t>(f, name, nullptr);
      if (f.info(name).shape.size() <= 1) {
        try {
          (void)f.row_vector<double>(name);
        } catch (const kappa::FormatError&) {
        }
      }
      if (is_float && f.info(name).dtype == kappa::io::Dtype::kF32)
        floats.emplace(name, std::move(m));
    }
  } catch (const kappa::FormatError&) {
    return 0;
  }
  if (floats.empty()) return 0;
  kappa::io::write_safetensors(out.path(), floats);
  const kappa::io::SafetensorsFile again(out.path());
  KAPPA_FUZZ_CHECK(again.size() == floats.size(), "write_safetensors lost tensors");
  for (const auto& [name, m] : floats) {
    const kappa::RowMatrix<float> r = again.matrix<float>(name);
    KAPPA_FUZZ_CHECK(
        r.rows() == m.rows() && r.cols() == m.cols() &&
            (m.size() == 0 || std::memcmp(r.data(), m.data(),
                                          sizeof(float) * static_cast<std::size_t>(m.size())) == 0),
        "write_safetensors round trip changed " + name);
  }
  return 0;
}
