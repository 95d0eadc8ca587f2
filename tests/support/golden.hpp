// tests/support/golden.hpp - reads the named-matrix text files written by the
// scripts in tests/reference/ ("name rows cols" then rows of numbers).
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "kappa/core/matrix.hpp"

namespace kappa::testing {

/// All matrices of a golden text file, by name, in double.
inline std::map<std::string, RowMatrix<double>> read_golden(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  std::map<std::string, RowMatrix<double>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream head(line);
    std::string name;
    Index rows = 0, cols = 0;
    if (!(head >> name >> rows >> cols))
      throw std::runtime_error("bad header in " + path + ": " + line);
    RowMatrix<double> m(rows, cols);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j)
        if (!(in >> m(i, j))) throw std::runtime_error("short matrix " + name + " in " + path);
    out.emplace(name, std::move(m));
  }
  return out;
}

}  // namespace kappa::testing
