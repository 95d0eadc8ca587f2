// tests/transformer/model_data.hpp - the tiny reference model directories of
// tests/data/models (made by tests/reference/make_models.py) and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

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
