// A consumer of kappa::dist (see CMakeLists.txt): the MPI layer's headers
// compile and link against the installed package. Run on one rank it splits
// nothing and prints the plan of a layer of 32 heads over 4 ranks.
#include <cstdio>

#include "kappa/dist/communicator.hpp"
#include "kappa/dist/partition.hpp"

int main(int argc, char** argv) {
  kappa::dist::Environment env(argc, argv);
  const kappa::dist::HeadShare s = kappa::dist::share_heads(32, 8, 1, 4);
  std::printf("rank %d of %d; rank 1 of 4 would hold heads [%ld, %ld)\n",
              kappa::dist::Communicator::world().rank(), kappa::dist::Communicator::world().size(),
              static_cast<long>(s.q_begin), static_cast<long>(s.q_end));
  return s.q_begin == 8 && s.q_end == 16 ? 0 : 1;
}
