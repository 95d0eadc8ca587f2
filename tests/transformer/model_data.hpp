// tests/transformer/model_data.hpp - the tiny reference model directories of
// tests/data/models (made by tests/reference/make_models.py) and comparisons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/matrix.hpp"
#include "kappa/io/npy.hpp"

namespace kappa::testing {

inline std::filesystem::path model_dir(const std::string& name) {
  return std::filesystem::path(KAPPA_TEST_DATA_DIR) / "models" / name;
}

inline std::vector<TokenId> read_ids(const std::filesystem::path& file) {
  const RowMatrix<double> m = io::read_npy_matrix<double>(file.string());
  std::vector<TokenId> ids;
  for (Index i = 0; i < m.size(); ++i) ids.push_back(static_cast<TokenId>(m.data()[i]));
  return ids;
}

inline RowMatrix<double> read_ref(const std::string& model, const std::string& name) {
  return io::read_npy_matrix<double>((model_dir(model) / "reference" / (name + ".npy")).string());
}

/// A copy of reference model directory `model` in the temp directory, named by
/// `tag` and the process id, whose config.json `edit(nlohmann::json&)` has
/// changed; the caller removes it (and any tensors it wants gone).
template <class Edit>
std::filesystem::path edited_copy(const std::string& model, const std::string& tag, Edit&& edit) {
  namespace fs = std::filesystem;
  const fs::path out =
      fs::temp_directory_path() / ("kappa_model_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(out);
  fs::copy(model_dir(model), out, fs::copy_options::recursive);
  nlohmann::json j;
  {
    std::ifstream in(out / "config.json");
    in >> j;
  }
  edit(j);
  std::ofstream(out / "config.json") << j.dump(2);
  return out;
}

/// max |a - b| / max(1, max |b|): the error relative to the logits' scale.
template <class A>
double scaled_error(const A& a, const RowMatrix<double>& b) {
  EXPECT_EQ(a.rows(), b.rows());
  EXPECT_EQ(a.cols(), b.cols());
  if (a.rows() != b.rows() || a.cols() != b.cols()) return INFINITY;
  const RowMatrix<double> ad = a.template cast<double>();
  return (ad - b).cwiseAbs().maxCoeff() / std::max(1.0, b.cwiseAbs().maxCoeff());
}

/// The tolerance of a comparison against float64 references: 1e-10 in
/// double, 1e-4 in float (the Transformer issue's bounds).
template <class T>
constexpr double kModelTol = std::is_same_v<T, double> ? 1e-10 : 1e-4;

}  // namespace kappa::testing
