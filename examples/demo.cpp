// demo: placeholder, replaced by the paper's walk-through below.
#include <kappa/kappa.hpp>

#include <iostream>

int main() {
  kappa::RowMatrix<double> x(3, 2);
  x << 1, 0, 0, 1, 1, 1;
  std::cout << kappa::attention(x, x, x) << "\n";
}
