// Fuzz target: a sharded Hugging Face model directory (io::Checkpoint in
// include/kappa/io/safetensors.hpp) whose model.safetensors.index.json is the
// fuzz input.
//
// The directory is made once, in a fresh temporary directory:
//   model-00001-of-00002.safetensors   F32 scalars "t0".."t63", t<i> = i
//   model-00002-of-00002.safetensors   F32 scalars "u0".."u3", u<i> = 100 + i
//   link.safetensors                   a symbolic link to the first shard
//   sub/up.safetensors                 a link to ../model-00001-of-00002...
//   fifo.safetensors                   a FIFO (must be refused, never block)
//   dir.safetensors/                   a directory
// and the input is written as its index for every run. Properties:
//   * opening either succeeds or throws kappa::FormatError (ShapeError is
//     tolerated too); never another exception, a crash, a sanitizer report
//     or a hang (the FIFO);
//   * a directory that opens holds at most the two real shard files
//     (files().size() <= 2: however many ways the index spells a shard, and
//     through links, each file is opened once), every listed tensor reads
//     back with its value from the shard, and each tensor's file has it.

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "kappa/io/safetensors.hpp"

namespace {

namespace fs = std::filesystem;

constexpr int kFirstShardTensors = 64;
constexpr int kSecondShardTensors = 4;

/// The model directory, made on first use and removed at exit.
class ModelDir {
 public:
  ModelDir() {
    std::string tmpl = (fs::temp_directory_path() / "kappa-fuzz-index-XXXXXX").string();
    KAPPA_FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    dir_ = tmpl;
    kappa::io::SafetensorsWriter first, second;
    for (int i = 0; i < kFirstShardTensors; ++i)
      first.add("t" + std::to_string(i), kappa::RowMatrix<float>::Constant(1, 1, float(i)),
                kappa::io::Storage::kF32, std::vector<std::int64_t>{});
    for (int i = 0; i < kSecondShardTensors; ++i)
      second.add("u" + std::to_string(i), kappa::RowMatrix<float>::Constant(1, 1, float(100 + i)),
                 kappa::io::Storage::kF32, std::vector<std::int64_t>{});
    first.write((dir_ / "model-00001-of-00002.safetensors").string());
    second.write((dir_ / "model-00002-of-00002.safetensors").string());
    fs::create_symlink("model-00001-of-00002.safetensors", dir_ / "link.safetensors");
    fs::create_directories(dir_ / "sub");
    fs::create_symlink("../model-00001-of-00002.safetensors", dir_ / "sub" / "up.safetensors");
    KAPPA_FUZZ_CHECK(::mkfifo((dir_ / "fifo.safetensors").c_str(), 0600) == 0, "mkfifo failed");
    fs::create_directories(dir_ / "dir.safetensors");
  }
  ~ModelDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  ModelDir(const ModelDir&) = delete;
  ModelDir& operator=(const ModelDir&) = delete;

  [[nodiscard]] const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
};

/// The value the shards hold for tensor `name`, or -1 for a name they lack.
float expected_value(const std::string& name) {
  const auto number = [&](int limit) -> int {
    if (name.size() < 2 || name.size() > 3) return -1;
    int v = 0;
    for (std::size_t i = 1; i < name.size(); ++i) {
      if (name[i] < '0' || name[i] > '9') return -1;
      v = 10 * v + (name[i] - '0');
    }
    if (name.size() == 3 && name[1] == '0') return -1;  // "t05" is not a tensor
    return v < limit ? v : -1;
  };
  if (name.starts_with('t')) return float(number(kFirstShardTensors));
  if (name.starts_with('u')) {
    const int v = number(kSecondShardTensors);
    return v < 0 ? -1.0f : float(100 + v);
  }
  return -1.0f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const ModelDir model;
  {
    std::ofstream index(model.path() / "model.safetensors.index.json",
                        std::ios::binary | std::ios::trunc);
    index.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    KAPPA_FUZZ_CHECK(static_cast<bool>(index), "cannot write the index");
  }
  try {
    const kappa::io::Checkpoint c(model.path());
    KAPPA_FUZZ_CHECK(c.files().size() <= 2,
                     "a shard opened more than once: " + std::to_string(c.files().size()) +
                         " files for 2 real shards");
    for (const std::string& name : c.names()) {
      const float want = expected_value(name);
      KAPPA_FUZZ_CHECK(want >= 0, "a tensor no shard holds: " + kappa::fuzz::show(name));
      KAPPA_FUZZ_CHECK(c.file_of(name).has(name), "file_of() lacks " + kappa::fuzz::show(name));
      const kappa::RowMatrix<float> m = c.matrix<float>(name);
      KAPPA_FUZZ_CHECK(m.rows() == 1 && m.cols() == 1 && m(0, 0) == want,
                       "wrong value for " + kappa::fuzz::show(name));
    }
  } catch (const kappa::FormatError&) {
  } catch (const kappa::ShapeError&) {
  }
  return 0;
}
