// Fuzz target: the .npy reader (include/kappa/io/npy.hpp).
//
// Input: a .npy file. It is handed to the reader through an in-memory file
// (memfd), so the fuzzer exercises the real path-taking API. Properties:
//   * parse_npy_header, read_npy<T> (T = float, double, int64) and
//     read_npy_matrix<T> either succeed or throw kappa::FormatError; no
//     sanitizer report, memory bounded by the file size;
//   * a successful read has prod(shape) values;
//   * a matrix read as double, written with write_npy and read again, is the
//     same matrix (NaN where NaN).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "kappa/io/npy.hpp"

namespace {

template <class T>
void read_as(const std::string& path) {
  try {
    const kappa::io::NpyArray<T> a = kappa::io::read_npy<T>(path);
    kappa::Index n = 1;
    for (kappa::Index s : a.shape) n *= s;
    KAPPA_FUZZ_CHECK(static_cast<std::size_t>(n) == a.values.size(), "values != prod(shape)");
  } catch (const kappa::FormatError&) {
  }
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kappa::fuzz::MemFile in("kappa-fuzz-npy-in"), out("kappa-fuzz-npy-out");
  const std::string_view bytes = kappa::fuzz::as_text(data, size);
  try {
    (void)kappa::io::parse_npy_header(bytes, "fuzz.npy");
  } catch (const kappa::FormatError&) {
  }
  in.assign(bytes);
  const std::string path = in.path();
  read_as<float>(path);
  read_as<double>(path);
  read_as<std::int64_t>(path);
  kappa::RowMatrix<double> m;
  try {
    (void)kappa::io::read_npy_matrix<float>(path);
    m = kappa::io::read_npy_matrix<double>(path);
  } catch (const kappa::FormatError&) {
    return 0;
  }
  kappa::io::write_npy(out.path(), m);
  const kappa::RowMatrix<double> again = kappa::io::read_npy_matrix<double>(out.path());
  KAPPA_FUZZ_CHECK(again.rows() == m.rows() && again.cols() == m.cols(),
                   "write_npy changed the shape");
  for (kappa::Index i = 0; i < m.size(); ++i)
    KAPPA_FUZZ_CHECK(same(again.data()[i], m.data()[i]), "write_npy changed a value");
  return 0;
}
